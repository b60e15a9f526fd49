-- peft's LoRA sum of a bf16 base output and its fp32 adapter product (result + lora_out * scaling)
-- into a new fp32 tensor, class add_mixed (lua/strategies/lora.lua), on NVIDIA H100 80GB HBM3.
-- Source: validation/results/add_mixed_h100_sxm.lua (measure_torch_ops.py --only add_mixed), its rows as measured.
return {
  torch_ops = {
    {class="add_mixed", op="add bf16 + fp32 2048 x 4096", bytes=83886080, ms=0.04109, gbps=2041.5},
    {class="add_mixed", op="add bf16 + fp32 8192 x 4096", bytes=335544320, ms=0.14712, gbps=2280.7},
    {class="add_mixed", op="add bf16 + fp32 2048 x 5120", bytes=104857600, ms=0.04959, gbps=2114.5},
    {class="add_mixed", op="add bf16 + fp32 8192 x 5120", bytes=419430400, ms=0.18201, gbps=2304.4},
    {class="add_mixed", op="add bf16 + fp32 16384 x 1280", bytes=209715200, ms=0.09359, gbps=2240.7},
    {class="add_mixed", op="add bf16 + fp32 32768 x 1536", bytes=503316480, ms=0.21714, gbps=2317.9},
    {class="add_mixed", op="add bf16 + fp32 32768 x 2048", bytes=671088640, ms=0.28827, gbps=2328.0},
    {class="add_mixed", op="add bf16 + fp32 32768 x 768", bytes=251658240, ms=0.11127, gbps=2261.8},
    {class="add_mixed", op="add bf16 + fp32 4096 x 14336", bytes=587202560, ms=0.25228, gbps=2327.6},
  },
}
