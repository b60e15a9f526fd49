#!/usr/bin/env python3
"""Run litgpt's own LoRA / QLoRA fine-tuning step (`litgpt finetune lora [--quantize bnb.nf4]`,
litgpt/finetune/lora.py) on one GPU with random weights and random tokens, and record its memory.

What runs is litgpt's: `litgpt.lora.GPT` built from `Config.from_name(MODEL, lora_*=...)` under
`fabric.init_module`, `mark_only_lora_as_trainable`, `fabric.setup_module`, the optimizer from
`instantiate_bnb_optimizer` (bitsandbytes' PagedAdamW) or `instantiate_torch_optimizer`,
bitsandbytes' StableEmbedding put in place of `transformer.wte` under --quantize, `get_lr_scheduler`,
and then litgpt's own `fit()` (its sanity validation, its micro-batch / gradient-accumulation
loop, `model(input_ids, lm_head_chunk_size=128)`, `chunked_cross_entropy`, `fabric.backward`,
`optimizer.step()`, `zero_grad()`, the scheduler, its RunningMean and ThroughputMonitor).

Reproduced by hand, and why: `setup()`'s Fabric (the same Fabric(devices=1, precision=...,
plugins=BitsandbytesPrecision(mode, dtype)) without its CSV logger: nothing of it is on the GPU)
and `main()`'s model and optimizer lines, copied in order, because main() reads a tokenizer, a
dataset download and a 13 GB `lit_model.pth` (random weights here, so `load_checkpoint` is left
out: its transient device copy of each incoming weight is not measured). The tokenizer is
replaced by None (fit() uses it only in generate_example, which a run that stops at
`train.max_steps` never reaches), and the data by random token ids, every sample
`max_seq_length` long (Alpaca2k's samples are shorter; the collate pads to the batch's longest,
so the longest batch is this one), batched by litgpt's `get_sft_collate_fn`.

The settings come from a litgpt config file (tests/data/recipes/litgpt_llama2_7b_qlora.yaml is
config_hub/finetune/llama-2-7b/qlora.yaml): precision, quantize, lora_*, train.micro_batch_size,
global_batch_size, max_seq_length, lr_warmup_steps, optimizer; --set key=value overrides one
(quantize=none: the LoRA program of the same config).

Recorded, one JSON line per run: torch.cuda.max_memory_allocated / max_memory_reserved (MiB)
over the whole run (litgpt's "Memory used" is max_memory_allocated / 1e9), the model build's
own peak, and per optimizer step (peaks reset after each step); with --trace-dir the allocator's
history with Python stacks (fulltrace_<name>.csv.gz: measure_llama.py's columns and frames) and
peak_<name>.json: the live blocks at the peak allocated, largest first, each with its innermost
litgpt / bitsandbytes / lightning / torch frames, and the same grouped by those frames.

  measure_litgpt.py --yaml tests/data/recipes/litgpt_llama2_7b_qlora.yaml --model Llama-2-7b-hf \
      --name litgpt7-l2-7b-qlora --steps 3 --out RECORDS.jsonl [--layers 4] [--trace-dir DIR]
  measure_litgpt.py --cpu-check      # no GPU: a tiny Llama-shaped config, one step, no quantization
"""
import argparse
import gzip
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MIB = float(1 << 20)
# frames kept for naming an allocation: the program's packages, innermost first
FRAME_KEYS = ("litgpt/", "bitsandbytes/", "lightning/", "torch/nn/", "torch/optim/", "torch/autograd/",
              "torchmetrics/", "measure_litgpt.py")


def read_settings(path, overrides):
    """The litgpt config file's keys, with --set key=value (dotted for train.*, optimizer.*)."""
    import yaml
    with open(path) as f:
        cfg = yaml.safe_load(f)
    for kv in overrides:
        key, _, val = kv.partition("=")
        val = yaml.safe_load(val)
        if key == "quantize" and val in ("none", "null"):
            val = None
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = val
    return cfg


