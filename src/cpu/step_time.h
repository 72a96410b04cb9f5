/* cpu/step_time.h - 3.3b The CPU backend's step-time model, calibrated on this machine
   may call: cpu/matmul.h, plan/plan.h and what they include */
#ifndef GPT2RT__SRC_CPU_STEP_TIME_H
#define GPT2RT__SRC_CPU_STEP_TIME_H
#include "matmul.h"
#include "../plan/plan.h"

/* ==== 3.3b CPU step time ==== */

/* The calibration: the library's own fp32 matrix product (gpt2rt__sgemm) timed at the
   shape of the config's largest product, the MLP's (tokens of a micro-batch, C) x (C, 4C)
   (the reference shape 1024 x 768 x 3072 without a config), the classifier's (tokens, C) x
   (C, Vp) over at most 8192 of the Vp columns (its rate holds beyond: the columns are
   independent), and a streaming add over
   48 MiB for the memory rate. Each the best of five wall-clock timings of at least
   ~10 ms: on a shared machine the best is the one the neighbours disturbed least. */
static double gpt2rt__cal_gemm(const float *A, const float *B, float *C, void *ws, int64_t M, int64_t K, int64_t N,
                               int nt) {
    double best = 1e30, f = 2.0 * (double)M * (double)N * (double)K;
    int reps = f >= 2e8 ? 1 : (int)(2e8 / f) + 1;
    for (int r = 0; r < 5; r++) {
        double t0 = gpt2rt__now();
        for (int i = 0; i < reps; i++) gpt2rt__sgemm(0, 1, M, N, K, A, K, B, K, NULL, 0, C, N, ws, nt);
        double dt = gpt2rt__now() - t0;
        if (dt < best) best = dt;
    }
    return f * reps / (best > 1e-9 ? best : 1e-9);
}

static double gpt2rt__cal_stream(float *x, const float *y, int64_t n, int nt) {
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = gpt2rt__now();
        GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(nt, GPT2RT__CPU_W_ADD * (double)n)) /* as the ops choose */
        for (int64_t i = 0; i < n; i++) x[i] = x[i] * 0.5f + y[i];
        double dt = gpt2rt__now() - t0;
        if (dt < best) best = dt;
    }
    return 12.0 * (double)n / (best > 1e-9 ? best : 1e-9); /* x read and written, y read */
}

/* the best of 3 wall-clock timings of one call */
#define GPT2RT__CAL_BEST(best, call) do { \
        (best) = 1e30; \
        for (int r_ = 0; r_ < 3; r_++) { \
            double t0_ = gpt2rt__now(); \
            call; \
            double dt_ = gpt2rt__now() - t0_; \
            if (dt_ < (best)) (best) = dt_; \
        } \
    } while (0)

/* The ops between the products, each timed at the config's shape on at most 1024 rows
   (B' = 1024 / T sequences, at least 1) and scaled to the micro-batch's rows: their
   work is per row (attention per sequence), so the scale is exact up to the thread
   choice. One layer's two LayerNorms and GELU; its attention and two residual adds;
   the cross-entropy over (at most 256 rows, Vp) (no classifier: 0). */
