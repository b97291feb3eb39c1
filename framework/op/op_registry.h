// The op registry: op name -> OpDef (parameter checks, shape inference, kernel creation).
//
// The framework defines what an op is and looks ops up by name; it knows no op itself. The
// built-in ops live under ops/ and are added by ops/builtin_ops.h's register_builtin_ops(), which
// every program that verifies or compiles graphs calls first (the moegraph command, the test
// mains; the fuzz targets only parse, and link the framework alone). Registration is explicit
// because static-initialiser registration from a static library is dropped by the linker, and
// because the framework library must not depend on the ops library (the build enforces the
// direction: docs/architecture.md, "Layering").
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framework/compile/compile_options.h"
#include "framework/core/dtype.h"
#include "framework/core/quant.h"
#include "framework/core/tensor.h"
#include "framework/op/op_kernel.h"
#include "proto/model.pb.h"

namespace mg {

// Type of a value at compile time. In shapes, kTokens (-1) stands for the token count T.
inline constexpr int64_t kTokens = -1;
struct ValueType {
  DType dtype = DType::kF32;
  Shape shape;
  // Set for the codes of a quantized weight as an op that takes quantized weights sees them
  // (InputSpec::takes_quantized): the scales' group. Other ops see the dequantized F32 type.
  std::optional<GroupShape> quant_group = std::nullopt;
  // With quant_group: the codes' element (framework/core/quant.h). Integer codes (kInt4 ...)
  // report their logical shape [.., R, C] in `shape` and their canonical codes dtype (U8 / I8).
  QuantElement quant_element = QuantElement::kFromDtype;
  bool operator==(const ValueType&) const = default;
};
// "F32[T, 64]", "F8_E4M3[8, 64, 32] (scales [128, 128])"
std::string value_type_str(const ValueType& type);

enum class InputKind {
  kActivation,  // produced by a node or a graph input
  kWeight,      // a tensor from the model's weight files
};

// How the place-weights pass stores a weight input.
enum class WeightPlacement {
  kCompute,  // converted to the compute dtype (F32 on the CPU) on the node's device
  kRaw,      // left as loaded (host, original dtype); the kernel converts it at build time
};

struct InputSpec {
  std::string_view name;
  InputKind kind = InputKind::kActivation;
  bool optional = false;
  WeightPlacement placement = WeightPlacement::kCompute;
  // Weights: the op's kernel takes a quantized tensor as it is stored (codes, with the scales in
  // KernelContext::weight_quant). When false, the place-weights pass dequantizes it first.
  bool takes_quantized = false;
  // Quantized weights given as random codes (--random-weights): the codes may be made on the
  // compile device instead of the host, as the kernel can take them from there (the MoE op's
  // expert weights: cuda_wna16 / cuda_fp4 repack them in place).
  bool random_codes_on_device = false;
};

// Handed to OpDef::create_kernel.
struct KernelContext {
  const proto::Node& node;
  const CompileOptions& options;
  // Types of the node's inputs (nullopt for absent optional inputs).
  std::span<const std::optional<ValueType>> input_types;
  // Per input: the placed weight tensor, or undefined for activations / absent inputs.
  std::span<const Tensor> weights;
  // Per input (or empty): the quantization of a quantized weight, else undefined. `weights` holds
  // its codes when the input takes_quantized, else its dequantized values: ops that do not take
  // codes still read how the checkpoint quantizes the activations that weight multiplies.
  std::span<const WeightQuantization> weight_quant = {};
};

class OpDef {
 public:
  virtual ~OpDef() = default;
  virtual std::string_view name() const = 0;
  // Which `params` field of the Node this op expects.
  virtual proto::Node::ParamsCase params_case() const = 0;
  virtual std::span<const InputSpec> inputs() const = 0;
  virtual int num_outputs() const = 0;
  // The outputs `node` must have; num_outputs() unless the op's params set the count (linear's
  // output_features). Called after the node's params case is checked.
  virtual int num_outputs_of(const proto::Node& node) const { return num_outputs(); }

  // Checks the parameters and the input types and returns the output types. Throws mg::Error
  // saying what is wrong; the caller prefixes the file and node name.
  virtual std::vector<ValueType> infer(const proto::Node& node,
                                       std::span<const std::optional<ValueType>> inputs) const = 0;

  // Builds the kernel for options.device. Throws mg::Error if the op has no kernel there. Device
  // work the build queues (weight conversions, copies) may still be running on return: callers
  // synchronize_device() before running the kernel, as the select-kernels pass does.
  virtual std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const = 0;
};

class OpRegistry {
 public:
  // The process's registry, consulted by the verifier, shape inference and the compiler. Empty
  // until the program registers its ops (register_builtin_ops); fill it before starting threads
  // that compile or load graphs, it is not locked.
  static OpRegistry& global();

  void add(std::unique_ptr<OpDef> def);
  // Null if no op has this name.
  const OpDef* find(std::string_view op) const;
  bool empty() const { return defs_.empty(); }
  std::vector<std::string> names() const;

 private:
  std::unordered_map<std::string, std::unique_ptr<OpDef>> defs_;
};

}  // namespace mg
