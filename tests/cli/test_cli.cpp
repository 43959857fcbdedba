// The kvscope-cli contract, exercised through the real binary on the embedded models.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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
  // --tokenizer gives the random model a tokenizer: the prompt is encoded, not reduced to BOS.
  const Result t =
      cli("generate --random-init " + q(test::pycode_dir() / "config.json") + " --tokenizer " +
          q(test::pycode_dir() / "tokenizer.json") + " --prompt 'def main(argv):' --max-new-tokens 2 --json");
  ASSERT_EQ(t.exit_code, 0) << t.out;
  const auto j = nlohmann::json::parse(t.out);
  EXPECT_GT(j["input_ids"].size(), 3u) << t.out;
  EXPECT_TRUE(j.contains("text")) << t.out;
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

// `pyramidkv` alone runs PyramidKV's layer budgets (the stage its description names): on the
// argparse golden (2,589 tokens) at ratio 0.5 the pyramid is steep (no fallback to uniform), and the
// 32 greedy tokens are kvpress PyramidKVPress's, which differ from its SnapKVPress's.
TEST(CliRun, PyramidKvAloneDecodesKvpressPyramidTokens) {
  const auto g = test::read_json(test::pycode_dir() / "golden/argparse_head.json");
  const auto& pyramid = g["kvpress"]["pyramidkv_w64_k5_b20@0.5"]["greedy"];
  ASSERT_NE(pyramid, g["kvpress"]["snapkv_w64_k5_avg@0.5"]["greedy"]) << "the golden cannot tell the two apart";
  const Result r =
      cli("run --model " + q(test::pycode_dir()) + " --prompt-file " +
          q(test::pycode_dir() / "golden/prompts/argparse_head.py") +
          " --bos always --greedy --json --pipeline pyramidkv --compression-ratio 0.5 --max-new-tokens 32");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["pipeline"].get<std::string>().find("+pyramid:"), std::string::npos) << j["pipeline"];
  EXPECT_EQ(j["output_ids"], pyramid);
  // Layer budgets (kvpress: 2524 ... 65 from b = 1294.5; kvscope's integer b = 1294 gives 2523 ... 65).
  EXPECT_EQ(j["budgets"][0][0].get<int64_t>(), 2523);
  EXPECT_EQ(j["budgets"][7][1].get<int64_t>(), 65);
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

