// kvscope-cli chat-template: {"text", "ids"} for chat messages under a tokenizer's chat template,
// through the real binary: pycode-recall-17m's ChatML against the prompts of its RULER golden
// (text and ids), the real tokenizers of ../shared/tokenizers against the text and ids transformers
// gave (skipped without tools/fetch-tokenizers.sh's cache), extra variables, and bad input.
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
using ojson = nlohmann::ordered_json;
using test::CliTest;
using test::quote;
using test::run_cli;

fs::path tokenizer_cache() {
  if (const char* env = std::getenv("KVSCOPE_TOKENIZER_CACHE"); env != nullptr && *env != '\0') return env;
  return test::source_dir() / ".cache/tokenizers";
}

fs::path recall_dir() { return test::source_dir().parent_path() / "shared/models/pycode-recall-17m"; }

/// The parsed `chat-template --json` output; fails the test if it is not {"text", "ids"}.
ojson parse_output(const test::CliResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.out;
  try {
    ojson j = ojson::parse(r.out);
    EXPECT_TRUE(j.is_object() && j.size() == 2 && j.contains("text") && j.contains("ids")) << r.out;
    return j;
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << e.what() << ": " << r.out;
    return ojson{{"text", ""}, {"ids", ojson::array()}};
  }
}

class CliChatTemplate : public CliTest {
 protected:
  /// Writes `value` as JSON to dir_/name and returns its quoted path.
  std::string write_json(const std::string& name, const ojson& value) {
    std::ofstream(dir_ / name, std::ios::binary) << value.dump();
    return quote(dir_ / name);
  }
};

// RULER's chat prompts of pycode-recall-17m: the template applied to one user message, then the
// answer prefix. The rendered text is the prompt up to the prefix, its ids the prompt_ids' start.
TEST_F(CliChatTemplate, RecallModelPromptsMatchTheirGolden) {
  const fs::path ruler = recall_dir() / "golden/ruler.jsonl";
  if (!fs::is_regular_file(ruler)) GTEST_SKIP() << "no " << ruler.string();
  std::ifstream in(ruler);
  std::string line;
  int checked = 0;
  while (std::getline(in, line) && checked < 3) {
    const ojson sample = ojson::parse(line);
    if (!sample.at("chat").get<bool>()) continue;
    SCOPED_TRACE(sample.at("id").get<std::string>());
    const std::string content = sample.at("instruction").get<std::string>() + sample.at("context").get<std::string>() +
                                sample.at("question").get<std::string>();
    const std::string messages = write_json("messages.json", ojson::array({{{"role", "user"}, {"content", content}}}));
    const ojson out = parse_output(run_cli("chat-template --tokenizer " + quote(recall_dir()) + " --messages " +
                                           messages + " --add-generation-prompt --json"));
    const std::string prompt = sample.at("prompt").get<std::string>();
    std::string prefix = sample.at("answer_prefix").get<std::string>();
    prefix.erase(0, prefix.find_first_not_of(' '));
    ASSERT_TRUE(prompt.ends_with(prefix));
    EXPECT_EQ(out.at("text").get<std::string>(), prompt.substr(0, prompt.size() - prefix.size()));
    const Ids ids = out.at("ids").get<Ids>();
    const Ids prompt_ids = sample.at("prompt_ids").get<Ids>();
    ASSERT_LT(ids.size(), prompt_ids.size());
    EXPECT_EQ(ids, Ids(prompt_ids.begin(), prompt_ids.begin() + static_cast<std::ptrdiff_t>(ids.size())));
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CliChatTemplate, RealTokenizersMatchTransformers) {
  const fs::path golden_file = test::source_dir().parent_path() / "shared/tokenizers/golden.json";
  if (!fs::is_regular_file(golden_file)) GTEST_SKIP() << "no " << golden_file.string();
  const ojson golden = ojson::parse(test::read_text(golden_file));
  int checked = 0;
  for (const std::string key : {"llama3_1", "qwen3", "gemma3", "deepseek_v3"}) {
    const fs::path dir = tokenizer_cache() / key / "package/models";
    if (!fs::is_regular_file(dir / "tokenizer.json")) continue;
    SCOPED_TRACE(key);
    // The multi-turn conversation with the generation prompt (the core tests cover every entry).
    const ojson& entry = golden.at(key).at("chat").at(4);
    ASSERT_TRUE(entry.at("add_generation_prompt").get<bool>());
    const std::string messages = write_json(key + ".json", entry.at("messages"));
    // The directory (and for one tokenizer its tokenizer_config.json) as PATH.
    std::vector<fs::path> paths = {dir};
    if (key == "qwen3") paths.push_back(dir / "tokenizer_config.json");
    for (const fs::path& path : paths) {
      const ojson out = parse_output(run_cli("chat-template --tokenizer " + quote(path) + " --messages " + messages +
                                             " --add-generation-prompt --json"));
      EXPECT_EQ(out.at("text"), entry.at("text"));
      EXPECT_EQ(out.at("ids").get<Ids>(), entry.at("ids").get<Ids>());
    }
    ++checked;
  }
  if (checked == 0)
    GTEST_SKIP() << "no tokenizer in " << tokenizer_cache().string() << ": run tools/fetch-tokenizers.sh";
}

TEST_F(CliChatTemplate, PlainOutputVarsAndMessagesObject) {
  fs::create_directories(dir_ / "tok");
  std::ofstream(dir_ / "tok/tokenizer_config.json") << R"({"bos_token": "<s>"})";
  std::ofstream(dir_ / "tok/chat_template.jinja")
      << "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
         "{% if add_generation_prompt %}[assistant]{% if think is defined and not think %} (no thinking){% endif %}"
         "{% endif %}";
  const std::string tok = " --tokenizer " + quote(dir_ / "tok");
  const std::string messages = write_json("m.json", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  auto r = run_cli("chat-template" + tok + " --messages " + messages);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "<s>[user] Hi\n");
  r = run_cli("chat-template" + tok + " --messages " + messages + " --add-generation-prompt --vars " +
              write_json("vars.json", {{"think", false}}));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "<s>[user] Hi\n[assistant] (no thinking)");
}

