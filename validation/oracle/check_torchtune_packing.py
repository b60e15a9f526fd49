"""torchtune's own PackedDataset over a data set's lengths, for vrsim's training.data batching
"torchtune" (docs/techniques.md, "torchtune's packed data sets"): the 2500 lengths of
Python's random.seed(1), randint(1, 3000), each truncated as torchtune's tokenizers truncate (to
max_seq_len for the instruct data sets, max_seq_len - 1 for text completion, whose packs split
across), packed into packs of 2048. Prints, for split_across_pack false and true, the packs, the
tokens they hold and the documents of their seq_lens (the padding's included).

    pip install torchtune==0.6.1 torchao==0.13.0 omegaconf   (torchtune's data modules import
    `datasets`; a stand-in module with load_dataset and split_dataset_by_node serves)
    python3 validation/oracle/check_torchtune_packing.py
"""
import random

from torchtune.datasets._packed import PackedDataset

MAX_SEQ_LEN = 2048


def main():
    random.seed(1)
    lens = [random.randint(1, 3000) for _ in range(2500)]
    for split in (False, True):
        longest = MAX_SEQ_LEN - 1 if split else MAX_SEQ_LEN
        ds = [{"tokens": [1] * min(n, longest), "labels": [1] * min(n, longest)} for n in lens]
        packed = PackedDataset(ds, max_seq_len=MAX_SEQ_LEN, split_across_pack=split)
        tokens = sum(int((p["labels"] != -100).sum()) for p in packed.packs)
        docs = sum(len(p["seq_lens"]) for p in packed.packs)
        print("split_across_pack=%s: %d packs, %d tokens, %d documents" % (split, len(packed.packs), tokens, docs))


if __name__ == "__main__":
    main()
