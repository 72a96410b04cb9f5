/* kernels/emu/drive.cpp - whole training paths through the public API with the CUDA
   backend, run on the emulator, against the CPU backend of the same header.
   Tiny shapes (a step takes well under a second under ASan): two layers, C = 64 with head
   size 16 (the generic attention), C = 128 with head size 64 and T = 33 (the tensor-core
   attention with a partial tile), odd C = 20 with head size 5.
   Each check prints "ok   " / "FAIL " and the numbers; the last line counts them.
   Tolerances (relative to the max-norm of the CPU tensor unless said otherwise):
     fp32  gradients 1e-4, loss 1e-5: both backends sum fp32 in different orders; a sum of
           n terms moves by about n * 2^-24 relative, n <= 256 here, through two layers,
           so ~1e-5, and the margin is 10x
     bf16  gradients 5e-2, loss 1e-2: activations and weights are rounded to 8 bits of
           mantissa (2^-9 relative each), some tens of roundings along a path
     fp16  gradients 1.5e-2, loss 3e-3: the same with 11 bits (2^-11), 4x tighter
   Weights after several AdamW steps are not compared against the CPU: an AdamW step is
   about lr whatever the gradient's size, so a gradient that is zero up to rounding moves a
   weight by +-lr on either backend; losses over the steps and the first gradients are. */
#define GPT2RT_IMPLEMENTATION
#include "../../gpt2rt.h"
#include <stdarg.h>
#include <vector>
#include <string>
#include <algorithm>
#include <math.h>

static int passed = 0, failed = 0, skipped = 0;
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s", ok ? "ok   " : "FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) passed++; else failed++;
}
static void skip(const char *what) { printf("skip %s\n", what); skipped++; }

static gpt2rt_config base(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 4; c.n_embd = 64; c.vocab_size = 96; c.max_seq_len = 64;
    c.batch_size = 2; c.seq_len = 16;
    c.lr = 1e-3f; c.warmup_steps = 1; c.total_steps = 8; c.weight_decay = 0.1f;
    c.n_threads = 1; c.seed = 7;
    return c;
}
static gpt2rt_ctx *make(gpt2rt_config c, gpt2rt_backend b) {
    c.backend = b;
    gpt2rt_ctx *x = NULL;
    gpt2rt_result r = gpt2rt_create(&x, &c);
    if (r != GPT2RT_OK) {
        printf("FAIL gpt2rt_create (%s): %s\n", b == GPT2RT_BACKEND_CUDA ? "cuda" : "cpu", x ? gpt2rt_last_error(x) : "?");
        failed++;
        gpt2rt_free(x);
        return NULL;
    }
    return x;
}
static std::vector<int32_t> tokens(int64_t n, int V, uint64_t seed) {
    std::vector<int32_t> t((size_t)n);
    for (auto &x : t) { seed = seed * 6364136223846793005ull + 1442695040888963407ull; x = (int32_t)((seed >> 33) % (uint64_t)V); }
    return t;
}
static std::vector<float> floats(int64_t n, uint64_t seed) {
    std::vector<float> t((size_t)n);
    for (auto &x : t) { seed = seed * 6364136223846793005ull + 1442695040888963407ull; x = (float)((seed >> 40) / 8388608.0 - 1.0); }
    return t;
}
/* a device copy of h (cudaMalloc'ed; the caller frees it) */
template <typename T> static T *upload(const std::vector<T> &h) {
    T *d = NULL;
    cudaMalloc(&d, h.size() * sizeof(T));
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
/* every parameter's `what` as one vector per tensor */
static std::vector<std::vector<float>> read_all(gpt2rt_ctx *x, gpt2rt_param_what what, std::vector<std::string> *names = NULL) {
    std::vector<std::vector<float>> out;
    for (int i = 0; i < gpt2rt_param_count(x); i++) {
        gpt2rt_param_info pi;
        gpt2rt_param_info_get(x, i, &pi);
        std::vector<float> v((size_t)pi.numel);
        if (gpt2rt_param_read(x, pi.name, what, v.data(), pi.numel) != GPT2RT_OK) v.assign(v.size(), NAN);
        out.push_back(v);
        if (names) names->push_back(pi.name);
    }
    return out;
}
/* worst over tensors of max|a-b| / max|b| (a tensor of zeros in b compares absolutely) */
static double worst_rel(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b, int *at) {
    double w = -1;
    *at = -1;
    for (size_t t = 0; t < a.size() && t < b.size(); t++) {
        double m = 0, e = 0;
        for (size_t i = 0; i < b[t].size(); i++) {
            m = fmax(m, fabs(b[t][i]));
            double d = fabs((double)a[t][i] - b[t][i]);
            if (!(d <= e)) e = d; /* NaN is worst */
        }
        double r = m > 0 ? e / m : e;
        if (!(r <= w)) { w = r; *at = (int)t; }
    }
    return w;
}
static int same_bits(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    if (a.size() != b.size()) return 0;
    for (size_t t = 0; t < a.size(); t++)
        if (a[t].size() != b[t].size() || memcmp(a[t].data(), b[t].data(), a[t].size() * 4)) return 0;
    return 1;
}

/* forward + backward once, then `steps` steps: loss per step and the first gradients vs the CPU */
static void parity(const char *what, gpt2rt_config c, double gtol, double ltol, int steps, gpt2rt_config *cpu_cfg = NULL) {
    gpt2rt_emu::set_problem(what);
    gpt2rt_config cc = cpu_cfg ? *cpu_cfg : c;
    if (!cpu_cfg) cc.precision = GPT2RT_PRECISION_FP32;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA), *h = make(cc, GPT2RT_BACKEND_CPU);
    if (!g || !h) { gpt2rt_free(g); gpt2rt_free(h); return; }
    int rows = c.batch_size * (c.grad_accum ? c.grad_accum : 1) * (c.parallel == GPT2RT_PARALLEL_DATA ? c.n_devices : 1);
    int64_t n = (int64_t)rows * c.seq_len;
    int patches = c.input == GPT2RT_INPUT_PATCHES;
    int M = c.n_channels ? c.n_channels : 1;
    double lw = 0;
    std::vector<std::vector<float>> gg, hg;
    std::vector<std::string> names;
    int accum = c.grad_accum ? c.grad_accum : 1;
    int64_t per = n / accum; /* rows x T of one micro-batch */
    for (int s = 0; s < steps; s++) {
        gpt2rt_step_stats a, b;
        gpt2rt_result ra = GPT2RT_OK, rb = GPT2RT_OK;
        double la = 0, lb = 0;
        /* micro-batches by forward + backward, so the gradients can be read before the update zeroes them */
        for (int k = 0; k < accum && ra == GPT2RT_OK && rb == GPT2RT_OK; k++) {
            float fa = 0, fb = 0;
            if (patches) {
                int64_t prow = (int64_t)rows / accum;
                std::vector<float> x = floats(prow * c.seq_len * M, 11 + 7 * s + k), y = floats(prow * c.horizon * M, 23 + 7 * s + k);
                const float *yp = c.head == GPT2RT_HEAD_NEXT_PATCH ? NULL : y.data(); /* its targets are in x */
                ra = gpt2rt_forward_series(g, x.data(), yp, &fa);
                rb = gpt2rt_forward_series(h, x.data(), yp, &fb);
            } else {
                std::vector<int32_t> in = tokens(per, c.vocab_size, 100 + 7 * s + k), tg = tokens(per, c.vocab_size, 200 + 7 * s + k);
                ra = gpt2rt_forward(g, in.data(), tg.data(), &fa);
                rb = gpt2rt_forward(h, in.data(), tg.data(), &fb);
            }
            if (ra == GPT2RT_OK) ra = gpt2rt_backward(g);
            if (rb == GPT2RT_OK) rb = gpt2rt_backward(h);
            la += fa; lb += fb;
        }
        if (s == 0 && ra == GPT2RT_OK && rb == GPT2RT_OK) { gg = read_all(g, GPT2RT_PARAM_GRAD, &names); hg = read_all(h, GPT2RT_PARAM_GRAD); }
        if (ra == GPT2RT_OK) ra = gpt2rt_update(g, &a);
        if (rb == GPT2RT_OK) rb = gpt2rt_update(h, &b);
        if (ra != GPT2RT_OK || rb != GPT2RT_OK) {
            check(0, "%s: step %d: cuda %s (%s), cpu %s (%s)", what, s, gpt2rt_result_string(ra), gpt2rt_last_error(g),
                  gpt2rt_result_string(rb), gpt2rt_last_error(h));
            gpt2rt_free(g); gpt2rt_free(h);
            return;
        }
        double d = fabs(la - lb) / fabs(lb);
        if (!(d <= lw)) lw = d;
    }
    double gmax = 0;
    for (auto &t : hg) for (float v : t) gmax = fmax(gmax, fabs(v));
    if (!(gmax > 0)) check(0, "%s: the CPU's gradients are all zero: nothing compared", what);
    int at;
    double w = worst_rel(gg, hg, &at);
    check(w <= gtol, "%s: gradients vs CPU: worst rel err %.3e (%s), tol %.0e", what, w, at >= 0 ? names[(size_t)at].c_str() : "-", gtol);
    check(lw <= ltol, "%s: loss of %d steps vs CPU: worst rel err %.3e, tol %.0e", what, steps, lw, ltol);
    gpt2rt_free(g);
    gpt2rt_free(h);
}

/* the gradients of one step on CUDA (after backward, before the update) */
static std::vector<std::vector<float>> cuda_grads(gpt2rt_config c, int steps = 1) {
    std::vector<std::vector<float>> out;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA);
    if (!g) return out;
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    for (int s = 0; s < steps; s++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 100 + s), tg = tokens(n, c.vocab_size, 200 + s);
        float loss;
        if (s) { gpt2rt_step_stats st; gpt2rt_update(g, &st); }
        if (gpt2rt_forward(g, in.data(), tg.data(), &loss) != GPT2RT_OK || gpt2rt_backward(g) != GPT2RT_OK) {
            check(0, "forward/backward: %s", gpt2rt_last_error(g));
            break;
        }
    }
    out = read_all(g, GPT2RT_PARAM_GRAD);
    gpt2rt_free(g);
    return out;
}

static void recompute(gpt2rt_config c, const char *what) {
    gpt2rt_emu::set_problem("recompute");
    auto none = cuda_grads(c, 2);
    c.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    auto sel = cuda_grads(c, 2);
    c.recompute = GPT2RT_RECOMPUTE_FULL;
    c.checkpoint_every = 1;
    auto full = cuda_grads(c, 2);
    check(!none.empty() && same_bits(none, sel) && same_bits(none, full),
          "%s: recompute selective and full gradients bitwise equal to none (CUDA)", what);
}

/* a scratch path of this run: the fiber orders run as two processes at once
   (kernels/emu/run.sh), so each writes its own files */
static std::string scratch(const char *stem) {
    const char *order = getenv("EMU_ORDER");
    std::string p = std::string("build/") + stem + "." + (order && *order ? order : "forward");
    for (char &ch : p) if (ch == ':') ch = '_';
    return p;
}

/* two steps, save, two more; a fresh context loads the state and takes the same two: bitwise */
static void resume(gpt2rt_config c) {
    gpt2rt_emu::set_problem("resume");
    gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA), *b = make(c, GPT2RT_BACKEND_CUDA);
    if (!a || !b) { gpt2rt_free(a); gpt2rt_free(b); return; }
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    std::string state = scratch("emu_drive_state"), path_s = state + ".bin";
    const char *path = path_s.c_str();
    gpt2rt_step_stats st;
    for (int s = 0; s < 4; s++) {
        if (s == 2 && gpt2rt_state_save(a, path) != GPT2RT_OK) { check(0, "state_save: %s", gpt2rt_last_error(a)); break; }
        std::vector<int32_t> in = tokens(n, c.vocab_size, 300 + s), tg = tokens(n, c.vocab_size, 400 + s);
        gpt2rt_step(a, in.data(), tg.data(), &st);
    }
    gpt2rt_result r = gpt2rt_state_load(b, path);
    for (int s = 2; s < 4 && r == GPT2RT_OK; s++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 300 + s), tg = tokens(n, c.vocab_size, 400 + s);
        gpt2rt_step(b, in.data(), tg.data(), &st);
    }
    check(r == GPT2RT_OK && same_bits(read_all(a, GPT2RT_PARAM_VALUE), read_all(b, GPT2RT_PARAM_VALUE)) &&
          same_bits(read_all(a, GPT2RT_PARAM_ADAM_V), read_all(b, GPT2RT_PARAM_ADAM_V)),
          "state save at step 2 + load + 2 steps == 4 uninterrupted steps, weights and moments bitwise (CUDA, %s)",
          c.precision == GPT2RT_PRECISION_BF16 ? "bf16" : "fp32");
    gpt2rt_free(a);
    gpt2rt_free(b);
    remove(path);
}

