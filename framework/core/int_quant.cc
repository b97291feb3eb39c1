#include "framework/core/int_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"

namespace mg {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// AWQ's nibble of output column 8w + m: [0, 4, 1, 5, 2, 6, 3, 7][m] (the inverse of its pack
// order [0, 2, 4, 6, 1, 3, 5, 7]).
constexpr int kAwqNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int64_t lead_count(const Shape& logical) {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < logical.size(); ++i) n *= logical[i];
  return n;
}

Shape lead_shape(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

Shape cat(Shape a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail);
  return a;
}

}  // namespace

std::string_view int_packing_name(IntPacking packing) {
  switch (packing) {
    case IntPacking::kNone:
      return "canonical";
    case IntPacking::kGptq:
      return "GPTQ";
    case IntPacking::kAwq:
      return "AWQ";
    case IntPacking::kCompressedTensors:
      return "compressed-tensors";
  }
  return "?";
}

int quant_element_bits(QuantElement element) {
  switch (element) {
    case QuantElement::kInt4:
    case QuantElement::kUInt4:
      return 4;
    case QuantElement::kInt8:
    case QuantElement::kUInt8:
      return 8;
    case QuantElement::kFromDtype:
    case QuantElement::kFp4E2M1:
      break;
  }
  MG_ASSERT(false, "quant element {} is not an integer element", quant_element_name(element));
  return 0;
}

bool quant_element_signed(QuantElement element) {
  return element == QuantElement::kInt4 || element == QuantElement::kInt8;
}

DType int_codes_dtype(QuantElement element) {
  return element == QuantElement::kInt8 ? DType::kI8 : DType::kU8;
}

int64_t int_codes_row_bytes(QuantElement element, int64_t C) {
  return quant_element_bits(element) == 4 ? ceil_div(C, 2) : C;
}

Shape int_codes_shape(QuantElement element, const Shape& logical) {
  MG_ASSERT(logical.size() >= 2, "integer codes of rank {}", logical.size());
  Shape s = logical;
  s.back() = int_codes_row_bytes(element, logical.back());
  return s;
}

void dequantize_int_rows(const Tensor& codes, const WeightQuantization& q, int64_t m, int64_t r0,
                         int64_t r1, float* out) {
  const Shape& logical = q.logical_shape;
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  const int64_t row_bytes = int_codes_row_bytes(q.element, C);
  const int64_t G = q.scale.dim(-1);
  const int64_t gc = q.group.cols_in(C);
  const auto* base = static_cast<const uint8_t*>(codes.raw()) + m * R * row_bytes;
  const float* scale = q.scale.data<float>() + m * R * G;
  const float* zero = q.zero_point.defined() ? q.zero_point.data<float>() + m * R * G : nullptr;
  const float midpoint = quant_element_signed(q.element)
                             ? 0.0f
                             : static_cast<float>(1 << (quant_element_bits(q.element) - 1));
  const int64_t P = q.g_idx.defined() ? q.g_idx.dim(-2) : 1;
  const int32_t* gidx = q.g_idx.defined() ? q.g_idx.data<int32_t>() + m * P * C : nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = base + r * row_bytes;
    const float* srow = scale + r * G;
    const float* zrow = zero ? zero + r * G : nullptr;
    const int32_t* grow = gidx ? gidx + (r / (R / P)) * C : nullptr;
    float* dst = out + (r - r0) * C;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = grow ? grow[c] : c / gc;
      const float z = zrow ? zrow[g] : midpoint;
      dst[c] = (static_cast<float>(int_code_at(row, q.element, c)) - z) * srow[g];
    }
  }
}

