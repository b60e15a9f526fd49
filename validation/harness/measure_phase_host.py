"""The host's time to issue each phase of a training step, without the profiler, for a record's run
cut to a few layers and a short sequence so that the GPU keeps up and the host is what a phase
waits on: the forward's call, then loss.backward() (with checkpointing the layers' recomputation
inside it), then the optimizer step, each timed from an idle GPU (synchronized before it) to the
call's return, with the phase's device time beside it (CUDA events). Run with and without
checkpointing, the difference is what checkpointing costs the host, the recomputation's Python
included (recompute_node.py shows where a profiler puts it); run for a mixture-of-experts family
and for a Llama beside it on one host, the two say how the family's host costs compare with the
Llama layers vrsim's host classes were measured on.

  python3 validation/harness/measure_phase_host.py --record validation/records/llama_h100_gen10_fulldepth.jsonl \\
      --name gen10-qwen3-30b-a3b-lora-b1-ckpt --layers 4 --seq 256 --ckpt both --out F.jsonl
  ... --config scenarios/configs/llama-3-8b.json      (the same run with another model's config)
  ... --ckpt off --no-cache                            (the config's use_cache false: no DynamicCache)
  ... --check                                          (print the runs it would make; no GPU)
  ... --interleave --rounds 30                          (with and without checkpointing and the KV cache,
                                                       built in one process and timed in turn)
  ... --modules                                        (each module's forward host time, by hooks)
  ... --cpu-check --layers 1 --seq 16 --rounds 1       (the whole path on the CPU, timings meaningless)

One line a run: the record's name, the overrides, and per phase the median host ms and device ms
over --rounds steps after three warm-up steps (the spread as min and max).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def variants(rec, args):
    """The record's run with the overrides, once per checkpointing setting asked for."""
    base = dict(rec)
    if args.config:
        hf = json.load(open(args.config))
        base["hf_config"] = {k: v for k, v in hf.items() if not k.startswith("_")}
        base.pop("routing", None)
    if "hf_config" not in base:
        sys.exit("measure_phase_host: %s has no hf_config (a shape record): not cut here" % args.name)
    hf = dict(base["hf_config"])
    if args.layers:
        hf["num_hidden_layers"] = args.layers
        if "max_window_layers" in hf:
            hf["max_window_layers"] = min(hf["max_window_layers"], args.layers)
        if "mlp_only_layers" in hf:
            hf["mlp_only_layers"] = [i for i in hf["mlp_only_layers"] if i < args.layers]
        if "layer_types" in hf:
            hf["layer_types"] = hf["layer_types"][:args.layers]
    if args.no_cache:
        # the forward without the DynamicCache transformers makes when the config's use_cache is
        # true and checkpointing is off (with checkpointing it sets use_cache False itself)
        hf["use_cache"] = False
    base["hf_config"] = hf
    if args.seq:
        base["seq"] = args.seq
    if args.batch:
        base["batch"] = args.batch
    out = []
    for ckpt in ({"both": (False, True), "on": (True,), "off": (False,)}[args.ckpt]):
        r = dict(base, ckpt=ckpt)
        r["name"] = "%s%s-l%d-s%d-b%d-%s%s" % (args.name, "-" + os.path.basename(args.config).split(".")[0]
                                              if args.config else "", hf["num_hidden_layers"], r["seq"],
                                              r["batch"], "ckpt" if ckpt else "nockpt",
                                              "-nocache" if args.no_cache else "")
        out.append(r)
    return out


def built(rec, device="cuda"):
    """The record's model, its forward (returning the loss) and its optimizer, warmed up."""
    from profile_hf_step import build
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps(rec) + "\n")
    _, fwd, opt = build(f.name, rec["name"], device=device)
    os.unlink(f.name)
    return fwd, opt


def time_round(fwd, opt, gpu):
    """One step, each phase timed from an idle GPU: {phase: (host ms, device ms)}."""
    import torch
    times = {}
    for phase in ("forward", "backward", "optimizer"):
        if gpu:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        t0 = time.perf_counter()
        if phase == "forward":
            loss = fwd()
        elif phase == "backward":
            loss.backward()
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        host = (time.perf_counter() - t0) * 1e3
        if gpu:
            e.record()
            torch.cuda.synchronize()
        times[phase] = (host, s.elapsed_time(e) if gpu else 0.0)
    return times


def summary(rounds):
    """Per phase the median host and device ms over the rounds, with the host's min and max."""
    out = {}
    for k in rounds[0]:
        hosts, devs = [t[k][0] for t in rounds], [t[k][1] for t in rounds]
        out[k] = {"host_ms": round(statistics.median(hosts), 3), "host_min_ms": round(min(hosts), 3),
                  "host_max_ms": round(max(hosts), 3), "device_ms": round(statistics.median(devs), 3)}
    return out


def measure(rec, rounds, device="cuda"):
    fwd, opt = built(rec, device)
    return summary([time_round(fwd, opt, device == "cuda") for _ in range(rounds)])


def measure_interleaved(recs, rounds, device="cuda"):
    """The runs built side by side in one process and timed a step each in turn, round after round
    (the order rotated each round), so that a drift of the host's speed falls on all of them alike:
    their ratios are what one host speed gives."""
    models = [built(r, device) for r in recs]
    got = [[] for _ in recs]
    for k in range(rounds):
        for j in range(len(recs)):
            i = (j + k) % len(recs)
            got[i].append(time_round(*models[i], device == "cuda"))
    return [summary(g) for g in got]


