-- LLaMA2-13B full fine-tune in bf16 (AdamW foreach) on one H200 at 2048 tokens per sequence:
-- does it fit without ZeRO, offload or checkpointing, and up to which micro-batch?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/llama13b_h200.lua --set micro_batch=N):
--   it fits without ZeRO, up to micro-batch 3 (./vrsim maxbatch scenarios/llama13b_h200.lua:
--   "micro_batch = 3 fits (peak reserved 134.83 GiB of 139.05 GiB, step 1076.1 ms, 5710
--    tokens/s); 4 does not");
--   the peak is in the AdamW step, not in backward.
--     N=1  FITS: peak reserved 123.63 GiB of 139.05 GiB usable (88.9 %)   <- this file
--          peak allocated 124590.0 MiB at 'adamw._foreach_sqrt': parameters 24825.8 MiB,
--          gradients 24944.8, optimizer state 49891.6, temporaries (the foreach
--          sqrt outputs) 24927.8, allocator slack 2008.0; step time 496.4 ms (kernel costs from
--          the calibrated profile)
--     N=2  FITS: peak reserved 128.43 GiB (92.4 %)
--     N=3  FITS: peak reserved 134.83 GiB (97.0 %)
--     N=4  DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.34.mlp.silu'
--   --set optimizer_impl=fused drops the foreach temporaries (N=1: 101.70 GiB, 73.1 % reserved),
--   but N=4 still does not fit (CUDA out of memory in step 1 at op 'layers.34.mlp.up_proj'):
--   beyond N=3 the forward activations on top of weights, gradients and state are the limit.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_h200.lua
--   FITS: peak reserved 132.12 GiB of 139.05 GiB usable (95.0 %), 6.93 GiB headroom
--   $ ./vrsim scenarios/llama13b_h200.lua --set micro_batch=2
--   FITS: peak reserved 135.55 GiB of 139.05 GiB usable (97.5 %), 3.50 GiB headroom
--   $ ./vrsim scenarios/llama13b_h200.lua --set micro_batch=3
--   FITS: peak reserved 139.03 GiB of 139.05 GiB usable (100.0 %), 0.02 GiB headroom, at step 1 (its worst)
--   $ ./vrsim scenarios/llama13b_h200.lua --set micro_batch=4
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.33.post_attention_layernorm.pow'
--   $ ./vrsim scenarios/llama13b_h200.lua --set optimizer_impl=fused
--   FITS: peak reserved 108.00 GiB of 139.05 GiB usable (77.7 %), 31.05 GiB headroom
--   $ ./vrsim scenarios/llama13b_h200.lua --set optimizer_impl=fused --set micro_batch=4
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.33.post_attention_layernorm.pow'
return {
  title = "LLaMA2-13B full bf16 fine-tune on one H200",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
