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


def measure(rec, rounds, device="cuda"):
    import torch
    from profile_hf_step import build
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps(rec) + "\n")
    _, fwd, opt = build(f.name, rec["name"], device=device)
    os.unlink(f.name)
    gpu = device == "cuda"
    rows = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(rounds):
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
        del loss
        for k, v in times.items():
            rows[k].append(v)
    out = {}
    for k, v in rows.items():
        hosts, devs = [x[0] for x in v], [x[1] for x in v]
        out[k] = {"host_ms": round(statistics.median(hosts), 3), "host_min_ms": round(min(hosts), 3),
                  "host_max_ms": round(max(hosts), 3), "device_ms": round(statistics.median(devs), 3)}
    return out


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
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true", help="print the runs it would make and exit")
    ap.add_argument("--cpu-check", action="store_true", help="run the whole path on the CPU (no timing worth keeping)")
    args = ap.parse_args()
    rec = next((json.loads(l) for l in open(args.record) if json.loads(l)["name"] == args.name), None)
    if rec is None:
        sys.exit("measure_phase_host: no record %s in %s" % (args.name, args.record))
    runs = variants(rec, args)
    if args.check:
        for r in runs:
            print(r["name"], json.dumps({k: r[k] for k in ("batch", "seq", "ckpt", "mode", "attn", "lora") if k in r}))
        return
    import torch
    device = "cpu" if args.cpu_check else "cuda"
    for r in runs:
        res = measure(r, args.rounds, device)
        line = {"name": r["name"], "record": args.name, "config": args.config, "layers": r["hf_config"]["num_hidden_layers"],
                "use_cache": r["hf_config"].get("use_cache"),
                "seq": r["seq"], "batch": r["batch"], "ckpt": r["ckpt"], "mode": r.get("mode"),
                "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
                "phases": res}
        print(json.dumps(line), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(line) + "\n")
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
