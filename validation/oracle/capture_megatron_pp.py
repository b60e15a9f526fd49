#!/usr/bin/env python3
"""The oracle's capture of Megatron-LM's pipeline parallelism over its tensor parallelism: one
rank of megatron-core 0.16.1's GPTModel (capture_megatron_tp.py's model, tp with sequence
parallelism) built as its pipeline stage and stepped by megatron-core's own non-interleaved 1F1B
schedule (pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving), or
with vp model chunks a rank by its interleaved schedule (forward_backward_pipelining_with_
interleaving), at tp x pp ranks of the oracle's fake process group.

  capture_megatron_pp.py SPEC.json [-o OUT.jsonl.gz]

A spec (validation/oracle/specs_megatron_pp/) is capture_megatron_tp.py's with pp (the pipeline
size; the world is tp * pp, Megatron's rank order tp fastest, pp slowest), microbatches (the
schedule's num_microbatches) and rank (the global rank this process plays, default 0: rank 0 is
the first stage, rank tp * (pp - 1) the first rank of the last). layers is the whole model's;
Megatron deals them out evenly, layers / pp a stage. vp (default 1): the virtual pipeline size
(initialize_model_parallel's virtual_pipeline_model_parallel_size and TransformerConfig's, as
--num-layers-per-virtual-pipeline-stage makes it): each rank builds vp GPTModel chunks, as
training.py's get_model does (vp_stage i; pre_process on the first rank's chunk 0, post_process
on the last rank's last chunk), layers / (pp vp) each, and the schedule runs them interleaved;
the config as arguments.py leaves an interleaved run: overlap_p2p_comm True (the default unless
--no-overlap-p2p-communication) and so batch_p2p_comm False, microbatch_group_size_per_vp_stage
the spec's group (--microbatch-group-size-per-virtual-pipeline-stage; without it the config's
default, pp); overlap_p2p_comm false in the spec is --no-overlap-p2p-communication (arguments.py
then asserts pp > 2, and core_transformer_config_from_args sets batch_p2p_comm True: the steady
state's send_forward_backward_recv_forward_backward, batched);
overlap_p2p_comm_warmup_flush true is --overlap-p2p-communication-warmup-flush (ModelParallelConfig
accepts it only with overlap_p2p_comm and not batch_p2p_comm: the warm-up's and cool-down's
receives prefetched one iteration ahead into the receive rings); with dp each chunk gets its own DistributedDataParallel (wrap() over the
list). Megatron's activation recompute is
capture_megatron_tp.py's recompute_* fields (TransformerConfig's, through its
transformer_config()), run on every micro-batch over the stage's layers. With dp (the world is then
tp * dp * pp, Megatron's rank order tp, dp, pp; distributed_optimizer and grad_reduce_in_fp32 as
capture_megatron_dp.py's) the stage is wrapped by capture_megatron_dp.py's wrap() (its
DistributedDataParallel and get_megatron_optimizer's optimizer, with its stand-ins), and the
config gets what megatron/training/training.py sets: finalize_model_grads_func =
finalize_model_grads (run by the schedule before it returns) and grad_scale_func =
optimizer.scale_loss (the last stage's loss scaled in backward_step); no_sync_func stays None
(overlap_grad_reduce off). The step is then train_step's: zero_grad_buffer and zero_grad, the
schedule, optimizer.step().

The model as pretrain_gpt's model_provider builds it: GPTModel(pre_process = first stage,
post_process = last stage) under Float16Module; the config as megatron/training/arguments.py's
core_transformer_config_from_args makes it for a pipeline: deallocate_pipeline_outputs = True,
pipeline_dtype = params_dtype (bf16), batch_p2p_comm = not overlap_p2p_comm (True, the default).

The step, as megatron/training/training.py train_step runs it without Megatron's
DistributedDataParallel (as capture_megatron_tp.py): forward_backward_func(forward_step_func,
model=[model], num_microbatches, seq_length, micro_batch_size); the optimizer step (torch's,
capture.make_optimizer over the stage's parameters); zero_grad(set_to_none). forward_step_func
calls the model with input_ids, position_ids, attention_mask None and labels = input_ids (on
every stage; GPTModel reads the ids on the first stage only and the labels on the last) and
returns the legacy loss function, loss = sum(losses * loss_mask) / tokens with an empty dict,
which forward_step_calc_loss scales in place (* cp size, / num_microbatches). The batch's
input_ids, position_ids and loss_mask are made once on every stage (pretrain_gpt's get_batch
gives a middle stage none of them).

Stand-ins, beside capture_megatron_tp.py's, each outside what is allocated on the device:
- the point-to-point transfers: p2p_communication's _batched_p2p_ops (batch_isend_irecv of the
  sends and receives) does nothing and returns no requests (the fake group moves no data). The
  receive buffers are still made by P2PCommunicator._communicate's own create_tensor_recv_prev /
  create_tensor_recv_next (torch.empty of the tensor shape, [s/tp, b, h] under sequence
  parallelism, pipeline_dtype, requires_grad=True), before the transfer as the real one does.
  Under overlap_p2p_comm (the interleaved schedule) the transfers go through _p2p_ops (an
  isend or irecv an op), which likewise moves nothing but returns what the real one does: a
  request under each of its keys ("send_next", "recv_prev", "send_prev", "recv_next") for each
  tensor it was given, whose wait() does nothing and which holds no tensor. The schedule keeps
  them in its wait-handle lists; with overlap_p2p_comm_warmup_flush it asserts that a prefetched
  receive left one (the schedule's own bookkeeping, nothing on the device).
- torch.cuda.synchronize (batch_p2p_sync = True after each batch) does nothing.
- with variable_seq_lengths (--variable-seq-lengths, spec key variable_seq_lengths), each
  _communicate first runs _communicate_shapes: its int64 shape tensors are made by its own code
  (torch.empty((3,)) for each receive, torch.tensor(size) for each send), the exchange
  (torch.distributed.batch_isend_irecv, called directly) moves nothing, and a received shape's
  .tolist() gives the stage's tensor shape, what the peer sends when every micro-batch is as
  long (a fake tensor holds no values to read). megatron-core 0.16.1's TransformerConfig refuses
  variable_seq_lengths beside the default moe_token_dispatcher_type "allgather", a dense model's
  too, so the config takes "alltoall" (--moe-token-dispatcher-type alltoall), which a model
  without experts never reaches.
Phases: forward_step is the "fwd" phase of the micro-batch it runs, backward_step "bwd"; the
receive of an activation (recv_forward, send_backward_recv_forward) belongs to the forward that
reads it; send_forward_recv_backward (the steady state's send of a forward's output, with the
receive of the gradient of the oldest micro-batch in flight) to the forward that sent, and so
does the deallocation of its output that follows; the cool-down's recv_backward to its backward.
Interleaved: send_forward_recv_forward (a forward's output sent, the next activation received) to
the forward that sent, with the deallocation that follows it in the warm-up (with
overlap_p2p_comm_warmup_flush the prefetch before a warm-up forward, which sends nothing, to that
forward; the cool-down's prefetch before a backward to that backward);
send_backward_recv_backward (a backward's input gradient sent, the next output gradient
received) to the backward that reads what it receives. Without overlap_p2p_comm,
send_forward_backward_recv_forward_backward (the warm-up's last and each steady pair's transfers,
the activation received before the gradient) to the next backward, and so the deallocation after
it.
"""
import functools
import sys

import capture as C
import capture_tp as CT
import capture_megatron_tp as MT
import capture_megatron_dp as MD

SPEC_FIELDS = dict(MD.SPEC_FIELDS, pp=int, microbatches=int, rank=int, vp=int, group=int, overlap_p2p_comm=bool,
                   overlap_p2p_comm_warmup_flush=bool, variable_seq_lengths=bool)


def install_pp_stand_ins(torch):
    """The stand-ins of the docstring (the transfers; the synchronize)."""
    from megatron.core.pipeline_parallel import p2p_communication

    def no_transfer(**kw):
        return []
    p2p_communication._batched_p2p_ops = no_transfer

    class Request:
        def wait(self):
            return None

    def requests(**kw):
        # (_p2p_ops: one request a tensor given, under the same keys)
        keys = (("tensor_send_next", "send_next"), ("tensor_recv_prev", "recv_prev"),
                ("tensor_send_prev", "send_prev"), ("tensor_recv_next", "recv_next"))
        return {key: Request() for arg, key in keys if kw.get(arg) is not None}
    p2p_communication._p2p_ops = requests
    torch.cuda.synchronize = lambda *a, **k: None


def install_shape_stand_ins(torch, shape):
    """Under variable_seq_lengths (P2PCommunicator._communicate_shapes): the shape tensors are made
    by its own code, but the exchange moves nothing (batch_isend_irecv, which it calls directly,
    returns no requests) and a received shape tensor's .tolist() gives `shape`, what the peer of a
    uniform batch sends (a fake tensor holds no values to read)."""
    from megatron.core.pipeline_parallel import p2p_communication as P
    from torch._subclasses.fake_tensor import FakeTensor
    torch.distributed.batch_isend_irecv = lambda ops: []
    real = P.P2PCommunicator._communicate_shapes
    tolist = FakeTensor.tolist

    @functools.wraps(real)
    def communicate_shapes(self, *a, **k):
        def received(t):
            if t.dtype == torch.int64 and tuple(t.shape) == (3,):
                return list(shape)
            return tolist(t)
        FakeTensor.tolist = received
        try:
            return real(self, *a, **k)
        finally:
            FakeTensor.tolist = tolist
    P.P2PCommunicator._communicate_shapes = communicate_shapes


