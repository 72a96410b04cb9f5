/* aLLM4TS stage 1's memory, planned against allocated on the CPU backend, at a
   scaled-down shape of the workload gpt2rt-mem --preset allm4ts-stage1 plans (2048
   windows x 64 patches of 16, 6 blocks, width 768): here 8 windows x 16 patches of 16
   (lookback 256, stride 16), 2 blocks, width 64, next-patch head, dropout 0.2 as
   scripted. For each one-device knob the report turns (recompute, accumulation,
   frozen groups):
   - gpt2rt_plan's bytes == what the allocator hook was asked for, per category and
     exactly (the hook is our own count, not the library's);
   - gpt2rt_plan_allocated says the same, per device;
   - a step allocates nothing more and the context frees all it took;
   and the parameter count is the one we derive by hand from the layer shapes (no
   token embedding, no LM head: patch inputs have neither). Data parallel with this
   head is refused by gpt2rt_create for now, so its plan is checked against the
   one-device plan instead (each rank one device of B windows; ZeRO-1 halves moments).
   Tolerance: none anywhere; bytes are integers and the claim is equality. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

enum { B = 8, L = 256, P = 16, LAYERS = 2, C = 64, HEADS = 4, NP = L / P }; /* NP: patches a window */

static gpt2rt_config stage1_small(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_NEXT_PATCH;
    c.patch_len = P; c.patch_stride = P; c.n_channels = 1; c.seq_len = L;
    c.n_layer = LAYERS; c.n_head = HEADS; c.n_embd = C; c.max_seq_len = 64;
    c.batch_size = B; c.dropout = 0.2f;
    c.lr = 1e-4f; c.seed = 7; c.n_threads = 2; c.backend = GPT2RT_BACKEND_CPU;
    return c;
}

/* the allocator hook: bytes asked for, per category, over every rank */

/* parameters by hand: per block ln_1, ln_2 (2C each), c_attn (C x 3C + 3C), attn
   c_proj (C x C + C), c_fc (C x 4C + 4C), mlp c_proj (4C x C + C); wpe (ctx x C),
   ln_f (2C), in_layer (P x C + C), out_layer (C x P + P) */
static int64_t params_by_hand(int64_t ctx) {
    int64_t block = 2 * (2 * C) + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C);
    return LAYERS * block + ctx * C + 2 * C + (P * C + C) + (C * P + P);
}

static int check_one(const gpt2rt_config *base, const char *name, int *n_cats) {
    gpt2rt_config c = *base;
    harness_counter k;
    memset(&k, 0, sizeof k);
    c.alloc = harness_count_alloc; c.free = harness_count_free; c.alloc_user = &k;
    gpt2rt_memory_plan plan, got;
    if (gpt2rt_plan(&c, &plan) != GPT2RT_OK) { CHECK(0, "%s: plan: %s", name, plan.error); return 0; }
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) {
        CHECK(0, "%s: create: %s", name, gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 0;
    }
    CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &got));
    CHECK(got.n_devices == plan.n_devices, "%s: %d devices allocated, %d planned", name, got.n_devices, plan.n_devices);
    int bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) {
        uint64_t planned = 0;
        for (int d = 0; d < plan.n_devices; d++) {
            planned += plan.bytes[d][m];
            if (got.bytes[d][m] != plan.bytes[d][m]) {
                bad++;
                printf("  %s device %d %s: planned %llu, gpt2rt_plan_allocated %llu\n", name, d,
                       gpt2rt_mem_name((gpt2rt_mem)m), (unsigned long long)plan.bytes[d][m],
                       (unsigned long long)got.bytes[d][m]);
            }
        }
        if (k.bytes[m] != planned) {
            bad++;
            printf("  %s %s: planned %llu, the allocator was asked for %llu\n", name, gpt2rt_mem_name((gpt2rt_mem)m),
                   (unsigned long long)planned, (unsigned long long)k.bytes[m]);
        }
        *n_cats += 1;
    }
    CHECK(bad == 0, "%s: %d categories planned != allocated", name, bad);
    CHECK(plan.n_params == params_by_hand(c.max_seq_len), "%s: %lld parameters planned, %lld by hand", name,
          (long long)plan.n_params, (long long)params_by_hand(c.max_seq_len));

    /* one optimizer step: stage 1's targets come from x, so y is NULL */
    int ranks = c.parallel == GPT2RT_PARALLEL_DATA ? c.n_devices : 1;
    int64_t rows = (int64_t)gpt2rt_config_get(ctx).grad_accum * ranks * B; /* 0 in c: the default, 1 */
    float *x = (float *)malloc(sizeof(float) * (size_t)(rows * L));
    for (int64_t i = 0; i < rows * L; i++) x[i] = (float)sin(0.05 * (double)i) + 0.01f * (float)(i % 7);
    int calls = k.calls;
    gpt2rt_step_stats st;
    CHECK_OK(ctx, gpt2rt_step_series(ctx, x, NULL, &st));
    CHECK(k.calls == calls, "%s: the step allocated %d times", name, k.calls - calls);
    CHECK(st.loss == st.loss && st.loss > 0.0f, "%s: step loss %g", name, (double)st.loss);
    free(x);
    gpt2rt_free(ctx);
    CHECK(k.live == 0, "%s: %lld allocations not freed", name, (long long)k.live);
    return bad == 0;
}

