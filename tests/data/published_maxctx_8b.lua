-- Unsloth's "Llama 3.1 (8B) max. context length" table (unsloth.ai/blog/llama3-3, Dec 2024), its
-- "Hugging Face+FA2" column: Llama 3.1 8B Instruct, 4-bit QLoRA (bitsandbytes NF4) on all linear
-- layers (q, k, v, o, gate, up, down), rank 32, batch size 1, every sequence padded to the
-- tested length, flash attention 2, gradient checkpointing. Their optimizer and loss path are not
-- stated; this file takes transformers' Trainer defaults (torch AdamW on the adapters, the full
-- fp32 logits), and the casts of TRL's SFTTrainer of that time given the base model and a
-- peft_config with bf16 on (kbit_prepare = "trl_0.13": prepare_model_for_kbit_training, then
-- peft_module_casting_to_bf16; docs/validation.md "Maximum context of QLoRA" also runs "peft",
-- a script that prepares the PeftModel itself). tests/data/published_maxctx.tsv sets the model
-- (the 8B, or the 70B of the same post) and the card; tests/test_published.sh prints
-- vrsim's maximum context beside the published one.
return {
  title = "Unsloth's table, HF + FA2 column: Llama 3.1 8B QLoRA r32 all-linear, batch 1",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3-8b.json" },  -- scenarios/configs/llama-3-8b.json, given by --set model.config
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", quant = "nf4", optimizer = "adamw",
               attention = "flash", checkpointing = true, loss = "full", kbit_prepare = "trl_0.13",
               lora = { r = 32, alpha = 32, targets = "all-linear" } },
}
