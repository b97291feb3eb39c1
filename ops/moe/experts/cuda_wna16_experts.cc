#include "ops/moe/experts/cuda_wna16_experts.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "framework/core/int_quant.h"
#include "framework/core/thread_pool.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/cuda/wna16/wna16_decode_cuda.h"
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/cuda/wna16/wna16_pack_device_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/moe/router/router_cuda.h"

namespace mg {

namespace {

// Host tensors are copied up; tensors already on `device` are adopted.
Tensor upload(const Tensor& host, Device device) {
  if (!host.defined()) return {};
  if (host.device() == device) return host;
  Tensor out = empty_tensor(device, host.dtype(), host.shape());
  copy_tensor(out, host);
  return out;
}

template <typename V>
Tensor upload_vector(const std::vector<V>& v, DType dtype, Device device) {
  Tensor host = Tensor::empty_cpu(dtype, {static_cast<int64_t>(v.size())});
  std::memcpy(host.raw(), v.data(), v.size() * sizeof(V));
  return upload(host, device);
}

// One packed matrix on the device and its kernel view.
struct PackedMatrix {
  Tensor words, params;         // integer codes: I32 words, F32 pairs
  Tensor scale_bytes, globals;  // FP4: U8 scale bytes, F32 globals [E, parts] (NVFP4)
  cuda::Wna16Weights view;
};

// Words and pairs of `layout` on `device`, written there from `codes` and `params`.
PackedMatrix pack_on_device(const cuda::Wna16PackedHost& layout, cuda::Wna16PackSource codes,
                            cuda::Wna16ParamSource params, Device device) {
  codes.bits = layout.bits;
  codes.parts = params.parts = layout.parts;
  codes.part_rows = params.part_rows = layout.part_rows;
  codes.k_steps = layout.k_steps;
  params.groups = layout.groups;
  PackedMatrix p;
  p.words = empty_tensor(device, DType::kI32, {layout.word_count()});
  p.params = empty_tensor(device, DType::kF32, {layout.param_count()});
  cuda::wna16_pack_on_device(codes, params, reinterpret_cast<uint32_t*>(p.words.raw()),
                             layout.word_count(), p.params.data<float>(), layout.param_count() / 2,
                             nullptr);
  // The kernels run on the session's streams: the weights must be written before any of them.
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  p.view = cuda::wna16_weights_view(layout, reinterpret_cast<const uint32_t*>(p.words.raw()),
                                    p.params.data<float>());
  return p;
}

// pack_and_upload for canonical integer codes on the GPU: repacked there, no host copy.
PackedMatrix pack_canonical_on_device(const Wna16MatrixTensors& m, const char* name,
                                      int64_t experts, int64_t rows, int64_t cols, int64_t parts,
                                      Device device) {
  MG_CHECK(m.canonical != QuantElement::kFromDtype && quant_element_bits(m.canonical) == m.bits,
           "cuda_wna16: {} codes on {} must be canonical {}-bit integer codes", name,
           m.codes.device().str(), m.bits);
  const Shape want = int_codes_shape(m.canonical, {experts, rows, cols});
  MG_CHECK(m.codes.device() == device && m.codes.dtype() == int_codes_dtype(m.canonical) &&
               m.codes.shape() == want,
           "cuda_wna16: {} codes must be {} {} on {}, not {} {} on {}", name,
           dtype_name(int_codes_dtype(m.canonical)), shape_str(want), device.str(),
           dtype_name(m.codes.dtype()), shape_str(m.codes.shape()), m.codes.device().str());
  const Shape scale_shape = {experts, rows, cuda::wna16_groups(cols, m.group_size)};
  MG_CHECK(m.scales.defined() && m.scales.dtype() == DType::kF32 && m.scales.shape() == scale_shape,
           "cuda_wna16: {} scales must be F32 {}", name, shape_str(scale_shape));
  MG_CHECK(!m.zeros.defined() || (m.zeros.dtype() == DType::kF32 && m.zeros.shape() == scale_shape),
           "cuda_wna16: {} zero points of device codes must be F32 {}", name,
           shape_str(scale_shape));
  const Tensor scales = upload(m.scales, device), zeros = upload(m.zeros, device);
  cuda::Wna16PackedHost layout =
      cuda::wna16_layout(experts, rows, cols, m.bits, m.group_size, parts);
  {
    // The decode kernels' exact path needs every zero point to be an integer code: checked once
    // here on host copies of the scales (and zero points), as wna16_pack does.
    const Tensor host_scales = to_host_tensor(m.scales), host_zeros = to_host_tensor(m.zeros);
    layout.zeros = cuda::wna16_zero_kind(host_scales.data<float>(),
                                         host_zeros.defined() ? host_zeros.data<float>() : nullptr,
                                         nullptr, host_scales.numel(), m.bits);
  }
  cuda::Wna16PackSource c;
  c.codes = static_cast<const uint8_t*>(m.codes.raw());
  c.row_bytes = int_codes_row_bytes(m.canonical, cols);
  c.flip = quant_element_signed(m.canonical) ? (m.bits == 4 ? 0x8u : 0x80u) : 0u;
  c.experts = experts;
  c.rows = rows;
  c.cols = cols;
  cuda::Wna16ParamSource s;
  s.scales = scales.data<float>();
  s.zeros = zeros.defined() ? zeros.data<float>() : nullptr;
  s.default_zero = m.bits == 4 ? 8.0f : 128.0f;
  s.scale_groups = scale_shape.back();
  s.experts = experts;
  s.rows = rows;
  return pack_on_device(layout, c, s, device);
}

// Checks `m` against the contract for a [E, rows, cols] matrix, repacks it (parts 2: gated w13)
// and uploads it.
PackedMatrix pack_and_upload(const Wna16MatrixTensors& m, const char* name, int64_t experts,
                             int64_t rows, int64_t cols, int64_t parts, Device device) {
  const std::string why = cuda::wna16_pack_check(m.bits, rows, cols, m.group_size, parts);
  MG_CHECK(why.empty(), "cuda_wna16: {}: {}", name, why);
  if (m.codes.defined() && m.codes.device().is_cuda()) {
    return pack_canonical_on_device(m, name, experts, rows, cols, parts, device);
  }
  const Shape want = {experts, rows, cols};
  MG_CHECK(m.codes.defined() && m.codes.dtype() == DType::kU8 && m.codes.shape() == want,
           "cuda_wna16: {} codes must be U8 {}, not {} {}", name, shape_str(want),
           m.codes.defined() ? dtype_name(m.codes.dtype()) : "missing",
           m.codes.defined() ? shape_str(m.codes.shape()) : "");
  const Shape scale_shape = {experts, rows, cuda::wna16_groups(cols, m.group_size)};
  MG_CHECK(m.scales.defined() && m.scales.dtype() == DType::kF32 && m.scales.shape() == scale_shape,
           "cuda_wna16: {} scales must be F32 {}", name, shape_str(scale_shape));
  MG_CHECK(
      !m.zeros.defined() || ((m.zeros.dtype() == DType::kF32 || m.zeros.dtype() == DType::kU8) &&
                             m.zeros.shape() == scale_shape),
      "cuda_wna16: {} zero points must be F32 or U8 {}", name, shape_str(scale_shape));
  const Tensor codes = to_host_tensor(m.codes), scales = to_host_tensor(m.scales),
               zeros = to_host_tensor(m.zeros);
  cuda::Wna16HostMatrix h;
  h.codes = codes.data<uint8_t>();
  h.scales = scales.data<float>();
  if (zeros.defined()) {
    if (zeros.dtype() == DType::kF32) {
      h.zeros_f32 = zeros.data<float>();
    } else {
      h.zeros_u8 = zeros.data<uint8_t>();
    }
  }
  h.experts = experts;
  h.rows = rows;
  h.cols = cols;
  h.bits = m.bits;
  h.group_size = m.group_size;
  const cuda::Wna16PackedHost packed = cuda::wna16_pack(h, parts);
  PackedMatrix p;
  p.words = upload_vector(packed.words, DType::kI32, device);
  p.params = upload_vector(packed.params, DType::kF32, device);
  p.view = cuda::wna16_weights_view(packed, reinterpret_cast<const uint32_t*>(p.words.raw()),
                                    p.params.data<float>());
  return p;
}

// The kernels' FP4 code kind of an FP4 scheme.
cuda::Wna16Codes fp4_codes_of(QuantScheme scheme) {
  return scheme == QuantScheme::kMxfp4 ? cuda::Wna16Codes::kMxfp4 : cuda::Wna16Codes::kNvfp4;
}

// The NVFP4 global scale of every (expert, part) of a matrix, F32 [experts * parts] on the host,
// from q.global_scale [experts, S] (S = parts, or 1: one for both parts; undefined: 1).
std::vector<float> fp4_globals(const WeightQuantization& q, const char* name, int64_t experts,
                               int64_t parts) {
  std::vector<float> out(static_cast<size_t>(experts * parts), 1.0f);
  if (!q.global_scale.defined()) return out;
  const Tensor g = to_f32_cpu(to_host_tensor(q.global_scale));
  const int64_t S = g.numel() / std::max<int64_t>(1, experts);
  MG_CHECK(g.numel() == experts * S && (S == 1 || S == parts),
           "cuda_fp4: {} global scales {} for {} experts of {} part(s): one per expert or per part "
           "expected",
           name, shape_str(g.shape()), experts, parts);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t part = 0; part < parts; ++part) {
      out[static_cast<size_t>(e * parts + part)] = g.data<float>()[e * S + (S == 1 ? 0 : part)];
    }
  }
  return out;
}

