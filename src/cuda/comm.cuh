/* cuda/comm.cuh - 8.6 Device communicators: NCCL, loopback; data parallel on the device
   may call: cuda/steps.cuh and what it includes, processes/rendezvous.h */
#ifndef GPT2RT__SRC_CUDA_COMM_CUH
#define GPT2RT__SRC_CUDA_COMM_CUH
#include "../processes/rendezvous.h"
#include "steps.cuh"

/* ==== 8.6 Device communicators: NCCL, loopback; data parallel on the device ==== */
/* CUDA data parallel in one process (parallel = DATA, backend CUDA): rank r is a context
   of its own (rank 0 the application's, ranks 1.. made by gpt2rt__dp_open, 10.1) with its
   own device state on device_ids[r], run by one host thread as on the CPU (10.1), each
   rank the one-device forward and backward on its rows. Two communicators per rank:
   - the host one, ctx->comm: the rank threads' group of 1.4, for the few doubles the
     update agrees on (loss, counted targets, squared gradient norm: summed in rank order
     on the host) and to end every rank's waits when one fails;
   - the device one, st->dcomm, for the fp32 gradient and weight buffers: the 1.4
     interface (float buffers, the same shards) extended by a stream and wait() (1.2):
     a collective is enqueued on the communicator's own stream and returns. Two kinds:
       NCCL (GPT2RT_NCCL builds, linked with -lnccl) where the devices differ;
       loopback (every build; the test mode of one GPU named twice, allow_shared_device):
       the ranks are this process's threads, each publishes its device pointer, and
       rank r sums shard r over every rank's buffer in rank order 0, 1, ..., N-1 with a
       kernel (same device, or peer access), then the shards are copied to every rank:
       every rank gets the same bits, run to run, the CPU ranks' order of sums.
   The backward's last micro-step hands each layer's gradients to the device
   communicator as soon as the layer is done (gpt2rt__dp_bucket_ready, 10.1): the
   compute stream records ev_grads, the communicator's stream waits for it, and the
   reduction runs there while the compute stream goes on with the layers below. The
   update waits for the communicator (wait(), at most the timeout), orders the compute
   stream after it (ev_comm), and takes the norm of its shard of the summed gradient;
   the doubles are summed on the host, so every rank takes the same decision (clip,
   skip, fp16 loss scale). ZeRO-1 (shard_optimizer): one reduce-scatter after the
   backward, AdamW of the own shard (master weights and moments sized for it), then the
   fp32 weights are all-gathered through the gradient buffer and every floatX working
   copy is refreshed from them (the same rounding as the update's: bitwise the
   unsharded weights). NCCL does not sum in rank order: with it, data parallel equals
   one device within fp32 reassociation only, as with the loopback.
   COMPILED, NEVER RUN: kernels/data_parallel.cu checks it on a GPU (make test-gpu). */

/* ---- kernels ---- */

typedef struct gpt2rt__cu_ptrs { const float *p[GPT2RT_MAX_DEVICES]; } gpt2rt__cu_ptrs;

/* out[i] = in.p[0][i] + in.p[1][i] + ... + in.p[n_in-1][i], left to right (the CPU threads'
   order); out may be one of the inputs (each element is read before it is written) */
__global__ void gpt2rt__cuk_rank_sum(float *out, gpt2rt__cu_ptrs in, int n_in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = in.p[0][i];
        for (int k = 1; k < n_in; k++) s = __fadd_rn(s, in.p[k][i]);
        out[i] = s;
    }
}
static cudaError_t gpt2rt__cu_rank_sum(float *out, const gpt2rt__cu_ptrs *in, int n_in, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
    GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, s, gpt2rt__cuk_rank_sum)(out, *in, n_in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) floatX = in (n) fp32, rounded as the AdamW kernel rounds its floatX copy */
template <typename X>
__global__ void gpt2rt__cuk_cast(X *out, const float *in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gpt2rt__cu_to<X>(in[i]);
}
template <typename X>
static cudaError_t gpt2rt__cu_cast(X *out, const float *in, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
    GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, s, gpt2rt__cuk_cast<X>)(out, in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- the ranks' device communicators ---- */

/* every rank's device communicator (gpt2rt_ctx.dgroup of rank 0); the loopback's state */
typedef struct gpt2rt__dcomms {
    int n, nccl;
    gpt2rt__comm comms[GPT2RT_MAX_DEVICES]; /* rank r's */
    void *host;                             /* the rank threads' gpt2rt__comm_group (1.4) */
    int device[GPT2RT_MAX_DEVICES];
    cudaStream_t stream[GPT2RT_MAX_DEVICES];       /* loopback: rank r's communicator stream */
    cudaEvent_t ev[GPT2RT_MAX_DEVICES][3];         /* loopback: rank r's point in a phase */
    int made[GPT2RT_MAX_DEVICES];                  /* loopback: stream and events created */
} gpt2rt__dcomms;

#ifdef GPT2RT__COMM_THREADS
/* a rank thread of the group failed (the host group of 1.4): the device waits stop */
static int gpt2rt__dcomm_peer_failed(void *host) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)host;
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    int f = g->failed;
    pthread_mutex_unlock(&g->mu);
    return f;
}

