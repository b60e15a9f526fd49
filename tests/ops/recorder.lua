-- tests/ops/recorder.lua: a graph that records what the op library declares, standing in for
-- vrsim.core's in the op library's tests (tests/ops/test_*.lua require it from their folder).
local function recorder()
  local G = { tensors = {}, ops = {} }
  function G.tensor(self, spec)
    self.tensors[#self.tensors + 1] = spec
    return #self.tensors
  end
  -- the op library calls G:tensorv (fields as arguments, in vrsim.core's order)
  local core = require "vrsim.core"
  local function spec_of(names, ...)
    local a, spec = table.pack(...), {}
    for i, k in ipairs(names) do spec[k] = a[i] end
    return spec
  end
  function G.tensorv(self, ...) return self:tensor(spec_of(core.tensor_fields, ...)) end
  -- G:op takes nn.op's tensor lists and grads as they are: recorded as ids, and grads resolved
  -- per input as sim/bind/graph_ud.c read_grads resolves them
  local function ids(list)
    if list == nil then return nil end
    local r = {}
    for i, t in ipairs(list) do r[i] = type(t) == "table" and t.id or t end
    return r
  end
  local function grads(g, inputs)
    if g == nil then return nil end
    local r = {}
    for i, x in ipairs(inputs) do
      local e = g ~= true and g[i] or "new"
      if e == "new" then
        r[i] = { dtype = x.dtype }
      elseif type(e) == "table" then
        r[i] = { pass = e.pass, bytes = e.bytes, dtype = e.dtype or x.dtype, view = e.view }
      else
        r[i] = "none"
      end
    end
    return r
  end
  function G.op(self, spec)
    spec.grads = grads(spec.grads, spec.inputs)
    for _, k in ipairs { "inputs", "outputs", "saves", "frees" } do spec[k] = ids(spec[k]) end
    self.ops[#self.ops + 1] = spec
    return #self.ops
  end
  function G.op_layout(self, i, ...) self.ops[i].layout = { ... } end
  function G.op_rowwise(self, i, rows, bytes) self.ops[i].rowwise = { rows, bytes } end
  function G.op_lora(self, i, rank, role) self.ops[i].lora = { rank, role } end
  return G
end

return recorder
