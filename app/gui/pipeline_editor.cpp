#include "pipeline_editor.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <imgui.h>

#include "ui_util.h"

namespace kvscope::gui {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

double parse_double(const std::string& key, const std::string& text) {
  const char* b = text.c_str();
  char* e = nullptr;
  const double v = std::strtod(b, &e);
  if (text.empty() || e != b + text.size() || !std::isfinite(v))
    throw std::invalid_argument("parameter '" + key + "': '" + text + "' is not a number");
  return v;
}

const ParamInfo* find_param(const PolicyInfo& p, const std::string& key) {
  for (const auto& q : p.params)
    if (q.key == key) return &q;
  return nullptr;
}

std::string range_text(const ParamInfo& p) {
  if (p.kind == ParamKind::kInt || p.kind == ParamKind::kFloat)
    return "range [" + format_double(p.min) + ", " + format_double(p.max) + "], default " + p.default_value;
  if (p.kind == ParamKind::kChoice) {
    std::string c;
    for (const auto& s : p.choices) c += (c.empty() ? "" : " | ") + s;
    return "one of " + c + ", default " + p.default_value;
  }
  return "default " + (p.default_value.empty() ? std::string("(empty)") : p.default_value);
}

}  // namespace

const PolicyInfo* PolicyCatalog::find(std::string_view name) const {
  for (const auto& p : policies)
    if (p.name == name) return &p;
  return nullptr;
}

const PresetInfo* PolicyCatalog::find_preset(std::string_view name) const {
  for (const auto& p : presets)
    if (p.name == name) return &p;
  return nullptr;
}

std::string stage_name(int stage) {
  static const char* names[] = {"head_pattern", "scoring",     "budget",      "retention",
                                "channel",      "decode_selection", "maintenance", "multi_turn"};
  return stage >= 0 && stage < 8 ? names[stage] : "stage" + std::to_string(stage);
}

std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void set_param_text(ParamEdit& p, const ParamInfo& info, const std::string& text) {
  p.key = info.key;
  p.kind = info.kind;
  switch (info.kind) {
    case ParamKind::kInt: {
      const double v = parse_double(info.key, text);
      if (v != std::floor(v)) throw std::invalid_argument("parameter '" + info.key + "': '" + text + "' is not an integer");
      p.i = static_cast<std::int64_t>(v);
      break;
    }
    case ParamKind::kFloat: p.f = parse_double(info.key, text); break;
    case ParamKind::kBool:
      if (text == "true" || text == "1") p.b = true;
      else if (text == "false" || text == "0") p.b = false;
      else throw std::invalid_argument("parameter '" + info.key + "': '" + text + "' is not true or false");
      break;
    case ParamKind::kChoice: {
      auto it = std::find(info.choices.begin(), info.choices.end(), text);
      if (it == info.choices.end()) throw std::invalid_argument("parameter '" + info.key + "': '" + text + "' is not a choice");
      p.choice = static_cast<int>(it - info.choices.begin());
      break;
    }
    case ParamKind::kPath: p.text = text; break;
  }
}

std::string param_text(const ParamEdit& p, const ParamInfo& info) {
  switch (info.kind) {
    case ParamKind::kInt: return std::to_string(p.i);
    case ParamKind::kFloat: return format_double(p.f);
    case ParamKind::kBool: return p.b ? "true" : "false";
    case ParamKind::kChoice:
      return p.choice >= 0 && p.choice < static_cast<int>(info.choices.size()) ? info.choices[static_cast<std::size_t>(p.choice)]
                                                                               : std::string();
    case ParamKind::kPath: return p.text;
  }
  return {};
}

StageEdit default_stage(const PolicyInfo& policy) {
  StageEdit s;
  s.policy = policy.name;
  for (const auto& info : policy.params) {
    ParamEdit p;
    p.key = info.key;
    p.kind = info.kind;
    if (info.kind == ParamKind::kPath) p.text = info.default_value;
    else if (!(info.kind == ParamKind::kChoice && info.choices.empty())) set_param_text(p, info, info.default_value);
    s.params.push_back(std::move(p));
  }
  return s;
}

std::map<std::string, std::string> to_values(const StageEdit& stage, const PolicyCatalog& catalog) {
  std::map<std::string, std::string> out;
  const PolicyInfo* pol = catalog.find(stage.policy);
  if (!pol) return out;
  for (const auto& p : stage.params)
    if (const ParamInfo* info = find_param(*pol, p.key)) out[p.key] = param_text(p, *info);
  return out;
}

std::string to_spec(const PipelineEdit& edit, const PolicyCatalog& catalog) {
  std::string out;
  for (const auto& s : edit.stages) {
    out += (out.empty() ? "" : "+") + s.policy;
    std::string kv;
    for (const auto& [k, v] : to_values(s, catalog)) kv += (kv.empty() ? ":" : ",") + k + "=" + v;
    out += kv;
  }
  return out;
}

