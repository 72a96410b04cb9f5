/* kernels/global_norm.cu - lab of the CUDA gradient checks (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_global_norm (||g||_2 over the fp32 gradients, fp64 fixed-order sums; a
   non-finite norm is the inf/NaN check of fp32 training) and gpt2rt__cu_nonfinite (inf/NaN
   flag of an fp32, bf16 or fp16 buffer, for the fp16 loss-scaling path).
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_global_norm global_norm.cu -lcublasLt && /tmp/lab_global_norm */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

static void check(const char *what, int ok) {
    printf("  %-40s %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

static void set_float(float *d, float v) { LAB_CK(cudaMemcpy(d, &v, 4, cudaMemcpyHostToDevice)); }
template <typename T> static void set_elem(T *d, float v) {
    T x = lab_to<T>(v);
    LAB_CK(cudaMemcpy(d, &x, sizeof(T), cudaMemcpyHostToDevice));
}

/* the norm of g (n), `shift` floats into the allocation (1: misaligned, scalar path) */
static void run_norm(int64_t n, int shift, int timing) {
    printf("global norm  n=%lld%s\n", (long long)n, shift ? " (misaligned by one element)" : "");
    float *g = (float *)malloc((size_t)(n + shift) * 4);
    lab_fill(g, (size_t)(n + shift), 1e-2f);
    long double acc = 0.0L; /* x87 extended on x86-64: a reference ~1000x tighter than fp64 */
    for (int64_t i = 0; i < n; i++) acc += (long double)g[shift + i] * (long double)g[shift + i];
    double ref = (double)acc;
    float *d_g0 = lab_upload<float>(g, (size_t)(n + shift)), *d_g = d_g0 + shift;
    double *d_out, *d_scratch, out[4];
    LAB_CK(cudaMalloc(&d_out, 4 * sizeof(double)));
    LAB_CK(cudaMalloc(&d_scratch, gpt2rt__cu_global_norm_scratch_bytes(n)));
    LAB_CK(gpt2rt__cu_global_norm(d_out, d_out + 1, d_g, n, d_scratch, 0));
    LAB_CK(gpt2rt__cu_global_norm(d_out + 2, d_out + 3, d_g, n, d_scratch, 0));
    LAB_CK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    double rel_s = fabs(out[1] - ref) / ref, rel_n = fabs(out[0] - sqrt(ref)) / sqrt(ref);
    printf("  sum of squares %.17g (reference %.17g): rel %.2e\n", out[1], ref, rel_s);
    check("sum of squares within 1e-10 of reference", rel_s < 1e-10);
    check("norm within 1e-10", rel_n < 1e-10);
    check("norm, sumsq: run twice bitwise equal", memcmp(out, out + 2, 2 * sizeof(double)) == 0);
    /* one inf, then one NaN: the norm is not finite */
    set_float(d_g + n / 3, INFINITY);
    LAB_CK(gpt2rt__cu_global_norm(d_out, NULL, d_g, n, d_scratch, 0));
    LAB_CK(cudaMemcpy(out, d_out, sizeof(double), cudaMemcpyDeviceToHost));
    check("an inf gradient: norm not finite", !isfinite(out[0]));
    set_float(d_g + n / 3, g[shift + n / 3]);
    set_float(d_g + n - 1, NAN);
    LAB_CK(gpt2rt__cu_global_norm(d_out, NULL, d_g, n, d_scratch, 0));
    LAB_CK(cudaMemcpy(out, d_out, sizeof(double), cudaMemcpyDeviceToHost));
    check("a NaN gradient (last): norm not finite", !isfinite(out[0]));
    set_float(d_g + n - 1, g[shift + n - 1]);
    if (timing) {
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_global_norm(d_out, d_out + 1, d_g, n, d_scratch, 0)); }, 20);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time", ms, 4.0 * n / ms * 1e-6);
    }
    free(g);
    LAB_CK(cudaFree(d_g0)); LAB_CK(cudaFree(d_out)); LAB_CK(cudaFree(d_scratch));
}

template <typename S>
static void run_nonfinite(int64_t n, int shift, int timing) {
    printf("nonfinite %s  n=%lld%s\n", lab_type_name<S>(), (long long)n, shift ? " (misaligned by one element)" : "");
    float *x = (float *)malloc((size_t)(n + shift) * 4);
    lab_fill(x, (size_t)(n + shift), 100.0f);
    S *d_x0 = lab_upload<S>(x, (size_t)(n + shift)), *d_x = d_x0 + shift;
    int *d_flag, flag[2];
    LAB_CK(cudaMalloc(&d_flag, 2 * sizeof(int)));
    LAB_CK(gpt2rt__cu_nonfinite<S>(d_flag, d_x, n, 1, 0));
    LAB_CK(cudaMemcpy(flag, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
    check("finite buffer: flag 0", flag[0] == 0);
    const int64_t at[4] = {0, n / 2 + 1, n - 1, n - 2};
    const float bad[4] = {INFINITY, -INFINITY, NAN, 1e6f /* overflows fp16 only */};
    for (int k = 0; k < 4; k++) {
        int expect = k < 3 || !isfinite(lab_f(lab_to<S>(bad[k])));
        set_elem<S>(d_x + at[k], bad[k]);
        LAB_CK(gpt2rt__cu_nonfinite<S>(d_flag, d_x, n, 1, 0));
        LAB_CK(cudaMemcpy(flag, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
        char what[64];
        snprintf(what, sizeof what, "%s at %lld: flag %d", k == 3 ? "1e6" : k == 2 ? "NaN" : k ? "-inf" : "inf",
                 (long long)at[k], expect);
        check(what, flag[0] == expect);
        set_elem<S>(d_x + at[k], x[shift + at[k]]);
    }
    /* reset = 0 ORs into the flag: a set flag stays set over a finite buffer */
    LAB_CK(cudaMemset(d_flag, 0, sizeof(int)));
    set_elem<S>(d_x + 5, NAN);
    LAB_CK(gpt2rt__cu_nonfinite<S>(d_flag, d_x, 10, 0, 0));
    set_elem<S>(d_x + 5, x[shift + 5]);
    LAB_CK(gpt2rt__cu_nonfinite<S>(d_flag, d_x, n, 0, 0));
    LAB_CK(cudaMemcpy(flag, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
    check("reset = 0 keeps an earlier 1", flag[0] == 1);
    if (timing) {
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_nonfinite<S>(d_flag, d_x, n, 1, 0)); }, 20);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time", ms, (double)n * sizeof(S) / ms * 1e-6);
    }
    free(x);
    LAB_CK(cudaFree(d_x0)); LAB_CK(cudaFree(d_flag));
}

int main(void) {
    const int64_t n_gpt2 = 124475904; /* GPT-2 124M with the padded vocabulary */
    run_norm(n_gpt2 + 3, 0, 1);
    run_norm(1000003, 1, 0);
    run_norm(5, 0, 0);
    run_nonfinite<float>(n_gpt2 + 3, 0, 1);
    run_nonfinite<__nv_bfloat16>(8LL * 1024 * 768 * 4 + 5, 0, 1); /* an fp16/bf16 activation */
    run_nonfinite<__half>(8LL * 1024 * 768 * 4 + 5, 0, 1);
    run_nonfinite<float>(100003, 1, 0);
    run_nonfinite<__nv_bfloat16>(100003, 1, 0);
    run_nonfinite<__half>(1001, 1, 0);
    return lab_finish("global_norm");
}
