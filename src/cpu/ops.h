/* cpu/ops.h - 7. CPU backend; 7.1 Ops
   may call: common/threads.h, common/errors.h, backend/driver.h */
#ifndef GPT2RT__SRC_CPU_OPS_H
#define GPT2RT__SRC_CPU_OPS_H
#include "../common/threads.h"
#include "../common/errors.h"
#include "../backend/driver.h"

/* ==== 7. CPU backend ==== */

/* fp32 with OpenMP; infix gpt2rt__cpu_ (the matrix product's internals: gpt2rt__sg_).
   Each op is a pair *_forward / *_backward with shapes next to the arguments.
   Every loop that reduces does so in an order fixed by the shapes alone, so the
   results do not depend on the thread count. nt: threads. */

/* ---- the work per thread of this machine (common/threads.h, gpt2rt__threads_for) ----
   Once per process (the first CPU context or calibration), under a lock, since contexts
   may be made on several threads: cores that other jobs keep busy (the 1-minute load
   average of /proc/loadavg, plus this process, above the cores OpenMP sees) make a
   region wait for the scheduler, so only ops of GPT2RT__CPU_WORK_MAX units a thread
   split; idle cores (or no /proc/loadavg to say otherwise) answer within microseconds,
   so every op of GPT2RT__CPU_WORK_MIN units a thread or more does. */
static void gpt2rt__threads_measure(int nt) {
#if defined(_OPENMP) && !defined(GPT2RT_CPU_WORK_PER_THREAD)
    if (nt < 2 || gpt2rt__cpu_work_measured > 0.0) return;
    GPT2RT__PRAGMA(omp critical(gpt2rt__threads_measure))
    {
        if (!(gpt2rt__cpu_work_measured > 0.0)) {
            double load = 0.0;
            FILE *f = fopen("/proc/loadavg", "r");
            if (f) {
                if (fscanf(f, "%lf", &load) != 1) load = 0.0;
                fclose(f);
            }
            gpt2rt__cpu_work_measured = load + 1.0 > (double)omp_get_num_procs() ? GPT2RT__CPU_WORK_MAX
                                                                                : GPT2RT__CPU_WORK_MIN;
        }
    }
#else
    (void)nt;
#endif
}

/* ---- the per-op profile (tools/bench_cpu): off unless ctx->prof is set ----
   Each op class's wall time, from the driver's thread around the op's call (its
   parallel regions included), so the classes and the step's remainder add up to the
   step. Off, an op pays one test of a pointer. */
enum {
    GPT2RT__PROF_MM_FWD,   /* the layers' matrix products, forward (bias fused) */
    GPT2RT__PROF_MM_BWD,   /* their backward: dinp, dW and the bias's column sums */
    GPT2RT__PROF_HEAD_FWD, /* the LM head's (tied wte) matrix product, forward */
    GPT2RT__PROF_HEAD_BWD, /* and backward */
    GPT2RT__PROF_ATT_FWD,
    GPT2RT__PROF_ATT_BWD,
    GPT2RT__PROF_GELU,     /* forward, backward and recompute */
    GPT2RT__PROF_LN,       /* LayerNorm forward, backward and recompute */
    GPT2RT__PROF_CE,       /* the classifier's softmax and cross-entropy, both ways */
    GPT2RT__PROF_RESID,    /* residual adds, the embeddings, dropout, zeroing */
    GPT2RT__PROF_NORM,     /* the update's gradient norm */
    GPT2RT__PROF_ADAMW,    /* the update's AdamW pass */
    GPT2RT__PROF_COUNT
};
static double gpt2rt__prof_t(const gpt2rt_ctx *ctx) { return ctx->prof ? gpt2rt__now() : 0.0; }
static void gpt2rt__prof_add(const gpt2rt_ctx *ctx, int op, double t0) {
    if (ctx->prof) ctx->prof[op] += gpt2rt__now() - t0;
}
/* run `call` (a statement), its time added to op class `op` when profiled */
#define GPT2RT__PROF(ctx, op, call) do { double pt_ = gpt2rt__prof_t(ctx); call; gpt2rt__prof_add(ctx, op, pt_); } while (0)

/* ==== 7.1 Ops ==== */

/* ---- dot product with 16 independent lanes (vectorises without -ffast-math) ---- */
static float gpt2rt__cpu_dot(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 16; j += 2) s += acc[j] + acc[j + 1];
    return s;
}

/* ---- dropout (inverted) ---- */
/* out (N) = in (N) * mask / (1-p), element by element (out may alias in); it is its
   own backward: the same op on the gradient */
static void gpt2rt__cpu_dropout_span(float *out, const float *in, gpt2rt__drop d, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) out[i] = in[i] * gpt2rt__drop_factor(&d, i); /* d: a copy out cannot alias */
}
static void gpt2rt__cpu_dropout(float *out, const float *in, const gpt2rt__drop *dr, int64_t N, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)N);
    int64_t nblk = (N + 4095) / 4096; /* in spans: the hash loop vectorises on its own copy of dr */
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++)
        gpt2rt__cpu_dropout_span(out, in, *dr, blk * 4096, N - blk * 4096 < 4096 ? N : blk * 4096 + 4096);
}

