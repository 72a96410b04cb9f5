/* cuda/steps.cuh - 8.5 Driver: the model steps on the device, training calls, decode, the public calls
   may call: cuda/driver.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_STEPS_CUH
#define GPT2RT__SRC_CUDA_STEPS_CUH
#include "driver.cuh"

/* ---- the steps of gpt2rt__model_forward / _backward (7.3) on the device: the driver
   owns the layer loop and the recompute schedule for every backend and hands these
   the device pointers of ax = st->dev, typed float * there, floatX here ---- */

/* x0 (BT,C) = wte[inputs] + wpe; patches: in_layer(patches) + wpe (the patches are
   floatX on the device, in the fp32 slot the plan gives them); then the embeddings'
   dropout, in place: x0 keeps the dropped values (layer 0's input, FULL's checkpoint 0) */
template <typename X>
static gpt2rt_result gpt2rt__cu_embed_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    X *x0 = (X *)dv->x0;
    const X *wpe = gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE));
    st->layer = -1;
    if (!d->patches) {
        GPT2RT__CU_CK(gpt2rt__cu_encoder_forward<X>(x0, dv->inputs, gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx,
                                                    GPT2RT__WTE)), wpe, d->B, d->T, d->C, st->stream));
    } else {
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, gpt2rt__cu_dtype<X>::value, x0, NULL, dv->ts_patch,
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__INW)),
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__INB)), d->BT,
                                                d->patch_len, d->C, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_CK(gpt2rt__cu_add_pos<X>(x0, wpe, d->BT, d->T, d->C, st->stream));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(x0, x0, &dr, d->BT * d->C, st->stream));
    return GPT2RT_OK;
}

/* ln_f of res (BT,C) (its dropout in place: lnf keeps the dropped values, the head's
   input; ln_f's backward reads res), then the tied LM head: logits (BT,Vp); patches:
   out_layer on each series' flattened (T,C) states, (B, T*C) -> the normalised
   predictions (B,H) in the logits arena; aLLM4TS's sequence heads: out_layer at every
   position, (BT,C) -> (BT,PL), and PATCH_DECODE's placeholders' rows gathered to yn (B,H) */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const X *res) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    X *lnf = (X *)dv->lnf;
    st->layer = -1;
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(lnf, dv->lnf_mean, dv->lnf_rstd, res,
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFW)),
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFB)),
                                                  d->BT, d->C, st->stream));
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(lnf, lnf, &dr, d->BT * d->C, st->stream));
    gpt2rt__head h = gpt2rt__head_of(d);
    if (h.kind == GPT2RT__HEAD_CHUNKED) return GPT2RT_OK;
    int tied = h.kind == GPT2RT__HEAD_LM;
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, dv->logits, NULL, lnf,
                                            tied ? gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE))
                                                 : gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTW)),
                                            tied ? NULL : gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTB)),
                                            h.rows, h.k, h.n, st->mm_err, sizeof st->mm_err));
    if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE)
        GPT2RT__CU_CK(gpt2rt__cu_ts_decode<X>((X *)(void *)gpt2rt__ts_yn(dv), (X *)dv->logits, 0, d, st->stream));
    return GPT2RT_OK;
}

