// The graph an import writes: a proto::Model whose weight tensors point into the checkpoint's
// own safetensors files (paths relative to the directory the graph file will live in), plus
// helpers that add the nodes a decoder is made of.
//
// Every weight is checked when it is declared: it must exist in the checkpoint, have the shape
// the config implies and a floating dtype, or be F8_E4M3 codes with the scale sibling the
// checkpoint's quantization names (hf_quantization.h); errors name the checkpoint folder and the
// tensor. A quantized weight becomes a TensorInfo with `quantization` and a scale TensorInfo.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/quant.h"
#include "framework/core/tensor.h"
#include "framework/import/hf_checkpoint.h"
#include "framework/import/hf_quantization.h"
#include "proto/model.pb.h"

namespace mg {

// One checkpoint tensor (or a range of its rows) that is part of an assembled graph tensor.
struct PartRef {
  std::string key;
  Shape shape;            // the shape the checkpoint entry must have
  int64_t row_begin = 0;  // rows [row_begin, row_end) of it; both 0: all of it
  int64_t row_end = 0;
};

class ImportGraph {
 public:
  // `graph_dir` is where the graph file will be written; weight paths are made relative to it.
  // `quantization`: what config.json declares (read_hf_quantization).
  ImportGraph(const HfCheckpoint& checkpoint, std::filesystem::path graph_dir,
              HfQuantization quantization = {});

  proto::Model& model() { return model_; }
  // What config.json's quantization_config declares.
  const HfQuantization& quantization() const { return quant_; }
  const HfCheckpoint& checkpoint() const { return checkpoint_; }

  // True when the checkpoint holds `key`.
  bool has(const std::string& key) const;

  // Declares checkpoint tensor `key` (once) after checking that it exists with `shape` and a
  // floating dtype, or is quantized (then with its scale tensor, named as in the checkpoint);
  // returns its graph name (the key itself).
  std::string weight(const std::string& key, const Shape& shape);

  // Declares graph tensor `name` [shape] assembled from `parts` in order (TensorInfo.parts);
  // every part is checked like weight() and all must share one dtype. Quantized parts get their
  // scale "<name>.scale" assembled from the parts' scales in the same order: block scales take
  // the scale rows of each part's row range, which must fall on block boundaries both in the
  // part's checkpoint tensor and in `name` (else an error naming both); per-tensor scales of
  // several checkpoint tensors become one scale per part (w13: one per projection).
  std::string assembled(const std::string& name, const Shape& shape,
                        const std::vector<PartRef>& parts);

  // (fp4) Declares MXFP4 weights stored as GPT-OSS ships them: `key` + "_blocks" U8
  // [lead..., R, C/32, 16] and `key` + "_scales" U8 (E8M0) [lead..., R, C/32] for values
  // [lead..., R, C] = `shape`. The graph tensor "<key>_blocks" is U8 [lead..., R, C/2] (a one-part
  // view of the blocks) with FP4_E2M1 quantization, scale "<key>_scales", group [1, 32]; returns
  // its name. Errors name the checkpoint folder and the tensor (`what` names the config key that
  // implies C when C is not a multiple of 32).
  std::string mxfp4_weight(const std::string& key, const Shape& shape, std::string_view what);

  // The scale group of declared graph tensor `name`, or nullopt when it is not quantized.
  std::optional<GroupShape> quant_group(const std::string& name) const;
  // The codes element of declared graph tensor `name` (QUANT_ELEMENT_FROM_DTYPE for FP8 codes and
  // unquantized tensors).
  proto::QuantElement quant_element(const std::string& name) const;

  // Nodes. Each returns the name of its output, "<name>.out".
  proto::Node& node(const std::string& name, const std::string& op,
                    std::vector<std::string> inputs);
  std::string linear(const std::string& name, const std::string& x, const std::string& weight,
                     const std::string& bias = "", std::optional<float> scale = std::nullopt);
  // `weight` empty: weightless norm. group 0: the whole row.
  std::string rms_norm(const std::string& name, const std::string& x, const std::string& weight,
                       float eps, int64_t group = 0);
  std::string add(const std::string& name, const std::string& a, const std::string& b,
                  std::optional<float> scale = std::nullopt);

