-- A batch of 32 sequences of 2048 tokens does not fit on an A100-80GB for a full bf16
-- fine-tune of LLaMA2-7B even with checkpointing; does gradient accumulation of 8 micro-batches
-- of 4 (the same effective batch) fit?
--
-- Answer (./vrsim scenarios/llama7b_grad_accum.lua; --set micro_batch=32 --set grad_accum=1):
--   8 x 4   FITS: peak reserved 66.50 GiB of 78.45 GiB usable (84.8 %)
--   1 x 32  DOES NOT FIT: CUDA out of memory in step 1 at op 'logits.float'
--   Gradients accumulate into .grad across the micro-batches (in place after the first);
--   only one micro-batch's activations are alive at a time.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_grad_accum.lua
--   FITS: peak reserved 64.64 GiB of 78.45 GiB usable (82.4 %), 13.81 GiB headroom
--   $ ./vrsim scenarios/llama7b_grad_accum.lua --set micro_batch=32 --set grad_accum=1
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax'
return {
  title = "LLaMA2-7B bf16 on an A100-80GB: 8 x 4 accumulated against a batch of 32",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 4, grad_accum = 8, seq = 2048, precision = "bf16",
               checkpointing = true, steps = 2 },
}
