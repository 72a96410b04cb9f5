/* STAGING: the CUDA backend driver. Pasted into gpt2rt.h (section 8 "CUDA backend", under
   __CUDACC__, after the CUDA ops: cu_common, cu_ops, cu_matmul, cu_attention; the
   #includes below are then dropped) once kernels/train_step.cu passes on a GPU.
   Until then kernels/train_step.cu includes it after gpt2rt.h.

   ============================================================================
   WHAT IT IS
   ============================================================================
   The model of gpt2rt.h (gpt2rt__model_forward / _backward / the optimizer) on one GPU,
   with the kernels of cu_ops.cuh, cu_matmul.cuh (cuBLASLt) and cu_attention.cuh, in
   fp32 (optionally TF32 matrix products), bf16 or fp16 (dynamic loss scaling).
   Everything runs on one stream; the host waits only where a number must come back
   (the loss after a forward with targets, the gradient norm in the update, copies of
   weights and logits).

   Memory: one cudaMalloc per gpt2rt_mem category of exactly the bytes gpt2rt__layout
   plans for the CUDA dims (d.cuda = 1, d.ab = d.wb = 2 in bf16/fp16), and the pointers
   are carved by that same function, called on a "shadow" gpt2rt_ctx whose arenas are
   the device arenas: planned == allocated by construction. Per category:
     weights      (n_params) floatX, by tensor.off (fp32: these ARE the master weights)
     master       (n_train) fp32, by tensor.goff (bf16/fp16 only; frozen tensors have none)
     grads        (n_train) fp32, by goff        moments  m (n_train), v (n_train) fp32
     activations  inputs, targets (BT) int32; x0 (BT,C) floatX; per-layer blocks (or FULL
                  slots + checkpoints + xout); lnf (BT,C) floatX; lnf_mean/rstd, losses,
                  logit_lse (BT) fp32 - layer blocks as gpt2rt__layer_acts_carve says
                  (activations floatX, statistics fp32)
     transient    dres, dbuf (BT,C) floatX; dbig (BT,4C) floatX; rcbuf (BT,4C) floatX
                  (SELECTIVE only); the forward's outputs that are not kept (frozen
                  weights, SELECTIVE) pass through dbig, free until the backward, as on the CPU
     logits       (BT,Vp) floatX, turned into dlogits in place
     workspace    cuBLASLt 32 MiB | attention D (B,NH,T) fp32 | token buckets (3BT+1) int32
                  | reduction scratch "red" fp32 | norm parts (one double per 65536)
   Every buffer starts on 256 bytes (d.align), so a cuBLASLt plan keyed on pointer
   alignment is the same for a kept block, a FULL slot, dbig and rcbuf. The reduction
   scratch is used strictly one kernel pair at a time on the stream: the LayerNorm
   backward's partials (ceil(BT/32), 2C), the bias-gradient vector (OC <= 4C) of an
   accumulating weight-gradient matmul, and in the update the norm result (2 doubles)
   followed by the AdamW tensor table (n_tensors rows of 32 bytes).
   The host keeps the fp32 weights in ctx->params (load/save/param_read/_write source of
   truth): gpt2rt__cu_upload_params after the host changed them, gpt2rt__cu_download_params
   before the host reads them (st->host_stale says whether the device moved on).

   Numerics, mirroring the CPU backend:
   * Forward of a layer: ln_1; c_attn (+bias epilogue); attention (lse kept); attn.c_proj
     (+bias) then res2 = that + res; ln_2; c_fc (+bias) -> fch; gelu kernel -> fch_gelu;
     mlp.c_proj (+bias) then res3 = that + res2. The GELU is NOT fused into the c_fc
     epilogue: selective recompute runs the same gelu kernel on the same fch, so its
     output is bitwise the forward's (an epilogue GELU is computed from the fp32
     accumulator and would differ). Same for ln_2 (separate residual add + LayerNorm).
   * Backward: the fused classifier (softmax - onehot) * dloss in place; the dGELU is, in
     bf16/fp16, the DGELU epilogue of mlp.c_proj's input gradient, and in fp32 the gelu
     backward kernel after a plain product (cuBLASLt's GELU derivative differs from the
     CPU's by ~2e-3, beyond fp32's 1e-4 against the CPU); fch is always kept, so every
     recompute level does the same. Weight gradients fp32 with BGRADB bias gradients.
   * Recompute (selective, full + checkpoint spacing) and frozen groups follow
     gpt2rt__model_forward / _backward line by line: the same kernels on the same inputs
     at the same (256-byte) alignment, so recompute levels give bitwise the same gradients.
   * Gradients accumulate as (sum of token losses) * loss_scale / (BT * grad_accum); the
     update multiplies by BT*grad_accum / targets_counted / loss_scale (the AdamW
     grad_scale, with the clip coefficient), exactly the CPU grad_unscale scheme.
   * fp16 dynamic loss scale: starts at cfg.loss_scale, x2 after 2000 clean updates
     (at most 2^24), x0.5 (at least 1) and the update skipped when the gradient norm
     is not finite. bf16/fp32: scale 1; a non-finite norm still skips (as the CPU).
   * The first backward after an update (grads known to be zero) runs the weight-gradient
     matmuls with accumulate = 0 (so BGRADB writes the bias gradient directly, no
     scratch, no add kernel); later micro-batches accumulate (dW += ..., db via scratch).
   * Deterministic: no atomics anywhere (see the kernel files); cuBLASLt algorithms are
     fixed per (shape, type, alignment) and split-K is off by default.

   ============================================================================
   ENTRY POINTS (all return gpt2rt_result; errors go to ctx->error via gpt2rt__fail,
   naming the call, the layer and the sizes; never exit, never print)
   ============================================================================
   gpt2rt__cu_create(ctx, &st, err, cap)          device state for ctx->cfg (backend CUDA)
   gpt2rt__cu_create_cfg(ctx, cfg, &st, err, cap) the same for another resolved config with
                                                  the same parameter table (the lab: a CPU
                                                  ctx as host side of a CUDA run)
   gpt2rt__cu_free(st)
   gpt2rt__cu_upload_params(ctx, st)              ctx->params -> device master + floatX copy
   gpt2rt__cu_download_params(ctx, st)            device master -> ctx->params (trained tensors)
   gpt2rt__cu_upload_moments / _download_moments  m, v (n_train each, host arrays)
   gpt2rt__cu_download_grads(ctx, st, g)          raw gradients (n_train) to the host
   gpt2rt__cu_zero(ctx, st, moments)              gradients (and m, v) to zero
   gpt2rt__cu_read_tensor(ctx, st, t, what, dst)  one tensor (internal layout) to the host
   gpt2rt__cu_forward(ctx, st, inputs, targets, &loss)   sets ctx->loss, loss_sum, n_targets
   gpt2rt__cu_backward(ctx, st)                   += gradients of the last forward's loss
   gpt2rt__cu_update(ctx, st, lr, &norm, &skipped, &loss_scale)  AdamW at step ctx->step+1
   gpt2rt__cu_logits(ctx, st, dst, count)         (BT, V) fp32 from the device logits
   gpt2rt__cu_refresh_overhead(st)                re-measure the non-arena device memory

   Splicing into gpt2rt.h (what the public calls become, backend CUDA):
     gpt2rt_create: after the plan, gpt2rt__cu_create(ctx, &ctx->cu, ...); the host arenas
       are then only weights (ctx->params, fp32, n_params): grads, moments, activations,
       logits and workspace belong to the device. The driver's pinned host buffers (2BT +
       3BT+1 int32 tokens and buckets, BT fp32 losses, an 8 MiB (or V*4) stage, the AdamW
       table) are host bookkeeping.
     gpt2rt_forward:  validation as now, then gpt2rt__cu_forward (instead of the memcpys,
       gpt2rt__model_forward and gpt2rt__cpu_crossentropy_forward); flags as now.
     gpt2rt_backward: gpt2rt__cu_backward instead of gpt2rt__model_backward; bookkeeping
       as now. gpt2rt_step sets st->dlogits_in_forward = 1 before each forward (the
       classifier then writes dlogits in the same pass; the logits are not readable).
     gpt2rt_update: gpt2rt__cu_update(ctx, st, gpt2rt__opt_lr_at(&ctx->cfg, ctx->step), ...)
       instead of gpt2rt__opt_grad_norm/gpt2rt__opt_adamw; step++ when not skipped, stats as
       now with stats->loss_scale from it.
     gpt2rt_logits: gpt2rt__cu_logits. weights_save/state_save/param_read(VALUE):
       download_params first if st->host_stale (and download_moments for the state);
       param_read(GRAD/M/V): gpt2rt__cu_read_tensor; weights_load/state_load/param_write:
       upload after the host change (param_write: download first if stale).
     gpt2rt_plan_allocated: overhead[0] = st->overhead.
     The model driver (gpt2rt.h 7.3, gpt2rt__model_forward / _backward) owns the layer
     loop and the recompute schedule once for every backend: splice gpt2rt__cu_model_*
     as a gpt2rt__backend table (embed_forward, layer_forward, head_forward,
     head_backward, layer_backward, embed_backward, copy) whose entries dispatch on
     st->xt to the templates here (the body of the backward's layer loop becomes
     layer_backward; the classifier and LM head, head_backward), and call the driver
     with ax = st->dev, the shadow context whose arenas are the device's.
*/
#ifndef GPT2RT__CU_BACKEND
#define GPT2RT__CU_BACKEND
#include "cu_common.cuh"
#include "cu_ops.cuh"
#include "cu_matmul.cuh"
#include "cu_attention.cuh"

