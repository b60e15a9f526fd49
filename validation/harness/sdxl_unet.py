"""A plain-PyTorch SDXL base UNet (no diffusers on the measuring machine), following diffusers'
UNet2DConditionModel with the SDXL base config op for op: ResnetBlock2D, Transformer2DModel with
linear projections, BasicTransformerBlock with AttnProcessor2_0 (F.scaled_dot_product_attention),
GEGLU feed-forward, Downsample2D / Upsample2D (the bf16 -> fp32 cast around nearest upsampling),
the time and add embeddings, and diffusers' gradient checkpointing (non-reentrant, every
ResnetBlock2D and every BasicTransformerBlock except the mid block's first ResNet).

2,567,463,684 parameters with the default config, as validation/records/sdxl_h200.jsonl's model.
Used by profile_sdxl_step.py.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CONFIG = dict(block_out=(320, 640, 1280), depth=(0, 2, 10), heads=(5, 10, 20), layers=2,
              temb=1280, time_proj=320, add_time_proj=256, add_in=2816, cross=2048)


def timestep_embedding(t, dim):
    """diffusers' get_timestep_embedding with flip_sin_to_cos=True, downscale_freq_shift=0."""
    half = dim // 2
    exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device)
    exponent = exponent / half
    emb = t[:, None].float() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    return torch.cat([emb[:, half:], emb[:, :half]], dim=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.linear_1, self.linear_2 = nn.Linear(cin, cout), nn.Linear(cout, cout)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(32, cout, eps=1e-5)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return (x + h) / 1.0


class Attention(nn.Module):
    def __init__(self, dim, kv_dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(kv_dim, dim, bias=False)
        self.to_v = nn.Linear(kv_dim, dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def forward(self, x, ctx=None):
        b = x.shape[0]
        kv = x if ctx is None else ctx
        q, k, v = self.to_q(x), self.to_k(kv), self.to_v(kv)
        d = k.shape[-1] // self.heads
        q = q.view(b, -1, self.heads, d).transpose(1, 2)
        k = k.view(b, -1, self.heads, d).transpose(1, 2)
        v = v.view(b, -1, self.heads, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=False)
        o = o.transpose(1, 2).reshape(b, -1, self.heads * d).to(q.dtype)
        o = self.to_out[1](self.to_out[0](o))
        return o / 1.0


class GEGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2)

    def forward(self, x):
        h, gate = self.proj(x).chunk(2, dim=-1)
        return h * F.gelu(gate)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, heads, cross):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim, dim, heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, cross, heads)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = nn.Module()
        self.ff.net = nn.ModuleList([GEGLU(dim, 4 * dim), nn.Dropout(0.0), nn.Linear(4 * dim, dim)])

    def forward(self, h, ctx):
        h = self.attn1(self.norm1(h)) + h
        h = self.attn2(self.norm2(h), ctx) + h
        f = self.norm3(h)
        for m in self.ff.net:
            f = m(f)
        return f + h


class Transformer2DModel(nn.Module):
    def __init__(self, dim, depth, heads, cross):
        super().__init__()
        self.norm = nn.GroupNorm(32, dim, eps=1e-6)
        self.proj_in = nn.Linear(dim, dim)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(dim, heads, cross) for _ in range(depth)])
        self.proj_out = nn.Linear(dim, dim)
        self.ckpt = False

    def forward(self, x, ctx):
        b, c, hh, ww = x.shape
        h = self.norm(x).permute(0, 2, 3, 1).reshape(b, hh * ww, c)
        h = self.proj_in(h)
        for blk in self.transformer_blocks:
            h = checkpoint(blk, h, ctx, use_reentrant=False) if self.ckpt and self.training else blk(h, ctx)
        h = self.proj_out(h)
        h = h.reshape(b, hh, ww, c).permute(0, 3, 1, 2).contiguous()
        return h + x


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        dtype = x.dtype
        if dtype == torch.bfloat16:
            x = x.to(torch.float32)
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        if dtype == torch.bfloat16:
            x = x.to(dtype)
        return self.conv(x)


def run_resnet(r, h, emb, ckpt):
    return checkpoint(r, h, emb, use_reentrant=False) if ckpt else r(h, emb)


class Block(nn.Module):
    """A down or up block: resnets, optional attentions, optional resampler."""

    def __init__(self, resnets, attentions, sampler, up):
        super().__init__()
        self.resnets = nn.ModuleList(resnets)
        self.attentions = nn.ModuleList(attentions) if attentions else None
        name = "upsamplers" if up else "downsamplers"
        setattr(self, name, nn.ModuleList([sampler]) if sampler is not None else None)
        self.up = up
        self.ckpt = False


