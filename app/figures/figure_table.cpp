#include "figure_table.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <variant>

#include "eval_figures.h"
#include "export_figures.h"
#include "figures.h"
#include "head_pattern_figure.h"
#include "timeline_figure.h"

namespace kvscope::figures {
namespace {

// ---- builders -------------------------------------------------------------------------------------

std::string no_data(const FigureInput& in) { return "run " + std::to_string(in.run->ref.run) + " has no "; }

viz::Figure heads(const FigureInput& in) {
  int m = -1;  // "": every metric, one small map each
  if (!in.variant.empty()) {
    const auto& names = heads_metric_names();
    const auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return in.variant == n; });
    if (it == names.end()) throw std::invalid_argument("unknown head metric '" + in.variant + "'");
    m = static_cast<int>(it - names.begin());
    if (in.strict && in.run->metric_index(in.variant) && !in.run->has_summary)
      throw std::invalid_argument(no_data(in) + "'head_summary' data (record it with --capture summary or full)");
  }
  return heads_figure(*in.run, nullptr, {m, Side::kA}, in.sel);
}

viz::Figure tokens(const FigureInput& in) {
  if (!in.variant.empty() && in.variant != "kept" && in.variant != "keep_rate")
    throw std::invalid_argument("unknown tokens colouring '" + in.variant + "' (kept, keep_rate)");
  const TokenColoring c = in.variant == "keep_rate" ? TokenColoring::kKeepRate : TokenColoring::kKeptSelectedHead;
  viz::Figure f = tokens_figure(*in.run, {c}, in.sel);
  if (in.token_texts) std::get<viz::TokenStrip>(f.panels[0]).tokens = in.run->token_text;
  return f;
}

viz::Figure attention(const FigureInput& in) {
  return attention_figure(*in.run, {}, in.sel, in.width > 0 ? in.width : viz::Figure{}.width);
}

viz::Figure mass(const FigureInput& in) { return mass_figure(*in.run, in.sel.layer); }

viz::Figure topk_cdf(const FigureInput& in) {
  if (in.strict && in.run->topk_unique.empty())
    throw std::invalid_argument(no_data(in) + "top-k record (record it with --capture full)");
  return topk_cdf_figure(*in.run);
}

viz::Figure keys(const FigureInput& in) { return keys_figure(*in.run, {}, in.sel); }

viz::Figure channels(const FigureInput& in) { return channels_figure(*in.run, {}, in.sel); }

viz::Figure fidelity(const FigureInput& in) {
  if (in.strict && !in.run->steps.count("kl"))
    throw std::invalid_argument(no_data(in) + "fidelity (record it with --reference full)");
  return fidelity_figure({in.run}, {});
}

viz::Figure budgets(const FigureInput& in) { return budgets_figure(*in.run, nullptr, {}); }

viz::Figure selection(const FigureInput& in) { return selection_figure(*in.run, in.sel); }

viz::Figure compare(const FigureInput& in) {
  if (!in.b) throw std::invalid_argument("the compare figure needs a compare run B");
  return compare_figure(*in.run, *in.b, in.sel);
}

viz::Figure grid(const FigureInput& in) {
  // The CLI's default --metric is the heads one: the grid's default is mean_kl.
  return grid_figure(*in.store, in.variant.empty() || in.variant == "tokens95_frac" ? "mean_kl" : in.variant);
}

viz::Figure accuracy(const FigureInput& in) { return accuracy_figure(eval_points(*in.store), in.store->path()); }
viz::Figure eval_tasks(const FigureInput& in) { return eval_tasks_figure(eval_points(*in.store), in.store->path()); }
viz::Figure eval_depth(const FigureInput& in) { return eval_depth_figure(eval_points(*in.store), in.store->path()); }

