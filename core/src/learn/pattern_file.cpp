#include "kvscope/core/learn/pattern_file.h"

#include <fstream>
#include <iomanip>

#include <nlohmann/json.hpp>

#include "json_file.h"
#include "kvscope/core/errors.h"

namespace kvscope::learn {

std::filesystem::path loss_curve_path(const std::filesystem::path& p) {
  std::filesystem::path out = p;
  out.replace_extension(".loss.csv");
  return out;
}

void save_learned_pattern(const std::filesystem::path& path, const LearnResult& r, const LearnOptions& o) {
  save_head_pattern(path, r.pattern);
  nlohmann::json j = read_json_file(path);
  j["reference_length"] = r.reference_length;
  j["budget_achieved"] = r.budget_achieved;
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& p : r.curve) curve.push_back({p.step, p.loss, p.task_loss, p.reg_loss, p.phase});
  // Sizes left to their defaults are recorded as run (resolve_defaults, kept in the result).
  const int64_t seq_len = o.seq_len > 0 ? o.seq_len : r.options.seq_len;
  const int64_t sink = o.sink >= 0 ? o.sink : r.options.sink;
  const int64_t window = o.window >= 0 ? o.window : r.options.window;
  const int64_t block = o.block >= 0 ? o.block : r.options.block;
  j["learned"] = {{"method", learn_method_name(o.method)},
                  {"options",
                   {{"steps", o.steps},
                    {"batch", o.batch},
                    {"seq_len", seq_len},
                    {"seed", o.seed},
                    {"sink", sink},
                    {"window", window},
                    {"block", block},
                    {"n_candidates", o.n_candidates},
                    {"lr", o.lr},
                    {"lambda", o.lambda},
                    {"gamma", o.gamma},
                    {"tau", o.tau},
                    {"dense_fraction", o.dense_fraction},
                    {"init_steps", o.init_steps},
                    {"ste", o.ste == SteMode::kSoftmax ? "softmax" : "selected"}}},
                  {"data", {{"files", r.n_files}, {"tokens", r.n_tokens}, {"sequences", r.n_sequences}}},
                  {"initial_loss", r.initial_loss},
                  {"final_loss", r.final_loss},
                  {"initial_task_loss", r.initial_task_loss},
                  {"final_task_loss", r.final_task_loss},
                  {"gates", r.gates},
                  {"dense", r.dense},
                  {"candidates", r.candidates},
                  {"window_probs", r.window_probs},
                  {"learned_windows", r.learned_windows},
                  {"loss_curve_columns", {"step", "loss", "task_loss", "reg_loss", "phase"}},
                  {"loss_curve", curve}};
  {
    std::ofstream out(path);
    if (!out) throw InputError(path, "cannot be written");
    out << j.dump(1) << "\n";
    if (!out) throw InputError(path, "write failed");
  }
  const auto csv_path = loss_curve_path(path);
  std::ofstream csv(csv_path);
  if (!csv) throw InputError(csv_path, "cannot be written");
  csv << "step,phase,loss,task_loss,reg_loss\n" << std::setprecision(9);
  for (const auto& p : r.curve)
    csv << p.step << "," << p.phase << "," << p.loss << "," << p.task_loss << "," << p.reg_loss << "\n";
  if (!csv) throw InputError(csv_path, "write failed");
}

}  // namespace kvscope::learn
