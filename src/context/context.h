/* context/context.h - 10. Context
   may call: common/types.h, common/errors.h, optimizer.h */
#ifndef GPT2RT__SRC_CONTEXT_CONTEXT_H
#define GPT2RT__SRC_CONTEXT_CONTEXT_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../optimizer.h"

/* ==== 10. Context ==== */

static void gpt2rt__reset_training(gpt2rt_ctx *ctx) {
    (void)ctx->be->zero_grads(ctx, 1); /* a failure shows at the next call */
    ctx->step = 0;
    gpt2rt__accum_reset(ctx);
    ctx->have_logits = ctx->have_loss = ctx->have_pred = 0;
}

/* ---- executors: how a public call is spread over the devices ---- */
/* The second seam, across the backend's (7.3): what a public call does, one table per
   execution mode, chosen once by gpt2rt_create: one device (below), ranks (10.1: the
   data-parallel ranks of one process; 10.4: one process of several), stages (10.2: the
   layer split, whose stages' work is the CPU's or the CUDA backend's, 8.7). A public
   call (11) checks its arguments and the context's state once, for all of the call's
   rows, and then calls its executor, which checks nothing again and reaches the devices
   through the backend (ctx->be) only. a and b below are a call's inputs and targets
   (tokens, int32) or x and y (patches, float), every slice of them (gpt2rt__slice). */
typedef struct gpt2rt__exec {
    /* B-row slices in one micro-batch of a call's rows: 1, or one per data-parallel rank */
    int (*slices)(const gpt2rt_ctx *ctx);
    /* the logits or predictions, and with b (NULL: none; NEXT_PATCH never has one) the loss:
       *loss, if not NULL, is the mean over every slice's targets */
    gpt2rt_result (*forward)(gpt2rt_ctx *ctx, const void *a, const void *b, float *loss);
    /* += the gradients of the last forward's loss (have_loss is set) */
    gpt2rt_result (*backward)(gpt2rt_ctx *ctx);
    /* one optimizer step over the gradients summed since the last update (grads_pending) */
    gpt2rt_result (*update)(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
    /* grad_accum micro-batches (micro-batch k: slices [k*n, (k+1)*n) of n), each forward
       and backward, then the update; a failure leaves no partial sums */
    gpt2rt_result (*step)(gpt2rt_ctx *ctx, const void *a, const void *b, gpt2rt_step_stats *stats);
    /* the last forward's logits (BT,V) or predictions (Bw,H,M) of every slice, in order */
    gpt2rt_result (*output)(gpt2rt_ctx *ctx, float *dst);
    /* tensor t's value, gradient (of the mean loss over every rank's targets) or moment */
    gpt2rt_result (*param_read)(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what, float *dst);
    /* ctx->params, and the moments m, v of every trained float (n_train each, goff order;
       NULL: none), to where the mode trains them: every device, each ZeRO-1 rank its shard */
    gpt2rt_result (*state_in)(gpt2rt_ctx *ctx, const float *m, const float *v);
    /* ctx->params caught up with the weights trained; with m not NULL, *m and *v the
       moments of every trained float on the host, *buf what was allocated for them (the
       caller frees it) or NULL */
    gpt2rt_result (*state_out)(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf);
    /* after ctx's weights (host and backend) or settings changed: the mode's other
       contexts follow (GPT2RT__SYNC_*) */
    void (*sync)(gpt2rt_ctx *ctx, int what);
    /* what each device holds: plan->n_devices, bytes, total, overhead */
    void (*allocated)(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan);
    /* gpt2rt_create, once ctx holds its arenas and weights: the mode's own parts (ranks,
       communicators, stages); gpt2rt_free: them released, also after a failed open */
    gpt2rt_result (*open)(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan);
    void (*close)(gpt2rt_ctx *ctx);
} gpt2rt__exec;

/* gpt2rt_free: the executor's ranks, communicators or stages (a rank's close frees its
   ranks' contexts with this), the backend's state, the arenas, the context */
static void gpt2rt__ctx_free(gpt2rt_ctx *ctx) {
    if (!ctx) return;
    ctx->be->release_shared(ctx);
    ctx->ex->close(ctx);
    ctx->be->release(ctx);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) gpt2rt__free(&ctx->cfg, ctx->arena[i], i);
    gpt2rt__free(&ctx->cfg, ctx->tensors, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt_config hooks = ctx->cfg;
    gpt2rt__free(&hooks, ctx, GPT2RT_MEM_BOOKKEEPING);
}

/* what changed before a sync: a gpt2rt_param_write; a weights load (the training starts
   over); a training state load; gpt2rt_mode_set's or gpt2rt_schedule_set's settings */
enum { GPT2RT__SYNC_WRITE, GPT2RT__SYNC_WEIGHTS, GPT2RT__SYNC_STATE, GPT2RT__SYNC_SETTINGS };

/* a training state load (11.5) hands the moments to the executor */
static gpt2rt_result gpt2rt__state_in(gpt2rt_ctx *ctx, const float *m, const float *v) {
    return ctx->ex->state_in(ctx, m, v);
}

/* slice m of a call's a (targets 0) or b (targets 1; NULL stays NULL): B rows of tokens,
   Bw windows of x, or their n_out targets */
static const void *gpt2rt__slice(const gpt2rt_ctx *ctx, const void *p, int64_t m, int targets) {
    const gpt2rt__dims *d = &ctx->d;
    if (!p) return NULL;
    if (!d->patches) return (const int32_t *)p + m * d->BT;
    return (const float *)p + m * (targets ? d->n_out : d->Bw * d->lookback * d->M);
}

/* ---- one device: the context alone (also what each rank and the CPU stages' context run) ---- */

static gpt2rt_result gpt2rt__one_forward_run(gpt2rt_ctx *ctx, const void *a, const void *b, float *loss, int fuse) {
    if (ctx->d.patches) return ctx->be->forward_series(ctx, (const float *)a, (const float *)b, loss);
    return ctx->be->forward(ctx, (const int32_t *)a, (const int32_t *)b, loss, fuse);
}

static gpt2rt_result gpt2rt__one_forward(gpt2rt_ctx *ctx, const void *a, const void *b, float *loss) {
    return gpt2rt__one_forward_run(ctx, a, b, loss, 0);
}

static gpt2rt_result gpt2rt__one_backward(gpt2rt_ctx *ctx) {
    /* one fixed scale for every micro-batch; the update divides by the counted targets */
    gpt2rt_result r = ctx->be->backward(ctx);
    if (r != GPT2RT_OK) return r;
    ctx->acc_loss_sum += ctx->loss_sum;
    ctx->acc_targets += ctx->n_targets;
    ctx->acc_micro++;
    ctx->have_loss = ctx->have_logits = 0; /* the logits became dlogits */
    ctx->grads_pending = 1;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__one_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    return gpt2rt__opt_update(ctx, ctx->be->update, stats);
}

/* a step's grad_accum forwards and backwards on slice `slice` of n of each micro-batch,
   then the update */
static gpt2rt_result gpt2rt__one_micro_steps(gpt2rt_ctx *ctx, const void *a, const void *b, int slice, int n,
                                            gpt2rt_step_stats *stats) {
    gpt2rt_result r = GPT2RT_OK;
    for (int k = 0; k < ctx->cfg.grad_accum && r == GPT2RT_OK; k++) {
        int64_t m = (int64_t)k * n + slice;
        r = gpt2rt__one_forward_run(ctx, gpt2rt__slice(ctx, a, m, 0), gpt2rt__slice(ctx, b, m, 1), NULL, 1);
        if (r == GPT2RT_OK) r = gpt2rt__one_backward(ctx);
    }
    return r == GPT2RT_OK ? gpt2rt__one_update(ctx, stats) : r;
}

static gpt2rt_result gpt2rt__one_step(gpt2rt_ctx *ctx, const void *a, const void *b, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    gpt2rt_result r = gpt2rt__one_micro_steps(ctx, a, b, 0, 1, stats);
    if (r != GPT2RT_OK && ctx->grads_pending) { /* a later micro-batch failed: drop the partial sums */
        (void)ctx->be->zero_grads(ctx, 0);
        gpt2rt__accum_reset(ctx);
    }
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

static gpt2rt_result gpt2rt__one_output(gpt2rt_ctx *ctx, float *dst) {
    return ctx->d.patches ? ctx->be->predictions(ctx, dst) : ctx->be->logits(ctx, dst);
}

/* a gradient: of the mean loss over this context's targets since the last update */
static gpt2rt_result gpt2rt__one_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                            float *dst) {
    return ctx->be->param_read(ctx, t, what, gpt2rt__opt_grad_unscale(ctx), dst);
}

static gpt2rt_result gpt2rt__one_state_in(gpt2rt_ctx *ctx, const float *m, const float *v) {
    return ctx->be->upload(ctx, m, v);
}

/* *m, *v: the moments, ctx's own where the host holds them whole (the CPU's), else
   gathered from the shards of ctx and ranks 1..n-1 into *buf */
static gpt2rt_result gpt2rt__moments_out(gpt2rt_ctx *ctx, int n, const float **m, const float **v, float **buf) {
    *buf = NULL;
    *m = ctx->m;
    *v = ctx->v;
    if (ctx->m && !gpt2rt__sharded(&ctx->d)) return GPT2RT_OK;
    float *mv = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_train * 8 + 8, GPT2RT_MEM_BOOKKEEPING);
    if (!mv) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_state_save: %lld bytes of host memory for "
                                 "the moments", (long long)ctx->n_train * 8);
    gpt2rt_result r = GPT2RT_OK;
    for (int i = 0; i < n && r == GPT2RT_OK; i++) {
        gpt2rt_ctx *rc = i ? ctx->ranks[i] : ctx;
        r = rc->be->shard_read(rc, GPT2RT_PARAM_ADAM_M, 0, ctx->n_train, 1.0, mv);
        if (r == GPT2RT_OK) r = rc->be->shard_read(rc, GPT2RT_PARAM_ADAM_V, 0, ctx->n_train, 1.0, mv + ctx->n_train);
        if (r != GPT2RT_OK && i) r = gpt2rt__fail(ctx, r, "data-parallel rank %d: %s", i, rc->error);
    }
    if (r != GPT2RT_OK) { gpt2rt__free(&ctx->cfg, mv, GPT2RT_MEM_BOOKKEEPING); return r; }
    *m = mv;
    *v = mv + ctx->n_train;
    *buf = mv;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__one_state_out(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf) {
    gpt2rt_result r = ctx->be->host_weights(ctx);
    return r == GPT2RT_OK && m ? gpt2rt__moments_out(ctx, 1, m, v, buf) : r;
}

static void gpt2rt__one_sync(gpt2rt_ctx *ctx, int what) { (void)ctx; (void)what; }

/* device r of the plan: context c's arenas (CUDA: on its device) and the driver's own bytes */
static void gpt2rt__one_allocated_as(const gpt2rt_ctx *c, gpt2rt_memory_plan *plan, int r) {
    c->be->allocated(c, plan->bytes[r], &plan->overhead[r]);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan->total[r] += plan->bytes[r][i];
}

static void gpt2rt__one_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    plan->n_devices = 1;
    gpt2rt__one_allocated_as(ctx, plan, 0);
}

static int gpt2rt__one_slices(const gpt2rt_ctx *ctx) { (void)ctx; return 1; }

static gpt2rt_result gpt2rt__one_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    (void)ctx; (void)plan;
    return GPT2RT_OK;
}

static void gpt2rt__one_close(gpt2rt_ctx *ctx) { (void)ctx; }

static const gpt2rt__exec gpt2rt__ex_one = {
    /* .slices     = */ gpt2rt__one_slices,
    /* .forward    = */ gpt2rt__one_forward,
    /* .backward   = */ gpt2rt__one_backward,
    /* .update     = */ gpt2rt__one_update,
    /* .step       = */ gpt2rt__one_step,
    /* .output     = */ gpt2rt__one_output,
    /* .param_read = */ gpt2rt__one_param_read,
    /* .state_in   = */ gpt2rt__one_state_in,
    /* .state_out  = */ gpt2rt__one_state_out,
    /* .sync       = */ gpt2rt__one_sync,
    /* .allocated  = */ gpt2rt__one_allocated,
    /* .open       = */ gpt2rt__one_open,
    /* .close      = */ gpt2rt__one_close
};

#endif /* GPT2RT__SRC_CONTEXT_CONTEXT_H */
