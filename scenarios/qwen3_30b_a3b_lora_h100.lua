-- Qwen3-30B-A3B (48 layers, 128 experts of which 8 per token, 3.3 B active of 30.5 B parameters)
-- with LoRA r = 16 on the attention's q, k, v, o (the router and the experts frozen; peft 0.21's
-- "all-linear" would also wrap the experts and the router by target_parameters, and then refuses
-- this lora_dropout: see qwen3_30b_a3b_lora_experts_h100.lua) and gradient checkpointing on one
-- 80 GB H100 at 4096 tokens: does it fit, at what micro-batch, how fast?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/qwen3_30b_a3b_lora_h100.lua [--set ...];
--   ./vrsim maxbatch scenarios/qwen3_30b_a3b_lora_h100.lua):
--   the frozen bf16 weights are 56.9 GiB, all of them on the card. Micro-batch 2 fits with 2.9 GiB
--   to spare ("micro_batch = 2 fits (peak reserved 75.49 GiB of 78.43 GiB, step 1180.1 ms, 6942
--   tokens/s); 3 does not"), micro-batch 1 with 12 GiB; the peak is the loss's backward, where
--   the fp32 log-probabilities of 4096 x 151,936 logits and their gradient (2374 MiB each) meet
--   the weights. Without checkpointing even micro-batch 1 runs out of memory in the experts of
--   layer 31 (each layer's grouped GEMMs save 32,768 x 1536 bf16 rows). 4-bit loading does not
--   shrink the experts (bitsandbytes quantizes nn.Linear only: the run says so).
-- Measured on one H100 80GB at 700 W (2026-12-06, random weights, predicted first:
-- validation/records/llama_h100_gen10_fulldepth.jsonl): micro-batch 1 peaked at 66377.5 MiB
-- allocated as predicted, micro-batch 2 fit under a 78 GiB cap (74299.6 MiB) and 3 did not, and
-- without checkpointing micro-batch 1 did not; the step took 768 ms at micro-batch 1 and 1214 ms at
-- 2, 8-10 % above vrsim's, the autograd engine's host time in the MoE layers' backward
-- (docs/validation.md, the thirteenth set). The MoE block's allocations also match transformers
-- 5.25's grouped_mm path under fake tensors (tests/test_moe.sh).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_h100.lua
--   FITS: peak reserved 66.58 GiB of 78.43 GiB usable (84.9 %), 11.85 GiB headroom
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_h100.lua --set micro_batch=2
--   FITS: peak reserved 76.21 GiB of 78.43 GiB usable (97.2 %), 2.22 GiB headroom
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_h100.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.31.mlp.experts.gate_up_proj'
return {
  title = "Qwen3-30B-A3B, attention LoRA r16, on one 80 GB H100 at 4096 tokens",
  hardware = { gpu = "h100_sxm" },
  model = { config = "configs/qwen3-30b-a3b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = { "q_proj", "k_proj", "v_proj", "o_proj" } } },
}