/* Loopback. A collective is a few phases; each ends with gpt2rt__loop_sync: the rank
   records its phase event on its stream, waits for every rank thread at the host
   group's barrier, then makes its stream wait for every other rank's event. So a rank
   reads another's buffer only after that rank's stream reached the point where the
   buffer is ready, and changes its own only after every reader is done. The event of
   a phase is ev[rank][gen % 3], gen the host barrier's generation (the same on every
   rank; it cannot move before this rank arrives): an event is recorded again only
   two barriers later, when every rank has issued its waits for the earlier record.
   Every event waited on was recorded before the barrier, so the device never waits
   for something no one will do: a failed rank ends the host barrier, not the device. */
static gpt2rt_result gpt2rt__loop_fail(gpt2rt__comm *c, cudaError_t e, const char *what) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    snprintf(c->err, sizeof c->err, "loopback %s on rank %d (device %d): %s", what, c->rank, lp->device[c->rank],
             cudaGetErrorString(e));
    gpt2rt__comm_threads_fail(&((gpt2rt__comm_group *)lp->host)->comms[c->rank]);
    return GPT2RT_ERR_UNAVAILABLE;
}

static gpt2rt_result gpt2rt__loop_sync(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int r = c->rank, p = (int)(g->gen % 3);
    cudaError_t e = cudaEventRecord(lp->ev[r][p], lp->stream[r]);
    if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaEventRecord");
    gpt2rt_result res = gpt2rt__comm_threads_wait(&g->comms[r]);
    if (res != GPT2RT_OK) { snprintf(c->err, sizeof c->err, "%s", g->comms[r].err); return res; }
    for (int k = 0; k < lp->n; k++)
        if (k != r && (e = cudaStreamWaitEvent(lp->stream[r], lp->ev[k][p], 0)) != cudaSuccess)
            return gpt2rt__loop_fail(c, e, "cudaStreamWaitEvent");
    return GPT2RT_OK;
}

/* publish buf (rank order is the slot order), set the device, then the first phase */
static gpt2rt_result gpt2rt__loop_begin(gpt2rt__comm *c, void *buf) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    ((gpt2rt__comm_group *)lp->host)->bufs[c->rank] = buf;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaSetDevice");
    return gpt2rt__loop_sync(c);
}

/* shard c->rank of buf := the sum over the ranks' bufs, in rank order */
static gpt2rt_result gpt2rt__loop_sum_own(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int64_t lo = gpt2rt__shard_lo(n, c->size, c->rank), hi = gpt2rt__shard_lo(n, c->size, c->rank + 1);
    gpt2rt__cu_ptrs in;
    memset(&in, 0, sizeof in);
    for (int k = 0; k < lp->n; k++) in.p[k] = (const float *)g->bufs[k] + lo;
    cudaError_t e = gpt2rt__cu_rank_sum(buf + lo, &in, lp->n, hi - lo, lp->stream[c->rank]);
    return e == cudaSuccess ? GPT2RT_OK : gpt2rt__loop_fail(c, e, "the rank-order sum kernel");
}

