"""tools/bench_torch_gpu.py - PyTorch GPU reference for gpt2rt's CUDA training step.

GPT-2 124M from transformers.GPT2Config() defaults (n_positions 1024, vocab 50257,
12 layers, 12 heads, C 768), GPT2LMHeadModel(config) randomly initialised (nothing is
downloaded), attn_implementation="sdpa", T=1024, bf16 autocast, AdamW(fused=True,
lr 3e-4, weight_decay 0.1), loss = model(input_ids=x, labels=x).loss (the model shifts
the labels), one optimizer step per micro-batch. Dropout is off and the gradient norm
is clipped to 1.0 by default, as in gpt2rt and tools/bench_torch_cpu.py
(--dropout 0.1 / --clip 0 give the plain HF defaults).

usage:
  python3 tools/bench_torch_gpu.py [--batch 8[,16,32]] [--mode eager|compile|both]
                                   [--steps 20] [--warmup 5] [--max-batch-for-gib 40]
                                   [--json out.json] [--peak-tflops X]
One machine-readable line per (mode, batch):
  torch mode=eager batch=8 tokens_per_s=... step_ms=... mfu=... peak_alloc_gib=...
        peak_reserved_gib=... gpu="NVIDIA H100 80GB HBM3"
MFU = tokens_per_s * flops_per_token / peak, flops_per_token = 6*N + 12*L*C*T with
N = model.num_parameters() (as transformers counts them: wte, tied with the LM head,
counted once, plus wpe and all blocks = 124,439,808), L=12, C=768, T=1024; peak =
dense bf16 tensor-core TFLOP/s from a table keyed by the device name (printed).
--max-batch-for-gib G: for each mode, find (doubling from the smallest --batch, then
bisection) the largest micro-batch whose torch.cuda.max_memory_allocated over two
training steps stays within G GiB (an OutOfMemoryError counts as over; the cache is
emptied between tries), then benchmark it too.
Without CUDA (or without torch/transformers) prints a SKIP line and exits 77."""
import argparse
import gc
import json
import math
import sys
import time

GIB = float(1 << 30)
# dense (no sparsity) bf16 tensor-core peak, TFLOP/s; first matching key wins
PEAK_BF16_TFLOPS = [
    ("H100 PCIe", 756.0),
    ("H100", 989.4),   # H100 SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H200", 989.4),
]


def peak_for(name, override):
    if override:
        return override, "--peak-tflops"
    for key, val in PEAK_BF16_TFLOPS:
        if key in name:
            return val, key
    return None, "unknown device (give --peak-tflops)"


def parse_batches(s):
    out = []
    for part in s.split(","):
        part = part.strip()
        if part:
            b = int(part)
            if b < 1:
                raise argparse.ArgumentTypeError("batch must be >= 1")
            out.append(b)
    if not out:
        raise argparse.ArgumentTypeError("empty batch list")
    return out


