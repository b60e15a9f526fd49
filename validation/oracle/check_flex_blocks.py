"""The blocks FlexAttention runs over a padded or packed batch: torch's own create_block_mask
(PyTorch 2.13, on the CPU) over the masks transformers' flex_attention_mask (masking_utils,
5.25) and torchtune's packed_block_causal_mask build, causal and padding (a key past a row's
length masked) or causal and same-document, at 128 x 128. Prints each batch's partial and full
blocks, which vrsim counts from the lengths (strategies/data.lua flex_row_blocks,
flex_padded_row_blocks; tests/test_techniques.sh).

    python3 validation/oracle/check_flex_blocks.py
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask


def counts(bm):
    return int(bm.kv_num_blocks.sum()), int(bm.full_kv_num_blocks.sum())


def padded(lens, length):
    lt = torch.tensor(lens)

    def mask_mod(b, h, q, kv):
        return (q >= kv) & (kv < lt[b])
    return counts(create_block_mask(mask_mod, len(lens), None, length, length, device="cpu"))


def packed(lens):
    doc = torch.cat([torch.full((n,), i) for i, n in enumerate(lens)])
    total = len(doc)

    def mask_mod(b, h, q, kv):
        return (q >= kv) & (doc[q] == doc[kv])
    return counts(create_block_mask(mask_mod, 1, None, total, total, device="cpu"))


if __name__ == "__main__":
    for lens, length in (([1000, 2000], 2000), ([300, 700], 700), ([129, 1024, 1], 1024)):
        print("padded %s to %d: %d partial, %d full" % ((lens, length) + padded(lens, length)))
    for lens in ([1000, 2000], [300, 700, 1000, 2000], [3156, 3054, 708, 1274]):
        print("packed %s: %d partial, %d full" % ((lens,) + packed(lens)))