/* every shard but c->rank's from the rank that owns it */
static gpt2rt_result gpt2rt__loop_copy_others(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int r = c->rank;
    for (int k = 0; k < lp->n; k++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, k), hi = gpt2rt__shard_lo(n, c->size, k + 1);
        if (k == r || hi <= lo) continue;
        cudaError_t e = cudaMemcpyPeerAsync(buf + lo, lp->device[r], (const float *)g->bufs[k] + lo, lp->device[k],
                                            (size_t)(hi - lo) * sizeof(float), lp->stream[r]);
        if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaMemcpyPeerAsync");
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__loop_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sum_own(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r; /* no rank changes its buffer before the others read it */
}
static gpt2rt_result gpt2rt__loop_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_copy_others(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
/* the sums, then (once every rank's shard is summed) the others' shards */
static gpt2rt_result gpt2rt__loop_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sum_own(c, buf, n);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sync(c);
    if (r == GPT2RT_OK) r = gpt2rt__loop_copy_others(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
static gpt2rt_result gpt2rt__loop_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    if (root < 0 || root >= c->size) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = %d)", root, c->size);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK && c->rank != root && bytes) {
        cudaError_t e = cudaMemcpyPeerAsync(buf, lp->device[c->rank], ((gpt2rt__comm_group *)lp->host)->bufs[root],
                                            lp->device[root], bytes, lp->stream[c->rank]);
        if (e != cudaSuccess) r = gpt2rt__loop_fail(c, e, "cudaMemcpyPeerAsync");
    }
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
static gpt2rt_result gpt2rt__loop_barrier(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    return e == cudaSuccess ? gpt2rt__loop_sync(c) : gpt2rt__loop_fail(c, e, "cudaSetDevice");
}
/* nothing here can hang (every event waited on was recorded): a plain synchronize */
static gpt2rt_result gpt2rt__loop_wait(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(lp->stream[c->rank]);
    return e == cudaSuccess ? GPT2RT_OK : gpt2rt__loop_fail(c, e, "waiting for the communicator stream");
}
static void gpt2rt__loop_destroy(gpt2rt__comm *c) { (void)c; } /* gpt2rt__dcomms_free frees the whole group */

/* the loopback communicators of lp->n ranks on lp->device[], over the rank threads' group
   host; devices that differ need peer access (else NCCL: GPT2RT_NCCL) */
static gpt2rt_result gpt2rt__loop_open(gpt2rt__dcomms *lp, void *host, char *err, size_t cap) {
    lp->host = host;
    for (int r = 0; r < lp->n; r++) {
        cudaError_t e = cudaSetDevice(lp->device[r]);
        for (int k = 0; k < lp->n && e == cudaSuccess; k++) {
            if (lp->device[k] == lp->device[r]) continue;
            int can = 0;
            e = cudaDeviceCanAccessPeer(&can, lp->device[r], lp->device[k]);
            if (e == cudaSuccess && !can) {
                snprintf(err, cap, "data parallel over devices %d and %d: the loopback reduction needs peer access "
                         "between them, which they lack; build with -DGPT2RT_NCCL (link -lnccl) to reduce with NCCL",
                         lp->device[r], lp->device[k]);
                return GPT2RT_ERR_UNAVAILABLE;
            }
            if (e == cudaSuccess && (e = cudaDeviceEnablePeerAccess(lp->device[k], 0)) == cudaErrorPeerAccessAlreadyEnabled) {
                (void)cudaGetLastError();
                e = cudaSuccess;
            }
        }
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&lp->stream[r], cudaStreamNonBlocking);
        for (int p = 0; p < 3 && e == cudaSuccess; p++) {
            e = cudaEventCreateWithFlags(&lp->ev[r][p], cudaEventDisableTiming);
            if (e != cudaSuccess) { /* undo this rank's part: made[r] stays 0 */
                for (int q = 0; q < p; q++) (void)cudaEventDestroy(lp->ev[r][q]);
                (void)cudaStreamDestroy(lp->stream[r]);
            }
        }
        if (e != cudaSuccess) {
            snprintf(err, cap, "loopback communicator of rank %d on device %d: %s", r, lp->device[r], cudaGetErrorString(e));
            (void)cudaGetLastError();
            return GPT2RT_ERR_UNAVAILABLE;
        }
        lp->made[r] = 1;
        gpt2rt__comm *c = &lp->comms[r];
        memset(c, 0, sizeof *c);
        c->rank = r; c->size = lp->n; c->impl = lp;
        c->all_reduce = gpt2rt__loop_all_reduce;
        c->reduce_scatter = gpt2rt__loop_reduce_scatter;
        c->all_gather = gpt2rt__loop_all_gather;
        c->broadcast = gpt2rt__loop_broadcast;
        c->barrier = gpt2rt__loop_barrier;
        c->destroy = gpt2rt__loop_destroy;
        c->stream = (void *)lp->stream[r];
        c->wait = gpt2rt__loop_wait;
    }
    return GPT2RT_OK;
}
#endif /* GPT2RT__COMM_THREADS */

/* NCCL (GPT2RT_NCCL builds, linked with -lnccl): one rank per device, the ids exchanged
   by the rendezvous across processes (10.3; not used yet: multi-process CUDA runs are
   refused) or drawn here for the ranks of one process. NCCL's sums give every rank the
   same bits and are deterministic run to run on one topology, but not in rank order.
   The communicator is non-blocking (ncclConfig_t.blocking = 0): initialisation, every
   enqueue and wait() are polled against timeout_s and end early when a rank thread of
   this process failed; either aborts the communicator (unusable afterwards), never a
   wait forever. NCCL refuses one GPU twice: the test mode uses the loopback. */
#ifdef GPT2RT_NCCL
typedef struct gpt2rt__nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    float *one;       /* a device float the barrier reduces */
    double timeout_s;
    int device;
    void *peers;      /* the rank threads' gpt2rt__comm_group when the ranks share this process, or NULL */
} gpt2rt__nccl;

/* the advice every NCCL failure ends with */
#define GPT2RT__NCCL_HINT "(NCCL_DEBUG=INFO shows why; NCCL_P2P_DISABLE=1 helps where peer-to-peer copies hang, " \
                          "e.g. GeForce cards or a virtualised PCIe)"

static int gpt2rt__nccl_peers_failed(const gpt2rt__nccl *m) {
#ifdef GPT2RT__COMM_THREADS
    return gpt2rt__dcomm_peer_failed(m->peers);
#else
    (void)m;
    return 0;
#endif
}

