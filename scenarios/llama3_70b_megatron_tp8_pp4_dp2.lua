-- Llama 3 70B on 64 H100s (8 nodes of 8) as a Megatron-LM run is launched: megatron-core's
-- GPTModel with its local layer spec, TP 8 with sequence parallelism inside each node, PP 4 over
-- the nodes (megatron-core's non-interleaved 1F1B, 8 micro-batches of 1 x 4096 tokens), DP 2 with
-- Megatron's DistributedDataParallel and distributed optimizer, selective recompute of the core
-- attention; bf16. Does each stage fit, what is the busiest stage's peak, how fast?
--
-- What each rank holds is megatron-core 0.16.1's, checked on the CPU oracle's captures of its own
-- code at tp 2 x pp 2 x dp 2 (docs/parallelism.md, "Tensor parallelism as Megatron-LM runs it" and
-- the sections after it): each column-parallel linear keeps its local input and all-gathers it
-- again in backward; the first stage holds the activations of 4 micro-batches in flight, each
-- stage's outputs are deallocated once sent; the fp32 gradient buffer is whole on every rank, the
-- fp32 master weights and Adam's states 1/2 of it. The local spec's attention is unfused (eager):
-- TransformerEngine's fused attention is not modelled, so this is the local spec's run, not a TE
-- one. Not checked against a measured Megatron step.
--
-- vrsim's answer: every stage fits; the busiest is stage 0 (the embedding and 20 layers, 4
-- micro-batches in flight), 43.4 GiB allocated at peak, in layer 19's recomputed attention in
-- backward: the fp32 main_grad buffer of its 2.3 G parameters (8.5 GiB) and the bf16 parameter
-- buffer (4.2 GiB) whole, fp32 master weights and Adam's states of its half (12.7 GiB), 16.2 GiB
-- of activations. The step takes 3.43 s, the bubble 28 % of it, 298 tokens/s per GPU. Without
-- recompute the first stage runs out of memory in layer 2 of the first step (each layer keeps the
-- unfused attention's fp32 scores of every micro-batch in flight); full recompute of every layer
-- brings its peak to 29.9 GiB for a 3.90 s step; without the distributed optimizer every rank
-- keeps the whole fp32 state (56.1 GiB at peak).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_70b_megatron_tp8_pp4_dp2.lua
--   FITS: peak reserved 44.67 GiB of 78.43 GiB usable (57.0 %), 33.76 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_megatron_tp8_pp4_dp2.lua --set parallel.megatron_recompute_granularity=none
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'decoder.layers.2.self_attention.core_attention.scores_float'
--   $ ./vrsim scenarios/llama3_70b_megatron_tp8_pp4_dp2.lua --set parallel.megatron_recompute_granularity=full --set parallel.megatron_recompute_method=uniform --set parallel.megatron_recompute_num_layers=1
--   FITS: peak reserved 33.71 GiB of 78.43 GiB usable (43.0 %), 44.72 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_megatron_tp8_pp4_dp2.lua --set parallel.megatron_distributed_optimizer=false
--   FITS: peak reserved 57.21 GiB of 78.43 GiB usable (72.9 %), 21.22 GiB headroom
return {
  title = "Llama 3 70B on 64 H100s, Megatron-LM: TP 8 x PP 4 (1F1B, 8 micro-batches of 1 x 4096) x DP 2, distributed optimizer, selective recompute",
  hardware = { gpu = "h100_sxm", count = 64, gpus_per_node = 8, nics_per_node = 8, network = "ib_ndr" },
  model = { config = "configs/llama-3-70b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", build = "direct", attention = "eager", steps = 2,
               parallel = { tp = 8, pp = 4, dp_replicate = 2, tp_impl = "megatron", pp_schedule = "1F1B",
                            pp_microbatches = 8, megatron_distributed_optimizer = true,
                            megatron_recompute_granularity = "selective" } },
}
