#!/usr/bin/env python3
"""The oracle's capture: run the real transformers / peft / torch training code on fake CUDA
tensors (no GPU, no data) and write what it allocates, frees and saves, op by op.

  capture.py SPEC.json [-o OUT.jsonl.gz]

A spec (validation/oracle/specs/*.json) is a configuration written like a vrsim scenario:

  name          the capture's name (the output is captures/<name>.jsonl.gz by default)
  config        a Hugging Face config.json: a path relative to the repository, or the object
  layers        num_hidden_layers (the repeated layers cut, as vrsim's model.layers)
  micro_batch, seq, steps (default 2), grad_accum (default 1)
  precision     fp32, bf16, amp_bf16, amp_fp16 or lora_bf16 (as measure_llama.py's modes), or
                mp_fp32 (FSDP2's MixedPrecisionPolicy over the fp32 model: bf16 compute, fp32
                reduction, as measure_multi.py's mode)
  build         cast (fp32 then .to(dtype), from_config's way; default) or direct
  optimizer     adamw or sgd;  optimizer_impl: foreach, fused or forloop
  checkpointing true: non-reentrant checkpointing of every decoder layer (HF's
                gradient_checkpointing_enable); checkpoint_every k: of layers 0, k, 2k... only
  checkpoint_scope  layer (default) or op: torchtitan's op-level selective checkpointing
                (SelectiveAC: create_selective_checkpoint_contexts with its policy, early_stop
                off) through the same gradient_checkpointing_enable
  lora          {r, alpha, dropout, targets, target_parameters} (peft; targets a list or
                "all-linear"; target_parameters the parameter names of LoraConfig(target_parameters))
  float8        {recipe}: torchao's convert_to_float8_training (tensorwise, rowwise or
                rowwise_with_gw_hp) with torchtitan's filter (not lm_head, dims divisible by 16)
  attention     sdpa (default) or eager;  sdpa_backend: cudnn (default: what PyTorch 2.11 picks
                on an H200 for these shapes), flash, efficient or math
  compare       all (default) or forward: what compare.py holds vrsim to (the build and the
                forward only, the rest counted)
  resolution    image side in pixels, for a diffusers UNet config (below), in place of seq
  text_encoders, vae  for an SDXL UNet config: cached (default: their outputs given) or frozen
                / fp32: SDXL's full text encoders (bf16) and VAE (fp32) built and run in the step
                as train_text_to_image_lora_sdxl.py runs them (build_sdxl_frozen, unet_loss);
                for a Flux config: frozen / weight: CLIP-L and T5-XXL (full size) and the
                16-channel VAE in weight_dtype, run in the step as train_dreambooth_lora_flux.py
                runs them with custom prompts (build_flux_frozen, flux_step); for an SD3
                config: frozen / fp32: CLIP-L, CLIP-G and T5-XXL (full size, bf16) and the
                16-channel VAE in fp32, as train_dreambooth_lora_sd3.py runs them
                (build_sd3_frozen, sd3_step)
  data          {"lengths": [...], "batching": "pad" or "padding_free"}: one batch of
                sequences of these lengths (in place of micro_batch and seq), as vrsim's
                training.data: padded to the longest with an attention_mask
                (DataCollatorWithPadding), or flattened into one row with position_ids
                restarting at each sequence (DataCollatorWithFlattening);
                {"lengths": [...], "batching": "multipack", "micro_batch": B, "sequence_len": S}:
                axolotl's sample packing under sdpa (multipack_real_batches): the lengths
                packed first-fit in their order into exactly B bins of at most S tokens, each
                bin a row padded to S rounded up to 64 (pad_to_sequence_len), position_ids
                restarting at each sequence and over the padding, no attention_mask, and
                under sdpa axolotl's sdpa_varlen patch installed (install_axolotl_sdpa_varlen;
                under eager axolotl patches nothing: transformers' mask from position_ids)
  loss          full (default: the model's own loss) or chunked: torchtune's chunked output (the
                head on 8 chunks inside the model's forward) and CEWithChunkedOutputLoss
                (chunked_loss), as vrsim's training.loss = "chunked" runs it on the transformers model
  code          transformers (default) or torchtune: torchtune 0.6.1's own model of a Llama or
                Qwen2 config (torchtune.models.llama3 llama3(), qwen2 qwen2(), built in bf16 under set_default_dtype
                as its recipes build it, its output chunked), trained as its single-device recipe
                trains it (loss chunked, precision bf16, no strategy); vrsim's model.code
  torchtune     with code torchtune: 0.6.1 (default: the installed release) or 0.4.0, whose
                RMSNorm.forward (torchtune/modules/rms_norm.py at v0.4.0, before #2054) replaces
                the installed one; the rest of the model is 0.6.1's (vrsim's training.torchtune)
  strategy      none (default) or fsdp2: fully_shard on every decoder layer, then the root, as
                validation/harness/measure_multi.py wraps the model, over a fake process group of
                `world` ranks (fake_dist.py); rank 0 is recorded; ddp: DistributedDataParallel;
                zero1: the same DDP with torch.distributed.optim.ZeroRedundancyOptimizer
  world         the fake world size (2 or more with a strategy)
  record        {"file": validation/records/*.jsonl, "name", "rank"}: the H200 run of this very
                configuration, against whose measured peak compare.py holds the capture plus
                vrsim's CUDA-only terms (not used by the capture itself); "unseen": {"bytes",
                "what"}: what the GPU's trace shows live at the peak that neither side can make,
                named with its evidence
  zero          the strategy's knobs, as the scenario's training.zero: init "whole" (the model is
                built on the GPU, then sharded: required), raf (reshard_after_forward, passed to
                every fully_shard call; default true), units (module paths, each given a
                fully_shard of its own after the decoder layers' and before the root's)

The training loop is validation/harness/measure_llama.py's (the loop the GPU records ran):
forward with labels = input_ids, loss.backward(), opt.step(), opt.zero_grad(set_to_none=True).

A diffusers UNet config (_class_name UNet2DConditionModel: Stable Diffusion 1.x / 2.x, vrsim's
arch sd) is trained instead as diffusers' examples/text_to_image/train_text_to_image.py trains
it, with the latents and the text encoder's output given (vrsim's text_encoders = "cached",
vae = "cached"): `resolution` (pixels) replaces seq; noise = randn_like(latents), timesteps,
DDPMScheduler.add_noise, unet(noisy, timesteps, encoder_hidden_states).sample under autocast
(Accelerate's, around the UNet's forward only), F.mse_loss(pred.float(), noise.float()).
A FluxTransformer2DModel config (Flux.1, vrsim's arch flux) is trained as diffusers'
examples/dreambooth/train_dreambooth_lora_flux.py trains it with --cache_latents and one
instance prompt (flux_step): the transformer built in weight_dtype, checkpointing and LoRA as the
spec says, the flow-matching step with the 2x2 packing, the forward under autocast (for lora_bf16
too: Accelerate's), the fp32 weighted mean-squared loss. An SD3Transformer2DModel config (SD3 /
SD3.5, vrsim's arch sd3) is trained as examples/dreambooth/train_dreambooth_lora_sd3.py trains it
with the latents and prompt embeddings given (sd3_step): built on the CPU, then .to(cuda, bf16),
LoRA as for Flux, the logit-normal sigmas, the preconditioned output, the fp32 weighted loss.

How it records (the mechanisms of torch/distributed/_tools/mem_tracker.py):
- a TorchDispatchMode above FakeTensorMode sees every aten op; a CUDA output storage not seen
  before is an allocation of storage.nbytes() bytes (the size the op asked the allocator for);
- a weakref callback on each untyped storage (whose Python object lives exactly as long as the
  storage) is its free;
- module paths come from global module forward hooks; in backward the autograd node being run
  (torch._C._current_autograd_node()) carries, in its metadata, the forward op and module that
  made it; gradient accumulation nodes name their parameter;
- saved_tensors_hooks record what each autograd node keeps for backward;
- a storage resized in place (FSDP2's unsharded parameters: resize_(0) after use, resize_(n)
  before) is a free and an allocation (UntypedStorage.resize_ wrapped, as MemTracker does);
- a wrapper subclass (a DTensor parameter or gradient) holds no memory of its own: its inner
  tensors (the local shard) are what is tracked.

Output: gzipped JSONL, one object a line: a header (spec, versions, world size, rank, the SDPA
backend), params (name, shape, dtype, bytes, trainable), then events in order:
  {"e": "phase", "ph": "fwd"|"bwd"|"optim"|"zero_grad"|"build", "st": step, "mb": micro}
  {"e": "op", "i": n, "op": aten name, "m": module path, "ph", "st", "fw": forward op of the
   backward node ("module|op"), "out": [[shape, dtype, bytes], ...], "new": [[sid, bytes], ...]}
  {"e": "free", "i": n (the last op before it), "sid", "b"}
  {"e": "save", "i": n, "op": the op whose node saves it, "sid", "b", "shape", "dtype"}
  {"e": "step", "st", "peak", "after_fwd", "after_bwd", "after_opt", "live_end"}
Fake CUDA on a CPU-only PyTorch needs stand-ins, each outside what is measured: a no-op CUDA
device guard and CUDA hooks that say CUDA is built (fake_cuda_hooks.cpp, preloaded: the
autograd engine needs both), autocast and GradScaler told CUDA exists, model.to() by set_data
as on CUDA (enable_fake_cuda), and the SDPA backend chosen here (install_sdpa_backend: the
choice is a CUDA kernel).
Random fills (weight init, randint) allocate nothing and are skipped.
"""
import argparse
import contextlib
import gzip
import json
import os
import sys
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")
RANDOM_INPLACE = {"uniform_", "normal_", "bernoulli_", "random_", "exponential_", "log_normal_",
                  "cauchy_", "geometric_"}
CUDA_KERNEL_OPS = ("silu_backward", "mish_backward")
_KEEP = []


