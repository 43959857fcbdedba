// A and B side by side (issue 30): run identities elided by what they share, never by what tells
// them apart (identity_elide.h); one colour per side in every A - B figure (only A blue, only B
// orange, both green; numeric A - B maps on the orange-blue diverging map with A > B blue); runs on
// different prompts explained ("n tokens vs m") instead of empty maps.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "figures.h"
#include "gui_test_support.h"
#include "identity_elide.h"
#include "kvscope/viz/colormap.h"
#include "timeline_figure.h"

namespace kvscope::figures {
namespace {

using gui::testing::make_temp_dir;
using gui::testing::remove_tree;

const std::string kE = kElision;

// True when s is well-formed UTF-8.
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(ElideIdentities, KeepsTheDifferenceAndCutsTheSharedPrefix) {
  const auto [a, b] = elide_pair("snapkv:window=32+adakv:alpha=0.2", "snapkv:window=32+adakv:alpha=0.1", 18);
  EXPECT_EQ(a, kE + "+adakv:alpha=0.2");  // snapped to the stage boundary
  EXPECT_EQ(b, kE + "+adakv:alpha=0.1");
  // Fitting strings are returned unchanged.
  EXPECT_EQ(elide_pair("snapkv", "adakv", 10), (std::pair<std::string, std::string>{"snapkv", "adakv"}));
}

TEST(ElideIdentities, SharedSuffixIsCutAfterTheDifference) {
  const std::string tail = "+quant:bits=4+page:size=16+streaming:sinks=4";
  const auto v =
      elide_identities({"snapkv:window=32" + tail, "snapkv:window=64" + tail, "snapkv:window=128" + tail}, 24);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_NE(v[0].find("=32"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("=64"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("=128"), std::string::npos) << v[2];
  for (const auto& s : v) {
    EXPECT_LE(utf8_length(s), 24u) << s;
    EXPECT_EQ(s.substr(s.size() - kE.size()), kE) << s;  // the shared tail was cut
  }
  EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), 3u);
}

TEST(ElideIdentities, WidthSmallerThanTheDifferenceKeepsTheDifference) {
  const auto [a, b] = elide_pair("shared_head_XYZXYZXYZ_shared_tail", "shared_head_QQQQQQQQQ_shared_tail", 5);
  EXPECT_EQ(a, kE + "XYZXYZXYZ" + kE);
  EXPECT_EQ(b, kE + "QQQQQQQQQ" + kE);
  // Width 0 or negative counts as 1.
  const auto [c, d] = elide_pair("p1", "p2", 0);
  EXPECT_EQ(c, kE + "1");
  EXPECT_EQ(d, kE + "2");
}

TEST(ElideIdentities, EqualEmptyAndSingleStrings) {
  const auto eq = elide_identities({"snapkv:window=32+adakv", "snapkv:window=32+adakv"}, 10);
  EXPECT_EQ(eq[0], "snapkv:wi" + kE);
  EXPECT_EQ(eq[0], eq[1]);
  EXPECT_EQ(elide_identities({"", ""}, 4), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(elide_identities({"", "a_long_pipeline_name"}, 6)[0], "");
  const auto one_empty = elide_identities({"", "a_long_pipeline_name"}, 6);
  EXPECT_EQ(one_empty[1], "a_long_pipeline_name");  // all of it differs from ""
  EXPECT_EQ(elide_identities({"abcdefgh"}, 4), (std::vector<std::string>{"abc" + kE}));
  EXPECT_TRUE(elide_identities({}, 4).empty());
  // One a prefix of the other: the extra stage is the difference.
  const auto pre = elide_identities({"snapkv:window=32", "snapkv:window=32+adakv:alpha=0.2"}, 18);
  EXPECT_EQ(pre[0], "snapkv:window=32");
  EXPECT_NE(pre[1].find("+adakv:alpha=0.2"), std::string::npos) << pre[1];
}

TEST(ElideIdentities, Utf8IsNeverSplit) {
  // "é" (c3 a9) and "è" (c3 a8) share their first byte: the difference is the whole code point.
  const std::string head = "\xce\xb1\xce\xb2\xce\xb3-stage\xc2\xb7";  // "αβγ-stage·"
  const auto [a, b] = elide_pair(head + "caf\xc3\xa9", head + "caf\xc3\xa8", 5);
  EXPECT_TRUE(valid_utf8(a)) << a;
  EXPECT_TRUE(valid_utf8(b)) << b;
  EXPECT_EQ(a, kE + "caf\xc3\xa9");
  EXPECT_EQ(b, kE + "caf\xc3\xa8");
  EXPECT_EQ(utf8_length(a), 5u);
  for (int w = 1; w < 16; ++w)
    for (const auto& s : elide_identities({head + "x\xe2\x88\x92" + "1", head + "y\xe2\x88\x92" + "1", head}, w))
      EXPECT_TRUE(valid_utf8(s)) << w << ": " << s;
}

TEST(ElideIdentities, DistinctInputsStayDistinctAtEveryWidth) {
  const std::vector<std::string> ids = {"snapkv:window=32+adakv:alpha=0.2", "snapkv:window=32+adakv:alpha=0.1",
                                        "snapkv:window=32+adakv:alpha=0.25", "streamingllm:sinks=4:window=256"};
  for (int w = 1; w < 40; ++w) {
    const auto v = elide_identities(ids, w);
    EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), ids.size()) << w;
  }
}

// ---- colours and explanations on real (synthetic) runs --------------------------------------------

class AbFigures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("ab_figures");
    gui::SyntheticSpec spec;
    spec.n_layer = 2;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 8;
    spec.n_tok = 120;
    spec.n_steps = 4;
    runs_ = gui::testing::write_test_session(dir_ / "a.db", spec);
    spec.n_tok = 90;
    spec.seed = 7;
    other_ = gui::testing::write_test_session(dir_ / "other.db", spec);
  }
  static void TearDownTestSuite() { remove_tree(dir_); }

  static std::shared_ptr<RunData> load(const std::string& db, std::int64_t run) {
    const auto store = sessions::SessionStore::open((dir_ / db).string(), sessions::OpenMode::kReadOnly);
    auto r = load_run_data(store, run, {});
    for (int p = 0; p < kPartCount; ++p)
      for (std::int64_t l = 0; l < r->n_layer; ++l) {
        if (run_level(static_cast<Part>(p)) && l > 0) continue;
        try {
          load_part(store, *r, static_cast<Part>(p), l);
        } catch (const std::exception&) {  // a part this run did not store
        }
      }
    return r;
  }

  static inline std::filesystem::path dir_;
  static inline gui::SyntheticRuns runs_, other_;
};

