// LongBench's metrics (kvscope_spec, issue 32): each metric on cases computed by hand from
// LongBench/metrics.py's definitions (and the rouge package's ROUGE-L), the quirks that decide
// scores (the union of LCS words, the classification loop that skips an item, fuzz.ratio's
// half-to-even rounding, difflib's autojunk), an oracle (python3's re, difflib and collections on
// the same definitions; skipped without python3), the dispatch through score() (best answer, first
// line, defaults from LongBench's dataset names) and the JSONL fields `all_classes` and `first_line`.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/eval_score.h"
#include "kvscope/core/longbench_metrics.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

/// The rouge package's F from P and R.
double rouge_f(double p, double r) { return 2.0 * ((p * r) / (p + r + 1e-8)); }

TEST(LongBenchMetrics, NormalizeAnswer) {
  EXPECT_EQ(normalize_answer("The Cat's  hat!"), "cats hat");
  EXPECT_EQ(normalize_answer("An apple a day, theatre"), "apple day theatre");  // whole words only
  EXPECT_EQ(normalize_answer("Théâtre, THE end; a.b"), "théâtre end ab");       // Latin-1 lowered; "a.b" is one word
  EXPECT_EQ(normalize_answer("\u201cthe\u201d end"), "\u201c \u201d end");      // curly quotes: not word characters
  EXPECT_EQ(normalize_answer("éthe the\u00e9 3a a3 a_"), "éthe theé 3a a3");    // word characters around: kept
  EXPECT_EQ(normalize_answer("a an the"), "");
  EXPECT_EQ(normalize_answer(" \t\u3000x\u00a0 y\n"), "x y");
}

