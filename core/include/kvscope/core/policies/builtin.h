#pragma once
// Shared pieces of the built-in compression policies (core/src/policies/*.cpp): the always-keep
// score, attention-row helpers (window attention of SnapKV/PyramidKV/TOVA, blocked accumulation of
// H2O), GQA reduction, pooling, ParamSpec builders, and the registry entry of every policy (which
// register_builtin_policies adds). Conventions follow NVIDIA kvpress 0.5.4 (kvpress/presses/*.py)
// where the golden references of assets/models/pycode-16m were made with it.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"

namespace kvscope::policies {

/// Score of entries that must always stay (observation window, sinks, recent tokens): the largest
/// finite fp32, so any top-k selection takes them first (the ScoringPolicy contract in policy.h).
/// kvpress pads with `scores.max() + 1` instead; both rank these entries above every real score.
inline constexpr float kKeepScore = std::numeric_limits<float>::max();

/// How the G query heads of one KV group are combined into one score per KV head.
enum class GqaReduce { kMean, kSum, kMax };
GqaReduce parse_gqa(const std::string& text);  ///< "mean" | "sum" | "max"

/// 1-D smoothing of scores along the token axis (SnapKV §4.2 "clustering via pooling").
enum class Pool { kAvg, kMax };
Pool parse_pool(const std::string& text);  ///< "avg" | "max"

/// Softmax attention probabilities (fp32) of some prompt queries over the keys before them.
/// q: [t, n_head, head_dim] queries whose row i sits at key index `first_pos + i`;
/// keys: [n_head_kv, m, head_dim] with m >= first_pos + t (keys past m are not looked at).
/// Logits = q·k / sqrt(head_dim) in fp32, keys after the query masked (causal), softmax in fp32.
/// Returns fp32 [n_head_kv, G, t, m], query head h = kv_head * G + g (HF repeat_kv order).
/// Vaswani et al. 2017 §3.2.1 (scaled dot-product attention); Ainslie et al. 2023 (GQA).
at::Tensor causal_attention_probs(const at::Tensor& q, const at::Tensor& keys, int64_t first_pos);

/// Attention of the last `window` queries of `in` over all n_tok keys, causal inside the window
/// (kvpress SnapKVPress.compute_window_attention). in.queries may hold only the last T <= n_tok
/// queries (block-wise prefill); they sit at key indices n_tok - T .. n_tok - 1. `window` is
/// clamped to T. Returns fp32 [n_head_kv, G, window, n_tok].
at::Tensor window_attention(const LayerPrefill& in, int64_t window);

/// x: [n_head_kv, G, n] -> [n_head_kv, n] by mean | sum | max over G.
at::Tensor reduce_groups(const at::Tensor& x, GqaReduce how);

/// x: [rows, n] -> [rows, n]: avg_pool1d / max_pool1d, kernel `kernel` (odd), stride 1, padding
/// kernel/2; avg counts the zero padding (PyTorch count_include_pad=True, as kvpress calls it).
at::Tensor pool_scores(const at::Tensor& x, int64_t kernel, Pool how);

/// Sorted int64 indices of the k largest entries of each row of scores [rows, n] (k clamped to
/// [0, n]), one tensor per row, on the scores' device.
std::vector<at::Tensor> topk_sorted_per_row(const at::Tensor& scores, int64_t k);

/// Checks the LayerPrefill shapes policies rely on; throws InputError("<policy>: ...").
void check_layer_prefill(const std::string& policy, const LayerPrefill& in, bool needs_queries);

// ---- SnapKV scoring, shared by "snapkv" and "pyramidkv" ----------------------------------------

struct SnapKvParams {
  int64_t window = 32;  ///< observation window w: the last w prompt queries vote; they are always kept
  int64_t kernel = 7;   ///< pooling kernel (odd)
  Pool pool = Pool::kMax;
  GqaReduce gqa = GqaReduce::kMean;
};
/// SnapKV scores (Li et al. 2024, §4.1 voting + §4.2 pooling), in kvpress's order:
/// A = window_attention(in, w) [Hkv, G, w, n]; drop the window columns -> [Hkv, G, w, n-w];
/// mean over the w rows; pool along tokens per query head; reduce over G; append the window with
/// kKeepScore. Returns fp32 [n_head_kv, n_tok]. If n_tok <= w every entry is in the window.
at::Tensor snapkv_scores(const LayerPrefill& in, const SnapKvParams& p);
/// The ParamSpec table of a SnapKV-style scorer with the given defaults and paper reference.
std::vector<ParamSpec> snapkv_spec(const SnapKvParams& defaults, const std::string& paper_ref);
/// Parses resolved values of a snapkv_spec table; throws InputError for an even kernel.
SnapKvParams parse_snapkv(const std::string& policy, const ParamValues& v);

// ---- ParamSpec builders ------------------------------------------------------------------------

ParamSpec int_param(std::string key, double min, double max, std::string def, std::string help, std::string ref);
ParamSpec float_param(std::string key, double min, double max, std::string def, std::string help, std::string ref);
ParamSpec bool_param(std::string key, std::string def, std::string help, std::string ref);
ParamSpec choice_param(std::string key, std::vector<std::string> choices, std::string def, std::string help,
                       std::string ref);

// ---- Base classes holding name + resolved params -----------------------------------------------

class ScoringBase : public ScoringPolicy {
 public:
  ScoringBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }

