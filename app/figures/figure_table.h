#pragma once
// The figures drawn by name: one table (figure_table.cpp), one entry per figure, with its builder,
// the run parts it reads, what it is drawn over (run, layer, KV head, database) and what the run
// must have recorded. `kvscope-cli export` (build_figure, figure_names, its --figure / --metric
// help; export_figures.h) and the GUI's "export all figures of this run" (all_figures, figures.h)
// read it. Adding a figure: one entry here plus its builder.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "figure_options.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/viz/figure.h"
#include "run_data.h"

namespace kvscope::figures {

/// A set of run parts, iterated in Part order.
class PartSet {
 public:
  constexpr PartSet() = default;
  constexpr PartSet(std::initializer_list<Part> parts) {
    for (Part p : parts) bits_ |= bit(p);
  }
  constexpr bool contains(Part p) const { return (bits_ & bit(p)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  std::vector<Part> parts() const;

 private:
  static constexpr unsigned bit(Part p) { return 1u << static_cast<int>(p); }
  unsigned bits_ = 0;
};

/// What a figure is drawn over, and so which of --layer / --head it reads (and checks).
enum class FigureScope {
  kDatabase,  ///< every complete run of the database (RUN only names the database)
  kRun,       ///< the whole run
  kLayer,     ///< one layer (--layer)
  kHead,      ///< one KV head of one layer (--layer, --head)
};

/// What the run must have recorded. kvscope-cli export refuses a figure whose data the run lacks,
/// naming the option to record it with; the GUI draws it with panels that say what is absent.
enum class Recording {
  kSummary,      ///< any run: kept sets, per-head summaries (--capture summary, the default)
  kFullCapture,  ///< --capture full: attention, key cosines and PCA, channel statistics, top-k record
  kReference,    ///< --reference full: per-step KL and top-1 agreement
  kHeadsStage,   ///< a pipeline with a "heads" stage (--pipeline heads:pattern=FILE)
  kTimeline,     ///< --capture summary or full: the time-resolved record of cache decisions
};

/// What a builder draws from.
struct FigureInput {
  const RunData* run = nullptr;                   ///< the run, its entry's parts decoded (null for kDatabase)
  const RunData* b = nullptr;                     ///< compare run B (entries with two_runs), else null
  const sessions::SessionStore* store = nullptr;  ///< the database (kDatabase figures)
  Selection sel;                                  ///< layer and KV head (per the scope)
  std::string variant;       ///< "" or one of the entry's variants (its --metric, or an "export all" variant)
  int width = 0;             ///< figure width in px, for figures reduced to it (0: viz::Figure's default)
  bool strict = false;       ///< throw std::invalid_argument naming what the run lacks (kvscope-cli export)
  bool token_texts = false;  ///< token strips carry the token texts (kvscope-cli export)
};
using FigureBuilder = viz::Figure (*)(const FigureInput&);
/// The variants "export all" writes of a figure: file name = entry name, plus "_VARIANT" if not "".
using FigureVariants = std::vector<std::string> (*)();

struct FigureEntry {
  std::string_view name = {};  ///< `kvscope-cli export --figure NAME`; the "export all" file name
  FigureBuilder build = nullptr;
  PartSet needs = {};  ///< parts of the layer decoded first; kvscope-cli refuses a run that did not store one
  PartSet uses = {};   ///< parts of the layer decoded when stored (the figure notes absent ones)
  FigureScope scope = FigureScope::kRun;
  Recording recording = Recording::kSummary;
  std::string_view about = {};   ///< one line for --help
  const char* metric = nullptr;  ///< what --metric selects (passed as the variant); null: ignored
  bool cli = true;               ///< offered by kvscope-cli export
  FigureVariants all = nullptr;  ///< what "export all" writes of it; null: not written there
  bool two_runs = false;         ///< draws run A against compare run B ("export all" with a B only)
  bool strip = false;            ///< a token strip: "export all" writes it at a third of the height
};

/// Every figure, in --help order.
std::span<const FigureEntry> figure_table();
/// The entry named `name`, or nullptr.
const FigureEntry* find_figure(std::string_view name);
/// The entry `name` of kvscope-cli export. Throws std::invalid_argument "unknown figure 'NAME'
/// (known: heads, tokens, ...)" for a name the CLI does not offer.
const FigureEntry& cli_figure(std::string_view name);
/// The --help text of kvscope-cli export's figures: one line per figure ("  NAME  about
/// [--layer, --head] (needs --capture full)"), and of --metric (the figures that read it and what
/// it selects).
std::string figure_help();
std::string metric_help();
/// The "export all" variants of the single-figure entries: {""}.
std::vector<std::string> one_variant();

}  // namespace kvscope::figures
