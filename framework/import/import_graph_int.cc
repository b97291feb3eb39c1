// ImportGraph for weight-only integer checkpoints (GPTQ, AWQ, compressed-tensors pack-quantized;
// hf_quantization.h): a module stored as integer codes becomes a TensorInfo in the checkpoint's
// own packing (QuantPacking), assembled from the modules' codes entries, with scale, zero-point
// and g_idx TensorInfos assembled the same way; the compile pass converts them once. Every stored
// tensor is checked here against the shape the config implies, naming the tensor.
#include <algorithm>

#include "framework/core/error.h"
#include "framework/core/int_quant.h"
#include "framework/import/import_graph.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

QuantElement element_of(const HfQuantization::Integer& i, bool has_zero) {
  // Every checkpoint packing stores unsigned codes: with zero points, or offset by the midpoint.
  (void)has_zero;
  return i.bits == 4 ? QuantElement::kUInt4 : QuantElement::kUInt8;
}

proto::QuantElement to_proto_element(QuantElement e) {
  switch (e) {
    case QuantElement::kInt4:
      return proto::QUANT_ELEMENT_INT4;
    case QuantElement::kUInt4:
      return proto::QUANT_ELEMENT_UINT4;
    case QuantElement::kInt8:
      return proto::QUANT_ELEMENT_INT8;
    case QuantElement::kUInt8:
      return proto::QUANT_ELEMENT_UINT8;
    case QuantElement::kFp4E2M1:
      return proto::QUANT_ELEMENT_FP4_E2M1;
    case QuantElement::kFromDtype:
      break;
  }
  return proto::QUANT_ELEMENT_FROM_DTYPE;
}

IntPacking packing_of(proto::QuantPacking p) {
  switch (p) {
    case proto::QUANT_PACKING_GPTQ:
      return IntPacking::kGptq;
    case proto::QUANT_PACKING_AWQ:
      return IntPacking::kAwq;
    case proto::QUANT_PACKING_COMPRESSED_TENSORS:
      return IntPacking::kCompressedTensors;
    default:
      return IntPacking::kNone;
  }
}

Shape with_lead(const Shape& lead, int64_t pieces, std::initializer_list<int64_t> tail) {
  Shape s = lead;
  if (pieces > 1) s.push_back(pieces);
  s.insert(s.end(), tail);
  return s;
}

}  // namespace

std::string ImportGraph::int_module(const std::string& key) const {
  if (!quant_.is_integer() || !key.ends_with(".weight") || has(key)) return "";
  const std::string module = key.substr(0, key.size() - 7);
  return has(module + "." + quant_.integer.codes) ? module : "";
}

