#include "run_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "kvscope/core/tokenizer.h"

namespace kvscope::gui {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A [rows, cols] blob as floats into `out` (resized); false when the shape does not match.
bool take_matrix(const sessions::Blob& b, std::int64_t rows, std::int64_t cols, std::vector<float>& out) {
  if (b.shape.size() != 2 || b.shape[0] != rows || b.shape[1] != cols) return false;
  out = b.to_f32();
  return static_cast<std::int64_t>(out.size()) == rows * cols;
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

bool RunData::kept_at(std::int64_t layer, std::int64_t head, std::int64_t pos) const {
  if (!has_kept) return true;
  if (layer < 0 || layer >= static_cast<std::int64_t>(kept.size())) return false;
  const auto& l = kept[static_cast<std::size_t>(layer)];
  if (head < 0 || head >= static_cast<std::int64_t>(l.size())) return false;
  const auto& k = l[static_cast<std::size_t>(head)];
  return std::binary_search(k.begin(), k.end(), pos);
}

std::int64_t RunData::kept_count(std::int64_t layer, std::int64_t head) const {
  if (!has_kept) return n_tok;
  if (layer < 0 || layer >= static_cast<std::int64_t>(kept.size())) return 0;
  const auto& l = kept[static_cast<std::size_t>(layer)];
  if (head < 0 || head >= static_cast<std::int64_t>(l.size())) return 0;
  return static_cast<std::int64_t>(l[static_cast<std::size_t>(head)].size());
}

const float* RunData::attention_row(std::int64_t layer, std::int64_t head) const {
  if (layer < 0 || layer >= static_cast<std::int64_t>(attention.size()) || head < 0 || head >= n_head_kv) return nullptr;
  const auto& a = attention[static_cast<std::size_t>(layer)];
  if (a.empty()) return nullptr;
  return a.data() + head * n_tok;
}

const float* RunData::cos_row(std::int64_t layer, std::int64_t head) const {
  if (layer < 0 || layer >= static_cast<std::int64_t>(cos_to_mean.size()) || head < 0 || head >= n_head_kv) return nullptr;
  const auto& a = cos_to_mean[static_cast<std::size_t>(layer)];
  if (a.empty()) return nullptr;
  return a.data() + head * n_tok;
}

double RunData::summary_metric(const std::string& name) const {
  auto it = record.row.summary.find(name);
  return it == record.row.summary.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

std::string RunData::budget_text() const {
  const auto& b = record.row.budget;
  switch (b.unit) {
    case sessions::BudgetUnit::kCompressionRatio: return "ratio " + fmt("%g", b.value);
    case sessions::BudgetUnit::kStored: return fmt("%g", b.value) + " stored/head";
    case sessions::BudgetUnit::kFetched: return fmt("%g", b.value) + " fetched/step";
    case sessions::BudgetUnit::kFraction: return "fraction " + fmt("%g", b.value);
  }
  return {};
}

std::string RunData::model_name() const {
  std::filesystem::path p(record.info.model.path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  return p.filename().string().empty() ? record.info.model.path : p.filename().string();
}

std::string RunData::title() const {
  std::string t = "#" + std::to_string(ref.run);
  if (!record.row.name.empty()) t += " " + record.row.name;
  t += " \xc2\xb7 " + (record.row.pipeline_spec.empty() ? std::string("full cache") : record.row.pipeline_spec);
  t += " \xc2\xb7 " + budget_text();
  return t;
}

std::string RunData::caption() const {
  std::string c = "run #" + std::to_string(ref.run) + " of " + std::filesystem::path(ref.db).filename().string() + " \xc2\xb7 " +
                  model_name() + " (" + std::to_string(n_layer) + " layers, " + std::to_string(n_head) + " heads, " +
                  std::to_string(n_head_kv) + " KV heads) \xc2\xb7 " + std::to_string(n_tok) + " prompt tokens \xc2\xb7 " +
                  (record.row.pipeline_spec.empty() ? std::string("full cache") : record.row.pipeline_spec) + " \xc2\xb7 " +
                  budget_text();
  return c;
}

// ---- tokenizers -----------------------------------------------------------------------------------

struct TokenizerCache::Entry {
  std::unique_ptr<Tokenizer> tok;
  std::string why;
};

TokenizerCache::TokenizerCache() = default;
TokenizerCache::~TokenizerCache() = default;

const Tokenizer* TokenizerCache::get(const std::string& model_path, std::string* why) {
  auto it = entries_.find(model_path);
  if (it == entries_.end()) {
    auto e = std::make_unique<Entry>();
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p(model_path);
    if (model_path.empty()) {
      e->why = "no model path stored";
    } else if (!fs::exists(p, ec)) {
      e->why = model_path + ": not found on this machine";
    } else {
      // A checkpoint file (llama2.c .bin): its tokenizer lives beside it.
      const std::string fname = p.filename().string();
      const bool tokenizer_file = p.extension() == ".json" || p.extension() == ".model" ||
                                  (p.extension() == ".bin" && fname.rfind("tok", 0) == 0);
      if (fs::is_regular_file(p, ec) && !tokenizer_file) p = p.parent_path();
      try {
        e->tok = load_tokenizer(p);
      } catch (const std::exception& ex) {
        e->why = ex.what();
      }
    }
    it = entries_.emplace(model_path, std::move(e)).first;
  }
  if (why) *why = it->second->why;
  return it->second->tok.get();
}

std::string display_token(const std::string& text) {
  if (text.empty()) return "\xe2\x88\x85";
  std::string out;
  out.reserve(text.size() + 4);
  for (unsigned char c : text) {
    if (c == '\n') out += "\xe2\x86\xb5";
    else if (c == '\t') out += "\xe2\x86\x92";
    else if (c == '\r') out += "\\r";
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

// ---- loading --------------------------------------------------------------------------------------

std::shared_ptr<const RunData> load_run_data(const sessions::SessionStore& store, std::int64_t run,
                                             TokenizerCache* tokenizers) {
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
  const auto L = static_cast<std::size_t>(d->n_layer);
  const std::int64_t H = d->n_head_kv, T = d->n_tok;

  // Token texts: the model's tokenizer when it loads here (paths are stored as given: also try
  // relative to the database's directory), else ids.
  const Tokenizer* tok = nullptr;
  if (tokenizers) {
    std::string why;
    tok = tokenizers->get(m.path, &why);
    if (!tok && !m.path.empty() && std::filesystem::path(m.path).is_relative()) {
      const auto alt = (std::filesystem::path(store.path()).parent_path() / m.path).string();
      std::string why2;
      tok = tokenizers->get(alt, &why2);
    }
    if (!tok) d->tokenizer_note = why;
  } else {
    d->tokenizer_note = "no tokenizer loaded";
  }
  d->token_text.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::string t;
    if (tok && ids[i] >= 0 && ids[i] < tok->vocab_size()) t = tok->token_text(ids[i]);
    d->token_text[i] = tok ? t : "#" + std::to_string(ids[i]);
  }
  d->tokens_from_tokenizer = tok != nullptr;

  // Which blobs exist (names only; bytes are fetched per name below).
  bool any_kept = false, any_summary = false, any_attention = false, any_cos = false, any_channels = false, any_pca = false,
       any_topk = false;
  for (const auto& b : d->record.blobs) {
    if (b.name == "kept_positions") any_kept = true;
    else if (b.name == "head_summary") any_summary = true;
    else if (b.name == "attention") any_attention = true;
    else if (b.name == "cos_to_mean") any_cos = true;
    else if (b.name == "channel_mean" || b.name == "channel_cv") any_channels = true;
    else if (b.name == "keys_pca") any_pca = true;
    else if (b.name == "topk_unique") any_topk = true;
    else d->other_blobs.push_back(b);
  }

  d->kept.assign(L, std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(H)));
  if (any_kept) {
    for (const auto& b : store.load_blobs(run, "kept_positions")) {
      if (b.layer < 0 || b.layer >= d->n_layer || b.head < 0 || b.head >= H) continue;
      std::vector<std::int64_t> v;
      if (b.dtype == sessions::DType::kI64) v = b.values<std::int64_t>();
      else if (b.dtype == sessions::DType::kI32) {
        for (auto x : b.values<std::int32_t>()) v.push_back(x);
      } else {
        for (auto x : b.to_f32()) v.push_back(static_cast<std::int64_t>(x));
      }
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      d->kept[static_cast<std::size_t>(b.layer)][static_cast<std::size_t>(b.head)] = std::move(v);
      d->has_kept = true;
    }
  }
  d->keep_count.assign(static_cast<std::size_t>(T), 0);
  if (d->has_kept) {
    for (const auto& layer : d->kept)
      for (const auto& head : layer)
        for (std::int64_t p : head)
          if (p >= 0 && p < T) ++d->keep_count[static_cast<std::size_t>(p)];
  } else {
    std::fill(d->keep_count.begin(), d->keep_count.end(), static_cast<std::uint32_t>(d->n_layer * H));
  }

  d->summary_names = head_summary_names();
  const std::size_t M = d->summary_names.size();
  d->summary.assign(L * static_cast<std::size_t>(H) * M, kNaN);
  if (any_summary) {
    for (const auto& b : store.load_blobs(run, "head_summary")) {
      if (b.layer < 0 || b.layer >= d->n_layer || b.shape.size() != 2 || b.shape[0] != H) continue;
      const auto v = b.to_f32();
      const auto cols = static_cast<std::size_t>(b.shape[1]);
      for (std::int64_t h = 0; h < H; ++h)
        for (std::size_t k = 0; k < std::min(cols, M); ++k)
          d->summary[(static_cast<std::size_t>(b.layer * H + h)) * M + k] = v[static_cast<std::size_t>(h) * cols + k];
      d->has_summary = true;
    }
  }

  auto per_layer = [&](const char* name, std::int64_t cols, std::vector<std::vector<float>>& out, bool any) {
    out.assign(L, {});
    bool got = false;
    if (!any) return false;
    for (const auto& b : store.load_blobs(run, name)) {
      if (b.layer < 0 || b.layer >= d->n_layer) continue;
      if (take_matrix(b, H, cols, out[static_cast<std::size_t>(b.layer)])) got = true;
      else out[static_cast<std::size_t>(b.layer)].clear();
    }
    return got;
  };
  d->has_attention = per_layer("attention", T, d->attention, any_attention);
  d->has_cos = per_layer("cos_to_mean", T, d->cos_to_mean, any_cos);
  d->has_channels = per_layer("channel_mean", d->head_dim, d->channel_mean, any_channels);
  per_layer("channel_cv", d->head_dim, d->channel_cv, any_channels);
  d->keys_pca.assign(L, {});
  if (any_pca)
    for (const auto& b : store.load_blobs(run, "keys_pca")) {
      if (b.layer < 0 || b.layer >= d->n_layer || b.shape != std::vector<std::int64_t>{H, T, 2}) continue;
      d->keys_pca[static_cast<std::size_t>(b.layer)] = b.to_f32();
      d->has_pca = true;
    }
  if (any_topk)
    if (auto b = store.load_blob(run, "topk_unique", -1, -1); b && b->shape.size() == 2) {
      d->topk_unique = b->to_f32();
      d->topk_rows = b->shape[0];
      d->topk_cols = b->shape[1];
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

}  // namespace kvscope::gui
