"""The batch and loss of a step when it is not one (batch, seq) row of tokens: TRL's DPO and
variable-length data. The plan fields are vrsim's training.dpo and training.data (`vrsim fields`),
so lua/vrsim/record.lua maps a record onto the scenario one to one.

  dpo = {"prompt_length": P, "completion_length": C, "max_length": M}
      TRL 1.16's DPOTrainer step (trl/trainer/dpo_trainer.py), `batch` prompts each with a chosen
      and a rejected completion of C tokens after a prompt of P:
      - the batch: DataCollatorForPreference.torch_call (lines 147-208) replicated here (that
        module imports HF `datasets` at its top, which the GPU image lacks): [prompt + chosen]
        rows then [prompt + rejected] rows, each truncated to max_length (keep_start), right-padded
        with trl.trainer.utils.pad; input_ids, attention_mask and completion_mask (int64);
      - the set-up (DPOTrainer.__init__): full fine-tuning builds the reference as a second model
        from the same config in the policy's dtype (lines 908-927: create_model_from_path with
        dtype=model.dtype and the policy's attn_implementation; built here directly in that dtype
        on the GPU, no checkpoint to read), frozen; with a peft model and no ref_model there is no
        second copy (lines 909-914) and the reference is the policy with its adapters disabled;
        disable_dropout_in_model on both (line 932, DPOConfig.disable_dropout defaults to True);
        add_fused_lm_head on the policy (its base model under peft) with outputs log_probs,
        entropy, mean_logits, is_top1, and on the reference with log_probs (lines 958-962);
      - the step: _compute_loss (lines 1285-1600) with the default sigmoid loss, beta 0.1, no
        ld_alpha, no WPO weighting, no aux loss: the policy's model(..., labels, fused_lm_head=True)
        on the whole batch, per-sequence sums; the reference's forward under torch.no_grad() and
        disable_gradient_checkpointing (use_adapter(model, None) for peft, else ref_model); the
        log-ratios, -logsigmoid(beta x delta), its mean; then the metrics _compute_loss logs from
        the outputs (entropy, mean logits, top-1 accuracy, rewards; .item() each), which keep the
        policy's outputs alive until they are read.
      trl.trainer.utils and trl.models.utils are TRL's own code: the import stands in for the
      `datasets`, `pandas` and `pyarrow` modules (where missing) they name in their imports but
      do not call on this path; the record's dpo_import_stubs lists those stood in for.
  data = {"lengths": [l1, ..., lb], "batching": "pad" | "padding_free", "order": "given"}
      `batch` sequences of the given lengths, every step the same batch (vrsim's order = "given"
      over exactly one micro-batch):
      - pad: DataCollatorWithPadding(padding="longest") as tokenizer.pad makes it (right padding,
        pad id 0): input_ids (b, L) and attention_mask (b, L) int64; labels are the input ids
        (the loss over padded positions is computed as over any other; a -100 label there
        changes no tensor's size);
      - padding_free: transformers' DataCollatorWithFlattening itself (no tokenizer needed):
        input_ids, labels (-100 at each sequence's first token) and position_ids, (1, T) int64.
        transformers finds the packed sequences from position_ids (masking_utils
        find_packed_sequence_indices) and builds a block-causal mask for SDPA; flash_attention_2
        (which takes them without a mask) is not on the GPU image, so attn is "sdpa".
      - multipack (with "real_batches": true, "pack_length": S, "max_length": S,
        "pad_to_multiple_of": 64 x ceil(S / 64)): axolotl 0.18-0.19's sample packing under sdpa
        (multipack_real_batches): the lengths first-fit in their order into `batch` bins of at most
        S tokens (MultipackBatchSampler's pack_group), each bin a row as
        V2BatchSamplerDataCollatorForSeq2Seq makes it: the sequences concatenated, padded to the
        multiple (pad id 0, labels -100, position_ids restarting over the padding), no
        attention_mask; axolotl's own sdpa_varlen patch installed
        (axolotl.monkeypatch.attention.sdpa_varlen.patch_sdpa_varlen, axolotl on PYTHONPATH), so
        each layer's attention is PyTorch's varlen_attn over the sequences.
      The model is called with the collator's batch as the Trainer calls it (no use_cache).

  tech_data.py --cpu-check PLAN
"""
import contextlib
import importlib
import importlib.machinery
import sys
import types

