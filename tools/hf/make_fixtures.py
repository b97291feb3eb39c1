#!/usr/bin/env python3
"""Tiny random Hugging Face MoE models and their transformers outputs, the references of
tests/e2e/hf_golden_test.cc.

For every family: build a tiny model from a config object (no download), fp32, eager attention and
eager experts, give every constant-initialised parameter (norm weights, biases, DeepSeek-V3's
e_score_correction_bias) random values so that no term hides, save it with save_pretrained
(config.json + model.safetensors, the on-disk naming the importer reads), then record

  logits.npy      float32 [T, vocab]: the logits of PROMPT (one forward, positions 0..T-1)
  reference.json  prompt ids, greedy ids (GREEDY_TOKENS new tokens, eos disabled), versions

and reload the saved folder to check it reproduces the logits. The sizes are chosen so that every
feature of the family runs (dense and MoE layers, shared experts, groups, sinks, sliding windows
and chunks shorter than the prompt, NoPE layers, qk norms, clip_qkv, YaRN / llama3 RoPE, Granite
multipliers, tied embeddings) while all fixtures together stay a few MB.

    /work/.venv-hf/bin/python tools/hf/make_fixtures.py [--out tests/fixtures/hf] [family ...]

The versions are pinned: transformers==5.17.0, torch==2.11.0 (checked at start).
"""
import argparse
import json
import math
import os
import shutil
import sys

REQUIRED = {"transformers": "5.17.0", "torch": "2.11.0"}

PROMPT = [1, 17, 42, 5, 99, 23, 64, 8, 77, 3, 120, 56]
GREEDY_TOKENS = 6

# Sizes shared by every family unless it overrides them.
COMMON = dict(vocab_size=128, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, tie_word_embeddings=False, eos_token_id=2,
              initializer_range=0.08)


