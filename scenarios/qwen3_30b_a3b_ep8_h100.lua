-- Qwen3-30B-A3B (48 layers of 128 experts, 8 a token) on one node of 8 H100 SXM with expert
-- parallelism over all 8: each GPU holds 16 experts of every layer whole, and torchtitan's
-- all-to-all token dispatcher sends each token-expert pair to its expert's GPU and back
-- (lua/strategies/ep.lua, around transformers' grouped-GEMM experts forward; the model's own
-- router). The attention, norms, embeddings and head are FSDP2 over the 8. bf16, AdamW foreach,
-- full activation checkpointing, micro-batch 1 x 8192 per GPU, routing balanced.
--
-- vrsim's answer: it fits, 51.1 GiB reserved at the peak (the head's fp32 log-softmax over the
-- 151936-entry vocabulary, 4.6 GiB, and its gradients), the experts' 16 x 48 layers as parameters
-- (96 MiB of gate_up_proj a layer) and their AdamW state; 1.41 s a step, 5801 tokens/s per GPU.
-- FSDP2 alone (--set parallel.ep=1: every expert sharded 1/8 and all-gathered per layer) holds
-- a little more (53.1 GiB) and is faster here (1.29 s): the gathers overlap compute, while the
-- dispatch and combine all-to-alls block the GEMMs that read them. With the busiest GPU receiving
-- twice the mean (--set parallel.ep_imbalance=2) the step is 1.84 s.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/qwen3_30b_a3b_ep8_h100.lua
--   FITS: peak reserved 53.26 GiB of 78.43 GiB usable (67.9 %), 25.17 GiB headroom
--   $ ./vrsim scenarios/qwen3_30b_a3b_ep8_h100.lua --set parallel.ep=1
--   FITS: peak reserved 53.17 GiB of 78.43 GiB usable (67.8 %), 25.26 GiB headroom
--   $ ./vrsim scenarios/qwen3_30b_a3b_ep8_h100.lua --set micro_batch=2
--   FITS: peak reserved 66.29 GiB of 78.43 GiB usable (84.5 %), 12.14 GiB headroom
return {
  title = "Qwen3-30B-A3B on 8 H100 SXM, EP 8 x FSDP2 8, micro-batch 1 x 8192, full checkpointing",
  hardware = { gpu = "h100_sxm", count = 8 },
  model = { config = "configs/qwen3-30b-a3b.json" },
  training = { micro_batch = 1, seq = 8192, precision = "bf16", checkpointing = true, steps = 2,
               parallel = { ep = 8 } },
}
