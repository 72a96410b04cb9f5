/* cpu/matmul.h - 7.2 Matrix product
   may call: common/platform.h, common/threads.h, plan/activations.h */
#ifndef GPT2RT__SRC_CPU_MATMUL_H
#define GPT2RT__SRC_CPU_MATMUL_H
#include "../common/platform.h"
#include "../common/threads.h"
#include "../plan/activations.h"

/* ==== 7.2 Matrix product ==== */

/* ---- matrix product (kernels/cpu_matmul.c validates and times it) ---- */
/* ---------------------------------------------------------------------------
 * CPU fp32 GEMM (row-major):  C(M,N) (+)= op(A)(M,K) * op(B)(K,N) (+ bias)
 *   op(A)[m,k] = trans_a ? A[k*lda+m] : A[m*lda+k]
 *   op(B)[k,n] = trans_b ? B[n*ldb+k] : B[k*ldb+n]
 * BLIS-style: K is cut into KC slices, N into NC blocks, M into MC blocks;
 * panels of A and B are packed (zero padded) into the caller's workspace and
 * an MR x NR register-blocked micro-kernel does the flops.
 * Determinism: every C element is produced by the same micro-kernel, summing
 * k in increasing order inside a KC slice and the slices in increasing order;
 * the slicing depends only on K.  Threads only split the M/N tile grid, so the
 * result is bitwise independent of the number of OpenMP threads.
 * Threading: the routine opens its own `omp parallel` region of n_threads
 * (<= the n_threads given to gpt2rt__sgemm_workspace_bytes); it must not be
 * called from inside a parallel region.
 * ------------------------------------------------------------------------- */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__SG_UNUSED __attribute__((unused))
#else
#define GPT2RT__SG_UNUSED
#endif
/* the team: gpt2rt__threads_for's count for the product's 2MNK flops (one thread: no team) */
#ifdef _OPENMP
#define GPT2RT__SG_OMP_PARALLEL _Pragma("omp parallel num_threads(n_threads) if(n_threads > 1)")
#else
#define GPT2RT__SG_OMP_PARALLEL
#endif

/* micro-kernel: acc = Ap(kc x MR packed) * Bp(kc x NR packed);
 * mode 0: C = acc, 1: C = acc + bias[0..NR), 2: C += acc */
typedef void (*gpt2rt__sg_kern_fn)(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias);

/* portable C micro-kernel: 4 x 8 tile in 32 scalar accumulators (compilers
   usually turn each row into SIMD registers) */
#define GPT2RT__SG_GEN_MR 4
#define GPT2RT__SG_GEN_NR 8
#define GPT2RT__SG_GEN_ROWS(X) X(0) X(1) X(2) X(3)
#define GPT2RT__SG_GEN_DECL(i) float c##i##0 = 0.0f, c##i##1 = 0.0f, c##i##2 = 0.0f, c##i##3 = 0.0f, \
    c##i##4 = 0.0f, c##i##5 = 0.0f, c##i##6 = 0.0f, c##i##7 = 0.0f;
#define GPT2RT__SG_GEN_FMA(i) { const float a = Ap[i]; \
    c##i##0 += a * b0; c##i##1 += a * b1; c##i##2 += a * b2; c##i##3 += a * b3; \
    c##i##4 += a * b4; c##i##5 += a * b5; c##i##6 += a * b6; c##i##7 += a * b7; }
#define GPT2RT__SG_GEN_OUT(i) { float *c = C + (i) * ldc; \
    if (mode == 0) { c[0] = c##i##0; c[1] = c##i##1; c[2] = c##i##2; c[3] = c##i##3; \
                     c[4] = c##i##4; c[5] = c##i##5; c[6] = c##i##6; c[7] = c##i##7; } \
    else if (mode == 1) { c[0] = c##i##0 + bias[0]; c[1] = c##i##1 + bias[1]; c[2] = c##i##2 + bias[2]; \
                     c[3] = c##i##3 + bias[3]; c[4] = c##i##4 + bias[4]; c[5] = c##i##5 + bias[5]; \
                     c[6] = c##i##6 + bias[6]; c[7] = c##i##7 + bias[7]; } \
    else { c[0] = c[0] + c##i##0; c[1] = c[1] + c##i##1; c[2] = c[2] + c##i##2; c[3] = c[3] + c##i##3; \
           c[4] = c[4] + c##i##4; c[5] = c[5] + c##i##5; c[6] = c[6] + c##i##6; c[7] = c[7] + c##i##7; } }
static void gpt2rt__sg_kern_generic(int64_t kc, const float *Ap, const float *Bp,
                                    float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_DECL)
    for (k = 0; k < kc; k++) {
        const float b0 = Bp[0], b1 = Bp[1], b2 = Bp[2], b3 = Bp[3];
        const float b4 = Bp[4], b5 = Bp[5], b6 = Bp[6], b7 = Bp[7];
        GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_FMA)
        Ap += GPT2RT__SG_GEN_MR;
        Bp += GPT2RT__SG_GEN_NR;
    }
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_OUT)
}

