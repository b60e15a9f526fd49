-- lua/hw/prices.lua: on-demand rental price per GPU-hour, plain data.  PRICES GO STALE FAST:
-- every entry carries its date and where it came from; update them before trusting `vrsim shop`
-- (see README.md).  usd_per_gpu_hour is the primary figure; `others` lists other quotes seen.
-- purchase (optional): launch MSRP for per-GB comparisons, not used by `shop`.
-- confidence: "provider" (the provider's own page), "secondary" (a third-party article quoting
-- the provider's list price), "recalled" (not re-checked when written: verify first).
return {
  rtx3090 = { usd_per_gpu_hour = 0.39, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod on-demand, as tabulated in Deploybase 'RunPod GPU Pricing: 2026 Comprehensive Pricing Guide', "
      .. "https://deploybase.ai/articles/runpod-gpu-pricing (data as of March 2026)",
    others = { "RunPod spot/interruptible $0.22 (same page)" },
    purchase = { usd = 1499, date = "launch MSRP, September 2020", source = "NVIDIA GeForce RTX 30 Series announcement, 1 Sep 2020 (nvidia.com newsroom)" } },
  rtx4090 = { usd_per_gpu_hour = 0.60, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod on-demand, Deploybase 'RunPod GPU Pricing: 2026', https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "RunPod spot $0.34 (same page)" },
    purchase = { usd = 1599, date = "launch MSRP, October 2022", source = "NVIDIA GeForce RTX 4090 announcement, 20 Sep 2022 (nvidia.com newsroom)" } },
  a100_40g = { usd_per_gpu_hour = 1.48, provider = "Lambda",
    date = "as of May 2026 list price, Lambda", confidence = "secondary",
    source = "Lambda 1x A100 40GB on-demand, quoted in TechBytes 'Serverless GPU Pricing Matrix [2026]' (prices verified "
      .. "2026-05-07 from vendor pages), https://techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026/",
    others = { "AWS p4d.24xlarge $32.77/h for 8 = $4.10 per GPU-hour, us-east-1, Q2 2024 (xither.com cost guide); AWS "
      .. "cut P4 prices in 2025, so this is an upper bound" } },
  a100_80g = { usd_per_gpu_hour = 2.45, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod A100 SXM 80GB on-demand, Deploybase 'RunPod GPU Pricing: 2026', https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "Modal A100 80GB $2.4984/h (serverless, TechBytes 2026-05-07)", "RunPod A100 PCIe 80GB $2.10 (Deploybase, Mar 2026)" } },
  h100_sxm = { usd_per_gpu_hour = 3.78, provider = "Lambda",
    date = "as of May 2026 list price, Lambda", confidence = "secondary",
    source = "Lambda 1x H100 SXM on-demand, TechBytes 'Serverless GPU Pricing Matrix [2026]' (verified 2026-05-07), "
      .. "https://techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026/",
    others = { "RunPod H100 SXM $4.76 (Deploybase, Mar 2026)",
      "AWS p5.48xlarge $98.32/h for 8 = $12.29 per GPU-hour (computespec.pages.dev 'Cloud GPU Pricing Explained', undated; "
        .. "AWS cut P5 prices in 2025)" } },
  h100_pcie = { usd_per_gpu_hour = 2.86, provider = "Lambda",
    date = "as of May 2026 list price, Lambda", confidence = "secondary",
    source = "Lambda 1x H100 PCIe on-demand, TechBytes 'Serverless GPU Pricing Matrix [2026]' (verified 2026-05-07)",
    others = { "RunPod H100 PCIe $3.51 (Deploybase, Mar 2026)" } },
  h200 = { usd_per_gpu_hour = 4.54, provider = "Spheron",
    date = "as of 17 March 2026 list price, Spheron", confidence = "provider",
    source = "Spheron blog 'NVIDIA H200 vs B200 vs GB200: Which GPU to Rent for AI in 2026?' (on-demand pricing as of "
      .. "17 March 2026), https://www.spheron.network/blog/nvidia-h200-vs-b200-vs-gb200",
    others = { "RunPod H200 $6.35 (Deploybase, Mar 2026)", "RunPod serverless H200 $0.00155/s = $5.58/h (docs.runpod.io/serverless/pricing)",
      "Mercatus 'Cloud GPU pricing' May 2026: specialty clouds $3.50-4.50, hyperscalers $4.50-7.00" },
    purchase = { usd = 32000, date = "page read 2026", source = "Hugging Face hardware page 'H200' (MSRP $32k), https://huggingface.co/hardware/h200 -- secondary" } },
  l40s = { usd_per_gpu_hour = 1.40, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod L40S on-demand, Deploybase 'RunPod GPU Pricing: 2026', https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "RunPod L40S $0.79 (Deploybase 'L40S on RunPod', April 2025)", "Modal L40S $1.9512/h (serverless, TechBytes 2026-05-07)" } },
  a10g = { usd_per_gpu_hour = 1.006, provider = "AWS",
    date = "as of June 2026 list price, AWS (us-east-1)", confidence = "secondary",
    source = "AWS g5.xlarge (1x A10G, 4 vCPU, 16 GiB) on-demand Linux us-east-1, quoted in FactualMinds 'Amazon EC2 "
      .. "On-Demand Pricing ... (2026)', https://www.factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/; "
      .. "AWS page https://aws.amazon.com/ec2/pricing/on-demand/" },
  v100_32g = { usd_per_gpu_hour = 3.90, provider = "AWS",
    date = "list price recalled for AWS p3dn.24xlarge (us-east-1), not dated or re-checked", confidence = "recalled",
    source = "AWS p3dn.24xlarge (8x V100-SXM2-32GB) $31.212/h / 8; https://aws.amazon.com/ec2/instance-types/p3/ -- "
      .. "no page supporting this figure was found (2026-11-30): verify before use" },
  l4 = { usd_per_gpu_hour = 0.78, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod L4 on-demand, Deploybase 'RunPod GPU Pricing: 2026 Comprehensive Pricing Guide' (data as of "
      .. "March 2026), https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "RunPod spot $0.44 (same page)",
      "RunPod Serverless flex 'L4, A5000, 3090' $0.00019 per second = $0.684/h, https://docs.runpod.io/serverless/pricing" } },
  rtx5090 = { usd_per_gpu_hour = 1.22, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod RTX 5090 on-demand, Deploybase 'RunPod GPU Pricing: 2026', https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "RunPod spot $0.69 (same page; Deploybase 'RTX 5090 Cloud' quotes $0.69/h)" } },
  b200 = { usd_per_gpu_hour = 10.57, provider = "RunPod",
    date = "as of March 2026 list price, RunPod", confidence = "secondary",
    source = "RunPod B200 on-demand, Deploybase 'RunPod GPU Pricing: 2026', https://deploybase.ai/articles/runpod-gpu-pricing",
    others = { "RunPod spot $5.98 (same page)",
      "RunPod Serverless flex B200 $0.00240 per second = $8.64/h, https://docs.runpod.io/serverless/pricing" } },
  rtx_a5000 = { usd_per_gpu_hour = 0.684, provider = "RunPod",
    date = "RunPod serverless flex rate, page read 2026 (page undated)", confidence = "provider",
    source = "RunPod Serverless pricing, 'L4, A5000, 3090' flex $0.00019 per second (= $0.684/h), "
      .. "https://docs.runpod.io/serverless/pricing; serverless flex is dearer than a RunPod pod of the same GPU" },
  rtx6000_ada = { usd_per_gpu_hour = 1.908, provider = "RunPod",
    date = "RunPod serverless flex rate, page read 2026 (page undated)", confidence = "provider",
    source = "RunPod Serverless pricing, 'L40, L40S, 6000 Ada PRO' flex $0.00053 per second (= $1.908/h), "
      .. "https://docs.runpod.io/serverless/pricing; serverless flex is dearer than a RunPod pod of the same GPU" },
  rtx_a6000 = { usd_per_gpu_hour = 1.224, provider = "RunPod",
    date = "RunPod serverless flex rate, page read 2026 (page undated)", confidence = "provider",
    source = "RunPod Serverless pricing, A6000/A40 flex $0.00034 per second (= $1.224/h), https://docs.runpod.io/serverless/pricing; "
      .. "serverless flex is dearer than a RunPod pod of the same GPU" },

}
