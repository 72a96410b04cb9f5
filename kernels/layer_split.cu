/* kernels/layer_split.cu - lab of the CUDA layer split (gpt2rt.h, 10.2 Layer split):
   two stages as two virtual devices on GPU 0 (device_ids 0, 0 with
   allow_shared_device, the test mode), against one device, through the public API.
     nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
         -o build/lab_layer_split kernels/layer_split.cu -lcublasLt      (make gpu-build does it)
     build/lab_layer_split          every check; exit 0 all pass, 1 a failure, 77 no CUDA device
   Checks, for fp32 and bf16, grad_accum 1 and 4, recompute none / selective / full
   (checkpoint_every 2), the planner's stages and given ones (stage_first_layer):
     - 3 gpt2rt_step calls: the loss of every step bitwise that of one device with the same
       config, the gradient norm within one float (the stages' partial sums add in another order);
     - then every parameter's weights and Adam moments (gpt2rt_param_read) bitwise equal;
     - planned == allocated: each device's arenas are gpt2rt_plan's for its stage, to the
       byte and per category (the plan counts the activations of every micro-batch GPipe
       keeps in flight);
   and once: a frozen wte (no tied-gradient hand-off), fp16, a bad token in a later
   micro-batch refused with nothing changed, the calls not run yet (gpt2rt_forward)
   answering NOT_IMPLEMENTED. The model: L = 6, C = 64 (so in bf16 the layers' tensors are
   off the 256-byte alignment and a stage's table needs its gaps), NH = 4, V = 500. */
/* as kernels/train_step.cu: g++ 12's false -Wmaybe-uninitialized in its AVX-512 headers */
#define GPT2RT_SGEMM_NO_SIMD
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

static int n_checks = 0;

static void check(const char *what, int ok) {
    n_checks++;
    if (!ok) lab_failures++;
    printf("  %-100s %s\n", what, ok ? "PASS" : "FAIL");
}

static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *x = NULL;
    if (gpt2rt_create(&x, c) != GPT2RT_OK) {
        printf("create: %s: FAIL\n", gpt2rt_last_error(x));
        exit(1);
    }
    return x;
}

static gpt2rt_config base(gpt2rt_precision p, int accum, gpt2rt_recompute rc) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 6; c.n_head = 4; c.n_embd = 64; c.vocab_size = 500; c.max_seq_len = 64;
    c.batch_size = 4; c.seq_len = 32; c.grad_accum = accum;
    c.backend = GPT2RT_BACKEND_CUDA; c.precision = p;
    c.recompute = rc; c.checkpoint_every = rc == GPT2RT_RECOMPUTE_FULL ? 2 : 0;
    c.lr = 1e-3f; c.warmup_steps = 1; c.weight_decay = 0.1f; c.grad_clip = 0.5f; /* clipping active */
    c.seed = 7;
    return c;
}

static gpt2rt_config split(gpt2rt_config c, int first1) {
    c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    c.n_devices = 2;
    c.device_ids[0] = c.device_ids[1] = 0;
    c.allow_shared_device = 1;
    c.stage_first_layer[1] = first1;
    return c;
}

/* rows of tokens; every 7th target ignored */
static void tokens(int rows, int T, int V, uint64_t seed, int32_t *x, int32_t *y) {
    lab_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < rows * T; i++) {
        x[i] = (int32_t)((lab_uniform() + 1.0f) * 0.5f * (float)V) % V;
        y[i] = i % 7 == 3 ? -1 : (int32_t)((lab_uniform() + 1.0f) * 0.5f * (float)V) % V;
    }
}

