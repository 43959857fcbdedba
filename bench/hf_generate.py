#!/usr/bin/env python3
"""Hugging Face transformers on the same shape as bench_engine: the comparison point for kvscope's
decode and prefill (issue 6). Random bf16 weights of a config.json (bench/configs/llama-3.1-8b.json),
batch 1, greedy.

Per context: prefill = model forward over the prompt (SDPA attention, logits of the last token
only: PyTorch's own scaled_dot_product_attention prefill); decode = generate() with the default
dynamic cache, tokens/s over the new tokens after the first. Prints a table and writes JSON.

  python3 bench/hf_generate.py --config bench/configs/llama-3.1-8b.json --contexts 8192,32768 --json out.json
"""
import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("hf_generate: transformers is not installed; nothing to compare")
        return
    cfg = LlamaConfig(**json.load(open(args.config)))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'context':>8} {'prefill tok/s':>14} {'decode tok/s':>13}")
    rows = []
    for ctx in [int(c) for c in args.contexts.split(",")]:
        ids = torch.randint(0, cfg.vocab_size, (1, ctx), device="cuda")
        with torch.inference_mode():
            model(ids[:, :256], logits_to_keep=1)  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids, logits_to_keep=1, use_cache=False)
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t0
            gen = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, **gen)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **gen)
            torch.cuda.synchronize()
            total_s = time.perf_counter() - t0
        n_new = out.shape[1] - ctx
        decode = (n_new - 1) / max(total_s - first_s, 1e-9)
        print(f"{ctx:>8} {ctx / prefill_s:>14.0f} {decode:>13.1f}")
        rows.append({"context": ctx, "prefill_tokens_per_s": ctx / prefill_s, "decode_tokens_per_s": decode,
                     "new_tokens": n_new})
        del out
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
