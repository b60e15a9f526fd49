"""vrsim's torch.compile notes read back, for the tests that hold its saved set to a capture of the
partitioner or to another run's (tests/test_compile.sh).

A run's partitioner note, one per kind of compiled layer, reads
  torch.compile: the partitioner saves N activations of decoder layer L (...) for backward, B MiB
  (NAME [1x1024x4096] bf16, ...), and backward recomputes what else it reads
and each saved tensor is counted by (elements, dtype): a view and its base are one tensor, and the
names differ where the same storage is reached another way.

  compile_note.py activations SUMMARY.json   prints N of the run's first partitioner note"""
import json
import re
import sys
from collections import Counter

PREFIX = "torch.compile: the partitioner saves"
EAGER = "torch.compile: the checkpointed layers run eager"


def notes(summary, prefix=PREFIX):
    """The notes of a run's summary (the dict --json prints) that begin with prefix: by default the
    partitioner's, in the order vrsim writes them."""
    return [n for n in summary["notes"] if n.startswith(prefix)]


def counts(note):
    """The saved tensors one partitioner note lists: Counter of (elements, dtype)."""
    got = Counter()
    for shape, dt in re.findall(r" \[([0-9x]+)\] (\w+)", note):
        n = 1
        for d in shape.split("x"):
            n *= int(d)
        got[(n, dt)] += 1
    return got


def activations(note):
    """How many activations the note says a layer saves (its N)."""
    return int(note.split()[4])


# a capture's torch dtype names as vrsim's notes write them
DTYPES = {"bfloat16": "bf16", "float32": "fp32", "int64": "int64", "int32": "int32", "bool": "bool",
          "complex64": "c64", "uint64": "uint64"}


def capture_counts(rec, must_save=False, skip_regions=()):
    """The tensors a partitioner capture's record (validation/oracle/check_compile_*.py) saves, as
    saved_counts counts them: Counter of (elements, dtype), parameters left out, each storage once;
    a complex64 storage is counted as the fp32 pairs vrsim keeps. A record without storage shapes
    (check_compile_sac*.py) counts each tensor's shape. must_save: assert that every saved
    activation is an input or one the checkpoint policy tagged MUST_SAVE. skip_regions: the
    record's regions (check_compile_model.py: "embed", "layer 0", ...) whose tensors are left out."""
    want, seen = Counter(), set()
    for x in rec["saved"]:
        if x["kind"] == "param" or x["storage"] in seen or x.get("region") in skip_regions:
            continue
        seen.add(x["storage"])
        assert not must_save or x["kind"] == "input" or x["tag"] == "MUST_SAVE", x
        n, dt = 1, DTYPES[x["dtype"]]
        for d in x.get("storage_shape", x["shape"]):
            n *= d
        if dt == "c64":
            n, dt = 2 * n, "fp32"
        want[(n, dt)] += 1
    return want


def saved_counts(summary_path, which=""):
    """The saved tensors the first partitioner note of a run's summary (--json) lists that holds
    `which` (a diffusers block's class name, where a run has one note per class): Counter of
    (elements, dtype)."""
    return counts([n for n in notes(json.load(open(summary_path))) if which in n][0])


def model_graph_counts(summary_path):
    """A scope = "model" run's (--json) saved tensors as its two notes list them, decoder layer 1's
    and the model graph's final norm, lm_head and loss: (layer 1's counts, the head's counts)."""
    ns = notes(json.load(open(summary_path)))
    layer = [n for n in ns if "of decoder layer 1 " in n]
    head = [n for n in ns if "model graph's final norm, lm_head and loss" in n]
    assert len(layer) == 1 and len(head) == 1, ns
    return counts(layer[0]), counts(head[0])


def compare(capture_path, summary_path, name, which=""):
    """vrsim's saved set (the run's summary; its note holding `which`) against record `name` of a
    partitioner capture: the line to print and whether they are equal."""
    rec = [r for r in json.load(open(capture_path))["records"] if r["config"] == name][0]
    want, got = capture_counts(rec), saved_counts(summary_path, which)
    if got != want:
        return "vrsim only: %s  partitioner only: %s" % (dict(got - want), dict(want - got)), False
    return "%d tensors" % sum(want.values()), True


USAGE = ("usage: compile_note.py activations SUMMARY.json\n"
         "       compile_note.py compare CAPTURE.json SUMMARY.json RECORD [NOTE-TEXT]")

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "activations":
        print(activations(notes(json.load(open(sys.argv[2])))[0]))
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "compare":
        line, same = compare(*sys.argv[2:])
        print(line)
        sys.exit(0 if same else 1)
    else:
        sys.exit(USAGE)
