#!/usr/bin/env python3
"""Which kernel bitsandbytes' gemm_4bit picks on an NVIDIA GPU (the fused 4-bit GEMM, or the
dequantize-then-F.linear fallback that materializes the whole weight), straight from the installed
bitsandbytes: its CUDA registration's own checks (M above _gemm_4bit_custom_max_m, K not a
multiple of the 64-weight block) and _gemm_4bit_use_custom_cuda, called with each GPU's SM count
and compute capability in place of torch.cuda.get_device_properties, so it runs on a CPU-only
machine. Prints the cases as the Lua table tests/ops/test_bnb_gemm4bit.lua holds (one row per
GPU, dtype and weight shape; one character per M of MS: 1 fused, 0 fallback), which checks vrsim's
port (lua/strategies/bnb_gemm4bit.lua) against it.

  check_bnb_gemm4bit.py > /tmp/cases.lua

bitsandbytes 0.50.2 (torch CPU build): the rows in tests/ops/test_bnb_gemm4bit.lua."""
import torch

# backends/cuda/ops.py reads the CUDA stream getter at import; a CPU build of torch lacks it
if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
    torch._C._cuda_getCurrentRawStream = lambda index: 0
import bitsandbytes
import bitsandbytes.backends.cuda.ops as cuda_ops

# (SMs, major, minor): H100 SXM, H100 PCIe, A100, RTX 4090, RTX 3090, T4, B200, RTX 5090, V100,
# GB10
GPUS = [(132, 9, 0), (114, 9, 0), (108, 8, 0), (128, 8, 9), (82, 8, 6), (40, 7, 5), (148, 10, 0),
        (170, 12, 0), (80, 7, 0), (48, 12, 1)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (N, K): Llama's projections and small weights on both sides of the 4 Mi-element line
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (1024, 4096), (4096, 1024),
          (512, 256), (2048, 512), (256, 1024), (8192, 1024), (4096, 12288), (3072, 3072), (4096, 100)]
MS = [1, 4, 5, 6, 7, 8, 9, 16, 17, 23, 24, 32, 33, 48, 49, 64, 65, 96, 128, 129, 192, 256, 257,
      320, 384, 512, 513, 1536, 1537, 2048]


def fused(props, dtype, m, n, k):
    """The registered gemm_4bit CUDA kernel's choice (the fallback's conditions first)."""
    if m > cuda_ops._gemm_4bit_custom_max_m or k % 64 != 0:
        return False
    cuda_ops._gpu_dispatch_props = lambda index: props
    return cuda_ops._gemm_4bit_use_custom_cuda.__wrapped__(0, dtype, m, n, k)


def main():
    print("-- bitsandbytes %s, check_bnb_gemm4bit.py" % bitsandbytes.__version__)
    print("local MS = { %s }" % ", ".join(map(str, MS)))
    print("local CASES = {")
    for props in GPUS:
        for name, dtype in DTYPES.items():
            for n, k in SHAPES:
                bits = "".join("1" if fused(props, dtype, m, n, k) else "0" for m in MS)
                print('  { %d, %d, %d, "%s", %d, %d, "%s" },' % (*props, name, n, k, bits))
    print("}")


if __name__ == "__main__":
    main()
