#!/usr/bin/env python3
"""Write the GPT-2 tokenizer fixture that tests/test_tokenizer.c reads.

The reference is tiktoken's GPT-2 encoding, built offline from the two
vocabulary files (no network): ranks from encoder.json, the GPT-2
pre-tokenisation pattern, <|endoftext|> = 50256. Before writing anything the
script checks, independently of tiktoken's own loader:

  * encoder.json is derivable from vocab.bpe alone: the 256 byte tokens in the
    order of GPT-2's bytes_to_unicode table are ids 0..255, merge i (0-based)
    makes id 256 + i, <|endoftext|> is 50256 (so data/ can ship the merges only);
  * tiktoken's rule (merge the adjacent pair whose concatenation has the lowest
    rank) and GPT-2's original rule (merge the adjacent pair listed earliest in
    vocab.bpe) give the same ids on every text of the fixture and on the whole
    of tinyshakespeare (the C code implements the second).

Output (default tests/fixtures/tokenizer/gpt2_cases.txt), line based:
    text <hex of UTF-8 bytes>          a case, encoded as ordinary text
    special <hex>                      a case, encoded with <|endoftext|> allowed
    ids <id> <id> ...                  tiktoken's ids for the case before
    file <name> tokens <n> fnv1a64 <16 hex digits>
        a whole file: its token count and FNV-1a 64 over the ids as uint16 LE

Usage (from the repository root):
    python3 tools/tok_fixture.py [--data-dir ../shared/data] [--out tests/fixtures/tokenizer/gpt2_cases.txt]
"""

