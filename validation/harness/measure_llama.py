#!/usr/bin/env python3
"""Measure LLaMA training steps on one GPU the way docs/validation.md, "Record format", describes.

Each configuration runs in a fresh Python process (so the caching allocator starts empty):

  LlamaForCausalLM(LlamaConfig(...)) built under `with torch.device("cuda")`, then `.to(dtype)`;
  LoRA through peft (r=8, alpha 32, dropout 0.05, q_proj and v_proj) on the bf16 base;
  non-reentrant gradient checkpointing per decoder layer; AdamW(lr=1e-5) foreach / fused /
  for-loop; four steps of forward (labels = ids), backward, opt.step(), zero_grad(set_to_none);
  peak statistics reset before each step; one JSON line per configuration in the record layout
  of validation/records/llama_h200.jsonl (and fit_h200.jsonl for capped runs).

Usage:
  measure_llama.py --plan PLAN.jsonl --out RESULTS.jsonl [--trace-dir DIR] [--deadline-s S]
  measure_llama.py --config '{"name": "dev-x", "shape": "7b-l4", "batch": 4, "seq": 2048,
                   "mode": "bf16", "ckpt": false, "attn": "sdpa", "optim": "adamw_foreach"}'
                   --out RESULTS.jsonl

A plan line is one configuration: name, shape (or hf_config: a config.json object whose
`architectures` names the transformers class), batch, seq, mode, ckpt, attn, optim and, optional,
lora ({r, alpha, dropout, targets}; peft's "all-linear" is a target list of its own), dpo and
data (TRL's DPO step and variable-length batches: tech_data.py), accum
(micro-batches per optimizer step, the loss divided by it), build ("direct": built in the
parameter dtype with torch.set_default_dtype instead of fp32 then .to()),
cap_mib (torch.cuda.set_per_process_memory_fraction(cap_mib / total) before the model is built),
alloc_conf (PYTORCH_CUDA_ALLOC_CONF for that process; the record then carries "alloc_conf"),
trace (true: record the allocator's history from process start and write
fulltrace_<name>.csv.gz, columns seq,time_us,action,addr,size,stream; "stacks": the same with a
frames column, the innermost transformers/peft/torch.nn Python frames of each allocation), steps (default 4),
timeout_s (default 90), host_bench (true: the host's dispatch and op-class benchmark after the
steps, record fields host_bench, host_dispatch_scale, host_class_bench: measure_sdxl_steps.py).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

SHAPES = {
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
               num_key_value_heads=32, num_hidden_layers=32),
    "13b": dict(hidden_size=5120, intermediate_size=13824, num_attention_heads=40,
                num_key_value_heads=40, num_hidden_layers=40),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                num_key_value_heads=8, num_hidden_layers=80),
}
# qlora_bf16: tech_train.build_model loads the 4-bit model (no .to(dtype) after), then LoRA
MODES = ("fp32", "amp_bf16", "amp_fp16", "bf16", "fp16", "lora_bf16", "qlora_bf16")
OPTIMS = ("adamw_foreach", "adamw_fused", "adamw_forloop", "sgd_momentum")
MIB = float(1 << 20)


def shape_config(shape):
    base, _, layers = shape.partition("-l")
    if base not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}")
    cfg = dict(SHAPES[base])
    if layers:
        cfg["num_hidden_layers"] = int(layers)
    return cfg


def _nvml_handle(dev):
    """NVML handle of torch device `dev` (matched by UUID; by index as a fallback)."""
    import pynvml
    import torch
    pynvml.nvmlInit()
    try:
        uuid = str(torch.cuda.get_device_properties(dev).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID("GPU-" + uuid if not uuid.startswith("GPU-") else uuid)
    except Exception:
        return pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)


def nvml_device_used_mib(dev=None, index=None):
    """What the whole device shows in use (nvidia-smi's memory.used), in MiB; None if unknown.
    With `index` it reads NVML by index and needs no CUDA context (for a reading before init)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index) if index is not None else _nvml_handle(dev)
        return pynvml.nvmlDeviceGetMemoryInfo(h).used / MIB
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                              "-i", str(index if index is not None else (dev.index or 0))],
                             capture_output=True, text=True, timeout=20)
        return float(out.stdout.strip().splitlines()[0])
    except Exception:
        return None


def nvml_process_used_mib(dev):
    """This process's memory on the device (nvidia-smi --query-compute-apps), in MiB; None if
    the driver does not list it."""
    pid = os.getpid()
    try:
        import pynvml
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(_nvml_handle(dev)):
            if p.pid == pid and p.usedGpuMemory is not None:
                return p.usedGpuMemory / MIB
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits", "-i", str(dev.index or 0)],
                             capture_output=True, text=True, timeout=20)
        for line in out.stdout.splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) == 2 and f[0] == str(pid):
                return float(f[1])
    except Exception:
        pass
    return None


