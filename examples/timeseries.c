/* examples/timeseries.c - GPT4TS-style forecasting ("One Fits All") on an ETT-format
   CSV: train on the training split, stop early on the validation split, score every
   test window; save the forecaster, and forecast with it. Each step is a library call
   (gpt2rt.h "12. Forecaster"); this program parses the flags and prints.

       timeseries --horizon H [--data FILE.csv] [--preset cpu|gpt4ts|allm4ts] [settings]
       timeseries --preset allm4ts --stage pretrain --data A.csv,B.csv --save DIR
       timeseries --preset allm4ts --stage finetune --init DIR --horizon H
       timeseries predict --model DIR --data FILE.csv [--out forecasts.csv] [--all] [--score]
                          [--backtest K] [--interval A [--calibrate]]

   --help lists every flag and the presets; docs/timeseries.md walks through a run. The
   last two lines of a run are the test scores on the scaled data:
       test (drop last) mse <x> mae <y> windows <n>   whole batches of --drop-last N only
       test mse <x> mae <y> windows <n>               every test window
   Exit status: 0 ok, 1 an error, 2 a bad argument. */
#define _POSIX_C_SOURCE 200809L /* readlink, stat and S_ISREG under -std=c11 */
#define _XOPEN_SOURCE 700       /* realpath */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "timeseries"
#include "../tools/cli.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* PNG plots with stb (Debian libstb-dev): stb_image_write and stb_easy_font; without
   them (or with -DTS_NO_PNG) --png says so and the rest runs */
#if defined(__has_include) && !defined(TS_NO_PNG)
#if __has_include(<stb/stb_image_write.h>) && __has_include(<stb/stb_easy_font.h>)
#define TS_PNG 1
#endif
#endif
#ifdef TS_PNG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop
#endif

typedef struct opts {
    const char *data, *preset, *init, *png, *target, *backend, *parallel, *save, *date_column, *columns, *channel;
    int fill;  /* gpt2rt_series_fill */
    int stage; /* 0: GPT4TS's flatten head; 1: aLLM4TS pretrain; 2: aLLM4TS finetune */
    char data_buf[4096];
    char *data_list;    /* a copy of --data, cut at its commas into files */
    const char **files; /* --data's files, nfiles of them */
    int nfiles;
    gpt2rt_config c;                 /* the preset's (gpt2rt_forecaster_recipe_get), then the flags' */
    gpt2rt_forecaster_train_desc td; /* the same: batch, epochs, patience, max_steps, the linear map's use */
    int freeze, recompute;           /* --freeze, --recompute; -1: the preset's */
    int steps_per_epoch, drop_last;
    int shape_set; /* --lookback, --patch or --stride given: no choice for a short file */
    int season; /* the seasonal-naive baseline's period in rows, 0: the dates' calendar cycle */
    uint64_t seed;
} opts;

static void usage(void) {
    printf("usage: timeseries --horizon H [--data FILE.csv] [--preset cpu|gpt4ts|allm4ts] [--seed S] [--init DIR] [--png FILE]\n"
           "       timeseries --stage pretrain --data A.csv[,B.csv...] --save DIR [settings]   (aLLM4TS stage 1)\n"
           "       timeseries --stage finetune --init DIR --horizon H [settings]               (aLLM4TS stage 2)\n"
           "       timeseries predict --model DIR --data FILE.csv [--out F] [--all] [--score] [--backtest K]\n"
           "                          [--interval A [--calibrate]]                             (forecasts: predict --help)\n"
           "  --stage S           pretrain: next-patch pre-training on every --data file's training rows, pooled;\n"
           "                      finetune: patch-wise decoding with placeholders (default with --preset allm4ts)\n"
           "  --save DIR          pretrain: the best epoch's weights (model.safetensors + config.json); otherwise the\n"
           "                      forecaster: those and forecaster.json (scaler, columns, dates, linear map, blend,\n"
           "                      split-conformal intervals fit on the validation split: predict --interval),\n"
           "                      what timeseries predict reads; a new name in an existing directory, or an\n"
           "                      existing directory, checked before the first step\n"
           "  --data FILE.csv     an ETT-format CSV (default: the repository's data/ETTh2.csv); pretrain takes a\n"
           "                      comma-separated list, each file once\n"
           "  --devices N         CPU ranks, one thread each, in this process (default 1)\n"
           "  --parallel MODE     dp: data parallel (--batch split over the devices), zero1: dp with the\n"
           "                      AdamW state sharded (ZeRO-1), split: the layers in N stages; default dp\n"
           "                      when N > 1; prints each device's planned memory (--max-steps: each step's loss)\n"
           "settings (each overrides the preset):\n"
           "  --target NAME       forecast one column (default: every column, channel independent)\n"
           "  --columns a,b,c     forecast these columns, in this order (not with --target)\n"
           "  --date-column NAME  the date column (none: there is none, unless a column is named none; default:\n"
           "                      a column named date, time, timestamp or datetime, else the first column when\n"
           "                      it holds text)\n"
           "  --fill MODE         missing values (empty, NA, NaN, null): refuse (default), previous, linear;\n"
           "                      --save keeps it: predict fills as training did\n"
           "  --lookback L        input steps            --patch P / --stride S  patching (none of the three given\n"
           "                      and the file too short for the preset's lookback: about half the training rows,\n"
           "                      in patches of a lookback / 8 steps, a line saying so)\n"
           "  --layers N          GPT-2 blocks           --heads N / --width C   attention heads, model width\n"
           "  --lr X              peak learning rate     --min-lr-frac F         cosine floor (lr * F)\n"
           "  --warmup N          warmup steps           --weight-decay X        AdamW weight decay\n"
           "  --clip X            gradient-norm clip (negative: none)\n"
           "  --dropout P         embeddings + residual branches   --attn-dropout P / --head-dropout P\n"
           "  --batch B           windows per step       --epochs N              at most N epochs\n"
           "  --patience N        stop after N epochs without a better validation MSE\n"
           "  --revin-affine 0|1  RevIN's learned affine  --freeze 0|1           freeze attention + MLP (GPT4TS)\n"
           "  --steps-per-epoch N at most N steps an epoch (0: every batch; for quick runs)\n"
           "  --max-steps N       stop after N steps, print their times and the whole run's estimate, no scoring\n"
           "                      and nothing saved (both stages)\n"
           "  --recompute 0|1|2   activation recompute: none, selective, full (memory for time)\n"
           "  --precision P       fp32 (default), bf16 or fp16 (dynamic loss scaling): bf16 and fp16 on the CUDA\n"
           "                      backend; the plan printed before training is the chosen precision's\n"
           "  --linear-residual 0|1  fit the least-squares linear map of the RevIN-normalised lookback first\n"
           "                      (tools/ts_baselines' linear, ridge chosen on validation) and train the model on\n"
           "                      what it leaves: forecast = linear map + model\n"
           "  --drop-last N       the \"test (drop last)\" line scores whole batches of N test windows only,\n"
           "                      as a test loader with drop_last=True does (default: --batch)\n"
           "  --blend-linear 0|1  after training, move the forecast a fraction w of the way to that linear map's,\n"
           "                      w in [0, 1] minimising the validation MSE (exact: the MSE is quadratic in w)\n"
           "  --channel NAME      the channel --png draws (default: the last)\n"
           "  --season N          the seasonal-naive baseline's period in rows (default: the dates' calendar cycle: 24\n"
           "                      hourly, 7 daily, 5 business-daily, 52 weekly, 12 monthly; --save keeps it)\n"
           "  --threads N         CPU threads (0: OMP_NUM_THREADS)\n"
           "  --backend B         cpu, cuda (this program built by nvcc as a .cu file) or auto (default)\n"
           "presets: cpu (default): lookback 336, patch 16, stride 16, 1 layer, 2 heads, width 16, attention + MLP\n"
           "         frozen at their random init, lr 1e-4, batch 16, head dropout 0.3, 10 epochs, patience 3, cosine\n"
           "         to 0, no weight decay, --linear-residual 1 --blend-linear 1 (the model alone:\n"
           "         --linear-residual 0 --blend-linear 0 --lr 1e-3);\n"
           "         gpt4ts: GPT4TS's ETTh setting: lookback 336, patch 16, stride 8, 6 layers, 12 heads, width 768,\n"
           "         lr 1e-4, batch 256, 10 epochs, patience 3, cosine; attention + MLP frozen when --init is given;\n"
           "         full recompute (7.2 GiB planned instead of 23 GiB at batch 256)\n"
           "         allm4ts: aLLM4TS's scripts: 6 layers, 12 heads, width 768 (GPT-2's, from --init); pretrain:\n"
           "         lookback 1024, patch 16 stride 16, lr 1e-4, batch 2048 series, dropout 0.2, everything\n"
           "         trained; finetune: lookback 336, patch 16 stride 8, lr 3e-3, batch 256, LayerNorms, wpe\n"
           "         and in/out layers trained (attention + MLP frozen)\n");
}

/* ---- the command line: every number parsed whole (no trailing text, no overflow,
   finite, in range); a bad one is refused naming the flag and the value, exit 2 ---- */


/* --data cut at its commas into o->files: no empty entry, each file once (a file named
   twice, under any path, would be pooled twice); a list only in stage 1, which pools */
static int data_files(opts *o) {
    size_t n = strlen(o->data);
    o->data_list = (char *)malloc(n + 1);
    o->files = (const char **)malloc(sizeof(char *) * (n / 2 + 2));
    if (!o->data_list || !o->files) { fprintf(stderr, "timeseries: out of memory\n"); return 0; }
    memcpy(o->data_list, o->data, n + 1);
    int empty = 0, all_empty = 1;
    o->nfiles = 0;
    for (char *p = o->data_list;;) {
        char *c = strchr(p, ',');
        if (c) *c = 0;
        if (*p) all_empty = 0;
        else if (!empty) empty = o->nfiles + 1;
        o->files[o->nfiles++] = p;
        if (!c) break;
        p = c + 1;
    }
    if (all_empty) {
        fprintf(stderr, "timeseries: --data '%s': no file given (--data FILE.csv%s)\n", o->data,
                o->stage == 1 ? ", or A.csv,B.csv,... to pool several" : "");
        return 0;
    }
    if (empty) {
        fprintf(stderr, "timeseries: --data: entry %d of %d is empty (two commas in a row, or one at an end)\n", empty,
                o->nfiles);
        return 0;
    }
    if (o->nfiles > 1 && o->stage != 1) {
        fprintf(stderr, "timeseries: --data names %d files; this stage trains on one file (--stage pretrain pools a "
                "list)\n", o->nfiles);
        return 0;
    }
    struct stat st; /* a missing file: the loader names it */
    for (int i = 0; i < o->nfiles; i++)
        for (int j = 0; j < i; j++)
            if (gpt2rt_forecaster_path_clash(o->files[i], o->files[j]) == GPT2RT_FORECASTER_SAME_FILE &&
                stat(o->files[i], &st) == 0) {
                fprintf(stderr, "timeseries: --data: entries %d (%s) and %d (%s) are the same file; each file is pooled "
                        "once\n", j + 1, o->files[j], i + 1, o->files[i]);
                return 0;
            }
    return 1;
}

/* an output path checked before any work (gpt2rt_forecaster_path_check): dir (--save)
   a writable directory or a new name in one, a file (--png, --out) a new or writable one */
static int out_path_ok(const char *flag, const char *path, int dir) {
    char why[600];
    if (gpt2rt_forecaster_path_check(path, dir, why, sizeof why) == GPT2RT_OK) return 1;
    fprintf(stderr, "timeseries: %s %s: %s\n", flag, path, why);
    return 0;
}

/* 1 (and a line naming both) when writing output oflag opath could touch input iflag
   ipath (gpt2rt_forecaster_path_clash); prog: "timeseries" or "timeseries predict" */
