#include "ops/moe/reference/moe_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "framework/core/float_dtype.h"
#include "ops/moe/moe_params.h"

namespace mg::reference {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double element(const Tensor& t, int64_t i) {
  return visit_float_dtype(t.dtype(), "reference: a weight", [&](auto tag) -> double {
    using T = decltype(tag);
    const T x = static_cast<const T*>(t.raw())[i];
    if constexpr (std::is_same_v<T, double>) {
      return x;  // all 53 bits, not through float
    } else {
      return to_float(x);
    }
  });
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double silu(double x) {
  return x * sigmoid(x);
}
double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

// Softmax with the documented rules: +inf entries share the mass, all -inf gives 0.
std::vector<double> softmax(const std::vector<double>& l) {
  std::vector<double> p(l.size(), 0.0);
  const auto n_inf = std::count(l.begin(), l.end(), kInf);
  if (n_inf > 0) {
    for (size_t i = 0; i < l.size(); ++i)
      p[i] = l[i] == kInf ? 1.0 / static_cast<double>(n_inf) : 0.0;
    return p;
  }
  const double mx = l.empty() ? -kInf : *std::max_element(l.begin(), l.end());
  if (mx == -kInf) return p;
  double sum = 0;
  for (size_t i = 0; i < l.size(); ++i) sum += std::exp(l[i] - mx);
  for (size_t i = 0; i < l.size(); ++i) p[i] = std::exp(l[i] - mx) / sum;
  return p;
}

// Indices sorted by key, best first; stable, so equal keys keep ascending index order.
std::vector<int64_t> order_by(const std::vector<double>& key) {
  std::vector<int64_t> idx(key.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return key[a] > key[b]; });
  return idx;
}

double margin_at(const std::vector<double>& key, const std::vector<int64_t>& order, int64_t k) {
  if (k >= static_cast<int64_t>(order.size())) return kInf;
  const double a = key[order[k - 1]], b = key[order[k]];
  if (a == b) return 0.0;
  if (std::isinf(a) || std::isinf(b)) return kInf;
  return (a - b) / std::max(1.0, std::fabs(a));
}

}  // namespace

double activation(const ActivationConfig& act, double a, double b) {
  switch (act.kind) {
    case MoEActivation::kSiluGated:
      return silu(a) * b;
    case MoEActivation::kGeluGated:
      return gelu_erf(a) * b;
    case MoEActivation::kGeluTanhGated:
      return gelu_tanh(a) * b;
    case MoEActivation::kSwigluOai: {
      const double limit = act.swiglu_limit;
      const double g = std::min(a, limit);
      const double u = std::min(std::max(b, -limit), limit);
      return (u + 1.0) * g * sigmoid(static_cast<double>(act.swiglu_alpha) * g);
    }
    case MoEActivation::kReluSquared:
      return a > 0 ? a * a : 0.0;
    case MoEActivation::kSilu:
      return silu(a);
    case MoEActivation::kGelu:
      return gelu_erf(a);
  }
  return 0.0;
}

