-- bad input for tests/scenario_tests.sh: a negative micro-batch (line 5)
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = -4, seq = 2048 },
}
