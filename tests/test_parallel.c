/* Data parallel on the CPU backend: ranks as threads of one process.
   - n ranks of b rows == one device of n*b rows, within fp32 reassociation: each rank's
     matrix products sum its own b rows, and the ranks' sums are then added, where one
     device sums all n*b rows in one pass; the gradients agree to ~1e-6 relative (we
     allow 2e-5), the losses of later steps to 1e-4;
   - bitwise the same run to run (the reduction sums in rank order);
   - gradient accumulation, recompute levels and frozen groups under data parallel;
   - ZeRO-1 (shard_optimizer) bitwise equals the unsharded run, with less moment memory;
   - save + resume under data parallel == uninterrupted (bitwise);
   - time series (patch inputs) under data parallel;
   - planned == allocated on every rank; bad configs and bad rows refused by name. */
/* every op splits over the threads whatever its size (by default an op too small to pay
   for a second thread runs on one), so the checks across thread counts below compare
   split work, not one thread's with itself */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 0
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

/* ---- the threads' communicator itself ---- */
typedef struct comm_job {
    gpt2rt__comm *c;
    int fail;  /* 1: this rank fails instead of reducing */
    float buf[40];
    gpt2rt_result r[5];
    char err[256];
} comm_job;

static void *comm_rank(void *p) {
    comm_job *j = (comm_job *)p;
    gpt2rt__comm *c = j->c;
    if (j->fail) { gpt2rt__comm_threads_fail(c); return NULL; }
    /* values whose sum depends on the order: (1 + 1e8) - 1e8 = 0 in fp32, 1 + (1e8 - 1e8) = 1 */
    const float v[3] = {1.0f, 1e8f, -1e8f};
    for (int i = 0; i < 40; i++) j->buf[i] = v[c->rank] * (float)(i + 1);
    j->r[0] = c->all_reduce(c, j->buf, 40);
    float s[40];
    for (int i = 0; i < 40; i++) s[i] = (float)(c->rank + 1);
    j->r[1] = c->reduce_scatter(c, s, 40);
    /* shard rank of s holds 1 + 2 + 3 = 6; make it rank-specific, then gather */
    int64_t lo = gpt2rt__shard_lo(40, c->size, c->rank), hi = gpt2rt__shard_lo(40, c->size, c->rank + 1);
    for (int64_t i = lo; i < hi; i++) s[i] = s[i] * 10.0f + (float)c->rank;
    j->r[2] = c->all_gather(c, s, 40);
    for (int i = 0; i < 40; i++) j->buf[i] += s[i] * 1000.0f; /* 0 + 60000 + 1000 * owner */
    double x = c->rank == 1 ? 42.5 : -1.0;
    j->r[3] = c->broadcast(c, &x, sizeof x, 1);
    if (x != 42.5) j->r[3] = GPT2RT_ERR_FORMAT;
    j->r[4] = c->barrier(c);
    snprintf(j->err, sizeof j->err, "%s", c->err);
    return NULL;
}

static void comm_threads(void) {
    gpt2rt__comm_group g;
    CHECK(gpt2rt__comm_group_init(&g, 3) == 0, "comm group init");
    for (int round = 0; round < 2; round++) { /* round 1: rank 2 fails; the others must return, not hang */
        comm_job jobs[3];
        pthread_t th[3];
        memset(jobs, 0, sizeof jobs);
        for (int r = 0; r < 3; r++) { jobs[r].c = &g.comms[r]; jobs[r].fail = round == 1 && r == 2; }
        for (int r = 0; r < 3; r++) pthread_create(&th[r], NULL, comm_rank, &jobs[r]);
        for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
        gpt2rt__comm_group_reset(&g);
        for (int r = 0; r < 3 && round == 0; r++) {
            int ok = 1;
            for (int k = 0; k < 5; k++) ok &= jobs[r].r[k] == GPT2RT_OK;
            CHECK(ok, "rank %d: a collective failed: %s", r, jobs[r].err);
            int bad = -1;
            for (int i = 0; i < 40 && bad < 0; i++) {
                int owner = i < 16 ? 0 : i < 32 ? 1 : 2; /* shares of 40 over 3, rounded up to 16 floats */
                if (jobs[r].buf[i] != 60000.0f + 1000.0f * (float)owner) bad = i;
            }
            CHECK(bad < 0, "rank %d: element %d is %.9g: not the rank-order sum (1 + 1e8) - 1e8 = 0 plus the gathered "
                  "shard", r, bad, bad < 0 ? 0.0 : (double)jobs[r].buf[bad]);
        }
        for (int r = 0; r < 2 && round == 1; r++)
            CHECK(jobs[r].r[0] == GPT2RT_ERR_STATE && strstr(jobs[r].err, "rank 2 failed"),
                  "rank %d with rank 2 failed: result %d, '%s'", r, (int)jobs[r].r[0], jobs[r].err);
    }
    gpt2rt__comm_group_free(&g);
}

static gpt2rt_config tiny(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 3; c.n_head = 2; c.n_embd = 32; c.vocab_size = 61; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 8;
    c.lr = 1e-2f; c.warmup_steps = 1; c.weight_decay = 0.1f; c.grad_clip = 0.5f; /* clipping active */
    c.seed = 11;
    c.n_threads = 1; /* one core per rank: the ranks run at once, as they would on a laptop */
    return c;
}

static gpt2rt_config dp(gpt2rt_config c, int n) {
    c.parallel = GPT2RT_PARALLEL_DATA;
    c.n_devices = n;
    return c;
}

static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *ctx;
    gpt2rt_result r = gpt2rt_create(&ctx, c);
    if (r != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

/* rows of tokens; every 5th target ignored, so ranks count different targets */
static void tokens(int rows, int T, int V, int seed, int32_t *x, int32_t *y) {
    uint64_t s = (uint64_t)seed * 1000003 + 5;
    for (int i = 0; i < rows * T; i++) {
        x[i] = (int32_t)(harness_rng_next(&s) % (uint64_t)V);
        y[i] = i % 5 == 3 && i < T ? -100 : (int32_t)(harness_rng_next(&s) % (uint64_t)V);
    }
}

/* every weight (Hugging Face layout) of ctx into a fresh buffer */
static float *weights(gpt2rt_ctx *ctx, gpt2rt_param_what what, int64_t *n_out) {
    int64_t n = 0;
    gpt2rt_param_info info;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) { gpt2rt_param_info_get(ctx, i, &info); n += info.numel; }
    float *w = (float *)calloc((size_t)n, sizeof(float));
    int64_t o = 0;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info_get(ctx, i, &info);
        if (what == GPT2RT_PARAM_VALUE || !(gpt2rt_config_get(ctx).frozen & info.group))
            CHECK_OK(ctx, gpt2rt_param_read(ctx, info.name, what, w + o, info.numel));
        o += info.numel;
    }
    *n_out = n;
    return w;
}

static int same_weights(gpt2rt_ctx *a, gpt2rt_ctx *b) {
    int64_t na, nb;
    float *wa = weights(a, GPT2RT_PARAM_VALUE, &na), *wb = weights(b, GPT2RT_PARAM_VALUE, &nb);
    int same = na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0;
    free(wa); free(wb);
    return same;
}

/* k steps of rows per step; losses into loss[] */
static void train(gpt2rt_ctx *ctx, int steps, int rows, int seed0, float *loss) {
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int32_t *x = (int32_t *)malloc((size_t)rows * c.seq_len * 4), *y = (int32_t *)malloc((size_t)rows * c.seq_len * 4);
    for (int s = 0; s < steps; s++) {
        gpt2rt_step_stats st;
        tokens(rows, c.seq_len, c.vocab_size, seed0 + s, x, y);
        CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
        if (loss) loss[s] = st.loss;
        CHECK(st.tokens == (int64_t)rows * c.seq_len, "stats.tokens = %lld, the step had %d rows of %d",
              (long long)st.tokens, rows, c.seq_len);
    }
    free(x); free(y);
}

