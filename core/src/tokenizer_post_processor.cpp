// tokenizer.json post-processors (TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing,
// Sequence) reduced to the ids they put before and after a single sequence.
#include "tokenizer_post_processor.h"

#include <cstdint>
#include <string>

#include "json_integers.h"
#include "kvscope/core/errors.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string type_of(const json& spec, const fs::path& file) {
  if (!spec.is_object() || !spec.contains("type") || !spec.at("type").is_string())
    throw InputError(file, "post_processor must be an object with a string \"type\" (got " +
                               spec.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 60) + ")");
  return spec.at("type").get<std::string>();
}

int32_t token_id(const json& value, const std::string& what, const fs::path& file) {
  const auto id = json_integer(value, 0, INT32_MAX);
  if (!id) throw InputError(file, what + " has id " + value.dump() + ", not a token id in [0, 2^31)");
  return static_cast<int32_t>(*id);
}

/// TemplateProcessing: the pieces of "single" before $A go to the prefix, those after to the suffix.
SpecialTokenFrame parse_template(const json& spec, const fs::path& file) {
  if (!spec.contains("single") || !spec.at("single").is_array())
    throw InputError(file, "post_processor TemplateProcessing needs a \"single\" array of pieces");
  const json special_tokens = spec.value("special_tokens", json::object());
  if (!special_tokens.is_object())
    throw InputError(file, "post_processor TemplateProcessing \"special_tokens\" must be an object");
  SpecialTokenFrame frame;
  bool seen_sequence = false;
  for (const json& piece : spec.at("single")) {
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& sequence = piece.at("Sequence");
      if (!sequence.is_object() || sequence.value("id", json()) != "A" || seen_sequence)
        throw InputError(file, "post_processor TemplateProcessing \"single\" must hold the sequence $A once (got " +
                                   piece.dump() + ")");
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") || !piece.at("SpecialToken").is_object() ||
        !piece.at("SpecialToken").contains("id") || !piece.at("SpecialToken").at("id").is_string())
      throw InputError(file, "post_processor TemplateProcessing piece " +
                                 piece.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 60) +
                                 " is neither {\"Sequence\": ...} nor {\"SpecialToken\": {\"id\": ...}}");
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!special_tokens.contains(name) || !special_tokens.at(name).is_object() ||
        !special_tokens.at(name).contains("ids") || !special_tokens.at(name).at("ids").is_array())
      throw InputError(file, "post_processor TemplateProcessing uses the special token '" + name +
                                 "', which its \"special_tokens\" does not define with \"ids\"");
    auto& target = seen_sequence ? frame.suffix : frame.prefix;
    for (const json& id : special_tokens.at(name).at("ids"))
      target.push_back(token_id(id, "post_processor special token '" + name + "'", file));
  }
  if (!seen_sequence) throw InputError(file, "post_processor TemplateProcessing \"single\" has no sequence $A");
  return frame;
}

/// RobertaProcessing / BertProcessing: "cls": [token, id] + sequence + "sep": [token, id].
SpecialTokenFrame parse_cls_sep(const json& spec, const std::string& type, const fs::path& file) {
  const auto id_of = [&](const char* key) {
    if (!spec.contains(key) || !spec.at(key).is_array() || spec.at(key).size() != 2)
      throw InputError(file, "post_processor " + type + " needs \"" + key + "\": [token, id]");
    return token_id(spec.at(key).at(1), "post_processor " + type + " " + key, file);
  };
  return {{id_of("cls")}, {id_of("sep")}};
}

}  // namespace

SpecialTokenFrame parse_post_processor(const json& spec, const fs::path& file) {
  if (spec.is_null()) return {};
  const std::string type = type_of(spec, file);
  if (type == "ByteLevel") return {};  // offsets only
  if (type == "TemplateProcessing") return parse_template(spec, file);
  if (type == "RobertaProcessing" || type == "BertProcessing") return parse_cls_sep(spec, type, file);
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec.at("processors").is_array())
      throw InputError(file, "post_processor Sequence needs a \"processors\" array");
    SpecialTokenFrame frame;  // each processor wraps what the ones before it produced
    for (const json& step : spec.at("processors")) {
      SpecialTokenFrame outer = parse_post_processor(step, file);
      outer.prefix.insert(outer.prefix.end(), frame.prefix.begin(), frame.prefix.end());
      frame.suffix.insert(frame.suffix.end(), outer.suffix.begin(), outer.suffix.end());
      frame.prefix = std::move(outer.prefix);
    }
    return frame;
  }
  throw InputError(file, "unsupported post-processor '" + type +
                             "' (supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, "
                             "Sequence)");
}

}  // namespace kvscope
