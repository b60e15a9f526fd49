#!/usr/bin/env python3
"""vrsim against an oracle capture, allocation by allocation (Python's standard library only:
it runs in `make test`, where torch is absent).

  compare.py CAPTURE.jsonl.gz SCENARIO.lua [--vrsim ./vrsim] [--expect FILE] [--quiet]

It runs `vrsim SCENARIO --alloc-trace` (each allocation's exact requested bytes, named by the op
that made it) with memory.csv (each op's phase), splits both streams into phases (build; then
per step forward, backward, optimizer, zero_grad) and aligns the allocation sizes of each phase
in order (difflib over the sizes; inside one op the order of its outputs is not compared, as a
CUDA kernel and its meta function list them differently). What is left over on either side is:

- a named CUDA-only difference (NAMED below: kernel workspaces and the like, which the fake
  tensors of the capture cannot show), reported with its size; or
- a divergence: printed with both sides' op names and sizes, the first one marked.

Then the live bytes on both sides: after the build (the parameters), after the last step's
forward, and the last step's peak; vrsim's also without its named CUDA-only allocations.

A spec with compare = "forward" (the capture's header) holds vrsim to the build and the forward
only: the divergences of the backward and the optimizer are counted and shown by phase, not
held (a family whose backward is not yet matched op for op says so in its spec).

--expect FILE: the divergences this capture is known to have (one `phase side bytes op` line
each, as printed under "divergences"); the comparison passes when the divergences are exactly
those, in any order. Exit status: 0 no divergence (or exactly the expected ones), 1 otherwise, 2 bad input.
"""
import argparse
import csv
import difflib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# vrsim allocations the capture cannot have, by op name: the CUDA kernels' own buffers.
# (pattern on vrsim's op name, what it is, where vrsim models it)
NAMED = [
    (re.compile(r"sdpa_(cudnn|flash|mem_efficient)"),
     "fused attention kernel internals (workspace, fp32 dq accumulator, row statistic)",
     "lua/vrsim/ops/attention.lua"),
    (re.compile(r"\.sdpa_varlen\.backward$"),
     "the flash varlen backward's softmax_d and fp32 dq accumulator (mha_varlen_bwd, inside "
     "aten._flash_attention_backward)", "lua/strategies/data.lua varlen_bwd_workspace"),
    (re.compile(r"conv"), "cuDNN convolution workspace", "lua/vrsim/ops/conv.lua"),
    (re.compile(r"(weight|bias)_grad\.backward"),
     "the CUDA reduce kernel's staging buffer and semaphores of a row sum (a norm weight's or a "
     "linear bias's gradient over many rows)",
     "lua/models/llama.lua bwd_rowsum, lua/vrsim/ops/linear.lua, sim/engine.c op_workspaces"),
    (re.compile(r"(resnets\.\d+\.norm[12]|attentions\.\d+\.(group_)?norm|conv_norm_out)(\.backward| \(recompute\))?$"),
     "native_group_norm's fp32 (N, C) scale and shift temporaries, forward (and its checkpoint "
     "recomputation) and backward (the CUDA kernels' own buffers)", "lua/vrsim/ops/norm.lua nn.group_norm"),
    (re.compile(r"embed_tokens\.backward"),
     "embedding_backward_cuda_kernel's fp32 partial sums", "lua/models/llama.lua embedding_forward"),
    # (the dispatch's CUDA sort buffers: kernel workspaces of ops whose outputs the capture has,
    # set aside before the alignment (PRE_ALIGN), since an int64 array of the pairs can be the
    # size of a capture allocation nearby and would take its place)
    (re.compile(r"\.mlp\.sort( \(recompute\))?$"),
     "torch.sort's original positions and cub's radix-sort temporary (SortStable.cu "
     "segmented_sort_large_segments)", "lua/models/moe.lua index_op"),
    (re.compile(r"\.mlp\.(select_hidden|select_weights|restore_order|experts\.gate_up_bias|"
                r"experts\.down_bias)(\.remainder)?\.backward$"),
     "index_put_with_sort's linear index, sorted indices, their positions, arange and cub's "
     "radix-sort temporary (IndexBackward0's index_put_ on CUDA, Indexing.cu)", "lua/models/moe.lua gather_rows"),
    # (the grouped GEMM's and cumsum's buffers: small ones a capture allocation nearby may
    # match in size, set aside before the alignment as the sort's are)
    (re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)(\.backward)?( \(recompute\))?$"),
     "CUTLASS grouped GEMM's per-group arguments and per-SM workspace (torch._grouped_mm on sm90, "
     "GroupMM.cu bf16bf16_grouped_gemm_impl_sm90_sm100)", "lua/models/moe.lua grouped_mm_buffers"),
    (re.compile(r"\.mlp\.cumsum( \(recompute\))?$"),
     "cub's scan temporary (torch.cumsum on CUDA, at::cuda::cub::inclusive_scan)",
     "lua/models/moe.lua index_op"),
    (re.compile(r"\.experts\.(gate_up_proj|down_proj)\.lora_(check|baddbmm)(\.backward)?( \(recompute\))?$"),
     "cuBLAS's contiguous copy of peft's permuted LoRA factor (Blas.cpp prepare_batch_matrix_for_cublas)",
     "lua/strategies/lora.lua param_proxies"),
]
# The NAMED causes whose workspaces (allocated and freed inside their op) leave the alignment
# before it runs: what they name is in no capture, and the rest of their op is aligned as it is.
PRE_ALIGN = ("torch.sort's original positions", "index_put_with_sort's linear index",
             "CUTLASS grouped GEMM's", "cub's scan temporary")
