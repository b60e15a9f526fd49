#!/usr/bin/env python3
"""What torch.compile makes of a mixture-of-experts decoder layer under peft's LoRA (peft 0.21,
transformers 5.25's grouped_mm experts): which LoRA placements leave the layer one graph with the
experts on torch._grouped_mm, which graph-break it, and what the min-cut partitioner saves of the
compiled layer with the adapters' ops inside it.

  check_compile_moe_lora.py [-o validation/oracle/captures/compile_moe_lora_l1.json]

1. dynamo, on the CPU, as check_compile_moe.py runs it (its tiny models: 2 layers, hidden 64, 8
   experts, top 2, bf16, each decoder layer compiled, one training step; explain of one layer),
   with get_peft_model(LoraConfig(...)) on top, for each placement of PLACEMENTS on the tiny
   Qwen3MoeForCausalLM: the attention's Linears (dropout 0, and q_proj / v_proj with dropout
   0.05), "all-linear", the v4 MLP names (gate_proj, up_proj, down_proj) and the experts'
   target_parameters; and the attention's Linears of the tiny Mixtral, GPT-OSS, DeepSeek-V3 and
   -V2. Each run also keeps what peft made of the config (its target_modules and
   target_parameters after transformers_weight_conversion's MoE rewrite): on transformers 5 the
   experts are one module of fused 3-D parameters, no Linear, so "all-linear" and the MLP names
   become lora.ParamWrapper around gate_up_proj, down_proj and the router's weight.
2. the partition, as check_compile_moe.py makes it (AOTAutograd on fake CUDA tensors, Inductor's
   decompositions, min_cut_rematerialization_partition, every parameter a static input, 1 x 256
   tokens, bf16, cuDNN SDPA; GPT-OSS's full-attention layer eager with the sinks) of a decoder
   layer of the full-size configs (Qwen3-30B-A3B, Mixtral-8x7B, GPT-OSS-20B, DeepSeek-V3 and
   -V2-Lite, DeepSeek's every layer sparse) with peft's LoRA on the attention's Linears (the
   placement that compiles whole), and the forward graph's GEMMs (torch._grouped_mm, not
   transformers::grouped_mm_fallback).

Writes one JSON (header, "dynamo": the runs of 1., "records": the saved sets of 2., as
check_compile_moe.py writes them); tests/test_compile.sh holds vrsim's note to it."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
from check_compile_moe import SEQ, WATCH, config_path, layer_forward_graph, saved_rows, tiny  # noqa: E402

ATTN = {"qwen3_moe": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "mixtral": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "gpt_oss": ["q_proj", "k_proj", "v_proj", "o_proj"],
        # multi-head latent attention: V3 with q_lora_rank, V2-Lite without
        "deepseek_v3": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
        "deepseek_v2": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]}

# peft LoraConfig keyword sets (r and lora_alpha added per run)
PLACEMENTS = {
    "attention": {"target_modules": ATTN["qwen3_moe"], "lora_dropout": 0.0},
    "attention_qv_dropout": {"target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.05},
    "all_linear": {"target_modules": "all-linear", "lora_dropout": 0.0},
    "mlp_names": {"target_modules": ["gate_proj", "up_proj", "down_proj"], "lora_dropout": 0.0},
    "experts": {"target_modules": [], "lora_dropout": 0.0,
                "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]},
}


def watched(torch, graphs):
    """The watched aten ops (check_compile_moe.WATCH) in dynamo's graphs."""
    ops = set()
    for g in graphs:
        for n in g.graph.nodes:
            if n.op == "call_function":
                name = getattr(n.target, "__name__", str(n.target))
                if any(w in name or w in str(n.target) for w in WATCH):
                    ops.add(name)
    return sorted(ops)


