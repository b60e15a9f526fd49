-- ops/loss.lua: losses of the op library (installed into vrsim/nn.lua's table). (The causal LM
-- loss is log_softmax + nll_loss, written out in models/llama.lua.)
return function(nn)
  -- F.mse_loss(pred.float(), target.float()) (mean): both casts, then (as the measured run's
  -- trace shows) a buffer of the loss's size that lives to the end of the step, the elementwise
  -- loss and the scalar. Backward keeps both inputs. cx.late_outputs: tensors the step makes
  -- at this point and keeps (the backward thread's cuBLASLt workspace).
  function nn.mse_loss(cx, name, pred, target)
    local p = nn.to(cx, pred, "fp32", name .. ".pred_float")
    local t = nn.to(cx, target, "fp32", name .. ".target_float")
    local held = cx.G:tensor { name = name .. ".step_buffer", bytes = nn.bytes(p.shape, "fp32"),
                               numel = nn.numel(p.shape), dtype = "fp32", cat = "temp", persistent = true }
    local outs = { { id = held, shape = p.shape, dtype = "fp32", name = name .. ".step_buffer" } }
    local ws = { nn.bytes(p.shape, "fp32") }
    local loss = nn.new_tensor(cx, name, {}, "fp32", true)
    outs[2] = loss
    for _, e in ipairs(cx.late_outputs or {}) do outs[#outs + 1] = e end
    nn.op_sized(cx, { name = name, kind = "elementwise", inputs = { p, t }, out_tensors = outs,
                      saves = { p, t }, grads = { { dtype = "fp32" }, "none" }, workspace = ws,
                      flops = 3 * nn.numel(p.shape), dtype = "fp32" })
    return loss
  end
end
