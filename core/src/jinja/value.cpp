// Jinja values and the Python semantics they share: truth, str(), repr(), ==.
#include "jinja/value.h"

#include <algorithm>
#include <unordered_set>

#include "jinja/error.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

/// 1 + the deepest item, and whether a namespace is among the items (or inside them).
template <typename Range, typename Get>
std::pair<uint32_t, bool> nesting_of(const Range& items, Get get) {
  uint32_t depth = 0;
  bool has_namespace = false;
  for (const auto& item : items) {
    const Value& v = get(item);
    depth = std::max(depth, v.nesting());
    has_namespace = has_namespace || v.holds_namespace();
  }
  if (depth + 1 > kMaxNesting)
    throw Error("unsupported construct: values nested deeper than " + std::to_string(kMaxNesting) + " levels");
  return {depth + 1, has_namespace};
}

}  // namespace

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string message) {
  Value v;
  v.v_ = UndefinedData{std::make_shared<const std::string>(std::move(message))};
  return v;
}

Value Value::none() {
  Value v;
  v.v_ = std::monostate{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.v_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.v_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.v_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.v_ = std::move(s);
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  const auto [depth, has_namespace] = nesting_of(items, [](const Value& x) -> const Value& { return x; });
  Value v;
  v.v_ = std::make_shared<const Boxed<ListData>>(
      Boxed<ListData>{ListData{std::move(items), is_tuple}, depth, has_namespace});
  return v;
}

Value Value::dict(DictData d) {
  const auto [depth, has_namespace] = nesting_of(d.items, [](const auto& kv) -> const Value& { return kv.second; });
  Value v;
  v.v_ = std::make_shared<const Boxed<DictData>>(Boxed<DictData>{std::move(d), depth, has_namespace});
  return v;
}

Value Value::make_namespace(DictData attrs) {
  const uint32_t depth = nesting_of(attrs.items, [](const auto& kv) -> const Value& { return kv.second; }).first;
  Value v;
  v.v_ = std::make_shared<NamespaceData>(NamespaceData{std::move(attrs), depth});
  return v;
}

uint32_t Value::nesting() const {
  switch (kind()) {
    case Kind::kList:
      return std::get<std::shared_ptr<const Boxed<ListData>>>(v_)->depth;
    case Kind::kDict:
      return std::get<std::shared_ptr<const Boxed<DictData>>>(v_)->depth;
    case Kind::kNamespace:
      return std::get<NamespacePtr>(v_)->depth;
    default:
      return 0;
  }
}

bool Value::holds_namespace() const {
  switch (kind()) {
    case Kind::kList:
      return std::get<std::shared_ptr<const Boxed<ListData>>>(v_)->has_namespace;
    case Kind::kDict:
      return std::get<std::shared_ptr<const Boxed<DictData>>>(v_)->has_namespace;
    case Kind::kNamespace:
      return true;
    default:
      return false;
  }
}

bool Value::reaches(const NamespaceData* target) const {
  // Depth-first through the containers that hold namespaces; each namespace visited once.
  std::unordered_set<const void*> seen;
  std::vector<const Value*> todo = {this};
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (!v->holds_namespace()) continue;
    if (v->kind() == Kind::kNamespace) {
      const NamespaceData* ns = std::get<NamespacePtr>(v->v_).get();
      if (ns == target) return true;
      if (!seen.insert(ns).second) continue;
      for (const auto& kv : ns->attrs.items) todo.push_back(&kv.second);
    } else if (v->kind() == Kind::kList) {
      for (const Value& item : v->as_list().items) todo.push_back(&item);
    } else {
      for (const auto& kv : v->as_dict().items) todo.push_back(&kv.second);
    }
  }
  return false;
}

void Value::set_namespace_attribute(const std::string& name, Value value) const {
  NamespaceData* ns = std::get<NamespacePtr>(v_).get();
  if (value.reaches(ns)) throw Error("unsupported construct: a namespace that contains itself");
  const uint32_t depth = std::max(ns->depth, value.nesting() + 1);
  if (depth > kMaxNesting)
    throw Error("unsupported construct: values nested deeper than " + std::to_string(kMaxNesting) + " levels");
  ns->depth = depth;
  ns->attrs.set(name, std::move(value));
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> call) {
  Value v;
  v.v_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(u));
      return number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.set(k, from_json(e));
      return dict(std::move(d));
    }
    default:
      return none();  // binary / discarded: not produced by the JSON parser
  }
}

int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (kind() == Kind::kFloat) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_message() const {
  const auto& m = std::get<UndefinedData>(v_).message;
  return m ? *m : std::string("undefined value");
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
      return &as_list() == &other.as_list();
    case Kind::kDict:
      return &as_dict() == &other.as_dict();
    case Kind::kNamespace:
      return &as_namespace() == &other.as_namespace();
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return as_bool() == other.as_bool();
    default:
      return equals(*this, other);  // small ints and interned strings: Python's `is` agrees in practice
  }
}

void check_string_size(double bytes) {
  if (bytes > static_cast<double>(kMaxStringBytes))
    throw Error("unsupported construct: a string of more than " + std::to_string(kMaxStringBytes >> 20) + " MiB");
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_double() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().items.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

std::string dict_text(const DictData& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    out += py_repr_string(d.items[i].first) + ": " + to_repr(d.items[i].second);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.as_string();
    default:
      return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return py_float_repr(v.as_double());
    case Value::Kind::kString:
      return py_repr_string(v.as_string());
    case Value::Kind::kList: {
      const ListData& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += to_repr(l.items[i]);
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Value::Kind::kDict:
      return dict_text(v.as_dict());
    case Value::Kind::kNamespace:
      return "<Namespace " + dict_text(v.as_namespace()) + ">";
    case Value::Kind::kCallable:
      return "<function " + v.as_callable().name + ">";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      const ListData &x = a.as_list(), &y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case K::kDict: {
      const DictData &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

}  // namespace kvscope::jinja