 private:
  std::string name_;
  ParamValues params_;
};

class BudgetBase : public BudgetPolicy {
 public:
  BudgetBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }

 private:
  std::string name_;
  ParamValues params_;
};

// ---- Registry entries (one per file in core/src/policies/) -------------------------------------

// S1 scoring
PolicyRegistry::Entry snapkv_entry();        // snapkv.cpp
PolicyRegistry::Entry pyramidkv_entry();     // pyramidkv.cpp
PolicyRegistry::Entry streamingllm_entry();  // streamingllm.cpp
PolicyRegistry::Entry h2o_entry();           // h2o.cpp
PolicyRegistry::Entry tova_entry();          // tova.cpp
PolicyRegistry::Entry knorm_entry();         // knorm.cpp
PolicyRegistry::Entry keydiff_entry();       // keydiff.cpp
PolicyRegistry::Entry random_entry();        // random.cpp
// S2 budget
PolicyRegistry::Entry uniform_entry();  // uniform.cpp
PolicyRegistry::Entry pyramid_entry();  // pyramid.cpp
PolicyRegistry::Entry adakv_entry();    // adakv.cpp
PolicyRegistry::Entry heads_entry();    // heads.cpp

/// Per-layer kept count of the "pyramid" budget (kvpress PyramidKVPress.get_layer_budget with
/// n_tok·(1 - ratio) replaced by n_kept); see pyramid.cpp for the formula. window < 0 is invalid.
int64_t pyramid_layer_budget(int64_t n_tok, int64_t n_kept, int64_t window, double beta, int64_t layer,
                             int64_t n_layer);

}  // namespace kvscope::policies

// ---- S5 decode-time selection (RocketKV HSA, Quest, SparQ, Exact-TopK) ------------------------
// Policies in hsa.cpp, quest.cpp, sparq.cpp, exacttopk.cpp; their budgets in rocketkv_budget.h.

namespace kvscope {
class KvCache;
}  // namespace kvscope

namespace kvscope::policies {

/// Indices of the k largest entries along the last dim of `scores` [..., n] (fp32; 0 <= k <= n),
/// ties broken towards the lower index (stable sort), returned sorted ascending: int64 [..., k].
/// Tokens of one page share a score (Quest, HSA), so the rule decides which rows of a partially
/// taken page are read. Defined in exacttopk.cpp.
at::Tensor topk_stable(const at::Tensor& scores, int64_t k);

/// Exact attention of query heads over selected cache rows, in fp32 (Vaswani et al. 2017 §3.2.1):
///   y[b,g] = softmax_i(q[b,g]·k[b,i] / sqrt(D)) over the selected i, then Σ_i p_i v[b,i].
/// q: fp32 [B, G, D] (the G query heads of B KV heads); k, v: [B, N, D] cache rows, any dtype
/// and strides; idx: int64 [B, 1, n] (one selection shared by the group), [B, G, n] (one per query
/// head), or undefined (all N rows, dense); valid: optional bool of idx's shape, false = padding
/// (masked out; every row of valid needs one true entry). Returns fp32 [B, G, D].
/// Defined in exacttopk.cpp.
at::Tensor selected_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& idx,
                              const at::Tensor& valid = {});

