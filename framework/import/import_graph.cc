#include "framework/import/import_graph.h"

#include <algorithm>
#include <set>
#include <system_error>

#include "framework/core/error.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

bool is_supported_weight_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

// "model.layers.0.self_attn." for "model.layers.0.self_attn.q_proj.weight": the module that
// holds the tensor's own module.
std::string parent_module(const std::string& key) {
  const size_t last = key.rfind('.');
  if (last == std::string::npos || last == 0) return "";
  const size_t before = key.rfind('.', last - 1);
  return before == std::string::npos ? "" : key.substr(0, before + 1);
}

// " (under 'P' it holds 'a', 'b' and 2 more)": names next to a missing tensor, to show a rename.
std::string siblings(const HfCheckpoint& checkpoint, const std::string& key) {
  const std::string prefix = parent_module(key);
  std::vector<std::string> near;
  for (const std::string& name : checkpoint.names()) {
    if (!prefix.empty() && name.rfind(prefix, 0) == 0) near.push_back(name);
  }
  if (near.empty()) return "";
  std::string out;
  for (size_t i = 0; i < near.size() && i < 4; ++i) {
    out += fmt::format("{}'{}'", i == 0 ? "" : ", ", near[i]);
  }
  if (near.size() > 4) out += fmt::format(" and {} more", near.size() - 4);
  return fmt::format(" (under '{}' it holds {})", prefix, out);
}

}  // namespace

ImportGraph::ImportGraph(const HfCheckpoint& checkpoint, std::filesystem::path graph_dir,
                         HfQuantization quantization)
    : checkpoint_(checkpoint), graph_dir_(std::move(graph_dir)), quant_(std::move(quantization)) {}

bool ImportGraph::has(const std::string& key) const {
  return checkpoint_.find(key) != nullptr;
}

const HfCheckpoint::Entry& ImportGraph::require(const std::string& key, const Shape& shape) const {
  const std::string dir = checkpoint_.dir().string();
  const HfCheckpoint::Entry* e = checkpoint_.find(key);
  MG_CHECK(e != nullptr, "{}: tensor '{}' is missing from the checkpoint{}", dir, key,
           siblings(checkpoint_, key));
  MG_CHECK(e->entry->shape == shape,
           "{}: tensor '{}' in '{}' has shape {}, but config.json implies {}", dir, key,
           e->file.string(), shape_str(e->entry->shape), shape_str(shape));
  return *e;
}

