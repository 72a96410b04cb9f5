/* config/config.h - 2. Config
   may call: common/threads.h */
#ifndef GPT2RT__SRC_CONFIG_CONFIG_H
#define GPT2RT__SRC_CONFIG_CONFIG_H
#include "../common/threads.h"

/* ==== 2. Config ==== */
/* Zero means default. gpt2rt__cfg_resolve fills every default (gpt2rt__cfg_default_*),
   then checks every field (gpt2rt__cfg_check_*), subsystem by subsystem in the order
   of the config struct; the first failed check names the field, its value and the
   valid range in err. Defaults never fail: they may see unchecked values and only
   compute from them what the checks will then refuse. */

static void gpt2rt__cfg_default_model(gpt2rt_config *c) {
    if (!c->n_layer) c->n_layer = 12;
    if (!c->n_head) c->n_head = 12;
    if (!c->n_embd) c->n_embd = 768;
    if (!c->vocab_size) c->vocab_size = 50257;
    if (!c->max_seq_len) c->max_seq_len = 1024;
    if (!c->padded_vocab) c->padded_vocab = (int)(((int64_t)c->vocab_size + 127) / 128 * 128 & INT32_MAX);
    if (c->input == GPT2RT_INPUT_PATCHES) { /* GPT4TS's ETT setting */
        if (!c->patch_len) c->patch_len = 16;
        if (!c->patch_stride) c->patch_stride = 8;
        if (!c->n_channels) c->n_channels = 1;
    }
    if ((c->head == GPT2RT_HEAD_REGRESSION || c->head == GPT2RT_HEAD_PATCH_DECODE) && !c->horizon) c->horizon = 96;
}

static void gpt2rt__cfg_default_batch(gpt2rt_config *c) {
    if (!c->batch_size) c->batch_size = 4;
    if (!c->seq_len) c->seq_len = c->input == GPT2RT_INPUT_PATCHES ? 336 : c->max_seq_len < 64 ? c->max_seq_len : 64;
    if (!c->grad_accum) c->grad_accum = 1;
    if (c->kv_batch && !c->kv_len) c->kv_len = c->max_seq_len;
}

/* AUTO's choice: CUDA when the implementation was compiled with it and a device is
   present (the end of section 8) */
static int gpt2rt__cuda_present(void);

/* backend, precision and memory */
static void gpt2rt__cfg_default_precision(gpt2rt_config *c) {
    if (c->backend == GPT2RT_BACKEND_AUTO) c->backend = gpt2rt__cuda_present() ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_CPU;
    if (c->precision == GPT2RT_PRECISION_DEFAULT) c->precision = GPT2RT_PRECISION_FP32;
    if (c->inference_weights == GPT2RT_PRECISION_DEFAULT) c->inference_weights = GPT2RT_PRECISION_FP32;
    if (c->precision == GPT2RT_PRECISION_FP16 && c->loss_scale == 0.0f) c->loss_scale = 65536.0f;
    if (c->recompute == GPT2RT_RECOMPUTE_FULL) {
        if (!c->checkpoint_every) c->checkpoint_every = 1;
        if (c->checkpoint_every == GPT2RT_CHECKPOINT_SQRT)
            c->checkpoint_every = c->n_layer > 1 ? (int)floor(sqrt((double)c->n_layer) + 0.5) : 1;
    }
}

/* the checks report through err, cap (config, capabilities, checks; the processes' rendezvous and MPI) */
#define GPT2RT__BAD(r, ...) do { snprintf(err, cap, __VA_ARGS__); return r; } while (0)

/* the opaque id a multi-process run's rendezvous carries from rank 0 to every rank
   (10.3): NCCL's ncclUniqueId is 128 bytes */
#define GPT2RT__RDV_ID_BYTES 128

/* The rank variables a launcher sets, as strings (NULL: unset): torchrun's, then
   mpirun's (Open MPI). A struct, so that every inconsistency is testable without
   touching the process environment. */
typedef struct gpt2rt__proc_env {
    const char *world_size, *rank, *local_rank, *local_world_size; /* WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE */
    const char *master_addr, *master_port;                         /* MASTER_ADDR, MASTER_PORT */
    const char *ompi_size, *ompi_rank, *ompi_local_rank, *ompi_local_size; /* OMPI_COMM_WORLD_SIZE, _RANK,
                                                                              _LOCAL_RANK, _LOCAL_SIZE */
} gpt2rt__proc_env;

static gpt2rt__proc_env gpt2rt__proc_env_get(void) {
    gpt2rt__proc_env e;
    e.world_size = getenv("WORLD_SIZE"); e.rank = getenv("RANK"); e.local_rank = getenv("LOCAL_RANK");
    e.local_world_size = getenv("LOCAL_WORLD_SIZE");
    e.master_addr = getenv("MASTER_ADDR"); e.master_port = getenv("MASTER_PORT");
    e.ompi_size = getenv("OMPI_COMM_WORLD_SIZE"); e.ompi_rank = getenv("OMPI_COMM_WORLD_RANK");
    e.ompi_local_rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK"); e.ompi_local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return e;
}

/* an environment variable that must be a whole decimal integer in [lo, hi] */
static int gpt2rt__env_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* What the launcher says this process is: *world, *rank, *local (1, 0, 0 without a
   launcher), *mpi = 1 when mpirun's variables said it. Missing or inconsistent
   variables are an error that says what torchrun would have set. */
