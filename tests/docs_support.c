/* tests/docs_support.c - what gpt2rt_create accepts, cell by cell, for the support
   matrix in README.md (tests/test_docs.sh compares the two).

   Each cell is a small config: a feature (row) on an execution mode (column). The
   program creates a context from it and prints one line per cell:
       ROW|COLUMN|yes      gpt2rt_create succeeded (CPU), or, for a CUDA column in a
                           build without CUDA, got as far as the CUDA backend's own
                           creation (UNAVAILABLE "needs the implementation compiled by
                           nvcc"): every refusal of a mode or feature comes before it
       ROW|COLUMN|no       NOT_IMPLEMENTED, or UNAVAILABLE for another reason (bf16 on
                           the CPU backend)
       ROW|COLUMN|error    INVALID_ARGUMENT or anything else: the probe's config is
                           wrong, not the matrix (the message follows)
   A CUDA cell checked this way says what creation refuses; refusals of single calls
   after creation (a CUDA layer split runs gpt2rt_step only) are the matrix's notes.
   Usage: docs_support (no arguments). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <string.h>

enum { COL_CPU1, COL_CPUDP, COL_CPUSPLIT, COL_CUDA1, COL_CUDADP, COL_CUDASPLIT, COL_N };
static const char *col_name[COL_N] = {"cpu", "cpu-data", "cpu-split", "cuda", "cuda-data", "cuda-split"};

static gpt2rt_config base_tokens(void) {
    gpt2rt_config c = {0};
    c.n_layer = 2; c.n_head = 2; c.n_embd = 32; c.vocab_size = 64; c.max_seq_len = 16;
    c.batch_size = 2; c.seq_len = 8; c.n_threads = 1;
    return c;
}

static gpt2rt_config base_patches(gpt2rt_head head) {
    gpt2rt_config c = base_tokens();
    c.input = GPT2RT_INPUT_PATCHES; c.head = head;
    c.seq_len = 32; c.patch_len = 8; c.patch_stride = 8; c.n_channels = 2;
    c.horizon = head == GPT2RT_HEAD_NEXT_PATCH ? 0 : 8;
    if (head == GPT2RT_HEAD_PATCH_DECODE) c.attn_mask = GPT2RT_MASK_PLACEHOLDERS;
    return c;
}

static void set_mode(gpt2rt_config *c, int col) {
    c->backend = col >= COL_CUDA1 ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_CPU;
    int m = col % 3;
    if (m == 1) { c->parallel = GPT2RT_PARALLEL_DATA; c->n_devices = 2; }
    if (m == 2) { c->parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c->n_devices = 2; }
    if (m && c->backend == GPT2RT_BACKEND_CUDA) { c->device_ids[0] = 0; c->device_ids[1] = 1; }
    c->world_size = 1; /* the launcher's variables, if any, must not turn a probe into a rank */
}

static const char *probe(gpt2rt_config c, char *msg, size_t cap) {
    gpt2rt_ctx *ctx = NULL;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    snprintf(msg, cap, "%s", ctx ? gpt2rt_last_error(ctx) : "(no context)");
    gpt2rt_free(ctx);
    if (r == GPT2RT_OK) return "yes";
    if (r == GPT2RT_ERR_UNAVAILABLE && c.backend == GPT2RT_BACKEND_CUDA && strstr(msg, "compiled by nvcc"))
        return "yes";
    if (r == GPT2RT_ERR_NOT_IMPLEMENTED || r == GPT2RT_ERR_UNAVAILABLE) return "no";
    return "error";
}

typedef struct { const char *row; int kind; } row_t;
enum { R_TRAIN, R_MIXED, R_RECOMPUTE, R_FROZEN, R_DROPOUT, R_ACCUM, R_ZERO1, R_CHUNK, R_GENERATE, R_INFER,
       R_INFER_BF16, R_GPT4TS, R_ALLM4TS };
static const row_t rows[] = {
    {"token model, fp32 training", R_TRAIN},
    {"bf16 / fp16 training", R_MIXED},
    {"recompute (selective, full)", R_RECOMPUTE},
    {"frozen groups", R_FROZEN},
    {"dropout", R_DROPOUT},
    {"gradient accumulation", R_ACCUM},
    {"ZeRO-1 (shard_optimizer)", R_ZERO1},
    {"chunked classifier (classifier_chunk)", R_CHUNK},
    {"generation with a KV cache (kv_batch)", R_GENERATE},
    {"inference context (inference = 1)", R_INFER},
    {"bf16 inference weights", R_INFER_BF16},
    {"patch inputs, regression head (GPT4TS)", R_GPT4TS},
    {"aLLM4TS heads (next-patch, patch-decode)", R_ALLM4TS},
};

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) { fprintf(stderr, "usage: docs_support (no arguments)\n"); return 2; }
    char msg[1024];
    int errors = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int col = 0; col < COL_N; col++) {
            gpt2rt_config c = base_tokens();
            int n_a = 0; /* the cell does not apply: "-" in the matrix */
            switch (rows[i].kind) {
            case R_TRAIN: break;
            case R_MIXED: c.precision = GPT2RT_PRECISION_BF16; break;
            case R_RECOMPUTE: c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 1; break;
            case R_FROZEN: c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; break;
            case R_DROPOUT: c.dropout = 0.1f; break;
            case R_ACCUM: c.grad_accum = 2; break;
            case R_ZERO1: c.shard_optimizer = 1; n_a = col % 3 != 1; break;
            case R_CHUNK: c.classifier_chunk = 4; break;
            case R_GENERATE: c.kv_batch = 2; break;
            case R_INFER: c.inference = 1; c.kv_batch = 1; break;
            case R_INFER_BF16: c.inference = 1; c.kv_batch = 1; c.inference_weights = GPT2RT_PRECISION_BF16; break;
            case R_GPT4TS: c = base_patches(GPT2RT_HEAD_REGRESSION); break;
            case R_ALLM4TS: c = base_patches(GPT2RT_HEAD_NEXT_PATCH); break;
            }
            set_mode(&c, col);
            if (n_a) { printf("%s|%s|-\n", rows[i].row, col_name[col]); continue; }
            const char *v = probe(c, msg, sizeof msg);
            /* aLLM4TS: both heads must agree, stage 2 (patch-decode with its mask) too */
            if (rows[i].kind == R_ALLM4TS) {
                gpt2rt_config c2 = base_patches(GPT2RT_HEAD_PATCH_DECODE);
                set_mode(&c2, col);
                char msg2[512];
                const char *v2 = probe(c2, msg2, sizeof msg2);
                if (strcmp(v, v2)) {
                    snprintf(msg, sizeof msg, "next-patch %s, patch-decode %s: %.400s", v, v2, msg2);
                    v = "error";
                }
            }
            printf("%s|%s|%s\n", rows[i].row, col_name[col], v);
            if (!strcmp(v, "error")) { errors++; fprintf(stderr, "  %s, %s: %s\n", rows[i].row, col_name[col], msg); }
        }
    }
    return errors ? 1 : 0;
}
