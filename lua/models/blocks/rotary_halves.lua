-- blocks/rotary_halves.lua: the rotation that families writing their rotary embedding without
-- rotate_half spell out on x's two halves x1 and x2 (views the caller made: GPT-OSS's torch.chunk,
-- DeepSeek-V3's interleaved x[..., 0::2] and x[..., 1::2]):
--   cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
-- Each product is a new half-size tensor that saves its table (cos or sin) and is dropped once
-- summed; the sum and the difference pass their gradients through (the difference's second one
-- negated: a new buffer); the cat makes a contiguous tensor of x's shape. labels name the halves
-- in the ops' names ({ "first", "second" }, { "even", "odd" }).
local nn = require "vrsim.nn"

local H = {}

function H.rotate(cx, name, x, x1, x2, cos, sin, labels)
  local half = x1.shape
  local a, b = labels[1], labels[2]
  local function mul(what, t_in, t)
    return nn.op(cx, { name = name .. "." .. what, kind = "broadcast", inputs = { t_in, t },
                       outs = { { name .. "." .. what, half, t_in.dtype } }, saves = { t },
                       grads = { "new", "none" }, flops = nn.numel(half) })
  end
  local t1 = mul(a .. "_cos", x1, cos)
  local t2 = mul(b .. "_sin", x2, sin)
  local first = nn.op(cx, { name = name .. ".sub", inputs = { t1, t2 }, outs = { { name .. ".first", half, x.dtype } },
                            grads = { { pass = 1 }, "new" }, flops = nn.numel(half) })
  local t3 = mul(b .. "_cos", x2, cos)
  local t4 = mul(a .. "_sin", x1, sin)
  local second = nn.op(cx, { name = name .. ".add", inputs = { t3, t4 }, outs = { { name .. ".second", half, x.dtype } },
                             grads = { { pass = 1 }, { pass = 1 } }, flops = nn.numel(half) })
  return nn.op(cx, { name = name .. ".cat", kind = "cat_strided", inputs = { first, second },
                     outs = { { name .. ".embed", x.shape, x.dtype } }, grads = { { pass = 1 }, { pass = 1 } } })
end

return H
