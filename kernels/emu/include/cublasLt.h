/* kernels/emu/include/cublasLt.h - the cuBLASLt subset gpt2rt.h calls, on the emulator.

   D (m x n) = alpha op(A) op(B) + beta C [+ epilogue], column-major, as cublasLtMatmul
   defines it: layouts describe the matrices as stored (before op). Types 32F, 16BF, 16F;
   compute 32F (products of the inputs converted to fp32, summed in fp32 over k in
   increasing order) and 32F_FAST_TF32 (A and B rounded to TF32's 10-bit mantissa,
   nearest with ties away from zero, as cvt.rna.tf32.f32 does). Epilogues DEFAULT, BIAS,
   GELU_AUX, GELU_AUX_BIAS, DGELU, BGRADB. The product is queued on the stream (deferred,
   like a kernel). This is a model of cuBLASLt's contract, not of its numerics: a GPU
   sums in another order, so comparisons with it need tolerances.

   EMU_BLAS_NO_EPILOGUE=DGELU,BGRADB,... makes the heuristic find no algorithm for those
   epilogues, as a cuBLASLt without them would, so the header's fallbacks run. */
#ifndef GPT2RT_EMU_CUBLASLT_H
#define GPT2RT_EMU_CUBLASLT_H
#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 10,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 11
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;
typedef enum {
    CUBLASLT_REDUCTION_SCHEME_NONE = 0,
    CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
    CUBLASLT_REDUCTION_SCHEME_MASK = 7
} cublasLtReductionScheme_t;

struct gpt2rt_emu_lt_handle { int magic; };
struct gpt2rt_emu_lt_layout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; };
struct gpt2rt_emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias, *aux;
    int64_t ld_aux;
};
struct gpt2rt_emu_lt_pref { uint64_t ws; uint32_t mask; };
typedef gpt2rt_emu_lt_handle *cublasLtHandle_t;
typedef gpt2rt_emu_lt_layout *cublasLtMatrixLayout_t;
typedef gpt2rt_emu_lt_desc *cublasLtMatmulDesc_t;
typedef gpt2rt_emu_lt_pref *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

static inline size_t cublasLtGetVersion(void) { return 120400; }
static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new gpt2rt_emu_lt_handle{0x1742}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
    if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ld < (int64_t)(rows ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new gpt2rt_emu_lt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale) {
    if (c != CUBLAS_COMPUTE_32F && c != CUBLAS_COMPUTE_32F_FAST_TF32) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new gpt2rt_emu_lt_desc{c, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void *v, size_t n) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: if (n != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->ta, v, 4); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: if (n != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->tb, v, 4); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: if (n != 4) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->epilogue, v, 4); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias, v, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux, v, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (n != 8) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->ld_aux, v, 8); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new gpt2rt_emu_lt_pref{0, 7}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a, const void *v,
                                                                  size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == 8) memcpy(&p->ws, v, 8);
    else if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK && n == 4) memcpy(&p->mask, v, 4);
    else if (n != 4) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

namespace gpt2rt_emu {
inline int lt_epilogue_known(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_BGRADB;
}
inline const char *lt_epilogue_name(uint32_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    }
    return "DEFAULT";
}
/* EMU_BLAS_NO_EPILOGUE lists epilogues this "cuBLASLt" lacks */
inline int lt_epilogue_refused(uint32_t e) {
    const char *v = getenv("EMU_BLAS_NO_EPILOGUE");
    if (!v || e == CUBLASLT_EPILOGUE_DEFAULT) return 0;
    const char *n = lt_epilogue_name(e);
    size_t k = strlen(n);
    for (const char *p = v; (p = strstr(p, n)) != nullptr; p += k)
        if ((p == v || p[-1] == ',') && (p[k] == 0 || p[k] == ',')) return 1;
    return 0;
}
inline float lt_load(cudaDataType_t t, const void *p, int64_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}
inline void lt_store(cudaDataType_t t, void *p, int64_t i, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((__half *)p)[i] = __float2half_rn(v);
}
/* fp32 -> TF32 (10 mantissa bits), nearest with ties away from zero; inf/NaN kept */
inline float lt_tf32(float x) {
    unsigned u = gpt2rt_emu_f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x1000u;
    u &= 0xffffe000u;
    return gpt2rt_emu_u2f(u);
}
inline float lt_gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
inline float lt_dgelu(float x) {
    float th = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
} /* namespace gpt2rt_emu */

