-- a runaway loop whose every turn raises and catches an error: each instruction costs so much
-- that the instruction limit alone would take half a minute; the scenario's time limit stops it
while true do pcall(error, "again") end