Tensor dequantize_int_cpu(const Tensor& codes, const WeightQuantization& q) {
  MG_ASSERT(q.is_integer() && q.logical_shape.size() >= 2 && codes.device().is_cpu() &&
                codes.shape() == int_codes_shape(q.element, q.logical_shape) &&
                q.scale.dtype() == DType::kF32 && q.scale.device().is_cpu(),
            "dequantize {}: codes {} logical {} scale {}", quant_element_name(q.element),
            codes.str(), shape_str(q.logical_shape), q.scale.defined() ? q.scale.str() : "none");
  Tensor out = Tensor::empty_cpu(DType::kF32, q.logical_shape);
  const int64_t R = q.logical_shape[q.logical_shape.size() - 2], C = q.logical_shape.back();
  const int64_t matrices = lead_count(q.logical_shape);
  for (int64_t m = 0; m < matrices; ++m) {
    dequantize_int_rows(codes, q, m, 0, R, out.data<float>() + m * R * C);
  }
  return out;
}

void pack_int_codes(const int32_t* values, int64_t rows, int64_t C, QuantElement element,
                    uint8_t* out) {
  const int64_t row_bytes = int_codes_row_bytes(element, C);
  const bool four = quant_element_bits(element) == 4;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = out + r * row_bytes;
    const int32_t* src = values + r * C;
    if (four) {
      std::memset(dst, 0, static_cast<size_t>(row_bytes));
      for (int64_t c = 0; c < C; ++c) {
        dst[c >> 1] |= static_cast<uint8_t>((src[c] & 0xF) << ((c & 1) * 4));
      }
    } else {
      for (int64_t c = 0; c < C; ++c) dst[c] = static_cast<uint8_t>(src[c] & 0xFF);
    }
  }
}

int64_t int_stored_pieces(IntPacking packing, const Shape& logical, const Shape& stored_codes) {
  switch (packing) {
    case IntPacking::kNone:
    case IntPacking::kCompressedTensors:
      return 1;
    case IntPacking::kGptq:
    case IntPacking::kAwq:
      if (stored_codes.size() == logical.size() + 1) return stored_codes[logical.size() - 2];
      return 1;
  }
  return 1;
}

IntStoredShapes int_stored_shapes(QuantElement element, IntPacking packing, const Shape& logical,
                                  int64_t group_cols, int64_t pieces) {
  const Shape lead = lead_shape(logical);
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  const int64_t G = group_cols < 0 ? 1 : ceil_div(C, group_cols);
  const int64_t bits = quant_element_bits(element), p = 32 / bits;
  const int64_t P = std::max<int64_t>(pieces, 1), Rp = R / P;
  // The piece dimension appears only when there is more than one piece.
  auto with_pieces = [&](std::initializer_list<int64_t> tail) {
    Shape s = lead;
    if (P > 1) s.push_back(P);
    s.insert(s.end(), tail);
    return s;
  };
  IntStoredShapes out;
  switch (packing) {
    case IntPacking::kNone:
      out.codes = int_codes_shape(element, logical);
      out.scale = cat(lead, {R, G});
      out.zero_point = out.scale;
      out.g_idx = with_pieces({C});
      break;
    case IntPacking::kGptq:
      out.codes = with_pieces({ceil_div(C, p), Rp});
      out.scale = with_pieces({G, Rp});
      out.zero_point = with_pieces({G, ceil_div(Rp, p)});
      out.g_idx = with_pieces({C});
      break;
    case IntPacking::kAwq:
      out.codes = with_pieces({C, ceil_div(Rp, 8)});
      out.scale = with_pieces({G, Rp});
      out.zero_point = with_pieces({G, ceil_div(Rp, 8)});
      out.g_idx = with_pieces({C});
      break;
    case IntPacking::kCompressedTensors:
      out.codes = cat(lead, {R, ceil_div(C, p)});
      out.scale = cat(lead, {R, G});
      out.zero_point = cat(lead, {ceil_div(R, p), G});
      out.g_idx = with_pieces({C});
      break;
  }
  return out;
}

