/* cuda/matmul.cuh - 8.4 Matrix products
   may call: cuda/attention_backward.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_MATMUL_CUH
#define GPT2RT__SRC_CUDA_MATMUL_CUH
#include "attention_backward.cuh"

/* ==== 8.4 Matrix products ==== */

/* kernels/matmul.cu validates and times this section.

   Matrix products of the model through cuBLASLt (link with -lcublasLt).

   ---- Row-major (ours) vs column-major (cuBLASLt) -------------------------------
   A row-major matrix X (R,C) with leading dimension C has exactly the bytes of the
   column-major matrix X^T (C x R) with leading dimension C. cuBLASLt computes, in
   column-major, D (m x n) = op(A) (m x k) * op(B) (k x n) [+ epilogue], where a layout
   describes the matrix as stored (before op). So each of our row-major products is
   written as its transpose:

   forward      out (BT,OC) = inp (BT,IC) W^T          W (OC,IC) like nn.Linear
                out^T (OC x BT) = W (OC x IC) * inp^T (IC x BT)
                A = W    stored col-major (IC x OC), ld IC  -> transA = T
                B = inp  stored col-major (IC x BT), ld IC  -> transB = N
                D = out  col-major (OC x BT), ld OC;  m = OC, n = BT, k = IC
                bias (OC) has the length of D's rows (m) and is broadcast along the
                columns (the BT tokens): CUBLASLT_EPILOGUE_BIAS / GELU_AUX_BIAS.
                aux (pre-GELU) has D's layout: row-major (BT,OC), ld OC.
   backward     dinp (BT,IC) = dout (BT,OC) W
   input        dinp^T (IC x BT) = W^T (IC x OC) * dout^T (OC x BT)
                A = W    stored col-major (IC x OC), ld IC  -> transA = N
                B = dout stored col-major (OC x BT), ld OC  -> transB = N
                D = dinp col-major (IC x BT), ld IC;  m = IC, n = BT, k = OC
                DGELU: aux = pre-GELU activation in D's layout, row-major (BT,IC).
   backward     dW (OC,IC) += dout^T (OC,BT) inp (BT,IC)
   weight       dW^T (IC x OC) = inp^T (IC x BT) * dout (BT x OC)
                A = inp  stored col-major (IC x BT), ld IC  -> transA = N
                B = dout stored col-major (OC x BT), ld OC  -> transB = T
                D = C = dW col-major (IC x OC), ld IC;  m = IC, n = OC, k = BT
                db (OC) = sum over tokens of dout = sum over GEMM-k of B: that is
                CUBLASLT_EPILOGUE_BGRADB ("bias size = number of columns of D, the
                reduction happens over k"). BGRADA would reduce inp: wrong one.

   ---- Which matmul the GELU epilogues attach to -----------------------------------
   MLP: fch = ln2 Wfc^T + bfc (BT,4C); fch_gelu = gelu(fch); y = fch_gelu Wproj^T + bproj.
   forward:  the c_fc matmul (IC = C, OC = 4C) with GELU_AUX_BIAS writes out = fch_gelu
             and aux = fch (pre-GELU, kept for the backward).
   backward: the dGELU attaches to the *input gradient of c_proj* (IC = 4C, OC = C):
             dinp = (dy Wproj) * gelu'(fch) is directly d(fch), the gradient at c_fc's
             output, so CUBLASLT_EPILOGUE_DGELU with aux = fch replaces
             gpt2rt__cpu_gelu_backward. c_fc's own backward (weight with BGRADB, input)
             then uses that d(fch) as its dout.
   (DGELU_BGRAD could also emit c_fc's bias gradient there; we do not use it: the
   bias gradient comes from the c_fc weight-gradient matmul, like every layer's.)

   ---- Bias gradient semantics ------------------------------------------------------
   By default (GPT2RT__CU_MM_FUSE_DEFAULT) the weight-gradient product is plain and the
   column-sum kernel here (gpt2rt__cu_bias_backward, partial sums in the workspace, then a
   fixed-order sum) writes db. Asking for BGRADB can make cuBLASLt take a slower product
   and run a separate reduction kernel of its own (docs/results/gpu.md has the timings).
   With BGRADB allowed (blas->fuse): cuBLASLt's bias-gradient epilogues OVERWRITE the
   bias vector (there is no beta for it). gpt2rt__cu_matmul_backward_weight(accumulate =
   0) lets BGRADB write db directly (db = column sums, dW = dout^T inp). With accumulate
   = 1 (dW += ..., gradient accumulation over micro-batches) BGRADB writes into the
   caller's db_scratch (OC floats) and a small kernel does db[o] += db_scratch[o]
   (deterministic). With accumulate = 1 and db != NULL, db_scratch is required.

   ---- Types --------------------------------------------------------------------------
   t = CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F is the storage type of activations and
   weights (A, B, and D of forward / backward input, bias, aux). Compute is always
   CUBLAS_COMPUTE_32F with fp32 alpha/beta (scale type CUDA_R_32F); for t = CUDA_R_32F
   and blas->tf32 != 0 it is CUBLAS_COMPUTE_32F_FAST_TF32. The weight gradient always
   has C = D = fp32 (A, B of type t), and its bias gradient is fp32 (the bias-gradient
   vector has the type of C). The bias (forward) and aux have the output's type
   (BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE left at their defaults = D's type).
   cuBLAS's table of supported cublasLtMatmul type combinations for COMPUTE_32F lists
   A/B = 16BF with C/D = 16BF or 32F, A/B = 16F with C/D = 16F or 32F, and 32F/32F.
   Epilogue support for a given combination is only discoverable at run time: if the
   heuristic returns no algorithm for a fused epilogue, the plan falls back to the plain
   product (or BIAS for GELU_AUX_BIAS) plus a small hand-written kernel here
   (GELU / dGELU elementwise, deterministic column sums for db). blas->fallbacks records
   which fallbacks were taken (GPT2RT__CU_MM_FB_* bits). blas->fuse is the set of fused
   epilogues the plans may ask for (the same bits); a bit left out forces that kernel.

   ---- Determinism -------------------------------------------------------------------
   cuBLAS results are bitwise reproducible run to run for a given toolkit, GPU
   architecture and SM count, one stream, and a fixed algorithm + workspace. We pick
   the algorithm once per (op, types, shape, epilogue, pointer alignments, reduction
   mask) with cublasLtMatmulAlgoGetHeuristic and reuse it (plan cache in the struct).
   Split-K reduction schemes are controlled by blas->reduction_mask
   (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK); the default
   GPT2RT__CU_BLAS_REDUCTION_DEFAULT = CUBLASLT_REDUCTION_SCHEME_NONE excludes split-K
   entirely (the header documents INPLACE as counter-ordered and COMPUTE/OUTPUT_TYPE
   as a separate reduction step, i.e. none of them is atomics-ordered, so
   CUBLASLT_REDUCTION_SCHEME_MASK may be allowed for speed once the lab shows it
   bitwise stable on the target GPU; kernels/matmul.cu measures both).
   blas->reduction_mask_w is the same for the weight-gradient products (an inner
   dimension of B*T rows, an output as small as C x C: without split-K such a product
   fills few multiprocessors). Its default GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT allows
   every scheme: the plan fixes the algorithm, and kernels/matmul.cu checks each weight
   gradient twice with split-K allowed, bitwise, in every storage type.
   Different BT (so different shapes) may pick different kernels: results are then
   not bitwise comparable across batch sizes.

   ---- Workspace ------------------------------------------------------------------------
   GPT2RT__CU_BLAS_WORKSPACE = 32 MiB: cuBLAS's documented recommendation for Hopper
   (cublasSetWorkspace: 32 MiB on sm_90, 4 MiB for earlier architectures). The memory
   planner provides it (256-byte aligned device memory; cudaMalloc is).

   Not thread-safe: one gpt2rt__cu_blas per host thread / stream.
*/

