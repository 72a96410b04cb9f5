/* cuda/driver.cuh - 8.5 Driver: errors, helpers, creation, weights between host and device, the model
   may call: cuda/matmul.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_DRIVER_CUH
#define GPT2RT__SRC_CUDA_DRIVER_CUH
#include "matmul.cuh"

/* ==== 8.5 Driver ==== */

/* The CUDA backend driver; kernels/train_step.cu checks it end to end against the CPU
   backend and the Hugging Face fixture, and times it.

   ============================================================================
   WHAT IT IS
   ============================================================================
   The model of gpt2rt.h (gpt2rt__model_forward / _backward / the optimizer) on one GPU,
   with the kernels of 8.2 (ops), 8.3 (attention) and 8.4 (matrix products, cuBLASLt), in
   fp32 (optionally TF32 matrix products), bf16 or fp16 (dynamic loss scaling).
   Everything runs on one stream (data parallel adds a communicator's stream, 8.6); the
   host waits only where a number must come back
   (the loss after a forward with targets, the gradient norm in the update, copies of
   weights and logits).

   Memory: one cudaMalloc per gpt2rt_mem category of exactly the bytes gpt2rt__layout
   plans for the CUDA dims (d.cuda = 1, d.act_bytes = d.weight_bytes = 2 in bf16/fp16), and the pointers
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
     logits       (BT,Vp) floatX, turned into dlogits in place; classifier_chunk = N < BT:
                  (N,Vp), one chunk of tokens at a time (7.3's classifier, the same rows)
     workspace    cuBLASLt 32 MiB | attention D (B,NH,T) fp32 | token buckets (3BT+1) int32,
                  or (patches) the windows x (Bw,L,M) fp32 | reduction scratch "red" fp32
                  | norm parts (one double per 65536)
     kvcache      generation (kv_batch > 0): keys, values (L,KB,KS,C) floatX, a pass's ids
                  (N) int32, its activations floatX (LayerNorm statistics fp32), the
                  sampled rows' logits (KB,Vp) floatX: gpt2rt__kv_layout's DEVICE part; its
                  HOST part (ids staged, fp32 logits, sampling) is pinned bookkeeping
     patches      activations: the patches (BT,PL) (floatX in their fp32 slot), RevIN's
                  mean, std (B), the patches before the affine zs (BT,PL), targets y and
                  predictions (Bw,H,M) fp32; transient: the patches' gradient (floatX in
                  its fp32 slot, affine only); logits: the normalised predictions (B,H);
                  aLLM4TS's heads: out_layer's (BT,PL) then (PATCH_DECODE) the placeholders'
                  yn (B,H), floatX; NEXT_PATCH's loss: B partial sums (fp64) in attention's
                  D scratch, free between a forward and its backward
   Dropout: 7.1's masks by the same hash (gpt2rt__drop_factor is host and device code),
   at the CPU's sites in the CPU's order, so the masks are the CPU's bit for bit; the
   attention probabilities' mask (attn_dropout) in 8.3's generic kernels, which then run
   for every head size and type (the tensor-core path has no mask).
   Every buffer starts on 256 bytes (d.align), so a cuBLASLt plan keyed on pointer
   alignment is the same for a kept block, a FULL slot, dbig and rcbuf. The reduction
   scratch is used strictly one kernel pair at a time on the stream: the LayerNorm
   backward's partials (ceil(BT/32), 2C), the bias-gradient vector (OC <= 4C; out_layer:
   H) of an accumulating weight-gradient matmul, and in the update the norm result (2 doubles)
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
     fixed per (shape, type, alignment) and split-K is off, but for the chunked
     classifier's d(lnf) (a fixed split-K algorithm: the same bits every run).

   ============================================================================
   ENTRY POINTS (all return gpt2rt_result; errors go to ctx->error via gpt2rt__fail,
   naming the call, the layer and the sizes; never exit, never print)
   ============================================================================
   gpt2rt__cu_create(ctx, &st, err, cap)          device state for ctx->cfg (backend CUDA)
   gpt2rt__cu_create_cfg(ctx, cfg, &st, err, cap) the same for another resolved config with
                                                  the same parameter table (the lab: a CPU
                                                  ctx as host side of a CUDA run)
   gpt2rt__cu_create_span(ctx, cfg, span, dev, &st, err, cap)  the layers of span on device
                                                  dev: a layer-split stage (10.2), ctx its
                                                  host context (gpt2rt__span_params's table)
   gpt2rt__cu_free(st)
   gpt2rt__cu_upload_params(ctx, st)              ctx->params -> device master + floatX copy
   gpt2rt__cu_download_params(ctx, st)            device master -> ctx->params (trained tensors;
                                                  ZeRO-1: those of the own shard)
   gpt2rt__cu_upload_moments / _download_moments  m, v (n_train each, host arrays)
   gpt2rt__cu_read_shard(ctx, st, what, lo, hi, k, dst)  the own shard's part of the trained
                                                  floats [lo, hi) of m, v or the gradient
   gpt2rt__cu_download_grads(ctx, st, g)          raw gradients (n_train) to the host
   gpt2rt__cu_zero(ctx, st, moments)              gradients (and m, v) to zero
   gpt2rt__cu_read_tensor(ctx, st, t, what, dst)  one tensor (internal layout) to the host
   gpt2rt__cu_forward(ctx, st, inputs, targets, &loss)   sets ctx->loss, loss_sum, n_targets
   gpt2rt__cu_forward_series(ctx, st, x, y, &loss)       patches: the same; predictions in st->h_pred
   gpt2rt__cu_backward(ctx, st)                   += gradients of the last forward's loss
   gpt2rt__cu_update(ctx, st, lr, &norm, &skipped, &loss_scale)  AdamW at step ctx->step+1
   gpt2rt__cu_logits(ctx, st, dst, count)         (BT, V) fp32 from the device logits
   gpt2rt__cu_be_decode(ctx, N, M)                generation's pass (the table's decode entry):
                                                  N new tokens through the cache, M rows' logits
   gpt2rt__cu_refresh_overhead(st)                re-measure the non-arena device memory

   The public calls on a CUDA context (11; ctx->cu is the state): gpt2rt_create plans,
   then gpt2rt__cu_open allocates the host weights (ctx->params, fp32, the only host
   arena: grads, moments, activations, logits and workspace live on the device; the
   pinned token, loss and staging buffers are host bookkeeping) and this state.
   gpt2rt_forward / _backward / _update / _logits call the entry points above;
   gpt2rt_step asks for dlogits in the forward. Loads upload after the host change;
   saves and param_read download what the device moved on (host_stale) or read the
   device (gradients, moments); param_write uploads.
   The model itself is 7.3's driver (gpt2rt__model_forward / _backward, which owns the
   layer loop and the recompute schedule for every backend) over gpt2rt__cu_layers,
   whose steps dispatch on st->xt to the templates here, with ax = st->dev, the shadow
   context whose arenas are the device's.
*/

