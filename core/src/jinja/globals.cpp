// Global functions: range, dict, namespace, raise_exception, strftime_now.
#include "jinja/globals.h"

#include <ctime>
#include <string>

#include "jinja/args.h"
#include "jinja/error.h"

namespace kvscope::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE

Value range(const CallArgs& args) {
  if (!args.keyword.empty()) throw Error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw Error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  for (const Value& v : p)
    if (!v.is_integral()) throw Error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) throw Error("range() arg 3 must not be zero");
  const long double count_ld =
      step > 0 ? (static_cast<long double>(stop) - start + step - 1) / step
               : (static_cast<long double>(start) - stop - step - 1) / -static_cast<long double>(step);
  const int64_t count = count_ld > 0 ? static_cast<int64_t>(count_ld) : 0;
  if (count > kMaxRange)
    throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

/// dict(mapping, **kwargs) as Python builds it (a mapping or a list of pairs, then the keywords).
DictData dict_from(const CallArgs& args, const char* func) {
  if (args.positional.size() > 1)
    throw Error(std::string(func) + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else if (src.is_list()) {
      for (const Value& pair : src.as_list().items) {
        if (!pair.is_list() || pair.as_list().items.size() != 2 || !pair.as_list().items[0].is_string())
          throw Error(std::string(func) + ": expected (str, value) pairs");
        d.set(pair.as_list().items[0].as_string(), pair.as_list().items[1]);
      }
    } else {
      throw Error("'" + type_name(src) + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Value strftime_now(const CallArgs& args) {
  const BoundArgs a(args, "strftime_now", {"format"});
  const Value& format = a.get(0);
  if (!format.is_string()) throw Error("strftime() argument 1 must be str, not " + type_name(format));
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (format.as_string().empty()) return Value::string("");
  for (size_t size = 256; size <= (size_t{1} << 20); size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.as_string().c_str(), &local);
    if (n > 0) return Value::string(buf.substr(0, n));
  }
  return Value::string("");  // a format that formats to nothing
}

Value unsupported(const std::string& name) {
  return Value::function(
      name, [name](const CallArgs&) -> Value { throw Error("unsupported construct: global function '" + name + "'"); });
}

}  // namespace

DictData builtin_globals() {
  DictData g;
  g.set("range", Value::function("range", range));
  g.set("dict", Value::function("dict", [](const CallArgs& a) { return Value::dict(dict_from(a, "dict")); }));
  g.set("namespace", Value::function("namespace", [](const CallArgs& a) {
          return Value::make_namespace(dict_from(a, "namespace"));
        }));
  g.set("raise_exception", Value::function("raise_exception", [](const CallArgs& args) -> Value {
          const BoundArgs a(args, "raise_exception", {"message"});
          throw Error("template error: " + to_str(a.get(0)));
        }));
  g.set("strftime_now", Value::function("strftime_now", strftime_now));
  for (const char* name : {"cycler", "joiner", "lipsum"}) g.set(name, unsupported(name));
  return g;
}

}  // namespace kvscope::jinja