Routing route(const RoutingConfig& c, std::span<const float> logits, int64_t rows,
              std::span<const float> score_correction_bias) {
  const int64_t E = c.num_experts, k = c.top_k;
  Routing out;
  out.ids.resize(static_cast<size_t>(rows * k));
  out.weights.resize(static_cast<size_t>(rows * k));
  out.margin.resize(static_cast<size_t>(rows));
  const bool has_bias = c.has_score_correction_bias;
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> l(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const double v = logits[static_cast<size_t>(t * E + e)];
      l[e] = std::isnan(v) ? -kInf : v;
    }
    std::vector<double> s(static_cast<size_t>(E));
    const ScoreFunction fn = c.method == RoutingMethod::kGroupedTopK   ? c.score_function
                             : c.method == RoutingMethod::kSigmoidTopK ? ScoreFunction::kSigmoid
                                                                       : ScoreFunction::kSoftmax;
    if (fn == ScoreFunction::kSoftmax) {
      s = softmax(l);
    } else {
      for (int64_t e = 0; e < E; ++e) s[e] = sigmoid(l[e]);
    }
    // Selection keys.
    std::vector<double> key(static_cast<size_t>(E));
    const bool on_logits =
        c.method == RoutingMethod::kTopKSoftmax || c.method == RoutingMethod::kLlama4Top1Sigmoid;
    for (int64_t e = 0; e < E; ++e) {
      double v = on_logits ? l[e] : s[e];
      if (has_bias) v += score_correction_bias[static_cast<size_t>(e)];
      key[e] = std::isnan(v) ? -kInf : v;
    }
    double margin = kInf;
    std::vector<bool> kept(static_cast<size_t>(E), true);
    if (c.method == RoutingMethod::kGroupedTopK) {
      const int64_t G = c.num_groups, size = E / G;
      std::vector<double> group_score(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) {
        std::vector<double> members(key.begin() + g * size, key.begin() + (g + 1) * size);
        std::sort(members.begin(), members.end(), std::greater<>());
        group_score[g] = c.group_score == GroupScore::kMax ? members[0] : members[0] + members[1];
      }
      const std::vector<int64_t> group_order = order_by(group_score);
      margin = std::min(margin, margin_at(group_score, group_order, c.groups_kept));
      std::vector<bool> group_kept(static_cast<size_t>(G), false);
      for (int64_t j = 0; j < c.groups_kept; ++j) group_kept[group_order[j]] = true;
      for (int64_t e = 0; e < E; ++e) {
        kept[e] = group_kept[e / size];
        if (!kept[e]) key[e] = 0.0;  // HF: masked_fill(..., 0.0)
      }
    }
    const std::vector<int64_t> order = order_by(key);
    margin = std::min(margin, margin_at(key, order, k));
    out.margin[t] = margin;
    std::vector<double> w(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      out.ids[t * k + j] = static_cast<int32_t>(e);
      switch (c.method) {
        case RoutingMethod::kSoftmaxTopK:
        case RoutingMethod::kSigmoidTopK:
          w[j] = s[e];
          break;
        case RoutingMethod::kGroupedTopK:
          w[j] = (has_bias || kept[e]) ? s[e] : 0.0;
          break;
        case RoutingMethod::kTopKSoftmax:
          w[j] = l[e];  // softmax below
          break;
        case RoutingMethod::kLlama4Top1Sigmoid:
          w[j] = sigmoid(l[e]);
          break;
      }
    }
    if (c.method == RoutingMethod::kTopKSoftmax) w = softmax(w);
    if (c.renormalize) {
      double sum = 0;
      for (double v : w) sum += v;
      for (double& v : w) v /= sum + 1e-20;
    }
    for (int64_t j = 0; j < k; ++j) {
      out.weights[t * k + j] = static_cast<float>(w[j] * c.routed_scaling_factor);
    }
  }
  return out;
}

std::vector<float> experts(const MoEConfig& config, std::span<const float> x, int64_t rows,
                           std::span<const int32_t> ids, std::span<const float> weights,
                           const Tensor& w13, const Tensor& w13_bias, const Tensor& w2,
                           const Tensor& w2_bias) {
  const int64_t E = config.num_experts(), k = config.top_k(), H = config.hidden_size();
  const int64_t I = config.intermediate_size(), N1 = config.w13_rows();
  const bool gated = is_gated(config.activation().kind);
  const bool transposed = config.layout() == ExpertLayout::kTransposed;
  const bool interleaved = config.gate_up_interleaved();
  const bool on_input = config.routing().weight_on_input();
  // Element (row r of GEMM1 output, input h) of expert e, and (output h, input i) of GEMM2.
  auto w13_at = [&](int64_t e, int64_t r, int64_t h) {
    return element(w13, transposed ? (e * H + h) * N1 + r : (e * N1 + r) * H + h);
  };
  auto w2_at = [&](int64_t e, int64_t h, int64_t i) {
    return element(w2, transposed ? (e * I + i) * H + h : (e * H + h) * I + i);
  };
  auto gate_row = [&](int64_t i) { return interleaved ? 2 * i : i; };
  auto up_row = [&](int64_t i) { return !gated ? i : interleaved ? 2 * i + 1 : I + i; };

  std::vector<double> acc(static_cast<size_t>(rows * H), 0.0);
  std::vector<double> xin(static_cast<size_t>(H)), a(static_cast<size_t>(I));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * k + j)];
      if (e < 0 || e >= E) continue;
      const double w = weights[static_cast<size_t>(t * k + j)];
      for (int64_t h = 0; h < H; ++h)
        xin[h] = x[static_cast<size_t>(t * H + h)] * (on_input ? w : 1.0);
      for (int64_t i = 0; i < I; ++i) {
        double up = w13_bias.defined() ? element(w13_bias, e * N1 + up_row(i)) : 0.0;
        for (int64_t h = 0; h < H; ++h) up += w13_at(e, up_row(i), h) * xin[h];
        if (!gated) {
          a[i] = activation(config.activation(), up, 0.0);
          continue;
        }
        double gate = w13_bias.defined() ? element(w13_bias, e * N1 + gate_row(i)) : 0.0;
        for (int64_t h = 0; h < H; ++h) gate += w13_at(e, gate_row(i), h) * xin[h];
        a[i] = activation(config.activation(), gate, up);
      }
      for (int64_t h = 0; h < H; ++h) {
        double y = w2_bias.defined() ? element(w2_bias, e * H + h) : 0.0;
        for (int64_t i = 0; i < I; ++i) y += w2_at(e, h, i) * a[i];
        acc[t * H + h] += (on_input ? 1.0 : w) * y;
      }
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