std::optional<ImportGraph::QuantSource> ImportGraph::quant_source(const std::string& key,
                                                                  const Shape& shape) const {
  const std::string dir = checkpoint_.dir().string();
  const HfCheckpoint::Entry& e = require(key, shape);
  const std::string file = e.file.string();
  const DType dtype = e.entry->dtype;
  const bool fp8 = dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2;
  const std::string scale_key =
      quant_.quantized() && !quant_.is_integer() ? key + quant_.scale_suffix : "";
  const HfCheckpoint::Entry* scale = scale_key.empty() ? nullptr : checkpoint_.find(scale_key);
  if (!fp8 && scale == nullptr) {
    MG_CHECK(is_supported_weight_dtype(dtype),
             "{}: tensor '{}' in '{}' is {}, expected F32, BF16 or F16 (or F8_E4M3 with a scale "
             "in an FP8 checkpoint)",
             dir, key, file, dtype_name(dtype));
    return std::nullopt;
  }
  MG_CHECK(quant_.quantized() && !quant_.is_integer(),
           "{}: tensor '{}' in '{}' is {}, but config.json has no quantization_config for FP8 (FP8 "
           "checkpoints need quant_method fp8 or compressed-tensors)",
           dir, key, file, dtype_name(dtype));
  MG_CHECK(dtype == DType::kF8E4M3,
           "{}: tensor '{}' in '{}' is {}, but only F8_E4M3 codes with a scale '{}' are supported",
           dir, key, file, dtype_name(dtype), scale_key);
  MG_CHECK(scale != nullptr,
           "{}: tensor '{}' in '{}' is F8_E4M3, but its scale '{}' is missing from the checkpoint",
           dir, key, file, scale_key);
  const std::string module = key.ends_with(".weight") ? key.substr(0, key.size() - 7) : key;
  if (const HfQuantization::IgnoreRule* rule = quant_.ignored_by(module)) {
    MG_FAIL(
        "{}: tensor '{}' in '{}' is F8_E4M3, but quantization_config.{} entry '{}' keeps module "
        "'{}' unquantized",
        dir, key, file, quant_.ignore_key, rule->text, module);
  }
  MG_CHECK(shape.size() >= 2,
           "{}: tensor '{}' in '{}' is F8_E4M3 of rank {}: only weight matrices can be quantized",
           dir, key, file, shape.size());
  const DType scale_dtype = scale->entry->dtype;
  MG_CHECK(scale_dtype == DType::kF32 || scale_dtype == DType::kBF16 || scale_dtype == DType::kF16,
           "{}: scale '{}' in '{}' is {}, expected F32, BF16 or F16", dir, scale_key,
           scale->file.string(), dtype_name(scale_dtype));
  QuantSource q{scale_key, scale->entry->shape, scale_shape_for(shape, quant_.group), "", {}};
  // Accepted layouts: exactly the group's shape; per tensor any shape of one scale per matrix
  // ([] or [1] for a matrix); per channel also [rows] without the trailing 1.
  bool fits = q.scale_shape == q.group_shape;
  if (quant_.group == GroupShape::per_tensor()) {
    fits = shape_numel(q.scale_shape) == shape_numel(q.group_shape);
  } else if (quant_.group == GroupShape::per_channel()) {
    fits = fits || q.scale_shape == Shape(q.group_shape.begin(), q.group_shape.end() - 1);
  }
  MG_CHECK(fits, "{}: scale '{}' in '{}' has shape {}, but {} codes {} with {} scales need {}", dir,
           scale_key, scale->file.string(), shape_str(q.scale_shape), key, shape_str(shape),
           quant_.group.str(), shape_str(q.group_shape));
  if (quant_.activation == proto::ACT_QUANT_STATIC) {
    q.input_scale_key = module + ".input_scale";
    const HfCheckpoint::Entry* in = checkpoint_.find(q.input_scale_key);
    MG_CHECK(in != nullptr,
             "{}: tensor '{}' in '{}' is F8_E4M3 with static input activations, but its input "
             "scale '{}' is missing from the checkpoint",
             dir, key, file, q.input_scale_key);
    const DType in_dtype = in->entry->dtype;
    MG_CHECK((in_dtype == DType::kF32 || in_dtype == DType::kBF16 || in_dtype == DType::kF16) &&
                 shape_numel(in->entry->shape) == 1,
             "{}: input scale '{}' in '{}' is {} {}, expected one F32, BF16 or F16 element", dir,
             q.input_scale_key, in->file.string(), dtype_name(in_dtype),
             shape_str(in->entry->shape));
    q.input_scale_shape = in->entry->shape;
  }
  return q;
}

std::string ImportGraph::relative_file(const std::filesystem::path& file) const {
  const std::filesystem::path full = checkpoint_.dir() / file;
  std::error_code ec;
  std::filesystem::path rel = std::filesystem::relative(full, graph_dir_, ec);
  MG_CHECK(!ec && !rel.empty(), "cannot express weight file '{}' relative to '{}' ({})",
           full.string(), graph_dir_.string(), ec.message());
  return rel.generic_string();
}

void ImportGraph::set_quantization(proto::TensorInfo& t, const std::string& scale, GroupShape group,
                                   const std::string& activation_scale) const {
  proto::TensorQuantization* q = t.mutable_quantization();
  q->set_scale(scale);
  q->set_group_rows(group.rows);
  q->set_group_cols(group.cols);
  q->set_activation(quant_.activation);
  if (quant_.activation == proto::ACT_QUANT_DYNAMIC) {
    q->set_activation_group(quant_.activation_group);
  }
  if (quant_.activation == proto::ACT_QUANT_STATIC) {
    MG_ASSERT(!activation_scale.empty(), "static activation scale of '{}' not named", t.name());
    q->set_activation_scale(activation_scale);
  }
}

