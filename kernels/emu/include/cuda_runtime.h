/* kernels/emu/include/cuda_runtime.h - the cudart subset gpt2rt.h and the labs call,
   on the emulator (gpt2rt_emu_core.h).

   Devices: EMU_DEVICES virtual sm_90 devices (default 2), EMU_MEM_MB of memory each
   (default 81920). Device memory is host memory from the allocator (so AddressSanitizer
   sees a kernel read past an allocation), filled with 0xff bytes (NaN in every float
   type) as a GPU leaves garbage.

   Streams are deferred: a launch, a copy or a memset is queued and runs only when the
   host synchronises (a stream, an event, the device, a synchronous copy) or when a
   stream that waits on an event needs it. So a missing cudaStreamWaitEvent or
   synchronize gives a wrong result here as it would on a GPU. The legacy default
   stream (0) orders against every blocking stream of its device.

   One lock serialises the emulator: any host thread may run any stream's work, which
   lets a collective on one rank's stream run the other ranks' streams up to theirs. */
#ifndef GPT2RT_EMU_CUDA_RUNTIME_H
#define GPT2RT_EMU_CUDA_RUNTIME_H
#include "gpt2rt_emu_core.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <deque>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <thread>
#include <chrono>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorNotSupported = 801,
    cudaErrorNoDevice = 100,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
} cudaFuncAttribute;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventBlockingSync 0x1
#define cudaEventDisableTiming 0x2
#define cudaHostAllocDefault 0x0

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
    int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, memoryClockRate, memoryBusWidth;
    int l2CacheSize, concurrentKernels, asyncEngineCount, unifiedAddressing, pciBusID, pciDeviceID;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, maxDynamicSharedSizeBytes;
};

