/* common/comm.h - 1.4 Communicators
   may call: common/types.h, common/errors.h */
#ifndef GPT2RT__SRC_COMMON_COMM_H
#define GPT2RT__SRC_COMMON_COMM_H
#include "types.h"
#include "errors.h"

/* ==== 1.4 Communicators ==== */
/* gpt2rt__comm (1.2) implementations: "self" (one rank: every collective is the
   identity), and more below as the parallel modes land. */

/* where shard r of n floats split over size ranks starts: equal shares rounded up to
   16 floats, so every shard starts 64-byte aligned (the last may be shorter or empty) */
static int64_t gpt2rt__shard_lo(int64_t n, int size, int r) {
    int64_t per = gpt2rt__pad16((n + size - 1) / size), lo = per * r;
    return lo < n ? lo : n;
}

/* ZeRO-1's gradient length: n floats rounded up to size shares of gpt2rt__shard_lo's
   padded share, so every shard is equal and every communicator (NCCL's ReduceScatter and
   AllGather take one count a rank) reduce-scatters. The padding floats are zero, summed
   as zeros and never updated. size 1: n, nothing to shard. */
static int64_t gpt2rt__shard_padded(int64_t n, int size) {
    return size > 1 ? gpt2rt__pad16((n + size - 1) / size) * size : n;
}

static gpt2rt_result gpt2rt__comm_self_floats(gpt2rt__comm *c, float *buf, int64_t n) {
    (void)c; (void)buf; (void)n;
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__comm_self_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    (void)buf; (void)bytes;
    if (root != 0) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = 1)", root);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__comm_self_barrier(gpt2rt__comm *c) { (void)c; return GPT2RT_OK; }
static void gpt2rt__comm_self_destroy(gpt2rt__comm *c) { (void)c; }

/* a one-rank communicator in caller-owned storage (nothing to free) */
static void gpt2rt__comm_self_init(gpt2rt__comm *c) {
    memset(c, 0, sizeof *c);
    c->rank = 0;
    c->size = 1;
    c->all_reduce = gpt2rt__comm_self_floats;
    c->reduce_scatter = gpt2rt__comm_self_floats;
    c->all_gather = gpt2rt__comm_self_floats;
    c->broadcast = gpt2rt__comm_self_broadcast;
    c->barrier = gpt2rt__comm_self_barrier;
    c->destroy = gpt2rt__comm_self_destroy;
}

/* "threads": the ranks are threads of this process (CPU data parallel). Each call
   publishes the rank's buffer, waits for every rank, works on shared memory, and waits
   again before returning, so no rank changes a buffer another still reads. Rank r sums
   shard r over the ranks in rank order: a fixed order, bitwise the same every run.
   A rank that fails marks the group failed: the others' waits return an error instead
   of hanging, and so does a wait longer than GPT2RT__COMM_TIMEOUT seconds. */
#ifndef _WIN32
#include <pthread.h>
#define GPT2RT__COMM_THREADS 1
#define GPT2RT__COMM_TIMEOUT 600
typedef struct gpt2rt__comm_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived, failed; /* failed: 1 + the rank that failed first */
    unsigned gen;              /* barrier generation */
    void *bufs[GPT2RT_MAX_DEVICES];
    gpt2rt__comm comms[GPT2RT_MAX_DEVICES];
    /* rank 0's reduce-scatters, and those of them whose shards were unequal (n not size
       equal shares): ZeRO-1 pads its gradient so that the second stays 0 (tests read them;
       all-reduces are not counted) */
    int64_t n_scatter, n_scatter_unequal;
} gpt2rt__comm_group;

static gpt2rt_result gpt2rt__comm_threads_wait(gpt2rt__comm *c) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = GPT2RT_OK;
    struct timespec until;
    timespec_get(&until, TIME_UTC);
    until.tv_sec += GPT2RT__COMM_TIMEOUT;
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->gen;
    if (!g->failed && ++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    while (!g->failed && g->gen == gen)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) != 0 && g->gen == gen && !g->failed) {
            g->failed = 1 + c->rank;
            pthread_cond_broadcast(&g->cv);
            snprintf(c->err, sizeof c->err, "rank %d of %d waited %d s for the other ranks at a collective",
                     c->rank, g->size, GPT2RT__COMM_TIMEOUT);
            pthread_mutex_unlock(&g->mu);
            return GPT2RT_ERR_STATE;
        }
    if (g->failed && g->gen == gen) {
        snprintf(c->err, sizeof c->err, "rank %d of %d stopped: rank %d failed", c->rank, g->size, g->failed - 1);
        r = GPT2RT_ERR_STATE;
    }
    pthread_mutex_unlock(&g->mu);
    return r;
}

