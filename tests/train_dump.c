/* tests/train_dump.c - the bitwise record of training, through the public API only.
   Trains several small configurations (the Hugging Face fixture in
   tests/fixtures/hf_tiny, and seed-initialised ones across recompute levels,
   frozen groups and gradient accumulation) and writes to OUT, byte for byte:
   every step's stats, then every parameter's value, gradient and Adam moments,
   the logits of a last forward, and the files gpt2rt_weights_save and
   gpt2rt_state_save write. A refactoring that must not change behaviour keeps
   `sha256sum OUT` unchanged.

   usage: train_dump OUT [WORKDIR]     (run from the repository root)
   build: cc -std=c11 -O3 -march=native -fopenmp -o build/train_dump tests/train_dump.c -lm */
/* every op splits over the threads whatever its size (by default an op too small to pay
   for a second thread runs on one), so the checks across thread counts below compare
   split work, not one thread's with itself */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 0
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *out;

static void put(const void *p, size_t n) {
    if (fwrite(p, 1, n, out) != n) { fprintf(stderr, "train_dump: write failed\n"); exit(1); }
}

static void put_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "train_dump: cannot read %s\n", path); exit(1); }
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) put(buf, n);
    fclose(f);
}

static void die(gpt2rt_ctx *ctx, const char *what) {
    fprintf(stderr, "train_dump: %s: %s\n", what, gpt2rt_last_error(ctx));
    exit(1);
}

/* tokens from a fixed LCG; every 7th target ignored (-100) */
static void batch(uint64_t *s, int64_t n, int V, int32_t *x, int32_t *y) {
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((*s >> 33) % (uint64_t)V);
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = i % 7 == 3 ? -100 : (int32_t)((*s >> 33) % (uint64_t)V);
    }
}

