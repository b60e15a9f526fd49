"""vrsim's torch.compile note read back, for the tests that hold its saved set to a capture of the
partitioner (tests/test_compile.sh)."""
import json
import re
from collections import Counter

PREFIX = "torch.compile: the partitioner saves"


def saved_counts(summary_path):
    """The saved tensors the note of a run's summary (--json) lists: Counter of (elements, dtype)."""
    note = [n for n in json.load(open(summary_path))["notes"] if n.startswith(PREFIX)][0]
    got = Counter()
    for shape, dt in re.findall(r" \[([0-9x]+)\] (\w+)", note):
        n = 1
        for d in shape.split("x"):
            n *= int(d)
        got[(n, dt)] += 1
    return got
