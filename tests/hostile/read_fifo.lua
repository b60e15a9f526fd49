-- reads fifo.json, a named pipe test_hostile.sh makes here: fopen would wait for a writer
-- forever; vrsim must refuse a file that is not a regular file
return {
  title = require("vrsim.core").read_config("fifo.json").x,
  hardware = { gpu = "h200" },
}
