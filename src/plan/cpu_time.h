/* plan/cpu_time.h - 3.3b The CPU backend's step-time model, calibrated on this machine
   may call: cpu/matmul.h, plan/plan.h and what they include */
#ifndef GPT2RT__SRC_PLAN_CPU_TIME_H
#define GPT2RT__SRC_PLAN_CPU_TIME_H
#include "../cpu/matmul.h"
#include "plan.h"

/* ==== 3.3b CPU step time ==== */

/* The calibration: the library's own fp32 matrix product (gpt2rt__sgemm) timed at two
   row counts, which gives its peak and the rows at which it reaches half of it
   (rate(M) = peak M / (M + half), two equations, two unknowns), and a streaming add
   over 48 MiB for the memory rate. Each is timed by the processor time it used over
   its threads (clock), the best of three: on a machine shared with other programs the
   wall time also holds their turns, the processor time only its own work, which is
   what the model predicts (on an idle machine the two agree). About 0.1-0.3 s on 2 cores. */
static double gpt2rt__cal_clock(int nt) { return (double)clock() / CLOCKS_PER_SEC / nt; }

#define GPT2RT__CAL_N 768
#define GPT2RT__CAL_K 768
static double gpt2rt__cal_gemm(float *A, float *B, float *C, void *ws, int64_t M, int nt) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = gpt2rt__cal_clock(nt);
        gpt2rt__sgemm(0, 1, M, GPT2RT__CAL_N, GPT2RT__CAL_K, A, GPT2RT__CAL_K, B, GPT2RT__CAL_K, NULL, 0, C,
                      GPT2RT__CAL_N, ws, nt);
        double dt = gpt2rt__cal_clock(nt) - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)M * GPT2RT__CAL_N * GPT2RT__CAL_K / (best > 1e-9 ? best : 1e-9);
}

static double gpt2rt__cal_stream(float *x, const float *y, int64_t n, int nt) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = gpt2rt__cal_clock(nt);
        GPT2RT__PARALLEL_FOR(nt)
        for (int64_t i = 0; i < n; i++) x[i] = x[i] * 0.5f + y[i];
        double dt = gpt2rt__cal_clock(nt) - t0;
        if (dt < best) best = dt;
    }
    return 12.0 * (double)n / (best > 1e-9 ? best : 1e-9); /* x read and written, y read */
}

