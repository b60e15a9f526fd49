-- Llama-3-8B with all-linear LoRA on a 24 GB RTX 4090, trained on data whose sequences differ in
-- length (sixteen chat samples of 96 to 2048 tokens): padded to the longest of each micro-batch
-- of 2, as the Trainer's default collator does, or flattened padding-free into one row
-- (DataCollatorWithFlattening). Does the worst batch fit, and what does padding cost?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/llama3_8b_lora_variable_length_4090.lua [--set ...]):
--   padded, the worst batch a shuffle can deal is 2 x 2048 (the longest sample with the
--   shortest, with its (2, 1, 2048, 2048) mask) and fits with 40 MiB to spare; an epoch computes
--   29.8 % padding. Padding-free, the worst row holds the two longest samples (4036 tokens,
--   its 4036 x 4036 block-causal mask built per forward) and fits by 50 MiB; its median batch
--   (p50, 1204 tokens) steps in 1.17 s against the padded median's 1.91 s (2 x 1024).
--   At micro-batch 4 neither fits (the fp32 logits of 4 x 2048 tokens).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_8b_lora_variable_length_4090.lua
--   FITS: peak reserved 22.93 GiB of 22.97 GiB usable (99.8 %), 0.04 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_lora_variable_length_4090.lua --set training.data.batch=p50
--   FITS: peak reserved 20.24 GiB of 22.97 GiB usable (88.1 %), 2.73 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_lora_variable_length_4090.lua --set training.data.batching=padding_free
--   FITS: peak reserved 22.92 GiB of 22.97 GiB usable (99.8 %), 0.05 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_lora_variable_length_4090.lua --set micro_batch=4
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'logits.float'
return {
  title = "Llama-3-8B all-linear LoRA on a 24 GB RTX 4090, variable-length data",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/llama-3-8b.json" },
  training = { micro_batch = 2, precision = "lora_bf16", build = "direct", checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" },
               data = { lengths = { 412, 1310, 96, 2048, 733, 180, 1544, 655,
                                    290, 1988, 512, 120, 875, 1270, 344, 1024 } } },
}
