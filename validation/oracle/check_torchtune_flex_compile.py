"""How dynamo compiles a torchtune decoder layer whose attention runs FlexAttention on a packed
batch (docs/techniques.md, "torchtune's packed data sets"): torchtune 0.6.1 calls flex_attention
through compile_friendly_flex_attention, which @torch.compiler.disable(recursive=False) wraps
(modules/attention_utils.py), and compile_model compiles each TransformerSelfAttentionLayer
itself, inside the CheckpointWrapper that set_activation_checkpointing put around it
(training/_compile.py). A layer of the same shape (a projection, the disabled call, an output
projection and an MLP) compiled the same way, with and without the wrapper, on the CPU: each
prints its graphs and graph breaks. Two graphs a layer, a break at the disabled call, either way;
the wrapper compiled instead (torchtitan's order) captures none (the checkpoint's body cannot
break), a contrast printed last.

    python3 validation/oracle/check_torchtune_flex_compile.py
"""
import torch
import torch.nn as nn
from torch._dynamo.utils import counters
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


@torch.compiler.disable(recursive=False)
def attention(q, k, v):
    return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out, self.mlp = nn.Linear(64, 192), nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x):
        q, k, v = self.qkv(torch.relu(x)).view(1, 32, 3, 2, 32).permute(2, 0, 3, 1, 4)
        h = x + self.out(attention(q, k, v).transpose(1, 2).reshape(1, 32, 64))
        return h + self.mlp(torch.relu(h))


def run(what, wrap_then_compile, wrapped):
    torch._dynamo.reset()
    counters.clear()
    layer = Layer()
    if wrap_then_compile:
        layer = checkpoint_wrapper(layer)
        layer.compile()
    else:
        layer.compile()
        if wrapped:
            layer = checkpoint_wrapper(layer)
    layer(torch.randn(1, 32, 64, requires_grad=True)).sum().backward()
    breaks = sum(counters["graph_break"].values())
    print("%-48s %d graphs, %d graph breaks" % (what, counters["stats"].get("unique_graphs", 0), breaks))


if __name__ == "__main__":
    run("compiled layer (torchtune, no checkpointing)", False, False)
    run("compiled layer in a CheckpointWrapper (torchtune)", False, True)
    run("compiled CheckpointWrapper (torchtitan's order)", True, True)
