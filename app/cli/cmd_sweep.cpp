// kvscope-cli sweep: models x prompts x pipelines x budgets into one session database; resumable
// (finished runs are skipped by their sweep key), shardable (--shard i/n), several GPUs (--devices),
// and a Slurm array script (--emit-slurm).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <c10/core/DeviceGuard.h>

#include "chat_prompt.h"
#include "commands.h"
#include "fault_injection.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/pipeline.h"
#include "run_options.h"
#include "session_record.h"
#include "shell_quote.h"
#include "sweep_grid.h"
#include "work_split.h"

namespace kvscope::cli {
namespace {

/// A grid with what the sweep derives from it once: pipelines resolved, canonical names.
struct Plan {
  Grid g;
  std::vector<GridPipeline> pipelines;
  std::string unit;   ///< canonical budget unit name
  std::string dtype;  ///< canonical dtype name
  uint64_t per_model_prompt = 0;
  std::vector<uint64_t> first;            ///< index of each pipeline's first run within a (model, prompt) block
  uint64_t size = 0;                      ///< runs in the grid
  std::vector<std::string> prompt_texts;  ///< the text of each prompt file, read (and checked) once
  /// Chat prompts (--chat, --messages): chat[model][prompt], rendered once with each model's chat
  /// template; empty without them.
  std::vector<std::vector<run::ChatPrompt>> chat;
  std::string chat_key;   ///< what the chat flags add to every sweep key ("" without them)
  std::string turns_key;  ///< what the grid's later turns add to every sweep key ("" without them)
};

/// The chat flags of a sweep: each prompt file as one user message (--chat, after --system's system
/// message), or one conversation as the prompt of every run (--messages).
struct ChatArgs {
  bool chat = false;
  std::optional<std::string> system;
  std::string messages;
  bool any() const { return chat || !messages.empty(); }
};

/// One run of the grid (indices into its lists).
struct Item {
  size_t model = 0, prompt = 0, pipeline = 0;
  std::optional<size_t> budget;  ///< none for a pipeline that uses no budget (one run, not one per value)
};

/// Run `i` of the grid in its order: models, then prompts, then pipelines, then budgets.
Item item_at(const Plan& p, uint64_t i) {
  Item it;
  const uint64_t block = i / p.per_model_prompt, r = i % p.per_model_prompt;
  it.model = block / p.g.prompts.size();
  it.prompt = block % p.g.prompts.size();
  it.pipeline = size_t(std::upper_bound(p.first.begin(), p.first.end(), r) - p.first.begin()) - 1;
  if (p.pipelines[it.pipeline].uses_budget) it.budget = r - p.first[it.pipeline];
  return it;
}

/// The sweep key (format 2): canonical absolute paths, canonical pipeline SPEC, unit and dtype, and
/// the budget's shortest exact decimal form. The same run on another GPU is the same run.
std::string key(const Plan& p, const Item& it) {
  const Grid& g = p.g;
  return "v2|" + g.models[it.model] + "|" + g.prompts[it.prompt] + "|" + p.pipelines[it.pipeline].spec + "|" + p.unit +
         "=" + (it.budget ? format_number(g.budgets[*it.budget]) : "none") +
         "|new=" + std::to_string(g.max_new_tokens) + "|" + p.dtype + "|bos=" + g.bos +
         "|ref=" + (g.reference_full ? "1" : "0") + p.chat_key + p.turns_key;
}

/// 64-bit FNV-1a of `text` in hex: a stable short name for a system message in sweep keys.
std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

/// The key as kvscope wrote it before format 2: paths as the grid's folder was named on the
/// command line, SPEC, unit and dtype as written, the budget with 6 significant digits.
std::string legacy_key(const Plan& p, const Item& it) {
  const Grid& g = p.g;
  std::ostringstream os;
  os << g.legacy_models[it.model] << "|" << g.legacy_prompts[it.prompt] << "|" << g.pipelines[it.pipeline] << "|"
     << g.budget_unit << "=";
  if (it.budget)
    os << g.budgets[*it.budget];
  else
    os << "none";
  os << "|new=" << g.max_new_tokens << "|" << g.dtype << "|bos=" << g.bos << "|ref=" << g.reference_full;
  return os.str();
}

/// Complete runs with an old-format key: key -> the budgets they ran with. A legacy key matches a
/// run only if the budget recorded with it is exactly this run's (6 digits made 3.0000001 and
/// 3.0000002 one key).
using LegacyRuns = std::map<std::string, std::vector<double>>;

LegacyRuns legacy_runs(const sessions::SessionStore& store) {
  LegacyRuns out;
  for (const auto& r : store.list_runs())
    if (r.status == sessions::RunStatus::kComplete && r.sweep_key && r.sweep_key->rfind("v2|", 0) != 0)
      out[*r.sweep_key].push_back(r.budget.value);
  return out;
}

bool done_before(const Plan& p, const Item& it, const LegacyRuns& legacy) {
  if (legacy.empty()) return false;
  const auto found = legacy.find(legacy_key(p, it));
  if (found == legacy.end()) return false;
  if (!it.budget) return true;
  const double b = p.g.budgets[*it.budget];
  return std::find(found->second.begin(), found->second.end(), b) != found->second.end();
}

std::string hms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d", int(s / 3600), int(s / 60) % 60, int(s) % 60);
  return buf;
}

/// Runs this shard's items (grid indices shard, shard + n_shards, ...) whose position among them
/// is offset, offset + stride, ... on `device`. Returns the number of failures.
int run_items(const PolicyRegistry& registry, const Plan& plan, uint64_t shard, uint64_t n_shards, uint64_t offset,
              uint64_t stride, const std::string& device, const std::string& db) {
  // The current device for this process's kernels and CUDA graphs (a --devices worker on cuda:1).
  std::optional<c10::DeviceGuard> on_device;
  if (c10::Device(device).is_cuda()) on_device.emplace(c10::Device(device));
  const Grid& g = plan.g;
  auto store = sessions::SessionStore::open(db);
  const LegacyRuns legacy = legacy_runs(store);
  std::map<std::string, std::unique_ptr<Model>> models;
  const uint64_t mine = plan.size > shard ? (plan.size - shard + n_shards - 1) / n_shards : 0;
  uint64_t todo = 0, done = 0, skipped = 0, failed = 0;
  for (uint64_t j = offset; j < mine; j += stride) ++todo;
  const bool tty = ::isatty(2);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t j = offset; j < mine; j += stride) {
    const uint64_t i = shard + j * n_shards;
    const Item it = item_at(plan, i);
    const std::string k = key(plan, it);
    if (store.find_by_sweep_key(k) || done_before(plan, it, legacy)) {
      ++skipped;
      continue;
    }
    const std::string& model_path = g.models[it.model];
    const std::string& prompt = g.prompts[it.prompt];
    try {
      run::RunOptions options;
      options.prompt_text = plan.prompt_texts[it.prompt];
      if (!plan.chat.empty()) {
        options.chat = plan.chat[it.model][it.prompt];
        options.prompt_text = options.chat->text;
      }
      options.bos = run::parse_bos_mode(g.bos);
      options.pipeline = plan.pipelines[it.pipeline].spec;
      if (it.budget) options.budget = BudgetSpec{parse_budget_unit(g.budget_unit), g.budgets[*it.budget]};
      options.max_new_tokens = g.max_new_tokens;
      options.follow_up_turns = g.turns;
      options.reference_full = g.reference_full;
      options.capture = parse_capture_level(g.capture);
      if (!g.pin.empty()) options.pinned_heads = run::parse_pinned_heads(g.pin);
      options.allow_beyond_context = g.allow_beyond_context;
      const std::unique_ptr<Pipeline> pipeline = run::make_pipeline(registry, options);
      auto& model = models[model_path];
      if (!model) model = std::make_unique<Model>(load_model(model_path, run::load_options(device, g.dtype)));
      const Engine engine(*model);
      GenerateRequest req = run::make_request(*model, pipeline.get(), options);
      req.fault_hook = fault_hook_from_environment();
      int64_t run = -1;
      const std::string name = std::filesystem::path(prompt).filename().string() + " / " + g.pipelines[it.pipeline];
      run::generate_into_store(store, engine, pipeline.get(), registry, req, run::recorded_prompt(options), name, k,
                               run);
    } catch (const std::exception& e) {
      ++failed;
      std::cerr << (tty ? "\n" : "") << "sweep: item " << i << " failed: " << e.what() << "\n";
    }
    ++done;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = done / std::max(s, 1e-9);
    const uint64_t left = todo - done - skipped;
    if (tty)
      std::fprintf(stderr, "\r[%llu/%llu] %.2f runs/min, ETA %s   ", static_cast<unsigned long long>(done + skipped),
                   static_cast<unsigned long long>(todo), rate * 60, hms(left / rate).c_str());
  }
  if (tty) std::fprintf(stderr, "\n");
  std::cerr << "sweep" << (stride > 1 ? " (" + device + ")" : "") << ": " << done - failed << " runs recorded, "
            << skipped << " already done, " << failed << " failed\n";
  return int(std::min<uint64_t>(failed, 1));
}

