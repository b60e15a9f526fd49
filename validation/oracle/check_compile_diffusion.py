#!/usr/bin/env python3
"""What torch.compile makes of diffusers' Flux and SD3 transformers trained as
examples/dreambooth/train_dreambooth_lora_flux.py and train_dreambooth_lora_sd3.py train them,
compiled regionally: diffusers' ModelMixin.compile_repeated_blocks (diffusers 0.42) calls
submodule.compile() on every module whose class is in the model's _repeated_blocks
(FluxTransformer2DModel: FluxTransformerBlock and FluxSingleTransformerBlock), so each block is
one compiled graph and the rest of the model eager. SD3Transformer2DModel declares none
(compile_repeated_blocks raises ValueError): its JointTransformerBlocks are compiled one by one
with block.compile(), as accelerate's compile_regions compiles them. SDXL's UNet2DConditionModel
declares BasicTransformerBlock (train_text_to_image_lora_sdxl.py, train_text_to_image_sdxl.py).

  check_compile_diffusion.py [-o validation/oracle/captures/compile_diffusion.json]

1. dynamo, on the CPU: a tiny FluxTransformer2DModel (2 double and 2 single blocks, 2 heads of 16,
   bf16) after compile_repeated_blocks with an aot_autograd backend (aot_partition.py's
   recording_backend), two training steps, for the full model and under peft's LoRA on to_k,
   to_q, to_v, to_out.0 (add_adapter, as the script), each with and without
   enable_gradient_checkpointing: dynamo's graphs and graph breaks, and the forward graphs'
   saved outputs with and without checkpointing (diffusers' checkpoint is
   torch.utils.checkpoint(block.__call__, ...) in the model's eager forward, around the compiled
   block: the same graphs, the checkpoint's pack hook dropping what they save); the same for a
   tiny SD3Transformer2DModel (2 blocks) with each block compiled, and a tiny SDXL-like UNet
   after compile_repeated_blocks. Also what _repeated_blocks
   the other families vrsim has declare (SD3Transformer2DModel none; UNet2DConditionModel
   BasicTransformerBlock).
2. the partition: AOTAutograd traces one FluxTransformerBlock and one FluxSingleTransformerBlock
   of FLUX.1-dev's transformer config (scenarios/configs/flux1-dev-transformer.json; its blocks
   only, 2 + 2 of them) on fake CUDA tensors at 512 px (1024 image tokens) and 128 T5 tokens,
   batch 1, with Inductor's decompositions and min_cut_rematerialization_partition
   (block_graphs, as aot_partition.forward_graph traces: the block's parameters static inputs), cuDNN SDPA: under
   precision lora_bf16 (bf16 weights, LoRA r 4 on the four attention projections, the block
   under Accelerate's bf16 autocast; the block's hidden and text states need gradients, its
   temb, from the frozen time embedding, does not) and bf16 (the full model trained, no
   autocast: temb needs a gradient too); the q/k RMSNorms as PyTorch 2.11 runs them under
   autocast (rms_norm_as_2_11). The saved set is what the backward graph reads of the forward
   graph's outputs. The same for JointTransformerBlock 1 of SD 3.5 Large
   (scenarios/configs/sd35-large-transformer.json, 3 blocks) at 512 px and 77 + 77 text tokens,
   and for the second BasicTransformerBlock of the cut SDXL UNet of UNET_SPEC at 512 px under
   lora_bf16 (no autocast, as the SDXL LoRA script), bf16 and amp_bf16.

Writes one JSON (header, "dynamo", "dynamo_sd3", "dynamo_unet", "repeated_blocks", "records":
the saved sets of 2. as check_compile_moe.py writes them); tests/test_compile.sh holds vrsim's
notes to it."""
import argparse
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
from aot_partition import recording_backend  # noqa: E402
from check_compile_moe import saved_rows  # noqa: E402

RES, TXT = 512, 128
CONFIG = "scenarios/configs/flux1-dev-transformer.json"
TARGETS = ["to_k", "to_q", "to_v", "to_out.0"]


def tiny_flux(torch):
    import diffusers
    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True,
        axes_dims_rope=(4, 6, 6)).to(torch.bfloat16)


