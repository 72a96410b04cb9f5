/* backend/interface.h - the backend table (gpt2rt__backend); init, host arenas, out of memory, dp collectives
   may call: what its includes name (common/, plan/, optimizer.h) */
#ifndef GPT2RT__SRC_BACKEND_INTERFACE_H
#define GPT2RT__SRC_BACKEND_INTERFACE_H
#include "../common/threads.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../plan/params.h"
#include "../plan/activations.h"
#include "../plan/split.h"
#include "../plan/plan.h"
#include "../plan/advisor.h"
#include "../optimizer.h"

/* What a backend gives the model driver (7.3, end): the steps of GPT-2, each on the
   arenas that gpt2rt__layout carved for it (the CPU: the context's own; the CUDA
   backend: its device arenas, carved by the same function on a shadow context).
   Each returns GPT2RT_OK or a result with ctx's message set. Buffers are the
   context's: x0, layer blocks, lnf, logits, and dres, which carries the gradient
   of the residual stream down the backward.
   Below the layer steps, the step-level work of the public calls (10, 11; the CPU's in
   7.4): a context's backend (ctx->be) runs its forwards, backwards, updates, host copies
   and data-parallel reductions, so sections 10-11 never ask which backend they drive. */
typedef struct gpt2rt__backend {
    /* x0 (BT,C) = wte[inputs] + wpe; patches: in_layer(patches) + wpe */
    gpt2rt_result (*embed_forward)(gpt2rt_ctx *ctx);
    /* layer l from res (BT,C) into a; also the recompute of FULL, which must give
       bitwise the same values */
    gpt2rt_result (*layer_forward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* ln_f of res (BT,C), then logits (BT,Vp); patches: out_layer, (B*M,H) */
    gpt2rt_result (*head_forward)(gpt2rt_ctx *ctx, const float *res);
    /* logits -> dlogits (scaled by dloss), the tied head's and ln_f's gradients;
       dres = d(res); patches: the MSE's gradient, out_layer's */
    gpt2rt_result (*head_backward)(gpt2rt_ctx *ctx, const float *res, float dloss);
    /* dres holds d(layer l's output) and becomes d(res), the layer's input res
       (BT,C); weight gradients += */
    gpt2rt_result (*layer_backward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* wte, wpe gradients += from dres; patches: wpe, in_layer */
    gpt2rt_result (*embed_backward)(gpt2rt_ctx *ctx);
    /* bytes from src to dst, both in the backend's arenas */
    gpt2rt_result (*copy)(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes);

    /* ---- step level: the context is the public one (a data-parallel rank's own) ---- */
    /* inputs, targets: host (B,T), checked (targets may be NULL): the logits, with targets
       the loss (*loss if not NULL, ctx->loss, loss_sum, n_targets); sets have_logits and
       have_loss. fuse: gpt2rt_step's forward, whose backward follows at once (CUDA: the
       classifier writes dlogits in the same pass, and no logits are kept) */
    gpt2rt_result (*forward)(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss, int fuse);
    /* x (Bw,Lb,M), y (Bw,H,M) or NULL, checked: the predictions and the loss, as forward */
    gpt2rt_result (*forward_series)(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
    /* += the gradients of the last forward's loss, one fixed scale for every micro-batch */
    gpt2rt_result (*backward)(gpt2rt_ctx *ctx);
    /* one AdamW step at lr over the gradients summed since the last update (data parallel:
       summed over the ranks first); the policy (9) decides, *o says what it decided,
       *loss_scale is the next backward's. Advances ctx->step unless skipped. */
    gpt2rt_result (*update)(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);
    /* the gradients (and with moments, m and v) to zero */
    gpt2rt_result (*zero_grads)(gpt2rt_ctx *ctx, int moments);
    /* the last forward's logits (BT,V) / predictions (Bw,H,M) into host memory */
    gpt2rt_result (*logits)(gpt2rt_ctx *ctx, float *dst);
    gpt2rt_result (*predictions)(gpt2rt_ctx *ctx, float *dst);
    /* data parallel (10.1): sum the gradient pieces {first float, count} over the ranks
       (scatter: ZeRO-1's one reduce-scatter of the whole gradient) */
    gpt2rt_result (*dp_reduce)(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter);
    /* ctx->params caught up with the weights this context trains (ZeRO-1 with a CUDA
       master: the trained floats of its shard; the executor, 10.1, asks every rank) */
    gpt2rt_result (*host_weights)(gpt2rt_ctx *ctx);
    /* ctx->params to where this context trains them, and the moments m, v (n_train floats
       each, goff order; NULL: untouched) of its shard [opt_lo, opt_hi) */
    gpt2rt_result (*upload)(gpt2rt_ctx *ctx, const float *m, const float *v);
    /* of the trained floats [lo, hi), the part in this context's shard [opt_lo, opt_hi)
       to its place in dst (hi - lo floats; the rest untouched): the moment m or v, or the
       gradient (ZeRO-1: once the reduce-scatter summed it there) times unscale */
    gpt2rt_result (*shard_read)(gpt2rt_ctx *ctx, gpt2rt_param_what what, int64_t lo, int64_t hi, double unscale,
                                float *dst);
    /* tensor t's value, gradient or moment (checked by 11.6: dst of its size, t trained
       but for a value); the raw gradient times unscale is the one read: the executor's
       (10) count of the targets */
    gpt2rt_result (*param_read)(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what, double unscale,
                                float *dst);
    /* the bytes of each category this context holds, and the driver's own (measured) */
    void (*allocated)(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead);
    /* data parallel, at creation: rank r >= 1's context rc (zeroed; cfg, d and be set) made
       like ctx (rank 0), then, once every rank is attached, what the ranks share */
    gpt2rt_result (*dp_rank)(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan);
    gpt2rt_result (*dp_open)(gpt2rt_ctx *ctx);
    /* at gpt2rt_free: before the ranks are freed (shared), then the context's own */
    void (*release_shared)(gpt2rt_ctx *ctx);
    void (*release)(gpt2rt_ctx *ctx);
    /* generation (11.7): one pass of N new tokens over the KV cache, ctx->kv's tok, row,
       pos on the host, and the logits of the M tokens kv->sel lists in kv->logits (M,Vp)
       on the host */
    gpt2rt_result (*decode)(gpt2rt_ctx *ctx, int64_t N, int64_t M);
} gpt2rt__backend;

/* N(0, std) for every element, from a stream seeded per (tensor, 4096-chunk) so the
   result does not depend on the thread count */
static void gpt2rt__init_normal(float *x, uint16_t *x16, int64_t n, float std, uint64_t seed, int nt) {
    int64_t nch = (n + 4095) / 4096;
    GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)n))
    for (int64_t ch = 0; ch < nch; ch++) {
        uint64_t s = seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(ch + 1));
        gpt2rt__rng_next(&s);
        int64_t i1 = (ch + 1) * 4096 < n ? (ch + 1) * 4096 : n;
        for (int64_t i = ch * 4096; i < i1; i += 2) {
            double u1 = gpt2rt__rng_uniform(&s), u2 = gpt2rt__rng_uniform(&s);
            double r = sqrt(-2.0 * log(u1)) * std;
            float a = (float)(r * cos(2.0 * GPT2RT__PI * u2)), b = (float)(r * sin(2.0 * GPT2RT__PI * u2));
            if (x16) { /* bf16 weights: the fp32 draw, rounded (as a load of it would be) */
                x16[i] = gpt2rt__bf16_round(a);
                if (i + 1 < i1) x16[i + 1] = gpt2rt__bf16_round(b);
            } else {
                x[i] = a;
                if (i + 1 < i1) x[i + 1] = b;
            }
        }
    }
}

