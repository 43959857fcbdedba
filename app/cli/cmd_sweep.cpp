// kvscope-cli sweep: models x prompts x pipelines x budgets into one session database; resumable
// (finished runs are skipped by their sweep key), shardable (--shard i/n), several GPUs (--devices),
// and a Slurm array script (--emit-slurm).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "commands.h"
#include "fault_injection.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/pipeline.h"
#include "run_options.h"
#include "session_record.h"
#include "sweep_grid.h"

namespace kvscope::cli {
namespace {

struct Item {
  std::string model, prompt, pipeline;
  std::optional<double> budget;  ///< none for a pipeline that uses no budget (one run, not one per value)
  std::string key(const Grid& g, const std::string& device) const {
    std::ostringstream os;
    os << model << "|" << prompt << "|" << pipeline << "|" << g.budget_unit << "=";
    if (budget)
      os << *budget;
    else
      os << "none";
    os << "|new=" << g.max_new_tokens << "|" << g.dtype << "|bos=" << g.bos << "|ref=" << g.reference_full;
    (void)device;  // the same run on another GPU is the same run
    return os.str();
  }
};

std::string hms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d", int(s / 3600), int(s / 60) % 60, int(s) % 60);
  return buf;
}

/// Runs the items with index % stride == offset on `device`. Returns the number of failures.
int run_items(const PolicyRegistry& registry, const Grid& g, const std::vector<Item>& items, size_t offset,
              size_t stride, const std::string& device, const std::string& db) {
  auto store = sessions::SessionStore::open(db);
  std::map<std::string, std::unique_ptr<Model>> models;
  size_t todo = 0, done = 0, skipped = 0, failed = 0;
  for (size_t i = offset; i < items.size(); i += stride) ++todo;
  const bool tty = ::isatty(2);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = offset; i < items.size(); i += stride) {
    const Item& it = items[i];
    const std::string key = it.key(g, device);
    if (store.find_by_sweep_key(key)) {
      ++skipped;
      continue;
    }
    try {
      run::RunOptions options;
      options.prompt_text = run::read_prompt_file(it.prompt);
      options.bos = run::parse_bos_mode(g.bos);
      options.pipeline = it.pipeline;
      if (it.budget) options.budget = BudgetSpec{parse_budget_unit(g.budget_unit), *it.budget};
      options.max_new_tokens = g.max_new_tokens;
      options.reference_full = g.reference_full;
      options.capture = parse_capture_level(g.capture);
      options.allow_beyond_context = g.allow_beyond_context;
      const std::unique_ptr<Pipeline> pipeline = run::make_pipeline(registry, options);
      auto& model = models[it.model];
      if (!model) model = std::make_unique<Model>(load_model(it.model, run::load_options(device, g.dtype)));
      const Engine engine(*model);
      GenerateRequest req = run::make_request(*model, pipeline.get(), options);
      req.fault_hook = fault_hook_from_environment();
      int64_t run = -1;
      const std::string name = std::filesystem::path(it.prompt).filename().string() + " / " + it.pipeline;
      run::generate_into_store(store, engine, pipeline.get(), registry, req, options.prompt_text, name, key, run);
    } catch (const std::exception& e) {
      ++failed;
      std::cerr << (tty ? "\n" : "") << "sweep: item " << i << " failed: " << e.what() << "\n";
    }
    ++done;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = done / std::max(s, 1e-9);
    const size_t left = todo - done - skipped;
    if (tty)
      std::fprintf(stderr, "\r[%zu/%zu] %.2f runs/min, ETA %s   ", done + skipped, todo, rate * 60,
                   hms(left / rate).c_str());
  }
  if (tty) std::fprintf(stderr, "\n");
  std::cerr << "sweep" << (stride > 1 ? " (" + device + ")" : "") << ": " << done - failed << " runs recorded, "
            << skipped << " already done, " << failed << " failed\n";
  return int(failed);
}

}  // namespace

