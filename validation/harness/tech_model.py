"""Techniques that change the model or its loss: torch.compile, torchao float8, op-level
selective checkpointing, Liger's fused linear cross-entropy and torchtune's chunked loss."""

MODEL_FIELDS = ()


def after_peft(cfg, model):
    return model


def forward_loss(cfg, model, ids):
    return None
