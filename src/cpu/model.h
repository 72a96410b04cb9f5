/* cpu/model.h - 7.3 Model
   may call: what its includes name (common/, plan/, inputs/, backend/, cpu/) */
#ifndef GPT2RT__SRC_CPU_MODEL_H
#define GPT2RT__SRC_CPU_MODEL_H
#include "../common/threads.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../plan/params.h"
#include "../plan/activations.h"
#include "../inputs/patches.h"
#include "../backend/driver.h"
#include "ops.h"
#include "matmul.h"

/* ==== 7.3 Model ==== */

/* ---- the chunked classifier (config.classifier_chunk): never (BT, Vp) logits ----
   Chunks of classifier_chunk tokens in order: their logits (classifier_chunk, Vp) in the logits arena, each
   token's lse and loss as the whole-batch path computes them, and, in the backward or
   in a forward whose backward follows at once (gpt2rt_step: fused, no second product),
   dlogits in place, the chunk's rows of d(lnf) into dbuf and wte's gradient +=. Every
   step is row by row but wte's gradient, a sum over the tokens: bitwise the
   whole-batch path's when classifier_chunk is a multiple of the matrix product's KC slice
   (GPT2RT_SGEMM_KC, 256 by default), else within fp32 reassociation. */
static void gpt2rt__cpu_head_chunk(gpt2rt_ctx *ctx, int64_t i, int64_t n, int loss, int grad, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t C = d->C;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf + i * C, p.wte, NULL, n,
                 C, d->Vp, ctx->gemm_ws, d->n_threads));
    if (loss) {
        int64_t cnt;
        double sum;
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, (void)gpt2rt__cpu_crossentropy_forward(ctx->losses + i, ctx->logit_lse + i,
                     ctx->logits, ctx->targets + i, n, d->V, d->Vp, &cnt, &sum, d->n_threads));
    }
    if (!grad) return;
    gpt2rt__model_params g = gpt2rt__mparams(ctx, ctx->grads, 1);
    GPT2RT__PROF(ctx, GPT2RT__PROF_CE, gpt2rt__cpu_crossentropy_backward(ctx->logits, ctx->logit_lse + i,
                 ctx->targets + i, dloss, n, d->V, d->Vp, d->n_threads));
    GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf + i * C, g.wte, NULL, ctx->logits,
                 ctx->lnf + i * C, p.wte, n, C, d->Vp, ctx->gemm_ws, d->n_threads));
}

/* the loss of the last forward (targets copied): chunk by chunk, then summed over the
   tokens in order as gpt2rt__cpu_crossentropy_forward does; fused: the head's backward too */
static float gpt2rt__cpu_head_chunked_loss(gpt2rt_ctx *ctx, int fused) {
    const gpt2rt__dims *d = &ctx->d;
    float dloss = 1.0f / (float)(d->n_out * ctx->cfg.grad_accum); /* gpt2rt__cpu_backward's */
    for (int64_t i = 0; i < d->BT; i += d->classifier_chunk)
        gpt2rt__cpu_head_chunk(ctx, i, d->BT - i < d->classifier_chunk ? d->BT - i : d->classifier_chunk, 1, fused, dloss);
    ctx->head_fused = fused;
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < d->BT; i++)
        if (ctx->targets[i] >= 0) { total += ctx->losses[i]; n++; }
    ctx->n_targets = n;
    ctx->loss_sum = total;
    return n ? (float)(total / (double)n) : 0.0f;
}

/* the head's backward unless the forward ran it: the logits again, chunk by chunk */
static void gpt2rt__cpu_head_chunked_backward(gpt2rt_ctx *ctx, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    if (ctx->head_fused) { ctx->head_fused = 0; return; }
    for (int64_t i = 0; i < d->BT; i += d->classifier_chunk)
        gpt2rt__cpu_head_chunk(ctx, i, d->BT - i < d->classifier_chunk ? d->BT - i : d->classifier_chunk, 0, 1, dloss);
}

/* ---- the CPU backend's steps ---- */

