#!/usr/bin/env python3
"""Tiny weight-only INT4 / INT8 Hugging Face checkpoints (GPTQ, AWQ, compressed-tensors
pack-quantized) and their goldens, the references of tests/e2e/hf_wna16_golden_test.cc.

Each fixture starts from an fp32 fixture of tests/fixtures/hf (qwen3_moe, mixtral: made by
make_fixtures.py). Every Linear weight of attention and the MLPs (dense, per-expert) is quantized
round-to-nearest per group and written exactly in its format's Hub layout; routers (`mlp.gate`,
`block_sparse_moe.gate`), norms, embeddings and lm_head stay fp32. The packers follow
../shared/reference/hf-moe-formats.md sections 6.3-6.4:

  gptq (AutoGPTQ / GPTQModel, "checkpoint_format": "gptq", v1 zeros): per module
      qweight I32 [in / 8, out]   packed along the input: nibble i of word [r, o] = input 8r + i
      qzeros  I32 [G, out / 8]    packed along the output (nibble i = column 8w + i), zero - 1
      scales  F16 [G, out]
      g_idx   I32 [in]            desc_act: a random column order (as the Hessian would pick),
                                  g_idx[perm[j]] = j // group_size (not monotonic)
  awq (AutoAWQ GEMM): qweight I32 [in, out / 8] packed along the output with AWQ's interleave
      (nibble k of word w = column 8w + [0, 2, 4, 6, 1, 3, 5, 7][k]); qzeros I32 [G, out / 8] the
      same way; scales F16 [G, out]; asymmetric.
  compressed-tensors pack-quantized (llm-compressor): weight_packed I32 [out, ceil(in * b / 32)]
      holding u = q + 2^(b-1) from the lowest bits up; weight_scale [out, G]; weight_shape I64
      [2]; asymmetric: weight_zero_point I32 [ceil(out * b / 32), G] packed along the output.

Goldens come from transformers on the DEQUANTIZED fp32 model: the stored tensors are decoded again
by an independent decoder here (W = (q - z) * s per the format), written back into the fp32
checkpoint and loaded by transformers 5.17 (which cannot run these formats on the CPU without the
gptqmodel / autoawq / compressed-tensors packages); logits.npy holds the prompt's logits and
reference.json the greedy ids (tests/fixtures/hf/README_wna16.md).

    /work/.venv-hf/bin/python tools/hf/make_wna16_fixtures.py [--out tests/fixtures/hf] [name ...]
"""
import argparse
import json
import os
import shutil
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GREEDY_TOKENS = 6
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

# name -> (source fp32 fixture, format, bits, group size (-1 channel), symmetric, act order)
FIXTURES = {
    "qwen3_moe_gptq": ("qwen3_moe", "gptq", 4, 16, True, True),
    "qwen3_moe_awq": ("qwen3_moe", "awq", 4, 16, False, False),
    "mixtral_ct_w4a16": ("mixtral", "ct", 4, 16, True, False),
    "mixtral_ct_w8a16": ("mixtral", "ct", 8, -1, False, False),
}


def quantized_module(key):
    """The Linear weights that are quantized: attention and MLP projections, not routers."""
    if not key.endswith(".weight") or ".layers." not in key:
        return False
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
             ".w1.", ".w2.", ".w3.")
    return any(n in key for n in names)


def groups_of(in_features, group):
    return 1 if group < 0 else (in_features + group - 1) // group


