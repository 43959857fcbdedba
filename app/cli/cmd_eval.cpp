// kvscope-cli eval: task accuracy of pipelines x budgets over evaluation samples (a JSONL file or
// generated RULER tasks), every sample a run in the session database; resumable (finished items are
// skipped by their key), shardable (--shard i/n) and spread over GPUs (--devices) as `sweep` is.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <c10/core/DeviceGuard.h>
#include <nlohmann/json.hpp>

#include "chat_prompt.h"
#include "commands.h"
#include "eval_prompt.h"
#include "eval_run.h"
#include "fault_injection.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/ruler_tasks.h"
#include "kvscope/core/tokenizer.h"
#include "number_check.h"
#include "run_options.h"
#include "shell_quote.h"
#include "work_split.h"

namespace kvscope::cli {
namespace {

struct Args {
  std::string model, random_init, tokenizer, device = "cpu", dtype = "fp32", data, task, db, name, shard, devices, csv,
                                             write_samples, emit_slurm;
  std::vector<int64_t> lengths;
  int64_t n = 10, turns = 0;
  uint64_t seed = 42;
  std::vector<std::string> essays, code;
  std::vector<double> depths;
  std::string haystack, words, wordnet;
  bool plain = false, remove_newline_tab = false;
  std::vector<std::string> pipelines;
  std::vector<double> ratios, budgets;
  std::string budget_unit = "stored";
  bool agnostic = false, aware = false, json = false;
  std::string capture = "summary";
};

/// One (pipeline, budget) of the evaluation.
struct Config {
  std::string spec;  ///< canonical SPEC; "" for the full cache
  std::optional<BudgetSpec> budget;
  std::unique_ptr<Pipeline> pipeline;
  std::string label() const {
    if (spec.empty()) return "full";
    if (!budget) return spec;
    return spec + " @ " + std::string(budget_unit_name(budget->unit)) + "=" + format_number(budget->value);
  }
};

struct Outcome {
  std::string output;
  double score = 0;
  std::vector<std::string> turn_outputs;  ///< a multi-turn sample: every turn's output, the first included
  std::vector<double> turn_scores;        ///< and its score (score is their mean)
  int64_t run_id = -1;
  double needle_kept = -1;  ///< mean over heads; -1 without needles
  std::string error;
  bool done = false;
};

/// 64-bit FNV-1a in hex: a short stable name for a data file's content in item keys.
std::string fnv1a_hex(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string hms(double s) {
  if (!std::isfinite(s)) return "--:--:--";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d", int(s / 3600), int(s / 60) % 60, int(s) % 60);
  return buf;
}

/// The outcome of an item that a complete run in `store` already holds (resume).
Outcome recorded_outcome(const sessions::SessionStore& store, const sessions::RunRow& row) {
  Outcome o;
  o.run_id = row.id;
  const auto s = row.summary.find("eval_score");
  o.score = s == row.summary.end() ? 0.0 : s->second;
  o.output = store.load_run(o.run_id).outputs.text;
  for (const sessions::Blob& b : store.load_blobs(o.run_id, "needle_kept")) {
    const std::vector<float> v = b.values<float>();
    if (v.empty()) continue;
    double m = 0;
    for (float x : v) m += x;
    o.needle_kept = m / double(v.size());
  }
  if (const auto b = store.load_blob(o.run_id, "eval_turns", -1, -1)) {
    const std::vector<uint8_t> bytes = b->values<uint8_t>();
    const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_array())
      for (const auto& t : j)
        if (t.is_object() && t.value("output", nlohmann::json()).is_string() &&
            t.value("score", nlohmann::json()).is_number()) {
          o.turn_outputs.push_back(t["output"].get<std::string>());
          o.turn_scores.push_back(t["score"].get<double>());
        }
  }
  o.done = true;
  return o;
}

/// The chat template of a model or tokenizer directory, or null when it has none.
std::unique_ptr<ChatTemplate> model_template(const std::filesystem::path& location) {
  try {
    return std::make_unique<ChatTemplate>(ChatTemplate::load(location));
  } catch (const NoChatTemplate&) {
    return nullptr;
  }
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "Task accuracy (RULER-style) of pipelines x budgets over evaluation samples, each sample a recorded run");
  auto a = std::make_shared<Args>();
  auto* m = cmd->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer.json)");
  auto* ri =
      cmd->add_option("--random-init", a->random_init,
                      "config.json: random weights of that shape instead of --model (speed only; needs --tokenizer)");
  m->excludes(ri);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer directory (tokenizer.json, tokenizer_config.json, chat template) overriding the model's");
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "fp32 | bf16 | fp16")->capture_default_str();
  auto* data =
      cmd->add_option("--data", a->data, "Samples: a JSONL file (docs/eval.md: kvscope's or kvpress's columns)");
  auto* task =
      cmd->add_option("--task", a->task, "Generate samples of this RULER task (docs/eval.md: niah_single_1, ...)");
  data->excludes(task);
  cmd->add_option("--length", a->lengths,
                  "With --task: token budget of each sample (prompt + answer); repeat for several")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--n", a->n, "With --task: samples per length")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "With --task: random seed")->capture_default_str();
  cmd->add_option("--essays", a->essays, "With --task: text files of the essay haystack (niah_single_2/3, ...)");
  cmd->add_option("--code", a->code, "With --task: source files of the code haystack");
  cmd->add_option("--haystack", a->haystack, "With --task: noise | needle | essay | code instead of the task's own");
  cmd->add_flag("--remove-newline-tab", a->remove_newline_tab,
                "With --task: RULER's --remove_newline_tab: whitespace runs (noise lines' newlines included) become "
                "one space");
  cmd->add_option("--depth", a->depths, "With --task niah_paul_graham: needle depths in percent");
  cmd->add_option("--turns", a->turns,
                  "With a niah --task: later turns per sample, each asking for another key of the same context "
                  "(multi-turn; niah_multikey_1 places 3 keys it does not ask)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--words", a->words,
                  "With --task: word list of the keys and cwe/fwe words, one a line (default: wamerican's)");
  cmd->add_option("--wordnet", a->wordnet,
                  "With --task: WordNet directory (index.adj, index.noun) of the keys' common adjectives and nouns "
                  "(default: wordnet-base's /usr/share/wordnet)");
  cmd->add_flag("--plain", a->plain, "With --task: plain prompts instead of the model's chat template");
  cmd->add_option("--write-samples", a->write_samples, "Also write the samples as JSONL to this file");
  cmd->add_option("--pipeline", a->pipelines, "Pipeline SPEC (repeat for several); none: the full cache alone");
  auto* r = cmd->add_option("--compression-ratio", a->ratios,
                            "Fraction of the context's entries to evict (repeat for several; each pipeline runs each)")
                ->check(finite_number(0, 1, false, /*hi_open=*/true));
  auto* b = cmd->add_option("--budget", a->budgets, "Budget in --budget-unit (repeat for several)")
                ->check(finite_number(0, std::numeric_limits<double>::infinity(), true, true));
  r->excludes(b);
  cmd->add_option("--budget-unit", a->budget_unit, "Unit of --budget (as `run`)")->capture_default_str();
  auto* qa = cmd->add_flag("--question-agnostic", a->agnostic,
                           "Compress the context alone, then feed the question uncompressed (default; kvpress)");
  auto* qw = cmd->add_flag("--question-aware", a->aware, "Compress the whole prompt, question included");
  qa->excludes(qw);
  cmd->add_option("--db", a->db, "Record every sample as a run in this session database; resumes what it holds");
  cmd->add_option("--name", a->name, "Name of the evaluation (prefix of its runs' names)");
  cmd->add_option("--capture", a->capture, "With --db: per-head statistics per run: off | summary | full")
      ->check(CLI::IsMember({"off", "summary", "full"}));
  cmd->add_option("--shard", a->shard, "i/n: run only every n-th item starting at i");
  cmd->add_option("--devices", a->devices, "Comma-separated CUDA device ids: one worker process per GPU (needs --db)");
  cmd->add_option("--emit-slurm", a->emit_slurm,
                  "Write a Slurm array script instead of running: one task per shard of --shard 0/N (one database "
                  "per shard, joined by kvscope-cli merge)");
  cmd->add_option("--csv", a->csv, "Write one row per item to this CSV file");
  cmd->add_flag("--json", a->json, "Print the results as one JSON object");
  return [a]() -> int {
    if (a->model.empty() && a->random_init.empty())
      throw InputError("eval: give --model DIR or --random-init CONFIG.json");
    if (!a->random_init.empty() && a->tokenizer.empty())
      throw InputError("eval --random-init: give --tokenizer DIR (the samples are text)");
    if (a->data.empty() && a->task.empty()) throw InputError("eval: give --data FILE.jsonl or --task NAME --length N");
    if (!a->task.empty() && a->lengths.empty()) throw InputError("eval --task " + a->task + ": give --length N");
    if (!a->devices.empty() && a->db.empty())
      throw InputError("eval --devices: the workers write into one session database; give --db");
    PolicyRegistry registry;
    register_builtin_policies(registry);
    const run::QuestionMode mode = a->aware ? run::QuestionMode::kAware : run::QuestionMode::kAgnostic;
    // Every (pipeline, budget), built before the model loads: a typo costs nothing.
    std::vector<Config> configs;
    if (a->pipelines.empty()) {
      if (!a->ratios.empty() || !a->budgets.empty())
        throw InputError("eval: a budget without --pipeline: the full cache uses none");
      configs.emplace_back();
    }
    for (const auto& spec : a->pipelines) {
      std::vector<std::optional<BudgetSpec>> budgets;
      for (double v : a->ratios) budgets.push_back(BudgetSpec{BudgetUnit::kCompressionRatio, v});
      for (double v : a->budgets) budgets.push_back(BudgetSpec{parse_budget_unit(a->budget_unit), v});
      // A SPEC with a typo fails here, naming it; a pipeline without a budget stage runs once.
      if (!Pipeline(registry, spec).uses_budget()) budgets = {std::nullopt};
      if (budgets.empty()) throw InputError("eval --pipeline " + spec + ": give --compression-ratio R or --budget N");
      for (const auto& bud : budgets) {
        run::RunOptions o;
        o.pipeline = spec;
        o.budget = bud;
        Config c;
        c.pipeline = run::make_pipeline(registry, o);
        c.spec = c.pipeline ? c.pipeline->canonical() : "";
        c.budget = bud;
        configs.push_back(std::move(c));
      }
    }
    const std::vector<std::string> devices = parse_devices(a->devices);
    run::load_options(devices.empty() ? a->device : "cpu", a->dtype);  // (workers check their own device)
    const auto [shard, n_shards] = parse_shard(a->shard);
    if (!a->emit_slurm.empty()) {
      if (a->db.empty()) throw InputError("eval --emit-slurm: each task writes a database; give --db");
      namespace fs = std::filesystem;
      auto q = [](const std::string& s) { return shell_quote(s); };
      auto abs = [&](const std::string& p) { return q(fs::absolute(p).string()); };
      std::ostringstream cmdline;
      cmdline << "kvscope-cli eval "
              << (a->random_init.empty() ? "--model " + abs(a->model) : "--random-init " + abs(a->random_init));
      if (!a->tokenizer.empty()) cmdline << " --tokenizer " << abs(a->tokenizer);
      cmdline << " --device " << q(a->device == "cpu" ? "cuda" : a->device) << " --dtype " << q(a->dtype);
      if (!a->data.empty()) cmdline << " --data " << abs(a->data);
      if (!a->task.empty()) {
        cmdline << " --task " << q(a->task) << " --n " << a->n << " --seed " << a->seed;
        for (int64_t l : a->lengths) cmdline << " --length " << l;
        for (const auto& e : a->essays) cmdline << " --essays " << abs(e);
        for (const auto& c : a->code) cmdline << " --code " << abs(c);
        for (double d : a->depths) cmdline << " --depth " << format_number(d);
        if (!a->haystack.empty()) cmdline << " --haystack " << q(a->haystack);
        if (a->remove_newline_tab) cmdline << " --remove-newline-tab";
        if (a->turns > 0) cmdline << " --turns " << a->turns;
        if (!a->words.empty()) cmdline << " --words " << abs(a->words);
        if (!a->wordnet.empty()) cmdline << " --wordnet " << abs(a->wordnet);
        if (a->plain) cmdline << " --plain";
      }
      for (const auto& p : a->pipelines) cmdline << " --pipeline " << q(p);
      for (double r : a->ratios) cmdline << " --compression-ratio " << format_number(r);
      for (double b : a->budgets) cmdline << " --budget " << format_number(b);
      if (!a->budgets.empty()) cmdline << " --budget-unit " << q(a->budget_unit);
      cmdline << (a->aware ? " --question-aware" : " --question-agnostic") << " --capture " << q(a->capture);
      if (!a->name.empty()) cmdline << " --name " << q(a->name);
      const std::string db = fs::absolute(a->db).string();
      std::ofstream out(a->emit_slurm);
      if (!out) throw InputError(a->emit_slurm, "cannot be written");
      out << "#!/bin/bash\n#SBATCH --job-name=kvscope-eval\n#SBATCH --array=0-" << n_shards - 1
          << "\n#SBATCH --gres=gpu:1\n#SBATCH --output=kvscope-eval-%a.log\n"
          << "# One shard per task, one database per shard; afterwards:\n"
          << "#   kvscope-cli merge --out " << q(db) << " " << q(db) << ".shard-*.db\n"
          << "set -euo pipefail\n"
          << cmdline.str() << " --db " << q(db) << ".shard-${SLURM_ARRAY_TASK_ID}.db --shard ${SLURM_ARRAY_TASK_ID}/"
          << n_shards << "\n";
      std::cout << "wrote " << a->emit_slurm << " (" << n_shards << " tasks)\n";
      return 0;
    }
    const auto t_load = std::chrono::steady_clock::now();
    const std::string first_device = devices.empty() ? a->device : devices[0];
    // The model on `device`: --model's, or random weights of --random-init's shape with --tokenizer's.
    // Several devices: each worker process loads its own after the fork (CUDA does not survive a
    // fork); this process reads the samples with the model on the meta device (no weights).
    const bool workers = devices.size() > 1;
    auto load = [&](const std::string& device, bool meta) {
      LoadOptions o = run::load_options(meta ? "cpu" : device, a->dtype, a->tokenizer);
      if (meta) o.device = c10::Device(c10::kMeta);
      if (a->random_init.empty()) return load_model(a->model, o);
      Model m = random_init_model(a->random_init, o);
      m.tokenizer = load_tokenizer(a->tokenizer);
      return m;
    };
    Model model = load(first_device, /*meta=*/workers);
    const std::unique_ptr<ChatTemplate> tmpl = model_template(run::chat_template_location(a->model, a->tokenizer));

    // The samples, and where their data came from (part of every item's key).
    std::vector<EvalSample> samples;
    std::string source;
    if (!a->data.empty()) {
      samples = load_eval_samples(a->data);
      std::ifstream in(a->data, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      source = "data=" + std::filesystem::weakly_canonical(a->data).string() + "#" + fnv1a_hex(bytes.str());
    } else {
      RulerTaskOptions o;
      o.task = a->task;
      o.seed = a->seed;
      o.n = a->n;
      for (const auto& e : a->essays) o.essay_files.emplace_back(e);
      for (const auto& c : a->code) o.code_files.emplace_back(c);
      o.haystack = a->haystack;
      if (!a->words.empty()) o.words_file = a->words;
      if (!a->wordnet.empty()) o.wordnet_dir = a->wordnet;
      o.depths = a->depths;
      o.remove_newline_tab = a->remove_newline_tab;
      o.chat = !a->plain && tmpl != nullptr;
      o.turns = a->turns;
      // Sizing counts every turn: the prompt, each later turn's tokens and its answer.
      const PromptTokenCounter count = [&](const EvalSample& s) {
        const run::EvalPrompt p = run::assemble_eval_prompt(model, tmpl.get(), s);
        auto n = static_cast<int64_t>(p.ids.size());
        for (const auto& t : p.turn_ids) n += static_cast<int64_t>(t.size()) + s.max_new_tokens;
        return n;
      };
      for (int64_t len : a->lengths) {
        o.length = len;
        auto part = generate_ruler_samples(o, count);
        for (auto& s : part) samples.push_back(std::move(s));
      }
      std::ostringstream os;
      os << "task=" << a->task << "|seed=" << a->seed << "|n=" << a->n << "|chat=" << o.chat
         << "|haystack=" << a->haystack << (a->remove_newline_tab ? "|remove_newline_tab" : "")
         << (a->turns > 0 ? "|turns=" + std::to_string(a->turns) : std::string());
      for (const auto& e : a->essays) os << "|essay=" << std::filesystem::weakly_canonical(e).string();
      for (const auto& c : a->code) os << "|code=" << std::filesystem::weakly_canonical(c).string();
      for (double d : a->depths) os << "|depth=" << format_number(d);
      if (!a->words.empty()) os << "|words=" << std::filesystem::weakly_canonical(a->words).string();
      if (!a->wordnet.empty()) os << "|wordnet=" << std::filesystem::weakly_canonical(a->wordnet).string();
      source = os.str();
    }
    if (!a->write_samples.empty()) {
      std::ofstream out(a->write_samples);
      if (!out) throw InputError(a->write_samples, "cannot be written");
      for (const auto& s : samples) out << eval_sample_json(s) << "\n";
    }
    std::vector<run::EvalPrompt> prompts;
    for (const auto& s : samples) prompts.push_back(run::assemble_eval_prompt(model, tmpl.get(), s));
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

    // Items: samples outer, configs inner (every configuration's accuracy grows together).
    const uint64_t n_items = samples.size() * configs.size();
    std::string model_key = a->random_init.empty()
                                ? std::filesystem::weakly_canonical(a->model).string()
                                : "random:" + std::filesystem::weakly_canonical(a->random_init).string();
    if (!a->tokenizer.empty()) model_key += "+tokenizer=" + std::filesystem::weakly_canonical(a->tokenizer).string();
    auto item_key = [&](uint64_t i) {
      const Config& c = configs[i % configs.size()];
      return "eval1|" + model_key + "|" + source + "|" + std::string(run::question_mode_name(mode)) + "|" +
             dtype_name(parse_dtype(a->dtype)) + "|" + samples[i / configs.size()].id + "|" +
             (c.spec.empty() ? "full" : c.spec) + "|" +
             (c.budget ? std::string(budget_unit_name(c.budget->unit)) + "=" + format_number(c.budget->value)
                       : std::string("none"));
    };
    std::vector<Outcome> outcomes(n_items);
    const CaptureLevel capture = parse_capture_level(a->capture);
    const std::string eval_name =
        !a->name.empty() ? a->name : (a->data.empty() ? a->task : std::filesystem::path(a->data).filename().string());

    // Runs the items of this shard at offset, offset + stride, ... on `device`; returns failures.
    // seconds: the worker's own model build and the time its items took.
    // phases: where the items' time went (the "seconds" of eval --json): the shared prefills, then
    // summed over the items their prefill (or compression of the shared one) and question, decode
    // steps, the rest of generation (copying the shared cache, capturing the decode graph) and
    // recording in the store.
    struct WorkerSeconds {
      double load = 0, items = 0;
      double shared_prefill = 0, prefill = 0, decode = 0, setup = 0, record = 0;
    };
    auto run_items = [&](const std::string& device, uint64_t offset, uint64_t stride, WorkerSeconds& seconds) -> int {
      const auto t_worker = std::chrono::steady_clock::now();
      // The current device for this process's kernels and CUDA graphs (a --devices worker on cuda:1).
      std::optional<c10::DeviceGuard> on_device;
      if (c10::Device(device).is_cuda()) on_device.emplace(c10::Device(device));
      std::optional<sessions::SessionStore> store;
      std::map<std::string, sessions::RunRow> finished;
      if (!a->db.empty()) {
        store.emplace(sessions::SessionStore::open(a->db));
        for (auto& row : store->list_runs())
          if (row.status == sessions::RunStatus::kComplete && row.sweep_key && row.sweep_key->starts_with("eval1|"))
            finished[*row.sweep_key] = row;
      }
      std::optional<Model> own;
      if (workers) own.emplace(load(device, /*meta=*/false));
      const Engine engine(own ? *own : model);
      seconds.load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_worker).count();
      std::vector<uint64_t> mine;
      for (uint64_t i = shard, j = 0; i < n_items; i += n_shards, ++j)
        if (j % stride == offset) mine.push_back(i);
      // Prefill once, compress many: what a sample's pipelines compress (its context, question-
      // agnostic; the whole prompt, question-aware) is prefilled once for every configuration that
      // can compress a copy of it (Pipeline::prefill_queries), when two or more of them still have
      // to run.
      auto shareable = [&](const Config& c) { return c.pipeline && c.pipeline->prefill_queries() >= 0; };
      bool sliding = false;
      for (int64_t l = 0; l < model.config.n_layer; ++l) sliding = sliding || model.config.window(l) > 0;
      std::map<size_t, int> to_share;  // sample -> shareable items of it still to run
      for (uint64_t i : mine)
        if (!sliding && shareable(configs[i % configs.size()]) && !finished.count(item_key(i)))
          ++to_share[i / configs.size()];
      int64_t n_queries = store ? 32 : 0;  // the capture's observation window (GenerateRequest::capture_window)
      int64_t reserve = 1;
      for (const Config& c : configs)
        if (shareable(c)) n_queries = std::max(n_queries, c.pipeline->prefill_queries());
      for (const EvalSample& s : samples) reserve = std::max(reserve, s.max_new_tokens + 1);
      std::optional<SharedPrefill> shared;
      size_t shared_sample = SIZE_MAX;
      const bool tty = ::isatty(2);
      const auto t0 = std::chrono::steady_clock::now();
      auto last_line = t0;
      uint64_t done = 0, ran = 0, failed = 0;
      double score_sum = 0;
      for (uint64_t i : mine) {
        Outcome& o = outcomes[i];
        const std::string key = item_key(i);
        if (auto f = finished.find(key); f != finished.end()) {
          o = recorded_outcome(*store, f->second);
        } else {
          const Config& c = configs[i % configs.size()];
          const size_t si = i / configs.size();
          run::EvalItem item{&samples[si], &prompts[si], c.pipeline.get(), c.budget, mode};
          try {
            if (shareable(c) && to_share[si] >= 2) {
              if (shared_sample != si) {
                const run::EvalPrompt& p = prompts[si];
                shared.reset();  // the previous sample's cache goes before this one is allocated
                const auto t_shared = std::chrono::steady_clock::now();
                shared.emplace(prefill_shared(engine, run::compressed_prompt(p, mode), n_queries,
                                              static_cast<int64_t>(p.ids.size()) + reserve));
                seconds.shared_prefill +=
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t_shared).count();
                shared_sample = si;
              }
              item.shared = &*shared;
            }
            const run::EvalRunResult res =
                run::run_eval_item(engine, registry, item, store ? &*store : nullptr,
                                   eval_name + " / " + samples[si].id + " / " + c.label(), key, capture);
            seconds.prefill += res.timing.prefill_ms / 1e3;
            seconds.decode += res.timing.decode_ms / 1e3;
            seconds.setup += (res.timing.generate_ms - res.timing.prefill_ms - res.timing.decode_ms) / 1e3;
            seconds.record += res.timing.record_ms / 1e3;
            o.output = res.output;
            o.score = res.score;
            o.turn_outputs = res.turn_outputs;
            o.turn_scores = res.turn_scores;
            o.run_id = res.run_id;
            if (!res.needle_kept.empty()) {
              double m = 0;
              for (float v : res.needle_kept) m += v;
              o.needle_kept = m / double(res.needle_kept.size());
            }
            o.done = true;
          } catch (const std::exception& e) {
            o.error = run::error_message(e);
            ++failed;
            std::cerr << (tty ? "\n" : "") << "eval: " << samples[si].id << " under " << c.label()
                      << " failed: " << o.error << "\n";
          }
          ++ran;
        }
        ++done;
        score_sum += o.score;
        const auto now = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(now - t0).count();
        const double rate = ran > 0 ? ran / std::max(s, 1e-9) : 0;  // items run (not resumed) per second
        const double eta = rate > 0 ? double(mine.size() - done) / rate : NAN;
        char line[256];
        std::snprintf(line, sizeof(line), "[%llu/%llu] mean score %.3f, %.2f samples/min, ETA %s",
                      static_cast<unsigned long long>(done), static_cast<unsigned long long>(mine.size()),
                      score_sum / double(done), rate * 60, hms(eta).c_str());
        if (tty) {
          std::fprintf(stderr, "\r%s%s   ", stride > 1 ? (device + " ").c_str() : "", line);
        } else if (std::chrono::duration<double>(now - last_line).count() >= 10 || done == mine.size()) {
          std::fprintf(stderr, "eval%s: %s\n", stride > 1 ? (" (" + device + ")").c_str() : "", line);
          last_line = now;
        }
      }
      if (tty) std::fprintf(stderr, "\n");
      seconds.items = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return failed ? 1 : 0;
    };

    const auto t_run = std::chrono::steady_clock::now();
    int rc = 0;
    // Seconds as reported: the workers' model builds count as load, and the items take as long as
    // the slowest worker's (as a reference that excludes its model build is timed).
    double worker_load_s = 0, run_s = 0;
    WorkerSeconds slowest;  // the phases of the worker that took longest
    if (devices.size() <= 1) {
      rc = run_items(first_device, 0, 1, slowest);
      run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();
    } else {
      std::vector<pid_t> children;
      std::vector<int> timings;  // a pipe's read end per worker: its WorkerSeconds
      for (size_t d = 0; d < devices.size(); ++d) {
        int fds[2] = {-1, -1};
        if (::pipe(fds) != 0) throw std::runtime_error("eval --devices: cannot create a pipe for a worker");
        const pid_t pid = ::fork();
        if (pid == 0) {
          ::close(fds[0]);
          WorkerSeconds ws;
          const int failed = run_items(devices[d], d, devices.size(), ws);
          [[maybe_unused]] const ssize_t n = ::write(fds[1], &ws, sizeof ws);
          ::_exit(failed);
        }
        ::close(fds[1]);
        children.push_back(pid);
        timings.push_back(fds[0]);
      }
      int status = 0;
      for (size_t d = 0; d < children.size(); ++d) {
        WorkerSeconds ws;
        if (::read(timings[d], &ws, sizeof ws) == static_cast<ssize_t>(sizeof ws)) {
          worker_load_s = std::max(worker_load_s, ws.load);
          if (ws.items >= run_s) slowest = ws;
          run_s = std::max(run_s, ws.items);
        }
        ::close(timings[d]);
        ::waitpid(children[d], &status, 0);
        rc |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      }
      // The workers' outcomes are in the database.
      auto store = sessions::SessionStore::open(a->db, sessions::OpenMode::kReadOnly);
      std::map<std::string, sessions::RunRow> finished;
      for (auto& row : store.list_runs())
        if (row.status == sessions::RunStatus::kComplete && row.sweep_key) finished[*row.sweep_key] = row;
      for (uint64_t i = shard; i < n_items; i += n_shards)
        if (auto f = finished.find(item_key(i)); f != finished.end()) outcomes[i] = recorded_outcome(store, f->second);
    }

    // Results per configuration over the items of this shard.
    nlohmann::ordered_json results = nlohmann::ordered_json::array();
    std::ofstream csv;
    if (!a->csv.empty()) {
      csv.open(a->csv);
      if (!csv) throw InputError(a->csv, "cannot be written");
      csv << "pipeline,budget_unit,budget,mode,sample,task,length,score,needle_kept,run_id,output,error\n";
    }
    auto csv_field = [](const std::string& s) {
      std::string q = "\"";
      for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      return q + "\"";
    };
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const Config& c = configs[ci];
      nlohmann::ordered_json r;
      r["pipeline"] = c.spec.empty() ? "full" : c.spec;
      r["budget"] = c.budget ? nlohmann::ordered_json(c.budget->value) : nlohmann::ordered_json(nullptr);
      r["budget_unit"] =
          c.budget ? nlohmann::ordered_json(budget_unit_name(c.budget->unit)) : nlohmann::ordered_json(nullptr);
      r["mode"] = run::question_mode_name(mode);
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      double sum = 0;
      int64_t n = 0;
      std::map<std::string, std::pair<double, int64_t>> per_task;
      for (size_t si = 0; si < samples.size(); ++si) {
        const uint64_t i = si * configs.size() + ci;
        if (i % n_shards != shard) continue;
        const Outcome& o = outcomes[i];
        nlohmann::ordered_json row;
        row["id"] = samples[si].id;
        row["task"] = samples[si].task;
        row["length"] = samples[si].length;
        row["output"] = o.output;
        row["score"] = o.score;
        if (!o.turn_scores.empty()) {
          row["turns"] = nlohmann::ordered_json::array();
          for (size_t t = 0; t < o.turn_scores.size(); ++t)
            row["turns"].push_back(
                {{"output", t < o.turn_outputs.size() ? o.turn_outputs[t] : ""}, {"score", o.turn_scores[t]}});
        }
        if (o.needle_kept >= 0) row["needle_kept"] = o.needle_kept;
        if (o.run_id >= 0) row["run_id"] = o.run_id;
        if (!o.error.empty()) row["error"] = o.error;
        rows.push_back(row);
        sum += o.score;
        ++n;
        auto& t = per_task[samples[si].task];
        t.first += o.score;
        ++t.second;
        if (csv.is_open())
          csv << csv_field(r["pipeline"].get<std::string>()) << ","
              << (c.budget ? budget_unit_name(c.budget->unit) : "") << ","
              << (c.budget ? format_number(c.budget->value) : "") << "," << run::question_mode_name(mode) << ","
              << csv_field(samples[si].id) << "," << csv_field(samples[si].task) << "," << samples[si].length << ","
              << o.score << "," << (o.needle_kept >= 0 ? format_number(o.needle_kept) : "") << ","
              << (o.run_id >= 0 ? std::to_string(o.run_id) : "") << "," << csv_field(o.output) << ","
              << csv_field(o.error) << "\n";
      }
      r["score"] = n ? sum / double(n) : 0.0;
      nlohmann::ordered_json tasks = nlohmann::ordered_json::object();
      for (const auto& [t, v] : per_task) tasks[t.empty() ? "-" : t] = v.first / double(v.second);
      r["tasks"] = tasks;
      r["samples"] = rows;
      results.push_back(r);
    }
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->random_init.empty() ? a->model : "random:" + a->random_init;
      j["mode"] = run::question_mode_name(mode);
      // load: model and samples (+ the slowest worker's model build); run: the items
      j["seconds"] = {{"load", load_s + worker_load_s},
                      {"run", run_s},
                      {"phases",
                       {{"shared_prefill", slowest.shared_prefill},
                        {"prefill", slowest.prefill},
                        {"decode", slowest.decode},
                        {"setup", slowest.setup},
                        {"record", slowest.record}}}};
      j["results"] = results;
      std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "evaluation of " << samples.size() << " samples (" << run::question_mode_name(mode) << ", "
                << (a->random_init.empty() ? a->model : "random weights of " + a->random_init) << ", loaded in "
                << format_number(std::round(load_s * 10) / 10) << " s)\n";
      for (size_t ci = 0; ci < configs.size(); ++ci)
        std::printf("  %-60s score %.3f\n", configs[ci].label().c_str(), results[ci]["score"].get<double>());
      std::printf("items ran in %.1f s: shared prefill %.1f, prefill %.1f, decode %.1f, setup %.1f, record %.1f%s\n",
                  run_s, slowest.shared_prefill, slowest.prefill, slowest.decode, slowest.setup, slowest.record,
                  devices.size() > 1 ? " (the slowest device)" : "");
      if (!a->db.empty()) std::cout << "runs recorded in " << a->db << "\n";
    }
    return rc;
  };
}

}  // namespace kvscope::cli
