-- offload_act.lua: activation offloading as torchtune's recipes run it (torchtune 0.6.1,
-- training/_activation_offloading.py OffloadActivations with its defaults, entered around the
-- model's forward by get_act_offloading_ctx_manager; the output head runs under a NoOpManager,
-- and the loss is outside the context). OffloadActivations is a pair of saved-tensor hooks:
--
--   pack (forward), for every tensor autograd saves: a parameter, or one under min_offload_size
--     (1024 bytes), is kept as it is; any other is copied on a side stream (s1, after waiting for
--     the compute stream) into a new pinned host tensor, and kept on the GPU in the forward stash
--     until max_fwd_stash_size (5) packs later, when the compute stream waits for its copy's event
--     and drops it. Each save is a pack of its own: a tensor saved by two ops goes down twice.
--   unpack (backward), as a node reads a saved tensor: one still in the forward stash is used as
--     it is; any other is copied back on s1 into a new GPU tensor the compute stream waits for, and
--     dropped once the node that used it is done. The first node's hook empties the forward stash.
--
-- With per-layer checkpointing (torchtune requires it with offloading) the saves inside a
-- checkpointed layer go through checkpoint's own hooks, the innermost; what reaches the offloading
-- hooks is each checkpoint's positional input (frame.save_inputs: the layer's hidden states,
-- brought back as the layer's recomputation starts) and the saves of the ops outside every
-- checkpointed region (the final norm, the embedding's ids, layers left unchecked). Under
-- training.compile the same: torchtune compiles each layer inside its eager CheckpointWrapper
-- (training.compile_model after set_activation_checkpointing), so the compiled graph's saves go to
-- checkpoint's hooks and the layer's input is saved outside the compiled region; the pack ops
-- made there are left out of the compiled layer's partition (`own`).
--
-- In the graph: a pack is a copy op on the d2h stream (its output a zero-byte token the stash's
-- drop waits for); the unpack a copy op on the h2d stream declared as a hook before the node's
-- backward, or before the region's recomputation (sim/graph.h hook 4), whose output replaces the
-- saved tensor there (remap_of). The entries left in the forward stash as forward ends are
-- dropped as the first node unpacks, and are copied back like the others (torchtune's first node
-- uses them in place: the same bytes, one copy's time more).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local S = require("vrsim.core").streams

local M = {}

M.MIN_OFFLOAD_SIZE = 1024   -- OffloadActivations(min_offload_size=1024)
M.MAX_FWD_STASH_SIZE = 5    -- OffloadActivations(max_fwd_stash_size=5)

local function nbytes(t) return t.nb or nn.bytes(t.shape, t.dtype) end

-- Packs saved tensor t (offloads it where pack_tensor does); `anchor` says when backward unpacks
-- it: { before_op = i } (the backward of forward op i) or { region = k } (the recomputation of
-- checkpointed region k). Returns whether t went to the host.
local function pack(cx, st, t, anchor)
  local nb = nbytes(t)
  if t.param or nb < M.MIN_OFFLOAD_SIZE then return false end
  local G = cx.G
  st.n = st.n + 1
  -- the stash keeps the last max_fwd_stash_size packs: older ones are dropped once their copy is done
  while #st.stash > 0 and st.stash[1].id <= st.n - M.MAX_FWD_STASH_SIZE do
    local e = table.remove(st.stash, 1)
    st.own[G:num_ops()] = true
    G:op { name = "offload: forward stash drops " .. e.t.name, kind = "elementwise", bytes = 0, phase = "fwd",
           inputs = { e.token }, outputs = {}, frees = { e.t.id }, layer = cx.layer }
  end
  local token = G:tensorv(t.name .. " on host (event)", 0, 0, "bf16", "temp")
  st.own[G:num_ops()] = true
  G:op { name = "offload " .. t.name .. " to host", kind = "d2h", stream = S.d2h, phase = "fwd",
         inputs = { t.id }, outputs = { token }, frees = {}, bytes = nb, layer = cx.layer }
  local e = { id = st.n, t = t, token = token, anchor = anchor, layer = cx.layer }
  st.stash[#st.stash + 1] = e
  st.packs[#st.packs + 1] = e
  st.bytes = st.bytes + nb
  return true
end

-- The unpack hooks of every pack, declared once the model's forward has returned: the entries
-- left in the forward stash are dropped as the first of them runs (the last pack's, which
-- backward reaches first), then each copy comes back before the node that reads it.
local function finish(cx, st)
  local G = cx.G
  local last = st.packs[#st.packs]
  if not last then return end
  local function hook_spec(spec, anchor)
    spec.phase, spec.hook = "bwd", 4
    spec.before_op, spec.region = anchor.before_op, anchor.region
    return spec
  end
  for _, e in ipairs(st.stash) do
    G:op(hook_spec({ name = "offload: forward stash drops " .. e.t.name, kind = "none",
                     inputs = { e.token }, outputs = {}, frees = { e.t.id }, layer = e.layer }, last.anchor))
  end
  st.stash = {}
  for _, e in ipairs(st.packs) do
    local t = e.t
    local copy = G:tensorv(t.name .. " (from host)", nbytes(t), nn.numel(t.shape), t.dtype, "activation")
    G:op(hook_spec({ name = "unpack " .. t.name .. " from host", kind = "h2d", stream = S.h2d,
                     inputs = {}, outputs = { copy }, remap_of = { t.id }, frees = {},
                     bytes = nbytes(t), layer = e.layer }, e.anchor))
  end
  -- (one note, of the first micro-batch: every micro-batch packs the same tensors)
  if not st.noted then
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = ("activation_offload: %d saved tensors (%.2f GiB) a micro-batch copied to pinned host "
                               .. "memory in forward and back in backward"):format(#st.packs, st.bytes / 2 ^ 30)
    st.noted = true
  end
  st.packs, st.bytes = {}, 0
end

-- Registers the offloading context around the model's forward (module `body`: the decoder
-- without its head). Ops record their saves through M.saved while it is active.
function M.install(cx, body)
  -- own: the indices of the forward ops the pack hook makes (eager work between compiled layers)
  local st = { n = 0, stash = {}, packs = {}, bytes = 0, own = {} }
  cx.offload = st
  -- carrying a built layer over to the next (vrsim/replicate.lua) would not carry the packs
  cx.layers_once = false
  mod.hook(body, {
    pre = function() st.active = true end,
    post = function() st.active = false; finish(cx, st) end,
  })
end

-- The saves of forward op `op` (its index), outside every checkpointed region.
function M.saved(cx, saves, op)
  local st = cx.offload
  for _, t in ipairs(saves) do pack(cx, st, t, { before_op = op }) end
end

-- A checkpointed region's positional input, saved by frame.save_inputs before the region's own
-- hooks are entered: returns nil when it went to the host (the frame no longer holds it on the
-- GPU), else t.
function M.checkpoint_input(cx, t)
  local st = cx.offload
  if not (t and st and st.active) then return t end
  return not pack(cx, st, t, { region = cx.region }) and t or nil
end

return M
