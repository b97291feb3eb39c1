#include "models/builders/graph_builder.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/half.h"
#include "framework/core/int_quant.h"
#include "framework/device/convert.h"
#include "framework/device/random_uniform.h"
#include "framework/io/graph_loader.h"
#include "framework/io/proto_dtype.h"
#include "framework/io/safetensors.h"

namespace mg {

namespace {

// The sequential generator of make-model's weights: splitmix64, i.e. mix64 of a counter that
// steps by its increment.
uint64_t splitmix64(uint64_t& state) {
  const uint64_t z = mix64(state);
  state += 0x9e3779b97f4a7c15ull;
  return z;
}

}  // namespace

GraphBuilder::GraphBuilder(std::string model_name, uint64_t seed, DType weight_dtype)
    : seed_(seed), weight_dtype_(weight_dtype) {
  model_.set_name(std::move(model_name));
  model_.set_format_version(kGraphFormatVersion);
}

std::string GraphBuilder::weight(const std::string& name, Shape shape, float spread, float center) {
  return weight_as(name, std::move(shape), spread, center, weight_dtype_);
}

std::string GraphBuilder::weight_as(const std::string& name, Shape shape, float spread,
                                    float center, DType dtype) {
  proto::TensorInfo* info = model_.add_tensors();
  info->set_name(name);
  info->set_dtype(to_proto(dtype));
  for (int64_t d : shape) info->add_shape(d);
  info->set_file(kWeightFile);
  if (graph_only_) return name;
  Tensor t = Tensor::empty_cpu(dtype, shape);
  uint64_t state = seed_ ^ fnv1a(name);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    // 24 random bits -> [-1, 1).
    const float u = static_cast<float>(splitmix64(state) >> 40) / 8388608.0f - 1.0f;
    const float v = center + spread * u;
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[i] = v;
        break;
      case DType::kBF16:
        static_cast<uint16_t*>(t.raw())[i] = float_to_bf16(v);
        break;
      case DType::kF16:
        static_cast<uint16_t*>(t.raw())[i] = float_to_fp16(v);
        break;
      case DType::kF64:
      case DType::kI64:
      case DType::kI32:
      case DType::kI16:
      case DType::kI8:
      case DType::kU8:
      case DType::kBool:
      case DType::kF8E4M3:
      case DType::kF8E5M2:
        MG_FAIL("make-model stores weights as F32, BF16 or F16, not {}", dtype_name(dtype));
    }
  }
  tensors_.emplace_back(name, std::move(t));
  return name;
}

void GraphBuilder::quantize_fp8(const std::string& name, GroupShape group,
                                ActivationQuant activation, int64_t activation_group) {
  proto::TensorInfo* info = nullptr;
  for (proto::TensorInfo& t : *model_.mutable_tensors()) {
    if (t.name() == name) info = &t;
  }
  MG_ASSERT(info != nullptr, "quantize_fp8: no weight '{}'", name);
  const Shape shape(info->shape().begin(), info->shape().end());
  const Shape scale_shape = scale_shape_for(shape, group);
  info->set_dtype(proto::F8_E4M3);
  proto::TensorQuantization* q = info->mutable_quantization();
  q->set_scale(name + ".scale");
  q->set_group_rows(group.rows);
  q->set_group_cols(group.cols);
  q->set_activation(activation == ActivationQuant::kDynamic ? proto::ACT_QUANT_DYNAMIC
                                                            : proto::ACT_QUANT_NONE);
  if (activation == ActivationQuant::kDynamic) q->set_activation_group(activation_group);
  proto::TensorInfo* scale_info = model_.add_tensors();
  scale_info->set_name(name + ".scale");
  scale_info->set_dtype(proto::F32);
  for (int64_t d : scale_shape) scale_info->add_shape(d);
  scale_info->set_file(kWeightFile);
  if (graph_only_) return;

  auto it = std::find_if(tensors_.begin(), tensors_.end(),
                         [&](const auto& entry) { return entry.first == name; });
  MG_ASSERT(it != tensors_.end(), "quantize_fp8: no values for '{}'", name);
  const Tensor values = to_f32_cpu(it->second);
  Tensor codes = Tensor::empty_cpu(DType::kF8E4M3, shape);
  Tensor scale = Tensor::empty_cpu(DType::kF32, scale_shape);
  const int64_t R = shape[shape.size() - 2], C = shape.back();
  const int64_t gr = group.rows_in(R), gc = group.cols_in(C);
  const int64_t sr = scale_shape[scale_shape.size() - 2], sc = scale_shape.back();
  const float* v = values.data<float>();
  for (int64_t m = 0; m < values.numel() / (R * C); ++m) {
    for (int64_t br = 0; br < sr; ++br) {
      for (int64_t bc = 0; bc < sc; ++bc) {
        float amax = 0.0f;
        for (int64_t r = br * gr; r < std::min(R, (br + 1) * gr); ++r) {
          for (int64_t c = bc * gc; c < std::min(C, (bc + 1) * gc); ++c)
            amax = std::max(amax, std::fabs(v[(m * R + r) * C + c]));
        }
        const float s = std::max(amax, kFp8ActAmaxFloor) / kFp8E4M3Max;
        scale.data<float>()[(m * sr + br) * sc + bc] = s;
        for (int64_t r = br * gr; r < std::min(R, (br + 1) * gr); ++r) {
          for (int64_t c = bc * gc; c < std::min(C, (bc + 1) * gc); ++c) {
            const int64_t i = (m * R + r) * C + c;
            fp8_codes(codes)[i] = float_to_fp8_e4m3(v[i] / s);
          }
        }
      }
    }
  }
  it->second = std::move(codes);
  tensors_.emplace_back(name + ".scale", std::move(scale));
}