// Repacks FP4 codes `codes` U8 [E, rows, cols / 2] with F32 scales per `q.group` (parts 2: gated
// w13) into the kernels' layout of `codes` (scale bytes; NVFP4's globals) and uploads them.
PackedMatrix pack_and_upload_e2m1(cuda::Wna16Codes kind, const Tensor& codes_in,
                                  const WeightQuantization& q, const char* name, int64_t experts,
                                  int64_t rows, int64_t cols, int64_t parts, Device device) {
  const int64_t group = q.group.cols_in(cols);
  const std::string why = cuda::wna16_pack_e2m1_check(kind, rows, cols, group, parts);
  MG_CHECK(why.empty(), "cuda_fp4: {}: {}", name, why);
  const Shape want = {experts, rows, cols / 2};
  MG_CHECK(codes_in.defined() && codes_in.dtype() == DType::kU8 && codes_in.shape() == want,
           "cuda_fp4: {} codes must be packed U8 {}, not {} {}", name, shape_str(want),
           codes_in.defined() ? dtype_name(codes_in.dtype()) : "missing",
           codes_in.defined() ? shape_str(codes_in.shape()) : "");
  const Shape scale_shape = {experts, rows, (cols + group - 1) / group};
  MG_CHECK(q.scale.defined() && q.scale.dtype() == DType::kF32 && q.scale.shape() == scale_shape,
           "cuda_fp4: {} scales must be F32 {} (decoded when loaded), not {} {}", name,
           shape_str(scale_shape), q.scale.defined() ? dtype_name(q.scale.dtype()) : "missing",
           q.scale.defined() ? shape_str(q.scale.shape()) : "");
  const std::vector<float> globals = fp4_globals(q, name, experts, parts);
  if (codes_in.device().is_cuda()) {
    // Codes made or loaded on the GPU are repacked there; the scales become bytes there.
    MG_CHECK(codes_in.device() == device, "cuda_fp4: {} codes on {}, the layer on {}", name,
             codes_in.device().str(), device.str());
    cuda::Wna16PackedHost layout = cuda::wna16_layout_e2m1(kind, experts, rows, cols, parts);
    PackedMatrix p;
    if (kind == cuda::Wna16Codes::kNvfp4) {
      p.globals = upload_vector(globals, DType::kF32, device);
    }
    cuda::Wna16PackSource c;
    c.codes = static_cast<const uint8_t*>(codes_in.raw());
    c.row_bytes = cols / 2;
    c.bits = 4;
    c.experts = experts;
    c.rows = rows;
    c.cols = cols;
    c.parts = parts;
    c.part_rows = layout.part_rows;
    c.k_steps = layout.k_steps;
    p.words = empty_tensor(device, DType::kI32, {layout.word_count()});
    cuda::wna16_pack_on_device(c, cuda::Wna16ParamSource{},
                               reinterpret_cast<uint32_t*>(p.words.raw()), layout.word_count(),
                               nullptr, 0, nullptr);
    {
      // The F32 scales live only while their bytes are written.
      const Tensor scales = upload(q.scale, device);
      cuda::Wna16ScaleByteSource s;
      s.scales = scales.data<float>();
      s.globals = p.globals.defined() ? p.globals.data<float>() : nullptr;
      s.codes = kind;
      s.scale_groups = scale_shape.back();
      s.group_size = group;
      s.experts = experts;
      s.rows = rows;
      s.cols = cols;
      s.parts = parts;
      s.part_rows = layout.part_rows;
      s.k_steps = layout.k_steps;
      const int64_t count = layout.scale_byte_count();
      p.scale_bytes = empty_tensor(device, DType::kU8, {count});
      // {index of the first scale with no byte, largest byte}, as the host packer finds them.
      struct Found {
        unsigned long long first_bad;
        unsigned int largest, pad;
      };
      Tensor found = empty_tensor(device, DType::kU8, {sizeof(Found)});
      const auto none = static_cast<unsigned long long>(count);
      Found f{none, 0u, 0u};
      MG_CUDA_CHECK(cudaMemcpy(found.raw(), &f, sizeof(f), cudaMemcpyHostToDevice));
      auto* at = static_cast<Found*>(found.raw());
      cuda::wna16_pack_scale_bytes_on_device(s, static_cast<uint8_t*>(p.scale_bytes.raw()), count,
                                             &at->first_bad, &at->largest, nullptr);
      // The kernels run on the session's streams: the weights must be written before any of them.
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      MG_CUDA_CHECK(cudaMemcpy(&f, found.raw(), sizeof(f), cudaMemcpyDeviceToHost));
      const unsigned long long bad = f.first_bad;
      MG_CHECK(bad == none,
               "cuda_fp4: {} has a scale with no {} code (scale byte {} of the layout): {}", name,
               kind == cuda::Wna16Codes::kMxfp4 ? "E8M0 (power of two)" : "E4M3 x global", bad,
               kind == cuda::Wna16Codes::kMxfp4
                   ? "MXFP4 scales must be powers of two"
                   : "NVFP4 scales must be E4M3 values times their global scale");
      if (kind == cuda::Wna16Codes::kMxfp4) {
        MG_CHECK(f.largest <= cuda::wna16_exact::kE8m0MaxFoldedCode,
                 "cuda_fp4: {} has an MXFP4 scale of 2^{}, above 2^{}, the largest the kernels "
                 "take",
                 name, static_cast<int>(f.largest) - 127,
                 cuda::wna16_exact::kE8m0MaxFoldedExponent);
        layout.e8m0_shift = cuda::wna16_exact::e8m0_shift_of(f.largest);
      }
    }
    p.view = cuda::wna16_weights_view(layout, reinterpret_cast<const uint32_t*>(p.words.raw()),
                                      nullptr, static_cast<const uint8_t*>(p.scale_bytes.raw()),
                                      p.globals.defined() ? p.globals.data<float>() : nullptr);
    return p;
  }
  const Tensor codes = to_host_tensor(codes_in), scales = to_host_tensor(q.scale);
  const cuda::Wna16PackedHost packed =
      cuda::wna16_pack_e2m1(kind, static_cast<const uint8_t*>(codes.raw()), scales.data<float>(),
                            globals.data(), experts, rows, cols, group, parts);
  PackedMatrix p;
  p.words = upload_vector(packed.words, DType::kI32, device);
  p.scale_bytes = upload_vector(packed.scale_bytes, DType::kU8, device);
  if (!packed.globals.empty()) p.globals = upload_vector(packed.globals, DType::kF32, device);
  p.view = cuda::wna16_weights_view(packed, reinterpret_cast<const uint32_t*>(p.words.raw()),
                                    nullptr, static_cast<const uint8_t*>(p.scale_bytes.raw()),
                                    p.globals.defined() ? p.globals.data<float>() : nullptr);
  return p;
}