/// Runs and files made by one test in its own temporary folder (issue 28: no silent wrong results,
/// and every refusal one line on stderr with a documented exit code).
class CliInputs : public test::CliTest {
 protected:
  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }
  /// Asserts `r` failed with `exit_code` and exactly one line on stderr holding each of `parts`.
  static void expect_one_line(const Result& r, int exit_code, const std::vector<std::string>& parts) {
    EXPECT_EQ(r.exit_code, exit_code) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_TRUE(!r.out.empty() && r.out.back() == '\n') << r.out;
    EXPECT_EQ(r.out.rfind("kvscope-cli: error: ", 0), 0u) << r.out;
    for (const auto& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << "missing '" << p << "' in: " << r.out;
  }
  /// Prompt tokens of `prompt_file` for stories260K (BOS included).
  static int64_t prompt_tokens(const std::filesystem::path& prompt_file) {
    const Result r = cli("generate --model " + q(test::stories_dir()) + " --prompt-file " + q(prompt_file) +
                         " --max-new-tokens 0 --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.exit_code == 0 ? int64_t(nlohmann::json::parse(r.out)["input_ids"].size()) : -1;
  }
};

std::string once_upon(int times) {
  std::string s;
  for (int i = 0; i < times; ++i) s += "Once upon a time there was a cat. ";
  return s;
}

// A prompt and --max-new-tokens past the model's context (stories260K: seq_len 512) ran on with
// RoPE positions it was never trained at: plausible-looking output, no error. Now refused before
// the prefill with the numbers; the boundary itself (exactly 512) runs.
TEST_F(CliInputs, PromptAndNewTokensBeyondTheContextAreRefusedWithTheNumbers) {
  const auto prompt = write("story.txt", once_upon(30));
  const int64_t n = prompt_tokens(prompt);
  ASSERT_GT(n, 100);
  ASSERT_LT(n, 500);
  const std::string base = "generate --model " + q(test::stories_dir()) + " --prompt-file " + q(prompt);
  const std::string over = std::to_string(512 - n + 1), fits = std::to_string(512 - n);
  expect_one_line(test::run_cli_stderr(base + " --max-new-tokens " + over), 2,
                  {"the prompt is " + std::to_string(n) + " tokens and --max-new-tokens " + over + " asks for " + over +
                   " more: 513 > stories260K's context of 512 tokens; shorten the prompt, lower --max-new-tokens, "
                   "or pass --allow-beyond-context to run past it"});
  // run (any pipeline) is refused the same way: the check is in run::make_request.
  expect_one_line(test::run_cli_stderr("run --pipeline snapkv --compression-ratio 0.5 " + base.substr(9) +
                                       " --max-new-tokens " + over),
                  2, {": 513 > stories260K's context of 512 tokens"});
  const Result ok = cli(base + " --max-new-tokens " + fits + " --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  // Multi-turn: every turn counts, with the token fed back before it and its own new tokens.
  expect_one_line(test::run_cli_stderr(base + " --turn 'And then' --max-new-tokens " + std::to_string((512 - n) / 2)),
                  2, {"the prompt and 1 later turn are ", "more per turn: ", " > stories260K's context of 512 tokens"});
}

// --allow-beyond-context runs past the context on purpose, and the session says so; a sweep grid
// asks for it with allow_beyond_context = true (without it, the item fails with the same message).
// Issue 30: an 88-token prompt at budget fraction 0.25 kept 22 entries per KV head while SnapKV's
// observation window of 32 is always kept: the scores never mattered. Refused in one line naming
// the budget, both counts and the parameter; a budget that keeps the window runs.
TEST_F(CliInputs, BudgetBelowWhatThePipelineAlwaysKeepsIsRefused) {
  std::string text = once_upon(4);
  auto prompt = write("p.txt", text);
  int64_t n = prompt_tokens(prompt);
  for (int i = 0; i < 200 && n != 88; ++i) {
    if (n < 88)
      text += " a";
    else
      text.resize(text.rfind(' '));
    prompt = write("p.txt", text);
    n = prompt_tokens(prompt);
  }
  ASSERT_EQ(n, 88);
  const std::string base = "run --model " + q(test::stories_dir()) + " --prompt-file " + q(prompt) +
                           " --pipeline snapkv:window=32 --max-new-tokens 2 ";
  expect_one_line(test::run_cli_stderr(base + "--budget 0.25 --budget-unit fraction"), 2,
                  {"budget fraction 0.25 keeps 22 entries per KV head of the 88-token prompt, fewer than the 32 that "
                   "snapkv window=32 always keeps (its observation window)",
                   "a fraction of at least 0.364"});
  expect_one_line(test::run_cli_stderr(base + "--compression-ratio 0.75"), 2, {"ratio 0.75 keeps 22 entries"});
  expect_one_line(test::run_cli_stderr(base + "--budget 16 --budget-unit stored"), 2,
                  {"16 stored/head keeps 16 entries", "at least 32 entries per head"});
  const Result ok = cli(base + "--budget 0.5 --budget-unit fraction --json");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(cli(base + "--budget 32 --budget-unit stored --json").exit_code, 0);
}

TEST_F(CliInputs, AllowBeyondContextRunsAndIsRecordedInTheSession) {
  const auto prompt = write("story.txt", once_upon(30));
  const int64_t n = prompt_tokens(prompt);
  ASSERT_GT(n, 100);
  const auto db = dir_ / "runs.db";
  const std::string run = "run --model " + q(test::stories_dir()) + " --prompt-file " + q(prompt) +
                          " --pipeline snapkv --compression-ratio 0.5 --db " + q(db) + " --max-new-tokens ";
  const std::string over = std::to_string(512 - n + 10);
  expect_one_line(test::run_cli_stderr(run + over), 2, {"> stories260K's context of 512 tokens"});
  EXPECT_FALSE(std::filesystem::exists(db)) << "refused before the database is opened";
  Result r = cli(run + over + " --allow-beyond-context");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = cli(run + "8");  // within the context: nothing recorded about it
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = cli("inspect " + q(db));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::vector<std::string> runs;
  for (std::string l; std::getline(lines, l);) runs.push_back(l);
  ASSERT_EQ(runs.size(), 2u) << r.out;
  EXPECT_NE(runs[0].find("  complete  "), std::string::npos) << runs[0];
  EXPECT_NE(runs[0].find("beyond_context_tokens=10"), std::string::npos) << runs[0];
  EXPECT_EQ(runs[1].find("beyond_context_tokens"), std::string::npos) << runs[1];

  auto grid = [&](const std::string& extra) {
    write("grid.toml", "models = [\"" + (test::stories_dir() / "stories260K.bin").string() +
                           "\"]\nprompts = [\"story.txt\"]\npipelines = [\"snapkv\"]\nmax_new_tokens = " + over + "\n" +
                           extra + "[budget]\nunit = \"ratio\"\nvalues = [0.5]\n");
  };
  const auto sweep_db = dir_ / "sweep.db";
  grid("");
  r = cli("sweep " + q(dir_ / "grid.toml") + " --db " + q(sweep_db), true);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("> stories260K's context of 512 tokens"), std::string::npos) << r.out;
  grid("allow_beyond_context = true\n");
  r = cli("sweep " + q(dir_ / "grid.toml") + " --db " + q(sweep_db), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = cli("inspect " + q(sweep_db));
  EXPECT_NE(r.out.find("  complete  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("beyond_context_tokens=10"), std::string::npos) << r.out;
  grid("allow_beyond_context = \"yes\"\n");
  r = cli("sweep " + q(dir_ / "grid.toml") + " --db " + q(sweep_db), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("'allow_beyond_context' must be true or false"), std::string::npos) << r.out;
}

// Prompt files that are not text: a 200 KB binary file was tokenized byte by byte into a huge
// prompt; /dev/zero was read forever; a directory or a symlink loop gave messages without the
// file. Each is now one line naming the file, exit code 2.
TEST_F(CliInputs, PromptFilesThatAreNotTextFailInOneLineNamingTheFile) {
  std::string binary(200 * 1024, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = char((i * 7 + i / 256) % 256);
  const auto bin = write("weights.bin", binary);
  const auto latin1 = write("latin1.txt", "caf\xe9 au lait");
  const auto big = write("big.txt", "");
  std::filesystem::resize_file(big, (int64_t{64} << 20) + 1);  // sparse
  std::filesystem::create_directory(dir_ / "folder");
  std::filesystem::create_symlink(dir_ / "loop_b", dir_ / "loop_a");
  std::filesystem::create_symlink(dir_ / "loop_a", dir_ / "loop_b");
  const std::vector<std::pair<std::filesystem::path, std::string>> cases = {
      {bin, "not a text file: a NUL byte at offset 0 (of 204800 bytes)"},
      {latin1, "not a text file: not valid UTF-8 at byte offset 3 (of 12 bytes)"},
      {big, "the prompt file is 67108865 bytes, more than the limit of 64 MiB"},
      {dir_ / "folder", "a directory, not a prompt file"},
      {"/dev/zero", "not a regular file (a device, pipe or socket)"},
      {dir_ / "loop_a", "cannot open the prompt file: Too many levels of symbolic links"},
      {dir_ / "missing.txt", "cannot open the prompt file: No such file or directory"},
  };
  for (const auto& [file, problem] : cases) {
    SCOPED_TRACE(file.string());
    expect_one_line(test::run_cli_stderr("generate --model " + q(test::stories_dir()) + " --prompt-file " + q(file)), 2,
                    {file.string() + ": " + problem});
  }
  expect_one_line(test::run_cli_stderr("generate --model " + q(dir_ / "loop_a") + " --prompt x"), 2,
                  {(dir_ / "loop_a").string() + ": cannot be opened: Too many levels of symbolic links"});
  // The same checks in a sweep, before the first run: the grid's file and line, then the prompt's.
  write("grid.toml", "models = [\"" + (test::stories_dir() / "stories260K.bin").string() +
                         "\"]\nprompts = [\"weights.bin\"]\npipelines = [\"snapkv\"]\n[budget]\nvalues = [0.5]\n");
  const Result r = cli("sweep " + q(dir_ / "grid.toml") + " --db " + q(dir_ / "s.db"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find((dir_ / "grid.toml").string() + ":2: " + bin.string() + ": not a text file"), std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s.db"));
}

// --device values that are no device, and devices this machine does not have: one line naming the
// option and the value, exit 2 (a CPU build has no cuda:99; a CUDA build checks the device count).
TEST_F(CliInputs, DevicesThatDoNotExistAreRefusedNamingTheOption) {
  for (const std::string device : {"cuda:-7", "cuda:abc", "cuda:99", "cpu:3", "tpu", "meta", "mps"}) {
    SCOPED_TRACE(device);
    expect_one_line(
        test::run_cli_stderr("generate --model " + q(test::stories_dir()) + " --prompt x --device " + device), 2,
        {"--device", device});
  }
}

// A LibTorch error (c10::Error) printed its message and 12-33 lines of C++ stack trace; now the
// message alone, one line, exit 1 (a run failed).
TEST_F(CliInputs, LibTorchErrorsPrintOneLineWithoutTheStackTrace) {
  ::setenv("KVSCOPE_TEST_FAULT", "torch@prefill", 1);
  const Result r = test::run_cli_stderr("generate --model " + q(test::stories_dir()) + " --prompt Once");
  ::unsetenv("KVSCOPE_TEST_FAULT");
  expect_one_line(r, 1, {"kvscope-cli: error: index out of range in self"});
  EXPECT_EQ(r.out.find("Exception raised from"), std::string::npos) << r.out;
  // The failed run's error in the session database is the same one line.
  const auto db = dir_ / "runs.db";
  ::setenv("KVSCOPE_TEST_FAULT", "torch@prefill", 1);
  const Result run =
      test::run_cli_stderr("run --model " + q(test::stories_dir()) + " --prompt Once --pipeline snapkv:window=1 " +
                           "--compression-ratio 0.5 --db " + q(db));
  ::unsetenv("KVSCOPE_TEST_FAULT");
  expect_one_line(run, 1, {"index out of range in self"});
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no sqlite3 to read the database";
  FILE* p = ::popen(("sqlite3 " + q(db) + " 'SELECT status, error FROM runs'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string rows;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) rows.append(buf.data(), n);
  ::pclose(p);
  EXPECT_EQ(rows, "failed|index out of range in self\n");
}

// A tokenizer whose ids exceed the model's vocabulary (pycode-16m's 8192 tokens on stories260K's
// 512) failed deep in LibTorch with an index error; now refused naming the id and the vocabulary.
TEST_F(CliInputs, TokenIdsBeyondTheModelsVocabularyAreRefused) {
  const auto model = test::stories_dir() / "stories260K.bin";
  const Result r = test::run_cli_stderr("generate --model " + q(model) + " --tokenizer " +
                                        q(test::pycode_dir() / "tokenizer.json") + " --prompt 'def main(): return 42'");
  expect_one_line(r, 2,
                  {model.string() + ": the prompt has token id ",
                   ", but the model's vocabulary is 512 tokens (ids 0 to 511): the tokenizer does not belong to this "
                   "model"});
}

// CLI11's usage errors exited 105-114 with two lines; now one line and exit 2 like every bad input.
TEST_F(CliInputs, UsageErrorsAreOneLineWithExitCode2) {
  const std::string model = " --model " + q(test::stories_dir()) + " --prompt x";
  expect_one_line(test::run_cli_stderr("generate --bogus" + model), 2, {"--bogus", "(run with --help for usage)"});
  expect_one_line(test::run_cli_stderr("run" + model), 2, {"--pipeline is required"});
  expect_one_line(test::run_cli_stderr("generate --max-new-tokens -1" + model), 2, {"--max-new-tokens: -1"});
  EXPECT_EQ(cli("generate --help").exit_code, 0);
}

}  // namespace
}  // namespace kvscope