#define GPT2RT__CU_STAGE_BYTES ((size_t)8 << 20)   /* pinned host staging buffer (at least) */
#define GPT2RT__CU_SCALE_WINDOW 2000               /* clean fp16 updates before the scale doubles */
#define GPT2RT__CU_SCALE_MAX 16777216.0f           /* 2^24 */

/* storage type -> cuBLASLt data type */
template <typename X> struct gpt2rt__cu_dtype;
template <> struct gpt2rt__cu_dtype<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct gpt2rt__cu_dtype<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct gpt2rt__cu_dtype<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };

/* host conversion fp32 -> storage type, round to nearest even (what the device casts do) */
static inline void gpt2rt__cu_host_cvt(float *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static inline void gpt2rt__cu_host_cvt(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = __float2bfloat16_rn(src[i]);
}
static inline void gpt2rt__cu_host_cvt(__half *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = __float2half_rn(src[i]);
}
static inline float gpt2rt__cu_host_f(float x) { return x; }
static inline float gpt2rt__cu_host_f(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float gpt2rt__cu_host_f(__half x) { return __half2float(x); }

/* one AdamW launch: trainable tensors [i0, i0+n) of the device table whose weights sit at
   a constant distance delta = off - goff (floats) from their grads; block0 is relative */
typedef struct gpt2rt__cu_adamw_run {
    int i0, n;
    int64_t delta;
    int64_t blocks;
} gpt2rt__cu_adamw_run;

typedef struct gpt2rt__cu_state {
    gpt2rt_config cfg;        /* the resolved CUDA config (backend CUDA) */
    gpt2rt_config hooks;      /* allocator hooks of the host context (bookkeeping) */
    gpt2rt__dims d;           /* d.cuda = 1, d.ab = d.wb = 4 or 2 */
    gpt2rt__span span;
    int device;
    cudaStream_t stream;
    gpt2rt__cu_blas blas;
    int blas_ok;
    cudaDataType_t xt;        /* storage type of activations and weights */

    /* device arenas, one cudaMalloc each, exactly gpt2rt__layout's bytes */
    void *arena[GPT2RT_MEM_COUNT];
    uint64_t bytes[GPT2RT_MEM_COUNT];     /* planned (gpt2rt__layout for st->d) */
    uint64_t allocated[GPT2RT_MEM_COUNT]; /* what cudaMalloc was asked for */
    uint64_t arena_total;
    gpt2rt_ctx *dev;          /* shadow context: gpt2rt__layout's pointers into the device arenas */

    /* named device pointers (the rest through st->dev: x0, layer blocks, lnf, ...) */
    void *w;                  /* (n_params) floatX weights by off */
    float *master;            /* (n_train) fp32 by goff; NULL in fp32 (w is the master) */
    float *grads, *m, *v;     /* (n_train) fp32 each, by goff */
    int64_t n_params, n_train;
    int64_t act_bytes;        /* one (BT,C) floatX activation, 256-aligned: checkpoint stride */
    float *att_D;             /* (B,NH,T) fp32 attention backward scratch */
    int32_t *buckets_ws;      /* (3BT+1) int32: the wte gradient's token buckets */
    float *red;               /* reduction scratch, red_bytes (see the top comment) */
    int64_t red_bytes;
    double *norm_parts;       /* (norm chunks) fp64 */

    /* host (pinned) */
    int32_t *h_tok;           /* inputs (BT) | targets (BT) | buckets (3BT+1) */
    float *h_losses;          /* (BT) */
    double *h_norm;           /* (2) */
    unsigned char *h_stage;   /* stage_bytes, conversions and logits */
    size_t stage_bytes;
    gpt2rt__cu_adamw_tensor *h_adamw; /* (n_adamw) goff-indexed table, block0 per run */
    int n_adamw, n_runs;
    gpt2rt__cu_adamw_run *runs;
    cudaEvent_t ev_tok;       /* recorded after the last H2D copy out of h_tok */
    int ev_ok;

    /* training state */
    float loss_scale;         /* fp16: dynamic; else 1 */
    int clean_steps;          /* fp16 updates since the last overflow or doubling */
    int64_t nb;               /* distinct tokens in the last forward's buckets (-1: none) */
    int have_targets;         /* the last forward had targets (targets and losses on the device) */
    int dlogits_in_forward;   /* set by the caller before a forward: fuse the classifier's backward */
    int dlogits_ready;        /* the logits arena holds dlogits (backward skips the classifier) */
    int grads_dirty;          /* some gradient may be non-zero (accumulate in the next backward) */
    int host_stale;           /* device weights moved on since the last download/upload */

    /* memory figures */
    uint64_t mem_total, free_at_create, free_after;
    uint64_t overhead;        /* device memory in use beyond the arenas (context, cuBLASLt, ...) */

    /* error context */
    const char *phase;        /* "forward", "backward", ... */
    int64_t layer;            /* -1 outside the layers */
    char mm_err[384];
} gpt2rt__cu_state;

/* ---- errors ---- */

static gpt2rt_result gpt2rt__cu_fail(gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, cudaError_t e, const char *call) {
    const gpt2rt__dims *d = &st->d;
    char where[64] = "";
    if (st->layer >= 0) snprintf(where, sizeof where, "layer %lld of %lld, ", (long long)st->layer, (long long)d->L);
    return gpt2rt__fail(ctx, e == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE,
                        "gpt2rt CUDA %s: %s failed: %s (%s = %d) [%sB=%lld T=%lld C=%lld NH=%lld Vp=%lld, %s, device %d]",
                        st->phase ? st->phase : "?", call, cudaGetErrorString(e), cudaGetErrorName(e), (int)e, where,
                        (long long)d->B, (long long)d->T, (long long)d->C, (long long)d->NH, (long long)d->Vp,
                        gpt2rt__precision_name(st->cfg.precision), st->device);
}
static gpt2rt_result gpt2rt__cu_fail_mm(gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, int status) {
    char where[64] = "";
    if (st->layer >= 0) snprintf(where, sizeof where, " [layer %lld of %lld]", (long long)st->layer, (long long)st->d.L);
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt CUDA %s: %s (status %d)%s", st->phase ? st->phase : "?",
                        st->mm_err, status, where);
}
/* inside functions with `ctx` and `st` in scope */
#define GPT2RT__CU_CK(call) do { cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) return gpt2rt__cu_fail(ctx, st, e_, #call); } while (0)
#define GPT2RT__CU_MM(call) do { int s_ = (call); if (s_ != 0) return gpt2rt__cu_fail_mm(ctx, st, s_); } while (0)
#define GPT2RT__CU_RET(call) do { gpt2rt_result r_ = (call); if (r_ != GPT2RT_OK) return r_; } while (0)

/* ---- small helpers ---- */

static int gpt2rt__cu_is_full(const gpt2rt__cu_state *st) { return st->d.recompute == GPT2RT_RECOMPUTE_FULL; }

/* input (BT,C) floatX of layer l: x0, a FULL checkpoint, or layer l-1's output */
static void *gpt2rt__cu_layer_input(const gpt2rt__cu_state *st, int64_t l) {
    const gpt2rt__dims *d = &st->d;
    if (l == 0) return st->dev->x0;
    if (gpt2rt__cu_is_full(st) && l % d->ck == 0)
        return (unsigned char *)st->dev->ckpt + (l / d->ck - 1) * st->act_bytes;
    return gpt2rt__lacts(st->dev, l - 1).res3;
}

/* the weights (floatX) of layer l on the device */
template <typename X> struct gpt2rt__cu_lw {
    const X *ln1w, *ln1b;       /* (C) */
    const X *qkvw, *qkvb;       /* (3C, C), (3C) */
    const X *projw, *projb;     /* (C, C), (C) */
    const X *ln2w, *ln2b;       /* (C) */
    const X *fcw, *fcb;         /* (4C, C), (4C) */
    const X *fcprojw, *fcprojb; /* (C, 4C), (C) */
};
template <typename X>
static gpt2rt__cu_lw<X> gpt2rt__cu_lweights(const gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, int64_t l) {
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    const X *w = (const X *)st->w;
    gpt2rt__cu_lw<X> p;
    p.ln1w = w + t[GPT2RT__LN1W].off; p.ln1b = w + t[GPT2RT__LN1B].off;
    p.qkvw = w + t[GPT2RT__QKVW].off; p.qkvb = w + t[GPT2RT__QKVB].off;
    p.projw = w + t[GPT2RT__PROJW].off; p.projb = w + t[GPT2RT__PROJB].off;
    p.ln2w = w + t[GPT2RT__LN2W].off; p.ln2b = w + t[GPT2RT__LN2B].off;
    p.fcw = w + t[GPT2RT__FCW].off; p.fcb = w + t[GPT2RT__FCB].off;
    p.fcprojw = w + t[GPT2RT__FCPROJW].off; p.fcprojb = w + t[GPT2RT__FCPROJB].off;
    return p;
}
static float *gpt2rt__cu_grad_of(const gpt2rt__cu_state *st, const gpt2rt__tensor *t) {
    return t->goff >= 0 ? st->grads + t->goff : NULL;
}

/* ==== creation ==== */

static void gpt2rt__cu_free(gpt2rt__cu_state *st);

static void gpt2rt__cu_measure(gpt2rt__cu_state *st) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { (void)cudaGetLastError(); return; }
    st->free_after = fr;
    st->mem_total = tot;
    uint64_t used = (uint64_t)tot - (uint64_t)fr;
    st->overhead = used > st->arena_total ? used - st->arena_total : 0;
}