/* n ranks of b rows against one device of n*b rows: gradients, then losses over steps */
/* drop > 0: dropout at every site; rank r draws the masks of its rows in one device's
   batch, so the equality holds with dropout too */
static void dp_equals_one(int n, int b, int accum, gpt2rt_recompute rc, unsigned frozen, float drop) {
    gpt2rt_config c1 = tiny(), cn;
    c1.batch_size = n * b; c1.grad_accum = accum; c1.recompute = rc; c1.frozen = frozen;
    c1.dropout = c1.attn_dropout = c1.head_dropout = drop;
    cn = dp(c1, n);
    cn.batch_size = b;
    gpt2rt_ctx *one = make(&c1), *par = make(&cn);
    int rows = n * b * accum, T = c1.seq_len;
    int32_t *x = (int32_t *)malloc((size_t)rows * T * 4), *y = (int32_t *)malloc((size_t)rows * T * 4);
    tokens(rows, T, c1.vocab_size, 99, x, y);
    /* the gradients of one accumulated batch, through forward/backward per micro-batch */
    for (int k = 0; k < accum; k++) {
        float l1, ln;
        CHECK_OK(one, gpt2rt_forward(one, x + k * n * b * T, y + k * n * b * T, &l1));
        CHECK_OK(par, gpt2rt_forward(par, x + k * n * b * T, y + k * n * b * T, &ln));
        /* n*b*T <= 64 token losses summed per rank, then across ranks: <= 64 eps32 = 7.6e-6 -> 1e-5 */
        CHECK(fabsf(l1 - ln) <= 1e-5f * fabsf(l1), "n=%d: forward loss %.7g vs one device %.7g", n, (double)ln, (double)l1);
        CHECK_OK(one, gpt2rt_backward(one));
        CHECK_OK(par, gpt2rt_backward(par));
    }
    int64_t ng;
    float *g1 = weights(one, GPT2RT_PARAM_GRAD, &ng), *gn = weights(par, GPT2RT_PARAM_GRAD, &ng);
    double e = rel_err(gn, g1, ng);
    /* each weight's gradient: rows <= 64 x accum regrouped by rank, on the forward's and the
       backward's rounding: eps32 x 64 x 3 = 2.3e-5 -> 2e-5 (measured ~1e-6) */
    CHECK(e < 2e-5, "n=%d b=%d accum=%d recompute=%d frozen=0x%x: gradient rel err %.3g", n, b, accum, (int)rc, frozen, e);
    free(g1); free(gn);
    gpt2rt_step_stats s1, sn;
    CHECK_OK(one, gpt2rt_update(one, &s1));
    CHECK_OK(par, gpt2rt_update(par, &sn));
    /* norm and loss: one regrouped sum over the rows, as the forward loss above (1e-5) */
    CHECK(fabsf(s1.grad_norm - sn.grad_norm) <= 1e-5f * s1.grad_norm && fabsf(s1.loss - sn.loss) <= 1e-5f * s1.loss &&
          s1.tokens == sn.tokens && sn.micro_batches == accum,
          "n=%d: update stats: norm %.7g vs %.7g, loss %.7g vs %.7g, tokens %lld vs %lld, micro %d", n,
          (double)sn.grad_norm, (double)s1.grad_norm, (double)sn.loss, (double)s1.loss, (long long)sn.tokens,
          (long long)s1.tokens, sn.micro_batches);
    float L1[3], Ln[3];
    train(one, 3, rows, 500, L1);
    train(par, 3, rows, 500, Ln);
    double worst = 0;
    for (int s = 0; s < 3; s++) if (fabs((double)L1[s] - Ln[s]) / L1[s] > worst) worst = fabs((double)L1[s] - Ln[s]) / L1[s];
    /* 3 updates carry the gradient bound into the weights, each step's m/sqrt(v) twice:
       3 x 2 x 2e-5 = 1.2e-4 -> 1e-4 */
    CHECK(worst < 1e-4, "n=%d accum=%d: losses of later steps differ by %.3g relative", n, accum, worst);
    printf("    %d ranks x %d rows, accum %d, recompute %d, frozen 0x%x, dropout %g: gradient rel err %.2g, "
           "loss rel diff %.2g\n", n, b, accum, (int)rc, frozen, (double)drop, e, worst);
    free(x); free(y);
    gpt2rt_free(one); gpt2rt_free(par);
}

/* the same data parallel run twice, and with other knobs that must not change a bit */

/* ZeRO-1 over n ranks (unequal: whose trained floats are NOT n equal shards of whole
   16-float blocks, checked here, so the case stays unequal): the gradient is padded to n equal
   shards (1.4), every reduce-scatter the threads communicator ran had equal shards
   (none fell back to unequal ones: an NCCL build would have had to all-reduce them),
   the padding is still zero on every rank after the steps, and the plan prints what it
   costs: n * ceil16(ceil(n_train / n)) - n_train floats, derived here from n_train */
static void zero1_equal_shards(gpt2rt_ctx *x, int n, int steps, int unequal) {
    int64_t nt = x->n_train, per = (nt + n - 1) / n;
    per = (per + 15) / 16 * 16;
    int64_t pad = per * n - nt;
    CHECK(!unequal || (nt % (16 * n) != 0 && pad > 0), "ZeRO-1 over %d ranks: %lld trained floats split equally; the case meant "
          "unequal shards", n, (long long)nt);
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)x->group;
    CHECK(g && g->n_scatter >= steps && g->n_scatter_unequal == 0, "ZeRO-1 over %d ranks, %lld trained floats: %lld "
          "reduce-scatters (want >= %d), %lld of them over unequal shards", n, (long long)nt,
          (long long)(g ? g->n_scatter : -1), steps, (long long)(g ? g->n_scatter_unequal : -1));
    int nonzero = 0;
    for (int r = 0; r < n; r++) {
        const gpt2rt_ctx *rc = r ? x->ranks[r] : x;
        CHECK(rc->arena_bytes[GPT2RT_MEM_GRADS] == (uint64_t)(per * n) * 4, "rank %d: gradient arena %llu bytes, "
              "want %lld equal shards of %lld floats", r, (unsigned long long)rc->arena_bytes[GPT2RT_MEM_GRADS],
              (long long)n, (long long)per);
        for (int64_t i = nt; i < per * n; i++) nonzero += rc->grads[i] != 0.0f;
    }
    CHECK(nonzero == 0, "ZeRO-1: %d padding floats of the gradients are not zero", nonzero);
    gpt2rt_memory_plan p;
    char buf[4096], want[96];
    CHECK_OK(x, gpt2rt_plan_allocated(x, &p));
    gpt2rt_plan_format(&p, buf, sizeof buf);
    snprintf(want, sizeof want, "ZeRO-1 padding: %lld floats, %.2f KiB a device", (long long)pad, pad * 4 / 1024.0);
    CHECK(strstr(buf, want) != NULL, "the plan does not say \"%s\":\n%s", want, buf);
    printf("    ZeRO-1 over %d ranks, %lld trained floats (%s multiple of %d): %lld reduce-scatters, all over %d "
           "equal shards of %lld; %s\n", n, (long long)nt, nt % (16 * n) ? "not a" : "a", 16 * n,
           (long long)g->n_scatter, n, (long long)per, want);
}
static void bitwise(void) {
    gpt2rt_config c = dp(tiny(), 2);
    c.grad_accum = 2;
    gpt2rt_config variants[5];
    const char *names[5] = {"again", "recompute SELECTIVE", "recompute FULL (every layer)", "ZeRO-1 sharded",
                            "n_threads = 4 (2 per rank)"};
    for (int i = 0; i < 5; i++) variants[i] = c;
    variants[4].n_threads = 4;
    variants[1].recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    variants[2].recompute = GPT2RT_RECOMPUTE_FULL; variants[2].checkpoint_every = 1;
    variants[3].shard_optimizer = 1;
    gpt2rt_ctx *ref = make(&c);
    train(ref, 3, 2 * 2 * 2, 7, NULL);
    for (int i = 0; i < 5; i++) {
        gpt2rt_ctx *x = make(&variants[i]);
        train(x, 3, 2 * 2 * 2, 7, NULL);
        CHECK(same_weights(ref, x), "data parallel, %s: weights differ from the first run", names[i]);
        gpt2rt_free(x);
    }
    gpt2rt_free(ref);
    /* three ranks, sharded vs not, frozen groups: the shards' edges fall inside tensors */
    for (int fz = 0; fz < 2; fz++) {
        gpt2rt_config a = dp(tiny(), 3), b;
        a.batch_size = 1;
        a.frozen = fz ? GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_POS_EMBED : 0;
        b = a; b.shard_optimizer = 1;
        gpt2rt_ctx *xa = make(&a), *xb = make(&b);
        train(xa, 3, 3, 3, NULL);
        train(xb, 3, 3, 3, NULL);
        CHECK(same_weights(xa, xb), "3 ranks, frozen 0x%x: ZeRO-1 weights differ from unsharded", a.frozen);
        zero1_equal_shards(xb, 3, 3, fz); /* frozen: 29600 trained floats, not 3 x 16k; else 42528 = 48 x 886 */
        gpt2rt_free(xa); gpt2rt_free(xb);
    }
}