static gpt2rt_result gpt2rt__cpu_calibrate(int nt, gpt2rt_cpu_speed *s) {
    const int64_t m_big = 1024, m_small = 32, n_stream = (int64_t)6 << 20; /* 2 x 24 MiB: past the caches */
    size_t fa = (size_t)(m_big * GPT2RT__CAL_K), fb = (size_t)GPT2RT__CAL_N * GPT2RT__CAL_K,
           fc = (size_t)(m_big * GPT2RT__CAL_N), fs = (size_t)n_stream;
    size_t wsb = gpt2rt__sgemm_workspace_bytes(nt);
    float *buf = (float *)gpt2rt__default_alloc(NULL, (fa + fb + fc + 2 * fs) * sizeof(float) + wsb,
                                                GPT2RT_MEM_BOOKKEEPING);
    if (!buf) return GPT2RT_ERR_OUT_OF_MEMORY;
    float *A = buf, *B = A + fa, *C = B + fb, *x = C + fc, *y = x + fs;
    for (size_t i = 0; i < fa + fb; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    for (size_t i = 0; i < 2 * fs; i++) x[i] = 1.0f;
    memset(C, 0, fc * sizeof(float));
    double t0 = gpt2rt__now();
    double big = gpt2rt__cal_gemm(A, B, C, y + fs, m_big, nt), small = gpt2rt__cal_gemm(A, B, C, y + fs, m_small, nt);
    /* big = P Mb/(Mb+h), small = P Ms/(Ms+h): h from their ratio; a rate that does not
       grow with M (noise) gives h = 0, the peak then being the faster of the two */
    double r = big / small, h = 0.0;
    if (r > 1.0) h = (double)m_small * m_big * (r - 1.0) / ((double)m_big - r * m_small);
    if (!(h >= 0.0) || h > 1e5) h = 0.0;
    s->matmul_peak = h > 0.0 ? big * (m_big + h) / m_big : (big > small ? big : small);
    s->half_rows = h;
    s->mem_bw = gpt2rt__cal_stream(x, y, n_stream, nt);
    s->n_threads = nt;
    s->seconds = gpt2rt__now() - t0;
    gpt2rt__default_free(NULL, buf, GPT2RT_MEM_BOOKKEEPING);
    return GPT2RT_OK;
}

/* The model of one CPU micro-batch beyond the GPU model's FLOPs: the CPU runs every
   element-wise op (layernorm, GELU, softmax, residual adds, their backward) at memory
   speed, so each micro-batch moves its activations about GPT2RT__CPU_PASSES times
   (written by the forward, read by the backward, their gradients written and read),
   and the cross-entropy passes over the (tokens, Vp) logits three times (the max, the
   exponentials, the gradient). A chunked classifier (classifier_chunk = hc < tokens)
   runs the head's three products as tokens / hc smaller ones: each at the rate of hc
   rows, and each further chunk reads wte twice more and its gradient once more,
   read and written. */
#define GPT2RT__CPU_PASSES 4.0
static double gpt2rt__cpu_micro(const gpt2rt_config *c, const gpt2rt__dims *d, const gpt2rt_cpu_speed *s,
                                double *flops) {
    gpt2rt__span whole = gpt2rt__span_of(c, 0);
    double owned, peak = s->matmul_peak, half = s->half_rows, bw = s->mem_bw, tok = (double)d->BT;
    /* the GPU model's FLOPs and selective-recompute bytes, at this machine's rates */
    double t = gpt2rt__predict_micro(c, d, whole, peak, bw, half, 0.0, flops, &owned);
    gpt2rt_config pc = *c; /* the activations every layer makes, kept or not */
    pc.recompute = GPT2RT_RECOMPUTE_NONE;
    pc.checkpoint_every = 0;
    gpt2rt__dims plain = gpt2rt__dims_of(&pc);
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__layout(&plain, &whole, b, NULL);
    double head_rows = d->patches ? 0.0 : tok;
    t += GPT2RT__CPU_PASSES * (double)b[GPT2RT_MEM_ACTIVATIONS] / bw;
    if (head_rows > 0 && !d->infer) {
        double vc = (double)d->Vp * d->C, hc = (double)d->hc;
        t += 3.0 * 4.0 * tok * (double)d->Vp / bw;
        if (hc < tok) {
            double chunks = ceil(tok / hc), f_head = 6.0 * tok * vc;
            t += f_head / peak * ((hc + half) / hc - (tok + half) / tok); /* rows hc, not tok */
            t += (chunks - 1.0) * 4.0 * vc * 4.0 / bw;
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
    st->update = owned * (32.0 + d.wb) / s->mem_bw; /* AdamW: p, g, m, v in and out */
    st->total = st->compute + st->update;
    st->one_device = st->total;
}

/* the calibration, once per process and thread count: later calls copy it */
static gpt2rt_cpu_speed gpt2rt__cpu_speed_cache;

GPT2RT_DEF gpt2rt_result gpt2rt_cpu_speed_measure(int n_threads, int fresh, gpt2rt_cpu_speed *out) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (n_threads <= 0) n_threads = gpt2rt__default_threads();
    if (n_threads < 1) n_threads = 1;
    if (!fresh && gpt2rt__cpu_speed_cache.n_threads == n_threads) {
        *out = gpt2rt__cpu_speed_cache;
        out->seconds = 0.0;
        return GPT2RT_OK;
    }
    gpt2rt_result r = gpt2rt__cpu_calibrate(n_threads, out);
    if (r == GPT2RT_OK) gpt2rt__cpu_speed_cache = *out;
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
        r = gpt2rt_cpu_speed_measure(c.n_threads, 0, &own);
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

#endif /* GPT2RT__SRC_PLAN_CPU_TIME_H */
