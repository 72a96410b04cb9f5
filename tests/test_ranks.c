/* tests/test_ranks.c - processes: the rank variables, the device checks, the
   rendezvous (TCP, file, MPI) and the MPI communicator. tests/run.sh starts it as
   several processes; each prints "RESULT passed failed".

   test_ranks unit                      every refusal that needs no second process
   test_ranks freeport                  prints a TCP port nobody listens on now
   test_ranks rdv TIMEOUT EXPECT        a rendezvous with the ranks from the environment
                                        (torchrun's variables; ENV, or FILE when
                                        GPT2RT_TEST_RDV_FILE names a file); EXPECT is
                                        "ok" or a phrase the error must contain
   test_ranks mpi                       under mpirun: the MPI communicator's sums are
                                        rank-ordered, bitwise the same on every rank */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv: the tests play launcher */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

static const char *ENV_NAMES[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                  "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE"};

static void env_clear(void) {
    for (size_t i = 0; i < sizeof ENV_NAMES / sizeof ENV_NAMES[0]; i++) unsetenv(ENV_NAMES[i]);
}

/* the id rank 0 sends: bytes that depend on the position, so a shifted copy fails */
static void id_pattern(unsigned char *id) {
    for (int i = 0; i < GPT2RT__RDV_ID_BYTES; i++) id[i] = (unsigned char)(i * 37 + 11);
}

/* a small config that plans fast: data parallel over the processes */
static gpt2rt_config tiny(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 32; c.vocab_size = 64; c.max_seq_len = 16;
    c.batch_size = 2; c.seq_len = 8; c.backend = GPT2RT_BACKEND_CPU; c.n_threads = 1;
    c.parallel = GPT2RT_PARALLEL_DATA;
    return c;
}

/* the launcher's variables as a struct: from_env's verdict and message */
static void env_case(const char *what, gpt2rt__proc_env e, int want_ok, int want_world, int want_rank,
                     const char *phrase) {
    char err[1024] = "";
    int w = -1, r = -1, l = -1, mpi = -1;
    gpt2rt_result res = gpt2rt__proc_from_env(&e, &w, &r, &l, &mpi, err, sizeof err);
    if (want_ok)
        CHECK(res == GPT2RT_OK && w == want_world && r == want_rank, "%s: got %s world %d rank %d: %s", what,
              gpt2rt_result_string(res), w, r, err);
    else
        CHECK(res == GPT2RT_ERR_INVALID_ARGUMENT && strstr(err, phrase), "%s: want an error naming '%s', got %s: %s",
              what, phrase, gpt2rt_result_string(res), err);
    if (!want_ok) printf("    %s: %s\n", what, err);
}

static void unit_env(void) {
    gpt2rt__proc_env none, e;
    memset(&none, 0, sizeof none);
    env_case("no launcher", none, 1, 1, 0, NULL);
    e = none; e.world_size = "4"; e.rank = "3"; e.local_rank = "1";
    env_case("torchrun, 4 ranks", e, 1, 4, 3, NULL);
    e = none; e.rank = "1";
    env_case("RANK without WORLD_SIZE", e, 0, 0, 0, "WORLD_SIZE is not set");
    e = none; e.rank = "1"; e.world_size = "2";
    env_case("LOCAL_RANK missing", e, 0, 0, 0, "LOCAL_RANK is not set");
    e = none; e.rank = "2"; e.world_size = "2"; e.local_rank = "0";
    env_case("RANK >= WORLD_SIZE", e, 0, 0, 0, "RANK = '2' must be an integer in [0, WORLD_SIZE - 1 = 1]");
    e = none; e.rank = "0"; e.world_size = "two"; e.local_rank = "0";
    env_case("WORLD_SIZE not a number", e, 0, 0, 0, "WORLD_SIZE = 'two' is not an integer");
    e = none; e.rank = "1"; e.world_size = "2"; e.local_rank = "3";
    env_case("LOCAL_RANK > RANK", e, 0, 0, 0, "LOCAL_RANK = '3' must be an integer in [0, RANK = 1]");
    e = none; e.ompi_size = "3"; e.ompi_rank = "2"; e.ompi_local_rank = "2";
    env_case("mpirun, 3 ranks", e, 1, 3, 2, NULL);
    e = none; e.ompi_size = "2"; e.ompi_rank = "5";
    env_case("mpirun rank out of range", e, 0, 0, 0, "OMPI_COMM_WORLD_RANK = 5");
    e = none; e.world_size = "2"; e.rank = "0"; e.local_rank = "0"; e.ompi_size = "2"; e.ompi_rank = "1";
    env_case("torchrun and mpirun disagree", e, 0, 0, 0, "disagree");
    /* the message says what torchrun would have set */
    e = none; e.world_size = "2";
    env_case("WORLD_SIZE alone", e, 0, 0, 0, "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT");
}

