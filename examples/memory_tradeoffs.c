/* examples/memory_tradeoffs.c - the memory knobs for real, on the CPU backend.

   The same global batch trained a few optimizer steps under each configuration
   (like the Hugging Face "model training anatomy" tables): recompute levels,
   micro-batch x accumulation, frozen groups, the chunked classifier. For each it
   prints the median time of a step beside the time gpt2rt_plan_cpu_time predicts
   for this machine (its calibration measures the library's own matrix product and
   memory rate), the memory gpt2rt_plan predicted, the memory a counting allocator
   hook really saw, and the loss. Recompute changes where the time goes, never the
   numbers: those losses equal the baseline's bit for bit, and so do the chunked
   classifier's when its chunk is a multiple of the matrix product's k slice
   (GPT2RT_SGEMM_KC), else within rounding. Last, it says
   whether the measured medians come in the order the predictions do, for recompute,
   for accumulation and for the classifier's chunks.

   usage: memory_tradeoffs [--steps N] [--model small|124M] [--batch G] [--vocab V]
     --steps N   timed optimizer steps per configuration after one warm-up (default 5)
     --model     small: L=4 H=4 C=256, T=64, vocabulary 4096, global batch 8: the layers
                 do 76% of the FLOPs, so recompute shows (about a minute on 2 cores)
                 124M:  GPT-2 124M, T=64, vocabulary 50257, global batch 4 (micro-batches
                 down to 1; minutes; the classifier does 45% of the FLOPs at T=64)
     --batch G   global batch (a multiple of 4) instead of the model's default
     --vocab V   vocabulary size instead of the model's (50257: GPT-2's, where the
                 classifier weighs what it weighs in GPT-2)
   Exit status 1 when a configuration fails, allocates other bytes than it planned, or
   changes the loss more than recompute (no bit) or accumulation or chunks (rounding) may. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB(x) ((double)(x) / 1048576.0)

/* ---- a counting allocator hook: what the library really asked for ---- */

typedef struct counter {
    uint64_t bytes[GPT2RT_MEM_COUNT]; /* per category, arenas only */
    uint64_t arenas;                  /* every request with category >= 0 */
    uint64_t bookkeeping;             /* GPT2RT_MEM_BOOKKEEPING: the context, tables */
} counter;

static void *count_alloc(void *user, size_t bytes, int category) {
    counter *c = (counter *)user;
    if (category >= 0 && category < GPT2RT_MEM_COUNT) {
        c->bytes[category] += bytes;
        c->arenas += bytes;
    } else {
        c->bookkeeping += bytes;
    }
    /* aligned_alloc wants a multiple of the alignment; the hook must return 64-byte aligned memory */
    size_t rounded = (bytes + GPT2RT_ALIGN - 1) / GPT2RT_ALIGN * GPT2RT_ALIGN;
    return aligned_alloc(GPT2RT_ALIGN, rounded ? rounded : GPT2RT_ALIGN);
}

static void count_free(void *user, void *ptr, int category) {
    (void)user; (void)category;
    free(ptr);
}

/* ---- the configurations ---- */

typedef struct experiment {
    const char *name;
    int micro_div; /* micro-batch = global batch / micro_div, accumulation = micro_div */
    gpt2rt_recompute recompute;
    int checkpoint_every;
    unsigned frozen;
    int chunk_div; /* classifier_chunk = the micro-batch's tokens / chunk_div; 0: the whole batch */
} experiment;

static const experiment EXPERIMENTS[] = {
    {"baseline", 1, GPT2RT_RECOMPUTE_NONE, 0, 0, 0},
    {"selective recompute", 1, GPT2RT_RECOMPUTE_SELECTIVE, 0, 0, 0},
    {"full recompute (every 1)", 1, GPT2RT_RECOMPUTE_FULL, 1, 0, 0},
    {"full recompute (sqrt)", 1, GPT2RT_RECOMPUTE_FULL, GPT2RT_CHECKPOINT_SQRT, 0, 0},
    {"B/2 x accum 2", 2, GPT2RT_RECOMPUTE_NONE, 0, 0, 0},
    {"B/4 x accum 4", 4, GPT2RT_RECOMPUTE_NONE, 0, 0, 0},
    {"B/4 x accum 4 + full", 4, GPT2RT_RECOMPUTE_FULL, 1, 0, 0},
    {"frozen attn+mlp (GPT4TS)", 1, GPT2RT_RECOMPUTE_NONE, 0, GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP, 0},
    {"classifier chunk BT/2", 1, GPT2RT_RECOMPUTE_NONE, 0, 0, 2},
    {"classifier chunk BT/4", 1, GPT2RT_RECOMPUTE_NONE, 0, 0, 4},
};
#define N_EXP ((int)(sizeof EXPERIMENTS / sizeof EXPERIMENTS[0]))

