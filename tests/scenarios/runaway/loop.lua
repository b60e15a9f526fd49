-- runaway input for tests/scenario_tests.sh: an endless loop must stop at the instruction limit
while true do end
return {}