static gpt2rt_result gpt2rt__proc_from_env(const gpt2rt__proc_env *e, int *world, int *rank, int *local, int *mpi,
                                           char *err, size_t cap) {
    const char *fix = "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in every process it "
                      "starts (torchrun --nproc_per_node=N prog); another launcher must set all of them, or the "
                      "program sets world_size, rank and local_rank in the config";
    *world = 1; *rank = 0; *local = 0; *mpi = 0;
    if (e->rank || e->world_size || e->local_rank) {
        if (!e->world_size || !e->rank || !e->local_rank)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rank variables incomplete: RANK %s%s%s, WORLD_SIZE %s%s%s, "
                        "LOCAL_RANK %s%s%s (%s)", e->rank ? "= " : "is not set", e->rank ? e->rank : "", "",
                        e->world_size ? "= " : "is not set", e->world_size ? e->world_size : "", "",
                        e->local_rank ? "= " : "is not set", e->local_rank ? e->local_rank : "", "", fix);
        if (!gpt2rt__env_int(e->world_size, 1, 1 << 20, world))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "WORLD_SIZE = '%s' is not an integer in [1, 2^20] (%s)",
                        e->world_size, fix);
        if (!gpt2rt__env_int(e->rank, 0, *world - 1, rank))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "RANK = '%s' must be an integer in [0, WORLD_SIZE - 1 = %d] "
                        "(ranks count from 0; %s)", e->rank, *world - 1, fix);
        if (!gpt2rt__env_int(e->local_rank, 0, *rank, local))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "LOCAL_RANK = '%s' must be an integer in [0, RANK = %d] (the "
                        "process's index on its node; %s)", e->local_rank, *rank, fix);
        if (e->ompi_size && e->ompi_rank && (strcmp(e->ompi_size, e->world_size) || strcmp(e->ompi_rank, e->rank)))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "torchrun's RANK = %s of WORLD_SIZE = %s and mpirun's "
                        "OMPI_COMM_WORLD_RANK = %s of OMPI_COMM_WORLD_SIZE = %s disagree: launch with one of them",
                        e->rank, e->world_size, e->ompi_rank, e->ompi_size);
        return GPT2RT_OK;
    }
    if (e->ompi_size || e->ompi_rank) {
        if (!gpt2rt__env_int(e->ompi_size, 1, 1 << 20, world) || !gpt2rt__env_int(e->ompi_rank, 0, *world - 1, rank))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "mpirun's OMPI_COMM_WORLD_RANK = %s, OMPI_COMM_WORLD_SIZE = %s "
                        "are not a rank in [0, size - 1]", e->ompi_rank ? e->ompi_rank : "(not set)",
                        e->ompi_size ? e->ompi_size : "(not set)");
        if (e->ompi_local_rank && !gpt2rt__env_int(e->ompi_local_rank, 0, *rank, local))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "OMPI_COMM_WORLD_LOCAL_RANK = '%s' must lie in [0, rank = %d]",
                        e->ompi_local_rank, *rank);
        *mpi = 1;
    }
    return GPT2RT_OK;
}

static void gpt2rt__cfg_default_parallel(gpt2rt_config *c) {
    if (!c->n_devices) c->n_devices = 1;
    if (!c->world_size) { /* from the launcher; a failure leaves 0, which the check explains */
        char err[8];
        size_t cap = sizeof err;
        int w, r, l, mpi;
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        if (gpt2rt__proc_from_env(&e, &w, &r, &l, &mpi, err, cap) == GPT2RT_OK) {
            c->world_size = w; c->rank = r; c->local_rank = l;
            if (w > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_DEFAULT) {
#ifdef GPT2RT_MPI
                if (mpi) c->rendezvous = GPT2RT_RENDEZVOUS_MPI;
#endif
                if (c->rendezvous == GPT2RT_RENDEZVOUS_DEFAULT && e.master_addr) c->rendezvous = GPT2RT_RENDEZVOUS_ENV;
            }
        }
    }
    if (c->world_size > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_ENV) {
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        if (!c->master_addr[0] && e.master_addr && strlen(e.master_addr) < sizeof c->master_addr)
            memcpy(c->master_addr, e.master_addr, strlen(e.master_addr) + 1);
        if (!c->master_port && e.master_port) (void)gpt2rt__env_int(e.master_port, 1, 65535, &c->master_port);
    }
    if (c->world_size > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_TCP) {
        if (!c->master_addr[0]) memcpy(c->master_addr, "127.0.0.1", 10);
        if (!c->master_port) c->master_port = 29500;
    }
    if (c->timeout_s == 0.0f) c->timeout_s = 300.0f;
    int all_zero = 1;
    for (int i = 0; i < GPT2RT_MAX_DEVICES; i++) all_zero &= c->device_ids[i] == 0;
    if (all_zero && !c->allow_shared_device && c->n_devices >= 1 && c->n_devices <= GPT2RT_MAX_DEVICES)
        /* torchrun's habit: process LOCAL_RANK uses cuda:LOCAL_RANK */
        for (int i = 0; i < c->n_devices && i < GPT2RT_MAX_DEVICES; i++)
            c->device_ids[i] = (c->local_rank > 0 && c->local_rank < 4096 ? c->local_rank : 0) * c->n_devices + i;
}

/* optimizer and runtime */
static void gpt2rt__cfg_default_optimizer(gpt2rt_config *c) {
    if (c->lr == 0.0f) c->lr = 3e-4f;
    if (c->beta1 == 0.0f) c->beta1 = 0.9f;
    if (c->beta2 == 0.0f) c->beta2 = 0.999f;
    if (c->eps == 0.0f) c->eps = 1e-8f;
    if (c->grad_clip == 0.0f) c->grad_clip = 1.0f;
    /* the thread count follows OpenMP (OMP_NUM_THREADS), clamped to the range a user may set */
    if (!c->n_threads) {
        int t = gpt2rt__default_threads();
        c->n_threads = t < 1 ? 1 : t > 1024 ? 1024 : t;
    }
    if (!c->seed) c->seed = 1337;
}

#endif /* GPT2RT__SRC_CONFIG_CONFIG_H */
