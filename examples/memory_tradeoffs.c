/* examples/memory_tradeoffs.c - the memory knobs for real, on the CPU backend.

   The same global batch trained a few optimizer steps under each configuration
   (like the Hugging Face "model training anatomy" tables): recompute levels,
   micro-batch x accumulation, frozen groups. For each it prints the time of a
   step, the memory gpt2rt_plan predicted, the memory a counting allocator hook
   really saw, and the loss. Recompute changes where the time goes, never the
   numbers: those losses equal the baseline's bit for bit.

   usage: memory_tradeoffs [--steps N] [--model small|124M] [--batch G]
     --steps N   timed optimizer steps per configuration after one warm-up (default 3)
     --model     small: L=4 H=4 C=128, T=64, global batch 8 (seconds on 2 cores)
                 124M:  GPT-2 124M, T=64, global batch 4 (micro-batches down to 1; minutes)
     --batch G   global batch (a multiple of 4) instead of the model's default
   The vocabulary is GPT-2's 50257 tokens, so the logits weigh what they weigh.
   Exit status 1 when a configuration fails, allocates other bytes than it planned, or
   changes the loss more than recompute (no bit) or accumulation (rounding) may. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} experiment;

static const experiment EXPERIMENTS[] = {
    {"baseline", 1, GPT2RT_RECOMPUTE_NONE, 0, 0},
    {"selective recompute", 1, GPT2RT_RECOMPUTE_SELECTIVE, 0, 0},
    {"full recompute (every 1)", 1, GPT2RT_RECOMPUTE_FULL, 1, 0},
    {"full recompute (sqrt)", 1, GPT2RT_RECOMPUTE_FULL, GPT2RT_CHECKPOINT_SQRT, 0},
    {"B/2 x accum 2", 2, GPT2RT_RECOMPUTE_NONE, 0, 0},
    {"B/4 x accum 4", 4, GPT2RT_RECOMPUTE_NONE, 0, 0},
    {"B/4 x accum 4 + full", 4, GPT2RT_RECOMPUTE_FULL, 1, 0},
    {"frozen attn+mlp (GPT4TS)", 1, GPT2RT_RECOMPUTE_NONE, 0, GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP},
};
#define N_EXP ((int)(sizeof EXPERIMENTS / sizeof EXPERIMENTS[0]))

typedef struct setup {
    int L, H, C, T, global, steps; /* steps: timed, after one warm-up */
} setup;

typedef struct result {
    int ok;
    int batch, accum;
    double ms_per_step, samples_per_s;
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
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    c.seq_len = s->T;
    c.batch_size = s->global / e->micro_div;
    c.grad_accum = e->micro_div;
    c.recompute = e->recompute;
    c.checkpoint_every = e->checkpoint_every;
    c.frozen = e->frozen;
    c.backend = GPT2RT_BACKEND_CPU;
    c.seed = 1337; /* every configuration starts from the same weights */
    c.alloc = count_alloc; c.free = count_free; c.alloc_user = seen;
    return c;
}

/* random tokens from a fixed seed (xorshift64*): the same stream for every
   configuration, so every one sees the same global batches */
static void make_tokens(int32_t *tok, int64_t n, uint64_t seed) {
    uint64_t x = seed;
    for (int64_t i = 0; i < n; i++) {
        x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
        tok[i] = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % 50257);
    }
}

/* steps+1 optimizer steps of the global batch: the first warms caches and threads
   up, the others are timed. tokens: (steps+1) * global rows of T+1 tokens. */
static int run(const setup *s, const experiment *e, const int32_t *tokens, result *r) {
    memset(r, 0, sizeof *r);
    gpt2rt_config cfg = config_of(s, e, &r->seen);
    gpt2rt_memory_plan plan;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK) { fprintf(stderr, "%s: %s\n", e->name, plan.error); return 0; }
    memcpy(r->planned, plan.bytes[0], sizeof r->planned);
    r->planned_total = plan.total[0];
    r->batch = plan.config.batch_size;
    r->accum = plan.config.grad_accum;

    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "%s: %s\n", e->name, gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 0;
    }
    int64_t rows = s->global, T = s->T; /* gpt2rt_step takes grad_accum * batch_size rows */
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rows * T));
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rows * T));
    double t_best = 1e30; /* the fastest timed step: on a shared machine the others only add noise */
    gpt2rt_step_stats st = {0};
    for (int step = 0; step <= s->steps; step++) {
        for (int64_t b = 0; b < rows; b++) { /* targets: the inputs shifted by one */
            const int32_t *seq = tokens + ((int64_t)step * rows + b) * (T + 1);
            memcpy(x + b * T, seq, sizeof(int32_t) * (size_t)T);
            memcpy(y + b * T, seq + 1, sizeof(int32_t) * (size_t)T);
        }
        double t0 = now();
        if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) {
            fprintf(stderr, "%s: %s\n", e->name, gpt2rt_last_error(ctx));
            break;
        }
        double dt = now() - t0;
        if (step > 0 && dt < t_best) t_best = dt;
        r->ok = step == s->steps;
    }
    r->ms_per_step = 1e3 * t_best;
    r->samples_per_s = (double)s->global / t_best;
    r->loss = st.loss;
    free(x); free(y);
    gpt2rt_free(ctx);
    return r->ok;
}