viz::Figure head_pattern(const FigureInput& in) {
  const RunData& r = *in.run;
  const std::string file = head_pattern_file(r);
  if (file.empty())
    throw std::invalid_argument(no_data(in) + "head pattern: its pipeline '" + r.record.row.pipeline_spec +
                                "' has no 'heads' stage (record one with --pipeline heads:pattern=FILE)");
  const std::filesystem::path path(resolve_head_pattern_file(r, file));
  // A kvscope pattern file carries what learning it measured; a DuoAttention one only its gates,
  // binarized as the run ran them.
  viz::Figure f = is_duo_pattern_path(path) ? head_pattern_figure(run_head_pattern(r).pattern, {r.n_tok, -1, {}})
                                            : head_pattern_figure(path);
  f.caption = "pattern " + file + "; run: " + r.caption() + ". " + f.caption;
  return f;
}

viz::Figure timeline(const FigureInput& in) {
  // No --layer/--head (sel.layer < 0): the layer x KV head grid.
  return timeline_figure(*in.run, {}, in.sel, in.width > 0 ? in.width : viz::Figure{}.width);
}

// ---- "export all" variants ------------------------------------------------------------------------

std::vector<std::string> heads_variants() {
  std::vector<std::string> v{""};  // every metric, then one file per metric
  for (const char* m : heads_metric_names()) v.emplace_back(m);
  return v;
}

std::vector<std::string> tokens_variants() { return {"kept", "keep_rate"}; }

// ---- the table ------------------------------------------------------------------------------------

using enum FigureScope;
using enum Recording;

constexpr FigureEntry kFigures[] = {
    {.name = "heads",
     .build = heads,
     .about = "one per-head statistic over layers x KV heads (--metric; \"\": every statistic, one small map each)",
     .metric = "a per-head statistic (entropy, tokens95_frac, sink_share, ...)",
     .all = heads_variants},
    {.name = "tokens",
     .build = tokens,
     .needs = {Part::kKept},
     .scope = kHead,
     .about = "kept/evicted strip of the prompt tokens of one KV head",
     .all = tokens_variants,
     .strip = true},
    {.name = "attention",
     .build = attention,
     .needs = {Part::kAttention},
     .uses = {Part::kKept, Part::kScore},
     .scope = kHead,
     .recording = kFullCapture,
     .about = "the decisive score (what the budget ranked; else window attention) of the layer's KV heads over the "
              "prompt, the selected head's with its cutoff, always-kept regions and kept tokens",
     .all = one_variant},
    {.name = "mass",
     .build = mass,
     .needs = {Part::kAttention},
     .scope = kLayer,
     .recording = kFullCapture,
     .about = "Ada-KV-style cumulative attention mass per KV head of one layer"},
    {.name = "topk-cdf",
     .build = topk_cdf,
     .recording = kFullCapture,
     .about = "RocketKV-style ECDF of the distinct positions Exact-TopK(256) picked over decode steps"},
    {.name = "keys",
     .build = keys,
     .needs = {Part::kCos},
     .uses = {Part::kKept, Part::kAttention, Part::kPca},
     .scope = kHead,
     .recording = kFullCapture,
     .about = "KeyDiff-style key geometry: cosine to the mean key (kept vs evicted), vs attention, 2-D PCA",
     .all = one_variant},
    {.name = "channels",
     .build = channels,
     .needs = {Part::kChannelMean},
     .uses = {Part::kChannelCv},
     .scope = kHead,
     .recording = kFullCapture,
     .about = "SPARK-style channel saliency and CV per channel of one KV head, and over the layer's heads",
     .all = one_variant},
    {.name = "fidelity",
     .build = fidelity,
     .recording = kReference,
     .about = "KL and top-1 agreement with the full cache per decode step, bytes read",
     .all = one_variant},
    {.name = "budgets",
     .build = budgets,
     .about = "kept entries per layer x KV head (a heads:pattern=FILE run: also its pattern's map and windows)",
     .all = one_variant},
    {.name = "selection",
     .build = selection,
     .uses = {Part::kKept},
     .scope = kHead,
     .about = "the selected KV head's percentile among all heads per statistic, and its kept strip",
     .cli = false,
     .all = one_variant},
    {.name = "compare",
     .build = compare,
     .uses = {Part::kKept},
     .scope = kHead,
     .about = "run A against compare run B: kept-set Jaccard per head, metric deltas, kept-set difference",
     .cli = false,
     .all = one_variant,
     .two_runs = true},
    {.name = "grid",
     .build = grid,
     .scope = kDatabase,
     .about = "a sweep's prompt length x budget grid of one run metric (--metric; default mean_kl)",
     .metric = "a run metric (mean_kl, top1_agreement, ...)"},
    {.name = "accuracy",
     .build = accuracy,
     .scope = kDatabase,
     .about = "kvscope-cli eval runs: mean score vs budget, one line per pipeline, the full cache as a reference"},
    {.name = "eval-tasks",
     .build = eval_tasks,
     .scope = kDatabase,
     .about = "kvscope-cli eval runs: mean score per task, one bar per pipeline @ budget and the full cache"},
    {.name = "eval-depth",
     .build = eval_depth,
     .scope = kDatabase,
     .about = "kvscope-cli eval runs: mean score over needle depth x sample length, one map per pipeline @ budget"},
    {.name = "timeline",
     .build = timeline,
     .needs = {Part::kTimeline},
     .recording = kTimeline,
     .about = "kept / selected / evicted per token position and decode step: one KV head with --layer and --head, "
              "else every head",
     .all = one_variant},
    {.name = "head-pattern",
     .build = head_pattern,
     .recording = kHeadsStage,
     .about = "a heads-stage run's pattern file: dense/streaming map, window per layer, training loss"},
};

