"""What torchtune's own decoder layer saves for backward beside the transformers layer of the same
weights, which vrsim runs for the torchtune families model.code does not cover (docs/recipes.md,
"torchtune"; for Llama the 2 rows are its RMSNorm's, model.code's): torchtune 0.6.1's llama3
builder and transformers' LlamaModel of the same shapes, eager, bf16, on the CPU (SDPA's CPU
flash kernel on both sides), one row of S tokens. Each model's saved tensors are counted by
storage through saved_tensors_hooks at 2 and 4 layers; the difference, halved, is one layer's.
The transformers layer hands SDPA its grouped keys and values, torchtune expands them first
(vrsim's model.repeat_kv): the expanded copies are added to its side. What is left is
torchtune's own intermediates, printed in bf16 rows of the hidden size.

    pip install torchtune==0.6.1 torchao==0.13.0 omegaconf   (torchtune's data modules import
    `datasets`; a stand-in module with load_dataset and split_dataset_by_node serves)
    python3 validation/oracle/check_torchtune_saved.py
"""
import torch
from torch.autograd.graph import saved_tensors_hooks
from torchtune.models.llama3._component_builders import llama3
from transformers import LlamaConfig, LlamaModel

S, VOCAB, INTER, HIDDEN = 512, 1024, 8192, 2048


def saved_bytes(fn):
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t
    with saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def per_layer(make, run):
    two, four = (saved_bytes(lambda m=make(n): run(m)) for n in (2, 4))
    return (four - two) // 2


def main():
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (1, S))
    for heads, kv_heads in ((32, 8), (16, 8)):
        head_dim = HIDDEN // heads
        tt = per_layer(lambda n: llama3(vocab_size=VOCAB, num_layers=n, num_heads=heads, num_kv_heads=kv_heads,
                                        embed_dim=HIDDEN, max_seq_len=4096, intermediate_dim=INTER,
                                        rope_base=500000), lambda m: m(ids))
        hf = per_layer(lambda n: LlamaModel(LlamaConfig(
            vocab_size=VOCAB, num_hidden_layers=n, num_attention_heads=heads, num_key_value_heads=kv_heads,
            hidden_size=HIDDEN, intermediate_size=INTER, max_position_embeddings=4096, rope_theta=500000,
            attn_implementation="sdpa", use_cache=False)), lambda m: m(input_ids=ids, use_cache=False))
        expanded = 2 * (heads - kv_heads) * S * head_dim * 2
        row = S * HIDDEN * 2
        print("head dim %d: a layer saves %d bytes in torchtune, %d in transformers + %d expanded k, v: "
              "torchtune %+d bytes, %+.2f bf16 rows of the hidden size" %
              (head_dim, tt, hf, expanded, tt - hf - expanded, (tt - hf - expanded) / row))


if __name__ == "__main__":
    main()