def tag_phases(rec, counts):
    """Records the phase of each schedule function as the docstring says (no allocation)."""
    from megatron.core.pipeline_parallel import schedules, p2p_communication as P
    step = lambda: rec.st

    def wrap(owner, name, ph, key):
        f = getattr(owner, name)

        @functools.wraps(f)
        def run(*a, **k):
            # (send_forward_recv_backward: the forward just run, counted already; but the warm-up
            # flush's prefetch, send_forward_recv_forward(output_tensor=None, ...) before a forward,
            # the forward about to run: it alone passes output_tensor by keyword)
            after = name in ("send_forward_recv_backward", "send_forward_recv_forward") and "output_tensor" not in k
            rec.phase(ph, step(), counts[key] - after)
            out = f(*a, **k)
            if name in ("forward_step", "backward_step"):
                counts[key] += 1
            return out
        setattr(owner, name, run)
    wrap(schedules, "forward_step", "fwd", "f")
    wrap(schedules, "backward_step", "bwd", "b")
    for name, ph, key in (("recv_forward", "fwd", "f"), ("send_backward_recv_forward", "fwd", "f"),
                          ("recv_backward", "bwd", "b"), ("send_forward_recv_backward", "fwd", "f"),
                          ("send_forward_recv_forward", "fwd", "f"), ("send_backward_recv_backward", "bwd", "b"),
                          ("send_forward_backward_recv_forward_backward", "bwd", "b")):
        wrap(P.P2PCommunicator, name, ph, key)