#if GPT2RT__SG_X86
/* ---- AVX-512: 14 x 32 tile, 28 zmm accumulators + 2 B vectors + 1 broadcast ---- */
#define GPT2RT__SG_512_MR 14
#define GPT2RT__SG_512_NR 32
#define GPT2RT__SG_512_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define GPT2RT__SG_512_DECL(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();
#define GPT2RT__SG_512_FMA(i) { __m512 av = _mm512_set1_ps(Ap[i]); \
    c##i##a = _mm512_fmadd_ps(av, b0, c##i##a); c##i##b = _mm512_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_512_ST0(i) _mm512_storeu_ps(C + i * ldc, c##i##a); _mm512_storeu_ps(C + i * ldc + 16, c##i##b);
#define GPT2RT__SG_512_ST1(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(c##i##a, bv0)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(c##i##b, bv1));
#define GPT2RT__SG_512_ST2(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc), c##i##a)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc + 16), c##i##b));
__attribute__((target("avx512f")))
static void gpt2rt__sg_kern_avx512(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_512_ROWS(GPT2RT__SG_512_DECL)
    for (k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_FMA)
        Ap += GPT2RT__SG_512_MR;
        Bp += GPT2RT__SG_512_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST0)
    } else if (mode == 1) {
        __m512 bv0 = _mm512_loadu_ps(bias), bv1 = _mm512_loadu_ps(bias + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST1)
    } else {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST2)
    }
}

/* g++ 12 emits a false -Wmaybe-uninitialized from inside its own avx512 headers
   (_mm512_undefined_ps in the shuffle intrinsics); silence it for the packing helpers below */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* 16x16 transpose of r[0..15] (rows) into r[0..15] (columns) */
