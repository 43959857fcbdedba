// Python's json.dumps for Jinja values.
#include "jinja/json_dumps.h"

#include <algorithm>
#include <cstdio>

#include "jinja/error.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

void append_u_escape(std::string& out, unsigned code) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", code & 0xFFFFu);
  out += buf;
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const unsigned v = static_cast<unsigned>(c) - 0x10000;
        append_u_escape(out, 0xD800 | (v >> 10));
        append_u_escape(out, 0xDC00 | (v & 0x3FF));
      } else {
        append_u_escape(out, static_cast<unsigned>(c));
      }
    } else {
      append_utf8(out, c);
    }
  }
  out += '"';
}

std::string float_text(double d) {
  if (d != d) return "NaN";
  if (d == 1.0 / 0.0) return "Infinity";
  if (d == -1.0 / 0.0) return "-Infinity";
  return py_float_repr(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : o_(options) {}

  void dump(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out += float_text(v.as_double());
        return;
      case Value::Kind::kString:
        append_json_string(out, v.as_string(), o_.ensure_ascii);
        return;
      case Value::Kind::kList:
        dump_list(v.as_list(), level);
        return;
      case Value::Kind::kDict:
        dump_dict(v.as_dict(), level);
        return;
      default:
        throw Error("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

  std::string out;

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  void dump_list(const ListData& l, int level) {
    if (l.items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += o_.item_separator;
      newline(level + 1);
      dump(l.items[i], level + 1);
    }
    newline(level);
    out += ']';
  }

  void dump_dict(const DictData& d, int level) {
    if (d.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (o_.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o_.item_separator;
      newline(level + 1);
      append_json_string(out, items[i]->first, o_.ensure_ascii);
      out += o_.key_separator;
      dump(items[i]->second, level + 1);
    }
    newline(level);
    out += '}';
  }

  const JsonDumpOptions& o_;
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace kvscope::jinja
