#include "ops/moe/experts/cuda_expert_common.h"

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/grouped_gemm_cuda.h"

namespace mg {

static_assert(static_cast<int>(cuda::MoEActKind::kSwigluOai) ==
              static_cast<int>(MoEActivation::kSwigluOai));
static_assert(static_cast<int>(cuda::MoEActKind::kGelu) == static_cast<int>(MoEActivation::kGelu));

std::string cuda_check_device(Device device) {
  return device.is_cuda() ? std::string() : "runs on CUDA GPUs only, not " + device.str();
}

std::string cuda_check_quant(const MoEQuantConfig& quant) {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
    if (quant == MoEQuantConfig::unquantized(d)) return {};
  }
  return "supports unquantized BF16, F16 or F32 weights and activations only, not " + quant.str();
}

std::string cuda_check_parallel(const ParallelConfig& parallel) {
  // The kernels take the expert map (pairs of experts on other ranks are skipped, their output
  // rows left out of the combine) and the rank's intermediate-size shard (the shape is the
  // local one): TP and EP over the ranks of one DP group need nothing more, the runner sums the
  // partial outputs (an all-reduce on the GPU). The DP dispatches gather tokens and counts on the
  // host in F32 (PrepareFinalizeAllGather / AllToAll), which runs on the CPU only.
  if (parallel.dp_size() == 1 && parallel.dispatch() == MoEDispatch::kAllGatherReduceScatter) {
    return {};
  }
  return "runs tensor and expert parallelism within one DP group only (dp 1, all-gather "
         "dispatch: the DP token exchanges run on the CPU only), not " +
         parallel.str();
}

std::string cuda_check_single_rank(const ParallelConfig& parallel) {
  return parallel.is_single_rank()
             ? std::string()
             : "runs one rank only (its TP/EP sharding on GPUs is not tested yet), not " +
                   parallel.str();
}

std::string cuda_check_grouped_shape(const ExpertsShape& shape) {
  if (shape.num_local_experts() > cuda::kMaxAlignLocalExperts) {
    return fmt::format("at most {} local experts, not {}", cuda::kMaxAlignLocalExperts,
                       shape.num_local_experts());
  }
  std::string why = cuda::grouped_gemm_check(shape.intermediate_size, shape.hidden_size);
  if (why.empty()) why = cuda::grouped_gemm_check(shape.hidden_size, shape.intermediate_size);
  return why;
}

cuda::MoEActParams cuda_act_params(const ActivationConfig& a) {
  return {static_cast<cuda::MoEActKind>(a.kind), a.swiglu_alpha, a.swiglu_limit};
}

CudaDeviceTraits cuda_device_traits(Device device) {
  int major = 0, minor = 0, sms = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index));
  return {major * 10 + minor, sms, cuda::grouped_gemm_sm90a_kernels()};
}

namespace {

// Host F32 canonical weights are converted and uploaded; weights already on the GPU in `dtype`
// (the MoE benchmark and random-weight models generate them there) are adopted as they are, and
// in another dtype converted there.
Tensor upload(const Tensor& canonical, DType dtype, Device device) {
  if (!canonical.defined()) return {};
  if (canonical.device() == device && canonical.dtype() == dtype) return canonical;
  Tensor out = empty_tensor(device, dtype, canonical.shape());
  if (canonical.device() == device) {
    convert_tensor(out, canonical, nullptr);
  } else {
    copy_tensor(out, cast_cpu(canonical, dtype));
  }
  return out;
}

}  // namespace

CudaExpertWeights::CudaExpertWeights(const CanonicalExpertWeights& c, const ExpertsShape& shape,
                                     Device device)
    : w13(upload(c.w13, shape.dtype, device)),
      w13_bias(upload(c.w13_bias, shape.dtype, device)),
      w2(upload(c.w2, shape.dtype, device)),
      w2_bias(upload(c.w2_bias, shape.dtype, device)) {
  const std::vector<int32_t>& g2l = shape.expert_map.global_to_local;
  Tensor host = Tensor::empty_cpu(DType::kI32, {static_cast<int64_t>(g2l.size())});
  std::copy(g2l.begin(), g2l.end(), host.data<int32_t>());
  expert_map = empty_tensor(device, DType::kI32, host.shape());
  copy_tensor(expert_map, host);
  identity_experts = identity_expert_count(shape.expert_map);
}