/* ---- printing ---- */

/* returns how many configurations allocated other bytes than they planned (planned ==
   allocated holds by construction: a difference is a bug in the plan or the creation) */
static int print_results(const result *res) {
    int mismatches = 0;
    printf("%-26s %7s %9s %9s %11s %13s %9s %10s\n", "config", "B x acc", "ms/step", "samples/s", "planned MiB",
           "allocated MiB", "act MiB", "loss");
    for (int i = 0; i < N_EXP; i++) {
        const result *r = &res[i];
        char ba[16];
        snprintf(ba, sizeof ba, "%d x %d", r->batch, r->accum);
        if (!r->ok) { printf("%-26s %7s  failed (see above)\n", EXPERIMENTS[i].name, ba); continue; }
        /* act MiB: the activations arena as allocated (with full recompute: the
           checkpoints plus the slots a segment refills) */
        printf("%-26s %7s %9.1f %9.1f %11.2f %13.2f %9.2f %10.6f%s\n", EXPERIMENTS[i].name, ba, r->ms_per_step,
               r->samples_per_s, MIB(r->planned_total), MIB(r->seen.arenas), MIB(r->seen.bytes[GPT2RT_MEM_ACTIVATIONS]),
               (double)r->loss, r->seen.arenas == r->planned_total ? "" : "  (allocated != planned!)");
        mismatches += r->seen.arenas != r->planned_total;
    }
    return mismatches;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* the baseline's planned bytes per category, then every other configuration's change */
static void print_categories(const result *res) {
    printf("(ms/step: the fastest timed step; allocated: the bytes the allocator hook was asked for, arenas only;\n"
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
            !EXPERIMENTS[j].frozen)
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
        int want_bits = EXPERIMENTS[ref].micro_div == e->micro_div;
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

/* ---- main ---- */

static void usage(FILE *f, const char *prog) {
    fprintf(f, "usage: %s [--steps N] [--model small|124M] [--batch G]\n"
               "  --steps N   timed optimizer steps per configuration after one warm-up (default 3)\n"
               "  --model     small: L=4 H=4 C=128, T=64, global batch 8 (seconds on 2 cores)\n"
               "              124M:  GPT-2 124M, T=64, global batch 4 (micro-batches down to 1; minutes)\n"
               "  --batch G   global batch (a multiple of 4) instead of the model's default\n", prog);
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
    *s = (setup){4, 4, 128, 64, 8, 3};
    int global = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout, argv[0]); return 0; }
        if (!strcmp(a, "--steps") || !strcmp(a, "--batch")) {
            int *dst = a[2] == 's' ? &s->steps : &global;
            if (!parse_count(v, 1, 1 << 20, dst)) {
                fprintf(stderr, "%s: %s '%s' is not an integer in [1, %d]\n", argv[0], a, v ? v : "", 1 << 20);
                return -1;
            }
            i++;
        }
        else if (!strcmp(a, "--model") && v && !strcmp(v, "small")) { i++; }
        else if (!strcmp(a, "--model") && v && !strcmp(v, "124M")) { *s = (setup){12, 12, 768, 64, 4, s->steps}; i++; }
        else {
            usage(stderr, argv[0]);
            fprintf(stderr, "(bad argument: %s)\n", a);
            return -1;
        }
    }
    if (global) s->global = global;
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
    printf("GPT-2 L=%d H=%d C=%d V=50257, T=%d, global batch %d, CPU backend, %d thread(s)\n", s.L, s.H, s.C, s.T,
           s.global, pp.config.n_threads);
    printf("%d optimizer steps per configuration: 1 warm-up, %d timed; random tokens, seed 1234\n\n", s.steps + 1,
           s.steps);

    fflush(stdout); /* the header before the progress lines on stderr */
    int64_t n_tok = (int64_t)(s.steps + 1) * s.global * (s.T + 1);
    int32_t *tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_tok);
    make_tokens(tokens, n_tok, 1234);
    result res[N_EXP];
    int failures = 0;
    for (int i = 0; i < N_EXP; i++) {
        fprintf(stderr, "running %s...\n", EXPERIMENTS[i].name);
        failures += !run(&s, &EXPERIMENTS[i], tokens, &res[i]);
    }
    int mismatches = print_results(res);
    print_categories(res);
    int bad = print_checks(res, &s);
    if (mismatches) printf("\n%d configuration(s) allocated other bytes than gpt2rt_plan planned\n", mismatches);
    free(tokens);
    return failures || bad || mismatches ? 1 : 0;
}
