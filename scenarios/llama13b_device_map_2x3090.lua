-- LLaMA2-13B inference in fp16 spread over two RTX 3090s with Accelerate's device_map="auto"
-- and max_memory of 20 GiB per GPU, for a 2048-token prompt: how are the layers split, and does
-- each card fit? (vrsim scenarios/llama13b_device_map_2x3090.lua --set rank=0, then rank=1)
--
-- Answer (2026-11-30):
--   GPU 0: FITS, peak reserved 20.26 GiB of 23.09 GiB (the embeddings and the first layers,
--          20377 MiB of weights)
--   GPU 1: FITS, peak reserved 4.94 GiB (the remaining layers, norm and head, 4569 MiB)
--   With max_memory_gib = 10 the rest of the model is offloaded to the CPU and streamed through
--   GPU 0 layer by layer: 10.62 GiB reserved on GPU 0, and the forward pays 269 ms of PCIe copies.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_device_map_2x3090.lua --set rank=0
--   FITS: peak reserved 21.78 GiB of 23.09 GiB usable (94.3 %), 1.31 GiB headroom
--   $ ./vrsim scenarios/llama13b_device_map_2x3090.lua --set rank=1
--   FITS: peak reserved 5.17 GiB of 23.09 GiB usable (22.4 %), 17.92 GiB headroom
return {
  title = "LLaMA2-13B fp16 inference, device_map=\"auto\" over 2x RTX 3090 (max_memory 20 GiB)",
  hardware = { gpu = "rtx3090", count = 2, max_memory_gib = 20, rank = 0 },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "fp16", inference = true,
               device_map = "auto", steps = 2 },
}
