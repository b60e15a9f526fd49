#!/usr/bin/env python3
"""What torch.compile's partitioner saves of a decoder layer with peft's LoRA (lora_dropout = 0)
under torchtitan's op-level selective activation checkpointing, compiled with its checkpoint:
check_compile_sac.py's trace (the Llama-2-7B layer on fake CUDA as dynamo's
tag_activation_checkpoint runs its body, torchtitan's policy, Inductor's decompositions, the
min-cut partition) of the bf16 layer after get_peft_model (the base frozen bf16; peft's
autocast_adapter_dtype, on by default, keeps the adapters fp32, and lora.Linear.forward casts
the Linear's input to the adapters' dtype before lora_A: a _to_copy, then lora_A's and lora_B's
aten.mm in fp32, the scaling, the sum in fp32 and its cast back to bf16).

With lora_dropout = 0 peft's lora_dropout is nn.Identity: no random op in the layer. The
adapters' GEMMs are aten.mm calls the policy counts with the base Linears' (on the 3-D input each
F.linear decomposes to a view, mm, view): in forward order q, q.A, q.B, k, v, v.A, v.B, ... the
odd ones MUST_SAVE. Then the same through dynamo on the CPU (dynamo_cpu): a tiny peft layer in
ptd_checkpoint_wrapper, torch.compile(fullgraph=True) with an aot_autograd backend.

What it shows (torch 2.13, transformers 5.25, peft 0.21.2): the adapters are fp32, the base
frozen bf16. On q and v (11 aten.mm: q, q.A, q.B, k, v, v.A, v.B, o, gate, up, down) the saved
set is the layer's input, the rotary tables, q's and v's base outputs (bf16), q's and v's lora_B
outputs (fp32, 256 x 4096), the flash kernel's output, log-sum-exp, RNG seed and offset, and
gate's output: lora_A's outputs are the even mm, recomputed, and the counts shift k to even. On
all-linear (21 aten.mm) the odd ones are q, q.B, k.A, v, v.B, o.A, gate, gate.B, up.A, down,
down.B: all saved but down's and down.B's (backward never reads them), so k's, o's and up's
lora_A outputs (fp32, 256 x r) are saved in place of base outputs. Dynamo's trace on the CPU
saves the same GEMM outputs, tagged MUST_SAVE.

  check_compile_sac_lora.py [-o validation/oracle/captures/compile_sac_op_lora_l1.json]

tests/test_compile.sh holds vrsim's saved set (training.compile, checkpoint_scope = "op",
checkpoint_impl = "wrapper", precision = "lora_bf16", lora.dropout = 0) to it."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
import capture_compile as CC  # noqa: E402
import check_compile_sac as S  # noqa: E402

LORA = {"r": 16, "alpha": 16, "dropout": 0.0}
CONFIGS = {
    "lora_qv": {"precision": "lora_bf16", "lora": dict(LORA, targets=["q_proj", "v_proj"])},
    "lora_all": {"precision": "lora_bf16", "lora": dict(LORA, targets="all-linear")},
}


def adapter_dtypes(torch, spec):
    """The dtypes peft gives the base and adapter weights of the built layer (fake CUDA)."""
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    spec = dict(spec, config=os.path.join(HERE, "..", "..", "scenarios/configs/llama-2-7b-hf.json"), layers=1)
    with FakeTensorMode():
        model, _ = C.build_model(torch, transformers, spec, None)
        layer, _ = CC.layer_of(model)
        out = {}
        for n, p in layer.named_parameters():
            kind = "lora_A" if ".lora_A." in n else "lora_B" if ".lora_B." in n else "base"
            out.setdefault(kind, set()).add((C.dtype_name(p.dtype), p.requires_grad))
        return {k: sorted("%s%s" % (d, "" if g else " frozen") for d, g in v) for k, v in out.items()}


def dynamo_cpu(torch, targets):
    """check_compile_sac.dynamo_cpu's tiny layer (hidden 64, fp32, CPU) under peft's LoRA (r 4,
    dropout 0) on targets, wrapped and compiled as torchtitan does: what the partitioner saved, the
    tags' counts and the forward's aten.mm tags."""
    from peft import LoraConfig, get_peft_model

    def adapt(model):
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=4, lora_dropout=0.0,
                                                      target_modules=targets, task_type="CAUSAL_LM"))
        return peft_model, peft_model.get_base_model()
    rec = S.dynamo_cpu(torch, adapt)
    rec["model"] += ", LoRA r 4 dropout 0 on %s" % (targets,)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_sac_op_lora_l1.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    cpu = {name: dynamo_cpu(torch, spec["lora"]["targets"]) for name, spec in CONFIGS.items()}
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "flash")
    recs = []
    for name, spec in CONFIGS.items():
        r = S.traced(torch, name, spec)
        r["weights"] = adapter_dtypes(torch, spec)
        # the parameters are saved for free: only the adapters' are listed (the base's are
        # check_compile_sac.py's)
        recs.append(r)
    # dynamo's path and the emulation agree: the same GEMM outputs saved, each tagged MUST_SAVE
    for r in recs:
        cpu_mm = [x["tag"] for x in cpu[r["config"]]["saved"] if x["op"] == "aten.mm.default"]
        fake_mm = [x["name"] for x in r["saved"] if x["name"].startswith("mm")]
        assert cpu_mm == ["MUST_SAVE"] * len(fake_mm), (r["config"], cpu_mm, fake_mm)
    for name, c in cpu.items():
        print("dynamo (CPU)", name, "tags", c["tags"], "mm tags", c["forward_mm_tags"],
              "saved", [(x["op"], x["shape"], x["tag"]) for x in c["saved"]])
    for r in recs:
        acts = [x for x in r["saved"] if x["kind"] != "param"]
        print(r["config"], r["weights"], "tags", r["tags"], "saved",
              [(x["name"], x["shape"], x["dtype"], x["tag"]) for x in acts])
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": "scenarios/configs/llama-2-7b-hf.json, 1 layer, batch 1, bf16, peft LoraConfig "
                     "(autocast_adapter_dtype default)", "sdpa": "flash",
            "checkpoint": "tag_activation_checkpoint body (wrap.py), context_fn torchtitan's op-level policy"}
    head["peft"] = __import__("peft").__version__
    with open(args.o + ".tmp", "w") as fh:
        json.dump({"header": head, "records": recs, "dynamo_cpu": cpu}, fh, indent=1)
        fh.write("\n")
    os.replace(args.o + ".tmp", args.o)
    print(args.o)


if __name__ == "__main__":
    main()
