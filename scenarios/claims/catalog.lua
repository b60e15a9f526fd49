-- Claims about hardware, read from the catalog rather than simulated: PCIe 4.0 x16 at about
-- 32 GB/s against NVLink at about 600 GB/s; an RTX 4090 at about $20 per GB of memory against an
-- A100-80GB at about $50. The title carries the catalog's figures for reports/make_reports.sh:
--   pcie4 theoretical and achieved one-way bytes/s, NVLink (A100) both ways, purchase prices.
local links = require "hw.links"
local gpus = require "hw.gpus"
local prices = require "hw.prices"
local function num(x) return type(x) == "number" and x or 0 end
local p4 = links.pcie and links.pcie.gen4_x16 or {}
local a100 = gpus.a100_80g
local p4090 = prices.rtx4090 and prices.rtx4090.purchase or {}
local pa100 = prices.a100_80g and prices.a100_80g.purchase or {}
return {
  title = string.format("pcie4=%.4g,%.4g nvlink_a100=%.4g buy4090=%.0f buya100=%.0f gb4090=%.0f gba100=%.0f rent4090=%.4g renta100=%.4g",
    num(p4.theoretical_bw_bytes_per_s), num(p4.bw_bytes_per_s), 2 * num(a100.nvlink and a100.nvlink.bw_bytes_per_s),
    num(p4090.usd), num(pa100.usd), gpus.rtx4090.memory_bytes / 2^30, a100.memory_bytes / 2^30,
    num(prices.rtx4090 and prices.rtx4090.usd_per_gpu_hour), num(prices.a100_80g and prices.a100_80g.usd_per_gpu_hour)),
  hardware = { gpu = "rtx4090" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