typedef struct setup {
    int L, H, C, T, global, steps; /* steps: timed, after one warm-up */
    int V;
} setup;

typedef struct result {
    int ok;
    int batch, accum;
    double ms_per_step, ms_min, ms_max, samples_per_s; /* ms_per_step: the median */
    double ms_predicted; /* gpt2rt_plan_cpu_time, 0 when it failed */
    double ms_cpu;       /* median processor time of a step over the threads: what a loaded machine takes least */
    uint64_t planned[GPT2RT_MEM_COUNT], planned_total;
    counter seen;
    float loss; /* of the last step: the mean over its whole global batch */
} result;

static double now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gpt2rt_config config_of(const setup *s, const experiment *e, counter *seen) {
    gpt2rt_config c = {0};
    c.n_layer = s->L; c.n_head = s->H; c.n_embd = s->C;
    c.vocab_size = s->V;
    c.max_seq_len = 1024;
    c.seq_len = s->T;
    c.batch_size = s->global / e->micro_div;
    c.grad_accum = e->micro_div;
    c.recompute = e->recompute;
    c.checkpoint_every = e->checkpoint_every;
    c.frozen = e->frozen;
    c.classifier_chunk = e->chunk_div ? c.batch_size * s->T / e->chunk_div : 0;
    c.backend = GPT2RT_BACKEND_CPU;
    c.seed = 1337; /* every configuration starts from the same weights */
    c.alloc = count_alloc; c.free = count_free; c.alloc_user = seen;
    return c;
}

/* random tokens from a fixed seed (xorshift64*): the same stream for every
   configuration, so every one sees the same global batches */
static void make_tokens(int32_t *tok, int64_t n, uint64_t seed, int vocab) {
    uint64_t x = seed;
    for (int64_t i = 0; i < n; i++) {
        x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
        tok[i] = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)vocab);
    }
}

/* One configuration's context and its timed steps. */
typedef struct runner {
    gpt2rt_ctx *ctx;
    int32_t *x, *y;
    double times[64], cpu[64]; /* s: wall; processor time over the threads */
    int n_times, failed, threads;
    gpt2rt_step_stats st;
} runner;

/* plans and creates; 0 on failure (said on stderr) */
static int start(const setup *s, const experiment *e, result *r, runner *u) {
    memset(r, 0, sizeof *r);
    memset(u, 0, sizeof *u);
    gpt2rt_config cfg = config_of(s, e, &r->seen);
    gpt2rt_memory_plan plan;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK) { fprintf(stderr, "%s: %s\n", e->name, plan.error); return 0; }
    memcpy(r->planned, plan.bytes[0], sizeof r->planned);
    r->planned_total = plan.total[0];
    r->batch = plan.config.batch_size;
    r->accum = plan.config.grad_accum;
    gpt2rt_step_time pt;
    char why[512];
    if (gpt2rt_plan_cpu_time(&cfg, NULL, &pt, why, sizeof why) == GPT2RT_OK) r->ms_predicted = 1e3 * pt.total;
    else fprintf(stderr, "%s: no prediction: %s\n", e->name, why);
    if (gpt2rt_create(&u->ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "%s: %s\n", e->name, gpt2rt_last_error(u->ctx));
        gpt2rt_free(u->ctx);
        u->ctx = NULL;
        return 0;
    }
    u->threads = gpt2rt_config_get(u->ctx).n_threads;
    u->x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(s->global * s->T)); /* grad_accum * batch_size rows */
    u->y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(s->global * s->T));
    return u->x && u->y;
}

/* optimizer step `step` of the global batch (0: the warm-up, not timed). tokens:
   (steps+1) * global rows of T+1 tokens. */