def dynamo_lora_run(torch, family, placement, kw):
    """One training step of the tiny model under peft's LoRA with every decoder layer compiled;
    explain of one layer."""
    import torch._dynamo
    from peft import LoraConfig, get_peft_model
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    pm = get_peft_model(tiny(family, None).to(torch.bfloat16),
                        LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM", **kw))
    cfg = pm.peft_config["default"]
    m = pm.get_base_model()
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    pe = m.model.rotary_emb(x, torch.arange(16)[None])
    ex = torch._dynamo.explain(m.model.layers[0])(x, position_embeddings=pe, attention_mask=None)
    torch._dynamo.reset()
    counters.clear()
    for layer in m.model.layers:
        layer.compile()
    pm.train()
    ids = torch.randint(0, 128, (2, 16))
    pm(input_ids=ids, labels=ids).loss.backward()
    breaks = {r[:400]: n for r, n in counters["graph_break"].items()}
    adapters = sorted({n.split(".layers.0.", 1)[1].replace(".default.weight", "")
                       for n, p in pm.named_parameters() if p.requires_grad and ".layers.0." in n})
    return {"family": family, "placement": placement, "weights": "bfloat16",
            "lora": {k: (sorted(v) if isinstance(v, (list, set)) else v) for k, v in kw.items()},
            "peft_target_modules": sorted(cfg.target_modules) if cfg.target_modules else [],
            "peft_target_parameters": sorted(cfg.target_parameters or []),
            "adapters_layer0": adapters,
            "explain": {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
                        "watched_ops": watched(torch, ex.graphs),
                        "break_reasons": [str(b.reason)[:300] for b in ex.break_reasons]},
            "step": {"frames": dict(counters["frames"]),
                     "unique_graphs": counters["stats"].get("unique_graphs", 0),
                     "graph_breaks": breaks}}


def lora_saved_set(torch, name, config, lora, layer_index=0, overrides=None, attention="sdpa"):
    """The partition of decoder layer `layer_index` of `config` (its keys `overrides` replaced)
    under peft's LoRA `lora` (capture.py's spec: r, alpha, dropout, targets) at 1 x SEQ (fake
    CUDA, bf16 base weights, the adapters in fp32 as peft makes them; check_compile_moe.py's
    layer_forward_graph)."""
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    spec = {"precision": "lora_bf16", "layers": layer_index + 1, "config": config_path(config, overrides),
            "lora": lora, "attention": attention}
    with FakeTensorMode():
        pm, _ = C.build_model(torch, transformers, spec, None)
        gm, n_static = layer_forward_graph(torch, pm.get_base_model(), layer_index, attention)
    rows = saved_rows(torch, gm, n_static)
    # the graph's GEMMs: torch._grouped_mm (or transformers' opaque fallback) and the mm's
    gemms = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                    and ("grouped_mm" in str(n.target) or str(n.target).startswith("aten.mm"))})
    return {"config": name, "model": "scenarios/configs/" + config, "layer": layer_index,
            "overrides": overrides or {}, "lora": lora, "attention": attention, "seq": SEQ, "precision": "lora_bf16",
            "forward_gemms": gemms, "saved": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_moe_lora_l1.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    import peft
    dyn = [dynamo_lora_run(torch, "qwen3_moe", p, kw) for p, kw in PLACEMENTS.items()]
    dyn += [dynamo_lora_run(torch, fam, "attention", {"target_modules": ATTN[fam], "lora_dropout": 0.0})
            for fam in ("mixtral", "gpt_oss", "deepseek_v3", "deepseek_v2")]
    for d in dyn:
        print(d["family"], d["placement"], "explain:", d["explain"]["graphs"], "graphs,",
              d["explain"]["graph_breaks"], "breaks; step:", d["step"]["unique_graphs"], "graphs,",
              sum(d["step"]["graph_breaks"].values()), "breaks;", d["explain"]["watched_ops"],
              "peft:", d["peft_target_modules"], d["peft_target_parameters"])
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "cudnn")
    qv = {"r": 8, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}
    recs = [lora_saved_set(torch, "qwen3_moe_lora_qv", "qwen3-30b-a3b.json", qv),
            lora_saved_set(torch, "qwen3_moe_lora_attn", "qwen3-30b-a3b.json",
                           {"r": 16, "alpha": 32, "dropout": 0.0, "targets": ATTN["qwen3_moe"]}),
            lora_saved_set(torch, "mixtral_lora_qv", "mixtral-8x7b.json", qv),
            # GPT-OSS's second layer (full attention, eager with the sinks), DeepSeek's with every
            # layer sparse, as check_compile_moe.py captures them
            lora_saved_set(torch, "gpt_oss_lora_attn", "gpt-oss-20b.json",
                           {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ATTN["gpt_oss"]}, 1,
                           {"layer_types": ["sliding_attention", "full_attention"]}, "eager"),
            lora_saved_set(torch, "deepseek_v3_lora_attn", "deepseek-v3.json",
                           {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ATTN["deepseek_v3"]},
                           0, {"first_k_dense_replace": 0}),
            lora_saved_set(torch, "deepseek_v2_lora_attn", "deepseek-v2-lite.json",
                           {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ATTN["deepseek_v2"]},
                           0, {"first_k_dense_replace": 0})]
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": "each record's, 1 layer, batch 1", "sdpa": "cudnn"}
    C.write_json(args.o, {"header": head, "dynamo": dyn, "records": recs})
    for rec in recs:
        print(rec["config"], rec["forward_gemms"])
        for r in rec["saved"]:
            if r["kind"] != "param":
                print(" ", r["name"], r["shape"], r["dtype"], r["kind"], r["op"])
    print(args.o)


if __name__ == "__main__":
    main()
