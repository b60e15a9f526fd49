-- a runaway loop that catches the instruction limit's error each time: the limit
-- must stop it all the same
while true do pcall(function() while true do end end) end
