// Jinja 3's built-in filters (filters.py) as chat templates use them, and transformers' tojson.
#include "jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "jinja/access.h"
#include "jinja/args.h"
#include "jinja/catalog.h"
#include "jinja/error.h"
#include "jinja/is_tests.h"
#include "jinja/json_dumps.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",     "attr",  "capitalize", "center",      "count",      "d",    "default", "dictsort",   "e",
    "escape",  "first", "float",      "forceescape", "indent",     "int",  "items",   "join",       "last",
    "length",  "list",  "lower",      "map",         "max",        "min",  "reject",  "rejectattr", "replace",
    "reverse", "round", "safe",       "select",      "selectattr", "sort", "string",  "sum",        "title",
    "tojson",  "trim",  "unique",     "upper",       "wordcount"};
constexpr std::string_view kUnsupported[] = {"batch",  "filesizeformat", "format",    "groupby",  "pprint",
                                             "random", "slice",          "striptags", "truncate", "urlencode",
                                             "urlize", "wordwrap",       "xmlattr"};

/// The arguments after the first `skip` positional ones.
CallArgs rest_of(const CallArgs& args, size_t skip) {
  CallArgs rest;
  if (args.positional.size() > skip) rest.positional.assign(args.positional.begin() + skip, args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

/// Jinja's make_attrgetter: "a.b.0" looked up item-first at each part; undefined when missing.
Value attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_integral()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : py_split(to_str(attribute), std::string("."), -1)) {
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
  }
  return v;
}

/// Jinja's ignore_case: strings lower-cased for sorting and comparisons when not case sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

std::vector<Value> sorted(std::vector<Value> items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& v : items) keyed.emplace_back(key(v), std::move(v));
  // Jinja compares keys wrapped in lists: equal keys (None, undefined) never reach `<`.
  const auto less = [](const Value& x, const Value& y) { return !equals(x, y) && compare("<", x, y); };
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [_, v] : keyed) out.push_back(std::move(v));
  return out;
}

std::optional<int64_t> parse_python_int(std::string text, int base) {
  text = py_strip(text, std::nullopt, true, true);
  std::string digits;
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (base == 16 || base == 8 || base == 2 || base == 0) {
    if (i + 1 < text.size() && text[i] == '0') {
      const char p = static_cast<char>(text[i + 1] | 0x20);
      const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed && (base == 0 || base == prefixed)) {
        base = prefixed;
        i += 2;
        if (i < text.size() && text[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  for (; i < text.size(); ++i) {
    if (text[i] == '_' && !digits.empty() && i + 1 < text.size() && text[i + 1] != '_') continue;
    digits += text[i];
  }
  if (digits.empty() || base < 2 || base > 36) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE || digits[0] == '+' || digits[0] == '-' || digits[0] == ' ') return std::nullopt;
  return negative ? -v : v;
}

std::optional<double> parse_python_float(const std::string& raw) {
  std::string text = py_strip(raw, std::nullopt, true, true);
  std::string lowered = py_lower(text);
  std::string body = lowered;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body = body.substr(1);
  const double sign = !lowered.empty() && lowered[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  std::string clean;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '_') {
      if (i == 0 || i + 1 == text.size() || !std::isdigit(static_cast<unsigned char>(text[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(text[i + 1])))
        return std::nullopt;
      continue;
    }
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
    clean += c;
  }
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

/// Python's round(x, ndigits) on a float: correctly rounded, ties to even on the exact value.
double python_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits < -308) return 0.0 * x;
  if (ndigits >= 0) {
    const int n = std::snprintf(nullptr, 0, "%.*f", static_cast<int>(ndigits), x);
    std::string buf(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf.c_str(), nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-ndigits));
  const double y = x / scale;
  double r = std::nearbyint(y);  // default rounding mode: ties to even
  return r * scale;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string do_indent(const std::string& s, const Value& width, bool first, bool blank) {
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    if (!width.is_integral()) throw Error("indent(): width must be an int or a string, not " + type_name(width));
    indention.assign(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1 << 16)), ' ');
  }
  const std::vector<std::string> lines = py_splitlines(s + "\n", false);  // Jinja's "s += newline" quirk
  std::string rv;
  check_string_size(static_cast<double>(indention.size()) * static_cast<double>(lines.size()) +
                    static_cast<double>(s.size()));
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  check_string_size(static_cast<double>(rv.size()));
  if (first) rv = indention + rv;
  return rv;
}

std::string do_title(const std::string& s) {
  // Jinja: words start after runs of [-\s({[<]; each piece's first character upper, the rest lower.
  const auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
  };
  const std::u32string cps = decode_utf8(s);
  std::u32string out;
  size_t i = 0;
  while (i < cps.size()) {
    const bool sep = is_sep(cps[i]);
    size_t j = i;
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    const std::string piece = encode_utf8(cps.substr(i, j - i));
    const std::u32string p = decode_utf8(piece);
    out += decode_utf8(py_upper(encode_utf8(p.substr(0, 1))));
    out += decode_utf8(py_lower(encode_utf8(p.substr(1))));
    i = j;
  }
  return encode_utf8(out);
}