static gpt2rt_result gpt2rt__cpu_embed_forward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    if (!d->patches) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_forward(ctx->x0, ctx->inputs, p.wte, p.wpe, d->B,
                     d->T, d->C, d->n_threads));
    } else { /* patches: x0 (BT,C) = in_layer(patch) + wpe[t] */
        gpt2rt__cpu_matmul_forward(ctx->x0, ctx->ts_patch, p.inw, p.inb, d->BT, d->patch_len, d->C, ctx->gemm_ws, d->n_threads);
        GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(d->n_threads, GPT2RT__CPU_W_ADD * (double)(d->BT * d->C)))
        for (int64_t bt = 0; bt < d->BT; bt++) {
            float *o = ctx->x0 + bt * d->C;
            const float *pe = p.wpe + (bt % d->T) * d->C;
            for (int64_t c = 0; c < d->C; c++) o[c] += pe[c];
        }
    }
    /* x0 keeps the dropped embeddings: layer 0's input, and FULL's checkpoint 0 */
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->x0, ctx->x0, &dr, d->BT * d->C, d->n_threads));
    return GPT2RT_OK;
}

/* One layer's forward from res (BT,C) into a; outputs not kept (NULL in a) go to
   dbig, the backward's scratch (free during the forward), and are used at once. The backward's
   recompute calls this same function on the same input: bitwise the same values. */
static gpt2rt_result gpt2rt__cpu_layer_forward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->n_threads;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l);
    float *ln1 = a.ln1 ? a.ln1 : ctx->dbig, *ln2 = a.ln2 ? a.ln2 : ctx->dbig; /* not kept: scratch */
    float *gelu = a.fch_gelu ? a.fch_gelu : ctx->dbig;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b,
                 BT, C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.qkv, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, ws,
                 nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_ATT_FWD, gpt2rt__cpu_attention_forward_masked(a.atty, a.lse, a.qkv, ctx->att_scratch,
                 d->B, d->T, C, d->NH, d->TH, &da, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.res2, a.atty, p.projw, p.projb, BT, C, C, ws,
                 nt));
    if (dr2.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(a.res2, a.res2, &dr2, BT * C,
                             nt)); /* the branch, before the add */
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_residual_add(a.res2, res, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w,
                 p.ln2b, BT, C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.fch, ln2, p.fcw, p.fcb, BT, C, 4 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_forward(gelu, a.fch, BT * 4 * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.res3, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C,
                 ws, nt));
    if (dr3.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(a.res3, a.res3, &dr3, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_residual_add(a.res3, a.res2, BT * C, nt));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_forward(gpt2rt_ctx *ctx, const float *res) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->lnf, ctx->lnf_mean, ctx->lnf_rstd, res,
                 p.lnfw, p.lnfb, d->BT, d->C, d->n_threads));
    /* lnf keeps the dropped values: the head's input; ln_f's backward reads res, not lnf */
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->lnf, ctx->lnf, &dr, d->BT * d->C, d->n_threads));
    gpt2rt__head h = gpt2rt__head_of(d);
    if (h.kind == GPT2RT__HEAD_CHUNKED) return GPT2RT_OK;
    int tied = h.kind == GPT2RT__HEAD_LM;
    GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf, tied ? p.wte : p.outw,
                 tied ? NULL : p.outb, h.rows, h.k, h.n, ctx->gemm_ws, d->n_threads));
    if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE) gpt2rt__ts_decode_gather(gpt2rt__ts_yn(ctx), ctx->logits, d);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_backward(gpt2rt_ctx *ctx, const float *res, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->n_threads;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0), g = gpt2rt__mparams(ctx, ctx->grads, 1);
    gpt2rt__head h = gpt2rt__head_of(d);
    /* the gradient of the loss at the product's output (rows, n), in place */
    if (h.kind == GPT2RT__HEAD_SEQ && d->seqhead == GPT2RT_HEAD_NEXT_PATCH)
        gpt2rt__ts_next_backward(ctx->logits, ctx->ts_patch, dloss, d);
    else if (h.kind == GPT2RT__HEAD_SEQ) {
        float *yn = gpt2rt__ts_yn(ctx);
        gpt2rt__ts_mse_backward(yn, ctx->ts_pred, ctx->ts_y, ctx->ts_std, p.revw, p.revb, g.revw, g.revb, dloss, d);
        gpt2rt__ts_decode_scatter(ctx->logits, yn, d);
    } else if (h.kind == GPT2RT__HEAD_SERIES) /* MSE through the de-normalisation */
        gpt2rt__ts_mse_backward(ctx->logits, ctx->ts_pred, ctx->ts_y, ctx->ts_std, p.revw, p.revb, g.revw, g.revb,
                                dloss, d);
    else if (h.kind == GPT2RT__HEAD_LM)
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, gpt2rt__cpu_crossentropy_backward(ctx->logits, ctx->logit_lse, ctx->targets,
                     dloss, BT, d->V, d->Vp, nt));
    /* the product's backward: dlnf -> dbuf (the chunks do it chunk by chunk) */
    if (h.kind == GPT2RT__HEAD_CHUNKED) gpt2rt__cpu_head_chunked_backward(ctx, dloss);
    else {
        int tied = h.kind == GPT2RT__HEAD_LM;
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, tied ? g.wte : g.outw,
                     tied ? NULL : g.outb, ctx->logits, ctx->lnf, tied ? p.wte : p.outw, h.rows, h.k, h.n,
                     ctx->gemm_ws, nt));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, BT * C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbuf, ctx->dbuf, &dr, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, memset(ctx->dres, 0, (size_t)(BT * C) * sizeof(float)));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.lnfw, g.lnfb, ctx->dbuf, res, p.lnfw,
                 ctx->lnf_mean, ctx->lnf_rstd, BT, C, nt));
    return GPT2RT_OK;
}

