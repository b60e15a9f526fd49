-- pp_schedules.lua: the order in which torch.distributed.pipelining runs each pipeline rank's
-- compute actions (torch/distributed/pipelining/schedules.py), for the schedules torchtitan's
-- pipeline_parallel.py offers by name: GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble.
--
-- An action is { stage = global stage index, kind = "F" | "B" | "I" | "W", mb = micro-batch }:
-- F a micro-batch's forward through the stage, B its full backward, I the backward to the
-- stage's input only (zero bubble), W the weight gradients it left for later. A rank holds
-- `virtual` stages, stage = local * pp + rank (torch's loop style, stage_index_to_group_rank).
--
-- The single-stage schedules' order is their _step_microbatches (what runs, not the
-- pipeline_order table, which for 1F1B names F1..F8 on the last rank where F0..F7 run); the
-- multi-stage ones run the compute actions of the pipeline_order their constructors compute
-- (_calculate_single_rank_operations; the idle slots it inserts change no order).
-- validation/pp_schedules/capture_orders.py records torch's orders for tests/test_pipeline.c.
local M = {}

-- The schedules by torchtitan's names; single: one stage per rank.
M.NAMES = { GPipe = { single = true }, ["1F1B"] = { single = true },
            Interleaved1F1B = { single = false }, InterleavedZeroBubble = { single = false } }

local function act(stage, kind, mb) return { stage = stage, kind = kind, mb = mb } end