// Every A - B figure: the categories and legend entries that name a side carry that side's colour;
// numeric A - B maps use kDiffColormap. Returns how many "only A" entries were seen.
int check_sides(const viz::Figure& f) {
  int only_a = 0;
  auto check = [&](const std::string& name, const std::optional<viz::Color>& c) {
    SCOPED_TRACE(f.title + " / " + name);
    if (name == "only A" || name == "kept only by A") {
      ++only_a;
      EXPECT_EQ(c, std::optional<viz::Color>(kOnlyAColor));
    } else if (name == "only B" || name == "kept only by B") {
      EXPECT_EQ(c, std::optional<viz::Color>(kOnlyBColor));
    } else if (name == "both") {
      EXPECT_EQ(c, std::optional<viz::Color>(kBothColor));
    }
  };
  for (const auto& p : f.panels) {
    if (const auto* h = std::get_if<viz::Heatmap>(&p)) {
      for (const auto& c : h->categories) check(c.name, c.color);
      EXPECT_NE(h->colormap, "coolwarm") << f.title << " / " << h->title;
      if (h->categories.empty() && !h->values.empty() &&
          (h->colorbar_label.find("\xce\x94") != std::string::npos ||
           h->colorbar_label.find("\xe2\x88\x92") != std::string::npos))
        EXPECT_EQ(h->colormap, kDiffColormap) << f.title << " / " << h->title;
    } else if (const auto* t = std::get_if<viz::TokenStrip>(&p)) {
      for (const auto& c : t->categories) check(c.name, c.color);
    } else if (const auto* l = std::get_if<viz::LinePlot>(&p)) {
      for (const auto& s : l->series) check(s.name, s.color);
    } else if (const auto* s = std::get_if<viz::ScatterPlot>(&p)) {
      for (const auto& g : s->groups) check(g.name, g.color);
    } else if (const auto* b = std::get_if<viz::BarChart>(&p)) {
      for (const auto& s : b->series) check(s.name, s.color);
    }
  }
  return only_a;
}

