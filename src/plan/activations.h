/* plan/activations.h - 3.2 Activations and arenas
   may call: common/types.h, common/errors.h, common/comm.h, plan/params.h */
#ifndef GPT2RT__SRC_PLAN_ACTIVATIONS_H
#define GPT2RT__SRC_PLAN_ACTIVATIONS_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "params.h"

/* ==== 3.2 Activations and arenas ==== */
/* the memory documentation: what every byte of the plan is for */

/* One layer's saved activations, in order, in bytes (activations of d->act_bytes bytes,
   statistics fp32). full: every field (the FULL recompute slots); else the ones
   d->keep_* asks for, the others NULL. Fills a (pointers from base) when non-NULL. */
static int64_t gpt2rt__ald(const gpt2rt__dims *d, int64_t bytes) { return (bytes + d->align - 1) / d->align * d->align; }

/* bytes into the logits arena where the normalised predictions (B*M,H) start: after a
   sequence head's (BT,PL) outputs, 0 for the flatten head (they are its output) */
static int64_t gpt2rt__ts_yn_off(const gpt2rt__dims *d) { return d->seqhead ? gpt2rt__ald(d, d->BT * d->patch_len * d->act_bytes) : 0; }

static int64_t gpt2rt__layer_acts_carve(const gpt2rt__dims *d, unsigned char *base, gpt2rt__layer_acts *a, int full) {
    int64_t o = 0, BT = d->BT, C = d->C, ab = d->act_bytes;
#define GPT2RT__CARVE(field, n, eb, keep) do { int k_ = full || (keep); \
        if (a) { a->field = k_ ? (float *)(void *)(base + o) : NULL; } \
        if (k_) { o += gpt2rt__ald(d, (n) * (eb)); } } while (0)
    GPT2RT__CARVE(ln1, BT * C, ab, d->keep_ln1);
    GPT2RT__CARVE(ln1_mean, BT, 4, 1);
    GPT2RT__CARVE(ln1_rstd, BT, 4, 1);
    GPT2RT__CARVE(qkv, BT * 3 * C, ab, 1);
    GPT2RT__CARVE(lse, d->B * d->NH * d->T, 4, 1);
    GPT2RT__CARVE(atty, BT * C, ab, 1);
    GPT2RT__CARVE(res2, BT * C, ab, 1);
    GPT2RT__CARVE(ln2, BT * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(ln2_mean, BT, 4, 1);
    GPT2RT__CARVE(ln2_rstd, BT, 4, 1);
    GPT2RT__CARVE(fch, BT * 4 * C, ab, 1);
    GPT2RT__CARVE(fch_gelu, BT * 4 * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(res3, BT * C, ab, 1);
#undef GPT2RT__CARVE
    return o;
}

/* the saved activations of layer l (NONE, SELECTIVE), or of its FULL recompute slot */
static gpt2rt__layer_acts gpt2rt__lacts(const gpt2rt_ctx *ctx, int64_t l) {
    gpt2rt__layer_acts a;
    int full = ctx->d.recompute == GPT2RT_RECOMPUTE_FULL;
    /* a layer-split stage's blocks start at its first layer; inference: two blocks in turn, so
       layer l reads layer l-1's output from the other */
    int64_t slot = full ? l % ctx->d.checkpoint_every : ctx->d.infer ? (l - ctx->l0) % 2 : l - ctx->l0;
    gpt2rt__layer_acts_carve(&ctx->d, ctx->layer_acts + slot * ctx->layer_stride, &a, full);
    return a;
}

/* the CPU matrix product's blocking (7.2 packs A and B in blocks of these sizes) and its workspace */
#ifndef GPT2RT_SGEMM_KC
#define GPT2RT_SGEMM_KC 256   /* k slice: B micro-panel KC*NR*4 = 32 KiB stays in L1 (48 KiB) */
#endif
#ifndef GPT2RT_SGEMM_MC
#define GPT2RT_SGEMM_MC 384   /* rows of packed A block: MC*KC*4 = 384 KiB, L2 resident */
#endif
#ifndef GPT2RT_SGEMM_NC
#define GPT2RT_SGEMM_NC 768   /* cols of packed B block: KC*NC*4 = 768 KiB; with M=256 the C block (M x NC) also stays in L2 */
#endif
#if GPT2RT_SGEMM_KC < 1 || GPT2RT_SGEMM_MC < 14 || GPT2RT_SGEMM_NC < 32
#error "gpt2rt.h: GPT2RT_SGEMM_KC >= 1, GPT2RT_SGEMM_MC >= 14 and GPT2RT_SGEMM_NC >= 32 (one SIMD tile per block at least)"
#endif

/* floats of workspace per thread (rounded to 64 bytes) */
static size_t gpt2rt__sg_thread_floats(void) {
    size_t f = (size_t)GPT2RT_SGEMM_MC * GPT2RT_SGEMM_KC + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC + 16;
    return (f + 15) & ~(size_t)15;
}

static size_t gpt2rt__sgemm_workspace_bytes(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * gpt2rt__sg_thread_floats() * sizeof(float);
}

/* the optimizer's gradient norm sums fixed chunks (9): one double per chunk */
#define GPT2RT__NORM_CHUNK 65536
static int64_t gpt2rt__opt_norm_chunks(int64_t n_params) { return (n_params + GPT2RT__NORM_CHUNK - 1) / GPT2RT__NORM_CHUNK; }

#define GPT2RT__CU_BLAS_WORKSPACE ((int64_t)32 << 20) /* cuBLASLt workspace on Hopper */

/* the CUDA workspace's input slot: tokens, the wte gradient's buckets ((3BT+1) int32);
   patches, the windows x (Bw,L,M) fp32 that RevIN reads on the device */
static int64_t gpt2rt__cu_inputs_bytes(const gpt2rt__dims *d) {
    return gpt2rt__ald(d, d->patches ? d->B * d->lookback * 4 : (3 * d->BT + 1) * 4);
}

/* prompt positions one row feeds the model in one generation pass: bounds the
   pass's scratch; a longer prompt takes several passes */
#define GPT2RT__KV_CHUNK 128
/* bf16 weights: a layer's LayerNorm weights and biases in fp32 for the ops that read
   them (ln_1 2C, c_attn bias 3C, c_proj bias C, ln_2 2C, c_fc bias 4C, mlp c_proj bias C) */
#define GPT2RT__KV_WVEC 13

/* bf16 (the high half of an fp32) from f, rounded to nearest even; a NaN stays a
   (quiet) NaN rather than rounding into an infinity */
static uint16_t gpt2rt__bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float gpt2rt__bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* weight i of the arena (the tensor table's offsets count elements in either kind) */
static void gpt2rt__w_set(gpt2rt_ctx *ctx, int64_t i, float v) {
    if (ctx->params16) ctx->params16[i] = gpt2rt__bf16_round(v);
    else ctx->params[i] = v;
}
static float gpt2rt__w_get(const gpt2rt_ctx *ctx, int64_t i) {
    return ctx->params16 ? gpt2rt__bf16_widen(ctx->params16[i]) : ctx->params[i];
}

/* what gpt2rt__kv_layout lays out: ALL, the CPU's one arena; DEVICE, a CUDA device's arena
   (the cache and a pass's activations in the storage type d->act_bytes, the pass's ids, the
   sampled rows' logits); HOST, the CUDA context's host side of it (the ids staged, the
   logits in fp32, the sampling scratch: pinned bookkeeping, no device bytes) */
enum { GPT2RT__KV_ALL, GPT2RT__KV_DEVICE, GPT2RT__KV_HOST };

/* Generation's arena (GPT2RT_MEM_KVCACHE) in bytes for nl layers (last: the device
   with the head samples, so it holds the logits and the sampling scratch); binds
   *kv's pointers into base when both are non-NULL. 0 without a cache. */
static int64_t gpt2rt__kv_layout(const gpt2rt__dims *d, int64_t nl, int last, unsigned char *base, gpt2rt__kv *kv,
                                 int part) {
    if (kv) memset(kv, 0, sizeof *kv);
    if (!d->kv_batch) return 0;
    int64_t C = d->C, KB = d->kv_batch, N = KB * (d->kv_len < GPT2RT__KV_CHUNK ? d->kv_len : GPT2RT__KV_CHUNK), o = 0;
    int bind = base && kv, dev = part != GPT2RT__KV_HOST, cpu = part == GPT2RT__KV_ALL, host = part != GPT2RT__KV_DEVICE;
    int64_t eb = part == GPT2RT__KV_DEVICE ? d->act_bytes : 4; /* cache and activations: the storage type on a device */
#define GPT2RT__KV(field, type, n, on) do { if (on) { if (bind) kv->field = (type *)(void *)(base + o); \
        o += gpt2rt__ald(d, (int64_t)(n) * (int64_t)sizeof(type)); } } while (0)
#define GPT2RT__KVX(field, n, on) do { if (on) { if (bind) kv->field = (float *)(void *)(base + o); \
        o += gpt2rt__ald(d, (int64_t)(n) * eb); } } while (0)
    GPT2RT__KVX(k, nl * KB * d->kv_len * C, dev);
    GPT2RT__KVX(v, nl * KB * d->kv_len * C, dev);
    GPT2RT__KV(tok, int32_t, N, 1);
    GPT2RT__KV(row, int32_t, N, 1);
    GPT2RT__KV(pos, int32_t, N, 1);
    GPT2RT__KVX(x, N * C, dev);
    GPT2RT__KVX(ln, N * C, dev);
    GPT2RT__KV(ln_mean, float, N, dev);
    GPT2RT__KV(ln_rstd, float, N, dev);
    GPT2RT__KVX(qkv, N * 3 * C, dev);
    GPT2RT__KVX(atty, N * C, dev);
    GPT2RT__KVX(proj, N * C, dev);
    GPT2RT__KVX(fch, N * 4 * C, dev);
    GPT2RT__KV(att, float, d->n_threads * gpt2rt__pad16(d->kv_len), cpu);
    if (d->bf16_weights) GPT2RT__KV(wvec, float, GPT2RT__KV_WVEC * C, cpu); /* a layer's vectors (or ln_f's), widened */
    if (last) {
        GPT2RT__KVX(logits, KB * d->Vp, 1);
        GPT2RT__KV(sel, int32_t, KB, host);
        GPT2RT__KV(done, int64_t, KB, host);
        GPT2RT__KV(cached, int64_t, KB, host);
        GPT2RT__KV(limit, int64_t, KB, host);
        GPT2RT__KV(rng, uint64_t, KB, host);
        GPT2RT__KV(prob, double, d->Vp, host);
        GPT2RT__KV(cand, gpt2rt__kv_cand, d->Vp, host);
    }
