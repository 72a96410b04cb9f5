/* kernels/matmul.cu - lab for the cuBLASLt matrix products (gpt2rt.h, section 8.4 Matrix products).
 *
 * Build (from kernels/):
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
 *        -o /tmp/lab_matmul matmul.cu -lcublasLt
 * Run:
 *   /tmp/lab_matmul          validation + determinism + timing (BT=8192, GPT-2 124M shapes)
 *   /tmp/lab_matmul quick    validation + determinism only
 * Exit status 0 iff every check passed (one PASS/FAIL line per check, summary last).
 *
 * Validation (BT=512, C=768 and an odd small shape), for fp32, tf32, bf16, fp16, fused
 * (cuBLASLt epilogues) and unfused (blas.fuse = 0: the fallback kernels):
 *   forward      out = inp W^T (+bias) against gpt2rt__sgemm on the same rounded inputs;
 *                GELU_AUX_BIAS: aux against the product, out against gelu_tanh(aux);
 *                for fp32/tf32 also "is the epilogue's GELU the tanh form, not erf".
 *   backward in  dinp = dout W, and with DGELU: (dout W) * gelu'(aux).
 *   backward w   dW = dW0 + dout^T inp (accumulate), db = db0 + column sums (BGRADB via
 *                scratch), and the accumulate = 0 (overwrite) form.
 *   each result is also computed twice and compared bit for bit.
 * Tolerances: |got - want| <= tol * (max|want| + |want|): fp32 1e-5, tf32 2e-3,
 * bf16/fp16 outputs 1e-2; fp32 weight/bias gradients from 16-bit inputs 2e-4 (the
 * inputs are exact in fp32, only accumulation order differs); fused GELU/dGELU
 * evaluation in fp32/tf32 2e-3 (cuBLASLt may use a fast tanh).
 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

#define LAB_BLAS(call) do { int s_ = (call); if (s_ != 0) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, lab_err); exit(2); } } while (0)
static char lab_err[512];
#define ERRBUF lab_err, sizeof(lab_err)

/* one storage mode of the lab */
struct lab_mode { const char *name; cudaDataType_t t; int tf32; float tol; float tol_grad; float tol_gelu; };

static double gelu_tanh_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_erf_d(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double dgelu_tanh_d(double x) {
    double k = 0.7978845608028654, th = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static float *hmalloc(size_t n) {
    float *p = (float *)malloc(n * sizeof(float) + 64);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(2); }
    return p;
}
static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}
/* lab_compare with atol = tol * max|want| */
static int cmp(const char *what, const float *got, const float *want, size_t n, float tol) {
    return lab_compare(what, got, want, n, tol * max_abs(want, n), tol);
}

/* CPU reference products (fp32, row-major) through the header's gpt2rt__sgemm */
static void *sg_ws;
static void ref_fwd(float *out, const float *inp, const float *w, const float *bias, int64_t BT, int64_t IC, int64_t OC) {
    gpt2rt__sgemm(0, 1, BT, OC, IC, inp, IC, w, IC, bias, 0, out, OC, sg_ws, 1);
}
static void ref_bwd_in(float *dinp, const float *dout, const float *w, int64_t BT, int64_t IC, int64_t OC) {
    gpt2rt__sgemm(0, 0, BT, IC, OC, dout, OC, w, IC, NULL, 0, dinp, IC, sg_ws, 1);
}
static void ref_bwd_w(float *dw, float *db, const float *dout, const float *inp, int64_t BT, int64_t IC, int64_t OC, int acc) {
    gpt2rt__sgemm(1, 0, OC, IC, BT, dout, OC, inp, IC, NULL, acc, dw, IC, sg_ws, 1);
    if (db)
        for (int64_t o = 0; o < OC; o++) {
            double s = 0.0;
            for (int64_t r = 0; r < BT; r++) s += dout[r * OC + o];
            db[o] = (float)(acc ? db[o] + s : s);
        }
}

