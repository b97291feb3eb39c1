#include "framework/parallel/nccl_communicator.h"

#include "framework/core/error.h"

#ifdef MG_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "framework/core/logging.h"
#include "framework/device/stream.h"
#include "framework/parallel/tcp_store.h"
#endif

namespace mg {

#ifndef MG_WITH_NCCL

bool built_with_nccl() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, int, const std::string&,
                                                     std::chrono::milliseconds) {
  MG_FAIL(
      "this moegraph was built without NCCL (CMake found no nccl.h / libnccl), so it cannot run "
      "as {}; rebuild with NCCL next to the CUDA toolkit (see docs/parallel.md)",
      env.str());
}

#else

bool built_with_nccl() {
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

void cuda_or_throw(cudaError_t err, const char* call) {
  MG_CHECK(err == cudaSuccess, "CUDA call {} failed: {}", call, cudaGetErrorString(err));
}
#define MG_NCCL_CUDA(call) cuda_or_throw((call), #call)

std::optional<ncclDataType_t> nccl_reduce_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return std::nullopt;
  }
  return std::nullopt;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

size_t bytes_of(int64_t elements, DType dtype) {
  MG_CHECK(elements >= 0, "NCCL communicator: negative element count {}", elements);
  return static_cast<size_t>(elements) * dtype_size(dtype);
}