def preload_fake_cuda():
    """Re-executes this process with fake_cuda_hooks.so preloaded (built on first use beside the
    wheel's headers into validation/oracle/build/): its CUDA guard and hooks must be registered
    before torch first asks for them, which happens while torch imports."""
    if os.environ.get("VRSIM_ORACLE_PRELOADED") == "1":
        return
    import sysconfig
    import subprocess
    spec = __import__("importlib.util").util.find_spec("torch")
    tdir = os.path.dirname(spec.origin)
    src = os.path.join(HERE, "fake_cuda_hooks.cpp")
    build = os.path.join(HERE, "build")
    so = os.path.join(build, "fake_cuda_hooks.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        os.makedirs(build, exist_ok=True)
        cxx = os.environ.get("CXX", "g++")
        subprocess.check_call([cxx, "-O1", "-shared", "-fPIC", "-std=c++17",
                               "-I" + os.path.join(tdir, "include"), src,
                               "-L" + os.path.join(tdir, "lib"), "-lc10", "-ltorch_cpu",
                               "-o", so + ".tmp"])
        os.replace(so + ".tmp", so)
    env = dict(os.environ)
    env["VRSIM_ORACLE_PRELOADED"] = "1"
    env["LD_PRELOAD"] = so + ((" " + env["LD_PRELOAD"]) if env.get("LD_PRELOAD") else "")
    env["LD_LIBRARY_PATH"] = os.path.join(tdir, "lib") + (
        (":" + env["LD_LIBRARY_PATH"]) if env.get("LD_LIBRARY_PATH") else "")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def enable_fake_cuda(torch):
    """Python-side stand-ins for a GPU (the C++ ones are fake_cuda_hooks.cpp's)."""
    import torch.cuda.amp.common as amp_common
    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *a, **k: True
    # the capability of the GPU the captures stand for (an H200, sm90): transformers asks it
    # before taking torch's grouped GEMM for a mixture of experts (integrations/moe.py)
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    # Module._apply (model.to(dtype)) swaps a FakeTensor parameter's whole tensor, which fails on
    # the weakrefs FakeTensorMode keeps; on real CUDA tensors it takes the set_data path
    # (param.data = new): the new storage allocated, the old one freed when replaced. That path:
    # (a CPU parameter moved to CUDA, as peft moves a new adapter to its base layer, becomes a
    # new Parameter on CUDA: for a fake tensor, the same object with its fake device updated)
    def set_data(param, applied):
        param.data = applied.data
        if hasattr(applied, "fake_device") and param.fake_device != applied.fake_device:
            param.fake_device = applied.fake_device
    torch.utils.swap_tensors = set_data
    # An op with a CUDA kernel and a CompositeImplicitAutograd one runs the kernel on a GPU; on
    # a CPU-only build the CUDA slot is empty, so the composite fills AutogradCUDA and the op is
    # decomposed before any dispatch mode sees it (silu_backward became sigmoid, fill_, sub_,
    # mul, add, mul, mul: five fp32-sized buffers where the GPU allocates one). A CUDA entry
    # restores the GPU's dispatch: autograd, then the Python key (this recorder, then the meta
    # kernel); the entry itself never runs. These are the ops of this kind (the CompositeImplicit
    # ops with a CPU kernel and none for CUDA in the CPU wheel) whose CUDA kernels exist in
    # native_functions.yaml (native_channel_shuffle, the third, has none).
    lib = torch.library.Library("aten", "IMPL")

    def never(*_a, **_k):
        raise RuntimeError("oracle: a fake CUDA kernel ran on data")
    for op in CUDA_KERNEL_OPS:
        lib.impl(op, never, "CUDA")
    _KEEP.append(lib)


def install_data_answers(torch, packed=False):
    """The answers real data gives where transformers branches on tensor values. A fake tensor
    has no values, and transformers treats it as traced and takes the branch that keeps every
    case open; the loop's own inputs decide these on a GPU:
    - GradScaler's found-inf check: no inf (the optimizer steps; below).
    - masking_utils.find_packed_sequence_indices(position_ids): the loop's position ids are
      0..seq-1, one sequence a row, so the function returns None (after its diff, cumsum and the
      check `(mask[:, -1] == 0).all()`, which are run here too) and no packed-sequence mask is
      built (without this, a run without a KV cache, as under checkpointing, builds a full
      boolean causal mask that the GPU never makes). A spec whose data is flattened
      (padding_free) has several sequences in its row: the function returns their indices."""
    try:
        import transformers.masking_utils as mu
    except ImportError:
        return
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:
        return

    def find_packed_sequence_indices(position_ids):
        mask = orig(position_ids)
        if mask is not None:
            (mask[:, -1] == 0).all()
        return mask if packed else None

    mu.find_packed_sequence_indices = find_packed_sequence_indices

    # GradScaler._maybe_opt_step: found_inf (a device scalar per device, read with .item(), a
    # sync that allocates nothing) is 0 on a step whose gradients are finite, the step every
    # measured run takes: the optimizer steps
    from torch.amp import grad_scaler

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    grad_scaler.GradScaler._maybe_opt_step = _maybe_opt_step


def multipack_rows(data):
    """axolotl's bins for a "multipack" spec: the lengths first-fit in their order into bins of at
    most sequence_len tokens (MultipackBatchSampler's pack_group with the sampler's order given).
    Returns (the bins' lengths, the row length: sequence_len rounded up to 64)."""
    cap = int(data["sequence_len"])
    bins = []
    for n in data["lengths"]:
        for b in bins:
            if sum(b) + n <= cap:
                b.append(n)
                break
        else:
            bins.append([n])
    return bins, (cap + 63) // 64 * 64


def install_axolotl_sdpa_varlen(torch, segments):
    """axolotl's sdpa_varlen patch (axolotl.monkeypatch.attention.sdpa_varlen, 0.18-0.19) as
    PatchManager._apply_sdpa_varlen_patch applies it for sdpa with sample_packing, with the answers
    the batch's values give where it reads them (a fake tensor has none): _is_packed is true (more
    sequence starts than rows), and prepare_fa_kwargs_from_position_ids (transformers 5.25, which
    the patch binds when it is installed) finds `segments` sequence starts. The replacement makes
    what the real function makes on the GPU, in its order: the row flattened (a view), its min, the
    == mask, nonzero's (segments, 1) int64 indices (viewed flat), their int32 copy, the total as a
    (1,) int32 tensor, their cat (cu_seqlens), its diff and the diff's max; the max is read with
    int() by the patch (a sync), so it is answered as an int that holds the max's tensor alive, as
    the wrapper's locals hold it until it returns."""
    import transformers.modeling_flash_attention_utils as fa
    import axolotl.monkeypatch.attention.sdpa_varlen as sv

    class HeldInt(int):
        pass

    def _is_packed(position_ids):
        pid = position_ids if position_ids.dim() > 1 else position_ids[None]
        (pid == 0).sum()
        return True

    def prepare_fa_kwargs_from_position_ids(position_ids):
        kw = {"dtype": torch.int32, "device": position_ids.device}
        position_ids = position_ids.reshape(-1)
        eq = position_ids == position_ids.min()
        indices_q = position_ids.new_empty((segments, 1)).view(-1)
        del eq
        # (torch.tensor(position_ids.size()) on the GPU: the same (1,) int32 allocation, made from
        # the fake row so that a checkpoint's recomputation, on the autograd engine's device
        # thread where no fake mode is active, makes it too)
        total = position_ids.new_full((1,), position_ids.numel(), dtype=torch.int32)
        cu = torch.cat((indices_q.to(**kw), total))
        mx = cu.diff().max()
        held = HeldInt(position_ids.numel())
        held.tensor = mx
        return (cu, cu), (held, held)

    sv._is_packed = _is_packed
    fa.prepare_fa_kwargs_from_position_ids = prepare_fa_kwargs_from_position_ids
    if not sv.patch_sdpa_varlen():
        raise SystemExit("capture: axolotl's sdpa_varlen did not install (torch.nn.attention.varlen missing)")


def install_sdpa_backend(torch, backend):
    """F.scaled_dot_product_attention as PyTorch runs it on CUDA with `backend` chosen: the
    composite op (aten/src/ATen/native/transformers/attention.cpp) asks a CUDA-only stub for the
    backend, which a CPU-only build lacks, and so falls to the math path; here the fused op the
    GPU would pick is called as the composite calls it (autocast casts q, k, v first, as the
    composite is on CUDA autocast's lower-precision list)."""
    F = torch.nn.functional
    orig = F.scaled_dot_product_attention
    aten = torch.ops.aten
    if backend == "math":
        return

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # (F.scaled_dot_product_attention's own argument names: diffusers passes them by keyword)
        q, k, v = query, key, value
        if torch.is_autocast_enabled("cuda"):
            dt = torch.get_autocast_dtype("cuda")
            with torch.autocast("cuda", enabled=False):
                q, k, v = q.to(dt), k.to(dt), v.to(dt)
                return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        lse = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            # convert_boolean_attn_mask (attention.cpp): where(mask, 0.0, scalar_tensor(-inf,
            # q's dtype)), one additive mask in q's dtype
            attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(float("-inf"), dtype=q.dtype,
                                                                         device=q.device))
        # cuDNN and flash attention take fp16 and bf16 only (sdp_utils.cpp check_tensor_dtype):
        # an fp32 run gets the memory-efficient kernel, as on the GPU
        chosen = backend if q.dtype in (torch.float16, torch.bfloat16) else "efficient"
        if chosen == "cudnn":
            return aten._scaled_dot_product_cudnn_attention(q, k, v, attn_mask, lse, dropout_p,
                                                            is_causal, False, scale=scale)[0]
        if chosen == "flash" and attn_mask is None:
            return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False,
                                                            scale=scale)[0]
        return aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, lse, dropout_p,
                                                            is_causal, scale=scale)[0]

    sdpa.__wrapped__ = orig
    F.scaled_dot_product_attention = sdpa