def families():
    """name -> (config class, model class, config kwargs, seed, notes)."""
    import transformers as t

    return {
        "mixtral": (t.MixtralConfig, t.MixtralForCausalLM, dict(
            COMMON, num_hidden_layers=2, intermediate_size=48, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=8),
            11, "4 experts top-2 (always renormalised), sliding window 8 < prompt"),
        "qwen2_moe": (t.Qwen2MoeConfig, t.Qwen2MoeForCausalLM, dict(
            COMMON, num_hidden_layers=3, intermediate_size=64, moe_intermediate_size=24,
            shared_expert_intermediate_size=40, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=False, mlp_only_layers=[1], use_sliding_window=True, sliding_window=6,
            max_window_layers=2),
            12, "q/k/v bias, gated shared expert, layer 1 dense (mlp_only_layers), "
                "layer 0 sliding (layer_types)"),
        "qwen3_moe": (t.Qwen3MoeConfig, t.Qwen3MoeForCausalLM, dict(
            COMMON, num_hidden_layers=3, head_dim=16, intermediate_size=64,
            moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[0]),
            13, "head_dim 16 != hidden/heads, per-head q/k norm, renormalised top-2, layer 0 dense"),
        "olmoe": (t.OlmoeConfig, t.OlmoeForCausalLM, dict(
            COMMON, num_hidden_layers=2, intermediate_size=32, num_experts=4,
            num_experts_per_tok=2, clip_qkv=0.5),
            14, "full-width q/k norm, clip_qkv 0.5 (clamps), no renormalisation"),
        "deepseek_v2_lite": (t.DeepseekV2Config, t.DeepseekV2ForCausalLM, dict(
            COMMON, num_key_value_heads=4, num_hidden_layers=2, intermediate_size=64,
            moe_intermediate_size=16, n_routed_experts=8, n_shared_experts=2,
            num_experts_per_tok=2, first_k_dense_replace=1, topk_method="greedy",
            routed_scaling_factor=1.5, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=8),
            15, "q_lora_rank null (q_proj), greedy routing, 2 shared experts, layer 0 dense"),
        "deepseek_v2": (t.DeepseekV2Config, t.DeepseekV2ForCausalLM, dict(
            COMMON, num_key_value_heads=4, num_hidden_layers=2, intermediate_size=64,
            moe_intermediate_size=16, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, topk_method="group_limited_greedy",
            n_group=4, topk_group=2, routed_scaling_factor=16.0, q_lora_rank=24, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                          "mscale": 0.707, "mscale_all_dim": 0.707,
                          "beta_fast": 32, "beta_slow": 1}),
            16, "q_lora, group_limited_greedy (4 groups keep 2), YaRN with mscale_all_dim "
                "(softmax scale x mscale^2)"),
        "deepseek_v3": (t.DeepseekV3Config, t.DeepseekV3ForCausalLM, dict(
            COMMON, num_key_value_heads=4, num_hidden_layers=3, intermediate_size=64,
            moe_intermediate_size=16, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, n_group=4, topk_group=2,
            routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=24, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, rope_interleave=True,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                          "mscale": 1.0, "mscale_all_dim": 1.0,
                          "beta_fast": 32, "beta_slow": 1}),
            17, "noaux_tc with random e_score_correction_bias, rope_interleave, YaRN, "
                "layer 0 dense"),
        "gpt_oss": (t.GptOssConfig, t.GptOssForCausalLM, dict(
            COMMON, num_hidden_layers=2, head_dim=8, intermediate_size=32, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=4),
            18, "sinks, layer 0 sliding window 4 / layer 1 full, q/k/v/o and expert biases, "
                "interleaved gate/up (x30 so the +-7 clamp bites), YaRN"),
        "llama4": (t.Llama4TextConfig, t.Llama4ForCausalLM, dict(
            COMMON, num_hidden_layers=4, head_dim=8, intermediate_size=24,
            intermediate_size_mlp=48, num_local_experts=4, num_experts_per_tok=1,
            interleave_moe_layer_step=2, no_rope_layer_interval=2, attention_chunk_size=4,
            use_qk_norm=True, attn_temperature_tuning=True, floor_scale=4, attn_scale=0.1,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
            19, "layers 1, 3 MoE (shared expert, top-1 sigmoid on the input), layers 0, 2 dense; "
                "RoPE layers chunked (4) with L2 qk-norm, NoPE layers with temperature tuning "
                "(floor_scale 4), llama3 RoPE"),
        "granitemoe": (t.GraniteMoeConfig, t.GraniteMoeForCausalLM, dict(
            COMMON, num_hidden_layers=2, intermediate_size=24, num_local_experts=4,
            num_experts_per_tok=2, embedding_multiplier=0.5, residual_multiplier=2.0,
            attention_multiplier=0.2, logits_scaling=4.0, tie_word_embeddings=True),
            20, "top-k-then-softmax, multipliers (embedding, residual, attention, logits), "
                "tied embeddings"),
        "granitemoeshared": (t.GraniteMoeSharedConfig, t.GraniteMoeSharedForCausalLM, dict(
            COMMON, num_hidden_layers=2, intermediate_size=24, num_local_experts=4,
            num_experts_per_tok=2, shared_intermediate_size=40, embedding_multiplier=0.5,
            residual_multiplier=2.0, attention_multiplier=0.2, logits_scaling=4.0,
            tie_word_embeddings=True),
            21, "as granitemoe plus a shared MLP (fused input_linear split into gate and up)"),
        # Odd sizes: rows that are not 16-byte multiples, for the CUDA paths that pad or fall back
        # (docs/gpu.md, "Odd sizes"); tiny head dims.
        "mixtral_odd": (t.MixtralConfig, t.MixtralForCausalLM, dict(
            COMMON, hidden_size=27, num_attention_heads=3, num_key_value_heads=1, head_dim=10,
            num_hidden_layers=2, intermediate_size=19, num_local_experts=4,
            num_experts_per_tok=2),
            22, "odd sizes: hidden 27, expert intermediate 19 (prime), head_dim 10, 1 kv head"),
        "qwen3_moe_odd": (t.Qwen3MoeConfig, t.Qwen3MoeForCausalLM, dict(
            COMMON, hidden_size=36, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
            num_hidden_layers=2, intermediate_size=30, moe_intermediate_size=13, num_experts=5,
            num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[0]),
            23, "odd sizes: hidden 36, expert intermediate 13, dense intermediate 30, head_dim 6"),
    }


def check_versions():
    import torch
    import transformers

    found = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
    bad = [f"{k}=={found[k]} (need {v})" for k, v in REQUIRED.items() if found[k] != v]
    if bad:
        sys.exit("make_fixtures.py: wrong versions: " + ", ".join(bad) +
                 "; install transformers==5.17.0 torch==2.11.0 (the goldens depend on them)")
    return found


