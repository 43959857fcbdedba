#pragma once
// Jinja 3's built-in filters that chat templates use, with transformers' `tojson` (jinja/ internal).
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

/// `input | name(args)`. `name` is one is_supported_filter() accepts (the parser checks).
/// Filters that yield generators in Jinja (map, select, reject, selectattr, rejectattr, unique,
/// reverse) return lists here. Throws Error on bad arguments, as Jinja would.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);

}  // namespace kvscope::jinja
