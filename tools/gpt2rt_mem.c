/* tools/gpt2rt_mem.c - gpt2rt-mem: why does this GPT-2 run out of memory, and what
   would fit? A teaching tool around gpt2rt_plan and gpt2rt_fit: nothing is
   allocated and no GPU is needed, so it can plan a 1558M run on a laptop.

   It prints the resolved config and the bytes of every memory category (what
   gpt2rt_create would allocate), which categories dominate and which knob shrinks
   them, and the step time of one time model (a card's datasheet scaled by this
   project's measured H100 steps); with --budget, whether the run fits with the
   advisor's margin and what the advisor would change; with --sweep, one row per
   value of one knob, with --png, a stacked bar chart; with --json, the same answer
   for scripts. Built by emscripten it is the planner of the web page (make web:
   gpt2rt_mem_web at the end of this file).

   build: gcc -std=c11 -Wall -Wextra -Werror -O2 -fopenmp -I. -o build/gpt2rt-mem tools/gpt2rt_mem.c -lm
   usage: see --help (or usage() below). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CLI_PROG "gpt2rt-mem"
#include "cli.h"

/* --png needs stb (Debian: libstb-dev). Without it the tool builds all the same, and
   --png prints the sweep's table anyway, then one line naming what to install (exit
   status as without --png: the table is the answer); -DGPT2RT_MEM_NO_PNG builds that variant anywhere (the
   tests check both). */
#if !defined(GPT2RT_MEM_NO_PNG) && defined(__has_include)
#if __has_include(<stb/stb_image_write.h>) && __has_include(<stb/stb_easy_font.h>)
#define GPT2RT_MEM_PNG 1
#endif
#endif
#ifdef GPT2RT_MEM_PNG
/* stb is written for many compilers at once; its unused statics and casts are not
   ours to fix, so its warnings are silenced for the two includes only */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wmissing-braces"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop
#endif

#define MIB(x) ((double)(x) / 1048576.0)
#define GIB(x) ((double)(x) / 1073741824.0)
#define MAX_SWEEP 32

/* ---- errors: exit code 2 for anything wrong on the command line ---- */

#ifdef __EMSCRIPTEN__
/* the web page's build: a bad argument returns to gpt2rt_mem_web, which answers it as
   {"error": ...}, instead of ending the page's runtime */
#include <setjmp.h>
static jmp_buf web_bad_arg;
static char web_why[512];
#endif

static void die_arg(const char *arg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
#ifdef __EMSCRIPTEN__
    int n = snprintf(web_why, sizeof web_why, "%s: ", arg);
    vsnprintf(web_why + n, sizeof web_why - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(web_bad_arg, 1);
#else
    fprintf(stderr, "gpt2rt-mem: %s: ", arg);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    exit(2);
#endif
}

static void usage(void) {
    printf(
        "gpt2rt-mem - why does this GPT-2 run out of memory, and what would fit?\n"
        "usage: gpt2rt-mem [--model SIZE | --layers N --heads N --embd N] [options below]\n"
        "\n"
        "Plans the memory of one training run (gpt2rt_plan) without allocating anything.\n"
        "The backend defaults to cuda: the tool plans GPU runs (use --backend cpu for the\n"
        "CPU backend, which computes in fp32 and has no CUDA overhead).\n"
        "\n"
        "model:\n"
        "  --model 124M|355M|774M|1558M   GPT-2 sizes (also gpt2, gpt2-medium, -large, -xl)\n"
        "  --layers N --heads N --embd N  a custom shape (override --model)\n"
        "  --vocab N                      vocabulary (default 50257)\n"
        "  --ctx N                        max positions (default 1024)\n"
        "  --frozen LIST                  comma list of token,pos,ln,attn,mlp,head; gpt4ts = attn,mlp\n"
        "time series (patch inputs; --seq is then the lookback):\n"
        "  --input tokens|patches         --head lm|regression|next-patch|patch-decode\n"
        "  --patch N --stride N --lookback N --channels N --horizon N\n"
        "  --preset allm4ts-stage1        aLLM4TS's stage 1 as scripted (2048 windows x 64 patches of\n"
        "                                 16, 6 blocks, width 768) and a report: the plan on one card\n"
        "                                 (--budget, default 24GiB), what fits on one, what two buy;\n"
        "                                 --png FILE charts the options; every flag, before or after\n"
        "                                 it, changes it\n"
        "batch and memory knobs:\n"
        "  --batch B                      the global batch: sequences (windows) a step over every device\n"
        "                                 and accumulation step; each device's micro-batch is\n"
        "                                 B / (K x data-parallel devices), printed beside it (default 4 x K)\n"
        "  --seq T --accum K              sequence length, accumulation steps\n"
        "  --precision fp32|bf16|fp16     --tf32 (fp32 matrix products on tensor cores)\n"
        "  --recompute none|selective|full\n"
        "  --checkpoint-every K|sqrt      full recompute: keep every K-th layer input\n"
        "                                 (implies --recompute full when that is not given)\n"
        "  --classifier-chunk N           the LM head and loss over N tokens at a time: the logits\n"
        "                                 arena holds N rows, not batch x seq; each chunk after the first\n"
        "                                 reads and writes wte's gradient again (the step time counts it)\n"
        "  --inference                    a context for generation and evaluation only: weights,\n"
        "                                 KV cache, logits, two layers' activations; no gradients,\n"
        "                                 moments or master weights (--sweep inference=0,1 compares)\n"
        "  --inference-weights fp32|bf16  an inference context's weights; bf16 halves them (implies\n"
        "                                 --inference and, unless --backend is given, the CPU\n"
        "                                 backend, the one that runs bf16 weights)\n"
        "  --kv-batch N --kv-len N        the KV cache of generation: N sequences at once,\n"
        "                                 positions each (default --ctx)\n"
        "devices:\n"
        "  --devices N --mode none|ddp|split   (mode defaults to ddp when N > 1)\n"
        "  --stages L1,L2,...             split: the first layer of stages 1, 2, ... (stage 0\n"
        "                                 starts at 0); implies --mode split and, when not\n"
        "                                 given, --devices (values + 1); default: the planner's\n"
        "  --shard                        ddp: shard the optimizer state over the devices (ZeRO-1)\n"
        "  --backend cpu|cuda             default cuda\n"
        "  --threads N                    CPU backend threads (its workspace depends on them)\n"
        "step time: one model for every time printed (plan, advisor, sweeps, the multi-device table):\n"
        "  --gpu rtx3090|rtx4090|a100-40|a100|h100   the card (default rtx3090): its datasheet peaks scaled\n"
        "                                 by what this project's kernels reached on an H100 (GPT-2 124M, bf16,\n"
        "                                 B=8 19.0 ms, B=16 36.5 ms a step); a model, not a measurement\n"
        "  --gpu custom --gpu-peak TFLOPS,GBPS   a card of --budget bytes: its dense peak in TFLOP/s of the\n"
        "                                 planned precision and its memory GB/s (without them: no time)\n"
        "  --cpu-speed GFLOPS,ROWS,GBPS   --backend cpu: this machine's matrix-product peak, the rows at half\n"
        "                                 of it (0: the rate holds at every size) and its memory GB/s; default:\n"
        "                                 measured at the plan's MLP product (gpt2rt_cpu_speed_measure, 0.1-0.5 s).\n"
        "                                 The CPU model adds the element-wise work at memory speed\n"
        "  --link pcie4|pcie4-host|nvlink|GBPS   the link between the devices, GB/s each way (default:\n"
        "                                 pcie4 for one time; the table with --devices N > 1 shows all three)\n"
        "questions:\n"
        "  --budget SIZE                  bytes per device: 24GiB, 40GB, 512MiB, 80G (G = GiB)\n"
        "                                 prints whether it fits and what gpt2rt_fit suggests\n"
        "  --margin SIZE|P%%              headroom the advisor keeps below the budget (default: a quarter\n"
        "                                 of the overhead estimate + 5%% of the budget); verdicts: fits,\n"
        "                                 fits with less than the margin, does not fit\n"
        "  --allow-precision              let the advisor also switch fp32 -> bf16\n"
        "  --allow-shard                  let the advisor also switch ZeRO-1 sharding (ddp)\n"
        "  --allow-classifier             let the advisor also try --classifier-chunk 1024\n"
        "  --sweep KNOB=V1,V2,...         KNOB: batch|seq|accum|recompute|precision|layers|\n"
        "                                 devices|mode|inference|chunk; recompute values: none, selective,\n"
        "                                 full, full:K, full:sqrt\n"
        "  --timeline                     the bytes in use at each point of one step (forward layer by layer,\n"
        "                                 the classifier, backward layer by layer, the update) by category, and\n"
        "                                 where PyTorch would hold more (in --json: always, as \"timeline\")\n"
        "  --json                         the plan, the time model and (with --budget) the advisor's\n"
        "                                 answer as one JSON object; with --sweep, each value's plan (not with\n"
        "                                 --preset or --png)\n"
        "  --png FILE                     with --sweep: a stacked bar chart of the sweep (needs stb,\n"
        "                                 libstb-dev; without it the table, and a line saying so)\n"
        "  --capabilities                 which backend, mode, input, head, precision and feature\n"
        "                                 gpt2rt.h runs, and the rules that refuse the rest, as Markdown\n"
        "                                 (what gpt2rt-caps prints; docs/support.md)\n"
        "\n"
        "exit status: 0 ok (with --budget: it fits, or the advisor found a config that does, with\n"
        "or without the margin;\n"
        "with --sweep --budget: some value fits), 1 nothing fits, 2 bad arguments or config.\n"
        "\n"
        "examples:\n"
        "  gpt2rt-mem --model 355M --batch 16 --seq 1024 --budget 24GiB\n"
        "  gpt2rt-mem --model 124M --seq 1024 --sweep batch=1,2,4,8,16,32 --budget 24GiB --png mem.png\n"
        "  gpt2rt-mem --model 1558M --batch 4 --seq 1024 --devices 2 --mode split --budget 40GB\n"
        "  gpt2rt-mem --model 1558M --batch 4 --seq 1024 --stages 30 --budget 40GB\n"
        "  gpt2rt-mem --model 124M --batch 64 --accum 4 --devices 2 --gpu rtx3090 --budget 24GiB\n"
        "  gpt2rt-mem --model 124M --batch 8 --precision bf16 --gpu h100 --budget 80GiB --json\n"
        "  gpt2rt-mem --preset allm4ts-stage1 --png build/allm4ts_mem.png\n");
}

/* ---- parsing values ---- */

/* a bounded copy that truncates quietly: snprintf("%s") makes gcc -O3 warn
   about the truncation, which here is what we want (labels, text to draw) */
static void copy_text(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) dst[i] = src[i];
    dst[i] = 0;
}

static long parse_int(const char *arg, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        die_arg(arg, "'%s' is not an integer in [%ld, %ld]", s, lo, hi);
    return v;
}

/* "24GiB", "40GB", "512MiB", "1.5 TiB", "80G" (a bare letter is binary, as GPUs count) */
static int parse_size(const char *s, uint64_t *out) {
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1.0}, {"b", 1.0},
        {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0.0)) return 0;
    while (*end == ' ') end++;
    char unit[8] = {0};
    for (int i = 0; end[i]; i++) {
        if (i >= 7) return 0;
        unit[i] = (char)tolower((unsigned char)end[i]);
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(unit, units[i].unit)) {
            double bytes = v * units[i].mult;
            if (bytes >= 1.8e19 || bytes < 1.0) return 0;
            *out = (uint64_t)(bytes + 0.5);
            return 1;
        }
    return 0;
}

static unsigned parse_frozen(const char *arg, const char *list) {
    unsigned bits = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "token")) bits |= GPT2RT_GROUP_TOKEN_EMBED;
        else if (!strcmp(tok, "pos")) bits |= GPT2RT_GROUP_POS_EMBED;
        else if (!strcmp(tok, "ln")) bits |= GPT2RT_GROUP_LAYERNORM;
        else if (!strcmp(tok, "attn")) bits |= GPT2RT_GROUP_ATTENTION;
        else if (!strcmp(tok, "mlp")) bits |= GPT2RT_GROUP_MLP;
        else if (!strcmp(tok, "head")) bits |= GPT2RT_GROUP_HEAD;
        else if (!strcmp(tok, "gpt4ts")) bits |= GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
        else if (!strcmp(tok, "none")) {}
        else die_arg(arg, "'%s' is not one of token,pos,ln,attn,mlp,head,gpt4ts,none", tok);
    }
    return bits;
}