/* the config path: the environment resolved by gpt2rt_plan, and its refusals */
static void plan_case(const char *what, gpt2rt_config c, gpt2rt_result want, const char *phrase) {
    gpt2rt_memory_plan p;
    gpt2rt_result r = gpt2rt_plan(&c, &p);
    CHECK(r == want && (!phrase || strstr(p.error, phrase)), "%s: want %s naming '%s', got %s: %s", what,
          gpt2rt_result_string(want), phrase ? phrase : "", gpt2rt_result_string(r), p.error);
    if (want != GPT2RT_OK) printf("    %s: %s\n", what, p.error);
}

static void unit_config(void) {
    env_clear();
    gpt2rt_config c = tiny();
    gpt2rt_memory_plan p;
    plan_case("DATA, one process, one device", c, GPT2RT_ERR_INVALID_ARGUMENT, "world_size x n_devices >= 2");
    setenv("WORLD_SIZE", "2", 1); setenv("RANK", "1", 1); setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1); setenv("MASTER_PORT", "29555", 1);
    /* DATA over two processes of one device each is valid; the plan shows the global batch */
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && p.config.world_size == 2 && p.config.rank == 1 &&
          p.config.local_rank == 1 && p.config.rendezvous == GPT2RT_RENDEZVOUS_ENV && p.config.master_port == 29555 &&
          !strcmp(p.config.master_addr, "127.0.0.1") && p.config.device_ids[0] == 1,
          "torchrun's variables resolved: %s world %d rank %d port %d device %d", p.error, p.config.world_size,
          p.config.rank, p.config.master_port, p.config.device_ids[0]);
    CHECK(p.tokens_per_step == 2LL * 2 * 8, "tokens a step over 2 processes: %lld, want 32", (long long)p.tokens_per_step);
