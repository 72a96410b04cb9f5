/* backend/driver.h - 7. The model driver: one for every backend (dropout's masks, the head's dispatch, the order of the steps)
   may call: common/threads.h, common/types.h, common/errors.h, plan/activations.h, backend/interface.h */
#ifndef GPT2RT__SRC_BACKEND_DRIVER_H
#define GPT2RT__SRC_BACKEND_DRIVER_H
#include "../common/threads.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../plan/activations.h"
#include "interface.h"

/* ---- dropout's masks ---- */
/* One site's mask in one forward (gpt2rt__drop_at, 7.3, fills it): element i is
   dropped when the top 32 bits of gpt2rt__hash_at(key, off + i) are below thresh =
   round(p * 2^32), and kept ones are multiplied by scale = 1/(1-p). key holds (seed,
   optimizer step, layer, site); off counts the elements of the step's earlier
   micro-batches, so k micro-batches draw the masks of one batch k times the size.
   on = 0: the identity (evaluation, or p = 0), and callers skip the op. */
typedef struct gpt2rt__drop {
    int on;
    uint32_t thresh;
    float scale;
    uint64_t key, off;
} gpt2rt__drop;

static GPT2RT__HOSTDEV float gpt2rt__drop_factor(const gpt2rt__drop *dr, int64_t i) { /* 0 or 1/(1-p) */
    return (uint32_t)(gpt2rt__hash_at(dr->key, dr->off + (uint64_t)i) >> 32) >= dr->thresh ? dr->scale : 0.0f;
}

/* the sites where the model drops, a part of each mask's key */
enum { GPT2RT__DROP_EMBED, GPT2RT__DROP_ATTN, GPT2RT__DROP_ATTN_RESID, GPT2RT__DROP_MLP_RESID, GPT2RT__DROP_HEAD };

/* The start of a forward: whether it drops, and the key of its optimizer step,
   from the seed (the RNG state, which the training state file keeps) and the step
   count, so a resumed run draws the masks the uninterrupted one would. A step
   that is skipped does not advance the count: the next one draws its masks again. */
static void gpt2rt__drop_begin(gpt2rt_ctx *ctx) {
    const gpt2rt_config *c = &ctx->cfg;
    ctx->drop_train = !ctx->eval && (c->dropout > 0.0f || c->attn_dropout > 0.0f || c->head_dropout > 0.0f);
    ctx->drop_key = gpt2rt__mix64(gpt2rt__mix64(ctx->rng ^ 0x44524F504F555431ull) + (uint64_t)ctx->step);
    ctx->drop_micro = ctx->acc_micro;
}

/* the mask of site `site` of layer l (-1: the embeddings and the head) in the last
   forward, over n elements per micro-batch, with probability p */
static gpt2rt__drop gpt2rt__drop_at(const gpt2rt_ctx *ctx, float p, int64_t l, int site, int64_t n) {
    gpt2rt__drop dr;
    memset(&dr, 0, sizeof dr);
    dr.on = ctx->drop_train && p > 0.0f;
    if (!dr.on) return dr;
    double t = floor((double)p * 4294967296.0 + 0.5);
    dr.thresh = t > 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
    dr.scale = (float)(1.0 / (1.0 - (double)p));
    dr.key = gpt2rt__mix64(ctx->drop_key ^ gpt2rt__mix64(((uint64_t)(l + 1) << 8) | (uint64_t)site));
    /* data parallel: rank r's rows follow ranks 0..r-1's in the micro-batch, so N ranks
       draw the masks one device of N times the rows does */
    dr.off = ((uint64_t)ctx->drop_micro * (uint64_t)ctx->comm->size + (uint64_t)ctx->comm->rank) * (uint64_t)n;
    return dr;
}

/* ---- the head: one dispatch for every backend ----
   What the config's head makes of lnf, the output of ln_f and the head dropout: one
   matrix product lnf (rows, k) -> (rows, n) into the logits arena, by out_layer's
   weights and bias or by the tied wte; the backends' head_forward and head_backward
   (7.4, 8) take the kind and the product's shape from here. */
typedef enum {
    GPT2RT__HEAD_SEQ,     /* aLLM4TS's sequence heads: out_layer at every position, (BT,C) -> (BT,PL);
                             PATCH_DECODE's placeholders' rows are gathered to yn (B,H) */
    GPT2RT__HEAD_SERIES,  /* REGRESSION: out_layer on each series' flattened (T,C) states, (B, T*C) -> (B,H) */
    GPT2RT__HEAD_LM,      /* the tied LM head, no bias: (BT,C) -> logits (BT,Vp) */
    GPT2RT__HEAD_CHUNKED  /* the LM head by classifier_chunk: the logits come chunk by chunk with the loss */
} gpt2rt__head_kind;

typedef struct gpt2rt__head {
    gpt2rt__head_kind kind;
    int64_t rows, k, n; /* the product's shape: lnf (rows, k), its output (rows, n) */
} gpt2rt__head;

