"""Techniques that change the model or its loss: torch.compile, torchao float8, op-level
selective checkpointing, Liger's fused linear cross-entropy and torchtune's chunked loss.

Each plan field is vrsim's scenario field of the same name (`vrsim fields`), and each hook does
what the library's own recipe does on a transformers model:

  compile           true or {"scope": "layer"}: every decoder layer compiled on its own, in place
                    (torchtune's training.compile_model: `m.compile()` per decoder layer, default
                    mode, not fullgraph), the embedding, final norm, head and loss eager.
  float8            {"recipe": "tensorwise" | "rowwise" | "rowwise_with_gw_hp"}: torchao's
                    convert_to_float8_training with Float8LinearConfig.from_recipe_name(recipe)
                    and torchtitan's module filter (not the output layer, only Linears whose
                    in_features and out_features are both divisible by 16).
  loss              "liger_fused": apply_liger_kernel_to_llama with only
                    fused_linear_cross_entropy (rope, rms_norm, swiglu off: vrsim models only the
                    loss), then model(input_ids, labels).loss, which runs Liger's lce_forward.
                    "chunked": torchtune's recipe step (full_finetune_single_device.py
                    _loss_step) with CEWithChunkedOutputLoss(num_output_chunks=8) and the decoder's
                    chunked_output, on the transformers model (see chunked_loss below).
  quant             "torchao_nf4" (with mode lora_bf16 and compile): torchtune's QLoRA builders'
                    base weights, after peft's LoRA and before compile: every Linear of the
                    decoder layers (peft's base layers and the untargeted ones; not the adapters,
                    not lm_head) gets its weight as torchao's NF4Tensor (to_nf4: block 64, scaler
                    block 256) and runs linear_nf4, as torchtune's FrozenNF4Linear and
                    LoRALinear(quantize_base=True) do; then torch.cuda.empty_cache(), so that the
                    bf16 weights' freed blocks are not the steps' reserve (torchtune quantizes
                    each Linear as it builds it).
  checkpoint_scope  "op" (with ckpt true): every decoder layer under non-reentrant
                    torch.utils.checkpoint with early_stop=False and torchtitan's op-level
                    SelectiveAC policy as its context_fn (validation/oracle/capture.py
                    torchtitan_op_sac_context, the policy the oracle captures use).
  code              "torchtune": torchtune 0.6.1's own decoder instead of the transformers model
                    (build_torchtune: llama3() or qwen2() of the hf_config's sizes, built directly in bf16 on
                    the GPU as full_finetune_single_device builds it, its output in 8 chunks);
                    with loss "chunked", mode bf16, build direct, no checkpointing, LoRA or other
                    model technique. torchtune 0.6.1 needs torchao 0.13 (torchao.dtypes.nf4tensor):
                    validation/PROVENANCE.md, "Wheels carried to the GPU machine".
  checkpoint_impl   "wrapper" (with ckpt true and compile): torchtitan's order instead: each
                    decoder layer wrapped in torch's checkpoint_wrapper (non-reentrant,
                    preserve_rng_state=False, with the op-level policy under checkpoint_scope "op",
                    the whole layer otherwise, as its apply_ac does), then the wrapper compiled
                    with fullgraph=True (its apply_compile), so the checkpoint is traced inside the
                    layer's graph and the min-cut partitioner sees the policy's tags;
                    transformers' own checkpointing is turned off. The layer's
                    write of its output-capturing context inside the checkpoint is let through
                    (skip_fwd_side_effects_in_bwd_under_checkpoint, as accelerate sets it).
"""
import os
import sys

MODEL_FIELDS = ("compile", "float8", "loss", "checkpoint_scope", "checkpoint_impl", "code")

HERE = os.path.dirname(os.path.abspath(__file__))
LOSSES = ("full", "liger_fused", "chunked")
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
# torchtune's CEWithChunkedOutputLoss default, and the recipe's ignore index
NUM_OUTPUT_CHUNKS = 8
IGNORE_INDEX = -100


