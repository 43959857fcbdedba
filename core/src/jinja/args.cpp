// Python-style argument binding.
#include "jinja/args.h"

#include "jinja/error.h"

namespace kvscope::jinja {

BoundArgs::BoundArgs(const CallArgs& args, std::string_view func, std::initializer_list<std::string_view> params)
    : func_(func), names_(params), slots_(params.size()) {
  if (args.positional.size() > names_.size())
    throw Error(func_ + "() takes at most " + std::to_string(names_.size()) + " argument(s) (" +
                std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < names_.size() && names_[i] != key) ++i;
    if (i == names_.size()) throw Error(func_ + "() got an unexpected keyword argument '" + key + "'");
    if (slots_[i]) throw Error(func_ + "() got multiple values for argument '" + key + "'");
    slots_[i] = value;
  }
}

const Value& BoundArgs::get(size_t i) const {
  if (!slots_[i]) throw Error(func_ + "() missing required argument '" + std::string(names_[i]) + "'");
  return *slots_[i];
}

int64_t BoundArgs::int_or(size_t i, int64_t fallback) const {
  if (!slots_[i] || slots_[i]->is_none()) return fallback;
  if (!slots_[i]->is_integral())
    throw Error(func_ + "(): '" + std::string(names_[i]) + "' must be an integer, not " + type_name(*slots_[i]));
  return slots_[i]->as_int();
}

std::optional<std::string> BoundArgs::string_or_none(size_t i) const {
  if (!slots_[i] || slots_[i]->is_none()) return std::nullopt;
  if (!slots_[i]->is_string())
    throw Error(func_ + "(): '" + std::string(names_[i]) + "' must be a string, not " + type_name(*slots_[i]));
  return slots_[i]->as_string();
}

}  // namespace kvscope::jinja
