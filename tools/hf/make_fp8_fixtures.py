#!/usr/bin/env python3
"""Tiny FP8 Hugging Face checkpoints and their goldens, the references of
tests/e2e/hf_fp8_golden_test.cc.

Each fixture starts as a tiny random fp32 model (as tools/hf/make_fixtures.py builds them), saved
with save_pretrained; then every Linear weight of attention and MLPs (dense, shared and per-expert)
is quantized as the checkpoint format says and written exactly in the Hub layout:

  fp8 block (DeepSeek-V3, Qwen3 "-FP8"): per 128x128 block (the last ones ragged) scale =
      amax / 448, code = e4m3(w / scale); `weight` F8_E4M3 [out, in] and `weight_scale_inv` F32
      [ceil(out/128), ceil(in/128)] holding the scale (it multiplies); config.json gets
      quantization_config {quant_method fp8, fmt e4m3, activation_scheme dynamic,
      weight_block_size [128, 128]} (Qwen3: plus modules_to_not_convert as its releases list it).
  compressed-tensors float-quantized: scale per output row ([out, 1]) or per tensor ([1]),
      `weight_scale`, input activations dynamic per token; ignore ["lm_head", "re:.*mlp.gate$"].

Routers, norms, embeddings and lm_head stay fp32. The goldens come from the DEQUANTIZED fp32 model
(codes x scales written back into the fp32 checkpoint, reloaded by transformers; transformers 5.17
cannot run FP8 checkpoints on the CPU itself, see README_fp8.md):

  logits.npy          W8A16: activations unquantized (moegraph --activation-quant none)
  logits_w8a8.npy     W8A8 as moegraph runs it today: the routed experts' GEMM inputs (the MoE
                      input and silu(gate) * up) replaced by codes x scales of the per-token
                      dynamic quantization of framework/core/fp8.h quantize_fp8_e4m3_group (per
                      128 channels, the last group ragged, or per token; scale =
                      max(amax, 1e-10) / 448 in fp32, RNE to e4m3) - DeepSeek's act_quant
  logits_w8a8_all.npy the same at the input of EVERY quantized Linear (the checkpoint's own
                      semantics: attention, dense and shared MLPs too), for a native FP8 linear
  reference.json      prompt, greedy ids of each mode, the measured sensitivity (below)

Sensitivity: the W8A8 goldens are recomputed with the embedding output perturbed by a relative
1e-7 (10 seeds); the largest normalised change is recorded, since an FP8 activation rounding that
flips moves the logits by far more than the perturbation itself.

    /work/.venv-hf/bin/python tools/hf/make_fp8_fixtures.py [--out tests/fixtures/hf] [name ...]

Pinned versions as make_fixtures.py: transformers==5.17.0, torch==2.11.0.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

PROMPT = [1, 17, 42, 5, 59, 23, 63, 8, 37, 3, 50, 56]
GREEDY_TOKENS = 6
FP8_MAX = 448.0
ACT_AMAX_FLOOR = 1e-10  # framework/core/fp8.h kFp8ActAmaxFloor
PERTURBATION = 1e-7
PERTURBATION_SEEDS = 10
FLIP_TRIALS = 20

COMMON = dict(vocab_size=64, max_position_embeddings=64, tie_word_embeddings=False,
              eos_token_id=2, initializer_range=0.08)

QWEN3_SMALL = dict(COMMON, hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                   head_dim=32, num_hidden_layers=2, intermediate_size=48,
                   moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                   norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0])


DEEPSEEK_SMALL = dict(COMMON, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                      num_hidden_layers=2, first_k_dense_replace=1, intermediate_size=48,
                      moe_intermediate_size=16, n_routed_experts=8, n_shared_experts=1,
                      num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                      norm_topk_prob=True, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
                      qk_rope_head_dim=4, v_head_dim=8, rope_interleave=True)


def fixtures():
    """name -> dict(config class, model class, kwargs, seed, scheme, notes)."""
    import transformers as t

    return {
        "deepseek_v3_fp8": dict(
            config=t.DeepseekV3Config, model=t.DeepseekV3ForCausalLM, seed=31, scheme="block",
            kwargs=dict(COMMON, hidden_size=144, num_attention_heads=2, num_key_value_heads=2,
                        num_hidden_layers=1, first_k_dense_replace=0, intermediate_size=96,
                        moe_intermediate_size=128, n_routed_experts=4, n_shared_experts=1,
                        num_experts_per_tok=2, n_group=2, topk_group=1,
                        routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=96,
                        kv_lora_rank=128, qk_nope_head_dim=128, qk_rope_head_dim=32,
                        v_head_dim=128, rope_interleave=True,
                        rope_scaling={"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 16, "mscale": 1.0,
                                      "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
            notes="128x128 blocks: hidden 144 and q_lora_rank 96 ragged; kv_a (128 latent + 32 "
                  "rope rows) and kv_b (2 heads of 128 k_nope + 128 v rows) split on block rows; "
                  "4 experts of 128 (w13 blocks align), shared expert, noaux_tc, YaRN"),
        "qwen3_moe_fp8": dict(
            config=t.Qwen3MoeConfig, model=t.Qwen3MoeForCausalLM, seed=32, scheme="block",
            kwargs=dict(COMMON, hidden_size=144, num_attention_heads=2, num_key_value_heads=1,
                        head_dim=64, num_hidden_layers=2, intermediate_size=96,
                        moe_intermediate_size=128, num_experts=4, num_experts_per_tok=2,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0]),
            notes="128x128 blocks: hidden 144, k/v 64 rows and the dense MLP's 96 ragged; layer 0 "
                  "dense FP8 MLP, layer 1 4 experts of 128; modules_to_not_convert as Qwen lists"),
        "deepseek_v3_ct_fp8_channel": dict(
            config=t.DeepseekV3Config, model=t.DeepseekV3ForCausalLM, seed=35, scheme="channel",
            kwargs=DEEPSEEK_SMALL,
            notes="compressed-tensors per channel on MLA: kv_a and kv_b (4 heads) split take "
                  "their scale rows; layer 0 dense, 8 experts and a shared expert"),
        "deepseek_v3_ct_fp8_tensor": dict(
            config=t.DeepseekV3Config, model=t.DeepseekV3ForCausalLM, seed=36, scheme="tensor",
            kwargs=DEEPSEEK_SMALL,
            notes="compressed-tensors per tensor on MLA: the kv_a / kv_b splits keep their "
                  "tensor's one scale; w13 one scale per projection"),
        "qwen3_moe_ct_fp8_channel": dict(
            config=t.Qwen3MoeConfig, model=t.Qwen3MoeForCausalLM, seed=33, scheme="channel",
            kwargs=QWEN3_SMALL,
            notes="compressed-tensors float-quantized, one scale per output row, dynamic per-token "
                  "activations, ignore with a re: entry"),
        "qwen3_moe_ct_fp8_tensor": dict(
            config=t.Qwen3MoeConfig, model=t.Qwen3MoeForCausalLM, seed=34, scheme="tensor",
            kwargs=QWEN3_SMALL,
            notes="compressed-tensors float-quantized, one scale per matrix (w13: per projection), "
                  "dynamic per-token activations"),
        "qwen3_moe_ct_fp8_static": dict(
            config=t.Qwen3MoeConfig, model=t.Qwen3MoeForCausalLM, seed=37, scheme="tensor",
            static=True, kwargs=QWEN3_SMALL,
            notes="compressed-tensors per tensor with STATIC per-tensor input scales (input_scale "
                  "calibrated on the prompt at 0.75 of its amax, so the largest inputs saturate "
                  "at 448); experts' scales differ and the layer takes the largest"),
    }


def is_quantized_linear(key):
    """Attention and MLP projections (dense, shared, per expert); not routers, norms, embeddings,
    lm_head: the modules DeepSeek's and Qwen's FP8 releases quantize."""
    return key.endswith("_proj.weight") or key.endswith("_proj_with_mqa.weight")


# ---- the weight quantizers, as the formats define them --------------------------------------

def quantize_block(w, block=128):
    """w [out, in] fp32 -> (codes e4m3 [out, in], scale fp32 [ceil(out/128), ceil(in/128)])."""
    import torch

    out_dim, in_dim = w.shape
    rows, cols = math.ceil(out_dim / block), math.ceil(in_dim / block)
    padded = torch.zeros(rows * block, cols * block, dtype=torch.float32)
    padded[:out_dim, :in_dim] = w
    blocks = padded.view(rows, block, cols, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = amax / FP8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    expanded = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:out_dim, :in_dim]
    codes = (w / expanded).to(torch.float8_e4m3fn)
    return codes, scale.contiguous()


def quantize_rows(w, per_tensor):
    """Per output row ([out, 1]) or per tensor ([1]) scales."""
    import torch

    amax = w.abs().amax() if per_tensor else w.abs().amax(dim=1, keepdim=True)
    scale = amax / FP8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = (w / scale).to(torch.float8_e4m3fn)
    return codes, (scale.reshape(1) if per_tensor else scale).contiguous()


def dequantize(codes, scale, scheme, block=128):
    import torch

    values = codes.to(torch.float32)
    if scheme == "block":
        out_dim, in_dim = values.shape
        return values * scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[
            :out_dim, :in_dim]
    return values * scale  # [out, 1] or [1] broadcast


def quantization_config(scheme, config, static=False):
    if scheme == "block":
        q = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}
        if config.model_type == "qwen3_moe":
            # As Qwen's FP8 releases: every module that stays unquantized, by full name (the
            # routers of the sparse layers only: transformers matches entries as prefixes, so
            # "layers.0.mlp.gate" would also keep a dense layer's gate_proj).
            names = ["lm_head", "model.embed_tokens", "model.norm"]
            for i in range(config.num_hidden_layers):
                names += [f"model.layers.{i}.input_layernorm",
                          f"model.layers.{i}.post_attention_layernorm",
                          f"model.layers.{i}.self_attn.q_norm",
                          f"model.layers.{i}.self_attn.k_norm"]
                if i not in config.mlp_only_layers:
                    names.append(f"model.layers.{i}.mlp.gate")
            q["modules_to_not_convert"] = names
        return q
    strategy = "channel" if scheme == "channel" else "tensor"
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                        "strategy": strategy, "group_size": None, "block_structure": None,
                        "actorder": None, "observer": "minmax", "observer_kwargs": {}},
            "input_activations": {"num_bits": 8, "type": "float", "symmetric": True,
                                  "dynamic": not static,
                                  "strategy": "tensor" if static else "token", "group_size": None,
                                  "block_structure": None, "actorder": None, "observer": None,
                                  "observer_kwargs": {}},
            "output_activations": None,
        }},
        "ignore": ["lm_head", "re:.*mlp.gate$"],
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
    }


# ---- dynamic activation quantization (framework/core/fp8.h quantize_fp8_e4m3_group) ---------

class RoundingFlip:
    """Counts the act_quant chunks of a forward and, when `target` is set, moves one code of
    chunk number `target` to its other rounding neighbour: what one e4m3 rounding flip costs."""

    def __init__(self):
        self.calls = 0
        self.target = None
        self.generator = None

    def flip(self, codes, exact):
        import torch

        flat = codes.contiguous().view(torch.uint8).flatten().clone()
        i = int(torch.randint(flat.numel(), (1,), generator=self.generator))
        magnitude, sign = int(flat[i]) & 0x7F, int(flat[i]) & 0x80
        decoded = float(codes.flatten()[i].float())
        wanted = abs(float(exact.flatten()[i]))
        up = abs(decoded) <= wanted
        magnitude = min(magnitude + 1, 0x7E) if up or magnitude == 0 else magnitude - 1
        flat[i] = sign | magnitude
        return flat.view(torch.float8_e4m3fn).view(codes.shape)


FLIP = RoundingFlip()


def act_quant(x, group):
    """x [..., C] fp32 -> codes x scales, per token per `group` channels (-1: the whole row)."""
    import torch

    x = x.float()
    width = x.shape[-1]
    step = width if group == -1 else group
    out = torch.empty_like(x)
    for c0 in range(0, width, step):
        chunk = x[..., c0:c0 + step]
        amax = chunk.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax, min=ACT_AMAX_FLOOR) / FP8_MAX
        codes = (chunk / scale).to(torch.float8_e4m3fn)
        FLIP.calls += 1
        if FLIP.target == FLIP.calls:
            codes = FLIP.flip(codes, chunk / scale)
        out[..., c0:c0 + step] = codes.float() * scale
    return out


def static_quant(x, scale):
    """x fp32 -> codes x scale with one fixed scale: e4m3(clamp(x / scale, -448, 448)) * scale
    (framework/core/fp8.h quantize_fp8_e4m3_static, vLLM's static_scaled_fp8_quant)."""
    import torch

    x = x.float()
    scale = torch.tensor(scale, dtype=torch.float32)
    exact = torch.clamp(x / scale, -FP8_MAX, FP8_MAX)
    codes = exact.to(torch.float8_e4m3fn)
    FLIP.calls += 1
    if FLIP.target == FLIP.calls:
        codes = FLIP.flip(codes, exact)
    return codes.float() * scale


def quantized_experts_forward(group, static_scales=None):
    """The eager experts forward of transformers 5.17 (Qwen3MoeExperts / DeepseekV3Experts) with
    both GEMM inputs quantized, as moegraph's cpu_fp8 backend computes them: dynamically per
    `group`, or with static_scales = (GEMM1 input scale, GEMM2 input scale) of the layer."""
    if static_scales is not None:
        quant1 = lambda x: static_quant(x, static_scales[0])  # noqa: E731
        quant2 = lambda x: static_quant(x, static_scales[1])  # noqa: E731
    else:
        quant1 = quant2 = lambda x: act_quant(x, group)  # noqa: E731
    import torch
    from torch import nn

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = quant1(hidden_states[token_idx])
            gate, up = nn.functional.linear(current_state,
                                            self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current = quant2(self.act_fn(gate) * up)
            current = nn.functional.linear(current, self.down_proj[expert_idx])
            current = current * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
        return final_hidden_states

    return forward


class ActivationQuantization:
    """Installs the W8A8 emulation on a model: the experts always, every other quantized Linear
    when `all_linears`; `remove()` restores the model."""

    def __init__(self, model, quantized_keys, group, all_linears, input_scales=None):
        """input_scales: static checkpoints' scale per Linear weight key (experts: the layer's
        largest per GEMM, under "<experts module>.gemm1" / ".gemm2"); None: dynamic."""
        from torch import nn

        self.patched, self.hooks = [], []
        for name, module in model.named_modules():
            if hasattr(module, "gate_up_proj") and hasattr(module, "down_proj"):
                statics = None if input_scales is None else (input_scales[f"{name}.gemm1"],
                                                              input_scales[f"{name}.gemm2"])
                module.forward = types.MethodType(quantized_experts_forward(group, statics),
                                                  module)
                self.patched.append(module)
            elif all_linears and isinstance(module, nn.Linear) and \
                    f"{name}.weight" in quantized_keys:
                if input_scales is None:
                    quant = lambda x: act_quant(x, group)  # noqa: E731
                else:
                    quant = (lambda s: lambda x: static_quant(x, s))(input_scales[f"{name}.weight"])
                self.hooks.append(module.register_forward_pre_hook(
                    (lambda q: lambda _m, args: (q(args[0]),) + tuple(args[1:]))(quant)))
        assert self.patched, "no experts module found"

    def remove(self):
        for module in self.patched:
            del module.forward
        for h in self.hooks:
            h.remove()


# ---- building one fixture --------------------------------------------------------------------

def eager(model):
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    return model.eval()


def prompt_logits(model):
    import torch

    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float().numpy()


def greedy(model):
    """Greedy ids by argmax over full recomputation (no cache), eos disabled."""
    import torch

    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(PROMPT):]


def normalized_error(a, b):
    import numpy as np

    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.sqrt(((a - b) ** 2).sum()) / max(np.sqrt((b ** 2).sum()), 1e-30))


