#pragma once
// Plain data types of the session store (no torch, no sqlite): what a run records and what the
// store hands back. Schema and units: docs/sessions.md.
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kvscope/core/budget.h"
#include "kvscope/core/param_spec.h"

namespace kvscope::sessions {

/// Every failure of the store. what() = "<database file>: <problem>".
class SessionError : public std::runtime_error {
 public:
  SessionError(const std::string& file, const std::string& problem)
      : std::runtime_error(file + ": " + problem), file_(file) {}
  /// The database file the error is about.
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

/// Stored status of a run (column runs.status). A run is written while `kRunning`; `kComplete`
/// and `kFailed` runs are finished and immutable.
enum class RunStatus { kRunning, kComplete, kFailed };
/// "running" | "complete" | "failed".
std::string_view to_string(RunStatus s);
/// Parses the stored text; nullopt for anything else.
std::optional<RunStatus> parse_run_status(std::string_view text);

/// Unit of the compression budget and type of a policy parameter: core's torch-free description
/// (kvscope/core/budget.h, param_spec.h), whose name tables are what the store writes.
using BudgetUnit = kvscope::BudgetUnit;
using ParamType = kvscope::ParamType;

/// Element type of a captured blob. Bytes are stored in the machine's (little-endian) order.
enum class DType { kF32, kF16, kBF16, kI32, kI64, kU8 };
/// "f32" | "f16" | "bf16" | "i32" | "i64" | "u8".
std::string_view to_string(DType d);
std::optional<DType> parse_dtype(std::string_view text);
/// Bytes per element: 4, 2, 2, 4, 8, 1.
size_t dtype_size(DType d);

/// The model a run used. Dimensions as in docs/architecture.md (n_head = query heads).
struct ModelInfo {
  std::string path;         ///< checkpoint directory or file as given
  std::string config_hash;  ///< hash of the model config (hex), to tell checkpoints apart
  std::string model_type;   ///< e.g. "llama", "qwen2", "llama2c"
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  std::string dtype;   ///< compute dtype: "fp32" | "bf16" | "fp16"
  std::string device;  ///< torch device string: "cpu", "cuda:0"
  /// Per layer: the sliding window it attends within (0 = full attention); empty when every layer
  /// is full attention (and for runs recorded before schema v6). Sliding layers are never compressed.
  std::vector<int64_t> layer_window;
  bool operator==(const ModelInfo&) const = default;
};

/// One resolved policy parameter, as written in a pipeline SPEC (value text) plus its type.
struct StageParam {
  std::string key;
  ParamType type = ParamType::kInt;
  std::string value;  ///< e.g. "64", "0.2", "avg", "true", "/path/pattern.json"
  bool operator==(const StageParam&) const = default;
};

/// One pipeline stage: the stage name ("scoring", "budget", ...), the policy id and its params.
struct PipelineStage {
  std::string stage;   ///< kvscope::stage_key of the stage (S0..S7), e.g. "scoring"
  std::string policy;  ///< registry id, e.g. "snapkv"
  std::vector<StageParam> params;
  bool operator==(const PipelineStage&) const = default;
};

/// The compression pipeline of a run: the canonical SPEC string and its stages in order.
struct PipelineInfo {
  std::string spec;  ///< canonical SPEC, every parameter resolved (README "CLI")
  std::vector<PipelineStage> stages;
  bool operator==(const PipelineInfo&) const = default;
};

/// The budget the pipeline ran under.
struct BudgetInfo {
  BudgetUnit unit = BudgetUnit::kCompressionRatio;
  double value = 0.0;
  bool operator==(const BudgetInfo&) const = default;
};

/// What the run was given to read.
struct PromptInfo {
  /// The text that was tokenized: the prompt as given, or a chat prompt as its template rendered it.
  std::string text;
  std::vector<int32_t> tokens;  ///< token ids, BOS included when the run added one
  /// A chat prompt (kvscope-cli --chat / --messages, the Run view's "chat template"): where its
  /// template came from, e.g. "<model dir>/chat_template.jinja" or "<dir>/tokenizer_config.json
  /// (chat_template)"; empty for a prompt given as text or ids (and for runs written before v5).
  std::string chat_template;
  /// A chat prompt's messages, JSON ([{"role", "content"}, ...]); empty for any other prompt.
  std::string chat_messages;
  bool operator==(const PromptInfo&) const = default;
};

/// Where and with what a run was made. An empty hostname is filled in by begin_run.
struct Environment {
  std::string kvscope_version;
  std::string torch_version;
  std::string device_name;  ///< e.g. "NVIDIA H100 80GB HBM3", "cpu"
  std::string hostname;
  bool operator==(const Environment&) const = default;
};

/// Everything known when a run starts (argument of SessionStore::begin_run).
struct RunInfo {
  std::string name;  ///< free text shown in lists; may be empty
  ModelInfo model;
  PipelineInfo pipeline;
  BudgetInfo budget;
  PromptInfo prompt;
  Environment env;
  /// Sweep key: at most one *complete* run per key per database; sweeps skip keys that
  /// find_by_sweep_key finds. Unfinished or failed attempts may share a key.
  std::optional<std::string> sweep_key;
  bool operator==(const RunInfo&) const = default;
};

/// What a run produced (argument of SessionStore::finish_run).
struct RunOutputs {
  std::vector<int32_t> tokens;  ///< generated token ids
  std::string text;             ///< their detokenized text
  bool operator==(const RunOutputs&) const = default;
};

/// One per-step metric row: decode `step` (0-based), metric name (e.g. "kl", "top1",
/// "bytes_read"), value (NaN round-trips as NaN; stored as SQL NULL).
struct StepMetric {
  int64_t step = 0;
  std::string name;
  double value = 0.0;
};

/// A captured statistic as a typed n-d array: e.g. name "attn_mass_top8", layer 3, head 5,
/// dtype f32, shape {n_tok}. layer / head = -1 when the blob is not per layer / per head.
/// `data` holds numel * dtype_size bytes, row-major, machine byte order (little-endian).
struct Blob {
  std::string name;
  int64_t layer = -1;
  int64_t head = -1;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  ///< empty = a scalar (numel 1)
  std::vector<uint8_t> data;

