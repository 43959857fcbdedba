// Run: model, prompt, a pipeline editor generated from the PolicyRegistry's ParamSpec tables,
// budget and unit, device and dtype; Run executes on the worker thread and streams tokens here,
// Cancel stops it between decode steps; the finished run is recorded as a session and opened.

#include <algorithm>
#include <cmath>
#include <functional>
#include <string_view>
#include <vector>

#include "../ui_util.h"
#include "budget_check.h"  // kvscope_run: the check kvscope-cli run makes too
#include "budget_text.h"   // kvscope_run: budgets as the share kept
#include "chat_prompt.h"   // kvscope_run: chat prompts rendered and tokenized as kvscope-cli --chat does
#include "kvscope/core/budget.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/presets.h"
#include "kvscope/core/tokenizer.h"
#include "panels.h"
#include "timeline_figure.h"

namespace kvscope::gui::panels {
namespace {

bool combo(const char* label, std::string& value, const std::vector<std::string_view>& items, float width = 140) {
  bool changed = false;
  ImGui::SetNextItemWidth(width);
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (std::string_view it : items)
      if (ImGui::Selectable(std::string(it).c_str(), value == it)) value = it, changed = true;
    ImGui::EndCombo();
  }
  return changed;
}

/// The form's chat messages: its prompt as one user message, after the system message if one is typed.
nlohmann::ordered_json form_messages(const RunRequest& f) {
  return user_chat_messages(f.prompt, f.system.empty() ? std::nullopt : std::optional(f.system));
}

/// Loads the chat template of the form's tokenizer (the override, else the model) when where it is
/// looked for changed: st.chat_template, or null with st.chat_template_why.
void refresh_chat_template(RunState& st) {
  const RunRequest& f = st.form;
  std::string location;
  try {
    location = run::chat_template_location(f.random_init.empty() ? f.model_path : "", f.tokenizer_path).string();
  } catch (const std::exception&) {
    location.clear();  // no model yet
  }
  const std::string key = "@" + location;
  if (key == st.chat_location) return;
  st.chat_location = key;
  st.chat_template.reset();
  st.chat_template_why.clear();
  st.prompt_key.clear();  // the count depends on the template
  if (location.empty()) {
    st.chat_template_why = "choose a model first";
    return;
  }
  try {
    st.chat_template = std::make_shared<const ChatTemplate>(ChatTemplate::load(location));
  } catch (const std::exception& e) {
    st.chat_template_why = e.what();
  }
}

/// Why the form's later turns cannot run ("" when they can): with the chat box on, refused as
/// kvscope-cli refuses --turn with --chat; an empty turn box (most likely one added and not typed).
std::string turns_blocker(const RunRequest& f) {
  if (f.turns.empty()) return "";
  if (f.chat) return "later turns are not rendered with the chat template: remove them or uncheck \"chat template\"";
  for (std::size_t i = 0; i < f.turns.size(); ++i)
    if (f.turns[i].empty()) return "turn " + std::to_string(i + 2) + " is empty: type it or remove it";
  return "";
}

/// Why the form's prompt (chat prompt or later turns) cannot run ("" when it can).
std::string chat_blocker(const RunState& st) {
  if (std::string why = turns_blocker(st.form); !why.empty()) return why;
  if (!st.form.chat) return "";
  if (!st.chat_template) return "the model's tokenizer has no chat template: uncheck \"chat template\"";
  if (!st.chat_problem.empty()) return "the chat template fails on this prompt: see Prompt below";
  return "";
}

/// A BOS the run adds before the prompt's tokens (auto: most models add one; a chat prompt: none,
/// its template writes it).
bool form_adds_bos(const RunRequest& f) { return !f.chat && f.bos != "never"; }

/// Prompts up to this size are tokenized as they are typed; bigger ones once they stop changing.
constexpr std::size_t kTokenizeAtOnceBytes = 16 << 10;
constexpr double kSettleSeconds = 0.4;

/// Updates st.prompt_tokens for the form's prompt: re-tokenized only when the tokenizer path or
/// the prompt changed (a big prompt only after it settled), so the UI thread does not re-encode
/// every frame.
void count_prompt_tokens(AppState& s) {
  RunState& st = s.run;
  const RunRequest& f = st.form;
  const std::string tok_path = !f.tokenizer_path.empty() ? f.tokenizer_path : f.model_path;
  const std::string key = tok_path + '\n' + std::to_string(f.prompt.size()) + ':' +
                          std::to_string(std::hash<std::string>{}(f.prompt)) +
                          (f.chat ? "\nchat\n" + st.chat_location + '\n' + f.system : std::string());
  if (key == st.prompt_key) return;
  if (f.prompt.size() > kTokenizeAtOnceBytes) {
    const double now = ImGui::GetTime();
    if (key != st.prompt_pending) {
      st.prompt_pending = key;
      st.prompt_pending_since = now;
    }
    st.prompt_tokens = -1;
    st.prompt_tokens_why = "counting when the prompt stops changing";
    if (now - st.prompt_pending_since < kSettleSeconds) return;
  }
  st.prompt_key = key;
  st.prompt_pending.clear();
  st.prompt_tokens = -1;
  st.prompt_tokens_why.clear();
  st.chat_rendered.clear();
  st.chat_problem.clear();
  if (f.chat) {  // the text the run tokenizes: the prompt rendered as kvscope-cli --chat renders it
    if (!st.chat_template) {
      st.prompt_tokens_why = "no chat template";
      return;
    }
    try {
      st.chat_rendered = run::render_chat(*st.chat_template, form_messages(f), true).text;
    } catch (const std::exception& e) {
      st.chat_problem = e.what();
      st.prompt_tokens_why = "the chat template fails on this prompt";
      return;
    }
  }
  if (tok_path.empty()) {
    st.prompt_tokens_why = "choose a model to count them";
    return;
  }
  if (const Tokenizer* tok = s.tokenizers.get(tok_path, &st.prompt_tokens_why)) {
    st.prompt_tokens = static_cast<std::int64_t>(f.chat ? run::chat_prompt_ids(*tok, st.chat_rendered).size()
                                                        : tok->encode(f.prompt).size());
    st.prompt_tokens_why.clear();
  }
}

/// Updates st.turns_tokens for the form's later turns (each encoded as the run encodes it: no BOS),
/// re-tokenized only when the tokenizer path or a turn changed.
void count_turn_tokens(AppState& s) {
  RunState& st = s.run;
  const RunRequest& f = st.form;
  const std::string tok_path = !f.tokenizer_path.empty() ? f.tokenizer_path : f.model_path;
  std::string key = tok_path;
  for (const auto& t : f.turns)
    key += '\n' + std::to_string(t.size()) + ':' + std::to_string(std::hash<std::string>{}(t));
  if (key == st.turns_key) return;
  st.turns_key = key;
  st.turns_tokens.assign(f.turns.size(), -1);
  st.turns_tokens_why.clear();
  if (f.turns.empty()) return;
  if (tok_path.empty()) {
    st.turns_tokens_why = "choose a model to count them";
    return;
  }
  if (const Tokenizer* tok = s.tokenizers.get(tok_path, &st.turns_tokens_why)) {
    for (std::size_t i = 0; i < f.turns.size(); ++i)
      st.turns_tokens[i] = static_cast<std::int64_t>(tok->encode(f.turns[i]).size());
    st.turns_tokens_why.clear();
  }
}

/// Later turns (multi-turn, as kvscope-cli run --turn TEXT ...): one text box per turn ("turn 2",
/// "turn 3", ...) with its token count and a remove button, then "add a turn"; the positions the run
/// needs; with the chat box on, the refusal (Run is disabled with it).
void later_turns(AppState& s) {
  RunState& st = s.run;
  RunRequest& f = st.form;
  count_turn_tokens(s);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Later turns");
  help_marker(
      "A conversation on one cache, as kvscope-cli run --turn TEXT --turn TEXT: after the prompt's generation, "
      "turn 2 (with the last generated token before it) is prefilled onto the same cache, the pipeline compresses "
      "again, and generation continues for up to max new tokens; then turn 3, and so on. The session stores every "
      "turn (the Timeline view shows them).\nNot with the chat template: later turns are not rendered with it.");
  if (f.turns.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("none: the prompt is the only turn");
  }
  std::size_t remove = f.turns.size();
  for (std::size_t i = 0; i < f.turns.size(); ++i) {
    ImGui::PushID(static_cast<int>(i));
    ImGui::AlignTextToFramePadding();
    ImGui::Text("turn %zu", i + 2);
    ImGui::SameLine();
    const std::int64_t n = i < st.turns_tokens.size() ? st.turns_tokens[i] : -1;
    if (n >= 0)
      ImGui::TextDisabled("%lld tokens", static_cast<long long>(n));
    else
      ImGui::TextDisabled("? tokens");
    ImGui::SameLine();
    if (ImGui::SmallButton("remove")) remove = i;
    // As tall as the turn's text, 2 to 6 lines (it scrolls past that).
    const auto lines = std::clamp<std::ptrdiff_t>(std::count(f.turns[i].begin(), f.turns[i].end(), '\n') + 1, 2, 6);
    input_text_multiline(
        "##turn", f.turns[i],
        {-1, static_cast<float>(lines) * ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().FramePadding.y + 2});
    ImGui::PopID();
  }
  if (remove < f.turns.size()) {
    f.turns.erase(f.turns.begin() + static_cast<std::ptrdiff_t>(remove));
    st.turns_key.clear();
  }
  if (ImGui::Button("add a turn")) f.turns.emplace_back();
  if (f.turns.empty()) return;
  ImGui::SameLine();
  // Positions the run needs, as make_request counts them (generate.h positions_needed): the prompt,
  // then per later turn the token before it, the turn and max new tokens again. The model's context
  // is checked when it loads: a run past it fails with the numbers unless "beyond context".
  std::int64_t needed = st.prompt_tokens < 0 ? -1 : st.prompt_tokens + (form_adds_bos(f) ? 1 : 0) + f.max_new_tokens;
  for (std::size_t i = 0; i < f.turns.size() && needed >= 0; ++i)
    needed =
        i < st.turns_tokens.size() && st.turns_tokens[i] >= 0 ? needed + st.turns_tokens[i] + 1 + f.max_new_tokens : -1;
  if (needed >= 0)
    ImGui::TextDisabled("%zu turns: %lld positions with %lld new tokens per turn", f.turns.size() + 1,
                        static_cast<long long>(needed), static_cast<long long>(f.max_new_tokens));
  else
    ImGui::TextDisabled("%zu turns: positions ? (%s)", f.turns.size() + 1,
                        !st.turns_tokens_why.empty() ? st.turns_tokens_why.c_str() : st.prompt_tokens_why.c_str());
  item_tooltip(
      "what the run's cache positions reach: the prompt (with its BOS) and max new tokens, then per later turn the "
      "last generated token, the turn and max new tokens again; the model's context is checked when it loads (a run "
      "past it fails, with the numbers, unless \"beyond context\")");
  if (const std::string why = turns_blocker(f); !why.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored({0.85f, 0.45f, 0.0f, 1}, "%s", why.c_str());
    ImGui::PopTextWrapPos();
  }
}

/// The form's budget in the convention of every list (budget_text.h): the share of the prompt and
/// the entries per KV head it keeps after prefill (st.kept_per_head over the prompt's tokens, as the
/// preflight counted them; unknown while either is), the unit as typed as the detail.
kvscope::run::KeptShare form_kept_share(const RunState& st) {
  kvscope::run::KeptShare k;
  const std::optional<BudgetUnit> unit = find_budget_unit(st.form.budget_unit);
  if (!unit) return k;
  k.unit = *unit;
  k.given = format_budget(*unit, st.form.budget_value);
  k.measured = true;  // what the pipeline will keep, computed as it will (not an estimate)
  const std::int64_t n_prompt = st.prompt_tokens < 0 ? -1 : st.prompt_tokens + (form_adds_bos(st.form) ? 1 : 0);
  if (st.kept_per_head >= 0 && n_prompt > 0) {
    k.per_head = static_cast<double>(st.kept_per_head);
    k.fraction = k.per_head / static_cast<double>(n_prompt);
  }
  return k;
}

/// The prompt's tokens, the entries per KV head the budget keeps after prefill, and
/// run::check_kept_entries (the check `kvscope-cli run` makes): its problem goes to
/// st.budget_problem, shown as a warning, and disables Run.
void preflight(AppState& s, const PolicyCatalog* catalog) {
  RunState& st = s.run;
  const RunRequest& f = st.form;
  count_prompt_tokens(s);
  st.kept_per_head = -1;
  st.budget_problem.clear();
  const bool bos = form_adds_bos(f);  // auto: most models add one (the run itself counts exactly)
  const std::int64_t n_prompt = st.prompt_tokens < 0 ? -1 : st.prompt_tokens + (bos ? 1 : 0);
  if (n_prompt < 0)
    ImGui::TextDisabled("prompt: ? tokens (%s)", st.prompt_tokens_why.c_str());
  else
    ImGui::Text("prompt: %lld tokens%s", static_cast<long long>(n_prompt),
                f.chat            ? " (chat template applied)"
                : f.bos == "auto" ? " (with BOS if the model adds one)"
                                  : (bos ? " (with BOS)" : ""));
  if (!catalog || st.pipeline.stages.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("- full cache: every entry kept");
    return;
  }
  std::vector<StageSpec> stages;
  bool decode_time = false;
  try {
    for (const auto& stage : st.pipeline.stages) {
      stages.push_back({stage.policy, to_values(stage, *catalog)});
      if (const PolicyDescription* pol = catalog->find(stage.policy); pol && stage_info(pol->stage).decode_time)
        decode_time = true;
    }
    if (!pipeline_uses_budget(resolve_pipeline(*catalog, to_spec(st.pipeline, *catalog)))) {
      ImGui::SameLine();
      ImGui::TextDisabled("- the pipeline uses no budget");
      return;
    }
  } catch (const std::exception&) {
    return;  // the editor shows what is wrong with the pipeline
  }
  const std::optional<BudgetUnit> unit = find_budget_unit(f.budget_unit);
  if (!unit || n_prompt < 0) return;
  const BudgetSpec budget{*unit, f.budget_value};
  try {
    budget.validate();
  } catch (const std::exception& e) {
    ImGui::TextColored({0.75f, 0.1f, 0.1f, 1}, "%s", e.what());
    return;
  }
  // A decode-time stage (hsa, rocketkv-mt) derives the eviction budget from the model's shape:
  // the run checks it once the model is loaded.
  if (!decode_time) st.kept_per_head = budget.kept_per_head(n_prompt);
  const run::KeptCheck c = run::check_kept_entries(stages, budget, n_prompt, st.kept_per_head);
  ImGui::SameLine();
  if (st.kept_per_head >= 0) {  // as every list shows budgets: the share kept and entries per KV head
    const kvscope::run::KeptShare k = form_kept_share(st);
    ImGui::Text("- %s", kvscope::run::kept_text(k).c_str());
    item_tooltip(
        "what this budget keeps of this prompt after prefill: its share and the entries per KV head, as "
        "the Sessions list shows runs\n" +
        k.given + ": " + std::string(budget_unit_table()[static_cast<std::size_t>(k.unit)].help));
  } else
    ImGui::TextDisabled("- entries per KV head: set by the decode-time stage when the model loads");
  if (c.always.entries > 0 && c.problem.empty())
    ImGui::TextDisabled("%s %s always keeps %lld (%s)", c.always.policy.c_str(), c.always.param.c_str(),
                        static_cast<long long>(c.always.entries), c.always.what.c_str());
  st.budget_problem = c.problem;
  if (!c.problem.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored({0.85f, 0.45f, 0.0f, 1}, "%s", c.problem.c_str());
    ImGui::PopTextWrapPos();
  }
}

/// The bar at the top of the view, above the scrolling form, so Run and Cancel are always in reach:
/// Run (disabled, with the reason, while the form cannot run) or Cancel with the progress, and where
/// the form was filled from ("Open in Run") with what that run did not record.
void run_bar(AppState& s, Ui& ui, bool busy) {
  RunState& st = s.run;
  RunRequest& f = st.form;
  if (!busy) {
    const bool can = ui.worker != nullptr;
    const std::string chat_problem = chat_blocker(st);
    st.run_problem = !st.spec_error.empty()       ? "fix the pipeline SPEC: see Pipeline below"
                     : !st.budget_problem.empty() ? "raise the budget: see Budget below"
                                                  : chat_problem;
    ImGui::BeginDisabled(!can || !st.budget_problem.empty() || !st.spec_error.empty() || !chat_problem.empty());
    if (ImGui::Button("Run", {120, 0})) {
      RunRequest req = f;
      req.pipeline_spec = ui.catalog ? to_spec(st.pipeline, *ui.catalog) : std::string();
      st.output.clear();
      st.tokens = 0;
      st.live.reset();
      st.log.push_back("run: " + (req.pipeline_spec.empty() ? std::string("full cache") : req.pipeline_spec));
      if (!ui.worker->start(req)) st.log.push_back("a run is already in progress");
    }
    ImGui::EndDisabled();
    ImGui::SameLine();
    if (!can)
      ImGui::TextDisabled("(runs need the desktop app's worker)");
    else if (!st.spec_error.empty())
      ImGui::TextDisabled("(fix the pipeline SPEC: see Pipeline below)");
    else if (!st.budget_problem.empty())
      ImGui::TextDisabled("(raise the budget: see Budget below)");
    else if (!chat_problem.empty())
      ImGui::TextDisabled("(%s)", chat_problem.c_str());
    else {
      // What Run starts: the editor's pipeline and the form's budget, into the form's database.
      std::string what = "full cache";
      if (ui.catalog && !st.pipeline.stages.empty()) {
        what = ellipsize(to_spec(st.pipeline, *ui.catalog), 60);
        const kvscope::run::KeptShare k = form_kept_share(st);
        if (!k.given.empty())
          what += " \xc2\xb7 " + (std::isfinite(k.per_head) ? kvscope::run::budget_label(k) : k.given);
      }
      const std::string turns = f.turns.empty() ? "" : std::to_string(f.turns.size() + 1) + " turns, ";
      ImGui::TextDisabled("%s, %s%lld new tokens%s \xe2\x86\x92 %s", what.c_str(), turns.c_str(),
                          static_cast<long long>(f.max_new_tokens), f.turns.empty() ? "" : " each",
                          f.db_path.empty() ? "(choose a database below)" : ellipsize(f.db_path, 50).c_str());
    }
  } else {
    if (ImGui::Button("Cancel", {120, 0})) ui.worker->cancel();
    ImGui::SameLine();
    // At most max new tokens per turn (a turn that stops on an end token gives fewer).
    const std::int64_t most = f.max_new_tokens * static_cast<std::int64_t>(f.turns.size() + 1);
    ImGui::Text("running: %lld / %lld tokens%s", static_cast<long long>(st.tokens), static_cast<long long>(most),
                f.turns.empty() ? "" : (" (" + std::to_string(f.turns.size() + 1) + " turns)").c_str());
    ImGui::SameLine();
    ImGui::ProgressBar(most > 0 ? std::min(1.0f, static_cast<float>(st.tokens) / static_cast<float>(most)) : 0.0f,
                       {-1, 0});
  }
  if (!st.filled_from.empty()) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextColored({0.0f, 0.35f, 0.6f, 1}, "filled from run %s", st.filled_from.c_str());
    if (!st.fill_notes.empty()) {
      ImGui::SameLine();
      ImGui::TextDisabled("- %zu field%s not recorded by the run (hover)", st.fill_notes.size(),
                          st.fill_notes.size() == 1 ? "" : "s");
      std::string all;
      for (const auto& n : st.fill_notes) all += (all.empty() ? "" : "\n") + n;
      item_tooltip(all);
    }
    ImGui::SameLine();
    if (ImGui::SmallButton("dismiss")) st.filled_from.clear(), st.fill_notes.clear();
  }
}

}  // namespace

