#pragma once
// Which filters and tests the renderer implements, and which other names Jinja 3 has (so that
// an unknown name reads as a typo and a known one as unsupported) (jinja/ internal).
#include <string_view>

namespace kvscope::jinja {

/// Whether `name` is a filter the renderer implements (filters.cpp).
bool is_supported_filter(std::string_view name);
/// Whether `name` is one of Jinja 3's built-in filters that the renderer does not implement.
bool is_unsupported_jinja_filter(std::string_view name);
/// Whether `name` is a test the renderer implements (is_tests.cpp).
bool is_supported_test(std::string_view name);

}  // namespace kvscope::jinja