/* ---- embeddings ---- */
/* out (B,T,C) = wte[tokens] + wpe[t];  tokens (B,T), wte (Vp,C), wpe (P,C) */
static void gpt2rt__cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                    int64_t B, int64_t T, int64_t C, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_ADD * (double)(B * T * C));
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *te = wte + (int64_t)tokens[bt] * C, *pe = wpe + (bt % T) * C;
        float *o = out + bt * C;
        for (int64_t c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

/* dwte (Vp,C) += scatter of dout by token; dwpe (P,C) += dout summed over the batch
   (either NULL: frozen). Threads own column blocks and walk the tokens in order:
   deterministic. */
static void gpt2rt__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                     int64_t B, int64_t T, int64_t C, int nt) {
    nt = gpt2rt__threads_for(nt, 2.0 * GPT2RT__CPU_W_ADD * (double)(B * T * C));
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t bt = 0; bt < B * T; bt++) {
            const float *d = dout + bt * C;
            float *te = dwte ? dwte + (int64_t)tokens[bt] * C : NULL, *pe = dwpe ? dwpe + (bt % T) * C : NULL;
            if (dwte) for (int64_t c = c0; c < c1; c++) te[c] += d[c];
            if (dwpe) for (int64_t c = c0; c < c1; c++) pe[c] += d[c];
        }
    }
}

/* ---- LayerNorm (eps 1e-5, biased variance) ---- */
/* Rows go 8 at a time: each row's sums are still one chain over c in order, the 8
   chains run side by side (a small C's row would wait on each addition). The rows
   past N in the last group repeat row N-1 (computed, never stored). */
#define GPT2RT__LN_ROWS 8
/* out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C) */
static void gpt2rt__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int64_t N, int64_t C, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)(N * C));
    int64_t ng = (N + GPT2RT__LN_ROWS - 1) / GPT2RT__LN_ROWS;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t g = 0; g < ng; g++) {
        enum { R = GPT2RT__LN_ROWS };
        int64_t i0 = g * R, nr = N - i0 < (int64_t)R ? N - i0 : (int64_t)R;
        const float *x[R];
        float m[R] = {0}, v[R] = {0}, s[R];
        for (int j = 0; j < R; j++) x[j] = inp + (i0 + (j < nr ? j : nr - 1)) * C;
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) m[j] += x[j][c];
        for (int j = 0; j < R; j++) m[j] /= (float)C;
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) { float dx = x[j][c] - m[j]; v[j] += dx * dx; }
        for (int j = 0; j < R; j++) s[j] = 1.0f / sqrtf(v[j] / (float)C + 1e-5f);
        for (int j = 0; j < nr; j++) {
            float *o = out + (i0 + j) * C;
            for (int64_t c = 0; c < C; c++) o[c] = (x[j][c] - m[j]) * s[j] * w[c] + b[c];
            mean[i0 + j] = m[j];
            rstd[i0 + j] = s[j];
        }
    }
}

/* dinp (N,C) +=, dw (C) +=, db (C) += from dout (N,C) and the forward's inp, mean, rstd
   (dw and db NULL: frozen) */
static void gpt2rt__cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd,
                                       int64_t N, int64_t C, int nt) {
    nt = gpt2rt__threads_for(nt, 2.0 * GPT2RT__CPU_W_MATH * (double)(N * C));
    int64_t ng = (N + GPT2RT__LN_ROWS - 1) / GPT2RT__LN_ROWS;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t gi = 0; gi < ng; gi++) {
        enum { R = GPT2RT__LN_ROWS };
        int64_t i0 = gi * R, nr = N - i0 < (int64_t)R ? N - i0 : (int64_t)R;
        const float *x[R], *g[R];
        float m[R], s[R], dnorm_mean[R] = {0}, dnorm_norm_mean[R] = {0};
        for (int j = 0; j < R; j++) {
            int64_t i = i0 + (j < nr ? j : nr - 1);
            x[j] = inp + i * C;
            g[j] = dout + i * C;
            m[j] = mean[i];
            s[j] = rstd[i];
        }
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) {
                float dnorm = w[c] * g[j][c];
                dnorm_mean[j] += dnorm;
                dnorm_norm_mean[j] += dnorm * (x[j][c] - m[j]) * s[j];
            }
        for (int j = 0; j < nr; j++) {
            float dm = dnorm_mean[j] / (float)C, dnm = dnorm_norm_mean[j] / (float)C;
            float *dx = dinp + (i0 + j) * C;
            for (int64_t c = 0; c < C; c++) {
                float norm = (x[j][c] - m[j]) * s[j];
                dx[c] += (w[c] * g[j][c] - dm - norm * dnm) * s[j];
            }
        }
    }
    if (!dw) return;
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float aw[16] = {0}, ab[16] = {0};
        for (int64_t i = 0; i < N; i++) {
            const float *x = inp + i * C, *g = dout + i * C;
            float m = mean[i], s = rstd[i];
            for (int64_t c = c0; c < c1; c++) { aw[c - c0] += (x[c] - m) * s * g[c]; ab[c - c0] += g[c]; }
        }
        for (int64_t c = c0; c < c1; c++) { dw[c] += aw[c - c0]; db[c] += ab[c - c0]; }
    }
}

