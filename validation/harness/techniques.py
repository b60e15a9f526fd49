"""The techniques of measure_llama.py's plan lines, each as its library does it.

measure_llama.py calls these hooks at fixed points of a configuration's run; a plan line without
any of TECHNIQUE_FIELDS runs exactly as before. Each hook returns the default behaviour when its
fields are absent. The field names and values are vrsim's scenario fields (`vrsim fields`), so
lua/vrsim/record.lua maps a record onto the scenario one to one.

  build_model(cfg, model_cls, lcfg, dtype)  -> model, or None to build as usual
                                               (QLoRA: from_pretrained with bitsandbytes' 4-bit)
  after_peft(cfg, model)                    -> model (float8, op-level checkpointing, compile)
  prepare(cfg, model, model_cls, lcfg, dtype, dev) -> record notes; DPO's reference and fused
                                               head, the DPO or variable-length batch (tech_data)
  make_optimizer(cfg, model, params)        -> optimizer, or None for the plan's `optim`
  forward_loss(cfg, model, ids)             -> loss, or None for model(input_ids, labels).loss
                                               (ids is None where owns(cfg): tech_data's batch)
  step_context(cfg, model)                  -> context manager around forward and backward
                                               (activation offloading)
  inference_step(cfg, model, ids)           -> True when the step was an inference (generate)
"""
import contextlib

import tech_data
import tech_model
from tech_model import after_peft, MODEL_FIELDS  # noqa: F401
from tech_train import (build_model, make_optimizer, step_context, inference_step,  # noqa: F401
                        TRAIN_FIELDS)

from tech_data import prepare, owns, DATA_FIELDS  # noqa: F401

TECHNIQUE_FIELDS = MODEL_FIELDS + TRAIN_FIELDS + DATA_FIELDS


def forward_loss(cfg, model, ids):
    """The loss of a DPO or variable-length step (tech_data), else tech_model's, else None."""
    loss = tech_data.forward_loss(cfg, model)
    if loss is None:
        loss = tech_model.forward_loss(cfg, model, ids)
    return loss


def used(cfg):
    return [k for k in TECHNIQUE_FIELDS if k in cfg]


def null_context():
    return contextlib.nullcontext()
