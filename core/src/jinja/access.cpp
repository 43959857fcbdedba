// Attributes, items, slices, iteration and len() with Jinja's sandboxed semantics.
#include "jinja/access.h"

#include "jinja/error.h"
#include "jinja/methods.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  std::string message = "'";
  message.append(object_name(obj)).append("' has no attribute '").append(name).append("'");
  return Value::undefined(std::move(message));
}

Value missing_element(const Value& obj, const Value& key) {
  std::string message = "'";
  message.append(object_name(obj)).append("' has no element ").append(to_repr(key));
  return Value::undefined(std::move(message));
}

/// Python's index normalisation: nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
  return static_cast<size_t>(i);
}

/// The item lookup alone (no attribute fallback); nullopt when there is none.
std::optional<Value> lookup_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kList:
      if (key.is_integral()) {
        const auto& items = obj.as_list().items;
        if (auto i = normalize_index(key.as_int(), items.size())) return items[*i];
      }
      return std::nullopt;
    case Value::Kind::kString:
      if (key.is_integral()) {
        const std::u32string cps = decode_utf8(obj.as_string());
        if (auto i = normalize_index(key.as_int(), cps.size())) return Value::string(encode_utf8(cps.substr(*i, 1)));
      }
      return std::nullopt;
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

[[noreturn]] void fail_undefined(const Value& obj) { throw Error(obj.undefined_message()); }

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.kind() == Value::Kind::kNamespace) {
    if (const Value* v = obj.as_namespace().find(name)) return *v;
    return missing_attribute(obj, name);
  }
  if (auto method = python_method(obj, name)) return *method;
  if (auto item = lookup_item(obj, Value::string(name))) return *item;
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (auto item = lookup_item(obj, key)) return *item;
  if (key.is_string()) {
    if (obj.kind() == Value::Kind::kNamespace) {
      if (const Value* v = obj.as_namespace().find(key.as_string())) return *v;
    }
    if (auto method = python_method(obj, key.as_string())) return *method;
    return missing_attribute(obj, key.as_string());
  }
  return missing_element(obj, key);
}

Value get_slice(const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  const auto bound = [](const std::optional<Value>& v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_integral())
      throw Error("slice indices must be integers or None or have an __index__ method (got " + type_name(*v) + ")");
    return v->as_int();
  };
  const std::optional<int64_t> b = bound(start), e = bound(stop), s = bound(step);
  const int64_t st = s.value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  const auto pick = [&](int64_t n) {
    // Python's PySlice_AdjustIndices.
    int64_t lo, hi;
    if (st > 0) {
      lo = b ? *b : 0;
      hi = e ? *e : n;
      if (lo < 0) lo = std::max<int64_t>(lo + n, 0);
      if (lo > n) lo = n;
      if (hi < 0) hi = std::max<int64_t>(hi + n, 0);
      if (hi > n) hi = n;
    } else {
      lo = b ? *b : n - 1;
      hi = e ? *e : -1;
      if (b) {
        if (lo < 0) lo = std::max<int64_t>(lo + n, -1);
        if (lo >= n) lo = n - 1;
      }
      if (e) {
        if (hi < 0) hi = std::max<int64_t>(hi + n, -1);
        if (hi >= n) hi = n - 1;
      }
    }
    std::vector<size_t> idx;
    // Steps past the end stop the walk (no overflow for huge steps).
    if (st > 0) {
      for (int64_t i = lo; i < hi; i += st) {
        idx.push_back(static_cast<size_t>(i));
        if (st >= hi - i) break;
      }
    } else {
      for (int64_t i = lo; i > hi; i += st) {
        idx.push_back(static_cast<size_t>(i));
        if (st <= hi - i) break;
      }
    }
    return idx;
  };
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (size_t i : pick(static_cast<int64_t>(items.size()))) out.push_back(items[i]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  if (obj.is_string()) {
    const std::u32string cps = decode_utf8(obj.as_string());
    std::u32string out;
    for (size_t i : pick(static_cast<int64_t>(cps.size()))) out += cps[i];
    return Value::string(encode_utf8(out));
  }
  throw Error("'" + type_name(obj) + "' object is not subscriptable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_dict().items) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : decode_utf8(v.as_string())) chars.push_back(Value::string(encode_utf8(std::u32string(1, c))));
      return chars;
    }
    default:
      throw Error("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(codepoint_count(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    default:
      throw Error("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace kvscope::jinja