TEST(LongBenchMetrics, QaF1ByHand) {
  // prediction [cat sat on mat], truth [cat on mat]: 3 common, P = 3/4, R = 1.
  EXPECT_DOUBLE_EQ(qa_f1_score("The cat sat on the mat", "a cat on a mat"), 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(qa_f1_score("cat cat cat", "cat"), 0.5);  // counted as a multiset: 1 common
  EXPECT_DOUBLE_EQ(qa_f1_score("cat cat", "cat cat dog"), 0.8);
  EXPECT_EQ(qa_f1_score("The", "the"), 0.0);  // nothing left after normalization
  EXPECT_EQ(qa_f1_score("dog", "cat"), 0.0);
  EXPECT_EQ(qa_f1_score("Paris!", "paris"), 1.0);
}

TEST(LongBenchMetrics, RougeLByHand) {
  // One sentence each: LCS "the cat on the mat", words {the, cat, on, mat}; 5 distinct words each side.
  EXPECT_DOUBLE_EQ(rouge_score("the cat sat on the mat", "the cat was on the mat"), rouge_f(0.8, 0.8));
  // Lin's union LCS example: r = w1..w5, c1 = w1 w2 w6 w7 w8 (LCS w1 w2), c2 = w1 w3 w8 w9 w5 (LCS w1 w3 w5):
  // union {w1 w2 w3 w5} = 4 of 5 reference words, of 8 distinct prediction words.
  EXPECT_DOUBLE_EQ(rouge_score("w1 w2 w6 w7 w8. w1 w3 w8 w9 w5", "w1 w2 w3 w4 w5"), rouge_f(4.0 / 8.0, 4.0 / 5.0));
  // The back-tracking keeps "b" of ["b", "a"] against ["a", "b"]; the second sentence adds "a": both words.
  // (Had it kept "a", the union would be {a}: F = 0.5.)
  EXPECT_DOUBLE_EQ(rouge_score("b a. a", "a b"), rouge_f(1.0, 1.0));
  // Case-sensitive, punctuation other than '.' kept in the word.
  EXPECT_DOUBLE_EQ(rouge_score("Cat, dog", "cat dog"), rouge_f(0.5, 0.5));
  // A piece of spaces is an empty sentence with one empty word, which matches the other's.
  EXPECT_DOUBLE_EQ(rouge_score(" . y", " . x"), rouge_f(0.5, 0.5));
  EXPECT_EQ(rouge_score("", "a"), 0.0);     // no sentence: the package raises, LongBench scores 0
  EXPECT_EQ(rouge_score("...", "a"), 0.0);  // only empty pieces
  EXPECT_EQ(rouge_score("x", "y"), 0.0);
}

TEST(LongBenchMetrics, ClassificationByHand) {
  const Strings animals = {"cat", "dog", "bird"};
  EXPECT_EQ(classification_score("It is a dog or a cat", "cat", animals), 0.5);  // two classes named
  EXPECT_EQ(classification_score("A cat.", "cat", animals), 1.0);
  EXPECT_EQ(classification_score("It is a dog or a cat", "bird", animals), 0.0);
  EXPECT_EQ(classification_score("Cat", "cat", animals), 0.0);  // case-sensitive
  // A class inside the truth but not equal to it is dropped ...
  EXPECT_EQ(classification_score("Human being", "Human being", {"Human", "Human being", "Location"}), 1.0);
  // ... but the item after a dropped one is skipped, as Python's loop over a list it shrinks does:
  // [a, b, ab] -> "a" removed -> [b, ab], "b" never looked at: 1/2.
  EXPECT_EQ(classification_score("ab", "ab", {"a", "b", "ab"}), 0.5);
  EXPECT_EQ(classification_score("ab", "ab", {"ab", "a", "b"}), 1.0 / 2.0);
}

TEST(LongBenchMetrics, RetrievalAndCountByHand) {
  EXPECT_EQ(retrieval_score("Paragraph 12", "Paragraph 12"), 1.0);
  EXPECT_EQ(retrieval_score("Paragraph 3 or Paragraph 12", "Paragraph 12"), 0.5);
  EXPECT_EQ(retrieval_score("12 and 012", "Paragraph 12"), 0.5);                 // compared as text
  EXPECT_EQ(retrieval_score("Paragraph \uff11\uff12 12", "Paragraph 12"), 0.5);  // full-width 12 is a number, not "12"
  EXPECT_EQ(retrieval_score("no idea", "Paragraph 12"), 0.0);
  EXPECT_EQ(retrieval_score("It is 7", "The abstract: Paragraph x, Paragraph 7 and Paragraph 9"), 1.0);
  EXPECT_THROW(retrieval_score("7", "Paragraph seven"), InputError);
  EXPECT_EQ(retrieval_zh_score("\u6bb5\u843d3", "\u6bb5\u843d3"), 1.0);
  EXPECT_THROW(retrieval_zh_score("3", "Paragraph 3"), InputError);

  EXPECT_EQ(count_score("There are 7 unique paragraphs, not 8", "7"), 0.5);
  EXPECT_EQ(count_score("7 \u0667", "7"), 0.5);  // Arabic-Indic seven: a number of its own
  EXPECT_EQ(count_score("seven", "7"), 0.0);
  EXPECT_EQ(count_score("77", "7"), 0.0);
}

TEST(LongBenchMetrics, CodeSimAndFuzzRatioByHand) {
  EXPECT_EQ(fuzz_ratio("abcd", "bcde"), 75);          // "bcd": 2*3/8
  EXPECT_EQ(fuzz_ratio("abc", "abd"), 67);            // 2*2/6 = 66.67
  EXPECT_EQ(fuzz_ratio("abcdefgh", "aijklmno"), 12);  // 12.5: half to even
  EXPECT_EQ(fuzz_ratio("abcdefgh", "abcijklm"), 38);  // 37.5: half to even
  EXPECT_EQ(fuzz_ratio("", ""), 100);
  EXPECT_EQ(fuzz_ratio("", "x"), 0);
  EXPECT_EQ(fuzz_ratio("éa", "ea"), 50);  // code points (2*1/4), not bytes (2*1/5)
  // Leading newlines, a comment line and a fence are passed over; the first code line is scored.
  EXPECT_EQ(code_sim_score("\n\n# comment\n```python\nx = foo(1)\n", "x = foo(1)"), 1.0);
  EXPECT_EQ(code_sim_score("y = 1 // two\nabcd", "bcde"), 0.75);
  EXPECT_EQ(code_sim_score("// a\n#b", "x"), 0.0);  // no line qualifies: ""
}

TEST(LongBenchMetrics, SequenceMatcherAutojunk) {
  const std::string b200(200, 'a'), b199(199, 'a');
  // 200 characters or more: "a" (more than 200/100 + 1 times) starts no match, and "b" blocks the
  // extension from the start: nothing matches.
  EXPECT_EQ(sequence_matcher_ratio("b" + std::string(10, 'a'), b200), 0.0);
  EXPECT_DOUBLE_EQ(sequence_matcher_ratio("b" + std::string(10, 'a'), b199), 20.0 / 210.0);
  // A match grows from the start over popular characters all the same.
  EXPECT_DOUBLE_EQ(sequence_matcher_ratio(std::string(10, 'a'), b200), 20.0 / 210.0);
  EXPECT_EQ(sequence_matcher_ratio("", ""), 1.0);
}

TEST(LongBenchMetrics, FirstLine) {
  EXPECT_EQ(longbench_first_line("\n\nHuman\nLocation"), "Human");
  EXPECT_EQ(longbench_first_line(" Human\n"), " Human");  // only newlines are stripped
  EXPECT_EQ(longbench_first_line("\n\n"), "");
}

/// One oracle case: a metric (or "normalize") on a prediction and a ground truth.
struct OracleCase {
  std::string metric, prediction, truth;
  Strings classes;
};

// The definitions of LongBench/metrics.py written for python3's standard library (fuzz.ratio as
// fuzzywuzzy computes it without python-Levenshtein).
constexpr const char* kOracle = R"PY(
import collections, difflib, json, re, string, sys

def normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())

