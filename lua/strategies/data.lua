-- data.lua: training.data, the batches a run meets when its sequences differ in length. A data
-- set's lengths (a list, or a file: one length a line, or JSONL with a length field) are cut
-- into micro-batches the way the Trainer's DataLoader cuts them (RandomSampler's shuffle, or the
-- order given; the last batch short), and each batch is shaped by its collator:
--   pad           DataCollatorWithPadding (padding="longest"): (b, L) with L the batch's longest
--                 (rounded up to pad_to_multiple_of) and an attention_mask; where a row is
--                 padded, create_causal_mask builds a (b, 1, L, L) boolean mask for SDPA;
--   padding_free  DataCollatorWithFlattening, TRL's padding_free: the batch's sequences in one
--                 (1, T) row with position_ids restarting at each; transformers finds the packed
--                 sequences from them and builds a (1, 1, T, T) block-causal mask for SDPA.
--   bfd           TRL's packing (SFTConfig packing = true, packing_strategy "bfd"; trl 1.16
--                 data_utils.py pack_dataset, _pack_bfd): the data set's sequences, each cut to
--                 pack_length (max_length), packed best-fit decreasing into rows of at most
--                 pack_length tokens, 1000 sequences at a time (datasets' batched map); the
--                 DataLoader deals micro-batches of rows, and the collator flattens each
--                 micro-batch's rows into one row, position_ids restarting at every sequence
--                 (padding_free, which SFTTrainer turns on for bfd packing).
--   bfd_split     the same, a sequence longer than pack_length split into pieces of pack_length
--                 (the last shorter) instead of cut.
--   multipack     axolotl's sample packing with flash or flex attention (axolotl 0.18 samplers/multipack.py
--                 MultipackBatchSampler, collators/batching.py V2BatchSamplerDataCollatorForSeq2Seq):
--                 a sequence longer than max_length dropped (or cut, too_long); the rest, in the
--                 sampler's order, packed first-fit (no sort) into bins of at most pack_length
--                 tokens (micro_batch_size x sequence_len) and bin_sequences sequences, group_size
--                 sequences at a time; each bin one micro-batch, its sequences concatenated into
--                 one row padded to a multiple of pad_to_multiple_of, position_ids restarting at
--                 each sequence and again over the padding (one more sequence to the kernel).
--                 With real_batches (axolotl's multipack_real_batches, its default under sdpa):
--                 micro_batch bins of at most pack_length (sequence_len) a batch, each bin its
--                 own row, every row padded to the same multiple.
--   torchtune     torchtune's packed data sets (0.6.1 datasets/_packed.py PackedDataset,
--                 data/_collate.py padded_collate_packed): the sequences in the data set's
--                 order filled into packs of pack_length tokens, each padded to it (the padding
--                 one more document); micro_batch packs a batch, (b, pack_length), whose
--                 collator makes a document BlockMask (create_block_mask, uncompiled) that
--                 FlexAttention takes (modules/attention_utils.py).
--   torchtitan    torchtitan's text data sets with a flex flavor's block_causal mask (238fa99
--                 hf_datasets/text_datasets.py, models/attention.py): the documents' tokens (BOS
--                 and EOS included) one stream, cut into chunks of pack_length + 1, each a row
--                 of pack_length inputs; the documents in the row are told apart by its EOS
--                 tokens (get_document_mask_mod), the BlockMask made by a compiled
--                 create_block_mask before the forward.
-- The run simulates one batch, training.data.batch: the worst any epoch can meet (the fit
-- verdict), or a quantile of a shuffled epoch's batches by tokens computed (its step time).
local M = {}

-- training.data's keys, as `vrsim fields` lists them: type, default (nil: none, or as the
-- meaning says), meaning.
M.FIELDS = {
  lengths = { "list", nil, "the sequence lengths: a list, or a file beside the scenario or typed on the command line (one a line, or JSONL)" },
  length_field = { "string", "length", "the JSONL field that holds a sequence's length" },
  batching = { "string", "pad", "pad (DataCollatorWithPadding), padding_free (DataCollatorWithFlattening), bfd / bfd_split (TRL's packing: rows of pack_length, best-fit decreasing, flattened), multipack (axolotl's sample packing with flash or flex attention: bins of pack_length, first-fit, one row a micro-batch), torchtune (torchtune's packed data set: packs of pack_length filled in order and padded, micro_batch packs a batch, FlexAttention over a document BlockMask; lengths optional), or torchtitan (torchtitan's text stream under a flex flavor's block_causal mask: the documents' tokens, BOS and EOS included, cut into rows of pack_length in order, FlexAttention over the documents each row's EOS tokens part; lengths optional)" },
  pack_length = { "integer", nil, "with batching bfd or bfd_split: the packed rows' length (TRL's max_length); multipack: a bin's capacity in tokens (axolotl's micro_batch_size x sequence_len); torchtune: a pack's length (tokenizer.max_seq_len); torchtitan: a row's (training.seq_len)" },
  split_across_pack = { "boolean", false, "with batching torchtune: a sequence that does not fit the open pack is cut at its end and goes on in the next (PackedDataset's split_across_pack, the text-completion data sets'), instead of starting the next pack" },
  max_length = { "integer", nil, "with batching multipack: the longest sequence kept (axolotl's sequence_len)" },
  too_long = { "string", "drop", "with batching multipack: a sequence longer than max_length is dropped, cut to it (truncate) or an error (raise): axolotl's excess_length_strategy" },
  bin_sequences = { "integer", 200, "with batching multipack: the most sequences a bin holds (axolotl's sample_packing_bin_size)" },
  real_batches = { "boolean", false, "with batching multipack: micro_batch bins of at most pack_length tokens a batch, each its own row (axolotl's multipack_real_batches, its default under sdpa and eager: pack_length = sequence_len); under sdpa axolotl's sdpa_varlen patch runs PyTorch's varlen_attn over the sequences" },
  group_size = { "integer", 100000, "with batching multipack: the sequences packed together, group by group (axolotl's sample_packing_group_size)" },
  collator = { "string", nil, "a flattened batch's collator: transformers (DataCollatorWithFlattening; padding_free's default) or trl (TRL 1.16's padding-free DataCollatorForLanguageModeling, which hands the flash kernel cu_seq_lens; bfd's)" },
  pad_to_multiple_of = { "integer", nil, "DataCollatorWithPadding's pad_to_multiple_of; multipack: the packed row's (axolotl: 64 x ceil(sequence_len / 64) with pad_to_sequence_len)" },
  order = { "string", "shuffle", "shuffle (the Trainer's RandomSampler) or given (the batches in the listed order)" },
  seed = { "integer", 42, "the shuffle's seed" },
  batch = { "string", "worst", "which batch is simulated: worst, or pNN (a quantile of the epoch's batches by tokens computed)" },
}
local KEYS = M.FIELDS

local MAX_LEN = 1 << 26

local function keys_text()
  local ks = {}
  for k in pairs(KEYS) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ", ")
end