__attribute__((target("avx512f")))
static inline void gpt2rt__sg_tr16(__m512 *r) {
    __m512 t[16], u[16];
    int i, g, c;
    for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (g = 0; g < 4; g++) {
        __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (c = 0; c < 4; c++) {
        __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 x2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 x3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(x1, x3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
    }
}

/* transpose-pack: rows src + i*ld (i < rows <= 16), k in [0,kc) -> dst[k*dst_ld + i] for i < width
   (width 12 or 16 lanes written per k; rows beyond `rows` are zero) */
__attribute__((target("avx512f")))
static void gpt2rt__sg_tpack16(float *dst, int64_t dst_ld, int width, const float *src, int64_t ld,
                               int64_t rows, int64_t kc) {
    __m512 r[16];
    const __mmask16 wm = (__mmask16)((1u << width) - 1u);
    int64_t k0, i, k;
    for (k0 = 0; k0 < kc; k0 += 16) {
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        __mmask16 km = (__mmask16)((1u << kn) - 1u);
        for (i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld + k0) : _mm512_setzero_ps();
        gpt2rt__sg_tr16(r);
        for (k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * dst_ld, wm, r[k]);
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_a_avx512(float *Ap, const float *A, int64_t lda, int trans_a,
                                     int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, k;
    (void)mr; /* == GPT2RT__SG_512_MR */
    for (p = 0; p < m_n; p += GPT2RT__SG_512_MR) {
        int64_t rows = m_n - p < GPT2RT__SG_512_MR ? m_n - p : GPT2RT__SG_512_MR;
        float *dst = Ap + p * kc;
        if (trans_a) {
            __mmask16 rm = (__mmask16)((1u << rows) - 1u);
            const float *src = A + k0 * lda + m0 + p;
            for (k = 0; k < kc; k++)
                _mm512_mask_storeu_ps(dst + k * GPT2RT__SG_512_MR, (__mmask16)((1u << GPT2RT__SG_512_MR) - 1u),
                                      _mm512_maskz_loadu_ps(rm, src + k * lda));
        } else {
            gpt2rt__sg_tpack16(dst, GPT2RT__SG_512_MR, GPT2RT__SG_512_MR, A + (m0 + p) * lda + k0, lda, rows, kc);
        }
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_b_avx512(float *Bp, const float *B, int64_t ldb, int trans_b,
                                     int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, k;
    (void)nr; /* == GPT2RT__SG_512_NR */
    for (p = 0; p < n_n; p += GPT2RT__SG_512_NR) {
        int64_t cols = n_n - p < GPT2RT__SG_512_NR ? n_n - p : GPT2RT__SG_512_NR;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            const float *src = B + k0 * ldb + n0 + p;
            if (cols == GPT2RT__SG_512_NR) {
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_loadu_ps(src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_loadu_ps(src + k * ldb + 16));
                }
            } else {
                __mmask16 m0k = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
                __mmask16 m1k = (__mmask16)(cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_maskz_loadu_ps(m0k, src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_maskz_loadu_ps(m1k, src + k * ldb + 16));
                }
            }
        } else {
            const float *src = B + (n0 + p) * ldb + k0;
            gpt2rt__sg_tpack16(dst, 32, 16, src, ldb, cols, kc);
            gpt2rt__sg_tpack16(dst + 16, 32, 16, cols > 16 ? src + 16 * ldb : src, ldb, cols > 16 ? cols - 16 : 0, kc);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* ---- AVX2+FMA: 6 x 16 tile, 12 ymm accumulators ---- */
#define GPT2RT__SG_256_MR 6
#define GPT2RT__SG_256_NR 16
#define GPT2RT__SG_256_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define GPT2RT__SG_256_DECL(i) __m256 c##i##a = _mm256_setzero_ps(), c##i##b = _mm256_setzero_ps();
#define GPT2RT__SG_256_FMA(i) { __m256 av = _mm256_broadcast_ss(Ap + i); \
    c##i##a = _mm256_fmadd_ps(av, b0, c##i##a); c##i##b = _mm256_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_256_ST0(i) _mm256_storeu_ps(C + i * ldc, c##i##a); _mm256_storeu_ps(C + i * ldc + 8, c##i##b);
#define GPT2RT__SG_256_ST1(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(c##i##a, bv0)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(c##i##b, bv1));
#define GPT2RT__SG_256_ST2(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc), c##i##a)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc + 8), c##i##b));
__attribute__((target("avx2,fma")))
static void gpt2rt__sg_kern_avx2(int64_t kc, const float *Ap, const float *Bp,
                                 float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DECL)
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_FMA)
        Ap += GPT2RT__SG_256_MR;
        Bp += GPT2RT__SG_256_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST0)
    } else if (mode == 1) {
        __m256 bv0 = _mm256_loadu_ps(bias), bv1 = _mm256_loadu_ps(bias + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST1)
    } else {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST2)
    }
}
/* the same tile and the same fused multiply-adds in the same order with A read in
   place (op(A) = A, rows lda apart) instead of packed: a skinny product (small N)
   reads each A panel once or twice, so packing it would cost as much as the product.
   Rows past `rows` repeat the last row (computed, then dropped by the caller). */
#define GPT2RT__SG_256_DA(i) const float *a##i = A + (i < rows ? i : rows - 1) * lda;
#define GPT2RT__SG_256_DFMA(i) { __m256 av = _mm256_broadcast_ss(a##i + k); \
    c##i##a = _mm256_fmadd_ps(av, b0, c##i##a); c##i##b = _mm256_fmadd_ps(av, b1, c##i##b); }
__attribute__((target("avx2,fma")))
static void gpt2rt__sg_kern_avx2_direct(int64_t kc, const float *A, int64_t lda, int64_t rows, const float *Bp,
                                        float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DECL)
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DA)
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DFMA)
        Bp += GPT2RT__SG_256_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST0)
    } else if (mode == 1) {
        __m256 bv0 = _mm256_loadu_ps(bias), bv1 = _mm256_loadu_ps(bias + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST1)
    } else {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST2)
    }
}
#endif /* GPT2RT__SG_X86 */