def context_figures(dev, idle_mib):
    """nvsmi_used_minus_reserved_mib and the raw readings it comes from. The figure is what the
    device shows in use (NVML, nvidia-smi's memory.used) less what it showed before this process
    started CUDA, less the allocator's reservation: the CUDA context, cuBLAS/cuDNN handles and
    the like. (On the lent Firecracker machines an idle H200 already shows 615 MiB in use; less
    that, this reproduces the truth files' 766.8125 MiB for pub-c04 to the byte. NVML's
    per-process figure is whole MiB and a few MiB lower: kept as nvml_process_used_mib.)"""
    import torch
    torch.cuda.synchronize(dev)
    reserved = torch.cuda.memory_reserved(dev) / MIB
    proc = nvml_process_used_mib(dev)
    devu = nvml_device_used_mib(dev)
    out = {}
    if devu is not None and idle_mib is not None:
        out["nvsmi_used_minus_reserved_mib"] = devu - idle_mib - reserved
    elif proc is not None:
        out["nvsmi_used_minus_reserved_mib"] = proc - reserved
    extra = {"nvml_process_used_mib": proc, "nvml_device_used_mib": devu,
             "nvml_device_used_before_init_mib": idle_mib}
    return out, extra


# Python frames kept in a stacks trace: the innermost from these packages, innermost first
FRAME_KEYS = ("transformers/", "peft/", "torch/nn/", "torch/amp/", "torch/optim/", "torch/utils/checkpoint",
              "torch/autograd/", "trl/", "measure_llama.py", "tech_data.py")


def frames_of(e):
    out = []
    for fr in e.get("frames") or []:
        fn = fr.get("filename", "")
        if any(k in fn for k in FRAME_KEYS):
            out.append(f"{fn.rsplit('/', 1)[-1]}:{fr.get('line', 0)}:{fr.get('name', '')}")
        if len(out) == 4:
            break
    return " | ".join(out).replace(",", ";")


def write_trace(path, entries, stacks=False):
    """Allocator history -> gzipped CSV seq,time_us,action,addr,size,stream (truth format), with a
    frames column (the innermost meaningful Python frames) when recorded with stacks."""
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", compresslevel=9, newline="") as f:
        f.write("seq,time_us,action,addr,size,stream" + (",frames" if stacks else "") + "\n")
        for i, e in enumerate(entries):
            addr = e.get("addr", e.get("device_free", 0))
            f.write(f"{i},{int(e.get('time_us', 0))},{e['action']},{int(addr)},{int(e['size'])},"
                    f"{int(e.get('stream', 0))}" + (f",{frames_of(e)}" if stacks else "") + "\n")
    os.replace(tmp, path)


TRACE_MAX_ENTRIES = 20_000_000


def start_trace(stacks=False):
    """Record the allocator's history (every device's) from here on, with the Python stack of
    each allocation when `stacks` (slower; for finding which op made it)."""
    import torch
    if stacks:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=TRACE_MAX_ENTRIES)
    else:
        torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                 max_entries=TRACE_MAX_ENTRIES)


def finish_trace(path, device=0, stacks=False):
    """Snapshot the history start_trace() recorded, stop recording and write device `device`'s
    events to `path` (write_trace's format). Returns the number of events written."""
    import torch
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = snap["device_traces"][device] if snap.get("device_traces") else []
    write_trace(path, entries, stacks)
    return len(entries)


def watch_routing(model):
    """Tokens each expert received, per MoE layer, in the last forward that ran it: a forward hook
    on every transformers top-k router (MixtralTopKRouter, Qwen3MoeTopKRouter, GptOssTopKRouter,
    DeepseekV2TopkRouter, ...), whose output ends with the (tokens, k) expert indices. A
    checkpointed layer's recompute routes the same tokens again, so the last call stands.
    Returns the dict the hooks fill: module name -> list of counts, one per expert."""
    import torch
    counts = {}

    def hook_for(name, n_experts):
        def hook(_mod, _inp, out):
            idx = out[-1] if isinstance(out, (tuple, list)) else None
            if torch.is_tensor(idx) and not idx.is_floating_point():
                counts[name] = torch.bincount(idx.detach().reshape(-1).long(),
                                              minlength=n_experts).tolist()
        return hook

    for name, mod in model.named_modules():
        cls = type(mod).__name__
        if cls.endswith("TopKRouter") or cls.endswith("TopkRouter"):
            n = getattr(mod, "num_experts", None) or getattr(mod, "n_routed_experts", None)
            if n is None and hasattr(mod, "weight"):
                n = mod.weight.shape[0]
            mod.register_forward_hook(hook_for(name, int(n or 0)))
    return counts