/* Re-measure the device memory beyond the arenas (kernel modules load lazily, cuBLASLt
   grows on first use): call after the first training step for the steady-state figure.
   It is (total - free) - arenas: other processes' memory on the device counts too, the
   runtime gives no free figure before its own context exists. */
static void gpt2rt__cu_refresh_overhead(gpt2rt__cu_state *st) {
    if (st && cudaSetDevice(st->device) == cudaSuccess) gpt2rt__cu_measure(st);
}

/* AdamW launches: the trainable tensors in table order, cut where off - goff changes
   (after a frozen tensor). Without frozen groups: one run. */
static int gpt2rt__cu_adamw_plan(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    int n = 0, runs = 0;
    int64_t last = -1;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        gpt2rt__cu_adamw_tensor *a = &st->h_adamw[n];
        memset(a, 0, sizeof *a);
        a->off = t->goff;
        a->n = t->rows * t->cols;
        a->decay = t->decay;
        int64_t delta = t->off - t->goff;
        if (runs == 0 || delta != last) {
            st->runs[runs].i0 = n; st->runs[runs].n = 0; st->runs[runs].delta = delta; st->runs[runs].blocks = 0;
            runs++;
            last = delta;
        }
        st->runs[runs - 1].n++;
        n++;
    }
    for (int r = 0; r < runs; r++)
        st->runs[r].blocks = gpt2rt__cu_adamw_table(st->h_adamw + st->runs[r].i0, st->runs[r].n);
    st->n_adamw = n;
    st->n_runs = runs;
    return n;
}

static gpt2rt_result gpt2rt__cu_upload_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st);

/* The device state for the resolved config cfg (backend CUDA) on top of the host context
   ctx, whose parameter table (shape and frozen groups) must be the one cfg gives.
   err gets the reason on failure (with the numbers); *out is NULL then. */