# The NAMED causes that are their op's last workspace only (the ops' other workspaces are
# allocations the capture has: the parametrization check's whole stack, the backward's alpha
# scaling): that one leaves the alignment before it runs.
# (the flash varlen backward's are its last two: softmax_d and the dq accumulator, after the zero
# gradients its autograd.Function materializes, which the capture has)
LAST_WORKSPACES = {"cuBLAS's contiguous copy": 1, "the flash varlen backward's": 2}
LAST_WORKSPACE = tuple(LAST_WORKSPACES)

# Capture allocations a GPU does not make, named by why: (phase, pattern on the capture's op,
# what it is). The autograd engine sums two gradients for one input in place (add_) when it
# holds the last reference (torch/csrc/autograd/input_buffer.cpp, can_accumulate_inplace), but
# never for a tensor subclass: a FakeTensor is one, so each such sum is an out-of-place add
# in the capture (vrsim: InputBuffer::accumulate(add_), no allocation).
FAKE_ONLY = [
    # (an engine's op has no module path; an add with one is forward code recomputed by
    # checkpointing inside backward)
    ("backward", re.compile(r"^add\.Tensor\b"),
     "gradient sum out of place: FakeTensor is subclass-like, so InputBuffer never adds in place "
     "(torch/csrc/autograd/input_buffer.cpp can_accumulate_inplace)"),
    # at::linear on a non-contiguous 3-D input (a UNet transformer's proj_in over the permuted
    # feature map) runs matmul, then adds the bias in place (output.add_(bias)) unless the bias
    # is subclass-like, as a FakeTensor is: then out of place (aten/src/ATen/native/Linear.cpp
    # linear, "for composite compliance use out-of-place version of `add`")
    ("forward", re.compile(r"\.proj_in add\.Tensor$"),
     "linear's bias added out of place: subclass-like bias (aten/src/ATen/native/Linear.cpp linear)"),
    ("backward", re.compile(r"\.proj_in add\.Tensor$"),
     "linear's bias added out of place: subclass-like bias (aten/src/ATen/native/Linear.cpp linear)"),
    # the same for the VAE's mid-block attention: to_q, to_k, to_v run on the (b, hw, c) view of
    # the NCHW group-norm output, a non-contiguous 3-D input (its forward runs under no_grad)
    ("forward", re.compile(r"^vae\.(en|de)coder\.mid_block\.attentions\.\d+\.to_[qkv] add\.Tensor$"),
     "linear's bias added out of place: subclass-like bias (aten/src/ATen/native/Linear.cpp linear)"),
]
# A vrsim allocation never freed, made by a GEMM's op: the cuBLAS/cuBLASLt workspace of the
# handle the thread's first GEMM creates (kept for the process; sim/engine.c cublas_workspace).
CUBLAS = "cuBLAS workspace (a thread's handle, kept for the process)"

