-- Gemma-2-9B (eager attention with logit soft-capping, final logit soft-capping, a 256,000-token
-- vocabulary) with QLoRA (4-bit weights, all-linear LoRA r = 16) and gradient checkpointing on a
-- 24 GB RTX 4090: does its 4096-token context fit at micro-batch 1, and what does?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/gemma2_9b_qlora_4090.lua [--set ...]):
--   not at 4096 tokens: the step runs out of memory at the loss's backward, where the fp32
--   log-probabilities of 4096 x 256,000 logits and their gradient (4000 MiB each) meet the final
--   soft-cap's saved tanh output (2000 MiB, bf16) and 5.9 GiB of weights (the 1.75 GiB embedding,
--   tied to the head, stays in bf16). 3072 tokens only just fit (--set seq=3072: the whole card,
--   after the allocator frees its cached blocks twice; the weights sit in from_pretrained's warmup
--   segment), 2048 with room (--set seq=2048: 17.24 GiB; ./vrsim maxbatch ... --set seq=2048:
--   micro-batch 1, 2 does not).
--   Gemma 2 runs eager attention whatever the scenario asks (transformers' Gemma2 classes do not
--   dispatch SDPA: `_supports_sdpa = False`), which the run's notes say.
-- Not measured on a GPU: the ops are transformers 5.25's modeling_gemma2.py (lua/models/gemma2.lua);
-- tests/test_families.sh checks the parameter count against transformers and the soft-cap tensors.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/gemma2_9b_qlora_4090.lua
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/gemma2_9b_qlora_4090.lua --set seq=3072
--   FITS: peak reserved 20.39 GiB of 22.97 GiB usable (88.8 %), 2.58 GiB headroom
--   $ ./vrsim scenarios/gemma2_9b_qlora_4090.lua --set seq=2048
--   FITS: peak reserved 17.24 GiB of 22.97 GiB usable (75.0 %), 5.73 GiB headroom
return {
  title = "Gemma-2-9B QLoRA (nf4, all-linear r16) on a 24 GB RTX 4090 at 4096 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/gemma-2-9b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", build = "direct", quant = "nf4",
               checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" } },
}
