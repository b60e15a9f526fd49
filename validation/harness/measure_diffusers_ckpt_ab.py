"""What gradient checkpointing adds to a diffusers training step's host time, with the host speed
held fixed: one model, one process, the step run plain and checkpointed in turn round by round
(diffusers' enable_gradient_checkpointing / disable_gradient_checkpointing on the same module,
torch.utils.checkpoint(use_reentrant=False) around each block), Python's collector off.

Two records of the same configuration, plain and checkpointed, run in two processes, and a lent
host's speed moves by 15-30 % from one process to the next (the SD 3.5 records' optimizer phase
ran 30 % faster in the checkpointed process of diffusion_h100_gen5.jsonl's pair); what
checkpointing adds is then not separable from that. Here both variants share every round.

Per step, host time by phase with no synchronisation inside the step (forward to the loss,
backward, the optimizer and zero_grad), and the step's CUDA-event time; the medians per variant
over the rounds, with every round's figures. Also the step's saved tensors (plain forward, counted
with saved_tensors_hooks) and its checkpointed regions.

  python3 validation/harness/measure_diffusers_ckpt_ab.py \\
      --plan validation/harness/plans/plan_gen6_hostbound_diffusion.jsonl \\
      --only gen6-sd35m-l4-lora-r1024 --rounds 12 --steps 3 --out R.jsonl
  ... --cpu-check        the same on the CPU, the plan line shrunk (measure_diffusers.cpu_cut)
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_diffusers as md  # noqa: E402


def count_saved(torch, loss_fn):
    """Saved tensors of one plain forward (what checkpointing's hooks would see) and its loss."""
    n = [0]

    def pack(x):
        n[0] += 1
        return x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        loss = loss_fn()
    return n[0], loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--only", required=True, help="the plan line to run (its ckpt field is ignored)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per variant per round")
    ap.add_argument("--out")
    ap.add_argument("--cpu-check", action="store_true")
    a = ap.parse_args()
    import torch
    with open(a.plan) as f:
        cfg = [json.loads(l) for l in f if l.strip() and json.loads(l)["name"] == a.only]
    if len(cfg) != 1:
        sys.exit(f"measure_diffusers_ckpt_ab: {a.only} is not one line of {a.plan}")
    cfg = dict(cfg[0], ckpt=False)
    md.check(cfg)
    if a.cpu_check:
        cfg = md.cpu_cut(cfg)
    dev = torch.device("cpu") if a.cpu_check else torch.device("cuda", 0)
    sync = (lambda: None) if a.cpu_check else torch.cuda.synchronize
    dcfg = md.load_config(cfg)
    torch.manual_seed(0)
    model = md.build(torch, cfg, dcfg, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    loss_fn = md.make_step(torch, cfg, model, dev)
    regions = [0]
    real_ckpt = torch.utils.checkpoint.checkpoint

    def counting_ckpt(*args, **kw):
        regions[0] += 1
        return real_ckpt(*args, **kw)

    def one_step():
        t0 = time.perf_counter()
        if not a.cpu_check:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if not a.cpu_check:
            e1.record()
        sync()
        gpu = e0.elapsed_time(e1) if not a.cpu_check else float("nan")
        return {"fwd_ms": (t1 - t0) * 1e3, "bwd_ms": (t2 - t1) * 1e3, "opt_ms": (t3 - t2) * 1e3,
                "host_ms": (t3 - t0) * 1e3, "gpu_ms": gpu}

    def set_variant(v):
        if v == "ckpt":
            model.enable_gradient_checkpointing()
        else:
            model.disable_gradient_checkpointing()

    # warm-up: both variants, the optimizer's state made
    for v in ("plain", "ckpt"):
        set_variant(v)
        for _ in range(2):
            one_step()
    set_variant("plain")
    n_saved, loss = count_saved(torch, loss_fn)
    del loss
    opt.zero_grad(set_to_none=True)
    set_variant("ckpt")
    torch.utils.checkpoint.checkpoint = counting_ckpt
    try:
        one_step()
    finally:
        torch.utils.checkpoint.checkpoint = real_ckpt
    gc.collect()
    gc.disable()
    rounds = {"plain": [], "ckpt": []}
    try:
        for r in range(a.rounds):
            order = ("plain", "ckpt") if r % 2 == 0 else ("ckpt", "plain")
            for v in order:
                set_variant(v)
                rounds[v].append([one_step() for _ in range(a.steps)])
    finally:
        gc.enable()
    out = {"name": cfg["name"], "config": cfg, "rounds": a.rounds, "steps": a.steps,
           "torch": torch.__version__, "saved_tensors_plain_fwd": n_saved,
           "ckpt_regions": regions[0], "device": "cpu" if a.cpu_check else torch.cuda.get_device_name(dev)}
    import diffusers
    out["diffusers"] = diffusers.__version__
    for v, rs in rounds.items():
        flat = [s for r in rs for s in r]
        out[v] = {k: statistics.median(s[k] for s in flat) for k in flat[0]}
        out[v + "_rounds"] = rs
        print(f"{cfg['name']} {v}: " + ", ".join(f"{k} {out[v][k]:.2f}" for k in flat[0]), flush=True)
    print(f"  saved tensors (plain forward) {n_saved}, checkpointed regions {regions[0]}; checkpointing "
          f"adds {out['ckpt']['host_ms'] - out['plain']['host_ms']:.2f} ms of host time "
          f"(forward {out['ckpt']['fwd_ms'] - out['plain']['fwd_ms']:+.2f}, backward "
          f"{out['ckpt']['bwd_ms'] - out['plain']['bwd_ms']:+.2f})", flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