static int paths_clash(const char *prog, const char *oflag, const char *opath, const char *iflag, const char *ipath) {
    gpt2rt_forecaster_clash k = gpt2rt_forecaster_path_clash(opath, ipath);
    if (k == GPT2RT_FORECASTER_SAME_FILE || k == GPT2RT_FORECASTER_SAME_DIR)
        fprintf(stderr, "%s: %s %s and %s %s are the same %s: writing %s would replace it; name another path\n", prog,
                oflag, opath, iflag, ipath, k == GPT2RT_FORECASTER_SAME_DIR ? "directory" : "file", oflag);
    else if (k == GPT2RT_FORECASTER_OUT_INSIDE)
        fprintf(stderr, "%s: %s %s lies inside %s %s: writing it there could replace that directory's files; name a "
                "path outside it\n", prog, oflag, opath, iflag, ipath);
    else if (k == GPT2RT_FORECASTER_IN_INSIDE)
        fprintf(stderr, "%s: %s %s lies inside %s %s, which %s writes into: name another %s\n", prog, iflag, ipath,
                oflag, opath, oflag, oflag);
    return k != GPT2RT_FORECASTER_APART;
}

static int parse(opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->preset = "cpu";
    o->seed = 1;
    o->freeze = o->recompute = -1;
    const char *stage = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage(); exit(0); }
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) o->preset = argv[i + 1];
        if (strcmp(argv[i], "--stage") == 0 && i + 1 < argc) stage = argv[i + 1];
    }
    if (strcmp(o->preset, "cpu") != 0 && strcmp(o->preset, "gpt4ts") != 0 && strcmp(o->preset, "allm4ts") != 0) {
        fprintf(stderr, "timeseries: --preset '%s': expected cpu, gpt4ts or allm4ts\n", o->preset);
        return 0;
    }
    if (stage && strcmp(stage, "pretrain") != 0 && strcmp(stage, "finetune") != 0) {
        fprintf(stderr, "timeseries: --stage '%s': expected pretrain or finetune\n", stage);
        return 0;
    }
    o->stage = !stage ? (strcmp(o->preset, "allm4ts") == 0 ? 2 : 0) : strcmp(stage, "pretrain") == 0 ? 1 : 2;
    gpt2rt_forecaster_recipe_get(!strcmp(o->preset, "gpt4ts") ? GPT2RT_FORECASTER_RECIPE_GPT4TS
                                 : !strcmp(o->preset, "allm4ts") ? GPT2RT_FORECASTER_RECIPE_ALLM4TS
                                 : GPT2RT_FORECASTER_RECIPE_CPU, o->stage == 1 ? GPT2RT_HEAD_NEXT_PATCH
                                 : o->stage == 2 ? GPT2RT_HEAD_PATCH_DECODE : GPT2RT_HEAD_REGRESSION, &o->c, &o->td);
    o->c.n_devices = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "timeseries: %s needs a value (see --help)\n", a); return 0; }
        i++;
#define INT_OPT(flag, field, lo, hi) \
    if (strcmp(a, flag) == 0) {      \
        if (!arg_int(a, v, lo, hi, &o->field)) return 0; \
        continue;                    \
    }
#define FLOAT_OPT(flag, field, lo, hi, open_lo, open_hi) \
    if (strcmp(a, flag) == 0) {                          \
        if (!arg_realf(a, v, lo, hi, open_lo, open_hi, &o->field)) return 0; \
        continue;                                        \
    }
        if (strcmp(a, "--data") == 0) { o->data = v; continue; }
        o->shape_set |= !strcmp(a, "--lookback") || !strcmp(a, "--patch") || !strcmp(a, "--stride");
        if (strcmp(a, "--preset") == 0 || strcmp(a, "--stage") == 0) continue;
        if (strcmp(a, "--save") == 0) { o->save = v; continue; }
        if (strcmp(a, "--init") == 0) { o->init = v; continue; }
        if (strcmp(a, "--png") == 0) { o->png = v; continue; }
        if (strcmp(a, "--target") == 0) { o->target = v; continue; }
        if (strcmp(a, "--date-column") == 0) { o->date_column = v; continue; }
        if (strcmp(a, "--columns") == 0) { o->columns = v; continue; }
        if (strcmp(a, "--channel") == 0) { o->channel = v; continue; }
        if (strcmp(a, "--precision") == 0) {
            int p = !strcmp(v, "fp32") ? GPT2RT_PRECISION_FP32 : !strcmp(v, "bf16") ? GPT2RT_PRECISION_BF16
                  : !strcmp(v, "fp16") ? GPT2RT_PRECISION_FP16 : -1;
            if (p < 0) { fprintf(stderr, "timeseries: --precision '%s': expected fp32, bf16 or fp16\n", v); return 0; }
            o->c.precision = (gpt2rt_precision)p; /* bf16, fp16: the CUDA backend's; the CPU's refusal says so */
            continue;
        }
        if (strcmp(a, "--fill") == 0) {
            o->fill = !strcmp(v, "refuse") ? GPT2RT_SERIES_FILL_REFUSE : !strcmp(v, "previous") ? GPT2RT_SERIES_FILL_PREVIOUS
                    : !strcmp(v, "linear") ? GPT2RT_SERIES_FILL_LINEAR : -1;
            if (o->fill < 0) { fprintf(stderr, "timeseries: --fill '%s': expected previous, linear or refuse\n", v); return 0; }
            continue;
        }
        if (strcmp(a, "--backend") == 0) {
            if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0 && strcmp(v, "auto") != 0) {
                fprintf(stderr, "timeseries: --backend '%s': expected cpu, cuda or auto\n", v);
                return 0;
            }
            o->backend = v;
            continue;
        }
        if (strcmp(a, "--parallel") == 0) {
            if (strcmp(v, "none") && strcmp(v, "dp") && strcmp(v, "zero1") && strcmp(v, "split")) {
                fprintf(stderr, "timeseries: --parallel '%s': expected dp, zero1, split or none\n", v);
                return 0;
            }
            o->parallel = v;
            continue;
        }
        if (strcmp(a, "--seed") == 0) {
            char *e;
            errno = 0;
            unsigned long long seed = strtoull(v, &e, 10);
            if (v[0] < '0' || v[0] > '9' || *e || errno) { /* strtoull would take "-1" as 2^64 - 1 */
                fprintf(stderr, "timeseries: --seed '%s': expected an integer in [0, %llu]\n", v,
                        (unsigned long long)UINT64_MAX);
                return 0;
            }
            o->seed = (uint64_t)seed;
            continue;
        }
        INT_OPT("--horizon", c.horizon, 1, 1 << 20)
        INT_OPT("--lookback", c.seq_len, 1, 1 << 20)
        INT_OPT("--patch", c.patch_len, 1, 1 << 20)
        INT_OPT("--stride", c.patch_stride, 1, 1 << 20)
        INT_OPT("--layers", c.n_layer, 1, 1024)
        INT_OPT("--heads", c.n_head, 1, 1024)
        INT_OPT("--width", c.n_embd, 1, 65536)
        INT_OPT("--batch", td.batch, 1, 1 << 20)
        INT_OPT("--epochs", td.epochs, 1, 1000000)
        INT_OPT("--patience", td.patience, 1, 1000000)
        INT_OPT("--warmup", c.warmup_steps, 0, 1000000000)
        INT_OPT("--revin-affine", c.revin_affine, 0, 1)
        INT_OPT("--freeze", freeze, 0, 1)
        INT_OPT("--threads", c.n_threads, 0, 1024)
        INT_OPT("--steps-per-epoch", steps_per_epoch, 0, 1000000000)
        INT_OPT("--max-steps", td.max_steps, 0, 1000000000)
        INT_OPT("--recompute", recompute, 0, GPT2RT_RECOMPUTE_FULL)
        INT_OPT("--linear-residual", td.linear_residual, 0, 1)
        INT_OPT("--blend-linear", td.blend_linear, 0, 1)
        INT_OPT("--drop-last", drop_last, 1, 1 << 20)
        INT_OPT("--season", season, 1, 1 << 20)
        INT_OPT("--devices", c.n_devices, 1, GPT2RT_MAX_DEVICES)
        FLOAT_OPT("--lr", c.lr, 0, 1000, 1, 1)
        FLOAT_OPT("--min-lr-frac", c.min_lr_frac, 0, 1, 0, 0)
        FLOAT_OPT("--weight-decay", c.weight_decay, 0, 1000, 0, 1)
        FLOAT_OPT("--clip", c.grad_clip, -1e30, 1e30, 0, 0)
        FLOAT_OPT("--dropout", c.dropout, 0, 1, 0, 1)
        FLOAT_OPT("--attn-dropout", c.attn_dropout, 0, 1, 0, 1)
        FLOAT_OPT("--head-dropout", c.head_dropout, 0, 1, 0, 1)
#undef INT_OPT
#undef FLOAT_OPT
        fprintf(stderr, "timeseries: unknown option %s (see --help)\n", a);
        return 0;
    }
    if (o->stage == 1 && o->c.horizon) {
        fprintf(stderr, "timeseries: --stage pretrain predicts the next patch of the lookback: no --horizon\n");
        return 0;
    }
    if (o->stage == 1 && (o->td.linear_residual || o->td.blend_linear)) {
        fprintf(stderr, "timeseries: --stage pretrain has no horizon to forecast: --linear-residual %d and "
                "--blend-linear %d must be 0\n", o->td.linear_residual, o->td.blend_linear);
        return 0;
    }
    if (o->stage == 1 && o->png) {
        fprintf(stderr, "timeseries: --png %s draws forecasts of test windows; --stage pretrain forecasts none (it "
                "predicts the next patch of each lookback): leave --png out\n", o->png);
        return 0;
    }
    if (o->channel && !o->png) {
        fprintf(stderr, "timeseries: --channel %s picks the channel --png draws: give --png FILE too\n", o->channel);
        return 0;
    }
    if (o->stage == 1 && o->drop_last) {
        fprintf(stderr, "timeseries: --drop-last %d scores the test split in whole batches; --stage pretrain scores no "
                "test split (it validates on next-patch mse): leave --drop-last out\n", o->drop_last);
        return 0;
    }
    if (o->stage == 1 && !o->save && !o->td.max_steps) {
        fprintf(stderr, "timeseries: --stage pretrain needs --save DIR (where the weights go)\n");
        return 0;
    }
    if (o->stage != 1 && !o->c.horizon) { fprintf(stderr, "timeseries: --horizon H is required (see --help)\n"); return 0; }
    if (!o->data) o->data = repo_path("data/ETTh2.csv", o->data_buf, sizeof o->data_buf);
    if (!data_files(o) || (o->save && !out_path_ok("--save", o->save, 1)) || (o->png && !out_path_ok("--png", o->png, 0)))
        return 0;
    /* the outputs (--save, --png) against the inputs (--data files, --init) and each other */
    for (int k = 0; k < 2; k++) {
        const char *of = k ? "--png" : "--save", *op = k ? o->png : o->save;
        for (int i = 0; i < o->nfiles; i++)
            if (paths_clash("timeseries", of, op, "--data", o->files[i])) return 0;
        if (paths_clash("timeseries", of, op, "--init", o->init)) return 0;
    }
    if (paths_clash("timeseries", "--png", o->png, "--save", o->save) ||
        paths_clash("timeseries", "--save", o->save, "--png", o->png))
        return 0;
    if (!o->parallel) o->parallel = o->c.n_devices > 1 ? "dp" : "none";
    int dp = !strcmp(o->parallel, "dp") || !strcmp(o->parallel, "zero1"), split = !strcmp(o->parallel, "split");
    if ((dp || split) && o->c.n_devices < 2) {
        fprintf(stderr, "timeseries: --parallel %s needs --devices 2 or more (it is %d)\n", o->parallel, o->c.n_devices);
        return 0;
    }
    if (!dp && !split && o->c.n_devices > 1) {
        fprintf(stderr, "timeseries: --devices %d with --parallel none: set --parallel dp, zero1 or split\n", o->c.n_devices);
        return 0;
    }
    if (dp && o->td.batch % o->c.n_devices) {
        fprintf(stderr, "timeseries: --batch %d does not split over --devices %d (data parallel gives each device "
                "batch / devices windows): set --batch to a multiple of %d\n", o->td.batch, o->c.n_devices, o->c.n_devices);
        return 0;
    }
    if (o->freeze >= 0) o->c.frozen = o->freeze ? GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP : 0;
    else if (!strcmp(o->preset, "gpt4ts") && o->init) o->c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; /* GPT4TS
                                                                          freezes only what it loaded */
    if (o->recompute >= 0) o->c.recompute = (gpt2rt_recompute)o->recompute;
    return 1;
}