def rtn(w, bits, group, symmetric, order):
    """Round-to-nearest per output row per group of input columns taken in `order` (act order).
    Returns unsigned codes q [out, in] (int64), zeros [out, G], scales [out, G] (fp16-rounded)
    and g_idx [in]."""
    out_f, in_f = w.shape
    G = groups_of(in_f, group)
    g = in_f if group < 0 else group
    qmax = (1 << bits) - 1
    g_idx = torch.empty(in_f, dtype=torch.int64)
    for j, c in enumerate(order):
        g_idx[c] = j // g
    q = torch.empty(out_f, in_f, dtype=torch.int64)
    zeros = torch.empty(out_f, G, dtype=torch.int64)
    scales = torch.empty(out_f, G, dtype=torch.float32)
    for gi in range(G):
        cols = (g_idx == gi).nonzero().flatten()
        x = w[:, cols].double()
        if symmetric:
            amax = x.abs().amax(dim=1).clamp(min=1e-8)
            s = 2 * amax / qmax
            z = torch.full((out_f,), (qmax + 1) // 2, dtype=torch.int64)
        else:
            lo = x.amin(dim=1).clamp(max=0)
            hi = x.amax(dim=1).clamp(min=0)
            s = ((hi - lo) / qmax).clamp(min=1e-8)
            z = torch.round(-lo / s).clamp(0, qmax).to(torch.int64)
        s = s.to(torch.float16).to(torch.float64)  # the checkpoints store fp16 scales
        q[:, cols] = (torch.round(x / s[:, None]) + z[:, None]).clamp(0, qmax).to(torch.int64)
        zeros[:, gi] = z
        scales[:, gi] = s.float()
    return q, zeros, scales, g_idx


def pack_along_last(values, bits, order=None):
    """int64 [..., n] codes -> int32 [..., ceil(n * bits / 32)], code k of a word in bits
    [k * bits, (k + 1) * bits) (order: which element goes to nibble k)."""
    per = 32 // bits
    n = values.shape[-1]
    words = (n + per - 1) // per
    padded = torch.zeros(*values.shape[:-1], words * per, dtype=torch.int64)
    padded[..., :n] = values
    padded = padded.reshape(*values.shape[:-1], words, per)
    if order is not None:
        padded = padded[..., order]
    word = torch.zeros(*values.shape[:-1], words, dtype=torch.int64)
    for k in range(per):
        word |= padded[..., k] << (bits * k)
    word &= 0xFFFFFFFF
    return torch.where(word >= (1 << 31), word - (1 << 32), word).to(torch.int32)


def unpack_along_last(words, bits, n, order=None):
    per = 32 // bits
    w = words.to(torch.int64) & 0xFFFFFFFF
    codes = torch.stack([(w >> (bits * k)) & ((1 << bits) - 1) for k in range(per)], dim=-1)
    if order is not None:
        inverse = [order.index(m) for m in range(per)]
        codes = codes[..., inverse]
    return codes.reshape(*words.shape[:-1], -1)[..., :n]


def encode(fmt, w, bits, group, symmetric, act_order, seed):
    """The module's stored tensors {suffix: tensor}."""
    out_f, in_f = w.shape
    order = list(range(in_f))
    if act_order:
        order = torch.randperm(in_f, generator=torch.Generator().manual_seed(seed)).tolist()
    q, z, s, g_idx = rtn(w, bits, group, symmetric, order)
    if fmt == "gptq":
        return {
            "qweight": pack_gptq_qweight(q, bits),
            "qzeros": pack_along_last(z.t() - 1, bits),  # v1: zero - 1
            "scales": s.t().contiguous().to(torch.float16),
            "g_idx": g_idx.to(torch.int32),
        }
    if fmt == "awq":
        return {
            "qweight": pack_along_last(q.t().contiguous(), 4, AWQ_ORDER),
            "qzeros": pack_along_last(z.t().contiguous(), 4, AWQ_ORDER),
            "scales": s.t().contiguous().to(torch.float16),
        }
    tensors = {
        "weight_packed": pack_along_last(q, bits),
        "weight_scale": s.to(torch.float16).float(),
        "weight_shape": torch.tensor([out_f, in_f], dtype=torch.int64),
    }
    if not symmetric:
        tensors["weight_zero_point"] = pack_along_last(z.t().contiguous(), bits).t().contiguous()
    return tensors


def pack_gptq_qweight(q, bits):
    """[out, in] codes -> [in / per, out]: packed along the input dimension."""
    return pack_along_last(q, bits).t().contiguous()


def decode(fmt, t, out_f, in_f, bits, group):
    """The real weight [out, in] the stored tensors mean (independent of encode's arithmetic)."""
    G = groups_of(in_f, group)
    g = in_f if group < 0 else group
    if fmt == "gptq":
        q = unpack_along_last(t["qweight"].t(), bits, in_f)  # [out, in]
        z = unpack_along_last(t["qzeros"], bits, out_f).t() + 1  # [out, G]
        s = t["scales"].float().t()
        gi = t["g_idx"].long()
    elif fmt == "awq":
        q = unpack_along_last(t["qweight"], 4, out_f, AWQ_ORDER).t()
        z = unpack_along_last(t["qzeros"], 4, out_f, AWQ_ORDER).t()
        s = t["scales"].float().t()
        gi = torch.arange(in_f) // g
    else:
        q = unpack_along_last(t["weight_packed"], bits, in_f)
        s = t["weight_scale"].float()
        if "weight_zero_point" in t:
            z = unpack_along_last(t["weight_zero_point"].t(), bits, out_f).t()
        else:
            z = torch.full((out_f, G), 1 << (bits - 1), dtype=torch.int64)
        gi = torch.arange(in_f) // g
    return ((q - z[:, gi]).double() * s[:, gi].double()).float().contiguous()


def config_for(fmt, bits, group, symmetric, act_order, ignore):
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order,
                "sym": symmetric, "checkpoint_format": "gptq"}
    if fmt == "awq":
        return {"quant_method": "awq", "version": "gemm", "bits": bits, "group_size": group,
                "zero_point": True, "modules_to_not_convert": None}
    weights = {"num_bits": bits, "type": "int", "symmetric": symmetric,
               "strategy": "channel" if group < 0 else "group", "dynamic": False,
               "actorder": None}
    if group > 0:
        weights["group_size"] = group
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": None,
                                          "output_activations": None}},
            "ignore": ignore}


