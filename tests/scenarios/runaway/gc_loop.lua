-- runaway input for tests/scenario_tests.sh: an endless loop in a __gc finalizer, which Lua
-- runs with debug hooks off (during a collection or when the state is closed)
setmetatable({}, { __gc = function() while true do end end })
return {}
