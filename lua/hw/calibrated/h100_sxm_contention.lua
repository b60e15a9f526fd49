-- Compute kernels slowed beside an NCCL collective on the H100: a PUBLISHED figure, not measured
-- here (no two-GPU machine ran validation/harness/measure_contention.py on H100s).
-- source: pytorch/pytorch pull request 179937, "[overlap] using copyengine collectives"
-- (I. Kobzarev, 2026-04-10), its description: "NCCL collectives use SMs, which makes matmuls that
-- are overlapped by them 30-40% slower"; its runs: Llama3 8B on 8xH100 NVLink, inductor with
-- transformer_block_bucketing, 4K sequence, FSDP (TP=1, batch 2) and TP sweeps. FSDP's collectives
-- there are a block's all-gather and reduce-scatter, about 416 MiB each in bf16 (218 M parameters).
-- compute: the midpoint of the source's 30-40 % (its own range, not a fit to any throughput):
--   a GEMM wholly overlapped by a collective runs 1.35x as long (EngineConfig.contention[0] is
--   the fraction of the overlapped time added).
-- memory: none. The source gives no figure for memory-bound kernels, so they are not slowed.
-- Where the source's conditions differ from a run's, the figure is carried unchanged:
--   - its collectives ran over NVLink inside one node; across nodes NCCL may take fewer SMs
--     (one CTA, one SM, a channel: 16 on a DGX's 8 NICs, NVIDIA/nccl#689, against 24 CTAs for an
--     NVLink all-gather on an H100, NVIDIA developer forum thread 337991);
--   - its card is named only "H100" (the board's memory, 80 GB HBM3 or 96 GB HBM2e, is not
--     said): the catalog reads a bare "H100" as this board (lua/hw/gpu_aliases.lua), and no
--     other board gets the figure.
-- Other published figures, and why they are not used: docs/step-time.md section 3,
-- "Published contention measurements".
return {
  gpu = "h100_sxm",
  source = "published, pytorch/pytorch#179937: 30-40 % on 8xH100 NVLink FSDP",
  contention = { compute = 0.35 },
}
