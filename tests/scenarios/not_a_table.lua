-- bad input for tests/scenario_tests.sh: the chunk returns a string, not a table (no line)
return "llama2-7b on an h200"