/* planned == allocated on every rank; ZeRO-1 keeps 1/n of the moments */
static void memory(void) {
    gpt2rt_config c = dp(tiny(), 3), z;
    z = c; z.shard_optimizer = 1;
    gpt2rt_memory_plan pc, pz, ac, az;
    CHECK(gpt2rt_plan(&c, &pc) == GPT2RT_OK && gpt2rt_plan(&z, &pz) == GPT2RT_OK, "plan: %s %s", pc.error, pz.error);
    gpt2rt_ctx *xc = make(&c), *xz = make(&z);
    CHECK_OK(xc, gpt2rt_plan_allocated(xc, &ac));
    CHECK_OK(xz, gpt2rt_plan_allocated(xz, &az));
    CHECK(ac.n_devices == 3 && az.n_devices == 3, "allocated plans over %d and %d devices", ac.n_devices, az.n_devices);
    for (int dev = 0; dev < 3; dev++) {
        CHECK(ac.total[dev] == pc.total[dev] && az.total[dev] == pz.total[dev],
              "device %d: planned %llu / %llu, allocated %llu / %llu", dev, (unsigned long long)pc.total[dev],
              (unsigned long long)pz.total[dev], (unsigned long long)ac.total[dev], (unsigned long long)az.total[dev]);
        uint64_t m = pc.bytes[dev][GPT2RT_MEM_MOMENTS], mz = pz.bytes[dev][GPT2RT_MEM_MOMENTS];
        /* one third, rounded up to 16 floats */
        CHECK(mz < m / 3 + 2 * 16 * 4 + 1 && mz >= m / 3, "device %d: sharded moments %llu bytes, unsharded %llu", dev,
              (unsigned long long)mz, (unsigned long long)m);
    }
    char buf[4096];
    gpt2rt_plan_format(&pz, buf, sizeof buf);
    CHECK(strstr(buf, "ZeRO-1") != NULL, "the plan table does not mention the sharded optimizer:\n%s", buf);
    gpt2rt_free(xc); gpt2rt_free(xz);
}

/* save after 2 steps, 2 more; load into a fresh context, the same 2: bitwise */
static void resume(void) {
    gpt2rt_config c = dp(tiny(), 2);
    char path[] = "build/test_parallel_state.safetensors";
    gpt2rt_ctx *a = make(&c), *b = make(&c);
    train(a, 2, 4, 40, NULL);
    CHECK_OK(a, gpt2rt_state_save(a, path));
    train(a, 2, 4, 42, NULL);
    CHECK_OK(b, gpt2rt_state_load(b, path));
    train(b, 2, 4, 42, NULL);
    CHECK(same_weights(a, b), "data parallel: save + resume differs from the uninterrupted run");
    /* ZeRO-1: the state file holds the moments whole, gathered from the ranks; resuming
       with or without sharding continues bitwise alike, and the moments read the same */
    gpt2rt_config z = c;
    z.shard_optimizer = 1;
    gpt2rt_ctx *za = make(&z), *zb = make(&z), *u = make(&c);
    train(za, 2, 4, 40, NULL);
    CHECK_OK(za, gpt2rt_state_save(za, path));
    train(za, 2, 4, 42, NULL);
    CHECK_OK(zb, gpt2rt_state_load(zb, path));
    CHECK_OK(u, gpt2rt_state_load(u, path));
    train(zb, 2, 4, 42, NULL);
    train(u, 2, 4, 42, NULL);
    CHECK(same_weights(za, zb) && same_weights(za, u) && same_weights(za, a),
          "ZeRO-1: save + resume (sharded, unsharded) differs from the uninterrupted run");
    int64_t n1, n2;
    for (int w = 0; w < 2; w++) {
        gpt2rt_param_what what = w ? GPT2RT_PARAM_ADAM_V : GPT2RT_PARAM_ADAM_M;
        float *m1 = weights(za, what, &n1), *m2 = weights(a, what, &n2);
        CHECK(n1 == n2 && memcmp(m1, m2, (size_t)n1 * 4) == 0, "ZeRO-1: %s read differs from unsharded",
              w ? "adam_v" : "adam_m");
        free(m1); free(m2);
    }
    remove(path);
    /* Hugging Face weights into running contexts: every rank gets them and restarts its
       optimizer (rank 1's stale moments would show in the next step) */
    CHECK_OK(a, gpt2rt_weights_save(a, "build/test_parallel_weights"));
    gpt2rt_config one = tiny();
    one.batch_size = 4;
    gpt2rt_ctx *o = make(&one);
    CHECK_OK(o, gpt2rt_weights_load(o, "build/test_parallel_weights"));
    CHECK_OK(za, gpt2rt_weights_load(za, "build/test_parallel_weights"));
    CHECK_OK(u, gpt2rt_weights_load(u, "build/test_parallel_weights"));
    train(o, 1, 4, 60, NULL);
    train(za, 1, 4, 60, NULL);
    train(u, 1, 4, 60, NULL);
    int64_t nw;
    float *w1 = weights(o, GPT2RT_PARAM_VALUE, &nw), *w2 = weights(u, GPT2RT_PARAM_VALUE, &nw);
    /* one device vs ranks after an update: the gradient bound twice (m, sqrt(v)) and
       margin, 1e-4, as the later losses above */
    CHECK(same_weights(za, u) && rel_err(w2, w1, nw) < 1e-4, "after a weights load: sharded %s unsharded, "
          "one device rel err %.3g", same_weights(za, u) ? "==" : "!=", rel_err(w2, w1, nw));
    free(w1); free(w2);
    gpt2rt_free(o);
    gpt2rt_free(za); gpt2rt_free(zb); gpt2rt_free(u);
    gpt2rt_free(a); gpt2rt_free(b);
}

