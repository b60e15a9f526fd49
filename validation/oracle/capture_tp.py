#!/usr/bin/env python3
"""The oracle's capture of tensor parallelism: one rank of DTensor tensor parallelism
with sequence parallelism, torchtitan's plan on transformers' Llama modules, run on fake CUDA
tensors in a fake process group (torch.testing._internal.distributed.fake_pg.FakeStore), and
written in capture.py's format.

  capture_tp.py SPEC.json [-o OUT.jsonl.gz]

A spec is capture.py's (validation/oracle/specs/) with `tp` (the tensor-parallel group's size)
and without what the plan does not take here (lora, checkpointing, amp); `float8`
({recipe: tensorwise}) converts the projections before the plan and takes torchtitan's float8
plan (torchao's Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput). With `dp_shard` (> 1)
the mesh is torchtitan's 2-D one, (dp_shard, tp) named ("dp_shard", "tp"): the plan is applied
over mesh["tp"], then fully_shard on each decoder layer and on the root over mesh["dp_shard"]
(parallelize_llama's order: apply_tp, then apply_fsdp), world dp_shard x tp; precision mp_fp32
there is torchtitan's default MixedPrecisionPolicy(bf16, fp32) over the fp32 model. `rank` (default 0)
is the rank recorded. The plan is torchtitan's apply_tp (torchtitan/models/llama3/infra/parallelize.py, at the
parent of torchtitan commit 9810191) on transformers' names, as lua/strategies/tp.lua models it:

  model.embed_tokens  RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
  model.norm          SequenceParallel()
  lm_head             ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                      use_local_output=False)      (loss parallel)
  each decoder layer: input_layernorm and post_attention_layernorm SequenceParallel();
  self_attn and mlp PrepareModuleInput(Shard(1) -> Replicate()); q/k/v_proj and gate/up_proj
  ColwiseParallel(); o_proj and down_proj RowwiseParallel(output_layouts=Shard(1)).

The model is built on the meta device in its dtype, parallelized, then each rank's shards are
made on the GPU (model.to_empty), as torchtitan builds it. The step: the model called with input_ids and position_ids = arange(seq) (under sequence
parallelism the decoder's input is the rank's 1/tp of the sequence, from which transformers would
otherwise make positions 0..s/tp), then torchtitan's loss under loss_parallel():
cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), backward, the optimizer step,
zero_grad(set_to_none=True).

What is recorded is capture.py's, with one change: a DTensor's allocation is its local tensor's
(the dispatch mode sees the DTensor-level op; its storage is the rank's shard); inside loss
parallel's handlers the local ops are recorded too (see_inside_loss_parallel). Known fake-only
events: the functional collectives' wait_tensor returns its input on a GPU (an alias), while the
fake kernel makes a new tensor.
"""
import argparse
import json
import os
import sys

import capture as C

SPEC_FIELDS = dict(C.SPEC_FIELDS, tp=int, dp_shard=int, rank=int)
for k in ("lora", "checkpointing", "checkpoint_every", "grad_accum"):
    SPEC_FIELDS.pop(k, None)


def tp_plan(torch, float8=False):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    if float8:
        # torchtitan's apply_tp with enable_float8: the projections' styles and their modules'
        # input preparation are torchao's float8 ones (the input cast to float8 before the
        # all-gather); the embedding, norms and head keep torch's
        from torchao.float8.float8_tensor_parallel import (
            Float8ColwiseParallel as ColwiseParallel, Float8RowwiseParallel as RowwiseParallel,
            PrepareFloat8ModuleInput as PrepareModuleInput)
        from torch.distributed.tensor.parallel import ColwiseParallel as HeadColwise
        from torch.distributed.tensor.parallel import RowwiseParallel as EmbedRowwise
    else:
        HeadColwise, EmbedRowwise = ColwiseParallel, RowwiseParallel
    top = {
        "model.embed_tokens": EmbedRowwise(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": HeadColwise(input_layouts=Shard(1), output_layouts=Shard(-1),
                               use_local_output=False),
    }
    layer = {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
    }
    return top, layer


def see_inside_loss_parallel(torch, rec):
    """Record the local ops of loss parallel's DTensor handlers (torch/distributed/tensor/parallel/
    loss.py): _log_softmax_handler and _nll_loss_backward_handler compute on the rank's local
    tensors inside DTensor's dispatch, below the recorder's mode, so only their outputs would be
    seen. Their bodies are module functions the handlers look up when called (_log_softmax,
    _nll_loss_forward, _nll_loss_and_log_softmax_backward): each runs here under a recorder mode
    of its own, which sees its ops (x - max, exp, the zeros and the fused backward's products) on
    the local tensors, their allocations and frees."""
    import torch.distributed.tensor.parallel.loss as L
    for fn in ("_log_softmax", "_nll_loss_forward", "_nll_loss_and_log_softmax_backward"):
        def inside(*a, _body=getattr(L, fn), **k):
            with C.make_mode(torch, rec):
                return _body(*a, **k)
        setattr(L, fn, inside)


