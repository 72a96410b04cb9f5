/* kernels/classifier.cu - lab of the fused CUDA classifier (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_classifier, softmax cross-entropy over the first V of Vp columns, losses and
   lse per row, logits -> dlogits in place (write_dlogits = 1) or untouched (= 0, eval),
   against the CPU gpt2rt__cpu_crossentropy_forward / gpt2rt__cpu_crossentropy_backward.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_classifier classifier.cu -lcublasLt && /tmp/lab_classifier
   The logits (BT = 8192 rows of Vp = 50304) are generated on the device; the CPU checks a
   sample of 256 rows (the CPU reference over all rows would take seconds per type).
   Then the chunked classifier end to end (check_chunked; `lab_classifier chunked` alone). */
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

/* ---- the chunked classifier end to end (config.classifier_chunk = N on CUDA) ----
   Two layers at GPT-2 124M's width and vocabulary (C 768, 12 heads, V 50257), B 4, T 1024,
   N = 1024 against the whole batch on the same device: planned == cudaMalloc'ed per category
   with the logits arena N x Vp; forward + backward: the loss and every gradient (wte's a sum
   over 4096 tokens the chunks add in 4 pieces) within fp32 reassociation, 1e-5 relative
   (max-norm) in fp32; bf16 1e-2 / 5e-2 (kernels/emu/drive.cpp's derivation: cuBLASLt may take
   another algorithm for N rows than for BT, which in bf16 rounds the logits differently);
   whether they are bitwise is printed (the emulator shows them bitwise but wte's); a second
   chunked context gives every gradient bitwise equal to the first's; then one
   gpt2rt_step each, timed (the fused head: no second product), the ratio printed. */