/* rank c->rank failed outside a collective: release the ranks waiting for it */
static void gpt2rt__comm_threads_fail(gpt2rt__comm *c) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    pthread_mutex_lock(&g->mu);
    if (!g->failed) g->failed = 1 + c->rank;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* publish buf, then wait for every rank */
static gpt2rt_result gpt2rt__comm_threads_post(gpt2rt__comm *c, void *buf) {
    ((gpt2rt__comm_group *)c->impl)->bufs[c->rank] = buf;
    return gpt2rt__comm_threads_wait(c);
}

/* shard c->rank of buf := the sum of every rank's, in rank order */
static gpt2rt_result gpt2rt__comm_threads_sum_own(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    int64_t lo = gpt2rt__shard_lo(n, c->size, c->rank), hi = gpt2rt__shard_lo(n, c->size, c->rank + 1);
    for (int64_t i = lo; i < hi; i++) {
        float s = ((const float *)g->bufs[0])[i];
        for (int k = 1; k < c->size; k++) s += ((const float *)g->bufs[k])[i];
        buf[i] = s;
    }
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    if (c->rank == 0) { /* rank 0 alone writes them; tests read them after the ranks joined */
        g->n_scatter++;
        g->n_scatter_unequal += gpt2rt__shard_padded(n, c->size) != n;
    }
    return gpt2rt__comm_threads_sum_own(c, buf, n);
}

static gpt2rt_result gpt2rt__comm_threads_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    for (int k = 0; k < c->size; k++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, k), hi = gpt2rt__shard_lo(n, c->size, k + 1);
        if (k != c->rank && hi > lo) memcpy(buf + lo, (const float *)g->bufs[k] + lo, (size_t)(hi - lo) * sizeof(float));
    }
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__comm_threads_sum_own(c, buf, n);
    return r != GPT2RT_OK ? r : gpt2rt__comm_threads_all_gather(c, buf, n);
}

static gpt2rt_result gpt2rt__comm_threads_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    if (root < 0 || root >= c->size) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = %d)", root, c->size);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    if (c->rank != root && bytes) memcpy(buf, g->bufs[root], bytes);
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_barrier(gpt2rt__comm *c) { return gpt2rt__comm_threads_wait(c); }

/* the group is freed once, by its owner (gpt2rt__comm_group_free), not per rank */
static void gpt2rt__comm_threads_destroy(gpt2rt__comm *c) { (void)c; }

/* after every rank thread has returned: a failed group can be used again */
static void gpt2rt__comm_group_reset(gpt2rt__comm_group *g) {
    g->failed = 0;
    g->arrived = 0;
}

/* a group of size ranks; g->comms[r] is rank r's communicator. 0 on success. */
static int gpt2rt__comm_group_init(gpt2rt__comm_group *g, int size) {
    memset(g, 0, sizeof *g);
    if (pthread_mutex_init(&g->mu, NULL) != 0) return -1;
    if (pthread_cond_init(&g->cv, NULL) != 0) { pthread_mutex_destroy(&g->mu); return -1; }
    g->size = size;
    for (int r = 0; r < size; r++) {
        gpt2rt__comm *c = &g->comms[r];
        c->rank = r;
        c->size = size;
        c->impl = g;
        c->all_reduce = gpt2rt__comm_threads_all_reduce;
        c->reduce_scatter = gpt2rt__comm_threads_reduce_scatter;
        c->all_gather = gpt2rt__comm_threads_all_gather;
        c->broadcast = gpt2rt__comm_threads_broadcast;
        c->barrier = gpt2rt__comm_threads_barrier;
        c->destroy = gpt2rt__comm_threads_destroy;
    }
    return 0;
}

static void gpt2rt__comm_group_free(gpt2rt__comm_group *g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}
#endif

#endif /* GPT2RT__SRC_COMMON_COMM_H */