/* fp16: a loss scale of 2^24 (the largest allowed) overflows the first backward: that update is skipped and the
   scale halves; the following steps then match the CPU's steps (the skip changed nothing) */
static void fp16_overflow(gpt2rt_config c) {
    gpt2rt_emu::set_problem("fp16 overflow");
    c.precision = GPT2RT_PRECISION_FP16;
    c.loss_scale = 16777216.0f; /* dlogits ~ 2^24 / 32 tokens overflow fp16's 65504 */
    gpt2rt_config cc = c;
    cc.precision = GPT2RT_PRECISION_FP32;
    cc.loss_scale = 0.0f;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA), *h = make(cc, GPT2RT_BACKEND_CPU);
    if (!g || !h) { gpt2rt_free(g); gpt2rt_free(h); return; }
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    std::vector<int32_t> in = tokens(n, c.vocab_size, 500), tg = tokens(n, c.vocab_size, 600);
    gpt2rt_step_stats a, b;
    int skips = 0;
    float scale0 = 0, scale1 = 0;
    for (int s = 0; s < 40; s++) {
        gpt2rt_step(g, in.data(), tg.data(), &a);
        if (s == 0) scale0 = a.loss_scale;
        if (!a.skipped) break;
        skips++;
        scale1 = a.loss_scale;
    }
    gpt2rt_step(h, in.data(), tg.data(), &b);
    int64_t step_after = a.step;
    check(skips >= 1 && scale1 <= scale0 / 2 && step_after == 1,
          "fp16 loss scaling: %d overflowing steps skipped (scale %g -> %g), the first good one is step %lld", skips,
          (double)scale0, (double)scale1, (long long)step_after);
    double d = fabs((double)a.loss - b.loss) / fabs((double)b.loss);
    check(d <= 3e-3, "fp16: the first update after the skips vs the CPU's first: loss rel err %.3e, tol 3e-3", d);
    gpt2rt_free(g);
    gpt2rt_free(h);
}

static void frozen_unchanged(gpt2rt_config c) {
    gpt2rt_emu::set_problem("frozen");
    c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA);
    if (!g) return;
    std::vector<std::string> names;
    auto w0 = read_all(g, GPT2RT_PARAM_VALUE, &names);
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    gpt2rt_step_stats st;
    for (int s = 0; s < 2; s++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 700 + s), tg = tokens(n, c.vocab_size, 800 + s);
        gpt2rt_step(g, in.data(), tg.data(), &st);
    }
    auto w1 = read_all(g, GPT2RT_PARAM_VALUE);
    int frozen_same = 1, others_moved = 0;
    for (size_t t = 0; t < names.size(); t++) {
        int is_frozen = names[t].find(".attn.") != std::string::npos || names[t].find(".mlp.") != std::string::npos;
        int same = !memcmp(w0[t].data(), w1[t].data(), w0[t].size() * 4);
        if (is_frozen && !same) frozen_same = 0;
        if (!is_frozen && !same) others_moved++;
    }
    check(frozen_same && others_moved > 0, "frozen attention + MLP: their weights bitwise unchanged after 2 CUDA steps, %d other tensors moved", others_moved);
    gpt2rt_free(g);
}

/* weights after two gpt2rt_step calls (the layer-split CUDA path runs gpt2rt_step only) */
static std::vector<std::vector<float>> cuda_weights(gpt2rt_config c) {
    std::vector<std::vector<float>> out;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA);
    if (!g) return out;
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    gpt2rt_step_stats st;
    for (int s = 0; s < 2; s++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 1100 + s), tg = tokens(n, c.vocab_size, 1200 + s);
        if (gpt2rt_step(g, in.data(), tg.data(), &st) != GPT2RT_OK) { check(0, "step: %s", gpt2rt_last_error(g)); break; }
    }
    out = read_all(g, GPT2RT_PARAM_VALUE);
    gpt2rt_free(g);
    return out;
}
static void layer_split(gpt2rt_config c) {
    gpt2rt_emu::set_problem("layer split");
    auto one = cuda_weights(c);
    c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    c.n_devices = 2;
    auto two = cuda_weights(c);
    check(!two.empty() && same_bits(one, two), "layer split on 2 emulated devices: weights after 2 steps bitwise equal to one device");
}

/* data parallel: 2 ranks on 2 emulated devices against the CPU's 2 ranks; ZeRO-1 against unsharded */
static void data_parallel(gpt2rt_config c) {
    gpt2rt_emu::set_problem("data parallel");
    c.parallel = GPT2RT_PARALLEL_DATA;
    c.n_devices = 2;
    if (c.precision == GPT2RT_PRECISION_BF16) parity("data parallel 2 ranks bf16 C20 T7", c, 5e-2, 1e-2, 2);
    else parity("data parallel 2 ranks fp32", c, 1e-4, 1e-5, 3);
    gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA);
    c.shard_optimizer = 1;
    gpt2rt_ctx *b = make(c, GPT2RT_BACKEND_CUDA);
    if (!a || !b) { gpt2rt_free(a); gpt2rt_free(b); return; }
    int64_t n = (int64_t)2 * c.batch_size * c.seq_len;
    gpt2rt_step_stats st;
    for (int s = 0; s < 3; s++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 900 + s), tg = tokens(n, c.vocab_size, 1000 + s);
        gpt2rt_step(a, in.data(), tg.data(), &st);
        gpt2rt_step(b, in.data(), tg.data(), &st);
    }
    check(same_bits(read_all(a, GPT2RT_PARAM_VALUE), read_all(b, GPT2RT_PARAM_VALUE)),
          "data parallel ZeRO-1 (vocab %d: unequal shards) weights after 3 steps bitwise equal to unsharded", c.vocab_size);
    /* after the last micro-step's backward each ZeRO-1 rank holds the sum of its shard only:
       the read gathers it (two ranks add in either order alike, so bitwise) */
    gpt2rt_result ra = GPT2RT_OK, rb = GPT2RT_OK;
    for (int k = 0; k < (c.grad_accum ? c.grad_accum : 1); k++) {
        std::vector<int32_t> in = tokens(n, c.vocab_size, 950 + k), tg = tokens(n, c.vocab_size, 1050 + k);
        if (ra == GPT2RT_OK) ra = gpt2rt_forward(a, in.data(), tg.data(), NULL);
        if (ra == GPT2RT_OK) ra = gpt2rt_backward(a);
        if (rb == GPT2RT_OK) rb = gpt2rt_forward(b, in.data(), tg.data(), NULL);
        if (rb == GPT2RT_OK) rb = gpt2rt_backward(b);
    }
    check(ra == GPT2RT_OK && rb == GPT2RT_OK && same_bits(read_all(a, GPT2RT_PARAM_GRAD), read_all(b, GPT2RT_PARAM_GRAD)),
          "data parallel ZeRO-1 (vocab %d): the gradient read after the last backward bitwise equal to unsharded "
          "(%s; %s)", c.vocab_size, gpt2rt_last_error(a), gpt2rt_last_error(b));
    /* the step completed before the contexts go (the ranks' streams still wait on each other) */
    if (ra == GPT2RT_OK) gpt2rt_update(a, &st);
    if (rb == GPT2RT_OK) gpt2rt_update(b, &st);
    gpt2rt_free(a);
    gpt2rt_free(b);
}

/* data parallel on 2 emulated devices, freed after gpt2rt_backward without gpt2rt_update:
   the gradient reduction is still queued on the ranks' communicator streams, each waiting
   on the other rank's events, when gpt2rt_free tears them down (ASan reports a wait on a
   destroyed stream or event); unsharded (all-reduce) and ZeRO-1 (reduce-scatter) */
static void data_parallel_free_mid_step(gpt2rt_config c) {
    c.parallel = GPT2RT_PARALLEL_DATA;
    c.n_devices = 2;
    for (int shard = 0; shard < 2; shard++) {
        gpt2rt_emu::set_problem(shard ? "data parallel ZeRO-1 freed before update" : "data parallel freed before update");
        c.shard_optimizer = shard;
        gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA);
        if (!a) return;
        int64_t n = (int64_t)2 * c.batch_size * c.seq_len;
        std::vector<int32_t> in = tokens(n, c.vocab_size, 1200 + shard), tg = tokens(n, c.vocab_size, 1300 + shard);
        float loss = NAN;
        gpt2rt_result r = gpt2rt_forward(a, in.data(), tg.data(), &loss);
        if (r == GPT2RT_OK) r = gpt2rt_backward(a);
        std::string err = gpt2rt_last_error(a);
        gpt2rt_free(a); /* the reduction of this backward is still queued */
        check(r == GPT2RT_OK && loss > 0 && isfinite(loss),
              "data parallel 2 ranks%s: gpt2rt_free between gpt2rt_backward and gpt2rt_update (loss %g; %s)",
              shard ? " ZeRO-1" : "", (double)loss, err.c_str());
    }
}

/* ---- the ops no training path of this driver launches (the labs' own ops), each at an
   aligned and an odd shape against a host reference ---- */
/* cap: the scratch bytes allowed (the rows per partial follow from it) */
static void op_bias_backward(int64_t BT, int64_t OC, size_t cap) {
    gpt2rt_emu::set_problem("bias_backward");
    std::vector<float> h = floats(BT * OC, (uint64_t)(BT * 131 + OC)), db((size_t)OC, 1e30f);
    int64_t rows = gpt2rt__cu_bias_backward_rows(BT, OC, cap);
    float *d_dout = upload(h), *d_db = upload(db) /* overwritten: accumulate 0 */, *d_s;
    cudaMalloc(&d_s, gpt2rt__cu_bias_backward_scratch_bytes(BT, OC, rows));
    cudaError_t e = gpt2rt__cu_bias_backward<float>(d_db, d_dout, d_s, BT, OC, rows, 0, 0);
    cudaMemcpy(db.data(), d_db, (size_t)OC * 4, cudaMemcpyDeviceToHost);
    double w = 0;
    for (int64_t o = 0; o < OC; o++) {
        double s = 0, a = 0;
        for (int64_t r = 0; r < BT; r++) { s += h[(size_t)(r * OC + o)]; a += fabs(h[(size_t)(r * OC + o)]); }
        w = fmax(w, fabs(db[(size_t)o] - s) / a);
    }
    /* fp32 sums of BT terms in another grouping: |error| <= BT * 2^-24 * sum|terms| */
    check(e == cudaSuccess && w <= (double)BT / 16777216.0 && gpt2rt__cu_bias_backward_scratch_bytes(BT, OC, rows) <= cap,
          "op bias_backward BT %lld OC %lld, %lld rows a partial: err / sum|dout| %.2e, bound BT*2^-24 %.2e",
          (long long)BT, (long long)OC, (long long)rows, w, (double)BT / 16777216.0);
    cudaFree(d_dout); cudaFree(d_db); cudaFree(d_s);
}
/* the wte gradient's bucket list (host code) against its definition, built the slow way:
   for each token in increasing order, its positions in increasing order; Vp sets how many
   one-byte passes the sort takes (1 to 3 here) */
