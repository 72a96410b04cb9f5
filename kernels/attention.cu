/* kernels/attention.cu - lab for the fused causal attention (gpt2rt.h, section 8.3 Attention).
   Validates out, lse and dqkv against the CPU reference in gpt2rt.h (run in fp32 on inputs
   rounded to the storage type), checks that dqkv is overwritten and that two runs give the same
   bits, cross-checks the generic path against the tensor-core path, the same under aLLM4TS's
   placeholder mask (TH history rows causal, each later row sees the history and itself), then times
   B=8 T=1024 C=768 NH=12. Exit status 0 when everything passes.

   cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
       -o /tmp/lab_attention attention.cu -lcublasLt && /tmp/lab_attention            */
#if defined(__GNUC__) && !defined(__clang__)
/* gcc 12 reports a false -Wmaybe-uninitialized inside avx512fintrin.h (_mm512_sqrt_ps inlined
   into gpt2rt__opt_adamw_avx512) when gpt2rt.h is compiled as C++ with -O3 */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

struct Shape { int B, T, C, NH; };

/* storage-type tolerances, relative to the largest |reference| value */
template <typename X> static float tol_out(void);
template <> float tol_out<float>(void) { return 1e-4f; }
template <> float tol_out<__nv_bfloat16>(void) { return 3e-2f; }
template <> float tol_out<__half>(void) { return 5e-3f; }

static void compare_rel_max(const char *what, const float *got, const float *want, size_t n, float tol) {
    float mx = 0.0f;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(want[i]));
    lab_compare(what, got, want, n, tol * (mx > 0.0f ? mx : 1.0f), 0.0f);
}

/* columns [c0, c0 + C) of each (3C)-wide row of x (BT rows) into y (BT, C) */
static void take_cols(float *y, const float *x, int64_t BT, int C, int c0) {
    for (int64_t i = 0; i < BT; i++) memcpy(y + i * C, x + i * 3 * C + c0, (size_t)C * sizeof(float));
}

/* TH: the placeholder mask's history (0: causal) */
template <typename X> static void validate(Shape sh, int allow_fast, int TH = 0) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, HS = C / NH;
    const int64_t BT = (int64_t)B * T, n_qkv = BT * 3 * C, n_out = BT * C, n_lse = (int64_t)B * NH * T;
    const int fast = gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, allow_fast);
    printf("%s B=%d T=%d C=%d NH=%d (HS=%d), %s path%s\n", lab_type_name<X>(), B, T, C, NH, HS,
           fast ? "tensor-core" : "generic", TH ? ", placeholder mask" : "");

    /* inputs, rounded to X so the CPU sees exactly what the GPU sees */
    float *qkv = (float *)malloc(n_qkv * 4), *dout = (float *)malloc(n_out * 4);
    lab_fill(qkv, n_qkv, 1.5f);
    lab_fill(dout, n_out, 1.0f);
    for (int64_t i = 0; i < n_qkv; i++) qkv[i] = lab_f(lab_to<X>(qkv[i]));
    for (int64_t i = 0; i < n_out; i++) dout[i] = lab_f(lab_to<X>(dout[i]));

    /* CPU reference, one thread */
    float *out_ref = (float *)malloc(n_out * 4), *lse_ref = (float *)malloc(n_lse * 4);
    float *dqkv_ref = (float *)malloc(n_qkv * 4), *scratch = (float *)malloc(gpt2rt__pad16(2 * T) * 4);
    gpt2rt__cpu_attention_forward_masked(out_ref, lse_ref, qkv, scratch, B, T, C, NH, TH ? TH : T, NULL, 1);
    gpt2rt__cpu_attention_backward_masked(dqkv_ref, dout, qkv, lse_ref, scratch, B, T, C, NH, TH ? TH : T, NULL, 1);

    /* GPU; outputs start as NaN (all-ones bytes) to catch rows that are never written */
    X *d_qkv = lab_upload<X>(qkv, n_qkv), *d_dout = lab_upload<X>(dout, n_out), *d_out, *d_out2, *d_dqkv, *d_dqkv2;
    float *d_lse, *d_lse2, *d_D;
    LAB_CK(cudaMalloc(&d_out, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_out2, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_dqkv, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_dqkv2, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_lse, n_lse * 4));
    LAB_CK(cudaMalloc(&d_lse2, n_lse * 4));
    LAB_CK(cudaMalloc(&d_D, n_lse * 4));
    LAB_CK(cudaMemset(d_out, 0xFF, n_out * sizeof(X)));
    LAB_CK(cudaMemset(d_lse, 0xFF, n_lse * 4));
    LAB_CK(cudaMemset(d_dqkv, 0xFF, n_qkv * sizeof(X)));
    LAB_CK(cudaMemset(d_dqkv2, 0x3C, n_qkv * sizeof(X))); /* finite garbage: overwrite, not accumulate */

    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_out, d_lse, d_qkv, B, T, C, NH, 0, allow_fast, NULL, TH));
    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_out2, d_lse2, d_qkv, B, T, C, NH, 0, allow_fast, NULL, TH));
    LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, 0, allow_fast,
                                                 NULL, TH));
    LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_dqkv2, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, 0, allow_fast,
                                                 NULL, TH));
    LAB_CK(cudaDeviceSynchronize());

    float *out = (float *)malloc(n_out * 4), *lse = (float *)malloc(n_lse * 4), *dqkv = (float *)malloc(n_qkv * 4);
    float *g = (float *)malloc(n_out * 4), *w = (float *)malloc(n_out * 4);
    lab_download<X>(out, d_out, n_out);
    LAB_CK(cudaMemcpy(lse, d_lse, n_lse * 4, cudaMemcpyDeviceToHost));
    lab_download<X>(dqkv, d_dqkv, n_qkv);
    const float tol = tol_out<X>();
    compare_rel_max("out", out, out_ref, n_out, tol);
    compare_rel_max("lse", lse, lse_ref, n_lse, 1e-4f);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        take_cols(g, dqkv, BT, C, part * C);
        take_cols(w, dqkv_ref, BT, C, part * C);
        compare_rel_max(names[part], g, w, n_out, tol);
    }
    lab_same_bits("forward out, two runs", d_out, d_out2, n_out * sizeof(X));
    lab_same_bits("forward lse, two runs", d_lse, d_lse2, n_lse * 4);
    lab_same_bits("backward dqkv, two runs", d_dqkv, d_dqkv2, n_qkv * sizeof(X));

    free(qkv); free(dout); free(out_ref); free(lse_ref); free(dqkv_ref); free(scratch);
    free(out); free(lse); free(dqkv); free(g); free(w);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_out)); LAB_CK(cudaFree(d_out2));
    LAB_CK(cudaFree(d_dqkv)); LAB_CK(cudaFree(d_dqkv2)); LAB_CK(cudaFree(d_lse)); LAB_CK(cudaFree(d_lse2));
    LAB_CK(cudaFree(d_D));
}

