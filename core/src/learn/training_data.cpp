#include "kvscope/core/learn/training_data.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/learn/file_glob.h"

namespace kvscope::learn {

TrainingData load_training_data(const std::string& glob, const Model& model, const TrainingDataOptions& o) {
  if (!model.tokenizer)
    throw InputError("learn-heads: the model has no tokenizer (a --random-init model cannot read text)");
  if (o.seq_len < 2) throw InputError("learn-heads: --seq-len must be >= 2, got " + std::to_string(o.seq_len));
  std::vector<std::filesystem::path> files = expand_glob(glob);
  if (files.empty()) throw InputError("--data '" + glob + "': no files match");
  TrainingData d;
  d.n_files_matched = static_cast<int64_t>(files.size());
  std::mt19937_64 rng(o.seed);
  std::shuffle(files.begin(), files.end(), rng);
  std::vector<int64_t> stream;
  for (const auto& f : files) {
    if (o.max_tokens > 0 && static_cast<int64_t>(stream.size()) >= o.max_tokens) break;
    std::ifstream in(f, std::ios::binary);
    if (!in) throw InputError(f, "cannot be read (training text for --data '" + glob + "')");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    if (text.empty()) continue;
    if (o.add_bos && model.config.bos_token_id >= 0) stream.push_back(model.config.bos_token_id);
    for (int32_t id : model.tokenizer->encode(text)) stream.push_back(id);
    d.files.push_back(f);
  }
  const int64_t n_seq = static_cast<int64_t>(stream.size()) / o.seq_len;
  if (n_seq < 1)
    throw InputError("--data '" + glob + "': " + std::to_string(stream.size()) + " tokens in " +
                     std::to_string(d.files.size()) + " files, fewer than one sequence of --seq-len " +
                     std::to_string(o.seq_len) + " (add text or lower --seq-len)");
  d.n_tokens = n_seq * o.seq_len;
  d.sequences = at::from_blob(stream.data(), {n_seq, o.seq_len}, at::kLong).clone();
  return d;
}

}  // namespace kvscope::learn