import argparse
import json
import os
import random
import sys
import unicodedata

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def bytes_to_unicode_order():
    """GPT-2's byte order: the printable bytes keep their code point, the rest
    get 256, 257, ... in byte order; the list is the byte of each id 0..255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    char_of = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in char_of:
            char_of[b] = chr(256 + n)
            n += 1
    return keep + [b for b in range(256) if b not in keep], char_of


def load_vocab(data_dir):
    with open(os.path.join(data_dir, "encoder.json"), encoding="utf-8") as fh:
        encoder = json.load(fh)
    with open(os.path.join(data_dir, "vocab.bpe"), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    assert lines[0].startswith("#version"), "vocab.bpe: no #version line"
    merges = [tuple(ln.split(" ")) for ln in lines[1:] if ln]
    assert all(len(m) == 2 for m in merges)
    order, char_of = bytes_to_unicode_order()
    byte_of = {c: b for b, c in char_of.items()}

    def to_bytes(s):
        return bytes(byte_of[c] for c in s)

    # the derivation: byte tokens, then one id per merge, then <|endoftext|>
    derived = {}
    for i, b in enumerate(order):
        derived[bytes([b])] = i
    merge_ids = []
    for i, (a, b) in enumerate(merges):
        derived[to_bytes(a) + to_bytes(b)] = 256 + i
        merge_ids.append((derived[to_bytes(a)], derived[to_bytes(b)]))
    assert len(derived) == 256 + len(merges), "two merges make the same token"
    from_json = {to_bytes(k): v for k, v in encoder.items() if k != EOT}
    assert from_json == derived, "encoder.json is not derivable from vocab.bpe"
    assert encoder[EOT] == 256 + len(merges) == 50256
    return derived, merge_ids


def gpt2_original_encode(text, ranks, merge_ids, pat):
    """GPT-2's encoder.py rule on ids: repeatedly merge the adjacent pair that
    comes first in vocab.bpe (leftmost on ties)."""
    pair_rank = {p: i for i, p in enumerate(merge_ids)}
    cache = {}
    out = []
    for piece in pat.findall(text):
        if piece in cache:
            out += cache[piece]
            continue
        ids = [ranks[bytes([b])] for b in piece.encode("utf-8")]
        while len(ids) > 1:
            best, at = None, -1
            for i in range(len(ids) - 1):
                r = pair_rank.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            ids[at:at + 2] = [256 + best]
        cache[piece] = ids
        out += ids
    return out


def fnv1a64_u16(ids):
    h = 0xCBF29CE484222325
    for t in ids:
        for byte in (t & 255, t >> 8):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def random_unicode(rng, n):
    """n code points from everywhere Unicode 14 has assigned (Python's table), with
    the spaces, marks, digits and apostrophes the pattern cares about made common."""
    special = [" ", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2009",
               "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\x1c",
               "\x1f", "'", "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "\u0301", "\u0308", "\u20e3",
               "\u200d", "\ufe0f", "\U0001f468", "\U0001f3fd", "0", "7", "\u0663", "\u2167", "\u00bd", "\u00b2"]
    out = []
    while len(out) < n:
        k = rng.random()
        if k < 0.3:
            out.append(rng.choice(special))
        elif k < 0.5:
            out.append(chr(rng.randrange(0x20, 0x7F)))
        else:
            hi = rng.choice([0x800, 0x3000, 0x10000, 0x30000, 0x110000])
            cp = rng.randrange(0x80, hi)
            if unicodedata.category(chr(cp)) in ("Cn", "Cs"):
                continue
            out.append(chr(cp))
    return "".join(out)


CASES = [
    "Hello, world! This is GPT-2's tokenizer.",
    "I'm sure you'll see they've said it's what we'd do, and they're right.",
    "I'M SURE YOU'LL SEE THEY'VE SAID IT'S WHAT WE'D DO, AND THEY'RE RIGHT. Don'T 'S 'T",
    "don't DON'T Don't won't can't ain't y'all o'clock 'tis rock'n'roll '' ''s '",
    "1 12 123 1234 12345 3.14159 2026-11-22 1,000,000 0x1F 1e-9 -42 +7 007",
    "31415926535897932384626433832795028841971693993751058209749445923078164062862089986280348253421170679",
    "a  b   c    d     e      f\t\tg\t \th\n\ni\n \nj \n\n  k",
    "trailing spaces   ",
    "trailing newlines\n\n\n",
    "trailing tab\t",
    "   leading spaces",
    "\n\n\nleading newlines",
    " ",
    "\n",
    "",
    "    \n    \n\t\t\n",
    "mixed \r\n line \r\n endings\r\n",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u00e5ngstr\u00f6m fa\u00e7ade pi\u00f1ata \u0142\u00f3d\u017a \u0107ma",
    "\u0391\u03b8\u03ae\u03bd\u03b1 \u03ba\u03b1\u03b9 \u03a3\u03c0\u03ac\u03c1\u03c4\u03b7: \u1f08\u03c1\u03c7\u03b9\u03bc\u03ae\u03b4\u03b7\u03c2 \u03b5\u1f55\u03c1\u03b7\u03ba\u03b1!",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002\u6f22\u5b57\u3068\u30ab\u30bf\u30ab\u30ca\u3001\uff11\uff12\uff13\u3000\u5168\u89d2\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694! \u1100\u1161\u11a8 (\uc870\ud569\ud615 \uc790\ubaa8)",
    "emoji \U0001f600\U0001f602 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family, "
    "\U0001f3f3\ufe0f\u200d\U0001f308 flag, \U0001f1fa\U0001f1f8 \U0001f1ef\U0001f1f5, keycap 1\ufe0f\u20e3, \u2764\ufe0f",
    "combining: e\u0301 a\u0308 o\u0302\u0323 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324 "
    "n\u0303 \u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
    "numbers of other scripts: \u0661\u0662\u0663 \u0967\u0968 \u2160\u2161\u2162 \u00bd\u00bc \u00b2\u00b3 \u2460\u2461 \U0001d7ce\U0001d7cf",
    "odd spaces:\u00a0\u2003\u2009\u202f\u3000|\u200b|\ufeff|\x85|\u2028|\u2029|\u1680|\u180e|\x1c\x1d\x1e\x1f|\x0b\x0c|",
    "symbols and punctuation: \u00a9\u00ae\u2122 \u20ac$\u00a3\u00a5 \u00ab\u00bb \u201c\u201d \u2018\u2019 \u2014\u2013 \u2026 "
    "\u00bf\u00a1 !!! ??? ... --- *** ### @@@ ~~~ ^^^ ||| <<< >>> {}[]() \\/ `'\"",
    "def f(x):\n    \"\"\"Docstring.\"\"\"\n    if x <= 0:\n        return -x  # negate\n    return x ** 2\n\n"
    "int main(void) {\n\tprintf(\"%d\\n\", a[i] != b->c && !d);\n\treturn 0;\n}\n",
    "<html><body class=\"x\">&amp; &lt;tag&gt; https://example.com/a?b=c&d=e#f</body></html>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "CamelCaseIdentifier snake_case_name SCREAMING_CASE kebab-case-name __dunder__ $var @decorator",
    "Supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "=====================================================================================================",
    "x<|endoftext|>y <|endoftext|> <|endoftext|><|endoftext|>\n<|endoftext",
    "\u0000\u0001\u0002\u007f\u0080\u009f nul and controls",
]

SPECIAL_CASES = [
    "x<|endoftext|>y <|endoftext|> <|endoftext|><|endoftext|>\n<|endoftext",
    "<|endoftext|>",
    "Once upon a time.<|endoftext|>The end. <|endoftext|>\n\n<|endoftext|> it's <|endoftext|>'s",
    "<|endoftext|<|endoftext|>|>",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "tokenizer", "gpt2_cases.txt"))
    args = ap.parse_args()
    try:
        import regex
        import tiktoken
    except ImportError as e:
        print(f"tok_fixture: {e.name} is not installed (pip install tiktoken)", file=sys.stderr)
        return 77

    ranks, merge_ids = load_vocab(args.data_dir)
    enc = tiktoken.Encoding(name="gpt2_offline", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={EOT: 50256}, explicit_n_vocab=50257)
    pat = regex.compile(GPT2_PATTERN)

    rng = random.Random(20261122)
    texts = list(CASES)
    for n in (50, 200, 1000, 4000):
        texts.append(random_unicode(rng, n))
    with open(os.path.join(args.data_dir, "tinyshakespeare.txt"), encoding="utf-8") as fh:
        shakespeare = fh.read()
    texts.append(shakespeare[:3000])

    lines = [f"# tiktoken {tiktoken.__version__} GPT-2 ids (built offline from encoder.json + vocab.bpe);",
             "# written by tools/tok_fixture.py, do not edit"]
    n_ids = 0
    for t in texts:
        ids = enc.encode_ordinary(t)
        assert ids == gpt2_original_encode(t, ranks, merge_ids, pat), f"rules differ on {t[:40]!r}"
        assert enc.decode_bytes(ids) == t.encode("utf-8")
        lines += ["text " + t.encode("utf-8").hex(), "ids " + " ".join(map(str, ids))]
        n_ids += len(ids)
    for t in SPECIAL_CASES:
        ids = enc.encode(t, allowed_special="all")
        lines += ["special " + t.encode("utf-8").hex(), "ids " + " ".join(map(str, ids))]
        n_ids += len(ids)

    ids = enc.encode_ordinary(shakespeare)
    assert len(ids) == 338025, len(ids)
    assert ids == gpt2_original_encode(shakespeare, ranks, merge_ids, pat)
    lines.append(f"file tinyshakespeare.txt tokens {len(ids)} fnv1a64 {fnv1a64_u16(ids):016x}")

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="ascii") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"{args.out}: {len(texts) + len(SPECIAL_CASES)} cases, {n_ids} ids; tinyshakespeare {len(ids)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