static double grads_rel(gpt2rt_ctx *a, gpt2rt_ctx *b, int *bitwise, int *bitwise_but_wte) {
    double worst = 0.0;
    *bitwise = *bitwise_but_wte = 1;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        LAB_OK(a, gpt2rt_param_info_get(a, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(a, gpt2rt_param_read(a, in.name, GPT2RT_PARAM_GRAD, x, in.numel));
        LAB_OK(b, gpt2rt_param_read(b, in.name, GPT2RT_PARAM_GRAD, y, in.numel));
        double num = 0, den = 0;
        for (int64_t k = 0; k < in.numel; k++) {
            double d = fabs((double)x[k] - y[k]);
            if (!(d <= num)) num = d;
            den = fmax(den, fabs((double)y[k]));
        }
        double e = den > 0 ? num / den : num;
        if (!(e <= worst)) worst = e;
        int same = memcmp(x, y, (size_t)in.numel * 4) == 0;
        *bitwise &= same;
        if (strcmp(in.name, "transformer.wte.weight")) *bitwise_but_wte &= same;
        free(x); free(y);
    }
    return worst;
}

/* small: C 64, V 300, T 64, N 64 (the same checks in seconds on the emulator: `chunked-small`) */
static void check_chunked(gpt2rt_precision prec, int small = 0) {
    const int N = small ? 64 : 1024, T = small ? 64 : 1024, V = small ? 300 : 50257, Vp = small ? 384 : 50304;
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = small ? 4 : 12; c.n_embd = small ? 64 : 768; c.vocab_size = V; c.max_seq_len = T;
    c.batch_size = 4; c.seq_len = T; c.precision = prec; c.backend = GPT2RT_BACKEND_CUDA; c.seed = 5;
    c.lr = 1e-4f; c.warmup_steps = 1; c.total_steps = 10;
    gpt2rt_config k = c;
    k.classifier_chunk = N;
    int bf = prec == GPT2RT_PRECISION_BF16;
    printf("chunked classifier, %s, 2 layers C %d V %d B 4 T %d, N = %d\n", bf ? "bf16" : "fp32", c.n_embd, V, T, N);
    gpt2rt_ctx *w = NULL, *h = NULL;
    LAB_OK(w, gpt2rt_create(&w, &c));
    LAB_OK(h, gpt2rt_create(&h, &k));
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&k, &p) != GPT2RT_OK) { printf("plan: %s\n", p.error); exit(2); }
    int ok = 1;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) ok &= p.bytes[0][i] == h->cu->allocated[i];
    ok &= p.bytes[0][GPT2RT_MEM_LOGITS] == (uint64_t)N * Vp * (bf ? 2 : 4);
    printf("  %-40s logits %.1f MiB (whole batch %.1f)  %s\n", "planned == cudaMalloc'ed, per category",
           GPT2RT__MIB(p.bytes[0][GPT2RT_MEM_LOGITS]), GPT2RT__MIB(w->cu->allocated[GPT2RT_MEM_LOGITS]), ok ? "PASS" : "FAIL");
    lab_failures += !ok;
    int64_t n = 4 * (int64_t)T;
    int32_t *tok = (int32_t *)malloc((size_t)(n + 1) * 4);
    for (int64_t i = 0; i <= n; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * (float)V) % V;
    float lw = 0, lh = 0;
    LAB_OK(w, gpt2rt_forward(w, tok, tok + 1, &lw));
    LAB_OK(w, gpt2rt_backward(w));
    LAB_OK(h, gpt2rt_forward(h, tok, tok + 1, &lh));
    LAB_OK(h, gpt2rt_backward(h));
    double le = fabs((double)lh - lw) / fabs((double)lw), ltol = bf ? 1e-2 : 1e-5, gtol = bf ? 5e-2 : 1e-5;
    printf("  %-40s %.3e (tol %.0e)%s  %s\n", "loss vs whole batch, relative", le, ltol, lh == lw ? ", bitwise" : "",
           le <= ltol ? "PASS" : "FAIL");
    lab_failures += !(le <= ltol);
    int all, but_wte;
    double ge = grads_rel(h, w, &all, &but_wte);
    printf("  %-40s %.3e (tol %.0e), bitwise: all %s, all but wte %s  %s\n", "gradients vs whole batch, worst", ge,
           gtol, all ? "yes" : "no", but_wte ? "yes" : "no", ge <= gtol ? "PASS" : "FAIL");
    lab_failures += !(ge <= gtol);
    { /* a second chunked context, the same inputs: every gradient the same bits (the chunks'
         d(lnf) product may split K: a fixed algorithm must still give the same sums) */
        gpt2rt_ctx *h2 = NULL;
        float l2 = 0;
        LAB_OK(h2, gpt2rt_create(&h2, &k));
        LAB_OK(h2, gpt2rt_forward(h2, tok, tok + 1, &l2));
        LAB_OK(h2, gpt2rt_backward(h2));
        int same, same_but_wte;
        (void)grads_rel(h2, h, &same, &same_but_wte);
        printf("  %-40s loss %s, gradients %s  %s\n", "chunked, two contexts, bitwise", l2 == lh ? "equal" : "differ",
               same ? "equal" : "differ", same && l2 == lh ? "PASS" : "FAIL");
        lab_failures += !(same && l2 == lh);
        gpt2rt_free(h2);
    }
    LAB_OK(w, gpt2rt_update(w, NULL));
    LAB_OK(h, gpt2rt_update(h, NULL));
    gpt2rt_step_stats st;
    float mw = lab_time_ms([&] { LAB_OK(w, gpt2rt_step(w, tok, tok + 1, &st)); }, 3);
    float mh = lab_time_ms([&] { LAB_OK(h, gpt2rt_step(h, tok, tok + 1, &st)); }, 3);
    printf("  %-40s whole %.2f ms, N = %d %.2f ms (x%.3f)\n", "gpt2rt_step time", mw, N, mh, mh / mw);
    free(tok);
    gpt2rt_free(w);
    gpt2rt_free(h);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strncmp(argv[1], "chunked", 7)) { /* this part alone; chunked-small: at a small shape */
        int small = !strcmp(argv[1], "chunked-small");
        check_chunked(GPT2RT_PRECISION_FP32, small);
        check_chunked(GPT2RT_PRECISION_BF16, small);
        return lab_finish("classifier chunked");
    }
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
    check_chunked(GPT2RT_PRECISION_FP32);
    check_chunked(GPT2RT_PRECISION_BF16);
    return lab_finish("classifier");
}
