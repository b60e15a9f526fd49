-- a scenario table that carries a userdata (a graph) where data belongs (line 4)
local G = require("vrsim.core").new_graph()
return {
  title = G,
  hardware = { gpu = "h200" },
}
