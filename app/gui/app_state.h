#pragma once
// The app's state in plain structs: open databases, loaded runs, the selection, each view's options
// and cached figures, the Run window form. The panels (panels/*.cpp) redraw from it every frame;
// nothing here is global: main() owns one AppState and passes it down with the services (fonts,
// textures, policy catalogue, run worker) in a Ui. Runs open with their light part decoded; the
// state's PartLoader decodes the per-layer parts the views ask for on its own thread.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fidelity_tokens.h"
#include "gui_options.h"
#include "imgui_canvas.h"
#include "kvscope/sessions/session_store.h"
#include "panels/eval_panel.h"
#include "part_loader.h"
#include "pipeline_editor.h"
#include "run_data.h"
#include "run_worker.h"
#include "selection_steps_figure.h"
#include "textures.h"
#include "timeline_figure.h"
#include "tokenizer_cache.h"
#include "turn_spans.h"
#include "view_table.h"
#include "view_types.h"

namespace kvscope {
class ChatTemplate;
}

namespace kvscope::gui {

using figures::display_token;
using figures::head_summary_names;
using figures::metric_label;
using figures::Part;
using figures::RunData;
using figures::RunRef;

/// An open session database and its run list.
struct OpenDb {
  std::string path;
  std::unique_ptr<sessions::SessionStore> store;
  bool writable = false;  ///< notes and bookmarks can be written
  std::vector<sessions::RunRow> rows;
  /// Per run id: prompt preview and model shape, read lazily (list_runs has neither).
  struct Extra {
    std::string prompt;         ///< the text tokenized (a chat prompt: rendered by its template)
    std::string chat_template;  ///< a chat prompt's template source ("" for other prompts)
    std::string chat_preview;   ///< a chat prompt's last message (the list shows it)
    std::int64_t n_prompt = 0, n_layer = 0, n_head_kv = 0;
    std::int64_t notes = 0, bookmarks = 0;
  };
  std::map<std::int64_t, Extra> extra;
};

/// Sessions window.
struct SessionsState {
  std::string open_path;  ///< "Open database" input
  std::string filter;     ///< matches name, model, pipeline, prompt
  bool complete_only = false;
  std::string new_note;
  std::int64_t editing_note = -1;
  std::string edit_text;
  std::string bookmark_label;
  /// Sort: column id and direction from the table's sort specs.
  int sort_column = 0;
  bool sort_descending = false;
  /// Notes and bookmarks of run A, re-read when A changes or after an edit.
  RunRef notes_for;
  bool notes_dirty = true;
  std::vector<sessions::Note> notes;
  std::vector<sessions::Bookmark> bookmarks;
};

struct HeadsState {
  HeadsOptions opt;
  FigureView fig;
};

/// An in-progress drag on a position axis (panels::position_zoom): pan, or a shift-drag brush.
struct PositionDrag {
  bool active = false, brush = false;
  bool moved = false;                        ///< the mouse moved more than 2 px since the press: a drag, not a click
  float start_px = 0;                        ///< mouse x at the press (screen px)
  double start_pos = 0;                      ///< position under the mouse at the press
  double px_per_pos = 1;                     ///< the axis scale at the press
  std::int64_t start_lo = 0, start_hi = -1;  ///< the window at the press
};

struct TokensState {
  TokensOptions opt;
  FigureView overview;
  PositionDrag drag;
  // Wrapped token rows for the token list, cached per run and width.
  std::shared_ptr<const RunData> laid_for;  ///< run the rows were laid out for
  float laid_width = 0;
  std::vector<float> token_w;           ///< box width per token
  std::vector<std::string> shown;       ///< display text per token
  std::vector<std::int32_t> row_start;  ///< first token of each row
  std::int64_t scroll_to = -1;          ///< token to bring into view next frame
  std::int64_t hovered = -1;
  std::int64_t goto_pos = 0;
};

struct AttentionState {
  AttentionOptions opt;
  FigureView fig;
  PositionDrag drag;
};
struct KeysState {
  KeysOptions opt;
  FigureView fig;
};
struct ChannelsState {
  ChannelsOptions opt;
  FigureView fig;
};
struct BudgetsState {
  BudgetsOptions opt;
  FigureView fig;
};
struct FidelityState {
  FidelityOptions opt;
  FigureView fig;
  /// The decode step in focus, linked between the plot and the token texts: `selected` by a click
  /// (-1: none), `hovered` under the mouse in either this frame (-1: none).
  std::int64_t selected = -1, hovered = -1;
  std::string selected_for;     ///< run_key of the run `selected` belongs to (a new run selects its largest KL)
  std::int64_t scroll_to = -1;  ///< step to bring into view in the texts next frame
  int text_run = 0;             ///< whose texts are shown: 0 = A, k = others[k - 1]
  /// Per run (run_key): its per-step tokens, read once (fidelity_tokens.h).
  std::map<std::string, FidelityTokens> tokens;
  // The texts' rows, wrapped once per run and width: one box per step, as wide as the wider of the
  // two tokens, so both columns break at the same steps.
  std::string laid_key;
  float laid_width = 0;
  std::vector<std::string> left, right;  ///< display text per step: compressed token, full cache's top-1
  std::vector<float> box_w;              ///< box width per step (px)
  std::vector<std::int32_t> row_start;   ///< first step of each row
};
struct TimelineState {
  figures::TimelineOptions opt;
  FigureView fig;
  PositionDrag drag;
  /// The decode step in focus: set by clicking a step of the one-head map, moved by the Selection
  /// view's step control (shared, so both views show the same step); -1 = none yet (the last step).
  std::int64_t step = -1;
  /// A multi-turn run (RunData::turns): the turn chosen in the turn selector (-1: all turns), and
  /// the turns' positions and steps (figures::turn_spans), computed once per run and timeline.
  int turn = -1;
  std::string turns_key;  ///< run (and whether its timeline was decoded) `turns` and `turn` are of
  std::vector<figures::TurnSpan> turns;
};
struct SelectionState {
  FigureView fig;
  FigureView steps;  ///< one step's selection against the exact top-k (selection_steps_figure.h)
  /// steps' classification, for hover: of step_key = run, layer, head, step.
  std::string step_key;
  figures::SelectionStep step;
};
struct CompareState {
  int b_index = 0;  ///< which compare run is B
  FigureView fig;
};

/// The Run window's form.
struct RunState {
  RunRequest form;
  PipelineEdit pipeline;
  bool pipeline_initialised = false;
  std::string spec_text;  ///< editable SPEC mirror of the editor
  std::string spec_error;
  std::string output;  ///< streamed text of the current run
  std::vector<std::string> log;
  std::int64_t tokens = 0;
  std::shared_ptr<const LiveRun> live;  ///< the latest snapshot of the run in progress (or the last run)
  FigureView live_fig;                  ///< its timeline, drawn in the Run view
  bool running = false;
  std::int64_t last_run = -1;
  std::string last_db;
  // Before the run (run_panel.cpp): the prompt's token count with the model's tokenizer, computed
  // once per (tokenizer, prompt) and, for a big prompt, only once it stopped changing.
  std::string prompt_key;           ///< tokenizer path + prompt hash the count below is of
  std::string prompt_pending;       ///< a key waiting for the prompt to settle
  double prompt_pending_since = 0;  ///< ImGui time it was first seen
  std::int64_t prompt_tokens = -1;  ///< tokens of the prompt text (no BOS); -1: not known
  std::string prompt_tokens_why;    ///< why not known (no model, tokenizer does not load)
  /// The later turns' token counts (form.turns, in order), computed once per (tokenizer, turns):
  /// -1 each while not known (turns_tokens_why says why).
  std::string turns_key;
  std::vector<std::int64_t> turns_tokens;
  std::string turns_tokens_why;
  std::int64_t kept_per_head = -1;  ///< entries per KV head after prefill; -1: not known
  std::string budget_problem;       ///< run::check_kept_entries' one line; non-empty disables Run
  /// Why the form cannot run, as the Run bar says it this frame (the SPEC, the budget, the chat
  /// prompt or the later turns; the worker aside); "" when it can.
  std::string run_problem;
  // The chat template of the form's tokenizer (run_panel.cpp), loaded once per location: the
  // "chat template" box is disabled, with the reason, where there is none.
  std::string chat_location;                          ///< where it was looked for; "" = not yet
  std::shared_ptr<const ChatTemplate> chat_template;  ///< null: none (chat_template_why says why)
  std::string chat_template_why;
  std::string chat_rendered;  ///< the form's prompt as the template renders it (chat on; the count's text)
  std::string chat_problem;   ///< rendering it failed (raise_exception, ...): shown, and disables Run
  // "Open in Run" (run_from_record.h): which run filled the form, and what it could not fill.
  std::string filled_from;              ///< "#5 of runs.db"; empty: the form was not filled from a run
  std::vector<std::string> fill_notes;  ///< fields the run did not record (kept from the form or estimated)
};

/// Export dialog.
struct ExportState {
  std::string dir = ".";
  std::string base;  ///< file name without extension ("" = view name + run id)
  std::string message;
  bool open = false;               ///< dialog requested this frame
  int width = 1400, height = 850;  ///< "export all" figure size
};

/// Everything the app shows.
struct AppState {
  std::vector<OpenDb> dbs;
  std::shared_ptr<const RunData> a;                    ///< the run every view shows
  std::vector<std::shared_ptr<const RunData>> others;  ///< compare runs (B = others[compare.b_index])
  Selection sel;
  View view = View::kSessions;
  bool select_view = true;  ///< make `view` the active tab next frame
  bool headless = false;    ///< screenshot / test mode: no file dialogs, deterministic
  TokenizerCache tokenizers;
  PartLoader loader;  ///< decodes per-layer parts of `a` and `others` off the UI thread

