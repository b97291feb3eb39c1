// Collective communication between the ranks of one group.
//
// Every call is collective: each rank of the group makes the same calls in the same order with
// matching sizes. Buffers are device memory of the communicator's device (host memory for the
// CPU); counts are in elements of `dtype`. Calls take the stream the buffers are ordered on:
// NCCL enqueues the collective there (the NcclCommunicator comes with the CUDA work), the
// in-process LocalCommunicator runs it at once and ignores the stream.
//
// Reductions are deterministic: every rank gets bit-identical results, whatever the timing.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "framework/core/dtype.h"

namespace mg {

class Stream;

enum class ReduceOp : uint8_t { kSum, kMax };
std::string_view reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data [count] on every rank becomes the elementwise op over all ranks, in place.
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op,
                          Stream* stream = nullptr) = 0;
  // recv [size * count] = every rank's send [count], in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype,
                          Stream* stream = nullptr) = 0;
  // recv [sum(counts)] = rank r's send [counts[r]], in rank order. `counts` is the same on
  // every rank.
  virtual void all_gatherv(const void* send, void* recv, std::span<const int64_t> counts,
                           DType dtype, Stream* stream = nullptr) = 0;
  // send [size * count] on every rank; recv [count] on rank r = op over ranks of block r.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                              Stream* stream = nullptr) = 0;
  // send [sum(counts)] on every rank; recv [counts[r]] on rank r = op over ranks of the r-th
  // block. `counts` is the same on every rank.
  virtual void reduce_scatterv(const void* send, void* recv, std::span<const int64_t> counts,
                               DType dtype, ReduceOp op, Stream* stream = nullptr) = 0;
  // send [size * count]: block r goes to rank r; recv [size * count]: block r came from rank r.
  virtual void all_to_all(const void* send, void* recv, int64_t count, DType dtype,
                          Stream* stream = nullptr) = 0;
  // send: send_counts[r] elements for each rank r, concatenated in rank order; recv:
  // recv_counts[r] elements from each rank r, in rank order. recv_counts[r] on this rank must
  // equal send_counts[this rank] on rank r.
  virtual void all_to_allv(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts, DType dtype,
                           Stream* stream = nullptr) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // The sub-group of `ranks` (ranks of this group, ascending, including this rank), with ranks
  // renumbered 0.. in that order. Every rank calls it at the same point with the group it
  // belongs to, the groups partitioning the ranks (ncclCommSplit semantics). The result is
  // cached and owned by this communicator; later calls with the same ranks return it.
  virtual Communicator& subgroup(std::span<const int> ranks) = 0;
};

}  // namespace mg
