"""The GPU kernels of one steady training step of a Hugging Face causal LM built from a record's
hf_config (or shape) as measure_llama.py builds its runs (random weights, the record's mode bf16 or
lora_bf16 with its peft settings, checkpointing, attention and AdamW variant, lr 1e-5): each
kernel's name, launches and device time from torch.profiler, per phase (forward, backward,
optimizer; profile_sdxl_kernels.py's kernels_of). For checking vrsim's op costs kernel by kernel
on the families' runs (llama_h200_gen_families.jsonl). A record with settings this does not
reproduce (another mode, accumulation, a memory cap, DPO) is refused (a record's variable-length
data is its batch as tech_data.py collates it); --check only says whether the
record is reproduced, without a GPU.

  python3 validation/harness/profile_hf_step.py --record validation/records/llama_h200_gen_families.jsonl \\
      --name gen-mistral-l4-s8192-b1 --out F.jsonl

--ops adds, per phase, each op the profiler saw on the host (keyed by its name and input shapes):
its calls, the kernels they launched, those kernels' device time and the host's self time in it
under the profiler ("ops" in the line), so that a step's launches and host time can be put on the
ops that make them (ops_of).
"""
import argparse
import json

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_sdxl_kernels import kernels_of  # noqa: E402  (kernel name -> launches, ms)


def build(record, name, check_only=False, device="cuda"):
    """The record's run as measure_llama.py builds it, warmed up by three steps: (its mode, its
    forward as a function returning the loss, the optimizer). Exits for a record it does not
    reproduce."""
    rec = next(json.loads(l) for l in open(record) if json.loads(l)["name"] == name)
    mode, attn = rec.get("mode", "bf16"), rec.get("attn", "sdpa")
    if mode not in ("bf16", "lora_bf16") or rec.get("accum", 1) != 1 or "cap_mib" in rec:
        sys.exit("profile_hf_step: %s: mode %s, accum %s%s not reproduced here"
                 % (name, mode, rec.get("accum", 1), ", a memory cap" if "cap_mib" in rec else ""))
    # the techniques that change the model or its loss (float8, compile, op-level checkpointing,
    # the chunked and fused losses) as measure_llama.py applies them; the training and data ones
    # are not reproduced here
    import tech_model
    from techniques import TECHNIQUE_FIELDS
    # torchao's NF4 base weights are applied by tech_model.after_peft, as measure_llama.py does
    import tech_data
    # variable-length data is the record's batch as tech_data.py collates it (DPO is not reproduced)
    others = [k for k in TECHNIQUE_FIELDS if k in rec and k not in tech_model.MODEL_FIELDS
              and not (k == "quant" and rec[k] == "torchao_nf4") and k != "data"]
    if others:
        sys.exit("profile_hf_step: %s: %s not reproduced here" % (name, ", ".join(others)))
    if check_only:
        print("profile_hf_step: %s: reproducible (mode %s%s)" % (name, mode, "".join(
            ", %s %s" % (k, json.dumps(rec[k])) for k in TECHNIQUE_FIELDS if k in rec)))
        sys.exit(0)
    from transformers import AutoConfig, AutoModelForCausalLM
    if rec.get("code") == "torchtune":  # torchtune's own decoder, built in bf16 as measure_llama.py builds it
        tech_model.check(rec)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device(device):
            model = tech_model.build_torchtune(rec)
        torch.set_default_dtype(torch.float32)
        cfg = AutoConfig.for_model(rec["hf_config"]["model_type"], vocab_size=rec["hf_config"]["vocab_size"])
    elif "hf_config" in rec:
        hf = dict(rec["hf_config"])
        cfg = AutoConfig.for_model(hf.pop("model_type"), **{k: v for k, v in hf.items() if k != "architectures"})
    else:  # a shape record: the LlamaConfig measure_llama.py makes of it
        from measure_llama import shape_config
        cfg = AutoConfig.for_model("llama", vocab_size=32000, max_position_embeddings=4096,
                                   tie_word_embeddings=False, **shape_config(rec["shape"]))
    if rec.get("code") != "torchtune":
        cfg._attn_implementation = attn
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    if rec.get("ckpt"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode == "lora_bf16":  # as measure_llama.py (the record's lora, else its defaults)
        from peft import LoraConfig, get_peft_model
        if rec.get("ckpt"):
            model.enable_input_require_grads()
        lc = rec.get("lora") or {"r": 8, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}
        model = get_peft_model(model, LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                                                 target_modules=lc["targets"], task_type="CAUSAL_LM"))
    model = tech_model.after_peft(rec, model)
    if rec.get("data") is not None:
        tech_data.prepare(rec, model, None, cfg, torch.bfloat16, torch.device(device))
    model.train()
    kw = {"adamw_foreach": {"foreach": True}, "adamw_fused": {"fused": True},
          "adamw_forloop": {"foreach": False}}[rec.get("optim", "adamw_foreach")]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, **kw)
    ids = torch.randint(0, cfg.vocab_size, (rec["batch"], rec["seq"]), device=device)
    def fwd():
        if rec.get("data") is not None:
            return tech_data.forward_loss(rec, model)
        loss = tech_model.forward_loss(rec, model, ids)
        return loss if loss is not None else model(input_ids=ids, labels=ids).loss
    for _ in range(3):
        loss = fwd(); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); del loss
    if device == "cuda":
        torch.cuda.synchronize()
    return rec, fwd, opt