  /// Product of `shape` (1 for a scalar).
  int64_t numel() const;
  /// The elements as T; throws std::invalid_argument unless sizeof(T) == dtype_size(dtype)
  /// (f16 / bf16 come back as their raw uint16_t bits).
  template <class T>
  std::vector<T> values() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (sizeof(T) != dtype_size(dtype) || data.size() % sizeof(T) != 0)
      throw std::invalid_argument("blob '" + name + "': element size does not match dtype " +
                                  std::string(to_string(dtype)));
    std::vector<T> out(data.size() / sizeof(T));
    if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
    return out;
  }
  /// Every element converted to float (f16 / bf16 widened exactly; integers rounded).
  std::vector<float> to_f32() const;
  /// A blob of `values` (dtype from T: float, int32_t, int64_t, uint8_t).
  template <class T>
  static Blob of(std::string name, int64_t layer, int64_t head, std::vector<int64_t> shape,
                 const std::vector<T>& values);
  bool operator==(const Blob&) const = default;
};

/// A blob's metadata without its bytes (what load_run returns; load_blobs fetches the data).
struct BlobInfo {
  int64_t id = 0;
  std::string name;
  int64_t layer = -1;
  int64_t head = -1;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t raw_bytes = 0;     ///< uncompressed size
  int64_t stored_bytes = 0;  ///< zstd-compressed size in the database
};

/// A free-text note on a run; editable after the run finished.
struct Note {
  int64_t id = 0;
  int64_t run_id = 0;
  std::string text;
  std::string created_at;  ///< ISO-8601 UTC, e.g. "2025-01-31T12:00:00.123Z"
  std::string updated_at;
};

/// A bookmarked place in a run (what a view was looking at); -1 = not pinned to a
/// step / layer / head / token. Editable (delete) after the run finished.
struct Bookmark {
  int64_t id = 0;  ///< set by the store
  int64_t run_id = 0;
  std::string label;
  int64_t step = -1;
  int64_t layer = -1;
  int64_t head = -1;
  int64_t token = -1;
  std::string created_at;  ///< set by the store
};

/// One line of SessionStore::list_runs.
struct RunRow {
  int64_t id = 0;
  std::string name;
  std::string created_at;   ///< ISO-8601 UTC (= run start)
  std::string finished_at;  ///< empty while running
  RunStatus status = RunStatus::kRunning;
  /// status is kRunning but no live writer holds the run (its process died: SIGKILL, crash,
  /// power loss). Its rows so far stay readable; the store never deletes it by itself.
  bool incomplete = false;
  std::string model_path;
  std::string pipeline_spec;
  BudgetInfo budget;
  std::optional<std::string> sweep_key;
  std::string error;                      ///< fail_run's message
  std::map<std::string, double> summary;  ///< every summary metric of the run
  std::string chat_template;              ///< PromptInfo::chat_template: empty unless a chat prompt
};

/// Everything stored about one run (SessionStore::load_run). Blob bytes are not loaded: see
/// SessionStore::load_blobs.
struct RunRecord {
  RunRow row;
  RunInfo info;
  RunOutputs outputs;                    ///< empty until finished
  std::vector<StepMetric> step_metrics;  ///< ordered by step, then name
  std::vector<BlobInfo> blobs;           ///< ordered by name, layer, head
  std::vector<Note> notes;
  std::vector<Bookmark> bookmarks;
  int64_t writer_pid = 0;  ///< process that wrote the run (0 if unknown)
  std::string writer_host;
};

/// The DType of a C++ element type (float, int32_t, int64_t, uint8_t).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::kF32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kI32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kI64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::kU8;
  else
    static_assert(sizeof(T) == 0, "no DType for this type (f16/bf16: fill Blob::data yourself)");
}

template <class T>
Blob Blob::of(std::string name, int64_t layer, int64_t head, std::vector<int64_t> shape, const std::vector<T>& values) {
  Blob b;
  b.name = std::move(name);
  b.layer = layer;
  b.head = head;
  b.dtype = dtype_of<T>();
  b.shape = std::move(shape);
  b.data.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(b.data.data(), values.data(), b.data.size());
  return b;
}

/// What SessionStore::check found.
struct CheckReport {
  std::string integrity = "ok";       ///< PRAGMA integrity_check + foreign_key_check: "ok" or the problems
  int64_t runs = 0;                   ///< runs looked at
  int64_t blobs = 0;                  ///< blobs looked at
  int64_t blobs_verified = 0;         ///< stored bytes matched their checksum and decoded
  int64_t blobs_unverified = 0;       ///< written before checksums (schema < 4): decoded, nothing to compare with
  std::vector<std::string> problems;  ///< one line per damaged or inconsistent item, naming it
  bool ok() const { return integrity == "ok" && problems.empty(); }
};

/// What SessionStore::merge did.
struct MergeReport {
  int64_t runs_copied = 0;
  int64_t runs_skipped = 0;  ///< dropped because their sweep key already has a complete run
};

}  // namespace kvscope::sessions
