-- bnb_version.lua: what the bitsandbytes release a run used (training.bitsandbytes) changes in
-- what vrsim simulates of it. Read from bitsandbytes' own source at each release tag
-- (bitsandbytes/autograd/_functions.py MatMul4Bit, bitsandbytes/functional.py dequantize_4bit,
-- bitsandbytes/optim/optimizer.py Optimizer1State / Optimizer2State.init_state):
--
--   0.41.0 .. 0.43.1  MatMul4Bit.forward: F.linear(A, dequantize_4bit(B).to(A.dtype).t()) and
--                     `ctx.tensors = (A, B)`: the input is kept until the layer's backward,
--                     although backward reads only B. 8-bit optimizer state: one fp32 absmax per
--                     2048 elements (`blocks = n // 2048`).
--   0.43.2 .. 0.43.3  `ctx.tensors = (None, B)` (commit 9e75374, "fix QLoRA mem bug: delete
--                     useless buffered activation"): nothing of the input kept; same forward.
--   0.44.0 .. 0.49.2  the 8-bit optimizers' absmax one per 256 elements (`blocks = n // 256`).
--   0.50.0 .. 0.50.2  MatMul4Bit.forward through bitsandbytes::gemm_4bit, whose CUDA kernel is
--                     the fused 4-bit GEMM or the dequantize fallback by a per-GPU table
--                     (strategies/bnb_gemm4bit.lua: 0.50.2's; 0.50.0's differs only on sm121,
--                     GB10, which vrsim's catalog has not).
-- Across all of them dequantize_4bit makes the same temporaries (the nested absmax dequantized
-- to fp32, the offset added in place, then the weight in QuantState.dtype), and the backward is
-- grad_A = grad_output @ dequantize_4bit(B).to(grad_output.dtype).
-- Before 0.41.0 and after 0.50.2 vrsim has not read the source: refused. LLM.int8 (MatMul8bitLt)
-- was rewritten in 0.45.0 and vrsim follows 0.50.2's, so int8 weights are refused before 0.45.0.

local release = require "strategies.release"
local parse, cmp = release.parse, release.cmp

local M = {}

M.DEFAULT = "0.50.2"   -- the version of the GPU records (validation/records)
M.OLDEST, M.NEWEST = { 0, 41, 0 }, { 0, 50, 2 }

local function at_least(x, a, b, c) return cmp(x, { a, b, c }) >= 0 end

-- Why version string v cannot be simulated, or nil when it can.
function M.bad(v)
  local x = parse(v)
  if not x then
    return ("training.bitsandbytes = %q: not a release number (MAJOR.MINOR.PATCH, e.g. \"0.43.1\")"):format(tostring(v))
  end
  if cmp(x, M.OLDEST) < 0 or cmp(x, M.NEWEST) > 0 then
    return ("training.bitsandbytes = %q is not modelled: vrsim reads bitsandbytes' source from "
            .. "0.41.0 to 0.50.2"):format(v)
  end
  return nil
end

-- What release v (a string M.bad accepts; nil for the default) changes:
--   keeps_input  MatMul4Bit keeps its input A for backward (before 0.43.2)
--   gemm_4bit    the forward runs bitsandbytes::gemm_4bit (0.50.0 on); otherwise it is
--                dequantize_4bit then F.linear
--   optim_block  elements per fp32 absmax of the 8-bit optimizers' state
--   int8         LLM.int8 as vrsim models it (0.45.0 on)
function M.era(v)
  v = v or M.DEFAULT
  local why = M.bad(v)
  if why then error(why, 0) end
  local x = parse(v)
  return { version = v, keeps_input = not at_least(x, 0, 43, 2), gemm_4bit = at_least(x, 0, 50, 0),
           optim_block = at_least(x, 0, 44, 0) and 256 or 2048, int8 = at_least(x, 0, 45, 0) }
end

return M
