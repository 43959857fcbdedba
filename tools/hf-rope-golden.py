#!/usr/bin/env python3
# transformers' own RoPE numbers for tests/core/test_rope_scaling.cpp (RopeScalingGolden): for each
# config.json below, loaded with AutoConfig as a checkpoint would be, the rotary embedding of its
# family (Llama, Phi3, Qwen2) is built and the script records
#   init:     inv_freq and attention_scaling as constructed (seq_len unknown),
#   direct:   ROPE_INIT_FUNCTIONS[rope_type](config, cpu, seq_len=s) at seq_lens around the thresholds,
#   forwards: one rotary module called on blocks of positions in order (its dynamic_rope_update
#             state carries over), with inv_freq, attention_scaling, and cos / sin (the first
#             rope_dim / 2 channels, fp32) of the positions after each call.
# Needs torch and transformers >= 5 (the GPU machine has them); runs on CPU in fp32.
#   python3 tools/hf-rope-golden.py tests/data/rope/hf_rope_golden.json
import argparse
import json
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

ROTARY = {"llama": LlamaRotaryEmbedding, "phi3": Phi3RotaryEmbedding, "qwen2": Qwen2RotaryEmbedding}

# microsoft/Phi-3.5-mini-instruct config.json: rope_scaling (longrope, head_dim 96: 48 factors each).
PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
    1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
    4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
    17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
    50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
    62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
    63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
    64.51000213623047, 64.52999877929688, 64.83999633789062,
]
PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979,
    1.0999999046325684, 1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662,
    1.2899998426437378, 1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533,
    2.729999542236328, 2.749999523162842, 2.8399994373321533,
]


def config(model_type, hidden, heads, max_pos, kv=None, head_dim=None, **extra):
    """A config.json of a family; only the rotary embedding is built, so the layer count is small."""
    c = {
        "model_type": model_type,
        "vocab_size": 1024,
        "hidden_size": hidden,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": kv or heads,
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
    }
    if model_type != "phi3":  # Phi3Config has no head_dim: hidden_size / heads
        c["head_dim"] = head_dim or hidden // heads
    c.update(extra)
    return c


def synthetic(n, lo, hi):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


CASES = [
    # longrope
    dict(name="phi3.5-mini-longrope",
         config=config("phi3", 3072, 32, 131072, original_max_position_embeddings=4096, rope_theta=10000.0,
                       rope_scaling={"long_factor": PHI35_LONG, "short_factor": PHI35_SHORT, "type": "longrope"}),
         direct=[1, 4096, 4097, 131072], forwards=[16, 4096, 4097, 9000, 4096, 100]),
    dict(name="phi4-mini-style-partial-longrope",  # 0.75 of head_dim 128 rotates: 48 factors
         config=config("phi3", 3072, 24, 131072, kv=8, original_max_position_embeddings=4096,
                       partial_rotary_factor=0.75,
                       rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                                        "long_factor": PHI35_LONG, "short_factor": PHI35_SHORT}),
         direct=[4096, 4097], forwards=[4096, 4097, 50]),
    dict(name="phi3-yarn-alias-longrope",  # Phi3Config reads "yarn" as longrope
         config=config("phi3", 3072, 32, 65536, original_max_position_embeddings=2048, rope_theta=10000.0,
                       rope_scaling={"type": "yarn", "long_factor": synthetic(48, 1.0, 30.0),
                                     "short_factor": synthetic(48, 1.0, 2.0)}),
         direct=[2048, 2049], forwards=[2048, 2049]),
    dict(name="phi3-su-alias-longrope",  # the earliest Phi-3 spelling (transformers may refuse it: then skipped)
         config=config("phi3", 3072, 32, 131072, original_max_position_embeddings=4096, rope_theta=10000.0,
                       rope_scaling={"type": "su", "long_factor": PHI35_LONG, "short_factor": PHI35_SHORT}),
         direct=[4097], forwards=[4096, 4097]),
    dict(name="llama-longrope-explicit-factor-and-attention",
         config=config("llama", 512, 8, 16384, rope_theta=10000.0,
                       rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0,
                                        "attention_factor": 1.25, "original_max_position_embeddings": 2048,
                                        "short_factor": synthetic(32, 1.0, 1.5),
                                        "long_factor": synthetic(32, 1.0, 8.0)}),
         direct=[2048, 2049], forwards=[2048, 2049, 10]),
    # yarn
    dict(name="qwen2.5-7b-yarn-factor4",
         config=config("qwen2", 3584, 28, 32768, kv=4, rope_theta=1000000.0,
                       rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}),
         direct=[1, 32768, 32769, 131072], forwards=[100, 40000]),
    dict(name="deepseek-v3-style-yarn-mscale",
         config=config("llama", 4096, 64, 163840, rope_theta=10000.0,
                       rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                     "type": "yarn"}),
         direct=[4096, 163840], forwards=[10, 5000, 163840]),
    dict(name="yarn-mscale-ratio",
         config=config("llama", 1024, 16, 32768, rope_theta=10000.0,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                        "beta_fast": 24.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.707,
                                        "original_max_position_embeddings": 2048}),
         direct=[2048], forwards=[10, 4000]),
    dict(name="gpt-oss-style-yarn-no-truncate",
         config=config("llama", 2880, 64, 131072, head_dim=64, rope_theta=150000.0,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                        "original_max_position_embeddings": 4096}),
         direct=[4096], forwards=[10, 5000]),
    dict(name="llama-yarn-without-original-context",  # original_max_position_embeddings = max_position_embeddings
         config=config("llama", 512, 4, 8192, rope_theta=10000.0, rope_scaling={"rope_type": "yarn", "factor": 2.0}),
         direct=[8192, 8193], forwards=[8193]),
    # dynamic
    dict(name="llama2-dynamic-factor2",
         config=config("llama", 4096, 32, 4096, rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 2.0}),
         direct=[1, 4096, 4097, 8192, 12345],
         forwards=[100, 4096, 4097, 6000, 5000, 4096, 4095, 8192, 8193, 1, 4097]),
    dict(name="qwen2-dynamic-factor3.3-rope-parameters",
         config=config("qwen2", 1024, 8, 2048, rope_theta=1000000.0,
                       rope_parameters={"rope_type": "dynamic", "factor": 3.3, "rope_theta": 1000000.0}),
         direct=[2048, 2049, 3000], forwards=[2048, 2049, 3000, 2047, 2500, 3001]),
    # the types kvscope had before, for regression
    dict(name="llama3.1-8b-llama3",
         config=config("llama", 4096, 32, 131072, kv=8, rope_theta=500000.0,
                       rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
         direct=[8192, 8193], forwards=[10, 10000]),
    dict(name="llama-linear-factor4",
         config=config("llama", 512, 4, 16384, rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 4.0}),
         direct=[100], forwards=[10, 5000]),
    dict(name="qwen2-default",
         config=config("qwen2", 896, 14, 32768, kv=2, rope_theta=1000000.0),
         direct=[100], forwards=[10, 40000]),
]


