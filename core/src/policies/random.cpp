// "random" scoring: the random-eviction baseline (kvpress RandomPress): i.i.d. U[0, 1) scores from a
// seeded CPU generator, so a given (seed, layer, shape) always gives the same selection.
//
//   score[h,j] ~ U[0,1)   generator seeded with seed * 1000003 + layer
//
// Unlike kvpress (which reuses one seed, hence the same scores, in every layer), each layer draws its
// own stream. Shapes: in.keys [n_head_kv, n_tok, D] (only its shape/device is read);
// returns fp32 [n_head_kv, n_tok] on the keys' device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

class Random : public ScoringBase {
 public:
  explicit Random(const ParamValues& v) : ScoringBase("random", v), seed_(param_int(v, "seed")) {}
  int64_t prefill_queries() const override { return 0; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("random", in, /*needs_queries=*/false);
    at::Generator gen =
        at::detail::createCPUGenerator(static_cast<uint64_t>(seed_) * 1000003u + static_cast<uint64_t>(in.layer));
    at::Tensor s = at::rand({in.keys.size(0), in.keys.size(1)}, gen, at::TensorOptions().dtype(at::kFloat));
    return s.to(in.keys.device());
  }

 private:
  int64_t seed_;
};

}  // namespace

PolicyRegistry::Entry random_entry() {
  return {"random",
          Stage::kScoring,
          {int_param("seed", 0, 2147483647, "0", "seed of the score generator (mixed with the layer index)",
                     "baseline (kvpress RandomPress)")},
          "uniform random scores, seeded (random-eviction baseline, kvpress RandomPress)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Random>(v); },
          "i.i.d. U[0,1) draw (random-eviction baseline)"};
}

}  // namespace kvscope::policies
