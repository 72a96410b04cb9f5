/* cuda/stages.cuh - 8.7 Layer split on CUDA devices
   may call: cuda/comm.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_STAGES_CUH
#define GPT2RT__SRC_CUDA_STAGES_CUH
#include "comm.cuh"

/* ==== 8.7 Layer split on CUDA devices ==== */
#ifdef GPT2RT__COMM_THREADS
/* Stage s: a device state for its span (gpt2rt__cu_create_span) on device_ids[s],
   driven through the stage's host context hs[s] (the table gpt2rt__span_params gives
   for the span, whose offsets keep one device's alignment; its fp32 weights; cu = the
   state). The steps are the driver's (8.5) and 7.3's layer loops over the span; the
   schedule the CPU's (GPipe, one thread a stage). Each stage keeps an activation set
   per micro-batch (set 0 is the state's own, 1..m-1 further device buffers, each bound
   by gpt2rt__layout on a copy of the state's shadow context): the last stage runs each
   backward right after its forward, but the gradient it leaves in x0 of set k waits
   there for stage N-2's backward k. A stage's
   thread waits for its own stream before it counts a micro-batch done, and the next
   stage pulls what it needs on its own stream: forward k, stage s-1's output (its set
   k's last res3) into its x0 of set k; backward k, the gradient stage s+1 left in its
   x0 of set k (read no more: a layer's backward reads its input, x0 being the stage's
   own) into its dres. Between devices the pull is a peer copy where peer access is on
   (cudaMemcpyPeerAsync), else it goes through the pulling state's pinned staging
   buffer; on one device (device_ids 0, 0, allow_shared_device) a device copy.
   The tied wte: its gradient, moments and master live on the last stage, which runs
   head(k) and then, once the first stage has left d(x0) of micro-batch k in its x0 of
   set k, the embedding's part of the wte gradient on that d(x0) (the same bucket
   kernel, same alignment) before head(k+1): one device's order head(0), embed(0),
   head(1), ...; the first stage's embedding backward adds wpe's only. The first
   backward after an update overwrites the weight gradients (acc = 0) as one device's
   does. The update: the gradient norm's square is the sum of the stages' (fp64, in
   stage order), then each stage's AdamW with one device's coefficient, then the last
   stage's new wte weights to the first. One device sums the squares in its own chunks,
   so the fp64 sum may differ in its last bits; the fp32 norm (and with it the clip
   coefficient) is then the same unless that sum lies within those bits of an fp32
   rounding boundary (some 1e-8 of steps). */

/* GPT2RT__CU_CK (8.5) with ctx a stage's host context */

/* stage s's device shadow for micro-batch k */
static gpt2rt_ctx *gpt2rt__ls_cu_set(gpt2rt__ls *ls, int s, int k) {
    return &ls->cudev[s * ls->m + k];
}

/* bytes from src (stage `from`'s device) to dst (stage s's), ordered on stage s's
   stream. The source is at rest: its stage synchronised its stream before counting it
   done. Through the host: chunks of the pinned staging buffer, synchronously. */
static cudaError_t gpt2rt__ls_cu_pull(gpt2rt__ls *ls, int s, int from, void *dst, const void *src, size_t bytes) {
    gpt2rt__cu_state *st = ls->cu[s], *sf = ls->cu[from];
    if (st->device == sf->device) return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream);
    if (ls->peer[s][from]) return cudaMemcpyPeerAsync(dst, st->device, src, sf->device, bytes, st->stream);
    for (size_t o = 0; o < bytes; o += st->stage_bytes) {
        size_t n = bytes - o < st->stage_bytes ? bytes - o : st->stage_bytes;
        cudaError_t e = cudaStreamSynchronize(st->stream); /* the staging buffer is free again */
        if (e == cudaSuccess) e = cudaSetDevice(sf->device);
        if (e == cudaSuccess) e = cudaMemcpy(st->h_stage, (const unsigned char *)src + o, n, cudaMemcpyDeviceToHost);
        cudaError_t e2 = cudaSetDevice(st->device);
        if (e == cudaSuccess) e = e2;
        if (e == cudaSuccess)
            e = cudaMemcpyAsync((unsigned char *)dst + o, st->h_stage, n, cudaMemcpyHostToDevice, st->stream);
        if (e != cudaSuccess) return e;
    }
    return cudaStreamSynchronize(st->stream);
}

