#pragma once
// The Jinja parser: tokens -> statements and expressions, with Jinja 3's grammar and operator
// precedence for the tags chat templates use (jinja/ internal).
#include <string_view>

#include "jinja/ast.h"

namespace kvscope::jinja {

/// Parses a template. Supported tags: if/elif/else, for (tuple targets, `if` filter, else), set
/// (names, tuples, namespace attributes, block set), macro, break/continue, with, filter,
/// generation (transformers' tag; renders its body), raw. Throws Error with the line: "syntax
/// error: ..." for malformed templates, "unsupported construct: ..." (tag, filter, test or syntax
/// this renderer does not implement) for valid Jinja it cannot render.
Program parse_template(std::string_view source);

}  // namespace kvscope::jinja
