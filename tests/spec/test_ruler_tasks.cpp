// RULER's synthetic tasks generated in C++ (ruler_tasks.h): the templates and needle formats as
// NVIDIA/RULER writes them (scripts/data/synthetic/constants.py, niah.py, variable_tracking.py,
// common_words_extraction.py, freq_words_extraction.py), the split of pycode-recall-17m's
// golden/ruler.jsonl, answers in the context, needle spans, determinism, sizing (the haystack is the
// largest that fits: one more unit would not) and every error path.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../temp_dir.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/ruler_tasks.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Strings = std::vector<std::string>;

const std::string kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

/// The bytes of a sample's prompt (without a chat template).
int64_t prompt_bytes(const EvalSample& s) {
  return static_cast<int64_t>(s.instruction.size() + s.context.size() + s.question.size() + s.answer_prefix.size());
}

/// A stand-in tokenizer: a quarter of the prompt's bytes, rounded up.
int64_t quarter_bytes(const EvalSample& s) { return (prompt_bytes(s) + 3) / 4; }

/// The tokens quarter_bytes would count for the prompt with `more` bytes of haystack.
int64_t quarter_bytes_plus(const EvalSample& s, size_t more) {
  return (prompt_bytes(s) + static_cast<int64_t>(more) + 3) / 4;
}

/// The whitespace-separated words of `text`.
Strings words_of(const std::string& text) {
  Strings out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

RulerTaskOptions options(const std::string& task, int64_t length = 4096, int64_t n = 2, uint64_t seed = 42) {
  RulerTaskOptions o;
  o.task = task;
  o.length = length;
  o.n = n;
  o.seed = seed;
  return o;
}

Strings split(const std::string& text, char sep) {
  Strings out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) out.push_back(part);
  if (!text.empty() && text.back() == sep) out.push_back("");
  return out;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

std::string span_text(const EvalSample& s, const TextSpan& span) {
  return s.context.substr(static_cast<size_t>(span.begin), static_cast<size_t>(span.end - span.begin));
}

/// An essay of `sentences` sentences (numbered, so that no two are alike), with abbreviations and
/// initials that do not end sentences, and paragraphs.
std::string essay_text(int sentences) {
  static const Strings kSentences = {"Startups grow when founders listen to users.",
                                     "Mr. Brown said so in his talk about growth!",
                                     "Do users know what they want?",
                                     "Often they do, e.g. when they pay for it.",
                                     "J. Smith wrote an essay about the U.S. economy.",
                                     "The best ideas look bad at first.",
                                     "Work on hard problems; the easy ones are taken.",
                                     "Why do so few people try?"};
  std::string text;
  for (int i = 0; i < sentences; ++i) {
    const std::string& sentence = kSentences[static_cast<size_t>(i) % kSentences.size()];
    text += sentence.substr(0, sentence.size() - 1) + " " + std::to_string(i) + sentence.back();
    text += (i % 5 == 4) ? "\n\n" : " ";
  }
  return text;
}

const std::regex kKey("[a-z]{3,12}-[a-z]{3,12}");
const std::regex kSevenDigits("[1-9][0-9]{6}");
const std::regex kUuid("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");

void expect_same(const std::vector<EvalSample>& a, const std::vector<EvalSample>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].instruction, b[i].instruction);
    EXPECT_EQ(a[i].context, b[i].context);
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].answer_prefix, b[i].answer_prefix);
    EXPECT_EQ(a[i].answers, b[i].answers);
    EXPECT_EQ(a[i].needles, b[i].needles);
  }
}

/// The fields every generated sample carries, and that its prompt fits the length.
void expect_common(const EvalSample& s, const RulerTaskOptions& o, int64_t index, int64_t max_new_tokens) {
  EXPECT_EQ(s.task, o.task);
  EXPECT_EQ(s.length, o.length);
  EXPECT_EQ(s.id, o.task + "-" + std::to_string(o.length) + "-" + std::to_string(index));
  EXPECT_EQ(s.metric, "string_match_all");
  EXPECT_EQ(s.chat, o.chat);
  EXPECT_EQ(s.max_new_tokens, max_new_tokens);
  EXPECT_FALSE(s.answers.empty());
  EXPECT_LE(quarter_bytes(s) + max_new_tokens, o.length) << s.id;
  for (const auto& a : s.answers) EXPECT_NE(s.context.find(a), std::string::npos) << s.id << ": " << a;
  for (size_t i = 0; i < s.needles.size(); ++i) {
    EXPECT_LE(0, s.needles[i].begin);
    EXPECT_LT(s.needles[i].begin, s.needles[i].end);
    EXPECT_LE(s.needles[i].end, static_cast<int64_t>(s.context.size()));
    if (i) {
      EXPECT_LE(s.needles[i - 1].end, s.needles[i].begin);
    }
  }
}

