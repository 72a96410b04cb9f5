/* kernels/emu/include/nccl.h - NCCL for ranks in one process, on the emulator.

   A communicator belongs to a clique (one ncclUniqueId); its collectives are queued on
   the caller's stream like kernels. When one rank's stream reaches a collective, it
   runs the other ranks' streams as far as they go; the collective happens once every
   rank has reached it (sums in rank order 0, 1, ..., so results are deterministic),
   and a rank whose peers have not issued theirs yet stays blocked, as a GPU would.
   Non-blocking initialisation reports ncclInProgress through ncclCommGetAsyncError
   until every rank has joined. An aborted rank ends its clique: the peers' pending and
   later collectives complete without data and their async error is ncclRemoteError. */
#ifndef GPT2RT_EMU_NCCL_H
#define GPT2RT_EMU_NCCL_H
#include "cuda_runtime.h"

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
    size_t size;
    unsigned magic, version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char *netName;
    int splitShare;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeef, 0, 1, 0, 0, 0, nullptr, 0}
#define NCCL_MAJOR 2
#define NCCL_MINOR 21

namespace gpt2rt_emu {
struct NcclOp {
    int kind; /* 0 all-reduce, 1 reduce-scatter, 2 all-gather, 3 broadcast */
    size_t count, esize;
    int root, arrived_n, done;
    std::vector<const void *> send;
    std::vector<void *> recv;
    std::vector<char> arrived;
};
struct Clique {
    int nranks = 0, joined = 0, aborted = 0;
    std::map<uint64_t, NcclOp> ops;
    std::vector<Stream *> last_stream;
};
struct Comm {
    Clique *q;
    int rank, device, aborted;
    uint64_t seq;
};
inline std::map<uint64_t, Clique> &cliques() { static auto *m = new std::map<uint64_t, Clique>(); return *m; }
inline uint64_t &clique_counter() { static uint64_t n = 0; return n; }

inline void nccl_perform(Clique *c, NcclOp &op) {
    int n = c->nranks;
    size_t bytes = op.count * op.esize;
    if (op.kind == 0 || op.kind == 1) { /* sums over float32 in rank order */
        size_t total = op.kind == 0 ? op.count : op.count * (size_t)n;
        std::vector<float> sum(total, 0.0f);
        for (int r = 0; r < n; r++) {
            const float *s = (const float *)op.send[(size_t)r];
            for (size_t i = 0; i < total; i++) sum[i] = r ? sum[i] + s[i] : s[i];
        }
        for (int r = 0; r < n; r++) {
            const float *src = op.kind == 0 ? sum.data() : sum.data() + (size_t)r * op.count;
            memcpy(op.recv[(size_t)r], src, op.count * sizeof(float));
        }
    } else if (op.kind == 2) {
        std::vector<char> all(bytes * (size_t)n);
        for (int r = 0; r < n; r++) memcpy(all.data() + bytes * (size_t)r, op.send[(size_t)r], bytes);
        for (int r = 0; r < n; r++) memcpy(op.recv[(size_t)r], all.data(), all.size());
    } else {
        std::vector<char> b((const char *)op.send[(size_t)op.root], (const char *)op.send[(size_t)op.root] + bytes);
        for (int r = 0; r < n; r++) memcpy(op.recv[(size_t)r], b.data(), bytes);
    }
    op.done = 1;
}

inline ncclResult_t nccl_enqueue(Comm *m, int kind, const void *send, void *recv, size_t count, size_t esize, int root,
                                 cudaStream_t stream) {
    if (!m) return ncclInvalidArgument;
    if (m->aborted) return ncclInvalidUsage;
    State &S = st();
    Lock l(S.mu);
    Stream *s = resolve(stream);
    if (s->device != m->device) {
        fprintf(stderr, "emu: NCCL rank %d (device %d) given a stream of device %d\n", m->rank, m->device, s->device);
        return ncclInvalidArgument;
    }
    size_t in_bytes = count * esize * (kind == 1 ? (size_t)m->q->nranks : 1),
           out_bytes = count * esize * (kind == 2 ? (size_t)m->q->nranks : 1);
    if (count && (!is_dev(send, in_bytes) || !is_dev(recv, out_bytes))) {
        fprintf(stderr, "emu: NCCL rank %d: a buffer is not device memory of the right size\n", m->rank);
        return ncclInvalidArgument;
    }
    uint64_t seq = m->seq++;
    Clique *q = m->q;
    int rank = m->rank;
    if ((int)q->last_stream.size() < q->nranks) q->last_stream.resize((size_t)q->nranks, nullptr);
    q->last_stream[(size_t)rank] = s;
    enqueue(s, "nccl collective", [q, seq, rank, kind, send, recv, count, esize, root]() {
        if (q->aborted) return 0;
        NcclOp &op = q->ops[seq];
        if (op.arrived.empty()) {
            op.kind = kind; op.count = count; op.esize = esize; op.root = root;
            op.send.assign((size_t)q->nranks, nullptr); op.recv.assign((size_t)q->nranks, nullptr);
            op.arrived.assign((size_t)q->nranks, 0);
        }
        if (op.kind != kind || op.count != count || op.root != root) {
            fprintf(stderr, "emu: NCCL collective %llu: rank %d issued another operation or count than rank 0\n",
                    (unsigned long long)seq, rank);
            st().sticky = cudaErrorLaunchFailure;
            return 0;
        }
        if (!op.arrived[(size_t)rank]) {
            op.arrived[(size_t)rank] = 1; op.send[(size_t)rank] = send; op.recv[(size_t)rank] = recv; op.arrived_n++;
        }
        /* let the peers' streams catch up (those not already running further up this host stack) */
        for (int r = 0; r < q->nranks && op.arrived_n < q->nranks; r++) {
            Stream *o = q->last_stream[(size_t)r];
            if (!op.arrived[(size_t)r] && o && !o->running) (void)flush_all(o);
        }
        NcclOp &op2 = q->ops[seq];
        if (q->aborted) return 0;
        if (op2.arrived_n < q->nranks) return 1;
        if (!op2.done) nccl_perform(q, op2);
        return 0;
    });
    return ncclSuccess;
}
inline thread_local int nccl_group_depth = 0;
} /* namespace gpt2rt_emu */