REORDER_SPAN = 64

PHASES = {"build": "build", "inputs": "build", "fwd": "forward", "bwd": "backward",
          "optim": "optimizer", "zero_grad": "zero_grad", "forward": "forward",
          "backward": "backward", "optimizer": "optimizer",
          # vrsim's checkpoint recomputation runs inside backward, as on the GPU
          "recompute": "backward"}


class Alloc:
    __slots__ = ("key", "size", "op", "freed", "named", "grp", "free_grp")

    def __init__(self, key, size, op, grp):
        self.key, self.size, self.op, self.grp = key, size, op, grp
        self.freed = False
        self.named = None
        self.free_grp = None


def fail_input(msg):
    print("compare: " + msg, file=sys.stderr)
    sys.exit(2)


def read_capture(path):
    """The capture's allocations per phase key (step, phase), its live-bytes milestones and its
    header."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
    except (OSError, ValueError) as e:
        fail_input(f"cannot read capture {path}: {e}")
    if not lines or lines[0].get("e") != "header":
        fail_input(f"{path}: not an oracle capture (no header line)")
    header = lines[0]
    allocs = []
    by_sid = {}
    seq = []                  # ("a" | "f" | "m", Alloc or phase key), in order
    key = (-1, "build")
    grp = 0
    for ev in lines[1:]:
        kind = ev.get("e")
        if kind == "phase":
            ph = ev["ph"]
            if ph == "end":
                continue
            prev = key
            # (the input ids, made once before the first step, are the build's, as vrsim's)
            key = (ev["st"] if PHASES[ph] != "build" else -1, PHASES[ph])
            if prev != key:
                seq.append(("m", prev))
        elif kind == "op":
            grp += 1
            for sid, b in ev.get("new", []):
                label = (ev.get("m") or "") + " " + ev["op"].replace("aten.", "")
                if ev.get("fw"):
                    label += " <- " + ev["fw"].replace("aten.", "")
                a = Alloc(key, b, label.strip(), grp)
                allocs.append(a)
                seq.append(("a", a))
                by_sid[sid] = a
        elif kind == "free":
            a = by_sid.pop(ev["sid"], None)
            if a is not None:
                a.freed = True
                seq.append(("f", a))
    seq.append(("m", key))
    return header, allocs, seq


def run_vrsim(vrsim, scenario, tmp, transformers=None):
    """vrsim's run of the scenario, as the release the capture imported (training.transformers:
    the rotary tables and the loss path follow it, strategies/tf_version.lua)."""
    trace = os.path.join(tmp, "alloc.csv")
    out = os.path.join(tmp, "out")
    sets = ["--set", f"training.transformers={transformers}"] if transformers else []
    try:
        p = subprocess.run([vrsim, scenario, "--out", out, "--no-suggest", "--alloc-trace", trace] + sets,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        fail_input(f"cannot run vrsim ({vrsim}): {e} (--vrsim or VRSIM names it)")
    if p.returncode not in (0, 3):
        fail_input(f"vrsim {scenario} exited {p.returncode}: {p.stderr.strip()}")
    with open(os.path.join(out, "memory.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    with open(trace, newline="") as f:
        events = list(csv.DictReader(f))
    return rows, events


def read_vrsim(rows, events):
    """vrsim's allocations per phase key, as read_capture's. An event's phase is that of the op
    row (memory.csv, one row per op in order) whose name it carries: the rows are walked forward
    as the trace's op names change; a step ends where the optimizer or zero_grad gives way to a
    forward."""
    phases = []
    step, prev = 0, None
    for r in rows:
        ph = PHASES.get(r["phase"], r["phase"])
        if ph == "forward" and prev in ("optimizer", "zero_grad"):
            step += 1
        phases.append((r["op"], ph, step))
        prev = ph
    allocs = []
    by_addr = {}
    seq = []
    j = 0
    key = (-1, "build")
    grp, last_frame = 0, None
    for ev in events:
        frame = ev["frames"]
        if frame != last_frame or not frame:   # (unnamed allocations are each their own)
            grp += 1
            last_frame = frame
            if frame:
                k = j
                while k < len(phases) and phases[k][0] != frame:
                    k += 1
                if k < len(phases):
                    j = k
                    _, ph, st = phases[j]
                    nkey = (-1, "build") if ph == "build" else (st, ph)
                    if nkey != key:
                        seq.append(("m", key))
                        key = nkey
        size = int(ev["size"])
        if ev["action"] == "alloc":
            a = Alloc(key, size, frame or "(before build)", grp)
            allocs.append(a)
            seq.append(("a", a))
            by_addr[ev["addr"]] = a
        elif ev["action"] == "free_requested":
            a = by_addr.pop(ev["addr"], None)
            if a is not None:
                a.freed = True
                a.free_grp = grp
                seq.append(("f", a))
    seq.append(("m", key))
    return allocs, seq


def milestones(seq, skip_named):
    """Live bytes at the end of each phase (key -> bytes) and each step's peak (step -> bytes),
    without the named allocations when skip_named."""
    live, ends, peak = 0, {}, {}
    key = (-1, "build")
    for kind, x in seq:
        if kind == "m":
            ends[x] = live
            continue
        if skip_named and x.named:
            continue
        if kind == "a":
            live += x.size
            peak[x.key[0]] = max(peak.get(x.key[0], 0), live)
        else:
            live -= x.size
    return ends, peak


def rounded(size):
    """The bytes the CUDA caching allocator counts as allocated for a request (round_size in
    c10/cuda/CUDACachingAllocator.cpp: at least kMinBlockSize, 512, and a multiple of it; an
    empty tensor takes no block: allocate(0) returns a null pointer)."""
    return 0 if size == 0 else max(512, (size + 511) // 512 * 512)


def step_peaks(seq, skip_named):
    """Each step's peak of live bytes as the allocator counts them (every allocation rounded)."""
    live, peak = 0, {}
    for kind, x in seq:
        if kind == "m" or (skip_named and x.named):
            continue
        if kind == "a":
            live += rounded(x.size)
            peak[x.key[0]] = max(peak.get(x.key[0], 0), live)
        else:
            live -= rounded(x.size)
    return peak