static void gpt2rt__init_params(gpt2rt_ctx *ctx) {
    float resid_std = 0.02f / sqrtf(2.0f * (float)ctx->d.L);
    uint64_t s = ctx->cfg.seed;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        float *p = ctx->params ? ctx->params + t->off : NULL;
        uint16_t *p16 = ctx->params16 ? ctx->params16 + t->off : NULL; /* inference_weights = BF16 */
        int64_t n = t->rows * t->cols, n_file = t->hf_rows * t->cols;
        uint64_t ts = gpt2rt__rng_next(&s); /* one draw per tensor, used or not */
        switch (t->row->init) {
        case GPT2RT__INIT_NORMAL:
        case GPT2RT__INIT_RESID:
            gpt2rt__init_normal(p, p16, n_file, t->row->init == GPT2RT__INIT_RESID ? resid_std : 0.02f, ts,
                                ctx->d.n_threads);
            for (int64_t j = n_file; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 0.0f); /* padded vocab rows */
            break;
        case GPT2RT__INIT_ONES:
            for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 1.0f);
            break;
        case GPT2RT__INIT_ZEROS:
            for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 0.0f);
            break;
        }
    }
    ctx->rng = s;
}

/* bytes the OS could give us now (Linux MemAvailable); 0 when unknown */
static uint64_t gpt2rt__host_available(void) {
#ifdef __linux__
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
#else
    return 0;
#endif
}

