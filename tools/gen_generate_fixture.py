#!/usr/bin/env python3
"""Greedy continuations of Hugging Face transformers for gpt2rt's generation test.

Loads the tiny GPT-2 of tests/fixtures/hf_tiny (model.safetensors + config.json,
written by tools/gen_fixture.py), multiplies transformer.wpe.weight and every
attn.c_attn.weight by 16 (a power of two: exact, and the C test does the same) so
that positions and attention dominate and a continuation is not one token
repeated, as the unscaled random model's are; then for a few prompts of different lengths runs
``GPT2LMHeadModel.generate(do_sample=False, use_cache=True, num_beams=1)`` one
prompt at a time, fp32 on the CPU. Writes the prompts and the generated ids as
text (default tests/fixtures/hf_tiny/generate.txt):

    max_new_tokens 24
    eos 999
    scale 16
    prompt <ids...>
    output <prompt ids, then the generated ids...>

and prints the smallest gap between the two largest logits over every step (a
near tie would make greedy decoding fragile under rounding). No network access;
re-running writes the same file.

Usage (from the repository root):
    python3 tools/gen_generate_fixture.py [--out tests/fixtures/hf_tiny/generate.txt] [--gaps FILE]
"""
import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

FIXTURE = "tests/fixtures/hf_tiny"
PROMPT_LENS = [1, 5, 17, 30]
MAX_NEW = 24
SCALE = 16.0  # wpe and c_attn weights


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(FIXTURE, "generate.txt"))
    ap.add_argument("--gaps", help="also write, for every prompt and step, 'gap PROMPT STEP TOP1-TOP2 MAX|LOGIT|' "
                    "(tools/fixture_compare.py accepts a divergence only at a near tie)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = GPT2LMHeadModel.from_pretrained(FIXTURE, attn_implementation="eager", local_files_only=True)
    model.to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "transformer.wpe.weight" or name.endswith("attn.c_attn.weight"):
                p.mul_(SCALE)
    vocab, eos = model.config.vocab_size, model.config.eos_token_id
    gen = torch.Generator().manual_seed(4321)
    lines = [f"max_new_tokens {MAX_NEW}", f"eos {eos}", f"scale {SCALE:g}"]
    min_gap = float("inf")
    gap_lines = []
    for pi, n in enumerate(PROMPT_LENS):
        prompt = torch.randint(0, vocab, (1, n), generator=gen, dtype=torch.int64)
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, num_beams=1,
                                 use_cache=True, max_new_tokens=MAX_NEW, pad_token_id=eos, eos_token_id=eos,
                                 output_scores=True, return_dict_in_generate=True)
        for step, sc in enumerate(out.scores):
            top = torch.topk(sc[0].float(), 2).values
            min_gap = min(min_gap, float(top[0] - top[1]))
            gap_lines.append(f"gap {pi} {step} {float(top[0] - top[1]):.9g} {float(sc[0].float().abs().max()):.9g}")
        lines.append("prompt " + " ".join(str(int(t)) for t in prompt[0]))
        lines.append("output " + " ".join(str(int(t)) for t in out.sequences[0]))
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    if args.gaps:
        with open(args.gaps, "w") as fh:
            fh.write("\n".join(gap_lines) + "\n")
    print(f"wrote {args.out}: {len(PROMPT_LENS)} prompts, transformers {transformers.__version__}, "
          f"torch {torch.__version__}; smallest top-2 logit gap {min_gap:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
