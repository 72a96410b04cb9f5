/* tests/harness.h - the smallest test harness: CHECK counts a property check, names
   failures; CHECK_OK guards a set-up call (a failure counts, a success does not: a call
   that returned OK proves nothing by itself); SKIP counts a check that could not run
   here and says why. Every test program ends with the line
   "RESULT <passed> <failed> <skipped>" that tests/run.sh adds up. Include after
   gpt2rt.h (with the implementation). */
#ifndef GPT2RT_TEST_HARNESS_H
#define GPT2RT_TEST_HARNESS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int harness_passed, harness_failed, harness_skipped;
#if defined(__GNUC__) || defined(__clang__)
#define HARNESS_UNUSED __attribute__((unused))
#else
#define HARNESS_UNUSED
#endif

#define CHECK(cond, ...) do { \
        if (cond) harness_passed++; \
        else { harness_failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
    } while (0)

/* a set-up gpt2rt call that must succeed: a failure is counted and printed with the
   context's message; a success is not a pass (the checks after it are) */
#define CHECK_OK(ctx, call) do { \
        gpt2rt_result r_ = (call); \
        if (r_ != GPT2RT_OK) { \
            harness_failed++; \
            printf("FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, gpt2rt_result_string(r_), \
                   gpt2rt_last_error(ctx)); \
        } \
    } while (0)

/* a check that cannot run on this machine: counted and named ("skip <reason>"), so a
   run with fewer checks says so instead of passing quietly */
#define SKIP(...) do { harness_skipped++; printf("skip "); printf(__VA_ARGS__); printf("\n"); } while (0)

HARNESS_UNUSED static int harness_finish(void) {
    printf("RESULT %d %d %d\n", harness_passed, harness_failed, harness_skipped);
    return harness_failed ? 1 : 0;
}

/* max |a-b| / max |b|: error relative to the reference tensor's scale */
HARNESS_UNUSED static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}

/* splitmix64 (the tests' own stream of test data) and wall-clock seconds */
HARNESS_UNUSED static uint64_t harness_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

HARNESS_UNUSED static double harness_rng_uniform(uint64_t *s) { /* in (0,1) */
    return ((double)(harness_rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

HARNESS_UNUSED static double harness_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* every parameter's values (or gradients, moments) in the public order and layout,
   one after another into out; frozen tensors (no gradient, no moments) are skipped.
   Returns the floats written. */
HARNESS_UNUSED static int64_t harness_params(gpt2rt_ctx *ctx, gpt2rt_param_what what, float *out) {
    int64_t total = 0;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info in;
        if (gpt2rt_param_info_get(ctx, i, &in) != GPT2RT_OK) break;
        if (what != GPT2RT_PARAM_VALUE && (gpt2rt_config_get(ctx).frozen & in.group)) continue;
        if (gpt2rt_param_read(ctx, in.name, what, out + total, in.numel) != GPT2RT_OK) {
            printf("harness_params: %s\n", gpt2rt_last_error(ctx));
            exit(2);
        }
        total += in.numel;
    }
    return total;
}

/* the same floats in two contexts: values (what) bitwise equal */
HARNESS_UNUSED static int harness_params_equal(gpt2rt_ctx *a, gpt2rt_ctx *b, gpt2rt_param_what what) {
    gpt2rt_memory_plan p;
    if (gpt2rt_plan_allocated(a, &p) != GPT2RT_OK) return 0;
    float *x = (float *)malloc((size_t)p.n_params_padded * 4), *y = (float *)malloc((size_t)p.n_params_padded * 4);
    int64_t n = harness_params(a, what, x), m = harness_params(b, what, y);
    int same = n == m && !memcmp(x, y, (size_t)n * 4);
    free(x);
    free(y);
    return same;
}

HARNESS_UNUSED static unsigned char *read_all(const char *path, size_t *len);

/* two contexts hold the same training state (weights, moments, step, RNG): their
   gpt2rt_state_save files are byte for byte the same */
HARNESS_UNUSED static int harness_same_state(gpt2rt_ctx *a, gpt2rt_ctx *b) {
    const char *pa = "build/harness_state_a.safetensors", *pb = "build/harness_state_b.safetensors";
    if (gpt2rt_state_save(a, pa) != GPT2RT_OK || gpt2rt_state_save(b, pb) != GPT2RT_OK) return 0;
    size_t na = 0, nb = 0;
    unsigned char *x = read_all(pa, &na), *y = read_all(pb, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

HARNESS_UNUSED static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = (unsigned char *)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

HARNESS_UNUSED static int write_all(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(buf, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* the file at path with its first `from` replaced by `to`: 1, or 0 with the file untouched
   when it cannot be read or does not hold `from` */
HARNESS_UNUSED static int harness_replace(const char *path, const char *from, const char *to) {
    size_t n, lf = strlen(from), lt = strlen(to);
    unsigned char *buf = read_all(path, &n);
    if (!buf) return 0;
    buf[n] = 0;
    char *at = strstr((char *)buf, from);
    char *out = at ? (char *)malloc(n - lf + lt + 1) : NULL;
    int ok = 0;
    if (out) {
        size_t head = (size_t)(at - (char *)buf);
        memcpy(out, buf, head);
        memcpy(out + head, to, lt);
        memcpy(out + head + lt, at + lf, n - head - lf);
        ok = write_all(path, out, n - lf + lt);
    }
    free(out);
    free(buf);
    return ok;
}

/* float -> F16 / BF16, round to nearest even (finite values): test files in other dtypes */
HARNESS_UNUSED static uint16_t to_f16(float x) { /* round to nearest even; finite values */
    uint32_t b;
    memcpy(&b, &x, 4);
    uint32_t sign = (b >> 16) & 0x8000u;
    int32_t exp = (int32_t)((b >> 23) & 255) - 127 + 15;
    uint32_t man = b & 0x7FFFFFu;
    if (exp >= 31) return (uint16_t)(sign | 0x7C00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
        uint32_t v = man >> shift, rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (v & 1))) v++;
        return (uint16_t)(sign | v);
    }
    uint32_t v = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) v++;
    return (uint16_t)(sign | v);
}

HARNESS_UNUSED static uint16_t to_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    b += 0x7FFFu + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}

/* allocator hooks that count what gpt2rt asks for, by category (config.alloc = harness_count_alloc,
   .free = harness_count_free, .alloc_user = &a zeroed harness_counter): the plan == allocated
   checks compare bytes[] with the plan; live returns to 0 when everything was freed */
typedef struct harness_counter { uint64_t bytes[GPT2RT_MEM_COUNT]; int64_t live; int calls; } harness_counter;
static HARNESS_UNUSED void *harness_count_alloc(void *user, size_t bytes, int cat) {
    harness_counter *k = (harness_counter *)user;
    size_t n = (bytes + GPT2RT_ALIGN - 1) / GPT2RT_ALIGN * GPT2RT_ALIGN; /* aligned_alloc wants a multiple */
    k->calls++;
    void *p = aligned_alloc(GPT2RT_ALIGN, n ? n : GPT2RT_ALIGN);
    if (!p) return NULL;
    if (cat >= 0 && cat < GPT2RT_MEM_COUNT) k->bytes[cat] += bytes;
    k->live++;
    return p;
}
static HARNESS_UNUSED void harness_count_free(void *user, void *p, int cat) {
    (void)cat;
    ((harness_counter *)user)->live--;
    free(p);
}

#endif