std::string ImportGraph::int_assembled(const std::string& name, const Shape& shape,
                                       const std::vector<PartRef>& parts) {
  const std::string dir = checkpoint_.dir().string();
  const HfQuantization::Integer& iq = quant_.integer;
  const IntPacking packing = packing_of(iq.packing);
  MG_CHECK(shape.size() >= 2, "{}: '{}' {}: only weight matrices can be integer-quantized", dir,
           name, shape_str(shape));
  const Shape lead(shape.begin(), shape.end() - 2);
  const int64_t R = shape[shape.size() - 2], C = shape.back();
  const int64_t matrices = shape_numel(lead);

  // Every part is one whole module [rows, C] (integer codes cannot be cut into row ranges: GPTQ
  // and AWQ store them transposed), all of equal rows for the transposed packings.
  std::vector<std::string> modules;
  for (const PartRef& p : parts) {
    const std::string module = int_module(p.key);
    MG_CHECK(!module.empty(),
             "{}: tensors '{}' and '{}' are stacked into one weight, but only one is stored as "
             "{} integer codes",
             dir, parts[0].key, p.key, quant_.description);
    MG_CHECK(p.row_begin == 0 && p.row_end == 0 && p.shape.size() == 2 && p.shape[1] == C,
             "{}: '{}' takes {} of integer-quantized module '{}': only whole [out, in] modules can "
             "be stacked",
             dir, name,
             p.row_begin != 0 || p.row_end != 0
                 ? fmt::format("rows [{}, {})", p.row_begin, p.row_end)
                 : shape_str(p.shape),
             module);
    if (const HfQuantization::IgnoreRule* rule = quant_.ignored_by(module)) {
      MG_FAIL(
          "{}: module '{}' is stored as integer codes, but quantization_config.{} entry '{}' "
          "keeps it unquantized",
          dir, module, quant_.ignore_key, rule->text);
    }
    modules.push_back(module);
  }
  const int64_t rows_per_part = parts[0].shape[0];
  const bool equal_parts = std::all_of(
      parts.begin(), parts.end(), [&](const PartRef& p) { return p.shape[0] == rows_per_part; });
  int64_t total_rows = 0;
  for (const PartRef& p : parts) total_rows += p.shape[0];
  MG_ASSERT(total_rows == matrices * R, "'{}' {}: parts hold {} rows", name, shape_str(shape),
            total_rows);
  const bool transposed = packing == IntPacking::kGptq || packing == IntPacking::kAwq;
  const int64_t P = equal_parts && R % rows_per_part == 0 ? R / rows_per_part : 0;
  MG_CHECK(!transposed || P >= 1,
           "{}: '{}' {} stacks {} modules of unequal rows: {} stores them transposed, which "
           "needs every module of a matrix to have the same number of rows",
           dir, name, shape_str(shape), quant_.description, quant_.description);

  const bool has_zero = has(modules[0] + "." + iq.zero_point);
  MG_CHECK(!iq.zero_point_required || has_zero,
           "{}: tensor '{}' is missing from the checkpoint ({} stores zero points for every "
           "quantized module)",
           dir, modules[0] + "." + iq.zero_point, quant_.description);
  MG_CHECK(iq.zero_point_required || !iq.symmetric || !has_zero,
           "{}: tensor '{}': the config declares symmetric weights, which have no zero points", dir,
           modules[0] + "." + iq.zero_point);
  const bool has_gidx = !iq.g_idx.empty() && has(modules[0] + "." + iq.g_idx);
  MG_CHECK(!iq.act_order || has_gidx,
           "{}: tensor '{}' is missing from the checkpoint (act-order checkpoints store the group "
           "of every input column)",
           dir, modules[0] + "." + iq.g_idx);
  const QuantElement element = element_of(iq, has_zero);

  // One checkpoint module's stored shapes, and the check of one of its entries.
  const IntStoredShapes one =
      int_stored_shapes(element, packing, {rows_per_part, C}, iq.group_cols, 1);
  auto part_refs = [&](const std::string& suffix, const Shape& part_shape, bool is_int) {
    std::vector<PartRef> refs;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string key = modules[i] + "." + suffix;
      const IntStoredShapes mine =
          int_stored_shapes(element, packing, {parts[i].shape[0], C}, iq.group_cols, 1);
      const Shape want = suffix == iq.codes        ? mine.codes
                         : suffix == iq.scale      ? mine.scale
                         : suffix == iq.zero_point ? mine.zero_point
                                                   : Shape{C};
      (void)part_shape;
      const HfCheckpoint::Entry* e = checkpoint_.find(key);
      MG_CHECK(e != nullptr, "{}: tensor '{}' is missing from the checkpoint ({} module '{}')", dir,
               key, quant_.description, modules[i]);
      const DType dtype = e->entry->dtype;
      if (is_int) {
        MG_CHECK(dtype == DType::kI32,
                 "{}: tensor '{}' in '{}' is {}, but {} stores it as I32 (packed codes, zero "
                 "points or group indices)",
                 dir, key, e->file.string(), dtype_name(dtype), quant_.description);
      } else {
        MG_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "{}: scale '{}' in '{}' is {}, expected F32, BF16 or F16", dir, key,
                 e->file.string(), dtype_name(dtype));
      }
      MG_CHECK(e->entry->shape == want,
               "{}: tensor '{}' in '{}' has shape {}, but {} module '{}' of shape [{}, {}] with "
               "{} needs {}",
               dir, key, e->file.string(), shape_str(e->entry->shape), quant_.description,
               modules[i], parts[i].shape[0], C,
               iq.group_cols < 0 ? std::string("channel-wise scales")
                                 : fmt::format("groups of {}", iq.group_cols),
               shape_str(want));
      refs.push_back({key, want});
    }
    return refs;
  };

  // The full stored shapes: the transposed packings keep the P modules of a matrix apart; the
  // row-major one (compressed-tensors) concatenates their rows.
  IntStoredShapes full;
  if (transposed) {
    full = int_stored_shapes(element, packing, shape, iq.group_cols, P);
  } else {
    full = int_stored_shapes(element, packing, shape, iq.group_cols, 1);
    const int64_t p = 32 / iq.bits;
    MG_CHECK(!has_zero || parts.size() == static_cast<size_t>(matrices) || rows_per_part % p == 0,
             "{}: '{}' stacks modules of {} rows whose zero points are packed {} rows per word: "
             "they cannot be concatenated",
             dir, name, rows_per_part, p);
  }
  (void)one;
  const std::vector<PartRef> code_parts = part_refs(iq.codes, one.codes, true);
  const std::vector<PartRef> scale_parts = part_refs(iq.scale, one.scale, false);
  proto::TensorInfo* t = add_assembled(name, full.codes, code_parts);
  proto::TensorQuantization* q = t->mutable_quantization();
  q->set_element(to_proto_element(element));
  q->set_packing(iq.packing);
  for (int64_t d : shape) q->add_logical_shape(d);
  q->set_group_rows(1);
  q->set_group_cols(iq.group_cols);
  q->set_scale(name + ".scale");
  add_assembled(name + ".scale", full.scale, scale_parts);
  if (has_zero) {
    q->set_zero_point(name + ".zero_point");
    q->set_zero_point_offset(iq.zero_point_offset);
    add_assembled(name + ".zero_point", full.zero_point, part_refs(iq.zero_point, {}, true));
  }
  if (has_gidx) {
    const int64_t pieces = P >= 1 ? P : 0;
    MG_CHECK(pieces >= 1, "{}: '{}' stacks act-order modules of unequal rows", dir, name);
    q->set_g_idx(name + ".g_idx");
    add_assembled(name + ".g_idx", with_lead(lead, pieces, {C}), part_refs(iq.g_idx, {}, true));
  }
  // compressed-tensors records each module's [out, in]: it must be the shape the config implies
  // (which the packed tensors were checked against).
  if (packing == IntPacking::kCompressedTensors) {
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string key = modules[i] + ".weight_shape";
      const HfCheckpoint::Entry* e = checkpoint_.find(key);
      MG_CHECK(e != nullptr && e->entry->shape == Shape{2} &&
                   (e->entry->dtype == DType::kI32 || e->entry->dtype == DType::kI64),
               "{}: tensor '{}' {} (compressed-tensors stores [out, in] of every packed module as "
               "two integers)",
               dir, key,
               e == nullptr ? std::string("is missing from the checkpoint")
                            : fmt::format("is {}{}", dtype_name(e->entry->dtype),
                                          shape_str(e->entry->shape)));
      const Tensor values = checkpoint_.tensor(*e);
      int64_t v[2];
      for (int j = 0; j < 2; ++j) {
        v[j] =
            e->entry->dtype == DType::kI64 ? values.data<int64_t>()[j] : values.data<int32_t>()[j];
      }
      MG_CHECK(v[0] == parts[i].shape[0] && v[1] == C,
               "{}: tensor '{}' says the packed module is [{}, {}], but config.json implies "
               "[{}, {}] (and '{}' was packed for that)",
               dir, key, v[0], v[1], parts[i].shape[0], C, modules[i] + "." + iq.codes);
      used_keys_.push_back(key);
    }
  }
  return name;
}

}  // namespace mg
