#pragma once
// Internal header of the decode-time selection policies (S5: RocketKV HSA, Quest, SparQ,
// Exact-TopK): stable top-k, exact attention over selected rows, the page min/max summaries of
// Quest and HSA, and the base classes DecodeSelectionBase (attend() dispatch, byte counts,
// selection record) and PagedSelectionBase (the GPU paths of the page-summary policies). Their
// token budgets are in kvscope/core/policies/rocketkv_budget.h.
//
// topk_stable, selected_attention and DecodeSelectionBase are defined in exacttopk.cpp;
// PageMinMax and PagedSelectionBase in quest.cpp. Used by exacttopk.cpp, quest.cpp, hsa.cpp,
// sparq.cpp and the test test_decode_selection.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"
#include "ops/page_ops.h"

namespace kvscope::policies {

class ChannelPruningBase;

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
///
/// Ring-buffer heads (streaming heads of a head pattern, LayerKv::ring) are never summarised: they
/// have no pages (n_pages 0, no bytes). A full ring overwrites a row in place at every append while
/// its length stays put, and a min/max kept by length cannot forget the key it overwrote; the paged
/// policies attend densely over those heads anyway (PagedSelectionBase). Every page served is the
/// exact min/max of the head's current rows.
class PageMinMax {
 public:
  /// Forgets every layer; pages of `page` (>= 1) entries.
  void reset(int64_t n_layer, int64_t page);
  int64_t page() const { return page_; }
  /// Summarises layer l of `cache` from scratch (after prefill and eviction); ring heads: none.
  void rebuild(int64_t l, const KvCache& cache);
  /// Brings layer l up to date: rebuilds it when never built or when a head shrank (eviction),
  /// else recomputes only the pages that appended entries touched (normally the last one). A ring
  /// head (also one that became a ring after the last build) is left with no pages.
  void sync(int64_t l, const KvCache& cache);
  /// The decode fast path on CUDA: when every KV head of layer l only appended entries inside its
  /// last page since the last sync, marks them covered and returns true: ops::page_select, given
  /// the cache keys, recomputes that page in its scoring launch. Otherwise (also whenever the
  /// layer has a ring head: its writes are not at its end) does nothing and returns false (call
  /// sync()).
  bool cover_last_page(int64_t l, const KvCache& cache);
  /// For `steps` graph-replayed decode steps: sync() layer l, then reserve the pages those steps
  /// can reach, so the summaries never move while a CUDA graph points at them.
  void prepare(int64_t l, const KvCache& cache, int64_t steps);
  /// After a replayed step: the kernel has summarised every live entry of layer l.
  void mark_covered(int64_t l, const KvCache& cache);
  /// The whole summaries of layer l: [Hkv, page capacity, D] (valid pages only up to n_pages).
  const at::Tensor& kmin_all(int64_t l) const { return layers_.at(l).kmin; }
  const at::Tensor& kmax_all(int64_t l) const { return layers_.at(l).kmax; }
  /// Live pages of (l, h): ceil(entries / page); 0 for a ring head.
  int64_t n_pages(int64_t l, int64_t h) const;
  /// Views [B, n_pages(l, h0), D] of KV heads h0 .. h0+B-1 (which must have the same page count).
  at::Tensor kmin(int64_t l, int64_t h0, int64_t B) const;
  at::Tensor kmax(int64_t l, int64_t h0, int64_t B) const;
  /// Bytes of live summaries: Σ over built (layer, head) of n_pages · 2 · D · itemsize.
  int64_t bytes() const;
  /// Layer l holding compact keys (a channel stage before the selection): the min / max of the
  /// compact entries of the page where each head's dense keys begin (ops::CompactPageEdge), as of
  /// the last rebuild, which page_select's upkeep and sync() take in place of those entries; null
  /// otherwise.
  const ops::CompactPageEdge* compact_edge(int64_t l) const;

