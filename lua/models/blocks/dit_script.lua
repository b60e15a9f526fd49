-- dit_script.lua: what diffusers' DreamBooth LoRA scripts for the DiT families (flux.lua,
-- sd3.lua) share before their step is built: the options those scripts lack or vrsim does not
-- model, refused by name, and the notes a reader of the run needs.
local M = {}

-- Refuses (exit 2) what the family's script does not run as vrsim builds it. s: { encoders (the
-- text encoders --train_text_encoder would train), no_ema (which scripts keep no EMA copy) }.
function M.refuse(name, t, s)
  if t.text_encoders == "trained" then
    error(("%s: training.text_encoders = \"trained\" (--train_text_encoder: LoRA on %s) is not modelled")
          :format(name, s.encoders), 0)
  end
  if t.ema then error(("%s: training.ema: %s; not modelled"):format(name, s.no_ema), 0) end
  if t.max_sequence_length < 1 or t.max_sequence_length > 512 then
    error(("%s: training.max_sequence_length = %d: T5's prompt length is 1 to 512 tokens")
          :format(name, t.max_sequence_length), 0)
  end
end

-- The run's notes: the cached latents the script keeps for the whole dataset are not counted, and
-- a full fine-tune runs the LoRA script's step (full_script, the one that does it, is not read).
function M.notes(name, t, cfg, full_script)
  if t.vae == "cached" then
    cfg.notes = cfg.notes or {}
    table.insert(cfg.notes, name .. ": vae = \"cached\": the latent distributions --cache_latents keeps on "
                 .. "the GPU for the whole dataset are not counted (the step's own latents are)")
  end
  if not t.precision:match("^lora_") then
    cfg.notes = cfg.notes or {}
    table.insert(cfg.notes, ("%s: precision = \"%s\" trains the whole transformer with the LoRA "
                 .. "script's step and this precision's weights, gradients and optimizer state; "
                 .. "diffusers' %s (its own dtype handling) is not read"):format(name, t.precision, full_script))
  end
end

return M
