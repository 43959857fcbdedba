#pragma once
// Range checks of numeric command-line options, applied to the text before CLI11 converts it, so
// that an empty value, "nan", "inf" or a number outside the range is an error naming the option
// (CLI11 prefixes it) and the value, never a silent default.
#include <string>

#include <CLI/CLI.hpp>

namespace kvscope::cli {

/// Accepts one finite number v with lo <= v <= hi (lo < v with lo_open, v < hi with hi_open).
/// The error reads "'<text>' is not a number" or "<text> is outside [lo, hi)" and the like.
CLI::Validator finite_number(double lo, double hi, bool lo_open = false, bool hi_open = false);

}  // namespace kvscope::cli
