-- sac.lua: op-level selective activation checkpointing as torchtitan applies it
-- (torchtitan/distributed/activation_checkpoint.py, SelectiveAC; training.checkpoint_scope =
-- "op"): every decoder layer is wrapped by ptd_checkpoint_wrapper with early_stop=False and a
-- context_fn of torch.utils.checkpoint's create_selective_checkpoint_contexts(policy). In
-- forward the caching dispatch mode keeps the outputs of every op the policy says MUST_SAVE;
-- the recomputation in backward replays them from that cache and re-runs every other op of the
-- layer, to its end (sim/graph.c emit_recompute, Op.sac_saved and full_recompute).
--
-- The policy (a new one per forward of a layer, so its counters start at 0 each time): save the
-- outputs of the compute-intensive ops (torch._functorch.partitioners' compute_intensive_ops:
-- mm, addmm, bmm, the flash and memory-efficient SDPA kernels, ...) and of cuDNN's SDPA, except
-- every second aten.mm of the layer (the count kept separately for forward and recomputation,
-- which see the same ops); everything else PREFER_RECOMPUTE. vrsim's ops map onto them as:
--   a bias-free Linear (and a LoRA adapter's A and B)  aten.mm: counted, the odd ones saved;
--   a Linear with a bias                                aten.addmm: saved, not counted;
--   eager attention's q @ k^T and p @ v                 aten.bmm: saved;
--   a fused SDPA kernel (cuDNN, flash, efficient)      saved, every output of it;
--   a float8 Linear (torchao's Float8Linear)          aten.mm: counted, the odd ones saved.
local M = {}

-- The policy's answer for one forward of a checkpointed layer: a function of each op's spec (in
-- the order nn.op makes them) that says whether the policy saves its outputs (MUST_SAVE) or not
-- (PREFER_RECOMPUTE). torch.compile's partition of a layer compiled with its checkpoint reads the
-- same answers as node tags (strategies/compile.lua).
function M.decider()
  local mm_count = 0
  return function(spec)
    local kind, save = spec.kind or "elementwise", false
    if kind:match("^attention_") then
      save = true
    elseif kind == "mm" or kind:match("^mm_") then -- "mm_align1": a GEMM priced by its kernel's class
      -- (torchao's Float8Linear calls torch.mm on its float8 tensors, whatever its bias: the
      -- policy sees aten.mm, and the _scaled_mm it dispatches to runs beneath it)
      if spec.name:match("%.qk$") or spec.name:match("%.pv$") or (spec.inputs[3] and spec.dtype ~= "fp8") then
        save = true -- bmm (eager attention) or addmm (a Linear with a bias): in the save list
      else
        mm_count = mm_count + 1
        save = mm_count % 2 == 1 -- "Save all compute/comm ops, except every second mm/linear"
      end
    end
    return save
  end
end

-- The policy for one forward of a checkpointed layer: called with each op nn.op makes inside
-- the region (its spec and graph index); marks the ones it saves.
function M.policy()
  local saves = M.decider()
  return function(cx, spec, index)
    if saves(spec) then cx.G:op_sac(index, true) end
  end
end

-- The error for a run op-level checkpointing is not modelled for (nil when it is).
function M.check(t, mc)
  if t.checkpoint_scope ~= "op" or not t.checkpointing or t.inference then return nil end
  if t.checkpoint_every ~= 1 then
    return ("training.checkpoint_scope = \"op\" with checkpoint_every = %d is not modelled: torchtitan's "
            .. "op-level policy wraps every layer (its layer-level option checkpoints every k-th fully)"):format(t.checkpoint_every)
  end
  if mc.experts then
    return "training.checkpoint_scope = \"op\" on a mixture-of-experts model is not modelled (the router's "
           .. "topk and forced recomputation, the experts' grouped GEMMs under the policy are not built)"
  end
  if t.quant ~= "none" then
    return ("training.checkpoint_scope = \"op\" with quant = %s is not modelled (bitsandbytes' matmuls "
            .. "under the policy are not built)"):format(t.quant)
  end
  if t.activation_offload then
    return "training.checkpoint_scope = \"op\" with activation_offload is not modelled (torchtune offloads "
           .. "around full-layer checkpointing; the policy's cached outputs are not autograd's saves)"
  end
  return nil
end

return M
