/* tests/test_bad_input.c - bad inputs, each with the error it must
   get and the proof that nothing was lost:
   - special files (FIFO with no writer, /dev/zero, /dev/urandom, /proc/self/status,
     a directory) are refused as "not a regular file", without blocking;
   - gpt2rt_fit at the limits plans at most 344 configs after at most 2 x 2^20 trial
     divisions (counted, not timed), and create's out-of-memory advice is given;
   - a weights_save whose first or second rename fails leaves the previous
     model.safetensors + config.json pair byte for byte;
   - a state with a negative / non-finite Adam moment, a weights file with NaN or inf,
     warmup_steps > total_steps: refused with the tensor, the index or the numbers;
   - a step whose every target is ignored is skipped (weights, moments, step kept);
   - NULL buffers are reported as NULL, not as a size mismatch;
   - gpt2rt_config_load reads the shape of a Hugging Face config.json and refuses
     broken ones; every GPT2Config key is honoured or refused naming it and its value,
     unknown keys are refused, numbers of any length are read or refused as too long,
     and what gpt2rt_weights_save writes (dropouts included) loads back equal;
   - `test_bad_input omp` (run with OMP_NUM_THREADS=2000 by tests/run.sh): the
     default thread count is clamped, create succeeds.
   Messages and arithmetic at the edges:
   - every refusal of the tokenizer, shard, series and plan calls writes its own
     message naming the argument, after a different earlier refusal (no empty or
     stale message), and gpt2rt_series_batch(first = INT64_MAX - 1) builds its
     message without overflowing (run under UBSan);
   - rendezvous_file naming a directory or a FIFO: refused at once, saying which;
   - the plan printed from gpt2rt_plan_allocated gives the same tokens a step as
     gpt2rt_plan's.
   Plans, sharded gradients and rounding:
   - a refused config leaves an all-zero plan, which gpt2rt_plan_format prints as "no
     plan: <why>" (as it does a zeroed plan, or one whose config was changed after);
     fit, step time, create and gpt2rt_plan_allocated refuse the same configs (run
     under ASan and UBSan: no read past the stage bounds, the head names, the rows);
   - ZeRO-1: gpt2rt_param_read(GRAD) after the last backward is the summed gradient,
     bitwise the unsharded one;
   - a plan whose bytes (layer split's micro-batches in flight) or tokens a step do not
     fit in 64 bits is refused, naming the factors; below that the product is exact;
   - a bf16 context refuses a finite fp32 weight that rounds to inf, naming the tensor,
     from a file and from gpt2rt_param_write;
   - a stage-1 state in a stage-2 context is refused on the head first;
   - gpt2rt_logits on a bf16 context names what that context can do.
   A check that cannot run here prints "skip <what>: <why>" at the start of a line. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT__TEST_HOOKS
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define TMP "build/tmp_bad_input"

static double now_s(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_bad_input: a load blocked for 20 s (special file opened before a check)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

static int has(const char *s, const char *needle) { return s && strstr(s, needle) != NULL; }

static gpt2rt_ctx *tiny(int grad_accum) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 32; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 4; c.grad_accum = grad_accum; c.n_threads = 1; c.lr = 1e-2f;
    gpt2rt_ctx *ctx = NULL;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    if (r != GPT2RT_OK) { printf("FAIL create: %s\n", gpt2rt_last_error(ctx)); exit(1); }
    return ctx;
}

static int32_t in_tok[16], tg_tok[16], tg_none[16];

/* weights, moments, step: what a refused load or a skipped step must not change */
typedef struct { float *p; int64_t step; uint64_t rng; } snap;
static snap take(const gpt2rt_ctx *ctx) {
    snap s;
    size_t n = (size_t)ctx->n_params, t = (size_t)ctx->n_train;
    s.p = (float *)malloc((n + 2 * t) * sizeof(float));
    memcpy(s.p, ctx->params, n * 4);
    memcpy(s.p + n, ctx->m, t * 4);
    memcpy(s.p + n + t, ctx->v, t * 4);
    s.step = ctx->step;
    s.rng = ctx->rng;
    return s;
}
static int same(const gpt2rt_ctx *ctx, snap s) {
    size_t n = (size_t)ctx->n_params, t = (size_t)ctx->n_train;
    return !memcmp(s.p, ctx->params, n * 4) && !memcmp(s.p + n, ctx->m, t * 4) &&
           !memcmp(s.p + n + t, ctx->v, t * 4) && s.step == ctx->step && s.rng == ctx->rng;
}

static int files_equal(const char *a, const unsigned char *b, size_t blen) {
    size_t n;
    unsigned char *x = read_all(a, &n);
    int eq = x && n == blen && !memcmp(x, b, n);
    free(x);
    return eq;
}

static int exists(const char *p) { struct stat sb; return stat(p, &sb) == 0; }

/* the byte offset (from the file start) of element idx of tensor name in a safetensors file */
static size_t st_elem(const unsigned char *buf, const char *name, size_t idx) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    char key[160];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *h = (const char *)buf + 8, *e = strstr(h, key);
    if (!e || (size_t)(e - h) > hlen) { printf("FAIL no tensor %s in the file\n", name); exit(1); }
    const char *o = strstr(e, "\"data_offsets\":[");
    unsigned long long begin = strtoull(o + 16, NULL, 10);
    return 8 + (size_t)hlen + (size_t)begin + 4 * idx;
}

static void put(const char *path, const void *b, size_t n) {
    if (!write_all(path, b, n)) { printf("FAIL cannot write %s\n", path); exit(1); }
}

static void special_files(void) {
    gpt2rt_ctx *ctx = tiny(1);
    snap s0 = take(ctx);
    const char *fifo = TMP "/fifo.safetensors";
    unlink(fifo);
    int have_fifo = mkfifo(fifo, 0600) == 0;
    CHECK(have_fifo, "mkfifo %s: %s", fifo, strerror(errno));
    struct { const char *path, *kind; } cases[] = {
        {fifo, "FIFO"}, {"/dev/zero", "character device"}, {"/dev/urandom", "character device"},
        {"/dev/null", "character device"}, {"/proc/self/status", "not a regular file"}, {TMP, "directory"}};
    alarm(20);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!exists(cases[i].path)) { printf("skip %s as a special file: not on this machine\n", cases[i].path); continue; }
        for (int k = 0; k < 3; k++) {
            double t0 = now_s();
            gpt2rt_result r;
            char err[512] = "";
            if (k == 0) r = gpt2rt_weights_load(ctx, cases[i].path);
            else if (k == 1) r = gpt2rt_state_load(ctx, cases[i].path);
            else { gpt2rt_config c = {0}; r = gpt2rt_config_load(&c, cases[i].path, err, sizeof err); }
            const char *msg = k == 2 ? err : gpt2rt_last_error(ctx);
            double dt = now_s() - t0;
            /* weights_load and config_load of a directory read DIR/model.safetensors, DIR/config.json */
            if (k != 1 && !strcmp(cases[i].path, TMP)) {
                CHECK(r == GPT2RT_ERR_IO && has(msg, k ? "/config.json" : "/model.safetensors"),
                      "load of a directory without the file: %s", msg);
                continue;
            }
            CHECK(r == GPT2RT_ERR_IO && has(msg, "not a regular file") && has(msg, cases[i].kind) &&
                  has(msg, cases[i].path) && dt < 1.0,
                  "%s of %s: %s in %.2f s: %s", k == 0 ? "weights_load" : k == 1 ? "state_load" : "config_load",
                  cases[i].path, gpt2rt_result_string(r), dt, msg);
            if (i == 0 && k == 0) printf("    %s\n", msg);
        }
    }
    alarm(0);
    CHECK(same(ctx, s0), "a refused special file changed the context");
    unlink(fifo);
    free(s0.p);
    gpt2rt_free(ctx);
}

/* gpt2rt_fit's work is bounded whatever the batch: with GPT2RT_FIT_DEFAULT (shard,
   precision and classifier left as they are) its search plans at most 2 parallel modes x
   43 micro-batches (gpt2rt__fit_batches: the smallest and largest divisor in each of 21
   octaves, and the config's own) x 4 recompute levels = 344 configs, after at most 2^20
   trial divisions a mode. Counted, not timed: a wall-clock bound flakes on a loaded
   machine. Trying every divisor, or dividing up to g (2^40 here), breaks the bound. */
#define FIT_MAX_PLANS (2 * 43 * 4)
#define FIT_MAX_DIVISIONS ((int64_t)2 << 20)