#ifndef GPT2RT_MPI
    { /* CPU ranks in separate processes need MPI: without it, creation says what to install */
        gpt2rt_ctx *ctx;
        gpt2rt_result r = gpt2rt_create(&ctx, &c);
        CHECK(r == GPT2RT_ERR_UNAVAILABLE && strstr(gpt2rt_last_error(ctx), "openmpi-bin libopenmpi-dev"),
              "2 CPU processes without MPI: %s: %s", gpt2rt_result_string(r), gpt2rt_last_error(ctx));
        printf("    2 CPU processes without MPI: %s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
    }
#endif
    gpt2rt_config none = c;
    none.parallel = GPT2RT_PARALLEL_NONE;
    plan_case("launched as 2 ranks, parallel NONE", none, GPT2RT_ERR_INVALID_ARGUMENT, "set parallel = DATA");
    gpt2rt_config split = c;
    split.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; split.n_devices = 2;
    plan_case("layer split over processes", split, GPT2RT_ERR_NOT_IMPLEMENTED, "parallel = DATA");
    unsetenv("MASTER_ADDR");
    plan_case("ENV without MASTER_ADDR", c, GPT2RT_ERR_INVALID_ARGUMENT, "world_size = 2 processes need a rendezvous");
    gpt2rt_config envr = c;
    envr.rendezvous = GPT2RT_RENDEZVOUS_ENV;
    plan_case("rendezvous ENV without MASTER_ADDR", envr, GPT2RT_ERR_INVALID_ARGUMENT, "MASTER_ADDR is not set");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "99999", 1);
    plan_case("MASTER_PORT out of range", c, GPT2RT_ERR_INVALID_ARGUMENT, "MASTER_PORT = '99999'");
    gpt2rt_config file = c;
    file.rendezvous = GPT2RT_RENDEZVOUS_FILE;
    plan_case("FILE without a path", file, GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file");
#ifndef GPT2RT_MPI
    gpt2rt_config mpi = c;
    mpi.rendezvous = GPT2RT_RENDEZVOUS_MPI;
    plan_case("MPI in a build without it", mpi, GPT2RT_ERR_UNAVAILABLE, "openmpi-bin libopenmpi-dev");
#endif
    unsetenv("LOCAL_RANK");
    plan_case("LOCAL_RANK missing (through gpt2rt_plan)", c, GPT2RT_ERR_INVALID_ARGUMENT, "LOCAL_RANK is not set");
    env_clear();
    /* the config's own fields, no launcher */
    gpt2rt_config own = c;
    own.world_size = 3; own.rank = 3;
    plan_case("rank = world_size", own, GPT2RT_ERR_INVALID_ARGUMENT, "rank = 3 must lie in [0, world_size - 1 = 2]");
    own.rank = 2; own.rendezvous = GPT2RT_RENDEZVOUS_TCP;
    CHECK(gpt2rt_plan(&own, &p) == GPT2RT_OK && p.config.master_port == 29500 &&
          !strcmp(p.config.master_addr, "127.0.0.1"), "TCP defaults 127.0.0.1:29500: %s", p.error);
    own.timeout_s = -1.0f;
    plan_case("negative timeout", own, GPT2RT_ERR_INVALID_ARGUMENT, "timeout_s = -1");
}

static void dev_case(const char *what, int visible, const char *cvd, int local_world, gpt2rt_config c,
                     gpt2rt_result want, const char *phrase) {
    char err[1024] = "";
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&c, &p) != GPT2RT_OK) { CHECK(0, "%s: the config does not plan: %s", what, p.error); return; }
    gpt2rt_result r = gpt2rt__dev_check(visible, cvd, local_world, &p.config, err, sizeof err);
    CHECK(r == want && (!phrase || strstr(err, phrase)), "%s: want %s naming '%s', got %s: %s", what,
          gpt2rt_result_string(want), phrase ? phrase : "", gpt2rt_result_string(r), err);
    if (want != GPT2RT_OK) printf("    %s: %s\n", what, err);
}