/* patch inputs (time series): 2 ranks of 2 windows == one device of 4 */
static void series(void) {
    gpt2rt_config c1 = tiny(), c2;
    c1.input = GPT2RT_INPUT_PATCHES; c1.head = GPT2RT_HEAD_REGRESSION;
    c1.seq_len = 24; c1.patch_len = 8; c1.patch_stride = 4; c1.n_channels = 2; c1.horizon = 6; c1.max_seq_len = 8;
    c1.batch_size = 4;
    c2 = dp(c1, 2); c2.batch_size = 2;
    gpt2rt_ctx *one = make(&c1), *par = make(&c2);
    int nx = 4 * 24 * 2, ny = 4 * 6 * 2;
    float x[4 * 24 * 2], y[4 * 6 * 2];
    uint64_t s = 3;
    float L1 = 0, L2 = 0;
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < nx; i++) x[i] = (float)sin(0.3 * i) + (float)harness_rng_uniform(&s);
        for (int i = 0; i < ny; i++) y[i] = (float)harness_rng_uniform(&s);
        gpt2rt_step_stats a, b;
        CHECK_OK(one, gpt2rt_step_series(one, x, y, &a));
        CHECK_OK(par, gpt2rt_step_series(par, x, y, &b));
        L1 = a.loss; L2 = b.loss;
    }
    /* 3 steps, as the token losses above: 3 x 2 x 2e-5 -> 1e-4 */
    CHECK(fabsf(L1 - L2) <= 1e-4f * L1, "series: loss %.7g with 2 ranks, %.7g on one device", (double)L2, (double)L1);
    float p1[4 * 6 * 2], p2[4 * 6 * 2];
    CHECK_OK(one, gpt2rt_forward_series(one, x, NULL, NULL));
    CHECK_OK(par, gpt2rt_forward_series(par, x, NULL, NULL));
    CHECK_OK(one, gpt2rt_predictions(one, p1, ny));
    CHECK_OK(par, gpt2rt_predictions(par, p2, ny));
    CHECK(rel_err(p2, p1, ny) < 1e-4, "series: predictions rel err %.3g", rel_err(p2, p1, ny));
    gpt2rt_free(one); gpt2rt_free(par);
}

/* the advisor: ZeRO-1 makes data parallel of GPT-2 1558M (B=1, T=1024, fp32) fit two
   24 GiB cards: 29.0 GiB a device without, 23.2 GiB with (moments halved) */
static void advisor(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 48; c.n_head = 25; c.n_embd = 1600; c.batch_size = 1; c.seq_len = 1024;
    c.backend = GPT2RT_BACKEND_CUDA; c.parallel = GPT2RT_PARALLEL_DATA; c.n_devices = 2;
    uint64_t budget = (uint64_t)24 << 30;
    gpt2rt_config out;
    char why[2048];
    gpt2rt_result r = gpt2rt_fit(&c, budget, GPT2RT_FIT_BATCH, &out, why, sizeof why);
    CHECK(r == GPT2RT_ERR_OUT_OF_MEMORY, "1558M data parallel fitted 24 GiB without sharding: %s", why);
    r = gpt2rt_fit(&c, budget, GPT2RT_FIT_BATCH | GPT2RT_FIT_SHARD, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && out.shard_optimizer == 1 && out.parallel == GPT2RT_PARALLEL_DATA && strstr(why, "ZeRO-1"),
          "1558M with FIT_SHARD: %s, shard_optimizer %d:\n%s", gpt2rt_result_string(r), out.shard_optimizer, why);
    printf("    advisor, 1558M data parallel on 2 x 24 GiB:\n%s", why);
}

/* ---- layer split: the layers in stages, one thread each, micro-batches pipelined ---- */

static gpt2rt_config ls_cfg(gpt2rt_config c, int n) {
    c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    c.n_devices = n;
    return c;
}

static int same_read(gpt2rt_ctx *a, gpt2rt_ctx *b, gpt2rt_param_what what) {
    int64_t na, nb;
    float *wa = weights(a, what, &na), *wb = weights(b, what, &nb);
    int same = na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0;
    free(wa); free(wb);
    return same;
}

static void ls_equals_one_at(int n, int layers, int f1, int f2, int accum, gpt2rt_recompute rc, int ck,
                             unsigned frozen, int threads);

/* n stages == one device with the same config, bitwise: the losses and gradient norms
   of every step, the weights and Adam's moments after 3 steps; run to run too */
static void ls_equals_one(int n, int accum, gpt2rt_recompute rc, int ck, unsigned frozen, int threads) {
    ls_equals_one_at(n, 3, 0, 0, accum, rc, ck, frozen, threads);
}

/* the same with `layers` layers and the stages' first layers given (f1, f2; 0: the planner's) */
static void ls_equals_one_at(int n, int layers, int f1, int f2, int accum, gpt2rt_recompute rc, int ck,
                             unsigned frozen, int threads) {
    gpt2rt_config c1 = tiny(), cn;
    c1.n_layer = layers;
    c1.grad_accum = accum; c1.recompute = rc; c1.frozen = frozen; c1.n_threads = threads; c1.checkpoint_every = ck;
    cn = ls_cfg(c1, n);
    cn.stage_first_layer[1] = f1; cn.stage_first_layer[2] = f2;
    gpt2rt_ctx *one = make(&c1), *par = make(&cn), *again = make(&cn);
    int rows = c1.batch_size * accum, T = c1.seq_len;
    int32_t *x = (int32_t *)malloc((size_t)rows * T * 4), *y = (int32_t *)malloc((size_t)rows * T * 4);
    int bad = -1;
    for (int s = 0; s < 3; s++) {
        gpt2rt_step_stats a, b, e;
        tokens(rows, T, c1.vocab_size, 300 + s, x, y);
        CHECK_OK(one, gpt2rt_step(one, x, y, &a));
        CHECK_OK(par, gpt2rt_step(par, x, y, &b));
        CHECK_OK(again, gpt2rt_step(again, x, y, &e));
        if (bad < 0 && (a.loss != b.loss || a.grad_norm != b.grad_norm || b.loss != e.loss ||
                        b.micro_batches != accum || b.tokens != a.tokens)) {
            bad = s;
            printf("    step %d: loss %.9g / %.9g / %.9g, norm %.9g / %.9g, micro %d\n", s, (double)a.loss,
                   (double)b.loss, (double)e.loss, (double)a.grad_norm, (double)b.grad_norm, b.micro_batches);
        }
    }
    CHECK(bad < 0, "layer split %d stages, accum %d, recompute %d, frozen 0x%x: step %d's loss or norm differs from "
          "one device (or from the same run again)", n, accum, (int)rc, frozen, bad);
    CHECK(same_weights(one, par) && same_weights(par, again) && same_read(one, par, GPT2RT_PARAM_ADAM_M) &&
          same_read(one, par, GPT2RT_PARAM_ADAM_V),
          "layer split %d stages, accum %d, recompute %d, frozen 0x%x: weights or moments differ from one device "
          "(or run to run)", n, accum, (int)rc, frozen);
    /* forward / backward / update called one by one (one micro-batch in flight) */
    tokens(c1.batch_size, T, c1.vocab_size, 77, x, y);
    float l1, ln;
    CHECK_OK(one, gpt2rt_forward(one, x, y, &l1));
    CHECK_OK(par, gpt2rt_forward(par, x, y, &ln));
    CHECK_OK(one, gpt2rt_backward(one));
    CHECK_OK(par, gpt2rt_backward(par));
    CHECK(l1 == ln && same_read(one, par, GPT2RT_PARAM_GRAD), "layer split: forward/backward differ from one device");
    for (int k = 1; k < accum; k++) { /* the rest of the accumulation, then the update */
        CHECK_OK(one, gpt2rt_forward(one, x, y, NULL)); CHECK_OK(one, gpt2rt_backward(one));
        CHECK_OK(par, gpt2rt_forward(par, x, y, NULL)); CHECK_OK(par, gpt2rt_backward(par));
    }
    CHECK_OK(one, gpt2rt_update(one, NULL));
    CHECK_OK(par, gpt2rt_update(par, NULL));
    tokens(rows, T, c1.vocab_size, 400, x, y);
    CHECK_OK(one, gpt2rt_step(one, x, y, NULL));
    CHECK_OK(par, gpt2rt_step(par, x, y, NULL));
    CHECK(same_weights(one, par), "layer split: a step after separate calls differs from one device");
    char fmt[2048], want[64];
    gpt2rt_memory_plan pn;
    CHECK(gpt2rt_plan(&cn, &pn) == GPT2RT_OK, "plan: %s", pn.error);
    gpt2rt_plan_format(&pn, fmt, sizeof fmt);
    if (f1) { /* the stages given are the stages run */
        snprintf(want, sizeof want, "0: layers 0..%d, 1: layers %d..", f1 - 1, f1);
        CHECK(strstr(fmt, "stages (stage_first_layer)") && strstr(fmt, want), "plan shows %s: %s", want, fmt);
    }
    printf("    layer split, %d stages (%s), %d layers, accum %d, recompute %d (ck %d), frozen 0x%x, n_threads %d: "
           "bitwise one device\n", n, f1 ? "given" : "planner's", layers, accum, (int)rc, ck, frozen, threads);
    free(x); free(y);
    gpt2rt_free(one); gpt2rt_free(par); gpt2rt_free(again);
}

