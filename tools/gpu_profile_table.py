#!/usr/bin/env python3
"""tools/gpu_profile_table.py - sums Nsight Compute's raw CSV page (ncu --csv --page raw
--print-units base, with gpu__time_duration.sum and the launch sizes) by kernel, for
kernels/gpu_profile.sh: for each file, the step's kernel time, a table by kind (matrix
products, attention, LayerNorm, ...) and the kernels by total time; matrix-product kernels
are split by grid, so each shape of cuBLASLt's shows apart.
Usage: python3 tools/gpu_profile_table.py FILE.csv [FILE.csv ...]   (markdown on stdout)
Lines of the profiled program's own output in the file are skipped; a file without
ncu's table is named and skipped."""
import csv
import io
import os
import sys

KINDS = [  # (kind, substrings of the kernel name), first match wins
    ("matrix products (cuBLASLt)", ("gemm", "xmma", "cutlass", "sm90_", "sm80_", "splitk", "gemv")),
    ("attention", ("attention", "attn")),
    ("LayerNorm", ("layernorm", "_ln_")),
    ("classifier", ("classifier", "softmax", "crossent")),
    ("GELU / residual / casts", ("gelu", "residual", "_add", "cast")),
    ("embedding", ("encoder", "embed")),
    ("bias gradient", ("colsum", "bias", "sum_parts")),
    ("AdamW / norm / checks", ("adamw", "norm", "finite", "scale")),
]


def kind_of(name):
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def short(name, width=90):
    name = name.replace("__nv_bfloat16", "bf16").replace("gpt2rt__cu_", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def read(path):
    if not os.path.isfile(path):
        return None, ["no such file"]
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        return None, [l for l in lines if "tokens_per_s" in l]
    table = [l for l in lines[start:] if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(table))))
    head, body = rows[0], rows[1:]
    if body and body[0] and body[0][0] == "":  # the units row
        body = body[1:]
    col = {h: i for i, h in enumerate(head)}
    need = ["Kernel Name", "gpu__time_duration.sum"]
    if any(n not in col for n in need):
        return None, ["columns missing: " + ", ".join(n for n in need if n not in col)]
    grid = col.get("launch__grid_size")
    out = []
    for r in body:
        try:
            ns = float(r[col["gpu__time_duration.sum"]].replace(",", ""))
        except (ValueError, IndexError):
            continue
        g = r[grid] if grid is not None and grid < len(r) else ""
        out.append((r[col["Kernel Name"]], g, ns))
    return out, [l for l in lines if "tokens_per_s" in l]


def main(paths):
    for path in paths:
        kernels, notes = read(path)
        print(f"## {os.path.basename(path)}\n")
        for n in notes:
            print(f"    {n.strip()}")
        if notes:
            print()
        if not kernels:
            print("no ncu table in this file\n")
            continue
        total = sum(k[2] for k in kernels)
        print(f"{len(kernels)} kernels, {total / 1e6:.3f} ms of kernel time (each kernel timed alone)\n")
        by_kind = {}
        for name, _, ns in kernels:
            k = kind_of(name)
            c, t = by_kind.get(k, (0, 0.0))
            by_kind[k] = (c + 1, t + ns)
        print("| kind | kernels | ms | share |\n|---|---:|---:|---:|")
        for k, (c, t) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
            print(f"| {k} | {c} | {t / 1e6:.3f} | {100 * t / total:.1f}% |")
        print()
        by_name = {}
        for name, g, ns in kernels:
            key = (name, g if kind_of(name).startswith("matrix") else "")
            c, t = by_name.get(key, (0, 0.0))
            by_name[key] = (c + 1, t + ns)
        print("| kernel | grid | launches | ms | us each | share |\n|---|---:|---:|---:|---:|---:|")
        for (name, g), (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:40]:
            print(f"| `{short(name)}` | {g} | {c} | {t / 1e6:.3f} | {t / c / 1e3:.1f} | {100 * t / total:.1f}% |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
