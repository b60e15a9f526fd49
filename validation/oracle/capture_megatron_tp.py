#!/usr/bin/env python3
"""The oracle's capture of Megatron-LM's tensor parallelism: one rank of megatron-core's GPTModel
(megatron-core 0.16.1, the local layer spec get_gpt_layer_local_spec: no TransformerEngine) at
tensor parallelism tp with sequence parallelism, run on fake CUDA tensors in a fake process
group (torch.testing._internal.distributed.fake_pg.FakeStore), written in capture.py's format.

  capture_megatron_tp.py SPEC.json [-o OUT.jsonl.gz]

A spec (validation/oracle/specs_megatron/) is capture_tp.py's: an HF Llama-shaped config (RMSNorm,
SwiGLU, RoPE, grouped-query attention, no biases), layers, micro_batch, seq, precision bf16,
optimizer, tp, and optionally Megatron's activation recompute as TransformerConfig's fields of
the same names: recompute_granularity ("selective" or "full"), recompute_method ("uniform" or
"block"), recompute_num_layers, recompute_modules (selective's; default ["core_attn"]). The model: TransformerConfig from the HF config (hidden_size, num_attention_heads,
num_query_groups = num_key_value_heads, ffn_hidden_size = intermediate_size, kv_channels,
RMSNorm with its eps, gated_linear_unit with silu, add_bias_linear False, rope with rope_theta,
untied output layer, params_dtype bf16, dropout 0, no fusions that need Apex or TE:
gradient_accumulation_fusion, bias_activation_fusion, masked_softmax_fusion, apply_rope_fusion,
persist_layer_norm all False), parallel_state.initialize_model_parallel(tp) over the fake group,
GPTModel built on the device, .cuda() and wrapped in Float16Module as Megatron's get_model does.

Stand-ins, each outside what is measured:
- megatron/core/transformer/torch_norm.py:32 asserts `not config.sequence_parallel` in
  WrappedTorchNorm, the norm the local spec takes for RMSNorm (LocalSpecProvider.layer_norm,
  megatron/core/models/backends.py: rms_norm -> WrappedTorchNorm, Apex or not): Megatron runs
  RMSNorm under sequence parallelism only with TransformerEngine's TENorm. The norms are built
  with a copy of the config that has sequence_parallel False: torch.nn.RMSNorm on the rank's
  sequence shard, which is where TENorm runs too (its kernel's saved tensors are not TE's).
- the CUDA RNG tracker (tensor_parallel/random.py): its states are host tensors and its fork a
  no-op here (dropout is 0; nothing is allocated on the device by it). The same stand-in serves
  the recompute's CheckpointFunction, which copies and restores the RNG states around its
  recomputation (_get_all_rng_states, _fork_rng): host tensors, no device allocation.
- parallel_state without Gloo groups (create_gloo_process_groups False: the fake store has no
  Gloo; the Gloo groups serve checkpointing and the distributed optimizer on the host).

The step, as pretrain_gpt's forward_step and loss_func run it: the model called with input_ids,
position_ids = arange(seq), attention_mask None (causal) and labels = input_ids, which returns
each token's loss (vocab_parallel_cross_entropy over the rank's vocabulary shard, fp32, [b, s]);
loss = sum(losses * loss_mask) / tokens; backward; the optimizer step; zero_grad(set_to_none).
The optimizer is torch's (capture.make_optimizer) over the rank's parameters: Megatron's
DistributedDataParallel (main_grad buffers) and its optimizer wrapper are not run, nor
finalize_model_grads (the all-reduce of the norms' gradients over tp).
"""
import contextlib
import dataclasses
import os
import sys

import capture as C
import capture_tp as CT

# Megatron's activation recompute, as its TransformerConfig fields of the same names
# (--recompute-granularity, --recompute-method, --recompute-num-layers, --recompute-modules)
RECOMPUTE = dict(recompute_granularity=str, recompute_method=str, recompute_num_layers=int, recompute_modules=list)
SPEC_FIELDS = dict(C.SPEC_FIELDS, tp=int, **RECOMPUTE)
for k in ("lora", "checkpointing", "checkpoint_every", "grad_accum", "build", "attention", "strategy"):
    SPEC_FIELDS.pop(k, None)


def install_stand_ins(torch):
    """The stand-ins of the docstring (a GPU's RNG; the RMSNorm's assertion)."""
    import megatron.core.tensor_parallel.random as mrandom
    from megatron.core.transformer import torch_norm
    torch.cuda.get_rng_state = lambda *a, **k: torch.zeros(16, dtype=torch.uint8)
    torch.cuda.manual_seed = lambda *a, **k: None
    mrandom._set_cuda_rng_state = lambda *a, **k: None
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.zeros(16, dtype=torch.uint8)

    @contextlib.contextmanager
    def fork(self, name=None):
        yield
    mrandom.CudaRNGStatesTracker.fork = fork
    new = torch_norm.WrappedTorchNorm.__new__

    def norm_new(cls, config, hidden_size, eps=1e-5, **kw):
        return new(cls, dataclasses.replace(config, sequence_parallel=False), hidden_size, eps, **kw)
    torch_norm.WrappedTorchNorm.__new__ = norm_new


