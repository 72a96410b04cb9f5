/* context/data_parallel.h - 10.1 Data parallel
   may call: what its includes name (common/, formats/, optimizer.h, backend/, cpu/, context/) */
#ifndef GPT2RT__SRC_CONTEXT_DATA_PARALLEL_H
#define GPT2RT__SRC_CONTEXT_DATA_PARALLEL_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../formats/hf.h"
#include "../optimizer.h"
#include "../backend/interface.h"
#include "../backend/driver.h"
#include "../cpu/backend.h"
#include "context.h"

/* ==== 10.1 Data parallel ==== */
/* ---- the ranks of one process: opening, running a call on each, their outputs ---- */

/* data parallel: ranks 1..n-1 as contexts like this one (rank 0) with its weights,
   and the threads' communicator; CUDA: each rank a device state on its device (the
   host weights are rank 0's) and the device communicators */
static gpt2rt_result gpt2rt__dp_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->cfg.n_devices;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__comm_group),
                                                                GPT2RT_MEM_BOOKKEEPING);
    if (!g) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the ranks' communicator");
    if (gpt2rt__comm_group_init(g, n) != 0) {
        gpt2rt__free(&ctx->cfg, g, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the ranks failed");
    }
    ctx->group = g;
    ctx->n_ranks = n;
    ctx->ranks[0] = ctx;
    for (int r = 1; r < n; r++) {
        gpt2rt_ctx *rc = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
        if (!rc) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: rank %d's context", r);
        memset(rc, 0, sizeof *rc);
        ctx->ranks[r] = rc;
        rc->cfg = ctx->cfg;
        rc->cfg.log = NULL; /* the hooks run on the calling thread only: ranks report through rank 0 */
        rc->d = ctx->d;
        rc->be = ctx->be;
        rc->ex = &gpt2rt__ex_one;
        gpt2rt_result res = ctx->be->dp_rank(ctx, rc, r, plan); /* CUDA: a device state on device_ids[r] */
        if (res != GPT2RT_OK)
            return gpt2rt__fail(ctx, res, "gpt2rt_create: data-parallel rank %d: %s", r, rc->error);
        if (rc->params != ctx->params) memcpy(rc->params, ctx->params, (size_t)ctx->n_params * sizeof(float));
        rc->rng = ctx->rng;
        gpt2rt__reset_training(rc);
    }
    for (int r = 0; r < n; r++) gpt2rt__dp_attach(ctx->ranks[r], &g->comms[r]);
    return ctx->be->dp_open(ctx); /* CUDA: the device communicators (8.6) */
#else
    (void)plan;
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: parallel = DATA needs POSIX threads");
#endif
}

/* rank r's work on thread r (rank 0 on the caller's).
   The batch of a call holds n_devices * B rows per micro-batch: rank r takes rows
   [r*B, (r+1)*B) of each micro-batch (gpt2rt_step: micro-batch k is rows
   [k*n*B, (k+1)*n*B)), so n ranks of B rows see the batches one device of n*B would. */

typedef enum gpt2rt__dp_what { GPT2RT__DP_FORWARD, GPT2RT__DP_BACKWARD, GPT2RT__DP_UPDATE, GPT2RT__DP_STEP } gpt2rt__dp_what;

typedef struct gpt2rt__dp_job {
    gpt2rt_ctx *rc;
    int rank, n;
    gpt2rt__dp_what what;
    const void *a, *b; /* the whole call's inputs and targets (tokens), or x and y (series) */
    gpt2rt_step_stats stats;
    gpt2rt_result r;
} gpt2rt__dp_job;