def base_of(model):
    """The transformers *ForCausalLM under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def check(cfg):
    """Refuse, before anything is built, a value this harness does not run as vrsim reads it."""
    comp = cfg.get("compile")
    if comp is not None and comp is not True and comp is not False:
        if not isinstance(comp, dict) or set(comp) - {"scope", "mode", "fullgraph"} \
                or comp.get("scope", "layer") != "layer" or comp.get("mode", "default") != "default" \
                or comp.get("fullgraph", False) is not False:
            raise ValueError(f"compile {comp!r}: only true or {{'scope': 'layer'}} (mode default, not fullgraph)")
    f8 = cfg.get("float8")
    if f8 is not None:
        if not isinstance(f8, dict) or set(f8) - {"recipe", "fsdp_float8_all_gather"} \
                or f8.get("recipe", "tensorwise") not in FLOAT8_RECIPES or f8.get("fsdp_float8_all_gather"):
            raise ValueError(f"float8 {f8!r}: {{'recipe': one of {FLOAT8_RECIPES}}} on one GPU")
    loss = cfg.get("loss")
    if loss is not None and loss not in LOSSES:
        raise ValueError(f"loss {loss!r}: one of {LOSSES}")
    scope = cfg.get("checkpoint_scope")
    if scope is not None:
        if scope not in ("layer", "op"):
            raise ValueError(f"checkpoint_scope {scope!r}: layer or op")
        if not cfg.get("ckpt"):
            raise ValueError("checkpoint_scope without ckpt: vrsim reads it only with checkpointing on")
    code = cfg.get("code")
    if code is not None and code != "transformers":
        if code != "torchtune":
            raise ValueError(f"code {code!r}: transformers or torchtune")
        others = [k for k in MODEL_FIELDS if k not in ("code", "loss") and cfg.get(k) not in (None, False)]
        hf = cfg.get("hf_config") or {}
        if (cfg.get("loss") != "chunked" or cfg.get("mode") != "bf16" or cfg.get("build") != "direct"
                or cfg.get("ckpt") or cfg.get("lora") or others or hf.get("model_type") not in ("llama", "qwen2")
                or (hf.get("model_type") == "llama" and hf.get("tie_word_embeddings"))):
            raise ValueError("code torchtune: an untied Llama or a Qwen2 hf_config, loss chunked, mode bf16, build "
                             f"direct, no ckpt, LoRA or {others or 'other model technique'}")
    impl = cfg.get("checkpoint_impl")
    if impl is not None and (impl != "wrapper" or not cfg.get("ckpt")
                             or cfg.get("compile") is not True or cfg.get("quant") is not None):
        raise ValueError(f"checkpoint_impl {impl!r}: only 'wrapper', with ckpt and compile true, no quant")


def float8_filter(mod, fqn):
    """torchtitan's module_filter_fn (components/quantization/float8.py) with the output layer
    named as transformers names it: lm_head stays nn.Linear, as does any Linear whose dims
    _scaled_mm cannot take (not divisible by 16)."""
    import torch.nn as nn
    if not isinstance(mod, nn.Linear):
        return False
    if fqn.split(".")[-1] == "lm_head":
        return False
    return mod.in_features % 16 == 0 and mod.out_features % 16 == 0


def apply_float8(cfg, model):
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    recipe = cfg["float8"].get("recipe", "tensorwise")
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=float8_filter)
    return model


def apply_op_sac(model):
    """Replace transformers' per-layer checkpoint (enabled by the plan's ckpt) with the same
    non-reentrant checkpoint carrying torchtitan's op-level policy, early_stop=False as
    torchtitan's checkpoint_wrapper passes it."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))
    from capture import torchtitan_op_sac_context
    base = base_of(model)
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={
        "use_reentrant": False, "context_fn": torchtitan_op_sac_context(torch), "early_stop": False})
    return model


def apply_compile(model):
    """torchtune's compile_model: each decoder layer compiled in place (nn.Module.compile), so
    transformers' layer list and its checkpointing wrapper call the compiled forward."""
    for layer in base_of(model).model.layers:
        layer.compile()
    return model