#define GPT2RT__CU_BLAS_MAX_PLANS 64                           /* cached (op, shape, type) plans */
#define GPT2RT__CU_BLAS_REDUCTION_DEFAULT ((uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE)
#define GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT ((uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK)
/* blas->fallbacks bits: a fused epilogue was unavailable and the kernel here ran instead */
#define GPT2RT__CU_MM_FB_GELU 1u  /* forward GELU_AUX(_BIAS) -> BIAS/DEFAULT + gelu kernel */
#define GPT2RT__CU_MM_FB_DGELU 2u /* backward input DGELU -> DEFAULT + dgelu kernel */
#define GPT2RT__CU_MM_FB_BGRAD 4u /* backward weight BGRADB -> DEFAULT + column-sum kernel */
#define GPT2RT__CU_MM_FUSE_ALL 7u /* blas->fuse: every fused epilogue allowed */
#define GPT2RT__CU_MM_FUSE_DEFAULT (GPT2RT__CU_MM_FB_GELU | GPT2RT__CU_MM_FB_DGELU) /* BGRADB left out: see above */

enum { GPT2RT__CU_MM_FWD = 0, GPT2RT__CU_MM_BWD_IN = 1, GPT2RT__CU_MM_BWD_W = 2 };

/* everything the algorithm choice depends on; compared with memcmp (memset first) */
typedef struct {
    int32_t op;           /* GPT2RT__CU_MM_* */
    int32_t epilogue;     /* cublasLtEpilogue_t requested */
    int32_t ab_type;      /* cudaDataType_t of A, B */
    int32_t cd_type;      /* cudaDataType_t of C, D */
    int32_t compute;      /* cublasComputeType_t */
    uint32_t fuse;        /* blas->fuse when planned */
    int64_t m, n, k;      /* column-major GEMM sizes (see top comment) */
    uint32_t align_abcd;  /* min alignment (bytes, <= 256) of A, B, C, D pointers */
    uint32_t align_bias;  /* of the bias / bias-gradient pointer (256 when none) */
    uint32_t align_aux;   /* of the aux pointer (256 when none) */
    uint32_t reduction_mask;
} gpt2rt__cu_mm_key;

