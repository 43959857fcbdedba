#pragma once
// The pipeline SPEC grammar: `name[:key=value,...][+name[:...]]...` in stage order, with preset
// names (presets.h) expanded. Torch-free (kvscope_spec); validation against the registered
// policies is policy_catalog.h's resolve_pipeline.
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/param_spec.h"

namespace kvscope {

/// One stage as written: `name[:key=value,...]`.
struct StageSpec {
  std::string policy;
  ParamValues params;
};

/// Parses `name[:key=value,...][+name[:...]]...`. ASCII whitespace around names, keys and values
/// is ignored ("snapkv : window = 64 + adakv" is "snapkv:window=64+adakv"). Throws InputError
/// naming the offending part (empty stage, missing '=', empty key, duplicate key).
std::vector<StageSpec> parse_pipeline_spec(std::string_view spec);

/// parse_pipeline_spec with preset names (presets.h) replaced by their stages. Throws InputError,
/// also for a preset given parameters.
std::vector<StageSpec> expand_pipeline_presets(std::string_view spec);

/// The SPEC text of `stages`: "policy:k=v,...+policy..." (keys in map order).
std::string write_pipeline_spec(const std::vector<StageSpec>& stages);

}  // namespace kvscope