/* the device checks are a pure function of (device count, config): no GPU needed */
static void unit_devices(void) {
    env_clear();
    gpt2rt_config c = tiny();
    c.parallel = GPT2RT_PARALLEL_NONE; c.backend = GPT2RT_BACKEND_CUDA;
    dev_case("one device of one", 1, NULL, 0, c, GPT2RT_OK, NULL);
    dev_case("no device", 0, "", 0, c, GPT2RT_ERR_UNAVAILABLE, "CUDA_VISIBLE_DEVICES = ''");
    gpt2rt_config two = c;
    two.parallel = GPT2RT_PARALLEL_DATA; two.n_devices = 2;
    dev_case("two devices of two", 2, NULL, 0, two, GPT2RT_OK, NULL);
    dev_case("device 1 of one visible", 1, "3", 0, two, GPT2RT_ERR_INVALID_ARGUMENT,
             "device_ids[1] = 1, but 1 CUDA device(s) are visible, ordinals 0..0 (CUDA_VISIBLE_DEVICES = '3'");
    gpt2rt_config same = two;
    same.device_ids[0] = 1; same.device_ids[1] = 1;
    dev_case("the same device twice", 2, NULL, 0, same, GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[0] = device_ids[1] = 1");
    same.allow_shared_device = 1;
    dev_case("the same device twice, test mode", 2, NULL, 0, same, GPT2RT_OK, NULL);
    gpt2rt_config zero = two; /* all zero with the test mode: both devices are GPU 0 */
    zero.allow_shared_device = 1;
    dev_case("device_ids 0 and 0, test mode, one GPU", 1, NULL, 0, zero, GPT2RT_OK, NULL);
    /* four processes on a node with two GPUs: torchrun --nproc_per_node=4 on 2 GPUs */
    gpt2rt_config proc = c;
    proc.parallel = GPT2RT_PARALLEL_DATA; proc.world_size = 4; proc.rank = 3; proc.local_rank = 3;
    proc.rendezvous = GPT2RT_RENDEZVOUS_TCP;
    dev_case("world size larger than the GPUs", 2, NULL, 4, proc, GPT2RT_ERR_INVALID_ARGUMENT,
             "torchrun --nproc_per_node=2");
    dev_case("local rank 3 on 2 GPUs (node size unknown)", 2, NULL, 0, proc, GPT2RT_ERR_INVALID_ARGUMENT,
             "device_ids[0] = 3 (from local_rank x n_devices + i)");
}

/* FILE: a file left by an earlier run is refused by name, never read as new */
static void unit_file_stale(void) {
    gpt2rt_config c = tiny();
    c.world_size = 2; c.rank = 0; c.rendezvous = GPT2RT_RENDEZVOUS_FILE; c.timeout_s = 2.0f;
    snprintf(c.rendezvous_file, sizeof c.rendezvous_file, "build/ranks_stale.rdv");
    FILE *f = fopen(c.rendezvous_file, "wb");
    if (f) { fputs("old", f); fclose(f); }
    gpt2rt_memory_plan p;
    unsigned char id[GPT2RT__RDV_ID_BYTES];
    id_pattern(id);
    char err[1024] = "";
    double t0 = harness_now();
    gpt2rt_result r = gpt2rt_plan(&c, &p) == GPT2RT_OK ? gpt2rt__rdv_exchange(&p.config, id, err, sizeof err)
                                                       : GPT2RT_ERR_INVALID_ARGUMENT;
    CHECK(r == GPT2RT_ERR_IO && strstr(err, "exists already") && harness_now() - t0 < 1.0,
          "a stale rendezvous file: %s: %s", gpt2rt_result_string(r), err);
    printf("    stale rendezvous file: %s\n", err);
    remove(c.rendezvous_file);
}

/* the step-time model computes the formulas the manual states, term by term */
static void unit_step_time(void) {
    env_clear();
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 8; c.seq_len = 1024; c.grad_accum = 4; c.backend = GPT2RT_BACKEND_CUDA;
    c.parallel = GPT2RT_PARALLEL_DATA; c.n_devices = 2;
    gpt2rt_hardware hw = {35.6e12, 35.6e12, 71e12, 936e9, 24e9, 0}; /* half_tokens 0: the default knee */
    gpt2rt_step_time a, sh, fast;
    gpt2rt_memory_plan p;
    char err[512] = "";
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK, "plan: %s", p.error);
    double G = (double)p.bytes[0][GPT2RT_MEM_GRADS], W = (double)p.bytes[0][GPT2RT_MEM_WEIGHTS];
    CHECK(gpt2rt_plan_step_time(&c, &hw, 0, &a, err, sizeof err) == GPT2RT_OK, "step time: %s", err);
    CHECK(a.comm_bytes == G && fabs(a.comm - G / 24e9) < 1e-12, "ring all-reduce over 2: 2 (N-1)/N G = %.0f bytes, "
          "got %.0f", G, a.comm_bytes);
    double last = 25.0 * 1048576.0 / G * a.comm, bwd = a.compute / c.grad_accum * 2.0 / 3.0;
    CHECK(fabs(a.hidden - (a.comm - last < bwd ? a.comm - last : bwd)) < 1e-12 && a.hidden < a.comm,
          "all but the last 25 MiB bucket hides behind the backward: hidden %.6f of %.6f s", a.hidden, a.comm);
    CHECK(fabs(a.total - (a.compute + a.update + a.comm - a.hidden)) < 1e-12, "data parallel total");
    CHECK(a.one_device / a.total > 1.9 && a.one_device / a.total <= 2.0, "GPT-2 124M over 2 GPUs: %.3fx",
          a.one_device / a.total);
    CHECK(gpt2rt_plan_step_time(&c, &hw, 1, &sh, err, sizeof err) == GPT2RT_OK &&
          fabs(sh.gather - 0.5 * W / 24e9) < 1e-12 && fabs(sh.update - a.update / 2) < 1e-12 &&
          fabs(sh.comm - a.comm / 2) < 1e-12, "sharded: half the update, a reduce-scatter of (N-1)/N G and an "
          "all-gather of (N-1)/N W: gather %.6f, want %.6f", sh.gather, 0.5 * W / 24e9);
    hw.link_bw = 48e9;
    CHECK(gpt2rt_plan_step_time(&c, &hw, 0, &fast, err, sizeof err) == GPT2RT_OK && fabs(fast.comm * 2 - a.comm) < 1e-12,
          "twice the link bandwidth, half the link time");
    /* layer split, GPipe: (m + S - 1) stage times */
    gpt2rt_config s = c;
    s.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; s.batch_size = 1; s.grad_accum = 16;
    CHECK(gpt2rt_plan_step_time(&s, &hw, 0, &a, err, sizeof err) == GPT2RT_OK, "split: %s", err);
    CHECK(fabs(a.bubble - (a.compute + a.comm) / 16.0) < 1e-9 * a.total && a.hidden == 0.0,
          "layer split over 2 with 16 micro-batches: bubble %.6f = 1/16 of the %.6f s of compute and transfers",
          a.bubble, a.compute + a.comm);
    CHECK(a.comm_bytes == 16.0 * 2.0 * 1024 * 768 * 4, "each micro-batch sends (B,T,C) fp32 each way: %.0f bytes",
          a.comm_bytes);
    CHECK(gpt2rt_plan_step_time(&s, &hw, 1, &a, err, sizeof err) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(err, "sharded applies to parallel = DATA"), "sharded layer split is refused: %s", err);
    hw.link_bw = 0;
    CHECK(gpt2rt_plan_step_time(&c, &hw, 0, &a, err, sizeof err) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(err, "link 0"), "a zero link is refused: %s", err);
}