def apply_wrapper_compile(cfg, model):
    """torchtitan's apply_ac (the op-level policy, or the whole layer) then apply_compile on each
    decoder layer."""
    import torch
    import torch._dynamo
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))
    from capture import torchtitan_op_sac_context
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    base = base_of(model)
    base.gradient_checkpointing_disable()
    layers = base.model.layers
    for i, layer in enumerate(layers):
        policy = {"context_fn": torchtitan_op_sac_context(torch)} if cfg.get("checkpoint_scope") == "op" else {}
        wrapped = checkpoint_wrapper(layer, preserve_rng_state=False, **policy)
        layers[i] = torch.compile(wrapped, fullgraph=True)
    return model


def _nf4():
    """torchao's NF4 module (torchao.dtypes.nf4tensor before 0.18, where torchtune 0.6.1 reads it)."""
    import importlib
    try:
        return importlib.import_module("torchao.dtypes.nf4tensor")
    except ImportError:
        return importlib.import_module("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")


def apply_torchao_nf4(model):
    """torchtune's QLoRA base weights (see quant above). Returns the model."""
    import types
    import torch
    nf4 = _nf4()

    def forward(self, x):
        return nf4.linear_nf4(input=x, weight=self.weight)
    n = 0
    for layer in base_of(model).model.layers:
        for name, m in layer.named_modules():
            if type(m) is torch.nn.Linear and "lora_" not in name:
                if m.bias is not None:
                    raise ValueError(f"quant torchao_nf4: {name} has a bias (torchtune's Linears have none)")
                m.weight = torch.nn.Parameter(nf4.to_nf4(m.weight.detach()), requires_grad=False)
                m.forward = types.MethodType(forward, m)
                n += 1
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return model


