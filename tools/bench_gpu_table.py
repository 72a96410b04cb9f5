"""tools/bench_gpu_table.py LOGDIR - the same-call table of make bench-gpu (kernels/bench_gpu.sh).

Reads the logs that kernels/bench_gpu.sh writes into LOGDIR and prints one Markdown table
(GPT-2 124M, T=1024, bf16, full training steps) with every run of the call, then the
ratios against each anchor and the targets:
  bench_gpu_env.log              GPU name, driver, CUDA (nvidia-smi, nvcc), free text
  bench_gpu_gpt2rt.log           build/lab_train_step time: lines
                                 "gpt2rt mode=bf16[ label] batch=B tokens_per_s=... peak_gib=... gpu=..."
  bench_gpu_llmc_V_bB.log        llm.c's train_gpt2cu (V = cudnn or plain) at batch B: its
                                 "step  N/M | ... | X ms | ..." lines, "device memory usage: X MiB"
  bench_gpu_torch_M_bB.log       tools/bench_torch_gpu.py (M = compile or eager) at batch B:
                                 "torch mode=M batch=B tokens_per_s=... peak_alloc_gib=..."
  bench_gpu_allm4ts.log          build/bench_ts_nvcc -backend cuda (aLLM4TS stage 1, bf16; _fp32: fp32): "plan: A GiB of
                                 arenas + O GiB ...", "N steps of B windows: median X ms", "windows/s: W"
  bench_gpu_attn_gpt2rt_bB.log   build/lab_attention time B: lines "  bf16  PATH     B=8 T=1024 C=768 NH=12:
                                 forward X ms F TFLOP/s   backward Y ms G TFLOP/s" (other types not read)
  bench_gpu_attn_torch.log       tools/bench_attn_torch.py: "sdpa NAME B=8: forward X ms F TFLOP/s,
                                 backward Y ms G TFLOP/s" or "sdpa NAME B=8: SKIP: why"
  *.mem                          beside a log: nvidia-smi memory.used samples (MiB), one a line
A log whose first line starts with "SKIP" names why that run did not happen; a missing log
is a run that was not asked for.

One count of FLOPs for every row: 6N + 6LCT per token (llm.c's count, which its own MFU
prints), N = 124,475,904 (every parameter, with the vocabulary padded to 50,304 as gpt2rt
and llm.c store it), L = 12, C = 768, T = 1024: 803.5 MFLOP a token, against the dense bf16
peak of the GPU (989.4 TFLOP/s for the H100 SXM and the H200, 756 for the H100 PCIe).
lab_train_step's own mfu= field counts 6 x (the matrices' weights) + 12LCT (854.7 MFLOP
a token, 1.064x this) and tools/bench_torch_gpu.py's 6 x 124,439,808 + 12LCT: the table
recomputes both from tokens/s.

llm.c's tokens/s: the batch's tokens over the mean of its event-timed steps after the first
3 (gpt2rt's lab and the PyTorch script also time after 3 or more warm-up steps).
Then the attention table (B=8 and 16, T=1024, NH=12, HS=64, bf16, causal): one row per
gpt2rt path and per PyTorch SDPA backend, each time against PyTorch's best (the least
forward + backward among the backends that ran at that batch), and the targets (gpt2rt's
fastest path at most PyTorch's best, forward >= 300 and backward >= 220 TFLOP/s). Both
programs count FLOPs as kernels/attention.cu does (forward 4 B NH T^2 HS / 2, backward 2.5x);
each time comes from its printed ms or from its printed TFLOP/s and that count, whichever
has the finer rounding (at gpt2rt's speeds, the rate: the lab prints ms to 3 decimals).
Exit status 0 when the gpt2rt rows were found, 1 otherwise."""
import os
import re
import statistics
import sys

L, C, T = 12, 768, 1024
N_PARAMS = 124_475_904
FLOPS_PER_TOKEN = 6.0 * N_PARAMS + 6.0 * L * C * T
LAB_FLOPS_PER_TOKEN = 6.0 * (12 * L * C * C + 50304 * C) + 12.0 * L * C * T
GIB = float(1 << 30)
ATTN_TARGETS = {"vs_best": 1.0, "fwd_tflops": 300.0, "bwd_tflops": 220.0}
LAB_ATTN = re.compile(r"^\s*bf16\s+(\S+)\s+B=(\d+) T=1024 C=768 NH=12: forward\s+([0-9.]+) ms\s+([0-9.]+) TFLOP/s"
                      r"\s+backward\s+([0-9.]+) ms\s+([0-9.]+) TFLOP/s", re.M)