def build_meta(torch, transformers, spec):
    """The model on the meta device, in its dtype (torchtitan builds it there, parallelizes it,
    then materializes each rank's shards): capture.py's build_model without the GPU."""
    hf = dict(C.load_config(spec))
    arch = hf.pop("architectures", ["LlamaForCausalLM"])[0]
    for k in ("transformers_version", "torch_dtype", "dtype"):
        hf.pop(k, None)
    if spec.get("layers"):
        hf["num_hidden_layers"] = int(spec["layers"])
    cls = getattr(transformers, arch)
    lcfg = cls.config_class(attn_implementation=spec.get("attention", "sdpa"), **hf)
    dtype = {"bf16": torch.bfloat16}.get(spec["precision"])
    if dtype is not None:
        torch.set_default_dtype(dtype)
    with torch.device("meta"):
        model = cls(lcfg)
    torch.set_default_dtype(torch.float32)
    if spec.get("float8"):
        # torchtitan converts before parallelizing (train.py: convert_to_float8_training, then
        # parallelize_llama), with its filter: not the output layer
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        cfg8 = Float8LinearConfig.from_recipe_name(spec["float8"].get("recipe", "tensorwise"))
        convert_to_float8_training(model, config=cfg8, module_filter_fn=lambda m, fqn: (
            fqn != "lm_head" and m.in_features % 16 == 0 and m.out_features % 16 == 0))
    return model, lcfg


def to_gpu(torch, model):
    """Each rank's shards made on the GPU, the buffers with them (torchtitan:
    model.to_empty(device="cuda"), then init_weights; random fills allocate nothing). By hand:
    Module.to_empty swaps each parameter, which the fake tensors' stand-in for swap_tensors does
    not take for a DTensor."""
    from torch.distributed.tensor import DTensor
    for mod in model.modules():
        for key, p in list(mod.named_parameters(recurse=False)):
            if isinstance(p, DTensor):
                loc = torch.empty_like(p._local_tensor, device="cuda")
                new = DTensor.from_local(loc, p.device_mesh, p.placements, run_check=False,
                                         shape=p.shape, stride=p.stride())
            else:
                new = torch.empty_like(p, device="cuda")
            mod.register_parameter(key, torch.nn.Parameter(new, requires_grad=p.requires_grad))
        for key, b in list(mod.named_buffers(recurse=False)):
            mod.register_buffer(key, torch.empty_like(b, device="cuda"),
                                persistent=key not in mod._non_persistent_buffers_set)


def local_param_rows(torch, model):
    """The capture's param lines: each parameter's rank-local shape, dtype and bytes (a DTensor's
    local shard)."""
    from torch.distributed.tensor import DTensor

    def local(p):
        return p._local_tensor if isinstance(p, DTensor) else p
    return [{"name": n, "shape": list(local(p).shape), "dtype": C.dtype_name(p.dtype),
             "bytes": local(p).untyped_storage().nbytes(), "trainable": p.requires_grad}
            for n, p in model.named_parameters()]


