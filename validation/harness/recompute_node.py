"""Which backward node runs each checkpointed layer's recomputation, on the CPU.

Under non-reentrant checkpointing (transformers' gradient_checkpointing_enable with
use_reentrant=False, as measure_llama.py runs it) a layer's forward runs again inside the first
backward node of that layer that unpacks a saved tensor. torch.profiler then counts the
recomputation's ops as that node's children and the Python between them (the modules' calls,
checkpoint's hooks) as the node's own self time. This builds a small model of the family with
transformers and peft as the harness does (bf16, LoRA on the attention projections,
checkpointing, enable_input_require_grads), profiles one training step on the CPU and prints each
backward node with more than --min-children descendant ops: its name, the descendants and their
most frequent ops, its total and self time on this CPU.

  python3 validation/harness/recompute_node.py --family qwen3_moe

For a Qwen3-MoE layer the node is IndexBackward0 of the experts' output gather, so the host self
time a GPU profile gives IndexBackward0 (results/ops_gen10_qwen3_h100.jsonl) is the recomputed
forward's Python, not the index_put it runs.
"""
import argparse

import torch


def model_of(family, layers):
    import transformers
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)
    if family == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                                          norm_topk_prob=True, **common)
    elif family == "llama":
        cfg = transformers.LlamaConfig(**common)
    else:
        raise SystemExit("recompute_node: --family qwen3_moe or llama")
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen3_moe")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--min-children", type=int, default=100)
    args = ap.parse_args()
    import peft
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    m = model_of(args.family, args.layers)
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.enable_input_require_grads()
    m = peft.get_peft_model(m, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05,
                                               target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    m.train()
    ids = torch.randint(0, 256, (1, 64))
    for _ in range(2):
        m(input_ids=ids, labels=ids).loss.backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        m(input_ids=ids, labels=ids).loss.backward()
    for ev in prof.events():
        if ev.name.startswith("autograd::engine") or not ev.name.endswith(("Backward0", "Backward1")):
            continue
        names, stack = {}, list(ev.cpu_children)
        while stack:
            c = stack.pop()
            names[c.name] = names.get(c.name, 0) + 1
            stack.extend(c.cpu_children)
        n = sum(names.values())
        if n >= args.min_children:
            top = ", ".join("%s x%d" % kv for kv in sorted(names.items(), key=lambda kv: -kv[1])[:4])
            print("%-28s %5d descendant ops (%s); total %.2f ms, self %.2f ms on this CPU"
                  % (ev.name, n, top, ev.cpu_time_total / 1e3, ev.self_cpu_time_total / 1e3))


if __name__ == "__main__":
    main()