static int unit(void) {
    unit_env();
    unit_config();
    unit_devices();
    unit_file_stale();
    unit_step_time();
    env_clear();
    return harness_finish();
}

static int freeport(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = 0; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return 1;
    printf("%d\n", ntohs(a.sin_port));
    close(fd);
    return 0;
}

/* one rank of a rendezvous, from torchrun's variables; EXPECT "ok" or a phrase */
static int rdv(double timeout, const char *expect) {
    gpt2rt_config c = tiny();
    const char *file = getenv("GPT2RT_TEST_RDV_FILE");
    if (file) { c.rendezvous = GPT2RT_RENDEZVOUS_FILE; snprintf(c.rendezvous_file, sizeof c.rendezvous_file, "%s", file); }
    c.timeout_s = (float)timeout;
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&c, &p) != GPT2RT_OK) { CHECK(0, "plan: %s", p.error); return harness_finish(); }
    unsigned char id[GPT2RT__RDV_ID_BYTES], want[GPT2RT__RDV_ID_BYTES];
    id_pattern(want);
    if (p.config.rank == 0) memcpy(id, want, sizeof id);
    else memset(id, 0, sizeof id);
    char err[1024] = "";
    double t0 = harness_now();
    gpt2rt_result r = gpt2rt__rdv_exchange(&p.config, id, err, sizeof err);
    double dt = harness_now() - t0;
    if (!strcmp(expect, "ok"))
        CHECK(r == GPT2RT_OK && !memcmp(id, want, sizeof id), "rank %d of %d: %s: %s", p.config.rank,
              p.config.world_size, gpt2rt_result_string(r), err);
    else {
        CHECK(r != GPT2RT_OK && strstr(err, expect), "rank %d: want an error naming '%s', got %s: %s", p.config.rank,
              expect, gpt2rt_result_string(r), err);
        CHECK(dt < timeout + 3.0, "rank %d returned after %.1f s, timeout %.1f s", p.config.rank, dt, timeout);
        printf("rank %d error after %.1f s: %s\n", p.config.rank, dt, err);
    }
    return harness_finish();
}