// The request that forces the decode kernels (wna16_decode_cuda.h) up to
// kWna16DecodeMaxTokens tokens (above, the automatic GEMM tile).
constexpr std::string_view kDecodeRequest = "wna16_decode";

// The request that forces the large-M path (dequantize once + the BF16 grouped GEMMs:
// wna16_experts_cuda.h, section 4) at any M, below kWna16DequantMinRowsPerExpert too.
constexpr std::string_view kDequantRequest = "wna16_dequant";

// "" or the name of a GEMM tile request ("", "auto", "wna16_decode", "wna16_dequant",
// "wna16_mma16", "wna16_mma32", "wna16_mma64"); nullopt when no tile is forced.
std::optional<cuda::Wna16GemmKernel> parse_request(std::string_view kernel) {
  if (kernel.empty() || kernel == "auto" || kernel == kDecodeRequest || kernel == kDequantRequest) {
    return std::nullopt;
  }
  const std::optional<cuda::Wna16GemmKernel> k = cuda::parse_wna16_gemm_kernel(kernel);
  MG_CHECK(k.has_value(),
           "cuda_wna16 has no kernel '{}' (auto, wna16_decode, wna16_dequant, wna16_mma16, "
           "wna16_mma32, wna16_mma64, wna16_wgmma)",
           kernel);
  return k;
}