/* Poll the communicator after a call that returned `started`: until NCCL has taken it
   (finish = 0: enqueued), or also until its stream has run it (finish = 1), at most
   timeout_s. A failure, a hang or a failed rank thread aborts the communicator. */
static gpt2rt_result gpt2rt__nccl_poll(gpt2rt__comm *c, ncclResult_t started, const char *what, int finish) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    ncclResult_t e = started;
    for (;;) {
        if (e == ncclSuccess) {
            if (!finish) return GPT2RT_OK;
            cudaError_t q = cudaStreamQuery(m->stream);
            if (q == cudaSuccess) return GPT2RT_OK;
            if (q != cudaErrorNotReady) {
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d: %s", what, c->rank, cudaGetErrorString(q));
                return GPT2RT_ERR_UNAVAILABLE;
            }
        } else if (e != ncclInProgress) {
            snprintf(c->err, sizeof c->err, "NCCL %s on rank %d failed: %s %s", what, c->rank, ncclGetErrorString(e),
                     GPT2RT__NCCL_HINT);
            (void)ncclCommAbort(m->comm);
            m->comm = NULL;
            return GPT2RT_ERR_IO;
        }
        int peer = gpt2rt__nccl_peers_failed(m);
        if (peer || gpt2rt__now() > deadline) {
            if (peer)
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d stopped: rank %d failed", what, c->rank, peer - 1);
            else
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d did not finish within %g s: another rank failed "
                         "or stopped %s", what, c->rank, m->timeout_s, GPT2RT__NCCL_HINT);
            (void)ncclCommAbort(m->comm);
            m->comm = NULL;
            return GPT2RT_ERR_IO;
        }
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(m->comm, &a) != ncclSuccess) a = ncclInternalError;
        e = a;
    }
}

#define GPT2RT__NCCL_LIVE(c, m) do { if (!(m)->comm) { \
        snprintf((c)->err, sizeof (c)->err, "NCCL communicator aborted earlier"); return GPT2RT_ERR_STATE; } } while (0)

static gpt2rt_result gpt2rt__nccl_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    return gpt2rt__nccl_poll(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum, m->comm, m->stream),
                             "all_reduce", 0);
}

/* in place: ncclReduceScatter takes one count a rank, so the shards must be equal, and
   ZeRO-1 pads its gradient to make them so (gpt2rt__shard_padded); unequal ones are
   refused rather than silently all-reduced (twice the traffic) */
static gpt2rt_result gpt2rt__nccl_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    int64_t per = gpt2rt__shard_lo(n, c->size, 1);
    GPT2RT__NCCL_LIVE(c, m);
    if (per * c->size != n) {
        snprintf(c->err, sizeof c->err, "reduce_scatter: %lld floats are not %d equal shards of %lld (pad to %lld)",
                 (long long)n, c->size, (long long)per, (long long)gpt2rt__shard_padded(n, c->size));
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    return gpt2rt__nccl_poll(c, ncclReduceScatter(buf, buf + per * c->rank, (size_t)per, ncclFloat, ncclSum, m->comm,
                                                  m->stream), "reduce_scatter", 0);
}

static gpt2rt_result gpt2rt__nccl_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    int64_t per = gpt2rt__shard_lo(n, c->size, 1);
    if (per * c->size == n)
        return gpt2rt__nccl_poll(c, ncclAllGather(buf + per * c->rank, buf, (size_t)per, ncclFloat, m->comm, m->stream),
                                 "all_gather", 0);
    ncclResult_t e = ncclGroupStart(); /* unequal shards: one broadcast each, as one group */
    for (int r = 0; r < c->size && (e == ncclSuccess || e == ncclInProgress); r++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, r), hi = gpt2rt__shard_lo(n, c->size, r + 1);
        e = ncclBroadcast(buf + lo, buf + lo, (size_t)(hi - lo), ncclFloat, r, m->comm, m->stream);
    }
    ncclResult_t g = ncclGroupEnd();
    return gpt2rt__nccl_poll(c, e != ncclSuccess && e != ncclInProgress ? e : g, "all_gather", 0);
}

static gpt2rt_result gpt2rt__nccl_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    return gpt2rt__nccl_poll(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, m->comm, m->stream), "broadcast", 0);
}

static gpt2rt_result gpt2rt__nccl_wait(gpt2rt__comm *c) {
    GPT2RT__NCCL_LIVE(c, (gpt2rt__nccl *)c->impl);
    return gpt2rt__nccl_poll(c, ncclSuccess, "collective", 1);
}

static gpt2rt_result gpt2rt__nccl_barrier(gpt2rt__comm *c) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    gpt2rt_result r = gpt2rt__nccl_all_reduce(c, m->one, 1);
    return r == GPT2RT_OK ? gpt2rt__nccl_wait(c) : r;
}

