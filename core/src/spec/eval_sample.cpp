#include "kvscope/core/eval_sample.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "../json_integers.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/eval_score.h"

namespace kvscope {
namespace {

using nlohmann::json;

/// One line's fields, with errors "<file>: line <n>: <problem>".
class Line {
 public:
  /// `where`: what the fields belong to, before each problem (a later turn: "'turns' [0]: ").
  Line(const json& obj, const std::filesystem::path& file, size_t line, std::string where = "")
      : obj_(obj), file_(file), line_(line), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(file_, "line " + std::to_string(line_) + ": " + where_ + problem);
  }
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  std::string text(const char* key, bool required, std::string fallback = "") const {
    const json* v = find(key);
    if (!v) {
      if (required) fail(std::string("missing field '") + key + "'");
      return fallback;
    }
    if (!v->is_string()) fail(std::string("'") + key + "' must be a string, not " + v->type_name());
    return v->get<std::string>();
  }
  /// `v` (the field `key`) as a list of non-empty strings; a string alone is one answer if allowed.
  std::vector<std::string> answers(const json& v, const char* key, bool string_ok) const {
    std::vector<std::string> out;
    if (string_ok && v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const json& e : v) {
        if (!e.is_string()) fail(std::string("'") + key + "' has an element that is not a string");
        out.push_back(e.get<std::string>());
      }
    } else {
      fail(std::string("'") + key + "' must be " + (string_ok ? "a string or " : "") + "a list of strings, not " +
           v.type_name());
    }
    if (out.empty()) fail(std::string("'") + key + "' is empty");
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].empty()) fail(std::string("'") + key + "' has an empty answer (index " + std::to_string(i) + ")");
    }
    return out;
  }

 private:
  const json& obj_;
  const std::filesystem::path& file_;
  size_t line_;
  std::string where_;
};

EvalSample parse_line(const json& obj, const std::filesystem::path& file, size_t line_no) {
  const Line line(obj, file, line_no);
  EvalSample s;
  s.task = line.text("task", false);
  s.instruction = line.text("instruction", false);
  s.context = line.text("context", true);
  s.question = line.text("question", true);
  s.answer_prefix = line.text("answer_prefix", false);

  const json* answers = line.find("answers");
  const json* answer = line.find("answer");
  if (answers && answer) line.fail("both 'answers' and 'answer' (kvpress's column); give one");
  if (!answers && !answer) line.fail("missing field 'answers' (or kvpress's 'answer')");
  s.answers = answers ? line.answers(*answers, "answers", false) : line.answers(*answer, "answer", true);

  const json* mnt = line.find("max_new_tokens");
  if (!mnt) line.fail("missing field 'max_new_tokens'");
  if (!mnt->is_number_integer()) line.fail(std::string("'max_new_tokens' must be an integer, not ") + mnt->type_name());
  const auto n = json_integer(*mnt, 1, std::numeric_limits<int32_t>::max());
  if (!n) line.fail("'max_new_tokens' must be positive (at most 2^31-1), got " + mnt->dump());
  s.max_new_tokens = *n;

  if (const json* len = line.find("length")) {
    if (!len->is_number_integer()) line.fail(std::string("'length' must be an integer, not ") + len->type_name());
    const auto l = json_integer(*len, 0, std::numeric_limits<int64_t>::max());
    if (!l) line.fail("'length' must not be negative, got " + len->dump());
    s.length = *l;
  }
  if (const json* chat = line.find("chat")) {
    if (!chat->is_boolean()) line.fail(std::string("'chat' must be true or false, not ") + chat->type_name());
    s.chat = chat->get<bool>();
  }
  s.metric = line.text("metric", false, default_metric(s.task));
  if (const json* classes = line.find("all_classes"); classes && !classes->is_null()) {
    if (!classes->is_array())
      line.fail(std::string("'all_classes' must be a list of strings, not ") + classes->type_name());
    for (const json& c : *classes) {
      if (!c.is_string()) line.fail("'all_classes' has an element that is not a string");
      s.all_classes.push_back(c.get<std::string>());
    }
  }
  if (const std::string problem = metric_input_problem(s.metric, s.answers, s.all_classes); !problem.empty())
    line.fail(problem);
  s.first_line = default_first_line(s.task);
  if (const json* first = line.find("first_line")) {
    if (!first->is_boolean()) line.fail(std::string("'first_line' must be true or false, not ") + first->type_name());
    s.first_line = first->get<bool>();
  }
  if (const json* turns = line.find("turns")) {
    if (!turns->is_array())
      line.fail(std::string("'turns' must be a list of {question, answers, answer_prefix} objects, not ") +
                turns->type_name());
    for (size_t t = 0; t < turns->size(); ++t) {
      const json& turn = (*turns)[t];
      const std::string where = "'turns' [" + std::to_string(t) + "]";
      if (!turn.is_object()) line.fail(where + " must be an object with question and answers");
      const Line one(turn, file, line_no, where + ": ");
      EvalTurn e;
      e.question = one.text("question", true);
      e.answer_prefix = one.text("answer_prefix", false);
      const json* a = one.find("answers");
      if (!a) one.fail("missing field 'answers'");
      e.answers = one.answers(*a, "answers", false);
      if (const std::string problem = metric_input_problem(s.metric, e.answers, s.all_classes); !problem.empty())
        line.fail(where + ": " + problem);
      s.turns.push_back(std::move(e));
    }
  }
  s.id = line.text("id", false, (s.task.empty() ? std::string("sample") : s.task) + "-" + std::to_string(line_no));
  if (s.id.empty()) line.fail("'id' is empty");
  if (const json* needles = line.find("needles")) {
    if (!needles->is_array())
      line.fail(std::string("'needles' must be a list of [begin, end] pairs, not ") + needles->type_name());
    const auto size = static_cast<int64_t>(s.context.size());
    for (const json& pair : *needles) {
      TextSpan span{-1, -1};
      if (pair.is_array() && pair.size() == 2) {
        span.begin = json_integer(pair[0], 0, size).value_or(-1);
        span.end = json_integer(pair[1], 0, size).value_or(-1);
      }
      if (span.begin < 0 || span.end <= span.begin)
        line.fail("'needles' has " + pair.dump() + ": each must be [begin, end], byte offsets into the context with " +
                  "0 <= begin < end <= " + std::to_string(size));
      s.needles.push_back(span);
    }
    std::sort(s.needles.begin(), s.needles.end(),
              [](const TextSpan& x, const TextSpan& y) { return x.begin < y.begin; });
  }
  return s;
}

}  // namespace