static void op_encoder_buckets(int64_t BT, int64_t Vp, uint64_t seed) {
    std::vector<int32_t> tok((size_t)BT), buf((size_t)gpt2rt__cu_encoder_bucket_ints(BT), -7);
    uint64_t x = seed;
    for (int64_t i = 0; i < BT; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* few distinct tokens half the time: long buckets */
        tok[(size_t)i] = (int32_t)((x >> 33) % (uint64_t)(i % 2 ? Vp : (Vp < 5 ? Vp : 5)));
    }
    int64_t nb = gpt2rt__cu_encoder_buckets(buf.data(), tok.data(), BT, Vp);
    std::vector<int32_t> start, ids, pos;
    std::vector<int32_t> sorted(tok);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (int32_t t : sorted) {
        start.push_back((int32_t)pos.size());
        ids.push_back(t);
        for (int64_t i = 0; i < BT; i++)
            if (tok[(size_t)i] == t) pos.push_back((int32_t)i);
    }
    start.push_back((int32_t)BT);
    int ok = nb == (int64_t)ids.size() && std::equal(start.begin(), start.end(), buf.begin()) &&
             std::equal(ids.begin(), ids.end(), buf.begin() + BT + 1) &&
             std::equal(pos.begin(), pos.end(), buf.begin() + 2 * BT + 1);
    tok[(size_t)(BT / 2)] = (int32_t)Vp; /* a token outside [0, Vp): refused */
    int refused = gpt2rt__cu_encoder_buckets(buf.data(), tok.data(), BT, Vp) == -1;
    check(ok && refused, "op encoder_buckets BT %lld Vp %lld: %lld buckets as defined (expected %zu), a token of Vp refused",
          (long long)BT, (long long)Vp, (long long)nb, ids.size());
}
static void op_cast(int64_t n) {
    gpt2rt_emu::set_problem("cast");
    std::vector<float> h = floats(n, (uint64_t)n), back((size_t)n);
    std::vector<__nv_bfloat16> b((size_t)n);
    float *d_f = upload(h), *d_f2;
    __nv_bfloat16 *d_b;
    cudaMalloc(&d_f2, (size_t)n * 4); cudaMalloc(&d_b, (size_t)n * 2);
    gpt2rt__cu_cast<__nv_bfloat16, float>(d_b, d_f, n, 0);
    gpt2rt__cu_cast<float, __nv_bfloat16>(d_f2, d_b, n, 0);
    cudaMemcpy(b.data(), d_b, (size_t)n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(back.data(), d_f2, (size_t)n * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        __nv_bfloat16 want = __float2bfloat16_rn(h[(size_t)i]);
        bad += b[(size_t)i].__x != want.__x || back[(size_t)i] != __bfloat162float(want);
    }
    check(!bad, "op cast fp32 -> bf16 -> fp32, n %lld: bitwise the host's round-to-nearest-even (%d differ)", (long long)n, bad);
    cudaFree(d_f); cudaFree(d_f2); cudaFree(d_b);
}
static void op_nonfinite(int64_t n) {
    gpt2rt_emu::set_problem("nonfinite");
    std::vector<float> h = floats(n, (uint64_t)n + 5);
    float *d = upload(h);
    int *flag, f0 = -1, f1 = -1;
    cudaMalloc(&flag, 4);
    gpt2rt__cu_nonfinite<float>(flag, d, n, 1, 0);
    cudaMemcpy(&f0, flag, 4, cudaMemcpyDeviceToHost);
    h[(size_t)(n - 1)] = INFINITY; /* the last element: the tail of the vector path */
    cudaMemcpy(d, h.data(), (size_t)n * 4, cudaMemcpyHostToDevice);
    gpt2rt__cu_nonfinite<float>(flag, d, n, 1, 0);
    cudaMemcpy(&f1, flag, 4, cudaMemcpyDeviceToHost);
    check(f0 == 0 && f1 == 1, "op nonfinite n %lld: finite -> %d, an inf in the last element -> %d", (long long)n, f0, f1);
    cudaFree(d); cudaFree(flag);
}

/* out (BT,OC) = gelu(inp W^T + bias) with pre_gelu kept: cuBLASLt's GELU_AUX_BIAS epilogue,
   or (OC % 8 != 0, or no such epilogue) the product then the header's GELU kernel */
static void op_matmul_gelu(int64_t BT, int64_t IC, int64_t OC) {
    gpt2rt_emu::set_problem("matmul_gelu");
    std::vector<float> inp = floats(BT * IC, 3), w = floats(OC * IC, 4), bias = floats(OC, 5), out((size_t)(BT * OC)),
                       pre((size_t)(BT * OC));
    float *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(bias), *d_out, *d_pre;
    void *ws;
    cudaMalloc(&d_out, out.size() * 4); cudaMalloc(&d_pre, pre.size() * 4); cudaMalloc(&ws, 1 << 20);
    gpt2rt__cu_blas bl;
    char err[256] = "";
    int st = gpt2rt__cu_blas_init(&bl, ws, 1 << 20, 0, err, sizeof err);
    if (!st) st = gpt2rt__cu_matmul_forward(&bl, CUDA_R_32F, d_out, d_pre, d_inp, d_w, d_b, BT, IC, OC, err, sizeof err);
    cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(pre.data(), d_pre, pre.size() * 4, cudaMemcpyDeviceToHost);
    double m = 0, e = 0;
    for (int64_t r = 0; r < BT; r++)
        for (int64_t o = 0; o < OC; o++) {
            double s = bias[(size_t)o];
            for (int64_t i = 0; i < IC; i++) s += (double)inp[(size_t)(r * IC + i)] * w[(size_t)(o * IC + i)];
            double g = 0.5 * s * (1.0 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
            m = fmax(m, fabs(g));
            e = fmax(e, fmax(fabs(out[(size_t)(r * OC + o)] - g), fabs(pre[(size_t)(r * OC + o)] - s)));
        }
    /* fp32: IC + 1 terms of size <= 1 each, rounding IC * 2^-24 of their sum, gelu's slope <= 1.13 */
    double tol = 1.13 * (double)(IC + 1) * (IC + 1) / 16777216.0;
    check(!st && e <= tol, "op matmul_forward GELU (%s) BT %lld IC %lld OC %lld: max|err| %.2e, tol %.2e %s",
          bl.fallbacks ? "the GELU kernel" : "fused epilogue", (long long)BT, (long long)IC, (long long)OC, e, tol, err);
    gpt2rt__cu_blas_destroy(&bl);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out); cudaFree(d_pre); cudaFree(ws);
}

/* dinp (BT,IC) = (dout (BT,OC) W (OC,IC)) * gelu'(pre (BT,IC)): cuBLASLt's DGELU epilogue or
   the product then the header's dGELU kernel */
static void op_matmul_dgelu(int64_t BT, int64_t IC, int64_t OC) {
    gpt2rt_emu::set_problem("matmul_dgelu");
    std::vector<float> dout = floats(BT * OC, 6), w = floats(OC * IC, 7), pre = floats(BT * IC, 8), dinp((size_t)(BT * IC));
    float *d_dout = upload(dout), *d_w = upload(w), *d_pre = upload(pre), *d_dinp;
    void *ws;
    cudaMalloc(&d_dinp, dinp.size() * 4); cudaMalloc(&ws, 1 << 20);
    gpt2rt__cu_blas bl;
    char err[256] = "";
    int st = gpt2rt__cu_blas_init(&bl, ws, 1 << 20, 0, err, sizeof err);
    if (!st) st = gpt2rt__cu_matmul_backward_input(&bl, CUDA_R_32F, d_dinp, d_dout, d_w, d_pre, BT, IC, OC, err, sizeof err);
    cudaMemcpy(dinp.data(), d_dinp, dinp.size() * 4, cudaMemcpyDeviceToHost);
    double e = 0;
    for (int64_t r = 0; r < BT; r++)
        for (int64_t i = 0; i < IC; i++) {
            double s = 0, x = pre[(size_t)(r * IC + i)];
            for (int64_t o = 0; o < OC; o++) s += (double)dout[(size_t)(r * OC + o)] * w[(size_t)(o * IC + i)];
            double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
            double g = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
            e = fmax(e, fabs(dinp[(size_t)(r * IC + i)] - s * g));
        }
    /* fp32: OC terms of size <= 1, rounding OC * 2^-24 of their sum, gelu' <= 1.13, one more rounding */
    double tol = 1.13 * (double)OC * OC / 16777216.0 + 1e-6;
    check(!st && e <= tol, "op matmul_backward_input DGELU (%s) BT %lld IC %lld OC %lld: max|err| %.2e, tol %.2e %s",
          bl.fallbacks ? "the dGELU kernel" : "fused epilogue", (long long)BT, (long long)IC, (long long)OC, e, tol, err);
    gpt2rt__cu_blas_destroy(&bl);
    cudaFree(d_dout); cudaFree(d_w); cudaFree(d_pre); cudaFree(d_dinp); cudaFree(ws);
}

/* weight and bias gradients accumulated twice (dw, db += from the same dout, inp) with the
   fused epilogues allowed in blas->fuse: BGRADB (cuBLASLt's vector, then the add kernel)
   or the column-sum kernel, against double sums */
static void op_matmul_bgrad(int64_t BT, int64_t IC, int64_t OC, unsigned fuse) {
    gpt2rt_emu::set_problem("matmul_bgrad");
    std::vector<float> dout = floats(BT * OC, 9), inp = floats(BT * IC, 10), dw((size_t)(IC * OC)), db((size_t)OC);
    /* dw and db start at zero: the vectors' initial values */
    float *d_dout = upload(dout), *d_inp = upload(inp), *d_dw = upload(dw), *d_db = upload(db), *d_dbs;
    void *ws;
    cudaMalloc(&d_dbs, db.size() * 4); cudaMalloc(&ws, 1 << 20);
    gpt2rt__cu_blas bl;
    char err[256] = "";
    int st = gpt2rt__cu_blas_init(&bl, ws, 1 << 20, 0, err, sizeof err);
    bl.fuse = fuse;
    for (int k = 0; k < 2 && !st; k++)
        st = gpt2rt__cu_matmul_backward_weight(&bl, CUDA_R_32F, d_dw, d_db, d_dbs, d_dout, d_inp, BT, IC, OC, 1, err,
                                               sizeof err);
    cudaMemcpy(dw.data(), d_dw, dw.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(db.data(), d_db, db.size() * 4, cudaMemcpyDeviceToHost);
    double e = 0, eb = 0;
    for (int64_t o = 0; o < OC; o++) {
        double sb = 0;
        for (int64_t r = 0; r < BT; r++) sb += dout[(size_t)(r * OC + o)];
        eb = fmax(eb, fabs(db[(size_t)o] - 2 * sb));
        for (int64_t i = 0; i < IC; i++) {
            double sw = 0;
            for (int64_t r = 0; r < BT; r++) sw += (double)dout[(size_t)(r * OC + o)] * inp[(size_t)(r * IC + i)];
            e = fmax(e, fabs(dw[(size_t)(o * IC + i)] - 2 * sw));
        }
    }
    /* fp32 sums of 2 BT terms of size <= 1: rounding at most 2 BT * 2^-24 * 2 BT */
    double tol = 4.0 * (double)BT * BT / 16777216.0 + 1e-6;
    check(!st && e <= tol && eb <= tol, "op matmul_backward_weight accumulated twice (%s) BT %lld IC %lld OC %lld: "
          "max|err| dw %.2e db %.2e, tol %.2e %s", (fuse & GPT2RT__CU_MM_FB_BGRAD) ? "BGRADB + the add kernel" :
          "the column-sum kernel", (long long)BT, (long long)IC, (long long)OC, e, eb, tol, err);
    gpt2rt__cu_blas_destroy(&bl);
    cudaFree(d_dout); cudaFree(d_inp); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_dbs); cudaFree(ws);
}

/* ---- generation with the KV cache ---- */
/* every token's logits, per row, in the order on_token sees them */
struct gen_log { int V; std::vector<std::vector<float>> lg[4]; };
static int gen_on_token(void *user, int row, int32_t token, const float *logits, int64_t n) {
    (void)token;
    gen_log *g = (gen_log *)user;
    g->lg[row].push_back(std::vector<float>(logits, logits + n));
    return 0;
}
/* greedy generation from the same prompts on backend b at precision p: ids (B, cap), lens, logits */
static int gen_run(gpt2rt_config c, gpt2rt_backend b, gpt2rt_precision p, const int64_t *plen, int B, int new_tokens,
                   std::vector<int32_t> *ids, std::vector<int64_t> *lens, gen_log *log, gpt2rt_ctx **keep = NULL) {
    c.precision = p;
    gpt2rt_ctx *x = make(c, b);
    if (!x) return 0;
    int64_t cap = c.kv_len;
    ids->assign((size_t)(B * cap), 0);
    std::vector<int32_t> t = tokens(B * cap, c.vocab_size, 99);
    for (int r = 0; r < B; r++)
        for (int64_t i = 0; i < plen[r]; i++) (*ids)[(size_t)(r * cap + i)] = t[(size_t)(r * cap + i)];
    lens->assign(plen, plen + B);
    gpt2rt_sample o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = new_tokens; o.eot = -1; o.on_token = gen_on_token; o.user = log;
    gpt2rt_result r = gpt2rt_generate(x, &o, B, ids->data(), cap, lens->data());
    if (r != GPT2RT_OK) /* a failure only: the checks that count compare what came back */
        check(0, "gpt2rt_generate (%s, %s): %s", b == GPT2RT_BACKEND_CUDA ? "cuda" : "cpu",
              p == GPT2RT_PRECISION_FP32 ? "fp32" : p == GPT2RT_PRECISION_BF16 ? "bf16" : "fp16", gpt2rt_last_error(x));
    if (keep) *keep = x;
    else gpt2rt_free(x);
    return r == GPT2RT_OK;
}
/* worst max|a-b| / max|b| over the steps where a row's ids still agree (after that the
   contexts differ), and how many steps that covered */
static double gen_logit_err(const gen_log &a, const gen_log &b, const std::vector<int32_t> &ia,
                            const std::vector<int32_t> &ib, const int64_t *plen, int B, int64_t cap, int *steps) {
    double w = 0;
    *steps = 0;
    for (int r = 0; r < B; r++)
        for (size_t k = 0; k < a.lg[r].size() && k < b.lg[r].size(); k++) {
            double m = 0, e = 0;
            for (size_t v = 0; v < b.lg[r][k].size(); v++) {
                m = fmax(m, fabs(b.lg[r][k][v]));
                double d = fabs((double)a.lg[r][k][v] - b.lg[r][k][v]);
                if (!(d <= e)) e = d;
            }
            double rel = m > 0 ? e / m : e;
            if (!(rel <= w)) w = rel;
            (*steps)++;
            if (ia[(size_t)(r * cap + plen[r] + (int64_t)k)] != ib[(size_t)(r * cap + plen[r] + (int64_t)k)]) break;
        }
    return w;
}
/* CUDA's greedy ids equal the CPU backend's in fp32, with logits within fp32 rounding; bf16
   and fp16 logits within their rounding of CUDA fp32's on the steps whose context agrees;
   the device's KV arena planned == cudaMalloc'ed */
static void generation(const char *what, gpt2rt_config c, const int64_t *plen, int B, int new_tokens) {
    gpt2rt_emu::set_problem(what);
    std::vector<int32_t> ih, ig;
    std::vector<int64_t> lh, lg;
    gen_log gh, gg;
    gpt2rt_ctx *x = NULL;
    if (!gen_run(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_FP32, plen, B, new_tokens, &ih, &lh, &gh) ||
        !gen_run(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32, plen, B, new_tokens, &ig, &lg, &gg, &x))
        { gpt2rt_free(x); return; }
    int64_t cap = c.kv_len;
    int all = lg == lh && ig == ih, grew = 1;
    for (int r = 0; r < B; r++) grew &= lg[(size_t)r] == plen[r] + new_tokens;
    check(all && grew, "%s fp32: CUDA greedy ids == the CPU backend's, every row %d new tokens after prompts of "
          "unequal length", what, new_tokens);
    int steps = 0;
    double e = gen_logit_err(gg, gh, ig, ih, plen, B, cap, &steps);
    /* fp32: both sum the same products in other orders (n <= 4C terms, ~n 2^-24 each) through two layers */
    check(e <= 1e-4 && steps == B * new_tokens, "%s fp32: logits of %d steps vs the CPU: rel err %.3e, tol 1e-4",
          what, steps, e);
    gpt2rt_memory_plan plan, got;
    gpt2rt_config pc = c;
    pc.backend = GPT2RT_BACKEND_CUDA;
    int ok = gpt2rt_plan(&pc, &plan) == GPT2RT_OK && gpt2rt_plan_allocated(x, &got) == GPT2RT_OK, bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += got.bytes[0][m] != plan.bytes[0][m];
    check(ok && !bad && plan.bytes[0][GPT2RT_MEM_KVCACHE] > 0, "%s: planned == cudaMalloc'ed in every category "
          "(KV cache %llu bytes)", what, (unsigned long long)plan.bytes[0][GPT2RT_MEM_KVCACHE]);
    gpt2rt_free(x);
    const gpt2rt_precision half[2] = {GPT2RT_PRECISION_BF16, GPT2RT_PRECISION_FP16};
    /* the header's derivation: 8 (bf16) or 11 (fp16) bits of mantissa, tens of roundings along a path */
    const double tol[2] = {5e-2, 1.5e-2};
    for (int k = 0; k < 2; k++) {
        std::vector<int32_t> ix;
        std::vector<int64_t> lx;
        gen_log gx;
        if (!gen_run(c, GPT2RT_BACKEND_CUDA, half[k], plen, B, new_tokens, &ix, &lx, &gx)) continue;
        double ex = gen_logit_err(gx, gg, ix, ig, plen, B, cap, &steps);
        check(ex <= tol[k] && steps >= B, "%s %s: logits of %d steps (where the ids agree) vs CUDA fp32: rel err %.3e, "
              "tol %.1e", what, k ? "fp16" : "bf16", steps, ex, tol[k]);
    }
}
/* an inference context (weights, KV cache, forward workspace) on CUDA: planned == allocated,
   forward loss and logits bitwise the training context's, generation the CPU's ids, training refused */
static void inference(gpt2rt_config c) {
    gpt2rt_emu::set_problem("inference");
    c.kv_batch = 2; c.kv_len = 20;
    gpt2rt_config ic = c;
    ic.inference = 1;
    gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA), *b = make(ic, GPT2RT_BACKEND_CUDA);
    if (!a || !b) { gpt2rt_free(a); gpt2rt_free(b); return; }
    gpt2rt_memory_plan plan, got;
    ic.backend = GPT2RT_BACKEND_CUDA;
    int ok = gpt2rt_plan(&ic, &plan) == GPT2RT_OK && gpt2rt_plan_allocated(b, &got) == GPT2RT_OK, bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += got.bytes[0][m] != plan.bytes[0][m];
    check(ok && !bad && !plan.bytes[0][GPT2RT_MEM_GRADS] && !plan.bytes[0][GPT2RT_MEM_MOMENTS],
          "inference on CUDA: planned == cudaMalloc'ed, no gradients or moments (%d categories differ)", bad);
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    std::vector<int32_t> x = tokens(n, c.vocab_size, 5), y = tokens(n, c.vocab_size, 6);
    std::vector<float> la((size_t)(n * c.vocab_size)), lb(la.size());
    float sa = -1, sb = -2;
    ok = gpt2rt_forward(a, x.data(), y.data(), &sa) == GPT2RT_OK && gpt2rt_forward(b, x.data(), y.data(), &sb) == GPT2RT_OK &&
         gpt2rt_logits(a, la.data(), n * c.vocab_size) == GPT2RT_OK &&
         gpt2rt_logits(b, lb.data(), n * c.vocab_size) == GPT2RT_OK;
    check(ok && sa == sb && la == lb, "inference on CUDA: forward loss %.7g and logits bitwise the training context's "
          "(%.7g): %s", sb, sa, gpt2rt_last_error(b));
    check(gpt2rt_step(b, x.data(), y.data(), NULL) == GPT2RT_ERR_STATE, "inference on CUDA: gpt2rt_step refused");
    gpt2rt_free(a);
    gpt2rt_free(b);
    std::vector<int32_t> ih, ig;
    std::vector<int64_t> lh, lg;
    gen_log gh, gg;
    int64_t plen[2] = {4, 6};
    if (gen_run(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_FP32, plen, 2, 6, &ih, &lh, &gh) &&
        gen_run(ic, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32, plen, 2, 6, &ig, &lg, &gg))
        check(ig == ih && lg == lh, "inference on CUDA: greedy ids == the CPU training context's");
}

