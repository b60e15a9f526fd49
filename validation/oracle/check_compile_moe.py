#!/usr/bin/env python3
"""What torch.compile makes of a mixture-of-experts decoder layer (transformers' Qwen3-MoE,
grouped_mm experts, the default experts_implementation): which parts dynamo captures, where it
graph-breaks, and what the min-cut partitioner saves of the compiled layer for backward.

  check_compile_moe.py [-o validation/oracle/captures/compile_moe_l1.json]

1. dynamo, on the CPU: a tiny Qwen3MoeForCausalLM (2 layers, hidden 64, 8 experts, top 2, bf16)
   with each decoder layer compiled (nn.Module.compile(), Inductor, as vrsim compiles layers),
   one training step: dynamo's counters (frames, graphs, graph breaks and their reasons), and
   torch._dynamo.explain of one layer (its graphs and the aten-level ops of interest in them:
   topk, sort, histc, cumsum, grouped_mm, index_put). The same with experts_implementation =
   "eager" (the per-expert loop: nonzero/where and a Python loop over the hit experts) and with
   fp32 weights (amp: transformers swaps the grouped GEMM for its opaque
   transformers::grouped_mm_fallback custom op under dynamo when the weights are not bf16); and
   tiny MixtralForCausalLM, GptOssForCausalLM, DeepseekV3ForCausalLM and DeepseekV2ForCausalLM
   the same way (grouped_mm, bf16; DeepSeek's with multi-head latent attention, grouped routing
   and a shared expert).
2. the partition: AOTAutograd traces a decoder layer of scenarios/configs/qwen3-30b-a3b.json,
   mixtral-8x7b.json, gpt-oss-20b.json (its second layer, full attention, eager with the sinks),
   deepseek-v3.json and deepseek-v2-lite.json (every layer sparse: first_k_dense_replace 0; V2-Lite
   also with V2's group-limited routing, 8 groups, 3 kept)
   (1 x 256 tokens, bf16, cuDNN SDPA) on fake CUDA tensors with Inductor's decompositions and
   min_cut_rematerialization_partition (aot_partition.py, as capture_compile.py takes it: the
   parameters and buffers static inputs, those from_pretrained keeps in fp32 in fp32); the
   forward graph's outputs past the layer's own are what it saves for backward.

Writes one JSON (header, "dynamo": the runs of 1., "records": the saved set of 2., as
capture_compile.py writes them, with each saved tensor's storage shape); tests/test_compile.sh
holds vrsim's note to it."""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
from aot_partition import forward_graph, saved_tensors, view_root  # noqa: E402

SEQ = 256
SPLITS = ("aten.split.", "aten.split_with_sizes.", "aten.unbind.", "aten.chunk.")
# the aten ops whose presence in a captured graph says where the dispatch runs
WATCH = ("topk", "sort", "histc", "cumsum", "_grouped_mm", "grouped_mm", "index_put", "nonzero",
         "grouped_mm_fallback", "_scaled_dot_product", "_softmax")


def tiny(family, impl):
    """A tiny model of the family (2 layers, hidden 64, 8 experts, top 2)."""
    import transformers
    kw = {} if impl is None else {"experts_implementation": impl}
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, num_hidden_layers=2, num_experts_per_tok=2, **kw)
    if family == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(num_local_experts=8, **common))
    if family in ("deepseek_v2", "deepseek_v3"):
        # multi-head latent attention, grouped routing (4 groups, 2 kept), one shared expert,
        # every layer sparse
        mla = dict(common, num_key_value_heads=4, head_dim=8, n_routed_experts=8, n_shared_experts=1,
                   moe_intermediate_size=32, first_k_dense_replace=0, kv_lora_rank=16,
                   qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=4, topk_group=2)
        if family == "deepseek_v2":
            return transformers.DeepseekV2ForCausalLM(transformers.DeepseekV2Config(
                q_lora_rank=None, topk_method="group_limited_greedy", **mla))
        return transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(q_lora_rank=32, **mla))
    if family == "gpt_oss":
        return transformers.GptOssForCausalLM(transformers.GptOssConfig(
            num_local_experts=8, layer_types=["sliding_attention", "full_attention"], **common))
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        moe_intermediate_size=32, num_experts=8, norm_topk_prob=True, **common))