static void one_step(const setup *s, const experiment *e, const int32_t *tokens, runner *u, int step) {
    int64_t rows = s->global, T = s->T;
    if (!u->ctx || u->failed) return;
    for (int64_t b = 0; b < rows; b++) { /* targets: the inputs shifted by one */
        const int32_t *seq = tokens + ((int64_t)step * rows + b) * (T + 1);
        memcpy(u->x + b * T, seq, sizeof(int32_t) * (size_t)T);
        memcpy(u->y + b * T, seq + 1, sizeof(int32_t) * (size_t)T);
    }
    double t0 = now();
    clock_t c0 = clock();
    if (gpt2rt_step(u->ctx, u->x, u->y, &u->st) != GPT2RT_OK) {
        fprintf(stderr, "%s: %s\n", e->name, gpt2rt_last_error(u->ctx));
        u->failed = 1;
        return;
    }
    double dt = now() - t0, dc = (double)(clock() - c0) / CLOCKS_PER_SEC / u->threads;
    if (step > 0 && u->n_times < 64) { u->cpu[u->n_times] = dc; u->times[u->n_times++] = dt; }
}

/* the median: on a shared machine a neighbour's burst moves the mean and the minimum
   alike, the median only when it lasts half the steps */
static double median(double *t, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { double v = t[j]; t[j] = t[j - 1]; t[j - 1] = v; }
    return n ? (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])) : 0;
}

static int finish(const setup *s, runner *u, result *r) {
    double *t = u->times;
    int n = u->n_times;
    double med = median(t, n);
    r->ms_cpu = 1e3 * median(u->cpu, n);
    r->ok = u->ctx && !u->failed && n == s->steps;
    r->ms_per_step = 1e3 * med;
    r->ms_min = n ? 1e3 * t[0] : 0;
    r->ms_max = n ? 1e3 * t[n - 1] : 0;
    r->samples_per_s = med > 0 ? (double)s->global / med : 0;
    r->loss = u->st.loss;
    free(u->x); free(u->y);
    gpt2rt_free(u->ctx);
    u->ctx = NULL;
    return r->ok;
}

/* ---- printing ---- */

/* returns how many configurations allocated other bytes than they planned (planned ==
   allocated holds by construction: a difference is a bug in the plan or the creation) */
static int print_results(const result *res) {
    int mismatches = 0;
    printf("%-26s %7s %9s %15s %8s %9s %6s %11s %13s %9s %10s\n", "config", "B x acc", "ms median", "(min-max)",
           "cpu ms", "predicted", "err", "planned MiB", "allocated MiB", "act MiB", "loss");
    for (int i = 0; i < N_EXP; i++) {
        const result *r = &res[i];
        char ba[16];
        snprintf(ba, sizeof ba, "%d x %d", r->batch, r->accum);
        if (!r->ok) { printf("%-26s %7s  failed (see above)\n", EXPERIMENTS[i].name, ba); continue; }
        /* act MiB: the activations arena as allocated (with full recompute: the
           checkpoints plus the slots a segment refills) */
        char range[32];
        snprintf(range, sizeof range, "(%.1f-%.1f)", r->ms_min, r->ms_max);
        char pred[16] = "-", err[16] = "-"; /* no prediction: said on stderr */
        if (r->ms_predicted > 0) {
            snprintf(pred, sizeof pred, "%.1f", r->ms_predicted);
            snprintf(err, sizeof err, "%+.0f%%", 100.0 * (r->ms_predicted - r->ms_per_step) / r->ms_per_step);
        }
        printf("%-26s %7s %9.1f %15s %8.1f %9s %6s %11.2f %13.2f %9.2f %10.6f%s\n", EXPERIMENTS[i].name, ba,
               r->ms_per_step, range, r->ms_cpu, pred, err, MIB(r->planned_total), MIB(r->seen.arenas), MIB(r->seen.bytes[GPT2RT_MEM_ACTIVATIONS]),
               (double)r->loss, r->seen.arenas == r->planned_total ? "" : "  (allocated != planned!)");
        mismatches += r->seen.arenas != r->planned_total;
    }
    return mismatches;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* the baseline's planned bytes per category, then every other configuration's change */
static void print_categories(const result *res) {
    printf("(ms median: of the timed steps' wall time, their range beside it; cpu ms: the median processor time\n"
           " of a step divided by the threads, what it would take with the cores to itself (on a loaded machine the\n"
           " wall time also holds the neighbours' turns); predicted: gpt2rt_plan_cpu_time for this machine, err its\n"
           " difference from the median; allocated: the bytes the allocator hook was asked for, arenas only;\n"
           " act: the activations arena, allocated once, so the peak of what the forward keeps for the backward)\n");
    printf("\nplanned MiB per category: the baseline, then each configuration's difference\n");
    printf("%-26s", "config");
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) printf(" %11s", gpt2rt_mem_name((gpt2rt_mem)m));
    printf(" %11s\n", "total");
    for (int i = 0; i < N_EXP; i++) {
        printf("%-26s", EXPERIMENTS[i].name);
        for (int m = 0; m <= GPT2RT_MEM_COUNT; m++) {
            uint64_t v = m < GPT2RT_MEM_COUNT ? res[i].planned[m] : res[i].planned_total;
            uint64_t b = m < GPT2RT_MEM_COUNT ? res[0].planned[m] : res[0].planned_total;
            if (i == 0) printf(" %11.2f", MIB(v));
            else if (v == b) printf(" %11s", ".");
            else printf(" %+11.2f", MIB(v) - MIB(b));
        }
        printf("\n");
    }
}