typedef struct {
    gpt2rt__cu_mm_key key;
    int32_t epilogue;              /* the epilogue actually planned (may be a fallback) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* lc describes both C and D */
    cublasLtMatmulAlgo_t algo;
} gpt2rt__cu_mm_plan;

typedef struct gpt2rt__cu_blas {
    cublasLtHandle_t lt;
    void *workspace;            /* device, workspace_bytes, 256-byte aligned */
    size_t workspace_bytes;     /* GPT2RT__CU_BLAS_WORKSPACE */
    cudaStream_t stream;        /* every call runs on it */
    int tf32;                   /* fp32 storage: 1 -> CUBLAS_COMPUTE_32F_FAST_TF32 */
    unsigned fuse;              /* GPT2RT__CU_MM_FB_* bits: the cuBLASLt epilogues allowed; a bit
                                   left out forces the kernel here (default GPT2RT__CU_MM_FUSE_DEFAULT) */
    uint32_t reduction_mask;    /* allowed CUBLASLT_REDUCTION_SCHEME_* (default NONE) */
    uint32_t reduction_mask_w;  /* the same for the weight-gradient products */
    unsigned fallbacks;         /* GPT2RT__CU_MM_FB_* taken so far */
    int n_plans;
    gpt2rt__cu_mm_plan plans[GPT2RT__CU_BLAS_MAX_PLANS];
} gpt2rt__cu_blas;

/* ------------------------------------------------------------------ helpers */
static const char *gpt2rt__cu_blas_status_name(int s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cublasStatus_t(?)";
    }
}
static const char *gpt2rt__cu_mm_type_name(cudaDataType_t t) {
    return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "type?";
}
static const char *gpt2rt__cu_mm_op_name(int op) {
    return op == GPT2RT__CU_MM_FWD ? "matmul_forward"
         : op == GPT2RT__CU_MM_BWD_IN ? "matmul_backward_input" : "matmul_backward_weight";
}
static const char *gpt2rt__cu_mm_epi_name(int e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu_aux";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "gelu_aux_bias";
    case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
    case CUBLASLT_EPILOGUE_BGRADB: return "bgradb";
    default: return "epilogue?";
    }
}
/* largest power of two <= 256 dividing the address (256 for NULL) */
static uint32_t gpt2rt__cu_mm_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}
static uint32_t gpt2rt__cu_mm_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* "<call>(<op> <type> BT= IC= OC= <epilogue>): <status>" into err */
static int gpt2rt__cu_mm_fail(char *err, size_t cap, const char *call, int op, cudaDataType_t t,
                              int64_t BT, int64_t IC, int64_t OC, int epi, int status, int is_cuda) {
    if (err && cap)
        snprintf(err, cap, "%s(%s %s BT=%lld IC=%lld OC=%lld epilogue=%s): %s (%d)", call,
                 gpt2rt__cu_mm_op_name(op), gpt2rt__cu_mm_type_name(t), (long long)BT, (long long)IC,
                 (long long)OC, gpt2rt__cu_mm_epi_name(epi),
                 is_cuda ? cudaGetErrorString((cudaError_t)status) : gpt2rt__cu_blas_status_name(status), status);
    return status;
}