bool is_host_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear it: an unknown pointer is host memory
    return true;
  }
  return attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, std::string name,
                   std::chrono::milliseconds timeout)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        name_(std::move(name)),
        timeout_(timeout) {
    MG_NCCL_CUDA(cudaSetDevice(device_));
    MG_NCCL_CUDA(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> subs(subgroups_mutex_);
      subgroups_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      // A communicator with work still pending (a failed run) is aborted, not finalized:
      // finalize would wait for peers that may be gone.
      if (failed_.load() || cudaStreamQuery(own_stream_) != cudaSuccess) {
        ncclCommAbort(comm_);
      } else {
        ncclResult_t r = ncclCommFinalize(comm_);
        if (r == ncclSuccess || r == ncclInProgress) r = wait_done_quiet(Clock::now() + timeout_);
        if (r == ncclSuccess) {
          ncclCommDestroy(comm_);
        } else {
          ncclCommAbort(comm_);
        }
      }
    }
    for (const Pending& p : pending_) cudaEventDestroy(p.event);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(own_stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Stream* stream) override {
    const ncclDataType_t type = reduce_type(dtype, "all_reduce");
    const size_t bytes = bytes_of(count, dtype);
    run("ncclAllReduce", stream, data, bytes, data, bytes, [&](const void* s, void* r, auto st) {
      return ncclAllReduce(s, r, static_cast<size_t>(count), type, nccl_op(op), comm_, st);
    });
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype,
                  Stream* stream) override {
    const size_t bytes = bytes_of(count, dtype);
    run("ncclAllGather", stream, send, bytes, recv, bytes * size_,
        [&](const void* s, void* r, auto st) {
          return ncclAllGather(s, r, bytes, ncclUint8, comm_, st);
        });
  }

  void all_gatherv(const void* send, void* recv, std::span<const int64_t> counts, DType dtype,
                   Stream* stream) override {
    check_counts(counts, "all_gatherv");
    const size_t total = sum_bytes(counts, dtype);
    run("all_gatherv (grouped ncclBroadcast)", stream, send, bytes_of(counts[rank_], dtype), recv,
        total, [&](const void* s, void* r, auto st) {
          size_t offset = 0;
          ncclResult_t result = ncclGroupStart();
          for (int root = 0; root < size_ && result == ncclSuccess; ++root) {
            const size_t n = bytes_of(counts[root], dtype);
            if (n > 0) {
              result =
                  ncclBroadcast(s, static_cast<char*>(r) + offset, n, ncclUint8, root, comm_, st);
            }
            offset += n;
          }
          const ncclResult_t end = ncclGroupEnd();
          return result != ncclSuccess ? result : end;
        });
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                      Stream* stream) override {
    const ncclDataType_t type = reduce_type(dtype, "reduce_scatter");
    const size_t bytes = bytes_of(count, dtype);
    run("ncclReduceScatter", stream, send, bytes * size_, recv, bytes,
        [&](const void* s, void* r, auto st) {
          return ncclReduceScatter(s, r, static_cast<size_t>(count), type, nccl_op(op), comm_, st);
        });
  }

  void reduce_scatterv(const void* send, void* recv, std::span<const int64_t> counts, DType dtype,
                       ReduceOp op, Stream* stream) override {
    check_counts(counts, "reduce_scatterv");
    const ncclDataType_t type = reduce_type(dtype, "reduce_scatterv");
    run("reduce_scatterv (grouped ncclReduce)", stream, send, sum_bytes(counts, dtype), recv,
        bytes_of(counts[rank_], dtype), [&](const void* s, void* r, auto st) {
          size_t offset = 0;
          ncclResult_t result = ncclGroupStart();
          for (int root = 0; root < size_ && result == ncclSuccess; ++root) {
            const size_t n = bytes_of(counts[root], dtype);
            if (n > 0) {
              result =
                  ncclReduce(static_cast<const char*>(s) + offset, r,
                             static_cast<size_t>(counts[root]), type, nccl_op(op), root, comm_, st);
            }
            offset += n;
          }
          const ncclResult_t end = ncclGroupEnd();
          return result != ncclSuccess ? result : end;
        });
  }

  void all_to_all(const void* send, void* recv, int64_t count, DType dtype,
                  Stream* stream) override {
    std::vector<int64_t> counts(static_cast<size_t>(size_), count);
    all_to_allv(send, counts, recv, counts, dtype, stream);
  }

  void all_to_allv(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, Stream* stream) override {
    check_counts(send_counts, "all_to_allv send");
    check_counts(recv_counts, "all_to_allv recv");
    MG_CHECK(send_counts[rank_] == recv_counts[rank_],
             "all_to_allv: rank {} sends itself {} elements but expects {}", rank_,
             send_counts[rank_], recv_counts[rank_]);
    run("all_to_allv (grouped ncclSend/ncclRecv)", stream, send, sum_bytes(send_counts, dtype),
        recv, sum_bytes(recv_counts, dtype), [&](const void* s, void* r, cudaStream_t st) {
          size_t send_off = 0, recv_off = 0;
          ncclResult_t result = ncclGroupStart();
          for (int peer = 0; peer < size_ && result == ncclSuccess; ++peer) {
            const size_t ns = bytes_of(send_counts[peer], dtype);
            const size_t nr = bytes_of(recv_counts[peer], dtype);
            if (peer == rank_) {
              if (ns > 0) {
                MG_NCCL_CUDA(cudaMemcpyAsync(static_cast<char*>(r) + recv_off,
                                             static_cast<const char*>(s) + send_off, ns,
                                             cudaMemcpyDeviceToDevice, st));
              }
            } else {
              if (ns > 0) {
                result = ncclSend(static_cast<const char*>(s) + send_off, ns, ncclUint8, peer,
                                  comm_, st);
              }
              if (result == ncclSuccess && nr > 0) {
                result = ncclRecv(static_cast<char*>(r) + recv_off, nr, ncclUint8, peer, comm_, st);
              }
            }
            send_off += ns;
            recv_off += nr;
          }
          const ncclResult_t end = ncclGroupEnd();
          return result != ncclSuccess ? result : end;
        });
  }

  void barrier() override {
    // A one-element all-reduce on the own stream; run() waits for it (null stream).
    ensure_scratch(sizeof(int32_t));
    std::lock_guard<std::mutex> call(call_mutex_);
    throw_if_failed();
    MG_NCCL_CUDA(cudaSetDevice(device_));
    check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, own_stream_),
               "ncclAllReduce (barrier)");
    track("barrier", own_stream_);
    wait_stream(own_stream_, "barrier");
  }

  Communicator& subgroup(std::span<const int> ranks) override {
    std::vector<int> key(ranks.begin(), ranks.end());
    if (auto it = subgroups_.find(key); it != subgroups_.end()) return *it->second;
    if (static_cast<int>(key.size()) == size_) {
      for (int r = 0; r < size_; ++r) MG_CHECK(key[r] == r, "subgroup: ranks must be ascending");
      return *this;  // the whole group: the same ranks, numbered the same
    }
    int position = -1;
    for (size_t i = 0; i < key.size(); ++i) {
      MG_CHECK(key[i] >= 0 && key[i] < size_ && (i == 0 || key[i] > key[i - 1]),
               "subgroup: ranks must be ascending ranks of the group of {}, got [{}]", size_,
               fmt::join(key, ", "));
      if (key[i] == rank_) position = static_cast<int>(i);
    }
    MG_CHECK(position >= 0, "subgroup: rank {} is not in [{}]", rank_, fmt::join(key, ", "));
    ncclComm_t sub = nullptr;
    {
      std::lock_guard<std::mutex> call(call_mutex_);
      throw_if_failed();
      MG_NCCL_CUDA(cudaSetDevice(device_));
      ncclConfig_t config = nonblocking_config();
      // The groups partition the ranks: the lowest rank of a group names it.
      check_nccl(ncclCommSplit(comm_, key.front(), position, &sub, &config), "ncclCommSplit");
    }
    // The new communicator finishes its initialisation asynchronously.
    const ncclResult_t r = wait_comm(sub, Clock::now() + timeout_);
    if (r != ncclSuccess) {
      const std::string last = ncclGetLastError(sub);
      ncclCommAbort(sub);
      MG_FAIL("ncclCommSplit of [{}] on rank {} of {} failed: {} ({})", fmt::join(key, ", "), rank_,
              name_, r == ncclInProgress ? "timed out" : ncclGetErrorString(r), last);
    }
    auto child = std::make_unique<NcclCommunicator>(
        sub, position, static_cast<int>(key.size()), device_,
        fmt::format("{} subgroup [{}]", name_, fmt::join(key, ", ")), timeout_);
    Communicator& result = *child;
    std::lock_guard<std::mutex> subs(subgroups_mutex_);
    subgroups_.emplace(std::move(key), std::move(child));
    return result;
  }

  // Polls a (possibly still initialising) communicator until it is ready or the deadline.
  static ncclResult_t wait_comm(ncclComm_t comm, Clock::time_point deadline) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) return r;
      if (state != ncclInProgress) return state;
      if (Clock::now() >= deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  struct Pending {
    cudaEvent_t event;
    const char* op;
    Clock::time_point enqueued;
  };

  ncclDataType_t reduce_type(DType dtype, const char* op) const {
    const std::optional<ncclDataType_t> t = nccl_reduce_type(dtype);
    MG_CHECK(t.has_value(), "NCCL {}: reductions support F32, F64, F16, BF16, I32 and I64, not {}",
             op, dtype_name(dtype));
    return *t;
  }

  void check_counts(std::span<const int64_t> counts, const char* op) const {
    MG_CHECK(static_cast<int>(counts.size()) == size_, "NCCL {}: {} counts for {} ranks", op,
             counts.size(), size_);
  }

  static size_t sum_bytes(std::span<const int64_t> counts, DType dtype) {
    size_t total = 0;
    for (int64_t c : counts) total += bytes_of(c, dtype);
    return total;
  }

  // Called holding call_mutex_: a failure the watchdog recorded without the lock is turned into
  // the abort here, then thrown.
  void throw_if_failed() {
    if (!failed_.load()) return;
    abort_comm();
    std::lock_guard<std::mutex> lock(mutex_);
    MG_FAIL("{}", failure_);
  }

  // ncclResult_t -> mg::Error naming the call; ncclInProgress (non-blocking) is waited for.
  void check_nccl(ncclResult_t r, const char* call) {
    if (r == ncclInProgress) r = wait_done_quiet(Clock::now() + timeout_);
    if (r == ncclSuccess) return;
    const std::string why =
        r == ncclInProgress
            ? fmt::format("did not finish within {} ms (a peer rank died or hangs)",
                          timeout_.count())
            : fmt::format("{} ({})", ncclGetErrorString(r), ncclGetLastError(comm_));
    abort_with(fmt::format("{} on rank {} of {} ({}) failed: {}", call, rank_, size_, name_, why));
    throw_if_failed();
  }

  ncclResult_t wait_done_quiet(Clock::time_point deadline) { return wait_comm(comm_, deadline); }

  void ensure_scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return;
    MG_NCCL_CUDA(cudaSetDevice(device_));
    if (scratch_ != nullptr) {
      MG_NCCL_CUDA(cudaStreamSynchronize(own_stream_));
      MG_NCCL_CUDA(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    const size_t size = std::max<size_t>(bytes, 256);
    MG_NCCL_CUDA(cudaMalloc(&scratch_, size));
    scratch_bytes_ = size;
  }

  // Enqueues `enqueue(send, recv, stream)` and follows it; stages host buffers through device
  // scratch (send first, recv after it) and waits for them.
  template <typename Fn>
  void run(const char* call, Stream* stream, const void* send, size_t send_bytes, void* recv,
           size_t recv_bytes, Fn&& enqueue) {
    std::lock_guard<std::mutex> lock(call_mutex_);
    throw_if_failed();
    MG_NCCL_CUDA(cudaSetDevice(device_));
    cudaStream_t st =
        stream != nullptr ? static_cast<cudaStream_t>(stream->native_handle()) : own_stream_;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MG_NCCL_CUDA(cudaStreamIsCapturing(st, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    const bool host = is_host_pointer(send) || is_host_pointer(recv);
    if (host) {
      MG_CHECK(!capturing, "NCCL {}: host buffers cannot be used while a CUDA graph is captured",
               call);
      // Staging: scratch = [send | recv], 256-byte aligned.
      const size_t recv_at = (send_bytes + 255) / 256 * 256;
      // ensure_scratch may free the old buffer, which work queued on `st` may still use.
      MG_NCCL_CUDA(cudaStreamSynchronize(st));
      ensure_scratch(recv_at + recv_bytes);
      char* s = static_cast<char*>(scratch_);
      char* r = s + recv_at;
      if (send_bytes > 0) {
        MG_NCCL_CUDA(cudaMemcpyAsync(s, send, send_bytes, cudaMemcpyDefault, st));
      }
      // In place (send == recv) the collective reads and writes the same staged bytes.
      if (send == recv) r = s;
      check_nccl(enqueue(s, r, st), call);
      if (recv_bytes > 0) {
        MG_NCCL_CUDA(cudaMemcpyAsync(recv, r, recv_bytes, cudaMemcpyDefault, st));
      }
      track(call, st);
      wait_stream(st, call);
      return;
    }
    check_nccl(enqueue(send, recv, st), call);
    if (!capturing) track(call, st);
    if (stream == nullptr) wait_stream(st, call);
  }

  // Records an event after the collective for the watchdog.
  void track(const char* op, cudaStream_t st) {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_events_.empty()) {
        event = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (event == nullptr) MG_NCCL_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    MG_NCCL_CUDA(cudaEventRecord(event, st));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back({event, op, Clock::now()});
    }
    cv_.notify_all();
  }

  // Waits on the host for `st`, polling so that a hung peer ends in an error at the deadline.
  void wait_stream(cudaStream_t st, const char* op) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    while (true) {
      const cudaError_t e = cudaStreamQuery(st);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        MG_FAIL("{} on rank {} of {} ({}): CUDA error {}", op, rank_, size_, name_,
                cudaGetErrorString(e));
      }
      throw_if_failed();  // the watchdog may have aborted meanwhile
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_with(fmt::format("{} on rank {} of {} ({}): NCCL error {} ({})", op, rank_, size_,
                               name_, ncclGetErrorString(async), ncclGetLastError(comm_)));
        throw_if_failed();
      }
      if (Clock::now() >= deadline) {
        abort_with(
            fmt::format("{} on rank {} of {} ({}) did not finish within {} ms (a peer "
                        "rank died or hangs)",
                        op, rank_, size_, name_, timeout_.count()));
        throw_if_failed();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // ncclCommAbort once; only with call_mutex_ held (never while another thread is in a call).
  void abort_comm() {
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // Marks the communicator failed (the first reason stays) and aborts it, and its subgroups.
  // `have_call_lock`: the caller holds call_mutex_ (the main thread inside a call). Otherwise
  // (the watchdog) the abort happens now if no call is in progress, else the thread in the
  // call aborts when it next checks (its own waits are bounded by the same timeout).
  void abort_with(const std::string& why, bool have_call_lock = true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_.load()) return;
      failure_ = why;
      failed_.store(true);
    }
    MG_LOG_ERROR("runtime", "{}; aborting the NCCL communicator", why);
    if (have_call_lock) {
      abort_comm();
    } else {
      std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
      if (call.owns_lock()) abort_comm();
    }
    std::lock_guard<std::mutex> subs(subgroups_mutex_);
    for (auto& [ranks, sub] : subgroups_) sub->abort_with(why, false);
  }

  // The watchdog: retires finished collectives, aborts on an asynchronous error or a
  // collective unfinished for longer than the timeout.
  void watch() {
    cudaSetDevice(device_);
    // Its event queries must neither fail nor break a CUDA graph another thread is capturing.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_ || failed_.load()) continue;
      while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
        free_events_.push_back(pending_.front().event);
        pending_.pop_front();
      }
      std::string why;
      if (!pending_.empty() && Clock::now() - pending_.front().enqueued > timeout_) {
        why = fmt::format(
            "{} on rank {} of {} ({}) did not finish within {} ms (a peer rank died or hangs)",
            pending_.front().op, rank_, size_, name_, timeout_.count());
      }
      lock.unlock();
      if (why.empty()) {
        // Only while no call is in progress: the main thread may be inside NCCL right now.
        std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
        if (call.owns_lock() && comm_ != nullptr) {
          ncclResult_t async = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
              async != ncclInProgress) {
            why = fmt::format("NCCL error on rank {} of {} ({}): {} ({})", rank_, size_, name_,
                              ncclGetErrorString(async), ncclGetLastError(comm_));
          }
        }
      }
      if (!why.empty()) abort_with(why, false);
      lock.lock();
    }
  }

  ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  cudaStream_t own_stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::map<std::vector<int>, std::unique_ptr<NcclCommunicator> > subgroups_;
  std::mutex subgroups_mutex_;  // insertions (main thread) vs the watchdog's abort cascade

  std::mutex call_mutex_;  // the main thread's NCCL calls vs the watchdog's polling
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::atomic<bool> failed_{false};
  std::string failure_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, int device,
                                                     const std::string& fingerprint,
                                                     std::chrono::milliseconds timeout) {
  int devices = 0;
  MG_NCCL_CUDA(cudaGetDeviceCount(&devices));
  MG_CHECK(device >= 0 && device < devices,
           "{}: GPU {} does not exist ({} visible); LOCAL_RANK picks the GPU, so start at most "
           "one process per GPU on each host",
           env.str(), device, devices);
  MG_NCCL_CUDA(cudaSetDevice(device));
  ncclUniqueId id{};
  std::string payload;
  if (env.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    MG_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: {}", ncclGetErrorString(r));
    payload.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  const std::string got = store_exchange(env, fingerprint, payload, timeout);
  MG_CHECK(got.size() == sizeof(id), "store: the NCCL id from rank 0 has {} bytes, expected {}",
           got.size(), sizeof(id));
  std::memcpy(&id, got.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = nonblocking_config();
  ncclResult_t r = ncclCommInitRankConfig(&comm, env.world_size, id, env.rank, &config);
  if (r == ncclSuccess || r == ncclInProgress) {
    r = comm ? NcclCommunicator::wait_comm(comm, Clock::now() + timeout) : r;
  }
  if (r != ncclSuccess) {
    const std::string last = comm ? ncclGetLastError(comm) : "";
    if (comm) ncclCommAbort(comm);
    MG_FAIL("ncclCommInitRankConfig on {} failed: {} {}", env.str(),
            r == ncclInProgress ? fmt::format("did not finish within {} ms", timeout.count())
                                : std::string(ncclGetErrorString(r)),
            last);
  }
  return std::make_unique<NcclCommunicator>(comm, env.rank, env.world_size, device, "world",
                                            timeout);
}

#endif  // MG_WITH_NCCL

}  // namespace mg
