#pragma once
// Synthetic session databases for GUI tests, benchmarks and docs: runs with the blobs, step and
// summary metrics kvscope-cli writes (run_data.h conventions), filled with attention that looks like
// a real model's (sinks, recency, shared heavy hitters, per-head concentration), kept sets chosen
// from it (SnapKV + Ada-KV-like and StreamingLLM-like), key cosines, channel saliency, notes and
// bookmarks. Deterministic for a given spec.
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {
class Tokenizer;
}

namespace kvscope::gui {

struct SyntheticSpec {
  std::int64_t n_layer = 4, n_head = 8, n_head_kv = 4, head_dim = 32;
  std::int64_t n_tok = 512;     ///< prompt tokens
  std::int64_t n_steps = 32;    ///< decode steps (kl / top1 / bytes_read)
  double keep_fraction = 0.25;  ///< average share of the prompt each KV head keeps
  bool full_capture = true;     ///< attention, cos_to_mean, channel stats (else summary only)
  std::uint64_t seed = 1;
  std::string model_path = "synthetic-model";  ///< stored as the model path (tokenizer lookup)
  /// Prompt text; repeated up to n_tok tokens when a tokenizer is given (else random ids).
  std::string prompt_text;
};

/// The runs written by write_synthetic_session.
struct SyntheticRuns {
  std::int64_t snapkv = -1;     ///< "snapkv+adakv", complete, full capture (the newest complete run)
  std::int64_t streaming = -1;  ///< "streamingllm", complete, same prompt
  std::int64_t failed = -1;     ///< failed ("cancelled") run, no blobs
};

/// Creates (or appends to) the database at `path` with three runs on one prompt: a failed one, a
/// StreamingLLM-like and a SnapKV + Ada-KV-like run (written last, so it is the newest), with notes and a
/// bookmark on the latter. `tokenizer` (optional) encodes spec.prompt_text. Throws on store errors.
SyntheticRuns write_synthetic_session(const std::string& path, const SyntheticSpec& spec,
                                      const Tokenizer* tokenizer = nullptr);

}  // namespace kvscope::gui