/* random host data rounded to T, and its device copy */
template <typename T> struct lab_buf {
    float *h = nullptr; T *d = nullptr; size_t n = 0; /* zero: g++ cannot see that release() follows init() */
    void init(size_t n_, float scale) {
        n = n_; h = hmalloc(n);
        lab_fill(h, n, scale);
        d = lab_upload<T>(h, n);
        lab_download<T>(h, d, n); /* h = exactly what the device holds */
    }
    void zeros(size_t n_) {
        n = n_; h = hmalloc(n);
        memset(h, 0, n * sizeof(float));
        LAB_CK(cudaMalloc(&d, n * sizeof(T) + 256));
        LAB_CK(cudaMemset(d, 0, n * sizeof(T)));
    }
    void get(float *dst) { lab_download<T>(dst, d, n); }
    void release() { free(h); LAB_CK(cudaFree(d)); }
};

static void label(char *buf, size_t cap, const lab_mode &m, int fuse, const char *what) {
    snprintf(buf, cap, "%s%s %s", m.name, fuse ? "" : "/unfused", what);
}

/* ---------------------------------------------------------------- validation */
template <typename T>
static void check_forward(gpt2rt__cu_blas *b, const lab_mode &m, int64_t BT, int64_t IC, int64_t OC, int use_bias, int gelu) {
    char name[160];
    size_t no = (size_t)(BT * OC);
    lab_buf<T> inp, w, bias, out, out2, aux, aux2;
    float wscale = 3.0f / sqrtf((float)IC); /* products of order 1 so GELU is exercised */
    inp.init((size_t)(BT * IC), 1.0f);
    w.init((size_t)(OC * IC), wscale);
    if (use_bias) bias.init((size_t)OC, 0.5f);
    out.zeros(no); out2.zeros(no);
    if (gelu) { aux.zeros(no); aux2.zeros(no); }
    float *ref = hmalloc(no), *got = hmalloc(no), *gaux = hmalloc(no);
    ref_fwd(ref, inp.h, w.h, use_bias ? bias.h : NULL, BT, IC, OC);

    LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out.d, gelu ? aux.d : NULL, inp.d, w.d, use_bias ? bias.d : NULL, BT, IC, OC, ERRBUF));
    LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out2.d, gelu ? aux2.d : NULL, inp.d, w.d, use_bias ? bias.d : NULL, BT, IC, OC, ERRBUF));
    LAB_CK(cudaDeviceSynchronize());
    char what[96];
    snprintf(what, sizeof(what), "fwd %lldx%lld->%lld%s%s", (long long)BT, (long long)IC, (long long)OC,
             use_bias ? " +bias" : "", gelu ? " +gelu" : "");
    if (!gelu) {
        out.get(got);
        label(name, sizeof(name), m, b->fuse, what); cmp(name, got, ref, no, m.tol);
    } else {
        aux.get(gaux);
        snprintf(name, sizeof(name), "%s%s %s: aux (pre-gelu)", m.name, b->fuse ? "" : "/unfused", what);
        cmp(name, gaux, ref, no, m.tol);
        out.get(got);
        /* the GELU evaluation itself, on the aux the device produced */
        float *gref = hmalloc(no);
        /* which GELU: among elements where the tanh and erf forms differ by > 2e-4,
           count those closer to the tanh form; most must be (cuBLASLt may use a fast tanh) */
        size_t n_disc = 0, n_tanh = 0;
        for (size_t i = 0; i < no; i++) {
            double gt = gelu_tanh_d(gaux[i]), ge = gelu_erf_d(gaux[i]);
            gref[i] = (float)gt;
            if (fabs(gt - ge) > 2e-4) {
                n_disc++;
                n_tanh += fabs(got[i] - gt) < fabs(got[i] - ge);
            }
        }
        snprintf(name, sizeof(name), "%s%s %s: out = gelu(aux)", m.name, b->fuse ? "" : "/unfused", what);
        float tg = (m.t == CUDA_R_32F && b->fuse) ? m.tol_gelu : m.tol;
        cmp(name, got, gref, no, tg);
        if (m.t == CUDA_R_32F) {
            int ok = n_disc > 0 && 2 * n_tanh > n_disc;
            printf("  %-40s %zu of %zu discriminating elements closer to tanh-GELU than erf-GELU  %s\n",
                   "  GELU form is tanh:", n_tanh, n_disc, ok ? "PASS" : "FAIL");
            if (!ok) lab_failures++;
        }
        free(gref);
        snprintf(name, sizeof(name), "%s%s %s aux", m.name, b->fuse ? "" : "/unfused", what);
        lab_same_bits(name, aux.d, aux2.d, no * sizeof(T));
    }
    snprintf(name, sizeof(name), "%s%s %s", m.name, b->fuse ? "" : "/unfused", what);
    lab_same_bits(name, out.d, out2.d, no * sizeof(T));
    free(ref); free(got); free(gaux);
    inp.release(); w.release(); out.release(); out2.release();
    if (use_bias) bias.release();
    if (gelu) { aux.release(); aux2.release(); }
}