/* ------------------------------------------------------------------ fallback kernels */
#define GPT2RT__CU_MM_GELU_K 0.7978845608028654f /* sqrt(2/pi); same tanh form as the CPU */
__device__ __forceinline__ float gpt2rt__cu_mm_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(GPT2RT__CU_MM_GELU_K * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gpt2rt__cu_mm_dgelu(float x) {
    float th = tanhf(GPT2RT__CU_MM_GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GPT2RT__CU_MM_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
/* out (n) = gelu(pre (n)) */
template <typename T>
__global__ void gpt2rt__cu_mm_gelu_kernel(T *out, const T *pre, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gpt2rt__cu_to<T>(gpt2rt__cu_mm_gelu(gpt2rt__cu_f(pre[i])));
}
/* d (n) *= gelu'(pre (n)) */
template <typename T>
__global__ void gpt2rt__cu_mm_dgelu_kernel(T *d, const T *pre, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = gpt2rt__cu_to<T>(gpt2rt__cu_mm_dgelu(gpt2rt__cu_f(pre[i])) * gpt2rt__cu_f(d[i]));
}
/* y (n) += x (n) */
__global__ void gpt2rt__cu_mm_add_kernel(float *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}
static unsigned gpt2rt__cu_mm_grid(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? (b < 1 ? 1 : b) : 65536);
}
static cudaError_t gpt2rt__cu_mm_gelu_launch(cudaDataType_t t, void *out, const void *pre, int64_t n, cudaStream_t s) {
    if (t == CUDA_R_32F) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<float>)((float *)out, (const float *)pre, n);
    else if (t == CUDA_R_16BF) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<__nv_bfloat16>)((__nv_bfloat16 *)out, (const __nv_bfloat16 *)pre, n);
    else GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<__half>)((__half *)out, (const __half *)pre, n);
    return cudaGetLastError();
}
static cudaError_t gpt2rt__cu_mm_dgelu_launch(cudaDataType_t t, void *d, const void *pre, int64_t n, cudaStream_t s) {
    if (t == CUDA_R_32F) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<float>)((float *)d, (const float *)pre, n);
    else if (t == CUDA_R_16BF) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<__nv_bfloat16>)((__nv_bfloat16 *)d, (const __nv_bfloat16 *)pre, n);
    else GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<__half>)((__half *)d, (const __half *)pre, n);
    return cudaGetLastError();
}
/* db (OC) (+)= column sums of x (R,OC) of type t: gpt2rt__cu_bias_backward (ops.cuh) with
   its partial sums in the cuBLASLt workspace, which no product uses between two calls on
   the stream; the rows per partial depend only on (R, OC) and the workspace's size */
static cudaError_t gpt2rt__cu_mm_colsum_launch(const gpt2rt__cu_blas *b, cudaDataType_t t, float *db, const void *x,
                                               int64_t R, int64_t OC, int accumulate) {
    float *parts = (float *)b->workspace;
    int64_t rows = gpt2rt__cu_bias_backward_rows(R, OC, b->workspace_bytes);
    if (!rows) return cudaErrorInvalidValue; /* OC floats exceed the workspace: never at GPT-2's widths */
    if (t == CUDA_R_32F) return gpt2rt__cu_bias_backward<float>(db, (const float *)x, parts, R, OC, rows, accumulate, b->stream);
    if (t == CUDA_R_16BF)
        return gpt2rt__cu_bias_backward<__nv_bfloat16>(db, (const __nv_bfloat16 *)x, parts, R, OC, rows, accumulate, b->stream);
    return gpt2rt__cu_bias_backward<__half>(db, (const __half *)x, parts, R, OC, rows, accumulate, b->stream);
}