#define GPT2RT__CU_STAGE_BYTES ((size_t)8 << 20)   /* pinned host staging buffer (at least) */

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
    gpt2rt__dims d;           /* d.cuda = 1, d.act_bytes = d.weight_bytes = 4 or 2 */
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
    int32_t *buckets_ws;      /* tokens: (3BT+1) int32, the wte gradient's token buckets */
    float *ts_x;              /* patches: (Bw,L,M) fp32, the windows RevIN reads (the same slot) */
    float *red;               /* reduction scratch, red_bytes (see the top comment) */
    int64_t red_bytes;
    double *norm_parts;       /* (norm chunks) fp64 */

    /* host (pinned) */
    int32_t *h_tok;           /* inputs (BT) | targets (BT) | buckets (3BT+1) */
    float *h_losses;          /* (BT) */
    float *h_pred;            /* patches: (Bw,H,M) the last forward's de-normalised predictions */
    double *h_norm;           /* (2) */
    unsigned char *h_stage;   /* stage_bytes, conversions and logits */
    size_t stage_bytes;
    gpt2rt__cu_adamw_tensor *h_adamw; /* (n_adamw) goff-indexed table, block0 per run */
    unsigned char *h_kv;      /* generation: the KV cache's host side (gpt2rt__kv_layout's HOST part) */
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
    int acc;                  /* the running backward accumulates (grads_dirty when it began) */
    int host_stale;           /* device weights moved on since the last download/upload */

    /* memory figures */
    uint64_t mem_total, free_at_create, free_after;
    uint64_t overhead;        /* device memory in use beyond the arenas (context, cuBLASLt, ...) */

    /* data parallel (8.6): the rank's device communicator (NULL on one device), the trained
       floats [opt_lo, opt_hi) whose master and moments this device keeps (ZeRO-1: its shard,
       master and moments indexed from opt_lo; else 0, n_train), and the events that order
       the communicator's stream after the compute stream (ev_grads) and back (ev_comm) */
    gpt2rt__comm *dcomm;
    int64_t opt_lo, opt_hi;
    cudaEvent_t ev_grads, ev_comm;
    int dp_ev_ok;

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

