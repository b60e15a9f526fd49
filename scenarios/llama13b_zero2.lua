-- The headline question: LLaMA2-13B, bf16 weights with fp32 master weights and Adam state,
-- DeepSpeed ZeRO-2 over 8x A100-80GB on NVLink, micro-batch 4 x 2048 tokens with gradient
-- checkpointing: does it fit per GPU, and how long is a step?
--
-- Answer (vrsim scenarios/llama13b_zero2.lua, 2026-12-01):
--   FITS: peak reserved 61.96 GiB of 78.45 GiB usable per GPU (79.0 %)
--   step 4970.6 ms, 13185 tokens/s for the job (1648 per GPU). Basis: no A100 was measured
--   here; the H200's measured fractions of peak are carried to the A100 (its dense 312 TFLOP/s
--   bf16 at 1410 MHz, an assumed step clock, x0.291 of the H200's 1070.5 at its measured
--   1980 MHz; its 2.04 TB/s HBM, x0.425; docs/step-time.md). The carried GEMM plateau, 241
--   TFLOP/s, is 10 % under the best cuBLAS figure published for an A100 (267.9), so this step
--   is likely slow by up to that much where GEMMs dominate; published A100 runs sit 6-22 %
--   above vrsim (tests/data/published_throughput.tsv). 70 % of the 176 ms of reduce-scatter
--   and all-gather hides under the backward, the last layers' reduce-scatters and the
--   parameter all-gather do not.
--   DeepSpeed's own estimator says 72.7 GiB of model states per GPU; it counts whole bf16
--   gradients, which ZeRO-2 partitions: the simulation holds 45.6 GiB of model states (with the
--   3.0 GiB gradient partition), plus the two reduce buckets (2 x 954 MiB), activations and
--   allocator slack.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_zero2.lua
--   FITS: peak reserved 61.96 GiB of 78.45 GiB usable (79.0 %), 16.49 GiB headroom
--   $ ./vrsim scenarios/llama13b_zero2.lua --set grad_accum=8
--   FITS: peak reserved 61.96 GiB of 78.45 GiB usable (79.0 %), 16.49 GiB headroom
return {
  title = "LLaMA2-13B, DeepSpeed ZeRO-2, 8x A100-80GB (NVLink), micro-batch 4 x 2048",
  hardware = { gpu = "a100_80g", count = 8, interconnect = "nvlink" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 4, seq = 2048, precision = "bf16", build = "direct", strategy = "zero2",
               checkpointing = true, steps = 3,
               zero = { reduce_bucket_size = 5e8, allgather_bucket_size = 5e8, overlap_comm = true,
                        contiguous_gradients = true } },
}
