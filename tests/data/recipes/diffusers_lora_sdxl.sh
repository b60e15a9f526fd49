# diffusers' SDXL LoRA example as its README launches it, written for vrsim's tests from the
# flags train_text_to_image_lora_sdxl.py documents: rank 4, bf16, gradient checkpointing, one
# 1024 px image a step. Run: vrsim diffusers_lora_sdxl.sh --gpu rtx4090
accelerate launch train_text_to_image_lora_sdxl.py \
  --pretrained_model_name_or_path="stabilityai/stable-diffusion-xl-base-1.0" \
  --dataset_name="lambdalabs/naruto-blip-captions" --caption_column="text" \
  --resolution=1024 --random_flip \
  --train_batch_size=1 \
  --num_train_epochs=2 --checkpointing_steps=500 \
  --learning_rate=1e-04 --lr_scheduler="constant" --lr_warmup_steps=0 \
  --mixed_precision="bf16" \
  --gradient_checkpointing \
  --seed=42 \
  --output_dir="sd-naruto-model-lora-sdxl" \
  --validation_prompt="cute dragon creature" --report_to="wandb"