PipelineEdit from_spec(std::string_view spec, const PolicyCatalog& catalog) {
  PipelineEdit edit;
  const std::string text = trim(spec);
  if (text.empty()) return edit;
  for (const std::string& part : split(text, '+')) {
    const std::string stage = trim(part);
    if (stage.empty()) throw std::invalid_argument("pipeline '" + text + "': empty stage");
    const auto colon = stage.find(':');
    const std::string name = trim(stage.substr(0, colon));
    if (const PresetInfo* pr = catalog.find_preset(name)) {
      if (colon != std::string::npos) throw std::invalid_argument("preset '" + name + "' takes no parameters");
      for (auto& s : from_spec(pr->spec, catalog).stages) edit.stages.push_back(std::move(s));
      continue;
    }
    const PolicyInfo* pol = catalog.find(name);
    if (!pol) throw std::invalid_argument("unknown policy '" + name + "'");
    StageEdit s = default_stage(*pol);
    if (colon != std::string::npos) {
      for (const std::string& kvs : split(std::string_view(stage).substr(colon + 1), ',')) {
        const auto eq = kvs.find('=');
        if (eq == std::string::npos) throw std::invalid_argument(name + ": '" + kvs + "' is not key=value");
        const std::string key = trim(kvs.substr(0, eq)), value = trim(kvs.substr(eq + 1));
        const ParamInfo* info = find_param(*pol, key);
        if (!info) throw std::invalid_argument(name + ": unknown parameter '" + key + "'");
        for (auto& p : s.params)
          if (p.key == key) set_param_text(p, *info, value);
      }
    }
    edit.stages.push_back(std::move(s));
  }
  return edit;
}

std::vector<std::string> check(const PipelineEdit& edit, const PolicyCatalog& catalog) {
  std::vector<std::string> problems;
  int last = -1;
  bool scoring = false, decode = false;
  for (const auto& s : edit.stages) {
    const PolicyInfo* pol = catalog.find(s.policy);
    if (!pol) {
      problems.push_back("unknown policy '" + s.policy + "'");
      continue;
    }
    if (pol->stage < last) problems.push_back(s.policy + " (" + pol->stage_name + ") comes after a later stage");
    last = std::max(last, pol->stage);
    scoring |= pol->stage_name == "scoring";
    decode |= pol->stage_name == "decode_selection" || pol->stage_name == "channel";
    for (const auto& p : s.params) {
      const ParamInfo* info = find_param(*pol, p.key);
      if (!info) continue;
      if (info->kind == ParamKind::kInt && (p.i < info->min || p.i > info->max))
        problems.push_back(s.policy + "." + p.key + " = " + std::to_string(p.i) + " is outside [" + format_double(info->min) +
                           ", " + format_double(info->max) + "]");
      if (info->kind == ParamKind::kFloat && (!(p.f >= info->min) || !(p.f <= info->max)))
        problems.push_back(s.policy + "." + p.key + " = " + format_double(p.f) + " is outside [" + format_double(info->min) +
                           ", " + format_double(info->max) + "]");
    }
  }
  if (!edit.stages.empty() && !scoring && !decode)
    problems.push_back("a pipeline needs a scoring stage (or a decode-time stage)");
  return problems;
}