class Bench:
    def __init__(self, args, torch, GPT2Config, GPT2LMHeadModel):
        self.a = args
        self.torch = torch
        self.GPT2Config = GPT2Config
        self.GPT2LMHeadModel = GPT2LMHeadModel
        self.T = args.seq

    def config(self):
        d = self.a.dropout
        try:
            cfg = self.GPT2Config(resid_pdrop=d, embd_pdrop=d, attn_pdrop=d, attn_implementation="sdpa")
        except TypeError:
            cfg = self.GPT2Config(resid_pdrop=d, embd_pdrop=d, attn_pdrop=d)
        if getattr(cfg, "_attn_implementation", None) != "sdpa":
            cfg._attn_implementation = "sdpa"
        return cfg

    def release(self):
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        if hasattr(self.torch, "_dynamo"):
            self.torch._dynamo.reset()

    def build(self, mode):
        torch = self.torch
        torch.manual_seed(0)
        cfg = self.config()
        model = self.GPT2LMHeadModel(cfg).to("cuda").train()
        attn = getattr(model.config, "_attn_implementation", "?")
        n_params = model.num_parameters()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
        step_model = torch.compile(model) if mode == "compile" else model
        return cfg, model, step_model, opt, n_params, attn

    def step(self, step_model, model, opt, x):
        torch = self.torch
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=x, labels=x).loss
        loss.backward()
        if self.a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def run(self, mode, batch, steps, warmup):
        """(tokens_per_s, step_ms, peak_alloc_gib, peak_reserved_gib, n_params, attn, last_loss)"""
        torch = self.torch
        self.release()
        torch.cuda.reset_peak_memory_stats()
        cfg, model, step_model, opt, n_params, attn = self.build(mode)
        g = torch.Generator(device="cuda")
        g.manual_seed(1234)
        n_batches = 4  # a few distinct random batches, cycled
        xs = [torch.randint(0, cfg.vocab_size, (batch, self.T), device="cuda", generator=g) for _ in range(n_batches)]
        loss = None
        for i in range(warmup):
            loss = self.step(step_model, model, opt, xs[i % n_batches])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            loss = self.step(step_model, model, opt, xs[i % n_batches])
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        last = float(loss.item()) if loss is not None else float("nan")
        peak_a = torch.cuda.max_memory_allocated() / GIB
        peak_r = torch.cuda.max_memory_reserved() / GIB
        del model, step_model, opt, xs, loss
        self.release()
        tok_s = batch * self.T * steps / dt if steps > 0 else float("nan")
        return tok_s, dt / max(steps, 1) * 1e3, peak_a, peak_r, n_params, attn, last

    def fits(self, mode, batch, gib):
        """peak allocated memory of two training steps at this batch <= gib (OOM: no)"""
        torch = self.torch
        oom = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
        peak_a, ok = float("inf"), False
        try:
            _, _, peak_a, _, _, _, _ = self.run(mode, batch, steps=0, warmup=2)
            ok = peak_a <= gib
        except oom:
            pass
        if not ok:
            self.release()  # outside the except block: the traceback no longer pins the tensors
        print(f"  search mode={mode} batch={batch}: peak_alloc_gib="
              f"{'OOM' if math.isinf(peak_a) else f'{peak_a:.2f}'} -> {'fits' if ok else 'over'}", flush=True)
        return ok

    def max_batch(self, mode, gib, start):
        lo, hi = 0, None  # lo fits (0 = none found), hi does not
        b = max(1, start)
        while hi is None:
            if self.fits(mode, b, gib):
                lo = b
                b *= 2
                if b > 4096:
                    return lo
            else:
                hi = b
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(mode, mid, gib):
                lo = mid
            else:
                hi = mid
        return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--batch", type=parse_batches, default=[8], help="micro-batch size(s), comma separated (default 8)")
    ap.add_argument("--mode", choices=["eager", "compile", "both"], default="eager")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--seq", type=int, default=1024, help="sequence length T (default 1024)")
    ap.add_argument("--max-batch-for-gib", type=float, default=None, metavar="GIB",
                    help="also find and benchmark the largest micro-batch with peak allocated memory <= GIB")
    ap.add_argument("--dropout", type=float, default=0.0, help="resid/embd/attn dropout (default 0, as gpt2rt)")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip, 0 = off (default 1.0)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the peak bf16 dense TFLOP/s for MFU")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")

    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"SKIP: torch/transformers not importable ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: CUDA is not available (torch.cuda.is_available() is False)")
        return 77

    torch.backends.cuda.matmul.allow_tf32 = True  # only fp32 matmuls outside autocast
    torch.backends.cudnn.allow_tf32 = True
    gpu = torch.cuda.get_device_name(0)
    peak, peak_src = peak_for(gpu, a.peak_tflops)
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, CUDA {torch.version.cuda}, "
          f"gpu \"{gpu}\", peak bf16 dense {peak if peak else 'n/a'} TFLOP/s ({peak_src})", flush=True)

    bench = Bench(a, torch, GPT2Config, GPT2LMHeadModel)
    modes = ["eager", "compile"] if a.mode == "both" else [a.mode]
    L, C, T = 12, 768, a.seq
    results = []
    for mode in modes:
        batches = list(a.batch)
        if a.max_batch_for_gib is not None:
            mb = bench.max_batch(mode, a.max_batch_for_gib, min(a.batch))
            print(f"torch mode={mode} max_batch_for_gib={a.max_batch_for_gib:g} batch={mb}", flush=True)
            if mb > 0 and mb not in batches:
                batches.append(mb)
        for batch in batches:
            oom = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
            r = None
            try:
                r = bench.run(mode, batch, a.steps, a.warmup)
            except oom:
                pass
            if r is None:
                bench.release()
                print(f"torch mode={mode} batch={batch} status=oom gpu=\"{gpu}\"", flush=True)
                results.append({"mode": mode, "batch": batch, "status": "oom", "gpu": gpu})
                continue
            tok_s, step_ms, pa, pr, n_params, attn, loss = r
            flops_tok = 6.0 * n_params + 12.0 * L * C * T
            mfu = tok_s * flops_tok / (peak * 1e12) if peak else float("nan")
            print(f"torch mode={mode} batch={batch} tokens_per_s={tok_s:.1f} step_ms={step_ms:.2f} mfu={mfu:.4f} "
                  f"peak_alloc_gib={pa:.2f} peak_reserved_gib={pr:.2f} gpu=\"{gpu}\"", flush=True)
            print(f"  (T={T}, n_params={n_params}, flops_per_token={flops_tok:.4g}, attn={attn}, "
                  f"last loss {loss:.4f}, {a.steps} timed steps after {a.warmup} warm-up)", flush=True)
            results.append({"mode": mode, "batch": batch, "seq": T, "tokens_per_s": tok_s, "step_ms": step_ms,
                            "mfu": None if math.isnan(mfu) else mfu, "peak_alloc_gib": pa, "peak_reserved_gib": pr,
                            "n_params": n_params, "flops_per_token": flops_tok, "peak_tflops": peak,
                            "peak_source": peak_src, "attn_implementation": attn, "last_loss": loss,
                            "steps": a.steps, "warmup": a.warmup, "dropout": a.dropout, "clip": a.clip,
                            "gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
                            "status": "ok"})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results}, f, indent=2)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