std::string error_of(const RulerTaskOptions& o) {
  try {
    generate_ruler_samples(o, quarter_bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(RulerTasks, Names) {
  EXPECT_EQ(ruler_task_names(),
            (Strings{"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                     "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "niah_paul_graham"}));
}

TEST(RulerTasks, NiahSingle1IsRulersTemplateWithOneNeedleInNoiseLines) {
  const RulerTaskOptions o = options("niah_single_1", 2048, 3);
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  ASSERT_EQ(samples.size(), 3u);
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 128);
    EXPECT_EQ(s.instruction,
              "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
              "about the number afterwards.\n");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(
        s.question, m, std::regex("\nWhat is the special magic number for (\\S+) mentioned in the provided text\\?")))
        << s.question;
    const std::string key = m[1];
    EXPECT_TRUE(std::regex_match(key, kKey)) << key;
    EXPECT_EQ(s.answer_prefix, " The special magic number for " + key + " mentioned in the provided text is");
    ASSERT_EQ(s.answers.size(), 1u);
    EXPECT_TRUE(std::regex_match(s.answers[0], kSevenDigits)) << s.answers[0];
    const std::string needle = "One of the special magic numbers for " + key + " is: " + s.answers[0] + ".";
    // niah.py joins the noise lines and the needle with '\n'.
    size_t noise = 0;
    size_t needles = 0;
    for (const auto& line : split(s.context, '\n')) {
      if (line == kNoise) ++noise;
      if (line == needle) ++needles;
      EXPECT_TRUE(line == kNoise || line == needle) << line;
    }
    EXPECT_EQ(needles, 1u);
    ASSERT_EQ(s.needles.size(), 1u);
    EXPECT_EQ(span_text(s, s.needles[0]), needle);
    // The largest haystack: one more noise line (and its '\n') would not fit.
    EXPECT_GT(quarter_bytes_plus(s, kNoise.size() + 1) + 128, o.length);
    EXPECT_GT(noise, 50u);
  }
  EXPECT_NE(samples[0].answers, samples[1].answers);
}

// RULER's --remove_newline_tab: the same samples with every whitespace run one space, the needle
// spans on the same text; applied to the golden file's form (noise lines joined by spaces), and a
// field boundary keeps exactly one space.
TEST(RulerTasks, RemoveNewlineTabJoinsTheNoiseLinesWithSpacesAndMovesTheNeedles) {
  RulerTaskOptions o = options("niah_single_1", 2048, 2);
  const auto lines = generate_ruler_samples(o, quarter_bytes);
  o.remove_newline_tab = true;
  const auto spaced = generate_ruler_samples(o, quarter_bytes);
  ASSERT_EQ(spaced.size(), lines.size());
  for (size_t i = 0; i < spaced.size(); ++i) {
    const EvalSample &a = lines[i], &b = spaced[i];
    expect_common(b, o, static_cast<int64_t>(i), 128);
    EXPECT_EQ(b.answers, a.answers);
    EXPECT_EQ(b.instruction,
              "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
              "about the number afterwards. ");
    EXPECT_EQ(b.context.find('\n'), std::string::npos);
    EXPECT_EQ(b.context.find("  "), std::string::npos);
    EXPECT_EQ(b.context.substr(0, kNoise.size() + 1), kNoise + " ");
    EXPECT_EQ(b.question.substr(0, 13), " What is the ");
    EXPECT_EQ(b.answer_prefix, a.answer_prefix);
    ASSERT_EQ(b.needles.size(), 1u);
    EXPECT_EQ(span_text(b, b.needles[0]), span_text(a, a.needles[0]));
    std::string joined = a.context;
    std::replace(joined.begin(), joined.end(), '\n', ' ');
    EXPECT_EQ(b.context, joined);
  }
  EvalSample t;
  t.instruction = "\tIntro:\n\n";
  t.context = "\n a \t\tb\n\nNEEDLE\nc\n";
  t.needles = {{9, 15}};  // "NEEDLE"
  t.question = "\nQ?  ";
  t.answer_prefix = "";
  remove_newline_tab(t);
  EXPECT_EQ(t.instruction, "Intro: ");
  EXPECT_EQ(t.context, "a b NEEDLE c ");
  EXPECT_EQ(t.context.substr(static_cast<size_t>(t.needles[0].begin), 6), "NEEDLE");
  EXPECT_EQ(t.needles[0].end - t.needles[0].begin, 6);
  EXPECT_EQ(t.question, "Q?");
}

TEST(RulerTasks, NiahSingle1SplitsAsTheGoldenFile) {
  // pycode-recall-17m/golden/ruler.jsonl was built from RULER's niah recipe: the same instruction,
  // question and answer prefix (but for the key), noise sentences and needle format.
  const fs::path golden =
      fs::path(KVSCOPE_SOURCE_DIR).parent_path() / "shared/models/pycode-recall-17m/golden/ruler.jsonl";
  if (!fs::exists(golden)) GTEST_SKIP() << golden << " is not here";
  std::ifstream in(golden);
  std::string line;
  std::getline(in, line);
  const auto g = nlohmann::json::parse(line);
  const std::string golden_question = g["question"].get<std::string>();
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(golden_question, r, std::regex("for (\\S+) mentioned"));
    return r;
  }();
  const std::string golden_key = m[1];
  const std::string golden_value = g["answers"][0].get<std::string>();
  const auto s = generate_ruler_samples(options("niah_single_1", 2048, 1), quarter_bytes).at(0);
  const std::string key =
      span_text(s, s.needles[0]).substr(std::string("One of the special magic numbers for ").size());
  const std::string our_key = key.substr(0, key.find(' '));

  EXPECT_EQ(s.instruction, g["instruction"].get<std::string>());
  auto with_key = [](std::string text, const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
    return text;
  };
  EXPECT_EQ(with_key(s.question, our_key, "KEY"), with_key(golden_question, golden_key, "KEY"));
  EXPECT_EQ(with_key(s.answer_prefix, our_key, "KEY"),
            with_key(g["answer_prefix"].get<std::string>(), golden_key, "KEY"));
  const std::string golden_needle = "One of the special magic numbers for " + golden_key + " is: " + golden_value + ".";
  const std::string golden_context = g["context"].get<std::string>();
  EXPECT_NE(golden_context.find(golden_needle), std::string::npos);
  EXPECT_EQ(span_text(s, s.needles[0]),
            "One of the special magic numbers for " + our_key + " is: " + s.answers[0] + ".");
  // Both haystacks are the noise sentences (the golden file joins lines with ' ', RULER with '\n').
  std::string rest = golden_context;
  rest.replace(rest.find(golden_needle), golden_needle.size(), "");
  for (const auto& sentence : split(with_key(rest, "\n", " "), '.')) {
    static const std::set<std::string> kSentences = {"The grass is green", "The sky is blue", "The sun is yellow",
                                                     "Here we go", "There and back again"};
    std::string t = sentence;
    while (!t.empty() && t.front() == ' ') t.erase(0, 1);
    if (!t.empty()) {
      EXPECT_TRUE(kSentences.count(t)) << t;
    }
  }
}