/* aLLM4TS (head = NEXT_PATCH, PATCH_DECODE; attn_mask): `steps` steps of a CUDA context twice from the same
   seed, weights bitwise; and the placeholder mask matters: the CUDA loss under PLACEHOLDERS against the CPU's under
   CAUSAL differs by more than parity's tolerance (so a CUDA kernel that ignored the mask would fail parity) */
static void allm4ts_twice_and_mask(gpt2rt_config c, int steps) {
    gpt2rt_emu::set_problem("allm4ts twice");
    gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA), *b = make(c, GPT2RT_BACKEND_CUDA);
    gpt2rt_config cc = c;
    cc.attn_mask = GPT2RT_MASK_CAUSAL;
    gpt2rt_ctx *h = make(cc, GPT2RT_BACKEND_CPU);
    if (!a || !b || !h) { gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(h); return; }
    gpt2rt_memory_plan plan, got;
    gpt2rt_config pc = c;
    pc.backend = GPT2RT_BACKEND_CUDA;
    int ok = gpt2rt_plan(&pc, &plan) == GPT2RT_OK && gpt2rt_plan_allocated(a, &got) == GPT2RT_OK, bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += got.bytes[0][m] != plan.bytes[0][m];
    check(ok && !bad, "aLLM4TS %s on CUDA: planned == cudaMalloc'ed (%d categories differ)",
          c.head == GPT2RT_HEAD_NEXT_PATCH ? "NEXT_PATCH" : "PATCH_DECODE", bad);
    int M = c.n_channels;
    double worst = 0;
    for (int s = 0; s < steps && ok; s++) {
        std::vector<float> x = floats((int64_t)c.batch_size * c.seq_len * M, 31 + s), y = floats((int64_t)c.batch_size * c.horizon * M, 41 + s);
        const float *yp = c.head == GPT2RT_HEAD_NEXT_PATCH ? NULL : y.data();
        float la = 0, lh = 0;
        ok = gpt2rt_forward_series(h, x.data(), yp, &lh) == GPT2RT_OK;
        gpt2rt_step_stats st;
        ok = ok && gpt2rt_step_series(a, x.data(), yp, &st) == GPT2RT_OK;
        la = st.loss;
        ok = ok && gpt2rt_step_series(b, x.data(), yp, &st) == GPT2RT_OK && st.loss == la;
        if (s == 0) worst = fabs((double)la - lh) / fabs((double)lh);
    }
    check(ok && same_bits(read_all(a, GPT2RT_PARAM_VALUE), read_all(b, GPT2RT_PARAM_VALUE)) &&
          same_bits(read_all(a, GPT2RT_PARAM_ADAM_V), read_all(b, GPT2RT_PARAM_ADAM_V)),
          "aLLM4TS %s on CUDA: two runs of %d steps, losses, weights and moments bitwise equal%s%s",
          c.head == GPT2RT_HEAD_NEXT_PATCH ? "NEXT_PATCH" : "PATCH_DECODE", steps, ok ? "" : ": ",
          ok ? "" : gpt2rt_last_error(a));
    if (c.attn_mask == GPT2RT_MASK_PLACEHOLDERS)
        check(worst > 1e-3, "aLLM4TS: the CUDA loss under PLACEHOLDERS vs the CPU's under CAUSAL: rel diff %.3e > 1e-3 "
              "(the mask is observable at parity's tolerance)", worst);
    gpt2rt_free(a);
    gpt2rt_free(b);
    gpt2rt_free(h);
}

/* classifier_chunk = N on CUDA against the whole-batch CUDA path of the same config: planned ==
   cudaMalloc'ed with the logits arena N x Vp; forward + backward twice (the second accumulates): the loss and
   every gradient but wte's bitwise equal (each token's row is computed alone, by the same kernels), wte's within
   1e-5 relative (a sum over BT = 32 tokens added in chunks: reassociation moves it by about log2(32) roundings of
   2^-24, 3e-7, relative to its largest term; the margin covers cancellation); then gpt2rt_step (the head's backward
   fused into the forward) with grad_accum 2 for 3 steps: the first step's loss bitwise, every step's within 1e-5 */
