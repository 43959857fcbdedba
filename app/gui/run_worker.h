#pragma once
// RunWorker: executes a run (load model, build pipeline, generate, record the session) on a worker
// thread. The UI thread polls a queue of updates (status lines, streamed token text, the final
// outcome) and never blocks; cancel() is honoured between decode steps (the per-token callback
// throws, the run is recorded as failed "cancelled"). Building, running and recording the run is
// kvscope_run's (app/run), as for kvscope-cli run --db, so GUI and CLI sessions are alike; the
// worker adds threading, progress and a model kept loaded between runs.
// Torch-free header (pimpl): panels include it without LibTorch.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/core/timeline.h"

namespace kvscope {
class PolicyRegistry;
struct Preset;
}  // namespace kvscope

namespace kvscope::gui {

/// Everything a run needs, as typed values from the Run window.
struct RunRequest {
  std::string model_path;
  /// Instead of model_path: random weights of this config.json's shape, built on the device (speed
  /// work on large shapes, as kvscope-cli --random-init); needs tokenizer_path for the prompt.
  std::string random_init;
  std::string tokenizer_path;  ///< optional override
  std::string prompt;
  /// Later user turns, in order (multi-turn, as kvscope-cli run --turn): after each turn's
  /// generation the next turn is prefilled onto the same cache, the pipeline compresses again, and
  /// the session stores every turn. Not with `chat` (later turns are not rendered with the template).
  std::vector<std::string> turns;
  /// The prompt as one user message rendered with the model's chat template (and its generation
  /// prompt), as kvscope-cli --chat: no BOS added (the template writes it), `bos` unused.
  bool chat = false;
  std::string system;         ///< with `chat`: a system message before the prompt (empty: none)
  std::string bos = "auto";   ///< auto | always | never
  std::string pipeline_spec;  ///< empty: full cache, no compression
  std::string budget_unit =
      "fraction";  ///< a budget unit name (kvscope/core/budget.h): compression_ratio | stored | fetched | fraction
  double budget_value = 0.25;
  std::string device = "cpu";  ///< cpu | cuda | cuda:i
  std::string dtype = "fp32";  ///< fp32 | bf16 | fp16
  std::int64_t max_new_tokens = 32;
  bool allow_beyond_context = false;  ///< run past the model's context (recorded in the session)
  bool reference_full = false;        ///< also decode with the full cache (eagerly): per-step KL / top-1
  std::string capture = "summary";    ///< off | summary | full (summary keeps the CUDA graph)
  std::int64_t capture_window = 32;
  bool greedy = true;
  double temperature = 1.0, top_p = 1.0;
  std::uint64_t seed = 0;
  std::string db_path;  ///< session database (created if missing)
  std::string name;     ///< session name
};

/// Sets the form's budget unit and value to those `preset` is documented under (the Run view's
/// "Load preset..." does this with the pipeline).
void load_preset_budget(RunRequest& form, const Preset& preset);

/// A run in progress as the views show it (core GenerateProgress, torch-free).
struct LiveRun {
  std::int64_t decode_steps = 0;
  double decode_tokens_per_s = 0;
  std::int64_t cache_bytes_live = 0;
  bool decode_graph = false;
  std::vector<double> kl;
  std::shared_ptr<const Timeline> timeline;  ///< null without capture
};

/// One message from the worker.
struct RunUpdate {
  enum class Kind { kStatus, kStarted, kToken, kProgress, kFinished, kFailed, kCancelled };
  Kind kind = Kind::kStatus;
  std::string text;                     ///< status line, token text, or error message
  std::string db;                       ///< kStarted / kFinished / kFailed / kCancelled: the database
  std::int64_t run_id = -1;             ///< set once the run exists in the database
  std::int64_t tokens = 0;              ///< tokens generated so far
  std::shared_ptr<const LiveRun> live;  ///< kProgress: the run so far
};

/// Runs `req` synchronously on this thread: progress goes to `emit`, `cancel` is checked between
/// decode steps. Returns the final update (kFinished, kFailed or kCancelled). Models are loaded per
/// call (RunWorker keeps them between runs).
RunUpdate execute_run(const PolicyRegistry& registry, const RunRequest& req,
                      const std::function<void(const RunUpdate&)>& emit, const std::atomic<bool>& cancel);

class RunWorker {
 public:
  /// `registry` is borrowed and must outlive the worker.
  explicit RunWorker(const PolicyRegistry& registry);
  /// Cancels a run in progress and joins the thread.
  ~RunWorker();
  RunWorker(const RunWorker&) = delete;
  RunWorker& operator=(const RunWorker&) = delete;

  /// Starts `req` on the worker thread; false if a run is in progress.
  bool start(const RunRequest& req);
  /// Asks the run in progress to stop after its current decode step.
  void cancel();
  bool busy() const;
  /// Updates since the last poll, oldest first (UI thread).
  std::vector<RunUpdate> poll();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::gui
