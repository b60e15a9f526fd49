#!/usr/bin/env python3
"""The dtypes a QLoRA program's load-time casts leave in a training step, from the real code, beside
vrsim's (training.kbit_prepare, lua/strategies/kbit.lua): a 2-layer tiny Llama (transformers) in
bf16 whose decoder Linears are real, CPU-quantized bitsandbytes Linear4bit (nf4, double
quantization, bf16 compute: check_compile_bnb.py's to_4bit), then each program's casts:

  peft      peft's prepare_model_for_kbit_training (the installed peft), then get_peft_model
  trl_0.13  the same, then TRL 0.13's peft_module_casting_to_bf16 (trl/trainer/utils.py at
            v0.13.0, copied below: TRL 1.16 no longer has it)
  trl       get_peft_model, then TRL 1.16's SFTTrainer cast of the trainable parameters of a
            quantized model to bf16 (trl/trainer/sft_trainer.py, copied below)

LoRA r 8 on every decoder Linear, the non-reentrant checkpoint on each decoder layer, one forward
and backward of a (1, 64) batch under bf16 autocast. The step runs on the CPU with real data, so
two things stand in for the GPU: torch.autocast("cpu") (its lower-precision list holds linear and
scaled_dot_product_attention, as CUDA's does), and torch.is_autocast_enabled() answering for the
CPU, since peft's lora.bnb forward asks it without a device (CUDA's, under a GPU's autocast).

Recorded: the dtype of each decoder layer's input (the checkpointed tensor), the input norm's
output, the q_proj (Linear4bit + LoRA) and down_proj outputs, the logits, and what autograd saves
of lm_head's weight (the parameter itself, or autocast's bf16 copy of an fp32 one). vrsim's side: the same tensors' bytes in its allocation
trace of the same model and scenario (bytes / elements = the dtype's size). Prints both and exits
1 where they differ.

  python3 validation/oracle/check_kbit_dtypes.py [VRSIM]             the real step beside vrsim
  python3 validation/oracle/check_kbit_dtypes.py --capture            the real dtypes into
                                                  captures/kbit_dtypes.json
  python3 validation/oracle/check_kbit_dtypes.py --compare [VRSIM]    vrsim against that file

The first two need torch, transformers, peft and bitsandbytes (the pinned versions:
docs/oracle.md); --compare only the standard library (tests/test_kbit.sh runs it)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "captures", "kbit_dtypes.json")

CFG = dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_attention_heads=4,
           num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=2048,
           tie_word_embeddings=False, model_type="llama", architectures=["LlamaForCausalLM"],
           rms_norm_eps=1e-5, rope_theta=500000.0, torch_dtype="bfloat16")
B, S, H, V, I = 1, 64, 256, 512, 768
NAME = {4: "fp32", 2: "bf16"}
MODES = ("peft", "trl_0.13", "trl")


def peft_module_casting_to_bf16(model):
    import torch
    """trl/trainer/utils.py at TRL v0.13.0 (called by SFTTrainer with bf16 on a 4-bit model)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.LayerNorm) or "norm" in name:
            module = module.to(torch.float32)
        elif any(x in name for x in ["lm_head", "embed_tokens", "wte", "wpe"]):
            if hasattr(module, "weight"):
                if module.weight.dtype == torch.float32:
                    module = module.to(torch.bfloat16)


def trl_116_adapters(model):
    """trl/trainer/sft_trainer.py (TRL 1.16), for a quantized model after get_peft_model."""
    import torch
    for name, param in model.named_parameters():
        if param.requires_grad and "lora_magnitude_vector" not in name:
            param.data = param.data.to(torch.bfloat16)


