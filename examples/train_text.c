/* examples/train_text.c - from a text file to a GPT-2 that writes text, no Python.
   Trains (or fine-tunes) a GPT-2 on GPT-2 BPE tokens, prints the training and
   validation loss, samples text from a prompt with the KV cache at the end, and can
   save a checkpoint that Hugging Face transformers loads. `make demo` runs it with
   no options: a small model on the tinyshakespeare excerpt shipped in data/ (llm.c
   token files). --devices 2 trains on two CPU ranks (threads of this process): data
   parallel, data parallel with ZeRO-1, or the layers split in two stages.
   Options: see usage() below (train_text --help). */
#define _POSIX_C_SOURCE 200809L /* readlink, stat and S_ISREG under -std=c11 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "train_text"
#include "../tools/cli.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(void) {
    printf("usage: train_text [options]   (each option also with one dash: -steps 10)\n"
           "  data:    --text FILE      any UTF-8 file, tokenized here with the GPT-2 tokenizer\n"
           "                            (\"<|endoftext|>\" in it is the special token); the\n"
           "                            first 90%% of the tokens train, the last 10%% validate\n"
           "           --train FILE --val FILE   llm.c .bin token files (default: data/'s\n"
           "                            tinyshakespeare_train.bin and _val.bin)\n"
           "           --vocab DIR      the tokenizer's files (default data: gpt2_merges.bin)\n"
           "  model:   --init DIR       start from a Hugging Face checkpoint (DIR/model.safetensors,\n"
           "                            shape from DIR/config.json; --layers may then take fewer)\n"
           "           --layers L --heads H --width C --seq T   (a new model: 4, 4, 128, 64)\n"
           "  train:   --steps N (200) --batch B (8 sequences a step, over every device)\n"
           "           --lr X (2e-3) --eval-every N (50)\n"
           "           --minutes M      a time budget: the first 5 steps' speed sizes the\n"
           "                            schedule (warmup and cosine end in M minutes, at most\n"
           "                            --steps), the plan is printed, and training stops at M\n"
           "                            minutes whatever happens\n"
           "  devices: --devices N      CPU ranks, one thread each, in this process (default 1)\n"
           "           --parallel dp|zero1|split   dp: data parallel, each device B/N of the\n"
           "                            batch; zero1: dp with the AdamW state sharded over the\n"
           "                            devices; split: the layers in N stages (GPipe); default\n"
           "                            dp when N > 1. Prints each device's planned memory.\n"
           "  sample:  --prompt TEXT    (default \"<|endoftext|>\": unconditional) --gen N new\n"
           "                            tokens (default 64; 0 none; at most the context)\n"
           "           --temperature X (0.8; 0 greedy) --top-k K (40; 0 all) --top-p P (0 < P <= 1)\n"
           "           --seed S\n"
           "  save:    --save DIR       DIR/model.safetensors + DIR/config.json\n"
           "  --help, -h                this text\n"
           "The default data and vocabulary are found from any directory: ./data, else the\n"
           "data/ next to this program's directory (<repo>/build/train_text -> <repo>/data).\n"
           "Exit status: 0 ok, 1 an error, 2 a bad argument.\n");
}

/* ---- --minutes: the schedule sized from the first steps ----
   After `done` steps measured at t_step seconds each (the first step excluded: it
   touches every page), with a validation pass of t_eval seconds every eval_every steps
   and one at the end: the steps that end within 95% of the budget (the margin absorbs a
   slower step now and then on a shared machine), at least done, at most max_steps. */
#define BUDGET_PROBE 5
static int budget_steps(double budget_s, double elapsed, double t_step, double t_eval, int eval_every, int done,
                        int max_steps, double *end_s) {
    double per = t_step + t_eval / eval_every, left = 0.95 * budget_s - elapsed - t_eval;
    double n = per > 0 && left > 0 ? floor(left / per) : 0;
    int total = n >= (double)(max_steps - done) ? max_steps : done + (int)n;
    *end_s = elapsed + (total - done) * per + t_eval;
    return total;
}

/* ---- the command line: every number parsed whole (no trailing text, no overflow,
   finite, in range); a bad one is refused naming the flag and the value, exit 2 ---- */


static int arg_u64(const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno) { /* strtoull would take "-1" as 2^64 - 1 */
        fprintf(stderr, "train_text: %s '%s': expected an integer in [0, %llu]\n", flag, v, (unsigned long long)UINT64_MAX);
        return 0;
    }
    *out = (uint64_t)x;
    return 1;
}