template <typename T>
static void check_backward_input(gpt2rt__cu_blas *b, const lab_mode &m, int64_t BT, int64_t IC, int64_t OC, int dgelu) {
    char name[160], what[96];
    size_t ni = (size_t)(BT * IC);
    lab_buf<T> dout, w, aux, dinp, dinp2;
    dout.init((size_t)(BT * OC), 1.0f);
    w.init((size_t)(OC * IC), 3.0f / sqrtf((float)OC));
    if (dgelu) aux.init(ni, 3.0f);
    dinp.zeros(ni); dinp2.zeros(ni);
    float *ref = hmalloc(ni), *got = hmalloc(ni);
    ref_bwd_in(ref, dout.h, w.h, BT, IC, OC);
    if (dgelu)
        for (size_t i = 0; i < ni; i++) ref[i] = (float)(dgelu_tanh_d(aux.h[i]) * (double)ref[i]);
    LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, dinp.d, dout.d, w.d, dgelu ? aux.d : NULL, BT, IC, OC, ERRBUF));
    LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, dinp2.d, dout.d, w.d, dgelu ? aux.d : NULL, BT, IC, OC, ERRBUF));
    LAB_CK(cudaDeviceSynchronize());
    dinp.get(got);
    snprintf(what, sizeof(what), "bwd_in %lldx%lld<-%lld%s", (long long)BT, (long long)IC, (long long)OC, dgelu ? " +dgelu" : "");
    label(name, sizeof(name), m, b->fuse, what);
    float tg = (dgelu && m.t == CUDA_R_32F) ? (b->fuse ? m.tol_gelu : 2.0f * m.tol) : m.tol;
    cmp(name, got, ref, ni, tg);
    lab_same_bits(name, dinp.d, dinp2.d, ni * sizeof(T));
    free(ref); free(got);
    dout.release(); w.release(); dinp.release(); dinp2.release();
    if (dgelu) aux.release();
}

template <typename T>
static void check_backward_weight(gpt2rt__cu_blas *b, const lab_mode &m, int64_t BT, int64_t IC, int64_t OC, int use_bias, int acc) {
    char name[160], what[96];
    size_t nw = (size_t)(OC * IC);
    lab_buf<T> dout, inp;
    lab_buf<float> dw, dw2, db, db2, scratch;
    dout.init((size_t)(BT * OC), 1.0f);
    inp.init((size_t)(BT * IC), 1.0f);
    dw.init(nw, 4.0f);                     /* dW0, db0: something to accumulate onto */
    dw2.init(nw, 0.0f);
    LAB_CK(cudaMemcpy(dw2.d, dw.d, nw * sizeof(float), cudaMemcpyDeviceToDevice));
    if (use_bias) {
        db.init((size_t)OC, 4.0f);
        db2.init((size_t)OC, 0.0f);
        LAB_CK(cudaMemcpy(db2.d, db.d, OC * sizeof(float), cudaMemcpyDeviceToDevice));
        scratch.init((size_t)OC, 0.0f);
    }
    float *refw = hmalloc(nw), *refb = hmalloc((size_t)OC), *got = hmalloc(nw);
    memcpy(refw, dw.h, nw * sizeof(float));
    if (use_bias) memcpy(refb, db.h, OC * sizeof(float));
    ref_bwd_w(refw, use_bias ? refb : NULL, dout.h, inp.h, BT, IC, OC, acc);
    LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw.d, use_bias ? db.d : NULL, use_bias ? scratch.d : NULL,
                                               dout.d, inp.d, BT, IC, OC, acc, ERRBUF));
    LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw2.d, use_bias ? db2.d : NULL, use_bias ? scratch.d : NULL,
                                               dout.d, inp.d, BT, IC, OC, acc, ERRBUF));
    LAB_CK(cudaDeviceSynchronize());
    snprintf(what, sizeof(what), "bwd_w %lldx%lld<-%lld%s %s", (long long)OC, (long long)IC, (long long)BT,
             use_bias ? " +db" : "", acc ? "(+=)" : "(=)");
    float tg = m.t == CUDA_R_32F ? m.tol : m.tol_grad;
    dw.get(got);
    label(name, sizeof(name), m, b->fuse, what); cmp(name, got, refw, nw, tg);
    lab_same_bits(name, dw.d, dw2.d, nw * sizeof(float));
    if (use_bias) {
        db.get(got);
        snprintf(name, sizeof(name), "%s%s %s: db", m.name, b->fuse ? "" : "/unfused", what);
        cmp(name, got, refb, (size_t)OC, tg);
        lab_same_bits(name, db.d, db2.d, OC * sizeof(float));
        db.release(); db2.release(); scratch.release();
    }
    free(refw); free(refb); free(got);
    dout.release(); inp.release(); dw.release(); dw2.release();
}

