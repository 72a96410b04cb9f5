/* kernels/layernorm.cu - lab of the CUDA LayerNorm ops (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_layernorm_forward, gpt2rt__cu_residual_layernorm_forward (res = a + b, then
   LayerNorm), gpt2rt__cu_layernorm_backward (dinp +=, dw +=, db +=, deterministic), and the
   plain gpt2rt__cu_residual_forward, against the CPU gpt2rt__cpu_layernorm_forward/_backward.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_layernorm layernorm.cu -lcublasLt && /tmp/lab_layernorm */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

/* relative (and absolute) tolerance of a value stored in T */
template <typename T> static float tol_of(void);
template <> float tol_of<float>(void) { return 1e-5f; }
template <> float tol_of<__nv_bfloat16>(void) { return 1e-2f; }
template <> float tol_of<__half>(void) { return 2e-3f; }

template <typename T> static void round_to(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = lab_f(lab_to<T>(x[i]));
}

template <typename floatX>
static void run(int64_t N, int64_t C, int timing) {
    const float tol = tol_of<floatX>();
    size_t NC = (size_t)(N * C);
    printf("%s  N=%lld C=%lld\n", lab_type_name<floatX>(), (long long)N, (long long)C);
    float *a = (float *)malloc(NC * 4), *b = (float *)malloc(NC * 4), *res = (float *)malloc(NC * 4);
    float *out = (float *)malloc(NC * 4), *ref = (float *)malloc(NC * 4), *got = (float *)malloc(NC * 4);
    float *dout = (float *)malloc(NC * 4), *dinp = (float *)malloc(NC * 4);
    float *w = (float *)malloc((size_t)C * 4), *bias = (float *)malloc((size_t)C * 4);
    float *dw = (float *)malloc((size_t)C * 4), *db = (float *)malloc((size_t)C * 4);
    float *gdw = (float *)malloc((size_t)C * 4), *gdb = (float *)malloc((size_t)C * 4);
    float *mean = (float *)malloc((size_t)N * 4), *rstd = (float *)malloc((size_t)N * 4);
    float *gmean = (float *)malloc((size_t)N * 4), *grstd = (float *)malloc((size_t)N * 4);
    lab_fill(a, NC, 1.0f);
    lab_fill(b, NC, 0.5f);
    for (size_t i = 0; i < NC; i++) a[i] += 0.3f; /* rows with a non-zero mean */
    lab_fill(w, (size_t)C, 0.2f);
    for (int64_t i = 0; i < C; i++) w[i] += 1.0f;
    lab_fill(bias, (size_t)C, 0.1f);
    lab_fill(dout, NC, 1.0f);
    lab_fill(dinp, NC, 0.5f);
    lab_fill(dw, (size_t)C, 1.0f);
    lab_fill(db, (size_t)C, 1.0f);
    round_to<floatX>(a, (int64_t)NC); round_to<floatX>(b, (int64_t)NC);
    round_to<floatX>(w, C); round_to<floatX>(bias, C);
    round_to<floatX>(dout, (int64_t)NC); round_to<floatX>(dinp, (int64_t)NC);

    floatX *d_a = lab_upload<floatX>(a, NC), *d_b = lab_upload<floatX>(b, NC), *d_w = lab_upload<floatX>(w, (size_t)C);
    floatX *d_bias = lab_upload<floatX>(bias, (size_t)C), *d_dout = lab_upload<floatX>(dout, NC);
    floatX *d_dinp = lab_upload<floatX>(dinp, NC), *d_dinp2 = lab_upload<floatX>(dinp, NC);
    float *d_dw = lab_upload<float>(dw, (size_t)C), *d_db = lab_upload<float>(db, (size_t)C);
    float *d_dw2 = lab_upload<float>(dw, (size_t)C), *d_db2 = lab_upload<float>(db, (size_t)C);
    floatX *d_out, *d_out2, *d_res, *d_res2;
    float *d_mean, *d_rstd, *d_mean2, *d_rstd2, *d_scratch;
    LAB_CK(cudaMalloc(&d_out, NC * sizeof(floatX))); LAB_CK(cudaMalloc(&d_out2, NC * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_res, NC * sizeof(floatX))); LAB_CK(cudaMalloc(&d_res2, NC * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_mean, (size_t)N * 4)); LAB_CK(cudaMalloc(&d_rstd, (size_t)N * 4));
    LAB_CK(cudaMalloc(&d_mean2, (size_t)N * 4)); LAB_CK(cudaMalloc(&d_rstd2, (size_t)N * 4));
    LAB_CK(cudaMalloc(&d_scratch, gpt2rt__cu_layernorm_backward_scratch_bytes(N, C)));

    /* forward of a */
    LAB_CK(gpt2rt__cu_layernorm_forward<floatX>(d_out, d_mean, d_rstd, d_a, d_w, d_bias, N, C, 0));
    LAB_CK(gpt2rt__cu_layernorm_forward<floatX>(d_out2, d_mean2, d_rstd2, d_a, d_w, d_bias, N, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    gpt2rt__cpu_layernorm_forward(ref, mean, rstd, a, w, bias, N, C, 1);
    lab_download<floatX>(got, d_out, NC);
    lab_download<float>(gmean, d_mean, (size_t)N);
    lab_download<float>(grstd, d_rstd, (size_t)N);
    lab_compare("forward out", got, ref, NC, tol, tol);
    lab_compare("forward mean (fp32)", gmean, mean, (size_t)N, 1e-5f, 1e-5f);
    lab_compare("forward rstd (fp32)", grstd, rstd, (size_t)N, 1e-5f, 1e-5f);
    lab_same_bits("forward out, run twice", d_out, d_out2, NC * sizeof(floatX));
    lab_same_bits("forward rstd, run twice", d_rstd, d_rstd2, (size_t)N * 4);

    /* fused residual + forward: res = a + b (as stored), out = LN(res) */
    LAB_CK(gpt2rt__cu_residual_layernorm_forward<floatX>(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    for (size_t i = 0; i < NC; i++) res[i] = lab_f(lab_to<floatX>(a[i] + b[i]));
    gpt2rt__cpu_layernorm_forward(ref, mean, rstd, res, w, bias, N, C, 1);
    lab_download<floatX>(got, d_res, NC);
    lab_compare("fused residual: res = a + b", got, res, NC, tol, tol);
    lab_download<floatX>(got, d_out, NC);
    lab_compare("fused residual: out = LN(res)", got, ref, NC, tol, tol);
    lab_download<float>(grstd, d_rstd, (size_t)N);
    lab_compare("fused residual: rstd (fp32)", grstd, rstd, (size_t)N, 1e-5f, 1e-5f);
    /* the unfused pair gives the same bits */
    LAB_CK(gpt2rt__cu_residual_forward<floatX>(d_res2, d_a, d_b, (int64_t)NC, 0));
    LAB_CK(gpt2rt__cu_layernorm_forward<floatX>(d_out2, d_mean2, d_rstd2, d_res2, d_w, d_bias, N, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("fused == residual_forward + layernorm", d_out, d_out2, NC * sizeof(floatX));
    lab_same_bits("fused res == residual_forward", d_res, d_res2, NC * sizeof(floatX));

    /* backward of LN(res), from the CPU mean/rstd */
    float *d_cmean = lab_upload<float>(mean, (size_t)N), *d_crstd = lab_upload<float>(rstd, (size_t)N);
    LAB_CK(gpt2rt__cu_layernorm_backward<floatX>(d_dinp, d_dw, d_db, d_dout, d_res, d_w, d_cmean, d_crstd, d_scratch, N, C, 0));
    LAB_CK(gpt2rt__cu_layernorm_backward<floatX>(d_dinp2, d_dw2, d_db2, d_dout, d_res, d_w, d_cmean, d_crstd, d_scratch, N, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("backward dinp, run twice", d_dinp, d_dinp2, NC * sizeof(floatX));
    lab_same_bits("backward dw, run twice", d_dw, d_dw2, (size_t)C * 4);
    lab_same_bits("backward db, run twice", d_db, d_db2, (size_t)C * 4);
    /* a frozen LayerNorm (dw = db = NULL) gives the same dinp */
    floatX *d_dinp3 = lab_upload<floatX>(dinp, NC);
    LAB_CK(gpt2rt__cu_layernorm_backward<floatX>(d_dinp3, NULL, NULL, d_dout, d_res, d_w, d_cmean, d_crstd, d_scratch, N, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("backward dw = db = NULL (frozen): same dinp", d_dinp, d_dinp3, NC * sizeof(floatX));
    LAB_CK(cudaFree(d_dinp3));
    gpt2rt__cpu_layernorm_backward(dinp, dw, db, dout, res, w, mean, rstd, N, C, 1);
    lab_download<floatX>(got, d_dinp, NC);
    lab_download<float>(gdw, d_dw, (size_t)C);
    lab_download<float>(gdb, d_db, (size_t)C);
    lab_compare("backward dinp +=", got, dinp, NC, tol, tol);
    /* fp32 sums of N terms of size ~1 in another order: absolute slack ~ sqrt(N) ulp */
    lab_compare("backward dw += (fp32)", gdw, dw, (size_t)C, 1e-3f, 1e-5f);
    lab_compare("backward db += (fp32)", gdb, db, (size_t)C, 1e-3f, 1e-5f);

    if (timing) {
        double x = sizeof(floatX);
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_layernorm_forward<floatX>(d_out, d_mean, d_rstd, d_a, d_w, d_bias, N, C, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time forward", ms, (2.0 * NC * x + 8.0 * N) / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_residual_layernorm_forward<floatX>(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time fused residual + forward", ms, (4.0 * NC * x + 8.0 * N) / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_residual_forward<floatX>(d_res2, d_a, d_b, (int64_t)NC, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time residual_forward alone", ms, 3.0 * NC * x / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_layernorm_backward<floatX>(d_dinp2, d_dw2, d_db2, d_dout, d_res, d_w, d_cmean, d_crstd, d_scratch, N, C, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time backward", ms, (4.0 * NC * x + 8.0 * N) / ms * 1e-6);
    }
    free(a); free(b); free(res); free(out); free(ref); free(got); free(dout); free(dinp); free(w); free(bias);
    free(dw); free(db); free(gdw); free(gdb); free(mean); free(rstd); free(gmean); free(grstd);
    LAB_CK(cudaFree(d_a)); LAB_CK(cudaFree(d_b)); LAB_CK(cudaFree(d_w)); LAB_CK(cudaFree(d_bias));
    LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_dinp)); LAB_CK(cudaFree(d_dinp2)); LAB_CK(cudaFree(d_dw));
    LAB_CK(cudaFree(d_db)); LAB_CK(cudaFree(d_dw2)); LAB_CK(cudaFree(d_db2)); LAB_CK(cudaFree(d_out));
    LAB_CK(cudaFree(d_out2)); LAB_CK(cudaFree(d_res)); LAB_CK(cudaFree(d_res2)); LAB_CK(cudaFree(d_mean));
    LAB_CK(cudaFree(d_rstd)); LAB_CK(cudaFree(d_mean2)); LAB_CK(cudaFree(d_rstd2)); LAB_CK(cudaFree(d_scratch));
    LAB_CK(cudaFree(d_cmean)); LAB_CK(cudaFree(d_crstd));
}

int main(void) {
    /* GPT-2 124M activations: BT = 8192 rows of C = 768 (vectorised path) */
    run<float>(8192, 768, 1);
    run<__nv_bfloat16>(8192, 768, 1);
    run<__half>(8192, 768, 1);
    /* odd widths (scalar path), C = 100 (fast for fp32 only), GPT-2 XL width (3 warps per
       block), and C = 7000 (one warp, > 48 KiB of shared memory) */
    run<float>(37, 67, 0);
    run<__nv_bfloat16>(37, 100, 0);
    run<__half>(45, 67, 0);
    run<float>(37, 100, 0);
    run<__nv_bfloat16>(300, 1600, 0);
    run<__half>(70, 7000, 0);
    run<float>(70, 7000, 0);
    return lab_finish("layernorm");
}