template <typename X> static void bench(int allow_fast) {
    const int B = 8, T = 1024, C = 768, NH = 12, HS = C / NH;
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    float *h = (float *)malloc(n_qkv * 4);
    lab_fill(h, n_qkv, 1.5f);
    X *d_qkv = lab_upload<X>(h, n_qkv), *d_dout = lab_upload<X>(h, n_out), *d_out, *d_dqkv;
    float *d_lse, *d_D;
    LAB_CK(cudaMalloc(&d_out, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_dqkv, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_lse, n_lse * 4));
    LAB_CK(cudaMalloc(&d_D, n_lse * 4));
    const int reps = gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, allow_fast) ? 50 : 5;
    float ms_f = lab_time_ms([&] { LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_out, d_lse, d_qkv, B, T, C, NH, 0, allow_fast)); }, reps);
    float ms_b = lab_time_ms([&] {
        LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, 0, allow_fast));
    }, reps);
    const double flop_f = 4.0 * B * NH * (double)T * T * HS / 2.0, flop_b = 2.5 * flop_f; /* causal half */
    printf("  %-5s %-11s B=%d T=%d C=%d NH=%d: forward %8.3f ms %7.1f TFLOP/s   backward %8.3f ms %7.1f TFLOP/s\n",
           lab_type_name<X>(), gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, allow_fast) ? "tensor-core" : "generic",
           B, T, C, NH, ms_f, flop_f / (ms_f * 1e9), ms_b, flop_b / (ms_b * 1e9));
    free(h);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_out)); LAB_CK(cudaFree(d_dqkv));
    LAB_CK(cudaFree(d_lse)); LAB_CK(cudaFree(d_D));
}

template <typename X> static void validate_all(void) {
    const Shape shapes[3] = {{2, 256, 768, 12}, {2, 37, 64, 4}, {1, 1000, 768, 12}};
    for (int i = 0; i < 3; i++) validate<X>(shapes[i], 1);
    /* the placeholder mask: history 130 of 200 (placeholders in tiles 2 and 3, hidden keys off
       the diagonal), and 20 of 37 on the generic path */
    validate<X>(Shape{2, 200, 768, 12}, 1, 130);
    validate<X>(shapes[1], 1, 20);
}

int main(void) {
    int dev = 0;
    cudaDeviceProp prop;
    LAB_CK(cudaGetDevice(&dev));
    LAB_CK(cudaGetDeviceProperties(&prop, dev));
    printf("attention lab on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

    validate_all<float>();
    validate_all<__nv_bfloat16>();
    validate_all<__half>();
    /* the generic kernels at HS = 64 with 16-bit storage (the fast path normally takes these) */
    validate<__nv_bfloat16>(Shape{2, 100, 768, 12}, 0);
    validate<__half>(Shape{2, 100, 768, 12}, 0);

    printf("timing\n");
    bench<__nv_bfloat16>(1);
    bench<__half>(1);
    bench<float>(1);
    bench<__nv_bfloat16>(0);
    return lab_finish("attention");
}
