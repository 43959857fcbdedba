#pragma once
// Typed policy parameters: the ParamSpec table a policy declares, its values as SPEC text, and
// their validation. Torch-free (kvscope_spec): core, the session store, the CLI and the GUI's
// pipeline editor all describe parameters with these types.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// Type of one policy parameter.
enum class ParamType { kInt, kFloat, kChoice, kBool, kPath };
/// "int" | "float" | "choice" | "bool" | "path" (the names sessions store).
std::string_view param_type_name(ParamType t);
/// The type named `name`; nullopt for anything else.
std::optional<ParamType> parse_param_type(std::string_view name);

/// One parameter a policy declares: its short key (as written in a pipeline SPEC), range,
/// default, help, and the paper + section it comes from.
struct ParamSpec {
  std::string key;
  ParamType type = ParamType::kInt;
  double min = 0, max = 0;           ///< inclusive range for kInt / kFloat
  std::string default_value;         ///< as text, e.g. "64", "0.2", "avg"
  std::vector<std::string> choices;  ///< for kChoice
  std::string help;
  std::string paper_ref;  ///< e.g. "SnapKV (Li et al. 2024) §4.2"
};

/// Parameter values as given (key -> text). A policy's factory validates them against its
/// ParamSpec and parses them into its typed Params struct once.
using ParamValues = std::map<std::string, std::string>;

/// Checks one value text against `p` and returns it unchanged. Throws InputError("<policy>:
/// parameter '<key>' ...") for an unparsable number, a non-integer int, a value outside [min, max]
/// (NaN included), a choice not listed, or a bool other than true/false/1/0. Paths are not opened.
std::string check_param(const std::string& policy, const ParamSpec& p, const std::string& text);

/// Validates `values` against `spec` (unknown keys: the error lists the valid ones; bad values:
/// check_param) and returns the full set with defaults filled in. Throws InputError("<policy>: ...").
ParamValues resolve_params(const std::string& policy, const std::vector<ParamSpec>& spec, const ParamValues& values);

/// Typed getters over resolved values (keys must exist: std::out_of_range otherwise).
int64_t param_int(const ParamValues& v, const std::string& key);
double param_float(const ParamValues& v, const std::string& key);
bool param_bool(const ParamValues& v, const std::string& key);

/// What a value may be, for help text: "[1, 4096]", "avg|max", "true|false", "file".
std::string param_range_text(const ParamSpec& p);

/// Shortest text that parses back to exactly `v` ("0.2", "64", "1e-05").
std::string format_number(double v);

}  // namespace kvscope