int main(void) {
    int n_cfg = 0, n_ok = 0, n_cats = 0;
    static const struct { gpt2rt_recompute r; int ck; const char *name; } rc[] = {
        {GPT2RT_RECOMPUTE_NONE, 0, "none"}, {GPT2RT_RECOMPUTE_SELECTIVE, 0, "selective"},
        {GPT2RT_RECOMPUTE_FULL, 1, "full"}};
    static const struct { unsigned bits; const char *name; } fz[] = {
        {0, "stage 1 (all trained)"}, {GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP, "attn,mlp frozen"}};
    for (int r = 0; r < 3; r++)
        for (int f = 0; f < 2; f++)
            for (int acc = 1; acc <= 2; acc++) {
                gpt2rt_config c = stage1_small();
                c.recompute = rc[r].r; c.checkpoint_every = rc[r].ck; c.frozen = fz[f].bits; c.grad_accum = acc;
                char name[96];
                snprintf(name, sizeof name, "recompute %s, %s, accum %d", rc[r].name, fz[f].name, acc);
                n_ok += check_one(&c, name, &n_cats);
                n_cfg++;
            }
    /* two devices: each rank is one device of B windows in every per-sample category, and
       ZeRO-1 splits the moments over the two ranks without losing or adding a byte beyond
       alignment */
    {
        gpt2rt_config one = stage1_small(), dp = stage1_small();
        dp.n_devices = 2; dp.parallel = GPT2RT_PARALLEL_DATA;
        gpt2rt_config z = dp;
        z.shard_optimizer = 1;
        gpt2rt_memory_plan p1, p2, pz;
        CHECK(gpt2rt_plan(&one, &p1) == GPT2RT_OK && gpt2rt_plan(&dp, &p2) == GPT2RT_OK &&
              gpt2rt_plan(&z, &pz) == GPT2RT_OK, "plans: %s %s %s", p1.error, p2.error, pz.error);
        static const gpt2rt_mem same[] = {GPT2RT_MEM_WEIGHTS, GPT2RT_MEM_GRADS, GPT2RT_MEM_MOMENTS,
                                          GPT2RT_MEM_ACTIVATIONS, GPT2RT_MEM_TRANSIENT, GPT2RT_MEM_LOGITS};
        for (int d = 0; d < 2; d++)
            for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
                CHECK(p2.bytes[d][same[i]] == p1.bytes[0][same[i]], "data parallel device %d %s: %llu, one device %llu",
                      d, gpt2rt_mem_name(same[i]), (unsigned long long)p2.bytes[d][same[i]],
                      (unsigned long long)p1.bytes[0][same[i]]);
        uint64_t mz = pz.bytes[0][GPT2RT_MEM_MOMENTS] + pz.bytes[1][GPT2RT_MEM_MOMENTS], m1 = p1.bytes[0][GPT2RT_MEM_MOMENTS];
        /* each rank's share is rounded to 64 bytes, per moment (m and v): at most 2 x 2 x 64 more */
        CHECK(mz >= m1 && mz <= m1 + 256 && pz.bytes[0][GPT2RT_MEM_MOMENTS] < m1,
              "ZeRO-1 moments %llu + %llu, one device %llu", (unsigned long long)pz.bytes[0][GPT2RT_MEM_MOMENTS],
              (unsigned long long)pz.bytes[1][GPT2RT_MEM_MOMENTS], (unsigned long long)m1);
        int n_cats = 0; /* and each rank allocates its column, a step allocating nothing */
        check_one(&dp, "stage 1, data parallel over 2", &n_cats);
        check_one(&z, "stage 1, ZeRO-1 over 2", &n_cats);
    }
    /* the frozen stage-2 groups drop their gradients and moments: exactly 12 bytes a frozen
       parameter in fp32 (4 gradient + 8 moments; the weights stay) */
    gpt2rt_config a = stage1_small(), b = stage1_small();
    b.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    gpt2rt_memory_plan pa, pb;
    CHECK(gpt2rt_plan(&a, &pa) == GPT2RT_OK && gpt2rt_plan(&b, &pb) == GPT2RT_OK, "plans: %s %s", pa.error, pb.error);
    int64_t frozen = LAYERS * ((int64_t)C * 3 * C + 3 * C + C * C + C + C * 4 * C + 4 * C + 4 * C * C + C);
    CHECK(pa.n_trainable - pb.n_trainable == frozen, "frozen parameters %lld, by hand %lld",
          (long long)(pa.n_trainable - pb.n_trainable), (long long)frozen);
    /* each category is 64-byte aligned per tensor, so compare the sum of gradients and moments
       against 12 bytes a parameter within the alignment padding of at most 63 bytes per tensor */
    uint64_t drop = pa.bytes[0][GPT2RT_MEM_GRADS] + pa.bytes[0][GPT2RT_MEM_MOMENTS] - pb.bytes[0][GPT2RT_MEM_GRADS] -
                    pb.bytes[0][GPT2RT_MEM_MOMENTS];
    CHECK(drop >= (uint64_t)(12 * frozen) && drop < (uint64_t)(12 * frozen) + 3 * 63 * 8 * LAYERS,
          "frozen attn,mlp drop %llu bytes of gradients and moments, 12 x %lld = %lld expected",
          (unsigned long long)drop, (long long)frozen, (long long)(12 * frozen));
    printf("aLLM4TS stage 1 at B=%d x %d patches, %d blocks, C=%d: planned == allocated in %d of %d configs "
           "(%d category checks), exact bytes\n", B, NP, LAYERS, C, n_ok, n_cfg, n_cats);
    return harness_finish();
}