static void chunk_vs_whole(gpt2rt_config c, int N) {
    gpt2rt_emu::set_problem("classifier_chunk");
    gpt2rt_config k = c;
    k.classifier_chunk = N;
    const char *pr = c.precision == GPT2RT_PRECISION_BF16 ? "bf16" : "fp32";
    gpt2rt_ctx *w = make(c, GPT2RT_BACKEND_CUDA), *h = make(k, GPT2RT_BACKEND_CUDA);
    if (!w || !h) { gpt2rt_free(w); gpt2rt_free(h); return; }
    gpt2rt_memory_plan plan, got, whole;
    k.backend = c.backend = GPT2RT_BACKEND_CUDA;
    int ok = gpt2rt_plan(&k, &plan) == GPT2RT_OK && gpt2rt_plan_allocated(h, &got) == GPT2RT_OK &&
             gpt2rt_plan(&c, &whole) == GPT2RT_OK, bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += got.bytes[0][m] != plan.bytes[0][m];
    int Vp = (c.vocab_size + 127) / 128 * 128, ab = c.precision == GPT2RT_PRECISION_BF16 ? 2 : 4;
    check(ok && !bad && plan.bytes[0][GPT2RT_MEM_LOGITS] == (uint64_t)N * Vp * ab &&
          whole.bytes[0][GPT2RT_MEM_LOGITS] == (uint64_t)c.batch_size * c.seq_len * Vp * ab,
          "classifier_chunk %d on CUDA (%s): planned == cudaMalloc'ed (%d categories differ), logits %llu bytes = N x Vp "
          "x %d (whole batch: %llu)", N, pr, bad, (unsigned long long)plan.bytes[0][GPT2RT_MEM_LOGITS], ab,
          (unsigned long long)whole.bytes[0][GPT2RT_MEM_LOGITS]);
    int64_t n = (int64_t)c.batch_size * c.seq_len;
    float lw = 0, lh = 0, lw2 = 0, lh2 = 0;
    std::vector<int32_t> in = tokens(n, c.vocab_size, 700), tg = tokens(n, c.vocab_size, 701);
    std::vector<int32_t> in2 = tokens(n, c.vocab_size, 702), tg2 = tokens(n, c.vocab_size, 703);
    tg[3] = -1; /* an ignored target */
    ok = gpt2rt_forward(w, in.data(), tg.data(), &lw) == GPT2RT_OK && gpt2rt_backward(w) == GPT2RT_OK &&
         gpt2rt_forward(h, in.data(), tg.data(), &lh) == GPT2RT_OK && gpt2rt_backward(h) == GPT2RT_OK &&
         gpt2rt_forward(w, in2.data(), tg2.data(), &lw2) == GPT2RT_OK && gpt2rt_backward(w) == GPT2RT_OK &&
         gpt2rt_forward(h, in2.data(), tg2.data(), &lh2) == GPT2RT_OK && gpt2rt_backward(h) == GPT2RT_OK;
    std::vector<std::string> names;
    auto gw = read_all(w, GPT2RT_PARAM_GRAD, &names), gh = read_all(h, GPT2RT_PARAM_GRAD);
    int others = 1;
    double wte = -1;
    for (size_t t = 0; t < gw.size() && ok; t++) {
        if (names[t] == "transformer.wte.weight") {
            std::vector<std::vector<float>> a(1, gh[t]), b(1, gw[t]);
            int at;
            wte = worst_rel(a, b, &at);
        } else if (gw[t].size() != gh[t].size() || memcmp(gw[t].data(), gh[t].data(), gw[t].size() * 4)) {
            others = 0;
            printf("     differs: %s\n", names[t].c_str());
        }
    }
    check(ok && lw == lh && lw2 == lh2 && others, "classifier_chunk %d on CUDA (%s): forward + backward twice: losses "
          "%.7g %.7g and every gradient but wte's bitwise the whole batch's%s%s", N, pr, lh, lh2, ok ? "" : ": ",
          ok ? "" : gpt2rt_last_error(h));
    check(ok && wte >= 0 && wte <= 1e-5, "classifier_chunk %d on CUDA (%s): wte's gradient within %.3e of the whole "
          "batch's, tol 1e-5", N, pr, wte);
    gpt2rt_free(w);
    gpt2rt_free(h);
    c.grad_accum = k.grad_accum = 2;
    w = make(c, GPT2RT_BACKEND_CUDA);
    h = make(k, GPT2RT_BACKEND_CUDA);
    if (!w || !h) { gpt2rt_free(w); gpt2rt_free(h); return; }
    double worst = 0;
    int first = 0;
    ok = 1;
    for (int s = 0; s < 3 && ok; s++) {
        std::vector<int32_t> a = tokens(2 * n, c.vocab_size, 710 + s), b = tokens(2 * n, c.vocab_size, 720 + s);
        gpt2rt_step_stats sw, sh;
        ok = gpt2rt_step(w, a.data(), b.data(), &sw) == GPT2RT_OK && gpt2rt_step(h, a.data(), b.data(), &sh) == GPT2RT_OK;
        if (s == 0) first = sw.loss == sh.loss;
        double d = fabs((double)sw.loss - sh.loss) / fabs((double)sw.loss);
        if (!(d <= worst)) worst = d;
    }
    check(ok && first && worst <= 1e-5, "classifier_chunk %d on CUDA (%s): gpt2rt_step, head fused into the forward, "
          "grad_accum 2: first loss bitwise, 3 steps' losses within %.3e of the whole batch's, tol 1e-5%s%s", N, pr,
          worst, ok ? "" : ": ", ok ? "" : gpt2rt_last_error(h));
    gpt2rt_free(w);
    gpt2rt_free(h);
}

/* a forecaster saved from a CPU context forecasts the same on the CUDA backend: the
   artifact (weights, scaler, RevIN, head) round-trips through gpt2rt_forecaster_load
   with base.backend = CUDA. Tolerance 1e-4 of the forecasts' scale: the forward of the
   fp32 parity checks above agrees to 1e-5 in the loss, and the forecast adds only the
   scaler's affine map (exact up to fp32 rounding) */
static void forecaster_round_trip(gpt2rt_config c) {
    gpt2rt_emu::set_problem("forecaster");
    std::string csv = "date,a,b\n";
    for (int i = 0; i < 160; i++) {
        char line[96];
        snprintf(line, sizeof line, "2024-01-%02d %02d:00:00,%.3f,%.3f\n", 1 + i / 24, i % 24,
                 20 + 5 * sin(i * 0.26) + 0.01 * i, 300 + 30 * cos(i * 0.13));
        csv += line;
    }
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = c.seq_len; sd.horizon = c.horizon;
    gpt2rt_series *s = NULL;
    if (gpt2rt_series_load_mem(&s, csv.data(), csv.size(), "sensor.csv", &sd) != GPT2RT_OK) {
        check(0, "forecaster: the series: %s", gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
        return;
    }
    gpt2rt_ctx *cpu = make(c, GPT2RT_BACKEND_CPU);
    if (!cpu) { gpt2rt_series_free(s); return; }
    int M = c.n_channels, B = c.batch_size;
    std::vector<float> x((size_t)B * c.seq_len * M), y((size_t)B * c.horizon * M);
    gpt2rt_step_stats st;
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++)
        ok = gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 0, 0, (int64_t)k * B, B, x.data(), y.data()) == GPT2RT_OK &&
             gpt2rt_step_series(cpu, x.data(), y.data(), &st) == GPT2RT_OK;
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s;
    std::string dir_s = scratch("emu_forecaster");
    const char *dir = dir_s.c_str();
    ok = ok && gpt2rt_forecaster_save(cpu, dir, &fd) == GPT2RT_OK;
    check(ok, "forecaster: trained 2 steps on the CPU and saved: %s", gpt2rt_last_error(cpu));
    gpt2rt_forecaster *fa = NULL, *fb = NULL;
    gpt2rt_config ba = c, bb = c;
    ba.backend = GPT2RT_BACKEND_CPU; bb.backend = GPT2RT_BACKEND_CUDA;
    int la = ok && gpt2rt_forecaster_load(&fa, dir, &ba) == GPT2RT_OK;
    int lb = ok && gpt2rt_forecaster_load(&fb, dir, &bb) == GPT2RT_OK;
    check(la && lb, "forecaster: loaded on the CPU (%s) and on CUDA (%s)", fa ? gpt2rt_forecaster_last_error(fa) : "",
          fb ? gpt2rt_forecaster_last_error(fb) : "");
    if (la && lb) {
        int n = 3; /* windows in the data's units: the file's last rows */
        std::vector<float> w((size_t)n * c.seq_len * M), pa((size_t)n * c.horizon * M), pb(pa.size());
        for (int i = 0; i < n; i++)
            for (int t = 0; t < c.seq_len; t++)
                for (int m = 0; m < M; m++) {
                    int row = 160 - c.seq_len - 7 * i + t;
                    w[((size_t)i * c.seq_len + t) * M + m] = m ? (float)(300 + 30 * cos(row * 0.13))
                                                               : (float)(20 + 5 * sin(row * 0.26) + 0.01 * row);
                }
        int r = gpt2rt_forecaster_predict(fa, w.data(), n, pa.data()) == GPT2RT_OK &&
                gpt2rt_forecaster_predict(fb, w.data(), n, pb.data()) == GPT2RT_OK;
        double scale = 0, err = 0;
        for (size_t i = 0; i < pa.size(); i++) {
            scale = std::max(scale, (double)fabsf(pa[i]));
            err = std::max(err, (double)fabsf(pa[i] - pb[i]));
        }
        check(r && scale > 0 && err <= 1e-4 * scale, "forecaster: CUDA's forecasts in the data's units against the CPU's: "
              "max |diff| %.3g of scale %.3g (bound 1e-4 of it): %s", err, scale, gpt2rt_forecaster_last_error(fb));
    }
    gpt2rt_forecaster_free(fa);
    gpt2rt_forecaster_free(fb);
    gpt2rt_free(cpu);
    gpt2rt_series_free(s);
}

/* The attention's two tensor-core forwards (and backwards) on the same problem: mma.sync (allow
   GPT2RT__CU_ATT_MMA) and the Hopper wgmma kernel (GPT2RT__CU_ATT_WGMMA; the emulator is a
   compute capability 9.0 device). Both of the emulator's models sum each product in
   increasing k, so out and lse must be the same bits; both against the CPU's fp32
   attention on the same rounded inputs (out within the storage type's rounding of P and of
   the output, lse 1e-5 relative). TH: the placeholder mask's history, 0 causal. */