def randomise_constant_parameters(model, generator):
    """Norm weights (ones), biases and buffers-turned-parameters (zeros) get random values."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().flatten()
            if flat.numel() > 1 and not torch.all(flat == flat[0]):
                continue
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
        # DeepSeek-V3's selection bias is a buffer initialised to zeros, which hides selection bugs.
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=generator))


def build(name, spec, out_dir):
    import numpy as np
    import torch

    config_class, model_class, kwargs, seed, notes = spec
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed + 1000)
    config = config_class(**kwargs)
    model = model_class(config).float().eval()
    model.set_attn_implementation("eager")
    try:
        model.set_experts_implementation("eager")
        experts = "eager"
    except Exception:  # Llama-4 experts have only their dense bmm path
        experts = "dense bmm (not switchable)"
    randomise_constant_parameters(model, generator)
    if name == "gpt_oss":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.experts.gate_up_proj.mul_(30.0)

    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    for extra in ("generation_config.json",):
        path = os.path.join(folder, extra)
        if os.path.exists(path):
            os.remove(path)

    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        generated = model.generate(ids, do_sample=False,
                                   max_new_tokens=GREEDY_TOKENS)[0, len(PROMPT):].tolist()
        # The same greedy ids by plain argmax over full recomputation (no cache).
        seq = list(PROMPT)
        for _ in range(GREEDY_TOKENS):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        assert seq[len(PROMPT):] == generated, (name, seq[len(PROMPT):], generated)

    # The saved folder must reproduce the logits.
    reloaded = model_class.from_pretrained(folder, dtype=torch.float32).eval()
    reloaded.set_attn_implementation("eager")
    try:
        reloaded.set_experts_implementation("eager")
    except Exception:
        pass
    with torch.no_grad():
        again = reloaded(ids).logits[0].float().numpy()
    assert np.array_equal(again, logits), (name, float(np.abs(again - logits).max()))

    np.save(os.path.join(folder, "logits.npy"), logits.astype(np.float32))
    return {
        "family": name,
        "model_type": config.model_type,
        "model_class": model_class.__name__,
        "prompt_ids": PROMPT,
        "greedy_ids": generated,
        "attn_implementation": "eager",
        "experts_implementation": experts,
        "dtype": "float32",
        "seed": seed,
        "notes": notes,
    }, folder


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def write_readme(out_dir, versions, rows):
    lines = [
        "# Hugging Face reference fixtures",
        "",
        "Tiny random models of every supported family, saved with `save_pretrained`, and the outputs",
        "transformers computes for them. Written by `tools/hf/make_fixtures.py`; read by",
        "`tests/e2e/hf_golden_test.cc`. Regenerate with",
        "",
        "    /work/.venv-hf/bin/python tools/hf/make_fixtures.py --out tests/fixtures/hf",
        "",
        f"Versions: transformers=={versions['transformers']}, torch=={versions['torch']} "
        "(pinned; the script refuses others). fp32 weights, eager attention, eager experts.",
        f"Prompt: {PROMPT} (positions 0..{len(PROMPT) - 1}); greedy: {GREEDY_TOKENS} new tokens "
        "with eos disabled.",
        "",
        "Each folder: `config.json`, `model.safetensors` (per-expert names as on the Hub),",
        "`logits.npy` (float32 [T, vocab] of the prompt), `reference.json` (prompt, greedy ids,",
        "settings).",
        "",
        "| folder | model class | what it exercises | size |",
        "|---|---|---|---|",
    ]
    for ref, size in rows:
        lines.append(f"| {ref['family']} | {ref['model_class']} | {ref['notes']} | "
                     f"{size / 1024:.0f} KiB |")
    total = sum(size for _, size in rows)
    lines += ["", f"Total: {total / 1024:.0f} KiB.", "",
              "The FP8 checkpoints (`*_fp8*` folders) and their goldens are written by",
              "`tools/hf/make_fp8_fixtures.py`: see README_fp8.md. The GPT-OSS MXFP4",
              "checkpoint (`gpt_oss_mxfp4`) is written by `tools/hf/make_fp4_fixtures.py`: see",
              "README_fp4.md.", ""]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tests", "fixtures", "hf"))
    parser.add_argument("families", nargs="*", help="families to (re)build; default: all")
    args = parser.parse_args()
    versions = check_versions()
    import torch

    torch.set_num_threads(1)
    all_families = families()
    names = args.families or list(all_families)
    unknown = [n for n in names if n not in all_families]
    if unknown:
        sys.exit(f"unknown families {unknown}; known: {list(all_families)}")
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        ref, folder = build(name, all_families[name], args.out)
        ref["transformers"] = versions["transformers"]
        ref["torch"] = versions["torch"]
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(ref, f, indent=2)
            f.write("\n")
        print(f"{name}: greedy {ref['greedy_ids']}, {folder_bytes(folder) / 1024:.0f} KiB")
    rows = []
    for name in all_families:
        folder = os.path.join(args.out, name)
        path = os.path.join(folder, "reference.json")
        if os.path.exists(path):
            with open(path) as f:
                rows.append((json.load(f), folder_bytes(folder)))
    write_readme(args.out, versions, rows)


if __name__ == "__main__":
    main()
