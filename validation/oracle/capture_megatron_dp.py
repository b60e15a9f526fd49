#!/usr/bin/env python3
"""The oracle's capture of Megatron-LM's data parallelism over its tensor parallelism: rank 0 of
megatron-core 0.16.1's GPTModel (capture_megatron_tp.py's model, tp with sequence parallelism)
wrapped in megatron.core.distributed.DistributedDataParallel and stepped by
get_megatron_optimizer's optimizer, at tp x dp ranks of the oracle's fake process group.

  capture_megatron_dp.py SPEC.json [-o OUT.jsonl.gz]

A spec (validation/oracle/specs_megatron_dp/) is capture_megatron_tp.py's with dp (the
data-parallel size; the world is tp * dp), distributed_optimizer (bool, default true) and
grad_reduce_in_fp32 (bool, default true: arguments.py's for bf16) and rank (the global rank this
process plays, default 0; rank 2 at tp 2 is tp rank 0, dp rank 1, the owner of the buffer's second
shard). The wrapping is
Megatron's get_model + setup_model_and_optimizer: DistributedDataParallelConfig(
grad_reduce_in_fp32=..., overlap_grad_reduce=False, use_distributed_optimizer=...,
bucket_size None as DDP's default for dp > 1 sets it) over the Float16Module; OptimizerConfig(
optimizer="adam", bf16=True, lr 1e-4, weight_decay 0.1, clip_grad 1.0 as arguments.py's default,
use_distributed_optimizer=...): the bf16 params live in DDP's contiguous param buffer, their
gradients accumulate into param.main_grad (fp32 views of the contiguous grad buffer), the
optimizer is torch.optim.AdamW (no Apex, no TransformerEngine) over the fp32 main params (the
rank's shards of them under the distributed optimizer).

The step, as megatron/training/training.py train_step runs it: model.zero_grad_buffer() and
optimizer.zero_grad(); forward and backward (capture_megatron_tp.py's loss); finalize_model_grads
(distributed/finalize_model_grads.py: finish_grad_sync, the buckets reduce-scattered in place
into the grad buffer under the distributed optimizer, all-reduced otherwise; then the norms'
main_grads, which sequence parallelism leaves partial on each tp rank, flattened into one fp32
tensor, all-reduced over tp and copied back); optimizer.step() (the fp32 shard updated from
its view of the grad buffer, copied into the bf16 param buffer's shard, then the param
all-gather of each bucket).

Stand-ins, beside capture_megatron_tp.py's, each outside what is allocated on the device:
- the norms' weights carry sequence_parallel = True, as TENorm's do (TransformerEngine sets the
  attribute on a norm built under sequence parallelism; capture_megatron_tp.py's norms are built
  without it), so that finalize_model_grads all-reduces their gradients over tp as Megatron's
  runs do.
- parallel_state without Gloo groups: get_data_parallel_group_gloo (and its expert twin)
  answer None (they serve the distributed optimizer's checkpointing on the host).
- torch.distributed.all_gather_object answers this rank's object for every rank (the fake
  group moves no Python objects; the distributed optimizer and DDP gather host metadata).
- the buckets' collectives issued one by one: torch.distributed._coalescing_manager is a
  context that does nothing (reduce_scatter_tensor_coalesced has no fake kernel); each
  collective writes into the same buffer views as the coalesced one.
- the gradient norm (optimizer/clip_grads.py get_grad_norm_fp32): without Apex the no-Apex
  local_multi_tensor_l2_norm takes torch.tensor of the per-tensor norms and float() of their
  norm, and get_grad_norm_fp32 .item() of the reduced square: data-dependent on fake tensors.
  The stand-in allocates on the device what the real one does (the int dummy_overflow_buf, one
  fp32 0-dim norm per gradient shard alive together, the 1-element fp32 norm, its square, the
  all-reduce over the grad-stats group) and answers the norm 0.5: under clip_grad 1.0 no
  clipping (clip_grad_by_total_norm_fp32 scales only when the norm is above it; a clipped
  step would add the scale's temporaries, not captured).
- the buckets' parameter sets (param_and_grad_buffer.py keeps set(params)) iterate in insertion
  order: a Python set of tensors iterates by id, which differs from run to run, and the
  distributed optimizer walks it to make its shard views (detach, view: no allocation), so
  the capture would not be the same bytes twice.
- torch.optim.AdamW's implementation: Megatron leaves foreach None, which on a CUDA device picks
  foreach (torch/optim/optimizer.py _default_to_fused_or_foreach); the fake device answers
  torch.cuda.is_available() False, which would pick the for-loop, so the param groups are given
  foreach True, what a GPU run picks.

The param rows' bytes are each parameter's own elements (its view of the contiguous buffer,
which is one storage for all of them); the buffer rows give the buffers' storages.
"""
import contextlib
import sys