static void gpt2rt__nccl_destroy(gpt2rt__comm *c) {
    if (!c || !c->impl) return;
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    (void)cudaSetDevice(m->device);
    if (m->comm) (void)ncclCommDestroy(m->comm);
    if (m->stream) (void)cudaStreamDestroy(m->stream);
    if (m->one) (void)cudaFree(m->one);
    free(m);
    c->impl = NULL;
}

/* rank 0 of the run draws the id, the rendezvous takes it to every process: id is
   NCCL's ncclUniqueId (128 bytes) */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__nccl_id(const gpt2rt_config *cfg, ncclUniqueId *id, char *err,
                                                          size_t cap) {
    unsigned char bytes[GPT2RT__RDV_ID_BYTES];
    memset(bytes, 0, sizeof bytes);
    if (cfg->rank == 0) {
        ncclResult_t e = ncclGetUniqueId(id);
        if (e != ncclSuccess) {
            snprintf(err, cap, "ncclGetUniqueId failed: %s %s", ncclGetErrorString(e), GPT2RT__NCCL_HINT);
            return GPT2RT_ERR_UNAVAILABLE;
        }
        memcpy(bytes, id, sizeof *id);
    }
    gpt2rt_result r = gpt2rt__rdv_exchange(cfg, bytes, err, cap);
    if (r == GPT2RT_OK) memcpy(id, bytes, sizeof *id);
    return r;
}

