/* processes/mpi.h - 10.4 Processes: MPI
   may call: what its includes name (common/, config/) */
#ifndef GPT2RT__SRC_PROCESSES_MPI_H
#define GPT2RT__SRC_PROCESSES_MPI_H
#include "../common/platform.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../config/config.h"
#include "../config/caps.h"

/* ==== 10.4 Processes: MPI ==== */
/* CPU ranks in separate processes reduce with MPI (GPT2RT_MPI builds, mpicc; Debian
   openmpi-bin libopenmpi-dev). MPI_Allreduce may sum in any order, different on each
   rank and from run to run; so every sum here is taken by rank 0 in rank order
   (x_0 + x_1 + ... + x_{size-1}, left to right, as the in-process communicator sums)
   and broadcast, which makes it bitwise the same on every rank and in every run, and
   equal to the in-process result. Each call is nonblocking underneath and waits at
   most timeout_s: a rank that stops or dies makes the others return an error. MPI is
   initialised here if the program has not done it (and finalised at exit). */
#ifdef GPT2RT_MPI
#define GPT2RT__MPI_CHUNK ((int64_t)1 << 18) /* floats rank 0 takes from each rank at once (1 MiB) */

typedef struct gpt2rt__mpi {
    MPI_Comm comm;    /* a duplicate of MPI_COMM_WORLD, errors returned, not fatal */
    double timeout_s;
    float *scratch;   /* rank 0: (size - 1, GPT2RT__MPI_CHUNK) the other ranks' chunks */
} gpt2rt__mpi;

static void gpt2rt__mpi_at_exit(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

/* MPI up, once per process; *rank and *size of MPI_COMM_WORLD */
static gpt2rt_result gpt2rt__mpi_init(int *rank, int *size, char *err, size_t cap) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "MPI_Init_thread failed (run under mpirun, or as one process)");
        atexit(gpt2rt__mpi_at_exit);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return GPT2RT_OK;
}

/* wait for req until the deadline: MPI_Wait cannot time out, so poll MPI_Test */
static gpt2rt_result gpt2rt__mpi_wait(MPI_Request *req, double deadline, const char *what, int rank, char *err,
                                      size_t cap) {
    int done = 0, sleep_us = 0;
    for (;;) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            GPT2RT__BAD(GPT2RT_ERR_IO, "MPI %s failed on rank %d (a peer died?)", what, rank);
        if (done) return GPT2RT_OK;
        if (gpt2rt__now() > deadline)
            GPT2RT__BAD(GPT2RT_ERR_IO, "MPI %s on rank %d did not finish within the timeout: another rank failed, "
                        "stopped, or is making a different call", what, rank);
        if (sleep_us > 50) (void)poll(NULL, 0, 1); /* spin briefly, then yield the core */
        sleep_us++;
    }
}

static gpt2rt_result gpt2rt__mpi_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    char *err = c->err;
    size_t cap = sizeof c->err;
    MPI_Request req[GPT2RT__RDV_MAX_PEERS];
    gpt2rt_result r;
    for (int64_t lo = 0; lo < n; lo += GPT2RT__MPI_CHUNK) {
        int k = (int)(n - lo < GPT2RT__MPI_CHUNK ? n - lo : GPT2RT__MPI_CHUNK);
        if (c->rank == 0) {
            for (int s = 1; s < c->size; s++)
                MPI_Irecv(m->scratch + (size_t)(s - 1) * GPT2RT__MPI_CHUNK, k, MPI_FLOAT, s, 7, m->comm, &req[s]);
            for (int s = 1; s < c->size; s++)
                if ((r = gpt2rt__mpi_wait(&req[s], deadline, "all_reduce (gather)", c->rank, err, cap)) != GPT2RT_OK)
                    return r;
            for (int s = 1; s < c->size; s++) { /* rank order: ((x0 + x1) + x2) + ... */
                const float *x = m->scratch + (size_t)(s - 1) * GPT2RT__MPI_CHUNK;
                for (int i = 0; i < k; i++) buf[lo + i] += x[i];
            }
        } else {
            MPI_Isend(buf + lo, k, MPI_FLOAT, 0, 7, m->comm, &req[0]);
            if ((r = gpt2rt__mpi_wait(&req[0], deadline, "all_reduce (send)", c->rank, err, cap)) != GPT2RT_OK) return r;
        }
        MPI_Ibcast(buf + lo, k, MPI_FLOAT, 0, m->comm, &req[0]);
        if ((r = gpt2rt__mpi_wait(&req[0], deadline, "all_reduce (broadcast)", c->rank, err, cap)) != GPT2RT_OK)
            return r;
    }
    return GPT2RT_OK;
}

/* the sum of every shard, so each rank's own shard is right (the rest too) */
static gpt2rt_result gpt2rt__mpi_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    return gpt2rt__mpi_all_reduce(c, buf, n);
}

