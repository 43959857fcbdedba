#pragma once
// PartLoader: decodes the heavy parts of runs (figures::load_part: kept sets, attention, cosines,
// key PCA, channel statistics of one layer) on one background thread, so opening a run and moving
// through layers never blocks the UI. Views request what they draw each frame and show "loading"
// until RunData::ready(); the newest request is decoded first (the layer the user looks at now),
// requests are deduplicated, and each database gets its own read-only connection on the thread.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "run_data.h"

namespace kvscope::gui {

class PartLoader {
 public:
  PartLoader();
  /// Stops the thread after the part being decoded; queued requests are dropped.
  ~PartLoader();
  PartLoader(const PartLoader&) = delete;
  PartLoader& operator=(const PartLoader&) = delete;

  /// Asks for part `p` of `layer` of `run` (decoded from run->ref.db). No-op when it is decoded or
  /// not stored; a request already queued moves to the front.
  void request(const std::shared_ptr<const figures::RunData>& run, figures::Part p, std::int64_t layer);
  /// True while requests are queued or being decoded.
  bool busy() const;
  /// Blocks until every request so far is done (tests, benchmarks, --screenshot).
  void wait_idle();
  /// Decode errors since the last call ("run 3 attention L2: ..."), oldest first.
  std::vector<std::string> take_errors();

 private:
  struct Job {
    std::shared_ptr<const figures::RunData> run;
    figures::Part part;
    std::int64_t layer;
  };
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;  // front = next
  bool working_ = false, stop_ = false;
  std::vector<std::string> errors_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace kvscope::gui