TEST(RulerTasks, NiahMultikey2HidesTheNeedleAmongDistractorNeedles) {
  const RulerTaskOptions o = options("niah_multikey_2", 4096, 2);
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 128);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(s.question, m, std::regex("number for (\\S+) mentioned")));
    const std::string key = m[1];
    const std::regex needle("One of the special magic numbers for ([a-z]+-[a-z]+) is: ([1-9][0-9]{6})\\.");
    size_t with_key = 0;
    const Strings lines = split(s.context, '\n');
    for (const auto& line : lines) {
      std::smatch n;
      ASSERT_TRUE(std::regex_match(line, n, needle)) << line;
      if (n[1] == key) {
        ++with_key;
        EXPECT_EQ(n[2], s.answers[0]);
      }
    }
    EXPECT_EQ(with_key, 1u);
    ASSERT_EQ(s.needles.size(), 1u);  // only the needle of the queried key
    EXPECT_EQ(span_text(s, s.needles[0]), "One of the special magic numbers for " + key + " is: " + s.answers[0] + ".");
    EXPECT_GT(lines.size(), 50u);
  }
}

TEST(RulerTasks, LaterTurnsAskForTheOtherKeysOfTheContext) {
  // niah_multikey_1 places 4 keys and asks for one: 3 later turns can ask for the others, each in
  // the one-key template, its answer the needle of its key; the first question is the one a sample
  // without turns asks.
  RulerTaskOptions o = options("niah_multikey_1", 4096, 3);
  o.haystack = "noise";
  const auto plain = generate_ruler_samples(o, quarter_bytes);
  o.turns = 3;
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  ASSERT_EQ(samples.size(), 3u);
  const std::regex needle("One of the special magic numbers for ([a-z]+-[a-z]+) is: ([1-9][0-9]{6})\\.");
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    EXPECT_EQ(s.question, plain[i].question);
    EXPECT_EQ(s.answers, plain[i].answers);
    ASSERT_EQ(s.turns.size(), 3u);
    std::map<std::string, std::string> value_of;  // key -> value of every needle in the context
    for (auto it = std::sregex_iterator(s.context.begin(), s.context.end(), needle); it != std::sregex_iterator(); ++it)
      value_of[(*it)[1]] = (*it)[2];
    ASSERT_EQ(value_of.size(), 4u);
    std::set<std::string> asked;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(s.question, m, std::regex("number for (\\S+) mentioned")));
    asked.insert(m[1]);
    for (const EvalTurn& t : s.turns) {
      ASSERT_TRUE(std::regex_match(t.question, m,
                                   std::regex("\nWhat is the special magic number for (\\S+) mentioned in the "
                                              "provided text\\?")))
          << t.question;
      const std::string key = m[1];
      EXPECT_TRUE(asked.insert(key).second) << key << " asked twice";
      EXPECT_EQ(t.answer_prefix, " The special magic number for " + key + " mentioned in the provided text is");
      ASSERT_EQ(t.answers.size(), 1u);
      EXPECT_EQ(t.answers[0], value_of.at(key));
    }
    EXPECT_EQ(s.needles.size(), 4u) << "every asked key's needle";
  }
  o.turns = 4;
  try {
    generate_ruler_samples(o, quarter_bytes);
    FAIL() << "4 later turns for 3 keys";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("places 3 keys its question does not ask for"), std::string::npos) << e.what();
  }
  RulerTaskOptions vt = options("vt", 4096, 1);
  vt.turns = 1;
  EXPECT_THROW(generate_ruler_samples(vt, quarter_bytes), InputError);
}

TEST(RulerTasks, NiahMultikey3UsesUuidKeysAndValues) {
  const RulerTaskOptions o = options("niah_multikey_3", 4096, 1);
  const EvalSample s = generate_ruler_samples(o, quarter_bytes).at(0);
  expect_common(s, o, 0, 128);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      s.question, m, std::regex("\nWhat is the special magic uuid for (\\S+) mentioned in the provided text\\?")));
  const std::string key = m[1];
  EXPECT_TRUE(std::regex_match(key, kUuid)) << key;
  EXPECT_TRUE(std::regex_match(s.answers.at(0), kUuid)) << s.answers[0];
  EXPECT_EQ(s.instruction,
            "A special magic uuid is hidden within the following text. Make sure to memorize it. I will quiz you "
            "about the uuid afterwards.\n");
  EXPECT_EQ(s.answer_prefix, " The special magic uuid for " + key + " mentioned in the provided text is");
  EXPECT_EQ(span_text(s, s.needles.at(0)), "One of the special magic uuids for " + key + " is: " + s.answers[0] + ".");
}

