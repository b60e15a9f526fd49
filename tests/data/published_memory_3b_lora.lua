-- torchtune's "Optimization flags" table (README.md), its LoRA and QLoRA rows: Llama 3.2 3B as in
-- published_memory_3b.lua (batch size 2, packed to 4096, bf16, one A100), with
-- recipes/configs/llama3_2/3B_lora_single_device.yaml's adapters: rank 64, alpha 128, lora_dropout
-- 0.0 on q, v, output_proj and the MLP (q_proj, v_proj, o_proj, gate_proj, up_proj, down_proj here;
-- the tied output layer has none, apply_lora_to_output false), bf16 adapters (plain nn.Linear built
-- under the recipe's bf16 default dtype, torchtune 0.6.1 modules/peft/lora.py), torch AdamW with
-- fused=True. The rows of tests/data/published_memory.tsv add their techniques with --set (QLoRA:
-- quant = torchao_nf4, 3B_qlora_single_device.yaml: torchao NF4Tensor base weights, the same adapters).
-- (torchtune's main of 2024-11-18, whose RMSNorm is 0.4.0's: training.torchtune = "0.4.0")
return {
  title = "torchtune README: Llama 3.2 3B LoRA, packed 2 x 4096, one A100",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3.2-3b.json", code = "torchtune" },
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 4096 },
               micro_batch = 2, precision = "lora_bf16", optimizer = "adamw", optimizer_impl = "fused",
               build = "direct", steps = 3,
               lora = { r = 64, alpha = 128, dropout = 0, dtype = "bf16",
                        targets = { "q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } } },
}
