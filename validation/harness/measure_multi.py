#!/usr/bin/env python3
"""Measure LLaMA training steps on several GPUs of one host (DDP, ZeRO-1, FSDP2).

Same step procedure as measure_llama.py (fresh processes per configuration, four steps, peaks
reset before each step, fwd/bwd peaks, CUDA-event step time), run under torchrun with one
process a GPU. One JSON line per configuration in the multi-GPU record format of
docs/validation.md ("Record format"): the single-GPU fields plus strategy, raf, world_size,
offload, empty_cache_after_build and a ranks array, each rank with its after_build_* figures,
steps and nvsmi_used_minus_reserved_mib.

strategy: ddp   DistributedDataParallel(model, device_ids=[rank]) (bucket 25 MiB, defaults),
                AdamW over all parameters;
          zero1 the same DDP with ZeroRedundancyOptimizer(optimizer_class=AdamW);
          fsdp2 fully_shard on every decoder layer, then on the root model, with
                reshard_after_forward = raf, CPUOffloadPolicy() when offload; mode mp_fp32 keeps
                fp32 parameters under MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32).
The model is built on each rank's GPU and cast like the single-GPU runs before it is wrapped.
settle_ms (plan field, default 0): after step 0 has synchronized, each rank sleeps this long
before step 1's barrier, so that ProcessGroupNCCL's watchdog (which wakes every 100 ms) has seen
step 0's all-reduce complete and the barrier releases its stash: DDP's first-iteration bucket then
goes at step 1's rebuild on every rank (lua/strategies/ddp.lua first_bucket_release). The record
carries it.

  measure_multi.py --plan PLAN.jsonl --out validation/records/multi_h200x2.jsonl [--nproc 2]
                   [--trace-dir DIR] [--profile-dir DIR] [--deadline-s S]
  (the driver starts `torchrun --standalone --nproc_per_node N` for each configuration)

With --trace-dir each rank records the allocator's history from process start (right after
torch.cuda.set_device, before the process group and the model) as measure_llama.py's traces do,
and after the last step writes DIR/fulltrace_<name>-rank<R>.csv.gz (columns
seq,time_us,action,addr,size,stream); that rank's entry in the record then carries "trace" (the
file name) and "trace_events".

With --profile-dir each rank, after its measured steps, runs one more step under torch.profiler
and writes DIR/profile_tables_<name>-rank<R>.jsonl (every kernel and every aten op by shape, as
profile_llama_step.py --tables writes them; compare_kernels.py reads them) and
DIR/<name>-rank<R>.trace.json.gz (the profiler's Chrome trace: each kernel's stream, start and
duration, so NCCL kernels and the compute they overlap can be lined up; it opens in Perfetto).
That step is not part of the record. Not yet run on a GPU.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_llama import (MIB, context_figures, finish_trace, nvml_device_used_mib,  # noqa: E402
                           shape_config, start_trace)


def profile_step(step_fn, name, rank, profile_dir):
    """One more step under torch.profiler: the kernel and op tables, and the Chrome trace."""
    import gzip
    import torch
    from torch.profiler import ProfilerActivity, profile
    from profile_llama_step import write_tables
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step_fn()
        torch.cuda.synchronize()
    rec_name = f"profile-{name}-rank{rank}"
    write_tables(os.path.join(profile_dir, f"profile_tables_{name}-rank{rank}.jsonl"), rec_name, prof)
    raw = os.path.join(profile_dir, f"{name}-rank{rank}.trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f_in, gzip.open(raw + ".gz", "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    os.unlink(raw)


def worker(cfg, result_dir, trace_dir=None, profile_dir=None):
    import torch
    import torch.distributed as dist
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    idle_mib = nvml_device_used_mib(index=local)
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if trace_dir:
        start_trace()
    dist.init_process_group("nccl", device_id=dev)

    strategy, mode = cfg["strategy"], cfg["mode"]
    raf = bool(cfg.get("raf", True))
    offload = bool(cfg.get("offload", False))
    ckpt = bool(cfg.get("ckpt", False))
    ecab = bool(cfg.get("empty_cache_after_build", False))
    batch, seq = int(cfg["batch"]), int(cfg["seq"])
    nsteps = int(cfg.get("steps", 4))
    settle_s = float(cfg.get("settle_ms", 0)) / 1e3
    attn = cfg.get("attn", "sdpa")
    props = torch.cuda.get_device_properties(dev)

    torch.manual_seed(0)
    lcfg = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False,
                       attn_implementation=attn, **shape_config(cfg["shape"]))
    t0 = time.perf_counter()
    with torch.device(dev):
        model = LlamaForCausalLM(lcfg)
    if mode == "bf16":
        model.to(torch.bfloat16)
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    if strategy in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local])
        if strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                          lr=1e-5, foreach=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    elif strategy == "fsdp2":
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        kw = {"reshard_after_forward": raf}
        if mode == "mp_fp32":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
        if offload:
            kw["offload_policy"] = CPUOffloadPolicy()
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    else:
        raise ValueError(f"unknown strategy {strategy}")
    torch.cuda.synchronize()
    if ecab:
        torch.cuda.empty_cache()
    build_s = time.perf_counter() - t0
    # under FSDP2 the parameters are DTensors, whose numel() is the whole (unsharded) tensor's
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    r = {"rank": rank, "after_build_alloc_mib": torch.cuda.memory_allocated(dev) / MIB,
         "after_build_reserved_mib": torch.cuda.memory_reserved(dev) / MIB, "steps": []}

    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    ids = torch.randint(0, lcfg.vocab_size, (batch, seq), device=dev, generator=g)
    oom = None
    for step in range(nsteps):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.reset_peak_memory_stats(dev)
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        tw = time.perf_counter()
        ev0.record()
        try:
            loss = model(input_ids=ids, labels=ids).loss
            fwd_peak = torch.cuda.max_memory_allocated(dev) / MIB
            loss.backward()
            bwd_peak = torch.cuda.max_memory_allocated(dev) / MIB
            opt.step()
            opt.zero_grad(set_to_none=True)
            ev1.record()
            torch.cuda.synchronize()
        except torch.OutOfMemoryError as e:
            oom = (step, e)
            break
        wall_ms = (time.perf_counter() - tw) * 1e3
        st = torch.cuda.memory_stats(dev)
        r["steps"].append({
            "step": step, "wall_ms": wall_ms, "gpu_ms": ev0.elapsed_time(ev1),
            "peak_alloc_mib": torch.cuda.max_memory_allocated(dev) / MIB,
            "peak_reserved_mib": torch.cuda.max_memory_reserved(dev) / MIB,
            "fwd_peak_alloc_mib": fwd_peak, "bwd_peak_alloc_mib": bwd_peak,
            "end_alloc_mib": torch.cuda.memory_allocated(dev) / MIB,
            "end_reserved_mib": torch.cuda.memory_reserved(dev) / MIB,
            "num_alloc_retries": st.get("num_alloc_retries", 0),
            "num_cuda_mallocs": st.get("num_device_alloc", st.get("segment.all.allocated", 0)),
            "inactive_split_mib": st.get("inactive_split_bytes.all.current", 0) / MIB,
        })
        del loss
        if step == 0 and settle_s > 0:
            time.sleep(settle_s)
        if rank == 0:
            s = r["steps"][-1]
            print(f"  {cfg['name']} step {step}: gpu {s['gpu_ms']:.1f} ms, peak alloc "
                  f"{s['peak_alloc_mib']:.2f} MiB, reserved {s['peak_reserved_mib']:.0f} MiB", flush=True)
    if profile_dir and oom is None:
        def one_step():
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        dist.barrier()
        profile_step(one_step, cfg["name"], rank, profile_dir)
    if oom is not None:
        st = torch.cuda.memory_stats(dev)
        r["oom_at_step"] = oom[0]
        r["oom_msg"] = str(oom[1])[:600]
        r["oom_num_alloc_retries"] = st.get("num_alloc_retries", 0)
        r["oom_peak_reserved_mib"] = torch.cuda.max_memory_reserved(dev) / MIB
    ctx, ctx_raw = context_figures(dev, idle_mib)
    r.update(ctx)
    r.update(ctx_raw)
    if trace_dir:
        fname = f"fulltrace_{cfg['name']}-rank{rank}.csv.gz"
        r["trace"] = fname
        r["trace_events"] = finish_trace(os.path.join(trace_dir, fname), device=dev.index)
    head = {"name": cfg["name"], "shape": cfg["shape"], "batch": batch, "seq": seq, "mode": mode,
            "ckpt": ckpt, "attn": attn, "optim": "adamw_foreach", "torch": torch.__version__,
            "gpu": props.name, "transformers": transformers.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "total_mib": props.total_memory / MIB, "strategy": strategy,
            "raf": raf if strategy == "fsdp2" else None, "world_size": world, "offload": offload,
            "omp_num_threads": torch.get_num_threads(),
            "empty_cache_after_build": ecab, "build_s": build_s, "n_params": n_params,
            "n_trainable": n_trainable}
    if strategy in ("ddp", "zero1"):
        head["ddp_bucket_cap_mb"] = 25
    if "settle_ms" in cfg:
        head["settle_ms"] = float(cfg["settle_ms"])
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"head": head, "rank": r}, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan")
    ap.add_argument("--out")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, default=0)
    ap.add_argument("--trace-dir", default=None,
                    help="record each rank's allocator history into DIR/fulltrace_<name>-rank<R>.csv.gz")
    ap.add_argument("--profile-dir", default=None,
                    help="after the steps, profile one more on each rank into DIR (tables and trace)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker), a.result_dir, a.trace_dir, a.profile_dir)
        return 0
    if not a.plan or not a.out:
        ap.error("need --plan and --out")
    trace_dir = os.path.abspath(a.trace_dir) if a.trace_dir else None
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    profile_dir = os.path.abspath(a.profile_dir) if a.profile_dir else None
    if profile_dir:
        os.makedirs(profile_dir, exist_ok=True)
    with open(a.plan) as f:
        configs = [json.loads(l) for l in f if l.strip() and not l.lstrip().startswith("#")]
    here = os.path.abspath(__file__)
    t_start = time.time()
    n_ok = 0

    def log(msg):
        print(time.strftime("%H:%M:%S ") + msg, flush=True)

    for cfg in configs:
        elapsed = time.time() - t_start
        timeout = float(cfg.get("timeout_s", 120))
        if a.deadline_s and elapsed + 30 > a.deadline_s:
            log(f"SKIP {cfg['name']}: deadline")
            continue
        if a.deadline_s:
            timeout = min(timeout, max(20.0, a.deadline_s - elapsed))
        rd = tempfile.mkdtemp()
        env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
                   TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "8"))
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={a.nproc}", here, "--worker", json.dumps(cfg), "--result-dir", rd]
        if trace_dir:
            cmd += ["--trace-dir", trace_dir]
        if profile_dir:
            cmd += ["--profile-dir", profile_dir]
        log(f"RUN  {cfg['name']}: {json.dumps(cfg)}")
        t0 = time.time()
        try:
            p = subprocess.Popen(cmd, env=env, start_new_session=True)
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rc = "timeout"
        parts = []
        for rk in range(a.nproc):
            fp = os.path.join(rd, f"rank{rk}.json")
            if os.path.exists(fp):
                with open(fp) as f:
                    parts.append(json.load(f))
        shutil.rmtree(rd, ignore_errors=True)
        if len(parts) == a.nproc:
            rec = dict(parts[0]["head"])
            rec["ranks"] = [x["rank"] for x in sorted(parts, key=lambda x: x["rank"]["rank"])]
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            n_ok += 1
            s = [x["steps"][-1] if x["steps"] else {} for x in rec["ranks"]]
            log(f"DONE {cfg['name']} in {time.time() - t0:.1f} s (rc {rc}): " +
                " | ".join(f"rank {i}: alloc {x.get('peak_alloc_mib', float('nan')):.1f} reserved "
                           f"{x.get('peak_reserved_mib', float('nan')):.0f} gpu_ms {x.get('gpu_ms', float('nan')):.1f}"
                           for i, x in enumerate(s)))
        else:
            log(f"FAIL {cfg['name']} after {time.time() - t0:.1f} s: rc={rc}, {len(parts)} rank files")
    log(f"{n_ok} of {len(configs)} configurations measured into {a.out}")
    return 0 if n_ok == len(configs) else 1


if __name__ == "__main__":
    sys.exit(main())
