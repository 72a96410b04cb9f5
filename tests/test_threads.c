/* The CPU backend's choice of threads by the work of each op (src/common/threads.h,
   gpt2rt__threads_for): the count it gives at the edges of its thresholds, and what a
   process does with it: a tiny model's create, steps and update on 2 threads open no
   parallel team (the process never gains a second thread: /proc/self/task, Linux),
   while a matrix product of 2 threads' worth of work does (the threshold does not turn
   threads off). The results' independence of the count is tests/train_dump's and
   test_props' business. No tolerance: counts are integers. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"
#include <dirent.h>

/* the process's threads, -1 where /proc/self/task cannot be read */
static int task_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void test_counts(void) {
    const double per = gpt2rt__work_per_thread();
    if (per <= 0) { SKIP("built with GPT2RT_CPU_WORK_PER_THREAD %g: every op splits", per); return; }
    CHECK(gpt2rt__threads_for(2, 0.0) == 1, "no work: 1 thread, got %d", gpt2rt__threads_for(2, 0.0));
    CHECK(gpt2rt__threads_for(2, 2.0 * per * 0.999) == 1, "just under two threads' work: 1 thread, got %d",
          gpt2rt__threads_for(2, 2.0 * per * 0.999));
    CHECK(gpt2rt__threads_for(2, 2.0 * per) == 2, "two threads' work: 2 threads, got %d", gpt2rt__threads_for(2, 2.0 * per));
    CHECK(gpt2rt__threads_for(8, 3.5 * per) == 3, "3.5 threads' work of 8: 3 threads, got %d",
          gpt2rt__threads_for(8, 3.5 * per));
    CHECK(gpt2rt__threads_for(4, 1e30) == 4, "more work than threads: all 4, got %d", gpt2rt__threads_for(4, 1e30));
    CHECK(gpt2rt__threads_for(1, 1e30) == 1 && gpt2rt__threads_for(0, 1e30) == 1,
          "1 or 0 threads given: 1, got %d and %d", gpt2rt__threads_for(1, 1e30), gpt2rt__threads_for(0, 1e30));
}

static void test_no_team(void) {
#ifndef _OPENMP
    SKIP("no OpenMP in this build: no teams to count");
    return;
#else
    if (gpt2rt__work_per_thread() <= 0) { SKIP("built with GPT2RT_CPU_WORK_PER_THREAD <= 0: every op splits"); return; }
    int n0 = task_count();
    if (n0 != 1) { SKIP("/proc/self/task: %d threads before any gpt2rt call (want 1 to count)", n0); return; }
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 1; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 8; c.lr = 1e-2f; c.seed = 7; c.n_threads = 2;
    c.backend = GPT2RT_BACKEND_CPU;
    gpt2rt_ctx *ctx = NULL;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    if (!ctx) return;
#ifndef GPT2RT_CPU_WORK_PER_THREAD
    /* the first CPU context of 2 threads chose the machine's work per thread: one of the two */
    CHECK(gpt2rt__cpu_work_measured > 0.0, "the first CPU context of 2 threads chose a work per thread");
    CHECK(gpt2rt__work_per_thread() == GPT2RT__CPU_WORK_MIN || gpt2rt__work_per_thread() == GPT2RT__CPU_WORK_MAX,
          "work per thread after the first context: %g (want %g idle or %g busy)", gpt2rt__work_per_thread(),
          GPT2RT__CPU_WORK_MIN, GPT2RT__CPU_WORK_MAX);
#endif
    int32_t x[16], y[16];
    for (int i = 0; i < 16; i++) { x[i] = (i * 7) % 37; y[i] = (i * 11 + 3) % 37; }
    gpt2rt_step_stats st;
    for (int k = 0; k < 3; k++) CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
    int n1 = task_count();
    /* the tiny model's largest op, its LM head product: 2 x 16 rows x 16 x 64 = 32768 flops */
    CHECK(n1 == 1, "a tiny model's create and 3 steps on 2 threads: %d threads in the process (want 1: no team)", n1);
    gpt2rt_free(ctx);
    /* 2 x 800^3 = 1.02e9 flops: two threads' worth at the default threshold (2 x 4e8) */
    enum { S = 800 };
    float *a = (float *)calloc((size_t)S * S, sizeof(float)), *b = (float *)calloc((size_t)S * S, sizeof(float));
    float *o = (float *)calloc((size_t)S * S, sizeof(float));
    void *ws = aligned_alloc(64, (gpt2rt__sgemm_workspace_bytes(2) + 63) / 64 * 64);
    if (!a || !b || !o || !ws) { SKIP("out of memory for the large product"); free(a); free(b); free(o); free(ws); return; }
    CHECK(gpt2rt__threads_for(2, 2.0 * S * S * S) == 2, "the large product is two threads' work");
    gpt2rt__sgemm(0, 1, S, S, S, a, S, b, S, NULL, 0, o, S, ws, 2);
    int n2 = task_count();
    CHECK(n2 == 2, "a %dx%dx%d product on 2 threads: %d threads in the process (want 2)", S, S, S, n2);
    free(a); free(b); free(o); free(ws);
#endif
}

int main(void) {
    test_no_team(); /* first: counts the process's threads from its start */
    test_counts();
    return harness_finish();
}
