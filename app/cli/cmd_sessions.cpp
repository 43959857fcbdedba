// kvscope-cli inspect / compare / merge / check: reading session databases.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>

#include "budget_text.h"
#include "commands.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope::cli {
namespace {

std::string fmt(double v) {
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    return buf;
  }
  std::snprintf(buf, sizeof(buf), std::abs(v) >= 1e5 || (v != 0 && std::abs(v) < 1e-3) ? "%.4g" : "%.4f", v);
  return buf;
}

/// kept_positions of every (layer, head) of a run, keyed by (layer, head).
std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> kept_sets(const sessions::SessionStore& s, int64_t run) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> out;
  for (const auto& b : s.load_blobs(run, "kept_positions")) out[{b.layer, b.head}] = b.values<int64_t>();
  return out;
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "List the runs of a session database, one line per run");
  auto db = std::make_shared<std::string>();
  cmd->add_option("FILE", *db, "Session database")->required();
  return [db]() {
    const auto store = sessions::SessionStore::open(*db, sessions::OpenMode::kReadOnly);
    for (const auto& r : store.list_runs()) {
      std::cout << r.id << "  " << (r.incomplete ? "incomplete" : std::string(sessions::to_string(r.status))) << "  "
                << (r.name.empty() ? "-" : r.name) << "  " << r.model_path << "  " << r.pipeline_spec << "  "
                << run::budget_label(run::kept_share(r));  // the kept share, whatever unit was given
      for (const char* m : {"n_prompt", "n_turns", "mean_kl", "top1_agreement", "kv_bytes_live", "decode_tokens_per_s",
                            "beyond_context_tokens"}) {
        auto it = r.summary.find(m);
        if (it != r.summary.end()) std::cout << "  " << m << "=" << fmt(it->second);
      }
      // A chat prompt (--chat, --messages): the template its prompt was rendered with.
      if (!r.chat_template.empty()) std::cout << "  chat_template=" << r.chat_template;
      std::cout << "\n";
    }
    return 0;
  };
}

Runner add_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "Metric deltas and per layer/head kept-set overlap of two runs");
  struct Args {
    std::string db;
    int64_t a = 0, b = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("FILE", args->db, "Session database")->required();
  cmd->add_option("RUN_A", args->a)->required();
  cmd->add_option("RUN_B", args->b)->required();
  return [args]() {
    const auto store = sessions::SessionStore::open(args->db, sessions::OpenMode::kReadOnly);
    const auto A = store.load_run(args->a), B = store.load_run(args->b);
    std::cout << "A = run " << args->a << ": " << A.info.pipeline.spec << "\nB = run " << args->b << ": "
              << B.info.pipeline.spec << "\n";
    if (A.info.prompt.tokens != B.info.prompt.tokens) std::cout << "note: the two runs have different prompts\n";
    std::cout << "\nmetric                      A            B        B - A\n";
    std::set<std::string> names;
    for (const auto& [k, v] : A.row.summary) names.insert(k);
    for (const auto& [k, v] : B.row.summary) names.insert(k);
    for (const auto& n : names) {
      const auto a = A.row.summary.find(n), b = B.row.summary.find(n);
      std::printf("%-22s %12s %12s %12s\n", n.c_str(), a == A.row.summary.end() ? "-" : fmt(a->second).c_str(),
                  b == B.row.summary.end() ? "-" : fmt(b->second).c_str(),
                  a == A.row.summary.end() || b == B.row.summary.end() ? "-" : fmt(b->second - a->second).c_str());
    }
    const auto ka = kept_sets(store, args->a), kb = kept_sets(store, args->b);
    if (ka.empty() || kb.empty()) return 0;
    std::cout << "\nkept-set overlap (Jaccard) per layer, KV heads left to right:\n";
    double sum = 0;
    int n = 0;
    int64_t last_layer = -1;
    for (const auto& [key, a] : ka) {
      auto it = kb.find(key);
      if (it == kb.end()) continue;
      std::vector<int64_t> inter;
      std::set_intersection(a.begin(), a.end(), it->second.begin(), it->second.end(), std::back_inserter(inter));
      const double uni = double(a.size() + it->second.size() - inter.size());
      const double j = uni > 0 ? inter.size() / uni : 1.0;
      if (key.first != last_layer) {
        std::cout << (last_layer >= 0 ? "\n" : "") << "layer " << key.first << ":";
        last_layer = key.first;
      }
      std::cout << " " << fmt(j);
      sum += j;
      ++n;
    }
    std::cout << "\nmean Jaccard " << fmt(n ? sum / n : 0.0) << " over " << n << " (layer, head) pairs\n";
    return 0;
  };
}

Runner add_merge(CLI::App& app) {
  auto* cmd = app.add_subcommand("merge", "Join shard databases (e.g. of a Slurm sweep) into one");
  auto out = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--out", *out, "Merged database")->required();
  cmd->add_option("INPUTS", *inputs, "Shard databases")->required();
  return [out, inputs]() {
    const auto rep = sessions::SessionStore::merge(*out, *inputs);
    std::cout << "merged into " << *out << ": " << rep.runs_copied << " runs copied, " << rep.runs_skipped
              << " skipped\n";
    return 0;
  };
}

Runner add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check",
      "Check a session database thoroughly (SQLite integrity, every blob's checksum, each run's rows); exit 2 "
      "on damage");
  auto db = std::make_shared<std::string>();
  cmd->add_option("FILE", *db, "Session database")->required();
  return [db]() {
    // Read-only: works on a read-only file or directory and never migrates or repairs.
    const auto store = sessions::SessionStore::open(*db, sessions::OpenMode::kReadOnly);
    const sessions::CheckReport rep = store.check();
    std::cout << *db << ": " << rep.runs << " runs, " << rep.blobs << " blobs (" << rep.blobs_verified
              << " checksum-verified";
    if (rep.blobs_unverified)
      std::cout << ", " << rep.blobs_unverified << " written before checksums: decoded, not verifiable";
    std::cout << ")\n";
    std::cout << "integrity_check: " << (rep.integrity == "ok" ? "ok" : "FAILED") << "\n";
    if (rep.integrity != "ok") std::cout << rep.integrity << "\n";
    for (const auto& p : rep.problems) std::cout << "damaged: " << p << "\n";
    if (rep.ok()) {
      std::cout << *db << ": ok\n";
      return 0;
    }
    const size_t n = rep.problems.size() + (rep.integrity == "ok" ? 0 : 1);
    std::cerr << "kvscope-cli: error: " << *db << ": damaged (" << n << (n == 1 ? " problem" : " problems")
              << ", listed above)\n";
    return 2;
  };
}

}  // namespace kvscope::cli
