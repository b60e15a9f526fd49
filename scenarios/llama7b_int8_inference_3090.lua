-- Can LLaMA2-7B run inference in 8-bit (bitsandbytes LLM.int8, load_in_8bit) on an RTX 3090,
-- for a 2048-token prompt?
--
-- Answer (./vrsim scenarios/llama7b_int8_inference_3090.lua):
--   FITS: peak reserved 7.15 GiB of 23.09 GiB usable: int8 weights with fp32 row scales
--   (6.6 GiB; lm_head and embeddings stay fp16), plus the prompt's activations and key/value
--   cache. In fp16 (--set quant=none) it needs 12.97 GiB.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_int8_inference_3090.lua
--   FITS: peak reserved 8.02 GiB of 23.09 GiB usable (34.8 %), 15.06 GiB headroom
--   $ ./vrsim scenarios/llama7b_int8_inference_3090.lua --set quant=none
--   FITS: peak reserved 14.23 GiB of 23.09 GiB usable (61.6 %), 8.86 GiB headroom
return {
  title = "LLaMA2-7B inference in 8-bit (LLM.int8) on an RTX 3090",
  hardware = { gpu = "rtx3090" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "fp16", inference = true, quant = "int8",
               steps = 2 },
}
