-- runaway input for tests/scenario_tests.sh: a backtracking pattern runs inside C
-- (string.find), where no instruction hook fires; it must still be stopped
local s = string.find(string.rep("a", 20000), ".-.-.-.-b")
return {}