TEST(RulerTasks, NiahMultivalueAndMultiqueryUseThePluralTemplate) {
  const std::string some =
      "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you "
      "about the numbers afterwards.\n";
  RulerTaskOptions o = options("niah_multivalue", 4096, 1);
  o.haystack = "noise";
  const EvalSample mv = generate_ruler_samples(o, quarter_bytes).at(0);
  expect_common(mv, o, 0, 128);
  EXPECT_EQ(mv.instruction, some);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      mv.question, m,
      std::regex("\nWhat are all the special magic numbers for (\\S+) mentioned in the provided text\\?")));
  const std::string key = m[1];
  EXPECT_EQ(mv.answer_prefix, " The special magic numbers for " + key + " mentioned in the provided text are");
  ASSERT_EQ(mv.answers.size(), 4u);
  ASSERT_EQ(mv.needles.size(), 4u);
  std::multiset<std::string> spans;
  for (const auto& span : mv.needles) spans.insert(span_text(mv, span));
  std::multiset<std::string> expected;
  for (const auto& a : mv.answers) expected.insert("One of the special magic numbers for " + key + " is: " + a + ".");
  EXPECT_EQ(spans, expected);

  o = options("niah_multiquery", 4096, 1);
  o.haystack = "noise";
  const EvalSample mq = generate_ruler_samples(o, quarter_bytes).at(0);
  expect_common(mq, o, 0, 128);
  EXPECT_EQ(mq.instruction, some);
  ASSERT_TRUE(std::regex_match(mq.question, m,
                               std::regex("\nWhat are all the special magic numbers for (\\S+), (\\S+), (\\S+), and "
                                          "(\\S+) mentioned in the provided text\\?")))
      << mq.question;
  ASSERT_EQ(mq.answers.size(), 4u);
  ASSERT_EQ(mq.needles.size(), 4u);
  for (size_t q = 0; q < 4; ++q) {
    const std::string needle = "One of the special magic numbers for " + m[q + 1].str() + " is: " + mq.answers[q] + ".";
    EXPECT_EQ(occurrences(mq.context, needle), 1u) << needle;
  }
  EXPECT_EQ(mq.answer_prefix, " The special magic numbers for " + m[1].str() + ", " + m[2].str() + ", " + m[3].str() +
                                  ", and " + m[4].str() + " mentioned in the provided text are");
}

TEST(RulerTasks, EssayHaystackPlacesNeedlesBetweenSentences) {
  TempDir dir;
  RulerTaskOptions o = options("niah_multikey_1", 4096, 12);
  o.essay_files = {dir.write("a.txt", essay_text(200)), dir.write("b.txt", essay_text(200))};
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  ASSERT_EQ(samples.size(), 12u);
  const std::regex needle("One of the special magic numbers for [a-z]+-[a-z]+ is: [1-9][0-9]{6}\\.");
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 128);
    ASSERT_EQ(s.needles.size(), 1u);  // 4 keys, 1 asked: the other 3 needles are distractors
    std::smatch m;
    ASSERT_TRUE(std::regex_search(s.question, m, std::regex("number for (\\S+) mentioned")));
    EXPECT_EQ(span_text(s, s.needles[0]),
              "One of the special magic numbers for " + m[1].str() + " is: " + s.answers.at(0) + ".");
    size_t count = 0;
    for (auto it = std::sregex_iterator(s.context.begin(), s.context.end(), needle); it != std::sregex_iterator();
         ++it, ++count) {
      const auto at = static_cast<size_t>(it->position());
      // After a sentence end (not "Mr." or an initial) or at the start; joined with single spaces.
      if (at <= 1) {  // depth 0: an empty run of sentences, then ' '
        EXPECT_EQ(s.context.substr(0, at), std::string(at, ' '));
        continue;
      }
      EXPECT_EQ(s.context[at - 1], ' ');
      const std::string before = s.context.substr(0, at - 1);
      const bool sentence_end = before.empty() || before.back() == '.' || before.back() == '!' ||
                                before.back() == '?' || before.back() == ' ' /* an empty run of sentences */;
      EXPECT_TRUE(sentence_end) << before.substr(before.size() > 40 ? before.size() - 40 : 0);
      for (const char* abbreviation : {" Mr.", " J.", " U.S.", " e.g."}) {
        const std::string a = abbreviation;
        EXPECT_FALSE(before.size() >= a.size() && before.compare(before.size() - a.size(), a.size(), a) == 0)
            << "a needle after" << a;
      }
    }
    EXPECT_EQ(count, 4u);
    EXPECT_EQ(s.context.find('\n'), std::string::npos);  // whitespace runs become one space
    EXPECT_EQ(s.context.find("  "), std::string::npos);
  }
}

TEST(RulerTasks, NiahSingle3NeedsEssayFilesOrAnotherHaystack) {
  RulerTaskOptions o = options("niah_single_3", 4096, 1);
  const std::string e = error_of(o);
  EXPECT_NE(e.find("niah_single_3: the essay haystack needs essay files"), std::string::npos) << e;
  o.haystack = "noise";
  const EvalSample s = generate_ruler_samples(o, quarter_bytes).at(0);
  expect_common(s, o, 0, 128);
  EXPECT_TRUE(std::regex_match(s.answers.at(0), kUuid));
  const std::string start = "One of the special magic uuids for ";
  EXPECT_EQ(span_text(s, s.needles.at(0)).substr(0, start.size()), start);
}