template <typename X>
static void op_attention(int B, int T, int C, int NH, int TH, const char *what) {
    gpt2rt_emu::set_problem(what);
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    std::vector<float> q = floats(n_qkv, (uint64_t)(T * 7 + C));
    std::vector<X> hx((size_t)n_qkv);
    for (int64_t i = 0; i < n_qkv; i++) { hx[(size_t)i] = gpt2rt__cu_to<X>(1.5f * q[(size_t)i]); q[(size_t)i] = gpt2rt__cu_f(hx[(size_t)i]); }
    std::vector<float> out_ref((size_t)n_out), lse_ref((size_t)n_lse), scr((size_t)gpt2rt__pad16(2 * T));
    gpt2rt__cpu_attention_forward_masked(out_ref.data(), lse_ref.data(), q.data(), scr.data(), B, T, C, NH, TH ? TH : T, NULL, 1);
    X *d_qkv, *d_o1, *d_o2;
    float *d_l1, *d_l2;
    cudaMalloc(&d_qkv, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_o1, (size_t)n_out * sizeof(X)); cudaMalloc(&d_o2, (size_t)n_out * sizeof(X));
    cudaMalloc(&d_l1, (size_t)n_lse * 4); cudaMalloc(&d_l2, (size_t)n_lse * 4);
    cudaMemcpy(d_qkv, hx.data(), (size_t)n_qkv * sizeof(X), cudaMemcpyHostToDevice);
    cudaMemset(d_o2, 0xFF, (size_t)n_out * sizeof(X)); cudaMemset(d_l2, 0xFF, (size_t)n_lse * 4);
    cudaError_t e1 = gpt2rt__cu_attention_forward_impl<X>(d_o1, d_l1, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    cudaError_t e2 = gpt2rt__cu_attention_forward_impl<X>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_WGMMA, NULL, TH);
    std::vector<X> o1((size_t)n_out), o2((size_t)n_out);
    std::vector<float> l1((size_t)n_lse), l2((size_t)n_lse);
    cudaError_t e3 = cudaMemcpy(o1.data(), d_o1, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(o2.data(), d_o2, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(l1.data(), d_l1, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(l2.data(), d_l2, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
    int same = !memcmp(o1.data(), o2.data(), (size_t)n_out * sizeof(X)) && !memcmp(l1.data(), l2.data(), (size_t)n_lse * 4);
    double eo = 0, mo = 0, el = 0;
    for (int64_t i = 0; i < n_out; i++) {
        eo = fmax(eo, fabs((double)gpt2rt__cu_f(o2[(size_t)i]) - out_ref[(size_t)i]));
        mo = fmax(mo, fabs((double)out_ref[(size_t)i]));
    }
    for (int64_t i = 0; i < n_lse; i++) el = fmax(el, fabs((double)l2[(size_t)i] - lse_ref[(size_t)i]) / fmax(1.0, fabs((double)lse_ref[(size_t)i])));
    /* out: P and the output rounded to X (2^-8 bf16, 2^-11 fp16 relative), 4x margin */
    const double tol = (sizeof(X) == 2 && gpt2rt__cu_f(gpt2rt__cu_to<X>(1.0f + 1.0f / 1024.0f)) != 1.0f ? 4.0 / 2048.0 : 4.0 / 256.0) * fmax(mo, 1e-30);
    check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && same && eo <= tol && el <= 1e-5,
          "op attention forward %s: wgmma == mma.sync bitwise %d; wgmma vs CPU: out max err %.2e (bound %.2e), lse rel %.2e",
          what, same, eo, tol, el);

    /* the backward: dQ, dK and dV by the wgmma kernels (GPT2RT__CU_ATT_WGMMA) or mma.sync, the
       whole dqkv the same bits; against the CPU's backward from the CPU's forward: the lab's
       tolerances (3e-2 bf16, 5e-3 fp16 of each part's max), which cover P, dS and the
       forward's output rounded to X */
    std::vector<float> dy = floats(n_out, (uint64_t)(T * 11 + C)), dqkv_ref((size_t)n_qkv);
    std::vector<X> dyx((size_t)n_out), g1((size_t)n_qkv), g2((size_t)n_qkv);
    for (int64_t i = 0; i < n_out; i++) { dyx[(size_t)i] = gpt2rt__cu_to<X>(dy[(size_t)i]); dy[(size_t)i] = gpt2rt__cu_f(dyx[(size_t)i]); }
    gpt2rt__cpu_attention_backward_masked(dqkv_ref.data(), dy.data(), q.data(), lse_ref.data(), scr.data(), B, T, C, NH, TH ? TH : T, NULL, 1);
    X *d_dy, *d_g1, *d_g2;
    float *d_D;
    cudaMalloc(&d_dy, (size_t)n_out * sizeof(X)); cudaMalloc(&d_g1, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_g2, (size_t)n_qkv * sizeof(X));
    cudaMalloc(&d_D, (size_t)n_lse * 4);
    cudaMemcpy(d_dy, dyx.data(), (size_t)n_out * sizeof(X), cudaMemcpyHostToDevice);
    cudaMemset(d_g2, 0xFF, (size_t)n_qkv * sizeof(X));
    e1 = gpt2rt__cu_attention_backward_impl<X>(d_g1, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    e2 = gpt2rt__cu_attention_backward_impl<X>(d_g2, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_WGMMA, NULL, TH);
    e3 = cudaMemcpy(g1.data(), d_g1, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(g2.data(), d_g2, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
    same = !memcmp(g1.data(), g2.data(), (size_t)n_qkv * sizeof(X));
    const double rt = sizeof(X) == 2 && tol < 4.0 / 256.0 * fmax(mo, 1e-30) ? 5e-3 : 3e-2;
    double worst = 0;
    for (int part = 0; part < 3; part++) {
        double e = 0, m = 0;
        for (int64_t r = 0; r < (int64_t)B * T; r++)
            for (int c = 0; c < C; c++) {
                size_t i = (size_t)(r * 3 * C + part * C + c);
                e = fmax(e, fabs((double)gpt2rt__cu_f(g2[i]) - dqkv_ref[i]));
                m = fmax(m, fabs((double)dqkv_ref[i]));
            }
        worst = fmax(worst, e / fmax(m, 1e-30));
    }
    check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && same && worst <= rt,
          "op attention backward %s: wgmma dQ,dK,dV == mma.sync bitwise %d; vs CPU: worst part max err / max %.2e (bound %.0e)",
          what, same, worst, rt);
    cudaFree(d_dy); cudaFree(d_g1); cudaFree(d_g2); cudaFree(d_D);
    cudaFree(d_qkv); cudaFree(d_o1); cudaFree(d_o2); cudaFree(d_l1); cudaFree(d_l2);
}

/* The mma.sync forward and dQ pass over RT = 2 query tiles per CTA (gpt2rt__cuk_attn_fwd64_rt,
   gpt2rt__cuk_attn_bwd_dq64_rt) against the one-tile kernels (GPT2RT__CU_ATT_MMA) on the same
   problem: out, lse and dQ the same bits. */
template <typename X>
static void op_attention_rt(int B, int T, int C, int NH, int TH, const char *what) {
    gpt2rt_emu::set_problem(what);
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    std::vector<float> q = floats(n_qkv, (uint64_t)(T * 5 + C));
    std::vector<X> hx((size_t)n_qkv);
    for (int64_t i = 0; i < n_qkv; i++) hx[(size_t)i] = gpt2rt__cu_to<X>(1.5f * q[(size_t)i]);
    X *d_qkv, *d_o1, *d_o2;
    float *d_l1, *d_l2;
    cudaMalloc(&d_qkv, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_o1, (size_t)n_out * sizeof(X)); cudaMalloc(&d_o2, (size_t)n_out * sizeof(X));
    cudaMalloc(&d_l1, (size_t)n_lse * 4); cudaMalloc(&d_l2, (size_t)n_lse * 4);
    cudaMemcpy(d_qkv, hx.data(), (size_t)n_qkv * sizeof(X), cudaMemcpyHostToDevice);
    cudaError_t e1 = gpt2rt__cu_attention_forward_impl<X>(d_o1, d_l1, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    cudaError_t e2 = gpt2rt__cu_attn_fwd_rt_launch<X, 2>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, TH ? TH : T);
    std::vector<X> o1((size_t)n_out), o2((size_t)n_out);
    std::vector<float> l1((size_t)n_lse), l2((size_t)n_lse);
    cudaError_t e3 = cudaMemcpy(o1.data(), d_o1, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(o2.data(), d_o2, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(l1.data(), d_l1, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(l2.data(), d_l2, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
    size_t bad_o = 0, bad_l = 0;
    for (int64_t i = 0; i < n_out; i++) bad_o += memcmp(&o1[(size_t)i], &o2[(size_t)i], sizeof(X)) != 0;
    for (int64_t i = 0; i < n_lse; i++) bad_l += memcmp(&l1[(size_t)i], &l2[(size_t)i], 4) != 0;
    check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && bad_o == 0 && bad_l == 0,
          "op attention forward %s: 2 query tiles per CTA == 1 bitwise (%zu of %lld outputs, %zu of %lld lse differ)",
          what, bad_o, (long long)n_out, bad_l, (long long)n_lse);

    /* the dQ pass over 2 query tiles per CTA: dqkv from the one-tile backward with its q columns
       poisoned (0xff: NaN), then the q columns written by the new pass: the same bits */
    std::vector<float> dy = floats(n_out, (uint64_t)(T * 13 + C));
    std::vector<X> dyx((size_t)n_out), g1((size_t)n_qkv), g2((size_t)n_qkv);
    for (int64_t i = 0; i < n_out; i++) dyx[(size_t)i] = gpt2rt__cu_to<X>(dy[(size_t)i]);
    X *d_dy, *d_g1, *d_g2;
    float *d_D;
    cudaMalloc(&d_dy, (size_t)n_out * sizeof(X)); cudaMalloc(&d_g1, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_g2, (size_t)n_qkv * sizeof(X));
    cudaMalloc(&d_D, (size_t)n_lse * 4);
    cudaMemcpy(d_dy, dyx.data(), (size_t)n_out * sizeof(X), cudaMemcpyHostToDevice);
    e1 = gpt2rt__cu_attention_backward_impl<X>(d_g1, d_dy, d_qkv, d_o1, d_l1, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    e3 = cudaMemcpy(g1.data(), d_g1, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
    g2 = g1;
    for (int64_t r = 0; r < (int64_t)B * T; r++) memset(&g2[(size_t)(r * 3 * C)], 0xff, (size_t)C * sizeof(X));
    cudaMemcpy(d_g2, g2.data(), (size_t)n_qkv * sizeof(X), cudaMemcpyHostToDevice);
    e2 = gpt2rt__cu_attn_bwd_dq_rt_launch<X, 2>(d_g2, d_dy, d_qkv, d_l1, d_D, B, T, C, NH, 0, TH ? TH : T);
    cudaMemcpy(g2.data(), d_g2, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
    size_t bad_g = 0;
    for (int64_t i = 0; i < n_qkv; i++) bad_g += memcmp(&g1[(size_t)i], &g2[(size_t)i], sizeof(X)) != 0;
    check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && bad_g == 0,
          "op attention backward %s: dQ over 2 query tiles per CTA == 1 bitwise (%zu of %lld differ)", what, bad_g,
          (long long)n_qkv);
    cudaFree(d_dy); cudaFree(d_g1); cudaFree(d_g2); cudaFree(d_D);
    cudaFree(d_qkv); cudaFree(d_o1); cudaFree(d_o2); cudaFree(d_l1); cudaFree(d_l2);
}

/* The launchers' choice among the tensor-core variants (allow GPT2RT__CU_ATT_BEST): (a) the
   pick is a variant that runs here, (b) its forward and backward are the same bits as each
   variant forced by its allow bit, (c) a second call with the same key times nothing (the
   measures counter) and another T times again, (d) while the stream is being captured
   nothing is timed or remembered. The emulator's events read the host's clock, so which
   variant wins here means nothing: no check depends on it. */
template <typename X> static void op_attention_pick(const char *what) {
    gpt2rt_emu::set_problem(what);
    typedef gpt2rt__cu_attn_fast16<X> F;
    const int B = 1, C = 128, NH = 2, Tmax = 130, Ts[3] = {130, 65, 64}; /* 64: only under capture */
    const int64_t n_qkv = (int64_t)B * Tmax * 3 * C, n_out = (int64_t)B * Tmax * C, n_lse = (int64_t)B * NH * Tmax;
    std::vector<float> q = floats(n_qkv, 31), dy = floats(n_out, 37);
    std::vector<X> hq((size_t)n_qkv), hdy((size_t)n_out);
    for (size_t i = 0; i < hq.size(); i++) hq[i] = gpt2rt__cu_to<X>(1.5f * q[i]);
    for (size_t i = 0; i < hdy.size(); i++) hdy[i] = gpt2rt__cu_to<X>(dy[i]);
    X *d_qkv, *d_dy, *d_o, *d_g;
    float *d_l, *d_D;
    cudaMalloc(&d_qkv, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_dy, (size_t)n_out * sizeof(X));
    cudaMalloc(&d_o, (size_t)n_out * sizeof(X)); cudaMalloc(&d_g, (size_t)n_qkv * sizeof(X));
    cudaMalloc(&d_l, (size_t)n_lse * 4); cudaMalloc(&d_D, (size_t)n_lse * 4);
    cudaMemcpy(d_qkv, hq.data(), hq.size() * sizeof(X), cudaMemcpyHostToDevice);
    cudaMemcpy(d_dy, hdy.data(), hdy.size() * sizeof(X), cudaMemcpyHostToDevice);
    /* forward then backward at T with allow; the outputs (out, lse, dqkv) as bytes, set to
       0xFF first so a part a variant leaves unwritten shows */
    auto both = [&](int T, int allow, std::vector<unsigned char> &bytes) {
        const size_t no = (size_t)B * T * C * sizeof(X), nl = (size_t)B * NH * T * 4, ng = 3 * no;
        cudaMemset(d_o, 0xFF, no); cudaMemset(d_l, 0xFF, nl); cudaMemset(d_g, 0xFF, ng);
        cudaError_t e = gpt2rt__cu_attention_forward_impl<X>(d_o, d_l, d_qkv, B, T, C, NH, 0, allow);
        if (e == cudaSuccess) e = gpt2rt__cu_attention_backward_impl<X>(d_g, d_dy, d_qkv, d_o, d_l, d_D, B, T, C, NH, 0, allow);
        bytes.assign(no + nl + ng, 0);
        cudaMemcpy(bytes.data(), d_o, no, cudaMemcpyDeviceToHost);
        cudaMemcpy(bytes.data() + no, d_l, nl, cudaMemcpyDeviceToHost);
        if (cudaMemcpy(bytes.data() + no + nl, d_g, ng, cudaMemcpyDeviceToHost) != cudaSuccess) e = cudaErrorUnknown;
        return e;
    };
    long m0 = 0, m1 = 0, m2 = 0, m3 = 0, m4 = 0;
    gpt2rt__cu_attn_picked pd[3]; /* forward, dK,dV, dQ */
    std::vector<unsigned char> got, forced;
    gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[0], 0, NULL, &m0);
    cudaError_t e = both(Ts[0], GPT2RT__CU_ATT_BEST, got);
    int have = gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[0], 0, &pd[0], &m1) &&
               gpt2rt__cu_attn_pick_info<X>(1, B * NH, Ts[0], 0, &pd[1], NULL) &&
               gpt2rt__cu_attn_pick_info<X>(2, B * NH, Ts[0], 0, &pd[2], NULL);
    int nd[3];
    const gpt2rt__cu_attn_variant<typename F::fwd_fn> *vf = F::forwards(&nd[0]);
    const gpt2rt__cu_attn_variant<typename F::bwd_fn> *vk = F::dkdvs(&nd[1]), *vq = F::dqs(&nd[2]);
    int sane = have;
    for (int d = 0; d < 3 && have; d++) {
        const int v = pd[d].variant;
        sane = sane && v >= 0 && v < nd[d] && pd[d].ms[v] >= 0 && (d == 0 ? vf[v].ok() : d == 1 ? vk[v].ok() : vq[v].ok());
    }
    check(e == cudaSuccess && sane && m1 == m0 + 3,
          "op attention pick %s: forward picked %s, dK,dV %s, dQ %s, each a variant that runs here and was timed; "
          "3 keys timed (%ld)", what, have ? pd[0].name[pd[0].variant] : "-", have ? pd[1].name[pd[1].variant] : "-",
          have ? pd[2].name[pd[2].variant] : "-", m1 - m0);
    int n = std::max(nd[0], std::max(nd[1], nd[2]));
    for (int i = 0; i < n; i++) {
        if (!(i < nd[0] && vf[i].ok()) && !(i < nd[1] && vk[i].ok()) && !(i < nd[2] && vq[i].ok())) continue;
        e = both(Ts[0], 1 << i, forced);
        int eq = e == cudaSuccess && forced == got;
        check(eq, "op attention pick %s: the automatic pick's out, lse and dqkv == variant %d forced (%s, %s, %s), bitwise",
              what, i, i < nd[0] ? vf[i].name : "-", i < nd[1] ? vk[i].name : "-", i < nd[2] ? vq[i].name : "-");
    }
    gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[0], 0, NULL, &m2);
    e = both(Ts[0], GPT2RT__CU_ATT_BEST, forced);
    gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[0], 0, NULL, &m3);
    cudaError_t e2 = both(Ts[1], GPT2RT__CU_ATT_BEST, forced);
    gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[1], 0, NULL, &m4);
    check(e == cudaSuccess && e2 == cudaSuccess && m2 == m1 && m3 == m2 && m4 == m3 + 3,
          "op attention pick %s: forced variants time nothing (%ld), the same key again nothing (%ld), T %d again "
          "forward, dK,dV and dQ (%ld)", what, m2 - m1, m3 - m2, Ts[1], m4 - m3);
    /* (d) the emulator has no graphs; gpt2rt_emu::capturing makes cudaStreamIsCapturing say
       the stream is being captured: a known key keeps its pick, a new one runs entry 0 */
    gpt2rt_emu::capturing = 1;
    e = both(Ts[0], GPT2RT__CU_ATT_BEST, forced);
    e2 = both(Ts[2], GPT2RT__CU_ATT_BEST, got);
    gpt2rt_emu::capturing = 0;
    long m5 = 0;
    int kept = gpt2rt__cu_attn_pick_info<X>(0, B * NH, Ts[2], 0, NULL, &m5) || gpt2rt__cu_attn_pick_info<X>(1, B * NH, Ts[2], 0, NULL, NULL) ||
               gpt2rt__cu_attn_pick_info<X>(2, B * NH, Ts[2], 0, NULL, NULL);
    std::vector<unsigned char> first;
    cudaError_t e3 = both(Ts[2], GPT2RT__CU_ATT_MMA, first);
    check(e == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && m5 == m4 && !kept && got == first,
          "op attention pick %s: under (simulated) stream capture nothing timed (%ld) nor remembered (%d), "
          "a new key runs mma.sync (same bytes %d)", what, m5 - m4, kept, got == first);
    cudaFree(d_qkv); cudaFree(d_dy); cudaFree(d_o); cudaFree(d_g); cudaFree(d_l); cudaFree(d_D);
}

/* The pipelined Hopper backward (gpt2rt__cu_attn_bwd_wgp_launch_n: dK,dV with 2 warpgroups
   per CTA, dQ with 2 and with 3) against the mma.sync backward on the same forward: dQ, dK and dV the same bits (both
   of the emulator's models sum each product in increasing k, and the tiles in the same
   order). TH: the placeholder mask's history, 0 causal. */
template <typename X>
static void op_attention_wgp(int B, int T, int C, int NH, int TH, const char *what) {
    gpt2rt_emu::set_problem(what);
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    std::vector<float> q = floats(n_qkv, (uint64_t)(T * 5 + C)), dy = floats(n_out, (uint64_t)(T * 13 + C));
    std::vector<X> hx((size_t)n_qkv), dyx((size_t)n_out), g1((size_t)n_qkv), g2((size_t)n_qkv);
    for (int64_t i = 0; i < n_qkv; i++) hx[(size_t)i] = gpt2rt__cu_to<X>(1.5f * q[(size_t)i]);
    for (int64_t i = 0; i < n_out; i++) dyx[(size_t)i] = gpt2rt__cu_to<X>(dy[(size_t)i]);
    X *d_qkv, *d_o, *d_dy, *d_g1, *d_g2;
    float *d_l, *d_D;
    cudaMalloc(&d_qkv, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_o, (size_t)n_out * sizeof(X)); cudaMalloc(&d_dy, (size_t)n_out * sizeof(X));
    cudaMalloc(&d_g1, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_g2, (size_t)n_qkv * sizeof(X));
    cudaMalloc(&d_l, (size_t)n_lse * 4); cudaMalloc(&d_D, (size_t)n_lse * 4);
    cudaMemcpy(d_qkv, hx.data(), (size_t)n_qkv * sizeof(X), cudaMemcpyHostToDevice);
    cudaMemcpy(d_dy, dyx.data(), (size_t)n_out * sizeof(X), cudaMemcpyHostToDevice);
    cudaError_t e = gpt2rt__cu_attention_forward_impl<X>(d_o, d_l, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    /* the mma.sync backward also leaves D = rowsum(dy * out) in d_D */
    cudaError_t e1 = gpt2rt__cu_attention_backward_impl<X>(d_g1, d_dy, d_qkv, d_o, d_l, d_D, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    cudaMemcpy(g1.data(), d_g1, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
    int same[2] = {0, 0};
    cudaError_t e2[2];
    for (int v = 0; v < 2; v++) {
        cudaMemset(d_g2, 0xFF, (size_t)n_qkv * sizeof(X));
        e2[v] = v == 0 ? gpt2rt__cu_attn_bwd_wgp_launch_n<X, 2>(d_g2, d_dy, d_qkv, d_l, d_D, B, T, C, NH, 0, TH ? TH : T)
                       : gpt2rt__cu_attn_bwd_wgp_launch_n<X, 3>(d_g2, d_dy, d_qkv, d_l, d_D, B, T, C, NH, 0, TH ? TH : T);
        cudaMemcpy(g2.data(), d_g2, (size_t)n_qkv * sizeof(X), cudaMemcpyDeviceToHost);
        same[v] = !memcmp(g1.data(), g2.data(), (size_t)n_qkv * sizeof(X));
    }
    check(e == cudaSuccess && e1 == cudaSuccess && e2[0] == cudaSuccess && e2[1] == cudaSuccess && same[0] && same[1],
          "op attention backward %s: pipelined wgmma dQ,dK,dV == mma.sync bitwise: dQ with 2 warpgroups per CTA %d, with 3 %d",
          what, same[0], same[1]);
    cudaFree(d_qkv); cudaFree(d_o); cudaFree(d_dy); cudaFree(d_g1); cudaFree(d_g2); cudaFree(d_l); cudaFree(d_D);
}

/* The pipelined Hopper forward (gpt2rt__cuk_attn_fwd64_wgp, each variant the lab times)
   against the mma.sync forward on the same problem: out and lse the same bits (both models
   sum in increasing k; the kernel keeps mma.sync's order of softmax steps). T past one key
   ring (STAGES = 4 tiles) reuses its slots; TH < T: the placeholder mask. */
template <typename X>
static void op_attention_fwd_wgp(int B, int T, int C, int NH, int TH, const char *what) {
    gpt2rt_emu::set_problem(what);
    const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C, n_lse = (int64_t)B * NH * T;
    std::vector<float> q = floats(n_qkv, (uint64_t)(T * 5 + C));
    std::vector<X> hx((size_t)n_qkv);
    for (int64_t i = 0; i < n_qkv; i++) hx[(size_t)i] = gpt2rt__cu_to<X>(1.5f * q[(size_t)i]);
    X *d_qkv, *d_o1, *d_o2;
    float *d_l1, *d_l2;
    cudaMalloc(&d_qkv, (size_t)n_qkv * sizeof(X)); cudaMalloc(&d_o1, (size_t)n_out * sizeof(X)); cudaMalloc(&d_o2, (size_t)n_out * sizeof(X));
    cudaMalloc(&d_l1, (size_t)n_lse * 4); cudaMalloc(&d_l2, (size_t)n_lse * 4);
    cudaMemcpy(d_qkv, hx.data(), (size_t)n_qkv * sizeof(X), cudaMemcpyHostToDevice);
    cudaError_t e1 = gpt2rt__cu_attention_forward_impl<X>(d_o1, d_l1, d_qkv, B, T, C, NH, 0, GPT2RT__CU_ATT_MMA, NULL, TH);
    std::vector<X> o1((size_t)n_out), o2((size_t)n_out);
    std::vector<float> l1((size_t)n_lse), l2((size_t)n_lse);
    cudaMemcpy(o1.data(), d_o1, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
    cudaMemcpy(l1.data(), d_l1, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
    const char *names[1] = {"NWG 2 keys 64"};
    for (int v = 0; v < 1; v++) {
        cudaMemset(d_o2, 0xFF, (size_t)n_out * sizeof(X)); cudaMemset(d_l2, 0xFF, (size_t)n_lse * 4);
        const int th = TH ? TH : T;
        cudaError_t e2 = gpt2rt__cu_attn_fwd_wgp_launch<X, 2, 1, 4>(d_o2, d_l2, d_qkv, B, T, C, NH, 0, th);
        cudaError_t e3 = cudaMemcpy(o2.data(), d_o2, (size_t)n_out * sizeof(X), cudaMemcpyDeviceToHost);
        cudaMemcpy(l2.data(), d_l2, (size_t)n_lse * 4, cudaMemcpyDeviceToHost);
        size_t diff_o = 0, diff_l = 0;
        for (int64_t i = 0; i < n_out; i++) diff_o += memcmp(&o1[(size_t)i], &o2[(size_t)i], sizeof(X)) != 0;
        for (int64_t i = 0; i < n_lse; i++) diff_l += memcmp(&l1[(size_t)i], &l2[(size_t)i], 4) != 0;
        check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && !diff_o && !diff_l,
              "op attention forward %s: pipelined wgmma (%s) == mma.sync bitwise: %zu of %lld out, %zu of %lld lse differ",
              what, names[v], diff_o, (long long)n_out, diff_l, (long long)n_lse);
    }
    cudaFree(d_qkv); cudaFree(d_o1); cudaFree(d_o2); cudaFree(d_l1); cudaFree(d_l2);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : "";
    gpt2rt_config c = base();
    if (!*only || !strcmp(only, "fp32")) {
        parity("fp32 C64 HS16", c, 1e-4, 1e-5, 3);
        gpt2rt_config o = c;
        o.n_embd = 20; o.n_head = 4; o.seq_len = 7; o.vocab_size = 53; o.batch_size = 3;
        parity("fp32 odd C20 HS5 T7 V53", o, 1e-4, 1e-5, 2);
        gpt2rt_config t1 = c;
        t1.seq_len = 1;
        parity("fp32 T=1", t1, 1e-4, 1e-5, 2);
        gpt2rt_config ga = c;
        ga.grad_accum = 2;
        ga.n_embd = 128; ga.seq_len = 8; /* 4C = 512: the bias-add kernel's grid takes 2 blocks */
        parity("fp32 grad_accum 2", ga, 1e-4, 1e-5, 2);
        gpt2rt_config fr = c;
        fr.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
        parity("fp32 frozen attention+MLP", fr, 1e-4, 1e-5, 2);
        frozen_unchanged(c);
        gpt2rt_config dr = c;
        dr.dropout = 0.1f; dr.attn_dropout = 0.1f;
        parity("fp32 dropout 0.1 (residual, embeddings, attention)", dr, 1e-4, 1e-5, 2);
        recompute(c, "fp32");
        resume(c);
    }
    if (!*only || !strcmp(only, "half")) {
        gpt2rt_config b = c;
        b.precision = GPT2RT_PRECISION_BF16;
        parity("bf16 C64 HS16", b, 5e-2, 1e-2, 3);
        gpt2rt_config f = c;
        f.precision = GPT2RT_PRECISION_FP16;
        parity("fp16 C64 HS16", f, 1.5e-2, 3e-3, 3);
        gpt2rt_config h = c;
        h.n_embd = 128; h.n_head = 2; h.seq_len = 33; h.batch_size = 1; h.n_layer = 1; h.max_seq_len = 128;
        h.precision = GPT2RT_PRECISION_BF16;
        parity("bf16 C128 HS64 T33 (tensor-core attention)", h, 5e-2, 1e-2, 2);
        h.precision = GPT2RT_PRECISION_FP16;
        h.seq_len = 65; h.batch_size = 2;
        parity("fp16 C128 HS64 B2 T65 (tensor-core attention, 2 tiles)", h, 1.5e-2, 3e-3, 2);
        h.precision = GPT2RT_PRECISION_BF16;
        h.seq_len = 130; h.batch_size = 1; h.max_seq_len = 192;
        parity("bf16 C128 HS64 T130 (tensor-core attention, 3 tiles: the K/V double buffer refilled)", h, 5e-2, 1e-2, 1);
        h.max_seq_len = 128;
        h.seq_len = 33; h.batch_size = 1;
        h.precision = GPT2RT_PRECISION_BF16;
        recompute(h, "bf16 HS64");
        fp16_overflow(c);
        b.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
        resume(b);
    }
    if (!*only || !strcmp(only, "series")) {
        gpt2rt_config s = c;
        s.input = GPT2RT_INPUT_PATCHES; s.head = GPT2RT_HEAD_REGRESSION;
        s.seq_len = 32; s.patch_len = 8; s.patch_stride = 4; s.n_channels = 2; s.horizon = 8; s.revin_affine = 1;
        parity("fp32 patch input + regression head (RevIN affine)", s, 1e-4, 1e-5, 2);
        s.precision = GPT2RT_PRECISION_BF16;
        gpt2rt_config s32 = s;
        s32.precision = GPT2RT_PRECISION_FP32;
        parity("bf16 patch input + regression head", s, 5e-2, 1e-2, 2, &s32);
        gpt2rt_config s2 = s32;
        s2.seq_len = 27; s2.patch_len = 6; s2.patch_stride = 3; s2.n_channels = 3; s2.horizon = 5; s2.batch_size = 3;
        s2.n_embd = 20; s2.dropout = 0.1f;
        parity("fp32 patch input, odd shapes (L27 P6 S3 M3 H5 C20), dropout", s2, 1e-4, 1e-5, 2);
    }
    if (!*only || !strcmp(only, "allm4ts")) {
        /* aLLM4TS's heads and masks, tolerances as above: stage 1 (NEXT_PATCH, causal:
           L64 P8 S8, T = 8) and stage 2 (PATCH_DECODE: L32 P8 S4, 8 history patches + 3 placeholders,
           the last one cut at horizon 20), under PLACEHOLDERS and CAUSAL, fp32 and bf16 */
        gpt2rt_config a = c;
        a.input = GPT2RT_INPUT_PATCHES; a.head = GPT2RT_HEAD_NEXT_PATCH;
        a.seq_len = 64; a.patch_len = 8; a.patch_stride = 8; a.n_channels = 2;
        parity("fp32 aLLM4TS NEXT_PATCH (causal)", a, 1e-4, 1e-5, 3);
        allm4ts_twice_and_mask(a, 2);
        gpt2rt_config a16 = a, a32 = a;
        a16.precision = GPT2RT_PRECISION_BF16;
        parity("bf16 aLLM4TS NEXT_PATCH (causal)", a16, 5e-2, 1e-2, 2, &a32);
        gpt2rt_config p = a;
        p.head = GPT2RT_HEAD_PATCH_DECODE; p.attn_mask = GPT2RT_MASK_PLACEHOLDERS;
        p.seq_len = 32; p.patch_stride = 4; p.horizon = 20; p.revin_affine = 1;
        parity("fp32 aLLM4TS PATCH_DECODE, PLACEHOLDERS mask, RevIN affine", p, 1e-4, 1e-5, 3);
        allm4ts_twice_and_mask(p, 2);
        gpt2rt_config pc = p;
        pc.attn_mask = GPT2RT_MASK_CAUSAL; pc.n_embd = 20; pc.n_channels = 3; pc.horizon = 13; pc.batch_size = 3;
        parity("fp32 aLLM4TS PATCH_DECODE, causal mask, odd C20 M3 H13", pc, 1e-4, 1e-5, 2);
        gpt2rt_config p16 = p, p32 = p;
        p16.precision = GPT2RT_PRECISION_BF16;
        parity("bf16 aLLM4TS PATCH_DECODE, PLACEHOLDERS mask", p16, 5e-2, 1e-2, 2, &p32);
        /* the tensor-core attention (HS 64, bf16) with the placeholder mask across two tiles:
           L400 P8 S8, 51 history patches + 20 placeholders = 71 positions */
        gpt2rt_config t = p16;
        t.n_embd = 128; t.n_head = 2; t.n_layer = 1; t.batch_size = 1; t.n_channels = 1; t.max_seq_len = 128;
        t.seq_len = 400; t.patch_stride = 8; t.horizon = 160;
        gpt2rt_config t32 = t;
        t32.precision = GPT2RT_PRECISION_FP32;
        parity("bf16 aLLM4TS PATCH_DECODE, PLACEHOLDERS, C128 HS64 T71 (tensor-core attention, 2 tiles)", t, 5e-2, 1e-2, 1, &t32);
        gpt2rt_config fc = c;
        fc.input = GPT2RT_INPUT_PATCHES; fc.head = GPT2RT_HEAD_REGRESSION;
        fc.seq_len = 24; fc.patch_len = 4; fc.patch_stride = 4; fc.horizon = 6; fc.n_channels = 2;
        forecaster_round_trip(fc);
    }
    if (!*only || !strcmp(only, "chunk")) {
        /* classifier_chunk: BT = 32 in chunks of 7 (the last of 4) and of 16; against the CPU's
           chunked path at parity's tolerances; under data parallel (2 ranks) */
        chunk_vs_whole(c, 7);
        gpt2rt_config b = c;
        b.precision = GPT2RT_PRECISION_BF16;
        chunk_vs_whole(b, 16);
        gpt2rt_config k = c;
        k.classifier_chunk = 7;
        parity("fp32 classifier_chunk 7", k, 1e-4, 1e-5, 2);
        k.parallel = GPT2RT_PARALLEL_DATA; k.n_devices = 2;
        parity("fp32 classifier_chunk 7, data parallel over 2 ranks", k, 1e-4, 1e-5, 2);
    }
    if (!*only || !strcmp(only, "parallel")) {
        gpt2rt_config p = c;
        p.vocab_size = 95; /* 95 * 64 wte floats: the shards of ZeRO-1 are unequal */
        data_parallel(p);
        data_parallel_free_mid_step(p);
        p.precision = GPT2RT_PRECISION_BF16;
        p.n_embd = 20; p.seq_len = 7;
        data_parallel(p);
        layer_split(c);
    }
    if (!*only || !strcmp(only, "ops")) {
        /* the Hopper forward: 3 query tiles (its second CTA's second warpgroup has no rows),
           and fp16 with the placeholder mask (history 40 of 65) */
        op_attention<__nv_bfloat16>(2, 130, 128, 2, 0, "bf16 B2 T130 C128 HS64");
        op_attention<__half>(1, 65, 64, 1, 40, "fp16 B1 T65 C64 HS64 placeholders TH40");
        /* 2 query tiles per CTA: T 130 ends in a CTA whose second tile has no rows, T 65 in one
           whose second tile holds one row; the placeholder mask */
        op_attention_rt<__nv_bfloat16>(2, 130, 128, 2, 0, "bf16 B2 T130 C128 HS64");
        op_attention_rt<__half>(1, 65, 64, 1, 40, "fp16 B1 T65 C64 HS64 placeholders TH40");
        op_attention_pick<__nv_bfloat16>("bf16 B1 C128 HS64 T130, 65, 64");
        op_attention_pick<__half>("fp16 B1 C128 HS64 T130, 65, 64");
        /* the pipelined backward: 3 tiles (the ring wraps; with 2 warpgroups per CTA the second
           CTA's second warpgroup has no keys), 2 tiles with the placeholder mask */
        op_attention_wgp<__nv_bfloat16>(2, 130, 128, 2, 0, "bf16 B2 T130 C128 HS64");
        op_attention_wgp<__half>(2, 130, 128, 2, 0, "fp16 B2 T130 C128 HS64");
        op_attention_wgp<__nv_bfloat16>(1, 65, 64, 1, 40, "bf16 B1 T65 C64 HS64 placeholders TH40");
        op_attention_wgp<__half>(1, 65, 64, 1, 40, "fp16 B1 T65 C64 HS64 placeholders TH40");
        op_attention_fwd_wgp<__nv_bfloat16>(2, 130, 128, 2, 0, "bf16 B2 T130 C128 HS64");
        op_attention_fwd_wgp<__half>(1, 65, 64, 1, 40, "fp16 B1 T65 C64 HS64 placeholders TH40");
        op_attention_fwd_wgp<__nv_bfloat16>(1, 600, 64, 1, 0, "bf16 B1 T600 C64 HS64");
        op_attention_fwd_wgp<__half>(1, 333, 64, 1, 200, "fp16 B1 T333 C64 HS64 placeholders TH200");
        op_bias_backward(128, 64, 1u << 20);
        op_bias_backward(37, 13, 1u << 20);
        op_bias_backward(1000, 24, 4 * 24 * 5); /* 5 partials at most: 200 rows each */
        op_encoder_buckets(1, 1, 1);
        op_encoder_buckets(300, 200, 2);      /* one pass */
        op_encoder_buckets(4096, 50304, 3);   /* two passes: GPT-2's padded vocabulary */
        op_encoder_buckets(777, 70000, 4);    /* three passes */
        op_cast(4096);
        op_cast(37);
        op_nonfinite(4096);
        op_nonfinite(37);
        op_matmul_gelu(16, 32, 64);
        op_matmul_gelu(9, 13, 21); /* OC % 8 != 0: unfused */
        op_matmul_dgelu(16, 64, 32);
        op_matmul_bgrad(16, 24, 40, GPT2RT__CU_MM_FUSE_ALL);
        op_matmul_bgrad(37, 8, 300, GPT2RT__CU_MM_FUSE_ALL);
        op_matmul_bgrad(37, 8, 300, GPT2RT__CU_MM_FUSE_DEFAULT);
        setenv("EMU_BLAS_NO_EPILOGUE", "GELU_AUX_BIAS,DGELU", 1);
        op_matmul_gelu(16, 32, 64);
        op_matmul_dgelu(16, 64, 32);
        op_matmul_dgelu(300, 24, 8); /* 300 x 24 elements: the dGELU kernel's grid takes several blocks */
        unsetenv("EMU_BLAS_NO_EPILOGUE");
    }
    if (!*only || !strcmp(only, "fallback")) {
        /* a cuBLASLt without the fused epilogues: the header's GELU, dGELU and column-sum kernels */
        setenv("EMU_BLAS_NO_EPILOGUE", "GELU_AUX,GELU_AUX_BIAS,DGELU,BGRADB", 1);
        gpt2rt_config fa = c;
        fa.grad_accum = 2;
        fa.n_embd = 128; fa.seq_len = 8; /* 4C = 512 columns: the bias kernels' grids take 2 blocks */
        parity("fp32 accumulation without cuBLASLt's GELU/DGELU/BGRADB epilogues", fa, 1e-4, 1e-5, 2);
        gpt2rt_config o = c;
        o.n_embd = 20; o.seq_len = 7; o.vocab_size = 53; o.batch_size = 3; o.grad_accum = 2;
        o.precision = GPT2RT_PRECISION_BF16;
        o.dropout = 0.1f;
        parity("bf16 odd C20 T7, accumulation and dropout, without the fused epilogues", o, 5e-2, 1e-2, 2);
        unsetenv("EMU_BLAS_NO_EPILOGUE");
    }
    if (!*only || !strcmp(only, "generate")) {
        /* generation at two shapes (the decode kernels at two launch shapes): C64 HS16 with
           three rows of unequal prompts, and odd C20 HS5 V53 with two */
        gpt2rt_config g = c;
        g.kv_batch = 3; g.kv_len = 24;
        int64_t l3[3] = {5, 1, 9};
        generation("C64 HS16 B3", g, l3, 3, 8);
        gpt2rt_config o = c;
        o.n_embd = 20; o.n_head = 4; o.vocab_size = 53; o.max_seq_len = 32; o.kv_batch = 2; o.kv_len = 20;
        int64_t l2[2] = {7, 3};
        generation("odd C20 HS5 V53 B2", o, l2, 2, 9);
        inference(c);
    }
    printf("drive: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
