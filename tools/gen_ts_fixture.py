"""Writes tests/fixtures/ts_tiny/: a GPT4TS-style forecaster built from Hugging Face
transformers' GPT2Model, for tests/test_timeseries.c.

The model is GPT4TS's long-term forecaster ("One Fits All", NeurIPS 2023) written
here with torch modules around transformers' GPT2Model: RevIN (mean, std =
sqrt(biased var + 1e-5)) per series over the lookback, channel independence,
ReplicationPad1d((0, stride)) + unfold into patches, in_layer = nn.Linear(patch_len,
C), GPT2Model(inputs_embeds=...) (wpe, the blocks, ln_f), out_layer =
nn.Linear(n_patches * C, horizon), de-normalisation, MSE. Dropout off.

Files (safetensors, written without the safetensors package; metadata sorted):
  model.safetensors      the initial weights under gpt2rt's names (transformer.*
                         Conv1D layout as Hugging Face stores it, in_layer/out_layer
                         as nn.Linear) plus transformer.wte.weight, which a patch
                         model must skip
  model_affine.safetensors  the same with RevIN's affine (revin.affine_weight,
                         revin.affine_bias: PatchTST's per-channel scale and shift)
  reference.safetensors  x (B,L,M), y (B,H,M), pred (B,H,M), loss, grad.<name> for
                         every parameter, the losses of 3 AdamW steps and the
                         weights after them (final.<name>), the same for 3 steps with
                         attention and MLP frozen (frozen_loss, frozen_final.<name>),
                         and for the affine model (affine.pred, affine.loss,
                         affine.grad.<name>, affine.step_loss, affine.final.<name>)

Run: python3 tools/gen_ts_fixture.py [outdir]   (needs torch and transformers)
"""
import json
import math
import os
import struct
import sys

import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

B, L, M, PL, S, H = 3, 32, 2, 8, 4, 8
C, NL, NH, NPOS = 16, 2, 4, 10
NP = (L - PL) // S + 2
LR, WD, CLIP, B1, B2, EPS, STEPS = 1e-3, 0.1, 1.0, 0.9, 0.999, 1e-8, 3


class GPT4TS(nn.Module):
    def __init__(self, affine=False):
        super().__init__()
        self.affine = affine
        if affine:  # PatchTST's RevIN affine, one scale and shift per channel
            self.revin = nn.Module()
            self.revin.affine_weight = nn.Parameter(torch.ones(M))
            self.revin.affine_bias = nn.Parameter(torch.zeros(M))
        cfg = GPT2Config(n_embd=C, n_layer=NL, n_head=NH, n_positions=NPOS, vocab_size=50,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                         activation_function="gelu_new", layer_norm_epsilon=1e-5)
        cfg._attn_implementation = "eager"
        self.gpt2 = GPT2Model(cfg)
        self.in_layer = nn.Linear(PL, C)
        self.out_layer = nn.Linear(C * NP, H)
        self.pad = nn.ReplicationPad1d((0, S))

    def forward(self, x):  # x (B,L,M) -> (B,H,M)
        b = x.shape[0]
        means = x.mean(1, keepdim=True).detach()
        x = x - means
        stdev = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
        x = x / stdev
        if self.affine:
            x = x * self.revin.affine_weight + self.revin.affine_bias
        x = x.permute(0, 2, 1)                    # (B,M,L)
        x = self.pad(x)                           # (B,M,L+S)
        x = x.unfold(-1, PL, S)                   # (B,M,NP,PL)
        x = x.reshape(b * M, NP, PL)
        h = self.gpt2(inputs_embeds=self.in_layer(x)).last_hidden_state  # (B*M,NP,C)
        out = self.out_layer(h.reshape(b * M, NP * C))                     # (B*M,H)
        out = out.reshape(b, M, H).permute(0, 2, 1)                        # (B,H,M)
        if self.affine:
            out = (out - self.revin.affine_bias) / (self.revin.affine_weight + 1e-10)
        return out * stdev + means


def our_name(n):
    """torch name -> gpt2rt's (Hugging Face GPT2LMHeadModel's) name"""
    return "transformer." + n[len("gpt2."):] if n.startswith("gpt2.") else n


