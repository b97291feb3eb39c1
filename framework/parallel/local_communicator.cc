#include "framework/parallel/local_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "framework/core/error.h"

namespace mg {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

namespace {

// What one rank posted for the current collective.
struct Call {
  std::string_view op;
  DType dtype = DType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  int64_t count = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  std::span<const int64_t> counts;       // v-variants (all_to_allv: send counts)
  std::span<const int64_t> recv_counts;  // all_to_allv

  Call() = default;
  Call(std::string_view op_, DType dtype_ = DType::kF32, ReduceOp reduce_ = ReduceOp::kSum,
       int64_t count_ = 0, const void* send_ = nullptr, void* recv_ = nullptr,
       std::span<const int64_t> counts_ = {}, std::span<const int64_t> recv_counts_ = {})
      : op(op_),
        dtype(dtype_),
        reduce(reduce_),
        count(count_),
        send(send_),
        recv(recv_),
        counts(counts_),
        recv_counts(recv_counts_) {}

  std::string str() const {
    return fmt::format("{}({} x {}{})", op, count, dtype_name(dtype),
                       counts.empty() ? "" : fmt::format(", counts [{}]", fmt::join(counts, ", ")));
  }
};

template <typename T>
void reduce_into(T* out, std::span<const T* const> in, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    T acc = in[0][i];
    for (size_t r = 1; r < in.size(); ++r) {
      switch (op) {
        case ReduceOp::kSum:
          acc = acc + in[r][i];
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, in[r][i]);
          break;
      }
    }
    out[i] = acc;
  }
}

// out[i] = op over ranks r of in_r[i] (in rank order), for `n` elements of `dtype`.
void reduce(DType dtype, void* out, const std::vector<const void*>& in, int64_t n, ReduceOp op) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> p;
    for (const void* x : in) p.push_back(static_cast<const T*>(x));
    reduce_into(static_cast<T*>(out), std::span<const T* const>(p), n, op);
  };
  switch (dtype) {
    case DType::kF32:
      return typed(float{});
    case DType::kF64:
      return typed(double{});
    case DType::kI32:
      return typed(int32_t{});
    case DType::kI64:
      return typed(int64_t{});
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      break;
  }
  MG_FAIL("LocalCommunicator: reductions support F32, F64, I32 and I64, not {}", dtype_name(dtype));
}

const char* byte_ptr(const void* p, int64_t elements, DType dtype) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_size(dtype));
}
char* byte_ptr(void* p, int64_t elements, DType dtype) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(dtype_size(dtype));
}
size_t bytes_of(int64_t elements, DType dtype) {
  return static_cast<size_t>(elements) * dtype_size(dtype);
}

}  // namespace

struct LocalCommGroup::State {
  int size;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::string abort_reason;
  std::vector<Call> calls;
  std::map<std::vector<int>, std::unique_ptr<LocalCommGroup>> children;

  void abort_locked(const std::string& why) {
    if (abort_reason.empty()) abort_reason = why;
    cv.notify_all();
    for (auto& [ranks, child] : children) child->abort(why);
  }

