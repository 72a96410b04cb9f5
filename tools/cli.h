/* tools/cli.h - what the programs in examples/ and tools/ parse and look up the same way.
   Define CLI_PROG (the program's name, for messages) before including it. Not part of
   gpt2rt.h: the library never parses a command line. */
#ifndef GPT2RT_TOOLS_CLI_H
#define GPT2RT_TOOLS_CLI_H
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* wall-clock seconds, for the benchmarks' timings */
static inline double cli_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* an integer parsed whole (no trailing text, no overflow, in [lo, hi]); a bad one is
   refused naming the program, the flag and the value: the caller exits 2 */
static inline int arg_int(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "%s: %s '%s': expected an integer in [%ld, %ld]\n", CLI_PROG, flag, v, lo, hi);
        return 0;
    }
    *out = (int)x;
    return 1;
}

/* a real number parsed whole (finite, no trailing text, no overflow) in [lo, hi]; with
   open_lo / open_hi the bound itself is refused (a learning rate > 0, a dropout < 1) */
static inline int arg_real(const char *flag, const char *v, double lo, double hi, int open_lo, int open_hi,
                           double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi || (open_lo && x == lo) ||
        (open_hi && x == hi)) {
        fprintf(stderr, "%s: %s '%s': expected a number in %c%g, %g%c\n", CLI_PROG, flag, v, open_lo ? '(' : '[', lo,
                hi, open_hi ? ')' : ']');
        return 0;
    }
    *out = x;
    return 1;
}
/* the same into a float (config fields) */
static inline int arg_realf(const char *flag, const char *v, double lo, double hi, int open_lo, int open_hi,
                            float *out) {
    double x;
    if (!arg_real(flag, v, lo, hi, open_lo, open_hi, &x)) return 0;
    *out = (float)x;
    return 1;
}

#ifdef GPT2RT_H
/* gpt2rt.h's capability table as Markdown on stdout (gpt2rt-caps, gpt2rt-mem --capabilities):
   0, or 1 when out of memory */
static inline int cli_capabilities(void) {
    size_t n = gpt2rt_capabilities_markdown(NULL, 0);
    char *buf = (char *)malloc(n + 1);
    if (!buf) { fprintf(stderr, "%s: out of memory\n", CLI_PROG); return 1; }
    gpt2rt_capabilities_markdown(buf, n + 1);
    fputs(buf, stdout);
    free(buf);
    return 0;
}
#endif

#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200112L
#include <sys/stat.h>
#include <unistd.h>
/* the repository's file rel (e.g. "data/ETTh2.csv") as given when it exists here, else
   beside this program's directory (<repo>/build/prog -> <repo>/data/...), so a program
   finds data/ from any working directory; else rel, which the caller's error names */
static inline const char *repo_path(const char *rel, char *buf, size_t cap) {
    struct stat st;
    char exe[4096];
    if (stat(rel, &st) == 0) return rel;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return rel;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return rel;
    *slash = 0;
    int len = snprintf(buf, cap, "%s/../%s", exe, rel);
    return len > 0 && (size_t)len < cap && stat(buf, &st) == 0 ? buf : rel;
}
#endif
#endif