static int same_ci(const char *a, const char *b) { /* strcasecmp is POSIX, not C11 */
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

static int set_model(gpt2rt_config *c, const char *name) {
    static const struct { const char *a, *b; int L, H, C; } sizes[] = {
        {"124M", "gpt2", 12, 12, 768},
        {"355M", "gpt2-medium", 24, 16, 1024},
        {"774M", "gpt2-large", 36, 20, 1280},
        {"1558M", "gpt2-xl", 48, 25, 1600},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (same_ci(name, sizes[i].a) || same_ci(name, sizes[i].b)) {
            c->n_layer = sizes[i].L; c->n_head = sizes[i].H; c->n_embd = sizes[i].C;
            return 1;
        }
    return 0;
}

/* ---- the knobs a sweep can turn ----
   One setter for the command line and for --sweep, so a value means the same in
   both. Returns NULL, or why the value is wrong. */

typedef struct knobs {
    gpt2rt_config cfg;   /* batch_size unset: finish() derives it from global */
    int global;          /* --batch: sequences (or windows) a step, over every device; 0: 4 x accumulation */
    int mode_given;      /* --mode given: keep it; else it follows --devices */
    int recompute_given; /* --recompute given: --checkpoint-every does not override it */
} knobs;

static int to_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

static const char *set_recompute(gpt2rt_config *c, const char *v) {
    int ck = c->checkpoint_every; /* plain "full" keeps a --checkpoint-every given before */
    c->checkpoint_every = 0;      /* the library rejects it outside full recompute */
    if (!strcmp(v, "none")) { c->recompute = GPT2RT_RECOMPUTE_NONE; return NULL; }
    if (!strcmp(v, "selective")) { c->recompute = GPT2RT_RECOMPUTE_SELECTIVE; return NULL; }
    if (strncmp(v, "full", 4) || (v[4] && v[4] != ':')) return "is not none, selective, full, full:K or full:sqrt";
    c->recompute = GPT2RT_RECOMPUTE_FULL;
    if (!v[4]) { c->checkpoint_every = ck; return NULL; }
    if (!strcmp(v + 5, "sqrt")) { c->checkpoint_every = GPT2RT_CHECKPOINT_SQRT; return NULL; }
    return to_int(v + 5, 1, 1 << 20, &c->checkpoint_every) ? NULL : "full:K needs a positive K (or full:sqrt)";
}

static const char *set_knob(knobs *k, const char *knob, const char *v) {
    gpt2rt_config *c = &k->cfg;
    if (!strcmp(knob, "batch")) return to_int(v, 1, 1 << 20, &k->global) ? NULL : "is not an integer in [1, 1048576]";
    if (!strcmp(knob, "seq")) return to_int(v, 1, 1 << 20, &c->seq_len) ? NULL : "is not a positive integer";
    if (!strcmp(knob, "accum")) return to_int(v, 1, 1 << 20, &c->grad_accum) ? NULL : "is not a positive integer";
    if (!strcmp(knob, "layers")) return to_int(v, 1, 1 << 20, &c->n_layer) ? NULL : "is not a positive integer";
    if (!strcmp(knob, "devices"))
        return to_int(v, 1, GPT2RT_MAX_DEVICES, &c->n_devices) ? NULL : "is not an integer in [1, 8]";
    if (!strcmp(knob, "recompute")) { k->recompute_given = 1; return set_recompute(c, v); }
    if (!strcmp(knob, "precision")) {
        if (!strcmp(v, "fp32")) c->precision = GPT2RT_PRECISION_FP32;
        else if (!strcmp(v, "bf16")) c->precision = GPT2RT_PRECISION_BF16;
        else if (!strcmp(v, "fp16")) c->precision = GPT2RT_PRECISION_FP16;
        else return "is not fp32, bf16 or fp16";
        return NULL;
    }
    if (!strcmp(knob, "mode")) {
        k->mode_given = 1;
        if (!strcmp(v, "none")) c->parallel = GPT2RT_PARALLEL_NONE;
        else if (!strcmp(v, "ddp")) c->parallel = GPT2RT_PARALLEL_DATA;
        else if (!strcmp(v, "split")) c->parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
        else return "is not none, ddp or split";
        return NULL;
    }
    if (!strcmp(knob, "inference")) return to_int(v, 0, 1, &c->inference) ? NULL : "is not 0 or 1";
    if (!strcmp(knob, "chunk")) return to_int(v, 0, 1 << 30, &c->classifier_chunk) ? NULL : "is not an integer >= 0";
    return "is not a knob (batch, seq, accum, recompute, precision, layers, devices, mode, inference, chunk)";
}

/* the data-parallel replicas a global batch is divided over */
static int replicas(const gpt2rt_config *c) { return c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1; }

/* the global batch of a knob set: --batch, or 4 sequences a micro-batch */
static int64_t global_of(const knobs *k) {
    return k->global ? k->global : (int64_t)4 * (k->cfg.grad_accum > 0 ? k->cfg.grad_accum : 1);
}

/* What the flags leave implicit: the mode follows the device count unless given,
   so `--sweep devices=1,2,4` means one device, then DDP over 2 and 4; the micro-batch
   is the global batch over accumulation and data-parallel devices. NULL, or why the
   batch does not divide (why: cap bytes). */
static const char *finish(const knobs *k, gpt2rt_config *out, char *why, size_t cap) {
    gpt2rt_config c = k->cfg;
    if (!k->mode_given) c.parallel = c.n_devices > 1 ? GPT2RT_PARALLEL_DATA : GPT2RT_PARALLEL_NONE;
    /* the tool plans real runs: T defaults to GPT-2's whole context, not the library's toy 64 */
    if (!c.seq_len) c.seq_len = c.max_seq_len && c.max_seq_len < 1024 ? c.max_seq_len : 1024;
    int64_t global = global_of(k), accum = c.grad_accum > 0 ? c.grad_accum : 1, reps = replicas(&c);
    c.batch_size = (int)(global / (accum * reps));
    *out = c;
    if (global % (accum * reps) == 0) return NULL;
    if (reps > 1)
        snprintf(why, cap, "--batch %lld does not divide into %lld accumulation steps x %lld data-parallel devices "
                 "(%lld micro-batches of equal size); --batch is the global batch of a step", (long long)global,
                 (long long)accum, (long long)reps, (long long)(accum * reps));
    else
        snprintf(why, cap, "--batch %lld does not divide into %lld accumulation steps; --batch is the global batch "
                 "of a step", (long long)global, (long long)accum);
    return why;
}

/* ---- the command line ---- */

/* ---- the time model: one for every time this tool prints ----

   gpt2rt_plan_step_time (the formulas are in gpt2rt.h's manual) on a card's
   effective figures: its datasheet peaks scaled by what this project's kernels reach
   on an H100, measured there. Calibration, GPT-2 124M, T = 1024, one H100 80GB HBM3
   (SXM), CUDA 13.0 (make bench-gpu): a bf16 step of B = 8 took 19.0 ms and of B = 16
   36.5 ms; B = 8 with selective recompute, full recompute (every layer, every 3rd),
   and accumulation 2 x 4 and 4 x 2 took 19.7, 23.2, 22.3, 21.7 and 28.6 ms. 450
   TFLOP/s of bf16 matrix products (45% of the 989.4 peak) with the half-efficiency
   point at 640 tokens a micro-batch puts all seven within 4%.
   No fp32 step has been timed on the GPU; its figures come from the kernel lab's
   per-kernel rates on the same card (kernels/README.md): tf32 matrix products at
   85-369 TFLOP/s (32.7 ms of a B = 8 step), attention on the fp32 path at 1.9 / 3.2
   TFLOP/s forward / backward (211 ms) and the rest as measured in bf16, about 247 ms,
   13x the bf16 step; without tf32, matrix products at an assumed 50 TFLOP/s (75% of
   the fp32 peak) make it 336 ms, 17.7x. Other cards: bf16 scales with their bf16
   tensor-core peak; fp32 with their fp32 peak; tf32's matrix products with their tf32
   peak and its attention with their fp32 peak. */

typedef struct gpu_spec {
    const char *name, *label;
    double fp32, tf32, b16, mem; /* datasheet: FLOP/s dense, bytes/s */
    double nvlink;               /* bytes/s each way between two of them, 0: none */
    uint64_t bytes;              /* memory of one card */
} gpu_spec;

static const gpu_spec GPUS[] = {
    {"rtx3090", "RTX 3090", 35.6e12, 35.6e12, 71e12, 936e9, 56.25e9, (uint64_t)24 << 30},
    {"rtx4090", "RTX 4090", 82.6e12, 82.6e12, 165.2e12, 1008e9, 0, (uint64_t)24 << 30},
    {"a100-40", "A100 SXM4 40GB", 19.5e12, 156e12, 312e12, 1555e9, 300e9, (uint64_t)40 << 30},
    {"a100", "A100 SXM4 80GB", 19.5e12, 156e12, 312e12, 2039e9, 300e9, (uint64_t)80 << 30},
    {"h100", "H100 SXM5 80GB", 67e12, 494.7e12, 989.4e12, 3350e9, 450e9, (uint64_t)80 << 30},
};
#define N_GPUS (sizeof GPUS / sizeof GPUS[0])

/* --gpu custom: the card's peaks from --gpu-peak (0: not given, so no time) */
static gpu_spec CUSTOM_GPU = {"custom", "custom card", 0, 0, 0, 0, 0, 0};

/* the CPU backend's speed: --cpu-speed, else measured once (gpt2rt_cpu_speed_measure) */
static gpt2rt_cpu_speed CPU_SPEED;
static int cpu_speed_of(const gpt2rt_config *c, gpt2rt_cpu_speed *s) {
    if (CPU_SPEED.matmul_peak > 0) { *s = CPU_SPEED; return 1; }
#ifdef __EMSCRIPTEN__
    (void)c; /* the browser's WebAssembly is not the library's native code on this CPU: no time without --cpu-speed */
    return 0;
#else
    return gpt2rt_cpu_speed_measure(c, 0, s) == GPT2RT_OK;
#endif
}

/* the H100 calibration above */
#define CAL_B16 450e12   /* bf16 FLOP/s reached of 989.4 */
#define CAL_FP32 22.7e12 /* fp32 FLOP/s reached of 67 */
#define CAL_TF32 30.9e12 /* tf32 FLOP/s reached: 32.7 ms of products at 494.7 peak, 211 ms of attention at 67 */
#define CAL_HALF 640.0   /* tokens a micro-batch at half efficiency */

static gpt2rt_hardware gpu_model(const gpu_spec *g, double link_bw) {
    gpt2rt_hardware hw;
    const gpu_spec *h = &GPUS[N_GPUS - 1];
    if (g == &CUSTOM_GPU) { /* its peak, at the efficiency the H100 steps reached */
        memset(&hw, 0, sizeof hw);
        hw.flops_16 = CAL_B16 * g->b16 / h->b16;
        hw.flops_fp32 = hw.flops_tf32 = CAL_FP32 * g->fp32 / h->fp32;
        hw.mem_bw = g->mem;
        hw.link_bw = link_bw > 0 ? link_bw : 24e9;
        hw.half_tokens = CAL_HALF;
        return hw;
    }
    double mm = 32.7 * h->tf32 / g->tf32, at = 211.0 * h->fp32 / g->fp32; /* ms of a B = 8 tf32 step */
    memset(&hw, 0, sizeof hw);
    hw.flops_16 = CAL_B16 * g->b16 / h->b16;
    hw.flops_fp32 = CAL_FP32 * g->fp32 / h->fp32;
    hw.flops_tf32 = CAL_TF32 * (32.7 + 211.0) / (mm + at);
    if (hw.flops_tf32 < hw.flops_fp32) hw.flops_tf32 = hw.flops_fp32; /* tf32 is never slower: the card may ignore it */
    hw.mem_bw = g->mem;
    hw.link_bw = link_bw > 0 ? link_bw : 24e9;
    hw.half_tokens = CAL_HALF;
    return hw;
}

/* one step of c on the card (CPU: on this machine), term by term; 0: no time (a
   custom card without --gpu-peak, CPU on several devices, or a config the model refuses) */
static int model_step(const gpt2rt_config *c, const gpu_spec *g, double link_bw, gpt2rt_step_time *st) {
    memset(st, 0, sizeof *st);
    if (c->backend != GPT2RT_BACKEND_CUDA) {
        gpt2rt_cpu_speed sp;
        return cpu_speed_of(c, &sp) && gpt2rt_plan_cpu_time(c, &sp, st, NULL, 0) == GPT2RT_OK && st->total > 0;
    }
    if (!(g->b16 > 0)) return 0;
    gpt2rt_hardware hw = gpu_model(g, link_bw);
    return gpt2rt_plan_step_time(c, &hw, c->shard_optimizer, st, NULL, 0) == GPT2RT_OK && st->total > 0;
}

typedef struct link_spec { const char *name, *label; double bw; } link_spec;

/* aLLM4TS stage 1 as its scripts run it (Bian et al., ICML 2024): windows of 1024
   steps cut into 64 patches of 16 (stride 16), the first 6 GPT-2 blocks, next-patch
   MSE at every position, 2048 windows a step, every group trained (patch inputs have
   no wte). Channel independence: each window is one univariate series, so the
   plan's B counts them with n_channels = 1 (B windows of M channels are B*M series). */
static void set_allm4ts_stage1(gpt2rt_config *c) {
    c->input = GPT2RT_INPUT_PATCHES;
    c->head = GPT2RT_HEAD_NEXT_PATCH;
    c->patch_len = 16; c->patch_stride = 16; c->n_channels = 1; c->seq_len = 1024;
    c->n_layer = 6; c->n_head = 12; c->n_embd = 768;
    c->grad_accum = 1;
    c->frozen = 0;
}

/* the flags that take no value; every other option takes one (--opt V or --opt=V) */
static int is_flag_option(const char *a) {
    static const char *flags[] = {"--help", "-h", "--tf32", "--allow-precision", "--allow-shard", "--allow-classifier",
                                  "--shard", "--inference", "--json", "--capabilities", "--timeline"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(a, flags[i])) return 1;
    return 0;
}

static int is_value_option(const char *a) { return !strncmp(a, "--", 2) && !is_flag_option(a); }

/* the time model's link for one line of output: --link, else PCIe 4.0 x16 */
#define LINK_PCIE4 24e9
#define LINK_HOST 10e9

typedef struct options {
    knobs k;
    const gpu_spec *gpu;
    link_spec link; /* bw 0: compare the three */
    uint64_t budget; /* 0: none given */
    uint64_t margin; /* --margin in bytes; with margin_given 0: the default (see margin_of) */
    double margin_frac; /* --margin P%: that fraction of the budget instead */
    int margin_given, json, timeline;
    unsigned allow;
    const char *sweep; /* "knob=v1,v2" */
    const char *png;
    const char *preset; /* --preset: a named workload, answered as a report */
} options;

static double link_bw_of(const options *o) {
    if (o->link.name && !strcmp(o->link.name, "custom")) return o->link.bw;
    if (o->link.name && !strcmp(o->link.name, "nvlink")) return o->gpu->nvlink;
    if (o->link.name && !strcmp(o->link.name, "pcie4-host")) return LINK_HOST;
    return LINK_PCIE4;
}

/* "one RTX 3090", "2 x RTX 3090 over a 24 GB/s link" */
static const char *gpu_words(const options *o, int n_devices) {
    static char buf[96];
    if (n_devices > 1) snprintf(buf, sizeof buf, "%d x %s over a %.0f GB/s link", n_devices, o->gpu->label,
                                link_bw_of(o) / 1e9);
    else snprintf(buf, sizeof buf, "one %s", o->gpu->label);
    return buf;
}

/* The advisor's headroom on one device: what the overhead estimate may be off by
   (a quarter of it: 150 MiB of the 600 MiB CUDA context and cuBLASLt estimate; on one
   H100 it was 62 MiB high) plus 5% of the budget, for fragmentation and whatever else
   the process holds. --margin replaces it. */
static uint64_t margin_of(const options *o, const gpt2rt_memory_plan *p) {
    if (o->margin_given) return o->margin_frac > 0 ? (uint64_t)(o->margin_frac * (double)o->budget) : o->margin;
    uint64_t over = 0;
    for (int d = 0; d < p->n_devices; d++)
        if (p->overhead[d] > over) over = p->overhead[d];
    return over / 4 + o->budget / 20;
}

static void parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    CUSTOM_GPU.fp32 = CUSTOM_GPU.tf32 = CUSTOM_GPU.b16 = CUSTOM_GPU.mem = 0; /* the page calls this again and again */
    CUSTOM_GPU.bytes = 0;
    memset(&CPU_SPEED, 0, sizeof CPU_SPEED);
    gpt2rt_config *c = &o->k.cfg;
    c->backend = GPT2RT_BACKEND_CUDA;
    int ck = 0, ck_given = 0, L = 0, H = 0, C = 0, stages = 0, backend_given = 0, w16 = 0;
    o->allow = GPT2RT_FIT_DEFAULT;
    /* a preset is a base: it is applied first, and every flag given, before or after
       it, changes it */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strncmp(a, "--preset=", 9)) v = a + 9;
        else if (!strcmp(a, "--preset") && i + 1 < argc) v = argv[++i];
        else if (!strncmp(a, "--", 2) && strchr(a, '=')) continue;
        else if (is_value_option(a)) { i++; continue; }
        if (!v) continue;
        if (strcmp(v, "allm4ts-stage1")) die_arg("--preset", "'%s' is not allm4ts-stage1", v);
        o->preset = "allm4ts-stage1";
        set_allm4ts_stage1(c);
        o->k.global = 2048;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#ifdef __EMSCRIPTEN__
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "--capabilities"))
            die_arg(a, "prints text, not a plan: run it in a shell");
