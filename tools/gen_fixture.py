#!/usr/bin/env python3
"""Generate the Hugging Face reference fixture used by gpt2rt's C tests.

Builds a tiny, randomly initialised ``transformers.GPT2LMHeadModel`` (2 layers,
4 heads, 64 channels, vocab 1000, context 64, gelu_new, no dropout, tied
wte/lm_head, eager attention), perturbs its biases and LayerNorm parameters so
that they are not trivially 0/1, and writes into the output directory
(default ``tests/fixtures/hf_tiny``):

  model.safetensors, config.json
      ``model.save_pretrained(dir)``: Hugging Face's layout (``transformer.*``
      names, Conv1D weights stored [in, out], tied ``lm_head.weight`` dropped).
  gpt2_style.safetensors
      The same weights in the layout of the original OpenAI GPT-2 checkpoint on
      the hub: no ``transformer.`` prefix, plus the causal-mask buffers
      ``h.N.attn.bias`` (1,1,n_positions,n_positions) float32 lower-triangular
      ones and ``h.N.attn.masked_bias`` (scalar float32 -1e4), plus an explicit
      ``lm_head.weight`` equal to ``wte.weight``.
  reference.safetensors
      inputs/targets (int32, targets[0,0:3] = -100 = ignored), logits, loss,
      grad.<hf name> for every parameter, logits_1layer (model truncated to its
      first layer), and a 10-step AdamW training run (step_inputs,
      step_targets, step_losses, step_grad_norms (pre-clip), step_lrs,
      final.<name> for a few parameters). The metadata holds the model and
      optimiser hyper-parameters as strings.

Everything runs in fp32 on the CPU with deterministic algorithms and one
thread, so re-running produces identical files. No network access: the model
is built from a GPT2Config, never downloaded.

Usage (from the repository root):
    python3 tools/gen_fixture.py [--out tests/fixtures/hf_tiny]
"""

import argparse
import inspect
import json
import math
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file, load_file  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

# Model / batch shape.
N_LAYER, N_HEAD, N_EMBD, VOCAB, N_POS = 2, 4, 64, 1000, 64
B, T = 4, 32
# Optimiser / schedule.
LR_MAX = 1e-3
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
WARMUP = 2
TOTAL = 10
MIN_LR_FRAC = 0.1
STEPS = 10
IGNORE = -100
FINAL_NAMES = ["transformer.wte.weight",
               "transformer.h.1.mlp.c_fc.weight",
               "transformer.h.0.ln_1.bias"]


def lr_at(s):
    """Warmup + cosine decay to lr_max*min_lr_frac (Python floats)."""
    if s < WARMUP:
        return LR_MAX * (s + 1) / WARMUP
    ratio = (s - WARMUP) / max(1, TOTAL - WARMUP)
    ratio = min(max(ratio, 0.0), 1.0)
    lr_min = LR_MAX * MIN_LR_FRAC
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR_MAX - lr_min)


def make_config():
    return GPT2Config(
        n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, vocab_size=VOCAB,
        n_positions=N_POS, activation_function="gelu_new",
        layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=True,
        # GPT-2's 50256 would lie outside the tiny vocabulary.
        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
        attn_implementation="eager")


def load_model(path, **overrides):
    m = GPT2LMHeadModel.from_pretrained(
        path, attn_implementation="eager", local_files_only=True, **overrides)
    m.to(torch.float32)
    m.train()
    return m