static void print_fallbacks(const char *what, unsigned fb) {
    printf("  %s: fused epilogues unavailable (fallback kernels ran): %s%s%s%s\n", what, fb ? "" : "none",
           fb & GPT2RT__CU_MM_FB_GELU ? "GELU_AUX(_BIAS) " : "", fb & GPT2RT__CU_MM_FB_DGELU ? "DGELU " : "",
           fb & GPT2RT__CU_MM_FB_BGRAD ? "BGRADB " : "");
}

template <typename T>
static void validate(gpt2rt__cu_blas *b, const lab_mode &m) {
    b->tf32 = m.tf32;
    for (int fuse = 1; fuse >= 0; fuse--) {
        b->fuse = fuse ? GPT2RT__CU_MM_FUSE_ALL : 0u;
        b->fallbacks = 0;
        printf("[%s%s]\n", m.name, fuse ? " fused epilogues" : " unfused (fallback kernels)");
        const int64_t BT = 512, C = 768;
        if (fuse) {
            check_forward<T>(b, m, BT, C, 3 * C, 1, 0);          /* qkv */
            check_forward<T>(b, m, BT, C, 1000, 0, 0);           /* LM-head-like, no bias */
            check_backward_input<T>(b, m, BT, C, 3 * C, 0);      /* plain */
            check_backward_weight<T>(b, m, BT, C, 1000, 0, 1);   /* no bias (LM head) */
        }
        check_forward<T>(b, m, BT, C, 4 * C, 1, 1);              /* c_fc + GELU */
        check_forward<T>(b, m, BT, C, 4 * C, 0, 1);              /* GELU without bias */
        check_backward_input<T>(b, m, BT, 4 * C, C, 1);          /* c_proj dinp + dGELU */
        check_backward_weight<T>(b, m, BT, C, 4 * C, 1, 1);      /* c_fc dW += , db += */
        check_backward_weight<T>(b, m, BT, C, 4 * C, 1, 0);      /* dW = , db = */
        if (fuse) print_fallbacks(m.name, b->fallbacks);
        /* odd shapes: GELU aux ld 100 is not a multiple of 8 -> unfused path */
        check_forward<T>(b, m, 77, 96, 100, 1, 1);
        check_backward_input<T>(b, m, 77, 100, 96, 1);
        check_backward_weight<T>(b, m, 77, 96, 100, 1, 1);
    }
    b->fuse = GPT2RT__CU_MM_FUSE_DEFAULT;
}

