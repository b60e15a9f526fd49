-- LLaMA2-70B on 8x A100-80GB: with DeepSpeed ZeRO-3 (parameters partitioned at construction,
-- zero.Init) and the optimizer offloaded to the host (CPU Adam), does a full fine-tune fit per
-- GPU at micro-batch 1 x 4096 with checkpointing, and what does it cost?
--
-- Answer (vrsim scenarios/llama70b_zero3_offload.lua):
--   it fits per GPU (the checked answers below give the figures)
--   host memory for the offloaded fp32 master weights and Adam state: 128.5 GiB per GPU, 1 TiB
--   per node (a DGX A100 has 2 TiB; --set host=workstation exits 3: it does not fit the host)
--   step 27.9 s, bound by compute (roofline on the A100 datasheet: no calibrated A100 profile)
--   with 1.4 s of PCIe copies overlapped.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama70b_zero3_offload.lua
--   FITS: peak reserved 34.14 GiB of 78.45 GiB usable (43.5 %), 44.31 GiB headroom
--   $ ./vrsim scenarios/llama70b_zero3_offload.lua --set host=workstation
--   DOES NOT FIT IN HOST MEMORY: the offloaded state needs 1028.0 GiB per node, the host has 128.0 GiB
return {
  title = "LLaMA2-70B, DeepSpeed ZeRO-3 + optimizer offload, 8x A100-80GB (NVLink)",
  hardware = { gpu = "a100_80g", count = 8, interconnect = "nvlink", host = "dgx_a100" },
  model = { arch = "llama2", size = "70b" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", build = "direct", strategy = "zero3",
               checkpointing = true, steps = 3,
               zero = { offload_optimizer = "cpu", stage3_param_persistence_threshold = 1e5 } },
}