class CudaWna16Experts final : public ExpertsMonolithic {
 public:
  CudaWna16Experts(const ExpertsBackend& backend, const ExpertsBuild& b, PackedMatrix w13,
                   PackedMatrix w2)
      : ExpertsMonolithic(backend),
        shape_(b.shape),
        request_(parse_request(b.kernel)),
        decode_forced_(b.kernel == kDecodeRequest),
        dequant_forced_(b.kernel == kDequantRequest),
        problem_(CudaMoEProblem::of(b.shape)),
        device_(cuda_device_traits(b.device)),
        route_(route_params(b.config.routing())),
        w13_(std::move(w13)),
        w2_(std::move(w2)) {
    // MG_WNA16_WGMMA=0 keeps the rule off wna16_wgmma (A/B timing; a forced request still runs it).
    const char* wgmma_env = std::getenv("MG_WNA16_WGMMA");
    MG_CHECK(wgmma_env == nullptr || std::string_view(wgmma_env) == "0" ||
                 std::string_view(wgmma_env) == "1",
             "MG_WNA16_WGMMA: expected 0 or 1, got '{}'", wgmma_env == nullptr ? "" : wgmma_env);
    const bool wgmma_allowed = wgmma_env == nullptr || std::string_view(wgmma_env) == "1";
    wgmma_available_ = wgmma_allowed &&
                       (shape_.dtype == DType::kBF16 ? cuda::wna16_wgmma_available<__nv_bfloat16>()
                                                     : cuda::wna16_wgmma_available<__half>());
    b13_ = upload(b.quantized.w13_bias, b.device);
    b2_ = upload(b.quantized.w2_bias, b.device);
    MG_CHECK(!b13_.defined() || b13_.dtype() == DType::kF32, "cuda_wna16: w13 bias must be F32");
    MG_CHECK(!b2_.defined() || b2_.dtype() == DType::kF32, "cuda_wna16: w2 bias must be F32");
    const std::vector<int32_t>& g2l = shape_.expert_map.global_to_local;
    expert_map_ = upload_vector(g2l, DType::kI32, b.device);
    identity_experts_ = identity_expert_count(shape_.expert_map);
    if (b.config.routing().has_score_correction_bias) {
      bias_ = upload(to_f32_cpu(b.score_correction_bias), b.device);
    }
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows, takes_dequant_path(max_rows), gathers(max_rows));
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    const int64_t E = shape_.num_local_experts();
    Scratch sc(ws, shape_, M, takes_dequant_path(M), gathers(M));
    if (M == 0) return;
    const int64_t P = M * k;
    const cuda::Wna16GemmKernel kernel = gemm_kernel(M);
    const cudaStream_t s = cuda::native(ctx.stream);
    cuda::launch_moe_route<float>(route_, t.router_logits, M,
                                  bias_.defined() ? bias_.data<float>() : nullptr, sc.ids,
                                  sc.weights, s);
    if (takes_decode_path(M)) {
      // route -> up -> down (the weighted sum over top-k written straight to the output).
      cuda::Wna16DecodeArgs d;
      d.x = t.hidden;
      d.topk_ids = sc.ids;
      d.topk_weights = sc.weights;
      d.expert_map = expert_map_.data<int32_t>();
      d.identity_experts = identity_experts_;
      d.w13 = w13_.view;
      d.b13 = b13_.defined() ? b13_.data<float>() : nullptr;
      d.w2 = w2_.view;
      d.b2 = b2_.defined() ? b2_.data<float>() : nullptr;
      d.act_scratch = sc.h;
      d.out = t.expert_output;
      d.num_tokens = M;
      d.top_k = k;
      d.hidden = H;
      d.inter = shape_.intermediate_size;
      d.act = cuda_act_params(shape_.activation);
      if (shape_.dtype == DType::kBF16) {
        cuda::launch_wna16_decode_experts<__nv_bfloat16>(d, cuda::Wna16DecodeTiles{}, s);
      } else {
        cuda::launch_wna16_decode_experts<__half>(d, cuda::Wna16DecodeTiles{}, s);
      }
      return;
    }
    cuda::launch_moe_align(sc.ids, P, expert_map_.data<int32_t>(), shape_.num_experts, E, sc.align,
                           s);
    if (takes_dequant_path(M)) {
      run_dequant_path(t, sc, s);
      return;
    }
    cuda::Wna16ExpertMlpArgs a;
    a.x = t.hidden;
    a.row_to_pair = sc.align.row_to_pair;
    if (sc.x_perm != nullptr) {  // the kernel reads permuted rows: gather them first
      if (shape_.dtype == DType::kBF16) {
        cuda::launch_moe_gather<__nv_bfloat16>(t.hidden, M, k, H, sc.align, sc.x_perm, s);
      } else {
        cuda::launch_moe_gather<__half>(t.hidden, M, k, H, sc.align, sc.x_perm, s);
      }
      a.x = sc.x_perm;
      a.row_to_pair = nullptr;
    }
    a.top_k = k;
    a.expert_offsets = sc.align.expert_offsets;
    a.num_experts = E;
    a.max_rows = P;
    a.hidden = H;
    a.inter = shape_.intermediate_size;
    a.w13 = w13_.view;
    a.b13 = b13_.defined() ? b13_.data<float>() : nullptr;
    a.w2 = w2_.view;
    a.b2 = b2_.defined() ? b2_.data<float>() : nullptr;
    a.act = cuda_act_params(shape_.activation);
    a.h = sc.h;
    a.out = sc.y_perm;
    // b2 is already in y_perm (added per row by GEMM2).
    if (shape_.dtype == DType::kBF16) {
      cuda::launch_wna16_expert_mlp<__nv_bfloat16>(a, kernel, s);
      cuda::launch_moe_combine<__nv_bfloat16>(sc.y_perm, sc.align, sc.ids, sc.weights,
                                              expert_map_.data<int32_t>(), nullptr, M, k, H,
                                              t.expert_output, s);
    } else {
      MG_ASSERT(shape_.dtype == DType::kF16, "cuda_wna16 built for activation dtype {}",
                dtype_name(shape_.dtype));
      cuda::launch_wna16_expert_mlp<__half>(a, kernel, s);
      cuda::launch_moe_combine<__half>(sc.y_perm, sc.align, sc.ids, sc.weights,
                                       expert_map_.data<int32_t>(), nullptr, M, k, H,
                                       t.expert_output, s);
    }
  }

 private:
  // The grouped GEMM's kernel at M tokens (when neither the decode nor the large-M path runs):
  // the request, else wna16_wgmma where it takes the layer (wna16_wgmma_chosen), else the mma
  // tile by rows an expert.
  cuda::Wna16GemmKernel gemm_kernel(int64_t M) const {
    if (request_.has_value()) return *request_;
    if (wgmma_chosen(M)) return cuda::Wna16GemmKernel::kWgmma;
    return cuda::choose_wna16_gemm_kernel(M * shape_.top_k, shape_.num_local_experts(),
                                          w13_.view.codes);
  }

  bool wgmma_chosen(int64_t M) const {
    return cuda::wna16_wgmma_chosen(M * shape_.top_k, shape_.num_local_experts(), w13_.view,
                                    shape_.hidden_size, w2_.view, shape_.intermediate_size,
                                    wgmma_available_);
  }

  // Whether a call of M tokens gathers x into permuted rows for its GEMMs.
  bool gathers(int64_t M) const {
    return !takes_decode_path(M) && !takes_dequant_path(M) &&
           cuda::wna16_gemm_reads_permuted(gemm_kernel(M));
  }

  // The large-M path from kWna16DequantMinRowsPerExpert rows an expert (at any M when
  // `wna16_dequant` is forced); never when a GEMM tile or the decode path is forced. Every feature
  // of these experts (biases, every activation, BF16 and F16, INT4/INT8/MXFP4/NVFP4 codes) runs on
  // it.
  bool takes_dequant_path(int64_t M) const {
    if (request_.has_value() || decode_forced_) return false;
    return dequant_forced_ || cuda::wna16_dequant_chosen(M, shape_.top_k, shape_.num_experts);
  }

  // The decode kernels at M <= wna16_decode_threshold tokens (or up to kWna16DecodeMaxTokens
  // when `wna16_decode` is forced) and at most kWna16DecodeMaxPairs pairs; never when a GEMM tile
  // is forced.
  bool takes_decode_path(int64_t M) const {
    if (request_.has_value() || dequant_forced_) return false;
    if (!decode_forced_ && M * shape_.top_k > cuda::kWna16DecodeMaxPairs) return false;
    return M <= (decode_forced_ ? cuda::kWna16DecodeMaxTokens
                                : cuda::wna16_decode_threshold(w13_.view, w2_.view));
  }

  // Routed ids/weights, the alignment, the intermediate (also the decode path's act, the same
  // [M * k, I] T) and the permuted outputs; the sizing pass and a call walk the same code.
  struct Scratch {
    int32_t* ids;
    float* weights;
    cuda::MoEAlignment align;
    void* h;
    void* y_perm;
    void* dequant = nullptr;  // the large-M path's (wna16_dequant_mlp_scratch_bytes), when taken
    void* x_perm = nullptr;   // [M * k, H] T, when the GEMMs read permuted rows

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M, bool dequant_path, bool gather) {
      const int64_t k = shape.top_k, P = M * k, E = shape.num_local_experts();
      const size_t es = dtype_size(shape.dtype);
      ids = ws.take<int32_t>(P);
      weights = ws.take<float>(P);
      align.expert_counts = ws.take<int32_t>(E);
      align.expert_offsets = ws.take<int32_t>(E + 1);
      align.pair_to_row = ws.take<int32_t>(P);
      align.row_to_pair = ws.take<int32_t>(P);
      h = ws.take<std::byte>(static_cast<int64_t>(
          cuda::wna16_expert_mlp_scratch_bytes(P, shape.intermediate_size, es)));
      y_perm = ws.take<std::byte>(P * shape.hidden_size * static_cast<int64_t>(es));
      if (gather) x_perm = ws.take<std::byte>(P * shape.hidden_size * static_cast<int64_t>(es));
      if (dequant_path) {
        dequant = ws.take<std::byte>(static_cast<int64_t>(
            cuda::wna16_dequant_mlp_scratch_bytes(P, E, shape.hidden_size, shape.intermediate_size,
                                                  is_gated(shape.activation.kind), es)));
      }
    }
  };

  // align -> (gather, then per chunk of experts: dequantize w13 and w2 -> BF16/F16 grouped GEMM1
  // + act -> grouped GEMM2 + b2) -> combine, the grouped GEMMs chosen as cuda_moe chooses them
  // (ops/moe/heuristics/unquantized_kernel_choice.h) for these M tokens.
  void run_dequant_path(const DispatchedLogits& t, const Scratch& sc, cudaStream_t s) const {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    cuda::Wna16DequantMlpArgs a;
    a.x = t.hidden;
    a.tokens = M;
    a.top_k = k;
    a.align = sc.align;
    a.num_experts = shape_.num_local_experts();
    a.hidden = H;
    a.inter = shape_.intermediate_size;
    a.w13 = w13_.view;
    a.b13 = b13_.defined() ? b13_.data<float>() : nullptr;
    a.w2 = w2_.view;
    a.b2 = b2_.defined() ? b2_.data<float>() : nullptr;
    a.act = cuda_act_params(shape_.activation);
    a.gemm1 = choose_grouped_gemm_kernel(grouped_gemm1(problem_, M), device_, nullptr);
    a.gemm2 = choose_grouped_gemm_kernel(grouped_gemm2(problem_, M), device_, nullptr);
    a.scratch = sc.dequant;
    a.h = sc.h;
    a.out = sc.y_perm;
    // b2 is already in y_perm (added per row by GEMM2), as on the mma path.
    if (shape_.dtype == DType::kBF16) {
      cuda::launch_wna16_dequant_expert_mlp<__nv_bfloat16>(a, s);
      cuda::launch_moe_combine<__nv_bfloat16>(sc.y_perm, sc.align, sc.ids, sc.weights,
                                              expert_map_.data<int32_t>(), nullptr, M, k, H,
                                              t.expert_output, s);
    } else {
      MG_ASSERT(shape_.dtype == DType::kF16, "cuda_wna16 built for activation dtype {}",
                dtype_name(shape_.dtype));
      cuda::launch_wna16_dequant_expert_mlp<__half>(a, s);
      cuda::launch_moe_combine<__half>(sc.y_perm, sc.align, sc.ids, sc.weights,
                                       expert_map_.data<int32_t>(), nullptr, M, k, H,
                                       t.expert_output, s);
    }
  }

  ExpertsShape shape_;
  std::optional<cuda::Wna16GemmKernel> request_;
  bool decode_forced_ = false;
  bool dequant_forced_ = false;
  CudaMoEProblem problem_;  // what the BF16 grouped GEMMs' kernel choice reads (large-M path)
  CudaDeviceTraits device_;
  cuda::RouteParams route_;
  PackedMatrix w13_, w2_;
  Tensor b13_, b2_;
  Tensor expert_map_;
  bool wgmma_available_ = false;  // the sm_90a kernels are loaded (wna16_wgmma_available)
  int identity_experts_ = 0;  // the decode kernels' LocalExperts: E when the map is the identity
  Tensor bias_;               // [E] F32 on the device, or undefined
};

