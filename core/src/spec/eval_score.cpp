#include "kvscope/core/eval_score.h"

#include <algorithm>
#include <array>
#include <utility>

#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/longbench_metrics.h"

namespace kvscope {
namespace {

// The UTF-8 encodings of every code point Python's str.isspace() accepts (str.strip()'s set).
// Each is a complete sequence whose first byte never continues another, so matching bytes at either
// end of a string matches whole characters.
constexpr std::array<std::string_view, 29> kPythonSpaces = {
    "\x09",         "\x0a",         "\x0b",         "\x0c",         "\x0d",         "\x1c",
    "\x1d",         "\x1e",         "\x1f",         "\x20",         "\xc2\x85",     "\xc2\xa0",
    "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
    "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
    "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};

/// The length of the Python whitespace character at s[pos], or 0.
size_t space_at(std::string_view s, size_t pos) {
  for (std::string_view sp : kPythonSpaces) {
    if (s.substr(pos).starts_with(sp)) return sp.size();
  }
  return 0;
}

/// Python's str.strip() with no argument.
std::string_view python_strip(std::string_view s) {
  for (size_t n; !s.empty() && (n = space_at(s, 0)) > 0;) s.remove_prefix(n);
  for (bool again = true; again && !s.empty();) {
    again = false;
    for (std::string_view sp : kPythonSpaces) {
      if (s.ends_with(sp)) {
        s.remove_suffix(sp.size());
        again = true;
        break;
      }
    }
  }
  return s;
}

void require_references(const std::vector<std::string>& references) {
  if (references.empty()) throw InputError("scoring: no reference answers");
}

bool contains_ci(std::string_view prediction_lower, const std::string& reference) {
  return prediction_lower.find(lower_latin1(reference)) != std::string_view::npos;
}

using Strings = std::vector<std::string>;

/// LongBench's scorer: the best score over the answers (its ground truths).
template <double (*Metric)(std::string_view, std::string_view)>
double best_of(std::string_view prediction, const Strings& answers, const Strings&) {
  double best = 0.0;
  for (const std::string& truth : answers) best = std::max(best, Metric(prediction, truth));
  return best;
}

std::string no_classes(const Strings&, const Strings& all_classes) {
  return all_classes.empty() ? "classification_score needs 'all_classes' (the class names), and there are none" : "";
}

template <double (*Metric)(std::string_view, std::string_view)>
std::string bad_retrieval_answer(const Strings& answers, const Strings&) {
  try {
    for (const std::string& a : answers) Metric("", a);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// Every metric score() knows: its name, its score over a sample's answers, and what it needs
/// beyond answers (nullptr: nothing).
struct Metric {
  std::string_view name;
  double (*score)(std::string_view prediction, const Strings& answers, const Strings& all_classes);
  std::string (*problem)(const Strings& answers, const Strings& all_classes);
};

constexpr Metric kMetrics[] = {
    {"string_match_all",
     [](std::string_view p, const Strings& a, const Strings&) { return string_match_all(ruler_postprocess(p), a); },
     nullptr},
    {"string_match_part",
     [](std::string_view p, const Strings& a, const Strings&) { return string_match_part(ruler_postprocess(p), a); },
     nullptr},
    {"qa_f1_score", best_of<qa_f1_score>, nullptr},
    {"rouge_score", best_of<rouge_score>, nullptr},
    {"classification_score",
     [](std::string_view p, const Strings& answers, const Strings& classes) {
       double best = 0.0;
       for (const std::string& truth : answers) best = std::max(best, classification_score(p, truth, classes));
       return best;
     },
     no_classes},
    {"retrieval_score", best_of<retrieval_score>, bad_retrieval_answer<retrieval_score>},
    {"retrieval_zh_score", best_of<retrieval_zh_score>, bad_retrieval_answer<retrieval_zh_score>},
    {"count_score", best_of<count_score>, nullptr},
    {"code_sim_score", best_of<code_sim_score>, nullptr},
};

const Metric* find_metric(std::string_view name) {
  for (const Metric& m : kMetrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

/// LongBench's dataset2metric (LongBench/eval.py), less the metrics that need jieba.
constexpr std::pair<std::string_view, std::string_view> kLongBenchTasks[] = {
    {"narrativeqa", "qa_f1_score"},     {"qasper", "qa_f1_score"},
    {"multifieldqa_en", "qa_f1_score"}, {"hotpotqa", "qa_f1_score"},
    {"2wikimqa", "qa_f1_score"},        {"musique", "qa_f1_score"},
    {"gov_report", "rouge_score"},      {"qmsum", "rouge_score"},
    {"multi_news", "rouge_score"},      {"trec", "classification_score"},
    {"triviaqa", "qa_f1_score"},        {"samsum", "rouge_score"},
    {"lsht", "classification_score"},   {"passage_retrieval_en", "retrieval_score"},
    {"passage_count", "count_score"},   {"passage_retrieval_zh", "retrieval_zh_score"},
    {"lcc", "code_sim_score"},          {"repobench-p", "code_sim_score"},
};

/// A LongBench dataset's name without LongBench-E's "_e".
std::string_view longbench_dataset(std::string_view task) {
  return task.ends_with("_e") ? task.substr(0, task.size() - 2) : task;
}

}  // namespace

std::string lower_latin1(std::string_view text) {
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto b = static_cast<unsigned char>(out[i]);
    if (b >= 'A' && b <= 'Z') {
      out[i] = static_cast<char>(b + ('a' - 'A'));
    } else if (b == 0xC3 && i + 1 < out.size()) {
      // U+00C0..U+00DE are C3 80..C3 9E; their lower case is 0x20 further (C3 A0..C3 BE). U+00D7 is ×.
      const auto c = static_cast<unsigned char>(out[i + 1]);
      if (c >= 0x80 && c <= 0x9E && c != 0x97) out[i + 1] = static_cast<char>(c + 0x20);
      ++i;
    }
  }
  return out;
}

std::string ruler_postprocess(std::string_view prediction) {
  std::string s(python_strip(prediction));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) <= 0x1F) c = '\n';
  }
  return std::string(python_strip(s));
}

double string_match_all(std::string_view prediction, const std::vector<std::string>& references) {
  require_references(references);
  const std::string pred = lower_latin1(prediction);
  double hits = 0.0;
  for (const std::string& r : references) hits += contains_ci(pred, r) ? 1.0 : 0.0;
  return hits / static_cast<double>(references.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& references) {
  require_references(references);
  const std::string pred = lower_latin1(prediction);
  for (const std::string& r : references) {
    if (contains_ci(pred, r)) return 1.0;
  }
  return 0.0;
}

std::vector<std::string_view> python_split(std::string_view text) {
  std::vector<std::string_view> out;
  size_t word = std::string_view::npos;  // where the current word began
  for (size_t pos = 0; pos < text.size();) {
    const size_t space = space_at(text, pos);
    if (space && word != std::string_view::npos) {
      out.push_back(text.substr(word, pos - word));
      word = std::string_view::npos;
    } else if (!space && word == std::string_view::npos) {
      word = pos;
    }
    pos += space ? space : 1;
  }
  if (word != std::string_view::npos) out.push_back(text.substr(word));
  return out;
}

const std::vector<std::string>& eval_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Metric& m : kMetrics) out.emplace_back(m.name);
    return out;
  }();
  return names;
}