def capture(spec):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import megatron.core
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func
    tp, pp, dp = int(spec["tp"]), int(spec["pp"]), int(spec.get("dp", 1))
    world = tp * pp * dp
    rank = int(spec.get("rank", 0))
    m = int(spec["microbatches"])
    vp = int(spec.get("vp", 1))

    def stand_ins(torch):
        install_pp_stand_ins(torch)
        if dp > 1:
            MD.install_dp_stand_ins(torch)
    hf, cfg = MT.start(torch, spec, world, rank, more_stand_ins=stand_ins)
    # (core_transformer_config_from_args)
    cfg.deallocate_pipeline_outputs = True
    # (--variable-seq-lengths: each transfer's shape exchanged first, P2PCommunicator._communicate_shapes)
    cfg.variable_seq_lengths = bool(spec.get("variable_seq_lengths", False))
    if cfg.variable_seq_lengths:
        # (TransformerConfig.__post_init__ raises ValueError for variable_seq_lengths under the
        # default moe_token_dispatcher_type "allgather", a dense model's too: such a run passes
        # --moe-token-dispatcher-type alltoall, which a model without experts never uses)
        cfg.moe_token_dispatcher_type = "alltoall"
        # (get_tensor_shapes: [s / tp, b, h] under sequence parallelism)
        install_shape_stand_ins(torch, (int(spec["seq"]) // tp, int(spec["micro_batch"]), int(hf["hidden_size"])))
    if vp > 1:
        # (arguments.py: an interleaved schedule keeps overlap_p2p_comm, True unless
        # --no-overlap-p2p-communication, and core_transformer_config_from_args sets batch_p2p_comm =
        # not overlap_p2p_comm; microbatch_group_size_per_vp_stage is
        # --microbatch-group-size-per-virtual-pipeline-stage, else the config's pp)
        overlap = bool(spec.get("overlap_p2p_comm", True))
        cfg.overlap_p2p_comm, cfg.batch_p2p_comm = overlap, not overlap
        # (--overlap-p2p-communication-warmup-flush)
        cfg.overlap_p2p_comm_warmup_flush = bool(spec.get("overlap_p2p_comm_warmup_flush", False))
        if "group" in spec:
            cfg.microbatch_group_size_per_vp_stage = int(spec["group"])
    first, last = parallel_state.is_pipeline_first_stage(), parallel_state.is_pipeline_last_stage()
    rec = C.Recorder()
    fake = FakeTensorMode()
    counts = {"f": 0, "b": 0}
    with fake, C.make_mode(torch, rec), C.make_tagger(torch, rec):
        rec.phase("build")
        if vp > 1:
            # (training.py get_model: a GPTModel a model chunk, built in order, each with its
            # embedding or output layer where it is the pipeline's first or last virtual stage,
            # then each put under Float16Module; the ModuleList only names them)
            from megatron.core.transformer.module import Float16Module
            chunks = [MT.gpt_model(cfg, hf, spec, vp_stage=i, wrap=False,
                                   pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=i),
                                   post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=i))
                      for i in range(vp)]
            chunks = [Float16Module(cfg, c) for c in chunks]
            model = torch.nn.ModuleList(chunks)
        else:
            model = MT.gpt_model(cfg, hf, spec, pre_process=first, post_process=last)
        if dp > 1:
            # (training.py: the schedule finalizes the gradients; the loss scaled by the optimizer's
            # scale_loss, _scale_one under bf16, in the last stage's backward_step)
            from megatron.core.distributed.finalize_model_grads import finalize_model_grads
            if vp > 1:
                chunks, opt, rows = MD.wrap(torch, cfg, spec, chunks)
                model = torch.nn.ModuleList(chunks)
            else:
                model, opt, rows = MD.wrap(torch, cfg, spec, model)
            cfg.finalize_model_grads_func = finalize_model_grads
            cfg.grad_scale_func = opt.scale_loss
        else:
            model.train()
            params = [p for p in model.parameters() if p.requires_grad]
            opt = C.make_optimizer(torch, spec, params)
            rows = MT.param_rows(model)
        hooks = C.install_module_hooks(torch, model, rec)
        mb, seq = int(spec["micro_batch"]), int(spec["seq"])
        rec.phase("inputs")
        ids = torch.randint(0, hf["vocab_size"], (mb, seq), device="cuda")
        pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mb, -1)
        loss_mask = torch.ones((mb, seq), dtype=torch.float, device="cuda")

        def loss_func(losses):
            return torch.sum(losses.view(-1).float() * loss_mask.view(-1)) / (mb * seq), {}

        def forward_step_func(data_iterator, model):
            return model(ids, pos, None, labels=ids), loss_func
        tag_phases(rec, counts)
        fb = get_forward_backward_func()
        steps = []
        for step in range(int(spec.get("steps", 2))):
            rec.peak = rec.live
            row = {"e": "step", "st": step, "live_start": rec.live}
            counts["f"] = counts["b"] = 0
            if dp > 1:
                # (train_step: the grad buffer zeroed before the schedule)
                rec.phase("zero_grad", step)
                for c in (chunks if vp > 1 else [model]):
                    c.zero_grad_buffer()
                opt.zero_grad()
            rec.phase("fwd", step, 0)
            with torch.autograd.graph.saved_tensors_hooks(rec.save, lambda t: t):
                fb(forward_step_func=forward_step_func, data_iterator=[None] * vp if vp > 1 else None,
                   model=chunks if vp > 1 else [model],
                   num_microbatches=m, seq_length=seq, micro_batch_size=mb, forward_only=False)
            row["after_fwd"] = row["after_bwd"] = rec.live
            rec.phase("optim", step)
            if dp > 1:
                ok, _, _ = opt.step()
                assert ok, "the optimizer step was skipped"
            else:
                opt.step()
            row["after_opt"] = rec.live
            if dp == 1:
                rec.phase("zero_grad", step)
                opt.zero_grad(set_to_none=True)
            row["live_end"] = rec.live
            row["peak"] = rec.peak
            rec.phase("end", step)
            steps.append(row)
        for h in hooks:
            h.remove()
        buffers = MD.buffer_rows(chunks if vp > 1 else model) if dp > 1 else []
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "megatron-core": megatron.core.__version__,
                           "transformers": None, "peft": None, "python": sys.version.split()[0]},
              "world_size": world, "rank": rank, "device": "cuda (fake)", "process_group": "fake",
              "parallel": {"tp": tp, "pp": pp, "tp_impl": "megatron", "sequence_parallel": True,
                           "pp_schedule": "Interleaved1F1B" if vp > 1 else "1F1B", "microbatches": m,
                           **({"variable_seq_lengths": True} if cfg.variable_seq_lengths else {}),
                           **({"vp": vp, "overlap_p2p_comm": cfg.overlap_p2p_comm,
                               "overlap_p2p_comm_warmup_flush": cfg.overlap_p2p_comm_warmup_flush,
                               "microbatch_group_size_per_vp_stage": cfg.microbatch_group_size_per_vp_stage}
                              if vp > 1 else {}), "first_stage": first, "last_stage": last,
                           **{k: spec[k] for k in MT.RECOMPUTE if k in spec},
                           **({"dp": dp, "distributed_optimizer": bool(spec.get("distributed_optimizer", True)),
                               "grad_reduce_in_fp32": bool(spec.get("grad_reduce_in_fp32", True))} if dp > 1 else {})},
              "param_bytes": sum(r["bytes"] for r in rows)}
    return [header] + buffers + [dict(e="param", **r) for r in rows] + rec.events + steps


