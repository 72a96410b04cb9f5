/* kernels/attention.cu - lab for the fused causal attention (gpt2rt.h, section 8.3 Attention).
   Validates out, lse and dqkv against the CPU reference in gpt2rt.h (run in fp32 on inputs
   rounded to the storage type), checks that dqkv is overwritten and that two runs give the same
   bits, cross-checks the generic path against the tensor-core path, the same under aLLM4TS's
   placeholder mask (TH history rows causal, each later row sees the history and itself). The
   16-bit forward has two tensor-core kernels: mma.sync (sm_80 and later) and, on a compute
   capability 9.0 device running the sm_90a build, the Hopper wgmma kernel; so have the backward's
   dK,dV and dQ passes. Both are validated against the CPU, and the wgmma ones against mma.sync
   (same_as_mma: out, lse, dq, dk, dv; and every other variant of the choice by speed, forced
   by its allow bit, the same bits as mma.sync); the pipelined wgmma forward's variants against
   the CPU (validate_wgp). Then times B=8 T=1024 C=768 NH=12: forward + backward with each
   variant forced and with the launchers' choice ("auto", its pick printed under it), then every
   variant of each direction alone. Exit status 0 when everything passes. lab_attention time B:
   only the timing, at batch B.

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
/* which kernels allow_fast runs at HS 64: 0 the generic path, GPT2RT__CU_ATT_BEST "auto" (the
   fastest here, measured), one bit: that variant where it runs (each direction's entry of that
   index), else mma.sync; a name without spaces (make bench-gpu's table reads it) */
template <typename X> static const char *path_name(int C, int NH, int allow_fast) {
    if (!gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, allow_fast)) return "generic";
    if (allow_fast == GPT2RT__CU_ATT_BEST) return "auto";
    switch (allow_fast) {
    case GPT2RT__CU_ATT_WGMMA: return gpt2rt__cu_attn_fast<X>::wgmma_ok() ? "wgmma" : "mma.sync";
    case GPT2RT__CU_ATT_WGP: return gpt2rt__cu_attn_fast<X>::wgmma_ok() ? "wgmma-pipelined" : "mma.sync";
    case GPT2RT__CU_ATT_ALT: return gpt2rt__cu_attn_fast<X>::wgmma_ok() ? "wgmma-pipelined-dq3wg" : "mma.sync";
    case GPT2RT__CU_ATT_MMA2: return "mma.sync-2tiles";
    default: return "mma.sync";
    }
}

template <typename X> static void validate(Shape sh, int allow_fast, int TH = 0) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, HS = C / NH;
    const int64_t BT = (int64_t)B * T, n_qkv = BT * 3 * C, n_out = BT * C, n_lse = (int64_t)B * NH * T;
    printf("%s B=%d T=%d C=%d NH=%d (HS=%d), %s forward%s\n", lab_type_name<X>(), B, T, C, NH, HS,
           path_name<X>(C, NH, allow_fast), TH ? ", placeholder mask" : "");

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

/* The wgmma forward against the mma.sync forward on the same inputs. They differ only in the
   order the hardware sums each product's terms (fp32): a score moves by a few fp32 ulps, which
   can move a probability across a rounding boundary of X (one ulp, eps = 2^-8 bf16, 2^-11 fp16,
   of p <= 1) and the output across one (eps |out|). So |out diff| <= 2 eps max|v| (|out| <= max|v|,
   a convex combination), and lse (fp32, 64-term dot products) within 1e-5 relative. */