static void fit_bounded(void) {
    struct { int B, A, T, L, nd; gpt2rt_parallel par; } cs[] = {
        {16384, 1 << 20, 1, 12, 1, GPT2RT_PARALLEL_NONE},           /* 66 s before the bound */
        {1 << 20, 1 << 20, 1, 12, 1, GPT2RT_PARALLEL_NONE},          /* the limits */
        {1 << 20, 1 << 20, 1, 1024, 8, GPT2RT_PARALLEL_DATA},
        {1 << 20, 1 << 20, 1, 1024, 8, GPT2RT_PARALLEL_LAYER_SPLIT},
        {720720, 1 << 20, 1, 1024, 8, GPT2RT_PARALLEL_LAYER_SPLIT},  /* 240 divisors below 2^20 */
        {720720, 720720, 1, 1024, 8, GPT2RT_PARALLEL_DATA},
        {65536, 65536, 16, 48, 2, GPT2RT_PARALLEL_DATA}};
    double worst = 0;
    int64_t most_plans = 0, most_div = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gpt2rt_config c;
        memset(&c, 0, sizeof c);
        c.batch_size = cs[i].B; c.grad_accum = cs[i].A; c.seq_len = cs[i].T; c.max_seq_len = 1024;
        c.n_layer = cs[i].L; c.n_devices = cs[i].nd; c.parallel = cs[i].par;
        if (cs[i].nd > 1) c.backend = GPT2RT_BACKEND_CUDA; /* planned only; two devices are CUDA's */
        for (int k = 0; k < 2; k++) {
            gpt2rt_config out;
            char buf[4096];
            uint64_t budget = k ? (uint64_t)1 << 20 : (uint64_t)80 << 30;
            double t0 = now_s();
            gpt2rt_result r = gpt2rt_fit(&c, budget, GPT2RT_FIT_DEFAULT, &out, buf, sizeof buf);
            double dt = now_s() - t0;
            if (dt > worst) worst = dt;
            CHECK(r == GPT2RT_OK || r == GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_fit B=%d A=%d T=%d L=%d devices %d, "
                  "budget %llu: %s", cs[i].B, cs[i].A, cs[i].T, cs[i].L, cs[i].nd, (unsigned long long)budget,
                  gpt2rt_result_string(r));
            /* whatever it picks keeps the global batch */
            int64_t g0 = (int64_t)c.batch_size * c.grad_accum * (c.parallel == GPT2RT_PARALLEL_DATA ? c.n_devices : 1);
            int64_t g1 = (int64_t)out.batch_size * out.grad_accum * (out.parallel == GPT2RT_PARALLEL_DATA ? out.n_devices : 1);
            CHECK(g0 == g1, "gpt2rt_fit changed the global batch: %lld -> %lld", (long long)g0, (long long)g1);
            /* the search gpt2rt_fit ran, counted */
            gpt2rt_memory_plan base;
            gpt2rt__fit_result fr;
            if (gpt2rt_plan(&c, &base) != GPT2RT_OK) { CHECK(0, "gpt2rt_plan: %s", base.error); continue; }
            gpt2rt__fit_search(&base, budget, GPT2RT_FIT_DEFAULT, &fr);
            CHECK(fr.plans >= 1 && fr.plans <= FIT_MAX_PLANS && fr.divisions >= 1 && fr.divisions <= FIT_MAX_DIVISIONS,
                  "gpt2rt_fit B=%d A=%d T=%d L=%d devices %d, budget %llu: %lld plans (at most %d), %lld divisions "
                  "(at most %lld)", cs[i].B, cs[i].A, cs[i].T, cs[i].L, cs[i].nd, (unsigned long long)budget,
                  (long long)fr.plans, FIT_MAX_PLANS, (long long)fr.divisions, (long long)FIT_MAX_DIVISIONS);
            if (fr.plans > most_plans) most_plans = fr.plans;
            if (fr.divisions > most_div) most_div = fr.divisions;
        }
    }
    /* create builds its out-of-memory advice with gpt2rt_fit */
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 16384; c.grad_accum = 1 << 20; c.seq_len = 1; c.memory_budget = (uint64_t)1 << 20;
    gpt2rt_ctx *ctx = NULL;
    double t0 = now_s();
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    double dt = now_s() - t0;
    CHECK(r == GPT2RT_ERR_OUT_OF_MEMORY && has(gpt2rt_last_error(ctx), "micro-batch"),
          "create over budget at batch 16384 x accumulation 2^20: %s: %.200s", gpt2rt_result_string(r),
          gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
    printf("    gpt2rt_fit at the limits: at most %lld plans (bound %d) and %lld divisions (bound %lld) a call; "
           "slowest of 14 calls %.1f ms, create's OOM advice %.1f ms (not checked)\n", (long long)most_plans,
           FIT_MAX_PLANS, (long long)most_div, (long long)FIT_MAX_DIVISIONS, worst * 1e3, dt * 1e3);
}

static void save_rollback(void) {
    gpt2rt_ctx *ctx = tiny(1);
    const char *dir = TMP "/pair";
    char model[256], config[256], old[256];
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(old, sizeof old, "%s/model.safetensors.old", dir);
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, dir));
    size_t mlen, clen;
    unsigned char *m0 = read_all(model, &mlen), *c0 = read_all(config, &clen);
    snap w0 = take(ctx);
    gpt2rt_step_stats st;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st)); /* the weights now differ from the saved pair */
    for (int which = 1; which <= 2; which++) {
        gpt2rt__test_rename_fail = which; /* the first (model) or the second (config.json) rename fails */
        gpt2rt_result r = gpt2rt_weights_save(ctx, dir);
        gpt2rt__test_rename_fail = 0;
        CHECK(r == GPT2RT_ERR_IO && has(gpt2rt_last_error(ctx), "renaming"), "save with rename %d failing: %s: %s",
              which, gpt2rt_result_string(r), gpt2rt_last_error(ctx));
        CHECK(files_equal(model, m0, mlen) && files_equal(config, c0, clen),
              "rename %d failed: the previous model.safetensors + config.json pair changed", which);
        CHECK(!exists(old) && !exists(TMP "/pair/model.safetensors.tmp") && !exists(TMP "/pair/config.json.tmp"),
              "rename %d failed: a .old or .tmp file is left", which);
    }
    /* the pair on disk is the one saved first: it loads as those weights */
    gpt2rt_ctx *back = tiny(1);
    CHECK_OK(back, gpt2rt_weights_load(back, dir));
    CHECK(!memcmp(back->params, w0.p, (size_t)back->n_params * 4), "the kept pair does not load as the old weights");
    gpt2rt_free(back);
    /* a real failure of the second rename: config.json is a non-empty directory */
    const char *dir2 = TMP "/pair_blocked";
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, dir2));
    char m2[256], c2[256];
    snprintf(m2, sizeof m2, "%s/model.safetensors", dir2);
    snprintf(c2, sizeof c2, "%s/config.json", dir2);
    size_t m2len;
    unsigned char *m2buf = read_all(m2, &m2len);
    remove(c2);
    mkdir(c2, 0777);
    char keep[300];
    snprintf(keep, sizeof keep, "%s/keep", c2);
    put(keep, "x", 1);
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st));
    gpt2rt_result r = gpt2rt_weights_save(ctx, dir2);
    CHECK(r == GPT2RT_ERR_IO && has(gpt2rt_last_error(ctx), "config.json"), "save onto a config.json directory: %s: %s",
          gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    CHECK(files_equal(m2, m2buf, m2len), "the second rename failed for real: model.safetensors changed");
    remove(keep); rmdir(c2);
    /* success still removes the kept copy */
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, dir));
    CHECK(!exists(old), "a successful save left model.safetensors.old");
    free(m0); free(c0); free(m2buf); free(w0.p);
    gpt2rt_free(ctx);
}

static void nonfinite_files(void) {
    gpt2rt_ctx *ctx = tiny(1);
    gpt2rt_step_stats st;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st)); /* moments are not zero */
    const char *sp = TMP "/state.safetensors", *bad = TMP "/bad.safetensors";
    CHECK_OK(ctx, gpt2rt_state_save(ctx, sp));
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, TMP "/w"));
    size_t slen, wlen;
    unsigned char *s = read_all(sp, &slen), *w = read_all(TMP "/w/model.safetensors", &wlen);
    snap s0 = take(ctx);
    struct { const char *tensor; size_t idx; float val; const char *want; } sc[] = {
        {"adam_v", 7, -1e-3f, "'adam_v' element 7 is -0.001"}, {"adam_v", 0, NAN, "'adam_v' element 0 is nan"},
        {"adam_m", 123, INFINITY, "'adam_m' element 123 is inf"}, {"params", 5, NAN, "'params' element 5 is nan"}};
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        unsigned char *b = (unsigned char *)malloc(slen);
        memcpy(b, s, slen);
        memcpy(b + st_elem(b, sc[i].tensor, sc[i].idx), &sc[i].val, 4);
        put(bad, b, slen);
        gpt2rt_result r = gpt2rt_state_load(ctx, bad);
        CHECK(r == GPT2RT_ERR_FORMAT && has(gpt2rt_last_error(ctx), sc[i].want) && same(ctx, s0),
              "state with %s[%zu] = %g: %s: %s", sc[i].tensor, sc[i].idx, (double)sc[i].val, gpt2rt_result_string(r),
              gpt2rt_last_error(ctx));
        if (i == 0) printf("    %s\n", gpt2rt_last_error(ctx));
        free(b);
    }
    /* -0.0 is a valid second moment (it compares equal to 0) */
    {
        unsigned char *b = (unsigned char *)malloc(slen);
        float z = -0.0f;
        memcpy(b, s, slen);
        memcpy(b + st_elem(b, "adam_v", 3), &z, 4);
        put(bad, b, slen);
        CHECK_OK(ctx, gpt2rt_state_load(ctx, bad));
        free(b);
    }
    CHECK_OK(ctx, gpt2rt_state_load(ctx, sp));
    s0.p = (free(s0.p), take(ctx).p);
    struct { const char *tensor; size_t idx; float val; const char *want; } wc[] = {
        {"transformer.h.1.mlp.c_fc.bias", 3, NAN, "'transformer.h.1.mlp.c_fc.bias' element 3 (row 3, column 0) is nan"},
        {"transformer.wte.weight", 16 * 5 + 2, INFINITY, "'transformer.wte.weight' element 82 (row 5, column 2) is inf"},
        {"transformer.h.0.attn.c_attn.weight", 48 + 1, -INFINITY,
         "'transformer.h.0.attn.c_attn.weight' element 49 (row 1, column 1) is -inf"}};
    for (size_t i = 0; i < sizeof wc / sizeof wc[0]; i++) {
        unsigned char *b = (unsigned char *)malloc(wlen);
        memcpy(b, w, wlen);
        memcpy(b + st_elem(b, wc[i].tensor, wc[i].idx), &wc[i].val, 4);
        put(bad, b, wlen);
        gpt2rt_result r = gpt2rt_weights_load(ctx, bad);
        CHECK(r == GPT2RT_ERR_FORMAT && has(gpt2rt_last_error(ctx), wc[i].want) && same(ctx, s0),
              "weights with %s[%zu] = %g: %s: %s", wc[i].tensor, wc[i].idx, (double)wc[i].val,
              gpt2rt_result_string(r), gpt2rt_last_error(ctx));
        if (i == 0) printf("    %s\n", gpt2rt_last_error(ctx));
        free(b);
    }
    free(s); free(w); free(s0.p);
    gpt2rt_free(ctx);
}