def dynamo_run(torch, lora, ckpt):
    """Two training steps of the tiny Flux after compile_repeated_blocks: dynamo's counters and
    the forward graphs' outputs."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    graphs = []
    m = tiny_flux(torch)
    if ckpt:
        m.enable_gradient_checkpointing()
    if lora:
        from peft import LoraConfig
        m.requires_grad_(False)
        m.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=TARGETS))
    m.train()
    m.compile_repeated_blocks(backend=recording_backend(lambda kind, gm: graphs.append((kind, gm))))
    compiled = sorted({type(s).__name__ for s in m.modules() if getattr(s, "_compiled_call_impl", None)})
    for _ in range(2):
        out = m(hidden_states=torch.randn(2, 16, 16, dtype=torch.bfloat16),
                encoder_hidden_states=torch.randn(2, 8, 32, dtype=torch.bfloat16),
                pooled_projections=torch.randn(2, 32, dtype=torch.bfloat16), timestep=torch.rand(2),
                img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(8, 3), guidance=torch.ones(2),
                return_dict=False)[0]
        out.float().pow(2).mean().backward()
    saved = []
    for kind, gm in graphs:
        if kind == "forward":
            outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
            saved.append([list(n.meta["val"].shape) for n in outs if hasattr(n.meta.get("val"), "shape")])
    return {"lora": lora, "checkpointing": ckpt, "compiled_classes": compiled,
            "graphs": [k for k, _ in graphs], "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": {r[:400]: n for r, n in counters["graph_break"].items()},
            "forward_outputs": saved}


@contextlib.contextmanager
def rms_norm_as_2_11(torch):
    """F.rms_norm as PyTorch 2.11 runs it under autocast, which vrsim's diffusion models follow
    (lua/models/blocks/dit.lua): on no autocast list, so the bf16 q and k meet the bf16 weight as
    they are and the norm's output is bf16 (2.12 put rms_norm on the fp32 policy, which makes the
    attention's output fp32 and its split parts fp32 copies)."""
    F = torch.nn.functional
    orig = F.rms_norm

    def rms_norm(*a, **k):
        with torch.autocast("cuda", enabled=False):
            return orig(*a, **k)
    F.rms_norm = rms_norm
    try:
        yield
    finally:
        F.rms_norm = orig


def block_graphs(f, args, n_static):
    """aot_partition.forward_graph's trace of f(*args) (Inductor's decompositions, the min-cut
    partition, the first n_static inputs static), keeping the backward graph too: returns the
    forward graph and how many of its outputs backward reads. A block returns two tensors (and,
    where they are views of one intermediate, that intermediate as well: AOTAutograd's
    intermediate bases), so the saved ones are told by the backward graph's inputs that are not
    tangents, which the forward graph returns last."""
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table
    graphs = {}

    def compiler(kind):
        def compile_graph(gm, _inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compile_graph

    def partition(joint, joint_inputs, **kw):
        kw["static_lifetime_input_indices"] = list(range(n_static))
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)
    out = aot_function(f, fw_compiler=compiler("fw"), bw_compiler=compiler("bw"), partition_fn=partition,
                       decompositions=select_decomp_table())(*args)
    sum(o.float().sum() for o in out).backward()
    n_saved = sum(1 for n in graphs["bw"].graph.nodes
                  if n.op == "placeholder" and not n.name.startswith("tangents"))
    return graphs["fw"], n_saved


def dynamo_sd3_run(torch, lora, ckpt):
    """Two training steps of a tiny SD3Transformer2DModel (2 JointTransformerBlocks, the last
    context_pre_only) with each block compiled by hand (block.compile(), what
    compile_repeated_blocks would do with _repeated_blocks = ["JointTransformerBlock"], and what
    accelerate's compile_regions does to the blocks): dynamo's counters."""
    import diffusers
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    graphs = []
    m = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32, out_channels=4,
        pos_embed_max_size=16, qk_norm="rms_norm").to(torch.bfloat16)
    if ckpt:
        m.enable_gradient_checkpointing()
    if lora:
        from peft import LoraConfig
        m.requires_grad_(False)
        m.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=TARGETS))
    m.train()
    be = recording_backend(lambda kind, gm: graphs.append((kind, gm)))
    for b in m.transformer_blocks:
        b.compile(backend=be)
    for _ in range(2):
        out = m(hidden_states=torch.randn(2, 4, 8, 8, dtype=torch.bfloat16),
                encoder_hidden_states=torch.randn(2, 8, 32, dtype=torch.bfloat16),
                pooled_projections=torch.randn(2, 32, dtype=torch.bfloat16), timestep=torch.rand(2) * 1000,
                return_dict=False)[0]
        out.float().pow(2).mean().backward()
    return {"model": "SD3Transformer2DModel", "lora": lora, "checkpointing": ckpt,
            "graphs": [k for k, _ in graphs], "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": {r[:400]: n for r, n in counters["graph_break"].items()}}


