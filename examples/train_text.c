/* examples/train_text.c - train a small GPT-2 on GPT-2 BPE tokens (llm.c's .bin
   format: 256 int32 header {20240520, 1, n_tokens, ...}, then uint16 tokens) and
   watch the training and validation loss fall. `make demo` runs it on the
   tinyshakespeare excerpt shipped in data/.

   usage: train_text [-steps N] [-layers L] [-heads H] [-width C] [-batch B] [-seq T]
                     [-lr X] [-eval-every N] [-init DIR] [-save DIR]
                     [-train FILE] [-val FILE]
   -init DIR loads Hugging Face GPT-2 weights (DIR/model.safetensors) before
   training, with the model shape of DIR/config.json; -layers may then ask for
   fewer layers (the first ones load), the other shape options are not needed. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokens {
    int32_t *tok;
    int64_t n;
} tokens;

static int load_tokens(const char *path, tokens *t) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return 0; }
    int32_t h[256];
    if (fread(h, sizeof h, 1, f) != 1 || h[0] != 20240520 || h[1] != 1 || h[2] <= 0) {
        fprintf(stderr, "%s: not an llm.c token file (magic %d, version %d, count %d; expected 20240520, 1, > 0)\n",
                path, h[0], h[1], h[2]);
        fclose(f);
        return 0;
    }
    uint16_t *raw = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)h[2]);
    t->tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)h[2]);
    size_t got = fread(raw, sizeof(uint16_t), (size_t)h[2], f);
    fclose(f);
    if (got != (size_t)h[2]) { fprintf(stderr, "%s: %zu of %d tokens\n", path, got, h[2]); return 0; }
    for (int32_t i = 0; i < h[2]; i++) t->tok[i] = raw[i];
    free(raw);
    t->n = h[2];
    return 1;
}

/* B windows of T+1 tokens at pseudo-random offsets: x = window[:T], y = window[1:] */
static void get_batch(const tokens *t, int B, int T, uint64_t *rng, int32_t *x, int32_t *y) {
    for (int b = 0; b < B; b++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        int64_t start = (int64_t)((*rng >> 33) % (uint64_t)(t->n - T - 1));
        for (int i = 0; i < T; i++) {
            x[b * T + i] = t->tok[start + i];
            y[b * T + i] = t->tok[start + i + 1];
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *train_path = "data/tinyshakespeare_train.bin", *val_path = "data/tinyshakespeare_val.bin";
    const char *init = NULL, *save = NULL;
    int steps = 200, eval_every = 50;
    gpt2rt_config cfg = {0};
    cfg.n_layer = 4; cfg.n_head = 4; cfg.n_embd = 128; cfg.max_seq_len = 64;
    cfg.batch_size = 8; cfg.seq_len = 64;
    cfg.lr = 2e-3f; cfg.warmup_steps = 20; cfg.min_lr_frac = 0.1f; cfg.weight_decay = 0.1f;
    int layers = 0, heads = 0, width = 0, seq = 0; /* 0: not given */
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "-steps")) steps = atoi(v);
        else if (!strcmp(k, "-layers")) layers = atoi(v);
        else if (!strcmp(k, "-heads")) heads = atoi(v);
        else if (!strcmp(k, "-width")) width = atoi(v);
        else if (!strcmp(k, "-batch")) cfg.batch_size = atoi(v);
        else if (!strcmp(k, "-seq")) seq = atoi(v);
        else if (!strcmp(k, "-lr")) cfg.lr = (float)atof(v);
        else if (!strcmp(k, "-eval-every")) eval_every = atoi(v);
        else if (!strcmp(k, "-init")) init = v;
        else if (!strcmp(k, "-save")) save = v;
        else if (!strcmp(k, "-train")) train_path = v;
        else if (!strcmp(k, "-val")) val_path = v;
        else { fprintf(stderr, "unknown option %s (see the comment at the top of examples/train_text.c)\n", k); return 1; }
    }
    if (init) { /* the checkpoint's shape: n_layer, n_head, n_embd, vocab_size, n_positions */
        char err[512];
        if (gpt2rt_config_load(&cfg, init, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", err); return 1; }
    }
    if (layers) cfg.n_layer = layers;
    if (heads) cfg.n_head = heads;
    if (width) cfg.n_embd = width;
    if (seq) { cfg.seq_len = seq; if (!init) cfg.max_seq_len = seq; }
    cfg.total_steps = steps;
    if (cfg.warmup_steps > steps) cfg.warmup_steps = steps; /* a short run: warm up over all of it */
    tokens train, val;
    if (!load_tokens(train_path, &train) || !load_tokens(val_path, &val)) return 1;

    gpt2rt_memory_plan plan;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", plan.error); return 1; }
    char table[2048];
    gpt2rt_plan_format(&plan, table, sizeof table);
    printf("%s", table);
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK ||
        (init && gpt2rt_weights_load(ctx, init) != GPT2RT_OK)) {
        fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 1;
    }
    cfg = gpt2rt_config_get(ctx);
    printf("training on %lld tokens, validating on %lld; %d steps of %d x %d tokens\n", (long long)train.n,
           (long long)val.n, steps, cfg.batch_size, cfg.seq_len);
    int BT = cfg.batch_size * cfg.seq_len;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT);
    uint64_t rng = 1, val_rng;
    double t_train = 0;
    for (int step = 0; step <= steps; step++) {
        if (step % eval_every == 0 || step == steps) {
            float sum = 0, l;
            val_rng = 42; /* the same validation batches every time */
            for (int k = 0; k < 8; k++) {
                get_batch(&val, cfg.batch_size, cfg.seq_len, &val_rng, x, y);
                gpt2rt_forward(ctx, x, y, &l);
                sum += l;
            }
            printf("step %4d  val loss %.4f\n", step, sum / 8);
        }
        if (step == steps) break;
        gpt2rt_step_stats st;
        get_batch(&train, cfg.batch_size, cfg.seq_len, &rng, x, y);
        if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); break; }
        t_train += st.seconds;
        if (step % 10 == 0)
            printf("step %4d  loss %.4f  norm %.3f  lr %.2e  %.0f ms  %.0f tok/s\n", step, st.loss, st.grad_norm, st.lr,
                   st.seconds * 1e3, (double)st.tokens / st.seconds);
    }
    printf("%d steps in %.1f s: %.0f tokens/s\n", steps, t_train, (double)steps * BT / t_train);
    if (save) {
        if (gpt2rt_weights_save(ctx, save) != GPT2RT_OK) fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
        else printf("saved %s/model.safetensors and %s/config.json\n", save, save);
    }
    gpt2rt_free(ctx);
    free(x); free(y); free(train.tok); free(val.tok);
    return 0;
}
