// Chat prompts in generate / run / sweep (--chat, --system, --messages) through the real binary, on
// an instruct-model directory made in the test: pycode-16m's config, weights and tokenizer (whose
// vocabulary has ChatML's <|im_start|> and <|im_end|>) beside a ChatML chat template. The ids a
// chat prompt feeds are `chat-template --add-generation-prompt`'s (the template's BOS once, none
// added), --messages is --chat with --system as a file, a session records the rendered text, the
// template's source and the messages, each bad input fails in one line naming its file, and a
// session database of the schema before chat prompts still opens (and takes chat runs).
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../core/test_support.h"
#include "cli_support.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using ojson = nlohmann::ordered_json;
using test::quote;
using test::run_cli;
using test::run_cli_stderr;

/// ChatML with the tokenizer's BOS first, as Qwen's templates write it (bos_token of pycode-16m's
/// tokenizer_config.json is <|endoftext|>, id 0): a run adding a BOS of its own would show two.
constexpr const char* kChatMl =
    "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// What kChatMl renders for "Be brief." then "def fib(n):", with the generation prompt.
constexpr const char* kRendered =
    "<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ndef fib(n):<|im_end|>\n"
    "<|im_start|>assistant\n";

class CliChat : public test::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = dir_ / "instruct";
    fs::create_directories(model_);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      fs::create_symlink(test::pycode_dir() / f, model_ / f);
    std::ofstream(model_ / "chat_template.jinja", std::ios::binary) << kChatMl;
  }

  /// Writes `value` as JSON to dir_/name; returns its path.
  fs::path write_json(const std::string& name, const ojson& value) {
    std::ofstream(dir_ / name, std::ios::binary) << value.dump();
    return dir_ / name;
  }
  fs::path system_and_user() {
    return write_json("conversation.json", ojson::array({{{"role", "system"}, {"content", "Be brief."}},
                                                         {{"role", "user"}, {"content", "def fib(n):"}}}));
  }
  /// `generate ARGS --json` on the instruct model, parsed.
  ojson generate(const std::string& args) {
    const auto r = run_cli("generate --model " + quote(model_) + " " + args + " --greedy --max-new-tokens 4 --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return ojson::parse(r.out);
  }
  /// The one line on stderr of a command that must fail with exit code 2, checked for `says`.
  void fails_naming(const std::string& args, const std::string& says) {
    const auto r = run_cli_stderr(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  }
  fs::path model_;
};

TEST_F(CliChat, GenerateChatFeedsTheIdsOfChatTemplateWithTheGenerationPrompt) {
  const auto user = write_json("user.json", ojson::array({{{"role", "user"}, {"content", "def fib(n):"}}}));
  const auto r = run_cli("chat-template --tokenizer " + quote(model_) + " --messages " + quote(user) +
                         " --add-generation-prompt --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const ojson want = ojson::parse(r.out);
  const ojson got = generate("--chat --prompt 'def fib(n):'");
  EXPECT_EQ(got.at("input_ids").get<Ids>(), want.at("ids").get<Ids>());
  EXPECT_EQ(got.at("chat").at("text"), want.at("text"));
  EXPECT_EQ(got.at("chat").at("template"), (model_ / "chat_template.jinja").string());
  // The template's BOS once: --chat adds none of its own (--bos auto would, for this tokenizer's text).
  const Ids ids = got.at("input_ids").get<Ids>();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_NE(ids[1], 0);
  // With the system message: chat-template's ids of the two messages.
  const auto both = run_cli("chat-template --tokenizer " + quote(model_) + " --messages " + quote(system_and_user()) +
                            " --add-generation-prompt --json");
  ASSERT_EQ(both.exit_code, 0) << both.out;
  const ojson with_system = generate("--chat --system 'Be brief.' --prompt 'def fib(n):'");
  EXPECT_EQ(with_system.at("input_ids").get<Ids>(), ojson::parse(both.out).at("ids").get<Ids>());
  EXPECT_EQ(with_system.at("chat").at("text").get<std::string>(), kRendered);
}

TEST_F(CliChat, MessagesFileIsChatWithSystem) {
  const ojson chat = generate("--chat --system 'Be brief.' --prompt 'def fib(n):'");
  const ojson messages = generate("--messages " + quote(system_and_user()));
  EXPECT_EQ(messages.at("input_ids"), chat.at("input_ids"));
  EXPECT_EQ(messages.at("output_ids"), chat.at("output_ids"));
  EXPECT_EQ(messages.at("chat"), chat.at("chat"));
  // --prompt-file is the user message as --prompt is.
  std::ofstream(dir_ / "user.txt") << "def fib(n):";
  EXPECT_EQ(generate("--chat --system 'Be brief.' --prompt-file " + quote(dir_ / "user.txt")).at("input_ids"),
            chat.at("input_ids"));
}

TEST_F(CliChat, SessionRecordsTheRenderedTextAndWhereTheTemplateCameFrom) {
  const std::string run = "run --model " + quote(model_) + " --pipeline streamingllm:sink=2 --budget 8 " +
                          "--max-new-tokens 3 --db " + quote(db_);
  auto r = run_cli(run + " --chat --system 'Be brief.' --prompt 'def fib(n):' --name chat");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli(run + " --messages " + quote(system_and_user()) + " --name messages");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // A template in tokenizer_config.json: the source names that file.
  const fs::path config_model = dir_ / "config-template";
  fs::create_directories(config_model);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::create_symlink(test::pycode_dir() / f, config_model / f);
  ojson config = ojson::parse(test::read_text(test::pycode_dir() / "tokenizer_config.json"));
  config["chat_template"] = kChatMl;
  std::ofstream(config_model / "tokenizer_config.json") << config.dump(2);
  r = run_cli("run --model " + quote(config_model) +
              " --pipeline streamingllm:sink=2 --budget 8 --max-new-tokens 3 --db " + quote(db_) +
              " --chat --system 'Be brief.' --prompt 'def fib(n):' --name config");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli(run + " --prompt 'def fib(n):' --name plain");
  ASSERT_EQ(r.exit_code, 0) << r.out;

  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto rows = store.list_runs();
  ASSERT_EQ(rows.size(), 4u);
  const ojson conversation = ojson::parse(test::read_text(system_and_user()));
  const std::vector<std::string> sources = {(model_ / "chat_template.jinja").string(),
                                            (model_ / "chat_template.jinja").string(),
                                            (config_model / "tokenizer_config.json").string() + " (chat_template)"};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(rows[i].name);
    const sessions::RunRecord rec = store.load_run(rows[i].id);
    EXPECT_EQ(rec.info.prompt.text, kRendered);
    EXPECT_EQ(rec.info.prompt.chat_template, sources[i]);
    EXPECT_EQ(rows[i].chat_template, sources[i]);
    EXPECT_EQ(ojson::parse(rec.info.prompt.chat_messages), conversation);
    EXPECT_EQ(rec.info.prompt.tokens.at(0), 0);
    EXPECT_NE(rec.info.prompt.tokens.at(1), 0);
  }
  const sessions::RunRecord plain = store.load_run(rows[3].id);
  EXPECT_EQ(plain.info.prompt.text, "def fib(n):");
  EXPECT_EQ(plain.info.prompt.chat_template, "");
  EXPECT_EQ(plain.info.prompt.chat_messages, "");
  // inspect names the template of chat runs only.
  r = run_cli("inspect " + quote(db_));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NE(lines[i].find("  chat_template=" + sources[i]), std::string::npos) << lines[i];
  EXPECT_EQ(lines[3].find("chat_template="), std::string::npos) << lines[3];
}

TEST_F(CliChat, SweepRendersEachPromptAndResumesByItsChatKey) {
  std::ofstream(dir_ / "fib.txt") << "def fib(n):";
  std::ofstream(dir_ / "grid.toml") << "models = [" << ojson(model_.string()).dump()
                                    << "]\nprompts = [\"fib.txt\"]\npipelines = [\"streamingllm:sink=2\"]\n"
                                       "max_new_tokens = 3\nreference = \"off\"\n[budget]\nunit = \"stored\"\n"
                                       "values = [8]\n";
  std::ofstream(dir_ / "conversation.toml") << "models = [" << ojson(model_.string()).dump()
                                            << "]\npipelines = [\"streamingllm:sink=2\"]\nmax_new_tokens = 3\n"
                                               "reference = \"off\"\n[budget]\nunit = \"stored\"\nvalues = [8]\n";
  const std::string sweep = "sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_);
  auto r = run_cli(sweep + " --chat --system 'Be brief.'", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("1 runs recorded"), std::string::npos) << r.out;
  r = run_cli(sweep + " --chat --system 'Be brief.'", true);  // resumed: done
  EXPECT_NE(r.out.find("0 runs recorded, 1 already done"), std::string::npos) << r.out;
  r = run_cli(sweep + " --chat", true);  // another system message: another run
  EXPECT_NE(r.out.find("1 runs recorded"), std::string::npos) << r.out;
  r = run_cli(sweep, true);  // the plain prompt: another run
  EXPECT_NE(r.out.find("1 runs recorded"), std::string::npos) << r.out;
  r = run_cli(
      "sweep " + quote(dir_ / "conversation.toml") + " --db " + quote(db_) + " --messages " + quote(system_and_user()),
      true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto rows = store.list_runs();
  ASSERT_EQ(rows.size(), 4u);
  const ojson chat = generate("--chat --system 'Be brief.' --prompt 'def fib(n):'");
  for (size_t i : {size_t{0}, size_t{3}}) {  // --chat --system and --messages: the same prompt
    const sessions::RunRecord rec = store.load_run(rows[i].id);
    EXPECT_EQ(rec.info.prompt.text, kRendered);
    EXPECT_EQ(rec.info.prompt.tokens, chat.at("input_ids").get<Ids>());
    EXPECT_EQ(rec.info.prompt.chat_template, (model_ / "chat_template.jinja").string());
  }
  EXPECT_NE(store.load_run(rows[1].id).info.prompt.text.find("<|im_start|>user\ndef fib(n):"), std::string::npos);
  EXPECT_EQ(store.load_run(rows[2].id).info.prompt.chat_template, "");
  EXPECT_NE(rows[0].sweep_key, rows[1].sweep_key);
  EXPECT_NE(rows[0].sweep_key, rows[2].sweep_key);
  // A grid with a bos other than auto, or its own prompts beside --messages, is refused.
  std::string text = test::read_text(dir_ / "grid.toml");
  text.insert(text.find("[budget]"), "bos = \"always\"\n");
  std::ofstream(dir_ / "bos.toml") << text;
  fails_naming("sweep " + quote(dir_ / "bos.toml") + " --db " + quote(db_) + " --chat",
               (dir_ / "bos.toml").string() + ":6: 'bos': a chat prompt");
  fails_naming(sweep + " --messages " + quote(system_and_user()), (dir_ / "grid.toml").string() + ":2: --messages");
}

TEST_F(CliChat, BadInputFailsInOneLineNamingTheFile) {
  const std::string gen = "generate --model " + quote(model_) + " --max-new-tokens 2 ";
  // A tokenizer without a chat template: pycode-16m itself.
  fails_naming("generate --model " + quote(test::pycode_dir()) + " --chat --prompt hi",
               (test::pycode_dir() / "tokenizer_config.json").string() + ": has no chat template");
  fails_naming(
      "run --model " + quote(test::pycode_dir()) + " --pipeline snapkv --compression-ratio 0.5 --chat " + "--prompt hi",
      (test::pycode_dir() / "tokenizer_config.json").string() + ": has no chat template");
  // --messages: missing, not JSON, not a list of messages, a message without a role.
  fails_naming(gen + "--messages " + quote(dir_ / "none.json"), (dir_ / "none.json").string() + ": cannot open");
  std::ofstream(dir_ / "broken.json") << "[{\"role\": ";
  fails_naming(gen + "--messages " + quote(dir_ / "broken.json"), (dir_ / "broken.json").string() + ": not valid JSON");
  fails_naming(gen + "--messages " + quote(write_json("object.json", {{"role", "user"}})),
               (dir_ / "object.json").string() + ": expected a JSON array of messages");
  fails_naming(gen + "--messages " + quote(write_json("empty.json", ojson::array())),
               (dir_ / "empty.json").string() + ": holds no messages");
  fails_naming(gen + "--messages " + quote(write_json("norole.json", ojson::array({{{"content", "hi"}}}))),
               (dir_ / "norole.json").string() + ": message 0 has no \"role\"");
  fails_naming(
      gen + "--messages " + quote(write_json("nocontent.json", ojson::array({{{"role", "user"}, {"content", 3}}}))),
      (dir_ / "nocontent.json").string() + ": message 0's \"content\" is number");
  // --chat with --prompt-ids: names the ids file.
  std::ofstream(dir_ / "ids.json") << "[1, 2, 3]";
  fails_naming(gen + "--chat --prompt-ids " + quote(dir_ / "ids.json"),
               (dir_ / "ids.json").string() + ": --chat renders a text prompt");
  // --system without --chat (and beside --messages, naming the file).
  fails_naming(gen + "--system 'Be brief.' --prompt hi", "--system without --chat");
  fails_naming(gen + "--system 'Be brief.' --messages " + quote(system_and_user()),
               system_and_user().string() + ": --system goes with --chat");
  // --messages beside another prompt, --bos other than auto, --turn.
  fails_naming(gen + "--prompt hi --messages " + quote(system_and_user()),
               system_and_user().string() + ": --messages is the whole prompt");
  fails_naming(gen + "--chat --prompt hi --bos always", "--bos always with --chat");
  fails_naming(gen + "--chat --prompt hi --turn more", "--turn with --chat");
  // The sweep's: a model without a template stops it at the model's line.
  std::ofstream(dir_ / "grid.toml") << "models = [" << ojson(test::pycode_dir().string()).dump()
                                    << "]\nprompts = [\"story.txt\"]\npipelines = [\"streamingllm:sink=2\"]\n"
                                       "[budget]\nunit = \"stored\"\nvalues = [8]\n";
  fails_naming("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_) + " --chat",
               (dir_ / "grid.toml").string() + ":1: " + (test::pycode_dir() / "tokenizer_config.json").string() +
                   ": has no chat template");
  fails_naming(
      "sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_) + " --messages " + quote(dir_ / "none.json"),
      (dir_ / "none.json").string() + ": cannot open");
  EXPECT_FALSE(fs::exists(db_)) << "nothing recorded";
}

/// Runs `sql` on the database at `path` (test setup: turning a database back into an older layout).
void exec_sql(const fs::path& path, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
}

// A database of schema v4 (before chat prompts: no prompt_chat_* columns) still opens: inspect and
// compare read it as it is, a chat run migrates it and is recorded beside the old runs.
TEST_F(CliChat, AnOldSessionDatabaseWithoutTheChatColumnsStillOpens) {
  const std::string run = "run --model " + quote(model_) + " --pipeline streamingllm:sink=2 --budget 8 " +
                          "--max-new-tokens 3 --db " + quote(db_);
  auto r = run_cli(run + " --prompt 'def fib(n):'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  exec_sql(db_,
           "PRAGMA wal_checkpoint(TRUNCATE); ALTER TABLE runs DROP COLUMN prompt_chat_template; "
           "ALTER TABLE runs DROP COLUMN prompt_chat_messages; ALTER TABLE runs DROP COLUMN model_layer_windows; "
           "PRAGMA user_version = 4;");
  const std::string before = test::read_text(db_);
  r = run_cli("inspect " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("1  complete", 0), 0u) << r.out;
  EXPECT_EQ(test::read_text(db_), before) << "reading leaves an old database as it is";
  r = run_cli(run + " --chat --system 'Be brief.' --prompt 'def fib(n):'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  EXPECT_EQ(store.schema_version(), sessions::SessionStore::kSchemaVersion);
  const auto rows = store.list_runs();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(store.load_run(rows[0].id).info.prompt.chat_template, "");
  EXPECT_EQ(store.load_run(rows[1].id).info.prompt.text, kRendered);
  r = run_cli("compare " + quote(db_) + " 1 2");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("different prompts"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvscope
