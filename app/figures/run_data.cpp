#include "run_data.h"

#include "budget_text.h"  // kvscope_run: one convention for budgets
#include "kvscope/core/stage.h"
#include "kvscope/sessions/timeline_blobs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace kvscope::figures {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

const std::vector<std::string>& head_summary_names() {
  static const std::vector<std::string> names = {"entropy",    "mass_top1pct", "mass_top5pct", "tokens95_frac",
                                                 "sink_share", "cos_mean",     "channel_cv"};
  return names;
}

std::string metric_label(const std::string& name) {
  static const std::map<std::string, std::string> labels = {
      {"entropy", "attention entropy (nats)"},
      {"mass_top1pct", "attention mass on top 1% tokens"},
      {"mass_top5pct", "attention mass on top 5% tokens"},
      {"tokens95_frac", "fraction of tokens for 95% mass"},
      {"sink_share", "attention mass on first 4 tokens"},
      {"cos_mean", "mean cosine of keys to mean key"},
      {"channel_cv", "mean channel saliency CV"},
      {"kept", "entries kept"},
      {"kept_frac", "fraction of prompt kept"},
      {"mean_kl", "mean KL(full || compressed), nats"},
      {"top1_agreement", "top-1 agreement"},
      {"prefill_ms", "prefill (ms)"},
      {"decode_tokens_per_s", "decode tokens/s"},
      {"kv_bytes_live", "KV bytes after prefill"},
      {"side_store_bytes", "side-store bytes"},
  };
  auto it = labels.find(name);
  return it == labels.end() ? name : it->second;
}

// ---- RunData accessors ----------------------------------------------------------------------------

float RunData::metric(std::int64_t layer, std::int64_t head, std::size_t m) const {
  if (!has_summary || layer < 0 || layer >= n_layer || head < 0 || head >= n_head_kv || m >= summary_names.size())
    return kNaN;
  return summary[static_cast<std::size_t>((layer * n_head_kv + head)) * summary_names.size() + m];
}

std::optional<std::size_t> RunData::metric_index(const std::string& name) const {
  for (std::size_t i = 0; i < summary_names.size(); ++i)
    if (summary_names[i] == name) return i;
  return std::nullopt;
}

const std::vector<std::int64_t>* RunData::kept_set(std::int64_t layer, std::int64_t head) const {
  const LayerPart* p = part(Part::kKept, layer);
  if (!p || head < 0 || head >= static_cast<std::int64_t>(p->kept.size())) return nullptr;
  return &p->kept[static_cast<std::size_t>(head)];
}

bool RunData::kept_at(std::int64_t layer, std::int64_t head, std::int64_t pos) const {
  if (!has_kept) return true;
  const auto* k = kept_set(layer, head);
  return k && std::binary_search(k->begin(), k->end(), pos);
}

std::int64_t RunData::kept_count(std::int64_t layer, std::int64_t head) const {
  if (!has_kept) return n_tok;
  if (layer < 0 || layer >= n_layer || head < 0 || head >= n_head_kv) return 0;
  return std::max<std::int64_t>(0, kept_sizes[static_cast<std::size_t>(layer * n_head_kv + head)]);
}

const std::vector<float>* RunData::layer_values(Part p, std::int64_t layer) const {
  const LayerPart* lp = part(p, layer);
  return lp && !lp->values.empty() ? &lp->values : nullptr;
}

namespace {
const float* row_of(const std::vector<float>* v, std::int64_t head, std::int64_t n_head, std::int64_t width) {
  if (!v || head < 0 || head >= n_head) return nullptr;
  return v->data() + head * width;
}
}  // namespace

const float* RunData::attention_row(std::int64_t layer, std::int64_t head) const {
  return row_of(layer_values(Part::kAttention, layer), head, n_head_kv, n_tok);
}

const float* RunData::score_row(std::int64_t layer, std::int64_t head) const {
  return row_of(layer_values(Part::kScore, layer), head, n_head_kv, n_tok);
}

std::string RunData::scorer() const {
  for (const auto& st : record.info.pipeline.stages)
    if (st.stage == kvscope::stage_key(kvscope::Stage::kScoring)) return st.policy;
  return {};
}

const float* RunData::cos_row(std::int64_t layer, std::int64_t head) const {
  return row_of(layer_values(Part::kCos, layer), head, n_head_kv, n_tok);
}

const float* RunData::pca_row(std::int64_t layer, std::int64_t head) const {
  return row_of(layer_values(Part::kPca, layer), head, n_head_kv, 2 * n_tok);
}

const std::vector<std::uint32_t>* RunData::keep_count() const {
  const LayerPart* p = part(Part::kKeepCount, 0);
  return p ? &p->counts : nullptr;
}

const std::string* RunData::position_text(std::int64_t p) const {
  if (p >= 0 && p < n_tok) return &token_text[static_cast<std::size_t>(p)];
  if (p >= n_tok && p - n_tok < static_cast<std::int64_t>(output_text.size()))
    return &output_text[static_cast<std::size_t>(p - n_tok)];
  return nullptr;
}

const Timeline* RunData::timeline() const {
  const LayerPart* p = part(Part::kTimeline, 0);
  return p ? p->timeline.get() : nullptr;
}

bool RunData::stored(Part p, std::int64_t layer) const {
  if (p == Part::kKeepCount) return n_layer > 0;
  if (p == Part::kTimeline) return has_timeline;
  if (layer < 0 || layer >= n_layer) return false;
  return stored_parts[static_cast<std::size_t>(static_cast<std::int64_t>(p) * n_layer + layer)] != 0;
}

const LayerPart* RunData::part(Part p, std::int64_t layer) const { return parts ? parts->get(p, layer) : nullptr; }