DATA_FIELDS = ("dpo", "data")
DPO_KEYS = ("prompt_length", "completion_length", "max_length")
DATA_KEYS = ("lengths", "batching", "order", "real_batches", "pack_length", "max_length", "pad_to_multiple_of")
DPO_BETA = 0.1          # DPOConfig.beta
DPO_MAX_LENGTH = 1024   # DPOConfig.max_length
DPO_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")  # dpo_trainer.py line 958
PAD_ID = 0


def _pos_int(v, what):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what} must be an integer > 0, not {v!r}")
    return v


def dpo_len(d):
    """The rows' length after keep_start truncation."""
    return min(d["prompt_length"] + d["completion_length"], d.get("max_length", DPO_MAX_LENGTH))


def axolotl_sdpa_varlen():
    """axolotl's sdpa_varlen module and where it came from: the installed package, or else the
    module file alone (AXOLOTL_SDPA_VARLEN: the wheel's axolotl/monkeypatch/attention/sdpa_varlen.py,
    carried to a GPU image that lacks axolotl's many dependencies) with its one axolotl import,
    get_logger, stood in for by logging.getLogger."""
    try:
        import axolotl
        import axolotl.monkeypatch.attention.sdpa_varlen as sv
        return sv, getattr(axolotl, "__version__", "?")
    except ImportError:
        import os
        path = os.environ.get("AXOLOTL_SDPA_VARLEN")
        if not path:
            raise
    import importlib.util
    import logging
    for name in ("axolotl", "axolotl.utils", "axolotl.monkeypatch", "axolotl.monkeypatch.attention"):
        sys.modules.setdefault(name, types.ModuleType(name))
    log = types.ModuleType("axolotl.utils.logging")
    log.get_logger = logging.getLogger
    sys.modules["axolotl.utils.logging"] = log
    name = "axolotl.monkeypatch.attention.sdpa_varlen"
    spec = importlib.util.spec_from_file_location(name, path)
    sv = importlib.util.module_from_spec(spec)
    sys.modules[name] = sv
    spec.loader.exec_module(sv)
    return sv, "file " + os.path.basename(path)


def multipack_bins(d):
    """axolotl's bins of the lengths: first-fit in their order into bins of pack_length."""
    bins = []
    for n in d["lengths"]:
        for b in bins:
            if sum(b) + n <= d["pack_length"]:
                b.append(n)
                break
        else:
            bins.append([n])
    return bins


def data_len(d):
    """The row length of the collated batch: the longest (pad), the sum (padding_free), or the
    longest bin rounded up to pad_to_multiple_of (multipack)."""
    batching = d.get("batching", "pad")
    if batching == "multipack":
        m = d["pad_to_multiple_of"]
        return (max(sum(b) for b in multipack_bins(d)) + m - 1) // m * m
    return sum(d["lengths"]) if batching == "padding_free" else max(d["lengths"])