/* ------------------------------------------------------------------ handle */
/* workspace: device memory of workspace_bytes (GPT2RT__CU_BLAS_WORKSPACE), 256-byte aligned */
static int gpt2rt__cu_blas_init(gpt2rt__cu_blas *b, void *workspace, size_t workspace_bytes, cudaStream_t stream,
                                char *err, size_t cap) {
    cublasStatus_t s;
    memset(b, 0, sizeof(*b));
    if (!workspace || ((uintptr_t)workspace % 256) != 0) {
        if (err && cap) snprintf(err, cap, "gpt2rt__cu_blas_init: workspace %p must be non-NULL and 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    s = cublasLtCreate(&b->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (err && cap) snprintf(err, cap, "cublasLtCreate: %s (%d)", gpt2rt__cu_blas_status_name(s), (int)s);
        b->lt = NULL;
        return s;
    }
    b->workspace = workspace;
    b->workspace_bytes = workspace_bytes;
    b->stream = stream;
    b->tf32 = 0;
    b->fuse = GPT2RT__CU_MM_FUSE_DEFAULT;
    b->reduction_mask = GPT2RT__CU_BLAS_REDUCTION_DEFAULT;
    b->reduction_mask_w = GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT;
    return 0;
}

static void gpt2rt__cu_mm_plan_free(gpt2rt__cu_mm_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    p->la = p->lb = p->lc = NULL;
    p->desc = NULL;
}

/* drop the cached plans (e.g. after changing tf32 / fuse / reduction_mask: not needed,
   those are part of the key, but frees host memory of unused shapes) */
static void gpt2rt__cu_blas_clear_plans(gpt2rt__cu_blas *b) {
    for (int i = 0; i < b->n_plans; i++) gpt2rt__cu_mm_plan_free(&b->plans[i]);
    b->n_plans = 0;
}

static void gpt2rt__cu_blas_destroy(gpt2rt__cu_blas *b) {
    gpt2rt__cu_blas_clear_plans(b);
    if (b->lt) cublasLtDestroy(b->lt);
    b->lt = NULL;
}

/* ------------------------------------------------------------------ planning */
#define GPT2RT__CU_MM_CK(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { st = s_; what = #call; goto fail; } } while (0)

/* Build desc + layouts for key with epilogue epi and ask the heuristic for an algorithm.
   bias / aux: the real pointers (the heuristic reads their alignment). Returns 0,
   CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists, or another status; *what names
   the failing call. */
static int gpt2rt__cu_mm_make_plan(gpt2rt__cu_blas *b, const gpt2rt__cu_mm_key *key, int epi, const void *bias,
                                   const void *aux, gpt2rt__cu_mm_plan *p, const char **what_out) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = "";
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0, i, found = -1;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint64_t a_rows, a_cols, b_rows, b_cols;
    int64_t lda, ldb, ldc = key->m;
    uint32_t epilogue = (uint32_t)epi, al = key->align_abcd, mask = key->reduction_mask;
    uint64_t ws = b->workspace_bytes;

    memset(p, 0, sizeof(*p));
    p->key = *key;
    p->epilogue = epi;
    /* stored shapes (before op), see the mapping at the top */
    if (key->op == GPT2RT__CU_MM_FWD) { /* A = W: (k x m) stored, op T; B = inp: (k x n), op N */
        ta = CUBLAS_OP_T; a_rows = (uint64_t)key->k; a_cols = (uint64_t)key->m; lda = key->k;
        b_rows = (uint64_t)key->k; b_cols = (uint64_t)key->n; ldb = key->k;
    } else if (key->op == GPT2RT__CU_MM_BWD_IN) { /* A = W: (m x k), op N; B = dout: (k x n), op N */
        a_rows = (uint64_t)key->m; a_cols = (uint64_t)key->k; lda = key->m;
        b_rows = (uint64_t)key->k; b_cols = (uint64_t)key->n; ldb = key->k;
    } else { /* A = inp: (m x k), op N; B = dout: (n x k) stored, op T */
        tb = CUBLAS_OP_T;
        a_rows = (uint64_t)key->m; a_cols = (uint64_t)key->k; lda = key->m;
        b_rows = (uint64_t)key->n; b_cols = (uint64_t)key->k; ldb = key->n;
    }
    GPT2RT__CU_MM_CK(cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)key->compute, CUDA_R_32F));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_BGRADB)
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld_aux = key->m; /* aux has D's layout */
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->la, (cudaDataType_t)key->ab_type, a_rows, a_cols, lda));
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->lb, (cudaDataType_t)key->ab_type, b_rows, b_cols, ldb));
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType_t)key->cd_type, (uint64_t)key->m, (uint64_t)key->n, ldc));

    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceCreate(&pref));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)));

    memset(res, 0, sizeof(res));
    st = cublasLtMatmulAlgoGetHeuristic(b->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 8, res, &n_res);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) { what = "cublasLtMatmulAlgoGetHeuristic"; goto fail; }
    /* the heuristic's first usable answer (its ranking is deterministic for fixed inputs) */
    for (i = 0; st == CUBLAS_STATUS_SUCCESS && i < n_res; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= b->workspace_bytes) { found = i; break; }
    if (found < 0) { st = CUBLAS_STATUS_NOT_SUPPORTED; what = "cublasLtMatmulAlgoGetHeuristic (no algorithm)"; goto fail; }
    p->algo = res[found].algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return 0;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    gpt2rt__cu_mm_plan_free(p);
    *what_out = what;
    return (int)st;
}