/* the forward of stage s on micro-batch k; the last stage also takes the loss (the
   classifier writes dlogits in the same pass, as gpt2rt_step's on one device) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_forward(gpt2rt__ls *ls, int s, int k) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span sp = st->span;
    const gpt2rt__backend *be = &gpt2rt__cu_layers;
    const int64_t BT = d->BT;
    const size_t act = (size_t)(BT * d->C * d->act_bytes);
    cudaStream_t cs = st->stream;
    st->phase = "layer split forward";
    st->layer = -1;
    if (sp.first) {
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->inputs, (const int32_t *)ls->a + k * BT, (size_t)BT * 4,
                                      cudaMemcpyHostToDevice, cs));
        GPT2RT__TRY(be->embed_forward(ctx));
    } else
        GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, s - 1, dv->x0, gpt2rt__lacts(gpt2rt__ls_cu_set(ls, s - 1, k), sp.l0 - 1).res3,
                                         act));
    /* the span's layers; the copy into the next stage's first checkpoint is the pull's */
    GPT2RT__TRY(gpt2rt__model_layers_forward(ctx, be, dv, sp.l0, sp.l1 - 1));
    GPT2RT__TRY(be->layer_forward(ctx, sp.l1 - 1, gpt2rt__model_layer_input(dv, sp.l1 - 1), gpt2rt__lacts(dv, sp.l1 - 1)));
    if (sp.last) {
        const int32_t *tg = (const int32_t *)ls->b + k * BT;
        const float *res = gpt2rt__lacts(dv, d->L - 1).res3;
        if (d->recompute == GPT2RT_RECOMPUTE_FULL) { /* the slots are reused: keep the last output */
            GPT2RT__TRY(be->copy(ctx, dv->xout, res, act));
            res = dv->xout;
        }
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->targets, tg, (size_t)BT * 4, cudaMemcpyHostToDevice, cs));
        GPT2RT__TRY(be->head_forward(ctx, res));
        float dloss = st->loss_scale / (float)(BT * st->cfg.grad_accum);
        GPT2RT__CU_CK(gpt2rt__cu_classifier<X>((X *)dv->logits, dv->losses, dv->logit_lse, dv->targets, dloss, 1, BT,
                                               d->V, d->Vp, cs));
        st->dlogits_ready = 1;
        GPT2RT__CU_CK(cudaMemcpyAsync(st->h_losses, dv->losses, (size_t)BT * 4, cudaMemcpyDeviceToHost, cs));
        GPT2RT__CU_CK(cudaStreamSynchronize(cs));
        double total = 0.0; /* the CPU's sum: in order, in double, over the counted targets */
        int64_t n = 0;
        for (int64_t i = 0; i < BT; i++)
            if (tg[i] >= 0) { total += st->h_losses[i]; n++; }
        ls->loss_sum[k] = total;
        ls->n_targets[k] = n;
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(cs));
    return GPT2RT_OK;
}

/* the backward of stage s on micro-batch k: from the head (last stage) or the gradient
   stage s+1 left in its x0, down to the embedding (first stage: wpe's gradient) or the
   stage's input; then d(input) into x0 of set k for the stage before (the first
   stage: for the last stage's part of the wte gradient) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_backward(gpt2rt__ls *ls, int s, int k) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span sp = st->span;
    const gpt2rt__backend *be = &gpt2rt__cu_layers;
    const size_t act = (size_t)(d->BT * d->C * d->act_bytes);
    st->phase = "layer split backward";
    st->layer = -1;
    st->acc = k > 0; /* the first micro-batch after an update overwrites, as one device's */
    if (sp.last) {
        const float *res = d->recompute == GPT2RT_RECOMPUTE_FULL ? dv->xout : gpt2rt__lacts(dv, d->L - 1).res3;
        GPT2RT__TRY(be->head_backward(ctx, res, st->loss_scale / (float)(d->BT * st->cfg.grad_accum)));
    } else
        GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, s + 1, dv->dres, gpt2rt__ls_cu_set(ls, s + 1, k)->x0, act));
    GPT2RT__TRY(gpt2rt__model_layers_backward(ctx, be, dv, sp.l0, sp.l1));
    if (sp.first) GPT2RT__TRY(be->embed_backward(ctx));
    if (!sp.first || ls->order) GPT2RT__TRY(be->copy(ctx, dv->x0, dv->dres, act));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* the last stage: the embedding's part of the wte gradient of micro-batch k, from the
   first stage's d(x0) (pulled into dbuf, free between backwards) and k's token buckets */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_embed_wte(gpt2rt__ls *ls, int k) {
    int s = ls->n - 1;
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    int64_t nbi = gpt2rt__cu_encoder_bucket_ints(d->BT);
    st->phase = "layer split wte gradient";
    st->layer = -1;
    GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, 0, dv->dbuf, gpt2rt__ls_cu_set(ls, 0, k)->x0,
                                     (size_t)(d->BT * d->C * d->act_bytes)));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->buckets_ws, ls->h_buckets + k * nbi, (size_t)nbi * 4, cudaMemcpyHostToDevice,
                                  st->stream));
    GPT2RT__CU_CK(gpt2rt__cu_encoder_backward<X>(gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE)), NULL,
                                                 (const X *)dv->dbuf, st->buckets_ws, ls->nb[k], d->B, d->T, d->C,
                                                 st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