SDPA = re.compile(r"^sdpa (\S+) B=(\d+): forward ([0-9.]+) ms ([0-9.]+) TFLOP/s, backward ([0-9.]+) ms ([0-9.]+) TFLOP/s", re.M)
SDPA_BACKENDS = ("flash", "cudnn", "efficient")
TARGETS = {"vs_cudnn": 1.0, "vs_compile": 1.3, "mfu_b16": 0.45, "chunk_cost": 0.05, "mem_vs_compile": 0.8}


def peak_tflops(gpu):
    if "H100 PCIe" in gpu:
        return 756.0
    return 989.4  # H100 SXM (80GB HBM3), H200, and any other name (printed beside it)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def skip_reason(text):
    first = text.strip().splitlines()[0] if text and text.strip() else "SKIP: empty log"
    return first[5:].strip(" :") if first.startswith("SKIP") else None


def last_line(text):
    """the log's last non-blank line, fit for a table cell: what a failed run said last"""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return (lines[-1][:140] if lines else "empty log").replace("|", "/")


def mem_max_gib(path):
    text = read(path)
    if not text:
        return None
    vals = [float(x) for x in re.findall(r"^\s*(\d+(?:\.\d+)?)\s*$", text, re.M)]
    return max(vals) / 1024.0 if vals else None


def kv(line):
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))


def gpt2rt_rows(text):
    """{label: [(tokens_per_s, peak_gib), ...]} keyed by '' or ' classifier_chunk=1024', per batch"""
    rows = {}
    gpu = None
    for line in text.splitlines():
        if not line.startswith("gpt2rt mode=bf16") or "tokens_per_s=" not in line:
            continue
        m = re.match(r"gpt2rt mode=bf16(.*?) batch=", line)
        label = m.group(1).strip() if m else "?"
        d = kv(line)
        gpu = d.get("gpu", '""').strip('"') or gpu
        rows.setdefault((label, int(d["batch"])), []).append((float(d["tokens_per_s"]), float(d.get("peak_gib", "nan"))))
    return rows, gpu


def llmc_run(text, batch):
    ms = [float(x) for x in re.findall(r"^step\s+\d+/\d+ \|.*\| ([0-9.]+) ms \|", text, re.M)]
    if len(ms) < 5:
        return None
    timed = ms[3:]
    mem = re.search(r"device memory usage: (\d+) MiB", text)
    return {"tokens_per_s": batch * T / (statistics.mean(timed) / 1e3), "steps": len(timed),
            "own_gib": int(mem.group(1)) / 1024.0 if mem else None}


def torch_run(text, mode, batch):
    for line in text.splitlines():
        if line.startswith(f"torch mode={mode} batch={batch} "):
            d = kv(line)
            if "tokens_per_s" not in d:
                return {"status": d.get("status", "?")}
            return {"tokens_per_s": float(d["tokens_per_s"]), "own_gib": float(d["peak_alloc_gib"]),
                    "reserved_gib": float(d.get("peak_reserved_gib", "nan"))}
    return None


def attn_times(b, fwd_ms, fwd_tf, bwd_ms, bwd_tf):
    """(forward ms, backward ms, forward TFLOP/s, backward TFLOP/s): each time from its printed
    ms (3 decimals) or its printed rate (1 decimal), whichever the rounding moves less"""
    ff = 4.0 * b * 12 * 1024.0 * 1024.0 * 64 / 2.0

    def ms(printed, tf, flop):
        return flop / (tf * 1e9) if tf > 0 and 0.05 / tf < 0.0005 / max(printed, 1e-9) else printed
    fwd, bwd = ms(fwd_ms, fwd_tf, ff), ms(bwd_ms, bwd_tf, 2.5 * ff)
    return fwd, bwd, ff / (fwd * 1e9), 2.5 * ff / (bwd * 1e9)