def sd3_block_saved_set(torch, name, precision):
    """The partition of JointTransformerBlock 1 of SD 3.5 Large (scenarios/configs/
    sd35-large-transformer.json, its blocks only: 3 of them) at RES px (1024 image tokens) and
    77 + 77 text tokens, batch 1, under `precision`, as block_saved_set for Flux."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    config = "scenarios/configs/sd35-large-transformer.json"
    cfg = dict(C.load_config({"config": config}), num_layers=3)
    spec = {"config": cfg, "precision": precision}
    lora = precision == "lora_bf16"
    if lora:
        spec["lora"] = {"r": 4, "alpha": 4, "dropout": 0.0, "targets": TARGETS}
    tokens = (RES // 16) ** 2
    with FakeTensorMode():
        model, _ = C.build_sd3(torch, spec)
        block = model.transformer_blocks[1]
        dim = model.inner_dim
        h = torch.randn(1, tokens, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        ctx = torch.randn(1, 154, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        temb = torch.randn(1, dim, device="cuda", dtype=torch.bfloat16, requires_grad=not lora)
        params = dict(block.named_parameters())

        def f(params, h, ctx, temb):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=lora), rms_norm_as_2_11(torch):
                return torch.func.functional_call(block, params, (h, ctx, temb))

        gm, n_saved = block_graphs(f, (params, h, ctx, temb), len(params))
    rows = saved_rows(torch, gm, len(params))
    return {"config": name, "model": config, "block": type(block).__name__, "precision": precision,
            "lora": spec.get("lora"), "resolution": RES, "text_tokens": 154, "tokens": tokens + 154,
            "saved": rows[len(rows) - n_saved:]}


UNET_SPEC = "validation/oracle/specs/sdxl_cut_lora_bf16.json"


def dynamo_unet_run(torch, lora, ckpt):
    """Two training steps of a tiny SDXL-like UNet2DConditionModel (the cut spec's layout at
    width 32: a DownBlock2D and a CrossAttnDownBlock2D of two BasicTransformerBlocks, linear
    projections) after compile_repeated_blocks: dynamo's counters."""
    import json
    import diffusers
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    graphs = []
    cfg = {k: v for k, v in json.load(open(os.path.join(C.REPO, UNET_SPEC)))["config"].items()
           if not k.startswith("_")}
    cfg.update(block_out_channels=[32, 64], attention_head_dim=[2, 4], cross_attention_dim=32,
               addition_time_embed_dim=8, projection_class_embeddings_input_dim=32 + 6 * 8, norm_num_groups=8)
    m = diffusers.UNet2DConditionModel(**cfg).to(torch.bfloat16)
    if ckpt:
        m.enable_gradient_checkpointing()
    if lora:
        from peft import LoraConfig
        m.requires_grad_(False)
        m.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=TARGETS))
    m.train()
    m.compile_repeated_blocks(backend=recording_backend(lambda kind, gm: graphs.append((kind, gm))))
    compiled = sorted({type(x).__name__ for x in m.modules() if getattr(x, "_compiled_call_impl", None)})
    for _ in range(2):
        out = m(torch.randn(2, 4, 16, 16, dtype=torch.bfloat16), torch.randint(0, 1000, (2,)),
                torch.randn(2, 8, 32, dtype=torch.bfloat16),
                added_cond_kwargs={"text_embeds": torch.randn(2, 32, dtype=torch.bfloat16),
                                   "time_ids": torch.randn(2, 6, dtype=torch.bfloat16)},
                return_dict=False)[0]
        out.float().pow(2).mean().backward()
    return {"model": "UNet2DConditionModel", "lora": lora, "checkpointing": ckpt, "compiled_classes": compiled,
            "graphs": [k for k, _ in graphs], "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": {r[:400]: n for r, n in counters["graph_break"].items()}}


