#!/usr/bin/env python3
"""Records the kept sets of NVIDIA kvpress presses on the embedded models' golden prompts, as test
references for presses whose golden files hold none (PyramidKV: the pycode-16m goldens record its
greedy text only). Runs on the GPU machine (transformers, fp32, sdpa, TF32 off) with kvpress from
a source checkout (tools/eval-speed.sh carry DIR lays it in .carry-bench).

A press is run as kvpress runs it (`with press(model): model(input_ids)`); its compress() is
wrapped so that the keys it returns are matched, row by row and bit for bit, with the keys it was
given: kept[layer][kv_head] is the sorted list of prompt positions that survived.

  python3 tools/kvpress-kept.py --kvpress .carry-bench --out tests/data/kvpress/pyramidkv_kept.json
"""
import argparse
import json
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from eval_vs_kvpress import load_kvpress  # noqa: E402  (stubs kvpress's optional imports)

# (model directory, golden file) pairs: the prompts whose kept sets are recorded.
PROMPTS = [
    ("assets/models/pycode-16m", "assets/models/pycode-16m/golden/argparse_head.json"),
    ("assets/models/pycode-16m", "assets/models/pycode-16m/golden/textwrap_head.json"),
]


def make_press(kvpress, name, ratio):
    if name == "pyramidkv_w64_k5_b20":
        return kvpress.PyramidKVPress(compression_ratio=ratio, window_size=64, kernel_size=5, beta=20)
    if name == "snapkv_w64_k5_avg":  # the capture's own check: the goldens record SnapKV's kept sets
        return kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5)
    raise SystemExit(f"kvpress-kept: unknown press {name!r}")


def kept_positions(torch, before, after):
    """Per KV head, the sorted positions of `before`'s rows [n, D] that `after`'s rows [k, D] are."""
    out = []
    for h in range(before.shape[1]):
        index = {bytes(r.numpy().tobytes()): i for i, r in enumerate(before[0, h].float().cpu())}
        pos = [index[bytes(r.numpy().tobytes())] for r in after[0, h].float().cpu()]
        if len(set(pos)) != len(pos):
            raise SystemExit("kvpress-kept: two kept rows matched one prompt position")
        out.append(sorted(pos))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvpress", required=True, help="directory holding kvpress's package folder")
    ap.add_argument("--presses", default="pyramidkv_w64_k5_b20,snapkv_w64_k5_avg")
    ap.add_argument("--ratios", default="0.5,0.75")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    kvpress = load_kvpress(args.kvpress)
    records = []
    models = {}
    for model_dir, golden in PROMPTS:
        if model_dir not in models:
            models[model_dir] = AutoModelForCausalLM.from_pretrained(
                os.path.join(ROOT, model_dir), dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
        model = models[model_dir]
        ids = json.load(open(os.path.join(ROOT, golden)))["input_ids"]
        for name in args.presses.split(","):
            for ratio in (float(r) for r in args.ratios.split(",")):
                press = make_press(kvpress, name, ratio)
                kept = {}
                original = press.compress

                def compress(module, hidden_states, keys, values, attentions, kwargs, original=original, kept=kept):
                    k2, v2 = original(module, hidden_states, keys, values, attentions, kwargs)
                    kept[module.layer_idx] = kept_positions(torch, keys, k2)
                    return k2, v2

                press.compress = compress
                with torch.inference_mode(), press(model):
                    model.model(input_ids=torch.tensor([ids], device="cuda"), past_key_values=DynamicCache())
                records.append({"model": os.path.basename(model_dir), "prompt": os.path.basename(golden),
                                "press": name, "ratio": ratio, "n_tok": len(ids),
                                "kept": [kept[l] for l in sorted(kept)]})
                sizes = [sum(len(h) for h in layer) for layer in records[-1]["kept"]]
                print(f"{os.path.basename(golden)} {name}@{ratio}: kept per layer {sizes}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"source": f"kvpress {getattr(kvpress, '__version__', '0.5.4')}, transformers "
                             f"{transformers.__version__}, torch {torch.__version__}, "
                             f"{torch.cuda.get_device_name()}, fp32 sdpa, TF32 off (tools/kvpress-kept.py)",
                   "records": records}, f, separators=(",", ":"))
    print(f"kvpress-kept: {len(records)} records -> {args.out}")


if __name__ == "__main__":
    main()