/* the configuration without recompute or frozen groups at the same micro-batch */
static int reference_of(int i) {
    for (int j = 0; j < N_EXP; j++)
        if (EXPERIMENTS[j].micro_div == EXPERIMENTS[i].micro_div && EXPERIMENTS[j].recompute == GPT2RT_RECOMPUTE_NONE &&
            !EXPERIMENTS[j].frozen && !EXPERIMENTS[j].chunk_div)
            return j;
    return 0;
}

static int print_checks(const result *res, const setup *s) {
    /* recompute replays the same operations on the same inputs: identical bits.
       Accumulation sums the same gradients in another order: equal up to rounding,
       bounded by tol below. */
    int bad = 0;
    const double eps32 = 1.1920929e-7;
    double log2_rows = 0;
    while ((1 << (int)log2_rows) < s->global * s->T) log2_rows++;
    printf("\nloss checks:\n");
    for (int i = 1; i < N_EXP; i++) {
        const experiment *e = &EXPERIMENTS[i];
        if (!res[i].ok || e->frozen) continue; /* frozen trains other weights: another loss */
        int ref = e->recompute == GPT2RT_RECOMPUTE_NONE ? 0 : reference_of(i);
        /* chunks: wte's gradient is summed chunk by chunk, bitwise the whole batch's when
           the chunk is a multiple of the product's k slice */
        int chunk = e->chunk_div ? s->global / e->micro_div * s->T / e->chunk_div : 0;
        int want_bits = EXPERIMENTS[ref].micro_div == e->micro_div && chunk % GPT2RT_SGEMM_KC == 0;
        int same = same_bits(res[i].loss, res[ref].loss);
        double diff = (double)res[i].loss - (double)res[ref].loss;
        printf("  %-26s vs %-22s ", e->name, EXPERIMENTS[ref].name);
        /* the loss is the mean of global*T token losses: summed in another order its
           rounding is <= log2(global*T) eps relative, and the k micro-batch means add
           <= k eps; each of the steps+1 optimizer steps carries the last one's gradient
           rounding into the weights at the same relative size, so one such term a step */
        double tol = (double)(s->steps + 1) * (log2_rows + e->micro_div) * eps32 * fabs((double)res[ref].loss);
        if (same) printf("bitwise identical\n");
        else if (!want_bits && fabs(diff) <= tol)
            printf("differs by %+.1e (bound %.1e): rounding, the gradients are summed in another order\n", diff, tol);
        else if (!want_bits) {
            printf("differs by %+.1e: MORE than the rounding bound %.1e of another summation order\n", diff, tol);
            bad = 1;
        } else { printf("differs by %+.1e: UNEXPECTED, recompute should not change a bit\n", diff); bad = 1; }
    }
    return bad;
}

/* Does the order of the medians match the order of the predictions? Recompute:
   baseline, selective, full (sqrt), full (every 1); accumulation: B x 1, B/2 x 2, B/4 x 4;
   chunks: the whole batch, BT/2, BT/4. */