template <typename X> static void same_as_mma(Shape sh, int TH = 0) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
    if (!gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, GPT2RT__CU_ATT_MMA) || !gpt2rt__cu_attn_fast<X>::wgmma_ok()) {
        printf("  wgmma vs mma.sync %s T=%d: skipped (the wgmma forward needs compute capability 9.0 and the sm_90a build)\n",
               lab_type_name<X>(), T);
        return;
    }
    const int64_t BT = (int64_t)B * T, n_qkv = BT * 3 * C, n_out = BT * C, n_lse = (int64_t)B * NH * T;
    float *qkv = (float *)malloc(n_qkv * 4);
    lab_fill(qkv, n_qkv, 1.5f);
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_qkv; i++) {
        qkv[i] = lab_f(lab_to<X>(qkv[i]));
        if (i % (3 * C) >= 2 * C) vmax = fmaxf(vmax, fabsf(qkv[i]));
    }
    X *d_qkv = lab_upload<X>(qkv, n_qkv), *d_o1, *d_o2;
    float *d_l1, *d_l2;
    LAB_CK(cudaMalloc(&d_o1, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_o2, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_l1, n_lse * 4));
    LAB_CK(cudaMalloc(&d_l2, n_lse * 4));
    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_o1, d_l1, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH));
    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_WGMMA, NULL, TH));
    LAB_CK(cudaDeviceSynchronize());
    float *o1 = (float *)malloc(n_out * 4), *o2 = (float *)malloc(n_out * 4), *l1 = (float *)malloc(n_lse * 4),
          *l2 = (float *)malloc(n_lse * 4);
    lab_download<X>(o1, d_o1, n_out);
    lab_download<X>(o2, d_o2, n_out);
    LAB_CK(cudaMemcpy(l1, d_l1, n_lse * 4, cudaMemcpyDeviceToHost));
    LAB_CK(cudaMemcpy(l2, d_l2, n_lse * 4, cudaMemcpyDeviceToHost));
    const float eps = lab_f(lab_to<X>(1.0f + 1.0f / 1024.0f)) != 1.0f ? 1.0f / 2048.0f : 1.0f / 256.0f;
    char what[96];
    snprintf(what, sizeof what, "wgmma vs mma.sync out %s T=%d%s", lab_type_name<X>(), T, TH ? " placeholders" : "");
    lab_compare(what, o2, o1, n_out, 2.0f * eps * vmax, 0.0f);
    snprintf(what, sizeof what, "wgmma vs mma.sync lse %s T=%d%s", lab_type_name<X>(), T, TH ? " placeholders" : "");
    compare_rel_max(what, l2, l1, n_lse, 1e-5f);

    /* the backward from the same forward (mma.sync's out and lse): dQ, dK, dV by wgmma or
       mma.sync. A P^T, dS^T or dS element that crosses a rounding boundary moves its
       products by one ulp (eps relative), and each result rounds to X once more: within
       4 eps of each part's largest value */
    float *dy = (float *)malloc(n_out * 4), *g1 = (float *)malloc(n_qkv * 4), *g2 = (float *)malloc(n_qkv * 4);
    float *p1 = (float *)malloc(n_out * 4), *p2 = (float *)malloc(n_out * 4);
    lab_fill(dy, n_out, 1.0f);
    X *d_dy = lab_upload<X>(dy, n_out), *d_g1, *d_g2;
    float *d_D;
    LAB_CK(cudaMalloc(&d_g1, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_g2, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_D, n_lse * 4));
    LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_g1, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH));
    LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_g2, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_WGMMA, NULL, TH));
    LAB_CK(cudaDeviceSynchronize());
    lab_download<X>(g1, d_g1, n_qkv);
    lab_download<X>(g2, d_g2, n_qkv);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        take_cols(p1, g1, BT, C, part * C);
        take_cols(p2, g2, BT, C, part * C);
        snprintf(what, sizeof what, "wgmma vs mma.sync %s %s T=%d%s", names[part], lab_type_name<X>(), T, TH ? " placeholders" : "");
        compare_rel_max(what, p2, p1, n_out, 4.0f * eps);
    }
    /* the launchers pick between them by speed alone: that needs the same bits */
    snprintf(what, sizeof what, "wgmma == mma.sync bitwise: out, lse, dqkv %s T=%d%s", lab_type_name<X>(), T, TH ? " placeholders" : "");
    lab_same_bits(what, d_o1, d_o2, n_out * sizeof(X));
    lab_same_bits(what, d_l1, d_l2, n_lse * 4);
    lab_same_bits(what, d_g1, d_g2, n_qkv * sizeof(X));
    /* the pipelined wgmma backward (its dQ pass with 2 and 3 warpgroups per CTA) on the D the calls above left
       in d_D: the same sums in the same order as the wgmma backward, so its bits; against
       mma.sync as the wgmma backward is */
    for (int nwg = 2; nwg <= 3; nwg++) {
        X *d_g3;
        LAB_CK(cudaMalloc(&d_g3, n_qkv * sizeof(X)));
        LAB_CK(cudaMemset(d_g3, 0xFF, n_qkv * sizeof(X)));
        LAB_CK((nwg == 2 ? gpt2rt__cu_attn_bwd_wgp_launch_n<X, 2>(d_g3, d_dy, d_qkv, d_l1, d_D, B, T, C, NH, 0, TH)
                         : gpt2rt__cu_attn_bwd_wgp_launch_n<X, 3>(d_g3, d_dy, d_qkv, d_l1, d_D, B, T, C, NH, 0, TH)));
        LAB_CK(cudaDeviceSynchronize());
        snprintf(what, sizeof what, "pipelined wgmma (dQ %d warpgroups) vs wgmma backward dqkv %s T=%d%s", nwg, lab_type_name<X>(), T,
                 TH ? " placeholders" : "");
        lab_same_bits(what, d_g3, d_g2, n_qkv * sizeof(X));
        lab_download<X>(g2, d_g3, n_qkv);
        for (int part = 0; part < 3; part++) {
            take_cols(p1, g1, BT, C, part * C);
            take_cols(p2, g2, BT, C, part * C);
            snprintf(what, sizeof what, "pipelined wgmma (%d) vs mma.sync %s %s T=%d%s", nwg, names[part], lab_type_name<X>(), T,
                     TH ? " placeholders" : "");
            compare_rel_max(what, p2, p1, n_out, 4.0f * eps);
        }
        LAB_CK(cudaFree(d_g3));
    }
    /* every other variant forced (each direction's entry of that index where it runs, else
       mma.sync): out, lse and dqkv the same bits as mma.sync's, what the choice by speed needs */
    const int others[3] = {GPT2RT__CU_ATT_WGP, GPT2RT__CU_ATT_MMA2, GPT2RT__CU_ATT_ALT};
    for (int i = 0; i < 3; i++) {
        LAB_CK(cudaMemset(d_o2, 0xFF, n_out * sizeof(X)));
        LAB_CK(cudaMemset(d_l2, 0xFF, n_lse * 4));
        LAB_CK(cudaMemset(d_g2, 0xFF, n_qkv * sizeof(X)));
        LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, others[i], NULL, TH));
        LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_g2, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, others[i], NULL, TH));
        LAB_CK(cudaDeviceSynchronize());
        snprintf(what, sizeof what, "%s == mma.sync bitwise: out, lse, dqkv %s T=%d%s", path_name<X>(C, NH, others[i]),
                 lab_type_name<X>(), T, TH ? " placeholders" : "");
        lab_same_bits(what, d_o1, d_o2, n_out * sizeof(X));
        lab_same_bits(what, d_l1, d_l2, n_lse * 4);
        lab_same_bits(what, d_g1, d_g2, n_qkv * sizeof(X));
    }
    free(dy); free(g1); free(g2); free(p1); free(p2);
    LAB_CK(cudaFree(d_dy)); LAB_CK(cudaFree(d_g1)); LAB_CK(cudaFree(d_g2)); LAB_CK(cudaFree(d_D));
    free(qkv); free(o1); free(o2); free(l1); free(l2);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_o1)); LAB_CK(cudaFree(d_o2)); LAB_CK(cudaFree(d_l1)); LAB_CK(cudaFree(d_l2));
}