/* The chunked classifier (config.classifier_chunk; 7.3's gpt2rt__cpu_head_chunk): tokens
   [i, i+n) of lnf (BT,C): their logits (n,Vp) in the logits arena (classifier_chunk rows), their
   losses and lse (the whole-batch classifier's kernel, row by row), and with grad the
   logits become dlogits in place, dbuf's rows [i, i+n) = dlogits wte and wte's gradient
   += dlogits^T lnf (overwritten by the first chunk when st->acc = 0). Every row is
   computed alone but wte's gradient, a sum over the tokens that the chunks add in
   pieces: within fp32 reassociation of the whole-batch product's. */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_chunk_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t i, int64_t n, int grad,
                                             float dloss) {
    const gpt2rt__dims *d = &st->d;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    gpt2rt_ctx *dv = st->dev;
    const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE);
    X *logits = (X *)dv->logits;
    const X *lnf = (const X *)dv->lnf + i * d->C;
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, logits, NULL, lnf, gpt2rt__cu_weight<X>(st, wte), NULL, n,
                                            d->C, d->Vp, st->mm_err, sizeof st->mm_err));
    GPT2RT__CU_CK(gpt2rt__cu_classifier<X>(logits, dv->losses + i, dv->logit_lse + i, dv->targets + i, dloss, grad, n,
                                           d->V, d->Vp, st->stream));
    if (!grad) return GPT2RT_OK;
    float *g_wte = gpt2rt__cu_grad_of(st, wte);
    if (g_wte)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_wte, NULL, NULL, logits, lnf, n, d->C, d->Vp,
                                                        st->acc || i > 0, st->mm_err, sizeof st->mm_err));
    /* d(lnf) rows [i, i+n) = dlogits (n,Vp) wte (Vp,C): a small output over the whole
       vocabulary as inner dimension, which without split-K fills a few dozen tiles of the
       GPU (12 x 4 of 64 x 256 for n = 1024, C = 768: 1.05 ms on an H100, 75 TFLOP/s).
       Split-K is allowed for this product alone; a fixed algorithm and workspace on one
       stream keep it the same bits every run (cuBLAS's reproducibility contract, and
       kernels/classifier.cu checks two runs) */
    const uint32_t mask = st->blas.reduction_mask;
    st->blas.reduction_mask = (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK;
    int mm = gpt2rt__cu_matmul_backward_input(&st->blas, t, (X *)dv->dbuf + i * d->C, logits,
                                              gpt2rt__cu_weight<X>(st, wte), NULL, n, d->C, d->Vp, st->mm_err,
                                              sizeof st->mm_err);
    st->blas.reduction_mask = mask;
    GPT2RT__CU_MM(mm);
    return GPT2RT_OK;
}

/* every chunk in order (grad: the head's backward too) */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_chunks_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int grad, float dloss) {
    const gpt2rt__dims *d = &st->d;
    for (int64_t i = 0; i < d->BT; i += d->classifier_chunk)
        GPT2RT__TRY(gpt2rt__cu_head_chunk_t<X>(ctx, st, i, d->BT - i < d->classifier_chunk ? d->BT - i : d->classifier_chunk, grad, dloss));
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

/* logits -> dlogits * dloss (unless the forward fused it), the tied head's and ln_f's
   gradients; patches: the MSE's gradient through the de-normalisation (and RevIN's
   affine), out_layer's; then the head dropout's mask on d(lnf); dres = d(res), res
   (BT,C) the input of ln_f. Weight gradients overwrite when st->acc = 0 (known zero)
   and accumulate otherwise. */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const X *res, float dloss) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    const gpt2rt__tensor *lnfw = gpt2rt__model_tensor(ctx, GPT2RT__LNFW), *lnfb = gpt2rt__model_tensor(ctx, GPT2RT__LNFB);
    X *logits = (X *)dv->logits, *dres = (X *)dv->dres, *dbuf = (X *)dv->dbuf;
    st->layer = -1;
    gpt2rt__head h = gpt2rt__head_of(d);
    if (h.kind == GPT2RT__HEAD_SEQ || h.kind == GPT2RT__HEAD_SERIES) { /* dyn (B,H) in place, then out_layer:
                         dlnf (B, T*C) -> dbuf; sequence heads: dout (BT,PL) from the next patches or the
                         placeholders' dyn, then out_layer at every position: dlnf (BT,C) -> dbuf */
        const gpt2rt__tensor *ow = gpt2rt__ts_tensor(ctx, GPT2RT__OUTW), *ob = gpt2rt__ts_tensor(ctx, GPT2RT__OUTB);
        const gpt2rt__tensor *rw = gpt2rt__ts_tensor(ctx, GPT2RT__REVW), *rb = gpt2rt__ts_tensor(ctx, GPT2RT__REVB);
        X *yn = h.kind == GPT2RT__HEAD_SEQ ? (X *)(void *)gpt2rt__ts_yn(dv) : logits;
        if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH)
            GPT2RT__CU_CK(gpt2rt__cu_ts_next<X>(NULL, logits, (const X *)(const void *)dv->ts_patch, dloss, d, s));
        else GPT2RT__CU_CK(gpt2rt__cu_ts_mse_backward<X>(yn, dv->ts_pred, dv->ts_y, dv->ts_std, gpt2rt__cu_weight<X>(st, rw),
                                                    gpt2rt__cu_weight<X>(st, rb), gpt2rt__cu_grad_of(st, rw),
                                                    gpt2rt__cu_grad_of(st, rb), dloss, d, s));
        if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE) GPT2RT__CU_CK(gpt2rt__cu_ts_decode<X>(yn, logits, 1, d, s));
        float *g_outw = gpt2rt__cu_grad_of(st, ow);
        if (g_outw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_outw, gpt2rt__cu_grad_of(st, ob),
                                                            st->acc ? st->red : NULL, logits, dv->lnf, h.rows, h.k,
                                                            h.n, st->acc, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dbuf, logits, gpt2rt__cu_weight<X>(st, ow), NULL,
                                                       h.rows, h.k, h.n, st->mm_err, sizeof st->mm_err));
    } else if (h.kind == GPT2RT__HEAD_CHUNKED) { /* the chunks again, unless gpt2rt_step's forward ran them */
        if (!st->dlogits_ready) GPT2RT__TRY(gpt2rt__cu_head_chunks_t<X>(ctx, st, 1, dloss));
        st->dlogits_ready = 0;
    } else { /* LM head (tied): dlnf -> dbuf */
        const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE);
        if (!st->dlogits_ready)
            GPT2RT__CU_CK(gpt2rt__cu_classifier<X>(logits, dv->losses, dv->logit_lse, dv->targets, dloss, 1, BT, d->V,
                                                   d->Vp, s));
        st->dlogits_ready = 0;
        float *g_wte = gpt2rt__cu_grad_of(st, wte);
        if (g_wte)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_wte, NULL, NULL, logits, dv->lnf, h.rows,
                                                            h.k, h.n, st->acc, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dbuf, logits, gpt2rt__cu_weight<X>(st, wte), NULL,
                                                       h.rows, h.k, h.n, st->mm_err, sizeof st->mm_err));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, BT * C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbuf, dbuf, &dr, BT * C, s));
    GPT2RT__CU_CK(cudaMemsetAsync(dres, 0, (size_t)(BT * C * d->act_bytes), s));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, gpt2rt__cu_grad_of(st, lnfw), gpt2rt__cu_grad_of(st, lnfb), dbuf,
                                            res, gpt2rt__cu_weight<X>(st, lnfw), dv->lnf_mean, dv->lnf_rstd));
    return GPT2RT_OK;
}