def capture(spec):
    import torch
    import transformers
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore
    C.enable_fake_cuda(torch)
    backend = spec.get("sdpa_backend", "cudnn")
    C.install_sdpa_backend(torch, backend)
    C.install_data_answers(torch)
    tp = int(spec["tp"])
    dp_shard = int(spec.get("dp_shard", 1))
    world = tp * dp_shard
    rank = int(spec.get("rank", 0))
    rec = C.Recorder()
    if dp_shard > 1:
        # FSDP2's streams and events, and its resize_ of the unsharded parameters (capture.py)
        sys.path.insert(0, C.HERE)
        import fake_dist
        fake_dist.install_fake_streams(torch, world)
        rec.install_resize(torch)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    # (the mesh is made outside fake mode: DeviceMesh reads its rank table's values); torchtitan's
    # order of dimensions: dp_shard outside, tp inside (ranks 2k, 2k+1 are one tp group)
    if dp_shard > 1:
        world_mesh = init_device_mesh("cuda", (dp_shard, tp), mesh_dim_names=("dp_shard", "tp"))
        mesh = world_mesh["tp"]
    else:
        mesh = init_device_mesh("cuda", (tp,))

    if dp_shard > 1:
        # FSDP2 joins the dp and tp meshes into one (DeviceMesh._concatenate), reading their rank
        # tables' values: done outside the fake mode, as the meshes themselves are (host tensors
        # of a few ints, nothing on the device)
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.distributed.device_mesh import DeviceMesh
        concatenate = DeviceMesh._concatenate

        def concatenate_real(*a, **k):
            with unset_fake_temporarily():
                return concatenate(*a, **k)
        DeviceMesh._concatenate = staticmethod(concatenate_real)

    # a DTensor's storage is its local shard's
    track = C.Recorder.track

    def local_track(self, t):
        return track(self, t._local_tensor if isinstance(t, DTensor) else t)
    C.Recorder.track = local_track

    fake = FakeTensorMode()
    torch.manual_seed(0)
    see_inside_loss_parallel(torch, rec)


    with fake, C.make_mode(torch, rec), C.make_tagger(torch, rec):
        rec.phase("build")
        model, lcfg = build_meta(torch, transformers, spec)
        top, layer = tp_plan(torch, bool(spec.get("float8")))
        parallelize_module(model, mesh, top)
        for blk in model.model.layers:
            parallelize_module(blk, mesh, layer)
        if dp_shard > 1:
            # torchtitan's apply_fsdp after apply_tp: fully_shard on every block, then the root,
            # over dp_shard (reshard_after_forward True; no mixed-precision policy over a bf16
            # model, and under mp_fp32 apply_fsdp's default MixedPrecisionPolicy(bf16, fp32) over
            # the fp32 one); each parameter becomes a DTensor over (dp_shard, tp)
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            kw = {"mesh": world_mesh["dp_shard"], "reshard_after_forward": True}
            if spec["precision"] == "mp_fp32":
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for blk in model.model.layers:
                fully_shard(blk, **kw)
            fully_shard(model, **kw)
        to_gpu(torch, model)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = C.make_optimizer(torch, spec, params)
        hooks = C.install_module_hooks(torch, model, rec)
        param_rows = local_param_rows(torch, model)
        mb, seq = int(spec["micro_batch"]), int(spec["seq"])
        rec.phase("inputs")
        ids = torch.randint(0, lcfg.vocab_size, (mb, seq), device="cuda")
        pos = torch.arange(seq, device="cuda").unsqueeze(0)

        def loss_fn():
            logits = model(input_ids=ids, position_ids=pos).logits
            with loss_parallel():
                return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                         ids.flatten(0, 1))

        def backward(loss):
            with loss_parallel():
                loss.backward()
        steps = C.run_steps(torch, rec, spec, opt, rec.save, loss_fn, backward=backward)
        for h in hooks:
            h.remove()
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": None, "python": sys.version.split()[0]},
              "world_size": world, "rank": rank, "device": "cuda (fake)", "process_group": "fake",
              "parallel": dict({"tp": tp}, **({"dp_shard": dp_shard} if dp_shard > 1 else {})),
              "sdpa_backend": backend,
              "param_bytes": sum(r["bytes"] for r in param_rows)}
    return [header] + [dict(e="param", **r) for r in param_rows] + rec.events + steps


def read_spec(path, tool, fields, required):
    """The spec at path, a JSON object whose keys are among fields (name -> type) and include
    required, and the function that refuses it with a message (exit 2) naming tool and path."""
    def bad(msg):
        print(f"{tool}: {path}: {msg}", file=sys.stderr)
        sys.exit(2)
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        bad(f"cannot read the spec: {e}")
    if not isinstance(spec, dict):
        bad("a spec is a JSON object")
    for k in required:
        if k not in spec:
            bad(f"no '{k}'")
    for k, v in spec.items():
        if k not in fields:
            bad(f"unknown field '{k}' (fields: {', '.join(fields)})")
        if not isinstance(v, fields[k]) or (fields[k] is int and isinstance(v, bool)):
            bad(f"'{k}' has the wrong type ({type(v).__name__})")
    return spec, bad


def check_spec(path):
    spec, bad = read_spec(path, "capture_tp", SPEC_FIELDS, ("name", "config", "micro_batch", "seq", "precision", "tp"))
    if spec["precision"] not in ("bf16", "fp32", "mp_fp32"):
        bad(f"precision {spec['precision']!r}: the tensor-parallel capture takes bf16, fp32 or mp_fp32")
    if spec["precision"] == "mp_fp32" and spec.get("dp_shard", 1) < 2:
        bad("precision mp_fp32 is FSDP2's MixedPrecisionPolicy: it needs dp_shard of at least 2")
    if spec.get("float8") and spec["float8"].get("recipe", "tensorwise") != "tensorwise":
        bad("float8 under tensor parallelism: torchao's float8 styles take the tensorwise recipe only")
    if spec["tp"] < 2:
        bad("tp must be at least 2")
    if spec.get("dp_shard", 1) < 1:
        bad("dp_shard must be at least 1")
    if not 0 <= spec.get("rank", 0) < spec["tp"] * spec.get("dp_shard", 1):
        bad(f"rank {spec.get('rank')} is not one of the {spec['tp'] * spec.get('dp_shard', 1)} ranks")
    return spec


def main(doc=__doc__, check=None, run=None):
    """The command line of a capture script: SPEC [-o OUT]; check(path) reads and checks the
    spec, run(spec) captures it (this script's own by default)."""
    check, run = check or check_spec, run or capture
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("spec")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    spec = check(a.spec)
    C.preload_fake_cuda()
    out = a.out or os.path.join(C.HERE, "captures", spec["name"] + ".jsonl.gz")
    lines = run(spec)
    C.write_capture(out, lines)
    for s in (ln for ln in lines if ln.get("e") == "step"):
        print(f"{spec['name']} step {s['st']}: peak {s['peak']} after_fwd {s['after_fwd']} "
              f"after_bwd {s['after_bwd']} after_opt {s['after_opt']}")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