  // Waits until every rank arrived. Throws mg::Error when the group is aborted or times out.
  void wait_all(int rank, std::string_view what) {
    std::unique_lock<std::mutex> lock(mutex);
    MG_CHECK(abort_reason.empty(), "LocalCommunicator rank {}: {}", rank, abort_reason);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const bool done =
        cv.wait_for(lock, timeout, [&] { return generation != gen || !abort_reason.empty(); });
    if (generation != gen) return;
    if (!done) {
      abort_locked(
          fmt::format("rank {} waited {} ms in {} for ranks that never came (a rank "
                      "skipped the call or failed)",
                      rank, timeout.count(), what));
    }
    MG_FAIL("LocalCommunicator rank {}: {}", rank, abort_reason);
  }
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalCommGroup::State& state, int rank) : s_(state), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_.size; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Stream*) override {
    scratch_.resize(bytes_of(count, dtype));
    run(Call("all_reduce", dtype, op, count, data, data),
        [&] { reduce(dtype, scratch_.data(), sends(), count, op); });
    // Everyone has read every input; now the result can replace this rank's data.
    if (count > 0) std::memcpy(data, scratch_.data(), bytes_of(count, dtype));
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype, Stream*) override {
    run(Call("all_gather", dtype, ReduceOp::kSum, count, send, recv), [&] {
      for (int r = 0; r < size(); ++r) {
        copy(byte_ptr(recv, r * count, dtype), s_.calls[r].send, count, dtype);
      }
    });
  }

  void all_gatherv(const void* send, void* recv, std::span<const int64_t> counts, DType dtype,
                   Stream*) override {
    check_counts(counts);
    run(Call("all_gatherv", dtype, ReduceOp::kSum, 0, send, recv, counts), [&] {
      int64_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        copy(byte_ptr(recv, offset, dtype), s_.calls[r].send, counts[r], dtype);
        offset += counts[r];
      }
    });
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                      Stream*) override {
    run(Call("reduce_scatter", dtype, op, count, send, recv),
        [&] { reduce(dtype, recv, sends(rank_ * count), count, op); });
  }

  void reduce_scatterv(const void* send, void* recv, std::span<const int64_t> counts, DType dtype,
                       ReduceOp op, Stream*) override {
    check_counts(counts);
    run(Call("reduce_scatterv", dtype, op, 0, send, recv, counts), [&] {
      int64_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += counts[r];
      reduce(dtype, recv, sends(offset), counts[rank_], op);
    });
  }

  void all_to_all(const void* send, void* recv, int64_t count, DType dtype, Stream*) override {
    run(Call("all_to_all", dtype, ReduceOp::kSum, count, send, recv), [&] {
      for (int r = 0; r < size(); ++r) {
        copy(byte_ptr(recv, r * count, dtype), byte_ptr(s_.calls[r].send, rank_ * count, dtype),
             count, dtype);
      }
    });
  }

  void all_to_allv(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, Stream*) override {
    check_counts(send_counts);
    check_counts(recv_counts);
    run(Call("all_to_allv", dtype, ReduceOp::kSum, 0, send, recv, send_counts, recv_counts), [&] {
      int64_t out = 0;
      for (int r = 0; r < size(); ++r) {
        const Call& c = s_.calls[r];
        int64_t in = 0;
        for (int q = 0; q < rank_; ++q) in += c.counts[q];
        copy(byte_ptr(recv, out, dtype), byte_ptr(c.send, in, dtype), recv_counts[r], dtype);
        out += recv_counts[r];
      }
    });
  }

  void barrier() override {
    run(Call("barrier"), [] {});
  }

  Communicator& subgroup(std::span<const int> ranks) override {
    std::vector<int> key(ranks.begin(), ranks.end());
    MG_CHECK(!key.empty() && std::is_sorted(key.begin(), key.end()) &&
                 std::adjacent_find(key.begin(), key.end()) == key.end() && key.front() >= 0 &&
                 key.back() < size(),
             "LocalCommunicator: subgroup ranks [{}] must be ascending, distinct and in [0, {})",
             fmt::join(key, ", "), size());
    const auto me = std::find(key.begin(), key.end(), rank_);
    MG_CHECK(me != key.end(), "LocalCommunicator: rank {} asked for subgroup [{}] without itself",
             rank_, fmt::join(key, ", "));
    auto cached = subgroups_.find(key);
    if (cached != subgroups_.end()) return *cached->second;
    Communicator* comm;
    {
      std::lock_guard<std::mutex> lock(s_.mutex);
      std::unique_ptr<LocalCommGroup>& child = s_.children[key];
      if (!child) {
        child = std::make_unique<LocalCommGroup>(static_cast<int>(key.size()), s_.timeout);
        // A group made after its parent was aborted is born aborted: the rank that failed will
        // never join it, so the others must not wait out the timeout there. (Groups that exist
        // when the parent aborts are reached by abort_locked; both happen under this lock.)
        if (!s_.abort_reason.empty()) child->abort(s_.abort_reason);
      }
      comm = &child->communicator(static_cast<int>(me - key.begin()));
    }
    subgroups_.emplace(std::move(key), comm);
    return *comm;
  }

 private:
  // Publish, wait for all, check that the calls match, run `body`, wait until all are done.
  template <typename Fn>
  void run(Call call, Fn&& body) {
    s_.calls[rank_] = call;
    s_.wait_all(rank_, call.op);
    check_matching();
    body();
    s_.wait_all(rank_, call.op);
  }

  // Every rank runs the same checks on the same posted calls, so either all ranks throw here
  // (before anyone reads a buffer) or none does.
  void check_matching() const {
    const Call& first = s_.calls[0];
    for (int r = 1; r < size(); ++r) {
      const Call& c = s_.calls[r];
      const bool same =
          c.op == first.op && c.dtype == first.dtype && c.reduce == first.reduce &&
          c.count == first.count &&
          (c.op == "all_to_allv" ||
           std::equal(c.counts.begin(), c.counts.end(), first.counts.begin(), first.counts.end()));
      MG_CHECK(same,
               "LocalCommunicator: ranks disagree on the collective: rank 0 called {}, rank {} "
               "called {}",
               first.str(), r, c.str());
    }
    if (first.op != "all_to_allv") return;
    for (int r = 0; r < size(); ++r) {
      for (int q = 0; q < size(); ++q) {
        MG_CHECK(s_.calls[r].recv_counts[q] == s_.calls[q].counts[r],
                 "LocalCommunicator: all_to_allv: rank {} expects {} elements from rank {}, which "
                 "sends it {}",
                 r, s_.calls[r].recv_counts[q], q, s_.calls[q].counts[r]);
      }
    }
  }

  void check_counts(std::span<const int64_t> counts) const {
    MG_CHECK(static_cast<int>(counts.size()) == size() &&
                 std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 0; }),
             "LocalCommunicator: expected {} non-negative counts, got [{}]", size(),
             fmt::join(counts, ", "));
  }

  // Every rank's send buffer, advanced by `offset` elements.
  std::vector<const void*> sends(int64_t offset = 0) const {
    std::vector<const void*> p;
    for (const Call& c : s_.calls) p.push_back(byte_ptr(c.send, offset, c.dtype));
    return p;
  }

  static void copy(void* dst, const void* src, int64_t count, DType dtype) {
    if (count > 0) std::memcpy(dst, src, bytes_of(count, dtype));
  }

  LocalCommGroup::State& s_;
  int rank_;
  std::vector<char> scratch_;
  std::map<std::vector<int>, Communicator*> subgroups_;
};

LocalCommGroup::LocalCommGroup(int size, std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>()) {
  MG_CHECK(size >= 1, "LocalCommGroup needs at least one rank, got {}", size);
  state_->size = size;
  state_->timeout = timeout;
  state_->calls.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) comms_.push_back(std::make_unique<LocalCommunicator>(*state_, r));
}

LocalCommGroup::~LocalCommGroup() = default;

int LocalCommGroup::size() const {
  return state_->size;
}

Communicator& LocalCommGroup::communicator(int rank) {
  MG_CHECK(rank >= 0 && rank < size(), "LocalCommGroup: rank {} is not in [0, {})", rank, size());
  return *comms_[static_cast<size_t>(rank)];
}

void LocalCommGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->abort_locked(why);
}

}  // namespace mg
