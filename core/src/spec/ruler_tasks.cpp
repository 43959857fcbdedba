// RULER's synthetic tasks (NVIDIA/RULER scripts/data/synthetic/*.py, constants.py, synthetic.yaml)
// and a Paul-Graham-style needle in a haystack, generated in C++. docs/eval.md ("Generated tasks
// (RULER)") lists what each task holds and how it differs from RULER.
#include "kvscope/core/ruler_tasks.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "kvscope/core/errors.h"
#include "ruler_text.h"

namespace kvscope {
namespace {

using ruler::Rng;

enum class Family { kNiah, kVt, kCwe, kFwe, kPaulGraham };
enum class Hay { kNone, kNoise, kNeedle, kEssay, kCode };
enum class Kind { kWords, kNumbers, kUuids };

struct TaskDef {
  std::string_view name;
  Family family;
  Hay haystack;  // RULER's default
  Kind key = Kind::kWords;
  Kind value = Kind::kNumbers;
  int num_k = 1;  // keys (raised to num_q, as niah.py does)
  int num_v = 1;  // values per key
  int num_q = 1;  // keys asked for
  int64_t max_new_tokens = 128;
};

// synthetic.yaml, with constants.py's tokens_to_generate.
constexpr TaskDef kTasks[] = {
    {"niah_single_1", Family::kNiah, Hay::kNoise},
    {"niah_single_2", Family::kNiah, Hay::kEssay},
    {"niah_single_3", Family::kNiah, Hay::kEssay, Kind::kWords, Kind::kUuids},
    {"niah_multikey_1", Family::kNiah, Hay::kEssay, Kind::kWords, Kind::kNumbers, 4},
    {"niah_multikey_2", Family::kNiah, Hay::kNeedle},
    {"niah_multikey_3", Family::kNiah, Hay::kNeedle, Kind::kUuids, Kind::kUuids},
    {"niah_multivalue", Family::kNiah, Hay::kEssay, Kind::kWords, Kind::kNumbers, 1, 4},
    {"niah_multiquery", Family::kNiah, Hay::kEssay, Kind::kWords, Kind::kNumbers, 4, 1, 4},
    {"vt", Family::kVt, Hay::kNoise, Kind::kWords, Kind::kNumbers, 1, 1, 1, 30},
    {"cwe", Family::kCwe, Hay::kNone, Kind::kWords, Kind::kNumbers, 1, 1, 1, 120},
    {"fwe", Family::kFwe, Hay::kNone, Kind::kWords, Kind::kNumbers, 1, 1, 1, 50},
    {"niah_paul_graham", Family::kPaulGraham, Hay::kEssay, Kind::kWords, Kind::kNumbers, 1, 1, 1, 64},
};

constexpr std::string_view kNoiseLine =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr std::string_view kMetric = "string_match_all";

// Random streams of a seed (ruler::stream_seed): sample i uses stream i; the few-shot example of vt
// one of its own.
constexpr uint64_t kVtExampleStream = 0xffffffffffff0001ULL;
// Later turns' keys (RulerTaskOptions::turns) come from streams of their own, so the samples of a
// seed are the same with or without turns.
constexpr uint64_t kTurnStreams = 0x7475726e00000000ULL;

std::string_view hay_name(Hay h) {
  switch (h) {
    case Hay::kNoise:
      return "noise";
    case Hay::kNeedle:
      return "needle";
    case Hay::kEssay:
      return "essay";
    case Hay::kCode:
      return "code";
    case Hay::kNone:
      break;
  }
  return "none";
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

/// `tmpl` with each `{name}` of `subs` replaced by its value (one pass: values are not re-scanned).
std::string fill(std::string_view tmpl, std::initializer_list<std::pair<std::string_view, std::string_view>> subs) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    bool done = false;
    if (tmpl[i] == '{') {
      for (const auto& [name, value] : subs) {
        if (tmpl.substr(i, name.size()) == name) {
          out += value;
          i += name.size();
          done = true;
          break;
        }
      }
    }
    if (!done) out += tmpl[i++];
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

/// A context being assembled, with the spans of the needles that hold an answer.
struct Text {
  std::string text;
  std::vector<TextSpan> spans;
  void add(std::string_view s) { text += s; }
  void item(std::string_view s, bool record) {
    if (record) spans.push_back({static_cast<int64_t>(text.size()), static_cast<int64_t>(text.size() + s.size())});
    text += s;
  }
};

/// A line or sentence inserted into a haystack; `answer`: the answer depends on it (its span is kept).
struct Item {
  std::string text;
  bool answer = false;
};

/// What the haystacks are made of (only the parts the task's haystack needs are loaded).
struct Sources {
  Hay hay = Hay::kNone;
  std::optional<ruler::WordLists> words;
  std::vector<std::string> essay;  // words
  std::vector<char> essay_ends;    // a sentence ends after essay[j] (with essay[j + 1], cyclically, after it)
  std::vector<std::string> code;   // lines

  std::string_view line(int64_t j, int64_t offset = 0) const {
    if (hay == Hay::kCode) return code[static_cast<size_t>((offset + j) % static_cast<int64_t>(code.size()))];
    return kNoiseLine;
  }
  const std::string& word(int64_t j) const {
    return essay[static_cast<size_t>(j % static_cast<int64_t>(essay.size()))];
  }
  bool ends(int64_t j) const { return essay_ends[static_cast<size_t>(j % static_cast<int64_t>(essay.size()))]; }
};

/// `n` haystack lines (`line(j)`) joined by '\n', items[p] placed as a line of its own before line
/// positions[p] (ascending): RULER's noise and needle haystacks (niah.py, variable_tracking.py).
template <class LineAt>
void lines_with_items(int64_t n, const LineAt& line, const std::vector<Item>& items,
                      const std::vector<int64_t>& positions, Text& out) {
  size_t p = 0;
  bool first = true;
  auto sep = [&] {
    if (!first) out.add("\n");
    first = false;
  };
  for (int64_t j = 0; j < n; ++j) {
    while (p < items.size() && positions[p] == j) {
      sep();
      out.item(items[p].text, items[p].answer);
      ++p;
    }
    sep();
    out.add(line(j));
  }
}

/// The first `n` essay words (cycled) split into sentences, items inserted between sentences at
/// depths drawn from RULER's DEPTHS without replacement, everything joined by ' ' (niah.py's essay
/// haystack, empty sentence runs included).
void essay_with_items(const Sources& src, int64_t n, const std::vector<Item>& items, Rng& rng, Text& out) {
  std::vector<int64_t> starts{0};
  for (int64_t j = 0; j + 1 < n; ++j) {
    if (src.ends(j)) starts.push_back(j + 1);
  }
  const auto sentences = static_cast<int64_t>(starts.size());
  std::vector<int64_t> cut;
  for (int64_t d :
       rng.sample_sorted(static_cast<int64_t>(ruler::ruler_depths().size()), static_cast<int64_t>(items.size()))) {
    const double depth = ruler::ruler_depths()[static_cast<size_t>(d)];
    cut.push_back(static_cast<int64_t>(static_cast<double>(sentences) * (depth / 100.0)));
  }
  std::sort(cut.begin(), cut.end());
  cut.insert(cut.begin(), 0);
  cut.push_back(sentences);
  for (size_t i = 1; i < cut.size(); ++i) {
    if (i > 1) out.add(" ");
    auto word_at = [&](int64_t sentence) { return sentence < sentences ? starts[static_cast<size_t>(sentence)] : n; };
    const int64_t begin = word_at(cut[i - 1]);
    const int64_t end = word_at(cut[i]);
    for (int64_t j = begin; j < end; ++j) {
      if (j > begin) out.add(" ");
      out.add(src.word(j));
    }
    if (i - 1 < items.size()) {
      out.add(" ");
      out.item(items[i - 1].text, items[i - 1].answer);
    }
  }
}

/// The context of a niah or vt sample: `n` units of the haystack with `items` inserted as RULER
/// does (lines at random line indices; sentences at random depths). The needle haystack's
/// distractor lines come from `distractor`.
template <class Distractor>
Text haystack_with_items(const Sources& src, int64_t n, const std::vector<Item>& items, Rng& rng,
                         const Distractor& distractor) {
  Text out;
  if (src.hay == Hay::kEssay) {
    essay_with_items(src, n, items, rng, out);
    return out;
  }
  std::vector<std::string> distractors;
  if (src.hay == Hay::kNeedle) {
    for (int64_t j = 0; j < n; ++j) distractors.push_back(distractor(rng));
  }
  const std::vector<int64_t> positions = rng.sample_sorted(n, static_cast<int64_t>(items.size()));
  auto line = [&](int64_t j) -> std::string_view {
    return src.hay == Hay::kNeedle ? std::string_view(distractors[static_cast<size_t>(j)]) : src.line(j);
  };
  lines_with_items(n, line, items, positions, out);
  return out;
}

// ----------------------------------------------------------------------------------------------
// Sizing: the largest haystack whose prompt + max_new_tokens fits the length.

struct SizeContext {
  std::string_view task;
  int64_t length = 0;
  int64_t max_new_tokens = 0;
  const PromptTokenCounter* count = nullptr;
  std::string unit;  // what a haystack unit is, plural ("noise lines")
};

[[noreturn]] void too_small(const SizeContext& ctx, int64_t min_n, int64_t total) {
  std::string unit = ctx.unit;
  if (min_n == 1 && !unit.empty() && unit.back() == 's') unit.pop_back();
  throw InputError(std::string(ctx.task) + ": length " + std::to_string(ctx.length) +
                   " is too small: the smallest haystack (" + std::to_string(min_n) + " " + unit + ") needs " +
                   std::to_string(total) + " tokens (a prompt of " + std::to_string(total - ctx.max_new_tokens) +
                   " + " + std::to_string(ctx.max_new_tokens) + " new tokens)");
}

/// The sample of the largest size n in [min_n, max_n] such that count(build(n)) + max_new_tokens <=
/// length and the same for n + 1 does not fit (or n = max_n), searched from `hint` (the previous
/// sample's size) or, without one, from a linear estimate; the found size goes back into `hint`.
/// When even min_n does not fit: throws too_small, or with `or_min` returns the sample of min_n.
template <class Build>
EvalSample fit(const SizeContext& ctx, const Build& build, int64_t min_n, int64_t max_n, std::optional<int64_t>& hint,
               bool or_min = false) {
  auto total = [&](int64_t n) { return (*ctx.count)(build(n)) + ctx.max_new_tokens; };
  auto fits = [&](int64_t n) { return total(n) <= ctx.length; };
  max_n = std::max(max_n, min_n);
  int64_t start = min_n;
  if (hint) {
    start = *hint;
  } else {
    const int64_t t_min = total(min_n);
    if (t_min > ctx.length) {
      if (!or_min) too_small(ctx, min_n, t_min);
      hint = min_n;
      return build(min_n);
    }
    // Two secant steps from (min_n, t_min): through a probe 32 units up, then through that estimate.
    int64_t probe = std::min(max_n, min_n + 32);
    for (int step = 0; step < 2 && probe > min_n; ++step) {
      const double slope = static_cast<double>(total(probe) - t_min) / static_cast<double>(probe - min_n);
      if (!(slope > 0)) break;
      const double est = static_cast<double>(min_n) + static_cast<double>(ctx.length - t_min) / slope;
      start = est >= static_cast<double>(max_n) ? max_n : std::max(min_n, static_cast<int64_t>(est));
      if (start == probe) break;
      probe = start;
    }
  }
  start = std::clamp(start, min_n, max_n);
  int64_t lo = 0;  // fits
  int64_t hi = 0;  // does not fit (or max_n + 1)
  if (fits(start)) {
    lo = start;
    for (int64_t step = 1;; step *= 2) {
      if (lo == max_n) {
        hi = max_n + 1;
        break;
      }
      const int64_t cand = std::min(lo + step, max_n);
      if (fits(cand)) {
        lo = cand;
      } else {
        hi = cand;
        break;
      }
    }
  } else {
    hi = start;
    for (int64_t step = 1;; step *= 2) {
      if (hi == min_n) {
        if (!or_min) too_small(ctx, min_n, total(min_n));
        hint = min_n;
        return build(min_n);
      }
      const int64_t cand = std::max(hi - step, min_n);
      if (fits(cand)) {
        lo = cand;
        break;
      }
      hi = cand;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  hint = lo;
  return build(lo);
}

/// The largest haystack units tried: far beyond what any tokenizer packs into `length` tokens.
int64_t unit_cap(int64_t length) { return 8 * length + 64; }

std::string unit_name(Hay hay) {
  switch (hay) {
    case Hay::kNoise:
      return "noise lines";
    case Hay::kNeedle:
      return "distractor needles";
    case Hay::kEssay:
      return "essay words";
    case Hay::kCode:
      return "code lines";
    case Hay::kNone:
      break;
  }
  return "words";
}

EvalSample base_sample(const TaskDef& def, const RulerTaskOptions& opt, int64_t index) {
  EvalSample s;
  s.task = std::string(def.name);
  s.length = opt.length;
  s.id = s.task + "-" + std::to_string(opt.length) + "-" + std::to_string(index);
  s.chat = opt.chat;
  s.max_new_tokens = def.max_new_tokens;
  s.metric = std::string(kMetric);
  return s;
}

void set_context(EvalSample& s, Text&& text) {
  s.context = std::move(text.text);
  s.needles = std::move(text.spans);
  std::sort(s.needles.begin(), s.needles.end(), [](const TextSpan& a, const TextSpan& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
}

// ----------------------------------------------------------------------------------------------
// niah.py

std::string_view kind_plural(Kind k) {
  switch (k) {
    case Kind::kWords:
      return "words";
    case Kind::kNumbers:
      return "numbers";
    case Kind::kUuids:
      break;
  }
  return "uuids";
}

/// Python's str(uuid.UUID(int=getrandbits(128), version=4)).
std::string random_uuid4(Rng& rng) {
  uint64_t hi = rng.next();
  uint64_t lo = rng.next();
  hi = (hi & ~0xf000ULL) | 0x4000ULL;                  // version 4
  lo = (lo & ~(0xc000ULL << 48)) | (0x8000ULL << 48);  // RFC 4122 variant
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    const uint64_t word = i < 16 ? hi : lo;
    const int shift = 60 - 4 * (i % 16);
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    out += kHex[(word >> shift) & 0xf];
  }
  return out;
}

std::string random_needle_part(Kind kind, Rng& rng, const Sources& src) {
  switch (kind) {
    case Kind::kNumbers:
      return std::to_string(rng.between(1000000, 9999999));  // randint(10**6, 10**7 - 1): 7 digits
    case Kind::kWords: {
      const auto& w = *src.words;
      const std::string& adj = w.adjectives[rng.below(w.adjectives.size())];
      return adj + "-" + w.nouns[rng.below(w.nouns.size())];
    }
    case Kind::kUuids:
      break;
  }
  return random_uuid4(rng);
}

std::string niah_needle(const TaskDef& def, std::string_view key, std::string_view value) {
  return fill("One of the special magic {v} for {key} is: {value}.",
              {{"{v}", kind_plural(def.value)}, {"{key}", key}, {"{value}", value}});
}

std::vector<EvalSample> generate_niah(const TaskDef& def, const RulerTaskOptions& opt, const Sources& src,
                                      const SizeContext& size) {
  const int num_k = std::max(def.num_k, def.num_q);
  std::string instruction_t =
      "Some special magic {v} are hidden within the following text. Make sure to memorize it. I will quiz you about "
      "the {v} afterwards.\n";
  std::string question_t = "\nWhat are all the special magic {v} for {query} mentioned in the provided text?";
  std::string prefix_t = " The special magic {v} for {query} mentioned in the provided text are";
  std::string v(kind_plural(def.value));
  if (def.num_q * def.num_v == 1) {  // niah.py's singular form, replaced in the template text as it does
    for (std::string* t : {&instruction_t, &question_t, &prefix_t}) {
      *t = replace_all(*t, "Some", "A");
      *t = replace_all(*t, "are all", "is");
      *t = replace_all(*t, "are", "is");
      *t = replace_all(*t, "answers", "answer");
    }
    v.pop_back();
  }

  // A later turn asks for one key: niah.py's singular form unless the key has several values.
  std::string turn_question_t = "\nWhat are all the special magic {v} for {query} mentioned in the provided text?";
  std::string turn_prefix_t = " The special magic {v} for {query} mentioned in the provided text are";
  std::string turn_v(kind_plural(def.value));
  if (def.num_v == 1) {
    for (std::string* t : {&turn_question_t, &turn_prefix_t}) {
      *t = replace_all(*t, "are all", "is");
      *t = replace_all(*t, "are", "is");
    }
    turn_v.pop_back();
  }
  if (opt.turns < 0 || opt.turns > num_k - def.num_q)
    throw InputError(std::string(def.name) + ": " + std::to_string(opt.turns) +
                     " later turns asked, but a sample places " + std::to_string(num_k - def.num_q) + " key" +
                     (num_k - def.num_q == 1 ? "" : "s") + " its question does not ask for (one a turn)");

  std::vector<EvalSample> out;
  std::optional<int64_t> hint;
  for (int64_t i = 0; i < opt.n; ++i) {
    Rng rng(ruler::stream_seed(opt.seed, static_cast<uint64_t>(i)));
    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> values;
    std::vector<Item> needles;
    std::vector<size_t> needle_key;
    for (int k = 0; k < num_k; ++k) {
      std::string key;
      do {
        key = random_needle_part(def.key, rng, src);
      } while (std::find(keys.begin(), keys.end(), key) != keys.end());
      keys.push_back(key);
      values.emplace_back();
      for (int j = 0; j < def.num_v; ++j) {
        std::string value;
        do {
          value = random_needle_part(def.value, rng, src);
        } while (std::find(values.back().begin(), values.back().end(), value) != values.back().end());
        values.back().push_back(value);
        needles.push_back({niah_needle(def, key, value), false});
        needle_key.push_back(static_cast<size_t>(k));
      }
    }
    std::vector<size_t> order(needles.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = j;
    rng.shuffle(order);
    const std::vector<int64_t> asked = rng.sample_ordered(num_k, def.num_q);
    std::vector<std::string> queries;
    std::vector<std::string> answers;
    for (int64_t k : asked) {
      queries.push_back(keys[static_cast<size_t>(k)]);
      for (const auto& value : values[static_cast<size_t>(k)]) answers.push_back(value);
    }
    // Later turns: keys not asked yet, in a random order of their own stream.
    std::vector<int64_t> turn_keys;
    for (int64_t k = 0; k < num_k; ++k)
      if (std::find(asked.begin(), asked.end(), k) == asked.end()) turn_keys.push_back(k);
    Rng turn_rng(ruler::stream_seed(opt.seed, kTurnStreams + static_cast<uint64_t>(i)));
    turn_rng.shuffle(turn_keys);
    turn_keys.resize(static_cast<size_t>(opt.turns));
    std::vector<Item> placed;
    for (size_t j : order) {
      Item item = needles[j];
      const auto k = static_cast<int64_t>(needle_key[j]);
      item.answer = std::find(asked.begin(), asked.end(), k) != asked.end() ||
                    std::find(turn_keys.begin(), turn_keys.end(), k) != turn_keys.end();
      placed.push_back(std::move(item));
    }
    std::string query = queries.back();
    if (queries.size() > 1) {
      query = queries[0];
      for (size_t q = 1; q + 1 < queries.size(); ++q) query += ", " + queries[q];
      query += ", and " + queries.back();
    }
    EvalSample sample = base_sample(def, opt, i);
    sample.instruction = fill(instruction_t, {{"{v}", v}});
    sample.question = fill(question_t, {{"{v}", v}, {"{query}", query}});
    sample.answer_prefix = fill(prefix_t, {{"{v}", v}, {"{query}", query}});
    sample.answers = answers;
    for (int64_t k : turn_keys) {
      const std::string& key = keys[static_cast<size_t>(k)];
      sample.turns.push_back({fill(turn_question_t, {{"{v}", turn_v}, {"{query}", key}}),
                              fill(turn_prefix_t, {{"{v}", turn_v}, {"{query}", key}}),
                              values[static_cast<size_t>(k)]});
    }

    auto distractor = [&](Rng& r) {
      std::string key;
      do {
        key = random_needle_part(def.key, r, src);
      } while (std::find(keys.begin(), keys.end(), key) != keys.end());
      return niah_needle(def, key, random_needle_part(def.value, r, src));
    };
    auto build = [&](int64_t n) {
      Rng r = rng;  // the haystack's draws start from the same state for every size
      EvalSample s = sample;
      set_context(s, haystack_with_items(src, n, placed, r, distractor));
      return s;
    };
    const int64_t min_n = src.hay == Hay::kEssay ? 1 : static_cast<int64_t>(placed.size());
    out.push_back(fit(size, build, min_n, unit_cap(opt.length), hint));
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// variable_tracking.py (1 chain, 4 hops)

constexpr int kVtHops = 4;
constexpr std::string_view kVtInstruction =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
constexpr std::string_view kVtQuestion =
    "\nQuestion: Find all variables that are assigned the value {value} in the text above.";
constexpr std::string_view kVtPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the "
    "value {value}, they are: ";
constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// kVtHops + 1 distinct variable names of `letters` uppercase letters.
std::vector<std::string> vt_names(Rng& rng, int letters) {
  std::vector<std::string> names;
  while (names.size() < kVtHops + 1) {
    std::string name = rng.letters(kUpper, letters);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
  return names;
}

/// The chain's lines: "VAR A = 12345", then "VAR B = VAR A " per hop (with variable_tracking.py's
/// trailing space); in an essay each stripped and ended with '.'.
std::vector<Item> vt_chain(const std::vector<std::string>& names, std::string_view value, bool essay) {
  std::vector<Item> chain;
  chain.push_back({"VAR " + names[0] + " = " + std::string(value), true});
  for (int j = 0; j < kVtHops; ++j) {
    chain.push_back(
        {"VAR " + names[static_cast<size_t>(j) + 1] + " = VAR " + names[static_cast<size_t>(j)] + " ", true});
  }
  if (essay) {
    for (Item& item : chain) {
      while (!item.text.empty() && item.text.back() == ' ') item.text.pop_back();
      item.text += ".";
    }
  }
  return chain;
}

Text vt_context(const Sources& src, int64_t n, const std::vector<std::string>& names, std::string_view value, Rng rng) {
  return haystack_with_items(src, n, vt_chain(names, value, src.hay == Hay::kEssay), rng,
                             [](Rng&) { return std::string(); });
}

std::string vt_question(std::string_view value) { return fill(kVtQuestion, {{"{value}", value}}); }
std::string vt_prefix(std::string_view value) {
  return fill(kVtPrefix, {{"{num_v}", std::to_string(kVtHops + 1)}, {"{value}", value}});
}

/// variable_tracking.py's in-context example: a whole solved prompt (3-letter names, the value
/// 12345 until a sample renames it) sized to at most 500 tokens, generated once; each sample
/// draws new names and a new value for it, as randomize_icl does.
struct VtExample {
  int64_t n = 0;
  Rng rng{0};
  std::string text(const Sources& src, const std::vector<std::string>& names, std::string_view value) const {
    return std::string(kVtInstruction) + vt_context(src, n, names, value, rng).text + vt_question(value) +
           vt_prefix(value) + " " + join(names, " ") + "\n";
  }
};

std::vector<EvalSample> generate_vt(const TaskDef& def, const RulerTaskOptions& opt, const Sources& src,
                                    const SizeContext& size) {
  const int64_t min_n = src.hay == Hay::kEssay ? 1 : kVtHops + 1;
  VtExample example;
  {
    Rng rng(ruler::stream_seed(opt.seed, kVtExampleStream));
    const std::vector<std::string> names = vt_names(rng, 3);
    example.rng = rng;
    SizeContext icl = size;
    icl.length = 500;
    icl.max_new_tokens = 0;
    auto build = [&](int64_t n) {
      VtExample e = example;
      e.n = n;
      EvalSample s;
      s.chat = false;
      s.instruction = e.text(src, names, "12345");
      return s;
    };
    std::optional<int64_t> icl_hint;
    fit(icl, build, min_n, unit_cap(500), icl_hint, /*or_min=*/true);
    example.n = *icl_hint;
  }

  std::vector<EvalSample> out;
  std::optional<int64_t> hint;
  for (int64_t i = 0; i < opt.n; ++i) {
    Rng rng(ruler::stream_seed(opt.seed, static_cast<uint64_t>(i)));
    const std::vector<std::string> example_names = vt_names(rng, 3);
    const std::string example_value = std::to_string(rng.between(10000, 99998));
    const std::vector<std::string> names = vt_names(rng, 5);
    const std::string value = std::to_string(rng.between(10000, 99998));  // np.random.randint(10000, 99999)

    EvalSample sample = base_sample(def, opt, i);
    sample.instruction = example.text(src, example_names, example_value) + "\n" + std::string(kVtInstruction);
    sample.question = vt_question(value);
    sample.answer_prefix = vt_prefix(value);
    sample.answers = names;
    auto build = [&](int64_t n) {
      EvalSample s = sample;
      set_context(s, vt_context(src, n, names, value, rng));
      return s;
    };
    out.push_back(fit(size, build, min_n, unit_cap(opt.length), hint));
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// common_words_extraction.py (10 common words)

constexpr int kCweCommon = 10;
constexpr std::string_view kCweInstruction =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n";
constexpr std::string_view kCweQuestion = "\nQuestion: What are the 10 most common words in the above list?";
constexpr std::string_view kCwePrefix = " Answer: The top 10 words that appear most often in the list are:";

/// `n` distinct words of the list, the first kCweCommon repeated `common` times and the rest
/// `uncommon` times, shuffled and numbered "1. w 2. w ..." (get_example); the common words'
/// occurrences are kept as spans when `spans`. Returns the list and the common words.
std::pair<Text, std::vector<std::string>> cwe_list(const Sources& src, int64_t n, int common, int uncommon, Rng& rng,
                                                   bool spans) {
  const auto& all = src.words->all;
  const std::vector<int64_t> picked = rng.sample_ordered(static_cast<int64_t>(all.size()), n);
  std::vector<std::pair<int64_t, bool>> list;  // word index, common
  for (size_t j = 0; j < picked.size(); ++j) {
    const bool is_common = j < kCweCommon;
    for (int r = 0; r < (is_common ? common : uncommon); ++r) list.emplace_back(picked[j], is_common);
  }
  rng.shuffle(list);
  Text text;
  for (size_t j = 0; j < list.size(); ++j) {
    text.add((j ? " " : "") + std::to_string(j + 1) + ". ");
    text.item(all[static_cast<size_t>(list[j].first)], spans && list[j].second);
  }
  std::vector<std::string> common_words;
  for (size_t j = 0; j < picked.size() && j < kCweCommon; ++j)
    common_words.push_back(all[static_cast<size_t>(picked[j])]);
  return {std::move(text), std::move(common_words)};
}

std::string numbered(const std::vector<std::string>& words) {
  std::string out;
  for (size_t j = 0; j < words.size(); ++j) out += (j ? " " : "") + std::to_string(j + 1) + ". " + words[j];
  return out;
}

std::vector<EvalSample> generate_cwe(const TaskDef& def, const RulerTaskOptions& opt, const Sources& src,
                                     const SizeContext& size) {
  // Below 4096 tokens: a 20-word example (x3 / x1) and x6 / x1 repeats; else 40 words (x10 / x3) and x30 / x3.
  const bool short_length = opt.length < 4096;
  const int64_t example_words = short_length ? 20 : 40;
  const int example_common = short_length ? 3 : 10;
  const int example_uncommon = short_length ? 1 : 3;
  const int common = short_length ? 6 : 30;
  const int uncommon = short_length ? 1 : 3;

  std::vector<EvalSample> out;
  std::optional<int64_t> hint;
  for (int64_t i = 0; i < opt.n; ++i) {
    Rng rng(ruler::stream_seed(opt.seed, static_cast<uint64_t>(i)));
    auto [example, example_answer] = cwe_list(src, example_words, example_common, example_uncommon, rng, false);
    EvalSample sample = base_sample(def, opt, i);
    sample.instruction = std::string(kCweInstruction) + example.text + std::string(kCweQuestion) +
                         std::string(kCwePrefix) + " " + numbered(example_answer) + "\n" + std::string(kCweInstruction);
    sample.question = std::string(kCweQuestion);
    sample.answer_prefix = std::string(kCwePrefix);
    auto build = [&](int64_t n) {
      Rng r = rng;
      EvalSample s = sample;
      auto [text, answer] = cwe_list(src, n, common, uncommon, r, true);
      s.answers = std::move(answer);
      set_context(s, std::move(text));
      return s;
    };
    out.push_back(fit(size, build, kCweCommon, static_cast<int64_t>(src.words->all.size()), hint));
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// freq_words_extraction.py (alpha 2, 6-letter coded words)

constexpr std::string_view kFweInstruction =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. ";
constexpr std::string_view kFweQuestion =
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most frequently "
    "appeared words in the above coded text?";
constexpr std::string_view kFwePrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";
constexpr double kZeta2 = 1.6449340668482264;  // pi^2 / 6 = zeta(2)

/// How often the word of rank k (1-based) appears for a word count n: floor(n k^-2 / zeta(2)).
int64_t fwe_count(int64_t n, int64_t k) {
  const double kk = static_cast<double>(k) * static_cast<double>(k);
  return static_cast<int64_t>(static_cast<double>(n) * (1.0 / kk) / kZeta2);
}

std::vector<EvalSample> generate_fwe(const TaskDef& def, const RulerTaskOptions& opt, const SizeContext& size) {
  const int64_t vocab_size = (opt.length - def.max_new_tokens) / 50;
  if (vocab_size < 4) {
    throw InputError("fwe: length " + std::to_string(opt.length) + " is too small: its vocabulary, (length - " +
                     std::to_string(def.max_new_tokens) + ") / 50 = " + std::to_string(vocab_size) +
                     " coded words, needs at least 4 (the noise word and the 3 answers)");
  }
  // The smallest word count whose ranks 2, 3 and 4 appear, each less often than the one before.
  int64_t min_n = 1;
  while (!(fwe_count(min_n, 2) > fwe_count(min_n, 3) && fwe_count(min_n, 3) > fwe_count(min_n, 4) &&
           fwe_count(min_n, 4) >= 1)) {
    ++min_n;
  }
  std::vector<EvalSample> out;
  std::optional<int64_t> hint;
  for (int64_t i = 0; i < opt.n; ++i) {
    Rng rng(ruler::stream_seed(opt.seed, static_cast<uint64_t>(i)));
    std::vector<std::string> vocab;
    std::set<std::string> seen;
    while (static_cast<int64_t>(vocab.size()) < vocab_size) {
      std::string word = rng.letters("abcdefghijklmnopqrstuvwxyz", 6);
      if (seen.insert(word).second) vocab.push_back(std::move(word));
    }
    vocab[0] = "...";  // the top rank is noise
    EvalSample sample = base_sample(def, opt, i);
    sample.instruction = std::string(kFweInstruction);
    sample.question = std::string(kFweQuestion);
    sample.answer_prefix = std::string(kFwePrefix);
    sample.answers = {vocab[1], vocab[2], vocab[3]};
    auto build = [&](int64_t n) {
      Rng r = rng;
      std::vector<int32_t> words;
      for (int64_t k = 1; k <= vocab_size; ++k) {
        const int64_t count = fwe_count(n, k);
        if (count == 0) break;  // the counts fall with the rank
        words.insert(words.end(), static_cast<size_t>(count), static_cast<int32_t>(k - 1));
      }
      r.shuffle(words);
      Text text;
      for (size_t j = 0; j < words.size(); ++j) {
        if (j) text.add(" ");
        text.item(vocab[static_cast<size_t>(words[j])], words[j] >= 1 && words[j] <= 3);
      }
      EvalSample s = sample;
      set_context(s, std::move(text));
      return s;
    };
    out.push_back(fit(size, build, min_n, unit_cap(opt.length), hint));
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// Paul Graham needle in a haystack (gkamradt/LLMTest_NeedleInAHaystack; kvpress's wrapper)

constexpr std::string_view kPgNeedle =
    "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n";
constexpr std::string_view kPgInstruction = "This is a very long story book: <book> ";
constexpr std::string_view kPgQuestion =
    " </book>.\nBased on the content of the book, Question: What is the best thing to do in San Francisco?";
constexpr std::string_view kPgPrefix = " Answer:";

std::vector<EvalSample> generate_paul_graham(const TaskDef& def, const RulerTaskOptions& opt, const Sources& src,
                                             const SizeContext& size) {
  std::vector<double> depths = opt.depths;
  if (depths.empty()) {
    for (int d = 0; d <= 100; d += 10) depths.push_back(d);
  }
  // Replicate r's haystack starts at unit 0 (r = 0, the classic test) or at a random sentence
  // (essay) or line (code) of the haystack, the same at every depth.
  std::vector<int64_t> offsets;
  for (int64_t r = 0; r < opt.n; ++r) {
    Rng rng(ruler::stream_seed(opt.seed, static_cast<uint64_t>(r)));
    int64_t offset = 0;
    if (r > 0 && src.hay == Hay::kEssay) {
      const auto words = static_cast<int64_t>(src.essay.size());
      const auto at = static_cast<int64_t>(rng.below(static_cast<uint64_t>(words)));
      offset = at;
      for (int64_t t = 0; t < words; ++t) {
        if (src.ends(at + t + words - 1)) {
          offset = (at + t) % words;
          break;
        }
      }
    } else if (r > 0 && src.hay == Hay::kCode) {
      offset = static_cast<int64_t>(rng.below(src.code.size()));
    }
    offsets.push_back(offset);
  }

  std::vector<EvalSample> out;
  std::optional<int64_t> hint;
  for (size_t d = 0; d < depths.size(); ++d) {
    for (int64_t r = 0; r < opt.n; ++r) {
      EvalSample sample = base_sample(def, opt, static_cast<int64_t>(d) * opt.n + r);
      sample.instruction = std::string(kPgInstruction);
      sample.question = std::string(kPgQuestion);
      sample.answer_prefix = std::string(kPgPrefix);
      sample.answers = {"sandwich", "Dolores Park", "sunny day"};
      const double depth = depths[d];
      const int64_t offset = offsets[static_cast<size_t>(r)];
      auto build = [&](int64_t n) {
        std::string hay;
        for (int64_t j = 0; j < n; ++j) {
          if (src.hay == Hay::kEssay) {
            if (j) hay += ' ';
            hay += src.word(offset + j);
          } else {
            if (j) hay += '\n';
            hay += src.line(j, offset);
          }
        }
        size_t at = hay.size();
        if (depth < 100) {
          at = std::min(hay.size(), static_cast<size_t>(static_cast<double>(hay.size()) * (depth / 100.0)));
          while (at > 0 && hay[at - 1] != '.') --at;  // back to the end of the previous sentence
        }
        EvalSample s = sample;
        s.context = hay.substr(0, at) + std::string(kPgNeedle) + hay.substr(at);
        const auto begin = static_cast<int64_t>(at) + 1;  // the sentence, without the needle's newlines
        s.needles = {{begin, begin + static_cast<int64_t>(kPgNeedle.size()) - 2}};
        return s;
      };
      out.push_back(fit(size, build, 1, unit_cap(opt.length), hint));
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------------

const TaskDef& find_task(std::string_view name) {
  for (const TaskDef& def : kTasks) {
    if (def.name == name) return def;
  }
  std::string known;
  for (const auto& n : ruler_task_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown RULER task '" + std::string(name) + "' (known: " + known + ")");
}

Hay choose_haystack(const TaskDef& def, const std::string& name) {
  if (name.empty()) return def.haystack;
  Hay hay = Hay::kNone;
  for (Hay h : {Hay::kNoise, Hay::kNeedle, Hay::kEssay, Hay::kCode}) {
    if (hay_name(h) == name) hay = h;
  }
  if (hay == Hay::kNone) {
    throw InputError(std::string(def.name) + ": unknown haystack '" + name + "' (known: noise, needle, essay, code)");
  }
  if (def.family == Family::kCwe || def.family == Family::kFwe) {
    throw InputError(std::string(def.name) +
                     ": has no haystack to choose (its context is the list of words itself); "
                     "leave the haystack empty");
  }
  if (hay == Hay::kNeedle && def.family != Family::kNiah) {
    throw InputError(std::string(def.name) + ": the needle haystack is for niah tasks; " +
                     "choose noise, essay or code");
  }
  return hay;
}

}  // namespace

void remove_newline_tab(EvalSample& s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t'; };
  // The prompt's fields in order; `prev_space`: the text so far ends with a space (or is empty, so
  // that the prompt's leading whitespace goes), carried across field boundaries.
  bool prev_space = true;
  const auto collapse = [&](std::string& text, std::vector<int64_t>* map) {
    std::string out;
    out.reserve(text.size());
    if (map) map->assign(text.size() + 1, 0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (map) (*map)[i] = static_cast<int64_t>(out.size());
      if (space(text[i])) {
        if (!prev_space) out += ' ';
        prev_space = true;
      } else {
        out += text[i];
        prev_space = false;
      }
    }
    if (map) map->back() = static_cast<int64_t>(out.size());
    text = std::move(out);
  };
  std::vector<int64_t> map;
  collapse(s.instruction, nullptr);
  collapse(s.context, &map);
  for (TextSpan& t : s.needles) {
    t.begin = map[static_cast<size_t>(t.begin)];
    t.end = map[static_cast<size_t>(t.end)];
  }
  collapse(s.question, nullptr);
  collapse(s.answer_prefix, nullptr);
  // The end of the prompt: no trailing space (RULER strips; the answer prefix follows the question).
  for (std::string* f : {&s.answer_prefix, &s.question, &s.context, &s.instruction}) {
    if (f->empty()) continue;
    if (f->back() == ' ') f->pop_back();
    break;
  }
}

const std::vector<std::string>& ruler_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const TaskDef& def : kTasks) v.emplace_back(def.name);
    return v;
  }();
  return names;
}

std::vector<EvalSample> generate_ruler_samples(const RulerTaskOptions& task_options,
                                               const PromptTokenCounter& count_tokens) {
  const TaskDef& def = find_task(task_options.task);
  // Each task draws from its own streams of the seed (RULER's scripts share one stream across tasks).
  RulerTaskOptions options = task_options;
  uint64_t name_hash = 0xcbf29ce484222325ULL;  // FNV-1a of the task's name
  for (char c : def.name) name_hash = (name_hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  options.seed = ruler::stream_seed(task_options.seed, name_hash);
  if (options.n < 0) throw InputError(options.task + ": n must be >= 0, not " + std::to_string(options.n));
  if (!count_tokens) throw InputError(options.task + ": no token counter given");
  if (options.turns != 0 && def.family != Family::kNiah)
    throw InputError(options.task + ": later turns ask for other keys of a niah task's context; " + options.task +
                     " has none (use niah_multikey_1)");
  if (def.family == Family::kPaulGraham) {
    for (double d : options.depths) {
      if (!(d >= 0 && d <= 100)) {
        std::ostringstream text;
        text << d;
        throw InputError(options.task + ": depth " + text.str() + " is not a percent in [0, 100]");
      }
    }
  }
  Sources src;
  src.hay = choose_haystack(def, options.haystack);
  if (src.hay == Hay::kEssay) {
    if (options.essay_files.empty()) {
      throw InputError(options.task +
                       ": the essay haystack needs essay files (RulerTaskOptions::essay_files; RULER uses Paul "
                       "Graham's essays, which kvscope does not ship): give text files, or choose another haystack (" +
                       (def.family == Family::kNiah ? "noise, needle or code" : "noise or code") + ")");
    }
    src.essay = ruler::load_essay_words(options.essay_files);
    const auto words = static_cast<int64_t>(src.essay.size());
    for (int64_t j = 0; j < words; ++j) {
      src.essay_ends.push_back(
          ruler::ends_sentence(src.essay[static_cast<size_t>(j)], src.essay[static_cast<size_t>((j + 1) % words)]));
    }
  } else if (src.hay == Hay::kCode) {
    if (options.code_files.empty()) {
      throw InputError(options.task + ": the code haystack needs source files (RulerTaskOptions::code_files)");
    }
    src.code = ruler::load_code_lines(options.code_files);
  }
  const bool needs_words = def.family == Family::kCwe ||
                           (def.family == Family::kNiah && (def.key == Kind::kWords || def.value == Kind::kWords));
  if (needs_words) src.words = ruler::load_word_lists(options.words_file);
  if (def.family == Family::kNiah && (def.key == Kind::kWords || def.value == Kind::kWords))
    ruler::load_key_words(options.wordnet_dir, *src.words);

  SizeContext size;
  size.task = def.name;
  size.length = options.length;
  size.max_new_tokens = def.max_new_tokens;
  size.count = &count_tokens;
  size.unit = def.family == Family::kCwe ? "distinct words" : def.family == Family::kFwe ? "words" : unit_name(src.hay);
  if (options.n == 0) return {};
  std::vector<EvalSample> out;
  switch (def.family) {
    case Family::kNiah:
      out = generate_niah(def, options, src, size);
      break;
    case Family::kVt:
      out = generate_vt(def, options, src, size);
      break;
    case Family::kCwe:
      out = generate_cwe(def, options, src, size);
      break;
    case Family::kFwe:
      out = generate_fwe(def, options, size);
      break;
    case Family::kPaulGraham:
      out = generate_paul_graham(def, options, src, size);
      break;
  }
  if (options.remove_newline_tab)  // after sizing, as RULER: the prompt only gets shorter
    for (EvalSample& s : out) remove_newline_tab(s);
  return out;
}

}  // namespace kvscope
