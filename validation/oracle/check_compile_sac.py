#!/usr/bin/env python3
"""What torch.compile's partitioner saves of a decoder layer under torchtitan's op-level selective
activation checkpointing (activation_checkpoint.mode = "selective", selective_ac_option = "op":
apply_ac wraps each block in ptd_checkpoint_wrapper with a context_fn of
create_selective_checkpoint_contexts(policy), apply_compile then compiles each wrapped block).

Dynamo traces the wrapper's torch.utils.checkpoint as the tag_activation_checkpoint higher-order
op; AOTAutograd runs its body as torch/_higher_order_ops/wrap.py tag_activation_checkpoint_impl
does: a non-reentrant checkpoint (preserve_rng_state and early_stop off) under
fx.traceback.preserve_node_meta, with the context_fn's caching mode writing the policy's answer
for every aten op into the node's "recompute" meta (utils/checkpoint.py
_CachingTorchDispatchMode: MUST_SAVE, or PREFER_RECOMPUTE). The min-cut partitioner then sends
every PREFER_RECOMPUTE node to the sink (must_recompute) and bans every MUST_SAVE node from
recomputation (should_ban_recomputation): the forward saves the MUST_SAVE outputs backward
reads, directly or to recompute what it reads, and the layer's inputs.

This traces capture_compile.py's Llama-2-7B layer (fake CUDA, Inductor's decompositions, the
min-cut partition) with the layer so wrapped, the policy torchtitan's (capture.py
torchtitan_op_sac_context: compute-intensive ops and aten.max saved, every second aten.mm
recomputed), for bf16, amp_bf16 and torchao's float8 tensorwise and rowwise; SDPA's backend flash, as torchtitan's
Llama runs on an H100. It records the saved set as capture_compile.py does, and the policy's tag
of each forward node that makes a saved activation.

Then the same through dynamo itself, on the CPU (dynamo_cpu): a tiny layer in ptd_checkpoint_wrapper,
torch.compile(fullgraph=True) with an aot_autograd backend around the partitioner.

  check_compile_sac.py [-o validation/oracle/captures/compile_sac_op_l1.json]

What it shows (torch 2.13, transformers 5.25, torchao 0.18): the saved set is the layer's input,
the rotary tables, q's, v's and gate's GEMM outputs (the first, third and fifth aten.mm; the
seventh, down_proj's, is MUST_SAVE but the backward graph never reads it), and the flash
kernel's output, log-sum-exp and RNG seed and offset; every other op is recomputed. Under float8
the GEMM outputs are the same (Float8Linear calls torch.mm on its float8 tensors: the policy
counts that aten.mm, the _scaled_mm beneath it is tagged with it), plus, tensorwise, the casts' amax
scalars (aten.max is in the save list) and inverse scales, rowwise, the saved GEMMs' inputs'
inverse row scales. Dynamo's trace saves the same three GEMM
outputs, tagged MUST_SAVE.

tests/test_compile.sh holds vrsim's saved set (training.compile with checkpoint_scope = "op",
checkpoint_impl = "wrapper") to it."""
import argparse
import functools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
import capture_compile as CC  # noqa: E402

CONFIGS = {k: CC.CONFIGS[k] for k in ("bf16", "amp_bf16", "float8_tensorwise", "float8_rowwise")}


def hop_checkpointed(torch, layer):
    """The layer as AOTAutograd traces dynamo's tag_activation_checkpoint of it (wrap.py
    tag_activation_checkpoint_impl): a module (so that its parameters are the layer's) whose
    forward is that function's checkpoint call, with torchtitan's context_fn."""
    import torch.fx.traceback as fx_traceback
    from torch.utils.checkpoint import checkpoint
    context_fn = C.torchtitan_op_sac_context(torch)

    class Hop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, *args, **kwargs):
            def context_fn_with_graph_id():
                fwd_ctx, recomp_ctx = context_fn()
                fwd_ctx.ac_graph_id = 1
                return fwd_ctx, recomp_ctx
            with fx_traceback.preserve_node_meta():
                return checkpoint(self.layer, *args, use_reentrant=False, preserve_rng_state=False,
                                  early_stop=False, context_fn=context_fn_with_graph_id, **kwargs)
    return Hop()


def traced(torch, name, spec):
    """capture_compile.saved_of with the layer checkpointed under the op-level policy, and the
    policy's tags of the forward graph: {node name: "MUST_SAVE" | "PREFER_RECOMPUTE"} as the
    partitioner saw them (read off the joint graph it was handed)."""
    from torch._functorch import partitioners
    tags = {}
    orig_layer_of = CC.layer_of

    def layer_of(model):
        layer, rotary = orig_layer_of(model)
        return hop_checkpointed(torch, layer), rotary

    real = partitioners.min_cut_rematerialization_partition

    @functools.wraps(real)
    def partition(joint, joint_inputs, **kw):
        for n in joint.graph.nodes:
            r = n.meta.get("recompute")
            if r is not None:
                tags[n.name] = r.name
        return real(joint, joint_inputs, **kw)
    import functorch.compile as fc   # saved_of imports the partitioner from here as it runs
    CC.layer_of, fc.min_cut_rematerialization_partition = layer_of, partition
    try:
        rec = CC.saved_of(torch, name, spec)
    finally:
        CC.layer_of, fc.min_cut_rematerialization_partition = orig_layer_of, real
    # (saved_of must have run the wrapped layer through the patched partitioner)
    if not tags or "MUST_SAVE" not in tags.values():
        raise SystemExit("check_compile_sac: the partitioner saw none of the policy's tags: capture_compile.saved_of "
                         "no longer takes its layer from layer_of or its partitioner from functorch.compile")
    for row in rec["saved"]:
        row["tag"] = tags.get(row["storage"], "untagged")
    rec["tags"] = {k: sum(1 for v in tags.values() if v == k) for k in sorted(set(tags.values()))}
    return rec