def read_record(spec):
    """The measured steps of the H200 run the spec names (spec.record), or exit 2."""
    r = spec["record"]
    path = os.path.join(REPO, r["file"])
    try:
        with open(path) as f:
            rows = [json.loads(ln) for ln in f if ln.strip()]
    except (OSError, ValueError) as e:
        fail_input(f"cannot read record file {r['file']}: {e}")
    run = next((x for x in rows if x.get("name") == r["name"]), None)
    if run is None:
        fail_input(f"{r['file']}: no run named {r['name']!r}")
    if "ranks" in run:
        rk = next((x for x in run["ranks"] if x.get("rank") == r.get("rank", 0)), None)
        if rk is None:
            fail_input(f"{r['file']} {r['name']}: no rank {r.get('rank', 0)}")
        return rk["steps"]
    return run["steps"]


CUBLAS_MIN = 1 << 20   # the smallest workspace a handle takes (cuBLASLt's 1 MiB)
GEMM = re.compile(r"proj|lm_head|output_layer|rotary\.(\w+\.)?freqs|linear|to_q|to_k|to_v|to_out|ff\.|bmm|matmul|mm\b")


# native_group_norm's temporaries are (N, C) and (N, G) fp32: a few KB at these captures' batch
# and widths; a GroupNorm's backward may also copy its incoming gradient (a permuted view) to a
# contiguous one of the feature map's size, which is the GPU's as much as the capture's
GROUP_NORM_TEMP_MAX = 65536


