#include "part_loader.h"

#include <map>

#include "kvscope/sessions/session_store.h"

namespace kvscope::gui {

PartLoader::PartLoader() : thread_([this] { loop(); }) {}

PartLoader::~PartLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void PartLoader::request(const std::shared_ptr<const figures::RunData>& run, figures::Part p, std::int64_t layer) {
  if (!run || run->ready(p, layer)) return;
  {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->run == run && it->part == p && it->layer == layer) {
        if (it != queue_.begin()) {
          Job j = std::move(*it);
          queue_.erase(it);
          queue_.push_front(std::move(j));
        }
        return;
      }
    queue_.push_front({run, p, layer});
  }
  wake_.notify_one();
}

bool PartLoader::busy() const {
  std::lock_guard lock(mutex_);
  return working_ || !queue_.empty();
}

void PartLoader::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return !working_ && queue_.empty(); });
}

std::vector<std::string> PartLoader::take_errors() {
  std::lock_guard lock(mutex_);
  return std::exchange(errors_, {});
}

void PartLoader::loop() {
  std::map<std::string, std::unique_ptr<sessions::SessionStore>> stores;  // this thread's connections
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    working_ = true;
    lock.unlock();
    std::string error;
    try {
      auto& store = stores[job.run->ref.db];
      if (!store)
        store = std::make_unique<sessions::SessionStore>(
            sessions::SessionStore::open(job.run->ref.db, sessions::OpenMode::kReadOnly));
      figures::load_part(*store, *job.run, job.part, job.layer);
    } catch (const std::exception& e) {
      error = "run " + std::to_string(job.run->ref.run) + " " + figures::part_label(job.part) + " of layer " +
              std::to_string(job.layer) + ": " + e.what();
      // An empty part: the view shows "not captured" instead of asking again every frame.
      try {
        job.run->parts->put(job.part, figures::run_level(job.part) ? 0 : job.layer, {});
      } catch (const std::exception&) {
      }
    }
    job.run.reset();
    lock.lock();
    if (!error.empty()) errors_.push_back(std::move(error));
    working_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace kvscope::gui