/// Page summaries of Quest (Tang et al. 2024 §3.2) and RocketKV HSA step 1 (§3.4): for every
/// (layer, KV head), the element-wise min and max of the keys of each page of `page` consecutive
/// cache entries in storage order (retained prompt entries, then decode appends); the last page
/// may be partial (summarised over its real entries only, as the code's ±inf padding does).
/// Stored as [n_head_kv, page capacity, D] in the cache dtype (RocketKV's code aligns pages on the
/// head dim, [Hkv, 2D, pages]; the layout does not change any score). Defined in quest.cpp.
class PageMinMax {
 public:
  /// Forgets every layer; pages of `page` (>= 1) entries.
  void reset(int64_t n_layer, int64_t page);
  int64_t page() const { return page_; }
  /// Summarises layer l of `cache` from scratch (after prefill and eviction).
  void rebuild(int64_t l, const KvCache& cache);
  /// Brings layer l up to date: rebuilds it when never built or when a head shrank (eviction),
  /// else recomputes only the pages that appended entries touched (normally the last one).
  void sync(int64_t l, const KvCache& cache);
  /// The decode fast path on CUDA: when every KV head of layer l only appended entries inside its
  /// last page since the last sync, marks them covered and returns true: ops::page_select, given
  /// the cache keys, recomputes that page in its scoring launch. Otherwise does nothing and
  /// returns false (call sync()).
  bool cover_last_page(int64_t l, const KvCache& cache);
  /// For `steps` graph-replayed decode steps: sync() layer l, then reserve the pages those steps
  /// can reach, so the summaries never move while a CUDA graph points at them.
  void prepare(int64_t l, const KvCache& cache, int64_t steps);
  /// After a replayed step: the kernel has summarised every live entry of layer l.
  void mark_covered(int64_t l, const KvCache& cache);
  /// The whole summaries of layer l: [Hkv, page capacity, D] (valid pages only up to n_pages).
  const at::Tensor& kmin_all(int64_t l) const { return layers_.at(l).kmin; }
  const at::Tensor& kmax_all(int64_t l) const { return layers_.at(l).kmax; }
  /// Live pages of (l, h): ceil(entries / page).
  int64_t n_pages(int64_t l, int64_t h) const;
  /// Views [B, n_pages(l, h0), D] of KV heads h0 .. h0+B-1 (which must have the same page count).
  at::Tensor kmin(int64_t l, int64_t h0, int64_t B) const;
  at::Tensor kmax(int64_t l, int64_t h0, int64_t B) const;
  /// Bytes of live summaries: Σ over built (layer, head) of n_pages · 2 · D · itemsize.
  int64_t bytes() const;

 private:
  struct Layer {
    at::Tensor kmin, kmax;          // [Hkv, capacity pages, D]
    std::vector<int64_t> covered;   // entries summarised per head
    bool built = false;
  };
  void fill(Layer& L, int64_t h0, const at::Tensor& keys, int64_t first_page);
  void reserve(Layer& L, int64_t pages);
  int64_t page_ = 1;
  std::vector<Layer> layers_;
};

/// Base of the S5 policies: name and params, the per-layer dispatch of attend(), the selection
/// record and the byte count. Defined in exacttopk.cpp.
class DecodeSelectionBase : public DecodeAttentionPolicy {
 public:
  DecodeSelectionBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }
  Stage stage() const override { return Stage::kDecodeSelection; }
  /// q: [n_head, D] (any float dtype). Views q as [n_head_kv, G, D] fp32 (query head h reads KV
  /// head h / G), calls attend_heads once for a uniform layer (B = n_head_kv) or once per KV head of
  /// a ragged one (B = 1, that head's own length), returns [n_head, D] in q's dtype.
  /// Throws InputError on a shape mismatch, std::logic_error before configure().
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  /// K/V rows gathered (2·D·itemsize each; per KV head, the union over its query heads) plus
  /// side-store bytes the last attend() read. Evaluates device counters (may synchronise).
  int64_t bytes_read_last() const override;
  /// Storage-order row indices each KV head attended in the last attend(): one int64 tensor per
  /// KV head, [1, n] when the group shares its selection, [G, n] when each query head has its own
  /// (exacttopk); rows sorted ascending; all rows when the step ran dense. Telemetry and tests.
  std::vector<at::Tensor> last_selection() const;

 protected:
  /// Side-store maintenance before the heads of `layer` attend (e.g. page min/max of appends).
  virtual void before_attend(int64_t layer, const KvCache& cache) {}
  /// One decode step of KV heads h0 .. h0+B-1: q fp32 [B, G, D]; k, v [B, N, D] (cache dtype).
  /// Returns fp32 [B, G, D]; adds side-store bytes to bytes_last_ and attends via attend_selected.
  virtual at::Tensor attend_heads(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v) = 0;
  /// The fused CUDA step of a whole layer (q: [n_head, D] on the GPU, the step's key already in the
  /// cache), called by attend() before before_attend(); returns an undefined tensor when it does not
  /// apply, and attend() falls back to attend_heads. Default: does not apply.
  virtual at::Tensor attend_fused(int64_t layer, const at::Tensor& q, const KvCache& cache) { return {}; }
  /// Records a fused step's selection for last_selection(): index int32 [Hkv, S] (rows ascending),
  /// count int64 [Hkv] on the device; read lazily (no sync here).
  void record_fused_selection(const at::Tensor& index, const at::Tensor& count);
  /// selected_attention + records the selection and counts the K/V rows it gathers.
  at::Tensor attend_selected(int64_t h0, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& idx, const at::Tensor& valid = {});
  bool configured_ = false;
  int64_t bytes_last_ = 0;

 private:
  struct Selection {
    int64_t h0, n_rows;
    at::Tensor idx, valid;
    at::Tensor count;  // fused steps: rows per KV head (idx [Hkv, S])
  };
  std::string name_;
  ParamValues params_;
  std::vector<at::Tensor> bytes_pending_;  // int64 scalars on the device, summed in bytes_read_last
  std::vector<Selection> selections_;
};