def install_fused_rms_norm(torch):
    """F.rms_norm as PyTorch 2.11 runs it on CUDA (aten/src/ATen/native/layer_norm.cpp
    rms_norm_symint), the version of the GPU records: on no autocast list (2.12 put it on the fp32
    policy, pytorch/pytorch#174824), and with input and weight of one dtype at::_fused_rms_norm,
    one kernel writing the output in the input's dtype and an fp32 rstd per row, whose backward
    (_fused_rms_norm_backward) keeps input, rstd and weight and writes the gradients. A CPU-only
    build has no CUDA kernel for it and decomposes it (rms_norm_composite); here one autograd
    function allocates what the CUDA kernels do. Weight and input of different dtypes take the
    composite, as on the GPU."""
    F = torch.nn.functional
    orig = F.rms_norm

    class FusedRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, ndim):
            out = torch.empty_like(x)
            rstd = x.new_empty(tuple(x.shape[:x.dim() - ndim]) + (1,) * ndim, dtype=torch.float32)
            ctx.mark_non_differentiable(rstd)
            ctx.set_materialize_grads(False)   # (no zero gradient made for rstd)
            ctx.save_for_backward(x, rstd, w)
            return out, rstd

        @staticmethod
        def backward(ctx, grad_out, _grad_rstd):
            x, _rstd, w = ctx.saved_tensors
            gx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
            gw = torch.empty_like(w) if w is not None and ctx.needs_input_grad[1] else None
            return gx, gw, None

    def rms_norm(input, normalized_shape, weight=None, eps=None):
        with torch.autocast("cuda", enabled=False):
            if (weight is not None and weight.dtype != input.dtype) or input.device.type != "cuda":
                return orig(input, normalized_shape, weight, eps)
            return FusedRMSNorm.apply(input, weight, len(normalized_shape))[0]

    rms_norm.__wrapped__ = orig
    F.rms_norm = rms_norm


def dtype_name(dt):
    return str(dt).replace("torch.", "")


class Recorder:
    """The event log and the live-storage accounting of one capture."""

    def __init__(self):
        self.events = []
        self.n = 0                # ops seen
        self.last_op = ""
        self.ph, self.st, self.mb = "build", -1, 0
        self.sids = weakref.WeakKeyDictionary()   # untyped storage -> storage id
        self.refs = {}            # sid -> weakref (kept so the callback fires)
        self.nbytes = {}          # live sid -> bytes
        self.next_sid = 1
        self.live = 0
        self.peak = 0
        self.mod_stack = []
        self.mod_names = {}
        self.param_names = {}

    def phase(self, ph, st=None, mb=0):
        self.ph = ph
        if st is not None:
            self.st = st
        self.mb = mb
        self.events.append({"e": "phase", "ph": ph, "st": self.st, "mb": mb})

    def module_path(self):
        return self.mod_stack[-1] if self.mod_stack else ""

    def on_free(self, sid, _ref):
        b = self.nbytes.pop(sid, None)
        self.refs.pop(sid, None)
        if not b:       # (unknown, or resized to nothing before: freed then)
            return
        self.live -= b
        self.events.append({"e": "free", "i": self.n, "sid": sid, "b": b})

    def track(self, t):
        """The storage of CUDA tensor t: its id, and whether it is new (an allocation)."""
        return self.track_storage(t.untyped_storage())

    def save(self, t):
        """saved_tensors_hooks' pack: a CUDA tensor autograd keeps for backward, recorded as the
        op whose node saves it keeps it (a DTensor as its local shard); t is kept as it is."""
        if t.device.type == "cuda":
            sid, _ = self.track(t)
            loc = getattr(t, "_local_tensor", t)
            self.events.append({"e": "save", "i": self.n, "op": self.last_op, "sid": sid,
                                "b": self.nbytes.get(sid, 0),
                                "shape": list(loc.shape), "dtype": dtype_name(loc.dtype)})
        return t

    def track_storage(self, st):
        sid = self.sids.get(st)
        if sid is not None:
            return sid, False
        sid = self.next_sid
        self.next_sid += 1
        self.sids[st] = sid
        self.refs[sid] = weakref.ref(st, lambda r, s=sid: self.on_free(s, r))
        b = st.nbytes()
        self.nbytes[sid] = b
        self.live += b
        self.peak = max(self.peak, self.live)
        return sid, True

    def install_resize(self, torch):
        """A storage resized in place (FSDP2's unsharded parameters and all-gather output:
        `untyped_storage().resize_(0)` frees the memory, `resize_(n)` allocates it again, the
        storage object living on) is a free and an allocation; no dispatch mode sees it, so the
        method is wrapped, as MemTracker wraps it (torch/distributed/_tools/mem_tracker.py)."""
        orig = torch.UntypedStorage.resize_

        def resize_(st, size):
            out = orig(st, size)
            # (a fake tensor's storage is on the meta device: a CUDA one is one seen before, as
            # an op's output)
            sid = self.sids.get(st)
            if sid is None:
                return out
            old = self.nbytes.get(sid, 0)
            if old:
                self.live -= old
                self.nbytes[sid] = 0
                self.events.append({"e": "free", "i": self.n, "sid": sid, "b": old})
            nb = st.nbytes()
            if nb:
                self.nbytes[sid] = nb
                self.live += nb
                self.peak = max(self.peak, self.live)
                self.events.append({"e": "op", "i": self.n, "op": "UntypedStorage.resize_",
                                    "m": self.module_path(), "ph": self.ph, "st": self.st,
                                    "out": [], "new": [[sid, nb]]})
            return out

        torch.UntypedStorage.resize_ = resize_



def make_tagger(torch, rec):
    """A TorchFunctionMode that names, in each new autograd node's metadata, the module and the
    torch function that made it (the node exists only once the call returns, above dispatch),
    so that backward can name what it runs without keeping the nodes alive."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    class Tagger(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if rec.ph == "fwd":
                flat, _ = tree_flatten(out)
                for t in flat:
                    fn = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
                    if fn is not None and "vr" not in fn.metadata:
                        fn.metadata["vr"] = rec.module_path() + "|" + getattr(func, "__name__", str(func))
            return out

    return Tagger()


def plain_tensors(flat):
    """The tensors that own memory among `flat`: a wrapper subclass (a DTensor) has a storage of
    its logical size that holds nothing; its inner tensors (the local shard) are what is
    allocated, as MemTracker's _get_untyped_storages flattens them."""
    import torch
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    todo = [t for t in flat if isinstance(t, torch.Tensor)]
    out = []
    while todo:
        t = todo.pop(0)
        if is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            todo[:0] = [x for x in (getattr(t, a) for a in attrs) if isinstance(x, torch.Tensor)]
        else:
            out.append(t)
    return out


def make_mode(torch, rec):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            if name in RANDOM_INPLACE:
                return args[0]
            if name == "copy_" and args[0].device.type == "cuda" and args[1].device.type == "cpu":
                return args[0]    # a host-to-device copy into an existing storage allocates nothing
            if name == "randint":
                size = args[-1]
                out = torch.empty(size, dtype=kwargs.get("dtype") or torch.long,
                                  device=kwargs.get("device"))
            else:
                out = func(*args, **kwargs)
            if func.namespace == "prim":
                return out        # prim.device and the like: metadata queries, no kernel
            rec.n += 1
            rec.last_op = str(func)
            ev = {"e": "op", "i": rec.n, "op": str(func), "m": rec.module_path(), "ph": rec.ph,
                  "st": rec.st}
            node = torch._C._current_autograd_node()
            if node is not None:
                tag = node.metadata.get("vr") if hasattr(node, "metadata") else None
                if tag is not None:
                    ev["fw"] = tag
                else:
                    ev["fw"] = "|" + node.name()
                    var = getattr(node, "variable", None)
                    if var is not None:
                        ev["fw"] = rec.param_names.get(id(var), "") + "|" + node.name()
            outs, new = [], []
            flat, _ = tree_flatten(out)
            for t in plain_tensors(flat):
                outs.append([list(t.shape), dtype_name(t.dtype), t.untyped_storage().nbytes()
                             if t.device.type == "cuda" else 0])
                if t.device.type != "cuda":
                    continue
                sid, fresh = rec.track(t)
                if fresh:
                    new.append([sid, rec.nbytes[sid]])
            ev["out"] = outs
            if new:
                ev["new"] = new
            rec.events.append(ev)
            return out

    return Mode()


def load_config(spec):
    cfg = spec["config"]
    if isinstance(cfg, str):
        with open(os.path.join(REPO, cfg)) as f:
            cfg = json.load(f)
    return cfg


def is_unet(spec):
    return load_config(spec).get("_class_name") == "UNet2DConditionModel"


def is_flux(spec):
    return load_config(spec).get("_class_name") == "FluxTransformer2DModel"


def is_sd3(spec):
    return load_config(spec).get("_class_name") == "SD3Transformer2DModel"


def finish_diffusers(spec, model, prec):
    """What diffusers' training scripts do to a built UNet or transformer: gradient checkpointing
    if asked; under lora_bf16 the base frozen and add_adapter(LoraConfig(r, lora_alpha,
    init_lora_weights="gaussian", target_modules)); train mode."""
    if spec.get("checkpointing"):
        model.enable_gradient_checkpointing()
    if prec == "lora_bf16":
        from peft import LoraConfig
        model.requires_grad_(False)
        lc = spec.get("lora") or {"r": 4, "alpha": 4, "dropout": 0.0,
                                  "targets": ["to_k", "to_q", "to_v", "to_out.0"]}
        model.add_adapter(LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                                     init_lora_weights="gaussian", target_modules=lc["targets"]))
    model.train()
    return model, model.config


def build_sd3(torch, spec):
    """SD3Transformer2DModel as train_dreambooth_lora_sd3.py has it (and the harness's
    measure_diffusers.py build): from_config on the CPU in fp32, then .to(cuda, weight_dtype) (the
    buffers too: PatchEmbed's sin-cos position table becomes bf16 on the GPU; built on the GPU
    instead, PatchEmbed would compute that table there in float64, which the script never does),
    enable_gradient_checkpointing if asked, then add_adapter(LoraConfig(r, lora_alpha=r,
    init_lora_weights="gaussian", target_modules))."""
    import diffusers
    cfg = {k: v for k, v in load_config(spec).items() if not k.startswith("_")}
    prec = spec["precision"]
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16}.get(prec, torch.float32)
    with torch.device("cpu"):
        model = diffusers.SD3Transformer2DModel.from_config(cfg)
    model.to("cuda", dtype=dtype)
    return finish_diffusers(spec, model, prec)