def dynamo_run(torch, family, impl, dtype):
    """One training step of the tiny model with every decoder layer compiled; explain of one."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    m = tiny(family, impl).to(dtype)
    x = torch.randn(2, 16, 64, dtype=dtype, requires_grad=True)
    # (cos, sin), or DeepSeek-V2's complex freqs_cis
    pe = m.model.rotary_emb(x, torch.arange(16)[None])
    ex = torch._dynamo.explain(m.model.layers[0])(x, position_embeddings=pe, attention_mask=None)
    ops = set()
    for g in ex.graphs:
        for n in g.graph.nodes:
            if n.op == "call_function":
                name = getattr(n.target, "__name__", str(n.target))
                for w in WATCH:
                    if w in name or w in str(n.target):
                        ops.add(name)
    torch._dynamo.reset()
    counters.clear()
    for layer in m.model.layers:
        layer.compile()
    m.train()
    ids = torch.randint(0, 128, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.float32):
        loss = m(input_ids=ids, labels=ids).loss
    loss.backward()
    breaks = {r[:400]: n for r, n in counters["graph_break"].items()}
    return {"family": family, "experts_implementation": m.config._experts_implementation,
            "weights": str(dtype).replace("torch.", ""),
            "explain": {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
                        "ops": len(ex.ops_per_graph and sum(ex.ops_per_graph, []) or []),
                        "watched_ops": sorted(ops),
                        "break_reasons": [str(b.reason)[:300] for b in ex.break_reasons]},
            "step": {"frames": dict(counters["frames"]),
                     "unique_graphs": counters["stats"].get("unique_graphs", 0),
                     "graph_breaks": breaks}}


def storage_root(torch, n):
    """The node whose storage n shares: through views (view_root) and through the outputs of a
    split (getitem of split, split_with_sizes, unbind, chunk: views of their input), which
    view_root leaves as nodes of their own."""
    import operator
    while True:
        n = view_root(torch, n)
        src = n.args[0] if n.op == "call_function" and n.target is operator.getitem and n.args else None
        if isinstance(src, torch.fx.Node) and src.op == "call_function" and str(src.target).startswith(SPLITS):
            n = src.args[0]
            continue
        return n


def config_path(config, overrides):
    """scenarios/configs/CONFIG, or a copy of it with the keys `overrides` replaced."""
    path = os.path.join(HERE, "..", "..", "scenarios/configs", config)
    if overrides:
        hf = json.load(open(path))
        hf.update(overrides)
        path = os.path.join(tempfile.mkdtemp(), config)
        with open(path, "w") as fh:
            json.dump(hf, fh)
    return path


def layer_forward_graph(torch, model, layer_index, attention):
    """The partition's forward graph of decoder layer `layer_index` of `model` (a transformers
    CausalLM built under the FakeTensorMode this is called in) at 1 x SEQ, bf16, and how many of
    its inputs are the layer's parameters and buffers. Under eager attention the layer gets the
    additive causal mask (bf16, 1 x 1 x SEQ x SEQ) the model would hand it."""
    # from_pretrained keeps these in fp32 whatever the dtype (DeepSeek's router weight and
    # correction bias); the cast of the whole model made them bf16
    for key in getattr(model, "_keep_in_fp32_modules_strict", None) or []:
        for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
            if key in pname:
                t.data = t.data.float()
    layer, rotary = model.model.layers[layer_index], model.model.rotary_emb
    h = model.config.hidden_size
    x = torch.randn(1, SEQ, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    # (cos, sin), or DeepSeek-V2's complex freqs_cis
    pe = rotary(x, torch.arange(SEQ, device="cuda")[None])
    mask = None
    if attention == "eager":
        mask = torch.full((SEQ, SEQ), torch.finfo(torch.bfloat16).min, device="cuda",
                          dtype=torch.bfloat16).triu(1)[None, None]
    # the buffers (DeepSeek-V3's router's e_score_correction_bias) as inputs too
    params = {**dict(layer.named_parameters()), **dict(layer.named_buffers())}

    def f(params, x, pe, mask):
        return torch.func.functional_call(layer, params, (x,),
                                          {"position_embeddings": pe, "attention_mask": mask})

    return forward_graph(f, (params, x, pe, mask), len(params)), len(params)


def saved_rows(torch, gm, n_static):
    """What forward graph gm saves, one row a tensor (as the capture's "saved" lists them), its
    storage through views and splits (storage_root)."""
    rows = []
    for n, v, base, kind in saved_tensors(torch, gm, n_static, storage_root):
        sv = base.meta.get("val")
        rows.append({"name": n.name, "shape": list(v.shape), "dtype": C.dtype_name(v.dtype),
                     "storage_shape": list(sv.shape) if hasattr(sv, "shape") else list(v.shape),
                     "bytes": v.numel() * v.element_size(), "kind": kind, "storage": base.name,
                     "op": str(base.target) if base.op == "call_function" else base.op})
    return rows


def saved_set(torch, name, config, layer_index=0, overrides=None, attention="sdpa"):
    """The partition of decoder layer `layer_index` of `config` (its keys `overrides` replaced) at
    1 x SEQ (fake CUDA, bf16; layer_forward_graph)."""
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    spec = {"precision": "bf16", "layers": layer_index + 1, "config": config_path(config, overrides),
            "attention": attention}
    with FakeTensorMode():
        model, _ = C.build_model(torch, transformers, spec, None)
        gm, n_static = layer_forward_graph(torch, model, layer_index, attention)
    return {"config": name, "model": "scenarios/configs/" + config, "layer": layer_index,
            "overrides": overrides or {}, "attention": attention, "seq": SEQ, "precision": "bf16",
            "saved": saved_rows(torch, gm, n_static)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_moe_l1.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    dyn = [dynamo_run(torch, "qwen3_moe", None, torch.bfloat16),
           dynamo_run(torch, "qwen3_moe", "eager", torch.bfloat16),
           dynamo_run(torch, "qwen3_moe", None, torch.float32),
           dynamo_run(torch, "mixtral", None, torch.bfloat16),
           dynamo_run(torch, "gpt_oss", None, torch.bfloat16),
           dynamo_run(torch, "deepseek_v3", None, torch.bfloat16),
           dynamo_run(torch, "deepseek_v2", None, torch.bfloat16)]
    for d in dyn:
        print(d["family"], d["experts_implementation"], d["weights"], "explain:", d["explain"]["graphs"], "graphs,",
              d["explain"]["graph_breaks"], "breaks; step:", d["step"]["unique_graphs"], "graphs,",
              sum(d["step"]["graph_breaks"].values()), "breaks;", d["explain"]["watched_ops"])
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "cudnn")
    recs = [saved_set(torch, "qwen3_moe_bf16", "qwen3-30b-a3b.json"),
            saved_set(torch, "mixtral_bf16", "mixtral-8x7b.json"),
            # GPT-OSS: its second layer (full attention; eager attention with the sinks, as
            # from_pretrained runs it: _supports_sdpa is False); DeepSeek: every layer sparse
            saved_set(torch, "gpt_oss_bf16", "gpt-oss-20b.json", 1,
                      {"layer_types": ["sliding_attention", "full_attention"]}, "eager"),
            saved_set(torch, "deepseek_v3_bf16", "deepseek-v3.json", 0, {"first_k_dense_replace": 0}),
            saved_set(torch, "deepseek_v2_bf16", "deepseek-v2-lite.json", 0, {"first_k_dense_replace": 0}),
            # DeepSeek-V2's group-limited routing (V2-Lite routes greedily): 8 groups, 3 kept
            saved_set(torch, "deepseek_v2_glg_bf16", "deepseek-v2-lite.json", 0,
                      {"first_k_dense_replace": 0, "topk_method": "group_limited_greedy", "n_group": 8,
                       "topk_group": 3})]
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": "each record's, 1 layer, batch 1", "sdpa": "cudnn",
            "capture_dynamic_output_shape_ops": torch._dynamo.config.capture_dynamic_output_shape_ops,
            "capture_scalar_outputs": torch._dynamo.config.capture_scalar_outputs}
    C.write_json(args.o, {"header": head, "dynamo": dyn, "records": recs})
    for rec in recs:
        print(rec["config"])
        for r in rec["saved"]:
            if r["kind"] != "param":
                print(" ", r["name"], r["shape"], r["dtype"], r["kind"], r["op"])
    print(args.o)


if __name__ == "__main__":
    main()