  SessionsState sessions;
  HeadsState heads;
  TokensState tokens;
  AttentionState attention;
  KeysState keys;
  ChannelsState channels;
  BudgetsState budgets;
  FidelityState fidelity;
  SelectionState selection;
  TimelineState timeline;
  CompareState compare;
  EvalState eval;
  RunState run;
  ExportState exporting;

  std::string status;  ///< last message for the status bar
  bool quit_requested = false;
  double frame_ms = 0;

  /// Run B for per-run views in compare mode (nullptr when none).
  const RunData* b() const {
    if (others.empty()) return nullptr;
    const auto i = static_cast<std::size_t>(std::clamp(compare.b_index, 0, static_cast<int>(others.size()) - 1));
    return others[i].get();
  }
  /// Run B as held (nullptr when none).
  std::shared_ptr<const RunData> b_run() const {
    if (others.empty()) return nullptr;
    return others[static_cast<std::size_t>(std::clamp(compare.b_index, 0, static_cast<int>(others.size()) - 1))];
  }
};

/// Services the panels use (owned by main / the test harness).
struct Ui {
  const FontSet& fonts;
  TextureStore& textures;
  const PolicyCatalog* catalog = nullptr;  ///< null: the Run window shows no editor
  RunWorker* worker = nullptr;             ///< null: runs cannot be started (tests)
};

// ---- actions (app.cpp) -------------------------------------------------------------------------

/// Opens (or refreshes) database `path`; returns its index in s.dbs. Errors go to s.status.
int open_database(AppState& s, const std::string& path);
/// Re-reads the run list of every open database.
void refresh_databases(AppState& s);
/// Loads run `run` of database `db` as A (compare = false) or adds it to the compare runs.
bool open_run(AppState& s, int db, std::int64_t run, bool compare);
/// The newest run of database `db` (highest id), or -1.
std::int64_t newest_run(const AppState& s, int db);
/// Clamps the selection to run A's shape.
void clamp_selection(AppState& s);
/// The open database holding run data `r` (or -1).
int db_index(const AppState& s, const std::string& path);
/// Saves the current view, selection and runs as view state in A's database ("gui.last").
void save_view_state(AppState& s);
/// Restores "gui.last" from database `db` if present.
void restore_view_state(AppState& s, int db);

/// Opens the databases and runs of the command line, picks the view and selection. Without --run:
/// the newest run of the first database; the compare view then also gets the newest other complete
/// run on the same prompt. False (with s.status set) if a database or run could not be opened.
bool apply_options(AppState& s, const GuiOptions& o);
/// The newest complete run of database `db` other than A on A's prompt, or -1.
std::int64_t same_prompt_run(AppState& s, int db);

/// Draws one frame of the whole window (menu, context bar, view tabs, status bar). One view:
/// draw_view() (view_table.h).
void draw_app(AppState& s, Ui& ui);

}  // namespace kvscope::gui