def real(mode):
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    sys.path.insert(0, HERE)
    from check_compile_bnb import to_4bit
    SIZE = {torch.float32: 4, torch.bfloat16: 2}
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).to(torch.bfloat16)
    to_4bit(m)
    m.is_loaded_in_4bit = True  # what transformers' 4-bit load sets
    if mode in ("peft", "trl_0.13"):
        m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=True,
                                            gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.enable_input_require_grads()
    m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear"))
    if mode == "trl_0.13":
        peft_module_casting_to_bf16(m)
    elif mode == "trl":
        trl_116_adapters(m)
    m.train()
    got = {}
    base = m.base_model.model

    def pre(key):
        def f(_mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            got.setdefault(key, NAME[SIZE[x.dtype]])
        return f

    def post(key):
        def f(_mod, _args, out):
            o = out[0] if isinstance(out, tuple) else out
            got.setdefault(key, NAME[SIZE[o.dtype]])
        return f

    for i, layer in enumerate(base.model.layers):
        layer.register_forward_pre_hook(pre("layers.%d input" % i), with_kwargs=True)
        layer.input_layernorm.register_forward_hook(post("layers.%d input_layernorm" % i))
        layer.self_attn.q_proj.register_forward_hook(post("layers.%d q_proj" % i))
        layer.mlp.down_proj.register_forward_hook(post("layers.%d down_proj" % i))
    saved = []

    head = base.lm_head.weight

    def pack(t):
        # lm_head's weight as its backward keeps it: the parameter itself, or autocast's copy
        if sorted(t.shape) == sorted((V, H)):
            own = t.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
            saved.append("the weight" if own else "a %s copy" % NAME[SIZE[t.dtype]])
        return t

    ids = torch.randint(0, V, (B, S))
    real_enabled = torch.is_autocast_enabled
    torch.is_autocast_enabled = lambda *a: real_enabled(*(a or ("cpu",)))
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = m(input_ids=ids, labels=ids)
        got["logits"] = NAME[SIZE[out.logits.dtype]]
        out.loss.backward()
    finally:
        torch.is_autocast_enabled = real_enabled
    got["lm_head weight saved"] = ",".join(sorted(set(saved))) or "nothing"
    return got


def simulated(mode, vrsim):
    with tempfile.TemporaryDirectory() as d:
        json.dump(CFG, open(os.path.join(d, "config.json"), "w"))
        open(os.path.join(d, "s.lua"), "w").write(
            'return { hardware = { gpu = "h100_sxm" }, model = { config = "config.json" },\n'
            '  training = { micro_batch = %d, seq = %d, precision = "lora_bf16", quant = "nf4",\n'
            '    checkpointing = true, kbit_prepare = "%s", optimizer = "adamw",\n'
            '    lora = { r = 8, alpha = 16, dropout = 0.05, targets = "all-linear" } } }\n' % (B, S, mode))
        trace = os.path.join(d, "t.csv")
        subprocess.run([vrsim, os.path.join(d, "s.lua"), "--no-files", "--alloc-trace", trace],
                       check=True, stdout=subprocess.DEVNULL)
        first = {}
        for line in open(trace):
            f = line.rstrip("\n").split(",", 6)
            if len(f) == 7 and f[2] == "alloc":
                first.setdefault(f[6], int(f[4]))

    def dt(op, n):
        return NAME.get(first[op] // n, "?") if op in first else "absent"
    got = {}
    for i in range(2):
        got["layers.%d input" % i] = dt("embed_tokens" if i == 0 else "layers.%d.residual_add2" % (i - 1), B * S * H)
        got["layers.%d input_layernorm" % i] = dt("layers.%d.input_layernorm" % i, B * S * H)
        got["layers.%d q_proj" % i] = dt("layers.%d.self_attn.q_proj.lora_add" % i, B * S * H)
        got["layers.%d down_proj" % i] = dt("layers.%d.mlp.down_proj.lora_add" % i, B * S * H)
    got["logits"] = dt("lm_head", B * S * V)
    got["lm_head weight saved"] = "a bf16 copy" if "lm_head.weight_cast" in first else "the weight"
    return got


def main():
    args = sys.argv[1:]
    # --capture: run the real code and write what it gave (captures/kbit_dtypes.json); --compare:
    # hold vrsim to that file, without torch (tests/test_kbit.sh)
    mode_arg = args.pop(0) if args and args[0] in ("--capture", "--compare") else None
    vrsim = args[0] if args else os.path.join(HERE, "..", "..", "vrsim")
    if mode_arg == "--capture":
        json.dump({m: real(m) for m in MODES}, open(CAPTURE, "w"), indent=1, sort_keys=True)
        print("wrote", CAPTURE)
        return
    captured = json.load(open(CAPTURE)) if mode_arg == "--compare" else None
    bad = 0
    for mode in MODES:
        r = captured[mode] if captured else real(mode)
        s = simulated(mode, vrsim)
        print("kbit_prepare = %s" % mode)
        for k in r:
            same = r[k] == s.get(k)
            bad += not same
            print("  %-4s %-24s real %-11s vrsim %s" % ("ok" if same else "DIFF", k, r[k], s.get(k)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
