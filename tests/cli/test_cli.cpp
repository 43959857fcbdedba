// The kvscope-cli contract, exercised through the real binary on the embedded models.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <set>

#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {

using Result = test::CliResult;

/// kvscope-cli with `args`; stdout, plus stderr if `merge`.
Result cli(const std::string& args, bool merge = false) { return test::run_cli(args, merge); }
std::string q(const std::filesystem::path& p) { return test::quote(p); }

TEST(CliGenerate, JsonMatchesGoldenIdsLogitsAndGreedy) {
  for (const auto& path : test::pycode_goldens()) {
    SCOPED_TRACE(path.filename().string());
    const auto g = test::read_json(path);
    const auto prompt = test::pycode_dir() / "golden/prompts" / g["prompt_file"].get<std::string>();
    const Result r = cli("generate --model " + q(test::pycode_dir()) + " --prompt-file " + q(prompt) +
                         " --bos always --max-new-tokens 32 --greedy --dump-last-logits --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["input_ids"], g["input_ids"]);
    const auto golden = g["greedy_full"].get<std::vector<int>>();
    EXPECT_EQ(j["output_ids"].get<std::vector<int>>(), std::vector<int>(golden.begin(), golden.begin() + 32));
    const auto logits = j["last_logits"].get<std::vector<float>>();
    const auto ref = g["last_logits"].get<std::vector<float>>();
    ASSERT_EQ(logits.size(), ref.size());
    double err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, double(std::abs(logits[i] - ref[i])));
    EXPECT_LE(err, 1e-3);
    EXPECT_TRUE(j["timings"].contains("prefill_ms"));
    EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_TRUE(j["text"].is_string());
  }
}

TEST(CliGenerate, Stories260KPrintsThePublishedStory) {
  const Result r = cli("generate --model " + q(test::stories_dir() / "stories260K.bin") +
                       " --prompt '' --bos always --max-new-tokens 256 --greedy --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string readme = test::read_text(test::stories_dir() / "README.md");
  const auto begin = readme.find("```\n") + 4;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"].get<std::string>(),
            readme.substr(begin, readme.find("\n```", begin) - begin));
}

TEST(CliGenerate, SeededSamplingIsReproducible) {
  const std::string args =
      "generate --model " + q(test::stories_dir()) +
      " --prompt 'Once upon a time' --max-new-tokens 20 --temperature 0.9 --top-p 0.9 --seed 5 --json";
  const Result a = cli(args), b = cli(args);
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(a.out)["output_ids"], nlohmann::json::parse(b.out)["output_ids"]);
  EXPECT_EQ(nlohmann::json::parse(a.out)["input_ids"][0], 1) << "llama2.c models take BOS by default (--bos auto)";
}

TEST(CliGenerate, BadInputsExitNonZeroNamingTheFile) {
  const auto missing = std::filesystem::temp_directory_path() / "kvscope-no-such-model";
  Result r = cli("generate --model " + q(missing) + " --prompt x", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find(missing.string() + ": no such file"), std::string::npos) << r.out;
  r = cli("generate --model " + q(test::pycode_dir()) + " --prompt-file /nonexistent/prompt.txt", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("/nonexistent/prompt.txt"), std::string::npos) << r.out;
  r = cli("generate --model " + q(test::pycode_dir()) + " --prompt x --device cuda:0 --dtype bf16", true);
  if (r.exit_code != 0) EXPECT_NE(r.out.find("cuda"), std::string::npos) << r.out;
  r = cli("generate --model " + q(test::pycode_dir()) + " --prompt '' --bos never", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("prompt is empty"), std::string::npos) << r.out;
}

