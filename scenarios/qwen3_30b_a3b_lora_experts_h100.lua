-- Qwen3-30B-A3B (48 layers, 128 experts of which 8 per token) with LoRA r16 on the attention
-- (q, k, v, o) and on the experts' 3-D weights (peft 0.21's target_parameters on
-- mlp.experts.gate_up_proj and down_proj, lora.ParamWrapper: one rank-16 pair per expert, 642.5 M
-- trainable parameters) with gradient checkpointing on one 80 GB H100 at 4096 tokens: the
-- largest micro-batch? (Naming gate_proj, up_proj and down_proj in targets instead, peft turns
-- them into these target_parameters, gate_up_proj at twice the rank; "all-linear" does the same
-- and adds the router's gate.weight.)
--
-- Answer (vrsim, 2026-12-05: ./vrsim maxbatch scenarios/qwen3_30b_a3b_lora_experts_h100.lua):
--   micro_batch = 1 fits (peak reserved 74.59 GiB of 78.43 GiB, step 1006.3 ms, 4070 tokens/s);
--   2 does not (out of memory at the loss of the second step, once AdamW's fp32 state of the
--   experts' adapters, 4.8 GiB, has appeared). Against attention-only LoRA
--   (qwen3_30b_a3b_lora_h100.lua: micro-batch 2 fits) the experts' adapters cost their fp32
--   weights, gradients and AdamW state (2.4 GiB each of weights and gradients, 4.8 GiB of state),
--   and every forward of a layer folds each adapter into a whole bf16 copy of that layer's expert
--   stack (torch.baddbmm(W, B, A): 768 MiB for gate_up_proj, 384 MiB for down_proj) that the
--   grouped GEMM saves for backward, and whose gradient backward makes in full. Without
--   checkpointing every layer keeps its copies: out of memory in layer 9's forward. 4-bit
--   loading (--set quant=nf4) shrinks the attention only: bitsandbytes quantizes nn.Linear
--   modules (transformers 5.25 Bnb4BitHfQuantizer.param_needs_quantization: Linear4bit
--   parameters only), so the experts stay bf16 and are wrapped as they are. With targets =
--   "all-linear" (lora_dropout 0: peft's wrappers refuse any other) peft 0.21 also wraps the
--   router and gives gate_up_proj rank 32: micro-batch 1 no longer fits.
-- The ParamWrapper's allocations are held to peft 0.21.2 on fake tensors
-- (validation/oracle/captures/qwen3_moe_l2_lora_experts, tests/test_oracle.sh). Measured on one
-- H100 80GB at 700 W with the module names as targets (gate_up_proj at rank 32, 995 M trainable;
-- validation/records/llama_h100_gen11_experts.jsonl, predicted first): micro-batch 1 fitted at
-- 77609.5 MiB allocated (vrsim 77609.5) and 80228 MiB reserved (vrsim 80000), 2 and all-linear
-- at 1 ran out of memory in their second step, as predicted; the step took 1194 ms against
-- vrsim's 1022 (each fold's memcpy now priced; its in-place GEMM is slower than its bytes,
-- docs/validation.md, the fourteenth set); with the fold's whole call measured on the H100
-- (lua/hw/calibrated/h100_sxm_baddbmm.lua, 2.4 TB/s) vrsim's step is 1105 ms (-7.4 %).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_experts_h100.lua
--   FITS: peak reserved 74.99 GiB of 78.43 GiB usable (95.6 %), 3.44 GiB headroom
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_experts_h100.lua --set micro_batch=2
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax'
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_experts_h100.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.9.mlp.experts.gate_up_proj.lora_baddbmm'
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_experts_h100.lua --set lora.targets=all-linear
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/qwen3_30b_a3b_lora_experts_h100.lua --set quant=nf4
--   FITS: peak reserved 73.57 GiB of 78.43 GiB usable (93.8 %), 4.86 GiB headroom
return {
  title = "Qwen3-30B-A3B, LoRA r16 on attention and experts, one 80 GB H100 at 4096 tokens",
  hardware = { gpu = "h100_sxm" },
  model = { config = "configs/qwen3-30b-a3b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true,
               -- peft's ParamWrapper refuses lora_dropout != 0
               lora = { r = 16, alpha = 32, dropout = 0, targets = { "q_proj", "k_proj", "v_proj", "o_proj" },
                        target_parameters = { "mlp.experts.gate_up_proj", "mlp.experts.down_proj" } } },
}
