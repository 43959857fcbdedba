// DuoAttention's published head patterns (full_attention_heads.tsv + config.json, as in
// mit-han-lab/duo-attention attn_patterns/) read as head patterns: parsing, binarization by sparsity
// (np.quantile threshold) and threshold, RocketKV App. A.3's rule at a token budget, a generation on
// pycode-16m with an imported pattern, and bad files named with their line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvscope/core/duo_pattern.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/timeline.h"
#include "pycode_fixture.h"
#include "small_config.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

fs::path duo_data() { return test::source_dir() / "tests/data/duo"; }

/// The message of the InputError `f` throws ("" if it throws none).
template <class F>
std::string input_error(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

using Mask = std::vector<std::vector<bool>>;
constexpr bool R = true, S = false;  // retrieval (dense), streaming

// tests/data/duo/small/full_attention_heads.tsv, 3 layers x 4 KV heads, no config.json; after
// clipping (-1.2e-4 -> 0), ascending:
//   0 (0,1) < 2.0e-4 (0,3) < 2.06e-3 (2,2) < 0.4277 (1,1) < 0.5586 (0,2) < 0.6211 (2,1)
//   < 0.78125 (1,2) < 0.8359 (2,0) < 0.9258 (2,3) < 0.96875 (1,0) < 1 (0,0) = 1 (1,3)
TEST(DuoGates, ReadsThePublishedFormat) {
  const DuoGates g = read_duo_gates(duo_data() / "small");
  EXPECT_EQ(g.tsv, duo_data() / "small" / "full_attention_heads.tsv");
  EXPECT_TRUE(g.config.empty());
  ASSERT_EQ(g.gates.size(), 3u);
  for (const auto& row : g.gates) EXPECT_EQ(row.size(), 4u);
  EXPECT_EQ(g.n_heads(), 12);
  EXPECT_EQ(g.lines, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(g.gates[0][1], 0.0) << "clipped as load_attn_pattern's np.clip(0, 1)";
  EXPECT_EQ(g.gates[0][2], 0.55859375);
  EXPECT_EQ(g.gates[1][3], 1.0);
  EXPECT_EQ(g.gates[2][2], 2.0599365234375e-03);
  EXPECT_EQ(g.sink_size, 64) << "DuoAttention's --sink_size default";
  EXPECT_EQ(g.recent_size, 256) << "DuoAttention's --recent_size default";
  // The .tsv itself reads the same.
  EXPECT_EQ(read_duo_gates(g.tsv).gates, g.gates);

  // config.json beside the gates: its sink_size and recent_size (other keys ignored, nulls too).
  const DuoGates p = read_duo_gates(duo_data() / "pycode");
  EXPECT_EQ(p.config, duo_data() / "pycode" / "config.json");
  EXPECT_EQ(p.sink_size, 4);
  EXPECT_EQ(p.recent_size, 60);
  ASSERT_EQ(p.gates.size(), 8u);
  EXPECT_EQ(p.gates[1], (std::vector<double>{0.91, 0.01997}));

  // What np.loadtxt(delimiter="\t") also takes: '#' comments, blank lines, CRLF, a '+' sign.
  const DuoGates c = parse_duo_gates("# gates\n\n1\t+0.25\r\n0.5\t0.75  # layer 1\n\n", "mem.tsv");
  EXPECT_EQ(c.gates, (std::vector<std::vector<double>>{{1, 0.25}, {0.5, 0.75}}));
  EXPECT_EQ(c.lines, (std::vector<int64_t>{3, 4}));
}

TEST(DuoGates, StreamingCountFollowsNumpysQuantile) {
  // ceil(s x (n - 1)): heads strictly below np.quantile(gates, s) stream.
  EXPECT_EQ(duo_streaming_count(12, 0.5), 6);     // index 5.5
  EXPECT_EQ(duo_streaming_count(12, 0.25), 3);    // 2.75
  EXPECT_EQ(duo_streaming_count(12, 0.1), 2);     // 1.1
  EXPECT_EQ(duo_streaming_count(12, 0.75), 9);    // 8.25
  EXPECT_EQ(duo_streaming_count(11, 0.7), 7);     // 7.000000000000001 in doubles: gate 7 is the threshold
  EXPECT_EQ(duo_streaming_count(16, 0.5), 8);     // 7.5
  EXPECT_EQ(duo_streaming_count(256, 0.5), 128);  // Llama-3-8B's 32 x 8 at Duo's default
  EXPECT_EQ(duo_streaming_count(12, 0.0), 0);
  EXPECT_EQ(duo_streaming_count(12, 1.0), 12);
  EXPECT_EQ(duo_streaming_count(1, 0.5), 0);  // the one gate is its own quantile
}

TEST(DuoGates, SparsityStreamsTheLowestGates) {
  const DuoGates g = read_duo_gates(duo_data() / "small");
  const auto mask = [&](double s) { return duo_retrieval_lowest(g.gates, duo_streaming_count(12, s)); };
  EXPECT_EQ(mask(0.5), (Mask{{R, S, S, S}, {R, S, R, R}, {R, S, S, R}}));
  EXPECT_EQ(mask(0.25), (Mask{{R, S, R, S}, {R, R, R, R}, {R, R, S, R}}));
  EXPECT_EQ(mask(0.75), (Mask{{R, S, S, S}, {R, S, S, R}, {S, S, S, S}}));
  // 11 of 12: the cut falls between the two gates of 1; the earlier layer streams first.
  EXPECT_EQ(mask(0.95), (Mask{{S, S, S, S}, {S, S, S, R}, {S, S, S, S}}));

  DuoPatternOptions o;  // sparsity 0.5, sizes from the (absent) config.json
  const HeadPattern p = duo_head_pattern(g, o);
  EXPECT_EQ(p.method, "duo");
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_FALSE(p.layers[0][0].streaming);
  EXPECT_TRUE(p.layers[0][1].streaming);
  EXPECT_EQ(p.layers[0][1].sink, 64);
  EXPECT_EQ(p.layers[0][1].window, 256);
  o.sink = 8;
  o.recent = 24;
  EXPECT_EQ(duo_head_pattern(g, o).layers[2][2].sink, 8);
  EXPECT_EQ(duo_head_pattern(g, o).layers[2][2].window, 24);
}

TEST(DuoGates, ThresholdKeepsGatesAtOrAboveIt) {
  const DuoGates g = read_duo_gates(duo_data() / "small");
  EXPECT_EQ(duo_retrieval_threshold(g.gates, 0.5), (Mask{{R, S, R, S}, {R, S, R, R}, {R, R, S, R}}));
  EXPECT_EQ(duo_retrieval_threshold(g.gates, 0.78125), (Mask{{R, S, S, S}, {R, S, R, R}, {R, S, S, R}}));
  EXPECT_EQ(duo_retrieval_threshold(g.gates, 0.0), (Mask(3, std::vector<bool>(4, R))));
  DuoPatternOptions o;
  o.rule = DuoPatternOptions::Rule::kThreshold;
  o.threshold = 0.9;
  const HeadPattern p = duo_head_pattern(g, o);
  int64_t dense = 0;
  for (const auto& layer : p.layers)
    for (const auto& h : layer) dense += !h.streaming;
  EXPECT_EQ(dense, 4);  // 0.9258, 0.96875, 1, 1
}

TEST(RocketKvDuoRule, RetrievalShareMeetsTheBudgetOnAverage) {
  // t > 640: 128 + 512 per streaming head, n_r = floor(n (t - 640) / (L - 640)).
  RocketKvDuoPlan p = rocketkv_duo_rule(1024, 4096, 12);
  EXPECT_EQ(p.sink, 128);
  EXPECT_EQ(p.recent, 512);
  EXPECT_DOUBLE_EQ(p.retrieval_share, 384.0 / 3456.0);
  EXPECT_EQ(p.n_retrieval, 1);             // 1.33: (4096 + 11 x 640) / 12 = 928 <= 1024; 2 would average 1216
  p = rocketkv_duo_rule(2048, 8192, 256);  // Llama-3-8B: 32 layers x 8 KV heads
  EXPECT_DOUBLE_EQ(p.retrieval_share, 1408.0 / 7552.0);
  EXPECT_EQ(p.n_retrieval, 47);              // 47.73
  p = rocketkv_duo_rule(4096, 32768, 1024);  // Llama-2-7B: 32 x 32
  EXPECT_EQ(p.n_retrieval, 110);             // 1024 x 3456 / 32128 = 110.15
  p = rocketkv_duo_rule(641, 10000, 12);
  EXPECT_EQ(p.n_retrieval, 0);
  p = rocketkv_duo_rule(4096, 4096, 12);  // the whole sequence fits the budget
  EXPECT_EQ(p.n_retrieval, 12);
  EXPECT_EQ(p.retrieval_share, 1.0);
  // t <= 640: every head streams; 128 sinks above 256, else 20% of t; the rest recent.
  p = rocketkv_duo_rule(640, 0, 12);
  EXPECT_EQ(p.n_retrieval, 0);
  EXPECT_EQ(p.sink, 128);
  EXPECT_EQ(p.recent, 512);
  p = rocketkv_duo_rule(512, 0, 12);
  EXPECT_EQ(p.sink, 128);
  EXPECT_EQ(p.recent, 384);
  p = rocketkv_duo_rule(256, 0, 12);
  EXPECT_EQ(p.sink, 51);  // 51.2
  EXPECT_EQ(p.recent, 205);
  p = rocketkv_duo_rule(100, 0, 12);
  EXPECT_EQ(p.sink, 20);
  EXPECT_EQ(p.recent, 80);
  p = rocketkv_duo_rule(1, 0, 12);
  EXPECT_EQ(p.sink, 0);
  EXPECT_EQ(p.recent, 1);
  EXPECT_NE(input_error([] { rocketkv_duo_rule(1000, 0, 12); }).find("needs length"), std::string::npos);
  EXPECT_NE(input_error([] { rocketkv_duo_rule(0, 4096, 12); }).find("tokens >= 1"), std::string::npos);

  // On the small gates: one retrieval head, the higher-placed of the two gates of 1.
  DuoPatternOptions o;
  o.rule = DuoPatternOptions::Rule::kRocketKv;
  o.tokens = 1024;
  o.length = 4096;
  const HeadPattern h = duo_head_pattern(read_duo_gates(duo_data() / "small"), o);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t k = 0; k < 4; ++k) {
      const bool dense = l == 1 && k == 3;
      EXPECT_EQ(h.layers[l][k].streaming, !dense) << l << "," << k;
      if (!dense) EXPECT_EQ(h.layers[l][k].sink + h.layers[l][k].window, 640);
    }
  EXPECT_LE(h.kept_entries(4096), 12 * 1024);
}

TEST(DuoGates, BadFilesNameTheFileAndLine) {
  const fs::path bad = duo_data() / "bad";
  const auto error_of = [&](const fs::path& p) { return input_error([&] { read_duo_gates(p); }); };
  EXPECT_EQ(error_of(bad / "not_a_number.tsv"),
            (bad / "not_a_number.tsv").string() + ": line 2, column 2: 'abc' is not a number");
  EXPECT_EQ(error_of(bad / "ragged.tsv"),
            (bad / "ragged.tsv").string() + ": line 3: 1 gate, line 1 has 2 (one row per layer, one gate per KV head)");
  EXPECT_NE(error_of(bad / "out_of_range.tsv")
                .find((bad / "out_of_range.tsv").string() + ": line 3, column 1: gate 1.5 is outside [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of(bad / "spaces.tsv")
                .find("spaces.tsv: line 1, column 1: '5.0e-01 2.5e-01' is not a number (gates "
                      "are separated by tabs, not spaces)"),
            std::string::npos);
  EXPECT_NE(error_of(bad / "nan.tsv").find("nan.tsv: line 1, column 2: 'nan' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of(bad / "config")
                .find((bad / "config" / "config.json").string() +
                      ": \"recent_size\" must be an integer in [1, 2^40] (got 0)"),
            std::string::npos);
  EXPECT_EQ(error_of(bad), bad.string() +
                               ": no full_attention_heads.tsv (a DuoAttention pattern directory holds "
                               "full_attention_heads.tsv and config.json)");
  EXPECT_NE(error_of(bad / "none.tsv").find("none.tsv: no such file"), std::string::npos);
  EXPECT_NE(input_error([] { parse_duo_gates("\n# nothing\n", "empty.tsv"); }).find("empty.tsv: no gates"),
            std::string::npos);

  // Against a model: one row per layer, one gate per KV head.
  const DuoGates g = read_duo_gates(duo_data() / "small");  // 3 x 4
  const std::string tsv = g.tsv.string();
  EXPECT_EQ(input_error([&] { check_duo_gates(g, test::small_config(3, 4, 2, 8)); }), "");
  EXPECT_EQ(input_error([&] { check_duo_gates(g, test::small_config(3, 2, 4, 8)); }),
            tsv + ": line 1: 4 gates, but the model has 2 KV heads");
  EXPECT_EQ(input_error([&] { check_duo_gates(g, test::small_config(3, 2, 2, 8)); }),
            tsv +
                ": line 1: 4 gates, but the model has 2 KV heads; one per query head? DuoAttention gates are per KV "
                "head");
  EXPECT_EQ(input_error([&] { check_duo_gates(g, test::small_config(2, 4, 1, 8)); }),
            tsv + ": line 3: row 3, but the model has 2 layers (one row per layer)");
  EXPECT_EQ(input_error([&] { check_duo_gates(g, test::small_config(5, 4, 1, 8)); }),
            tsv + ": line 3: the last row is layer 2, but the model has 5 layers (one row per layer)");
  EXPECT_THROW(load_duo_pattern(duo_data() / "small", {}, test::small_config(5, 4, 1, 8)), InputError);
}

class DuoOnPycode : public test::PycodeSuite {
 protected:
  static GenerateRequest request(const Pipeline& p, int64_t n_new) {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.max_new_tokens = n_new;
    r.pipeline = &p;
    r.capture = CaptureLevel::kSummary;
    return r;
  }
  static std::string dir() { return (duo_data() / "pycode").string(); }
};

// The published format runs: the gates of tests/data/duo/pycode (8 layers x 2 KV heads; head 0 of
// even layers and head 1 of odd ones low) at sparsity 0.5 stream exactly those 8 heads with
// config.json's 4 sinks + 60 recent, and generate as the same pattern written as kvscope JSON.
TEST_F(DuoOnPycode, ImportedPatternRunsAndStreamingHeadsKeepSinkPlusRecent) {
  check_duo_gates(read_duo_gates(dir()), model_->config);
  const Pipeline duo(*registry_, "heads:pattern=" + dir() + ",sparsity=0.5");
  // Every parameter is recorded, the sizes as run (config.json's).
  EXPECT_EQ(duo.canonical(),
            "heads:budget_rule=none,length=0,pattern=" + dir() + ",recent=60,sink=4,sparsity=0.5,threshold=0,tokens=0");
  const int64_t n_new = 24;
  const GenerateResult r = generate(Engine(*model_), request(duo, n_new));
  const int64_t n = static_cast<int64_t>(textwrap_ids().size());
  ASSERT_EQ(r.kept.size(), 8u);
  std::vector<int64_t> sink_recent;
  for (int64_t p = 0; p < 4; ++p) sink_recent.push_back(p);
  for (int64_t p = n - 60; p < n; ++p) sink_recent.push_back(p);
  HeadPattern expected;
  for (int64_t l = 0; l < 8; ++l) {
    expected.layers.emplace_back();
    for (int64_t h = 0; h < 2; ++h) {
      const bool streaming = h == l % 2;
      expected.layers.back().push_back(streaming ? HeadPlan{true, 4, 60} : HeadPlan{});
      if (streaming)
        EXPECT_EQ(r.kept[l][h], sink_recent) << "layer " << l << " head " << h;
      else
        EXPECT_EQ(static_cast<int64_t>(r.kept[l][h].size()), n) << "layer " << l << " head " << h;
    }
  }
  // Decoding keeps streaming heads at sink + recent: 4 sinks and the 60 newest positions.
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.check(), "");
  ASSERT_GT(t.n_steps, 0);
  for (int64_t l = 0; l < 8; ++l) {
    TimelineCursor c(t, l, l % 2);
    c.advance_to(t.n_steps);
    ASSERT_EQ(static_cast<int64_t>(c.live().size()), 64) << "layer " << l;
    EXPECT_EQ(c.live()[3], 3);
    EXPECT_EQ(c.live()[4], n + t.n_steps - 60);
    TimelineCursor d(t, l, 1 - l % 2);
    d.advance_to(t.n_steps);
    EXPECT_EQ(static_cast<int64_t>(d.live().size()), n + t.n_steps) << "dense head, layer " << l;
  }
  // The same pattern as kvscope JSON generates the same tokens.
  const fs::path f = fs::temp_directory_path() / ("kvscope_duo_" + std::to_string(::getpid()) + ".json");
  save_head_pattern(f, expected);
  const Pipeline json(*registry_, "heads:pattern=" + f.string());
  const GenerateResult j = generate(Engine(*model_), request(json, n_new));
  fs::remove(f);
  EXPECT_EQ(j.output_ids, r.output_ids);
  EXPECT_EQ(j.kept, r.kept);
}

TEST_F(DuoOnPycode, RocketKvRuleAtA300TokenBudgetStreamsEveryHead) {
  // t = 300 <= 640: all heads stream with 128 sinks (t > 256) and 172 recent tokens.
  const Pipeline p(*registry_, "heads:pattern=" + dir() + ",budget_rule=rocketkv,tokens=300");
  EXPECT_EQ(p.canonical(), "heads:budget_rule=rocketkv,length=0,pattern=" + dir() +
                               ",recent=-1,sink=-1,sparsity=0.5,threshold=0,tokens=300");
  const GenerateResult r = generate(Engine(*model_), request(p, 4));
  const int64_t n = static_cast<int64_t>(textwrap_ids().size());
  std::vector<int64_t> want;
  for (int64_t q = 0; q < 128; ++q) want.push_back(q);
  for (int64_t q = n - 172; q < n; ++q) want.push_back(q);
  for (const auto& layer : r.kept)
    for (const auto& kept : layer) EXPECT_EQ(kept, want);
  // t = 700 on 514-token prompts: L <= t, so every head stays dense.
  const Pipeline all(*registry_, "heads:pattern=" + dir() + ",budget_rule=rocketkv,tokens=700,length=514");
  const GenerateResult a = generate(Engine(*model_), request(all, 1));
  for (const auto& layer : a.kept)
    for (const auto& kept : layer) EXPECT_EQ(static_cast<int64_t>(kept.size()), n);
}

TEST_F(DuoOnPycode, StageParametersAreChecked) {
  const std::string d = dir();
  const auto error_of = [&](const std::string& spec) { return input_error([&] { Pipeline(*registry_, spec); }); };
  EXPECT_NE(error_of("heads:pattern=p.json,sparsity=0.25").find("applies to DuoAttention patterns"), std::string::npos);
  EXPECT_NE(error_of("heads:pattern=" + d + ",budget_rule=rocketkv,tokens=300,sparsity=0.25")
                .find("drop parameter 'sparsity'"),
            std::string::npos);
  EXPECT_NE(error_of("heads:pattern=" + d + ",sparsity=0.25,threshold=0.5").find("not both"), std::string::npos);
  EXPECT_NE(error_of("heads:pattern=" + d + ",tokens=300").find("belongs to budget_rule=rocketkv"), std::string::npos);
  EXPECT_NE(error_of("heads:pattern=" + d + ",budget_rule=rocketkv,tokens=1000").find("needs length"),
            std::string::npos);
  EXPECT_NE(error_of("heads:pattern=" + d + ",recent=0").find("'recent' must be >= 1"), std::string::npos);
  // threshold=0.0 is the default ("use sparsity"), so it does not clash with sparsity.
  EXPECT_EQ(error_of("heads:pattern=" + d + ",sparsity=0.25,threshold=0.0"), "");
  // A threshold and explicit sizes are recorded as run.
  EXPECT_EQ(Pipeline(*registry_, "heads:pattern=" + d + ",threshold=0.5,sink=2,recent=30").canonical(),
            "heads:budget_rule=none,length=0,pattern=" + d + ",recent=30,sink=2,sparsity=0.5,threshold=0.5,tokens=0");

  // What a figure of a recorded run calls: the stage's parameters give the same pattern.
  ParamValues recorded = Pipeline(*registry_, "heads:pattern=" + d).stages().at(0)->params();
  const HeadsStagePattern sp = resolve_heads_stage(recorded);
  EXPECT_EQ(sp.file, (duo_data() / "pycode" / "full_attention_heads.tsv").string());
  EXPECT_EQ(sp.params, recorded) << "resolving the recorded sizes again changes nothing";
  EXPECT_TRUE(sp.pattern.layers[0][0].streaming);
  EXPECT_EQ(sp.pattern.layers[0][0].window, 60);
  // A DuoAttention path handed to the JSON reader says what it is.
  EXPECT_NE(input_error([&] { load_head_pattern(d); }).find(d + ": is a DuoAttention pattern"), std::string::npos);

  // A pattern of another shape than the model (fewer layers here; more KV heads would be as bad):
  // the run stops before the prefill, naming the file.
  const Pipeline small(*registry_, "heads:pattern=" + (duo_data() / "small").string());
  const std::string e = input_error([&] { generate(Engine(*model_), request(small, 1)); });
  EXPECT_NE(e.find("small/full_attention_heads.tsv: holds a pattern of 3 layers of 4 KV heads; the model has 8 "
                   "layers of 2 KV heads"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kvscope
