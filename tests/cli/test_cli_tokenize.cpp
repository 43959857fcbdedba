// kvscope-cli tokenize: {"ids": [...]} for a text under a tokenizer directory or file, through the
// real binary: pycode-16m against its golden ids, the real tokenizers of ../shared/tokenizers
// (skipped without tools/fetch-tokenizers.sh's cache) against Hugging Face's, and bad input.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using test::CliTest;
using test::quote;
using test::run_cli;

/// The ids of a `tokenize --json` output; fails the test (and returns {}) if it is not {"ids": [...]}.
Ids ids_of(const test::CliResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.out;
  try {
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.is_object() && j.size() == 1 && j.contains("ids")) << r.out;
    return j.at("ids").get<Ids>();
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << e.what() << ": " << r.out;
    return {};
  }
}

fs::path tokenizer_cache() {
  if (const char* env = std::getenv("KVSCOPE_TOKENIZER_CACHE"); env != nullptr && *env != '\0') return env;
  return test::source_dir() / ".cache/tokenizers";
}

using CliTokenize = CliTest;

TEST_F(CliTokenize, PycodePromptMatchesGoldenIds) {
  for (const auto& path : test::pycode_goldens()) {
    SCOPED_TRACE(path.filename().string());
    const auto golden = test::read_json(path);
    const fs::path prompt = test::pycode_dir() / "golden/prompts" / golden.at("prompt_file").get<std::string>();
    const Ids expected = golden.at("input_ids").get<Ids>();  // <|endoftext|> first, added by the reference
    ASSERT_FALSE(expected.empty());
    // The directory and tokenizer.json itself; pycode's post-processor adds nothing.
    EXPECT_EQ(ids_of(run_cli("tokenize --tokenizer " + quote(test::pycode_dir()) + " --text-file " + quote(prompt) +
                             " --json")),
              Ids(expected.begin() + 1, expected.end()));
    EXPECT_EQ(ids_of(run_cli("tokenize --tokenizer " + quote(test::pycode_dir() / "tokenizer.json") + " --text-file " +
                             quote(prompt) + " --add-special --json")),
              Ids(expected.begin() + 1, expected.end()));
  }
}

TEST_F(CliTokenize, TextOptionAndPlainOutput) {
  const std::string tok = " --tokenizer " + quote(test::pycode_dir());
  const Ids ids = ids_of(run_cli("tokenize" + tok + " --text 'x = 42<|im_end|>' --json"));
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.back(), 2);  // <|im_end|> is its added token
  std::string plain;
  for (size_t i = 0; i < ids.size(); ++i) plain += (i ? " " : "") + std::to_string(ids[i]);
  const auto r = run_cli("tokenize" + tok + " --text 'x = 42<|im_end|>'");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, plain + "\n");
  EXPECT_EQ(ids_of(run_cli("tokenize" + tok + " --text '' --json")), Ids{});
}

TEST_F(CliTokenize, RealTokenizersMatchHuggingFace) {
  const fs::path golden_file = test::source_dir().parent_path() / "shared/tokenizers/golden.json";
  if (!fs::is_regular_file(golden_file)) GTEST_SKIP() << "no " << golden_file.string();
  const auto golden = test::read_json(golden_file);
  int checked = 0;
  for (const std::string key : {"llama3_1", "qwen3", "gemma3", "llama2", "deepseek_v3"}) {
    const fs::path dir = tokenizer_cache() / key / "package/models";
    if (!fs::is_regular_file(dir / "tokenizer.json")) continue;
    SCOPED_TRACE(key);
    // One text with newlines, tabs and multi-byte characters per tokenizer (the core tests cover every entry).
    const auto& entry = golden.at(key).at("encode").at(2);
    const fs::path text = dir_ / (key + ".txt");
    std::ofstream(text, std::ios::binary) << entry.at("text").get<std::string>();
    const std::string args = "tokenize --tokenizer " + quote(dir) + " --text-file " + quote(text) + " --json";
    EXPECT_EQ(ids_of(run_cli(args + " --add-special")), entry.at("ids_with_special").get<Ids>());
    if (key == "llama3_1") EXPECT_EQ(ids_of(run_cli(args)), entry.at("ids").get<Ids>());  // BOS only with the flag
    ++checked;
  }
  if (checked == 0)
    GTEST_SKIP() << "no tokenizer in " << tokenizer_cache().string() << ": run tools/fetch-tokenizers.sh";
}

TEST_F(CliTokenize, BadInputExitsWithCodeTwoAndOneLine) {
  const std::string tok = " --tokenizer " + quote(test::pycode_dir());
  auto r = test::run_cli_stderr("tokenize" + tok + " --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--text"), std::string::npos) << r.out;
  r = test::run_cli_stderr("tokenize" + tok + " --text a --text-file " + quote(dir_ / "story.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  const fs::path missing = dir_ / "no-such-tokenizer";
  r = test::run_cli_stderr("tokenize --tokenizer " + quote(missing) + " --text a");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(missing.string()), std::string::npos) << r.out;
  r = test::run_cli_stderr("tokenize" + tok + " --text-file " + quote(dir_ / "missing.txt"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("missing.txt"), std::string::npos) << r.out;
  // A tokenizer.json of a model type kvscope does not know: one line naming the file and the type.
  const fs::path bad = dir_ / "wordpiece";
  fs::create_directories(bad);
  std::ofstream(bad / "tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})";
  r = test::run_cli_stderr("tokenize --tokenizer " + quote(bad) + " --text a --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find((bad / "tokenizer.json").string() + ": unsupported model type 'WordPiece'"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;  // one line
}

}  // namespace
}  // namespace kvscope
