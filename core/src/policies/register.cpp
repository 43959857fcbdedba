// register_builtin_policies: every built-in scoring (S1) and budget (S2) policy. Each entry (name,
// stage, ParamSpec table, one-line summary with its paper, factory) is defined beside its policy in
// core/src/policies/<name>.cpp.
#include "kvscope/core/policy.h"
#include "policies/entries.h"

namespace kvscope {

void register_builtin_policies(PolicyRegistry& registry) {
  using namespace policies;
  // S0 head pattern
  registry.add(heads_entry());
  // S1 scoring
  registry.add(snapkv_entry());
  registry.add(pyramidkv_entry());
  registry.add(streamingllm_entry());
  registry.add(h2o_entry());
  registry.add(tova_entry());
  registry.add(knorm_entry());
  registry.add(keydiff_entry());
  registry.add(random_entry());
  // S2 budget allocation
  registry.add(uniform_entry());
  registry.add(adakv_entry());
  // S2 layer budget
  registry.add(pyramid_entry());
  // S4 channel pruning
  registry.add(spark_entry());
  registry.add(think_entry());
  // S5 decode-time selection
  registry.add(hsa_entry());
  registry.add(quest_entry());
  registry.add(sparq_entry());
  registry.add(exacttopk_entry());
  // S6 maintenance
  registry.add(decoding_entry());
  // S7 multi-turn
  registry.add(rocketkv_mt_entry());
}

}  // namespace kvscope