def qa_f1(pred, truth):
    p, t = normalize(pred).split(), normalize(truth).split()
    common = sum((collections.Counter(p) & collections.Counter(t)).values())
    if not common:
        return 0.0
    precision, recall = 1.0 * common / len(p), 1.0 * common / len(t)
    return (2 * precision * recall) / (precision + recall)

def fuzz_ratio(a, b):
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))

def code_sim(pred, truth):
    lines = [l for l in pred.lstrip("\n").split("\n") if "`" not in l and "#" not in l and "//" not in l]
    return fuzz_ratio(lines[0] if lines else "", truth) / 100

def share(pred, target):
    found = re.findall(r"\d+", pred)
    return sum(1 for n in found if n == target) / len(found) if found else 0.0

def classification(pred, truth, classes):
    named = [c for c in classes if c in pred]
    for c in named:  # removing while iterating, as LongBench does
        if c in truth and c != truth:
            named.remove(c)
    return 1.0 / len(named) if truth in named else 0.0

out = []
for c in json.load(open(sys.argv[1], encoding="utf-8")):
    m, p, t = c["metric"], c["prediction"], c["truth"]
    out.append({"normalize": lambda: normalize(p), "qa_f1_score": lambda: qa_f1(p, t),
                "code_sim_score": lambda: code_sim(p, t), "count_score": lambda: share(p, t),
                "retrieval_score": lambda: share(p, re.findall(r"Paragraph (\d+)", t)[0]),
                "classification_score": lambda: classification(p, t, c["classes"])}[m]())
print(json.dumps(out))
)PY";

