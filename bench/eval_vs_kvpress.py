#!/usr/bin/env python3
"""Hugging Face transformers + NVIDIA kvpress on an evaluation sweep: the comparison point for
`kvscope-cli eval` (issue 32, docs/performance.md "Evaluation throughput"). Speed only: random bf16
weights of a config.json (bench/configs/llama-3.1-8b.json), the samples of a kvscope JSONL file
(`kvscope-cli eval ... --write-samples`), every press at every compression ratio, question-agnostic
as kvpress's pipeline runs it (KVPressTextGenerationPipeline._forward): the press compresses the
context's prefill, the question (+ answer prefix) follows at its true positions, greedy decoding to
the sample's max_new_tokens or an EOS id. One prefill per (sample, press, ratio): kvpress has no way
to compress one prefill several ways.

kvpress is read from a source checkout (--kvpress DIR holding the package folder `kvpress/`; the GPU
machine has no PyPI: tools/eval-speed.sh says how it travels). Its optional imports that the presses
benchmarked here never use (datasets, cachetools, fire) are stubbed when absent. kvpress 0.5.4 pins
transformers < 5.3; with a later transformers its prefill test reads `cache_position`, which
attention layers no longer receive: the hook gets it from the cache length instead (the adaptation
pycode-recall-17m's golden file was made with).

  python3 bench/eval_vs_kvpress.py --config bench/configs/llama-3.1-8b.json --tokenizer DIR \
      --samples S.jsonl --kvpress .carry-bench --json out.json
Prints one line per (press, ratio) and the total: items, seconds, items per minute.
"""
import argparse
import json
import os
import sys
import time
import types


def stub_missing(name: str, **attrs) -> None:
    try:
        __import__(name)
    except ImportError:
        mod = types.ModuleType(name)
        for k, v in attrs.items():
            setattr(mod, k, v)
        sys.modules[name] = mod


def load_kvpress(path: str):
    stub_missing("datasets", load_dataset=None)
    stub_missing("cachetools", LRUCache=lambda *a, **k: None, cached=lambda *a, **k: (lambda f: f))
    stub_missing("fire", Fire=None)
    sys.path.insert(0, path)
    import torch
    import kvpress
    from kvpress.presses import base_press

    original = base_press.BasePress.forward_hook

    def forward_hook(self, module, inputs, kwargs, output):
        if kwargs.get("cache_position") is None:
            q_len = kwargs["hidden_states"].shape[1]
            n = kwargs["past_key_values"].layers[module.layer_idx].keys.shape[2]  # after this step's update
            kwargs = dict(kwargs, cache_position=torch.arange(n - q_len, n, device=kwargs["hidden_states"].device))
        return original(self, module, inputs, kwargs, output)

    base_press.BasePress.forward_hook = forward_hook
    return kvpress


def make_press(kvpress, name: str, ratio: float):
    if name == "snapkv":
        return kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5)
    if name == "streamingllm":
        return kvpress.StreamingLLMPress(compression_ratio=ratio, n_sink=4)
    if name == "keydiff":
        return kvpress.KeyDiffPress(compression_ratio=ratio)
    if name == "knorm":
        return kvpress.KnormPress(compression_ratio=ratio)
    if name == "tova":
        return kvpress.TOVAPress(compression_ratio=ratio)
    if name == "adakv-snapkv":
        return kvpress.AdaKVPress(kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5),
                                  alpha_safeguard=0.2)
    raise SystemExit(f"eval_vs_kvpress: unknown press {name!r}")


def tokenize(tok, s: dict):
    """kvpress's KVPressTextGenerationPipeline.preprocess on one kvscope sample."""
    context = s["instruction"] + s["context"]
    if s.get("chat", True) and tok.chat_template is not None:
        sep = "#" * (len(context) + 10)
        text = tok.apply_chat_template([{"role": "user", "content": context + sep}], add_generation_prompt=True,
                                       tokenize=False)
        context, suffix = text.split(sep)
    else:
        context, suffix = (tok.bos_token or "") + context, "\n"
    question = s["question"] + suffix + s.get("answer_prefix", "")
    c = tok.encode(context, return_tensors="pt", add_special_tokens=False)
    q = tok.encode(question, return_tensors="pt", add_special_tokens=False)
    return c, q


def answer(torch, model, cache, question_ids, context_length: int, max_new_tokens: int, stop) -> int:
    """kvpress's KVPressTextGenerationPipeline.generate_answer (logits_to_keep: transformers 5)."""
    pos = torch.arange(context_length, context_length + question_ids.shape[1], device="cuda").unsqueeze(0)
    out = model(input_ids=question_ids, past_key_values=cache, position_ids=pos, logits_to_keep=1)
    pos = pos[:, -1:] + 1
    ids = [out.logits[0, -1].argmax()]
    for i in range(max_new_tokens - 1):
        out = model(input_ids=ids[-1].view(1, 1), past_key_values=cache, position_ids=pos + i)
        ids.append(out.logits[0, -1].argmax())
        if ids[-1].item() in stop:
            break
    return len(ids)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--tokenizer", required=True, help="directory of tokenizer.json + tokenizer_config.json")
    ap.add_argument("--samples", required=True, help="kvscope JSONL (kvscope-cli eval --write-samples)")
    ap.add_argument("--kvpress", required=True, help="directory holding kvpress's package folder")
    ap.add_argument("--presses", default="snapkv,streamingllm,keydiff,knorm,tova,adakv-snapkv")
    ap.add_argument("--ratios", default="0.25,0.5,0.75")
    ap.add_argument("--shard", default="0/1", help="i/n: only every n-th sample from i (one process per GPU)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoTokenizer, DynamicCache, LlamaConfig, LlamaForCausalLM

    kvpress = load_kvpress(args.kvpress)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    samples = [json.loads(line) for line in open(args.samples) if line.strip()]
    i, n = (int(x) for x in args.shard.split("/"))
    samples = samples[i::n]
    cfg = LlamaConfig(**json.load(open(args.config)))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    t_load = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t_load
    stop = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    presses = args.presses.split(",")
    ratios = [float(r) for r in args.ratios.split(",")]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, kvpress "
          f"{getattr(kvpress, '__version__', '?')}, {torch.cuda.get_device_name()}; {len(samples)} samples, "
          f"model built in {load_s:.1f} s", flush=True)
    rows = []
    t_all = time.perf_counter()
    new_tokens = 0
    with torch.inference_mode():
        for name in presses:
            for r in ratios:
                t0 = time.perf_counter()
                for s in samples:
                    c, q = tokenize(tok, s)
                    c, q = c.cuda(), q.cuda()
                    cache = DynamicCache()
                    with make_press(kvpress, name, r)(model):
                        model.model(input_ids=c, past_key_values=cache)
                    new_tokens += answer(torch, model, cache, q, c.shape[1], int(s["max_new_tokens"]), stop)
                    del cache
                torch.cuda.synchronize()
                sec = time.perf_counter() - t0
                rows.append({"press": name, "ratio": r, "items": len(samples), "seconds": sec})
                print(f"  {name:>14} @ {r:<5} {len(samples)} items {sec:7.1f} s", flush=True)
    total = time.perf_counter() - t_all
    items = len(samples) * len(presses) * len(ratios)
    print(f"HF + kvpress: {items} items in {total:.1f} s = {60 * items / total:.2f} items/min "
          f"({new_tokens} tokens generated)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"items": items, "seconds": total, "items_per_min": 60 * items / total, "load_s": load_s,
                       "new_tokens": new_tokens, "rows": rows, "device": torch.cuda.get_device_name(),
                       "transformers": transformers.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