def check_spec(path):
    spec, bad = CT.read_spec(path, "capture_megatron_pp", SPEC_FIELDS,
                             ("name", "config", "micro_batch", "seq", "precision", "tp", "pp", "microbatches", "layers"))
    if spec["precision"] != "bf16":
        bad(f"precision {spec['precision']!r}: the Megatron capture takes bf16 (Float16Module)")
    if spec["tp"] < 2 or spec["pp"] < 2:
        bad("tp and pp must be at least 2")
    if spec["layers"] % (spec["pp"] * spec.get("vp", 1)):
        bad("layers must be a multiple of pp x vp (Megatron's even split)")
    if "overlap_p2p_comm" in spec and (spec.get("vp", 1) < 2 or (not spec["overlap_p2p_comm"] and spec["pp"] < 3)):
        bad("overlap_p2p_comm is the interleaved schedule's (vp > 1); false needs pp > 2 (arguments.py asserts it)")
    if spec.get("overlap_p2p_comm_warmup_flush") and (spec.get("vp", 1) < 2 or not spec.get("overlap_p2p_comm", True)):
        bad("overlap_p2p_comm_warmup_flush is the interleaved schedule's (vp > 1) and needs overlap_p2p_comm "
            "(ModelParallelConfig raises ValueError without it)")
    if "group" in spec and spec.get("vp", 1) < 2:
        bad("group (microbatch_group_size_per_vp_stage) is the interleaved schedule's: it needs vp > 1")

    return spec


if __name__ == "__main__":
    CT.main(__doc__, check_spec, capture)