static double measured(const result *r, int cpu) { return cpu ? r->ms_cpu : r->ms_per_step; }

static void print_order(const result *res, const int *idx, int n, const char *what, int cpu) {
    int pm[8], mm[8];
    for (int i = 0; i < n; i++) pm[i] = mm[i] = idx[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            if (res[pm[j]].ms_predicted < res[pm[j - 1]].ms_predicted) { int t = pm[j]; pm[j] = pm[j - 1]; pm[j - 1] = t; }
            if (measured(&res[mm[j]], cpu) < measured(&res[mm[j - 1]], cpu)) { int t = mm[j]; mm[j] = mm[j - 1]; mm[j - 1] = t; }
        }
    int same = 1;
    for (int i = 0; i < n; i++) same &= pm[i] == mm[i];
    printf("  %-13s predicted:", what);
    for (int i = 0; i < n; i++) printf("%s %s", i ? " <" : "", EXPERIMENTS[pm[i]].name);
    printf("\n  %-13s %s", "", cpu ? "cpu ms:   " : "ms median:");
    for (int i = 0; i < n; i++) printf("%s %s", i ? " <" : "", EXPERIMENTS[mm[i]].name);
    printf("\n  %-13s %s\n", "", same ? "same order" : "ANOTHER order (a difference within the noise, or the model is off)");
}

static void print_orders(const result *res) {
    static const int rc[] = {0, 1, 3, 2}, acc[] = {0, 4, 5}, chunks[] = {0, 8, 9};
    printf("\nfastest to slowest:\n");
    print_order(res, rc, 4, "recompute", 0);
    print_order(res, rc, 4, "", 1);
    print_order(res, acc, 3, "accumulation", 0);
    print_order(res, acc, 3, "", 1);
    print_order(res, chunks, 3, "chunks", 0);
    print_order(res, chunks, 3, "", 1);
}

/* ---- main ---- */

static void usage(FILE *f, const char *prog) {
    fprintf(f, "usage: %s [--steps N] [--model small|124M] [--batch G]\n"
               "  --steps N   timed optimizer steps per configuration after one warm-up (default 5);\n"
               "              the table shows their median\n"
               "  --model     small: L=4 H=4 C=256, T=64, vocabulary 4096, global batch 8 (the layers\n"
               "              do 76%% of the FLOPs; about a minute on 2 cores)\n"
               "              124M:  GPT-2 124M, T=64, vocabulary 50257, global batch 4 (minutes)\n"
               "  --batch G   global batch (a multiple of 4) instead of the model's default\n"
               "  --vocab V   vocabulary size instead of the model's\n", prog);
}

/* a whole decimal number in [lo, hi], or 0 */
static int parse_count(const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || n < lo || n > hi) return 0;
    *out = (int)n;
    return 1;
}

/* 1: run; 0: --help was answered (exit 0); -1: a bad argument (exit 2) */
static int parse_args(int argc, char **argv, setup *s) {
    *s = (setup){4, 4, 256, 64, 8, 5, 4096};
    int vocab = 0;
    int global = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout, argv[0]); return 0; }
        if (!strcmp(a, "--steps") || !strcmp(a, "--batch") || !strcmp(a, "--vocab")) {
            int *dst = a[2] == 's' ? &s->steps : a[2] == 'b' ? &global : &vocab;
            long hi = a[2] == 's' ? 63 : 1 << 20;
            if (!parse_count(v, 1, hi, dst)) {
                fprintf(stderr, "%s: %s '%s' is not an integer in [1, %ld]\n", argv[0], a, v ? v : "", hi);
                return -1;
            }
            i++;
        }
        else if (!strcmp(a, "--model") && v && !strcmp(v, "small")) { i++; }
        else if (!strcmp(a, "--model") && v && !strcmp(v, "124M")) { *s = (setup){12, 12, 768, 64, 4, s->steps, 50257}; i++; }
        else {
            usage(stderr, argv[0]);
            fprintf(stderr, "(bad argument: %s)\n", a);
            return -1;
        }
    }
    if (global) s->global = global;
    if (vocab) s->V = vocab;
    if (s->global % 4) {
        fprintf(stderr, "%s: --batch %d is not a multiple of 4 (the micro-batches go down to G/4)\n", argv[0], s->global);
        return -1;
    }
    return 1;
}