/* every parameter's what, bitwise the same in a and b */
static int same_params(gpt2rt_ctx *a, gpt2rt_ctx *b, gpt2rt_param_what what) {
    int same = 1;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        if (gpt2rt_param_info_get(a, i, &in) != GPT2RT_OK) return 0;
        if (what != GPT2RT_PARAM_VALUE && (in.group & gpt2rt_config_get(a).frozen)) continue;
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        if (gpt2rt_param_read(a, in.name, what, x, in.numel) != GPT2RT_OK ||
            gpt2rt_param_read(b, in.name, what, y, in.numel) != GPT2RT_OK) {
            printf("    param_read %s: %s / %s\n", in.name, gpt2rt_last_error(a), gpt2rt_last_error(b));
            same = 0;
        } else if (memcmp(x, y, (size_t)in.numel * 4)) {
            if (same) printf("    first difference: %s (what %d)\n", in.name, (int)what);
            same = 0;
        }
        free(x); free(y);
    }
    return same;
}

/* planned == allocated per device and category: gpt2rt_plan counts grad_accum activation sets */
static int planned_allocated(gpt2rt_ctx *x, const gpt2rt_config *c) {
    gpt2rt_memory_plan p, a;
    if (gpt2rt_plan(c, &p) != GPT2RT_OK || gpt2rt_plan_allocated(x, &a) != GPT2RT_OK || a.n_devices != 2) return 0;
    int ok = 1;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
            uint64_t want = p.bytes[s][i];
            if (a.bytes[s][i] != want) {
                printf("    device %d %s: allocated %llu, planned %llu\n", s, gpt2rt_mem_name((gpt2rt_mem)i),
                       (unsigned long long)a.bytes[s][i], (unsigned long long)want);
                ok = 0;
            }
        }
    return ok;
}

/* a and b at most one float apart. The gradient norm's squares are summed per stage and
   the stages' sums added after, where one device sums its partials in another order: fp32
   addition is not associative, so the same squares may round to adjacent floats. The clip
   (0.5, active here) then scales by clip/norm: a one-ulp norm would move the weights by
   about one ulp of each update, which the bitwise weights check below reports on its own */
static int within_ulp(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b; /* +0 and -0 */
    return ia - ib <= 1 && ib - ia <= 1;
}

/* one configuration: one device against the split, 3 steps */
static void compare(gpt2rt_config c1, int first1, const char *label) {
    gpt2rt_config cs = split(c1, first1);
    gpt2rt_ctx *one = make(&c1), *two = make(&cs);
    int rows = c1.batch_size * c1.grad_accum, T = c1.seq_len, same = 1;
    int32_t *x = (int32_t *)malloc((size_t)rows * T * 4), *y = (int32_t *)malloc((size_t)rows * T * 4);
    for (int step = 0; step < 3; step++) {
        gpt2rt_step_stats a, b;
        tokens(rows, T, c1.vocab_size, 100 + (uint64_t)step, x, y);
        if (gpt2rt_step(one, x, y, &a) != GPT2RT_OK || gpt2rt_step(two, x, y, &b) != GPT2RT_OK) {
            printf("    step %d: %s / %s\n", step, gpt2rt_last_error(one), gpt2rt_last_error(two));
            same = 0;
            break;
        }
        if (memcmp(&a.loss, &b.loss, 4) || !within_ulp(a.grad_norm, b.grad_norm) || a.skipped != b.skipped) {
            printf("    step %d: loss %.9g / %.9g, norm %.9g / %.9g\n", step, (double)a.loss, (double)b.loss,
                   (double)a.grad_norm, (double)b.grad_norm);
            same = 0;
        }
    }
    char what[200];
    gpt2rt_memory_plan p;
    gpt2rt_plan(&cs, &p);
    snprintf(what, sizeof what, "%s, stages %s [0,%lld) [%lld,6): losses (bitwise) and norms (1 ulp) of 3 steps", label,
             first1 ? "given" : "planned", (long long)gpt2rt__span_of(&p.config, 0).l1,
             (long long)gpt2rt__span_of(&p.config, 1).l0);
    check(what, same);
    snprintf(what, sizeof what, "%s, stages %s: weights, Adam m and v", label, first1 ? "given" : "planned");
    check(what, same_params(one, two, GPT2RT_PARAM_VALUE) && same_params(one, two, GPT2RT_PARAM_ADAM_M) &&
                same_params(one, two, GPT2RT_PARAM_ADAM_V));
    snprintf(what, sizeof what, "%s, stages %s: allocated == planned per device", label, first1 ? "given" : "planned");
    check(what, planned_allocated(two, &cs));
    free(x); free(y);
    gpt2rt_free(one);
    gpt2rt_free(two);
}