/* pack op(A)[m0+i, k0+k] for i<mr_tot (zero beyond m_n), k<kc into mr-row micro-panels: Ap[p][k][i] */
static void gpt2rt__sg_pack_a(float *Ap, const float *A, int64_t lda, int trans_a,
                              int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, i, k;
    for (p = 0; p < m_n; p += mr) {
        int64_t rows = m_n - p < mr ? m_n - p : mr;
        float *dst = Ap + p * kc;
        if (trans_a) {
            for (k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + m0 + p;
                for (i = 0; i < rows; i++) dst[k * mr + i] = src[i];
                for (; i < mr; i++) dst[k * mr + i] = 0.0f;
            }
        } else {
            for (i = 0; i < rows; i++) {
                const float *src = A + (m0 + p + i) * lda + k0;
                for (k = 0; k < kc; k++) dst[k * mr + i] = src[k];
            }
            for (; i < mr; i++)
                for (k = 0; k < kc; k++) dst[k * mr + i] = 0.0f;
        }
    }
}

/* pack op(B)[k0+k, n0+j] for j<n_n (zero padded to nr), k<kc into nr-col micro-panels: Bp[p][k][j] */
static void gpt2rt__sg_pack_b(float *Bp, const float *B, int64_t ldb, int trans_b,
                              int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, j, k;
    for (p = 0; p < n_n; p += nr) {
        int64_t cols = n_n - p < nr ? n_n - p : nr;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            for (k = 0; k < kc; k++) {
                const float *src = B + (k0 + k) * ldb + n0 + p;
                for (j = 0; j < cols; j++) dst[k * nr + j] = src[j];
                for (; j < nr; j++) dst[k * nr + j] = 0.0f;
            }
        } else {
            for (j = 0; j < cols; j++) {
                const float *src = B + (n0 + p + j) * ldb + k0;
                for (k = 0; k < kc; k++) dst[k * nr + j] = src[k];
            }
            for (; j < nr; j++)
                for (k = 0; k < kc; k++) dst[k * nr + j] = 0.0f;
        }
    }
}

typedef void (*gpt2rt__sg_pack_fn)(float *dst, const float *src, int64_t ld, int trans,
                                   int64_t i0, int64_t i_n, int64_t k0, int64_t kc, int r);
/* a kernel that reads op(A) = A in place (rows lda apart, `rows` of them valid) */
typedef void (*gpt2rt__sg_kern_direct_fn)(int64_t kc, const float *A, int64_t lda, int64_t rows, const float *Bp,
                                          float *C, int64_t ldc, int mode, const float *bias);
typedef struct {
    gpt2rt__sg_kern_fn kern;
    gpt2rt__sg_kern_direct_fn kern_direct; /* NULL: A is always packed */
    gpt2rt__sg_pack_fn pack_a, pack_b;
    int mr, nr;
} gpt2rt__sg_impl;

