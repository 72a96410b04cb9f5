/* optimizer.h - 9. Optimizer
   may call: common/platform.h, common/threads.h, common/types.h, common/errors.h, plan/activations.h */
#ifndef GPT2RT__SRC_OPTIMIZER_H
#define GPT2RT__SRC_OPTIMIZER_H
#include "common/platform.h"
#include "common/threads.h"
#include "common/types.h"
#include "common/errors.h"
#include "plan/activations.h"

/* ==== 9. Optimizer ==== */

/* what the update policy (9) decides for one update, whichever backend runs it */
typedef struct gpt2rt__opt_decision {
    float norm;       /* global gradient norm of the mean loss, before clipping, loss scale removed */
    float grad_scale; /* the raw gradient sums times this: the mean loss's, unscaled, clipped */
    int skipped;      /* 1: no update (a norm that is not finite, or no counted target) */
} gpt2rt__opt_decision;
typedef gpt2rt_result (*gpt2rt__update_fn)(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);

/* forget the micro-batches summed since the last update (not the gradients themselves) */
static void gpt2rt__accum_reset(gpt2rt_ctx *ctx) {
    ctx->acc_loss_sum = 0.0;
    ctx->acc_targets = 0;
    ctx->acc_micro = 0;
    ctx->grads_pending = 0;
}

/* sum of squares of g (n floats); fixed chunks summed in order: deterministic */
static double gpt2rt__opt_sumsq(gpt2rt_ctx *ctx, const float *g, int64_t n) {
    int64_t nch = gpt2rt__opt_norm_chunks(n);
    double *parts = ctx->norm_parts;
    GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(ctx->d.n_threads, GPT2RT__CPU_W_ADD * (double)n))
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t i0 = ch * GPT2RT__NORM_CHUNK, i1 = i0 + GPT2RT__NORM_CHUNK < n ? i0 + GPT2RT__NORM_CHUNK : n;
        double acc[8] = {0}; /* 8 independent sums: no dependency chain, vectorisable */
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * (double)g[i + k];
        for (; i < i1; i++) acc[0] += (double)g[i] * (double)g[i];
        parts[ch] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    double s = 0.0;
    for (int64_t ch = 0; ch < nch; ch++) s += parts[ch];
    return s;
}


static float gpt2rt__opt_lr_at(const gpt2rt_config *c, int64_t s) {
    double lr = c->lr;
    if (s < c->warmup_steps) return (float)(lr * (double)(s + 1) / (double)c->warmup_steps);
    if (c->total_steps == 0) return (float)lr;
    double span = c->total_steps - c->warmup_steps > 1 ? (double)(c->total_steps - c->warmup_steps) : 1.0;
    double r = (double)(s - c->warmup_steps) / span;
    if (r > 1.0) r = 1.0;
    double lr_min = lr * c->min_lr_frac;
    return (float)(lr_min + 0.5 * (1.0 + cos(GPT2RT__PI * r)) * (lr - lr_min));
}

/* AdamW as torch.optim.AdamW, gradients scaled by clip_coef, then zeroed */
static void gpt2rt__opt_adamw_scalar(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] * clip_coef;
        g[j] = 0.0f;
        float pj = p[j] * decay;
        float mj = m[j] + (1.0f - b1) * (gj - m[j]);
        float vj = v[j] * b2 + (1.0f - b2) * gj * gj;
        m[j] = mj;
        v[j] = vj;
        p[j] = pj - step_size * (mj / (sqrtf(vj) / bc2_sqrt + eps));
    }
}

#if GPT2RT__SG_X86
/* the same operations 16 at a time: sqrtf's errno keeps compilers from vectorising
   the scalar loop unless built with -fno-math-errno, and the update is a quarter
   of a CPU training step */
