-- What does gradient checkpointing (transformers' gradient_checkpointing_enable, non-reentrant,
-- every decoder layer) save and cost for LLaMA2-7B in bf16 on an H200 at micro-batch 4 x 2048?
--
-- Answer (./vrsim scenarios/llama7b_checkpointing_cost.lua, then --set checkpointing=false):
--   checkpointing     FITS: peak reserved 65.96 GiB, step time 924.5 ms
--   no checkpointing  FITS: peak reserved 88.80 GiB, step time 751.4 ms
--   23 GiB less memory for 23 % more time (each layer's forward runs again inside backward;
--   the recompute ops are on the timeline in trace.json). Step times come from the calibrated
--   H200 profile. --set checkpoint_every=2 or --set checkpoint_scope=attention trade between them.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_checkpointing_cost.lua
--   FITS: peak reserved 63.75 GiB of 139.05 GiB usable (45.8 %), 75.30 GiB headroom
--   $ ./vrsim scenarios/llama7b_checkpointing_cost.lua --set checkpointing=false
--   FITS: peak reserved 88.71 GiB of 139.05 GiB usable (63.8 %), 50.34 GiB headroom
return {
  title = "LLaMA2-7B bf16 on an H200, micro-batch 4: gradient checkpointing's saving and cost",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 4, seq = 2048, precision = "bf16", checkpointing = true },
}