double RunData::summary_metric(const std::string& name) const {
  auto it = record.row.summary.find(name);
  return it == record.row.summary.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

std::string RunData::budget_text() const { return run::budget_label(kept_share()); }

run::KeptShare RunData::kept_share() const { return run::kept_share(record.row, n_tok); }

std::string RunData::model_name() const {
  std::filesystem::path p(record.info.model.path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  return p.filename().string().empty() ? record.info.model.path : p.filename().string();
}

std::string RunData::title() const {
  std::string t = "#" + std::to_string(ref.run);
  if (!record.row.name.empty()) t += " " + record.row.name;
  // The full cache (spec "full" or none) once, not as a pipeline and again as its budget.
  t += " \xc2\xb7 " +
       (kept_share().full_cache ? budget_text() : record.row.pipeline_spec + " \xc2\xb7 " + budget_text());
  return t;
}

std::string RunData::caption() const {
  std::string c = "run #" + std::to_string(ref.run) + " of " + std::filesystem::path(ref.db).filename().string() +
                  " \xc2\xb7 " + model_name() + " (" + std::to_string(n_layer) + " layers, " + std::to_string(n_head) +
                  " heads, " + std::to_string(n_head_kv) + " KV heads) \xc2\xb7 " + std::to_string(n_tok) +
                  " prompt tokens \xc2\xb7 " +
                  (kept_share().full_cache ? budget_text() : record.row.pipeline_spec + " \xc2\xb7 " + budget_text());
  return c;
}

std::string display_token(const std::string& text) {
  if (text.empty()) return "\xe2\x88\x85";
  std::string out;
  out.reserve(text.size() + 4);
  for (unsigned char c : text) {
    if (c == '\n')
      out += "\xe2\x86\xb5";
    else if (c == '\t')
      out += "\xe2\x86\x92";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// ---- parts ----------------------------------------------------------------------------------------

std::string_view part_blob(Part p) {
  switch (p) {
    case Part::kKept:
    case Part::kKeepCount:
      return "kept_positions";
    case Part::kTimeline:
      return "timeline.info";
    case Part::kAttention:
      return "attention";
    case Part::kCos:
      return "cos_to_mean";
    case Part::kPca:
      return "keys_pca";
    case Part::kChannelMean:
      return "channel_mean";
    case Part::kChannelCv:
      return "channel_cv";
    case Part::kScore:
      return "policy_score";
  }
  return "";
}

const char* part_label(Part p) {
  switch (p) {
    case Part::kKept:
      return "kept sets";
    case Part::kAttention:
      return "attention";
    case Part::kCos:
      return "key cosines";
    case Part::kPca:
      return "key PCA";
    case Part::kChannelMean:
      return "channel saliency";
    case Part::kChannelCv:
      return "channel CV";
    case Part::kKeepCount:
      return "keep rate over all heads";
    case Part::kTimeline:
      return "timeline";
    case Part::kScore:
      return "decisive scores";
  }
  return "";
}

PartSlots::PartSlots(std::int64_t n_layer)
    : n_layer_(std::max<std::int64_t>(1, n_layer)),
      slots_(new std::atomic<const LayerPart*>[static_cast<std::size_t>(kPartCount * n_layer_)]) {
  for (std::int64_t i = 0; i < kPartCount * n_layer_; ++i) slots_[static_cast<std::size_t>(i)].store(nullptr);
}

PartSlots::~PartSlots() = default;

const LayerPart* PartSlots::get(Part p, std::int64_t layer) const {
  if (layer < 0 || layer >= n_layer_) return nullptr;
  return slots_[static_cast<std::size_t>(static_cast<std::int64_t>(p) * n_layer_ + layer)].load(
      std::memory_order_acquire);
}

const LayerPart* PartSlots::put(Part p, std::int64_t layer, LayerPart v) {
  if (layer < 0 || layer >= n_layer_) throw std::out_of_range("part layer " + std::to_string(layer) + " out of range");
  std::lock_guard lock(mutex_);
  auto& slot = slots_[static_cast<std::size_t>(static_cast<std::int64_t>(p) * n_layer_ + layer)];
  if (const LayerPart* have = slot.load(std::memory_order_acquire)) return have;
  owned_.push_back(std::make_unique<LayerPart>(std::move(v)));
  slot.store(owned_.back().get(), std::memory_order_release);
  return owned_.back().get();
}

// ---- loading --------------------------------------------------------------------------------------

std::shared_ptr<RunData> load_run_data(const sessions::SessionStore& store, std::int64_t run,
                                       const TokenText& token_text, std::string tokenizer_note) {
  const auto t0 = std::chrono::steady_clock::now();
  auto d = std::make_shared<RunData>();
  d->ref = {store.path(), run};
  d->record = store.load_run(run);
  const auto& m = d->record.info.model;
  d->n_layer = std::max<std::int64_t>(0, m.n_layer);
  d->n_head = std::max<std::int64_t>(0, m.n_head);
  d->n_head_kv = std::max<std::int64_t>(0, m.n_head_kv);
  d->head_dim = std::max<std::int64_t>(0, m.head_dim);
  const auto& ids = d->record.info.prompt.tokens;
  d->n_tok = static_cast<std::int64_t>(ids.size());
  const std::int64_t L = d->n_layer, H = d->n_head_kv, T = d->n_tok;

  d->token_text.resize(ids.size());
  bool any_text = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto t = token_text ? token_text(ids[i]) : std::nullopt;
    any_text |= t.has_value();
    d->token_text[i] = t ? std::move(*t) : "#" + std::to_string(ids[i]);
  }
  for (std::int32_t id : d->record.outputs.tokens) {
    auto t = token_text ? token_text(id) : std::nullopt;
    d->output_text.push_back(t ? std::move(*t) : "#" + std::to_string(id));
  }
  d->tokens_from_tokenizer = token_text && (any_text || ids.empty());
  if (!d->tokens_from_tokenizer) d->tokenizer_note = std::move(tokenizer_note);

  // What is stored, from the listing: which parts per layer, and kept-set sizes from their shapes.
  d->parts = std::make_unique<PartSlots>(L);
  d->stored_parts.assign(static_cast<std::size_t>(kPartCount * std::max<std::int64_t>(L, 1)), 0);
  d->kept_sizes.assign(static_cast<std::size_t>(L * H), -1);
  auto mark = [&](Part p, std::int64_t layer) {
    if (layer >= 0 && layer < L)
      d->stored_parts[static_cast<std::size_t>(static_cast<std::int64_t>(p) * L + layer)] = 1;
  };
  bool any_summary = false, any_topk = false, any_needle = false, any_turns = false;
  for (const auto& b : d->record.blobs) {
    if (b.name == "kept_positions") {
      if (b.layer < 0 || b.layer >= L || b.head < 0 || b.head >= H) continue;
      std::int64_t n = 1;
      for (auto x : b.shape) n *= x;
      d->kept_sizes[static_cast<std::size_t>(b.layer * H + b.head)] = n;
      mark(Part::kKept, b.layer);
      d->has_kept = true;
    } else if (b.name == "head_summary") {
      any_summary = true;
    } else if (b.name == "attention") {
      mark(Part::kAttention, b.layer), d->has_attention = true;
    } else if (b.name == "policy_score") {
      mark(Part::kScore, b.layer), d->has_score = true;
    } else if (b.name == "cos_to_mean") {
      mark(Part::kCos, b.layer), d->has_cos = true;
    } else if (b.name == "keys_pca") {
      mark(Part::kPca, b.layer), d->has_pca = true;
    } else if (b.name == "channel_mean") {
      mark(Part::kChannelMean, b.layer), d->has_channels = true;
    } else if (b.name == "channel_cv") {
      mark(Part::kChannelCv, b.layer);
    } else if (b.name == "topk_unique") {
      any_topk = true;
    } else if (b.name == "needle_tokens") {
      any_needle = true;
    } else if (b.name.rfind("turns.", 0) == 0) {
      any_turns = true;
    } else if (b.name.rfind("timeline.", 0) == 0) {
      d->has_timeline = d->has_timeline || b.name == "timeline.info";
    } else {
      d->other_blobs.push_back(b);
    }
  }

  d->summary_names = head_summary_names();
  const std::size_t M = d->summary_names.size();
  d->summary.assign(static_cast<std::size_t>(L * H) * M, kNaN);
  if (any_summary) {
    for (const auto& b : store.load_blobs(run, "head_summary")) {
      if (b.layer < 0 || b.layer >= L || b.shape.size() != 2 || b.shape[0] != H) continue;
      const auto v = b.to_f32();
      const auto cols = static_cast<std::size_t>(b.shape[1]);
      for (std::int64_t h = 0; h < H; ++h)
        for (std::size_t k = 0; k < std::min(cols, M); ++k)
          d->summary[(static_cast<std::size_t>(b.layer * H + h)) * M + k] = v[static_cast<std::size_t>(h) * cols + k];
      d->has_summary = true;
    }
  }
  if (any_topk)
    if (auto b = store.load_blob(run, "topk_unique", -1, -1); b && b->shape.size() == 2) {
      d->topk_unique = b->to_f32();
      d->topk_rows = b->shape[0];
      d->topk_cols = b->shape[1];
    }
  if (any_needle)
    if (auto b = store.load_blob(run, "needle_tokens", -1, -1); b && b->dtype == sessions::DType::kI64) {
      const auto v = b->values<std::int64_t>();
      for (std::size_t i = 0; i + 1 < v.size(); i += 2)
        if (const std::int64_t lo = std::max<std::int64_t>(v[i], 0), hi = std::min(v[i + 1], T); lo < hi)
          d->needles.emplace_back(lo, hi);
    }

  if (any_turns) {
    try {
      d->turns = sessions::load_turns(store, run);
    } catch (const sessions::SessionError& e) {
      d->turns_note = e.what();
    }
    // Token texts joined: a tokenizer's pieces carry their own spacing, ids are spaced.
    auto join = [&](const std::vector<std::int32_t>& v) {
      std::string out;
      for (std::int32_t id : v) {
        auto t = token_text ? token_text(id) : std::nullopt;
        out += t ? std::move(*t) : (out.empty() ? "#" : " #") + std::to_string(id);
      }
      return out;
    };
    for (const auto& turn : d->turns) {
      d->turn_input_text.push_back(join(turn.input_ids));
      d->turn_output_text.push_back(join(turn.output_ids));
    }
  }

  for (const auto& s : d->record.step_metrics) {
    auto& v = d->steps[s.name];
    if (s.step < 0) continue;
    if (static_cast<std::int64_t>(v.size()) <= s.step)
      v.resize(static_cast<std::size_t>(s.step) + 1, std::numeric_limits<double>::quiet_NaN());
    v[static_cast<std::size_t>(s.step)] = s.value;
  }
  d->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

namespace {

std::vector<std::int64_t> positions_of(const sessions::Blob& b) {
  std::vector<std::int64_t> v;
  if (b.dtype == sessions::DType::kI64) {
    v = b.values<std::int64_t>();
  } else if (b.dtype == sessions::DType::kI32) {
    const auto x = b.values<std::int32_t>();
    v.assign(x.begin(), x.end());
  } else {
    for (float x : b.to_f32()) v.push_back(static_cast<std::int64_t>(x));
  }
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

LayerPart decode_kept(const sessions::SessionStore& store, const RunData& run, std::int64_t layer) {
  LayerPart p;
  p.kept.resize(static_cast<std::size_t>(run.n_head_kv));
  for (std::int64_t h = 0; h < run.n_head_kv; ++h)
    if (auto b = store.load_blob(run.ref.run, "kept_positions", layer, h))
      p.kept[static_cast<std::size_t>(h)] = positions_of(*b);
  return p;
}

}  // namespace

void load_part(const sessions::SessionStore& store, const RunData& run, Part p, std::int64_t layer) {
  if (layer < 0 || layer >= std::max<std::int64_t>(run.n_layer, 1))
    throw std::out_of_range("run " + std::to_string(run.ref.run) + " has no layer " + std::to_string(layer));
  if (run.ready(p, layer)) return;
  if (p == Part::kKept) {
    run.parts->put(p, layer, decode_kept(store, run, layer));
    return;
  }
  if (p == Part::kTimeline) {
    LayerPart t;
    if (auto tl = sessions::load_timeline(store, run.ref.run))
      t.timeline = std::make_shared<const Timeline>(std::move(*tl));
    run.parts->put(p, 0, std::move(t));
    return;
  }
  if (p == Part::kKeepCount) {
    LayerPart c;
    const auto all = static_cast<std::uint32_t>(run.n_layer * run.n_head_kv);
    c.counts.assign(static_cast<std::size_t>(run.n_tok), run.has_kept ? 0u : all);
    if (run.has_kept) {
      // Every layer's kept sets in one query when some are missing (not one per head).
      bool missing = false;
      for (std::int64_t l = 0; l < run.n_layer; ++l) missing |= !run.ready(Part::kKept, l);
      if (missing) {
        std::vector<LayerPart> layers(static_cast<std::size_t>(run.n_layer));
        for (auto& l : layers) l.kept.resize(static_cast<std::size_t>(run.n_head_kv));
        for (const auto& b : store.load_blobs(run.ref.run, "kept_positions"))
          if (b.layer >= 0 && b.layer < run.n_layer && b.head >= 0 && b.head < run.n_head_kv)
            layers[static_cast<std::size_t>(b.layer)].kept[static_cast<std::size_t>(b.head)] = positions_of(b);
        for (std::int64_t l = 0; l < run.n_layer; ++l)
          if (run.stored(Part::kKept, l))
            run.parts->put(Part::kKept, l, std::move(layers[static_cast<std::size_t>(l)]));
      }
    }
    if (run.has_kept)
      for (std::int64_t l = 0; l < run.n_layer; ++l) {
        if (const LayerPart* k = run.part(Part::kKept, l))
          for (const auto& head : k->kept)
            for (std::int64_t pos : head)
              if (pos >= 0 && pos < run.n_tok) ++c.counts[static_cast<std::size_t>(pos)];
      }
    run.parts->put(p, 0, std::move(c));
    return;
  }
  // A float array [n_head_kv, cols(, 2)]; another shape is kept as an empty part (not captured).
  const std::int64_t H = run.n_head_kv, T = run.n_tok, D = run.head_dim;
  std::vector<std::int64_t> want = {H, T};
  if (p == Part::kPca) want = {H, T, 2};
  if (p == Part::kChannelMean || p == Part::kChannelCv) want = {H, D};
  LayerPart out;
  if (auto b = store.load_blob(run.ref.run, std::string(part_blob(p)), layer, -1); b && b->shape == want)
    out.values = b->to_f32();
  run.parts->put(p, layer, std::move(out));
}

}  // namespace kvscope::figures