def sd3_step(torch, model, lcfg, mb, res, autocast, fz=None):
    """The training loop's step of train_dreambooth_lora_sd3.py with the latents and prompt
    embeddings given (vrsim's text_encoders = vae = "cached"), as measure_diffusers.py's sd3
    branch runs it: returns a function making one step's loss. The latents, prompt embeddings
    (n, 77 + 77, joint_attention_dim) and pooled embeddings (n, pooled_projection_dim) are made
    once, in weight_dtype. Per step: noise, logit-normal u drawn on the CPU, the timesteps moved
    to the GPU, the sigmas (get_sigmas: the schedule's sigmas and timesteps moved to the GPU; the
    `(schedule_timesteps == t).nonzero().item()` indices, which fake tensors cannot compute, drawn
    on the CPU as in flux_step), noisy = sigma * noise + (1 - sigma) * x, the transformer under
    autocast, the preconditioned output pred * (-sigma) + noisy against target = latents, the
    fp32 weighted mean-squared loss."""
    pdt = next(model.parameters()).dtype
    lat = res // 8
    # (the scheduler's sigmas and timesteps: 1000 each on the CPU, as made at its __init__)
    sigmas_cpu, timesteps_cpu = torch.empty(1000), torch.empty(1000)
    fz = fz or {}
    latents = prompt_embeds = pooled = None
    if "vae" in fz:
        # the image batch as the prepared dataloader gives it (fp32, on the GPU)
        pixels = torch.randn(mb, 3, res, res, device="cuda")
    else:
        latents = torch.randn(mb, lcfg.in_channels, lat, lat, device="cuda", dtype=pdt)
    if "text_encoder" in fz:
        # the tokenizers' ids, on the CPU (moved to the GPU by encode_prompt every step)
        ids_cpu = [torch.randint(0, 49408, (mb, 77)) for _ in range(2)] + [torch.randint(0, 32128, (mb, 77))]
    else:
        prompt_embeds = torch.randn(mb, 77 + 77, lcfg.joint_attention_dim, device="cuda", dtype=pdt)
        pooled = torch.randn(mb, lcfg.pooled_projection_dim, device="cuda", dtype=pdt)

    def encode_prompt():
        # encode_prompt (the script's): each CLIP with output_hidden_states, its text_embeds and
        # hidden_states[-2] .to(dtype) (a no-op), .repeat(1, 1, 1) (a copy), .view; the lists
        # concatenated; T5's last hidden state likewise; F.pad of the CLIP embeddings to T5's
        # width, the concatenation along the tokens
        clip_list, pooled_list = [], []
        for i, prefix in enumerate(("text_encoder", "text_encoder_2")):
            out = fz[prefix](ids_cpu[i].to("cuda"), output_hidden_states=True)
            pooled_i = out[0]
            pe = out.hidden_states[-2]
            del out
            pe = pe.to(dtype=pdt, device="cuda")
            pe = pe.repeat(1, 1, 1).view(mb, 77, -1)
            clip_list.append(pe)
            pooled_list.append(pooled_i)
            del pe, pooled_i
        clip_pe = torch.cat(clip_list, dim=-1)
        pooled_pe = torch.cat(pooled_list, dim=-1)
        t5 = fz["text_encoder_3"](ids_cpu[2].to("cuda"))[0]
        t5 = t5.to(dtype=pdt, device="cuda")
        t5 = t5.repeat(1, 1, 1).view(mb, 77, -1)
        clip_pe = torch.nn.functional.pad(clip_pe, (0, t5.shape[-1] - clip_pe.shape[-1]))
        return torch.cat([clip_pe, t5], dim=-2), pooled_pe

    def get_sigmas(indices, n_dim):
        # (a function of its own, as the script's: the schedule's copies on the GPU die with it)
        sigmas_all = sigmas_cpu.to(device="cuda", dtype=pdt)
        schedule_timesteps = timesteps_cpu.to("cuda")
        del schedule_timesteps
        sigma = sigmas_all[indices.to("cuda")].flatten()
        while sigma.ndim < n_dim:
            sigma = sigma.unsqueeze(-1)
        return sigma

    def step():
        nonlocal latents, prompt_embeds, pooled
        if "text_encoder" in fz:
            # compute_text_embeddings (custom prompts per image), under no_grad
            with torch.no_grad():
                prompt_embeds, pooled = encode_prompt()
        if "vae" in fz:
            # pixel_values.to(vae.dtype) (fp32: no copy); vae.encode(...).latent_dist.sample();
            # (x - shift_factor) * scaling_factor; .to(weight_dtype)
            vae = fz["vae"]
            pv = pixels.to(dtype=vae.dtype)
            latents = vae.encode(pv).latent_dist.sample()
            del pv
            latents = (latents - vae.config.shift_factor) * vae.config.scaling_factor
            latents = latents.to(dtype=pdt)
        noise = torch.randn_like(latents)
        u = torch.nn.functional.sigmoid(torch.normal(mean=0.0, std=1.0, size=(mb,), device="cpu"))
        indices = (u * 1000).long()
        timesteps = timesteps_cpu[indices].to(device="cuda")
        sigma = get_sigmas(indices, latents.ndim)
        noisy = (1.0 - sigma) * latents + sigma * noise
        with (torch.autocast("cuda", dtype=autocast) if autocast is not None else contextlib.nullcontext()):
            pred = model(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=prompt_embeds,
                         pooled_projections=pooled, return_dict=False)[0]
        pred = pred * (-sigma) + noisy
        weighting = torch.ones_like(sigma)
        target = latents
        loss = torch.mean((weighting.float() * (pred.float() - target.float()) ** 2).reshape(mb, -1), 1)
        return loss.mean()
    return step


def build_flux(torch, spec):
    """FluxTransformer2DModel from its config on (fake) CUDA, as train_dreambooth_lora_flux.py
    has it: built in weight_dtype (bf16 for lora_bf16), enable_gradient_checkpointing, then
    add_adapter(LoraConfig(r, lora_alpha=r, init_lora_weights="gaussian", target_modules))."""
    import diffusers
    cfg = {k: v for k, v in load_config(spec).items() if not k.startswith("_")}
    prec = spec["precision"]
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16}.get(prec)
    if dtype is not None:
        torch.set_default_dtype(dtype)
    with torch.device("cuda"):
        model = diffusers.FluxTransformer2DModel.from_config(cfg)
    torch.set_default_dtype(torch.float32)
    return finish_diffusers(spec, model, prec)


def flux_step(torch, model, lcfg, mb, res, autocast, fz=None):
    """The training loop's step of train_dreambooth_lora_flux.py with --cache_latents and the
    prompt embeddings precomputed (vrsim's text_encoders = vae = "cached"): returns a function
    making one step's loss. The latents, prompt embeddings, pooled embeddings and text ids are
    made once, in weight_dtype. Per step: latent_image_ids, noise, the sigmas of the timesteps,
    the noisy latents, their 2x2 packing, guidance, the transformer under autocast, the
    unpacking, target = noise - latents, the fp32 weighted mean-squared loss. (get_sigmas'
    `(schedule_timesteps == t).nonzero().item()` cannot run on fake tensors: the timesteps'
    indices are drawn on the CPU and index the sigmas on the GPU.)"""
    from diffusers import FluxPipeline
    pdt = next(model.parameters()).dtype
    lat = res // 8
    # (the scheduler's sigmas and timesteps: 1000 each on the CPU, as made at its __init__, whose
    # .item() calls fake tensors cannot run; their values do not matter here)
    sigmas_cpu, timesteps_cpu = torch.empty(1000), torch.empty(1000)
    fz = fz or {}
    latents = prompt_embeds = pooled = text_ids = None
    seq = 512 if lcfg.joint_attention_dim == 4096 else 64
    if "vae" in fz:
        # the image batch as the prepared dataloader gives it (fp32, on the GPU)
        pixels = torch.randn(mb, 3, res, res, device="cuda")
    else:
        latents = torch.randn(mb, 16, lat, lat, device="cuda", dtype=pdt)
    if "text_encoder" in fz:
        # the tokenizers' ids, on the CPU (moved to the GPU by encode_prompt every step)
        ids_cpu = [torch.randint(0, 49408, (mb, 77)), torch.randint(0, 32128, (mb, seq))]
    else:
        prompt_embeds = torch.randn(mb, seq, lcfg.joint_attention_dim, device="cuda", dtype=pdt)
        pooled = torch.randn(mb, lcfg.pooled_projection_dim, device="cuda", dtype=pdt)
        text_ids = torch.zeros(seq, 3, device="cuda", dtype=pdt)

    def step():
        nonlocal latents, prompt_embeds, pooled, text_ids
        if "text_encoder" in fz:
            # compute_text_embeddings (custom prompts per image): encode_prompt under no_grad,
            # CLIP's pooler_output, then T5's last hidden state, each .to(dtype) (no-op),
            # .repeat(1, 1, 1) (a copy) and .view; text_ids = zeros(seq, 3).to(device, dtype)
            with torch.no_grad():
                te1, te2 = fz["text_encoder"], fz["text_encoder_2"]
                pooled = te1(ids_cpu[0].to("cuda"), output_hidden_states=False).pooler_output
                pooled = pooled.to(dtype=pdt, device="cuda").repeat(1, 1, 1).view(mb, -1)
                prompt_embeds = te2(ids_cpu[1].to("cuda"))[0]
                prompt_embeds = prompt_embeds.to(dtype=pdt, device="cuda").repeat(1, 1, 1).view(mb, seq, -1)
                text_ids = torch.zeros(seq, 3).to(device="cuda", dtype=pdt)
        if "vae" in fz:
            # pixel_values.to(vae.dtype); vae.encode(...).latent_dist.sample(); (x - shift_factor)
            # * scaling_factor; .to(weight_dtype) (no graph: the VAE is frozen, no grad needed)
            vae = fz["vae"]
            pv = pixels.to(dtype=vae.dtype)
            latents = vae.encode(pv).latent_dist.sample()
            del pv
            latents = (latents - vae.config.shift_factor) * vae.config.scaling_factor
            latents = latents.to(dtype=pdt)
        img_ids = FluxPipeline._prepare_latent_image_ids(mb, lat // 2, lat // 2, "cuda", pdt)
        noise = torch.randn_like(latents)
        indices = (torch.rand(mb) * 1000).long()
        timesteps = timesteps_cpu[indices].to(device="cuda")
        sigmas_all = sigmas_cpu.to(device="cuda", dtype=pdt)
        schedule_timesteps = timesteps_cpu.to("cuda")
        sigma = sigmas_all[indices.to("cuda")].flatten()
        del schedule_timesteps
        while sigma.ndim < 4:
            sigma = sigma.unsqueeze(-1)
        noisy = (1.0 - sigma) * latents + sigma * noise
        packed = FluxPipeline._pack_latents(noisy, mb, 16, lat, lat)
        guidance = None
        if lcfg.guidance_embeds:
            guidance = torch.tensor([3.5], device="cuda").expand(mb)
        with (torch.autocast("cuda", dtype=autocast) if autocast is not None else contextlib.nullcontext()):
            pred = model(hidden_states=packed, timestep=timesteps / 1000, guidance=guidance,
                         pooled_projections=pooled, encoder_hidden_states=prompt_embeds,
                         txt_ids=text_ids, img_ids=img_ids, return_dict=False)[0]
        pred = FluxPipeline._unpack_latents(pred, height=lat * 8, width=lat * 8, vae_scale_factor=8)
        weighting = torch.ones_like(sigma)
        target = noise - latents
        loss = torch.mean((weighting.float() * (pred.float() - target.float()) ** 2).reshape(mb, -1), 1)
        return loss.mean()
    return step


def build_unet(torch, spec):
    """UNet2DConditionModel from its config on (fake) CUDA: from_pretrained's build, the
    parameters made in their dtype (fp32 under amp; bf16 for bf16 and LoRA)."""
    import diffusers
    cfg = {k: v for k, v in load_config(spec).items() if not k.startswith("_")}
    prec = spec["precision"]
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16}.get(prec)
    if dtype is not None:
        torch.set_default_dtype(dtype)
    with torch.device("cuda"):
        model = diffusers.UNet2DConditionModel.from_config(cfg)
    torch.set_default_dtype(torch.float32)
    return finish_diffusers(spec, model, prec)