/* Layer l's backward: dres holds d(res3) and becomes d(res), res_in (BT,C) the layer's
   input. Outputs the forward did not keep are recomputed into rcbuf, only for the weight
   gradients that need them (NULL g: frozen, skipped). Dropout: the masked gradient of a
   residual branch goes through the scratch free at that point (dbuf for the MLP's, dbig
   for the attention's), dres stays the stream's. Mirrors gpt2rt__cpu_layer_backward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_layer_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t l, const X *res_in,
                                                 gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    const int acc = st->acc;
    gpt2rt_ctx *dv = st->dev;
    X *dres = (X *)dv->dres, *dbuf = (X *)dv->dbuf, *dbig = (X *)dv->dbig;
    X *rc = (X *)dv->rcbuf; /* SELECTIVE: outputs not kept, recomputed for a weight gradient */
    float *dbs = acc ? st->red : NULL; /* the bias-gradient vector of an accumulating matmul */
    const int dgelu_epilogue = sizeof(X) == 2; /* fp32: the gelu backward kernel (see the top comment) */
    st->layer = l;
    gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
    gpt2rt__layer_params g = gpt2rt__lparams(dv, st->grads, 1, l); /* device fp32, NULL: frozen */
    const X *fch = (const X *)a.fch, *res2 = (const X *)a.res2, *atty = (const X *)a.atty, *qkv = (const X *)a.qkv;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    /* MLP; dres holds d(res3), dbranch the gradient of the branch (masked) */
    const X *gelu = (const X *)a.fch_gelu, *ln2 = (const X *)a.ln2, *dbranch = dres;
    if (!gelu && g.fcprojw) {
        GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(rc, fch, BT * 4 * C, s));
        gelu = rc;
    }
    if (dr3.on) {
        GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbuf, dres, &dr3, BT * C, s));
        dbranch = dbuf;
    }
    if (g.fcprojw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcprojw, g.fcprojb, dbs, dbranch, gelu, BT, 4 * C, C,
                                                        acc, me, mc));
    /* d(fch) = (dbranch Wproj) * gelu'(fch): the DGELU epilogue (bf16/fp16) or the kernel (fp32) */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbig, dbranch, p.fcprojw, dgelu_epilogue ? fch : NULL, BT,
                                                   4 * C, C, me, mc));
    if (!dgelu_epilogue) GPT2RT__CU_CK(gpt2rt__cu_gelu_backward<X>(dbig, fch, dbig, BT * 4 * C, s));
    if (!ln2 && g.fcw) {
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res2, p.ln2w, p.ln2b, BT, C, s));
        ln2 = rc;
    }
    if (g.fcw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcw, g.fcb, dbs, dbig, ln2, BT, C, 4 * C, acc, me, mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.fcw, NULL, BT, C, 4 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln2w, g.ln2b, dbuf, res2, p.ln2w, a.ln2_mean, a.ln2_rstd));
    /* attention; dres holds d(res2) */
    dbranch = dres;
    if (dr2.on) {
        GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbig, dres, &dr2, BT * C, s));
        dbranch = dbig;
    }
    if (g.projw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.projw, g.projb, dbs, dbranch, atty, BT, C, C, acc, me,
                                                        mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbranch, p.projw, NULL, BT, C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_attention_backward<X>(dbig, dbuf, qkv, atty, a.lse, st->att_D, (int)d->B, (int)d->T,
                                                   (int)C, (int)d->NH, s, &da, (int)d->TH));
    const X *ln1 = (const X *)a.ln1;
    if (!ln1 && g.qkvw) {
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res_in, p.ln1w, p.ln1b, BT, C, s));
        ln1 = rc;
    }
    if (g.qkvw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.qkvw, g.qkvb, dbs, dbig, ln1, BT, C, 3 * C, acc, me,
                                                        mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.qkvw, NULL, BT, C, 3 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln1w, g.ln1b, dbuf, res_in, p.ln1w, a.ln1_mean, a.ln1_rstd));
    st->layer = -1;
    return GPT2RT_OK;
}

