-- warmup.lua: transformers' caching_allocator_warmup (transformers 5.25 modeling_utils.py), which
-- from_pretrained runs before it loads a checkpoint through a device_map that names a GPU:
--
--   get_total_byte_count: for every key of model.state_dict() (the parameters and the persistent
--     buffers; tied weights once) that the device_map puts on the GPU, numel x element size,
--     where a parameter the quantizer quantizes counts at its quantized_element_size
--     (bitsandbytes 4-bit: 0.5, LLM.int8: 1; param_needs_quantization: the weight of a
--     Linear4bit / Linear8bitLt, so a MoE block's 3-D expert stacks count in their own dtype)
--   the unused-memory rules: reserved - allocated of the device is taken off, or the warmup
--     skipped, where the caching allocator already holds free memory; at the start of the build
--     it holds none, so the byte count stands
--   the cap: min(byte count, the card's total memory - 1.2 GiB)
--   torch.empty(int(byte_count // 2), dtype=float16): made and dropped at once, which leaves one
--     segment of the model's bytes cached; the load then splits it for the weights.
--
-- Here it is one tensor made before every parameter and freed at once (no op reads it: the
-- engine frees such a tensor as soon as it is made, sim/engine.c simulate); the allocator model
-- places the parameters after it in its segment.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

-- quantized_element_size of transformers' bitsandbytes quantizers, as twice the bytes (integers)
local QUANT_HALF_BYTES = { nf4 = 1, int8 = 2 }

M.CAP_MARGIN = 1.2 * 2^30 -- caching_allocator_warmup's "max device memory - 1.2 GiB" (a float, as there)

-- The bytes get_total_byte_count gives this GPU: the declared parameters of `root` (tied ones
-- are not declared twice; the families' only buffers, the rotary inv_freq, are non-persistent, so
-- not in state_dict) in `dtype` unless a declaration names its own, the quantized weights at
-- the quantizer's element size, the modules a device_map places elsewhere left out (`resident`).
-- Returns twice the bytes (an integer: 4-bit counts half a byte an element).
function M.half_bytes(root, dtype, resident)
  local half = 0
  mod.walk(root, function(m)
    if resident and not resident(m) then return end
    for _, d in ipairs(m.decls) do
      local n = nn.numel(d.shape)
      if d.quant then
        half = half + n * assert(QUANT_HALF_BYTES[d.quant], d.quant)
      else
        half = half + 2 * n * nn.DT_SIZE[d.dtype or dtype]
      end
    end
  end)
  return half
end

-- The warmup's allocation in bytes for a model of `half` half-bytes on a card of `card_bytes`
-- (what torch.cuda.mem_get_info reports as its total): capped, then rounded down to whole fp16
-- elements as torch.empty(int(byte_count // 2), dtype=float16) makes it.
function M.bytes(half, card_bytes)
  local cap = card_bytes - M.CAP_MARGIN
  local elems = half // 4 -- int(byte_count // 2) of a byte count that may end in half a byte
  if half / 2 > cap then elems = math.floor(cap / 2) end
  return math.max(0, elems) * 2
end

-- Declares the warmup tensor; call before the model's parameters are made. Returns its bytes.
function M.declare(cx, root, dtype, card_bytes)
  local resident = cx.dm and function(m) return m.dm_unit == nil or cx.dm.resident(m.dm_unit) end
  local bytes = M.bytes(M.half_bytes(root, dtype, resident), card_bytes)
  if bytes > 0 then
    cx.G:tensor { name = "caching_allocator_warmup (from_pretrained)", bytes = bytes,
                  numel = bytes // 2, dtype = "fp16", cat = "temp" }
  end
  return bytes
end

return M