std::string ImportGraph::weight(const std::string& key, const Shape& shape) {
  if (std::find(declared_.begin(), declared_.end(), key) != declared_.end()) return key;
  if (!int_module(key).empty()) return int_assembled(key, shape, {{key, shape}});
  if (nvfp4_keys(key)) return nvfp4_assembled(key, shape, {{key, shape}});
  const std::optional<QuantSource> q = quant_source(key, shape);
  const HfCheckpoint::Entry& e = *checkpoint_.find(key);
  proto::TensorInfo* t = model_.add_tensors();
  t->set_name(key);
  t->set_dtype(to_proto(e.entry->dtype));
  for (int64_t d : shape) t->add_shape(d);
  t->set_file(relative_file(e.file));
  declared_.push_back(key);
  used_keys_.push_back(key);
  if (q) {
    // The scale keeps its checkpoint name; a shape other than the group's ([] or [1] per
    // tensor) is viewed as the group's through a one-part assembly.
    if (std::find(declared_.begin(), declared_.end(), q->scale_key) == declared_.end()) {
      if (q->scale_shape == q->group_shape) {
        weight(q->scale_key, q->scale_shape);
      } else {
        add_assembled(q->scale_key, q->group_shape, {{q->scale_key, q->scale_shape}});
      }
    }
    // A static input scale ([] or [1]) is viewed as [1] under its checkpoint name.
    if (!q->input_scale_key.empty() &&
        std::find(declared_.begin(), declared_.end(), q->input_scale_key) == declared_.end()) {
      if (q->input_scale_shape == Shape{1}) {
        weight(q->input_scale_key, q->input_scale_shape);
      } else {
        add_assembled(q->input_scale_key, {1}, {{q->input_scale_key, q->input_scale_shape}});
      }
    }
    set_quantization(*t, q->scale_key, quant_.group, q->input_scale_key);
  }
  return key;
}

std::string ImportGraph::mxfp4_weight(const std::string& key, const Shape& shape,
                                      std::string_view what) {
  const std::string dir = checkpoint_.dir().string();
  const std::string blocks = key + "_blocks", scales = key + "_scales";
  if (std::find(declared_.begin(), declared_.end(), blocks) != declared_.end()) return blocks;
  MG_ASSERT(shape.size() >= 2, "mxfp4 weight '{}' of rank {}", key, shape.size());
  const int64_t C = shape.back();
  MG_CHECK(C % 32 == 0,
           "{}: MXFP4 tensor '{}' packs {} values per row, which is not a multiple of 32 (config "
           "{}); the checkpoint cannot hold it",
           dir, blocks, C, what);
  Shape lead_rows(shape.begin(), shape.end() - 1);
  Shape blocks_shape = lead_rows, scales_shape = lead_rows, packed = lead_rows;
  blocks_shape.push_back(C / 32);
  blocks_shape.push_back(16);
  scales_shape.push_back(C / 32);
  packed.push_back(C / 2);
  for (const auto& [name, want] :
       {std::pair{blocks, blocks_shape}, std::pair{scales, scales_shape}}) {
    const HfCheckpoint::Entry& e = require(name, want);
    MG_CHECK(e.entry->dtype == DType::kU8, "{}: MXFP4 tensor '{}' in '{}' is {}, expected U8 ({})",
             dir, name, e.file.string(), dtype_name(e.entry->dtype),
             name == blocks ? "two FP4 E2M1 codes per byte" : "E8M0 scale exponents");
  }
  // The scales as they are; the codes viewed [lead..., R, C/2] through a one-part assembly.
  weight_unchecked(scales, scales_shape);
  proto::TensorInfo* t = add_assembled(blocks, packed, {{blocks, blocks_shape}});
  proto::TensorQuantization* q = t->mutable_quantization();
  q->set_element(proto::QUANT_ELEMENT_FP4_E2M1);
  q->set_scale(scales);
  q->set_group_rows(1);
  q->set_group_cols(32);
  return blocks;
}