def attention_table(d, batches):
    """the attention rows of the gpt2rt lab's and PyTorch's logs, the ratios and the targets"""
    rows = []  # (name, b, (fwd, bwd, fwd_tf, bwd_tf) or None, note)
    for b in batches:
        log = f"bench_gpu_attn_gpt2rt_b{b}.log"
        t = read(os.path.join(d, log))
        why = skip_reason(t) if t is not None else f"no {log}"
        seen = []  # a path printed again (mma.sync twice where no wgmma runs) is named "PATH (2)"
        for m in LAB_ATTN.finditer("" if why else t):
            if int(m.group(2)) == b:
                seen.append(m.group(1))
                n = seen.count(m.group(1))
                rows.append((f"gpt2rt {m.group(1)}" + (f" ({n})" if n > 1 else ""), b,
                             attn_times(b, *map(float, m.group(3, 4, 5, 6))), ""))
        if not seen:
            rows.append(("gpt2rt", b, None, f"skipped: {why}" if why else f"no bf16 timing line in {log}; its last: {last_line(t)}"))
    t = read(os.path.join(d, "bench_gpu_attn_torch.log"))
    why = skip_reason(t) if t is not None else "no bench_gpu_attn_torch.log"
    for b in batches:
        for name in SDPA_BACKENDS:
            m = None if why else next((x for x in SDPA.finditer(t) if x.group(1) == name and int(x.group(2)) == b), None)
            sk = None if why else re.search(rf"^sdpa {name} B={b}: SKIP:? (.*)$", t, re.M)
            if m:
                rows.append((f"PyTorch sdpa {name}", b, attn_times(b, *map(float, m.group(3, 4, 5, 6))), ""))
            else:
                rows.append((f"PyTorch sdpa {name}", b, None, f"skipped: {why or sk.group(1)}" if why or sk else
                             f"no line in bench_gpu_attn_torch.log; its last: {last_line(t)}"))

    def total(r):
        return r[2][0] + r[2][1]
    best = {}
    for r in rows:
        if r[2] and r[0].startswith("PyTorch") and (r[1] not in best or total(r) < total(best[r[1]])):
            best[r[1]] = r

    def verdict(ok):
        return "met" if ok else "NOT met"

    def marks(r):
        tf, tb = r[2][2], r[2][3]
        out = [f"fwd {verdict(tf >= ATTN_TARGETS['fwd_tflops'])}", f"bwd {verdict(tb >= ATTN_TARGETS['bwd_tflops'])}"]
        if r[1] in best:
            out.insert(0, f"time {verdict(total(r) <= ATTN_TARGETS['vs_best'] * total(best[r[1]]))}")
        return ", ".join(out)

    print()
    print("## attention, B=8 and 16, T=1024, HS=64, bf16 (NH=12, causal), forward and backward, same call")
    print(f"- FLOPs as kernels/attention.cu counts them: forward 4 B NH T^2 HS / 2, backward 2.5x; "
          f"best: PyTorch's least fwd+bwd at that B; targets (gpt2rt rows): time <= "
          f"{ATTN_TARGETS['vs_best']:.2f}x best, fwd >= {ATTN_TARGETS['fwd_tflops']:.0f}, "
          f"bwd >= {ATTN_TARGETS['bwd_tflops']:.0f} TFLOP/s")
    for line in (t or "").splitlines()[:1]:
        if line.startswith("torch "):
            print(f"- {line}")
    print()
    print("| run | B | forward ms | backward ms | fwd+bwd ms | forward TFLOP/s | backward TFLOP/s | / best PyTorch | targets / note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        name, b, v, note = r
        if v is None:
            print(f"| {name} | {b} | - | - | - | - | - | - | {note} |")
            continue
        ratio = f"{total(r) / total(best[b]):.2f}x" if b in best else "-"
        note = marks(r) if name.startswith("gpt2rt") else ("best" if best.get(b) is r else "")
        print(f"| {name} | {b} | {v[0]:.4f} | {v[1]:.4f} | {total(r):.4f} | {v[2]:.1f} | {v[3]:.1f} | {ratio} | {note} |")
    print()
    print("attention targets (gpt2rt's fastest bf16 path):")
    for b in batches:
        g = [r for r in rows if r[1] == b and r[2] and r[0].startswith("gpt2rt")]
        if not g:
            print(f"  B={b}: gpt2rt's attention: not measured in this call")
            continue
        r = min(g, key=total)
        if b in best:
            ratio = total(r) / total(best[b])
            print(f"  B={b}: {r[0]} fwd+bwd {total(r):.4f} ms / {best[b][0]} {total(best[b]):.4f} ms = {ratio:.2f}x "
                  f"(target <= {ATTN_TARGETS['vs_best']:.2f}x): {verdict(ratio <= ATTN_TARGETS['vs_best'])}")
        else:
            print(f"  B={b}: {r[0]} / PyTorch's best: no PyTorch backend ran in this call")
        print(f"  B={b}: {r[0]} forward {r[2][2]:.1f} TFLOP/s (target >= {ATTN_TARGETS['fwd_tflops']:.0f}): "
              f"{verdict(r[2][2] >= ATTN_TARGETS['fwd_tflops'])}; backward {r[2][3]:.1f} TFLOP/s "
              f"(target >= {ATTN_TARGETS['bwd_tflops']:.0f}): {verdict(r[2][3] >= ATTN_TARGETS['bwd_tflops'])}")


def fmt_int(x):
    return f"{x:,.0f}"


def pct(x):
    return f"{100 * x:.1f}%"


def main(argv):
    if len(argv) != 2:
        print(__doc__.splitlines()[0])
        return 2
    d = argv[1]
    text = read(os.path.join(d, "bench_gpu_gpt2rt.log"))
    if text is None:
        print(f"bench-gpu table: {d}/bench_gpu_gpt2rt.log is missing")
        return 1
    rows, gpu = gpt2rt_rows(text)
    env = read(os.path.join(d, "bench_gpu_env.log")) or ""
    if not gpu:
        m = re.search(r"^GPU: ([^,]+),", env, re.M)
        gpu = m.group(1) if m else "unknown GPU"
    peak = peak_tflops(gpu)

    def mfu(tps):
        return tps * FLOPS_PER_TOKEN / (peak * 1e12)

    batches = (8, 16)
    out = []  # (name, batch, tokens/s or None, peak text, device max text, note)
    gpt = {}
    for label, name in (("", "gpt2rt"), ("classifier_chunk=1024", "gpt2rt classifier_chunk=1024")):
        for b in batches:
            runs = rows.get((label, b), [])
            if not runs:
                out.append((name, b, None, "", "", f"no line in bench_gpu_gpt2rt.log; its last: {last_line(text)}"))
                continue
            tps = statistics.mean(r[0] for r in runs)
            gpt[(label, b)] = (tps, max(r[1] for r in runs))
            note = " / ".join(fmt_int(r[0]) for r in runs) + (" (mean)" if len(runs) > 1 else "")
            out.append((name, b, tps, f"{gpt[(label, b)][1]:.2f} in use", "", note))
    anchors = {}
    for v, name in (("cudnn", "llm.c with cuDNN attention"), ("plain", "llm.c, its own attention")):
        for b in batches:
            base = os.path.join(d, f"bench_gpu_llmc_{v}_b{b}")
            t = read(base + ".log")
            if t is None:
                continue
            why = skip_reason(t)
            r = None if why else llmc_run(t, b)
            dev = mem_max_gib(base + ".mem")
            if r is None:
                out.append((name, b, None, "", "", f"skipped: {why}" if why else
                            f"no step lines in {os.path.basename(base)}.log; its last: {last_line(t)}"))
                continue
            anchors[(v, b)] = r["tokens_per_s"]
            own = f"{r['own_gib']:.2f} in use after allocation" if r["own_gib"] else ""
            out.append((name, b, r["tokens_per_s"], own, f"{dev:.2f}" if dev else "",
                        f"mean of {r['steps']} steps"))
    torch_peak = {}
    for mode, name in (("compile", "PyTorch torch.compile"), ("eager", "PyTorch eager")):
        for b in batches:
            base = os.path.join(d, f"bench_gpu_torch_{mode}_b{b}")
            t = read(base + ".log")
            if t is None:
                continue
            why = skip_reason(t)
            r = None if why else torch_run(t, mode, b)
            dev = mem_max_gib(base + ".mem")
            if r is None or "tokens_per_s" not in r:
                reason = why or (f"status={r['status']}" if r else
                                 f"no result line in {os.path.basename(base)}.log; its last: {last_line(t)}")
                out.append((name, b, None, "", "", f"skipped: {reason}" if why else reason))
                continue
            anchors[(mode, b)] = r["tokens_per_s"]
            torch_peak[(mode, b)] = r["own_gib"]
            out.append((name, b, r["tokens_per_s"], f"{r['own_gib']:.2f} allocated ({r['reserved_gib']:.2f} reserved)",
                        f"{dev:.2f}" if dev else "", ""))

    print(f"## make bench-gpu: GPT-2 124M, T=1024, bf16, full steps, one call on {gpu}")
    for line in env.strip().splitlines():
        print(f"- {line}")
    print(f"- MFU: 6N + 6LCT = {FLOPS_PER_TOKEN / 1e6:.1f} MFLOP a token (N = {N_PARAMS:,}, llm.c's count) "
          f"against {peak:.1f} TFLOP/s; lab_train_step's own mfu= counts {LAB_FLOPS_PER_TOKEN / 1e6:.1f} "
          f"({LAB_FLOPS_PER_TOKEN / FLOPS_PER_TOKEN:.3f}x)")
    print("- peak GiB: each program's own measure (gpt2rt: device memory in use, context included; "
          "llm.c: in use after its allocations; PyTorch: max_memory_allocated, no context); "
          "device max: nvidia-smi's memory.used, sampled every 200 ms over the run, context included")
    print()
    print("| run | B | tokens/s | MFU | gpt2rt / it | peak GiB | device max GiB | note |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for name, b, tps, own, dev, note in out:
        if tps is None:
            print(f"| {name} | {b} | - | - | - | | | {note} |")
            continue
        g = gpt.get(("", b))
        ratio = "" if name.startswith("gpt2rt") or not g else f"{g[0] / tps:.2f}x"
        print(f"| {name} | {b} | {fmt_int(tps)} | {pct(mfu(tps))} | {ratio} | {own} | {dev} | {note} |")
    print()

    def verdict(ok):
        return "met" if ok else "NOT met"

    print("targets:")
    for b in batches:
        g = gpt.get(("", b))
        for key, name, want in (("cudnn", "llm.c with cuDNN", TARGETS["vs_cudnn"]),
                                ("compile", "torch.compile", TARGETS["vs_compile"])):
            a = anchors.get((key, b))
            if g and a:
                print(f"  B={b}: gpt2rt / {name} = {g[0] / a:.2f}x (target >= {want:.2f}x): {verdict(g[0] / a >= want)}")
            else:
                print(f"  B={b}: gpt2rt / {name}: not measured in this call")
    g16 = gpt.get(("", 16))
    if g16:
        m = mfu(g16[0])
        print(f"  B=16: MFU {pct(m)} (target >= {pct(TARGETS['mfu_b16'])}): {verdict(m >= TARGETS['mfu_b16'])}")
    for b in batches:
        g, c = gpt.get(("", b)), gpt.get(("classifier_chunk=1024", b))
        if g and c:
            cost = 1.0 - c[0] / g[0]
            print(f"  B={b}: classifier_chunk=1024 costs {pct(cost)} of the step's tokens/s "
                  f"(target <= {pct(TARGETS['chunk_cost'])}): {verdict(cost <= TARGETS['chunk_cost'])}")
    for b in batches:
        tp = torch_peak.get(("compile", b))
        for label, name in (("", "gpt2rt"), ("classifier_chunk=1024", "gpt2rt classifier_chunk=1024")):
            g = gpt.get((label, b))
            if g and tp:
                r = g[1] / tp
                print(f"  B={b}: peak memory {name} {g[1]:.2f} GiB / torch.compile {tp:.2f} GiB = {r:.2f}x "
                      f"(target <= {TARGETS['mem_vs_compile']:.2f}x): {verdict(r <= TARGETS['mem_vs_compile'])}")
    ts_ms = {}
    for prec, log in (("bf16", "bench_gpu_allm4ts"), ("fp32", "bench_gpu_allm4ts_fp32")):
        t = read(os.path.join(d, log + ".log"))
        if t is None:
            continue
        why = skip_reason(t)
        med = re.search(r"^\d+ steps of (\d+) windows: median ([0-9.]+) ms", t, re.M)
        plan = re.search(r"^plan: ([0-9.]+) GiB of arenas \+ ([0-9.]+) GiB", t, re.M)
        dev = mem_max_gib(os.path.join(d, log + ".mem"))
        if why or not med:
            print(f"aLLM4TS stage 1, {prec}: {'skipped: ' + why if why else f'no median line in {log}.log; its last: ' + last_line(t)}")
            continue
        n, ms = int(med.group(1)), float(med.group(2))
        ts_ms[prec] = ms
        line = (f"aLLM4TS stage 1 (6 blocks of width 768, {n:,} series of 64 patches, {prec}): median step "
                f"{ms:.1f} ms, {n / (ms / 1e3):,.0f} series/s, {64 * n / (ms / 1e3):,.0f} patches/s")
        if plan:
            p = float(plan.group(1)) + float(plan.group(2))
            line += f"; plan {float(plan.group(1)):.2f} GiB arenas + {float(plan.group(2)):.2f} overhead = {p:.2f} GiB"
            if dev:
                line += f", device max (nvidia-smi) {dev:.2f} GiB = {dev / p:.3f}x the plan"
        print(line)
    if "bf16" in ts_ms and "fp32" in ts_ms:
        print(f"aLLM4TS stage 1: bf16 is {ts_ms['fp32'] / ts_ms['bf16']:.2f}x fp32's speed")
    attention_table(d, batches)
    return 0 if gpt else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