static gpt2rt__sg_impl gpt2rt__sg_select(void) {
    gpt2rt__sg_impl im;
    im.kern = gpt2rt__sg_kern_generic;
    im.kern_direct = NULL;
    im.pack_a = gpt2rt__sg_pack_a;
    im.pack_b = gpt2rt__sg_pack_b;
    im.mr = GPT2RT__SG_GEN_MR;
    im.nr = GPT2RT__SG_GEN_NR;
#if GPT2RT__SG_X86
    __builtin_cpu_init();
#ifdef GPT2RT_SGEMM_FORCE_PATH /* lab testing only: 1 = portable C, 2 = AVX2 */
    if (GPT2RT_SGEMM_FORCE_PATH == 1) return im;
    if (GPT2RT_SGEMM_FORCE_PATH != 2 && __builtin_cpu_supports("avx512f")) {
#else
    if (__builtin_cpu_supports("avx512f")) {
#endif
        im.kern = gpt2rt__sg_kern_avx512;
        im.pack_a = gpt2rt__sg_pack_a_avx512;
        im.pack_b = gpt2rt__sg_pack_b_avx512;
        im.mr = GPT2RT__SG_512_MR;
        im.nr = GPT2RT__SG_512_NR;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        im.kern = gpt2rt__sg_kern_avx2;
        im.kern_direct = gpt2rt__sg_kern_avx2_direct;
        im.mr = GPT2RT__SG_256_MR;
        im.nr = GPT2RT__SG_256_NR;
    }
#endif
    return im;
}

/* one thread's rectangle [m0,m1) x [n0,n1) of C, all of K */
static void gpt2rt__sg_region(const gpt2rt__sg_impl *im, int trans_a, int trans_b,
                              int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, int64_t kcb,
                              const float *A, int64_t lda, const float *B, int64_t ldb,
                              const float *bias, int accumulate, float *C, int64_t ldc, float *ws) {
    const int mr = im->mr, nr = im->nr;
    const int64_t mcb = GPT2RT_SGEMM_MC - GPT2RT_SGEMM_MC % mr;
    const int64_t ncb = GPT2RT_SGEMM_NC - GPT2RT_SGEMM_NC % nr;
    float *Bp = ws;
    float *Ap = ws + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC;
    float tmp[32 * 32]; /* edge tile buffer, >= mr*nr for every kernel */
    int64_t jc, pc, ic, jr, ir, i, j;
    /* A in place where a packed panel would serve few column panels (N up to 4 of them) */
    int direct = im->kern_direct && !trans_a && n1 - n0 <= 4 * (int64_t)nr;
    for (jc = n0; jc < n1; jc += ncb) {
        int64_t nn = n1 - jc < ncb ? n1 - jc : ncb;
        for (pc = 0; pc < K; pc += kcb) {
            int64_t kc = K - pc < kcb ? K - pc : kcb;
            int first = (pc == 0) && !accumulate;
            int mode = first ? (bias ? 1 : 0) : 2;
            im->pack_b(Bp, B, ldb, trans_b, jc, nn, pc, kc, nr);
            for (ic = m0; ic < m1; ic += mcb) {
                int64_t mm = m1 - ic < mcb ? m1 - ic : mcb;
                if (!direct) im->pack_a(Ap, A, lda, trans_a, ic, mm, pc, kc, mr);
                for (jr = 0; jr < nn; jr += nr) {
                    int64_t nw = nn - jr < nr ? nn - jr : nr;
                    const float *bp = Bp + jr * kc;
                    const float *bb = bias ? bias + jc + jr : NULL;
                    for (ir = 0; ir < mm; ir += mr) {
                        int64_t mw = mm - ir < mr ? mm - ir : mr;
                        const float *ap = Ap + ir * kc, *ad = A + (ic + ir) * lda + pc;
                        float *c = C + (ic + ir) * ldc + jc + jr;
                        if (mw == mr && nw == nr) {
                            if (direct) im->kern_direct(kc, ad, lda, mw, bp, c, ldc, mode, bb);
                            else im->kern(kc, ap, bp, c, ldc, mode, bb);
                        } else {
                            if (direct) im->kern_direct(kc, ad, lda, mw, bp, tmp, nr, 0, NULL);
                            else im->kern(kc, ap, bp, tmp, nr, 0, NULL);
                            for (i = 0; i < mw; i++)
                                for (j = 0; j < nw; j++) {
                                    float t = tmp[i * nr + j];
                                    if (mode == 0) c[i * ldc + j] = t;
                                    else if (mode == 1) c[i * ldc + j] = t + bb[j];
                                    else c[i * ldc + j] = c[i * ldc + j] + t;
                                }
                        }
                    }
                }
            }
        }
    }
}

GPT2RT__SG_UNUSED
static void gpt2rt__sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb,
                          const float *bias, int accumulate,
                          float *C, int64_t ldc, void *workspace, int n_threads) {
    gpt2rt__sg_impl im;
    n_threads = gpt2rt__threads_for(n_threads, 2.0 * (double)M * (double)N * (double)K);
    (void)n_threads;
    int64_t kcb, nkb;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        int64_t m, n;
        if (accumulate) return;
        for (m = 0; m < M; m++)
            for (n = 0; n < N; n++) C[m * ldc + n] = bias ? bias[n] : 0.0f;
        return;
    }
    im = gpt2rt__sg_select();
    /* K slicing depends only on K: equal-ish slices of at most KC */
    nkb = (K + GPT2RT_SGEMM_KC - 1) / GPT2RT_SGEMM_KC;
    kcb = (K + nkb - 1) / nkb;
    GPT2RT__SG_OMP_PARALLEL
    {
        int nt = 1, tid = 0;
        int64_t tiles_m = (M + im.mr - 1) / im.mr, tiles_n = (N + im.nr - 1) / im.nr;
        int64_t tm = 1, tn = 1, best = -1, d;
        float *ws;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        ws = (float *)workspace + (size_t)tid * gpt2rt__sg_thread_floats();
        /* choose a tm x tn thread grid minimising per-thread work + packing */
        for (d = 1; d <= nt; d++) {
            int64_t dm, dn, rm, rn, cost;
            if (nt % d) continue;
            dm = d;
            dn = nt / d;
            if (dm > tiles_m || dn > tiles_n) continue;
            rm = (tiles_m + dm - 1) / dm * im.mr;
            rn = (tiles_n + dn - 1) / dn * im.nr;
            cost = rm * rn * K / 32 + K * (rm * ((rn + GPT2RT_SGEMM_NC - 1) / GPT2RT_SGEMM_NC) + rn);
            if (best < 0 || cost < best) { best = cost; tm = dm; tn = dn; }
        }
        if (best < 0) { /* fewer tiles than threads: split the longer side only */
            if (tiles_m >= tiles_n) { tm = nt < tiles_m ? nt : tiles_m; tn = 1; }
            else { tn = nt < tiles_n ? nt : tiles_n; tm = 1; }
        }
        if (tid < tm * tn) {
            int64_t ti = tid / tn, tj = tid % tn;
            int64_t mt0 = tiles_m * ti / tm, mt1 = tiles_m * (ti + 1) / tm;
            int64_t nt0 = tiles_n * tj / tn, nt1 = tiles_n * (tj + 1) / tn;
            int64_t m0 = mt0 * im.mr, m1 = mt1 * im.mr, n0 = nt0 * im.nr, n1 = nt1 * im.nr;
            if (m1 > M) m1 = M;
            if (n1 > N) n1 = N;
            if (m0 < m1 && n0 < n1)
                gpt2rt__sg_region(&im, trans_a, trans_b, m0, m1, n0, n1, K, kcb, A, lda, B, ldb,
                                  bias, accumulate, C, ldc, ws);
        }
    }
}