static double now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a loaded series' info (zero if the call failed, which a loaded series does not: the
   zeroing also tells gcc -O2 the struct is set) */
static gpt2rt_series_info info_of(gpt2rt_series *d) {
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    (void)gpt2rt_series_info_get(d, &in);
    return in;
}

/* ---- progress inside an epoch: a line on stderr (stdout stays the results) at most
   once a second; on a terminal one status line redrawn in place, cleared before the
   epoch's own line ---- */
typedef struct progress {
    double t0, last; /* the epoch's start, the last line's time */
    int tty, shown;  /* stderr is a terminal; a status line is on it */
} progress;

static void progress_start(progress *p) {
    p->t0 = p->last = now();
    p->tty = isatty(2);
    p->shown = 0;
}

/* after step done of total (each of per_step windows or series) */
static void progress_tick(progress *p, const char *what, int64_t done, int64_t total, int64_t per_step,
                          const char *unit) {
    double t = now();
    if (t - p->last < 1.0 || done >= total) return;
    p->last = t;
    double in = t - p->t0, left = in / (double)done * (double)(total - done);
    fprintf(stderr, "%s%s: step %lld/%lld, %.0f %s/s, %.1f s in, about %.0f s left%s", p->tty ? "\r" : "", what,
            (long long)done, (long long)total, (double)(done * per_step) / in, unit, in, left, p->tty ? "\033[K" : "\n");
    p->shown = p->tty;
}

static void progress_end(progress *p) {
    if (p->shown) fprintf(stderr, "\r\033[K");
    p->shown = 0;
}

#ifdef TS_PNG
static void plot_line(unsigned char *px, int w, int h, int x0, int y0, int x1, int y1, const unsigned char rgb[3]) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
    for (;;) {
        for (int oy = 0; oy < 2; oy++) /* 2 pixels thick */
            if (x0 >= 0 && x0 < w && y0 + oy >= 0 && y0 + oy < h) memcpy(px + ((size_t)(y0 + oy) * w + x0) * 3, rgb, 3);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
    }
}

/* text at (x, y) (its top left), stb_easy_font's quads filled as rectangles */
static void plot_text(unsigned char *px, int w, int h, int x, int y, const char *s, const unsigned char rgb[3]) {
    static char quads[64 * 1024];
    char text[256];
    snprintf(text, sizeof text, "%s", s);
    int n = stb_easy_font_print(0, 0, text, NULL, quads, sizeof quads);
    for (int q = 0; q < n; q++) {
        const float *v = (const float *)(const void *)(quads + q * 64); /* 4 vertices of x, y, z, rgba */
        int ax = x + (int)v[0], ay = y + (int)v[1], bx = x + (int)v[8], by = y + (int)v[9];
        for (int yy = ay; yy < by; yy++)
            for (int xx = ax; xx < bx; xx++)
                if (xx >= 0 && xx < w && yy >= 0 && yy < h) memcpy(px + ((size_t)yy * w + xx) * 3, rgb, 3);
    }
}

static int text_width(const char *s) {
    char text[256];
    snprintf(text, sizeof text, "%s", s);
    return stb_easy_font_width(text);
}
#endif

/* panels, one per test window, of one channel in the data's units: the lookback's tail
   (grey), the truth (black) and the forecast (red), each panel on its own range, with
   a title (file, channel, horizon), a legend, value labels on the y axis and steps from
   the forecast's start on the x axis */
