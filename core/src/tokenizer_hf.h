#pragma once
// The Hugging Face tokenizer.json loader in two steps, so that tokenizer_transformers.cpp can adjust
// the parsed file before the tokenizer is built (internal to kvscope_core).
#include <filesystem>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvscope/core/tokenizer.h"

namespace kvscope {

/// The text of a JSON file that must hold an object (tokenizer.json, tokenizer_config.json).
/// Throws InputError(file, "not valid JSON: ...") or InputError(file, "... is not a JSON object").
nlohmann::json parse_tokenizer_json(std::string_view json_text, const std::filesystem::path& file);

/// The tokenizer a parsed tokenizer.json describes (see load_hf_tokenizer for what is supported).
/// Throws InputError(tokenizer_json, ...) naming the field or the unsupported type.
std::unique_ptr<Tokenizer> make_hf_tokenizer(const nlohmann::json& root, const std::filesystem::path& tokenizer_json);

}  // namespace kvscope
