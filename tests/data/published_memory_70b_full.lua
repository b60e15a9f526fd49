-- torchtune's "Memory and training speed" table (README.md, the rows added in 30b8519e8, 2024-09-24):
-- Llama 3.1 70B full fine-tune on 8 A100s ("Uses CPU offload with fused optimizer"), batch size 2
-- without gradient accumulation, packed to 2048 tokens, torch.compile on (the README's note), with
-- recipes/configs/llama3_1/70B_full.yaml's settings at that commit: fsdp_cpu_offload (FSDP2's
-- CPUOffloadPolicy: the bf16 shards, their gradients and the AdamW step on the host), torch AdamW
-- with fused=True, activation checkpointing, CEWithChunkedOutputLoss, bf16; full_finetune_distributed
-- shards every decoder layer, the custom_sharded_layers ['tok_embeddings', 'output'] (each a unit of
-- its own: zero.units) and the root. The table does not say 40 or 80 GB: the A100 80GB here.
-- (torchtune's main of 2024-09-24, whose RMSNorm is the Python one 0.4.0 still has: training.torchtune
-- = "0.4.0")
return {
  title = "torchtune README: Llama 3.1 70B full, CPU offload, packed 2 x 2048, compiled, 8 A100",
  hardware = { gpu = "a100_80g", count = 8 },
  model = { config = "llama-3-70b.json", code = "torchtune" },  -- scenarios/configs/llama-3-70b.json
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 2048 },
               micro_batch = 2, precision = "bf16", optimizer = "adamw", optimizer_impl = "fused",
               strategy = "fsdp2", zero = { init = "meta", offload_param = "cpu", offload_optimizer = "cpu",
                                            units = { "model.embed_tokens", "lm_head" } },
               build = "direct", steps = 3, compile = true, checkpointing = true, checkpoint_impl = "wrapper",
               loss = "chunked" },
}
