#pragma once
// Evaluation runs as `kvscope-cli eval --db` records them (docs/eval.md, app/run/eval_run.h), written
// straight through SessionStore, no model: the sweep key "eval1|...", summary "eval_score" and
// "n_prompt", blobs "eval_sample" (JSON), "needle_tokens" and "needle_kept", the answer as output.
#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"

namespace kvscope::gui::testing {

/// One sample of the test evaluation.
struct EvalTestSample {
  std::string id, task;
  std::int64_t length = 0, question_start = 0;
  std::vector<std::int64_t> needles;  ///< [begin, end) pairs, token positions
  std::vector<float> needle_kept;     ///< [2 layers x 2 KV heads]; empty: no blob
};

/// The samples of write_eval_runs: s0 (task niah_a, length 1000, needle at 40 of 100: depth 40%),
/// s1 (niah_a, length 2000, needles at 95 and 10: depth 10%), s2 (vt, length 1000, no needle).
inline std::vector<EvalTestSample> eval_test_samples() {
  return {{"s0", "niah_a", 1000, 100, {40, 45}, {1.0f, 0.5f, 0.0f, 0.5f}},
          {"s1", "niah_a", 2000, 100, {95, 97, 10, 12}, {1.0f, 1.0f, 1.0f, 1.0f}},
          {"s2", "vt", 1000, 100, {}, {}}};
}

/// One condition of the test evaluation: pipeline ("" = the full cache), budget (compression
/// ratio; < 0: none) and the score of each sample.
struct EvalTestCondition {
  std::string pipeline;
  double ratio = -1;
  std::vector<double> scores;  ///< per eval_test_samples() entry
};

/// full cache: 1, 1, 1 (mean 1); snapkv@0.5: 1, 0, 0.5 (0.5); snapkv@0.8: 0, 0, 0 (0);
/// streamingllm@0.5: 1, 1, 0 (2/3).
inline std::vector<EvalTestCondition> eval_test_conditions() {
  return {{"", -1, {1, 1, 1}},
          {"snapkv:window=8+uniform", 0.5, {1, 0, 0.5}},
          {"snapkv:window=8+uniform", 0.8, {0, 0, 0}},
          {"streamingllm:sink=4+uniform", 0.5, {1, 1, 0}}};
}

/// Appends the evaluation (every condition x sample, samples outer as the CLI orders them) to the
/// database at `db` as complete runs with `info`'s model and prompt (sweep key, name, pipeline and
/// budget replaced); with `attempts`, also a failed and an unfinished evaluation run (of a sample
/// s9), which are not points. Returns the ids of the complete runs, in order.
inline std::vector<std::int64_t> write_eval_runs(const std::string& db, sessions::RunInfo info, bool attempts = true) {
  auto store = sessions::SessionStore::open(db);
  std::vector<std::int64_t> ids;
  const auto samples = eval_test_samples();
  const auto conditions = eval_test_conditions();
  auto key = [](const EvalTestSample& s, const EvalTestCondition& c) {
    return "eval1|/models/m|data=/x|y.jsonl#1|question-agnostic|fp32|" + s.id + "|" +
           (c.pipeline.empty() ? std::string("full") : c.pipeline) + "|" +
           (c.ratio < 0 ? std::string("none") : "compression_ratio=" + std::to_string(c.ratio).substr(0, 3));
  };
  for (std::size_t si = 0; si < samples.size(); ++si)
    for (const auto& c : conditions) {
      const EvalTestSample& s = samples[si];
      sessions::RunInfo r = info;
      r.name = "eval " + s.id;
      r.sweep_key = key(s, c);
      r.pipeline = {c.pipeline.empty() ? "full" : c.pipeline, {}};
      r.budget = c.ratio < 0 ? sessions::BudgetInfo{sessions::BudgetUnit::kFraction, 1.0}
                             : sessions::BudgetInfo{sessions::BudgetUnit::kCompressionRatio, c.ratio};
      const std::int64_t run = store.begin_run(r);
      store.set_summary(run, "eval_score", c.scores[si]);
      store.set_summary(run, "n_prompt", static_cast<double>(r.prompt.tokens.size()));
      const std::string js = "{\"id\":\"" + s.id + "\",\"task\":\"" + s.task +
                             "\",\"length\":" + std::to_string(s.length) +
                             ",\"chat\":true,\"answers\":[\"42\"],\"metric\":"
                             "\"string_match_all\",\"max_new_tokens\":8,\"mode\":\"question-agnostic\","
                             "\"question_start\":" +
                             std::to_string(s.question_start) + "}";
      store.add_blob(run, sessions::Blob::of<std::uint8_t>("eval_sample", -1, -1, {std::int64_t(js.size())},
                                                           std::vector<std::uint8_t>(js.begin(), js.end())));
      store.add_blob(run, sessions::Blob::of<std::int64_t>("needle_tokens", -1, -1,
                                                           {std::int64_t(s.needles.size() / 2), 2}, s.needles));
      if (!s.needle_kept.empty())
        store.add_blob(run, sessions::Blob::of<float>("needle_kept", -1, -1, {2, 2}, s.needle_kept));
      store.finish_run(run, {{42}, c.scores[si] == 1 ? " 42." : " 17."});
      ids.push_back(run);
    }
  if (!attempts) return ids;
  // Attempts that are not points: a failed one and one still running.
  sessions::RunInfo r = info;
  r.sweep_key = "eval1|/models/m|data=/x|y.jsonl#1|question-agnostic|fp32|s9|full|none";
  r.pipeline = {"full", {}};
  const std::int64_t failed = store.begin_run(r);
  store.set_summary(failed, "eval_score", 0.0);
  store.fail_run(failed, "out of memory");
  const std::int64_t running = store.begin_run(r);
  store.set_summary(running, "eval_score", 0.0);
  return ids;
}

}  // namespace kvscope::gui::testing