/* patch inputs with RevIN's affine (its gradient, like wte's, gets parts from the first
   and the last stage) */
static void ls_series(int n, int accum) {
    gpt2rt_config c1 = tiny(), cn;
    c1.input = GPT2RT_INPUT_PATCHES; c1.head = GPT2RT_HEAD_REGRESSION;
    c1.seq_len = 24; c1.patch_len = 8; c1.patch_stride = 4; c1.n_channels = 2; c1.horizon = 6; c1.max_seq_len = 8;
    c1.batch_size = 2; c1.grad_accum = accum; c1.revin_affine = 1;
    cn = ls_cfg(c1, n);
    gpt2rt_ctx *one = make(&c1), *par = make(&cn);
    int nx = 2 * accum * 24 * 2, ny = 2 * accum * 6 * 2;
    float *x = (float *)malloc((size_t)nx * 4), *y = (float *)malloc((size_t)ny * 4);
    uint64_t s = 5;
    int same = 1;
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < nx; i++) x[i] = (float)sin(0.3 * i) + (float)harness_rng_uniform(&s);
        for (int i = 0; i < ny; i++) y[i] = (float)harness_rng_uniform(&s);
        gpt2rt_step_stats a, b;
        CHECK_OK(one, gpt2rt_step_series(one, x, y, &a));
        CHECK_OK(par, gpt2rt_step_series(par, x, y, &b));
        same &= a.loss == b.loss && a.grad_norm == b.grad_norm;
    }
    CHECK(same && same_weights(one, par), "series, layer split %d stages, accum %d: differs from one device", n, accum);
    printf("    layer split, series (RevIN affine), %d stages, accum %d: bitwise one device\n", n, accum);
    free(x); free(y);
    gpt2rt_free(one); gpt2rt_free(par);
}

/* the stages given are the stages planned: per-device weights follow the layers each
   holds, the planner's FULL split starts each stage at a checkpoint, and the advisor
   keeps given stages under layer split. Planned for CUDA, whose stages hold their own
   spans (on the CPU they share the host: device 0's column holds the whole model) */
static void ls_stages_plan(void) {
    gpt2rt_config c = ls_cfg(tiny(), 2);
    c.backend = GPT2RT_BACKEND_CUDA;
    gpt2rt_memory_plan a, b;
    c.n_layer = 5;
    c.stage_first_layer[1] = 4;
    CHECK(gpt2rt_plan(&c, &a) == GPT2RT_OK, "plan: %s", a.error);
    c.stage_first_layer[1] = 1;
    CHECK(gpt2rt_plan(&c, &b) == GPT2RT_OK, "plan: %s", b.error);
    uint64_t layer = (uint64_t)(12 * 32 * 32 + 13 * 32) * 4; /* one layer's fp32 weights, C = 32 */
    /* CUDA aligns each tensor to 256 bytes: each of the 3 layers' 12 tensors adds under 256 */
    uint64_t d0 = a.bytes[0][GPT2RT_MEM_WEIGHTS] - b.bytes[0][GPT2RT_MEM_WEIGHTS];
    uint64_t d1 = b.bytes[1][GPT2RT_MEM_WEIGHTS] - a.bytes[1][GPT2RT_MEM_WEIGHTS];
    CHECK(d0 >= 3 * layer && d0 < 3 * layer + 3 * 12 * 256 && d1 >= 3 * layer && d1 < 3 * layer + 3 * 12 * 256,
          "stages [0,4),[4,5) vs [0,1),[1,5): device weights %llu/%llu vs %llu/%llu, 3 layers = %llu bytes",
          (unsigned long long)a.bytes[0][GPT2RT_MEM_WEIGHTS], (unsigned long long)a.bytes[1][GPT2RT_MEM_WEIGHTS],
          (unsigned long long)b.bytes[0][GPT2RT_MEM_WEIGHTS], (unsigned long long)b.bytes[1][GPT2RT_MEM_WEIGHTS],
          (unsigned long long)(3 * layer));
    char fmt[2048];
    c.stage_first_layer[1] = 0; c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 2;
    CHECK(gpt2rt_plan(&c, &a) == GPT2RT_OK, "plan: %s", a.error);
    gpt2rt_plan_format(&a, fmt, sizeof fmt);
    /* the balanced split of FULL's segments: [0,4),[4,5) would load device 0 with 4 layers */
    CHECK(strstr(fmt, "stages (the planner's split): 0: layers 0..1, 1: layers 2..4"), "planner's FULL split: %s", fmt);
    /* the advisor: a budget everything fits keeps the given stages */
    gpt2rt_config out;
    c = ls_cfg(tiny(), 2); c.n_layer = 5; c.stage_first_layer[1] = 3;
    CHECK(gpt2rt_fit(&c, (uint64_t)1 << 40, GPT2RT_FIT_BATCH | GPT2RT_FIT_RECOMPUTE, &out, fmt, sizeof fmt) ==
          GPT2RT_OK && out.parallel == GPT2RT_PARALLEL_LAYER_SPLIT && out.stage_first_layer[1] == 3,
          "advisor with given stages: %s", fmt);
    /* allowed to switch to data parallel, its answer plans (no stages left over) */
    CHECK(gpt2rt_fit(&c, (uint64_t)1 << 40, GPT2RT_FIT_DEFAULT, &out, fmt, sizeof fmt) == GPT2RT_OK &&
          gpt2rt_plan(&out, &a) == GPT2RT_OK && (out.parallel == GPT2RT_PARALLEL_LAYER_SPLIT ||
          out.stage_first_layer[1] == 0), "advisor from given stages: %s / %s", fmt, a.error);
}

/* the largest per-device planned total, and the planned first layer of stage 1 */
static uint64_t plan_max(const gpt2rt_config *c, int64_t *first1) {
    gpt2rt_memory_plan p;
    uint64_t m = 0;
    if (gpt2rt_plan(c, &p) != GPT2RT_OK) return UINT64_MAX;
    for (int dev = 0; dev < p.n_devices; dev++) m = p.total[dev] > m ? p.total[dev] : m;
    if (first1) *first1 = gpt2rt__span_of(&p.config, 1).l0;
    return m;
}

