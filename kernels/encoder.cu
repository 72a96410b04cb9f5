/* kernels/encoder.cu - lab of the CUDA embedding ops (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_encoder_forward, gpt2rt__cu_encoder_buckets + gpt2rt__cu_encoder_backward,
   against the CPU gpt2rt__cpu_encoder_forward / gpt2rt__cpu_encoder_backward, for fp32, bf16, fp16.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_encoder encoder.cu -lcublasLt && /tmp/lab_encoder
   The backward sums the same (storage-rounded) values in the same order as the CPU, so
   dwte and dwpe are expected to match the CPU bit for bit; the check allows 1e-6. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

/* tokens: mostly uniform in [0, V), with a quarter drawn from 4 frequent tokens so that
   some buckets are long (as newline / "the" are in real text) */
static void make_tokens(int32_t *tok, int64_t n, int64_t V) {
    for (int64_t i = 0; i < n; i++) {
        float u = lab_uniform();
        int64_t r = (int64_t)((lab_uniform() * 0.5f + 0.5f) * (float)V) % V;
        tok[i] = (int32_t)(u < -0.5f ? (r % 4) * 13 : r);
    }
}

/* relative (and absolute) tolerance of a value stored in T */
template <typename T> static float tol_of(void);
template <> float tol_of<float>(void) { return 1e-5f; }
template <> float tol_of<__nv_bfloat16>(void) { return 1e-2f; }
template <> float tol_of<__half>(void) { return 2e-3f; }