/// Parses the grid and checks every value of every axis, and the size, before anything runs.
Plan plan_sweep(const PolicyRegistry& registry, const std::string& grid, uint64_t max_runs,
                const std::vector<std::string>& devices, const ChatArgs& chat) {
  if (chat.system && !chat.chat)
    throw InputError(chat.messages.empty() ? "--system without --chat: a system message goes before a chat prompt "
                                             "(add --chat)"
                                           : chat.messages +
                                                 ": --system goes with --chat; with --messages, put the "
                                                 "system message first in this file");
  if (chat.chat && !chat.messages.empty())
    throw InputError(chat.messages,
                     "--chat and --messages: --chat renders each of the grid's prompts as a user "
                     "message, --messages is the prompt of every run; give one of them");
  // A --messages file is read (and checked) before the grid: its errors name it.
  const nlohmann::ordered_json messages =
      chat.messages.empty() ? nlohmann::ordered_json() : run::read_chat_messages(chat.messages);
  Plan p;
  p.g = parse_grid(grid, chat.messages);
  const Grid& g = p.g;
  p.pipelines = resolve_grid_pipelines(g, registry.catalog());
  p.size = grid_run_count(g, p.pipelines);
  if (p.size > max_runs) {
    size_t with_budget = 0;
    for (const auto& pl : p.pipelines) with_budget += pl.uses_budget;
    std::ostringstream os;
    os << "the grid has "
       << (p.size == std::numeric_limits<uint64_t>::max() ? "more than 2^64 - 1"
                                                          : std::to_string(static_cast<unsigned long long>(p.size)))
       << " runs (" << g.models.size() << " models x " << g.prompts.size() << " prompts x (" << with_budget
       << " pipelines x " << g.budgets.size() << " budgets + " << p.pipelines.size() - with_budget
       << " pipelines without a budget)), more than --max-runs " << max_runs
       << "; shorten its lists, or raise --max-runs if you mean it";
    throw InputError(grid, os.str());
  }
  for (const auto& pl : p.pipelines) {
    p.first.push_back(p.per_model_prompt);
    p.per_model_prompt += pl.uses_budget ? g.budgets.size() : 1;
  }
  p.unit = std::string(budget_unit_name(parse_budget_unit(g.budget_unit)));
  // Device, dtype and capture as LibTorch and the run read them (the devices of --devices too).
  auto check = [&](const std::string& key, auto&& fn) {
    try {
      fn();
    } catch (const InputError& e) {
      throw InputError(g.where(key), "'" + key + "': " + e.what());
    }
  };
  check("dtype", [&] { p.dtype = dtype_name(parse_dtype(g.dtype)); });
  check("capture", [&] { parse_capture_level(g.capture); });
  if (!g.pin.empty()) check("pin", [&] { run::parse_pinned_heads(g.pin); });
  check("device", [&] { run::load_options(g.device, g.dtype); });
  // (--devices: each worker checks its device when it loads the model; CUDA must stay untouched here)
  check_grid_files(g);
  // Every prompt read once, here: text a run can use (no NUL bytes, UTF-8, a regular file under the
  // size cap). The runs take their text from the plan.
  for (size_t i = 0; i < g.prompts.size(); ++i) try {
      p.prompt_texts.push_back(chat.messages.empty() ? run::read_prompt_file(g.prompts[i]) : std::string());
    } catch (const InputError& e) {
      throw InputError(g.where(g.prompt_lines[i]), e.what());
    }
  if (chat.any()) {
    // Every prompt rendered with every model's chat template, here: a model without a template or a
    // template that refuses a message stops the sweep before the first run.
    if (g.bos != "auto")
      throw InputError(g.where("bos"), std::string("'bos': a chat prompt (") + (chat.chat ? "--chat" : "--messages") +
                                           ") takes its BOS from the chat template: remove 'bos' or set it to "
                                           "\"auto\"");
    for (size_t m = 0; m < g.models.size(); ++m) {
      auto& row = p.chat.emplace_back();
      try {
        const ChatTemplate tmpl = ChatTemplate::load(run::chat_template_location(g.models[m]));
        for (size_t i = 0; i < g.prompts.size(); ++i)
          row.push_back(
              run::render_chat(tmpl, chat.chat ? user_chat_messages(p.prompt_texts[i], chat.system) : messages, true));
      } catch (const InputError& e) {
        throw InputError(g.where(g.model_lines[m]), e.what());
      }
    }
    p.chat_key = chat.chat ? "|chat" + (chat.system ? "|system=" + fnv1a_hex(*chat.system) : std::string())
                           : std::string("|messages");
  }
  if (!g.turns.empty()) {
    if (!p.chat.empty())
      throw InputError(g.where("turns"),
                       "'turns' with --chat: later turns are not rendered with the chat template; give the whole "
                       "conversation with --messages");
    std::string joined;
    for (const std::string& t : g.turns) joined += t + '\0';
    p.turns_key = "|turns=" + std::to_string(g.turns.size()) + ":" + fnv1a_hex(joined);
  }
  // Each pipeline built once, with the first budget if it uses one (every budget is in range).
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    run::RunOptions options;
    options.pipeline = p.pipelines[i].spec;
    if (p.pipelines[i].uses_budget) options.budget = BudgetSpec{parse_budget_unit(g.budget_unit), g.budgets[0]};
    try {
      run::make_pipeline(registry, options);
    } catch (const InputError& e) {
      throw InputError(g.where(g.pipeline_lines[i]), "pipeline '" + g.pipelines[i] + "': " + e.what());
    }
  }
  return p;
}

}  // namespace

