/* kernels/emu/test_emu.cpp - checks of the CUDA emulator itself, before anything of
   gpt2rt.h runs on it: the fragment layouts of mma.sync, ldmatrix and wgmma (descriptors,
   swizzles) against a plain product, cp.async landing at its wait, races showing up as
   order dependence, the faults a GPU traps on (exited lane, diverged warp, barrier
   deadlock, a warpgroup MMA a warp misses or never waits for), launch errors,
   deferred streams, the cuBLASLt model against a row-major reference, NCCL's
   collectives for two ranks in one thread, and the 16-bit conversions.
   Prints one "ok   " / "FAIL " line per check and "test_emu: P passed, F failed".
     g++ -std=c++17 -Ikernels/emu/include -include gpt2rt_emu.h -include nccl.h \
         -fno-extern-tls-init kernels/emu/test_emu.cpp -o build/test_emu */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>

static int passed = 0, failed = 0;
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s", ok ? "ok   " : "FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++; else failed++;
}
static uint64_t rng = 88172645463325252ull;
static float urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

/* ---------------------------------------------------------------- mma.sync, ldmatrix */
/* one warp: A (16x16) and B^T (8x16) row-major in global memory; each lane packs its fragment
   registers by the PTX ISA's layout and runs one mma; the warp writes D (16x8) row-major */
