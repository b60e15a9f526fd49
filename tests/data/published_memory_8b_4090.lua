-- torchtune's "Memory and training speed" table (README.md): Llama 3.1 8B on one RTX 4090, batch
-- size 2, a dataset packed to 2048 tokens (batching torchtune, FlexAttention), torch.compile on, bf16, and
-- recipes/configs/llama3_1/8B_lora_single_device.yaml's settings: activation checkpointing, torch
-- AdamW with fused=True, LoRA rank 8, alpha 16, lora_dropout 0.0 on q, v, output_proj and the MLP
-- (q_proj, v_proj, o_proj, gate_proj, up_proj, down_proj here), a chunked loss. The adapters are
-- bf16: lora_finetune_single_device builds the model under training.set_default_dtype(bf16), and
-- LoRALinear's lora_a and lora_b are plain nn.Linear (torchtune 0.6.1, modules/peft/lora.py), not
-- peft's fp32 upcast. Rows of tests/data/published_memory.tsv
-- change it with --set (QLoRA: quant = torchao_nf4, torchao's NF4Tensor base weights of
-- 8B_qlora_single_device.yaml's qlora_llama3_1_8b).
-- (measured before torchtune's F.rms_norm, #2054 of 2024-11-25: its RMSNorm is 0.4.0's Python one,
-- training.torchtune = "0.4.0")
return {
  title = "torchtune README: Llama 3.1 8B LoRA, packed 2 x 2048, compiled, one RTX 4090",
  hardware = { gpu = "rtx4090" },
  model = { config = "llama-3-8b.json", code = "torchtune" },  -- scenarios/configs/llama-3-8b.json, given by --set model.config
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 2048 },
               micro_batch = 2, precision = "lora_bf16", optimizer = "adamw", optimizer_impl = "fused",
               build = "direct", steps = 3, compile = true, checkpointing = true, checkpoint_impl = "wrapper", loss = "chunked",
               lora = { r = 8, alpha = 16, dropout = 0, dtype = "bf16",
                        targets = { "q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } } },
}