static void schedule(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 1; c.n_head = 1; c.n_embd = 8; c.vocab_size = 16; c.max_seq_len = 4; c.n_threads = 1;
    c.warmup_steps = 100; c.total_steps = 50;
    gpt2rt_memory_plan p;
    gpt2rt_result r = gpt2rt_plan(&c, &p);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "warmup_steps = 100") && has(p.error, "total_steps = 50"),
          "warmup 100 > total 50: %s: %s", gpt2rt_result_string(r), p.error);
    printf("    %s\n", p.error);
    gpt2rt_ctx *ctx = NULL;
    r = gpt2rt_create(&ctx, &c);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(ctx), "warmup_steps = 100"),
          "create with warmup 100 > total 50: %s", gpt2rt_result_string(r));
    gpt2rt_free(ctx);
    c.total_steps = 100; /* equal: allowed */
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK, "warmup == total refused: %s", p.error);
    c.total_steps = 0; /* constant after the warmup: allowed */
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK, "warmup with total 0 refused: %s", p.error);
}

static char g_log[2048];
static void log_cb(void *user, gpt2rt_log_level level, const char *msg) {
    (void)user;
    if (level == GPT2RT_LOG_WARN) snprintf(g_log, sizeof g_log, "%s", msg);
}

static void ignored_targets(void) {
    for (int accum = 1; accum <= 2; accum++) {
        gpt2rt_ctx *ctx = tiny(accum);
        ctx->cfg.log = log_cb;
        gpt2rt_step_stats st;
        int32_t in2[32], tg2[32], none2[32];
        for (int i = 0; i < 32; i++) { in2[i] = in_tok[i % 16]; tg2[i] = tg_tok[i % 16]; none2[i] = -100; }
        CHECK_OK(ctx, gpt2rt_step(ctx, in2, tg2, &st)); /* Adam's momentum is now non-zero */
        snap s0 = take(ctx);
        g_log[0] = 0;
        memset(&st, 0, sizeof st);
        gpt2rt_result r = gpt2rt_step(ctx, in2, none2, &st);
        CHECK(r == GPT2RT_OK && st.skipped == 1 && st.step == 1 && st.loss == 0.0f, "all targets ignored (accum %d): "
              "%s, skipped %d, step %lld, loss %g", accum, gpt2rt_result_string(r), st.skipped, (long long)st.step,
              (double)st.loss);
        CHECK(same(ctx, s0), "all targets ignored (accum %d): weights, moments or step changed", accum);
        CHECK(has(g_log, "ignored") && has(g_log, "skipped"), "all targets ignored: the log says '%s'", g_log);
        if (accum == 1) printf("    %s\n", g_log);
        /* one micro-batch with targets is enough for a real step */
        if (accum == 2) {
            for (int i = 0; i < 8; i++) none2[8 + i] = tg_tok[i]; /* the second of two micro-batches of B*T = 8 */
            CHECK_OK(ctx, gpt2rt_step(ctx, in2, none2, &st));
            CHECK(!st.skipped && st.step == 2 && !same(ctx, s0), "half the micro-batches with targets: skipped %d, "
                  "step %lld", st.skipped, (long long)st.step);
        }
        free(s0.p);
        gpt2rt_free(ctx);
    }
}

static void null_buffers(void) {
    gpt2rt_ctx *ctx = tiny(1);
    CHECK_OK(ctx, gpt2rt_forward(ctx, in_tok, NULL, NULL));
    gpt2rt_result r = gpt2rt_logits(ctx, NULL, 2 * 4 * 32);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(ctx), "NULL") && !has(gpt2rt_last_error(ctx), "holds"),
          "gpt2rt_logits(NULL): %s", gpt2rt_last_error(ctx));
    r = gpt2rt_param_read(ctx, "transformer.ln_f.bias", GPT2RT_PARAM_VALUE, NULL, 16);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(ctx), "NULL") &&
          has(gpt2rt_last_error(ctx), "transformer.ln_f.bias") && !has(gpt2rt_last_error(ctx), "elements"),
          "gpt2rt_param_read(NULL): %s", gpt2rt_last_error(ctx));
    r = gpt2rt_param_write(ctx, "transformer.ln_f.bias", NULL, 16);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(ctx), "NULL") && !has(gpt2rt_last_error(ctx), "elements"),
          "gpt2rt_param_write(NULL): %s", gpt2rt_last_error(ctx));
    float b[16];
    r = gpt2rt_param_read(ctx, "transformer.ln_f.bias", GPT2RT_PARAM_VALUE, b, 15); /* a real mismatch still says so */
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(ctx), "16 elements, the buffer 15"),
          "size mismatch: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
}

static void config_json(void) {
    char err[1024];
    gpt2rt_config c;
    /* what gpt2rt_weights_save writes */
    gpt2rt_ctx *ctx = tiny(1);
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, TMP "/cfg_saved"));
    memset(&c, 0, sizeof c);
    c.batch_size = 7;
    gpt2rt_result r = gpt2rt_config_load(&c, TMP "/cfg_saved", err, sizeof err);
    CHECK(r == GPT2RT_OK && c.n_layer == 2 && c.n_head == 2 && c.n_embd == 16 && c.vocab_size == 32 &&
          c.max_seq_len == 8 && c.batch_size == 7, "config_load of a saved dir: %s: %s, L=%d H=%d C=%d V=%d P=%d",
          gpt2rt_result_string(r), err, c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.max_seq_len);
    gpt2rt_free(ctx);
    /* the config.json of the Hugging Face hub's gpt2-medium (as published) */
    static const char hub[] =
        "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
        "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n"
        "  \"initializer_range\": 0.02,\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n"
        "  \"n_ctx\": 1024,\n  \"n_embd\": 1024,\n  \"n_head\": 16,\n  \"n_layer\": 24,\n  \"n_positions\": 1024,\n"
        "  \"n_special\": 0,\n  \"predict_special_tokens\": true,\n  \"resid_pdrop\": 0.1,\n"
        "  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n  \"summary_proj_to_labels\": true,\n"
        "  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n  \"task_specific_params\": {\n"
        "    \"text-generation\": {\n      \"do_sample\": true,\n      \"max_length\": 50\n    }\n  },\n"
        "  \"vocab_size\": 50257\n}\n";
    put(TMP "/hub_config.json", hub, sizeof hub - 1);
    memset(&c, 0, sizeof c);
    r = gpt2rt_config_load(&c, TMP "/hub_config.json", err, sizeof err);
    CHECK(r == GPT2RT_OK && c.n_layer == 24 && c.n_head == 16 && c.n_embd == 1024 && c.vocab_size == 50257 &&
          c.max_seq_len == 1024, "config_load of gpt2-medium's config.json: %s: %s", gpt2rt_result_string(r), err);
    struct { const char *text, *want; } bad[] = {
        {"{\"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768, \"vocab_size\": 50257}", "\"n_positions\" is missing"},
        {"{\"n_layer\": 12, \"n_layer\": 12, \"n_head\": 12}", "\"n_layer\" appears twice"},
        {"{\"n_layer\": 12.5}", "\"n_layer\": expected an integer in [1, 2147483647], found 12.5"},
        {"{\"n_layer\": -1}", "\"n_layer\": -1 is outside [1, 2147483647]"},
        {"{\"n_layer\": 0}", "\"n_layer\": 0 is outside [1, 2147483647]"},
        {"{\"n_layer\": 99999999999}", "\"n_layer\": 99999999999 is outside"},
        {"{\"n_layer\": \"12\"}", "\"n_layer\": expected a number"},
        {"[1, 2]", "expected '{'"},
        {"", "expected '{'"},
        {"{\"n_layer\": 1, \"n_head\": 1, \"n_embd\": 8, \"vocab_size\": 4, \"n_positions\": 8} x", "text after the JSON value"},
        {"{\"n_layer\": 1, \"n_head\": 1, \"n_embd\": 8, \"vocab_size\": 4, \"n_positions\": 8, \"n_ctx\": 4}",
         "n_positions = 8 but n_ctx = 4"},
        {"{\"n_layer\": 1,", "config.json byte"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(TMP "/bad_config.json", bad[i].text, strlen(bad[i].text));
        memset(&c, 0, sizeof c);
        r = gpt2rt_config_load(&c, TMP "/bad_config.json", err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, bad[i].want) && has(err, "bad_config.json") && c.n_layer == 0,
              "config.json '%s': %s: %s (want '%s')", bad[i].text, gpt2rt_result_string(r), err, bad[i].want);
    }
    /* n_ctx alone (older files), n_ctx null */
    const char *old = "{\"n_layer\":1,\"n_head\":1,\"n_embd\":8,\"vocab_size\":4,\"n_ctx\":6,\"n_positions\":null}";
    put(TMP "/old_config.json", old, strlen(old));
    r = gpt2rt_config_load(&c, TMP "/old_config.json", err, sizeof err);
    CHECK(r == GPT2RT_OK && c.max_seq_len == 6, "n_ctx only: %s: %s", gpt2rt_result_string(r), err);
    r = gpt2rt_config_load(&c, TMP "/no_such_dir", err, sizeof err);
    CHECK(r == GPT2RT_ERR_IO && has(err, "no_such_dir/config.json"), "missing config.json: %s", err);
    r = gpt2rt_config_load(NULL, TMP, err, sizeof err);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(err, "NULL"), "config_load(NULL): %s", err);
}

/* a config.json of the shape below with `extra` members added; the load's result and message */
#define CFG_SHAPE "\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 4, \"n_positions\": 6"
static gpt2rt_result cfg_with(const char *extra, gpt2rt_config *c, char *err, size_t cap) {
    size_t n = strlen(extra) + 128;
    char *text = (char *)malloc(n);
    snprintf(text, n, "{" CFG_SHAPE "%s%s}", *extra ? ", " : "", extra);
    put(TMP "/fields.json", text, strlen(text));
    free(text);
    memset(c, 0, sizeof *c);
    return gpt2rt_config_load(c, TMP "/fields.json", err, cap);
}

/* every GPT2Config field is honoured or refused naming the field and its value; unknown
   keys are refused; numbers of any length are read or refused as too long; what
   gpt2rt_weights_save writes loads back equal */