static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                            cublasLtMatmulPreference_t p, int want,
                                                            cublasLtMatmulHeuristicResult_t *res, int *n) {
    (void)p;
    *n = 0;
    if (!h || !d || !a || !b || !c || !dd || want < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (!gpt2rt_emu::lt_epilogue_known(d->epilogue) || gpt2rt_emu::lt_epilogue_refused(d->epilogue))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type != b->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* cuBLAS's table for COMPUTE_32F: A/B 16BF with C/D 16BF or 32F, 16F with 16F or 32F, 32F with 32F;
       FAST_TF32 only for 32F */
    if (a->type == CUDA_R_32F && c->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&res[0], 0, sizeof res[0]);
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].workspaceSize = 0;
    res[0].wavesCount = 1.0f;
    *n = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t la, const void *B,
                                            cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                                            const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                                            cudaStream_t stream) {
    (void)algo; (void)ws; (void)ws_bytes;
    if (!h || !desc || !la || !lb || !lc || !ld || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
    gpt2rt_emu_lt_layout a = *la, b = *lb, c = *lc, dl = *ld;
    gpt2rt_emu_lt_desc d = *desc; /* the attributes as they are at the call */
    uint64_t m = d.ta ? a.cols : a.rows, k = d.ta ? a.rows : a.cols, kb = d.tb ? b.cols : b.rows, n = d.tb ? b.rows : b.cols;
    if (k != kb || c.rows != m || c.cols != n || dl.rows != m || dl.cols != n) {
        fprintf(stderr, "emu: cublasLtMatmul shapes: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x %llu\n",
                (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n,
                (unsigned long long)c.rows, (unsigned long long)c.cols, (unsigned long long)dl.rows, (unsigned long long)dl.cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    uint32_t e = d.epilogue;
    if ((e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_BGRADB) && !d.bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU) &&
        (!d.aux || d.ld_aux < (int64_t)m))
        return CUBLAS_STATUS_INVALID_VALUE;
    float al, be;
    memcpy(&al, alpha, 4);
    memcpy(&be, beta, 4);
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::enqueue(gpt2rt_emu::resolve(stream), "cublasLtMatmul", [=]() {
        using namespace gpt2rt_emu;
        int tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
        /* op(A) as rows of k (opa[i*k + kk]) and op(B) as columns of k (opb[j*k + kk]), fp32 */
        std::vector<float> opa((size_t)(m * k)), opb((size_t)(n * k)), out((size_t)(m * n));
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t kk = 0; kk < k; kk++) {
                float v = d.ta ? lt_load(a.type, A, (int64_t)(i * (uint64_t)a.ld + kk)) : lt_load(a.type, A, (int64_t)(kk * (uint64_t)a.ld + i));
                opa[(size_t)(i * k + kk)] = tf32 ? lt_tf32(v) : v;
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t kk = 0; kk < k; kk++) {
                float v = d.tb ? lt_load(b.type, B, (int64_t)(kk * (uint64_t)b.ld + j)) : lt_load(b.type, B, (int64_t)(j * (uint64_t)b.ld + kk));
                opb[(size_t)(j * k + kk)] = tf32 ? lt_tf32(v) : v;
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                const float *x = &opa[(size_t)(i * k)], *y = &opb[(size_t)(j * k)];
                float s = 0.0f;
                for (uint64_t kk = 0; kk < k; kk++) s += x[kk] * y[kk];
                float v = al * s;
                if (be != 0.0f) v += be * lt_load(c.type, C, (int64_t)(j * (uint64_t)c.ld + i));
                out[(size_t)(j * m + i)] = v;
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float v = out[(size_t)(j * m + i)];
                int64_t at = (int64_t)(j * (uint64_t)dl.ld + i), ax = (int64_t)(j * (uint64_t)d.ld_aux + i);
                if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) v += lt_load(dl.type, d.bias, (int64_t)i);
                if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    lt_store(dl.type, (void *)d.aux, ax, v);
                    v = lt_gelu(v);
                }
                if (e == CUBLASLT_EPILOGUE_DGELU) v *= lt_dgelu(lt_load(dl.type, d.aux, ax));
                lt_store(dl.type, D, at, v);
            }
        if (e == CUBLASLT_EPILOGUE_BGRADB) /* bias (n) = sum over k of op(B), in C's type */
            for (uint64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (uint64_t kk = 0; kk < k; kk++) s += opb[(size_t)(j * k + kk)];
                lt_store(c.type, (void *)d.bias, (int64_t)j, s);
            }
        return 0;
    });
    return CUBLAS_STATUS_SUCCESS;
}
#endif