#ifdef GPT2RT_MPI
/* shard boundaries for the all-gather check (i12 defines the real one with the communicator) */
static int mpi_comm(void) {
    gpt2rt_config c = tiny();
    c.timeout_s = 20.0f;
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&c, &p) != GPT2RT_OK) { CHECK(0, "plan: %s", p.error); return harness_finish(); }
    gpt2rt__comm comm;
    char err[512] = "";
    gpt2rt_result r = gpt2rt__mpi_comm(&p.config, &comm, err, sizeof err);
    CHECK(r == GPT2RT_OK && comm.size == p.config.world_size, "MPI communicator: %s", err);
    if (r != GPT2RT_OK) return harness_finish();
    /* values whose float sum depends on the order: 1e8 + 1 - 1e8 style, per rank */
    const int64_t n = 300001; /* more than one chunk */
    float *x = (float *)malloc((size_t)n * sizeof(float)), *want = (float *)malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float sum = 0.0f;
        for (int rk = 0; rk < comm.size; rk++) {
            uint64_t s = (uint64_t)(i * 131 + rk);
            float v = (float)((harness_rng_uniform(&s) - 0.5) * (rk % 2 ? 1.0 : 1e7));
            if (rk == comm.rank) x[i] = v;
            sum = rk ? sum + v : v; /* rank order, left to right */
        }
        want[i] = sum;
    }
    r = comm.all_reduce(&comm, x, n);
    CHECK(r == GPT2RT_OK && !memcmp(x, want, (size_t)n * sizeof(float)), "all_reduce is the rank-ordered sum, "
          "bitwise (rank %d): %s", comm.rank, comm.err);
    /* every rank holds bitwise the same: rank 0 broadcasts its copy, the others compare */
    float *copy = (float *)malloc((size_t)n * sizeof(float));
    memcpy(copy, x, (size_t)n * sizeof(float));
    r = comm.broadcast(&comm, copy, (size_t)n * sizeof(float), 0);
    CHECK(r == GPT2RT_OK && !memcmp(copy, x, (size_t)n * sizeof(float)), "every rank's sum equals rank 0's bitwise");
    CHECK(comm.barrier(&comm) == GPT2RT_OK, "barrier: %s", comm.err);
    comm.destroy(&comm);
    free(x); free(want); free(copy);
    return harness_finish();
}

/* Training under mpirun: each process one rank of B rows; the same run in one process
   with N threads of B rows (world_size 1, n_devices N) must give bitwise the same
   losses and weights (both sum in rank order), and one device of N*B rows the same
   within fp32 reassociation. sharded: shard_optimizer = 1 (ZeRO-1 over the processes). */