/* ---- causal self-attention (and aLLM4TS's placeholder mask: gpt2rt__cpu_att_keys) ---- */
/* Never stores the (T,T) probabilities: the forward keeps each softmax row's
   log-sum-exp, the backward recomputes the scores from q and k, and with dropout
   (dr non-NULL and on) draws the probabilities' mask again: element ((b*NH + h)*T
   + t)*T + s of the (B,NH,T,T) probabilities. lse is the softmax's, before dropout.
   A query's output is three sums, each one function's, so every path and the decode
   step (gpt2rt__cpu_attention_cached, 7.3) give it bitwise and a prefill is a forward:
     score = (q scale) . k   gpt2rt__cpu_att_scores, or _att_dot for one key: 16 lanes
                             over the blocks of 16, a chain over the tail, lanes in pairs
     p     = softmax         gpt2rt__cpu_att_softmax on the query's keys, in key order
     y     = sum_s p_s v_s   gpt2rt__cpu_att_mm: a chain from +0 over the keys in order
   Their products are GPT2RT__MADD, fused exactly where the target has an FMA, so the
   sums do not depend on where a compiler contracts (-ffp-contract, C++, nvcc's host
   pass) or vectorises. Small heads (HS * pad16(T) up to GPT2RT__ATT_TILE floats,
   pad16(T) up to GPT2RT__ATT_TMAX: patch models, short texts) run per (b,h) as small
   matrix products on stack tiles: blocks of GPT2RT__ATT_ROWS queries scored against
   the transposed keys, the rows softmaxed, then P V (backward: dS K, dS^T Q, P^T dY),
   4 rows by 16 columns a step in registers; a block's masked entries are exact zeros,
   which add nothing to those sums (for finite values: 0 * inf is NaN). Larger heads
   go a query at a time. A (b,h), or a query, is one thread's and every order is fixed
   by the shapes: the thread count never changes a result. */
#define GPT2RT__ATT_TILE 4096 /* floats: 16 KiB of stack a tile */
#define GPT2RT__ATT_ROWS 8    /* queries a block (the tiled path) */
#define GPT2RT__ATT_TMAX 256  /* the tiled path's longest pad16(T): its blocks' rows, 8 * 256 floats */
#if defined(__FMA__) || defined(FP_FAST_FMAF) || defined(__FP_FAST_FMAF)
#define GPT2RT__MADD(a, b, c) fmaf(a, b, c) /* a*b + c rounded once: an FMA instruction */
#else
#define GPT2RT__MADD(a, b, c) ((a) * (b) + (c)) /* no FMA: no compiler can fuse it either */
#endif

/* ---- exp for the softmaxes (the classifier's, attention's): vectorisable, within 2 ulp of expf ----
   exp(a) = 2^k exp(r), k = round(a / ln2) (taken as floor(y + 128.5) - 128, a
   conversion of a positive value: exact and vectorised), r = a - k ln2 in two parts,
   |r| <= ln2/2, exp(r) by its Taylor polynomial of degree 7 (truncation r^8/8! < 5e-9
   relative). Arguments below -87 give exp(-87) (1.6e-38: nothing next to a softmax
   sum of at least 1); the classifier's arguments are x - max and x - lse, at most 0,
   and the formula holds up to 88. The C library's expf is a call per element: with
   it, the softmax over 50257 logits was the largest op of the step after the matrix
   products. A float's magnitude bits grow with its magnitude, so the clamp is an
   unsigned min on them, at 87 below 0 and 88 above, the sign put back (no float
   comparison, see gpt2rt__tanh_n; the int conversion below must stay in range: a NaN
   or an infinity there is undefined behaviour), and a NaN argument gives NaN, so a
   poisoned step's loss still reads NaN and its update is skipped. The NaN is put in
   by a mask: gcc 12 turned "nan ? NaN : y" into a branch around the whole formula,
   and no loop around it vectorised. */
static inline float gpt2rt__exp_fast(float a) {
    uint32_t ub;
    memcpy(&ub, &a, sizeof ub);
    uint32_t nan = (ub & 0x7FFFFFFFu) > 0x7F800000u;
    /* |a| clamped to 87 for a negative, 88 for a positive, by a limit that depends on the
       sign: with a constant one (and a select for the NaN below) gcc folded the clamped
       case to its constant result behind a branch, and -ftrapping-math then kept the float
       work under it from vectorising: 6 ns a logit instead of under 1 */
    uint32_t sign = ub & 0x80000000u, mag = ub & 0x7FFFFFFFu, lim = 0x42B00000u - (sign >> 31) * 0x20000u;
    ub = sign | (mag > lim ? lim : mag);
    memcpy(&a, &ub, sizeof a);
    int32_t k = (int32_t)(a * 1.44269504088896341f + 128.5f) - 128; /* in [-125, 127] */
    float kf = (float)k;
    float r = (a - kf * 0.693145751953125f) - kf * 1.42860682030941723e-6f;
    float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 +
              r * (1.0f / 5040)))))));
    int32_t bits = (k + 127) * (1 << 23);
    float two_k, y;
    memcpy(&two_k, &bits, sizeof two_k);
    y = e * two_k;
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    yb = (yb & (nan - 1u)) | (0x7FC00000u & (0u - nan)); /* masks, not a select: see the clamp */
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* tile (HS, Tp) = the head's rows src + s*C3 (s < T) transposed; columns T..Tp-1 zero */
static void gpt2rt__cpu_att_tile(float *tile, const float *src, int64_t C3, int64_t T, int64_t Tp, int64_t HS) {
    for (int64_t s = 0; s < T; s++)
        for (int64_t i = 0; i < HS; i++) tile[i * Tp + s] = src[s * C3 + i];
    for (int64_t i = 0; i < HS; i++)
        for (int64_t s = T; s < Tp; s++) tile[i * Tp + s] = 0.0f;
}

/* sc (nr <= 4 rows, ld apart) = (a scale) . b for the rows a + r*lda (n) and the columns
   [0, ns) of bt (n, ldb): a chain from +0 over the tail [n16, n), then 16 lanes (lane j:
   a chain over i = j mod 16 in [0, n16)) added in pairs. 4 rows by 16 columns a step;
   the columns up to ns rounded up to 16 are read and written (ld, ldb >= that), rows
   past nr repeat row nr-1 (never stored). The rows are spelled out: gcc 12 vectorises
   fmaf over the columns only so. */