static void run(const char *name, gpt2rt_config cfg, const char *weights, int steps, int split_calls,
                const char *work) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) die(ctx, name);
    if (weights && gpt2rt_weights_load(ctx, weights) != GPT2RT_OK) die(ctx, name);
    cfg = gpt2rt_config_get(ctx);
    put(name, strlen(name) + 1);
    char line[1024]; /* the resolved config: every default */
    int k = snprintf(line, sizeof line,
        "L%d H%d C%d V%d Vp%d P%d in%d head%d fz%u B%d T%d acc%d prec%d tf32 %d ls%a rc%d ck%d par%d nd%d "
        "lr%a min%a wu%d tot%d b1 %a b2 %a eps%a wd%a clip%a be%d seed%llu budget%llu",
        cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size, cfg.padded_vocab, cfg.max_seq_len, (int)cfg.input,
        (int)cfg.head, cfg.frozen, cfg.batch_size, cfg.seq_len, cfg.grad_accum, (int)cfg.precision, cfg.tf32,
        (double)cfg.loss_scale, (int)cfg.recompute, cfg.checkpoint_every, (int)cfg.parallel, cfg.n_devices,
        (double)cfg.lr, (double)cfg.min_lr_frac, cfg.warmup_steps, cfg.total_steps, (double)cfg.beta1,
        (double)cfg.beta2, (double)cfg.eps, (double)cfg.weight_decay, (double)cfg.grad_clip, (int)cfg.backend,
        (unsigned long long)cfg.seed, (unsigned long long)cfg.memory_budget);
    put(line, (size_t)k + 1);
    int64_t BT = (int64_t)cfg.batch_size * cfg.seq_len, rows = BT * cfg.grad_accum;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)rows), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)rows);
    uint64_t s = 12345;
    for (int step = 0; step < steps; step++) {
        gpt2rt_step_stats st;
        batch(&s, rows, cfg.vocab_size, x, y);
        if (!split_calls) {
            if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) die(ctx, name);
        } else { /* the same step as forward + backward per micro-batch, one update */
            for (int k = 0; k < cfg.grad_accum; k++) {
                float loss;
                if (gpt2rt_forward(ctx, x + k * BT, y + k * BT, &loss) != GPT2RT_OK) die(ctx, name);
                put(&loss, sizeof loss);
                if (gpt2rt_backward(ctx) != GPT2RT_OK) die(ctx, name);
            }
            if (gpt2rt_update(ctx, &st) != GPT2RT_OK) die(ctx, name);
        }
        st.seconds = 0;
        put(&st.step, sizeof st.step); put(&st.loss, 4); put(&st.grad_norm, 4); put(&st.lr, 4);
        put(&st.loss_scale, 4); put(&st.skipped, sizeof st.skipped); put(&st.tokens, sizeof st.tokens);
        put(&st.micro_batches, sizeof st.micro_batches);
        printf("%-28s step %2d loss %.6f norm %.6f lr %.3e\n", name, step, (double)st.loss, (double)st.grad_norm,
               (double)st.lr);
    }
    /* a last forward + backward (no update): logits, then every gradient */
    batch(&s, rows, cfg.vocab_size, x, y);
    float loss;
    if (gpt2rt_forward(ctx, x, y, &loss) != GPT2RT_OK) die(ctx, name);
    put(&loss, 4);
    int64_t nl = BT * cfg.vocab_size;
    float *logits = (float *)malloc(sizeof(float) * (size_t)nl);
    if (gpt2rt_logits(ctx, logits, nl) != GPT2RT_OK) die(ctx, name);
    put(logits, sizeof(float) * (size_t)nl);
    free(logits);
    if (gpt2rt_backward(ctx) != GPT2RT_OK) die(ctx, name);
    int n = gpt2rt_param_count(ctx);
    for (int i = 0; i < n; i++) {
        gpt2rt_param_info info;
        if (gpt2rt_param_info_get(ctx, i, &info) != GPT2RT_OK) die(ctx, name);
        put(&info, sizeof info);
        float *buf = (float *)malloc(sizeof(float) * (size_t)info.numel);
        for (int w = GPT2RT_PARAM_VALUE; w <= GPT2RT_PARAM_ADAM_V; w++) {
            gpt2rt_result r = gpt2rt_param_read(ctx, info.name, (gpt2rt_param_what)w, buf, info.numel);
            if (r == GPT2RT_OK) put(buf, sizeof(float) * (size_t)info.numel);
            else put(&r, sizeof r); /* frozen: no gradient, no moments */
        }
        free(buf);
    }
    gpt2rt_step_stats st;
    if (gpt2rt_update(ctx, &st) != GPT2RT_OK) die(ctx, name);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", work, name);
    if (gpt2rt_weights_save(ctx, dir) != GPT2RT_OK) die(ctx, name);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    put_file(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    put_file(path);
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    if (gpt2rt_state_save(ctx, path) != GPT2RT_OK) die(ctx, name);
    put_file(path);
    gpt2rt_free(ctx);
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: train_dump OUT [WORKDIR]\n"); return 2; }
    const char *work = argc > 2 ? argv[2] : "build/train_dump.d";
    out = fopen(argv[1], "wb");
    if (!out) { fprintf(stderr, "train_dump: cannot write %s\n", argv[1]); return 1; }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", work);
    if (system(cmd) != 0) return 1;

    gpt2rt_config fix;
    memset(&fix, 0, sizeof fix); /* the fixture's shape (tests/fixtures/hf_tiny/config.json) */
    fix.n_layer = 2; fix.n_head = 4; fix.n_embd = 64; fix.vocab_size = 1000; fix.max_seq_len = 64;
    fix.batch_size = 4; fix.seq_len = 32;
    fix.lr = 1e-3f; fix.warmup_steps = 3; fix.total_steps = 12; fix.min_lr_frac = 0.1f; fix.weight_decay = 0.1f;
    run("fixture", fix, "tests/fixtures/hf_tiny/model.safetensors", 12, 0, work);

    gpt2rt_config c = fix;
    c.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    run("fixture_selective_split", c, "tests/fixtures/hf_tiny", 6, 1, work);

    c = fix; /* seed-initialised: the parameter table's init rule */
    c.n_layer = 3; c.seed = 7; c.grad_clip = 0.5f;
    run("seed_init", c, NULL, 6, 0, work);

    c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 2; c.grad_accum = 2;
    run("full_ck2_accum2", c, NULL, 5, 0, work);

    c.checkpoint_every = 1; c.frozen = GPT2RT_GROUP_ATTENTION;
    run("full_ck1_frozen_attn", c, NULL, 5, 1, work);

    c = fix;
    c.n_layer = 4; c.recompute = GPT2RT_RECOMPUTE_SELECTIVE; c.frozen = GPT2RT_GROUP_MLP | GPT2RT_GROUP_POS_EMBED;
    c.batch_size = 3; c.seq_len = 17; c.vocab_size = 333; /* odd sizes: padding, edge tiles */
    run("selective_frozen_mlp_odd", c, NULL, 5, 0, work);

    c.recompute = GPT2RT_RECOMPUTE_NONE; c.frozen = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_LAYERNORM;
    c.checkpoint_every = 0;
    run("frozen_wte_ln_odd", c, NULL, 5, 0, work);

    c = fix; /* width 36, 3 heads, B*T*C not a multiple of 16: FULL's checkpoints sit on the
                laid-out 64-byte stride, not packed */
    c.n_layer = 5; c.n_head = 3; c.n_embd = 36; c.vocab_size = 333; c.batch_size = 3; c.seq_len = 7;
    c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 2;
    run("full_ck2_c36", c, NULL, 5, 1, work);
    c.checkpoint_every = GPT2RT_CHECKPOINT_SQRT; c.grad_accum = 3;
    run("full_sqrt_c36_accum3", c, NULL, 4, 0, work);

    if (fclose(out) != 0) return 1;
    return 0;
}
