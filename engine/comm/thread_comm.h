// The `threads` backend: ranks that live in one process as threads exchange
// data through shared memory (readers copy straight from the writer's buffer).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace ptdp {

class ThreadWorld final : public CommWorld {
 public:
  ThreadWorld(int size, double timeout_s);
  ~ThreadWorld() override;
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // The communicator of world rank `me` in the group `members` (world ranks,
  // ordered by group rank). Every member passes the same name and list.
  std::unique_ptr<Communicator> group(const std::string &name, const std::vector<int> &members,
                                      int me) override;
  // Wakes every rank waiting in any group with an error naming `why`.
  void abort(const std::string &why) override;
  bool aborted() const;
  std::string abort_reason() const override;

  struct Group;

 private:
  int size_;
  double timeout_s_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Group>> groups_;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace ptdp
