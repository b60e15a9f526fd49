-- Llama-3-8B preference-tuned with TRL's DPOTrainer and an all-linear LoRA (r = 16) on one H100
-- 80GB, prompts of 512 tokens and completions of 512: how large a batch fits, and what does
-- precomputing the reference's log-probs buy?
--
-- Answer (vrsim: ./vrsim scenarios/llama3_8b_dpo_lora_h100.lua [--set ...]): each prompt is two
-- rows (chosen, rejected) of 1024 tokens, and the reference is the same model with its adapters
-- disabled (no second copy). With gradient checkpointing 4 prompts take 21.46 GiB reserved, and
-- up to 42 fit (./vrsim maxbatch scenarios/llama3_8b_dpo_lora_h100.lua: "micro_batch = 42 fits
-- (peak reserved 78.26 GiB ...); 43 does not"). Without checkpointing 2 prompts fit (54.83 GiB);
-- the peak is then the reference's forward over the policy's saved activations, and
-- precompute_ref_log_probs removes that forward: the peak falls a little (54.69 GiB) and the step
-- by a fifth (658 -> 533 ms), since the reference costs a forward of the whole model.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_8b_dpo_lora_h100.lua
--   FITS: peak reserved 21.71 GiB of 78.43 GiB usable (27.7 %), 56.72 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_dpo_lora_h100.lua --set micro_batch=2 --set checkpointing=false
--   FITS: peak reserved 54.49 GiB of 78.43 GiB usable (69.5 %), 23.94 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_dpo_lora_h100.lua --set micro_batch=2 --set checkpointing=false --set training.dpo.precompute_ref_log_probs=true
--   FITS: peak reserved 54.68 GiB of 78.43 GiB usable (69.7 %), 23.75 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_dpo_lora_h100.lua --set micro_batch=4 --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.27.mlp.gate_proj.lora_scale'
return {
  title = "Llama-3-8B, DPO with all-linear LoRA r16 (TRL), on one H100 80GB at 512 + 512 tokens",
  hardware = { gpu = "h100_sxm" },
  model = { config = "configs/llama-3-8b.json" },
  training = { micro_batch = 4, precision = "lora_bf16", checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" },
               dpo = { prompt_length = 512, completion_length = 512, max_length = 1024 } },
}
