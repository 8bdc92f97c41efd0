// The processes that write and read one checkpoint together: this process
// alone, or every MPI process of the job under mpirun (ARCHITECTURE §5). The
// collective helpers let every process agree on success before the commit, so
// that one process's failed write never becomes a committed checkpoint.
#pragma once
#include <string>
#include <vector>

namespace ptdp {

class IoWorld {
 public:
  // MPI_COMM_WORLD when MPI is running with more than one process, else one process.
  static IoWorld current();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool parallel() const { return size_ > 1; }
  // Collective: every process passes its error ("" when it succeeded) and all
  // get the first one in rank order, prefixed with "process N: " when parallel.
  std::string first_error(const std::string &mine) const;
  // Collective: every process's string, in rank order, on every process.
  std::vector<std::string> all_gather(const std::string &mine) const;
  // Collective: process 0's string on every process.
  std::string broadcast(const std::string &from_first) const;
  void barrier() const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace ptdp