static void gpt2rt__cpu_att_scores(float *sc, int64_t ld, const float *a, int64_t lda, int64_t nr, const float *bt,
                                   int64_t ldb, int64_t n, int64_t ns, float scale) {
    enum { W = 16 };
    const float *a0 = a, *a1 = a + (nr > 1 ? 1 : 0) * lda, *a2 = a + (nr > 2 ? 2 : nr - 1) * lda,
                *a3 = a + (nr > 3 ? 3 : nr - 1) * lda;
    int64_t n16 = n - n % 16;
    for (int64_t c = 0; c < ns; c += W) {
        float s0[W] = {0}, s1[W] = {0}, s2[W] = {0}, s3[W] = {0};
        for (int64_t i = n16; i < n; i++) {
            const float *b = bt + i * ldb + c;
            float x0 = a0[i] * scale, x1 = a1[i] * scale, x2 = a2[i] * scale, x3 = a3[i] * scale;
            for (int u = 0; u < W; u++) {
                s0[u] = GPT2RT__MADD(x0, b[u], s0[u]); s1[u] = GPT2RT__MADD(x1, b[u], s1[u]);
                s2[u] = GPT2RT__MADD(x2, b[u], s2[u]); s3[u] = GPT2RT__MADD(x3, b[u], s3[u]);
            }
        }
        for (int j = 0; n16 && j < 16; j += 2) { /* lanes j (l) and j+1 (m) */
            float l0[W] = {0}, l1[W] = {0}, l2[W] = {0}, l3[W] = {0}, m0[W] = {0}, m1[W] = {0}, m2[W] = {0}, m3[W] = {0};
            for (int64_t i = j; i < n16; i += 16) {
                const float *b = bt + i * ldb + c, *e = b + ldb;
                float x0 = a0[i] * scale, x1 = a1[i] * scale, x2 = a2[i] * scale, x3 = a3[i] * scale;
                float y0 = a0[i + 1] * scale, y1 = a1[i + 1] * scale, y2 = a2[i + 1] * scale, y3 = a3[i + 1] * scale;
                for (int u = 0; u < W; u++) {
                    l0[u] = GPT2RT__MADD(x0, b[u], l0[u]); l1[u] = GPT2RT__MADD(x1, b[u], l1[u]);
                    l2[u] = GPT2RT__MADD(x2, b[u], l2[u]); l3[u] = GPT2RT__MADD(x3, b[u], l3[u]);
                    m0[u] = GPT2RT__MADD(y0, e[u], m0[u]); m1[u] = GPT2RT__MADD(y1, e[u], m1[u]);
                    m2[u] = GPT2RT__MADD(y2, e[u], m2[u]); m3[u] = GPT2RT__MADD(y3, e[u], m3[u]);
                }
            }
            for (int u = 0; u < W; u++) {
                s0[u] += l0[u] + m0[u]; s1[u] += l1[u] + m1[u];
                s2[u] += l2[u] + m2[u]; s3[u] += l3[u] + m3[u];
            }
        }
        float *o = sc + c;
        for (int u = 0; u < W; u++) o[u] = s0[u];
        if (nr > 1) for (int u = 0; u < W; u++) o[ld + u] = s1[u];
        if (nr > 2) for (int u = 0; u < W; u++) o[2 * ld + u] = s2[u];
        if (nr > 3) for (int u = 0; u < W; u++) o[3 * ld + u] = s3[u];
    }
}

/* one score of gpt2rt__cpu_att_scores, bitwise: (q scale) . k, q and k (n) */
static float gpt2rt__cpu_att_dot(const float *q, const float *k, int64_t n, float scale) {
    int64_t n16 = n - n % 16;
    float lane[16] = {0}, s = 0.0f;
    for (int64_t i = n16; i < n; i++) s = GPT2RT__MADD(q[i] * scale, k[i], s);
    for (int64_t i = 0; i < n16; i += 16)
        for (int j = 0; j < 16; j++) lane[j] = GPT2RT__MADD(q[i + j] * scale, k[i + j], lane[j]);
    for (int j = 0; n16 && j < 16; j += 2) s += lane[j] + lane[j + 1];
    return s;
}

/* y (nr <= 4 rows, ldy apart; n) += A B: A's element (r, s) at a[r*ars + s*acs], B (ns
   rows, ldb apart); each element's terms added in s order onto y (a chain from +0 onto
   a zeroed y). 4 rows by 16 columns a step in registers (rows spelled out, as in
   gpt2rt__cpu_att_scores); rows past nr repeat row nr-1 (never stored). */