/* a bad token in micro-batch 2: refused before any stage runs, nothing changed; the
   calls a CUDA layer split does not run yet say so */
static void refusals(void) {
    gpt2rt_config c1 = base(GPT2RT_PRECISION_FP32, 4, GPT2RT_RECOMPUTE_NONE), cs = split(c1, 0);
    gpt2rt_ctx *one = make(&c1), *two = make(&cs);
    int rows = 16, T = 32;
    int32_t *x = (int32_t *)malloc((size_t)rows * T * 4), *y = (int32_t *)malloc((size_t)rows * T * 4);
    tokens(rows, T, 500, 9, x, y);
    x[2 * 4 * T + 5] = 500;
    check("a bad token in micro-batch 2: INVALID_ARGUMENT naming it",
          gpt2rt_step(two, x, y, NULL) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(two), "500"));
    x[2 * 4 * T + 5] = 1;
    gpt2rt_step_stats a, b;
    int ok = gpt2rt_step(one, x, y, &a) == GPT2RT_OK && gpt2rt_step(two, x, y, &b) == GPT2RT_OK &&
             !memcmp(&a.loss, &b.loss, 4) && within_ulp(a.grad_norm, b.grad_norm) && b.step == 1;
    check("then a step: bitwise one device's, step 1", ok && same_params(one, two, GPT2RT_PARAM_VALUE));
    float loss;
    check("gpt2rt_forward on a CUDA layer split: NOT_IMPLEMENTED, saying to use gpt2rt_step",
          gpt2rt_forward(two, x, y, &loss) == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(two), "gpt2rt_step"));
    free(x); free(y);
    gpt2rt_free(one);
    gpt2rt_free(two);
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("layer_split: SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; two layer-split stages on GPU 0 (device_ids 0, 0) against one device\n", prop.name);
    const gpt2rt_precision precs[2] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16};
    const gpt2rt_recompute rcs[3] = {GPT2RT_RECOMPUTE_NONE, GPT2RT_RECOMPUTE_SELECTIVE, GPT2RT_RECOMPUTE_FULL};
    const int accums[2] = {1, 4};
    const char *rc_names[3] = {"none", "selective", "full/2"};
    for (int pi = 0; pi < 2; pi++)
        for (int ai = 0; ai < 2; ai++)
            for (int ri = 0; ri < 3; ri++)
                for (int given = 0; given < 2; given++) {
                    char label[96];
                    snprintf(label, sizeof label, "%s accum %d recompute %s", pi ? "bf16" : "fp32", accums[ai],
                             rc_names[ri]);
                    /* given: layer 2 (a checkpoint of full/2), else the planner's (balanced per device) */
                    compare(base(precs[pi], accums[ai], rcs[ri]), given ? 2 : 0, label);
                }
    {
        gpt2rt_config c = base(GPT2RT_PRECISION_FP32, 2, GPT2RT_RECOMPUTE_NONE);
        c.frozen = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_ATTENTION;
        compare(c, 1, "fp32 accum 2, frozen wte and attention");
        c = base(GPT2RT_PRECISION_FP16, 2, GPT2RT_RECOMPUTE_SELECTIVE);
        c.loss_scale = 1024.0f;
        compare(c, 4, "fp16 accum 2 recompute selective");
    }
    refusals();
    printf("layer_split: %d checks, %d failed: %s\n", n_checks, lab_failures, lab_failures ? "FAIL" : "PASS");
    return lab_failures ? 1 : 0;
}
