// Running the shared op case table: a case's inputs, the op's reference, and the CPU side of
// the check (see op_cases.h for the table and op_case_check.h for what each function does).
#include "tests/testing/op_case_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "framework/core/error.h"
#include "ops/nn/add/add.h"
#include "ops/nn/attention/attention.h"
#include "ops/nn/attn_temperature/attn_temperature.h"
#include "ops/nn/clamp/clamp.h"
#include "ops/nn/concat_heads/concat_heads.h"
#include "ops/nn/embedding/embedding.h"
#include "ops/nn/gated_mlp/gated_mlp.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/rms_norm/rms_norm.h"
#include "ops/nn/rope/rope.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"

namespace mg::testing {

namespace {

// FNV-1a: a seed that depends on the case's name only, so a case keeps its inputs when others
// are added or removed.
uint32_t seed_of(std::string_view name, size_t input) {
  uint32_t h = 2166136261u;
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 16777619u;
  return h + static_cast<uint32_t>(input) * 7919u;
}

const Tensor& input(const std::vector<Tensor>& inputs, size_t i) {
  MG_ASSERT(i < inputs.size() && inputs[i].defined(), "op_reference: input {} missing", i);
  return inputs[i];
}

const float* f32(const std::vector<Tensor>& inputs, size_t i) {
  return input(inputs, i).data<float>();
}

const float* f32_or_null(const std::vector<Tensor>& inputs, size_t i) {
  return i < inputs.size() && inputs[i].defined() ? inputs[i].data<float>() : nullptr;
}

std::optional<float> min_of(const proto::ClampParams& p) {
  return p.has_min() ? std::optional<float>(p.min()) : std::nullopt;
}

std::optional<float> max_of(const proto::ClampParams& p) {
  return p.has_max() ? std::optional<float>(p.max()) : std::nullopt;
}

}  // namespace

std::vector<Tensor> make_inputs(const OpCase& c) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const CaseInput& spec = c.inputs[i];
    switch (spec.fill) {
      case CaseInput::Fill::kAbsent:
        out.emplace_back();
        break;
      case CaseInput::Fill::kRandom:
        out.push_back(random_tensor(spec.shape, seed_of(c.name, i), spec.lo, spec.hi));
        break;
      case CaseInput::Fill::kRandomWithSpecials: {
        const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  -0.0f,
                                  1e4f,
                                  -1e4f};
        const size_t n = static_cast<size_t>(shape_numel(spec.shape));
        std::vector<float> v = random_floats(n, seed_of(c.name, i), spec.lo, spec.hi);
        // Spread over the tensor, as many as fit.
        for (size_t k = 0; k < std::size(specials) && k < n; ++k) {
          v[k * n / std::size(specials)] = specials[k];
        }
        out.push_back(tensor_from(spec.shape, v));
        break;
      }
      case CaseInput::Fill::kI32: {
        Tensor t = Tensor::empty_cpu(DType::kI32, spec.shape);
        MG_ASSERT(static_cast<size_t>(t.numel()) == spec.values.size(), "case {}: {} values",
                  c.name, spec.values.size());
        if (!spec.values.empty()) {
          std::memcpy(t.raw(), spec.values.data(), spec.values.size() * sizeof(int32_t));
        }
        out.push_back(std::move(t));
        break;
      }
    }
  }
  return out;
}

