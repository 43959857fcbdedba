#include "kvscope/core/policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "kvscope/core/errors.h"

namespace kvscope {
namespace {

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
    if (p.type == ParamSpec::Type::kInt && (!std::isfinite(v) || std::fabs(v) > 9.0e15))
      throw InputError(policy + ": parameter '" + p.key + "' = '" + text + "' is out of range");
    if (p.type == ParamSpec::Type::kInt && v != std::trunc(v))
      throw InputError(policy + ": parameter '" + p.key + "' must be an integer (got '" + text + "')");
    return v;
  } catch (const std::logic_error&) {
    throw InputError(policy + ": parameter '" + p.key + "' is not a number: '" + text + "'");
  }
}

}  // namespace

ParamValues resolve_params(const std::string& policy, const std::vector<ParamSpec>& spec, const ParamValues& values) {
  ParamValues out;
  for (const auto& given : values) {
    const std::string& key = given.first;
    auto it = std::find_if(spec.begin(), spec.end(), [&](const ParamSpec& p) { return p.key == key; });
    if (it == spec.end())
      throw InputError(policy + ": unknown parameter '" + key + "' (valid: " + join_keys(spec) + ")");
  }
  for (const auto& p : spec) {
    auto it = values.find(p.key);
    const std::string text = it == values.end() ? p.default_value : it->second;
    switch (p.type) {
      case ParamSpec::Type::kInt:
      case ParamSpec::Type::kFloat: {
        const double v = parse_number(policy, p, text);
        if (!(v >= p.min && v <= p.max)) {  // written so that NaN ("alpha=nan") is out of range too
          std::ostringstream os;
          os << policy << ": parameter '" << p.key << "' = " << text << " is outside [" << p.min << ", " << p.max << "]";
          throw InputError(os.str());
        }
        break;
      }
      case ParamSpec::Type::kChoice:
        if (std::find(p.choices.begin(), p.choices.end(), text) == p.choices.end()) {
          std::string c;
          for (const auto& s : p.choices) c += (c.empty() ? "" : "|") + s;
          throw InputError(policy + ": parameter '" + p.key + "' = '" + text + "' is not one of " + c);
        }
        break;
      case ParamSpec::Type::kPath:
        break;  // checked by the policy when it opens the file
      case ParamSpec::Type::kBool:
        if (text != "true" && text != "false" && text != "1" && text != "0")
          throw InputError(policy + ": parameter '" + p.key + "' must be true or false (got '" + text + "')");
        break;
    }
    out[p.key] = text;
  }
  return out;
}

int64_t param_int(const ParamValues& v, const std::string& key) { return static_cast<int64_t>(std::stod(v.at(key))); }
double param_float(const ParamValues& v, const std::string& key) { return std::stod(v.at(key)); }
bool param_bool(const ParamValues& v, const std::string& key) { return v.at(key) == "true" || v.at(key) == "1"; }

void PolicyRegistry::add(Entry e) { entries_[e.name] = std::move(e); }

const PolicyRegistry::Entry& PolicyRegistry::at(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known;
    for (const auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown policy '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

std::unique_ptr<Policy> PolicyRegistry::make(const std::string& name, const ParamValues& values) const {
  const Entry& e = at(name);
  return e.make(resolve_params(name, e.spec, values));
}

std::vector<std::string> PolicyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, e] : entries_) out.push_back(n);
  return out;
}

}  // namespace kvscope
