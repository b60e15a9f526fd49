-- gpt-oss's eager attention with sinks on NVIDIA H100 80GB HBM3 (NVIDIA H100 80GB HBM3, torch 2.11.0+cu130): each op's own kernels' device
-- time (torch.profiler, profile_sinks_attention.py) over the bytes vrsim's op moves; the classes
-- and their bytes are described in validation/harness/sinks_attention_classes.py. Sources:
--   validation/results/sinks_attention_s1024_h100.json
--   validation/results/sinks_attention_s2048_h100.json
--   validation/results/sinks_attention_h100.json
--   validation/results/sinks_attention_s8192_h100.json
-- command: python3 validation/harness/sinks_attention_classes.py "NVIDIA H100 80GB HBM3" THIS_FILE validation/results/sinks_attention_s1024_h100.json validation/results/sinks_attention_s2048_h100.json validation/results/sinks_attention_h100.json validation/results/sinks_attention_s8192_h100.json
return {
  torch_ops = {
    {class="cat_sinks", op="b1 heads64 s1024", bytes=268566656, ms=0.40070, gbps=670.2},
    {class="cat_sinks", op="b1 heads64 s2048", bytes=1074004096, ms=1.58364, gbps=678.2},
    {class="cat_sinks", op="b1 heads64 s4096", bytes=4295491712, ms=6.21637, gbps=691.0},
    {class="cat_sinks_bwd", op="b1 heads64 s1024", bytes=131200, ms=0.01318, gbps=10.0},
    {class="cat_sinks_bwd", op="b1 heads64 s2048", bytes=262272, ms=0.01968, gbps=13.3},
    {class="cat_sinks_bwd", op="b1 heads64 s4096", bytes=524416, ms=0.07344, gbps=7.1},
    {class="cat_sinks_bwd", op="b2 heads64 s4096", bytes=1048704, ms=0.14886, gbps=7.0},
    {class="cat_sinks_bwd", op="b1 heads64 s8192", bytes=1048704, ms=0.06906, gbps=15.2},
    {class="cat_sinks_copy", op="b2 heads64 s4096", bytes=8590983296, ms=5.34552, gbps=1607.1},
    {class="cat_sinks_copy", op="b1 heads64 s8192", bytes=17180917888, ms=10.66594, gbps=1610.8},
    {class="mm_align1", op="b1 heads64 s1024", bytes=150994944, ms=0.12240, gbps=1233.6},
    {class="mm_align1", op="b1 heads64 s2048", bytes=570425344, ms=0.44272, gbps=1288.5},
    {class="mm_align1", op="b1 heads64 s4096", bytes=2214592512, ms=1.69873, gbps=1303.7},
    {class="mm_align1", op="b2 heads64 s4096", bytes=4429185024, ms=3.35700, gbps=1319.4},
    {class="mm_align1", op="b1 heads64 s8192", bytes=8724152320, ms=6.52762, gbps=1336.5},
    {class="mm_align1_bwd", op="b1 heads64 s1024", bytes=301989888, ms=0.18396, gbps=1641.6},
    {class="mm_align1_bwd", op="b1 heads64 s2048", bytes=1140850688, ms=0.54508, gbps=2093.0},
    {class="mm_align1_bwd", op="b1 heads64 s4096", bytes=4429185024, ms=2.08453, gbps=2124.8},
    {class="mm_align1_bwd", op="b2 heads64 s4096", bytes=8858370048, ms=3.93097, gbps=2253.5},
    {class="mm_align1_bwd", op="b1 heads64 s8192", bytes=17448304640, ms=8.84867, gbps=1971.9},
    {class="softmax_sinks", op="b1 heads64 s1024", bytes=268697600, ms=0.22985, gbps=1169.0},
    {class="softmax_sinks", op="b1 heads64 s2048", bytes=1074266112, ms=1.39078, gbps=772.4},
    {class="softmax_sinks", op="b1 heads64 s4096", bytes=4296015872, ms=4.21166, gbps=1020.0},
    {class="softmax_sinks", op="b2 heads64 s4096", bytes=8592031744, ms=8.36966, gbps=1026.6},
    {class="softmax_sinks", op="b1 heads64 s8192", bytes=17181966336, ms=20.39215, gbps=842.6},
    {class="softmax_sinks_bwd", op="b1 heads64 s1024", bytes=806092800, ms=0.34813, gbps=2315.5},
    {class="softmax_sinks_bwd", op="b1 heads64 s2048", bytes=3222798336, ms=1.34138, gbps=2402.6},
    {class="softmax_sinks_bwd", op="b1 heads64 s4096", bytes=12888047616, ms=5.39835, gbps=2387.4},
    {class="softmax_sinks_bwd", op="b2 heads64 s4096", bytes=25776095232, ms=10.78090, gbps=2390.9},
    {class="softmax_sinks_bwd", op="b1 heads64 s8192", bytes=51545899008, ms=22.02267, gbps=2340.6},
  },
}