template <typename X> static void bench(int allow_fast, int B) {
    const int T = 1024, C = 768, NH = 12, HS = C / NH;
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
    printf("  %-5s %-8s B=%d T=%d C=%d NH=%d: forward %8.3f ms %7.1f TFLOP/s   backward %8.3f ms %7.1f TFLOP/s\n",
           lab_type_name<X>(), path_name<X>(C, NH, allow_fast),
           B, T, C, NH, ms_f, flop_f / (ms_f * 1e9), ms_b, flop_b / (ms_b * 1e9));
    if (allow_fast == GPT2RT__CU_ATT_BEST && gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, allow_fast))
        lab_print_attn_pick<X>("        ", B * NH, T);
    free(h);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_out)); LAB_CK(cudaFree(d_dqkv));
    LAB_CK(cudaFree(d_lse)); LAB_CK(cudaFree(d_D));
}

/* The wgmma forward with 1 warpgroup per CTA (64 query rows, 40 KiB smem) against the
   launchers' 2 (GPT2RT__CU_ATT_NWG): each warpgroup computes the same sums in the same order,
   so the outputs must be the same bits; then both timed at the bench shape */
template <typename X> static void bench_wg_ctas(int B) {
    const int T = 1024, C = 768, NH = 12, HS = C / NH;
    if (!gpt2rt__cu_attn_fast<X>::wgmma_ok()) { printf("  %s wgmma CTA shapes: skipped (no sm_90a device code here)\n", lab_type_name<X>()); return; }
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    float *h = (float *)malloc(n_qkv * 4);
    lab_fill(h, n_qkv, 1.5f);
    X *d_qkv = lab_upload<X>(h, n_qkv), *d_o1, *d_o2;
    float *d_l1, *d_l2;
    LAB_CK(cudaMalloc(&d_o1, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_o2, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_l1, n_lse * 4));
    LAB_CK(cudaMalloc(&d_l2, n_lse * 4));
    const float scale_log2 = (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E;
    auto one = [&] {
        GPT2RT__LAUNCH(dim3((unsigned)((T + 63) / 64), (unsigned)(B * NH)), 128, 0, 0, gpt2rt__cuk_attn_fwd64_wg<X, 1>)(
            d_o1, d_l1, d_qkv, T, C, NH, scale_log2, T);
        LAB_CK(cudaGetLastError());
    };
    auto two = [&] { LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_WGMMA)); };
    one();
    two();
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("wgmma forward out, 1 vs 2 warpgroups per CTA", d_o1, d_o2, n_out * sizeof(X));
    lab_same_bits("wgmma forward lse, 1 vs 2 warpgroups per CTA", d_l1, d_l2, n_lse * 4);
    const double flop_f = 4.0 * B * NH * (double)T * T * HS / 2.0;
    float ms1 = lab_time_ms(one, 50), ms2 = lab_time_ms(two, 50);
    printf("  %-5s wgmma forward, 1 warpgroup per CTA %8.3f ms %7.1f TFLOP/s; 2 per CTA %8.3f ms %7.1f TFLOP/s\n",
           lab_type_name<X>(), ms1, flop_f / (ms1 * 1e9), ms2, flop_f / (ms2 * 1e9));
    free(h);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_o1)); LAB_CK(cudaFree(d_o2)); LAB_CK(cudaFree(d_l1)); LAB_CK(cudaFree(d_l2));
}