/* ---------------------------------------------------------------- timing */
__global__ void lab_dev_fill_kernel(float *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
    }
}
template <typename T> __global__ void lab_dev_cast_kernel(T *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = gpt2rt__cu_to<T>(x[i]);
}
/* random device buffer of n T (via an fp32 staging buffer of >= n floats) */
template <typename T> static void dev_random(T *d, int64_t n, float *stage, uint32_t seed, float scale) {
    GPT2RT__LAUNCH(4096, 256, 0, 0, lab_dev_fill_kernel)(stage, n, seed, scale);
    GPT2RT__LAUNCH(4096, 256, 0, 0, lab_dev_cast_kernel<T>)(d, stage, n);
    LAB_CK(cudaGetLastError());
}
__global__ void lab_dev_diff_kernel(const uint32_t *a, const uint32_t *b, int64_t n, unsigned long long *count) {
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += a[i] != b[i];
    if (c) atomicAdd(count, c);
}
/* bitwise equality of two large device buffers, on the device */
static void dev_same_bits(const char *what, const void *a, const void *b, size_t bytes, unsigned long long *dcount) {
    unsigned long long c = 0;
    LAB_CK(cudaMemset(dcount, 0, sizeof(c)));
    GPT2RT__LAUNCH(4096, 256, 0, 0, lab_dev_diff_kernel)((const uint32_t *)a, (const uint32_t *)b, (int64_t)(bytes / 4), dcount);
    LAB_CK(cudaGetLastError());
    LAB_CK(cudaMemcpy(&c, dcount, sizeof(c), cudaMemcpyDeviceToHost));
    printf("  %-52s %s (%llu words differ)\n", what, c ? "differ: FAIL" : "bitwise equal: PASS", c);
    if (c) lab_failures++;
}

/* the algorithm cuBLASLt's heuristic gave each plan made since plan index first (the
   timings above used them): id, tile, stages, split-K, cluster shape, as cublasLt.h
   numbers them (the emulator's model has no such configuration: nothing printed) */
static void print_algos(gpt2rt__cu_blas *b, int first) {
#ifndef GPT2RT_CUDA_EMU
    for (int i = first < 0 ? 0 : first; i < b->n_plans; i++) {
        const gpt2rt__cu_mm_plan *p = &b->plans[i];
        int32_t id = -1;
        uint32_t tile = 0, stages = 0, splitk = 0, cluster = 0;
        size_t w = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
        printf("    algo: %s m=%lld n=%lld k=%lld epilogue=%s align=%u mask=%u: id=%d tile=%u stages=%u splitk=%u cluster=%u\n",
               gpt2rt__cu_mm_op_name(p->key.op), (long long)p->key.m, (long long)p->key.n, (long long)p->key.k,
               gpt2rt__cu_mm_epi_name(p->epilogue), p->key.align_abcd, p->key.reduction_mask, id, tile, stages, splitk,
               cluster);
    }
#else
    (void)b; (void)first;
#endif
}

struct lab_shape { const char *name; int64_t IC, OC; int bias, gelu_fwd, dgelu_bwd; };

