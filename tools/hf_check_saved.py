#!/usr/bin/env python3
"""Check that a model directory written by gpt2rt loads in Hugging Face and
reproduces reference logits.

Loads DIR (model.safetensors + config.json, as written by gpt2rt) with
``transformers.GPT2LMHeadModel.from_pretrained(DIR)`` from the local folder
only (no hub), runs the ``inputs`` tensor of REF.safetensors through it in
fp32 on the CPU (eval mode, eager attention) and compares the logits with
REF's ``logits`` tensor. Prints the max absolute error and that error relative
to the reference's largest |logit|.

The weights gpt2rt saved are the reference model's, bit for bit, so the two runs
differ only by the rounding of torch on this CPU and on the one that wrote REF:
the bound is fp32 eps x sqrt(the longest reduction, 4C = 256) = 1.9e-6 -> 2e-6
of the largest |logit| (the C parity test's bound). A save that dropped or
transposed a tensor moves the logits by far more.

Exit status: 0 if the relative error is <= --tol (default 2e-6), 1 if it
is larger or the model/reference cannot be used, 77 (the automake "skipped"
code) if torch/transformers/safetensors are not installed.

Usage:
    python3 tools/hf_check_saved.py DIR REF.safetensors [--tol 2e-6]
e.g.
    python3 tools/hf_check_saved.py tests/fixtures/hf_tiny tests/fixtures/hf_tiny/reference.safetensors
"""

import argparse
import os
import sys

SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="model directory (model.safetensors + config.json)")
    ap.add_argument("ref", help="reference .safetensors with 'inputs' and 'logits'")
    ap.add_argument("--tol", type=float, default=2e-6,
                    help="max logit error allowed, relative to the largest |logit| (default: %(default)s)")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers
        from transformers import GPT2LMHeadModel
        from safetensors.torch import load_file
    except Exception:
        print("SKIP: torch/transformers not installed")
        return SKIP
    transformers.utils.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:  # older transformers
        pass

    if not os.path.isdir(args.dir):
        print(f"FAIL: {args.dir} is not a directory")
        return 1
    try:
        ref = load_file(args.ref)
    except Exception as e:
        print(f"FAIL: cannot read {args.ref}: {e}")
        return 1
    for key in ("inputs", "logits"):
        if key not in ref:
            print(f"FAIL: {args.ref} has no '{key}' tensor")
            return 1

    torch.manual_seed(0)
    try:
        model = GPT2LMHeadModel.from_pretrained(
            args.dir, local_files_only=True, attn_implementation="eager")
    except Exception as e:
        print(f"FAIL: transformers could not load {args.dir}: {type(e).__name__}: {e}")
        return 1
    model.to(torch.float32)
    model.eval()  # the saved config may carry non-zero dropout

    inputs = ref["inputs"].long()
    want = ref["logits"].float()
    with torch.no_grad():
        got = model(inputs).logits.float()
    if got.shape != want.shape:
        print(f"FAIL: logits shape {tuple(got.shape)} != reference {tuple(want.shape)}")
        return 1
    diff = (got - want).abs()
    max_abs = diff.max().item()
    max_rel = max_abs / max(want.abs().max().item(), 1e-30)
    finite = bool(torch.isfinite(got).all())
    print(f"{args.dir}: logits {tuple(got.shape)}, max abs error {max_abs:.3e}, "
          f"{max_rel:.3e} of the largest |logit| (tol {args.tol:g})")
    if not finite:
        print("FAIL: non-finite logits")
        return 1
    if not max_rel <= args.tol:
        print(f"FAIL: logit error {max_rel:.3e} of the largest |logit| > {args.tol:g}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
