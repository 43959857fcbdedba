// Python methods on str, dict and list values, bound to their object.
#include "jinja/methods.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/access.h"
#include "jinja/args.h"
#include "jinja/error.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

using Fn = std::function<Value(const CallArgs&)>;

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

template <size_t N>
bool one_of(std::string_view name, const std::string_view (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

/// Python attributes of each type that this renderer does not implement or must refuse.
constexpr std::string_view kStrOther[] = {"encode",      "expandtabs", "format",    "format_map", "isidentifier",
                                          "isprintable", "istitle",    "maketrans", "translate"};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kListUnsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

Value bound(const Value& obj, const std::string& name, Fn fn) {
  return Value::function(type_name(obj) + "." + name, std::move(fn));
}

Value unsafe(const Value& obj, const std::string& name) {
  const std::string type = type_name(obj);
  return bound(obj, name, [type, name](const CallArgs&) -> Value {
    throw Error("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  });
}

Value unsupported(const Value& obj, const std::string& name) {
  const std::string type = type_name(obj);
  return bound(obj, name, [type, name](const CallArgs&) -> Value {
    throw Error("unsupported construct: method '" + name + "' of '" + type + "'");
  });
}

std::string require_string(const Value& v, const std::string& func) {
  if (!v.is_string()) throw Error(func + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

/// s[start:end] in code points (Python's slice rules with step 1) and the offset of its start.
std::pair<std::u32string, int64_t> code_point_range(const std::string& s, const BoundArgs& a, size_t start_param) {
  std::u32string cps = decode_utf8(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  int64_t lo = a.int_or(start_param, 0), hi = a.int_or(start_param + 1, n);
  if (lo < 0) lo = std::max<int64_t>(lo + n, 0);
  if (hi < 0) hi = std::max<int64_t>(hi + n, 0);
  lo = std::min(lo, n);
  hi = std::min(hi, n);
  if (hi < lo) hi = lo;
  return {cps.substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)), lo};
}

Value affix_test(const std::string& s, const CallArgs& args, const std::string& func, bool prefix) {
  const BoundArgs a(args, func, {"prefix", "start", "end"});
  const auto [cps, lo] = code_point_range(s, a, 1);
  const std::string part = encode_utf8(cps);
  const auto test = [&](const Value& affix) {
    const std::string x = require_string(affix, func);
    if (x.size() > part.size()) return false;
    return prefix ? part.compare(0, x.size(), x) == 0 : part.compare(part.size() - x.size(), x.size(), x) == 0;
  };
  const Value& affix = a.get(0);
  if (affix.is_list() && affix.as_list().is_tuple) {
    for (const Value& x : affix.as_list().items)
      if (test(x)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(test(affix));
}

/// str.find / rfind / index / rindex: the code point index of `sub`, or -1.
int64_t find_in(const std::string& s, const CallArgs& args, const std::string& func, bool reverse) {
  const BoundArgs a(args, func, {"sub", "start", "end"});
  const std::string sub = require_string(a.get(0), func);
  const auto [cps, lo] = code_point_range(s, a, 1);
  const std::string part = encode_utf8(cps);
  const size_t hit = reverse ? part.rfind(sub) : part.find(sub);
  if (hit == std::string::npos) return -1;
  return lo + static_cast<int64_t>(codepoint_count(std::string_view(part).substr(0, hit)));
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

std::string title_case(const std::string& s) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : decode_utf8(s)) {
    const bool cased = py_is_lower_cased(c) || py_is_upper_cased(c);
    const std::string one = encode_utf8(std::u32string(1, c));
    const std::u32string mapped = decode_utf8(previous_cased ? py_lower(one) : py_upper(one));
    out += mapped;
    previous_cased = cased;
  }
  return encode_utf8(out);
}

std::string pad(const std::string& s, const CallArgs& args, const std::string& func, int where) {
  const BoundArgs a(args, func, {"width", "fillchar"});
  const int64_t width = a.int_or(0, 0);
  const std::string fill = a.has(1) ? require_string(a.get(1), func) : " ";
  if (codepoint_count(fill) != 1) throw Error(func + "() fill character must be exactly one character long");
  const int64_t n = static_cast<int64_t>(codepoint_count(s));
  if (width <= n) return s;
  check_string_size(static_cast<double>(width) * static_cast<double>(fill.size()));
  const int64_t total = width - n;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

bool all_code_points(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string cps = decode_utf8(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

std::optional<Value> string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.as_string();
  const std::string func = "str." + name;
  if (name == "startswith" || name == "endswith")
    return bound(obj, name,
                 [s, func, name](const CallArgs& args) { return affix_test(s, args, func, name == "startswith"); });
  if (name == "split" || name == "rsplit")
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {"sep", "maxsplit"});
      const auto sep = a.string_or_none(0);
      if (sep && sep->empty()) throw Error("empty separator");
      const int64_t maxsplit = a.int_or(1, -1);
      return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {"chars"});
      return Value::string(py_strip(s, a.string_or_none(0), name != "rstrip", name != "lstrip"));
    });
  if (one_of(name, {"upper", "lower", "casefold", "title", "capitalize", "swapcase"}))
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {});
      if (name == "upper") return Value::string(py_upper(s));
      if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
      if (name == "title") return Value::string(title_case(s));
      if (name == "capitalize") return Value::string(py_capitalize(s));
      std::u32string out;
      for (char32_t c : decode_utf8(s)) {
        const std::string one = encode_utf8(std::u32string(1, c));
        out += decode_utf8(py_is_upper_cased(c) ? py_lower(one) : py_upper(one));
      }
      return Value::string(encode_utf8(out));
    });
  if (name == "replace")
    return bound(obj, name, [s, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"old", "new", "count"});
      return Value::string(
          py_replace(s, require_string(a.get(0), func), require_string(a.get(1), func), a.int_or(2, -1)));
    });
  if (one_of(name, {"find", "rfind", "index", "rindex"}))
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const int64_t i = find_in(s, args, func, name[0] == 'r');
      if (i < 0 && name.ends_with("index")) throw Error("substring not found");
      return Value::integer(i);
    });
  if (name == "count")
    return bound(obj, name, [s, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"sub", "start", "end"});
      const std::string sub = require_string(a.get(0), func);
      const auto [cps, lo] = code_point_range(s, a, 1);
      if (sub.empty()) return Value::integer(static_cast<int64_t>(cps.size()) + 1);
      const std::string part = encode_utf8(cps);
      int64_t n = 0;
      for (size_t p = part.find(sub); p != std::string::npos; p = part.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    });
  if (name == "join")
    return bound(obj, name, [s, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"iterable"});
      std::string out;
      const std::vector<Value> items = iterate(a.get(0));
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          throw Error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                      " found");
        if (i) out += s;
        out += items[i].as_string();
        check_string_size(static_cast<double>(out.size()));
      }
      return Value::string(std::move(out));
    });
  if (name == "splitlines")
    return bound(obj, name, [s, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"keepends"});
      return str_list(py_splitlines(s, a.bool_or(0, false)));
    });
  if (one_of(name,
             {"isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "islower", "isupper", "isascii"}))
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {});
      if (name == "isalpha") return Value::boolean(all_code_points(s, py_is_alpha));
      if (name == "isalnum")
        return Value::boolean(all_code_points(s, [](char32_t c) { return py_is_alpha(c) || py_is_digit(c); }));
      if (name == "isspace") return Value::boolean(all_code_points(s, is_py_space));
      if (name == "isascii")
        return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
      if (name == "islower" || name == "isupper") {
        bool any_cased = false;
        for (char32_t c : decode_utf8(s)) {
          const bool lower = py_is_lower_cased(c), upper = py_is_upper_cased(c);
          if (name == "islower" ? upper : lower) return Value::boolean(false);
          any_cased = any_cased || lower || upper;
        }
        return Value::boolean(any_cased);
      }
      return Value::boolean(all_code_points(s, py_is_digit));
    });
  if (name == "removeprefix" || name == "removesuffix")
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {"affix"});
      const std::string x = require_string(a.get(0), func);
      if (name == "removeprefix" && s.starts_with(x)) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && !x.empty() && s.ends_with(x))
        return Value::string(s.substr(0, s.size() - x.size()));
      return Value::string(s);
    });
  if (name == "partition" || name == "rpartition")
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {"sep"});
      const std::string sep = require_string(a.get(0), func);
      if (sep.empty()) throw Error("empty separator");
      const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
      std::vector<Value> parts;
      if (hit == std::string::npos) {
        parts = name == "partition" ? std::vector<Value>{Value::string(s), Value::string(""), Value::string("")}
                                    : std::vector<Value>{Value::string(""), Value::string(""), Value::string(s)};
      } else {
        parts = {Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))};
      }
      return Value::list(std::move(parts), true);
    });
  if (one_of(name, {"center", "ljust", "rjust"}))
    return bound(obj, name, [s, func, name](const CallArgs& args) {
      return Value::string(pad(s, args, func, name == "center" ? 0 : name == "ljust" ? -1 : 1));
    });
  if (name == "zfill")
    return bound(obj, name, [s, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"width"});
      const int64_t width = a.int_or(0, 0), n = static_cast<int64_t>(codepoint_count(s));
      if (width <= n) return Value::string(s);
      check_string_size(static_cast<double>(width));
      const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
      const std::string zeros(static_cast<size_t>(width - n), '0');
      return Value::string(sign ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
    });
  if (one_of(name, kStrOther)) return unsupported(obj, name);
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& obj, const std::string& name) {
  const std::string func = "dict." + name;
  if (name == "get")
    return bound(obj, name, [obj, func](const CallArgs& args) {
      const BoundArgs a(args, func, {"key", "default"});
      const Value& key = a.get(0);
      if (key.is_string())
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return a.get_or(1, Value::none());
    });
  if (name == "items" || name == "keys" || name == "values")
    return bound(obj, name, [obj, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {});
      std::vector<Value> out;
      for (const auto& [k, v] : obj.as_dict().items) {
        if (name == "items")
          out.push_back(Value::list({Value::string(k), v}, true));
        else
          out.push_back(name == "keys" ? Value::string(k) : v);
      }
      return Value::list(std::move(out));
    });
  if (name == "copy")
    return bound(obj, name, [obj, func](const CallArgs& args) {
      const BoundArgs a(args, func, {});
      return Value::dict(obj.as_dict());
    });
  if (one_of(name, kDictUnsafe)) return unsafe(obj, name);
  if (name == "fromkeys") return unsupported(obj, name);
  return std::nullopt;
}

std::optional<Value> list_method(const Value& obj, const std::string& name) {
  const std::string func = "list." + name;
  if (name == "count" || name == "index")
    return bound(obj, name, [obj, func, name](const CallArgs& args) {
      const BoundArgs a(args, func, {"value"});
      const auto& items = obj.as_list().items;
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], a.get(0))) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw Error(to_repr(a.get(0)) + " is not in list");
      return Value::integer(n);
    });
  if (name == "copy" && !obj.as_list().is_tuple)
    return bound(obj, name, [obj, func](const CallArgs& args) {
      const BoundArgs a(args, func, {});
      return Value::list(obj.as_list().items);
    });
  if (!obj.as_list().is_tuple && one_of(name, kListUnsafe)) return unsafe(obj, name);
  return std::nullopt;
}

}  // namespace

std::optional<Value> python_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      return string_method(obj, name);
    case Value::Kind::kDict:
      return dict_method(obj, name);
    case Value::Kind::kList:
      return list_method(obj, name);
    default:
      return std::nullopt;
  }
}

}  // namespace kvscope::jinja