int bits_of(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kInt4WeightOnly:
      return 4;
    case QuantScheme::kInt8WeightOnly:
      return 8;
    case QuantScheme::kUnquantized:
    case QuantScheme::kFp8PerTensor:
    case QuantScheme::kFp8Block:
    case QuantScheme::kFp8PerChannel:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
      break;
  }
  return 0;
}

// One matrix of build.quantized in the kernels' input contract. The WNA16 oracle module hands the
// canonical codes of framework/core/int_quant.h (signed kInt4 / kInt8 become unsigned with the
// implicit zero 8 / 128; kUInt4 / kUInt8 keep theirs, or the midpoint when absent, as
// dequantize_int_cpu reads them); codes of no integer element are taken as already unpacked U8
// (the kernel tests' layers).
Wna16MatrixTensors contract_of(const Tensor& codes, const WeightQuantization& q, int bits,
                               const char* what) {
  Wna16MatrixTensors m;
  m.scales = q.scale;
  m.bits = bits;
  m.group_size = q.group.cols;
  if (q.element == QuantElement::kFromDtype) {
    m.codes = codes;
    return m;
  }
  MG_CHECK(q.is_integer() && quant_element_bits(q.element) == bits,
           "cuda_wna16: {} holds {} codes, the scheme {}-bit ones", what,
           quant_element_name(q.element), bits);
  // Act-order weights the oracle module could not make contiguous are refused by the weights
  // check (CudaWna16Backend::check_weights) before a build; a forced request fails there too.
  MG_CHECK(!q.g_idx.defined(), "cuda_wna16: {} has act-order groups (g_idx) it cannot take", what);
  MG_CHECK(q.logical_shape.size() == 3, "cuda_wna16: {} of logical shape rank {}", what,
           q.logical_shape.size());
  m.zeros = q.zero_point;  // F32 in code units, or undefined: the midpoint, the kernels' default
  if (codes.device().is_cuda()) {
    // Repacked on the GPU from the canonical codes (pack_canonical_on_device).
    m.codes = codes;
    m.canonical = q.element;
    return m;
  }
  const int64_t rows = q.logical_shape[0] * q.logical_shape[1], K = q.logical_shape[2];
  const int64_t row_bytes = int_codes_row_bytes(q.element, K);
  const int32_t offset = quant_element_signed(q.element) ? (1 << (bits - 1)) : 0;
  m.codes = Tensor::empty_cpu(DType::kU8, q.logical_shape);
  const uint8_t* src = static_cast<const uint8_t*>(codes.raw());
  uint8_t* dst = static_cast<uint8_t*>(m.codes.raw());
  // On the host's threads: a Qwen3-30B-A3B layer has 600 M codes.
  const auto unpack_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t k = 0; k < K; ++k) {
        dst[r * K + k] =
            static_cast<uint8_t>(int_code_at(src + r * row_bytes, q.element, k) + offset);
      }
    }
  };
  const int64_t threads =
      std::min<int64_t>({static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
                         max_threads(), std::max<int64_t>(1, rows * K / (int64_t{1} << 22))});
  if (threads <= 1) {
    unpack_rows(0, rows);
  } else {
    ThreadPool pool(static_cast<int>(threads));
    pool.parallel_for(rows, unpack_rows, 64);
  }
  return m;
}