int identity_expert_count(const ExpertMap& map) {
  for (size_t i = 0; i < map.global_to_local.size(); ++i) {
    if (map.global_to_local[i] != static_cast<int32_t>(i)) return 0;
  }
  return static_cast<int>(map.num_global());
}

GroupedScratch::GroupedScratch(Workspace& ws, const ExpertsShape& shape, int64_t M) {
  const int64_t E = shape.num_local_experts(), P = M * shape.top_k;
  const int64_t es = dtype_size(shape.dtype);
  align.expert_counts = ws.take<int32_t>(E);
  align.expert_offsets = ws.take<int32_t>(E + 1);
  align.pair_to_row = ws.take<int32_t>(P);
  align.row_to_pair = ws.take<int32_t>(P);
  x_perm = ws.take<std::byte>(P * shape.hidden_size * es);
  h_perm = ws.take<std::byte>(P * shape.intermediate_size * es);
  y_perm = ws.take<std::byte>(P * shape.hidden_size * es);
}

void run_grouped_experts(const ExpertsShape& shape, const CudaExpertWeights& w, const void* x,
                         int64_t M, const int32_t* ids, const float* weights,
                         const GroupedScratch& sc, cuda::GroupedGemmKernel gemm1,
                         cuda::GroupedGemmKernel gemm2, void* out, Stream* stream) {
  if (M == 0) return;
  const cudaStream_t s = cuda::native(stream);
  const int64_t k = shape.top_k, P = M * k, H = shape.hidden_size, I = shape.intermediate_size;
  const int64_t E = shape.num_local_experts();
  cuda::launch_moe_align(ids, P, w.map(), shape.num_experts, E, sc.align, s);
  cuda::dispatch_float_dtype(shape.dtype, [&](auto t) {
    using T = decltype(t);
    cuda::launch_moe_gather<T>(x, M, k, H, sc.align, sc.x_perm, s);
    cuda::GroupedGemmArgs g1;
    g1.a = sc.x_perm;
    g1.b = w.w13.raw();
    g1.bias = w.b13();
    g1.c = sc.h_perm;
    g1.expert_offsets = sc.align.expert_offsets;
    g1.num_experts = E;
    g1.max_rows = P;
    g1.n = I;
    g1.k = H;
    g1.epilogue = cuda::GroupedEpilogue::kActivation;
    g1.act = cuda_act_params(shape.activation);
    cuda::launch_grouped_gemm<T>(g1, gemm1, s);
    cuda::GroupedGemmArgs g2 = g1;
    g2.a = sc.h_perm;
    g2.b = w.w2.raw();
    g2.bias = nullptr;  // added once per pair by the combine, weighted like the GEMM output
    g2.c = sc.y_perm;
    g2.n = H;
    g2.k = I;
    g2.epilogue = cuda::GroupedEpilogue::kBias;
    cuda::launch_grouped_gemm<T>(g2, gemm2, s);
    cuda::launch_moe_combine<T>(sc.y_perm, sc.align, ids, weights, w.map(), w.b2(), M, k, H, out,
                                s);
  });
}

RoutedPairs routed_pairs(const DispatchedLogits& t, const cuda::RouteParams& route,
                         const Tensor& score_bias, int32_t* scratch_ids, float* scratch_weights,
                         Stream* stream) {
  if (t.topk_ids != nullptr) return {t.topk_ids, t.topk_weights};
  cuda::launch_moe_route<float>(route, t.router_logits, t.num_tokens,
                                score_bias.defined() ? score_bias.data<float>() : nullptr,
                                scratch_ids, scratch_weights, cuda::native(stream));
  return {scratch_ids, scratch_weights};
}

}  // namespace mg
