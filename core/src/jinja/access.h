#pragma once
// Reading from values as Jinja's sandboxed environment does: attributes, items, slices,
// iteration and len() (jinja/ internal).
#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace kvscope::jinja {

/// `obj.name`: a Python attribute (a method of str/list/dict, a namespace attribute) first, then
/// the item obj["name"]; undefined when neither exists. Throws Error when obj is undefined.
Value get_attr(const Value& obj, const std::string& name);
/// `obj[key]`: the item first (list/str index, negative from the end; dict key), then for a
/// string key the attribute; undefined when neither exists. Throws Error when obj is undefined.
Value get_item(const Value& obj, const Value& key);
/// `obj[start:stop:step]` on a str, list or tuple with Python's slice rules (nullopt: omitted).
/// Throws Error for other types or a zero step.
Value get_slice(const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step);
/// The items a for loop visits: a list's items, a dict's keys, a string's characters, nothing for
/// undefined. Throws Error("'int' object is not iterable") otherwise.
std::vector<Value> iterate(const Value& v);
/// len(v) (undefined: 0). Throws Error("object of type 'int' has no len()") otherwise.
int64_t length_of(const Value& v);

}  // namespace kvscope::jinja