TEST_F(CliChatTemplate, BadInputExitsWithCodeTwoAndOneLine) {
  const auto one_line_error = [](const test::CliResult& r, const std::string& says) {
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
  };
  const std::string messages = write_json("m.json", ojson::array({{{"role", "user"}, {"content", "Hi"}}}));
  // A tokenizer without a chat template (pycode-16m, the embedded model).
  one_line_error(test::run_cli_stderr("chat-template --tokenizer " + quote(test::pycode_dir()) + " --messages " +
                                      messages + " --json"),
                 (test::pycode_dir() / "tokenizer_config.json").string() + ": has no chat template");
  // A template with a syntax error: the file and line.
  fs::create_directories(dir_ / "bad");
  std::ofstream(dir_ / "bad/chat_template.jinja") << "{% for m in messages %}\n{{ m.content }\n{% endfor %}";
  one_line_error(test::run_cli_stderr("chat-template --tokenizer " + quote(dir_ / "bad") + " --messages " + messages),
                 (dir_ / "bad/chat_template.jinja").string() + ": line 2: syntax error");
  // raise_exception in the template.
  fs::create_directories(dir_ / "raises");
  std::ofstream(dir_ / "raises/chat_template.jinja") << "{{ raise_exception('Only user and assistant roles') }}";
  one_line_error(
      test::run_cli_stderr("chat-template --tokenizer " + quote(dir_ / "raises") + " --messages " + messages),
      ": line 1: template error: Only user and assistant roles");
  // Messages that are not a list of messages, not JSON, or missing.
  const std::string recall = " --tokenizer " + quote(dir_ / "raises");
  one_line_error(test::run_cli_stderr("chat-template" + recall + " --messages " + write_json("o.json", {{"a", 1}})),
                 (dir_ / "o.json").string() + ": expected a JSON array of messages");
  std::ofstream(dir_ / "broken.json") << "[{";
  one_line_error(test::run_cli_stderr("chat-template" + recall + " --messages " + quote(dir_ / "broken.json")),
                 (dir_ / "broken.json").string() + ": not valid JSON");
  one_line_error(test::run_cli_stderr("chat-template" + recall + " --messages " + quote(dir_ / "none.json")),
                 "none.json");
  one_line_error(test::run_cli_stderr("chat-template --messages " + messages), "--tokenizer");
}

}  // namespace
}  // namespace kvscope