/* ---- small helpers ---- */

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
    return t && t->goff >= 0 ? st->grads + t->goff : NULL;
}
/* a tensor's floatX weights on the device (NULL: this model has none) */
template <typename X> static const X *gpt2rt__cu_weight(const gpt2rt__cu_state *st, const gpt2rt__tensor *t) {
    return t ? (const X *)st->w + t->off : NULL;
}

/* data parallel: the reductions a backward left in flight on the device communicator's
   stream (8.6) have finished, before the host reads the gradients or a memset clears them */
static gpt2rt_result gpt2rt__cu_comm_idle(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    if (!st->dcomm) return GPT2RT_OK;
    gpt2rt_result r = st->dcomm->wait(st->dcomm);
    return r == GPT2RT_OK ? r : gpt2rt__fail(ctx, r, "data parallel: the gradient reductions: %s", st->dcomm->err);
}

/* ---- creation ---- */

/* everything the state holds; safe on a partly created state and on NULL */
static void gpt2rt__cu_free(gpt2rt__cu_state *st) {
    if (!st) return;
    (void)cudaSetDevice(st->device);
    if (st->stream) (void)cudaStreamSynchronize(st->stream);
    if (st->blas_ok) gpt2rt__cu_blas_destroy(&st->blas);
    if (st->ev_ok) (void)cudaEventDestroy(st->ev_tok);
    if (st->dp_ev_ok) { (void)cudaEventDestroy(st->ev_grads); (void)cudaEventDestroy(st->ev_comm); }
    if (st->stream) (void)cudaStreamDestroy(st->stream);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
        if (st->arena[i]) (void)cudaFree(st->arena[i]);
    if (st->h_tok) (void)cudaFreeHost(st->h_tok);
    if (st->h_losses) (void)cudaFreeHost(st->h_losses);
    if (st->h_pred) (void)cudaFreeHost(st->h_pred);
    if (st->h_norm) (void)cudaFreeHost(st->h_norm);
    if (st->h_stage) (void)cudaFreeHost(st->h_stage);
    if (st->h_adamw) (void)cudaFreeHost(st->h_adamw);
    if (st->h_kv) (void)cudaFreeHost(st->h_kv);
    (void)cudaGetLastError();
    gpt2rt_config hooks = st->hooks;
    gpt2rt__free(&hooks, st->runs, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st->dev, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st, GPT2RT_MEM_BOOKKEEPING);
}

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
   (after a frozen tensor). Without frozen groups: one run. ZeRO-1: the parts of them in
   [opt_lo, opt_hi), offsets counted from opt_lo (the update adds it to the pointers). */