template <int F16>
__global__ void k_mma(float *D, const uint16_t *A, const uint16_t *Bt, const float *C) {
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    auto pk = [](uint16_t lo, uint16_t hi) { return (unsigned)lo | ((unsigned)hi << 16); };
    unsigned a[4] = {pk(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]), pk(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                     pk(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]), pk(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
    unsigned b0 = pk(Bt[g * 16 + 2 * t], Bt[g * 16 + 2 * t + 1]), b1 = pk(Bt[g * 16 + 2 * t + 8], Bt[g * 16 + 2 * t + 9]);
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    gpt2rt_emu_mma_m16n8k16(c, a, b0, b1, F16);
    D[g * 8 + 2 * t] = c[0]; D[g * 8 + 2 * t + 1] = c[1]; D[(g + 8) * 8 + 2 * t] = c[2]; D[(g + 8) * 8 + 2 * t + 1] = c[3];
}
static float h16(int f16, uint16_t x) { return f16 ? __half2float(__ushort_as_half(x)) : __bfloat162float(__ushort_as_bfloat16(x)); }
static uint16_t to16(int f16, float v) { return f16 ? __half_as_ushort(__float2half_rn(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

static void test_mma(int f16) {
    std::vector<uint16_t> A(256), Bt(128);
    std::vector<float> C(128), D(128);
    for (auto &x : A) x = to16(f16, urand());
    for (auto &x : Bt) x = to16(f16, urand());
    for (auto &x : C) x = urand();
    uint16_t *dA, *dB;
    float *dC, *dD;
    cudaMalloc(&dA, 512); cudaMalloc(&dB, 256); cudaMalloc(&dC, 512); cudaMalloc(&dD, 512);
    cudaMemcpy(dA, A.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bt.data(), 256, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), 512, cudaMemcpyHostToDevice);
    if (f16) GPT2RT__LAUNCH(1, 32, 0, 0, k_mma<1>)(dD, dA, dB, dC);
    else GPT2RT__LAUNCH(1, 32, 0, 0, k_mma<0>)(dD, dA, dB, dC);
    cudaMemcpy(D.data(), dD, 512, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float s = C[(size_t)(i * 8 + j)];
            for (int k = 0; k < 16; k++) s += h16(f16, A[(size_t)(i * 16 + k)]) * h16(f16, Bt[(size_t)(j * 16 + k)]);
            bad += memcmp(&s, &D[(size_t)(i * 8 + j)], 4) != 0;
        }
    check(!bad, "mma.sync m16n8k16 %s: D = C + A B from the fragment layouts, bitwise equal to a plain product (%d of 128 differ)",
          f16 ? "f16" : "bf16", bad);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD);
}

/* ldmatrix x4 (and .trans) of four 8x8 matrices kept in shared memory, row stride 24 */
__global__ void k_ldsm(unsigned *out, const uint16_t *src, int trans) {
    __shared__ __align__(16) uint16_t sm[32 * 24];
    int l = threadIdx.x;
    for (int i = l; i < 32 * 24; i += 32) sm[i] = src[i];
    __syncwarp();
    unsigned r[4];
    gpt2rt_emu_ldmatrix_x4(r, sm + l * 24, trans); /* lane l gives row l%8 of matrix l/8 */
    for (int i = 0; i < 4; i++) out[l * 4 + i] = r[i];
}
static void test_ldmatrix(void) {
    std::vector<uint16_t> src(32 * 24);
    for (size_t i = 0; i < src.size(); i++) src[i] = (uint16_t)(i * 2654435761u >> 7);
    uint16_t *d;
    unsigned *o;
    cudaMalloc(&d, src.size() * 2); cudaMalloc(&o, 32 * 16);
    cudaMemcpy(d, src.data(), src.size() * 2, cudaMemcpyHostToDevice);
    for (int trans = 0; trans < 2; trans++) {
        GPT2RT__LAUNCH(1, 32, 0, 0, k_ldsm)(o, d, trans);
        unsigned r[128];
        cudaMemcpy(r, o, sizeof r, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                /* matrix i row rr is src row 8i+rr; lane l holds (l/4, 2(l%4)..+1), or its transpose */
                int row = l / 4, col = 2 * (l % 4);
                uint16_t lo = trans ? src[(size_t)((8 * i + col) * 24 + row)] : src[(size_t)((8 * i + row) * 24 + col)];
                uint16_t hi = trans ? src[(size_t)((8 * i + col + 1) * 24 + row)] : src[(size_t)((8 * i + row) * 24 + col + 1)];
                bad += r[l * 4 + i] != ((unsigned)lo | ((unsigned)hi << 16));
            }
        check(!bad, "ldmatrix.x4%s: every lane's registers as the PTX ISA lays them out (%d of 128 differ)", trans ? ".trans" : "", bad);
    }
    cudaFree(d); cudaFree(o);
}

/* cp.async lands at its wait_group, not at issue: a read before the wait sees the old bytes */
__global__ void k_cp(float *out, const float *src) {
    __shared__ __align__(16) float sm[4];
    sm[0] = sm[1] = sm[2] = sm[3] = -1.0f;
    gpt2rt_emu_cp_async16(sm, src, 16);
    gpt2rt_emu_cp_commit();
    out[0] = sm[0];
    gpt2rt_emu_cp_wait(0);
    out[1] = sm[0];
    gpt2rt_emu_cp_async16(sm, src, 4); /* src-size 4: the other 12 bytes are zero-filled */
    gpt2rt_emu_cp_commit();
    gpt2rt_emu_cp_wait(0);
    out[2] = sm[1];
}
static void test_cp_async(void) {
    float h[4] = {7, 8, 9, 10}, r[3], *d, *o;
    cudaMalloc(&d, 16); cudaMalloc(&o, 12);
    cudaMemcpy(d, h, 16, cudaMemcpyHostToDevice);
    gpt2rt_emu::set_order(0, 1); /* the forward order lands copies at the wait (reverse: at the issue) */
    GPT2RT__LAUNCH(1, 1, 0, 0, k_cp)(o, d);
    cudaMemcpy(r, o, 12, cudaMemcpyDeviceToHost);
    gpt2rt_emu::set_order(-1, 1);
    check(r[0] == -1.0f && r[1] == 7.0f && r[2] == 0.0f,
          "cp.async: before wait_group the destination is unchanged (%g), after it the copy (%g); src-size 4 zero-fills (%g)",
          r[0], r[1], r[2]);
    cudaFree(d); cudaFree(o);
}

/* ---------------------------------------------------------------- races and faults */
/* each thread writes its slot, then reads its neighbour's: without the barrier the result
   depends on the order in which the threads run */
__global__ void k_neighbour(float *out, int barrier) {
    __shared__ float sm[64];
    int t = threadIdx.x;
    sm[t] = (float)t;
    if (barrier) __syncthreads();
    out[t] = sm[(t + 1) % 64];
    if (!barrier) sm[t] = -1.0f; /* so that a late reader sees the wrong value */
}
static int run_neighbour(int order, int barrier, float *h) {
    float *o;
    cudaMalloc(&o, 256);
    gpt2rt_emu::set_order(order, 7);
    GPT2RT__LAUNCH(1, 64, 0, 0, k_neighbour)(o, barrier);
    cudaError_t e = cudaMemcpy(h, o, 256, cudaMemcpyDeviceToHost);
    cudaFree(o);
    return e == cudaSuccess;
}
static void test_orders(void) {
    float f[64], r[64], x[64];
    run_neighbour(0, 1, f);
    run_neighbour(1, 1, r);
    run_neighbour(2, 1, x);
    check(!memcmp(f, r, sizeof f) && !memcmp(f, x, sizeof f) && f[63] == 0.0f,
          "a kernel with its __syncthreads: forward, reverse and random fiber orders bitwise equal");
    run_neighbour(0, 0, f);
    run_neighbour(1, 0, r);
    check(memcmp(f, r, sizeof f) != 0, "the same kernel without its __syncthreads: forward and reverse orders differ (the race shows)");
    gpt2rt_emu::set_order(-1, 1);
}

__global__ void k_exited_lane(float *out) {
    if (threadIdx.x == 5) return;
    float v = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}
__global__ void k_diverged(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    else v = (float)__ballot_sync(0xffffffffu, threadIdx.x & 1);
    out[threadIdx.x] = v;
}
/* warp 1 waits in a shuffle for lane 33, which waits in __syncthreads for warp 1 */
__global__ void k_deadlock(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 32 || threadIdx.x == 33) __syncthreads();
    else v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
__global__ void k_oob_shfl(float *out) { out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1.0f, 20); }
/* one m64n8k16 wgmma (A zero in registers, B from an 8 x 16 no-swizzle tile) by the threads
   that call it; skip: warp 3 of the group returns first; nowait: never waited for */
__device__ void wg_one(int wait) {
    __shared__ __align__(1024) unsigned char sm[1024];
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) sm[i] = 0;
    __syncthreads();
    float d[4] = {0, 0, 0, 0};
    const unsigned a[4] = {0, 0, 0, 0};
    uint64_t db = (((uint32_t)(uintptr_t)sm & 0x3FFFFu) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(128 >> 4) << 32);
    gpt2rt_emu_wgmma(d, 8, a, 0, db, 0, 0, 0, 0, sm);
    gpt2rt_emu_wgmma_commit();
    if (wait) gpt2rt_emu_wgmma_wait(0);
}
__global__ void k_wg_skip(float *out) {
    if (threadIdx.x >= 96) return;
    wg_one(1);
    out[threadIdx.x % 64] = 1.0f;
}
__global__ void k_wg_nowait(float *out) { wg_one(0); out[threadIdx.x % 64] = 1.0f; }
__global__ void k_wg_partial(float *out) { wg_one(1); out[threadIdx.x % 64] = 1.0f; }
static void test_faults(void) {
    float *o;
    cudaMalloc(&o, 64 * 4);
    struct { const char *what; void (*fn)(float *); int threads; } cases[] = {
        {"a shuffle that reads an exited lane", k_exited_lane, 32},
        {"a diverged warp (shuffle against ballot)", k_diverged, 32},
        {"__syncthreads that some threads never reach", k_deadlock, 64},
        {"a shuffle from a lane outside its mask", k_oob_shfl, 16},
        {"a wgmma that one warp of the warpgroup never reaches", k_wg_skip, 128},
        {"a thread that exits with a wgmma it never waited for", k_wg_nowait, 128},
        {"a wgmma in a block of 96 threads (not a whole warpgroup)", k_wg_partial, 96},
    };
    for (auto &c : cases) {
        fprintf(stderr, "(test_emu: the next emu: line is expected: %s)\n", c.what);
        GPT2RT__LAUNCH(1, c.threads, 0, 0, c.fn)(o);
        cudaError_t launch = cudaGetLastError(), sync = cudaDeviceSynchronize(), after = cudaGetLastError();
        check(launch == cudaSuccess && sync == cudaErrorLaunchFailure && after == cudaErrorLaunchFailure,
              "%s: launch ok, then cudaErrorLaunchFailure at the sync and after (sticky): %s, %s, %s", c.what,
              cudaGetErrorName(launch), cudaGetErrorName(sync), cudaGetErrorName(after));
        gpt2rt_emu::reset_sticky();
    }
    cudaFree(o);
}

