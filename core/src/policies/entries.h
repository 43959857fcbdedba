#pragma once
// Internal header of the policy registry: the registry entry (name, stage, ParamSpec table, summary,
// factory) of every built-in policy, each defined beside its policy in core/src/policies/<name>.cpp.
// Used by register.cpp (register_builtin_policies), and by rocketkv_mt.cpp, which builds its inner
// HSA policy from hsa_entry().
#include "kvscope/core/policy.h"

namespace kvscope::policies {

// S0 head pattern
PolicyRegistry::Entry heads_entry();  // heads.cpp
// S1 scoring
PolicyRegistry::Entry snapkv_entry();        // snapkv.cpp
PolicyRegistry::Entry pyramidkv_entry();     // pyramidkv.cpp
PolicyRegistry::Entry streamingllm_entry();  // streamingllm.cpp
PolicyRegistry::Entry h2o_entry();           // h2o.cpp
PolicyRegistry::Entry tova_entry();          // tova.cpp
PolicyRegistry::Entry knorm_entry();         // knorm.cpp
PolicyRegistry::Entry keydiff_entry();       // keydiff.cpp
PolicyRegistry::Entry random_entry();        // random.cpp
// S2 budget allocation
PolicyRegistry::Entry uniform_entry();  // uniform.cpp
PolicyRegistry::Entry pyramid_entry();  // pyramid.cpp
PolicyRegistry::Entry adakv_entry();    // adakv.cpp
// S4 channel pruning
PolicyRegistry::Entry spark_entry();  // spark.cpp
PolicyRegistry::Entry think_entry();  // think.cpp
// S5 decode-time selection
PolicyRegistry::Entry hsa_entry();        // hsa.cpp
PolicyRegistry::Entry quest_entry();      // quest.cpp
PolicyRegistry::Entry sparq_entry();      // sparq.cpp
PolicyRegistry::Entry exacttopk_entry();  // exacttopk.cpp
// S6 maintenance
PolicyRegistry::Entry decoding_entry();  // decoding.cpp
// S7 multi-turn
PolicyRegistry::Entry rocketkv_mt_entry();  // rocketkv_mt.cpp

}  // namespace kvscope::policies