std::vector<EvalSample> parse_eval_samples(std::string_view text, const std::filesystem::path& source) {
  std::vector<EvalSample> samples;
  std::map<std::string, size_t, std::less<>> id_line;  // id -> the line that gave it
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    json obj;
    try {
      obj = json::parse(raw.begin(), raw.end());
    } catch (const json::exception& e) {  // parse_error; out_of_range for a number past double
      throw InputError(source, "line " + std::to_string(line_no) + ": not valid JSON: " + e.what());
    }
    if (!obj.is_object()) {
      throw InputError(source, "line " + std::to_string(line_no) + ": a JSON " + obj.type_name() + ", not an object");
    }
    EvalSample s = parse_line(obj, source, line_no);
    const auto [it, fresh] = id_line.emplace(s.id, line_no);
    if (!fresh) {
      throw InputError(source, "line " + std::to_string(line_no) + ": id '" + s.id + "' already used on line " +
                                   std::to_string(it->second));
    }
    samples.push_back(std::move(s));
  }
  if (samples.empty()) throw InputError(source, "no samples (an empty file or only blank lines)");
  return samples;
}

std::vector<EvalSample> load_eval_samples(const std::filesystem::path& jsonl) {
  std::error_code ec;
  if (!std::filesystem::exists(jsonl, ec)) throw InputError(jsonl, "no such file");
  if (std::filesystem::is_directory(jsonl, ec)) throw InputError(jsonl, "is a directory, not a JSONL file");
  std::ifstream in(jsonl, std::ios::binary);
  if (!in) throw InputError(jsonl, "cannot be read");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw InputError(jsonl, "cannot be read");
  return parse_eval_samples(text, jsonl);
}

std::string eval_sample_json(const EvalSample& s) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["task"] = s.task;
  j["length"] = s.length;
  j["chat"] = s.chat;
  j["instruction"] = s.instruction;
  j["context"] = s.context;
  j["question"] = s.question;
  j["answer_prefix"] = s.answer_prefix;
  j["answers"] = s.answers;
  j["max_new_tokens"] = s.max_new_tokens;
  j["metric"] = s.metric;
  if (!s.all_classes.empty()) j["all_classes"] = s.all_classes;
  j["first_line"] = s.first_line;
  if (!s.needles.empty()) {
    j["needles"] = nlohmann::ordered_json::array();
    for (const TextSpan& t : s.needles) j["needles"].push_back({t.begin, t.end});
  }
  if (!s.turns.empty()) {
    j["turns"] = nlohmann::ordered_json::array();
    for (const EvalTurn& t : s.turns)
      j["turns"].push_back({{"question", t.question}, {"answer_prefix", t.answer_prefix}, {"answers", t.answers}});
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace kvscope