# SDXL base's text encoders (transformers' CLIPTextConfig of stabilityai/stable-diffusion-xl-base-1.0
# text_encoder/ and text_encoder_2/config.json) and its VAE (vae/config.json), the full
# configurations vrsim's models/blocks/clip.lua and vae.lua build
SDXL_TEXT_ENCODERS = [
    ("text_encoder", "CLIPTextModel",
     {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
      "max_position_embeddings": 77, "vocab_size": 49408, "hidden_act": "quick_gelu",
      "projection_dim": 768, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}),
    ("text_encoder_2", "CLIPTextModelWithProjection",
     {"hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 20, "num_hidden_layers": 32,
      "max_position_embeddings": 77, "vocab_size": 49408, "hidden_act": "gelu",
      "projection_dim": 1280, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}),
]
SDXL_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "layers_per_block": 2,
            "block_out_channels": [128, 256, 512, 512], "norm_num_groups": 32, "act_fn": "silu",
            "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
            "sample_size": 1024, "scaling_factor": 0.13025, "force_upcast": True}


def build_sdxl_frozen(torch, spec):
    """SDXL's frozen text encoders and VAE on (fake) CUDA, as diffusers'
    examples/text_to_image/train_text_to_image_lora_sdxl.py places them: requires_grad_(False),
    the encoders moved to the GPU in weight_dtype (one allocation a parameter, in that dtype),
    the VAE in fp32 (spec vae "fp32": the script's default, SDXL's VAE overflows in fp16). Built
    before the UNet, as vrsim's models/blocks/unet_step.lua builds them. Returns [(prefix,
    module)]: text_encoder, text_encoder_2 (spec text_encoders "frozen"), vae."""
    import diffusers
    import transformers
    out = []
    wdt = {"lora_bf16": torch.bfloat16, "bf16": torch.bfloat16, "amp_bf16": torch.bfloat16,
           "amp_fp16": torch.float16}.get(spec["precision"], torch.float32)
    if spec.get("text_encoders") == "frozen":
        torch.set_default_dtype(wdt)
        for prefix, cls, cfg in SDXL_TEXT_ENCODERS:
            c = transformers.CLIPTextConfig(attn_implementation="sdpa", **cfg)
            with torch.device("cuda"):
                m = getattr(transformers, cls)(c)
            out.append((prefix, m.requires_grad_(False).eval()))
        torch.set_default_dtype(torch.float32)
    if spec.get("vae") == "fp32":
        with torch.device("cuda"):
            v = diffusers.AutoencoderKL.from_config(SDXL_VAE)
        out.append(("vae", v.requires_grad_(False).eval()))
    return out


# Flux.1's text encoders (transformers' CLIPTextConfig of black-forest-labs/FLUX.1-dev
# text_encoder/config.json, openai/clip-vit-large-patch14's text model, and T5Config of
# text_encoder_2/config.json, google/t5-v1_1-xxl's encoder) and its 16-channel VAE
# (vae/config.json): the full configurations vrsim's models/blocks/clip.lua, t5.lua and vae.lua
# (config16) build
FLUX_CLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
             "num_hidden_layers": 12, "max_position_embeddings": 77, "vocab_size": 49408,
             "hidden_act": "quick_gelu", "projection_dim": 768, "bos_token_id": 0, "eos_token_id": 2,
             "pad_token_id": 1}
FLUX_T5 = {"d_model": 4096, "d_kv": 64, "d_ff": 10240, "num_layers": 24, "num_heads": 64,
           "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
           "dropout_rate": 0.1, "layer_norm_epsilon": 1e-06, "feed_forward_proj": "gated-gelu",
           "vocab_size": 32128, "is_encoder_decoder": True, "tie_word_embeddings": False}
FLUX_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 16, "layers_per_block": 2,
            "block_out_channels": [128, 256, 512, 512], "norm_num_groups": 32, "act_fn": "silu",
            "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
            "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159,
            "use_quant_conv": False, "use_post_quant_conv": False, "force_upcast": True,
            "mid_block_add_attention": True}


def build_flux_frozen(torch, spec):
    """Flux.1's frozen text encoders and VAE on (fake) CUDA, as diffusers'
    examples/dreambooth/train_dreambooth_lora_flux.py places them: requires_grad_(False), moved
    to the GPU in weight_dtype (one allocation a parameter, in that dtype; spec vae "weight").
    Built before the transformer, as vrsim's models/blocks/unet_step.lua builds them. Returns
    [(prefix, module)]: text_encoder (CLIPTextModel), text_encoder_2 (T5EncoderModel), vae."""
    import diffusers
    import transformers
    out = []
    wdt = {"lora_bf16": torch.bfloat16, "bf16": torch.bfloat16}.get(spec["precision"], torch.float32)
    torch.set_default_dtype(wdt)
    if spec.get("text_encoders") == "frozen":
        encs = [("text_encoder", transformers.CLIPTextModel,
                 transformers.CLIPTextConfig(attn_implementation="sdpa", **FLUX_CLIP)),
                ("text_encoder_2", transformers.T5EncoderModel, transformers.T5Config(**FLUX_T5))]
        for prefix, cls, c in encs:
            with torch.device("cuda"):
                m = cls(c)
            out.append((prefix, m.requires_grad_(False).eval()))
    if spec.get("vae") == "weight":
        with torch.device("cuda"):
            v = diffusers.AutoencoderKL.from_config(FLUX_VAE)
        out.append(("vae", v.requires_grad_(False).eval()))
    torch.set_default_dtype(torch.float32)
    return out


# SD3 / SD3.5's text encoders (CLIPTextModelWithProjection ViT-L/14 and ViT-bigG/14, as SDXL's
# with projections, and T5 v1.1 XXL's encoder, Flux.1's) and its 16-channel VAE
# (stabilityai/stable-diffusion-3.5-medium vae/config.json)
SD3_TEXT_ENCODERS = [
    ("text_encoder", dict(SDXL_TEXT_ENCODERS[0][2], projection_dim=768)),
    ("text_encoder_2", SDXL_TEXT_ENCODERS[1][2]),
]
SD3_VAE = dict(FLUX_VAE, scaling_factor=1.5305, shift_factor=0.0609)


def build_sd3_frozen(torch, spec):
    """SD3's frozen text encoders and VAE on (fake) CUDA, as diffusers'
    examples/dreambooth/train_dreambooth_lora_sd3.py places them: requires_grad_(False), the
    encoders moved to the GPU in weight_dtype, the VAE in fp32 (spec vae "fp32": the script's
    `vae.to(accelerator.device, dtype=torch.float32)`). Built before the transformer, as vrsim's
    models/blocks/unet_step.lua builds them. Returns [(prefix, module)]: text_encoder,
    text_encoder_2 (CLIPTextModelWithProjection), text_encoder_3 (T5EncoderModel), vae."""
    import diffusers
    import transformers
    out = []
    wdt = {"lora_bf16": torch.bfloat16, "bf16": torch.bfloat16}.get(spec["precision"], torch.float32)
    if spec.get("text_encoders") == "frozen":
        torch.set_default_dtype(wdt)
        for prefix, cfg in SD3_TEXT_ENCODERS:
            c = transformers.CLIPTextConfig(attn_implementation="sdpa", **cfg)
            with torch.device("cuda"):
                m = transformers.CLIPTextModelWithProjection(c)
            out.append((prefix, m.requires_grad_(False).eval()))
        with torch.device("cuda"):
            m = transformers.T5EncoderModel(transformers.T5Config(**FLUX_T5))
        out.append(("text_encoder_3", m.requires_grad_(False).eval()))
        torch.set_default_dtype(torch.float32)
    if spec.get("vae") == "fp32":
        with torch.device("cuda"):
            v = diffusers.AutoencoderKL.from_config(SD3_VAE)
        out.append(("vae", v.requires_grad_(False).eval()))
    return out


def torchtitan_op_sac_context(torch):
    """torchtitan's SelectiveAC policy (torchtitan/distributed/activation_checkpoint.py,
    _get_default_save_ops and _wrap_block's wrapped_policy; no force-recomputed mm shapes, as no
    module of a transformers model matches its default "moe.router.gate"): a context_fn for
    torch.utils.checkpoint that makes a fresh policy per call."""
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    ops = torch.ops
    save_ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    save_ops.update({ops.aten._scaled_dot_product_cudnn_attention.default,
                     ops.aten._scaled_dot_product_attention_math.default,
                     ops.aten._scaled_dot_product_fused_attention_overrideable.default,
                     ops.aten.max.default, ops.aten.linear.default, ops.aten.topk.default,
                     ops._c10d_functional.reduce_scatter_tensor.default,
                     ops._c10d_functional.all_to_all_single.default})
    mm_ops = (ops.aten.mm.default, ops.aten.linear.default)

    def policy():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def wrapped_policy(ctx, func, *args, **kwargs):
            key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
            if func in mm_ops:
                meta[key] += 1
            if func in save_ops:
                if func in mm_ops and meta[key] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE
        return wrapped_policy

    return lambda: create_selective_checkpoint_contexts(policy())