/* The planner's layer split balances the plan: GPT-2 124M (V 50257, B 8, T 1024) over 2
   devices, the embedding on the first and the logits (1.5 GiB) on the second. Its largest
   per-device total is no more than that of any boundary given in stage_first_layer and
   below the even split's; under FULL recompute its boundary is a multiple of
   checkpoint_every. Over 3 devices against every pair of boundaries. Planned for CUDA,
   where each stage holds its span (CPU stages share the host's one context). */
static void ls_balanced(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA;
    c.n_layer = 12; c.n_head = 12; c.n_embd = 768; c.vocab_size = 50257; c.max_seq_len = 1024;
    c.batch_size = 8; c.seq_len = 1024;
    c = ls_cfg(c, 2);
    int cks[] = {1, 2, 5};
    for (int k = 0; k < 3; k++) {
        gpt2rt_config g = c;
        int ck = cks[k], worse = 0, bad_even = 0;
        if (ck > 1) { g.recompute = GPT2RT_RECOMPUTE_FULL; g.checkpoint_every = ck; }
        int64_t b = 0, segs = (12 + ck - 1) / ck, even = (segs - segs / 2) * ck; /* earlier stage: the remainder */
        uint64_t m = plan_max(&g, &b), m_even = 0;
        CHECK(m != UINT64_MAX && b >= 1 && b <= 11 && b % ck == 0,
              "checkpoint_every %d: the planner's boundary %lld is not a checkpoint in [1, 11]", ck, (long long)b);
        for (int l = ck; l < 12; l += ck) {
            g.stage_first_layer[1] = l;
            uint64_t t = plan_max(&g, NULL);
            if (t < m) worse++;
            if (l == even) m_even = t;
            if (l == b && t != m) bad_even++;
        }
        CHECK(!worse && !bad_even, "checkpoint_every %d: %d given boundaries beat the planner's %lld (%llu bytes)", ck,
              worse, (long long)b, (unsigned long long)m);
        CHECK(ck == 5 || m < m_even, "checkpoint_every %d: the planner's %lld (%llu bytes) is no better than the even "
              "split at %lld (%llu)", ck, (long long)b, (unsigned long long)m, (long long)even, (unsigned long long)m_even);
        printf("    124M over 2 devices, checkpoint every %d: planner's boundary %lld, largest device %.2f MiB "
               "(even split at %lld: %.2f MiB)\n", ck, (long long)b, m / 1048576.0, (long long)even, m_even / 1048576.0);
    }
    gpt2rt_config g = ls_cfg(c, 3);
    int64_t b1;
    uint64_t m = plan_max(&g, &b1), best = UINT64_MAX;
    for (int l1 = 1; l1 < 11; l1++)
        for (int l2 = l1 + 1; l2 < 12; l2++) {
            g.stage_first_layer[1] = l1; g.stage_first_layer[2] = l2;
            uint64_t t = plan_max(&g, NULL);
            best = t < best ? t : best;
        }
    CHECK(m == best, "3 devices: the planner's largest device %llu bytes, the best given boundaries %llu",
          (unsigned long long)m, (unsigned long long)best);
}

/* The parameters a layer-split device holds (gpt2rt__span_params), for the CUDA layout
   (256-byte alignment, bf16 weights) where C = 32 leaves tensors off the alignment: each
   held tensor sits at an offset congruent to its one-device offset, none overlap, the
   gaps are below the alignment, the whole span is the one-device table, and a stage's
   first layer reads its input from x0. */
static void ls_span_tables(void) {
    gpt2rt_config c = ls_cfg(tiny(), 3);
    gpt2rt_config r;
    char err[512];
    c.n_layer = 5; c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16;
    c.frozen = GPT2RT_GROUP_ATTENTION; c.stage_first_layer[1] = 1; c.stage_first_layer[2] = 3;
    CHECK(gpt2rt__cfg_resolve(&c, &r, err, sizeof err) == GPT2RT_OK, "resolve: %s", err);
    gpt2rt__dims d = gpt2rt__dims_of(&r);
    int n = gpt2rt__param_table(&d, NULL, NULL, NULL), bad = 0;
    int64_t nf, nt, aw = d.align / d.weight_bytes, ag = d.align / 4;
    gpt2rt__tensor *g = (gpt2rt__tensor *)malloc((size_t)n * sizeof *g), *t = (gpt2rt__tensor *)malloc((size_t)n * sizeof *t);
    gpt2rt__param_table(&d, g, &nf, &nt);
    gpt2rt__span whole = {0, 5, 1, 1};
    gpt2rt__span_params(&d, &whole, t, NULL, NULL);
    for (int i = 0; i < n; i++) bad += t[i].off != g[i].off || t[i].goff != g[i].goff || t[i].rows != g[i].rows;
    CHECK(bad == 0, "the whole span's table differs from the one-device table in %d tensors", bad);
    int64_t held_sum = 0;
    for (int s = 0; s < 3; s++) {
        gpt2rt__span sp = gpt2rt__span_of(&r, s);
        int64_t f, tr, end = 0, gend = 0, size = 0, gaps = 0;
        gpt2rt__span_params(&d, &sp, t, &f, &tr);
        for (int i = 0; i < n; i++) {
            if (!t[i].rows) continue;
            int64_t e = t[i].rows * t[i].cols;
            size += e;
            gaps += t[i].off - end;
            bad += t[i].off < end || (t[i].off - g[i].off) % aw != 0 || t[i].off - end >= aw;
            end = t[i].off + e;
            if (t[i].goff >= 0) {
                bad += t[i].goff < gend || (t[i].goff - g[i].goff) % ag != 0 || g[i].goff < 0;
                gend = t[i].goff + e;
            }
            int in = g[i].layer >= 0 ? g[i].layer >= sp.l0 && g[i].layer < sp.l1 : 1;
            bad += !in;
        }
        bad += end != f || gend != tr || (s == 0 && t[0].goff != -1) || (s == 2 && t[0].goff != 0);
        held_sum += size;
        uint64_t b[GPT2RT_MEM_COUNT];
        gpt2rt__layout(&d, &sp, b, NULL);
        bad += b[GPT2RT_MEM_WEIGHTS] != (uint64_t)(f * d.weight_bytes) || b[GPT2RT_MEM_GRADS] != (uint64_t)(tr * 4);
        printf("    span [%lld,%lld): %lld weights (%lld in gaps), %lld trained\n", (long long)sp.l0, (long long)sp.l1,
               (long long)f, (long long)gaps, (long long)tr);
        /* a stage context's first layer input is its x0, its layers' blocks its own */
        gpt2rt_ctx *x = (gpt2rt_ctx *)calloc(1, sizeof *x);
        x->d = d;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) x->arena[i] = b[i] ? malloc((size_t)b[i]) : NULL;
        gpt2rt__layout(&d, &sp, b, x);
        unsigned char *a0 = (unsigned char *)x->arena[GPT2RT_MEM_ACTIVATIONS];
        bad += gpt2rt__model_layer_input(x, sp.l0) != x->x0 || (unsigned char *)gpt2rt__lacts(x, sp.l1 - 1).res3 +
               gpt2rt__ald(&d, d.BT * d.C * d.act_bytes) > a0 + b[GPT2RT_MEM_ACTIVATIONS] || gpt2rt__lacts(x, sp.l0).ln1_mean <
               (float *)(void *)a0;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) free(x->arena[i]);
        free(x);
    }
    CHECK(bad == 0, "stage tables: %d offsets off their one-device alignment, overlapping, or beyond the layout", bad);
    CHECK(held_sum == nf + d.Vp * d.C, "the stages hold %lld floats, the model %lld plus wte's copy %lld",
          (long long)held_sum, (long long)nf, (long long)(d.Vp * d.C));
    free(g); free(t);
}

