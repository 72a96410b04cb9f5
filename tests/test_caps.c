/* tests/test_caps.c - every cell of the capability table (gpt2rt.h 2.1): backend x
   execution mode x model (input, head) x precision x feature. A cell a rule refuses
   is refused with GPT2RT_ERR_NOT_IMPLEMENTED and that rule's message, by gpt2rt_plan
   (PLAN rules) or gpt2rt_create (CREATE rules), before anything is allocated. A cell
   no rule refuses plans, and where this process can run it (CPU, one process) it
   creates a context at a tiny shape and runs one step, or the call the feature is
   about (gpt2rt_forward for an inference context, gpt2rt_generate for the KV cache and
   bf16 weights). CUDA cells and several processes are planned here and run by make
   test-emu / make test-gpu and tests/run.sh's mpirun checks. Then docs/support.md is
   gpt2rt_capabilities_markdown's output, byte for byte. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

static int n_arena_allocs, n_live;
static void *count_alloc(void *user, size_t bytes, int category) {
    (void)user;
    if (category != GPT2RT_MEM_BOOKKEEPING) n_arena_allocs++;
    size_t n = ((bytes ? bytes : 1) + GPT2RT_ALIGN - 1) / GPT2RT_ALIGN * GPT2RT_ALIGN;
    void *p = aligned_alloc(GPT2RT_ALIGN, n);
    if (p) n_live++;
    return p;
}
static void count_free(void *user, void *p, int category) {
    (void)user; (void)category;
    if (p) { n_live--; free(p); }
}

enum { L_SERIES = 32, M = 2, BW = 2, B = 2, T = 8, NDEV = 2, ACC = 2 };

/* model m (gpt2rt__cap_models' order), mode bit index mo, precision p, feature bit f (0: none) */
static gpt2rt_config cell_config(int backend, int mo, int m, int p, unsigned f) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.backend = backend ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_CPU;
    c.precision = (gpt2rt_precision)p;
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.n_threads = 1; c.lr = 1e-3f;
    c.input = (gpt2rt_input)gpt2rt__cap_models[m][0];
    c.head = (gpt2rt_head)gpt2rt__cap_models[m][1];
    if (m == 0) { c.vocab_size = 64; c.max_seq_len = 16; c.batch_size = B; c.seq_len = T; }
    else {
        c.max_seq_len = 32; c.batch_size = BW; c.n_channels = M; c.seq_len = L_SERIES; c.patch_len = 8;
        c.patch_stride = c.head == GPT2RT_HEAD_NEXT_PATCH ? 8 : 4;
        c.horizon = c.head == GPT2RT_HEAD_NEXT_PATCH ? 0 : 8;
    }
    unsigned mode = 1u << mo;
    c.world_size = 1;
    if (mode & (GPT2RT__CAP_DATA | GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV)) c.parallel = GPT2RT_PARALLEL_DATA;
    if (mode & (GPT2RT__CAP_SPLIT | GPT2RT__CAP_SPLIT_PROCS)) c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    c.n_devices = mode & (GPT2RT__CAP_DATA | GPT2RT__CAP_PROCS_DEV | GPT2RT__CAP_SPLIT | GPT2RT__CAP_SPLIT_PROCS) ? NDEV : 1;
    if (mode & (GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV | GPT2RT__CAP_SPLIT_PROCS)) {
        c.world_size = 2; c.rank = 0; c.rendezvous = GPT2RT_RENDEZVOUS_TCP; c.master_port = 29500;
        strcpy(c.master_addr, "127.0.0.1");
    }
    if (f & GPT2RT__CAP_RECOMPUTE) c.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    if (f & GPT2RT__CAP_ACCUM) c.grad_accum = ACC;
    if (f & GPT2RT__CAP_DROPOUT) c.dropout = 0.1f;
    if (f & GPT2RT__CAP_FROZEN) c.frozen = GPT2RT_GROUP_MLP;
    if (f & GPT2RT__CAP_CHUNK) c.classifier_chunk = 8;
    if (f & (GPT2RT__CAP_KV | GPT2RT__CAP_W16)) { c.kv_batch = 2; c.kv_len = 16; }
    if (f & (GPT2RT__CAP_INFER | GPT2RT__CAP_W16)) c.inference = 1;
    if (f & GPT2RT__CAP_W16) {
        c.inference_weights = GPT2RT_PRECISION_BF16;
        if (m) c.kv_batch = c.kv_len = 0; /* generation is for tokens: rule 2 speaks for patches */
    }
    if (f & GPT2RT__CAP_MASK) c.attn_mask = GPT2RT_MASK_PLACEHOLDERS;
    if (f & GPT2RT__CAP_SHARD) c.shard_optimizer = 1;
    c.alloc = count_alloc; c.free = count_free;
    return c;
}