void GraphBuilder::quantize_fp4(const std::string& name, int64_t group_cols, bool nvfp4) {
  proto::TensorInfo* info = nullptr;
  for (proto::TensorInfo& t : *model_.mutable_tensors()) {
    if (t.name() == name) info = &t;
  }
  MG_ASSERT(info != nullptr, "quantize_fp4: no weight '{}'", name);
  const Shape shape(info->shape().begin(), info->shape().end());
  const int64_t R = shape[shape.size() - 2], C = shape.back();
  MG_CHECK(C % 2 == 0,
           "--quant: FP4 packs two values per byte, so '{}' needs an even row length, not {}", name,
           C);
  const GroupShape group{1, group_cols};
  const Shape scale_shape = scale_shape_for(shape, group);
  Shape packed = shape, global_shape(shape.begin(), shape.end() - 2);
  packed.back() = C / 2;
  global_shape.push_back(1);
  info->set_dtype(proto::U8);
  info->clear_shape();
  for (int64_t d : packed) info->add_shape(d);
  proto::TensorQuantization* q = info->mutable_quantization();
  q->set_element(proto::QUANT_ELEMENT_FP4_E2M1);
  q->set_scale(name + ".scale");
  q->set_group_rows(1);
  q->set_group_cols(group_cols);
  auto declare = [&](const std::string& tensor, proto::DType dtype, const Shape& s) {
    proto::TensorInfo* t = model_.add_tensors();
    t->set_name(tensor);
    t->set_dtype(dtype);
    for (int64_t d : s) t->add_shape(d);
    t->set_file(kWeightFile);
  };
  declare(name + ".scale", nvfp4 ? proto::F8_E4M3 : proto::U8, scale_shape);
  if (nvfp4) {
    q->set_global_scale(name + ".global_scale");
    declare(name + ".global_scale", proto::F32, global_shape);
  }
  if (graph_only_) return;

  auto it = std::find_if(tensors_.begin(), tensors_.end(),
                         [&](const auto& entry) { return entry.first == name; });
  MG_ASSERT(it != tensors_.end(), "quantize_fp4: no values for '{}'", name);
  const Tensor values = to_f32_cpu(it->second);
  Tensor codes = Tensor::empty_cpu(DType::kU8, packed);
  Tensor scale = Tensor::empty_cpu(nvfp4 ? DType::kF8E4M3 : DType::kU8, scale_shape);
  Tensor global = Tensor::empty_cpu(DType::kF32, global_shape);
  const int64_t sc = scale_shape.back();
  const float* v = values.data<float>();
  uint8_t* out = static_cast<uint8_t*>(codes.raw());
  uint8_t* s8 = static_cast<uint8_t*>(scale.raw());
  std::fill_n(out, codes.numel(), uint8_t{0});
  for (int64_t m = 0; m < values.numel() / (R * C); ++m) {
    float g = 1.0f;
    if (nvfp4) {
      float amax = 0.0f;
      for (int64_t i = 0; i < R * C; ++i) amax = std::max(amax, std::fabs(v[m * R * C + i]));
      g = amax > 0.0f ? amax / (kFp4E2M1Max * kFp8E4M3Max) : 1.0f;
      global.data<float>()[m] = g;
    }
    for (int64_t r = 0; r < R; ++r) {
      const float* row = v + (m * R + r) * C;
      for (int64_t b = 0; b < sc; ++b) {
        const int64_t c0 = b * group_cols, c1 = std::min(C, c0 + group_cols);
        float amax = 0.0f;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
        float step;  // the real value of code 1.0
        uint8_t& sbyte = s8[(m * R + r) * sc + b];
        if (nvfp4) {
          sbyte = float_to_fp8_e4m3(amax / kFp4E2M1Max / g);
          step = fp8_e4m3_to_float(sbyte) * g;
        } else {
          const int x =
              amax > 0.0f ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2, -127, 127)
                          : -127;
          sbyte = static_cast<uint8_t>(x + 127);
          step = e8m0_to_float(sbyte);
        }
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t code = step > 0.0f ? float_to_fp4_e2m1(row[c] / step) : 0;
          out[((m * R + r) * C + c) / 2] |= static_cast<uint8_t>(c % 2 == 0 ? code : code << 4);
        }
      }
    }
  }
  it->second = std::move(codes);
  tensors_.emplace_back(name + ".scale", std::move(scale));
  if (nvfp4) tensors_.emplace_back(name + ".global_scale", std::move(global));
}