static void gpt2rt__cpu_att_mm(float *y, int64_t ldy, int64_t nr, const float *a, int64_t ars, int64_t acs,
                               const float *b, int64_t ldb, int64_t n, int64_t ns) {
    enum { W = 16 };
    int64_t r1 = nr > 1 ? 1 : 0, r2 = nr > 2 ? 2 : nr - 1, r3 = nr > 3 ? 3 : nr - 1;
    const float *a0 = a, *a1 = a + r1 * ars, *a2 = a + r2 * ars, *a3 = a + r3 * ars;
    float *y0 = y, *y1 = y + r1 * ldy, *y2 = y + r2 * ldy, *y3 = y + r3 * ldy;
    int64_t c = 0;
    for (; c + W <= n; c += W) {
        float c0[W], c1[W], c2[W], c3[W];
        for (int u = 0; u < W; u++) { c0[u] = y0[c + u]; c1[u] = y1[c + u]; c2[u] = y2[c + u]; c3[u] = y3[c + u]; }
        for (int64_t s = 0; s < ns; s++) {
            const float *bs = b + s * ldb + c;
            float x0 = a0[s * acs], x1 = a1[s * acs], x2 = a2[s * acs], x3 = a3[s * acs];
            for (int u = 0; u < W; u++) {
                c0[u] = GPT2RT__MADD(x0, bs[u], c0[u]); c1[u] = GPT2RT__MADD(x1, bs[u], c1[u]);
                c2[u] = GPT2RT__MADD(x2, bs[u], c2[u]); c3[u] = GPT2RT__MADD(x3, bs[u], c3[u]);
            }
        }
        for (int u = 0; u < W; u++) y0[c + u] = c0[u];
        if (nr > 1) for (int u = 0; u < W; u++) y1[c + u] = c1[u];
        if (nr > 2) for (int u = 0; u < W; u++) y2[c + u] = c2[u];
        if (nr > 3) for (int u = 0; u < W; u++) y3[c + u] = c3[u];
    }
    for (; c < n; c++) { /* the columns past the last 16, one at a time */
        float c0 = y0[c], c1 = y1[c], c2 = y2[c], c3 = y3[c];
        for (int64_t s = 0; s < ns; s++) {
            float bs = b[s * ldb + c];
            c0 = GPT2RT__MADD(a0[s * acs], bs, c0); c1 = GPT2RT__MADD(a1[s * acs], bs, c1);
            c2 = GPT2RT__MADD(a2[s * acs], bs, c2); c3 = GPT2RT__MADD(a3[s * acs], bs, c3);
        }
        y0[c] = c0;
        if (nr > 1) y1[c] = c1;
        if (nr > 2) y2[c] = c2;
        if (nr > 3) y3[c] = c3;
    }
}

/* p (n) = the softmax of one query's scores p (n), in place; returns its lse. The max,
   e = exp_fast(score - max) (within 2 ulp of expf, vectorised), their sum in 16 lanes
   (s mod 16 over the blocks of 16; then the tail's chain, then the lanes in pairs),
   p = e * (1/sum). */
static float gpt2rt__cpu_att_softmax(float *p, int64_t n) {
    int64_t n16 = n - n % 16;
    float lm[16], ls[16] = {0}, mx = -INFINITY, sum = 0.0f;
    for (int u = 0; u < 16; u++) lm[u] = -INFINITY;
    for (int64_t s = 0; s < n16; s += 16)
        for (int u = 0; u < 16; u++) lm[u] = p[s + u] > lm[u] ? p[s + u] : lm[u];
    for (int64_t s = n16; s < n; s++) mx = p[s] > mx ? p[s] : mx;
    for (int u = 0; u < 16; u++) mx = lm[u] > mx ? lm[u] : mx;
    for (int64_t s = 0; s < n; s++) p[s] = gpt2rt__exp_fast(p[s] - mx);
    for (int64_t s = 0; s < n16; s += 16)
        for (int u = 0; u < 16; u++) ls[u] += p[s + u];
    for (int64_t s = n16; s < n; s++) sum += p[s];
    for (int u = 0; u < 16; u += 2) sum += ls[u] + ls[u + 1];
    float inv = 1.0f / sum;
    for (int64_t s = 0; s < n; s++) p[s] *= inv;
    return mx + logf(sum);
}

/* The keys of query t under the mask of history TH (gpt2rt__dims.TH): keys [0, *n), and
   *self = t itself for a placeholder (t >= TH: it sees the history and itself only),
   else -1. TH = T is GPT-2's causal mask: keys [0, t]. Either way every key is <= t. */
static void gpt2rt__cpu_att_keys(int64_t t, int64_t TH, int64_t *n, int64_t *self) {
    *n = t < TH ? t + 1 : TH;
    *self = t < TH ? -1 : t;
}

/* query t's probabilities from its scores sc[0, ns) (key s at s, ns > t): the softmax
   over its keys (a placeholder's own score moved next to the history's), every other
   entry 0, then the dropout mask (r: the query's row of the (B*NH*T) rows); returns
   the lse */
static float gpt2rt__cpu_att_probs(float *sc, int64_t t, int64_t TH, int64_t ns, int64_t r, int64_t T,
                                   const gpt2rt__drop *dr) {
    int64_t n, self;
    gpt2rt__cpu_att_keys(t, TH, &n, &self);
    if (self >= 0) sc[n] = sc[self];
    float l = gpt2rt__cpu_att_softmax(sc, n + (self >= 0)), ps = self >= 0 ? sc[n] : 0.0f;
    for (int64_t s = n; s < ns; s++) sc[s] = 0.0f;
    if (self >= 0) sc[self] = ps;
    if (dr && dr->on)
        for (int64_t s = 0; s < ns; s++) sc[s] *= gpt2rt__drop_factor(dr, r * T + s);
    return l;
}

/* The softmax's backward on query t's row (r: its row of the (B*NH*T) rows) over keys
   [0, ns): p holds the scores (key s at s), g holds dP = dy . v; out: p f (f the dropout
   factor, 1 without) and dS = p (f dP - sum_s p f dP) scale in g. ns16 >= ns: the
   entries [ns, ns16) too are read (finite), and come out 0 in p f and dS. */
