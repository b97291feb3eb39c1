#!/usr/bin/env python3
"""Tiny FP4 Hugging Face checkpoints and their goldens, the references of
tests/e2e/hf_fp4_golden_test.cc.

gpt_oss_mxfp4: the fp32 GPT-OSS fixture (tests/fixtures/hf/gpt_oss, made by make_fixtures.py) with
its expert weights quantized to MXFP4 and written exactly in the Hub layout of openai/gpt-oss-*:

  model.layers.{l}.mlp.experts.gate_up_proj_blocks  uint8 [E, 2I, H/32, 16]  (rows = outputs,
  model.layers.{l}.mlp.experts.gate_up_proj_scales  uint8 [E, 2I, H/32]       gate/up interleaved)
  model.layers.{l}.mlp.experts.down_proj_blocks     uint8 [E, H, I/32, 16]
  model.layers.{l}.mlp.experts.down_proj_scales     uint8 [E, H, I/32]

  Quantizer (OCP MX): per row per 32 inputs, shared exponent x = floor(log2(amax)) - 2 (e2m1's
  largest exponent), clamped to [-127, 127]; scale byte x + 127 (E8M0); code = e2m1(w / 2^x),
  round to nearest even, saturating at 6; two codes per byte, the even column in the low nibble.
  config.json gets quantization_config {quant_method mxfp4, modules_to_not_convert [attention,
  router, embeddings, lm_head]} as the Hub's configs have it. Biases, router, attention, sinks and
  embeddings stay fp32 (the Hub's are bf16).

Golden: transformers loads the MXFP4 folder itself (GptOssForCausalLM.from_pretrained, fp32). With
no `kernels` package (and no GPU) its Mxfp4HfQuantizer sets quantization_config.dequantize = True
and converts blocks x scales to dense weights at load (integrations/mxfp4.py
convert_moe_packed_tensors, bf16, exact for these values), then runs the ordinary eager experts:
reference.json records the path found ("dequantize": true) and the largest difference from our own
dequantization (codes x 2^x written into the fp32 checkpoint), which must be 0 up to fp32 sums.

mixtral_nvfp4: the fp32 Mixtral fixture with every expert weight in ModelOpt's NVFP4 layout
(`weight` uint8 [out, in/2], `weight_scale` float8_e4m3fn [out, in/16], `weight_scale_2` fp32
scalar = amax / (6 * 448), `input_scale`), declared by hf_quant_config.json (exclude_modules:
lm_head, attention, router). Golden: the dequantized fp32 model in transformers.

mixtral_ct_nvfp4: the fp32 Mixtral fixture in compressed-tensors' `nvfp4-pack-quantized` format
(llm-compressor's NVFP4 scheme): every Linear but lm_head and the routers (attention projections
and experts) as `weight_packed` uint8 [out, in/2], `weight_scale` float8_e4m3fn [out, in/16],
`weight_global_scale` fp32 [1] = 6 * 448 / amax(W) (it divides: the reciprocal convention of
ModelOpt's weight_scale_2) and `input_global_scale`, declared in config.json's quantization_config.
Quantizer: scale = e4m3(amax_group / 6 * global), code = e2m1(w * global / scale), nearest even,
saturating. Golden: the dequantized fp32 model (codes x weight_scale / weight_global_scale) in
transformers (5.17 needs the compressed-tensors package to load the format itself).

    /work/.venv-hf/bin/python tools/hf/make_fp4_fixtures.py [--out tests/fixtures/hf]

Pinned versions as make_fixtures.py: transformers==5.17.0, torch==2.11.0.
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GREEDY_TOKENS = 6
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1_codes(x):
    """torch float tensor -> uint8 codes 0..15, round to nearest even, saturate at 6."""
    import torch
    a = x.abs()
    code = torch.zeros_like(a, dtype=torch.uint8)
    # (lower bound, inclusive?, code) per the midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5.
    code = torch.where(a > 0.25, torch.tensor(1, dtype=torch.uint8), code)
    code = torch.where(a >= 0.75, torch.tensor(2, dtype=torch.uint8), code)
    code = torch.where(a > 1.25, torch.tensor(3, dtype=torch.uint8), code)
    code = torch.where(a >= 1.75, torch.tensor(4, dtype=torch.uint8), code)
    code = torch.where(a > 2.5, torch.tensor(5, dtype=torch.uint8), code)
    code = torch.where(a >= 3.5, torch.tensor(6, dtype=torch.uint8), code)
    code = torch.where(a > 5.0, torch.tensor(7, dtype=torch.uint8), code)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def quantize_mxfp4(w):
    """w [E, R, C] fp32 (rows = outputs) -> (blocks uint8 [E, R, C/32, 16], scales uint8
    [E, R, C/32], dequantized fp32 [E, R, C])."""
    import torch
    E, R, C = w.shape
    assert C % 32 == 0, C
    g = w.reshape(E, R, C // 32, 32)
    amax = g.abs().amax(dim=-1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2, torch.full_like(amax, -127))
    exp = exp.clamp(-127, 127)
    scale = torch.pow(2.0, exp)
    codes = e2m1_codes(g / scale.unsqueeze(-1))
    lut = torch.tensor(E2M1 + [-v for v in E2M1])
    deq = (lut[codes.long()] * scale.unsqueeze(-1)).reshape(E, R, C)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return packed.contiguous(), (exp + 127).to(torch.uint8).contiguous(), deq


def make_gpt_oss_mxfp4(src, folder):
    import numpy as np
    import torch
    import transformers as t
    from safetensors.torch import load_file, save_file

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    config = json.load(open(os.path.join(src, "config.json")))
    out, dequantized = {}, dict(tensors)
    for key, value in tensors.items():
        for proj in ("gate_up_proj", "down_proj"):
            if key.endswith(f"mlp.experts.{proj}"):
                # fp32 fixture: [E, in, out] (x W); the Hub blocks are [E, out, in/32, 16].
                w = value.transpose(1, 2).contiguous()
                packed, scales, deq = quantize_mxfp4(w)
                E, R, C = w.shape
                out[key + "_blocks"] = packed.reshape(E, R, C // 32, 16)
                out[key + "_scales"] = scales
                dequantized[key] = deq.transpose(1, 2).contiguous()
                break
        else:
            out[key] = value
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    prompt = json.load(open(os.path.join(src, "reference.json")))["prompt_ids"]
    ids = torch.tensor([prompt])

    # transformers on the MXFP4 folder.
    model = t.GptOssForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    # After a dequantizing load transformers drops config.quantization_config; the quantizer
    # object keeps the decision.
    # The decision is read from the result: dense gate_up_proj / down_proj parameters (no
    # *_blocks) mean the MXFP4 weights were dequantized at load.
    dequantize = not any(n.endswith("_blocks") for n, _ in model.named_parameters())
    experts = model.model.layers[0].mlp.experts
    dequantized_dtype = str(experts.gate_up_proj.dtype)
    # The dequantized experts come out bf16 (exact: e2m1 x 2^x has 2 significant bits) beside the
    # fp32 rest; fp32 throughout, as the fp32 goldens of the other fixtures.
    model = model.float()
    model.set_attn_implementation("eager")
    try:
        model.set_experts_implementation("eager")
    except Exception:
        pass
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        greedy = model.generate(ids, do_sample=False,
                                max_new_tokens=GREEDY_TOKENS)[0, len(prompt):].tolist()
    path = (f"Mxfp4HfQuantizer, dequantized at load: {dequantize}; experts {type(experts).__name__} with "
            f"dense {dequantized_dtype} parameters "
            f"{sorted(n for n, _ in experts.named_parameters())}, then model.float()")

    # Our own dequantization in the fp32 model, for comparison.
    ref_model = t.GptOssForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ref_model.load_state_dict(dequantized)
    ref_model.set_attn_implementation("eager")
    ref_model.set_experts_implementation("eager")
    with torch.no_grad():
        ours = ref_model(ids).logits[0].float().numpy()
    diff = float(np.abs(ours - logits).max())
    assert diff <= 1e-5 * float(np.abs(logits).max()), diff

    np.save(os.path.join(folder, "logits.npy"), logits.astype(np.float32))
    ref = {
        "family": "gpt_oss",
        "format": "mxfp4 (GPT-OSS Hub layout)",
        "prompt_ids": prompt,
        "greedy_ids": greedy,
        "golden": "transformers GptOssForCausalLM.from_pretrained on this folder, fp32, eager",
        "transformers_path": path,
        "dequantize": dequantize,
        "max_abs_diff_from_own_dequantization": diff,
        "transformers": t.__version__,
        "torch": torch.__version__,
    }
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, indent=2)
    return ref


def _nvfp4_pack(w, scale_of_amax, step_of_scale):
    """NVFP4 codes of w [out, in] fp32 with per-16 E4M3 scales scale_of_amax(group amax) and the
    dequantization step step_of_scale(float scale): (packed uint8 [out, in/2], scale e4m3
    [out, in/16], dequantized fp32 [out, in])."""
    import torch
    out_f, in_f = w.shape
    assert in_f % 16 == 0, in_f
    g = w.reshape(out_f, in_f // 16, 16)
    scale = scale_of_amax(g.abs().amax(dim=-1)).to(torch.float8_e4m3fn)
    step = step_of_scale(scale.to(torch.float32))
    safe = torch.where(step > 0, step, torch.ones_like(step))
    codes = e2m1_codes(torch.where(step.unsqueeze(-1) > 0, g / safe.unsqueeze(-1),
                                   torch.zeros_like(g)))
    lut = torch.tensor(E2M1 + [-v for v in E2M1])
    deq = (lut[codes.long()] * step.unsqueeze(-1)).reshape(out_f, in_f)
    codes = codes.reshape(out_f, in_f)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed.contiguous(), scale.contiguous(), deq


def quantize_nvfp4(w):
    """ModelOpt NVFP4 of w [out, in] fp32: (weight uint8 [out, in/2], weight_scale float8_e4m3fn
    [out, in/16], weight_scale_2 fp32 scalar, dequantized fp32 [out, in])."""
    import torch
    scale_2 = (w.abs().amax() / (6.0 * 448.0)).to(torch.float32)
    packed, scale, deq = _nvfp4_pack(w, lambda a: a / 6.0 / scale_2, lambda s: s * scale_2)
    return packed, scale, scale_2.reshape(()), deq


def quantize_nvfp4_ct(w):
    """compressed-tensors NVFP4 of w [out, in] fp32: (weight_packed uint8 [out, in/2], weight_scale
    float8_e4m3fn [out, in/16], weight_global_scale fp32 [1], dequantized fp32 [out, in])."""
    import torch
    global_scale = (6.0 * 448.0 / w.abs().amax()).to(torch.float32)
    packed, scale, deq = _nvfp4_pack(w, lambda a: a / 6.0 * global_scale,
                                     lambda s: s / global_scale)
    return packed, scale, global_scale.reshape(1), deq


def dequantized_golden(src, folder, dequantized, ref):
    """Logits and greedy ids of the Mixtral fixture `src` with its weights replaced by
    `dequantized` (fp32, the checkpoint's own names) in transformers, eager; written to `folder`
    (logits.npy; reference.json: ref's format and golden, the prompt and greedy ids)."""
    import tempfile

    import numpy as np
    import torch
    import transformers as t
    from safetensors.torch import save_file

    prompt = json.load(open(os.path.join(src, "reference.json")))["prompt_ids"]
    ids = torch.tensor([prompt])
    with tempfile.TemporaryDirectory() as tmp:
        save_file(dequantized, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(os.path.join(src, "config.json"), os.path.join(tmp, "config.json"))
        model = t.MixtralForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        greedy = model.generate(ids, do_sample=False,
                                max_new_tokens=GREEDY_TOKENS)[0, len(prompt):].tolist()
    np.save(os.path.join(folder, "logits.npy"), logits.astype(np.float32))
    out = {"family": "mixtral", "format": ref["format"], "prompt_ids": prompt,
           "greedy_ids": greedy, "golden": ref["golden"], "transformers": t.__version__,
           "torch": torch.__version__}
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(out, f, indent=2)
    return out


def make_mixtral_nvfp4(src, folder):
    """Mixtral with its expert weights in ModelOpt's NVFP4 layout; golden from the dequantized
    fp32 model (transformers 5.17 has no CPU path for ModelOpt NVFP4 checkpoints)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    config = json.load(open(os.path.join(src, "config.json")))
    out, dequantized = {}, dict(tensors)
    for key, value in tensors.items():
        if ".block_sparse_moe.experts." in key and key.endswith(".weight"):
            packed, scale, scale_2, deq = quantize_nvfp4(value)
            out[key] = packed
            out[key + "_scale"] = scale
            out[key + "_scale_2"] = scale_2
            # W4A4 activation scale as ModelOpt writes it; moegraph runs weight-only (W4A16).
            out[key.replace(".weight", ".input_scale")] = torch.tensor(1.0 / 448.0)
            dequantized[key] = deq
        else:
            out[key] = value
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    quant = {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
             "exclude_modules": ["lm_head", "model.layers.*.self_attn*",
                                 "model.layers.*.block_sparse_moe.gate"]}
    with open(os.path.join(folder, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt", "version": "0.29.0"},
                   "quantization": quant}, f, indent=2)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)  # ModelOpt's own export: the quantization in hf_quant_config

    return dequantized_golden(src, folder, dequantized, {
        "format": "modelopt NVFP4 (hf_quant_config.json; experts quantized)",
        "golden": "the dequantized fp32 model (codes x weight_scale x weight_scale_2) in "
                   "transformers, eager, no activation quantization"})


def make_mixtral_ct_nvfp4(src, folder):
    """Mixtral with its attention projections and expert weights in compressed-tensors'
    nvfp4-pack-quantized layout; golden from the dequantized fp32 model."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    config = json.load(open(os.path.join(src, "config.json")))
    out, dequantized = {}, dict(tensors)
    quantized = (".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.",
                 ".self_attn.o_proj.", ".block_sparse_moe.experts.")
    for key, value in tensors.items():
        if key.endswith(".weight") and any(q in key for q in quantized):
            module = key[:-len(".weight")]
            packed, scale, global_scale, deq = quantize_nvfp4_ct(value)
            out[module + ".weight_packed"] = packed
            out[module + ".weight_scale"] = scale
            out[module + ".weight_global_scale"] = global_scale
            # W4A4's activation global scale as llm-compressor writes it; moegraph runs W4A16.
            out[module + ".input_global_scale"] = torch.tensor([448.0 * 6.0])
            dequantized[key] = deq
        else:
            out[key] = value
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    fp4 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
           "symmetric": True, "dynamic": False, "observer": "minmax"}
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": fp4, "format": "nvfp4-pack-quantized",
            "input_activations": dict(fp4, dynamic="local", observer="minmax")}},
        "ignore": ["lm_head", "re:.*block_sparse_moe.gate$"],
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    return dequantized_golden(src, folder, dequantized, {
        "format": "compressed-tensors nvfp4-pack-quantized (attention and experts quantized)",
        "golden": "the dequantized fp32 model (codes x weight_scale / weight_global_scale) in "
                   "transformers, eager, no activation quantization"})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "..", "tests", "fixtures", "hf")
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args()
    import torch
    import transformers
    assert transformers.__version__ == "5.17.0" and torch.__version__.startswith("2.11.0"), (
        transformers.__version__, torch.__version__)
    ref = make_gpt_oss_mxfp4(os.path.join(args.out, "gpt_oss"),
                             os.path.join(args.out, "gpt_oss_mxfp4"))
    print(json.dumps(ref, indent=2))
    ref = make_mixtral_nvfp4(os.path.join(args.out, "mixtral"),
                             os.path.join(args.out, "mixtral_nvfp4"))
    print(json.dumps(ref, indent=2))
    ref = make_mixtral_ct_nvfp4(os.path.join(args.out, "mixtral"),
                                os.path.join(args.out, "mixtral_ct_nvfp4"))
    print(json.dumps(ref, indent=2))


if __name__ == "__main__":
    main()