template <typename T>
static void bench(gpt2rt__cu_blas *b, const lab_mode &m) {
    const int64_t BT = 8192, IC_MAX = 3072, OC_MAX = 50304;
    const lab_shape shapes[] = {
        {"qkv    768->2304", 768, 2304, 1, 0, 0},
        {"proj   768->768", 768, 768, 1, 0, 0},
        {"fc     768->3072", 768, 3072, 1, 1, 0},
        {"fcproj 3072->768", 3072, 768, 1, 0, 1},
        {"lmhead 768->50304", 768, 50304, 0, 0, 0},
    };
    size_t big = (size_t)BT * OC_MAX; /* largest activation (logits) */
    T *inp, *w, *out, *out2, *aux;
    float *dw, *dw2, *db, *scratch, *stage;
    unsigned long long *dcount;
    LAB_CK(cudaMalloc(&stage, big * sizeof(float)));
    LAB_CK(cudaMalloc(&inp, (size_t)BT * IC_MAX * sizeof(T)));
    LAB_CK(cudaMalloc(&w, (size_t)OC_MAX * 768 * sizeof(T))); /* >= every (OC,IC) here */
    LAB_CK(cudaMalloc(&out, big * sizeof(T)));
    LAB_CK(cudaMalloc(&out2, big * sizeof(T)));
    LAB_CK(cudaMalloc(&aux, (size_t)BT * IC_MAX * sizeof(T)));
    LAB_CK(cudaMalloc(&dw, (size_t)OC_MAX * 768 * sizeof(float)));
    LAB_CK(cudaMalloc(&dw2, (size_t)OC_MAX * 768 * sizeof(float)));
    LAB_CK(cudaMalloc(&db, OC_MAX * sizeof(float)));
    LAB_CK(cudaMalloc(&scratch, OC_MAX * sizeof(float)));
    LAB_CK(cudaMalloc(&dcount, sizeof(unsigned long long)));
    b->tf32 = m.tf32;
    b->fuse = GPT2RT__CU_MM_FUSE_DEFAULT;
    b->fallbacks = 0;
    printf("[%s timing, BT=%lld, TFLOP/s = 2*BT*IC*OC / time]\n", m.name, (long long)BT);
    printf("  %-18s %9s %9s %9s %9s %9s %9s\n", "shape", "fwd", "fwd+gelu", "bwd_in", "+dgelu", "bwd_w", "w:splitK");
    for (const lab_shape &s : shapes) {
        int64_t IC = s.IC, OC = s.OC;
        double flop = 2.0 * (double)BT * (double)IC * (double)OC;
        const int reps = OC > 10000 ? 10 : 30;
        dev_random<T>(inp, BT * IC, stage, 1u, 1.0f);
        dev_random<T>(w, OC * IC, stage, 2u, 3.0f / sqrtf((float)IC));
        dev_random<T>(out, BT * OC, stage, 3u, 1.0f);  /* used as dout in the backwards */
        dev_random<T>(aux, BT * IC, stage, 4u, 3.0f);  /* pre-gelu for the dgelu backward */
        LAB_CK(cudaMemset(dw, 0, (size_t)OC * IC * sizeof(float)));
        LAB_CK(cudaMemset(db, 0, OC * sizeof(float)));
        const void *bias = s.bias ? (const void *)inp : NULL; /* any OC-vector of T will do for timing */
        const int plans_before = b->n_plans;
        float t_fwd = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out2, NULL, inp, w, bias, BT, IC, OC, ERRBUF)); }, reps);
        float t_gelu = 0.0f, t_dgelu = 0.0f;
        if (s.gelu_fwd)
            t_gelu = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out2, aux, inp, w, bias, BT, IC, OC, ERRBUF)); }, reps);
        float t_bin = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, out2, out, w, NULL, BT, IC, OC, ERRBUF)); }, reps);
        if (s.dgelu_bwd)
            t_dgelu = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, out2, out, w, aux, BT, IC, OC, ERRBUF)); }, reps);
        b->reduction_mask_w = (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE;
        float t_bw = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw, s.bias ? db : NULL, scratch, out, inp, BT, IC, OC, 1, ERRBUF)); }, reps);
        b->reduction_mask_w = CUBLASLT_REDUCTION_SCHEME_MASK; /* split-K allowed */
        float t_bw_sk = lab_time_ms([&] { LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw, s.bias ? db : NULL, scratch, out, inp, BT, IC, OC, 1, ERRBUF)); }, reps);
        b->reduction_mask_w = GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT;
#define TF(ms) ((ms) > 0.0f ? flop / ((double)(ms) * 1e-3) / 1e12 : 0.0)
        printf("  %-18s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", s.name, TF(t_fwd), TF(t_gelu), TF(t_bin), TF(t_dgelu), TF(t_bw), TF(t_bw_sk));