def perturbed_logits(model, seed):
    """Prompt logits with the embedding output multiplied by (1 + 1e-7 * N(0, 1))."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    embed = model.get_input_embeddings()
    hook = embed.register_forward_hook(
        lambda _m, _a, out: out * (1.0 + PERTURBATION * torch.randn(out.shape,
                                                                     generator=generator)))
    try:
        return prompt_logits(model)
    finally:
        hook.remove()


def sensitivity(model, base):
    return max(normalized_error(perturbed_logits(model, s), base)
               for s in range(PERTURBATION_SEEDS))


def flip_cost(model, base, seed):
    """Largest normalised change of the prompt logits over FLIP_TRIALS single rounding flips at
    random activation codes (the act_quant emulation must be installed)."""
    import torch

    FLIP.calls, FLIP.target = 0, None
    prompt_logits(model)
    chunks = FLIP.calls
    FLIP.generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(FLIP_TRIALS):
        FLIP.calls = 0
        FLIP.target = 1 + int(torch.randint(chunks, (1,), generator=FLIP.generator))
        worst = max(worst, normalized_error(prompt_logits(model), base))
    FLIP.target = None
    return worst


STATIC_FRACTION = 0.75  # input_scale = 0.75 * calibrated amax / 448: the largest inputs clamp


def calibrate_input_scales(model, quantized_keys):
    """Static input scales from one W8A16 forward of the prompt: per quantized nn.Linear, and per
    expert of each experts module (GEMM1 input: the tokens routed to it; GEMM2 input:
    act(gate) * up). Returns (checkpoint entries "<module>.input_scale" -> [1] tensor, the
    golden's scales: Linear weight key -> scale, "<experts>.gemm1"/".gemm2" -> the layer's
    largest, as moegraph (and vLLM) use one scale per stacked GEMM)."""
    import torch
    from torch import nn

    amax, hooks, patched = {}, [], []

    def record(key, x):
        amax[key] = max(amax.get(key, 0.0), float(x.detach().abs().max()))

    def recording_forward(prefix):
        def forward(self, hidden_states, top_k_index, top_k_weights):
            final = torch.zeros_like(hidden_states)
            mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
            mask = mask.permute(2, 1, 0)
            for e in range(self.num_experts):
                top_k_pos, token_idx = torch.where(mask[e])
                if token_idx.numel() == 0:
                    continue
                x = hidden_states[token_idx]
                record(f"{prefix}.{e}.gate_up", x)
                gate, up = nn.functional.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
                h = self.act_fn(gate) * up
                record(f"{prefix}.{e}.down", h)
                y = nn.functional.linear(h, self.down_proj[e]) * top_k_weights[token_idx,
                                                                               top_k_pos, None]
                final.index_add_(0, token_idx, y.to(final.dtype))
            return final
        return forward

    experts_modules = []
    for name, module in model.named_modules():
        if hasattr(module, "gate_up_proj") and hasattr(module, "down_proj"):
            module.forward = types.MethodType(recording_forward(name), module)
            patched.append(module)
            experts_modules.append((name, module.num_experts))
        elif isinstance(module, nn.Linear) and f"{name}.weight" in quantized_keys:
            hooks.append(module.register_forward_pre_hook(
                (lambda key: lambda _m, args: record(key, args[0]))(name)))
    try:
        prompt_logits(model)
    finally:
        for h in hooks:
            h.remove()
        for m in patched:
            del m.forward

    def scale_of(a):
        return torch.tensor([STATIC_FRACTION * a / FP8_MAX], dtype=torch.float32)

    entries, golden = {}, {}
    for key in quantized_keys:
        module = key[:-len(".weight")]
        if module in amax:  # a dense Linear
            entries[f"{module}.input_scale"] = scale_of(amax[module])
            golden[key] = float(entries[f"{module}.input_scale"][0])
    for name, num_experts in experts_modules:
        seen1 = [amax[f"{name}.{e}.gate_up"] for e in range(num_experts)
                 if f"{name}.{e}.gate_up" in amax]
        seen2 = [amax[f"{name}.{e}.down"] for e in range(num_experts) if f"{name}.{e}.down" in amax]
        s1, s2 = [], []
        for e in range(num_experts):
            # An expert no prompt token reached gets half the layer's smallest (any value at most
            # the largest leaves the layer's scale unchanged).
            a1 = amax.get(f"{name}.{e}.gate_up", 0.5 * min(seen1))
            a2 = amax.get(f"{name}.{e}.down", 0.5 * min(seen2))
            for proj in ("gate_proj", "up_proj"):
                entries[f"{name}.{e}.{proj}.input_scale"] = scale_of(a1)
            entries[f"{name}.{e}.down_proj.input_scale"] = scale_of(a2)
            s1.append(float(scale_of(a1)[0]))
            s2.append(float(scale_of(a2)[0]))
        golden[f"{name}.gemm1"] = max(s1)
        golden[f"{name}.gemm2"] = max(s2)
    return entries, golden


def build(name, spec, out_dir, work):
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(spec["seed"])
    generator = torch.Generator().manual_seed(spec["seed"] + 1000)
    config = spec["config"](**spec["kwargs"])
    model = eager(spec["model"](config).float())
    mf.randomise_constant_parameters(model, generator)
    fp32_dir = os.path.join(work, name, "fp32")
    model.save_pretrained(fp32_dir)

    scheme = spec["scheme"]
    state = load_file(os.path.join(fp32_dir, "model.safetensors"))
    quantized, dequantized = {}, {}
    quantized_keys = set()
    for key, w in state.items():
        if not is_quantized_linear(key):
            quantized[key] = w
            dequantized[key] = w
            continue
        assert w.dim() == 2 and w.dtype == torch.float32, key
        if scheme == "block":
            codes, scale = quantize_block(w)
            scale_key = key + "_scale_inv"
        else:
            codes, scale = quantize_rows(w, per_tensor=scheme == "tensor")
            scale_key = key + "_scale"
        quantized[key] = codes
        quantized[scale_key] = scale
        dequantized[key] = dequantize(codes, scale, scheme)
        quantized_keys.add(key)

    # The dequantized fp32 checkpoint, reloaded by transformers: the golden model.
    deq_dir = os.path.join(work, name, "dequantized")
    os.makedirs(deq_dir, exist_ok=True)
    shutil.copy(os.path.join(fp32_dir, "config.json"), deq_dir)
    save_file(dequantized, os.path.join(deq_dir, "model.safetensors"), metadata={"format": "pt"})
    golden = eager(spec["model"].from_pretrained(deq_dir, dtype=torch.float32))
    # Every quantized weight reached the model: no expert or projection kept its fp32 value.
    loaded = {k: v for k, v in golden.state_dict().items()}
    for key in quantized_keys:
        if key in loaded:
            assert torch.equal(loaded[key], dequantized[key]), key

    input_scales = None
    if spec.get("static"):
        entries, input_scales = calibrate_input_scales(golden, quantized_keys)
        missing = [k for k in entries if k[:-len(".input_scale")] + ".weight" not in quantized]
        assert not missing, f"input scales of no checkpoint weight: {missing[:4]}"
        quantized.update(entries)

    # The FP8 checkpoint, in the Hub layout.
    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(fp32_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = quantization_config(scheme, config, bool(spec.get("static")))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(quantized, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})

    group = 128 if scheme == "block" else -1
    if input_scales is not None:
        group = 0  # static: no groups
    ref = {"family": name, "model_type": config.model_type,
           "model_class": spec["model"].__name__, "prompt_ids": PROMPT,
           "quantization": scheme, "activation_group": group, "seed": spec["seed"],
           "notes": spec["notes"], "golden_model": "dequantized fp32 (codes x scales)",
           "activation": "static" if input_scales is not None else "dynamic",
           "attn_implementation": "eager", "experts_implementation": "eager"}

    logits = prompt_logits(golden)
    ref["greedy_ids"] = greedy(golden)
    ref["sensitivity_w8a16"] = sensitivity(golden, logits)
    np.save(os.path.join(folder, "logits.npy"), logits.astype(np.float32))

    for suffix, all_linears in (("w8a8", False), ("w8a8_all", True)):
        quant = ActivationQuantization(golden, quantized_keys, group, all_linears, input_scales)
        try:
            q_logits = prompt_logits(golden)
            ref[f"greedy_ids_{suffix}"] = greedy(golden)
            ref[f"sensitivity_{suffix}"] = sensitivity(golden, q_logits)
            ref[f"flip_cost_{suffix}"] = flip_cost(golden, q_logits, spec["seed"])
            ref[f"error_{suffix}_vs_w8a16"] = normalized_error(q_logits, logits)
        finally:
            quant.remove()
        np.save(os.path.join(folder, f"logits_{suffix}.npy"), q_logits.astype(np.float32))
    ref["error_w8a8_all_vs_w8a8"] = normalized_error(
        np.load(os.path.join(folder, "logits_w8a8_all.npy")),
        np.load(os.path.join(folder, "logits_w8a8.npy")))
    assert np.array_equal(prompt_logits(golden), logits), "emulation not removed"
    ref["transformers_fp8_load"] = try_transformers_fp8(spec, folder, logits)
    return ref, folder


def try_transformers_fp8(spec, folder, logits):
    """Whether transformers itself runs the FP8 folder on the CPU (its answer, recorded)."""
    import torch

    try:
        model = eager(spec["model"].from_pretrained(folder, dtype=torch.float32))
        err = normalized_error(prompt_logits(model), logits)
        return (f"loaded (dequantized to bf16, block = shape / scale grid); normalised error vs "
                f"the dequantized fp32 golden {err:.3g}")
    except Exception as e:  # recorded, not fatal: the golden does not depend on it
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"not on the CPU: {type(e).__name__}: {text[:160]}"


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def write_readme(out_dir, versions, refs):
    lines = [
        "# FP8 Hugging Face fixtures",
        "",
        "Tiny FP8 checkpoints in the Hub layout (config.json with `quantization_config`, per-expert",
        "tensor names, F8_E4M3 `weight` + F32 scale per quantized Linear) and their goldens. Written",
        "by `tools/hf/make_fp8_fixtures.py`; read by `tests/e2e/hf_fp8_golden_test.cc`. Regenerate",
        "with",
        "",
        "    /work/.venv-hf/bin/python tools/hf/make_fp8_fixtures.py --out tests/fixtures/hf",
        "",
        f"Versions: transformers=={versions['transformers']}, torch=={versions['torch']}.",
        f"Prompt: {PROMPT}; greedy: {GREEDY_TOKENS} new tokens, eos disabled.",
        "",
        "**Which path produced the goldens:** the dequantized fp32 model in transformers for all of",
        "them (codes x scales written into an fp32 copy of the checkpoint and reloaded with",
        "`from_pretrained`, eager attention and experts). transformers 5.17 does not serve as the",
        "golden for the FP8 folders themselves (its answer is `transformers_fp8_load` in each",
        "`reference.json`): without a GPU it dequantizes fp8 checkpoints to bf16, and it takes the",
        "block size as weight shape / scale grid, which misreads ragged blocks (hidden 144 gives",
        "72-column blocks; DeepSeek's q_b_proj is refused), and compressed-tensors leaves bf16",
        "weights that its fp32 forward refuses.",
        "",
        "- `logits.npy`, `greedy_ids`: W8A16 (activations kept; `run --activation-quant none`).",
        "- `logits_w8a8.npy`, `greedy_ids_w8a8`: W8A8 as moegraph runs it: the routed experts' two",
        "  GEMM inputs replaced by codes x scales of `quantize_fp8_e4m3_group` (framework/core/fp8.h,",
        "  DeepSeek's `act_quant` with vLLM's 1e-10 amax floor) per token per 128 channels (block",
        "  checkpoints, the last group ragged) or per token (compressed-tensors), in torch fp32.",
        "- `logits_w8a8_all.npy`, `greedy_ids_w8a8_all`: the same at the input of every quantized",
        "  Linear (the checkpoint's semantics). moegraph runs attention, dense and shared MLPs on",
        "  dequantized weights without activation quantization until a native FP8 `linear` lands,",
        "  so the tests compare against `logits_w8a8.npy`; `error_w8a8_all_vs_w8a8` shows the gap.",
        "",
        "**Tolerance of the W8A8 comparison: 1e-4, as W8A16, and the same greedy ids.** Measured:",
        f"the embedding output perturbed by a relative {PERTURBATION:g} ({PERTURBATION_SEEDS} seeds)",
        "moves the W8A8 golden by `sensitivity_w8a8` (<= 6.2e-7), about as much as the W8A16 one",
        "(`sensitivity_w8a16`): at that distance no e4m3 rounding of an expert input flips, and",
        "moegraph's own run lands 3e-7 to 7e-7 from the goldens. One flipped rounding at a random",
        f"activation code ({FLIP_TRIALS} trials, `flip_cost_w8a8`) moves the logits by 2e-3 to 8e-3,",
        "a quarter to a half of the whole activation-quantization effect (`error_w8a8_vs_w8a16`,",
        "6e-3 to 3e-2): a bound that let one flip through could not tell a wrong group or scale from",
        "a right one, so none is allowed. The CPU backend computes the same fp32 inputs to the same",
        "codes (docs/quantization.md); a platform whose arithmetic flips one would fail here and",
        "should be looked at rather than tolerated.",
        "",
        "| folder | quantization | what it exercises | W8A8 1e-7 sensitivity | one flip | W8A8 vs "
        "W8A16 | all-linears vs experts-only | size |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ref, size in refs:
        lines.append(
            f"| {ref['family']} | {ref['quantization']} | {ref['notes']} | "
            f"{ref['sensitivity_w8a8']:.2g} | {ref['flip_cost_w8a8']:.2g} | "
            f"{ref['error_w8a8_vs_w8a16']:.2g} | "
            f"{ref['error_w8a8_all_vs_w8a8']:.2g} | {size / 1024:.0f} KiB |")
    total = sum(size for _, size in refs)
    lines += ["", f"Total: {total / 1024:.0f} KiB.", ""]
    with open(os.path.join(out_dir, "README_fp8.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tests", "fixtures", "hf"))
    parser.add_argument("names", nargs="*", help="fixtures to (re)build; default: all")
    args = parser.parse_args()
    versions = mf.check_versions()
    import torch

    torch.set_num_threads(1)
    all_fixtures = fixtures()
    names = args.names or list(all_fixtures)
    unknown = [n for n in names if n not in all_fixtures]
    if unknown:
        sys.exit(f"unknown fixtures {unknown}; known: {list(all_fixtures)}")
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            ref, folder = build(name, all_fixtures[name], args.out, work)
            ref["transformers"] = versions["transformers"]
            ref["torch"] = versions["torch"]
            with open(os.path.join(folder, "reference.json"), "w") as f:
                json.dump(ref, f, indent=2)
                f.write("\n")
            print(f"{name}: greedy {ref['greedy_ids']} / w8a8 {ref['greedy_ids_w8a8']}, "
                  f"sensitivity w8a16 {ref['sensitivity_w8a16']:.2g} "
                  f"w8a8 {ref['sensitivity_w8a8']:.2g} w8a8_all {ref['sensitivity_w8a8_all']:.2g}, "
                  f"one flip w8a8 {ref['flip_cost_w8a8']:.2g} "
                  f"w8a8_all {ref['flip_cost_w8a8_all']:.2g}, "
                  f"w8a8 vs w8a16 {ref['error_w8a8_vs_w8a16']:.2g}, "
                  f"all vs experts {ref['error_w8a8_all_vs_w8a8']:.2g}; "
                  f"{ref['transformers_fp8_load']}; {folder_bytes(folder) / 1024:.0f} KiB")
    refs = []
    for name in all_fixtures:
        path = os.path.join(args.out, name, "reference.json")
        if os.path.exists(path):
            with open(path) as f:
                refs.append((json.load(f), folder_bytes(os.path.join(args.out, name))))
    write_readme(args.out, versions, refs)


if __name__ == "__main__":
    main()
