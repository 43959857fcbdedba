// Evaluation samples and scoring (kvscope_spec, issue 32): the JSONL loader on pycode-recall-17m's
// golden/ruler.jsonl and on kvpress's dataset columns, every bad-input error, RULER's metrics on
// hand cases, and the reference check: every output recorded in ruler.jsonl (transformers' full
// cache and kvpress's presses) re-scored gives exactly the recorded score, and the means give
// ruler_summary.json.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../temp_dir.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/eval_score.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Strings = std::vector<std::string>;

fs::path recall_golden() {
  return fs::path(KVSCOPE_SOURCE_DIR).parent_path() / "shared/models/pycode-recall-17m/golden";
}

/// A valid line of this project's format, with `extra` appended inside the object (", ...").
std::string ok_line(const std::string& extra = "") {
  return R"({"context": "haystack", "question": "q?", "answers": ["42"], "max_new_tokens": 8)" + extra + "}";
}

/// The InputError message of loading `text` (as a file), or "" if it loaded.
std::string load_error(const TempDir& tmp, const std::string& text) {
  const fs::path file = tmp.write("bad.jsonl", text);
  try {
    load_eval_samples(file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(EvalSamples, LoadsEveryRecordOfRulerGolden) {
  const fs::path file = recall_golden() / "ruler.jsonl";
  if (!fs::is_regular_file(file)) GTEST_SKIP() << "no " << file.string();
  const std::vector<EvalSample> samples = load_eval_samples(file);
  ASSERT_EQ(samples.size(), 54u);

  const EvalSample& s = samples[0];
  EXPECT_EQ(s.id, "niah_single_noise-2048-0");
  EXPECT_EQ(s.task, "niah_single_noise");
  EXPECT_EQ(s.length, 2048);
  EXPECT_TRUE(s.chat);
  EXPECT_EQ(s.instruction,
            "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
            "about the number afterwards.\n");
  EXPECT_EQ(s.question, "\nWhat is the special magic number for lucky-glacier mentioned in the provided text?");
  EXPECT_EQ(s.answer_prefix, " The special magic number for lucky-glacier mentioned in the provided text is");
  EXPECT_EQ(s.answers, Strings{"8812311"});
  EXPECT_EQ(s.max_new_tokens, 16);
  EXPECT_EQ(s.metric, "string_match_all");
  EXPECT_EQ(s.context.size(), 5553u);
  EXPECT_EQ(s.context.rfind("The grass is green. The sky is blue.", 0), 0u);
  EXPECT_NE(s.context.find("One of the special magic numbers for lucky-glacier is: 8812311."), std::string::npos);

  std::map<std::string, int> per_task;
  for (const EvalSample& e : samples) {
    ++per_task[e.task];
    if (e.task == "niah_multivalue" || e.task == "niah_multiquery") EXPECT_EQ(e.answers.size(), 4u) << e.id;
    if (e.task == "vt") EXPECT_EQ(e.answers.size(), 5u) << e.id;
  }
  EXPECT_EQ(per_task, (std::map<std::string, int>{{"niah_multikey_needle", 9},
                                                  {"niah_multiquery", 9},
                                                  {"niah_multivalue", 9},
                                                  {"niah_single_code", 9},
                                                  {"niah_single_noise", 9},
                                                  {"vt", 9}}));
}

TEST(EvalSamples, LoadsKvpressColumns) {
  const TempDir tmp;
  const fs::path file = tmp.write(
      "kvpress.jsonl",
      // line 1: RULER's niah with a list answer; line 2 blank; line 3: a QA task with a string answer and
      // CRLF; line 4: no task.
      R"({"context": "ctx", "question": " Q", "answer_prefix": " A:", "answer": ["7", "8"], "task": "niah_single_1", "max_new_tokens": 128})"
      "\n\n"
      R"({"context": "doc", "question": "who?", "answer_prefix": "", "answer": "Ada", "task": "qa_2", "max_new_tokens": 32})"
      "\r\n"
      R"({"context": "c", "question": "", "answer_prefix": " is", "answer": "x", "max_new_tokens": 1, "metric": "string_match_part"})"
      "\n");
  const std::vector<EvalSample> s = load_eval_samples(file);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].id, "niah_single_1-1");
  EXPECT_EQ(s[0].context, "ctx");
  EXPECT_EQ(s[0].question, " Q");
  EXPECT_EQ(s[0].answer_prefix, " A:");
  EXPECT_EQ(s[0].answers, (Strings{"7", "8"}));
  EXPECT_EQ(s[0].max_new_tokens, 128);
  EXPECT_EQ(s[0].instruction, "");
  EXPECT_TRUE(s[0].chat);
  EXPECT_EQ(s[0].length, 0);
  EXPECT_EQ(s[0].metric, "string_match_all");
  EXPECT_EQ(s[1].id, "qa_2-3");  // line numbers count the blank line
  EXPECT_EQ(s[1].answers, Strings{"Ada"});
  EXPECT_EQ(s[1].metric, "string_match_part");  // RULER and kvpress score qa_* by string_match_part
  EXPECT_EQ(s[2].id, "sample-4");
  EXPECT_EQ(s[2].question, "");
  EXPECT_EQ(s[2].metric, "string_match_part");
}

TEST(EvalSamples, ProjectFormatOptionalFields) {
  const TempDir tmp;
  const fs::path file =
      tmp.write("own.jsonl", ok_line(R"(, "id": "a", "chat": false, "length": 4096, "instruction": "I", "task": "t")") +
                                 "\n" + ok_line() + "\n");
  const std::vector<EvalSample> s = load_eval_samples(file);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].id, "a");
  EXPECT_FALSE(s[0].chat);
  EXPECT_EQ(s[0].length, 4096);
  EXPECT_EQ(s[0].instruction, "I");
  EXPECT_EQ(s[1].id, "sample-2");
  EXPECT_EQ(s[1].answer_prefix, "");
  EXPECT_TRUE(s[1].chat);
}

