# diffusers' SDXL fine-tuning example, written for vrsim's tests from the flags
# train_text_to_image_sdxl.py documents: bf16 autocast over the fp32 UNet, EMA, 8-bit Adam,
# gradient checkpointing, 2 images of 1024 px a step. Run: vrsim diffusers_full_sdxl.sh --gpu h100
accelerate launch --mixed_precision=bf16 --num_processes 1 train_text_to_image_sdxl.py \
  --pretrained_model_name_or_path=stabilityai/stable-diffusion-xl-base-1.0 \
  --pretrained_vae_model_name_or_path=madebyollin/sdxl-vae-fp16-fix \
  --dataset_name=lambdalabs/naruto-blip-captions \
  --resolution=1024 --center_crop --random_flip \
  --proportion_empty_prompts=0.2 \
  --train_batch_size=2 \
  --gradient_accumulation_steps=1 --gradient_checkpointing \
  --use_8bit_adam --use_ema \
  --max_train_steps=10000 \
  --learning_rate=1e-06 --lr_scheduler="constant" --lr_warmup_steps=0 \
  --report_to="wandb" \
  --output_dir="sdxl-naruto-model"
