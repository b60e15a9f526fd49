#!/usr/bin/env python3
"""Measure diffusers training steps (Flux.1 transformer, SD3/3.5 transformer, SD 1.x/2.x and SDXL UNet) on
one GPU, in the record layout of measure_llama.py (docs/validation.md, "Record format").

Each configuration runs in a fresh Python process (the caching allocator starts empty). The model
is built with from_config from a diffusers config.json (random init, no weights), with the plan
line's `cut` keys laid over it (num_layers, num_single_layers: fewer blocks, the same blocks), on
the GPU in the parameter dtype (bf16 for lora_bf16, fp32 for amp_bf16: vrsim's build = "direct").
The step is the training loop's step of the diffusers example script of the family, the
transformer or UNet only: the latents and the text embeddings are random tensors of the right
shape, made once before the first step (vrsim's text_encoders = "cached", vae = "cached"):

  flux  examples/dreambooth/train_dreambooth_lora_flux.py: enable_gradient_checkpointing, then
        add_adapter(LoraConfig(r, lora_alpha, init_lora_weights="gaussian", target_modules)) on
        the frozen bf16 transformer; per step noise, the sigmas of the sampled timesteps (get_sigmas
        with its .nonzero().item()), the noisy latents, the 2x2 packing, guidance 3.5 (dev), the
        forward under bf16 autocast (Accelerate's), the unpacking, target = noise - latents, the
        fp32 weighted mean-squared loss; latents (n, 16, res/8, res/8), prompt_embeds
        (n, max_sequence_length, 4096), pooled (n, 768), text_ids (max_sequence_length, 3).
  sd3   examples/dreambooth/train_dreambooth_lora_sd3.py: the same adapter; logit_normal timestep
        sampling (u on the CPU), sigma noise + (1 - sigma) x, the forward under bf16 autocast, the
        preconditioned output model_pred * (-sigma) + noisy against target = latents, weighting
        ones, the fp32 weighted mean-squared loss; prompt_embeds (n, 77 + max_sequence_length,
        4096), pooled (n, 2048).
  sd    examples/text_to_image/train_text_to_image.py (mixed_precision bf16: mode amp_bf16, the
        UNet in fp32, its forward under bf16 autocast): noise, timesteps = randint, DDPMScheduler
        .add_noise, unet(noisy, t, encoder_hidden_states), F.mse_loss(pred.float(),
        noise.float()); latents (n, 4, res/8, res/8) and encoder_hidden_states (n, 77, 768) in
        the UNet's dtype.
  sdxl-base-unet  examples/text_to_image/train_text_to_image_lora_sdxl.py's UNet step (diffusers'
        UNet2DConditionModel from an SDXL base config, cut by its sizing keys): noise, randint
        timesteps, DDPMScheduler.add_noise, unet(noisy, t, prompt_embeds, added_cond_kwargs=
        {text_embeds, time_ids}), F.mse_loss on float; prompt_embeds (n, 77, 2048), text_embeds
        (n, 1280), time_ids (n, 6); LoRA and bf16 weights without autocast (vrsim's UNet step),
        amp_bf16 under it.

AdamW(lr=1e-4, foreach=True) over the trainable parameters; opt.step(), zero_grad(set_to_none);
peak statistics reset before each step. The scripts' accelerator.clip_grad_norm_(max_grad_norm)
is left out, as vrsim leaves it out (a foreach norm per parameter: scalars, no tensor of size). A plan line: name, model (flux | sd3 | sd), config (path
of a diffusers config.json, relative to the repository root), cut (keys laid over it), res, batch,
mode (lora_bf16 | amp_bf16 | bf16), ckpt, optim (adamw_foreach), lora ({r, alpha, dropout,
targets}) for lora_bf16, max_sequence_length (flux 512, sd3 77), steps (4), trace (true or
"stacks": fulltrace_<name>.csv.gz as measure_llama.py writes it, from process start to the end of
step 1 when more steps follow, so that they are timed without the recording), timeout_s (90), retry_blocking
(a worker that fails is run once more with CUDA_LAUNCH_BLOCKING=1 so its traceback names the
faulting kernel; a record from that run says cuda_launch_blocking, and validate skips it by name),
attn (sdpa: PyTorch's pick; flash: SDPA's flash kernel only, the other backends switched off),
host_bench (true: the host's dispatch and op-class benchmark after the steps, as measure_llama.py),
compile (true: the repeated blocks compiled as vrsim's training.compile = true models them,
compile_blocks; the record says compile, compiled_classes and dynamo's counters after the warm-up
and at the end, dynamo_warmup and dynamo_end), host_profile (N: after the steps, the host's time by
phase of 10 more, each repeated block's forward call, and cProfile over N forwards and N steps, as
host_profile()), warmup (the first `warmup` of the `steps` steps are
recorded but not in the record's `timed` summary: median, spread and wall median of the others;
vrsim validate compares the last step).

On the GPU machine (repository root, the .whl folder carried: diffusers 0.42.1, peft 0.21.2,
transformers 5.25.0 over the image's torch; ~3 min; records, traces and log come back in $OUT):
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1; PYTHONPATH=/tmp/site python3 validation/harness/measure_diffusers.py --plan validation/harness/plans/plan_gen4_diffusion.jsonl --out $OUT/diffusion_h200_gen4.jsonl --trace-dir $OUT --deadline-s 400 2>&1 | grep -v Warning | tee $OUT/diffusion_log.txt | tail -40
Directly:
  measure_diffusers.py --plan validation/harness/plans/plan_gen4_diffusion.jsonl --out RECORDS.jsonl
The Flux.1 lines of the first run (one H100, torch 2.11.0+cu130, diffusers 0.42.1; the SD3 and
SD 1.5 lines of the same call ran) stopped in step 0 with "CUDA error: an illegal memory access",
reported at AdamW's first _foreach_mul_: a device fault of an earlier, asynchronous kernel of
that step's forward or backward. The step's inputs are made on the device explicitly with the
FluxPipeline helpers' shapes and the same code runs on the CPU (--cpu-check), and a wrong device
or shape on the Python side raises a Python error, not a device fault; the kernels Flux runs and
SD3 does not are its attention at head_dim 128 on permuted (n, s, heads, d) views and the float64
rotary tables. To name the kernel, run one line with CUDA_LAUNCH_BLOCKING=1 (the workers
inherit the environment):
  CUDA_LAUNCH_BLOCKING=1 measure_diffusers.py --plan ... --only gen4-flux-dev-d2s4-lora-r1024 --out R.jsonl
Check on the CPU (build and one step of a tiny cut, no GPU):
  measure_diffusers.py --plan validation/harness/plans/plan_gen4_diffusion.jsonl --cpu-check
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_llama as ml  # noqa: E402  (its NVML, context and allocator-trace helpers)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = float(1 << 20)
CLASSES = {"flux": "FluxTransformer2DModel", "sd3": "SD3Transformer2DModel", "sd": "UNet2DConditionModel",
           "sdxl-base-unet": "UNet2DConditionModel"}
UNETS = ("sd", "sdxl-base-unet")
MODES = ("lora_bf16", "amp_bf16", "bf16")
FRAME_KEYS = ("diffusers/", "peft/", "torch/nn/", "torch/amp/", "torch/optim/", "torch/utils/checkpoint",
              "torch/autograd/", "measure_diffusers.py")


def load_config(cfg):
    """The diffusers config.json of the plan line with its `cut` keys laid over it."""
    with open(os.path.join(REPO, cfg["config"])) as f:
        c = json.load(f)
    want = CLASSES[cfg["model"]]
    if c.get("_class_name") != want:
        raise ValueError(f"{cfg['config']}: _class_name {c.get('_class_name')!r}, not {want}")
    c.update(cfg.get("cut") or {})
    return c


def build(torch, cfg, dcfg, device):
    """The model as the scripts have it: from_pretrained builds it on the CPU in fp32, then
    .to(device, dtype=weight_dtype) (bf16 for lora_bf16: the buffers too; the UNet stays fp32
    under amp_bf16); checkpointing and LoRA as the script. (Built on the GPU instead, SD3's
    PatchEmbed computes its sin-cos table there in float64: 4.7 GiB of transient segments the
    script's run never makes, and the table would stay fp32.)"""
    import diffusers
    mode = cfg["mode"]
    dtype = torch.float32 if mode == "amp_bf16" else torch.bfloat16
    cls = getattr(diffusers, CLASSES[cfg["model"]])
    with torch.device("meta" if device.type == "meta" else "cpu"):
        model = cls.from_config({k: v for k, v in dcfg.items() if not k.startswith("_")})
    model.to(device, dtype=dtype)
    if cfg.get("ckpt"):
        model.enable_gradient_checkpointing()
    if mode == "lora_bf16":
        from peft import LoraConfig
        model.requires_grad_(False)
        lc = cfg["lora"]
        model.add_adapter(LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                                     init_lora_weights="gaussian", target_modules=lc["targets"]))
    model.train()
    return model