/* the blas->fuse bit that allows epilogue epi (0: a plain product or bias, always allowed) */
static unsigned gpt2rt__cu_mm_fuse_bit(int epi) {
    switch (epi) {
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return GPT2RT__CU_MM_FB_GELU;
    case CUBLASLT_EPILOGUE_DGELU: return GPT2RT__CU_MM_FB_DGELU;
    case CUBLASLT_EPILOGUE_BGRADB: return GPT2RT__CU_MM_FB_BGRAD;
    default: return ~0u;
    }
}

/* The cached plan for key (made on first use). want: the fused epilogue; plain: what
   remains of it when the fused one is unavailable (the caller then runs the kernel). */
static int gpt2rt__cu_mm_get_plan(gpt2rt__cu_blas *b, const gpt2rt__cu_mm_key *key, int plain, const void *bias,
                                  const void *aux, gpt2rt__cu_mm_plan **out, const char **what) {
    gpt2rt__cu_mm_plan tmp, *p;
    int i, st, want = key->epilogue;
    for (i = 0; i < b->n_plans; i++)
        if (memcmp(&b->plans[i].key, key, sizeof(*key)) == 0) { *out = &b->plans[i]; return 0; }
    if (b->n_plans == GPT2RT__CU_BLAS_MAX_PLANS) { /* full: recycle the oldest slot (still correct, only slower) */
        gpt2rt__cu_mm_plan_free(&b->plans[0]);
        memmove(&b->plans[0], &b->plans[1], sizeof(b->plans[0]) * (GPT2RT__CU_BLAS_MAX_PLANS - 1));
        b->n_plans--;
    }
    if (!(key->fuse & gpt2rt__cu_mm_fuse_bit(want))) want = plain;
    st = gpt2rt__cu_mm_make_plan(b, key, want, bias, aux, &tmp, what);
    /* a fused epilogue this cuBLASLt cannot plan takes the plain product and the kernel
       after it: no algorithm (NOT_SUPPORTED), or a refusal of the epilogue itself or of
       its vector (INVALID_VALUE from a version without DGELU, or one that will not write
       BGRADB's bias gradient into an fp32 vector beside 16-bit inputs) */
    if (st != CUBLAS_STATUS_SUCCESS && want != plain)
        st = gpt2rt__cu_mm_make_plan(b, key, plain, bias, aux, &tmp, what);
    if (st) return st;
    p = &b->plans[b->n_plans++];
    *p = tmp;
    *out = p;
    return 0;
}