def dynamo_cpu(torch, adapt=None):
    """The same through dynamo itself: a tiny transformers Llama layer (hidden 64, fp32, batch 2 x
    16) on the CPU wrapped in ptd_checkpoint_wrapper with the policy's context_fn, as torchtitan's
    apply_ac does, then torch.compile(fullgraph=True) as its apply_compile does, with an
    aot_autograd backend around the min-cut partitioner (Inductor's codegen is not run). Returns
    what the partitioner saved (op, shape, tag) and the tags' counts: the check that dynamo's
    tag_activation_checkpoint carries the policy's answers to the partitioner as traced() emulates
    it. (On the CPU SDPA is _scaled_dot_product_flash_attention_for_cpu, not in the save list:
    recomputed here.) adapt: a function of the LlamaForCausalLM returning (the model to keep, its
    base LlamaForCausalLM), e.g. peft's get_peft_model (check_compile_sac_lora.py); forward_mm_tags
    lists the policy's tag of each aten.mm of the forward graph, in order."""
    import torch._dynamo
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from transformers import LlamaConfig, LlamaForCausalLM
    torch._dynamo.reset()
    # transformers' layer writes its output-capturing context inside the checkpoint
    # (check_compile_hf_ckpt.py); torchtitan's own block has no such write
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=4, num_hidden_layers=1, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    model, base_model = adapt(model) if adapt else (model, model)
    layer, rotary = base_model.model.layers[0], base_model.model.rotary_emb
    wrapped = checkpoint_wrapper(layer, context_fn=C.torchtitan_op_sac_context(torch), preserve_rng_state=False)
    graphs, tags = {}, {}

    def fw(gm, _inputs):
        graphs["fw"] = gm
        return make_boxed_func(gm.forward)

    def partition(joint, joint_inputs, **kw):
        for n in joint.graph.nodes:
            if n.meta.get("recompute") is not None:
                tags[n.name] = n.meta["recompute"].name
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)
    backend = aot_autograd(fw_compiler=fw, bw_compiler=lambda gm, _i: make_boxed_func(gm.forward),
                           partition_fn=partition)
    compiled = torch.compile(wrapped, backend=backend, fullgraph=True)
    x = torch.randn(2, 16, 64, requires_grad=True)
    cos, sin = rotary(x, torch.arange(16)[None])
    out = compiled(x, position_embeddings=(cos, sin), attention_mask=None)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    gm = graphs["fw"]
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    saved = []
    for n in outs[1:]:
        v = n.meta.get("val")
        if v is None:
            continue
        base = CC.view_root(torch, n)
        saved.append({"name": n.name, "node": base.name, "op": str(base.target) if base.op == "call_function" else base.op,
                      "shape": [d if isinstance(d, int) else str(d) for d in v.shape],
                      "tag": tags.get(base.name, "untagged")})
    mm_tags = [tags[n.name] for n in gm.graph.nodes if n.op == "call_function" and str(n.target) == "aten.mm.default"
               and n.name in tags]
    return {"model": "LlamaDecoderLayer, hidden 64, intermediate 128, 4 heads, fp32, CPU, batch 2 x 16",
            "tags": {k: sum(1 for v in tags.values() if v == k) for k in sorted(set(tags.values()))},
            "forward_mm_tags": mm_tags, "saved": saved}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_sac_op_l1.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    cpu = dynamo_cpu(torch)   # first: the fake CUDA device and SDPA's backend are process-wide
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "flash")
    recs = [traced(torch, name, spec) for name, spec in CONFIGS.items()]
    # dynamo's path and the emulation agree: the GEMM outputs saved are the same tagged ones
    # (q, v and gate: the odd aten.mm but down_proj's, which backward never reads)
    cpu_mm = [x["name"] for x in cpu["saved"] if x["op"] == "aten.mm.default" and x["tag"] == "MUST_SAVE"]
    fake_mm = [x["name"] for x in recs[0]["saved"] if x["name"].startswith("mm")]
    assert len(cpu_mm) == len(fake_mm) == 3, (cpu_mm, fake_mm)
    print("dynamo (CPU) tags", cpu["tags"], "saved", [(x["op"], x["shape"], x["tag"]) for x in cpu["saved"]])
    for r in recs:
        acts = [x for x in r["saved"] if x["kind"] != "param"]
        print(r["config"], "tags", r["tags"], "saved", [(x["name"], x["shape"], x["dtype"], x["tag"]) for x in acts])
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": "scenarios/configs/llama-2-7b-hf.json, 1 layer, batch 1", "sdpa": "flash",
            "checkpoint": "tag_activation_checkpoint body (wrap.py), context_fn torchtitan's op-level policy"}
    for mod in ("peft", "torchao"):
        try:
            head[mod] = __import__(mod).__version__
        except ImportError:
            pass
    with open(args.o + ".tmp", "w") as fh:
        json.dump({"header": head, "records": recs, "dynamo_cpu": cpu}, fh, indent=1)
        fh.write("\n")
    os.replace(args.o + ".tmp", args.o)
    print(args.o)


if __name__ == "__main__":
    main()