/* out (BT,OC) = inp (BT,IC) W^T + b;  W (OC,IC), b (OC) or NULL */
static void gpt2rt__cpu_matmul_forward(float *out, const float *inp, const float *w, const float *b,
                                   int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    gpt2rt__sgemm(0, 1, BT, OC, IC, inp, IC, w, IC, b, 0, out, OC, ws, nt);
}

/* dinp (BT,IC) = dout W;  dw (OC,IC) += dout^T inp;  db (OC) += sum over rows of dout.
   dw and db NULL: a frozen weight, only dinp (and inp may be NULL); dinp NULL: the
   input needs no gradient (patches' in_layer) */
static void gpt2rt__cpu_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    if (dinp) gpt2rt__sgemm(0, 0, BT, IC, OC, dout, OC, w, IC, NULL, 0, dinp, IC, ws, nt);
    if (dw) gpt2rt__sgemm(1, 0, OC, IC, BT, dout, OC, inp, IC, NULL, 1, dw, IC, ws, nt);
    if (!db) return;
    /* column sums: threads own column blocks, rows are summed in order */
    int64_t nblk = (OC + 63) / 64;
    nt = gpt2rt__threads_for(nt, GPT2RT__CPU_W_ADD * (double)(BT * OC));
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o0 = blk * 64, o1 = o0 + 64 < OC ? o0 + 64 : OC;
        float acc[64];
        for (int64_t o = o0; o < o1; o++) acc[o - o0] = 0.0f;
        for (int64_t r = 0; r < BT; r++) {
            const float *row = dout + r * OC;
            for (int64_t o = o0; o < o1; o++) acc[o - o0] += row[o];
        }
        for (int64_t o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
}

/* ---- bf16 weights: the matrix-vector products of generation (inference_weights) ----
   out[r] = dot(x, w + r*K, K) over n_rows rows of bf16 weights (row stride K), x fp32,
   the products and sums in fp32. Four paths, picked per call (gpt2rt__bf16_rows_pick):
   - portable C, AVX2, AVX-512F: each bf16 widens to its fp32 exactly (a 16-bit shift),
     the product and the sum are rounded apart (no FMA) in the 16 lanes of
     gpt2rt__cpu_dot, reduced in its order: the three give bitwise the same floats
     on every compiler and mode (GPT2RT__NO_CONTRACT below);
   - AVX-512 BF16 (Zen 4, Sapphire Rapids), for a prefill's many rows: VDPBF16PS multiplies bf16 by bf16, so x is
     split once per call into hi = bf16(x) and lo = bf16(x - hi) (x = hi + lo within
     2^-16 relative) and each weight meets both; the products are exact in fp32, the
     sums run in pairs per lane: within 2^-16 + 3K 2^-24 of sum |w x| of the others
     (tests/test_infer_bf16.c). It multiplies 32 weights an instruction.
   */
typedef void (*gpt2rt__bf16_rows_fn)(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows);