std::pair<Tensor, WeightQuantization> convert_int_weight(const StoredIntWeight& w) {
  const Shape& logical = w.logical_shape;
  MG_ASSERT(logical.size() >= 2, "{}: logical shape {}", w.what, shape_str(logical));
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  const int64_t M = lead_count(logical);
  const int bits = quant_element_bits(w.element);
  const int64_t p = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t P = int_stored_pieces(w.packing, logical, w.codes.shape());
  MG_CHECK(P >= 1 && R % P == 0, "{}: {} output rows do not split into {} checkpoint matrices",
           w.what, R, P);
  const int64_t Rp = R / P;
  const int64_t G = w.group_cols < 0 ? 1 : ceil_div(C, w.group_cols);
  const IntStoredShapes want = int_stored_shapes(w.element, w.packing, logical, w.group_cols, P);
  MG_ASSERT(w.codes.shape() == want.codes && w.scale.shape() == want.scale,
            "{}: stored codes {} scale {}, expected {} {} (checked by the verifier)", w.what,
            w.codes.str(), w.scale.str(), shape_str(want.codes), shape_str(want.scale));

  WeightQuantization q;
  q.element = w.element;
  q.logical_shape = logical;
  q.group = GroupShape{1, w.group_cols};
  Tensor codes = Tensor::empty_cpu(int_codes_dtype(w.element), int_codes_shape(w.element, logical));
  q.scale = Tensor::empty_cpu(DType::kF32, cat(lead_shape(logical), {R, G}));
  const Tensor scale_in = to_f32_cpu(w.scale);
  const float* s_in = scale_in.data<float>();
  float* s_out = q.scale.data<float>();
  const bool transposed = w.packing == IntPacking::kGptq || w.packing == IntPacking::kAwq;

  // Scales: canonical [R, G] per matrix; the transposed packings store [P, G, Rp].
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t g = 0; g < G; ++g) {
        const int64_t src =
            transposed ? ((m * P + r / Rp) * G + g) * Rp + r % Rp : (m * R + r) * G + g;
        s_out[(m * R + r) * G + g] = s_in[src];
      }
    }
  }

  // Codes, one row at a time through an int buffer.
  std::vector<int32_t> row(static_cast<size_t>(C));
  const int64_t row_bytes = int_codes_row_bytes(w.element, C);
  auto* c_out = static_cast<uint8_t*>(codes.raw());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t piece = r / Rp, rl = r % Rp;
      switch (w.packing) {
        case IntPacking::kNone: {
          const auto* src = static_cast<const uint8_t*>(w.codes.raw()) + (m * R + r) * row_bytes;
          std::memcpy(c_out + (m * R + r) * row_bytes, src, static_cast<size_t>(row_bytes));
          continue;
        }
        case IntPacking::kGptq: {
          const auto* words = w.codes.data<int32_t>() + (m * P + piece) * ceil_div(C, p) * Rp;
          for (int64_t c = 0; c < C; ++c) {
            const auto word = static_cast<uint32_t>(words[(c / p) * Rp + rl]);
            row[c] = static_cast<int32_t>((word >> (bits * (c % p))) & mask);
          }
          break;
        }
        case IntPacking::kAwq: {
          const int64_t W = ceil_div(Rp, 8);
          const auto* words = w.codes.data<int32_t>() + (m * P + piece) * C * W;
          for (int64_t c = 0; c < C; ++c) {
            const auto word = static_cast<uint32_t>(words[c * W + rl / 8]);
            row[c] = static_cast<int32_t>((word >> (4 * kAwqNibbleOfColumn[rl % 8])) & 0xF);
          }
          break;
        }
        case IntPacking::kCompressedTensors: {
          const auto* words = w.codes.data<int32_t>() + (m * R + r) * ceil_div(C, p);
          for (int64_t c = 0; c < C; ++c) {
            const auto word = static_cast<uint32_t>(words[c / p]);
            row[c] = static_cast<int32_t>((word >> (bits * (c % p))) & mask);
          }
          break;
        }
      }
      pack_int_codes(row.data(), 1, C, w.element, c_out + (m * R + r) * row_bytes);
    }
  }

  // Zero points: F32 [R, G] per matrix.
  if (w.zero_point.defined()) {
    MG_CHECK(!quant_element_signed(w.element),
             "{}: signed {} codes take no zero point (unsigned codes do)", w.what,
             quant_element_name(w.element));
    MG_ASSERT(w.zero_point.shape() == want.zero_point, "{}: zero point {}, expected {}", w.what,
              w.zero_point.str(), shape_str(want.zero_point));
    q.zero_point = Tensor::empty_cpu(DType::kF32, q.scale.shape());
    float* z_out = q.zero_point.data<float>();
    const int64_t zmax = (1 << bits) - 1;
    // Canonical files: U8 codes-unit zeros, or any float dtype.
    const Tensor z_float = w.packing == IntPacking::kNone && w.zero_point.dtype() != DType::kU8
                               ? to_f32_cpu(w.zero_point)
                               : Tensor();
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t r = 0; r < R; ++r) {
        const int64_t piece = r / Rp, rl = r % Rp;
        for (int64_t g = 0; g < G; ++g) {
          int64_t z = 0;
          switch (w.packing) {
            case IntPacking::kNone: {
              const Tensor& zt = w.zero_point;
              z = zt.dtype() == DType::kU8
                      ? static_cast<const uint8_t*>(zt.raw())[(m * R + r) * G + g]
                      : static_cast<int64_t>(
                            std::lround(z_float.data<float>()[(m * R + r) * G + g]));
              break;
            }
            case IntPacking::kGptq: {
              const int64_t W = ceil_div(Rp, p);
              const auto word = static_cast<uint32_t>(
                  w.zero_point.data<int32_t>()[((m * P + piece) * G + g) * W + rl / p]);
              z = (word >> (bits * (rl % p))) & mask;
              break;
            }
            case IntPacking::kAwq: {
              const int64_t W = ceil_div(Rp, 8);
              const auto word = static_cast<uint32_t>(
                  w.zero_point.data<int32_t>()[((m * P + piece) * G + g) * W + rl / 8]);
              z = (word >> (4 * kAwqNibbleOfColumn[rl % 8])) & 0xF;
              break;
            }
            case IntPacking::kCompressedTensors: {
              const auto word = static_cast<uint32_t>(
                  w.zero_point.data<int32_t>()[(m * ceil_div(R, p) + r / p) * G + g]);
              z = (word >> (bits * (r % p))) & mask;
              break;
            }
          }
          z += w.zero_point_offset;
          MG_CHECK(
              z >= 0 && z <= zmax,
              "{}: zero point {} (row {}, group {}{}) is outside the {}-bit code range [0, {}]",
              w.what, z, r, g, w.zero_point_offset ? ", after the v1 offset +1" : "", bits, zmax);
          z_out[(m * R + r) * G + g] = static_cast<float>(z);
        }
      }
    }
  }

  // g_idx: kept as I32 [lead..., P, C] unless it is the trivial c / g for every piece.
  if (w.g_idx.defined()) {
    MG_CHECK(w.group_cols > 0, "{}: g_idx needs group-wise scales (group_cols >= 1)", w.what);
    // [lead..., C] or [lead..., Pg, C]: one g_idx per checkpoint matrix of Pg per logical one.
    const int64_t Pg = w.g_idx.rank() == static_cast<int>(logical.size()) ? w.g_idx.dim(-2) : 1;
    MG_ASSERT(w.g_idx.numel() == M * Pg * C && R % Pg == 0, "{}: g_idx {} for logical {}", w.what,
              w.g_idx.str(), shape_str(logical));
    const Tensor& g32 = w.g_idx;
    const int32_t* gi = g32.data<int32_t>();
    bool trivial = true;
    for (int64_t i = 0; i < g32.numel(); ++i) {
      const int64_t c = i % C;
      MG_CHECK(gi[i] >= 0 && gi[i] < G,
               "{}: g_idx[{}] of input column {} is {}, outside [0, {}) (the scale groups)", w.what,
               i, c, gi[i], G);
      trivial = trivial && gi[i] == c / w.group_cols;
    }
    if (!trivial) {
      Shape s = lead_shape(logical);
      s.push_back(Pg);
      s.push_back(C);
      q.g_idx = Tensor::empty_cpu(DType::kI32, s);
      std::memcpy(q.g_idx.raw(), gi, static_cast<size_t>(g32.numel()) * sizeof(int32_t));
    }
  }
  return {std::move(codes), std::move(q)};
}

