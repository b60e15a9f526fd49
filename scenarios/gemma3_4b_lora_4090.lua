-- Gemma-3-4B, the text model (Gemma3ForCausalLM: q_norm / k_norm, five 1024-token sliding layers to
-- one global, a 262,208-token vocabulary), all-linear LoRA r = 16 in bf16 on a 24 GB RTX 4090 at
-- 4096 tokens: what is the largest micro-batch, and is gradient checkpointing needed?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/gemma3_4b_lora_4090.lua [--set ...]):
--   micro-batch 1 with checkpointing, only just: the first step fits after the allocator frees
--   its cache and retries twice, the steady steps peak at 21.21 GiB reserved (./vrsim maxbatch
--   scenarios/gemma3_4b_lora_4090.lua: "micro_batch = 1 fits ...; 2 does not"), at the loss's
--   backward, the fp32 log-probabilities of 4096 x 262,208 logits and two gradients of their size
--   (4098 MiB each). Without checkpointing micro-batch 1 runs out of memory in the forward
--   (--set checkpointing=false), each layer keeping the fp32 copies of the inputs of its six
--   GemmaRMSNorms (four on the hidden states, q_norm and k_norm). On SDPA (flash on this card) the sliding
--   layers take a boolean mask past 1024 tokens, and so repeat_kv's copies of k and v.
-- Not measured on a GPU: the ops are transformers 5.25's modeling_gemma3.py (lua/models/gemma3.lua);
-- tests/test_families.sh checks the parameter count against transformers.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/gemma3_4b_lora_4090.lua
--   FITS: peak reserved 22.97 GiB of 22.97 GiB usable (100.0 %), 0.00 GiB headroom, at step 0 (its worst)
--   $ ./vrsim scenarios/gemma3_4b_lora_4090.lua --set micro_batch=2
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax'
--   $ ./vrsim scenarios/gemma3_4b_lora_4090.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.14.mlp.up_proj.lora_scale'
return {
  title = "Gemma-3-4B (text), all-linear LoRA r16, on a 24 GB RTX 4090 at 4096 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/gemma-3-4b-text.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", build = "direct",
               checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" } },
}