namespace gpt2rt_emu {
struct Stream;
struct Work {
    std::function<int()> run; /* 0 done, 1 blocked (a collective whose peers have not issued it yet) */
    const char *what;
};
struct Stream {
    int device, nonblocking;
    std::deque<Work> q;
    uint64_t issued = 0, done = 0;
    int running = 0;
};
struct Event {
    Stream *s = nullptr;
    uint64_t ticket = 0;
    double t_ms = 0.0;
    int device = 0, timing = 1, recorded = 0;
};
struct Alloc { size_t bytes; int device; int pinned; void *ptr; /* keeps LeakSanitizer seeing device memory as reachable */ };
struct Device {
    Stream legacy;
    std::vector<Stream *> streams;
    size_t used = 0;
    std::vector<int> peers;
};
struct State {
    std::recursive_mutex mu;
    std::vector<Device> dev;
    std::map<uintptr_t, Alloc> allocs;
    std::map<const void *, int> func_smem; /* cudaFuncAttributeMaxDynamicSharedMemorySize */
    cudaError_t sticky = cudaSuccess;
    size_t mem_cap = 0;
    int ndev = 0;
    State() {
        const char *e = getenv("EMU_DEVICES");
        ndev = e ? atoi(e) : 2;
        if (ndev < 1) ndev = 1;
        if (ndev > 8) ndev = 8;
        e = getenv("EMU_MEM_MB");
        mem_cap = (size_t)(e ? atof(e) : 81920.0) << 20;
        dev.resize((size_t)ndev);
        for (int d = 0; d < ndev; d++) { dev[(size_t)d].legacy.device = d; dev[(size_t)d].legacy.nonblocking = 0; }
    }
};
/* never destroyed: kernels of a stream may still run from static destructors, and
   LeakSanitizer sees device memory the program did not free as reachable */
inline State &st() { static State *s = new State(); return *s; }
typedef std::lock_guard<std::recursive_mutex> Lock;
inline thread_local int cur_dev = 0;
inline thread_local cudaError_t last_err = cudaSuccess;

inline double now_ms(void) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline cudaError_t set_last(cudaError_t e) { if (e != cudaSuccess) last_err = e; return e; }

/* the allocation holding [p, p+n), or null */
inline const Alloc *find_alloc(const void *p, size_t n, uintptr_t *base = nullptr) {
    State &s = st();
    auto it = s.allocs.upper_bound((uintptr_t)p);
    if (it == s.allocs.begin()) return nullptr;
    --it;
    if ((uintptr_t)p + n > it->first + it->second.bytes) return nullptr;
    if (base) *base = it->first;
    return &it->second;
}
inline int is_dev(const void *p, size_t n) { const Alloc *a = find_alloc(p, n); return a && !a->pinned; }
inline int is_pinned(const void *p, size_t n) { const Alloc *a = find_alloc(p, n); return a && a->pinned; }

inline Stream *resolve(void *h) {
    if (!h) return &st().dev[(size_t)cur_dev].legacy;
    return (Stream *)h;
}

/* run stream s until at least `upto` items are done; 0 done, 1 blocked */
inline int flush(Stream *s, uint64_t upto) {
    if (s->running) {
        /* a stream waiting on itself through events: a GPU would hang */
        if (s->done >= upto) return 0;
        fprintf(stderr, "emu: stream %p waits on work queued behind the wait itself (a cycle of events)\n", (void *)s);
        st().sticky = cudaErrorLaunchFailure;
        return 0;
    }
    s->running = 1;
    while (s->done < upto && !s->q.empty()) {
        int r = s->q.front().run();
        if (r) { s->running = 0; return 1; }
        s->q.pop_front();
        s->done++;
    }
    s->running = 0;
    return 0;
}
inline int flush_all(Stream *s) { return flush(s, s->issued); }

inline void enqueue(Stream *s, const char *what, std::function<int()> fn);

/* block the calling host thread until s has run `upto` items (collectives may need other
   host threads to issue their part first) */
inline cudaError_t wait_stream(Stream *s, uint64_t upto) {
    State &S = st();
    double t0 = now_ms();
    for (;;) {
        {
            Lock l(S.mu);
            if (!flush(s, upto)) return S.sticky;
        }
        if (now_ms() - t0 > 120000.0) {
            fprintf(stderr, "emu: a stream stayed blocked for 120 s (a collective some rank never issued)\n");
            return cudaErrorLaunchFailure;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

inline void enqueue(Stream *s, const char *what, std::function<int()> fn) {
    State &S = st();
    Device &d = S.dev[(size_t)s->device];
    /* the legacy stream waits for every blocking stream, and they wait for it */
    if (s == &d.legacy) {
        for (Stream *o : d.streams)
            if (!o->nonblocking && o->issued > o->done) {
                uint64_t t = o->issued;
                s->q.push_back({[o, t]() { return flush(o, t); }, "legacy stream order"});
                s->issued++;
            }
    } else if (!s->nonblocking && d.legacy.issued > d.legacy.done) {
        Stream *o = &d.legacy;
        uint64_t t = o->issued;
        s->q.push_back({[o, t]() { return flush(o, t); }, "legacy stream order"});
        s->issued++;
    }
    s->q.push_back({std::move(fn), what});
    s->issued++;
}

/* ---- kernel launches ---- */
inline void run_grid(const char *name, dim3 g, dim3 b, size_t smem, const std::function<void()> &body) {
    Ctx &c = tctx;
    (void)smem;
    Block blk;
    blk.body = &body;
    blk.kernel = name;
    c.blk = &blk;
    c.grid_dim = g;
    c.block_dim = b;
    uint64_t seed;
    int kind = order_kind(&seed);
    uint64_t nb = (uint64_t)g.x * g.y * g.z;
    std::vector<uint64_t> order;
    if (kind == 2) {
        order.resize(nb);
        for (uint64_t i = 0; i < nb; i++) order[i] = i;
        uint64_t sd = seed * 0x2545F4914F6CDD1Dull + nb;
        for (uint64_t i = nb; i > 1; i--) std::swap(order[i - 1], order[rng_next(sd) % i]);
    }
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t i = kind == 1 ? nb - 1 - k : kind == 2 ? order[k] : k;
        c.block_idx.x = (unsigned)(i % g.x);
        c.block_idx.y = (unsigned)(i / g.x % g.y);
        c.block_idx.z = (unsigned)(i / ((uint64_t)g.x * g.y));
        if (run_block(blk, b)) { st().sticky = cudaErrorLaunchFailure; break; }
    }
    c.blk = nullptr;
}

/* the checks a GPU makes at launch, reported by cudaGetLastError */
inline cudaError_t launch_check(const char *name, dim3 g, dim3 b, size_t smem, const void *fn) {
    uint64_t nt = (uint64_t)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.y > 65535 ||
        g.z > 65535 || g.x > 2147483647u) {
        fprintf(stderr, "emu: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): invalid configuration\n", name, g.x,
                g.y, g.z, b.x, b.y, b.z);
        return cudaErrorInvalidConfiguration;
    }
    State &S = st();
    auto it = S.func_smem.find(fn);
    size_t cap = it == S.func_smem.end() ? 48u << 10 : (size_t)it->second;
    if (cap < (48u << 10)) cap = 48u << 10;
    if (smem > cap) {
        fprintf(stderr, "emu: launch of %s with %zu bytes of dynamic shared memory, over the %zu allowed\n", name, smem,
                cap);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

/* EMU_LAUNCH_LOG=path: one line "kernel grid block | problem" per distinct launch of
   each kernel (the name without template arguments; problem: what the test driver says
   it runs, set_problem), appended; run.sh counts the kernels of gpt2rt.h that ran in
   two distinct lines or more (two launch shapes, or one fixed shape in two problems) */
inline std::string &problem() { static std::string *p = new std::string(); return *p; }
inline void set_problem(const char *what) { problem() = what ? what : ""; }
inline void log_launch(const char *name, dim3 g, dim3 b) {
    static const char *path = getenv("EMU_LAUNCH_LOG");
    static std::map<std::string, int> *seen = new std::map<std::string, int>();
    if (!path || !*path) return;
    std::string k(name);
    size_t lt = k.find('<');
    if (lt != std::string::npos) k.resize(lt);
    while (!k.empty() && k.back() == ' ') k.pop_back();
    char shape[96];
    snprintf(shape, sizeof shape, " %u,%u,%u %u,%u,%u", g.x, g.y, g.z, b.x, b.y, b.z);
    k += shape;
    k += " | " + problem();
    if ((*seen)[k]++) return;
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%s\n", k.c_str()); fclose(f); }
}
/* EMU_DIGEST=path: the sum of an FNV-1a hash of each copy the device hands to the host,
   written at exit; two fiber orders must give the same. A sum, so that rank threads whose
   copies interleave differently from run to run still agree when their bytes do. */
struct Digest {
    uint64_t h = 0, bytes = 0;
    const char *path = getenv("EMU_DIGEST");
    ~Digest() {
        if (!path || !*path) return;
        FILE *f = fopen(path, "w");
        if (f) { fprintf(f, "%016llx %llu\n", (unsigned long long)h, (unsigned long long)bytes); fclose(f); }
    }
};
inline Digest &digest() { static Digest d; return d; }
inline void digest_add(const void *p, size_t n) {
    Digest &d = digest();
    if (!d.path) return;
    const unsigned char *c = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= c[i]; h *= 1099511628211ull; }
    d.h += h;
    d.bytes += n;
}

/* tests that provoke a kernel fault clear the sticky error a GPU would keep */
inline void reset_sticky(void) { st().sticky = cudaSuccess; last_err = cudaSuccess; }

template <typename... P> struct Launcher {
    void (*fn)(P...);
    dim3 g, b;
    size_t smem;
    void *stream;
    const char *name;
    template <typename... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        State &S = st();
        Lock l(S.mu);
        cudaError_t e = launch_check(name, g, b, smem, (const void *)fn);
        if (e != cudaSuccess) { last_err = e; return; }
        log_launch(name, g, b);
        /* arguments are copied at launch, as the GPU copies them into constant memory */
        auto args = std::make_shared<std::tuple<typename std::decay<P>::type...>>(std::forward<A>(a)...);
        auto f = fn;
        dim3 g_ = g, b_ = b;
        size_t smem_ = smem;
        const char *name_ = name;
        enqueue(resolve(stream), name, [f, args, g_, b_, smem_, name_]() {
            std::function<void()> body = [f, args]() { std::apply(f, *args); };
            run_grid(name_, g_, b_, smem_, body);
            return 0;
        });
    }
};
template <typename... P>
inline Launcher<P...> launcher(dim3 g, dim3 b, size_t smem, void *stream, const char *name, void (*fn)(P...)) {
    return Launcher<P...>{fn, g, b, smem, stream, name};
}
} /* namespace gpt2rt_emu */

typedef struct gpt2rt_emu_stream_tag *cudaStream_t;
typedef struct gpt2rt_emu_event_tag *cudaEvent_t;

#define GPT2RT__LAUNCH(grid, block, smem, stream, ...) \
    ::gpt2rt_emu::launcher((grid), (block), (size_t)(smem), (void *)(stream), #__VA_ARGS__, __VA_ARGS__)

/* ---- the cudart calls ---- */
static inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    default: return "cudaErrorUnknown";
    }
}
static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated: see the emu: line above)";
    case cudaErrorNotSupported: return "operation not supported";
    default: return cudaGetErrorName(e);
    }
}
static inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = gpt2rt_emu::last_err;
    gpt2rt_emu::last_err = cudaSuccess;
    return e != cudaSuccess ? e : gpt2rt_emu::st().sticky;
}
static inline cudaError_t cudaPeekAtLastError(void) {
    return gpt2rt_emu::last_err != cudaSuccess ? gpt2rt_emu::last_err : gpt2rt_emu::st().sticky;
}
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = gpt2rt_emu::st().ndev; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= gpt2rt_emu::st().ndev) return gpt2rt_emu::set_last(cudaErrorInvalidDevice);
    gpt2rt_emu::cur_dev = d;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d) { *d = gpt2rt_emu::cur_dev; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d < 0 || d >= gpt2rt_emu::st().ndev) return gpt2rt_emu::set_last(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gpt2rt CUDA emulator (virtual sm_90, device %d)", d);
    p->totalGlobalMem = gpt2rt_emu::st().mem_cap;
    p->sharedMemPerBlock = 48u << 10;
    p->sharedMemPerBlockOptin = 227u << 10;
    p->sharedMemPerMultiprocessor = 228u << 10;
    p->regsPerBlock = 65536; p->warpSize = 32; p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->major = 9; p->minor = 0; p->multiProcessorCount = 132; p->maxThreadsPerMultiProcessor = 2048;
    p->clockRate = 1980000; p->memoryClockRate = 2619000; p->memoryBusWidth = 5120; p->l2CacheSize = 50 << 20;
    p->concurrentKernels = 1; p->asyncEngineCount = 3; p->unifiedAddressing = 1; p->pciBusID = d;
    return cudaSuccess;
}
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 12040; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 12040; return cudaSuccess; }
static inline cudaError_t cudaDeviceCanAccessPeer(int *ok, int d, int p) {
    int n = gpt2rt_emu::st().ndev;
    *ok = d != p && d >= 0 && d < n && p >= 0 && p < n;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceEnablePeerAccess(int p, unsigned flags) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    if (flags || p < 0 || p >= S.ndev || p == gpt2rt_emu::cur_dev) return gpt2rt_emu::set_last(cudaErrorInvalidValue);
    auto &v = S.dev[(size_t)gpt2rt_emu::cur_dev].peers;
    for (int q : v)
        if (q == p) return gpt2rt_emu::set_last(cudaErrorPeerAccessAlreadyEnabled);
    v.push_back(p);
    return cudaSuccess;
}