void quantize_int_rows(const float* w, int64_t rows, int64_t C, QuantElement element,
                       int64_t group_cols, uint8_t* codes, float* scale, float* zero) {
  const int64_t gc = group_cols < 0 ? C : group_cols;
  const int64_t G = group_cols < 0 ? 1 : ceil_div(C, group_cols);
  const int bits = quant_element_bits(element);
  const bool sym = quant_element_signed(element);
  MG_ASSERT(sym || zero != nullptr, "quantize_int_rows: {} needs zero points",
            quant_element_name(element));
  const int32_t qmax = sym ? (1 << (bits - 1)) - 1 : (1 << bits) - 1;
  const int32_t qmin = sym ? -(1 << (bits - 1)) : 0;
  std::vector<int32_t> row(static_cast<size_t>(C));
  const int64_t row_bytes = int_codes_row_bytes(element, C);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = w + r * C;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * gc, c1 = std::min(C, c0 + gc);
      float lo = 0.0f, hi = 0.0f, amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) {
        lo = std::min(lo, x[c]);
        hi = std::max(hi, x[c]);
        amax = std::max(amax, std::fabs(x[c]));
      }
      float s = sym ? amax / static_cast<float>(qmax) : (hi - lo) / static_cast<float>(qmax);
      if (!(s > 0.0f)) s = 1.0f;
      float z = 0.0f;
      if (!sym) {
        z = std::clamp(std::nearbyint(-lo / s), 0.0f, static_cast<float>(qmax));
        zero[r * G + g] = z;
      }
      scale[r * G + g] = s;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = std::nearbyint(x[c] / s) + z;
        row[c] =
            static_cast<int32_t>(std::clamp(v, static_cast<float>(qmin), static_cast<float>(qmax)));
      }
    }
    pack_int_codes(row.data(), 1, C, element, codes + r * row_bytes);
  }
}

std::pair<Tensor, WeightQuantization> quantize_int_cpu(const Tensor& w, QuantElement element,
                                                       int64_t group_cols) {
  MG_ASSERT(w.dtype() == DType::kF32 && w.device().is_cpu() && w.rank() >= 2,
            "quantize_int_cpu: {}", w.str());
  const Shape& logical = w.shape();
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  const int64_t G = group_cols < 0 ? 1 : ceil_div(C, group_cols);
  WeightQuantization q;
  q.element = element;
  q.logical_shape = logical;
  q.group = GroupShape{1, group_cols};
  q.scale = Tensor::empty_cpu(DType::kF32, cat(lead_shape(logical), {R, G}));
  if (!quant_element_signed(element))
    q.zero_point = Tensor::empty_cpu(DType::kF32, q.scale.shape());
  Tensor codes = Tensor::empty_cpu(int_codes_dtype(element), int_codes_shape(element, logical));
  quantize_int_rows(w.data<float>(), lead_count(logical) * R, C, element, group_cols,
                    static_cast<uint8_t*>(codes.raw()), q.scale.data<float>(),
                    q.zero_point.defined() ? q.zero_point.data<float>() : nullptr);
  return {std::move(codes), std::move(q)};
}

}  // namespace mg