std::vector<float> moe_forward(const MoEConfig& config, const std::vector<Tensor>& in) {
  auto input = [&](size_t i) { return i < in.size() ? in[i] : Tensor(); };
  const Tensor x = input(moe_input::kX);
  const int64_t M = x.dim(0), E = config.num_experts(), H = config.hidden_size();
  std::vector<float> xs(static_cast<size_t>(M * H));
  for (int64_t i = 0; i < M * H; ++i) xs[i] = static_cast<float>(element(x, i));

  // Gate.
  const Tensor router_weight = input(moe_input::kRouterWeight);
  const Tensor router_bias = input(moe_input::kRouterBias);
  std::vector<float> logits(static_cast<size_t>(M * E));
  for (int64_t t = 0; t < M; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      double v = router_bias.defined() ? element(router_bias, e) : 0.0;
      for (int64_t h = 0; h < H; ++h) v += element(router_weight, e * H + h) * xs[t * H + h];
      logits[t * E + e] = static_cast<float>(v);
    }
  }
  std::vector<float> bias;
  const Tensor score_bias = input(moe_input::kScoreCorrectionBias);
  for (int64_t e = 0; score_bias.defined() && e < E; ++e) {
    bias.push_back(static_cast<float>(element(score_bias, e)));
  }
  const Routing r = route(config.routing(), logits, M, bias);
  std::vector<float> out =
      experts(config, xs, M, r.ids, r.weights, input(moe_input::kW13), input(moe_input::kW13Bias),
              input(moe_input::kW2), input(moe_input::kW2Bias));

  // Shared experts: down(act(gate x) * up x) [* sigmoid(x . w_sg)].
  const SharedExpertsConfig& shared = config.shared();
  if (!shared.present()) return out;
  const int64_t Is = shared.intermediate_size;
  const bool gated = is_gated(shared.activation.kind);
  const Tensor sg = input(moe_input::kSharedGate), su = input(moe_input::kSharedUp);
  const Tensor sd = input(moe_input::kSharedDown), seg = input(moe_input::kSharedExpertGate);
  std::vector<double> a(static_cast<size_t>(Is));
  for (int64_t t = 0; t < M; ++t) {
    for (int64_t i = 0; i < Is; ++i) {
      double up = 0, gate = 0;
      for (int64_t h = 0; h < H; ++h) up += element(su, i * H + h) * xs[t * H + h];
      if (!gated) {
        a[i] = activation(shared.activation, up, 0.0);
        continue;
      }
      for (int64_t h = 0; h < H; ++h) gate += element(sg, i * H + h) * xs[t * H + h];
      a[i] = activation(shared.activation, gate, up);
    }
    double scale = 1.0;
    if (shared.has_gate) {
      double g = 0;
      for (int64_t h = 0; h < H; ++h) g += element(seg, h) * xs[t * H + h];
      scale = sigmoid(g);
    }
    for (int64_t h = 0; h < H; ++h) {
      double y = 0;
      for (int64_t i = 0; i < Is; ++i) y += element(sd, h * Is + i) * a[i];
      out[t * H + h] = static_cast<float>(out[t * H + h] + scale * y);
    }
  }
  return out;
}

}  // namespace mg::reference