/* c := rank `rank` of `nranks` on `device`, not yet joined: its stream and barrier float */
static gpt2rt_result gpt2rt__nccl_make(int nranks, int rank, int device, double timeout_s, void *peers, gpt2rt__comm *c,
                                       char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    gpt2rt__nccl *m = (gpt2rt__nccl *)calloc(1, sizeof *m);
    if (!m) { snprintf(err, cap, "NCCL communicator: %zu bytes", sizeof *m); return GPT2RT_ERR_OUT_OF_MEMORY; }
    m->timeout_s = timeout_s;
    m->device = device;
    m->peers = peers;
    c->rank = rank; c->size = nranks; c->impl = m;
    c->all_reduce = gpt2rt__nccl_all_reduce;
    c->reduce_scatter = gpt2rt__nccl_reduce_scatter;
    c->all_gather = gpt2rt__nccl_all_gather;
    c->broadcast = gpt2rt__nccl_broadcast;
    c->barrier = gpt2rt__nccl_barrier;
    c->destroy = gpt2rt__nccl_destroy;
    c->wait = gpt2rt__nccl_wait;
    cudaError_t ce = cudaSetDevice(device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&m->one, sizeof(float));
    /* the barrier's all-reduce reads it: a defined value (0, whose sums stay 0), not
       whatever the allocation held */
    if (ce == cudaSuccess) ce = cudaMemset(m->one, 0, sizeof(float));
    if (ce != cudaSuccess) {
        snprintf(err, cap, "NCCL communicator on device %d: %s", device, cudaGetErrorString(ce));
        (void)cudaGetLastError();
        gpt2rt__nccl_destroy(c);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    c->stream = (void *)m->stream;
    return GPT2RT_OK;
}

/* c := rank `rank` of `nranks` on CUDA device `device` (ncclCommInitRank's arguments,
   non-blocking, polled at most timeout_s): one rank per process */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__nccl_comm(ncclUniqueId id, int nranks, int rank, int device,
                                                            double timeout_s, gpt2rt__comm *c, char *err,
                                                            size_t cap) {
    gpt2rt_result r = gpt2rt__nccl_make(nranks, rank, device, timeout_s, NULL, c, err, cap);
    if (r != GPT2RT_OK) return r;
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t e = ncclCommInitRankConfig(&m->comm, nranks, id, rank, &config);
    if (e != ncclSuccess && e != ncclInProgress) {
        snprintf(err, cap, "ncclCommInitRank (rank %d of %d, device %d) failed: %s %s", rank, nranks, device,
                 ncclGetErrorString(e), GPT2RT__NCCL_HINT);
        if (m->comm) (void)ncclCommAbort(m->comm);
        m->comm = NULL;
        gpt2rt__nccl_destroy(c);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    r = gpt2rt__nccl_poll(c, e, "initialisation (ncclCommInitRank)", 1);
    if (r != GPT2RT_OK) {
        snprintf(err, cap, "%s", c->err);
        gpt2rt__nccl_destroy(c);
    }
    return r;
}

/* comms[0..n) := the n ranks of this process on devices[] (distinct), initialised from
   one thread as one NCCL group; peers: the rank threads' host group (or NULL) */
static gpt2rt_result gpt2rt__nccl_ranks(int n, const int *devices, double timeout_s, void *peers, gpt2rt__comm *comms,
                                        char *err, size_t cap) {
    ncclUniqueId id;
    ncclResult_t e = ncclGetUniqueId(&id);
    if (e != ncclSuccess) {
        snprintf(err, cap, "ncclGetUniqueId failed: %s %s", ncclGetErrorString(e), GPT2RT__NCCL_HINT);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    int made = 0;
    gpt2rt_result r = GPT2RT_OK;
    for (; made < n && r == GPT2RT_OK; made++)
        if ((r = gpt2rt__nccl_make(n, made, devices[made], timeout_s, peers, &comms[made], err, cap)) != GPT2RT_OK) break;
    if (r == GPT2RT_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        e = ncclGroupStart();
        for (int k = 0; k < n && (e == ncclSuccess || e == ncclInProgress); k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            (void)cudaSetDevice(m->device);
            e = ncclCommInitRankConfig(&m->comm, n, id, k, &config);
        }
        ncclResult_t g = ncclGroupEnd();
        if (e == ncclSuccess || e == ncclInProgress) e = g;
        if (e != ncclSuccess && e != ncclInProgress) {
            snprintf(err, cap, "ncclCommInitRank of %d ranks in one process failed: %s %s", n, ncclGetErrorString(e),
                     GPT2RT__NCCL_HINT);
            r = GPT2RT_ERR_UNAVAILABLE;
        }
        for (int k = 0; k < n && r == GPT2RT_OK; k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            if (!m->comm) {
                snprintf(err, cap, "ncclCommInitRank gave rank %d of %d no communicator %s", k, n, GPT2RT__NCCL_HINT);
                r = GPT2RT_ERR_UNAVAILABLE;
            } else if ((r = gpt2rt__nccl_poll(&comms[k], ncclInProgress, "initialisation (ncclCommInitRank)", 1)) != GPT2RT_OK)
                snprintf(err, cap, "%s", comms[k].err);
        }
    }
    if (r != GPT2RT_OK)
        for (int k = 0; k < made && k < n; k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            if (m && m->comm) { (void)ncclCommAbort(m->comm); m->comm = NULL; }
            gpt2rt__nccl_destroy(&comms[k]);
        }
    return r;
}
#undef GPT2RT__NCCL_LIVE
#endif /* GPT2RT_NCCL */

/* ---- data parallel on the device: opening, the buckets, the update's agreement ---- */

/* Every rank's queued work finishes before any rank's stream, events or communicator
   go: a rank's communicator stream waits on the other ranks' events (loopback) or joins
   their collective (NCCL; its wait gives up after the timeout and aborts), so a context
   freed between gpt2rt_backward and gpt2rt_update still has rank r + 1 waiting on rank r. */
static void gpt2rt__dcomms_free(gpt2rt__dcomms *dc) {
    if (!dc) return;
    for (int r = 0; r < dc->n; r++) {
        if (dc->nccl) {
            if (dc->comms[r].impl && dc->comms[r].wait) (void)dc->comms[r].wait(&dc->comms[r]);
        } else if (dc->made[r]) {
            (void)cudaSetDevice(dc->device[r]);
            (void)cudaStreamSynchronize(dc->stream[r]);
        }
    }
    for (int r = 0; r < dc->n; r++) {
        if (dc->nccl) { if (dc->comms[r].destroy) dc->comms[r].destroy(&dc->comms[r]); continue; }
        if (!dc->made[r]) continue;
        (void)cudaSetDevice(dc->device[r]);
        for (int p = 0; p < 3; p++) (void)cudaEventDestroy(dc->ev[r][p]);
        (void)cudaStreamDestroy(dc->stream[r]);
    }
    (void)cudaGetLastError();
    free(dc);
}

/* rank 0 closes the ranks' device communicators (gpt2rt_free) */
static void gpt2rt__cu_dp_close(gpt2rt_ctx *ctx) {
    gpt2rt__dcomms_free((gpt2rt__dcomms *)ctx->dgroup);
    ctx->dgroup = NULL;
    for (int r = 0; r < ctx->n_ranks; r++) /* the states no longer have a communicator */
        if (ctx->ranks[r] && ctx->ranks[r]->cu) ctx->ranks[r]->cu->dcomm = NULL;
}

/* Rank r (>= 1) of the data-parallel context ctx (rank 0, whose device state exists):
   rc (zeroed, cfg and d copied) gets its own parameter table and a device state on
   device_ids[r], created against rank 0's host side (the fp32 weights it uploads). */
static gpt2rt_result gpt2rt__cu_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r) {
    rc->n_tensors = ctx->n_tensors;
    rc->n_params = ctx->n_params;
    rc->n_train = ctx->n_train;
    rc->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                  GPT2RT_MEM_BOOKKEEPING);
    if (!rc->tensors) return gpt2rt__fail(rc, GPT2RT_ERR_OUT_OF_MEMORY, "parameter table");
    memcpy(rc->tensors, ctx->tensors, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor));
    rc->params = ctx->params; /* rank 0's host weights, which uploads and downloads use (not its arena) */
    /* the driver runs on device_ids[0]: this rank's config names its device first (the
       set of ordinals, which gpt2rt__dev_check judges, is the same) */
    gpt2rt_config c = ctx->cfg;
    c.device_ids[0] = ctx->cfg.device_ids[r];
    c.device_ids[r] = ctx->cfg.device_ids[0];
    char err[2048];
    gpt2rt_result res = gpt2rt__cu_create_cfg(ctx, &c, &rc->cu, err, sizeof err);
    if (res != GPT2RT_OK) return gpt2rt__fail(rc, res, "%s", err);
    return GPT2RT_OK;
}