/* gcc outside ISO C modes (-std=gnu17, its default; g++; nvcc's host pass) contracts a
   product and a sum in separate statements, and even intrinsics' mul and add, into one
   FMA (-ffp-contract=fast): these functions round the two apart on every compiler */
#if defined(__GNUC__) && !defined(__clang__)
#define GPT2RT__NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define GPT2RT__NO_CONTRACT /* clang contracts within one expression only (fp-contract=on) */
#endif

/* the lanes' fold and the tail, in gpt2rt__cpu_dot's order */
GPT2RT__NO_CONTRACT static float gpt2rt__bf16_fold(const float acc[16], const float *x, const uint16_t *w, int64_t k0, int64_t K) {
    float s = 0.0f;
    for (int64_t i = k0; i < K; i++) {
        float p = x[i] * gpt2rt__bf16_widen(w[i]); /* its own statement: never fused (clang's fp-contract=on) */
        s += p;
    }
    for (int j = 0; j < 16; j += 2) s += acc[j] + acc[j + 1];
    return s;
}

GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_c(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    for (int64_t r = 0; r < n_rows; r++) {
        const uint16_t *wr = w + r * K;
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= K; i += 16)
            for (int j = 0; j < 16; j++) {
                float p = x[i + j] * gpt2rt__bf16_widen(wr[i + j]); /* rounded, then added: as the SIMD paths */
                acc[j] += p;
            }
        out[r] = gpt2rt__bf16_fold(acc, x, wr, i, K);
    }
}

#if GPT2RT__SG_X86
/* g++ 12's false -Wmaybe-uninitialized from inside its avx512 headers, as in the kernels above */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* Each path takes one row at a time: one stream of weights. Four rows at once (four
   chains of additions in flight) measured 2.3x slower on the 2-core AMD EPYC (Zen 4):
   the decode step is bound by the weights' bytes, and four streams 2C bytes apart
   fetch worse than one. */