TEST_F(AbFigures, EveryAbFigureUsesOneColourPerSide) {
  // The diverging map's ends are the sides' colours: A > B (high) blue, B > A (low) orange.
  EXPECT_EQ(viz::Color(viz::map(kDiffColormap, 1.0)), kOnlyAColor);
  EXPECT_EQ(viz::Color(viz::map(kDiffColormap, 0.0)), kOnlyBColor);
  EXPECT_TRUE(viz::colormap(kDiffColormap).diverging());
  const auto a = load("a.db", runs_.snapkv), b = load("a.db", runs_.streaming);
  const Selection sel{1, 1, -1};
  HeadsOptions ho;
  ho.side = Side::kDiff;
  ho.metric = 7;  // kept
  BudgetsOptions bo;
  bo.side = Side::kDiff;
  const std::vector<viz::Figure> figs = {
      heads_figure(*a, b.get(), ho, sel), budgets_figure(*a, b.get(), bo),
      tokens_diff_figure(*a, *b, sel),    attention_diff_figure(*a, *b, {}, sel, 600),
      keys_diff_figure(*a, *b, {}, sel),  channels_diff_figure(*a, *b, {}, sel),
      compare_figure(*a, *b, sel),        timeline_diff_figure(*a, *b, sel, 600)};
  int only_a = 0;
  for (const auto& f : figs) {
    EXPECT_NO_THROW(viz::validate(f)) << f.title;
    only_a += check_sides(f);
  }
  EXPECT_GE(only_a, 5);  // the strips of tokens / attention / compare, attention markers, key groups
  // The A - B numeric maps say which hue is which side.
  const auto& kd = std::get<viz::Heatmap>(figs[6].panels.at(3));
  EXPECT_EQ(kd.colormap, kDiffColormap);
  EXPECT_NE(kd.title.find(kDiffKey), std::string::npos) << kd.title;
  // The compare figure's title names both pipelines, elided together.
  EXPECT_NE(figs[6].title.find("A #" + std::to_string(a->ref.run)), std::string::npos) << figs[6].title;
  EXPECT_NE(figs[6].title.find("B #" + std::to_string(b->ref.run)), std::string::npos) << figs[6].title;
}

TEST_F(AbFigures, RunsOnDifferentPromptsAreExplained) {
  const auto a = load("a.db", runs_.snapkv), b = load("other.db", other_.snapkv);
  ASSERT_EQ(a->record.info.prompt.tokens.size(), 120u);
  ASSERT_EQ(b->record.info.prompt.tokens.size(), 90u);
  const std::string why = "runs on different prompts (120 tokens vs 90): kept-set overlap is not defined";
  EXPECT_EQ(kept_diff_unavailable(*a, *b), why);
  EXPECT_EQ(kept_diff_unavailable(*a, *a), "");
  const Selection sel{0, 0, -1};
  const auto cmp = compare_figure(*a, *b, sel);
  EXPECT_NO_THROW(viz::validate(cmp));
  EXPECT_EQ(std::get<viz::Heatmap>(cmp.panels.at(0)).title, why);
  EXPECT_EQ(std::get<viz::TokenStrip>(cmp.panels.at(2)).title, why);
  EXPECT_EQ(std::get<viz::TokenStrip>(tokens_diff_figure(*a, *b, sel).panels.at(0)).title, why);
  EXPECT_EQ(std::get<viz::LinePlot>(attention_diff_figure(*a, *b, {}, sel, 400).panels.at(0)).title, why);
  EXPECT_EQ(std::get<viz::LinePlot>(keys_diff_figure(*a, *b, {}, sel).panels.at(0)).title, why);
}

}  // namespace
}  // namespace kvscope::figures