/* st (rank `rank` of dcomm's group, host side ctx: rank 0's) reduces through dcomm; with
   ZeRO-1 it keeps shard `rank` of the master weights and moments (its table and master
   re-made: creation gave it shard 0's) */
static gpt2rt_result gpt2rt__cu_dp_attach(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, gpt2rt__comm *dcomm, int rank) {
    st->phase = "data parallel";
    st->layer = -1;
    st->dcomm = dcomm;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (!st->dp_ev_ok) {
        GPT2RT__CU_CK(cudaEventCreateWithFlags(&st->ev_grads, cudaEventDisableTiming));
        cudaError_t e = cudaEventCreateWithFlags(&st->ev_comm, cudaEventDisableTiming);
        if (e != cudaSuccess) { (void)cudaEventDestroy(st->ev_grads); return gpt2rt__cu_fail(ctx, st, e, "cudaEventCreate"); }
        st->dp_ev_ok = 1;
    }
    if (gpt2rt__sharded(&st->d)) {
        st->opt_lo = gpt2rt__shard_lo(st->n_train, dcomm->size, rank);
        st->opt_hi = gpt2rt__shard_lo(st->n_train, dcomm->size, rank + 1);
        /* the gradient's padding to equal shards (3.2, 1.4) sums as zeros: nothing else writes it */
        GPT2RT__CU_CK(cudaMemset(st->grads, 0, (size_t)st->bytes[GPT2RT_MEM_GRADS]));
        gpt2rt__cu_adamw_plan(ctx, st);
        if (st->master) GPT2RT__TRY(gpt2rt__cu_upload_params(ctx, st));
    }
    return GPT2RT_OK;
}

/* gpt2rt_create of a CUDA data-parallel context, after gpt2rt__dp_open made the ranks and
   their host group: the device communicators (NCCL where built with it and the devices
   differ, else the loopback), attached to every rank's state */
static gpt2rt_result gpt2rt__cu_dp_open(gpt2rt_ctx *ctx) {
    int n = ctx->n_ranks, dup = 0;
    gpt2rt__dcomms *dc = (gpt2rt__dcomms *)calloc(1, sizeof(gpt2rt__dcomms));
    if (!dc) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the device communicators");
    ctx->dgroup = dc;
    dc->n = n;
    for (int r = 0; r < n; r++) {
        dc->device[r] = ctx->ranks[r]->cu->device;
        for (int k = 0; k < r; k++) dup |= dc->device[k] == dc->device[r];
    }
    char err[1024] = "";
    gpt2rt_result res = GPT2RT_ERR_UNAVAILABLE;
    snprintf(err, sizeof err, "data parallel on the CUDA backend needs POSIX threads, which this build lacks");
#ifdef GPT2RT_NCCL
    if (!dup) {
        dc->nccl = 1;
        res = gpt2rt__nccl_ranks(n, dc->device, (double)ctx->cfg.timeout_s, ctx->group, dc->comms, err, sizeof err);
        if (res != GPT2RT_OK) dc->n = 0; /* nothing left to free */
    } else
#endif
    {
        (void)dup;
#ifdef GPT2RT__COMM_THREADS
        res = gpt2rt__loop_open(dc, ctx->group, err, sizeof err);
#endif
    }
    if (res != GPT2RT_OK) return gpt2rt__fail(ctx, res, "gpt2rt_create: %s", err);
    for (int r = 0; r < n; r++)
        if ((res = gpt2rt__cu_dp_attach(ctx, ctx->ranks[r]->cu, &dc->comms[r], r)) != GPT2RT_OK) return res;
    gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: data parallel over %d CUDA ranks, gradients reduced by %s", n,
                dc->nccl ? "NCCL" : "the loopback communicator (rank-order sums)");
    return GPT2RT_OK;
}

/* pieces[i] = {lo, n}: those gradient floats summed over the ranks (scatter: one piece,
   the whole gradient, reduce-scattered: shard r for rank r), enqueued on the device
   communicator's stream after what the compute stream did so far */
static gpt2rt_result gpt2rt__cu_dp_reduce(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int64_t (*pieces)[2], int np,
                                          int scatter) {
    gpt2rt__comm *dc = st->dcomm;
    GPT2RT__CU_CK(cudaEventRecord(st->ev_grads, st->stream));
    GPT2RT__CU_CK(cudaStreamWaitEvent((cudaStream_t)dc->stream, st->ev_grads, 0));
    for (int i = 0; i < np; i++) {
        if (pieces[i][1] <= 0) continue;
        gpt2rt_result r = scatter ? dc->reduce_scatter(dc, st->grads, gpt2rt__shard_padded(st->n_train, st->d.shards))
                                  : dc->all_reduce(dc, st->grads + pieces[i][0], pieces[i][1]);
        if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: reducing the gradients: %s", dc->err);
    }
    return GPT2RT_OK;
}

