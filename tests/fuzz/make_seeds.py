#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets in tests/fuzz, made from the real files in assets/.

    tests/fuzz/make_seeds.py OUT_DIR [SESSION_DB]

Writes OUT_DIR/<target>/seed-*: small inputs (a few KB each; the fuzzers' -max_len) that keep the
structure of the embedded models' files: the pycode-16m safetensors header with tensors shrunk to
tiny shapes, its config.json and a vocabulary-trimmed tokenizer.json, stories260K's header (and a
tiny consistent one) and tok512.bin, the presets and README pipelines, assets/sweeps/*.toml, and a
session database (SESSION_DB if given, e.g. one written by the test suite; else an empty file).
Nothing generated is committed (the committed, minimised corpus of campaigns is tests/fuzz/corpus).
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYCODE = os.path.join(ROOT, "assets", "models", "pycode-16m")
STORIES = os.path.join(ROOT, "assets", "models", "stories260K")


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors_file(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds(out):
    with open(os.path.join(PYCODE, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    size = {"BF16": 2, "F16": 2, "F32": 4}
    small, offset = {"__metadata__": header.get("__metadata__", {})}, 0
    for i, (name, e) in enumerate(k for k in header.items() if k[0] != "__metadata__"):
        if i >= 12:
            break
        shape = [2] * len(e["shape"])
        nbytes = size[e["dtype"]] * (2 ** len(shape))
        small[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    write(out, "fuzz_safetensors_header", "pycode-shrunk", safetensors_file(small, bytes(offset)))
    one = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
    write(out, "fuzz_safetensors_header", "f32", safetensors_file(one, bytes(24)))
    write(out, "fuzz_safetensors_header", "empty", safetensors_file({}, b""))
    names = [k for k in header if k != "__metadata__"]
    index = {"metadata": {"total_size": 1}, "weight_map": {
        n: "model-%05d-of-00002.safetensors" % (1 + i % 2) for i, n in enumerate(names)}}
    write(out, "fuzz_safetensors_index", "pycode-sharded", json.dumps(index, indent=2))
    write(out, "fuzz_safetensors_index", "one", '{"weight_map": {"a": "model.safetensors"}}')


def config_seeds(out):
    with open(os.path.join(PYCODE, "config.json")) as f:
        text = f.read()
    write(out, "fuzz_config_json", "pycode", text)
    c = json.loads(text)
    c.pop("rope_parameters")
    c.update({"model_type": "qwen2", "rope_theta": 1e6, "eos_token_id": [1, 2],
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    write(out, "fuzz_config_json", "qwen2-llama3", json.dumps(c))


def tokenizer_seeds(out):
    with open(os.path.join(PYCODE, "tokenizer.json")) as f:
        t = json.load(f)
    keep = {tok: i for tok, i in t["model"]["vocab"].items() if i < 320}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in keep and b in keep and a + b in keep:
            merges.append(m)
    t["model"]["vocab"], t["model"]["merges"] = keep, merges[:200]
    write(out, "fuzz_tokenizer_json", "pycode-trimmed", json.dumps(t, ensure_ascii=False))
    spm = {"model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>",
                     "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "\u2581": 4, "a": 5, "b": 6,
                               "ab": 7, "\u2581a": 8},
                     "merges": ["a b", "\u2581 a"]},
           "normalizer": {"type": "Sequence", "normalizers": [
               {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "},
                                                          "content": "\u2581"}]},
           "pre_tokenizer": None,
           "decoder": {"type": "Sequence", "decoders": [
               {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
               {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
           "added_tokens": [{"id": 1, "content": "<s>", "special": True}]}
    write(out, "fuzz_tokenizer_json", "spm-style", json.dumps(spm, ensure_ascii=False))


def llama2c_seeds(out):
    with open(os.path.join(STORIES, "stories260K.bin"), "rb") as f:
        head = f.read(28)
    write(out, "fuzz_llama2c_header", "stories260K-truncated", head + bytes(64))
    dim, hid, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 1, 4, 4
    hs = dim // heads
    floats = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv * hs * dim + layers * dim * dim
              + layers * dim + 3 * layers * hid * dim + dim + seq * hs)
    write(out, "fuzz_llama2c_header", "tiny", struct.pack("<7i", dim, hid, layers, heads, kv, vocab, seq)
          + bytes(4 * floats))
    with open(os.path.join(STORIES, "tok512.bin"), "rb") as f:
        tok = f.read()
    write(out, "fuzz_llama2c_tokenizer", "tok512-to-eof", b"\x00" + tok)
    write(out, "fuzz_llama2c_tokenizer", "tok512-259", b"\x80" + tok)


def pipeline_seeds(out):
    specs = ["snapkv:window=64,kernel=5,pool=avg,gqa=mean", "snapkv+adakv:alpha=0.2", "streamingllm:sink=4",
             "keydiff:block=128", "tova", "knorm", "rocketkv", "snapkv+spark:ratio=0.5", "quest",
             "snapkv:window=64,kernel=5,pool=avg,gqa=mean+adakv:alpha=0.2"]
    for i, s in enumerate(specs):
        write(out, "fuzz_pipeline_spec", str(i), s)


def sweep_seeds(out):
    d = os.path.join(ROOT, "assets", "sweeps")
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            write(out, "fuzz_sweep_toml", name, f.read())
    write(out, "fuzz_sweep_toml", "minimal", 'models=["m"]\nprompts=["p"]\npipelines=["tova"]\n'
                                              'max_new_tokens=3\n[budget]\nunit="stored"\nvalues=[8,16]\n')


def head_pattern_seeds(out):
    def pattern(heads):
        return json.dumps({"format": "kvscope.head_pattern.v1", "method": "duo", "budget": 0.25, "n_layer": 2,
                           "n_head_kv": len(heads), "layers": [{"heads": heads}, {"heads": heads[::-1]}]})
    write(out, "fuzz_head_pattern", "duo", pattern([{"streaming": False}, {"streaming": True, "sink": 4, "window": 64}]))
    write(out, "fuzz_head_pattern", "hs-sft", pattern([{"streaming": True, "sink": 0, "window": 1}]))
    write(out, "fuzz_head_pattern", "empty", json.dumps({"format": "kvscope.head_pattern.v1", "layers": []}))
    duo = os.path.join(ROOT, "tests", "data", "duo")
    for sub in ("small", "pycode"):
        with open(os.path.join(duo, sub, "full_attention_heads.tsv"), "rb") as f:
            write(out, "fuzz_duo_gates", sub, f.read())
    write(out, "fuzz_duo_gates", "comments", b"# gates\n\n1\t-0.0014\n0.5\t1.004\n")


def zstd_frame(payload):
    """A zstd frame of raw blocks (no compression; the format needs no library): magic, a frame
    header with the content size, one raw last block, the XXH64-less end (no checksum flag)."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x20 | 0x00]) + bytes([len(payload)])  # single segment, 1-byte size
    block = struct.pack("<I", (len(payload) << 3) | 1)[:3]  # last block, raw
    return header + block + payload


def session_seeds(out, db):
    if db and os.path.exists(db):
        with open(db, "rb") as f:
            write(out, "fuzz_session_open", "session", f.read())
    write(out, "fuzz_session_open", "empty", b"")
    # fuzz_session_blob: "DTYPE\nSHAPE\nRAW_SIZE\n" + stored bytes (a zstd frame of them, or raw)
    floats = struct.pack("<4f", 0.5, 0.25, 0.125, 0.125)
    frame = zstd_frame(floats)
    write(out, "fuzz_session_blob", "f32", b"f32\n[2,2]\n16\n" + frame)
    write(out, "fuzz_session_blob", "scalar", b"i64\n[]\nnull\n" + zstd_frame(struct.pack("<q", 7)))
    write(out, "fuzz_session_blob", "raw", b"u8\n[3]\n3\nabc")
    write(out, "fuzz_session_open", "header-only", b"SQLite format 3\x00" + bytes(84))

def timeline_seeds(out):
    # fuzz_timeline: layers-1, heads-1, positions, steps, page, then entered_at + 1, evicted_at + 2,
    # evicted_by, the pages / tokens flags and the selection entries (tests/fuzz/fuzz_timeline.cpp).
    n, steps = 10, 3
    entered = [1] * 8 + [2, 3]  # 8 prompt positions at step 0, then steps 1 and 2
    evicted = [1] * 3 + [2] * 5 + [1, 1]  # -1 (never) for most, 0 at the prefill for 5
    body = bytes([0, 0, n, steps, 4]) + bytes(entered) + bytes(evicted) + bytes([1] * n) + bytes([1, 0])
    body += bytes([1])  # the layer's entry count as it should be
    for _ in range(steps):  # one entry per step: one byte of page bits, its offset as it should be
        body += bytes([1, 0b11, 1])
    write(out, "fuzz_timeline", "pages", body)
    write(out, "fuzz_timeline", "empty", bytes([0, 0, 0, 0, 1, 0, 0]))


def chat_template_seeds(out):
    """The chat templates of the tokenizer cache (tools/fetch-tokenizers.sh) and ../shared's models,
    if present, and small templates with each construct the renderer implements."""
    cache = os.environ.get("KVSCOPE_TOKENIZER_CACHE") or os.path.join(ROOT, ".cache", "tokenizers")
    if os.path.isdir(cache):
        for key in sorted(os.listdir(cache)):
            path = os.path.join(cache, key, "package", "models", "tokenizer_config.json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    template = json.load(f).get("chat_template")
                if isinstance(template, str):
                    write(out, "fuzz_chat_template", key, template)
    jinja = os.path.join(os.path.dirname(ROOT), "shared", "models", "pycode-recall-17m", "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, "rb") as f:
            write(out, "fuzz_chat_template", "chatml", f.read())
    small = [
        "{%- for m in messages if m.role != 'tool' -%}\n  {{- loop.index ~ ':' ~ m.content | trim -}}\n{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "{% macro f(x, y='-') %}{{ x }}{{ y }}{{ caller() if caller is defined }}{% endmacro %}"
        "{% call f(1) %}body{% endcall %}{{ f(*[1, 2]) }}",
        "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list | tojson(indent=2) }}",
        "{% raw %}{{ x }}{% endraw %}{# c #}{{ '\\u00e9\\n' ~ 'a,b'.split(',')[-1] | upper }}{% if x is not defined %}"
        "{{ raise_exception('no x') }}{% endif %}",
        "{% for k, v in {'a': 1, 'b': [2]} | items %}{{ k }}={{ v }}{% else %}none{% endfor %}"
        "{% with a = 1 %}{{ a + 2 ** 3 // 2 % 5 }}{% endwith %}{% filter upper %}x{% endfilter %}",
    ]
    for i, text in enumerate(small):
        write(out, "fuzz_chat_template", "small-%d" % i, text)


def eval_seeds(out):
    ruler = {"task": "niah_single_1", "length": 64, "chat": True, "instruction": "Find the number.\n",
             "context": "The grass is green. The magic number is 42.", "question": "What is the number?",
             "answer_prefix": " The number is", "answers": ["42"], "max_new_tokens": 8}
    write(out, "fuzz_eval_samples", "ruler", json.dumps(ruler) + "\n" + json.dumps(dict(ruler, answers=["1", "2"])))
    kvpress = {"context": "a b c", "question": "q?", "answer_prefix": "A:", "answer": "b", "max_new_tokens": 4}
    write(out, "fuzz_eval_samples", "kvpress", json.dumps(kvpress) + "\n\n" + json.dumps(dict(kvpress, answer=["b"])))
    golden = os.path.join(os.path.dirname(ROOT), "shared", "models", "pycode-recall-17m", "golden", "ruler.jsonl")
    if os.path.exists(golden):
        with open(golden, encoding="utf-8") as f:
            first = f.readline()
        write(out, "fuzz_eval_samples", "golden-first", first)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    safetensors_seeds(out)
    config_seeds(out)
    tokenizer_seeds(out)
    llama2c_seeds(out)
    pipeline_seeds(out)
    sweep_seeds(out)
    timeline_seeds(out)
    head_pattern_seeds(out)
    chat_template_seeds(out)
    eval_seeds(out)
    session_seeds(out, sys.argv[2] if len(sys.argv) > 2 else None)


if __name__ == "__main__":
    main()
