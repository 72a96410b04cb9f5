/* kernels/gelu.cu - lab of the CUDA elementwise ops (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_gelu_forward, gpt2rt__cu_gelu_backward (in place: dinp aliases dout),
   gpt2rt__cu_residual_forward and the casts gpt2rt__cu_cast (fp32 <-> floatX), against
   the CPU gpt2rt__cpu_gelu_forward / gpt2rt__cpu_gelu_backward / gpt2rt__cpu_residual_add.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_gelu gelu.cu -lcublasLt && /tmp/lab_gelu */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

/* relative (and absolute) tolerance of a value stored in T */
template <typename T> static float tol_of(void);
template <> float tol_of<float>(void) { return 1e-5f; }
template <> float tol_of<__nv_bfloat16>(void) { return 1e-2f; }
template <> float tol_of<__half>(void) { return 2e-3f; }

/* n elements starting `shift` elements into the allocations (shift 1: misaligned, scalar path) */
template <typename floatX>
static void run(int64_t n, int shift, int timing) {
    const float tol = tol_of<floatX>();
    printf("%s  n=%lld%s\n", lab_type_name<floatX>(), (long long)n, shift ? " (misaligned by one element)" : "");
    size_t m = (size_t)n + (size_t)shift;
    float *inp = (float *)malloc(m * 4), *dout = (float *)malloc(m * 4), *ref = (float *)malloc(m * 4);
    float *got = (float *)malloc(m * 4), *ref2 = (float *)malloc(m * 4);
    lab_fill(inp, m, 4.0f);
    lab_fill(dout, m, 1.0f);
    for (size_t i = 0; i < m; i++) { inp[i] = lab_f(lab_to<floatX>(inp[i])); dout[i] = lab_f(lab_to<floatX>(dout[i])); }
    floatX *d_inp0 = lab_upload<floatX>(inp, m), *d_dout0 = lab_upload<floatX>(dout, m), *d_out0, *d_buf0, *d_buf20;
    float *d_f0;
    LAB_CK(cudaMalloc(&d_out0, m * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_buf0, m * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_buf20, m * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_f0, m * 4));
    floatX *d_inp = d_inp0 + shift, *d_dout = d_dout0 + shift, *d_out = d_out0 + shift, *d_buf = d_buf0 + shift;
    floatX *d_buf2 = d_buf20 + shift;
    float *d_f = d_f0 + shift;
    const float *h_inp = inp + shift, *h_dout = dout + shift;

    /* forward */
    LAB_CK(gpt2rt__cu_gelu_forward<floatX>(d_out, d_inp, n, 0));
    LAB_CK(gpt2rt__cu_gelu_forward<floatX>(d_buf, d_inp, n, 0));
    LAB_CK(cudaDeviceSynchronize());
    gpt2rt__cpu_gelu_forward(ref, h_inp, n, 1);
    lab_download<floatX>(got, d_out, (size_t)n);
    lab_compare("gelu forward", got, ref, (size_t)n, tol, tol);
    lab_same_bits("gelu forward, run twice", d_out, d_buf, (size_t)n * sizeof(floatX));

    /* backward in place: d_buf holds dout and receives dinp */
    LAB_CK(cudaMemcpy(d_buf, d_dout, (size_t)n * sizeof(floatX), cudaMemcpyDeviceToDevice));
    LAB_CK(gpt2rt__cu_gelu_backward<floatX>(d_buf, d_inp, d_buf, n, 0));
    LAB_CK(gpt2rt__cu_gelu_backward<floatX>(d_buf2, d_inp, d_dout, n, 0));
    LAB_CK(cudaDeviceSynchronize());
    gpt2rt__cpu_gelu_backward(ref, h_inp, h_dout, n, 1);
    lab_download<floatX>(got, d_buf, (size_t)n);
    lab_compare("gelu backward (dinp aliases dout)", got, ref, (size_t)n, tol, tol);
    lab_same_bits("gelu backward, in place == separate", d_buf, d_buf2, (size_t)n * sizeof(floatX));

    /* residual: out = inp + dout, then in place buf = buf + dout */
    LAB_CK(gpt2rt__cu_residual_forward<floatX>(d_out, d_inp, d_dout, n, 0));
    LAB_CK(cudaMemcpy(d_buf, d_inp, (size_t)n * sizeof(floatX), cudaMemcpyDeviceToDevice));
    LAB_CK(gpt2rt__cu_residual_forward<floatX>(d_buf, d_buf, d_dout, n, 0));
    LAB_CK(cudaDeviceSynchronize());
    memcpy(ref, h_inp, (size_t)n * 4);
    gpt2rt__cpu_residual_add(ref, h_dout, n, 1);
    lab_download<floatX>(got, d_out, (size_t)n);
    lab_compare("residual out = a + b", got, ref, (size_t)n, tol, tol);
    lab_same_bits("residual in place == out of place", d_out, d_buf, (size_t)n * sizeof(floatX));

    /* casts: fp32 -> floatX is round to nearest even (the host lab_to), floatX -> fp32 exact */
    float *f = (float *)malloc((size_t)n * 4);
    lab_fill(f, (size_t)n, 3.0f);
    LAB_CK(cudaMemcpy(d_f, f, (size_t)n * 4, cudaMemcpyHostToDevice));
    LAB_CK((gpt2rt__cu_cast<floatX, float>(d_out, d_f, n, 0)));
    LAB_CK(cudaDeviceSynchronize());
    lab_download<floatX>(got, d_out, (size_t)n);
    for (int64_t i = 0; i < n; i++) ref2[i] = lab_f(lab_to<floatX>(f[i]));
    lab_compare("cast fp32 -> floatX (exact)", got, ref2, (size_t)n, 1e-30f, 0.0f);
    LAB_CK((gpt2rt__cu_cast<float, floatX>(d_f, d_inp, n, 0)));
    LAB_CK(cudaDeviceSynchronize());
    lab_download<float>(got, d_f, (size_t)n);
    lab_compare("cast floatX -> fp32 (exact)", got, h_inp, (size_t)n, 1e-30f, 0.0f);
    free(f);

    if (timing) {
        double x = sizeof(floatX);
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_gelu_forward<floatX>(d_out, d_inp, n, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time gelu forward", ms, 2.0 * n * x / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_gelu_backward<floatX>(d_buf2, d_inp, d_dout, n, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time gelu backward", ms, 3.0 * n * x / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_residual_forward<floatX>(d_out, d_inp, d_dout, n, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time residual", ms, 3.0 * n * x / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK((gpt2rt__cu_cast<floatX, float>(d_out, d_f, n, 0))); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time cast fp32 -> floatX", ms, (4.0 + x) * n / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK((gpt2rt__cu_cast<float, floatX>(d_f, d_inp, n, 0))); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time cast floatX -> fp32", ms, (4.0 + x) * n / ms * 1e-6);
    }
    free(inp); free(dout); free(ref); free(got); free(ref2);
    LAB_CK(cudaFree(d_inp0)); LAB_CK(cudaFree(d_dout0)); LAB_CK(cudaFree(d_out0)); LAB_CK(cudaFree(d_buf0));
    LAB_CK(cudaFree(d_buf20)); LAB_CK(cudaFree(d_f0));
}

int main(void) {
    const int64_t n = 8LL * 1024 * 4 * 768; /* the (B,T,4C) MLP activation of GPT-2 124M */
    run<float>(n, 0, 1);
    run<__nv_bfloat16>(n, 0, 1);
    run<__half>(n, 0, 1);
    /* a tail that is not a multiple of VN (vector path + scalar tail), then misaligned */
    run<float>(100003, 0, 0);
    run<__nv_bfloat16>(100003, 0, 0);
    run<__half>(100003, 0, 0);
    run<float>(1001, 1, 0);
    run<__nv_bfloat16>(1001, 1, 0);
    run<__half>(1001, 1, 0);
    return lab_finish("gelu");
}
