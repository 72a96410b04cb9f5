#!/usr/bin/env python3
"""Tokenise tinyshakespeare with the real GPT-2 BPE and write llm.c token files.

The tokenizer is built from local files only (no network, no hub):
``transformers.GPT2TokenizerFast`` from ``encoder.json`` (vocab) and ``vocab.bpe``
(merges); transformers 4.x gets the paths as vocab_file/merges_file, 5.x gets
the parsed vocab dict and merge list (its constructor ignores the file names).
The whole text is encoded as a single string (no EOT tokens inserted); GPT-2
BPE gives exactly 338,025 tokens, which is checked.

Output, in llm.c's token file format (all little endian):
    header: 256 x int32; header[0] = 20240520 (magic), header[1] = 1 (version),
            header[2] = number of tokens, the rest 0
    body:   the tokens as uint16
Files written to --out (default data/):
    tinyshakespeare_train.bin   tokens [0, 120000) of the stream
    tinyshakespeare_val.bin     the last 32,768 tokens of the stream

Usage (from the repository root):
    python3 tools/prepare_data.py [--data-dir ../shared/data] [--out data]
"""

import argparse
import inspect
import json
import os
import sys

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
EXPECTED_TOKENS = 338025
N_TRAIN = 120000
N_VAL = 32768


def read_bpe_files(vocab, merges):
    """encoder.json -> {token: id}; vocab.bpe -> [(a, b), ...] in rank order."""
    with open(vocab, "r", encoding="utf-8") as fh:
        enc = json.load(fh)
    with open(merges, "r", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    pairs = [tuple(ln.split(" ")) for ln in lines
             if ln and not ln.startswith("#version")]
    assert all(len(p) == 2 for p in pairs), "malformed merges file"
    return enc, pairs


def load_tokenizer(vocab, merges):
    """GPT-2 BPE from local files. transformers 4.x takes vocab_file /
    merges_file; 5.x's constructor takes vocab= / merges= and silently ignores
    vocab_file / merges_file (an empty tokenizer results), so pass the parsed
    data there."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    transformers.utils.logging.set_verbosity_error()
    try:
        from transformers import GPT2TokenizerFast as cls
    except ImportError:  # pragma: no cover
        from transformers import GPT2Tokenizer as cls
    params = inspect.signature(cls.__init__).parameters
    if "vocab_file" in params:
        return cls(vocab_file=vocab, merges_file=merges)
    enc, pairs = read_bpe_files(vocab, merges)
    return cls(vocab=enc, merges=pairs)


def write_tokens(path, tokens):
    tokens = np.asarray(tokens)
    assert tokens.ndim == 1 and tokens.min() >= 0 and tokens.max() < 2 ** 16
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = MAGIC
    header[1] = VERSION
    header[2] = len(tokens)
    with open(path, "wb") as fh:
        fh.write(header.tobytes())
        fh.write(tokens.astype("<u2").tobytes())


def read_tokens(path):
    with open(path, "rb") as fh:
        header = np.frombuffer(fh.read(HEADER_INTS * 4), dtype="<i4")
        assert header[0] == MAGIC and header[1] == VERSION, "bad header"
        toks = np.frombuffer(fh.read(), dtype="<u2")
    assert len(toks) == header[2], "token count mismatch"
    return toks


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    default_data = os.path.normpath(os.path.join(repo, "..", "shared", "data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=default_data,
                    help="folder holding the inputs (default: %(default)s)")
    ap.add_argument("--text", help="text file (default: DATA_DIR/tinyshakespeare.txt)")
    ap.add_argument("--vocab", help="GPT-2 encoder.json (default: DATA_DIR/encoder.json)")
    ap.add_argument("--merges", help="GPT-2 vocab.bpe (default: DATA_DIR/vocab.bpe)")
    ap.add_argument("--out", default=os.path.join(repo, "data"),
                    help="output folder (default: %(default)s)")
    args = ap.parse_args()
    text_path = args.text or os.path.join(args.data_dir, "tinyshakespeare.txt")
    vocab = args.vocab or os.path.join(args.data_dir, "encoder.json")
    merges = args.merges or os.path.join(args.data_dir, "vocab.bpe")

    tok = load_tokenizer(vocab, merges)
    assert len(tok) == 50257, f"unexpected vocabulary size {len(tok)}"
    with open(text_path, "r", encoding="utf-8") as fh:
        text = fh.read()
    ids = tok.encode(text)
    ids = np.asarray(ids, dtype=np.int64)
    print(f"{os.path.basename(text_path)}: {len(text):,} characters -> {len(ids):,} GPT-2 tokens")
    assert len(ids) == EXPECTED_TOKENS, f"expected {EXPECTED_TOKENS} tokens, got {len(ids)}"
    # Round trip: byte-level BPE is lossless.
    assert tok.decode(ids.tolist()) == text, "decode(encode(text)) != text"

    os.makedirs(args.out, exist_ok=True)
    train = ids[:N_TRAIN]
    val = ids[-N_VAL:]
    for name, toks in (("tinyshakespeare_train.bin", train), ("tinyshakespeare_val.bin", val)):
        path = os.path.join(args.out, name)
        write_tokens(path, toks)
        back = read_tokens(path)
        assert np.array_equal(back.astype(np.int64), toks)
        print(f"  {path}: {len(toks):,} tokens, {os.path.getsize(path):,} bytes, "
              f"first ids {toks[:8].tolist()}")
    print(f"  first train tokens decode to: {tok.decode(train[:12].tolist())!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