__global__ void k_fill(float *x, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
__global__ void k_copy(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
static void test_launch_errors(void) {
    float *x;
    cudaMalloc(&x, 4096);
    GPT2RT__LAUNCH(1, 2048, 0, 0, k_fill)(x, 1, 0.0f);
    cudaError_t a = cudaGetLastError(), a2 = cudaGetLastError();
    GPT2RT__LAUNCH(0, 32, 0, 0, k_fill)(x, 1, 0.0f);
    cudaError_t b = cudaGetLastError();
    GPT2RT__LAUNCH(1, 32, 64 << 10, 0, k_fill)(x, 1, 0.0f);
    cudaError_t c = cudaGetLastError();
    cudaFuncSetAttribute(k_fill, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
    GPT2RT__LAUNCH(1, 32, 64 << 10, 0, k_fill)(x, 1, 0.0f);
    cudaError_t d = cudaGetLastError();
    cudaError_t e = cudaFuncSetAttribute(k_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10);
    (void)cudaGetLastError();
    check(a == cudaErrorInvalidConfiguration && a2 == cudaSuccess && b == cudaErrorInvalidConfiguration &&
          c == cudaErrorInvalidValue && d == cudaSuccess && e == cudaErrorInvalidValue,
          "launch errors as a GPU reports them: 2048 threads %s (then cleared: %s), 0 blocks %s, 64 KiB smem %s, "
          "after the opt-in %s, an opt-in over 227 KiB %s", cudaGetErrorName(a), cudaGetErrorName(a2), cudaGetErrorName(b),
          cudaGetErrorName(c), cudaGetErrorName(d), cudaGetErrorName(e));
    float h[4] = {0};
    cudaError_t k = cudaMemcpy(h, x, 16, cudaMemcpyHostToDevice); /* h is not device memory */
    check(k == cudaErrorInvalidValue, "cudaMemcpy HostToDevice into host memory: %s", cudaGetErrorName(k));
    cudaFree(x);
}

/* stream B copies what stream A fills: right only when B waits for A's event */
static void test_streams(void) {
    const int n = 256;
    float *x, *y, h[n];
    cudaStream_t A, B;
    cudaEvent_t ev;
    cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4);
    cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    for (int wait = 0; wait < 2; wait++) {
        GPT2RT__LAUNCH(1, n, 0, B, k_fill)(y, n, 0.0f);
        cudaStreamSynchronize(B);
        GPT2RT__LAUNCH(2, 128, 0, A, k_fill)(x, n, 3.0f + wait);
        cudaEventRecord(ev, A);
        if (wait) cudaStreamWaitEvent(B, ev, 0);
        GPT2RT__LAUNCH(2, 128, 0, B, k_copy)(y, x, n);
        cudaStreamSynchronize(B);
        cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
        if (!wait) check(h[0] != 3.0f, "deferred streams: without cudaStreamWaitEvent stream B copies before A's fill (%g, not 3)", h[0]);
        else check(h[0] == 4.0f && h[n - 1] == 4.0f, "with cudaStreamWaitEvent stream B sees A's fill (%g)", h[0]);
        cudaStreamSynchronize(A);
    }
    /* the legacy default stream orders against blocking streams */
    cudaStream_t C;
    cudaStreamCreate(&C);
    GPT2RT__LAUNCH(2, 128, 0, C, k_fill)(x, n, 5.0f);
    cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
    check(h[0] == 5.0f, "a blocking stream's kernel is done when a cudaMemcpy on the legacy stream reads (%g)", h[0]);
    GPT2RT__LAUNCH(2, 128, 0, A, k_fill)(x, n, 6.0f);
    cudaError_t q = cudaStreamQuery(A);
    cudaMemcpy(h, x, 4, cudaMemcpyDeviceToHost);
    check(q == cudaSuccess && h[0] == 6.0f, "cudaStreamQuery lets a stream finish (%s, %g)", cudaGetErrorName(q), h[0]);
    cudaStreamDestroy(A); cudaStreamDestroy(B); cudaStreamDestroy(C);
    cudaEventDestroy(ev);
    cudaFree(x); cudaFree(y);
}

/* ---------------------------------------------------------------- cuBLASLt */
/* out (R,OC) = inp (R,IC) W^T [+ bias] through the header's mapping (A = W op T, B = inp),
   against a row-major loop that sums over IC in increasing order, as the model does */
static void test_blas(void) {
    const int R = 5, IC = 7, OC = 3;
    float inp[R * IC], W[OC * IC], bias[OC], out[R * OC], aux[R * OC], pre[R * OC];
    for (auto &v : inp) v = urand();
    for (auto &v : W) v = urand();
    for (auto &v : bias) v = urand();
    float *d_inp, *d_W, *d_b, *d_out, *d_aux;
    cudaMalloc(&d_inp, sizeof inp); cudaMalloc(&d_W, sizeof W); cudaMalloc(&d_b, sizeof bias);
    cudaMalloc(&d_out, sizeof out); cudaMalloc(&d_aux, sizeof aux);
    cudaMemcpy(d_inp, inp, sizeof inp, cudaMemcpyHostToDevice);
    cudaMemcpy(d_W, W, sizeof W, cudaMemcpyHostToDevice);
    cudaMemcpy(d_b, bias, sizeof bias, cudaMemcpyHostToDevice);
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int i = 0; i < IC; i++) s += W[o * IC + i] * inp[r * IC + i];
            pre[r * OC + o] = s + bias[o];
        }
    const uint32_t epis[3] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
    for (int e = 0; e < 3; e++) {
        cublasLtMatmulDesc_t d;
        cublasLtMatrixLayout_t la, lb, lc;
        int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        int64_t ldaux = OC;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epis[e], 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d_b, sizeof d_b);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d_aux, sizeof d_aux);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, 8);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, IC, OC, IC);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, IC, R, IC);
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, OC, R, OC);
        float one = 1.0f, zero = 0.0f;
        cublasStatus_t s = cublasLtMatmul(h, d, &one, d_W, la, d_inp, lb, &zero, d_out, lc, d_out, lc, nullptr, nullptr, 0, 0);
        cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost);
        cudaMemcpy(aux, d_aux, sizeof aux, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < R * OC; i++) {
            float want = e == 0 ? pre[i] - bias[i % OC] : pre[i];
            if (e == 0) { float s2 = 0; int r = i / OC, o = i % OC; for (int k = 0; k < IC; k++) s2 += W[o * IC + k] * inp[r * IC + k]; want = s2; }
            if (e == 2) { bad += memcmp(&aux[i], &pre[i], 4) != 0; want = gpt2rt_emu::lt_gelu(pre[i]); }
            bad += memcmp(&out[i], &want, 4) != 0;
        }
        check(s == CUBLAS_STATUS_SUCCESS && !bad, "cuBLASLt forward W^T (transA = T) with epilogue %s: bitwise equal to a row-major loop (%d differ)",
              gpt2rt_emu::lt_epilogue_name(epis[e]), bad);
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(d);
    }
    /* weight gradient dW^T (IC x OC) += inp^T dout with BGRADB: transB = T, beta = 1 */
    {
        float dout[R * OC], dW[OC * IC], db[OC], W0[OC * IC];
        for (auto &v : dout) v = urand();
        for (auto &v : W0) v = urand();
        float *d_dout, *d_dW;
        cudaMalloc(&d_dout, sizeof dout); cudaMalloc(&d_dW, sizeof dW);
        cudaMemcpy(d_dout, dout, sizeof dout, cudaMemcpyHostToDevice);
        cudaMemcpy(d_dW, W0, sizeof W0, cudaMemcpyHostToDevice);
        cublasLtMatmulDesc_t d;
        cublasLtMatrixLayout_t la, lb, lc;
        int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
        uint32_t ep = CUBLASLT_EPILOGUE_BGRADB;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, 4);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d_b, sizeof d_b);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, IC, R, IC);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, OC, R, OC);
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, IC, OC, IC);
        float one = 1.0f;
        cublasLtMatmul(h, d, &one, d_inp, la, d_dout, lb, &one, d_dW, lc, d_dW, lc, nullptr, nullptr, 0, 0);
        cudaMemcpy(dW, d_dW, sizeof dW, cudaMemcpyDeviceToHost);
        cudaMemcpy(db, d_b, sizeof db, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int o = 0; o < OC; o++) {
            float sb = 0.0f;
            for (int r = 0; r < R; r++) sb += dout[r * OC + o];
            bad += memcmp(&sb, &db[o], 4) != 0;
            for (int i = 0; i < IC; i++) {
                float s = 0.0f;
                for (int r = 0; r < R; r++) s += inp[r * IC + i] * dout[r * OC + o];
                s = s + W0[o * IC + i];
                bad += memcmp(&s, &dW[o * IC + i], 4) != 0;
            }
        }
        check(!bad, "cuBLASLt weight gradient (transB = T, beta = 1) with BGRADB: dW += inp^T dout and db = column sums of dout, bitwise (%d differ)", bad);
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(d);
        cudaFree(d_dout); cudaFree(d_dW);
    }
    /* TF32: 1 + 2^-11 keeps 10 mantissa bits only as 1 (ties away: 1 + 2^-10) */
    check(gpt2rt_emu::lt_tf32(1.0f + 1.0f / 4096.0f) == 1.0f && gpt2rt_emu::lt_tf32(1.0f + 1.0f / 2048.0f) == 1.0f + 1.0f / 1024.0f,
          "TF32 rounding: 1+2^-12 -> 1, 1+2^-11 (a tie) -> 1+2^-10");
    cublasLtDestroy(h);
    cudaFree(d_inp); cudaFree(d_W); cudaFree(d_b); cudaFree(d_out); cudaFree(d_aux);
}