def build_model(torch, transformers, spec, rec):
    hf = dict(load_config(spec))
    arch = hf.pop("architectures", ["LlamaForCausalLM"])[0]
    for k in ("transformers_version", "torch_dtype", "dtype"):
        hf.pop(k, None)
    if spec.get("layers"):
        hf["num_hidden_layers"] = int(spec["layers"])
    attn = spec.get("attention", "sdpa")
    cls = getattr(transformers, arch)
    lcfg = cls.config_class(attn_implementation=attn, **hf)
    prec = spec["precision"]
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
    if spec.get("build", "cast") == "direct" and dtype is not None:
        torch.set_default_dtype(dtype)
    with torch.device("cuda"):
        model = cls(lcfg)
    torch.set_default_dtype(torch.float32)
    if dtype is not None:
        model.to(dtype)
    if spec.get("checkpointing"):
        kwargs = {"use_reentrant": False}
        if spec.get("checkpoint_scope", "layer") == "op":
            kwargs.update(context_fn=torchtitan_op_sac_context(torch), early_stop=False)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        # every k-th decoder layer only (0, k, 2k, ...): the others run as plain modules
        # (GradientCheckpointingLayer.__call__ checks its own gradient_checkpointing flag)
        every = int(spec.get("checkpoint_every", 1))
        for i, layer in enumerate(model.model.layers):
            if i % every:
                layer.gradient_checkpointing = False
    if spec.get("float8"):
        # torchao's convert_to_float8_training with torchtitan's module_filter_fn: not the output
        # layer, only Linears whose dims are divisible by 16
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        f8 = spec["float8"]
        cfg8 = Float8LinearConfig.from_recipe_name(f8.get("recipe", "tensorwise"))
        convert_to_float8_training(model, config=cfg8, module_filter_fn=lambda m, fqn: (
            fqn != "lm_head" and m.in_features % 16 == 0 and m.out_features % 16 == 0))
    if prec == "lora_bf16":
        from peft import LoraConfig, get_peft_model
        if spec.get("checkpointing"):
            model.enable_input_require_grads()
        lc = spec.get("lora") or {"r": 8, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}
        # target_parameters: nn.Parameters (a MoE block's 3-D experts) through lora.ParamWrapper
        extra = {"target_parameters": lc["target_parameters"]} if "target_parameters" in lc else {}
        model = get_peft_model(model, LoraConfig(r=lc["r"], lora_alpha=lc["alpha"],
                                                 lora_dropout=lc["dropout"],
                                                 target_modules=lc["targets"], task_type="CAUSAL_LM",
                                                 **extra))
    model.train()
    return model, lcfg


def torchtune_decoder(torch, hf, num_layers):
    """torchtune 0.6.1's TransformerDecoder of a Llama or Qwen2 config.json `hf` (its builders'
    arguments from the fields of the same meaning; max_seq_len, which sizes the RoPE cache, from
    max_position_embeddings as the family's builders set it): qwen2() with the config's tying (the
    qwen2_5 builders), llama3_1() where the config scales its rotary frequencies
    (Llama3ScaledRoPE, the same cache), else llama3(). Built on the (fake or real) GPU under the
    caller's default dtype, its output in 8 chunks for CEWithChunkedOutputLoss
    (set_num_output_chunks). validation/harness/tech_model.py builds the GPU runs' model with it."""
    sizes = dict(vocab_size=hf["vocab_size"], num_layers=int(num_layers),
                 num_heads=hf["num_attention_heads"],
                 num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
                 embed_dim=hf["hidden_size"], max_seq_len=hf["max_position_embeddings"],
                 intermediate_dim=hf["intermediate_size"], norm_eps=hf["rms_norm_eps"])
    if hf["model_type"] == "qwen2":
        from torchtune.models.qwen2._component_builders import qwen2
        with torch.device("cuda"):
            model = qwen2(rope_base=float(hf.get("rope_theta", 1000000.0)),
                          tie_word_embeddings=bool(hf.get("tie_word_embeddings")), **sizes)
    else:
        if hf.get("rope_scaling"):
            from torchtune.models.llama3_1._component_builders import llama3_1 as build
            scaling = {"scale_factor": hf["rope_scaling"]["factor"]}
        else:
            from torchtune.models.llama3._component_builders import llama3 as build
            scaling = {}
        with torch.device("cuda"):
            model = build(rope_base=int(hf.get("rope_theta", 10000)), **scaling, **sizes)
    model.set_num_output_chunks(NUM_OUTPUT_CHUNKS)
    return model


def build_torchtune(torch, spec):
    """torchtune's decoder of the spec's config (torchtune_decoder), as full_finetune_single_device
    builds it: `with training.set_default_dtype(bf16), device: config.instantiate(cfg.model)`;
    with "torchtune": "0.4.0", that release's RMSNorm.forward in place of the installed one."""
    if spec.get("torchtune", "0.6.1") == "0.4.0":
        from torchtune.modules import rms_norm

        def forward_0_4(self, x):
            # torchtune v0.4.0's RMSNorm.forward, as released
            x_fp32 = x.float()
            x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)
            return x_normed * self.scale
        rms_norm.RMSNorm.forward = forward_0_4
    hf = load_config(spec)
    torch.set_default_dtype(torch.bfloat16)
    model = torchtune_decoder(torch, hf, spec.get("layers") or hf["num_hidden_layers"])
    torch.set_default_dtype(torch.float32)
    model.train()
    return model, type("Cfg", (), {"vocab_size": hf["vocab_size"]})