TEST(EvalSamples, LaterTurnsReadAndWriteBack) {
  const TempDir tmp;
  const fs::path file = tmp.write(
      "turns.jsonl", ok_line(R"(, "turns": [{"question": "\nAnd b?", "answer_prefix": " b is", "answers": ["2"]}, )"
                             R"({"question": "\nAnd c?", "answers": ["3", "4"]}])") +
                         "\n");
  const std::vector<EvalSample> s = load_eval_samples(file);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].turns.size(), 2u);
  EXPECT_EQ(s[0].turns[0], (EvalTurn{"\nAnd b?", " b is", {"2"}}));
  EXPECT_EQ(s[0].turns[1], (EvalTurn{"\nAnd c?", "", {"3", "4"}}));
  // eval_sample_json writes them; reading that back gives the same sample.
  const fs::path back = tmp.write("back.jsonl", eval_sample_json(s[0]) + "\n");
  EXPECT_EQ(load_eval_samples(back).at(0).turns, s[0].turns);
}

TEST(EvalSamples, EveryBadInputIsOneErrorNamingFileAndLine) {
  const TempDir tmp;
  const std::string file = (tmp.path() / "bad.jsonl").string();
  struct Case {
    std::string text, problem;
  };
  // Each bad line is line 2, after a good one.
  const std::vector<Case> cases = {
      {"{\"context\": ", "not valid JSON: "},  // then nlohmann's message
      {"[1, 2]", "a JSON array, not an object"},
      {"\"text\"", "a JSON string, not an object"},
      {R"({"question": "q", "answers": ["1"], "max_new_tokens": 4})", "missing field 'context'"},
      {R"({"context": "c", "answers": ["1"], "max_new_tokens": 4})", "missing field 'question'"},
      {R"({"context": "c", "question": "q", "max_new_tokens": 4})", "missing field 'answers' (or kvpress's 'answer')"},
      {R"({"context": "c", "question": "q", "answers": ["1"]})", "missing field 'max_new_tokens'"},
      {R"({"context": 5, "question": "q", "answers": ["1"], "max_new_tokens": 4})",
       "'context' must be a string, not number"},
      {ok_line(R"(, "answer_prefix": null)"), "'answer_prefix' must be a string, not null"},
      {ok_line(R"(, "instruction": ["x"])"), "'instruction' must be a string, not array"},
      {ok_line(R"(, "task": 3)"), "'task' must be a string, not number"},
      {R"({"context": "c", "question": "q", "answers": "1", "max_new_tokens": 4})",
       "'answers' must be a list of strings, not string"},
      {R"({"context": "c", "question": "q", "answer": 1, "max_new_tokens": 4})",
       "'answer' must be a string or a list of strings, not number"},
      {R"({"context": "c", "question": "q", "answers": ["1", 2], "max_new_tokens": 4})",
       "'answers' has an element that is not a string"},
      {R"({"context": "c", "question": "q", "answers": [], "max_new_tokens": 4})", "'answers' is empty"},
      {R"({"context": "c", "question": "q", "answer": [], "max_new_tokens": 4})", "'answer' is empty"},
      {R"({"context": "c", "question": "q", "answer": "", "max_new_tokens": 4})",
       "'answer' has an empty answer (index 0)"},
      {R"({"context": "c", "question": "q", "answers": ["1", ""], "max_new_tokens": 4})",
       "'answers' has an empty answer (index 1)"},
      {ok_line(R"(, "answer": "1")"), "both 'answers' and 'answer' (kvpress's column); give one"},
      {R"({"context": "c", "question": "q", "answers": ["1"], "max_new_tokens": 0})",
       "'max_new_tokens' must be positive (at most 2^31-1), got 0"},
      {R"({"context": "c", "question": "q", "answers": ["1"], "max_new_tokens": -3})",
       "'max_new_tokens' must be positive (at most 2^31-1), got -3"},
      {R"({"context": "c", "question": "q", "answers": ["1"], "max_new_tokens": 99999999999})",
       "'max_new_tokens' must be positive (at most 2^31-1), got 99999999999"},
      {R"({"context": "c", "question": "q", "answers": ["1"], "max_new_tokens": 16.5})",
       "'max_new_tokens' must be an integer, not number"},
      {R"({"context": "c", "question": "q", "answers": ["1"], "max_new_tokens": "16"})",
       "'max_new_tokens' must be an integer, not string"},
      {ok_line(R"(, "length": -1)"), "'length' must not be negative, got -1"},
      {ok_line(R"(, "length": 2048.0)"), "'length' must be an integer, not number"},
      {ok_line(R"(, "chat": "yes")"), "'chat' must be true or false, not string"},
      {ok_line(R"(, "metric": "rouge")"),
       "unknown metric 'rouge' (known: string_match_all, string_match_part, qa_f1_score, rouge_score, "
       "classification_score, retrieval_score, retrieval_zh_score, count_score, code_sim_score)"},
      {ok_line(R"(, "metric": 1)"), "'metric' must be a string, not number"},
      {ok_line(R"(, "id": "")"), "'id' is empty"},
      {ok_line(R"(, "id": 7)"), "'id' must be a string, not number"},
      {ok_line(R"(, "id": "sample-1")"), "id 'sample-1' already used on line 1"},
      {ok_line(R"(, "turns": {"question": "q"})"),
       "'turns' must be a list of {question, answers, answer_prefix} objects, not object"},
      {ok_line(R"(, "turns": ["q"])"), "'turns' [0] must be an object with question and answers"},
      {ok_line(R"(, "turns": [{"question": "q", "answers": ["1"]}, {"answers": ["2"]}])"),
       "'turns' [1]: missing field 'question'"},
      {ok_line(R"(, "turns": [{"question": "q"}])"), "'turns' [0]: missing field 'answers'"},
      {ok_line(R"(, "turns": [{"question": "q", "answers": []}])"), "'turns' [0]: 'answers' is empty"},
      {ok_line(R"(, "turns": [{"question": "q", "answers": ["1"], "answer_prefix": 2}])"),
       "'turns' [0]: 'answer_prefix' must be a string, not number"},
  };
  for (const Case& c : cases) {
    const std::string got = load_error(tmp, ok_line() + "\n" + c.text + "\n" + ok_line(R"(, "id": "z")") + "\n");
    const std::string want = file + ": line 2: " + c.problem;
    if (c.problem.ends_with(": ")) {
      EXPECT_EQ(got.substr(0, want.size()), want) << c.text;
      EXPECT_GT(got.size(), want.size()) << c.text;
    } else {
      EXPECT_EQ(got, want) << c.text;
    }
  }
  // A number past double is a parse error of its own (nlohmann's out_of_range).
  EXPECT_EQ(load_error(tmp, ok_line(R"(, "length": 1e999)")).rfind(file + ": line 1: not valid JSON: ", 0), 0u);
  EXPECT_EQ(load_error(tmp, ""), file + ": no samples (an empty file or only blank lines)");
  EXPECT_EQ(load_error(tmp, "\n  \r\n\n"), file + ": no samples (an empty file or only blank lines)");
  EXPECT_EQ(load_error(tmp, ok_line() + "\n" + ok_line() + "\n"), "") << "default ids are per line: unique";
}