static void config_fields(void) {
    char err[1024];
    gpt2rt_config c;
    struct { const char *extra, *want, *want2; } refused[] = {
        {"\"layer_norm_epsilon\": 0.01", "\"layer_norm_epsilon\": 0.01 is not supported", "1e-5"},
        {"\"activation_function\": \"relu\"", "\"activation_function\": \"relu\" is not supported", "gelu_new"},
        {"\"activation_function\": \"gelu\"", "\"activation_function\": \"gelu\" is not supported", "tanh GELU"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": false is not supported", "lm_head.weight"},
        {"\"scale_attn_weights\": false", "\"scale_attn_weights\": false is not supported", "1/sqrt"},
        {"\"scale_attn_by_inverse_layer_idx\": true", "\"scale_attn_by_inverse_layer_idx\": true is not supported",
         "layer index"},
        {"\"add_cross_attention\": true", "\"add_cross_attention\": true is not supported", "cross-attention"},
        {"\"n_inner\": 100", "\"n_inner\" = 100 is not supported", "4 * n_embd = 32"},
        {"\"model_type\": \"gpt_neo\"", "\"model_type\": \"gpt_neo\" is not supported", "gpt2"},
        {"\"pruned_heads\": {\"0\": [1]}", "\"pruned_heads\": layer 0 has heads removed", "n_head"},
        {"\"n_special\": 2", "\"n_special\": 2 is outside [0, 0]", ""},
        {"\"resid_pdrop\": 0.1, \"embd_pdrop\": 0.2", "\"resid_pdrop\" = 0.1 but \"embd_pdrop\" = 0.2",
         "config.dropout"},
        {"\"attn_pdrop\": 1", "\"attn_pdrop\": 1 is outside [0, 1)", ""},
        {"\"embd_pdrop\": -0.5", "\"embd_pdrop\": -0.5 is outside [0, 1)", ""},
        {"\"resid_pdrop\": \"0.1\"", "\"resid_pdrop\": expected a number", ""},
        {"\"rotary_dim\": 64", "\"rotary_dim\" is not a key of GPT-2's config", "remove it"},
        {"\"use_cache\": true, \"use_cache\": false", "\"use_cache\" appears twice", ""},
        {"\"n_layer\": 1", "\"n_layer\" appears twice", ""},
        {"\"task_specific_params\": {\"a\": [1, 2,]}", "\"a\": ']' after ','", ""},
        {"\"initializer_range\": 02", "\"initializer_range\": a number with a leading zero", ""},
        {"\"initializer_range\": .02", "'.' cannot start a JSON number", ""},
        {"\"initializer_range\": 1e400", "1e400 is out of range", ""},
        {"\"bos_token_id\": 0x10", "'x' after a number", ""},
        {"\"summary_type\": \"\\ud800\"", "lone surrogate \\uD800", ""},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        gpt2rt_result r = cfg_with(refused[i].extra, &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, refused[i].want) && has(err, refused[i].want2) &&
              has(err, "fields.json") && c.n_layer == 0 && c.dropout == 0.0f,
              "config.json with %s: %s: %s (want '%s', '%s')", refused[i].extra, gpt2rt_result_string(r), err,
              refused[i].want, refused[i].want2);
    }
    /* nesting: 512 deep is read, 513 refused */
    for (int depth = 512; depth <= 513; depth++) {
        char deep[1200];
        int n = snprintf(deep, sizeof deep, "\"task_specific_params\": ");
        for (int k = 1; k < depth; k++) deep[n++] = '[';
        deep[n++] = '1';
        for (int k = 1; k < depth; k++) deep[n++] = ']';
        deep[n] = 0;
        gpt2rt_result r = cfg_with(deep, &c, err, sizeof err);
        CHECK(depth == 512 ? r == GPT2RT_OK : r == GPT2RT_ERR_FORMAT && has(err, "nested more than 512 deep"),
              "task_specific_params %d deep: %s: %s", depth, gpt2rt_result_string(r), err);
    }
    /* honoured or accepted: what GPT-2 checkpoints hold */
    const char *ok[] = {
        "\"n_inner\": 32", "\"n_inner\": null", "\"activation_function\": \"gelu_pytorch_tanh\"",
        "\"layer_norm_epsilon\": 9.999999747378752e-06", "\"reorder_and_upcast_attn\": true",
        "\"pruned_heads\": {}", "\"n_special\": 0", "\"use_cache\": false, \"bos_token_id\": null",
        "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0\", \"_name_or_path\": \"gpt2\"",
        "\"summary_type\": \"cls_index\", \"summary_first_dropout\": 0.3, \"id2label\": {\"0\": \"A\"}",
        "\"gpt2rt_note\": \"a line for a reader\"",
        "\"\\u00e9t\\u00e9\\ud83d\\ude00\": 1", /* an unknown key, refused below: its \\u escapes are read first */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        gpt2rt_result r = cfg_with(ok[i], &c, err, sizeof err);
        if (i + 1 == sizeof ok / sizeof ok[0]) /* U+00E9 U+00E9 U+1F600 as UTF-8 in the message */
            CHECK(r == GPT2RT_ERR_FORMAT && has(err, "\"\xc3\xa9t\xc3\xa9\xf0\x9f\x98\x80\" is not a key"),
                  "an unknown key with escapes: %s", err);
        else
            CHECK(r == GPT2RT_OK && c.n_layer == 1 && c.n_embd == 8 && c.max_seq_len == 6, "config.json with %s: %s: %s",
                  ok[i], gpt2rt_result_string(r), err);
    }
    gpt2rt_result r = cfg_with("\"resid_pdrop\": 0.1, \"embd_pdrop\": 0.1, \"attn_pdrop\": 0.25", &c, err, sizeof err);
    CHECK(r == GPT2RT_OK && c.dropout == 0.1f && c.attn_dropout == 0.25f && c.head_dropout == 0.0f,
          "pdrops: %s: dropout %g attn_dropout %g", err, (double)c.dropout, (double)c.attn_dropout);
    r = cfg_with("\"embd_pdrop\": 0.2", &c, err, sizeof err);
    CHECK(r == GPT2RT_OK && c.dropout == 0.2f && c.attn_dropout == 0.0f, "embd_pdrop alone: %s", err);
    /* numbers of any length: read, or refused as too long with the length (never "not finite") */
    {
        size_t big = (size_t)1 << 20;
        char *num = (char *)malloc(big + 200);
        for (size_t k = 0; k < big; k++) num[k] = (char)('1' + k % 9);
        num[big] = 0;
        char *extra = (char *)malloc(big + 200);
        snprintf(extra, big + 200, "\"layer_norm_epsilon\": %s", num);
        r = cfg_with(extra, &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "\"layer_norm_epsilon\": a number too long (1048576 characters") &&
              !has(err, "finite"), "a 1 MiB number: %s", err);
        snprintf(extra, big + 200, "\"n_inner\": %s", num);
        r = cfg_with(extra, &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "\"n_inner\": an integer of 1048576 characters is outside "
              "[1, 2147483647]"), "a 1 MiB integer: %s", err);
        int n = snprintf(extra, big + 200, "\"n_inner\": ");
        for (int k = 0; k < 300; k++) extra[n++] = '0';
        snprintf(extra + n, 8, "7");
        r = cfg_with(extra, &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "\"n_inner\": a number with a leading zero"), "300 zeros then 7: %s",
              err);
        /* 1e-5 written with 450 characters: read */
        n = snprintf(extra, big + 200, "\"layer_norm_epsilon\": 0.00001");
        for (int k = 0; k < 440; k++) extra[n++] = '0';
        extra[n] = 0;
        r = cfg_with(extra, &c, err, sizeof err);
        CHECK(r == GPT2RT_OK, "1e-5 in 470 characters: %s: %s", gpt2rt_result_string(r), err);
        free(num);
        free(extra);
    }
    /* what gpt2rt_weights_save writes loads back equal: the shape and the dropouts that ran */
    gpt2rt_config want;
    memset(&want, 0, sizeof want);
    want.n_layer = 2; want.n_head = 2; want.n_embd = 16; want.vocab_size = 32; want.max_seq_len = 8;
    want.batch_size = 2; want.seq_len = 4; want.n_threads = 1; want.lr = 1e-2f;
    want.dropout = 0.1f; want.attn_dropout = 0.123456789f; want.head_dropout = 0.3f;
    gpt2rt_ctx *ctx = NULL;
    r = gpt2rt_create(&ctx, &want);
    CHECK(r == GPT2RT_OK, "create with dropouts: %s", gpt2rt_last_error(ctx));
    if (r == GPT2RT_OK) {
        CHECK_OK(ctx, gpt2rt_weights_save(ctx, TMP "/cfg_drop"));
        memset(&c, 0, sizeof c);
        r = gpt2rt_config_load(&c, TMP "/cfg_drop", err, sizeof err);
        CHECK(r == GPT2RT_OK && c.n_layer == 2 && c.n_head == 2 && c.n_embd == 16 && c.vocab_size == 32 &&
              c.max_seq_len == 8 && c.dropout == want.dropout && c.attn_dropout == want.attn_dropout &&
              c.head_dropout == want.head_dropout, "save + config_load round trip: %s: %s, dropout %.9g attn %.9g "
              "head %.9g", gpt2rt_result_string(r), err, (double)c.dropout, (double)c.attn_dropout,
              (double)c.head_dropout);
    }
    gpt2rt_free(ctx);
    /* a patch model's config.json: its input, head, mask and shape load back, so a model
       built from config_load alone takes the saved weights (they were dropped before) */
    memset(&want, 0, sizeof want);
    want.n_layer = 2; want.n_head = 2; want.n_embd = 16; want.max_seq_len = 16; want.batch_size = 2;
    want.n_threads = 1; want.input = GPT2RT_INPUT_PATCHES; want.head = GPT2RT_HEAD_PATCH_DECODE;
    want.attn_mask = GPT2RT_MASK_PLACEHOLDERS; want.seq_len = 24; want.patch_len = 4; want.patch_stride = 4;
    want.horizon = 8; want.n_channels = 3; want.revin_affine = 1;
    ctx = NULL;
    r = gpt2rt_create(&ctx, &want);
    CHECK(r == GPT2RT_OK, "create a patch model: %s", gpt2rt_last_error(ctx));
    if (r == GPT2RT_OK) {
        CHECK_OK(ctx, gpt2rt_weights_save(ctx, TMP "/cfg_patch"));
        memset(&c, 0, sizeof c);
        c.batch_size = 2; c.n_threads = 1;
        r = gpt2rt_config_load(&c, TMP "/cfg_patch", err, sizeof err);
        CHECK(r == GPT2RT_OK && c.input == want.input && c.head == want.head && c.attn_mask == want.attn_mask &&
              c.seq_len == 24 && c.patch_len == 4 && c.patch_stride == 4 && c.horizon == 8 && c.n_channels == 3 &&
              c.revin_affine == 1, "patch model: save + config_load round trip: %s: %s (input %d head %d mask %d "
              "lookback %d patch %d/%d horizon %d channels %d revin %d)", gpt2rt_result_string(r), err, (int)c.input,
              (int)c.head, (int)c.attn_mask, c.seq_len, c.patch_len, c.patch_stride, c.horizon, c.n_channels,
              c.revin_affine);
        gpt2rt_ctx *back = NULL;
        if (r == GPT2RT_OK && gpt2rt_create(&back, &c) == GPT2RT_OK) {
            r = gpt2rt_weights_load(back, TMP "/cfg_patch");
            CHECK(r == GPT2RT_OK, "patch model: the config_load model takes the saved weights: %s",
                  gpt2rt_last_error(back));
        } else CHECK(0, "patch model: create from config_load: %s", gpt2rt_last_error(back));
        gpt2rt_free(back);
        /* a key of the patch description alone, or one gpt2rt never writes, is refused */
        r = cfg_with("\"gpt2rt_horizon\": 8", &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "without \"gpt2rt_input\""), "gpt2rt_horizon alone: %s", err);
        r = cfg_with("\"gpt2rt_horizn\": 8", &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "gpt2rt_horizn"), "a misspelt gpt2rt key: %s", err);
        r = cfg_with("\"gpt2rt_input\": \"patches\", \"gpt2rt_head\": \"regression\"", &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "needs \"gpt2rt_attn_mask\""), "a patch model without its mask: %s",
              err);
        r = cfg_with("\"gpt2rt_input\": \"pixels\"", &c, err, sizeof err);
        CHECK(r == GPT2RT_ERR_FORMAT && has(err, "\"pixels\" is not one of"), "gpt2rt_input pixels: %s", err);
    }
    gpt2rt_free(ctx);
}