import capture as C
import capture_tp as CT
import capture_megatron_tp as MT

SPEC_FIELDS = dict(MT.SPEC_FIELDS, dp=int, distributed_optimizer=bool, grad_reduce_in_fp32=bool, rank=int)
STAND_IN_NORM = 0.5


def install_dp_stand_ins(torch):
    """The stand-ins of the docstring (Gloo groups, all_gather_object, coalescing, the norm)."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.distributed import param_and_grad_buffer
    from megatron.core.optimizer import clip_grads, optimizer as moptimizer
    from megatron.core.transformer import torch_norm
    new = torch_norm.WrappedTorchNorm.__new__

    def norm_new(cls, *a, **kw):
        norm = new(cls, *a, **kw)
        for p in norm.parameters():
            p.sequence_parallel = True
        return norm
    torch_norm.WrappedTorchNorm.__new__ = norm_new
    parallel_state.get_data_parallel_group_gloo = lambda *a, **k: None
    parallel_state.get_expert_data_parallel_group_gloo = lambda *a, **k: None

    def all_gather_object(object_list, obj, group=None):
        for i in range(len(object_list)):
            object_list[i] = obj
    dist.all_gather_object = all_gather_object

    @contextlib.contextmanager
    def no_coalescing(group=None, device=None, async_ops=False):
        yield None
    param_and_grad_buffer._coalescing_manager = no_coalescing

    class InsertionOrderedSet(dict):
        def __init__(self, items=()):
            super().__init__((x, None) for x in items)

        def add(self, x):
            self[x] = None
    param_and_grad_buffer.set = InsertionOrderedSet

    def grad_norm(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
        if isinstance(grads_for_norm, torch.Tensor):
            grads_for_norm = [grads_for_norm]
        dummy_overflow_buf = torch.zeros(1, dtype=torch.int, device="cuda")
        if grads_for_norm:
            l2 = [torch.norm(g) for g in grads_for_norm]          # local_multi_tensor_l2_norm
            grad_norm = torch.zeros(1, dtype=torch.float, device="cuda")  # its torch.tensor([float(...)])
            del l2
        else:
            grad_norm = torch.zeros(1, dtype=torch.float, device="cuda")
        total_norm = grad_norm ** float(norm_type)
        dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=grad_stats_parallel_group)
        del dummy_overflow_buf, grad_norm, total_norm
        return STAND_IN_NORM
    clip_grads.get_grad_norm_fp32 = grad_norm
    moptimizer.get_grad_norm_fp32 = grad_norm


def wrap(torch, cfg, spec, model):
    """get_model's DistributedDataParallel over the Float16Module `model` and
    setup_model_and_optimizer's optimizer over it, as the docstring says: (the DDP model, the
    optimizer, the param rows: each parameter's own elements). `model` a list (an interleaved
    pipeline's chunks): a DDP each, bucketing disabled from the second on as get_model passes it,
    one optimizer over them all, and the list of DDP models returned."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    dist_opt = bool(spec.get("distributed_optimizer", True))
    fp32_grads = bool(spec.get("grad_reduce_in_fp32", True))
    ddp_cfg = DistributedDataParallelConfig(grad_reduce_in_fp32=fp32_grads, overlap_grad_reduce=False,
                                            use_distributed_optimizer=dist_opt)
    opt_cfg = OptimizerConfig(optimizer="adam", bf16=True, lr=1e-4, weight_decay=0.1, clip_grad=1.0,
                              use_distributed_optimizer=dist_opt)
    chunks = model if isinstance(model, list) else [model]
    ddp = [DistributedDataParallel(cfg, ddp_cfg, c, disable_bucketing=i > 0) for i, c in enumerate(chunks)]
    for d in ddp:
        d.train()
    opt = get_megatron_optimizer(opt_cfg, ddp)
    for g in opt.optimizer.param_groups:
        g["foreach"] = True
    rows = [{"name": (f"{i}." if len(ddp) > 1 else "") + n, "shape": list(p.shape), "dtype": C.dtype_name(p.dtype),
             "bytes": p.numel() * p.element_size(), "trainable": p.requires_grad}
            for i, d in enumerate(ddp) for n, p in d.named_parameters()]
    return (ddp if isinstance(model, list) else ddp[0]), opt, rows