/* Every entry of each direction's variant table (the forward, the backward's dK,dV pass, its dQ
   pass) timed alone at the bench shape, one line each: what the launchers choose among
   (rates: the pass's share of the backward's flops, dK,dV 3 of its 5 products, dQ 2) */
template <typename X> static void bench_variants(int B) {
    typedef gpt2rt__cu_attn_fast16<X> F;
    const int T = 1024, C = 768, NH = 12, HS = C / NH;
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    float *h = (float *)malloc(n_qkv * 4);
    lab_fill(h, n_qkv, 1.5f);
    X *d_qkv = lab_upload<X>(h, n_qkv), *d_dout = lab_upload<X>(h, n_out), *d_out, *d_dqkv;
    float *d_lse, *d_D;
    LAB_CK(cudaMalloc(&d_out, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_dqkv, n_qkv * sizeof(X)));
    LAB_CK(cudaMalloc(&d_lse, n_lse * 4));
    LAB_CK(cudaMalloc(&d_D, n_lse * 4));
    /* out, lse and D for the passes */
    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_out, d_lse, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA));
    LAB_CK(gpt2rt__cu_attention_backward_impl<X>(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA));
    const double flop_f = 4.0 * B * NH * (double)T * T * HS / 2.0, flop_b = 2.5 * flop_f;
    int n;
    const gpt2rt__cu_attn_variant<typename F::fwd_fn> *vf = F::forwards(&n);
    for (int i = 0; i < n; i++) {
        if (!vf[i].ok()) continue;
        float ms = lab_time_ms([&] { LAB_CK(vf[i].launch(d_out, d_lse, d_qkv, B, T, C, NH, 0, T)); }, 50);
        printf("  %-5s variant forward %-22s B=%d: %8.3f ms %7.1f TFLOP/s\n", lab_type_name<X>(), vf[i].name, B, ms, flop_f / (ms * 1e9));
    }
    for (int dir = 1; dir <= 2; dir++) {
        const gpt2rt__cu_attn_variant<typename F::bwd_fn> *vb = dir == 1 ? F::dkdvs(&n) : F::dqs(&n);
        const double share = dir == 1 ? 0.6 : 0.4;
        for (int i = 0; i < n; i++) {
            if (!vb[i].ok()) continue;
            float ms = lab_time_ms([&] { LAB_CK(vb[i].launch(d_dqkv, d_dout, d_qkv, d_lse, d_D, B, T, C, NH, 0, T)); }, 50);
            printf("  %-5s variant %-7s %-22s B=%d: %8.3f ms %7.1f TFLOP/s\n", lab_type_name<X>(), dir == 1 ? "dK,dV" : "dQ",
                   vb[i].name, B, ms, share * flop_b / (ms * 1e9));
        }
    }
    free(h);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_out)); LAB_CK(cudaFree(d_dqkv));
    LAB_CK(cudaFree(d_lse)); LAB_CK(cudaFree(d_D));
}

