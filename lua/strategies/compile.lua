-- compile.lua: torch.compile (mode "default", PyTorch 2.13) of each decoder layer, as torchtitan
-- and torchtune compile them (training.compile, scope "layer"): every layer is one graph that
-- AOTAutograd traces jointly with its backward and splits in two with
-- torch._functorch.partitioners.min_cut_rematerialization_partition, and that Inductor lowers
-- into fused kernels. What that does to memory, in the order it happens:
--
-- 1. The partitioner (solve_min_cut) chooses what the forward graph saves for backward: a graph
--    of the layer's forward nodes, each split in two (node_in -> node_out, weighted by the bytes
--    saving it costs), with an infinite edge from the source into every node it bans from
--    recomputation and from every node backward needs into the sink; its minimum cut (sim/mincut.c,
--    networkx's minimum_cut) is the saved set. Backward recomputes the nodes on the sink side
--    from the saved ones; a node on neither side of the cut that backward needs is run once, in
--    forward. Here the layer's ops are its nodes, a tensor and its views one node, and "backward
--    needs" is what each op's backward reads (the op's saves).
-- 2. Inductor fuses chains of pointwise ops and reductions into one kernel each: a tensor that
--    only fusible ops of the layer read, that backward does not read from forward (not saved),
--    and that is not the layer's output, is never materialized (G:tensor_fused: no bytes), nor is
--    its recomputed copy or its gradient; a fused op's temporaries (workspaces) are registers.
--    A tensor an extern kernel reads (a GEMM, SDPA) is materialized, as Inductor realizes the
--    inputs of ExternKernels.
-- 3. The region's recomputation (sim/graph.c emit_recompute) runs the partitioner's recomputed
--    ops when backward reaches the layer, and replays the saved ones from forward (G:op_partition).
--
-- What is assumed (docs/techniques.md, "torch.compile"): transformers' Llama-family decoder layers
-- with SDPA compile without graph breaks (transformers 5.x's layers are traceable: no data-
-- dependent branch in a layer's forward), and so do the mixture-of-experts layers with grouped_mm
-- experts (Qwen3-MoE's, Mixtral's, GPT-OSS's, DeepSeek-V3's and -V2's: M.moe_refusal, checked on
-- the CPU); the partitioner's ban heuristics "used far apart" and
-- "long fusible chains" are left out (both only ever ban more recomputation); Inductor's buffer
-- reuse inside a graph is the caching allocator's reuse here (both reuse a freed block of the
-- size asked); its kernels' launches and host costs are the eager ops' (a step-time figure is the
-- eager one's, less the bytes fusion removes: each of Inductor's kernels, M.kernels, moves each
-- materialized tensor it reads or writes once, forward and backward, M.backward_bytes).
local nn = require "vrsim.nn"

local M = {}

-- The partitioner's op classes (get_default_op_list) for vrsim's op kinds: fusible and
-- recomputable (pointwise, views, reductions, casts, copies, gathers: the recomputable_ops list,
-- with softmax and layer norm as Inductor's decompositions make them), compute-intensive
-- (compute_intensive_ops: mm, bmm, addmm, convolution, the flash and memory-efficient SDPA
-- kernels; cuDNN's SDPA is not in its allowlist, which bans it as well), and the rest, banned as
-- not in the allowlist (ban_recompute_not_in_allowlist: aten.cat, for one).
local RECOMPUTABLE = { elementwise = true, broadcast = true, broadcast_rows = true, cast_up = true,
                       cast_down = true, reduce_rows = true, softmax = true, copy = true,
                       transpose = true, strided = true, gather = true, none = true, norm = true,
                       -- (GEGLU's product of its two halves, a pointwise mul on strided views)
                       strided_mixed = true }

-- Inductor lowers a concatenation of few inputs as a pointwise kernel (max_pointwise_cat_inputs),
-- fused with its producers and consumers; the partitioner lets any op fuse into a cat
-- (is_fusible) but does not recompute one (aten.cat is not in its allowlist).
local CAT = { cat_strided = true }

-- The settings training.compile gives: nil when off, else { scope, mode, fullgraph, loss }. Errors
-- (exit 2) name a key or a value that is not modelled. loss: whether torchtune's chunked loss is
-- compiled with the layers (its recipes' training.compile_loss beside training.compile_model, the
-- default), or left eager (loss = false: a loop that compiles only the decoder layers, as
-- validation/harness/tech_model.py's apply_compile does).
function M.settings(v)
  if v == nil or v == false then return nil end
  if v == true then v = {} end
  if type(v) ~= "table" then
    error("training.compile must be true, false or a table { scope = \"layer\", mode = \"default\", fullgraph = false }", 0)
  end
  local s = { scope = "layer", mode = "default", fullgraph = false, loss = true }
  for k, x in pairs(v) do
    if k == "scope" then
      if x ~= "layer" and x ~= "model" then
        error(("training.compile.scope = %s: one of \"layer\" (each decoder layer) or \"model\""):format(tostring(x)), 0)
      end
    elseif k == "mode" then
      if x == "reduce-overhead" or x == "max-autotune" or x == "max-autotune-no-cudagraphs" then
        error(("training.compile.mode = \"%s\" is not modelled (%s); mode \"default\" is"):format(x,
              x == "max-autotune-no-cudagraphs" and "Triton GEMM templates and their epilogue fusion"
              or x == "max-autotune" and "CUDA graphs' private memory pool, Triton GEMM templates"
              or "CUDA graphs: their private memory pool and static input and output buffers"), 0)
      elseif x ~= "default" then
        error(("training.compile.mode = %s: torch.compile's modes are \"default\", \"reduce-overhead\", "
              .. "\"max-autotune\" and \"max-autotune-no-cudagraphs\""):format(tostring(x)), 0)
      end
    elseif k == "fullgraph" then
      -- a decoder layer compiles without graph breaks, so fullgraph changes nothing here
      if type(x) ~= "boolean" then error("training.compile.fullgraph must be true or false", 0) end
    elseif k == "loss" then
      if type(x) ~= "boolean" then error("training.compile.loss must be true or false", 0) end
    else
      error(("training.compile.%s is not a key vrsim knows (one of: scope, mode, fullgraph, loss)"):format(tostring(k)), 0)
    end
    s[k] = x
  end
  return s
end

-- The mixture-of-experts blocks whose compiled decoder layer has been checked: one graph, no
-- graph break, and the partitioner's saved set (validation/oracle/check_compile_moe.py, its result
-- validation/oracle/captures/compile_moe_l1.json). transformers' grouped_mm experts forward
-- has no data-dependent shape: the token-expert pairs are tokens x k whatever the routing, sort,
-- histc and cumsum keep their sizes, and the per-expert split lives in the offsets that
-- torch._grouped_mm reads on the device; dynamo captures it whole with its defaults
-- (capture_dynamic_output_shape_ops and capture_scalar_outputs off). So do GPT-OSS's (biased
-- experts, eager attention with the sinks) and DeepSeek's (multi-head latent attention, grouped
-- routing, shared experts; V2's complex rotary tables).
local COMPILED_MOE = { Qwen3MoeSparseMoeBlock = true, MixtralSparseMoeBlock = true, GptOssMLP = true,
                       DeepseekV3MoE = true, DeepseekV2Moe = true }

-- Why compile is not modelled for this mixture-of-experts run (nil when it is). lora: the run's
-- peft settings (strategies/lora.lua, after convert_moe_targets), nil without LoRA.
--
-- Under peft's LoRA (validation/oracle/check_compile_moe_lora.py, its result
-- validation/oracle/captures/compile_moe_lora_l1.json): adapters on Linear modules (the
-- attention's projections) leave the experts' 3-D weights bf16 and untouched, so
-- _can_use_grouped_mm keeps torch._grouped_mm; peft's LoraLayer.forward (its dropout, the adapter
-- dispatch) traces into the layer's one graph, and the partition is the min-cut partitioner's
-- over the layer's ops with the adapters' among them. lora.ParamWrapper (target_parameters, and
-- the MLP names or "all-linear", which peft 0.21 turns into target_parameters on the fused
-- experts and the router's weight) registers a parametrization on every forward, which dynamo
-- does not trace: the parameter's set_ ("Getting an inplace view on a graph input"), the
-- _LoraFactorsProxy module built inside the frame ("Uninitialized nn.Module"), the
-- parametrized class's __delattr__; the layer runs as many graphs with eager code between.
function M.moe_refusal(t, mc, mesh, lora)
  local block = mc.moe_classes and mc.moe_classes.block or "this family's sparse block"
  if not COMPILED_MOE[block] then
    return ("not modelled for %s (the compiled layer's graph and partition are checked for the "
            .. "grouped_mm experts of Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock, GptOssMLP, "
            .. "DeepseekV3MoE and DeepseekV2Moe only)"):format(block)
  end
  if t.precision ~= "bf16" and t.precision ~= "lora_bf16" then
    -- integrations/moe.py _can_use_grouped_mm: under dynamo, weights that are not bf16 take
    -- transformers::grouped_mm_fallback, an opaque custom op looping over the experts
    return ("precision %s is not modelled: under torch.compile transformers runs experts whose "
            .. "weights are not bf16 through its opaque transformers::grouped_mm_fallback op, not "
            .. "torch._grouped_mm; precision bf16 (or lora_bf16) is"):format(t.precision)
  end
  if lora and #lora.target_parameters > 0 then
    return ("LoRA on %s through peft's lora.ParamWrapper (training.lora.target_parameters%s) is not "
            .. "modelled: the parametrization it registers on each forward graph-breaks the compiled "
            .. "layer (dynamo traces neither the parameter's set_ nor the proxy module built in the "
            .. "frame), which runs as several graphs with eager code between; LoRA on the attention's "
            .. "Linears is"):format(table.concat(lora.target_parameters, ", "),
            lora.converted and ", which peft 0.21 makes of the MLP names and \"all-linear\"" or "")
  end
  if lora and t.quant ~= "none" then
    return ("training.quant = %s under LoRA is not modelled (the compiled MoE layer with quantized "
            .. "attention Linears is not checked; LoRA on its bf16 Linears, quant = none, is)"):format(t.quant)
  end
  if mesh and (mesh.degrees.ep or 1) > 1 then
    return "expert parallelism (training.parallel.ep) is not modelled (its all-to-all's "
           .. "data-dependent split sizes are host values inside the layer)"
  end
  return nil
end

-- The error for op-level checkpointing compiled with LoRA (nil when it is modelled). What is
-- checked (validation/oracle/check_compile_sac_lora.py, its result
-- validation/oracle/captures/compile_sac_op_lora_l1.json): peft's adapters on a bf16 Llama
-- layer's Linears, q and v or all-linear, lora_dropout = 0 (peft's nn.Identity: no random op in
-- the layer), fp32 (autocast_adapter_dtype). Each adapter's A and B are aten.mm calls the policy
-- counts with the base Linears' (strategies/sac.lua), so they shift which base GEMMs it saves.
-- QLoRA's 4-bit base is refused by strategies/sac.lua, lora.ParamWrapper with the experts.
function M.op_lora_refusal(t, lora)
  local head = "training.compile with checkpoint_scope = \"op\" and LoRA"
  if lora.dropout > 0 then
    -- peft's dropout before lora_A is a random op the policy tags PREFER_RECOMPUTE: the
    -- partitioner's RNG functionalization of it (philox seeds and offsets in the graph), not
    -- traced on the CPU
    return ("%s dropout %s is not modelled (the partition of peft's dropout before lora_A, a random op "
            .. "the policy recomputes, is not checked; lora.dropout = 0 is)"):format(head, tostring(lora.dropout))
  end
  if t.precision ~= "lora_bf16" and t.precision ~= "bf16" then
    return ("%s under precision %s is not modelled (adapters on a bf16 base, precision = \"lora_bf16\" or "
            .. "\"bf16\", are checked)"):format(head, tostring(t.precision))
  end
  if lora.dtype ~= "fp32" then
    -- bf16 adapters drop the input and output casts and halve the saved lora_B outputs
    return ("%s with lora.dtype = %s is not modelled (peft's fp32 adapters, autocast_adapter_dtype, are "
            .. "checked)"):format(head, lora.dtype)
  end
  return nil
end

-- The families whose whole-model graph a capture checks (check_compile_model.py --family):
-- compile_model_llama2_7b_l2.json and compile_model_families_l2.json.
local MODEL_FAMILIES = { llama = true, mistral = true, qwen2 = true, qwen3 = true, phi3 = true, olmo2 = true,
                         gemma3_text = true, gemma2 = true }
local MODEL_CLASSES = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
  .. "Phi3ForCausalLM, Olmo2ForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM"

-- torch.compile(model) under transformers' checkpointing (training.checkpointing with
-- checkpoint_impl "transformers": gradient_checkpointing_enable as the HF Trainer and TRL call
-- it, or torch's checkpoint_wrapper around each layer), as check_compile_model_ckpt.py shows it
-- (torch 2.13, transformers 5.25): no graph holds a decoder layer. Each layer's checkpoint is a
-- graph break (the checkpoint HOP refuses the CompileableContextVar write of its body), so every
-- layer runs eager, checkpointed exactly as eager checkpointing runs it (M.eager_layer), between
-- five small compiled graphs: the embedding, create_causal_mask, the rotary tables, the final
-- norm, lm_head with ForCausalLMLoss. Traced, create_causal_mask cannot skip the mask: without a
-- cache it looks for packed sequences in position_ids (masking_utils._preprocess_mask_arguments,
-- find_packed_sequence_indices), a tensor under the trace, which turns allow_is_causal_skip off,
-- and sdpa_mask materializes causal AND same-sequence as one (batch, 1, seq, seq) boolean tensor,
-- the graph's output. Each eager layer's SDPA then takes that mask (attn_mask given, is_causal
-- False): PyTorch converts it to an additive bias in the query's dtype, which flash attention
-- does not take (nn.sdpa). Whether a run is this case.
function M.ckpt_model(t)
  local s = M.settings(t.compile)
  return s ~= nil and s.scope == "model" and t.checkpointing == true and not t.inference
end

-- Why torch.compile(model) under checkpointing is not modelled for this run: nil, or
-- { what, why } for model_refusal's message. family: the model type.
function M.ckpt_model_refusal(t, mc, family)
  if t.checkpoint_impl ~= "transformers" then
    return { ("checkpointing and checkpoint_impl = \"%s\""):format(tostring(t.checkpoint_impl)),
             "a transformers layer under a checkpoint that lets dynamo trace it (skip_fwd_side_effects_in_bwd_"
             .. "under_checkpoint) inside the whole model's graph is not traced; checkpoint_impl = \"transformers\", "
             .. "where each layer's checkpoint breaks the graph and the layer runs eager, is modelled" }
  end
  if t.checkpoint_scope == "op" then
    return { "checkpoint_scope = \"op\"",
             "the op-level policy's checkpoint around an eager layer under torch.compile(model) is not "
             .. "traced; every decoder layer checkpointed whole, each running eager, is modelled" }
  end
  if t.checkpoint_scope ~= "layer" or t.checkpoint_every ~= 1 then
    return { ("checkpoint_scope = \"%s\" and checkpoint_every = %d"):format(
               tostring(t.checkpoint_scope), t.checkpoint_every or 1),
             "the layers left unchecked would be traced into graphs between the checkpointed ones, which "
             .. "is not traced; every decoder layer checkpointed whole, each running eager, is modelled" }
  end
  if family == "gemma2" or family == "gemma3_text" then
    return { ("checkpointing on model type %s"):format(family),
             "its eager attention or sliding-window masks under the traced mask functions are not traced; "
             .. "the full-attention SDPA families are modelled" }
  end
  if t.attention == "eager" then
    return { "checkpointing and attention = \"eager\"",
             "the additive mask the traced create_causal_mask makes for eager attention is not traced; "
             .. "attention = \"sdpa\" is modelled" }
  end
  if t.attention ~= "sdpa" then
    return { ("checkpointing and attention = \"%s\""):format(tostring(t.attention)),
             "the eager layers' SDPA takes the traced 4-D boolean mask, with which PyTorch picks its kernel "
             .. "(flash takes no mask); attention = \"sdpa\" is modelled" }
  end
  if t.data_batch or t.data then
    return { "checkpointing and training.data",
             "the traced mask of a padded or packed batch is not traced; full rows are modelled" }
  end
  return nil
end

-- torch.compile(model) (scope "model"; the HF Trainer's torch_compile without regional
-- compilation): dynamo traces LlamaForCausalLM.forward called with labels as one graph, the
-- embedding through ForCausalLMLoss (no graph break under fullgraph=True), and the min-cut
-- partitioner splits it (validation/oracle/check_compile_model.py, its capture
-- compile_model_llama2_7b_l2.json: Llama-2-7B cut to 2 layers, bf16, and peft's LoRA on q and v
-- with dropout 0; compile_model_families_l2.json the same for Mistral-7B-v0.1, Qwen2.5-0.5B,
-- Qwen3-8B, Phi-3-mini-4k (LoRA on qkv_proj and o_proj), OLMo-2-1124-7B, Gemma-2-9B (eager
-- attention) and Gemma-3-4B's text model, each one graph whose layers save
-- what they save compiled alone). Each decoder layer saves what it saves compiled alone; what lies outside the
-- layers is the final norm and lm_head partitioned as one more region (M.hooks) and the loss as
-- training.compile_loss models it (models/llama.lua). Why a run is not modelled (nil when it is):
-- each combination the capture did not trace is named. family: the model family's model_type.
function M.model_refusal(t, mc, mesh, lora, family)
  local head = "training.compile.scope = \"model\" (torch.compile of the whole model)"
  local function no(what, why) return ("%s with %s is not modelled (%s)"):format(head, what, why) end
  if (t.framework or "transformers") ~= "transformers" then
    return no(("framework %s"):format(t.framework), "the capture traces transformers' LlamaForCausalLM")
  end
  if t.inference then return no("inference = true", "the capture traces a training step: forward, loss and backward") end
  if not MODEL_FAMILIES[family] then
    return no(("model type %s"):format(tostring(family)),
              ("the whole-model graph is checked on %s only; scope \"layer\" compiles each decoder layer")
                :format(MODEL_CLASSES))
  end
  -- a window as short as the sequence: transformers makes the sliding-window boolean mask and
  -- SDPA runs with it, where the capture's 256 tokens under Mistral's 4096 take is_causal
  if mc.sliding_window and t.seq and mc.sliding_window <= t.seq then
    return no(("sliding_window %d <= seq %d"):format(mc.sliding_window, t.seq),
              "the capture's sequence is shorter than the window: its attention is causal, unmasked")
  end
  if mc.experts then return no("a mixture-of-experts model", "its routing inside one model graph is not traced") end
  -- transformers' checkpointing under torch.compile(model) is not one graph
  -- (validation/oracle/check_compile_model_ckpt.py): dynamo traces each layer's
  -- torch.utils.checkpoint as a higher-order op, use_reentrant True or False alike (torch's
  -- checkpoint_wrapper too), and the body's write to CompileableContextVar is a side effect the
  -- op refuses, so every layer falls back to eager checkpointing between small compiled graphs
  -- (M.ckpt_model); the traced create_causal_mask hands those eager layers a 4-D boolean mask
  -- where eager passes none. What that is checked for is modelled; the rest is named here.
  if t.checkpointing then
    local why = M.ckpt_model_refusal(t, mc, family)
    if why then return no(why[1], why[2]) end
  elseif mc.use_cache == false then
    -- traced without a cache, create_causal_mask builds a 4-D boolean mask that the model
    -- graph's SDPA takes in place of is_causal (validation/oracle/check_compile_model_ckpt.py
    -- --no-checkpointing shows the mask): a graph the capture did not trace
    return no("use_cache = false and no checkpointing", "traced without a cache transformers' "
              .. "create_causal_mask makes a 4-D boolean mask that the model graph's SDPA takes instead of "
              .. "is_causal (no flash kernel), which is not captured; the config's use_cache = true is")
  end
  if t.quant and t.quant ~= "none" then return no(("quant = %s"):format(t.quant), "a quantized base in the model's graph is not traced") end
  if t.float8 then return no("float8", "torchao's Float8Linear in the model's graph is not traced") end
  if mesh and ((mesh.degrees.tp or 1) > 1 or (mesh.degrees.cp or 1) > 1 or (mesh.degrees.pp or 1) > 1) then
    return no("tensor, context or pipeline parallelism", "only one device's graph is traced")
  end
  if t.strategy ~= "none" and t.strategy ~= "ddp" then
    return no(("strategy %s"):format(t.strategy), "sharded parameters inside the model's graph are not traced")
  end
  if t.dpo then return no("training.dpo", "TRL's fused head and reference forward are not traced in one graph") end
  if t.loss ~= "full" then return no(("training.loss = \"%s\""):format(tostring(t.loss)), "the capture's loss is ForCausalLMLoss") end
  if t.compile_loss then return no("training.compile_loss", "the loss is inside the model's graph already") end
  if t.activation_offload then return no("activation_offload", "saved-tensor hooks around the model's graph are not traced") end
  if t.transformers and not require("strategies.tf_version").era(t.transformers, family).default then
    return no(("training.transformers = %q"):format(t.transformers), "the capture traces transformers 5.25's loss")
  end
  if lora and lora.dtype and lora.dtype ~= "fp32" then
    return no(("lora.dtype = %s"):format(lora.dtype), "the capture's adapters are fp32, as peft keeps them")
  end
  if lora and (lora.dropout or 0) > 0 then
    return no(("lora dropout %g"):format(lora.dropout), "the capture's adapters have dropout 0: its random mask in one graph is not traced")
  end
  if t.precision ~= "bf16" and t.precision ~= "lora_bf16" then
    return no(("precision %s"):format(tostring(t.precision)), "the capture's weights are bf16")
  end
  return nil
end

-- The error for a run compile is not modelled for (nil when it is). mesh: the device mesh, if any;
-- lora: the run's peft settings, if any.
function M.check(t, mc, mesh, lora)
  if t.inference then return nil end
  -- compile.loss names whether the chunked loss's compute_cross_entropy is compiled; the full
  -- loss is compiled by training.compile_loss, the others are no graph compile makes
  if type(t.compile) == "table" and t.compile.loss ~= nil and t.loss ~= "chunked" then
    return ("training.compile.loss with training.loss = \"%s\" is not modelled: it says whether "
            .. "torchtune's chunked loss is compiled with the layers (the full cross-entropy is "
            .. "compiled by training.compile_loss)"):format(tostring(t.loss))
  end
  -- checkpointing every k-th layer: under transformers' checkpointing the checkpointed layers
  -- run eager (M.eager_layer), under a wrapper they compile with their checkpoint; either way
  -- the layers between compile alone (M.checkpointed_layer)
  -- torchtitan's op-level policy compiles with its checkpoint (M.checkpointed_layer, the
  -- policy's tags in M.partition); transformers' checkpointing of it runs eager (M.eager_layer)
  -- and is not checked
  if t.checkpointing and t.checkpoint_scope == "op" and t.checkpoint_impl ~= "wrapper" then
    return ("training.compile with checkpoint_scope = \"op\" and checkpoint_impl = \"%s\" is not modelled "
            .. "(the op-level policy compiled with its checkpoint, checkpoint_impl = \"wrapper\", is)"):format(
            t.checkpoint_impl)
  end
  if t.checkpointing and t.checkpoint_scope == "op" and mesh
     and ((mesh.degrees.tp or 1) > 1 or (mesh.degrees.cp or 1) > 1) then
    -- the policy's answers for funcol's collectives (reduce_scatter_tensor is in torchtitan's
    -- save list, force_save_collectives leaves tagged ones alone) and for the ring's attention
    -- are not checked
    return ("training.compile with checkpoint_scope = \"op\" under %s is not modelled (what the "
            .. "policy tags of its collectives and the partition make of them are not checked; without "
            .. "tensor or context parallelism it is)"):format(
            (mesh.degrees.tp or 1) > 1 and "tensor parallelism" or "context parallelism")
  end
  if t.checkpointing and t.checkpoint_scope == "op" and require("strategies.lora").wanted(t) then
    local why = M.op_lora_refusal(t, lora)
    if why then return why end
  end
  if t.checkpointing and t.checkpoint_scope ~= "layer" and t.checkpoint_scope ~= "op" then
    return ("training.compile with checkpoint_scope = \"%s\" and checkpoint_every = %d is not modelled "
            .. "(compiled with checkpointing, decoder layers checkpointed whole are)"):format(
            t.checkpoint_scope, t.checkpoint_every)
  end
  if mc.experts then
    local why = M.moe_refusal(t, mc, mesh, lora)
    if why then return "training.compile on a mixture-of-experts model: " .. why end
  end
  -- torchao's NF4Tensor dequantizes in traceable PyTorch ops, bitsandbytes' Linear4bit in custom
  -- ops dynamo traces (strategies/quant.lua). LLM.int8's MatMul8bitLt is not checked: on the
  -- CPU, where the partition can be traced, bitsandbytes 0.50.2 trains 8-bit layers through
  -- another Function (MatMul8bitFp: autograd/_functions.py matmul), not the one CUDA runs
  if t.quant == "int8" then
    return "training.compile with quant = int8 is not modelled (what the partitioner saves of "
           .. "bitsandbytes' MatMul8bitLt is not checked: the CPU, where it can be traced, runs "
           .. "MatMul8bitFp instead)"
  end
  -- (what dynamo makes of the older MatMul4Bit, dequantize_4bit then F.linear, is not checked)
  if t.quant == "nf4" and not require("strategies.bnb_version").era(t.bitsandbytes).gemm_4bit then
    return ("training.compile with quant = nf4 and bitsandbytes %s is not modelled (the compiled "
            .. "4-bit layer is checked with 0.50's gemm_4bit only)"):format(t.bitsandbytes)
  end
  if t.activation_offload and not (t.checkpointing and t.checkpoint_scope == "layer" and t.checkpoint_every == 1) then
    return "training.compile with activation_offload is not modelled where a compiled layer is not "
           .. "checkpointed (the saved-tensor hooks see the compiled graph's saved outputs, not autograd's)"
  end
  if t.strategy == "zero3" then
    return "training.compile under strategy zero3 is not modelled (DeepSpeed's ZeRO-3 fetches each "
           .. "submodule's parameters in hooks on every Linear inside the layer, graph breaks that "
           .. "split it; FSDP2, whose hooks sit at the layer's boundary, is)"
  end
  return nil
end

-- ---- the partition -------------------------------------------------------------------------

-- The storage a tensor table stands for (a view's base, to its root). A part of a split
-- (t.split_part: aten.split_with_sizes, which is not in the partitioner's allowlist, unlike
-- aten.split) is a node of its own, the banned split's output between its input and its readers.
local function storage(t)
  while t.base and not t.split_part do t = t.base end
  return t
end

-- Whether the backward of GEMM op `spec` reads its saved input x only through a fused kernel:
-- a Linear on one row (a DiT's modulation of its (1, dim) conditioning at batch 1) has the
-- weight gradient grad.T @ x with a reduction dimension of 1, which Inductor's decomposition
-- of aten.mm turns into the pointwise outer product grad.T * x on a GPU
-- (torch/_inductor/decomposition.py mm), so x is not materialized in backward for it.
local function outer_product_grad(spec, x)
  return spec.kind == "mm" and spec.inputs[1] == x and nn.numel(x.shape) == x.shape[#x.shape]
end

-- The partition of one compiled layer: ops, the { index, spec, outs } nn.op made in it, in order;
-- outputs, the layer's outputs (tensor tables). Marks each op's role (G:op_partition) and the
-- fused tensors (G:tensor_fused); returns the saved tensors (storage tables, in op order) for
-- the tests and the oracle check. inference: the layer ran under no_grad, where AOTAutograd
-- compiles an inference graph (no backward, no partition: nothing saved, every op "skip"), whose
-- pointwise chains Inductor fuses as in a training graph. rerun: an eager checkpoint around the
-- compiled region (diffusers' _gradient_checkpointing_func around a compiled block,
-- M.block_hooks): the checkpoint's pack hook drops what the forward graph saves, and its
-- recomputation runs the forward graph again, so every op of the region runs again in backward
-- (nothing of it is kept from forward but the checkpoint's arguments).
-- inside: set for a decoder layer inside the whole model's graph (scope "model"): { layer = its
-- 1-based index, fused_input = the storage id of its input where a fusible op of that graph made
-- it (the previous layer's residual sum) }: the partitioner's ban_if_used_far_apart applies to that
-- input as to the region's own nodes, and the attention masks, which that graph makes from iota
-- (create_causal_mask), are no saved input.
function M.partition(cx, ops, outputs, checkpointed, inference, rerun, inside)
  local fused_input = inside and inside.fused_input
  local G = cx.G
  local node_of, nodes = {}, {}   -- storage id -> node record; records in order
  local function node(st, producer)
    local n = node_of[st.id]
    if not n then
      n = { t = st, producer = producer, users = {}, needed = false, dist = 1e9 }
      node_of[st.id] = n
      nodes[#nodes + 1] = n
    end
    return n
  end
  -- AOTAutograd's common-subexpression elimination (fx_graph_cse): a cast of a tensor to a dtype
  -- the layer already cast it to is the first cast (autocast casts a Linear's input once per
  -- Linear in eager; q, k and v's projections then share one copy). The repeated cast makes
  -- nothing: its output is the first's node, and has no bytes of its own.
  local cse, first_cast, dup = {}, {}, {}
  for k, o in ipairs(ops) do
    local kind, x, y = o.spec.kind, o.spec.inputs[1], o.outs[1]
    if (kind == "cast_up" or kind == "cast_down") and #o.spec.inputs == 1 and #o.outs == 1 and not y.base then
      local key = storage(x).id .. ":" .. y.dtype
      if first_cast[key] then cse[y.id] = first_cast[key]; dup[k] = true else first_cast[key] = y end
    end
  end
  local function storage_cse(t)
    local st = storage(t)
    return cse[st.id] or st
  end
  -- the region's nodes: every op's own outputs (not views: a view is its storage's node)
  local op_nodes = {}
  for k, o in ipairs(ops) do
    op_nodes[k] = {}
    for _, t in ipairs(o.outs) do
      if (not t.base or t.split_part) and not dup[k] then op_nodes[k][#op_nodes[k] + 1] = node(t, k) end
    end
  end
  -- inputs from outside the region (the layer's input, the rotary tables, parameters) are the
  -- graph's primals
  for k, o in ipairs(ops) do
    local kind = o.spec.kind or "elementwise"
    -- recomputable: in the partitioner's allowlist (random ops, dropout's, are not; nor an op
    -- marked compile_extern: one whose backward is an extern kernel, Float8Linear's _scaled_mm
    -- halves, or one outside the allowlist, a mixture of experts' topk, sort, histc, cumsum)
    local rec = RECOMPUTABLE[kind] and o.spec.host ~= "dropout" and not o.spec.compile_extern
    o.recomputable = rec
    o.fusible = rec or CAT[kind]
    for _, x in ipairs(o.spec.inputs) do
      local n = node(storage_cse(x), nil)
      n.users[#n.users + 1] = k
      if not o.fusible then n.extern = true end     -- read by a GEMM or attention kernel
    end
    for _, s in ipairs(o.rg and o.spec.saves or {}) do
      local n = node(storage_cse(s), nil)
      n.needed = true                           -- backward reads it (its dist_from_bw is 1)
      -- ...in a kernel that cannot fuse it (bw_fused: the ids an op's backward reads only
      -- through fused kernels, Float8Linear's recasts)
      -- (bw_unfused: an op whose backward reads its saves in an unfusible kernel though the op
      -- itself is recomputable: a gather's scatter of its gradient, index_put_, reads the indices)
      if (not rec or o.spec.bw_unfused) and not (o.spec.bw_fused and o.spec.bw_fused[s.id])
         and not outer_product_grad(o.spec, s) then
        n.bw_extern = true
      end
    end
  end
  for _, t in ipairs(outputs) do node(storage_cse(t), nil).out = true end
  -- dist_from_bw: 1 for what backward reads, else one more than its nearest user's
  for k = #ops, 1, -1 do
    local d = 1e9
    for _, n in ipairs(op_nodes[k]) do
      if n.needed then n.dist = 1 end
      d = math.min(d, n.dist)
    end
    for _, x in ipairs(ops[k].spec.inputs) do
      local n = node_of[storage_cse(x).id]
      if n.needed then n.dist = 1 elseif d < 1e9 then n.dist = math.min(n.dist, d + 1) end
    end
  end
  -- ban_if_used_far_apart (partitioners.py, torch 2.13): a fusible user of a node that comes
  -- after the first op an unfusible edge reaches from the node's users (searched in forward order
  -- up to its last user) is not recomputed; a residual sum read again after the norm's
  -- projections, its stream's input a fusible op's output. Applied to the input a fusible op of
  -- the enclosing graph made (fused_input): a placeholder, as the layer's input is compiled alone,
  -- is no fusible op and bans nothing
  local far = {}
  local fin = fused_input and node_of[fused_input]
  if fin and #fin.users > 0 then
    local last = 0
    for _, u in ipairs(fin.users) do last = math.max(last, u) end
    -- (op index, reached through a fusible edge) in forward order
    local heap, queued = {}, {}
    local function push(k, fusible)
      local key = k .. (fusible and "f" or "u")
      if queued[key] then return end
      queued[key] = true
      heap[#heap + 1] = { k, fusible }
    end
    for _, u in ipairs(fin.users) do push(u, true) end
    local first = last
    while #heap > 0 do
      table.sort(heap, function(a, b) if a[1] ~= b[1] then return a[1] > b[1] end return a[2] and not b[2] end)
      local k, fusible = table.unpack(table.remove(heap))
      if not fusible then first = k; break end
      for _, t in ipairs(ops[k].outs) do
        local n = node_of[storage_cse(t).id]
        for _, u in ipairs(n and n.users or {}) do
          if u > k and u <= last then push(u, ops[k].fusible and ops[u].fusible) end
        end
      end
    end
    for _, u in ipairs(fin.users) do
      if u > first and ops[u].fusible then far[u] = true end
    end
  end
  -- ban_if_long_fusible_chains: a fusible chain from a node to one more than 100 ops later is cut
  -- there. The masks are made before the first layer: the first layer's mask sum lies within 100
  -- ops of them (83 in Gemma 2's capture), every later layer's beyond (its sum saved)
  local graph_const = {}
  if inside then
    for k, o in ipairs(ops) do
      for _, x in ipairs(o.spec.graph_const or {}) do graph_const[storage_cse(x).id] = true end
      if o.spec.graph_const and inside.layer > 1 and o.fusible then far[k] = true end
    end
  end
  -- the flow graph: node v's in = 2v, out = 2v + 1; source and sink after them
  local nn_ = #nodes
  local SRC, SNK = 2 * nn_, 2 * nn_ + 1
  local edges, INF = {}, math.huge
  local function edge(a, b, c) edges[#edges + 1] = a; edges[#edges + 1] = b; edges[#edges + 1] = c end
  for v, n in ipairs(nodes) do
    n.v = v - 1
    local t, prod = n.t, n.producer and ops[n.producer]
    local bytes = nn.bytes(t.shape, t.dtype)
    local banned, weight
    if not prod then
      -- a primal: banned (it cannot be recomputed); a parameter is free to save
      -- (treat_parameters_as_free_to_save)
      banned, weight = true, (t.param or graph_const[t.id]) and 0 or nil
    else
      banned = not prod.recomputable                     -- compute-intensive, random, or not allowed
        or n.bw_extern                                   -- materialized in backward
        -- ban_if_reduction: any op whose output is a quarter of its tensor arguments or less (a
        -- row reduction, a gather of a few columns: DeepSeek-V3's router's scores.gather)
        or (4 * bytes < M.input_bytes(prod.spec))
        or far[n.producer]
    end
    if not weight then
      -- _size_of, biased toward nodes near backward; twice for a node fusion would not
      -- materialize (is_materialized: every user fusible with it)
      weight = bytes * 1.1 ^ math.max(math.min(n.dist, 100), 1)
      local materialized = not prod or not prod.recomputable or n.extern or n.bw_extern or n.out
      if not materialized then weight = 2 * weight end
    end
    -- a checkpointed layer's ops are tagged MUST_RECOMPUTE (torch.utils.checkpoint traced
    -- by dynamo): the partitioner recomputes each one backward needs, GEMMs included
    -- (must_recompute: node_in -> sink), and saves only the layer's inputs. Under op-level
    -- selective checkpointing the policy tags each op (must_save, M.hooks): PREFER_RECOMPUTE is
    -- must_recompute too, and MUST_SAVE bans recomputation (should_ban_recomputation), so the
    -- layer saves the inputs and what of the policy's saved outputs backward reads, directly or
    -- to recompute what it reads
    if checkpointed and prod and not prod.must_save then
      edge(2 * n.v, SNK, INF)
    elseif banned or (prod and prod.must_save) then
      edge(SRC, 2 * n.v, INF)
    end
    edge(2 * n.v, 2 * n.v + 1, weight)
    if n.needed then edge(2 * n.v + 1, SNK, INF) end
  end
  for k, o in ipairs(ops) do
    for _, x in ipairs(o.spec.inputs) do
      local a = node_of[storage_cse(x).id]
      for _, b in ipairs(op_nodes[k]) do edge(2 * a.v + 1, 2 * b.v, INF) end
    end
    -- an op's outputs come from one kernel: recomputing one recomputes all. Not a norm's:
    -- Inductor's decompositions make native_layer_norm (and the fused RMS norm) a reduction to
    -- the row statistics and a pointwise normalization, so the normalized output is recomputed
    -- from the input and the statistics while the statistics (a reduction, banned) are saved
    local outs = op_nodes[k]
    if o.spec.kind == "norm" then outs = {} end
    for i = 2, #outs do edge(2 * outs[1].v, 2 * outs[i].v, INF); edge(2 * outs[i].v, 2 * outs[1].v, INF) end
  end
  local side = {}
  if not inference then side = select(2, require("vrsim.core").mincut(2 * nn_ + 2, SRC, SNK, edges)) end
  -- live: what backward reads, or what a recomputation of it reads. A checkpointed layer's
  -- MUST_RECOMPUTE ops that nothing backward reads depends on (the last projection, its
  -- reduce-scatter under tensor parallelism, the residual sum that is the layer's output) are not
  -- in the backward graph (its dead-code elimination), as eager checkpointing's early stop skips
  -- them. Applied where the layer holds collectives (tensor parallelism's, which would otherwise
  -- run again); a layer without them still recomputes to its end (docs/techniques.md, "torch.compile")
  local collectives = false
  for _, o in ipairs(ops) do
    if o.spec.kind == "all_gather" or o.spec.kind == "reduce_scatter" then collectives = true end
  end
  for k = #ops, 1, -1 do
    for _, n in ipairs(op_nodes[k]) do
      local live = n.needed
      for _, u in ipairs(n.users) do
        for _, o in ipairs(op_nodes[u]) do live = live or o.live end
      end
      n.live = live
    end
  end
  -- Under the op-level policy the cut can fall on a MUST_SAVE output that only a
  -- must-recompute op nothing backward reads depends on (down_proj's, under the layer's residual
  -- sum): the backward graph's dead-code elimination drops that op, and with it the saved
  -- value (_extract_fwd_bwd_modules keeps the saved values the backward graph reads). used: what
  -- backward reads, or what a recomputed op it reads reads
  local tagged = false
  for _, o in ipairs(ops) do tagged = tagged or o.must_save end
  if tagged then
    for k = #ops, 1, -1 do
      for _, n in ipairs(op_nodes[k]) do
        local used = n.needed
        for _, u in ipairs(n.users) do
          for _, o in ipairs(op_nodes[u]) do used = used or (o.used and not side[2 * o.v + 1]) end
        end
        n.used = used
      end
    end
  end
  local saved, listed = {}, {}
  for _, n in ipairs(nodes) do
    n.saved = not inference and side[2 * n.v + 1] and not side[2 * n.v + 2]
              and not (tagged and n.producer and not n.used)
    n.recomputed = not inference and not side[2 * n.v + 1]
                   and not (checkpointed and collectives and n.producer and not n.live)
                   and not (tagged and n.producer and not n.used)
    if n.saved then
      -- a saved part of a split keeps its input's storage (a view), listed once
      local st = n.t
      while st.base do st = st.base end
      if not listed[st.id] and not graph_const[st.id] then saved[#saved + 1] = st end
      listed[st.id] = true
    end
  end
  -- Inductor's fusion: what only fused kernels of this graph read never exists
  for k in pairs(dup) do G:tensor_fused(ops[k].outs[1].id) end
  for _, n in ipairs(nodes) do
    local prod = n.producer and ops[n.producer]
    if prod and prod.fusible and not n.saved and not n.extern and not n.out then
      n.fused = true
      G:tensor_fused(n.t.id)
    end
  end
  local group = M.kernels(ops, op_nodes, node_of, storage_cse, dup)
  local bwd = not inference and M.backward_bytes(ops, op_nodes, node_of, storage_cse, dup, group) or {}
  for k, o in ipairs(ops) do
    local role = "skip"
    local outs = op_nodes[k]
    if dup[k] then
      role = "skip"      -- the first cast's output stands for it
    elseif #outs > 0 then
      role = outs[1].saved and "save" or outs[1].recomputed and "recompute" or "skip"
      for _, n in ipairs(outs) do if n.saved then role = "save" end end
      -- a norm whose statistics are saved and whose output is recomputed runs again (the
      -- statistics' second copies are a value a row)
      if o.spec.kind == "norm" and outs[1].recomputed and not outs[1].saved then role = "recompute" end
    elseif #o.outs > 0 then
      -- an op making views only: run again where its input is there in backward
      local n = node_of[storage_cse(o.outs[1]).id]
      role = (n.saved or n.recomputed) and "recompute" or "skip"
    end
    -- a fused op moves only what is materialized of its inputs and outputs, and of its inputs
    -- only what its kernel does not make itself (a tensor an op of the same kernel writes is
    -- stored once, its readers there take the value the kernel holds) or another op of the
    -- kernel already read
    local moved, kernel
    if dup[k] then
      moved, kernel = 0, "fused"
    elseif o.fusible then
      -- its own kernel where it writes a tensor that exists, else inside its consumer's
      kernel = "fused"
      for _, n in ipairs(outs) do if not n.fused then kernel = "kernel" end end
      if #outs == 0 then kernel = "kernel" end
      moved = 0
      local g = group[k]
      for _, x in ipairs(o.spec.inputs) do
        local n = node_of[storage_cse(x).id]
        if not n.fused and not (n.producer and group[n.producer] == g) and not g.read[n] then
          g.read[n] = true
          moved = moved + nn.bytes(x.shape, x.dtype)
        end
      end
      for _, n in ipairs(outs) do
        if not n.fused then moved = moved + nn.bytes(n.t.shape, n.t.dtype) end
      end
    end
    -- (under an eager checkpoint the forward graph runs again whole: what it saves, what the
    -- backward graph recomputes, and the rest of it, its outputs among them)
    if rerun and not dup[k] then role = "recompute" end
    G:op_partition(o.index, role, kernel, moved, kernel and (bwd[k] or 0) or nil)
  end
  return saved, nodes
end

-- Inductor's kernels of one compiled graph: each fusible op's kernel (a table shared by the ops
-- of one kernel; index = its first op), nil for an extern op (a GEMM, attention). A fusible op
-- joins the kernel of each fusible op whose output it reads, unless that producer reaches it
-- only through an extern kernel as well (the scheduler cannot fuse two nodes with an extern
-- kernel between them: the residual sum after the MLP reads the attention block's sum from an
-- earlier kernel). A CSE'd cast (dup) belongs to no kernel.
function M.kernels(ops, op_nodes, node_of, storage_cse, dup)
  local n_ops = #ops
  -- consumers of each op (through the storage nodes it makes)
  local users = {}
  for k = 1, n_ops do
    local u, seen = {}, {}
    for _, n in ipairs(op_nodes[k]) do
      for _, c in ipairs(n.users) do
        if c ~= k and not seen[c] then seen[c] = true; u[#u + 1] = c end
      end
    end
    users[k] = u
  end
  -- after[k]: the ops reachable from op k through an extern op (ops run in order, so each
  -- consumer comes later and is done first here). Both closures are bit sets, 64 ops a word
  -- (op j: word (j - 1) // 64 + 1, bit (j - 1) % 64): a union is then a word per 64 ops, where
  -- sets of keys cost a table insertion per op reached, a layer's ops squared in all (a third of
  -- a compiled model's build)
  local words = (n_ops + 63) // 64
  local reach, after = {}, {}
  for k = n_ops, 1, -1 do
    local r, a = {}, {}
    for w = 1, words do r[w] = 0; a[w] = 0 end
    for _, c in ipairs(users[k]) do
      local rc, cw, cb = reach[c], (c - 1) // 64 + 1, 1 << ((c - 1) % 64)
      r[cw] = r[cw] | cb
      for w = 1, words do r[w] = r[w] | rc[w] end
      if not ops[c].fusible then
        a[cw] = a[cw] | cb
        for w = 1, words do a[w] = a[w] | rc[w] end
      else
        local ac = after[c]
        for w = 1, words do a[w] = a[w] | ac[w] end
      end
    end
    reach[k], after[k] = r, a
  end
  local parent = {}
  local function find(k)
    while parent[k] ~= k do parent[k] = parent[parent[k]]; k = parent[k] end
    return k
  end
  for k, o in ipairs(ops) do if o.fusible and not dup[k] then parent[k] = k end end
  for k, o in ipairs(ops) do
    if parent[k] then
      for _, x in ipairs(o.spec.inputs) do
        local p = node_of[storage_cse(x).id].producer
        if p and parent[p] and after[p][(k - 1) // 64 + 1] & (1 << ((k - 1) % 64)) == 0 then
          local a, b = find(p), find(k)
          if a ~= b then parent[math.max(a, b)] = math.min(a, b) end
        end
      end
    end
  end
  local group, by_root = {}, {}
  for k in pairs(parent) do
    local r = find(k)
    by_root[r] = by_root[r] or { index = r, read = {} }
    group[k] = by_root[r]
  end
  return group
end

-- The bytes the backward of each fusible op moves (op index -> bytes), as Inductor's backward
-- kernels do: the backward of one forward kernel is one fused kernel, which reads each gradient
-- an op outside it hands in (an extern kernel's, the next kernel's, the layer output's), reads
-- the saved tensors its derivatives need once, and writes each gradient that leaves it once (an
-- extern kernel's output or a graph input, which their own backward reads); every gradient
-- between its ops stays in its registers, and the gradient sums of the backward graph (its
-- aten.add where a tensor has several users: the InputBuffer sums of eager autograd) are in the
-- kernel that reads them (sim/graph.c route_grad). Each byte goes to one op of the kernel: a
-- gradient read to the op making the tensor, one written to the first op reading it, a saved
-- tensor to the first op saving it.
function M.backward_bytes(ops, op_nodes, node_of, storage_cse, dup, group)
  local bytes, counted = {}, {}
  local function add(k, g, what, b)
    local key = g.index .. ":" .. what
    if counted[key] then return end
    counted[key] = true
    bytes[k] = (bytes[k] or 0) + b
  end
  for k, o in ipairs(ops) do
    local g = group[k]
    if g and o.rg then
      -- gradients leaving the kernel: of its inputs made elsewhere
      for i, x in ipairs(o.spec.inputs) do
        local n = node_of[storage_cse(x).id]
        local graded = x.rg and not (o.spec.grads and o.spec.grads[i] == "none")
        if graded and not n.fused and not (n.producer and group[n.producer] == g) then
          add(k, g, "w" .. n.t.id, nn.bytes(n.t.shape, n.t.dtype))
          -- the other users' gradients of it that extern kernels hand in, summed here
          for _, u in ipairs(n.users) do
            if not group[u] and not dup[u] then
              add(k, g, "x" .. n.t.id .. ":" .. u, nn.bytes(n.t.shape, n.t.dtype))
            end
          end
        end
      end
      -- gradients coming in: from each user of its outputs outside the kernel, and the layer's
      for _, n in ipairs(op_nodes[k]) do
        if n.t.rg then
          for _, u in ipairs(n.users) do
            if group[u] ~= g and not dup[u] then
              add(k, g, "r" .. n.t.id .. ":" .. u, nn.bytes(n.t.shape, n.t.dtype))
            end
          end
          if n.out then add(k, g, "o" .. n.t.id, nn.bytes(n.t.shape, n.t.dtype)) end
        end
      end
      -- saved tensors its derivatives read (a fused one is recomputed inside from those)
      for _, sv in ipairs(o.spec.saves or {}) do
        local n = node_of[storage_cse(sv).id]
        if not n.fused then add(k, g, "s" .. n.t.id, nn.bytes(n.t.shape, n.t.dtype)) end
      end
    end
  end
  return bytes
end

-- The note that says what the partitioner saves of compiled decoder layer `layer` (from 0): each
-- saved tensor as name [shape] dtype, and their bytes (parameters, saved for free, left out).
-- kind: which of the run's two kinds of compiled layer it is, where it has both (or nil). what:
-- what the region is called (default "decoder layer": a diffusers block, M.block_hooks, is
-- "transformer block").
function M.note(saved, layer, kind, what)
  local parts, total = {}, 0
  for _, t in ipairs(saved) do
    if not t.param then
      local b = nn.bytes(t.shape, t.dtype)
      total = total + b
      parts[#parts + 1] = ("%s [%s] %s"):format(t.name, table.concat(t.shape, "x"), t.dtype)
    end
  end
  return ("torch.compile: the partitioner saves %d activations of %s%s%s for backward, "
          .. "%.2f MiB (%s), and backward recomputes what else it reads"):format(#parts, what or "decoder layer",
          layer and " " .. layer or "",
          kind and " (" .. kind .. ")" or "", total / 2^20, table.concat(parts, ", "))
end

-- The bytes of an op's tensor arguments (a reduction's ban compares its output with them, as
-- the partitioner sums the fx nodes among its args): x[idx] (a gather, aten.index) takes its
-- indices in a list, which is no node, so only x counts; aten.gather (spec.index_arg) takes
-- them as an argument of their own.
function M.input_bytes(spec)
  local b = 0
  for i, x in ipairs(spec.inputs) do
    if i == 1 or spec.kind ~= "gather" or spec.index_arg then b = b + nn.bytes(x.shape, x.dtype) end
  end
  return b
end

-- Whether decoder layer k (from 1) runs eager under training.compile: a checkpointed layer of
-- a transformers model (checkpoint_impl "transformers"). GradientCheckpointingLayer (transformers
-- 5.x, modeling_layers.py) wraps each layer class's forward to call
-- self._gradient_checkpointing_func, torch.utils.checkpoint, inside the compiled module's frame;
-- dynamo traces the checkpoint as a higher-order op whose body may not mutate state from outside
-- it, and the layer's forward writes transformers' CompileableContextVar (utils/
-- output_capturing.py, the output-capturing context, a plain attribute under a trace): "HOP:
-- Unsafe side effect ... Attempted to mutate UserDefinedObjectVariable(CompileableContextVar)".
-- The frame graph-breaks and the layer runs eager, checkpoint and all; torch's checkpoint_wrapper
-- around the same layer does the same (validation/oracle/check_compile_hf_ckpt.py --wrapper).
-- torchtitan's, torchtune's and fms-fsdp's own layers have no such side effect and compile with
-- their checkpoint, as do a transformers model's under
-- torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint (accelerate's regional
-- compilation under FSDP2 sets it): checkpoint_impl "wrapper".
function M.eager_layer(t, k)
  return t.checkpointing and t.checkpoint_impl == "transformers" and (k - 1) % t.checkpoint_every == 0
end

-- Whether decoder layer k (from 1) compiles with its checkpoint inside (checkpoint_impl
-- "wrapper"): torchtitan's apply_ac wraps every k-th block in ptd_checkpoint_wrapper (selective
-- layer AC, ac_freq) and apply_compile then compiles every block, wrapped or not, so a wrapped
-- block is one graph with the checkpoint's MUST_RECOMPUTE tags (it saves its inputs alone) and
-- an unwrapped one the plain layer's graph (the partitioner's saved set), each as if the whole
-- model were one kind (validation/oracle/check_compile_ckpt_every.py). vrsim checkpoints the
-- layers 1, 1 + k, ... (strategies/checkpoint.lua), torchtitan k, 2k, ...: the same count
-- where k divides the layers (recipes/torchtitan.lua). Under the op-level policy (checkpoint_scope
-- "op", every layer) the tags are the policy's, MUST_SAVE or PREFER_RECOMPUTE (M.hooks, M.partition;
-- validation/oracle/check_compile_sac.py).
function M.checkpointed_layer(t, k)
  return t.checkpointing == true and t.checkpoint_impl ~= "transformers" and not M.torchtune_split(t)
    and (k - 1) % t.checkpoint_every == 0
end

-- Whether each compiled decoder layer is two graphs: torchtune's packed batches
-- (strategies/data.lua, batching "torchtune") call FlexAttention through
-- compile_friendly_flex_attention, which torch.compiler.disable wraps, so dynamo breaks the
-- layer's graph there; torchtune's compile_model compiles the layer inside the CheckpointWrapper
-- set_activation_checkpointing put around it, so the checkpoint stays eager around both graphs
-- and the attention between them (validation/oracle/check_torchtune_flex_compile.py: two graphs
-- and one break a layer, checkpointed or not). Each graph is partitioned on its own; the first
-- one's outputs are what the attention reads (M.hooks, cx.compile_break).
function M.torchtune_split(t)
  return t.data_batch ~= nil and t.data_batch.torchtune == true
end

-- The note torch.compile(model) under transformers' checkpointing carries (M.ckpt_model).
function M.ckpt_model_note()
  return "torch.compile(model) under gradient checkpointing: every decoder layer runs eager, "
    .. "checkpointed as eager checkpointing runs it (each layer's torch.utils.checkpoint is a graph "
    .. "break: its body mutates transformers' CompileableContextVar, which the checkpoint's higher-order "
    .. "op refuses); compiled are the causal mask, the final norm and lm_head with the loss (the "
    .. "embedding's lookup and the rotary tables, graphs of their own too, are priced as the eager ops "
    .. "they hold; the host's graph call is charged for the head's graph alone). The traced "
    .. "create_causal_mask returns a (batch, 1, seq, seq) boolean mask, alive through the layers and "
    .. "their recomputation, and each layer's SDPA takes it instead of is_causal: an additive copy of "
    .. "it a call, saved by the kernel, no flash kernel, grouped keys and values repeated to every query head (use_gqa_in_sdpa wants no mask)"
end

-- The note a run with eager checkpointed layers carries.
function M.eager_note(t)
  return ("torch.compile: the checkpointed layers run eager: transformers' checkpointing "
          .. "(training.checkpoint_impl = \"transformers\") makes dynamo graph-break in "
          .. "torch.utils.checkpoint around each layer's forward (its CompileableContextVar write is a side "
          .. "effect the checkpoint's higher-order op refuses), so those layers have eager checkpointing's "
          .. "memory and time%s; checkpoint_impl = \"wrapper\" (torchtitan's, torchtune's own layers, or "
          .. "skip_fwd_side_effects_in_bwd_under_checkpoint) compiles them"):format(
          t.checkpoint_every > 1 and ", and the layers between them are compiled" or "")
end

-- Marks "skip" every op recorded since first_op that the compiled graph does not run: not one of
-- its ops (the partition's), nor an index of `keep` (a set, or nil)
local function skip_others(cx, ops, first_op, keep)
  local seen = {}
  for _, o in ipairs(ops) do seen[o.index] = true end
  for i in pairs(keep or {}) do seen[i] = true end
  for i = first_op, cx.G:num_ops() - 1 do
    if not seen[i] then cx.G:op_partition(i, "skip") end
  end
end

-- torch.compile(model)'s graph past the decoder layers (scope "model"): the final norm and
-- lm_head are one more region the partitioner splits, as it splits a layer's input norm and its
-- projections (the capture saves the norm's input, its fp32 rstd and the normed bf16 input
-- lm_head reads), numbered `region`; the loss after them is models/llama.lua's compiled
-- ForCausalLMLoss (cx.run.compile_model), whose saved tensors it records in
-- cx.run.compiled_loss_saved. One note lists what the head and the loss save. The embedding's
-- lookup stays as eager code runs it (its output is the first layer's saved input either way).
function M.model_head_hooks(root, t, region)
  local norm = root.children.model and root.children.model.children.norm
  local head = root.children.lm_head
  if not (norm and head) then error("training.compile.scope = \"model\": this model has no final norm and lm_head", 0) end
  local ops, first_op, saved, noted
  return {
    { module = root, first = { post = function(cx)
      if cx.no_grad or not saved or noted then return end
      noted = true
      local all = {}
      for _, x in ipairs(saved) do all[#all + 1] = x end
      for _, x in ipairs(cx.run.compiled_loss_saved or {}) do all[#all + 1] = x end
      cx.notes[#cx.notes + 1] = M.note(all, nil, nil, "the model graph's final norm, lm_head and loss")
      -- the engine keys a compiled graph's host call by layer and direction (sim/engine.c
      -- compiled_graph_of), and the ops outside the partitioned regions stay eager ops there,
      -- each ending a graph's run: a key for the one model graph would still be split by them.
      -- Nor is one call of the whole graph a layer graph's call (hw/calibrated: measured on a
      -- layer's graph): its guards and runtime wrappers go over every parameter of the model
      if M.ckpt_model(t) then
        cx.notes[#cx.notes + 1] = M.ckpt_model_note()
        return
      end
      cx.notes[#cx.notes + 1] = "torch.compile(model): the host's graph call is charged per decoder layer's "
        .. "graph and the head's, as with scope \"layer\", not once a direction for the one model graph "
        .. "(whose call, guarding every parameter, is not measured); "
        .. "the embedding's lookup, the rotary tables and autograd's gradient sums between layers run as "
        .. "eager ops, and the rotary tables are saved where the model graph recomputes them"
    end } },
    { module = norm, first = { pre = function(cx)
      if cx.no_grad then ops = nil; return end
      cx.region, cx.compiling = region, true
      ops, first_op = {}, cx.G:num_ops()
      cx.sac = function(_, spec, index, outs, rg)
        ops[#ops + 1] = { index = index, spec = spec, outs = outs, rg = rg }
      end
    end } },
    { module = head, first = { post = function(cx, _, _, outs)
      if not ops then return end
      cx.region, cx.sac, cx.compiling = nil, nil, nil
      local res = {}
      for _, x in ipairs(outs or {}) do
        if type(x) == "table" and x.id then res[#res + 1] = x end
      end
      saved = M.partition(cx, ops, res, false, false)
      skip_others(cx, ops, first_op)
      ops = nil
    end } },
  }
end

-- Hooks for the modules of class layer_cls: each is one compiled region (numbered as
-- checkpointing numbers its regions), whose ops nn.op reports (cx.sac) and whose partition is
-- made as the layer returns. t: the training table. With checkpointing under a wrapper, every
-- checkpointed layer (each, or every k-th) is also checkpointed whole (strategies/checkpoint.lua
-- makes the same region), torchtitan's order (activation checkpointing applied, then each layer
-- compiled: M.checkpointed_layer); under
-- transformers' checkpointing a checkpointed layer runs eager (M.eager_layer). Registered before
-- any other pass, as checkpoint.hooks are.
--
-- A layer called under no_grad (DPO's reference forward: TRL's _compute_loss runs it in
-- torch.no_grad() with the adapters disabled, or through a reference model that accelerate's
-- prepare_model(evaluation_mode=True) compiles as it compiles the policy) fails the guards of its
-- training graph and is compiled again into an inference graph: nothing saved, its pointwise
-- chains fused. TRL disables gradient checkpointing around it, so a layer that runs eager under
-- transformers' checkpointing compiles there (validation/oracle/check_compile_dpo.py
-- [--checkpointing]). Its region is numbered after the policy's layers (#layers + k), so that
-- no backward recomputation of layer k reaches it. reference: root is DPO's separate reference
-- model (no note of its own).
function M.hooks(root, layer_cls, t, reference)
  local mod = require "vrsim.module"
  local layers = mod.find(root, { [layer_cls] = true })
  if #layers == 0 then error("torch.compile: this model has no " .. layer_cls .. " to compile", 0) end
  local eager = M.eager_layer(t, 1)
  local out, layer_saved, noted, noted_split = {}, {}, reference, reference
  -- the notes, once the model has run: for the layers compiled alone, then for those compiled
  -- with their checkpoint, the saved set of the second layer of the kind where there is one
  -- (the first's input needs no gradient where the embedding is frozen, as under LoRA)
  out[1] = { module = root, first = { post = function(cx)
    if noted or cx.no_grad then return end
    -- (under torch.compile(model) the head's hooks say it: M.ckpt_model_note)
    if eager and not M.ckpt_model(t) then
      noted = true
      cx.notes[#cx.notes + 1] = M.eager_note(t)
    end
    for _, ck in ipairs { false, true } do
      local first, second
      for k = 1, #layers do
        if layer_saved[k] and M.checkpointed_layer(t, k) == ck then
          if first then second = second or k else first = k end
        end
      end
      local k = second or first
      if k then
        noted = true
        local mixed = t.checkpointing and t.checkpoint_impl ~= "transformers" and t.checkpoint_every > 1
        cx.notes[#cx.notes + 1] = M.note(layer_saved[k], k - 1,
          mixed and (ck and "checkpointed, compiled with its checkpoint" or "not checkpointed, compiled alone"))
      end
    end
    if M.torchtune_split(t) and not noted_split then
      noted_split = true
      cx.notes[#cx.notes + 1] = "torch.compile with torchtune's packed batches: each decoder layer is two graphs "
        .. "(its FlexAttention call, under torch.compiler.disable, a graph break), the attention eager between "
        .. "them" .. (t.checkpointing and "; the checkpoint around the layer stays eager: forward keeps the "
        .. "layer's input alone, and backward runs both graphs' forwards and the attention again" or "")
        .. " (validation/oracle/check_torchtune_flex_compile.py)"
    end
  end } }
  if not reference and M.settings(t.compile).scope == "model" then
    for _, e in ipairs(M.model_head_hooks(root, t, #layers + 1)) do out[#out + 1] = e end
  end
  for k, layer in ipairs(layers) do
    local checkpointed = M.checkpointed_layer(t, k)
    -- torchtune's packed batches: two graphs, under an eager checkpoint where the layer is
    -- checkpointed (M.torchtune_split): each partitioned as a plain graph, and run again whole
    -- by the checkpoint's recomputation (rerun, as diffusers' checkpointed blocks: M.block_hooks)
    local split = M.torchtune_split(t)
    local rerun = split and t.checkpointing and (k - 1) % t.checkpoint_every == 0 or nil
    local ops, held, first_op, inference, inside, first_saved
    out[#out + 1] = { module = layer, first = {
      pre = function(cx, _, args)
        inference = cx.no_grad
        -- inside the whole model's graph the layer's input is the previous layer's residual sum
        -- (or Gemma's scaled embedding, a multiply), a fusible op's output; the plain
        -- embedding's gather is not fusible
        local x = args and args[1]
        inside = nil
        if not reference and M.settings(t.compile).scope == "model" then
          inside = { layer = k }
          if type(x) == "table" and x.id and (k > 1 or x.name == "inputs_embeds_scaled") then
            inside.fused_input = storage(x).id
          end
        end
        if M.eager_layer(t, k) and not inference then ops = nil; return end
        cx.region = inference and #layers + k or k
        cx.compiling, cx.compile_checkpointed = true, checkpointed and not inference
        ops, first_op = {}, cx.G:num_ops()
        held = #cx.held
        -- torchtitan's op-level policy (strategies/sac.lua), a new one per forward: dynamo traces
        -- the checkpoint's context_fn into the tag_activation_checkpoint body, whose caching
        -- mode writes the policy's answer for each op into its node's "recompute" tag
        local saves = checkpointed and not inference and t.checkpoint_scope == "op"
                      and require("strategies.sac").decider()
        local function record(_, spec, index, outs, rg)
          ops[#ops + 1] = { index = index, spec = spec, outs = outs, rg = rg, must_save = saves and saves(spec) }
        end
        cx.sac, first_saved = record, nil
        -- the graph break before the attention (M.torchtune_split): the first graph ends with the
        -- tensors the attention reads (live) as its outputs, the attention runs eager (inside the
        -- checkpoint's region where there is one), and the second graph starts after it, a
        -- region of its own where no checkpoint holds the layer
        cx.compile_break = split and function(_, live)
          first_saved = M.partition(cx, ops, live, false, inference, rerun and not inference, inside)
          skip_others(cx, ops, first_op, cx.offload and cx.offload.own)
          cx.sac, cx.compiling = nil, nil
          if not rerun or inference then cx.region = nil end
          return function()
            cx.compiling, cx.sac = true, record
            if not rerun or inference then cx.region = (inference and 3 or 2) * #layers + 1 + k end
            ops, first_op = {}, cx.G:num_ops()
          end
        end or nil
      end,
      post = function(cx, _, _, outs)
        if not ops then return end
        cx.region, cx.sac, cx.compiling, cx.compile_checkpointed = nil, nil, nil, nil
        cx.compile_break = nil
        local res = {}
        for _, t in ipairs(outs or {}) do if type(t) == "table" and t.id then res[#res + 1] = t end end
        -- what the layer hands to the framework to hold (a KV cache's tensors) is its output too
        for i = held + 1, #cx.held do res[#res + 1] = cx.held[i] end
        local saved = M.partition(cx, ops, res, checkpointed and not inference, inference,
                                  rerun and not inference or nil, inside)
        -- (two graphs: what both save, the first's first)
        if first_saved then
          local both = table.move(first_saved, 1, #first_saved, 1, {})
          saved = table.move(saved, 1, #saved, #both + 1, both)
        end
        if not inference then layer_saved[k] = saved end
        -- the layer's other ops (a Python variable's reference dropped, nn.release) make nothing:
        -- the compiled backward has no such step; what it recomputes is dropped after its last use
        -- (activation offloading's pack of a checkpointed layer's input, made by the eager
        -- checkpoint around the compiled layer, is not one of them)
        skip_others(cx, ops, first_op, cx.offload and cx.offload.own)
        ops = nil
      end,
    } }
  end
  return out
end

-- ---- diffusers' regional compilation --------------------------------------------------------

-- The diffusion families whose compiled blocks are modelled, and the block classes compiled
-- (validation/oracle/check_compile_diffusion.py): Flux's are its _repeated_blocks (diffusers 0.42:
-- ModelMixin.compile_repeated_blocks calls .compile() on every submodule of those classes).
-- SD3Transformer2DModel declares no _repeated_blocks (compile_repeated_blocks raises ValueError),
-- so its JointTransformerBlocks are compiled one by one with block.compile(), as accelerate's
-- compile_regions compiles a ModuleList of one class (its other modules, compiled one by one
-- there, run eager here).
-- The UNets' (SDXL's, SD 1.5's) UNet2DConditionModel._repeated_blocks is BasicTransformerBlock
-- (their ResNet blocks, the Transformer2DModels' norms and projections, the rest run eager).
M.REPEATED_BLOCKS = { flux = { "FluxTransformerBlock", "FluxSingleTransformerBlock" },
                      sd3 = { "JointTransformerBlock" }, sdxl = { "BasicTransformerBlock" },
                      sd = { "BasicTransformerBlock" } }

-- Why training.compile is not modelled for diffusion family `name` under training table t (nil
-- when it is). Raises (exit 2) on a settings value compile does not know.
function M.diffusion_refusal(t, name)
  if type(t.compile) == "table" and t.compile.scope == "model" then
    return ("%s: training.compile.scope = \"model\" is not modelled: torch.compile of the whole "
            .. "denoiser (accelerate's dynamo_backend without regional compilation) is one graph "
            .. "across its blocks, the embeddings and the rotary tables, whose partition is not "
            .. "built; scope \"layer\" compiles each repeated block as diffusers' "
            .. "compile_repeated_blocks does%s"):format(name, M.REPEATED_BLOCKS[name] and "" or
            " (modelled for flux, sd3, sdxl and sd)")
  end
  local s = M.settings(t.compile)
  if not s then return nil end
  if not M.REPEATED_BLOCKS[name] then
    return ("%s: training.compile is not modelled for this model (its compiled blocks are not "
            .. "checked against the partitioner; Flux's, SD3's, SDXL's and SD 1.5's are)"):format(name)
  end
  if type(t.compile) == "table" and t.compile.loss ~= nil then
    return ("%s: training.compile.loss is torchtune's chunked cross-entropy; a diffusion loss "
            .. "is not compiled"):format(name)
  end
  local prec = M.CHECKED_PRECISIONS[name]
  if not prec[t.precision] then
    local list = {}
    for k in pairs(prec) do list[#list + 1] = k end
    table.sort(list)
    return ("%s: training.compile with precision %s is not modelled (the compiled blocks' "
            .. "partition is checked for %s)"):format(name, t.precision, table.concat(list, ", "))
  end
  if t.attention == "eager" then
    return ("%s: training.compile with attention = \"eager\" is not modelled (the compiled blocks "
            .. "are checked with PyTorch's SDPA, AttnProcessor2_0)"):format(name)
  end
  if t.lora and t.lora.dropout and t.lora.dropout > 0 then
    return ("%s: training.compile with LoRA dropout %s is not modelled (dropout's random masks "
            .. "in the compiled blocks are not checked; the scripts' default, 0, is)"):format(
            name, tostring(t.lora.dropout))
  end
  if t.lora and t.lora.targets then
    local want, got = {}, {}
    for _, x in ipairs(M.LORA_CHECKED) do want[x] = true end
    for _, x in ipairs(type(t.lora.targets) == "table" and t.lora.targets or { t.lora.targets }) do
      if not want[x] then got[#got + 1] = tostring(x) end
    end
    if #got > 0 then
      return ("%s: training.compile with LoRA on %s is not modelled (the compiled blocks are "
              .. "checked with the script's targets, %s)"):format(name, table.concat(got, ", "),
              table.concat(M.LORA_CHECKED, ", "))
    end
  end
  if t.strategy ~= "none" and t.strategy ~= "ddp" then
    return ("%s: training.compile under strategy %s is not modelled (the compiled blocks with "
            .. "sharded parameters are not checked)"):format(name, t.strategy)
  end
  return nil
end

-- The precisions each family's compiled blocks are checked with: the scripts' LoRA (bf16
-- weights; Flux and SD3 under Accelerate's bf16 autocast), the full model in bf16, and for the
-- UNets the full model's fp32 weights under bf16 autocast (train_text_to_image_sdxl.py's and
-- train_text_to_image.py's mixed precision)
M.CHECKED_PRECISIONS = { flux = { lora_bf16 = true, bf16 = true }, sd3 = { lora_bf16 = true, bf16 = true },
                         sdxl = { lora_bf16 = true, bf16 = true, amp_bf16 = true },
                         sd = { lora_bf16 = true, bf16 = true, amp_bf16 = true } }

-- peft's targets the compiled blocks are checked with (the scripts' to_k, to_q, to_v, to_out.0)
M.LORA_CHECKED = { "to_k", "to_q", "to_v", "to_out.0" }

-- Hooks compiling every module of the classes `classes` (a list) in the tree `root`, as
-- diffusers' compile_repeated_blocks compiles them: each block one graph, partitioned as a
-- decoder layer is (M.partition), the rest of the model eager. diffusers' gradient
-- checkpointing is torch.utils.checkpoint(block.__call__, ...) in the model's eager forward: the
-- checkpoint wraps the compiled block (strategies/checkpoint.lua module_hooks' region, already
-- open when the block's hook runs), so the block's graph is the same, the checkpoint's pack hook
-- drops what it saves, and the checkpoint's recomputation runs the forward graph again before
-- the backward graph (M.partition's rerun). Register these inside the checkpoint's first hooks.
-- The run carries one note per class: the saved set of the second block of it (the first
-- double block's inputs need no gradient under LoRA: the embedders before it are frozen).
function M.block_hooks(root, classes, t)
  local mod = require "vrsim.module"
  local set = {}
  for _, c in ipairs(classes) do set[c] = true end
  local blocks = {}
  mod.walk(root, function(m) if set[m.cls] then blocks[#blocks + 1] = m end end)
  if #blocks == 0 then error("torch.compile: this model has no " .. table.concat(classes, " or ") .. " to compile", 0) end
  local saved_of, noted = {}, false
  local out = {}
  out[1] = { module = root, first = { post = function(cx)
    if noted or cx.no_grad then return end
    noted = true
    cx.notes = cx.notes or {}
    for _, c in ipairs(classes) do
      local first, second
      for k, b in ipairs(blocks) do
        if b.cls == c and saved_of[k] then
          if first then second = second or k else first = k end
        end
      end
      local k = second or first
      if k then
        cx.notes[#cx.notes + 1] = M.note(saved_of[k], blocks[k].layer or (k - 1), c, "transformer block")
      end
    end
    -- the time is the decoder layers' compile timing (each Inductor kernel and each call of a
    -- compiled block at the host time measure_compiled_call.py measured, sim/engine.c); measured on
    -- H100s (validation/results/gen7_dcompile_records_h100.jsonl, diffusion_h100_gen8_hostprof*.jsonl):
    -- Flux's compiled blocks -1.6 %, SD 3.5's -16 to -22 %, the SDXL UNet's -34 to -50 %
    if classes[1]:find("^Flux") then
      cx.notes[#cx.notes + 1] = "torch.compile on a diffusion model: step time checked for Flux's "
        .. "compiled blocks on one H100 (-1.6 %); the memory is checked against the partitioner"
    else
      cx.notes[#cx.notes + 1] = "torch.compile on a diffusion model: step time not validated for "
        .. "these blocks (SD 3.5's and the SDXL UNet's compiled steps ran 16-50 % slower than "
        .. "predicted on H100s: their host time inside the real blocks is above what the "
        .. "microbenchmark of a compiled block gives); the memory is checked against the partitioner"
    end
    if t.checkpointing then
      cx.notes[#cx.notes + 1] = "torch.compile: gradient checkpointing wraps each compiled block "
        .. "(diffusers' torch.utils.checkpoint around block.__call__): forward keeps each block's "
        .. "arguments alone, and backward runs the block's forward graph again, what the "
        .. "partitioner saves and recomputes, before its backward graph"
    end
  end } }
  for k, b in ipairs(blocks) do
    local ops, first_op, own
    out[#out + 1] = { module = b, first = {
      pre = function(cx)
        ops = nil
        if cx.no_grad then return end
        -- a region of its own, numbered as checkpointing numbers its regions, unless the
        -- checkpoint around the block opened one
        own = cx.region == nil
        if own then
          cx.region_count = (cx.region_count or 0) + 1
          cx.region = cx.region_count
        end
        cx.compiling = true
        ops, first_op = {}, cx.G:num_ops()
        cx.sac = function(_, spec, index, outs, rg)
          ops[#ops + 1] = { index = index, spec = spec, outs = outs, rg = rg }
        end
      end,
      post = function(cx, _, _, outs)
        if not ops then return end
        if own then cx.region = nil end
        cx.sac, cx.compiling = nil, nil
        local res = {}
        for _, x in ipairs(outs or {}) do if type(x) == "table" and x.id then res[#res + 1] = x end end
        saved_of[k] = M.partition(cx, ops, res, false, false, not own)
        skip_others(cx, ops, first_op)
        ops = nil
      end,
    } }
  end
  return out
end

return M