def buffer_rows(model):
    """The buffers' rows: their dtypes, sizes and storages (of each DDP model of a list in turn)."""
    if isinstance(model, list):
        return [r for d in model for r in buffer_rows(d)]
    return [{"e": "buffer", "param_dtype": C.dtype_name(b.param_dtype), "grad_dtype": C.dtype_name(b.grad_dtype),
             "numel": b.numel, "numel_unpadded": b.numel_unpadded, "buckets": len(b.buckets),
             "param_bytes": b.param_data.untyped_storage().nbytes() if b.param_data is not None else 0,
             "grad_bytes": b.grad_data.untyped_storage().nbytes()}
            for b in model.buffers]


def capture(spec):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import megatron.core
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    tp, dp = int(spec["tp"]), int(spec["dp"])
    dist_opt = bool(spec.get("distributed_optimizer", True))
    world = tp * dp
    rank = int(spec.get("rank", 0))
    hf, cfg = MT.start(torch, spec, world, rank, more_stand_ins=install_dp_stand_ins)
    rec = C.Recorder()
    fake = FakeTensorMode()
    fp32_grads = bool(spec.get("grad_reduce_in_fp32", True))
    with fake, C.make_mode(torch, rec), C.make_tagger(torch, rec):
        rec.phase("build")
        model, opt, rows = wrap(torch, cfg, spec, MT.gpt_model(cfg, hf, spec))
        hooks = C.install_module_hooks(torch, model, rec)
        mb, seq = int(spec["micro_batch"]), int(spec["seq"])
        rec.phase("inputs")
        ids = torch.randint(0, hf["vocab_size"], (mb, seq), device="cuda")
        pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mb, -1)
        loss_mask = torch.ones((mb, seq), dtype=torch.float, device="cuda")
        steps = []
        for step in range(int(spec.get("steps", 2))):
            rec.peak = rec.live
            row = {"e": "step", "st": step, "live_start": rec.live}
            rec.phase("zero_grad", step)
            model.zero_grad_buffer()
            opt.zero_grad()
            rec.phase("fwd", step, 0)
            with torch.autograd.graph.saved_tensors_hooks(rec.save, lambda t: t):
                losses = model(ids, pos, None, labels=ids)
                loss = torch.sum(losses.view(-1).float() * loss_mask.view(-1)) / (mb * seq)
                del losses
            row["after_fwd"] = rec.live
            rec.phase("bwd", step, 0)
            loss.backward()
            finalize_model_grads([model])
            row["after_bwd"] = rec.live
            rec.phase("optim", step)
            ok, _, _ = opt.step()
            assert ok, "the optimizer step was skipped"
            del loss
            row["after_opt"] = rec.live
            row["live_end"] = rec.live
            row["peak"] = rec.peak
            rec.phase("end", step)
            steps.append(row)
        for h in hooks:
            h.remove()
        buffers = buffer_rows(model)
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "megatron-core": megatron.core.__version__,
                           "transformers": None, "peft": None, "python": sys.version.split()[0]},
              "world_size": world, "rank": rank, "device": "cuda (fake)", "process_group": "fake",
              "parallel": {"tp": tp, "dp": dp, "tp_impl": "megatron", "sequence_parallel": True,
                           "distributed_optimizer": dist_opt, "grad_reduce_in_fp32": fp32_grads},
              "param_bytes": sum(r["bytes"] for r in rows)}
    return [header] + buffers + [dict(e="param", **r) for r in rows] + rec.events + steps


def check_spec(path):
    spec, bad = CT.read_spec(path, "capture_megatron_dp", SPEC_FIELDS,
                             ("name", "config", "micro_batch", "seq", "precision", "tp", "dp"))
    if spec["precision"] != "bf16":
        bad(f"precision {spec['precision']!r}: the Megatron capture takes bf16 (Float16Module)")
    if spec["tp"] < 2 or spec["dp"] < 2:
        bad("tp and dp must be at least 2")
    return spec


if __name__ == "__main__":
    CT.main(__doc__, check_spec, capture)