#define GPT2RT__LS_CU_BY_TYPE(st, fn, ...) \
    ((st)->xt == CUDA_R_32F ? fn<float>(__VA_ARGS__) \
     : (st)->xt == CUDA_R_16BF ? fn<__nv_bfloat16>(__VA_ARGS__) : fn<__half>(__VA_ARGS__))

/* a stage's thread: the CPU schedule (gpt2rt__ls_stage) on its device; a failure is
   kept in ls->res[s] (the message in hs[s]) and stops the others */
static void *gpt2rt__ls_cu_stage(void *p) {
    gpt2rt__ls_job *j = (gpt2rt__ls_job *)p;
    gpt2rt__ls *ls = j->ctx->ls;
    int s = j->s, m = ls->m, last = s == ls->n - 1;
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt_result r = GPT2RT_OK;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) r = gpt2rt__cu_fail(ctx, st, e, "cudaSetDevice");
    for (int k = 0; k < m && r == GPT2RT_OK; k++) {
        if (s && !gpt2rt__ls_wait(ls, &ls->fwd[s - 1], k)) return NULL;
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_forward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->fwd[s]);
        if (!last) continue;
        if (ls->order && k) { /* embed(k-1) before head(k) */
            if (!gpt2rt__ls_wait(ls, &ls->bwd[0], k - 1)) return NULL;
            if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_embed_wte, ls, k - 1)) != GPT2RT_OK) break;
        }
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_backward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->bwd[s]);
    }
    for (int k = 0; k < m && !last && r == GPT2RT_OK; k++) {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[s + 1], k)) return NULL;
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_backward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->bwd[s]);
    }
    if (r == GPT2RT_OK && last && ls->order) {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[0], m - 1)) return NULL;
        r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_embed_wte, ls, m - 1);
    }
    if (r != GPT2RT_OK) {
        pthread_mutex_lock(&ls->mu);
        ls->res[s] = r;
        ls->stop = 1;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
    }
    return NULL;
}

/* stage s's AdamW over its parameters (gpt2rt__cu_update_t's launches) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_adamw(gpt2rt__ls *ls, int s, float lr, float grad_scale, int64_t t) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    const gpt2rt_config *c = &st->cfg;
    gpt2rt__cu_adamw_tensor *d_tab = (gpt2rt__cu_adamw_tensor *)(void *)((unsigned char *)st->red + 16);
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(d_tab, st->h_adamw, (size_t)st->n_adamw * sizeof(gpt2rt__cu_adamw_tensor),
                                  cudaMemcpyHostToDevice, st->stream));
    for (int r = 0; r < st->n_runs; r++) {
        const gpt2rt__cu_adamw_run *run = &st->runs[r];
        float *params = st->master ? st->master : (float *)st->w + run->delta;
        X *params_x = st->master ? (X *)st->w + run->delta : NULL;
        GPT2RT__CU_CK(gpt2rt__cu_adamw<X>(params, params_x, st->grads, st->m, st->v, d_tab + run->i0, run->n,
                                          run->blocks, lr, c->beta1, c->beta2, c->eps, c->weight_decay, t, grad_scale,
                                          st->stream));
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->host_stale = 1;
    return GPT2RT_OK;
}

/* a stage's failure as the context's */
static gpt2rt_result gpt2rt__ls_cu_fail(gpt2rt_ctx *ctx, int s, gpt2rt_result r) {
    return gpt2rt__fail(ctx, r, "layer split, stage %d (device %d): %.3900s", s, ctx->ls->cu[s]->device,
                        ctx->ls->hs[s].error);
}

