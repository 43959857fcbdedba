#pragma once
// The global functions a chat template can call: Jinja's range, dict, namespace and transformers'
// raise_exception and strftime_now (jinja/ internal).
#include "jinja/value.h"

namespace kvscope::jinja {

/// The globals every render starts with (template variables of the same name take precedence).
/// range() refuses more than 100000 items, as Jinja's sandbox does; raise_exception(msg) throws
/// Error("template error: <msg>"); strftime_now(fmt) formats the local time. cycler, joiner and
/// lipsum exist but fail as unsupported when called.
DictData builtin_globals();

}  // namespace kvscope::jinja