/* Layer l's backward: dres holds d(res3) and becomes d(res), res (BT,C) the layer's
   input. Outputs the forward did not keep are recomputed into rcbuf, only for the
   weight gradients that need them (NULL g: frozen, skipped). Dropout: the masked
   gradient of a residual branch goes through the scratch buffer free at that point
   (dbuf for the MLP's, dbig for the attention's), dres stays the stream's. */
static gpt2rt_result gpt2rt__cpu_layer_backward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->n_threads;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l), g = gpt2rt__lparams(ctx, ctx->grads, 1, l);
    /* MLP; dres holds d(res3) */
    const float *gelu = a.fch_gelu, *ln2 = a.ln2, *dbranch = ctx->dres;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    if (!gelu && g.fcprojw) { GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_forward(ctx->rcbuf, a.fch,
                                           BT * 4 * C, nt)); gelu = ctx->rcbuf; }
    if (dr3.on) { GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbuf, ctx->dres, &dr3, BT * C,
                               nt)); dbranch = ctx->dbuf; }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbig, g.fcprojw, g.fcprojb, dbranch, gelu,
                 p.fcprojw, BT, 4 * C, C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_backward(ctx->dbig, a.fch, ctx->dbig, BT * 4 * C, nt));
    if (!ln2 && g.fcw) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln2_mean, a.ln2_rstd, a.res2,
                     p.ln2w, p.ln2b, BT, C, nt));
        ln2 = ctx->rcbuf;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.fcw, g.fcb, ctx->dbig, ln2, p.fcw,
                 BT, C, 4 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln2w, g.ln2b, ctx->dbuf, a.res2,
                 p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C, nt));
    /* attention; dres holds d(res2) */
    dbranch = ctx->dres;
    if (dr2.on) { GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbig, ctx->dres, &dr2, BT * C,
                               nt)); dbranch = ctx->dbig; }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.projw, g.projb, dbranch, a.atty,
                 p.projw, BT, C, C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_ATT_BWD, gpt2rt__cpu_attention_backward_masked(ctx->dbig, ctx->dbuf, a.qkv, a.lse,
                 ctx->att_scratch, d->B, d->T, C, d->NH, d->TH, &da, nt));
    const float *ln1 = a.ln1;
    if (!ln1 && g.qkvw) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln1_mean, a.ln1_rstd, res,
                     p.ln1w, p.ln1b, BT, C, nt));
        ln1 = ctx->rcbuf;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.qkvw, g.qkvb, ctx->dbig, ln1,
                 p.qkvw, BT, C, 3 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln1w, g.ln1b, ctx->dbuf, res, p.ln1w,
                 a.ln1_mean, a.ln1_rstd, BT, C, nt));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_embed_backward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params g = gpt2rt__mparams(ctx, ctx->grads, 1);
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dres, ctx->dres, &dr, d->BT * d->C,
                            d->n_threads)); /* d(x0 before dropout): dres ends here */
    if (!d->patches) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_backward(g.wte, g.wpe, ctx->dres, ctx->inputs, d->B,
                     d->T, d->C, d->n_threads));
        return GPT2RT_OK;
    }
    /* patches: wpe as for tokens (no wte); in_layer's weight gradients; the patches'
       gradient only for RevIN's affine */
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_backward(NULL, g.wpe, ctx->dres, NULL, d->B, d->T, d->C,
                 d->n_threads));
    if (g.inw) {
        gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
        gpt2rt__cpu_matmul_backward(g.revw ? ctx->ts_dpatch : NULL, g.inw, g.inb, ctx->dres, ctx->ts_patch, p.inw,
                                    d->BT, d->patch_len, d->C, ctx->gemm_ws, d->n_threads);
        if (g.revw) gpt2rt__ts_affine_backward(g.revw, g.revb, ctx->ts_dpatch, ctx->ts_z, d);
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_copy(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
    return GPT2RT_OK;
}


/* ---- the CPU backend's decode step (generation, 11.7) ----
   A pass feeds N new tokens of any rows at any positions (ctx->kv: tok, row, pos)
   through the model, keeping their keys and values in the cache, and gives the
   logits of the tokens listed in sel. Every op computes a token's values from the
   same inputs as the training forward does, most in the same order (row-wise
   LayerNorm, GELU and residual adds; matrix products whose sums depend on K only;
   the attention below), so a prefill's logits are bitwise those of a forward over
   the whole prefix; a decode step's few rows take a matrix-vector product, equal
   within rounding. */

/* out (N,C) from qkv (N,3C) of N new tokens, token i of cache row row[i] at position
   pos[i]. First every token's k and v go into kc, vc (KB,KS,C) at (row, pos); then
   token i attends to its row's positions [0, pos[i]] with the sums of
   gpt2rt__cpu_attention_forward, in its order (7.1: the score, the row's softmax, the
   chain of p v, each the same function). Tokens of one row in one pass must
   have distinct positions, and every position before theirs must be cached. */
static void gpt2rt__cpu_attention_cached(float *out, const float *qkv, float *kc, float *vc, const int32_t *row,
                                         const int32_t *pos, float *scratch, int64_t N, int64_t KS, int64_t C,
                                         int64_t NH, int nt) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    int ntc = gpt2rt__threads_for(nt, GPT2RT__CPU_W_ADD * 2.0 * (double)(N * C));
    double keys = 0;
    for (int64_t i = 0; i < N; i++) keys += (double)pos[i] + 1.0;
    nt = gpt2rt__threads_for(nt, 2.0 * GPT2RT__CPU_W_MATH * keys * (double)C);
    GPT2RT__PARALLEL_FOR(ntc)
    for (int64_t i = 0; i < N; i++) {
        int64_t at = ((int64_t)row[i] * KS + pos[i]) * C;
        memcpy(kc + at, qkv + i * C3 + C, (size_t)C * sizeof(float));
        memcpy(vc + at, qkv + i * C3 + 2 * C, (size_t)C * sizeof(float));
    }
    GPT2RT__PARALLEL_FOR_RR(nt)
    for (int64_t r = 0; r < N * NH; r++) {
        int64_t i = r / NH, h = r % NH, t = pos[i];
        const float *kr = kc + (int64_t)row[i] * KS * C + h * HS, *vr = vc + (int64_t)row[i] * KS * C + h * HS;
        float *sc = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(KS);
        const float *q = qkv + i * C3 + h * HS;
        for (int64_t s = 0; s <= t; s++) sc[s] = gpt2rt__cpu_att_dot(q, kr + s * C, HS, scale);
        gpt2rt__cpu_att_softmax(sc, t + 1);
        float *y = out + i * C + h * HS;
        memset(y, 0, (size_t)HS * sizeof(float));
        gpt2rt__cpu_att_mm(y, 0, 1, sc, 0, 1, vr, C, HS, t + 1);
    }
}