def check(cfg):
    """The plan line's dpo and data fields, checked before anything is built (ValueError)."""
    d, v = cfg.get("dpo"), cfg.get("data")
    if d is not None and v is not None:
        raise ValueError("dpo and data together: vrsim refuses training.dpo with training.data")
    if d is not None:
        if not isinstance(d, dict) or set(d) - set(DPO_KEYS):
            raise ValueError(f"dpo must be an object of {DPO_KEYS}")
        for k in ("prompt_length", "completion_length"):
            _pos_int(d.get(k), f"dpo.{k}")
        _pos_int(d.get("max_length", DPO_MAX_LENGTH), "dpo.max_length")
        if d["prompt_length"] >= d.get("max_length", DPO_MAX_LENGTH):
            raise ValueError("dpo.prompt_length fills max_length (TRL drops such examples)")
        if cfg.get("mode") not in ("bf16", "fp32", "lora_bf16"):
            raise ValueError(f"dpo with mode {cfg.get('mode')}: the harness runs bf16, fp32 or lora_bf16")
        if int(cfg.get("accum", 1)) != 1 or cfg.get("loss") or cfg.get("generate"):
            raise ValueError("dpo with accum, loss or generate is not run by this harness")
        if int(cfg["seq"]) != dpo_len(d):
            raise ValueError(f"dpo: seq must be the rows' length {dpo_len(d)} (prompt + completion, truncated)")
    if v is not None:
        if not isinstance(v, dict) or set(v) - set(DATA_KEYS) or "lengths" not in v:
            raise ValueError(f"data must be an object of {DATA_KEYS} with lengths")
        lens = v["lengths"]
        if not isinstance(lens, list) or not lens:
            raise ValueError("data.lengths must be a list of sequence lengths")
        for i, n in enumerate(lens):
            _pos_int(n, f"data.lengths[{i}]")
        if v.get("batching", "pad") not in ("pad", "padding_free", "multipack"):
            raise ValueError(f"data.batching {v.get('batching')!r}: pad, padding_free or multipack")
        if v.get("batching") == "multipack":
            S = v.get("pack_length")
            _pos_int(S, "data.pack_length")
            if v.get("real_batches") is not True or v.get("max_length") != S or \
                    v.get("pad_to_multiple_of") != (S + 63) // 64 * 64 or max(lens) > S:
                raise ValueError("data multipack: real_batches true, max_length = pack_length, pad_to_multiple_of "
                                 "64 x ceil(pack_length / 64), no sequence longer (axolotl under sdpa)")
            if v.get("order") != "given" or len(multipack_bins(v)) != int(cfg["batch"]):
                raise ValueError("data multipack: order \"given\" and lengths that pack into exactly `batch` bins")
            if cfg.get("mode") not in ("bf16", "lora_bf16"):
                raise ValueError("data multipack: mode bf16 or lora_bf16 (varlen_attn takes bf16)")
        elif set(v) - {"lengths", "batching", "order"}:
            raise ValueError("data: real_batches, pack_length, max_length and pad_to_multiple_of are multipack's")
        elif v.get("order") != "given" or len(lens) != int(cfg["batch"]):
            raise ValueError("data: order \"given\" and exactly `batch` lengths (every step the same batch)")
        if cfg.get("attn") not in ("sdpa", "eager"):
            raise ValueError("data: attn sdpa or eager (no flash here)")
        if int(cfg["seq"]) != data_len(v):
            raise ValueError(f"data: seq must be the collated row's length {data_len(v)}")
        if int(cfg.get("accum", 1)) != 1 or cfg.get("loss") or cfg.get("generate"):
            raise ValueError("data with accum, loss or generate is not run by this harness")


def _stub(name):
    """A module of that name whose every attribute is a new empty class (type hints, isinstance
    targets): for the imports trl names but this path never calls."""
    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__path__ = []

    def attr(a):
        if a.startswith("__"):
            raise AttributeError(a)
        return type(a, (), {})
    m.__getattr__ = attr
    return m


# modules trl names in imports that the DPO path never calls, with the submodules it names
_TRL_STUBS = {"datasets": ("datasets.fingerprint",), "pandas": (),
              "pyarrow": ("pyarrow.types", "pyarrow.compute")}


def _trl():
    """TRL's helpers (trl.trainer.utils, trl.models.utils), importable without HF `datasets`,
    pandas and pyarrow (stand-ins where they are missing). Returns them and the names stubbed."""
    stubbed = []
    for name, subs in _TRL_STUBS.items():
        try:
            importlib.import_module(name)
        except ImportError:
            for n in (name,) + subs:
                sys.modules.pop(n, None)
                sys.modules[n] = _stub(n)
            stubbed.append(name)
    try:
        from trl.trainer import utils as tu
        from trl.models import utils as mu
    except ImportError as e:
        raise RuntimeError(f"dpo: TRL's trainer helpers do not import ({e}); the GPU image has no trl: carry "
                           ".whl/trl-1.16.0-py3-none-any.whl (validation/PROVENANCE.md, \"Wheels carried to "
                           "the GPU machine\")") from e
    return tu, mu, stubbed


