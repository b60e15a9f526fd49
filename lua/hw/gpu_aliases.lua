-- lua/hw/gpu_aliases.lua: the GPU names people type, beside the catalog (lua/hw/gpus.lua) so
-- that code iterating the catalog never sees them. Plain data.
--
-- A name is matched after lower-casing and dropping spaces, dashes, underscores and the words
-- "nvidia", "geforce", "tesla" ("NVIDIA GeForce RTX 4090" -> "rtx4090"). A string value is the
-- catalog name it means; a list means the name is ambiguous and vrsim asks which one.
return {
  ["3090"] = "rtx3090", ["4090"] = "rtx4090",
  a100 = { "a100_40g", "a100_80g" }, a10040g = "a100_40g", a10080g = "a100_80g",
  a100sxm4 = { "a100_40g", "a100_80g" }, a100pcie = { "a100_40g", "a100_80g" },
  h100 = "h100_sxm", h100sxm = "h100_sxm", h100sxm5 = "h100_sxm", h100pcie = "h100_pcie",
  h200 = "h200", h200sxm = "h200", l40s = "l40s", a10g = "a10g", a10 = "a10g",
  v100 = "v100_32g", v10032g = "v100_32g", a6000 = "rtx_a6000", rtxa6000 = "rtx_a6000",
  rtx3090 = "rtx3090", rtx4090 = "rtx4090",
  -- torch.cuda.get_device_name() spellings
  a100sxm480gb = "a100_80g", a100sxm440gb = "a100_40g", a100pcie80gb = "a100_80g", a100pcie40gb = "a100_40g",
  h10080gbhbm3 = "h100_sxm", h100pcie80gb = "h100_pcie", v100sxm232gb = "v100_32g",
}