/* gpt2rt_plan of a CPU layer split equals what gpt2rt_create allocated, per device and
   category: GPipe's micro-batches in flight are activation sets on device 0 (the stages
   share the host), a stage thread's scratch on device s. Over grad_accum 1..3, 2 and 3
   stages, recompute none and selective, so a plan that counted one set (or put the sets
   on each stage's column) fails here. */
static void ls_plan_equals_allocated(void) {
    int bad = 0, cases = 0;
    for (int m = 1; m <= 3; m++)
        for (int n = 2; n <= 3; n++)
            for (int rc = 0; rc < 2; rc++) {
                gpt2rt_config c = tiny();
                c.grad_accum = m;
                c.recompute = rc ? GPT2RT_RECOMPUTE_SELECTIVE : GPT2RT_RECOMPUTE_NONE;
                c = ls_cfg(c, n);
                gpt2rt_memory_plan p, a;
                CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK, "plan: %s", p.error);
                gpt2rt_ctx *x = make(&c);
                CHECK_OK(x, gpt2rt_plan_allocated(x, &a));
                cases++;
                bad += a.n_devices != p.n_devices;
                for (int dv = 0; dv < n; dv++) {
                    for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
                        if (a.bytes[dv][i] != p.bytes[dv][i]) {
                            printf("    accum %d, %d stages, recompute %d, device %d %s: planned %llu, allocated "
                                   "%llu\n", m, n, rc, dv, gpt2rt_mem_name((gpt2rt_mem)i),
                                   (unsigned long long)p.bytes[dv][i], (unsigned long long)a.bytes[dv][i]);
                            bad++;
                        }
                    bad += a.total[dv] != p.total[dv];
                }
                gpt2rt_free(x);
            }
    CHECK(bad == 0 && cases == 12, "CPU layer split, accum 1..3 x 2..3 stages x recompute: %d of the plan's "
          "figures differ from what was allocated", bad);
    /* CUDA (8.7 allocates grad_accum - 1 further sets of each stage's span, checked on the GPU
       by kernels/layer_split.cu): planned with fixed stages, a stage's activations are m times
       accumulation 1's, every other category the same, in its own column */
    bad = 0;
    for (int m = 2; m <= 3; m++) {
        gpt2rt_config c = ls_cfg(tiny(), 2), c1;
        c.backend = GPT2RT_BACKEND_CUDA;
        c.stage_first_layer[1] = 2;
        c1 = c;
        c.grad_accum = m;
        gpt2rt_memory_plan p, p1;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && gpt2rt_plan(&c1, &p1) == GPT2RT_OK, "CUDA plan: %s %s", p.error,
              p1.error);
        for (int dv = 0; dv < 2; dv++)
            for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
                bad += p.bytes[dv][i] != p1.bytes[dv][i] * (i == GPT2RT_MEM_ACTIVATIONS ? (uint64_t)m : 1);
        bad += p1.bytes[0][GPT2RT_MEM_ACTIVATIONS] == 0 || p1.bytes[1][GPT2RT_MEM_ACTIVATIONS] == 0;
    }
    CHECK(bad == 0, "CUDA layer split plan, accum 2 and 3: %d figures are not accumulation 1's with m activation "
          "sets a stage", bad);
}

/* what a layer-split context allocated: one device's arenas and an activation set per
   further micro-batch on device 0, a transient and workspace per further stage */
static void ls_memory(void) {
    gpt2rt_config c1 = tiny(), c3;
    c1.grad_accum = 4;
    c3 = ls_cfg(c1, 3);
    gpt2rt_memory_plan p1, a3;
    CHECK(gpt2rt_plan(&c1, &p1) == GPT2RT_OK, "plan: %s", p1.error);
    gpt2rt_ctx *x = make(&c3);
    CHECK_OK(x, gpt2rt_plan_allocated(x, &a3));
    uint64_t act = p1.bytes[0][GPT2RT_MEM_ACTIVATIONS], scratch = p1.bytes[0][GPT2RT_MEM_TRANSIENT] +
                   p1.bytes[0][GPT2RT_MEM_WORKSPACE];
    CHECK(a3.n_devices == 3 && a3.total[0] == p1.total[0] + 3 * act && a3.total[1] == scratch &&
          a3.total[2] == scratch, "layer split allocated %llu / %llu / %llu over %d devices; one device plans %llu "
          "(activations %llu, scratch %llu)", (unsigned long long)a3.total[0], (unsigned long long)a3.total[1],
          (unsigned long long)a3.total[2], a3.n_devices, (unsigned long long)p1.total[0], (unsigned long long)act,
          (unsigned long long)scratch);
    /* memory_budget (bytes a device) against the plan's fullest device, device 0 with the
       further micro-batches' sets: its total fits, one byte less is refused before allocating */
    gpt2rt_memory_plan p3;
    CHECK(gpt2rt_plan(&c3, &p3) == GPT2RT_OK, "plan: %s", p3.error);
    gpt2rt_config cb = c3;
    gpt2rt_ctx *xb = NULL;
    cb.memory_budget = p3.total[0] - 1;
    CHECK(gpt2rt_create(&xb, &cb) == GPT2RT_ERR_OUT_OF_MEMORY, "layer split: a budget of device 0's plan less one "
          "byte (%llu, the single-device arenas %llu) was accepted", (unsigned long long)cb.memory_budget,
          (unsigned long long)p1.total[0]);
    gpt2rt_free(xb);
    cb.memory_budget = p3.total[0];
    CHECK(gpt2rt_create(&xb, &cb) == GPT2RT_OK, "layer split: a budget of device 0's plan refused: %s",
          gpt2rt_last_error(xb));
    gpt2rt_free(xb);
    /* a bad token in micro-batch 2: refused before any stage runs, the context still works */
    int32_t in[8 * 8], tg[8 * 8];
    tokens(8, 8, c1.vocab_size, 2, in, tg);
    in[4 * 8 + 1] = 999;
    CHECK(gpt2rt_step(x, in, tg, NULL) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "= 999"),
          "layer split, bad token: %s", gpt2rt_last_error(x));
    in[4 * 8 + 1] = 0;
    CHECK_OK(x, gpt2rt_step(x, in, tg, NULL));
    gpt2rt_free(x);
}