def ops_of(fn):
    """fn() under torch.profiler with CPU and CUDA activities: (its result, {"op [shapes]": {"calls",
    "kernels", "ms", "cpu_self_ms"}}) over the host's ops, and "(issue, wall)": the host's wall time
    from the call to its return, before the device is waited on (each launch is put on the ATen op whose
    correlation id it carries: the innermost op that launched it; the self time excludes the ops
    nested in it)."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    import time
    with profile(activities=acts, record_shapes=True) as prof:
        t0 = time.perf_counter()
        out = fn()
        host_ms = (time.perf_counter() - t0) * 1e3  # the host's time to issue it, under the profiler
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    table = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        key = ("%s %s" % (e.name, e.input_shapes))[:240]
        row = table.setdefault(key, [0, 0, 0.0, 0.0])
        row[0] += 1
        row[1] += len(e.kernels)
        row[2] += sum(k.duration for k in e.kernels) / 1e3
        row[3] += e.self_cpu_time_total / 1e3
    table = {k: {"calls": v[0], "kernels": v[1], "ms": round(v[2], 4), "cpu_self_ms": round(v[3], 4)}
             for k, v in table.items()}
    table["(issue, wall)"] = {"calls": 1, "kernels": 0, "ms": 0.0, "cpu_self_ms": round(host_ms, 4)}
    return out, table


def built_from_args(doc):
    """The command line --record F --name N --out F, and the record's run built: (args, the
    record, its forward, the optimizer)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--check", action="store_true", help="only say whether the record is reproduced")
    ap.add_argument("--ops", action="store_true", help="also each ATen op's calls, launches and kernel ms per phase")
    a = ap.parse_args()
    return (a,) + build(a.record, a.name, a.check)


def main():
    a, rec, fwd, opt = built_from_args(__doc__)
    mode = rec.get("mode", "bf16")
    loss, kf = kernels_of(fwd)
    _, kb = kernels_of(lambda: loss.backward())
    _, ko = kernels_of(lambda: (opt.step(), opt.zero_grad(set_to_none=True)))
    out = {"name": a.name, "mode": mode, "ckpt": bool(rec.get("ckpt")), "lora": rec.get("lora"),
           "kernels": {"forward": kf, "backward": kb, "optimizer": ko},
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    if a.ops:
        loss, of = ops_of(fwd)
        _, ob = ops_of(lambda: loss.backward())
        _, oo = ops_of(lambda: (opt.step(), opt.zero_grad(set_to_none=True)))
        out["ops"] = {"forward": of, "backward": ob, "optimizer": oo}
        for ph, t in out["ops"].items():
            print(ph, "launches", sum(v["kernels"] for v in t.values()))
            print(ph, "host self ms", round(sum(v["cpu_self_ms"] for k, v in t.items() if k != "(issue, wall)"), 2),
                  "issue wall ms", t["(issue, wall)"]["cpu_self_ms"])
            for k, v in sorted(t.items(), key=lambda kv: -kv[1]["cpu_self_ms"])[:12]:
                print("   %6d %6d %9.3f %9.3f  %s" % (v["calls"], v["kernels"], v["ms"], v["cpu_self_ms"], k[:100]))
    with open(a.out, "a") as f:
        f.write(json.dumps(out) + "\n")
    for ph, t in out["kernels"].items():
        print(ph, round(sum(v["ms"] for v in t.values()), 2), "ms")
        for k, v in sorted(t.items(), key=lambda kv: -kv[1]["ms"])[:8]:
            print("   %6d %9.3f  %s" % (v["count"], v["ms"], k[:100]))


if __name__ == "__main__":
    main()
