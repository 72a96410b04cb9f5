/* kernels/lab.cuh - what every CUDA kernel lab shares: checked calls that exit
   (labs are programs, not the library), random data, error measures, timing. */
#ifndef GPT2RT_LAB_CUH
#define GPT2RT_LAB_CUH
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* the launch seam of gpt2rt.h, for the labs' own kernels (the emulator defines it first) */
#ifndef GPT2RT__LAUNCH
#define GPT2RT__LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif

#define LAB_CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)

static int lab_failures = 0;

static uint64_t lab_rng = 0x9E3779B97F4A7C15ull;
static float lab_uniform(void) { /* [-1, 1) */
    lab_rng ^= lab_rng << 13; lab_rng ^= lab_rng >> 7; lab_rng ^= lab_rng << 17;
    return (float)((double)(lab_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void lab_fill(float *x, size_t n, float scale) { for (size_t i = 0; i < n; i++) x[i] = lab_uniform() * scale; }

/* host conversions, round to nearest even (what the device casts do) */
template <typename T> static T lab_to(float x);
template <> float lab_to<float>(float x) { return x; }
template <> __nv_bfloat16 lab_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __half lab_to<__half>(float x) { return __float2half_rn(x); }
static float lab_f(float x) { return x; }
static float lab_f(__nv_bfloat16 x) { return __bfloat162float(x); }
static float lab_f(__half x) { return __half2float(x); }
template <typename T> static const char *lab_type_name(void);
template <> const char *lab_type_name<float>(void) { return "fp32"; }
template <> const char *lab_type_name<__nv_bfloat16>(void) { return "bf16"; }
template <> const char *lab_type_name<__half>(void) { return "fp16"; }

/* device copy of n host floats converted to T */
template <typename T> static T *lab_upload(const float *h, size_t n) {
    T *tmp = (T *)malloc(n * sizeof(T)), *d;
    for (size_t i = 0; i < n; i++) tmp[i] = lab_to<T>(h[i]);
    LAB_CK(cudaMalloc(&d, n * sizeof(T) + 1));
    LAB_CK(cudaMemcpy(d, tmp, n * sizeof(T), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
template <typename T> static void lab_download(float *h, const T *d, size_t n) {
    T *tmp = (T *)malloc(n * sizeof(T) + 1);
    LAB_CK(cudaMemcpy(tmp, d, n * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) h[i] = lab_f(tmp[i]);
    free(tmp);
}

/* worst |got - want| / (atol + rtol |want|); <= 1 passes. Prints one line. */
static int lab_compare(const char *what, const float *got, const float *want, size_t n, float atol, float rtol) {
    double worst = 0.0, max_abs = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        double r = e / (atol + rtol * fabs((double)want[i]));
        if (!(r <= worst)) { worst = r; at = i; } /* NaN counts as worst */
        if (e > max_abs) max_abs = e;
    }
    int ok = worst <= 1.0;
    printf("  %-40s max|err| %.3e  worst at %zu: got %.6g want %.6g  %s\n", what, max_abs, at,
           n ? got[at] : 0.0f, n ? want[at] : 0.0f, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
    return ok;
}

/* bitwise equality of two device buffers of bytes */
static int lab_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    unsigned char *x = (unsigned char *)malloc(bytes + 1), *y = (unsigned char *)malloc(bytes + 1);
    LAB_CK(cudaMemcpy(x, a, bytes, cudaMemcpyDeviceToHost));
    LAB_CK(cudaMemcpy(y, b, bytes, cudaMemcpyDeviceToHost));
    int ok = memcmp(x, y, bytes) == 0;
    printf("  %-40s %s\n", what, ok ? "bitwise equal: PASS" : "differ: FAIL");
    if (!ok) lab_failures++;
    free(x); free(y);
    return ok;
}

/* milliseconds per call of fn(), averaged over reps after one warm-up */
template <typename F> static float lab_time_ms(F fn, int reps) {
#ifdef GPT2RT_CUDA_EMU
    reps = 1; /* the emulator's times say nothing; run the work once so it is still checked to run */
#endif
    cudaEvent_t a, b;
    LAB_CK(cudaEventCreate(&a)); LAB_CK(cudaEventCreate(&b));
    fn();
    LAB_CK(cudaDeviceSynchronize());
    LAB_CK(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) fn();
    LAB_CK(cudaEventRecord(b));
    LAB_CK(cudaEventSynchronize(b));
    float ms = 0.0f;
    LAB_CK(cudaEventElapsedTime(&ms, a, b));
    LAB_CK(cudaEventDestroy(a)); LAB_CK(cudaEventDestroy(b));
    return ms / (float)reps;
}

/* a public gpt2rt call that must succeed (the end-to-end labs): else the error, exit 2 */
#ifdef GPT2RT_H
#define LAB_OK(ctx, call) do { gpt2rt_result r_ = (call); if (r_ != GPT2RT_OK) { \
    fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, gpt2rt_result_string(r_), \
            gpt2rt_last_error(ctx)); exit(2); } } while (0)
#endif

/* one line: the variant the attention launchers picked for storage type X at B*NH = bnh and
   T (causal) in each direction, and each variant's fastest timed run (-: not timed) */
#if defined(GPT2RT_IMPLEMENTATION) && GPT2RT__CUDA
template <typename X> static void lab_print_attn_pick(const char *indent, int bnh, int T) {
    static const char *dirs[3] = {"forward", "dK,dV", "dQ"};
    printf("%sattention pick %s B*NH=%d T=%d:", indent, lab_type_name<X>(), bnh, T);
    for (int dir = 0; dir < 3; dir++) {
        gpt2rt__cu_attn_picked p;
        printf("%s %s ", dir ? ";" : "", dirs[dir]);
        if (!gpt2rt__cu_attn_pick_info<X>(dir, bnh, T, 0, &p)) { printf("not timed"); continue; }
        printf("%s (", p.name[p.variant]);
        for (int i = 0, k = 0; i < p.n; i++) {
            if (p.ms[i] < 0.0f) continue; /* not allowed or cannot run here */
            printf("%s%s %.3f ms", k++ ? ", " : "", p.name[i], (double)p.ms[i]);
        }
        printf(")");
    }
    printf("\n");
}
#endif

static int lab_finish(const char *name) {
    printf("%s: %s (%d failure%s)\n", name, lab_failures ? "FAIL" : "PASS", lab_failures, lab_failures == 1 ? "" : "s");
    return lab_failures ? 1 : 0;
}
#endif