def run_transformers(model_dir, prompt):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        ids = list(prompt)
        greedy = []
        for _ in range(GREEDY_TOKENS):
            nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            greedy.append(nxt)
            ids.append(nxt)
    return logits, greedy


def make(name, out_root):
    source, fmt, bits, group, symmetric, act_order = FIXTURES[name]
    src = os.path.join(ROOT, "tests/fixtures/hf", source)
    ref = json.load(open(os.path.join(src, "reference.json")))
    weights = load_file(os.path.join(src, "model.safetensors"))
    stored, dequantized = {}, {}
    for i, key in enumerate(sorted(weights)):
        w = weights[key]
        if not quantized_module(key):
            stored[key] = w
            dequantized[key] = w
            continue
        module = key[: -len(".weight")]
        tensors = encode(fmt, w, bits, group, symmetric, act_order, seed=1000 + i)
        for suffix, t in tensors.items():
            stored[f"{module}.{suffix}"] = t.contiguous()
        dequantized[key] = decode(fmt, tensors, w.shape[0], w.shape[1], bits, group)
    config = json.load(open(os.path.join(src, "config.json")))
    router = "re:.*block_sparse_moe.gate$" if source == "mixtral" else "re:.*mlp.gate$"
    config["quantization_config"] = config_for(fmt, bits, group, symmetric, act_order,
                                               ["lm_head", router])
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(src, "config.json"), tmp)
        save_file(dequantized, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        logits, greedy = run_transformers(tmp, ref["prompt_ids"])
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    save_file(stored, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    import transformers

    reference = {
        "family": ref["family"], "source_fixture": source, "format": fmt, "bits": bits,
        "group_size": group, "symmetric": symmetric, "act_order": act_order,
        "prompt_ids": ref["prompt_ids"], "greedy_ids": greedy,
        "golden": "transformers on the dequantized fp32 weights",
        "transformers": transformers.__version__, "torch": torch.__version__,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=2)
    print(name, "greedy", greedy, "bytes", os.path.getsize(os.path.join(out, "model.safetensors")))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/hf"))
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    torch.manual_seed(0)
    for name in args.names or FIXTURES:
        make(name, args.out)


if __name__ == "__main__":
    main()
