-- torchtune's "Memory and training speed" table (README.md, the rows added in 30b8519e8, 2024-09-24):
-- Llama 3.1 70B LoRA on 8 A100s, batch size 2 without gradient accumulation, a dataset packed to 2048
-- tokens (micro-batch 2 x seq 2048), torch.compile on (the README's note for the whole table), with
-- recipes/configs/llama3_1/70B_lora.yaml's settings at that commit: LoRA rank 16, alpha 32, dropout 0
-- on q_proj, k_proj and v_proj (no MLP, no output), activation checkpointing, torch AdamW with
-- fused=True, CEWithChunkedOutputLoss (the chunked loss), bf16. lora_finetune_distributed builds the
-- model on the meta device under set_default_dtype(bf16) (bf16 adapters), compiles each layer, wraps
-- each in the checkpoint wrapper, then fully_shard on every decoder layer and the root (FSDP2,
-- reshard_after_forward, no CPU offload). The table does not say 40 or 80 GB: the A100 80GB here
-- (the memory row fits either).
-- (torchtune's main of 2024-09-24, whose RMSNorm is the Python one 0.4.0 still has: training.torchtune
-- = "0.4.0")
return {
  title = "torchtune README: Llama 3.1 70B LoRA, packed 2 x 2048, compiled, 8 A100",
  hardware = { gpu = "a100_80g", count = 8 },
  model = { config = "llama-3-70b.json", code = "torchtune" },  -- scenarios/configs/llama-3-70b.json
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 2048 },
               micro_batch = 2, precision = "lora_bf16", optimizer = "adamw", optimizer_impl = "fused",
               strategy = "fsdp2", zero = { init = "meta" }, build = "direct", steps = 3,
               compile = true, checkpointing = true, checkpoint_impl = "wrapper", loss = "chunked",
               lora = { r = 16, alpha = 32, dropout = 0, dtype = "bf16", targets = { "q_proj", "k_proj", "v_proj" } } },
}