static int mpi_train(int sharded) {
    const int B = 2, T = 8, accum = 2, steps = 3;
    gpt2rt_config c = tiny();
    c.batch_size = B; c.seq_len = T; c.grad_accum = accum; c.timeout_s = 30.0f; c.shard_optimizer = sharded;
    c.weight_decay = 0.1f;
    gpt2rt_ctx *ctx;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    CHECK(r == GPT2RT_OK, "create under mpirun: %s", gpt2rt_last_error(ctx));
    if (r != GPT2RT_OK) { gpt2rt_free(ctx); return harness_finish(); }
    gpt2rt_config got = gpt2rt_config_get(ctx);
    int N = got.world_size, me = got.rank;
    CHECK(N >= 2 && got.rendezvous == GPT2RT_RENDEZVOUS_MPI, "rank %d of %d from mpirun's variables, rendezvous %d",
          me, N, (int)got.rendezvous);
    /* the reference: the same global batches in one process, N threads, and one device of N*B */
    gpt2rt_config th = c, one = c;
    th.world_size = 1; th.n_devices = N;
    one.world_size = 1; one.parallel = GPT2RT_PARALLEL_NONE; one.batch_size = N * B; one.shard_optimizer = 0;
    gpt2rt_ctx *tctx, *octx;
    CHECK_OK(tctx, gpt2rt_create(&tctx, &th));
    CHECK_OK(octx, gpt2rt_create(&octx, &one));
    int64_t rows = (int64_t)accum * N * B;
    int32_t *in = (int32_t *)malloc((size_t)(rows * T) * sizeof(int32_t)),
            *tg = (int32_t *)malloc((size_t)(rows * T) * sizeof(int32_t)),
            *mine_in = (int32_t *)malloc((size_t)(accum * B * T) * sizeof(int32_t)),
            *mine_tg = (int32_t *)malloc((size_t)(accum * B * T) * sizeof(int32_t));
    uint64_t seed = 99;
    int same_loss = 1;
    double worst = 0.0;
    for (int step = 0; step < steps; step++) {
        for (int64_t i = 0; i < rows * T; i++) {
            in[i] = (int32_t)(harness_rng_next(&seed) % 64);
            tg[i] = (int32_t)(harness_rng_next(&seed) % 64);
        }
        /* micro-batch k is rows [k*N*B, (k+1)*N*B); rank r takes rows [r*B, (r+1)*B) of it */
        for (int k = 0; k < accum; k++) {
            memcpy(mine_in + (size_t)k * B * T, in + ((size_t)k * N * B + (size_t)me * B) * T, (size_t)B * T * sizeof(int32_t));
            memcpy(mine_tg + (size_t)k * B * T, tg + ((size_t)k * N * B + (size_t)me * B) * T, (size_t)B * T * sizeof(int32_t));
        }
        gpt2rt_step_stats sp, st, so;
        CHECK_OK(ctx, gpt2rt_step(ctx, mine_in, mine_tg, &sp));
        CHECK_OK(tctx, gpt2rt_step(tctx, in, tg, &st));
        CHECK_OK(octx, gpt2rt_step(octx, in, tg, &so));
        same_loss &= sp.loss == st.loss && sp.grad_norm == st.grad_norm && sp.tokens == st.tokens;
        double d = fabs((double)sp.loss - so.loss) / fabs((double)so.loss);
        if (d > worst) worst = d;
    }
    /* one more batch, backward only: the summed gradients (Adam amplifies fp32 noise in
       the weights, the gradients show the reduction itself) */
    for (int k = 0; k < accum; k++) {
        CHECK_OK(ctx, gpt2rt_forward(ctx, mine_in + (size_t)k * B * T, mine_tg + (size_t)k * B * T, NULL));
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        CHECK_OK(tctx, gpt2rt_forward(tctx, in + (size_t)k * N * B * T, tg + (size_t)k * N * B * T, NULL));
        CHECK_OK(tctx, gpt2rt_backward(tctx));
        CHECK_OK(octx, gpt2rt_forward(octx, in + (size_t)k * N * B * T, tg + (size_t)k * N * B * T, NULL));
        CHECK_OK(octx, gpt2rt_backward(octx));
    }
    CHECK(same_loss, "rank %d: losses and gradient norms under mpirun == %d threads in one process, bitwise", me, N);
    CHECK(worst < 1e-5, "rank %d: loss within %.2g of one device of N*B rows (fp32 reassociation)", me, worst);
    /* every weight, bitwise */
    int n_bad = 0, n_cmp = 2 * gpt2rt_param_count(ctx);
    double werr = 0.0;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info info;
        gpt2rt_param_info_get(ctx, i, &info);
        float *a = (float *)malloc((size_t)info.numel * sizeof(float)), *b = (float *)malloc((size_t)info.numel * sizeof(float)),
              *o = (float *)malloc((size_t)info.numel * sizeof(float));
        gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_VALUE, a, info.numel);
        gpt2rt_param_read(tctx, info.name, GPT2RT_PARAM_VALUE, b, info.numel);
        n_bad += memcmp(a, b, (size_t)info.numel * sizeof(float)) != 0;
        r = gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_GRAD, a, info.numel);
        gpt2rt_param_read(tctx, info.name, GPT2RT_PARAM_GRAD, b, info.numel);
        gpt2rt_param_read(octx, info.name, GPT2RT_PARAM_GRAD, o, info.numel);
        /* ZeRO-1 over processes: each process holds the sum of its own shard only, and the
           read says so; the threads' ZeRO-1 gathers it from the ranks (compared below) */
        if (sharded) {
            if (i == 0)
                CHECK(r == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(ctx), "shard_optimizer = 0"),
                      "rank %d: ZeRO-1 over processes: a gradient read is refused by name: %s", me,
                      gpt2rt_last_error(ctx));
            n_cmp--;
        } else n_bad += memcmp(a, b, (size_t)info.numel * sizeof(float)) != 0;
        double e = rel_err(sharded ? b : a, o, info.numel);
        if (e > werr) werr = e;
        free(a); free(b); free(o);
    }
    CHECK(n_bad == 0, "rank %d: %d weights or gradients differ from the threads' run (want bitwise equal)", me, n_bad);
    CHECK(werr < 2e-5, "rank %d: gradients%s within %.2g of one device (want < 2e-5)", me,
          sharded ? " (the threads' ZeRO-1)" : "", werr);
    printf("rank %d of %d%s: %d steps, losses bitwise == %d threads, %d %s bitwise equal; vs one device of %d "
           "rows: loss %.1e%s %.1e\n", me, N, sharded ? " (ZeRO-1)" : "", steps, N, n_cmp - n_bad,
           sharded ? "weight tensors" : "weight and gradient tensors", N * B, worst,
           ", gradients", werr);
    if (sharded) {
        r = gpt2rt_state_save(ctx, "build/ranks_state.safetensors");
        CHECK(r == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(ctx), "shard_optimizer = 0"),
              "ZeRO-1 over processes: a state save is refused by name: %s", gpt2rt_last_error(ctx));
    }
    free(in); free(tg); free(mine_in); free(mine_tg);
    gpt2rt_free(ctx); gpt2rt_free(tctx); gpt2rt_free(octx);
    return harness_finish();
}

