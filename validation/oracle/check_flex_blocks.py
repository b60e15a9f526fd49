"""The blocks FlexAttention runs over a padded or packed batch: torch's own create_block_mask
(PyTorch 2.13, on the CPU) over the masks transformers' flex_attention_mask (masking_utils,
5.25), torchtune's packed_block_causal_mask and torchtitan's get_document_mask_mod (238fa99) build, causal and padding (a key past a row's
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


def torchtitan(lens, length, eos=1):
    """torchtitan's text stream: the documents' tokens (each ending in EOS) in one buffer, cut into
    chunks of length + 1, each a row of length inputs; the rows' document ids as
    get_document_mask_mod numbers them (cumsum of input == eos_id, the last column set)."""
    stream = []
    for n in lens:
        stream += [0] * (n - 1) + [eos]
    rows = [stream[i:i + length + 1][:length] for i in range(0, len(stream) - length, length + 1)]
    batch = torch.tensor(rows)
    eos_mask = batch == eos
    eos_mask[:, -1] = True
    doc = torch.cumsum(torch.where(eos_mask, 1, 0), dim=1)

    def mask_mod(b, h, q, kv):
        return (q >= kv) & (doc[b, q] == doc[b, kv])
    return len(rows), counts(create_block_mask(mask_mod, len(rows), None, length, length, device="cpu"))


if __name__ == "__main__":
    for lens, length in (([1000, 2000], 2000), ([300, 700], 700), ([129, 1024, 1], 1024)):
        print("padded %s to %d: %d partial, %d full" % ((lens, length) + padded(lens, length)))
    for lens in ([1000, 2000], [300, 700, 1000, 2000], [3156, 3054, 708, 1274]):
        print("packed %s: %d partial, %d full" % ((lens,) + packed(lens)))
    for lens, length in (([700, 900, 500, 300, 650], 1024), ([5000], 2048), ([100] * 30 + [1900], 1024)):
        rows, (p, f) = torchtitan(lens, length)
        print("torchtitan %s in rows of %d: %d rows, %d partial, %d full" % (lens, length, rows, p, f))