static gpt2rt_result gpt2rt__mpi_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    for (size_t lo = 0; lo < bytes; lo += (size_t)1 << 30) {
        size_t k = bytes - lo < ((size_t)1 << 30) ? bytes - lo : (size_t)1 << 30;
        MPI_Request req;
        MPI_Ibcast((char *)buf + lo, (int)k, MPI_BYTE, root, m->comm, &req);
        gpt2rt_result r = gpt2rt__mpi_wait(&req, deadline, "broadcast", c->rank, c->err, sizeof c->err);
        if (r != GPT2RT_OK) return r;
    }
    return GPT2RT_OK;
}

/* shard r from rank r, one broadcast per shard (shards are contiguous) */
static gpt2rt_result gpt2rt__mpi_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    for (int r = 0; r < c->size; r++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, r), hi = gpt2rt__shard_lo(n, c->size, r + 1);
        gpt2rt_result res = gpt2rt__mpi_broadcast(c, buf + lo, (size_t)(hi - lo) * sizeof(float), r);
        if (res != GPT2RT_OK) return res;
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__mpi_barrier(gpt2rt__comm *c) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    MPI_Request req;
    MPI_Ibarrier(m->comm, &req);
    return gpt2rt__mpi_wait(&req, gpt2rt__now() + m->timeout_s, "barrier", c->rank, c->err, sizeof c->err);
}

static void gpt2rt__mpi_destroy(gpt2rt__comm *c) {
    if (!c || !c->impl) return;
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m->scratch);
    free(m);
    c->impl = NULL;
}

/* c := the MPI communicator of this process's config (rank, world_size checked
   against mpirun's) */
static gpt2rt_result gpt2rt__mpi_comm(const gpt2rt_config *cfg, gpt2rt__comm *c, char *err, size_t cap) {
    int rank = 0, size = 1;
    memset(c, 0, sizeof *c);
    gpt2rt_result r = gpt2rt__mpi_init(&rank, &size, err, cap);
    if (r != GPT2RT_OK) return r;
    if (rank != cfg->rank || size != cfg->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "MPI says this process is rank %d of %d, the config (or RANK / "
                    "WORLD_SIZE) says rank %d of %d: launch with mpirun -np %d and leave them 0, or make them agree",
                    rank, size, cfg->rank, cfg->world_size, cfg->world_size);
    if ((r = gpt2rt__cap_processes(size, "MPI world of", err, cap)) != GPT2RT_OK) return r;
    gpt2rt__mpi *m = (gpt2rt__mpi *)calloc(1, sizeof *m);
    if (!m) GPT2RT__BAD(GPT2RT_ERR_OUT_OF_MEMORY, "MPI communicator: %zu bytes", sizeof *m);
    m->comm = MPI_COMM_NULL;
    m->timeout_s = cfg->timeout_s;
    if (rank == 0 && size > 1) {
        m->scratch = (float *)malloc((size_t)(size - 1) * GPT2RT__MPI_CHUNK * sizeof(float));
        if (!m->scratch) {
            free(m);
            GPT2RT__BAD(GPT2RT_ERR_OUT_OF_MEMORY, "MPI communicator: %lld MiB of scratch on rank 0",
                        (long long)(size - 1) * GPT2RT__MPI_CHUNK * 4 / 1048576);
        }
    }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
        free(m->scratch); free(m);
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "MPI_Comm_dup failed on rank %d", rank);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    c->rank = rank; c->size = size; c->impl = m;
    c->all_reduce = gpt2rt__mpi_all_reduce;
    c->reduce_scatter = gpt2rt__mpi_reduce_scatter;
    c->all_gather = gpt2rt__mpi_all_gather;
    c->broadcast = gpt2rt__mpi_broadcast;
    c->barrier = gpt2rt__mpi_barrier;
    c->destroy = gpt2rt__mpi_destroy;
    return GPT2RT_OK;
}

/* the rendezvous through MPI: rank 0's id to every rank */
static gpt2rt_result gpt2rt__mpi_bcast_id(const gpt2rt_config *cfg, unsigned char *id, char *err, size_t cap) {
    int rank = 0, size = 1;
    gpt2rt_result r = gpt2rt__mpi_init(&rank, &size, err, cap);
    if (r != GPT2RT_OK) return r;
    if (rank != cfg->rank || size != cfg->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "MPI says this process is rank %d of %d, the config says rank %d "
                    "of %d", rank, size, cfg->rank, cfg->world_size);
    MPI_Request req;
    MPI_Ibcast(id, GPT2RT__RDV_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    return gpt2rt__mpi_wait(&req, gpt2rt__now() + cfg->timeout_s, "rendezvous broadcast", rank, err, cap);
}
#endif /* GPT2RT_MPI */

#endif /* GPT2RT__SRC_PROCESSES_MPI_H */
