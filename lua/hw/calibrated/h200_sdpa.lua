-- PyTorch scaled_dot_product_attention on this GPU, by backend (bf16, HF LLaMA layout).
-- GPU NVIDIA H200, torch 2.11.0+cu130, CUDA 13.0, cuDNN 91900, date 2026-11-30.
-- Made by validation/harness/measure_sdpa.py (see validation/PROVENANCE.md).
-- fwd_ms / fwdbwd_ms: CUDA-event medians; tflops count 4*b*h*sq*sk*d (halved when causal),
-- times 3.5 for forward plus backward; *_extra_mib: peak allocated above the inputs.
return {
  gpu = "h200", name = "NVIDIA H200", measured = "2026-11-30",
  torch = "2.11.0+cu130", cudnn = 91900,
  sdpa = {
    {tag="llama7b_b1_s2048", batch=1, heads=32, seq_q=2048, seq_k=2048, dim=128, causal=true, default="cudnn", default_fwd_ms=0.1130, default_fwdbwd_ms=0.4960, backends = {
      flash = {fwd_ms=0.1933, fwdbwd_ms=0.6475, fwd_peak_extra_mib=16.25, held_after_fwd_mib=16.25, bwd_peak_extra_mib=96.50},
      efficient = {fwd_ms=0.2910, fwdbwd_ms=1.1853, fwd_peak_extra_mib=16.25, held_after_fwd_mib=16.25, bwd_peak_extra_mib=96.51},
      cudnn = {fwd_ms=0.1131, fwdbwd_ms=0.4418, fwd_peak_extra_mib=16.25, held_after_fwd_mib=16.25, bwd_peak_extra_mib=96.50},
      math = {fwd_ms=3.5981, fwdbwd_ms=7.5684, fwd_peak_extra_mib=1360.06, held_after_fwd_mib=656.00, bwd_peak_extra_mib=2224.00},
    }},
    {tag="llama7b_b4_s2048", batch=4, heads=32, seq_q=2048, seq_k=2048, dim=128, causal=true, default="cudnn", default_fwd_ms=0.2964, default_fwdbwd_ms=1.1483, backends = {
      flash = {fwd_ms=0.5057, fwdbwd_ms=1.9051, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=386.00},
      efficient = {fwd_ms=0.9206, fwdbwd_ms=3.8829, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=386.03},
      cudnn = {fwd_ms=0.2989, fwdbwd_ms=1.1480, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=387.00},
      math = {fwd_ms=12.9607, fwdbwd_ms=28.1042, fwd_peak_extra_mib=5392.25, held_after_fwd_mib=2496.00, bwd_peak_extra_mib=8640.00},
    }},
    {tag="llama7b_b1_s4096", batch=1, heads=32, seq_q=4096, seq_k=4096, dim=128, causal=true, default="cudnn", default_fwd_ms=0.2927, default_fwdbwd_ms=1.1564, backends = {
      flash = {fwd_ms=0.5349, fwdbwd_ms=1.8908, fwd_peak_extra_mib=32.50, held_after_fwd_mib=32.50, bwd_peak_extra_mib=193.00},
      efficient = {fwd_ms=0.9403, fwdbwd_ms=3.9108, fwd_peak_extra_mib=32.50, held_after_fwd_mib=32.50, bwd_peak_extra_mib=193.02},
      cudnn = {fwd_ms=0.2887, fwdbwd_ms=1.1906, fwd_peak_extra_mib=32.50, held_after_fwd_mib=32.50, bwd_peak_extra_mib=193.00},
      math = {fwd_ms=13.1673, fwdbwd_ms=27.7343, fwd_peak_extra_mib=4992.13, held_after_fwd_mib=2272.00, bwd_peak_extra_mib=8416.00},
    }},
    {tag="llama7b_b1_s8192", batch=1, heads=32, seq_q=8192, seq_k=8192, dim=128, causal=true, default="cudnn", default_fwd_ms=1.0075, default_fwdbwd_ms=3.6251, backends = {
      flash = {fwd_ms=1.9670, fwdbwd_ms=6.5807, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=386.00},
      efficient = {fwd_ms=3.3736, fwdbwd_ms=14.2644, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=386.03},
      cudnn = {fwd_ms=0.9805, fwdbwd_ms=3.8372, fwd_peak_extra_mib=65.00, held_after_fwd_mib=65.00, bwd_peak_extra_mib=387.00},
      math = {fwd_ms=55.1054, fwdbwd_ms=111.7458, fwd_peak_extra_mib=19328.25, held_after_fwd_mib=8640.00, bwd_peak_extra_mib=33216.00},
    }},
    {tag="llama13b_b4_s2048", batch=4, heads=40, seq_q=2048, seq_k=2048, dim=128, causal=true, default="cudnn", default_fwd_ms=0.3583, default_fwdbwd_ms=1.4334, backends = {
      flash = {fwd_ms=0.6181, fwdbwd_ms=2.3432, fwd_peak_extra_mib=81.25, held_after_fwd_mib=81.25, bwd_peak_extra_mib=482.50},
      efficient = {fwd_ms=1.1244, fwdbwd_ms=4.8184, fwd_peak_extra_mib=81.25, held_after_fwd_mib=81.25, bwd_peak_extra_mib=482.54},
      cudnn = {fwd_ms=0.3866, fwdbwd_ms=1.4851, fwd_peak_extra_mib=81.25, held_after_fwd_mib=81.25, bwd_peak_extra_mib=483.25},
      math = {fwd_ms=16.2366, fwdbwd_ms=35.6384, fwd_peak_extra_mib=6736.31, held_after_fwd_mib=3120.00, bwd_peak_extra_mib=10800.00},
    }},
    {tag="sdxl_l1_b1", batch=1, heads=10, seq_q=4096, seq_k=4096, dim=64, causal=false, default="cudnn", default_fwd_ms=0.1467, default_fwdbwd_ms=0.4535, backends = {
      flash = {fwd_ms=0.2113, fwdbwd_ms=0.7074, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=30.31},
      efficient = {fwd_ms=0.4410, fwdbwd_ms=1.6850, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=30.32},
      cudnn = {fwd_ms=0.1456, fwdbwd_ms=0.4746, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=30.31},
      math = {fwd_ms=2.8065, fwdbwd_ms=6.1758, fwd_peak_extra_mib=1490.04, held_after_fwd_mib=675.00, bwd_peak_extra_mib=2596.00},
    }},
    {tag="sdxl_l2_b1", batch=1, heads=20, seq_q=1024, seq_k=1024, dim=64, causal=false, default="cudnn", default_fwd_ms=0.0541, default_fwdbwd_ms=0.3954, backends = {
      flash = {fwd_ms=0.0812, fwdbwd_ms=0.3956, fwd_peak_extra_mib=2.58, held_after_fwd_mib=2.58, bwd_peak_extra_mib=15.16},
      efficient = {fwd_ms=0.0985, fwdbwd_ms=0.3779, fwd_peak_extra_mib=2.58, held_after_fwd_mib=2.58, bwd_peak_extra_mib=15.16},
      cudnn = {fwd_ms=0.1008, fwdbwd_ms=0.4200, fwd_peak_extra_mib=2.58, held_after_fwd_mib=2.58, bwd_peak_extra_mib=15.16},
      math = {fwd_ms=0.5822, fwdbwd_ms=1.4722, fwd_peak_extra_mib=205.02, held_after_fwd_mib=97.50, bwd_peak_extra_mib=337.50},
    }},
    {tag="sdxl_cross_l1_b1", batch=1, heads=10, seq_q=4096, seq_k=77, dim=64, causal=false, default="cudnn", default_fwd_ms=0.0490, default_fwdbwd_ms=0.2376, backends = {
      flash = {fwd_ms=0.0404, fwdbwd_ms=0.2913, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=20.50},
      efficient = {fwd_ms=0.0370, fwdbwd_ms=0.6505, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=20.51},
      cudnn = {fwd_ms=0.0460, fwdbwd_ms=0.2299, fwd_peak_extra_mib=5.16, held_after_fwd_mib=5.16, bwd_peak_extra_mib=20.50},
      math = {fwd_ms=0.2383, fwdbwd_ms=0.9654, fwd_peak_extra_mib=53.61, held_after_fwd_mib=27.41, bwd_peak_extra_mib=63.50},
    }},
  },
}