Tensor op_reference(const proto::Node& node, const std::vector<Tensor>& inputs) {
  const std::string& op = node.op();
  const Tensor& x = input(inputs, 0);
  if (op == "embedding") {
    const Tensor& table = input(inputs, 1);
    Tensor out = Tensor::empty_cpu(DType::kF32, {x.dim(0), table.dim(1)});
    embedding_reference(
        x.data<int32_t>(), x.dim(0), table.data<float>(), table.dim(0), table.dim(1),
        node.embedding().has_scale() ? node.embedding().scale() : 1.0f, out.data<float>());
    return out;
  }
  Tensor out;
  if (op == "rms_norm") {
    const proto::RmsNormParams& p = node.rms_norm();
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    rms_norm_reference(x.data<float>(), x.dim(0), x.dim(1),
                       p.group_size() == 0 ? x.dim(1) : p.group_size(), f32_or_null(inputs, 1),
                       p.eps(), out.data<float>());
  } else if (op == "linear") {
    const Tensor& w = input(inputs, 1);
    out = Tensor::empty_cpu(DType::kF32, {x.dim(0), w.dim(0)});
    linear_reference(x.data<float>(), x.dim(0), x.dim(1), w.data<float>(), w.dim(0),
                     f32_or_null(inputs, 2),
                     node.linear().has_scale() ? node.linear().scale() : 1.0f, out.data<float>());
  } else if (op == "rope") {
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    rope_reference(node.rope(), x.data<float>(), input(inputs, 1).data<int32_t>(), x.dim(0),
                   out.data<float>());
  } else if (op == "add") {
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    add_reference(x.data<float>(), f32(inputs, 1),
                  node.add().has_scale() ? node.add().scale() : 1.0f, out.data<float>(), x.numel());
  } else if (op == "gated_mlp") {
    const Tensor& gate = input(inputs, 1);
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    gated_mlp_reference(node.gated_mlp().activation(), x.data<float>(), x.dim(0), x.dim(1),
                        gate.dim(0), gate.data<float>(), f32(inputs, 2), f32(inputs, 3),
                        out.data<float>());
  } else if (op == "attention") {
    const proto::AttentionParams& p = node.attention();
    const int64_t tokens = x.dim(0);
    const int32_t* positions = input(inputs, 3).data<int32_t>();
    for (int64_t t = 0; t < tokens; ++t) {
      MG_ASSERT(positions[t] == t, "attention cases are prefills from position 0");
    }
    out = Tensor::empty_cpu(DType::kF32, {tokens, p.num_heads() * attention_v_head_dim(p)});
    attention_reference(p, x.data<float>(), positions, tokens, f32(inputs, 1), f32(inputs, 2),
                        tokens, f32_or_null(inputs, 4), out.data<float>());
  } else if (op == "clamp") {
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    clamp_reference(x.data<float>(), x.numel(), min_of(node.clamp()), max_of(node.clamp()),
                    out.data<float>());
  } else if (op == "concat_heads") {
    const proto::ConcatHeadsParams& p = node.concat_heads();
    const Tensor& b = input(inputs, 1);
    out = Tensor::empty_cpu(DType::kF32,
                            {x.dim(0), p.num_heads() * (p.a_head_dim() + p.b_head_dim())});
    concat_heads_reference(x.data<float>(), b.data<float>(), x.dim(0), p.num_heads(),
                           p.a_head_dim(), b.dim(1) / p.b_head_dim(), p.b_head_dim(),
                           out.data<float>());
  } else if (op == "attn_temperature") {
    const proto::AttnTemperatureParams& p = node.attn_temperature();
    out = Tensor::empty_cpu(DType::kF32, x.shape());
    attn_temperature_reference(x.data<float>(), input(inputs, 1).data<int32_t>(), x.dim(0),
                               x.dim(1), p.attn_scale(), p.floor_scale(), out.data<float>());
  } else {
    MG_FAIL("op_reference: no reference for op '{}'", op);
  }
  return out;
}

void expect_same_values(std::span<const float> got, std::span<const float> want) {
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
    if (!same && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << "first at element " << first << ": got " << got[first] << ", want "
                        << want[first];
}

void expect_cpu_cases_match_reference(std::string_view op) {
  for (const OpCase* c : op_cases_of(op)) {
    SCOPED_TRACE(c->name);
    const std::vector<Tensor> inputs = make_inputs(*c);
    const std::vector<Tensor> out = run_cpu_op(c->node, inputs, c->cpu_threads);
    ASSERT_EQ(out.size(), 1u);
    const Tensor want = op_reference(c->node, inputs);
    ASSERT_EQ(out[0].shape(), want.shape());
    switch (c->match) {
      case Match::kExact:
        expect_same_values(span_of(out[0]), span_of(want));
        break;
      case Match::kClose:
      case Match::kCloseAndGpuEqualsCpuKernel:
        EXPECT_LT(normalized_error(span_of(out[0]), span_of(want)), c->cpu_tolerance);
        break;
    }
  }
}

}  // namespace mg::testing