class CudaWna16Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_wna16"; }
  bool takes_device_codes() const override { return true; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cuda_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (bits_of(quant.scheme()) == 0) {
      return fmt::format("takes INT4 or INT8 weight-only schemes, not {}",
                         quant_scheme_name(quant.scheme()));
    }
    if (quant.activation_key().quantized()) {
      return "runs weight-only (16-bit activations), not activations " +
             quant.activation_key().str();
    }
    const GroupShape g = quant.weight_key().group();
    if (g.rows != 1) {
      return fmt::format("weight scales per output channel and group of columns, not {}", g.str());
    }
    if (g.cols != -1 && g.cols % 32 != 0) {
      return fmt::format(
          "weight scale groups of {} columns: the kernels take multiples of 32 or channel-wise",
          g.cols);
    }
    return {};
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_routing(const RoutingConfig& routing) const override {
    if (routing.weight_on_input()) return "Llama-4's weight-on-input routing is not supported";
    return check_cuda_routing(routing);
  }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return cuda_check_parallel(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
      return fmt::format("takes BF16 or F16 activations, not {}", dtype_name(shape.dtype));
    }
    if (shape.num_local_experts() > cuda::kMaxAlignLocalExperts) {
      return fmt::format("at most {} local experts, not {}", cuda::kMaxAlignLocalExperts,
                         shape.num_local_experts());
    }
    return cuda::wna16_expert_mlp_check(shape.hidden_size, shape.intermediate_size);
  }
  // The kernels read each row's scale groups in order, whole and a multiple of 32 columns wide
  // (or one per row), over K = H (w13) and the rank's I (w2).
  std::string check_weights(const ExpertWeightFacts& w, const ExpertsShape& shape) const override {
    if (w.w13.act_order) {
      return "w13 has act-order groups (GPTQ desc_act: a g_idx over the hidden size, which the "
             "conversion cannot fold away); the kernels read contiguous scale groups";
    }
    if (w.w2.act_order) {
      return "w2 has act-order groups (g_idx) of unequal size, which the conversion cannot make "
             "contiguous; the kernels read contiguous scale groups";
    }
    const int64_t parts = is_gated(shape.activation.kind) ? 2 : 1;
    std::string why = cuda::wna16_pack_check(w.w13.bits, shape.w13_rows(), shape.hidden_size,
                                             w.w13.group_cols, parts);
    if (!why.empty()) return "w13: " + why;
    why = cuda::wna16_pack_check(w.w2.bits, shape.hidden_size, shape.intermediate_size,
                                 w.w2.group_cols, 1);
    if (!why.empty()) return "w2: " + why;
    return {};
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape&, Device) const override {
    try {
      parse_request(kernel);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    const int bits = bits_of(build.quant.scheme());
    MG_CHECK(bits != 0, "cuda_wna16: {}", check_quant(build.quant));
    return make_cuda_wna16_experts(
        build, contract_of(build.quantized.w13, build.quantized.w13_quant, bits, "w13"),
        contract_of(build.quantized.w2, build.quantized.w2_quant, bits, "w2"));
  }
};