static gpt2rt_result gpt2rt__cu_create_cfg(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, gpt2rt__cu_state **out,
                                               char *err, size_t cap) {
#define GPT2RT__CU_CFAIL(r, ...) do { snprintf(err, cap, __VA_ARGS__); gpt2rt__cu_free(st); return (r); } while (0)
#define GPT2RT__CU_CCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
        GPT2RT__CU_CFAIL(e_ == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE, \
                         "gpt2rt__cu_create: %s failed: %s (%s = %d) on device %d", #call, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_), (int)e_, dev_id); } while (0)
    gpt2rt__cu_state *st = NULL;
    int dev_id = 0;
    if (!out || !ctx || !cfg || !err || !cap) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    err[0] = 0;
    if (cfg->backend != GPT2RT_BACKEND_CUDA)
        GPT2RT__CU_CFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: config backend = %d, not GPT2RT_BACKEND_CUDA",
                         (int)cfg->backend);
    if (cfg->parallel != GPT2RT_PARALLEL_NONE || cfg->n_devices != 1)
        GPT2RT__CU_CFAIL(GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt__cu_create: parallel = %d over %d devices: the CUDA "
                         "driver runs one device", (int)cfg->parallel, cfg->n_devices);

    st = (gpt2rt__cu_state *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__cu_state), GPT2RT_MEM_BOOKKEEPING);
    if (!st) { snprintf(err, cap, "gpt2rt__cu_create: %zu bytes of host memory for the state", sizeof(gpt2rt__cu_state)); return GPT2RT_ERR_OUT_OF_MEMORY; }
    memset(st, 0, sizeof *st);
    st->hooks = ctx->cfg;
    st->cfg = *cfg;
    st->d = gpt2rt__dims_of(cfg);
    st->span = gpt2rt__span_of(cfg, 0);
    st->device = dev_id = cfg->device_ids[0];
    st->layer = -1;
    st->phase = "create";
    st->nb = -1;
    st->xt = st->d.ab == 4 ? CUDA_R_32F : cfg->precision == GPT2RT_PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    st->loss_scale = cfg->precision == GPT2RT_PRECISION_FP16 ? cfg->loss_scale : 1.0f;
    const gpt2rt__dims *d = &st->d;

    /* the host table must be this config's */
    {
        int64_t np = 0, ntr = 0;
        int nt = gpt2rt__param_table(d, NULL, &np, &ntr);
        if (nt != ctx->n_tensors || np != ctx->n_params || ntr != ctx->n_train || ctx->d.frozen != d->frozen ||
            ctx->d.C != d->C || ctx->d.L != d->L || ctx->d.Vp != d->Vp || ctx->d.P != d->P)
            GPT2RT__CU_CFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: the host context's parameter table "
                             "(%d tensors, %lld floats, %lld trained, frozen 0x%x) is not the config's (%d, %lld, %lld, 0x%x)",
                             ctx->n_tensors, (long long)ctx->n_params, (long long)ctx->n_train, ctx->d.frozen, nt,
                             (long long)np, (long long)ntr, d->frozen);
        st->n_params = np;
        st->n_train = ntr;
    }

    /* device, and its free memory against the plan */
    int n_dev = 0;
    {
        cudaError_t e = cudaGetDeviceCount(&n_dev);
        if (e != cudaSuccess || n_dev == 0) {
            (void)cudaGetLastError();
            GPT2RT__CU_CFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: no CUDA device (cudaGetDeviceCount: %s, %d "
                             "devices)", cudaGetErrorString(e), n_dev);
        }
    }
    if (dev_id >= n_dev)
        GPT2RT__CU_CFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: device_ids[0] = %d, but there are %d CUDA "
                         "device(s)", dev_id, n_dev);
    GPT2RT__CU_CCK(cudaSetDevice(dev_id));
    gpt2rt__layout(d, &st->span, st->bytes, NULL);
    uint64_t plan_total = 0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan_total += st->bytes[i];
    {
        size_t fr = 0, tot = 0;
        GPT2RT__CU_CCK(cudaMemGetInfo(&fr, &tot)); /* creates the context */
        st->free_at_create = fr;
        st->mem_total = tot;
        if (cfg->memory_budget && plan_total > cfg->memory_budget)
            GPT2RT__CU_CFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB), "
                             "memory_budget is %llu bytes (%.2f GiB); nothing was allocated",
                             (unsigned long long)plan_total, GPT2RT__GIB(plan_total),
                             (unsigned long long)cfg->memory_budget, GPT2RT__GIB(cfg->memory_budget));
        if (plan_total > (uint64_t)fr)
            GPT2RT__CU_CFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB) on "
                             "device %d, which has %llu bytes (%.2f GiB) free of %llu (%.2f GiB); nothing was allocated",
                             (unsigned long long)plan_total, GPT2RT__GIB(plan_total), dev_id, (unsigned long long)fr,
                             GPT2RT__GIB(fr), (unsigned long long)tot, GPT2RT__GIB(tot));
    }
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        if (!st->bytes[i]) continue;
        cudaError_t e = cudaMalloc(&st->arena[i], (size_t)st->bytes[i]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st->arena[i] = NULL;
            size_t fr = 0, tot = 0;
            (void)cudaMemGetInfo(&fr, &tot);
            GPT2RT__CU_CFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: cudaMalloc of %llu bytes (%.1f MiB) for %s "
                             "failed: %s; %llu of %llu bytes planned were allocated, %llu bytes free now",
                             (unsigned long long)st->bytes[i], GPT2RT__MIB(st->bytes[i]), gpt2rt_mem_name((gpt2rt_mem)i),
                             cudaGetErrorString(e), (unsigned long long)st->arena_total, (unsigned long long)plan_total,
                             (unsigned long long)fr);
        }
        st->allocated[i] = st->bytes[i];
        st->arena_total += st->bytes[i];
    }

    /* the pointers: gpt2rt__layout on a shadow context whose arenas are the device's */
    st->dev = (gpt2rt_ctx *)gpt2rt__alloc(&st->hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!st->dev) GPT2RT__CU_CFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: shadow context (%zu bytes)", sizeof(gpt2rt_ctx));
    memset(st->dev, 0, sizeof(gpt2rt_ctx));
    st->dev->cfg = *cfg;
    st->dev->d = *d;
    st->dev->tensors = ctx->tensors; /* shared, read-only: same table */
    st->dev->n_tensors = ctx->n_tensors;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) { st->dev->arena[i] = st->arena[i]; st->dev->arena_bytes[i] = st->bytes[i]; }
    {
        uint64_t again[GPT2RT_MEM_COUNT];
        gpt2rt__layout(d, &st->span, again, st->dev);
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            if (again[i] != st->bytes[i])
                GPT2RT__CU_CFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: gpt2rt__layout gave %llu then %llu bytes for %s",
                                 (unsigned long long)st->bytes[i], (unsigned long long)again[i],
                                 gpt2rt_mem_name((gpt2rt_mem)i));
    }
    st->w = st->arena[GPT2RT_MEM_WEIGHTS];
    st->master = d->wb == 4 ? NULL : (float *)st->arena[GPT2RT_MEM_MASTER];
    st->grads = st->dev->grads;
    st->m = st->dev->m;
    st->v = st->dev->v;
    st->act_bytes = gpt2rt__ald(d, d->BT * d->C * d->ab);
    st->att_D = st->dev->att_scratch;
    st->norm_parts = st->dev->norm_parts;
    { /* the workspace after attention's D: token buckets, then the reduction scratch up to the norm parts */
        unsigned char *b = (unsigned char *)st->dev->att_scratch + gpt2rt__ald(d, d->B * d->NH * d->T * 4);
        int64_t slot = gpt2rt__ald(d, gpt2rt__cu_encoder_bucket_ints(d->BT) * 4);
        st->buckets_ws = (int32_t *)(void *)b;
        st->red = (float *)(void *)(b + slot);
        st->red_bytes = (int64_t)((unsigned char *)st->norm_parts - (b + slot));
        uint64_t ln = (uint64_t)gpt2rt__cu_layernorm_backward_scratch_bytes(d->BT, d->C), bias = (uint64_t)(4 * d->C * 4);
        uint64_t upd = 16 + (uint64_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor);
        uint64_t need = ln > bias ? ln : bias;
        if (upd > need) need = upd;
        if (st->red_bytes < 0 || (uint64_t)st->red_bytes < need)
            GPT2RT__CU_CFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: the planned reduction scratch holds %lld bytes, the "
                             "kernels need %llu (LayerNorm partials %llu, bias vector %llu, update %llu): gpt2rt__layout "
                             "and the driver disagree", (long long)st->red_bytes, (unsigned long long)need,
                             (unsigned long long)ln, (unsigned long long)bias, (unsigned long long)upd);
    }

    /* stream, cuBLASLt, events, pinned host buffers */
    GPT2RT__CU_CCK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    {
        int s = gpt2rt__cu_blas_init(&st->blas, st->dev->gemm_ws, (size_t)GPT2RT__CU_BLAS_WORKSPACE, st->stream,
                                     st->mm_err, sizeof st->mm_err);
        if (s) GPT2RT__CU_CFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: %s", st->mm_err);
        st->blas_ok = 1;
        st->blas.tf32 = cfg->tf32 ? 1 : 0;
    }
    GPT2RT__CU_CCK(cudaEventCreateWithFlags(&st->ev_tok, cudaEventDisableTiming));
    st->ev_ok = 1;
    GPT2RT__CU_CCK(cudaMallocHost((void **)&st->h_tok, (size_t)(2 * d->BT + gpt2rt__cu_encoder_bucket_ints(d->BT)) * 4));
    GPT2RT__CU_CCK(cudaMallocHost((void **)&st->h_losses, (size_t)d->BT * 4));
    GPT2RT__CU_CCK(cudaMallocHost((void **)&st->h_norm, 2 * sizeof(double)));
    st->stage_bytes = GPT2RT__CU_STAGE_BYTES;
    if ((size_t)d->V * 4 > st->stage_bytes) st->stage_bytes = (size_t)d->V * 4;
    GPT2RT__CU_CCK(cudaMallocHost((void **)&st->h_stage, st->stage_bytes));
    GPT2RT__CU_CCK(cudaMallocHost((void **)&st->h_adamw, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor)));
    st->runs = (gpt2rt__cu_adamw_run *)gpt2rt__alloc(&st->hooks, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_run),
                                                     GPT2RT_MEM_BOOKKEEPING);
    if (!st->runs) GPT2RT__CU_CFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: AdamW run table");
    gpt2rt__cu_adamw_plan(ctx, st);

    /* zero gradients and moments, then the weights from the host */
    GPT2RT__CU_CCK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
    GPT2RT__CU_CCK(cudaMemsetAsync(st->m, 0, (size_t)st->n_train * 8, st->stream));
    GPT2RT__CU_CCK(cudaStreamSynchronize(st->stream));
    {
        gpt2rt_result r = gpt2rt__cu_upload_params(ctx, st);
        if (r != GPT2RT_OK) GPT2RT__CU_CFAIL(r, "gpt2rt__cu_create: %.1000s", ctx->error);
    }
    gpt2rt__cu_measure(st);
    st->phase = "idle";
    *out = st;
    return GPT2RT_OK;
