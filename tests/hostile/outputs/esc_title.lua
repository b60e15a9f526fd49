-- a title with terminal escapes (set the window title, turn text red) and a byte that is not
-- UTF-8: the terminal gets them escaped, summary.json gets valid UTF-8
return {
  title = "\27]0;pwned\7\27[31mred \255 title",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
