#pragma once
// The figure builders: one viz::Figure per GUI view, built from decoded runs (run_data.h) and the
// selection. The GUI draws them through its ImGui canvas, its export and `kvscope-cli export`
// (export_figures.h) write them through Cairo: one set of builders, two renderers. Every builder
// returns a valid figure (validate()) also when data is missing or not decoded: its panel titles say
// what is absent. Per-layer data is read from the decoded parts only (RunData::part); callers decode
// what a figure needs first (the GUI on its loader thread, export inline).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "figure_options.h"
#include "kvscope/core/duo_pattern.h"
#include "kvscope/viz/figure.h"
#include "run_data.h"

namespace kvscope::figures {

/// Colours shared by figures and the ImGui token list.
inline constexpr viz::Color kKeptColor = viz::Color::hex(0x009e73);     // Okabe-Ito bluish green
inline constexpr viz::Color kEvictedColor = viz::Color::hex(0xd9d9d9);  // light grey
/// The needle tokens of an evaluation run ("needle_tokens"): marker rows, outlines, hatching.
inline constexpr viz::Color kNeedleColor = viz::Color::hex(0xcc79a7);  // Okabe-Ito reddish purple
/// The A - B colours, one per side, used by every figure that compares two runs (categorical keys
/// "only A" / "only B" / "both" / "neither") and by the ImGui token list: A is blue, B orange,
/// "both" the kept green, "neither" the evicted grey.
inline constexpr viz::Color kOnlyAColor = viz::Color::hex(0x0072b2);    // Okabe-Ito blue
inline constexpr viz::Color kOnlyBColor = viz::Color::hex(0xe69f00);    // Okabe-Ito orange
inline constexpr viz::Color kBothColor = kKeptColor;                    // kept by both
inline constexpr viz::Color kNeitherColor = kEvictedColor;              // kept by neither
inline constexpr viz::Color kNeutralColor = viz::Color::hex(0x666666);  // A - B bars of either sign
/// The diverging colormap of numeric A - B maps: A > B in kOnlyAColor's blue, B > A in kOnlyBColor's
/// orange (viz "orangeblue": orange at the low end, blue at the high end).
inline constexpr const char* kDiffColormap = "orangeblue";
/// Key text of an A - B numeric map, appended to its title.
inline constexpr const char* kDiffKey = " (blue: A higher, orange: B higher)";

/// A panel that only says what is missing (an empty line plot keeps the figure valid).
viz::LinePlot note_panel(std::string text);

/// Per layer x KV head values of heads metric `metric` (heads_metric_names()) for a run:
/// [n_layer * n_head_kv], NaN when not captured.
std::vector<float> heads_metric_values(const RunData& run, int metric);

/// |A ∩ B| / |A ∪ B| of two sorted position lists (1 when both are empty).
double jaccard(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

/// Heads overview: heatmap of one metric over layers x KV heads (A, B or A - B).
viz::Figure heads_figure(const RunData& a, const RunData* b, const HeadsOptions& o, const Selection& sel);
/// Tokens overview strip: kept/evicted of the selected head, keep rate over heads, or attention.
viz::Figure tokens_figure(const RunData& a, const TokensOptions& o, const Selection& sel);
/// Attention (attention_figure.cpp): on one shared position axis over the selection's position
/// window, the layer's KV heads, then the selected head with its kept tokens marked (reduced to about
/// `width_px` / 2 buckets), then its kept strip. What is plotted is the decisive score (what the
/// budget stage ranked, Part::kScore) when recorded and o.decisive_score, with the cutoff (lowest
/// kept score), the always-kept regions shaded and the selected token marked; else the window-mean
/// attention of capture.
viz::Figure attention_figure(const RunData& a, const AttentionOptions& o, const Selection& sel, int width_px);
/// The kept/evicted strip of the selected head over window `w`. one_row: in one row under a
/// position axis (viz TokenStrip::single_row), values 1 kept / 0 evicted reduced per pixel to the
/// share kept ("keptshare" colormap); else categories evicted / kept (text boxes or wrapped rows).
viz::TokenStrip kept_strip_row(const RunData& a, const Selection& sel, const PositionWindow& w, std::string title,
                               bool one_row = true);
/// One line on the run's needles (RunData::needles), "" without: "needle: tokens 990-1002 (13):
/// L3 H1 kept 0 of 13; kept whole by 2 of 4 KV heads of layer 3, 9 of 24 KV heads of all layers"
/// (each part once the kept sets it needs are decoded; "full cache" for a run without kept sets).
std::string needle_text(const RunData& a, const Selection& sel);
/// The needle marker row over window `w`: one row (viz TokenStrip::single_row) of categories
/// "prompt" / "needle" (kNeedleColor), to stack under a strip with a shared position axis.
viz::TokenStrip needle_strip_row(const RunData& a, const PositionWindow& w, std::string title);
/// "snapkv score": what the views call run `a`'s decisive score ("policy score" without a scorer).
std::string decisive_score_name(const RunData& a);
/// Key geometry: cosine-to-mean-key histogram (kept vs evicted) and cosine vs attention scatter.
viz::Figure keys_figure(const RunData& a, const KeysOptions& o, const Selection& sel);
/// Channels: channel_mean and channel_cv per channel of the selected head, and a heads x channels map.
viz::Figure channels_figure(const RunData& a, const ChannelsOptions& o, const Selection& sel);
/// Budgets: kept entries per layer x KV head (A, B or A - B) and mean kept per layer; for a run
/// (the one shown; A for A - B) with a "heads" stage and o.head_pattern, also its pattern's
/// layers x KV heads dense/streaming map (entries kept on the run's prompt length) and streaming
/// window per layer (head_pattern_figure.h), or, when the pattern file cannot be read, a panel
/// whose title says so.
viz::Figure budgets_figure(const RunData& a, const RunData* b, const BudgetsOptions& o);
/// The `pattern` parameter of the run's "heads" stage (`--pipeline heads:pattern=FILE`) as
/// recorded, or "" when its pipeline has no heads stage.
std::string head_pattern_file(const RunData& r);
/// Where to read that file: as recorded when it exists, else (a relative path) next to the run's
/// database, else as recorded (reading it then fails naming the path).
std::string resolve_head_pattern_file(const RunData& r, const std::string& file);
/// The head pattern the run's "heads" stage ran: resolve_heads_stage (duo_pattern.h) on the stage's
/// recorded parameters, the file found by resolve_head_pattern_file, so a DuoAttention pattern is
/// binarized by the run's sparsity, threshold or RocketKV rule and sizes. Throws
/// std::invalid_argument when the run has no heads stage, and the readers' InputError.
HeadsStagePattern run_head_pattern(const RunData& r);
/// Fidelity: per-step KL, top-1 agreement and bytes read of every given run (overlaid).
viz::Figure fidelity_figure(const std::vector<const RunData*>& runs, const FidelityOptions& o);
/// Selection: the selected head's percentile among all heads per metric, and its kept strip.
viz::Figure selection_figure(const RunData& a, const Selection& sel);
/// How the kept sets of two runs differ at one head (kept_diff).
struct KeptDiffCounts {
  std::int64_t both = 0, only_a = 0, only_b = 0;
};
/// Per prompt position of head (sel.layer, sel.head): 0 kept by neither run, 1 only by B, 2 only by
/// A, 3 by both; empty when the runs are on different prompts or the head is outside either run.
/// Needs the layer's Part::kKept of both runs decoded (else those positions count as evicted).
std::vector<int> kept_diff(const RunData& a, const RunData& b, const Selection& sel, KeptDiffCounts* counts);

/// A - B views of a compare (same prompt): the selected head's tokens kept by both / only A /
/// only B / neither...
viz::Figure tokens_diff_figure(const RunData& a, const RunData& b, const Selection& sel);
/// ...every KV head of the layer as kept A - kept B over positions (+1 / -1, mean per pixel), the
/// selected head's attention with the tokens only one run kept marked, and the difference strip...
viz::Figure attention_diff_figure(const RunData& a, const RunData& b, const AttentionOptions& o, const Selection& sel,
                                  int width_px);
/// ...cosine-to-mean-key histogram, cosine vs attention and key PCA scatters grouped by who kept
/// each token (cosines, attention and PCA from A's capture, else B's)...
viz::Figure keys_diff_figure(const RunData& a, const RunData& b, const KeysOptions& o, const Selection& sel);
/// ...and channel saliency mean / CV of the selected head and the layer, A - B.
viz::Figure channels_diff_figure(const RunData& a, const RunData& b, const ChannelsOptions& o, const Selection& sel);

/// Why two runs have no kept-set difference: "runs on different prompts (n tokens vs m): kept-set
/// overlap is not defined", "runs on different model shapes (...)"; "" when they share prompt and shape.
std::string kept_diff_unavailable(const RunData& a, const RunData& b);

/// "A #1 …alpha=0.2 vs B #2 …alpha=0.1": both runs' pipelines elided together to `width` characters
/// (elide_identities, identity_elide.h), for A - B figure titles.
std::string ab_title(const RunData& a, const RunData& b, int width);

/// Compare A with B: per-head Jaccard of kept sets, summary metric deltas, the selected head's
/// A/B kept-set difference over tokens, and kept-count difference per layer.
viz::Figure compare_figure(const RunData& a, const RunData& b, const Selection& sel);

/// Every figure of a run for "export all" (the figure table's entries with "export all" variants,
/// figure_table.h): (name or name_variant, figure) at width x height; "compare" only with a B.
std::vector<std::pair<std::string, viz::Figure>> all_figures(const RunData& a, const RunData* b, const Selection& sel,
                                                             int width, int height);

}  // namespace kvscope::figures
