// The Timeline record (kvscope/core/timeline.h: live sets, selections in rank space, the step cursor)
// and its storage as session blobs (kvscope/sessions/timeline_blobs.h): round trip, old runs without
// one, and malformed blobs refused with the database, run and blob named.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <random>

#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/timeline_blobs.h"

namespace kvscope::sessions {
namespace {
namespace fs = std::filesystem;

/// 2 layers x 2 KV heads, 10 prompt positions + 5 decode steps. Head (0,0): prefill keeps 0-3 and
/// 7-9, decode appends never leave. Head (0,1): a ring of 2 sinks + 6 (positions 2.. leave as
/// position p + 6 enters). Layer 1: nothing evicted. Selections: pages of 4, head (1,0) per token
/// with its exact top-k (ranks 0 and n_live - 1: one hit, one miss).
Timeline sample() {
  Timeline t;
  t.n_layer = 2;
  t.n_head_kv = 2;
  t.n_positions = 15;
  t.n_steps = 5;
  t.page = 4;
  for (int64_t p = 0; p < 15; ++p) t.entered_at.push_back(p < 10 ? 0 : static_cast<int32_t>(p - 9));
  t.evicted_at.assign(2 * 2 * 15, -1);
  t.evicted_by.assign(2 * 2 * 15, 0);
  for (int64_t p : {4, 5, 6}) {
    t.evicted_at[p] = 0;
    t.evicted_by[p] = static_cast<uint8_t>(EvictionCause::kPrefill);
  }
  for (int64_t p = 2; p < 15; ++p) {  // ring: live = {0, 1} + the 6 most recent
    const int64_t s = p + 6 - 10 + 1;
    if (s > 5) continue;
    t.evicted_at[15 + p] = static_cast<int32_t>(std::max<int64_t>(s, 0));
    t.evicted_by[15 + p] = static_cast<uint8_t>(s <= 0 ? EvictionCause::kPrefill : EvictionCause::kRing);
  }
  t.pages.resize(2);
  t.tokens.resize(2);
  t.exact.resize(2);
  for (int64_t s = 1; s <= 5; ++s)
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t n_live = static_cast<int64_t>(t.live_positions(l, h, s).size());
        t.pages[l].append((n_live + 3) / 4, {0, (n_live - 1) / 4});  // the first and the last page
        if (l == 1 && h == 0) {
          t.tokens[l].append(n_live, {1, n_live - 1});
          t.exact[l].append(n_live, {n_live - 1, 0});
        } else {
          t.tokens[l].pad_to(t.tokens[l].entries() + 1);
          t.exact[l].pad_to(t.exact[l].entries() + 1);
        }
      }
  t.recall.assign(5 * 2 * 2, 0.5f);
  t.recall[0] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

TEST(Timeline, LiveSetsSelectionsAndCursor) {
  const Timeline t = sample();
  ASSERT_EQ(t.check(), "");
  EXPECT_EQ(t.live_positions(0, 0, 0), (std::vector<int64_t>{0, 1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(t.live_positions(0, 0, 2), (std::vector<int64_t>{0, 1, 2, 3, 7, 8, 9, 10, 11}));
  EXPECT_EQ(t.live_positions(0, 1, 0), (std::vector<int64_t>{0, 1, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(t.live_positions(0, 1, 3), (std::vector<int64_t>{0, 1, 7, 8, 9, 10, 11, 12}));
  // Pages of 4 ranks: at step 2 head (0,0) has 9 live -> pages 0 and 2 = ranks 0-3 and 8.
  EXPECT_EQ(*t.selected_positions(0, 0, 2), (std::vector<int64_t>{0, 1, 2, 3, 11}));
  EXPECT_FALSE(t.has_tokens(0, 0, 2));
  EXPECT_TRUE(t.has_tokens(1, 0, 2));
  EXPECT_EQ(*t.selected_positions(1, 0, 2), (std::vector<int64_t>{1, 11}));
  EXPECT_FALSE(t.selected_positions(0, 0, 0).has_value()) << "the prefill selects nothing";
  EXPECT_TRUE(t.has_exact(1, 0, 2));
  EXPECT_FALSE(t.has_exact(0, 0, 2));
  EXPECT_EQ(*t.exact_positions(1, 0, 2), (std::vector<int64_t>{0, 11}));
  const std::vector<int64_t> live = t.live_positions(1, 0, 4);
  EXPECT_EQ(*t.exact_positions(1, 0, 4, &live), (std::vector<int64_t>{0, 13}));
  EXPECT_FALSE(t.exact_positions(0, 1, 3).has_value());
  EXPECT_FALSE(t.exact_positions(1, 0, 0).has_value()) << "nothing at the prefill";
  EXPECT_THROW(t.exact_positions(1, 2, 1), std::out_of_range);
  EXPECT_TRUE(std::isnan(t.recall_at(1, 0, 0)));
  EXPECT_EQ(t.recall_at(1, 0, 1), 0.5f);
  EXPECT_THROW(t.live_positions(2, 0, 0), std::out_of_range);
  EXPECT_THROW(t.live_positions(0, 0, 6), std::out_of_range);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h) {
      TimelineCursor c(t, l, h);
      for (int64_t s = 0; s <= t.n_steps; ++s) {
        c.advance_to(s);
        EXPECT_EQ(c.live(), t.live_positions(l, h, s)) << l << ":" << h << " step " << s;
      }
    }
}

TEST(Timeline, CursorAgreesWithLiveSetsOnRandomRecords) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    Timeline t;
    t.n_layer = t.n_head_kv = 1;
    t.n_steps = 1 + rng() % 30;
    t.n_positions = 1 + rng() % 200;
    for (int64_t p = 0; p < t.n_positions; ++p)
      t.entered_at.push_back(static_cast<int32_t>(std::min<int64_t>(t.n_steps, p / 8)));  // non-decreasing
    for (int64_t p = 0; p < t.n_positions; ++p) {
      const int32_t e = t.entered_at[p];
      t.evicted_at.push_back(rng() % 3 == 0 ? -1 : static_cast<int32_t>(e + rng() % (t.n_steps - e + 1)));
      t.evicted_by.push_back(t.evicted_at.back() < 0 ? 0 : 1);
    }
    ASSERT_EQ(t.check(), "");
    TimelineCursor c(t, 0, 0);
    for (int64_t s = 0; s <= t.n_steps; ++s) {
      c.advance_to(s);
      ASSERT_EQ(c.live(), t.live_positions(0, 0, s)) << "trial " << trial << " step " << s;
    }
  }
}

TEST(Timeline, CheckNamesWhatIsWrong) {
  Timeline t = sample();
  t.entered_at.pop_back();
  EXPECT_NE(t.check().find("entered_at"), std::string::npos);
  t = sample();
  t.evicted_at[3] = 9;
  EXPECT_NE(t.check().find("evicted_at step 9"), std::string::npos);
  t = sample();
  t.evicted_at[12] = 1;  // position 12 of layer 0, head 0 entered at step 3
  EXPECT_NE(t.check().find("position 12 evicted at step 1 before it entered at step 3"), std::string::npos)
      << t.check();
  t = sample();
  t.pages[1].offsets.pop_back();
  EXPECT_NE(t.check().find("every step and head"), std::string::npos);
  t = sample();
  t.recall.pop_back();
  EXPECT_NE(t.check().find("recall"), std::string::npos);
  t = sample();
  t.exact[0].offsets.push_back(t.exact[0].offsets.back());
  EXPECT_NE(t.check().find("exact top-k records do not cover every step and head"), std::string::npos) << t.check();
  t = sample();
  t.exact.pop_back();
  EXPECT_NE(t.check().find("exact top-k records not one per layer"), std::string::npos) << t.check();
  t = sample();
  t.exact[1].bits.push_back(0);
  EXPECT_NE(t.check().find("exact top-k records: offsets"), std::string::npos) << t.check();
}

class TimelineBlobs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvscope_tlb_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    db_ = (dir_ / "t.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  int64_t new_run(SessionStore& s) {
    RunInfo i;
    i.name = "timeline";
    i.model = {"/models/m", "h", "llama", 2, 4, 2, 8, "fp32", "cpu"};
    i.pipeline.spec = "quest";
    i.budget = {BudgetUnit::kFetched, 64};
    i.prompt = {"x", {1, 2, 3}};
    return s.begin_run(i);
  }
  fs::path dir_;
  std::string db_;
};

TEST_F(TimelineBlobs, RoundTripAndRunsWithoutOne) {
  auto s = SessionStore::open(db_);
  const int64_t run = new_run(s), other = new_run(s);
  const Timeline t = sample();
  for (const Blob& b : timeline_blobs(t)) s.add_blob(run, b);
  const auto back = load_timeline(s, run);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->n_steps, t.n_steps);
  EXPECT_EQ(back->n_positions, t.n_positions);
  EXPECT_EQ(back->page, t.page);
  EXPECT_EQ(back->entered_at, t.entered_at);
  EXPECT_EQ(back->evicted_at, t.evicted_at);
  EXPECT_EQ(back->evicted_by, t.evicted_by);
  ASSERT_EQ(back->pages.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(back->pages[l].bits, t.pages[l].bits);
    EXPECT_EQ(back->pages[l].offsets, t.pages[l].offsets);
    EXPECT_EQ(back->tokens[l].bits, t.tokens[l].bits);
    EXPECT_EQ(back->exact[l].bits, t.exact[l].bits);
    EXPECT_EQ(back->exact[l].offsets, t.exact[l].offsets);
  }
  EXPECT_EQ(back->recall.size(), t.recall.size());
  EXPECT_EQ(*back->selected_positions(1, 0, 2), (std::vector<int64_t>{1, 11}));
  EXPECT_EQ(*back->exact_positions(1, 0, 2), (std::vector<int64_t>{0, 11}));
  EXPECT_FALSE(load_timeline(s, other).has_value()) << "a run recorded without one";
  EXPECT_TRUE(timeline_blobs(Timeline{}).empty());
  // A run recorded before the exact top-k was (or at capture summary): no exact blobs, no record.
  Timeline older = sample();
  older.exact.clear();
  const int64_t old_run = new_run(s);
  for (const Blob& b : timeline_blobs(older)) {
    EXPECT_EQ(b.name.find("timeline.exact"), std::string::npos) << b.name;
    s.add_blob(old_run, b);
  }
  const auto old_back = load_timeline(s, old_run);
  ASSERT_TRUE(old_back.has_value());
  EXPECT_TRUE(old_back->exact.empty());
  EXPECT_FALSE(old_back->exact_positions(1, 0, 2).has_value());
  EXPECT_EQ(*old_back->selected_positions(1, 0, 2), (std::vector<int64_t>{1, 11}));
}

TEST_F(TimelineBlobs, MalformedBlobsAreRefusedByName) {
  auto s = SessionStore::open(db_);
  auto expect_error = [&](const std::vector<Blob>& blobs, const std::string& needle) {
    const int64_t run = new_run(s);
    for (const Blob& b : blobs) s.add_blob(run, b);
    try {
      load_timeline(s, run);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const SessionError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(db_), std::string::npos) << what;
      EXPECT_NE(what.find("run " + std::to_string(run)), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  std::vector<Blob> blobs = timeline_blobs(sample());
  auto without = [&](const std::string& name, int64_t layer) {
    std::vector<Blob> out;
    for (const Blob& b : blobs)
      if (!(b.name == name && b.layer == layer)) out.push_back(b);
    return out;
  };
  expect_error(without("timeline.evicted_at", 1), "'timeline.evicted_at': missing for layer 1");
  std::vector<Blob> newer = blobs;
  newer[0] = Blob::of<int64_t>("timeline.info", -1, -1, {4}, std::vector<int64_t>{2, 5, 15, 4});
  expect_error(newer, "format 2");
  std::vector<Blob> short_row = without("timeline.evicted_at", 0);
  short_row.push_back(Blob::of<int32_t>("timeline.evicted_at", 0, -1, {2, 14}, std::vector<int32_t>(28, -1)));
  expect_error(short_row, "evicted_at / evicted_by hold");
  std::vector<Blob> wrong_type = without("timeline.entered_at", -1);
  wrong_type.push_back(Blob::of<int64_t>("timeline.entered_at", -1, -1, {15}, std::vector<int64_t>(15, 0)));
  expect_error(wrong_type, "'timeline.entered_at': dtype i64");
  // The exact top-k: a layer missing, its offsets missing, short, or past the bitmap; a wrong dtype.
  expect_error(without("timeline.exact", 1), "'timeline.exact': missing for layer 1");
  expect_error(without("timeline.exact_offsets", 0), "'timeline.exact_offsets': missing for layer 0");
  std::vector<Blob> short_exact = without("timeline.exact_offsets", 1);
  short_exact.push_back(Blob::of<int64_t>("timeline.exact_offsets", 1, -1, {3}, std::vector<int64_t>{0, 1, 2}));
  expect_error(short_exact, "'timeline.exact_offsets': layer 1: 3 offsets, expected n_steps x n_head_kv + 1 = 11");
  std::vector<Blob> past = without("timeline.exact_offsets", 1);
  std::vector<int64_t> offsets(11, 0);
  offsets[5] = 1000;
  past.push_back(Blob::of<int64_t>("timeline.exact_offsets", 1, -1, {11}, offsets));
  expect_error(past, "'timeline.exact_offsets': layer 1: offset 5 (1000) does not index");
  std::vector<Blob> exact_type = without("timeline.exact", 0);
  exact_type.push_back(Blob::of<int32_t>("timeline.exact", 0, -1, {2}, std::vector<int32_t>{0, 0}));
  expect_error(exact_type, "'timeline.exact': dtype i32");
}

}  // namespace
}  // namespace kvscope::sessions