/// Runs kOracle on `cases` in a temporary directory; nullopt when there is no python3.
std::optional<nlohmann::json> run_oracle(const std::vector<OracleCase>& cases) {
  std::string dir = (fs::temp_directory_path() / "kvscope-longbench-XXXXXX").string();
  if (!::mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
  nlohmann::json input = nlohmann::json::array();
  for (const OracleCase& c : cases)
    input.push_back({{"metric", c.metric}, {"prediction", c.prediction}, {"truth", c.truth}, {"classes", c.classes}});
  std::ofstream(fs::path(dir) / "oracle.py", std::ios::binary) << kOracle;
  std::ofstream(fs::path(dir) / "cases.json", std::ios::binary) << input.dump();
  const std::string cmd = "python3 '" + dir + "/oracle.py' '" + dir + "/cases.json' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  if (p) {
    std::array<char, 65536> buf;
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  }
  const int status = p ? ::pclose(p) : -1;
  fs::remove_all(dir);
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 127 || !p) return std::nullopt;
  if (code != 0) throw std::runtime_error("the oracle failed (" + std::to_string(code) + "): " + out);
  return nlohmann::json::parse(out);
}

TEST(LongBenchMetrics, AgreesWithPythonOracle) {
  const Strings texts = {
      "The Eiffel Tower, in Paris.",
      "  an answer: the Eiffel tower (Paris)!\n",
      "A théâtre in Zürich — the \u201cbest\u201d one",
      "théâtre ZÜRICH best one",
      "Paragraph 12",
      "The answer is Paragraph 3, not Paragraph 12 or 012.",
      "There are 17 unique paragraphs; 17 in total, \uff11\uff17 in full width.",
      "\n\n# fill in\n```python\n    return self.fetch(key)  \n",
      "    return self.fetch(key)",
      "// TODO\nfor (int i = 0; i < n; ++i) {",
      "for (int i = 0; i <= n; i++) {",
      "Human being\nLocation",
      "Description and abstract concept",
      "a an the",
      "yes",
      "Yes.",
      "unanswerable",
      "The cat sat on the mat with another cat and the other dog",
      std::string(230, 'x') + "y" + std::string(20, 'x'),
      std::string(250, 'x'),
  };
  std::vector<OracleCase> cases;
  for (const std::string& t : texts) cases.push_back({"normalize", t, "", {}});
  for (size_t i = 0; i < texts.size(); ++i) {
    for (size_t j = 0; j < texts.size(); j += 3) {
      const std::string& p = texts[i];
      const std::string& t = texts[(i + j) % texts.size()];
      cases.push_back({"qa_f1_score", p, t, {}});
      cases.push_back({"code_sim_score", p, t, {}});
    }
    cases.push_back({"count_score", texts[i], "17", {}});
    cases.push_back({"retrieval_score", texts[i], "Paragraph 12", {}});
    cases.push_back({"classification_score",
                     texts[i],
                     i % 2 ? "Human being" : "Location",
                     {"Human", "Human being", "Location", "Description", "abstract concept", "the"}});
  }
  const std::optional<nlohmann::json> oracle = run_oracle(cases);
  if (!oracle) GTEST_SKIP() << "no python3";
  ASSERT_EQ(oracle->size(), cases.size());
  int nonzero = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const OracleCase& c = cases[k];
    const nlohmann::json& want = (*oracle)[k];
    if (c.metric == "normalize") {
      EXPECT_EQ(normalize_answer(c.prediction), want.get<std::string>()) << c.prediction;
      continue;
    }
    const double got = score(c.metric, c.prediction, {c.truth}, c.classes);
    EXPECT_EQ(got, want.get<double>()) << c.metric << " of '" << c.prediction << "' against '" << c.truth << "'";
    nonzero += got != 0.0;
  }
  EXPECT_GT(nonzero, 100) << "the cases should not be mostly zeros";
}

