// `ptdp tokenize --workers N`: text is read on the calling thread in chunks,
// the chunks are processed (parsed, encoded) on N threads, and their results
// are consumed (written) on the calling thread in input order, so the output
// is the same for every N. At most kChunksPerWorker * N chunks are in flight
// (read but not yet written), plus the one being written.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

constexpr int kMaxTokenizeWorkers = 1024;
constexpr int kChunksPerWorker = 2;  // one being encoded, one waiting: workers never starve
constexpr size_t kTokenizeChunkBytes = 256 << 10;  // text per chunk (a longer document is one)

// Checks a requested worker count: [0, kMaxTokenizeWorkers], 0 meaning one per core.
inline void check_workers(int64_t requested) {
  if (requested < 0 || requested > kMaxTokenizeWorkers)
    fail(Status::bad_value, "workers must be in [0, ", kMaxTokenizeWorkers,
         "] (0: one per core), got ", requested);
}

// The worker count to run with: `requested`, or the number of cores for 0.
inline int resolve_workers(int64_t requested) {
  check_workers(requested);
  if (requested > 0) return (int)requested;
  const unsigned cores = std::thread::hardware_concurrency();  // 0 when unknown
  return std::clamp((int)cores, 1, kMaxTokenizeWorkers);
}

// The "workers" value of the C ABI's key=value options.
inline int parse_workers(const std::string &value) {
  long long n = -1;
  if (!parse_whole(value, &n))
    fail(Status::bad_value, "workers must be an integer in [0, ", kMaxTokenizeWorkers,
         "] (0: one per core), got '", value, "'");
  check_workers(n);
  return (int)n;
}

namespace detail {

// Worker threads taking chunks in order from a queue the calling thread fills.
template <class Chunk, class Work>
class OrderedPool {
 public:
  using Result = std::invoke_result_t<Work &, Chunk &, int>;

  OrderedPool(int workers, Work &work) : work_(work) {
    for (int w = 0; w < workers; w++) threads_.emplace_back([this, w] { loop(w); });
  }
  ~OrderedPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto &t : threads_) t.join();
  }

  size_t in_flight() const { return slots_.size(); }  // only the calling thread changes it

  void push(Chunk chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_.push_back(std::make_unique<Slot>());
      slots_.back()->chunk = std::move(chunk);
    }
    work_cv_.notify_one();
  }

  // The oldest chunk's result, once done; its exception is rethrown here.
  Result pop() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return slots_.front()->done; });
    std::unique_ptr<Slot> s = std::move(slots_.front());
    slots_.pop_front();
    next_--;
    lock.unlock();
    if (s->error) std::rethrow_exception(s->error);
    return std::move(*s->result);
  }

 private:
  struct Slot {
    Chunk chunk;
    std::optional<Result> result;
    std::exception_ptr error;
    bool done = false;
  };

  void loop(int w) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || next_ < slots_.size(); });
      if (stop_) return;
      Slot &s = *slots_[next_++];  // stays put: only popped once done
      lock.unlock();
      try {
        s.result.emplace(work_(s.chunk, w));
      } catch (...) {
        s.error = std::current_exception();
      }
      s.chunk = Chunk();  // the text is no longer needed
      lock.lock();
      s.done = true;
      done_cv_.notify_one();
    }
  }

  Work &work_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::unique_ptr<Slot>> slots_;  // in input order, oldest first
  size_t next_ = 0;                          // slots_[next_] is the next to hand out
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started once the rest is built
};

}  // namespace detail

// next(chunk) fills a default-made chunk and returns false at the end of the
// input; work(chunk, worker) returns the chunk's result, `worker` in
// [0, workers) naming the thread (for its tokenizer cache); consume(result)
// takes the results in input order. next and consume run on the calling
// thread; work on `workers` threads, or on the calling thread for 1. An
// exception from any of them comes out as with one thread: the first in input
// order, after everything before it was consumed.
template <class Chunk, class Next, class Work, class Consume>
void run_ordered(int workers, Next &&next, Work &&work, Consume &&consume) {
  if (workers <= 1) {
    for (;;) {
      Chunk chunk;
      if (!next(chunk)) return;
      auto result = work(chunk, 0);
      consume(result);
    }
  }
  detail::OrderedPool<Chunk, std::remove_reference_t<Work>> pool(workers, work);
  const size_t max_in_flight = (size_t)workers * kChunksPerWorker;
  std::exception_ptr input_error;  // from next(): raised after the chunks before it
  bool more = true;
  for (;;) {
    while (more && pool.in_flight() < max_in_flight) {
      Chunk chunk;
      try {
        more = next(chunk);
      } catch (...) {
        input_error = std::current_exception();
        more = false;
      }
      if (more) pool.push(std::move(chunk));
    }
    if (pool.in_flight() == 0) break;
    auto result = pool.pop();
    consume(result);
  }
  if (input_error) std::rethrow_exception(input_error);
}

}  // namespace ptdp