def build_torchtune(cfg):
    """torchtune 0.6.1's decoder of the plan's hf_config (the oracle's capture.py
    torchtune_decoder: llama3(), llama3_1() or qwen2()), under the default dtype measure_llama.py
    set (build direct: bf16) on the GPU, as full_finetune_single_device builds it (`with
    training.set_default_dtype(self._dtype), self._device: config.instantiate(cfg.model)`)."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))
    from capture import torchtune_decoder
    hf = cfg["hf_config"]
    return torchtune_decoder(torch, hf, hf["num_hidden_layers"])


def apply_liger(model):
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    base = base_of(model)
    if type(base).__name__ != "LlamaForCausalLM":
        raise ValueError(f"loss liger_fused: this harness patches Llama only, not {type(base).__name__}")
    apply_liger_kernel_to_llama(rope=False, cross_entropy=False, fused_linear_cross_entropy=True,
                                rms_norm=False, swiglu=False, model=base)
    return model


def after_peft(cfg, model):
    if not any(k in cfg for k in MODEL_FIELDS):
        return model
    check(cfg)
    # torchtitan's order: float8 conversion, then activation checkpointing, then compile
    if cfg.get("float8") is not None:
        model = apply_float8(cfg, model)
    if cfg.get("checkpoint_impl") == "wrapper":
        model = apply_wrapper_compile(cfg, model)
    else:
        if cfg.get("checkpoint_scope") == "op":
            model = apply_op_sac(model)
        if cfg.get("quant") == "torchao_nf4":
            model = apply_torchao_nf4(model)
        if cfg.get("compile") not in (None, False):
            model = apply_compile(model)
    if cfg.get("loss") == "liger_fused":
        model = apply_liger(model)
    return model


def chunked_loss(model, ids):
    """torchtune 0.6.1's _loss_step with CEWithChunkedOutputLoss, on a transformers model.

    torchtune itself does not import beside torchao 0.18 (its __init__ needs
    torchao.dtypes.nf4tensor, gone from torchao), so its three pieces are written out here as its
    source has them: TransformerDecoder.chunked_output (the head on hidden.chunk(8, dim=1)), the
    recipe's label shift (hstack of labels[..., 1:] and an ignore column) and the loss (labels
    chunked alike, each chunk reshaped, upcast with .float() and summed by F.cross_entropy, the
    total divided by the count of labels not ignored). The recipe deletes the logits list after
    the loss, before backward."""
    import torch
    import torch.nn.functional as F
    base = base_of(model)
    if hasattr(base, "set_num_output_chunks"):
        # torchtune's own decoder (code torchtune): its forward returns the chunks itself
        logits = base(ids)
    else:
        hidden = base.model(input_ids=ids).last_hidden_state
        logits = [base.lm_head(chunk) for chunk in hidden.chunk(NUM_OUTPUT_CHUNKS, dim=1)]
        del hidden
    ignore = torch.full((ids.shape[0], 1), IGNORE_INDEX, device=ids.device)
    labels = torch.hstack((ids[..., 1:], ignore))
    total_elements = (labels != IGNORE_INDEX).sum()
    label_chunks = [t.reshape(-1) for t in labels.chunk(NUM_OUTPUT_CHUNKS, dim=1)]
    logit_chunks = [c.reshape(-1, c.size(-1)) for c in logits]
    total_loss = 0.0
    for lc, tc in zip(logit_chunks, label_chunks):
        total_loss += F.cross_entropy(lc.float(), tc, ignore_index=IGNORE_INDEX, reduction="sum")
    loss = total_loss / total_elements
    del logits, logit_chunks
    return loss


def forward_loss(cfg, model, ids):
    loss = cfg.get("loss")
    if loss == "chunked":
        return chunked_loss(model, ids)
    if loss == "liger_fused":  # the patched forward: Liger's fused linear cross-entropy, no logits
        return model(input_ids=ids, labels=ids).loss
    return None


def cpu_check():
    """Each hook on a tiny Llama on the CPU, so a GPU run cannot fail on a typo: compile, op-level
    checkpointing and the chunked loss run forward and backward (their gradients against the
    plain model's); float8 and Liger need a GPU to run, so their conversion and patch are
    checked (the Linears converted, lm_head left; the forward replaced)."""
    import copy
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    lcfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False, attn_implementation="sdpa")
    ref = LlamaForCausalLM(lcfg)
    ids = torch.randint(0, 256, (2, 32))

    def grads(cfg):
        model = copy.deepcopy(ref)
        if cfg.get("ckpt"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model = after_peft(cfg, model)
        model.train()
        loss = forward_loss(cfg, model, ids)
        if loss is None:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in base_of(model).named_parameters()}

    def same(a, b, what, tol=1e-4):
        la, ga = a
        lb, gb = b
        assert torch.allclose(la, lb, atol=tol), f"{what}: loss {la} != {lb}"
        for n in ga:
            key = n.replace("._orig_mod", "").replace("._checkpoint_wrapped_module", "")
            assert torch.allclose(ga[n], gb[key], atol=tol), f"{what}: grad of {n} differs"
        print(f"ok  {what}: loss {float(la):.5f}, {len(ga)} gradients equal the plain model's")

    plain = grads({})
    same(grads({"loss": "chunked"}), plain, "loss chunked")
    same(grads({"ckpt": True, "checkpoint_scope": "op"}), plain, "checkpoint_scope op")
    # the policy sees the layer's ops: 7 mm a Llama layer (q, k, v, o, gate, up, down)
    from capture import torchtitan_op_sac_context
    seen = []
    ctx = torchtitan_op_sac_context(torch)
    import torch.utils.checkpoint as tuc
    orig = tuc.create_selective_checkpoint_contexts

    def spy(policy, *a, **k):
        def p(c, func, *args, **kw):
            r = policy(c, func, *args, **kw)
            if not c.is_recompute and func in (torch.ops.aten.mm.default, torch.ops.aten.linear.default):
                seen.append(r.name)
            return r
        return orig(p, *a, **k)
    tuc.create_selective_checkpoint_contexts = spy
    try:
        m = copy.deepcopy(ref)
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        apply_op_sac(m)
        m.train()
        m(input_ids=ids, labels=ids).loss.backward()
    finally:
        tuc.create_selective_checkpoint_contexts = orig
    del ctx
    assert len(seen) == 14 and seen[:7] == ["MUST_SAVE", "PREFER_RECOMPUTE"] * 3 + ["MUST_SAVE"], seen
    print(f"ok  checkpoint_scope op: forward policy per layer {seen[:7]}")
    same(grads({"compile": True}), plain, "compile", tol=1e-3)
    same(grads({"compile": {"scope": "layer"}}), plain, "compile scope layer", tol=1e-3)
    same(grads({"ckpt": True, "checkpoint_scope": "op", "compile": True, "checkpoint_impl": "wrapper"}), plain,
         "checkpoint_impl wrapper (op policy, compiled wrapper)", tol=1e-3)
    same(grads({"ckpt": True, "compile": True, "checkpoint_impl": "wrapper"}), plain,
         "checkpoint_impl wrapper (whole layer, compiled wrapper)", tol=1e-3)

    from torchao.float8.float8_linear import Float8Linear
    for recipe in FLOAT8_RECIPES:
        m = after_peft({"float8": {"recipe": recipe}}, copy.deepcopy(ref).to(torch.bfloat16))
        conv = [n for n, x in m.named_modules() if isinstance(x, Float8Linear)]
        assert len(conv) == 14 and not isinstance(m.lm_head, Float8Linear), conv
        print(f"ok  float8 {recipe}: {len(conv)} Linears converted ({conv[0]} ...), lm_head left")

    m = after_peft({"loss": "liger_fused"}, copy.deepcopy(ref))
    assert m.forward.__func__.__name__ == "lce_forward", m.forward
    m.train()
    try:  # as far as the CPU goes: Liger's Triton kernel inside its fused forward
        forward_loss({"loss": "liger_fused"}, m, ids)
        reached = "ran"
    except RuntimeError as e:
        import traceback
        names = [f.name for f in traceback.extract_tb(e.__traceback__)]
        assert "fused_linear_cross_entropy_forward" in names, names
        reached = "reached fused_linear_cross_entropy_forward's Triton launch"
    print(f"ok  loss liger_fused: forward is {m.forward.__func__.__module__}.lce_forward, {reached}")

    # torchao NF4 under compile: a LoRA model's Linears on NF4Tensor, compiled layers, forward
    # and backward; the adapters get gradients, the 4-bit weights none
    # (a bf16 model whose Linears have a multiple of 64 x 256 weights, as to_nf4 needs)
    from peft import LoraConfig, get_peft_model
    qcfg = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False, attn_implementation="sdpa")
    q = get_peft_model(LlamaForCausalLM(qcfg).to(torch.bfloat16), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                      target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    q = after_peft({"quant": "torchao_nf4", "compile": True}, q)
    kinds = [type(m.weight).__name__ for n, m in base_of(q).model.layers.named_modules()
             if type(m) is torch.nn.Linear and "lora_" not in n]
    assert kinds == ["NF4Tensor"] * (7 * qcfg.num_hidden_layers), kinds
    q(input_ids=ids, labels=ids).loss.backward()
    lora_grads = [p.grad for n, p in q.named_parameters() if "lora_" in n]
    assert lora_grads and all(g is not None for g in lora_grads)
    print(f"ok  quant torchao_nf4: {len(kinds)} Linears on NF4Tensor through linear_nf4, compiled "
          f"layers, forward and backward, {len(lora_grads)} adapter gradients")

    for bad in ({"compile": {"scope": "model"}}, {"float8": {"recipe": "x"}}, {"loss": "fused"},
                {"checkpoint_scope": "op"}, {"checkpoint_scope": "attention", "ckpt": True},
                {"ckpt": True, "checkpoint_scope": "op", "checkpoint_impl": "wrapper"},
                {"compile": True, "checkpoint_impl": "wrapper"}):
        try:
            check(bad)
        except ValueError as e:
            print(f"ok  refused {bad}: {e}")
        else:
            raise AssertionError(f"accepted {bad}")
    print("cpu-check: all hooks ran")


if __name__ == "__main__":
    if sys.argv[1:] != ["--cpu-check"]:
        sys.exit("usage: tech_model.py --cpu-check")
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))
    cpu_check()