/* out (N,OC) = inp (N,IC) W^T + b, W (OC,IC), b (OC) or NULL, for the few rows of a
   decode step: each weight row is read once for all N (the matrix product would pack
   every weight for one row). Threads own output columns, each value one dot product
   in a fixed order: the same on any thread count, equal to the matrix product's
   within rounding (about 1e-7 relative). */
#define GPT2RT__KV_MATVEC_ROWS 8 /* below this many rows a pass uses the matrix-vector product */
static void gpt2rt__cpu_matvec_forward(float *out, const float *inp, const float *w, const float *b, int64_t N,
                                       int64_t IC, int64_t OC, int nt) {
    int64_t nblk = (OC + 63) / 64;
    nt = gpt2rt__threads_for(nt, 2.0 * (double)(N * IC) * (double)OC);
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o1 = blk * 64 + 64 < OC ? blk * 64 + 64 : OC;
        for (int64_t o = blk * 64; o < o1; o++)
            for (int64_t i = 0; i < N; i++)
                out[i * OC + o] = gpt2rt__cpu_dot(inp + i * IC, w + o * IC, IC) + (b ? b[o] : 0.0f);
    }
}

/* a pass's matrix products: few rows (the decode steps) by rows of W, many (a prefill) by 7.2;
   bf16 weights (inference_weights): every pass by gpt2rt__cpu_matvec_bf16 on tensor tw */
