/* tools/ts_linear.h - the dense solve behind the least-squares linear forecaster that
   tools/ts_baselines.c scores and examples/timeseries.c trains beside
   (--linear-residual, --blend-linear): one copy for both. */
#ifndef GPT2RT_TS_LINEAR_H
#define GPT2RT_TS_LINEAR_H
#include <math.h>
#include <stdint.h>

/* A (n,n) symmetric positive definite: solve A X = B (n,k) in place (Cholesky); 0 on failure */
static int lin_solve(double *A, double *B, int64_t n, int64_t k) {
    for (int64_t j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int64_t p = 0; p < j; p++) d -= A[j * n + p] * A[j * n + p];
        if (d <= 0) return 0;
        A[j * n + j] = sqrt(d);
        for (int64_t i = j + 1; i < n; i++) {
            double v = A[i * n + j];
            for (int64_t p = 0; p < j; p++) v -= A[i * n + p] * A[j * n + p];
            A[i * n + j] = v / A[j * n + j];
        }
    }
    for (int64_t c = 0; c < k; c++) {
        for (int64_t i = 0; i < n; i++) { /* L z = b */
            double v = B[i * k + c];
            for (int64_t p = 0; p < i; p++) v -= A[i * n + p] * B[p * k + c];
            B[i * k + c] = v / A[i * n + i];
        }
        for (int64_t i = n - 1; i >= 0; i--) { /* L^T x = z */
            double v = B[i * k + c];
            for (int64_t p = i + 1; p < n; p++) v -= A[p * n + i] * B[p * k + c];
            B[i * k + c] = v / A[i * n + i];
        }
    }
    return 1;
}

#endif