/* a file to read whole: a directory or a FIFO (whose open would block) is named, not read */
static int regular_file(const char *flag, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) { fprintf(stderr, "train_text: %s %s: %s\n", flag, path, strerror(errno)); return 0; }
    if (S_ISREG(st.st_mode)) return 1;
    fprintf(stderr, "train_text: %s %s: is %s, not a regular file\n", flag, path,
            S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" : "a device or socket");
    return 0;
}

static double now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct tokens {
    int32_t *tok;
    int64_t n;
} tokens;

static int load_shard(const char *path, tokens *t) {
    gpt2rt_shard *s;
    if (gpt2rt_shard_load(&s, path) != GPT2RT_OK) {
        fprintf(stderr, "train_text: %s\n", gpt2rt_shard_last_error(s));
        gpt2rt_shard_free(s);
        return 0;
    }
    t->n = gpt2rt_shard_count(s);
    t->tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)(t->n ? t->n : 1));
    for (int64_t i = 0; i < t->n; i++) t->tok[i] = gpt2rt_shard_tokens(s)[i];
    gpt2rt_shard_free(s);
    return 1;
}

/* the whole file through the tokenizer, then a 90/10 split of the ids */
static int load_text(const char *path, gpt2rt_tokenizer *tok, tokens *train, tokens *val) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "train_text: cannot open %s\n", path); return 0; }
    size_t cap = 1 << 20, len = 0, got;
    unsigned char *text = (unsigned char *)malloc(cap);
    while ((got = fread(text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) text = (unsigned char *)realloc(text, cap *= 2);
    }
    fclose(f);
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (len ? len : 1));
    size_t n = 0;
    if (gpt2rt_tok_encode(tok, text, len, GPT2RT_TOK_SPECIAL_ALLOW, ids, len ? len : 1, &n) != GPT2RT_OK) {
        fprintf(stderr, "train_text: %s: %s\n", path, gpt2rt_tok_last_error(tok));
        free(text); free(ids);
        return 0;
    }
    free(text);
    int64_t n_train = (int64_t)n * 9 / 10;
    train->tok = ids; train->n = n_train;
    val->n = (int64_t)n - n_train;
    val->tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)(val->n ? val->n : 1));
    memcpy(val->tok, ids + n_train, sizeof(int32_t) * (size_t)val->n);
    printf("%s: %zu bytes, %zu tokens: %lld to train on, %lld to validate (90/10)\n", path, len, n,
           (long long)train->n, (long long)val->n);
    return 1;
}

/* B windows of T+1 tokens at pseudo-random offsets: x = window[:T], y = window[1:] */
static void get_batch(const tokens *t, int B, int T, uint64_t *rng, int32_t *x, int32_t *y) {
    for (int b = 0; b < B; b++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        int64_t start = (int64_t)((*rng >> 33) % (uint64_t)(t->n - T));
        for (int i = 0; i < T; i++) {
            x[b * T + i] = t->tok[start + i];
            y[b * T + i] = t->tok[start + i + 1];
        }
    }
}