/* wait for the device communicator (at most the timeout), then order the compute stream after it */
static gpt2rt_result gpt2rt__cu_dp_join(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const char *what) {
    gpt2rt__comm *dc = st->dcomm;
    gpt2rt_result r = dc->wait(dc);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: %s: %s", what, dc->err);
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaEventRecord(st->ev_comm, (cudaStream_t)dc->stream));
    GPT2RT__CU_CK(cudaStreamWaitEvent(st->stream, st->ev_comm, 0));
    return GPT2RT_OK;
}

/* Before a data-parallel update (gpt2rt__cu_update_t): the gradients summed (if the last
   backward did not: fewer micro-batches than grad_accum), the compute stream after the
   reductions, acc_loss_sum and acc_targets made global, *sumsq the squared norm of the
   summed gradient: each rank that of shard rank of it, the doubles added in rank order
   on the host, so every rank (sharded or not) has the same bits. */
static gpt2rt_result gpt2rt__cu_dp_before_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, double *sumsq) {
    gpt2rt__comm *dc = st->dcomm;
    cudaStream_t s = st->stream;
    if (!ctx->dp_reduced) {
        const int64_t all[1][2] = {{0, st->n_train}};
        GPT2RT__TRY(gpt2rt__cu_dp_reduce(ctx, st, all, 1, gpt2rt__sharded(&st->d)));
    }
    ctx->dp_reduced = 0;
    GPT2RT__TRY(gpt2rt__cu_dp_join(ctx, st, "reducing the gradients"));
    int64_t lo = gpt2rt__shard_lo(st->n_train, dc->size, dc->rank), hi = gpt2rt__shard_lo(st->n_train, dc->size, dc->rank + 1);
    double *d_norm = (double *)(void *)st->red; /* norm, sum of squares */
    GPT2RT__CU_CK(gpt2rt__cu_global_norm(d_norm, d_norm + 1, st->grads + lo, hi - lo, st->norm_parts, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_norm, d_norm, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    double v[3] = {ctx->acc_loss_sum, (double)ctx->acc_targets, st->h_norm[1]};
    GPT2RT__TRY(gpt2rt__dp_sum(ctx, v, 3));
    ctx->acc_loss_sum = v[0];
    ctx->acc_targets = (int64_t)v[1];
    *sumsq = v[2];
    return GPT2RT_OK;
}

/* ZeRO-1, after the AdamW of this rank's shard: every rank gets every weight. The fp32
   gradient buffer (free now) carries them: the shard's fp32 weights (the master, or the
   fp32 weights themselves) go to their gradients' places, the all-gather fills the
   others, every trained tensor's weights are written back (floatX: cast as the AdamW
   kernel casts), and the gradients are zeroed. */
template <typename X>
static gpt2rt_result gpt2rt__cu_dp_gather_weights(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    gpt2rt__comm *dc = st->dcomm;
    cudaStream_t s = st->stream;
    if (st->master) {
        if (st->opt_hi > st->opt_lo)
            GPT2RT__CU_CK(cudaMemcpyAsync(st->grads + st->opt_lo, st->master, (size_t)(st->opt_hi - st->opt_lo) * 4,
                                          cudaMemcpyDeviceToDevice, s));
    } else {
        for (int r = 0; r < st->n_runs; r++)
            for (int i = st->runs[r].i0; i < st->runs[r].i0 + st->runs[r].n; i++) {
                const gpt2rt__cu_adamw_tensor *a = &st->h_adamw[i];
                GPT2RT__CU_CK(cudaMemcpyAsync(st->grads + st->opt_lo + a->off,
                                              (const float *)st->w + st->runs[r].delta + st->opt_lo + a->off,
                                              (size_t)a->n * 4, cudaMemcpyDeviceToDevice, s));
            }
    }
    GPT2RT__CU_CK(cudaEventRecord(st->ev_grads, s));
    GPT2RT__CU_CK(cudaStreamWaitEvent((cudaStream_t)dc->stream, st->ev_grads, 0));
    gpt2rt_result r = dc->all_gather(dc, st->grads, gpt2rt__shard_padded(st->n_train, st->d.shards));
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: gathering the weights: %s", dc->err);
    GPT2RT__TRY(gpt2rt__cu_dp_join(ctx, st, "gathering the weights"));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t n = t->rows * t->cols;
        if (sizeof(X) == 4)
            GPT2RT__CU_CK(cudaMemcpyAsync((X *)st->w + t->off, st->grads + t->goff, (size_t)n * 4, cudaMemcpyDeviceToDevice, s));
        else
            GPT2RT__CU_CK(gpt2rt__cu_cast<X>((X *)st->w + t->off, st->grads + t->goff, n, s));
    }
    GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, s));
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_CUDA_COMM_CUH */