/* embeddings: the dropout's mask on dres (then d(x0 before dropout): dres ends here);
   dwte by token buckets (deterministic), dwpe summed over the batch; patches: dwpe, and
   in_layer's weight gradients, the patches' gradient only for RevIN's affine */
template <typename X>
static gpt2rt_result gpt2rt__cu_embed_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    X *dres = (X *)dv->dres;
    float *g_wte = d->patches ? NULL : gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE));
    float *g_wpe = gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE));
    st->layer = -1;
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dres, dres, &dr, d->BT * d->C, st->stream));
    GPT2RT__CU_CK(gpt2rt__cu_encoder_backward<X>(g_wte, g_wpe, dres, st->buckets_ws, g_wte ? st->nb : 0, d->B, d->T,
                                                 d->C, st->stream));
    const gpt2rt__tensor *iw = d->patches ? gpt2rt__ts_tensor(ctx, GPT2RT__INW) : NULL;
    float *g_inw = gpt2rt__cu_grad_of(st, iw);
    if (!g_inw) return GPT2RT_OK; /* tokens, or the head group frozen */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_inw, gpt2rt__cu_grad_of(st, gpt2rt__ts_tensor(ctx,
                                                    GPT2RT__INB)), st->acc ? st->red : NULL, dres, dv->ts_patch, d->BT,
                                                    d->patch_len, d->C, st->acc, st->mm_err, sizeof st->mm_err));
    const gpt2rt__tensor *rw = gpt2rt__ts_tensor(ctx, GPT2RT__REVW), *rb = gpt2rt__ts_tensor(ctx, GPT2RT__REVB);
    if (!gpt2rt__cu_grad_of(st, rw)) return GPT2RT_OK;
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dv->ts_dpatch, dres, gpt2rt__cu_weight<X>(st, iw), NULL,
                                                   d->BT, d->patch_len, d->C, st->mm_err, sizeof st->mm_err));
    GPT2RT__CU_CK(gpt2rt__cu_ts_affine_backward<X>(gpt2rt__cu_grad_of(st, rw), gpt2rt__cu_grad_of(st, rb),
                                                   (const X *)(const void *)dv->ts_dpatch, dv->ts_z, d, st->stream));
    return GPT2RT_OK;
}

/* the table's entries: the state is ctx->cu, the storage type st->xt */
#define GPT2RT__CU_BY_TYPE(st, fn, ...) \
    ((st)->xt == CUDA_R_32F ? fn<float>(__VA_ARGS__) \
     : (st)->xt == CUDA_R_16BF ? fn<__nv_bfloat16>(__VA_ARGS__) : fn<__half>(__VA_ARGS__))