/* streams each sampled token's text as it comes */
static int print_token(void *user, int row, int32_t token, const float *logits, int64_t n_logits) {
    size_t n;
    const char *s = gpt2rt_tok_token((const gpt2rt_tokenizer *)user, token, &n);
    (void)row; (void)logits; (void)n_logits;
    if (s) fwrite(s, 1, n, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    char train_buf[4096], val_buf[4096], vocab_buf[4096];
    const char *train_path = NULL, *val_path = NULL, *vocab = NULL;
    const char *init = NULL, *save = NULL, *text = NULL, *prompt = "<|endoftext|>", *parallel = NULL;
    int steps = 200, eval_every = 50, n_gen = 64, rows = 8, devices = 1;
    double minutes = 0, lr = 2e-3, temperature = 0.8, top_p = 0;
    gpt2rt_sample samp;
    memset(&samp, 0, sizeof samp);
    samp.top_k = 40;
    gpt2rt_config cfg = {0};
    cfg.n_layer = 4; cfg.n_head = 4; cfg.n_embd = 128; cfg.max_seq_len = 64;
    cfg.seq_len = 64;
    cfg.warmup_steps = 20; cfg.min_lr_frac = 0.1f; cfg.weight_decay = 0.1f;
    int layers = 0, heads = 0, width = 0, seq = 0; /* 0: not given */
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i] + (argv[i][0] == '-' && argv[i][1] == '-'), *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "-help") || !strcmp(k, "-h")) { usage(); return 0; }
        if (!v) { fprintf(stderr, "train_text: %s needs a value (see --help)\n", argv[i]); return 2; }
        const char *f = argv[i++];
        int ok = 1;
        if (!strcmp(k, "-steps")) ok = arg_int(f, v, 1, 1000000000, &steps);
        else if (!strcmp(k, "-layers")) ok = arg_int(f, v, 1, 1024, &layers);
        else if (!strcmp(k, "-heads")) ok = arg_int(f, v, 1, 1024, &heads);
        else if (!strcmp(k, "-width")) ok = arg_int(f, v, 1, 65536, &width);
        else if (!strcmp(k, "-batch")) ok = arg_int(f, v, 1, 1 << 20, &rows);
        else if (!strcmp(k, "-seq")) ok = arg_int(f, v, 1, 1 << 20, &seq);
        else if (!strcmp(k, "-lr")) ok = arg_real(f, v, 0, 10, 1, 0, &lr);
        else if (!strcmp(k, "-eval-every")) ok = arg_int(f, v, 1, 1000000000, &eval_every);
        else if (!strcmp(k, "-minutes")) ok = arg_real(f, v, 0, 1e7, 0, 0, &minutes);
        else if (!strcmp(k, "-devices")) ok = arg_int(f, v, 1, GPT2RT_MAX_DEVICES, &devices);
        else if (!strcmp(k, "-parallel")) {
            parallel = v;
            if (strcmp(v, "none") && strcmp(v, "dp") && strcmp(v, "zero1") && strcmp(v, "split")) {
                fprintf(stderr, "train_text: %s '%s': expected dp, zero1, split or none\n", f, v);
                ok = 0;
            }
        }
        else if (!strcmp(k, "-init")) init = v;
        else if (!strcmp(k, "-save")) save = v;
        else if (!strcmp(k, "-train")) train_path = v;
        else if (!strcmp(k, "-val")) val_path = v;
        else if (!strcmp(k, "-text")) text = v;
        else if (!strcmp(k, "-vocab")) vocab = v;
        else if (!strcmp(k, "-prompt")) prompt = v;
        else if (!strcmp(k, "-gen")) ok = arg_int(f, v, 0, 1 << 20, &n_gen);
        else if (!strcmp(k, "-temperature")) ok = arg_real(f, v, 0, 100, 0, 0, &temperature);
        else if (!strcmp(k, "-top-k")) ok = arg_int(f, v, 0, 1 << 30, &samp.top_k);
        else if (!strcmp(k, "-top-p")) ok = arg_real(f, v, 0, 1, 1, 0, &top_p);
        else if (!strcmp(k, "-seed")) ok = arg_u64(f, v, &samp.seed);
        else { fprintf(stderr, "train_text: unknown option %s (see --help)\n", f); return 2; }
        if (!ok) return 2;
    }
    cfg.lr = (float)lr;
    samp.temperature = (float)temperature;
    samp.top_p = (float)top_p;
    if (!train_path) train_path = repo_path("data/tinyshakespeare_train.bin", train_buf, sizeof train_buf);
    if (!val_path) val_path = repo_path("data/tinyshakespeare_val.bin", val_buf, sizeof val_buf);
    if (!vocab) vocab = repo_path("data", vocab_buf, sizeof vocab_buf);
    if (text ? !regular_file("--text", text) : !regular_file("--train", train_path) || !regular_file("--val", val_path))
        return 1;

    /* devices: the mode follows --devices unless given; each misconfiguration names what to set */
    if (!parallel) parallel = devices > 1 ? "dp" : "none";
    int dp = !strcmp(parallel, "dp") || !strcmp(parallel, "zero1"), split = !strcmp(parallel, "split");
    if ((dp || split) && devices < 2) {
        fprintf(stderr, "train_text: --parallel %s needs --devices 2 or more (it is %d)\n", parallel, devices);
        return 2;
    }
    if (!dp && !split && devices > 1) {
        fprintf(stderr, "train_text: --devices %d with --parallel none: set --parallel dp, zero1 or split\n", devices);
        return 2;
    }
    if (dp && rows % devices) {
        fprintf(stderr, "train_text: --batch %d does not split over --devices %d (data parallel gives each device "
                "batch / devices sequences): set --batch to a multiple of %d\n", rows, devices, devices);
        return 2;
    }
    cfg.n_devices = devices;
    cfg.parallel = dp ? GPT2RT_PARALLEL_DATA : split ? GPT2RT_PARALLEL_LAYER_SPLIT : GPT2RT_PARALLEL_NONE;
    cfg.shard_optimizer = !strcmp(parallel, "zero1");
    cfg.batch_size = dp ? rows / devices : rows; /* per rank under data parallel: calls take all the rows */

    if (init) { /* the checkpoint's shape: n_layer, n_head, n_embd, vocab_size, n_positions */
        char err[512];
        if (gpt2rt_config_load(&cfg, init, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", err); return 1; }
    }
    if (layers) cfg.n_layer = layers;
    if (heads) cfg.n_head = heads;
    if (width) cfg.n_embd = width;
    if (seq) { cfg.seq_len = seq; if (!init) cfg.max_seq_len = seq; }
    if (split && cfg.n_layer < devices) {
        fprintf(stderr, "train_text: --parallel split over --devices %d needs at least %d layers (each device holds "
                "whole layers), the model has %d: set --layers %d or more", devices, devices, cfg.n_layer, devices);
        if (cfg.n_layer >= 2) fprintf(stderr, ", or --devices %d", cfg.n_layer);
        fprintf(stderr, "\n");
        return 2;
    }
    cfg.total_steps = steps;
    if (cfg.warmup_steps > steps) cfg.warmup_steps = steps; /* a short run: warm up over all of it */
    cfg.kv_batch = n_gen ? 1 : 0; /* the KV cache for the sample at the end */

    gpt2rt_tokenizer *tok;
    if (gpt2rt_tok_load(&tok, vocab) != GPT2RT_OK) {
        fprintf(stderr, "train_text: %s\n", gpt2rt_tok_last_error(tok));
        gpt2rt_tok_free(tok);
        return 1;
    }
    tokens train, val;
    if (text ? !load_text(text, tok, &train, &val) : (!load_shard(train_path, &train) || !load_shard(val_path, &val)))
        return 1;
    int T = cfg.seq_len;
    if (train.n < T + 1 || val.n < T + 1) {
        fprintf(stderr, "train_text: %lld training and %lld validation tokens; each needs at least seq + 1 = %d\n",
                (long long)train.n, (long long)val.n, T + 1);
        return 1;
    }

    /* the prompt, checked before training: it and the new tokens share the context */
    size_t plen = strlen(prompt), n_prompt = 0;
    int32_t *row = (int32_t *)malloc(sizeof(int32_t) * (plen + (size_t)cfg.max_seq_len + 1));
    if (gpt2rt_tok_encode(tok, prompt, plen, GPT2RT_TOK_SPECIAL_ALLOW, row, plen + 1, &n_prompt) != GPT2RT_OK) {
        fprintf(stderr, "train_text: --prompt: %s\n", gpt2rt_tok_last_error(tok));
        return 1;
    }
    if (n_gen && (n_prompt < 1 || n_prompt >= (size_t)cfg.max_seq_len)) {
        fprintf(stderr, "train_text: --prompt is %zu tokens; it must hold 1 to %d (the context, %d positions, holds "
                "the prompt and the new tokens)\n", n_prompt, cfg.max_seq_len - 1, cfg.max_seq_len);
        return 1;
    }

    gpt2rt_memory_plan plan;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", plan.error); return 1; }
    char table[2048];
    gpt2rt_plan_format(&plan, table, sizeof table);
    printf("%s", table);
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK ||
        (init && gpt2rt_weights_load(ctx, init) != GPT2RT_OK)) {
        fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 1;
    }
    cfg = gpt2rt_config_get(ctx);
    if (cfg.n_devices > 1) { /* what each rank holds here (the CPU ranks share one host) */
        gpt2rt_memory_plan got;
        if (gpt2rt_plan_allocated(ctx, &got) == GPT2RT_OK) {
            printf("allocated (gpt2rt_plan_allocated), MiB:");
            for (int d = 0; d < got.n_devices; d++) printf(" device %d %.2f%s", d, got.total[d] / 1048576.0, d + 1 < got.n_devices ? "," : "\n");
        }
        printf("%s over %d CPU devices: %d sequences a step, %d on each device%s\n", parallel, cfg.n_devices, rows,
               dp ? cfg.batch_size : rows, split ? " in turn (each device runs its stage of the layers)" : "");
    }
    printf("training on %lld tokens, validating on %lld; %d steps of %d x %d tokens", (long long)train.n,
           (long long)val.n, steps, rows, cfg.seq_len);
    if (minutes > 0) printf(", at most %g minutes", minutes);
    printf("\n");
    int BT = rows * cfg.seq_len; /* every device's rows: data parallel calls take them all */
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT);
    uint64_t rng = 1, val_rng;
    double t_train = 0, t0 = now(), t_eval = 0, t_probe = 0;
    int step = 0, rc = 0, probe = minutes > 0 && steps > BUDGET_PROBE ? BUDGET_PROBE : 0;
    if (probe) printf("--minutes %g: the schedule is sized after the first %d steps\n", minutes, probe);
    for (;; step++) {
        int out_of_time = minutes > 0 && now() - t0 >= minutes * 60.0;
        int last = step == steps || out_of_time;
        if (step % eval_every == 0 || last) {
            float sum = 0, l = 0;
            double te = now();
            val_rng = 42; /* the same validation batches every time */
            for (int k = 0; k < 8 && !rc; k++) {
                get_batch(&val, rows, cfg.seq_len, &val_rng, x, y);
                if (gpt2rt_forward(ctx, x, y, &l) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); rc = 1; }
                sum += l;
            }
            if (rc) break;
            t_eval = now() - te;
            printf("step %4d  val loss %.4f  (%.1f min)\n", step, sum / 8, (now() - t0) / 60.0);
        }
        if (last) break;
        gpt2rt_step_stats st;
        get_batch(&train, rows, cfg.seq_len, &rng, x, y);
        if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); rc = 1; break; }
        t_train += st.seconds;
        if (step) t_probe += st.seconds;
        if (step % 10 == 0 || steps <= 20) /* a short run: every step */
            printf("step %4d  loss %.4f  norm %.3f  lr %.2e  %.0f ms  %.0f tok/s\n", step, st.loss, st.grad_norm, st.lr,
                   st.seconds * 1e3, (double)st.tokens / st.seconds);
        if (probe && step + 1 == probe) { /* the budget's plan: warmup and decay end within it */
            double end_s, t_step = t_probe / (probe - 1);
            int total = budget_steps(minutes * 60.0, now() - t0, t_step, t_eval, eval_every, probe, steps, &end_s);
            int warm = cfg.warmup_steps;
            if (total < steps) { /* the warmup keeps its share of the run */
                warm = (int)floor((double)cfg.warmup_steps * total / steps + 0.5);
                if (warm < 1 && cfg.warmup_steps) warm = 1;
                if (gpt2rt_schedule_set(ctx, warm, total) != GPT2RT_OK) {
                    fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
                    rc = 1;
                    break;
                }
            }
            printf("plan: %.0f ms a step, %.1f s a validation pass -> %d steps (%s), warmup %d, cosine to %.2e at "
                   "step %d; expected end %.1f min of %g\n", t_step * 1e3, t_eval, total,
                   total < steps ? "re-sized to the budget" : "--steps fits", warm, lr * cfg.min_lr_frac, total,
                   end_s / 60.0, minutes);
            steps = total;
        }
    }
    if (step && t_train > 0) printf("%d steps in %.1f s of training: %.0f tokens/s\n", step, t_train, (double)step * BT / t_train);

    if (n_gen && !rc) { /* a sample from the prompt, through the KV cache */
        int64_t cap = cfg.kv_len, len = (int64_t)n_prompt;
        samp.max_new_tokens = n_gen < cap - len ? n_gen : (int)(cap - len); /* the context holds the rest */
        if (samp.max_new_tokens < n_gen)
            printf("\n--gen %d: the context (%lld positions) holds the prompt's %lld tokens and %d new ones\n", n_gen,
                   (long long)cap, (long long)len, samp.max_new_tokens);
        samp.on_token = print_token; samp.user = tok;
        printf("\nsample (temperature %g, top-k %d, top-p %g, seed %llu):\n%s", (double)samp.temperature, samp.top_k,
               (double)(samp.top_p ? samp.top_p : 1.0f), (unsigned long long)(samp.seed ? samp.seed : cfg.seed), prompt);
        if (gpt2rt_generate(ctx, &samp, 1, row, cap, &len) != GPT2RT_OK) {
            fprintf(stderr, "\ngpt2rt: %s\n", gpt2rt_last_error(ctx));
            rc = 1;
        } else printf("\n(%lld new tokens)\n", (long long)(len - (int64_t)n_prompt));
    }
    if (save && !rc) {
        if (gpt2rt_weights_save(ctx, save) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
            rc = 1;
        } else printf("saved %s/model.safetensors and %s/config.json\n", save, save);
    }
    gpt2rt_free(ctx);
    gpt2rt_tok_free(tok);
    free(row); free(x); free(y); free(train.tok); free(val.tok);
    return rc;
}