__attribute__((target("avx2")))
static inline __m256 gpt2rt__bf16_w8(const uint16_t *p) { /* 8 bf16 -> 8 fp32, exactly */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
}
__attribute__((target("avx2")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_store8x2(float *out, const float *x, const uint16_t *w, int64_t K16, int64_t K, __m256 a0, __m256 a1) {
    float acc[16];
    _mm256_storeu_ps(acc, a0);
    _mm256_storeu_ps(acc + 8, a1);
    *out = gpt2rt__bf16_fold(acc, x, w, K16, K);
}
__attribute__((target("avx2")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_avx2(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    int64_t K16 = K & ~(int64_t)15, r = 0;
    for (; r < n_rows; r++) {
        const uint16_t *w0 = w + r * K;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00;
        for (int64_t i = 0; i < K16; i += 16) {
            a00 = _mm256_add_ps(a00, _mm256_mul_ps(_mm256_loadu_ps(x + i), gpt2rt__bf16_w8(w0 + i)));
            a01 = _mm256_add_ps(a01, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), gpt2rt__bf16_w8(w0 + i + 8)));
        }
        gpt2rt__bf16_store8x2(out + r, x, w0, K16, K, a00, a01);
    }
}

__attribute__((target("avx512f")))
static inline __m512 gpt2rt__bf16_w16(const uint16_t *p) { /* 16 bf16 -> 16 fp32, exactly */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
}
__attribute__((target("avx512f")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_store16(float *out, const float *x, const uint16_t *w, int64_t k0, int64_t K, __m512 a) {
    float acc[16];
    _mm512_storeu_ps(acc, a);
    *out = gpt2rt__bf16_fold(acc, x, w, k0, K);
}
__attribute__((target("avx512f")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_avx512(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    int64_t K16 = K & ~(int64_t)15, r = 0;
    for (; r < n_rows; r++) {
        const uint16_t *w0 = w + r * K;
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t i = 0; i < K16; i += 16) a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_loadu_ps(x + i), gpt2rt__bf16_w16(w0 + i)));
        gpt2rt__bf16_store16(out + r, x, w0, K16, K, a0);
    }
}

/* x's hi/lo split lives on the stack: longer rows take the AVX-512F path */
#define GPT2RT__BF16_XMAX 8192
__attribute__((target("avx512bf16,avx512f")))
static void gpt2rt__bf16_rows_avx512bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    if (K > GPT2RT__BF16_XMAX) { gpt2rt__bf16_rows_avx512(out, x, w, K, n_rows); return; }
    __attribute__((aligned(64))) uint16_t hi[GPT2RT__BF16_XMAX], lo[GPT2RT__BF16_XMAX];
    int64_t K32 = K & ~(int64_t)31, r = 0;
    for (int64_t i = 0; i < K32; i += 32) { /* cvtne2ps_pbh(b, a): a's 16 values go high, b's low */
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
        __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
        __m512i l = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
        _mm512_store_si512((void *)(hi + i), h);
        _mm512_store_si512((void *)(lo + i), l);
    }
    for (; r < n_rows; r++) { /* two chains (hi, lo) per 64 weights, unrolled twice: four in flight */
        const uint16_t *w0 = w + r * K;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t i = 0;
        for (; i + 64 <= K32; i += 64) {
            __m512bh v0 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i));
            __m512bh v1 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i + 32));
            a0 = _mm512_dpbf16_ps(a0, v0, (__m512bh)_mm512_load_si512((const void *)(hi + i)));
            a1 = _mm512_dpbf16_ps(a1, v0, (__m512bh)_mm512_load_si512((const void *)(lo + i)));
            a2 = _mm512_dpbf16_ps(a2, v1, (__m512bh)_mm512_load_si512((const void *)(hi + i + 32)));
            a3 = _mm512_dpbf16_ps(a3, v1, (__m512bh)_mm512_load_si512((const void *)(lo + i + 32)));
        }
        if (i < K32) {
            __m512bh v0 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i));
            a0 = _mm512_dpbf16_ps(a0, v0, (__m512bh)_mm512_load_si512((const void *)(hi + i)));
            a1 = _mm512_dpbf16_ps(a1, v0, (__m512bh)_mm512_load_si512((const void *)(lo + i)));
        }
        gpt2rt__bf16_store16(out + r, x, w0, K32, K, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* GPT2RT__SG_X86 */

/* the fastest path this CPU has (GPT2RT_SGEMM_NO_SIMD: portable C) for few rows (a decode
   step: bound by the weights' bytes, where the widening paths ran fastest, 4.4 ms for
   wte against 6.0 ms with VDPBF16PS, one Zen 4 core) or many (a prefill, each weight
   row reused from cache: bound by arithmetic, where VDPBF16PS's 32 products an
   instruction ran 1.5x the AVX-512F path, 53 against 36 GFLOP/s) */
#define GPT2RT__BF16_MANY_ROWS 8 /* rows from which a product counts as a prefill's (as the fp32 side's 7.3) */
static gpt2rt__bf16_rows_fn gpt2rt__bf16_rows_pick(int many) {
#if GPT2RT__SG_X86
    __builtin_cpu_init();
    if (many && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f")) return gpt2rt__bf16_rows_avx512bf16;
    if (__builtin_cpu_supports("avx512f")) return gpt2rt__bf16_rows_avx512;
    if (__builtin_cpu_supports("avx2")) return gpt2rt__bf16_rows_avx2;
#else
    (void)many;
#endif
    return gpt2rt__bf16_rows_c;
}

/* out (N,OC) = inp (N,IC) W^T + b, W (OC,IC) bf16, b (OC) fp32 or NULL: the decode
   step's and the prefill's products on bf16 weights. Threads own blocks of 64 output
   columns and each value is one gpt2rt__bf16_rows_fn dot product (K is never split), so
   the result is the same on any thread count. Each weight row is read once per input
   row; a prefill's rows re-read it from cache. */
static void gpt2rt__cpu_matvec_bf16(float *out, const float *inp, const uint16_t *w, const float *b, int64_t N,
                                    int64_t IC, int64_t OC, int nt) {
    gpt2rt__bf16_rows_fn rows = gpt2rt__bf16_rows_pick(N >= GPT2RT__BF16_MANY_ROWS);
    int64_t nblk = (OC + 63) / 64;
    nt = gpt2rt__threads_for(nt, 2.0 * (double)(N * IC) * (double)OC);
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o0 = blk * 64, o1 = o0 + 64 < OC ? o0 + 64 : OC;
        for (int64_t i = 0; i < N; i++) {
            float *y = out + i * OC;
            rows(y + o0, inp + i * IC, w + o0 * IC, IC, o1 - o0);
            if (b) for (int64_t o = o0; o < o1; o++) y[o] += b[o];
        }
    }
}

#endif /* GPT2RT__SRC_CPU_MATMUL_H */
