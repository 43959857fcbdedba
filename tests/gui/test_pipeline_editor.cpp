// Pipeline editor round trip: values edited in the typed editor state become ParamValues that
// resolve_params accepts unchanged and that parse back (param_int / param_float / param_bool) to
// exactly the edited values; SPEC text -> editor -> SPEC matches Pipeline::canonical(). Every
// registered policy is covered, so a new policy is tested for free. The editor UI is also drawn.
#include <gtest/gtest.h>

#include <cmath>

#include "headless.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"
#include "pipeline_editor.h"

namespace kvscope::gui {
namespace {

class PipelineEditor : public ::testing::Test {
 protected:
  void SetUp() override {
    register_builtin_policies(registry_);
    catalog_ = registry_.catalog();
  }
  // Edited values -> ParamValues -> resolve_params: unchanged, and typed values equal.
  void expect_round_trip(const StageEdit& st) {
    SCOPED_TRACE(st.policy);
    const auto& entry = registry_.catalog().at(st.policy);
    const ParamValues values = to_values(st, catalog_);
    ParamValues resolved;
    ASSERT_NO_THROW(resolved = resolve_params(st.policy, entry.params, values)) << to_spec({{st}}, catalog_);
    EXPECT_EQ(resolved, values);
    for (const auto& p : st.params) {
      SCOPED_TRACE(p.key);
      switch (p.type) {
        case ParamType::kInt:
          EXPECT_EQ(param_int(resolved, p.key), p.i);
          break;
        case ParamType::kFloat:
          EXPECT_EQ(param_float(resolved, p.key), p.f);
          break;
        case ParamType::kBool:
          EXPECT_EQ(param_bool(resolved, p.key), p.b);
          break;
        case ParamType::kChoice: {
          const ParamSpec* info = nullptr;
          for (const auto& q : catalog_.find(st.policy)->params)
            if (q.key == p.key) info = &q;
          ASSERT_TRUE(info);
          EXPECT_EQ(resolved.at(p.key), info->choices[static_cast<std::size_t>(p.choice)]);
          break;
        }
        case ParamType::kPath:
          EXPECT_EQ(resolved.at(p.key), p.text);
          break;
      }
    }
  }
  PolicyRegistry registry_;
  PolicyCatalog catalog_;
};

TEST_F(PipelineEditor, CatalogMirrorsTheRegistry) {
  EXPECT_EQ(catalog_.policies().size(), registry_.catalog().policies().size());
  for (const auto& p : catalog_.policies()) {
    const auto& e = registry_.catalog().at(p.name);
    EXPECT_EQ(p.params.size(), e.params.size()) << p.name;
    EXPECT_EQ(p.stage, e.stage);
  }
  EXPECT_TRUE(std::is_sorted(catalog_.policies().begin(), catalog_.policies().end(),
                             [](const PolicyDescription& a, const PolicyDescription& b) { return a.stage < b.stage; }));
  EXPECT_FALSE(pipeline_presets().empty());
}

TEST_F(PipelineEditor, DefaultsRoundTripForEveryPolicy) {
  for (const auto& p : catalog_.policies()) expect_round_trip(default_stage(p));
}

TEST_F(PipelineEditor, EditedValuesRoundTripForEveryPolicy) {
  for (const auto& pol : catalog_.policies()) {
    // Each parameter at its minimum, its maximum and in between; each choice; bools flipped.
    for (int variant = 0; variant < 4; ++variant) {
      StageEdit st = default_stage(pol);
      for (std::size_t k = 0; k < st.params.size(); ++k) {
        ParamEdit& e = st.params[k];
        const ParamSpec& info = pol.params[k];
        switch (info.type) {
          case ParamType::kInt: {
            const auto lo = static_cast<std::int64_t>(std::ceil(info.min)),
                       hi = static_cast<std::int64_t>(std::floor(info.max));
            const long double span = static_cast<long double>(hi) - static_cast<long double>(lo);
            e.i = variant == 0 ? lo : variant == 1 ? hi : lo + static_cast<std::int64_t>(span / (variant == 2 ? 3 : 2));
            break;
          }
          case ParamType::kFloat:
            e.f = variant == 0   ? info.min
                  : variant == 1 ? info.max
                  : variant == 2 ? info.min + (info.max - info.min) * 0.3
                                 : info.min + (info.max - info.min) / 7.0;
            break;
          case ParamType::kBool:
            e.b = variant % 2 == 1;
            break;
          case ParamType::kChoice:
            e.choice = info.choices.empty() ? 0 : static_cast<int>(variant % static_cast<int>(info.choices.size()));
            break;
          case ParamType::kPath:
            break;  // files are checked when the policy opens them
        }
      }
      expect_round_trip(st);
    }
  }
}

TEST_F(PipelineEditor, SpecTextRoundTripsToTheCanonicalPipeline) {
  for (const std::string spec : {"snapkv", "snapkv:window=64,kernel=5,pool=avg,gqa=mean+adakv:alpha=0.2",
                                 "streamingllm:sink=4", "keydiff:block=128", "tova", "knorm", "rocketkv",
                                 "snapkv+spark:ratio=0.5", "quest", "pyramidkv+adakv", "ada-snapkv", "h2o+pyramid"}) {
    SCOPED_TRACE(spec);
    PipelineEdit e;
    ASSERT_NO_THROW(e = from_spec(spec, catalog_));
    EXPECT_TRUE(check(e, catalog_).empty());
    const std::string mine = to_spec(e, catalog_);
    const Pipeline canonical(registry_, spec);
    const Pipeline again(registry_, mine);
    EXPECT_EQ(again.canonical(), canonical.canonical());
    // The editor's own SPEC is stable.
    EXPECT_EQ(to_spec(from_spec(mine, catalog_), catalog_), mine);
  }
}

TEST_F(PipelineEditor, BadSpecsAndValuesAreReported) {
  EXPECT_THROW(from_spec("nosuchpolicy", catalog_), InputError);
  EXPECT_THROW(from_spec("snapkv:nokey=1", catalog_), InputError);
  EXPECT_THROW(from_spec("snapkv:window", catalog_), InputError);
  EXPECT_THROW(from_spec("snapkv:window=abc", catalog_), InputError);
  EXPECT_THROW(from_spec("snapkv+", catalog_), InputError);
  PipelineEdit e = from_spec("snapkv", catalog_);
  for (auto& p : e.stages[0].params)
    if (p.type == ParamType::kInt) p.i = -1000000000;
  EXPECT_FALSE(check(e, catalog_).empty());
  // Stage order: a budget stage before the scorer.
  PipelineEdit order = from_spec("adakv", catalog_);
  order.stages.push_back(from_spec("snapkv", catalog_).stages[0]);
  EXPECT_FALSE(check(order, catalog_).empty());
  EXPECT_EQ(format_number(0.2), "0.2");
  EXPECT_EQ(format_number(64), "64");
  EXPECT_EQ(format_number(1e-5), "1e-05");
}

TEST_F(PipelineEditor, EditorDrawsEveryPolicy) {
  HeadlessImGui im(1200, 900);
  PipelineEdit e;
  for (const auto& p : catalog_.policies()) e.stages.push_back(default_stage(p));
  for (int f = 0; f < 10; ++f)
    im.frame(
        [&] {
          ImGui::SetNextWindowPos({0, 0});
          ImGui::SetNextWindowSize({1200, 900});
          ImGui::Begin("editor");
          draw_pipeline_editor(e, catalog_);
          ImGui::End();
        },
        {300.0f + f * 10, 200.0f + f * 30});
  EXPECT_EQ(e.stages.size(), catalog_.policies().size());
  EXPECT_GT(im.vertices(), 1000);
}

}  // namespace
}  // namespace kvscope::gui