/* allow: GPT2RT__CU_ATT_MMA (the mma.sync kernels), GPT2RT__CU_ATT_WGMMA (wgmma where it runs) or
   GPT2RT__CU_ATT_BEST (the fastest here) */
/* The pipelined Hopper forward's variants (gpt2rt__cu_attn_fwd_wgp_launch<X, NWG, KB, STAGES>):
   warpgroups per CTA, key tile 64 KB, K/V ring of STAGES tiles */
enum { WGP_VARIANTS = 1 }; /* 64-key tiles: the 128-key shapes are not built (wrong on hardware) */
static const char *wgp_name(int v) {
    static const char *n[WGP_VARIANTS] = {"NWG 2, keys 64"};
    return n[v];
}
template <typename X>
static cudaError_t wgp_run(int v, X *out, float *lse, const X *qkv, int B, int T, int C, int NH, int TH) {
    (void)v;
    return gpt2rt__cu_attn_fwd_wgp_launch<X, 2, 1, 4>(out, lse, qkv, B, T, C, NH, 0, TH ? TH : T);
}

/* Each variant against the CPU (the lab's tolerances) and against the mma.sync forward as
   same_as_mma checks the wgmma forward (within a rounding of P and of the output), and
   whether it is the same bits as mma.sync (as the emulator requires: the runtime may then
   pick either kernel without changing a result), printed */
