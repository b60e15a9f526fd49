-- a seed of Megatron's pipeline: tp 2 x pp 2 under 1F1B with variable_seq_lengths' shape exchange and
-- batch_p2p_sync off, a small Llama-shaped model of 4 layers
return {
  hardware = { gpu = "h200", count = 4 },
  model = { arch = "llama2", size = "7b-l4", hidden = 64, intermediate = 128, heads = 2, kv_heads = 2, vocab = 128 },
  training = { seq = 8, steps = 1, precision = "bf16", attention = "eager",
               parallel = { tp = 2, pp = 2, tp_impl = "megatron", pp_schedule = "1F1B", pp_microbatches = 4,
                            pp_variable_seq_lengths = true, pp_batch_p2p_sync = false } },
}
