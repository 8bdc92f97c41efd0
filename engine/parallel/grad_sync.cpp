#include "engine/parallel/grad_sync.h"

#include <algorithm>
#include <utility>

#include "engine/core/status.h"

namespace ptdp {

GradReducer::GradReducer(GPT<float> &model, Communicator *embedding, Communicator *dp,
                         size_t bucket, bool overlap)
    : model_(model), embedding_(embedding), dp_(dp && dp->size() > 1 ? dp : nullptr),
      bucket_(bucket), overlap_(overlap) {
  if (bucket_ == 0) fail(Status::invalid_argument, "ddp_bucket_size must be at least 1");
  const size_t n = model_.num_params();
  wte_lo_ = wte_hi_ = n;
  // Only a tied embedding has two halves to add; an untied wte is reduced
  // like any other tensor (and the embedding group has nothing to do).
  if (!model_.config().tied()) embedding_ = nullptr;
  const ParamInfo *wte = model_.find_param("wte.weight");
  if (wte && model_.config().tied()) {
    wte_lo_ = wte->offset;
    wte_hi_ = std::min(n, wte->padded_end());
  }
  if (!dp_) return;
  // Backward order: ln_f and the layers from the top down (below the tied
  // embedding in the flat buffer), then wpe (above it).
  auto add_region = [&](size_t lo, size_t hi) {
    for (size_t top = hi; top > lo;) {
      const size_t bottom = top - std::min(bucket_, top - lo);
      buckets_.push_back({bottom, top, top - bottom, false});
      top = bottom;
    }
  };
  add_region(0, wte_lo_);
  add_region(wte_hi_, n);
  if (overlap_) {
    worker_ = std::thread([this] { work(); });
    model_.set_grad_ready_hook([this](size_t offset, size_t count) { ready(offset, count); });
  }
}

GradReducer::~GradReducer() {
  if (!worker_.joinable()) return;
  model_.set_grad_ready_hook(nullptr);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void GradReducer::start() {
  if (overlap_) {  // a step that failed may have left reductions in flight
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return reduced_ == launched_; });
    error_ = nullptr;
  }
  for (Bucket &b : buckets_) {
    b.pending = b.hi - b.lo;
    b.launched = false;
  }
  active_ = true;
}

void GradReducer::ready(size_t offset, size_t n) {
  if (!active_) return;  // a backward outside a training step
  for (size_t i = 0; i < buckets_.size(); i++) {
    Bucket &b = buckets_[i];
    const size_t lo = std::max(b.lo, offset), hi = std::min(b.hi, offset + n);
    if (b.launched || lo >= hi) continue;
    if (hi - lo > b.pending)
      fail(Status::internal, "gradients [", offset, ", ", offset + n,
           ") reported final twice in one step");
    b.pending -= hi - lo;
    if (b.pending == 0) launch(i);
  }
}

void GradReducer::launch(size_t b) {
  buckets_[b].launched = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(b);
    launched_++;
  }
  cv_.notify_all();
}

// Launched is set only for the buckets the backward handed to the thread.
int GradReducer::overlapped_buckets() const {
  return (int)std::count_if(buckets_.begin(), buckets_.end(),
                            [](const Bucket &b) { return b.launched; });
}

void GradReducer::reduce(size_t b) {
  const Bucket &k = buckets_[b];
  dp_->all_reduce(model_.grads() + k.lo, k.hi - k.lo);
}

void GradReducer::work() {
  bool bound = false;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t b = queue_.front();
    queue_.pop_front();
    const bool failed = error_ != nullptr;  // after an error the rest is only counted
    lk.unlock();
    try {
      if (!bound) model_.device().bind_thread();  // this thread's GPU, or the CPU's FP mode
      bound = true;
      if (!failed) reduce(b);
    } catch (...) {
      lk.lock();
      if (!error_) error_ = std::current_exception();
      lk.unlock();
    }
    lk.lock();
    reduced_++;
    cv_.notify_all();
  }
}

void GradReducer::finish() {
  active_ = false;
  if (overlap_) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return reduced_ == launched_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  // What the backward did not finish (everything without overlap), in order.
  for (size_t i = 0; i < buckets_.size(); i++)
    if (!buckets_[i].launched) reduce(i);
  if (wte_lo_ == wte_hi_) return;
  // The tied embedding: the first stage's lookup gradient and the last
  // stage's LM-head gradient add up to the serial one, then over replicas.
  float *wte = model_.grads() + wte_lo_;
  if (embedding_) embedding_->all_reduce(wte, model_.param("wte.weight").numel);
  if (dp_)
    for (size_t off = wte_lo_; off < wte_hi_; off += bucket_)
      dp_->all_reduce(model_.grads() + off, std::min(bucket_, wte_hi_ - off));
}

}  // namespace ptdp
