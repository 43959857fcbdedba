#include "kvscope/core/param_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "kvscope/core/errors.h"

namespace kvscope {
namespace {

constexpr std::array<std::pair<ParamType, std::string_view>, 5> kTypeNames = {{{ParamType::kInt, "int"},
                                                                               {ParamType::kFloat, "float"},
                                                                               {ParamType::kChoice, "choice"},
                                                                               {ParamType::kBool, "bool"},
                                                                               {ParamType::kPath, "path"}}};

std::string join_keys(const std::vector<ParamSpec>& spec) {
  std::string out;
  for (const auto& p : spec) out += (out.empty() ? "" : ", ") + p.key;
  return out.empty() ? "(none)" : out;
}

double parse_number(const std::string& policy, const ParamSpec& p, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    // Range first: casting a double beyond int64 is undefined behaviour (found by fuzz_pipeline_spec).
    if (p.type == ParamType::kInt && (!std::isfinite(v) || std::fabs(v) > 9.0e15))
      throw InputError(policy + ": parameter '" + p.key + "' = '" + text + "' is out of range");
    if (p.type == ParamType::kInt && v != std::trunc(v))
      throw InputError(policy + ": parameter '" + p.key + "' must be an integer (got '" + text + "')");
    return v;
  } catch (const std::logic_error&) {
    throw InputError(policy + ": parameter '" + p.key + "' is not a number: '" + text + "'");
  }
}

}  // namespace

std::string_view param_type_name(ParamType t) {
  for (const auto& [type, name] : kTypeNames)
    if (type == t) return name;
  return "?";
}

std::optional<ParamType> parse_param_type(std::string_view name) {
  for (const auto& [type, n] : kTypeNames)
    if (n == name) return type;
  return std::nullopt;
}

std::string check_param(const std::string& policy, const ParamSpec& p, const std::string& text) {
  switch (p.type) {
    case ParamType::kInt:
    case ParamType::kFloat: {
      const double v = parse_number(policy, p, text);
      if (!(v >= p.min && v <= p.max)) {  // written so that NaN ("alpha=nan") is out of range too
        std::ostringstream os;
        os << policy << ": parameter '" << p.key << "' = " << text << " is outside [" << p.min << ", " << p.max << "]";
        throw InputError(os.str());
      }
      break;
    }
    case ParamType::kChoice:
      if (std::find(p.choices.begin(), p.choices.end(), text) == p.choices.end())
        throw InputError(policy + ": parameter '" + p.key + "' = '" + text + "' is not one of " + param_range_text(p));
      break;
    case ParamType::kPath:
      break;  // checked by the policy when it opens the file
    case ParamType::kBool:
      if (text != "true" && text != "false" && text != "1" && text != "0")
        throw InputError(policy + ": parameter '" + p.key + "' must be true or false (got '" + text + "')");
      break;
  }
  return text;
}

ParamValues resolve_params(const std::string& policy, const std::vector<ParamSpec>& spec, const ParamValues& values) {
  for (const auto& given : values) {
    const std::string& key = given.first;
    auto it = std::find_if(spec.begin(), spec.end(), [&](const ParamSpec& p) { return p.key == key; });
    if (it == spec.end())
      throw InputError(policy + ": unknown parameter '" + key + "' (valid: " + join_keys(spec) + ")");
  }
  ParamValues out;
  for (const auto& p : spec) {
    auto it = values.find(p.key);
    out[p.key] = check_param(policy, p, it == values.end() ? p.default_value : it->second);
  }
  return out;
}

int64_t param_int(const ParamValues& v, const std::string& key) { return static_cast<int64_t>(std::stod(v.at(key))); }
double param_float(const ParamValues& v, const std::string& key) { return std::stod(v.at(key)); }
bool param_bool(const ParamValues& v, const std::string& key) { return v.at(key) == "true" || v.at(key) == "1"; }

std::string param_range_text(const ParamSpec& p) {
  switch (p.type) {
    case ParamType::kInt:
    case ParamType::kFloat:
      return "[" + format_number(p.min) + ", " + format_number(p.max) + "]";
    case ParamType::kChoice: {
      std::string c;
      for (const auto& s : p.choices) c += (c.empty() ? "" : "|") + s;
      return c;
    }
    case ParamType::kBool:
      return "true|false";
    case ParamType::kPath:
      return "file";
  }
  return "";
}

std::string format_number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace kvscope