def _is_peft(model):
    return type(model).__name__.startswith("Peft")


class _State:
    pass


_STATE = {}  # id(policy) -> its DPO / data state, set up once by prepare()


def prepare(cfg, model, model_cls, lcfg, dtype, dev):
    """After the policy's build (and peft), before the optimizer, as DPOTrainer.__init__ and the
    Trainer do; also makes the batch on the device, once. Returns notes for the record."""
    check(cfg)
    if cfg.get("dpo") is None and cfg.get("data") is None:
        return {}
    import torch
    st = _State()
    notes = {}
    if cfg.get("dpo") is not None:
        tu, mu, stubbed = _trl()
        st.tu, st.mu = tu, mu
        if stubbed:
            notes["dpo_import_stubs"] = stubbed
        st.peft = _is_peft(model)
        st.ref = None
        if not st.peft:
            # create_model_from_path(dtype=model.dtype, attn_implementation=...): frozen, eval mode
            # (accelerator.prepare_model(evaluation_mode=True))
            if dtype is not None:
                torch.set_default_dtype(dtype)
            try:
                with torch.device(dev):
                    st.ref = model_cls(lcfg)
            finally:
                torch.set_default_dtype(torch.float32)
            st.ref.requires_grad_(False)
            st.ref.eval()
        tu.disable_dropout_in_model(model)
        if st.ref is not None:
            tu.disable_dropout_in_model(st.ref)
        tu.add_fused_lm_head(model.get_base_model() if st.peft else model, outputs=DPO_OUTPUTS)
        if st.ref is not None:
            tu.add_fused_lm_head(st.ref)
        notes["dpo_reference"] = "adapters_disabled" if st.peft else "ref_model_copy"
        if st.ref is not None:
            notes["ref_params"] = sum(p.numel() for p in st.ref.parameters())
        st.batch = {k: t.to(dev) for k, t in dpo_collate(cfg, tu.pad, lcfg.vocab_size).items()}
    else:
        st.batch = {k: t.to(dev) for k, t in data_collate(cfg["data"], lcfg.vocab_size).items()}
        if cfg["data"].get("batching") == "multipack" and cfg.get("attn") == "sdpa":
            # PatchManager._apply_sdpa_varlen_patch (sdpa with sample_packing; under eager
            # axolotl patches nothing)
            sv, notes["axolotl"] = axolotl_sdpa_varlen()
            if not sv.patch_sdpa_varlen():
                raise RuntimeError("axolotl's sdpa_varlen did not install (torch.nn.attention.varlen missing)")
    _STATE[id(model)] = st
    return notes


def dpo_collate(cfg, pad, vocab):
    """DataCollatorForPreference(pad_token_id=0, max_length).torch_call (trl 1.16
    dpo_trainer.py lines 147-208) over `batch` examples of the plan's lengths."""
    import torch
    d = cfg["dpo"]
    g = torch.Generator().manual_seed(0)

    def toks(n):
        return torch.randint(1, vocab, (n,), generator=g).tolist()
    examples = [{"prompt_ids": toks(d["prompt_length"]), "chosen_ids": toks(d["completion_length"]),
                 "rejected_ids": toks(d["completion_length"])} for _ in range(int(cfg["batch"]))]
    max_length = d.get("max_length", DPO_MAX_LENGTH)
    prompt_chosen_ids = [e["prompt_ids"] + e["chosen_ids"] for e in examples]
    prompt_rejected_ids = [e["prompt_ids"] + e["rejected_ids"] for e in examples]
    chosen_mask = [[0] * len(e["prompt_ids"]) + [1] * len(e["chosen_ids"]) for e in examples]
    rejected_mask = [[0] * len(e["prompt_ids"]) + [1] * len(e["rejected_ids"]) for e in examples]
    sl = slice(None, max_length)  # truncation_mode "keep_start"
    prompt_chosen_ids = [ids[sl] for ids in prompt_chosen_ids]
    prompt_rejected_ids = [ids[sl] for ids in prompt_rejected_ids]
    chosen_mask = [m[sl] for m in chosen_mask]
    rejected_mask = [m[sl] for m in rejected_mask]
    chosen_attention_mask = [[1] * len(ids) for ids in prompt_chosen_ids]
    rejected_attention_mask = [[1] * len(ids) for ids in prompt_rejected_ids]
    input_ids = [torch.tensor(ids) for ids in prompt_chosen_ids + prompt_rejected_ids]
    attention_mask = [torch.tensor(m, dtype=torch.long) for m in chosen_attention_mask + rejected_attention_mask]
    completion_mask = [torch.tensor(m, dtype=torch.long) for m in chosen_mask + rejected_mask]
    return {"input_ids": pad(input_ids, padding_value=PAD_ID, padding_side="right"),
            "attention_mask": pad(attention_mask, padding_value=0, padding_side="right"),
            "completion_mask": pad(completion_mask, padding_value=0, padding_side="right")}


