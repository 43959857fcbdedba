#include "run_worker.h"

#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/presets.h"
#include "kvscope/sessions/session_store.h"
#include "run_options.h"     // kvscope_run: options -> pipeline, model load, request (as kvscope-cli run)
#include "session_record.h"  // kvscope_run: the session writer, so GUI and CLI sessions match

namespace kvscope::gui {
namespace {

/// Thrown from the per-token callback to stop generate() between decode steps.
struct RunCancelled : std::runtime_error {
  RunCancelled() : std::runtime_error("cancelled by the user") {}
};

/// A loaded model kept between runs of the same (path, device, dtype, tokenizer).
struct ModelSlot {
  std::string key;
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
};

/// The Run window's values as kvscope_run's options (the same a `kvscope-cli run` would build).
run::RunOptions run_options(const PolicyRegistry& registry, const RunRequest& req) {
  run::RunOptions o;
  o.prompt_text = req.prompt;
  o.follow_up_turns = req.turns;  // make_request refuses them with a chat prompt, as kvscope-cli --turn --chat
  o.bos = run::parse_bos_mode(req.bos);
  if (req.chat) {  // as kvscope-cli --chat [--system]: rendered before the model loads
    o.chat =
        run::render_chat(run::chat_template_location(req.random_init.empty() ? req.model_path : "", req.tokenizer_path),
                         user_chat_messages(req.prompt, req.system.empty() ? std::nullopt : std::optional(req.system)));
    o.prompt_text = o.chat->text;
    o.bos = BosMode::kAuto;  // the template writes the BOS; the form's BOS box is disabled
  }
  o.pipeline = req.pipeline_spec;
  // The window always shows a budget; a pipeline that uses none (a head pattern) runs without it.
  if (!req.pipeline_spec.empty() && pipeline_uses_budget(resolve_pipeline(registry.catalog(), req.pipeline_spec)))
    o.budget = BudgetSpec{parse_budget_unit(req.budget_unit), req.budget_value};
  o.max_new_tokens = req.max_new_tokens;
  o.allow_beyond_context = req.allow_beyond_context;
  o.sampling.greedy = req.greedy;
  o.sampling.temperature = req.temperature;
  o.sampling.top_p = req.top_p;
  o.sampling.seed = req.seed;
  o.reference_full = req.reference_full;
  o.capture = parse_capture_level(req.capture);
  o.capture_window = req.capture_window;
  return o;
}

RunUpdate run_with(ModelSlot& slot, const PolicyRegistry& registry, const RunRequest& req,
                   const std::function<void(const RunUpdate&)>& emit, const std::atomic<bool>& cancel) {
  RunUpdate done;
  done.db = req.db_path;
  std::int64_t run_id = -1, n = 0;
  try {
    if (req.db_path.empty()) throw InputError("choose a session database to record the run in");
    if (req.model_path.empty() && req.random_init.empty())
      throw InputError("choose a model (Hugging Face directory or llama2.c .bin)");
    if (!req.random_init.empty() && req.tokenizer_path.empty())
      throw InputError(req.random_init, "a random-init model needs a tokenizer (tokenizer_path) to encode the prompt");
    const run::RunOptions options = run_options(registry, req);
    const std::unique_ptr<Pipeline> pipeline = run::make_pipeline(registry, options);
    const std::string source = req.random_init.empty() ? req.model_path : "random-init:" + req.random_init;
    const std::string key = source + "|" + req.device + "|" + req.dtype + "|" + req.tokenizer_path;
    if (slot.key != key || !slot.model) {
      emit({RunUpdate::Kind::kStatus, "loading " + source + " on " + req.device + " (" + req.dtype + ")", {}, -1, 0});
      slot = {};
      const LoadOptions lo = run::load_options(req.device, req.dtype, req.tokenizer_path);
      if (req.random_init.empty()) {
        slot.model = std::make_unique<Model>(load_model(req.model_path, lo));
      } else {
        slot.model = std::make_unique<Model>(random_init_model(req.random_init, lo, req.seed));
        slot.model->tokenizer = load_tokenizer(req.tokenizer_path);
      }
      slot.engine = std::make_unique<Engine>(*slot.model);
      slot.key = key;
    }
    const Model& model = *slot.model;
    if (!model.tokenizer) throw InputError(req.model_path, "the model has no tokenizer: cannot encode the prompt");
    GenerateRequest g = run::make_request(model, pipeline.get(), options);
    g.on_progress = [&](const GenerateProgress& p) {
      auto live = std::make_shared<LiveRun>();
      live->decode_steps = p.decode_steps;
      live->decode_tokens_per_s = p.decode_tokens_per_s;
      live->cache_bytes_live = p.cache_bytes_live;
      live->decode_graph = p.decode_graph;
      live->kl = p.kl;
      live->timeline = p.timeline;
      RunUpdate u{RunUpdate::Kind::kProgress, {}, req.db_path, run_id, n};
      u.live = std::move(live);
      emit(u);
    };
    if (cancel) throw RunCancelled();

    auto store = sessions::SessionStore::open(req.db_path);
    emit({RunUpdate::Kind::kStatus,
          "prefill of " + std::to_string(g.prompt_ids.size()) + " tokens" +
              (pipeline ? " under " + pipeline->canonical() : std::string(" (full cache)")),
          {},
          -1,
          0});
    std::vector<int32_t> shown = g.prompt_ids;
    bool started = false;
    if (!g.follow_up_turns.empty()) {
      // Before a later turn's prefill: the stream shows the turn and continues from its tokens.
      g.on_turn = [&](std::int64_t turn) {
        if (turn < 1 || turn > static_cast<std::int64_t>(g.follow_up_turns.size())) return;
        const auto& ids = g.follow_up_turns[static_cast<std::size_t>(turn - 1)];
        emit({RunUpdate::Kind::kToken,
              "\n\n[turn " + std::to_string(turn + 1) + "] " + req.turns[static_cast<std::size_t>(turn - 1)] + "\n",
              req.db_path, run_id, n});
        shown = ids;
      };
    }
    auto on_token = [&](int32_t id) {
      if (!started) {
        started = true;
        emit({RunUpdate::Kind::kStarted, "decoding", req.db_path, run_id, 0});
      }
      if (cancel) throw RunCancelled();
      ++n;
      emit({RunUpdate::Kind::kToken, decode_continuation(*model.tokenizer, shown, {id}), req.db_path, run_id, n});
      shown.push_back(id);
    };
    run::generate_into_store(store, *slot.engine, pipeline.get(), registry, g, run::recorded_prompt(options), req.name,
                             std::nullopt, run_id, on_token);
    done.kind = RunUpdate::Kind::kFinished;
    done.text = "recorded run #" + std::to_string(run_id) + " in " + req.db_path;
  } catch (const RunCancelled& e) {
    done.kind = RunUpdate::Kind::kCancelled;
    done.text =
        run_id >= 0 ? "cancelled; run #" + std::to_string(run_id) + " recorded as failed (cancelled)" : "cancelled";
  } catch (const std::exception& e) {
    done.kind = RunUpdate::Kind::kFailed;
    done.text = e.what();
  }
  done.run_id = run_id;
  done.tokens = n;
  return done;
}

}  // namespace

void load_preset_budget(RunRequest& form, const Preset& preset) {
  form.budget_unit = std::string(budget_unit_name(preset.unit));
  form.budget_value = preset.value;
}

RunUpdate execute_run(const PolicyRegistry& registry, const RunRequest& req,
                      const std::function<void(const RunUpdate&)>& emit, const std::atomic<bool>& cancel) {
  ModelSlot slot;
  return run_with(slot, registry, req, emit, cancel);
}

struct RunWorker::Impl {
  const PolicyRegistry& registry;
  std::thread thread;
  std::atomic<bool> cancel{false}, busy{false};
  std::mutex mu;
  std::deque<RunUpdate> queue;
  ModelSlot slot;  // touched by the worker thread only (one run at a time)

  explicit Impl(const PolicyRegistry& r) : registry(r) {}
  void push(const RunUpdate& u) {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(u);
  }
};

RunWorker::RunWorker(const PolicyRegistry& registry) : impl_(std::make_unique<Impl>(registry)) {}

RunWorker::~RunWorker() {
  impl_->cancel = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool RunWorker::start(const RunRequest& req) {
  if (impl_->busy) return false;
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->cancel = false;
  impl_->busy = true;
  impl_->thread = std::thread([this, req]() {
    Impl& m = *impl_;
    const RunUpdate done = run_with(
        m.slot, m.registry, req, [&m](const RunUpdate& u) { m.push(u); }, m.cancel);
    m.push(done);
    m.busy = false;
  });
  return true;
}

void RunWorker::cancel() { impl_->cancel = true; }

bool RunWorker::busy() const { return impl_->busy; }

std::vector<RunUpdate> RunWorker::poll() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RunUpdate> out(impl_->queue.begin(), impl_->queue.end());
  impl_->queue.clear();
  return out;
}

}  // namespace kvscope::gui
