-- Phi-3-mini-4k-instruct (3.8B; fused qkv_proj and gate_up_proj, a 2047-token sliding window) with
-- LoRA r = 16 on its four projections by their names (qkv_proj, o_proj, gate_up_proj, down_proj:
-- peft has no default targets for Phi-3) on a 24 GB RTX 4090 at its 4096-token context: what is
-- the largest micro-batch, and is gradient checkpointing needed?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/phi3_mini_lora_4090.lua [--set ...]):
--   micro-batch 6 with checkpointing (./vrsim maxbatch scenarios/phi3_mini_lora_4090.lua:
--   "micro_batch = 6 fits (peak reserved 22.61 GiB of 22.97 GiB ...); 7 does not"). Without
--   checkpointing not even micro-batch 1 fits: the forward runs out at layer 20, every layer
--   before it keeping its activations (the (b, s, 2 x 8192) gate_up output, whose halves SiLU and
--   the product keep, and LoRA's dropout and output copies; with use_cache on, as transformers
--   leaves it without checkpointing, the attention keeps the cache's copies of k and v). Under
--   checkpointing the recomputed attention keeps v, a slice of qkv, and so the whole qkv output.
-- Not measured on a GPU: the ops are transformers 5.25's modeling_phi3.py (lua/models/phi3.lua);
-- tests/test_families.sh checks the parameter count against transformers and the views' memory.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/phi3_mini_lora_4090.lua
--   FITS: peak reserved 10.63 GiB of 22.97 GiB usable (46.3 %), 12.34 GiB headroom
--   $ ./vrsim scenarios/phi3_mini_lora_4090.lua --set micro_batch=6
--   FITS: peak reserved 22.53 GiB of 22.97 GiB usable (98.1 %), 0.44 GiB headroom
--   $ ./vrsim scenarios/phi3_mini_lora_4090.lua --set micro_batch=7
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/phi3_mini_lora_4090.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.20.mlp.gate_up_proj.lora_dropout'
return {
  title = "Phi-3-mini-4k, LoRA r16 on qkv_proj, o_proj, gate_up_proj, down_proj, on a 24 GB RTX 4090 at 4096 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/phi-3-mini-4k-instruct.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", build = "direct",
               checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05,
                        targets = { "qkv_proj", "o_proj", "gate_up_proj", "down_proj" } } },
}