static int gpt2rt__cu_adamw_plan(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    int n = 0, runs = 0;
    int64_t last = -1;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo;
        int64_t hi = t->goff + t->rows * t->cols < st->opt_hi ? t->goff + t->rows * t->cols : st->opt_hi;
        if (hi <= lo) continue;
        gpt2rt__cu_adamw_tensor *a = &st->h_adamw[n];
        memset(a, 0, sizeof *a);
        a->off = lo - st->opt_lo;
        a->n = hi - lo;
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
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo; /* ZeRO-1: the master of the own shard */
        int64_t hi = t->goff + n < st->opt_hi ? t->goff + n : st->opt_hi;
        if (st->master && t->goff >= 0 && hi > lo)
            GPT2RT__CU_CK(cudaMemcpyAsync(st->master + (lo - st->opt_lo), src + (lo - t->goff), (size_t)(hi - lo) * 4,
                                          cudaMemcpyHostToDevice, s));
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

/* gpt2rt__cu_create_span's phases (st: the state so far; each writes err and returns
   the result, and the caller frees st when one fails) */
#define GPT2RT__CU_SFAIL(r, ...) do { snprintf(err, cap, __VA_ARGS__); return (r); } while (0)
#define GPT2RT__CU_SCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
        GPT2RT__CU_SFAIL(e_ == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE, \
                         "gpt2rt__cu_create: %s failed: %s (%s = %d) on device %d", #call, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_), (int)e_, st->device); } while (0)

/* the host table must be this config's (this span's) */
static gpt2rt_result gpt2rt__cu_create_table(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span *span = &st->span;
    int64_t np = 0, ntr = 0;
    int nt = gpt2rt__param_table(d, NULL, NULL, NULL);
    gpt2rt__span_params(d, span, NULL, &np, &ntr);
    if (nt != ctx->n_tensors || np != ctx->n_params || ntr != ctx->n_train || ctx->d.frozen != d->frozen ||
        ctx->d.C != d->C || ctx->d.L != d->L || ctx->d.Vp != d->Vp || ctx->d.P != d->P)
        GPT2RT__CU_SFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: the host context's parameter table "
                         "(%d tensors, %lld floats, %lld trained, frozen 0x%x) is not the config's (%d, %lld, %lld, 0x%x)",
                         ctx->n_tensors, (long long)ctx->n_params, (long long)ctx->n_train, ctx->d.frozen, nt,
                         (long long)np, (long long)ntr, d->frozen);
    st->n_params = np;
    st->n_train = ntr;
    /* ZeRO-1: the master and the moments hold shard 0's floats until gpt2rt__cu_dp_attach
       (8.6) gives the rank its own shard */
    st->opt_lo = 0;
    st->opt_hi = gpt2rt__sharded(d) ? gpt2rt__shard_lo(ntr, d->shards, 1) : ntr;
    return GPT2RT_OK;
}

/* the device, its free memory against the plan, then the arenas */
static gpt2rt_result gpt2rt__cu_create_arenas(gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    int dev_id = st->device;
    int n_dev = 0;
    {
        cudaError_t e = cudaGetDeviceCount(&n_dev);
        if (e != cudaSuccess || n_dev == 0) {
            (void)cudaGetLastError();
            GPT2RT__CU_SFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: no CUDA device (cudaGetDeviceCount: %s, %d "
                             "devices)", cudaGetErrorString(e), n_dev);
        }
    }
    {
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        int local_world = 0;
        if (!gpt2rt__env_int(e.local_world_size, 1, 1 << 20, &local_world))
            (void)gpt2rt__env_int(e.ompi_local_size, 1, 1 << 20, &local_world);
        char why[600];
        gpt2rt_result dr = gpt2rt__dev_check(n_dev, getenv("CUDA_VISIBLE_DEVICES"), local_world, cfg, why, sizeof why);
        if (dr != GPT2RT_OK) GPT2RT__CU_SFAIL(dr, "gpt2rt__cu_create: %s", why);
    }
    GPT2RT__CU_SCK(cudaSetDevice(dev_id));
    gpt2rt__layout(d, &st->span, st->bytes, NULL);
    uint64_t plan_total = 0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan_total += st->bytes[i];
    {
        size_t fr = 0, tot = 0;
        GPT2RT__CU_SCK(cudaMemGetInfo(&fr, &tot)); /* creates the context */
        st->free_at_create = fr;
        st->mem_total = tot;
        if (cfg->memory_budget && plan_total > cfg->memory_budget)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB), "
                             "memory_budget is %llu bytes (%.2f GiB); nothing was allocated",
                             (unsigned long long)plan_total, GPT2RT__GIB(plan_total),
                             (unsigned long long)cfg->memory_budget, GPT2RT__GIB(cfg->memory_budget));
        if (plan_total > (uint64_t)fr)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB) on "
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
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: cudaMalloc of %llu bytes (%.1f MiB) for %s "
                             "failed: %s; %llu of %llu bytes planned were allocated, %llu bytes free now",
                             (unsigned long long)st->bytes[i], GPT2RT__MIB(st->bytes[i]), gpt2rt_mem_name((gpt2rt_mem)i),
                             cudaGetErrorString(e), (unsigned long long)st->arena_total, (unsigned long long)plan_total,
                             (unsigned long long)fr);
        }
        st->allocated[i] = st->bytes[i];
        st->arena_total += st->bytes[i];
    }
    return GPT2RT_OK;
}