SD15_SPEC = "validation/oracle/specs/sd15_cut_amp_bf16.json"


def unet_block_saved_set(torch, name, precision, sd15=False):
    """The partition of the second BasicTransformerBlock of a cut UNet at RES px, batch 1, under
    `precision` (lora_bf16: bf16 weights, no autocast, as train_text_to_image_lora_sdxl.py and
    train_text_to_image_lora.py; bf16; amp_bf16: fp32 weights under bf16 autocast): of UNET_SPEC
    (SDXL's layout) down_blocks.1.attentions.0.transformer_blocks.1 (640 wide, 10 heads, 1024
    tokens at that level) with SDXL's 77 x 2048 text states; with sd15, of SD15_SPEC (SD 1.5's
    layout) mid_block.attentions.0.transformer_blocks.0 (640 wide, 8 heads, 1024 tokens) with 77 x
    768 text states, its input the view Transformer2DModel makes of its 1x1 convolution's output
    (permute(0, 2, 3, 1).reshape: not contiguous)."""
    import json
    from torch._subclasses.fake_tensor import FakeTensorMode
    cfg = json.load(open(os.path.join(C.REPO, SD15_SPEC if sd15 else UNET_SPEC)))["config"]
    spec = {"config": cfg, "precision": precision}
    if precision == "lora_bf16":
        spec["lora"] = {"r": 4, "alpha": 4, "dropout": 0.0, "targets": TARGETS}
    tokens = (RES // 16) ** 2
    with FakeTensorMode():
        model, _ = C.build_unet(torch, spec)
        block = (model.mid_block.attentions[0].transformer_blocks[0] if sd15
                 else model.down_blocks[1].attentions[0].transformer_blocks[1])
        dim = block.norm1.normalized_shape[0]
        # (under autocast the block's input is proj_in's bf16 output; the cached prompt embeddings
        # come in the weights' dtype, fp32 under amp)
        if sd15:
            side = RES // 16
            base = torch.randn(1, dim, side, side, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            h = base.permute(0, 2, 3, 1).reshape(1, side * side, dim)
        else:
            h = torch.randn(1, tokens, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        ctx = torch.randn(1, 77, cfg["cross_attention_dim"], device="cuda",
                          dtype=torch.float32 if precision == "amp_bf16" else torch.bfloat16)
        params = dict(block.named_parameters())

        def f(params, h, ctx):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "amp_bf16"):
                return (torch.func.functional_call(block, params, (h,), {"encoder_hidden_states": ctx}),)

        gm, n_saved = block_graphs(f, (params, h, ctx), len(params))
    rows = saved_rows(torch, gm, len(params))
    return {"config": name, "model": SD15_SPEC if sd15 else UNET_SPEC, "block": type(block).__name__,
            "precision": precision,
            "lora": spec.get("lora"), "resolution": RES, "text_tokens": 77, "tokens": tokens,
            "saved": rows[len(rows) - n_saved:]}


def repeated_blocks():
    import diffusers
    rows = {}
    for cls in (diffusers.FluxTransformer2DModel, diffusers.SD3Transformer2DModel, diffusers.UNet2DConditionModel):
        rows[cls.__name__] = list(getattr(cls, "_repeated_blocks", None) or [])
    return rows


def block_saved_set(torch, name, precision, which):
    """The partition of the second block of its kind (`which`: "double" or "single") of FLUX.1-dev
    at RES px and TXT text tokens, batch 1, under `precision` (lora_bf16 or bf16)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    cfg = dict(C.load_config({"config": CONFIG}), num_layers=2, num_single_layers=2)
    spec = {"config": cfg, "precision": precision}
    lora = precision == "lora_bf16"
    if lora:
        spec["lora"] = {"r": 4, "alpha": 4, "dropout": 0.0, "targets": TARGETS}
    tokens = (RES // 16) ** 2
    with FakeTensorMode():
        model, _ = C.build_flux(torch, spec)
        block = (model.transformer_blocks if which == "double" else model.single_transformer_blocks)[1]
        dim = model.inner_dim
        h = torch.randn(1, tokens, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        ctx = torch.randn(1, TXT, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        temb = torch.randn(1, dim, device="cuda", dtype=torch.bfloat16, requires_grad=not lora)
        ids = torch.zeros(TXT + tokens, 3, device="cuda")
        rope = model.pos_embed(ids)
        params = dict(block.named_parameters())

        def f(params, h, ctx, temb, rope):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=lora), rms_norm_as_2_11(torch):
                return torch.func.functional_call(block, params, (h, ctx, temb, rope))

        gm, n_saved = block_graphs(f, (params, h, ctx, temb, rope), len(params))
    rows = saved_rows(torch, gm, len(params))
    return {"config": name, "model": CONFIG, "block": type(block).__name__, "precision": precision,
            "lora": spec.get("lora"), "resolution": RES, "text_tokens": TXT, "tokens": tokens + TXT,
            "saved": rows[len(rows) - n_saved:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_diffusion.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import diffusers
    import peft
    dyn = [dynamo_run(torch, lora, ckpt) for lora in (False, True) for ckpt in (False, True)]
    dyn_sd3 = [dynamo_sd3_run(torch, lora, ckpt) for lora in (False, True) for ckpt in (False, True)]
    for d in dyn_sd3:
        print("sd3", "lora" if d["lora"] else "full", "ckpt" if d["checkpointing"] else "",
              d["unique_graphs"], "graphs,", sum(d["graph_breaks"].values()), "breaks")
    for d in dyn:
        print("lora" if d["lora"] else "full", "ckpt" if d["checkpointing"] else "", d["compiled_classes"],
              d["unique_graphs"], "graphs,", sum(d["graph_breaks"].values()), "breaks")
    dyn_unet = [dynamo_unet_run(torch, lora, ckpt) for lora in (False, True) for ckpt in (False, True)]
    for d in dyn_unet:
        print("unet", "lora" if d["lora"] else "full", "ckpt" if d["checkpointing"] else "", d["compiled_classes"],
              d["unique_graphs"], "graphs,", sum(d["graph_breaks"].values()), "breaks")
    rb = repeated_blocks()
    print("_repeated_blocks:", rb)
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "cudnn")
    recs = [block_saved_set(torch, "flux_double_lora", "lora_bf16", "double"),
            block_saved_set(torch, "flux_single_lora", "lora_bf16", "single"),
            block_saved_set(torch, "flux_double_bf16", "bf16", "double"),
            block_saved_set(torch, "flux_single_bf16", "bf16", "single"),
            sd3_block_saved_set(torch, "sd3_joint_lora", "lora_bf16"),
            sd3_block_saved_set(torch, "sd3_joint_bf16", "bf16"),
            unet_block_saved_set(torch, "sdxl_basic_lora", "lora_bf16"),
            unet_block_saved_set(torch, "sdxl_basic_bf16", "bf16"),
            unet_block_saved_set(torch, "sdxl_basic_amp_bf16", "amp_bf16"),
            unet_block_saved_set(torch, "sd15_basic_lora", "lora_bf16", True),
            unet_block_saved_set(torch, "sd15_basic_bf16", "bf16", True),
            unet_block_saved_set(torch, "sd15_basic_amp_bf16", "amp_bf16", True)]
    head = {"torch": torch.__version__, "diffusers": diffusers.__version__, "peft": peft.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": CONFIG + ", batch 1", "sdpa": "cudnn"}
    C.write_json(args.o, {"header": head, "dynamo": dyn, "dynamo_sd3": dyn_sd3, "dynamo_unet": dyn_unet,
                          "repeated_blocks": rb,
                          "records": recs})
    for rec in recs:
        print(rec["config"])
        for r in rec["saved"]:
            if r["kind"] != "param":
                print(" ", r["name"], r["shape"], r["dtype"], r["kind"], r["op"])
    print(args.o)


if __name__ == "__main__":
    main()
