-- lua/hw/gpu_aliases.lua: the GPU names people type, beside the catalog (lua/hw/gpus.lua) so
-- that code iterating the catalog never sees them. Plain data.
--
-- A name is matched after lower-casing and dropping spaces, dashes, underscores and the words
-- "nvidia", "geforce", "tesla" ("NVIDIA GeForce RTX 4090" -> "rtx4090"). A string value is the
-- catalog name it means; a list means the name is ambiguous and vrsim asks which one.
return {
  -- GeForce and workstation cards
  ["3090"] = "rtx3090", ["4090"] = "rtx4090", ["4080"] = "rtx4080", ["5080"] = "rtx5080", ["5090"] = "rtx5090",
  rtx3090 = "rtx3090", rtx4090 = "rtx4090",
  ["4060ti"] = "rtx4060ti_16g", rtx4060ti = "rtx4060ti_16g", ["4060ti16gb"] = "rtx4060ti_16g",
  rtx4060ti16gb = "rtx4060ti_16g", rtx4060ti16g = "rtx4060ti_16g",
  ["4070tisuper"] = "rtx4070ti_super", rtx4070tisuper = "rtx4070ti_super", ["4070tis"] = "rtx4070ti_super",
  rtx4070tis = "rtx4070ti_super",
  a6000 = "rtx_a6000", rtxa6000 = "rtx_a6000", a5000 = "rtx_a5000", rtxa5000 = "rtx_a5000",
  rtx6000ada = "rtx6000_ada", ["6000ada"] = "rtx6000_ada", rtx6000adageneration = "rtx6000_ada",
  -- data-center cards
  a100 = { "a100_40g", "a100_80g" }, a10040g = "a100_40g", a10080g = "a100_80g",
  a10040gb = "a100_40g", a10080gb = "a100_80g",
  a100sxm4 = { "a100_40g", "a100_80g" }, a100pcie = { "a100_40g", "a100_80g" },
  h100 = "h100_sxm", h100sxm = "h100_sxm", h100sxm5 = "h100_sxm", h100pcie = "h100_pcie", h10080gb = "h100_sxm",
  h10096gb = "h100_hbm2e_96g", h100sxm596gb = "h100_hbm2e_96g", h10096gbhbm2e = "h100_hbm2e_96g",
  h200 = "h200", h200sxm = "h200", h200141gb = "h200", l40s = "l40s", a10g = "a10g", a10 = "a10", l4 = "l4", t4 = "t4",
  v100 = { "v100_16g", "v100_32g" }, v10016g = "v100_16g", v10032g = "v100_32g",
  v10016gb = "v100_16g", v10032gb = "v100_32g",
  b200 = "b200", mi300x = "mi300x", amdinstinctmi300x = "mi300x", instinctmi300x = "mi300x",
  -- torch.cuda.get_device_name() spellings
  a100sxm480gb = "a100_80g", a100sxm440gb = "a100_40g", a100pcie80gb = "a100_80g", a100pcie40gb = "a100_40g",
  h10080gbhbm3 = "h100_sxm", h100pcie80gb = "h100_pcie", v100sxm232gb = "v100_32g", v100sxm216gb = "v100_16g",
  rtx4070tisuper16gb = "rtx4070ti_super",
}