/* the pointers: gpt2rt__layout on a shadow context whose arenas are the device's */
static gpt2rt_result gpt2rt__cu_create_pointers(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    st->dev = (gpt2rt_ctx *)gpt2rt__alloc(&st->hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!st->dev) GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: shadow context (%zu bytes)", sizeof(gpt2rt_ctx));
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
                GPT2RT__CU_SFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: gpt2rt__layout gave %llu then %llu bytes for %s",
                                 (unsigned long long)st->bytes[i], (unsigned long long)again[i],
                                 gpt2rt_mem_name((gpt2rt_mem)i));
    }
    st->w = st->arena[GPT2RT_MEM_WEIGHTS];
    st->master = d->weight_bytes == 4 ? NULL : (float *)st->arena[GPT2RT_MEM_MASTER];
    st->grads = st->dev->grads;
    st->m = st->dev->m;
    st->v = st->dev->v;
    st->act_bytes = gpt2rt__ald(d, d->BT * d->C * d->act_bytes);
    st->att_D = st->dev->att_scratch;
    st->norm_parts = st->dev->norm_parts;
    { /* the workspace after attention's D: the inputs' slot (token buckets, or the series
         windows), then the reduction scratch up to the norm parts */
        unsigned char *b = (unsigned char *)st->dev->att_scratch + gpt2rt__ald(d, d->B * d->NH * d->T * 4);
        int64_t slot = gpt2rt__cu_inputs_bytes(d);
        st->buckets_ws = d->patches ? NULL : (int32_t *)(void *)b;
        st->ts_x = d->patches ? (float *)(void *)b : NULL;
        st->red = (float *)(void *)(b + slot);
        st->red_bytes = (int64_t)((unsigned char *)st->norm_parts - (b + slot));
        uint64_t ln = (uint64_t)gpt2rt__cu_layernorm_backward_scratch_bytes(d->BT, d->C);
        int64_t oc = d->H > d->patch_len ? d->H : d->patch_len; /* out_layer's bias: H, or PL (aLLM4TS) */
        uint64_t bias = (uint64_t)((4 * d->C > oc ? 4 * d->C : oc) * 4); /* the widest bias vector */
        uint64_t upd = 16 + (uint64_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor);
        uint64_t need = ln > bias ? ln : bias;
        if (upd > need) need = upd;
        if (st->red_bytes < 0 || (uint64_t)st->red_bytes < need)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: the planned reduction scratch holds %lld bytes, the "
                             "kernels need %llu (LayerNorm partials %llu, bias vector %llu, update %llu): gpt2rt__layout "
                             "and the driver disagree", (long long)st->red_bytes, (unsigned long long)need,
                             (unsigned long long)ln, (unsigned long long)bias, (unsigned long long)upd);
    }
    return GPT2RT_OK;
}