static inline cudaError_t gpt2rt_emu_alloc(void **p, size_t n, int pinned) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    *p = nullptr;
    gpt2rt_emu::Device &d = S.dev[(size_t)gpt2rt_emu::cur_dev];
    if (!pinned && d.used + n > S.mem_cap) return gpt2rt_emu::set_last(cudaErrorMemoryAllocation);
    size_t m = n ? n : 1;
    void *q = nullptr; /* 256-aligned as cudaMalloc; exactly m bytes, so ASan sees the first byte past */
    if (posix_memalign(&q, 256, m)) q = nullptr;
    if (!q) return gpt2rt_emu::set_last(cudaErrorMemoryAllocation);
    if (!pinned) memset(q, 0xff, m);
    S.allocs[(uintptr_t)q] = gpt2rt_emu::Alloc{m, gpt2rt_emu::cur_dev, pinned, q};
    if (!pinned) d.used += m;
    *p = q;
    return cudaSuccess;
}
static inline cudaError_t gpt2rt_emu_free(void *p, int pinned) {
    if (!p) return cudaSuccess;
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    auto it = S.allocs.find((uintptr_t)p);
    if (it == S.allocs.end() || it->second.pinned != pinned) {
        fprintf(stderr, "emu: %s(%p) of a pointer it did not allocate\n", pinned ? "cudaFreeHost" : "cudaFree", p);
        return gpt2rt_emu::set_last(cudaErrorInvalidValue);
    }
    /* cudaFree waits for the device to finish with the memory */
    for (auto &d : S.dev) {
        (void)gpt2rt_emu::flush_all(&d.legacy);
        for (auto *s : d.streams) (void)gpt2rt_emu::flush_all(s);
    }
    if (!pinned) S.dev[(size_t)it->second.device].used -= it->second.bytes;
    S.allocs.erase(it);
    free(p);
    return cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return gpt2rt_emu_alloc((void **)p, n, 0); }
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return gpt2rt_emu_alloc((void **)p, n, 1); }
static inline cudaError_t cudaFree(void *p) { return gpt2rt_emu_free(p, 0); }
static inline cudaError_t cudaFreeHost(void *p) { return gpt2rt_emu_free(p, 1); }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    *total = S.mem_cap;
    *free_b = S.mem_cap - S.dev[(size_t)gpt2rt_emu::cur_dev].used;
    return cudaSuccess;
}