bool is_eval_metric(std::string_view name) { return find_metric(name) != nullptr; }

std::string metric_input_problem(std::string_view metric, const std::vector<std::string>& answers,
                                 const std::vector<std::string>& all_classes) {
  const Metric* m = find_metric(metric);
  if (!m) {
    std::string known;
    for (const std::string& n : eval_metric_names()) known += (known.empty() ? "" : ", ") + n;
    return "unknown metric '" + std::string(metric) + "' (known: " + known + ")";
  }
  if (answers.empty()) return "scoring: no reference answers";
  return m->problem ? m->problem(answers, all_classes) : "";
}

std::string default_metric(std::string_view task) {
  for (const auto& [dataset, metric] : kLongBenchTasks) {
    if (dataset == longbench_dataset(task)) return std::string(metric);
  }
  return task.substr(0, task.find('_')) == "qa" ? "string_match_part" : "string_match_all";
}

bool default_first_line(std::string_view task) {
  const std::string_view d = longbench_dataset(task);
  return d == "trec" || d == "triviaqa" || d == "samsum" || d == "lsht";
}

double score(std::string_view metric, std::string_view prediction, const std::vector<std::string>& answers,
             const std::vector<std::string>& all_classes, bool first_line) {
  const std::string problem = metric_input_problem(metric, answers, all_classes);
  if (!problem.empty()) throw InputError(problem);
  if (first_line) prediction = longbench_first_line(prediction);
  return find_metric(metric)->score(prediction, answers, all_classes);
}

double score(const EvalSample& sample, std::string_view prediction) {
  return score(sample.metric, prediction, sample.answers, sample.all_classes, sample.first_line);
}

}  // namespace kvscope