static int draw_png(const char *path, const char *file, gpt2rt_series *data, int64_t L, int64_t H, int64_t M,
                    int64_t m, const float *pred, int64_t n_win, int64_t spacing) {
    const char *cname = gpt2rt_series_column(data, (int)m) ? gpt2rt_series_column(data, (int)m) : "?";
#ifdef TS_PNG
    const int pw = 720, ph = 220, head = 40, left = 76, right = 28, top_pad = 22, bottom = 26;
    const int w = pw, h = head + ph * (int)n_win;
    unsigned char *px = (unsigned char *)malloc((size_t)w * h * 3);
    float *x = (float *)malloc(sizeof(float) * (size_t)(L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(H * M));
    if (!px || !x || !y) { free(px); free(x); free(y); fprintf(stderr, "--png %s: out of memory\n", path); return 0; }
    memset(px, 255, (size_t)w * h * 3);
    static const unsigned char grey[3] = {150, 150, 150}, black[3] = {0, 0, 0}, red[3] = {220, 30, 30},
                               rule[3] = {200, 200, 255}, axis[3] = {90, 90, 90};
    double mu = 0, sd = 1;
    gpt2rt_series_scaler(data, (int)m, &mu, &sd);
    gpt2rt_series_info inf = info_of(data);
    int64_t show = L < 2 * H ? L : 2 * H; /* the lookback's tail */
    char t[256];
    const char *fname = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    snprintf(t, sizeof t, "%.100s, channel %.40s: horizon %lld steps, %lld test windows", fname, cname, (long long)H,
             (long long)n_win);
    plot_text(px, w, h, 10, 8, t, black);
    { /* the legend */
        int lx = 10, ly = 24;
        const unsigned char *col[3] = {grey, black, red};
        const char *lab[3] = {"history (lookback)", "truth", "forecast"};
        for (int k = 0; k < 3; k++) {
            plot_line(px, w, h, lx, ly + 3, lx + 24, ly + 3, col[k]);
            plot_text(px, w, h, lx + 30, ly, lab[k], black);
            lx += 30 + text_width(lab[k]) + 24;
        }
    }
    for (int64_t k = 0; k < n_win; k++) {
        gpt2rt_series_batch(data, GPT2RT_SERIES_TEST, 0, 0, k * spacing, 1, x, y);
        const float *p = pred + k * H * M;
        double lo = 1e300, hi = -1e300;
#define U(v) ((double)(v) * sd + mu) /* data units */
        for (int64_t s = L - show; s < L; s++) { lo = fmin(lo, U(x[s * M + m])); hi = fmax(hi, U(x[s * M + m])); }
        for (int64_t s = 0; s < H; s++) {
            lo = fmin(lo, fmin(U(y[s * M + m]), U(p[s * M + m])));
            hi = fmax(hi, fmax(U(y[s * M + m]), U(p[s * M + m])));
        }
        if (hi - lo < 1e-9 * (fabs(hi) + 1)) { hi += 0.5; lo -= 0.5; }
        int top = head + (int)k * ph, y0 = top + top_pad, y1 = top + ph - bottom, x0 = left, x1 = pw - right;
        int64_t steps = show + H;
#define PX(s) (int)(x0 + (double)(s) * (x1 - x0) / (double)(steps - 1))
#define PY(v) (int)(y0 + (hi - U(v)) * (y1 - y0) / (hi - lo))
        char lbl[64];
        char date[40] = "";
        int64_t row0 = inf.begin[GPT2RT_SERIES_TEST] + k * spacing + L; /* the forecast's first row */
        if (gpt2rt_series_date_column(data) && gpt2rt_series_date(data, row0, date, sizeof date) == GPT2RT_OK)
            snprintf(t, sizeof t, "test window %lld: forecast from %s", (long long)(k * spacing), date);
        else snprintf(t, sizeof t, "test window %lld: forecast from row %lld", (long long)(k * spacing), (long long)row0);
        plot_text(px, w, h, x0, top + 6, t, axis);
        plot_line(px, w, h, x0, y0, x0, y1, axis); /* the axes */
        plot_line(px, w, h, x0, y1, x1, y1, axis);
        plot_line(px, w, h, PX(show - 1), y0, PX(show - 1), y1, rule);
        for (int q = 0; q < 3; q++) { /* y: the range's ends and middle, in the data's units */
            double v = lo + (hi - lo) * q / 2.0;
            int yy = y1 - (int)((y1 - y0) * q / 2.0);
            snprintf(lbl, sizeof lbl, "%.4g", v);
            plot_line(px, w, h, x0 - 4, yy, x0, yy, axis);
            plot_text(px, w, h, x0 - 8 - text_width(lbl), yy - 3, lbl, axis);
        }
        int64_t ticks[3] = {-(show - 1), 0, H};
        for (int q = 0; q < 3; q++) { /* x: steps from the last observed one */
            int xx = PX(show - 1 + ticks[q]);
            snprintf(lbl, sizeof lbl, "%+lld", (long long)ticks[q]);
            plot_line(px, w, h, xx, y1, xx, y1 + 4, axis);
            plot_text(px, w, h, xx - text_width(lbl) / 2, y1 + 8, lbl, axis);
        }
        for (int64_t s = 1; s < show; s++)
            plot_line(px, w, h, PX(s - 1), PY(x[(L - show + s - 1) * M + m]), PX(s), PY(x[(L - show + s) * M + m]), grey);
        for (int64_t s = 0; s < H; s++) {
            float ty0 = s ? y[(s - 1) * M + m] : x[(L - 1) * M + m], py0 = s ? p[(s - 1) * M + m] : x[(L - 1) * M + m];
            plot_line(px, w, h, PX(show + s - 1), PY(ty0), PX(show + s), PY(y[s * M + m]), black);
            plot_line(px, w, h, PX(show + s - 1), PY(py0), PX(show + s), PY(p[s * M + m]), red);
        }
#undef PX
#undef PY
#undef U
    }
    int written = stbi_write_png(path, w, h, 3, px, w * 3);
    if (written) printf("wrote %s: %lld test windows of %s in the data's units (grey lookback, black truth, red "
                        "forecast)\n", path, (long long)n_win, cname);
    else fprintf(stderr, "--png %s: could not write the file\n", path);
    free(px); free(x); free(y);
    return written != 0;
#else
    (void)file; (void)L; (void)H; (void)M; (void)pred; (void)n_win; (void)spacing; (void)cname;
    printf("--png %s: skipped: this build has no stb (stb_image_write, stb_easy_font): apt-get install libstb-dev, "
           "then build again\n", path);
    return 1;
#endif
}

/* the context's config for either stage: the preset's and the flags' (o->c), GPT-2's
   shape from --init (a Hugging Face or pretrain directory, its first --layers layers),
   the parallel mode, the optimiser over steps_per_epoch * --epochs steps; 0 when
   --init has no readable config.json */
static int train_config(const opts *o, int64_t steps_per_epoch, gpt2rt_config *c) {
    *c = o->c;
    if (o->init) {
        gpt2rt_config f;
        char err[512];
        memset(&f, 0, sizeof f);
        if (gpt2rt_config_load(&f, o->init, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "%s\n", err); return 0; }
        c->n_layer = c->n_layer < f.n_layer ? c->n_layer : f.n_layer;
        c->n_head = f.n_head; c->n_embd = f.n_embd; c->vocab_size = f.vocab_size; c->max_seq_len = f.max_seq_len;
    }
    int dp = !strcmp(o->parallel, "dp") || !strcmp(o->parallel, "zero1");
    c->parallel = dp ? GPT2RT_PARALLEL_DATA : !strcmp(o->parallel, "split") ? GPT2RT_PARALLEL_LAYER_SPLIT
                     : GPT2RT_PARALLEL_NONE;
    c->shard_optimizer = !strcmp(o->parallel, "zero1");
    c->batch_size = dp ? o->td.batch / c->n_devices : o->td.batch; /* per rank under data parallel: calls take all B */
    c->total_steps = (int)(steps_per_epoch * o->td.epochs);
    c->seed = o->seed;
    if (o->backend) c->backend = strcmp(o->backend, "cpu") == 0 ? GPT2RT_BACKEND_CPU
                               : strcmp(o->backend, "cuda") == 0 ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_AUTO;
    return 1;
}

/* with --devices: each device's plan, and what each rank holds here (the CPU ranks share
   one host); what: "windows" or "series" */
static void print_devices(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, const opts *o, int64_t B, const char *what) {
    gpt2rt_config r = gpt2rt_config_get(ctx);
    if (r.n_devices < 2) return;
    char table[4096];
    gpt2rt_memory_plan got;
    gpt2rt_plan_format(plan, table, sizeof table);
    printf("%s", table);
    if (gpt2rt_plan_allocated(ctx, &got) == GPT2RT_OK) {
        printf("allocated (gpt2rt_plan_allocated), MiB:");
        for (int d = 0; d < got.n_devices; d++)
            printf(" device %d %.2f%s", d, got.total[d] / 1048576.0, d + 1 < got.n_devices ? "," : "\n");
    }
    int dp = r.parallel == GPT2RT_PARALLEL_DATA;
    printf("%s over %d CPU devices: %lld %s a step, %lld on each device%s\n", o->parallel, r.n_devices, (long long)B,
           what, (long long)(dp ? r.batch_size : B), dp ? "" : " in turn (each device runs its stage of the layers)");
}

static const char *precision_name(gpt2rt_precision p) {
    return p == GPT2RT_PRECISION_BF16 ? "bf16" : p == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
}

/* the loader's column and fill settings from the flags */
static void series_desc_flags(const opts *o, gpt2rt_series_desc *sd) {
    sd->target = o->target;
    sd->columns = o->columns;
    sd->date_column = o->date_column;
    sd->fill = (gpt2rt_series_fill)o->fill;
}

/* which column is the date and which are the channels, and what was filled */
static void print_columns(gpt2rt_series *d) {
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    (void)gpt2rt_series_info_get(d, &in);
    const char *dc = gpt2rt_series_date_column(d);
    if (dc && in.date_step > 0) {
        char a[40] = "", b[40] = "";
        gpt2rt_series_date(d, 0, a, sizeof a);
        gpt2rt_series_date(d, in.rows - 1, b, sizeof b);
        int hours = in.date_is_calendar && in.date_step >= 3600 && fmod(in.date_step, 3600) == 0;
        printf("columns: date \"%s\" (%s to %s, a row every %g%s); %d channel%s:", dc, a, b,
               hours ? in.date_step / 3600 : in.date_step,
               !in.date_is_calendar ? " (the column's units)" : hours ? " h" : " s", in.channels, in.channels > 1 ? "s" : "");
    } else if (dc) printf("columns: date \"%s\" (no regular step: forecasts carry no dates); %d channel%s:", dc,
                          in.channels, in.channels > 1 ? "s" : "");
    else printf("columns: no date column (--date-column NAME names one); %d channel%s:", in.channels,
                in.channels > 1 ? "s" : "");
    for (int m = 0; m < in.channels && m < 16; m++) {
        const char *cn = gpt2rt_series_column(d, m);
        printf("%s %s", m ? "," : "", cn ? cn : "?");
    }
    printf("%s\n", in.channels > 16 ? ", ..." : "");
    if (in.filled) printf("filled %lld missing values (--fill)\n", (long long)in.filled);
    if (in.index_column_skipped)
        printf("skipped the first column: unnamed, it counts the rows (the index pandas' to_csv writes)\n");
}


/* what the training run prints: a progress line inside an epoch (stderr), each step
   under --max-steps, each epoch's scores (stdout) */
typedef struct train_view {
    const opts *o;
    int pretrain; /* next-patch wording, series a step */
    progress pg;
} train_view;

static void on_progress(void *user, const gpt2rt_forecaster_progress *p) {
    train_view *v = (train_view *)user;
    if (p->event == GPT2RT_FORECASTER_STEP) {
        if (p->step == 1) { /* the epoch began before its first step */
            progress_start(&v->pg);
            v->pg.t0 = v->pg.last = v->pg.t0 - p->epoch_seconds;
        }
        char what[32];
        snprintf(what, sizeof what, "epoch %d", p->epoch);
        if (v->o->td.max_steps)
            printf("step %lld  train %smse %.4f  %.3g s\n", (long long)p->stats->step, v->pretrain ? "next-patch " : "",
                   (double)p->stats->loss, p->stats->seconds);
        else progress_tick(&v->pg, what, p->step, p->steps, v->o->td.batch, v->pretrain ? "series" : "windows");
        return;
    }
    progress_end(&v->pg);
    if (p->event == GPT2RT_FORECASTER_BASELINE) {
        if (p->val_mse == p->val_mse)
            printf("baseline: the last patch repeated scores val next-patch mse %.4f (the model's must be lower to have "
                   "learned anything)\n", p->val_mse);
        return;
    }
    if (v->pretrain)
        printf("epoch %2d  train next-patch mse %.4f  val %.4f%s  (%.1f s)\n", p->epoch, p->train_mse, p->val_mse,
               p->best ? "  best" : "", p->train_seconds + p->val_seconds);
    else if (p->epoch == 0) printf("epoch  0  (the linear map: out_layer zero)  val mse %.4f  best\n", p->val_mse);
    else printf("epoch %2d  train mse %.4f  val mse %.4f%s  (%.1f s train, %.1f s val)\n", p->epoch, p->train_mse,
                p->val_mse, p->best ? "  best" : "", p->train_seconds, p->val_seconds);
    if (p->stop) printf("early stop: %d epochs without a better validation mse\n", v->o->td.patience);
}

/* stage 1 on the loaded files: the context, the pre-training, --save */
static int pretrain_run(opts *o, gpt2rt_series **ds, int nf, int64_t steps) {
    int64_t B = o->td.batch;
    if (steps < 1) { fprintf(stderr, "timeseries: --batch %lld exceeds every file's training series\n", (long long)B); return 1; }
    if (o->steps_per_epoch && o->steps_per_epoch < steps) steps = o->steps_per_epoch;
    gpt2rt_config c; /* split: gpt2rt_create says why not */
    if (!train_config(o, steps, &c)) return 1;
    if (o->backend && c.backend == GPT2RT_BACKEND_AUTO) c.backend = GPT2RT_BACKEND_CPU; /* --backend auto */
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK || (o->init && gpt2rt_weights_load(ctx, o->init) != GPT2RT_OK)) {
        fprintf(stderr, "%s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 1;
    }
    gpt2rt_config r = gpt2rt_config_get(ctx);
    gpt2rt_memory_plan plan;
    gpt2rt_plan(&r, &plan);
    printf("aLLM4TS stage 1: %d layers, %d heads, width %d, lookback %d, patch %d stride %d (%lld patches), %.3fM "
           "parameters (%.3fM trained)%s, %.2f GiB planned (%s); batch %lld series, lr %g, %lld steps an epoch\n",
           r.n_layer, r.n_head, r.n_embd, r.seq_len, r.patch_len, r.patch_stride,
           (long long)((r.seq_len - r.patch_len) / r.patch_stride + 1), (double)plan.n_params / 1e6,
           (double)plan.n_trainable / 1e6, o->init ? ", blocks from --init" : ", random init",
           (double)plan.total[0] / 1073741824.0, precision_name(r.precision), (long long)B, (double)r.lr, (long long)steps);
    print_devices(ctx, &plan, o, B, "series");
    gpt2rt_forecaster_train_desc td = o->td; /* the linear map's fields: 0 in stage 1 (parse) */
    td.steps_per_epoch = steps; td.seed = o->seed;
    train_view tv = {o, 1, {0, 0, 0, 0}};
    td.progress = on_progress; td.user = &tv;
    gpt2rt_forecaster_pretrain_result pr;
    int rc = 0, timed = 0;
    if (gpt2rt_forecaster_pretrain(ctx, ds, nf, &td, &pr) != GPT2RT_OK) {
        progress_end(&tv.pg);
        fprintf(stderr, "timeseries: %s\n", gpt2rt_last_error(ctx));
        rc = 1;
    } else if (pr.max_steps_reached) {
        double per = pr.step_seconds / (double)pr.steps, n_steps = (double)steps * o->td.epochs, evals = 0;
        for (int j = 0; j < nf; j++) {
            gpt2rt_series_info in = info_of(ds[j]);
            evals += (double)(in.windows[GPT2RT_SERIES_VAL] * in.channels / B);
        }
        evals *= o->td.epochs;
        printf("--max-steps %d: %.3g s a step; the whole run (at most %.0f steps and %.0f validation "
               "batches, each about a third of a step) would take at most about %.0f s (%.1f h) here; "
               "nothing saved\n", o->td.max_steps, per, n_steps, evals, (n_steps + evals / 3) * per,
               (n_steps + evals / 3) * per / 3600);
        timed = 1;
    }
    double best = pr.best_val_mse, naive = pr.naive_val_mse;
    int best_epoch = pr.best_epoch;
    if (!rc && !timed && gpt2rt_weights_save(ctx, o->save) != GPT2RT_OK) {
        fprintf(stderr, "save: %s\n", gpt2rt_last_error(ctx));
        rc = 1;
    }
    if (!rc && !timed) printf("saved epoch %d (val next-patch mse %.4f) to %s\n", best_epoch, best, o->save);
    if (!rc && !timed && naive == naive && !(best < naive))
        printf("the model did not beat the last patch repeated on validation (%.4f against %.4f)\n", best, naive);
    gpt2rt_free(ctx);
    return rc;
}

/* aLLM4TS stage 1 (--stage pretrain): causal next-patch pre-training on the training
   rows of every --data file (comma-separated), pooled as aLLM4TS pools its datasets:
   each channel of each window is one univariate series (n_channels 1), B series a
   step, the files taking turns while each has a whole batch left in the epoch; early
   stopping on the validation series (gpt2rt_forecaster_pretrain); the best epoch's
   weights go to --save */
static int pretrain(opts *o) {
    int nf = 0;
    gpt2rt_series **ds = (gpt2rt_series **)calloc((size_t)o->nfiles, sizeof(gpt2rt_series *));
    int64_t B = o->td.batch, L = o->c.seq_len, steps = 0;
    if (!ds) { fprintf(stderr, "timeseries: out of memory\n"); return 1; }
    for (int fi = 0; fi < o->nfiles; fi++) {
        const char *f = o->files[fi];
        gpt2rt_series_desc sd;
        memset(&sd, 0, sizeof sd);
        sd.lookback = o->c.seq_len;
        sd.horizon = 1; /* the loader cuts windows of lookback + horizon rows; stage 1 reads the lookback only */
        series_desc_flags(o, &sd);
        if (gpt2rt_series_load(&ds[nf], f, &sd) != GPT2RT_OK) {
            fprintf(stderr, "%s\n", gpt2rt_series_last_error(ds[nf]));
            gpt2rt_series_free(ds[nf]);
            break;
        }
        gpt2rt_series_info in = info_of(ds[nf]);
        int64_t nser = in.windows[GPT2RT_SERIES_TRAIN] * in.channels;
        steps += nser / B;
        printf("data %s: %lld rows, %lld channels: %lld training series of %lld steps, %lld validation\n", f,
               (long long)in.rows, (long long)in.channels, (long long)nser, (long long)L,
               (long long)(in.windows[GPT2RT_SERIES_VAL] * in.channels));
        print_columns(ds[nf]);
        nf++;
    }
    int rc = nf == o->nfiles ? pretrain_run(o, ds, nf, steps) : 1;
    for (int k = 0; k < nf; k++) gpt2rt_series_free(ds[k]);
    free(ds);
    return rc;
}

/* the seasonal period in rows: --season N, else the loader's default from the calendar
   (info.season: 24 hourly, 7 daily, 5 business-daily, 52 weekly, 12 monthly, ...); 0: none */
static int64_t season_of(int season, const gpt2rt_series_info *in) {
    return season ? season : in->season > 1 ? in->season : 0;
}

/* the linear map (gpt2rt_forecaster_linear_fit); 0 after printing why, then hint */
static int fit_linear(gpt2rt_ctx *ctx, gpt2rt_series *s, gpt2rt_forecaster_linear *lm, const char *hint) {
    if (gpt2rt_forecaster_linear_fit(ctx, s, lm) == GPT2RT_OK) return 1;
    fprintf(stderr, "timeseries: %s%s\n", gpt2rt_last_error(ctx), hint);
    return 0;
}

/* the test split's table, pred (n,H,M) scaled (gpt2rt_forecaster_metrics): one row a
   channel, then "all", MSE and MAE in the scaler's units (the papers' convention) and
   in the data's (times each channel's std); then the baselines on the same windows */
static void report_test(gpt2rt_ctx *ctx, gpt2rt_series *s, const float *pred, int season,
                        const gpt2rt_forecaster_linear *lm) {
    gpt2rt_series_info in = info_of(s);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t H = c.horizon, M = in.channels, L = c.seq_len, period = season_of(season, &in);
    gpt2rt_forecaster_metric mt;
    memset(&mt, 0, sizeof mt);
    mt.sse = (double *)malloc(sizeof(double) * (size_t)M), mt.sae = (double *)malloc(sizeof(double) * (size_t)M);
    if (in.windows[GPT2RT_SERIES_TEST] > 0 && gpt2rt_forecaster_metrics(ctx, s, GPT2RT_SERIES_TEST, pred, period, lm, &mt) != GPT2RT_OK)
        fprintf(stderr, "timeseries: %s\n", gpt2rt_last_error(ctx));
    else if (in.windows[GPT2RT_SERIES_TEST] > 0) {
        double per = (double)(mt.windows * H), all[4] = {0, 0, 0, 0};
        printf("test metrics, %lld windows x %lld steps (scaled: the papers' units; data: the file's):\n",
               (long long)mt.windows, (long long)H);
        printf("  %-16s %12s %12s %14s %14s\n", "channel", "mse scaled", "mae scaled", "mse data", "mae data");
        for (int64_t m = 0; m < M; m++) {
            double mu = 0, sd = 1;
            gpt2rt_series_scaler(s, (int)m, &mu, &sd);
            const char *name = gpt2rt_series_column(s, (int)m) ? gpt2rt_series_column(s, (int)m) : "?";
            double v[4] = {mt.sse[m] / per, mt.sae[m] / per, mt.sse[m] * sd * sd / per, mt.sae[m] * sd / per};
            if (M <= 32) printf("  %-16.16s %12.6f %12.6f %14.6g %14.6g\n", name, v[0], v[1], v[2], v[3]);
            for (int k = 0; k < 4; k++) all[k] += v[k] / (double)M;
        }
        printf("  %-16s %12.8f %12.8f %14.6g %14.6g\n", "all", all[0], all[1], all[2], all[3]);
        printf("baselines on the same windows, mse / mae scaled: last value %.4f / %.4f", mt.base_mse[0], mt.base_mae[0]);
        if (period < 1 || period > L)
            printf("; seasonal naive: none (%s)", period > L ? "the period is longer than the lookback"
                                                             : "no --season N, and the dates have no calendar cycle");
        else printf("; seasonal naive (%lld steps) %.4f / %.4f", (long long)period, mt.base_mse[1], mt.base_mae[1]);
        if (!lm) printf("; linear map: none (no validation window to choose its ridge on)\n");
        else printf("; linear map %.4f / %.4f\n", mt.base_mse[2], mt.base_mae[2]);
    }
    free(mt.sse); free(mt.sae);
}

/* per channel in the data's units (gpt2rt_forecaster_evaluate, _backtest): the model's
   MSE / MAE beside each baseline's, one line a channel ("none": not computed) */
static void print_evals(gpt2rt_forecaster *fc, const char *what, int64_t windows,
                        const gpt2rt_forecaster_channel_eval *ch) {
    gpt2rt_forecaster_info fi;
    memset(&fi, 0, sizeof fi);
    gpt2rt_forecaster_info_get(fc, &fi);
    printf("%s, %lld windows, per channel in the data's units, mse / mae:\n", what, (long long)windows);
    printf("  %-16s", "channel");
    for (int k = 0; k < GPT2RT_FORECASTER_METHODS; k++) printf(" %25s", gpt2rt_forecaster_method_name((gpt2rt_forecaster_method)k));
    printf("\n");
    for (int m = 0; m < fi.channels && m < 32; m++) {
        const char *name = gpt2rt_forecaster_column(fc, m);
        printf("  %-16.16s", name ? name : "?");
        for (int k = 0; k < GPT2RT_FORECASTER_METHODS; k++) {
            char b[64];
            if (isnan(ch[m].mse[k])) snprintf(b, sizeof b, "none");
            else snprintf(b, sizeof b, "%.6g / %.6g", ch[m].mse[k], ch[m].mae[k]);
            printf(" %25s", b);
        }
        printf("\n");
    }
    if (fi.channels > 32) printf("  (%d channels: the first 32 shown)\n", fi.channels);
}

/* a line for each channel where the model does not beat the best baseline: its MSE
   is below the model's ("better") or within float rounding of it either way ("as
   good": the model kept may be that baseline, as the linear map can be; forecasts are
   floats, 6e-8 relative, and the same forecast reached by two sums differs by a few of
   those: 1e-6 relative leaves a margin) */
static void print_losses(gpt2rt_forecaster *fc, const gpt2rt_forecaster_channel_eval *ch) {
    gpt2rt_forecaster_info fi;
    memset(&fi, 0, sizeof fi);
    gpt2rt_forecaster_info_get(fc, &fi);
    int lost = 0;
    for (int m = 0; m < fi.channels; m++) {
        double b = ch[m].mse[ch[m].best], a = ch[m].mse[GPT2RT_FORECASTER_MODEL];
        if (ch[m].model_better && b - a > 1e-6 * b) continue;
        if (++lost > 32) continue;
        const char *name = gpt2rt_forecaster_column(fc, m);
        int digits = 3; /* more where 3 would print two different numbers the same */
        char sb[40], sa[40];
        do {
            snprintf(sb, sizeof sb, "%.*g", digits, b);
            snprintf(sa, sizeof sa, "%.*g", digits, a);
        } while (a - b > 1e-6 * a && !strcmp(sa, sb) && ++digits <= 17);
        printf("%s: %s is %s: %s against %s\n", name ? name : "?", gpt2rt_forecaster_method_name(ch[m].best),
               a - b > 1e-6 * a ? "better" : "as good", sb, sa);
    }
    if (lost > 32) printf("... a baseline is better or as good on %d of the %d channels in all\n", lost, fi.channels);
}

/* ---- timeseries predict: forecasts from a saved forecaster ----
   The file is read with the forecaster's columns (by name, in its order) and date
   column; the forecast starts from its last lookback rows (--all: from every window
   of lookback rows), in the data's units, one row per future step, dated by
   continuing the file's dates at their step. --score also scores the test split of
   the file, cut as training cut it, through the forecaster: the same metrics table. */
typedef struct popts {
    const char *model, *data, *out;
    int all, score, threads, fill, season, backtest, calibrate;
    double interval;  /* --interval: the level, 0: none */
    int fill_set; /* --fill given: it overrides the forecaster's */
    const char *backend;
} popts;

static void predict_usage(void) {
    printf("usage: timeseries predict --model DIR --data FILE.csv [--out forecasts.csv] [--all] [--score]\n"
           "                          [--backtest K] [--interval A [--calibrate]]\n"
           "  --model DIR      a forecaster written by timeseries --save (forecaster.json + model.safetensors)\n"
           "  --data FILE.csv  the series: the forecaster's columns by name (other columns must be numbers too), its date column\n"
           "  --out FILE       the forecasts as CSV (default: stdout): date, then one column per channel, in the\n"
           "                   data's units; the dates continue the file's at its step (else a step number);\n"
           "                   written whole or not at all, never onto --data or into --model\n"
           "  --all            forecast from every window of lookback rows, not only the last: the columns are\n"
           "                   origin (the window's last date), date, then the channels\n"
           "  --score          also score the file's test split (cut as in training) through the forecaster,\n"
           "                   and each channel in the data's units beside the baselines\n"
           "  --backtest K     also forecast the file's last K windows, whatever its splits (the last one's\n"
           "                   horizon ends at the file's last row, each earlier one a row before), and print\n"
           "                   each channel's MSE / MAE in the data's units beside the baselines'\n"
           "  --interval A     split-conformal intervals at level A in (0, 1) (0.9: 90%%): NAME_lo,NAME_hi columns\n"
           "                   beside each forecast column, the forecast -+ the k-th smallest absolute validation\n"
           "                   error, k = ceil((n + 1) A) of the n validation windows the forecaster was saved with\n"
           "  --calibrate      with --interval: compute those errors from --data's validation split (cut as\n"
           "                   training cut it), for a forecaster saved without them (or to replace them)\n"
           "  --fill MODE      missing values: refuse, previous, linear (default: the training run's --fill)\n"
           "  --season N       the seasonal-naive baseline's period for --score (default: the training run's)\n"
           "  --threads N      CPU threads (0: OMP_NUM_THREADS)   --backend cpu|cuda|auto\n");
}

static int predict_parse(popts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { predict_usage(); exit(0); }
        if (!strcmp(a, "--all")) { o->all = 1; continue; }
        if (!strcmp(a, "--score")) { o->score = 1; continue; }
        if (!strcmp(a, "--calibrate")) { o->calibrate = 1; continue; }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) { fprintf(stderr, "timeseries predict: %s needs a value (see timeseries predict --help)\n", a); return 0; }
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")) {
                fprintf(stderr, "timeseries predict: --backend '%s': expected cpu, cuda or auto\n", v);
                return 0;
            }
            o->backend = v;
        } else if (!strcmp(a, "--threads")) { if (!arg_int(a, v, 0, 1024, &o->threads)) return 0; }
        else if (!strcmp(a, "--season")) { if (!arg_int(a, v, 1, 1 << 20, &o->season)) return 0; }
        else if (!strcmp(a, "--backtest")) { if (!arg_int(a, v, 1, 1 << 30, &o->backtest)) return 0; }
        else if (!strcmp(a, "--interval")) { if (!arg_real(a, v, 0, 1, 1, 1, &o->interval)) return 0; }
        else if (!strcmp(a, "--fill")) {
            o->fill = !strcmp(v, "refuse") ? GPT2RT_SERIES_FILL_REFUSE : !strcmp(v, "previous") ? GPT2RT_SERIES_FILL_PREVIOUS
                    : !strcmp(v, "linear") ? GPT2RT_SERIES_FILL_LINEAR : -1;
            if (o->fill < 0) { fprintf(stderr, "timeseries predict: --fill '%s': expected previous, linear or refuse\n", v); return 0; }
            o->fill_set = 1;
        } else { fprintf(stderr, "timeseries predict: unknown option %s (see timeseries predict --help)\n", a); return 0; }
    }
    if (!o->model || !o->data) {
        fprintf(stderr, "timeseries predict: --model DIR and --data FILE.csv are required\n");
        return 0;
    }
    if (o->calibrate && !o->interval) {
        fprintf(stderr, "timeseries predict: --calibrate computes the intervals --interval LEVEL writes: give --interval "
                "too\n");
        return 0;
    }
    if (o->out && !out_path_ok("--out", o->out, 0)) return 0;
    return !paths_clash("timeseries predict", "--out", o->out, "--data", o->data) &&
           !paths_clash("timeseries predict", "--out", o->out, "--model", o->model);
}