#if defined(__GNUC__) && !defined(__clang__) /* g++ -O3 (nvcc's host pass) misreads avx512fintrin.h */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f")))
static void gpt2rt__opt_adamw_avx512(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    const __m512 coef = _mm512_set1_ps(clip_coef), dec = _mm512_set1_ps(decay), omb1 = _mm512_set1_ps(1.0f - b1);
    const __m512 vb2 = _mm512_set1_ps(b2), omb2 = _mm512_set1_ps(1.0f - b2), st = _mm512_set1_ps(step_size);
    const __m512 bc2 = _mm512_set1_ps(bc2_sqrt), ve = _mm512_set1_ps(eps), zero = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 gj = _mm512_mul_ps(_mm512_loadu_ps(g + j), coef);
        _mm512_storeu_ps(g + j, zero);
        __m512 pj = _mm512_mul_ps(_mm512_loadu_ps(p + j), dec);
        __m512 m0 = _mm512_loadu_ps(m + j);
        __m512 mj = _mm512_add_ps(m0, _mm512_mul_ps(omb1, _mm512_sub_ps(gj, m0)));
        __m512 vj = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + j), vb2), _mm512_mul_ps(_mm512_mul_ps(omb2, gj), gj));
        _mm512_storeu_ps(m + j, mj);
        _mm512_storeu_ps(v + j, vj);
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vj), bc2), ve);
        _mm512_storeu_ps(p + j, _mm512_sub_ps(pj, _mm512_mul_ps(st, _mm512_div_ps(mj, den))));
    }
    gpt2rt__opt_adamw_scalar(p + j, g + j, m + j, v + j, n - j, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

static void gpt2rt__opt_adamw_kernel(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
#if GPT2RT__SG_X86
    if (__builtin_cpu_supports("avx512f")) {
        gpt2rt__opt_adamw_avx512(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
        return;
    }
#endif
    gpt2rt__opt_adamw_scalar(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}

/* one AdamW step over the trained floats [ctx->opt_lo, ctx->opt_hi) (all of them, or
   this rank's ZeRO-1 shard), at learning rate lr, the gradients scaled by grad_scale
   (normalisation and clipping). Element-wise: how the floats are cut into chunks or
   shards does not change a bit. One parallel region for the whole pass, each thread an
   equal share of the floats walking the tensors that meet it: a region per tensor (148
   at 124M, most of 768 floats) cost a fork and a join each, and on a machine with more
   runnable jobs than cores each join waits for a descheduled thread. */
static void gpt2rt__opt_adamw(gpt2rt_ctx *ctx, float lr, float grad_scale) {
    const gpt2rt_config *c = &ctx->cfg;
    int64_t t = ctx->step + 1;
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    float decay_on = (float)(1.0 - (double)lr * c->weight_decay);
    int64_t lo0 = ctx->opt_lo, n_all = ctx->opt_hi - ctx->opt_lo;
    int nparts = gpt2rt__threads_for(ctx->d.n_threads, GPT2RT__CPU_W_MATH * (double)n_all);
    GPT2RT__PARALLEL_FOR(nparts)
    for (int64_t part = 0; part < nparts; part++) {
        int64_t plo = lo0 + n_all * part / nparts, phi = lo0 + n_all * (part + 1) / nparts;
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *tn = &ctx->tensors[i];
            if (tn->goff < 0) continue;
            int64_t t1 = tn->goff + tn->rows * tn->cols, base = tn->goff > lo0 ? tn->goff : lo0;
            int64_t lo = tn->goff > plo ? tn->goff : plo; /* the part of the tensor in [plo, phi) */
            int64_t hi = t1 < phi ? t1 : phi;
            /* a cut inside the tensor lands 16 floats' multiples from where one thread's pass
               of it starts (base), so every float takes the same path (the kernel's vector
               body or its tail, which a compiler contracting a*b+c into an FMA rounds
               differently) for any thread count; both sides of a cut round alike */
            if (lo > base) lo = base + gpt2rt__pad16(lo - base);
            if (hi > base && hi < t1 && hi < lo0 + n_all) hi = base + gpt2rt__pad16(hi - base);
            if (lo > t1) lo = t1;
            if (hi > t1) hi = t1;
            if (hi > lo0 + n_all) hi = lo0 + n_all;
            if (hi <= lo) continue;
            float *p = ctx->params + tn->off + (lo - tn->goff), *g = ctx->grads + lo;
            float *m = ctx->m + (lo - lo0), *v = ctx->v + (lo - lo0);
            gpt2rt__opt_adamw_kernel(p, g, m, v, hi - lo, grad_scale, tn->decay ? decay_on : 1.0f, b1, b2, step_size,
                                     bc2_sqrt, eps);
        }
    }
}

/* raw gradients times this = gradients of the mean loss over n_targets targets (0: none) */
static double gpt2rt__opt_unscale(const gpt2rt_ctx *ctx, int64_t n_targets) {
    return n_targets ? (double)(ctx->d.n_out * ctx->cfg.grad_accum) / (double)n_targets : 0.0;
}

/* the same over every target this context counted since the last update */
static double gpt2rt__opt_grad_unscale(const gpt2rt_ctx *ctx) { return gpt2rt__opt_unscale(ctx, ctx->acc_targets); }

#define GPT2RT__OPT_SCALE_WINDOW 2000     /* clean fp16 updates before the loss scale doubles */
#define GPT2RT__OPT_SCALE_MAX 16777216.0f /* 2^24 */

/* The update policy of every backend and mode (one device, data parallel, layer split),
   so that they skip, clip and scale alike. norm_raw: the norm of the raw gradient sums
   (loss scale in; the ranks' or stages' whole gradient; 0 when nothing was counted);
   *loss_scale: the scale those sums carry (1 but fp16), *clean_steps: fp16 updates
   since its last change. fp16's scale halves on an overflow (not below 1) and doubles
   after GPT2RT__OPT_SCALE_WINDOW clean updates (not above 2^24); the new scale is the
   next backward's. A skip is logged; the caller zeroes the gradients or updates. */
static gpt2rt__opt_decision gpt2rt__opt_policy(gpt2rt_ctx *ctx, double norm_raw, float *loss_scale, int *clean_steps) {
    const gpt2rt_config *c = &ctx->cfg;
    int fp16 = c->precision == GPT2RT_PRECISION_FP16;
    double unscale = gpt2rt__opt_grad_unscale(ctx) / (double)*loss_scale;
    gpt2rt__opt_decision o = {0.0f, 0.0f, 0};
    o.norm = (float)(norm_raw * unscale);
    o.skipped = !isfinite(o.norm) || !ctx->acc_targets;
    o.grad_scale = 0.0f;
    if (!ctx->acc_targets) { /* no loss to descend: Adam's momentum alone would still move the weights */
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: every target of the %d micro-batch%s since the last "
                    "update is ignored (negative)%s; update skipped at step %lld", ctx->acc_micro,
                    ctx->acc_micro == 1 ? "" : "es", ctx->comm->size > 1 ? " on every rank" : "", (long long)ctx->step);
    } else if (o.skipped) {
        char sc[64] = "";
        if (fp16) {
            *loss_scale = *loss_scale * 0.5f < 1.0f ? 1.0f : *loss_scale * 0.5f;
            *clean_steps = 0;
            snprintf(sc, sizeof sc, ", fp16 loss scale now %g", (double)*loss_scale);
        }
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: gradient norm is %g at step %lld; update skipped%s",
                    (double)o.norm, (long long)ctx->step, sc);
    } else {
        float coef = 1.0f;
        if (c->grad_clip > 0.0f) {
            coef = c->grad_clip / (o.norm + 1e-6f);
            if (coef > 1.0f) coef = 1.0f;
        }
        o.grad_scale = (float)(unscale * (double)coef);
        if (fp16 && ++*clean_steps >= GPT2RT__OPT_SCALE_WINDOW) {
            *loss_scale = *loss_scale * 2.0f > GPT2RT__OPT_SCALE_MAX ? GPT2RT__OPT_SCALE_MAX : *loss_scale * 2.0f;
            *clean_steps = 0;
        }
    }
    return o;
}

