// Builds a model (graph + weights) in memory and writes it as model.pbtxt + model.safetensors.
// Used by `moegraph make-model` and by tests. Weights are deterministic: each tensor's values
// depend only on the seed and the tensor's name, never on the order tensors are created in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/quant.h"
#include "framework/core/tensor.h"
#include "proto/model.pb.h"

namespace mg {

class GraphBuilder {
 public:
  GraphBuilder(std::string model_name, uint64_t seed, DType weight_dtype);

  proto::Model& model() { return model_; }
  DType weight_dtype() const { return weight_dtype_; }
  // Graph only: weights are declared (name, dtype, shape, file) but no values are made and
  // write() writes no weight file. Such a graph runs with CompileOptions::random_weights (the
  // 48-layer Qwen3-30B-A3B-shaped benchmark model would be 61 GB of safetensors).
  void set_graph_only(bool graph_only) { graph_only_ = graph_only; }

  // A weight with values uniform in [center - spread, center + spread], stored as weight_dtype
  // (or `dtype` when given). Returns its name.
  std::string weight(const std::string& name, Shape shape, float spread, float center = 0.0f);
  std::string weight_as(const std::string& name, Shape shape, float spread, float center,
                        DType dtype);

  // Quantizes weight `name` (made by weight()) to F8_E4M3 as checkpoint quantizers do: per group
  // of `group`, scale = amax / 448 and code = e4m3(value / scale). The codes replace the tensor
  // and the scales become tensor `name + ".scale"` (F32), named by its TensorInfo.quantization
  // with `activation` / `activation_group` for its consumer. Graph only: declared, not computed.
  void quantize_fp8(const std::string& name, GroupShape group, ActivationQuant activation,
                    int64_t activation_group);

  // (fp4) Quantizes weight `name` [lead..., R, C] (C even) to packed FP4 E2M1 with per-row groups
  // of `group_cols` values, as the checkpoint quantizers do. MXFP4 (`nvfp4` false): scale E8M0
  // 2^x with x = floor(log2(amax)) - 2 (OCP MX), U8 tensor `name + ".scale"`. NVFP4: an F32 global
  // scale per matrix g = amax / (6 * 448) (ModelOpt's weight_scale_2) in `name + ".global_scale"`
  // [lead..., 1] and F8_E4M3 group scales e4m3(amax_group / 6 / g). Codes round to nearest even,
  // saturating at 6. Graph only: declared, not computed.
  void quantize_fp4(const std::string& name, int64_t group_cols, bool nvfp4);

  // Quantizes weight `name` to weight-only integer codes of `element` in the canonical layout
  // (framework/core/int_quant.h) by quantize_int_cpu: per output row per `group_cols` inputs (-1:
  // per row). The codes replace the tensor; scales (F32) become `name + ".scale"` and, for the
  // unsigned elements, zero points (F32) `name + ".zero_point"`. Graph only: declared only.
  void quantize_int(const std::string& name, QuantElement element, int64_t group_cols);

  void input(const std::string& name, proto::DType dtype, Shape shape);
  void output(const std::string& name, proto::DType dtype, Shape shape);
  // Adds a node; the caller sets its params through the returned reference.
  proto::Node& node(const std::string& name, const std::string& op, std::vector<std::string> inputs,
                    std::vector<std::string> outputs);

  // Writes dir/model.pbtxt and dir/model.safetensors (creating dir; graph only: no weights).
  void write(const std::filesystem::path& dir) const;

  static constexpr const char* kWeightFile = "model.safetensors";
  static constexpr const char* kGraphFile = "model.pbtxt";

 private:
  proto::Model model_;
  uint64_t seed_;
  DType weight_dtype_;
  bool graph_only_ = false;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

}  // namespace mg