/* a refusal's message contains want and not stale (the previous refusal's phrase) */
#define REFUSED(call, result, getmsg, want, stale) do { \
        gpt2rt_result r_ = (call); \
        const char *m_ = (getmsg); \
        CHECK(r_ == (result) && has(m_, want) && !has(m_, stale), "%s -> %s: \"%s\" (want \"%s\", not \"%s\")", #call, \
              gpt2rt_result_string(r_), m_, want, stale); \
    } while (0)

/* Every refusal writes its own message: each call below is refused right after a
   different refusal, so an empty message or the previous one fails the check. */
static void own_messages(void) {
    gpt2rt_tokenizer *tok;
    gpt2rt_result r = gpt2rt_tok_load(&tok, "data");
    CHECK(r == GPT2RT_OK, "data/: %s", gpt2rt_tok_last_error(tok));
    if (r != GPT2RT_OK) { gpt2rt_tok_free(tok); return; }
#define TOKMSG gpt2rt_tok_last_error(tok)
    int32_t ids[8], bad_id = -5;
    char out[8];
    size_t n;
    REFUSED(gpt2rt_tok_decode(tok, &bad_id, 1, out, sizeof out, &n), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "ids[0] = -5", "NULL");
    REFUSED(gpt2rt_tok_encode(tok, NULL, 5, GPT2RT_TOK_SPECIAL_TEXT, ids, 8, &n), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_encode: text is NULL with len = 5", "ids[0]");
    REFUSED(gpt2rt_tok_encode(tok, "abc", 3, GPT2RT_TOK_SPECIAL_TEXT, NULL, 8, &n), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_encode: ids is NULL with cap = 8", "text is NULL");
    REFUSED(gpt2rt_tok_encode(tok, "abc", 3, GPT2RT_TOK_SPECIAL_TEXT, ids, 8, NULL), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_encode: n_ids is NULL", "with cap");
    REFUSED(gpt2rt_tok_decode(tok, NULL, 2, out, sizeof out, &n), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_decode: ids is NULL with n = 2", "n_ids");
    REFUSED(gpt2rt_tok_decode(tok, ids, 0, NULL, 4, &n), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_decode: out is NULL with cap = 4", "ids is NULL");
    REFUSED(gpt2rt_tok_decode(tok, ids, 0, out, 0, NULL), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG,
            "gpt2rt_tok_decode: n_bytes is NULL", "out is NULL");
    REFUSED(gpt2rt_tok_save(tok, NULL), GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG, "gpt2rt_tok_save: path is NULL",
            "n_bytes");
    REFUSED(gpt2rt_tok_encode(tok, "<|endoftext|>", 13, (gpt2rt_tok_special)7, ids, 8, &n),
            GPT2RT_ERR_INVALID_ARGUMENT, TOKMSG, "special = 7", "path is NULL");
#undef TOKMSG
    gpt2rt_tok_free(tok);

    gpt2rt_shard *sh;
    int32_t toks[64], in[16], tg[16];
    for (int i = 0; i < 64; i++) toks[i] = i;
    CHECK(gpt2rt_shard_from_tokens(&sh, toks, 64) == GPT2RT_OK, "shard: %s", gpt2rt_shard_last_error(sh));
    REFUSED(gpt2rt_shard_batch(sh, 1, 0, 0, 1, 2, 4, NULL, tg), GPT2RT_ERR_INVALID_ARGUMENT, gpt2rt_shard_last_error(sh),
            "gpt2rt_shard_batch: inputs is NULL", "targets");
    REFUSED(gpt2rt_shard_batch(sh, 1, 0, 0, 1, 2, 4, in, NULL), GPT2RT_ERR_INVALID_ARGUMENT, gpt2rt_shard_last_error(sh),
            "gpt2rt_shard_batch: targets is NULL", "inputs");
    REFUSED(gpt2rt_shard_save(sh, NULL), GPT2RT_ERR_INVALID_ARGUMENT, gpt2rt_shard_last_error(sh),
            "gpt2rt_shard_save: path is NULL", "targets");
    /* T + 1 in the message: T = INT_MAX overflowed an int */
    REFUSED(gpt2rt_shard_batch(sh, 1, 0, 0, 1, 1, INT32_MAX, in, tg), GPT2RT_ERR_INVALID_ARGUMENT,
            gpt2rt_shard_last_error(sh), "64 tokens make 0 windows of T+1 = 2147483648 tokens", "path is NULL");
    gpt2rt_shard_free(sh);

    gpt2rt_series *se;
    gpt2rt_series_desc d;
    memset(&d, 0, sizeof d);
    d.lookback = 2; d.horizon = 1; d.borders = GPT2RT_SERIES_BORDERS_RATIO;
    r = gpt2rt_series_load(&se, "tests/fixtures/series_small.csv", &d);
    CHECK(r == GPT2RT_OK, "series_small.csv: %s", gpt2rt_series_last_error(se));
    if (r == GPT2RT_OK) {
#define SERMSG gpt2rt_series_last_error(se)
        float x[4 * 2 * 3], y[4 * 1 * 3];
        double mu, sd;
        gpt2rt_series_info info;
        memset(&info, 0, sizeof info); /* the failure message prints it even when info_get refused */
        /* 30 rows, 70/10/20: the test split [22, 30) holds 30 - 22 - 2 - 1 + 1 = 6 windows */
        REFUSED(gpt2rt_series_batch(se, GPT2RT_SERIES_TEST, 0, 0, INT64_MAX - 1, 4, x, y), GPT2RT_ERR_INVALID_ARGUMENT,
                SERMSG, "first = 9223372036854775806, B = 4 must lie in the test split's [0, 6)", "NULL");
        REFUSED(gpt2rt_series_batch(se, GPT2RT_SERIES_TRAIN, 0, 0, 0, 4, NULL, y), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_batch: x is NULL", "first =");
        REFUSED(gpt2rt_series_batch(se, GPT2RT_SERIES_TRAIN, 0, 0, 0, 4, x, NULL), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_batch: y is NULL", "x is NULL");
        REFUSED(gpt2rt_series_info_get(se, NULL), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_info_get: info is NULL", "y is NULL");
        REFUSED(gpt2rt_series_scaler(se, 3, &mu, &sd), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_scaler: channel m = 3 is outside [0, 3)", "info is NULL");
        REFUSED(gpt2rt_series_scaler(se, 0, NULL, &sd), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_scaler: mean is NULL", "channel m");
        REFUSED(gpt2rt_series_scaler(se, 0, &mu, NULL), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "gpt2rt_series_scaler: std is NULL", "mean is NULL");
        REFUSED(gpt2rt_series_batch(se, (gpt2rt_series_split)5, 0, 0, 0, 1, x, y), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "split = 5", "std is NULL");
        REFUSED(gpt2rt_series_batch(se, GPT2RT_SERIES_VAL, 0, -1, 0, 1, x, y), GPT2RT_ERR_INVALID_ARGUMENT, SERMSG,
                "epoch = -1", "split = 5");
        /* what a refusal leaves usable: the next batch works */
        CHECK(gpt2rt_series_info_get(se, &info) == GPT2RT_OK && info.windows[GPT2RT_SERIES_TEST] == 6 &&
              gpt2rt_series_batch(se, GPT2RT_SERIES_TEST, 0, 0, 2, 4, x, y) == GPT2RT_OK,
              "after the refusals: test windows %lld: %s", (long long)info.windows[GPT2RT_SERIES_TEST], SERMSG);
#undef SERMSG
    }
    gpt2rt_series_free(se);

    /* the plan calls write into the caller's buffer */
    char buf[512];
    gpt2rt_config c, fitted;
    memset(&c, 0, sizeof c);
    strcpy(buf, "stale");
    r = gpt2rt_fit(NULL, 1 << 30, 0, &fitted, buf, sizeof buf);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(buf, "gpt2rt_fit: config is NULL"), "gpt2rt_fit(NULL): %s", buf);
    r = gpt2rt_fit(&c, 1 << 30, 0, NULL, buf, sizeof buf);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(buf, "gpt2rt_fit: out is NULL"), "gpt2rt_fit(out NULL): %s", buf);
    gpt2rt_step_time st;
    r = gpt2rt_plan_step_time(&c, NULL, 0, &st, buf, sizeof buf);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(buf, "hw and out must not be NULL"), "step_time(hw NULL): %s", buf);
    gpt2rt_memory_plan p;
    CHECK(gpt2rt_plan(NULL, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "config is NULL"), "plan(NULL): %s",
          p.error);
}

/* rendezvous_file that names a directory or a FIFO: the rank that reads it (rank 1)
   said "not a gpt2rt rendezvous file (0 bytes)" of a directory and blocked in fopen
   on a FIFO for as long as no one wrote to it, far past timeout_s; rank 0 said a
   directory "exists already (left by an earlier run)" */
static void rendezvous_paths(void) {
    const char *fifo = TMP "/rdv.fifo";
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    struct { const char *path, *kind; } cs[] = {{TMP, "is a directory"}, {fifo, "is a FIFO (named pipe)"},
                                                 {"/dev/null", "is a character device"}};
    alarm(20);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int rank = 0; rank < 2; rank++) {
            gpt2rt_config c;
            memset(&c, 0, sizeof c);
            c.n_layer = 1; c.n_head = 1; c.n_embd = 8; c.vocab_size = 16; c.max_seq_len = 4; c.n_threads = 1;
            c.parallel = GPT2RT_PARALLEL_DATA; c.world_size = 2; c.rank = rank;
            c.rendezvous = GPT2RT_RENDEZVOUS_FILE; c.timeout_s = 2.0f;
            snprintf(c.rendezvous_file, sizeof c.rendezvous_file, "%s", cs[i].path);
            gpt2rt_memory_plan p;
            gpt2rt_result r = gpt2rt_plan(&c, &p);
            CHECK(r == GPT2RT_OK, "plan of a FILE rendezvous: %s", p.error);
            if (r != GPT2RT_OK) continue;
            unsigned char id[GPT2RT__RDV_ID_BYTES];
            memset(id, 7, sizeof id);
            char err[1024] = "";
            double t0 = now_s();
            r = gpt2rt__rdv_exchange(&p.config, id, err, sizeof err);
            double dt = now_s() - t0;
            /* well under timeout_s = 2: refused at once, not after waiting */
            CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(err, cs[i].path) && has(err, cs[i].kind) &&
                  !has(err, "exists already") && !has(err, "bytes") && dt < 1.0,
                  "rank %d, rendezvous_file %s: %s in %.2f s: %s", rank, cs[i].path, gpt2rt_result_string(r), dt, err);
            if (i == 1 && rank == 1) printf("    %s\n", err);
        }
    alarm(0);
    /* rank 0 left nothing beside the FIFO or in the directory */
    CHECK(!exists(TMP ".tmp0") && !exists(TMP "/rdv.fifo.tmp0"), "a refused rendezvous left its temporary file");
    unlink(fifo);
}

/* item 9: the plan printed from what a context allocated said "(0 tokens a step)"
   where gpt2rt_plan's says 16 */
static void plan_tokens(void) {
    struct { int accum, devices; gpt2rt_parallel par; long long want; } cs[] = {
        {2, 1, GPT2RT_PARALLEL_NONE, 2 * 4 * 2},      /* B x T x grad_accum */
        {1, 2, GPT2RT_PARALLEL_DATA, 2 * 4 * 2},      /* B x T x data-parallel devices */
        {2, 2, GPT2RT_PARALLEL_LAYER_SPLIT, 2 * 4 * 2}}; /* the stages share the micro-batches */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gpt2rt_config c;
        memset(&c, 0, sizeof c);
        c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 32; c.max_seq_len = 8; c.n_threads = 1;
        c.batch_size = 2; c.seq_len = 4; c.grad_accum = cs[i].accum; c.n_devices = cs[i].devices;
        c.parallel = cs[i].par;
        gpt2rt_memory_plan planned, allocated;
        gpt2rt_ctx *ctx = NULL;
        CHECK(gpt2rt_plan(&c, &planned) == GPT2RT_OK, "plan: %s", planned.error);
        gpt2rt_result r = gpt2rt_create(&ctx, &c);
        CHECK(r == GPT2RT_OK, "create: %s", gpt2rt_last_error(ctx));
        if (r != GPT2RT_OK) { gpt2rt_free(ctx); continue; }
        CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &allocated));
        char a[4096], b[4096], want[64];
        gpt2rt_plan_format(&planned, a, sizeof a);
        gpt2rt_plan_format(&allocated, b, sizeof b);
        snprintf(want, sizeof want, "(%lld tokens a step)", cs[i].want);
        CHECK(allocated.tokens_per_step == planned.tokens_per_step &&
              allocated.flops_per_token == planned.flops_per_token,
              "case %zu: gpt2rt_plan_allocated's struct says %lld tokens a step, %g FLOPs a token; gpt2rt_plan %lld, %g",
              i, (long long)allocated.tokens_per_step, allocated.flops_per_token, (long long)planned.tokens_per_step,
              planned.flops_per_token);
        CHECK(planned.tokens_per_step == cs[i].want && has(a, want) && has(b, want),
              "case %zu: tokens_per_step %lld; gpt2rt_plan prints \"%.120s\", gpt2rt_plan_allocated \"%.120s\" (want %s)",
              i, (long long)planned.tokens_per_step, strchr(a, '\n') ? strchr(a, '\n') + 1 : a,
              strchr(b, '\n') ? strchr(b, '\n') + 1 : b, want);
        gpt2rt_free(ctx);
    }
    /* a patch model has no vocabulary: the table names the series' shape and the head,
       and counts positions (windows x channels x patches x grad_accum) */
    struct { gpt2rt_head head; int lookback, len, stride, horizon; const char *want[3]; } ps[] = {
        {GPT2RT_HEAD_REGRESSION, 336, 16, 8, 96, /* (336 - 16)/8 + 2 = 42 patches; 2 x 3 x 42 x 2 positions */
         {"lookback 336, patch 16 stride 8, 42 positions, 3 channels, flatten (GPT4TS) head, horizon 96",
          "B=2 windows x 3 channels grad_accum=2 (504 positions a step)", NULL}},
        {GPT2RT_HEAD_NEXT_PATCH, 64, 16, 16, 0, /* (64 - 16)/16 + 1 = 4 patches; 2 x 3 x 4 x 2 */
         {"patch 16 stride 16, 4 positions, 3 channels, next patch (aLLM4TS stage 1) head:", "(48 positions a step)",
          NULL}}};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        gpt2rt_config c;
        memset(&c, 0, sizeof c);
        c.n_layer = 1; c.n_head = 2; c.n_embd = 16; c.max_seq_len = 64; c.n_threads = 1;
        c.input = GPT2RT_INPUT_PATCHES; c.head = ps[i].head; c.seq_len = ps[i].lookback; c.patch_len = ps[i].len;
        c.patch_stride = ps[i].stride; c.horizon = ps[i].horizon; c.n_channels = 3; c.batch_size = 2; c.grad_accum = 2;
        gpt2rt_memory_plan pl;
        char a[4096];
        CHECK(gpt2rt_plan(&c, &pl) == GPT2RT_OK, "patch plan %zu: %s", i, pl.error);
        gpt2rt_plan_format(&pl, a, sizeof a);
        for (int k = 0; ps[i].want[k]; k++)
            CHECK(has(a, ps[i].want[k]), "patch plan %zu prints \"%.300s\" (want \"%s\")", i, a, ps[i].want[k]);
        CHECK(!has(a, "V=") && !has(a, "tokens a step"), "patch plan %zu names a vocabulary or tokens: %.300s", i, a);
    }
    /* a failed plan prints why there is none, without reading its zeroed config */
    gpt2rt_memory_plan bad;
    gpt2rt_plan(NULL, &bad);
    char buf[1024];
    CHECK(gpt2rt_plan_format(&bad, buf, sizeof buf) > 0 && has(buf, "no plan: config is NULL"), "failed plan: %s", buf);
}

/* ---- refused plans, ZeRO-1 gradient reads, byte counts past 64 bits, bf16 overflow,
   the objective of a state, logits of a bf16 context ---- */

static gpt2rt_config tiny_cfg(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 32; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 4; c.n_threads = 1; c.lr = 1e-2f; c.backend = GPT2RT_BACKEND_CPU;
    return c;
}

/* a refused config leaves an all-zero plan (its error aside), and every call that takes
   a plan answers one, or a plan whose config was changed after gpt2rt_plan, with an error */
static void refused_plans(void) {
    gpt2rt_config bad[4];
    const char *name[4] = {"layer split over 9 devices", "layer split over 64 devices", "patches with head 9",
                           "n_layer -5"};
    for (int i = 0; i < 4; i++) bad[i] = tiny_cfg();
    bad[0].parallel = bad[1].parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    bad[0].n_devices = 9; bad[1].n_devices = 64;
    bad[0].n_layer = bad[1].n_layer = 64;
    bad[2].input = GPT2RT_INPUT_PATCHES; bad[2].head = (gpt2rt_head)9; bad[2].vocab_size = 0;
    bad[3].n_layer = -5;
    gpt2rt_memory_plan zero;
    memset(&zero, 0, sizeof zero);
    for (int i = 0; i < 4; i++) {
        gpt2rt_memory_plan p;
        memset(&p, 0x5A, sizeof p);
        gpt2rt_result r = gpt2rt_plan(&bad[i], &p);
        CHECK(r != GPT2RT_OK && p.error[0], "%s: gpt2rt_plan %s", name[i], gpt2rt_result_string(r));
        CHECK(!memcmp(&p, &zero, offsetof(gpt2rt_memory_plan, error)),
              "%s: the refused plan is not all zero (n_devices %d, n_layer %d, head %d)", name[i], p.n_devices,
              p.config.n_layer, (int)p.config.head);
        char buf[2048];
        size_t n = gpt2rt_plan_format(&p, buf, sizeof buf);
        CHECK(n > 0 && has(buf, "no plan") && has(buf, p.error), "%s: the refused plan prints \"%s\" (its error: %s)",
              name[i], buf, p.error);
        if (i == 0) printf("    %s", buf);
        /* the other calls refuse the config as gpt2rt_plan does */
        gpt2rt_config out;
        char why[2048];
        CHECK(gpt2rt_fit(&bad[i], (uint64_t)1 << 30, 0, &out, why, sizeof why) == r && has(why, p.error),
              "%s: gpt2rt_fit says \"%s\"", name[i], why);
        gpt2rt_hardware hw = {1e12, 1e12, 1e12, 1e12, 1e10, 0};
        gpt2rt_step_time st;
        CHECK(gpt2rt_plan_step_time(&bad[i], &hw, 0, &st, why, sizeof why) == r && has(why, p.error),
              "%s: gpt2rt_plan_step_time says \"%s\"", name[i], why);
        gpt2rt_ctx *ctx = NULL;
        CHECK(gpt2rt_create(&ctx, &bad[i]) == r, "%s: create accepts it", name[i]);
        gpt2rt_memory_plan a;
        CHECK(gpt2rt_plan_allocated(ctx, &a) != GPT2RT_OK && !memcmp(&a, &zero, sizeof a),
              "%s: gpt2rt_plan_allocated of a refused context", name[i]);
        gpt2rt_free(ctx);
    }
    /* a plan never filled */
    char buf[2048];
    gpt2rt_plan_format(&zero, buf, sizeof buf);
    CHECK(has(buf, "no plan") && has(buf, "all zero"), "a zeroed plan prints \"%s\"", buf);
    /* a good plan whose config or device count was changed afterwards: refused, named */
    gpt2rt_config c = tiny_cfg();
    c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 2;
    gpt2rt_memory_plan good;
    CHECK(gpt2rt_plan(&c, &good) == GPT2RT_OK, "layer split plan: %s", good.error);
    struct { const char *what, *want; } tw[] = {{"config.n_devices = 64", "n_devices = 64"},
                                              {"config.head = 9", "head = 9"},
                                              {"config.n_layer = -5", "n_layer = -5"},
                                              {"config.n_head = 0", "n_head"}, /* resolved again: the default 12 */
                                              {"n_devices = 9", "n_devices = 9"}};
    for (int i = 0; i < 5; i++) {
        gpt2rt_memory_plan t = good;
        if (i == 0) t.config.n_devices = 64;
        if (i == 1) t.config.head = (gpt2rt_head)9;
        if (i == 2) t.config.n_layer = -5;
        if (i == 3) t.config.n_head = 0;
        if (i == 4) t.n_devices = 9;
        gpt2rt_plan_format(&t, buf, sizeof buf);
        CHECK(has(buf, "no plan") && has(buf, tw[i].want), "a plan with %s prints \"%.300s\"", tw[i].what, buf);
    }
    gpt2rt_plan_format(&good, buf, sizeof buf);
    CHECK(!has(buf, "no plan") && has(buf, "stages (the planner's split): 0: layers 0..0, 1: layers 1..1"),
          "the untouched plan prints \"%.300s\"", buf);
}

/* ZeRO-1: the gradient read after the last backward is the summed one, as without sharding */
static void zero1_grads(void) {
    gpt2rt_config one = tiny_cfg(), dp = tiny_cfg(), z;
    one.batch_size = 4;
    dp.parallel = GPT2RT_PARALLEL_DATA; dp.n_devices = 2; dp.n_threads = 2;
    z = dp; z.shard_optimizer = 1;
    gpt2rt_ctx *a = NULL, *b = NULL, *s = NULL;
    CHECK_OK(a, gpt2rt_create(&a, &one));
    CHECK_OK(b, gpt2rt_create(&b, &dp));
    CHECK_OK(s, gpt2rt_create(&s, &z));
    int32_t in[16], tg[16];
    for (int i = 0; i < 16; i++) { in[i] = (i * 11 + 5) % 32; tg[i] = (i * 3 + 2) % 32; }
    gpt2rt_ctx *ctxs[3] = {a, b, s};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ctxs[k], gpt2rt_forward(ctxs[k], in, tg, NULL));
        CHECK_OK(ctxs[k], gpt2rt_backward(ctxs[k]));
    }
    gpt2rt_memory_plan p;
    CHECK_OK(a, gpt2rt_plan_allocated(a, &p));
    float *ga = (float *)malloc((size_t)p.n_params_padded * 4), *gb = (float *)malloc((size_t)p.n_params_padded * 4),
          *gs = (float *)malloc((size_t)p.n_params_padded * 4);
    int64_t na = harness_params(a, GPT2RT_PARAM_GRAD, ga), nb = harness_params(b, GPT2RT_PARAM_GRAD, gb),
            ns = harness_params(s, GPT2RT_PARAM_GRAD, gs);
    double eb = rel_err(gb, ga, na), es = rel_err(gs, ga, na);
    /* the ranks' sums add the same products in another order than one device's: a few ulp
       (2^-23 = 1.2e-7) of the largest entry; 1e-5 leaves room for cancellation, and a
       shard read from the wrong rank is off by O(1) */
    CHECK(na == nb && na == ns && eb < 1e-5 && es < 1e-5,
          "gradients against one device: data parallel %.3g, ZeRO-1 %.3g (%lld, %lld, %lld floats)", eb, es,
          (long long)na, (long long)nb, (long long)ns);
    CHECK(nb == ns && !memcmp(gb, gs, (size_t)ns * 4), "ZeRO-1's gradient is not bitwise the unsharded one");
    float lnf[16], lnf_one[16];
    CHECK_OK(s, gpt2rt_param_read(s, "transformer.ln_f.bias", GPT2RT_PARAM_GRAD, lnf, 16));
    CHECK_OK(a, gpt2rt_param_read(a, "transformer.ln_f.bias", GPT2RT_PARAM_GRAD, lnf_one, 16));
    printf("    ZeRO-1 gradient against one device: %.3g (ln_f.bias %.3g)\n", es, rel_err(lnf, lnf_one, 16));
    /* the update still takes the summed gradient: the weights agree bitwise */
    CHECK_OK(b, gpt2rt_update(b, NULL));
    CHECK_OK(s, gpt2rt_update(s, NULL));
    CHECK(harness_params_equal(b, s, GPT2RT_PARAM_VALUE), "ZeRO-1's weights after the update differ");
    free(ga); free(gb); free(gs);
    gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(s);
}

