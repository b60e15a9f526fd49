"""Where a LLaMA training step's GPU time goes, measured: torch.profiler over one steady-state
step (the third), kernel time summed by category, so the simulator's op costs can be checked
category by category rather than only as a total. With --tables FILE it also writes every kernel
(name, launches, GPU ms, category) and every aten op by input shapes (launches, self GPU ms), so
an op's cost can be checked op by op: the GEMMs shape by shape, the elementwise kernels by name.

  python3 validation/harness/profile_llama_step.py --shape 7b-l4 --batch 4 --seq 2048 \
      --mode bf16 --out validation/results/profile_h200.jsonl
"""
import argparse, json, time
import torch

from compare_kernels import kernel_category as category  # the one set of rules, torch-free there

SHAPES = {"7b": (4096, 11008, 32, 32), "13b": (5120, 13824, 40, 40)}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="7b-l4"); ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048); ap.add_argument("--mode", default="bf16")
    ap.add_argument("--ckpt", action="store_true"); ap.add_argument("--name", default="")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tables", help="also write the per-kernel and per-op tables (JSON) here")
    a = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM
    base, _, layers = a.shape.partition("-l")
    h, i, nh, nkv = SHAPES[base]
    cfg = LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=i, num_attention_heads=nh,
                      num_key_value_heads=nkv, num_hidden_layers=int(layers or 32),
                      max_position_embeddings=max(4096, a.seq), tie_word_embeddings=False,
                      attn_implementation=a.attn)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    # amp_bf16: fp32 parameters, the forward under torch.autocast(bfloat16)
    model = model.to(torch.float32 if a.mode in ("fp32", "amp_bf16") else torch.bfloat16)
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.mode == "amp_bf16")
    if a.mode == "lora_bf16":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05,
                                                 target_modules=["q_proj", "v_proj"]))
    if a.ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5, foreach=True)
    ids = torch.randint(0, 32000, (a.batch, a.seq), device="cuda")
    def forward():
        with amp:
            return model(input_ids=ids, labels=ids).loss
    def step():
        loss = forward()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del loss
    for _ in range(2): step()
    torch.cuda.synchronize()
    # each phase alone, synchronised at its end (CUDA events, no profiler): best of three
    phase_ms = {"forward": 1e9, "backward": 1e9, "optimizer": 1e9}
    for _ in range(3):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        ev[0].record(); loss = forward(); ev[1].record()
        torch.cuda.synchronize(); ev[1].synchronize()
        b0 = torch.cuda.Event(enable_timing=True); b0.record()
        loss.backward(); ev[2].record(); torch.cuda.synchronize()
        o0 = torch.cuda.Event(enable_timing=True); o0.record()
        opt.step(); opt.zero_grad(set_to_none=True); ev[3].record(); torch.cuda.synchronize()
        del loss
        for k, (s_, e_) in zip(phase_ms, ((ev[0], ev[1]), (b0, ev[2]), (o0, ev[3]))):
            phase_ms[k] = min(phase_ms[k], s_.elapsed_time(e_))
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=bool(a.tables)) as prof:
        t0 = time.perf_counter(); step(); torch.cuda.synchronize(); wall = (time.perf_counter() - t0) * 1e3
    cats, n_kernels, first, last = {}, 0, None, None
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n_kernels += 1
            c = category(e.name)
            cats[c] = cats.get(c, 0.0) + device_ms(e)
    rec = {"name": a.name or f"profile-{a.shape}-b{a.batch}-s{a.seq}-{a.mode}{'-ckpt' if a.ckpt else ''}{'-eager' if a.attn == 'eager' else ''}",
           "shape": a.shape, "batch": a.batch, "seq": a.seq, "mode": a.mode, "ckpt": a.ckpt, "attn": a.attn,
           "wall_ms_profiled": wall, "kernels": n_kernels,
           "phase_ms": {k: round(v, 3) for k, v in phase_ms.items()},
           "gpu_ms_by_category": {k: round(v, 3) for k, v in sorted(cats.items())},
           "gpu_busy_ms": round(sum(cats.values()), 3), "torch": torch.__version__}
    with open(a.out, "a") as f: f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec))
    top = sorted(((e.key, device_ms(e), e.count) for e in prof.key_averages()), key=lambda x: -x[1])[:45]
    for k, t, c in top: print(f"{t:9.2f} ms {c:5d}  {k[:110]}")
    if a.tables:
        write_tables(a.tables, rec["name"], prof)


def device_ms(e, self_only=False):
    """An event's GPU time in ms, under the attribute name this torch version uses."""
    for attr in (("self_device_time_total", "self_cuda_time_total") if self_only
                 else ("device_time_total", "cuda_time_total")):
        if hasattr(e, attr):
            return getattr(e, attr) / 1e3
    return 0.0


def write_tables(path, name, prof):
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name, [0, 0.0])
            k[0] += 1; k[1] += device_ms(e)
    ops = []
    for e in prof.key_averages(group_by_input_shape=True):
        ms = device_ms(e, self_only=True)
        if ms > 0:
            ops.append({"op": e.key, "shapes": str(e.input_shapes), "count": e.count, "self_ms": round(ms, 4)})
    table = {"name": name,
             "kernels": sorted(({"kernel": k, "count": c, "ms": round(t, 4), "category": category(k)}
                                for k, (c, t) in kernels.items()), key=lambda r: -r["ms"]),
             "ops": sorted(ops, key=lambda r: -r["self_ms"])}
    with open(path, "a") as f: f.write(json.dumps(table) + "\n")

if __name__ == "__main__":
    main()
