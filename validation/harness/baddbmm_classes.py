#!/usr/bin/env python3
"""peft's expert folding as vrsim's op classes, from measure_torch_ops.py --only baddbmm's table: a
lua/hw/calibrated/<gpu>_baddbmm.lua vrsim joins to the card's torch_ops. Standard library only.

  mm_baddbmm      the class baddbmm rows renamed: torch.baddbmm(W, lhs, rhs) whole (the
                  result.copy_(W) memcpy, then cuBLAS's batched GEMM with beta 1 in place) over
                  the bytes vrsim's op moves (lora.lua baddbmm_bytes: W read and written twice,
                  lhs and rhs read); the op's kind
  mm_baddbmm_bwd  the class baddbmm_bwd rows renamed, where the table has them: BaddbmmBackward0
                  with W frozen (two bmm that each stream the stack's gradient, and the alpha
                  scaling of each factor's gradient) over twice the stack's bytes; the op's
                  backward kind
The in-place GEMM's own rows (baddbmm_gemm) stay the results file's only.

  python3 validation/harness/baddbmm_classes.py validation/results/baddbmm_h100_sxm.lua \
      lua/hw/calibrated/h100_sxm_baddbmm.lua
"""
import re
import sys
import textwrap

ROW = re.compile(r'\{class="(baddbmm|baddbmm_bwd)", (op=.*)\},$')
GPU = re.compile(r"^-- PyTorch's own kernels on (.*?), \d{4}-\d\d-\d\d")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: baddbmm_classes.py RESULTS.lua OUT.lua")
    src, out = sys.argv[1], sys.argv[2]
    gpu, rows = None, []
    with open(src) as f:
        for line in f:
            m = GPU.match(line)
            if m:
                gpu = m.group(1)
            m = ROW.search(line.strip())
            if m:
                rows.append('    {class="mm_%s", %s},' % (m.group(1), m.group(2)))
    if not gpu or not rows:
        sys.exit("%s: not a measure_torch_ops.py --only baddbmm table (no GPU line or no baddbmm rows)" % src)
    bwd = any('"mm_baddbmm_bwd"' in r for r in rows)
    text = ("peft's expert folding, torch.baddbmm(W, lhs, rhs) of a MoE's stacked experts (LoRA on "
            "ParamWrapper), on %s: the whole call's time (the result.copy_(W) memcpy, then cuBLAS's "
            "batched GEMM with beta 1 in place) over the bytes vrsim's op moves (lora.lua baddbmm_bytes: "
            "W read and written twice, lhs and rhs read), class mm_baddbmm (the op's kind)" % gpu)
    if bwd:
        text += ("; its backward (BaddbmmBackward0's two bmm over the stack's gradient and the factors' "
                 "alpha scaling) over twice the stack's bytes, class mm_baddbmm_bwd (the op's backward kind)")
    text += (". Source: the class baddbmm%s rows of %s (measure_torch_ops.py --only baddbmm), renamed by "
             "validation/harness/baddbmm_classes.py; the in-place GEMM's own rows (baddbmm_gemm) are that "
             "file's only." % (" and baddbmm_bwd" if bwd else "", src))
    head = ["-- " + line for line in textwrap.wrap(text, 96, break_on_hyphens=False)] + ["return {", "  torch_ops = {"]
    with open(out, "w") as f:
        f.write("\n".join(head + rows + ["  },", "}"]) + "\n")


if __name__ == "__main__":
    main()
