-- recipes/hf_trainer.lua: a transformers TrainingArguments file (JSON or YAML) of a script that
-- calls the HF Trainer itself: read by recipes/trl.lua with TrainingArguments' own defaults.
local T = require "recipes.trl"
return { detect = T.detect_trainer, scenario = T.trainer_scenario }