/* The out-of-memory message: what failed, the free memory, the plan's categories,
   and what the advisor would change to fit. budget 0: use free_bytes (if known). */
static gpt2rt_result gpt2rt__fail_oom(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, uint64_t budget,
                                      uint64_t free_bytes, const char *what, int allocation_failed) {
    char table[1400], advice[1400], head[400], fb[64] = "unknown";
    gpt2rt_plan_format(plan, table, sizeof table);
    if (free_bytes) snprintf(fb, sizeof fb, "%.2f %s", GPT2RT__SZ(free_bytes));
    if (!budget) budget = free_bytes;
    if (allocation_failed)
        snprintf(head, sizeof head, "%s; %.2f %s planned in all, %s free", what, GPT2RT__SZ(plan->total[0]), fb);
    else
        snprintf(head, sizeof head, "the plan needs %.2f %s (%llu bytes), the budget is %.2f %s (%llu bytes), "
                 "%s free; nothing was allocated", GPT2RT__SZ(plan->total[0]), (unsigned long long)plan->total[0],
                 GPT2RT__SZ(budget), (unsigned long long)budget, fb);
    advice[0] = 0;
    if (budget) {
        gpt2rt_config fit;
        size_t k = (size_t)snprintf(advice, sizeof advice, "what would fit %.2f %s:\n", GPT2RT__SZ(budget));
        gpt2rt_fit(&plan->config, budget, GPT2RT_FIT_DEFAULT, &fit, advice + k, sizeof advice - k);
    }
    return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: out of memory: %s\n%s%s", head, table, advice);
}

/* the parameter table and the arenas of the plan's device 0, the pointers bound */
static gpt2rt_result gpt2rt__ctx_alloc(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    ctx->n_tensors = gpt2rt__param_table(&ctx->d, NULL, NULL, NULL);
    ctx->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                   GPT2RT_MEM_BOOKKEEPING);
    if (!ctx->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: parameter table");
    gpt2rt__param_table(&ctx->d, ctx->tensors, NULL, NULL);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        uint64_t b = plan->bytes[0][i];
        if (!b) continue;
        ctx->arena[i] = gpt2rt__alloc(&ctx->cfg, (size_t)b, i);
        if (!ctx->arena[i]) {
            char what[160];
            snprintf(what, sizeof what, "allocating %llu bytes (%.1f MiB) for %s failed",
                     (unsigned long long)b, GPT2RT__MIB(b), gpt2rt_mem_name((gpt2rt_mem)i));
            return gpt2rt__fail_oom(ctx, plan, 0, gpt2rt__host_available(), what, 1);
        }
        ctx->arena_bytes[i] = b;
    }
    gpt2rt__span whole = gpt2rt__span_of(&ctx->cfg, 0);
    if (ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT) { /* the CPU stages share one context: all of it */
        whole.l0 = 0; whole.l1 = ctx->d.L; whole.first = whole.last = 1;
    }
    uint64_t bytes[GPT2RT_MEM_COUNT];
    memcpy(bytes, plan->bytes[0], sizeof bytes);
    gpt2rt__layout(&ctx->d, &whole, bytes, ctx); /* binds the pointers; same sizes as planned */
    return GPT2RT_OK;
}

