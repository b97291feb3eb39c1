// Helpers of the CUDA test suite (header-only: the suite compiles tests/cuda/*_test.cc).
//
// DeviceOp compiles one node for a GPU the way the plan would (weights cast to the activation
// dtype and uploaded, kernel from OpDef::create_kernel, state from create_state) and runs it on
// host F32/I32 inputs, returning host F32 outputs. Outputs are poisoned with NaN before every run
// and surrounded by guard bytes that must survive it, so an unwritten element or a write past the
// end fails the test. expect_cuda_cases_match_reference runs the shared op case table
// (tests/testing/op_cases.h) through DeviceOp in every dtype.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/op/op_registry.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_cases.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#endif

// Skips the test, saying why, where no GPU can run it.
#define MG_REQUIRE_GPU()                                                                  \
  do {                                                                                    \
    if (!::mg::built_with_cuda()) GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";     \
    if (::mg::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"; \
  } while (false)

namespace mg::testing {

// An activation dtype with the normalised error its results must stay under.
struct DtypeTolerance {
  DType dtype;
  double tolerance;
};

// The dtypes every CUDA op test runs: bf16 ~1e-2 (8-bit mantissa), fp16 (11-bit), fp32.
// MG_TEST_DTYPES=bf16,f32 (names as `moegraph run --dtype`) runs a subset, e.g. under
// compute-sanitizer where every launch is much slower.
inline const std::vector<DtypeTolerance>& cuda_dtypes() {
  static const std::vector<DtypeTolerance> dtypes = [] {
    const std::vector<std::pair<std::string, DtypeTolerance>> all = {
        {"bf16", {DType::kBF16, 1e-2}}, {"f16", {DType::kF16, 2e-3}}, {"f32", {DType::kF32, 1e-5}}};
    const char* only = std::getenv("MG_TEST_DTYPES");
    std::vector<DtypeTolerance> chosen;
    for (const auto& [name, d] : all) {
      if (only == nullptr || std::string(only).find(name) != std::string::npos) chosen.push_back(d);
    }
    return chosen;
  }();
  return dtypes;
}

// "BF16 (tolerance 0.01)": the SCOPED_TRACE prefix of a case run in dtype `d`.
inline std::string dtype_trace(const DtypeTolerance& d) {
  return fmt::format("{} (tolerance {})", dtype_name(d.dtype), d.tolerance);
}

// `t` (host F32) rounded through `dtype` and back: the exact values a kernel of that dtype sees.
inline Tensor round_through(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() != DType::kF32) return t;
  return to_f32_cpu(cast_cpu(t, dtype));
}

#ifdef MG_WITH_CUDA

