/* kernels/device.cu - the first check of make test-gpu: the CUDA driver and runtime see a
   device this build can run on. Prints the device (name, compute capability, SMs, memory)
   and the driver and runtime versions, then runs one small kernel and checks its result,
   which fails with "no kernel image" when the device is older than the -arch the labs were
   built for (sm_90 by default). Exit 0: usable; 1: not.
     nvcc -std=c++17 -O3 -arch=sm_90 -o build/lab_device kernels/device.cu */
#include <stdio.h>
#include <cuda_runtime.h>

/* the launch seam of gpt2rt.h and lab.cuh (this lab includes neither: it must build and
   run even where the header would not) */
#ifndef GPT2RT__LAUNCH
#define GPT2RT__LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif

/* y[i] = 2 i + 1 */
__global__ void device_probe(int *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2 * i + 1;
}

static int fail(const char *what, cudaError_t e) {
    printf("device: FAIL: %s: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

int main(void) {
    int drv = 0, rt = 0, n_dev = 0;
    cudaError_t e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess) return fail("cudaDriverGetVersion", e);
    if ((e = cudaRuntimeGetVersion(&rt)) != cudaSuccess) return fail("cudaRuntimeGetVersion", e);
    printf("device: CUDA driver %d.%d, runtime %d.%d\n", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    if (drv < rt) printf("device: the driver is older than the runtime: kernels may not load\n");
    if ((e = cudaGetDeviceCount(&n_dev)) != cudaSuccess) return fail("cudaGetDeviceCount", e);
    if (n_dev == 0) { printf("device: FAIL: no CUDA device\n"); return 1; }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) return fail("cudaGetDeviceProperties", e);
    printf("device: %d device(s); 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", n_dev, p.name, p.major, p.minor,
           p.multiProcessorCount, (double)p.totalGlobalMem / 1073741824.0);
    const int n = 1000;
    int *d = NULL, h[1000];
    if ((e = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess) return fail("cudaMalloc", e);
    GPT2RT__LAUNCH((n + 255) / 256, 256, 0, 0, device_probe)(d, n);
    if ((e = cudaGetLastError()) != cudaSuccess) return fail("launching a kernel (built for another -arch?)", e);
    if ((e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)) != cudaSuccess) return fail("running a kernel", e);
    cudaFree(d);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != 2 * i + 1;
    if (bad) { printf("device: FAIL: %d of %d results of the probe kernel are wrong\n", bad, n); return 1; }
    printf("device: PASS (a kernel ran and its %d results are right)\n", n);
    return 0;
}