def worker(cfg, result_path, trace_dir):
    """One configuration, in this (fresh) process. Writes the record as JSON to result_path."""
    t_proc = time.perf_counter()
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    name, shape, batch, seq = cfg["name"], cfg.get("shape"), int(cfg["batch"]), int(cfg["seq"])
    hf_config = cfg.get("hf_config")
    lora_cfg = cfg.get("lora")
    accum = int(cfg.get("accum", 1))
    build = cfg.get("build", "cast")
    mode, ckpt, attn, optim = cfg["mode"], bool(cfg["ckpt"]), cfg["attn"], cfg["optim"]
    nsteps = int(cfg.get("steps", 4))
    import techniques
    if mode not in MODES or optim not in OPTIMS or attn not in ("sdpa", "eager", "flex_attention") or (shape is None and hf_config is None):
        raise ValueError(f"bad config {cfg}")
    idle_mib = nvml_device_used_mib(index=int(os.environ.get("VRSIM_NVML_INDEX", "0")))
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    total_mib = props.total_memory / MIB

    rec = {"name": name}
    if hf_config is not None:
        rec["hf_config"] = hf_config
    else:
        rec["shape"] = shape
    rec.update({"batch": batch, "seq": seq, "mode": mode, "ckpt": ckpt,
                "attn": attn, "optim": optim, "torch": torch.__version__, "gpu": props.name,
                "transformers": transformers.__version__})
    if lora_cfg is not None:
        rec["lora"] = lora_cfg
    if accum != 1:
        rec["accum"] = accum
    if build != "cast":
        rec["build"] = build
    try:
        import peft
        rec["peft"] = peft.__version__
    except ImportError:
        pass
    for k in techniques.used(cfg):  # the technique fields, as the plan gave them
        rec[k] = cfg[k]
    alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if alloc_conf or cfg.get("alloc_conf"):
        rec["alloc_conf"] = alloc_conf
    rec["total_mib"] = total_mib
    if cfg.get("cap_mib") is not None:
        rec["cap_mib"] = float(cfg["cap_mib"])
        torch.cuda.set_per_process_memory_fraction(float(cfg["cap_mib"]) / total_mib, dev)

    tracing = bool(cfg.get("trace"))
    if tracing:
        start_trace(stacks=cfg.get("trace") == "stacks")

    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    if hf_config is not None:
        # the record's config.json object: the class its `architectures` names, built from it
        kw = {k: v for k, v in hf_config.items() if k != "architectures"}
        model_cls = getattr(transformers, hf_config["architectures"][0])
        lcfg = model_cls.config_class(attn_implementation=attn, **kw)
    else:
        model_cls = LlamaForCausalLM
        lcfg = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False,
                           attn_implementation=attn, **shape_config(shape))
    oom_in_build = None
    t0 = time.perf_counter()
    try:
        if build == "direct" and dtype is not None:
            torch.set_default_dtype(dtype)
        model = techniques.build_model(cfg, model_cls, lcfg, dtype)
        if model is None:
            with torch.device("cuda"):
                model = model_cls(lcfg)
        torch.set_default_dtype(torch.float32)
        # (torchtune's own decoder, tech_model.py code torchtune, has no transformers config)
        if getattr(getattr(model, "config", None), "_attn_implementation", attn) != attn:
            if hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation(attn)
            else:
                model.config._attn_implementation = attn
        # (torchtune's recipes build in the dtype and cast nothing: its fp32 RoPE cache stays fp32)
        if dtype is not None and cfg.get("code") != "torchtune":
            model.to(dtype)
        # the base model, before LoRA; bitsandbytes' Params4bit packs two weights a byte
        n_params = sum(p.numel() * (2 if type(p).__name__ == "Params4bit" else 1) for p in model.parameters())
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mode in ("lora_bf16", "qlora_bf16"):
            from peft import LoraConfig, get_peft_model
            if ckpt:
                model.enable_input_require_grads()
            lc = lora_cfg or {"r": 8, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}
            model = get_peft_model(model, LoraConfig(r=lc["r"], lora_alpha=lc["alpha"],
                                                     lora_dropout=lc["dropout"],
                                                     target_modules=lc["targets"],
                                                     task_type="CAUSAL_LM"))
        model = techniques.after_peft(cfg, model)
        notes = techniques.prepare(cfg, model, model_cls, lcfg, dtype, dev)
        # DPO's reference copy: parameters the process holds besides the policy's (vrsim counts both)
        n_params += notes.pop("ref_params", 0)
        rec.update(notes)
        model.train()
        routing = watch_routing(model)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = techniques.make_optimizer(cfg, model, params)
        if opt is not None:
            pass
        elif optim == "sgd_momentum":
            opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
        else:
            kw = {"adamw_foreach": {"foreach": True}, "adamw_fused": {"fused": True},
                  "adamw_forloop": {"foreach": False}}[optim]
            opt = torch.optim.AdamW(params, lr=1e-5, **kw)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:  # the model itself does not fit under the cap
        oom_in_build = e
    rec["build_s"] = time.perf_counter() - t0
    if oom_in_build is None:
        rec["n_params"] = n_params
        rec["n_trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    rec["after_build_alloc_mib"] = torch.cuda.memory_allocated(dev) / MIB
    rec["after_build_reserved_mib"] = torch.cuda.memory_reserved(dev) / MIB
    eff_attn = None if oom_in_build else getattr(getattr(model, "config", None), "_attn_implementation", None)

    steps = []
    oom = None
    if oom_in_build is not None:
        oom = (-1, oom_in_build)
    else:
        # a DPO or variable-length line's batch was made by techniques.prepare
        ids = None if techniques.owns(cfg) else torch.randint(0, lcfg.vocab_size, (batch, seq), device=dev)
        autocast = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(mode)
        # amp_fp16 scales the loss as torch.amp.GradScaler does (docs/validation.md, "Record format")
        scaler = torch.amp.GradScaler("cuda") if mode == "amp_fp16" else None
        for step in range(nsteps):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(dev)
            ev0 = torch.cuda.Event(enable_timing=True)
            ev1 = torch.cuda.Event(enable_timing=True)
            tw = time.perf_counter()
            ev0.record()
            try:
                # `accum` micro-batches, the loss divided by it, gradients accumulating in .grad
                for _micro in range(accum):
                    if techniques.inference_step(cfg, model, ids):
                        loss = torch.zeros((), device=dev)
                        fwd_peak = bwd_peak = torch.cuda.max_memory_allocated(dev) / MIB
                        continue
                    with techniques.step_context(cfg, model):
                        if autocast is not None:
                            with torch.autocast("cuda", dtype=autocast):
                                loss = techniques.forward_loss(cfg, model, ids)
                                if loss is None:
                                    loss = model(input_ids=ids, labels=ids).loss
                        else:
                            loss = techniques.forward_loss(cfg, model, ids)
                            if loss is None:
                                loss = model(input_ids=ids, labels=ids).loss
                        if accum != 1:
                            loss = loss / accum
                        fwd_peak = torch.cuda.max_memory_allocated(dev) / MIB
                        if scaler is not None:
                            scaler.scale(loss).backward()
                        else:
                            loss.backward()
                        bwd_peak = torch.cuda.max_memory_allocated(dev) / MIB
                if scaler is not None:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad(set_to_none=True)
                ev1.record()
                torch.cuda.synchronize()
            except torch.OutOfMemoryError as e:
                oom = (step, e)
                break
            wall_ms = (time.perf_counter() - tw) * 1e3
            st = torch.cuda.memory_stats(dev)
            steps.append({
                "step": step,
                "wall_ms": wall_ms,
                "gpu_ms": ev0.elapsed_time(ev1),
                "peak_alloc_mib": torch.cuda.max_memory_allocated(dev) / MIB,
                "peak_reserved_mib": torch.cuda.max_memory_reserved(dev) / MIB,
                "fwd_peak_alloc_mib": fwd_peak,
                "bwd_peak_alloc_mib": bwd_peak,
                "end_alloc_mib": torch.cuda.memory_allocated(dev) / MIB,
                "end_reserved_mib": torch.cuda.memory_reserved(dev) / MIB,
                "num_alloc_retries": st.get("num_alloc_retries", 0),
                "num_cuda_mallocs": st.get("num_device_alloc", st.get("segment.all.allocated", 0)),
                "inactive_split_mib": st.get("inactive_split_bytes.all.current", 0) / MIB,
            })
            del loss  # read with the loss alive, released before the next step (as the truth runs)
            print(f"  {name} step {step}: gpu {steps[-1]['gpu_ms']:.1f} ms, peak alloc "
                  f"{steps[-1]['peak_alloc_mib']:.2f} MiB, reserved {steps[-1]['peak_reserved_mib']:.0f} MiB",
                  flush=True)
    if oom is not None:
        step, e = oom
        st = torch.cuda.memory_stats(dev)
        rec["oom_at_step"] = step
        rec["oom_msg"] = str(e)[:600]
        rec["oom_num_alloc_retries"] = st.get("num_alloc_retries", 0)
        rec["oom_peak_reserved_mib"] = torch.cuda.max_memory_reserved(dev) / MIB
        print(f"  {name}: out of memory at step {step}", flush=True)
    rec["steps"] = steps
    if cfg.get("host_bench") and oom_in_build is None:
        # the host's speed beside a host-bound run (measure_sdxl_steps.host_fields)
        from measure_sdxl_steps import host_fields
        rec.update(host_fields(dev))
    if oom_in_build is None and routing:
        rec["routing"] = {k: v for k, v in sorted(routing.items())}
    ctx, ctx_raw = context_figures(dev, idle_mib)
    rec.update(ctx)
    rec.update(ctx_raw)
    if eff_attn and eff_attn != attn:
        rec["attn_effective"] = eff_attn
    if tracing:
        fname = f"fulltrace_{name}.csv.gz"
        rec["trace"] = fname
        rec["trace_events"] = finish_trace(os.path.join(trace_dir, fname), stacks=cfg.get("trace") == "stacks")
    rec["process_s"] = time.perf_counter() - t_proc
    with open(result_path, "w") as f:
        json.dump(rec, f)


def run_plan(configs, out_path, trace_dir, deadline_s, log):
    t_start = time.time()
    here = os.path.abspath(__file__)
    n_ok = 0
    for cfg in configs:
        elapsed = time.time() - t_start
        timeout = float(cfg.get("timeout_s", 90))
        if deadline_s and elapsed + min(timeout, 20) > deadline_s:
            log(f"SKIP {cfg['name']}: deadline ({elapsed:.0f} s of {deadline_s:.0f} s used)")
            continue
        if deadline_s:
            timeout = min(timeout, max(10.0, deadline_s - elapsed))
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if cfg.get("alloc_conf"):
            env["PYTORCH_CUDA_ALLOC_CONF"] = cfg["alloc_conf"]
        fd, res = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        os.unlink(res)
        t0 = time.time()
        log(f"RUN  {cfg['name']}: {json.dumps(cfg)}")
        try:
            p = subprocess.run([sys.executable, here, "--worker", json.dumps(cfg), "--result", res,
                                "--trace-dir", trace_dir], env=env, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        dt = time.time() - t0
        if rc == 0 and os.path.exists(res):
            with open(res) as f:
                rec = json.load(f)
            os.unlink(res)
            with open(out_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            n_ok += 1
            last = rec["steps"][-1] if rec["steps"] else {}
            log(f"DONE {cfg['name']} in {dt:.1f} s: peak_alloc {last.get('peak_alloc_mib', float('nan')):.2f} "
                f"peak_reserved {last.get('peak_reserved_mib', float('nan')):.0f} gpu_ms "
                f"{last.get('gpu_ms', float('nan')):.1f}" + (f" OOM at step {rec['oom_at_step']}"
                                                             if "oom_at_step" in rec else ""))
        else:
            log(f"FAIL {cfg['name']} after {dt:.1f} s: rc={rc}")
    return n_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", help="JSONL file, one configuration a line")
    ap.add_argument("--config", action="append", default=[], help="one configuration as JSON")
    ap.add_argument("--only", default="", help="comma-separated config names to run from the plan")
    ap.add_argument("--out", help="JSONL file the records are appended to")
    ap.add_argument("--trace-dir", default="validation/traces")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no config after this many seconds")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker), a.result, a.trace_dir)
        return 0
    configs = []
    if a.plan:
        with open(a.plan) as f:
            configs += [json.loads(l) for l in f if l.strip() and not l.lstrip().startswith("#")]
    configs += [json.loads(c) for c in a.config]
    if a.only:
        keep = set(a.only.split(","))
        configs = [c for c in configs if c["name"] in keep]
    if not configs or not a.out:
        ap.error("need --plan or --config, and --out")
    os.makedirs(a.trace_dir, exist_ok=True)

    def log(msg):
        print(time.strftime("%H:%M:%S ") + msg, flush=True)

    n = run_plan(configs, a.out, a.trace_dir, a.deadline_s, log)
    log(f"{n} of {len(configs)} configurations measured into {a.out}")
    return 0 if n == len(configs) else 1


if __name__ == "__main__":
    sys.exit(main())