static gpt2rt_result gpt2rt__cu_embed_forward(gpt2rt_ctx *ctx) {
    return GPT2RT__CU_BY_TYPE(ctx->cu, gpt2rt__cu_embed_forward_t, ctx, ctx->cu);
}
static gpt2rt_result gpt2rt__cu_layer_forward_any(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_layer_forward<float>(ctx, st, l, res, a)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_layer_forward<__nv_bfloat16>(ctx, st, l, (const __nv_bfloat16 *)(const void *)res, a)
         : gpt2rt__cu_layer_forward<__half>(ctx, st, l, (const __half *)(const void *)res, a);
}
static gpt2rt_result gpt2rt__cu_head_forward(gpt2rt_ctx *ctx, const float *res) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_head_forward_t<float>(ctx, st, res)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_head_forward_t<__nv_bfloat16>(ctx, st, (const __nv_bfloat16 *)(const void *)res)
         : gpt2rt__cu_head_forward_t<__half>(ctx, st, (const __half *)(const void *)res);
}
static gpt2rt_result gpt2rt__cu_head_backward(gpt2rt_ctx *ctx, const float *res, float dloss) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_head_backward_t<float>(ctx, st, res, dloss)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_head_backward_t<__nv_bfloat16>(ctx, st, (const __nv_bfloat16 *)(const void *)res, dloss)
         : gpt2rt__cu_head_backward_t<__half>(ctx, st, (const __half *)(const void *)res, dloss);
}
static gpt2rt_result gpt2rt__cu_layer_backward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_layer_backward_t<float>(ctx, st, l, res, a)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_layer_backward_t<__nv_bfloat16>(ctx, st, l, (const __nv_bfloat16 *)(const void *)res, a)
         : gpt2rt__cu_layer_backward_t<__half>(ctx, st, l, (const __half *)(const void *)res, a);
}
static gpt2rt_result gpt2rt__cu_embed_backward(gpt2rt_ctx *ctx) {
    return GPT2RT__CU_BY_TYPE(ctx->cu, gpt2rt__cu_embed_backward_t, ctx, ctx->cu);
}
#undef GPT2RT__CU_BY_TYPE
/* bytes device to device, stream-ordered (FULL's checkpoints and last output) */
static gpt2rt_result gpt2rt__cu_copy(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes) {
    gpt2rt__cu_state *st = ctx->cu;
    GPT2RT__CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream));
    return GPT2RT_OK;
}
/* the driver's entries (7.3) on a device state: the layer-level half of the CUDA table,
   what gpt2rt__model_forward / _backward call (with ax = st->dev, ctx the host side);
   the step-level half is gpt2rt__cu_backend's (8.8), the table ctx->be points to */
static const gpt2rt__backend gpt2rt__cu_layers = {
    /* .embed_forward  = */ gpt2rt__cu_embed_forward,
    /* .layer_forward  = */ gpt2rt__cu_layer_forward_any,
    /* .head_forward   = */ gpt2rt__cu_head_forward,
    /* .head_backward  = */ gpt2rt__cu_head_backward,
    /* .layer_backward = */ gpt2rt__cu_layer_backward,
    /* .embed_backward = */ gpt2rt__cu_embed_backward,
    /* .copy           = */ gpt2rt__cu_copy,
    /* .forward        = */ NULL,
    /* .forward_series = */ NULL,
    /* .backward       = */ NULL,
    /* .update         = */ NULL,
    /* .zero_grads     = */ NULL,
    /* .logits         = */ NULL,
    /* .predictions    = */ NULL,
    /* .dp_reduce      = */ NULL,
    /* .host_weights   = */ NULL,
    /* .upload         = */ NULL,
    /* .shard_read     = */ NULL,
    /* .param_read     = */ NULL,
    /* .allocated      = */ NULL,
    /* .dp_rank        = */ NULL,
    /* .dp_open        = */ NULL,
    /* .release_shared = */ NULL,
    /* .release        = */ NULL,
    /* .decode         = */ NULL
};

/* ---- training calls ---- */

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
    GPT2RT__TRY(gpt2rt__model_forward(ctx, &gpt2rt__cu_layers, st->dev));
    st->have_targets = targets != NULL;
    if (!targets) {
        if (loss) *loss = 0.0f;
        return GPT2RT_OK;
    }
    float dloss = st->loss_scale / (float)(BT * st->cfg.grad_accum);
    if (d->classifier_chunk < BT) { /* classifier_chunk: the fused head's weight gradient joins what is there */
        st->acc = st->grads_dirty;
        GPT2RT__TRY(gpt2rt__cu_head_chunks_t<X>(ctx, st, fuse, dloss));
    } else
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