// Numeric options that cannot be were taken: --temperature -1 / nan sampled at 1, an empty
// --compression-ratio meant 0, --prefill-chunk -1 was accepted, a NaN budget asked for a budget.
// Each is refused before anything loads, naming the option and the value.
TEST(CliGenerate, NumericOptionsOutsideTheirRangeAreRefusedNamingTheOption) {
  const std::string model = " --model " + q(test::stories_dir()) + " --prompt Once --max-new-tokens 2";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --temperature -1", "--temperature: -1 is outside [0, inf)"},
      {"generate --temperature nan", "--temperature: nan is not a finite number"},
      {"generate --top-p 0", "--top-p: 0 is outside (0, 1]"},
      {"generate --top-p 1.5", "--top-p: 1.5 is outside (0, 1]"},
      {"generate --prefill-chunk -1", "--prefill-chunk: -1 is outside"},
      {"generate --max-new-tokens 99999999999999999999", "--max-new-tokens: 99999999999999999999 is outside"},
      {"run --pipeline snapkv --compression-ratio ''", "--compression-ratio: '' is not a number"},
      {"run --pipeline snapkv --compression-ratio 1", "--compression-ratio: 1 is outside [0, 1)"},
      {"run --pipeline snapkv --budget -5", "--budget: -5 is outside (0, inf)"},
      {"run --pipeline snapkv --budget nan", "--budget: nan is not a finite number"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = cli(args + model, true);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
  EXPECT_EQ(cli("generate --temperature 0 --top-p 1 --prefill-chunk 0" + model).exit_code, 0) << "the range ends";
}

TEST(CliGenerate, RandomInitBuildsTheConfiguredShape) {
  const Result r =
      cli("generate --random-init " + q(test::pycode_dir() / "config.json") + " --max-new-tokens 4 --greedy --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"].size(), 4u);
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

/// Mean Jaccard over layers x KV heads of two kept[layer][head] tables.
double mean_jaccard(const nlohmann::json& a, const nlohmann::json& b) {
  double sum = 0;
  int n = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t h = 0; h < a[l].size(); ++h) {
      const auto x = a[l][h].get<std::vector<int>>(), y = b[l][h].get<std::vector<int>>();
      std::vector<int> inter;
      std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(inter));
      sum += double(inter.size()) / double(x.size() + y.size() - inter.size());
      ++n;
    }
  return sum / n;
}

std::string textwrap_run(const std::string& pipeline, const std::string& budget) {
  return "run --model " + q(test::pycode_dir()) + " --prompt-file " +
         q(test::pycode_dir() / "golden/prompts/textwrap_head.py") + " --bos always --greedy --json --pipeline '" +
         pipeline + "' " + budget;
}

TEST(CliRun, AdaKvKeptSetsAndCacheBytesMatchKvpress) {
  const auto g = test::read_json(test::pycode_dir() / "golden/textwrap_head.json");
  const Result r =
      cli(textwrap_run("snapkv:window=64,kernel=5,pool=avg,gqa=mean+adakv:alpha=0.2", "--compression-ratio 0.75") +
          " --max-new-tokens 32");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& ref = g["kvpress"]["adakv_snapkv_w64_k5_a0.2@0.75"];
  EXPECT_GE(mean_jaccard(j["kept"], ref["kept"]), 0.99);
  EXPECT_EQ(j["output_ids"], ref["greedy"]) << "32 greedy tokens decoded from the compressed cache";
  // Head-wise budgets are ragged and the cache holds exactly their sum (no padding).
  int64_t entries = 0, n_tok = g["n_tokens"];
  std::set<int64_t> distinct;
  for (const auto& layer : j["budgets"])
    for (const auto& b : layer) {
      entries += b.get<int64_t>();
      distinct.insert(b.get<int64_t>());
    }
  EXPECT_GT(distinct.size(), 1u);
  EXPECT_EQ(entries, 8 * 2 * (n_tok * 25 / 100));  // n_kept = int(514 * 0.25) per head on average
  EXPECT_EQ(j["cache_bytes"]["kv_live"].get<int64_t>(), entries * 2 * 64 * 4);  // K+V, head_dim 64, fp32
}

TEST(CliRun, ZeroCompressionIsLosslessAgainstTheFullReference) {
  const Result r = cli(textwrap_run("snapkv", "--compression-ratio 0 --reference full --max-new-tokens 6"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["fidelity"]["kl"].size(), 6u);
  EXPECT_NEAR(j["fidelity"]["mean_kl"].get<double>(), 0.0, 1e-9);
  EXPECT_EQ(j["fidelity"]["top1_agreement"].get<double>(), 1.0);
}

TEST(CliRun, CompressionShowsUpInFidelity) {
  const Result r =
      cli(textwrap_run("streamingllm:sink=4", "--budget 32 --budget-unit stored --reference full --max-new-tokens 8"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["budgets"][0][0], 32);
  EXPECT_EQ(j["kept"][3][1][3], 3) << "sinks 0..3 kept";
  EXPECT_GT(j["fidelity"]["mean_kl"].get<double>(), 1e-3);
}

TEST(CliRun, UnknownParameterListsTheValidOnes) {
  const Result r = cli(textwrap_run("snapkv:windw=64", "--compression-ratio 0.5"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("unknown parameter 'windw' (valid: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("window"), std::string::npos) << r.out;
  const Result u = cli(textwrap_run("snapkvv", "--compression-ratio 0.5"), true);
  EXPECT_NE(u.exit_code, 0);
  EXPECT_NE(u.out.find("unknown policy 'snapkvv' (known: "), std::string::npos) << u.out;
}

}  // namespace
}  // namespace kvscope
