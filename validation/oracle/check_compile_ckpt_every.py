#!/usr/bin/env python3
"""What torch.compile saves of each decoder layer when only every k-th layer is checkpointed, in
torchtitan's order: apply_ac wraps every k-th block in ptd_checkpoint_wrapper (selective layer
AC, selective_ac_option = k: a count from 1, blocks k, 2k, ...), then apply_compile compiles
every block, wrapped or not. A tiny Llama (transformers, 4 layers, hidden 64, fp32) on the CPU,
torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint set (transformers' layer
writes its output-capturing context inside the checkpoint otherwise: check_compile_hf_ckpt.py),
one training step with each block compiled (nn.Module.compile(), Inductor), for k = none (no
checkpointing), 1 (every block) and 2. A saved-tensor hook counts what each layer's compiled
graph saves for backward (the partitioner's outputs past the layer's own, parameters apart).

  check_compile_ckpt_every.py [-o validation/oracle/captures/compile_ckpt_every.json]

What it shows (torch 2.13, transformers 5.25): no graph break for any k; with k = 2 the wrapped
blocks (1 and 3, from 0) save what every block saves with k = 1 (their inputs alone: the
checkpoint's MUST_RECOMPUTE tags), and the others what every block saves without checkpointing
(the partitioner's set), tensor for tensor. vrsim: training.checkpoint_every under
checkpoint_impl = "wrapper" with training.compile (lua/strategies/compile.lua
M.checkpointed_layer, tests/test_compile.sh 5e)."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
LAYERS = 4


def run(torch, every):
    """One training step with blocks k, 2k, ... checkpointed (every = None: none), each compiled;
    what each layer's graph saves (shape, dtype), parameters left out, and dynamo's counters."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from transformers import LlamaConfig, LlamaForCausalLM
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=LAYERS)
    m = LlamaForCausalLM(cfg)
    blocks, wrapped, count = [], [], 0
    for i, block in enumerate(m.model.layers):
        # torchtitan's _apply_layer_sac: a module-global count from 1, wrap where count % k == 0
        count += 1
        if every and count % every == 0:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
            wrapped.append(i)
        blocks.append(block)
    for block in blocks:
        block.compile()
    current, saved = [None], {}

    class Tagged(torch.nn.Module):
        """Marks which layer is running (eager, outside the compiled block)."""
        def __init__(self, i, block):
            super().__init__()
            self.i, self.block = i, block

        def forward(self, *args, **kw):
            current[0] = self.i
            try:
                return self.block(*args, **kw)
            finally:
                current[0] = None
    m.model.layers = torch.nn.ModuleList(Tagged(i, b) for i, b in enumerate(blocks))

    def pack(t):
        if current[0] is not None and not isinstance(t, torch.nn.Parameter):
            saved.setdefault(current[0], []).append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")})
        return t
    m.train()
    ids = torch.randint(0, 128, (2, 16))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = m(input_ids=ids, labels=ids).loss
    loss.backward()
    return {"checkpoint_every": every, "checkpointed_layers": wrapped,
            "frames": dict(counters["frames"]), "graph_breaks": len(counters["graph_break"]),
            "saved": [saved.get(i, []) for i in range(LAYERS)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_ckpt_every.json"))
    args = ap.parse_args()
    import torch
    import transformers
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    runs = [run(torch, k) for k in (None, 1, 2)]
    for r in runs:
        print("checkpoint_every", r["checkpoint_every"], "wrapped", r["checkpointed_layers"], "frames", r["frames"],
              "graph breaks", r["graph_breaks"], "saved per layer", [len(s) for s in r["saved"]])
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "model": f"LlamaForCausalLM, {LAYERS} layers, hidden 64, fp32, batch 2 x 16",
            "order": "checkpoint_wrapper on blocks k, 2k, ... (torchtitan apply_ac), then each block compiled (apply_compile)",
            "skip_fwd_side_effects_in_bwd_under_checkpoint": True}
    C.write_json(args.o, {"header": head, "runs": runs})
    print(args.o)


if __name__ == "__main__":
    main()
