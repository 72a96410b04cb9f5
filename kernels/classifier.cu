/* kernels/classifier.cu - lab of the fused CUDA classifier (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_classifier, softmax cross-entropy over the first V of Vp columns, losses and
   lse per row, logits -> dlogits in place (write_dlogits = 1) or untouched (= 0, eval),
   against the CPU gpt2rt__cpu_crossentropy_forward / gpt2rt__cpu_crossentropy_backward.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_classifier classifier.cu -lcublasLt && /tmp/lab_classifier
   The logits (BT = 8192 rows of Vp = 50304) are generated on the device; the CPU checks a
   sample of 256 rows (the CPU reference over all rows would take seconds per type). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

/* relative (and absolute) tolerance of a value stored in T */
template <typename T> static float tol_of(void);
template <> float tol_of<float>(void) { return 1e-5f; }
template <> float tol_of<__nv_bfloat16>(void) { return 1e-2f; }
template <> float tol_of<__half>(void) { return 2e-3f; }

template <typename T> struct is_fp16 { enum { value = 0 }; };
template <> struct is_fp16<__half> { enum { value = 1 }; };

/* x (n) = scale * uniform[-1,1) from a hash of the index: any size, no host copy */
template <typename T>
__global__ void fill_uniform(T *x, int64_t n, uint64_t seed, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint64_t h = ((uint64_t)i + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29; h *= 0x94D049BB133111EBull; h ^= h >> 32;
    float u = (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
    x[i] = gpt2rt__cu_to<T>(u * scale);
}

template <typename floatX>
static void run(int64_t BT, int64_t V, int64_t Vp, int timing) {
    const float tol = tol_of<floatX>();
    const int fp16 = is_fp16<floatX>::value;
    /* fp16 trains with a loss scale: a dloss of 1/BT would put the probabilities below
       fp16's normal range, so it gets 65536/BT as the training loop would */
    const float dloss = fp16 ? 65536.0f / (float)BT : 1.0f / (float)BT;
    const float atol_d = fp16 ? 6e-8f : dloss * 1e-8f; /* fp16 subnormal spacing */
    size_t n = (size_t)(BT * Vp);
    printf("%s  BT=%lld V=%lld Vp=%lld dloss=%g\n", lab_type_name<floatX>(), (long long)BT, (long long)V,
           (long long)Vp, (double)dloss);

    /* targets: random in [0,V), some at the edges, about 1 in 9 ignored */
    int32_t *tgt = (int32_t *)malloc((size_t)BT * 4);
    for (int64_t i = 0; i < BT; i++) {
        int64_t r = (int64_t)((lab_uniform() * 0.5f + 0.5f) * (float)V) % V;
        tgt[i] = (int32_t)(i % 9 == 4 ? -1 : i % 13 == 1 ? V - 1 : i % 17 == 2 ? 0 : r);
    }
    floatX *d_logits, *d_back, *d_logits2;
    float *d_loss0, *d_lse0, *d_loss1, *d_lse1, *d_loss2;
    int32_t *d_tgt;
    LAB_CK(cudaMalloc(&d_logits, n * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_back, n * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_logits2, n * sizeof(floatX)));
    LAB_CK(cudaMalloc(&d_loss0, (size_t)BT * 4)); LAB_CK(cudaMalloc(&d_lse0, (size_t)BT * 4));
    LAB_CK(cudaMalloc(&d_loss1, (size_t)BT * 4)); LAB_CK(cudaMalloc(&d_lse1, (size_t)BT * 4));
    LAB_CK(cudaMalloc(&d_loss2, (size_t)BT * 4));
    LAB_CK(cudaMalloc(&d_tgt, (size_t)BT * 4));
    LAB_CK(cudaMemcpy(d_tgt, tgt, (size_t)BT * 4, cudaMemcpyHostToDevice));
    GPT2RT__LAUNCH(gpt2rt__cu_blocks((int64_t)n, 256), 256, 0, 0, fill_uniform<floatX>)(d_back, (int64_t)n, 12345, 4.0f);
    LAB_CK(cudaGetLastError());
    LAB_CK(cudaMemcpy(d_logits, d_back, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
    LAB_CK(cudaMemcpy(d_logits2, d_back, n * sizeof(floatX), cudaMemcpyDeviceToDevice));

    /* the CPU reference on a sample of rows, from the values as stored */
    int64_t step = BT >= 256 ? BT / 256 : 1, S = (BT + step - 1) / step;
    float *xs = (float *)calloc((size_t)(S * Vp), 4), *gs = (float *)calloc((size_t)(S * Vp), 4);
    float *loss_ref = (float *)malloc((size_t)S * 4), *lse_ref = (float *)malloc((size_t)S * 4);
    float *all = (float *)malloc((size_t)BT * 4), *loss_got = (float *)malloc((size_t)S * 4);
    float *lse_got = (float *)malloc((size_t)S * 4);
    int32_t *ts = (int32_t *)malloc((size_t)S * 4);
    for (int64_t k = 0; k < S; k++) {
        lab_download<floatX>(xs + k * Vp, d_back + k * step * Vp, (size_t)Vp);
        ts[k] = tgt[k * step];
    }
    int64_t count = 0;
    double loss_sum = 0.0;
    gpt2rt__cpu_crossentropy_forward(loss_ref, lse_ref, xs, ts, S, V, Vp, &count, &loss_sum, 1);
    gpt2rt__cpu_crossentropy_backward(xs, lse_ref, ts, dloss, S, V, Vp, 1); /* xs: reference dlogits */

    /* eval: losses only, logits untouched */
    LAB_CK(gpt2rt__cu_classifier<floatX>(d_logits, d_loss0, d_lse0, d_tgt, dloss, 0, BT, V, Vp, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("losses only: logits untouched", d_logits, d_back, n * sizeof(floatX));
    lab_download<float>(all, d_loss0, (size_t)BT);
    for (int64_t k = 0; k < S; k++) loss_got[k] = all[k * step];
    lab_download<float>(all, d_lse0, (size_t)BT);
    for (int64_t k = 0; k < S; k++) lse_got[k] = all[k * step];
    lab_compare("losses (fp32, sampled rows)", loss_got, loss_ref, (size_t)S, 1e-5f, 1e-5f);
    lab_compare("lse (fp32, sampled rows)", lse_got, lse_ref, (size_t)S, 1e-5f, 1e-5f);
    lab_download<float>(all, d_loss0, (size_t)BT);
    int bad_ignored = 0;
    for (int64_t i = 0; i < BT; i++) bad_ignored += tgt[i] < 0 && all[i] != 0.0f;
    printf("  %-40s %s\n", "ignored rows have loss 0", bad_ignored ? "FAIL" : "PASS");
    lab_failures += bad_ignored != 0;

    /* training: fused backward in place, twice from the same logits */
    LAB_CK(gpt2rt__cu_classifier<floatX>(d_logits, d_loss1, d_lse1, d_tgt, dloss, 1, BT, V, Vp, 0));
    LAB_CK(gpt2rt__cu_classifier<floatX>(d_logits2, d_loss2, NULL, d_tgt, dloss, 1, BT, V, Vp, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("losses: with dlogits == losses only", d_loss1, d_loss0, (size_t)BT * 4);
    lab_same_bits("lse: with dlogits == losses only", d_lse1, d_lse0, (size_t)BT * 4);
    lab_same_bits("dlogits, run twice", d_logits, d_logits2, n * sizeof(floatX));
    lab_same_bits("losses, run twice", d_loss1, d_loss2, (size_t)BT * 4);
    for (int64_t k = 0; k < S; k++) lab_download<floatX>(gs + k * Vp, d_logits + k * step * Vp, (size_t)Vp);
    lab_compare("dlogits (sampled rows)", gs, xs, (size_t)(S * Vp), atol_d, tol);
    int64_t nonzero = 0; /* padded columns and ignored rows must be exactly 0 */
    for (int64_t k = 0; k < S; k++)
        for (int64_t v = 0; v < Vp; v++) nonzero += (ts[k] < 0 || v >= V) && gs[k * Vp + v] != 0.0f;
    printf("  %-40s %s\n", "padded columns, ignored rows exactly 0", nonzero ? "FAIL" : "PASS");
    lab_failures += nonzero != 0;
    /* sum of each counted row of dlogits ~ 0 (softmax sums to 1) */
    double worst = 0.0;
    for (int64_t k = 0; k < S; k++) {
        if (ts[k] < 0) continue;
        double s = 0.0;
        for (int64_t v = 0; v < Vp; v++) s += gs[k * Vp + v];
        worst = fmax(worst, fabs(s) / dloss);
    }
    int sum_ok = worst < (sizeof(floatX) == 4 ? 1e-4 : 2e-2);
    printf("  %-40s %.3e  %s\n", "max |row sum of dlogits| / dloss", worst, sum_ok ? "PASS" : "FAIL");
    lab_failures += !sum_ok;

    if (timing) {
        double x = sizeof(floatX);
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_classifier<floatX>(d_logits2, d_loss2, NULL, d_tgt, dloss, 0, BT, V, Vp, 0)); }, 10);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time losses only (read once)", ms, (double)BT * V * x / ms * 1e-6);
        ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_classifier<floatX>(d_logits2, d_loss2, NULL, d_tgt, dloss, 1, BT, V, Vp, 0)); }, 10);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time with dlogits (read + write once)", ms, 2.0 * BT * Vp * x / ms * 1e-6);
    }
    free(tgt); free(xs); free(gs); free(loss_ref); free(lse_ref); free(all); free(loss_got); free(lse_got); free(ts);
    LAB_CK(cudaFree(d_logits)); LAB_CK(cudaFree(d_back)); LAB_CK(cudaFree(d_logits2));
    LAB_CK(cudaFree(d_loss0)); LAB_CK(cudaFree(d_lse0)); LAB_CK(cudaFree(d_loss1)); LAB_CK(cudaFree(d_lse1));
    LAB_CK(cudaFree(d_loss2)); LAB_CK(cudaFree(d_tgt));
}

int main(void) {
    /* GPT-2 124M: BT = 8192 rows, V = 50257 of Vp = 50304 columns (vectorised path) */
    run<float>(8192, 50257, 50304, 1);
    run<__nv_bfloat16>(8192, 50257, 50304, 1);
    run<__half>(8192, 50257, 50304, 1);
    /* Vp not a multiple of VN (scalar path); V == Vp; V much smaller than the block */
    run<float>(37, 67, 70, 0);
    run<__nv_bfloat16>(37, 67, 70, 0);
    run<__half>(37, 67, 70, 0);
    run<__nv_bfloat16>(50, 64, 64, 0);
    run<float>(50, 1000, 1024, 0);
    return lab_finish("classifier");
}
