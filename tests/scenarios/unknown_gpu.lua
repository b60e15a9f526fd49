-- bad input for tests/scenario_tests.sh: no GPU is called "h2000" (line 3)
return {
  hardware = { gpu = "h2000" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048 },
}