void GraphBuilder::quantize_int(const std::string& name, QuantElement element, int64_t group_cols) {
  proto::TensorInfo* info = nullptr;
  for (proto::TensorInfo& t : *model_.mutable_tensors()) {
    if (t.name() == name) info = &t;
  }
  MG_ASSERT(info != nullptr, "quantize_int: no weight '{}'", name);
  const Shape logical(info->shape().begin(), info->shape().end());
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  Shape scale_shape(logical.begin(), logical.end() - 2);
  scale_shape.push_back(R);
  scale_shape.push_back(group_cols < 0 ? 1 : (C + group_cols - 1) / group_cols);
  const bool zero_points = !quant_element_signed(element);
  info->set_dtype(element == QuantElement::kInt8 ? proto::I8 : proto::U8);
  info->clear_shape();
  for (int64_t d : int_codes_shape(element, logical)) info->add_shape(d);
  proto::TensorQuantization* q = info->mutable_quantization();
  switch (element) {
    case QuantElement::kInt4:
      q->set_element(proto::QUANT_ELEMENT_INT4);
      break;
    case QuantElement::kUInt4:
      q->set_element(proto::QUANT_ELEMENT_UINT4);
      break;
    case QuantElement::kInt8:
      q->set_element(proto::QUANT_ELEMENT_INT8);
      break;
    case QuantElement::kUInt8:
      q->set_element(proto::QUANT_ELEMENT_UINT8);
      break;
    case QuantElement::kFromDtype:
    case QuantElement::kFp4E2M1:
      MG_ASSERT(false, "quantize_int: not an integer element");
  }
  for (int64_t d : logical) q->add_logical_shape(d);
  q->set_group_rows(1);
  q->set_group_cols(group_cols);
  q->set_scale(name + ".scale");
  if (zero_points) q->set_zero_point(name + ".zero_point");
  for (const char* suffix : {".scale", ".zero_point"}) {
    if (std::string(suffix) == ".zero_point" && !zero_points) continue;
    proto::TensorInfo* t = model_.add_tensors();
    t->set_name(name + suffix);
    t->set_dtype(proto::F32);
    for (int64_t d : scale_shape) t->add_shape(d);
    t->set_file(kWeightFile);
  }
  if (graph_only_) return;
  auto it = std::find_if(tensors_.begin(), tensors_.end(),
                         [&](const auto& entry) { return entry.first == name; });
  MG_ASSERT(it != tensors_.end(), "quantize_int: no values for '{}'", name);
  auto [codes, quant] = quantize_int_cpu(to_f32_cpu(it->second), element, group_cols);
  it->second = std::move(codes);
  tensors_.emplace_back(name + ".scale", std::move(quant.scale));
  if (zero_points) tensors_.emplace_back(name + ".zero_point", std::move(quant.zero_point));
}

void GraphBuilder::input(const std::string& name, proto::DType dtype, Shape shape) {
  proto::ValueInfo* v = model_.add_inputs();
  v->set_name(name);
  v->set_dtype(dtype);
  for (int64_t d : shape) v->add_shape(d);
}

void GraphBuilder::output(const std::string& name, proto::DType dtype, Shape shape) {
  proto::ValueInfo* v = model_.add_outputs();
  v->set_name(name);
  v->set_dtype(dtype);
  for (int64_t d : shape) v->add_shape(d);
}

proto::Node& GraphBuilder::node(const std::string& name, const std::string& op,
                                std::vector<std::string> inputs, std::vector<std::string> outputs) {
  proto::Node* n = model_.add_nodes();
  n->set_name(name);
  n->set_op(op);
  for (std::string& in : inputs) n->add_inputs(std::move(in));
  for (std::string& out : outputs) n->add_outputs(std::move(out));
  return *n;
}

void GraphBuilder::write(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MG_CHECK(!ec, "cannot create output directory '{}': {}", dir.string(), ec.message());
  if (!graph_only_) {
    write_safetensors(dir / kWeightFile, tensors_, {{"format", "pt"}, {"generator", "moegraph"}});
  }
  save_graph(dir / kGraphFile, model_);
}

}  // namespace mg
