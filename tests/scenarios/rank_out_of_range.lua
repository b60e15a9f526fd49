-- bad input for tests/scenario_tests.sh: hardware.rank names a GPU the run does not have (line 4):
-- ZeRO-1's partition of rank 9 of 8 would be empty, an optimizer step that updates nothing
return {
  hardware = { gpu = "h200", count = 8, rank = 9 },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 512, precision = "bf16", optimizer = "adamw", strategy = "zero1" },
}