void ImportGraph::weight_unchecked(const std::string& key, const Shape& shape) {
  const HfCheckpoint::Entry& e = require(key, shape);
  proto::TensorInfo* t = model_.add_tensors();
  t->set_name(key);
  t->set_dtype(to_proto(e.entry->dtype));
  for (int64_t d : shape) t->add_shape(d);
  t->set_file(relative_file(e.file));
  declared_.push_back(key);
  used_keys_.push_back(key);
}

proto::TensorInfo* ImportGraph::add_assembled(const std::string& name, const Shape& shape,
                                              const std::vector<PartRef>& parts) {
  MG_ASSERT(!parts.empty(), "assembled tensor '{}' without parts", name);
  MG_ASSERT(std::find(declared_.begin(), declared_.end(), name) == declared_.end(),
            "assembled tensor '{}' declared twice", name);
  proto::TensorInfo* t = model_.add_tensors();
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  std::optional<DType> dtype;
  std::string first_key;
  for (const PartRef& part : parts) {
    const HfCheckpoint::Entry& e = require(part.key, part.shape);
    if (!dtype) {
      dtype = e.entry->dtype;
      first_key = part.key;
      t->set_dtype(to_proto(*dtype));
      t->set_file(relative_file(e.file));
    }
    MG_CHECK(e.entry->dtype == *dtype,
             "{}: tensors '{}' ({}) and '{}' ({}) are stacked into one weight and must share a "
             "dtype",
             checkpoint_.dir().string(), first_key, dtype_name(*dtype), part.key,
             dtype_name(e.entry->dtype));
    proto::TensorPart* p = t->add_parts();
    const std::string file = relative_file(e.file);
    if (file != t->file()) p->set_file(file);
    p->set_key(part.key);
    p->set_row_begin(part.row_begin);
    p->set_row_end(part.row_end);
    used_keys_.push_back(part.key);
  }
  declared_.push_back(name);
  return t;
}

namespace {

bool is_row_range(const PartRef& p) {
  return p.row_begin != 0 || p.row_end != 0;
}

// Rows [begin, end) of the part's checkpoint tensor: its row range, or all of its first dim.
std::pair<int64_t, int64_t> part_rows(const PartRef& p) {
  return is_row_range(p) ? std::pair{p.row_begin, p.row_end} : std::pair{int64_t{0}, p.shape[0]};
}

}  // namespace