const char* scope_note(FigureScope s) {
  switch (s) {
    case kDatabase:
      return " [every run of the database]";
    case kRun:
      return "";
    case kLayer:
      return " [--layer]";
    case kHead:
      return " [--layer, --head]";
  }
  return "";
}

const char* recording_note(Recording r) {
  switch (r) {
    case kSummary:
      return "";
    case kFullCapture:
      return " (needs --capture full)";
    case kReference:
      return " (needs --reference full)";
    case kHeadsStage:
      return " (needs a heads:pattern=FILE pipeline)";
    case kTimeline:
      return " (needs --capture summary or full)";
  }
  return "";
}

}  // namespace

std::vector<Part> PartSet::parts() const {
  std::vector<Part> out;
  for (int i = 0; i < kPartCount; ++i)
    if (contains(static_cast<Part>(i))) out.push_back(static_cast<Part>(i));
  return out;
}

std::vector<std::string> one_variant() { return {""}; }

std::span<const FigureEntry> figure_table() { return kFigures; }

const FigureEntry* find_figure(std::string_view name) {
  for (const FigureEntry& e : kFigures)
    if (e.name == name) return &e;
  return nullptr;
}

const FigureEntry& cli_figure(std::string_view name) {
  const FigureEntry* e = find_figure(name);
  if (e && e->cli) return *e;
  std::string known;
  for (const auto& n : figure_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown figure '" + std::string(name) + "' (known: " + known + ")");
}

std::string figure_help() {
  std::string out = "Figures (--figure NAME):\n";
  for (const FigureEntry& e : kFigures) {
    if (!e.cli) continue;
    std::string name(e.name);
    name.resize(std::max<std::size_t>(name.size() + 2, 14), ' ');
    out += "  " + name + std::string(e.about) + scope_note(e.scope) + recording_note(e.recording) + "\n";
  }
  return out;
}

std::string metric_help() {
  std::string out;
  for (const FigureEntry& e : kFigures)
    if (e.cli && e.metric) out += (out.empty() ? "" : "; ") + std::string(e.name) + ": " + e.metric;
  return out;
}

}  // namespace kvscope::figures