static void gpt2rt__cpu_decode_matmul(gpt2rt_ctx *ctx, float *out, const float *inp, const float *w,
                                      const gpt2rt__tensor *tw, const float *b, int64_t N, int64_t IC, int64_t OC) {
    if (ctx->params16) gpt2rt__cpu_matvec_bf16(out, inp, ctx->params16 + tw->off, b, N, IC, OC, ctx->d.n_threads);
    else if (N < GPT2RT__KV_MATVEC_ROWS) gpt2rt__cpu_matvec_forward(out, inp, w, b, N, IC, OC, ctx->d.n_threads);
    else gpt2rt__cpu_matmul_forward(out, inp, w, b, N, IC, OC, ctx->gemm_ws, ctx->d.n_threads);
}

/* the first n tensors of t that are vectors (LayerNorm, biases), widened from bf16 into
   kv->wvec in order; q[i] gets tensor i's floats, NULL for a matrix */
static void gpt2rt__cpu_decode_vectors(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, int n, float **q) {
    float *o = ctx->kv.wvec;
    for (int i = 0; i < n; i++) {
        q[i] = NULL;
        if (t[i].ndim != 1) continue;
        q[i] = o;
        for (int64_t j = 0; j < t[i].rows; j++) o[j] = gpt2rt__bf16_widen(ctx->params16[t[i].off + j]);
        o += t[i].rows;
    }
}

/* layer l's parameters as floats: fp32 weights in place; bf16 weights: the vectors widened
   (13C floats), the matrices NULL (gpt2rt__cpu_decode_matmul reads them as bf16) */
static gpt2rt__layer_params gpt2rt__cpu_decode_lparams(gpt2rt_ctx *ctx, int64_t l) {
    if (!ctx->params16) return gpt2rt__lparams(ctx, ctx->params, 0, l);
    float *q[GPT2RT__PER_LAYER];
    gpt2rt__cpu_decode_vectors(ctx, gpt2rt__layer_tensors(ctx, l), GPT2RT__PER_LAYER, q);
    gpt2rt__layer_params p;
    p.ln1w = q[GPT2RT__LN1W]; p.ln1b = q[GPT2RT__LN1B];
    p.qkvw = NULL; p.qkvb = q[GPT2RT__QKVB];
    p.projw = NULL; p.projb = q[GPT2RT__PROJB];
    p.ln2w = q[GPT2RT__LN2W]; p.ln2b = q[GPT2RT__LN2B];
    p.fcw = NULL; p.fcb = q[GPT2RT__FCB];
    p.fcprojw = NULL; p.fcprojb = q[GPT2RT__FCPROJB];
    return p;
}