#endif
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); exit(0); }
        if (!strcmp(a, "--capabilities")) exit(cli_capabilities());
        if (!strcmp(a, "--tf32")) { c->tf32 = 1; continue; }
        if (!strcmp(a, "--allow-precision")) { o->allow |= GPT2RT_FIT_PRECISION; continue; }
        if (!strcmp(a, "--allow-shard")) { o->allow |= GPT2RT_FIT_SHARD; continue; }
        if (!strcmp(a, "--allow-classifier")) { o->allow |= GPT2RT_FIT_CLASSIFIER; continue; }
        if (!strcmp(a, "--shard")) { c->shard_optimizer = 1; continue; }
        if (!strcmp(a, "--inference")) { c->inference = 1; continue; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--timeline")) { o->timeline = 1; continue; }
        if (strncmp(a, "--", 2)) die_arg(a, "options start with --");
        /* every other option takes a value: --opt V or --opt=V */
        char name[64];
        const char *eq = strchr(a, '='), *v;
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
            if (i + 1 >= argc) die_arg(a, "needs a value");
            v = argv[++i];
        }
        const char *err;
        if (!strcmp(name, "--model")) { if (!set_model(c, v)) die_arg(name, "'%s' is not 124M, 355M, 774M or 1558M", v); }
        else if (!strcmp(name, "--layers")) L = (int)parse_int(name, v, 1, 1024);
        else if (!strcmp(name, "--heads")) H = (int)parse_int(name, v, 1, 1024);
        else if (!strcmp(name, "--embd")) C = (int)parse_int(name, v, 1, 65536);
        else if (!strcmp(name, "--vocab")) c->vocab_size = (int)parse_int(name, v, 1, 1 << 24);
        else if (!strcmp(name, "--ctx")) c->max_seq_len = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--threads")) c->n_threads = (int)parse_int(name, v, 1, 1024);
        else if (!strcmp(name, "--kv-batch")) c->kv_batch = (int)parse_int(name, v, 1, 1 << 16);
        else if (!strcmp(name, "--kv-len")) c->kv_len = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--classifier-chunk")) c->classifier_chunk = (int)parse_int(name, v, 0, 1 << 30);
        else if (!strcmp(name, "--frozen")) c->frozen = parse_frozen(name, v);
        else if (!strcmp(name, "--checkpoint-every")) {
            ck_given = 1;
            ck = !strcmp(v, "sqrt") ? GPT2RT_CHECKPOINT_SQRT : (int)parse_int(name, v, 1, 1024);
        } else if (!strcmp(name, "--inference-weights")) {
            if (!strcmp(v, "fp32")) c->inference_weights = GPT2RT_PRECISION_FP32;
            else if (!strcmp(v, "bf16")) { c->inference_weights = GPT2RT_PRECISION_BF16; c->inference = 1; w16 = 1; }
            else die_arg(name, "'%s' is not fp32 or bf16", v);
        } else if (!strcmp(name, "--backend")) {
            backend_given = 1;
            if (!strcmp(v, "cpu")) c->backend = GPT2RT_BACKEND_CPU;
            else if (!strcmp(v, "cuda")) c->backend = GPT2RT_BACKEND_CUDA;
            else die_arg(name, "'%s' is not cpu or cuda", v);
        } else if (!strcmp(name, "--budget")) {
            if (!parse_size(v, &o->budget)) die_arg(name, "'%s' is not a size like 24GiB, 40GB or 512MiB", v);
        } else if (!strcmp(name, "--margin")) {
            size_t len = strlen(v);
            char *end;
            o->margin_given = 1;
            if (len > 1 && v[len - 1] == '%') {
                errno = 0;
                double pc = strtod(v, &end);
                if (end != v + len - 1 || errno || !(pc >= 0 && pc < 100)) die_arg(name, "'%s' is not a percentage in [0, 100)", v);
                o->margin_frac = pc / 100.0;
            } else if (strcmp(v, "0") && !parse_size(v, &o->margin))
                die_arg(name, "'%s' is not a size like 1GiB or 512MiB, 0, or a percentage like 5%%", v);
        } else if (!strcmp(name, "--gpu")) {
            o->gpu = NULL;
            for (size_t g = 0; g < N_GPUS; g++)
                if (same_ci(v, GPUS[g].name)) o->gpu = &GPUS[g];
            if (same_ci(v, "custom")) o->gpu = &CUSTOM_GPU;
            if (!o->gpu) die_arg(name, "'%s' is not rtx3090, rtx4090, a100-40, a100, h100 or custom", v);
        } else if (!strcmp(name, "--gpu-peak")) {
            char *end;
            errno = 0;
            double tf = strtod(v, &end), gb = *end == ',' ? strtod(end + 1, &end) : -1;
            if (errno || *end || !(tf > 0 && tf < 1e6) || !(gb > 0 && gb < 1e6))
                die_arg(name, "'%s' is not TFLOPS,GBPS (the card's dense peak in TFLOP/s of the planned precision and "
                        "its memory in GB/s, e.g. 989,3350)", v);
            CUSTOM_GPU.fp32 = CUSTOM_GPU.tf32 = CUSTOM_GPU.b16 = tf * 1e12;
            CUSTOM_GPU.mem = gb * 1e9;
        } else if (!strcmp(name, "--cpu-speed")) {
            char *end;
            errno = 0;
            double gf = strtod(v, &end), rows = *end == ',' ? strtod(end + 1, &end) : -1,
                   gb = *end == ',' ? strtod(end + 1, &end) : -1;
            if (errno || *end || !(gf > 0 && gf < 1e7) || !(rows >= 0 && rows < 1e6) || !(gb > 0 && gb < 1e6))
                die_arg(name, "'%s' is not GFLOPS,ROWS,GBPS (matrix products' peak in GFLOP/s, the rows at half of it, "
                        "memory in GB/s, e.g. 60,300,8; without it the tool measures them)", v);
            CPU_SPEED.matmul_peak = gf * 1e9;
            CPU_SPEED.half_rows = rows;
            CPU_SPEED.mem_bw = gb * 1e9;
        } else if (!strcmp(name, "--link")) {
            char *end;
            double gbps = strtod(v, &end);
            if (!strcmp(v, "pcie4") || !strcmp(v, "pcie4-host") || !strcmp(v, "nvlink")) o->link.name = v;
            else if (end != v && !*end && gbps > 0 && gbps < 1e5) { o->link.name = "custom"; o->link.bw = gbps * 1e9; }
            else die_arg(name, "'%s' is not pcie4, pcie4-host, nvlink or a bandwidth in GB/s", v);
        } else if (!strcmp(name, "--stages")) {
            const char *q = v;
            for (int st = 1;; st++) {
                char num[16];
                size_t len = strcspn(q, ",");
                if (st >= GPT2RT_MAX_DEVICES) die_arg(name, "'%s' has more than %d values", v, GPT2RT_MAX_DEVICES - 1);
                if (!len || len >= sizeof num) die_arg(name, "'%s' is not a comma list of layer numbers", v);
                memcpy(num, q, len);
                num[len] = 0;
                c->stage_first_layer[st] = (int)parse_int(name, num, 1, 1 << 20);
                stages = st + 1;
                if (!q[len]) break;
                q += len + 1;
            }
            o->k.mode_given = 1;
            c->parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
        } else if (!strcmp(name, "--preset")) {
            /* applied above, before every other flag */
        } else if (!strcmp(name, "--input")) {
            if (!strcmp(v, "tokens")) c->input = GPT2RT_INPUT_TOKENS;
            else if (!strcmp(v, "patches")) c->input = GPT2RT_INPUT_PATCHES;
            else die_arg(name, "'%s' is not tokens or patches", v);
        } else if (!strcmp(name, "--head")) {
            if (!strcmp(v, "lm")) c->head = GPT2RT_HEAD_LM;
            else if (!strcmp(v, "regression")) c->head = GPT2RT_HEAD_REGRESSION;
            else if (!strcmp(v, "next-patch")) c->head = GPT2RT_HEAD_NEXT_PATCH;
            else if (!strcmp(v, "patch-decode")) c->head = GPT2RT_HEAD_PATCH_DECODE;
            else die_arg(name, "'%s' is not lm, regression, next-patch or patch-decode", v);
        } else if (!strcmp(name, "--patch")) c->patch_len = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--stride")) c->patch_stride = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--channels")) c->n_channels = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--horizon")) c->horizon = (int)parse_int(name, v, 1, 1 << 20);
        else if (!strcmp(name, "--lookback")) c->seq_len = (int)parse_int(name, v, 1, 1 << 24);
        else if (!strcmp(name, "--sweep")) o->sweep = v;
        else if (!strcmp(name, "--png")) o->png = v;
        else if (!strcmp(name, "--batch") || !strcmp(name, "--seq") || !strcmp(name, "--accum") ||
                 !strcmp(name, "--precision") || !strcmp(name, "--recompute") || !strcmp(name, "--devices") ||
                 !strcmp(name, "--mode")) {
            if ((err = set_knob(&o->k, name + 2, v))) die_arg(name, "'%s' %s", v, err);
        } else die_arg(name, "unknown option");
    }
    if (stages && !c->n_devices) c->n_devices = stages; /* else the library names any mismatch */
    if (w16 && !backend_given) c->backend = GPT2RT_BACKEND_CPU; /* bf16 weights run on the CPU backend */
    if (L) c->n_layer = L;
    if (H) c->n_head = H;
    if (C) c->n_embd = C;
    if (ck_given) {
        if (!o->k.recompute_given) c->recompute = GPT2RT_RECOMPUTE_FULL;
        c->checkpoint_every = ck;
    }
    if (o->png && !o->sweep && !o->preset) die_arg("--png", "needs --sweep or --preset (it draws one bar per sweep value or option)");
    if (!o->gpu) o->gpu = &GPUS[0];
    if (o->gpu == &CUSTOM_GPU) CUSTOM_GPU.bytes = o->budget;
    if (CUSTOM_GPU.b16 > 0 && o->gpu != &CUSTOM_GPU)
        die_arg("--gpu-peak", "'%.6g,%.6g' applies to --gpu custom (%s's peaks are known)", CUSTOM_GPU.b16 / 1e12,
                CUSTOM_GPU.mem / 1e9, o->gpu->name);
    if (o->link.name && !strcmp(o->link.name, "nvlink") && !o->gpu->nvlink) die_arg("--link", "this GPU has no NVLink");
}

/* ---- printing one plan ---- */

static uint64_t device_bytes(const gpt2rt_memory_plan *p, int dev) { return p->total[dev] + p->overhead[dev]; }

static int fullest_device(const gpt2rt_memory_plan *p) {
    int at = 0;
    for (int d = 1; d < p->n_devices; d++)
        if (device_bytes(p, d) > device_bytes(p, at)) at = d;
    return at;
}

static uint64_t fullest_bytes(const gpt2rt_memory_plan *p) { return device_bytes(p, fullest_device(p)); }

typedef enum verdict { FITS, FITS_LESS_MARGIN, NO_FIT } verdict;
static const char *VERDICT[] = {"fits", "fits with less than the margin", "does not fit"};

static verdict verdict_of(uint64_t need, uint64_t budget, uint64_t margin) {
    return need + margin <= budget ? FITS : need <= budget ? FITS_LESS_MARGIN : NO_FIT;
}

