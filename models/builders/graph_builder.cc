#include "models/builders/graph_builder.h"

#include <fstream>

#include "framework/core/half.h"
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
