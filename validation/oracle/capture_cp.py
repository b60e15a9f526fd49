#!/usr/bin/env python3
"""The oracle's capture of context parallelism: one rank of torch's ring attention as torchtitan
runs it (FSDP2 over the cp ranks, the batch's sequence sharded by context_parallel with the
head-tail load balancer, SDPA dispatched to _templated_ring_attention) on transformers' Llama,
on fake CUDA tensors in a fake process group, written in capture.py's format.

  capture_cp.py SPEC.json [-o OUT.jsonl.gz]

A spec is capture.py's (validation/oracle/specs/) with `cp` (the context-parallel group's size)
and `rank` (default 0), and without what is not taken here (lora, checkpointing, amp); precision
bf16 (the model built in bf16) or mp_fp32 (built in fp32, FSDP2's MixedPrecisionPolicy(bf16,
fp32) as torchtitan's apply_fsdp sets it by default). As
torchtitan folds cp into FSDP's mesh (parallel_dims.py: dp_shard_cp), the model is built on the
meta device, fully_shard on each decoder layer and on the root over the cp mesh, then each rank's
shards made on the GPU (capture_tp.py's build). The step is torchtitan's train step of
9dec370: inside context_parallel(mesh, buffers=[input_ids, labels, position_ids],
buffer_seq_dims=[1, 1, 1], no_restore_buffers={input_ids, labels}) the model's forward (the
rank's chunks r and 2cp-1-r of the sequence and of the positions), torchtitan's
cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)) and backward; then the
optimizer step and zero_grad(set_to_none=True). Each step's inputs are made afresh before it
(context_parallel resizes the buffers it shards in place).

What is recorded is capture.py's, with two changes: a DTensor's allocation is its local tensor's
(capture_tp.py's), and the recording mode is entered again inside the ring attention's forward
and backward (_templated_ring_attention, _templated_ring_attention_backward), which DTensor's
dispatch runs below the mode: their own ops (the exchanges, each step's SDPA, the merges, the
backward's fp32 buffers) are recorded as the GPU runs them. capture.py's SDPA stand-in takes
the name of F.scaled_dot_product_attention, the name context_parallel's monkey patch replaces.
"""
import sys

import capture as C
import capture_tp as T

SPEC_FIELDS = dict(C.SPEC_FIELDS, cp=int, rank=int, rotate=str)
for k in ("lora", "checkpointing", "checkpoint_every", "grad_accum"):
    SPEC_FIELDS.pop(k, None)


def capture(spec):
    import torch
    import transformers
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental import _attention as cp_api
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    C.enable_fake_cuda(torch)
    backend = spec.get("sdpa_backend", "flash")
    C.install_sdpa_backend(torch, backend)
    # context_parallel replaces the module attribute named as the function it finds there
    torch.nn.functional.scaled_dot_product_attention.__name__ = "scaled_dot_product_attention"
    C.install_data_answers(torch)
    cp = int(spec["cp"])
    rank = int(spec.get("rank", 0))
    cp_api.set_rotate_method(spec.get("rotate", "allgather"))
    rec = C.Recorder()
    sys.path.insert(0, C.HERE)
    import fake_dist
    fake_dist.install_fake_streams(torch, cp)
    rec.install_resize(torch)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=cp)
    mesh = init_device_mesh("cuda", (cp,), mesh_dim_names=("cp",))

    track = C.Recorder.track

    def local_track(self, t):
        return track(self, t._local_tensor if isinstance(t, DTensor) else t)
    C.Recorder.track = local_track

    fake = FakeTensorMode()
    mode = C.make_mode(torch, rec)
    # the ring's own ops, which DTensor's dispatch runs below the recording mode
    for fname in ("_templated_ring_attention", "_templated_ring_attention_backward"):
        inner = getattr(ring, fname)

        def recorded(*a, _inner=inner, **k):
            with mode:
                return _inner(*a, **k)
        setattr(ring, fname, recorded)
    torch.manual_seed(0)


    with fake, mode, C.make_tagger(torch, rec):
        rec.phase("build")
        model, lcfg = T.build_meta(torch, transformers, spec)
        kw = {"mesh": mesh, "reshard_after_forward": True}
        if spec["precision"] == "mp_fp32":
            # torchtitan's default apply_fsdp: MixedPrecisionPolicy(param_dtype=bfloat16,
            # reduce_dtype=float32) over the fp32 model
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.model.layers:
            fully_shard(blk, **kw)
        fully_shard(model, **kw)
        T.to_gpu(torch, model)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = C.make_optimizer(torch, spec, params)
        hooks = C.install_module_hooks(torch, model, rec)
        param_rows = T.local_param_rows(torch, model)
        mb, seq = int(spec["micro_batch"]), int(spec["seq"])
        ctx = {}

        def loss_fn():
            # torchtitan's train step: the batch made, then sharded on entering the context
            ids = torch.randint(0, lcfg.vocab_size, (mb, seq), device="cuda")
            labels = torch.randint(0, lcfg.vocab_size, (mb, seq), device="cuda")
            pos = torch.arange(seq, device="cuda").unsqueeze(0)
            cm = context_parallel(mesh, buffers=[ids, labels, pos], buffer_seq_dims=[1, 1, 1],
                                  no_restore_buffers={ids, labels})
            cm.__enter__()
            ctx["cm"] = cm
            logits = model(input_ids=ids, position_ids=pos).logits
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                     labels.flatten(0, 1))

        def backward(loss):
            loss.backward()
            ctx.pop("cm").__exit__(None, None, None)
        steps = C.run_steps(torch, rec, spec, opt, rec.save, loss_fn, backward=backward)
        for h in hooks:
            h.remove()
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": None, "python": sys.version.split()[0]},
              "world_size": cp, "rank": rank, "device": "cuda (fake)", "process_group": "fake",
              "parallel": {"cp": cp}, "sdpa_backend": backend,
              "param_bytes": sum(r["bytes"] for r in param_rows)}
    return [header] + [dict(e="param", **r) for r in param_rows] + rec.events + steps


def check_spec(path):
    spec, bad = T.read_spec(path, "capture_cp", SPEC_FIELDS, ("name", "config", "micro_batch", "seq", "precision", "cp"))
    if spec["precision"] not in ("bf16", "mp_fp32"):
        bad(f"precision {spec['precision']!r}: ring attention takes bf16 here (flash or cuDNN): bf16, "
            "or mp_fp32 (FSDP2's bf16 parameters over fp32 shards, torchtitan's default)")
    if spec["cp"] < 2:
        bad("cp must be at least 2")
    if spec["seq"] % (2 * spec["cp"]):
        bad(f"seq {spec['seq']} is not a multiple of 2 x cp (the head-tail load balancer)")
    if spec.get("rotate", "allgather") not in ("allgather", "alltoall"):
        bad(f"rotate {spec['rotate']!r}: allgather or alltoall")
    if not 0 <= spec.get("rank", 0) < spec["cp"]:
        bad(f"rank {spec.get('rank')} is not one of the {spec['cp']} ranks")
    return spec


def main():
    T.main(__doc__, check_spec, capture)


if __name__ == "__main__":
    main()
