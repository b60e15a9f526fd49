accelerate launch --mixed_precision="fp16" --num_processes=2 train_text_to_image_sdxl.py \
  --resolution=512 --train_batch_size=1 --use_ema --gradient_checkpointing  # the end