/* channel m's name ("?" where there is none: m out of range) */
static const char *fc_column(gpt2rt_forecaster *fc, int m) {
    const char *n = gpt2rt_forecaster_column(fc, m);
    return n ? n : "?";
}

/* --data read as training cut, scaled and filled its file (--fill overrides); NULL
   after the message, naming flag */
static gpt2rt_series *load_as_trained(gpt2rt_forecaster *fc, const popts *o, const char *flag) {
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    gpt2rt_forecaster_series_desc(fc, &sd);
    if (o->fill_set) sd.fill = (gpt2rt_series_fill)o->fill;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, o->data, &sd) == GPT2RT_OK) return s;
    fprintf(stderr, "%s: %s\n", flag, gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    return NULL;
}

/* --score: the test split as training cut and scaled it, through the forecaster */
static int predict_score(gpt2rt_forecaster *fc, const popts *o, const gpt2rt_forecaster_info *fi) {
    int64_t H = fi->horizon, M = fi->channels;
    gpt2rt_series *s = load_as_trained(fc, o, "--score");
    if (!s) return 0;
    for (int m = 0; m < M; m++) {
        double a = 0, b = 0, c = 0, d = 0;
        gpt2rt_series_scaler(s, m, &a, &b);
        gpt2rt_forecaster_scaler(fc, m, &c, &d);
        if (a != c || b != d) {
            printf("note: this file's training rows scale \"%s\" by mean %g std %g; the forecaster's scaler (its training "
                   "file's) is mean %g std %g: the scores below use this file's scaling\n",
                   fc_column(fc, m), a, b, c, d);
            break;
        }
    }
    float *p = (float *)malloc(sizeof(float) * (size_t)(info_of(s).windows[GPT2RT_SERIES_TEST] * H * M + 1));
    int good = p && gpt2rt_forecaster_predict_split(fc, s, GPT2RT_SERIES_TEST, p) == GPT2RT_OK;
    if (!good) fprintf(stderr, "--score: %s\n", p ? gpt2rt_forecaster_last_error(fc) : "out of memory");
    if (good) { /* the linear map baseline fit as training fits it: the same map */
        gpt2rt_forecaster_linear base;
        gpt2rt_ctx *ctx = gpt2rt_forecaster_ctx(fc);
        int fitted = info_of(s).windows[GPT2RT_SERIES_VAL] > 0 && fit_linear(ctx, s, &base, "");
        report_test(ctx, s, p, o->season ? o->season : fi->season, fitted ? &base : NULL);
        gpt2rt_forecaster_channel_eval *ch = (gpt2rt_forecaster_channel_eval *)calloc((size_t)M, sizeof *ch);
        int64_t n = 0;
        good = ch && gpt2rt_forecaster_evaluate(fc, s, GPT2RT_SERIES_TEST, o->season, fitted ? &base : NULL, &n, ch) ==
               GPT2RT_OK;
        if (!good) fprintf(stderr, "--score: %s\n", ch ? gpt2rt_forecaster_last_error(fc) : "out of memory");
        else {
            print_evals(fc, "test", n, ch);
            print_losses(fc, ch);
        }
        free(ch);
        if (fitted) gpt2rt_forecaster_linear_free(&base);
    }
    free(p);
    gpt2rt_series_free(s);
    return good;
}