/* Patches: x (Bw,L,M) and y (Bw,H,M) (may be NULL) host fp32, checked by the caller
   (finite). RevIN and the patches on the device, the model, the de-normalised
   predictions back to the host (st->h_pred, what gpt2rt_predictions reads), and with y
   the loss, summed there as the CPU sums it: *loss (may be NULL), ctx->loss,
   ctx->loss_sum, ctx->n_targets. Waits for the device (the predictions), so x and y
   are free again on return. */
template <typename X>
static gpt2rt_result gpt2rt__cu_forward_series_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *x, const float *y,
                                                 float *loss) {
    const gpt2rt__dims *d = &st->d;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    const X *rw = gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__REVW));
    const X *rb = gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__REVB));
    st->dlogits_in_forward = st->dlogits_ready = 0;
    st->have_targets = 0;
    st->layer = -1;
    GPT2RT__CU_CK(cudaMemcpyAsync(st->ts_x, x, (size_t)(d->B * d->lookback) * 4, cudaMemcpyHostToDevice, s));
    if (y && d->seqhead != GPT2RT_HEAD_NEXT_PATCH) /* NEXT_PATCH has no y slot: its targets are the patches */
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->ts_y, y, (size_t)d->n_out * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(gpt2rt__cu_ts_revin_patch<X>((X *)(void *)dv->ts_patch, dv->ts_z, dv->ts_mean, dv->ts_std, st->ts_x, rw,
                                               rb, d, s));
    GPT2RT__TRY(gpt2rt__model_forward(ctx, &gpt2rt__cu_layers, st->dev));
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH) { /* the targets are the lookback's next patches: the
                              loss's B partial sums in attention's D scratch (B*8 <= B*NH*T*4 bytes, T >= 2; free until
                              the backward), added on the host in series order */
        double *part = (double *)(void *)st->att_D, *h_part = (double *)(void *)st->h_losses; /* (BT) floats >= B doubles */
        GPT2RT__CU_CK(gpt2rt__cu_ts_next<X>(part, (X *)dv->logits, (const X *)(const void *)dv->ts_patch, 0.0f, d, s));
        GPT2RT__CU_CK(cudaMemcpyAsync(h_part, part, (size_t)d->B * sizeof(double), cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
        double sum = 0.0;
        for (int64_t bm = 0; bm < d->B; bm++) sum += h_part[bm];
        st->have_targets = 1;
        ctx->loss_sum = sum;
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(sum / (double)d->n_out);
        if (loss) *loss = ctx->loss;
        return GPT2RT_OK;
    }
    GPT2RT__CU_CK(gpt2rt__cu_ts_denorm<X>(dv->ts_pred, (const X *)(const void *)gpt2rt__ts_yn(dv), dv->ts_mean,
                                          dv->ts_std, rw, rb, d, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_pred, dv->ts_pred, (size_t)d->n_out * 4, cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    st->have_targets = y != NULL;
    if (y) {
        ctx->loss_sum = gpt2rt__ts_mse_sum(st->h_pred, y, d->n_out);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
    }
    if (loss) *loss = y ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_forward_series(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *x, const float *y,
                                               float *loss) {
    st->phase = "forward";
    st->layer = -1;
    if (!st->d.patches)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_forward_series: the context has token inputs");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_forward_series_t<float>(ctx, st, x, y, loss);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_forward_series_t<__nv_bfloat16>(ctx, st, x, y, loss);
    return gpt2rt__cu_forward_series_t<__half>(ctx, st, x, y, loss);
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
    st->acc = st->grads_dirty;
    gpt2rt_result r = gpt2rt__model_backward(ctx, &gpt2rt__cu_layers, st->dev,
                                             st->loss_scale / (float)(d->n_out * st->cfg.grad_accum));
    if (r != GPT2RT_OK) return r;
    st->have_targets = 0;
    st->grads_dirty = 1;
    return GPT2RT_OK;
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

/* ---- generation: the decode pass (11.7 through the table's decode entry) ----
   gpt2rt__cpu_decode_pass's steps on the device, with 8.2's ops and 8.4's products on the
   pass's N rows: the ids (host kv: tok, row, pos) up, x (N,C) = the embeddings, every
   layer (its keys and values into the cache, attention over it), then ln_f and the tied
   head only on the M rows kv->sel lists, and their logits (M,V) back to the host's kv
   (fp32, rows Vp apart), the one wait of a pass. dk: the device's kv (st->dev's, carved by
   gpt2rt__layout), its activations floatX. */
template <typename X>
static gpt2rt_result gpt2rt__cu_decode_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t N, int64_t M) {
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__kv *hk = &ctx->kv, *dk = &st->dev->kv;
    const int64_t C = d->C, cache = d->kv_batch * d->kv_len * C; /* one layer's keys */
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    X *x = (X *)(void *)dk->x, *ln = (X *)(void *)dk->ln, *qkv = (X *)(void *)dk->qkv, *atty = (X *)(void *)dk->atty;
    X *proj = (X *)(void *)dk->proj, *fch = (X *)(void *)dk->fch, *logits = (X *)(void *)dk->logits;
    st->layer = -1;
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->tok, hk->tok, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->row, hk->row, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->pos, hk->pos, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    const X *wte = gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE));
    GPT2RT__CU_CK(gpt2rt__cu_decode_embed<X>(x, dk->tok, dk->pos, wte,
                                             gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE)), N, C, s));
    for (int64_t l = 0; l < d->L; l++) { /* gpt2rt__cpu_layer_decode's steps */
        gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
        st->layer = l;
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, x, p.ln1w, p.ln1b, N, C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, qkv, NULL, ln, p.qkvw, p.qkvb, N, C, 3 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_attention_cached<X>(atty, qkv, (X *)(void *)dk->k + l * cache,
                                                     (X *)(void *)dk->v + l * cache, dk->row, dk->pos, N, d->kv_len, C,
                                                     d->NH, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, proj, NULL, atty, p.projw, p.projb, N, C, C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(x, x, proj, N * C, s));
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, x, p.ln2w, p.ln2b, N, C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, fch, NULL, ln, p.fcw, p.fcb, N, C, 4 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(fch, fch, N * 4 * C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, proj, NULL, fch, p.fcprojw, p.fcprojb, N, 4 * C, C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(x, x, proj, N * C, s));
    }
    st->layer = -1;
    for (int64_t m = 0; m < M; m++) /* the sampled rows' states side by side: ln_f and the head see M rows */
        GPT2RT__CU_CK(cudaMemcpyAsync(proj + m * C, x + (int64_t)hk->sel[m] * C, (size_t)C * sizeof(X),
                                      cudaMemcpyDeviceToDevice, s));
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, proj,
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFW)),
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFB)), M,
                                                  C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, logits, NULL, ln, wte, NULL, M, C, d->Vp, me, mc));
    /* the logits through the pinned stage, as many rows at a time as it holds */
    const size_t row = (size_t)d->V * sizeof(X);
    int64_t rows = (int64_t)(st->stage_bytes / row);
    const X *h = (const X *)(void *)st->h_stage;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
        int64_t n = M - r0 < rows ? M - r0 : rows;
        GPT2RT__CU_CK(cudaMemcpy2DAsync(st->h_stage, row, logits + r0 * d->Vp, (size_t)d->Vp * sizeof(X), row,
                                        (size_t)n, cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
        for (int64_t i = 0; i < n; i++)
            for (int64_t v = 0; v < d->V; v++) hk->logits[(r0 + i) * d->Vp + v] = gpt2rt__cu_host_f(h[i * d->V + v]);
    }
    if (!M) GPT2RT__CU_CK(cudaStreamSynchronize(s)); /* the ids' pinned buffers are free again */
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_decode(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    gpt2rt__cu_state *st = ctx->cu;
    if (!st || !st->h_kv)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_generate: this CUDA context has no device KV cache "
                            "(kv_batch = %lld, one device only)", (long long)ctx->d.kv_batch);
    st->phase = "decode";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_decode_t<float>(ctx, st, N, M);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_decode_t<__nv_bfloat16>(ctx, st, N, M);
    return gpt2rt__cu_decode_t<__half>(ctx, st, N, M);
}