#undef GPT2RT__KV
#undef GPT2RT__KVX
    if (bind) kv->N = N;
    return o;
}

/* The arenas of every category, in bytes, for the device holding span s, and (when
   ctx is non-NULL and its arenas are allocated: the CPU backend, one device) the
   pointers into them. The single source of truth for the plan and for creation:
   planned == allocated by construction.
   Layer split: the parameters of gpt2rt__span_params (wte on the first device a
   weights-only copy unless it is also the last; its gradient, moments and master on
   the last, which also runs the embedding's part of the wte gradient on the first's
   d(x0), 10.2), the activations of the span's layers (x0 is the span's input), ln_f
   and the logits on the last. Data parallel: every device holds it all. */
static void gpt2rt__layout(const gpt2rt__dims *d, const gpt2rt__span *s, uint64_t bytes[GPT2RT_MEM_COUNT],
                           gpt2rt_ctx *ctx) {
    int64_t BT = d->BT, C = d->C, ab = d->act_bytes, nl = s->l1 - s->l0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) bytes[i] = 0;

    /* parameters: held (weights) and owned (master, grads, moments) */
    int64_t held, owned;
    gpt2rt__span_params(d, s, NULL, &held, &owned);
    bytes[GPT2RT_MEM_WEIGHTS] = (uint64_t)(held * d->weight_bytes);
    /* ZeRO-1: the optimizer state of rank r's shard of the trained floats only (shard 0
       is the largest); the gradients stay whole: the backward writes all of them, padded
       to d->shards equal shards for the reduce-scatter (1.4) */
    int64_t opt_owned = gpt2rt__shard_lo(owned, d->shards, 1);
    /* low precision: an fp32 master of what this device trains */
    bytes[GPT2RT_MEM_MASTER] = d->weight_bytes == 4 ? 0 : (uint64_t)(opt_owned * 4);
    bytes[GPT2RT_MEM_GRADS] = (uint64_t)(gpt2rt__shard_padded(owned, d->shards) * 4);
    bytes[GPT2RT_MEM_MOMENTS] = (uint64_t)(opt_owned * 8);

    /* activations: tokens, layer input, the layers (or FULL's checkpoints and slots), ln_f, losses */
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    int64_t stride = gpt2rt__layer_acts_carve(d, NULL, NULL, full);
    int64_t n_blocks = full ? (d->checkpoint_every < nl ? d->checkpoint_every : nl) : d->infer ? (nl < 2 ? nl : 2) : nl;
    int64_t n_ckpt = full ? (nl + d->checkpoint_every - 1) / d->checkpoint_every - 1 : 0; /* the layer input is checkpoint 0 */
    int64_t o = 0, act = gpt2rt__ald(d, BT * C * ab);
    /* tokens: the ids; patches: the normalised patches and their series' statistics,
       the targets and the de-normalised predictions */
    int64_t o_inputs = o, o_targets = o, o_patch = o, o_mean = o, o_std = o, o_y = o, o_pred = o, o_z = o;
    if (!d->patches) {
        o_inputs = o; if (s->first) o += gpt2rt__ald(d, BT * 4);
        o_targets = o; if (s->last) o += gpt2rt__ald(d, BT * 4);
    } else {
        if (s->first) {
            o_patch = o; o += gpt2rt__ald(d, BT * d->patch_len * 4);
            o_mean = o; o += gpt2rt__ald(d, d->B * 4);
            o_std = o; o += gpt2rt__ald(d, d->B * 4);
            o_z = o; if (d->affine) o += gpt2rt__ald(d, BT * d->patch_len * 4); /* the patches before the affine */
        }
        if (s->last && d->seqhead != GPT2RT_HEAD_NEXT_PATCH) { /* NEXT_PATCH: the targets are the patches themselves */
            o_y = o; o += gpt2rt__ald(d, d->n_out * 4);
            o_pred = o; o += gpt2rt__ald(d, d->n_out * 4);
        }
    }
    int64_t o_x0 = o; o += act;
    int64_t o_layers = o; o += n_blocks * stride;
    int64_t o_ckpt = o; o += n_ckpt * act;
    int64_t o_xout = o; if (full && s->last) o += act;
    int64_t o_lnf = o, o_lnf_mean = o, o_lnf_rstd = o, o_losses = o, o_lse = o;
    if (s->last) {
        o_lnf = o; o += act;
        o_lnf_mean = o; o += gpt2rt__ald(d, BT * 4);
        o_lnf_rstd = o; o += gpt2rt__ald(d, BT * 4);
        if (!d->patches) { /* the cross-entropy's */
            o_losses = o; o += gpt2rt__ald(d, BT * 4);
            o_lse = o; o += gpt2rt__ald(d, BT * 4);
        }
    }
    bytes[GPT2RT_MEM_ACTIVATIONS] = (uint64_t)o;

    /* transient: gradient of the residual stream, two scratch buffers, and the
       recompute buffer for outputs not kept */
    int64_t big = gpt2rt__ald(d, BT * 4 * C * ab);
    /* patches with RevIN's affine: the gradient of the patches (BT,PL) */
    int64_t dpatch = d->affine && s->first ? gpt2rt__ald(d, BT * d->patch_len * 4) : 0;
    bytes[GPT2RT_MEM_TRANSIENT] = d->infer ? 0 : (uint64_t)(2 * act + big + (d->recompute_buffer ? big : 0) + dpatch);
    /* the head's output: logits (classifier_chunk,Vp) (BT, or the chunked classifier's chunk), or the
       normalised predictions (B*M,H); sequence heads: a patch a position (BT,PL),
       PATCH_DECODE then its placeholders' (B*M,H) */
    bytes[GPT2RT_MEM_LOGITS] = !s->last ? 0 : d->seqhead ? (uint64_t)(gpt2rt__ts_yn_off(d) + d->B * d->H * ab)
                               : d->patches ? (uint64_t)(d->B * d->H * ab) : (uint64_t)(d->classifier_chunk * d->Vp * ab);

    /* the norm's partial sums cover what this device owns */
    uint64_t ws_gemm, ws_att, ws_norm = (uint64_t)gpt2rt__ald(d, gpt2rt__opt_norm_chunks(owned) * 8);
    if (d->cuda) { /* cuBLASLt workspace; attention's row statistics; the inputs' slot; reductions */
        int64_t n_tensors = GPT2RT__N_MODEL + GPT2RT__PER_LAYER * d->L + (d->patches ? GPT2RT__N_TS : 0);
        int64_t oc = d->H > d->patch_len ? d->H : d->patch_len;                     /* out_layer's bias: H, or PL (aLLM4TS) */
        int64_t rows = (BT + 31) / 32, bias = 4 * C > oc ? 4 * C : oc;
        int64_t red = rows * 2 * C * 4 > bias * 4 ? rows * 2 * C * 4 : bias * 4; /* LayerNorm / bias partials */
        if (n_tensors * 32 + 16 > red) red = n_tensors * 32 + 16;                  /* the AdamW tensor table */
        ws_gemm = (uint64_t)GPT2RT__CU_BLAS_WORKSPACE;
        ws_att = (uint64_t)(gpt2rt__ald(d, d->B * d->NH * d->T * 4) + gpt2rt__cu_inputs_bytes(d) +
                            gpt2rt__ald(d, red));
    } else {
        ws_gemm = (uint64_t)gpt2rt__ald(d, (int64_t)gpt2rt__sgemm_workspace_bytes(d->n_threads));
        ws_att = (uint64_t)d->n_threads * (uint64_t)gpt2rt__pad16(2 * d->T) * 4;
    }
    bytes[GPT2RT_MEM_WORKSPACE] = ws_gemm + ws_att + ws_norm;
    /* generation: the cache of this device's layers and a pass's scratch */
    int kv_part = d->cuda ? GPT2RT__KV_DEVICE : GPT2RT__KV_ALL; /* CUDA: the device's part; the host's is bookkeeping */
    bytes[GPT2RT_MEM_KVCACHE] = (uint64_t)gpt2rt__kv_layout(d, nl, s->last, NULL, NULL, kv_part);

    if (!ctx) return;
    gpt2rt__kv_layout(d, nl, s->last, (unsigned char *)ctx->arena[GPT2RT_MEM_KVCACHE], &ctx->kv, kv_part);
    ctx->n_params = held;
    ctx->n_train = owned;
    ctx->l0 = s->l0;
    ctx->params = d->bf16_weights ? NULL : (float *)ctx->arena[GPT2RT_MEM_WEIGHTS];
    ctx->params16 = d->bf16_weights ? (uint16_t *)ctx->arena[GPT2RT_MEM_WEIGHTS] : NULL;
    ctx->grads = (float *)ctx->arena[GPT2RT_MEM_GRADS];
    ctx->m = (float *)ctx->arena[GPT2RT_MEM_MOMENTS];
    ctx->n_opt = gpt2rt__shard_lo(ctx->n_train, d->shards, 1);
    ctx->opt_lo = 0; ctx->opt_hi = ctx->n_train; /* a data-parallel rank narrows it to its shard (10.1) */
    ctx->v = ctx->m + ctx->n_opt;
    unsigned char *a = (unsigned char *)ctx->arena[GPT2RT_MEM_ACTIVATIONS];
    ctx->inputs = (int32_t *)(void *)(a + o_inputs);
    ctx->targets = (int32_t *)(void *)(a + o_targets);
    ctx->x0 = (float *)(void *)(a + o_x0);
    ctx->layer_acts = a + o_layers;
    ctx->layer_stride = stride;
    ctx->ckpt = (float *)(void *)(a + o_ckpt);
    ctx->xout = (float *)(void *)(a + o_xout);
    ctx->lnf = (float *)(void *)(a + o_lnf);
    ctx->lnf_mean = (float *)(void *)(a + o_lnf_mean);
    ctx->lnf_rstd = (float *)(void *)(a + o_lnf_rstd);
    ctx->losses = (float *)(void *)(a + o_losses);
    ctx->logit_lse = (float *)(void *)(a + o_lse);
    ctx->ts_patch = d->patches ? (float *)(void *)(a + o_patch) : NULL;
    ctx->ts_mean = d->patches ? (float *)(void *)(a + o_mean) : NULL;
    ctx->ts_std = d->patches ? (float *)(void *)(a + o_std) : NULL;
    ctx->ts_y = d->patches ? (float *)(void *)(a + o_y) : NULL;
    ctx->ts_pred = d->patches ? (float *)(void *)(a + o_pred) : NULL;
    ctx->ts_z = d->affine ? (float *)(void *)(a + o_z) : NULL;
    unsigned char *tr = (unsigned char *)ctx->arena[GPT2RT_MEM_TRANSIENT];
    int has_tr = !d->infer; /* inference: no transient arena, no backward scratch */
    ctx->dres = has_tr ? (float *)(void *)tr : NULL;
    ctx->dbuf = has_tr ? (float *)(void *)(tr + act) : NULL;
    ctx->dbig = has_tr ? (float *)(void *)(tr + 2 * act) : NULL;
    ctx->rcbuf = has_tr && d->recompute_buffer ? (float *)(void *)(tr + 2 * act + big) : NULL;
    ctx->ts_dpatch = has_tr && dpatch ? (float *)(void *)(tr + 2 * act + big + (d->recompute_buffer ? big : 0)) : NULL;
    ctx->logits = (float *)ctx->arena[GPT2RT_MEM_LOGITS];
    unsigned char *ws = (unsigned char *)ctx->arena[GPT2RT_MEM_WORKSPACE];
    ctx->gemm_ws = ws;
    ctx->att_scratch = (float *)(void *)(ws + ws_gemm);
    ctx->norm_parts = (double *)(void *)(ws + ws_gemm + ws_att);
}

#endif /* GPT2RT__SRC_PLAN_ACTIVATIONS_H */