/// Decode-time selection over page min/max summaries (HSA, Quest): the GPU paths both share, the
/// eager fused step (attend_fused) and the CUDA-graph step (prepare_graph / attend_device /
/// after_graph_step), all through kernels/page_select + the gather decode-attention kernel.
/// Subclasses reset pages_ and set n_head_ in configure, and describe their kernel call.
class PagedSelectionBase : public DecodeSelectionBase {
 public:
  using DecodeSelectionBase::DecodeSelectionBase;
  void on_prefill(int64_t layer, const LayerPrefill&, const KvCache& cache) override { pages_.rebuild(layer, cache); }
  int64_t side_store_bytes() const override { return pages_.bytes(); }
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override;
  int64_t after_graph_step(const KvCache& cache) override;

 protected:
  /// One page_select call: HSA (k1 channels, keep = k2 tokens) or Quest (keep = pages); width =
  /// the most rows a head can emit (HSA k2, Quest keep * page).
  struct KernelPlan {
    bool hsa;
    int64_t k1, keep, width;
  };
  virtual KernelPlan kernel_plan(int64_t head_dim) const = 0;
  /// K/V and side-store bytes one decode step reads in a layer (all KV heads).
  virtual int64_t layer_bytes(const LayerKv& kv) const = 0;
  void before_attend(int64_t layer, const KvCache& cache) override { pages_.sync(layer, cache); }
  at::Tensor attend_fused(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  PageMinMax pages_;
  int64_t n_head_ = 0;

 private:
  /// head_dim 64 / 128 and G <= 16 (the kernels' shapes); attend_heads covers the rest.
  bool kernels_fit(const KvCache& cache) const;
  /// Scoring + selection (page_select recomputes the page of each head's last entry first) and
  /// the gather attention; record: keep the selection for the step's telemetry.
  at::Tensor attend_kernels(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                            const at::Tensor& length_dev, int64_t max_pages, int64_t max_rows, bool record);
};

// S5 decode-time selection
PolicyRegistry::Entry hsa_entry();        // hsa.cpp
PolicyRegistry::Entry quest_entry();      // quest.cpp
PolicyRegistry::Entry sparq_entry();      // sparq.cpp
PolicyRegistry::Entry exacttopk_entry();  // exacttopk.cpp

}  // namespace kvscope::policies

// ---- S4 channel pruning (spark.cpp, think.cpp) ---------------------------------------------------

namespace kvscope::policies {

PolicyRegistry::Entry spark_entry();  // spark.cpp
PolicyRegistry::Entry think_entry();  // think.cpp

/// Shared decode path of the key-channel pruning policies ("spark", "think"; defined in spark.cpp).
/// on_prefill (in the subclass) prunes the n_h entries each KV head holds right after eviction
/// (rows 0..n_h-1 of cache.head_keys(l, h)) and records, per entry t, its kept-channel mask m_t and
/// the key k̂_t the compute path uses (k_t ⊙ m_t, or with the pruned channels refilled: spark
/// sign=key) and an additive logit term r_t (query-independent recovery). One decode step then
/// computes, per query head of group h,
///
///   s_t = ( q·k̂_t + r_t ) / sqrt(D)            for t < n_h (pruned at prefill)
///   s_t = q·k_t / sqrt(D)                      for t >= n_h (appended during decode: never pruned,
///                                              nor is a row a ring-buffer head has overwritten since)
///   out = softmax_fp32(s) · V                  (values are not pruned)
///
/// Compute layout: the keys k̂ are kept dense [n_h, D] (cache dtype) beside the cache; on a CUDA
/// cache with a zero recovery bias they are also written over the pruned cache rows
/// (fold_into_cache), so decode is the dense attention kernel. Accounting assumes the pruned layout instead: side_store_bytes() is
/// what the subclass reports as the pruned key storage (kept values + channel indices + recovery
/// statistics); bytes_read_last() = that storage for the layer + dense K of decode-time entries + all
/// V. The K bytes saved versus a dense cache are dense_key_bytes() - side_store_bytes().
class ChannelPruningBase : public DecodeAttentionPolicy {
 public:
  ChannelPruningBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }
  Stage stage() const override { return Stage::kChannel; }
  void configure(const RunBudget& budget, const ModelConfig& config) override;
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  int64_t bytes_read_last() const override { return bytes_read_last_; }
  int64_t side_store_bytes() const override;

