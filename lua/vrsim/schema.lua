-- schema.lua: the fields a scenario may set (SCHEMA, CHOICES, and the fields each model module
-- adds for its arch), every value checked against them, and --set overrides parsed
-- ("micro_batch=4", "training.seq=4096", "gpu=a100_80g"). An unknown field is an error that
-- names the scenario's file and line and suggests the closest valid name.
local unmodelled = require "vrsim.unmodelled"
local names = require "vrsim.names"
local closest, keys = names.closest, names.keys
local ordered_keys, shown = names.ordered_keys, names.shown

local M = {}

-- section -> field -> { type, default, check, help }
local SCHEMA = {
  title = "string",
  notes = "list", -- lines the report shows as notes (a trainer config's reader: what it did not read)
  hardware = {
    gpu = { "string", "h200", "catalog name (vrsim gpus)" },
    count = { "integer", 1, "data-parallel GPUs (symmetric ranks, simulated once)" },
    gpus_per_node = { "integer", 8, "GPUs in one node (links inside a node are NVLink/PCIe)" },
    rank = { "index", 0, "which rank to simulate when ranks differ (ZeRO-1 partitions, device_map)" },
    max_memory_gib = { "number", nil, "device_map: memory Accelerate may fill on each GPU (max_memory)" },
    interconnect = { "string", "auto", "auto, nvlink or pcie: the link collectives run on" },
    contention = { "boolean", true, "compute kernels that overlap a collective run longer by the card's own contention figure (lua/hw/calibrated/<gpu>_contention.lua: measured, or published with its source), where the card has one; false runs them as if alone (a what-if)" },
    nvlink_bridge = { "boolean", false, "two cards sold without NVLink (RTX 3090/A5000/A6000, H100 PCIe) have a 2-way NVLink bridge fitted; without it they talk over PCIe" },
    network = { "string", "ib_ndr", "link between nodes (lua/hw/links.lua network): ib_hdr, ib_ndr, roce_400g, ..." },
    nics_per_node = { "integer", nil, "network ports (of hardware.network) per node, rail-optimised [one per GPU, as DGX/HGX]" },
    host = { "string", nil, "host config from lua/hw/hosts.lua (host RAM for offload)" },
    pcie = { "string", nil, "the GPU's host link, a key of lua/hw/links.lua pcie (gen3_x16, gen4_x8, gen4_x16, gen5_x16): a slot or riser below the card's own [the card's own]" },
    host_dispatch_scale = { "number", 1, "the host's CPU time per op (PyTorch dispatch, launches) as a multiple of the calibration host's (lua/hw/host_speed.lua): 1.5 = 1.5x slower" },
    host_classes = { "table", nil, "the run's host's own host time per op of named op classes, as measure_host_classes.py times them there: { conv = { fwd_us = 50.1, bwd_us = 91.3 }, ... } (its keys: hardware.host_classes below); the classes not named take host_dispatch_scale" },
    host_optim = { "table", nil, "the run's host's own host time per parameter tensor of the optimizer step (the run's optimizer implementation and parameter dtype) and of zero_grad(set_to_none=True), as measure_optim_host.py times them there (per_tensor_us): { step_tensor_us = 15.97, zero_grad_tensor_us = 0.38 } (either or both; a figure not given takes host_dispatch_scale)" },
    memory_fraction = { "number", nil, "torch.cuda.set_per_process_memory_fraction" },
    capacity_gib = { "number", nil, "pretend the card has this much memory (GiB)" },
    capacity_mib = { "number", nil, "the same in MiB" },
  },
  model = {
    arch = { "string", nil, "model family: llama2 (named Llama-2 shapes), llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, olmo2, mixtral, qwen3_moe, gpt_oss, deepseek_v2, deepseek_v3 (from model.config), sdxl, sd (Stable Diffusion 1.x / 2.x, from model.config), flux (Flux.1, from model.config), sd3 (Stable Diffusion 3 / 3.5, from model.config)" },
    variant = { "string", nil, "model-specific variant (sdxl: sdxl-base-unet, ...)" },
    size = { "string", "7b", "7b, 13b, 70b, or NAME-lN (cut to N layers)" },
    layers = { "integer", nil, "override the layer count" },
    hidden = { "integer", nil, "hidden size (beside model.config: replaces its hidden_size, as editing config.json)" },
    intermediate = { "integer", nil, "MLP size (beside model.config: its intermediate_size)" },
    heads = { "integer", nil, "attention heads (beside model.config: its num_attention_heads)" },
    kv_heads = { "integer", nil, "key/value heads, grouped-query attention (beside model.config: its num_key_value_heads)" },
    vocab = { "integer", nil, "vocabulary size (model.config's vocab_size; 32000 for the Llama-2 shapes)" },
    config = { "config", nil, "a Hugging Face config.json (a path beside the scenario, or the object as a table): the family and every size" },
    use_cache = { "boolean", nil, "transformers' config.use_cache (default: model.config's use_cache, true where it has none): a training forward without checkpointing keeps each layer's keys and values in a DynamicCache (torch.cat copies onto an empty cache, held until the output is dropped); false: none, as the HF Trainer sets it (TrainingArguments.use_cache, False by default) and as torchtitan's and torchtune's own models have none; with checkpointing transformers turns it off either way" },
    repeat_kv = { "boolean", false, "the attention repeats grouped keys and values to every query head before SDPA, as torchtitan's Llama does (models/llama/model.py repeat_kv), where transformers hands them to SDPA grouped (enable_gqa); Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE" },
    code = { "string", "transformers", "the modelling code whose modules run the layers: transformers (the family's transformers classes) or torchtune (torchtune 0.6.1's TransformerDecoder of a Llama, Mistral or Qwen2 checkpoint, as its recipes build it: its RMSNorm, F.rms_norm over x.float() with the scale in the model's dtype, ATen's composite path, which keeps the fp32 normalized input where the scale trains; Llama's and Mistral's RotaryPositionalEmbeddings, fp32 on interleaved pairs from a (max_position_embeddings, head_dim / 2, 2) fp32 cache made with the model, Qwen2's rotate_half in the model's dtype from a (max_position_embeddings, 2 x head_dim) fp32 cache; no sliding window; grouped keys and values expanded to every query head, as model.repeat_kv; models/blocks/torchtune.lua)" },
    hub_kernels = { "string", "auto", "transformers' hub kernels (kernelize: RMSNorm -> kernels-community LigerRMSNorm, apply_rotary_pos_emb -> kernels-community rotary): auto (off, as every record and from_config run, with a note naming the kernels the family would get), on (as a from_pretrained that reaches the Hub trains), off" },
  },
  training = {
    micro_batch = { "integer", 1, "sequences per step per GPU" },
    seq = { "integer", 2048, "tokens per sequence" },
    resolution = { "integer", 1024, "image side in pixels (diffusion models)" },
    precision = { "string", "bf16", "fp32, amp_bf16, amp_fp16, bf16, fp16, lora_bf16, lora_fp16, mp_fp32 (FSDP2: fp32 shards, bf16 compute)" },
    optimizer = { "string", "adamw", "adamw, adam, sgd, adamw8bit, adafactor (transformers' Adafactor: factored second moments), lion (lion-pytorch), lion_32bit (bitsandbytes' Lion), or bitsandbytes' paged ones as transformers names them (state in unified memory outside the allocator, paged to the host under pressure): paged_adamw_8bit, paged_adamw_32bit, paged_adamw, paged_lion_8bit, paged_lion_32bit" },
    optimizer_impl = { "string", "foreach", "foreach, fused or forloop" },
    attention = { "string", "sdpa", "sdpa (PyTorch's pick), flash, mem_efficient, cudnn, eager, or flex (transformers' attn_implementation=\"flex_attention\": torch.compile(flex_attention) on a causal BlockMask, or one of training.data's padding or sequences; torchtune's on a packed batch's document BlockMask; bf16, the Llama-architecture families)" },
    attention_mask = { "string", "none", "the mask the batch hands the model: none (the model makes its own, causal or from training.data) or block_diagonal (a (micro_batch, 1, seq, seq) additive mask in the compute dtype, made by the collator and moved to the GPU with the batch, which transformers takes as it is: LLaMA-Factory's neat_packing under sdpa or eager; SDPA then runs its masked kernel over every block)" },
    checkpointing = { "boolean", false, "gradient checkpointing per decoder layer" },
    checkpoint_every = { "integer", 1, "checkpoint every k-th layer only" },
    checkpoint_impl = { "string", "transformers", "what torch.compile makes of a checkpointed decoder layer: transformers (a transformers model's layers under torch.utils.checkpoint, by gradient_checkpointing_enable as HF Trainer, TRL and axolotl apply it, or by torch's checkpoint_wrapper: the layer's forward writes transformers' CompileableContextVar, a side effect dynamo refuses inside the checkpoint, so under training.compile the checkpointed layers graph-break and run eager) or wrapper (the checkpointed layer compiles whole with its checkpoint: torchtitan's, torchtune's and fms-fsdp's own models under their checkpoint wrappers, or accelerate's regional compilation under FSDP2, which sets torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint)" },
    checkpoint_reentrant = { "boolean", false, "torch.utils.checkpoint(use_reentrant=True), as peft's QLoRA examples and fsdp_qlora's --reentrant_checkpointing run it: the region's forward runs under no_grad, so what an autograd Function keeps outside save_for_backward (bitsandbytes' MatMul4Bit before 0.43.2: its input) is kept only from the recomputation on; vrsim's checkpoint is otherwise the non-reentrant one (a note says so)" },
    checkpoint_scope = { "string", "layer", "layer (whole decoder layers), attention (selective) or op (torchtitan's op-level policy: matmuls and attention saved, every second mm recomputed)" },
    inference = { "boolean", false, "forward only under torch.no_grad(): no backward, no optimizer" },
    quant = { "string", "none", "quantized base weights: none, nf4 (bitsandbytes' QLoRA 4-bit), int8 (LLM.int8) or torchao_nf4 (torchao's NF4Tensor, torchtune's QLoRA builders; with compile = true)" },
    quant_double = { "boolean", true, "nf4's double quantization (bnb_4bit_use_double_quant, bitsandbytes' compress_statistics): the 64-weight blocks' absmax stored as uint8 with an fp32 absmax per 256 of them, where false keeps one fp32 absmax a block (litgpt's --quantize bnb.nf4; bnb.nf4-dq is true)" },
    bitsandbytes = { "string", "0.50.2", "the bitsandbytes release the run used, 0.41.0 to 0.50.2 (lua/strategies/bnb_version.lua): before 0.43.2 MatMul4Bit keeps each 4-bit matmul's input until backward; before 0.50.0 its forward is dequantize_4bit then F.linear (no fused gemm_4bit); before 0.44.0 the 8-bit optimizers keep one absmax per 2048 elements (256 after); LLM.int8 (quant = int8) from 0.45.0" },
    kbit_prepare = { "string", "none", "what the QLoRA program does to a 4-bit model's other parameters before training (lua/strategies/kbit.lua), each under the Trainer's bf16 autocast: none (nothing; no autocast), peft (prepare_model_for_kbit_training: every non-4-bit parameter to fp32, embeddings, norms and lm_head included, then empty_cache and checkpointing on), trl_0.13 (TRL 0.12/0.13's SFTTrainer, December 2024: that, then peft_module_casting_to_bf16 puts the embedding and lm_head back in bf16, the norms fp32), trl (TRL 1.16's SFTTrainer: no fp32 casts; the adapters cast to bf16), axolotl (_configure_embedding_dtypes: embeddings and norms to fp32, prepare_model_for_kbit_training, then back to bf16; fp32 adapters)" },
    quant_storage = { "string", "auto", "bnb_4bit_quant_storage, the dtype the packed 4-bit weights are stored in: auto (the parameters' dtype under fsdp2 and zero3, as the FSDP-QLoRA and ZeRO-3 QLoRA guides set it, so the packed weights shard; uint8, transformers' default, otherwise), uint8, bf16, fp16 or fp32" },
    device_map = { "string", "none", "inference: none, or auto (Accelerate: layers across hardware.count GPUs, then the CPU)" },
    steps = { "integer", 4, "training steps to simulate (step 0 creates optimizer state)" },
    build_layers_once = { "boolean", true, "build one decoder layer in Lua and carry it over to the layers declared alike, where the check allows (lua/vrsim/replicate.lua); false builds every layer in Lua: the same graph, slower" },
    grad_accum = { "integer", 1, "micro-batches per optimizer step (gradient accumulation)" },
    build = { "string", "direct", "direct: the weights made in their dtype, as from_pretrained(torch_dtype=...) loads them; cast: built in fp32 then .to(dtype), as from_config does" },
    lora = { "table", nil, "peft's LoraConfig: { r = 16, targets = \"all-linear\" } (its keys: training.lora below)" },
    strategy = { "string", "none", "none, ddp, zero1, zero2, zero3 or fsdp2 (data parallel over hardware.count)" },
    parallel = { "table", nil, "the device mesh, torchtitan's degrees: { dp_replicate, dp_shard, tp, cp, pp, ep, ... } (its keys: training.parallel below)" },
    cpu_threads = { "integer", 8, "intra-op CPU threads per rank (OMP_NUM_THREADS) for optimizer steps on the host" },
    empty_cache_after_build = { "boolean", false, "torch.cuda.empty_cache() once the model and optimizer are built" },
    zero = { "table", nil, "DeepSpeed/FSDP2/DDP knobs: { offload_optimizer = \"cpu\" } (its keys: training.zero below)" },
    deepspeed = { "string", nil, "a DeepSpeed JSON config beside the scenario (zero_optimization is read)" },
    activation_offload = { "boolean", false, "torchtune's enable_activation_offloading (OffloadActivations): the decoder's saved activations (with checkpointing: each layer's input) copied to pinned host memory in forward and back in backward, on their own streams" },
    optimizer_in_backward = { "boolean", false, "torchtune's optimizer_in_bwd: each parameter's optimizer step and zero_grad run in backward as soon as its gradient is complete (one gradient alive at a time instead of all)" },
    data = { "table", nil, "variable-length data: { lengths = \"lengths.txt\" (or a list, or JSONL with length_field), batching = \"pad\", \"padding_free\", TRL's packing \"bfd\" / \"bfd_split\" with pack_length = max_length, axolotl's \"multipack\" (pack_length = micro_batch_size x sequence_len, flash attention), or torchtune's packed data set \"torchtune\" (pack_length = max_seq_len, attention = flex; lengths optional), order = \"shuffle\" or \"given\", batch = \"worst\" or \"p50\"... }: the batch the run meets (lua/strategies/data.lua)" },
    generate = { "table", nil, "inference: transformers' model.generate with its DynamicCache, greedy: { prompt = N, max_new_tokens = M, batch = B }: the prompt's prefill, then one forward a token, the cache grown by torch.cat (its keys: training.generate below)" },
    dpo = { "table", nil, "TRL's DPOTrainer: { prompt_length = N, completion_length = M, max_length = 1024, precompute_ref_log_probs = false }: chosen and rejected in one batch of 2 x micro_batch rows, the reference model's forward under no_grad (its keys: training.dpo below)" },
    float8 = { "table", nil, "torchao's float8 training (convert_to_float8_training, torchtitan's filter): { recipe = \"tensorwise\", fsdp_float8_all_gather = false } (its keys: training.float8 below; sm89 and newer)" },
    compile = { "compile", false, "torch.compile (mode \"default\"): true, or { scope = \"layer\", mode = \"default\", fullgraph = false, loss = true }: each decoder layer one graph (loss = false: torchtune's chunked loss left eager, not compiled with the layers), as torchtitan and torchtune compile them; scope = \"model\" (--set compile=model): torch.compile(model) of a Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo 2, Gemma 2 or Gemma 3 decoder with the config's use_cache = true (the HF Trainer's torch_compile, which sets it False, is refused without checkpointing), one graph from the embedding through ForCausalLMLoss: the layers partitioned as with scope \"layer\", the final norm and lm_head one more region, the loss as training.compile_loss saves it; with checkpointing (the Trainer's gradient_checkpointing) each layer runs eager, checkpointed, its SDPA taking the traced (batch, 1, seq, seq) boolean mask (bf16 weights or LoRA with dropout 0; MoE, quantized bases, float8, sharding, tensor, context and pipeline parallelism and inference refused); for Flux, each FluxTransformerBlock and FluxSingleTransformerBlock, as diffusers' compile_repeated_blocks compiles them, for SD3 each JointTransformerBlock, for the UNets (SDXL, SD 1.5) each BasicTransformerBlock (under checkpointing inside diffusers' checkpoint); AOTAutograd's min-cut partitioner decides what backward reads from forward and what it recomputes, Inductor's fused kernels allocate only their outputs (lua/strategies/compile.lua)" },
    torchtune = { "string", "0.6.1", "torchtune's release with model.code = \"torchtune\", 0.4.0 to 0.6.1 (models/blocks/torchtune.lua): before 0.5.0 its RMSNorm is Python, x.float() normalized then .type_as(x) * scale, whose scale gradient keeps the bf16 normalized input as transformers' LlamaRMSNorm does (torchtune's README table of optimization flags was measured so, in November 2024); from 0.5.0 F.rms_norm over x.float() (ATen's composite), which keeps the fp32 normalized input; 0.4.0's attention expands the keys and values before their transpose, the same bytes as 0.5.0's, which vrsim runs" },
    transformers = { "string", "5.25.0", "the transformers release the run used, 4.36.0 to 5.25.x (lua/strategies/tf_version.lua); it changes the causal-LM loss with training.loss = \"full\": before 4.46.0 (Mistral: 4.48.0) the model's forward upcasts the logits to fp32 and drops the bf16 ones, before 4.49.0 the loss makes a second fp32 copy, logits[..., :-1, :].contiguous(), whose backward fills a full-size fp32 gradient; before 5.19.0 the rotary tables' freqs are a matmul (inv_freq_expanded @ position_ids_expanded: the step's first cuBLAS call, which makes the cuBLAS workspace, its fp32 operands alive until the rotary returns), from 5.19.0 a broadcast product whose operands are freed at once, the workspace made by the first layer's GEMM; a family newer than the release is refused; the rest of the model is simulated as 5.25 runs it (a note says so)" },
    framework = { "string", "transformers", "the program that trains the model: transformers (the model's transformers classes under a Trainer, TRL or torchtune's recipes as the other fields say) or litgpt (litgpt 0.5's finetune/lora.py: its head in 128-token chunks, which Fabric's convert_output hands the loop as fp32 copies, an fp32 cross-entropy per chunk, and under quant = nf4 lm_head 4-bit too, bitsandbytes' StableEmbedding in place of the embedding after the optimizer is made, bnb.optim.PagedAdamW; lua/strategies/litgpt.lua)" },
    compile_loss = { "boolean", false, "the full cross-entropy compiled alone as its own graph, torchtitan's compile.components \"loss\" (torch.compile of build_cross_entropy_loss's loss_fn: cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)), the labels shifted by the dataloader): AOTAutograd saves the logits as they came and two fp32 values a row, no fp32 copy or log-probabilities (lua/vrsim/ops/loss.lua); with training.loss = \"full\" (torchtune's chunked loss is compiled with training.compile)" },
    loss = { "string", "full", "cross-entropy of a language model: full (transformers: the whole fp32 logits), liger_fused (Liger's fused linear cross-entropy: chunks, gradients in forward), chunked (torchtune's CEWithChunkedOutputLoss: the head and the fp32 upcast in 8 chunks) or cce (Apple's Cut Cross-Entropy: no logits, the LSE in forward, logit blocks recomputed in backward)" },
  },
  allocator = {
    conf = { "string", "", "PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True" },
    kind = { "string", "caching", "caching (PyTorch's) or ideal (no fragmentation)" },
  },
}

local CHOICES = {
  precision = { fp32 = 1, amp_bf16 = 1, amp_fp16 = 1, bf16 = 1, fp16 = 1, lora_bf16 = 1, lora_fp16 = 1,
                mp_fp32 = 1 },
  optimizer = { adamw = 1, adam = 1, sgd = 1, adamw8bit = 1, adafactor = 1, lion = 1, lion_32bit = 1,
                paged_adamw_8bit = 1, paged_adamw_32bit = 1, paged_adamw = 1, paged_lion_8bit = 1, paged_lion_32bit = 1 },
  quant = { none = 1, nf4 = 1, int8 = 1, torchao_nf4 = 1 },
  quant_storage = { auto = 1, uint8 = 1, bf16 = 1, fp16 = 1, fp32 = 1 },
  kbit_prepare = { none = 1, peft = 1, ["trl_0.13"] = 1, trl = 1, axolotl = 1 },
  device_map = { none = 1, auto = 1 },
  optimizer_impl = { foreach = 1, fused = 1, forloop = 1 },
  attention = { sdpa = 1, eager = 1, flash = 1, mem_efficient = 1, cudnn = 1, flex = 1 },
  attention_mask = { none = 1, block_diagonal = 1 },
  checkpoint_scope = { layer = 1, attention = 1, op = 1 },
  checkpoint_impl = { transformers = 1, wrapper = 1 },
  build = { cast = 1, direct = 1 },
  hub_kernels = { auto = 1, on = 1, off = 1 },
  code = { transformers = 1, torchtune = 1 },
  kind = { caching = 1, ideal = 1 },
  strategy = { none = 1, ddp = 1, zero1 = 1, zero2 = 1, zero3 = 1, fsdp2 = 1 },
  interconnect = { auto = 1, nvlink = 1, pcie = 1 },
  arch = { llama2 = 1, llama = 1, mistral = 1, qwen2 = 1, qwen3 = 1, gemma2 = 1, gemma3 = 1, phi3 = 1, olmo2 = 1, mixtral = 1, qwen3_moe = 1, gpt_oss = 1,
          deepseek_v2 = 1, deepseek_v3 = 1, sdxl = 1, sd = 1, flux = 1, sd3 = 1 },
  loss = { full = 1, liger_fused = 1, chunked = 1, cce = 1 },
  framework = { transformers = 1, litgpt = 1 },
}

-- The line of the scenario where `field =` first appears (after `section` when given).
local function line_of(src, field, section)
  local start = 1
  if section then
    local s = src:find("%f[%w_]" .. section .. "%s*=")
    if s then start = s end
  end
  local pos = src:find("%f[%w_]" .. field .. "%s*=", start) or src:find("%f[%w_]" .. field .. "%f[^%w_]", start)
  if not pos then return nil end
  local _, n = src:sub(1, pos):gsub("\n", "")
  return n + 1
end

local function fail(ctx, field, section, msg)
  local line = ctx.src and line_of(ctx.src, field, section)
  error(("%s:%s: %s"):format(ctx.file, line or "?", msg), 0)
end

-- The error for a training.zero key vrsim does not model (nil when it knows it).
local function unknown_zero_knob(k)
  local known = require("strategies.dp").DEFAULTS
  if type(k) == "string" and known[k] ~= nil then return nil end
  local r = unmodelled.refusal("training.zero." .. tostring(k), k)
  if r then return r end
  local s = type(k) == "string" and closest(k, keys(known))
  return ("training.zero.%s is not a knob vrsim knows%s (one of: %s)"):format(tostring(k),
    s and ("; did you mean '" .. s .. "'?") or "", table.concat(keys(known), ", "))
end

-- Upper bounds: a typo (an extra zero, a wrapped integer) must not run for hours or overflow a
-- byte count. Far beyond any real run.
local MAX = { micro_batch = 65536, seq = 1 << 26, steps = 1000, grad_accum = 4096,
              resolution = 32768, layers = 1024, hidden = 1 << 20, intermediate = 1 << 22,
              heads = 4096, kv_heads = 4096, vocab = 1 << 24, count = 65536, gpus_per_node = 1024,
              checkpoint_every = 1024, cpu_threads = 4096 }

-- Ranges of the number fields (lo exclusive, hi inclusive): a capacity past any card would
-- overflow the byte counts, and one that leaves no byte is not "unlimited".
local NUM_RANGE = { memory_fraction = { 0, 1 }, capacity_gib = { 0, 1 << 20 },
                    capacity_mib = { 0, 1 << 30 }, max_memory_gib = { 0, 1 << 20 } }


local function check_value(ctx, section, field, spec, v, origin, choices)
  local ty = spec[1]
  local where = section .. "." .. field
  local bad = function(m)
    if origin then error(origin .. ": " .. m, 0) end
    fail(ctx, field, section, m)
  end
  if ty == "index" or ty == "integer" then
    local lo, hi = ty == "index" and 0 or 1, MAX[field] or math.maxinteger
    local range = ("an integer in [%d, %d]"):format(lo, hi)
    if type(v) ~= "number" then bad(("%s must be %s, not %s"):format(where, range, shown(v))) end
    local i = math.tointeger(v)
    if not i and v == v and v ~= math.floor(v) then
      bad(("%s must be %s, not %s"):format(where, range, shown(v)))
    end
    if not i or i < lo or i > hi then
      bad(("%s = %s is out of range: must be %s"):format(where, shown(v), range))
    end
    v = i
  elseif ty == "number" then
    if type(v) ~= "number" then bad(("%s must be a number, not %s"):format(where, shown(v))) end
    local r = NUM_RANGE[field]
    local lo, hi = r and r[1] or 0, r and r[2] or 1e18
    if not (v > lo and v <= hi) then
      bad(("%s = %s is out of range: must be a finite number in (%s, %s]"):format(where, shown(v),
          shown(lo), shown(hi)))
    end
  elseif ty == "boolean" then
    if type(v) ~= "boolean" then bad(("%s must be true or false"):format(where)) end
  elseif ty == "string" then
    if type(v) ~= "string" then bad(("%s must be a string"):format(where)) end
    local ch = (choices or CHOICES)[field]
    if where == "training.bitsandbytes" then
      local m = require("strategies.bnb_version").bad(v)
      if m then bad(m) end
    end
    if where == "training.transformers" then
      local m = require("strategies.tf_version").bad(v)
      if m then bad(m) end
    end
    if ch and not ch[v] then
      local s = closest(v, keys(ch))
      bad(unmodelled.refusal(("%s = \"%s\""):format(where, v), v)
          or ("%s: unknown value '%s' (one of: %s)%s"):format(where, v, table.concat(keys(ch), ", "),
          s and ("; did you mean '" .. s .. "'?") or ""))
    end
  elseif ty == "table" then
    if type(v) ~= "table" then bad(("%s must be a table"):format(where)) end
    -- its classes are the calibration profile's, each { fwd_us, bwd_us } (lua/hw/host_speed.lua)
    if where == "hardware.host_classes" then
      local m = require("hw.host_speed").bad_classes(v)
      if m then bad(m) end
    end
    -- { step_tensor_us, zero_grad_tensor_us } (lua/hw/host_speed.lua)
    if where == "hardware.host_optim" then
      local m = require("hw.host_speed").bad_optim(v)
      if m then bad(m) end
    end
  elseif ty == "compile" then
    -- its keys are strategies/compile.lua's to check
    if type(v) ~= "boolean" and type(v) ~= "table" then bad(("%s must be true, false or a table"):format(where)) end
  elseif ty == "config" then
    if type(v) ~= "string" and type(v) ~= "table" then
      bad(("%s must be a config.json path or a config table"):format(where))
    end
  end
  return v
end

-- A value for section.field from a source other than the scenario or --set (a DeepSpeed JSON
-- config, a validation record), checked with the same bounds: the value as the field holds it,
-- or an error that starts with origin ("ds.json: gradient_accumulation_steps").
function M.check_field(section, field, v, origin)
  return check_value(nil, section, field, SCHEMA[section][field], v, origin)
end

-- A value of training.zero.k whose default is a number (a bucket size, a threshold): a finite
-- count in [0, 1e15], or DeepSpeed's "auto". Returns the error message, or nil when v is fine
-- (flags and placements are checked by strategies/dp.lua).
local function bad_zero_value(k, v)
  local def = require("strategies.dp").DEFAULTS[k]
  if type(def) ~= "number" or v == "auto" then return nil end
  if type(v) ~= "number" or not (v >= 0 and v <= 1e15) then
    return ("training.zero.%s = %s is out of range: must be a finite number in [0, 1e15]"):format(k, shown(v))
  end
  return nil
end
M.bad_zero_value = bad_zero_value

-- A Hugging Face config's sizes (config.json or a table), checked before any model is built
-- from them: integers in the range of the scenario field they set, so a size cannot wrap a byte
-- count (an intermediate_size of 2^52 times a hidden size of 4096 is 2^64: zero bytes).
local HF_SIZES = { hidden_size = "hidden", intermediate_size = "intermediate",
                   num_attention_heads = "heads", num_key_value_heads = "kv_heads",
                   num_hidden_layers = "layers", vocab_size = "vocab", head_dim = "hidden",
                   max_position_embeddings = "seq", sliding_window = "seq" }
function M.check_hf_config(c, name)
  if type(c) ~= "table" then return end
  for k, f in pairs(HF_SIZES) do
    local v = c[k]
    if v ~= nil and v ~= false then
      local i = math.tointeger(v)
      if not i or i < 1 or i > MAX[f] then
        error(("%s: %s = %s is out of range: must be an integer in [1, %d]"):format(name, k,
              shown(v), MAX[f]), 0)
      end
    end
  end
end

-- Converts a --set value string to the field's type.
local function parse_set_value(spec, raw, origin)
  local ty = spec[1]
  if ty == "integer" or ty == "number" or ty == "index" then
    local n = tonumber(raw)
    if not n then error(("%s: '%s' is not a number"):format(origin, raw), 0) end
    return n
  elseif ty == "boolean" then
    if raw == "true" or raw == "1" or raw == "yes" then return true end
    if raw == "false" or raw == "0" or raw == "no" then return false end
    error(("%s: '%s' is not true or false"):format(origin, raw), 0)
  elseif ty == "table" then
    error(("%s: tables cannot be set from the command line"):format(origin), 0)
  elseif ty == "compile" then
    -- training.compile: a flag, or a scope for short (compile=layer)
    if raw == "true" or raw == "false" then return raw == "true" end
    if raw == "layer" or raw == "model" then return { scope = raw } end
    error(("%s: '%s' is not true, false, layer or model"):format(origin, raw), 0)
  end
  return raw
end

-- Every field name -> its sections (for "micro_batch=4" without a section).
local function field_index(schema)
  local idx = {}
  for sec, fields in pairs(schema) do
    if type(fields) == "table" then
      for f in pairs(fields) do
        idx[f] = idx[f] or {}
        table.insert(idx[f], sec)
      end
    end
  end
  return idx
end

-- A model module may add fields to any section (module.schema = { training = { name = spec } })
-- and choices (module.choices = { field = { value = 1 } }): read by that arch's runs only, so a
-- run of another arch refuses them (by arch, in the order of CHOICES.arch's names).
local function arch_modules()
  local r = {}
  for _, arch in ipairs(keys(CHOICES.arch)) do
    local ok, mod = pcall(require, "models." .. arch)
    if ok and type(mod) == "table" and (type(mod.schema) == "table" or type(mod.choices) == "table") then
      r[#r + 1] = { arch = arch, schema = mod.schema or {}, choices = mod.choices or {} }
    end
  end
  return r
end

-- The archs whose modules add section.field ("sd or sdxl"), or nil.
local function field_arch(section, field)
  local r = {}
  for _, m in ipairs(arch_modules()) do
    if type(m.schema[section]) == "table" and m.schema[section][field] then r[#r + 1] = m.arch end
  end
  return r[1] and table.concat(r, " or ") or nil
end

-- The arch a scenario and its --set name (its model module's fields apply), or nil when the
-- scenario names none vrsim knows (the checker then refuses the arch itself).
local function arch_of(scn, sets)
  local arch = type(scn.model) == "table" and scn.model.arch or "llama2"
  for _, s in ipairs(sets) do arch = s:match("^model%.arch=(.*)$") or s:match("^arch=(.*)$") or arch end
  if type(arch) ~= "string" or not CHOICES.arch[arch] then return nil end
  return arch
end

-- The schema and choices of a run of `arch` (SCHEMA and CHOICES with that arch's module's fields),
-- made once per arch; SCHEMA and CHOICES themselves never change.
local MERGED = {}
local function schema_of(arch)
  local key = arch or "?"
  if MERGED[key] then return MERGED[key].schema, MERGED[key].choices end
  local schema, choices = {}, {}
  for sec, fields in pairs(SCHEMA) do
    if type(fields) == "table" then
      schema[sec] = {}
      for f, spec in pairs(fields) do schema[sec][f] = spec end
    else
      schema[sec] = fields
    end
  end
  for f, ch in pairs(CHOICES) do choices[f] = ch end
  for _, m in ipairs(arch_modules()) do
    if m.arch == arch then
      for sec, fields in pairs(m.schema) do
        if type(schema[sec]) == "table" then
          for f, spec in pairs(fields) do schema[sec][f] = schema[sec][f] or spec end
        end
      end
      for f, ch in pairs(m.choices) do choices[f] = choices[f] or ch end
    end
  end
  MERGED[key] = { schema = schema, choices = choices }
  return schema, choices
end

-- The message for a field `name` of section `sec` that the run's schema lacks: a thing vrsim
-- knows it does not model, a field of another arch's model, or a misspelling of one of `names`
-- (listed when none is close).
local function unknown_field(sec, name, names, arch)
  local full = sec and (sec .. "." .. tostring(name)) or tostring(name)
  local r = unmodelled.refusal(full, name)
  if r then return r end
  local other = type(name) == "string" and sec and field_arch(sec, name)
  if other then
    return ("%s is read by arch %s only (this run's model.arch is %s)"):format(full, other, tostring(arch))
  end
  local s = closest(name, names)
  return ("unknown field '%s'%s"):format(full, s and ("; did you mean '" .. s .. "'?")
         or (" (fields: " .. table.concat(names, ", ") .. ")"))
end

-- The message for a key of training.lora that peft's LoraConfig as vrsim models it does not
-- take (nil when it is one: lua/strategies/lora.lua FIELDS).
local function unknown_lora_key(k)
  local fields = require("strategies.lora").FIELDS
  if type(k) == "string" and fields[k] then return nil end
  local r = unmodelled.refusal("training.lora." .. tostring(k), k)
  if r then return r end
  local s = closest(k, keys(fields))
  return ("training.lora.%s is not a key vrsim knows%s (one of: %s)"):format(tostring(k),
    s and ("; did you mean '" .. s .. "'?") or "", table.concat(keys(fields), ", "))
end

function M.normalize(scn, sets, file, src)
  local ctx = { file = file, src = src, given = {} } -- given: "section.field" the scenario or --set gave
  local arch = arch_of(scn, sets)
  local schema, choices = schema_of(arch)
  local cfg = {}
  for _, k in ipairs(ordered_keys(scn)) do
    if type(k) ~= "string" or schema[k] == nil then
      local s = type(k) == "string" and closest(k, keys(schema))
      fail(ctx, tostring(k), nil, unmodelled.refusal(tostring(k), k) or ("unknown section '%s'%s"):format(tostring(k),
           s and ("; did you mean '" .. s .. "'?") or " (sections: " .. table.concat(keys(schema), ", ") .. ")"))
    end
  end
  if scn.title ~= nil and type(scn.title) ~= "string" then fail(ctx, "title", nil, "title must be a string") end
  cfg.title = scn.title
  if scn.notes ~= nil then
    if type(scn.notes) ~= "table" then fail(ctx, "notes", nil, "notes must be a list of strings") end
    cfg.notes = {}
    for i, n in ipairs(scn.notes) do cfg.notes[i] = tostring(n) end
  end
  for _, sec in ipairs(keys(schema)) do
    local fields = schema[sec]
    if type(fields) == "table" then
      local given = scn[sec] or {}
      if type(given) ~= "table" then fail(ctx, sec, nil, sec .. " must be a table") end
      cfg[sec] = {}
      for _, f in ipairs(ordered_keys(given)) do
        local v = given[f]
        if not fields[f] then fail(ctx, tostring(f), sec, unknown_field(sec, f, keys(fields), arch)) end
        cfg[sec][f] = check_value(ctx, sec, f, fields[f], v, nil, choices)
        ctx.given[sec .. "." .. f] = true
      end
    end
  end
  local idx = field_index(schema)
  for _, set in ipairs(sets) do
    local key, raw = set:match("^([%w_%.]+)=(.*)$")
    if not key then error(("--set %s: expected key=value"):format(set), 0) end
    local sec3, tbl, sub = key:match("^([%w_]+)%.([%w_]+)%.([%w_]+)$")
    if not sec3 then
      tbl, sub = key:match("^(zero)%.([%w_]+)$")
      if tbl then sec3 = "training" end
      if not tbl then tbl, sub = key:match("^(lora)%.([%w_]+)$"); if tbl then sec3 = "training" end end
      if not tbl then tbl, sub = key:match("^(parallel)%.([%w_]+)$"); if tbl then sec3 = "training" end end
    end
    if sec3 then
      -- a field of a table-valued field: training.zero.offload_optimizer=cpu
      local spec = schema[sec3] and schema[sec3][tbl]
      if not spec or spec[1] ~= "table" then
        error(("--set %s: '%s.%s' is not a table field"):format(set, sec3, tbl), 0)
      end
      local v = raw
      if raw == "true" then v = true elseif raw == "false" then v = false
      elseif tonumber(raw) then v = tonumber(raw) end
      local bad_knob = (tbl == "zero" and unknown_zero_knob(sub)) or (tbl == "lora" and unknown_lora_key(sub))
        or (tbl == "parallel" and require("vrsim.mesh").unknown_key(sub))
      if bad_knob then error(("--set %s: %s"):format(set, bad_knob), 0) end
      cfg[sec3][tbl] = cfg[sec3][tbl] or {}
      cfg[sec3][tbl][sub] = v
      -- hardware.host_optim's keys and bounds are checked as each is set, naming the --set
      if sec3 == "hardware" and tbl == "host_optim" then
        local m = require("hw.host_speed").bad_optim(cfg[sec3][tbl])
        if m then error(("--set %s: %s"):format(set, m), 0) end
      end
      goto continue
    end
    local sec, f = key:match("^([%w_]+)%.([%w_]+)$")
    if not sec then
      f = key
      local secs = idx[f]
      if not secs then
        local all = {}
        for name in pairs(idx) do all[#all + 1] = name end
        table.sort(all)
        local other = field_arch("training", f) and "training" or field_arch("model", f) and "model"
        error(("--set %s: %s"):format(set, unknown_field(other, f, all, arch):gsub(" %(fields: .*%)$", "")), 0)
      end
      if #secs > 1 then
        error(("--set %s: '%s' is in several sections (%s): write section.%s"):format(set, f,
              table.concat(secs, ", "), f), 0)
      end
      sec = secs[1]
    end
    local spec = schema[sec] and schema[sec][f]
    if not spec then
      error(("--set %s: %s"):format(set, type(schema[sec]) == "table" and unknown_field(sec, f, keys(schema[sec]), arch)
            or ("unknown section '" .. sec .. "'")), 0)
    end
    local origin = "--set " .. set
    cfg[sec][f] = check_value(ctx, sec, f, spec, parse_set_value(spec, raw, origin), origin, choices)
    ctx.given[sec .. "." .. f] = true
    ::continue::
  end
  for sec, fields in pairs(schema) do
    if type(fields) == "table" then
      for f, spec in pairs(fields) do
        if cfg[sec][f] == nil then cfg[sec][f] = spec[2] end
      end
    end
  end
  return cfg, ctx
end

-- Raises msg where the value came from: the last --set of one of `keys` (quoted), else the
-- scenario's line of section.field.
local function fail_given(ctx, sets, keys, field, section, msg)
  for i = #sets, 1, -1 do
    local k = sets[i]:match("^([%w_.]+)=")
    for _, want in ipairs(keys) do
      if k == want then error(("--set %s: %s"):format(sets[i], msg), 0) end
    end
  end
  fail(ctx, field, section, msg)
end

-- The archs whose model is a diffusers denoiser and its pipeline (models/<arch>.lua builds the run).
function M.diffusion(arch) return arch == "sdxl" or arch == "sd" or arch == "flux" or arch == "sd3" end

-- The type of scenario field section.field ("integer", "string", "table", ...), or nil when the
-- schema has no such field (lua/vrsim/record.lua asks before it maps a record's field).
function M.field_type(section, field)
  local sec = SCHEMA[section]
  local spec = type(sec) == "table" and sec[field]
  return spec and spec[1] or nil
end

M.SCHEMA, M.CHOICES = SCHEMA, CHOICES
M.fail, M.fail_given = fail, fail_given
M.unknown_zero_knob, M.unknown_lora_key = unknown_zero_knob, unknown_lora_key
M.arch_modules, M.schema_of = arch_modules, schema_of

return M