static void gpt2rt__cu_mm_key_init(gpt2rt__cu_mm_key *k, const gpt2rt__cu_blas *b, int op, int epi,
                                   cudaDataType_t ab, cudaDataType_t cd, int64_t m, int64_t n, int64_t kk) {
    memset(k, 0, sizeof(*k));
    k->op = op;
    k->epilogue = epi;
    k->ab_type = (int32_t)ab;
    k->cd_type = (int32_t)cd;
    k->compute = (int32_t)((ab == CUDA_R_32F && b->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    k->fuse = b->fuse;
    k->m = m;
    k->n = n;
    k->k = kk;
    k->reduction_mask = b->reduction_mask;
    k->align_bias = 256;
    k->align_aux = 256;
}

/* D = alpha op(A) op(B) + beta C with the plan's desc; bias / aux pointers set per call */
static int gpt2rt__cu_mm_exec(gpt2rt__cu_blas *b, gpt2rt__cu_mm_plan *p, const void *A, const void *B, void *D,
                              float beta, const void *bias, const void *aux, const char **what) {
    const float alpha = 1.0f;
    cublasStatus_t st;
    int e = p->epilogue;
    if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_BGRADB) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        if (st) { *what = "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"; return (int)st; }
    }
    if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
        if (st) { *what = "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"; return (int)st; }
    }
    st = cublasLtMatmul(b->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo,
                        b->workspace, b->workspace_bytes, b->stream);
    if (st) { *what = "cublasLtMatmul"; return (int)st; }
    return 0;
}

static int gpt2rt__cu_mm_check_args(cudaDataType_t t, int64_t BT, int64_t IC, int64_t OC) {
    if (BT <= 0 || IC <= 0 || OC <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) return CUBLAS_STATUS_INVALID_VALUE;
    return 0;
}

/* ------------------------------------------------------------------ the three ops */

/* Forward of a linear layer, all buffers of type t (row-major):
     out      (BT,OC) = inp (BT,IC) @ w^T + bias     w (OC,IC), bias (OC) or NULL
   with pre_gelu (BT,OC) != NULL:
     pre_gelu (BT,OC) = inp @ w^T + bias;  out = gelu_tanh(pre_gelu)   (GELU_AUX[_BIAS])
   LM head: bias = NULL, pre_gelu = NULL, OC = Vp. Returns 0 or a cublasStatus_t /
   cudaError_t (err says which call). */
