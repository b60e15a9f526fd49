"""Techniques that change the build, the optimizer or the step: QLoRA through bitsandbytes,
bitsandbytes' 8-bit and paged optimizers, the optimizer step in backward, activation offloading
and generation with a KV cache. Each runs the user path of its library (and the one vrsim's
lua/strategies/ model), with the plan line's fields named as vrsim's scenario fields:

  optimizer = "adamw8bit" | "paged_adamw_8bit"
      bitsandbytes.optim.AdamW(optim_bits=8, is_paged=...) with the Trainer's Adam arguments, as
      transformers' Trainer builds it for optim="adamw_bnb_8bit" / "paged_adamw_8bit"
      (trainer_optimizer.py _get_bitsandbytes_optimizer).
  optimizer_in_backward = true
      torchtune's optimizer_in_bwd: one optimizer per parameter (the plan's `optim`, over a
      one-tensor list; with `optimizer` above, that bitsandbytes optimizer over it, as
      torchtune's 8B_full_single_device.yaml steps PagedAdamW8bit),
      torchtune.training.memory.register_optim_in_bwd_hooks (step and zero_grad in a
      post-accumulate-grad hook); the loop's step and zero_grad do nothing.
  activation_offload = true
      torchtune's OffloadActivations (defaults) around the model's forward, the head under a
      NoOpManager as get_act_offloading_ctx_manager puts it. torchtune's recipes compute the loss
      outside the context; the harness's loss is computed inside the transformers forward, so
      the NoOpManager stays entered from the head to the end of that forward, and the context is
      left there, before backward, as the recipe leaves it.
  mode = "qlora_bf16" (with quant = "nf4")
      the random-init model saved to a temporary directory and loaded with from_pretrained(...,
      quantization_config=BitsAndBytesConfig(nf4, double quant, bf16 compute),
      dtype=bfloat16, device_map={"": 0}); measure_llama.py's LoRA path then applies peft. peft's
      prepare_model_for_kbit_training is NOT called: its fp32 up-cast of the norms, embeddings
      and head is not modelled by vrsim (lua/recipes/trl.lua says so in a note), so the harness
      measures the path vrsim models; checkpointing and enable_input_require_grads are what
      prepare_model_for_kbit_training would otherwise add.
  inference = true, generate = {prompt, max_new_tokens, batch}
      transformers' model.generate(ids, max_new_tokens=M, do_sample=False) with its DynamicCache,
      eos_token_id unset so that every row generates M tokens; the step's peak is the generate's.

torchtune 0.6.1's package __init__ files import its datasets (HF `datasets`) and torchao names
that torchao 0.18 moved; the two modules used here are imported without those __init__ files
(see _torchtune), their code unchanged.

  tech_train.py --cpu-check validation/harness/plans/plan_gen4_tech_train.jsonl
"""
import contextlib
import importlib
import importlib.util
import os
import sys
import tempfile
import types

TRAIN_FIELDS = ("optimizer", "optimizer_in_backward", "activation_offload", "quant", "generate",
                "inference")
BNB_OPTIMIZERS = {"adamw8bit": False, "paged_adamw_8bit": True}  # name -> is_paged
GENERATE_KEYS = ("prompt", "max_new_tokens", "batch")


def check(cfg):
    """The plan line's technique fields, checked before anything is built (ValueError)."""
    opt = cfg.get("optimizer")
    if opt is not None and opt not in BNB_OPTIMIZERS:
        raise ValueError(f"optimizer {opt!r}: the harness runs {sorted(BNB_OPTIMIZERS)}")
    if cfg.get("optimizer_in_backward") and int(cfg.get("accum", 1)) != 1:
        raise ValueError("optimizer_in_backward: no accumulation (torchtune refuses it)")
    if cfg.get("activation_offload") and not cfg.get("ckpt"):
        raise ValueError("activation_offload needs ckpt (torchtune's recipes refuse it without)")
    if cfg.get("quant") == "torchao_nf4":
        # torchao's NF4 (tech_model.apply_torchao_nf4): torchtune's QLoRA, compiled
        if cfg.get("mode") != "lora_bf16" or not cfg.get("compile"):
            raise ValueError("quant = \"torchao_nf4\" goes with mode lora_bf16 and compile")
    elif (cfg.get("mode") == "qlora_bf16") != (cfg.get("quant") == "nf4") or cfg.get("quant") not in (None, "nf4"):
        raise ValueError("quant = \"nf4\" goes with mode qlora_bf16, and only it")
    g = cfg.get("generate")
    if g is not None:
        if not cfg.get("inference") or sorted(g) != sorted(GENERATE_KEYS):
            raise ValueError(f"generate needs inference = true and exactly {GENERATE_KEYS}")
        if int(g["batch"]) != int(cfg["batch"]) or int(g["prompt"]) != int(cfg["seq"]):
            raise ValueError("generate: batch and seq must be generate.batch and generate.prompt")
    elif cfg.get("inference"):
        raise ValueError("inference without generate is not run by this harness")


