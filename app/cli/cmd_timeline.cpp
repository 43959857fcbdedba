// kvscope-cli timeline: a run's time-resolved record of cache decisions (kvscope/core/timeline.h),
// one head as JSON (the contract of README "CLI") or an overview of every head as text.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
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
                 recall = nlohmann::json::object(), exact = nlohmann::json::object();
  TimelineCursor cursor(t, layer, head);
  for (int64_t s = 1; s <= t.n_steps; ++s) {
    cursor.advance_to(s);
    if (auto ex = t.exact_positions(layer, head, s, &cursor.live())) exact[std::to_string(s)] = std::move(*ex);
    const auto sel = t.selected_positions(layer, head, s, &cursor.live());
    if (!sel) continue;
    selected[std::to_string(s)] = *sel;
    granularity[std::to_string(s)] = t.has_tokens(layer, head, s) ? "token" : "page";
    if (const float r = t.recall_at(s, layer, head); !std::isnan(r)) recall[std::to_string(s)] = r;
  }
  j["selected"] = selected;
  j["granularity"] = granularity;
  if (!t.recall.empty()) j["recall"] = recall;
  if (!t.exact.empty()) j["exact"] = exact;
  return j;
}

void overview(const Timeline& t, int64_t run) {
  std::printf("run %lld: %lld positions, %lld steps, selection pages of %lld\n", static_cast<long long>(run),
              static_cast<long long>(t.n_positions), static_cast<long long>(t.n_steps), static_cast<long long>(t.page));
  std::printf(
      "layer head  live_end  evicted_prefill  evicted_ring  evicted_turn  steps_selected  mean_selected  "
      "mean_recall  steps_exact\n");
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      int64_t count[5] = {0, 0, 0, 0, 0};
      for (int64_t p = 0; p < t.n_positions; ++p)
        ++count[t.evicted_by[static_cast<size_t>((l * t.n_head_kv + h) * t.n_positions + p)] % 5];
      int64_t steps = 0, steps_exact = 0;
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
        steps_exact += t.has_exact(l, h, s);
      }
      std::printf("%5lld %4lld  %8lld  %15lld  %12lld  %12lld  %14lld  %13s  %11s  %11lld\n", static_cast<long long>(l),
                  static_cast<long long>(h), static_cast<long long>(count[0]), static_cast<long long>(count[1]),
                  static_cast<long long>(count[2]), static_cast<long long>(count[3]), static_cast<long long>(steps),
                  steps ? std::to_string(std::lround(selected / double(steps))).c_str() : "-",
                  n_recall ? std::to_string(recall / double(n_recall)).substr(0, 5).c_str() : "-",
                  static_cast<long long>(steps_exact));
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
                "selected {step: positions}, recall {step: value} and exact {step: positions of the exact top-k} "
                "when recorded (--capture full)");
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
    if (!j.contains("selected")) return 0;
    // Recall (per step, of the exact top-k) and how much of the recorded exact top-k was selected.
    double recall_sum = 0;
    int64_t n_recall = 0, n_exact = 0, exact_total = 0, exact_hit = 0;
    std::vector<std::string> lines;
    for (int64_t s = 1; s <= t.n_steps; ++s) {  // in step order (the JSON object's keys sort as text)
      const std::string step = std::to_string(s);
      if (!j["selected"].contains(step)) continue;
      const nlohmann::json& pos = j["selected"][step];
      std::string line = "step " + step + ": " + std::to_string(pos.size()) + " selected (" +
                         j["granularity"][step].get<std::string>() + ")";
      if (j.contains("recall") && j["recall"].contains(step)) {
        const double r = j["recall"][step].get<double>();
        recall_sum += r, ++n_recall;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3f", r);
        line += ", recall " + std::string(buf);
      }
      if (j.contains("exact") && j["exact"].contains(step)) {
        const auto ex = j["exact"][step].get<std::vector<int64_t>>();
        const auto sel = pos.get<std::vector<int64_t>>();
        std::vector<int64_t> both;
        std::set_intersection(sel.begin(), sel.end(), ex.begin(), ex.end(), std::back_inserter(both));
        ++n_exact, exact_total += static_cast<int64_t>(ex.size()), exact_hit += static_cast<int64_t>(both.size());
        line += ", exact top-k " + std::to_string(ex.size()) + " (" + std::to_string(both.size()) + " selected)";
      }
      lines.push_back(std::move(line));
    }
    const int64_t n_sel = static_cast<int64_t>(j["selected"].size());
    if (n_recall)
      std::printf("mean recall of the exact top-k: %.3f over %lld of %lld selecting steps\n",
                  recall_sum / double(n_recall), static_cast<long long>(n_recall), static_cast<long long>(n_sel));
    else
      std::printf("no recall recorded (record with --capture full)\n");
    if (n_exact)
      std::printf(
          "exact top-k recorded at %lld of %lld selecting steps: the selection held %lld of its %lld entries "
          "(%.1f%%)\n",
          static_cast<long long>(n_exact), static_cast<long long>(n_sel), static_cast<long long>(exact_hit),
          static_cast<long long>(exact_total), 100.0 * double(exact_hit) / double(std::max<int64_t>(exact_total, 1)));
    else
      std::printf("no exact top-k recorded for this head (record with --capture full and --pin %lld:%lld)\n",
                  static_cast<long long>(a->layer), static_cast<long long>(a->head));
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
    return 0;
  };
}

}  // namespace kvscope::cli