#undef GPT2RT__CU_CCK
#undef GPT2RT__CU_CFAIL
}

/* the device state of ctx->cfg (after the splice: backend CUDA) */
static gpt2rt_result gpt2rt__cu_create(gpt2rt_ctx *ctx, gpt2rt__cu_state **out, char *err, size_t cap) {
    if (!ctx) return GPT2RT_ERR_INVALID_ARGUMENT;
    return gpt2rt__cu_create_cfg(ctx, &ctx->cfg, out, err, cap);
}

/* everything the state holds; safe on a partly created state and on NULL */
static void gpt2rt__cu_free(gpt2rt__cu_state *st) {
    if (!st) return;
    (void)cudaSetDevice(st->device);
    if (st->stream) (void)cudaStreamSynchronize(st->stream);
    if (st->blas_ok) gpt2rt__cu_blas_destroy(&st->blas);
    if (st->ev_ok) (void)cudaEventDestroy(st->ev_tok);
    if (st->stream) (void)cudaStreamDestroy(st->stream);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
        if (st->arena[i]) (void)cudaFree(st->arena[i]);
    if (st->h_tok) (void)cudaFreeHost(st->h_tok);
    if (st->h_losses) (void)cudaFreeHost(st->h_losses);
    if (st->h_norm) (void)cudaFreeHost(st->h_norm);
    if (st->h_stage) (void)cudaFreeHost(st->h_stage);
    if (st->h_adamw) (void)cudaFreeHost(st->h_adamw);
    (void)cudaGetLastError();
    gpt2rt_config hooks = st->hooks;
    gpt2rt__free(&hooks, st->runs, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st->dev, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st, GPT2RT_MEM_BOOKKEEPING);
}

/* ==== weights and optimizer state between host and device ==== */

/* ctx->params (fp32, every tensor) -> the device: the fp32 master of the trained tensors
   (bf16/fp16: master arena by goff; fp32: the weights arena is the master) and the floatX
   copy of every tensor (converted on the host, round to nearest even, as the device's
   casts). Gradients and moments are untouched. Synchronous. */
template <typename X>
static gpt2rt_result gpt2rt__cu_upload_params_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    cudaStream_t s = st->stream;
    const int64_t per = (int64_t)(st->stage_bytes / sizeof(X));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        int64_t n = t->rows * t->cols;
        const float *src = ctx->params + t->off;
        if (st->master && t->goff >= 0)
            GPT2RT__CU_CK(cudaMemcpyAsync(st->master + t->goff, src, (size_t)n * 4, cudaMemcpyHostToDevice, s));
        for (int64_t j = 0; j < n; j += per) {
            int64_t k = n - j < per ? n - j : per;
            GPT2RT__CU_CK(cudaStreamSynchronize(s)); /* the stage is free again */
            gpt2rt__cu_host_cvt((X *)(void *)st->h_stage, src + j, k);
            GPT2RT__CU_CK(cudaMemcpyAsync((X *)st->w + t->off + j, st->h_stage, (size_t)k * sizeof(X),
                                          cudaMemcpyHostToDevice, s));
        }
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    st->host_stale = 0;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_upload_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "upload_params";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_upload_params_t<float>(ctx, st);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_upload_params_t<__nv_bfloat16>(ctx, st);
    return gpt2rt__cu_upload_params_t<__half>(ctx, st);
}

/* the trained tensors' fp32 master -> ctx->params (frozen tensors never change on the
   device: the host copy is already theirs). Synchronous. */
static gpt2rt_result gpt2rt__cu_download_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "download_params";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        const float *src = st->master ? st->master + t->goff : (const float *)st->w + t->off;
        GPT2RT__CU_CK(cudaMemcpyAsync(ctx->params + t->off, src, (size_t)(t->rows * t->cols) * 4,
                                      cudaMemcpyDeviceToHost, st->stream));
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->host_stale = 0;
    return GPT2RT_OK;
}

