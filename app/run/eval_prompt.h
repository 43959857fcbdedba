#pragma once
// An evaluation sample (eval_sample.h) as the tokens a model is fed: the prompt assembled as RULER
// and kvpress assemble it, split where the question begins (what a question-agnostic method
// compresses is the part before), and where the needles sit in tokens. The one path of
// `kvscope-cli eval`, the GUI and the tests.
#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/core/chat_template.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/model.h"

namespace kvscope::run {

/// A sample's prompt as tokens.
struct EvalPrompt {
  std::string text;            ///< the whole prompt as text (rendered template + answer prefix)
  std::vector<int32_t> ids;    ///< its tokens: context part, then question part
  int64_t question_start = 0;  ///< ids[question_start:] is the question part (question, end of turn, answer prefix)
  std::vector<TextSpan> needle_ids;  ///< token ranges [begin, end) of the needles in ids (sorted)
  /// The sample's later turns as tokens (GenerateRequest::follow_up_turns): what follows the token
  /// that ended the previous turn's answer, up to this turn's answer prefix.
  std::vector<std::vector<int32_t>> turn_ids;
};

/// Assembles `sample` for `model` (docs/eval.md "Prompt assembly"):
/// - chat: `tmpl` applied to one user message `instruction + context + question` with the generation
///   prompt, then the answer prefix without its leading space (RULER's prepare.py puts it inside
///   the assistant turn);
/// - plain: `instruction + context + question + answer_prefix`, with the model's BOS convention
///   (Model::add_bos), as tokenizer(text) gives it.
/// The text is split where the question begins and each part is tokenized alone (as kvpress's
/// pipeline tokenizes context and question), so ids[:question_start] is exactly the context part.
/// Later turns (EvalSample::turns): chat: the text the template writes between an assistant answer
/// and the next turn's generation prompt (rendering the conversation with and without the turn's
/// user message, the previous answer a placeholder), less the stop token's text the model ends its
/// answer with (that token is fed back as the block's first), then the answer prefix; plain: the
/// question and the answer prefix. Throws InputError naming the template when it rewrites earlier
/// messages as the conversation grows (the turns then cannot be appended to one cache).
/// Needles: the sample's spans, or else every occurrence of an answer (any turn's) in the context; each mapped
/// to tokens by the length of the tokenized text before it (exact up to a token where BPE merges
/// across the boundary). Throws InputError naming the model for a model without a tokenizer, a chat
/// sample with no template (`tmpl` null: "... has no chat template; set \"chat\": false"), and a
/// template whose rendering does not hold the user message verbatim.
EvalPrompt assemble_eval_prompt(const Model& model, const ChatTemplate* tmpl, const EvalSample& sample);

}  // namespace kvscope::run