static gpt2rt_result gpt2rt__dp_work(gpt2rt__dp_job *j) {
    gpt2rt_ctx *rc = j->rc;
    switch (j->what) {
    case GPT2RT__DP_FORWARD:
        return gpt2rt__one_forward_run(rc, gpt2rt__slice(rc, j->a, j->rank, 0), gpt2rt__slice(rc, j->b, j->rank, 1),
                                       NULL, 0);
    case GPT2RT__DP_BACKWARD: return gpt2rt__one_backward(rc);
    case GPT2RT__DP_UPDATE: return gpt2rt__one_update(rc, &j->stats);
    case GPT2RT__DP_STEP: return gpt2rt__one_micro_steps(rc, j->a, j->b, j->rank, j->n, &j->stats);
    }
    return GPT2RT_ERR_INVALID_ARGUMENT;
}

#ifdef GPT2RT__COMM_THREADS
static void *gpt2rt__dp_thread(void *p) {
    gpt2rt__dp_job *j = (gpt2rt__dp_job *)p;
    j->r = gpt2rt__dp_work(j);
    if (j->r != GPT2RT_OK) gpt2rt__comm_threads_fail(j->rc->comm); /* the others must not wait for it */
    return NULL;
}
#endif

/* every rank drops what it summed since the last update (after a failed call) */
static void gpt2rt__dp_drop(gpt2rt_ctx *ctx) {
    for (int r = 0; r < ctx->n_ranks; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        (void)rc->be->zero_grads(rc, 0); /* a failure shows at the next call */
        gpt2rt__accum_reset(rc);
        rc->dp_reduced = 0;
    }
}

/* run `what` on every rank at once; the first rank that failed names the error */
static gpt2rt_result gpt2rt__dp_run(gpt2rt_ctx *ctx, gpt2rt__dp_what what, const void *a, const void *b,
                                    gpt2rt__dp_job *jobs) {
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->n_ranks, started[GPT2RT_MAX_DEVICES] = {0};
    pthread_t th[GPT2RT_MAX_DEVICES];
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)ctx->group;
    for (int r = 0; r < n; r++) {
        gpt2rt__dp_job j;
        memset(&j, 0, sizeof j);
        j.rc = ctx->ranks[r]; j.rank = r; j.n = n; j.what = what; j.a = a; j.b = b;
        jobs[r] = j;
    }
    for (int r = 1; r < n; r++) {
        started[r] = pthread_create(&th[r], NULL, gpt2rt__dp_thread, &jobs[r]) == 0;
        if (!started[r]) {
            jobs[r].r = gpt2rt__fail(jobs[r].rc, GPT2RT_ERR_UNAVAILABLE, "starting its thread failed");
            gpt2rt__comm_threads_fail(jobs[r].rc->comm);
        }
    }
    gpt2rt__dp_thread(&jobs[0]);
    for (int r = 1; r < n; r++)
        if (started[r]) pthread_join(th[r], NULL);
    int first = g->failed ? g->failed - 1 : -1;
    gpt2rt__comm_group_reset(g);
    if (first < 0 || jobs[first].r == GPT2RT_OK)
        for (int r = n - 1; r >= 0; r--) if (jobs[r].r != GPT2RT_OK) first = r;
    if (first < 0 || jobs[first].r == GPT2RT_OK) return GPT2RT_OK;
    char msg[sizeof ctx->error];
    memcpy(msg, ctx->ranks[first]->error, sizeof msg); /* rank 0's message is ctx->error itself */
    return gpt2rt__fail(ctx, jobs[first].r, "data-parallel rank %d of %d: %s", first, n, msg);
#else
    (void)what; (void)a; (void)b; (void)jobs;
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "data parallel needs POSIX threads");
#endif
}

/* ---- the ranks of one process: the executor ---- */

static int gpt2rt__dp_slices(const gpt2rt_ctx *ctx) { return ctx->n_ranks; }

/* the loss: the global mean over the ranks' targets */
static gpt2rt_result gpt2rt__dp_forward(gpt2rt_ctx *ctx, const void *a, const void *b, float *loss) {
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_FORWARD, a, b, jobs);
    if (r != GPT2RT_OK || !loss) return r;
    double sum = 0.0;
    int64_t n = 0;
    for (int i = 0; i < ctx->n_ranks; i++) { sum += ctx->ranks[i]->loss_sum; n += ctx->ranks[i]->n_targets; }
    *loss = (b || ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH) && n ? (float)(sum / (double)n) : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__dp_backward(gpt2rt_ctx *ctx) {
    if (ctx->acc_micro >= ctx->cfg.grad_accum)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: data parallel sums the gradients over the "
                            "ranks during backward number grad_accum = %d; call gpt2rt_update after at most that "
                            "many", ctx->cfg.grad_accum);
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_BACKWARD, NULL, NULL, jobs);
    /* a device backward that stopped halfway left partial sums */
    int drop = r != GPT2RT_OK && (ctx->ranks[1]->grads_pending != ctx->grads_pending || ctx->be != &gpt2rt__cpu_backend);
    if (drop) gpt2rt__dp_drop(ctx);
    return r;
}

static gpt2rt_result gpt2rt__dp_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_UPDATE, NULL, NULL, jobs);
    if (r == GPT2RT_OK && stats) { *stats = jobs[0].stats; stats->seconds = gpt2rt__now() - t0; }
    return r;
}

static gpt2rt_result gpt2rt__dp_step(gpt2rt_ctx *ctx, const void *a, const void *b, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_STEP, a, b, jobs);
    if (r != GPT2RT_OK) { gpt2rt__dp_drop(ctx); return r; }
    if (stats) { *stats = jobs[0].stats; stats->seconds = gpt2rt__now() - t0; }
    return GPT2RT_OK;
}

/* ctx's error from rank r's failure res (rank 0's message is ctx's own) */
static gpt2rt_result gpt2rt__dp_rank_fail(gpt2rt_ctx *ctx, int r, gpt2rt_result res) {
    char msg[sizeof ctx->error];
    memcpy(msg, ctx->ranks[r]->error, sizeof msg);
    return gpt2rt__fail(ctx, res, "%s", msg);
}

/* rank 0's host weights (the CUDA ranks' too), and each rank's moments (a shard with ZeRO-1) */
static gpt2rt_result gpt2rt__dp_state_in(gpt2rt_ctx *ctx, const float *m, const float *v) {
    for (int r = 0; r < ctx->n_ranks; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        gpt2rt_result res = rc->be->upload(rc, m, v);
        if (res != GPT2RT_OK) return gpt2rt__dp_rank_fail(ctx, r, res);
    }
    return GPT2RT_OK;
}

/* ZeRO-1: each rank's shard of the weights (CUDA's master) and the moments; else rank 0's */
static gpt2rt_result gpt2rt__dp_state_out(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf) {
    int n = gpt2rt__sharded(&ctx->d) ? ctx->n_ranks : 1;
    for (int r = 0; r < n; r++) {
        gpt2rt_result res = ctx->ranks[r]->be->host_weights(ctx->ranks[r]);
        if (res != GPT2RT_OK) return gpt2rt__dp_rank_fail(ctx, r, res);
    }
    return m ? gpt2rt__moments_out(ctx, n, m, v, buf) : GPT2RT_OK;
}

/* logits, predictions: each rank's rows in rank order */
static gpt2rt_result gpt2rt__dp_output(gpt2rt_ctx *ctx, float *dst) {
    int64_t per = ctx->d.patches ? ctx->d.n_out : ctx->d.BT * ctx->d.V;
    for (int r = 0; r < ctx->n_ranks; r++) {
        gpt2rt_result res = gpt2rt__one_output(ctx->ranks[r], dst + r * per);
        if (res != GPT2RT_OK) return gpt2rt__dp_rank_fail(ctx, r, res);
    }
    return GPT2RT_OK;
}

/* After rank 0's weights changed (a write; a weights load, which also resets the
   training; a state load), every rank gets them. CUDA ranks share rank 0's host weights:
   state_in uploaded them (and the moments) to every device, as it set every CPU rank's
   moments. */
static void gpt2rt__dp_sync(gpt2rt_ctx *ctx, int what) {
    for (int r = 1; r < ctx->n_ranks; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        if (what == GPT2RT__SYNC_SETTINGS) { /* each rank computes the rate of its own update */
            rc->eval = ctx->eval;
            rc->cfg.warmup_steps = ctx->cfg.warmup_steps;
            rc->cfg.total_steps = ctx->cfg.total_steps;
            continue;
        }
        if (rc->params != ctx->params) memcpy(rc->params, ctx->params, (size_t)ctx->n_params * sizeof(float));
        rc->have_logits = rc->have_loss = rc->have_pred = 0;
        if (what == GPT2RT__SYNC_WRITE) continue;
        if (what == GPT2RT__SYNC_WEIGHTS) gpt2rt__reset_training(rc);
        (void)rc->be->zero_grads(rc, 0); /* a failure shows at the next call */
        rc->step = ctx->step;
        rc->rng = ctx->rng;
        gpt2rt__accum_reset(rc);
        rc->dp_reduced = 0;
    }
}

/* a gradient, once summed over the ranks: of the mean loss over every rank's targets.
   ZeRO-1: the moments, and once summed the gradient, from the ranks whose shards keep them */
static gpt2rt_result gpt2rt__dp_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                           float *dst) {
    int64_t all = 0, n = t->rows * t->cols;
    for (int i = 0; i < ctx->n_ranks; i++) all += ctx->ranks[i]->acc_targets;
    double unscale = ctx->dp_reduced ? gpt2rt__opt_unscale(ctx, all) : gpt2rt__opt_grad_unscale(ctx);
    if (what == GPT2RT_PARAM_VALUE) GPT2RT__TRY(gpt2rt__dp_state_out(ctx, NULL, NULL, NULL));
    if (!gpt2rt__sharded(&ctx->d) || what == GPT2RT_PARAM_VALUE || (what == GPT2RT_PARAM_GRAD && !ctx->dp_reduced))
        return ctx->be->param_read(ctx, t, what, unscale, dst);
    float *g = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)n * 4, GPT2RT_MEM_BOOKKEEPING); /* t's, goff order */
    if (!g) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %lld bytes", (long long)n * 4);
    gpt2rt_result res = GPT2RT_OK;
    for (int r = 0; r < ctx->n_ranks && res == GPT2RT_OK; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        if ((res = rc->be->shard_read(rc, what, t->goff, t->goff + n, unscale, g)) != GPT2RT_OK)
            gpt2rt__dp_rank_fail(ctx, r, res);
    }
    if (res == GPT2RT_OK) gpt2rt__param_out(t, g, 1.0f, dst);
    gpt2rt__free(&ctx->cfg, g, GPT2RT_MEM_BOOKKEEPING);
    return res;
}

static void gpt2rt__dp_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    plan->n_devices = ctx->n_ranks;
    for (int r = 0; r < ctx->n_ranks; r++) gpt2rt__one_allocated_as(ctx->ranks[r], plan, r);
}

static void gpt2rt__dp_close(gpt2rt_ctx *ctx) {
    for (int r = 1; r < ctx->n_ranks; r++) gpt2rt__ctx_free(ctx->ranks[r]);
#ifdef GPT2RT__COMM_THREADS
    if (ctx->group) {
        gpt2rt__comm_group_free((gpt2rt__comm_group *)ctx->group);
        gpt2rt__free(&ctx->cfg, ctx->group, GPT2RT_MEM_BOOKKEEPING);
    }
#endif
}

static const gpt2rt__exec gpt2rt__ex_ranks = {
    gpt2rt__dp_slices, gpt2rt__dp_forward, gpt2rt__dp_backward, gpt2rt__dp_update, gpt2rt__dp_step,
    gpt2rt__dp_output, gpt2rt__dp_param_read, gpt2rt__dp_state_in, gpt2rt__dp_state_out, gpt2rt__dp_sync,
    gpt2rt__dp_allocated, gpt2rt__dp_open, gpt2rt__dp_close};

#endif /* GPT2RT__SRC_CONTEXT_DATA_PARALLEL_H */