def name_vrsim_only(a, freed_in_op, last_workspace=0):
    # (the optimizer's allocations are named after parameters, "...conv1.weight",
    # "...time_emb_proj.weight": no kernel workspace of the patterns below)
    if a.key[1] in ("optimizer", "zero_grad"):
        return None
    for pat, what, where in NAMED:
        # (a LAST_WORKSPACE cause names its op's last workspaces and nothing else of the op;
        # last_workspace: the allocation's place from its op's last one freed inside it, 1 the last)
        last_n = next((n for k, n in LAST_WORKSPACES.items() if what.startswith(k)), 0)
        if last_n and not 0 < last_workspace <= last_n:
            continue
        if what.startswith("native_group_norm") and a.size > GROUP_NORM_TEMP_MAX:
            continue
        if pat.search(a.op) and (freed_in_op or not a.freed):
            return f"{what} ({where})"
    if not a.freed and a.key[1] != "build" and a.size >= CUBLAS_MIN and GEMM.search(a.op):
        return CUBLAS + " (sim/engine.c cublas_workspace)"
    return None


def ordered(allocs):
    """Inside one op (a run of the same group) the sizes largest first: the order of one
    kernel's outputs is not compared."""
    out, i = [], 0
    while i < len(allocs):
        j = i
        while j < len(allocs) and allocs[j].grp == allocs[i].grp:
            j += 1
        out.extend(sorted(allocs[i:j], key=lambda x: -x.size))
        i = j
    return out


def align(c, v, paired_v=None):
    """Pairs of equal sizes in order (difflib), and what is left on each side (paired_v, a
    list, gets vrsim's paired allocations)."""
    sm = difflib.SequenceMatcher(None, [a.size for a in c], [a.size for a in v], autojunk=False)
    left_c, left_v, matched = [], [], 0
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            matched += i2 - i1
            if paired_v is not None:
                paired_v.extend(v[j1:j2])
        else:
            left_c.extend(c[i1:i2])
            left_v.extend(v[j1:j2])
    return matched, left_c, left_v


