-- Qwen3-8B (q_norm / k_norm on every head, 8 key/value heads, a 151,936-token vocabulary) with
-- the common LoRA recipe (all-linear, r = 16, alpha 32, dropout 0.05) and gradient checkpointing
-- on a 24 GB RTX 4090 at 4096 tokens: what is the largest micro-batch?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/qwen3_8b_lora_4090.lua [--set ...]):
--   with the weights in bf16, none: micro-batch 1 runs out of memory at the loss's backward, where
--   the fp32 log-probabilities of 4096 x 151,936 logits and their gradient (2374 MiB each) meet
--   15.4 GiB of bf16 weights. At 2048 tokens micro-batch 1 fits (--set seq=2048: 21.26 GiB).
--   Loaded in 4 bits (QLoRA, --set quant=nf4) micro-batch 1 fits (./vrsim maxbatch
--   scenarios/qwen3_8b_lora_4090.lua --set quant=nf4: "micro_batch = 1 fits (peak reserved
--   16.89 GiB of 22.97 GiB ...); 2 does not"). Micro-batch 2 needs 22.83 GiB reserved and fits
--   only with --alloc-conf expandable_segments:True: without it the gradient of the fp32
--   log-probabilities (4748 MiB) finds no free block that size at the loss's backward.
-- Not measured on a GPU: the model is Llama's measured ops plus the two per-head norms
-- (tests/test_families.sh checks their fp32 copies and the parameter count against transformers).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/qwen3_8b_lora_4090.lua
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/qwen3_8b_lora_4090.lua --set seq=2048
--   FITS: peak reserved 21.27 GiB of 22.97 GiB usable (92.6 %), 1.70 GiB headroom
--   $ ./vrsim scenarios/qwen3_8b_lora_4090.lua --set quant=nf4 --set micro_batch=2
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax.backward'
return {
  title = "Qwen3-8B, all-linear LoRA r16, on a 24 GB RTX 4090 at 4096 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/qwen3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", build = "direct",
               checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" } },
}