void run(AppState& s, Ui& ui) {
  RunState& st = s.run;
  RunRequest& f = st.form;
  const bool busy = ui.worker && ui.worker->busy();
  if (ui.catalog && !st.pipeline_initialised) {
    try {
      st.pipeline = from_spec(st.spec_text.empty() ? "snapkv+adakv" : st.spec_text, *ui.catalog);
    } catch (const std::exception& e) {
      st.spec_error = e.what();
    }
    st.spec_text = to_spec(st.pipeline, *ui.catalog);
    st.pipeline_initialised = true;
  }

  refresh_chat_template(st);
  run_bar(s, ui, busy);
  ImGui::Separator();
  const float left_w = std::max(520.0f, ImGui::GetContentRegionAvail().x * 0.56f);
  ImGui::BeginChild("run_form", {left_w, 0}, false);
  ImGui::BeginDisabled(busy);
  ImGui::TextUnformatted("Model");
  ImGui::SetNextItemWidth(-1);
  if (f.random_init.empty()) {
    input_text_hint("##model", "Hugging Face directory or llama2.c .bin", f.model_path);
  } else {  // from a --start-run request: random weights of a config's shape, a tokenizer for the prompt
    ImGui::TextWrapped("random weights of %s (tokenizer %s)", f.random_init.c_str(), f.tokenizer_path.c_str());
    if (ImGui::SmallButton("use a model directory instead")) f.random_init.clear();
  }
  ImGui::SetNextItemWidth(200);
  combo("device", f.device, {"cpu", "cuda", "cuda:1"}, 100);
  ImGui::SameLine();
  combo("dtype", f.dtype, {"fp32", "bf16", "fp16"}, 90);
  ImGui::SameLine();
  ImGui::BeginDisabled(f.chat);
  combo("BOS", f.bos, {"auto", "always", "never"}, 90);
  ImGui::EndDisabled();
  if (f.chat && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("A chat prompt's BOS is where its template writes it: none is added");

  ImGui::Spacing();
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Prompt");
  ImGui::SameLine();
  // Off and disabled where the tokenizer has no template (left enabled while on, to turn it off).
  ImGui::BeginDisabled(!st.chat_template && !f.chat);
  ImGui::Checkbox("chat template", &f.chat);
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    if (st.chat_template)
      ImGui::SetTooltip(
          "The prompt as one user message (after the system message, if any), rendered with the model's chat "
          "template and its generation prompt, as kvscope-cli --chat.\nTemplate: %s",
          st.chat_template->source().c_str());
    else
      ImGui::SetTooltip("The model's tokenizer has no chat template:\n%s", st.chat_template_why.c_str());
  }
  if (f.chat) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(-1);
    input_text_hint("##system", "system message (optional)", f.system);
    if (!st.chat_template)
      ImGui::TextColored({0.85f, 0.45f, 0.0f, 1}, "no chat template: %s", st.chat_template_why.c_str());
    else if (!st.chat_problem.empty()) {
      ImGui::PushTextWrapPos(0);
      ImGui::TextColored({0.75f, 0.1f, 0.1f, 1}, "%s", st.chat_problem.c_str());
      ImGui::PopTextWrapPos();
    }
  }
  input_text_multiline("##prompt", f.prompt, {-1, 110});
  later_turns(s);
  static_assert(sizeof(std::int64_t) == sizeof(ImS64));
  ImGui::SetNextItemWidth(140);
  ImGui::InputScalar("max new tokens", ImGuiDataType_S64, &f.max_new_tokens);
  f.max_new_tokens = std::clamp<std::int64_t>(f.max_new_tokens, 0, 1 << 20);
  ImGui::SameLine();
  ImGui::Checkbox("greedy", &f.greedy);
  ImGui::SameLine();
  ImGui::Checkbox("beyond context", &f.allow_beyond_context);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Run even when prompt + max new tokens (and later turns, each with max new tokens) exceed the model's "
        "context\n(refused otherwise; recorded in the session as beyond_context_tokens)");
  if (!f.greedy) {
    ImGui::SetNextItemWidth(90);
    ImGui::InputDouble("temperature", &f.temperature, 0, 0, "%.2f");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(90);
    ImGui::InputDouble("top-p", &f.top_p, 0, 0, "%.2f");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(90);
    ImGui::InputScalar("seed", ImGuiDataType_U64, &f.seed);
  }

  ImGui::Spacing();
  ImGui::TextUnformatted("Pipeline");
  help_marker(
      "Stages in order (S0 head pattern, S1 scoring, S2 layer and head budgets, S4 channel, S5 decode-time selection, "
      "S7 multi-turn).\n"
      "Every parameter comes from the policy's ParamSpec: range, default, help and paper section on hover.");
  if (ui.catalog) {
    const Preset* preset = nullptr;
    if (draw_pipeline_editor(st.pipeline, *ui.catalog, &preset)) {
      st.spec_text = to_spec(st.pipeline, *ui.catalog);
      st.spec_error.clear();
    }
    if (preset) load_preset_budget(f, *preset);
    ImGui::SetNextItemWidth(-70);
    const bool enter = input_text("##spec", st.spec_text, ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::SameLine();
    if (ImGui::Button("Apply") || enter) {
      try {
        st.pipeline = from_spec(st.spec_text, *ui.catalog);
        st.spec_text = to_spec(st.pipeline, *ui.catalog);
        st.spec_error.clear();
      } catch (const std::exception& e) {
        st.spec_error = e.what();
      }
    }
    if (!st.spec_error.empty()) ImGui::TextColored({0.75f, 0.1f, 0.1f, 1}, "%s", st.spec_error.c_str());
  } else {
    ImGui::TextDisabled("(no policy registry in this mode)");
  }
  ImGui::Spacing();
  ImGui::TextUnformatted("Budget");
  std::vector<std::string_view> units;
  std::string unit_help;
  for (const auto& u : budget_unit_table()) {
    units.push_back(u.name);
    unit_help += std::string(u.name) + ": " + std::string(u.help) + "\n";
  }
  combo("unit", f.budget_unit, units, 150);
  help_marker(unit_help +
              "A pipeline that uses no budget (a head pattern) ignores it. docs/methods.md \xc2\xa7"
              "6.4.");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  ImGui::InputDouble("value", &f.budget_value, 0, 0, "%g");
  preflight(s, ui.catalog);
  ImGui::Checkbox("fidelity vs full cache", &f.reference_full);
  ImGui::SameLine();
  combo("capture", f.capture, {"full", "summary", "off"}, 100);
  item_tooltip(
      "what the run records per head: summary = per-head statistics and the timeline (cheap; a GPU decode keeps its "
      "CUDA graph), full = also window attention, key geometry, channel statistics and the exact top-k, off = "
      "nothing");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(70);
  ImGui::InputScalar("stats window", ImGuiDataType_S64, &f.capture_window);
  f.capture_window = std::clamp<std::int64_t>(f.capture_window, 1, 4096);
  help_marker(
      "Capture's statistics window: the captured per-head statistics (attention entropy, mass, the window "
      "attention of the Attention and Tokens views) average the attention of the last N prompt queries.\n"
      "Not the pipeline's own \"window\" (e.g. snapkv's observation window: the last queries that vote, whose "
      "entries are always kept), which is a parameter of its stage above. Runs do not record this one.");
  ImGui::Spacing();
  ImGui::TextUnformatted("Record into");
  ImGui::SetNextItemWidth(-200);
  input_text_hint("##db", "sessions.db", f.db_path);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  input_text_hint("##name", "run name", f.name);
  ImGui::EndDisabled();
  ImGui::EndChild();

  ImGui::SameLine();
  ImGui::BeginChild("run_output", {0, 0}, true);
  ImGui::TextUnformatted("Output");
  ImGui::Separator();
  const bool live = st.live && st.live->timeline;
  ImGui::BeginChild("stream", {0, ImGui::GetContentRegionAvail().y * (live ? 0.25f : 0.6f)}, false);
  ImGui::PushTextWrapPos(0);
  // The prompt as the run tokenizes it: a chat prompt as its template renders it.
  ImGui::TextDisabled("%s", ellipsize(f.chat && !st.chat_rendered.empty() ? st.chat_rendered : f.prompt, 2000).c_str());
  ImGui::TextUnformatted(st.output.c_str());
  ImGui::PopTextWrapPos();
  if (busy) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
  if (live) {
    // The run so far: the selected head's timeline (or every head), refreshed with each snapshot.
    const LiveRun& l = *st.live;
    ImGui::Separator();
    ImGui::Text("live: step %lld, %.1f tok/s%s, KV cache %s", static_cast<long long>(l.decode_steps),
                l.decode_tokens_per_s, l.decode_graph ? " (CUDA graph)" : "",
                format_bytes(static_cast<double>(l.cache_bytes_live)).c_str());
    ImGui::SameLine();
    ImGui::Checkbox("every head##live", &s.timeline.opt.grid);
    const ImVec2 size{ImGui::GetContentRegionAvail().x, ImGui::GetContentRegionAvail().y * 0.7f};
    const std::string key =
        "live|" + std::to_string(l.decode_steps) + "|" + std::to_string(l.timeline->n_positions) + "|" +
        (s.timeline.opt.grid ? "grid" : std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head));
    st.live_fig.draw(
        key, size,
        [&] {
          return figures::timeline_figure(*l.timeline, busy ? "run in progress" : "last run", f.pipeline_spec,
                                          s.timeline.opt, s.sel, static_cast<int>(size.x));
        },
        ui.fonts, ui.textures);
  }
  ImGui::Separator();
  ImGui::TextUnformatted("Log");
  ImGui::BeginChild("log", {0, 0}, false);
  for (const auto& l : st.log) ImGui::TextWrapped("%s", l.c_str());
  if (st.last_run >= 0) {
    if (ImGui::SmallButton("open last run")) {
      const int di = open_database(s, st.last_db);
      if (di >= 0) open_run(s, di, st.last_run, false);
    }
  }
  ImGui::EndChild();
  ImGui::EndChild();
}

}  // namespace kvscope::gui::panels