/* the knob that shrinks each category: the lesson of the table */
static const char *category_hint(int cat) {
    switch (cat) {
    case GPT2RT_MEM_WEIGHTS: return "model size; --precision bf16 halves it (--inference-weights bf16 for inference); --mode split divides it";
    case GPT2RT_MEM_MASTER: return "fp32 copy kept by bf16/fp16 for the update";
    case GPT2RT_MEM_GRADS: return "trained parameters: --frozen, --mode split; none with --inference";
    case GPT2RT_MEM_MOMENTS: return "AdamW m and v, 8 bytes per trained parameter: --frozen, --mode split";
    case GPT2RT_MEM_ACTIVATIONS: return "grows with --batch x --seq x layers: --recompute, smaller --batch; "
                                        "--inference keeps two layers'";
    case GPT2RT_MEM_TRANSIENT: return "one layer's backward scratch: --batch x --seq";
    case GPT2RT_MEM_LOGITS: return "--batch x --seq x vocab: a smaller --batch with more --accum, or --classifier-chunk";
    case GPT2RT_MEM_WORKSPACE: return "library scratch, roughly fixed";
    case GPT2RT_MEM_COMM: return "always 0: the library lists the category, but no plan assigns bytes to it";
    case GPT2RT_MEM_KVCACHE: return "generation: 2 x layers x --kv-batch x --kv-len x width floats";
    }
    return "";
}

/* the three largest categories of the fullest device, with their share */
static void print_shares(const gpt2rt_memory_plan *p) {
    int dev = fullest_device(p), order[GPT2RT_MEM_COUNT];
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) order[i] = i;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) /* selection sort, largest first: 10 entries */
        for (int j = i + 1; j < GPT2RT_MEM_COUNT; j++)
            if (p->bytes[dev][order[j]] > p->bytes[dev][order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    printf("\nwhere it goes%s:\n", p->n_devices > 1 ? " (fullest device)" : "");
    for (int i = 0; i < 3; i++) {
        int cat = order[i];
        if (!p->bytes[dev][cat]) break;
        printf("  %-12s %5.1f%%  %s\n", gpt2rt_mem_name((gpt2rt_mem)cat),
               100.0 * (double)p->bytes[dev][cat] / (double)device_bytes(p, dev), category_hint(cat));
    }
    if (p->overhead[dev])
        printf("  %-12s %5.1f%%  CUDA context, cuBLASLt%s (an estimate)\n", "overhead",
               100.0 * (double)p->overhead[dev] / (double)device_bytes(p, dev), p->n_devices > 1 ? ", NCCL" : "");
}

/* one line: the step of a plan on the card, or why there is none */
static void print_time_line(const options *o, const gpt2rt_memory_plan *p) {
    gpt2rt_step_time st;
    if (!model_step(&p->config, o->gpu, link_bw_of(o), &st)) {
        if (p->config.backend != GPT2RT_BACKEND_CUDA)
            printf("step time: not modelled for the CPU backend over %d devices (the CPU model is of one)\n",
                   p->n_devices);
        else printf("step time: not modelled for a custom card without its peak (--gpu-peak TFLOPS,GBPS)\n");
        return;
    }
    if (p->config.backend != GPT2RT_BACKEND_CUDA) {
        gpt2rt_cpu_speed sp;
        cpu_speed_of(&p->config, &sp);
        printf("step time (a model of this machine's CPU at %d thread%s, not a measurement of the step: matrix "
               "products at %.1f GFLOP/s (half of it at %.0f rows; the classifier's at %.1f), memory at %.1f GB/s, %s): "
               "%.3f s, %.0f tokens/s, %.3f TFLOP a step\n",
               p->config.n_threads, p->config.n_threads > 1 ? "s" : "", sp.matmul_peak / 1e9, sp.half_rows,
               (sp.head_peak > 0 ? sp.head_peak : sp.matmul_peak) / 1e9, sp.mem_bw / 1e9, CPU_SPEED.matmul_peak > 0 ? "as --cpu-speed gives them" : "as this run measured them",
               st.total, (double)p->tokens_per_step / st.total, p->flops_per_step / 1e12);
        return;
    }
    printf("step time (a model of %s, calibrated on this project's H100 steps; not a measurement): %.3f s, "
           "%.0f tokens/s, %.1f TFLOP a step\n", gpu_words(o, p->n_devices), st.total,
           (double)p->tokens_per_step / st.total, p->flops_per_step / 1e12);
}

/* the global batch and what each device runs of it */
static void print_batch(const gpt2rt_config *c) {
    int reps = replicas(c);
    long long global = (long long)c->batch_size * c->grad_accum * reps;
    const char *unit = c->input == GPT2RT_INPUT_PATCHES ? "windows" : "sequences";
    printf("batch: %lld %s a step (--batch, the global batch) = micro-batch %d", global, unit, c->batch_size);
    if (reps > 1) printf(" on each of %d devices", reps);
    else if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) printf(" through %d pipeline stages", c->n_devices);
    printf(" x %d accumulation step%s\n", c->grad_accum, c->grad_accum > 1 ? "s" : "");
}

static void print_plan(const gpt2rt_memory_plan *p) {
    char buf[8192];
    gpt2rt_plan_format(p, buf, sizeof buf);
    fputs(buf, stdout);
}

/* the first lines of gpt2rt_plan_format: the resolved settings, without the table */
static void print_settings(const gpt2rt_memory_plan *p, int lines) {
    char buf[8192];
    gpt2rt_plan_format(p, buf, sizeof buf);
    char *nl = strchr(buf, '\n');
    if (nl && lines > 1) nl = strchr(nl + 1, '\n');
    if (nl) nl[1] = 0;
    fputs(buf, stdout);
}

/* the config as flags of this tool, so the advice can be pasted back */
static void print_flags(const gpt2rt_config *c) {
    static const char *prec[] = {"fp32", "fp32", "bf16", "fp16"}, *rc[] = {"none", "selective", "full"},
                      *mode[] = {"none", "ddp", "split"};
    printf("  --batch %lld --accum %d --precision %s%s --recompute %s",
           (long long)c->batch_size * c->grad_accum * replicas(c), c->grad_accum, prec[c->precision],
           c->tf32 ? " --tf32" : "", rc[c->recompute]);
    if (c->recompute == GPT2RT_RECOMPUTE_FULL) printf(" --checkpoint-every %d", c->checkpoint_every);
    if (c->n_devices > 1) printf(" --devices %d --mode %s", c->n_devices, mode[c->parallel]);
    if (c->shard_optimizer) printf(" --shard");
    for (int st = 1; c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->stage_first_layer[1] && st < c->n_devices; st++)
        printf("%s%d", st == 1 ? " --stages " : ",", c->stage_first_layer[st]);
    printf("   (micro-batch %d%s)\n", c->batch_size, replicas(c) > 1 ? " a device" : "");
}

/* ---- the step-time model over several devices ---- */

/* the links compared: PCIe 4.0 x16 with peer-to-peer, the same staged through host
   memory (GeForce cards without P2P), and the GPU's NVLink */
static int links_of(const options *o, link_spec *out) {
    link_spec all[3] = {{"pcie4", "PCIe 4.0 x16", 24e9}, {"pcie4-host", "PCIe via host", 10e9},
                        {"nvlink", "NVLink", o->gpu->nvlink}};
    if (o->link.name && !strcmp(o->link.name, "custom")) {
        out[0] = o->link;
        out[0].label = "--link";
        return 1;
    }
    int n = 0;
    for (int i = 0; i < 3; i++)
        if ((!o->link.name || !strcmp(o->link.name, all[i].name)) && all[i].bw > 0) out[n++] = all[i];
    return n;
}

/* the fullest device of a mode's plan (sharded: shard_optimizer, ZeRO-1) */
static double mode_gib(const gpt2rt_config *c, int sharded, int *ok) {
    gpt2rt_memory_plan p;
    gpt2rt_config k = *c;
    k.shard_optimizer = sharded;
    *ok = gpt2rt_plan(&k, &p) == GPT2RT_OK;
    return *ok ? GIB(device_bytes(&p, fullest_device(&p))) : 0.0;
}

static void print_step_time(const options *o, const gpt2rt_config *base) {
    const gpu_spec *g = o->gpu;
    link_spec links[3];
    int n_links = links_of(o, links);
    gpt2rt_hardware eff = gpu_model(g, 0);
    printf("\nstep-time model over %d x %s (a model, not a measurement: %.1f/%.1f/%.0f TFLOP/s fp32/tf32/bf16 "
           "reached, scaled from this project's H100 steps; %.0f GB/s memory; link GB/s each way):\n",
           base->n_devices, g->label, eff.flops_fp32 / 1e12, eff.flops_tf32 / 1e12, eff.flops_16 / 1e12, g->mem / 1e9);
    printf("  %-22s %9s %-5s %-17s %8s %8s %8s %8s %8s %8s %8s %9s %7s\n", "mode", "GiB/dev", "fits", "link", "compute",
           "update", "comm", "hidden", "bubble", "gather", "step s", "tokens/s", "vs 1");
    /* vs 1: the plan this tool makes of the same flags on one device (the global batch
       in micro-batches of global / accum), not each mode's own micro-batches run in turn */
    int64_t global1 = (int64_t)base->batch_size * base->grad_accum * (base->parallel == GPT2RT_PARALLEL_DATA ? base->n_devices : 1);
    gpt2rt_config one = *base;
    one.n_devices = 1;
    one.parallel = GPT2RT_PARALLEL_NONE;
    one.shard_optimizer = 0;
    memset(one.stage_first_layer, 0, sizeof one.stage_first_layer);
    one.batch_size = (int)(global1 / base->grad_accum);
    gpt2rt_step_time st1;
    double t_one = global1 % base->grad_accum == 0 && model_step(&one, g, 0, &st1) ? st1.total : 0.0;
    static const struct { gpt2rt_parallel mode; int sharded; const char *name; } modes[] = {
        {GPT2RT_PARALLEL_DATA, 0, "data parallel"},
        {GPT2RT_PARALLEL_DATA, 1, "data parallel, sharded"},
        {GPT2RT_PARALLEL_LAYER_SPLIT, 0, "layer split"},
    };
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        gpt2rt_config c = *base;
        c.parallel = modes[mi].mode;
        c.shard_optimizer = modes[mi].sharded;
        if (c.parallel != GPT2RT_PARALLEL_LAYER_SPLIT) /* --stages is the split's */
            memset(c.stage_first_layer, 0, sizeof c.stage_first_layer);
        /* the same global batch: data parallel splits it over the devices, layer split pipelines it */
        int64_t global = (int64_t)base->batch_size * base->grad_accum * (base->parallel == GPT2RT_PARALLEL_DATA ? base->n_devices : 1);
        int64_t per = c.parallel == GPT2RT_PARALLEL_DATA ? global / base->n_devices : global;
        if (per < 1 || global % (c.parallel == GPT2RT_PARALLEL_DATA ? base->n_devices : 1)) continue;
        c.grad_accum = (int)(per / base->batch_size > 0 && per % base->batch_size == 0 ? per / base->batch_size : 1);
        if ((int64_t)c.grad_accum * base->batch_size != per) { c.batch_size = (int)per; c.grad_accum = 1; }
        int ok;
        double gib = mode_gib(&c, modes[mi].sharded, &ok);
        if (!ok) { printf("  %-22s invalid here\n", modes[mi].name); continue; }
        gpt2rt_memory_plan p;
        gpt2rt_plan(&c, &p);
        static const char *short_verdict[] = {"yes", "tight", "NO"};
        const char *fits = !o->budget ? "" : short_verdict[verdict_of(fullest_bytes(&p), o->budget, margin_of(o, &p))];
        for (int li = 0; li < n_links; li++) {
            gpt2rt_hardware hw = gpu_model(g, links[li].bw);
            gpt2rt_step_time st;
            char err[512];
            if (gpt2rt_plan_step_time(&c, &hw, modes[mi].sharded, &st, err, sizeof err) != GPT2RT_OK) {
                printf("  %-22s %s\n", modes[mi].name, err);
                break;
            }
            char lab[40];
            snprintf(lab, sizeof lab, "%s %.0f", links[li].label, links[li].bw / 1e9);
            printf("  %-22s %9.2f %-5s %-17s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %9.0f %6.2fx\n",
                   li ? "" : modes[mi].name, gib, li ? "" : fits, lab, st.compute, st.update, st.comm, st.hidden,
                   st.bubble, st.gather, st.total, (double)p.tokens_per_step / st.total, t_one / st.total);
        }
    }
    if (o->budget) printf("  (fits: yes; tight: with less than the margin; NO: over the budget)\n");
    printf("  (vs 1: this tool's plan of the same flags on one such GPU, --batch %lld --accum %d (micro-batch %d),\n"
           "  %.3f s were it to fit, over this step; data parallel splits the batch over the devices, layer split\n"
           "  pipelines its %d micro-batches; sharded keeps 1/N of the moments and master weights per device)\n",
           (long long)global1, base->grad_accum, one.batch_size, t_one, base->grad_accum *
           (base->parallel == GPT2RT_PARALLEL_DATA ? base->n_devices : 1));
}

/* ---- --budget: does it fit, and if not, what would ---- */

/* the fields gpt2rt_fit may change */
static int same_knobs(const gpt2rt_config *a, const gpt2rt_config *b) {
    return a->batch_size == b->batch_size && a->grad_accum == b->grad_accum && a->precision == b->precision &&
           a->tf32 == b->tf32 && a->recompute == b->recompute && a->checkpoint_every == b->checkpoint_every &&
           a->parallel == b->parallel && a->n_devices == b->n_devices && a->shard_optimizer == b->shard_optimizer;
}


/* The advisor with the margin kept: gpt2rt_fit on budget - margin, and only when
   nothing fits there, on the whole budget. *kept: 1 when the answer keeps the margin. */
static gpt2rt_result advise(const gpt2rt_config *c, uint64_t budget, uint64_t margin, unsigned allow,
                            gpt2rt_config *out, char *explain, size_t cap, int *kept) {
    gpt2rt_result r = GPT2RT_ERR_OUT_OF_MEMORY;
    *kept = 0;
    if (margin < budget) {
        r = gpt2rt_fit(c, budget - margin, allow, out, explain, cap);
        if (r != GPT2RT_ERR_OUT_OF_MEMORY) { *kept = r == GPT2RT_OK; return r; }
    }
    return gpt2rt_fit(c, budget, allow, out, explain, cap);
}

/* the advisor's lines, indented */
static void print_explain(char *explain, const char *indent) {
    for (char *line = strtok(explain, "\n"); line; line = strtok(NULL, "\n")) printf("%s%s\n", indent, line);
}