/* the sides of a copy must be what kind says: device memory is what cudaMalloc gave */
static inline cudaError_t gpt2rt_emu_copy_check(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    if (!n) return cudaSuccess;
    int dd = gpt2rt_emu::is_dev(dst, n), sd = gpt2rt_emu::is_dev(src, n);
    int ok = k == cudaMemcpyDefault ? 1
           : k == cudaMemcpyHostToDevice ? dd && !sd
           : k == cudaMemcpyDeviceToHost ? sd && !dd
           : k == cudaMemcpyDeviceToDevice ? dd && sd
           : !dd && !sd;
    if (!ok) {
        fprintf(stderr, "emu: cudaMemcpy of %zu bytes kind %d from %p (%s) to %p (%s)\n", n, (int)k, src,
                sd ? "device" : "not a device allocation", dst, dd ? "device" : "not a device allocation");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = 0) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Stream *q;
    {
        gpt2rt_emu::Lock l(S.mu);
        cudaError_t e = gpt2rt_emu_copy_check(dst, src, n, k);
        if (e != cudaSuccess) return gpt2rt_emu::set_last(e);
        if (!n) return cudaSuccess;
        q = gpt2rt_emu::resolve(s);
        int d_dev = gpt2rt_emu::is_dev(dst, n), s_dev = gpt2rt_emu::is_dev(src, n);
        if (!s_dev && !gpt2rt_emu::is_pinned(src, n)) {
            /* from pageable memory the data is staged at the call */
            auto buf = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src, (const unsigned char *)src + n);
            gpt2rt_emu::enqueue(q, "cudaMemcpyAsync", [dst, buf, n]() { memcpy(dst, buf->data(), n); return 0; });
            return cudaSuccess;
        }
        if (d_dev)
            gpt2rt_emu::enqueue(q, "cudaMemcpyAsync", [dst, src, n]() { memmove(dst, src, n); return 0; });
        else
            gpt2rt_emu::enqueue(q, "cudaMemcpyAsync", [dst, src, n]() {
                memmove(dst, src, n);
                gpt2rt_emu::digest_add(dst, n);
                return 0;
            });
        if (d_dev || gpt2rt_emu::is_pinned(dst, n)) return cudaSuccess;
    }
    /* to pageable memory the call returns when the copy is done */
    return gpt2rt_emu::wait_stream(q, q->issued);
}
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, 0);
    if (e != cudaSuccess) return e;
    gpt2rt_emu::Stream *q;
    {
        gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
        q = gpt2rt_emu::resolve(0);
    }
    return gpt2rt_emu::wait_stream(q, q->issued);
}
/* a 2D copy is height row copies of width bytes, each checked as its own 1D copy */
static inline cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                            size_t height, cudaMemcpyKind k, cudaStream_t s = 0) {
    if (width > dpitch || width > spitch) return gpt2rt_emu::set_last(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = cudaMemcpyAsync((char *)dst + r * dpitch, (const char *)src + r * spitch, width, k, s);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s = 0) {
    (void)dd; (void)sd;
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    if (n && !gpt2rt_emu::is_dev(p, n)) {
        fprintf(stderr, "emu: cudaMemset of %zu bytes at %p, not inside a device allocation\n", n, p);
        return gpt2rt_emu::set_last(cudaErrorInvalidValue);
    }
    if (n) gpt2rt_emu::enqueue(gpt2rt_emu::resolve(s), "cudaMemset", [p, v, n]() { memset(p, v, n); return 0; });
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    cudaError_t e = cudaMemsetAsync(p, v, n, 0);
    if (e != cudaSuccess) return e;
    gpt2rt_emu::Stream *q;
    {
        gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
        q = gpt2rt_emu::resolve(0);
    }
    return gpt2rt_emu::wait_stream(q, q->issued);
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Stream *q = new gpt2rt_emu::Stream();
    q->device = gpt2rt_emu::cur_dev;
    q->nonblocking = (flags & cudaStreamNonBlocking) != 0;
    S.dev[(size_t)q->device].streams.push_back(q);
    *s = (cudaStream_t)q;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    gpt2rt_emu::Stream *q;
    {
        gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
        q = gpt2rt_emu::resolve(s);
    }
    return gpt2rt_emu::wait_stream(q, q->issued);
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return cudaSuccess;
    cudaError_t e = cudaStreamSynchronize(s); /* queued work still runs, as on a GPU */
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Stream *q = (gpt2rt_emu::Stream *)s;
    auto &v = S.dev[(size_t)q->device].streams;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] == q) { v.erase(v.begin() + (long)i); break; }
    delete q;
    return e;
}
/* a query is a chance for the stream to progress: it runs what it can */
static inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Stream *q = gpt2rt_emu::resolve(s);
    if (gpt2rt_emu::flush_all(q)) return cudaErrorNotReady;
    return S.sticky;
}
static inline cudaError_t cudaDeviceSynchronize(void) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    std::vector<gpt2rt_emu::Stream *> all;
    {
        gpt2rt_emu::Lock l(S.mu);
        gpt2rt_emu::Device &d = S.dev[(size_t)gpt2rt_emu::cur_dev];
        all.push_back(&d.legacy);
        for (auto *q : d.streams) all.push_back(q);
    }
    cudaError_t e = cudaSuccess;
    for (auto *q : all) {
        cudaError_t r = gpt2rt_emu::wait_stream(q, q->issued);
        if (e == cudaSuccess) e = r;
    }
    return e;
}

