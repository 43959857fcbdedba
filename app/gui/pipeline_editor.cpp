#include "pipeline_editor.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <imgui.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/pipeline_spec.h"
#include "kvscope/core/presets.h"
#include "ui_util.h"

namespace kvscope::gui {
namespace {

const ParamSpec* find_param(const PolicyDescription& p, const std::string& key) {
  for (const auto& q : p.params)
    if (q.key == key) return &q;
  return nullptr;
}

std::string range_text(const ParamSpec& p) {
  if (p.type == ParamType::kBool || p.type == ParamType::kPath)
    return "default " + (p.default_value.empty() ? std::string("(empty)") : p.default_value);
  return (p.type == ParamType::kChoice ? "one of " : "range ") + param_range_text(p) + ", default " + p.default_value;
}

/// The stage's label in the editor's lists: "S1 scoring".
std::string stage_label(Stage s) { return std::string(stage_info(s).label); }

}  // namespace

void set_param_text(ParamEdit& p, const std::string& policy, const ParamSpec& info, const std::string& text) {
  check_param(policy, info, text);
  p.key = info.key;
  p.type = info.type;
  switch (info.type) {
    case ParamType::kInt:
      p.i = param_int({{info.key, text}}, info.key);
      break;
    case ParamType::kFloat:
      p.f = param_float({{info.key, text}}, info.key);
      break;
    case ParamType::kBool:
      p.b = param_bool({{info.key, text}}, info.key);
      break;
    case ParamType::kChoice:
      p.choice = static_cast<int>(std::find(info.choices.begin(), info.choices.end(), text) - info.choices.begin());
      break;
    case ParamType::kPath:
      p.text = text;
      break;
  }
}

std::string param_text(const ParamEdit& p, const ParamSpec& info) {
  switch (info.type) {
    case ParamType::kInt:
      return std::to_string(p.i);
    case ParamType::kFloat:
      return format_number(p.f);
    case ParamType::kBool:
      return p.b ? "true" : "false";
    case ParamType::kChoice:
      return p.choice >= 0 && p.choice < static_cast<int>(info.choices.size())
                 ? info.choices[static_cast<std::size_t>(p.choice)]
                 : std::string();
    case ParamType::kPath:
      return p.text;
  }
  return {};
}

StageEdit default_stage(const PolicyDescription& policy) {
  StageEdit s;
  s.policy = policy.name;
  for (const auto& info : policy.params) {
    ParamEdit p;
    p.key = info.key;
    p.type = info.type;
    if (info.type == ParamType::kPath)
      p.text = info.default_value;
    else if (!(info.type == ParamType::kChoice && info.choices.empty()))
      set_param_text(p, policy.name, info, info.default_value);
    s.params.push_back(std::move(p));
  }
  return s;
}

std::map<std::string, std::string> to_values(const StageEdit& stage, const PolicyCatalog& catalog) {
  std::map<std::string, std::string> out;
  const PolicyDescription* pol = catalog.find(stage.policy);
  if (!pol) return out;
  for (const auto& p : stage.params)
    if (const ParamSpec* info = find_param(*pol, p.key)) out[p.key] = param_text(p, *info);
  return out;
}

std::string to_spec(const PipelineEdit& edit, const PolicyCatalog& catalog) {
  std::vector<StageSpec> stages;
  for (const auto& s : edit.stages) stages.push_back({s.policy, to_values(s, catalog)});
  return write_pipeline_spec(stages);
}

PipelineEdit from_spec(std::string_view spec, const PolicyCatalog& catalog) {
  PipelineEdit edit;
  if (spec.find_first_not_of(" \t\r\n") == std::string_view::npos) return edit;  // empty: the full cache
  for (const StageSpec& st : expand_pipeline_presets(spec)) {
    const PolicyDescription& pol = catalog.at(st.policy);
    resolve_params(pol.name, pol.params, st.params);  // unknown keys and bad values, with core's messages
    StageEdit s = default_stage(pol);
    for (auto& p : s.params)
      if (auto it = st.params.find(p.key); it != st.params.end())
        set_param_text(p, pol.name, *find_param(pol, p.key), it->second);
    edit.stages.push_back(std::move(s));
  }
  return edit;
}

std::vector<std::string> check(const PipelineEdit& edit, const PolicyCatalog& catalog) {
  if (edit.stages.empty()) return {};
  std::vector<std::string> problems;
  for (const auto& s : edit.stages) {  // every bad value, not only the first resolve_pipeline meets
    const PolicyDescription* pol = catalog.find(s.policy);
    if (!pol) continue;
    for (const auto& p : s.params)
      if (const ParamSpec* info = find_param(*pol, p.key)) try {
          check_param(pol->name, *info, param_text(p, *info));
        } catch (const InputError& e) {
          problems.push_back(e.what());
        }
  }
  if (problems.empty()) try {
      resolve_pipeline(catalog, to_spec(edit, catalog));
    } catch (const InputError& e) {
      problems.push_back(e.what());
    }
  return problems;
}

bool draw_pipeline_editor(PipelineEdit& edit, const PolicyCatalog& catalog, const Preset** loaded) {
  bool changed = false;
  ImGui::PushID("pipeline_editor");
  // Presets.
  ImGui::SetNextItemWidth(220);
  if (ImGui::BeginCombo("##preset", "Load preset\xe2\x80\xa6")) {
    for (const auto& p : pipeline_presets()) {
      if (ImGui::Selectable(p.name.c_str())) {
        try {
          edit = from_spec(p.spec, catalog);
          changed = true;
          if (loaded) *loaded = &p;
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
    const PolicyDescription* pol = catalog.find(s.policy);
    ImGui::PushID(static_cast<int>(si));
    ImGui::Separator();
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("%zu", si + 1);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(200);
    const std::string label = s.policy + (pol ? "  [" + std::string(stage_key(pol->stage)) + "]" : "");
    if (ImGui::BeginCombo("##policy", label.c_str())) {
      std::string last_stage;
      for (const auto& p : catalog.policies()) {
        if (stage_label(p.stage) != last_stage) {
          last_stage = stage_label(p.stage);
          ImGui::TextDisabled("%s", last_stage.c_str());
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
        const ParamSpec* info = find_param(*pol, p.key);
        if (!info) continue;
        ImGui::PushID(p.key.c_str());
        ImGui::SetNextItemWidth(160);
        const char* key = p.key.c_str();
        switch (info->type) {
          case ParamType::kInt: {
            const ImS64 lo = static_cast<ImS64>(std::max(info->min, -9.0e18)),
                        hi = static_cast<ImS64>(std::min(info->max, 9.0e18));
            ImS64 v = p.i;
            const ImS64 step = 1, fast = std::max<ImS64>(1, (hi - lo) / 64);
            if (ImGui::InputScalar(key, ImGuiDataType_S64, &v, &step, &fast)) {
              p.i = std::clamp<ImS64>(v, lo, hi);
              changed = true;
            }
            break;
          }
          case ParamType::kFloat: {
            double v = p.f;
            const double step = (info->max - info->min) <= 2 ? 0.01 : (info->max - info->min) <= 200 ? 0.5 : 10.0;
            if (ImGui::InputDouble(key, &v, step, step * 10, "%.6g")) {
              p.f = std::clamp(v, info->min, info->max);
              changed = true;
            }
            break;
          }
          case ParamType::kBool:
            if (ImGui::Checkbox(key, &p.b)) changed = true;
            break;
          case ParamType::kChoice: {
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
          case ParamType::kPath:
            ImGui::SetNextItemWidth(320);
            if (input_text(key, p.text)) changed = true;
            break;
        }
        item_tooltip(info->help + "\n" + range_text(*info) + (info->paper_ref.empty() ? "" : "\n" + info->paper_ref));
        if (p.key == "window") {
          // Named for what it is: this stage's window, not the Run view's capture "stats window".
          ImGui::SameLine();
          ImGui::TextDisabled("(%s's observation window, in prompt queries)", s.policy.c_str());
          item_tooltip(info->help + "\nNot the capture's stats window of the Run view (statistics only).");
        }
        if (param_text(p, *info) != info->default_value && info->type != ParamType::kPath) {
          ImGui::SameLine();
          if (ImGui::SmallButton("default")) {
            set_param_text(p, pol->name, *info, info->default_value);
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
    for (const auto& p : catalog.policies()) {
      if (stage_label(p.stage) != last_stage) {
        last_stage = stage_label(p.stage);
        ImGui::TextDisabled("%s", last_stage.c_str());
      }
      if (ImGui::Selectable(("  " + p.name).c_str())) {
        // Insert in stage order.
        auto at = std::find_if(edit.stages.begin(), edit.stages.end(), [&](const StageEdit& s) {
          const PolicyDescription* q = catalog.find(s.policy);
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