def wrap_parallel(torch, spec, model, mesh):
    """The data-parallel strategy as validation/harness/measure_multi.py wraps the built model
    (the loop of the multi-GPU records): fsdp2 fully_shard on every decoder layer, then on the
    root, reshard_after_forward = zero.raf, and under mp_fp32 MixedPrecisionPolicy(bf16
    parameters, fp32 reduction) over the fp32 model."""
    strategy = spec.get("strategy", "none")
    if strategy == "none":
        return model
    zero = spec.get("zero") or {}
    if strategy == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        kw = {"mesh": mesh, "reshard_after_forward": bool(zero.get("raf", True))}
        if spec["precision"] == "mp_fp32":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        # zero.units: a fully_shard of their own before the root's (torchtune's
        # custom_sharded_layers, vrsim's training.zero.units)
        for path in zero.get("units") or []:
            fully_shard(model.get_submodule(path), **kw)
        fully_shard(model, **kw)
        return model
    if strategy in ("ddp", "zero1"):
        # (DistributedDataParallel's defaults: 25 MiB buckets, the first 1 MiB; the module's
        # states broadcast from rank 0 at construction)
        import torch.nn.parallel.distributed as ddp
        # the shape check across ranks reads the parameters' data in C++ (a fake tensor has
        # none): its few-KB metadata tensors are not recorded
        ddp._verify_param_shape_across_processes = lambda *a, **k: None
        wrapped = ddp.DistributedDataParallel(model, device_ids=[0])
        # the reducer's all-reduce is in place on the bucket: its future's value is the bucket
        # itself (ProcessGroupNCCL), where the fake group's future holds none (the reducer then
        # stops, comm.cpp's "hook result is either a Tensor"); this hook gives that value
        def allreduce_in_place(_state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        wrapped.register_comm_hook(None, allreduce_in_place)

        class Logger:
            """DDP's C++ logger, less its runtime statistics: they time each iteration with the
            device's timer, which the CPU wheel does not register for CUDA (an internal assert
            in logger.cpp); they allocate nothing on the device."""

            def __init__(self, inner):
                self._inner = inner

            def set_runtime_stats_and_log(self):
                pass

            def __getattr__(self, name):
                return getattr(self._inner, name)

        wrapped.logger = Logger(wrapped.logger)
        return wrapped
    raise SystemExit(f"capture: strategy {strategy!r} has no wrapping here")


def local_tensor(p):
    """A parameter's rank-local tensor (a DTensor's shard under FSDP2)."""
    return p.to_local() if hasattr(p, "to_local") else p


def make_optimizer(torch, spec, params):
    impl = spec.get("optimizer_impl", "foreach")
    kw = {"foreach": {"foreach": True}, "fused": {"fused": True}, "forloop": {"foreach": False}}[impl]
    sgd = spec.get("optimizer", "adamw") == "sgd"
    cls, kw = (torch.optim.SGD, dict(kw, lr=1e-3, momentum=0.9)) if sgd else (torch.optim.AdamW, dict(kw, lr=1e-5))
    if spec.get("strategy") == "zero1":
        # ZeRO-1 as torch.distributed expresses it (measure_multi.py's zero1): DDP, and
        # ZeroRedundancyOptimizer over every parameter, the local optimizer stepping this rank's
        # partition (parameters_as_bucket_view False, the default)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


def install_module_hooks(torch, model, rec):
    for n, m in model.named_modules():
        rec.mod_names[id(m)] = n
    for n, p in model.named_parameters():
        rec.param_names[id(p)] = n

    def pre(mod, _inp):
        rec.mod_stack.append(rec.mod_names.get(id(mod), type(mod).__name__))

    def post(mod, _inp, _out):
        if rec.mod_stack:
            rec.mod_stack.pop()

    a = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    b = torch.nn.modules.module.register_module_forward_hook(post, always_call=True)
    return a, b


def run_steps(torch, rec, spec, opt, pack, loss_fn, backward=None, scaler=None):
    """The training loop of the records (validation/harness/measure_llama.py), shared by every
    capture (capture_tp.py's too): per step, per micro-batch (grad_accum) the forward under
    saved_tensors_hooks(pack) (loss_fn() gives the loss; divided by the accumulation), the
    GradScaler's scale where there is one, backward (backward(loss), default loss.backward()),
    then the optimizer step (through the scaler), zero_grad(set_to_none=True). Records the phase
    boundaries and returns each step's live-bytes row."""
    accum = int(spec.get("grad_accum", 1))
    steps = []
    for step in range(int(spec.get("steps", 2))):
        rec.peak = rec.live
        row = {"e": "step", "st": step, "live_start": rec.live}
        for micro in range(accum):
            rec.phase("fwd", step, micro)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn()
                if accum != 1:
                    loss = loss / accum
            if scaler is not None:
                loss = scaler.scale(loss)   # (forward's, as vrsim counts it)
            row.setdefault("after_fwd", rec.live)
            rec.phase("bwd", step, micro)
            if backward is None:
                loss.backward()
            else:
                backward(loss)
            row.setdefault("after_bwd", rec.live)
        rec.phase("optim", step)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        row["after_opt"] = rec.live
        rec.phase("zero_grad", step)
        opt.zero_grad(set_to_none=True)
        del loss
        row["live_end"] = rec.live
        row["peak"] = rec.peak
        rec.phase("end", step)
        steps.append(row)
    return steps


def write_json(out, doc):
    """doc as JSON (indent 1, a newline at the end), written whole or not at all."""
    with open(out + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    os.replace(out + ".tmp", out)


def write_capture(out, lines):
    """The capture as gzipped JSONL, written whole or not at all (no name and no time in the gzip
    header: the same capture is the same bytes)."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb",
                                               compresslevel=9, mtime=0) as f:
        for ln in lines:
            f.write((json.dumps(ln, separators=(",", ":")) + "\n").encode())
    os.replace(tmp, out)


def capture(spec):
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    enable_fake_cuda(torch)
    backend = spec.get("sdpa_backend", "cudnn")
    if backend not in SDPA_BACKENDS:
        raise SystemExit(f"capture: sdpa_backend {backend!r} is not one of {SDPA_BACKENDS}")
    install_sdpa_backend(torch, backend)
    install_fused_rms_norm(torch)
    data = spec.get("data")
    install_data_answers(torch, packed=bool(data) and data["batching"] in ("padding_free", "multipack"))
    if data and data["batching"] == "multipack" and spec.get("attention", "sdpa") == "sdpa":
        bins, row = multipack_rows(data)
        install_axolotl_sdpa_varlen(torch, sum(len(b) + (sum(b) < row) for b in bins))
    try:
        import peft
        peft_version = peft.__version__
    except ImportError:
        peft_version = None
    rec = Recorder()
    rec.install_resize(torch)
    world = int(spec.get("world", 1))
    mesh = None
    if spec.get("strategy", "none") != "none":
        sys.path.insert(0, HERE)
        import fake_dist
        mesh = fake_dist.setup(torch, world)
    fake = FakeTensorMode()
    torch.manual_seed(0)

    def pack(saved):
        for t in plain_tensors([saved]):
            rec.save(t)
        return saved

    unet = is_unet(spec)
    flux = is_flux(spec)
    sd3 = is_sd3(spec)
    if flux or sd3:
        import diffusers
        cls = diffusers.FluxTransformer2DModel if flux else diffusers.SD3Transformer2DModel
        with torch.device("meta"):
            cls.from_config({k: v for k, v in load_config(spec).items() if not k.startswith("_")})
    if unet:
        # (one build on the meta device first, outside the fake CUDA device: what it imports
        # lazily makes module-level constant tensors, which under torch.device("cuda") would be
        # allocations of the build)
        import diffusers
        with torch.device("meta"):
            diffusers.UNet2DConditionModel.from_config(
                {k: v for k, v in load_config(spec).items() if not k.startswith("_")})
    with fake, make_mode(torch, rec), make_tagger(torch, rec):
        rec.phase("build")
        frozen = (build_sdxl_frozen(torch, spec) if unet else build_flux_frozen(torch, spec) if flux
                  else build_sd3_frozen(torch, spec) if sd3 else [])
        if unet:
            model, lcfg = build_unet(torch, spec)
        elif flux:
            model, lcfg = build_flux(torch, spec)
        elif sd3:
            model, lcfg = build_sd3(torch, spec)
        elif spec.get("code") == "torchtune":
            model, lcfg = build_torchtune(torch, spec)
        else:
            model, lcfg = build_model(torch, transformers, spec, rec)
        model = wrap_parallel(torch, spec, model, mesh)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(torch, spec, params)
        hooks = install_module_hooks(torch, model, rec)
        for prefix, m in frozen:
            for n, sub in m.named_modules():
                rec.mod_names[id(sub)] = prefix + ("." + n if n else "")
        # (rank 0's part: a sharded parameter's local shard)
        param_rows = [{"name": n, "shape": list(local_tensor(p).shape), "dtype": dtype_name(p.dtype),
                       "bytes": local_tensor(p).untyped_storage().nbytes(),
                       "trainable": p.requires_grad}
                      for n, p in model.named_parameters()]
        param_rows += [{"name": prefix + "." + n, "shape": list(p.shape), "dtype": dtype_name(p.dtype),
                        "bytes": p.untyped_storage().nbytes(), "trainable": False}
                       for prefix, m in frozen for n, p in m.named_parameters()]
        if data:
            lens = [int(x) for x in data["lengths"]]
            if data["batching"] == "multipack":
                mb, seq = int(data["micro_batch"]), multipack_rows(data)[1]
            else:
                mb, seq = (len(lens), max(lens)) if data["batching"] == "pad" else (1, sum(lens))
        else:
            mb = int(spec["micro_batch"])
            seq = int(spec["seq"]) if not (unet or flux or sd3) else None
        prec = spec["precision"]
        autocast = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(prec)
        if (flux or sd3) and prec == "lora_bf16":
            # Accelerate's autocast around the prepared transformer, its weights bf16 already
            autocast = torch.bfloat16
        scaler = torch.amp.GradScaler("cuda") if prec == "amp_fp16" else None
        rec.phase("inputs")
        if flux:
            dit_loss = flux_step(torch, model, lcfg, mb, int(spec["resolution"]), autocast, dict(frozen))
        if sd3:
            dit_loss = sd3_step(torch, model, lcfg, mb, int(spec["resolution"]), autocast, dict(frozen))
        if unet:
            import diffusers
            lat = int(spec["resolution"]) // 8
            sched = diffusers.DDPMScheduler(num_train_timesteps=1000)
            # the cached latents and text embeddings, in the UNet's parameter dtype
            pdt = next(model.parameters()).dtype
            fz = dict(frozen)
            if "vae" in fz:
                # the image batch, in the VAE's dtype (the script's pixel_values)
                pixels = torch.randn(mb, 3, lat * 8, lat * 8, device="cuda")
            else:
                latents = torch.randn(mb, lcfg.in_channels, lat, lat, device="cuda", dtype=pdt)
            if "text_encoder" in fz:
                ids = [torch.randint(0, 49408, (mb, 77), device="cuda") for _ in range(2)]
            else:
                ehs = torch.randn(mb, 77, lcfg.cross_attention_dim, device="cuda", dtype=pdt)
            # SDXL's added conditioning (addition_embed_type text_time): the pooled text
            # embedding of the second encoder and the six time ids, given with the latents
            added = None
            if lcfg.addition_embed_type == "text_time" and "text_encoder" in fz:
                added = {"time_ids": torch.randn(mb, 6, device="cuda", dtype=pdt)}
            elif lcfg.addition_embed_type == "text_time":
                pooled = lcfg.projection_class_embeddings_input_dim - 6 * lcfg.addition_time_embed_dim
                added = {"text_embeds": torch.randn(mb, pooled, device="cuda", dtype=pdt),
                         "time_ids": torch.randn(mb, 6, device="cuda", dtype=pdt)}
            timesteps = torch.randint(0, 1000, (mb,), device="cuda")

            def unet_loss():
                nonlocal ehs, latents
                if "vae" in fz:
                    # train_text_to_image_lora_sdxl.py: vae.encode(pixel_values).latent_dist
                    # .sample() * scaling_factor, then .to(weight_dtype) (the frozen VAE: no
                    # graph; no_grad as vrsim counts it)
                    with torch.no_grad():
                        latents = fz["vae"].encode(pixels).latent_dist.sample()
                        latents = (latents * fz["vae"].config.scaling_factor).to(pdt)
                if "text_encoder" in fz:
                    # encode_prompt (the same script): each encoder with output_hidden_states,
                    # the penultimate layer's hidden states of both concatenated, the second's
                    # pooled (projected) output; outside autocast, as the script calls it
                    embeds = []
                    with torch.no_grad():
                        for i, prefix in enumerate(("text_encoder", "text_encoder_2")):
                            out = fz[prefix](ids[i], output_hidden_states=True, return_dict=False)
                            pooled = out[0]
                            embeds.append(out[-1][-2].view(mb, 77, -1))
                            del out
                        ehs = torch.concat(embeds, dim=-1)
                        del embeds
                    added["text_embeds"] = pooled.view(mb, -1)
                    del pooled
                noise = torch.randn_like(latents)
                noisy = sched.add_noise(latents, noise, timesteps)
                if autocast is not None:
                    with torch.autocast("cuda", dtype=autocast):
                        pred = model(noisy, timesteps, ehs, added_cond_kwargs=added).sample
                else:
                    pred = model(noisy, timesteps, ehs, added_cond_kwargs=added).sample
                return torch.nn.functional.mse_loss(pred.float(), noise.float(), reduction="mean")
        elif not (flux or sd3):
            ids = torch.randint(0, lcfg.vocab_size, (mb, seq), device="cuda")
        # the collator's other inputs (values are not needed: fake tensors hold none)
        extra = {}
        if data and data["batching"] == "pad":
            extra["attention_mask"] = torch.ones((mb, seq), dtype=torch.int64, device="cuda")
        elif data:
            extra["position_ids"] = torch.zeros((mb if data["batching"] == "multipack" else 1, seq),
                                                dtype=torch.int64, device="cuda")
        if flux or sd3:
            loss_fn = dit_loss
        elif unet:
            loss_fn = unet_loss
        elif spec.get("loss") == "chunked":
            loss_fn = chunked_loss(torch, model, ids, mb, torchtune=spec.get("code") == "torchtune")
        elif autocast is not None:
            def loss_fn():
                with torch.autocast("cuda", dtype=autocast):
                    return model(input_ids=ids, labels=ids, **extra).loss
        else:
            def loss_fn():
                return model(input_ids=ids, labels=ids, **extra).loss
        steps = run_steps(torch, rec, spec, opt, pack, loss_fn, scaler=scaler)
        for h in hooks:
            h.remove()
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": peft_version, "python": sys.version.split()[0]},
              "world_size": world, "rank": 0, "device": "cuda (fake)",
              "sdpa_backend": backend if spec.get("attention", "sdpa") == "sdpa" else None,
              "param_bytes": sum(r["bytes"] for r in param_rows)}
    lines = [header] + [dict(e="param", **r) for r in param_rows] + rec.events + steps
    return lines


NUM_OUTPUT_CHUNKS = 8


def chunked_loss(torch, model, ids, mb, torchtune=False):
    """torchtune's chunked output and loss on the transformers model (vrsim's loss = "chunked"):
    the model's forward returns [lm_head(chunk) for chunk in h.chunk(8, dim=1)]
    (TransformerDecoder.chunked_output, inside the root module's forward and so inside its
    fully_shard hooks), the recipe shifts the labels (torch.hstack with its ignore_index cache),
    and CEWithChunkedOutputLoss sums F.cross_entropy(logits.float(), labels, reduction="sum") over
    the chunks, divided by the count of labels not ignored. Returns the step's loss function.
    torchtune: the model is torchtune's own, whose forward(tokens) chunks its output itself."""
    import types
    import torch.nn.functional as F

    def chunked_forward(self, input_ids=None, **kw):
        h = self.model(input_ids=input_ids, **kw).last_hidden_state
        return [self.lm_head(chunk) for chunk in h.chunk(NUM_OUTPUT_CHUNKS, dim=1)]

    if not torchtune:
        model.forward = types.MethodType(chunked_forward, model)
    ignore = torch.full((mb, 1), -100, dtype=torch.int64, device="cuda")

    def loss_fn():
        logits = model(ids) if torchtune else model(input_ids=ids)
        labels = torch.hstack((ids[..., 1:], ignore))
        total_elements = (labels != -100).sum()
        labels = [t.reshape(-1) for t in labels.chunk(NUM_OUTPUT_CHUNKS, dim=1)]
        logits = [lg.reshape(-1, lg.size(-1)) for lg in logits]
        total = 0.0
        for lg, lab in zip(logits, labels):
            total += F.cross_entropy(lg.float(), lab, ignore_index=-100, reduction="sum")
        return total / total_elements
    return loss_fn


SPEC_FIELDS = {"name": str, "config": (str, dict), "layers": int, "micro_batch": int, "seq": int,
               "resolution": int,
               "precision": str, "steps": int, "grad_accum": int, "build": str,
               "optimizer": str, "optimizer_impl": str, "checkpointing": bool,
               "checkpoint_every": int, "checkpoint_scope": str, "lora": dict,
               "attention": str, "sdpa_backend": str, "compare": str, "data": dict,
               "strategy": str, "world": int, "zero": dict, "float8": dict, "record": dict,
               "text_encoders": str, "vae": str, "transformers": str, "loss": str,
               "code": str, "torchtune": str}
SPEC_CHOICES = {"precision": ("fp32", "bf16", "amp_bf16", "amp_fp16", "lora_bf16", "mp_fp32"),
                "strategy": ("none", "fsdp2", "ddp", "zero1"),
                "optimizer": ("adamw", "sgd"), "optimizer_impl": ("foreach", "fused", "forloop"),
                "build": ("cast", "direct"), "attention": ("sdpa", "eager"),
                "checkpoint_scope": ("layer", "op"),
                "sdpa_backend": SDPA_BACKENDS, "compare": ("all", "forward"),
                "text_encoders": ("cached", "frozen"), "vae": ("cached", "fp32", "weight"),
                "loss": ("full", "chunked"), "code": ("transformers", "torchtune"),
                "torchtune": ("0.4.0", "0.6.1")}


def check_spec(path):
    """The spec at path, or exit 2 naming what is wrong (an unknown field is not skipped)."""
    def bad(msg):
        print(f"capture: {path}: {msg}", file=sys.stderr)
        sys.exit(2)
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        bad(f"cannot read the spec: {e}")
    if not isinstance(spec, dict):
        bad("a spec is a JSON object")
    try:
        size = "resolution" if is_unet(spec) or is_flux(spec) or is_sd3(spec) else "seq"
    except (OSError, ValueError, KeyError, AttributeError):
        size = "seq"
    for k in ("name", "config", "precision") + (() if "data" in spec else ("micro_batch", size)):
        if k not in spec:
            bad(f"no '{k}'")
    d = spec.get("data")
    if d is not None:
        if "micro_batch" in spec or "seq" in spec:
            bad("'data' gives the batch: no 'micro_batch' or 'seq' beside it")
        multipack = d.get("batching") == "multipack"
        keys = {"lengths", "batching"} | ({"micro_batch", "sequence_len"} if multipack else set())
        if set(d) != keys or d["batching"] not in ("pad", "padding_free", "multipack"):
            bad("'data' is {\"lengths\": [...], \"batching\": \"pad\" or \"padding_free\"}, or "
                "{\"lengths\": [...], \"batching\": \"multipack\", \"micro_batch\": B, \"sequence_len\": S}")
        if not d["lengths"] or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                       for x in d["lengths"]):
            bad("'data.lengths' is a list of positive integers")
        if multipack:
            for k in ("micro_batch", "sequence_len"):
                if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < 1:
                    bad(f"'data.{k}' is a positive integer")
            if max(d["lengths"]) > d["sequence_len"]:
                bad("'data.lengths': a sequence longer than sequence_len (axolotl drops it)")
            if len(multipack_rows(d)[0]) != d["micro_batch"]:
                bad(f"'data.lengths' pack first-fit into {len(multipack_rows(d)[0])} bins, not micro_batch "
                    f"{d['micro_batch']}")

    for k, v in spec.items():
        if k not in SPEC_FIELDS:
            bad(f"unknown field '{k}' (fields: {', '.join(SPEC_FIELDS)})")
        if not isinstance(v, SPEC_FIELDS[k]) or (SPEC_FIELDS[k] is int and isinstance(v, bool)):
            bad(f"'{k}' has the wrong type ({type(v).__name__})")
        if k in SPEC_CHOICES and v not in SPEC_CHOICES[k]:
            bad(f"'{k}' is {v!r}, not one of {', '.join(SPEC_CHOICES[k])}")
    # a capture of an older transformers release (vrsim's training.transformers) is made under
    # that release, installed beside the others in a virtual environment (docs/oracle.md)
    if "transformers" in spec:
        import importlib.metadata
        have = importlib.metadata.version("transformers")
        if have != spec["transformers"]:
            bad(f"'transformers' is {spec['transformers']!r}, but this interpreter has transformers {have}")
    r = spec.get("record")
    if r is not None and (not isinstance(r.get("file"), str) or not isinstance(r.get("name"), str)
                          or set(r) - {"file", "name", "rank", "unseen"}):
        bad("'record' is {\"file\": \"validation/records/....jsonl\", \"name\": ..., \"rank\": n, "
            "\"unseen\": {\"bytes\": n, \"what\": ...}}")
    sdxl = size == "resolution" and load_config(spec).get("addition_embed_type") == "text_time"
    flux = size == "resolution" and is_flux(spec)
    sd3 = size == "resolution" and is_sd3(spec)
    if (spec.get("text_encoders", "cached") != "cached" or spec.get("vae", "cached") != "cached") and not (
            sdxl or flux or sd3):
        bad("text_encoders / vae other than cached: SDXL's (a UNet config with addition_embed_type "
            "text_time), Flux.1's or SD3's only")
    if spec.get("vae", "cached") not in ("cached", "weight" if flux else "fp32"):
        bad(f"vae {spec['vae']!r}: {'Flux.1' if flux else 'SD3' if sd3 else 'SDXL'}'s VAE runs in "
            f"{'weight_dtype (weight)' if flux else 'fp32'} in its script")
    if sd3 and spec.get("text_encoders", "cached") != "cached" and (
            load_config(spec).get("joint_attention_dim") != 4096
            or load_config(spec).get("pooled_projection_dim") != 2048):
        bad("text_encoders frozen: CLIP-L, CLIP-G and T5-XXL give joint_attention_dim 4096, pooled_projection_dim 2048")
    if flux and spec.get("text_encoders", "cached") != "cached" and (
            load_config(spec).get("joint_attention_dim") != 4096
            or load_config(spec).get("pooled_projection_dim") != 768):
        bad("text_encoders frozen: T5-XXL and CLIP-L give joint_attention_dim 4096, pooled_projection_dim 768")
    strategy = spec.get("strategy", "none")
    if "torchtune" in spec and spec.get("code") != "torchtune":
        bad("'torchtune' (the release) is read with code torchtune only")
    if spec.get("code", "transformers") == "torchtune":
        cfg = load_config(spec)
        if (cfg.get("model_type") not in ("llama", "qwen2") or cfg.get("rope_scaling")
                or (cfg.get("tie_word_embeddings") and cfg.get("model_type") == "llama")
                or spec.get("loss") != "chunked" or spec["precision"] != "bf16" or strategy != "none"
                or spec.get("checkpointing") or "data" in spec):
            bad("code torchtune: a Llama config without rope_scaling or tied embeddings or a Qwen2 config, loss "
                "chunked, precision bf16, no strategy, checkpointing or data (llama3() or qwen2() as the "
                "single-device recipe runs it)")
    if strategy != "none" and spec.get("world", 0) < 2:
        bad(f"strategy {strategy} needs 'world' (the fake world size), 2 or more")
    if spec["precision"] == "mp_fp32" and strategy != "fsdp2":
        bad("precision mp_fp32 is FSDP2's MixedPrecisionPolicy: strategy fsdp2")
    if strategy in ("ddp", "zero1") and spec.get("zero"):
        bad(f"zero: {strategy} is captured with DistributedDataParallel's defaults (no knobs)")
    for k, v in (spec.get("zero") or {}).items():
        if k == "units" and strategy == "fsdp2" and isinstance(v, list) and all(isinstance(p, str) for p in v):
            continue
        # the harness's loop builds the model whole on the GPU, then shards it (zero.init whole)
        if (k, v) not in (("init", "whole"), ("raf", True), ("raf", False)):
            bad(f"zero.{k} = {v!r} is not captured (zero.init must be \"whole\"; zero.raf true or false)")
    if strategy == "fsdp2" and (spec.get("zero") or {}).get("init") != "whole":
        bad("zero.init must be \"whole\": the capture builds the whole model on the GPU, then shards it")
    return spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    spec = check_spec(a.spec)
    preload_fake_cuda()
    out = a.out or os.path.join(HERE, "captures", spec["name"] + ".jsonl.gz")
    lines = capture(spec)
    write_capture(out, lines)
    steps = [ln for ln in lines if ln.get("e") == "step"]
    for s in steps:
        print(f"{spec['name']} step {s['st']}: peak {s['peak']} after_fwd {s['after_fwd']} "
              f"after_bwd {s['after_bwd']} after_opt {s['after_opt']}")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
