#pragma once
// Python methods that chat templates call on strings, dicts and lists (jinja/ internal).
#include <optional>
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

/// `obj.name` when it is a Python method of obj's type: a bound callable, nullopt when the type
/// has no such attribute (the caller then looks for an item). Methods that would modify a list or
/// dict fail when called, as in Jinja's ImmutableSandboxedEnvironment ("access to attribute
/// 'append' of 'list' object is unsafe."); Python methods this renderer does not implement fail
/// when called with "unsupported construct: ...".
std::optional<Value> python_method(const Value& obj, const std::string& name);

}  // namespace kvscope::jinja