static void refused(void) {
    gpt2rt_ctx *x;
    gpt2rt_config c = tiny();
    c.shard_optimizer = 1;
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "needs parallel = DATA"),
          "sharding without DATA: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    c = dp(tiny(), 9);
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "n_devices = 9"),
          "9 devices: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    /* 3 layers over 3 stages with FULL every 2nd: two segments, so some stage would start inside one */
    c = tiny(); c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 3; c.recompute = GPT2RT_RECOMPUTE_FULL;
    c.checkpoint_every = 2;
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "checkpoint_every "
          "= 2 cuts n_layer = 3 into 2 segments"), "layer split with FULL recompute: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    /* explicit stages (stage_first_layer), 5 layers: each refusal names the numbers */
    {
        struct { int parallel, n, ck, f[4]; const char *needle; } bad[] = {
            {GPT2RT_PARALLEL_LAYER_SPLIT, 3, 0, {0, 3, 2, 0}, "stage_first_layer must increase: stage_first_layer[2] "
             "= 2 < stage_first_layer[1] = 3"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 3, 0, {0, 2, 2, 0}, "stage 1 would hold no layer: stage_first_layer[1] = "
             "stage_first_layer[2] = 2"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 2, 0, {0, 5, 0, 0}, "stage_first_layer[1] = 5 must lie in [1, n_layer - 1 = "
             "4]"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 2, 0, {0, -1, 0, 0}, "stage_first_layer[1] = -1 must lie in [1, n_layer - 1"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 2, 2, {0, 3, 0, 0}, "stage_first_layer[1] = 3 is not a multiple of 2"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 2, 0, {0, 2, 4, 0}, "stage_first_layer[2] = 4 names a stage beyond the "
             "n_devices = 2 stages"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 2, 0, {1, 3, 0, 0}, "stage_first_layer[0] = 1: stage 0 starts at layer 0"},
            {GPT2RT_PARALLEL_LAYER_SPLIT, 3, 0, {0, 0, 3, 0}, "stage_first_layer[1] = 0 while others are set"},
            {GPT2RT_PARALLEL_DATA, 2, 0, {0, 3, 0, 0}, "stage_first_layer[1] = 3 applies to parallel = LAYER_SPLIT "
             "(it is DATA)"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            gpt2rt_memory_plan pl;
            c = tiny(); c.n_layer = 5; c.parallel = (gpt2rt_parallel)bad[i].parallel; c.n_devices = bad[i].n;
            if (bad[i].ck) { c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = bad[i].ck; }
            for (int s = 0; s < 4; s++) c.stage_first_layer[s] = bad[i].f[s];
            CHECK(gpt2rt_plan(&c, &pl) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(pl.error, bad[i].needle),
                  "plan of bad stages %zu: %s (wanted: %s)", i, pl.error, bad[i].needle);
            CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), bad[i].needle),
                  "create with bad stages %zu: %s", i, gpt2rt_last_error(x));
            gpt2rt_free(x);
        }
    }
    c = tiny(); c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 2; c.attn_dropout = 0.1f;
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(x), "attn_dropout = 0.1"),
          "layer split with dropout: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    c = tiny(); c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 4; /* 3 layers */
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "n_layer >= 4"),
          "layer split over more stages than layers: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    /* data parallel on CUDA in one process is implemented (kernels/data_parallel.cu checks it on a
       GPU): this build has no CUDA, which is named; in several processes it is not yet */
    c = dp(tiny(), 2); c.backend = GPT2RT_BACKEND_CUDA;
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_UNAVAILABLE && strstr(gpt2rt_last_error(x), "compiled by nvcc"),
          "data parallel on CUDA in a CPU build: %s", gpt2rt_last_error(x));
    gpt2rt_free(x);
    c = dp(tiny(), 1); c.backend = GPT2RT_BACKEND_CUDA; c.world_size = 2; c.rank = 1; c.local_rank = 1;
    c.rendezvous = GPT2RT_RENDEZVOUS_TCP; /* refused before it is tried */
    CHECK(gpt2rt_create(&x, &c) == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(x), "several processes") &&
          strstr(gpt2rt_last_error(x), "GPT2RT_BACKEND_CPU"), "data parallel on CUDA over processes: %s",
          gpt2rt_last_error(x));
    gpt2rt_free(x);
    /* a bad token in rank 1's rows: named, nothing updated, the context still works */
    c = dp(tiny(), 2);
    x = make(&c);
    int32_t in[4 * 8], tg[4 * 8];
    tokens(4, 8, c.vocab_size, 1, in, tg);
    in[2 * 8 + 3] = 1000;
    gpt2rt_result r = gpt2rt_step(x, in, tg, NULL);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "rank 1") &&
          strstr(gpt2rt_last_error(x), "= 1000"), "bad token in rank 1's rows: %s", gpt2rt_last_error(x));
    in[2 * 8 + 3] = 0;
    CHECK_OK(x, gpt2rt_step(x, in, tg, NULL));
    float lg[8];
    CHECK(gpt2rt_logits(x, lg, 8) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(x), "n_devices = 2"),
          "logits count: %s", gpt2rt_last_error(x));
    /* more backward calls than grad_accum before an update */
    CHECK_OK(x, gpt2rt_forward(x, in, tg, NULL));
    CHECK_OK(x, gpt2rt_backward(x));
    CHECK_OK(x, gpt2rt_forward(x, in, tg, NULL));
    CHECK(gpt2rt_backward(x) == GPT2RT_ERR_STATE && strstr(gpt2rt_last_error(x), "grad_accum = 1"),
          "a second backward: %s", gpt2rt_last_error(x));
    CHECK_OK(x, gpt2rt_update(x, NULL));
    gpt2rt_free(x);
}

int main(void) {
    double t0 = harness_now();
    comm_threads();
    dp_equals_one(2, 2, 1, GPT2RT_RECOMPUTE_NONE, 0, 0.0f);
    dp_equals_one(3, 1, 2, GPT2RT_RECOMPUTE_NONE, 0, 0.0f);
    dp_equals_one(2, 1, 3, GPT2RT_RECOMPUTE_SELECTIVE, GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP, 0.0f);
    dp_equals_one(2, 2, 1, GPT2RT_RECOMPUTE_FULL, GPT2RT_GROUP_TOKEN_EMBED, 0.0f);
    dp_equals_one(2, 2, 2, GPT2RT_RECOMPUTE_NONE, 0, 0.2f);
    dp_equals_one(3, 1, 1, GPT2RT_RECOMPUTE_SELECTIVE, 0, 0.3f);
    bitwise();
    memory();
    resume();
    series();
    advisor();
    ls_equals_one(2, 1, GPT2RT_RECOMPUTE_NONE, 0, 0, 1);
    ls_equals_one(2, 4, GPT2RT_RECOMPUTE_NONE, 0, 0, 2);
    ls_equals_one(3, 4, GPT2RT_RECOMPUTE_SELECTIVE, 0, 0, 1);
    ls_equals_one(3, 1, GPT2RT_RECOMPUTE_SELECTIVE, 0, GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_POS_EMBED, 1);
    ls_equals_one(2, 3, GPT2RT_RECOMPUTE_NONE, 0, GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_MLP, 4);
    ls_equals_one(3, 3, GPT2RT_RECOMPUTE_FULL, 1, 0, 1);                /* a checkpoint every layer */
    ls_equals_one(2, 2, GPT2RT_RECOMPUTE_FULL, 2, GPT2RT_GROUP_MLP, 2); /* every 2nd: stages [0,2), [2,3) */
    /* the stages given (stage_first_layer), uneven; FULL with the stage starting at a checkpoint */
    ls_equals_one_at(2, 5, 4, 0, 4, GPT2RT_RECOMPUTE_NONE, 0, 0, 2);
    ls_equals_one_at(3, 5, 1, 4, 3, GPT2RT_RECOMPUTE_SELECTIVE, 0, 0, 1);
    ls_equals_one_at(2, 5, 2, 0, 2, GPT2RT_RECOMPUTE_FULL, 2, 0, 1);
    /* the planner's split of FULL's segments: 5 layers, every 2nd kept -> stages [0,2), [2,5) (balanced) */
    ls_equals_one_at(2, 5, 0, 0, 2, GPT2RT_RECOMPUTE_FULL, 2, GPT2RT_GROUP_ATTENTION, 1);
    ls_stages_plan();
    ls_balanced();
    ls_span_tables();
    ls_series(2, 3);
    ls_series(3, 2);
    ls_memory();
    ls_plan_equals_allocated();
    refused();
    printf("    test_parallel: %.1f s\n", harness_now() - t0);
    return harness_finish();
}
