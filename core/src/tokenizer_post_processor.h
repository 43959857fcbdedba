#pragma once
// tokenizer.json `post_processor`: the special tokens Hugging Face adds around one sequence when
// encoding with add_special_tokens=True (internal to kvscope_core).
#include <cstdint>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope {

/// What a post-processor adds around the ids of a single sequence: `prefix` + ids + `suffix`.
struct SpecialTokenFrame {
  std::vector<int32_t> prefix;  ///< e.g. {BOS}
  std::vector<int32_t> suffix;  ///< e.g. {EOS}
};

/// Parses `spec` (tokenizer.json "post_processor"; null adds nothing). Supported types:
/// TemplateProcessing (its "single" template), ByteLevel (adds nothing), RobertaProcessing and
/// BertProcessing (cls + sequence + sep), Sequence of these. Throws InputError(file, ...) for
/// another type ("unsupported post-processor 'Type'"), a malformed template, a special token the
/// template uses but does not define, or an id that is not a token id in [0, 2^31).
SpecialTokenFrame parse_post_processor(const nlohmann::json& spec, const std::filesystem::path& file);

}  // namespace kvscope