static int report_budget(const options *o, const gpt2rt_config *c, const gpt2rt_memory_plan *p) {
    int dev = fullest_device(p);
    uint64_t need = device_bytes(p, dev), margin = margin_of(o, p);
    verdict v = verdict_of(need, o->budget, margin);
    printf("\nbudget %.2f GiB (%llu bytes) per device, margin %.2f GiB (%s): ", GIB(o->budget),
           (unsigned long long)o->budget, GIB(margin), o->margin_given ? "--margin"
           : "a quarter of the overhead estimate + 5% of the budget; --margin changes it");
    if (v == FITS)
        printf("fits on every device (fullest: device %d, %.2f GiB, %.2f GiB to spare)\n", dev, GIB(need),
               GIB(o->budget - need));
    else if (v == FITS_LESS_MARGIN)
        printf("fits with less than the margin (fullest: device %d, %.2f GiB, %.2f GiB to spare, less than %.2f)\n",
               dev, GIB(need), GIB(o->budget - need), GIB(margin));
    else
        printf("does NOT fit: device %d needs %.2f GiB, %.2f GiB too much\n", dev, GIB(need), GIB(need - o->budget));

    gpt2rt_config out;
    char explain[4096];
    int kept;
    gpt2rt_result r = advise(c, o->budget, margin, o->allow, &out, explain, sizeof explain, &kept);
    printf("\nadvisor (gpt2rt_fit on the budget less the margin, %.2f GiB; may change micro-batch/accumulation, "
           "recompute, parallel mode%s%s%s):\n", GIB(o->budget > margin ? o->budget - margin : 0),
           o->allow & GPT2RT_FIT_PRECISION ? ", precision" : "", o->allow & GPT2RT_FIT_SHARD ? ", ZeRO-1" : "",
           o->allow & GPT2RT_FIT_CLASSIFIER ? ", classifier chunk" : "");
    if (r == GPT2RT_OK && !kept) printf("  nothing reachable keeps the margin; on the whole budget:\n");
    print_explain(explain, "  ");
    if (r == GPT2RT_ERR_OUT_OF_MEMORY) {
        if (!(o->allow & GPT2RT_FIT_PRECISION) && c->backend == GPT2RT_BACKEND_CUDA &&
            p->config.precision == GPT2RT_PRECISION_FP32)
            printf("  (--allow-precision would also let it try bf16)\n");
        return 1;
    }
    if (r != GPT2RT_OK) { printf("  gpt2rt_fit: %s\n", gpt2rt_result_string(r)); return 1; }
    gpt2rt_memory_plan s;
    if (gpt2rt_plan(&out, &s) != GPT2RT_OK) { printf("  the suggestion does not plan: %s\n", s.error); return 1; }
    verdict vs = verdict_of(device_bytes(&s, fullest_device(&s)), o->budget, margin);
    printf("  advisor's verdict: %s\n", VERDICT[vs]);
    if (same_knobs(&s.config, &p->config)) return 0;
    gpt2rt_step_time t0, t1;
    if (model_step(&p->config, o->gpu, link_bw_of(o), &t0) && model_step(&s.config, o->gpu, link_bw_of(o), &t1))
        printf("  step time %.3f -> %.3f s (a model of %s)\n", t0.total, t1.total, gpu_words(o, s.n_devices));
    /* it also answers a config that fits: the advisor may rank another one faster */
    printf("\n%s (as flags):\n", v == FITS ? "faster, and it fits too" : "suggested");
    print_flags(&s.config);
    printf("\n");
    print_plan(&s);
    return 0;
}

/* ---- --sweep ---- */

typedef struct sweep_row {
    char label[32];
    int ok;
    gpt2rt_memory_plan plan;
} sweep_row;

/* splits "knob=v1,v2,..." and plans each value; exits 2 on a malformed sweep */
static int run_sweep_plans(const options *o, char *knob, sweep_row *rows) {
    const char *eq = strchr(o->sweep, '=');
    if (!eq || eq == o->sweep || !eq[1]) die_arg("--sweep", "'%s' is not KNOB=V1,V2,...", o->sweep);
    snprintf(knob, 32, "%.*s", (int)(eq - o->sweep), o->sweep);
    char values[1024];
    snprintf(values, sizeof values, "%s", eq + 1);
    int n = 0;
    for (char *v = strtok(values, ","); v; v = strtok(NULL, ",")) {
        if (n == MAX_SWEEP) die_arg("--sweep", "more than %d values", MAX_SWEEP);
        knobs k = o->k;
        const char *err = set_knob(&k, knob, v);
        if (err) die_arg("--sweep", "%s=%s: '%s' %s", knob, v, strstr(err, "knob") ? knob : v, err);
        /* a precision sweep from a --tf32 config: tf32 only applies to fp32 */
        if (!strcmp(knob, "precision") && k.cfg.precision != GPT2RT_PRECISION_FP32) k.cfg.tf32 = 0;
        /* one device has one mode: --sweep devices=1,2,4 --mode split starts without an error */
        if (!strcmp(knob, "devices") && k.cfg.n_devices == 1) k.cfg.parallel = GPT2RT_PARALLEL_NONE;
        gpt2rt_config c;
        char why[256];
        copy_text(rows[n].label, sizeof rows[n].label, v);
        if (finish(&k, &c, why, sizeof why)) {
            memset(&rows[n].plan, 0, sizeof rows[n].plan);
            copy_text(rows[n].plan.error, sizeof rows[n].plan.error, why);
            rows[n].ok = 0;
        } else rows[n].ok = gpt2rt_plan(&c, &rows[n].plan) == GPT2RT_OK;
        n++;
    }
    return n;
}

/* the settings the sweep holds fixed, for the chart: "L=12 H=12 C=768 B=4 T=1024 ..." */
static void subtitle(char *buf, size_t cap, const gpt2rt_config *c, const char *knob) {
    static const char *prec[] = {"fp32", "fp32", "bf16", "fp16"}, *rc[] = {"none", "selective", "full"},
                      *mode[] = {"", "ddp", "split"};
    size_t n = 0;
#define PUT(skip, ...) do { if (!(skip) && n < cap) n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__); } while (0)
    PUT(!strcmp(knob, "layers"), "L=%d ", c->n_layer);
    PUT(0, "C=%d ", c->n_embd);
    PUT(!strcmp(knob, "batch"), "batch %lld ", (long long)c->batch_size * c->grad_accum * replicas(c));
    PUT(!strcmp(knob, "seq"), "T=%d ", c->seq_len);
    PUT(!strcmp(knob, "accum"), "accum %d ", c->grad_accum);
    PUT(!strcmp(knob, "precision"), "%s%s ", prec[c->precision], c->tf32 ? "+tf32" : "");
    PUT(!strcmp(knob, "recompute"), "recompute %s ", rc[c->recompute]);
    PUT(!strcmp(knob, "devices") || c->n_devices == 1, "%d devices ", c->n_devices);
    PUT(!strcmp(knob, "mode") || c->parallel == GPT2RT_PARALLEL_NONE, "%s ", mode[c->parallel]);
    PUT(0, "%s", c->backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU");
#undef PUT
}

static void print_sweep_header(void) {
    printf("%-10s %-5s %7s", "value", "dev", "micro");
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) printf(" %11s", gpt2rt_mem_name((gpt2rt_mem)i));
    printf(" %10s %10s %10s %9s %10s  %s\n", "total", "+overhead", "=device", "step s", "tokens/s", "fits");
}

static void print_sweep_device(const options *o, const sweep_row *r, int dev, const char *label, int fullest) {
    const gpt2rt_memory_plan *p = &r->plan;
    char dv[8];
    snprintf(dv, sizeof dv, "%d%s", dev, fullest && p->n_devices > 1 ? "*" : "");
    printf("%-10s %-5s %7d", label, dv, p->config.batch_size);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) printf(" %11.1f", MIB(p->bytes[dev][i]));
    printf(" %10.1f %10.1f %10.1f", MIB(p->total[dev]), MIB(p->overhead[dev]), MIB(device_bytes(p, dev)));
    gpt2rt_step_time st;
    if (dev == fullest_device(p) && model_step(&p->config, o->gpu, link_bw_of(o), &st))
        printf(" %9.3f %10.0f", st.total, (double)p->tokens_per_step / st.total);
    else printf(" %9s %10s", "", "");
    printf("  %s\n", !o->budget ? "" : VERDICT[verdict_of(device_bytes(p, dev), o->budget, margin_of(o, p))]);
}

static void print_sweep(const options *o, const char *knob, const sweep_row *rows, int n) {
    printf("\nsweep of %s: MiB per device", knob);
    if (o->budget) printf("; fits: total + overhead + margin <= %.2f GiB", GIB(o->budget));
    printf("\n(micro: each device's micro-batch; with more than one device: device 0, then the fullest, marked *;\n"
           "step s: ");
    if (o->k.cfg.backend == GPT2RT_BACKEND_CUDA)
        printf("a model of %s, not a measurement)\n", gpu_words(o, 1));
    else printf("none, the time model is of GPUs)\n");
    print_sweep_header();
    for (int i = 0; i < n; i++) {
        if (!rows[i].ok) { printf("%-10s invalid: %s\n", rows[i].label, rows[i].plan.error); continue; }
        int full = fullest_device(&rows[i].plan);
        print_sweep_device(o, &rows[i], 0, rows[i].label, full == 0);
        if (full != 0) print_sweep_device(o, &rows[i], full, "", 1);
    }
}

/* ---- --png: stacked bars, drawn into an RGB buffer ---- */
#ifdef GPT2RT_MEM_PNG

typedef struct image {
    int w, h;
    unsigned char *px; /* RGB, row-major */
} image;

typedef struct rgb { unsigned char r, g, b; } rgb;

static const rgb CATEGORY_COLOUR[GPT2RT_MEM_COUNT + 1] = {
    {31, 119, 180},  /* weights: blue */
    {174, 199, 232}, /* master: light blue, the weights' fp32 twin */
    {255, 127, 14},  /* grads: orange */
    {255, 187, 120}, /* moments: light orange, the optimizer's share */
    {44, 160, 44},   /* activations: green */
    {152, 223, 138}, /* transient: light green, the activations' scratch */
    {148, 103, 189}, /* logits: purple */
    {140, 86, 75},   /* workspace: brown */
    {227, 119, 194}, /* comm: pink */
    {188, 189, 34},  /* kvcache: olive */
    {160, 160, 160}, /* overhead: grey */
};
static const rgb BLACK = {0, 0, 0}, GRID = {225, 225, 225}, RED = {214, 39, 40}, DARK = {90, 90, 90};

static void fill_rect(image *im, int x0, int y0, int x1, int y1, rgb c) { /* [x0,x1) x [y0,y1), clipped */
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > im->w) x1 = im->w;
    if (y1 > im->h) y1 = im->h;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            unsigned char *p = im->px + 3 * ((size_t)y * im->w + x);
            p[0] = c.r; p[1] = c.g; p[2] = c.b;
        }
}

/* stb_easy_font gives axis-aligned quads (4 vertices of x, y, z floats and 4 colour
   bytes each) for text at 1 pixel per unit; we fill each quad's box, scaled */
static int text_width(const char *text, int scale) {
    char buf[256];
    copy_text(buf, sizeof buf, text);
    return stb_easy_font_width(buf) * scale;
}

static void draw_text(image *im, int x, int y, int scale, const char *text, rgb c) {
    static char vbuf[1 << 16]; /* about 270 bytes a character: room for 240 */
    char buf[256];
    copy_text(buf, sizeof buf, text);
    int quads = stb_easy_font_print(0.0f, 0.0f, buf, NULL, vbuf, (int)sizeof vbuf);
    for (int q = 0; q < quads; q++) {
        float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
        for (int v = 0; v < 4; v++) {
            float xy[2];
            memcpy(xy, vbuf + (size_t)(q * 4 + v) * 16, sizeof xy);
            if (xy[0] < x0) x0 = xy[0];
            if (xy[0] > x1) x1 = xy[0];
            if (xy[1] < y0) y0 = xy[1];
            if (xy[1] > y1) y1 = xy[1];
        }
        fill_rect(im, x + (int)(x0 * scale), y + (int)(y0 * scale), x + (int)(x1 * scale), y + (int)(y1 * scale), c);
    }
}

static void draw_text_centered(image *im, int cx, int y, int scale, const char *text, rgb c) {
    draw_text(im, cx - text_width(text, scale) / 2, y, scale, text, c);
}

