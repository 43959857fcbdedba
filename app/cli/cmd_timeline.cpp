// kvscope-cli timeline: a run's time-resolved record of cache decisions (kvscope/core/timeline.h),
// one head as JSON (the contract of README "CLI") or an overview of every head as text.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvscope/core/errors.h"
#include "kvscope/sessions/timeline_blobs.h"

namespace kvscope::cli {
namespace {

struct Args {
  std::string db;
  int64_t run = 0, layer = -1, head = -1;
  bool json = false;
};

Timeline load(const sessions::SessionStore& store, const Args& a) {
  auto t = sessions::load_timeline(store, a.run);
  if (!t)
    throw InputError(
        a.db, "run " + std::to_string(a.run) + " has no timeline: record runs with --db and --capture summary or full");
  return std::move(*t);
}

nlohmann::json head_json(const Timeline& t, int64_t layer, int64_t head) {
  nlohmann::json j;
  j["layer"] = layer;
  j["head"] = head;
  j["n_positions"] = t.n_positions;
  j["n_steps"] = t.n_steps;
  j["page"] = t.page;
  std::vector<int32_t> evicted(static_cast<size_t>(t.n_positions));
  std::vector<std::string> by(evicted.size());
  for (int64_t p = 0; p < t.n_positions; ++p) {
    evicted[p] = t.evicted_step(layer, head, p);
    by[p] = to_string(static_cast<EvictionCause>(
        t.evicted_by[static_cast<size_t>((layer * t.n_head_kv + head) * t.n_positions + p)]));
  }
  j["evicted_at"] = evicted;
  j["evicted_by"] = by;
  if (t.pages.empty() && t.tokens.empty()) return j;
  nlohmann::json selected = nlohmann::json::object(), granularity = nlohmann::json::object(),
                 recall = nlohmann::json::object();
  TimelineCursor cursor(t, layer, head);
  for (int64_t s = 1; s <= t.n_steps; ++s) {
    cursor.advance_to(s);
    const auto sel = t.selected_positions(layer, head, s, &cursor.live());
    if (!sel) continue;
    selected[std::to_string(s)] = *sel;
    granularity[std::to_string(s)] = t.has_tokens(layer, head, s) ? "token" : "page";
    if (const float r = t.recall_at(s, layer, head); !std::isnan(r)) recall[std::to_string(s)] = r;
  }
  j["selected"] = selected;
  j["granularity"] = granularity;
  if (!t.recall.empty()) j["recall"] = recall;
  return j;
}

void overview(const Timeline& t, int64_t run) {
  std::printf("run %lld: %lld positions, %lld steps, selection pages of %lld\n", static_cast<long long>(run),
              static_cast<long long>(t.n_positions), static_cast<long long>(t.n_steps), static_cast<long long>(t.page));
  std::printf(
      "layer head  live_end  evicted_prefill  evicted_ring  evicted_turn  steps_selected  mean_selected  "
      "mean_recall\n");
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      int64_t count[5] = {0, 0, 0, 0, 0};
      for (int64_t p = 0; p < t.n_positions; ++p)
        ++count[t.evicted_by[static_cast<size_t>((l * t.n_head_kv + h) * t.n_positions + p)] % 5];
      int64_t steps = 0;
      double selected = 0, recall = 0;
      int64_t n_recall = 0;
      TimelineCursor cursor(t, l, h);
      for (int64_t s = 1; s <= t.n_steps && (!t.pages.empty() || !t.tokens.empty()); ++s) {
        cursor.advance_to(s);
        if (const auto sel = t.selected_positions(l, h, s, &cursor.live())) {
          ++steps;
          selected += double(sel->size());
        }
        if (const float r = t.recall_at(s, l, h); !std::isnan(r)) recall += r, ++n_recall;
      }
      std::printf("%5lld %4lld  %8lld  %15lld  %12lld  %12lld  %14lld  %13s  %11s\n", static_cast<long long>(l),
                  static_cast<long long>(h), static_cast<long long>(count[0]), static_cast<long long>(count[1]),
                  static_cast<long long>(count[2]), static_cast<long long>(count[3]), static_cast<long long>(steps),
                  steps ? std::to_string(std::lround(selected / double(steps))).c_str() : "-",
                  n_recall ? std::to_string(recall / double(n_recall)).substr(0, 5).c_str() : "-");
    }
}

}  // namespace

Runner add_timeline(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "timeline",
      "A run's cache decisions over time: per position the step it was evicted, per step what was selected");
  auto a = std::make_shared<Args>();
  cmd->add_option("FILE", a->db, "Session database")->required();
  cmd->add_option("RUN", a->run, "Run id")->required();
  auto* layer =
      cmd->add_option("--layer", a->layer, "Layer of the head to print (0-based)")->check(CLI::NonNegativeNumber);
  auto* head = cmd->add_option("--head", a->head, "KV head of that layer (0-based)")->check(CLI::NonNegativeNumber);
  layer->needs(head);
  head->needs(layer);
  cmd->add_flag("--json", a->json,
                "Print one head as JSON: n_positions, n_steps, evicted_at (step, 0 = prefill, -1 = never), "
                "selected {step: positions}");
  return [a]() {
    const auto store = sessions::SessionStore::open(a->db, sessions::OpenMode::kReadOnly);
    const Timeline t = load(store, *a);
    if (a->layer < 0) {
      if (a->json) throw InputError("--json prints one head: give --layer L --head H");
      overview(t, a->run);
      return 0;
    }
    if (a->layer >= t.n_layer || a->head >= t.n_head_kv)
      throw InputError(a->db, "run " + std::to_string(a->run) + " has " + std::to_string(t.n_layer) + " layers of " +
                                  std::to_string(t.n_head_kv) + " KV heads: no head " + std::to_string(a->layer) + ":" +
                                  std::to_string(a->head));
    const nlohmann::json j = head_json(t, a->layer, a->head);
    if (a->json) {
      std::cout << j.dump() << "\n";
      return 0;
    }
    int64_t kinds[5] = {0, 0, 0, 0, 0};
    for (const std::string& b : j["evicted_by"].get<std::vector<std::string>>())
      for (int c = 0; c < 5; ++c) kinds[c] += b == to_string(static_cast<EvictionCause>(c));
    std::printf(
        "run %lld layer %lld head %lld: %lld positions, %lld steps; live at the end %lld, evicted at prefill "
        "%lld, by the ring %lld, by later turns %lld\n",
        static_cast<long long>(a->run), static_cast<long long>(a->layer), static_cast<long long>(a->head),
        static_cast<long long>(t.n_positions), static_cast<long long>(t.n_steps), static_cast<long long>(kinds[0]),
        static_cast<long long>(kinds[1]), static_cast<long long>(kinds[2]), static_cast<long long>(kinds[3]));
    if (j.contains("selected"))
      for (const auto& [step, pos] : j["selected"].items())
        std::printf("step %s: %zu selected (%s)\n", step.c_str(), pos.size(),
                    j["granularity"][step].get<std::string>().c_str());
    return 0;
  };
}

}  // namespace kvscope::cli