typedef gpt2rt_emu::Comm *ncclComm_t;

static inline const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated NCCL: a peer aborted)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "internal error (emulated NCCL)";
    }
}
static inline ncclResult_t ncclGetVersion(int *v) { *v = 22100; return ncclSuccess; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
    memset(id, 0, sizeof *id);
    uint64_t k = ++gpt2rt_emu::clique_counter();
    memcpy(id->internal, "gpt2rt-emu", 10);
    memcpy(id->internal + 16, &k, 8);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                                  ncclConfig_t *config) {
    (void)config;
    gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks || memcmp(id.internal, "gpt2rt-emu", 10)) return ncclInvalidArgument;
    uint64_t k;
    memcpy(&k, id.internal + 16, 8);
    gpt2rt_emu::Clique &q = gpt2rt_emu::cliques()[k];
    if (!q.nranks) q.nranks = nranks;
    if (q.nranks != nranks) return ncclInvalidArgument;
    q.joined++;
    *comm = new gpt2rt_emu::Comm{&q, rank, gpt2rt_emu::cur_dev, 0, 0};
    return q.joined == q.nranks ? ncclSuccess : ncclInProgress;
}
static inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) {
    gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
    if (!comm) return ncclInvalidArgument;
    *e = comm->q->aborted ? ncclRemoteError : comm->q->joined < comm->q->nranks ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
    comm->q->aborted = 1;
    delete comm;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    gpt2rt_emu::Lock l(gpt2rt_emu::st().mu);
    delete comm;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommCount(ncclComm_t comm, int *n) { *n = comm->q->nranks; return ncclSuccess; }
static inline ncclResult_t ncclCommUserRank(ncclComm_t comm, int *r) { *r = comm->rank; return ncclSuccess; }
static inline size_t gpt2rt_emu_nccl_size(ncclDataType_t t) { return t == ncclFloat ? 4 : t == ncclInt32 ? 4 : 1; }
static inline ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t st) {
    if (t != ncclFloat || op != ncclSum) return ncclInvalidArgument; /* the emulator sums fp32 only */
    return gpt2rt_emu::nccl_enqueue(comm, 0, s, r, n, 4, 0, st);
}
static inline ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t st) {
    if (t != ncclFloat || op != ncclSum) return ncclInvalidArgument;
    return gpt2rt_emu::nccl_enqueue(comm, 1, s, r, n, 4, 0, st);
}
static inline ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
                                         cudaStream_t st) {
    return gpt2rt_emu::nccl_enqueue(comm, 2, s, r, n, gpt2rt_emu_nccl_size(t), 0, st);
}
static inline ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                                         cudaStream_t st) {
    if (!comm || root < 0 || root >= comm->q->nranks) return ncclInvalidArgument;
    return gpt2rt_emu::nccl_enqueue(comm, 3, s, r, n, gpt2rt_emu_nccl_size(t), root, st);
}
/* collectives never block at issue here, so a group only has to nest */
static inline ncclResult_t ncclGroupStart(void) { gpt2rt_emu::nccl_group_depth++; return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) {
    if (gpt2rt_emu::nccl_group_depth <= 0) return ncclInvalidUsage;
    gpt2rt_emu::nccl_group_depth--;
    return ncclSuccess;
}
#endif
