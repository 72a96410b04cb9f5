/* examples/train_text.c - from a text file to a GPT-2 that writes text, no Python.
   Trains (or fine-tunes) a GPT-2 on GPT-2 BPE tokens, prints the training and
   validation loss, samples text from a prompt with the KV cache at the end, and can
   save a checkpoint that Hugging Face transformers loads. `make demo` runs it with
   no options: a small model on the tinyshakespeare excerpt shipped in data/ (llm.c
   token files).

   usage: train_text [options]   (each option also with one dash: -steps 10)
     data:    --text FILE      any UTF-8 file, tokenized here with the GPT-2 tokenizer
                               ("<|endoftext|>" in it is the special token); the
                               first 90% of the tokens train, the last 10% validate
              --train FILE --val FILE   llm.c .bin token files (the default: data/'s)
              --vocab DIR      the tokenizer's files (default data: gpt2_merges.bin)
     model:   --init DIR       start from a Hugging Face checkpoint (DIR/model.safetensors,
                               shape from DIR/config.json; --layers may then take fewer)
              --layers L --heads H --width C --seq T   (a new model: 4, 4, 128, 64)
     train:   --steps N --batch B --lr X --eval-every N
              --minutes M      stop training after M minutes of wall time (the
                               schedule still spans --steps: pick both)
     sample:  --prompt TEXT    (default "<|endoftext|>": unconditional) --gen N new tokens
                               (default 64; at most the context) --temperature X (default
                               0.8; 0 greedy) --top-k K (default 40) --top-p P --seed S
     save:    --save DIR       DIR/model.safetensors + DIR/config.json */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    const char *train_path = "data/tinyshakespeare_train.bin", *val_path = "data/tinyshakespeare_val.bin";
    const char *init = NULL, *save = NULL, *text = NULL, *vocab = "data", *prompt = "<|endoftext|>";
    int steps = 200, eval_every = 50, n_gen = 64;
    double minutes = 0;
    gpt2rt_sample samp;
    memset(&samp, 0, sizeof samp);
    samp.temperature = 0.8f; samp.top_k = 40;
    gpt2rt_config cfg = {0};
    cfg.n_layer = 4; cfg.n_head = 4; cfg.n_embd = 128; cfg.max_seq_len = 64;
    cfg.batch_size = 8; cfg.seq_len = 64;
    cfg.lr = 2e-3f; cfg.warmup_steps = 20; cfg.min_lr_frac = 0.1f; cfg.weight_decay = 0.1f;
    int layers = 0, heads = 0, width = 0, seq = 0; /* 0: not given */
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i] + (argv[i][0] == '-' && argv[i][1] == '-'), *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "train_text: %s needs a value (see the comment at the top of examples/train_text.c)\n", argv[i]); return 1; }
        if (!strcmp(k, "-steps")) steps = atoi(v);
        else if (!strcmp(k, "-layers")) layers = atoi(v);
        else if (!strcmp(k, "-heads")) heads = atoi(v);
        else if (!strcmp(k, "-width")) width = atoi(v);
        else if (!strcmp(k, "-batch")) cfg.batch_size = atoi(v);
        else if (!strcmp(k, "-seq")) seq = atoi(v);
        else if (!strcmp(k, "-lr")) cfg.lr = (float)atof(v);
        else if (!strcmp(k, "-eval-every")) eval_every = atoi(v);
        else if (!strcmp(k, "-minutes")) minutes = atof(v);
        else if (!strcmp(k, "-init")) init = v;
        else if (!strcmp(k, "-save")) save = v;
        else if (!strcmp(k, "-train")) train_path = v;
        else if (!strcmp(k, "-val")) val_path = v;
        else if (!strcmp(k, "-text")) text = v;
        else if (!strcmp(k, "-vocab")) vocab = v;
        else if (!strcmp(k, "-prompt")) prompt = v;
        else if (!strcmp(k, "-gen")) n_gen = atoi(v);
        else if (!strcmp(k, "-temperature")) samp.temperature = (float)atof(v);
        else if (!strcmp(k, "-top-k")) samp.top_k = atoi(v);
        else if (!strcmp(k, "-top-p")) samp.top_p = (float)atof(v);
        else if (!strcmp(k, "-seed")) samp.seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "train_text: unknown option %s (see the comment at the top of examples/train_text.c)\n", argv[i]); return 1; }
    }
    if (steps < 1 || eval_every < 1 || n_gen < 0 || minutes < 0) {
        fprintf(stderr, "train_text: --steps %d and --eval-every %d must be >= 1, --gen %d and --minutes %g >= 0\n", steps,
                eval_every, n_gen, minutes);
        return 1;
    }
    if (init) { /* the checkpoint's shape: n_layer, n_head, n_embd, vocab_size, n_positions */
        char err[512];
        if (gpt2rt_config_load(&cfg, init, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", err); return 1; }
    }
    if (layers) cfg.n_layer = layers;
    if (heads) cfg.n_head = heads;
    if (width) cfg.n_embd = width;
    if (seq) { cfg.seq_len = seq; if (!init) cfg.max_seq_len = seq; }
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
    printf("training on %lld tokens, validating on %lld; %d steps of %d x %d tokens", (long long)train.n,
           (long long)val.n, steps, cfg.batch_size, cfg.seq_len);
    if (minutes > 0) printf(", at most %g minutes", minutes);
    printf("\n");
    int BT = cfg.batch_size * cfg.seq_len;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT);
    uint64_t rng = 1, val_rng;
    double t_train = 0, t0 = now();
    int step = 0;
    for (;; step++) {
        int out_of_time = minutes > 0 && now() - t0 >= minutes * 60.0;
        int last = step == steps || out_of_time;
        if (step % eval_every == 0 || last) {
            float sum = 0, l;
            val_rng = 42; /* the same validation batches every time */
            for (int k = 0; k < 8; k++) {
                get_batch(&val, cfg.batch_size, cfg.seq_len, &val_rng, x, y);
                gpt2rt_forward(ctx, x, y, &l);
                sum += l;
            }
            printf("step %4d  val loss %.4f  (%.1f min)\n", step, sum / 8, (now() - t0) / 60.0);
        }
        if (last) break;
        gpt2rt_step_stats st;
        get_batch(&train, cfg.batch_size, cfg.seq_len, &rng, x, y);
        if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); break; }
        t_train += st.seconds;
        if (step % 10 == 0)
            printf("step %4d  loss %.4f  norm %.3f  lr %.2e  %.0f ms  %.0f tok/s\n", step, st.loss, st.grad_norm, st.lr,
                   st.seconds * 1e3, (double)st.tokens / st.seconds);
    }
    if (step) printf("%d steps in %.1f s of training: %.0f tokens/s\n", step, t_train, (double)step * BT / t_train);

    int rc = 0;
    if (n_gen) { /* a sample from the prompt, through the KV cache */
        int64_t cap = cfg.kv_len, len = (int64_t)n_prompt;
        samp.max_new_tokens = n_gen;
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
