#pragma once
// Values of the Jinja renderer: Python's types as chat templates see them (undefined, None, bool,
// int, float, str, list/tuple, dict in insertion order, namespace, callables) and the Python
// semantics every part of the renderer shares: truth, str(), repr(), ==, type names (jinja/ internal).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope::jinja {

class Value;

/// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

/// A Python list (or tuple: printed with parentheses). Immutable once built, as in Jinja's
/// ImmutableSandboxedEnvironment.
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
};

/// How deep values may nest (lists, dicts, namespaces): deeper ones are refused, so that printing,
/// comparing and freeing them cannot exhaust the stack.
constexpr uint32_t kMaxNesting = 512;
/// The longest string an operator or filter may build (64 MiB: millions of tokens of prompt).
constexpr size_t kMaxStringBytes = size_t{1} << 26;
/// Throws Error("unsupported construct: a string of more than 64 MiB") when `bytes` is past it.
void check_string_size(double bytes);

/// A Python dict with string keys in insertion order (JSON objects; namespace attributes).
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  /// The value under `key`, or nullptr.
  const Value* find(std::string_view key) const;
  /// Replaces the value under `key`, or appends it.
  void set(const std::string& key, Value value);
};

/// A function value: a global (range, namespace, ...), a bound method, a macro, loop.cycle.
struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

/// One Jinja value. Copies are cheap (containers are shared); only namespaces are mutable.
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  /// Undefined, with the message an error shows when it is used ("'x' is undefined").
  Value() : v_(UndefinedData{}) {}
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  /// Containers; throw Error when they would nest deeper than kMaxNesting.
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictData d);
  static Value make_namespace(DictData attrs);
  static Value function(std::string name, std::function<Value(const CallArgs&)> call);
  /// A JSON value as Python's json.load gives it (objects in file order).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  /// int or bool (Python's bool is an int).
  bool is_integral() const { return kind() == Kind::kInt || kind() == Kind::kBool; }
  /// int, bool or float.
  bool is_number() const { return is_integral() || kind() == Kind::kFloat; }

  bool as_bool() const { return std::get<bool>(v_); }
  /// int, or a bool as 0/1.
  int64_t as_int() const;
  /// Any number as a double.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return std::get<std::shared_ptr<const Boxed<ListData>>>(v_)->data; }
  const DictData& as_dict() const { return std::get<std::shared_ptr<const Boxed<DictData>>>(v_)->data; }
  /// A namespace's attributes.
  const DictData& as_namespace() const { return std::get<NamespacePtr>(v_)->attrs; }
  /// `{% set ns.name = value %}` on a namespace. Throws Error for a value that contains this
  /// namespace (a cycle) or nests deeper than kMaxNesting.
  void set_namespace_attribute(const std::string& name, Value value) const;
  /// Nesting depth (0 for scalars, 1 for a flat container) and whether a namespace is inside.
  uint32_t nesting() const;
  bool holds_namespace() const;
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  /// Why this undefined value is undefined ("'x' is undefined").
  std::string undefined_message() const;

  /// Whether two values are the same object (Jinja's `sameas`): identity for containers.
  bool same_object(const Value& other) const;

 private:
  struct UndefinedData {
    std::shared_ptr<const std::string> message;
  };
  struct NamespaceData {
    DictData attrs;
    uint32_t depth = 1;
  };
  /// A list or dict with its nesting, computed once (the contents never change).
  template <typename T>
  struct Boxed {
    T data;
    uint32_t depth = 1;
    bool has_namespace = false;
  };
  bool reaches(const NamespaceData* target) const;
  using NamespacePtr = std::shared_ptr<NamespaceData>;
  std::variant<UndefinedData, std::monostate, bool, int64_t, double, std::string,
               std::shared_ptr<const Boxed<ListData>>, std::shared_ptr<const Boxed<DictData>>, NamespacePtr,
               std::shared_ptr<const Callable>>
      v_;
};

/// Python truth: False, None, 0, 0.0, "", [], {} and undefined are false.
bool truthy(const Value& v);
/// Python str(v) as Jinja prints it: undefined -> "", None -> "None", True, 1.0, ['a', 1], {'k': 'v'}.
std::string to_str(const Value& v);
/// Python repr(v): strings quoted, containers as str() writes them.
std::string to_repr(const Value& v);
/// Python ==: 1 == 1.0 == True, containers element-wise (dicts order-free), undefined == undefined.
bool equals(const Value& a, const Value& b);
/// Python's type name for messages: 'str', 'int', 'list', 'dict', 'NoneType', 'Undefined', ...
std::string type_name(const Value& v);

}  // namespace kvscope::jinja
