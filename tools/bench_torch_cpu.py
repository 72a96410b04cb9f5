"""tools/bench_torch_cpu.py - the reference for `make bench`: the same training step
as tools/bench_cpu.c (GPT-2 124M shape, random init, fp32, B=4, T=64, forward +
backward + AdamW) in PyTorch + transformers on the CPU, with the same thread count.

usage: python3 tools/bench_torch_cpu.py [--steps N] [--batch B] [--seq T] [--threads N]
Prints 'SKIP ...' and exits 77 when torch or transformers is missing."""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("SKIP: torch/transformers not installed (pip install torch transformers)")
        return 77
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # GPT-2 124M, no dropout as gpt2rt
    model = GPT2LMHeadModel(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    times = []
    for k in range(-1, a.steps):  # step -1 warms up
        x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
        y = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
        t0 = time.perf_counter()
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        print(f"torch step {k:2d}: loss {loss.item():.4f}  {dt * 1e3:.0f} ms")
        if k >= 0:
            times.append(dt)
    t = sum(times) / len(times)
    print(f"torch {torch.__version__}, transformers, {a.threads} threads: {t * 1e3:.0f} ms per step")
    print(f"tokens/s: {a.batch * a.seq / t:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
