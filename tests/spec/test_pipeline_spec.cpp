// kvscope_spec, the torch-free description of a pipeline: the SPEC grammar (whitespace included),
// validation against a catalogue (stage rules, parameters, the default budget stage), the budget
// unit table and the stage table. The catalogue here is made by hand (no LibTorch), with the stage
// and parameter kinds the built-in policies use; the built-ins themselves are covered by
// tests/core/test_policy_conformance.cpp and tests/gui/test_pipeline_editor.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "kvscope/core/budget.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/pipeline_spec.h"
#include "kvscope/core/policy_catalog.h"
#include "kvscope/core/presets.h"
#include "kvscope/core/stage.h"

namespace kvscope {
namespace {

ParamSpec int_p(std::string key, double lo, double hi, std::string def) {
  return {std::move(key), ParamType::kInt, lo, hi, std::move(def), {}, "help", "ref"};
}

PolicyCatalog test_catalog() {
  PolicyCatalog c;
  c.add({"snapkv",
         Stage::kScoring,
         {int_p("window", 1, 4096, "32"), {"pool", ParamType::kChoice, 0, 0, "max", {"avg", "max"}, "h", "r"}},
         "s"});
  c.add({"knorm", Stage::kScoring, {}, "s"});
  c.add({"pyramidkv", Stage::kScoring, {int_p("window", 1, 4096, "64")}, "s", "", "pyramid"});
  c.add({"pyramid", Stage::kLayerBudget, {int_p("beta", 1, 100, "20")}, "s"});
  c.add({"uniform", Stage::kBudget, {}, "s"});
  c.add({"adakv", Stage::kBudget, {{"alpha", ParamType::kFloat, 0, 1, "0.2", {}, "h", "r"}}, "s"});
  c.add({"heads", Stage::kHeadPattern, {{"pattern", ParamType::kPath, 0, 0, "", {}, "h", "r"}}, "s"});
  c.add({"spark", Stage::kChannel, {{"ratio", ParamType::kFloat, 0, 1, "0.5", {}, "h", "r"}}, "s"});
  c.add({"hsa", Stage::kDecodeSelection, {{"stage1", ParamType::kBool, 0, 0, "true", {}, "h", "r"}}, "s"});
  c.add({"quest", Stage::kDecodeSelection, {int_p("page", 1, 1024, "16")}, "s"});
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSpec, WhitespaceAroundNamesKeysAndValuesIsIgnored) {
  const auto spaced = parse_pipeline_spec("  snapkv : window = 64 , pool=avg +\tadakv:alpha= 0.2 ");
  const auto tight = parse_pipeline_spec("snapkv:window=64,pool=avg+adakv:alpha=0.2");
  ASSERT_EQ(spaced.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(spaced[i].policy, tight[i].policy);
    EXPECT_EQ(spaced[i].params, tight[i].params);
  }
  EXPECT_EQ(write_pipeline_spec(spaced), "snapkv:pool=avg,window=64+adakv:alpha=0.2");
}

TEST(PipelineSpec, MalformedSpecsNameTheOffendingPart) {
  EXPECT_NE(error_of([] { parse_pipeline_spec("snapkv+"); }).find("empty stage name"), std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_spec(" + snapkv"); }).find("empty stage name"), std::string::npos);
  EXPECT_NE(
      error_of([] { parse_pipeline_spec("snapkv:window"); }).find("expected key=value in stage 'snapkv', got 'window'"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_spec("snapkv: =3"); }).find("expected key=value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_spec("snapkv:window=1, window =2"); }).find("'window' given twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { expand_pipeline_presets("rocketkv:x=1"); }).find("takes no parameters"), std::string::npos);
}

TEST(PipelineSpec, PresetsExpandToTheirStages) {
  ASSERT_FALSE(pipeline_presets().empty());
  for (const Preset& p : pipeline_presets()) {
    SCOPED_TRACE(p.name);
    const auto stages = expand_pipeline_presets(p.name);
    EXPECT_EQ(write_pipeline_spec(stages), write_pipeline_spec(parse_pipeline_spec(p.spec)));
  }
}

TEST(PolicyCatalog, ResolvesParametersAndInsertsTheDefaultBudgetStage) {
  const PolicyCatalog c = test_catalog();
  const auto stages = resolve_pipeline(c, "snapkv:window=64");
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[1].policy->name, "uniform");
  EXPECT_EQ(canonical_spec(stages), "snapkv:pool=max,window=64+uniform");
  EXPECT_TRUE(pipeline_uses_budget(stages));
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "snapkv + adakv + spark")),
            "snapkv:pool=max,window=32+adakv:alpha=0.2+spark:ratio=0.5");
}