static void gpt2rt__cpu_att_grad_row(float *p, float *g, int64_t t, int64_t TH, int64_t ns, int64_t ns16, int64_t r,
                                     int64_t T, float lse, float scale, const gpt2rt__drop *dr) {
    int64_t n, self;
    gpt2rt__cpu_att_keys(t, TH, &n, &self);
    float ls[16] = {0}, dsum = 0.0f;
    for (int64_t s = 0; s < ns16; s++) p[s] = gpt2rt__exp_fast(p[s] - lse);
    float ps = self >= 0 ? p[self] : 0.0f;
    for (int64_t s = n; s < ns16; s++) p[s] = 0.0f;
    if (self >= 0) p[self] = ps;
    int drop = dr && dr->on;
    if (drop)
        for (int64_t s = 0; s < ns; s++) g[s] *= gpt2rt__drop_factor(dr, r * T + s);
    int64_t m16 = ns16 - ns16 % 16;
    for (int64_t s = 0; s < m16; s += 16)
        for (int u = 0; u < 16; u++) ls[u] += p[s + u] * g[s + u];
    for (int64_t s = m16; s < ns16; s++) dsum += p[s] * g[s];
    for (int u = 0; u < 16; u += 2) dsum += ls[u] + ls[u + 1];
    for (int64_t s = 0; s < ns16; s++) g[s] = p[s] * (g[s] - dsum) * scale;
    if (drop)
        for (int64_t s = 0; s < ns; s++) p[s] *= gpt2rt__drop_factor(dr, r * T + s);
}

/* out (B,T,C), lse (B,NH,T) from qkv (B,T,3C); scratch: nt rows of pad16(2T) floats;
   TH: the mask (gpt2rt__cpu_att_keys) */
static void gpt2rt__cpu_attention_forward_masked(float *out, float *lse, const float *qkv, float *scratch, int64_t B,
                                                 int64_t T, int64_t C, int64_t NH, int64_t TH, const gpt2rt__drop *dr,
                                                 int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)B * (double)(T * (T + 1) / 2) * (double)C);
    int64_t HS = C / NH, C3 = 3 * C, Tp = gpt2rt__pad16(T);
    float scale = 1.0f / sqrtf((float)HS);
    if (HS * Tp <= GPT2RT__ATT_TILE && Tp <= GPT2RT__ATT_TMAX) {
        GPT2RT__PARALLEL_FOR(nt)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            const int64_t R = GPT2RT__ATT_ROWS;
            int64_t b = bh / NH, h = bh % NH;
            const float *k0 = qkv + b * T * C3 + C + h * HS;
            float kt[GPT2RT__ATT_TILE], p[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX];
            gpt2rt__cpu_att_tile(kt, k0, C3, T, Tp, HS);
            for (int64_t t0 = 0; t0 < T; t0 += R) {
                int64_t nr = T - t0 < R ? T - t0 : R, ns = t0 + nr; /* the block's keys: [0, ns) */
                const float *q = qkv + (b * T + t0) * C3 + h * HS;
                float *y = out + (b * T + t0) * C + h * HS;
                for (int64_t r = 0; r < nr; r += 4)
                    gpt2rt__cpu_att_scores(p + r * Tp, Tp, q + r * C3, C3, nr - r < 4 ? nr - r : 4, kt, Tp, HS, ns, scale);
                for (int64_t r = 0; r < nr; r++) {
                    lse[bh * T + t0 + r] = gpt2rt__cpu_att_probs(p + r * Tp, t0 + r, TH, ns, bh * T + t0 + r, T, dr);
                    memset(y + r * C, 0, (size_t)HS * sizeof(float));
                }
                for (int64_t r = 0; r < nr; r += 4)
                    gpt2rt__cpu_att_mm(y + r * C, C, nr - r < 4 ? nr - r : 4, p + r * Tp, Tp, 1, k0 + C, C3, HS, ns);
            }
        }
        return;
    }
    GPT2RT__PARALLEL_FOR_RR(nt)
    for (int64_t r = 0; r < B * NH * T; r++) {
        int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        float *sc = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T);
        const float *q = qkv + (b * T + t) * C3 + h * HS, *k0 = qkv + b * T * C3 + C + h * HS;
        float *y = out + (b * T + t) * C + h * HS;
        for (int64_t s = 0; s <= t; s++) sc[s] = gpt2rt__cpu_att_dot(q, k0 + s * C3, HS, scale);
        lse[r] = gpt2rt__cpu_att_probs(sc, t, TH, t + 1, r, T, dr);
        memset(y, 0, (size_t)HS * sizeof(float));
        gpt2rt__cpu_att_mm(y, 0, 1, sc, 0, 1, k0 + C, C3, HS, t + 1);
    }
}

/* dqkv (B,T,3C) = (overwritten) from dout (B,T,C), the forward's qkv and lse (and
   dropout mask), under the mask TH. One (b,h) per task: dk and dv of a head are summed
   over t in order. With dropout (factor f = mask/(1-p)): y = sum_s p_s f_s v_s, so
   dv_s += p_s f_s dy and dP_s = f_s (dy . v_s), and the softmax's backward is unchanged.
   The tiled path takes a block of queries a step (scores, dP, the rows' dS, then
   dq = dS k, dk += dS^T q, dv += (p f)^T dy); the other one query a step with the same
   ops, its rows in scratch. */
