# The transformers reference for assets/models/tiny-archs on the GPU machine: argmax agreement with
# golden.json in fp32 and bf16, to compare with kvscope's (tests/core/test_model_families.cpp).
#   device run: python3 tools/hf-tiny-archs.py
import json, torch, sys
from transformers import AutoModelForCausalLM
root = "assets/models/tiny-archs"
for name in ["llama-llama3-rope","mistral-sliding","qwen2-bias","qwen3-qknorm","gemma2-softcap","gemma3-local-global","phi3-partial-rotary"]:
    g = json.load(open(f"{root}/{name}/golden.json"))
    ids = torch.tensor([g["input_ids"]]).cuda()
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        m = AutoModelForCausalLM.from_pretrained(f"{root}/{name}", dtype=dt).cuda().eval()
        with torch.no_grad():
            a = m(ids).logits[0].argmax(-1).cpu().tolist()
        out[str(dt)] = sum(int(x == y) for x, y in zip(a, g["argmax"])) / len(a)
    print(name, "HF argmax agreement", out, flush=True)