-- ScheduleGPipe._step_microbatches: every forward, then every backward.
local function gpipe(m, rank)
  local out = {}
  for i = 0, m - 1 do out[#out + 1] = act(rank, "F", i) end
  for i = 0, m - 1 do out[#out + 1] = act(rank, "B", i) end
  return out
end

-- Schedule1F1B._step_microbatches: min(m, pp - rank) forwards of warm-up, then a backward and a
-- forward in turn while forwards are left, then the remaining backwards.
local function one_f_one_b(pp, m, rank)
  local out = {}
  local warmup = math.min(m, pp - rank)
  local f, b = 0, 0
  for _ = 1, warmup do out[#out + 1] = act(rank, "F", f); f = f + 1 end
  while true do
    out[#out + 1] = act(rank, "B", b); b = b + 1
    if f == m then break end
    out[#out + 1] = act(rank, "F", f); f = f + 1
  end
  while b < m do out[#out + 1] = act(rank, "B", b); b = b + 1 end
  return out
end

-- _get_warmup_ops: forwards a rank runs before its first backward in the interleaved schedules.
local function warmup_ops(rank, v, per_round, pp, m, factor)
  return math.min((v - 1) * per_round + factor * ((pp - 1) - rank), m * v)
end

-- _get_1f1b_rank_ops: `warm` forwards, then v * m - warm steps of a forward and a backward (I
-- under zero bubble), then `warm` cool-down backwards; the step index picks each action's local
-- stage (a round of micro-batches per stage, backwards from the last). Each action's slot is its
-- time step in torch's pipeline_order, whose idle slots (None) the runtime steps through too
-- (vrsim/pipeline.lua, sim/pipeline.h): `rank` of them first, then after the warm-up enough for
-- the first backward to come back (v * pp + 2 (pp - 1 - rank) - warm - rank; pp - rank - 1 under
-- zero bubble), and, but under zero bubble, one before each cool-down backward.
-- Under zero bubble (InterleavedZeroBubble: num_1f1b_microbatches = rank) every backward from
-- the rank-th on is followed by the weight gradients of the oldest backward still without them,
-- and those left run at the end.
local function interleaved(pp, m, v, rank, zero_bubble)
  local rounds = math.max(1, m // pp)
  local per_round = m // rounds
  local warm = warmup_ops(rank, v, per_round, pp, m, zero_bubble and 1 or 2)
  local ops = v * m
  local fwd_bwd = ops - warm      -- steady-state ops: a forward and a backward each
  local total = warm + fwd_bwd + warm -- then `warm` cool-down backwards
  local function fwd_stage(step) return ((step // per_round) % v) * pp + rank end
  local function bwd_stage(step)
    return (v - 1 - ((step - warm) // per_round) % v) * pp + rank
  end
  local fmb, bmb, wmb = {}, {}, {}
  local function next_of(t, s) local i = t[s] or 0; t[s] = i + 1; return i end
  local out, bwd_ops, w_done = {}, {}, 0
  local bkind = zero_bubble and "I" or "B"
  local slot = rank -- the pre-padding
  local function add(a) a.slot = slot; slot = slot + 1; out[#out + 1] = a end
  local function weight()
    local s = bwd_stage(bwd_ops[w_done + 1])
    add(act(s, "W", next_of(wmb, s)))
    w_done = w_done + 1
  end
  local post_warm = math.max(0, zero_bubble and pp - rank - 1 or (v * pp + 2 * (pp - 1 - rank)) - (warm + rank))
  for op = 0, total - 1 do
    if op < warm + fwd_bwd then
      local s = fwd_stage(op)
      add(act(s, "F", next_of(fmb, s)))
      if op == warm - 1 then slot = slot + post_warm end
    elseif not zero_bubble then
      slot = slot + 1 -- the idle slot before each cool-down backward
    end
    if op >= warm then
      local s = bwd_stage(op)
      add(act(s, bkind, next_of(bmb, s)))
      bwd_ops[#bwd_ops + 1] = op
      if zero_bubble and op - warm >= rank then weight() end
    end
  end
  if zero_bubble then while w_done < #bwd_ops do weight() end end
  return out
end

-- Checks a schedule's parameters as torch's constructors do; nil or the message torch raises.
function M.check(name, pp, m, v)
  local s = M.NAMES[name]
  if not s then return ("pp_schedule \"%s\" is not modelled (GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble)"):format(tostring(name)) end
  if s.single and v ~= 1 then
    return ("pp_schedule %s runs one stage per rank: %d virtual stages need Interleaved1F1B or InterleavedZeroBubble"):format(name, v)
  end
  if not s.single and v < 2 then
    return ("pp_schedule %s needs at least 2 stages per rank (pp_virtual_stages >= 2)"):format(name)
  end
  if name == "1F1B" and m < pp then
    -- _ScheduleForwardOnly / Schedule1F1B's constructor
    return ("Number of microbatches (%d) must be greater than or equal to the number of stages (%d) "
            .. "(torch's Schedule1F1B)"):format(m, pp)
  end
  if not s.single then
    local rounds = math.max(1, m // pp)
    if m % rounds ~= 0 then
      return ("%s requires the number of microbatches to be a multiple of the number of rounds (%d), "
              .. "but got %d (torch's schedule constructor)"):format(name, rounds, m)
    end
  end
  return nil
end

-- The compute actions rank runs, in order (a list of actions; see the top of this file).
function M.order(name, pp, m, v, rank)
  local msg = M.check(name, pp, m, v)
  if msg then error(msg, 0) end
  if name == "GPipe" then return gpipe(m, rank) end
  if name == "1F1B" then return one_f_one_b(pp, m, rank) end
  return interleaved(pp, m, v, rank, name == "InterleavedZeroBubble")
end

-- An action as torch prints it: "0F3", "5I1".
function M.str(a) return ("%d%s%d"):format(a.stage, a.kind, a.mb) end

-- A rank's order as one line of torch's strings, space-separated; with_slots: each prefixed by
-- its time step in the multi-stage schedules' pipeline_order ("14:0F6").
function M.line(name, pp, m, v, rank, with_slots)
  local parts = {}
  for _, a in ipairs(M.order(name, pp, m, v, rank)) do
    parts[#parts + 1] = (with_slots and a.slot and (a.slot .. ":") or "") .. M.str(a)
  end
  return table.concat(parts, " ")
end

return M