TEST(LongBenchScore, DispatchTakesTheBestAnswerAndTheFirstLine) {
  EXPECT_DOUBLE_EQ(score("qa_f1_score", "The cat sat on the mat", {"dog", "a cat on a mat", "cat"}), 6.0 / 7.0);
  EXPECT_EQ(score("count_score", "7 or 8", {"8", "7"}), 0.5);
  // No RULER post-processing: the leading newline stays (and code_sim_score strips it itself).
  EXPECT_EQ(score("qa_f1_score", "\nParis", {"paris"}), 1.0);
  EXPECT_EQ(score("string_match_all", "\nParis", {"paris"}), 1.0);
  // first_line: LongBench's trec / triviaqa / samsum / lsht post-processing.
  EXPECT_EQ(score("classification_score", "\nHuman being\nLocation", {"Human being"}, {"Human being", "Location"}),
            0.5);
  EXPECT_EQ(
      score("classification_score", "\nHuman being\nLocation", {"Human being"}, {"Human being", "Location"}, true),
      1.0);
  EXPECT_EQ(score("qa_f1_score", "Paris\nLondon", {"paris"}, {}, true), 1.0);
  EXPECT_EQ(score("string_match_all", "Paris\nLondon", {"london"}, {}, true), 0.0);

  EvalSample s;
  s.metric = "classification_score";
  s.answers = {"Location"};
  s.all_classes = {"Human being", "Location"};
  s.first_line = true;
  EXPECT_EQ(score(s, "Location\nHuman being"), 1.0);
  s.first_line = false;
  EXPECT_EQ(score(s, "Location\nHuman being"), 0.5);

  try {
    score("classification_score", "Location", {"Location"});
    ADD_FAILURE() << "no error without all_classes";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "classification_score needs 'all_classes' (the class names), and there are none");
  }
  EXPECT_THROW(score("retrieval_score", "3", {"Paragraph 3", "the third"}), InputError);
  EXPECT_THROW(score("rouge_score", "x", {}), InputError);
  EXPECT_EQ(metric_input_problem("retrieval_score", {"Paragraph 3"}, {}), "");
  EXPECT_EQ(metric_input_problem("retrieval_score", {"Paragraph 3", "three"}, {}),
            "retrieval_score: the answer 'three' has no 'Paragraph <number>'");
  EXPECT_EQ(metric_input_problem("rouge_score", {}, {}), "scoring: no reference answers");
}

TEST(LongBenchScore, DefaultsFromLongBenchTasks) {
  for (const char* t : {"narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "triviaqa"})
    EXPECT_EQ(default_metric(t), "qa_f1_score") << t;
  for (const char* t : {"gov_report", "qmsum", "multi_news", "samsum"})
    EXPECT_EQ(default_metric(t), "rouge_score") << t;
  EXPECT_EQ(default_metric("trec"), "classification_score");
  EXPECT_EQ(default_metric("lsht"), "classification_score");
  EXPECT_EQ(default_metric("passage_retrieval_en"), "retrieval_score");
  EXPECT_EQ(default_metric("passage_retrieval_zh"), "retrieval_zh_score");
  EXPECT_EQ(default_metric("passage_count"), "count_score");
  EXPECT_EQ(default_metric("lcc"), "code_sim_score");
  EXPECT_EQ(default_metric("repobench-p"), "code_sim_score");
  EXPECT_EQ(default_metric("qasper_e"), "qa_f1_score");       // LongBench-E
  EXPECT_EQ(default_metric("dureader"), "string_match_all");  // jieba's rouge_zh_score: not here
  EXPECT_EQ(default_metric("qa_2"), "string_match_part");
  for (const char* t : {"trec", "triviaqa", "samsum", "lsht", "trec_e"}) EXPECT_TRUE(default_first_line(t)) << t;
  for (const char* t : {"narrativeqa", "gov_report", "qa_1", "", "trecx"}) EXPECT_FALSE(default_first_line(t)) << t;
}

TEST(LongBenchSamples, LoadsLongBenchRowsAndRoundTrips) {
  // Rows as kvpress's longbench dataset has them (all_classes null where the task has none).
  const std::string text =
      R"({"context": "Paragraph 1: ...", "question": "Which paragraph?", "answers": ["Paragraph 3"], "all_classes": null, "task": "passage_retrieval_en", "max_new_tokens": 52, "length": 9000, "_id": "x1"})"
      "\n"
      R"({"context": "Q: Who? Type: Human being", "question": "What is X?", "answer_prefix": "Type:", "answers": ["Location"], "all_classes": ["Human being", "Location"], "task": "trec", "max_new_tokens": 84})"
      "\n"
      R"({"context": "c", "question": "q", "answers": ["Location"], "all_classes": ["Location"], "metric": "classification_score", "task": "trec", "first_line": false, "max_new_tokens": 8})"
      "\n";
  const std::vector<EvalSample> s = parse_eval_samples(text, "lb.jsonl");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].metric, "retrieval_score");
  EXPECT_TRUE(s[0].all_classes.empty());
  EXPECT_FALSE(s[0].first_line);
  EXPECT_EQ(s[1].metric, "classification_score");
  EXPECT_EQ(s[1].all_classes, (Strings{"Human being", "Location"}));
  EXPECT_TRUE(s[1].first_line);
  EXPECT_FALSE(s[2].first_line);  // given: overrides the task's default
  EXPECT_EQ(score(s[1], "Location\nHuman being"), 1.0);
  EXPECT_EQ(score(s[2], "Location\nHuman being"), 1.0);  // one class named, the right one

  for (const EvalSample& a : s) {
    const std::string line = eval_sample_json(a);
    const std::vector<EvalSample> back = parse_eval_samples(line + "\n", "round.jsonl");
    ASSERT_EQ(back.size(), 1u) << line;
    EXPECT_EQ(back[0].metric, a.metric) << line;
    EXPECT_EQ(back[0].all_classes, a.all_classes) << line;
    EXPECT_EQ(back[0].first_line, a.first_line) << line;
    EXPECT_EQ(back[0].answers, a.answers) << line;
  }
  EXPECT_EQ(eval_sample_json(s[0]).find("all_classes"), std::string::npos);  // only when there are some
}

