#include "kvscope/core/presets.h"

namespace kvscope {

const std::vector<Preset>& pipeline_presets() {
  static const std::vector<Preset> presets = {
      {"rocketkv", "snapkv:window=32,kernel=63,pool=max,gqa=sum+hsa", "--budget t --budget-unit fetched (256-4096)",
       BudgetUnit::kFetched, 256, "RocketKV (Behnam et al. 2025) §3.3-3.6, App. A.3"},
      {"hsa-only", "hsa:stage1=false", "--budget t --budget-unit fetched", BudgetUnit::kFetched, 256,
       "RocketKV §4.4 ablation (HSA alone)"},
      {"ada-snapkv", "snapkv:window=32,kernel=7,pool=max,gqa=mean+adakv:alpha=0.2",
       "--budget b --budget-unit stored (128-2048 per head)", BudgetUnit::kStored, 128,
       "Ada-KV (Feng et al. 2024) §4.1"},
      {"pyramidkv-paper", "pyramidkv:window=32,kernel=7,pool=max,gqa=mean+pyramid:beta=20",
       "--budget b --budget-unit stored", BudgetUnit::kStored, 128,
       "PyramidKV (Cai et al. 2024) §3.2, as Ada-KV §4.1 runs it (uniform within a layer)"},
      {"ada-pyramidkv", "pyramidkv:window=32,kernel=7,pool=max,gqa=mean+pyramid:beta=20+adakv:alpha=0.2",
       "--budget b --budget-unit stored", BudgetUnit::kStored, 128,
       "Ada-KV §4.1 (Ada-Pyramid: PyramidKV's layer budgets, Ada-KV within each layer)"},
      {"snapkv-paper", "snapkv:window=32,kernel=7,pool=max,gqa=mean", "--budget b --budget-unit stored",
       BudgetUnit::kStored, 128, "SnapKV (Li et al. 2024) §4; as Ada-KV and SPARK run it"},
      {"spark-paper", "snapkv:window=32,kernel=7,pool=max,gqa=mean+spark:ratio=0.5",
       "--budget b --budget-unit stored (128-2048 per head)", BudgetUnit::kStored, 128,
       "SPARK (Liao et al. 2025) §5.1-5.2: SnapKV with keys pruned at λ = 0.5"},
      {"spark-kv-paper", "snapkv:window=32,kernel=7,pool=max,gqa=mean+spark:ratio=0.5,value_ratio=0.5",
       "--budget b --budget-unit stored (128-2048 per head)", BudgetUnit::kStored, 128,
       "SPARK App. D, Table 5: keys and values pruned at 0.5 + 0.5"},
      {"spark-g-paper", "snapkv:window=32,kernel=7,pool=max,gqa=mean+spark:mode=g,groups=4",
       "--budget b --budget-unit stored (128-2048 per head)", BudgetUnit::kStored, 128,
       "SPARK §5.5, Table 4: SPARK-g with 4 groups"},
      {"think-paper", "snapkv:window=32,kernel=7,pool=max,gqa=mean+think:ratio=0.5",
       "--budget b --budget-unit stored (128-2048 per head)", BudgetUnit::kStored, 128,
       "ThinK (Xu et al. 2024) §3, as SPARK §5.1 runs it (SnapKV, λ = 0.5)"},
      {"snapkv-kvpress", "snapkv:window=64,kernel=5,pool=avg,gqa=mean", "--compression-ratio R",
       BudgetUnit::kCompressionRatio, 0.5, "NVIDIA kvpress SnapKVPress defaults (the golden references)"},
      {"keydiff-paper", "keydiff:anchor=normalized,block=128+decoding", "--budget N --budget-unit stored (2K-8K)",
       BudgetUnit::kStored, 2048, "KeyDiff (Park et al. 2025) §3, Eq. 8"},
      {"tova-paper", "tova+decoding", "--budget b --budget-unit stored", BudgetUnit::kStored, 512,
       "TOVA (Oren et al. 2024) §3.3: evicts the least attended entry at every step"},
      {"streamingllm-paper", "streamingllm:sink=4+decoding", "--budget b --budget-unit stored", BudgetUnit::kStored,
       128, "StreamingLLM (Xiao et al. 2024) §3"},
      {"quest-paper", "quest", "--budget t --budget-unit fetched", BudgetUnit::kFetched, 256,
       "Quest (Tang et al. 2024), as RocketKV App. A.3 runs it"},
      {"sparq-paper", "sparq", "--budget t --budget-unit fetched", BudgetUnit::kFetched, 256,
       "SparQ (Ribar et al. 2024), as RocketKV App. A.3 runs it"},
      {"exacttopk-paper", "exacttopk", "--budget t --budget-unit fetched", BudgetUnit::kFetched, 256,
       "RocketKV App. A.3 oracle"},
  };
  return presets;
}

std::optional<std::string> preset_spec(const std::string& name) {
  for (const auto& p : pipeline_presets())
    if (p.name == name) return p.spec;
  return std::nullopt;
}

}  // namespace kvscope
