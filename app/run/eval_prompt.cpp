#include "eval_prompt.h"

#include <algorithm>
#include <string>

#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope::run {

namespace {

/// Byte spans of the needles in `context`: the sample's own, else every occurrence of each answer.
std::vector<TextSpan> needle_spans(const EvalSample& s) {
  if (!s.needles.empty()) return s.needles;
  std::vector<TextSpan> out;
  std::vector<std::string> answers = s.answers;
  for (const EvalTurn& t : s.turns) answers.insert(answers.end(), t.answers.begin(), t.answers.end());
  for (const auto& a : answers) {
    if (a.empty()) continue;
    for (size_t at = s.context.find(a); at != std::string::npos; at = s.context.find(a, at + a.size()))
      out.push_back({static_cast<int64_t>(at), static_cast<int64_t>(at + a.size())});
  }
  std::sort(out.begin(), out.end(), [](const TextSpan& x, const TextSpan& y) { return x.begin < y.begin; });
  return out;
}

std::string without_leading_space(const std::string& prefix) {
  return prefix.starts_with(' ') ? prefix.substr(1) : prefix;
}

/// The text of later turn `t` in a chat conversation whose first user message is `user`.
std::string chat_turn_text(const Model& model, const ChatTemplate& tmpl, const EvalSample& s, const std::string& user,
                           size_t t) {
  // The answers so far are placeholders: what the template writes around them does not depend on them.
  const std::string answer = "\x01kvscope answer\x01";
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", user}});
  for (size_t i = 0; i < t; ++i) {
    messages.push_back({{"role", "assistant"}, {"content", answer}});
    messages.push_back({{"role", "user"}, {"content", s.turns[i].question}});
  }
  messages.push_back({{"role", "assistant"}, {"content", answer}});
  const std::string before = tmpl.render(messages, /*add_generation_prompt=*/false);
  messages.push_back({{"role", "user"}, {"content", s.turns[t].question}});
  const std::string after = tmpl.render(messages, /*add_generation_prompt=*/true);
  const size_t mark = before.rfind(answer);
  if (mark == std::string::npos || !after.starts_with(before))
    throw InputError(tmpl.origin(),
                     "the chat template does not keep earlier messages as they were when a turn is "
                     "added (sample '" +
                         s.id + "'), so later turns cannot follow on one cache");
  std::string text = before.substr(mark + answer.size()) + after.substr(before.size());
  // The model ends its answer with a stop token; generation feeds that token back first.
  for (int32_t id : model.stop_token_ids) {
    const std::string stop = model.tokenizer->token_text(id);
    if (!stop.empty() && text.starts_with(stop)) {
      text = text.substr(stop.size());
      break;
    }
  }
  return text + without_leading_space(s.turns[t].answer_prefix);
}

}  // namespace

EvalPrompt assemble_eval_prompt(const Model& model, const ChatTemplate* tmpl, const EvalSample& s) {
  if (!model.tokenizer) throw InputError(model.source, "has no tokenizer: an evaluation needs one to read the samples");
  const std::string user = s.instruction + s.context + s.question;
  std::string head, tail;  // the context part and the question part of the text
  size_t context_at = 0;   // where the context starts in head
  if (s.chat) {
    if (!tmpl)
      throw InputError(model.source, "has no chat template, and sample '" + s.id +
                                         "' is a chat prompt; give the model's template or set \"chat\": false");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", user}});
    const std::string rendered = tmpl->render(messages, /*add_generation_prompt=*/true);
    const size_t at = rendered.find(user);
    if (at == std::string::npos)
      throw InputError(tmpl->origin(), "the chat template does not write the user message verbatim (sample '" + s.id +
                                           "'), so the question cannot be split from the context");
    context_at = at + s.instruction.size();
    head = rendered.substr(0, context_at + s.context.size());
    tail = rendered.substr(head.size());
    tail += without_leading_space(s.answer_prefix);
  } else {
    context_at = s.instruction.size();
    head = s.instruction + s.context;
    tail = s.question + s.answer_prefix;
  }
  EvalPrompt out;
  out.text = head + tail;
  // The context part with the model's BOS convention for a plain prompt; a template writes its own.
  auto encode_head = [&](std::string_view text) {
    if (s.chat) return model.tokenizer->encode(text);
    std::vector<int32_t> ids;
    if (model.add_bos && model.config.bos_token_id >= 0) ids.push_back(model.config.bos_token_id);
    const auto body = model.tokenizer->encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  };
  out.ids = encode_head(head);
  out.question_start = static_cast<int64_t>(out.ids.size());
  const auto q = model.tokenizer->encode(tail);
  out.ids.insert(out.ids.end(), q.begin(), q.end());
  for (size_t t = 0; t < s.turns.size(); ++t)
    out.turn_ids.push_back(model.tokenizer->encode(s.chat ? chat_turn_text(model, *tmpl, s, user, t)
                                                          : s.turns[t].question + s.turns[t].answer_prefix));
  for (const TextSpan& span : needle_spans(s)) {
    const auto b = static_cast<int64_t>(encode_head(std::string_view(head).substr(0, context_at + span.begin)).size());
    const auto e = static_cast<int64_t>(encode_head(std::string_view(head).substr(0, context_at + span.end)).size());
    out.needle_ids.push_back({std::min(b, out.question_start), std::min(std::max(e, b + 1), out.question_start)});
  }
  return out;
}

}  // namespace kvscope::run