def module_times(rec, rounds, device="cuda"):
    """Each module's forward host time inside the model's forward: global forward pre- and post-
    hooks stamp every module call (time.perf_counter_ns), the calls summed per module path with
    the layer index and peft's wrappers taken out (layers.*.self_attn.q_proj), inclusive of the
    module's children; also the forward's host time with the hooks on, against which the hooks'
    own cost (two Python calls per module call) is read, the unhooked forward timed in the rounds
    between (forward_unhooked_ms). The hooks come off before backward, so a
    checkpointed layer's recomputation is not stamped."""
    import re
    import torch
    from torch.nn.modules import module as nnm
    fwd, opt = built(rec, device)
    names = {}
    stack, acc, calls = [], {}, {}

    def path(m):
        n = names.get(id(m))
        if n is None:
            return type(m).__name__
        n = re.sub(r"^(base_model\.model\.)", "", n)
        n = re.sub(r"\.layers\.\d+(?=\.|$)", ".layers.*", n)
        n = re.sub(r"\.(default)$", "", re.sub(r"\.default\.", ".", n))
        return n

    def pre(m, args):
        stack.append(time.perf_counter_ns())

    def post(m, args, out):
        t = time.perf_counter_ns() - stack.pop()
        k = path(m)
        acc[k] = acc.get(k, 0) + t
        calls[k] = calls.get(k, 0) + 1

    model = None
    for cell in (fwd.__closure__ or ()):
        if isinstance(cell.cell_contents, torch.nn.Module):
            model = cell.cell_contents
    if model is None:
        sys.exit("measure_phase_host: the forward closes over no module; --modules cannot name them")
    names.update({id(m): n or "<root>" for n, m in model.named_modules()})
    # hooked and unhooked forwards alternate, so that their difference is the hooks' own cost at
    # one host speed (a host's speed moves within a process by more than that)
    totals, plain, per_round = [], [], []
    for r in range(2 * (rounds + 3)):
        hooked = r % 2 == 0
        acc.clear(), calls.clear()
        torch.cuda.synchronize() if device == "cuda" else None
        if hooked:
            h1, h2 = nnm.register_module_forward_pre_hook(pre), nnm.register_module_forward_hook(post)
        t0 = time.perf_counter_ns()
        loss = fwd()
        t = time.perf_counter_ns() - t0
        if hooked:
            h1.remove(), h2.remove()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        if r >= 6:
            if hooked:
                totals.append(t / 1e6)
                per_round.append((dict(acc), dict(calls)))
            else:
                plain.append(t / 1e6)
    out = {}
    for k in per_round[0][0]:
        vals = [a.get(k, 0) / 1e6 for a, _ in per_round]
        out[k] = {"ms": round(statistics.median(vals), 4), "calls": per_round[0][1][k]}
    return {"forward_hooked_ms": round(statistics.median(totals), 3),
            "forward_unhooked_ms": round(statistics.median(plain), 3),
            "module_calls": sum(per_round[0][1].values()), "modules": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--config", help="another model's Hugging Face config.json in place of the record's")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ckpt", choices=("both", "on", "off"), default="both")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--no-cache", action="store_true",
                    help="the config's use_cache set false (no DynamicCache in a forward without checkpointing)")
    ap.add_argument("--interleave", action="store_true",
                    help="build every run (checkpointing as --ckpt asks, each with and without the KV cache) "
                         "in one process and time them a step each in turn")
    ap.add_argument("--modules", action="store_true",
                    help="also each module's forward host time, stamped by global module hooks")
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true", help="print the runs it would make and exit")
    ap.add_argument("--cpu-check", action="store_true", help="run the whole path on the CPU (no timing worth keeping)")
    args = ap.parse_args()
    rec = next((json.loads(l) for l in open(args.record) if json.loads(l)["name"] == args.name), None)
    if rec is None:
        sys.exit("measure_phase_host: no record %s in %s" % (args.name, args.record))
    runs = variants(rec, args)
    if args.interleave:
        args.no_cache = not args.no_cache
        runs += variants(rec, args)
    if args.check:
        for r in runs:
            print(r["name"], json.dumps({k: r[k] for k in ("batch", "seq", "ckpt", "mode", "attn", "lora") if k in r}))
        return
    import torch
    device = "cpu" if args.cpu_check else "cuda"
    results = measure_interleaved(runs, args.rounds, device) if args.interleave else None
    for n, r in enumerate(runs):
        res = results[n] if results else measure(r, args.rounds, device)
        line = {"name": r["name"], "record": args.name, "config": args.config, "layers": r["hf_config"]["num_hidden_layers"],
                "use_cache": r["hf_config"].get("use_cache"),
                "seq": r["seq"], "batch": r["batch"], "ckpt": r["ckpt"], "mode": r.get("mode"),
                "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
                "phases": res}
        if args.interleave:
            line["interleaved_with"] = [x["name"] for x in runs if x is not r]
        if args.modules:
            line["module_forward"] = module_times(r, args.rounds, device)
        print(json.dumps(line), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(line) + "\n")
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