static int gpt2rt__cu_matmul_forward(gpt2rt__cu_blas *b, cudaDataType_t t,
                                     void *out,            /* (BT,OC) */
                                     void *pre_gelu,       /* (BT,OC) or NULL */
                                     const void *inp,      /* (BT,IC) */
                                     const void *w,        /* (OC,IC) */
                                     const void *bias,     /* (OC) or NULL */
                                     int64_t BT, int64_t IC, int64_t OC, char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_FWD;
    int want, plain, st;
    const char *what = "";
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if (pre_gelu) want = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else want = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    plain = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !out || !inp || !w || out == pre_gelu)
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_forward arguments", op, t, BT, IC, OC, want,
                                  CUBLAS_STATUS_INVALID_VALUE, 0);
    /* the aux leading dimension must be a multiple of 8: otherwise unfused */
    if (pre_gelu && OC % 8 != 0) want = plain;
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, t, OC, BT, IC);
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(inp), gpt2rt__cu_mm_align(w)),
                                           gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(out), gpt2rt__cu_mm_align(pre_gelu)));
    key.align_bias = gpt2rt__cu_mm_align(bias);
    key.align_aux = gpt2rt__cu_mm_align(pre_gelu);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, bias, pre_gelu, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if (pre_gelu && p->epilogue == plain) { /* unfused: product (+bias) into pre_gelu, then the kernel */
        b->fallbacks |= key.fuse & GPT2RT__CU_MM_FB_GELU;
        if ((st = gpt2rt__cu_mm_exec(b, p, w, inp, pre_gelu, 0.0f, bias, NULL, &what)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
        if ((st = (int)gpt2rt__cu_mm_gelu_launch(t, out, pre_gelu, BT * OC, b->stream)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_gelu_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
        return 0;
    }
    if ((st = gpt2rt__cu_mm_exec(b, p, w, inp, out, 0.0f, bias, pre_gelu, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    return 0;
}

/* Input gradient, type t (row-major):
     dinp (BT,IC) = dout (BT,OC) @ w (OC,IC)
   with pre_gelu (BT,IC) != NULL (only for c_proj of the MLP, IC = 4C):
     dinp = (dout @ w) * gelu'(pre_gelu)   (DGELU; pre_gelu = the forward's aux, fch)
   dinp must not alias dout, w or pre_gelu. */
static int gpt2rt__cu_matmul_backward_input(gpt2rt__cu_blas *b, cudaDataType_t t,
                                            void *dinp,           /* (BT,IC) */
                                            const void *dout,     /* (BT,OC) */
                                            const void *w,        /* (OC,IC) */
                                            const void *pre_gelu, /* (BT,IC) or NULL */
                                            int64_t BT, int64_t IC, int64_t OC, char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_BWD_IN;
    int want = pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, plain = CUBLASLT_EPILOGUE_DEFAULT, st;
    const char *what = "";
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !dinp || !dout || !w || dinp == pre_gelu)
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_backward_input arguments", op, t, BT, IC, OC, want,
                                  CUBLAS_STATUS_INVALID_VALUE, 0);
    if (pre_gelu && IC % 8 != 0) want = plain;
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, t, IC, BT, OC);
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(dinp), gpt2rt__cu_mm_align(dout)),
                                           gpt2rt__cu_mm_align(w));
    key.align_aux = gpt2rt__cu_mm_align(pre_gelu);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, NULL, pre_gelu, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if ((st = gpt2rt__cu_mm_exec(b, p, w, dout, dinp, 0.0f, NULL, pre_gelu, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    if (pre_gelu && p->epilogue == plain) {
        b->fallbacks |= key.fuse & GPT2RT__CU_MM_FB_DGELU;
        if ((st = (int)gpt2rt__cu_mm_dgelu_launch(t, dinp, pre_gelu, BT * IC, b->stream)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_dgelu_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
    }
    return 0;
}

/* Weight (and bias) gradient; dout, inp of type t, dw / db / db_scratch fp32 (row-major):
     accumulate = 1:  dw (OC,IC) += dout^T (OC,BT) @ inp (BT,IC);  db (OC) += sum_t dout[t,:]
     accumulate = 0:  dw  = dout^T @ inp;                          db  = sum_t dout[t,:]
   db = NULL: no bias. cuBLASLt's BGRADB overwrites its vector, so with accumulate = 1
   it writes db_scratch (OC floats, device) and a kernel adds it into db; db_scratch
   is not needed otherwise (may be NULL). */
static int gpt2rt__cu_matmul_backward_weight(gpt2rt__cu_blas *b, cudaDataType_t t,
                                             float *dw,          /* (OC,IC) fp32 */
                                             float *db,          /* (OC) fp32 or NULL */
                                             float *db_scratch,  /* (OC) fp32, needed when accumulate && db */
                                             const void *dout,   /* (BT,OC) */
                                             const void *inp,    /* (BT,IC) */
                                             int64_t BT, int64_t IC, int64_t OC, int accumulate,
                                             char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_BWD_W;
    int want = db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, plain = CUBLASLT_EPILOGUE_DEFAULT, st;
    const char *what = "";
    float *bvec = (db && accumulate) ? db_scratch : db; /* what BGRADB writes */
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !dw || !dout || !inp || (db && accumulate && !db_scratch))
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_backward_weight arguments (db_scratch is required when accumulating db)",
                                  op, t, BT, IC, OC, want, CUBLAS_STATUS_INVALID_VALUE, 0);
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, CUDA_R_32F, IC, OC, BT);
    key.reduction_mask = b->reduction_mask_w;
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(dw), gpt2rt__cu_mm_align(dout)),
                                           gpt2rt__cu_mm_align(inp));
    key.align_bias = gpt2rt__cu_mm_align(bvec);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, bvec, NULL, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if ((st = gpt2rt__cu_mm_exec(b, p, inp, dout, dw, accumulate ? 1.0f : 0.0f, bvec, NULL, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    if (!db) return 0;
    if (p->epilogue == plain) { /* no BGRADB: deterministic column sums straight into db */
        b->fallbacks |= key.fuse & GPT2RT__CU_MM_FB_BGRAD;
        if ((st = (int)gpt2rt__cu_mm_colsum_launch(b, t, db, dout, BT, OC, accumulate)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_bias_backward (column sums)", op, t, BT, IC, OC, p->epilogue, st, 1);
    } else if (accumulate) {
        GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(OC), 256, 0, b->stream, gpt2rt__cu_mm_add_kernel)(db, db_scratch, OC);
        if ((st = (int)cudaGetLastError()) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_add_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
    }
    return 0;
}
#undef GPT2RT__CU_MM_CK

#endif /* GPT2RT__SRC_CUDA_MATMUL_CUH */