/* byte counts (and tokens a step) that do not fit in 64 bits are refused, naming the
   factors; below that the products are exact */
static void plan_overflow(void) {
    gpt2rt_config c = tiny_cfg();
    c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 2;
    c.n_embd = 4096; c.n_head = 32; c.max_seq_len = 1 << 20; c.seq_len = 1 << 20; c.batch_size = 1 << 10;
    gpt2rt_memory_plan p1, pm, p;
    CHECK(gpt2rt_plan(&c, &p1) == GPT2RT_OK, "B*T = 2^30, C = 4096, one micro-batch: %s", p1.error);
    c.grad_accum = 16;
    CHECK(gpt2rt_plan(&c, &pm) == GPT2RT_OK, "16 micro-batches: %s", pm.error);
    CHECK(pm.bytes[0][GPT2RT_MEM_ACTIVATIONS] == 16 * p1.bytes[0][GPT2RT_MEM_ACTIVATIONS],
          "16 micro-batches in flight hold %llu bytes of activations, one %llu",
          (unsigned long long)pm.bytes[0][GPT2RT_MEM_ACTIVATIONS], (unsigned long long)p1.bytes[0][GPT2RT_MEM_ACTIVATIONS]);
    c.grad_accum = 1 << 20;
    gpt2rt_result r = gpt2rt_plan(&c, &p);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "grad_accum = 1048576") && has(p.error, "2^64"),
          "2^20 micro-batches of %llu bytes: %s, %llu bytes of activations: %s",
          (unsigned long long)p1.bytes[0][GPT2RT_MEM_ACTIVATIONS], gpt2rt_result_string(r),
          (unsigned long long)p.bytes[0][GPT2RT_MEM_ACTIVATIONS], p.error);
    printf("    %s\n", p.error);
    /* CUDA split over 8 devices at every limit */
    gpt2rt_config m;
    memset(&m, 0, sizeof m);
    m.backend = GPT2RT_BACKEND_CUDA; m.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; m.n_devices = 8;
    m.n_layer = 1024; m.n_head = 1024; m.n_embd = 65536; m.vocab_size = 1 << 24; m.max_seq_len = 1 << 20;
    m.seq_len = 1 << 20; m.batch_size = 1 << 10; m.grad_accum = 1 << 20; m.n_threads = 1;
    r = gpt2rt_plan(&m, &p);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "grad_accum = 1048576") && has(p.error, "2^64"),
          "CUDA, 8 stages at every limit: %s, device 0 %llu bytes: %s", gpt2rt_result_string(r),
          (unsigned long long)p.total[0], p.error);
    /* one device at every limit fits 64 bits: the plan is exact (the activations are the
       layers' blocks and more, 2^62 bytes) */
    m.parallel = GPT2RT_PARALLEL_NONE; m.n_devices = 1; m.grad_accum = 1; m.backend = GPT2RT_BACKEND_CPU;
    r = gpt2rt_plan(&m, &p);
    CHECK(r == GPT2RT_OK && p.bytes[0][GPT2RT_MEM_ACTIVATIONS] > ((uint64_t)1 << 62), "one device at every limit: %s, "
          "%llu bytes of activations: %s", gpt2rt_result_string(r),
          (unsigned long long)p.bytes[0][GPT2RT_MEM_ACTIVATIONS], p.error);
    /* tokens a step: B*T x grad_accum x devices x processes past 2^63 */
    gpt2rt_config w = tiny_cfg();
    w.max_seq_len = 1 << 20; w.seq_len = 1 << 20; w.batch_size = 1 << 10; w.grad_accum = 1 << 20;
    w.parallel = GPT2RT_PARALLEL_DATA; w.n_devices = 8; w.world_size = 1 << 20; w.rank = 0;
    w.rendezvous = GPT2RT_RENDEZVOUS_FILE;
    snprintf(w.rendezvous_file, sizeof w.rendezvous_file, "%s", TMP "/rdv_never");
    r = gpt2rt_plan(&w, &p);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "world_size = 1048576") && has(p.error, "2^63"),
          "2^73 tokens a step: %s, %lld: %s", gpt2rt_result_string(r), (long long)p.tokens_per_step, p.error);
}