TEST(RulerTasks, CodeHaystackKeepsTheFilesLinesInOrder) {
  TempDir dir;
  std::string code;
  for (int i = 0; i < 400; ++i)
    code += "def f" + std::to_string(i) + "(x):\n    return x + " + std::to_string(i) + "\n\n";
  RulerTaskOptions o = options("niah_single_1", 2048, 2);
  o.haystack = "code";
  o.code_files = {dir.write("a.py", code)};
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 128);
    const std::string needle = span_text(s, s.needles.at(0));
    std::string without = s.context;
    const size_t at = without.find(needle);
    ASSERT_NE(at, std::string::npos);
    without.erase(at, needle.size() + (at + needle.size() < without.size() ? 1 : 0));  // the needle's line
    EXPECT_EQ(code.compare(0, without.size(), without), 0);                            // the first lines of the file
    // One more line would not fit.
    const std::string next = split(code, '\n').at(split(without, '\n').size());
    EXPECT_GT(quarter_bytes_plus(s, next.size() + 1) + 128, o.length);
  }
}

TEST(RulerTasks, VariableTrackingChainAndExample) {
  const RulerTaskOptions o = options("vt", 4096, 2);
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  const std::string instruction =
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 30);
    std::smatch m;
    ASSERT_TRUE(
        std::regex_match(s.question, m,
                         std::regex("\nQuestion: Find all variables that are assigned the value ([0-9]{5}) in the text "
                                    "above\\.")));
    const std::string value = m[1];
    EXPECT_EQ(s.answer_prefix,
              " Answer: According to the chain(s) of variable assignment in the text above, 5 variables are assigned "
              "the value " +
                  value + ", they are: ");
    ASSERT_EQ(s.answers.size(), 5u);
    for (const auto& name : s.answers) EXPECT_TRUE(std::regex_match(name, std::regex("[A-Z]{5}"))) << name;
    // The chain, in order, one line each, with variable_tracking.py's trailing space on the hops.
    Strings chain = {"VAR " + s.answers[0] + " = " + value};
    for (size_t j = 1; j < 5; ++j) chain.push_back("VAR " + s.answers[j] + " = VAR " + s.answers[j - 1] + " ");
    ASSERT_EQ(s.needles.size(), 5u);
    for (size_t j = 0; j < 5; ++j) EXPECT_EQ(span_text(s, s.needles[j]), chain[j]);
    size_t noise = 0;
    for (const auto& line : split(s.context, '\n')) {
      if (line == kNoise) ++noise;
      EXPECT_TRUE(line == kNoise || std::find(chain.begin(), chain.end(), line) != chain.end()) << line;
    }
    EXPECT_GT(quarter_bytes_plus(s, kNoise.size() + 1) + 30, o.length);
    // The one-shot example: a solved prompt with 3-letter names, then the task's instruction.
    const std::regex example(
        "Memorize and track the chain\\(s\\) of variable assignment hidden in the following text\\.\n\n"
        "[\\s\\S]*\nQuestion: Find all variables that are assigned the value ([0-9]{5}) in the text above\\. Answer: "
        "According to the chain\\(s\\) of variable assignment in the text above, 5 variables are assigned the value "
        "\\1, they are:  ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3})\n\n" +
        std::string("Memorize and track the chain\\(s\\) of variable assignment hidden in the following text\\.\n\n"));
    std::smatch e;
    ASSERT_TRUE(std::regex_match(s.instruction, e, example)) << s.instruction;
    EXPECT_NE(s.instruction.find("\nVAR " + e[2].str() + " = " + e[1].str() + "\n"), std::string::npos);
    EXPECT_NE(s.instruction.find("\nVAR " + e[6].str() + " = VAR " + e[5].str() + " \n"), std::string::npos);
    EXPECT_GT(noise, 20u);
  }
  // Each sample renames the example (randomize_icl) but keeps its haystack.
  EXPECT_NE(samples[0].instruction, samples[1].instruction);
  EXPECT_EQ(samples[0].instruction.size(), samples[1].instruction.size());
}

TEST(RulerTasks, CommonWordsExtraction) {
  for (const int64_t length : {int64_t{4096}, int64_t{2048}}) {
    const RulerTaskOptions o = options("cwe", length, 2);
    const auto samples = generate_ruler_samples(o, quarter_bytes);
    const int common = length >= 4096 ? 30 : 6;
    const int uncommon = length >= 4096 ? 3 : 1;
    const std::string instruction =
        "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
        "that appear most often.\n";
    const std::string question = "\nQuestion: What are the 10 most common words in the above list?";
    const std::string prefix = " Answer: The top 10 words that appear most often in the list are:";
    for (size_t i = 0; i < samples.size(); ++i) {
      const EvalSample& s = samples[i];
      expect_common(s, o, static_cast<int64_t>(i), 120);
      EXPECT_EQ(s.question, question);
      EXPECT_EQ(s.answer_prefix, prefix);
      // The one-shot example, solved, before the instruction.
      EXPECT_EQ(s.instruction.substr(0, instruction.size()), instruction);
      EXPECT_EQ(s.instruction.substr(s.instruction.size() - instruction.size() - 1), "\n" + instruction);
      const size_t solved = s.instruction.find(question + prefix + " 1. ");
      ASSERT_NE(solved, std::string::npos) << s.instruction;
      const std::string answer_line = s.instruction.substr(solved + question.size() + prefix.size() + 1);
      EXPECT_TRUE(std::regex_match(answer_line.substr(0, answer_line.find('\n') + 1),
                                   std::regex("1\\. [a-z]+ 2\\. [a-z]+ 3\\. [a-z]+ 4\\. [a-z]+ 5\\. [a-z]+ 6\\. [a-z]+ "
                                              "7\\. [a-z]+ 8\\. [a-z]+ 9\\. [a-z]+ 10\\. [a-z]+\n")))
          << answer_line;
      // "1. w 2. w ...": 10 common words x30 (x6 below 4096), the others x3 (x1).
      const Strings tokens = split(s.context, ' ');
      ASSERT_EQ(tokens.size() % 2, 0u);
      std::map<std::string, int> counts;
      for (size_t j = 0; j < tokens.size(); j += 2) {
        EXPECT_EQ(tokens[j], std::to_string(j / 2 + 1) + ".");
        ++counts[tokens[j + 1]];
      }
      ASSERT_EQ(s.answers.size(), 10u);
      for (const auto& [word, count] : counts) {
        const bool is_answer = std::find(s.answers.begin(), s.answers.end(), word) != s.answers.end();
        EXPECT_EQ(count, is_answer ? common : uncommon) << word;
      }
      EXPECT_EQ(s.needles.size(), static_cast<size_t>(10 * common));
      for (const auto& span : s.needles) {
        EXPECT_NE(std::find(s.answers.begin(), s.answers.end(), span_text(s, span)), s.answers.end());
      }
    }
  }
}