/* one step, or the call the feature is about, on a created context */
static gpt2rt_result run_cell(gpt2rt_ctx *ctx, const gpt2rt_config *c, unsigned f) {
    static int32_t in[NDEV * ACC * B * T], tg[NDEV * ACC * B * T];
    static float x[NDEV * ACC * BW * L_SERIES * M], y[NDEV * ACC * BW * 8 * M];
    for (int i = 0; i < NDEV * ACC * B * T; i++) { in[i] = (i * 7 + 3) % 64; tg[i] = (i * 5 + 1) % 64; }
    for (int i = 0; i < NDEV * ACC * BW * L_SERIES * M; i++) x[i] = (float)sin(0.1 * i);
    for (int i = 0; i < NDEV * ACC * BW * 8 * M; i++) y[i] = (float)cos(0.1 * i);
    const float *yy = c->head == GPT2RT_HEAD_NEXT_PATCH ? NULL : y;
    if (c->kv_batch) {
        int32_t tok[2 * 16] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6};
        int64_t lens[2] = {3, 3};
        gpt2rt_sample o;
        memset(&o, 0, sizeof o);
        o.max_new_tokens = 2;
        return gpt2rt_generate(ctx, &o, 2, tok, 16, lens);
    }
    float loss;
    gpt2rt_step_stats st;
    if (c->input == GPT2RT_INPUT_TOKENS)
        return f & GPT2RT__CAP_INFER ? gpt2rt_forward(ctx, in, tg, &loss) : gpt2rt_step(ctx, in, tg, &st);
    return f & GPT2RT__CAP_INFER ? gpt2rt_forward_series(ctx, x, yy, &loss) : gpt2rt_step_series(ctx, x, yy, &st);
}