Value do_tojson(const Value& input, const CallArgs& args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  const BoundArgs a(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a.bool_or(0, false);
  o.sort_keys = a.bool_or(3, false);
  const Value indent = a.get_or(1, Value::none());
  if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (indent.is_integral()) {
    o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1 << 16)), ' ');
  } else if (!indent.is_none()) {
    throw Error("tojson(): indent must be an int or a string, not " + type_name(indent));
  }
  if (o.indent) o.item_separator = ",";
  const Value separators = a.get_or(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2 || !separators.as_list().items[0].is_string() ||
        !separators.as_list().items[1].is_string())
      throw Error("tojson(): separators must be a pair of strings");
    o.item_separator = separators.as_list().items[0].as_string();
    o.key_separator = separators.as_list().items[1].as_string();
  }
  return Value::string(json_dumps(input, o));
}

Value select_or_reject(const Value& input, const CallArgs& args, bool select, bool by_attribute) {
  std::vector<Value> out;
  const size_t skip = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty())
    throw Error(std::string(select ? "selectattr" : "rejectattr") + "() missing required argument 'attribute'");
  const bool has_test = args.positional.size() > skip;
  std::string test;
  if (has_test) {
    if (!args.positional[skip].is_string()) throw Error("test name must be a string");
    test = args.positional[skip].as_string();
    if (!is_supported_test(test)) throw Error("no test named '" + test + "'");
  }
  const CallArgs test_args = rest_of(args, skip + 1);
  for (const Value& item : iterate(input)) {
    const Value v = by_attribute ? attribute_of(item, args.positional[0]) : item;
    const bool pass = has_test ? apply_test(test, v, test_args) : truthy(v);
    if (pass == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value do_map(const Value& input, const CallArgs& args) {
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = &v;
    if (k == "default") fallback = &v;
  }
  std::vector<Value> out;
  if (attribute) {
    if (!args.positional.empty()) throw Error("map(): positional arguments with attribute=");
    for (const Value& item : iterate(input)) {
      Value v = attribute_of(item, *attribute);
      if (v.is_undefined() && fallback) v = *fallback;
      out.push_back(std::move(v));
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) throw Error("map requires a filter argument");
  const std::string filter = args.positional[0].as_string();
  if (!is_supported_filter(filter)) {
    if (is_unsupported_jinja_filter(filter)) throw Error("unsupported construct: filter '" + filter + "'");
    throw Error("no filter named '" + filter + "'");
  }
  const CallArgs rest = rest_of(args, 1);
  for (const Value& item : iterate(input)) out.push_back(apply_filter(filter, item, rest));
  return Value::list(std::move(out));
}

Value min_or_max(const Value& input, const CallArgs& args, bool max) {
  const BoundArgs a(args, max ? "max" : "min", {"case_sensitive", "attribute"});
  const bool cs = a.bool_or(0, false);
  const Value attribute = a.get_or(1, Value::none());
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const auto key = [&](const Value& v) { return sort_key(attribute.is_none() ? v : attribute_of(v, attribute), cs); };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i)
    if (compare(max ? ">" : "<", key(items[i]), key(items[best]))) best = i;
  return items[best];
}

}  // namespace