TEST(EvalSamples, MissingFileAndDirectory) {
  const TempDir tmp;
  const fs::path missing = tmp.path() / "none.jsonl";
  EXPECT_THROW(
      {
        try {
          load_eval_samples(missing);
        } catch (const InputError& e) {
          EXPECT_EQ(std::string(e.what()), missing.string() + ": no such file");
          throw;
        }
      },
      InputError);
  EXPECT_THROW(
      {
        try {
          load_eval_samples(tmp.path());
        } catch (const InputError& e) {
          EXPECT_EQ(std::string(e.what()), tmp.path().string() + ": is a directory, not a JSONL file");
          throw;
        }
      },
      InputError);
}

TEST(EvalScore, CaseInsensitiveAsciiAndLatin1) {
  EXPECT_EQ(string_match_all("The Number Is 8812311.", {"the number"}), 1.0);
  EXPECT_EQ(string_match_all("the key is ABCDE", {"abcde"}), 1.0);
  EXPECT_EQ(string_match_all("café", {"CAFÉ"}), 1.0);
  EXPECT_EQ(string_match_all("ÀÉÎÕÜÞ", {"àéîõüþ"}), 1.0);
  EXPECT_EQ(lower_latin1("A×B÷ÞßÿZ"), "a×b÷þßÿz");  // × (U+00D7) has no lower case; ß, ÿ are lower already
  EXPECT_EQ(lower_latin1("ΣЖ"), "ΣЖ");              // beyond Latin-1: kept (documented)
  EXPECT_EQ(string_match_all("8812311", {"8812312"}), 0.0);
}