/* m, v (n_train fp32 each, goff order) host -> device, and back; either may be NULL */
static gpt2rt_result gpt2rt__cu_upload_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *m, const float *v) {
    st->phase = "upload_moments";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (m) GPT2RT__CU_CK(cudaMemcpyAsync(st->m, m, (size_t)st->n_train * 4, cudaMemcpyHostToDevice, st->stream));
    if (v) GPT2RT__CU_CK(cudaMemcpyAsync(st->v, v, (size_t)st->n_train * 4, cudaMemcpyHostToDevice, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__cu_download_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *m, float *v) {
    st->phase = "download_moments";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (m) GPT2RT__CU_CK(cudaMemcpyAsync(m, st->m, (size_t)st->n_train * 4, cudaMemcpyDeviceToHost, st->stream));
    if (v) GPT2RT__CU_CK(cudaMemcpyAsync(v, st->v, (size_t)st->n_train * 4, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}
/* zero the gradients (a dropped accumulation), and with moments = 1 also m and v (a
   training reset); the next backward then overwrites instead of accumulating. Synchronous. */
static gpt2rt_result gpt2rt__cu_zero(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int moments) {
    st->phase = "zero";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
    if (moments) GPT2RT__CU_CK(cudaMemsetAsync(st->m, 0, (size_t)st->n_train * 8, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->grads_dirty = 0;
    st->have_targets = 0;
    st->dlogits_ready = 0;
    return GPT2RT_OK;
}

/* the raw gradients (n_train fp32, goff order): (sum of token losses) * loss_scale / (BT*grad_accum) */
static gpt2rt_result gpt2rt__cu_download_grads(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *g) {
    st->phase = "download_grads";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(g, st->grads, (size_t)st->n_train * 4, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* one tensor (rows*cols floats, internal layout) to dst: its value (fp32 master; frozen:
   the host copy), raw gradient, m or v (frozen: GPT2RT_ERR_INVALID_ARGUMENT) */
static gpt2rt_result gpt2rt__cu_read_tensor(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const gpt2rt__tensor *t,
                                                gpt2rt_param_what what, float *dst) {
    st->phase = "read_tensor";
    st->layer = -1;
    size_t bytes = (size_t)(t->rows * t->cols) * 4;
    const float *src = NULL;
    if (what == GPT2RT_PARAM_VALUE) {
        if (t->goff < 0) { memcpy(dst, ctx->params + t->off, bytes); return GPT2RT_OK; }
        src = st->master ? st->master + t->goff : (const float *)st->w + t->off;
    } else {
        if (t->goff < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_read_tensor: %s is frozen: no gradient "
                                "or moments", t->name);
        src = (what == GPT2RT_PARAM_GRAD ? st->grads : what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) + t->goff;
    }
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* ==== the model ==== */

/* One layer's forward from res (BT,C) into a (device pointers; NULL fields: not kept, go to
   dbig, the backward's scratch, free during the forward, and are used at once; rcbuf only
   exists under SELECTIVE). The backward's recompute calls this same function on the same
   input: bitwise the same values. Mirrors gpt2rt__cpu_layer_forward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_layer_forward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t l, const X *res,
                                              gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
    X *scr = (X *)st->dev->dbig;
    X *ln1 = a.ln1 ? (X *)a.ln1 : scr, *ln2 = a.ln2 ? (X *)a.ln2 : scr, *gelu = a.fch_gelu ? (X *)a.fch_gelu : scr;
    X *qkv = (X *)a.qkv, *atty = (X *)a.atty, *res2 = (X *)a.res2, *fch = (X *)a.fch, *res3 = (X *)a.res3;
    st->layer = l;
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, qkv, NULL, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_attention_forward<X>(atty, a.lse, qkv, (int)d->B, (int)d->T, (int)C, (int)d->NH, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res2, NULL, atty, p.projw, p.projb, BT, C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res2, res2, res, BT * C, s));
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln2, a.ln2_mean, a.ln2_rstd, res2, p.ln2w, p.ln2b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, fch, NULL, ln2, p.fcw, p.fcb, BT, C, 4 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(gelu, fch, BT * 4 * C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res3, NULL, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res3, res3, res2, BT * C, s));
    return GPT2RT_OK;
}

/* embeddings, the layers, ln_f, the tied LM head: logits (BT,Vp). Mirrors
   gpt2rt__model_forward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_model_forward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C, L = d->L;
    const int full = gpt2rt__cu_is_full(st);
    cudaStream_t s = st->stream;
    const X *w = (const X *)st->w;
    const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE), *wpe = gpt2rt__model_tensor(ctx, GPT2RT__WPE);
    const gpt2rt__tensor *lnfw = gpt2rt__model_tensor(ctx, GPT2RT__LNFW), *lnfb = gpt2rt__model_tensor(ctx, GPT2RT__LNFB);
    gpt2rt_ctx *dv = st->dev;
    st->layer = -1;
    GPT2RT__CU_CK(gpt2rt__cu_encoder_forward<X>((X *)dv->x0, dv->inputs, w + wte->off, w + wpe->off, d->B, d->T, C, s));
    for (int64_t l = 0; l < L; l++) {
        GPT2RT__CU_RET(gpt2rt__cu_layer_forward<X>(ctx, st, l, (const X *)gpt2rt__cu_layer_input(st, l),
                                                   gpt2rt__lacts(dv, l)));
        /* FULL: the slots are reused, so keep the next checkpoint's input and the last output */
        if (full && l + 1 < L && (l + 1) % d->ck == 0)
            GPT2RT__CU_CK(cudaMemcpyAsync(gpt2rt__cu_layer_input(st, l + 1), gpt2rt__lacts(dv, l).res3,
                                          (size_t)(BT * C * d->ab), cudaMemcpyDeviceToDevice, s));
    }
    st->layer = -1;
    const X *res = (const X *)(L ? (void *)gpt2rt__lacts(dv, L - 1).res3 : (void *)dv->x0);
    if (full && L) {
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->xout, res, (size_t)(BT * C * d->ab), cudaMemcpyDeviceToDevice, s));
        res = (const X *)dv->xout;
    }
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>((X *)dv->lnf, dv->lnf_mean, dv->lnf_rstd, res, w + lnfw->off,
                                                  w + lnfb->off, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, gpt2rt__cu_dtype<X>::value, dv->logits, NULL, dv->lnf,
                                            w + wte->off, NULL, BT, C, d->Vp, st->mm_err, sizeof st->mm_err));
    return GPT2RT_OK;
}

/* LayerNorm backward of the model (BT rows of C), partials in the reduction scratch;
   dw, db NULL: frozen */
template <typename X>
static cudaError_t gpt2rt__cu_ln_backward(gpt2rt__cu_state *st, X *dinp, float *dw, float *db, const X *dout,
                                          const X *inp, const X *w, const float *mean, const float *rstd) {
    return gpt2rt__cu_layernorm_backward<X>(dinp, dw, db, dout, inp, w, mean, rstd, st->red, st->d.BT, st->d.C,
                                            st->stream);
}

/* gradients of (sum of the counted targets' losses) * dloss, accumulated into st->grads
   (acc = 0: the grads are known to be zero, the weight-gradient matmuls overwrite).
   Mirrors gpt2rt__model_backward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_model_backward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float dloss, int acc) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C, L = d->L;
    const int full = gpt2rt__cu_is_full(st);
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    gpt2rt_ctx *dv = st->dev;
    const X *w = (const X *)st->w;
    const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE), *wpe = gpt2rt__model_tensor(ctx, GPT2RT__WPE);
    const gpt2rt__tensor *lnfw = gpt2rt__model_tensor(ctx, GPT2RT__LNFW), *lnfb = gpt2rt__model_tensor(ctx, GPT2RT__LNFB);
    X *logits = (X *)dv->logits, *dres = (X *)dv->dres, *dbuf = (X *)dv->dbuf, *dbig = (X *)dv->dbig;
    X *rc = (X *)dv->rcbuf; /* SELECTIVE: outputs not kept, recomputed for a weight gradient */
    float *dbs = acc ? st->red : NULL; /* the bias-gradient vector of an accumulating matmul */
    const int dgelu_epilogue = sizeof(X) == 2; /* fp32: the gelu backward kernel (see the top comment) */
    st->layer = -1;

    if (!st->dlogits_ready)
        GPT2RT__CU_CK(gpt2rt__cu_classifier<X>(logits, dv->losses, dv->logit_lse, dv->targets, dloss, 1, BT, d->V,
                                               d->Vp, s));
    st->dlogits_ready = 0;
    /* LM head (tied): dlnf -> dbuf */
    float *g_wte = gpt2rt__cu_grad_of(st, wte);
    if (g_wte)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g_wte, NULL, NULL, logits, dv->lnf, BT, C, d->Vp, acc,
                                                        me, mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, logits, w + wte->off, NULL, BT, C, d->Vp, me, mc));
    const X *res_last = (const X *)(!L ? dv->x0 : full ? dv->xout : (float *)gpt2rt__lacts(dv, L - 1).res3);
    GPT2RT__CU_CK(cudaMemsetAsync(dres, 0, (size_t)(BT * C * d->ab), s));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, gpt2rt__cu_grad_of(st, lnfw), gpt2rt__cu_grad_of(st, lnfb), dbuf,
                                            res_last, w + lnfw->off, dv->lnf_mean, dv->lnf_rstd));
    for (int64_t l = L - 1; l >= 0; l--) {
        /* FULL: entering a segment from its top, run its forward again from its checkpoint
           (the last segment's activations are still in the slots from the forward) */
        if (full && (l + 1) % d->ck == 0 && l + 1 < L)
            for (int64_t j = l - l % d->ck; j <= l; j++)
                GPT2RT__CU_RET(gpt2rt__cu_layer_forward<X>(ctx, st, j, (const X *)gpt2rt__cu_layer_input(st, j),
                                                           gpt2rt__lacts(dv, j)));
        st->layer = l;
        gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
        gpt2rt__layer_params g = gpt2rt__lparams(dv, st->grads, 1, l); /* device fp32, NULL: frozen */
        gpt2rt__layer_acts a = gpt2rt__lacts(dv, l);
        const X *res_in = (const X *)gpt2rt__cu_layer_input(st, l);
        const X *fch = (const X *)a.fch, *res2 = (const X *)a.res2, *atty = (const X *)a.atty, *qkv = (const X *)a.qkv;
        /* MLP; dres holds d(res3). Outputs not kept are recomputed into rcbuf, only for the
           weight gradients that need them (NULL g: frozen, skipped) */
        const X *gelu = (const X *)a.fch_gelu, *ln2 = (const X *)a.ln2;
        if (!gelu && g.fcprojw) {
            GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(rc, fch, BT * 4 * C, s));
            gelu = rc;
        }
        if (g.fcprojw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcprojw, g.fcprojb, dbs, dres, gelu, BT, 4 * C,
                                                            C, acc, me, mc));
        /* d(fch) = (dres Wproj) * gelu'(fch): the DGELU epilogue (bf16/fp16) or the kernel (fp32) */
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbig, dres, p.fcprojw, dgelu_epilogue ? fch : NULL, BT,
                                                       4 * C, C, me, mc));
        if (!dgelu_epilogue) GPT2RT__CU_CK(gpt2rt__cu_gelu_backward<X>(dbig, fch, dbig, BT * 4 * C, s));
        if (!ln2 && g.fcw) {
            GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res2, p.ln2w, p.ln2b, BT, C, s));
            ln2 = rc;
        }
        if (g.fcw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcw, g.fcb, dbs, dbig, ln2, BT, C, 4 * C, acc,
                                                            me, mc));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.fcw, NULL, BT, C, 4 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln2w, g.ln2b, dbuf, res2, p.ln2w, a.ln2_mean, a.ln2_rstd));
        /* attention; dres holds d(res2) */
        if (g.projw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.projw, g.projb, dbs, dres, atty, BT, C, C, acc,
                                                            me, mc));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dres, p.projw, NULL, BT, C, C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_attention_backward<X>(dbig, dbuf, qkv, atty, a.lse, st->att_D, (int)d->B, (int)d->T,
                                                       (int)C, (int)d->NH, s));
        const X *ln1 = (const X *)a.ln1;
        if (!ln1 && g.qkvw) {
            GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res_in, p.ln1w, p.ln1b, BT, C, s));
            ln1 = rc;
        }
        if (g.qkvw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.qkvw, g.qkvb, dbs, dbig, ln1, BT, C, 3 * C, acc,
                                                            me, mc));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.qkvw, NULL, BT, C, 3 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln1w, g.ln1b, dbuf, res_in, p.ln1w, a.ln1_mean, a.ln1_rstd));
    }
    st->layer = -1;
    /* embeddings: dwte by token buckets (deterministic), dwpe summed over the batch */
    float *g_wpe = gpt2rt__cu_grad_of(st, wpe);
    GPT2RT__CU_CK(gpt2rt__cu_encoder_backward<X>(g_wte, g_wpe, dres, st->buckets_ws, g_wte ? st->nb : 0, d->B, d->T,
                                                 C, s));
    return GPT2RT_OK;
}