// cuda_wna16's kernels with the E2M1 dequantization policy; every check but the quant one is
// cuda_wna16's.
class CudaFp4Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_fp4"; }
  bool takes_device_codes() const override { return true; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cuda_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_fp4_scheme(quant.scheme())) {
      return fmt::format("takes FP4 weights (MXFP4, NVFP4), not {}",
                         quant_scheme_name(quant.scheme()));
    }
    if (quant.activation_key().quantized()) {
      return "runs weight-only (16-bit activations), not activations " +
             quant.activation_key().str();
    }
    const GroupShape g = quant.weight_key().group();
    const bool mx = quant.scheme() == QuantScheme::kMxfp4;
    const int64_t unit = mx ? 32 : 16;
    if (g.rows != 1 || g.cols <= 0 || g.cols % unit != 0) {
      return fmt::format(
          "FP4 scales per row and group of a multiple of {} columns (the kernels keep {} scale "
          "byte "
          "per {} columns), not {}",
          unit, mx ? "an E8M0" : "an E4M3", unit, g.str());
    }
    return {};
  }
  std::string check_activation(const ActivationConfig& a) const override {
    return cuda_wna16_backend().check_activation(a);
  }
  std::string check_routing(const RoutingConfig& routing) const override {
    return cuda_wna16_backend().check_routing(routing);
  }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return cuda_wna16_backend().check_parallel(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    return cuda_wna16_backend().check_shape(shape);
  }
  // The scales are kept as one byte each (E8M0 / E4M3 x global): values with no byte would be
  // changed, so such weights go to the next backend (cuda_dequant keeps F32 scales).
  std::string check_weights(const ExpertWeightFacts& w, const ExpertsShape&) const override {
    for (const auto& [name, m] : {std::pair{"w13", &w.w13}, std::pair{"w2", &w.w2}}) {
      if (!m->scales_have_bytes) {
        return fmt::format(
            "{} has scales with no one-byte code (MXFP4: powers of two; NVFP4: E4M3 values times "
            "the global scale), which its scale-byte layout keeps",
            name);
      }
      if (m->largest_e8m0_code > static_cast<int>(cuda::wna16_exact::kE8m0MaxFoldedCode)) {
        return fmt::format(
            "{} has an MXFP4 scale of 2^{}, above 2^{}, the largest its kernels take", name,
            m->largest_e8m0_code - 127, cuda::wna16_exact::kE8m0MaxFoldedExponent);
      }
    }
    return {};
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    return cuda_wna16_backend().check_kernel(kernel, shape, device);
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return make_cuda_fp4_experts(build);
  }
};

}  // namespace

const ExpertsBackend& cuda_fp4_backend() {
  static const CudaFp4Backend backend;
  return backend;
}

std::unique_ptr<Experts> make_cuda_fp4_experts(const ExpertsBuild& build) {
  const ExpertsShape& shape = build.shape;
  std::string why = cuda_fp4_backend().check_quant(build.quant);
  if (why.empty()) why = cuda_fp4_backend().check_shape(shape);
  MG_CHECK(why.empty(), "cuda_fp4: {}", why);
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t parts = is_gated(shape.activation.kind) ? 2 : 1;
  const QuantizedExpertWeights& q = build.quantized;
  const cuda::Wna16Codes kind = fp4_codes_of(build.quant.scheme());
  PackedMatrix p13 = pack_and_upload_e2m1(kind, q.w13, q.w13_quant, "w13", E, shape.w13_rows(), H,
                                          parts, build.device);
  PackedMatrix p2 = pack_and_upload_e2m1(kind, q.w2, q.w2_quant, "w2", E, H,
                                         shape.intermediate_size, 1, build.device);
  return std::make_unique<CudaWna16Experts>(cuda_fp4_backend(), build, std::move(p13),
                                            std::move(p2));
}