TEST(PolicyCatalog, AScorersOwnLayerBudgetComesBeforeTheDefaultHeadBudget) {
  const PolicyCatalog c = test_catalog();
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "pyramidkv")), "pyramidkv:window=64+pyramid:beta=20+uniform");
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "pyramidkv+adakv")),
            "pyramidkv:window=64+pyramid:beta=20+adakv:alpha=0.2");
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "pyramidkv+pyramid:beta=4")),
            "pyramidkv:window=64+pyramid:beta=4+uniform");
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "knorm+pyramid+adakv:alpha=0.5")),
            "knorm+pyramid:beta=20+adakv:alpha=0.5");
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "knorm")), "knorm+uniform");  // no layer budget of its own
}

TEST(PolicyCatalog, StageRulesAreEnforcedWithClearMessages) {
  const PolicyCatalog c = test_catalog();
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "adakv+snapkv"); }).find("stage 'snapkv' comes after a later stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv+knorm"); }).find("more than one scoring stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv+uniform+adakv"); }).find("more than one budget stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv+pyramid+pyramid"); }).find("more than one layer-budget stage"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { resolve_pipeline(c, "pyramid+quest"); }).find("a layer budget allocates the entries a scoring"),
      std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv+adakv+pyramid"); }).find("comes after a later stage"),
            std::string::npos);
  // Channel pruning stacks under one selection stage, written in either order (docs/methods.md §4.10).
  EXPECT_EQ(error_of([&] { resolve_pipeline(c, "snapkv+spark+hsa"); }), "");
  EXPECT_EQ(canonical_spec(resolve_pipeline(c, "snapkv+hsa+spark")),
            canonical_spec(resolve_pipeline(c, "snapkv+spark+hsa")));
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "quest+hsa"); }).find("more than one decode-time selection stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "spark+spark+hsa"); }).find("more than one channel-pruning stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "adakv"); }).find("has no head-pattern, scoring or decode-time stage"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "heads:pattern=p.json+snapkv"); }).find("not supported"),
            std::string::npos);
  const std::string unknown = error_of([&] { resolve_pipeline(c, "snapkvv"); });
  EXPECT_NE(unknown.find("unknown policy 'snapkvv' (known: adakv, heads, hsa, knorm, pyramid, pyramidkv, quest, "
                         "snapkv, spark, uniform)"),
            std::string::npos)
      << unknown;
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv:window=0"); }).find("'window' = 0 is outside [1, 4096]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "snapkv:pool=median"); }).find("is not one of avg|max"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "hsa:stage1=yes"); }).find("must be true or false"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "quest:page=2.5"); }).find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_pipeline(c, "spark:ratio=nan"); }).find("outside"), std::string::npos);
}

TEST(PolicyCatalog, BudgetFreePipelinesAreKnownAsSuch) {
  const PolicyCatalog c = test_catalog();
  EXPECT_FALSE(pipeline_uses_budget(resolve_pipeline(c, "heads:pattern=p.json")));
  EXPECT_FALSE(pipeline_uses_budget(resolve_pipeline(c, "spark")));
  EXPECT_TRUE(pipeline_uses_budget(resolve_pipeline(c, "heads:pattern=p.json+quest")));
  EXPECT_TRUE(pipeline_uses_budget(resolve_pipeline(c, "hsa:stage1=false")));
}

TEST(PolicyCatalog, ListsPoliciesInStageOrderThenByName) {
  const PolicyCatalog c = test_catalog();
  std::vector<std::string> names;
  for (const auto& p : c.policies()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"heads", "knorm", "pyramidkv", "snapkv", "pyramid", "adakv", "uniform",
                                             "spark", "hsa", "quest"}));
  EXPECT_EQ(c.find("nope"), nullptr);
}

