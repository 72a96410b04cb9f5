#!/usr/bin/env bash
# tools/bench_llamacpp.sh - llama.cpp's decode beside gpt2rt's, in one run (the README's
# reference rows; llama.cpp is never a dependency and no make target runs this).
#   LLAMA_CPP=DIR  a llama.cpp source tree with build/bin/llama-bench built (cmake
#                  --build build --target llama-bench) and its gguf-py/
#   PYTHON=EXE     a python with numpy and pyyaml (gguf-py's needs); default python3
#   VOCAB=DIR      GPT-2's encoder.json and vocab.bpe (the tokenizer in the GGUF)
#   THREADS="1 2"  NEW=128  PROMPT=64  REPS=3
# It writes GPT-2 124M GGUFs (F32, and F16 as llama.cpp's converter stores it: matrices
# F16, LayerNorms and biases F32) with random weights (decode speed does not depend on
# their values), then times llama-bench's decode of NEW tokens after PROMPT tokens of
# context (-n NEW -d PROMPT) and bench_gen's decode steps after a PROMPT-token prompt,
# at each thread count, with the load average before each. Skips with one line when
# llama.cpp, python's modules or the vocabulary are missing.
set -u
cd "$(dirname "$0")/.."
THREADS=${THREADS:-"1 2"} NEW=${NEW:-128} PROMPT=${PROMPT:-64} REPS=${REPS:-3} PYTHON=${PYTHON:-python3}
skip() { echo "bench_llamacpp: skipped: $*"; exit 0; }
[ -n "${LLAMA_CPP:-}" ] && [ -x "$LLAMA_CPP/build/bin/llama-bench" ] ||
    skip "llama.cpp not found (set LLAMA_CPP to a source tree with build/bin/llama-bench)"
[ -n "${VOCAB:-}" ] && [ -f "$VOCAB/encoder.json" ] && [ -f "$VOCAB/vocab.bpe" ] ||
    skip "set VOCAB to a directory holding GPT-2's encoder.json and vocab.bpe"
PYTHONPATH="$LLAMA_CPP/gguf-py" "$PYTHON" -c 'import numpy, gguf' 2>/dev/null ||
    skip "$PYTHON cannot import numpy and gguf (pip install numpy pyyaml; gguf-py comes from LLAMA_CPP)"
make -s build/bench_gen || exit 1
mkdir -p build/llamacpp
for ft in f32 f16; do
    out=build/llamacpp/gpt2-124m-$ft.gguf
    [ -f "$out" ] && continue
    PYTHONPATH="$LLAMA_CPP/gguf-py" "$PYTHON" - "$ft" "$out" "$VOCAB" <<'EOF' || exit 1
import json, sys
import numpy as np
import gguf
ft, out, vocab = sys.argv[1], sys.argv[2], sys.argv[3]
L, C, NH, V, T = 12, 768, 12, 50257, 1024
enc = json.load(open(f"{vocab}/encoder.json", encoding="utf-8"))
tokens = [t for t, _ in sorted(enc.items(), key=lambda kv: kv[1])]
merges = [m for m in open(f"{vocab}/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if m]
w = gguf.GGUFWriter(out, "gpt2")
w.add_name("gpt2rt random-init GPT-2 124M")
w.add_block_count(L); w.add_context_length(T); w.add_embedding_length(C)
w.add_feed_forward_length(4 * C); w.add_head_count(NH); w.add_layer_norm_eps(1e-5)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if ft == "f16" else gguf.LlamaFileType.ALL_F32)
w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("gpt-2")
w.add_token_list(tokens); w.add_token_types([gguf.TokenType.NORMAL] * V); w.add_token_merges(merges)
w.add_bos_token_id(V - 1); w.add_eos_token_id(V - 1)
rng = np.random.default_rng(0)
def mat(rows, cols):  # numpy (rows, cols) = ggml {cols, rows}: rows of the product's output
    a = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)
    return a.astype(np.float16) if ft == "f16" else a
vec = lambda n, v=0.0: np.full(n, v, dtype=np.float32)
w.add_tensor("token_embd.weight", mat(V, C)); w.add_tensor("position_embd.weight", mat(T, C))
for l in range(L):
    b = f"blk.{l}."
    w.add_tensor(b + "attn_norm.weight", vec(C, 1.0)); w.add_tensor(b + "attn_norm.bias", vec(C))
    w.add_tensor(b + "attn_qkv.weight", mat(3 * C, C)); w.add_tensor(b + "attn_qkv.bias", vec(3 * C))
    w.add_tensor(b + "attn_output.weight", mat(C, C)); w.add_tensor(b + "attn_output.bias", vec(C))
    w.add_tensor(b + "ffn_norm.weight", vec(C, 1.0)); w.add_tensor(b + "ffn_norm.bias", vec(C))
    w.add_tensor(b + "ffn_up.weight", mat(4 * C, C)); w.add_tensor(b + "ffn_up.bias", vec(4 * C))
    w.add_tensor(b + "ffn_down.weight", mat(C, 4 * C)); w.add_tensor(b + "ffn_down.bias", vec(C))
w.add_tensor("output_norm.weight", vec(C, 1.0)); w.add_tensor("output_norm.bias", vec(C))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
EOF
done
load() { cut -d' ' -f1-3 /proc/loadavg; }
commit=$(git -C "$LLAMA_CPP" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "llama.cpp $LLAMA_CPP (commit $commit); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for t in $THREADS; do
    echo "== $t thread(s): load $(load)"
    ./build/bench_gen -new "$NEW" -prompt "$PROMPT" -reps "$REPS" -threads "$t" -bf16 1 | grep -E '^(bench_gen|decode)' |
        sed 's/^/gpt2rt bf16: /'
    echo "   load $(load)"
    "$LLAMA_CPP/build/bin/llama-bench" -m build/llamacpp/gpt2-124m-f16.gguf,build/llamacpp/gpt2-124m-f32.gguf \
        -p 0 -n "$NEW" -d "$PROMPT" -t "$t" -r "$REPS" -o md 2>/dev/null | grep -E '^\| (model|gpt2)'
    echo "   load $(load)"
done