  // Checkpoint tensor names that no graph tensor uses (sorted).
  std::vector<std::string> unused_keys() const;

 private:
  // A quantized checkpoint tensor's scale entry.
  struct QuantSource {
    std::string scale_key;
    Shape scale_shape;  // as stored in the checkpoint
    Shape group_shape;  // the shape TensorQuantization needs: scale_shape_for(codes, group)
    // Static activation quantization: the module's `input_scale` entry and its stored shape.
    std::string input_scale_key;
    Shape input_scale_shape;
  };
  // The checkpoint entry of `key` after checking that it exists with `shape`.
  const HfCheckpoint::Entry& require(const std::string& key, const Shape& shape) const;
  // Checks the dtype of `key` (a float weight, or F8_E4M3 codes with a well-formed scale) and
  // returns its scale, or nullopt for a float weight.
  std::optional<QuantSource> quant_source(const std::string& key, const Shape& shape) const;
  // (fp4) The checkpoint entries of NVFP4 weight "<m>.weight": ModelOpt's U8 `<m>.weight`,
  // `<m>.weight_scale`, `<m>.weight_scale_2` (multiplies), or compressed-tensors'
  // `<m>.weight_packed`, `<m>.weight_scale`, `<m>.weight_global_scale` (divides). nullopt when the
  // checkpoint is not NVFP4 or stores `key` as a float weight.
  struct Nvfp4Keys {
    std::string codes, scale, global;
  };
  std::optional<Nvfp4Keys> nvfp4_keys(const std::string& key) const;
  // (fp4) assembled() for NVFP4 parts (U8 codes [rows, C/2] with F8_E4M3 scales [rows, C/16] and
  // a scalar F32 global scale each): FP4 codes, E4M3 scales and an F32 global scale
  // [lead..., S] (one per stacked matrix), whose direction the checkpoint's format sets.
  std::string nvfp4_assembled(const std::string& name, const Shape& shape,
                              const std::vector<PartRef>& parts);
  // (fp4) Declares checkpoint tensor `key` [shape] of any dtype (the caller checked it).
  void weight_unchecked(const std::string& key, const Shape& shape);
  // Adds TensorInfo `name` [shape] assembled from `parts` (already checked), all of one dtype.
  proto::TensorInfo* add_assembled(const std::string& name, const Shape& shape,
                                   const std::vector<PartRef>& parts);
  // The scale parts of assembled quantized tensor `name`, and its group (see assembled()).
  std::vector<PartRef> scale_parts(const std::string& name, const Shape& shape,
                                   const std::vector<PartRef>& parts,
                                   const std::vector<QuantSource>& sources,
                                   GroupShape& group) const;
  // `activation_scale`: the graph tensor of the static activation scales (ACT_QUANT_STATIC).
  void set_quantization(proto::TensorInfo& t, const std::string& scale, GroupShape group,
                        const std::string& activation_scale = "") const;
  // Integer weight-only checkpoints (import_graph_int.cc): the module of `key` ("<m>.weight")
  // when the checkpoint stores it as integer codes ("<m>.qweight", "<m>.weight_packed"), else "".
  std::string int_module(const std::string& key) const;
  // Declares graph tensor `name` [shape] from integer-quantized parts (whole modules, in order)
  // with its scale, zero-point and g_idx tensors in the checkpoint's packing.
  std::string int_assembled(const std::string& name, const Shape& shape,
                            const std::vector<PartRef>& parts);
  std::string relative_file(const std::filesystem::path& file) const;

  const HfCheckpoint& checkpoint_;
  std::filesystem::path graph_dir_;
  HfQuantization quant_;
  proto::Model model_;
  std::vector<std::string> declared_;  // graph tensor names, in order
  std::vector<std::string> used_keys_;
};

}  // namespace mg