TEST(StageTable, EveryStageHasOneRowInExecutionOrderAndItsKeyParsesBack) {
  std::set<std::string_view> keys;
  int number = 0;  // labels S0..S7 in execution order; S2 (budget allocation) has two rows
  for (size_t i = 0; i < stage_table().size(); ++i) {
    const StageInfo& s = stage_table()[i];
    EXPECT_EQ(static_cast<size_t>(s.stage), i);
    EXPECT_EQ(parse_stage(s.key), s.stage);
    EXPECT_TRUE(keys.insert(s.key).second);
    if (s.label.substr(0, 2) != "S" + std::to_string(number)) ++number;
    EXPECT_EQ(s.label.substr(0, 3), "S" + std::to_string(number) + " ") << s.label;
  }
  EXPECT_EQ(number, 7);
  EXPECT_EQ(stage_info(Stage::kLayerBudget).label, "S2 layer budget");
  EXPECT_EQ(stage_info(Stage::kBudget).label, "S2 head budget");
  EXPECT_EQ(stage_key(Stage::kDecodeSelection), "decode_selection");
  EXPECT_FALSE(parse_stage("Scoring"));
}

TEST(BudgetUnits, OneTableOfNamesWithTheGridAlias) {
  for (const BudgetUnitInfo& u : budget_unit_table()) {
    EXPECT_EQ(find_budget_unit(u.name), u.unit);
    EXPECT_EQ(budget_unit_name(u.unit), u.name);
  }
  EXPECT_EQ(parse_budget_unit("ratio"), BudgetUnit::kCompressionRatio);
  EXPECT_EQ(budget_unit_name(BudgetUnit::kCompressionRatio), "compression_ratio");
  EXPECT_NE(error_of([] { parse_budget_unit("percent"); }).find("unknown budget unit 'percent'"), std::string::npos);
  EXPECT_EQ(format_budget(BudgetUnit::kStored, 128), "128 stored/head");
  EXPECT_EQ(format_budget(BudgetUnit::kCompressionRatio, 0.75), "ratio 0.75");
}

TEST(BudgetUnits, ValuesAreCheckedAgainstTheirUnitsRange) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NO_THROW((BudgetSpec{BudgetUnit::kCompressionRatio, 0.0}.validate()));
  EXPECT_THROW((BudgetSpec{BudgetUnit::kCompressionRatio, 1.0}.validate()), InputError);
  EXPECT_THROW((BudgetSpec{BudgetUnit::kFraction, 0.0}.validate()), InputError);
  EXPECT_THROW((BudgetSpec{BudgetUnit::kFraction, nan}.validate()), InputError);
  EXPECT_THROW((BudgetSpec{BudgetUnit::kStored, 0.5}.validate()), InputError);
  EXPECT_EQ((BudgetSpec{BudgetUnit::kCompressionRatio, 0.75}.kept_per_head(100)), 25);
  EXPECT_EQ((BudgetSpec{BudgetUnit::kFraction, 0.25}.kept_per_head(100)), 25);
  EXPECT_EQ((BudgetSpec{BudgetUnit::kStored, 500}.kept_per_head(100)), 100);
}

TEST(ParamTypes, NamesRoundTrip) {
  for (ParamType t : {ParamType::kInt, ParamType::kFloat, ParamType::kChoice, ParamType::kBool, ParamType::kPath})
    EXPECT_EQ(parse_param_type(param_type_name(t)), t);
  EXPECT_FALSE(parse_param_type("integer"));
  EXPECT_EQ(param_range_text(int_p("w", 1, 1048576, "4")), "[1, 1048576]");
}

}  // namespace
}  // namespace kvscope

// Issue 30: loading a preset (the GUI's "Load preset...") sets the budget unit its paper uses; the
// table's unit and value agree with its documented options and the unit's range.
TEST(Presets, EachPresetCarriesTheUnitItsBudgetIsDocumentedIn) {
  for (const kvscope::Preset& p : kvscope::pipeline_presets()) {
    SCOPED_TRACE(p.name);
    if (p.budget.find("--compression-ratio") != std::string::npos)
      EXPECT_EQ(p.unit, kvscope::BudgetUnit::kCompressionRatio);
    else
      EXPECT_NE(p.budget.find("--budget-unit " + std::string(kvscope::budget_unit_name(p.unit))), std::string::npos);
    EXPECT_NO_THROW((kvscope::BudgetSpec{p.unit, p.value}.validate()));
  }
  const auto& all = kvscope::pipeline_presets();
  const auto kvpress = std::find_if(all.begin(), all.end(), [](const auto& p) { return p.name == "snapkv-kvpress"; });
  ASSERT_NE(kvpress, all.end());
  EXPECT_EQ(kvpress->unit, kvscope::BudgetUnit::kCompressionRatio);
}