def sort_metadata(path):
    """safetensors writes __metadata__ in hash-map order, which changes from
    run to run; rewrite the header in place with the keys sorted so that the
    file is byte-for-byte reproducible (tensor entries and data untouched)."""
    with open(path, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        meta = header.pop("__metadata__", None)
        new = {}
        if meta is not None:
            new["__metadata__"] = {k: meta[k] for k in sorted(meta)}
        new.update(header)
        text = json.dumps(new, separators=(",", ":")).encode("utf-8")
        assert len(text) <= n, "header grew"
        fh.seek(8)
        fh.write(text + b" " * (n - len(text)))


def ce_loss(model, inputs, targets):
    logits = model(inputs.long()).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                           targets.reshape(-1).long(), ignore_index=IGNORE)
    return logits, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/hf_tiny",
                    help="output directory (default: %(default)s)")
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    # ---- model: HF init, then perturb biases and LayerNorm params ----------
    cfg = make_config()
    model = GPT2LMHeadModel(cfg)
    assert model.config._attn_implementation == "eager"
    model.to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_ln = ".ln_" in name or name.startswith("transformer.ln_f")
            if is_ln and name.endswith(".weight"):
                p.add_(torch.randn_like(p) * 0.1)  # 1 + N(0, 0.1)
            elif name.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.02)  # N(0, 0.02)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), \
        "wte and lm_head are not tied"

    save_kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        save_kwargs["safe_serialization"] = True
    model.save_pretrained(out, **save_kwargs)
    for junk in ("generation_config.json",):
        jp = os.path.join(out, junk)
        if os.path.exists(jp):
            os.remove(jp)

    # ---- gpt2_style.safetensors: original OpenAI checkpoint layout ---------
    sd = model.state_dict()
    g2 = {}
    for k, v in sd.items():
        if k.startswith("transformer."):
            g2[k[len("transformer."):]] = v.detach().clone().contiguous()
    mask = torch.tril(torch.ones(N_POS, N_POS, dtype=torch.float32)).view(1, 1, N_POS, N_POS)
    for i in range(N_LAYER):
        g2[f"h.{i}.attn.bias"] = mask.clone()
        g2[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
    g2["lm_head.weight"] = sd["transformer.wte.weight"].detach().clone().contiguous()
    save_file(g2, os.path.join(out, "gpt2_style.safetensors"), metadata={"format": "pt"})

    # ---- reference forward/backward on the saved weights -------------------
    gen = torch.Generator().manual_seed(1234)
    step_inputs = torch.randint(0, VOCAB, (STEPS, B, T), generator=gen, dtype=torch.int64)
    step_targets = torch.randint(0, VOCAB, (STEPS, B, T), generator=gen, dtype=torch.int64)
    step_targets[0, 0, 0:3] = IGNORE
    inputs = step_inputs[0].clone()
    targets = step_targets[0].clone()

    model = load_model(out)
    model.zero_grad(set_to_none=True)
    logits, loss = ce_loss(model, inputs, targets)
    loss.backward()
    ref = {
        "inputs": inputs.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": logits.detach().clone().contiguous(),
        "loss": loss.detach().reshape(1).clone(),
    }
    names = []
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        ref["grad." + name] = p.grad.detach().clone().contiguous()
        names.append(name)

    # ---- model truncated to its first layer --------------------------------
    m1 = load_model(out, n_layer=1)
    with torch.no_grad():
        ref["logits_1layer"] = m1(inputs.long()).logits.detach().clone().contiguous()
    del m1

    # ---- 10 AdamW steps from the saved initial weights ---------------------
    model = load_model(out)
    params = list(model.parameters())  # tied wte appears once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=LR_MAX, betas=(BETA1, BETA2), eps=EPS, weight_decay=WEIGHT_DECAY,
        foreach=False)
    losses, norms, lrs = [], [], []
    for k in range(STEPS):
        _, lk = ce_loss(model, step_inputs[k], step_targets[k])
        lk.backward()
        nk = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        lr = lr_at(k)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(lk.item())
        norms.append(nk.item())
        lrs.append(lr)
    assert losses[0] == ref["loss"].item(), (losses[0], ref["loss"].item())
    ref["step_inputs"] = step_inputs.to(torch.int32)
    ref["step_targets"] = step_targets.to(torch.int32)
    ref["step_losses"] = torch.tensor(losses, dtype=torch.float32)
    ref["step_grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    ref["step_lrs"] = torch.tensor(lrs, dtype=torch.float32)
    named = dict(model.named_parameters())
    for n in FINAL_NAMES:
        ref["final." + n] = named[n].detach().clone().contiguous()

    meta = {
        "n_layer": N_LAYER, "n_head": N_HEAD, "n_embd": N_EMBD,
        "vocab_size": VOCAB, "n_positions": N_POS, "B": B, "T": T,
        "lr": LR_MAX, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP,
        "warmup_steps": WARMUP, "total_steps": TOTAL,
        "min_lr_frac": MIN_LR_FRAC, "steps": STEPS,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "about": ("gpt2rt reference: tiny random GPT2LMHeadModel (gelu_new, tied "
                  "wte/lm_head, no dropout), fp32 CPU logits/loss/grads with "
                  "targets==-100 ignored, plus 10 AdamW steps with warmup+cosine "
                  "lr and grad-norm clipping; made by tools/gen_fixture.py"),
    }
    meta = {k: str(v) for k, v in meta.items()}
    save_file(ref, os.path.join(out, "reference.safetensors"), metadata=meta)
    sort_metadata(os.path.join(out, "reference.safetensors"))

    # ---- summary -----------------------------------------------------------
    back = load_file(os.path.join(out, "reference.safetensors"))
    assert torch.equal(back["logits"], ref["logits"])
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"parameters ({len(names)} tensors, {sum(p.numel() for p in params)} values)")
    print(f"loss           {ref['loss'].item():.8f}")
    print("step_losses    " + " ".join(f"{x:.6f}" for x in losses))
    print("step_grad_norms " + " ".join(f"{x:.6f}" for x in norms))
    print("step_lrs       " + " ".join(f"{x:.6g}" for x in lrs))
    total = 0
    for f in sorted(os.listdir(out)):
        sz = os.path.getsize(os.path.join(out, f))
        total += sz
        print(f"  {f:28s} {sz:>10,d} bytes")
    print(f"  {'total':28s} {total:>10,d} bytes")
    with open(os.path.join(out, "config.json")) as fh:
        print("config.json keys:", ", ".join(sorted(json.load(fh).keys())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
