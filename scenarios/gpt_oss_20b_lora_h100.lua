-- gpt-oss-20b (24 layers alternating a 128-token sliding window and full attention, 32 experts of
-- which 4 per token, 20.9 B parameters) with all-linear LoRA (r = 8: the attention's q, k, v, o;
-- the router and the experts' 3-D weights are no nn.Linear, so peft's "all-linear" leaves them
-- frozen) and gradient checkpointing on one 80 GB H100 at 4096 tokens: does it fit, at what
-- micro-batch, how fast?
--
-- Answer (vrsim, 2026-12-06: ./vrsim scenarios/gpt_oss_20b_lora_h100.lua [--set ...];
--   ./vrsim maxbatch scenarios/gpt_oss_20b_lora_h100.lua):
--   the released MXFP4 experts are loaded dequantized to bf16 (Mxfp4Config(dequantize=True):
--   transformers does not train the MXFP4 kernels' experts), so the frozen weights are 39 GiB.
--   Micro-batch 2 fits with 4.1 GiB to spare ("micro_batch = 2 fits (peak reserved 74.33 GiB of
--   78.43 GiB, step 3401.8 ms, 2408 tokens/s); 3 does not"), micro-batch 1 with 21.6 GiB; the peak
--   is the loss's backward, where the fp32 log-probabilities of 4096 x 201,088 logits and their
--   gradients (3142 MiB each) meet the weights. GptOssForCausalLM runs eager attention only
--   (no SDPA: the sinks are an extra softmax column), so without checkpointing every layer keeps
--   its (64, 4096, 4097) bf16 probabilities (2 GiB) and micro-batch 1 runs out of memory in layer
--   11's attention. QLoRA is refused: bitsandbytes would quantize the attention's biased
--   Linears, which vrsim does not model (and the experts would stay bf16 anyway).
-- Measured on one H100 80GB at 700 W (2026-12-06, random bf16 weights, predicted first:
-- validation/records/llama_h100_gen10_fulldepth.jsonl): peak allocated 50082.8 MiB at micro-batch
-- 1 and 60157.8 at 2, within 3 MiB of vrsim's; the step 1986 and 3493 ms, vrsim's 1896 and 3402
-- (-4.5 % and -2.6 %) with its attention's softmax over rows of 4097, its cat with the sink
-- column and its strided probabilities' align1 GEMM at their kernels' measured rates
-- (lua/hw/calibrated/h100_sxm_sinks_attention.lua; docs/validation.md, the thirteenth set). The layers'
-- allocations also match transformers 5.25 under fake tensors
-- (validation/oracle/captures/gpt_oss_20b_l2_bf16).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/gpt_oss_20b_lora_h100.lua
--   FITS: peak reserved 56.81 GiB of 78.43 GiB usable (72.4 %), 21.62 GiB headroom
--   $ ./vrsim scenarios/gpt_oss_20b_lora_h100.lua --set micro_batch=2
--   FITS: peak reserved 74.38 GiB of 78.43 GiB usable (94.8 %), 4.05 GiB headroom
--   $ ./vrsim scenarios/gpt_oss_20b_lora_h100.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.11.self_attn.sub_max'
return {
  title = "gpt-oss-20b, all-linear LoRA r8, on one 80 GB H100 at 4096 tokens",
  hardware = { gpu = "h100_sxm" },
  model = { config = "configs/gpt-oss-20b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true,
               lora = { r = 8, alpha = 16, dropout = 0.0, targets = "all-linear" } },
}