TEST(EvalScore, AllIsTheFractionPartIsAny) {
  const Strings refs = {"ABCDE", "FGHIJ", "KLMNO", "PQRST"};
  EXPECT_EQ(string_match_all("abcde fghij", refs), 0.5);
  EXPECT_EQ(string_match_part("abcde fghij", refs), 1.0);
  EXPECT_EQ(string_match_all("pqrst", refs), 0.25);
  EXPECT_EQ(string_match_part("pqrst", refs), 1.0);
  EXPECT_EQ(string_match_all("kLmNo PqRsT fGhIj AbCdE", refs), 1.0);
  EXPECT_EQ(string_match_all("none", refs), 0.0);
  EXPECT_EQ(string_match_part("none", refs), 0.0);
  EXPECT_EQ(string_match_all("3 7 7", {"7", "7", "9"}), 2.0 / 3.0);  // a repeated reference counts each time
  EXPECT_THROW(string_match_all("x", {}), InputError);
  EXPECT_THROW(string_match_part("x", {}), InputError);
}

TEST(EvalScore, RulerPostprocessing) {
  // strip(), every byte 0x00..0x1F to '\n', strip() again (Python's whitespace includes U+0085, U+00A0,
  // U+2000.., U+3000 and 0x1C..0x1F).
  EXPECT_EQ(ruler_postprocess(" \t a\x01"
                              "b\x1f \xc2\xa0"),
            "a\nb");
  EXPECT_EQ(ruler_postprocess("a\x01"), "a");
  EXPECT_EQ(ruler_postprocess("\xe3\x80\x80\xe2\x80\x89x\xc2\x85"), "x");
  EXPECT_EQ(ruler_postprocess("\xc2\xa1x"), "\xc2\xa1x");  // U+00A1 is not whitespace
  EXPECT_EQ(ruler_postprocess(std::string("a\0b", 3)), "a\nb");
  EXPECT_EQ(ruler_postprocess("   "), "");
  // score() post-processes the prediction, not the references: a tab in both matches raw but not
  // after RULER's post-processing (as RULER's evaluate.py would score it).
  EXPECT_EQ(string_match_all("x\ty", {"x\ty"}), 1.0);
  EXPECT_EQ(score("string_match_all", "x\ty", {"x\ty"}), 0.0);
  EXPECT_EQ(score("string_match_all", "  8812311.\n", {"8812311"}), 1.0);
  EXPECT_EQ(score("string_match_part", "\nabcde", {"zzz", "ABCDE"}), 1.0);
}