static void gpt2rt__cpu_attention_backward_masked(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                                  float *scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                                                  int64_t TH, const gpt2rt__drop *dr, int nt) {
    nt = gpt2rt__threads_for(nt, 2.0 * GPT2RT__CPU_W_MATH * (double)B * (double)(T * (T + 1) / 2) * (double)C);
    int64_t HS = C / NH, C3 = 3 * C, Tp = gpt2rt__pad16(T);
    float scale = 1.0f / sqrtf((float)HS);
    int tiled = HS * Tp <= GPT2RT__ATT_TILE && Tp <= GPT2RT__ATT_TMAX;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t R = GPT2RT__ATT_ROWS;
        int64_t b = bh / NH, h = bh % NH, nb = tiled ? R : 1;
        const float *q0 = qkv + b * T * C3 + h * HS, *k0 = q0 + C, *v0 = q0 + 2 * C;
        const float *dy0 = dout + b * T * C + h * HS;
        float *dq0 = dqkv + b * T * C3 + h * HS, *dk0 = dq0 + C, *dv0 = dq0 + 2 * C;
        float kt[GPT2RT__ATT_TILE], vt[GPT2RT__ATT_TILE];
        float pb[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX], gb[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX];
        float *p = pb, *g = gb;
        if (tiled) {
            gpt2rt__cpu_att_tile(kt, k0, C3, T, Tp, HS);
            gpt2rt__cpu_att_tile(vt, v0, C3, T, Tp, HS);
        } else { /* one query's row each */
            p = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T);
            g = p + T;
        }
        for (int64_t t = 0; t < T; t++) {
            float *d = dq0 + t * C3;
            for (int64_t i = 0; i < HS; i++) d[i] = d[C + i] = d[2 * C + i] = 0.0f;
        }
        for (int64_t t0 = 0; t0 < T; t0 += nb) {
            int64_t nr = T - t0 < nb ? T - t0 : nb, ns = t0 + nr, ld = tiled ? Tp : 0;
            const float *q = q0 + t0 * C3, *dy = dy0 + t0 * C;
            if (tiled) {
                for (int64_t r = 0; r < nr; r += 4) {
                    int64_t m = nr - r < 4 ? nr - r : 4;
                    gpt2rt__cpu_att_scores(p + r * Tp, Tp, q + r * C3, C3, m, kt, Tp, HS, ns, scale);
                    gpt2rt__cpu_att_scores(g + r * Tp, Tp, dy + r * C, C, m, vt, Tp, HS, ns, 1.0f); /* dP */
                }
                for (int64_t r = 0; r < nr; r++)
                    gpt2rt__cpu_att_grad_row(p + r * Tp, g + r * Tp, t0 + r, TH, ns, gpt2rt__pad16(ns),
                                             bh * T + t0 + r, T, lse[bh * T + t0 + r], scale, dr);
            } else {
                for (int64_t s = 0; s < ns; s++) {
                    p[s] = gpt2rt__cpu_att_dot(q, k0 + s * C3, HS, scale);
                    g[s] = gpt2rt__cpu_att_dot(dy, v0 + s * C3, HS, 1.0f);
                }
                gpt2rt__cpu_att_grad_row(p, g, t0, TH, ns, ns, bh * T + t0, T, lse[bh * T + t0], scale, dr);
            }
            for (int64_t r = 0; r < nr; r += 4) /* dq = dS k */
                gpt2rt__cpu_att_mm(dq0 + (t0 + r) * C3, C3, nr - r < 4 ? nr - r : 4, g + r * ld, ld, 1, k0, C3, HS, ns);
            for (int64_t s = 0; s < ns && tiled; s += 4) { /* dk += dS^T q, dv += (p f)^T dy: keys s.. over t */
                int64_t m = ns - s < 4 ? ns - s : 4;
                gpt2rt__cpu_att_mm(dk0 + s * C3, C3, m, g + s, 1, ld, q, C3, HS, nr);
                gpt2rt__cpu_att_mm(dv0 + s * C3, C3, m, p + s, 1, ld, dy, C, HS, nr);
            }
            for (int64_t s = 0; s < ns && !tiled; s++) /* one query: the same terms, a key's row at a time */
                for (int64_t i = 0; i < HS; i++) {
                    dk0[s * C3 + i] = GPT2RT__MADD(g[s], q[i], dk0[s * C3 + i]);
                    dv0[s * C3 + i] = GPT2RT__MADD(p[s], dy[i], dv0[s * C3 + i]);
                }
        }
    }
}

/* GPT-2's causal mask (the kernel labs' reference) */
GPT2RT__MAYBE_UNUSED static void gpt2rt__cpu_attention_forward(float *out, float *lse, const float *qkv, float *scratch, int64_t B, int64_t T,
                                          int64_t C, int64_t NH, const gpt2rt__drop *dr, int nt) {
    gpt2rt__cpu_attention_forward_masked(out, lse, qkv, scratch, B, T, C, NH, T, dr, nt);
}
GPT2RT__MAYBE_UNUSED static void gpt2rt__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                           float *scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                                           const gpt2rt__drop *dr, int nt) {
    gpt2rt__cpu_attention_backward_masked(dqkv, dout, qkv, lse, scratch, B, T, C, NH, T, dr, nt);
}

/* ---- GELU, tanh form ---- */
#define GPT2RT__GELU_K 0.7978845608028654f /* sqrt(2/pi) */
/* tanh(u) = sign(u) (1 - 2 / (exp(2|u|) + 1)), exp by 2^k times a degree-6 Taylor
   polynomial on |r| <= ln2/2 (truncation r^7/7! < 1.2e-7 relative): plain arithmetic,
   where the C library's tanhf is a call per element (38% of a small model's step).
   Absolute error about 1e-7, which is what GELU needs: it uses 1 + tanh and
   1 - tanh^2. Above |u| = 10, tanh is 1 in float. Written so that compilers vectorise
   it under default flags: |u|, the clamp and the sign on the bits (no fminf call, no
   comparison of floats, which -ftrapping-math keeps as a branch), k = floor(...) as
   a conversion to int (exact: the value is positive; floorf does not vectorise in
   gcc 12). */
