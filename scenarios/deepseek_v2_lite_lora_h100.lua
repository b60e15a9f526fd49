-- DeepSeek-V2-Lite (27 layers of multi-head latent attention; layer 0 a dense MLP, the others 64
-- routed experts of which 6 per token plus 2 shared; 15.7 B parameters) with LoRA r16 on the
-- attention's Linears (q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj) and gradient checkpointing on
-- one 80 GB H100 at 4096 tokens: does it fit, at what micro-batch, how fast?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua [--set ...];
--   ./vrsim maxbatch scenarios/deepseek_v2_lite_lora_h100.lua):
--   the frozen bf16 weights are 29.4 GiB (the router's kept in fp32, as from_pretrained keeps
--   them). Micro-batch 6 fits with 3.9 GiB to spare at its worst step, after the allocator has
--   freed its cache once ("micro_batch = 6 fits (peak reserved 74.52 GiB of 78.43 GiB, step
--   3644.3 ms, 6744 tokens/s); 7 does not": its softmax backward in layer 26 asks 7 GiB where
--   16.9 GiB are cached in pieces), micro-batch 1 with 39.8 GiB; the peak allocated is the loss's
--   backward, where the fp32 log-probabilities of 4096 x 102,400 logits and their gradients
--   (1600 MiB each a sample) meet the weights. The attention is eager, as asked, so without
--   checkpointing every layer keeps its (16, 4096, 4096) fp32 probabilities (1 GiB) and
--   micro-batch 1 runs out of memory in layer 22; under SDPA (transformers' default: cuDNN
--   attention on the H100 for MLA's 192 / 128 head dims) it fits without checkpointing.
--   "all-linear" is refused: peft 0.21 turns the router's name it includes into
--   target_parameters on the fp32 router weight, which vrsim does not model (the MLP names
--   become target_parameters on the routed experts, which it does).
-- Measured on one H100 80GB at 700 W (2026-12-06, random weights, predicted first:
-- validation/records/llama_h100_gen10_fulldepth.jsonl): micro-batch 1 peaked at 35478.1 MiB
-- allocated (vrsim 35484.6) and 39558 MiB reserved (then predicted 2.6 % under, now 39564); the
-- step took 723 ms, 10 % above vrsim's (the host's time in backward, docs/validation.md, the
-- thirteenth set). On the whole card (validation/records/llama_h100_gen11_maxbatch.jsonl, predicted
-- first): 6 x 4096 fitted (61958.4 MiB allocated, vrsim 61964.8; 73702 MiB reserved, vrsim 73708;
-- 3769 ms, vrsim 3644), 7 and 8 ran out of memory, 7 with the request and the split cache vrsim
-- names (it had predicted 7 fits: the attention's release order, fixed from the run's allocator
-- trace, docs/validation.md, the fourteenth set). The
-- layers' allocations also match transformers 5.25 under fake tensors
-- (validation/oracle/captures/deepseek_v2_lite_l2_bf16).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua
--   FITS: peak reserved 38.64 GiB of 78.43 GiB usable (49.3 %), 39.79 GiB headroom
--   $ ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua --set micro_batch=6
--   FITS: peak reserved 74.52 GiB of 78.43 GiB usable (95.0 %), 3.91 GiB headroom, at step 0 (its worst)
--   $ ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua --set micro_batch=7
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.26.self_attn.softmax.backward'
--   $ ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.22.self_attn.scores_fp32'
--   $ ./vrsim scenarios/deepseek_v2_lite_lora_h100.lua --set attention=sdpa --set checkpointing=false
--   FITS: peak reserved 53.03 GiB of 78.43 GiB usable (67.6 %), 25.40 GiB headroom
return {
  title = "DeepSeek-V2-Lite, LoRA r16 on the latent attention, on one 80 GB H100 at 4096 tokens",
  hardware = { gpu = "h100_sxm" },
  model = { config = "configs/deepseek-v2-lite.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true, attention = "eager",
               lora = { r = 16, alpha = 32, dropout = 0.05,
                        targets = { "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj" } } },
}