template <typename X> static void validate_wgp(Shape sh, int TH = 0) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
    if (!gpt2rt__cu_attn_use_fast<X>(C, NH, 0, 0, 0, GPT2RT__CU_ATT_MMA) || !gpt2rt__cu_attn_fast<X>::wgmma_ok()) {
        printf("  pipelined wgmma forward %s T=%d: skipped (needs compute capability 9.0 and the sm_90a build)\n",
               lab_type_name<X>(), T);
        return;
    }
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    float *qkv = (float *)malloc(n_qkv * 4), *out_ref = (float *)malloc(n_out * 4), *lse_ref = (float *)malloc(n_lse * 4);
    float *scratch = (float *)malloc(gpt2rt__pad16(2 * T) * 4);
    lab_fill(qkv, n_qkv, 1.5f);
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_qkv; i++) {
        qkv[i] = lab_f(lab_to<X>(qkv[i]));
        if (i % (3 * C) >= 2 * C) vmax = fmaxf(vmax, fabsf(qkv[i]));
    }
    gpt2rt__cpu_attention_forward_masked(out_ref, lse_ref, qkv, scratch, B, T, C, NH, TH ? TH : T, NULL, 1);
    X *d_qkv = lab_upload<X>(qkv, n_qkv), *d_o1, *d_o2;
    float *d_l1, *d_l2;
    LAB_CK(cudaMalloc(&d_o1, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_o2, n_out * sizeof(X)));
    LAB_CK(cudaMalloc(&d_l1, n_lse * 4));
    LAB_CK(cudaMalloc(&d_l2, n_lse * 4));
    LAB_CK(gpt2rt__cu_attention_forward_impl<X>(d_o1, d_l1, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH));
    float *o1 = (float *)malloc(n_out * 4), *o2 = (float *)malloc(n_out * 4), *l1 = (float *)malloc(n_lse * 4),
          *l2 = (float *)malloc(n_lse * 4);
    LAB_CK(cudaDeviceSynchronize());
    lab_download<X>(o1, d_o1, n_out);
    LAB_CK(cudaMemcpy(l1, d_l1, n_lse * 4, cudaMemcpyDeviceToHost));
    const float eps = lab_f(lab_to<X>(1.0f + 1.0f / 1024.0f)) != 1.0f ? 1.0f / 2048.0f : 1.0f / 256.0f;
    for (int v = 0; v < WGP_VARIANTS; v++) {
        LAB_CK(cudaMemset(d_o2, 0xFF, n_out * sizeof(X)));
        LAB_CK(cudaMemset(d_l2, 0xFF, n_lse * 4));
        LAB_CK(wgp_run<X>(v, d_o2, d_l2, d_qkv, B, T, C, NH, TH));
        LAB_CK(cudaDeviceSynchronize());
        lab_download<X>(o2, d_o2, n_out);
        LAB_CK(cudaMemcpy(l2, d_l2, n_lse * 4, cudaMemcpyDeviceToHost));
        char what[128];
        const char *pm = TH ? " placeholders" : "";
        snprintf(what, sizeof what, "pipelined wgmma (%s) out vs CPU %s T=%d%s", wgp_name(v), lab_type_name<X>(), T, pm);
        compare_rel_max(what, o2, out_ref, n_out, tol_out<X>());
        snprintf(what, sizeof what, "pipelined wgmma (%s) lse vs CPU %s T=%d%s", wgp_name(v), lab_type_name<X>(), T, pm);
        compare_rel_max(what, l2, lse_ref, n_lse, 1e-4f);
        snprintf(what, sizeof what, "pipelined wgmma (%s) vs mma.sync out %s T=%d%s", wgp_name(v), lab_type_name<X>(), T, pm);
        lab_compare(what, o2, o1, n_out, 2.0f * eps * vmax, 0.0f);
        snprintf(what, sizeof what, "pipelined wgmma (%s) vs mma.sync lse %s T=%d%s", wgp_name(v), lab_type_name<X>(), T, pm);
        compare_rel_max(what, l2, l1, n_lse, 1e-5f);
        int64_t dout = 0, dlse = 0;
        for (int64_t i = 0; i < n_out; i++) dout += memcmp(&o1[i], &o2[i], 4) != 0;
        for (int64_t i = 0; i < n_lse; i++) dlse += memcmp(&l1[i], &l2[i], 4) != 0;
        printf("  pipelined wgmma (%s) %s T=%d%s: %s mma.sync (%lld of %lld out, %lld of %lld lse differ)\n", wgp_name(v),
               lab_type_name<X>(), T, pm, dout || dlse ? "NOT the same bits as" : "the same bits as", (long long)dout,
               (long long)n_out, (long long)dlse, (long long)n_lse);
    }
    free(qkv); free(out_ref); free(lse_ref); free(scratch); free(o1); free(o2); free(l1); free(l2);
    LAB_CK(cudaFree(d_qkv)); LAB_CK(cudaFree(d_o1)); LAB_CK(cudaFree(d_o2)); LAB_CK(cudaFree(d_l1)); LAB_CK(cudaFree(d_l2));
}