TEST(LongBenchSamples, BadLinesNameFileAndLine) {
  const std::string ok = R"({"context": "c", "question": "q", "answers": ["7"], "max_new_tokens": 8})";
  const auto error = [&](const std::string& bad) -> std::string {
    try {
      parse_eval_samples(ok + "\n" + bad + "\n", "lb.jsonl");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::string base = R"({"context": "c", "question": "q", "max_new_tokens": 8, )";
  EXPECT_EQ(error(base + R"("answers": ["7"], "metric": "qa_f1"})"),
            "lb.jsonl: line 2: unknown metric 'qa_f1' (known: string_match_all, string_match_part, qa_f1_score, "
            "rouge_score, classification_score, retrieval_score, retrieval_zh_score, count_score, code_sim_score)");
  EXPECT_EQ(error(base + R"("answers": ["Location"], "metric": "classification_score"})"),
            "lb.jsonl: line 2: classification_score needs 'all_classes' (the class names), and there are none");
  EXPECT_EQ(error(base + R"("answers": ["Location"], "task": "trec", "all_classes": null})"),
            "lb.jsonl: line 2: classification_score needs 'all_classes' (the class names), and there are none");
  EXPECT_EQ(error(base + R"("answers": ["Location"], "task": "trec", "all_classes": []})"),
            "lb.jsonl: line 2: classification_score needs 'all_classes' (the class names), and there are none");
  EXPECT_EQ(error(base + R"("answers": ["7"], "all_classes": "Location"})"),
            "lb.jsonl: line 2: 'all_classes' must be a list of strings, not string");
  EXPECT_EQ(error(base + R"("answers": ["7"], "all_classes": ["a", 1]})"),
            "lb.jsonl: line 2: 'all_classes' has an element that is not a string");
  EXPECT_EQ(error(base + R"("answers": ["7"], "first_line": 1})"),
            "lb.jsonl: line 2: 'first_line' must be true or false, not number");
  EXPECT_EQ(error(base + R"("answers": ["the third"], "task": "passage_retrieval_en"})"),
            "lb.jsonl: line 2: retrieval_score: the answer 'the third' has no 'Paragraph <number>'");
  EXPECT_EQ(error(base + R"("answers": ["7"], "all_classes": ["a"], "first_line": true})"), "");
}

}  // namespace
}  // namespace kvscope