static gpt2rt__head gpt2rt__head_of(const gpt2rt__dims *d) {
    gpt2rt__head h;
    if (d->seqhead) { h.kind = GPT2RT__HEAD_SEQ; h.rows = d->BT; h.k = d->C; h.n = d->patch_len; }
    else if (d->patches) { h.kind = GPT2RT__HEAD_SERIES; h.rows = d->B; h.k = d->T * d->C; h.n = d->H; }
    else { h.kind = d->classifier_chunk < d->BT ? GPT2RT__HEAD_CHUNKED : GPT2RT__HEAD_LM; h.rows = d->BT; h.k = d->C; h.n = d->Vp; }
    return h;
}

/* ---- the driver: one for every backend ---- */
/* It owns the order of the steps and what recompute decides: which layer input is a
   checkpoint, when a FULL segment runs its forward again. ax: the context whose
   arenas the backend's steps use (the CPU: ctx itself). */

/* return a failing gpt2rt_result (its message already set) to the caller: the one such
   macro of every section from here on */
#define GPT2RT__TRY(call) do { gpt2rt_result r_ = (call); if (r_ != GPT2RT_OK) return r_; } while (0)

/* the input (BT,C) of layer l: the embeddings, a FULL checkpoint, or the layer before's output */
static float *gpt2rt__model_layer_input(const gpt2rt_ctx *ax, int64_t l) {
    const gpt2rt__dims *d = &ax->d;
    if (l == ax->l0) return ax->x0; /* a layer-split stage's input lies in x0 too */
    if (d->recompute == GPT2RT_RECOMPUTE_FULL && l % d->checkpoint_every == 0) /* checkpoints: one activation apart, as laid out */
        return (float *)(void *)((unsigned char *)ax->ckpt + ((l - ax->l0) / d->checkpoint_every - 1) *
                                 gpt2rt__ald(d, d->BT * d->C * d->act_bytes));
    return gpt2rt__lacts(ax, l - 1).res3;
}

/* layers [l0, l1) forward, each from its input (the driver's, and a layer-split
   stage's range, 10.2); FULL: the slots are reused, so keep the input of each
   checkpoint the range reaches */
static gpt2rt_result gpt2rt__model_layers_forward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                                  int64_t l0, int64_t l1) {
    const gpt2rt__dims *d = &ax->d;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C * d->act_bytes);
    for (int64_t l = l0; l < l1; l++) {
        GPT2RT__TRY(be->layer_forward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
        if (full && l + 1 < d->L && (l + 1) % d->checkpoint_every == 0)
            GPT2RT__TRY(be->copy(ctx, gpt2rt__model_layer_input(ax, l + 1), gpt2rt__lacts(ax, l).res3, act));
    }
    return GPT2RT_OK;
}

/* layers l1-1 down to l0: dres holds d(layer l1-1's output) and becomes d(layer l0's
   input); each layer's gradients go to the data-parallel hook once final. FULL:
   entering a segment from its top, run its forward again from its checkpoint (the
   last segment's activations are still in the slots from the forward; a range
   starts at a checkpoint) */
static gpt2rt_result gpt2rt__model_layers_backward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                                   int64_t l0, int64_t l1) {
    const gpt2rt__dims *d = &ax->d;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    for (int64_t l = l1 - 1; l >= l0; l--) {
        if (full && (l + 1) % d->checkpoint_every == 0 && l + 1 < d->L)
            for (int64_t j = l - l % d->checkpoint_every; j <= l; j++)
                GPT2RT__TRY(be->layer_forward(ctx, j, gpt2rt__model_layer_input(ax, j), gpt2rt__lacts(ax, j)));
        GPT2RT__TRY(be->layer_backward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
        GPT2RT__TRY(gpt2rt__dp_bucket_ready(ctx, l));
    }
    return GPT2RT_OK;
}

/* embeddings, the layers, ln_f, the tied LM head: logits (BT,Vp) */
static gpt2rt_result gpt2rt__model_forward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C * d->act_bytes);
    gpt2rt__drop_begin(ctx);
    GPT2RT__TRY(be->embed_forward(ctx));
    GPT2RT__TRY(gpt2rt__model_layers_forward(ctx, be, ax, 0, L));
    /* FULL: the slots are reused, so keep the last output */
    const float *res = L ? gpt2rt__lacts(ax, L - 1).res3 : ax->x0;
    if (full && L) {
        GPT2RT__TRY(be->copy(ctx, ax->xout, res, act));
        res = ax->xout;
    }
    return be->head_forward(ctx, res);
}

/* gradients of (sum of the counted targets' losses) * dloss, accumulated into the grads */
static gpt2rt_result gpt2rt__model_backward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                            float dloss) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    const float *res_last = !L ? ax->x0 : full ? ax->xout : gpt2rt__lacts(ax, L - 1).res3;
    GPT2RT__TRY(be->head_backward(ctx, res_last, dloss));
    GPT2RT__TRY(gpt2rt__model_layers_backward(ctx, be, ax, 0, L));
    GPT2RT__TRY(be->embed_backward(ctx));
    return gpt2rt__dp_bucket_ready(ctx, -1);
}


#endif /* GPT2RT__SRC_BACKEND_DRIVER_H */