template <typename X> static void validate_all(int allow) {
    const Shape shapes[3] = {{2, 256, 768, 12}, {2, 37, 64, 4}, {1, 1000, 768, 12}};
    for (int i = 0; i < 3; i++) validate<X>(shapes[i], allow);
    /* the placeholder mask: history 130 of 200 (placeholders in tiles 2 and 3, hidden keys off
       the diagonal), and 20 of 37 on the generic path */
    validate<X>(Shape{2, 200, 768, 12}, allow, 130);
    validate<X>(shapes[1], allow, 20);
}
template <typename X> static void validate_16(void) {
    validate_all<X>(GPT2RT__CU_ATT_MMA);
    if (gpt2rt__cu_attn_fast<X>::wgmma_ok()) validate_all<X>(GPT2RT__CU_ATT_WGMMA);
    same_as_mma<X>(Shape{2, 256, 768, 12});
    same_as_mma<X>(Shape{1, 1000, 768, 12}); /* a partial last tile; with 2 warpgroups per CTA, 16 query tiles */
    same_as_mma<X>(Shape{2, 200, 768, 12}, 130);
    validate_wgp<X>(Shape{2, 256, 768, 12});
    validate_wgp<X>(Shape{1, 1000, 768, 12}); /* T not a multiple of 128 or 192; 8 key tiles of 128: the ring wraps */
    validate_wgp<X>(Shape{2, 200, 768, 12}, 130);
}

/* lab_attention: validation, then timing at B=8; lab_attention time B: only the timing, at batch B */
int main(int argc, char **argv) {
    const int time_only = argc == 3 && !strcmp(argv[1], "time");
    const int B = time_only ? atoi(argv[2]) : 8;
    if ((argc != 1 && !time_only) || B < 1) {
        fprintf(stderr, "usage: %s [time B]\n", argv[0]);
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop;
    LAB_CK(cudaGetDevice(&dev));
    LAB_CK(cudaGetDeviceProperties(&prop, dev));
    printf("attention lab on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

    if (!time_only) {
        validate_all<float>(GPT2RT__CU_ATT_BEST);
        validate_16<__nv_bfloat16>();
        validate_16<__half>();
        /* the generic kernels at HS = 64 with 16-bit storage (the fast path normally takes these) */
        validate<__nv_bfloat16>(Shape{2, 100, 768, 12}, 0);
        validate<__half>(Shape{2, 100, 768, 12}, 0);
    }

    printf("timing\n");
    /* forward + backward with one variant forced (each direction's entry of that index where
       it runs, else mma.sync), then the launchers' choice; then every variant alone */
    const int forced[5] = {GPT2RT__CU_ATT_MMA, GPT2RT__CU_ATT_WGMMA, GPT2RT__CU_ATT_WGP, GPT2RT__CU_ATT_MMA2,
                           GPT2RT__CU_ATT_ALT};
    for (int i = 0; i < 5; i++) bench<__nv_bfloat16>(forced[i], B);
    bench<__nv_bfloat16>(GPT2RT__CU_ATT_BEST, B);
    for (int i = 0; i < 5; i++) bench<__half>(forced[i], B);
    bench<__half>(GPT2RT__CU_ATT_BEST, B);
    bench<float>(GPT2RT__CU_ATT_BEST, B);
    bench_variants<__nv_bfloat16>(B);
    bench_variants<__half>(B);
    bench_wg_ctas<__nv_bfloat16>(B);
    bench_wg_ctas<__half>(B);
    bench<__nv_bfloat16>(0, B);
    return lab_finish("attention");
}