bool is_supported_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_unsupported_jinja_filter(std::string_view name) {
  return std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported);
}

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  const auto text = [&] { return to_str(input); };
  if (name == "trim") {
    const BoundArgs a(args, name, {"chars"});
    return Value::string(py_strip(text(), a.string_or_none(0), true, true));
  }
  if (name == "length" || name == "count") {
    BoundArgs(args, name, {});
    return Value::integer(length_of(input));
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title" || name == "string" ||
      name == "safe" || name == "escape" || name == "e" || name == "forceescape" || name == "wordcount") {
    BoundArgs(args, name, {});
    if (name == "lower") return Value::string(py_lower(text()));
    if (name == "upper") return Value::string(py_upper(text()));
    if (name == "capitalize") return Value::string(py_capitalize(text()));
    if (name == "title") return Value::string(do_title(text()));
    if (name == "string" || name == "safe") return input.is_string() ? input : Value::string(text());
    if (name == "wordcount") {
      int64_t n = 0;
      bool in_word = false;
      for (char32_t c : decode_utf8(text())) {
        const bool w = py_is_alpha(c) || py_is_digit(c) || c == '_' || (c >= 0x80 && !is_py_space(c));
        n += w && !in_word;
        in_word = w;
      }
      return Value::integer(n);
    }
    return Value::string(html_escape(text()));
  }
  if (name == "default" || name == "d") {
    const BoundArgs a(args, name, {"default_value", "boolean"});
    const bool use_default = a.bool_or(1, false) ? !truthy(input) : input.is_undefined();
    return use_default ? a.get_or(0, Value::string("")) : input;
  }
  if (name == "join") {
    const BoundArgs a(args, name, {"d", "attribute"});
    const std::string sep = a.has(0) ? to_str(a.get(0)) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first) out += sep;
      first = false;
      out += to_str(a.has(1) && !a.get(1).is_none() ? attribute_of(item, a.get(1)) : item);
      check_string_size(static_cast<double>(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "items") {
    BoundArgs(args, name, {});
    if (input.is_undefined()) return Value::list({});
    if (!input.is_dict()) throw Error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : input.as_dict().items) out.push_back(Value::list({Value::string(k), v}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    const BoundArgs a(args, name, {"case_sensitive", "by", "reverse"});
    if (!input.is_dict()) throw Error("dictsort(): the value must be a mapping, not " + type_name(input));
    const bool cs = a.bool_or(0, false), rev = a.bool_or(2, false);
    const std::string by = a.has(1) ? to_str(a.get(1)) : "key";
    if (by != "key" && by != "value") throw Error("You can only sort by either 'key' or 'value'");
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.as_dict().items) pairs.push_back(Value::list({Value::string(k), v}, true));
    const size_t pos = by == "key" ? 0 : 1;
    return Value::list(sorted(
        std::move(pairs), [&](const Value& p) { return sort_key(p.as_list().items[pos], cs); }, rev));
  }
  if (name == "first" || name == "last") {
    BoundArgs(args, name, {});
    const std::vector<Value> items = iterate(input);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    BoundArgs(args, name, {});
    return Value::list(iterate(input));
  }
  if (name == "reverse") {
    BoundArgs(args, name, {});
    if (input.is_string()) {
      std::u32string cps = decode_utf8(input.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value::string(encode_utf8(cps));
    }
    std::vector<Value> items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    const BoundArgs a(args, name, {"reverse", "case_sensitive", "attribute"});
    const bool rev = a.bool_or(0, false), cs = a.bool_or(1, false);
    const Value attribute = a.get_or(2, Value::none());
    std::vector<std::string> attrs;
    if (!attribute.is_none()) attrs = py_split(to_str(attribute), std::string(","), -1);
    return Value::list(sorted(
        iterate(input),
        [&](const Value& v) {
          if (attrs.empty()) return sort_key(v, cs);
          std::vector<Value> keys;
          for (const auto& at : attrs) keys.push_back(sort_key(attribute_of(v, Value::string(at)), cs));
          return keys.size() == 1 ? keys[0] : Value::list(std::move(keys));
        },
        rev));
  }
  if (name == "unique") {
    const BoundArgs a(args, name, {"case_sensitive", "attribute"});
    const bool cs = a.bool_or(0, false);
    const Value attribute = a.get_or(1, Value::none());
    std::vector<Value> out, seen;
    for (const Value& item : iterate(input)) {
      const Value key = sort_key(attribute.is_none() ? item : attribute_of(item, attribute), cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") return min_or_max(input, args, name == "max");
  if (name == "sum") {
    const BoundArgs a(args, name, {"attribute", "start"});
    Value total = a.get_or(1, Value::integer(0));
    const Value attribute = a.get_or(0, Value::none());
    for (const Value& item : iterate(input))
      total = binary_op("+", total, attribute.is_none() ? item : attribute_of(item, attribute));
    return total;
  }
  if (name == "replace") {
    const BoundArgs a(args, name, {"old", "new", "count"});
    return Value::string(py_replace(text(), to_str(a.get(0)), to_str(a.get(1)), a.int_or(2, -1)));
  }
  if (name == "indent") {
    const BoundArgs a(args, name, {"width", "first", "blank"});
    return Value::string(do_indent(text(), a.get_or(0, Value::integer(4)), a.bool_or(1, false), a.bool_or(2, false)));
  }
  if (name == "center") {
    const BoundArgs a(args, name, {"width"});
    CallArgs pad_args;
    pad_args.positional.push_back(Value::integer(a.int_or(0, 80)));
    return python_method(Value::string(text()), "center")->as_callable().call(pad_args);
  }
  if (name == "tojson") return do_tojson(input, args);
  if (name == "int") {
    const BoundArgs a(args, name, {"default", "base"});
    const Value fallback = a.get_or(0, Value::integer(0));
    if (input.is_integral()) return Value::integer(input.as_int());
    if (input.kind() == Value::Kind::kFloat) {
      const double d = input.as_double();
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(d));
    }
    if (input.is_string()) {
      if (auto v = parse_python_int(input.as_string(), static_cast<int>(a.int_or(1, 10)))) return Value::integer(*v);
      if (auto d = parse_python_float(input.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(*d));
    }
    return fallback;
  }
  if (name == "float") {
    const BoundArgs a(args, name, {"default"});
    if (input.is_number()) return Value::number(input.as_double());
    if (input.is_string())
      if (auto d = parse_python_float(input.as_string())) return Value::number(*d);
    return a.get_or(0, Value::number(0.0));
  }
  if (name == "abs") {
    BoundArgs(args, name, {});
    if (input.is_integral()) return unary_op(input.as_int() < 0 ? "-" : "+", input);
    if (input.kind() == Value::Kind::kFloat) return Value::number(std::fabs(input.as_double()));
    throw Error("bad operand type for abs(): '" + type_name(input) + "'");
  }
  if (name == "round") {
    const BoundArgs a(args, name, {"precision", "method"});
    const int64_t precision = a.int_or(0, 0);
    const std::string method = a.has(1) ? to_str(a.get(1)) : "common";
    if (method != "common" && method != "ceil" && method != "floor")
      throw Error("method must be common, ceil or floor");
    if (!input.is_number()) throw Error("type " + type_name(input) + " doesn't define __round__ method");
    if (method == "common") {
      if (input.is_integral()) return Value::integer(input.as_int());
      return Value::number(python_round(input.as_double(), precision));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double v = input.as_double() * scale;
    return Value::number((method == "ceil" ? std::ceil(v) : std::floor(v)) / scale);
  }
  if (name == "attr") {
    const BoundArgs a(args, name, {"name"});
    if (input.is_undefined()) throw Error(input.undefined_message());
    const std::string attr = to_str(a.get(0));
    if (input.kind() == Value::Kind::kNamespace) {
      if (const Value* v = input.as_namespace().find(attr)) return *v;
    } else if (auto m = python_method(input, attr)) {
      return *m;
    }
    return Value::undefined("'" + type_name(input) + " object' has no attribute '" + attr + "'");
  }
  if (name == "map") return do_map(input, args);
  if (name == "select" || name == "reject") return select_or_reject(input, args, name == "select", false);
  if (name == "selectattr" || name == "rejectattr") return select_or_reject(input, args, name == "selectattr", true);
  throw Error("unsupported construct: filter '" + name + "'");
}

}  // namespace kvscope::jinja