def _torchtune(module):
    """torchtune.<module>, imported without running torchtune's and torchtune.training's package
    __init__ (they import torchtune.datasets, which needs HF `datasets`, and torchao names that
    0.18 no longer has); torchao's NF4 tensor module is given under the name torchtune reads."""
    for name in ("torchtune", "torchtune.training"):
        if name in sys.modules:
            continue
        parent, _, leaf = name.rpartition(".")
        if parent:
            path = [os.path.join(sys.modules[parent].__path__[0], leaf)]
        else:
            path = list(importlib.util.find_spec(name).submodule_search_locations)
        pkg = types.ModuleType(name)
        pkg.__path__ = path
        sys.modules[name] = pkg
    try:
        importlib.import_module("torchao.dtypes.nf4tensor")
    except ImportError:
        sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
            "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    return importlib.import_module("torchtune." + module)


def build_model(cfg, model_cls, lcfg, dtype, device_map=None):
    check(cfg)
    if cfg.get("code") == "torchtune":
        import tech_model
        tech_model.check(cfg)
        return tech_model.build_torchtune(cfg)
    if cfg.get("quant") != "nf4":
        return None
    import torch
    from transformers import BitsAndBytesConfig
    with tempfile.TemporaryDirectory() as tmp:
        # the random-init checkpoint, made on the CPU so that the GPU's allocator starts empty
        base = model_cls._from_config(lcfg, dtype=torch.bfloat16)
        base.save_pretrained(tmp)
        del base
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                 bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        model = model_cls.from_pretrained(tmp, quantization_config=bnb, dtype=torch.bfloat16,
                                          device_map=device_map or {"": 0},
                                          attn_implementation=lcfg._attn_implementation)
    # measure_llama.py then does what prepare_model_for_kbit_training and get_peft_model would,
    # less the fp32 up-cast: non-reentrant checkpointing, enable_input_require_grads, peft LoRA
    return model


class _InBackward:
    """The loop's optimizer under optimizer_in_bwd: the steps ran in backward, as in torchtune's
    recipes, which call neither step() nor zero_grad() on it."""

    def __init__(self, optim_dict):
        self.optim_dict = optim_dict

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        pass


def make_optimizer(cfg, model, params):
    name = cfg.get("optimizer")
    if name is not None:
        import bitsandbytes as bnb

        def bnb_one(ps):
            # TrainingArguments' defaults: adam_beta1/2 0.9/0.999, adam_epsilon 1e-8, weight_decay 0
            return bnb.optim.AdamW(ps, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                   optim_bits=8, is_paged=BNB_OPTIMIZERS[name])
        if not cfg.get("optimizer_in_backward"):
            return bnb_one(params)
        # torchtune's recipes: config.instantiate(cfg_optimizer, [p]) for each parameter
        optim_dict = {p: bnb_one([p]) for p in params}
        _torchtune("training.memory").register_optim_in_bwd_hooks(model=model, optim_dict=optim_dict)
        return _InBackward(optim_dict)
    if not cfg.get("optimizer_in_backward"):
        return None
    import torch
    optim = cfg["optim"]
    if optim == "sgd_momentum":
        def one(p):
            return torch.optim.SGD([p], lr=1e-3, momentum=0.9, foreach=True)
    else:
        kw = {"adamw_foreach": {"foreach": True}, "adamw_fused": {"fused": True},
              "adamw_forloop": {"foreach": False}}[optim]

        def one(p):
            return torch.optim.AdamW([p], lr=1e-5, **kw)
    # the recipes' _setup_optimizer: an optimizer per parameter of model.parameters()
    optim_dict = {p: one(p) for p in params}
    _torchtune("training.memory").register_optim_in_bwd_hooks(model=model, optim_dict=optim_dict)
    return _InBackward(optim_dict)