/* one rank leaves mid-run (how: "crash", _Exit without MPI's goodbye; "stop", it
   returns normally without making the collective): the others must not hang */
static int mpi_leave(const char *how) {
    gpt2rt_config c = tiny();
    c.timeout_s = 3.0f;
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&c, &p) != GPT2RT_OK) { CHECK(0, "plan: %s", p.error); return harness_finish(); }
    gpt2rt__comm comm;
    char err[512] = "";
    if (gpt2rt__mpi_comm(&p.config, &comm, err, sizeof err) != GPT2RT_OK) { CHECK(0, "%s", err); return harness_finish(); }
    float x[64] = {0};
    CHECK(comm.all_reduce(&comm, x, 64) == GPT2RT_OK, "the first all_reduce: %s", comm.err);
    if (comm.rank == 1) {
        fflush(stdout);
        if (!strcmp(how, "crash")) _Exit(3);
        return harness_finish(); /* "stop": leaves, MPI finalised at exit */
    }
    double t0 = harness_now();
    gpt2rt_result r = comm.all_reduce(&comm, x, 64);
    double dt = harness_now() - t0;
    CHECK(r == GPT2RT_ERR_IO && strstr(comm.err, "did not finish within the timeout") && dt < 6.0,
          "rank %d: a collective without rank 1 returns an error within the timeout (%.1f s): %s: %s", comm.rank, dt,
          gpt2rt_result_string(r), comm.err);
    printf("rank %d after %.1f s: %s\n", comm.rank, dt, comm.err);
    comm.destroy(&comm);
    return harness_finish();
}
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "unit";
    if (!strcmp(mode, "unit")) return unit();
    if (!strcmp(mode, "freeport")) return freeport();
    if (!strcmp(mode, "rdv") && argc == 4) return rdv(atof(argv[2]), argv[3]);
#ifdef GPT2RT_MPI
    if (!strcmp(mode, "mpi")) return mpi_comm();
    if (!strcmp(mode, "mpi-leave") && argc == 3) return mpi_leave(argv[2]);
    if (!strcmp(mode, "mpi-train")) return mpi_train(argc > 2 && !strcmp(argv[2], "sharded"));
#endif
    fprintf(stderr, "usage: test_ranks unit | freeport | rdv TIMEOUT EXPECT | mpi (GPT2RT_MPI builds)\n");
    return 2;
}
