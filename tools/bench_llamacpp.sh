#!/usr/bin/env bash
# tools/bench_llamacpp.sh - llama.cpp's decode beside gpt2rt's, in one run (docs/results/cpu-speed.md's
# reference rows; llama.cpp is never a dependency and no make target runs this).
#   LLAMA_CPP=DIR  a llama.cpp source tree with its library built (cmake -B build &&
#                  cmake --build build --target llama) and its gguf-py/
#   PYTHON=EXE     a python with numpy and pyyaml (gguf-py's needs); default python3
#   VOCAB=DIR      GPT-2's encoder.json and vocab.bpe (the tokenizer in the GGUF)
#   THREADS="1 2"  NEW=128  PROMPT=64  REPS=3
# It writes GPT-2 124M GGUFs (F32, and F16 as llama.cpp's converter stores it: matrices
# F16, LayerNorms and biases F32) with random weights (decode speed does not depend on
# their values), then, at each thread count with the load average before each, times
# bench_gen's decode steps (bf16 weights) and llama.cpp's on each GGUF by the same
# protocol through its C API: one llama_decode of a PROMPT-token prompt, then NEW
# one-token llama_decode calls, each fed the greedy argmax of the last logits; new tokens
# a second over the NEW steps, the median of REPS runs after one warm-up. Skips with one
# line when llama.cpp, python's modules or the vocabulary are missing.
set -u
cd "$(dirname "$0")/.."
THREADS=${THREADS:-"1 2"} NEW=${NEW:-128} PROMPT=${PROMPT:-64} REPS=${REPS:-3} PYTHON=${PYTHON:-python3}
skip() { echo "bench_llamacpp: skipped: $*"; exit 0; }
[ -n "${LLAMA_CPP:-}" ] && [ -f "$LLAMA_CPP/include/llama.h" ] && [ -f "$LLAMA_CPP/build/bin/libllama.so" ] ||
    skip "llama.cpp not found (set LLAMA_CPP to a source tree with build/bin/libllama.so)"
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
cat > build/llamacpp/decode.c <<'EOF'
/* llama.cpp's decode, timed as bench_gen times gpt2rt's (see tools/bench_llamacpp.sh) */
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static void quiet(enum ggml_log_level l, const char *m, void *u) { (void)l; (void)m; (void)u; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: decode MODEL THREADS PROMPT NEW REPS\n"); return 2; }
    int nt = atoi(argv[2]), np = atoi(argv[3]), nn = atoi(argv[4]), reps = atoi(argv[5]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "decode: cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(np + nn + 16); cp.n_batch = cp.n_ubatch = (uint32_t)np;
    cp.n_threads = cp.n_threads_batch = nt;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) { fprintf(stderr, "decode: no context\n"); return 1; }
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_token *tok = malloc(sizeof(llama_token) * (size_t)np);
    double *tps = malloc(sizeof(double) * (size_t)reps);
    unsigned long long s = 1;
    for (int r = -1; r < reps; r++) { /* run -1 warms up */
        llama_memory_clear(llama_get_memory(ctx), 1);
        for (int i = 0; i < np; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (llama_token)((s >> 33) % 50257);
        }
        if (llama_decode(ctx, llama_batch_get_one(tok, np))) { fprintf(stderr, "decode: prompt failed\n"); return 1; }
        double t0 = now();
        for (int k = 0; k < nn; k++) {
            const float *lg = llama_get_logits_ith(ctx, -1);
            llama_token best = 0;
            for (int v = 1; v < V; v++) if (lg[v] > lg[best]) best = v;
            if (llama_decode(ctx, llama_batch_get_one(&best, 1))) { fprintf(stderr, "decode: step %d failed\n", k); return 1; }
        }
        llama_synchronize(ctx);
        if (r >= 0) tps[r] = nn / (now() - t0);
    }
    qsort(tps, (size_t)reps, sizeof *tps, cmp);
    printf("decode steps alone: %.1f tokens/s (median of %d; range %.1f-%.1f)\n", tps[reps / 2], reps, tps[0],
           tps[reps - 1]);
    llama_free(ctx); llama_model_free(m); llama_backend_free();
    return 0;
}
EOF
cc -O2 -o build/llamacpp/decode build/llamacpp/decode.c -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" \
    -L"$LLAMA_CPP/build/bin" -Wl,-rpath,"$LLAMA_CPP/build/bin" -lllama -lggml -lggml-base || exit 1
load() { cut -d' ' -f1-3 /proc/loadavg; }
commit=$(git -C "$LLAMA_CPP" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "llama.cpp at $LLAMA_CPP: commit $commit, $(basename "$(readlink -f "$LLAMA_CPP/build/bin/libllama.so")");" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $PROMPT-token prompt, $NEW new tokens greedy"
for t in $THREADS; do
    echo "== $t thread(s), load $(load)"
    echo "gpt2rt, bf16 weights (load $(load)): $(./build/bench_gen -new "$NEW" -prompt "$PROMPT" -reps "$REPS" \
        -threads "$t" -bf16 1 | grep '^decode')"
    for ft in f16 f32; do
        echo "llama.cpp, $ft GGUF (load $(load)): $(./build/llamacpp/decode build/llamacpp/gpt2-124m-$ft.gguf "$t" \
            "$PROMPT" "$NEW" "$REPS")"
    done
    echo "   load after: $(load)"
done
