/* kernels/adamw.cu - lab of the CUDA multi-tensor AdamW (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_adamw_table + gpt2rt__cu_adamw, every tensor in one launch, against the CPU
   gpt2rt__opt_adamw_scalar applied tensor by tensor as gpt2rt__opt_adamw does.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_adamw adamw.cu -lcublasLt && /tmp/lab_adamw
   Validation: a table of ~43M parameters with odd sizes (so some tensors start at offsets
   that are not multiples of 4 and take the scalar path). The kernel rounds every operation
   explicitly (no FMA contraction), so the fp32 results are expected to be bitwise the CPU's;
   the pass criterion is 1e-6 relative. Timing: the GPT-2 124M table (148 tensors). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

/* relative (and absolute) tolerance of a value stored in T */
template <typename T> static float tol_of(void);
template <> float tol_of<float>(void) { return 1e-5f; }
template <> float tol_of<__nv_bfloat16>(void) { return 1e-2f; }
template <> float tol_of<__half>(void) { return 2e-3f; }

/* hyperparameters of the step */
static const float LR = 6e-4f, B1 = 0.9f, B2 = 0.95f, EPS = 1e-8f, WD = 0.1f, GRAD_SCALE = 0.7f;
static const int64_t STEP = 10; /* 1-based */

/* appends a tensor of n elements to the table; returns the arena size so far */
static int64_t add(gpt2rt__cu_adamw_tensor *t, int *nt, int64_t off, int64_t n, int decay) {
    t[*nt].off = off; t[*nt].n = n; t[*nt].decay = decay; t[*nt].block0 = 0; t[*nt].pad_ = 0;
    (*nt)++;
    return off + n;
}