/* the update after the pipelined micro-batches (the CUDA backend's update over the
   stages, inside gpt2rt__opt_update): the global norm, one device's skip, clip and
   loss-scale rules, each stage's AdamW, then wte's new weights to the first stage */
static gpt2rt_result gpt2rt__ls_cu_adamw_stages(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *od,
                                                float *loss_scale) {
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n;
    double sumsq = 0.0;
    if (ctx->acc_targets) {
        for (int s = 0; s < n; s++) {
            gpt2rt_ctx *hs = &ls->hs[s];
            gpt2rt__cu_state *st = ls->cu[s];
            st->phase = "layer split update";
            st->layer = -1;
            cudaError_t e = cudaSetDevice(st->device);
            if (e == cudaSuccess) e = gpt2rt__cu_global_norm(NULL, (double *)(void *)st->red, st->grads, st->n_train,
                                                             st->norm_parts, st->stream);
            if (e == cudaSuccess) e = cudaMemcpyAsync(st->h_norm, st->red, sizeof(double), cudaMemcpyDeviceToHost,
                                                      st->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, s, gpt2rt__cu_fail(hs, st, e, "the gradient norm"));
            sumsq += st->h_norm[0];
        }
    }
    gpt2rt__opt_decision o = gpt2rt__opt_policy(ctx, sqrt(sumsq), &ls->loss_scale, &ls->clean_steps);
    *od = o;
    if (o.skipped) {
        for (int s = 0; s < n; s++) {
            gpt2rt__cu_state *st = ls->cu[s];
            cudaError_t e = cudaSetDevice(st->device);
            if (e == cudaSuccess) e = cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, s, gpt2rt__cu_fail(&ls->hs[s], st, e, "zeroing"));
        }
    } else {
        for (int s = 0; s < n; s++) {
            gpt2rt__cu_state *st = ls->cu[s];
            gpt2rt_result r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_adamw, ls, s, lr, o.grad_scale, ctx->step + 1);
            if (r != GPT2RT_OK) return gpt2rt__ls_cu_fail(ctx, s, r);
        }
        const gpt2rt__tensor *w0 = gpt2rt__model_tensor(&ls->hs[0], GPT2RT__WTE);
        const gpt2rt__tensor *wl = gpt2rt__model_tensor(&ls->hs[n - 1], GPT2RT__WTE);
        if (!ctx->d.patches && wl->goff >= 0) { /* the first stage's copy of wte for the embedding */
            gpt2rt__cu_state *s0 = ls->cu[0], *sl = ls->cu[n - 1];
            size_t wb = (size_t)ctx->d.weight_bytes;
            cudaError_t e = cudaSetDevice(s0->device);
            if (e == cudaSuccess) e = gpt2rt__ls_cu_pull(ls, 0, n - 1, (unsigned char *)s0->w + (size_t)w0->off * wb,
                                                         (const unsigned char *)sl->w + (size_t)wl->off * wb,
                                                         (size_t)(wl->rows * wl->cols) * wb);
            if (e == cudaSuccess) e = cudaStreamSynchronize(s0->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, 0, gpt2rt__cu_fail(&ls->hs[0], s0, e, "wte to stage 0"));
        }
        ctx->step++;
    }
    for (int s = 0; s < n; s++) ls->cu[s]->loss_scale = ls->loss_scale;
    *loss_scale = ls->loss_scale;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__ls_cu_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    return gpt2rt__opt_update(ctx, gpt2rt__ls_cu_adamw_stages, stats);
}

/* gpt2rt_param_read on a CUDA layer split: the stage that trains the tensor (weights of
   a frozen one: the host's, they never change) */