/* a bf16 context: what create and a weights file give it */
static gpt2rt_ctx *bf16_ctx(void) {
    gpt2rt_config c = tiny_cfg();
    c.inference = 1;
    c.inference_weights = GPT2RT_PRECISION_BF16;
    gpt2rt_ctx *ctx = NULL;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("FAIL bf16 create: %s\n", gpt2rt_last_error(ctx)); exit(1); }
    return ctx;
}

/* an fp32 weight that bf16 rounds to infinity is refused like a non-finite one */
static void bf16_overflow(void) {
    gpt2rt_ctx *src = tiny(1), *ctx = bf16_ctx();
    CHECK_OK(src, gpt2rt_weights_save(src, TMP "/w16"));
    size_t wlen;
    unsigned char *w = read_all(TMP "/w16/model.safetensors", &wlen);
    const char *bad = TMP "/w16bad.safetensors", *tn = "transformer.h.1.attn.c_proj.bias";
    CHECK_OK(ctx, gpt2rt_weights_load(ctx, TMP "/w16"));
    float before[16], after[16];
    CHECK_OK(ctx, gpt2rt_param_read(ctx, tn, GPT2RT_PARAM_VALUE, before, 16));
    /* 0x7F7F8000 lies halfway between the largest bf16 (0x7F7F, 3.3895e38) and inf: it
       rounds (to even) to inf; 0x7F7F7FFF, just below, to the largest bf16 */
    uint32_t bits[3] = {0x7F7F8000u, 0xFF7FFFFFu, 0x7F7F7FFFu}; /* 3.3961e38, -3.4028e38 (FLT_MAX), 3.3961e38 - ulp */
    for (int i = 0; i < 3; i++) {
        float x;
        memcpy(&x, &bits[i], 4);
        unsigned char *b = (unsigned char *)malloc(wlen);
        memcpy(b, w, wlen);
        memcpy(b + st_elem(b, tn, 5), &x, 4);
        put(bad, b, wlen);
        gpt2rt_result r = gpt2rt_weights_load(ctx, bad);
        char msg[4096]; /* the load's message: the read below succeeds, which clears it */
        snprintf(msg, sizeof msg, "%s", gpt2rt_last_error(ctx));
        CHECK_OK(ctx, gpt2rt_param_read(ctx, tn, GPT2RT_PARAM_VALUE, after, 16));
        if (i < 2) {
            CHECK(r == GPT2RT_ERR_FORMAT && has(msg, tn) && has(msg, "element 5") && has(msg, "bf16") &&
                  !memcmp(before, after, sizeof before),
                  "a weight of %g in a bf16 context: %s: %s", (double)x, gpt2rt_result_string(r), msg);
            if (i == 0) printf("    %s\n", msg);
        } else
            CHECK(r == GPT2RT_OK && isfinite(after[5]) && after[5] > 3.38e38f,
                  "a weight of %.9g (finite in bf16): %s, stored %g: %s", (double)x, gpt2rt_result_string(r),
                  (double)after[5], gpt2rt_last_error(ctx));
        free(b);
    }
    /* gpt2rt_param_write refuses the same values (naming tensor and element) and keeps
       the weights; the largest value below the tie is written */
    CHECK_OK(ctx, gpt2rt_weights_load(ctx, TMP "/w16"));
    CHECK_OK(ctx, gpt2rt_param_read(ctx, tn, GPT2RT_PARAM_VALUE, before, 16));
    for (int i = 0; i < 3; i++) {
        float x, vals[16];
        memcpy(&x, &bits[i], 4);
        for (int j = 0; j < 16; j++) vals[j] = 0.25f * (float)(j + 1);
        vals[5] = x;
        gpt2rt_result r = gpt2rt_param_write(ctx, tn, vals, 16);
        char msg[4096]; /* the write's message: the read below succeeds, which clears it */
        snprintf(msg, sizeof msg, "%s", gpt2rt_last_error(ctx));
        CHECK_OK(ctx, gpt2rt_param_read(ctx, tn, GPT2RT_PARAM_VALUE, after, 16));
        if (i < 2)
            CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(msg, "gpt2rt_param_write") &&
                  has(msg, tn) && has(msg, "element 5") &&
                  has(msg, "bf16") && !memcmp(before, after, sizeof before),
                  "gpt2rt_param_write of %g into a bf16 context: %s: %s (element 5 now %g)", (double)x,
                  gpt2rt_result_string(r), msg, (double)after[5]);
        else
            CHECK(r == GPT2RT_OK && after[5] == gpt2rt__bf16_widen(gpt2rt__bf16_round(x)) && after[4] == 1.25f,
                  "gpt2rt_param_write of %.9g (finite in bf16): %s, stored %g: %s", (double)x,
                  gpt2rt_result_string(r), (double)after[5], msg);
    }
    free(w);
    gpt2rt_free(src); gpt2rt_free(ctx);
}

