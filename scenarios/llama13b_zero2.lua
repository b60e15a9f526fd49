-- The headline question: LLaMA2-13B, bf16 weights with fp32 master weights and Adam state,
-- DeepSpeed ZeRO-2 over 8x A100-80GB on NVLink, micro-batch 4 x 2048 tokens with gradient
-- checkpointing: does it fit per GPU, and how long is a step?
--
-- Answer (vrsim scenarios/llama13b_zero2.lua, 2026-12-01):
--   FITS: peak reserved 61.96 GiB of 78.45 GiB usable per GPU (79.0 %)
--   step 4522.7 ms, 14490 tokens/s for the job (1811 per GPU). Basis: no A100 was measured
--   here; the H200's measured fractions of peak are carried to the A100 through its 2.04 TB/s
--   HBM (x0.425) and, for GEMMs and attention, its published sustained best matmul, 271.2
--   TFLOP/s, over the H200's best measured GEMM, 826.3 (x0.328; its dense 312 TFLOP/s at 1410
--   MHz would give x0.291 and a plateau of 241, below what an A100 sustains; docs/step-time.md).
--   Published A100 runs sit within 15 % of vrsim, MosaicML's fused-kernel runs 8-15 % above
--   it (tests/data/published_throughput.tsv). 70 % of the 176 ms of reduce-scatter
--   and all-gather hides under the backward, the last layers' reduce-scatters and the
--   parameter all-gather do not.
--   DeepSpeed's own estimator says 72.7 GiB of model states per GPU; it counts whole bf16
--   gradients, which ZeRO-2 partitions: the simulation holds 45.6 GiB of model states (with the
--   3.0 GiB gradient partition), plus the two reduce buckets (2 x 954 MiB), activations and
--   allocator slack.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_zero2.lua
--   FITS: peak reserved 61.92 GiB of 78.45 GiB usable (78.9 %), 16.53 GiB headroom
--   $ ./vrsim scenarios/llama13b_zero2.lua --set grad_accum=8
--   FITS: peak reserved 61.92 GiB of 78.45 GiB usable (78.9 %), 16.53 GiB headroom
return {
  title = "LLaMA2-13B, DeepSpeed ZeRO-2, 8x A100-80GB (NVLink), micro-batch 4 x 2048",
  hardware = { gpu = "a100_80g", count = 8, interconnect = "nvlink" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 4, seq = 2048, precision = "bf16", build = "direct", strategy = "zero2",
               checkpointing = true, steps = 3,
               zero = { reduce_bucket_size = 5e8, allgather_bucket_size = 5e8, overlap_comm = true,
                        contiguous_gradients = true } },
}
