-- bad input for tests/scenario_tests.sh: "micro_bach" is a typo of micro_batch (line 5)
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_bach = 2, seq = 2048 },
}