def compare(cap_allocs, vr_allocs, vr_freed_in_op):
    """Per phase: align; name what is left that has a named cause; pair what remains by size
    where the two lie near each other; the remainder are divergences."""
    order = ["build", "forward", "backward", "optimizer", "zero_grad"]
    keys = sorted({a.key for a in cap_allocs + vr_allocs}, key=lambda k: (k[0], order.index(k[1])))
    divergences, named, matched = [], [], 0
    reordered = [0]
    for key in keys:
        c = ordered([a for a in cap_allocs if a.key == key and a.size > 0])
        v = ordered([a for a in vr_allocs if a.key == key and a.size > 0])
        # the gradient sums first, as their own stream: the capture's out-of-place adds against
        # vrsim's out-of-place sums (InputBuffer::accumulate: the GPU could not add in place);
        # the capture's others are the in-place sums of the GPU, named; vrsim's others diverge
        sums_c = [a for a in c if any(ph == key[1] and pat.search(a.op) for ph, pat, _ in FAKE_ONLY)]
        sums_v = [a for a in v if a.op == "InputBuffer::accumulate"]
        c = [a for a in c if a not in sums_c]
        v = [a for a in v if a not in sums_v]
        n, left_sc, left_sv = align(sums_c, sums_v)
        matched += n
        for a in left_sc:
            a.named = next(w for ph, pat, w in FAKE_ONLY if ph == key[1] and pat.search(a.op))
            named.append((key, a))
        for a in left_sv:
            divergences.append((key, "vrsim", a, ""))
        # each op's allocations freed inside it, in allocation order: an allocation's place
        # counted from the last (1)
        freed_order = {}
        for a in vr_allocs:
            if a.key == key and a.size > 0 and id(a) in vr_freed_in_op:
                freed_order.setdefault(a.grp, []).append(id(a))
        from_last = {i: len(ids) - k for ids in freed_order.values() for k, i in enumerate(ids)}
        for a in [a for a in v if id(a) in vr_freed_in_op]:
            w = name_vrsim_only(a, True, from_last.get(id(a), 0))
            if w and w.startswith(PRE_ALIGN + LAST_WORKSPACE):
                a.named = w
                named.append((key, a))
                v.remove(a)
        paired_v = []
        n, left_c, left_v = align(c, v, paired_v)
        matched += n
        rest_c, rest_v = [], []
        for a in left_v:
            a.named = name_vrsim_only(a, id(a) in vr_freed_in_op)
            (named if a.named else rest_v).append((key, a) if a.named else a)
        # which of two vrsim allocations of one size pairs with the capture's is the
        # alignment's choice: where a named CUDA-only one (a GroupNorm's (N, C) temporaries)
        # took the capture's allocation and an unnamed one of that size is left near it, the
        # unnamed one is the pair and the named one is what is left (counted as reordered)
        pos_all = {id(a): i for i, a in enumerate(v)}
        swapped, still = set(), []
        for a in rest_v:
            b = next((x for x in paired_v if id(x) not in swapped and x.size == a.size
                      and abs(pos_all[id(x)] - pos_all[id(a)]) <= REORDER_SPAN
                      and name_vrsim_only(x, id(x) in vr_freed_in_op)), None)
            if b is None:
                still.append(a)
                continue
            swapped.add(id(b))
            b.named = name_vrsim_only(b, id(b) in vr_freed_in_op)
            named.append((key, b))
            reordered[0] += 1
        rest_v = still
        for a in left_c:
            a.named = next((w for ph, pat, w in FAKE_ONLY if ph == key[1] and pat.search(a.op)), None)
            (named if a.named else rest_c).append((key, a) if a.named else a)
        left_c, left_v = rest_c, rest_v
        # what is left pairs by size regardless of order (one op's temporaries listed before
        # or after a neighbour's): counted, not a divergence (the live bytes below still show
        # what an order difference does to the peak)
        # (near each other only: within REORDER_SPAN allocations of the phase)
        # (positions among what both sides can have: vrsim's named CUDA-only allocations left
        # out, or a UNet's many convolution and GroupNorm workspaces push vrsim's positions past
        # the span by the end of its forward)
        pos_c = {id(a): i for i, a in enumerate(c)}
        pos_v = {id(a): i for i, a in enumerate(x for x in v if not x.named)}
        taken, rest_c = set(), []
        for a in left_c:
            b = next((x for x in left_v if id(x) not in taken and x.size == a.size and
                      abs(pos_v[id(x)] - pos_c[id(a)]) <= REORDER_SPAN), None)
            if b is None:
                rest_c.append(a)
            else:
                taken.add(id(b))
                reordered[0] += 1
        left_c = rest_c
        left_v = [x for x in left_v if id(x) not in taken]
        # a vrsim allocation named as a GroupNorm temporary where the capture left one of its size
        # near it is native_group_norm's mean or rstd ((N, G) fp32, as small as the (N, C)
        # temporaries): the alignment paired the capture's with another of the repeated sizes
        # around it and left these over; paired, counted as reordered (positions as above, a
        # named one at the place of the next unnamed one)
        before, k = {}, 0
        for x in v:
            before[id(x)] = k
            k += 0 if x.named else 1
        gn = [x for k2, x in named if k2 == key and x.named.startswith("native_group_norm")]
        paired, rest_c = set(), []
        for a in left_c:
            b = next((x for x in gn if id(x) not in paired and x.size == a.size and
                      abs(before[id(x)] - pos_c[id(a)]) <= REORDER_SPAN), None)
            if b is None:
                rest_c.append(a)
            else:
                paired.add(id(b))
                b.named = None
                reordered[0] += 1
        left_c = rest_c
        named = [(k2, x) for k2, x in named if id(x) not in paired]
        for a in left_v:
            divergences.append((key, "vrsim", a, left_c[0].op if left_c else ""))
        for a in left_c:
            divergences.append((key, "capture", a, left_v[0].op if left_v else ""))
    return divergences, named, matched, reordered[0]