/* CPU reference: the update of gpt2rt__opt_adamw, tensor by tensor */
static void cpu_adamw(float *p, float *g, float *m, float *v, const gpt2rt__cu_adamw_tensor *t, int nt) {
    float step_size = (float)(LR / (1.0 - pow(B1, (double)STEP)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(B2, (double)STEP));
    for (int i = 0; i < nt; i++) {
        float decay = t[i].decay ? (float)(1.0 - (double)LR * WD) : 1.0f;
        gpt2rt__opt_adamw_scalar(p + t[i].off, g + t[i].off, m + t[i].off, v + t[i].off, t[i].n, GRAD_SCALE, decay, B1, B2,
                             step_size, bc2_sqrt, EPS);
    }
}

struct State { float *p, *g, *m, *v; };

template <typename floatX>
static void run_check(const gpt2rt__cu_adamw_tensor *table, int nt, int64_t n, const State &init, const State &ref) {
    const float tol = tol_of<floatX>();
    const int copy = sizeof(floatX) != 4; /* fp32 training: the master is the copy */
    printf("%s  %d tensors, %lld parameters%s\n", lab_type_name<floatX>(), nt, (long long)n,
           copy ? ", with the floatX copy" : "");
    gpt2rt__cu_adamw_tensor *t = (gpt2rt__cu_adamw_tensor *)malloc((size_t)nt * sizeof *t), *d_t;
    memcpy(t, table, (size_t)nt * sizeof *t);
    int64_t nblocks = gpt2rt__cu_adamw_table(t, nt);
    LAB_CK(cudaMalloc(&d_t, (size_t)nt * sizeof *t));
    LAB_CK(cudaMemcpy(d_t, t, (size_t)nt * sizeof *t, cudaMemcpyHostToDevice));
    State d[2];
    floatX *px[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) { /* two runs from the same state: determinism */
        d[r].p = lab_upload<float>(init.p, (size_t)n);
        d[r].g = lab_upload<float>(init.g, (size_t)n);
        d[r].m = lab_upload<float>(init.m, (size_t)n);
        d[r].v = lab_upload<float>(init.v, (size_t)n);
        if (copy) LAB_CK(cudaMalloc(&px[r], (size_t)n * sizeof(floatX)));
        LAB_CK(gpt2rt__cu_adamw<floatX>(d[r].p, px[r], d[r].g, d[r].m, d[r].v, d_t, nt, nblocks, LR, B1, B2, EPS, WD,
                                        STEP, GRAD_SCALE, 0));
    }
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("params, run twice", d[0].p, d[1].p, (size_t)n * 4);
    lab_same_bits("m, run twice", d[0].m, d[1].m, (size_t)n * 4);
    lab_same_bits("v, run twice", d[0].v, d[1].v, (size_t)n * 4);
    if (copy) lab_same_bits("floatX params, run twice", px[0], px[1], (size_t)n * sizeof(floatX));

    float *got = (float *)malloc((size_t)n * 4), *gx = (float *)malloc((size_t)n * 4);
    lab_download<float>(got, d[0].p, (size_t)n);
    lab_compare("params (fp32)", got, ref.p, (size_t)n, 1e-9f, 1e-6f);
    size_t same = 0;
    for (int64_t i = 0; i < n; i++) same += memcmp(&got[i], &ref.p[i], 4) == 0;
    printf("  %-40s %zu of %lld (expected all)\n", "params bitwise equal to the CPU", same, (long long)n);
    if (copy) {
        lab_download<floatX>(gx, px[0], (size_t)n);
        size_t exact = 0;
        for (int64_t i = 0; i < n; i++) exact += lab_f(lab_to<floatX>(got[i])) == gx[i];
        int ok = exact == (size_t)n;
        printf("  %-40s %s\n", "floatX params == rounded fp32 params", ok ? "PASS" : "FAIL");
        lab_failures += !ok;
        lab_compare("floatX params vs CPU", gx, ref.p, (size_t)n, tol * 1e-2f, tol);
    }
    lab_download<float>(got, d[0].m, (size_t)n);
    lab_compare("m (fp32)", got, ref.m, (size_t)n, 1e-12f, 1e-6f);
    lab_download<float>(got, d[0].v, (size_t)n);
    lab_compare("v (fp32)", got, ref.v, (size_t)n, 1e-15f, 1e-6f);
    lab_download<float>(got, d[0].g, (size_t)n);
    size_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += got[i] != 0.0f;
    printf("  %-40s %s\n", "grads zeroed", nonzero ? "FAIL" : "PASS");
    lab_failures += nonzero != 0;
    free(got); free(gx); free(t);
    for (int r = 0; r < 2; r++) {
        LAB_CK(cudaFree(d[r].p)); LAB_CK(cudaFree(d[r].g)); LAB_CK(cudaFree(d[r].m)); LAB_CK(cudaFree(d[r].v));
        if (px[r]) LAB_CK(cudaFree(px[r]));
    }
    LAB_CK(cudaFree(d_t));
}

/* x (n) = scale * uniform[-1,1) (+ offset) from a hash of the index */
__global__ void fill_uniform(float *x, int64_t n, uint64_t seed, float scale, float offset) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint64_t h = ((uint64_t)i + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29; h *= 0x94D049BB133111EBull; h ^= h >> 32;
    float u = (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
    x[i] = u * scale + offset;
}

template <typename floatX>
static void run_time(void) {
    const int64_t C = 768, L = 12, Vp = 50304, P = 1024;
    gpt2rt__cu_adamw_tensor t[2 + 12 * 12 + 2], *d_t;
    int nt = 0;
    int64_t off = add(t, &nt, 0, Vp * C, 1);
    off = add(t, &nt, off, P * C, 1);
    for (int64_t l = 0; l < L; l++) {
        off = add(t, &nt, off, C, 0); off = add(t, &nt, off, C, 0);                 /* ln1 w, b */
        off = add(t, &nt, off, 3 * C * C, 1); off = add(t, &nt, off, 3 * C, 0);     /* qkv */
        off = add(t, &nt, off, C * C, 1); off = add(t, &nt, off, C, 0);             /* proj */
        off = add(t, &nt, off, C, 0); off = add(t, &nt, off, C, 0);                 /* ln2 w, b */
        off = add(t, &nt, off, 4 * C * C, 1); off = add(t, &nt, off, 4 * C, 0);     /* fc */
        off = add(t, &nt, off, 4 * C * C, 1); off = add(t, &nt, off, C, 0);         /* fcproj */
    }
    off = add(t, &nt, off, C, 0); off = add(t, &nt, off, C, 0);                     /* lnf w, b */
    int64_t n = off, nblocks = gpt2rt__cu_adamw_table(t, nt);
    const int copy = sizeof(floatX) != 4;
    float *p, *g, *m, *v;
    floatX *px = NULL;
    LAB_CK(cudaMalloc(&p, (size_t)n * 4)); LAB_CK(cudaMalloc(&g, (size_t)n * 4));
    LAB_CK(cudaMalloc(&m, (size_t)n * 4)); LAB_CK(cudaMalloc(&v, (size_t)n * 4));
    if (copy) LAB_CK(cudaMalloc(&px, (size_t)n * sizeof(floatX)));
    unsigned nb = gpt2rt__cu_blocks(n, 256);
    GPT2RT__LAUNCH(nb, 256, 0, 0, fill_uniform)(p, n, 1, 0.1f, 0.0f);
    GPT2RT__LAUNCH(nb, 256, 0, 0, fill_uniform)(g, n, 2, 1e-2f, 0.0f);
    GPT2RT__LAUNCH(nb, 256, 0, 0, fill_uniform)(m, n, 3, 1e-3f, 0.0f);
    GPT2RT__LAUNCH(nb, 256, 0, 0, fill_uniform)(v, n, 4, 5e-5f, 5e-5f);
    LAB_CK(cudaGetLastError());
    LAB_CK(cudaMalloc(&d_t, (size_t)nt * sizeof *t));
    LAB_CK(cudaMemcpy(d_t, t, (size_t)nt * sizeof *t, cudaMemcpyHostToDevice));
    float ms = lab_time_ms([&] {
        LAB_CK(gpt2rt__cu_adamw<floatX>(p, px, g, m, v, d_t, nt, nblocks, LR, B1, B2, EPS, WD, STEP, GRAD_SCALE, 0));
    }, 10);
    double bytes = (double)n * (32.0 + (copy ? sizeof(floatX) : 0));
    printf("  %-40s %8.4f ms  %7.1f GB/s   (%s, %lld params, %d tensors, %lld blocks)\n", "time GPT-2 124M step", ms,
           bytes / ms * 1e-6, lab_type_name<floatX>(), (long long)n, nt, (long long)nblocks);
    LAB_CK(cudaFree(p)); LAB_CK(cudaFree(g)); LAB_CK(cudaFree(m)); LAB_CK(cudaFree(v)); LAB_CK(cudaFree(d_t));
    if (px) LAB_CK(cudaFree(px));
}

int main(void) {
    /* validation table: GPT-2-like matrices and vectors, and odd sizes that leave later
       tensors at offsets that are not multiples of 4 */
    gpt2rt__cu_adamw_tensor t[16];
    int nt = 0;
    int64_t off = add(t, &nt, 0, 50304 * 768, 1);
    off = add(t, &nt, off, 1024 * 768, 1);
    off = add(t, &nt, off, 768, 0);
    off = add(t, &nt, off, 37, 0);
    off = add(t, &nt, off, 3 * 1001, 1);
    off = add(t, &nt, off, 768 * 3072, 1);
    off = add(t, &nt, off, 3072, 0);
    off = add(t, &nt, off, 5, 0);
    off = add(t, &nt, off, 4096, 1);
    off = add(t, &nt, off, 768 * 768 + 3, 1);
    off = add(t, &nt, off, 1, 0);
    int64_t n = off;
    State init, ref;
    float **pi[4] = {&init.p, &init.g, &init.m, &init.v}, **pr[4] = {&ref.p, &ref.g, &ref.m, &ref.v};
    for (int k = 0; k < 4; k++) { *pi[k] = (float *)malloc((size_t)n * 4); *pr[k] = (float *)malloc((size_t)n * 4); }
    lab_fill(init.p, (size_t)n, 0.1f);
    lab_fill(init.g, (size_t)n, 1e-2f);
    lab_fill(init.m, (size_t)n, 1e-3f);
    lab_fill(init.v, (size_t)n, 5e-5f);
    for (int64_t i = 0; i < n; i++) init.v[i] += 5e-5f; /* v >= 0 */
    for (int64_t i = 0; i < 1000; i++) init.g[i * 37] = 0.0f; /* some zero gradients */
    for (int k = 0; k < 4; k++) memcpy(*pr[k], *pi[k], (size_t)n * 4);
    cpu_adamw(ref.p, ref.g, ref.m, ref.v, t, nt);
    run_check<float>(t, nt, n, init, ref);
    run_check<__nv_bfloat16>(t, nt, n, init, ref);
    run_check<__half>(t, nt, n, init, ref);
    for (int k = 0; k < 4; k++) { free(*pi[k]); free(*pr[k]); }
    run_time<float>();
    run_time<__nv_bfloat16>();
    run_time<__half>();
    return lab_finish("adamw");
}