int main(void) {
    int cells = 0, invalid = 0, refused_plan = 0, refused_create = 0, ran = 0, planned_cuda = 0, planned_procs = 0;
    char want[4200], got[4200];
    for (int b = 0; b < 2; b++)
        for (int mo = 0; mo < GPT2RT__CAP_N_MODES; mo++)
            for (int m = 0; m < 4; m++)
                for (int p = GPT2RT_PRECISION_FP32; p <= GPT2RT_PRECISION_FP16; p++)
                    for (int fi = -1; fi < GPT2RT__CAP_N_FEATURES; fi++) {
                        unsigned f = fi < 0 ? 0u : 1u << fi, mode = 1u << mo;
                        if (!b && p != GPT2RT_PRECISION_FP32) continue; /* the CPU backend is fp32: not a cell */
                        if (f && !gpt2rt__cap_applies(f, m, mode)) continue;
                        cells++;
                        gpt2rt_config c = cell_config(b, mo, m, p, f);
                        gpt2rt__cap_cell k = gpt2rt__cap_cell_of(&c);
                        int plan_rule = gpt2rt__cap_find(&k, GPT2RT__CAP_PLAN, 0);
                        int create_rule = plan_rule >= 0 ? -1 : gpt2rt__cap_find(&k, GPT2RT__CAP_CREATE, 0);
                        gpt2rt_memory_plan plan;
                        gpt2rt_result rp = gpt2rt_plan(&c, &plan);
                        char name[160];
                        snprintf(name, sizeof name, "%s, %s, %s, %s, %s", b ? "CUDA" : "CPU",
                                 gpt2rt__cap_mode_short[mo], gpt2rt__cap_model_names[m],
                                 p == 1 ? "fp32" : p == 2 ? "bf16" : "fp16", fi < 0 ? "plain" : gpt2rt__cap_feature_names[fi]);
                        if (rp == GPT2RT_ERR_INVALID_ARGUMENT) { /* not a cell after all: say so */
                            invalid++;
                            CHECK(0, "%s: the walk's config is invalid: %s", name, plan.error);
                            continue;
                        }
                        if (plan_rule >= 0) {
                            gpt2rt__cap_message(plan_rule, &c, NULL, want, sizeof want);
                            CHECK(rp == GPT2RT_ERR_NOT_IMPLEMENTED && !strcmp(plan.error, want),
                                  "%s: plan: %s: %s (want rule %d: %s)", name, gpt2rt_result_string(rp), plan.error,
                                  plan_rule + 1, want);
                        } else CHECK(rp == GPT2RT_OK, "%s: plan: %s: %s", name, gpt2rt_result_string(rp), plan.error);
                        n_arena_allocs = n_live = 0;
                        gpt2rt_ctx *ctx = NULL;
                        gpt2rt_result rc = gpt2rt_create(&ctx, &c);
                        snprintf(got, sizeof got, "%s", gpt2rt_last_error(ctx));
                        if (plan_rule >= 0 || create_rule >= 0) {
                            if (plan_rule >= 0) {
                                char m2[4096];
                                gpt2rt__cap_message(plan_rule, &c, NULL, m2, sizeof m2);
                                snprintf(want, sizeof want, "gpt2rt_create: %s", m2);
                                refused_plan++;
                            } else {
                                gpt2rt__cap_message(create_rule, &c, "gpt2rt_create", want, sizeof want);
                                refused_create++;
                            }
                            CHECK(rc == GPT2RT_ERR_NOT_IMPLEMENTED && !strcmp(got, want) && n_arena_allocs == 0,
                                  "%s: create: %s, %d arena allocations: %s (want rule %d: %s)", name,
                                  gpt2rt_result_string(rc), n_arena_allocs, got,
                                  (plan_rule >= 0 ? plan_rule : create_rule) + 1, want);
                        } else if (b) {
                            planned_cuda++; /* this build has no CUDA backend */
                            CHECK(rc == GPT2RT_ERR_UNAVAILABLE, "%s: create in a CPU build: %s: %s", name,
                                  gpt2rt_result_string(rc), got);
                        } else if (mode & (GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV)) {
                            planned_procs++; /* one process here: no rendezvous partner */
                            CHECK(rc == GPT2RT_ERR_UNAVAILABLE || rc == GPT2RT_ERR_IO, "%s: create: %s: %s", name,
                                  gpt2rt_result_string(rc), got);
                        } else {
                            gpt2rt_result rr = rc == GPT2RT_OK ? run_cell(ctx, &c, f) : rc;
                            ran++;
                            CHECK(rr == GPT2RT_OK, "%s: %s: %s", name, gpt2rt_result_string(rr), gpt2rt_last_error(ctx));
                        }
                        gpt2rt_free(ctx);
                        CHECK(n_live == 0, "%s: %d allocations left after gpt2rt_free", name, n_live);
                    }
    printf("    %d cells: %d refused by the plan, %d by gpt2rt_create, %d run on the CPU, %d CUDA cells and %d "
           "multi-process cells planned (%d invalid)\n", cells, refused_plan, refused_create, ran, planned_cuda,
           planned_procs, invalid);
    if (planned_cuda) SKIP("%d supported CUDA cells planned, not run: this build has no CUDA (make test-emu, make test-gpu)", planned_cuda);
    if (planned_procs) SKIP("%d supported multi-process cells planned, not run: one process here (tests/run.sh's mpirun checks)", planned_procs);

    /* the CALL rules: a context of the cell is created, the calls named are refused with the
       rule's message; the others (a CUDA layer split, ZeRO-1 over processes) cannot be
       created here: kernels/layer_split.cu and tests/run.sh's mpirun checks meet them */
    int calls_checked = 0, calls_elsewhere = 0;
    for (int i = 0; i < GPT2RT__CAP_N_RULES; i++) {
        const gpt2rt__cap_rule *r = &gpt2rt__caps[i];
        if (r->stage != GPT2RT__CAP_CALL) continue;
        if (r->backends != GPT2RT__CAP_CPU || (r->modes && !(r->modes & GPT2RT__CAP_ONE))) { calls_elsewhere++; continue; }
        unsigned f = r->features & (0u - r->features); /* its first feature */
        gpt2rt_config c = cell_config(0, 0, 0, GPT2RT_PRECISION_FP32, f);
        gpt2rt_ctx *ctx = NULL;
        if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) {
            CHECK(0, "rule %d: a context of its cell: %s", i + 1, gpt2rt_last_error(ctx));
            gpt2rt_free(ctx);
            continue;
        }
        for (int k = 0; k < GPT2RT__CAP_N_CALLS; k++) {
            if (!(r->calls >> k & 1)) continue;
            static int32_t in[B * T], tg[B * T];
            static float lg[B * T * 64];
            float loss;
            gpt2rt_result rr = GPT2RT_OK;
            const char *fn = gpt2rt__cap_call_names[k];
            switch (1u << k) {
            case GPT2RT__CAP_CALL_FORWARD: rr = gpt2rt_forward(ctx, in, tg, &loss); break;
            case GPT2RT__CAP_CALL_WEIGHTS_SAVE: rr = gpt2rt_weights_save(ctx, "build/test_caps_never"); break;
            case GPT2RT__CAP_CALL_LOGITS: rr = gpt2rt_logits(ctx, lg, (int64_t)B * T * 64); break;
            default: CHECK(0, "rule %d: %s has no case here", i + 1, fn); continue;
            }
            gpt2rt__cap_message(i, &c, fn, want, sizeof want);
            CHECK(rr == GPT2RT_ERR_NOT_IMPLEMENTED && !strcmp(gpt2rt_last_error(ctx), want), "rule %d, %s: %s: %s "
                  "(want %s)", i + 1, fn, gpt2rt_result_string(rr), gpt2rt_last_error(ctx), want);
            calls_checked++;
        }
        gpt2rt_free(ctx);
    }
    printf("    CALL rules: %d refusals checked here, %d rules met on a GPU or over processes\n", calls_checked,
           calls_elsewhere);

    /* docs/support.md is the table's Markdown, byte for byte */
    size_t n = gpt2rt_capabilities_markdown(NULL, 0);
    char *md = (char *)malloc(n + 1), *doc = (char *)malloc(n + 2);
    gpt2rt_capabilities_markdown(md, n + 1);
    FILE *fp = fopen("docs/support.md", "rb");
    size_t got_n = fp ? fread(doc, 1, n + 1, fp) : 0;
    if (fp) fclose(fp);
    CHECK(fp && got_n == n && !memcmp(doc, md, n), "docs/support.md (%zu bytes%s) is not gpt2rt_capabilities_markdown's "
          "output (%zu bytes): run make support", got_n, fp ? "" : ", missing", n);
    free(md); free(doc);
    return harness_finish();
}