def transformer_config(torch, hf, spec):
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig
    heads = hf["num_attention_heads"]
    return TransformerConfig(
        num_layers=int(spec.get("layers") or hf["num_hidden_layers"]),
        hidden_size=hf["hidden_size"], num_attention_heads=heads,
        num_query_groups=hf.get("num_key_value_heads", heads),
        kv_channels=hf.get("head_dim") or hf["hidden_size"] // heads,
        ffn_hidden_size=hf["intermediate_size"], normalization="RMSNorm",
        layernorm_epsilon=hf.get("rms_norm_eps", 1e-5), gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, add_qkv_bias=False, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=int(spec["tp"]), sequence_parallel=True,
        pipeline_model_parallel_size=int(spec.get("pp", 1)),
        virtual_pipeline_model_parallel_size=spec.get("vp"),
        perform_initialization=False, use_cpu_initialization=False, gradient_accumulation_fusion=False,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        persist_layer_norm=False, hidden_dropout=0.0, attention_dropout=0.0,
        **{k: spec[k] for k in RECOMPUTE if k in spec})


def param_rows(model):
    return [{"name": n, "shape": list(p.shape), "dtype": C.dtype_name(p.dtype),
             "bytes": p.untyped_storage().nbytes(), "trainable": p.requires_grad}
            for n, p in model.named_parameters()]


def start(torch, spec, world, rank=0, more_stand_ins=None):
    """megatron-core's model-parallel state over the oracle's fake CUDA and a fake process group of
    `world` ranks (this one `rank`), tp, pp (default 1) and vp (the virtual pipeline size, default
    none) the spec's, with this file's stand-ins (and more_stand_ins'
    after them): the config and Megatron's TransformerConfig of it."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    sys.path.insert(0, C.HERE)
    import fake_dist
    from megatron.core import parallel_state, tensor_parallel
    # gpt_model's modules, imported before the capture's FakeTensorMode: importing them makes
    # module-level tensors, which are not the run's
    import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401
    import megatron.core.transformer.module  # noqa: F401
    C.enable_fake_cuda(torch)
    # (torch.nn.RMSNorm calls F.rms_norm: on CUDA one fused kernel, as capture.py runs it)
    C.install_fused_rms_norm(torch)
    fake_dist.install_fake_streams(torch, world)
    install_stand_ins(torch)
    if more_stand_ins:
        more_stand_ins(torch)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(spec["tp"]),
                                             pipeline_model_parallel_size=int(spec.get("pp", 1)),
                                             virtual_pipeline_model_parallel_size=spec.get("vp"),
                                             create_gloo_process_groups=False)
    tensor_parallel.model_parallel_cuda_manual_seed(0)
    hf = dict(C.load_config(spec))
    return hf, transformer_config(torch, hf, spec)


def gpt_model(cfg, hf, spec, pre_process=True, post_process=True, vp_stage=None, wrap=True):
    """GPTModel from the local layer spec on the GPU, under Float16Module (bf16); a pipeline
    stage's (pre_process: it holds the embedding, post_process: the final norm and the output
    layer, as pretrain_gpt's model_provider passes them; vp_stage: the model chunk of an
    interleaved pipeline, which picks its layers; wrap False: the GPTModel, not yet under
    Float16Module, as get_model holds each chunk until all are built)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.module import Float16Module
    model = GPTModel(cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                     vocab_size=hf["vocab_size"], max_sequence_length=int(spec["seq"]),
                     position_embedding_type="rope", rotary_base=int(hf.get("rope_theta", 10000)),
                     share_embeddings_and_output_weights=bool(hf.get("tie_word_embeddings", False)),
                     pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)
    model.cuda()
    return Float16Module(cfg, model) if wrap else model


def capture(spec):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import megatron.core
    tp = int(spec["tp"])
    hf, cfg = start(torch, spec, tp)
    rec = C.Recorder()
    fake = FakeTensorMode()
    with fake, C.make_mode(torch, rec), C.make_tagger(torch, rec):
        rec.phase("build")
        model = gpt_model(cfg, hf, spec)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = C.make_optimizer(torch, spec, params)
        hooks = C.install_module_hooks(torch, model, rec)
        rows = param_rows(model)
        mb, seq = int(spec["micro_batch"]), int(spec["seq"])
        rec.phase("inputs")
        ids = torch.randint(0, hf["vocab_size"], (mb, seq), device="cuda")
        pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mb, -1)
        loss_mask = torch.ones((mb, seq), dtype=torch.float, device="cuda")

        def loss_fn():
            losses = model(ids, pos, None, labels=ids)
            return torch.sum(losses.view(-1).float() * loss_mask.view(-1)) / (mb * seq)
        steps = C.run_steps(torch, rec, spec, opt, rec.save, loss_fn)
        for h in hooks:
            h.remove()
    header = {"e": "header", "format": "vrsim-oracle/1", "spec": spec,
              "versions": {"torch": torch.__version__, "megatron-core": megatron.core.__version__,
                           "transformers": None, "peft": None, "python": sys.version.split()[0]},
              "world_size": tp, "rank": 0, "device": "cuda (fake)", "process_group": "fake",
              "parallel": dict({"tp": tp, "tp_impl": "megatron", "sequence_parallel": True},
                               **{k: spec[k] for k in RECOMPUTE if k in spec}),
              "param_bytes": sum(r["bytes"] for r in rows)}
    return [header] + [dict(e="param", **r) for r in rows] + rec.events + steps


def check_spec(path):
    spec, bad = CT.read_spec(path, "capture_megatron_tp", SPEC_FIELDS,
                             ("name", "config", "micro_batch", "seq", "precision", "tp"))
    if spec["precision"] != "bf16":
        bad(f"precision {spec['precision']!r}: the Megatron capture takes bf16 (Float16Module)")
    if spec["tp"] < 2:
        bad("tp must be at least 2")
    return spec


if __name__ == "__main__":
    CT.main(__doc__, check_spec, capture)
