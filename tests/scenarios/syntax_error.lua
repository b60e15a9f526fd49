-- bad input for tests/scenario_tests.sh: a missing comma between two fields (line 6)
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048,
               precision = "bf16" optimizer = "adamw" },
}