Runner add_sweep(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("sweep", "Run a grid of models x prompts x pipelines x budgets into a session database");
  struct Args {
    std::string grid, db, shard, devices, emit_slurm;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("GRID", a->grid, "Sweep grid (TOML)")->required();
  cmd->add_option("--db", a->db, "Session database")->required();
  cmd->add_option("--shard", a->shard, "i/n: run only every n-th item starting at i");
  cmd->add_option("--devices", a->devices, "Comma-separated CUDA device ids: one worker process per GPU");
  cmd->add_option("--emit-slurm", a->emit_slurm,
                  "Write a Slurm array script (one shard per task, one database per shard)");
  return [a]() {
    const Grid g = parse_grid(a->grid);
    PolicyRegistry registry;
    register_builtin_policies(registry);
    // A pipeline that uses no budget (a head pattern) runs once, not once per budget value.
    std::vector<bool> uses_budget;
    for (const auto& pl : g.pipelines) {
      bool uses = true;  // a bad SPEC fails item by item below, as any run does
      try {
        uses = pipeline_uses_budget(resolve_pipeline(registry.catalog(), pl));
      } catch (const InputError&) {
      }
      uses_budget.push_back(uses);
    }
    std::vector<Item> items;
    for (const auto& m : g.models)
      for (const auto& p : g.prompts)
        for (size_t i = 0; i < g.pipelines.size(); ++i) {
          if (!uses_budget[i])
            items.push_back({m, p, g.pipelines[i], std::nullopt});
          else
            for (double b : g.budgets) items.push_back({m, p, g.pipelines[i], b});
        }
    size_t shard = 0, n_shards = 1;
    if (!a->shard.empty()) {
      if (std::sscanf(a->shard.c_str(), "%zu/%zu", &shard, &n_shards) != 2 || n_shards == 0 || shard >= n_shards)
        throw InputError("--shard must be i/n with 0 <= i < n (got '" + a->shard + "')");
    }
    if (!a->emit_slurm.empty()) {
      const size_t tasks = std::max<size_t>(n_shards, 1);
      std::ofstream out(a->emit_slurm);
      if (!out) throw InputError(a->emit_slurm, "cannot be written");
      out << "#!/bin/bash\n#SBATCH --job-name=kvscope-sweep\n#SBATCH --array=0-" << tasks - 1
          << "\n#SBATCH --gres=gpu:1\n#SBATCH --output=kvscope-sweep-%a.log\n"
          << "# One shard per task, one database per shard; afterwards:\n"
          << "#   kvscope-cli merge --out " << a->db << " " << a->db << ".shard-*.db\n"
          << "set -euo pipefail\n"
          << "kvscope-cli sweep '" << std::filesystem::absolute(a->grid).string() << "' --db '" << a->db
          << ".shard-${SLURM_ARRAY_TASK_ID}.db' --shard ${SLURM_ARRAY_TASK_ID}/" << tasks << "\n";
      std::cout << "wrote " << a->emit_slurm << " (" << tasks << " tasks, " << items.size() << " runs)\n";
      return 0;
    }
    // Keep this shard's items, then spread them over the GPUs.
    std::vector<Item> mine;
    for (size_t i = shard; i < items.size(); i += n_shards) mine.push_back(items[i]);
    std::vector<std::string> devices;
    std::stringstream ss(a->devices);
    for (std::string d; std::getline(ss, d, ',');) devices.push_back("cuda:" + d);
    if (devices.size() <= 1)
      return run_items(registry, g, mine, 0, 1, devices.empty() ? g.device : devices[0], a->db) ? 1 : 0;
    std::vector<pid_t> children;
    for (size_t d = 0; d < devices.size(); ++d) {
      const pid_t pid = ::fork();
      if (pid == 0) ::_exit(run_items(registry, g, mine, d, devices.size(), devices[d], a->db) ? 1 : 0);
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