/* a tick step of 1, 2 or 5 x 10^k that cuts [0, top] into 4 to 10 pieces */
static double nice_step(double top) {
    double raw = top / 6.0, p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

/* the bytes drawn for a row: its fullest device, the one that decides whether it fits */
static uint64_t bar_bytes(const sweep_row *r, int cat) {
    int d = fullest_device(&r->plan);
    return cat < GPT2RT_MEM_COUNT ? r->plan.bytes[d][cat] : r->plan.overhead[d];
}

static void draw_legend(image *im, int x, int y) {
    draw_text(im, x, y, 2, "category", BLACK);
    y += 24;
    for (int i = GPT2RT_MEM_COUNT; i >= 0; i--) { /* top of the stack first, as in the bars */
        fill_rect(im, x, y, x + 16, y + 16, CATEGORY_COLOUR[i]);
        draw_text(im, x + 24, y + 2, 2, i < GPT2RT_MEM_COUNT ? gpt2rt_mem_name((gpt2rt_mem)i) : "overhead", BLACK);
        y += 24;
    }
}

static int write_png(const options *o, const char *title, const char *sub, const char *knob, const sweep_row *rows,
                     int n) {
    image im = {900, 560, NULL};
    im.px = (unsigned char *)malloc((size_t)im.w * im.h * 3);
    if (!im.px) return 0;
    memset(im.px, 255, (size_t)im.w * im.h * 3);
    const int left = 80, right = im.w - 190, top = 70, bottom = im.h - 70; /* the plot area */

    double ymax = o->budget ? GIB(o->budget) : 0.0;
    for (int i = 0; i < n; i++) {
        if (!rows[i].ok) continue;
        double s = 0.0;
        for (int c = 0; c <= GPT2RT_MEM_COUNT; c++) s += GIB(bar_bytes(&rows[i], c));
        if (s > ymax) ymax = s;
    }
    if (ymax <= 0.0) ymax = 1.0;
    double step = nice_step(ymax * 1.08);
    ymax = ceil(ymax * 1.08 / step) * step;
#define YPIX(gib) (bottom - (int)((gib) / ymax * (bottom - top) + 0.5))

    /* title and subtitle */
    draw_text_centered(&im, im.w / 2, 14, text_width(title, 3) < im.w - 16 ? 3 : 2, title, BLACK);
    draw_text_centered(&im, im.w / 2, 46, text_width(sub, 2) < im.w - 20 ? 2 : 1, sub, DARK);

    /* y axis: grid lines and labels in GiB */
    for (double v = 0.0; v <= ymax + step * 0.01; v += step) {
        char lab[32];
        int y = YPIX(v);
        snprintf(lab, sizeof lab, "%g", v);
        fill_rect(&im, left, y, right, y + 1, GRID);
        fill_rect(&im, left - 6, y, left, y + 1, BLACK);
        draw_text(&im, left - 10 - text_width(lab, 2), y - 6, 2, lab, BLACK);
    }
    draw_text(&im, 8, top - 22, 2, "GiB", BLACK);

    /* the bars, bottom to top in category order, then the overhead */
    int slot = (right - left) / (n > 0 ? n : 1), bw = slot * 6 / 10;
    for (int i = 0; i < n; i++) {
        int cx = left + slot * i + slot / 2;
        int ls = text_width(rows[i].label, 2) < slot - 4 ? 2 : 1;
        draw_text_centered(&im, cx, bottom + 10, ls, rows[i].label, BLACK);
        if (!rows[i].ok) { draw_text_centered(&im, cx, bottom - 20, 2, "invalid", RED); continue; }
        double base = 0.0;
        for (int cat = 0; cat <= GPT2RT_MEM_COUNT; cat++) {
            double h = GIB(bar_bytes(&rows[i], cat));
            if (h <= 0.0) continue;
            fill_rect(&im, cx - bw / 2, YPIX(base + h), cx + bw / 2, YPIX(base), CATEGORY_COLOUR[cat]);
            base += h;
        }
    }
    draw_text_centered(&im, (left + right) / 2, bottom + 40, 2, knob, BLACK);

    /* axes over the bars, the budget dashed over everything */
    fill_rect(&im, left - 1, top, left + 1, bottom + 1, BLACK);
    fill_rect(&im, left - 1, bottom, right, bottom + 2, BLACK);
    if (o->budget) {
        int y = YPIX(GIB(o->budget));
        for (int x = left; x < right; x += 12) fill_rect(&im, x, y - 1, x + 8 < right ? x + 8 : right, y + 1, RED);
        char lab[48];
        snprintf(lab, sizeof lab, "budget %.3g GiB", GIB(o->budget));
        int w = text_width(lab, 2), x = right - w - 4;
        fill_rect(&im, x - 4, y - 20, x + w + 2, y - 3, (rgb){255, 255, 255}); /* readable over a bar */
        draw_text(&im, x, y - 18, 2, lab, RED);
    }
#undef YPIX
    draw_legend(&im, right + 24, top);
    for (int i = 0; i < n; i++)
        if (rows[i].ok && rows[i].plan.n_devices > 1) { /* say which device a bar is */
            draw_text(&im, right + 24, top + 24 * (GPT2RT_MEM_COUNT + 2) + 8, 2, "bars: the", DARK);
            draw_text(&im, right + 24, top + 24 * (GPT2RT_MEM_COUNT + 2) + 26, 2, "fullest device", DARK);
            break;
        }
    int ok = stbi_write_png(o->png, im.w, im.h, 3, im.px, im.w * 3) != 0;
    free(im.px);
    return ok;
}
#endif

/* ---- --preset allm4ts-stage1: the workload's question, answered as one report ---- */

/* one option of the report: a label (the chart's bar) and its plan */
static int plan_option(sweep_row *row, const char *label, const gpt2rt_config *c) {
    copy_text(row->label, sizeof row->label, label);
    row->ok = gpt2rt_plan(c, &row->plan) == GPT2RT_OK;
    return row->ok;
}


static void print_option(const options *o, const sweep_row *r) {
    const uint64_t budget = o->budget;
    if (!r->ok) { printf("  %-14s invalid: %s\n", r->label, r->plan.error); return; }
    const gpt2rt_memory_plan *p = &r->plan;
    int d = fullest_device(p);
    uint64_t need = device_bytes(p, d), state = 0;
    for (int cat = GPT2RT_MEM_WEIGHTS; cat <= GPT2RT_MEM_MOMENTS; cat++) state += p->bytes[d][cat];
    verdict v = verdict_of(need, budget, margin_of(o, p));
    printf("  %-14s %9.2f %9.2f %9.2f  %s %.2f GiB\n", r->label, GIB(need), GIB(p->bytes[d][GPT2RT_MEM_ACTIVATIONS]),
           GIB(state), v == FITS ? "fits, spare" : v == FITS_LESS_MARGIN ? "fits with less than the margin, spare"
           : "NO, over by ", need <= budget ? GIB(budget - need) : GIB(need - budget));
}

/* the largest micro-batch b (a divisor of g, halving) whose plan fits with the margin; 0: none */
static int largest_fitting(const options *o, gpt2rt_config c, int g, gpt2rt_memory_plan *out) {
    for (int b = g; b >= 1; b /= 2) {
        if (g % b) continue;
        c.batch_size = b;
        c.grad_accum = g / b;
        if (gpt2rt_plan(&c, out) == GPT2RT_OK && verdict_of(fullest_bytes(out), o->budget, margin_of(o, out)) == FITS)
            return b;
    }
    return 0;
}

static void print_advice(const options *o, const gpt2rt_config *c, unsigned allow) {
    gpt2rt_config out;
    gpt2rt_memory_plan p;
    char explain[4096];
    int kept;
    if (gpt2rt_plan(c, &p) != GPT2RT_OK) { printf("    invalid: %s\n", p.error); return; }
    gpt2rt_result r = advise(c, o->budget, margin_of(o, &p), allow, &out, explain, sizeof explain, &kept);
    if (r == GPT2RT_OK && !kept) printf("    nothing reachable keeps the margin; on the whole budget:\n");
    print_explain(explain, "    ");
    if (r == GPT2RT_OK) { printf("    as flags:"); print_flags(&out); }
}

static int allm4ts_report(const options *o) {
    options so = *o; /* the user's two 24 GiB cards unless --budget says otherwise */
    if (!so.budget) so.budget = (uint64_t)24 << 30;
    const uint64_t budget = so.budget;
    gpt2rt_config base;
    char why[256];
    finish(&o->k, &base, why, sizeof why); /* main refused a batch that does not divide */
    base.n_devices = 1; base.parallel = GPT2RT_PARALLEL_NONE; base.shard_optimizer = 0;
    const int g = (int)global_of(&o->k); /* the global batch, which every option keeps (at most 2^20) */
    base.batch_size = g; base.grad_accum = 1; /* "as scripted": one micro-batch of all of it */
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&base, &p) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt-mem: invalid config: %s\n", p.error);
        return 2;
    }
    const gpt2rt_config *rc = &p.config;
    int64_t np = (rc->seq_len - rc->patch_len) / rc->patch_stride + 1;
    printf("aLLM4TS stage 1 (next-patch pre-training) as scripted, planned for a %.0f GiB card (CUDA backend):\n",
           GIB(budget));
    printf("  %d windows of %d steps, patch %d stride %d -> %lld patches; %d GPT-2 blocks, width %d, %d heads\n",
           g, rc->seq_len, rc->patch_len, rc->patch_stride, (long long)np, rc->n_layer, rc->n_embd, rc->n_head);
    printf("  channel-independent: each window is one univariate series, so B = %d windows with n_channels = %d\n"
           "  (B windows of M channels are B*M sequences of %lld patches: the same batch is %d/M windows)\n",
           rc->batch_size, rc->n_channels, (long long)np, g);
    printf("  trained: LayerNorms, wpe, attention, MLP, in_layer, out_layer = %.2fM parameters (no wte: patch inputs)\n",
           p.n_trainable / 1e6);

    static sweep_row rows[16];
    int n = 0;
    gpt2rt_config c;
    printf("\n1. one card, as scripted (micro-batch %d, no accumulation, no recompute):\n", g);
    printf("  %-14s %9s %9s %9s  %s\n", "option", "GiB", "activ.", "w+g+opt", "on the card");
    c = base; c.precision = GPT2RT_PRECISION_FP32; c.batch_size = g; c.grad_accum = 1;
    plan_option(&rows[n], "fp32", &c); print_option(&so, &rows[n++]);
    c.precision = GPT2RT_PRECISION_BF16;
    plan_option(&rows[n], "bf16", &c); print_option(&so, &rows[n++]);
    const gpt2rt_memory_plan *f32 = &rows[0].plan;
    uint64_t act = f32->bytes[0][GPT2RT_MEM_ACTIVATIONS] + f32->bytes[0][GPT2RT_MEM_TRANSIENT], state = 0;
    for (int cat = GPT2RT_MEM_WEIGHTS; cat <= GPT2RT_MEM_MOMENTS; cat++) state += f32->bytes[0][cat];
    printf("  why: activations and their scratch are %.1f%% of fp32's %.2f GiB (%d x %lld positions x %d blocks);\n"
           "  weights, gradients and AdamW moments of %.2fM parameters are %.2f GiB\n",
           100.0 * (double)act / (double)fullest_bytes(f32), GIB(fullest_bytes(f32)), g, (long long)np, rc->n_layer,
           p.n_trainable / 1e6, GIB(state));

    printf("\n2. what fits on one card with the margin (%.2f GiB), effective batch %d kept (micro-batch x\n"
           "   accumulation; windows/s: a model of %s, not a measurement):\n", GIB(margin_of(&so, &p)), g,
           gpu_words(o, 1));
    printf("  %-9s %-10s %s\n", "precision", "recompute", "largest micro-batch that fits");
    static const char *rname[] = {"none", "selective", "full"};
    for (int pr = 0; pr < 2; pr++)
        for (int r = 0; r < 3; r++) {
            c = base;
            c.precision = pr ? GPT2RT_PRECISION_BF16 : GPT2RT_PRECISION_FP32;
            c.recompute = (gpt2rt_recompute)r;
            c.checkpoint_every = r == 2 ? 1 : 0;
            int b = largest_fitting(&so, c, g, &p);
            gpt2rt_step_time st;
            if (b && model_step(&p.config, o->gpu, link_bw_of(o), &st))
                printf("  %-9s %-10s %4d x %-4d %6.2f GiB, %5.0f windows/s\n", pr ? "bf16" : "fp32", rname[r], b,
                       g / b, GIB(fullest_bytes(&p)), g / st.total);
            else if (b) printf("  %-9s %-10s %4d x %-4d %6.2f GiB\n", pr ? "bf16" : "fp32", rname[r], b, g / b,
                               GIB(fullest_bytes(&p)));
            else printf("  %-9s %-10s none (micro-batch 1 does not fit)\n", pr ? "bf16" : "fp32", rname[r]);
        }
    c = base; c.precision = GPT2RT_PRECISION_FP32; c.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    plan_option(&rows[n++], "fp32 sel", &c);
    c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 1;
    plan_option(&rows[n++], "fp32 full", &c);
    c = base; c.precision = GPT2RT_PRECISION_FP32;
    int b = largest_fitting(&so, c, g, &p);
    if (b) {
        char lab[32];
        snprintf(lab, sizeof lab, "fp32 %dx%d", b, g / b);
        c.batch_size = b; c.grad_accum = g / b;
        plan_option(&rows[n++], lab, &c);
    }
    printf("  frozen groups (fp32, micro-batch %d): no gradients or moments for them, and\n"
           "  the inputs only their weight gradients need are not kept:\n", g);
    static const struct { unsigned bits; const char *name; } fz[] = {
        {GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP, "attn,mlp (stage 2's)"},
        {GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_LAYERNORM | GPT2RT_GROUP_POS_EMBED, "all but head"},
    };
    for (size_t i = 0; i < sizeof fz / sizeof fz[0]; i++) {
        c = base; c.precision = GPT2RT_PRECISION_FP32; c.frozen = fz[i].bits;
        gpt2rt_memory_plan q;
        if (gpt2rt_plan(&c, &q) != GPT2RT_OK) continue;
        printf("    --frozen %-22s %6.2f GiB (saves %.2f GiB)\n", fz[i].name, GIB(fullest_bytes(&q)),
               GIB(fullest_bytes(f32) - fullest_bytes(&q)));
        if (!i) plan_option(&rows[n++], "frz attn,mlp", &c);
    }
    printf("  the advisor (gpt2rt_fit) on fp32 as scripted:\n");
    c = base; c.precision = GPT2RT_PRECISION_FP32;
    print_advice(&so, &c, GPT2RT_FIT_DEFAULT);
    printf("  and allowed bf16 (--allow-precision):\n");
    print_advice(&so, &c, GPT2RT_FIT_DEFAULT | GPT2RT_FIT_PRECISION);

    printf("\n3. two cards, fp32, the same %d windows a step, no recompute:\n", g);
    printf("  %-14s %9s %9s %9s  %s\n", "option", "GiB/dev", "activ.", "w+g+opt", "on each card");
    gpt2rt_config two = base;
    two.precision = GPT2RT_PRECISION_FP32;
    two.n_devices = 2; two.parallel = GPT2RT_PARALLEL_DATA;
    two.batch_size = g / 2; two.grad_accum = 1; /* batch_size is per rank: 2 x g/2 = g */
    int ddp = n;
    plan_option(&rows[n], "2 ddp", &two); print_option(&so, &rows[n++]);
    c = two; c.shard_optimizer = 1;
    plan_option(&rows[n], "2 zero1", &c); print_option(&so, &rows[n++]);
    c = two; c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.grad_accum = 2; /* GPipe: 2 micro-batches of g/2 */
    plan_option(&rows[n], "2 split", &c); print_option(&so, &rows[n++]);
    if (rows[ddp].ok && rows[ddp + 1].ok)
        printf("  why: data parallel gives each card %d windows, halving the activations, and keeps the whole\n"
               "  model state on both; ZeRO-1 shards only the moments (and bf16's master weights): %.0f MiB here.\n"
               "  Layer split gives each card %d of %d blocks and keeps all its micro-batches in flight (GPipe,\n"
               "  counted by gpt2rt_plan): the activations halve as well, and the pipeline's fill and drain\n"
               "  cost time (the model below).\n",
               g / 2, MIB(fullest_bytes(&rows[ddp].plan) - fullest_bytes(&rows[ddp + 1].plan)), rc->n_layer / 2,
               rc->n_layer);
    printf("  the advisor on two cards (fp32 as scripted, ZeRO-1 allowed):\n");
    print_advice(&so, &two, GPT2RT_FIT_DEFAULT | GPT2RT_FIT_SHARD);
    print_step_time(&so, &two);

    if (o->png) {
#ifdef GPT2RT_MEM_PNG
        char title[96], sub[256];
        snprintf(title, sizeof title, "gpt2rt-mem: what fits a %.3g GiB card", GIB(budget));
        snprintf(sub, sizeof sub, "aLLM4TS stage 1: %d x %lld patches, L=%d C=%d, CUDA", g, (long long)np, rc->n_layer,
                 rc->n_embd);
        if (!write_png(&so, title, sub, "option (bars: fullest device)", rows, n)) {
            fprintf(stderr, "gpt2rt-mem: --png: cannot write %s\n", o->png);
            return 2;
        }
        printf("\nwrote %s\n", o->png);
#else
        printf("\n--png %s: not written: this gpt2rt-mem was built without stb (apt-get install libstb-dev, then make)\n",
               o->png);
#endif
    }
    return 0;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch == '\n') printf("\\n");
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