def _head(model):
    """The output Linear (torchtune's model.output): lm_head under any peft wrapping."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if get is not None else None
    if head is None:
        raise ValueError("activation_offload: the model has no output embeddings")
    return head


_OFFLOAD = {}  # id(model) -> (OffloadActivations, NoOpManager): one for the run, as the recipes keep


@contextlib.contextmanager
def _offloaded_forward(model):
    if id(model) not in _OFFLOAD:
        ao = _torchtune("training._activation_offloading")
        _OFFLOAD[id(model)] = (ao.OffloadActivations(), ao.NoOpManager())
    offload, noop = _OFFLOAD[id(model)]
    state = {"offload": False, "noop": False}

    def head_pre(*_):
        noop.__enter__()
        state["noop"] = True

    def forward_end(*_):
        # the recipe's `with activations_handling_ctx: logits = model(...)`, left here with the
        # loss (computed in this forward) under the NoOpManager, as a loss outside the context
        if state["noop"]:
            noop.__exit__(None, None, None)
            state["noop"] = False
        if state["offload"]:
            offload.__exit__(None, None, None)
            state["offload"] = False

    hooks = [_head(model).register_forward_pre_hook(head_pre),
             model.register_forward_hook(forward_end, always_call=True)]
    offload.__enter__()
    state["offload"] = True
    try:
        yield
    finally:
        forward_end()
        for h in hooks:
            h.remove()


def step_context(cfg, model):
    if cfg.get("activation_offload"):
        return _offloaded_forward(model)
    return contextlib.nullcontext()


def inference_step(cfg, model, ids):
    g = cfg.get("generate")
    if g is None:
        return False
    model.eval()
    gc = model.generation_config
    gc.eos_token_id = None  # random weights: no row may stop before max_new_tokens
    model.generate(ids, max_new_tokens=int(g["max_new_tokens"]), do_sample=False)
    return True


def cpu_check(plan):
    """What can run without a GPU: every plan line's fields checked; on a tiny Llama, the
    optimizer in backward (each parameter stepped and its gradient gone once backward is done)
    and generate (prompt + max_new_tokens tokens a row); imports and construction of the rest
    (bitsandbytes' optimizers and 4-bit config, torchtune's offloading, the head it excludes)."""
    import json
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model
    with open(plan) as f:
        for line in f:
            if line.strip():
                check(json.loads(line))
    print("plan fields: ok")
    lcfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=2, num_hidden_layers=2, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(lcfg)
    ids = torch.randint(0, 256, (2, 16))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = [p for p in model.parameters() if p.requires_grad]
    cfg = {"optim": "adamw_foreach", "optimizer_in_backward": True}
    opt = make_optimizer(cfg, model, params)
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is None for p in params), "a gradient outlived its hook"
    moved = sum(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert moved == len(params), (moved, len(params))
    assert all(len(o.state) == 1 for o in opt.optim_dict.values())
    print(f"optimizer_in_backward: {moved} parameters stepped in backward, no gradient left: ok")
    out = {}
    gen = model.generate

    def spy(*a, **kw):
        out["ids"] = gen(*a, **kw)
        return out["ids"]
    model.generate = spy
    model.generation_config.eos_token_id = 3
    assert inference_step({"generate": {"prompt": 16, "max_new_tokens": 7, "batch": 2}}, model, ids)
    assert tuple(out["ids"].shape) == (2, 23), out["ids"].shape
    print("generate: 2 x (16 + 7) tokens, eos unset: ok")
    peft_model = get_peft_model(LlamaForCausalLM(lcfg), LoraConfig(r=4, target_modules="all-linear"))
    assert _head(peft_model) is peft_model.base_model.model.lm_head
    ao = _torchtune("training._activation_offloading")
    print(f"activation_offload: {ao.OffloadActivations.__module__}.OffloadActivations imported, "
          f"head {type(_head(peft_model)).__name__}: ok")
    import bitsandbytes as bnb
    from transformers import BitsAndBytesConfig
    bnb.optim.AdamW([torch.nn.Parameter(torch.zeros(8))], lr=1e-5, optim_bits=8, is_paged=True)
    # the 8-bit optimizers in backward: one per parameter, each registered with a hook
    small = LlamaForCausalLM(lcfg)
    sp = [p for p in small.parameters() if p.requires_grad]
    ib = make_optimizer({"optimizer": "paged_adamw_8bit", "optimizer_in_backward": True}, small, sp)
    assert len(ib.optim_dict) == len(sp) and all(type(o).__name__ == "AdamW" for o in ib.optim_dict.values())
    assert all(o.is_paged for o in ib.optim_dict.values())
    print(f"paged_adamw_8bit in backward: {len(sp)} one-parameter bitsandbytes optimizers, hooks registered: ok")
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=torch.bfloat16)
    with tempfile.TemporaryDirectory() as tmp:
        LlamaForCausalLM._from_config(lcfg, dtype=torch.bfloat16).save_pretrained(tmp)
        assert os.path.exists(os.path.join(tmp, "config.json"))
    print(f"bitsandbytes {bnb.__version__} AdamW(optim_bits=8, is_paged): constructed: ok")
    # QLoRA's build, loaded to the CPU (bitsandbytes 0.50 quantizes there too)
    q = build_model({"mode": "qlora_bf16", "quant": "nf4", "batch": 1, "seq": 8}, LlamaForCausalLM,
                    lcfg, None, device_map={"": "cpu"})
    n4 = [m for m in q.modules() if type(m).__name__ == "Linear4bit"]
    packed = sum(p.numel() * (2 if type(p).__name__ == "Params4bit" else 1) for p in q.parameters())
    assert len(n4) == 7 * lcfg.num_hidden_layers and packed == sum(p.numel() for p in model.parameters()), \
        (len(n4), packed)
    assert n4[0].weight.quant_state.nested and n4[0].compute_dtype == torch.bfloat16
    print(f"qlora: {len(n4)} Linear4bit (nf4, double quant, bf16 compute), {packed} parameters "
          f"counted as measure_llama.py counts them, as the unquantized model has: ok")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="CPU check of the technique hooks")
    ap.add_argument("--cpu-check", metavar="PLAN", required=True)
    cpu_check(ap.parse_args().cpu_check)