  /// Entries of (layer, kv_head) pruned at prefill (0 before on_prefill ran for that layer).
  int64_t pruned_entries(int64_t layer, int64_t kv_head) const;
  /// bool [n_h, D]: kept key channels of the entries pruned at prefill (true = kept).
  at::Tensor channel_mask(int64_t layer, int64_t kv_head) const;
  /// fp32 [n_h]: the additive logit term r_t before the 1/sqrt(D) scaling (zeros without recovery).
  at::Tensor recovery_bias(int64_t layer, int64_t kv_head) const;
  /// fp32 [G, len_h]: the scaled logits s of one decode step for the G query heads q_group [G, D] of
  /// kv_head over all len_h entries the cache holds for it now (formula above).
  at::Tensor head_logits(int64_t layer, int64_t kv_head, const at::Tensor& q_group, const KvCache& cache) const;
  /// Bytes the pruned entries' keys would take stored dense (n_h * D * itemsize, all layers and heads).
  int64_t dense_key_bytes() const;

  // CUDA-graph decode: with a zero recovery bias (sign=key, or no recovery) the logits are q·k̂ for
  // pruned entries and q·k for the rest, so k̂ folded into the cache rows makes the step plain dense
  // attention (the fused decode-attention kernel); see fold_into_cache.
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override;
  int64_t after_graph_step(const KvCache& cache) override;

 protected:
  /// The pruned state of one (layer, KV head).
  struct HeadStore {
    int64_t n = 0;        ///< entries pruned at prefill
    at::Tensor masked_k;  ///< [n, D] cache dtype: k̂ = K ⊙ mask (+ refilled channels); compute copy, not accounted
    at::Tensor mask;      ///< bool [n, D]
    at::Tensor bias;      ///< fp32 [n]
    at::Tensor pos;       ///< int64 [n]: true positions of the pruned entries (set by set_head)
    int64_t key_bytes = 0;    ///< accounted storage of the pruned keys, indices and statistics
    int64_t dense_bytes = 0;  ///< n * D * itemsize
  };
  /// Replaces the store of (layer, kv_head) with `s`, whose n entries are rows 0..n-1 of the head in
  /// `cache` now (their positions are recorded: a row a ring buffer later overwrites attends densely).
  void set_head(int64_t layer, int64_t kv_head, HeadStore s, const KvCache& cache);
  /// Bytes of one channel index: uint8 while D <= 256, else int16.
  static int64_t index_bytes(int64_t head_dim) { return head_dim <= 256 ? 1 : 2; }

 private:
  const HeadStore* find(int64_t layer, int64_t kv_head) const;
  /// On a CUDA cache: writes k̂ over the pruned rows of every KV head of `layer` (once per prefill)
  /// when the recovery bias is zero, no head is a ring buffer and head_dim suits the kernels.
  /// Returns whether the layer's cache rows now hold k̂ (the logits' keys). Syncs once per layer.
  bool fold_into_cache(int64_t layer, const KvCache& cache);
  /// Bytes one step reads in `layer` (pruned keys as stored, other keys and all values dense).
  int64_t layer_bytes(int64_t layer, const KvCache& cache) const;
  std::vector<char> folded_;  // [layer]: k̂ is in the cache rows
  std::string name_;
  ParamValues params_;
  std::vector<std::vector<HeadStore>> stores_;  // [layer][kv head]
  std::vector<int64_t> steps_;                  // [layer]: attend() calls since the layer's stores were set
  int64_t bytes_read_last_ = 0;
};

/// Channels kept per entry for pruning ratio lambda: T = floor((1 - lambda) * D) (SPARK §4.2), with a
/// 1e-9 guard so that e.g. (1 - 0.75) * 64 gives 16, clamped to [0, D].
int64_t kept_channels(double ratio, int64_t head_dim);

}  // namespace kvscope::policies

namespace kvscope::policies {
PolicyRegistry::Entry rocketkv_mt_entry();  // rocketkv_mt.cpp
}  // namespace kvscope::policies