/* ---------------------------------------------------------------- NCCL */
static void test_nccl(void) {
    const int n = 6;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclComm_t c[2];
    float *buf[2], *big[2];
    cudaStream_t s[2];
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclGroupStart();
    ncclResult_t r0 = ncclSuccess;
    for (int r = 0; r < 2; r++) { cudaSetDevice(r); r0 = ncclCommInitRankConfig(&c[r], 2, id, r, &cfg); }
    ncclGroupEnd();
    ncclResult_t ae;
    ncclCommGetAsyncError(c[0], &ae);
    check(r0 == ncclSuccess && ae == ncclSuccess, "NCCL: two ranks initialised as one group from one thread (%s)", ncclGetErrorString(ae));
    for (int r = 0; r < 2; r++) {
        cudaSetDevice(r);
        cudaMalloc(&buf[r], n * 4); cudaMalloc(&big[r], 2 * n * 4);
        cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking);
        float h[2 * n];
        for (int i = 0; i < 2 * n; i++) h[i] = (float)(100 * r + i);
        cudaMemcpy(buf[r], h, n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(big[r], h, 2 * n * 4, cudaMemcpyHostToDevice);
    }
    ncclGroupStart();
    for (int r = 0; r < 2; r++) ncclAllReduce(buf[r], buf[r], n, ncclFloat, ncclSum, c[r], s[r]);
    ncclGroupEnd();
    cudaSetDevice(1);
    cudaStreamSynchronize(s[1]); /* rank 1's sync runs rank 0's stream up to the collective */
    float h0[2 * n], h1[2 * n];
    cudaMemcpy(h1, buf[1], n * 4, cudaMemcpyDeviceToHost);
    cudaSetDevice(0);
    cudaStreamSynchronize(s[0]);
    cudaMemcpy(h0, buf[0], n * 4, cudaMemcpyDeviceToHost);
    check(h0[0] == 100.0f && h1[5] == 110.0f && !memcmp(h0, h1, n * 4), "NCCL all-reduce in place: both ranks hold the sum (%g %g)", h0[0], h1[5]);
    for (int r = 0; r < 2; r++) ncclReduceScatter(big[r], big[r] + n * r, n, ncclFloat, ncclSum, c[r], s[r]);
    for (int r = 0; r < 2; r++) ncclAllGather(big[r] + n * r, big[r], n, ncclFloat, c[r], s[r]);
    for (int r = 0; r < 2; r++) { cudaSetDevice(r); cudaStreamSynchronize(s[r]); }
    cudaMemcpy(h0, big[0], 2 * n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(h1, big[1], 2 * n * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 2 * n; i++) bad += h0[i] != (float)(100 + 2 * i) || h1[i] != h0[i];
    check(!bad, "NCCL reduce-scatter then all-gather = all-reduce on both ranks (%d differ)", bad);
    for (int r = 0; r < 2; r++) ncclBroadcast(buf[r], buf[r], n * 4, ncclChar, 1, c[r], s[r]);
    for (int r = 0; r < 2; r++) { cudaSetDevice(r); cudaStreamSynchronize(s[r]); }
    float hb[2 * n];
    for (int i = 0; i < 2 * n; i++) hb[i] = -1;
    cudaSetDevice(0);
    cudaMemcpy(h0, buf[0], n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, buf[1], n * 4, cudaMemcpyDeviceToHost);
    check(!memcmp(h0, hb, n * 4), "NCCL broadcast from rank 1 (bytes)");
    /* rank 0 alone: its collective cannot complete, the stream stays not ready */
    ncclAllReduce(buf[0], buf[0], n, ncclFloat, ncclSum, c[0], s[0]);
    cudaError_t q = cudaStreamQuery(s[0]);
    check(q == cudaErrorNotReady, "a collective only rank 0 issued leaves its stream not ready (%s)", cudaGetErrorName(q));
    ncclCommAbort(c[1]);
    q = cudaStreamQuery(s[0]);
    ncclCommGetAsyncError(c[0], &ae);
    check(q == cudaSuccess && ae == ncclRemoteError, "after rank 1 aborts, rank 0's stream drains and its async error is %s", ncclGetErrorString(ae));
    ncclCommDestroy(c[0]);
    for (int r = 0; r < 2; r++) { cudaFree(buf[r]); cudaFree(big[r]); cudaStreamDestroy(s[r]); }
}

/* ---------------------------------------------------------------- 16-bit conversions */
static void test_convert(void) {
    float tie_bf = 1.0f + 1.0f / 256.0f;  /* halfway between bf16 1 and 1+2^-7: to even, 1 */
    float tie_bf2 = 1.0f + 3.0f / 256.0f; /* halfway between 1+2^-7 and 1+2^-6: to even, 1+2^-6 */
    float tie_h = 1.0f + 1.0f / 2048.0f;  /* halfway in fp16: to even, 1 */
    check(__bfloat162float(__float2bfloat16_rn(tie_bf)) == 1.0f && __bfloat162float(__float2bfloat16_rn(tie_bf2)) == 1.0f + 1.0f / 64.0f &&
          __half2float(__float2half_rn(tie_h)) == 1.0f && __half2float(__float2half_rn(1.0f + 3.0f / 2048.0f)) == 1.0f + 1.0f / 512.0f,
          "bf16 and fp16 round to nearest, ties to even");
    check(isinf(__half2float(__float2half_rn(65520.0f))) && __half2float(__float2half_rn(65519.0f)) == 65504.0f &&
          __half2float(__float2half_rn(5.960464477539063e-08f)) == 5.960464477539063e-08f &&
          __half2float(__float2half_rn(2.9802322387695312e-08f)) == 0.0f && isnan(__half2float(__float2half_rn(NAN))) &&
          isnan(__bfloat162float(__float2bfloat16_rn(NAN))),
          "fp16: 65520 overflows to inf, 65519 -> 65504, the smallest subnormal kept, half of it ties to 0; NaN stays NaN");
}

/* ---------------------------------------------------------------- wgmma (sm_90a) */
/* Operand layouts in shared memory, written out the way a kernel stores its tiles (not
   through the model's descriptor arithmetic); element (r, k) of an R x 64 operand (r: M or N,
   k: the full K = 64), k-slice ks = k / 16 is what one instruction reads:
     KSW128: 128-byte rows of 64 k, 16-byte chunk c of row r stored at chunk c ^ (r % 8)
     KSW64, KSW32: 64- (32-) byte rows of 32 (16) k, R rows per block of k, chunk XOR (r%8)/2 ((r%8)/4)
     KINT: no swizzle, 8 x 8 core matrices (128 bytes), core (r/8, k/8) at ((k/8) R/8 + r/8) 128
     MNSW128 (B only, r = n): 128-byte rows of 64 n per k, chunk (n%64)/8 ^ (k % 8), 64-wide n blocks 8 KiB apart */
enum { L_KSW128, L_KSW64, L_KSW32, L_KINT, L_MNSW128 };
static size_t wg_place(int L, int R, int r, int k) {
    switch (L) {
    case L_KSW128: return (size_t)(r * 128 + (((k / 8) ^ (r % 8)) * 16) + (k % 8) * 2);
    case L_KSW64: return (size_t)((k / 32) * R * 64 + r * 64 + ((((k % 32) / 8) ^ ((r % 8) >> 1)) * 16) + (k % 8) * 2);
    case L_KSW32: return (size_t)((k / 16) * R * 32 + r * 32 + ((((k % 16) / 8) ^ ((r % 8) >> 2)) * 16) + (k % 8) * 2);
    case L_KINT: return (size_t)(((k / 8) * (R / 8) + r / 8) * 128 + (r % 8) * 16 + (k % 8) * 2);
    default: return (size_t)((r / 64) * 8192 + k * 128 + ((((r % 64) / 8) ^ (k % 8)) * 16) + (r % 8) * 2);
    }
}
/* the descriptor (without its start address) and each k-slice's start offset for layout L */
static uint64_t wg_desc(int L, int R, uint32_t lbo, uint32_t sbo) {
    static const uint64_t sw[5] = {1, 2, 3, 0, 1};
    (void)R;
    return ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (sw[L] << 62);
}
static uint32_t wg_kstart(int L, int R, int ks) {
    switch (L) {
    case L_KSW128: return (uint32_t)(32 * ks);
    case L_KSW64: return (uint32_t)((ks / 2) * R * 64 + (ks % 2) * 32);
    case L_KSW32: return (uint32_t)(ks * R * 32);
    case L_KINT: return (uint32_t)(2 * ks * (R / 8) * 128);
    default: return (uint32_t)(ks * 2048);
    }
}
struct WgCase {
    int N, a_reg, trans_b, f16, scale_d0;
    uint64_t da, db;          /* descriptors without their start address */
    uint32_t a_k[4], b_k[4];  /* start offsets of the 4 k-slices in the A (at 0) and B (at 8 KiB) regions */
};
/* one warpgroup: the smem image is copied into a 1024-aligned array, d starts as C (in the
   accumulator layout), 4 k-slices are issued, committed and waited for; early: d[0] after
   the commit, before the wait */
__global__ void k_wgmma(float *D, float *early, const float *C, const unsigned char *img, const unsigned *areg, WgCase cs) {
    __shared__ __align__(1024) unsigned char sm[32768];
    const int i = threadIdx.x, w = i >> 5, gid = (i & 31) >> 2, tig = i & 3, N = cs.N;
    for (int j = i; j < 32768; j += 128) sm[j] = img[j];
    __syncthreads();
    if (i == 0) early[1] = (float)((uintptr_t)sm % 1024);
    float d[128];
    for (int e = 0; e < N / 2; e++) d[e] = C[(16 * w + gid + 8 * ((e >> 1) & 1)) * N + 8 * (e >> 2) + 2 * tig + (e & 1)];
    gpt2rt_emu_wgmma_fence();
    const uint32_t s = (uint32_t)(uintptr_t)sm;
    for (int ks = 0; ks < 4; ks++) {
        uint64_t da = cs.da | (((s + cs.a_k[ks]) & 0x3FFFF) >> 4), db = cs.db | (((s + 8192 + cs.b_k[ks]) & 0x3FFFF) >> 4);
        gpt2rt_emu_wgmma(d, N, cs.a_reg ? areg + (ks * 128 + i) * 4 : nullptr, da, db, ks ? 1 : cs.scale_d0, 0, cs.trans_b, cs.f16, sm);
    }
    gpt2rt_emu_wgmma_commit();
    if (i == 0) early[0] = d[0];
    gpt2rt_emu_wgmma_wait(0);
    for (int e = 0; e < N / 2; e++) D[(16 * w + gid + 8 * ((e >> 1) & 1)) * N + 8 * (e >> 2) + 2 * tig + (e & 1)] = d[e];
}
/* runs a case: A (64 x 64, layout LA or registers), B (64 k x N, layout LB); returns how many of
   the 64 x N results differ bitwise from C + A B summed in increasing k (or A B with scale_d0 0) */
static int wg_run(WgCase cs, int LA, int LB, int *early_ok, int *aligned) {
    const int N = cs.N, f16 = cs.f16;
    std::vector<uint16_t> A(64 * 64), B((size_t)64 * N);
    std::vector<float> C((size_t)64 * N), D((size_t)64 * N);
    std::vector<unsigned char> img(32768, 0);
    std::vector<unsigned> areg(4 * 128 * 4);
    for (auto &x : A) x = to16(f16, urand());
    for (auto &x : B) x = to16(f16, urand());
    for (auto &x : C) x = urand();
    for (int r = 0; r < 64; r++)
        for (int k = 0; k < 64; k++) memcpy(&img[wg_place(LA, 64, r, k)], &A[(size_t)(r * 64 + k)], 2);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 64; k++) memcpy(&img[8192 + wg_place(LB, N, n, k)], &B[(size_t)(k * N + n)], 2);
    auto pk = [&](int r, int k) { return (unsigned)A[(size_t)(r * 64 + k)] | ((unsigned)A[(size_t)(r * 64 + k + 1)] << 16); };
    for (int ks = 0; ks < 4; ks++)
        for (int i = 0; i < 128; i++) {
            int r = 16 * (i >> 5) + ((i & 31) >> 2), k = 16 * ks + 2 * (i & 3);
            unsigned *a = &areg[(size_t)(ks * 128 + i) * 4];
            a[0] = pk(r, k); a[1] = pk(r + 8, k); a[2] = pk(r, k + 8); a[3] = pk(r + 8, k + 8);
        }
    float *dD, *dE, *dC;
    unsigned char *dI;
    unsigned *dA;
    cudaMalloc(&dD, D.size() * 4); cudaMalloc(&dE, 8); cudaMalloc(&dC, C.size() * 4); cudaMalloc(&dI, img.size());
    cudaMalloc(&dA, areg.size() * 4);
    cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dI, img.data(), img.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dA, areg.data(), areg.size() * 4, cudaMemcpyHostToDevice);
    GPT2RT__LAUNCH(1, 128, 0, 0, k_wgmma)(dD, dE, dC, dI, dA, cs);
    float e[2] = {0, 0};
    cudaError_t err = cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(e, dE, 8, cudaMemcpyDeviceToHost);
    *early_ok = e[0] == C[0];
    *aligned = e[1] == 0.0f;
    int bad = err != cudaSuccess ? 1 << 20 : 0;
    for (int r = 0; r < 64; r++)
        for (int n = 0; n < N; n++) {
            float s = cs.scale_d0 ? C[(size_t)(r * N + n)] : 0.0f;
            for (int k = 0; k < 64; k++) s += h16(f16, A[(size_t)(r * 64 + k)]) * h16(f16, B[(size_t)(k * N + n)]);
            bad += memcmp(&s, &D[(size_t)(r * N + n)], 4) != 0;
        }
    cudaFree(dD); cudaFree(dE); cudaFree(dC); cudaFree(dI); cudaFree(dA);
    return bad;
}
static WgCase wg_case(int N, int a_reg, int f16, int LA, uint32_t albo, uint32_t asbo, int LB, uint32_t blbo, uint32_t bsbo) {
    WgCase cs;
    memset(&cs, 0, sizeof cs);
    cs.N = N; cs.a_reg = a_reg; cs.f16 = f16; cs.scale_d0 = 1; cs.trans_b = LB == L_MNSW128;
    cs.da = wg_desc(LA, 64, albo, asbo); cs.db = wg_desc(LB, N, blbo, bsbo);
    for (int ks = 0; ks < 4; ks++) { cs.a_k[ks] = wg_kstart(LA, 64, ks); cs.b_k[ks] = wg_kstart(LB, N, ks); }
    return cs;
}
static void test_wgmma(void) {
    int early = 0, al = 0, bad;
    /* the attention kernel's two products: S = Q K^T (both K-major, 128 B swizzle) and O += P V
       (P in registers, V MN-major with 128 B swizzle) */
    WgCase qk = wg_case(64, 0, 0, L_KSW128, 16, 1024, L_KSW128, 16, 1024);
    bad = wg_run(qk, L_KSW128, L_KSW128, &early, &al);
    check(!bad && al, "wgmma m64n64k16 bf16, A and B K-major from 128 B-swizzled smem descriptors, 4 k-slices chained: "
          "bitwise C + A B (%d of 4096 differ; smem 1024-aligned: %d)", bad, al);
    check(early, "wgmma: the accumulator read after commit_group and before wait_group still holds C");
    qk.scale_d0 = 0;
    bad = wg_run(qk, L_KSW128, L_KSW128, &early, &al);
    check(!bad, "wgmma scale-d 0 on the first slice: D = A B, C ignored (%d differ)", bad);
    WgCase pv = wg_case(64, 1, 1, L_KSW128, 16, 1024, L_MNSW128, 8192, 1024);
    bad = wg_run(pv, L_KSW128, L_MNSW128, &early, &al);
    check(!bad, "wgmma m64n64k16 f16, A from registers, B MN-major (imm-trans-b) 128 B swizzle: bitwise (%d differ)", bad);
    WgCase pv2 = wg_case(128, 1, 0, L_KSW128, 16, 1024, L_MNSW128, 8192, 1024);
    bad = wg_run(pv2, L_KSW128, L_MNSW128, &early, &al);
    check(!bad, "wgmma m64n128k16 bf16, B MN-major 128 B swizzle over two 64-wide atoms (LBO 8 KiB): bitwise (%d differ)", bad);
    WgCase in = wg_case(32, 0, 0, L_KINT, 1024, 128, L_KSW64, 16, 512);
    bad = wg_run(in, L_KINT, L_KSW64, &early, &al);
    check(!bad, "wgmma m64n32k16 bf16, A K-major without swizzle (core matrices, LBO 1 KiB, SBO 128), B 64 B swizzle: bitwise (%d differ)", bad);
    WgCase in2 = wg_case(16, 0, 1, L_KSW32, 16, 256, L_KINT, 2 * 128, 128);
    bad = wg_run(in2, L_KSW32, L_KINT, &early, &al);
    check(!bad, "wgmma m64n16k16 f16, A 32 B swizzle, B K-major without swizzle: bitwise (%d differ)", bad);
    /* wrong descriptors read other bytes */
    WgCase m1 = wg_case(64, 0, 0, L_KSW128, 16, 1024, L_KSW128, 16, 512);
    WgCase m2 = wg_case(64, 0, 0, L_KSW128, 16, 1024, L_KSW128, 16, 1024);
    m2.db &= ~(3ull << 62); /* swizzle none */
    WgCase m3 = wg_case(128, 1, 0, L_KSW128, 16, 1024, L_MNSW128, 4096, 1024);
    WgCase m4 = wg_case(64, 1, 1, L_KSW128, 16, 1024, L_MNSW128, 8192, 1024);
    m4.trans_b = 0;
    int b1 = wg_run(m1, L_KSW128, L_KSW128, &early, &al), b2 = wg_run(m2, L_KSW128, L_KSW128, &early, &al);
    int b3 = wg_run(m3, L_KSW128, L_MNSW128, &early, &al), b4 = wg_run(m4, L_KSW128, L_MNSW128, &early, &al);
    check(b1 > 1000 && b2 > 1000 && b3 > 1000 && b4 > 1000,
          "wgmma with a wrong descriptor differs: SBO 512 for 1024 (%d), no swizzle for 128 B (%d), LBO 4 KiB for 8 KiB (%d), "
          "trans-b off (%d)", b1, b2, b3, b4);
}

int main(void) {
    test_convert();
    test_mma(0);
    test_mma(1);
    test_ldmatrix();
    test_wgmma();
    test_cp_async();
    test_orders();
    test_faults();
    test_launch_errors();
    test_streams();
    test_blas();
    test_nccl();
    printf("test_emu: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