TEST(RulerTasks, FrequentWordsExtraction) {
  const RulerTaskOptions o = options("fwe", 4096, 2);
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 50);
    EXPECT_EQ(s.instruction,
              "Read the following coded text and track the frequency of each coded word. Find the three most "
              "frequently appeared coded words. ");
    EXPECT_EQ(s.question,
              "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
              "frequently appeared words in the above coded text?");
    EXPECT_EQ(s.answer_prefix,
              " Answer: According to the coded text above, the three most frequently appeared words are:");
    std::map<std::string, int64_t> counts;
    for (const auto& w : split(s.context, ' ')) {
      EXPECT_TRUE(w == "..." || std::regex_match(w, std::regex("[a-z]{6}"))) << w;
      ++counts[w];
    }
    ASSERT_EQ(s.answers.size(), 3u);
    // Rank k appears floor(n k^-2 / zeta(2)) times: '...' (rank 1), then the answers, in order.
    const int64_t top = counts["..."];
    EXPECT_LE(std::abs(4 * counts[s.answers[0]] - top), 4);
    EXPECT_LE(std::abs(9 * counts[s.answers[1]] - top), 9);
    EXPECT_LE(std::abs(16 * counts[s.answers[2]] - top), 16);
    EXPECT_GT(counts["..."], counts[s.answers[0]]);
    EXPECT_GT(counts[s.answers[0]], counts[s.answers[1]]);
    EXPECT_GT(counts[s.answers[1]], counts[s.answers[2]]);
    for (const auto& [word, count] : counts) {
      if (word != "..." && std::find(s.answers.begin(), s.answers.end(), word) == s.answers.end()) {
        EXPECT_LT(count, counts[s.answers[2]]) << word;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(s.needles.size()),
              counts[s.answers[0]] + counts[s.answers[1]] + counts[s.answers[2]]);
    for (const auto& span : s.needles) {
      EXPECT_NE(std::find(s.answers.begin(), s.answers.end(), span_text(s, span)), s.answers.end());
    }
  }
}

TEST(RulerTasks, PaulGrahamNeedleAtEachDepth) {
  TempDir dir;
  RulerTaskOptions o = options("niah_paul_graham", 2048, 2);
  o.essay_files = {dir.write("essay.txt", essay_text(300))};
  o.depths = {0, 50, 100};
  const auto samples = generate_ruler_samples(o, quarter_bytes);
  ASSERT_EQ(samples.size(), 6u);
  const std::string sentence =
      "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.";
  for (size_t i = 0; i < samples.size(); ++i) {
    const EvalSample& s = samples[i];
    expect_common(s, o, static_cast<int64_t>(i), 64);
    EXPECT_EQ(s.instruction, "This is a very long story book: <book> ");
    EXPECT_EQ(s.question,
              " </book>.\nBased on the content of the book, Question: What is the best thing to do in San Francisco?");
    EXPECT_EQ(s.answer_prefix, " Answer:");
    ASSERT_EQ(s.needles.size(), 1u);
    EXPECT_EQ(span_text(s, s.needles[0]), sentence);
    const auto begin = static_cast<size_t>(s.needles[0].begin);
    EXPECT_EQ(s.context.substr(begin - 1, sentence.size() + 2), "\n" + sentence + "\n");
    const size_t depth = i / 2;
    if (depth == 0) {
      EXPECT_EQ(begin, 1u);
    }
    if (depth == 1) {
      EXPECT_EQ(s.context[begin - 2], '.');  // walked back to the end of a sentence
      const double at = static_cast<double>(begin - 1) / static_cast<double>(s.context.size() - sentence.size() - 2);
      EXPECT_GT(at, 0.4);
      EXPECT_LE(at, 0.5);
    }
    if (depth == 2) {
      EXPECT_EQ(begin + sentence.size() + 1, s.context.size());
    }
  }
  // Replicate 0 starts at the essay's first word, replicate 1 elsewhere; the same at every depth.
  EXPECT_EQ(samples[0].context.substr(sentence.size() + 2, 20), essay_text(1).substr(0, 20));
  EXPECT_NE(samples[0].context, samples[1].context);
  EXPECT_EQ(samples[1].context.substr(sentence.size() + 2, 30), samples[5].context.substr(0, 30));
}