bool draw_pipeline_editor(PipelineEdit& edit, const PolicyCatalog& catalog) {
  bool changed = false;
  ImGui::PushID("pipeline_editor");
  // Presets.
  ImGui::SetNextItemWidth(220);
  if (ImGui::BeginCombo("##preset", "Load preset\xe2\x80\xa6")) {
    for (const auto& p : catalog.presets) {
      if (ImGui::Selectable(p.name.c_str())) {
        try {
          edit = from_spec(p.spec, catalog);
          changed = true;
        } catch (const std::exception&) {
        }
      }
      item_tooltip(p.spec + "\n" + p.budget + "\n" + p.paper_ref);
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  if (ImGui::Button("Clear (full cache)")) {
    edit.stages.clear();
    changed = true;
  }
  int remove = -1, move_up = -1;
  for (std::size_t si = 0; si < edit.stages.size(); ++si) {
    StageEdit& s = edit.stages[si];
    const PolicyInfo* pol = catalog.find(s.policy);
    ImGui::PushID(static_cast<int>(si));
    ImGui::Separator();
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("%zu", si + 1);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(200);
    const std::string label = s.policy + (pol ? "  [" + pol->stage_name + "]" : "");
    if (ImGui::BeginCombo("##policy", label.c_str())) {
      std::string last_stage;
      for (const auto& p : catalog.policies) {
        if (p.stage_name != last_stage) {
          ImGui::TextDisabled("%s", p.stage_name.c_str());
          last_stage = p.stage_name;
        }
        if (ImGui::Selectable(("  " + p.name).c_str(), p.name == s.policy)) {
          s = default_stage(p);
          pol = &p;
          changed = true;
        }
        item_tooltip(p.summary);
      }
      ImGui::EndCombo();
    }
    if (pol) item_tooltip(pol->summary);
    ImGui::SameLine();
    if (ImGui::ArrowButton("##up", ImGuiDir_Up) && si > 0) move_up = static_cast<int>(si);
    ImGui::SameLine();
    if (ImGui::ArrowButton("##down", ImGuiDir_Down) && si + 1 < edit.stages.size()) move_up = static_cast<int>(si + 1);
    ImGui::SameLine();
    if (ImGui::SmallButton("Remove")) remove = static_cast<int>(si);
    if (pol) {
      ImGui::Indent(24);
      for (auto& p : s.params) {
        const ParamInfo* info = find_param(*pol, p.key);
        if (!info) continue;
        ImGui::PushID(p.key.c_str());
        ImGui::SetNextItemWidth(160);
        const char* key = p.key.c_str();
        switch (info->kind) {
          case ParamKind::kInt: {
            const ImS64 lo = static_cast<ImS64>(std::max(info->min, -9.0e18)), hi = static_cast<ImS64>(std::min(info->max, 9.0e18));
            ImS64 v = p.i;
            const ImS64 step = 1, fast = std::max<ImS64>(1, (hi - lo) / 64);
            if (ImGui::InputScalar(key, ImGuiDataType_S64, &v, &step, &fast)) {
              p.i = std::clamp<ImS64>(v, lo, hi);
              changed = true;
            }
            break;
          }
          case ParamKind::kFloat: {
            double v = p.f;
            const double step = (info->max - info->min) <= 2 ? 0.01 : (info->max - info->min) <= 200 ? 0.5 : 10.0;
            if (ImGui::InputDouble(key, &v, step, step * 10, "%.6g")) {
              p.f = std::clamp(v, info->min, info->max);
              changed = true;
            }
            break;
          }
          case ParamKind::kBool:
            if (ImGui::Checkbox(key, &p.b)) changed = true;
            break;
          case ParamKind::kChoice: {
            const char* cur = p.choice >= 0 && p.choice < static_cast<int>(info->choices.size())
                                  ? info->choices[static_cast<std::size_t>(p.choice)].c_str()
                                  : "";
            if (ImGui::BeginCombo(key, cur)) {
              for (std::size_t c = 0; c < info->choices.size(); ++c)
                if (ImGui::Selectable(info->choices[c].c_str(), static_cast<int>(c) == p.choice)) {
                  p.choice = static_cast<int>(c);
                  changed = true;
                }
              ImGui::EndCombo();
            }
            break;
          }
          case ParamKind::kPath:
            ImGui::SetNextItemWidth(320);
            if (input_text(key, p.text)) changed = true;
            break;
        }
        item_tooltip(info->help + "\n" + range_text(*info) + (info->paper_ref.empty() ? "" : "\n" + info->paper_ref));
        if (param_text(p, *info) != info->default_value && info->kind != ParamKind::kPath) {
          ImGui::SameLine();
          if (ImGui::SmallButton("default")) {
            set_param_text(p, *info, info->default_value);
            changed = true;
          }
        }
        ImGui::PopID();
      }
      ImGui::Unindent(24);
    }
    ImGui::PopID();
  }
  if (remove >= 0) {
    edit.stages.erase(edit.stages.begin() + remove);
    changed = true;
  }
  if (move_up > 0) {
    std::swap(edit.stages[static_cast<std::size_t>(move_up)], edit.stages[static_cast<std::size_t>(move_up - 1)]);
    changed = true;
  }
  ImGui::Separator();
  ImGui::SetNextItemWidth(220);
  if (ImGui::BeginCombo("##add", "Add stage\xe2\x80\xa6")) {
    std::string last_stage;
    for (const auto& p : catalog.policies) {
      if (p.stage_name != last_stage) {
        ImGui::TextDisabled("%s", p.stage_name.c_str());
        last_stage = p.stage_name;
      }
      if (ImGui::Selectable(("  " + p.name).c_str())) {
        // Insert in stage order.
        auto at = std::find_if(edit.stages.begin(), edit.stages.end(), [&](const StageEdit& s) {
          const PolicyInfo* q = catalog.find(s.policy);
          return q && q->stage > p.stage;
        });
        edit.stages.insert(at, default_stage(p));
        changed = true;
      }
      item_tooltip(p.summary);
    }
    ImGui::EndCombo();
  }
  for (const auto& problem : check(edit, catalog)) ImGui::TextColored({0.75f, 0.1f, 0.1f, 1}, "%s", problem.c_str());
  ImGui::PopID();
  return changed;
}

}  // namespace kvscope::gui