 private:
  struct Layer {
    at::Tensor kmin, kmax;         // [Hkv, capacity pages, D]
    std::vector<int64_t> covered;  // entries summarised per head
    bool built = false;
    std::optional<ops::CompactPageEdge> edge;
  };
  void fill(Layer& L, int64_t h0, const at::Tensor& keys, int64_t first_page, int64_t base = 0);
  /// Brings head h of a layer holding compact keys (with its edge) up to date from its dense rows.
  void fill_appended(Layer& L, const LayerKv& kv, int64_t h);
  /// L.edge from a compact layer's recovered keys (head_keys(h): [len, D]).
  template <typename Keys>
  void set_edge(Layer& L, const LayerKv& kv, const Keys& head_keys);
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
  int64_t prefill_queries() const override { return 0; }  // side stores from the keys alone
  /// q: [n_head, D] (any float dtype). Views q as [n_head_kv, G, D] fp32 (query head h reads KV
  /// head h / G), calls attend_heads once for a uniform layer (B = n_head_kv) or once per KV head of
  /// a ragged one (B = 1, that head's own length), returns [n_head, D] in q's dtype.
  /// Throws InputError on a shape mismatch, std::logic_error before configure().
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  /// K/V rows gathered (2·D·itemsize each; per KV head, the union over its query heads) plus
  /// side-store bytes the last attend() read. Evaluates device counters (may synchronise).
  int64_t bytes_read_last() const override;
  /// Storage-order row indices each KV head attended in the last attend() (DecodeAttentionPolicy::
  /// last_selection): one int64 CPU tensor per KV head, [1, n] when the group shares its selection,
  /// [G, n] when each query head has its own (exacttopk); rows sorted ascending; all rows when the
  /// step ran dense. attend_device() records nothing: the result stays that of the last attend().
  std::vector<at::Tensor> last_selection() const override;

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
  /// count int64 [Hkv] on the device; read lazily (no sync here). Counts the rows at row_bytes each.
  void record_fused_selection(const at::Tensor& index, const at::Tensor& count, int64_t row_bytes);
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
/// Subclasses reset pages_ and set n_head_ in configure, describe their kernel call, and select
/// in attend_pages.
///
/// Streaming heads (a head pattern's ring buffers, LayerKv::ring) attend densely over their sinks +
/// recent window; only retrieval (dense) heads select pages. Why, from the definitions:
/// DuoAttention (Xiao et al. 2024, §3.1-3.2) defines a streaming head's output as full attention
/// over its attention sinks and recent tokens, a constant-size context, and the pattern's gates (or
/// HS-SFT's windows, §2.2) are learned with the head seeing exactly that; Quest (Tang et al. 2024
/// §3) and RocketKV's HSA (Behnam et al. 2025 §3.4) select from a context that grows with the
/// sequence, to cut the reads of the full-length KV cache of a token budget t (per KV group, per
/// step). Selecting again inside a streaming window would change the head's learned definition to
/// save reads that are already constant; and Quest's pages are runs of consecutive tokens, which a
/// ring, written cyclically in place, no longer keeps in storage order. LServe (Yang et al., MLSys
/// 2025, from the group behind DuoAttention and Quest; not in docs/methods.md), which serves the
/// two together, does the same: it runs streaming heads as static sink + local attention and
/// Quest-style page selection on the dense heads only. So the combination is defined per head, and
/// the page store never summarises a ring (PageMinMax), whose in-place overwrites an incremental
/// min/max cannot follow.
/// Budget accounting: the rows a streaming head reads count in bytes_read_last as dense reads.
class PagedSelectionBase : public DecodeSelectionBase {
 public:
  using DecodeSelectionBase::DecodeSelectionBase;
  void on_prefill(int64_t layer, const LayerPrefill&, KvCache& cache) override { pages_.rebuild(layer, cache); }
  int64_t side_store_bytes() const override { return pages_.bytes(); }
  /// False also for a cache with a ring head (DecodeGraph::supported refuses those too).
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override;
  int64_t after_graph_step(const KvCache& cache) override;
  /// attend_device copies each layer's page_select output (index int32 [Hkv, S], count [Hkv]) into
  /// a staging buffer allocated by prepare_graph (on CUDA), so the graph carries the copies.
  bool stages_graph_selections() const override { return stage_dev_.defined(); }
  void stage_graph_selections() override;
  StepSelections staged_graph_selections() const override;
  std::pair<at::Tensor, at::Tensor> device_selection(int64_t layer) const override;
  /// The page summaries (read-only; tests compare them with the cache rows).
  const PageMinMax& page_summaries() const { return pages_; }
  /// A channel stage stacked under this selection (StackedDecode): the fused and graph steps then
  /// take layers holding its compact keys too, scoring the pages of the recovered keys and
  /// attending the selected rows through `channel`'s compact-key kernel. Null: such layers step
  /// through attend_heads.
  void read_compact_rows_with(const ChannelPruningBase* channel) { channel_ = channel; }
  /// int64 [n_layer, n_head_kv] on the device: the compact rows each KV head attended in the last
  /// graph step (written by the compact-key kernel); undefined unless prepare_graph found a layer
  /// holding compact keys.
  const at::Tensor& graph_compact_read() const { return compact_read_; }