TEST(RulerTasks, SameSeedSameSamplesOtherSeedOthers) {
  TempDir dir;
  const fs::path essay = dir.write("essay.txt", essay_text(400));
  for (const std::string& task : ruler_task_names()) {
    RulerTaskOptions o = options(task, 2048, 3, 7);
    o.essay_files = {essay};
    o.depths = {30};
    const auto a = generate_ruler_samples(o, quarter_bytes);
    const auto b = generate_ruler_samples(o, quarter_bytes);
    expect_same(a, b);
    // Sample i does not depend on how many come after it.
    o.n = 2;
    const auto c = generate_ruler_samples(o, quarter_bytes);
    expect_same(std::vector<EvalSample>(a.begin(), a.begin() + 2), c);
    o.n = 3;
    o.seed = 8;
    const auto d = generate_ruler_samples(o, quarter_bytes);
    ASSERT_EQ(d.size(), a.size());
    // Another seed: other keys, values and haystacks (niah_paul_graham's first replicate is the classic
    // fixed test; the later ones start elsewhere in the essay).
    for (size_t i = task == "niah_paul_graham" ? 1 : 0; i < a.size(); ++i) {
      EXPECT_NE(a[i].context + a[i].question + a[i].instruction, d[i].context + d[i].question + d[i].instruction)
          << task << " " << i;
    }
  }
}

TEST(RulerTasks, SizingTriesTheNextSizeAndItDoesNotFit) {
  // With a recording counter: the chosen haystack fits, and the same sample one unit larger was
  // tried and did not fit. The unit: distractor needles (lines) and distinct words.
  struct Case {
    std::string task;
    std::function<int64_t(const EvalSample&)> units;
  };
  const std::vector<Case> cases = {
      {"niah_multikey_2", [](const EvalSample& s) { return static_cast<int64_t>(split(s.context, '\n').size()) - 1; }},
      {"cwe",
       [](const EvalSample& s) {
         std::set<std::string> words;
         const Strings tokens = split(s.context, ' ');
         for (size_t j = 1; j < tokens.size(); j += 2) words.insert(tokens[j]);
         return static_cast<int64_t>(words.size());
       }},
      {"niah_single_2",
       [](const EvalSample& s) {
         return static_cast<int64_t>(words_of(s.context).size()) - 10;  // the needle's 10 words
       }},
  };
  TempDir dir;
  for (const Case& c : cases) {
    for (const int64_t length : {int64_t{1500}, int64_t{3000}, int64_t{8192}}) {
      std::map<std::pair<std::string, int64_t>, int64_t> seen;  // (sample's prompt, units) -> tokens
      auto counter = [&](const EvalSample& s) {
        const int64_t tokens = quarter_bytes(s);
        seen[{s.instruction + s.question, c.units(s)}] = tokens;
        return tokens;
      };
      RulerTaskOptions o = options(c.task, length, 3);
      o.essay_files = {dir.write("essay.txt", essay_text(600))};
      const auto samples = generate_ruler_samples(o, counter);
      for (const EvalSample& s : samples) {
        const int64_t units = c.units(s);
        const int64_t max_new = s.max_new_tokens;
        EXPECT_LE(quarter_bytes(s) + max_new, length);
        const auto next = seen.find({s.instruction + s.question, units + 1});
        ASSERT_NE(next, seen.end()) << c.task << " " << length << ": size " << units + 1 << " never tried";
        EXPECT_GT(next->second + max_new, length) << c.task << " " << length;
      }
    }
  }
}