std::vector<PartRef> ImportGraph::scale_parts(const std::string& name, const Shape& shape,
                                              const std::vector<PartRef>& parts,
                                              const std::vector<QuantSource>& sources,
                                              GroupShape& group) const {
  const std::string dir = checkpoint_.dir().string();
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  std::vector<PartRef> out;
  // Every part is a whole matrix or a row range of one (rank 2 in the checkpoint), and its rows
  // go to rows [offset, offset + n) of the flattened [lead * rows, cols] result.
  std::vector<int64_t> part_row_counts;
  for (const PartRef& p : parts) {
    MG_ASSERT(
        p.shape.size() >= 2 && p.shape.back() == cols && (!is_row_range(p) || p.shape.size() == 2),
        "quantized part '{}' {} of '{}' {}", p.key, shape_str(p.shape), name, shape_str(shape));
    const auto [begin, end] = part_rows(p);
    part_row_counts.push_back(is_row_range(p) ? end - begin : shape_numel(p.shape) / cols);
  }

  if (quant_.group == GroupShape::per_tensor()) {
    const bool one_source = std::all_of(parts.begin(), parts.end(),
                                        [&](const PartRef& p) { return p.key == parts[0].key; });
    if (one_source && shape_numel(shape) / (rows * cols) == 1) {
      group = GroupShape::per_tensor();
      return {{sources[0].scale_key, sources[0].scale_shape}};
    }
    // One scale per part: all parts of equal rows that tile each matrix.
    const int64_t n = part_row_counts[0];
    const bool tiles = rows % n == 0 && std::all_of(part_row_counts.begin(), part_row_counts.end(),
                                                    [&](int64_t c) { return c == n; });
    MG_CHECK(tiles,
             "{}: '{}' {} is stacked from per-tensor FP8 parts of unequal rows ('{}' has {}): "
             "their scales cannot be one scale per part",
             dir, name, shape_str(shape), parts[0].key, n);
    group = n == rows ? GroupShape::per_tensor() : GroupShape{n, -1};
    for (const QuantSource& s : sources) out.push_back({s.scale_key, s.scale_shape});
    return out;
  }

  group = quant_.group;
  const int64_t block = group.rows_in(rows);  // 1 per channel
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartRef& p = parts[i];
    const QuantSource& s = sources[i];
    const int64_t n = part_row_counts[i];
    const auto [begin, end] = part_rows(p);
    const int64_t source_rows = p.shape[p.shape.size() - 2];
    if (is_row_range(p)) {
      MG_CHECK(begin % block == 0 && (end % block == 0 || end == source_rows),
               "{}: '{}' takes rows [{}, {}) of '{}', which do not fall on its {}-row FP8 scale "
               "blocks",
               dir, name, begin, end, p.key, block);
    }
    const int64_t local = offset % rows;
    const int64_t local_end = local + n;
    MG_CHECK(local % block == 0 && (local_end % block == 0 || local_end % rows == 0) &&
                 (local_end <= rows || (local == 0 && n % rows == 0)),
             "{}: '{}' {} stacks '{}' as rows [{}, {}) of a {}-row matrix, which do not fall on "
             "{}-row FP8 scale blocks: the parts' block scales cannot be concatenated",
             dir, name, shape_str(shape), p.key, local, local_end, rows, block);
    if (is_row_range(p)) {
      out.push_back({s.scale_key, s.scale_shape, begin / block, (end + block - 1) / block});
    } else {
      out.push_back({s.scale_key, s.scale_shape});
    }
    offset += n;
  }
  return out;
}

std::string ImportGraph::assembled(const std::string& name, const Shape& shape,
                                   const std::vector<PartRef>& parts) {
  if (!parts.empty() && nvfp4_keys(parts[0].key)) return nvfp4_assembled(name, shape, parts);
  if (!parts.empty() && !int_module(parts[0].key).empty()) {
    return int_assembled(name, shape, parts);
  }
  std::vector<QuantSource> sources;
  std::optional<bool> quantized;
  for (const PartRef& part : parts) {
    const std::optional<QuantSource> q = quant_source(part.key, part.shape);
    if (quantized && *quantized != q.has_value()) {
      MG_FAIL(
          "{}: tensors '{}' and '{}' are stacked into one weight, but only one is FP8 "
          "quantized",
          checkpoint_.dir().string(), parts[0].key, part.key);
    }
    quantized = q.has_value();
    if (q) sources.push_back(*q);
  }
  proto::TensorInfo* t = add_assembled(name, shape, parts);
  if (!sources.empty()) {
    GroupShape group;
    const std::vector<PartRef> scales = scale_parts(name, shape, parts, sources, group);
    const Shape scale_shape = scale_shape_for(shape, group);
    int64_t stacked = 0;
    for (const PartRef& s : scales) {
      stacked += is_row_range(s) ? (s.row_end - s.row_begin) * shape_numel(s.shape) / s.shape[0]
                                 : shape_numel(s.shape);
    }
    MG_CHECK(stacked == shape_numel(scale_shape),
             "{}: '{}' {} with {} scales needs {} scales, but its parts' scales hold {}",
             checkpoint_.dir().string(), name, shape_str(shape), group.str(),
             shape_numel(scale_shape), stacked);
    const std::string scale_name = name + ".scale";
    add_assembled(scale_name, scale_shape, scales);
    std::string input_scale_name;
    if (quant_.activation == proto::ACT_QUANT_STATIC) {
      // Every part's input scale, stacked [parts]: the consumer takes the largest (one scale
      // per GEMM input, as vLLM does for fused and stacked layers).
      input_scale_name = name + ".input_scale";
      std::vector<PartRef> in_parts;
      for (const QuantSource& s : sources)
        in_parts.push_back({s.input_scale_key, s.input_scale_shape});
      add_assembled(input_scale_name, {static_cast<int64_t>(sources.size())}, in_parts);
    }
    set_quantization(*t, scale_name, group, input_scale_name);
  }
  return name;
}