#undef GPT2RT__CU_MM

/* ---- the public calls on a CUDA context: the host keeps the fp32 weights (ctx->params,
   every tensor by off), the source of truth for loads, saves and parameter calls; the
   rest lives on the device. The training calls reach the driver directly. ---- */


/* a CUDA context's host side: the whole model's parameter table and its fp32 weights
   (the only host arena; gpt2rt_free frees it), initialised */
static gpt2rt_result gpt2rt__cu_host_alloc(gpt2rt_ctx *ctx) {
    ctx->n_tensors = gpt2rt__param_table(&ctx->d, NULL, &ctx->n_params, &ctx->n_train);
    ctx->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                   GPT2RT_MEM_BOOKKEEPING);
    if (!ctx->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: parameter table");
    gpt2rt__param_table(&ctx->d, ctx->tensors, NULL, NULL);
    size_t pb = (size_t)ctx->n_params * sizeof(float);
    ctx->params = (float *)gpt2rt__alloc(&ctx->cfg, pb, GPT2RT_MEM_WEIGHTS);
    if (!ctx->params)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: %zu bytes of host memory for the fp32 "
                            "weights", pb);
    ctx->arena[GPT2RT_MEM_WEIGHTS] = ctx->params; /* gpt2rt_free frees it */
    ctx->arena_bytes[GPT2RT_MEM_WEIGHTS] = pb;
    gpt2rt__init_params(ctx);
    return GPT2RT_OK;
}