/* ==== training calls ==== */

/* inputs, targets: host int32 (B,T), validated by the caller (inputs in [0,V), targets < V,
   negative ignored); targets may be NULL. With targets: the losses come back, *loss (may
   be NULL) and ctx->loss, ctx->loss_sum, ctx->n_targets are set as the CPU forward sets
   them. st->dlogits_in_forward = 1 (set by the caller, cleared here): the classifier also
   turns the logits into dlogits for the backward that must follow (one pass less). */
template <typename X>
static gpt2rt_result gpt2rt__cu_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int32_t *inputs,
                                          const int32_t *targets, float *loss) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    int fuse = st->dlogits_in_forward && targets;
    st->dlogits_in_forward = 0;
    st->dlogits_ready = 0;
    st->layer = -1;
    /* the pinned token buffers are free once the last copy out of them ran */
    GPT2RT__CU_CK(cudaEventSynchronize(st->ev_tok));
    /* host side first: a bad token returns before anything is queued */
    int32_t *h_in = st->h_tok, *h_tg = st->h_tok + BT, *h_bk = st->h_tok + 2 * BT;
    memcpy(h_in, inputs, (size_t)BT * 4);
    if (targets) memcpy(h_tg, targets, (size_t)BT * 4);
    st->nb = -1;
    if (targets && gpt2rt__model_tensor(ctx, GPT2RT__WTE)->goff >= 0) { /* the wte gradient's token buckets (host sort) */
        st->nb = gpt2rt__cu_encoder_buckets(h_bk, h_in, BT, d->Vp);
        if (st->nb < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_forward: a token is outside [0, %lld)",
                                (long long)d->Vp);
    }
    /* the copies out of h_tok, then the event that frees it, recorded whatever happened */
    cudaError_t e = cudaMemcpyAsync(dv->inputs, h_in, (size_t)BT * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && targets) e = cudaMemcpyAsync(dv->targets, h_tg, (size_t)BT * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && st->nb >= 0)
        e = cudaMemcpyAsync(st->buckets_ws, h_bk, (size_t)gpt2rt__cu_encoder_bucket_ints(BT) * 4,
                            cudaMemcpyHostToDevice, s);
    cudaError_t er = cudaEventRecord(st->ev_tok, s);
    GPT2RT__CU_CK(e);
    GPT2RT__CU_CK(er);
    GPT2RT__CU_RET(gpt2rt__cu_model_forward<X>(ctx, st));
    st->have_targets = targets != NULL;
    if (!targets) {
        if (loss) *loss = 0.0f;
        return GPT2RT_OK;
    }
    float dloss = st->loss_scale / (float)(BT * st->cfg.grad_accum);
    GPT2RT__CU_CK(gpt2rt__cu_classifier<X>((X *)dv->logits, dv->losses, dv->logit_lse, dv->targets, dloss, fuse, BT,
                                           d->V, d->Vp, s));
    st->dlogits_ready = fuse;
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_losses, dv->losses, (size_t)BT * 4, cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    /* the CPU's sum: in order, in double, over the counted targets */
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < BT; i++)
        if (targets[i] >= 0) { total += st->h_losses[i]; n++; }
    ctx->n_targets = n;
    ctx->loss_sum = total;
    ctx->loss = n ? (float)(total / (double)n) : 0.0f;
    if (loss) *loss = ctx->loss;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_forward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int32_t *inputs,
                                            const int32_t *targets, float *loss) {
    st->phase = "forward";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_forward_t<float>(ctx, st, inputs, targets, loss);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_forward_t<__nv_bfloat16>(ctx, st, inputs, targets, loss);
    return gpt2rt__cu_forward_t<__half>(ctx, st, inputs, targets, loss);
}