std::optional<ImportGraph::Nvfp4Keys> ImportGraph::nvfp4_keys(const std::string& key) const {
  if (!quant_.is_nvfp4() || !key.ends_with(".weight")) return std::nullopt;
  if (quant_.method == HfQuantization::Method::kModelOptNvfp4) {
    const HfCheckpoint::Entry* e = checkpoint_.find(key);
    if (e == nullptr || e->entry->dtype != DType::kU8) return std::nullopt;
    return Nvfp4Keys{key, key + "_scale", key + "_scale_2"};
  }
  const std::string module = key.substr(0, key.size() - 7);
  if (has(key) || !has(module + ".weight_packed")) return std::nullopt;
  return Nvfp4Keys{module + ".weight_packed", module + ".weight_scale",
                   module + ".weight_global_scale"};
}

std::string ImportGraph::nvfp4_assembled(const std::string& name, const Shape& shape,
                                         const std::vector<PartRef>& parts) {
  const std::string dir = checkpoint_.dir().string();
  const int64_t C = shape.back(), R = shape[shape.size() - 2];
  MG_CHECK(C % 16 == 0,
           "{}: NVFP4 weight '{}' has rows of {} values, which is not a multiple of 16", dir, name,
           C);
  std::vector<PartRef> packed, scales, globals;
  int64_t part_rows = -1;
  for (const PartRef& p : parts) {
    MG_CHECK(!is_row_range(p) && p.shape.size() == 2 && p.shape[1] == C,
             "{}: NVFP4 weight '{}' stacks '{}' {}: only whole [rows, {}] matrices can be stacked",
             dir, name, p.key, shape_str(p.shape), C);
    MG_CHECK(part_rows == -1 || part_rows == p.shape[0],
             "{}: NVFP4 weight '{}' stacks matrices of {} and {} rows", dir, name, part_rows,
             p.shape[0]);
    part_rows = p.shape[0];
    const std::string module =
        p.key.ends_with(".weight") ? p.key.substr(0, p.key.size() - 7) : p.key;
    if (const HfQuantization::IgnoreRule* rule = quant_.ignored_by(module)) {
      MG_FAIL(
          "{}: tensor '{}' is U8 (NVFP4), but quantization_config.{} entry '{}' keeps module "
          "'{}' unquantized",
          dir, p.key, quant_.ignore_key, rule->text, module);
    }
    const auto expect = [&](const std::string& key, const Shape& s, DType dtype, const char* what) {
      const HfCheckpoint::Entry& e = require(key, s);
      MG_CHECK(e.entry->dtype == dtype, "{}: NVFP4 tensor '{}' in '{}' is {}, expected {} ({})",
               dir, key, e.file.string(), dtype_name(e.entry->dtype), dtype_name(dtype), what);
    };
    const std::optional<Nvfp4Keys> keys = nvfp4_keys(p.key);
    MG_CHECK(keys.has_value(),
             "{}: NVFP4 weight '{}' stacks '{}', which the checkpoint stores unquantized, with "
             "NVFP4 parts",
             dir, name, p.key);
    expect(keys->codes, {p.shape[0], C / 2}, DType::kU8, "two FP4 E2M1 codes per byte");
    expect(keys->scale, {p.shape[0], C / 16}, DType::kF8E4M3, "one scale per 16 values");
    // The global scale: a scalar ([] or [1]).
    const HfCheckpoint::Entry* g = checkpoint_.find(keys->global);
    const Shape gshape = g != nullptr && g->entry->shape == Shape{1} ? Shape{1} : Shape{};
    expect(keys->global, gshape, DType::kF32, "the global scale");
    packed.push_back({keys->codes, {p.shape[0], C / 2}});
    scales.push_back({keys->scale, {p.shape[0], C / 16}});
    globals.push_back({keys->global, gshape});
  }
  MG_CHECK(part_rows > 0 && R % part_rows == 0,
           "{}: NVFP4 weight '{}' {} stacks matrices of {} rows, which do not tile its {} rows",
           dir, name, shape_str(shape), part_rows, R);
  Shape packed_shape = shape, scale_shape = shape, global_shape(shape.begin(), shape.end() - 2);
  packed_shape.back() = C / 2;
  scale_shape.back() = C / 16;
  global_shape.push_back(R / part_rows);  // one global scale per stacked matrix (gate, up)
  proto::TensorInfo* t = add_assembled(name, packed_shape, packed);
  add_assembled(name + ".scale", scale_shape, scales);
  add_assembled(name + ".global_scale", global_shape, globals);
  proto::TensorQuantization* q = t->mutable_quantization();
  q->set_element(proto::QUANT_ELEMENT_FP4_E2M1);
  q->set_scale(name + ".scale");
  q->set_group_rows(1);
  q->set_group_cols(16);
  q->set_global_scale(name + ".global_scale");
  q->set_global_scale_divides(quant_.method == HfQuantization::Method::kCompressedTensorsNvfp4);
  return name;
}

