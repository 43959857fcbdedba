#pragma once
// "Open in Run": the Run view's form filled from a stored run, so it can be re-run as it was or
// changed one field at a time. fill_from_run() is the pure mapping (a RunRecord's fields onto a
// RunRequest, and a line for each form field the run did not record); open_in_run() applies it to
// the app (form, pipeline editor, switch to the Run view).
#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/core/policy_catalog.h"
#include "kvscope/sessions/turn_blobs.h"
#include "kvscope/sessions/types.h"
#include "run_worker.h"

namespace kvscope {
class Tokenizer;
}

namespace kvscope::gui {

struct AppState;

/// The form of a stored run, and what could not come from it.
struct RunFill {
  RunRequest form;  ///< `base` with every field the run records replaced by the run's
  /// Form fields the run does not record, kept from `base` or estimated, one line each
  /// ("sampling: not recorded, the form's greedy kept"); shown in the Run view.
  std::vector<std::string> notes;
};

/// Fills a Run view form from run `rec` of database `db`. From the record: model path (a random-init
/// run's config.json goes to random_init), device, dtype, prompt text (a run that stored token ids
/// only: their text decoded by `tokenizer`, else the form's with a note), pipeline SPEC (empty for
/// the full cache), budget unit and value, capture level (from the stored blobs: per-layer arrays =
/// full, head summaries or a timeline = summary, else off), the full-cache reference (a "kl" step
/// metric or "mean_kl"), beyond-context (summary "beyond_context_tokens"), the run's name and its
/// database. A chat prompt of one user message (after a system message) fills "chat template", the
/// message and the system text; another conversation its rendered text with BOS "never". BOS mode
/// of other prompts: with `tokenizer` (the model's; may be null), "never" when the stored ids are
/// the text's tokens, "always" when they are one id more; a note when they are neither (the re-run
/// would not be on the same ids). Not recorded, so kept from `base` with a note: max new tokens (set
/// to the tokens the run generated when it generated any: at most the limit it had), sampling, the
/// capture window, a tokenizer override (cleared), a random-init run's seed.
/// A multi-turn run's `turns` (sessions::load_turns; turn 0 is the prompt) fill the form's later
/// turns with each later turn's input decoded by `tokenizer` (a note for one that no longer
/// tokenizes to the stored ids), and max new tokens with the most any turn generated; without a
/// tokenizer the turns cannot be decoded: the form's turns are cleared, with a note. A single-turn
/// run clears the form's turns.
RunFill fill_from_run(const sessions::RunRecord& rec, const std::string& db, const RunRequest& base,
                      const Tokenizer* tokenizer = nullptr, const std::vector<sessions::Turn>& turns = {});

/// Fills s.run from run `run` of database `db` (its record from the runs loaded in `s`, else from the
/// open database) with fill_from_run (the model's tokenizer from s.tokenizers; the turns of an open
/// run from its RunData, else sessions::load_turns): the form, the
/// pipeline editor from the run's SPEC (one the catalogue cannot read stays as text with its error,
/// and Run stays disabled until it is fixed), the notes; then switches to the Run view. False, with
/// s.status saying why, when the run cannot be read. `catalog` may be null (no editor).
bool open_in_run(AppState& s, const std::string& db, std::int64_t run, const PolicyCatalog* catalog);

}  // namespace kvscope::gui