def params(model):
    """the parameters a patch model has: GPT2Model's wte is never used"""
    return [(our_name(n), p) for n, p in model.named_parameters() if n != "gpt2.wte.weight"]


def write_st(path, tensors, meta):
    """tensors: list of (name, float32 tensor); the safetensors format by hand"""
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous().to(torch.float32).cpu()
        data = struct.pack("<%df" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {k: str(v) for k, v in sorted(meta.items())}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for d in blobs:
            f.write(d)


def adamw_run(model, x, y, frozen):
    """STEPS AdamW steps as gpt2rt takes them: decay on 2-D weights, global-norm clip"""
    for n, p in model.named_parameters():
        p.requires_grad_(not (frozen and (".attn." in n or ".mlp." in n)))
    train = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in train if p.dim() >= 2], "weight_decay": WD},
              {"params": [p for p in train if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(B1, B2), eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.mean((model(x) - y) ** 2)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(train, CLIP)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/ts_tiny"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = GPT4TS()
    with torch.no_grad():  # every parameter away from its init pattern, so each path matters
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    init = {our_name(n): p.detach().clone() for n, p in model.named_parameters()}
    # channels with their own level and scale: RevIN has something to undo
    x = torch.randn(B, L, M) * torch.tensor([3.0, 0.5]) + torch.tensor([5.0, -2.0])
    y = torch.randn(B, H, M) * torch.tensor([3.0, 0.5]) + torch.tensor([5.0, -2.0])

    pred = model(x)
    loss = torch.mean((pred - y) ** 2)
    loss.backward()
    ref = [("x", x), ("y", y), ("pred", pred), ("loss", loss.reshape(1))]
    ref += [("grad." + n, p.grad.detach().clone()) for n, p in params(model)]

    losses = adamw_run(model, x, y, frozen=False)
    ref += [("step_loss", torch.tensor(losses))]
    ref += [("final." + n, p.detach().clone()) for n, p in params(model)]

    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[our_name(n)])
    losses = adamw_run(model, x, y, frozen=True)
    ref += [("frozen_loss", torch.tensor(losses))]
    ref += [("frozen_final." + n, p.detach().clone()) for n, p in params(model)]

    # the same model with RevIN's affine (scale and shift away from 1 and 0)
    amodel = GPT4TS(affine=True)
    with torch.no_grad():
        for n, p in amodel.named_parameters():
            p.copy_(init[our_name(n)] if our_name(n) in init else
                    (1.0 if n.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
    ainit = {our_name(n): p.detach().clone() for n, p in amodel.named_parameters()}
    apred = amodel(x)
    aloss = torch.mean((apred - y) ** 2)
    aloss.backward()
    ref += [("affine.pred", apred), ("affine.loss", aloss.reshape(1))]
    ref += [("affine.grad." + n, p.grad.detach().clone()) for n, p in params(amodel)]
    losses = adamw_run(amodel, x, y, frozen=False)
    ref += [("affine.step_loss", torch.tensor(losses))]
    ref += [("affine.final." + n, p.detach().clone()) for n, p in params(amodel)]

    n_params = sum(p.numel() for n, p in params(model))
    meta = {"format": "gpt2rt-ts-reference", "B": B, "L": L, "M": M, "patch_len": PL, "stride": S,
            "horizon": H, "n_embd": C, "n_layer": NL, "n_head": NH, "n_positions": NPOS, "n_patches": NP,
            "lr": LR, "weight_decay": WD, "grad_clip": CLIP, "beta1": B1, "beta2": B2, "eps": EPS,
            "steps": STEPS, "n_params": n_params, "torch": torch.__version__}
    write_st(os.path.join(out, "model.safetensors"), list(init.items()), {"format": "pt"})
    write_st(os.path.join(out, "model_affine.safetensors"), list(ainit.items()), {"format": "pt"})
    write_st(os.path.join(out, "reference.safetensors"), ref, meta)
    print("wrote %s: loss %.6f, %d parameters (no wte), %d patches" % (out, loss.item(), n_params, NP))
    assert math.isfinite(loss.item())


if __name__ == "__main__":
    main()
