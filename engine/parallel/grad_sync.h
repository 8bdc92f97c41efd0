// Data-parallel gradient synchronisation (ARCHITECTURE §4). After a step's
// backwards the tied embedding's two halves are summed over the embedding group
// (first and last pipeline stage), then every gradient over the data-parallel
// replicas, in buckets of about `bucket` elements.
//
// With overlap (Megatron's --overlap-grad-reduce) a bucket is reduced on a
// communication thread as soon as the backward has finished all of its
// gradients (the model's grad-ready hook), while the backward goes on with
// earlier layers. The tied embedding is always reduced at the end, after its
// embedding-group sum. Replicas reduce the same buckets in the same order
// (their backwards are alike), and a sum does not depend on where buckets
// start, so the result is bit-identical with and without overlap.
//
// Communicators take the model's device memory (a StagedComm off the CPU);
// either may be null.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/model/gpt.h"

namespace ptdp {

class GradReducer {
 public:
  GradReducer(GPT<float> &model, Communicator *embedding, Communicator *dp, size_t bucket,
              bool overlap);
  ~GradReducer();  // stops the communication thread
  GradReducer(const GradReducer &) = delete;
  GradReducer &operator=(const GradReducer &) = delete;

  // Before a step's first backward: every bucket waits for its gradients.
  void start();
  // After the step's last backward: reduces what is still to reduce, waits for
  // the communication thread, and rethrows its error if it had one.
  void finish();
  // Data-parallel buckets ([lo, hi) of grads(), in backward order), and how many
  // of the last step's were reduced while the backward ran.
  struct Bucket {
    size_t lo = 0, hi = 0;
    size_t pending = 0;  // elements not final yet in this step
    bool launched = false;
  };
  const std::vector<Bucket> &buckets() const { return buckets_; }
  int overlapped_buckets() const;

 private:
  void ready(size_t offset, size_t n);  // the model's grad-ready hook
  void launch(size_t b);
  void reduce(size_t b);
  void work();  // the communication thread

  GPT<float> &model_;
  Communicator *embedding_, *dp_;
  size_t bucket_;
  bool overlap_;
  size_t wte_lo_ = 0, wte_hi_ = 0;  // the tied embedding's range (empty without one)
  std::vector<Bucket> buckets_;
  bool active_ = false;  // between start() and finish()

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;  // launched buckets not yet taken
  size_t launched_ = 0, reduced_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace ptdp
