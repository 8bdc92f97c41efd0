#include "checkpoints/io_world.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>

namespace ptdp {

IoWorld IoWorld::current() {
  IoWorld w;
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) {
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
  }
  return w;
}

std::vector<std::string> IoWorld::all_gather(const std::string &mine) const {
  if (!parallel()) return {mine};
  int len = (int)mine.size();
  std::vector<int> lens((size_t)size_), offs((size_t)size_);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < size_; i++) {
    offs[(size_t)i] = total;
    total += lens[(size_t)i];
  }
  std::string all((size_t)total, '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int i = 0; i < size_; i++) out.push_back(all.substr((size_t)offs[(size_t)i], (size_t)lens[(size_t)i]));
  return out;
}

std::string IoWorld::first_error(const std::string &mine) const {
  if (!parallel()) return mine;
  std::vector<std::string> all = all_gather(mine);
  for (int i = 0; i < size_; i++)
    if (!all[(size_t)i].empty()) return "process " + std::to_string(i) + ": " + all[(size_t)i];
  return "";
}

std::string IoWorld::broadcast(const std::string &from_first) const {
  if (!parallel()) return from_first;
  int64_t len = (int64_t)from_first.size();
  MPI_Bcast(&len, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string s = rank_ == 0 ? from_first : std::string((size_t)len, '\0');
  MPI_Bcast(s.data(), (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

void IoWorld::barrier() const {
  if (parallel()) MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace ptdp