/* ---- data parallel (10.1): the collectives a backend's backward and update call ---- */
/* A rank of data parallel is an ordinary context whose comm has size > 1: the
   in-process ranks (threads, below) or one process of several (MPI). Its forward and
   backward are the one-device ones on its rows; the gradients are summed over the
   ranks in buckets as the backward finishes them, on the last micro-step only:
   each layer's as soon as its backward is done (the ranks wait for each other
   there, so the reduction of layer l runs while the faster ranks would otherwise idle;
   the CUDA backend overlaps it with layer l-1 on the communicator's stream, 8.6), the embeddings'
   and ln_f's last. ZeRO-1 instead reduce-scatters the whole gradient once, so that
   each rank's shard is the one it updates. The update then agrees on the global
   loss, target count and gradient norm, and (ZeRO-1) all-gathers the weights. */

/* [*lo, *hi): the trained floats of layer l; l = -1: of every layer together. 0: none */
static int gpt2rt__dp_layer_range(const gpt2rt_ctx *ctx, int64_t l, int64_t *lo, int64_t *hi) {
    int64_t l0 = l < 0 ? 0 : l, l1 = l < 0 ? ctx->d.L : l + 1;
    *lo = INT64_MAX; *hi = -1;
    for (int64_t j = l0; j < l1; j++) {
        const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, j);
        for (int i = 0; i < GPT2RT__PER_LAYER; i++)
            if (t[i].goff >= 0) {
                if (t[i].goff < *lo) *lo = t[i].goff;
                if (t[i].goff + t[i].rows * t[i].cols > *hi) *hi = t[i].goff + t[i].rows * t[i].cols;
            }
    }
    return *hi > *lo;
}

/* make ctx a rank of c: its reductions go through c, and with ZeRO-1 it updates shard
   c->rank of the trained floats. The plan sized the moments for d.shards ranks, so a
   sharded context needs c->size == d.shards (a process communicator checks it). */
static void gpt2rt__dp_attach(gpt2rt_ctx *ctx, gpt2rt__comm *c) {
    ctx->comm = c;
    ctx->opt_lo = 0;
    ctx->opt_hi = ctx->n_train;
    if (gpt2rt__sharded(&ctx->d)) {
        ctx->opt_lo = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank);
        ctx->opt_hi = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank + 1);
        /* the gradient's padding (3.2) sums as zeros: nothing else writes it. Only where
           the host holds the gradient: a CUDA rank's is on its device (8.6 zeroes it) */
        int64_t n_pad = gpt2rt__shard_padded(ctx->n_train, ctx->d.shards);
        if (ctx->grads && ctx->arena_bytes[GPT2RT_MEM_GRADS] >= (uint64_t)n_pad * sizeof(float))
            memset(ctx->grads + ctx->n_train, 0, (size_t)(n_pad - ctx->n_train) * sizeof(float));
    }
}

/* the floats the gradient's collectives cover: ZeRO-1's padded to equal shards (1.4) */
static int64_t gpt2rt__dp_grad_len(const gpt2rt_ctx *ctx) { return gpt2rt__shard_padded(ctx->n_train, ctx->d.shards); }

static gpt2rt_result gpt2rt__dp_comm_fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *what) {
    return gpt2rt__fail(ctx, r, "data parallel: %s: %s", what, ctx->comm->err);
}

static gpt2rt_result gpt2rt__dp_bucket_ready(gpt2rt_ctx *ctx, int64_t l) {
    gpt2rt__comm *c = ctx->comm;
    if (c->size == 1 || ctx->acc_micro + 1 != ctx->cfg.grad_accum) return GPT2RT_OK; /* not the last micro-step */
    /* the bucket: pieces {first float, count} of the gradient */
    int64_t pc[2][2] = {{0, 0}, {0, 0}};
    int scatter = gpt2rt__sharded(&ctx->d);
    if (scatter) { /* ZeRO-1: one reduce-scatter whose shards are the optimizer's */
        if (l >= 0) return GPT2RT_OK;
        pc[0][1] = ctx->n_train;
    } else {
        int64_t lo, hi;
        int any = gpt2rt__dp_layer_range(ctx, l, &lo, &hi);
        if (l >= 0) { if (any) { pc[0][0] = lo; pc[0][1] = hi - lo; } }
        else if (!any) pc[0][1] = ctx->n_train; /* every layer frozen */
        else { /* what precedes the layers (wte, wpe, in_layer) and follows them (ln_f, out_layer) */
            pc[0][1] = lo;
            pc[1][0] = hi; pc[1][1] = ctx->n_train - hi;
        }
    }
    /* CUDA: enqueued on the device communicator's stream, and the backward goes on (8.6) */
    gpt2rt_result r = ctx->be->dp_reduce(ctx, (const int64_t (*)[2])pc, scatter);
    if (r == GPT2RT_OK && l < 0) ctx->dp_reduced = 1;
    return r;
}