def data_collate(d, vocab):
    """The collated batch of the plan's lengths (random token ids in 1..vocab-1)."""
    import torch
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in d["lengths"]]
    if d.get("batching", "pad") == "padding_free":
        from transformers import DataCollatorWithFlattening
        return DataCollatorWithFlattening()([{"input_ids": s} for s in seqs], return_tensors="pt")
    if d["batching"] == "multipack":
        # V2BatchSamplerDataCollatorForSeq2Seq: each bin's sequences concatenated, then
        # DataCollatorForSeq2Seq pads labels with -100, position_ids with range(remainder) and
        # input_ids with the pad id (right), to the batch's longest rounded to pad_to_multiple_of
        L = data_len(d)
        ids, labels, pos, k = [], [], [], 0
        for b in multipack_bins(d):
            row = [t for s in seqs[k:k + len(b)] for t in s]
            p = [i for n in b for i in range(n)]
            k += len(b)
            r = L - len(row)
            ids.append(row + [PAD_ID] * r)
            labels.append(row + [-100] * r)
            pos.append(p + list(range(r)))
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "position_ids": torch.tensor(pos)}
    # tokenizer.pad(padding="longest"), padding_side "right", as DataCollatorWithPadding calls it
    L = max(len(s) for s in seqs)
    ids = torch.tensor([s + [PAD_ID] * (L - len(s)) for s in seqs], dtype=torch.long)
    mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask}