template <typename floatX>
static void run(int64_t B, int64_t T, int64_t C, int64_t V, int64_t Vp, int64_t P, int timing) {
    const float tol = tol_of<floatX>();
    int64_t BT = B * T;
    printf("%s  B=%lld T=%lld C=%lld Vp=%lld\n", lab_type_name<floatX>(), (long long)B, (long long)T, (long long)C,
           (long long)Vp);
    float *wte = (float *)malloc((size_t)(Vp * C) * 4), *wpe = (float *)malloc((size_t)(P * C) * 4);
    float *dout = (float *)malloc((size_t)(BT * C) * 4), *out = (float *)malloc((size_t)(BT * C) * 4);
    float *ref = (float *)malloc((size_t)(BT * C) * 4);
    float *dwte = (float *)malloc((size_t)(Vp * C) * 4), *dwpe = (float *)malloc((size_t)(P * C) * 4);
    int32_t *tok = (int32_t *)malloc((size_t)BT * 4);
    int32_t *buckets = (int32_t *)malloc((size_t)gpt2rt__cu_encoder_bucket_ints(BT) * 4);
    lab_fill(wte, (size_t)(Vp * C), 0.1f);
    lab_fill(wpe, (size_t)(P * C), 0.02f);
    lab_fill(dout, (size_t)(BT * C), 1.0f);
    lab_fill(dwte, (size_t)(Vp * C), 0.5f);
    lab_fill(dwpe, (size_t)(P * C), 0.5f);
    make_tokens(tok, BT, V);
    /* the reference sees the values as stored */
    for (int64_t i = 0; i < Vp * C; i++) wte[i] = lab_f(lab_to<floatX>(wte[i]));
    for (int64_t i = 0; i < P * C; i++) wpe[i] = lab_f(lab_to<floatX>(wpe[i]));
    for (int64_t i = 0; i < BT * C; i++) dout[i] = lab_f(lab_to<floatX>(dout[i]));

    floatX *d_wte = lab_upload<floatX>(wte, (size_t)(Vp * C)), *d_wpe = lab_upload<floatX>(wpe, (size_t)(P * C));
    floatX *d_dout = lab_upload<floatX>(dout, (size_t)(BT * C)), *d_out;
    float *d_dwte = lab_upload<float>(dwte, (size_t)(Vp * C)), *d_dwpe = lab_upload<float>(dwpe, (size_t)(P * C));
    float *d_dwte2, *d_dwpe2;
    int32_t *d_tok, *d_buckets;
    LAB_CK(cudaMalloc(&d_out, (size_t)(BT * C) * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_dwte2, (size_t)(Vp * C) * 4));
    LAB_CK(cudaMalloc(&d_dwpe2, (size_t)(P * C) * 4));
    LAB_CK(cudaMalloc(&d_tok, (size_t)BT * 4));
    LAB_CK(cudaMalloc(&d_buckets, (size_t)gpt2rt__cu_encoder_bucket_ints(BT) * 4));
    LAB_CK(cudaMemcpy(d_tok, tok, (size_t)BT * 4, cudaMemcpyHostToDevice));

    /* forward */
    LAB_CK(gpt2rt__cu_encoder_forward<floatX>(d_out, d_tok, d_wte, d_wpe, B, T, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_download<floatX>(out, d_out, (size_t)(BT * C));
    gpt2rt__cpu_encoder_forward(ref, tok, wte, wpe, B, T, C, 1);
    lab_compare("forward out", out, ref, (size_t)(BT * C), tol, tol);

    /* backward, twice from the same start: the second copy for the determinism check */
    int64_t nb = gpt2rt__cu_encoder_buckets(buckets, tok, BT, Vp);
    if (nb < 0) { printf("  bucket list: bad token: FAIL\n"); lab_failures++; return; }
    LAB_CK(cudaMemcpy(d_buckets, buckets, (size_t)gpt2rt__cu_encoder_bucket_ints(BT) * 4, cudaMemcpyHostToDevice));
    LAB_CK(cudaMemcpy(d_dwte2, d_dwte, (size_t)(Vp * C) * 4, cudaMemcpyDeviceToDevice));
    LAB_CK(cudaMemcpy(d_dwpe2, d_dwpe, (size_t)(P * C) * 4, cudaMemcpyDeviceToDevice));
    LAB_CK(gpt2rt__cu_encoder_backward<floatX>(d_dwte, d_dwpe, d_dout, d_buckets, nb, B, T, C, 0));
    LAB_CK(gpt2rt__cu_encoder_backward<floatX>(d_dwte2, d_dwpe2, d_dout, d_buckets, nb, B, T, C, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("backward dwte, run twice", d_dwte, d_dwte2, (size_t)(Vp * C) * 4);
    lab_same_bits("backward dwpe, run twice", d_dwpe, d_dwpe2, (size_t)(P * C) * 4);
    float *got_te = (float *)malloc((size_t)(Vp * C) * 4), *got_pe = (float *)malloc((size_t)(P * C) * 4);
    lab_download<float>(got_te, d_dwte, (size_t)(Vp * C));
    lab_download<float>(got_pe, d_dwpe, (size_t)(P * C));
    gpt2rt__cpu_encoder_backward(dwte, dwpe, dout, tok, B, T, C, 1);
    lab_compare("backward dwte (fp32)", got_te, dwte, (size_t)(Vp * C), 1e-6f, 1e-6f);
    lab_compare("backward dwpe (fp32)", got_pe, dwpe, (size_t)(P * C), 1e-6f, 1e-6f);
    size_t same = 0;
    for (int64_t i = 0; i < Vp * C; i++) same += memcmp(&got_te[i], &dwte[i], 4) == 0;
    printf("  %-40s %zu of %lld\n", "dwte elements bitwise equal to the CPU", same, (long long)(Vp * C));

    if (timing) {
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_encoder_forward<floatX>(d_out, d_tok, d_wte, d_wpe, B, T, C, 0)); }, 20);
        double bytes = (double)BT * C * 3 * sizeof(floatX) + BT * 4.0;
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time forward", ms, bytes / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_encoder_backward<floatX>(d_dwte2, d_dwpe2, d_dout, d_buckets, nb, B, T, C, 0)); }, 20);
        bytes = 2.0 * BT * C * sizeof(floatX) + 8.0 * nb * C /* the dwte rows of the distinct tokens, read and written */ + 8.0 * T * C + 12.0 * BT;
        printf("  %-40s %8.4f ms  %7.1f GB/s   (%lld buckets)\n", "time backward", ms, bytes / ms * 1e-6, (long long)nb);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < 10; r++) nb = gpt2rt__cu_encoder_buckets(buckets, tok, BT, Vp);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("  %-40s %8.4f ms (host)\n", "time bucket list",
               ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6) / 10);
    }
    free(got_te); free(got_pe);
    free(wte); free(wpe); free(dout); free(out); free(ref); free(dwte); free(dwpe); free(tok); free(buckets);
    LAB_CK(cudaFree(d_wte)); LAB_CK(cudaFree(d_wpe)); LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_out));
    LAB_CK(cudaFree(d_dwte)); LAB_CK(cudaFree(d_dwpe)); LAB_CK(cudaFree(d_dwte2)); LAB_CK(cudaFree(d_dwpe2));
    LAB_CK(cudaFree(d_tok)); LAB_CK(cudaFree(d_buckets));
}

int main(void) {
    /* GPT-2 124M shapes (vectorised path), then an odd width (scalar path) */
    run<float>(8, 1024, 768, 50257, 50304, 1024, 1);
    run<__nv_bfloat16>(8, 1024, 768, 50257, 50304, 1024, 1);
    run<__half>(8, 1024, 768, 50257, 50304, 1024, 1);
    run<float>(3, 37, 67, 100, 104, 40, 0);
    run<__nv_bfloat16>(3, 37, 68, 100, 104, 40, 0);
    run<__half>(3, 37, 67, 100, 104, 40, 0);
    return lab_finish("encoder");
}
