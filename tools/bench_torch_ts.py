"""tools/bench_torch_ts.py - the reference for `make bench-ts`: the training step of
tools/bench_ts.c in PyTorch + transformers on the CPU, same shapes, same kind of data, same
thread count: RevIN (mean, std = sqrt(biased var + 1e-5)), the series padded at the
end by repeating its last value (ReplicationPad1d) and unfolded into patches,
in_layer Linear(patch -> C), transformers' GPT2Model (inputs_embeds: + wpe, the
blocks, ln_f), dropout, out_layer Linear(n_patches * C -> horizon), de-normalised, MSE;
backward, clip_grad_norm_(1.0), AdamW. Attention and MLP frozen as GPT4TS does
(requires_grad False: autograd computes their input gradients only; the optimizer and
the clip see the trained parameters only). Prints windows/s.
--head next-patch: aLLM4TS's stage 1 instead (bench_ts.c -head next-patch): the patches
unfolded without padding, out_layer Linear(C -> patch) at every position, MSE of
position n's output against patch n + 1 in RevIN's scale, no targets.

usage: python3 tools/bench_torch_ts.py [--steps N] [--batch B] [--lookback L] [--patch P]
       [--stride S] [--channels M] [--horizon H] [--layers N] [--heads N] [--width C]
       [--freeze 0|1] [--dropout P] [--head-dropout P] [--threads N] [--head regression|next-patch]
       (bench_ts.c's single-dash spellings work too)
Prints 'SKIP ...' and exits 77 when torch or transformers is missing."""
import argparse
import math
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", "-steps", type=int, default=20)
    ap.add_argument("--batch", "-batch", type=int, default=16)
    ap.add_argument("--lookback", "-lookback", type=int, default=336)
    ap.add_argument("--patch", "-patch", type=int, default=16)
    ap.add_argument("--stride", "-stride", type=int, default=16)
    ap.add_argument("--channels", "-channels", type=int, default=7)
    ap.add_argument("--horizon", "-horizon", type=int, default=96)
    ap.add_argument("--layers", "-layers", type=int, default=1)
    ap.add_argument("--heads", "-heads", type=int, default=2)
    ap.add_argument("--width", "-width", type=int, default=16)
    ap.add_argument("--freeze", "-freeze", type=int, default=1)
    ap.add_argument("--dropout", "-dropout", type=float, default=0.0)
    ap.add_argument("--head-dropout", "-head-dropout", type=float, default=0.3)
    ap.add_argument("--threads", "-threads", type=int, default=os.cpu_count())
    ap.add_argument("--head", "-head", choices=["regression", "next-patch"], default="regression")
    a = ap.parse_args()
    try:
        import torch
        from torch import nn
        from transformers import GPT2Config, GPT2Model
    except ImportError:
        print("SKIP: torch/transformers not installed (pip install torch transformers)")
        return 77
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    L, PL, PS, M, H, C = a.lookback, a.patch, a.stride, a.channels, a.horizon, a.width
    nxt = a.head == "next-patch"
    if nxt:
        H = 0  # the targets are the window's own next patches
    NP = (L - PL) // PS + (1 if nxt else 2)  # next-patch: no padding

    class Forecaster(nn.Module):  # GPT4TS's long-term forecaster, random init
        def __init__(self):
            super().__init__()
            self.pad = nn.ReplicationPad1d((0, PS))
            self.in_layer = nn.Linear(PL, C)
            cfg = GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=C, n_positions=NP, vocab_size=1,
                             bos_token_id=0, eos_token_id=0,  # the 1-token vocabulary is unused (inputs_embeds)
                             resid_pdrop=a.dropout, embd_pdrop=a.dropout, attn_pdrop=0.0)
            self.gpt2 = GPT2Model(cfg)
            self.head_dropout = nn.Dropout(a.head_dropout)  # gpt2rt's head_dropout: ln_f's output, before out_layer
            self.out_layer = nn.Linear(C, PL) if nxt else nn.Linear(NP * C, H)

        def forward_next(self, x):  # x (B, L, M) -> the next-patch MSE (aLLM4TS stage 1)
            B = x.shape[0]
            mean = x.mean(1, keepdim=True).detach()
            x = x - mean
            std = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
            x = x / std
            p = x.permute(0, 2, 1).unfold(-1, PL, PS).reshape(B * M, NP, PL)  # (B*M, NP, PL)
            h = self.gpt2(inputs_embeds=self.in_layer(p)).last_hidden_state
            out = self.out_layer(self.head_dropout(h))                        # (B*M, NP, PL)
            return torch.nn.functional.mse_loss(out[:, :-1], p[:, 1:])

        def forward(self, x):  # x (B, L, M) -> (B, H, M)
            B = x.shape[0]
            mean = x.mean(1, keepdim=True).detach()
            x = x - mean
            std = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
            x = x / std
            x = self.pad(x.permute(0, 2, 1))               # (B, M, L + PS)
            x = x.unfold(-1, PL, PS).reshape(B * M, NP, PL)  # (B*M, NP, PL)
            h = self.gpt2(inputs_embeds=self.in_layer(x)).last_hidden_state
            y = self.out_layer(self.head_dropout(h.reshape(B * M, NP * C)))  # (B*M, H)
            y = y.reshape(B, M, H).permute(0, 2, 1)
            return y * std + mean

    model = Forecaster().train()
    if a.freeze:  # GPT4TS: attention and MLP keep their init
        for name, p in model.gpt2.named_parameters():
            if ".attn." in name or ".mlp." in name:
                p.requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-3, weight_decay=0.0)
    # the data of bench_ts.c: per channel a daily and a weekly cycle, a drift and noise
    B = a.batch
    n = L + H + B * 8
    t = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    m = torch.arange(M, dtype=torch.float64).unsqueeze(0)
    g = torch.Generator().manual_seed(1)
    series = (torch.sin(2 * math.pi * t / 24.0 + m) * (1 + 0.2 * m) + 0.5 * torch.sin(2 * math.pi * t / 168.0)
              + 1e-3 * t + 0.3 * (torch.rand(n, M, generator=g, dtype=torch.float64) - 0.5)).float()
    times, cpu_times = [], []
    for k in range(-2, a.steps):  # two steps warm up
        t0 = (k + 2) % 8
        x = torch.stack([series[t0 + b * 8: t0 + b * 8 + L] for b in range(B)])
        y = torch.stack([series[t0 + b * 8 + L: t0 + b * 8 + L + H] for b in range(B)])
        s, cs = time.perf_counter(), time.process_time()
        loss = model.forward_next(x) if nxt else torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt, ct = time.perf_counter() - s, time.process_time() - cs
        if k < 0 or k % 5 == 4 or k == a.steps - 1:
            print(f"torch step {k:3d}: loss {loss.item():.4f}  {dt * 1e3:.1f} ms")
        if k >= 0:
            times.append(dt)
            cpu_times.append(ct)
    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    mean = sum(times) / len(times)
    med = median(times)
    n_params = sum(p.numel() for p in model.parameters()) - C  # less the unused 1-token wte
    n_trained = sum(p.numel() for p in trained)
    print(f"torch {torch.__version__}, {n_params} parameters ({n_trained} trained), {a.threads} threads, {a.steps} steps of {B} windows: "
          f"median {med * 1e3:.2f} ms, mean {mean * 1e3:.2f} ms")
    print(f"windows/s: {B / med:.1f} (median step)")
    print(f"cpu ms/step: {median(cpu_times) * 1e3:.2f} (median, process CPU time of all threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