/* stream, cuBLASLt, events, pinned host buffers, the AdamW runs */
static gpt2rt_result gpt2rt__cu_create_buffers(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    GPT2RT__CU_SCK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    {
        int s = gpt2rt__cu_blas_init(&st->blas, st->dev->gemm_ws, (size_t)GPT2RT__CU_BLAS_WORKSPACE, st->stream,
                                     st->mm_err, sizeof st->mm_err);
        if (s) GPT2RT__CU_SFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: %s", st->mm_err);
        st->blas_ok = 1;
        st->blas.tf32 = cfg->tf32 ? 1 : 0;
    }
    GPT2RT__CU_SCK(cudaEventCreateWithFlags(&st->ev_tok, cudaEventDisableTiming));
    st->ev_ok = 1;
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_tok, (size_t)(2 * d->BT + gpt2rt__cu_encoder_bucket_ints(d->BT)) * 4));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_losses, (size_t)d->BT * 4));
    if (d->patches) GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_pred, (size_t)d->n_out * 4));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_norm, 2 * sizeof(double)));
    st->stage_bytes = GPT2RT__CU_STAGE_BYTES;
    if ((size_t)d->V * 4 > st->stage_bytes) st->stage_bytes = (size_t)d->V * 4;
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_stage, st->stage_bytes));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_adamw, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor)));
    if (d->kv_batch && st->span.last) /* generation's ids and logits pass through it: pinned */
        GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_kv, (size_t)gpt2rt__kv_layout(d, 0, 1, NULL, NULL,
                                                                                     GPT2RT__KV_HOST)));
    st->runs = (gpt2rt__cu_adamw_run *)gpt2rt__alloc(&st->hooks, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_run),
                                                     GPT2RT_MEM_BOOKKEEPING);
    if (!st->runs) GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: AdamW run table");
    gpt2rt__cu_adamw_plan(ctx, st);
    return GPT2RT_OK;
}
#undef GPT2RT__CU_SCK
#undef GPT2RT__CU_SFAIL

/* The same for the layers of span on device dev_id (a layer-split stage, 10.2): ctx is
   then the stage's host context, whose table is gpt2rt__span_params's for span and
   whose params hold that table's fp32 weights. */