TEST(RulerTasks, Errors) {
  std::string e = error_of(options("niah_single_4"));
  EXPECT_NE(e.find("unknown RULER task 'niah_single_4'"), std::string::npos) << e;
  EXPECT_NE(e.find("niah_single_1, niah_single_2"), std::string::npos) << e;
  EXPECT_NE(e.find("fwe, niah_paul_graham"), std::string::npos) << e;

  // The smallest noise haystack (1 line and the needle) is ~85 tokens of prompt + 128.
  e = error_of(options("niah_single_1", 150));
  EXPECT_NE(e.find("niah_single_1: length 150 is too small: the smallest haystack (1 noise line) needs "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(" + 128 new tokens)"), std::string::npos) << e;
  e = error_of(options("vt", 100));
  EXPECT_NE(e.find("vt: length 100 is too small"), std::string::npos) << e;
  e = error_of(options("fwe", 200));
  EXPECT_NE(e.find("fwe: length 200 is too small"), std::string::npos) << e;
  e = error_of(options("cwe", 300));
  EXPECT_NE(e.find("cwe: length 300 is too small: the smallest haystack (10 distinct words)"), std::string::npos) << e;

  for (const char* task :
       {"niah_single_2", "niah_multikey_1", "niah_multivalue", "niah_multiquery", "niah_paul_graham"}) {
    e = error_of(options(task));
    EXPECT_NE(e.find(std::string(task) + ": the essay haystack needs essay files"), std::string::npos) << e;
  }
  RulerTaskOptions o = options("niah_single_1");
  o.haystack = "essay";
  EXPECT_NE(error_of(o).find("the essay haystack needs essay files"), std::string::npos);
  o.haystack = "code";
  EXPECT_NE(error_of(o).find("niah_single_1: the code haystack needs source files"), std::string::npos);
  o.haystack = "sand";
  EXPECT_NE(error_of(o).find("unknown haystack 'sand' (known: noise, needle, essay, code)"), std::string::npos);
  o = options("cwe");
  o.haystack = "noise";
  EXPECT_NE(error_of(o).find("cwe: has no haystack to choose"), std::string::npos);
  o = options("vt");
  o.haystack = "needle";
  EXPECT_NE(error_of(o).find("vt: the needle haystack is for niah tasks"), std::string::npos);

  TempDir dir;
  o = options("niah_single_2");
  o.essay_files = {dir.write("ok.txt", essay_text(50)), dir.path() / "missing.txt"};
  EXPECT_EQ(error_of(o), (dir.path() / "missing.txt").string() + ": no such file");
  o.essay_files = {dir.path()};
  EXPECT_EQ(error_of(o), dir.path().string() + ": is a directory, not a text file");
  o.essay_files = {dir.write("blank.txt", " \n\t\n")};
  EXPECT_NE(error_of(o).find("blank.txt: holds no words"), std::string::npos);
  if (::geteuid() != 0) {  // root reads any file
    const fs::path locked = dir.write("locked.txt", essay_text(50));
    fs::permissions(locked, fs::perms::none);
    o.essay_files = {locked};
    EXPECT_EQ(error_of(o), locked.string() + ": cannot be read");
  }
  o = options("niah_single_1");
  o.haystack = "code";
  o.code_files = {dir.write("empty.py", "")};
  EXPECT_NE(error_of(o).find("empty.py: is empty"), std::string::npos);

  o = options("niah_single_1");
  o.words_file = dir.path() / "words";
  e = error_of(o);
  EXPECT_NE(e.find((dir.path() / "words").string() + ": no such file"), std::string::npos) << e;
  EXPECT_NE(e.find("wamerican"), std::string::npos) << e;
  o.words_file = dir.write("few", "apple\nbanana\n");
  EXPECT_NE(error_of(o).find("holds 2 words"), std::string::npos);
  // Tasks without word keys do not need the list.
  o.task = "niah_multikey_3";
  EXPECT_EQ(error_of(o), "");

  o = options("niah_paul_graham");
  o.haystack = "noise";
  o.depths = {50, 101};
  EXPECT_NE(error_of(o).find("niah_paul_graham: depth 101"), std::string::npos);
  o = options("niah_single_1");
  o.n = -1;
  EXPECT_NE(error_of(o).find("n must be >= 0"), std::string::npos);
  o.n = 0;
  EXPECT_TRUE(generate_ruler_samples(o, quarter_bytes).empty());
}

/// The lemmas of a WordNet index file (index.adj, index.noun) whose tagged-sense count is >= 2: the
/// field after the pointer symbols, read here independently of the generator.
std::set<std::string> common_wordnet(const fs::path& file) {
  std::set<std::string> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == ' ') continue;
    const Strings f = split(line, ' ');
    const size_t p_cnt = std::stoul(f.at(3));
    if (std::stol(f.at(5 + p_cnt)) >= 2) out.insert(f[0]);
  }
  return out;
}

TEST(RulerTasks, KeysAreCommonAdjectivesAndNounsAsWonderwordsGivesThem) {
  // RULER's "words" keys are adjective-noun pairs from wonderwords' lists of common adjectives and
  // nouns; here WordNet's common ones (tagged-sense count >= 2) that wamerican also holds.
  ASSERT_TRUE(fs::exists("/usr/share/dict/american-english")) << "install the Debian package wamerican";
  ASSERT_TRUE(fs::exists("/usr/share/wordnet/index.adj")) << "install the Debian package wordnet-base";
  const auto samples = generate_ruler_samples(options("niah_multikey_2", 8192, 1), quarter_bytes);
  std::set<std::string> dict;
  {
    std::ifstream in("/usr/share/dict/american-english");
    for (std::string w; std::getline(in, w);) dict.insert(w);
  }
  const std::set<std::string> adjectives = common_wordnet("/usr/share/wordnet/index.adj");
  const std::set<std::string> nouns = common_wordnet("/usr/share/wordnet/index.noun");
  std::set<std::string> firsts;
  std::set<std::string> seconds;
  for (const auto& line : split(samples.at(0).context, '\n')) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("for ([a-z]+)-([a-z]+) is")));
    EXPECT_TRUE(dict.count(m[1]) && adjectives.count(m[1])) << m[1];
    EXPECT_TRUE(dict.count(m[2]) && nouns.count(m[2])) << m[2];
    firsts.insert(m[1]);
    seconds.insert(m[2]);
  }
  EXPECT_GT(firsts.size(), 50u);
  EXPECT_GT(seconds.size(), 50u);
}

TEST(RulerTasks, WordNetErrorsNameTheFile) {
  TempDir dir;
  RulerTaskOptions o = options("niah_single_1");
  o.wordnet_dir = dir.path() / "wordnet";
  std::string e = error_of(o);
  EXPECT_NE(e.find((dir.path() / "wordnet" / "index.adj").string() + ": no such file"), std::string::npos) << e;
  EXPECT_NE(e.find("wordnet-base"), std::string::npos) << e;
  fs::create_directories(dir.path() / "wn");
  dir.write("wn/index.adj", "  1 license text\nbroken\n");
  o.wordnet_dir = dir.path() / "wn";
  e = error_of(o);
  EXPECT_NE(e.find("index.adj: line 2: not a WordNet index line"), std::string::npos) << e;
  dir.write("wn/index.adj", "good a 1 0 1 5 00001\n");
  e = error_of(o);
  EXPECT_NE(e.find("index.adj: yields 1 common words"), std::string::npos) << e;
  // Tasks without word keys do not read WordNet.
  o.task = "niah_multikey_3";
  EXPECT_EQ(error_of(o), "");
}

}  // namespace
}  // namespace kvscope