/* what gpt2rt_update reports, after the update (ctx->step advanced) and before the
   accumulation counters are reset; t0: when the call began */
static void gpt2rt__opt_stats(const gpt2rt_ctx *ctx, gpt2rt_step_stats *stats, gpt2rt__opt_decision o, float lr,
                              float loss_scale, double t0) {
    if (!stats) return;
    memset(stats, 0, sizeof *stats);
    stats->step = ctx->step;
    stats->loss = ctx->acc_targets ? (float)(ctx->acc_loss_sum / (double)ctx->acc_targets) : 0.0f;
    stats->grad_norm = o.norm;
    stats->lr = lr;
    stats->loss_scale = loss_scale;
    stats->skipped = o.skipped;
    stats->tokens = ctx->d.BT * ctx->acc_micro * ctx->comm->size;
    stats->micro_batches = ctx->acc_micro;
    stats->seconds = gpt2rt__now() - t0;
}

/* one gpt2rt_update around whatever applies it (a backend's update, the CUDA stages'):
   this step's learning rate in; the stats and the cleared accumulation out */
static gpt2rt_result gpt2rt__opt_update(gpt2rt_ctx *ctx, gpt2rt__update_fn update, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    float lr = gpt2rt__opt_lr_at(&ctx->cfg, ctx->step), loss_scale = 1.0f;
    gpt2rt__opt_decision o = {0.0f, 0.0f, 0};
    gpt2rt_result r = update(ctx, lr, &o, &loss_scale);
    if (r != GPT2RT_OK) return r;
    gpt2rt__opt_stats(ctx, stats, o, lr, loss_scale, t0);
    gpt2rt__accum_reset(ctx);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_OPTIMIZER_H */
