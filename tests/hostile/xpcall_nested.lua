-- nested pcall/xpcall and coroutines that each swallow the instruction limit's error
local function spin() while true do end end
while true do
  pcall(function()
    while true do
      xpcall(spin, function() while true do pcall(spin) end end)
      local co = coroutine.create(function() while true do pcall(spin) end end)
      coroutine.resume(co)
    end
  end)
end
