#!/usr/bin/env python3
"""tools/bench_hf_generate.py - the reference for `make bench`'s generation line:
Hugging Face transformers' GPT2LMHeadModel.generate on the CPU, GPT-2 124M shape
(random init), fp32, B = 1, a 64-token prompt, greedy (do_sample=False, num_beams=1),
use_cache=True, the same new-token count and thread count as tools/bench_gen.c.
Prints the median over --reps runs of new tokens per second of the whole generate
call (prefill included) as "generate tokens/s: X".

usage: python3 tools/bench_hf_generate.py [--new N] [--prompt N] [--reps N] [--threads N]
Prints 'SKIP ...' and exits 77 when torch or transformers is missing."""
import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("SKIP: torch/transformers not installed (pip install torch transformers)")
        return 77
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # GPT-2 124M
    model = GPT2LMHeadModel(cfg).eval()
    rates = []
    for k in range(-1, a.reps):  # run -1 warms up
        x = torch.randint(0, cfg.vocab_size, (1, a.prompt))
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, num_beams=1, use_cache=True,
                                 max_new_tokens=a.new, min_new_tokens=a.new, pad_token_id=cfg.eos_token_id)
        dt = time.perf_counter() - t0
        n = out.shape[1] - a.prompt
        print(f"HF run {k}: {n} new tokens in {dt * 1e3:.0f} ms")
        if k >= 0:
            rates.append(n / dt)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {a.threads} threads")
    print(f"generate tokens/s: {statistics.median(rates):.1f} (median of {a.reps}, prefill included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