class SDXLUNet(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        bo, c = cfg["block_out"], cfg
        self.conv_in = nn.Conv2d(4, bo[0], 3, padding=1)
        self.time_embedding = TimestepEmbedding(c["time_proj"], c["temb"])
        self.add_embedding = TimestepEmbedding(c["add_in"], c["temb"])
        self.cfg = cfg
        self.down_blocks = nn.ModuleList()
        out = bo[0]
        for i, ch in enumerate(bo):
            inp, out = out, ch
            res = [ResnetBlock2D(inp if j == 0 else out, out, c["temb"]) for j in range(c["layers"])]
            att = [Transformer2DModel(out, c["depth"][i], c["heads"][i], c["cross"])
                   for _ in range(c["layers"])] if c["depth"][i] else None
            down = Downsample2D(out) if i < len(bo) - 1 else None
            self.down_blocks.append(Block(res, att, down, up=False))
        top = bo[-1]
        self.mid_block = nn.Module()
        self.mid_block.attentions = nn.ModuleList([Transformer2DModel(top, c["depth"][-1], c["heads"][-1], c["cross"])])
        self.mid_block.resnets = nn.ModuleList([ResnetBlock2D(top, top, c["temb"]), ResnetBlock2D(top, top, c["temb"])])
        rev, rdepth, rheads = list(reversed(bo)), list(reversed(c["depth"])), list(reversed(c["heads"]))
        self.up_blocks = nn.ModuleList()
        prev = rev[0]
        n = c["layers"] + 1
        for i, o in enumerate(rev):
            inp = rev[min(i + 1, len(rev) - 1)]
            res = [ResnetBlock2D((prev if j == 0 else o) + (inp if j == n - 1 else o), o, c["temb"]) for j in range(n)]
            att = [Transformer2DModel(o, rdepth[i], rheads[i], c["cross"]) for _ in range(n)] if rdepth[i] else None
            up = Upsample2D(o) if i < len(rev) - 1 else None
            self.up_blocks.append(Block(res, att, up, up=True))
            prev = o
        self.conv_norm_out = nn.GroupNorm(32, bo[0], eps=1e-5)
        self.conv_out = nn.Conv2d(bo[0], 4, 3, padding=1)
        self.gradient_checkpointing = False

    def enable_gradient_checkpointing(self):
        self.gradient_checkpointing = True
        for m in self.modules():
            if isinstance(m, Transformer2DModel):
                m.ckpt = True

    def forward(self, sample, timesteps, context, text_embeds, time_ids):
        ck = self.gradient_checkpointing and self.training
        b = sample.shape[0]
        t_emb = timestep_embedding(timesteps, self.cfg["time_proj"]).to(sample.dtype)
        emb = self.time_embedding(t_emb)
        te = timestep_embedding(time_ids.flatten(), self.cfg["add_time_proj"]).reshape(b, -1)
        add = torch.cat([text_embeds, te], dim=-1).to(emb.dtype)
        emb = emb + self.add_embedding(add)
        h = self.conv_in(sample)
        skips = [h]
        for blk in self.down_blocks:
            for j, r in enumerate(blk.resnets):
                h = run_resnet(r, h, emb, ck)
                if blk.attentions is not None:
                    h = blk.attentions[j](h, context)
                skips.append(h)
            if blk.downsamplers is not None:
                h = blk.downsamplers[0](h)
                skips.append(h)
        h = self.mid_block.resnets[0](h, emb)
        h = self.mid_block.attentions[0](h, context)
        h = run_resnet(self.mid_block.resnets[1], h, emb, ck)
        for blk in self.up_blocks:
            for j, r in enumerate(blk.resnets):
                h = torch.cat([h, skips.pop()], dim=1)
                h = run_resnet(r, h, emb, ck)
                if blk.attentions is not None:
                    h = blk.attentions[j](h, context)
            if blk.upsamplers is not None:
                h = blk.upsamplers[0](h)
        h = F.silu(self.conv_norm_out(h))
        return self.conv_out(h)


def record_calls(module_type, res, batch, record):
    """Builds the UNet on the meta device and runs one forward of a batch at res px, calling
    record(module, input) before every call of a module of module_type (no memory, no GPU)."""
    with torch.device("meta"):
        model = SDXLUNet()
    for m in model.modules():
        if isinstance(m, module_type):
            m.register_forward_pre_hook(lambda mod, args: record(mod, args[0]))
    lat = res // 8
    with torch.no_grad():
        model(torch.randn(batch, 4, lat, lat, device="meta"), torch.zeros(batch, device="meta"),
              torch.randn(batch, 77, 2048, device="meta"), torch.randn(batch, 1280, device="meta"),
              torch.randn(batch, 6, device="meta"))