/* ---- --timeline: the bytes in use at each point of one training step ----
   From the plan's layout: the model state (weights, master, gradients, moments) and the
   workspace are in use throughout; the activations arena fills layer by layer in the
   forward (full recompute: a checkpoint every k layers and the current segment's slots)
   and empties layer by layer in the backward (a layer's saved activations are dead once
   its backward ran; full recompute refills a segment's slots from its checkpoint); the
   logits are in use from the classifier until the head's backward, the transient
   scratch during the backward. The per-layer bytes come from planning one layer more
   (the arena's difference), the rest of the arena (inputs, the first layer's input,
   ln_f's output, the losses) from the start. Every point is at most the plan, category
   by category: the plan is what is allocated, the timeline what of it holds a value
   still needed. One device, training, not layer split. */
typedef struct tl_point { char what[32]; uint64_t b[GPT2RT_MEM_COUNT]; uint64_t total; } tl_point;
#define TL_MAX (2 * 1024 + 3)

static uint64_t act_of(const gpt2rt_config *c, int layers, int recompute, int ck, int *ok) {
    gpt2rt_config k = *c;
    gpt2rt_memory_plan p;
    k.n_layer = layers;
    k.recompute = (gpt2rt_recompute)recompute;
    k.checkpoint_every = ck;
    *ok &= gpt2rt_plan(&k, &p) == GPT2RT_OK;
    return p.bytes[0][GPT2RT_MEM_ACTIVATIONS];
}

static uint64_t sub_or0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* the points; 0 with *why when the plan has no timeline here */
static int timeline_of(const gpt2rt_memory_plan *p, tl_point *pt, const char **why) {
    const gpt2rt_config *c = &p->config;
    if (c->inference) { *why = "an inference plan has no backward or update: its timeline is the forward's two layers"; return 0; }
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) { *why = "layer split: each device holds its stages' layers; shown for one device and data parallel"; return 0; }
    int L = c->n_layer, ok = 1, full = c->recompute == GPT2RT_RECOMPUTE_FULL, ck = full ? c->checkpoint_every : 1;
    if (2 * L + 3 > TL_MAX) { *why = "over 1024 layers"; return 0; }
    const uint64_t *plan = p->bytes[0];
    uint64_t act = plan[GPT2RT_MEM_ACTIVATIONS];
    int rc_layers = full ? GPT2RT_RECOMPUTE_NONE : (int)c->recompute;
    uint64_t stride = sub_or0(act_of(c, L + 1, rc_layers, 0, &ok), act_of(c, L, rc_layers, 0, &ok));
    uint64_t fixed = sub_or0(act_of(c, L, rc_layers, 0, &ok), (uint64_t)L * stride);
    int slots = ck < L ? ck : L, n_ckpt = full ? (L + ck - 1) / ck - 1 : 0;
    uint64_t ckpt = n_ckpt ? sub_or0(act, fixed + (uint64_t)slots * stride) / (uint64_t)n_ckpt : 0;
    if (!ok) { *why = "the plan of one layer more failed"; return 0; }
    int n = 0;
    for (int phase = 0; phase < 4; phase++) {
        int count = phase == 0 || phase == 3 ? 1 : phase == 1 ? L + 1 : L;
        for (int i = 0; i < count; i++) {
            tl_point *q = &pt[n++];
            memset(q, 0, sizeof *q);
            int l = phase == 1 ? i + 1 : L - i; /* forward: layer l done; backward: layer l's backward runs */
            int head = phase == 1 && i == L;
            for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
                if (m != GPT2RT_MEM_ACTIVATIONS && m != GPT2RT_MEM_TRANSIENT && m != GPT2RT_MEM_LOGITS) q->b[m] = plan[m];
            uint64_t a = 0;
            if (phase == 0) { snprintf(q->what, sizeof q->what, "start"); a = fixed; }
            else if (phase == 3) snprintf(q->what, sizeof q->what, "update");
            else if (head) {
                snprintf(q->what, sizeof q->what, "classifier");
                a = act;
                q->b[GPT2RT_MEM_LOGITS] = plan[GPT2RT_MEM_LOGITS];
            } else if (phase == 1) {
                snprintf(q->what, sizeof q->what, "forward %d", l);
                a = !full ? fixed + (uint64_t)l * stride
                          : fixed + (uint64_t)(l / ck < n_ckpt ? l / ck : n_ckpt) * ckpt + (uint64_t)((l - 1) % ck + 1) * stride;
            } else {
                int seg = (l - 1) / ck;
                snprintf(q->what, sizeof q->what, "backward %d", l);
                a = !full ? fixed + (uint64_t)l * stride
                          : fixed + (uint64_t)(seg < n_ckpt ? seg : n_ckpt) * ckpt + (uint64_t)(l - seg * ck) * stride;
                q->b[GPT2RT_MEM_TRANSIENT] = plan[GPT2RT_MEM_TRANSIENT];
            }
            q->b[GPT2RT_MEM_ACTIVATIONS] = a < act ? a : act;
            for (int m = 0; m < GPT2RT_MEM_COUNT; m++) q->total += q->b[m];
        }
    }
    return n;
}

/* where PyTorch's usual training loop would hold more, one line a category: n lines
   into lines[] (category, then the line) */
static int torch_lines(const gpt2rt_memory_plan *p, const char *cat[3], char lines[3][320]) {
    const gpt2rt_config *c = &p->config;
    double B = c->batch_size, T = c->seq_len, V = c->vocab_size, H = c->n_head, L = c->n_layer;
    int n = 0;
    if (c->input != GPT2RT_INPUT_PATCHES) {
        cat[n] = "logits";
        snprintf(lines[n++], 320, "F.cross_entropy keeps the (B,T,V) logits and their log-softmax, 2 x %.1f MiB, and the backward "
               "makes a third; here %.1f MiB, overwritten in place by its gradient",
                 B * T * V * 4 / 1048576.0, (double)p->bytes[0][GPT2RT_MEM_LOGITS] / 1048576.0);
    }
    cat[n] = "activations";
    snprintf(lines[n++], 320, "autograd keeps each layer's attention probabilities (B,heads,T,T) unless SDPA's flash kernel "
           "runs: %.1f MiB over the %d layers; here one log-sum-exp a row", B * H * T * T * 4 * L / 1048576.0, c->n_layer);
    cat[n] = "moments";
    snprintf(lines[n++], 320, "torch.optim.AdamW(foreach=True) makes temporaries of the trained parameters' size at "
             "the update: about %.1f MiB more at that point; here the update runs in place",
             (double)p->n_trainable * 4 / 1048576.0);
    return n;
}

static void print_torch_lines(const gpt2rt_memory_plan *p) {
    const char *cat[3];
    char lines[3][320];
    int n = torch_lines(p, cat, lines);
    printf("\nwhere PyTorch would need more (a plain training loop, fp32 logits, AdamW foreach):\n");
    for (int i = 0; i < n; i++) printf("  %-12s %s\n", cat[i], lines[i]);
}

static void print_timeline(const gpt2rt_memory_plan *p) {
    static tl_point pt[TL_MAX];
    const char *why = "";
    int n = timeline_of(p, pt, &why);
    printf("\ntimeline of one step on device 0 (MiB in use; the plan allocates every column's largest at once):\n");
    if (!n) { printf("  not shown: %s\n", why); return; }
    printf("  %-14s", "point");
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
        if (p->bytes[0][m]) printf(" %11s", gpt2rt_mem_name((gpt2rt_mem)m));
    printf(" %10s %7s\n", "total", "of plan");
    uint64_t peak = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        printf("  %-14s", pt[i].what);
        for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
            if (p->bytes[0][m]) printf(" %11.2f", MIB(pt[i].b[m]));
        printf(" %10.2f %6.1f%%\n", MIB(pt[i].total), 100.0 * (double)pt[i].total / (double)p->total[0]);
        if (pt[i].total > peak) { peak = pt[i].total; at = i; }
    }
    printf("  peak: %.2f MiB at %s, %s the plan's %.2f MiB of arenas\n", MIB(peak), pt[at].what,
           peak <= p->total[0] ? "within" : "OVER", MIB(p->total[0]));
    print_torch_lines(p);
}

static void json_timeline(const gpt2rt_memory_plan *p) {
    static tl_point pt[TL_MAX];
    const char *why = "";
    int n = timeline_of(p, pt, &why);
    if (!n) { printf("null, \"timeline_why\": "); json_str(why); return; }
    printf("[");
    for (int i = 0; i < n; i++) {
        printf("%s{\"what\": \"%s\", \"bytes\": {", i ? ", " : "", pt[i].what);
        for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
            printf("%s\"%s\": %llu", m ? ", " : "", gpt2rt_mem_name((gpt2rt_mem)m), (unsigned long long)pt[i].b[m]);
        printf("}, \"total\": %llu}", (unsigned long long)pt[i].total);
    }
    printf("]");
}

/* ---- --json: the plan, the time model and the advisor's answer, for scripts and the web page ---- */

static int json_error(const char *why) {
    printf("{\"error\": ");
    json_str(why);
    printf("}\n");
    return 2;
}

static void json_config(const gpt2rt_config *c) {
    static const char *prec[] = {"fp32", "fp32", "bf16", "fp16"}, *rc[] = {"none", "selective", "full"},
                      *mode[] = {"none", "ddp", "split"};
    printf("{\"layers\": %d, \"heads\": %d, \"embd\": %d, \"vocab\": %d, \"ctx\": %d, \"seq\": %d, "
           "\"batch\": %lld, \"micro_batch\": %d, \"accum\": %d, \"devices\": %d, \"mode\": \"%s\", "
           "\"shard\": %d, \"precision\": \"%s\", \"tf32\": %d, \"recompute\": \"%s\", \"checkpoint_every\": %d, "
           "\"classifier_chunk\": %d, \"inference\": %d, \"frozen\": %u, \"backend\": \"%s\", "
           "\"input\": \"%s\"}", c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->max_seq_len, c->seq_len,
           (long long)c->batch_size * c->grad_accum * replicas(c), c->batch_size, c->grad_accum, c->n_devices,
           mode[c->parallel], c->shard_optimizer, prec[c->precision], c->tf32, rc[c->recompute],
           c->checkpoint_every, c->classifier_chunk, c->inference, c->frozen,
           c->backend == GPT2RT_BACKEND_CUDA ? "cuda" : "cpu", c->input == GPT2RT_INPUT_PATCHES ? "patches" : "tokens");
}

static void json_time(const options *o, const gpt2rt_memory_plan *p) {
    gpt2rt_step_time st;
    if (!model_step(&p->config, o->gpu, link_bw_of(o), &st)) { printf("null"); return; }
    if (p->config.backend != GPT2RT_BACKEND_CUDA) {
        gpt2rt_cpu_speed sp;
        cpu_speed_of(&p->config, &sp);
        printf("{\"cpu\": true, \"threads\": %d, \"is_model\": true, \"matmul_flops\": %.6g, \"half_rows\": %.6g, "
               "\"mem_bytes_per_s\": %.6g, \"measured\": %s, \"step_s\": %.6f, \"tokens_per_s\": %.0f, "
               "\"compute_s\": %.6f, \"update_s\": %.6f}", p->config.n_threads, sp.matmul_peak, sp.half_rows, sp.mem_bw,
               CPU_SPEED.matmul_peak > 0 ? "false" : "true", st.total, (double)p->tokens_per_step / st.total,
               st.compute, st.update);
        return;
    }
    gpt2rt_hardware hw = gpu_model(o->gpu, link_bw_of(o));
    printf("{\"gpu\": \"%s\", \"label\": \"%s\", \"devices\": %d, \"link_bytes_per_s\": %.0f, "
           "\"is_model\": true, \"flops_fp32\": %.6g, \"flops_tf32\": %.6g, \"flops_16\": %.6g, "
           "\"mem_bytes_per_s\": %.6g, \"half_tokens\": %.0f, \"step_s\": %.6f, \"tokens_per_s\": %.0f, "
           "\"compute_s\": %.6f, \"update_s\": %.6f, \"comm_s\": %.6f, \"hidden_s\": %.6f, \"bubble_s\": %.6f, "
           "\"gather_s\": %.6f}", o->gpu->name, o->gpu->label, p->n_devices, hw.link_bw, hw.flops_fp32,
           hw.flops_tf32, hw.flops_16, hw.mem_bw, hw.half_tokens, st.total, (double)p->tokens_per_step / st.total,
           st.compute, st.update, st.comm, st.hidden, st.bubble, st.gather);
}

