"""tools/bench_attn_torch.py - PyTorch's causal attention, forward and backward, at gpt2rt's shape.

F.scaled_dot_product_attention(q, k, v, is_causal=True) on (B, 12, 1024, 64) bf16 CUDA tensors
(random normal, requires_grad), for each backend of torch.nn.attention.SDPBackend in
FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION, alone under sdpa_kernel. A backend
that is missing or refuses the shape is a named SKIP line.

Forward alone: the call, with autograd recording (as in training: the backward's statistics
are kept). Backward alone: one forward per input set, then each run is
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) (out.backward without its
accumulation into .grad, which would add a kernel a run). Each run sits between two CUDA
events on the current stream; the runs are queued behind torch.cuda._sleep so that the
host's launch time does not show; 5 warm-up runs, then the median of 30, the inputs rotated
among 3 sets. FLOPs as kernels/attention.cu counts them: forward 4 B NH T^2 HS / 2 (causal
half), backward 2.5x the forward.

usage: python3 tools/bench_attn_torch.py [--batches 8 16] [--runs 30] [--warmup 5] [--sets 3]
Prints torch, CUDA and cuDNN versions, then one line per (backend, B):
  sdpa flash B=8: forward 0.412 ms 123.4 TFLOP/s, backward 1.234 ms 98.7 TFLOP/s
  sdpa cudnn B=8: SKIP: why
Without torch or CUDA: one SKIP line, exit 77. Needs nothing beyond torch."""
import argparse
import statistics
import sys
import warnings

NH, T, HS = 12, 1024, 64
BACKENDS = (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"))


def flops(b):
    """forward and backward FLOPs, kernels/attention.cu's count"""
    f = 4.0 * b * NH * T * T * HS / 2.0
    return f, 2.5 * f


def time_runs(torch, fns, runs, warmup):
    """median ms of runs calls, cycling through fns, each between two events"""
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(50_000_000)  # about 25 ms at 2 GHz: the host queues the runs meanwhile
    for i, (a, b) in enumerate(ev):
        a.record()
        fns[i % len(fns)]()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def one(torch, F, sdpa_kernel, backend, b, args):
    gen = torch.Generator(device="cuda").manual_seed(1234 + b)

    def randn():
        return torch.randn(b, NH, T, HS, device="cuda", dtype=torch.bfloat16, generator=gen)

    sets = [[randn().requires_grad_() for _ in range(3)] + [randn()] for _ in range(args.sets)]
    with sdpa_kernel([backend]):
        fwd = [lambda s=s: F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=True) for s in sets]
        ms_f = time_runs(torch, fwd, args.runs, args.warmup)
        outs = [f() for f in fwd]
    bwd = [lambda o=o, s=s: torch.autograd.grad(o, s[:3], s[3], retain_graph=True) for o, s in zip(outs, sets)]
    ms_b = time_runs(torch, bwd, args.runs, args.warmup)
    return ms_f, ms_b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # noqa: BLE001 - any import failure is a skip
        print(f"SKIP: torch with torch.nn.attention.sdpa_kernel not importable ({type(e).__name__}: {e})")
        return 77
    if not torch.cuda.is_available():
        print(f"SKIP: torch {torch.__version__} sees no CUDA device")
        return 77
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
          f"gpu \"{torch.cuda.get_device_name()}\"")
    if not hasattr(torch.cuda, "_sleep"):
        print("note: no torch.cuda._sleep: the runs are not queued ahead, host launch time may show")
    for b in args.batches:
        ff, fb = flops(b)
        for name, attr in BACKENDS:
            backend = getattr(SDPBackend, attr, None)
            if backend is None:
                print(f"sdpa {name} B={b}: SKIP: torch {torch.__version__} has no SDPBackend.{attr}")
                continue
            try:
                with warnings.catch_warnings(record=True) as ws:
                    warnings.simplefilter("always")
                    ms_f, ms_b = one(torch, F, sdpa_kernel, backend, b, args)
            except Exception as e:  # noqa: BLE001 - a backend that refuses is a skip, not a crash
                why = (str(e).strip().splitlines() or [type(e).__name__])[0]
                said = "; ".join(str(w.message).strip().splitlines()[0] for w in ws if str(w.message).strip())
                print(f"sdpa {name} B={b}: SKIP: {type(e).__name__}: {why}" + (f" (warnings: {said})" if said else ""))
                torch.cuda.empty_cache()
                continue
            print(f"sdpa {name} B={b}: forward {ms_f:.3f} ms {ff / (ms_f * 1e9):.1f} TFLOP/s, "
                  f"backward {ms_b:.3f} ms {fb / (ms_b * 1e9):.1f} TFLOP/s", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