TEST(EvalScore, DispatcherAndDefaults) {
  EXPECT_EQ(eval_metric_names(),
            (Strings{"string_match_all", "string_match_part", "qa_f1_score", "rouge_score", "classification_score",
                     "retrieval_score", "retrieval_zh_score", "count_score", "code_sim_score"}));
  EXPECT_TRUE(is_eval_metric("string_match_part"));
  EXPECT_FALSE(is_eval_metric("qa_f1"));
  try {
    score("qa_f1", "x", {"x"});
    ADD_FAILURE() << "no error for an unknown metric";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown metric 'qa_f1' (known: string_match_all, string_match_part, qa_f1_score, rouge_score, "
              "classification_score, retrieval_score, retrieval_zh_score, count_score, code_sim_score)");
  }
  EXPECT_THROW(score("string_match_all", "x", {}), InputError);
  EXPECT_EQ(default_metric("qa_1"), "string_match_part");
  EXPECT_EQ(default_metric("qa"), "string_match_part");
  EXPECT_EQ(default_metric("qasper"), "qa_f1_score");  // LongBench's dataset, not RULER's qa_*
  EXPECT_EQ(default_metric("qasper_x"), "string_match_all");
  EXPECT_EQ(default_metric("niah_single_1"), "string_match_all");
  EXPECT_EQ(default_metric(""), "string_match_all");
}

// Every output recorded in ruler.jsonl (the full cache under transformers, each kvpress press)
// re-scored with score() gives exactly its recorded score; per length and method the means (an
// errored press counting 0, as ruler_summary.json does) give ruler_summary.json.
TEST(EvalScore, RescoresEveryRecordedOutputOfRulerGolden) {
  const fs::path file = recall_golden() / "ruler.jsonl";
  const fs::path summary_file = recall_golden() / "ruler_summary.json";
  if (!fs::is_regular_file(file) || !fs::is_regular_file(summary_file)) GTEST_SKIP() << "no " << file.string();
  const std::vector<EvalSample> samples = load_eval_samples(file);
  std::ifstream in(file, std::ios::binary);
  std::map<std::string, std::vector<double>> per_cell;  // "<length>/<method>" -> scores
  size_t scored = 0, errored = 0, fractional = 0, index = 0;
  for (std::string line; std::getline(in, line);) {
    ASSERT_LT(index, samples.size());
    const EvalSample& s = samples[index++];
    const nlohmann::json rec = nlohmann::json::parse(line);
    ASSERT_EQ(rec.at("id").get<std::string>(), s.id);
    std::vector<std::pair<std::string, nlohmann::json>> outputs = {{"full", rec.at("full")}};
    for (const auto& [press, result] : rec.at("kvpress").items()) outputs.emplace_back(press, result);
    for (const auto& [method, result] : outputs) {
      const std::string cell = std::to_string(s.length) + "/" + method;
      if (!result.contains("output")) {  // the press raised (recorded as "error")
        ASSERT_TRUE(result.contains("error")) << s.id << " " << method;
        per_cell[cell].push_back(0.0);
        ++errored;
        continue;
      }
      const double recorded = result.at("score").get<double>();
      const double mine = score(s.metric, result.at("output").get<std::string>(), s.answers);
      EXPECT_EQ(mine, recorded) << s.id << " " << method << ": " << result.at("output").dump();
      per_cell[cell].push_back(mine);
      ++scored;
      fractional += recorded > 0.0 && recorded < 1.0;
    }
  }
  EXPECT_EQ(index, samples.size());
  EXPECT_EQ(scored, 592u);
  EXPECT_EQ(errored, 2u);
  EXPECT_GT(fractional, 0u) << "partial scores tell string_match_all from string_match_part";

  std::ifstream sin(summary_file, std::ios::binary);
  const nlohmann::json summary = nlohmann::json::parse(sin);
  EXPECT_EQ(summary.size(), per_cell.size());
  for (const auto& [cell, value] : summary.items()) {
    ASSERT_TRUE(per_cell.count(cell)) << cell;
    double sum = 0.0;
    for (double v : per_cell[cell]) sum += v;
    EXPECT_NEAR(sum / static_cast<double>(per_cell[cell].size()), value.get<double>(), 0.0005 + 1e-12) << cell;
  }
}

}  // namespace
}  // namespace kvscope