/* gpt2rt_forecaster_csv's text (a header, then rows lines of lead date fields and M
   values) with each value followed by its interval's ends: NAME,NAME_lo,NAME_hi in the
   header, the values of f, lo, hi (rows x M each) as %.9g; *out malloc'd. 0: out of memory */
static int csv_intervals(const char *text, size_t len, int lead, int64_t rows, int64_t M, const float *f,
                         const float *lo, const float *hi, char **out, size_t *out_len) {
    size_t cap = 2 * len + 64, n = 0;
    char *o = (char *)malloc(cap);
    int64_t row = -1;
    for (const char *ln = text; o && ln < text + len && row < rows; row++) {
        const char *end = memchr(ln, '\n', (size_t)(text + len - ln)), *c = ln;
        if (!end) end = text + len;
        for (int k = 0; k < lead && c < end; k++) {
            const char *e = memchr(c, ',', (size_t)(end - c));
            c = e ? e + 1 : end;
        }
        /* the header writes each name 3 times with 7 more bytes; a row 3 values of at most
           16 bytes (-3.40282347e+38,) for each of its values */
        size_t need = (size_t)(c - ln) + 3 * (size_t)(end - c) + (size_t)M * 3 * 48 + 2;
        if (n + need > cap) {
            cap = 2 * cap + need;
            char *g = (char *)realloc(o, cap);
            if (!g) { free(o); o = NULL; break; }
            o = g;
        }
        memcpy(o + n, ln, (size_t)(c - ln)); /* the dates, each with its comma */
        n += (size_t)(c - ln);
        for (int64_t m = 0; m < M; m++) {
            if (row < 0) { /* the header: the channel's name, then its interval's */
                const char *e = memchr(c, ',', (size_t)(end - c));
                if (!e) e = end;
                n += (size_t)snprintf(o + n, cap - n, "%s%.*s,%.*s_lo,%.*s_hi", m ? "," : "", (int)(e - c), c,
                                      (int)(e - c), c, (int)(e - c), c);
                c = e < end ? e + 1 : end;
            } else
                n += (size_t)snprintf(o + n, cap - n, "%s%.9g,%.9g,%.9g", m ? "," : "", (double)f[row * M + m],
                                      (double)lo[row * M + m], (double)hi[row * M + m]);
        }
        o[n++] = '\n';
        ln = end + 1;
    }
    *out = o;
    *out_len = n;
    return o != NULL;
}

/* --interval: lo and hi around the forecasts p (nw windows) and the CSV with them;
   the line saying what they are (to where, stdout or stderr); 0 after the message */