#undef TF
        print_algos(b, plans_before);
        /* determinism at the full shape: each op twice */
        char name[128];
        LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out2, s.gelu_fwd ? aux : NULL, inp, w, bias, BT, IC, OC, ERRBUF));
        LAB_CK(cudaMemcpy(stage, out2, (size_t)BT * OC * sizeof(T), cudaMemcpyDeviceToDevice));
        LAB_BLAS(gpt2rt__cu_matmul_forward(b, m.t, out2, s.gelu_fwd ? aux : NULL, inp, w, bias, BT, IC, OC, ERRBUF));
        snprintf(name, sizeof(name), "%s %s fwd%s twice", m.name, s.name, s.gelu_fwd ? "+gelu" : "");
        dev_same_bits(name, stage, out2, (size_t)BT * OC * sizeof(T), dcount);
        if (s.gelu_fwd) dev_random<T>(aux, BT * IC, stage, 4u, 3.0f);
        LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, out2, out, w, s.dgelu_bwd ? aux : NULL, BT, IC, OC, ERRBUF));
        LAB_CK(cudaMemcpy(stage, out2, (size_t)BT * IC * sizeof(T), cudaMemcpyDeviceToDevice));
        LAB_BLAS(gpt2rt__cu_matmul_backward_input(b, m.t, out2, out, w, s.dgelu_bwd ? aux : NULL, BT, IC, OC, ERRBUF));
        snprintf(name, sizeof(name), "%s %s bwd_in%s twice", m.name, s.name, s.dgelu_bwd ? "+dgelu" : "");
        dev_same_bits(name, stage, out2, (size_t)BT * IC * sizeof(T), dcount);
        for (int sk = 0; sk < 2; sk++) {
            b->reduction_mask_w = sk ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK : (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE;
            LAB_CK(cudaMemset(dw, 0, (size_t)OC * IC * sizeof(float)));
            LAB_CK(cudaMemset(dw2, 0, (size_t)OC * IC * sizeof(float)));
            LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw, s.bias ? db : NULL, scratch, out, inp, BT, IC, OC, 1, ERRBUF));
            LAB_BLAS(gpt2rt__cu_matmul_backward_weight(b, m.t, dw2, s.bias ? db : NULL, scratch, out, inp, BT, IC, OC, 1, ERRBUF));
            snprintf(name, sizeof(name), "%s %s bwd_w twice%s", m.name, s.name, sk ? " (split-K allowed)" : "");
            dev_same_bits(name, dw, dw2, (size_t)OC * IC * sizeof(float), dcount);
        }
        b->reduction_mask_w = GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT;
    }
    LAB_CK(cudaDeviceSynchronize());
    print_fallbacks(m.name, b->fallbacks);
    LAB_CK(cudaFree(stage)); LAB_CK(cudaFree(inp)); LAB_CK(cudaFree(w)); LAB_CK(cudaFree(out)); LAB_CK(cudaFree(out2));
    LAB_CK(cudaFree(aux)); LAB_CK(cudaFree(dw)); LAB_CK(cudaFree(dw2)); LAB_CK(cudaFree(db)); LAB_CK(cudaFree(scratch));
    LAB_CK(cudaFree(dcount));
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("matmul lab: no CUDA device, skipped\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d, %d SMs), cuBLASLt %zu, workspace %zu MiB\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, cublasLtGetVersion(), (size_t)GPT2RT__CU_BLAS_WORKSPACE >> 20);
    size_t sgb = (gpt2rt__sgemm_workspace_bytes(1) + 63) / 64 * 64;
    sg_ws = aligned_alloc(64, sgb);
    void *ws;
    LAB_CK(cudaMalloc(&ws, (size_t)GPT2RT__CU_BLAS_WORKSPACE));
    static gpt2rt__cu_blas blas;
    LAB_BLAS(gpt2rt__cu_blas_init(&blas, ws, (size_t)GPT2RT__CU_BLAS_WORKSPACE, 0, ERRBUF));

    const lab_mode modes[4] = {
        {"fp32", CUDA_R_32F, 0, 1e-5f, 1e-5f, 2e-3f},
        {"tf32", CUDA_R_32F, 1, 2e-3f, 2e-3f, 2e-3f},
        {"bf16", CUDA_R_16BF, 0, 1e-2f, 2e-4f, 1e-2f},
        {"fp16", CUDA_R_16F, 0, 1e-2f, 2e-4f, 1e-2f},
    };
    validate<float>(&blas, modes[0]);
    validate<float>(&blas, modes[1]);
    validate<__nv_bfloat16>(&blas, modes[2]);
    validate<__half>(&blas, modes[3]);
    if (!quick) {
        gpt2rt__cu_blas_clear_plans(&blas);
        bench<float>(&blas, modes[0]);
        bench<float>(&blas, modes[1]);
        bench<__nv_bfloat16>(&blas, modes[2]);
        bench<__half>(&blas, modes[3]);
    }
    gpt2rt__cu_blas_destroy(&blas);
    LAB_CK(cudaFree(ws));
    free(sg_ws);
    return lab_finish("matmul lab");
}
