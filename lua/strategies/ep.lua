-- ep.lua: expert parallelism for the mixture-of-experts blocks that run transformers' experts
-- forward (models/moe.lua experts_forward: Mixtral, Qwen3-MoE, DeepSeek-V2/V3), with torchtitan's
-- all-to-all token dispatcher (torchtitan at 56e7b65, models/common/token_dispatcher.py
-- AllToAllTokenDispatcher) put between the model's own routing and its grouped GEMMs.
--
-- The graph follows transformers' experts forward (its router, top-k, the pairs sorted by expert
-- and gathered, the grouped GEMMs, the weighting by the router, the pairs put back in token order
-- and summed over k), the model's own routing kept; what expert parallelism adds is torchtitan's
-- dispatcher around the grouped GEMMs:
--
--   _token_count_exchange  all_to_all_single of the (E,) tokens-per-expert counts (no grad)
--   _sync_token_count_exchange  the splits copied to the host: a device-to-host sync
--   _dispatch_token_exchange  all_to_all_single of the sorted pairs (S, h) -> (R, h): the pairs
--                          of every rank for this rank's E/ep experts (autograd: the gradient's
--                          all-to-all back)
--   _permute               routed_input[permuted_indices]: rank-major to expert-major, a new (R, h)
--   the grouped GEMMs      on the E/ep local experts, R rows
--   _unpermute             new_empty((R, h)) and out[permuted_indices] = y: a new (R, h)
--   _combine_token_exchange  all_to_all_single back, (R, h) -> (S, h) (and in backward)
--
-- Routing: every tensor but the received ones has its size from S = tokens x k alone. How many
-- pairs arrive, R, depends on the routing: balanced (the default) R = S; with
-- training.parallel.ep_imbalance = f (the busiest rank's share of the pairs over the mean) the
-- simulated rank is the busiest, R = f x S, and its GEMMs and buffers grow with it.
--
-- Each rank holds E/ep experts (their 3-D parameters' first dimension split). Modelled where ep
-- takes every data-parallel rank (ep = dp_shard x cp, tp 1: torchtitan's efsdp mesh of one
-- rank), so each rank's experts are its own: their gradients need no reduction across ranks and
-- FSDP2 has nothing to shard them over (its world-size-one unsharded copy and gradient copy are
-- not ops; a note says so); the rest of the model is FSDP2 over dp_shard x cp as without ep.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local E = {}

-- the families whose experts run moe.lua's experts_forward
local FAMILIES = { mixtral = true, qwen3_moe = true, deepseek_v3 = true, deepseek_v2 = true }

-- What expert parallelism over ep ranks cannot be applied to as modelled: the message, or nil.
function E.refusal(fam, mc, t, mesh)
  local d, ep = mesh.degrees, mesh.degrees.ep
  local where = ("training.parallel.ep = %d"):format(ep)
  if not mc.experts then return where .. ": the model has no mixture-of-experts layers" end
  if not FAMILIES[fam.model_type or ""] then
    return ("%s: expert parallelism is modelled for the families that run transformers' grouped-GEMM "
            .. "experts forward (Mixtral, Qwen3-MoE, DeepSeek-V2/V3), not for %s"):format(where, tostring(fam.model_type))
  end
  if mc.experts % ep ~= 0 then
    return ("%s: the %d experts do not split evenly over ep"):format(where, mc.experts)
  end
  if d.tp > 1 then return where .. " with tp > 1: not modelled (tensor parallelism of the experts is not)" end
  if d.dp_replicate > 1 then
    return where .. " with dp_replicate > 1: not modelled (the experts' replicate all-reduce over dp_replicate)"
  end
  if ep ~= d.dp_shard * d.cp then
    return ("%s with dp_shard x cp = %d: modelled where ep takes every data-parallel rank (ep = dp_shard x cp); "
            .. "FSDP2 of the experts over the %d ranks ep leaves (torchtitan's efsdp mesh) is not modelled yet")
      :format(where, d.dp_shard * d.cp, math.max(1, d.dp_shard * d.cp // ep))
  end
  if t.quant ~= "none" or require("strategies.lora").wanted(t) then
    return where .. " with quantization or LoRA: not modelled"
  end
  if t.strategy ~= "fsdp2" then
    return ("%s with training.strategy = \"%s\": torchtitan composes expert parallelism with FSDP2"):format(where, t.strategy)
  end
  local f = mesh.ep_imbalance
  if f > ep then
    return ("training.parallel.ep_imbalance = %g: the busiest rank's share over the mean cannot exceed ep = %d (every pair on one rank)")
      :format(f, ep)
  end
  return nil
end

-- The experts' 3-D parameters as one rank holds them: E/ep experts.
function E.shard_tree(root, ep)
  mod.walk(root, function(m)
    local n = 0
    for _, decl in ipairs(m.decls or {}) do
      if (decl.key == "gate_up_proj" or decl.key == "down_proj") and #decl.shape == 3 then n = n + 1 end
    end
    if n == 2 then
      m.ep_local = true
      for _, decl in ipairs(m.decls) do
        local s = { decl.shape[1] // ep, decl.shape[2], decl.shape[3] }
        decl.shape = s
      end
    end
  end)
end

-- Whether a parameter is one of the experts' own under expert parallelism (FSDP2 leaves it whole
-- on its rank: strategies/fsdp.lua M.shard).
function E.is_expert_param(p)
  return p.name:match("%.experts%.gate_up_proj$") ~= nil or p.name:match("%.experts%.down_proj$") ~= nil
end

-- A collective of the ep group on the compute stream: all_to_all_single of x (rows n_in) into a
-- new (n_out, h) tensor; its backward the all-to-all of the gradient back.
local function all_to_all(cx, name, x, n_out, g)
  local h = x.shape[2]
  local shape = { n_out, h }
  local rg = x.rg and not cx.no_grad
  local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
  local bytes = math.max(nn.bytes(shape, x.dtype), nn.bytes(x.shape, x.dtype))
  cx.G:op { name = name, kind = "all_to_all", phase = cx.phase, inputs = { x.id }, outputs = { out.id },
            grads = rg and { { bytes = nn.bytes(x.shape, x.dtype), dtype = x.dtype } } or nil,
            bwd_kind = "all_to_all", bytes = bytes, bwd_bytes = bytes, dtype = x.dtype, world = g.size,
            per_node = g.per_node, layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  return out
end

-- The dispatch of the sorted pairs x (S, h): the counts exchanged, the pairs sent to their
-- experts' ranks, permuted to expert-major. Returns the (R, h) rows for the local experts, their
-- (E/ep,) offsets, and the state combine needs.
function E.dispatch(cx, pre, x, counts, e)
  local g = cx.ep
  local s, h = x.shape[1], x.shape[2]
  local r = math.floor(s * g.imbalance + 0.5)
  local le = e.experts // g.size
  local none = function(n) local t = {} for i = 1, n do t[i] = "none" end return t end
  local got = nn.op(cx, { name = pre .. ".ep_count_exchange", kind = "all_to_all", inputs = { counts }, grads = none(1),
                          outs = { { pre .. ".ep_tokens_per_local_expert", { e.experts }, "int32", no_grad = true } },
                          world = g.size, per_node = g.per_node })
  -- the splits summed per rank and copied to the host (output_splits: non_blocking=False, a sync)
  local splits = nn.op(cx, { name = pre .. ".ep_splits", kind = "elementwise", inputs = { counts, got }, grads = none(2),
                             outs = { { pre .. ".ep_splits", { 2 * g.size }, "int64", no_grad = true } } })
  local recv = all_to_all(cx, pre .. ".ep_dispatch", x, r, g)
  -- _permute: the index arithmetic (arange, repeat_interleave, cumsums: int64 of R), then the gather
  local idx = nn.op(cx, { name = pre .. ".ep_permuted_indices", kind = "elementwise", inputs = { got, splits }, grads = none(2),
                          outs = { { pre .. ".ep_permuted_indices", { r }, "int64", no_grad = true } },
                          workspace = { 2 * r * 8 } })
  local routed = require("models.moe").gather_rows(cx, pre .. ".ep_permute", recv, idx, r)
  local offsets = nn.op(cx, { name = pre .. ".ep_local_offsets", kind = "elementwise", inputs = { got }, grads = none(1),
                              outs = { { pre .. ".ep_local_offsets", { le }, "int32", no_grad = true } } })
  return routed, offsets, { idx = idx, s = s, r = r, h = h }
end

-- The combine of the local experts' (R, h) output y: unpermuted, sent back to the pairs' ranks.
-- Returns the (S, h) rows in the order dispatch took them.
function E.combine(cx, pre, y, st)
  local g = cx.ep
  -- _unpermute: new_empty + index_put; IndexPutBackward0 gathers the gradient at the indices
  local back = nn.op(cx, { name = pre .. ".ep_unpermute", kind = "gather", inputs = { y, st.idx },
                           outs = { { pre .. ".ep_unpermuted", y.shape, y.dtype } }, saves = { st.idx },
                           grads = { "new", "none" } })
  return all_to_all(cx, pre .. ".ep_combine", back, st.s, g)
end

function E.notes(ep, f)
  return {
    ("expert parallelism over %d ranks (torchtitan's all-to-all token dispatcher around transformers' experts "
     .. "forward): routing %s; the experts' FSDP2 over one rank (efsdp) leaves their world-size-one "
     .. "unsharded copy and gradient copy out; the count exchange's device-to-host sync not timed"):format(ep,
      f == 1 and "balanced (every rank receives S = tokens x k pairs)"
        or ("imbalanced: this rank, the busiest, receives %g x the mean"):format(f)),
  }
end

return E