static gpt2rt_result gpt2rt__cal_ops(const gpt2rt__dims *d, int nt, gpt2rt_cpu_speed *s) {
    int64_t T = d->T, C = d->C, NH = d->NH, Bc = 1024 / T > 0 ? 1024 / T : 1;
    if (Bc > d->B) Bc = d->B;
    int64_t rows = Bc * T, Vp = d->patches ? 0 : d->Vp, V = d->patches ? 0 : d->V, Tp = gpt2rt__pad16(2 * T);
    int64_t ce_rows = rows < 256 ? rows : 256;
    /* GELU in and out (rows, 4C); qkv (rows, 3C); x, y (rows, C); lse (Bc, NH, T); the
       LayerNorm's mean and rstd (rows each); the attention's scratch; logits (rows, Vp),
       the cross-entropy's losses and lse (rows each) */
    size_t n_g = (size_t)(rows * 4 * C), n_qkv = (size_t)(rows * 3 * C), n_x = (size_t)(rows * C);
    size_t n_lse = (size_t)(rows * NH), n_sc = (size_t)nt * (size_t)Tp, n_lg = (size_t)(ce_rows * Vp), r = (size_t)rows;
    size_t n = 2 * n_g + n_qkv + 2 * n_x + n_lse + 2 * r + n_sc + n_lg + 2 * r;
    float *buf = (float *)gpt2rt__default_alloc(NULL, n * sizeof(float) + r * sizeof(int32_t), GPT2RT_MEM_BOOKKEEPING);
    if (!buf) return GPT2RT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    float *g_in = buf, *g_out = g_in + n_g, *qkv = g_out + n_g, *x = qkv + n_qkv, *y = x + n_x, *lse = y + n_x;
    float *mean = lse + n_lse, *rstd = mean + r, *scratch = rstd + r, *logits = scratch + n_sc;
    float *losses = logits + n_lg, *lse_ce = losses + r;
    int32_t *tgt = (int32_t *)(void *)(buf + n);
    for (int64_t i = 0; i < rows; i++) tgt[i] = V > 0 ? (int32_t)(i % V) : 0;
    gpt2rt__drop none;
    memset(&none, 0, sizeof none);
    double scale = (double)d->BT / (double)rows, t_ln, t_gelu, t_att, t_res, t_ce = 0.0;
    GPT2RT__CAL_BEST(t_ln, gpt2rt__cpu_layernorm_forward(y, mean, rstd, x, qkv, qkv + C, rows, C, nt)); /* w, b: any C floats */
    GPT2RT__CAL_BEST(t_gelu, gpt2rt__cpu_gelu_forward(g_out, g_in, rows * 4 * C, nt));
    GPT2RT__CAL_BEST(t_att, gpt2rt__cpu_attention_forward_masked(y, lse, qkv, scratch, Bc, T, C, NH, d->TH, &none, nt));
    GPT2RT__CAL_BEST(t_res, gpt2rt__cpu_residual_add(y, x, rows * C, nt));
    if (Vp > 0) {
        int64_t count = 0;
        double sum = 0.0;
        GPT2RT__CAL_BEST(t_ce, (void)gpt2rt__cpu_crossentropy_forward(losses, lse_ce, logits, tgt, ce_rows, V, Vp,
                                                                       &count, &sum, nt));
    }
    s->layer_norm_gelu = scale * (2.0 * t_ln + t_gelu);
    s->layer_attention = scale * (t_att + 2.0 * t_res);
    s->cross_entropy = (double)d->BT / (double)ce_rows * t_ce;
    gpt2rt__default_free(NULL, buf, GPT2RT_MEM_BOOKKEEPING);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_calibrate(int nt, int64_t M, int64_t K, int64_t N, int64_t NH, const gpt2rt__dims *d,
                                           gpt2rt_cpu_speed *s) {
    const int64_t n_stream = (int64_t)6 << 20; /* 2 x 24 MiB: past the caches */
    int64_t NB = NH > N ? NH : N;
    size_t fa = (size_t)(M * K), fb = (size_t)(NB * K), fc = (size_t)(M * NB), fs = (size_t)n_stream;
    size_t wsb = gpt2rt__sgemm_workspace_bytes(nt), need = fa + fb + fc > 2 * fs ? fa + fb + fc : 2 * fs;
    float *buf = (float *)gpt2rt__default_alloc(NULL, need * sizeof(float) + wsb, GPT2RT_MEM_BOOKKEEPING);
    if (!buf) return GPT2RT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < need; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    double t0 = gpt2rt__now();
    s->matmul_peak = gpt2rt__cal_gemm(buf, buf + fa, buf + fa + fb, buf + need, M, K, N, nt);
    s->half_rows = 0.0; /* measured at the config's own rows */
    s->head_peak = NH > 0 ? gpt2rt__cal_gemm(buf, buf + fa, buf + fa + fb, buf + need, M, K, NH, nt) : s->matmul_peak;
    s->mem_bw = gpt2rt__cal_stream(buf, buf + fs, n_stream, nt);
    s->n_threads = nt;
    gpt2rt__default_free(NULL, buf, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt_result r = d ? gpt2rt__cal_ops(d, nt, s) : GPT2RT_OK;
    s->seconds = gpt2rt__now() - t0;
    return r;
}

/* The model of one CPU micro-batch beyond the GPU model's FLOPs: the ops between the
   products at their measured forward times (gpt2rt__cal_ops), each backward twice its
   forward, FULL recompute running the forward of the layers between checkpoints again
   and SELECTIVE the LayerNorms and GELU; the cross-entropy three times its forward
   (the max, the exponentials, the gradient). Without those measurements (a speed given
   by hand) each micro-batch moves its activations GPT2RT__CPU_PASSES times at memory
   speed (written by the forward, read by the backward, their gradients written and
   read) and the logits three times. A chunked classifier (classifier_chunk < tokens)
   runs the head's three products as tokens / classifier_chunk smaller ones: each at
   the rate of its rows, and each further chunk reads and writes wte's gradient once
   more (the GPU model's count, gpt2rt__head_chunk_extra) and reads wte twice more, by
   the forward and d(lnf) products (on the CPU nothing hides that read). */
#define GPT2RT__CPU_PASSES 4.0
static double gpt2rt__cpu_micro(const gpt2rt_config *c, const gpt2rt__dims *d, const gpt2rt_cpu_speed *s,
                                double *flops) {
    gpt2rt__span whole = gpt2rt__span_of(c, 0);
    double owned, peak = s->matmul_peak, half = s->half_rows, bw = s->mem_bw, tok = (double)d->BT;
    /* the GPU model's FLOPs and selective-recompute bytes, at this machine's rates; the
       classifier's product at its own rate (its Vp columns run faster than the layers'
       4C when the micro-batch is small) */
    double t = gpt2rt__predict_micro(c, d, whole, peak, bw, half, 0.0, flops, &owned);
    if (!d->patches && s->head_peak > 0) {
        double f_head = tok * 6.0 * (double)d->Vp * d->C, eff = tok / (tok + half);
        if (c->frozen & GPT2RT_GROUP_TOKEN_EMBED) f_head -= tok * 2.0 * (double)d->Vp * d->C;
        if (d->infer) f_head /= 3.0;
        t += f_head / (s->head_peak * eff) - f_head / (peak * eff);
    }
    gpt2rt_config pc = *c; /* the activations every layer makes, kept or not */
    pc.recompute = GPT2RT_RECOMPUTE_NONE;
    pc.checkpoint_every = 0;
    gpt2rt__dims plain = gpt2rt__dims_of(&pc);
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__layout(&plain, &whole, b, NULL);
    double head_rows = d->patches ? 0.0 : tok;
    int ops = s->layer_norm_gelu > 0 || s->layer_attention > 0 || s->cross_entropy > 0, nl = d->L;
    if (ops) { /* each op's forward as measured, its backward twice that; recompute runs forwards again */
        double fwd = s->layer_norm_gelu + s->layer_attention;
        t += (d->infer ? 1.0 : 3.0) * nl * fwd;
        if (d->recompute == GPT2RT_RECOMPUTE_FULL)
            t += (nl - (d->checkpoint_every < nl ? d->checkpoint_every : nl)) * fwd;
        if (d->recompute == GPT2RT_RECOMPUTE_SELECTIVE) t += nl * s->layer_norm_gelu;
    } else
        t += GPT2RT__CPU_PASSES * (double)b[GPT2RT_MEM_ACTIVATIONS] / bw;
    if (head_rows > 0 && !d->infer) {
        double vc = (double)d->Vp * d->C, hc = (double)d->classifier_chunk;
        t += ops ? 3.0 * s->cross_entropy : 3.0 * 4.0 * tok * (double)d->Vp / bw;
        if (hc < tok) {
            double chunks = ceil(tok / hc), f_head = 6.0 * tok * vc;
            t += f_head / peak * ((hc + half) / hc - (tok + half) / tok); /* rows hc, not tok */
            t += (chunks - 1.0) * 2.0 * vc * 4.0 / bw; /* wte's re-reads; its gradient's is in t already */
        }
    }
    return t;
}

/* one optimizer step of a CPU config on speed s */
static void gpt2rt__cpu_step_time(const gpt2rt_config *c, const gpt2rt_cpu_speed *s, gpt2rt_step_time *st) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    double f, owned = 0.0;
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__span whole = gpt2rt__span_of(c, 0);
    gpt2rt__layout(&d, &whole, b, NULL);
    owned = (double)b[GPT2RT_MEM_GRADS] / 4;
    memset(st, 0, sizeof *st);
    st->compute = c->grad_accum * gpt2rt__cpu_micro(c, &d, s, &f);
    st->update = owned * (32.0 + d.weight_bytes) / s->mem_bw; /* AdamW: p, g, m, v in and out */
    st->total = st->compute + st->update;
    st->one_device = st->total;
}

/* the calibrations of this process, by thread count and shape: later calls copy them */
typedef struct gpt2rt__cpu_cal { int64_t M, K, N, NH, T, heads; gpt2rt_cpu_speed s; } gpt2rt__cpu_cal;
static gpt2rt__cpu_cal gpt2rt__cpu_cals[8];

GPT2RT_DEF gpt2rt_result gpt2rt_cpu_speed_measure(const gpt2rt_config *config, int fresh, gpt2rt_cpu_speed *out) {
    gpt2rt_config c;
    char why[512];
    int64_t M = 1024, K = 768, N = 3072, NH = 8192, T = 0, heads = 0;
    gpt2rt__dims d;
    const gpt2rt__dims *dp = NULL;
    int nt = gpt2rt__default_threads();
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (config) {
        gpt2rt_result r = gpt2rt__cfg_resolve(config, &c, why, sizeof why);
        if (r != GPT2RT_OK) return r;
        d = gpt2rt__dims_of(&c);
        M = d.BT; K = d.C; N = 4 * d.C; nt = c.n_threads;
        NH = d.patches ? 0 : d.Vp < 8192 ? d.Vp : 8192;
        T = d.T; heads = d.NH; dp = &d;
    }
    if (nt < 1) nt = 1;
    gpt2rt__threads_measure(nt);
    int slot = 0;
    for (int i = 0; i < 8; i++) {
        gpt2rt__cpu_cal *e = &gpt2rt__cpu_cals[i];
        if (e->s.n_threads == nt && e->M == M && e->K == K && e->N == N && e->NH == NH && e->T == T && e->heads == heads) {
            if (!fresh) { *out = e->s; out->seconds = 0.0; return GPT2RT_OK; }
            slot = i;
            break;
        }
        if (!e->s.n_threads) { slot = i; break; }
        slot = (i + 1) % 8; /* full: the oldest goes (roughly) */
    }
    gpt2rt_result r = gpt2rt__cpu_calibrate(nt, M, K, N, NH, dp, out);
    if (r == GPT2RT_OK) {
        gpt2rt__cpu_cals[slot].M = M; gpt2rt__cpu_cals[slot].K = K; gpt2rt__cpu_cals[slot].N = N;
        gpt2rt__cpu_cals[slot].NH = NH; gpt2rt__cpu_cals[slot].T = T; gpt2rt__cpu_cals[slot].heads = heads;
        gpt2rt__cpu_cals[slot].s = *out;
    }
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_cpu_time(const gpt2rt_config *config, const gpt2rt_cpu_speed *speed,
                                              gpt2rt_step_time *out, char *err, size_t cap) {
    gpt2rt_config c;
    char why[512];
    gpt2rt_cpu_speed own;
    if (!config || !out) {
        if (err && cap) snprintf(err, cap, "gpt2rt_plan_cpu_time: config and out must not be NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &c, why, sizeof why);
    if (r == GPT2RT_OK && c.backend != GPT2RT_BACKEND_CPU) {
        snprintf(why, sizeof why, "gpt2rt_plan_cpu_time: backend is CUDA; the CPU model is of the CPU backend "
                 "(gpt2rt_plan_step_time models GPUs)");
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r == GPT2RT_OK && c.n_devices > 1) {
        snprintf(why, sizeof why, "gpt2rt_plan_cpu_time: n_devices = %d; the CPU model is of one process on one "
                 "device", c.n_devices);
        r = GPT2RT_ERR_NOT_IMPLEMENTED;
    }
    if (r == GPT2RT_OK && !speed) {
        r = gpt2rt_cpu_speed_measure(&c, 0, &own);
        if (r != GPT2RT_OK) snprintf(why, sizeof why, "gpt2rt_plan_cpu_time: no memory for the calibration's buffers");
        speed = &own;
    }
    if (r == GPT2RT_OK && !(speed->matmul_peak > 0 && speed->mem_bw > 0 && speed->half_rows >= 0)) {
        snprintf(why, sizeof why, "gpt2rt_plan_cpu_time: the speed's figures must be > 0 (matrix products %g FLOP/s, "
                 "half at %g rows, memory %g bytes/s)", speed->matmul_peak, speed->half_rows, speed->mem_bw);
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r != GPT2RT_OK) {
        if (err && cap) snprintf(err, cap, "%s", why);
        return r;
    }
    gpt2rt__cpu_step_time(&c, speed, out);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_CPU_STEP_TIME_H */
