-- checkpoint.lua: torch.utils.checkpoint as transformers' gradient_checkpointing_enable applies
-- it (use_reentrant=False): every GradientCheckpointingLayer (a decoder layer) runs as one
-- checkpointed region, or every k-th one; or, selectively, the attention of each layer without
-- its projections (the "attention" scope); or every layer under torchtitan's op-level policy
-- (the "op" scope, strategies/sac.lua). A region is a run of ops the engine recomputes in
-- backward (cx.region); the checkpointed function's arguments are held by its frame until the
-- region's backward is done (nn.checkpoint_args).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

-- Hooks for the modules of class `layer_cls` (in order: the k-th is a region when
-- (k - 1) % every == 0). scope: "layer", "op" or "attention" (attention children named `attn_key`).
-- Returns two hook tables per layer: the region's start (registered before any other pass, so
-- that the region spans the others' forward work) and its arguments (registered after them).
function M.hooks(root, layer_cls, every, scope, attn_key)
  local layers = mod.find(root, { [layer_cls] = true })
  if #layers == 0 then error("gradient checkpointing: this model has no " .. layer_cls .. " to checkpoint", 0) end
  local out = {}
  for k, layer in ipairs(layers) do
    if (k - 1) % every == 0 then
      if scope == "layer" or scope == "op" then
        -- "op": torchtitan's selective op policy, a new one per forward (strategies/sac.lua)
        -- (a forward under no_grad, DPO's reference, runs unchecked: TRL disables checkpointing
        -- around it, and no_grad saves nothing to recompute)
        out[#out + 1] = { module = layer, first = {
          pre = function(cx)
            if cx.no_grad then return end
            cx.region = k
            if scope == "op" then cx.sac = require("strategies.sac").policy() end
          end,
          post = function(cx) cx.region, cx.sac = nil, nil end,
        }, last = {
          pre = function(cx, _, args)
            if cx.no_grad then return end
            -- the positional argument (the hidden states) is saved by frame.save_inputs through
            -- the saved-tensor hooks outside the region: activation offloading takes it
            -- (strategies/offload_act.lua), and the frame then holds no GPU copy
            local x = args[1]
            if cx.offload then x = require("strategies.offload_act").checkpoint_input(cx, x) end
            nn.checkpoint_args(cx, { x, args[2], args[3], args[4] })
          end,
        } }
      else
        local attn = layer.children[attn_key]
        if not attn then error("selective checkpointing: no '" .. attn_key .. "' in " .. layer_cls, 0) end
        out[#out + 1] = { module = attn, first = {
          pre = function(cx) if not cx.no_grad then cx.region = k end end,
          post = function(cx) cx.region = nil end,
        } }
        -- the projections are not recomputed: the region pauses inside each Linear child
        for _, key in ipairs(attn.order) do
          local lin = attn.children[key]
          out[#out + 1] = { module = lin, first = {
            pre = function(cx) lin.saved_region = cx.region; cx.region = nil end,
            post = function(cx) cx.region = lin.saved_region end,
          } }
        end
      end
    end
  end
  return out
end

-- Checkpointing as diffusers' enable_gradient_checkpointing applies it (use_reentrant=False):
-- every module of `classes` (a set of class names; a UNet's ResnetBlock2D and
-- BasicTransformerBlock) that its parent calls through _gradient_checkpointing_func runs as one
-- region, numbered in call order; a module marked no_checkpoint is called directly by its
-- parent (UNetMidBlock2DCrossAttn's first resnet) and is not one. With hold_args (a DiT, whose
-- block's hidden states are the block before's output and nothing else keeps them), the
-- checkpoint's frame holds the block's tensor arguments (the rotary tables of a table argument
-- too) until the region's backward is done (nn.checkpoint_args); without it (a UNet), the
-- arguments are the hidden states the UNet keeps anyway (skips, the time embedding, the text
-- states) and no frame of arguments is modelled. Returns { module, first, last } entries
-- (register `first` before other passes, `last` after them).
function M.module_hooks(root, classes, hold_args)
  local out = {}
  mod.walk(root, function(m)
    if classes[m.cls] and not m.no_checkpoint then
      out[#out + 1] = { module = m, first = {
        pre = function(cx)
          m.saved_region = cx.region
          cx.region_count = (cx.region_count or 0) + 1
          cx.region = cx.region_count
        end,
        post = function(cx) cx.region = m.saved_region end,
      }, last = hold_args and {
        pre = function(cx, _, args)
          if cx.no_grad then return end
          local list = {}
          for i = 1, args.n do
            local a = args[i]
            if type(a) == "table" and a.id then list[#list + 1] = a
            elseif type(a) == "table" then
              for _, t in ipairs(a) do if type(t) == "table" and t.id then list[#list + 1] = t end end
            end
          end
          nn.checkpoint_args(cx, list)
        end,
      } or nil }
    end
  end)
  if #out == 0 then error("gradient checkpointing: this model has no module to checkpoint", 0) end
  return out
end

return M