static gpt2rt_result gpt2rt__cu_create_span(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, const gpt2rt__span *span,
                                            int dev_id, gpt2rt__cu_state **out, char *err, size_t cap) {
#define GPT2RT__CU_CFAIL(r, ...) do { snprintf(err, cap, __VA_ARGS__); gpt2rt__cu_free(st); return (r); } while (0)
#define GPT2RT__CU_CCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
        GPT2RT__CU_CFAIL(e_ == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE, \
                         "gpt2rt__cu_create: %s failed: %s (%s = %d) on device %d", #call, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_), (int)e_, dev_id); } while (0)
    gpt2rt__cu_state *st = NULL;
    if (!out || !ctx || !cfg || !span || !err || !cap) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    err[0] = 0;
    if (cfg->backend != GPT2RT_BACKEND_CUDA)
        GPT2RT__CU_CFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: config backend = %d, not GPT2RT_BACKEND_CUDA",
                         (int)cfg->backend);

    st = (gpt2rt__cu_state *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__cu_state), GPT2RT_MEM_BOOKKEEPING);
    if (!st) { snprintf(err, cap, "gpt2rt__cu_create: %zu bytes of host memory for the state", sizeof(gpt2rt__cu_state)); return GPT2RT_ERR_OUT_OF_MEMORY; }
    memset(st, 0, sizeof *st);
    st->hooks = ctx->cfg;
    st->cfg = *cfg;
    st->d = gpt2rt__dims_of(cfg);
    st->span = *span;
    st->device = dev_id;
    st->layer = -1;
    st->phase = "create";
    st->nb = -1;
    st->xt = st->d.act_bytes == 4 ? CUDA_R_32F : cfg->precision == GPT2RT_PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    st->loss_scale = cfg->precision == GPT2RT_PRECISION_FP16 ? cfg->loss_scale : 1.0f;

    gpt2rt_result pr = gpt2rt__cu_create_table(ctx, st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_arenas(st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_pointers(ctx, st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_buffers(ctx, st, err, cap);
    if (pr != GPT2RT_OK) {
        gpt2rt__cu_free(st);
        return pr;
    }

    /* zero gradients and moments, then the weights from the host */
    if (st->n_train) { /* an inference context (config.inference) has neither */
        GPT2RT__CU_CCK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
        GPT2RT__CU_CCK(cudaMemsetAsync(st->m, 0, (size_t)st->dev->n_opt * 8, st->stream)); /* m, v: n_opt each */
    }
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

/* The device state for the resolved config cfg (backend CUDA) on top of the host context
   ctx, whose parameter table (shape and frozen groups) must be the one cfg gives.
   err gets the reason on failure (with the numbers); *out is NULL then. */
static gpt2rt_result gpt2rt__cu_create_cfg(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, gpt2rt__cu_state **out,
                                           char *err, size_t cap) {
    if (!out || !ctx || !cfg || !err || !cap) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    /* data parallel: one state per rank, on device_ids[0] (gpt2rt__dp_open passes each rank
       a config whose device_ids start with its own device); layer split: gpt2rt__cu_create_span */
    if (cfg->parallel == GPT2RT_PARALLEL_LAYER_SPLIT || (cfg->parallel == GPT2RT_PARALLEL_NONE && cfg->n_devices != 1)) {
        snprintf(err, cap, "gpt2rt__cu_create: parallel = %d over %d devices: the CUDA driver runs one device (or "
                 "one data-parallel rank)", (int)cfg->parallel, cfg->n_devices);
        return GPT2RT_ERR_INVALID_ARGUMENT; /* the callers route layer split to 8.7, ranks to 8.6 */
    }
    gpt2rt__span whole = gpt2rt__span_of(cfg, 0);
    return gpt2rt__cu_create_span(ctx, cfg, &whole, cfg->device_ids[0], out, err, cap);
}

/* the device state of ctx->cfg (after the splice: backend CUDA) */
static gpt2rt_result gpt2rt__cu_create(gpt2rt_ctx *ctx, gpt2rt__cu_state **out, char *err, size_t cap) {
    if (!ctx) return GPT2RT_ERR_INVALID_ARGUMENT;
    return gpt2rt__cu_create_cfg(ctx, &ctx->cfg, out, err, cap);
}

/* ---- weights and optimizer state between host and device ---- */

/* the trained tensors' fp32 master -> ctx->params (frozen tensors never change on the
   device: the host copy is already theirs). ZeRO-1: the part in the own shard only (the
   ranks executor, 10.1, asks every rank). Synchronous. */
static gpt2rt_result gpt2rt__cu_download_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "download_params";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t n = t->rows * t->cols;
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo, hi = t->goff + n < st->opt_hi ? t->goff + n : st->opt_hi;
        if (hi <= lo) continue;
        const float *src = st->master ? st->master + (lo - st->opt_lo) : (const float *)st->w + t->off + (lo - t->goff);
        GPT2RT__CU_CK(cudaMemcpyAsync(ctx->params + t->off + (lo - t->goff), src, (size_t)(hi - lo) * 4,
                                      cudaMemcpyDeviceToHost, st->stream));
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->host_stale = 0;
    return GPT2RT_OK;
}

/* of the trained floats [lo, hi), the part in the own shard [opt_lo, opt_hi) of m, v or
   the gradient (whose offsets are the whole gradient's: the reduce-scatter sums in
   place) to its place in dst (hi - lo floats), times k; the rest untouched. Synchronous. */
static gpt2rt_result gpt2rt__cu_read_shard(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, gpt2rt_param_what what, int64_t lo,
                                           int64_t hi, float k, float *dst) {
    int64_t a = lo > st->opt_lo ? lo : st->opt_lo, b = hi < st->opt_hi ? hi : st->opt_hi;
    if (b <= a) return GPT2RT_OK;
    st->phase = "read_shard";
    st->layer = -1;
    if (what == GPT2RT_PARAM_GRAD) GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    const float *src = what == GPT2RT_PARAM_GRAD ? st->grads + a
                     : (what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) + (a - st->opt_lo);
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(dst + (a - lo), src, (size_t)(b - a) * 4, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    if (k != 1.0f) for (int64_t i = a - lo; i < b - lo; i++) dst[i] *= k;
    return GPT2RT_OK;
}

/* m, v (n_train fp32 each, goff order) host -> device, and back; either may be NULL.
   ZeRO-1: the own shard [opt_lo, opt_hi) of them only. */
static gpt2rt_result gpt2rt__cu_upload_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *m, const float *v) {
    st->phase = "upload_moments";
    st->layer = -1;
    size_t bytes = (size_t)(st->opt_hi - st->opt_lo) * 4;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (m) GPT2RT__CU_CK(cudaMemcpyAsync(st->m, m + st->opt_lo, bytes, cudaMemcpyHostToDevice, st->stream));
    if (v) GPT2RT__CU_CK(cudaMemcpyAsync(st->v, v + st->opt_lo, bytes, cudaMemcpyHostToDevice, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__cu_download_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *m, float *v) {
    if (m) GPT2RT__TRY(gpt2rt__cu_read_shard(ctx, st, GPT2RT_PARAM_ADAM_M, 0, st->n_train, 1.0f, m));
    return v ? gpt2rt__cu_read_shard(ctx, st, GPT2RT_PARAM_ADAM_V, 0, st->n_train, 1.0f, v) : GPT2RT_OK;
}
/* zero the gradients (a dropped accumulation), and with moments = 1 also m and v (a
   training reset); the next backward then overwrites instead of accumulating. Synchronous. */
static gpt2rt_result gpt2rt__cu_zero(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int moments) {
    st->phase = "zero";
    st->layer = -1;
    GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (!st->n_train) return GPT2RT_OK; /* an inference context (config.inference): nothing to zero */
    GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
    if (moments) GPT2RT__CU_CK(cudaMemsetAsync(st->m, 0, (size_t)st->dev->n_opt * 8, st->stream));
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
    GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(g, st->grads, (size_t)st->n_train * 4, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* one tensor (rows*cols floats, internal layout) to dst: its value (fp32 master; frozen:
   the host copy), raw gradient, m or v (frozen: GPT2RT_ERR_INVALID_ARGUMENT). ZeRO-1: the
   master (bf16/fp16), the moments and (once reduce-scattered) the gradient's sum of the
   part in the own shard only, to the same place of dst (the rest of dst untouched;
   gpt2rt__cu_param_read asks every rank). */
static gpt2rt_result gpt2rt__cu_read_tensor(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const gpt2rt__tensor *t,
                                                gpt2rt_param_what what, float *dst) {
    st->phase = "read_tensor";
    st->layer = -1;
    size_t bytes = (size_t)(t->rows * t->cols) * 4;
    const float *src = NULL;
    int grad_shard = what == GPT2RT_PARAM_GRAD && gpt2rt__sharded(&ctx->d) && ctx->dp_reduced;
    int sharded = what == GPT2RT_PARAM_ADAM_M || what == GPT2RT_PARAM_ADAM_V || (what == GPT2RT_PARAM_VALUE && st->master) ||
                  grad_shard;
    if (t->goff >= 0 && sharded && (st->opt_lo > 0 || st->opt_hi < st->n_train)) {
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo;
        int64_t hi = t->goff + t->rows * t->cols < st->opt_hi ? t->goff + t->rows * t->cols : st->opt_hi;
        if (hi <= lo) return GPT2RT_OK;
        dst += lo - t->goff;
        bytes = (size_t)(hi - lo) * 4;
        if (grad_shard) { /* the whole gradient's offsets: the reduce-scatter sums in place */
            GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
            src = st->grads + lo;
        } else
            src = (what == GPT2RT_PARAM_VALUE ? st->master : what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) +
                  (lo - st->opt_lo);
    } else if (what == GPT2RT_PARAM_VALUE) {
        if (t->goff < 0) { memcpy(dst, ctx->params + t->off, bytes); return GPT2RT_OK; }
        src = st->master ? st->master + t->goff : (const float *)st->w + t->off;
    } else {
        if (t->goff < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_read_tensor: %s is frozen: no gradient "
                                "or moments", t->name);
        src = (what == GPT2RT_PARAM_GRAD ? st->grads : what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) + t->goff;
        if (what == GPT2RT_PARAM_GRAD) GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    }
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* ---- the model ---- */

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
    /* the masks: attention probabilities, residual branches */
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    st->layer = l;
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, qkv, NULL, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_attention_forward<X>(atty, a.lse, qkv, (int)d->B, (int)d->T, (int)C, (int)d->NH, s, &da,
                                                  (int)d->TH)); /* TH: the placeholder mask's history, or T */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res2, NULL, atty, p.projw, p.projb, BT, C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(res2, res2, &dr2, BT * C, s)); /* the branch, before the add */
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res2, res2, res, BT * C, s));
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln2, a.ln2_mean, a.ln2_rstd, res2, p.ln2w, p.ln2b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, fch, NULL, ln2, p.fcw, p.fcb, BT, C, 4 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(gelu, fch, BT * 4 * C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res3, NULL, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(res3, res3, &dr3, BT * C, s));
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res3, res3, res2, BT * C, s));
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_CUDA_DRIVER_CUH */