Runner add_sweep(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("sweep", "Run a grid of models x prompts x pipelines x budgets into a session database");
  struct Args {
    std::string grid, db, shard, devices, emit_slurm;
    uint64_t max_runs = 100000;
    ChatArgs chat;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("GRID", a->grid, "Sweep grid (TOML)")->required();
  cmd->add_option("--db", a->db, "Session database")->required();
  cmd->add_option("--shard", a->shard, "i/n: run only every n-th item starting at i");
  cmd->add_option("--devices", a->devices, "Comma-separated CUDA device ids: one worker process per GPU");
  cmd->add_option("--emit-slurm", a->emit_slurm,
                  "Write a Slurm array script (one shard per task, one database per shard)");
  cmd->add_option("--max-runs", a->max_runs,
                  "Refuse a grid of more runs than this, before anything runs (the whole grid, not one shard)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--chat", a->chat.chat,
                "Render each prompt as one user message with each model's chat template (and its generation prompt); "
                "the grid's bos must be auto");
  cmd->add_option("--system", a->chat.system, "With --chat: a system message before each prompt");
  cmd->add_option("--messages", a->chat.messages,
                  "JSON file: a list of {\"role\", \"content\"} messages, rendered as --chat renders one: the prompt "
                  "of every run (the grid then has no prompts)");
  return [a]() {
    PolicyRegistry registry;
    register_builtin_policies(registry);
    const auto [shard, n_shards] = parse_shard(a->shard);
    const std::vector<std::string> devices = parse_devices(a->devices);
    const Plan plan = plan_sweep(registry, a->grid, a->max_runs, devices, a->chat);
    if (!a->emit_slurm.empty()) {
      const uint64_t tasks = std::max<uint64_t>(n_shards, 1);
      std::ofstream out(a->emit_slurm);
      if (!out) throw InputError(a->emit_slurm, "cannot be written");
      out << "#!/bin/bash\n#SBATCH --job-name=kvscope-sweep\n#SBATCH --array=0-" << tasks - 1
          << "\n#SBATCH --gres=gpu:1\n#SBATCH --output=kvscope-sweep-%a.log\n"
          << "# One shard per task, one database per shard; afterwards:\n"
          << "#   kvscope-cli merge --out " << a->db << " " << a->db << ".shard-*.db\n"
          << "set -euo pipefail\n"
          << "kvscope-cli sweep '" << std::filesystem::absolute(a->grid).string() << "' --db '" << a->db
          << ".shard-${SLURM_ARRAY_TASK_ID}.db' --shard ${SLURM_ARRAY_TASK_ID}/" << tasks << " --max-runs "
          << a->max_runs << (a->chat.chat ? " --chat" : "")
          << (a->chat.system ? " --system " + shell_quote(*a->chat.system) : std::string())
          << (a->chat.messages.empty()
                  ? std::string()
                  : " --messages " + shell_quote(std::filesystem::absolute(a->chat.messages).string()))
          << "\n";
      std::cout << "wrote " << a->emit_slurm << " (" << tasks << " tasks, " << plan.size << " runs)\n";
      return 0;
    }
    if (devices.size() <= 1)
      return run_items(registry, plan, shard, n_shards, 0, 1, devices.empty() ? plan.g.device : devices[0], a->db);
    std::vector<pid_t> children;
    for (size_t d = 0; d < devices.size(); ++d) {
      const pid_t pid = ::fork();
      if (pid == 0) ::_exit(run_items(registry, plan, shard, n_shards, d, devices.size(), devices[d], a->db));
      children.push_back(pid);
    }
    int status = 0, failed = 0;
    for (pid_t p : children) {
      ::waitpid(p, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed ? 1 : 0;
  };
}

}  // namespace kvscope::cli