/* the parameters the model trains, as the plan's first line counts them ("M trained"):
   the plan's n_trainable less the padded vocabulary rows, which have gradients and moments
   (wte's storage, unless wte is frozen) but are not parameters of the model */
static int64_t trained_of(const gpt2rt_memory_plan *p) {
    if (p->config.inference) return 0;
    return p->n_trainable - (p->config.frozen & GPT2RT_GROUP_TOKEN_EMBED ? 0 : p->n_params_padded - p->n_params);
}

/* the plan: config, parameters, every device's categories in bytes. n_params and
   n_trainable are the model's (the text's "parameters" and "trained"); the _padded
   counts add the padded vocabulary rows, which the weights, gradients and moments hold */
static void json_plan(const options *o, const gpt2rt_memory_plan *p, uint64_t margin) {
    printf("{\"config\": ");
    json_config(&p->config);
    printf(", \"n_params\": %lld, \"n_params_padded\": %lld, \"n_trainable\": %lld, \"n_trainable_padded\": %lld, "
           "\"tokens_per_step\": %lld, \"flops_per_step\": %.6g, \"fullest_device\": %d, \"devices\": [",
           (long long)p->n_params, (long long)p->n_params_padded, (long long)trained_of(p),
           (long long)p->n_trainable, (long long)p->tokens_per_step, p->flops_per_step, fullest_device(p));
    for (int d = 0; d < p->n_devices; d++) {
        printf("%s{\"bytes\": {", d ? ", " : "");
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            printf("%s\"%s\": %llu", i ? ", " : "", gpt2rt_mem_name((gpt2rt_mem)i), (unsigned long long)p->bytes[d][i]);
        printf("}, \"arenas\": %llu, \"overhead\": %llu, \"total\": %llu", (unsigned long long)p->total[d],
               (unsigned long long)p->overhead[d], (unsigned long long)device_bytes(p, d));
        if (o->budget) printf(", \"verdict\": \"%s\"", VERDICT[verdict_of(device_bytes(p, d), o->budget, margin)]);
        printf("}");
    }
    printf("], \"time\": ");
    json_time(o, p);
    printf(", \"timeline\": ");
    json_timeline(p);
    const char *cat[3];
    char lines[3][320];
    int n = torch_lines(p, cat, lines);
    printf(", \"torch\": [");
    for (int i = 0; i < n; i++) {
        printf("%s{\"category\": \"%s\", \"line\": ", i ? ", " : "", cat[i]);
        json_str(lines[i]);
        printf("}");
    }
    printf("], \"hints\": {");
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        printf("%s\"%s\": ", i ? ", " : "", gpt2rt_mem_name((gpt2rt_mem)i));
        json_str(category_hint(i));
    }
    printf("}}");
}

/* --sweep --json: {"tool", "schema", "sweep": {"knob", "rows": [{"value", "plan"} or {"value", "error"}]}} */
static int json_sweep(const options *o) {
    static sweep_row rows[MAX_SWEEP];
    char knob[32];
    int n = run_sweep_plans(o, knob, rows);
    printf("{\"tool\": \"gpt2rt-mem\", \"schema\": 1, \"sweep\": {\"knob\": ");
    json_str(knob);
    printf(", \"rows\": [");
    for (int i = 0; i < n; i++) {
        printf("%s{\"value\": ", i ? ", " : "");
        json_str(rows[i].label);
        if (rows[i].ok) { printf(", \"plan\": "); json_plan(o, &rows[i].plan, o->budget ? margin_of(o, &rows[i].plan) : 0); }
        else { printf(", \"error\": "); json_str(rows[i].plan.error); }
        printf("}");
    }
    printf("]}}\n");
    return 0;
}

static int json_main(const options *o, const gpt2rt_config *cfg, const gpt2rt_memory_plan *plan, gpt2rt_result r) {
    if (o->sweep && !o->preset && !o->png) return json_sweep(o);
    if (o->sweep || o->preset || o->png) return json_error("--json answers one config: not with --preset or --png");
    if (r != GPT2RT_OK) return json_error(plan->error);
    uint64_t margin = o->budget ? margin_of(o, plan) : 0;
    int rc = 0;
    printf("{\"tool\": \"gpt2rt-mem\", \"schema\": 1, \"plan\": ");
    json_plan(o, plan, margin);
    if (o->budget) {
        int dev = fullest_device(plan);
        printf(", \"budget\": {\"bytes\": %llu, \"margin\": %llu, \"margin_source\": \"%s\", \"verdict\": \"%s\"}",
               (unsigned long long)o->budget, (unsigned long long)margin, o->margin_given ? "--margin" : "default",
               VERDICT[verdict_of(device_bytes(plan, dev), o->budget, margin)]);
        gpt2rt_config out;
        char explain[4096];
        int kept;
        gpt2rt_result fr = advise(cfg, o->budget, margin, o->allow, &out, explain, sizeof explain, &kept);
        rc = fr == GPT2RT_OK ? 0 : 1;
        gpt2rt_memory_plan s;
        printf(", \"advisor\": {\"result\": \"%s\", \"keeps_margin\": %s, \"explain\": [",
               fr == GPT2RT_OK ? "ok" : fr == GPT2RT_ERR_OUT_OF_MEMORY ? "nothing fits" : gpt2rt_result_string(fr),
               kept ? "true" : "false");
        int first = 1;
        for (char *line = strtok(explain, "\n"); line; line = strtok(NULL, "\n")) {
            printf("%s", first ? "" : ", ");
            json_str(line);
            first = 0;
        }
        printf("]");
        if (fr == GPT2RT_OK && gpt2rt_plan(&out, &s) == GPT2RT_OK) {
            printf(", \"changes\": %s, \"verdict\": \"%s\", \"plan\": ", same_knobs(&s.config, &plan->config)
                   ? "false" : "true", VERDICT[verdict_of(device_bytes(&s, fullest_device(&s)), o->budget, margin)]);
            json_plan(o, &s, margin);
        }
        printf("}");
    }
    printf("}\n");
    return rc;
}

/* ---- main ---- */

static int sweep_main(const options *o, const gpt2rt_memory_plan *base) {
    char knob[32];
    gpt2rt_config base_cfg = base->config;
    static sweep_row rows[MAX_SWEEP]; /* a plan is ~1 KiB; static keeps the stack small */
    int n = run_sweep_plans(o, knob, rows);
    for (int i = 0; i < n && base->error[0]; i++) /* resolved defaults for the chart's subtitle */
        if (rows[i].ok) { base_cfg = rows[i].plan.config; break; }
    if (base->error[0]) printf("the config without the sweep is invalid (%s); the sweep sets %s\n", base->error, knob);
    else {
        char held[256];
        subtitle(held, sizeof held, &base_cfg, knob);
        print_settings(base, 1);
        printf("held: %s; swept: %s\n", held, knob);
    }
    print_sweep(o, knob, rows, n);
    int any_fit = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].ok && device_bytes(&rows[i].plan, fullest_device(&rows[i].plan)) <= o->budget) any_fit = 1;
    if (o->png) {
#ifdef GPT2RT_MEM_PNG
        char title[160], sub[256];
        snprintf(title, sizeof title, "gpt2rt-mem: planned memory per device vs %s", knob);
        subtitle(sub, sizeof sub, &base_cfg, knob);
        if (!write_png(o, title, sub, knob, rows, n)) { fprintf(stderr, "gpt2rt-mem: --png: cannot write %s\n", o->png); return 2; }
        printf("\nwrote %s\n", o->png);
#else
        (void)base_cfg; /* the chart's subtitle: no chart in this build */
        printf("\n--png %s: not written: this gpt2rt-mem was built without stb (apt-get install libstb-dev, then make)\n",
               o->png);
#endif
    }
    return !o->budget || any_fit ? 0 : 1;
}

static int run(int argc, char **argv) {
    static options o; /* static: the web page's calls reuse it, and longjmp leaves it alone */
    parse_args(argc, argv, &o);
    gpt2rt_config cfg;
    char why[256];
    if (!o.sweep && finish(&o.k, &cfg, why, sizeof why)) {
        if (o.json) return json_error(why);
        fprintf(stderr, "gpt2rt-mem: %s (see --help)\n", why);
        return 2;
    }
    /* a sweep row may divide where the config without the sweep does not */
    const char *indivisible = o.sweep ? finish(&o.k, &cfg, why, sizeof why) : NULL;
    gpt2rt_memory_plan plan;
    gpt2rt_result r = gpt2rt_plan(&cfg, &plan);
    if (indivisible) {
        memset(&plan, 0, sizeof plan);
        copy_text(plan.error, sizeof plan.error, indivisible);
    }
    if (o.json) return json_main(&o, &cfg, &plan, r);
    if (r != GPT2RT_OK && !o.sweep) { /* a sweep may be what makes it valid (--sweep devices=2,4 and --mode split) */
        fprintf(stderr, "gpt2rt-mem: invalid config (%s): %s\n", gpt2rt_result_string(r), plan.error);
        return 2;
    }
    if (o.sweep) return sweep_main(&o, &plan);
    if (o.preset) return allm4ts_report(&o);
    print_plan(&plan);
    print_batch(&plan.config);
    print_shares(&plan);
    print_time_line(&o, &plan);
    if (plan.config.n_devices > 1) print_step_time(&o, &plan.config);
    if (o.timeline) print_timeline(&plan);
    return o.budget ? report_budget(&o, &cfg, &plan) : 0;
}

#ifdef __EMSCRIPTEN__
/* The web page's calls take a command line of this tool (options separated by spaces,
   values without spaces), split here as a shell would split it. */
static int web_argv(const char *line, char **argv, int cap) {
    static char buf[4096];
    int argc = 0;
    argv[argc++] = "gpt2rt-mem";
    copy_text(buf, sizeof buf, line);
    for (char *t = strtok(buf, " "); t && argc < cap - 2; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc++] = "--json";
    argv[argc] = NULL;
    return argc;
}

/* the line answered as gpt2rt-mem LINE --json answers it, on stdout */
int gpt2rt_mem_web(const char *line) {
    char *argv[130];
    int argc = web_argv(line, argv, 130), rc;
    if (setjmp(web_bad_arg)) rc = json_error(web_why);
    else rc = run(argc, argv);
    fflush(stdout);
    return rc;
}

/* whether the page's form shows option `name` with value v (NULL: a flag), given what
   the whole line set: its controls write exactly these (see argsOf in the page) */
static int form_shows(const char *name, const char *v, const options *o) {
    static const char *shown[] = {"--model", "--layers", "--heads", "--embd", "--seq", "--batch", "--accum",
                                  "--precision", "--tf32", "--recompute", "--classifier-chunk", "--inference",
                                  "--devices", "--shard", "--gpu", "--budget", "--json", "--input", "--gpu-peak"};
    const gpt2rt_config *c = &o->k.cfg;
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        if (!strcmp(name, shown[i])) return 1;
    if (!strcmp(name, "--checkpoint-every")) return strcmp(v, "sqrt") != 0;
    if (!strcmp(name, "--frozen")) return !(c->frozen & GPT2RT_GROUP_HEAD);
    if (!strcmp(name, "--mode")) return strcmp(v, "none") != 0;
    if (!strcmp(name, "--head")) return patches && !strcmp(v, "next-patch");
    if (!strcmp(name, "--patch") || !strcmp(name, "--stride")) return patches && !strcmp(v, "16");
    if (!strcmp(name, "--channels")) return patches && !strcmp(v, "1");
    return 0;
}

/* A link's flags for the page's form, parsed by this tool's own parser: on stdout
   {"error": ...} as gpt2rt-mem LINE --json refuses them, or {"form": the config as
   --json writes it, "gpu", "budget" (bytes, 0: none), "extra": the options (with their
   values) that the form has no control for}. The page plans the line itself with
   gpt2rt_mem_web, so a link plans what the command plans. */
int gpt2rt_mem_web_form(const char *line) {
    static options o; /* static: longjmp leaves it alone */
    char *argv[130];
    int argc = web_argv(line, argv, 130);
    if (setjmp(web_bad_arg)) { json_error(web_why); fflush(stdout); return 2; }
    parse_args(argc, argv, &o);
    if (o.sweep || o.preset || o.png) {
        json_error(o.preset || o.png ? "--json answers one config: not with --preset or --png"
                                     : "--sweep: the page's Compare section plans each value; the form takes one");
        fflush(stdout);
        return 2;
    }
    gpt2rt_config cfg;
    char why[256];
    if (finish(&o.k, &cfg, why, sizeof why)) { json_error(why); fflush(stdout); return 2; }
    gpt2rt_memory_plan plan;
    if (gpt2rt_plan(&cfg, &plan) == GPT2RT_OK) cfg = plan.config; /* the defaults filled in */
    printf("{\"form\": ");
    json_config(&cfg);
    printf(", \"gpu\": \"%s\", \"gpu_peak\": [%.6g, %.6g], \"budget\": %llu, \"extra\": [", o.gpu->name,
           CUSTOM_GPU.b16 / 1e12, CUSTOM_GPU.mem / 1e9, (unsigned long long)o.budget);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        if (eq) v = eq + 1;
        else if (!is_flag_option(a) && i + 1 < argc) v = argv[i + 1];
        if (!form_shows(name, v, &o)) {
            char opt[4200];
            snprintf(opt, sizeof opt, "%s%s%s", a, v && !eq ? " " : "", v && !eq ? v : "");
            printf("%s", n++ ? ", " : "");
            json_str(opt);
        }
        if (v && !eq) i++;
    }
    printf("]}\n");
    fflush(stdout);
    return 0;
}
#else
int main(int argc, char **argv) { return run(argc, argv); }
#endif
