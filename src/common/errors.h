/* common/errors.h - 1.3 Hooks, errors, time, random numbers
   may call: common/platform.h, common/threads.h */
#ifndef GPT2RT__SRC_COMMON_ERRORS_H
#define GPT2RT__SRC_COMMON_ERRORS_H
#include "platform.h"
#include "threads.h"

/* ==== 1.3 Hooks, errors, time, random numbers ==== */

/* Every planned arena of at least 2 MiB but the KV cache gets a mapping of its own
   (mmap), starting on a 2 MiB boundary, and asks Linux for transparent huge pages on it
   (madvise MADV_HUGEPAGE); munmap returns it whole, so the advice never stays on heap
   memory that later mallocs of the application reuse. THP being in "madvise" mode (the
   usual distribution default), the 2-core AMD EPYC (Zen 4) decoded 124M with bf16
   weights at 96-97 tokens/s on huge pages against 82 on 4 KiB ones (fp32: 50-52 against
   43-45; a decode step streams every weight once), and its fp32 training step
   (bench_cpu, B=4 T=64, 2 threads) took 1215 ms against 1291 with the weights alone on
   them (means of 5 alternated runs, 4 of the 5 pairs faster; 87% of the matmul rate
   against 82%): the gradients', moments' and activations' pages stop missing the TLB.
   Those arenas are touched whole at creation, so the resident bytes do not change (the
   mapping's 4 MiB of slack is never touched); the KV cache fills as tokens come, and
   on huge pages a few positions would make 2 MiB resident (bench_gen's inference
   context: 1 MiB over its plan, against 0.2 MiB on 4 KiB pages). Advice only: the
   bytes and what they hold are the same whatever the kernel decides;
   GPT2RT_NO_HUGEPAGES compiles it out, and ASan builds keep every arena on malloc.
   Before the result sit the mapping's length (0: malloc'ed) and the pointer to free. */
#define GPT2RT__ALLOC_HEAD (sizeof(size_t) + sizeof(void *))
static void *gpt2rt__default_alloc(void *user, size_t bytes, int category) {
    (void)user;
#ifdef GPT2RT__HUGEPAGES
    const size_t huge = (size_t)2 << 20;
    if (category >= 0 && category != GPT2RT_MEM_KVCACHE && bytes >= huge && bytes <= SIZE_MAX - 2 * huge) {
        size_t len = bytes + 2 * huge; /* the header, then a 2 MiB boundary, then the bytes */
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            uintptr_t p = ((uintptr_t)m + GPT2RT__ALLOC_HEAD + huge - 1) & ~(uintptr_t)(huge - 1);
            (void)madvise((void *)p, bytes, MADV_HUGEPAGE);
            memcpy((void *)(p - GPT2RT__ALLOC_HEAD), &len, sizeof len);
            memcpy((void *)(p - sizeof(void *)), &m, sizeof m);
            return (void *)p;
        } /* else malloc below */
    }
#else
    (void)category;
#endif
    if (bytes > SIZE_MAX - GPT2RT_ALIGN - GPT2RT__ALLOC_HEAD) return NULL;
    unsigned char *raw = (unsigned char *)malloc(bytes + GPT2RT_ALIGN + GPT2RT__ALLOC_HEAD);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + GPT2RT__ALLOC_HEAD) + GPT2RT_ALIGN - 1) & ~(uintptr_t)(GPT2RT_ALIGN - 1);
    size_t zero = 0;
    memcpy((void *)(p - GPT2RT__ALLOC_HEAD), &zero, sizeof zero);
    memcpy((void *)(p - sizeof(void *)), &raw, sizeof(void *));
    return (void *)p;
}

static void gpt2rt__default_free(void *user, void *ptr, int category) {
    (void)user; (void)category;
    if (!ptr) return;
    void *raw;
    size_t len;
    memcpy(&len, (unsigned char *)ptr - GPT2RT__ALLOC_HEAD, sizeof len);
    memcpy(&raw, (unsigned char *)ptr - sizeof(void *), sizeof(void *));
#ifdef GPT2RT__HUGEPAGES
    if (len) { (void)munmap(raw, len); return; }
#endif
    free(raw);
}

static void *gpt2rt__alloc(const gpt2rt_config *c, size_t bytes, int category) {
    if (c->alloc) return c->alloc(c->alloc_user, bytes, category);
    return gpt2rt__default_alloc(NULL, bytes, category);
}

static void gpt2rt__free(const gpt2rt_config *c, void *ptr, int category) {
    if (!ptr) return;
    if (c->free) c->free(c->alloc_user, ptr, category);
    else gpt2rt__default_free(NULL, ptr, category);
}

static void gpt2rt__vlog(const gpt2rt_config *c, gpt2rt_log_level level, const char *fmt, va_list ap) {
    if (!c->log) return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    c->log(c->log_user, level, msg);
}

static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gpt2rt__vlog(&ctx->cfg, level, fmt, ap);
    va_end(ap);
}

/* record the error in the context, tell the log, return the result */
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    if (ctx->cfg.log) ctx->cfg.log(ctx->cfg.log_user, GPT2RT_LOG_ERROR, ctx->error);
    return r;
}

/* every call on a context starts here; a context whose creation failed answers
   GPT2RT_ERR_STATE and keeps the creation error as its message. Any other call
   starts with an empty message, so gpt2rt_last_error is about the latest call: a
   call that succeeds leaves "" */
#define GPT2RT__CHECK_CTX(ctx) do { \
        if (!(ctx)) return GPT2RT_ERR_INVALID_ARGUMENT; \
        if ((ctx)->failed) return GPT2RT_ERR_STATE; \
        (ctx)->error[0] = 0; \
    } while (0)

/* the same start for the objects of their own (tokenizer, shard): a failed load
   keeps its message; else the latest call's failure, or "" */
#define GPT2RT__CLEAR_ERROR(obj) do { if (!(obj)->failed) (obj)->error[0] = 0; } while (0)

static double gpt2rt__now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the one random stream; normal() draws with Box-Muller */
static uint64_t gpt2rt__rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double gpt2rt__rng_uniform(uint64_t *s) { /* in (0,1) */
    return ((double)(gpt2rt__rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Counter-based random numbers (dropout): element i of the stream `key` is a
   stateless hash of (key, i), splitmix64's i-th output from state key, so a mask is
   a function of where it is used and is never stored: the backward and the
   recompute draw it again, and neither the thread count nor a resume changes it.
   mix64 is splitmix64's finaliser, a bijection of 64 bits. */
static GPT2RT__HOSTDEV uint64_t gpt2rt__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static GPT2RT__HOSTDEV uint64_t gpt2rt__hash_at(uint64_t key, uint64_t i) { return gpt2rt__mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull); }

static int64_t gpt2rt__pad16(int64_t n) { return (n + 15) & ~(int64_t)15; } /* floats to 64 bytes */

#endif /* GPT2RT__SRC_COMMON_ERRORS_H */