-- The lengths of a text: one integer a line, or one JSON object a line holding `field` (found
-- once at its top level as "field": N). Blank lines are skipped. name: the file, for errors.
-- (A text of digits and blanks alone is read in one pass of C pattern matching: a data set's
-- millions of lines.)
local function parse_lengths(text, name, field)
  local out = {}
  if not text:find("[^%d \t\r\n]") then
    local n = 0
    for d in text:gmatch("%d+") do
      local v = #d <= 9 and math.tointeger(tonumber(d))
      n = n + 1
      if not v or v < 1 or v > MAX_LEN then break end
      out[n] = v
    end
    -- (two numbers on one line are an error the line-by-line pass below names)
    if #out == n and n > 0 and not text:find("%d[ \t\r]+%d") then return out end
    out = {}
  end
  local n = 0
  local pat = '"' .. field:gsub("%p", "%%%0") .. '"%s*:%s*(-?[%d%.eE+]+)'
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:gsub("\r$", "")
    if line:match("%S") then
      local v
      if line:match("^%s*{") then
        local found = {}
        for m in line:gmatch(pat) do found[#found + 1] = m end
        if #found ~= 1 then
          error(("%s:%d: %s field '%s' in this JSON line (want one, at its top level, a number)")
                :format(name, n, #found == 0 and "no numeric" or "more than one", field), 0)
        end
        v = math.tointeger(tonumber(found[1]))
      else
        v = math.tointeger(tonumber(line:match("^%s*(%S+)%s*$") or ""))
      end
      if not v or v < 1 or v > MAX_LEN then
        error(("%s:%d: '%s' is not a sequence length (an integer in [1, %d])"):format(name, n,
              line:sub(1, 60), MAX_LEN), 0)
      end
      out[#out + 1] = v
    end
  end
  if #out == 0 then error(("%s: no sequence lengths in it"):format(name), 0) end
  return out
end

-- The data's lengths, checked.
local function read_lengths(d)
  local src = d.lengths
  if type(src) == "string" then
    local ok, text = pcall(require("vrsim.core").read_text, src)
    if not ok then
      error(("training.data.lengths: %s"):format((tostring(text):gsub("^[^:]*%.lua:%d+: ", ""))), 0)
    end
    return parse_lengths(text, src, d.length_field or "length")
  end
  if src == nil then
    local packed = d.batching == "bfd" or d.batching == "bfd_split"
    error(("training.data.lengths: the data set's sequence lengths%s, which a trainer's config does not hold: "
           .. "a file of one length a line or JSONL with a length field (--set training.data.lengths=FILE), "
           .. "or a list of them ({ 512, 2048, ... })"):format(packed and " that TRL's packing packs" or ""), 0)
  end
  if type(src) ~= "table" or #src == 0 then
    error("training.data.lengths must be a file of lengths or a list of them ({ 512, 2048, ... })", 0)
  end
  local out = {}
  for i, v in ipairs(src) do
    local n = math.tointeger(v)
    if not n or n < 1 or n > MAX_LEN then
      error(("training.data.lengths[%d] = %s is not a sequence length (an integer in [1, %d])")
            :format(i, tostring(v), MAX_LEN), 0)
    end
    out[i] = n
  end
  return out
end

-- A permutation of 1..n from the seed: Fisher-Yates over splitmix64 (Lua's integers wrap as
-- the generator's arithmetic does). The sampler's own order is torch's generator's; what vrsim
-- takes from a shuffle is the spread of batch shapes, which any fair shuffle gives.
local function shuffled(n, seed)
  local x = seed
  local function nxt()
    x = x + 0x9E3779B97F4A7C15
    local z = x
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    return z ~ (z >> 31)
  end
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = (nxt() >> 1) % i + 1
    p[i], p[j] = p[j], p[i]
  end
  return p
end

local function round_up(n, m) return m and (n + m - 1) // m * m or n end

-- Rearranges a[lo..hi] so that a[k] holds the value it would hold sorted, with no larger value
-- before it and no smaller one after (Hoare's selection, the median of three as pivot). In Lua,
-- not table.sort: a data set's millions of values sort in one C call that nothing interrupts.
local function select_kth(a, k, lo, hi)
  while lo < hi do
    local x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
    if x > y then x, y = y, x end
    if y > z then y = z end
    local pivot = x > y and x or y
    local i, j = lo, hi
    while i <= j do
      while a[i] < pivot do i = i + 1 end
      while a[j] > pivot do j = j - 1 end
      if i <= j then
        a[i], a[j] = a[j], a[i]
        i, j = i + 1, j - 1
      end
    end
    if k <= j then hi = j elseif k >= i then lo = i else return end
  end
end

-- TRL's _pack_bfd over lens (dataset order): each chunk of CHUNK sequences (datasets' map,
-- batched, batch_size 1000) packed on its own; a sequence longer than L cut to L (split: cut
-- into pieces of L, the last shorter, each packed as a sequence); then best fit decreasing: the
-- chunk's lengths longest first, each into the open row with the least space that holds it
-- (rows with equal space taken first come, first served), else a new row. Returns the rows in
-- the order they were opened, each { total = tokens, lens = { its sequences' lengths } }.
local CHUNK = 1000
local function pack_bfd(lens, L, split)
  local rows = {}
  -- a max-tree over the spaces 1..L: leaf s holds s while some row has s tokens free
  local size = 1
  while size < L do size = size * 2 end
  local tree = {}
  local function set(s, v)
    local i = size + s - 1
    tree[i] = v
    while i > 1 do
      i = i // 2
      local a, b = tree[2 * i] or 0, tree[2 * i + 1] or 0
      tree[i] = a >= b and a or b
    end
  end
  -- the least space >= v that some row has (L: none, open a new row)
  local function search(v)
    if (tree[1] or 0) < v then return L end
    local i = 1
    while i < size do
      i = 2 * i
      if (tree[i] or 0) < v then i = i + 1 end
    end
    return tree[i]
  end
  local n = #lens
  for lo = 1, n, CHUNK do
    local items = {}
    for j = lo, math.min(n, lo + CHUNK - 1) do
      local l = lens[j]
      if split then
        while l > L do items[#items + 1] = L; l = l - L end
        items[#items + 1] = l
      else
        items[#items + 1] = l < L and l or L
      end
    end
    -- longest first; ties keep their order (pyarrow's sort is stable)
    for i = 1, #items do items[i] = { items[i], i } end
    table.sort(items, function(a, b) if a[1] ~= b[1] then return a[1] > b[1] end return a[2] < b[2] end)
    local by_space, touched = {}, {}
    for _, it in ipairs(items) do
      local l = it[1]
      local space = search(l)
      local row
      if space < L then
        local q = by_space[space]
        row = table.remove(q, 1)
        if #q == 0 then set(space, 0) end
      else
        row = { total = 0, lens = {} }
        rows[#rows + 1] = row
      end
      row.lens[#row.lens + 1] = l
      row.total = row.total + l
      space = space - l
      if space > 0 then
        local q = by_space[space]
        if not q then q = {}; by_space[space] = q end
        q[#q + 1] = row
        if #q == 1 then set(space, space); touched[#touched + 1] = space end
      end
    end
    -- the next chunk packs into rows of its own
    for _, sp in ipairs(touched) do set(sp, 0) end
  end
  return rows
end

-- A batch of sequences (their lengths) as its collator shapes it: rows x len tokens computed,
-- real the tokens of the data, padded whether some row is padded, packed whether one row holds
-- several sequences.
-- Which of nb batches the run simulates, by key (keys[k] the k-th batch's tokens or work): the
-- largest (pick "worst") or the q-th percentile's, the first batch of that key. Returns its index
-- and its rank.
local function batch_by_key(keys, nb, pick, q)
  local rank = pick == "worst" and nb or math.max(1, math.ceil(q / 100 * nb))
  local sorted = table.move(keys, 1, nb, 1, {})
  select_kth(sorted, rank, 1, nb)
  local k = 1
  while keys[k] ~= sorted[rank] do k = k + 1 end
  return k, rank
end

local function shape(lens, batching, multiple)
  local sum, max, min = 0, 0, math.maxinteger
  for _, l in ipairs(lens) do
    sum = sum + l
    if l > max then max = l end
    if l < min then min = l end
  end
  if batching == "padding_free" then
    return { rows = 1, len = sum, real = sum, packed = #lens > 1, padded = false, n = #lens, lens = lens }
  end
  local len = round_up(max, multiple)
  return { rows = #lens, len = len, real = sum, packed = false, padded = min < len, n = #lens, lens = lens }
end

-- plan() for TRL's packing: the rows pack_bfd makes are what the DataLoader deals, b a
-- micro-batch, each micro-batch flattened (its rows' sequences in one row, as padding_free).
local function plan_packed(d, b, lens, batching, L, order, seed, pick, q)
  local rows = pack_bfd(lens, L, batching == "bfd_split")
  local nr = #rows
  local idx = order == "shuffle" and shuffled(nr, seed) or nil
  local function row(j) return rows[idx and idx[j] or j] end
  local tok, nb, kept = {}, 0, 0
  for i = 1, nr, b do
    local sum = 0
    for j = i, math.min(nr, i + b - 1) do sum = sum + row(j).total end
    nb = nb + 1
    tok[nb], kept = sum, kept + sum
  end
  local function flat(list)
    local out = {}
    for _, r in ipairs(list) do for _, l in ipairs(r.lens) do out[#out + 1] = l end end
    return out
  end
  local chosen, what
  if pick == "worst" and order == "shuffle" then
    -- the worst a shuffle can deal: the b fullest rows together
    local totals = {}
    for i = 1, nr do totals[i] = rows[i].total end
    local k = math.min(b, nr)
    select_kth(totals, nr - k + 1, 1, nr)
    local cut, list, ties = totals[nr - k + 1], {}, 0
    for i = nr - k + 2, nr do if totals[i] == cut then ties = ties + 1 end end
    -- the rows fuller than the k-th fullest (k - 1 - ties of them), then the first 1 + ties
    -- rows as full as it
    local at = 1 + ties
    for _, r in ipairs(rows) do
      if r.total > cut then list[#list + 1] = r
      elseif r.total == cut and at > 0 then list[#list + 1] = r; at = at - 1 end
    end
    chosen, what = shape(flat(list), "padding_free"), "the worst batch a shuffle can deal"
  else
    local k, rank = batch_by_key(tok, nb, pick, q)
    local list = {}
    for j = (k - 1) * b + 1, math.min(nr, k * b) do list[#list + 1] = row(j) end
    chosen = shape(flat(list), "padding_free")
    what = pick == "worst" and "the epoch's largest batch"
      or ("the epoch's %s batch by tokens (%d of %d)"):format(pick, rank, nb)
  end
  local sum = 0
  for _, l in ipairs(lens) do sum = sum + l end
  local note = ("training.data: %d sequences (%d tokens) packed %s into %d rows of at most %d tokens "
                .. "(TRL's packing, %d sequences at a time%s; the rows %.1f %% full); %s %d micro-batches of %d rows "
                .. "flattened into one row each (position_ids); simulated: %s, 1 x %d (%d sequences)")
    :format(#lens, sum, batching == "bfd" and "best-fit decreasing, each cut to the row length,"
              or "best-fit decreasing, longer ones split,", nr, L, CHUNK,
            batching == "bfd" and sum > kept and (", %d tokens cut"):format(sum - kept) or "",
            100 * kept / (nr * L), order == "shuffle" and ("a shuffled epoch (seed " .. seed .. ") of") or "an epoch of",
            nb, b, what, chosen.len, chosen.n)
  chosen.batching, chosen.trl_collator = "padding_free", true
  return chosen, note
end

-- axolotl's pack_group over lens in the sampler's order (`order`: positions into lens), group by
-- group of `group` sequences: each sequence into the first bin (lowest index) with room for it
-- and fewer than `per_bin` sequences, else a new bin. Returns the bins, each { total = tokens,
-- lens = { its sequences' lengths } }. (A max-tree over the group's bins finds the first fit.)
local function pack_first_fit(lens, order, C, per_bin, group)
  local bins = {}
  local n = #order
  for lo = 1, n, group do
    local hi = math.min(n, lo + group - 1)
    local size = 1
    while size < hi - lo + 1 do size = size * 2 end
    local tree, mine = {}, {}
    local function set(i, v)
      local k = size + i - 1
      tree[k] = v
      while k > 1 do
        k = k // 2
        local a, b = tree[2 * k] or -1, tree[2 * k + 1] or -1
        tree[k] = a >= b and a or b
      end
    end
    for j = lo, hi do
      local l = lens[order[j]]
      local bin
      if (tree[1] or -1) >= l then
        local k = 1
        while k < size do
          k = 2 * k
          if (tree[k] or -1) < l then k = k + 1 end
        end
        bin = k - size + 1
      else
        bin = #mine + 1
        mine[bin] = { total = 0, lens = {} }
        bins[#bins + 1] = mine[bin]
      end
      local b = mine[bin]
      b.lens[#b.lens + 1] = l
      b.total = b.total + l
      set(bin, #b.lens < per_bin and C - b.total or -1)
    end
  end
  return bins
end
M.pack_first_fit = pack_first_fit

-- plan() for axolotl's sample packing: a bin a micro-batch, its row padded to a multiple of
-- `multiple`, the padding one more sequence (position_ids restart over it). Without lengths,
-- the fullest bin the packing can make: as many sequences of max_length as it holds, the rest
-- of it one more.
local function plan_multipack(d, b, order, seed, pick, q, multiple)
  local C, M = d.pack_length, d.max_length or d.pack_length
  local per_bin, group = d.bin_sequences or 200, d.group_size or 100000
  local too_long = d.too_long or "drop"
  local real_batches = d.real_batches == true
  if b ~= 1 and not real_batches then
    error(("training.micro_batch = %d with batching multipack: axolotl's packing with flash or flex attention deals "
           .. "one bin a micro-batch (its capacity, pack_length, is micro_batch_size x sequence_len; "
           .. "real_batches: micro_batch bins of sequence_len)"):format(b), 0)
  end
  -- a batch of bins (`bins`, each { lens, total }), one row each, every row padded to the
  -- longest's multiple (the collator's pad_to_multiple_of over the batch), the padding of each row
  -- one more sequence; one bin alone is the flattened row of flash and flex
  local function rows_of(bins)
    local len, total, segs, sq, pads = 0, 0, {}, 0, 0
    for _, bn in ipairs(bins) do len = math.max(len, round_up(bn.total, multiple)) end
    for _, bn in ipairs(bins) do
      table.move(bn.lens, 1, #bn.lens, #segs + 1, segs)
      if len > bn.total then segs[#segs + 1] = len - bn.total; pads = pads + 1 end
      total = total + bn.total
    end
    for _, l in ipairs(segs) do sq = sq + l * l end
    return { rows = #bins, len = len, real = total, packed = #segs > #bins, padded = false, n = #segs, lens = segs,
             pads = pads, batching = "padding_free", multipack = true, real_batches = real_batches or nil }, sq
  end
  if d.lengths == nil then
    if pick ~= "worst" then
      error(("training.data.batch = %s needs the data set's lengths (training.data.lengths)"):format(pick), 0)
    end
    local list, total = {}, 0
    while total + M <= C and #list < per_bin do list[#list + 1] = M; total = total + M end
    if total < C and #list < per_bin then list[#list + 1] = C - total; total = C end
    local full = {}
    for i = 1, b do full[i] = { lens = list, total = total } end
    local chosen = rows_of(full)
    return chosen, ("training.data: no lengths given (the data set's token counts: --set training.data.lengths=FILE); "
                    .. "simulated the fullest bin%s axolotl's sample packing can make: %d sequence%s of at most %d tokens "
                    .. "in %d, %d row%s of %d (position_ids)"):format(b > 1 and "s" or "", #list, #list > 1 and "s" or "",
                    M, C, b, b > 1 and "s" or "", chosen.len)
  end
  local all = read_lengths(d)
  local lens, dropped, cut = {}, 0, 0
  for i, l in ipairs(all) do
    if l > M then
      if too_long == "raise" then
        error(("training.data.lengths: sequence %d has %d tokens, more than max_length %d (too_long = raise: "
               .. "axolotl's excess_length_strategy raise stops)"):format(i, l, M), 0)
      elseif too_long == "truncate" then lens[#lens + 1] = M; cut = cut + 1
      else dropped = dropped + 1 end
    else
      lens[#lens + 1] = l
    end
  end
  if #lens == 0 then error(("training.data.lengths: every sequence is longer than max_length %d"):format(M), 0) end
  local n = #lens
  local idx = order == "shuffle" and shuffled(n, seed) or nil
  if not idx then idx = {}; for i = 1, n do idx[i] = i end end
  local bins = pack_first_fit(lens, idx, C, per_bin, group)
  local kept = 0
  for _, bn in ipairs(bins) do kept = kept + bn.total end
  -- the batches the sampler deals: b bins each, in the order the bins were made, the last short
  -- one dropped (MultipackBatchSampler drop_last); one bin each without real_batches
  local batches = {}
  for i = 1, #bins - b + 1, b do batches[#batches + 1] = table.move(bins, i, i + b - 1, 1, {}) end
  if #batches == 0 then
    error(("training.data.lengths: %d bins make no full batch of %d (the sampler drops the last short one)")
          :format(#bins, b), 0)
  end
  local nb = #batches
  local unit = b > 1 and "batch" or "bin"
  local chosen, what
  if pick == "worst" then
    -- the batch computing the most: the longest rows, then the most attention (sum of squares)
    local bl, bs = -1, -1
    for _, bt in ipairs(batches) do
      local c, sq = rows_of(bt)
      if c.len * c.rows > bl or (c.len * c.rows == bl and sq > bs) then chosen, bl, bs = c, c.len * c.rows, sq end
    end
    what = "the epoch's largest " .. unit
  else
    local keys = {}
    for i, bt in ipairs(batches) do local c = rows_of(bt); keys[i] = c.len * c.rows end
    local k, rank = batch_by_key(keys, nb, pick, q)
    chosen = rows_of(batches[k])
    what = ("the epoch's %s %s by tokens computed (%d of %d)"):format(pick, unit, rank, nb)
  end
  local note = ("training.data: %d sequences%s packed first-fit in %s into %d bins of at most %d tokens and %d "
                .. "sequences (axolotl's sample packing, %d sequences at a time; the bins %.1f %% full), %s padded "
                .. "to a multiple of %d (position_ids); simulated: %s, %d x %d (%d sequences%s)")
    :format(n, dropped > 0 and (" (%d longer than %d dropped)"):format(dropped, M)
              or cut > 0 and (" (%d cut to %d)"):format(cut, M) or "",
            order == "shuffle" and ("a shuffled order (seed " .. seed .. ")") or "the given order",
            #bins, C, per_bin, group, 100 * kept / (#bins * C),
            b > 1 and ("%d a micro-batch (multipack_real_batches), each a row"):format(b) or "each a micro-batch of one row",
            multiple or 1, what, chosen.rows, chosen.len, chosen.n - chosen.pads,
            chosen.pads == 0 and "" or chosen.pads == 1 and ", the padding one more"
              or (", each of %d paddings one more"):format(chosen.pads))
  return chosen, note
end

-- torchtune's PackedDataset (torchtune 0.6.1 datasets/_packed.py) over lens in the data set's
-- order, each sequence first truncated by the tokenizer to L tokens (the instruct data sets'
-- tokenize_messages) or L - 1 (text_completion_dataset's, the split ones): each appended to the
-- open pack; once the pack holds more than L tokens it is closed before that sequence
-- (split_across_pack false, the instruct data sets') or cut at L, the rest carried into the next
-- pack (split: the text-completion data sets'). Each pack is padded to L, the padding one more
-- document of its seq_lens. Returns the packs, each { total = data tokens, lens = { its
-- documents' lengths, the padding's last } }, and how many sequences were truncated.
local function pack_torchtune(lens, L, split)
  local packs, cur, total, cut = {}, {}, 0, 0
  local longest = split and L - 1 or L
  local function close(list, n)
    if n < L then list[#list + 1] = L - n end
    packs[#packs + 1] = { total = n, lens = list }
  end
  for _, l in ipairs(lens) do
    if l > longest then l, cut = longest, cut + 1 end
    cur[#cur + 1], total = l, total + l
    while total > L do
      if split then
        -- the pack cut at L: its last sequence's first part in it, the rest the next pack's
        local rest = total - L
        cur[#cur] = cur[#cur] - rest
        if cur[#cur] == 0 then cur[#cur] = nil end
        close(cur, L)
        cur, total = { rest }, rest
      else
        table.remove(cur)
        close(cur, total - l)
        cur, total = { l }, l
      end
    end
  end
  if total > 0 then close(cur, total) end
  return packs, cut
end

-- The 128 x 128 blocks FlexAttention computes over one packed row of documents `lens` (the
-- padding's included) of L tokens, under torchtune's mask_mod (causal and the same document):
-- q-block i takes kv-blocks j <= i that share a document with it, i.e. from the first j whose
-- last document reaches block i's first one; of those, full (no element masked) are the j < i
-- that one document covers together with block i (j's first document is i's last), and the
-- rest, the diagonal's among them, partial; the last q-block, where L is not a multiple of 128,
-- has no full block (create_block_mask pads it with masked rows). Returns the partial and the
-- full blocks (create_block_mask's counts, exactly: validation/oracle/check_flex_blocks.py and
-- validation/results/flex_attention_h100_sxm.json's packed rows).
local function flex_row_blocks(lens, L)
  local n = (L + 127) // 128
  local first, last = {}, {}
  local doc, till = 1, lens[1]
  for i = 1, n do
    local lo, hi = (i - 1) * 128, math.min(L, i * 128) - 1
    while lo >= till do doc = doc + 1; till = till + lens[doc] end
    first[i] = doc
    local d2, t2 = doc, till
    while hi >= t2 do d2 = d2 + 1; t2 = t2 + lens[d2] end
    last[i] = d2
  end
  local computed, full, j, starting = 0, 0, 1, {}
  for i = 1, n do
    while last[j] < first[i] do j = j + 1 end
    computed = computed + i - j + 1
    -- (a last q-block past L is padded with masked rows: none of its blocks is full)
    if i < n or L % 128 == 0 then full = full + (starting[last[i]] or 0) end
    starting[first[i]] = (starting[first[i]] or 0) + 1
  end
  return computed - full, full
end
M.flex_row_blocks = flex_row_blocks

-- The same for a row of l tokens padded to L, under transformers' padding mask (kv < l) and
-- causality: q-block i takes the kv-blocks j <= i that hold a real key; full are those below the
-- diagonal whose keys are all real, the rest (the diagonal's, the block where the padding starts)
-- partial. Returns the partial and the full blocks.
local function flex_padded_row_blocks(l, L)
  local n, real = (L + 127) // 128, (l + 127) // 128
  local partial, full = 0, 0
  for i = 1, n do
    local top = math.min(i, real)        -- kv-blocks 1..top computed
    local whole = l // 128               -- kv-blocks with no padding key
    local f = math.min(top, i - 1, whole)
    -- (a last q-block past L is padded with masked rows: none of its blocks is full)
    if i == n and L % 128 ~= 0 then f = 0 end
    full, partial = full + f, partial + top - f
  end
  return partial, full
end

-- plan() for torchtune's packed data: the DataLoader deals b packs a micro-batch (the recipe's
-- StatefulDistributedSampler, drop_last), each (b, L) whatever its documents, so memory is the
-- same for every batch; which batch decides the attention's work: the worst, the b packs of
-- most blocks, or a quantile of a shuffled epoch's batches by it. Without lengths, each pack one
-- document of L tokens (a causal row).
local function plan_torchtune(d, b, order, seed, pick, q)
  local L, split = d.pack_length, d.split_across_pack == true
  local function batch(list)
    local real, rows, flat, n, partial, full = 0, {}, {}, 0, 0, 0
    for _, p in ipairs(list) do
      real = real + p.total
      rows[#rows + 1] = p.lens
      local docs = #p.lens - (p.total < L and 1 or 0)
      n = n + docs
      for k = 1, docs do flat[#flat + 1] = p.lens[k] end
      local pb, fb = flex_row_blocks(p.lens, L)
      partial, full = partial + pb, full + fb
    end
    return { rows = #list, len = L, real = real, packed = false, padded = false, torchtune = true,
             n = n, lens = flat, row_lens = rows, flex_blocks = { partial = partial, full = full },
             batching = "torchtune" }
  end
  if d.lengths == nil then
    if pick ~= "worst" then
      error(("training.data.batch = %s needs the data set's lengths (training.data.lengths)"):format(pick), 0)
    end
    local list = {}
    for i = 1, b do list[i] = { total = L, lens = { L } } end
    return batch(list), ("training.data: no lengths given (the data set's token counts: --set training.data.lengths=FILE); "
      .. "simulated %d pack%s of one %d-token document each (torchtune's packed data set: causal rows; the memory "
      .. "is the same for any pack)"):format(b, b > 1 and "s" or "", L)
  end
  local lens = read_lengths(d)
  local packs, cut = pack_torchtune(lens, L, split)
  local np = #packs
  if np < b then
    error(("training.data: %d sequences make %d pack%s of %d tokens, fewer than a micro-batch of %d (torchtune's "
           .. "DataLoader drops the last short batch: no step runs)"):format(#lens, np, np > 1 and "s" or "", L, b), 0)
  end
  -- a pack's attention work: its blocks, each partial one twice a full one (ops/attention.lua)
  local work = {}
  for i, p in ipairs(packs) do
    local pb, fb = flex_row_blocks(p.lens, L)
    work[i] = 2 * pb + fb
  end
  local idx = order == "shuffle" and shuffled(np, seed) or nil
  local nbatch = np // b
  local chosen, what
  if pick == "worst" and order == "shuffle" then
    -- the worst a shuffle can deal: the b packs of the most blocks together
    local sorted = {}
    for i = 1, np do sorted[i] = i end
    table.sort(sorted, function(x, y) if work[x] ~= work[y] then return work[x] > work[y] end return x < y end)
    local list = {}
    for i = 1, b do list[i] = packs[sorted[i]] end
    chosen, what = batch(list), "the worst batch a shuffle can deal"
  else
    local keys = {}
    for k = 1, nbatch do
      local s = 0
      for j = (k - 1) * b + 1, k * b do s = s + work[idx and idx[j] or j] end
      keys[k] = s
    end
    local k, rank = batch_by_key(keys, nbatch, pick, q)
    local list = {}
    for j = (k - 1) * b + 1, k * b do list[#list + 1] = packs[idx and idx[j] or j] end
    chosen = batch(list)
    what = pick == "worst" and "the epoch's batch of most attention blocks"
      or ("the epoch's %s batch by attention blocks (%d of %d)"):format(pick, rank, nbatch)
  end
  local sum = 0
  for _, p in ipairs(packs) do sum = sum + p.total end
  local note = ("training.data: %d sequences (%d tokens%s) packed in order into %d packs of %d tokens (torchtune's "
                .. "PackedDataset%s; the packs %.1f %% full, padding one more document); %s %d micro-batches of %d "
                .. "packs (drop_last); simulated: %s, %d x %d (%d documents; FlexAttention's blocks: %d partial, %d full)")
    :format(#lens, sum, cut > 0 and (", %d sequences truncated to %d by the tokenizer"):format(cut, split and L - 1 or L) or "",
            np, L, split and ", split_across_pack" or "", 100 * sum / (np * L),
            order == "shuffle" and ("a shuffled epoch (seed " .. seed .. ") of") or "an epoch of", nbatch, b,
            what, chosen.rows, L, chosen.n, chosen.flex_blocks.partial, chosen.flex_blocks.full)
  return chosen, note
end

-- The documents FlexAttention tells apart in one of torchtitan's rows: get_document_mask_mod
-- numbers the tokens by the EOS tokens up to each (cumsum of batch == eos_id, the row's last token
-- counted as one too), so a document's EOS opens the next number and the last token is one of its
-- own. eos: the EOS tokens' positions in the row (0-based, ascending, none at L - 1 or one).
-- Returns the runs of equal numbers, in order.
local function titan_row_segments(eos, L)
  local out, from = {}, 0
  for _, e in ipairs(eos) do
    if e < L - 1 then
      if e > from then out[#out + 1] = e - from end
      from = e
    end
  end
  if L - 1 > from then out[#out + 1] = L - 1 - from end
  out[#out + 1] = 1
  return out
end

-- plan() for torchtitan's text stream (238fa99 hf_datasets/text_datasets.py): every document's
-- tokens (BOS and EOS among them: encode(add_bos=True, add_eos=True)) appended to one buffer in
-- the data set's order, cut into chunks of L + 1 tokens, each a row of L inputs (the last token
-- only a label), the leftover dropped; micro_batch rows a batch, in order. Without lengths, each
-- row one document's middle (no EOS in it).
local function plan_torchtitan(d, b, pick, q)
  local L = d.pack_length
  local function batch(rows, real)
    local partial, full, flat = 0, 0, {}
    for _, segs in ipairs(rows) do
      local pb, fb = flex_row_blocks(segs, L)
      partial, full = partial + pb, full + fb
      for _, x in ipairs(segs) do flat[#flat + 1] = x end
    end
    return { rows = #rows, len = L, real = real, packed = false, padded = false, torchtitan = true,
             n = #flat, lens = flat, row_lens = rows, flex_blocks = { partial = partial, full = full },
             batching = "torchtitan" }
  end
  if d.lengths == nil then
    if pick ~= "worst" then
      error(("training.data.batch = %s needs the data set's lengths (training.data.lengths)"):format(pick), 0)
    end
    local rows = {}
    for i = 1, b do rows[i] = titan_row_segments({}, L) end
    return batch(rows, b * L), ("training.data: no lengths given (the documents' token counts: --set "
      .. "training.data.lengths=FILE); simulated %d row%s of %d tokens inside one document (torchtitan's text "
      .. "stream; the memory is the same for any row)"):format(b, b > 1 and "s" or "", L)
  end
  local lens = read_lengths(d)
  -- the EOS positions of each row: document k ends at stream position ends[k] - 1
  local rows, total, at = {}, 0, 1
  for _, l in ipairs(lens) do total = total + l end
  local nrows = total // (L + 1)
  if nrows < b then
    error(("training.data: %d documents (%d tokens) make %d row%s of %d tokens, fewer than a micro-batch of %d")
          :format(#lens, total, nrows, nrows == 1 and "" or "s", L, b), 0)
  end
  local edge = lens[1]
  for r = 1, nrows do
    local lo = (r - 1) * (L + 1)
    local eos = {}
    while at <= #lens and edge - 1 < lo + L do
      if edge - 1 >= lo then eos[#eos + 1] = edge - 1 - lo end
      at = at + 1
      edge = edge + (lens[at] or 0)
    end
    rows[r] = titan_row_segments(eos, L)
  end
  local nb = nrows // b
  local work = {}
  for k = 1, nb do
    local w = 0
    for r = (k - 1) * b + 1, k * b do
      local pb, fb = flex_row_blocks(rows[r], L)
      w = w + 2 * pb + fb
    end
    work[k] = w
  end
  local k, rank = batch_by_key(work, nb, pick, q)
  local chosen = batch(table.move(rows, (k - 1) * b + 1, k * b, 1, {}), b * L)
  local what = pick == "worst" and "the epoch's batch of most attention blocks"
    or ("the epoch's %s batch by attention blocks (%d of %d)"):format(pick, rank, nb)
  return chosen, ("training.data: %d documents (%d tokens) streamed into %d rows of %d inputs (torchtitan's text "
    .. "data set: chunks of %d tokens, the leftover dropped); %d micro-batches of %d rows in order; simulated: %s, "
    .. "%d x %d (FlexAttention's blocks: %d partial, %d full)"):format(#lens, total, nrows, L, L + 1, nb, b, what,
    chosen.rows, L, chosen.flex_blocks.partial, chosen.flex_blocks.full)
end

-- The normalized training.data (its keys checked) and the batch the run simulates, with the
-- note that says what it is. b: sequences per micro-batch (rows, when packed).
local function plan(d, b)
  for k in pairs(d) do
    if not KEYS[k] then
      error(("training.data.%s is not a key vrsim knows (one of: %s)"):format(tostring(k), keys_text()), 0)
    end
  end
  local batching = d.batching or "pad"
  local packing = batching == "bfd" or batching == "bfd_split"
  local multipack = batching == "multipack"
  local torchtune = batching == "torchtune"
  local titan = batching == "torchtitan"
  if batching ~= "pad" and batching ~= "padding_free" and not packing and not multipack and not torchtune and not titan then
    error(("training.data.batching = %s: one of pad, padding_free, bfd, bfd_split, multipack, torchtune, torchtitan")
          :format(tostring(batching)), 0)
  end
  if d.split_across_pack ~= nil and not torchtune then
    error(("training.data.split_across_pack is torchtune's packing's: batching %s does not use it (torchtune does)")
          :format(batching), 0)
  end
  if d.split_across_pack ~= nil and type(d.split_across_pack) ~= "boolean" then
    error(("training.data.split_across_pack = %s: true or false"):format(tostring(d.split_across_pack)), 0)
  end
  if torchtune and d.collator ~= nil then
    error("training.data.collator with batching torchtune: torchtune's packed batches are collated by "
          .. "padded_collate_packed (the packs stacked, their BlockMask made)", 0)
  end
  if titan and d.collator ~= nil then
    error("training.data.collator with batching torchtitan: torchtitan's rows are its text stream's chunks, "
          .. "stacked as they are", 0)
  end
  if titan and d.order == "shuffle" then
    error("training.data.order = shuffle with batching torchtitan: torchtitan's text data sets stream the "
          .. "documents in order (order = given)", 0)
  end
  for _, k in ipairs { "max_length", "too_long", "bin_sequences", "group_size" } do
    if d[k] ~= nil and not multipack then
      error(("training.data.%s is axolotl's sample packing's: batching %s does not use it (multipack does)")
            :format(k, batching), 0)
    end
  end
  for _, k in ipairs { "max_length", "bin_sequences", "group_size" } do
    local v = d[k]
    if v ~= nil and (not math.tointeger(v) or v < 1 or v > MAX_LEN) then
      error(("training.data.%s = %s: an integer in [1, %d]"):format(k, tostring(v), MAX_LEN), 0)
    end
  end
  if d.real_batches ~= nil and (not multipack or type(d.real_batches) ~= "boolean") then
    error(("training.data.real_batches = %s: true or false, with batching multipack (axolotl's "
           .. "multipack_real_batches)"):format(tostring(d.real_batches)), 0)
  end
  if d.too_long ~= nil and d.too_long ~= "drop" and d.too_long ~= "truncate" and d.too_long ~= "raise" then
    error(("training.data.too_long = %s: one of drop, truncate, raise"):format(tostring(d.too_long)), 0)
  end
  if multipack and d.collator ~= nil and d.collator ~= "transformers" then
    error("training.data.collator with batching multipack: axolotl's collator hands the model position_ids "
          .. "(transformers' flash attention finds the sequences from them)", 0)
  end
  local collator = d.collator or (packing and "trl" or "transformers")
  if collator ~= "transformers" and collator ~= "trl" then
    error(("training.data.collator = %s: one of transformers, trl"):format(tostring(collator)), 0)
  end
  if d.collator ~= nil and batching == "pad" then
    error("training.data.collator is a flattened batch's (padding_free, bfd): batching pad's is DataCollatorWithPadding", 0)
  end
  if packing and collator ~= "trl" then
    error(("training.data.collator = transformers with batching %s: TRL's packing is collated by TRL's "
           .. "padding-free collator"):format(batching), 0)
  end
  local L = d.pack_length
  if packing and (not math.tointeger(L) or L < 1 or L > MAX_LEN) then
    error(("training.data.pack_length = %s: batching %s packs rows of pack_length tokens (TRL's max_length): "
           .. "an integer in [1, %d]"):format(tostring(L), batching, MAX_LEN), 0)
  end
  if multipack and (not math.tointeger(L) or L < 1 or L > MAX_LEN) then
    error(("training.data.pack_length = %s: batching multipack packs bins of pack_length tokens (axolotl's "
           .. "micro_batch_size x sequence_len): an integer in [1, %d]"):format(tostring(L), MAX_LEN), 0)
  end
  if torchtune and (not math.tointeger(L) or L < 1 or L > MAX_LEN) then
    error(("training.data.pack_length = %s: batching torchtune packs rows of pack_length tokens (torchtune's "
           .. "tokenizer.max_seq_len): an integer in [1, %d]"):format(tostring(L), MAX_LEN), 0)
  end
  if titan and (not math.tointeger(L) or L < 1 or L > MAX_LEN) then
    error(("training.data.pack_length = %s: batching torchtitan cuts rows of pack_length tokens (torchtitan's "
           .. "training.seq_len): an integer in [1, %d]"):format(tostring(L), MAX_LEN), 0)
  end
  if L ~= nil and not packing and not multipack and not torchtune and not titan then
    error(("training.data.pack_length is the packed rows' length: batching %s packs nothing (bfd, bfd_split, multipack, "
           .. "torchtune, torchtitan do)"):format(batching), 0)
  end
  if multipack and d.max_length and d.max_length > L then
    error(("training.data.max_length = %d is longer than a bin (pack_length %d)"):format(d.max_length, L), 0)
  end
  local order = d.order or (titan and "given" or "shuffle")
  if order ~= "shuffle" and order ~= "given" then
    error(("training.data.order = %s: one of shuffle, given"):format(tostring(order)), 0)
  end
  local multiple = d.pad_to_multiple_of
  if multiple ~= nil and (not math.tointeger(multiple) or multiple < 1 or multiple > 65536) then
    error(("training.data.pad_to_multiple_of = %s: an integer in [1, 65536]"):format(tostring(multiple)), 0)
  end
  if multiple ~= nil and batching ~= "pad" and not multipack then
    error(("training.data.pad_to_multiple_of is DataCollatorWithPadding's: %s pads nothing"):format(batching), 0)
  end
  local seed = d.seed or 42
  if not math.tointeger(seed) then error(("training.data.seed = %s: an integer"):format(tostring(seed)), 0) end
  if d.seed ~= nil and order ~= "shuffle" then
    error("training.data.seed: order = \"given\" does not shuffle", 0)
  end
  local pick = d.batch or "worst"
  local q = type(pick) == "string" and math.tointeger(tonumber(pick:match("^p(%d+)$") or ""))
  if pick ~= "worst" and not (q and q >= 0 and q <= 100) then
    error(("training.data.batch = %s: worst, or pNN with NN in 0..100 (p50: the median batch)"):format(tostring(pick)), 0)
  end
  if multipack then return plan_multipack(d, b, order, seed, pick, q, multiple) end
  if torchtune then return plan_torchtune(d, b, order, seed, pick, q) end
  if titan then return plan_torchtitan(d, b, pick, q) end
  local lens = read_lengths(d)
  if packing then return plan_packed(d, b, lens, batching, L, order, seed, pick, q) end
  local n = #lens
  -- the epoch's batches, in the sampler's order, the last one short (dataloader_drop_last off):
  -- each one's tokens computed and whether a row is padded, in flat arrays (a data set may
  -- have millions of sequences)
  local idx = order == "shuffle" and shuffled(n, seed) or nil
  local tok, pad, nb, real, computed = {}, {}, 0, 0, 0
  for i = 1, n, b do
    local sum, max, min = 0, 0, math.maxinteger
    local last = math.min(n, i + b - 1)
    for j = i, last do
      local l = lens[idx and idx[j] or j]
      sum = sum + l
      if l > max then max = l end
      if l < min then min = l end
    end
    nb = nb + 1
    local rows = last - i + 1
    if batching == "padding_free" then
      tok[nb], pad[nb] = sum, false
    else
      local len = round_up(max, multiple)
      tok[nb], pad[nb] = rows * len, min < len
    end
    real, computed = real + sum, computed + tok[nb]
  end
  -- the lengths of batch k, in the sampler's order
  local function batch_lengths(k)
    local bl, i = {}, (k - 1) * b + 1
    for j = i, math.min(n, i + b - 1) do bl[#bl + 1] = lens[idx and idx[j] or j] end
    return bl
  end
  local chosen, what
  if pick == "worst" and order == "shuffle" then
    -- the worst a shuffle can deal: padded, the longest sequence with the b - 1 shortest (the
    -- largest batch and its most padding); flattened, the b longest in one row
    local a = table.move(lens, 1, n, 1, {})
    local k = math.min(b, n)
    local bl = {}
    if batching == "pad" then
      select_kth(a, n, 1, n) -- the longest last
      if k > 1 then select_kth(a, k - 1, 1, n - 1) end -- the k - 1 shortest first
      bl[1] = a[n]
      for i = 1, k - 1 do bl[#bl + 1] = a[i] end
    else
      select_kth(a, n - k + 1, 1, n) -- the k longest last
      for i = n - k + 1, n do bl[#bl + 1] = a[i] end
    end
    chosen, what = shape(bl, batching, multiple), "the worst batch a shuffle can deal"
  else
    -- by tokens computed, then a padded batch (its mask) before one without: the key
    -- 2 x tokens + padded sorts as numbers; the chosen batch is the first with the rank's key
    local keys = {}
    for k = 1, nb do keys[k] = 2 * tok[k] + (pad[k] and 1 or 0) end
    local k, rank = batch_by_key(keys, nb, pick, q)
    chosen = shape(batch_lengths(k), batching, multiple)
    what = pick == "worst" and "the epoch's largest batch"
      or ("the epoch's %s batch by tokens computed (%d of %d)"):format(pick, rank, nb)
  end
  local lo, hi, sum = math.maxinteger, 0, 0
  for _, l in ipairs(lens) do
    sum = sum + l
    if l < lo then lo = l end
    if l > hi then hi = l end
  end
  local how = batching == "pad"
    and ("micro-batches of %d padded to their longest%s"):format(b, multiple and (" (a multiple of " .. multiple .. ")") or "")
    or ("micro-batches of %d flattened into one row each (position_ids)"):format(b)
  local note = ("training.data: %d sequences of %d to %d tokens (mean %.0f); %s %d %s: %.1f %% of the "
                .. "tokens computed are padding; simulated: %s, %d x %d (%d tokens of data)")
    :format(n, lo, hi, sum / n, order == "shuffle" and ("a shuffled epoch (seed " .. seed .. ") of") or "an epoch of",
            nb, how, 100 * (computed - real) / computed, what, chosen.rows, chosen.len, chosen.real)
  chosen.batching = batching
  chosen.trl_collator = batching == "padding_free" and collator == "trl" or nil
  return chosen, note
end

-- Applies cfg.training.data before the model is built: the batch the run simulates becomes its
-- shape (training.seq its row length, training.data_batch the rest) and a note says which. fail:
-- raises an error at the scenario's data field.
function M.apply(cfg, ctx, fail)
  local t = cfg.training
  if cfg.model.arch == "sdxl" then fail("training.data is a language model's sequences; sdxl's batches are images") end
  if ctx.given["training.seq"] then
    fail("training.seq is set by training.data's batches (the longest of the batch, or the flattened "
         .. "row's length): give one or the other")
  end
  if t.inference then fail("training.data is not modelled for inference (generation's batches are not built)") end
  local ok, chosen, note = pcall(plan, t.data, t.micro_batch)
  if not ok then fail(tostring(chosen)) end
  if t.grad_accum > 1 then
    note = note .. ("; each of the %d accumulated micro-batches is simulated at this shape"):format(t.grad_accum)
  end
  t.seq = chosen.len
  t.data_batch = chosen
  cfg.notes = cfg.notes or {}
  cfg.notes[#cfg.notes + 1] = note
end

-- The error for a run whose model or attention cannot take this batch (nil when it can): the
-- attention a padded or packed batch needs, a sliding window the batch outruns.
function M.check(t, mc, attention, model_type)
  local d = t.data_batch
  if d and d.torchtitan then
    if attention ~= "flex" then
      return ("training.data.batching = torchtitan is torchtitan's text stream under a flex flavor's block_causal "
              .. "mask: training.attention = flex (not %s)"):format(attention)
    end
    if mc.sliding_window and mc.sliding_window <= d.len then
      return ("training.data.batching = torchtitan past the sliding window (%d tokens, rows of %d) is not modelled")
        :format(mc.sliding_window, d.len)
    end
    return nil
  end
  if d and d.torchtune then
    if attention ~= "flex" then
      return ("training.data.batching = torchtune is torchtune's packed data set, whose collator makes a BlockMask "
              .. "that torchtune's attention hands to FlexAttention: training.attention = flex (under %s torchtune "
              .. "takes a dense (b, s, s) mask only where FlexAttention is not supported, below sm75: not modelled)")
        :format(attention)
    end
    if mc.sliding_window and mc.sliding_window <= d.len then
      return ("training.data.batching = torchtune past the sliding window (%d tokens, packs of %d) is not modelled")
        :format(mc.sliding_window, d.len)
    end
    return nil
  end
  if d and d.multipack and (attention == "flash" or attention == "flex") and d.real_batches then
    return ("training.data.real_batches under %s attention (axolotl's multipack_real_batches set by hand) is not "
            .. "modelled: axolotl packs one bin of micro_batch_size x sequence_len a micro-batch there"):format(attention)
  end
  if d and d.multipack and attention ~= "flash" and attention ~= "flex" then
    if not d.real_batches then
      return ("training.data.batching = multipack under %s: axolotl deals micro_batch_size bins of sequence_len "
              .. "a batch there, each its own row (multipack_real_batches): training.data.real_batches = true with "
              .. "pack_length = sequence_len"):format(attention)
    end
    return M.sdpa_varlen_refusal(t, mc, attention, model_type)
  end
  if not d or not (d.padded or d.packed) then return nil end
  local what = d.padded and "padded batches" or "padding-free (packed) batches"
  if attention == "flash" and t.precision == "fp32" then
    return ("training.data with %s and attention = flash in fp32 is not modelled (flash_attention_2 takes "
            .. "fp16 and bf16: transformers casts fp32 queries back first)"):format(what)
  end
  -- the window's mask is made from a row as long as the window on (masking_utils'
  -- _ignore_causal_mask_sdpa: kv_length >= local_attention_size)
  if mc.sliding_window and mc.sliding_window <= d.len then
    return ("training.data with %s as long as the sliding window or longer (%d tokens, a row of "
            .. "%d) is not modelled: the window's mask with padding or packing is not built")
      :format(what, mc.sliding_window, d.len)
  end
  return nil
end

-- The families whose attention is transformers' Llama-style attention module, which hands the
-- attention function its keys and values before any repeat (what axolotl's sdpa_varlen wrapper
-- takes).
local VARLEN_FAMILIES = { llama = true, mistral = true, qwen2 = true, qwen3 = true, phi3 = true, olmo2 = true,
                          mixtral = true, qwen3_moe = true }

-- The error for axolotl's packing under sdpa where its sdpa_varlen patch (axolotl 0.18-0.19
-- monkeypatch/attention/sdpa_varlen.py, PatchManager._apply_sdpa_varlen_patch) does not take the
-- attention as vrsim models it (nil where it does): the patch is installed for sdpa with
-- sample_packing unless the model has a sliding window or a head dim over 256, and it runs
-- varlen_attn only on CUDA fp16/bf16 queries; elsewhere stock SDPA takes transformers'
-- (b, 1, L, L) block-diagonal mask, which is not modelled for these batches.
function M.sdpa_varlen_refusal(t, mc, attention, model_type)
  local pre = "training.data.real_batches (axolotl's packing under sdpa, its sdpa_varlen patch)"
  -- eager: axolotl patches nothing; transformers finds the packed sequences from position_ids and
  -- eager_mask makes the (b, 1, L, L) additive block-causal mask (M.mask)
  if attention == "eager" then return nil end
  if attention ~= "sdpa" then
    return ("%s under %s attention is not modelled (sdpa_varlen patches sdpa; eager takes transformers' "
            .. "block-diagonal mask)"):format(pre, attention)
  end
  if not VARLEN_FAMILIES[model_type or ""] then
    return ("%s for %s is not modelled (Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo 2, Mixtral and Qwen3-MoE are)")
      :format(pre, tostring(model_type))
  end
  if mc.sliding_window then
    return ("%s with a sliding window (%d tokens) is not modelled: axolotl leaves stock SDPA in place there, on "
            .. "transformers' block-diagonal mask"):format(pre, mc.sliding_window)
  end
  if mc.head_dim and mc.head_dim > 256 then
    return ("%s at head dim %d is not modelled: axolotl leaves stock SDPA in place over 256 (flash's limit)")
      :format(pre, mc.head_dim)
  end
  local p = t.precision
  if p ~= "bf16" and p ~= "lora_bf16" and p ~= "fp16" and p ~= "lora_fp16" then
    return ("%s in %s is not modelled: varlen_attn takes fp16 and bf16 queries (axolotl 0.19 falls back to SDPA on "
            .. "a block-diagonal mask, 0.18 fails)"):format(pre, p)
  end
  return nil
end

-- The collator's inputs besides input_ids, made once with the batch (persistent): the (b, L)
-- int64 attention_mask of a padded batch, the (1, T) int64 position_ids of a flattened one.
-- TRL's collator (packed batches: d.trl_collator) adds the flash kernel's arguments it computes
-- on the CPU (trl 1.16 sft_trainer.py DataCollatorForLanguageModeling, padding_free):
-- cu_seq_lens_q and cu_seq_lens_k, one int32 tensor of n + 1 offsets under two keys, each moved
-- to the GPU on its own by the Trainer's _prepare_inputs, and seq_idx (1, T) int32.
function M.inputs(cx, d)
  local function input(name, shape, dtype)
    dtype = dtype or "int64"
    local numel = shape[1] * (shape[2] or 1)
    local id = cx.G:tensor { name = name, bytes = numel * (dtype == "int32" and 4 or 8), numel = numel,
                             dtype = dtype, cat = "temp", persistent = true }
    cx.G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
    return { id = id, shape = shape, dtype = dtype, rg = false, name = name }
  end
  if d.batching == "pad" then return { attention_mask = input("attention_mask", { d.rows, d.len }) } end
  -- (torchtitan's rows: the input ids alone; the BlockMask is made from them: M.flex_document_mask)
  if d.torchtitan then return {} end
  if d.torchtune then
    -- the packs' input_pos (each document's positions from 0), and packed_block_causal_mask's
    -- document ids moved to the GPU, which the BlockMask's mask_mod holds
    return { position_ids = input("input_pos", { d.rows, d.len }),
             document_ids = input("document_ids", { d.rows, d.len }) }
  end
  local out = { position_ids = input("position_ids", { d.rows or 1, d.len }) }
  if d.trl_collator then
    out.cu_seq_lens_q = input("cu_seq_lens_q", { d.n + 1 }, "int32")
    out.cu_seq_lens_k = input("cu_seq_lens_k", { d.n + 1 }, "int32")
    out.seq_idx = input("seq_idx", { 1, d.len }, "int32")
  end
  return out
end

-- masking_utils' find_packed_sequence_indices on a flattened row's position_ids (1, L): the
-- first value minus one cat in front, the difference, != 1, its cumsum (the sequence index per
-- token, returned), and the check that the last column's is 0 (== 0, all()). new(name, shape,
-- dtype, inputs, frees) makes each tensor; P names them.
local function sequence_index(cx, new, pos, L, P, rows)
  local nn = require "vrsim.nn"
  local b = rows or 1
  local first = new("first_minus_one", { b, 1 }, "int64", { pos })
  local cat = new("diff_prepend_cat", { b, L + 1 }, "int64", { pos, first })
  local diff = new("diff", { b, L }, "int64", { cat }, { cat })
  nn.release(cx, { first }, P .. ": find_packed_sequence_indices's first value dropped")
  local ne = new("ne_one", { b, L }, "bool", { diff }, { diff })
  local seq = new("sequence_index", { b, L }, "int64", { ne }, { ne })
  local last = new("last_eq_zero", { b }, "bool", { seq })
  nn.release(cx, { new("all", {}, "bool", { last }, { last }) }, P .. ": the all() read")
  return seq
end

-- create_causal_mask for flex attention with this batch (masking_utils' flex_attention_mask,
-- transformers 5.25): the padding mask (attention_mask.to(bool), (b, L), and fast_all's sum), or
-- the packed row's sequence index (find_packed_sequence_indices, as for SDPA below), which the
-- mask function's closure holds with the BlockMask until the model returns; then
-- create_block_mask compiled (no dense mask: its outputs alone), the BlockMask's eight int32
-- tensors (b rows padded, one flattened). The blocks FlexAttention runs are counted from the
-- lengths (d.flex_blocks, nn.flex_attention).
function M.flex_mask(cx, r, inputs)
  local d = r.data
  local nn = require "vrsim.nn"
  local b, L = d.rows, d.len
  local P = d.padded and "padding_mask" or "packed_mask"
  local function new(name, shp, dtype, ins, frees)
    return nn.op(cx, { name = P .. "." .. name, inputs = ins or {}, frees = frees,
                       outs = { { P .. "." .. name, shp, dtype, no_grad = true } } })
  end
  local held
  if d.padded then
    held = new("to_bool", { b, L }, "bool", { inputs.attention_mask })
    local sum = new("fast_all_sum", {}, "int64", { held })
    nn.release(cx, { new("fast_all_eq", {}, "bool", { sum }, { sum }) }, P .. ": fast_all's answer read")
    local partial, full = 0, 0
    for _, l in ipairs(d.lens) do
      local pb, fb = flex_padded_row_blocks(l, L)
      partial, full = partial + pb, full + fb
    end
    d.flex_blocks = { partial = partial, full = full }
  elseif d.packed and not r.use_cache then
    held = sequence_index(cx, new, inputs.position_ids, L, P)
    local pb, fb = flex_row_blocks(d.lens, L)
    d.flex_blocks = { partial = pb, full = fb }
  elseif d.packed then
    -- (with a DynamicCache transformers looks for no packed sequences: causal over the row)
    cx.notes[#cx.notes + 1] = "training.data: padding_free without checkpointing: the model runs with "
      .. "use_cache (a DynamicCache), so transformers does not find the packed sequences and flex attention "
      .. "attends across them (a causal BlockMask over the whole row, and the results mix sequences); "
      .. "transformers' padding-free training passes use_cache=False"
  end
  if d.flex_blocks and not d.flex_noted then
    d.flex_noted = true
    cx.notes[#cx.notes + 1] = ("training.data under flex attention: the batch's BlockMask keeps %d partial and %d "
      .. "full blocks of 128 x 128"):format(d.flex_blocks.partial, d.flex_blocks.full)
  end
  local made = nn.block_mask(cx, d.padded and b or 1, L, { held })
  -- (the mask function's closure: what it reads lives as long as the BlockMask)
  if held then made[#made + 1] = held end
  return made
end

-- create_causal_mask for SDPA (transformers masking_utils.py, the index-based sdpa_mask) with
-- this batch: nil where is_causal serves (no row padded, one sequence a row), else the boolean
-- mask, alive until the model returns. Checked with a TorchDispatchMode on the CPU: each
-- tensor below in order, each freed where Python drops its last reference.
--   padded: attention_mask.to(bool) (b, L); _ignore_causal_mask_sdpa's two fast_all sums; the
--     aranges; causal_mask_function's kv <= q (1, 1, L, L), and-ed into new_ones(()); the
--     padding lookup padding_mask[b, kv] (b, 1, 1, L); the & of the two, (b, 1, L, L).
--   packed: find_packed_sequence_indices (diff of position_ids with a prepended column: the
--     (1, T + 1) cat and the (1, T) difference; != 1, cumsum: the sequence index per token,
--     alive until the mask is made; the last column's == 0 and all()); the aranges; kv <= q
--     over the row, and-ed into new_ones(()); the same-sequence test (the sequence index
--     gathered at q and at kv, then ==), and-ed in: (1, 1, T, T), or (b, 1, L, L) for axolotl's
--     b packed rows. From transformers 5.23.0 the causal order is tested on the remapped
--     positions (remap_positions_for_packed_sequence: position_ids gathered at q and at kv, two
--     more (b, 1, L, 1) and (b, 1, 1, L) int64 tensors; training.transformers before it, as the
--     oracle's 5.17 captures llama2_7b_l2_bf16_packed*, does not), the same mask.
--   eager (eager_mask: sdpa_mask without the causal shortcut's checks, then torch.where(mask,
--     zeros((), dtype), min) in the model's dtype): the additive mask of the boolean one's shape,
--     the boolean and the two scalars dropped as it returns (the oracle's
--     llama2_7b_l2_bf16_padded_eager, llama2_7b_l2_bf16_packed_ckpt_eager).
function M.mask(cx, r, inputs)
  local d = r.data
  if not (d.padded or d.packed) then return nil end
  -- flash_attention_2: flash_attention_mask hands on the 2-D attention_mask itself (padded) or
  -- none (packed: position_ids say where each sequence starts); M.flash_varlen unpads per layer
  if r.attention == "flash" then return nil end
  if d.real_batches and r.attention == "sdpa" then
    -- axolotl's sdpa_varlen: create_causal_mask finds the packed sequences (not with a cache, as
    -- below), then the patched sdpa mask function returns None for a batch without an
    -- attention_mask; M.sdpa_varlen finds them again per layer
    if not r.use_cache then
      local nn = require "vrsim.nn"
      local P = "packed_mask"
      local function new(name, shp, dtype, ins, frees)
        return nn.op(cx, { name = P .. "." .. name, inputs = ins or {}, frees = frees,
                           outs = { { P .. "." .. name, shp, dtype, no_grad = true } } })
      end
      nn.release(cx, { sequence_index(cx, new, inputs.position_ids, d.len, P, d.rows) },
                 P .. ": create_causal_mask returns (sdpa_varlen's mask function: None)")
    end
    return nil
  end
  if d.packed and r.use_cache then
    -- LlamaModel.forward makes a DynamicCache when use_cache holds (training without
    -- checkpointing keeps the config's True), and _preprocess_mask_arguments looks for packed
    -- sequences only without a cache: no mask, SDPA's is_causal over the whole row
    cx.notes[#cx.notes + 1] = "training.data: padding_free without checkpointing: the model runs with "
      .. "use_cache (a DynamicCache), so transformers does not find the packed sequences and SDPA attends "
      .. "across them (is_causal over the whole row: no mask is built, and the results mix sequences); "
      .. "transformers' padding-free training passes use_cache=False"
    return nil
  end
  local nn = require "vrsim.nn"
  local P = d.padded and "padding_mask" or "packed_mask"
  local function new(name, shp, dtype, ins, frees)
    return nn.op(cx, { name = P .. "." .. name, inputs = ins or {}, frees = frees,
                       outs = { { P .. "." .. name, shp, dtype, no_grad = true } } })
  end
  local b, L = d.rows, d.len
  local eager = r.attention == "eager"
  local seq_id, pad_bool
  if d.padded then
    pad_bool = new("to_bool", { b, L }, "bool", { inputs.attention_mask })
    -- (_ignore_causal_mask_sdpa's fast_all checks: SDPA's only, eager_mask passes
    -- allow_is_causal_skip=False)
    for i = 1, eager and 0 or 2 do
      local s = new("fast_all_sum" .. i, {}, "int64", { pad_bool })
      local e = new("fast_all_eq" .. i, {}, "bool", { s }, { s })
      nn.release(cx, { e }, P .. ": fast_all's answer read")
    end
  else
    seq_id = sequence_index(cx, new, inputs.position_ids, L, P, b)
  end
  local batch_idx = new("batch_arange", { b }, "int64")
  local head_idx = new("head_arange", { 1 }, "int64")
  local q_ar = new("q_arange", { L }, "int64")
  local q_idx = new("q_idx", { L }, "int64", { q_ar }, { q_ar })
  local kv_ar = new("kv_arange", { L }, "int64")
  local kv_idx = new("kv_idx", { L }, "int64", { kv_ar }, { kv_ar })
  -- (a packed row's sequences span its rows: (b, 1, L, L) from the sequence index on)
  local rows = d.padded and 1 or b
  local LL = { rows, 1, L, L }
  local ones = new("new_ones", {}, "bool", { q_idx })
  local causal
  if d.packed and cx.tf and cx.tf.packed_remap then
    -- 5.23 on: the causal test on each token's position in its sequence
    -- (remap_positions_for_packed_sequence: position_ids gathered at q and at kv)
    local pq = new("position_at_q", { rows, 1, L, 1 }, "int64", { inputs.position_ids, q_idx })
    local pk = new("position_at_kv", { rows, 1, 1, L }, "int64", { inputs.position_ids, kv_idx })
    causal = new("causal", LL, "bool", { pk, pq }, { pk, pq })
  else
    causal = new("causal", { 1, 1, L, L }, "bool", { kv_idx, q_idx })
  end
  local r1 = new("and_causal", causal.shape, "bool", { ones, causal }, { causal, ones })
  local mask
  if d.padded then
    local lookup = new("padding_lookup", { b, 1, 1, L }, "bool", { pad_bool, batch_idx, kv_idx })
    mask = new("and_padding", { b, 1, L, L }, "bool", { r1, lookup }, { lookup, r1 })
  else
    local sq = new("sequence_at_q", { rows, 1, L, 1 }, "int64", { seq_id, q_idx })
    local sk = new("sequence_at_kv", { rows, 1, 1, L }, "int64", { seq_id, kv_idx })
    local same = new("same_sequence", LL, "bool", { sq, sk }, { sq, sk })
    mask = new("and_same_sequence", LL, "bool", { r1, same }, { same, r1 })
  end
  nn.release(cx, { batch_idx, head_idx, q_idx, kv_idx }, P .. ": sdpa_mask returns")
  if eager then
    -- eager_mask: `torch.where(mask, torch.zeros((), dtype=dtype), min_dtype)`, the additive mask
    -- in the model's dtype (inputs_embeds'), the boolean one dropped with the scalars
    local zero = new("zeros", {}, r.param_dtype)
    local low = new("min_scalar", {}, r.param_dtype)
    local add = new("eager_additive", mask.shape, r.param_dtype, { mask, zero, low }, { low, zero, mask })
    mask = add
  end
  nn.release(cx, { pad_bool, seq_id }, P .. ": create_causal_mask returns")
  return mask
end

-- torchtune's packed_block_causal_mask (modules/attention_utils.py, 0.6.1) for one batch: its
-- create_block_mask(mask_mod, b, None, L, L) is not compiled, so torch's create_mask evaluates
-- mask_mod densely under vmap before _convert_mask_to_block_mask counts the blocks (PyTorch 2.13
-- flex_attention.py; checked with a TorchDispatchMode on the CPU): q >= kv over (L, L), the
-- document ids gathered at q and at kv (b, L) each, their == (b, L, L), the & (b, L, L) (the
-- mask, alive until create_block_mask returns), padded to a multiple of 128 (a copy), viewed as
-- blocks and summed, which casts the bool copy to int64 first (make_reduction's self.to(out
-- dtype)): 10 bytes an element at the peak, as measure_flex_attention.py measured on an H100
-- (mask_peak_bytes). The block counts' small tensors then give the BlockMask's eight int32
-- tensors (flex_block_mask's, per row). Returns them.
--
-- torchtitan's (238fa99 models/attention.py get_document_mask_mod, create_attention_mask): the
-- row's EOS tokens (input_ids == eos_id, (b, L) bool, its last column set), where'd to int64 and
-- summed along the row (cumsum, (b, L) int64, which the mask function's closure holds with the
-- BlockMask), then a compiled create_block_mask: no dense mask, its eight int32 tensors alone.
function M.flex_document_mask(cx, d, inputs, ids)
  local nn = require "vrsim.nn"
  local b, L = d.rows, d.len
  local Lp = round_up(L, 128)
  local n = Lp // 128
  local P = "block_mask"
  local function new(name, shp, dtype, ins, frees, kind)
    return nn.op(cx, { name = P .. "." .. name, kind = kind, inputs = ins or {}, frees = frees,
                       outs = { { P .. "." .. name, shp, dtype, no_grad = true } } })
  end
  if d.torchtitan then
    local eos = new("eos_mask", { b, L }, "bool", { ids }, {})
    local ones = new("eos_where", { b, L }, "int64", { eos }, { eos })
    local doc = new("document_ids", { b, L }, "int64", { ones }, { ones }, "reduce_rows")
    local made = nn.block_mask(cx, b, L, { doc })
    made[#made + 1] = doc
    return made
  end
  local doc = inputs.document_ids
  local q_idx = new("q_arange", { L }, "int64")
  local kv_idx = new("kv_arange", { L }, "int64")
  local causal = new("causal", { L, L }, "bool", { q_idx, kv_idx })
  local at_q = new("document_at_q", { b, L }, "int64", { doc, q_idx }, nil, "gather")
  local at_kv = new("document_at_kv", { b, L }, "int64", { doc, kv_idx }, nil, "gather")
  local same = new("same_document", { b, L, L }, "bool", { at_q, at_kv }, { at_q, at_kv })
  local mask = new("mask", { b, 1, L, L }, "bool", { causal, same }, { causal, same })
  nn.release(cx, { q_idx, kv_idx }, P .. ": create_mask returns")
  local padded = new("padded", { b, 1, Lp, Lp }, "bool", { mask }, nil, "copy")
  local wide = new("padded_int64", { b, 1, Lp, Lp }, "int64", { padded }, nil, "cast_up")
  local sums = new("block_sums", { b, 1, n, n }, "int64", { wide }, { wide }, "reduce_rows")
  local full = new("full_blocks", { b, 1, n, n }, "bool", { sums })
  local partial = new("partial_blocks", { b, 1, n, n }, "bool", { sums }, { sums })
  nn.release(cx, { padded }, P .. ": _convert_mask_to_block_mask returns")
  local made = nn.block_mask(cx, b, L, { partial, full })
  nn.release(cx, { partial, full, mask }, P .. ": create_block_mask returns")
  return made
end

-- A small tensor the varlen paths make (no gradient): P .. "." .. what, from ins; frees: the
-- inputs the op drops (none by default); sync: the host reads it (the host waits for the device).
local function small_op(cx, P, what, shp, dtype, ins, frees, sync)
  return require("vrsim.nn").op(cx, { name = P .. "." .. what, inputs = ins or {}, frees = frees or {}, sync = sync,
                                      outs = { { P .. "." .. what, shp, dtype, no_grad = true } } })
end

-- transformers' prepare_fa_kwargs_from_position_ids (modeling_flash_attention_utils.py, 5.25)
-- over the batch's position_ids flattened (T tokens, n sequences): their min, == min (T bool),
-- nonzero's (n, 1) int64 starts (viewed flat), their int32 copy and the total as a (1,) int32
-- tensor, cat into cu_seqlens (n + 1), its diff and the diff's max. Each temporary dies where the
-- function lets it go; returns cu_seqlens and the max (both the caller's), and the starts, freed
-- as the function returns.
-- read_max: the caller reads the max on the host (int(max_q): the host waits for the device).
local function cu_seqlens_from_positions(cx, P, T, n, pos, read_max)
  local nn = require "vrsim.nn"
  local function small(...) return small_op(cx, P, ...) end
  local ins = pos and { pos } or {}
  local mn = small("position_min", {}, "int64", ins)
  local eq = small("position_eq_min", { T }, "bool", { mn }, { mn })
  local starts = small("position_starts", { n, 1 }, "int64", { eq }, { eq })
  local i32 = small("starts_int32", { n }, "int32", { starts })
  local total = small("total", { 1 }, "int32")
  local cu = small("cu_seqlens", { n + 1 }, "int32", { i32, total }, { i32, total })
  local diff = small("cu_seqlens_diff", { n }, "int32", { cu })
  local mx = small("max_seqlen", {}, "int32", { diff }, { diff }, read_max)
  nn.release(cx, { starts }, P .. ": prepare_fa_kwargs_from_position_ids returns")
  return cu, mx
end

-- The flash kernel's varlen backward (FlashAttention 2's mha_varlen_bwd, as PyTorch's
-- aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp and the flash_attn package run
-- it): softmax_d, (heads, T + 128 n) fp32, and the dq accumulator, (T + 128 n, heads, head dim
-- rounded up to 32, or to 64 past 128) fp32, n the sequences (128 rows of room after each).
-- With grouped keys and values (kv_heads < heads, the flash_attn package's call) it also makes dk
-- and dv for every query head, (T, heads, d) in the inputs' dtype (dk_expanded, dv_expanded),
-- summed into the kv heads' gradients.
local function varlen_bwd_workspace(T, n, heads, hd, kvh, dt)
  local rows = T + 128 * n
  local hr = hd <= 128 and (hd + 31) // 32 * 32 or (hd + 63) // 64 * 64
  local ws = { heads * rows * 4, rows * heads * hr * 4 }
  if kvh and kvh ~= heads then
    local e = require("vrsim.nn").bytes({ T, heads, hd }, dt)
    ws[3], ws[4] = e, e
  end
  return ws
end

-- axolotl's sdpa_varlen wrapper (axolotl 0.18-0.19 monkeypatch/attention/sdpa_varlen.py
-- sdpa_varlen_forward) in place of transformers' sdpa on a batch of packed rows (b, L), no
-- attention_mask, position_ids restarting at each sequence: _is_packed ((b, L) == 0 and its sum,
-- read), keys and values repeated to every query head (repeat_interleave: unsqueeze, expand, a
-- contiguous copy), prepare_fa_kwargs_from_position_ids, q, k and v as (b x L, heads, d) by
-- transpose(1, 2).reshape (a view where the tensor's memory is (b, L, heads, d) already: the
-- rotated query and, without a cache or a repeat, the keys and values; else a copy), then
-- torch.nn.attention.varlen.varlen_attn (torch 2.13 varlen.py: a custom op on
-- aten._flash_attention_forward; it keeps q, k, v, cu_seqlens, the output, the (heads, T) fp32
-- log-sum-exp and a (2,) uint64 rng state made by torch.zeros; its autograd.Function materializes
-- zero gradients for the log-sum-exp and the rng state before the flash backward). The repeats
-- and the max die as the wrapper returns. copies: which of q, k, v are copied. Returns the output
-- as (b, heads, L, d).
function M.sdpa_varlen(cx, name, q, k, v, d, copies)
  local nn = require "vrsim.nn"
  local b, heads, L, hd = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local kvh = k.shape[2]
  local T, dt = b * L, q.dtype
  local P = name .. ".sdpa_varlen"
  local function small(...) return small_op(cx, P, ...) end
  -- (int() of the count, and below of the max: the host waits for the device, twice a layer)
  local eq = small("is_packed_eq", { b, L }, "bool")
  nn.release(cx, { small("is_packed_sum", {}, "int64", { eq }, { eq }, true) }, P .. ": _is_packed's count read")
  local reps = {}
  if kvh ~= heads then
    local rep = { b, heads, L, hd }
    k = nn.op(cx, { name = P .. ".repeat_k", inputs = { k }, outs = { { P .. ".k_rep", rep, k.dtype } },
                    grads = { { dtype = k.dtype } } })
    v = nn.op(cx, { name = P .. ".repeat_v", inputs = { v }, outs = { { P .. ".v_rep", rep, v.dtype } },
                    grads = { { dtype = v.dtype } } })
    reps = { k, v }
  end
  local given = cx.run.data_inputs
  local cu, mx = cu_seqlens_from_positions(cx, P, T, d.n, given and given.position_ids, true)
  local function flat(x, what, copy)
    local shp = { T, heads, hd }
    if not copy then return nn.view(cx, x, shp, P .. "." .. what .. "_flat") end
    return nn.op(cx, { name = P .. "." .. what .. "_flat", kind = "transpose", inputs = { x },
                       outs = { { P .. "." .. what .. "_flat", shp, x.dtype } }, grads = { { pass = 1 } } })
  end
  local qf = flat(q, "q", copies.q)
  local kf = flat(k, "k", copies.k or kvh ~= heads)
  local vf = flat(v, "v", copies.v or kvh ~= heads)
  local sq = 0
  for _, l in ipairs(d.lens) do sq = sq + l * l end
  local flops = 4 * heads * hd * sq / 2
  local lse = { heads, T }
  local ws = varlen_bwd_workspace(T, d.n, heads, hd)
  local out = nn.op_sized(cx, {
    name = P, kind = "attention_flash", inputs = { qf, kf, vf },
    outs = { { P .. ".out", { T, heads, hd }, dt }, { P .. ".softmax_lse", lse, "fp32", no_grad = true },
             -- (uint64 in torch: int64's 8 bytes)
             { P .. ".rng_state", { 2 }, "int64", no_grad = true } },
    save_outs = { 1, 2, 3 }, saves = { qf, kf, vf, cu }, grad_order = { 1, 2, 3 },
    bwd_workspace = { nn.bytes(lse, "fp32"), 16, ws[1], ws[2] },
    flops = flops, bwd_flops = 2.5 * flops, dtype = dt, host = "sdpa" })
  -- (cu_seqlens lives on in varlen_attn's saved tensors)
  local list = { mx, cu }
  for _, x in ipairs(reps) do list[#list + 1] = x end
  nn.release(cx, list, P .. ": sdpa_varlen_forward returns")
  return nn.view(cx, out, { b, heads, L, hd }, P .. ".output")
end

-- transformers' flash_attention_2 on a padded or packed batch (integrations/flash_attention.py
-- flash_attention_forward, modeling_flash_attention_utils.py _flash_attention_forward, 5.25):
-- q (b, heads, L, d), k and v (b, kv_heads, L, d), each a transposed view of a (b, L, heads, d)
-- layout; transposed back, they are contiguous (b, L, heads, d) again (not where a DynamicCache
-- copied k and v: `.contiguous()` / `reshape` then copy them).
--   padded  _upad_input: _get_unpad_data(attention_mask) (the lengths, int32; nonzero's indices of
--           the real tokens, int64; cu_seqlens, int32; max_seqlen's .item()), every layer;
--           k, v and q gathered into (T, heads, d) copies of the T real tokens (IndexBackward keeps
--           the indices; its gradient is zeros of the padded size with the rows put in);
--           flash_attn_varlen_func on them; _pad_input: zeros of (b x L, heads, d) with the output
--           put in (IndexPutBackward gathers the gradient back to (T, heads, d)).
--   packed  _prepare_from_posids: q, k, v viewed as (T, heads, d), no copy; cu_seqlens from
--           position_ids == min (nonzero: one start a sequence) cat with the total, int32, and
--           max_seqlen from its diff; flash_attn_varlen_func; the output viewed back.
-- flash_attn_varlen_func keeps q, k, v, the output and the (heads, T) fp32 log-sum-exp, as
-- PyTorch's flash kernel does; its backward's fp32 dq accumulator and softmax_d likewise.
-- Its FLOPs: each sequence's causal square alone. Returns the output as (b, heads, L, d).
function M.flash_varlen(cx, name, q, k, v, d, use_cache)
  local nn = require "vrsim.nn"
  local b, heads, L, hd = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local kvh = k.shape[2]
  -- the tokens the kernel takes: a padded batch's real ones, a flattened row's every position
  -- (axolotl's packed row counts its padding as one more sequence)
  local T, dt = d.padded and d.real or b * L, q.dtype
  local sq = 0
  for _, l in ipairs(d.lens) do sq = sq + l * l end
  local flops = 4 * heads * hd * sq / 2
  local P = name .. ".flash_varlen"
  local function small(...) return small_op(cx, P, ...) end
  if use_cache then
    -- the cache's copies are (b, kv_heads, L, d) in memory: transposed, they are copied to be
    -- flattened (`.contiguous()` / reshape's copy; its backward passes the gradient on)
    local function contig(x, what)
      return nn.op(cx, { name = P .. "." .. what .. "_contiguous", kind = "transpose", inputs = { x },
                         outs = { { P .. "." .. what .. "_contiguous", x.shape, x.dtype } }, grads = { { pass = 1 } } })
    end
    k, v = contig(k, "k"), contig(v, "v")
  end
  local qf, kf, vf, idx, temps
  if d.padded then
    local lens = small("seqlens_in_batch", { b }, "int32")
    idx = small("indices", { T }, "int64")
    local cu = small("cu_seqlens", { b + 1 }, "int32", { lens })
    temps = { lens, cu }
    -- _index_first_axis: reshape(-1, heads, d) (a view) then [indices], a gather
    local function unpad(x, what, n)
      return nn.op(cx, { name = P .. ".unpad_" .. what, kind = "gather", inputs = { x, idx },
                         outs = { { P .. "." .. what .. "_unpadded", { T, n, hd }, dt } }, saves = { idx },
                         grads = { { bytes = nn.bytes(x.shape, x.dtype), dtype = x.dtype }, "none" } })
    end
    kf = unpad(k, "k", kvh)
    vf = unpad(v, "v", kvh)
    qf = unpad(q, "q", heads)
  else
    -- (TRL's collator hands the kernel cu_seq_lens and max_length: nothing made a layer)
    if d.trl_collator then
      temps = {}
    else
      -- _prepare_from_posids: prepare_fa_kwargs_from_position_ids over the row's position_ids
      local given = cx.run.data_inputs
      local cu, mx = cu_seqlens_from_positions(cx, P, T, d.n, given and given.position_ids)
      temps = { cu, mx }
    end
    qf = nn.view(cx, q, { T, heads, hd }, P .. ".q_flat")
    kf = nn.view(cx, k, { T, kvh, hd }, P .. ".k_flat")
    vf = nn.view(cx, v, { T, kvh, hd }, P .. ".v_flat")
  end
  local lse = { heads, T }
  local out = nn.op_sized(cx, {
    name = P, kind = "attention_flash", inputs = { qf, kf, vf },
    outs = { { P .. ".out", { T, heads, hd }, dt }, { P .. ".softmax_lse", lse, "fp32", no_grad = true } },
    save_outs = { 1, 2 }, saves = { qf, kf, vf }, grad_order = { 1, 2, 3 },
    bwd_workspace = varlen_bwd_workspace(T, d.padded and b or d.n, heads, hd, kvh, dt),
    flops = flops, bwd_flops = 2.5 * flops, dtype = dt, host = "sdpa" })
  local res
  if d.padded then
    -- _pad_input: zeros of the padded size, the output put in at the indices
    res = nn.op(cx, { name = P .. ".pad", kind = "copy", inputs = { out, idx },
                      outs = { { P .. ".padded", { b * L, heads, hd }, dt } }, saves = { idx },
                      grads = { { dtype = dt }, "none" } })
    nn.release(cx, { idx }, P .. ": _flash_attention_forward returns")
  else
    res = out
  end
  nn.release(cx, temps, P .. ": the varlen arguments go")
  return nn.view(cx, res, { b, heads, L, hd }, P .. ".output")
end

return M