static int predict_intervals(gpt2rt_forecaster *fc, const popts *o, const float *p, int64_t nw, char **csv,
                             size_t *csv_len) {
    gpt2rt_forecaster_info fi;
    memset(&fi, 0, sizeof fi);
    gpt2rt_forecaster_info_get(fc, &fi);
    int64_t n = nw * fi.horizon * fi.channels;
    float *lo = (float *)malloc(sizeof(float) * (size_t)(n + 1)), *hi = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    double *half = (double *)malloc(sizeof(double) * (size_t)(fi.horizon * fi.channels)), guaranteed = 0;
    gpt2rt_forecaster_intervals iv;
    memset(&iv, 0, sizeof iv);
    char *with = NULL;
    size_t with_len = 0;
    int good = lo && hi && half;
    if (!good) fprintf(stderr, "timeseries predict: --interval: out of memory\n");
    else if (gpt2rt_forecaster_interval(fc, o->interval, p, nw, lo, hi) != GPT2RT_OK ||
             gpt2rt_forecaster_interval_width(fc, o->interval, half, &guaranteed) != GPT2RT_OK ||
             gpt2rt_forecaster_intervals_get(fc, &iv) != GPT2RT_OK) {
        char why[600];
        snprintf(why, sizeof why, "%s", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_intervals none;
        int has = gpt2rt_forecaster_intervals_get(fc, &none) == GPT2RT_OK;
        fprintf(stderr, "timeseries predict: --interval %g: %s%s\n", o->interval, why,
                has ? "" : " (timeseries predict --calibrate does so from --data's)");
        good = 0;
    } else if (!csv_intervals(*csv, *csv_len, o->all ? 2 : 1, nw * fi.horizon, fi.channels, p, lo, hi, &with,
                              &with_len)) {
        fprintf(stderr, "timeseries predict: --interval: out of memory\n");
        good = 0;
    }
    if (good) {
        free(*csv);
        *csv = with;
        *csv_len = with_len;
        long long k = llround(guaranteed * (double)(iv.windows + 1));
        const char *th = k % 100 >= 11 && k % 100 <= 13 ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd"
                       : k % 10 == 3 ? "rd" : "th";
        fprintf(o->out ? stdout : stderr, "%g%% intervals: split-conformal from %lld validation windows: the half-width "
                "at each step and channel is the %lld%s smallest of its %lld absolute validation errors; guaranteed "
                "coverage %.4f (%lld / %lld, when errors are exchangeable)\n", o->interval * 100, (long long)iv.windows,
                k, th, (long long)iv.windows, guaranteed, k, (long long)(iv.windows + 1));
    }
    free(lo); free(hi); free(half);
    return good;
}

static int predict_main(int argc, char **argv) {
    popts o;
    if (!predict_parse(&o, argc, argv)) return 2;
    gpt2rt_config base;
    memset(&base, 0, sizeof base);
    base.n_threads = o.threads;
    if (o.backend) base.backend = !strcmp(o.backend, "cpu") ? GPT2RT_BACKEND_CPU : !strcmp(o.backend, "cuda")
                                  ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_AUTO;
    gpt2rt_forecaster *fc;
    if (gpt2rt_forecaster_load(&fc, o.model, &base) != GPT2RT_OK) {
        fprintf(stderr, "%s\n", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
        return 1;
    }
    gpt2rt_forecaster_info fi;
    memset(&fi, 0, sizeof fi);
    gpt2rt_forecaster_info_get(fc, &fi);
    int64_t L = fi.lookback, H = fi.horizon, M = fi.channels;
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    gpt2rt_forecaster_series_desc(fc, &sd); /* training's columns, date column and fill */
    sd.borders = GPT2RT_SERIES_BORDERS_NONE; sd.no_scale = 1; /* every row, in the data's units */
    static const char *fills[] = {"refuse", "previous", "linear"};
    if (o.fill_set && o.fill != (int)fi.fill)
        fprintf(stderr, "timeseries predict: --fill %s overrides the forecaster's fill (%s, as trained)\n", fills[o.fill],
                fills[fi.fill]);
    if (o.fill_set) sd.fill = (gpt2rt_series_fill)o.fill;
    if (o.season && fi.season && o.season != fi.season)
        fprintf(stderr, "timeseries predict: --season %d overrides the forecaster's season (%d, as trained)\n", o.season,
                fi.season);
    gpt2rt_series *s;
    int rc = 0;
    if (gpt2rt_series_load(&s, o.data, &sd) != GPT2RT_OK) {
        fprintf(stderr, "%s\n", gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
        gpt2rt_forecaster_free(fc);
        return 1;
    }
    gpt2rt_series_info in = info_of(s);
    int64_t nw = o.all ? in.rows - L + 1 : 1, first = in.rows - L - (nw - 1);
    const float *v = gpt2rt_series_values(s); /* raw: no_scale */
    float *x = (float *)malloc(sizeof(float) * (size_t)(nw * L * M)), *p = (float *)malloc(sizeof(float) * (size_t)(nw * H * M));
    if (!x || !p) { fprintf(stderr, "timeseries predict: out of memory for %lld windows\n", (long long)nw); rc = 1; }
    for (int64_t w = 0; !rc && w < nw; w++) memcpy(x + w * L * M, v + (first + w) * M, sizeof(float) * (size_t)(L * M));
    if (!rc && gpt2rt_forecaster_predict(fc, x, nw, p) != GPT2RT_OK) {
        fprintf(stderr, "%s\n", gpt2rt_forecaster_last_error(fc));
        rc = 1;
    }
    signal(SIGXFSZ, SIG_IGN); /* past a file-size limit a write fails (EFBIG) instead of killing us */
    int dated = in.date_step > 0 && gpt2rt_series_date_column(s);
    char *csv = NULL;
    size_t csv_len = 0;
    if (!rc && gpt2rt_forecaster_csv(fc, s, first, nw, p, o.all, &csv, &csv_len) != GPT2RT_OK) {
        fprintf(stderr, "timeseries predict: %s\n", gpt2rt_forecaster_last_error(fc));
        rc = 1;
    }
    if (!rc && o.calibrate) { /* the forecaster's scores from --data's validation split */
        gpt2rt_forecaster_intervals had;
        int replaced = gpt2rt_forecaster_intervals_get(fc, &had) == GPT2RT_OK;
        gpt2rt_series *vs = load_as_trained(fc, &o, "--calibrate");
        if (!vs || gpt2rt_forecaster_calibrate(fc, vs) != GPT2RT_OK) {
            if (vs) fprintf(stderr, "timeseries predict: --calibrate: %s\n", gpt2rt_forecaster_last_error(fc));
            rc = 1;
        } else
            fprintf(o.out ? stdout : stderr, "--calibrate: the intervals' errors from the %lld validation windows of %s "
                    "(cut as training cut it)%s\n", (long long)info_of(vs).windows[GPT2RT_SERIES_VAL], o.data,
                    replaced ? ", in place of the ones the forecaster was saved with" : "");
        gpt2rt_series_free(vs);
    }
    if (!rc && o.interval > 0 && !predict_intervals(fc, &o, p, nw, &csv, &csv_len)) rc = 1;
    gpt2rt_forecaster_channel_eval *bt = NULL; /* --backtest: scored before anything is written */
    if (!rc && o.backtest) {
        bt = (gpt2rt_forecaster_channel_eval *)calloc((size_t)M, sizeof *bt);
        if (!bt || gpt2rt_forecaster_backtest(fc, s, o.backtest, o.season, NULL, bt, NULL) != GPT2RT_OK) {
            fprintf(stderr, "timeseries predict: --backtest %d: %s\n", o.backtest,
                    bt ? gpt2rt_forecaster_last_error(fc) : "out of memory");
            rc = 1;
        }
    }
    if (!rc && !o.out) fwrite(csv, 1, csv_len, stdout);
    if (!rc && o.out && gpt2rt_forecaster_csv_write(fc, o.out, csv, csv_len, o.data) != GPT2RT_OK) {
        fprintf(stderr, "timeseries predict: --out %s\n", gpt2rt_forecaster_last_error(fc));
        rc = 1;
    }
    if (!rc) /* stdout carries the CSV when there is no --out */
        fprintf(o.out ? stdout : stderr, "forecast %lld window%s x %lld steps x %lld channels from %s (%lld rows%s%s)%s%s%s\n",
                (long long)nw, nw > 1 ? "s" : "", (long long)H, (long long)M, o.data, (long long)in.rows,
                dated ? "; dates continue at " : ", no dated step: rows numbered", dated ? "the file's step" : "",
                o.out ? " to " : "", o.out ? o.out : "", in.filled ? " (missing values filled)" : "");
    if (!rc && bt) {
        char what[96];
        snprintf(what, sizeof what, "backtest from the last %d origins", o.backtest);
        print_evals(fc, what, o.backtest, bt);
        print_losses(fc, bt);
    }
    free(bt);
    if (!rc && o.score && !predict_score(fc, &o, &fi)) rc = 1;
    free(x); free(p); free(csv);
    gpt2rt_series_free(s);
    gpt2rt_forecaster_free(fc);
    return rc;
}

/* one training run's state, filled phase by phase (main below) */
typedef struct run {
    opts o;
    double t_start;
    gpt2rt_series *data;
    gpt2rt_series_info info;
    gpt2rt_ctx *ctx;
    int64_t L, H, M, B, steps_per_epoch, png_channel;
    gpt2rt_forecaster_linear lm;     /* the linear map training fits, if any */
    gpt2rt_forecaster_score_desc lu; /* how a split is scored: with the linear map, if any */
    gpt2rt_forecaster_train_result tr;
    gpt2rt_forecaster_scores sc;
    float *keep; /* every test window's forecast */
    gpt2rt_forecaster *fc; /* the forecaster as saved (--save, or a temporary save), loaded back */
    int64_t iv_windows;    /* the validation windows of the intervals --save kept, 0: none */
} run;

/* a file too short for the preset's lookback, with no --lookback, --patch or --stride:
   the lookback about half the training split's rows (as many training windows as steps
   in a lookback), a whole number of patches of lookback / 8 steps (at most the preset's
   patch), the stride in the preset's ratio to the patch; one line says so. 1 when
   chosen (sd->lookback and o's patching set), 0: the file is too short for that too */
static int short_series(opts *o, gpt2rt_series_desc *sd) {
    gpt2rt_series_desc pd = *sd;
    pd.lookback = 1; /* the borders do not depend on it: the training split's rows */
    gpt2rt_series *probe;
    int ok = gpt2rt_series_load(&probe, o->data, &pd) == GPT2RT_OK;
    gpt2rt_series_info in = info_of(probe); /* zero when the load failed */
    gpt2rt_series_free(probe);
    int64_t T = in.end[GPT2RT_SERIES_TRAIN] - in.begin[GPT2RT_SERIES_TRAIN], L = (T - o->c.horizon + 1) / 2;
    int64_t patch = L / 8 < o->c.patch_len ? L / 8 : o->c.patch_len;
    if (!ok || patch < 1 || L >= o->c.seq_len) return 0;
    L -= L % patch;
    int64_t stride = patch * o->c.patch_stride / o->c.patch_len > 0 ? patch * o->c.patch_stride / o->c.patch_len : 1;
    printf("short series: the training split holds %lld rows, too few for the preset's lookback %d + horizon %d: "
           "lookback %lld (about half of them), patch %lld stride %lld (%lld patches); --lookback, --patch and "
           "--stride set them\n", (long long)T, o->c.seq_len, o->c.horizon, (long long)L, (long long)patch,
           (long long)stride, (long long)(L / patch));
    o->c.seq_len = sd->lookback = (int)L;
    o->c.patch_len = (int)patch;
    o->c.patch_stride = (int)stride;
    return 1;
}

/* --data read: the data and columns lines; --channel resolved. 0 ok, else the exit status */
static int run_load(run *r) {
    const opts *o = &r->o;
    struct stat fst; /* a directory is named, and a FIFO never opened (its open would block) */
    if (stat(o->data, &fst) != 0) { fprintf(stderr, "timeseries: --data %s: %s\n", o->data, strerror(errno)); return 1; }
    if (!S_ISREG(fst.st_mode)) {
        fprintf(stderr, "timeseries: --data %s: is %s, not a regular file\n", o->data, S_ISDIR(fst.st_mode) ? "a directory"
                : S_ISFIFO(fst.st_mode) ? "a FIFO (named pipe)" : "a device or socket");
        return 1;
    }
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = o->c.seq_len;
    sd.horizon = o->c.horizon;
    series_desc_flags(o, &sd);
    /* the info is what a successful load filled in; checking the call also tells the
       compiler so (gcc 12 -O3 -march=x86-64-v4 otherwise warns it may be unset) */
    int loaded = gpt2rt_series_load(&r->data, o->data, &sd) == GPT2RT_OK;
    if (!loaded && !o->shape_set && short_series(&r->o, &sd)) { /* the preset's lookback did not fit */
        gpt2rt_series_free(r->data);
        loaded = gpt2rt_series_load(&r->data, o->data, &sd) == GPT2RT_OK;
    }
    if (!loaded || gpt2rt_series_info_get(r->data, &r->info) != GPT2RT_OK) {
        fprintf(stderr, "%s\n", gpt2rt_series_last_error(r->data));
        return 1;
    }
    const gpt2rt_series_info *in = &r->info;
    r->L = o->c.seq_len, r->H = o->c.horizon, r->M = in->channels, r->B = o->td.batch;
    static const char *bname[] = {"auto", "ETTh", "ETTm", "70/10/20"};
    printf("data %s: %lld rows, %lld channels, %s borders; windows train %lld, validation %lld, test %lld\n", o->data,
           (long long)in->rows, (long long)r->M, bname[in->borders], (long long)in->windows[0],
           (long long)in->windows[1], (long long)in->windows[2]);
    print_columns(r->data);
    r->png_channel = r->M - 1;
    if (o->channel) {
        r->png_channel = -1;
        for (int64_t m = 0; m < r->M; m++)
            if (gpt2rt_series_column(r->data, (int)m) && !strcmp(gpt2rt_series_column(r->data, (int)m), o->channel))
                r->png_channel = m;
        if (r->png_channel < 0) {
            fprintf(stderr, "timeseries: --channel %s: no such channel (see the columns line above)\n", o->channel);
            return 2;
        }
    }
    return 0;
}

/* the context from the flags and the data: the model and training lines. 0 ok, else the exit status */
static int run_model(run *r) {
    const opts *o = &r->o;
    int64_t B = r->B;
    r->steps_per_epoch = r->info.windows[GPT2RT_SERIES_TRAIN] / B;
    if (r->steps_per_epoch < 1) {
        fprintf(stderr, "--batch %lld exceeds the %lld training windows\n", (long long)B,
                (long long)r->info.windows[GPT2RT_SERIES_TRAIN]);
        return 1;
    }
    if (o->steps_per_epoch && o->steps_per_epoch < r->steps_per_epoch) r->steps_per_epoch = o->steps_per_epoch;
    gpt2rt_config c;
    if (!train_config(o, r->steps_per_epoch, &c)) return 1;
    if (!strcmp(o->parallel, "split") && c.n_layer < o->c.n_devices) {
        fprintf(stderr, "timeseries: --parallel split over --devices %d needs at least %d layers (each device holds "
                "whole layers), the model has %d: set --layers %d or more", o->c.n_devices, o->c.n_devices, c.n_layer, o->c.n_devices);
        if (c.n_layer >= 2) fprintf(stderr, ", or --devices %d", c.n_layer);
        fprintf(stderr, "\n");
        return 2;
    }
    if (!strcmp(o->parallel, "split") && (o->c.dropout > 0 || o->c.attn_dropout > 0 || o->c.head_dropout > 0)) {
        fprintf(stderr, "timeseries: --parallel split runs without dropout for now (--dropout %g --attn-dropout %g "
                "--head-dropout %g, the preset's or given): add --dropout 0 --attn-dropout 0 --head-dropout 0, or use "
                "--parallel dp\n", (double)o->c.dropout, (double)o->c.attn_dropout, (double)o->c.head_dropout);
        return 2;
    }
    c.n_channels = (int)r->M; /* the head and mask are the stage's (the preset's) */
    if (gpt2rt_create(&r->ctx, &c) != GPT2RT_OK || (o->init && gpt2rt_weights_load(r->ctx, o->init) != GPT2RT_OK)) {
        fprintf(stderr, "%s\n", gpt2rt_last_error(r->ctx));
        return 1;
    }
    gpt2rt_config g = gpt2rt_config_get(r->ctx);
    gpt2rt_memory_plan plan;
    gpt2rt_plan(&g, &plan);
    printf("model: preset %s, %d layers, %d heads, width %d, lookback %d, patch %d stride %d, horizon %d, %.3fM "
           "parameters (%.3fM trained)%s, %.2f GiB planned (%s)\n", o->preset, g.n_layer, g.n_head, g.n_embd, g.seq_len,
           g.patch_len, g.patch_stride, g.horizon, (double)plan.n_params / 1e6, (double)plan.n_trainable / 1e6,
           o->init ? ", blocks from --init" : ", random init", (double)plan.total[0] / 1073741824.0,
           precision_name(g.precision));
    printf("training: batch %lld, lr %g cosine to %g over %d steps (%lld a epoch), at most %d epochs, patience %d, "
           "seed %llu, weight decay %g, dropout %g / attention %g / head %g\n", (long long)B, (double)g.lr,
           (double)(g.lr * g.min_lr_frac), g.total_steps, (long long)r->steps_per_epoch, o->td.epochs, o->td.patience,
           (unsigned long long)o->seed, (double)g.weight_decay, (double)g.dropout, (double)g.attn_dropout,
           (double)g.head_dropout);
    print_devices(r->ctx, &plan, o, B, "windows");
    return 0;
}

/* the linear map (if asked), then the model's training; the best epoch's and blend's
   lines. 0 ok, -1 stopped at --max-steps (estimate printed), else the exit status */
static int run_train(run *r) {
    const opts *o = &r->o;
    int64_t B = r->B;
    r->lu.batch = (int)B;
    if (o->td.linear_residual || o->td.blend_linear) {
        double t0 = now();
        if (!fit_linear(r->ctx, r->data, &r->lm, "; use --linear-residual 0 --blend-linear 0")) return 1;
        printf("linear map: ridge %g (chosen on validation), val mse %.4f, %.1f s%s\n", r->lm.ridge, r->lm.val_mse,
               now() - t0, o->td.linear_residual ? "; the model trains on what it leaves" : "");
        r->lu.linear = &r->lm;
        r->lu.linear_residual = o->td.linear_residual;
    }
    gpt2rt_forecaster_train_desc td = o->td;
    td.steps_per_epoch = r->steps_per_epoch; td.seed = o->seed; td.linear = r->lu.linear;
    td.start_from_linear = o->td.linear_residual && o->stage == 0 && !o->td.max_steps;
    train_view tv = {o, 0, {0, 0, 0, 0}};
    td.progress = on_progress; td.user = &tv;
    gpt2rt_forecaster_train_result *tr = &r->tr;
    if (gpt2rt_forecaster_train(r->ctx, r->data, &td, tr) != GPT2RT_OK) {
        progress_end(&tv.pg);
        fprintf(stderr, "timeseries: %s\n", gpt2rt_last_error(r->ctx));
        return 1;
    }
    if (tr->max_steps_reached) { /* scoring is forward only: about a third of a training step a batch */
        double per = tr->step_seconds / (double)tr->steps, n_steps = (double)r->steps_per_epoch * o->td.epochs;
        double evals = (double)((r->info.windows[1] + B - 1) / B * o->td.epochs + (r->info.windows[2] + B - 1) / B);
        printf("--max-steps %d: %.3g s a step; the whole run (at most %.0f steps and %.0f scoring batches, "
               "each about a third of a step) would take at most about %.0f s (%.1f h) here\n", o->td.max_steps, per, n_steps,
               evals, (n_steps + evals / 3) * per, (n_steps + evals / 3) * per / 3600);
        return -1;
    }
    printf("best epoch %d (val mse %.4f), %.1f s in all\n", tr->best_epoch, tr->best_val_mse, now() - r->t_start);
    if (tr->best_epoch == 0)
        printf("the model added nothing on validation: the kept forecast is the linear map's (epoch 0, out_layer "
               "zero)\n");
    if (o->td.blend_linear) {
        r->lu.blend = tr->blend;
        printf("blend: weight %.3f on the linear map (chosen on validation), val mse %.4f (model %.4f, linear %.4f)\n",
               tr->blend, tr->blend_val_mse, tr->model_val_mse, tr->linear_val_mse);
        if (tr->blend == 1 && tr->best_epoch != 0)
            printf("the blend puts all its weight on the linear map: the kept forecast is the linear map's, the model "
                   "added nothing\n");
    }
    return 0;
}

/* every test window scored (kept in r->keep); --png drawn. 0 ok, 1 scoring failed; *png_failed set */
static int run_test(run *r, int *png_failed) {
    const opts *o = &r->o;
    int64_t H = r->H, M = r->M, n_test = r->info.windows[GPT2RT_SERIES_TEST];
    int64_t n_png = n_test < 4 ? n_test : 4, spacing = n_test / n_png;
    r->keep = (float *)malloc(sizeof(float) * (size_t)(n_test * H * M + 1));
    if (!r->keep) { fprintf(stderr, "timeseries: out of memory for the test forecasts\n"); return 1; }
    r->lu.keep = r->keep;
    r->lu.keep_windows = n_test;
    r->lu.drop_batch = o->drop_last;
    if (gpt2rt_forecaster_score(r->ctx, r->data, GPT2RT_SERIES_TEST, &r->lu, &r->sc) != GPT2RT_OK) {
        fprintf(stderr, "timeseries: scoring: %s\n", gpt2rt_last_error(r->ctx));
        return 1;
    }
    if (o->png) { /* windows spread over the test split */
        float *few = (float *)malloc(sizeof(float) * (size_t)(n_png * H * M));
        for (int64_t k = 0; few && k < n_png; k++)
            memcpy(few + k * H * M, r->keep + k * spacing * H * M, sizeof(float) * (size_t)(H * M));
        if (!few || !draw_png(o->png, o->data, r->data, r->L, H, M, r->png_channel, few, n_png, spacing)) *png_failed = 1;
        free(few);
    }
    return 0;
}

/* the forecaster into dir (--save: with its split-conformal intervals, fit on the
   validation split as the forecaster forecasts: the same batch, linear map and blend),
   then loaded back into r->fc. 0 ok, 1 failed */
static int run_save_to(run *r, const char *dir) {
    const opts *o = &r->o;
    gpt2rt_forecaster_intervals iv;
    memset(&iv, 0, sizeof iv);
    gpt2rt_forecaster_score_desc d = r->lu;
    d.keep = NULL; d.keep_windows = 0; d.drop_batch = 0;
    if (o->save && gpt2rt_forecaster_intervals_fit(r->ctx, r->data, &d, &iv) != GPT2RT_OK)
        printf("intervals: none saved: %s\n", gpt2rt_last_error(r->ctx));
    r->iv_windows = iv.windows;
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = r->data;
    fd.linear = r->lu.linear ? r->lm.weights : NULL;
    fd.linear_residual = r->lu.linear ? r->lu.linear_residual : 0;
    fd.blend = r->lu.linear ? r->lu.blend : 0;
    fd.batch = (int)r->B;
    fd.note = o->stage == 2 ? "examples/timeseries.c, aLLM4TS stage 2 (patch decoding)" : "examples/timeseries.c";
    fd.fill = (gpt2rt_series_fill)o->fill;
    fd.season = (int)season_of(o->season, &r->info);
    fd.intervals = iv.rank ? &iv : NULL;
    int saved = gpt2rt_forecaster_save(r->ctx, dir, &fd) == GPT2RT_OK;
    gpt2rt_forecaster_intervals_free(&iv);
    if (!saved) { fprintf(stderr, "save: %s\n", gpt2rt_last_error(r->ctx)); return 1; }
    if (o->save)
        printf("saved the forecaster (best epoch %d%s%s) to %s: model.safetensors, config.json, forecaster.json; "
               "timeseries predict --model %s --data FILE.csv forecasts with it\n", r->tr.best_epoch,
               r->lu.linear ? ", the linear map and blend" : "", r->iv_windows ? ", its intervals" : "", o->save, o->save);
    gpt2rt_config base;
    memset(&base, 0, sizeof base);
    base.n_threads = gpt2rt_config_get(r->ctx).n_threads;
    base.backend = gpt2rt_config_get(r->ctx).backend;
    if (gpt2rt_forecaster_load(&r->fc, dir, &base) != GPT2RT_OK) {
        fprintf(stderr, "timeseries: loading the saved forecaster back: %s\n", gpt2rt_forecaster_last_error(r->fc));
        gpt2rt_forecaster_free(r->fc);
        r->fc = NULL;
        return 1;
    }
    return 0;
}

/* the forecaster saved and loaded back into r->fc: to --save, else to a temporary
   directory removed after (the per-channel report scores it). 0 ok, 1 failed */
static int run_save(run *r) {
    if (r->o.save) return run_save_to(r, r->o.save);
    const char *t = getenv("TMPDIR");
    char tmp[4096], dir[4200];
    snprintf(tmp, sizeof tmp, "%s/timeseries-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp)) {
        printf("per-channel baselines: none (no temporary directory for the forecaster in %s: %s)\n",
               t && *t ? t : "/tmp", strerror(errno));
        return 0;
    }
    snprintf(dir, sizeof dir, "%s/fc", tmp);
    int rc = run_save_to(r, dir);
    static const char *files[] = {"forecaster.json", "model.safetensors", "config.json"};
    for (int k = 0; k < 3; k++) {
        char f[4300];
        snprintf(f, sizeof f, "%s/%s", dir, files[k]);
        remove(f);
    }
    rmdir(dir);
    rmdir(tmp);
    return rc;
}

/* the per-channel table and baselines, then the two test lines, last */
static void run_report(run *r) {
    gpt2rt_forecaster_linear base; /* the linear map for the baseline when training did not fit one */
    memset(&base, 0, sizeof base);
    const gpt2rt_forecaster_linear *use = r->lu.linear;
    if (!use && r->info.windows[GPT2RT_SERIES_VAL] > 0 && fit_linear(r->ctx, r->data, &base, "")) use = &base;
    report_test(r->ctx, r->data, r->keep, r->o.season, use);
    gpt2rt_forecaster_channel_eval *ch = r->fc && r->info.windows[GPT2RT_SERIES_TEST] > 0 ? (gpt2rt_forecaster_channel_eval *)calloc((size_t)r->M, sizeof *ch) : NULL;
    int64_t n = 0;
    if (ch && gpt2rt_forecaster_evaluate(r->fc, r->data, GPT2RT_SERIES_TEST, 0, use, &n, ch) != GPT2RT_OK) {
        fprintf(stderr, "timeseries: %s\n", gpt2rt_forecaster_last_error(r->fc));
        free(ch);
        ch = NULL;
    }
    if (ch) print_evals(r->fc, "test", n, ch);
    double cover = 0;
    if (r->fc && r->iv_windows) {
        if (gpt2rt_forecaster_coverage(r->fc, r->data, GPT2RT_SERIES_TEST, 0.9, NULL, &cover, &n) == GPT2RT_OK)
            printf("90%% intervals: split-conformal from %lld validation windows; test-split coverage %.3f\n",
                   (long long)r->iv_windows, cover);
        else printf("90%% intervals: none: %s\n", gpt2rt_forecaster_last_error(r->fc));
    }
    if (ch) print_losses(r->fc, ch);
    free(ch);
    gpt2rt_forecaster_linear_free(&base);
    const gpt2rt_forecaster_scores *sc = &r->sc;
    double n_full = (double)(sc->windows_full * r->H * r->M), n_all = (double)(sc->windows * r->H * r->M);
    if (n_full) printf("test (drop last) mse %.4f mae %.4f windows %lld\n", sc->sse_full / n_full, sc->sae_full / n_full,
                       (long long)sc->windows_full);
    else printf("test (drop last): no score: the %lld test windows are fewer than one batch of %lld, and drop-last "
                "scoring counts whole batches only\n", (long long)sc->windows,
                (long long)(r->o.drop_last ? r->o.drop_last : r->B));
    printf("test mse %.4f mae %.4f windows %lld\n", sc->sse / n_all, sc->sae / n_all, (long long)sc->windows);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "predict")) return predict_main(argc - 1, argv + 1);
    static run r; /* zeroed */
    if (!parse(&r.o, argc, argv)) return 2;
    if (r.o.stage == 1) return pretrain(&r.o);
    r.t_start = now();
    int rc = run_load(&r), png_failed = 0;
    if (!rc) rc = run_model(&r);
    if (!rc) rc = run_train(&r);
    if (!rc) rc = run_test(&r, &png_failed);
    if (!rc) rc = run_save(&r); /* before the scores, so the last lines stay the test's */
    if (!rc) run_report(&r);
    free(r.keep);
    gpt2rt_forecaster_free(r.fc);
    gpt2rt_forecaster_linear_free(&r.lm);
    gpt2rt_free(r.ctx);
    gpt2rt_series_free(r.data);
    return rc < 0 ? 0 : rc ? rc : png_failed;
}
