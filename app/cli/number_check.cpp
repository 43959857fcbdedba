#include "number_check.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "kvscope/core/param_spec.h"

namespace kvscope::cli {

CLI::Validator finite_number(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string range = std::string(lo_open ? "(" : "[") + format_number(lo) + ", " +
                            (std::isinf(hi) ? std::string("inf") : format_number(hi)) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return text + " is not a finite number";
        const bool above = lo_open ? v > lo : v >= lo, below = hi_open ? v < hi : v <= hi;
        if (!above || !below) return text + " is outside " + range;
        return {};
      },
      "NUMBER in " + range);
}

}  // namespace kvscope::cli