static gpt2rt_result gpt2rt__ls_cu_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                              float *dst) {
    gpt2rt__ls *ls = ctx->ls;
    int i = (int)(t - ctx->tensors), owner = -1;
    if (t->goff < 0) { /* frozen: its weights (11.6 refused the rest) */
        gpt2rt__param_out(t, ctx->params + t->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    for (int s = 0; s < ls->n; s++)
        if (ls->hs[s].tensors[i].goff >= 0) owner = s;
    if (owner < 0) return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_param_read: no stage trains '%s'", t->name);
    gpt2rt_ctx *hs = &ls->hs[owner];
    gpt2rt__cu_state *st = ls->cu[owner];
    const gpt2rt__tensor *ts = &hs->tensors[i];
    gpt2rt_result r;
    if (what == GPT2RT_PARAM_VALUE) {
        if (st->host_stale && (r = gpt2rt__cu_download_params(hs, st)) != GPT2RT_OK)
            return gpt2rt__ls_cu_fail(ctx, owner, r);
        gpt2rt__param_out(t, hs->params + ts->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    size_t n = (size_t)(t->rows * t->cols);
    float *tmp = (float *)gpt2rt__alloc(&ctx->cfg, n * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %zu floats", n);
    r = gpt2rt__cu_read_tensor(hs, st, ts, what, tmp);
    float k = what == GPT2RT_PARAM_GRAD ? (float)(gpt2rt__opt_grad_unscale(ctx) / (double)ls->loss_scale) : 1.0f;
    if (r == GPT2RT_OK) gpt2rt__param_out(t, tmp, k, dst);
    gpt2rt__free(&ctx->cfg, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r == GPT2RT_OK ? r : gpt2rt__ls_cu_fail(ctx, owner, r);
}

/* the device arenas of every stage, and its further activation sets */
static void gpt2rt__ls_cu_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    const gpt2rt__ls *ls = ctx->ls;
    plan->n_devices = ls->n;
    for (int s = 0; s < ls->n; s++) {
        const gpt2rt__cu_state *st = ls->cu[s];
        plan->total[s] = 0; /* the devices' arenas only: the host holds the fp32 weights */
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
            plan->bytes[s][i] = st->allocated[i];
            if (i == GPT2RT_MEM_ACTIVATIONS) plan->bytes[s][i] += (uint64_t)(ls->m - 1) * st->bytes[i];
            plan->total[s] += plan->bytes[s][i];
        }
        plan->overhead[s] = st->overhead;
    }
}

static void gpt2rt__ls_cu_free(gpt2rt_ctx *ctx, gpt2rt__ls *ls) {
    for (int s = 0; s < ls->n; s++) {
        if (ls->cu[s]) {
            (void)cudaSetDevice(ls->cu[s]->device);
            (void)cudaDeviceSynchronize();
            for (int k = 0; ls->cuacts && k < ls->m; k++)
                if (ls->cuacts[s * ls->m + k]) (void)cudaFree(ls->cuacts[s * ls->m + k]);
            ls->cu[s]->dev = ls->dev0[s];
            gpt2rt__cu_free(ls->cu[s]);
            ls->cu[s] = NULL;
        }
        if (ls->hs) {
            gpt2rt__free(&ctx->cfg, ls->hs[s].tensors, GPT2RT_MEM_BOOKKEEPING);
            gpt2rt__free(&ctx->cfg, ls->hs[s].params, GPT2RT_MEM_BOOKKEEPING);
        }
    }
    (void)cudaGetLastError();
    gpt2rt__free(&ctx->cfg, ls->hs, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->cudev, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->cuacts, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->h_buckets, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->nb, GPT2RT_MEM_BOOKKEEPING);
}

/* before the stages start: the wte gradient's token buckets of every micro-batch
   (a: the step's checked tokens) */
static void gpt2rt__ls_cu_begin(gpt2rt_ctx *ctx, const void *a) {
    gpt2rt__ls *ls = ctx->ls;
    int64_t BT = ctx->d.BT, nbi = gpt2rt__cu_encoder_bucket_ints(BT);
    for (int k = 0; ls->order && k < ls->m; k++)
        ls->nb[k] = gpt2rt__cu_encoder_buckets(ls->h_buckets + k * nbi, (const int32_t *)a + k * BT, BT, ctx->d.Vp);
    for (int s = 0; s < ls->n; s++) ls->res[s] = GPT2RT_OK;
}

/* after the stages joined: each state's own shadow back; a stage that failed stopped
   the others, so what the stages summed is dropped */
static gpt2rt_result gpt2rt__ls_cu_end(gpt2rt_ctx *ctx) {
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n;
    for (int s = 0; s < n; s++) ls->cu[s]->dev = ls->dev0[s];
    for (int s = 0; s < n; s++)
        if (ls->res[s] != GPT2RT_OK) {
            for (int i = 0; i < n; i++) {
                (void)cudaSetDevice(ls->cu[i]->device);
                (void)cudaStreamSynchronize(ls->cu[i]->stream);
                (void)cudaMemset(ls->cu[i]->grads, 0, (size_t)ls->cu[i]->n_train * 4);
                (void)cudaDeviceSynchronize();
            }
            (void)cudaGetLastError();
            gpt2rt__accum_reset(ctx);
            return gpt2rt__ls_cu_fail(ctx, s, ls->res[s]);
        }
    return GPT2RT_OK;
}

static const gpt2rt__ls_ops gpt2rt__ls_cu_ops = {
    /* .release    = */ gpt2rt__ls_cu_free,
    /* .begin      = */ gpt2rt__ls_cu_begin,
    /* .stage      = */ gpt2rt__ls_cu_stage,
    /* .end        = */ gpt2rt__ls_cu_end,
    /* .update     = */ gpt2rt__ls_cu_update,
    /* .param_read = */ gpt2rt__ls_cu_param_read,
    /* .allocated  = */ gpt2rt__ls_cu_allocated
};

/* gpt2rt_create, CUDA layer split (ctx->cfg resolved): the memory budget against each
   device's plan and the further activation sets, the host table and fp32 weights,
   initialised, then each stage: its host context, its device state (which uploads its
   weights), its further activation sets and their shadows; peer access between the
   devices that exchange activations */
static gpt2rt_result gpt2rt__ls_cu_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    int n = ctx->cfg.n_devices, m = ctx->cfg.grad_accum;
    for (int s = 0; s < n && ctx->cfg.memory_budget; s++) {
        /* the plan counts the activations of all m micro-batches GPipe keeps in flight (3.3) */
        uint64_t need = plan->total[s];
        if (need > ctx->cfg.memory_budget)
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split stage %d needs %.2f GiB on "
                                "device %d (its plan, with the activations of the %d micro-batches GPipe keeps in "
                                "flight, %.2f GiB each), memory_budget is %.2f GiB; nothing was allocated", s,
                                GPT2RT__GIB(need), ctx->cfg.device_ids[s], m,
                                GPT2RT__GIB(plan->bytes[s][GPT2RT_MEM_ACTIVATIONS] / (uint64_t)m),
                                GPT2RT__GIB(ctx->cfg.memory_budget));
    }
    gpt2rt_result hr = gpt2rt__cu_host_alloc(ctx);
    if (hr != GPT2RT_OK) return hr;

    gpt2rt__ls *ls = (gpt2rt__ls *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__ls), GPT2RT_MEM_BOOKKEEPING);
    if (!ls) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stages");
    memset(ls, 0, sizeof *ls);
    if (pthread_mutex_init(&ls->mu, NULL) != 0 || pthread_cond_init(&ls->cv, NULL) != 0) {
        gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the stages failed");
    }
    ctx->ls = ls;
    ls->n = n; ls->m = m;
    ls->ops = &gpt2rt__ls_cu_ops;
    ls->order = !(ctx->d.frozen & GPT2RT_GROUP_TOKEN_EMBED);
    ls->loss_scale = ctx->cfg.precision == GPT2RT_PRECISION_FP16 ? ctx->cfg.loss_scale : 1.0f;
    int64_t nbi = gpt2rt__cu_encoder_bucket_ints(ctx->d.BT);
    ls->loss_sum = (double *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(double), GPT2RT_MEM_BOOKKEEPING);
    ls->n_targets = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    ls->hs = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)n * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->cudev = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->cuacts = (void **)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(void *), GPT2RT_MEM_BOOKKEEPING);
    ls->h_buckets = (int32_t *)gpt2rt__alloc(&ctx->cfg, (size_t)(m * nbi) * 4, GPT2RT_MEM_BOOKKEEPING);
    ls->nb = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    if (!ls->loss_sum || !ls->n_targets || !ls->hs || !ls->cudev || !ls->cuacts || !ls->h_buckets || !ls->nb)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stage table");
    memset(ls->hs, 0, (size_t)n * sizeof(gpt2rt_ctx));
    memset(ls->cuacts, 0, (size_t)(n * m) * sizeof(void *));
    for (int s = 0; s < n; s++) {
        gpt2rt_ctx *hs = &ls->hs[s];
        gpt2rt__span sp = gpt2rt__span_of(&ctx->cfg, s);
        memcpy(hs, ctx, sizeof *hs);
        hs->ls = NULL;
        hs->cu = NULL;
        hs->cfg.log = NULL; /* the stages report through the context */
        hs->tensors = NULL;
        hs->params = NULL;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) { hs->arena[i] = NULL; hs->arena_bytes[i] = 0; }
        hs->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                      GPT2RT_MEM_BOOKKEEPING);
        if (!hs->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: stage %d's table", s);
        gpt2rt__span_params(&ctx->d, &sp, hs->tensors, &hs->n_params, &hs->n_train);
        hs->params = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)hs->n_params * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
        if (!hs->params)
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: %lld bytes of host memory for stage "
                                "%d's weights", (long long)hs->n_params * 4, s);
        memset(hs->params, 0, (size_t)hs->n_params * sizeof(float));
        for (int i = 0; i < ctx->n_tensors; i++)
            if (hs->tensors[i].rows)
                memcpy(hs->params + hs->tensors[i].off, ctx->params + ctx->tensors[i].off,
                       (size_t)(hs->tensors[i].rows * hs->tensors[i].cols) * sizeof(float));
        char err[2048];
        gpt2rt_result r = gpt2rt__cu_create_span(hs, &ctx->cfg, &sp, ctx->cfg.device_ids[s], &ls->cu[s], err, sizeof err);
        if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: layer split stage %d (layers %lld..%lld): %s", s,
                                                (long long)sp.l0, (long long)sp.l1 - 1, err);
        gpt2rt__cu_state *st = ls->cu[s];
        hs->cu = st;
        ls->dev0[s] = st->dev;
        for (int k = 0; k < m; k++) {
            gpt2rt_ctx *dv = &ls->cudev[s * m + k];
            memcpy(dv, st->dev, sizeof *dv);
            if (k == 0) continue; /* the state's own activations */
            (void)cudaSetDevice(st->device);
            cudaError_t e = cudaMalloc(&ls->cuacts[s * m + k], (size_t)st->bytes[GPT2RT_MEM_ACTIVATIONS]);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                ls->cuacts[s * m + k] = NULL;
                return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split stage %d: cudaMalloc of "
                                    "%.1f MiB for the activations of micro-batch %d of grad_accum = %d on device %d "
                                    "failed: %s", s, GPT2RT__MIB(st->bytes[GPT2RT_MEM_ACTIVATIONS]), k, m, st->device,
                                    cudaGetErrorString(e));
            }
            dv->arena[GPT2RT_MEM_ACTIVATIONS] = ls->cuacts[s * m + k];
            uint64_t bytes[GPT2RT_MEM_COUNT];
            gpt2rt__layout(&st->d, &sp, bytes, dv); /* the state's carving, on this set */
        }
        gpt2rt__cu_measure(st);
    }
    /* peer access between the devices that exchange: neighbours, and the last with the first (wte) */
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int da = ctx->cfg.device_ids[a], db = ctx->cfg.device_ids[b], ab = 0, ba = 0;
            if (a == b || da == db || !(b == a + 1 || a == b + 1 || (a == 0 && b == n - 1) || (b == 0 && a == n - 1)))
                continue;
            if (cudaDeviceCanAccessPeer(&ab, da, db) != cudaSuccess || cudaDeviceCanAccessPeer(&ba, db, da) != cudaSuccess)
                ab = ba = 0;
            if (ab && ba && cudaSetDevice(da) == cudaSuccess) {
                cudaError_t e = cudaDeviceEnablePeerAccess(db, 0);
                ls->peer[a][b] = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
            }
            (void)cudaGetLastError();
        }
    for (int a = 0; a < n; a++) /* both ways, or neither: a copy goes through the host then */
        for (int b = 0; b < a; b++) ls->peer[a][b] = ls->peer[b][a] = ls->peer[a][b] && ls->peer[b][a];
    return GPT2RT_OK;
}
#undef GPT2RT__LS_CU_BY_TYPE
#endif /* GPT2RT__COMM_THREADS */

#endif /* GPT2RT__SRC_CUDA_STAGES_CUH */
