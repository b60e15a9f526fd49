"""A measured allocator trace beside vrsim's, by phase of one step, on the host clock.

PyTorch's trace (torch.cuda.memory._record_memory_history, as CSV: seq,time_us,action,addr,size,
stream) stamps every allocation with the host time of the call; `vrsim SCENARIO --alloc-trace F`
writes the same columns with the simulated host clock and the allocating op's name (frames). The
allocator is replayed exactly, so the two runs make the same requests in the same order, and a
step's allocations can be matched by size. This prints, for the last step of both traces, the host
time of the forward (first allocation of the step to the loss's backward), the backward (to the
first optimizer allocation) and the pauses in the measured trace over --pause-ms with the vrsim op
they fall in. Step boundaries come from vrsim's trace (the op that opens the step, named by
--step-op); the measured trace's are the allocations matched to them.

  ./vrsim SCENARIO.lua --no-files --no-suggest --alloc-trace /tmp/sim.csv
  python3 validation/harness/trace_host_phases.py REAL.csv[.gz] /tmp/sim.csv \\
      --step-op unet.time_proj.arange --loss-op mse_loss.backward

Runs here (no GPU): the alignment is difflib's over one step's allocation sizes.
"""
import argparse
import csv
import difflib
import gzip
import sys


def allocations(path):
    """[(time_us, size, frames)] of every alloc event, in order."""
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt") as f:
        r = csv.reader(f)
        head = next(r)
        col = {name: k for k, name in enumerate(head)}
        for x in r:
            if x[col["action"]] == "alloc":
                frames = x[col["frames"]] if "frames" in col and len(x) > col["frames"] else ""
                rows.append((int(x[col["time_us"]]), int(x[col["size"]]), frames))
    return rows


def first_index(rows, start, pred):
    for k in range(start, len(rows)):
        if pred(rows[k][2]):
            return k
    sys.exit("trace_host_phases: no allocation of the op asked for after index %d" % start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("real")
    ap.add_argument("sim")
    ap.add_argument("--step-op", required=True, help="the op whose allocation opens a step")
    ap.add_argument("--loss-op", required=True, help="the first backward op's name")
    ap.add_argument("--optim-prefix", default="adamw", help="optimizer ops' name prefix")
    ap.add_argument("--pause-ms", type=float, default=3.0)
    a = ap.parse_args()
    real, sim = allocations(a.real), allocations(a.sim)
    starts = [k for k, r in enumerate(sim) if r[2] == a.step_op and (k == 0 or sim[k - 1][2] != a.step_op)]
    if len(starts) < 2:
        sys.exit("trace_host_phases: vrsim's trace has fewer than two steps opened by %s" % a.step_op)
    s0 = starts[-1]
    s_loss = first_index(sim, s0, lambda f: f == a.loss_op)
    s_opt = first_index(sim, s_loss, lambda f: f.startswith(a.optim_prefix))
    n = len(sim) - s0
    # the measured trace's last step: its last n allocations, and some slack for requests that
    # vrsim's trace does not make (the alignment skips them)
    r0 = max(0, len(real) - n - 200)
    rs = real[r0:]
    sm = difflib.SequenceMatcher(None, [x[1] for x in rs], [x[1] for x in sim[s0:]], autojunk=False)
    to_real = {}
    for i, j, size in sm.get_matching_blocks():
        for k in range(size):
            to_real[s0 + j + k] = r0 + i + k

    def real_at(k):
        while k not in to_real:
            k += 1
        return real[to_real[k]][0]

    marks = [s0, s_loss, s_opt]
    print("last step: %d allocations in vrsim's trace, %d matched by size" % (n, len(to_real)))
    print("%-44s %12s %12s" % ("host time", "measured ms", "vrsim ms"))
    # the optimizer's first allocation comes after its in-place foreach calls, which allocate
    # nothing: the second span holds them
    for name, lo, hi in (("forward", marks[0], marks[1]),
                         ("backward, then the optimizer's first calls", marks[1], marks[2])):
        print("%-44s %12.1f %12.1f" % (name, (real_at(hi) - real_at(lo)) / 1e3, (sim[hi][0] - sim[lo][0]) / 1e3))
    # pauses: consecutive measured allocations further apart than --pause-ms, named by the vrsim
    # op matched at or after the later one
    to_sim = sorted((r, k) for k, r in to_real.items())
    lo, hi = to_real[min(to_real)], to_real[max(to_real)]
    m = 0
    for k in range(lo + 1, hi + 1):
        gap = real[k][0] - real[k - 1][0]
        if gap > a.pause_ms * 1e3:
            while to_sim[m][0] < k:
                m += 1
            print("pause %.1f ms before %s" % (gap / 1e3, sim[to_sim[m][1]][2]))

if __name__ == "__main__":
    main()