int main(int argc, char **argv) {
    setup s;
    int go = parse_args(argc, argv, &s);
    if (go <= 0) return go < 0 ? 2 : 0;
    gpt2rt_config probe = {0}; /* resolves the thread count the runs will use */
    probe.n_layer = s.L; probe.n_head = s.H; probe.n_embd = s.C;
    gpt2rt_memory_plan pp;
    gpt2rt_plan(&probe, &pp);
    printf("GPT-2 L=%d H=%d C=%d V=%d, T=%d, global batch %d, CPU backend, %d thread(s)\n", s.L, s.H, s.C, s.V, s.T,
           s.global, pp.config.n_threads);
    printf("%d optimizer steps per configuration: 1 warm-up, %d timed; random tokens, seed 1234\n", s.steps + 1,
           s.steps);
    gpt2rt_cpu_speed sp;
    counter none;
    gpt2rt_config base = config_of(&s, &EXPERIMENTS[0], &none);
    if (gpt2rt_cpu_speed_measure(&base, 0, &sp) == GPT2RT_OK)
        printf("this machine (calibrated in %.2f s): matrix products %.1f GFLOP/s at the baseline's MLP shape, "
               "%.1f at its classifier's; memory %.1f GB/s\n", sp.seconds, sp.matmul_peak / 1e9, sp.head_peak / 1e9,
               sp.mem_bw / 1e9);
    double lf = 72.0 * s.C * s.C + 12.0 * s.C * s.T, hf = 6.0 * s.V * s.C; /* FLOPs a token: a layer, the classifier */
    printf("the layers do %.0f%% of the FLOPs, the classifier %.0f%%\n", 100.0 * s.L * lf / (s.L * lf + hf),
           100.0 * hf / (s.L * lf + hf));

    int64_t n_tok = (int64_t)(s.steps + 1) * s.global * (s.T + 1);
    int32_t *tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_tok);
    make_tokens(tokens, n_tok, 1234, s.V);
    result res[N_EXP];
    static runner run[N_EXP];
    int failures = 0;
    /* Interleaved when every context fits in 4 GiB together: round k runs step k of
       each configuration, so a neighbour's load, which comes and goes over seconds,
       falls on all of them alike; else one configuration after another. */
    uint64_t all = 0;
    for (int i = 0; i < N_EXP; i++) {
        gpt2rt_memory_plan p;
        counter unused;
        gpt2rt_config c = config_of(&s, &EXPERIMENTS[i], &unused);
        if (gpt2rt_plan(&c, &p) == GPT2RT_OK) all += p.total[0];
    }
    int together = all <= ((uint64_t)4 << 30);
    printf("timing: %s\n\n", together ? "interleaved, one step of each configuration in turn"
                                     : "one configuration after another (together they need over 4 GiB)");
    fflush(stdout);
    if (together) {
        for (int i = 0; i < N_EXP; i++) start(&s, &EXPERIMENTS[i], &res[i], &run[i]);
        for (int step = 0; step <= s.steps; step++) {
            fprintf(stderr, "round %d of %d...\n", step + 1, s.steps + 1);
            for (int i = 0; i < N_EXP; i++) one_step(&s, &EXPERIMENTS[i], tokens, &run[i], step);
        }
        for (int i = 0; i < N_EXP; i++) failures += !finish(&s, &run[i], &res[i]);
    } else {
        for (int i = 0; i < N_EXP; i++) {
            fprintf(stderr, "running %s...\n", EXPERIMENTS[i].name);
            start(&s, &EXPERIMENTS[i], &res[i], &run[i]);
            for (int step = 0; step <= s.steps; step++) one_step(&s, &EXPERIMENTS[i], tokens, &run[i], step);
            failures += !finish(&s, &run[i], &res[i]);
        }
    }
    int mismatches = print_results(res);
    print_categories(res);
    int bad = print_checks(res, &s);
    print_orders(res);
    if (mismatches) printf("\n%d configuration(s) allocated other bytes than gpt2rt_plan planned\n", mismatches);
    free(tokens);
    return failures || bad || mismatches ? 1 : 0;
}
