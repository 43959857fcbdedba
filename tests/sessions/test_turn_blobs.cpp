// A multi-turn run's turns as session blobs (kvscope/sessions/turn_blobs.h): round trip, runs
// without turns, and malformed blobs refused by name.
#include <gtest/gtest.h>

#include "../temp_dir.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/turn_blobs.h"

namespace kvscope::sessions {
namespace {

class TurnBlobs : public ::testing::Test {
 protected:
  int64_t new_run(SessionStore& s) {
    RunInfo i;
    i.name = "turns";
    i.model = {"/models/m", "h", "llama", 2, 4, 2, 8, "fp32", "cpu"};
    i.pipeline.spec = "snapkv";
    i.budget = {BudgetUnit::kStored, 64};
    i.prompt = {"x", {1, 2, 3}};
    return s.begin_run(i);
  }
  test::TempDir dir_{"turns"};
  std::string db() const { return (dir_.path() / "t.db").string(); }
};

TEST_F(TurnBlobs, RoundTripAndRunsWithoutTurns) {
  auto s = SessionStore::open(db());
  const int64_t run = new_run(s), single = new_run(s);
  const std::vector<Turn> turns = {{{1, 2, 3}, {7, 8}}, {{4}, {}}, {{5, 6}, {9, 9, 9}}};
  for (const Blob& b : turn_blobs(turns)) s.add_blob(run, b);
  EXPECT_EQ(load_turns(s, run), turns);
  // One turn is the run's own prompt and output: nothing stored, nothing loaded.
  EXPECT_TRUE(turn_blobs({turns[0]}).empty());
  EXPECT_TRUE(load_turns(s, single).empty());
}

TEST_F(TurnBlobs, MalformedBlobsAreRefusedByName) {
  auto s = SessionStore::open(db());
  const std::vector<Blob> good = turn_blobs({{{1, 2}, {3}}, {{4}, {5, 6}}});
  auto expect_error = [&](std::vector<Blob> blobs, const std::string& needle) {
    const int64_t run = new_run(s);
    for (const Blob& b : blobs) s.add_blob(run, b);
    try {
      load_turns(s, run);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const SessionError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("t.db"), std::string::npos) << what;
    }
  };
  auto replace = [&](const std::string& name, Blob b) {
    std::vector<Blob> out = good;
    for (Blob& g : out)
      if (g.name == name) g = std::move(b);
    return out;
  };
  expect_error({good[0], good[1], good[2]}, "turns.output_offsets");  // its offsets missing
  expect_error(replace("turns.input_offsets", Blob::of<int64_t>("turns.input_offsets", -1, -1, {3}, {0, 1, 5})),
               "does not cut");
  expect_error(replace("turns.input_offsets", Blob::of<int64_t>("turns.input_offsets", -1, -1, {3}, {1, 2, 3})),
               "does not cut");
  expect_error(replace("turns.output_offsets", Blob::of<int64_t>("turns.output_offsets", -1, -1, {4}, {0, 2, 1, 3})),
               "falls at turn 2");
  expect_error(replace("turns.input_ids", Blob::of<int64_t>("turns.input_ids", -1, -1, {3}, {1, 2, 4})), "dtype");
  expect_error(replace("turns.output_offsets", Blob::of<int64_t>("turns.output_offsets", -1, -1, {2}, {0, 3})),
               "1 turns of outputs for 2");
}

}  // namespace
}  // namespace kvscope::sessions
