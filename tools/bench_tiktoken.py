#!/usr/bin/env python3
"""tiktoken's side of `make bench`: GPT-2 encoding MB/s on one core, same text as
build/bench_tok (TEXT_FILE, else the text of data/tinyshakespeare_train.bin decoded:
only what the repository ships).

tiktoken's GPT-2 encoding is built offline from the merges-only copy of the vocabulary
in data/gpt2_merges.bin, whose ids follow from the merges (tests/test_tokenizer.c checks
that they are OpenAI's encoder.json + vocab.bpe) with tiktoken's own GPT-2 pattern. encode_ordinary is
single threaded. Each repetition is timed alone; prints "encode MB/s: <best>
(best), <median> (median)". Exit 77 with one line when tiktoken is missing.

Usage: python3 tools/bench_tiktoken.py [TEXT_FILE] [--seconds S]
"""
import argparse
import os
import struct
import sys
import time

def byte_order():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    return keep + [b for b in range(256) if b not in keep]


def ranks_from_compact(path):
    data = open(path, "rb").read()
    assert data[:8] == b"GPT2RTBP", f"{path}: not a gpt2rt compact vocabulary"
    _, m, _ = struct.unpack_from("<III", data, 8)
    toks = [bytes([b]) for b in byte_order()]
    for i in range(m):
        a, b = struct.unpack_from("<HH", data, 20 + 4 * i)
        toks.append(toks[a] + toks[b])
    return {t: i for i, t in enumerate(toks)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text", nargs="?")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    try:
        import tiktoken
    except ImportError:
        print("tiktoken: skipped, not installed (pip install tiktoken)")
        return 77
    try:
        from tiktoken_ext.openai_public import r50k_pat_str as pattern
    except ImportError:
        pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    ranks = ranks_from_compact(os.path.join("data", "gpt2_merges.bin"))
    enc = tiktoken.Encoding(name="gpt2_offline", pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    path = args.text
    if path:
        text = open(path, "rb").read().decode("utf-8")
    else:
        raw = open(os.path.join("data", "tinyshakespeare_train.bin"), "rb").read()
        n = struct.unpack_from("<i", raw, 8)[0]
        text = enc.decode(list(struct.unpack_from(f"<{n}H", raw, 1024)))
        path = "data/tinyshakespeare_train.bin (decoded)"
    nbytes = len(text.encode("utf-8"))
    times, end = [], time.perf_counter() + args.seconds
    while len(times) < 3 or time.perf_counter() < end:
        t0 = time.perf_counter()
        ids = enc.encode_ordinary(text)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"tiktoken {tiktoken.__version__}: {path}, {nbytes} bytes -> {len(ids)} tokens, {len(times)} repetitions, one core")
    print(f"encode MB/s: {nbytes / times[0] / 1e6:.2f} (best), {nbytes / times[len(times) // 2] / 1e6:.2f} (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