def floats(t):
    return t.detach().to("cpu", torch.float64).reshape(-1).tolist()


def run_case(case):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(case["config"], f)
        cfg = AutoConfig.from_pretrained(d)
    rope = ROTARY[case["config"]["model_type"]](config=cfg)
    rope_type = cfg.rope_parameters["rope_type"]
    rope_dim = 2 * rope.inv_freq.numel()
    out = {
        "name": case["name"],
        "config": case["config"],
        "hf_rope_parameters": cfg.rope_parameters,
        "rope_type": rope_type,
        "rope_dim": rope_dim,
        "init": {"inv_freq": floats(rope.inv_freq), "attention_scaling": float(rope.attention_scaling)},
        "direct": [],
        "forwards": [],
    }
    init_fn = ROPE_INIT_FUNCTIONS.get(rope_type)
    for s in case["direct"]:
        if init_fn is None:  # default: the rotary class's own
            inv, att = type(rope).compute_default_rope_parameters(cfg, torch.device("cpu"), seq_len=s)
        else:
            inv, att = init_fn(cfg, torch.device("cpu"), seq_len=s)
        out["direct"].append({"seq_len": s, "inv_freq": floats(inv), "attention_scaling": float(att)})
    x = torch.zeros(1, 1, dtype=torch.float32)
    for s in case["forwards"]:
        positions = sorted({p for p in (0, 1, s // 2, s - 1) if 0 <= p < s})
        with torch.no_grad():
            cos, sin = rope(x, torch.tensor([positions], dtype=torch.long))
        half = rope_dim // 2
        out["forwards"].append({
            "seq_len": s,
            "positions": positions,
            "inv_freq": floats(rope.inv_freq),
            "attention_scaling": float(rope.attention_scaling),
            "cos": cos[0, :, :half].to(torch.float64).tolist(),
            "sin": sin[0, :, :half].to(torch.float64).tolist(),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("output", help="the golden JSON to write, e.g. tests/data/rope/hf_rope_golden.json")
    args = ap.parse_args()
    if int(transformers.__version__.split(".")[0]) < 5:
        sys.exit(f"transformers >= 5 needed (rope_parameters semantics), found {transformers.__version__}")
    torch.set_grad_enabled(False)
    cases = []
    for case in CASES:
        try:
            cases.append(run_case(case))
            print(f"{case['name']}: {cases[-1]['rope_type']}, attention_scaling {cases[-1]['init']['attention_scaling']}")
        except Exception as e:  # noqa: BLE001 -- recorded: the C++ test reports the case as skipped
            cases.append({"name": case["name"], "config": case["config"], "skipped": f"{type(e).__name__}: {e}"})
            print(f"{case['name']}: transformers refused it: {type(e).__name__}: {e}", file=sys.stderr)
    golden = {
        "format": "kvscope.hf_rope_golden.v1",
        "generator": "tools/hf-rope-golden.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {args.output}: {sum('skipped' not in c for c in cases)} of {len(cases)} cases")


if __name__ == "__main__":
    main()
