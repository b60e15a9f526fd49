-- QLoRA on a 24 GB card: LLaMA2-7B with NF4 base weights (double quantization), LoRA r = 8 on
-- q and v, gradient checkpointing, on an RTX 3090: which micro-batch fits at 2048 tokens?
--
-- Answer (./vrsim scenarios/llama7b_qlora_3090.lua; ./vrsim maxbatch scenarios/llama7b_qlora_3090.lua):
--   micro-batch 4: FITS, peak reserved 9.94 GiB of 23.09 GiB usable (43.0 %)
--   largest that fits: micro_batch = 14 (22.05 GiB reserved); 15 does not.
--   The 4-bit base is 3.7 GiB with its absmax tables; each linear dequantizes its weight to
--   bf16 for the GEMM (a temporary, again in backward).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_qlora_3090.lua
--   FITS: peak reserved 10.08 GiB of 23.09 GiB usable (43.7 %), 13.00 GiB headroom
--   $ ./vrsim scenarios/llama7b_qlora_3090.lua --set micro_batch=14
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/llama7b_qlora_3090.lua --set micro_batch=15
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax.backward'
return {
  title = "LLaMA2-7B QLoRA (NF4 + LoRA r=8) on an RTX 3090",
  hardware = { gpu = "rtx3090" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 4, seq = 2048, precision = "lora_bf16", quant = "nf4",
               checkpointing = true, steps = 3 },
}