def frames_of(entry, n=5):
    out = []
    for fr in entry.get("frames") or []:
        fn = fr.get("filename", "")
        if any(k in fn for k in FRAME_KEYS):
            out.append(f"{fn.rsplit('/', 2)[-2]}/{fn.rsplit('/', 1)[-1]}:{fr.get('line', 0)}:{fr.get('name', '')}")
        if len(out) == n:
            break
    return " | ".join(out)


def peak_blocks(entries, top=40):
    """Replay the allocator history: the allocated total after each event (an 'alloc' adds its
    block, a 'free_requested' takes it off, as the allocator's allocated_bytes counts), its
    maximum, and the blocks live at that maximum (largest first, and summed by their frames)."""
    cur = best = 0
    best_i = -1
    for i, e in enumerate(entries):
        if e["action"] == "alloc":
            cur += e["size"]
            if cur > best:
                best, best_i = cur, i
        elif e["action"] == "free_requested":
            cur -= e["size"]
    live = {}
    for e in entries[:best_i + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    blocks = sorted(live.values(), key=lambda e: -e["size"])
    groups = {}
    for e in blocks:
        k = frames_of(e, 3)
        g = groups.setdefault(k, [0, 0])
        g[0] += e["size"]
        g[1] += 1
    return {
        "peak_alloc_mib_traced": round(best / MIB, 2),
        "peak_event": best_i,
        "n_events": len(entries),
        "n_live": len(blocks),
        "last_alloc_at_peak": frames_of(entries[best_i], 8) if best_i >= 0 else "",
        "largest": [{"mib": round(e["size"] / MIB, 3), "frames": frames_of(e)} for e in blocks[:top]],
        "by_frames": sorted(({"mib": round(v[0] / MIB, 3), "n": v[1], "frames": k} for k, v in groups.items()),
                            key=lambda g: -g["mib"])[:top],
    }


def run(args):
    import torch
    import lightning as L
    from lightning.fabric.plugins import BitsandbytesPrecision
    from torch.utils.data import DataLoader

    import litgpt
    import litgpt.finetune.lora as lora_script
    from litgpt.args import EvalArgs, TrainArgs
    from litgpt.data.base import get_sft_collate_fn
    from litgpt.lora import GPT, Config, mark_only_lora_as_trainable
    import litgpt.utils as lit_utils
    from litgpt.utils import num_parameters
    import inspect
    # litgpt of April 2024 (0.4.0.dev0, the published QLoRA rows' 43c44323) made its optimizer in
    # main() from train.learning_rate etc. and had no instantiate_*_optimizer, no StableEmbedding
    # swap, no num_nodes argument: the same lines of that release are run below
    era_2404 = not hasattr(lit_utils, "instantiate_bnb_optimizer")

    cuda = not args.cpu_check
    tracing = cuda and bool(args.trace_dir)
    if tracing:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=20_000_000)
    t0 = time.perf_counter()
    s = read_settings(args.yaml, args.set)
    tr = s.get("train") or {}
    fields = set(TrainArgs.__dataclass_fields__)
    train = TrainArgs(**{k: v for k, v in tr.items() if k in fields})
    train.max_steps = args.steps
    train.save_interval = 10**9         # no checkpoint files (2024's fit() needs an int)
    train.epochs = train.epochs or 1
    ev_fields = set(EvalArgs.__dataclass_fields__)
    ev = EvalArgs(**{k: v for k, v in dict(interval=10**9, max_new_tokens=100, max_iters=100,
                                            initial_validation=False, final_validation=False).items()
                     if k in ev_fields})
    lora_script.validate_args(train, ev)
    quantize = s.get("quantize")
    precision = s.get("precision") or "bf16-true"
    extra = {}
    if args.layers:
        extra["n_layer"] = args.layers
    if args.cpu_check:
        # a Llama-shaped config small enough for two CPU cores
        extra.update(n_layer=2, n_embd=64, n_head=4, n_query_groups=2, head_size=16,
                     intermediate_size=160, vocab_size=256, padded_vocab_size=256, block_size=256)
    config = Config.from_name(
        args.model, lora_r=s.get("lora_r", 8), lora_alpha=s.get("lora_alpha", 16),
        lora_dropout=s.get("lora_dropout", 0.05), lora_query=s.get("lora_query", True),
        lora_key=s.get("lora_key", False), lora_value=s.get("lora_value", True),
        lora_projection=s.get("lora_projection", False), lora_mlp=s.get("lora_mlp", False),
        lora_head=s.get("lora_head", False), **extra)

    # setup(): the precision plugin and the Fabric, as the script makes them for one device
    plugins = None
    note = []
    if quantize is not None and quantize.startswith("bnb."):
        if args.cpu_check:
            # Lightning's connector refuses BitsandbytesPrecision off CUDA; what runs here is the
            # plugin and its layer class (no quantization: Params4bit quantizes on the move to CUDA)
            msg = f"--quantize {quantize} skipped: Lightning runs BitsandbytesPrecision on CUDA only"
            try:
                p = BitsandbytesPrecision(quantize[4:], torch.bfloat16)
                with p.module_init_context():
                    layer = torch.nn.Linear(64, 64)
                msg += f" (the plugin builds {type(layer).__name__} with {type(layer.weight).__name__})"
            except Exception as e:  # bitsandbytes not installed here
                msg += f" (the plugin not built: {type(e).__name__}: {e})"
            note.append(msg)
            quantize = None
        else:
            dtype = {"16-true": torch.float16, "bf16-true": torch.bfloat16, "32-true": torch.float32}[precision]
            plugins = BitsandbytesPrecision(quantize[4:], dtype)
            precision = None
    fabric = L.Fabric(devices=1, num_nodes=1, strategy="auto", precision=precision, plugins=plugins,
                      accelerator="cpu" if args.cpu_check else "cuda", loggers=[])
    fabric.launch()

    # main(): litgpt/finetune/lora.py's lines in order (load_checkpoint left out: random weights)
    mb = train.micro_batch_size
    accum = train.gradient_accumulation_iters(1) if era_2404 else train.gradient_accumulation_iters(1, 1)
    seq = train.max_seq_length or 512
    n_samples = mb * accum * args.steps
    lr_max_steps = min(train.epochs * (n_samples // mb // accum), train.max_steps)
    fabric.seed_everything(s.get("seed", 1337))
    with fabric.init_module(empty_init=(fabric.world_size > 1)):
        model = GPT(config)
    mark_only_lora_as_trainable(model)
    n_trainable = num_parameters(model, requires_grad=True)
    n_frozen = num_parameters(model, requires_grad=False)
    model = fabric.setup_module(model)
    opt_cfg = s.get("optimizer", "AdamW")
    if era_2404:
        trainable_params = [p for p in model.parameters() if p.requires_grad]
        if isinstance(fabric.strategy.precision, BitsandbytesPrecision):
            import bitsandbytes as bnb

            optimizer_cls = bnb.optim.PagedAdamW
        else:
            optimizer_cls = torch.optim.AdamW
        optimizer = optimizer_cls(
            trainable_params, lr=train.learning_rate, weight_decay=train.weight_decay, betas=(train.beta1, train.beta2)
        )
    elif isinstance(fabric.strategy.precision, BitsandbytesPrecision):
        optimizer = lit_utils.instantiate_bnb_optimizer(opt_cfg, model.parameters())

        from bitsandbytes.nn import StableEmbedding

        old_embedding = model.transformer.wte
        model.transformer.wte = StableEmbedding(old_embedding.num_embeddings, old_embedding.embedding_dim)
        with torch.no_grad():
            model.transformer.wte.weight.copy_(old_embedding.weight)
        model.transformer.wte = model.transformer.wte.to(
            device=old_embedding.weight.device, dtype=old_embedding.weight.dtype
        )
    else:
        optimizer = lit_utils.instantiate_torch_optimizer(opt_cfg, model.parameters())
    optimizer = fabric.setup_optimizers(optimizer)
    scheduler = lora_script.get_lr_scheduler(optimizer, warmup_steps=train.lr_warmup_steps, max_steps=lr_max_steps)

    rec = {"name": args.name, "model": args.model, "layers": config.n_layer, "yaml": args.yaml,
           "set": args.set, "quantize": quantize, "precision": s.get("precision"),
           "micro_batch": mb, "accum": accum, "seq": seq, "steps": args.steps,
           "n_trainable": n_trainable, "n_frozen": n_frozen,
           "litgpt": "0.4.0.dev0 (43c44323)" if era_2404 else _dist_version("litgpt"),
           "litgpt_file": litgpt.__file__, "era_2404": era_2404,
           "lightning": L.__version__, "torch": torch.__version__,
           "bitsandbytes": _dist_version("bitsandbytes"), "note": note}
    if cuda:
        torch.cuda.synchronize()
        rec["gpu"] = torch.cuda.get_device_name()
        rec["build_peak_alloc_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 2)
        rec["build_alloc_mib"] = round(torch.cuda.memory_allocated() / MIB, 2)
    rec["build_s"] = round(time.perf_counter() - t0, 1)

    # random tokens in SFTDataset's item layout, every sample max_seq_length long
    g = torch.Generator().manual_seed(0)

    def sample():
        ids = torch.randint(0, config.vocab_size, (seq,), generator=g, dtype=torch.int64)
        return {"input_ids": ids, "labels": ids.clone(),
                "token_counts": {"raw": seq, "raw_plus_prompt_template": seq}}

    collate = get_sft_collate_fn(max_seq_length=seq, ignore_index=-100)
    train_dl = DataLoader([sample() for _ in range(n_samples)], batch_size=mb, shuffle=False, collate_fn=collate)
    val_dl = DataLoader([sample() for _ in range(2 * mb)], batch_size=mb, shuffle=False, collate_fn=collate)
    train_dl, val_dl = fabric.setup_dataloaders(train_dl, val_dl)

    # one record per optimizer step: fit() calls scheduler.step() right after optimizer.step()
    # and zero_grad(); the peaks are reset there, so step 1 also holds fit()'s sanity validation
    steps = []
    t_step = [time.perf_counter()]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sched_step = scheduler.step

    def step_and_record(*a, **k):
        out = sched_step(*a, **k)
        r = {"step": len(steps) + 1}
        if cuda:
            torch.cuda.synchronize()
            r.update(peak_alloc_mib=round(torch.cuda.max_memory_allocated() / MIB, 2),
                     peak_reserved_mib=round(torch.cuda.max_memory_reserved() / MIB, 2),
                     alloc_mib=round(torch.cuda.memory_allocated() / MIB, 2),
                     reserved_mib=round(torch.cuda.memory_reserved() / MIB, 2))
            torch.cuda.reset_peak_memory_stats()
        now = time.perf_counter()
        r["s"] = round(now - t_step[0], 3)
        t_step[0] = now
        steps.append(r)
        return out

    scheduler.step = step_and_record
    lora_script.Tokenizer = lambda _checkpoint_dir: None
    out_dir = os.path.join(args.work_dir, args.name)
    from pathlib import Path
    fit_args = dict(fabric=fabric, model=model, optimizer=optimizer, scheduler=scheduler,
                    train_dataloader=train_dl, val_dataloader=val_dl, devices=1, num_nodes=1,
                    checkpoint_dir=Path(out_dir), out_dir=Path(out_dir), train=train, eval=ev, data=None)
    fit_params = inspect.signature(lora_script.fit).parameters
    lora_script.fit(**{k: v for k, v in fit_args.items() if k in fit_params})
    rec["steps_rec"] = steps
    if cuda:
        # the training steps' peak (what vrsim simulates), and the run's (litgpt's "Memory used",
        # which also covers the build; the published runs' load_checkpoint is not run here)
        rec["train_peak_alloc_mib"] = max(x["peak_alloc_mib"] for x in steps)
        rec["peak_alloc_mib"] = max(rec["build_peak_alloc_mib"], rec["train_peak_alloc_mib"])
        rec["peak_reserved_mib"] = max(x["peak_reserved_mib"] for x in steps)
        rec["published_gb_equiv"] = round(rec["peak_alloc_mib"] * MIB / 1e9, 2)
    rec["total_s"] = round(time.perf_counter() - t0, 1)
    if tracing:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        entries = snap["device_traces"][0] if snap.get("device_traces") else []
        import measure_llama
        measure_llama.FRAME_KEYS = FRAME_KEYS
        os.makedirs(args.trace_dir, exist_ok=True)
        measure_llama.write_trace(os.path.join(args.trace_dir, f"fulltrace_{args.name}.csv.gz"), entries, stacks=True)
        summary = peak_blocks(entries)
        summary["name"] = args.name
        with open(os.path.join(args.trace_dir, f"peak_{args.name}.json"), "w") as f:
            json.dump(summary, f, indent=1)
        rec["trace_peak_alloc_mib"] = summary["peak_alloc_mib_traced"]
        rec["trace_events"] = summary["n_events"]
    return rec


def _dist_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--yaml", default=os.path.relpath(os.path.join(HERE, "..", "..", "tests", "data", "recipes",
                                                                   "litgpt_llama2_7b_qlora.yaml")))
    ap.add_argument("--model", default="Llama-2-7b-hf", help="litgpt Config.from_name name")
    ap.add_argument("--layers", type=int, default=0, help="cut the model to this many layers")
    ap.add_argument("--set", action="append", default=[], help="override a config key: key=value")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps")
    ap.add_argument("--name", default="litgpt7")
    ap.add_argument("--out", help="append the record (JSON line) here")
    ap.add_argument("--trace-dir", help="write the allocator trace and the peak's live blocks here")
    ap.add_argument("--work-dir", default="/tmp/litgpt7-work")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: a tiny config, one step, quantization skipped")
    args = ap.parse_args()
    if args.cpu_check:
        args.steps = 1
        args.name = args.name + "-cpu"
        # 64 tokens, two micro-batches of 2 per step: the accumulation path, within the tiny block
        args.set += ["train.max_seq_length=64", "train.micro_batch_size=2", "train.global_batch_size=4"]
    rec = run(args)
    line = json.dumps(rec)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    print(line, flush=True)
    if args.cpu_check:
        assert len(rec["steps_rec"]) == 1, "fit() ran no optimizer step"
        # the peak summary on a known history: 300 bytes live after the second alloc, both named
        fr = [{"filename": "/x/litgpt/model.py", "line": 7, "name": "forward"}]
        h = [{"action": "alloc", "addr": 1, "size": 100, "frames": fr},
             {"action": "alloc", "addr": 2, "size": 200, "frames": fr},
             {"action": "free_requested", "addr": 1, "size": 100}, {"action": "free_completed", "addr": 1, "size": 100},
             {"action": "alloc", "addr": 3, "size": 50, "frames": fr},
             {"action": "free_requested", "addr": 2, "size": 200}]
        pk = peak_blocks(h)
        assert pk["peak_event"] == 1 and pk["n_live"] == 2 and pk["by_frames"][0]["n"] == 2, pk
        assert pk["by_frames"][0]["frames"] == "litgpt/model.py:7:forward", pk
        print("cpu check: litgpt's GPT with LoRA, mark_only_lora_as_trainable, fit() through one "
              "optimizer step: ok" + ("; " + "; ".join(rec["note"]) if rec["note"] else ""))


if __name__ == "__main__":
    main()