def make_step(torch, cfg, model, device):
    """One step's loss, as the family's script computes it; the inputs made here, once."""
    import diffusers
    fam, n, res = cfg["model"], int(cfg["batch"]), int(cfg["res"])
    mc = model.config
    pdt = next(model.parameters()).dtype
    lat = res // 8
    # Accelerate autocasts the Flux and SD3 scripts' forwards under bf16 LoRA; the UNets' LoRA
    # and bf16 weights run without autocast (vrsim's unet_step precision), amp_bf16 under it
    autocast = torch.bfloat16 if cfg["mode"] == "amp_bf16" or (
        cfg["mode"] == "lora_bf16" and fam not in UNETS) else None

    def ac():
        return torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()

    if fam == "sd":
        sched = diffusers.DDPMScheduler(num_train_timesteps=1000)
        latents = torch.randn(n, mc.in_channels, lat, lat, device=device, dtype=pdt)
        ehs = torch.randn(n, 77, mc.cross_attention_dim, device=device, dtype=pdt)

        def step():
            noise = torch.randn_like(latents)
            timesteps = torch.randint(0, 1000, (n,), device=device).long()
            noisy = sched.add_noise(latents, noise, timesteps)
            with ac():
                pred = model(noisy, timesteps, ehs, return_dict=False)[0]
            return torch.nn.functional.mse_loss(pred.float(), noise.float(), reduction="mean")
        return step

    if fam == "sdxl-base-unet":
        # train_text_to_image_lora_sdxl.py with cached embeddings: prompt_embeds (n, 77, 2048),
        # the pooled text_embeds and the six add_time_ids (original size, crop, target size)
        sched = diffusers.DDPMScheduler(num_train_timesteps=1000)
        latents = torch.randn(n, mc.in_channels, lat, lat, device=device, dtype=pdt)
        ehs = torch.randn(n, 77, mc.cross_attention_dim, device=device, dtype=pdt)
        pooled_dim = mc.projection_class_embeddings_input_dim - 6 * mc.addition_time_embed_dim
        text_embeds = torch.randn(n, pooled_dim, device=device, dtype=pdt)
        time_ids = torch.tensor([[res, res, 0, 0, res, res]] * n, device=device, dtype=pdt)

        def step():
            noise = torch.randn_like(latents)
            timesteps = torch.randint(0, 1000, (n,), device=device).long()
            noisy = sched.add_noise(latents, noise, timesteps)
            with ac():
                pred = model(noisy, timesteps, ehs, added_cond_kwargs={"text_embeds": text_embeds,
                                                                         "time_ids": time_ids},
                             return_dict=False)[0]
            return torch.nn.functional.mse_loss(pred.float(), noise.float(), reduction="mean")
        return step

    sched = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    msl = int(cfg.get("max_sequence_length", 512 if fam == "flux" else 77))

    def get_sigmas(timesteps, n_dim, dtype):
        sigmas = sched.sigmas.to(device=device, dtype=dtype)
        schedule_timesteps = sched.timesteps.to(device)
        timesteps = timesteps.to(device)
        step_indices = [(schedule_timesteps == t).nonzero().item() for t in timesteps]
        sigma = sigmas[step_indices].flatten()
        while len(sigma.shape) < n_dim:
            sigma = sigma.unsqueeze(-1)
        return sigma

    def sample_u():
        # compute_density_for_timestep_sampling("logit_normal", logit_mean=0, logit_std=1): on the CPU
        u = torch.normal(mean=0.0, std=1.0, size=(n,), device="cpu")
        return torch.nn.functional.sigmoid(u)

    if fam == "flux":
        from diffusers import FluxPipeline
        latents = torch.randn(n, 16, lat, lat, device=device, dtype=pdt)
        prompt_embeds = torch.randn(n, msl, mc.joint_attention_dim, device=device, dtype=pdt)
        pooled = torch.randn(n, mc.pooled_projection_dim, device=device, dtype=pdt)
        text_ids = torch.zeros(msl, 3, device=device, dtype=pdt)

        def step():
            img_ids = FluxPipeline._prepare_latent_image_ids(n, lat // 2, lat // 2, device, pdt)
            noise = torch.randn_like(latents)
            indices = (sample_u() * sched.config.num_train_timesteps).long()
            timesteps = sched.timesteps[indices].to(device=device)
            sigmas = get_sigmas(timesteps, n_dim=latents.ndim, dtype=latents.dtype)
            noisy = (1.0 - sigmas) * latents + sigmas * noise
            packed = FluxPipeline._pack_latents(noisy, n, 16, lat, lat)
            guidance = torch.tensor([3.5], device=device).expand(n) if mc.guidance_embeds else None
            with ac():
                pred = model(hidden_states=packed, timestep=timesteps / 1000, guidance=guidance,
                             pooled_projections=pooled, encoder_hidden_states=prompt_embeds,
                             txt_ids=text_ids, img_ids=img_ids, return_dict=False)[0]
            pred = FluxPipeline._unpack_latents(pred, height=lat * 8, width=lat * 8, vae_scale_factor=8)
            weighting = torch.ones_like(sigmas)  # compute_loss_weighting_for_sd3("none")
            target = noise - latents
            loss = torch.mean((weighting.float() * (pred.float() - target.float()) ** 2).reshape(n, -1), 1)
            return loss.mean()
        return step

    # sd3
    latents = torch.randn(n, mc.in_channels, lat, lat, device=device, dtype=pdt)
    prompt_embeds = torch.randn(n, 77 + msl, mc.joint_attention_dim, device=device, dtype=pdt)
    pooled = torch.randn(n, mc.pooled_projection_dim, device=device, dtype=pdt)

    def step():
        noise = torch.randn_like(latents)
        indices = (sample_u() * sched.config.num_train_timesteps).long()
        timesteps = sched.timesteps[indices].to(device=device)
        sigmas = get_sigmas(timesteps, n_dim=latents.ndim, dtype=latents.dtype)
        noisy = (1.0 - sigmas) * latents + sigmas * noise
        with ac():
            pred = model(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=prompt_embeds,
                         pooled_projections=pooled, return_dict=False)[0]
        pred = pred * (-sigmas) + noisy  # --precondition_outputs (on by default)
        weighting = torch.ones_like(sigmas)  # compute_loss_weighting_for_sd3("logit_normal")
        target = latents
        loss = torch.mean((weighting.float() * (pred.float() - target.float()) ** 2).reshape(n, -1), 1)
        return loss.mean()
    return step


def check(cfg):
    mode, optim = cfg["mode"], cfg.get("optim", "adamw_foreach")
    if cfg.get("model") not in CLASSES or mode not in MODES or optim != "adamw_foreach":
        raise ValueError(f"bad config {cfg}")
    if (mode == "lora_bf16") != ("lora" in cfg):
        raise ValueError(f"{cfg['name']}: lora is given with mode lora_bf16 and only then")
    if cfg["model"] == "sd" and mode != "amp_bf16":
        raise ValueError(f"{cfg['name']}: sd runs as train_text_to_image.py does (amp_bf16)")
    if cfg.get("compile") not in (None, False, True):
        raise ValueError(f"{cfg['name']}: compile is true or false (regional compilation, fullgraph)")
    warmup, nsteps = int(cfg.get("warmup", 0)), int(cfg.get("steps", 4))
    if not 0 <= warmup < nsteps:
        raise ValueError(f"{cfg['name']}: warmup {warmup} must leave timed steps of steps {nsteps}")


def record_fields(cfg):
    """What a record says of its configuration (the fields vrsim validate maps to a scenario):
    the plan line with its config file read and cut, and the settings the harness fixes."""
    check(cfg)
    rec = {"name": cfg["name"], "model": cfg["model"], "diffusers_config": load_config(cfg),
           "res": int(cfg["res"]), "batch": int(cfg["batch"]), "mode": cfg["mode"],
           "ckpt": bool(cfg.get("ckpt", False)), "optim": cfg.get("optim", "adamw_foreach"),
           "build": "direct", "text_encoders": "cached", "vae": "cached"}
    if cfg["model"] not in UNETS:
        rec["max_sequence_length"] = int(cfg.get("max_sequence_length", 512 if cfg["model"] == "flux" else 77))
    if "lora" in cfg:
        rec["lora"] = cfg["lora"]
    if cfg.get("attn", "sdpa") != "sdpa":
        if cfg["attn"] != "flash":
            raise ValueError(f"{cfg['name']}: attn is sdpa (PyTorch's pick) or flash")
        rec["attn"] = "flash"
    if cfg.get("cuda_launch_blocking"):
        rec["cuda_launch_blocking"] = True
    if cfg.get("compile"):
        # vrsim's training.compile = true: each repeated block one graph (compile_blocks)
        rec["compile"] = True
    return rec


def compile_blocks(torch, cfg, model, cpu=False):
    """Regional compilation as vrsim models it (lua/strategies/compile.lua REPEATED_BLOCKS):
    Flux's and the UNets' _repeated_blocks through diffusers' ModelMixin.compile_repeated_blocks
    (.compile() on every FluxTransformerBlock and FluxSingleTransformerBlock, every
    BasicTransformerBlock); SD3Transformer2DModel declares none, so each JointTransformerBlock's
    .compile(), as accelerate's compile_regions does. vrsim's partition is one graph per block:
    the CPU check (--cpu-check) compiles with fullgraph=True, so a graph break fails it, and with
    the aot_eager backend (dynamo's trace, AOTAutograd's joint graph and partition, no Inductor
    C++ build). On the GPU the torch there may break a block where the CPU's did not: torch's
    default (fullgraph=False) runs it anyway, and the record's dynamo counters say how many
    breaks there were. Returns the compiled classes."""
    kw = {"fullgraph": True, "backend": "aot_eager"} if cpu else {}
    if cfg["model"] == "sd3":
        for b in model.transformer_blocks:
            b.compile(**kw)
    else:
        model.compile_repeated_blocks(**kw)
    return sorted({type(m).__name__ for m in model.modules() if getattr(m, "_compiled_call_impl", None)})


def dynamo_counters():
    """torch._dynamo's counters as plain numbers by group (graph break reasons cut to 200
    characters): frames compiled, unique graphs, graph breaks, recompiles."""
    from torch._dynamo.utils import counters
    return {g: {str(k)[:200]: int(v) for k, v in c.items()} for g, c in counters.items() if c}


def host_profile(torch, loss_fn, opt, reps, model=None):
    """The host's time of a steady step by phase (median of 10, unprofiled), each repeated block's
    forward call on the host (the model's _repeated_blocks, compiled or not, timed by a wrapper
    around each for 10 more steps: the median over blocks and steps, no synchronization inside),
    and cProfile over `reps` forwards alone and over `reps` whole steps, grouped as
    profile_sdxl_host_calls.py groups them (a compiled block's guards, AOTAutograd's wrappers and
    Inductor's generated code apart)."""
    import cProfile
    from profile_sdxl_host_calls import summarize

    def step():
        loss_fn().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    phases = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        for k, d in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
            phases[k].append(d * 1e3)
    out = {"median_host_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}}
    classes = set(getattr(model, "_repeated_blocks", None) or ())
    if classes:
        sink, wrapped = [], []

        class Timed(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *a, **k):
                t0 = time.perf_counter()
                r = self.inner(*a, **k)
                sink.append(time.perf_counter() - t0)
                return r

        for mod in model.modules():
            if isinstance(mod, torch.nn.ModuleList):
                for i, child in enumerate(mod):
                    if type(child).__name__ in classes or type(getattr(child, "_orig_mod", None)).__name__ in classes:
                        wrapped.append((mod, i, child))
        for mod, i, child in wrapped:
            mod[i] = Timed(child)
        try:
            for _ in range(10):
                torch.cuda.synchronize()
                step()
                torch.cuda.synchronize()
        finally:
            for mod, i, child in wrapped:
                mod[i] = child
        if sink:
            v = sorted(sink)
            out["block_fwd_us"] = {"median": round(statistics.median(v) * 1e6, 2), "p10": round(v[len(v) // 10] * 1e6, 2),
                                   "p90": round(v[(9 * len(v)) // 10] * 1e6, 2), "blocks": len(wrapped),
                                   "classes": sorted(classes)}
    for key, run in (("forward", loss_fn), ("step", step)):
        prof, walls = cProfile.Profile(), []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            prof.enable()
            r = run()
            prof.disable()
            walls.append((time.perf_counter() - t0) * 1e3)
            if key == "forward":
                r.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        out[key] = summarize(prof, reps, 50, walls)
    return out


def timed_summary(steps, warmup):
    """The timed steps' (after the warm-up) GPU milliseconds: median, spread, and wall median."""
    import statistics
    t = steps[warmup:]
    if not t:
        return None
    g = sorted(s["gpu_ms"] for s in t)

    def q(p):
        return g[min(len(g) - 1, max(0, int(round(p * (len(g) - 1)))))]
    return {"from_step": warmup, "n": len(t), "median_gpu_ms": statistics.median(g), "min_gpu_ms": g[0],
            "max_gpu_ms": g[-1], "p10_gpu_ms": q(0.1), "p90_gpu_ms": q(0.9),
            "median_wall_ms": statistics.median(s["wall_ms"] for s in t),
            "warmup_wall_s": sum(s["wall_ms"] for s in steps[:warmup]) / 1e3}


def worker(cfg, result_path, trace_dir, cpu=False):
    t_proc = time.perf_counter()
    import torch
    import diffusers
    rec = record_fields(cfg)
    dcfg = rec["diffusers_config"]
    nsteps = int(cfg.get("steps", 4))
    if cpu:
        torch.manual_seed(0)
        model = build(torch, cfg, dcfg, torch.device("cpu"))
        compiled = None
        if cfg.get("compile"):
            # the lines share this process: each one's counters and caches its own
            import torch._dynamo
            from torch._dynamo.utils import counters
            torch._dynamo.reset()
            counters.clear()
            compiled = compile_blocks(torch, cfg, model, cpu=True)
        loss_fn = make_step(torch, cfg, model, torch.device("cpu"))
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
        # compiled: a second step, so that a recompilation in a steady step shows in the counters
        for _ in range(2 if compiled else 1):
            loss = loss_fn()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        print(f"  cpu check {cfg['name']}: loss {loss.item():.4f}, {sum(p.numel() for p in model.parameters())} "
              f"params, {sum(p.numel() for p in params)} trainable", flush=True)
        if compiled:
            c = dynamo_counters()
            print(f"    compiled (aot_eager on the CPU, not Inductor) {', '.join(compiled)}: unique graphs "
                  f"{c.get('stats', {}).get('unique_graphs', 0)}, graph breaks {sum(c.get('graph_break', {}).values())}",
                  flush=True)
        return
    idle_mib = ml.nvml_device_used_mib(index=int(os.environ.get("VRSIM_NVML_INDEX", "0")))
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    if rec.get("attn") == "flash":
        # SDPA's flash kernel only (vrsim's training.attention = "flash"): the mitigation PyTorch
        # names for cuDNN attention's failing execute (pytorch/pytorch#190321), which Flux.1's
        # backward hit on an H100 under torch 2.11
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_math_sdp(False)
    rec.update({"torch": torch.__version__, "gpu": props.name, "diffusers": diffusers.__version__})
    try:
        import peft
        rec["peft"] = peft.__version__
    except ImportError:
        pass
    rec["total_mib"] = props.total_memory / MIB
    # one build on the meta device first, and the pipeline class the step uses imported: what
    # diffusers imports lazily makes module-level tensors, which would otherwise land on the GPU
    build(torch, cfg, dcfg, torch.device("meta"))
    if cfg["model"] == "flux":
        getattr(diffusers, "FluxPipeline")
    stacks = cfg.get("trace") == "stacks"
    if cfg.get("trace"):
        ml.FRAME_KEYS = FRAME_KEYS
        ml.start_trace(stacks=stacks)

    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = build(torch, cfg, dcfg, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    torch.cuda.synchronize()
    rec["build_s"] = time.perf_counter() - t0
    # the base model's parameters, the adapters left out (measure_llama.py counts before peft)
    rec["n_params"] = sum(p.numel() for n_, p in model.named_parameters() if "lora_" not in n_)
    rec["n_trainable"] = sum(p.numel() for p in params)
    rec["after_build_alloc_mib"] = torch.cuda.memory_allocated(dev) / MIB
    rec["after_build_reserved_mib"] = torch.cuda.memory_reserved(dev) / MIB
    if cfg.get("compile"):
        # after checkpointing and the adapters, so that the blocks' graphs hold both
        rec["compiled_classes"] = compile_blocks(torch, cfg, model)
    loss_fn = make_step(torch, cfg, model, dev)
    rec["after_inputs_alloc_mib"] = torch.cuda.memory_allocated(dev) / MIB
    # the warm-up steps (compilation in the first) are recorded with the others; the timed
    # summary is over the steps after them
    warmup = int(cfg.get("warmup", 0))

    steps, oom = [], None
    for step in range(nsteps):
        if cfg.get("compile") and step == warmup:
            rec["dynamo_warmup"] = dynamo_counters()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        tw = time.perf_counter()
        ev0.record()
        try:
            loss = loss_fn()
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
        st = torch.cuda.memory_stats(dev)
        steps.append({
            "step": step, "wall_ms": (time.perf_counter() - tw) * 1e3, "gpu_ms": ev0.elapsed_time(ev1),
            "loss": float(loss.item()),
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
        if cfg.get("trace") and step == 1 and nsteps > 2:
            # the trace ends after the first steady step: recording every allocation (with its
            # Python stack under "stacks") slows the host, so the later steps are the timed ones
            fname = f"fulltrace_{cfg['name']}.csv.gz"
            rec["trace"], rec["trace_steps"] = fname, 2
            rec["trace_events"] = ml.finish_trace(os.path.join(trace_dir, fname), stacks=stacks)
        if step <= warmup or step == nsteps - 1:
            print(f"  {cfg['name']} step {step}: gpu {steps[-1]['gpu_ms']:.1f} ms, wall {steps[-1]['wall_ms']:.0f} ms, "
                  f"peak alloc {steps[-1]['peak_alloc_mib']:.2f} MiB, reserved {steps[-1]['peak_reserved_mib']:.0f} MiB",
                  flush=True)
    if oom is not None:
        rec["oom_at_step"] = oom[0]
        rec["oom_msg"] = str(oom[1])[:600]
    rec["steps"] = steps
    if warmup and oom is None:
        rec["timed"] = timed_summary(steps, warmup)
    if cfg.get("compile"):
        # a change from dynamo_warmup is a recompilation inside the timed steps
        rec["dynamo_end"] = dynamo_counters()
    if cfg.get("host_profile") and oom is None:
        rec["host_profile"] = host_profile(torch, loss_fn, opt, int(cfg["host_profile"]), model)
    if cfg.get("host_bench") and oom is None:
        # the host's speed beside a host-bound run (measure_sdxl_steps.host_fields)
        from measure_sdxl_steps import host_fields
        rec.update(host_fields(dev))
    ctx, ctx_raw = ml.context_figures(dev, idle_mib)
    rec.update(ctx)
    rec.update(ctx_raw)
    if cfg.get("trace") and "trace" not in rec:
        fname = f"fulltrace_{cfg['name']}.csv.gz"
        rec["trace"] = fname
        rec["trace_events"] = ml.finish_trace(os.path.join(trace_dir, fname), stacks=stacks)
    rec["process_s"] = time.perf_counter() - t_proc
    with open(result_path, "w") as f:
        json.dump(rec, f)


def cpu_cut(cfg):
    """The plan line shrunk for a CPU check: one block of each kind, 256 px, SD's UNet narrowed."""
    c = dict(cfg)
    c["res"], c["batch"], c["trace"] = 256 if cfg["model"] != "sd" else 128, 1, False
    cut = dict(cfg.get("cut") or {})
    if cfg["model"] == "flux":
        cut.update(num_layers=1, num_single_layers=1, num_attention_heads=2)
    elif cfg["model"] == "sd3":
        cut.update(num_layers=1, num_attention_heads=2, caption_projection_dim=128)
    elif cfg["model"] == "sdxl-base-unet":
        # SDXL's three levels and its text_time conditioning, narrow (attention_head_dim is the
        # head count in SDXL's config)
        cut.update(block_out_channels=[32, 64, 64], attention_head_dim=[1, 2, 2], norm_num_groups=8,
                   transformer_layers_per_block=[1, 1, 1], cross_attention_dim=64, addition_time_embed_dim=8,
                   projection_class_embeddings_input_dim=6 * 8 + 32)
    else:
        cut.update(block_out_channels=[32, 32, 64, 64], attention_head_dim=2, norm_num_groups=8,
                   cross_attention_dim=768)
    c["cut"] = cut
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", help="JSONL file, one configuration a line")
    ap.add_argument("--only", default="", help="comma-separated config names to run from the plan")
    ap.add_argument("--out", help="JSONL file the records are appended to")
    ap.add_argument("--trace-dir", default="validation/traces")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no config after this many seconds")
    ap.add_argument("--cpu-check", action="store_true", help="build and one step of each line, shrunk, on the CPU")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker), a.result, a.trace_dir)
        return 0
    if not a.plan:
        ap.error("need --plan")
    with open(a.plan) as f:
        configs = [json.loads(l) for l in f if l.strip() and not l.lstrip().startswith("#")]
    if a.only:
        keep = set(a.only.split(","))
        configs = [c for c in configs if c["name"] in keep]
    for c in configs:
        check(c)
    if a.cpu_check:
        for c in configs:
            worker(cpu_cut(c), None, None, cpu=True)
        return 0
    if not a.out:
        ap.error("need --out")
    os.makedirs(a.trace_dir, exist_ok=True)

    def log(msg):
        print(time.strftime("%H:%M:%S ") + msg, flush=True)

    t_start, n_ok = time.time(), 0
    for cfg in configs:
        elapsed = time.time() - t_start
        timeout = float(cfg.get("timeout_s", 90))
        if a.deadline_s and elapsed + min(timeout, 20) > a.deadline_s:
            log(f"SKIP {cfg['name']}: deadline ({elapsed:.0f} s of {a.deadline_s:.0f} s used)")
            continue
        if a.deadline_s:
            timeout = min(timeout, max(10.0, a.deadline_s - elapsed))
        fd, res = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        os.unlink(res)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        t0 = time.time()
        log(f"RUN  {cfg['name']}: {json.dumps(cfg)}")
        def run_worker(env, timeout):
            try:
                return subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg),
                                       "--result", res, "--trace-dir", a.trace_dir], env=env,
                                      timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                return "timeout"
        rc = run_worker(env, timeout)
        if rc not in (0, "timeout") and cfg.get("retry_blocking"):
            # a CUDA fault is reported at a later call; run again with synchronous launches so the
            # traceback names the kernel. The record says so: its step times are not comparable.
            log(f"RETRY {cfg['name']} with CUDA_LAUNCH_BLOCKING=1 to name the failing kernel")
            cfg = dict(cfg, cuda_launch_blocking=True)
            rc = run_worker(dict(env, CUDA_LAUNCH_BLOCKING="1"),
                            max(10.0, min(timeout, a.deadline_s - (time.time() - t_start)))
                            if a.deadline_s else timeout)
        dt = time.time() - t0
        if rc == 0 and os.path.exists(res):
            with open(res) as f:
                rec = json.load(f)
            os.unlink(res)
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            n_ok += 1
            last = rec["steps"][-1] if rec["steps"] else {}
            med = (rec.get("timed") or {}).get("median_gpu_ms", float("nan"))
            log(f"DONE {cfg['name']} in {dt:.1f} s: peak_alloc {last.get('peak_alloc_mib', float('nan')):.2f} "
                f"peak_reserved {last.get('peak_reserved_mib', float('nan')):.0f} gpu_ms {last.get('gpu_ms', float('nan')):.1f}"
                f" timed median {med:.1f}")
        else:
            log(f"FAIL {cfg['name']} after {dt:.1f} s: rc={rc}")
    log(f"{n_ok} of {len(configs)} configurations measured into {a.out}")
    return 0 if n_ok == len(configs) else 1


if __name__ == "__main__":
    sys.exit(main())
