#pragma once
// Jinja 3's built-in tests (`x is defined`, `x is string`, ...) (jinja/ internal).
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

/// `value is name(args)`. `name` is one is_supported_test() accepts (the parser checks).
/// Throws Error on bad arguments or an undefined value where Jinja would fail.
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

}  // namespace kvscope::jinja