/* += the gradients of the last forward's loss (it must have had targets; the caller keeps
   the at-most-one-backward-per-forward rule). Does not wait for the device. */
static gpt2rt_result gpt2rt__cu_backward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "backward";
    st->layer = -1;
    if (!st->have_targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_backward: the last forward had no targets");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    const gpt2rt__dims *d = &st->d;
    int acc = st->grads_dirty;
    float dloss = st->loss_scale / (float)(d->BT * st->cfg.grad_accum);
    gpt2rt_result r = st->xt == CUDA_R_32F ? gpt2rt__cu_model_backward<float>(ctx, st, dloss, acc)
                    : st->xt == CUDA_R_16BF ? gpt2rt__cu_model_backward<__nv_bfloat16>(ctx, st, dloss, acc)
                    : gpt2rt__cu_model_backward<__half>(ctx, st, dloss, acc);
    if (r != GPT2RT_OK) return r;
    st->have_targets = 0;
    st->grads_dirty = 1;
    return GPT2RT_OK;
}

/* One AdamW step at learning rate lr (the caller: gpt2rt__opt_lr_at(&ctx->cfg, ctx->step)),
   bias correction for step ctx->step + 1, over the gradients summed since the last update
   (ctx->acc_targets counted targets). *norm: the global gradient norm of the mean loss
   (before clipping, loss scale removed); *skipped: 1 when it is not finite (gradients
   zeroed, weights and moments untouched; fp16: the scale halves); *loss_scale: the scale
   the next backward uses. The caller advances ctx->step when not skipped and resets its
   accumulation counters, as gpt2rt_update does. Waits for the device once (the norm). */
template <typename X>
static gpt2rt_result gpt2rt__cu_update_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm_out,
                                         int *skipped_out, float *scale_out) {
    const gpt2rt__dims *d = &st->d;
    const gpt2rt_config *c = &st->cfg;
    cudaStream_t s = st->stream;
    /* the reduction scratch: norm result (2 doubles), then the AdamW table */
    double *d_norm = (double *)(void *)st->red;
    gpt2rt__cu_adamw_tensor *d_tab = (gpt2rt__cu_adamw_tensor *)(void *)((unsigned char *)st->red + 16);
    double unscale = ctx->acc_targets ? (double)(d->BT * c->grad_accum) / (double)ctx->acc_targets : 0.0;
    unscale /= (double)st->loss_scale;
    GPT2RT__CU_CK(gpt2rt__cu_global_norm(d_norm, NULL, st->grads, st->n_train, st->norm_parts, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_norm, d_norm, sizeof(double), cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    float norm = (float)(st->h_norm[0] * unscale);
    int skipped = !isfinite(norm);
    if (skipped) {
        GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, s));
        if (c->precision == GPT2RT_PRECISION_FP16) {
            st->loss_scale = st->loss_scale * 0.5f < 1.0f ? 1.0f : st->loss_scale * 0.5f;
            st->clean_steps = 0;
        }
        char sc[64] = "";
        if (c->precision == GPT2RT_PRECISION_FP16) snprintf(sc, sizeof sc, ", fp16 loss scale now %g", (double)st->loss_scale);
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: gradient norm is %g at step %lld; update skipped%s",
                    (double)norm, (long long)ctx->step, sc);
    } else {
        float coef = 1.0f;
        if (c->grad_clip > 0.0f) {
            coef = c->grad_clip / (norm + 1e-6f);
            if (coef > 1.0f) coef = 1.0f;
        }
        float grad_scale = (float)(unscale * (double)coef);
        GPT2RT__CU_CK(cudaMemcpyAsync(d_tab, st->h_adamw, (size_t)st->n_adamw * sizeof(gpt2rt__cu_adamw_tensor),
                                      cudaMemcpyHostToDevice, s));
        for (int r = 0; r < st->n_runs; r++) {
            const gpt2rt__cu_adamw_run *run = &st->runs[r];
            float *params = st->master ? st->master : (float *)st->w + run->delta;
            X *params_x = st->master ? (X *)st->w + run->delta : NULL;
            GPT2RT__CU_CK(gpt2rt__cu_adamw<X>(params, params_x, st->grads, st->m, st->v, d_tab + run->i0, run->n,
                                              run->blocks, lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                                              ctx->step + 1, grad_scale, s));
        }
        st->host_stale = 1;
        if (c->precision == GPT2RT_PRECISION_FP16 && ++st->clean_steps >= GPT2RT__CU_SCALE_WINDOW) {
            st->loss_scale = st->loss_scale * 2.0f > GPT2RT__CU_SCALE_MAX ? GPT2RT__CU_SCALE_MAX : st->loss_scale * 2.0f;
            st->clean_steps = 0;
        }
    }
    st->grads_dirty = 0;
    if (norm_out) *norm_out = norm;
    if (skipped_out) *skipped_out = skipped;
    if (scale_out) *scale_out = st->loss_scale;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm,
                                           int *skipped, float *loss_scale) {
    st->phase = "update";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_update_t<float>(ctx, st, lr, norm, skipped, loss_scale);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_update_t<__nv_bfloat16>(ctx, st, lr, norm, skipped, loss_scale);
    return gpt2rt__cu_update_t<__half>(ctx, st, lr, norm, skipped, loss_scale);
}

/* dst (BT, V) fp32 = the last forward's logits without the padded columns (count must be
   BT*V, checked by the caller); fails if the classifier already turned them into dlogits */
template <typename X>
static gpt2rt_result gpt2rt__cu_logits_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *dst) {
    const gpt2rt__dims *d = &st->d;
    const size_t row = (size_t)d->V * sizeof(X);
    int64_t rows = (int64_t)(st->stage_bytes / row);
    if (rows < 1) rows = 1;
    const X *h = (const X *)(void *)st->h_stage;
    for (int64_t r0 = 0; r0 < d->BT; r0 += rows) {
        int64_t n = d->BT - r0 < rows ? d->BT - r0 : rows;
        GPT2RT__CU_CK(cudaMemcpy2DAsync(st->h_stage, row, (const X *)st->dev->logits + r0 * d->Vp, (size_t)d->Vp * sizeof(X),
                                        row, (size_t)n, cudaMemcpyDeviceToHost, st->stream));
        GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
        for (int64_t i = 0; i < n * d->V; i++) dst[r0 * d->V + i] = gpt2rt__cu_host_f(h[i]);
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_logits(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *dst, int64_t count) {
    st->phase = "logits";
    st->layer = -1;
    if (!dst || count != st->d.BT * st->d.V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_logits: dst holds %lld floats, needs B*T*vocab "
                            "= %lld", (long long)count, (long long)(st->d.BT * st->d.V));
    if (st->dlogits_ready)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_logits: the forward fused the classifier's backward "
                            "(dlogits_in_forward): the logits are gone");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_logits_t<float>(ctx, st, dst);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_logits_t<__nv_bfloat16>(ctx, st, dst);
    return gpt2rt__cu_logits_t<__half>(ctx, st, dst);
}

#undef GPT2RT__CU_CK
#undef GPT2RT__CU_MM
#undef GPT2RT__CU_RET
#endif /* GPT2RT__CU_BACKEND */
