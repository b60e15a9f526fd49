-- gpt-oss's eager attention with sinks on NVIDIA H200 (NVIDIA H200, torch 2.11.0+cu130): each op's own kernels' device
-- time (torch.profiler, profile_sinks_attention.py) over the bytes vrsim's op moves; the classes
-- and their bytes are described in validation/harness/sinks_attention_classes.py. Sources:
--   validation/results/sinks_attention_h200.jsonl
-- command: python3 validation/harness/sinks_attention_classes.py "NVIDIA H200" THIS_FILE validation/results/sinks_attention_h200.jsonl
return {
  torch_ops = {
    {class="cat_sinks", op="b1 heads64 s4096", bytes=4295491712, ms=6.35634, gbps=675.8},
    {class="cat_sinks_bwd", op="b1 heads64 s4096", bytes=524416, ms=0.07402, gbps=7.1},
    {class="cat_sinks_bwd", op="b2 heads64 s4096", bytes=1048704, ms=0.15213, gbps=6.9},
    {class="cat_sinks_copy", op="b2 heads64 s4096", bytes=8590983296, ms=5.09151, gbps=1687.3},
    {class="mm_align1", op="b1 heads64 s4096", bytes=2214592512, ms=1.71734, gbps=1289.5},
    {class="mm_align1", op="b2 heads64 s4096", bytes=4429185024, ms=3.42022, gbps=1295.0},
    {class="mm_align1_bwd", op="b1 heads64 s4096", bytes=4429185024, ms=1.92261, gbps=2303.7},
    {class="mm_align1_bwd", op="b2 heads64 s4096", bytes=8858370048, ms=3.63796, gbps=2435.0},
    {class="softmax_sinks", op="b1 heads64 s4096", bytes=4296015872, ms=4.24265, gbps=1012.6},
    {class="softmax_sinks", op="b2 heads64 s4096", bytes=8592031744, ms=8.47631, gbps=1013.7},
    {class="softmax_sinks_bwd", op="b1 heads64 s4096", bytes=12888047616, ms=4.55336, gbps=2830.4},
    {class="softmax_sinks_bwd", op="b2 heads64 s4096", bytes=25776095232, ms=9.10437, gbps=2831.2},
  },
}