proto::QuantElement ImportGraph::quant_element(const std::string& name) const {
  for (const proto::TensorInfo& t : model_.tensors()) {
    if (t.name() == name) return t.quantization().element();
  }
  return proto::QUANT_ELEMENT_FROM_DTYPE;
}

std::optional<GroupShape> ImportGraph::quant_group(const std::string& name) const {
  for (const proto::TensorInfo& t : model_.tensors()) {
    if (t.name() != name) continue;
    if (!t.has_quantization()) return std::nullopt;
    return GroupShape{t.quantization().group_rows(), t.quantization().group_cols()};
  }
  return std::nullopt;
}

proto::Node& ImportGraph::node(const std::string& name, const std::string& op,
                               std::vector<std::string> inputs) {
  proto::Node* n = model_.add_nodes();
  n->set_name(name);
  n->set_op(op);
  // Trailing absent optional inputs are dropped; inner ones stay as "" to keep positions.
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  for (std::string& in : inputs) n->add_inputs(std::move(in));
  n->add_outputs(name + ".out");
  return *n;
}

std::string ImportGraph::linear(const std::string& name, const std::string& x,
                                const std::string& weight, const std::string& bias,
                                std::optional<float> scale) {
  proto::Node& n = node(name, "linear", {x, weight, bias});
  n.mutable_linear()->set_has_bias(!bias.empty());
  if (scale) n.mutable_linear()->set_scale(*scale);
  return name + ".out";
}

std::string ImportGraph::rms_norm(const std::string& name, const std::string& x,
                                  const std::string& weight, float eps, int64_t group) {
  proto::Node& n = node(name, "rms_norm", {x, weight});
  n.mutable_rms_norm()->set_eps(eps);
  n.mutable_rms_norm()->set_group_size(group);
  n.mutable_rms_norm()->set_has_weight(!weight.empty());
  return name + ".out";
}

std::string ImportGraph::add(const std::string& name, const std::string& a, const std::string& b,
                             std::optional<float> scale) {
  proto::Node& n = node(name, "add", {a, b});
  n.mutable_add();
  if (scale) n.mutable_add()->set_scale(*scale);
  return name + ".out";
}

std::vector<std::string> ImportGraph::unused_keys() const {
  const std::set<std::string> used(used_keys_.begin(), used_keys_.end());
  std::vector<std::string> out;
  for (const std::string& name : checkpoint_.names()) {
    if (!used.contains(name)) out.push_back(name);
  }
  return out;
}

}  // namespace mg