/* v[0..n) := the sum over the ranks, in rank order (8-byte broadcasts: the counts
   and sums are doubles, the collectives' sums are floats) */
static gpt2rt_result gpt2rt__dp_sum(gpt2rt_ctx *ctx, double *v, int n) {
    gpt2rt__comm *c = ctx->comm;
    double acc[4] = {0, 0, 0, 0}, x[4];
    for (int root = 0; root < c->size; root++) {
        memcpy(x, v, (size_t)n * sizeof(double));
        gpt2rt_result r = c->broadcast(c, x, (size_t)n * sizeof(double), root);
        if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "summing the loss");
        for (int i = 0; i < n; i++) acc[i] += x[i];
    }
    memcpy(v, acc, (size_t)n * sizeof(double));
    return GPT2RT_OK;
}

/* Before a data-parallel update: the gradients summed (if the last backward did not),
   acc_loss_sum and acc_targets made global, *sumsq the squared norm of the summed
   gradient: each rank that of shard rank of it, added in rank order, so sharded and
   not sharded agree bitwise. */
static gpt2rt_result gpt2rt__dp_before_update(gpt2rt_ctx *ctx, double *sumsq) {
    gpt2rt__comm *c = ctx->comm;
    gpt2rt_result r = GPT2RT_OK;
    if (!ctx->dp_reduced) { /* fewer micro-batches than grad_accum */
        r = gpt2rt__sharded(&ctx->d) ? c->reduce_scatter(c, ctx->grads, gpt2rt__dp_grad_len(ctx))
                              : c->all_reduce(c, ctx->grads, ctx->n_train);
        if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "reducing the gradients");
    }
    ctx->dp_reduced = 0;
    int64_t lo = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank), hi = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank + 1);
    double v[3] = {ctx->acc_loss_sum, (double)ctx->acc_targets, gpt2rt__opt_sumsq(ctx, ctx->grads + lo, hi - lo)};
    if ((r = gpt2rt__dp_sum(ctx, v, 3)) != GPT2RT_OK) return r;
    ctx->acc_loss_sum = v[0];
    ctx->acc_targets = (int64_t)v[1];
    *sumsq = v[2];
    return GPT2RT_OK;
}

/* ZeRO-1, after the update of this rank's shard: every rank gets every weight. The
   gradient buffer (free now) carries them: the shard's weights go to their gradients'
   places, the all-gather fills the others, and every trained tensor is copied back. */
static gpt2rt_result gpt2rt__dp_gather_weights(gpt2rt_ctx *ctx) {
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            gpt2rt_result r = ctx->comm->all_gather(ctx->comm, ctx->grads, gpt2rt__dp_grad_len(ctx));
            if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "gathering the weights");
        }
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *t = &ctx->tensors[i];
            if (t->goff < 0) continue;
            int64_t n = t->rows * t->cols;
            if (pass == 1) { memcpy(ctx->params + t->off, ctx->grads + t->goff, (size_t)n * sizeof(float)); continue; }
            int64_t lo = t->goff > ctx->opt_lo ? t->goff : ctx->opt_lo;
            int64_t hi = t->goff + n < ctx->opt_hi ? t->goff + n : ctx->opt_hi;
            if (hi > lo) memcpy(ctx->grads + lo, ctx->params + t->off + (lo - t->goff), (size_t)(hi - lo) * sizeof(float));
        }
    }
    memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_BACKEND_INTERFACE_H */