def dpo_loss(st, model):
    """DPOTrainer._compute_loss (trl 1.16 dpo_trainer.py lines 1285-1600), loss_type sigmoid."""
    import torch
    import torch.nn.functional as F
    inputs = st.batch
    _non_model_keys = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}
    model_kwargs = {k: v for k, v in inputs.items() if k not in _non_model_keys}
    model_kwargs["use_cache"] = False
    completion_mask = inputs["completion_mask"]
    shift_completion_mask = completion_mask[..., 1:]
    labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
    outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
    seq_len = shift_completion_mask.size(1)
    per_token_logps = outputs.log_probs[:, -seq_len:]
    logps = per_token_logps.sum(dim=1)
    chosen_logps, rejected_logps = logps.chunk(2, dim=0)
    ref_model_kwargs = dict(model_kwargs)
    # the trainer's gradient_checkpointing_kwargs, as measure_llama.py enabled checkpointing
    with torch.no_grad(), st.mu.disable_gradient_checkpointing(model, {"use_reentrant": False}):
        if st.peft:
            with st.tu.use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                ref_outputs = model(**ref_model_kwargs, labels=labels, fused_lm_head=True)
        else:
            ref_outputs = st.ref(**ref_model_kwargs, labels=labels, fused_lm_head=True)
    ref_per_token_logps = ref_outputs.log_probs[:, -seq_len:]
    ref_logps = ref_per_token_logps.sum(dim=1)
    ref_chosen_logps, ref_rejected_logps = ref_logps.chunk(2, dim=0)
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    delta_score = chosen_logratios - rejected_logratios
    loss = 0.0
    per_sequence_loss = -F.logsigmoid(DPO_BETA * delta_score)
    loss += per_sequence_loss.mean() * 1.0
    # the metrics (one process: gather_for_metrics is the tensor itself)
    per_token_entropy = outputs.entropy[:, -seq_len:].detach()
    mask = shift_completion_mask
    entropy_sum = (per_token_entropy * mask).sum()
    total_tokens = mask.sum()
    _ = (entropy_sum / total_tokens).item()
    _ = inputs["attention_mask"].sum().item()
    chosen_mean_logits, rejected_mean_logits = outputs.mean_logits[:, -seq_len:].chunk(2, dim=0)
    chosen_mask, rejected_mask = shift_completion_mask.chunk(2, dim=0)
    _ = chosen_mean_logits[chosen_mask.bool()].sum().item()
    _ = chosen_mask.sum().item()
    _ = rejected_mean_logits[rejected_mask.bool()].sum().item()
    _ = rejected_mask.sum().item()
    chosen_is_top1, _ = outputs.is_top1[:, -seq_len:].chunk(2, dim=0)
    correct_predictions = chosen_is_top1 & chosen_mask.bool()
    _ = (correct_predictions.sum() / chosen_mask.sum()).item()
    chosen_rewards = DPO_BETA * chosen_logratios.detach()
    rejected_rewards = DPO_BETA * rejected_logratios.detach()
    _ = chosen_rewards.mean().item(), rejected_rewards.mean().item()
    _ = (chosen_rewards > rejected_rewards).float().mean().item()
    _ = (chosen_rewards - rejected_rewards).mean().item()
    _ = chosen_logps.detach().mean().item(), rejected_logps.detach().mean().item()
    return loss


def owns(cfg):
    """Whether the line's batch is made here (measure_llama.py then makes no ids)."""
    return any(cfg.get(k) is not None for k in DATA_FIELDS)


def forward_loss(cfg, model):
    """The step's loss for a dpo or data line (None for any other)."""
    st = _STATE.get(id(model))
    if st is None:
        return None
    if cfg.get("dpo") is not None:
        return dpo_loss(st, model)
    b = st.batch
    if "position_ids" in b:
        return model(input_ids=b["input_ids"], labels=b["labels"], position_ids=b["position_ids"]).loss
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["input_ids"]).loss


@contextlib.contextmanager
def _sdpa_masks(seen):
    """Records whether each SDPA call got a mask (and its shape)."""
    import torch.nn.functional as F
    orig = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, *a, **kw):
        seen.append(None if attn_mask is None else tuple(attn_mask.shape))
        return orig(q, k, v, attn_mask, *a, **kw)
    F.scaled_dot_product_attention = spy
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig


def worker_steps(cfg):
    """A plan line through measure_llama.py's worker order on the CPU (its hooks, in order), its
    hf_config shrunk to a tiny model and its lengths kept: build, checkpointing, peft, after_peft,
    prepare, train, AdamW, two steps of techniques.forward_loss, backward, step, zero_grad."""
    import torch
    import transformers
    import techniques
    from peft import LoraConfig, get_peft_model
    hf = dict(cfg["hf_config"], hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=256)
    kw = {k: v for k, v in hf.items() if k != "architectures"}
    model_cls = getattr(transformers, hf["architectures"][0])
    lcfg = model_cls.config_class(attn_implementation=cfg["attn"], **kw)
    dtype = {"bf16": torch.bfloat16, "lora_bf16": torch.bfloat16}.get(cfg["mode"])
    torch.manual_seed(0)
    assert techniques.build_model(cfg, model_cls, lcfg, dtype) is None
    model = model_cls(lcfg)
    if dtype is not None:
        model.to(dtype)
    if cfg["ckpt"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg["mode"] == "lora_bf16":
        lc = cfg["lora"]
        if cfg["ckpt"]:
            model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                                                 target_modules=lc["targets"], task_type="CAUSAL_LM"))
    model = techniques.after_peft(cfg, model)
    notes = techniques.prepare(cfg, model, model_cls, lcfg, dtype, torch.device("cpu"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
    assert techniques.owns(cfg)
    losses = []
    for _ in range(2):
        loss = techniques.forward_loss(cfg, model, None)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    import tech_data  # (techniques' copy of this module, not __main__'s)
    rows = {k: tuple(v.shape) for k, v in tech_data._STATE[id(model)].batch.items()}
    print(f"ok  {cfg['name']}: {rows}, losses {losses[0]:.4f} {losses[1]:.4f}, {notes}")


def cpu_check(plan):
    """Every plan line's fields checked; then, on a tiny Llama on the CPU: the DPO step (full with a
    reference copy, LoRA with adapters disabled) whose loss is log(2) at the start (policy and
    reference equal) and whose gradients reach the trainable parameters; the padded and packed
    batches, their SDPA masks and their losses against each sequence run alone."""
    import json
    import math
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model
    with open(plan) as f:
        lines = [json.loads(l) for l in f if l.strip() and not l.lstrip().startswith("#")]
    for c in lines:
        check(c)
    print(f"plan fields: {len(lines)} lines ok")
    # TRL's helpers where HF `datasets` and pandas are missing, as on the GPU image
    import os
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules.update(dict.fromkeys(sys.argv[2:])); "
                        "sys.path.insert(0, sys.argv[1]); import tech_data; "
                        "tu, mu, stubbed = tech_data._trl(); print(tu.add_fused_lm_head.__module__, "
                        "mu.disable_gradient_checkpointing.__module__, stubbed)", here, *_TRL_STUBS],
                       capture_output=True, text=True)
    assert r.returncode == 0 and str(list(_TRL_STUBS)) in r.stdout, r.stderr[-2000:]
    print(f"ok  trl without {', '.join(_TRL_STUBS)}: {r.stdout.strip().splitlines()[-1]}")
    for c in lines:
        worker_steps(c)
    lcfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=2, num_hidden_layers=2, attn_implementation="sdpa",
                       tie_word_embeddings=False)
    dev = torch.device("cpu")
    for mode in ("bf16", "lora_bf16"):
        torch.manual_seed(0)
        cfg = {"mode": mode, "batch": 2, "seq": 24, "attn": "sdpa",
               "dpo": {"prompt_length": 10, "completion_length": 14, "max_length": 64}}
        model = LlamaForCausalLM(lcfg)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mode == "lora_bf16":
            model.enable_input_require_grads()
            model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05,
                                                     target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        notes = prepare(cfg, model, LlamaForCausalLM, lcfg, None, dev)
        st = _STATE[id(model)]
        if st.ref is not None:  # TRL's reference is the initial model: the same weights
            st.ref.load_state_dict(model.state_dict())
        b = st.batch
        assert tuple(b["input_ids"].shape) == (4, 24) and int(b["completion_mask"].sum()) == 4 * 14, b
        model.train()
        calls = []
        h = model.register_forward_pre_hook(lambda *a: calls.append(torch.is_grad_enabled()))
        loss = forward_loss(cfg, model)
        h.remove()
        assert abs(float(loss) - math.log(2)) < 1e-4, float(loss)
        loss.backward()
        trained = [n for n, p in model.named_parameters() if p.requires_grad]
        assert trained and all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad)
        assert model.is_gradient_checkpointing, "checkpointing not restored after the reference"
        if st.ref is None:
            assert calls == [True, False], calls  # the policy, then itself under no_grad
        else:
            assert calls == [True] and all(p.grad is None for p in st.ref.parameters())
        print(f"ok  dpo {mode}: reference {notes['dpo_reference']}, loss {float(loss):.5f} = log 2, "
              f"{len(trained)} trainable tensors with gradients, checkpointing restored")
    torch.manual_seed(0)
    model = LlamaForCausalLM(lcfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    lens = [5, 9, 7]
    for batching in ("pad", "padding_free"):
        cfg = {"mode": "fp32", "batch": 3, "attn": "sdpa", "seq": 21 if batching == "padding_free" else 9,
               "data": {"lengths": lens, "batching": batching, "order": "given"}}
        prepare(cfg, model, LlamaForCausalLM, lcfg, None, dev)
        b = _STATE[id(model)].batch
        seen = []
        with _sdpa_masks(seen):
            loss = forward_loss(cfg, model)
        if batching == "pad":
            assert tuple(b["input_ids"].shape) == (3, 9) and b["attention_mask"].sum().item() == 21
            assert seen and all(s == (3, 1, 9, 9) for s in seen), seen
        else:
            assert tuple(b["input_ids"].shape) == (1, 21) and b["position_ids"][0].tolist()[5:7] == [0, 1]
            assert seen and all(s == (1, 1, 21, 21) for s in seen), seen
            # the block-causal mask: each sequence's loss as if it ran alone
            ids, start, tot, n = b["input_ids"][0], 0, 0.0, 0
            with torch.no_grad():
                for ln in lens:
                    s = ids[start:start + ln][None]
                    tot += float(model(input_ids=s, labels=s).loss) * (ln - 1)
                    n += ln - 1
                    start += ln
            assert abs(float(loss) - tot / n) < 1e-4, (float(loss), tot / n)
        print(f"ok  data {batching}: {tuple(b['input_ids'].shape)}, SDPA mask {seen[0]}, loss {float(loss):.5f}")
    # axolotl's real batches: [5, 9, 7] in bins of 16 are [5, 9] and [7], rows padded to 64; its
    # sdpa_varlen patch installs (on the CPU it runs stock SDPA on its own block-diagonal mask)
    try:
        axolotl_sdpa_varlen()
    except ImportError:
        print("skip data multipack: axolotl is not importable here (nor AXOLOTL_SDPA_VARLEN set)")
    else:
        cfg = {"mode": "bf16", "batch": 2, "attn": "sdpa", "seq": 64,
               "data": {"lengths": lens, "batching": "multipack", "order": "given", "real_batches": True,
                        "pack_length": 16, "max_length": 16, "pad_to_multiple_of": 64}}
        check(cfg)
        prepare(cfg, model, LlamaForCausalLM, lcfg, None, dev)
        b = _STATE[id(model)].batch
        assert tuple(b["input_ids"].shape) == (2, 64), b["input_ids"].shape
        assert b["position_ids"][0].tolist()[:16] == list(range(5)) + list(range(9)) + [0, 1], b["position_ids"][0]
        assert b["position_ids"][1].tolist()[7:9] == [0, 1] and "attention_mask" not in b
        assert (b["labels"][0, 14:] == -100).all() and (b["labels"][1, 7:] == -100).all()
        loss = forward_loss(cfg, model)
        assert torch.isfinite(loss)
        print(f"ok  data multipack: {tuple(b['input_ids'].shape)}, rows [5, 9] and [7] padded to 64, "
              f"axolotl's sdpa_varlen installed, loss {float(loss):.5f}")
        axolotl_sdpa_varlen()[0].unpatch_sdpa_varlen()
    for bad in ({"dpo": {"prompt_length": 4}, "mode": "bf16", "seq": 4},
                {"data": {"lengths": [3, 4], "order": "shuffle"}, "batch": 2, "attn": "sdpa", "seq": 4},
                {"data": {"lengths": [3, 4], "order": "given"}, "batch": 2, "attn": "flash", "seq": 4},
                {"data": {"lengths": [3, 4], "order": "given"}, "batch": 2, "attn": "sdpa", "seq": 7},
                {"data": {"lengths": [3, 4], "batching": "multipack", "order": "given", "real_batches": True,
                          "pack_length": 8, "max_length": 8, "pad_to_multiple_of": 64},
                 "batch": 2, "mode": "bf16", "attn": "sdpa", "seq": 64}):
        try:
            check(bad)
        except (ValueError, KeyError, TypeError) as e:
            print(f"ok  refused {bad}: {e}")
        else:
            raise AssertionError(f"accepted {bad}")
    print("cpu-check: dpo and data ran")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="CPU check of the DPO and variable-length hooks")
    ap.add_argument("--cpu-check", metavar="PLAN", required=True)
    cpu_check(ap.parse_args().cpu_check)