/* layer l on the pass's N tokens: kv->x (N,C) += attention, then += MLP */
static void gpt2rt__cpu_layer_decode(gpt2rt_ctx *ctx, int64_t l, int64_t N) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__kv *kv = &ctx->kv;
    int64_t C = d->C, cache = l * d->kv_batch * d->kv_len * C;
    int nt = d->n_threads;
    gpt2rt__layer_params p = gpt2rt__cpu_decode_lparams(ctx, l);
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->x, p.ln1w, p.ln1b, N, C, nt);
    gpt2rt__cpu_decode_matmul(ctx, kv->qkv, kv->ln, p.qkvw, &t[GPT2RT__QKVW], p.qkvb, N, C, 3 * C);
    gpt2rt__cpu_attention_cached(kv->atty, kv->qkv, kv->k + cache, kv->v + cache, kv->row, kv->pos, kv->att, N,
                                 d->kv_len, C, d->NH, nt);
    gpt2rt__cpu_decode_matmul(ctx, kv->proj, kv->atty, p.projw, &t[GPT2RT__PROJW], p.projb, N, C, C);
    gpt2rt__cpu_residual_add(kv->x, kv->proj, N * C, nt);
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->x, p.ln2w, p.ln2b, N, C, nt);
    gpt2rt__cpu_decode_matmul(ctx, kv->fch, kv->ln, p.fcw, &t[GPT2RT__FCW], p.fcb, N, C, 4 * C);
    gpt2rt__cpu_gelu_forward(kv->fch, kv->fch, N * 4 * C, nt);
    gpt2rt__cpu_decode_matmul(ctx, kv->proj, kv->fch, p.fcprojw, &t[GPT2RT__FCPROJW], p.fcprojb, N, 4 * C, C);
    gpt2rt__cpu_residual_add(kv->x, kv->proj, N * C, nt);
}

/* one pass: embeddings of the N tokens, every layer, then ln_f and the tied head on
   the M tokens kv->sel lists: kv->logits (M,Vp). bf16 weights: the embeddings' rows
   and ln_f widened, every product on bf16 (the head reads wte, the largest tensor, in
   bf16 too) */
static void gpt2rt__cpu_decode_pass(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__kv *kv = &ctx->kv;
    int64_t C = d->C;
    const uint16_t *w16 = ctx->params16;
    const gpt2rt__tensor *twte = gpt2rt__model_tensor(ctx, GPT2RT__WTE), *twpe = gpt2rt__model_tensor(ctx, GPT2RT__WPE);
    gpt2rt__model_params p;
    if (w16) memset(&p, 0, sizeof p);
    else p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(d->n_threads, GPT2RT__CPU_W_ADD * (double)(N * C)))
    for (int64_t i = 0; i < N; i++) { /* wte[tok] + wpe[pos], as gpt2rt__cpu_encoder_forward */
        int64_t te = (int64_t)kv->tok[i] * C, pe = (int64_t)kv->pos[i] * C;
        float *o = kv->x + i * C;
        if (w16)
            for (int64_t c = 0; c < C; c++)
                o[c] = gpt2rt__bf16_widen(w16[twte->off + te + c]) + gpt2rt__bf16_widen(w16[twpe->off + pe + c]);
        else
            for (int64_t c = 0; c < C; c++) o[c] = p.wte[te + c] + p.wpe[pe + c];
    }
    for (int64_t l = 0; l < d->L; l++) gpt2rt__cpu_layer_decode(ctx, l, N);
    for (int64_t m = 0; m < M; m++) memcpy(kv->proj + m * C, kv->x + (int64_t)kv->sel[m] * C, (size_t)C * sizeof(float));
    if (w16) { /* ln_f's weight and bias follow each other in the table */
        float *q[2];
        gpt2rt__cpu_decode_vectors(ctx, gpt2rt__model_tensor(ctx, GPT2RT__LNFW), 2, q);
        p.lnfw = q[0]; p.lnfb = q[1];
    }
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->proj, p.lnfw, p.lnfb, M, C, d->n_threads);
    gpt2rt__cpu_decode_matmul(ctx, kv->logits, kv->ln, p.wte, twte, NULL, M, C, d->Vp);
}

/* the table's entry: the CPU's pass cannot fail */
static gpt2rt_result gpt2rt__cpu_decode(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    gpt2rt__cpu_decode_pass(ctx, N, M);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_CPU_MODEL_H */