// Median milliseconds of one launch of `exec` on `stream` over `replays` launches, after one
// warm-up launch (the timing tests' graphs hold many kernel launches; divide by their count).
inline double median_graph_replay_ms(cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  cudaEvent_t start = nullptr, stop = nullptr;
  MG_CUDA_CHECK(cudaEventCreate(&start));
  MG_CUDA_CHECK(cudaEventCreate(&stop));
  MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<float> ms(static_cast<size_t>(replays));
  for (float& m : ms) {
    MG_CUDA_CHECK(cudaEventRecord(start, stream));
    MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MG_CUDA_CHECK(cudaEventRecord(stop, stream));
    MG_CUDA_CHECK(cudaEventSynchronize(stop));
    MG_CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  MG_CUDA_CHECK(cudaEventDestroy(start));
  MG_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// cudaMemset that returns once the bytes are set: the plain call is asynchronous with respect to
// the host for device memory and runs on the legacy stream, which the tests' non-blocking streams
// do not wait for (see DeviceBuffer::upload).
inline void memset_device_now(void* ptr, int value, size_t bytes) {
  MG_CUDA_CHECK(cudaMemset(ptr, value, bytes));
  MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

// A raw device buffer for the kernel tests (cudaMalloc / cudaFree; at least 16 bytes).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    MG_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // Returns once the bytes are on the device. A cudaMemcpy from pageable host memory returns when
  // they are staged, with the DMA still queued on the legacy stream, which the tests' non-blocking
  // streams do not wait for: a kernel launched there could read (or overwrite) the buffer before
  // the copy lands (it did: CudaAttentionDecode.FusedKvWriteMatchesReferenceAndTheSeparateWrite
  // failed 2 runs in ~13 with four test processes sharing the GPU).
  void upload(const void* host, size_t bytes) {
    MG_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
    MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  void download(void* host, size_t bytes) const {
    MG_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  void* ptr_ = nullptr;
};

// Host bytes of `t` (F32, cast to `dtype`; other dtypes as they are) on the device.
inline std::unique_ptr<DeviceBuffer> upload_as(const Tensor& t, DType dtype) {
  const Tensor cast = t.dtype() == DType::kF32 ? cast_cpu(t, dtype) : t;
  auto buffer = std::make_unique<DeviceBuffer>(cast.nbytes());
  buffer->upload(cast.raw(), cast.nbytes());
  return buffer;
}

// SMs of device 0.
inline int device_sm_count() {
  int sms = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// A launch that throws while its stream captures must still end the capture: otherwise every
// later CUDA call of the test process fails (cudaErrorStreamCaptureUnsupported). Until
// release(), the destructor ends the capture, drops the graph and destroys the stream.
class CaptureGuard {
 public:
  explicit CaptureGuard(cudaStream_t stream) : stream_(stream) {}
  CaptureGuard(const CaptureGuard&) = delete;
  CaptureGuard& operator=(const CaptureGuard&) = delete;
  ~CaptureGuard() {
    if (stream_ == nullptr) return;
    cudaGraph_t abandoned = nullptr;
    cudaStreamEndCapture(stream_, &abandoned);
    if (abandoned != nullptr) cudaGraphDestroy(abandoned);
    cudaStreamDestroy(stream_);
  }
  void release() { stream_ = nullptr; }

 private:
  cudaStream_t stream_;
};

// Microseconds per replay of `run(stream)` captured in a CUDA graph on a fresh stream, as a decode
// step runs (host launch costs out): one eager run, the capture, `warmups` replays, then the mean
// of `iters` replays.
template <typename Run>
double graph_replay_us(const Run& run, int iters, int warmups) {
  cudaStream_t stream;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // What the test queued on the legacy stream (cudaMemset, device-to-device cudaMemcpy) first:
  // this stream does not wait for it.
  MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  run(stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  run(stream);
  MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < warmups; ++i) MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t start, stop;
  MG_CUDA_CHECK(cudaEventCreate(&start));
  MG_CUDA_CHECK(cudaEventCreate(&stop));
  MG_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MG_CUDA_CHECK(cudaEventRecord(stop, stream));
  MG_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  MG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  MG_CUDA_CHECK(cudaEventDestroy(start));
  MG_CUDA_CHECK(cudaEventDestroy(stop));
  MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MG_CUDA_CHECK(cudaGraphDestroy(graph));
  MG_CUDA_CHECK(cudaStreamDestroy(stream));
  return 1000.0 * ms / iters;
}

// Runs `launch(stream)` on a fresh stream, then again captured in a CUDA graph and replayed, `out`
// poisoned (0xff bytes) before each; the replay must reproduce the eager output bit for bit.
// Returns the eager bytes.
template <typename Launch>
std::vector<uint8_t> run_eager_and_graph(const Launch& launch, const DeviceBuffer& out,
                                         size_t out_bytes) {
  cudaStream_t stream;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // as graph_replay_us
  MG_CUDA_CHECK(cudaMemsetAsync(out.as<void>(), 0xff, out_bytes, stream));
  launch(stream);
  MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> eager(out_bytes), replay(out_bytes);
  out.download(eager.data(), out_bytes);

  MG_CUDA_CHECK(cudaMemsetAsync(out.as<void>(), 0xff, out_bytes, stream));
  MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch(stream);
  MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.download(replay.data(), out_bytes);
  MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MG_CUDA_CHECK(cudaGraphDestroy(graph));
  MG_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_TRUE(eager == replay) << "the graph replay differs from the eager run";
  return eager;
}

// A host tensor on the GPU: floats cast to `dtype`, anything else (I32 ids) as it is.
inline Tensor upload(const Tensor& host, DType dtype, Stream* stream) {
  if (!host.defined()) return host;
  const Tensor src = host.dtype() == DType::kF32 ? cast_cpu(host, dtype) : host;
  Tensor dev = empty_tensor(Device::cuda(0), src.dtype(), src.shape(), stream);
  copy_tensor(dev, src, stream);
  return dev;
}

// A device tensor back on the host as F32 (or I32 as it is); waits for `stream`.
inline Tensor download_f32(const Tensor& dev, Stream* stream) {
  Tensor host = Tensor::empty_cpu(dev.dtype(), dev.shape());
  copy_tensor(host, dev, stream);
  return host.dtype() == DType::kI32 ? host : to_f32_cpu(host);
}

class DeviceOp {
 public:
  static constexpr size_t kGuard = 256;  // bytes before and after every output

  // `moe_backend`: CompileOptions::moe_backend (the MoE op's requested expert backend).
  // `parallel`: the rank the op is compiled for (its collectives go to set_comm's communicator).
  DeviceOp(const proto::Node& node, const std::vector<Tensor>& inputs, DType dtype,
           int64_t max_seq_len = 256, const std::string& moe_backend = "",
           const ParallelConfig& parallel = ParallelConfig())
      : node_(node), def_(OpRegistry::global().find(node.op())), dtype_(dtype) {
    MG_CHECK(def_ != nullptr, "unknown op '{}'", node.op());
    options_.device = Device::cuda(0);
    options_.parallel = parallel;
    options_.activation_dtype = dtype;
    options_.max_seq_len = max_seq_len;
    options_.moe_backend = moe_backend;
    stream_ = make_stream(options_.device);
    const auto types = types_of(inputs);
    def_->infer(node_, types);
    placed_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size() && i < def_->inputs().size(); ++i) {
      if (def_->inputs()[i].kind != InputKind::kWeight || !inputs[i].defined()) continue;
      // Raw weights stay on the host in their own dtype, as the place-weights pass leaves them.
      placed_[i] = def_->inputs()[i].placement == WeightPlacement::kRaw
                       ? inputs[i]
                       : upload(inputs[i], dtype, nullptr);
    }
    KernelContext ctx{node_, options_, types, placed_};
    kernel_ = def_->create_kernel(ctx);
    synchronize_device(options_.device);  // the build's copies, before run()'s stream reads them
    state_ = kernel_->create_state(StateOptions{options_.device, max_seq_len});
  }

  // Runs on fresh activation inputs (host F32 or I32); the state persists across calls.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) {
    const auto types = types_of(inputs);
    const std::vector<ValueType> out_types = def_->infer(node_, types);
    int64_t tokens = 0;
    std::vector<Tensor> args(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (placed_[i].defined()) {
        args[i] = placed_[i];
        continue;
      }
      args[i] = upload(inputs[i], dtype_, stream_.get());
      if (inputs[i].defined() && inputs[i].rank() > 0) tokens = inputs[i].dim(0);
    }
    std::vector<Tensor> outputs;
    for (const ValueType& t : out_types) {
      Shape s = t.shape;
      if (!s.empty() && s[0] == kTokens) s[0] = tokens;
      const DType dtype = t.dtype == DType::kF32 ? dtype_ : t.dtype;
      const size_t bytes = static_cast<size_t>(shape_numel(s)) * dtype_size(dtype);
      auto buffer = allocator_for(options_.device).allocate(bytes + 2 * kGuard, stream_.get());
      MG_CUDA_CHECK(
          cudaMemsetAsync(buffer->data(), 0xff, bytes + 2 * kGuard, cuda::native(stream_.get())));
      outputs.emplace_back(buffer, dtype, s, kGuard);
    }
    const size_t ws_bytes = kernel_->workspace_bytes(tokens);
    Tensor workspace =
        empty_tensor(options_.device, DType::kU8,
                     {static_cast<int64_t>(std::max<size_t>(ws_bytes, 1))}, stream_.get());
    ExecContext ctx;
    ctx.device = options_.device;
    ctx.stream = stream_.get();
    ctx.state = state_.get();
    ctx.workspace = ws_bytes ? workspace.raw() : nullptr;
    ctx.workspace_bytes = ws_bytes;
    ctx.comm = comm_;
    kernel_->run(ctx, args, outputs);
    MG_CUDA_CHECK(cudaStreamSynchronize(cuda::native(stream_.get())));
    std::vector<Tensor> host;
    for (const Tensor& out : outputs) {
      expect_guards_intact(out);
      host.push_back(download_f32(out, stream_.get()));
    }
    return host;
  }

  OpKernel& kernel() { return *kernel_; }
  // The communicator of later run() calls (null: a single rank).
  void set_comm(Communicator* comm) { comm_ = comm; }
  // The state the kernel was given (e.g. the MoE op's side stream), to run without it.
  void drop_state() { state_.reset(); }

 private:
  std::vector<std::optional<ValueType>> types_of(const std::vector<Tensor>& inputs) const {
    std::vector<std::optional<ValueType>> types;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        types.emplace_back(std::nullopt);
        continue;
      }
      ValueType t{inputs[i].dtype(), inputs[i].shape()};
      const bool weight = i < def_->inputs().size() && def_->inputs()[i].kind == InputKind::kWeight;
      if (!weight && !t.shape.empty()) t.shape[0] = kTokens;
      types.emplace_back(std::move(t));
    }
    return types;
  }

  void expect_guards_intact(const Tensor& out) const {
    std::vector<unsigned char> before(kGuard), after(kGuard);
    const char* base = static_cast<const char*>(out.buffer()->data());
    MG_CUDA_CHECK(cudaMemcpy(before.data(), base, kGuard, cudaMemcpyDeviceToHost));
    MG_CUDA_CHECK(
        cudaMemcpy(after.data(), base + kGuard + out.nbytes(), kGuard, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(before[i], 0xff) << node_.op() << ": guard byte " << i << " before the output";
      ASSERT_EQ(after[i], 0xff) << node_.op() << ": guard byte " << i << " after the output";
    }
  }

  proto::Node node_;
  const OpDef* def_;
  DType dtype_;
  CompileOptions options_;
  std::unique_ptr<Stream> stream_;
  Communicator* comm_ = nullptr;
  std::vector<Tensor> placed_;
  std::unique_ptr<OpKernel> kernel_;
  std::unique_ptr<OpState> state_;
};

// The CUDA side of the op case table (tests/testing/op_cases.h): every case of `op` in every
// dtype of cuda_dtypes(), its inputs rounded through the dtype first (so the reference sees
// exactly what the kernel sees), against op_reference as the case's Match says. A case marked
// cpu_only is skipped and its reason printed.
inline void expect_cuda_cases_match_reference(std::string_view op) {
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const OpCase* c : op_cases_of(op)) {
      if (!c->cpu_only.empty()) {
        if (&d == &cuda_dtypes().front()) {
          std::cout << "[ CPU ONLY ] " << c->name << ": " << c->cpu_only << "\n";
        }
        continue;
      }
      SCOPED_TRACE(dtype_trace(d) + " " + c->name);
      std::vector<Tensor> inputs = make_inputs(*c);
      for (Tensor& t : inputs) t = round_through(t, d.dtype);
      DeviceOp device_op(c->node, inputs, d.dtype);
      const std::vector<Tensor> out = device_op.run(inputs);
      ASSERT_EQ(out.size(), 1u);
      const Tensor want = op_reference(c->node, inputs);
      ASSERT_EQ(out[0].shape(), want.shape());
      const double tolerance = d.tolerance * c->device_tolerance_factor;
      switch (c->match) {
        case Match::kClose:
          EXPECT_LT(normalized_error(span_of(out[0]), span_of(want)), tolerance);
          break;
        case Match::kExact: {
          const Tensor rounded = round_through(want, d.dtype);
          expect_same_values(span_of(out[0]), span_of(rounded));
          break;
        }
        case Match::kCloseAndGpuEqualsCpuKernel: {
          const Tensor cpu = round_through(run_cpu_op(c->node, inputs, c->cpu_threads)[0], d.dtype);
          expect_same_values(span_of(out[0]), span_of(cpu));
          EXPECT_LT(normalized_error(span_of(out[0]), span_of(want)), tolerance);
          break;
        }
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace mg::testing
