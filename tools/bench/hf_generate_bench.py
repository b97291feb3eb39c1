#!/usr/bin/env python3
"""transformers' `generate` on the Qwen3-30B-A3B-shaped model, for docs/performance.md.

The same shape `moegraph bench e2e` times (tools/gpu_check.sh): 48 layers, hidden 2048, 32 heads /
4 KV heads x 128 with q/k norm, 128 experts, top-8, expert intermediate 768, vocab 151936, untied
LM head; random BF16 weights made on the GPU (61 GB: it fits an 80 GB H100 with room for the KV
cache). Uses torch and transformers only.

Prints, batch 1, greedy:
  prefill tokens/s at each --prompt-tokens (one generate call with max_new_tokens=1: the forward
  over the prompt and one sampled token), and
  decode tokens/s after a --decode-context prompt: (N - 1) / (time of N new tokens - time of 1).
Medians of --repeats runs after one warm-up run, CUDA-synchronised wall time.

With --batch 1,8,32,128 (what `moegraph bench serve` runs): batched `generate` of B random
prompts of --serve-prompt-tokens, each making exactly --serve-decode-tokens tokens, greedy; decode
tokens/s = B (N - 1) / (time of N new tokens - time of 1), the step time (every sequence's time
between consecutive tokens: one step gives each one token) and e2e tokens/s = B N / time of N.

Usage (GPU machine): python3 tools/bench/hf_generate_bench.py [--layers 48] [--decode-tokens 32]
                     [--batch 1,8,32,128] [--skip-batch1]
"""
import argparse
import statistics
import time

import torch


def build_model(layers: int):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,  # dense MLP size; unused: every layer is MoE
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(1)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # made in BF16 on the GPU: fp32 would not fit
    with torch.device("cuda"):
        model = Qwen3MoeForCausalLM(config)
    torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.pad_token_id = 0
    return model


def timed_generate(model, prompt_tokens: int, new_tokens: int, repeats: int,
                   batch: int = 1) -> float:
    """Median seconds of generate(batch x prompt_tokens random ids, exactly new_tokens new
    tokens each)."""
    ids = torch.randint(1, 151936, (batch, prompt_tokens), device="cuda")
    mask = torch.ones_like(ids)
    times = []
    for r in range(repeats + 1):  # the first run warms up
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False)
        torch.cuda.synchronize()
        if r > 0:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--prompt-tokens", default="512,4096",
                   help="prefill lengths, comma-separated")
    p.add_argument("--decode-context", type=int, default=512, help="prompt before the decode")
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", default="",
                   help="batched generate at these batch sizes, comma-separated (e.g. 1,8,32,128)")
    p.add_argument("--serve-prompt-tokens", type=int, default=128)
    p.add_argument("--serve-decode-tokens", type=int, default=128)
    p.add_argument("--skip-batch1", action="store_true",
                   help="skip the batch-1 prefill and decode runs (only --batch)")
    a = p.parse_args()

    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name(0)}")
    start = time.perf_counter()
    model = build_model(a.layers)
    params = sum(t.numel() for t in model.parameters())
    print(f"model: Qwen3-30B-A3B-shaped, {a.layers} layers, {params / 1e9:.2f} B parameters "
          f"(BF16, random), built in {time.perf_counter() - start:.0f} s; "
          f"attention {model.config._attn_implementation}")

    for b in [int(x) for x in a.batch.split(",") if x]:
        n, ctx = a.serve_decode_tokens, a.serve_prompt_tokens
        one = timed_generate(model, ctx, 1, a.repeats, batch=b)
        many = timed_generate(model, ctx, n, a.repeats, batch=b)
        step = (many - one) / (n - 1)
        print(f"batch {b}: prompt {ctx}, {n} new tokens each: decode {b / step:.1f} tokens/s, "
              f"step {step * 1e3:.2f} ms, e2e {b * n / many:.1f} tokens/s (median of "
              f"{a.repeats} runs)")
    if a.skip_batch1:
        return
    for n in [int(x) for x in a.prompt_tokens.split(",") if x]:
        t = timed_generate(model, n, 1, a.repeats)
        print(f"prefill: {n} tokens, median {n / t:.1f} tokens/s ({t * 1e3:.1f} ms, "
              f"incl. one sampled token) over {a.repeats} runs")
    one = timed_generate(model, a.decode_context, 1, a.repeats)
    many = timed_generate(model, a.decode_context, a.decode_tokens, a.repeats)
    rate = (a.decode_tokens - 1) / (many - one)
    print(f"decode: {a.decode_tokens} tokens after a {a.decode_context}-token prompt (batch 1), "
          f"median {rate:.2f} tokens/s over {a.repeats} runs")


if __name__ == "__main__":
    main()
