-- ATen's row-sum staging buffers asked for sizes near 2^63: the arithmetic must not overflow (a
-- signed overflow under UBSan), and a size no GPU holds must not wrap to a small one
local core = require "vrsim.core"
local b = core.row_sum_buffers(math.maxinteger, 4)
assert(b == nil or (b[1] > 0 and b[2] > 0), "row_sum_buffers(maxinteger, 4) wrapped")
local c = core.row_sum_buffers(1 << 40, math.maxinteger)
assert(c == nil or (c[1] > 0 and c[2] > 0), "row_sum_buffers(2^40, maxinteger) wrapped")
return {
  title = "row sums of huge tensors",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