static void gpt2rt__tanh_n(float *x, int64_t n) { /* x (n) = tanh(x), in place */
    for (int64_t i = 0; i < n; i++) {
        uint32_t ub, ab, tb;
        memcpy(&ub, x + i, sizeof ub);
        ab = ub & 0x7FFFFFFFu;
        ab = ab < 0x41200000u ? ab : 0x41200000u; /* min(|u|, 10.0f); NaN too */
        float a;
        memcpy(&a, &ab, sizeof a);
        a *= 2.0f;
        int32_t k = (int32_t)(a * 1.44269504088896341f + 0.5f); /* round(a / ln2), in [0, 29] */
        float kf = (float)k;
        float r = (a - kf * 0.693145751953125f) - kf * 1.42860682030941723e-6f; /* ln2 in two parts */
        float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
        int32_t bits = (k + 127) * (1 << 23); /* 2^k */
        float two_k;
        memcpy(&two_k, &bits, sizeof two_k);
        float t = 1.0f - 2.0f / (e * two_k + 1.0f);
        memcpy(&tb, &t, sizeof tb);
        tb |= ub & 0x80000000u;
        memcpy(x + i, &tb, sizeof tb);
    }
}

/* out (N) = gelu(inp (N)); the backward computes tanh the same way (the same bits) */
static void gpt2rt__cpu_gelu_forward(float *out, const float *inp, int64_t N, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)N);
    int64_t nblk = (N + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * 64, n = N - i0 < 64 ? N - i0 : 64;
        const float *x = inp + i0;
        float th[64];
        for (int64_t i = 0; i < n; i++) th[i] = GPT2RT__GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        gpt2rt__tanh_n(th, n);
        for (int64_t i = 0; i < n; i++) out[i0 + i] = 0.5f * x[i] * (1.0f + th[i]);
    }
}

/* dinp (N) = gelu'(inp) * dout; dinp may alias dout. tanh as in the forward. */
static void gpt2rt__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t N, int nt) {
    nt = gpt2rt__threads_for(nt, 2.0 * GPT2RT__CPU_W_MATH * (double)N);
    int64_t nblk = (N + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * 64, n = N - i0 < 64 ? N - i0 : 64;
        const float *x = inp + i0;
        float th[64];
        for (int64_t i = 0; i < n; i++) th[i] = GPT2RT__GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        gpt2rt__tanh_n(th, n);
        for (int64_t i = 0; i < n; i++) {
            float sech2 = 1.0f - th[i] * th[i];
            float g = 0.5f * (1.0f + th[i]) + 0.5f * x[i] * sech2 * GPT2RT__GELU_K * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
            dinp[i0 + i] = g * dout[i0 + i];
        }
    }
}

/* y (N) += x (N) */
static void gpt2rt__cpu_residual_add(float *y, const float *x, int64_t N, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_ADD * (double)N);
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) y[i] += x[i];
}

/* ---- cross-entropy over the first V of Vp logits ---- */
/* losses (BT) and lse (BT) from logits (BT,Vp) and targets (BT) (negative: ignored).
   Returns the mean loss over the counted targets; *count gets their number, *sum
   the losses' sum. */
static float gpt2rt__cpu_crossentropy_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
                                          int64_t BT, int64_t V, int64_t Vp, int64_t *count, double *sum, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)(BT * V));
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        /* the max and the sum in 16 lanes (vectorised; the lanes combined in a fixed order) */
        float lm[16], ls[16] = {0};
        for (int j = 0; j < 16; j++) lm[j] = -INFINITY;
        int64_t v16 = V - V % 16;
        for (int64_t v = 0; v < v16; v += 16)
            for (int j = 0; j < 16; j++) lm[j] = x[v + j] > lm[j] ? x[v + j] : lm[j];
        float mx = -INFINITY;
        for (int64_t v = v16; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int j = 0; j < 16; j++) mx = lm[j] > mx ? lm[j] : mx;
        for (int64_t v = 0; v < v16; v += 16)
            for (int j = 0; j < 16; j++) ls[j] += gpt2rt__exp_fast(x[v + j] - mx);
        float sum = 0.0f;
        for (int64_t v = v16; v < V; v++) sum += gpt2rt__exp_fast(x[v] - mx);
        for (int j = 0; j < 16; j += 2) sum += ls[j] + ls[j + 1];
        lse[i] = mx + logf(sum);
        losses[i] = targets[i] >= 0 ? lse[i] - x[targets[i]] : 0.0f;
    }
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < BT; i++)
        if (targets[i] >= 0) { total += losses[i]; n++; }
    *count = n;
    *sum = total;
    return n ? (float)(total / (double)n) : 0.0f;
}

/* logits (BT,Vp) become dlogits in place: (softmax - onehot) * dloss; padded
   columns and ignored rows get 0 */
static void gpt2rt__cpu_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                                          float dloss, int64_t BT, int64_t V, int64_t Vp, int nt) {
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_MATH * (double)(BT * V));
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        float *x = logits + i * Vp;
        if (targets[i] < 0) { memset(x, 0, (size_t)Vp * sizeof(float)); continue; }
        float l = lse[i];
        for (int64_t v = 0; v < V; v++) x[v] = gpt2rt__exp_fast(x[v] - l) * dloss;
        x[targets[i]] -= dloss;
        for (int64_t v = V; v < Vp; v++) x[v] = 0.0f;
    }
}

#endif /* GPT2RT__SRC_CPU_OPS_H */