/* aLLM4TS: a stage-1 (NEXT_PATCH) state in a stage-2 (PATCH_DECODE) context is refused on
   the head, with the way from stage 1 to stage 2 */
static void stage_state(void) {
    gpt2rt_config c1;
    memset(&c1, 0, sizeof c1);
    c1.input = GPT2RT_INPUT_PATCHES; c1.head = GPT2RT_HEAD_NEXT_PATCH;
    c1.n_layer = 2; c1.n_head = 2; c1.n_embd = 16; c1.max_seq_len = 32;
    c1.batch_size = 2; c1.n_channels = 2; c1.seq_len = 40; c1.patch_len = 8; c1.patch_stride = 8;
    c1.backend = GPT2RT_BACKEND_CPU; c1.n_threads = 1; c1.lr = 1e-3f;
    gpt2rt_config c2 = c1;
    c2.head = GPT2RT_HEAD_PATCH_DECODE; c2.horizon = 4; /* every shape key but horizon as stage 1's */
    gpt2rt_ctx *s1 = NULL, *s2 = NULL;
    CHECK_OK(s1, gpt2rt_create(&s1, &c1));
    CHECK_OK(s2, gpt2rt_create(&s2, &c2));
    const char *path = TMP "/stage1.safetensors";
    CHECK_OK(s1, gpt2rt_state_save(s1, path));
    gpt2rt_result r = gpt2rt_state_load(s2, path);
    const char *e = gpt2rt_last_error(s2);
    CHECK(r == GPT2RT_ERR_FORMAT && has(e, "head = 2 (NEXT_PATCH), this context has 3 (PATCH_DECODE)") &&
          has(e, "gpt2rt_weights_load") && !has(e, "horizon"), "stage-1 state into stage 2: %s", e);
    printf("    %s\n", e);
    gpt2rt_free(s1); gpt2rt_free(s2);
}

/* gpt2rt_logits on a bf16 context names what it can do instead of sending to a call
   it refuses */
static void bf16_logits(void) {
    gpt2rt_ctx *ctx = bf16_ctx();
    float *lg = (float *)malloc(2 * 4 * 32 * sizeof(float));
    gpt2rt_result r = gpt2rt_logits(ctx, lg, 2 * 4 * 32);
    const char *e = gpt2rt_last_error(ctx);
    CHECK(r != GPT2RT_OK && !has(e, "call gpt2rt_forward") && has(e, "bf16") && has(e, "gpt2rt_generate"),
          "gpt2rt_logits on a bf16 context: %s: %s", gpt2rt_result_string(r), e);
    r = gpt2rt_forward(ctx, in_tok, tg_tok, NULL);
    CHECK(r == GPT2RT_ERR_NOT_IMPLEMENTED && has(gpt2rt_last_error(ctx), "gpt2rt_generate"),
          "gpt2rt_forward on a bf16 context: %s", gpt2rt_last_error(ctx));
    free(lg);
    gpt2rt_free(ctx);
}

/* OMP_NUM_THREADS=2000 and n_threads unset: create succeeds with the default clamped */
static int omp_mode(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 1; c.n_head = 1; c.n_embd = 8; c.vocab_size = 16; c.max_seq_len = 4;
    gpt2rt_ctx *ctx = NULL;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    gpt2rt_config got = gpt2rt_config_get(ctx);
#ifdef _OPENMP
    int want = omp_get_max_threads() > 1024 ? 1024 : omp_get_max_threads();
#else
    int want = 1;
#endif
    CHECK(r == GPT2RT_OK && got.n_threads == want, "OMP_NUM_THREADS=%s, n_threads unset: %s (%s), n_threads %d, "
          "want %d", env ? env : "(unset)", gpt2rt_result_string(r), gpt2rt_last_error(ctx), got.n_threads, want);
    if (r == GPT2RT_OK) {
        int32_t in[16], tg[16]; /* B=4, T=4 by default */
        for (int i = 0; i < 16; i++) { in[i] = i; tg[i] = (i + 1) % 16; }
        float loss = 0;
        CHECK_OK(ctx, gpt2rt_forward(ctx, in, tg, &loss));
        CHECK(isfinite(loss), "loss %g", (double)loss);
    }
    printf("    OMP_NUM_THREADS=%s: created with n_threads = %d\n", env ? env : "(unset)", got.n_threads);
    gpt2rt_free(ctx);
    return harness_finish();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "omp")) return omp_mode();
    signal(SIGALRM, on_alarm);
    mkdir("build", 0777);
    mkdir(TMP, 0777);
    for (int i = 0; i < 16; i++) { in_tok[i] = (i * 7 + 3) % 32; tg_tok[i] = (i * 5 + 1) % 32; tg_none[i] = -100; }
    special_files();
    fit_bounded();
    save_rollback();
    nonfinite_files();
    schedule();
    ignored_targets();
    null_buffers();
    config_json();
    config_fields();
    own_messages();
    rendezvous_paths();
    plan_tokens();
    refused_plans();
    zero1_grads();
    plan_overflow();
    bf16_overflow();
    stage_state();
    bf16_logits();
    return harness_finish();
}