/* No graphs here: a stream is never being captured, except while a test sets
   gpt2rt_emu::capturing, to run a library's capture-time path (launches still run at once) */
typedef enum {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
} cudaStreamCaptureStatus;
namespace gpt2rt_emu { inline std::atomic<int> capturing{0}; }
static inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    (void)s;
    *status = gpt2rt_emu::capturing.load() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    gpt2rt_emu::Event *v = new gpt2rt_emu::Event();
    v->timing = !(flags & cudaEventDisableTiming);
    v->device = gpt2rt_emu::cur_dev;
    *e = (cudaEvent_t)v;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (gpt2rt_emu::Event *)e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Event *v = (gpt2rt_emu::Event *)e;
    gpt2rt_emu::Stream *q = gpt2rt_emu::resolve(s);
    gpt2rt_emu::enqueue(q, "cudaEventRecord", [v]() { v->t_ms = gpt2rt_emu::now_ms(); return 0; });
    v->s = q;
    v->ticket = q->issued;
    v->recorded = 1;
    return cudaSuccess;
}
/* the wait captures the event's latest record at the call, as CUDA does */
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0) {
    (void)flags;
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Event *v = (gpt2rt_emu::Event *)e;
    if (!v->recorded) return cudaSuccess;
    gpt2rt_emu::Stream *o = v->s;
    uint64_t t = v->ticket;
    gpt2rt_emu::enqueue(gpt2rt_emu::resolve(s), "cudaStreamWaitEvent", [o, t]() { return gpt2rt_emu::flush(o, t); });
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    gpt2rt_emu::Event *v = (gpt2rt_emu::Event *)e;
    if (!v->recorded) return cudaSuccess;
    return gpt2rt_emu::wait_stream(v->s, v->ticket);
}
static inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    gpt2rt_emu::Event *v = (gpt2rt_emu::Event *)e;
    if (!v->recorded) return cudaSuccess;
    return gpt2rt_emu::flush(v->s, v->ticket) ? cudaErrorNotReady : cudaSuccess;
}
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    gpt2rt_emu::Event *x = (gpt2rt_emu::Event *)a, *y = (gpt2rt_emu::Event *)b;
    if (!x->timing || !y->timing) return gpt2rt_emu::set_last(cudaErrorInvalidResourceHandle);
    *ms = (float)(y->t_ms - x->t_ms);
    return cudaSuccess;
}

template <typename... P> static inline cudaError_t cudaFuncSetAttribute(void (*fn)(P...), cudaFuncAttribute a, int v) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > (227 << 10)) return gpt2rt_emu::set_last(cudaErrorInvalidValue);
        S.func_smem[(const void *)fn] = v;
    }
    return cudaSuccess;
}
template <typename... P> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *fa, void (*fn)(P...)) {
    gpt2rt_emu::State &S = gpt2rt_emu::st();
    gpt2rt_emu::Lock l(S.mu);
    memset(fa, 0, sizeof *fa);
    auto it = S.func_smem.find((const void *)fn);
    fa->maxThreadsPerBlock = 1024;
    fa->numRegs = 32;
    fa->ptxVersion = 90;
    fa->binaryVersion = 90;
    fa->maxDynamicSharedSizeBytes = it == S.func_smem.end() ? 48 << 10 : it->second;
    return cudaSuccess;
}

/* the extern __shared__ arrays of a program: define each once at namespace scope, sized
   for the largest opt-in (227 KiB) */
#define GPT2RT_EMU_DYNAMIC_SHARED(type, name) alignas(128) thread_local type name[(227 << 10) / sizeof(type)]
#endif