double cuda_fp4_expert_bytes(const ExpertsShape& shape, QuantScheme scheme) {
  MG_CHECK(is_fp4_scheme(scheme), "cuda_fp4: bytes of {} experts", quant_scheme_name(scheme));
  const int64_t H = shape.hidden_size, I = shape.intermediate_size;
  const cuda::Wna16Codes kind = fp4_codes_of(scheme);
  return cuda::wna16_layout_e2m1(kind, 1, shape.w13_rows(), H,
                                 is_gated(shape.activation.kind) ? 2 : 1)
             .bytes_per_expert() +
         cuda::wna16_layout_e2m1(kind, 1, H, I, 1).bytes_per_expert();
}

const ExpertsBackend& cuda_wna16_backend() {
  static const CudaWna16Backend backend;
  return backend;
}

std::unique_ptr<Experts> make_cuda_wna16_experts(const ExpertsBuild& build,
                                                 const Wna16MatrixTensors& w13,
                                                 const Wna16MatrixTensors& w2) {
  const ExpertsShape& shape = build.shape;
  const std::string why = cuda_wna16_backend().check_shape(shape);
  MG_CHECK(why.empty(), "cuda_wna16: {}", why);
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t parts = is_gated(shape.activation.kind) ? 2 : 1;
  PackedMatrix p13 = pack_and_upload(w13, "w13", E, shape.w13_rows(), H, parts, build.device);
  PackedMatrix p2 = pack_and_upload(w2, "w2", E, H, shape.intermediate_size, 1, build.device);
  return std::make_unique<CudaWna16Experts>(cuda_wna16_backend(), build, std::move(p13),
                                            std::move(p2));
}

Wna16DeviceWeights make_random_wna16_weights(const ExpertsShape& shape, Device device, int bits,
                                             int64_t group_size, uint64_t seed) {
  MG_CHECK(device.is_cuda(), "cuda_wna16: random weights are made on a GPU, not {}", device.str());
  const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
  const int64_t I = shape.intermediate_size;
  const auto make = [&](int64_t rows, int64_t cols, int64_t parts, float scale, uint64_t salt) {
    Wna16DeviceMatrix m;
    m.layout = cuda::wna16_layout(E, rows, cols, bits, group_size, parts);
    // launch_wna16_random_fill draws integer zero points and scales of `scale` x [0.5, 1.5).
    m.layout.zeros = cuda::Wna16Zeros::kIntegerCodes;
    m.words = empty_tensor(device, DType::kI32, {E, m.layout.word_count() / E});
    m.params = empty_tensor(device, DType::kF32, {E, m.layout.param_count() / E});
    cuda::launch_wna16_random_fill(reinterpret_cast<uint32_t*>(m.words.raw()),
                                   m.layout.word_count(), m.params.data<float>(),
                                   m.layout.param_count(), bits, scale, seed * 31 + salt, nullptr);
    return m;
  };
  // Scales that keep activations O(1): a uniform code is ~2^bits / sqrt(12) from its zero point
  // on average, so s ~ 2 / (2^bits sqrt(K)) gives unit-variance rows.
  const auto scale = [&](int64_t k) {
    return 2.0f / (static_cast<float>(1 << bits) * std::sqrt(static_cast<float>(k)));
  };
  Wna16DeviceWeights w;
  w.w13 = make(shape.w13_rows(), H, is_gated(shape.activation.kind) ? 2 : 1, scale(H), 1);
  w.w2 = make(H, I, 1, scale(I), 2);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

std::unique_ptr<Experts> make_cuda_wna16_experts_from_packed(const ExpertsBuild& build,
                                                             const Wna16DeviceWeights& weights) {
  const ExpertsShape& shape = build.shape;
  const std::string why = cuda_wna16_backend().check_shape(shape);
  MG_CHECK(why.empty(), "cuda_wna16: {}", why);
  const auto adopt = [&](const Wna16DeviceMatrix& m, int64_t rows, int64_t cols, const char* name) {
    MG_CHECK(m.layout.experts == shape.num_local_experts() && m.layout.cols == cols &&
                 m.layout.part_rows * m.layout.parts >= rows && m.words.device() == build.device &&
                 m.params.device() == build.device,
             "cuda_wna16: packed {} does not hold [{}, {}, {}] on {}", name,
             shape.num_local_experts(), rows, cols, build.device.str());
    PackedMatrix p;
    p.words = m.words;
    p.params = m.params;
    p.view = cuda::wna16_weights_view(m.layout, reinterpret_cast<const uint32_t*>(p.words.raw()),
                                      p.params.data<float>());
    return p;
  };
  return std::make_unique<CudaWna16Experts>(
      cuda_wna16_backend(), build, adopt(weights.w13, shape.w13_rows(), shape.hidden_size, "w13"),
      adopt(weights.w2, shape.hidden_size, shape.intermediate_size, "w2"));
}

std::unique_ptr<Experts> make_random_cuda_wna16_experts(const ExpertsBuild& build, int bits,
                                                        int64_t group_size, uint64_t seed) {
  return make_cuda_wna16_experts_from_packed(
      build, make_random_wna16_weights(build.shape, build.device, bits, group_size, seed));
}

double cuda_wna16_expert_bytes(const ExpertsShape& shape, int bits, int64_t group_size) {
  const int64_t H = shape.hidden_size, I = shape.intermediate_size;
  return cuda::wna16_layout(1, shape.w13_rows(), H, bits, group_size,
                            is_gated(shape.activation.kind) ? 2 : 1)
             .bytes_per_expert() +
         cuda::wna16_layout(1, H, I, bits, group_size, 1).bytes_per_expert();
}

}  // namespace mg
