/* kernels/bias_grad.cu - lab of the CUDA bias gradient (gpt2rt.h, section 8.2 Ops):
   gpt2rt__cu_bias_backward, db (OC) fp32 += column sums of dout (BT,OC) floatX,
   deterministic (64-row partials, then a fixed-order sum), the kernel the weight gradient's
   product runs when cuBLASLt's BGRADB epilogue is not taken. The reference is the CPU
   order (rows in increasing order, fp32) on the values as stored; an fp64 sum shows how
   far each is from exact.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_bias_grad bias_grad.cu -lcublasLt && /tmp/lab_bias_grad */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

template <typename floatX>
static void run(int64_t BT, int64_t OC, int timing) {
    size_t n = (size_t)(BT * OC);
    printf("%s  BT=%lld OC=%lld\n", lab_type_name<floatX>(), (long long)BT, (long long)OC);
    float *dout = (float *)malloc(n * 4), *db = (float *)malloc((size_t)OC * 4), *ref = (float *)malloc((size_t)OC * 4);
    float *got = (float *)malloc((size_t)OC * 4), *exact = (float *)malloc((size_t)OC * 4);
    lab_fill(dout, n, 1.0f);
    lab_fill(db, (size_t)OC, 1.0f);
    for (size_t i = 0; i < n; i++) dout[i] = lab_f(lab_to<floatX>(dout[i]));
    double *e = (double *)malloc((size_t)OC * sizeof(double));
    for (int64_t c = 0; c < OC; c++) { ref[c] = db[c]; e[c] = db[c]; }
    for (int64_t r = 0; r < BT; r++) /* per column: rows in increasing order */
        for (int64_t c = 0; c < OC; c++) { ref[c] += dout[r * OC + c]; e[c] += dout[r * OC + c]; }
    for (int64_t c = 0; c < OC; c++) exact[c] = (float)e[c];
    free(e);
    floatX *d_dout = lab_upload<floatX>(dout, n);
    float *d_db = lab_upload<float>(db, (size_t)OC), *d_db2 = lab_upload<float>(db, (size_t)OC), *d_scratch;
    LAB_CK(cudaMalloc(&d_scratch, gpt2rt__cu_bias_backward_scratch_bytes(BT, OC, GPT2RT__CU_BIAS_ROWS)));
    LAB_CK(gpt2rt__cu_bias_backward<floatX>(d_db, d_dout, d_scratch, BT, OC, GPT2RT__CU_BIAS_ROWS, 1, 0));
    LAB_CK(gpt2rt__cu_bias_backward<floatX>(d_db2, d_dout, d_scratch, BT, OC, GPT2RT__CU_BIAS_ROWS, 1, 0));
    LAB_CK(cudaDeviceSynchronize());
    lab_same_bits("db, run twice", d_db, d_db2, (size_t)OC * 4);
    lab_download<float>(got, d_db, (size_t)OC);
    /* fp32 sums of BT terms of size <= 1 in another order: absolute slack ~ sqrt(BT) ulp */
    lab_compare("db += (fp32) vs CPU order", got, ref, (size_t)OC, 1e-3f, 1e-5f);
    lab_compare("db += (fp32) vs fp64 sum", got, exact, (size_t)OC, 1e-3f, 1e-5f);
    { /* the CPU order's own distance from exact: context for the two checks above, not a
         check of the GPU (so not counted) */
        double worst = 0;
        for (int64_t c = 0; c < OC; c++) worst = fmax(worst, fabs((double)ref[c] - (double)exact[c]));
        printf("  (info) CPU order vs fp64 sum: max |difference| %.3g, not counted\n", worst);
    }
    if (timing) {
        float ms = lab_time_ms([&] { LAB_CK(gpt2rt__cu_bias_backward<floatX>(d_db2, d_dout, d_scratch, BT, OC, GPT2RT__CU_BIAS_ROWS, 1, 0)); }, 50);
        printf("  %-40s %8.4f ms  %7.1f GB/s\n", "time", ms, (double)n * sizeof(floatX) / ms * 1e-6);
    }
    free(dout); free(db); free(ref); free(got); free(exact);
    LAB_CK(cudaFree(d_dout)); LAB_CK(cudaFree(d_db)); LAB_CK(cudaFree(d_db2)); LAB_CK(cudaFree(d_scratch));
}

int main(void) {
    /* GPT-2 124M biases: qkv (3C), proj (C), fc (4C), with BT = 8192 */
    const int64_t oc[3] = {2304, 768, 3072};
    for (int i = 0; i < 3; i++) {
        run<float>(8192, oc[i], 1);
        run<__nv_bfloat16>(8192, oc[i], 1);
        run<__half>(8192, oc[i], 1);
    }
    /* OC not a multiple of VN (scalar path), BT not a multiple of 64 */
    run<float>(100, 67, 0);
    run<__nv_bfloat16>(77, 100, 0);
    run<__half>(1000, 70, 0);
    run<float>(77, 100, 0);
    return lab_finish("bias_grad");
}
