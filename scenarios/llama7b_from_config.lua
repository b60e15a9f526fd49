-- LLaMA2-7B read from the Hugging Face config.json users already have (configs/), trained in
-- bf16 on one A100-80GB at micro-batch 1: does a plain full fine-tune fit there?
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_from_config.lua
--   FITS: peak reserved 66.58 GiB of 78.45 GiB usable (84.9 %), 11.87 GiB headroom
return {
  title = "LLaMA2-7B from config.json, full bf16 fine-tune on an A100-80GB",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", config = "configs/llama-2-7b-hf.json" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16" },
}
