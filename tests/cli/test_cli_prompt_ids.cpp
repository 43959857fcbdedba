// `kvscope-cli generate --prompt-ids FILE.json` (issue 31's CLI contract): a checkpoint without a
// tokenizer runs on token ids, and its last logits and greedy tokens are transformers' (the tiny
// Qwen3 checkpoint of assets/models/tiny-archs with its golden.json). Bad id files and a text
// prompt for a model without a tokenizer fail in one line naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {

using test::quote;
using test::run_cli;

class CliPromptIds : public test::CliTest {};

TEST_F(CliPromptIds, ACheckpointWithoutATokenizerRunsOnIdsAsTransformersDoes) {
  const auto model = test::source_dir() / "assets/models/tiny-archs/qwen3-qknorm";
  const nlohmann::json g = test::read_json(model / "golden.json");
  std::ofstream(dir_ / "ids.json") << g["input_ids"].dump();
  const auto r = run_cli("generate --model " + quote(model) + " --prompt-ids " + quote(dir_ / "ids.json") +
                         " --greedy --max-new-tokens 16 --json --dump-last-logits");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["input_ids"], g["input_ids"]) << "verbatim: no BOS added";
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), g["greedy"].get<std::vector<int32_t>>());
  const auto last = j["last_logits"].get<std::vector<double>>();
  const auto want = g["last_logits"].get<std::vector<double>>();
  ASSERT_EQ(last.size(), want.size());
  double diff = 0;
  for (std::size_t i = 0; i < last.size(); ++i) diff = std::max(diff, std::abs(last[i] - want[i]));
  EXPECT_LT(diff, 1e-3);
}

TEST_F(CliPromptIds, BadInputsFailInOneLine) {
  const auto model = test::source_dir() / "assets/models/tiny-archs/qwen3-qknorm";
  std::ofstream(dir_ / "bad.json") << "[1, 2, \"three\"]";
  auto r = run_cli("generate --model " + quote(model) + " --prompt-ids " + quote(dir_ / "bad.json"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("entry 2 is not a token id"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bad.json"), std::string::npos) << r.out;
  std::ofstream(dir_ / "big.json") << "[1, 99999]";
  r = run_cli("generate --model " + quote(model) + " --prompt-ids " + quote(dir_ / "big.json"), true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
  r = run_cli("generate --model " + quote(model) + " --prompt hello", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("no tokenizer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--prompt-ids"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvscope
