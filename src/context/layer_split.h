/* context/layer_split.h - 10.2 Layer split
   may call: what its includes name (common/, plan/, inputs/, backend/, cpu/, context/) */
#ifndef GPT2RT__SRC_CONTEXT_LAYER_SPLIT_H
#define GPT2RT__SRC_CONTEXT_LAYER_SPLIT_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../common/stages.h"
#include "../plan/params.h"
#include "../plan/activations.h"
#include "../plan/split.h"
#include "../plan/plan.h"
#include "../inputs/patches.h"
#include "../backend/interface.h"
#include "../backend/driver.h"
#include "../cpu/ops.h"
#include "../cpu/backend.h"
#include "context.h"

/* ==== 10.2 Layer split ==== */
/* parallel = LAYER_SPLIT on the CPU backend: the layers in N stages (gpt2rt__span_of:
   stage s runs layers [l0, l1); the embedding on stage 0, ln_f, the head and the loss
   on stage N-1), one thread per stage, the grad_accum micro-batches of gpt2rt_step
   pipelined through them (GPipe: stage s < N-1 runs the forwards of micro-batches
   0..m-1, then their backwards in the same order; the last stage runs each
   micro-batch's backward right after its forward, so one logits buffer serves).
   The stages share the host memory: one context's weights, gradients and optimizer
   (the update runs once, as on one device); an activation set per micro-batch in
   flight (all layers: micro-batch 0 uses the context's own, 1..m-1 extra sets), and a
   transient + workspace per stage thread. Stage s hands micro-batch k to stage s+1 by
   a counter under a mutex (the output already lies in set k: on a GPU this is the
   peer copy); the gradient of that boundary comes back by a copy into the output's
   place (no longer read: a layer's backward reads its input, not its output).
   Bitwise equal to one device: every micro-batch runs the same steps on the same
   inputs, every gradient buffer gets its micro-batches in order 0..m-1, and where
   two stages add into one buffer (the tied wte: the head's part on the last stage,
   the embedding's on the first; RevIN's affine likewise) the head backward of
   micro-batch k+1 waits for the first stage's backward of k, the one-device order
   head(0), embed(0), head(1), ... FULL recompute runs one device's segments, so each
   stage starts at a checkpoint (the config check sees to it): within a micro-batch's
   set only one stage works at a time (forward down the stages, backward up), so the
   FULL slots a set shares among its layers are safe. gpt2rt_forward / _backward /
   _update run the one-device path on the context (one micro-batch in flight, no
   pipelining). */

static void gpt2rt__ls_free(gpt2rt_ctx *ctx) {
    gpt2rt__ls *ls = ctx->ls;
    if (!ls) return;
    if (ls->ops) ls->ops->release(ctx, ls);
    for (int k = 0; ls->acts && k < ls->m - 1; k++) gpt2rt__free(&ctx->cfg, ls->acts[k], GPT2RT_MEM_ACTIVATIONS);
    for (int s = 1; s < ls->n; s++) {
        gpt2rt__free(&ctx->cfg, ls->scratch[s][0], GPT2RT_MEM_TRANSIENT);
        gpt2rt__free(&ctx->cfg, ls->scratch[s][1], GPT2RT_MEM_WORKSPACE);
    }
    gpt2rt__free(&ctx->cfg, ls->acts, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->sc, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->loss_sum, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->n_targets, GPT2RT_MEM_BOOKKEEPING);
#ifdef GPT2RT__COMM_THREADS
    pthread_mutex_destroy(&ls->mu);
    pthread_cond_destroy(&ls->cv);
#endif
    gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
    ctx->ls = NULL;
}

/* after gpt2rt__ctx_alloc (the context: one device's arenas): the stages' buffers and
   their contexts (shallow copies of ctx bound to set k's activations and stage s's
   scratch; the weights, gradients and table are ctx's). CUDA: gpt2rt__cuda_open opened
   the stages with their device states (8.7). */
static gpt2rt_result gpt2rt__ls_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    (void)plan;
    if (ctx->ls) return GPT2RT_OK;
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->cfg.n_devices, m = ctx->cfg.grad_accum;
    gpt2rt__ls *ls = (gpt2rt__ls *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__ls), GPT2RT_MEM_BOOKKEEPING);
    if (!ls) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stages");
    memset(ls, 0, sizeof *ls);
    if (pthread_mutex_init(&ls->mu, NULL) != 0 || pthread_cond_init(&ls->cv, NULL) != 0) {
        gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the stages failed");
    }
    ctx->ls = ls;
    ls->n = n; ls->m = m;
    const gpt2rt__dims *d = &ctx->d;
    ls->order = d->patches ? d->affine : !(d->frozen & GPT2RT_GROUP_TOKEN_EMBED);
    ls->act_bytes = ctx->arena_bytes[GPT2RT_MEM_ACTIVATIONS];
    ls->scratch_bytes[0] = ctx->arena_bytes[GPT2RT_MEM_TRANSIENT];
    ls->scratch_bytes[1] = ctx->arena_bytes[GPT2RT_MEM_WORKSPACE];
    ls->acts = (unsigned char **)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(unsigned char *), GPT2RT_MEM_BOOKKEEPING);
    ls->sc = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->loss_sum = (double *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(double), GPT2RT_MEM_BOOKKEEPING);
    ls->n_targets = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    if (!ls->acts || !ls->sc || !ls->loss_sum || !ls->n_targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stage table");
    memset(ls->acts, 0, (size_t)m * sizeof(unsigned char *));
    for (int k = 0; k < m - 1; k++)
        if (!(ls->acts[k] = (unsigned char *)gpt2rt__alloc(&ctx->cfg, (size_t)ls->act_bytes, GPT2RT_MEM_ACTIVATIONS)))
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split: allocating %.1f MiB for "
                                "the activations of micro-batch %d of grad_accum = %d failed",
                                GPT2RT__MIB(ls->act_bytes), k + 1, m);
    for (int s = 1; s < n; s++)
        for (int i = 0; i < 2; i++)
            if (ls->scratch_bytes[i] && !(ls->scratch[s][i] = gpt2rt__alloc(&ctx->cfg, (size_t)ls->scratch_bytes[i],
                                                i ? GPT2RT_MEM_WORKSPACE : GPT2RT_MEM_TRANSIENT)))
                return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split: allocating %.1f MiB "
                                    "of scratch for stage %d failed", GPT2RT__MIB(ls->scratch_bytes[i]), s);
    gpt2rt__span whole;
    whole.l0 = 0; whole.l1 = d->L; whole.first = whole.last = 1;
    for (int s = 0; s < n; s++)
        for (int k = 0; k < m; k++) {
            gpt2rt_ctx *sc = &ls->sc[s * m + k];
            memcpy(sc, ctx, sizeof *sc);
            sc->ls = NULL;
            sc->cfg.log = NULL;
            if (k) sc->arena[GPT2RT_MEM_ACTIVATIONS] = ls->acts[k - 1];
            if (s) { sc->arena[GPT2RT_MEM_TRANSIENT] = ls->scratch[s][0]; sc->arena[GPT2RT_MEM_WORKSPACE] = ls->scratch[s][1]; }
            uint64_t bytes[GPT2RT_MEM_COUNT];
            gpt2rt__layout(&sc->d, &whole, bytes, sc); /* the same carving as ctx's, on these arenas */
            /* the stages share the cores: each its share of the threads (the kernels give
               bitwise the same results for any thread count) */
            sc->d.n_threads = ctx->d.n_threads / n > 1 ? ctx->d.n_threads / n : 1;
        }
    return GPT2RT_OK;
#else
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: parallel = LAYER_SPLIT needs POSIX threads, "
                        "which this build lacks");
#endif
}

#ifdef GPT2RT__COMM_THREADS

/* the forward of stage s on micro-batch k (sc: its context); the last stage also takes the loss */
static void gpt2rt__ls_forward(gpt2rt__ls *ls, gpt2rt_ctx *sc, gpt2rt__span sp, int k) {
    const gpt2rt__dims *d = &sc->d;
    const gpt2rt__backend *be = &gpt2rt__cpu_backend;
    gpt2rt__model_params p = gpt2rt__mparams(sc, sc->params, 0);
    int64_t xs = d->Bw * d->lookback * d->M;
    if (sp.first) {
        if (d->patches)
            gpt2rt__ts_revin_patch(sc->ts_patch, sc->ts_z, sc->ts_mean, sc->ts_std, (const float *)ls->a + k * xs,
                                   p.revw, p.revb, d);
        else memcpy(sc->inputs, (const int32_t *)ls->a + k * d->BT, (size_t)d->BT * sizeof(int32_t));
        (void)be->embed_forward(sc);
    }
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C) * sizeof(float);
    (void)gpt2rt__model_layers_forward(sc, be, sc, sp.l0, sp.l1); /* FULL: keeps stage s+1's input */
    if (!sp.last) return;
    if (full) memcpy(sc->xout, gpt2rt__lacts(sc, d->L - 1).res3, act);
    (void)be->head_forward(sc, full ? sc->xout : gpt2rt__lacts(sc, d->L - 1).res3);
    if (d->patches) {
        gpt2rt__ts_denorm(sc->ts_pred, sc->logits, sc->ts_mean, sc->ts_std, p.revw, p.revb, d);
        memcpy(sc->ts_y, (const float *)ls->b + k * d->n_out, (size_t)d->n_out * sizeof(float));
        ls->loss_sum[k] = gpt2rt__ts_mse_sum(sc->ts_pred, sc->ts_y, d->n_out);
        ls->n_targets[k] = d->n_out;
    } else {
        memcpy(sc->targets, (const int32_t *)ls->b + k * d->BT, (size_t)d->BT * sizeof(int32_t));
        (void)gpt2rt__cpu_crossentropy_forward(sc->losses, sc->logit_lse, sc->logits, sc->targets, d->BT, d->V, d->Vp,
                                               &ls->n_targets[k], &ls->loss_sum[k], d->n_threads);
    }
}

/* the backward of stage s on micro-batch k: from the head (last stage) or the gradient
   stage s+1 left at this stage's output, down to the embedding (first) or that
   gradient left at stage s-1's output */
static int gpt2rt__ls_backward(gpt2rt__ls *ls, gpt2rt_ctx *sc, gpt2rt__span sp, int s, int k) {
    const gpt2rt__dims *d = &sc->d;
    const gpt2rt__backend *be = &gpt2rt__cpu_backend;
    size_t act = (size_t)(d->BT * d->C) * sizeof(float);
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    if (sp.last) {
        if (ls->order && k && !gpt2rt__ls_wait(ls, &ls->bwd[0], k - 1)) return 0; /* embed(k-1) before head(k) */
        (void)be->head_backward(sc, full ? sc->xout : gpt2rt__lacts(sc, d->L - 1).res3, 1.0f / (float)(d->n_out * ls->m));
    } else {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[s + 1], k)) return 0;
        memcpy(sc->dres, gpt2rt__model_layer_input(sc, sp.l1), act);
    }
    (void)gpt2rt__model_layers_backward(sc, be, sc, sp.l0, sp.l1);
    if (sp.first) (void)be->embed_backward(sc);
    else memcpy(gpt2rt__model_layer_input(sc, sp.l0), sc->dres, act);
    gpt2rt__ls_done(ls, &ls->bwd[s]);
    return 1;
}

static void *gpt2rt__ls_stage(void *p) {
    gpt2rt__ls_job *j = (gpt2rt__ls_job *)p;
    gpt2rt__ls *ls = j->ctx->ls;
    int s = j->s, m = ls->m;
    gpt2rt__span sp = gpt2rt__span_of(&j->ctx->cfg, s);
    for (int k = 0; k < m; k++) {
        gpt2rt_ctx *sc = &ls->sc[s * m + k];
        if (s && !gpt2rt__ls_wait(ls, &ls->fwd[s - 1], k)) return NULL;
        gpt2rt__ls_forward(ls, sc, sp, k);
        gpt2rt__ls_done(ls, &ls->fwd[s]);
        if (sp.last && !gpt2rt__ls_backward(ls, sc, sp, s, k)) return NULL;
    }
    for (int k = 0; k < m && !sp.last; k++)
        if (!gpt2rt__ls_backward(ls, &ls->sc[s * m + k], sp, s, k)) return NULL;
    return NULL;
}
#endif


/* gpt2rt_step / gpt2rt_step_series under layer split: the grad_accum micro-batches of
   a (inputs or x) and b (targets or y), already checked, through the stages; the
   gradients and the accumulated loss as one device's micro-steps leave them */
static gpt2rt_result gpt2rt__ls_accumulate(gpt2rt_ctx *ctx, const void *a, const void *b) {
#ifdef GPT2RT__COMM_THREADS
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n, started[GPT2RT_MAX_DEVICES] = {0};
    pthread_t th[GPT2RT_MAX_DEVICES];
    gpt2rt__ls_job jobs[GPT2RT_MAX_DEVICES];
    void *(*stage)(void *) = gpt2rt__ls_stage;
    ls->a = a; ls->b = b;
    ls->stop = 0;
    for (int s = 0; s < n; s++) { ls->fwd[s] = ls->bwd[s] = 0; jobs[s].ctx = ctx; jobs[s].s = s; }
    if (ls->ops) { /* CUDA (8.7) */
        ls->ops->begin(ctx, a);
        stage = ls->ops->stage;
    }
    int failed = 0;
    for (int s = 1; s < n && !failed; s++)
        failed = !(started[s] = pthread_create(&th[s], NULL, stage, &jobs[s]) == 0);
    if (failed) { /* stage 0 has not run: the started stages wait for it and did nothing */
        pthread_mutex_lock(&ls->mu);
        ls->stop = 1;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
    } else stage(&jobs[0]);
    for (int s = 1; s < n; s++)
        if (started[s]) pthread_join(th[s], NULL);
    if (failed)
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "layer split: starting a stage's thread failed; nothing "
                            "was computed");
    gpt2rt_result r = ls->ops ? ls->ops->end(ctx) : GPT2RT_OK;
    if (r != GPT2RT_OK) return r;
    for (int k = 0; k < ls->m; k++) { /* in micro-batch order, as one device adds them */
        ctx->acc_loss_sum += ls->loss_sum[k];
        ctx->acc_targets += ls->n_targets[k];
        ctx->acc_micro++;
    }
    ctx->have_loss = ctx->have_logits = ctx->have_pred = 0;
    ctx->grads_pending = 1;
    return GPT2RT_OK;
#else
    (void)a; (void)b;
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "layer split needs POSIX threads");
#endif
}

/* ---- the stages: the executor ---- */
/* gpt2rt_step pipelines its micro-batches through the stages; gpt2rt_forward, _backward,
   _update and the outputs run the one-device path on the context (the CPU's; the CUDA
   stages offer gpt2rt_step and gpt2rt_param_read only, 2.1) */

static gpt2rt_result gpt2rt__ls_step(gpt2rt_ctx *ctx, const void *a, const void *b, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    gpt2rt_result r = gpt2rt__ls_accumulate(ctx, a, b);
    if (r == GPT2RT_OK) r = ctx->ls->ops ? ctx->ls->ops->update(ctx, stats) : gpt2rt__one_update(ctx, stats);
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

static gpt2rt_result gpt2rt__ls_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                           float *dst) {
    if (ctx->ls->ops) return ctx->ls->ops->param_read(ctx, t, what, dst); /* CUDA: the stage that trains t (8.7) */
    return gpt2rt__one_param_read(ctx, t, what, dst);
}

/* the CPU: the context's arenas and micro-batches 1..'s activations on device 0, stage
   s's transient and workspace on device s; CUDA: each stage's device (8.7) */
static void gpt2rt__ls_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    const gpt2rt__ls *ls = ctx->ls;
    if (ls->ops) { ls->ops->allocated(ctx, plan); return; }
    gpt2rt__one_allocated(ctx, plan);
    plan->n_devices = ls->n;
    plan->bytes[0][GPT2RT_MEM_ACTIVATIONS] += (uint64_t)(ls->m - 1) * ls->act_bytes;
    plan->total[0] += (uint64_t)(ls->m - 1) * ls->act_bytes;
    for (int s = 1; s < ls->n; s++) {
        plan->bytes[s][GPT2RT_MEM_TRANSIENT] = ls->scratch_bytes[0];
        plan->bytes[s][GPT2RT_MEM_WORKSPACE] = ls->scratch_bytes[1];
        plan->total[s] = ls->scratch_bytes[0] + ls->scratch_bytes[1];
    }
}

static const gpt2rt__exec gpt2rt__ex_stages = {
    /* .slices     = */ gpt2rt__one_slices,
    /* .forward    = */ gpt2rt__one_forward,
    /* .backward   = */ gpt2rt__one_backward,
    /* .update     = */ gpt2rt__one_update,
    /* .step       = */ gpt2rt__ls_step,
    /* .output     = */ gpt2rt__one_output,
    /* .param_read = */ gpt2rt__ls_param_read,
    /* .state_in   = */ gpt2rt__one_state_in,
    /* .state_out  = */ gpt2rt__one_state_out,
    /* .sync       = */ gpt2rt__one_sync,
    /* .allocated  = */ gpt2rt__ls_allocated,
    /* .open       = */ gpt2rt__ls_open,
    /* .close      = */ gpt2rt__ls_free
};

#endif /* GPT2RT__SRC_CONTEXT_LAYER_SPLIT_H */