 protected:
  /// One page_select call: HSA (k1 channels, keep = k2 tokens) or Quest (keep = pages); width =
  /// the most rows a head can emit (HSA k2, Quest keep * page).
  struct KernelPlan {
    bool hsa;
    int64_t k1, keep, width;
  };
  virtual KernelPlan kernel_plan(int64_t head_dim) const = 0;
  /// Side-store bytes one fused (or graph) step reads in a layer: the page summaries of every KV
  /// head that selects (none for one that attends densely). The K/V rows it reads are the ones the
  /// kernel emits (page_select's counts), as attend_pages counts the rows it gathers.
  virtual int64_t summary_bytes(const LayerKv& kv) const = 0;
  /// Syncs the page summaries of `layer` and notes which of its KV heads are rings.
  void before_attend(int64_t layer, const KvCache& cache) override;
  /// Dense attention for a ring head (B = 1: a layer with a ring is ragged), else attend_pages.
  at::Tensor attend_heads(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) final;
  /// The policy's selection for KV heads h0 .. h0+B-1 of `layer`, none of them a ring head (their
  /// pages are in pages_); arguments and result as attend_heads.
  virtual at::Tensor attend_pages(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v) = 0;
  /// The fused kernels select for every KV head of a layer: a layer with a ring head returns {}
  /// and steps through attend_heads (on CUDA as LibTorch ops on the device).
  at::Tensor attend_fused(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  PageMinMax pages_;
  int64_t n_head_ = 0, n_head_kv_ = 0;

 private:
  std::vector<bool> ring_;  // per KV head of the layer before_attend last saw: a ring buffer
  /// head_dim 64 / 128 and G <= 16 (the kernels' shapes); attend_heads covers the rest.
  bool kernels_fit(const KvCache& cache) const;
  /// Scoring + selection (page_select recomputes the page of each head's last entry first) and
  /// the gather attention; record: keep the selection for the step's telemetry.
  /// offset_dev: the key rows' bases (LayerKv::key_row(h, 0): the offsets unless the layer holds
  /// compact keys); graph: a step captured in the CUDA graph.
  at::Tensor attend_kernels(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                            const at::Tensor& length_dev, int64_t max_pages, int64_t max_rows, bool record, bool graph);
  /// The layer's compact keys can go through the kernels (a channel stage reads them).
  bool reads_compact(int64_t layer, const KvCache& cache) const;
  /// Staging of graph selections: per layer n_head_kv rows of stage_width_ + 1 int32 (the rows
  /// read, then the count), on the device (written inside the graph) and pinned on the host.
  at::Tensor stage_dev_, stage_host_;
  int64_t stage_width_ = 0;
  std::vector<std::pair<at::Tensor, at::Tensor>> device_selection_;  // per layer: the graph path's last page_select
  const ChannelPruningBase* channel_ = nullptr;
  std::vector<at::Tensor> key_bases_;  // per layer holding compact keys, for the graph: key_row(h, 0) on the device
  at::Tensor compact_read_;
};

}  // namespace kvscope::policies
