#!/usr/bin/env python3
"""The vrsim scenario of an oracle spec (standard library only).

  scenario_of.py SPEC.json > validation/oracle/scenarios/NAME.lua

A spec's Hugging Face config becomes model.config written out as a Lua table (a scenario may
only read files beside it), except Llama-2-7B's, which is vrsim's named llama2 7b shape; the
spec's training fields become the scenario's of the same names (capture.py's docstring lists
them). The GPU is an H200, the one whose CUDA behaviour (SDPA's cuDNN backend, the cuBLAS
workspace) the capture's named differences stand for.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIELDS = ("micro_batch", "seq", "resolution", "precision", "steps", "grad_accum", "checkpointing",
          "checkpoint_every", "checkpoint_scope", "optimizer", "optimizer_impl", "attention", "build", "strategy", "loss")


def lua(v, indent="    "):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "{ " + ", ".join(lua(x, indent) for x in v) + " }"
    if isinstance(v, dict):
        items = [f"{k} = {lua(x, indent + '  ')}" if k.isidentifier() else f"[{json.dumps(k)}] = {lua(x, indent + '  ')}"
                 for k, x in v.items() if x is not None]
        return "{\n" + "".join(f"{indent}  {it},\n" for it in items) + indent + "}"
    raise ValueError(f"cannot write {v!r} as Lua")


def scenario(spec):
    cfg = spec["config"]
    if cfg == "scenarios/configs/llama-2-7b-hf.json":
        model = {"arch": "llama2", "size": "7b"}
    else:
        if isinstance(cfg, str):
            with open(os.path.join(REPO, cfg)) as f:
                cfg = json.load(f)
        cfg = {k: v for k, v in cfg.items() if k not in ("transformers_version", "torch_dtype")}
        model = {"config": cfg}
        if cfg.get("_class_name") == "UNet2DConditionModel":
            # a Stable Diffusion UNet, its latents and text embeddings given (capture.py)
            model["arch"] = "sd"
            if cfg.get("addition_embed_type") == "text_time":
                # SDXL's UNet (cut: fewer or narrower blocks), its step's inputs given
                model.update(arch="sdxl", variant="sdxl-base")
        elif cfg.get("_class_name") == "FluxTransformer2DModel":
            # a Flux transformer, its latents and prompt embeddings given (capture.py flux_step)
            model["arch"] = "flux"
        elif cfg.get("_class_name") == "SD3Transformer2DModel":
            # an SD3 transformer, its latents and prompt embeddings given (capture.py sd3_step)
            model["arch"] = "sd3"
    if spec.get("layers"):
        model["layers"] = int(spec["layers"])
    if spec.get("code", "transformers") != "transformers":
        # the modelling code the capture ran (capture.py's build_torchtune)
        model["code"] = spec["code"]
    training = {k: spec[k] for k in FIELDS if k in spec}
    # an SDPA backend other than the H200's cuDNN, chosen in the spec: the scenario forces it
    if spec.get("attention", "sdpa") == "sdpa" and spec.get("sdpa_backend") in ("efficient", "flash"):
        training["attention"] = {"efficient": "mem_efficient", "flash": "flash"}[spec["sdpa_backend"]]
    training.setdefault("steps", 2)
    # capture.py builds from_config in fp32 then casts unless the spec says direct; vrsim's default
    # is from_pretrained's direct build, so the scenario says which (where the dtype makes it matter)
    if model.get("arch") in ("sd", "sdxl", "flux", "sd3"):
        # (the frozen encoders and the VAE where the spec runs them in the step: SDXL, Flux.1, SD3)
        training.update(text_encoders=spec.get("text_encoders", "cached"), vae=spec.get("vae", "cached"))
        if model.get("arch") == "flux" and cfg.get("joint_attention_dim") != 4096:
            # (capture.py's prompt length for a cut transformer's narrower text width)
            training["max_sequence_length"] = 64
    elif training.get("precision") in ("bf16", "fp16", "lora_bf16", "lora_fp16"):
        training.setdefault("build", "cast")
    if "torchtune" in spec:
        # the torchtune release whose modules the capture ran
        training["torchtune"] = spec["torchtune"]
    if "transformers" in spec:
        # the release the capture ran (capture.py refuses another)
        training["transformers"] = spec["transformers"]
    if "lora" in spec:
        training["lora"] = spec["lora"]
    if "float8" in spec:
        training["float8"] = spec["float8"]
    if "data" in spec:
        # the spec's one batch, in its order, as vrsim's training.data cuts it
        d = spec["data"]
        if d["batching"] == "multipack":
            # axolotl's real batches of bins (sdpa): micro_batch bins of at most sequence_len,
            # each padded to it (pad_to_sequence_len)
            training["micro_batch"] = d["micro_batch"]
            training["data"] = {"lengths": d["lengths"], "batching": "multipack", "order": "given",
                                "real_batches": True, "pack_length": d["sequence_len"],
                                "max_length": d["sequence_len"],
                                "pad_to_multiple_of": (d["sequence_len"] + 63) // 64 * 64}
        else:
            training["micro_batch"] = len(d["lengths"])
            training["data"] = {"lengths": d["lengths"], "batching": d["batching"], "order": "given"}
    hardware = {"gpu": "h200"}
    if spec.get("world"):
        hardware["count"] = int(spec["world"])
    if spec.get("zero"):
        training["zero"] = spec["zero"]
    return (f"-- oracle capture {spec['name']}: validation/oracle/specs/{spec['name']}.json "
            f"(written by scenario_of.py)\nreturn {{\n  title = {json.dumps('oracle: ' + spec['name'])},\n"
            f"  hardware = {lua(hardware, '  ')},\n  model = {lua(model, '  ')},\n"
            f"  training = {lua(training, '  ')},\n}}\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        sys.stdout.write(scenario(json.load(f)))