/* gpt2rt_create, backend CUDA (ctx->cfg resolved): the budget and the
   device's free memory against the plan before anything is allocated (the table and the
   advisor's suggestion when it does not fit), the host weights, initialised, then the
   device state, which uploads them */
static gpt2rt_result gpt2rt__cu_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(ctx->cfg.device_ids[0]) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        (void)cudaGetLastError(); /* no device: gpt2rt__cu_create says so */
        fr = 0;
    }
    if (ctx->cfg.memory_budget && plan->total[0] > ctx->cfg.memory_budget)
        return gpt2rt__fail_oom(ctx, plan, ctx->cfg.memory_budget, fr, NULL, 0);
    if (fr && plan->total[0] > (uint64_t)fr) return gpt2rt__fail_oom(ctx, plan, fr, fr, NULL, 0);
    gpt2rt_result hr = gpt2rt__cu_host_alloc(ctx);
    if (hr != GPT2RT_OK) return hr;
    char err[2048];
    gpt2rt_result r = gpt2rt__cu_create(ctx, &ctx->cu, err, sizeof err);
    if (r == GPT2RT_ERR_OUT_OF_MEMORY) {
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { (void)cudaGetLastError(); fr = 0; }
        return gpt2rt__fail_oom(ctx, plan, 0, fr, err, 1);
    }
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", err);
    if (ctx->cu->h_kv) /* 11.7 fills the pass's ids and samples from the logits here */
        gpt2rt__kv_layout(&ctx->cu->d, 0, 1, ctx->cu->h_kv, &ctx->kv, GPT2RT__KV_HOST); /* the dims it was sized by */
    return GPT2RT_OK;
}

/* ctx->params caught up with the device (updates move the device copy only): ZeRO-1,
   the trained floats of the own shard (a data-parallel rank's host weights are rank 0's) */
static gpt2rt_result gpt2rt__cu_host_weights(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    return st->host_stale ? gpt2rt__cu_download_params(ctx, st) : GPT2RT_OK;
}

/* gpt2rt_param_read on a CUDA context (checked by 11.6): the value from the host
   copy, the gradient (times unscale) and the moments from the device */
static gpt2rt_result gpt2rt__cu_param_read(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const gpt2rt__tensor *t,
                                           gpt2rt_param_what what, double unscale, float *dst) {
    gpt2rt_result r;
    if (what == GPT2RT_PARAM_VALUE) {
        if ((r = gpt2rt__cu_host_weights(ctx, st)) != GPT2RT_OK) return r;
        gpt2rt__param_out(t, ctx->params + t->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    size_t n = (size_t)(t->rows * t->cols);
    float *tmp = (float *)gpt2rt__alloc(&ctx->cfg, n * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %zu floats", n);
    r = gpt2rt__cu_read_tensor(ctx, st, t, what, tmp);
    /* the device's raw gradients also carry the loss scale */
    float k = what == GPT2RT_PARAM_GRAD ? (float)(unscale / (double)st->loss_scale) : 1.0f;
    if (r == GPT2RT_OK) gpt2rt__param_out(t, tmp, k, dst);
    gpt2rt__free(&ctx->cfg, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r;
}


#endif /* GPT2RT__SRC_CUDA_STEPS_CUH */