def phase_name(key):
    return "build" if key[0] < 0 else f"step{key[0]}.{key[1]}"


MIB = 1048576.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture")
    ap.add_argument("scenario")
    ap.add_argument("--vrsim", default=os.environ.get("VRSIM", "./vrsim"))
    ap.add_argument("--expect", help="the expected divergences (one `phase side bytes op` a line)")
    ap.add_argument("--quiet", action="store_true", help="only the summary and the verdict")
    ap.add_argument("--list", action="store_true",
                    help="print only the divergences, one `phase side bytes op` a line (an --expect file's body)")
    a = ap.parse_args()
    if not os.path.exists(a.scenario):
        fail_input(f"no scenario {a.scenario}")
    header, cap, cseq = read_capture(a.capture)
    tmp = tempfile.mkdtemp(prefix="vrsim-oracle.")
    try:
        rows, events = run_vrsim(a.vrsim, a.scenario, tmp, header.get("versions", {}).get("transformers"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    vr, vseq = read_vrsim(rows, events)
    # vrsim allocations freed inside the op that made them (a kernel's workspace)
    freed_in_op = {id(x) for x in vr if x.freed and x.free_grp == x.grp}
    divergences, named, matched, reordered = compare(cap, vr, freed_in_op)

    scope = header["spec"].get("compare", "all")
    unheld = {}
    if scope == "forward":
        for key, _, _, _ in divergences:
            if key[1] not in ("build", "forward"):
                unheld[key[1]] = unheld.get(key[1], 0) + 1
        divergences = [d for d in divergences if d[0][1] in ("build", "forward")]
    lines = [f"{phase_name(key)} {side} {x.size} {x.op}" for key, side, x, _ in divergences]
    if a.list:
        print("\n".join(lines))
        return 0
    name = header["spec"].get("name", os.path.basename(a.capture))
    v = header["versions"]
    print(f"oracle {name}: torch {v['torch']}, transformers {v['transformers']}, peft {v['peft']}, "
          f"world {header['world_size']}, sdpa backend {header.get('sdpa_backend')}")
    print(f"  allocations matched: {matched} (capture {sum(1 for x in cap if x.size)}, "
          f"vrsim {sum(1 for x in vr if x.size)}); {reordered} more of equal size in another order "
          f"within their phase")
    totals = {}
    for key, x in named:
        t = totals.setdefault(x.named, [0, 0, set()])
        t[0] += 1
        t[1] += x.size
        t[2].add(x.op)
    if named:
        print("  named differences (CUDA-only allocations of vrsim, fake-tensor-only ones of the capture):")
        for what, (n, b, ops) in sorted(totals.items()):
            print(f"    {n:4d} x, {b:12d} bytes: {what}; e.g. {sorted(ops)[0]}")
    if unheld:
        print("  not held (the spec compares the build and the forward): "
              + ", ".join(f"{n} divergences in {ph}" for ph, n in sorted(unheld.items())))
    if divergences:
        key, side, x, other = divergences[0]
        print(f"  FIRST DIVERGENCE in {phase_name(key)}: {side} only, {x.size} bytes at '{x.op}'"
              f" (the other side there: '{other}')")
        if not a.quiet:
            print("  divergences:")
            for ln in lines:
                print("    " + ln)
    last = max([x.key[0] for x in cap] or [0])
    # (the capture's own named allocations, the out-of-place gradient sums, stay in: the GPU's
    # in-place sum keeps the old buffer where the capture frees it, so dropping the new one
    # alone would undercount)
    ce, cp = milestones(cseq, False)
    ve, vp = milestones(vseq, False)
    ve2, vp2 = milestones(vseq, True)
    print("  live bytes (MiB):              capture      vrsim  vrsim less its named")

    def row(label, get):
        c, v_, v2 = (get(x) or 0 for x in ((ce, cp), (ve, vp), (ve2, vp2)))
        print(f"    {label:26s} {c / MIB:10.2f} {v_ / MIB:10.2f} {v2 / MIB:10.2f}"
              + ("" if c == v2 else f"   ({v2 - c:+d} bytes)"))
    row("after build (parameters)", lambda m: m[0].get((-1, "build")))
    row(f"after forward, step {last}", lambda m: m[0].get((last, "forward")))
    row(f"step {last} peak", lambda m: m[1].get(last))
    print(f"  capture parameter bytes {header.get('param_bytes')}")
    record_ok = True
    if header["spec"].get("record"):
        # the done-when check of the oracle: the capture's peak (as the allocator counts it) plus
        # the CUDA-only bytes vrsim models at its own peak (kernel workspaces, cuBLAS handles)
        # is the measured peak allocated of the H200 run of this configuration
        steps = read_record(header["spec"])
        cpk, vpk, vpk2 = step_peaks(cseq, False), step_peaks(vseq, False), step_peaks(vseq, True)
        rec = header["spec"]["record"]
        print(f"  against the H200 record {rec['file']} {rec['name']} (rank {rec.get('rank', 0)}), "
              f"peak allocated in MiB:")
        print("    step   capture  + CUDA-only (vrsim)  = predicted   measured   difference")
        unseen = rec.get("unseen") or {}
        if unseen:
            print(f"    + {unseen['bytes']} bytes unseen by both: {unseen['what']}")
        for st in sorted(cpk):
            if st < 0 or st >= len(steps):
                continue
            pred = cpk[st] + (vpk.get(st, 0) - vpk2.get(st, 0)) + int(unseen.get("bytes", 0))
            meas = int(round(steps[st]["peak_alloc_mib"] * MIB))
            ok = pred == meas
            record_ok = record_ok and ok
            print(f"    {st:4d} {cpk[st] / MIB:10.2f} {(vpk.get(st, 0) - vpk2.get(st, 0)) / MIB:12.2f}"
                  f" {pred / MIB:20.2f} {meas / MIB:10.2f} {pred - meas:+12d} B{'' if ok else '   FAIL'}")
        if not record_ok:
            print("  FAIL: the capture plus vrsim's CUDA-only terms is not the measured peak")
            return 1
    if a.expect:
        try:
            with open(a.expect) as f:
                want = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
        except OSError as e:
            fail_input(f"cannot read {a.expect}: {e}")
        # (the same divergences in another order are the same: a library's order of two
        # small tensors is no change of what is allocated)
        if sorted(want) == sorted(lines):
            print(f"  PASS: the {len(lines)} divergences are the expected ones ({a.expect})")
            return 0
        print(f"  FAIL: the divergences differ from {a.expect}:")
        for d in difflib.unified_diff(sorted(want), sorted(lines), "expected", "found", lineterm="", n=0):
            print("    " + d)
        return 1
    if divergences:
        print(f"  FAIL: {len(divergences)} divergences")
        return 1
    print("  PASS: every allocation matches, outside the named CUDA-only differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
