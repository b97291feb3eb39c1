// The CUDA attention kernel: the per-session KV cache in device memory (activation dtype,
// zero-filled like the CPU's; contiguous or paged as StateOptions say) and the adapter to
// launch_attention, which writes the call's K and V into the cache and attends (split-KV for
// decode-sized calls, writing the cache in the same launch: the workspace is planned for it, and
// the state holds its counters, see attention_cuda.h; the flash prefill kernel for longer calls
// unless MG_FLASH_PREFILL=0, after a kv_cache_write launch).
#include <cstdlib>

#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/attention/attention_cuda.h"
#include "ops/nn/cuda_kernels.h"

namespace mg {

namespace {

class AttentionCudaState final : public OpState {
 public:
  AttentionCudaState(Device device, DType dtype, int64_t rows, const AttentionDims& dims)
      : rows(rows),
        k(empty_tensor(device, dtype, {rows, dims.kv_heads, dims.head_dim})),
        v(empty_tensor(device, dtype, {rows, dims.kv_heads, dims.v_head_dim})),
        split_counters(
            empty_tensor(device, DType::kI32,
                         {cuda::split_kv_counter_count(dims, cuda::kSplitKvPagedMaxTokens)})) {
    // Built once per session, outside the hot path: zeroed so that a query never reads
    // uninitialised rows (positions skipped by a caller read as zeros, as on the CPU).
    // The session's stream is non-blocking, so wait here rather than rely on stream order.
    MG_CUDA_CHECK(cudaMemsetAsync(k.raw(), 0, k.nbytes(), nullptr));
    MG_CUDA_CHECK(cudaMemsetAsync(v.raw(), 0, v.nbytes(), nullptr));
    MG_CUDA_CHECK(cudaMemsetAsync(split_counters.raw(), 0, split_counters.nbytes(), nullptr));
    MG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

  const int64_t rows;  // max_seq_len, or kv_blocks * kv_block_size when paged
  Tensor k;            // [rows, KV, D]
  Tensor v;            // [rows, KV, Dv]
  // Split-KV arrival counters (zero between launches): here rather than in the workspace, which
  // other ops overwrite between two attention launches.
  Tensor split_counters;
};

class AttentionCudaKernel final : public OpKernel {
 public:
  AttentionCudaKernel(DType dtype, const AttentionDims& dims, int sm_count, bool flash_prefill)
      : dtype_(dtype), dims_(dims), sm_count_(sm_count), flash_prefill_(flash_prefill) {}

  // inputs: q [T, H*D], k [T, KV*D], v [T, KV*Dv], positions [T] I32, sinks [H] (optional).
  // outputs: out [T, H*Dv].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    auto* state = dynamic_cast<AttentionCudaState*>(ctx.state);
    MG_ASSERT(state != nullptr, "attention: run without the KV-cache state of create_state()");
    const bool has_sinks = inputs.size() > 4 && inputs[4].defined();
    MG_ASSERT(inputs[0].dtype() == dtype_ && inputs[1].dtype() == dtype_ &&
                  inputs[2].dtype() == dtype_ && outputs[0].dtype() == dtype_ &&
                  (!has_sinks || inputs[4].dtype() == dtype_),
              "attention: q {} k {} v {} out {}, kernel built for {}", inputs[0].str(),
              inputs[1].str(), inputs[2].str(), outputs[0].str(), dtype_name(dtype_));
    const int64_t tokens = inputs[0].dim(0);
    const auto* positions = static_cast<const int32_t*>(inputs[3].raw());
    cudaStream_t stream = cuda::native(ctx.stream);
    const KvBatch kv = ctx.kv != nullptr ? *ctx.kv : KvBatch{};
    const bool paged = kv.block_tables != nullptr;
    MG_ASSERT(!paged || kv.num_blocks * kv.block_size == state->rows,
              "attention: the batch's {} blocks of {} positions are not the state's {} rows",
              kv.num_blocks, kv.block_size, state->rows);
    const int64_t max_positions = paged ? kv.max_blocks_per_seq * kv.block_size : state->rows;

    cuda::AttentionArgs attend;
    attend.q = inputs[0].raw();
    attend.positions = positions;
    attend.k = inputs[1].raw();  // written into the cache by launch_attention
    attend.v = inputs[2].raw();
    attend.k_cache = state->k.raw();
    attend.v_cache = state->v.raw();
    attend.sinks = has_sinks ? inputs[4].raw() : nullptr;
    attend.out = outputs[0].raw();
    attend.tokens = tokens;
    attend.max_seq_len = max_positions;
    attend.kv = kv;
    attend.workspace = ctx.workspace;
    attend.workspace_bytes = ctx.workspace_bytes;
    attend.split_counters = static_cast<unsigned*>(state->split_counters.raw());
    attend.split_counter_count = state->split_counters.numel();
    attend.sm_count = sm_count_;
    attend.flash_prefill = flash_prefill_;

    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_attention<T>(dims_, attend, stream);
    });
  }

  // The split-KV partials of decode-sized calls and paged batches (up to
  // cuda::kSplitKvPagedMaxTokens rows).
  size_t workspace_bytes(int64_t max_tokens) const override {
    return cuda::split_kv_workspace_bound(dims_, dtype_size(dtype_), max_tokens, sm_count_);
  }

  std::unique_ptr<OpState> create_state(const StateOptions& options) const override {
    MG_CHECK(options.device.is_cuda(), "attention: the CUDA kernel cannot keep its KV cache on {}",
             options.device.str());
    return std::make_unique<AttentionCudaState>(options.device, dtype_, kv_cache_rows(options),
                                                dims_);
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  AttentionDims dims_;
  int sm_count_;
  bool flash_prefill_;  // MG_FLASH_PREFILL (attention_cuda.h)
};

}  // namespace

std::unique_ptr<OpKernel> make_attention_cuda_kernel(const KernelContext& ctx,
                                                     const AttentionDims& dims) {
  MG_CHECK(
      dims.head_dim <= cuda::kAttentionMaxHeadDim && dims.v_head_dim <= cuda::kAttentionMaxHeadDim,
      "attention: the CUDA kernel supports head_dim and v_head_dim up to {}, got {} and {}",
      cuda::kAttentionMaxHeadDim, dims.head_dim, dims.v_head_dim);
  int sm_count = 0;
  MG_CUDA_CHECK(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, ctx.options.device.index));
  return std::make_unique<AttentionCudaKernel>(
      activation_dtype_of(ctx.options), dims, sm_count,
      cuda::flash_prefill_requested_by(std::getenv("MG_FLASH_PREFILL")));
}

}  // namespace mg
