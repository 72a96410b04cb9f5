/* config/caps.h - 2.1 Capabilities
   may call: common/threads.h, common/errors.h */
#ifndef GPT2RT__SRC_CONFIG_CAPS_H
#define GPT2RT__SRC_CONFIG_CAPS_H
#include "../common/threads.h"
#include "../common/errors.h"

/* ==== 2.1 Capabilities ==== */
/* What runs where, as data. A cell is (backend, execution mode, input, head,
   precision, feature); each rule below names a set of cells that is not implemented
   (0 on an axis: every value), why, and what works instead. Config resolution asks
   the table for the config's own cell (stage PLAN: gpt2rt_plan refuses it too),
   gpt2rt_create for the cells that plan but do not run (CREATE), and the calls a
   context does not offer for its cell (CALL). Every GPT2RT_ERR_NOT_IMPLEMENTED of a
   combination comes from here, in one form (gpt2rt__cap_message), and the one refusal
   of a count, the processes of a run (gpt2rt__cap_processes, asked by 10.3-10.4), too;
   gpt2rt_capabilities_markdown prints the table (docs/support.md), and tests/test_caps.c
   walks every cell. */

enum { GPT2RT__CAP_CPU = 1 << 0, GPT2RT__CAP_CUDA = 1 << 1 }; /* backends */
enum {                                                       /* execution modes */
    GPT2RT__CAP_ONE = 1 << 0,        /* one device */
    GPT2RT__CAP_DATA = 1 << 1,       /* data parallel over the devices of one process */
    GPT2RT__CAP_PROCS = 1 << 2,      /* data parallel over world_size processes of one device each */
    GPT2RT__CAP_PROCS_DEV = 1 << 3,  /* data parallel over processes of n_devices > 1 each */
    GPT2RT__CAP_SPLIT = 1 << 4,      /* layer split over the devices of one process */
    GPT2RT__CAP_SPLIT_PROCS = 1 << 5 /* layer split over processes */
};
#define GPT2RT__CAP_N_MODES 6
#define GPT2RT__CAP_MANY (GPT2RT__CAP_DATA | GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV | GPT2RT__CAP_SPLIT | \
                          GPT2RT__CAP_SPLIT_PROCS) /* every mode of more than one device */
enum { GPT2RT__CAP_TOKENS = 1 << GPT2RT_INPUT_TOKENS, GPT2RT__CAP_PATCHES = 1 << GPT2RT_INPUT_PATCHES };
#define GPT2RT__CAP_HEAD(h) (1u << (h))
#define GPT2RT__CAP_SEQ_HEADS (GPT2RT__CAP_HEAD(GPT2RT_HEAD_NEXT_PATCH) | GPT2RT__CAP_HEAD(GPT2RT_HEAD_PATCH_DECODE))
#define GPT2RT__CAP_PREC(p) (1u << (p)) /* FP32, BF16, FP16 */
enum {                                   /* features: what a config turns on beyond the plain step */
    GPT2RT__CAP_RECOMPUTE = 1 << 0,      /* recompute = SELECTIVE or FULL */
    GPT2RT__CAP_ACCUM = 1 << 1,          /* grad_accum > 1 */
    GPT2RT__CAP_DROPOUT = 1 << 2,        /* dropout, attn_dropout or head_dropout > 0 */
    GPT2RT__CAP_FROZEN = 1 << 3,         /* frozen groups */
    GPT2RT__CAP_CHUNK = 1 << 4,          /* classifier_chunk > 0 */
    GPT2RT__CAP_KV = 1 << 5,             /* kv_batch > 0: generation's KV cache */
    GPT2RT__CAP_INFER = 1 << 6,          /* inference = 1 */
    GPT2RT__CAP_W16 = 1 << 7,            /* inference_weights = BF16 */
    GPT2RT__CAP_MASK = 1 << 8,           /* attn_mask = PLACEHOLDERS */
    GPT2RT__CAP_SHARD = 1 << 9           /* shard_optimizer = 1 */
};
#define GPT2RT__CAP_N_FEATURES 10
enum {                                   /* the calls a CALL rule refuses */
    GPT2RT__CAP_CALL_FORWARD = 1 << 0, GPT2RT__CAP_CALL_BACKWARD = 1 << 1, GPT2RT__CAP_CALL_UPDATE = 1 << 2,
    GPT2RT__CAP_CALL_LOGITS = 1 << 3, GPT2RT__CAP_CALL_WEIGHTS_LOAD = 1 << 4, GPT2RT__CAP_CALL_WEIGHTS_SAVE = 1 << 5,
    GPT2RT__CAP_CALL_STATE_SAVE = 1 << 6, GPT2RT__CAP_CALL_STATE_LOAD = 1 << 7, GPT2RT__CAP_CALL_PARAM_WRITE = 1 << 8,
    GPT2RT__CAP_CALL_MOMENT_READ = 1 << 9, /* gpt2rt_param_read of ADAM_M or ADAM_V */
    GPT2RT__CAP_CALL_GRAD_READ = 1 << 10   /* gpt2rt_param_read of GRAD once summed over the ranks */
};
#define GPT2RT__CAP_N_CALLS 11
enum { GPT2RT__CAP_PLAN = 0, GPT2RT__CAP_CREATE, GPT2RT__CAP_CALL }; /* when a rule is asked */

typedef struct gpt2rt__cap_rule {
    unsigned backends, modes, inputs, heads, precisions; /* the cells refused; 0: any value */
    unsigned features; /* the cell has one of these; 0: whatever it has */
    unsigned calls;    /* CALL rules: the calls refused */
    int stage;
    const char *why;     /* after "<the combination> is not implemented: " */
    const char *instead; /* what works; {n_devices} and {world_size} stand for the config's */
} gpt2rt__cap_rule;

static const gpt2rt__cap_rule gpt2rt__caps[] = {
    {GPT2RT__CAP_CUDA, 0, 0, 0, 0, GPT2RT__CAP_W16, 0, GPT2RT__CAP_PLAN,
     "bf16 weights are the CPU backend's", "backend = GPT2RT_BACKEND_CPU"},
    {0, 0, GPT2RT__CAP_PATCHES, 0, 0, GPT2RT__CAP_W16, 0, GPT2RT__CAP_PLAN,
     "bf16 weights serve token generation, not patches", "inference_weights = FP32 for time series"},
    {0, GPT2RT__CAP_MANY, 0, 0, 0, GPT2RT__CAP_INFER, 0, GPT2RT__CAP_PLAN,
     "an inference context runs on one device", "parallel = NONE (one device)"},
    {0, GPT2RT__CAP_SPLIT | GPT2RT__CAP_SPLIT_PROCS, 0, 0, 0, GPT2RT__CAP_CHUNK, 0, GPT2RT__CAP_PLAN,
     "the stages compute the full logits", "classifier_chunk = 0, or one device, or parallel = DATA"},
    {0, GPT2RT__CAP_SPLIT_PROCS, 0, 0, 0, 0, 0, GPT2RT__CAP_PLAN,
     "layer split divides the layers over the devices of one process",
     "parallel = DATA over the {world_size} processes, or one process of n_devices stages"},
    {0, GPT2RT__CAP_SPLIT, 0, 0, 0, GPT2RT__CAP_DROPOUT, 0, GPT2RT__CAP_CREATE,
     "the stages run several micro-batches at once, and a context draws one forward's masks",
     "dropout, attn_dropout and head_dropout = 0, or parallel = DATA"},
    {GPT2RT__CAP_CUDA, GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV, 0, 0, 0, 0, 0, GPT2RT__CAP_CREATE,
     "CUDA data parallel runs the devices of one process, not several processes",
     "one process (world_size = 1, one thread per device), or backend = GPT2RT_BACKEND_CPU"},
    {GPT2RT__CAP_CPU, GPT2RT__CAP_PROCS_DEV, 0, 0, 0, 0, 0, GPT2RT__CAP_CREATE,
     "CPU processes reduce with MPI, one rank each", "{world_x_devices} processes of n_devices = 1"},
    {GPT2RT__CAP_CUDA, GPT2RT__CAP_SPLIT, GPT2RT__CAP_PATCHES, 0, 0, 0, 0, GPT2RT__CAP_CREATE,
     "the CUDA stages feed tokens", "one device, or backend = GPT2RT_BACKEND_CPU"},
    {GPT2RT__CAP_CUDA, GPT2RT__CAP_MANY, 0, GPT2RT__CAP_SEQ_HEADS, 0, 0, 0,
     GPT2RT__CAP_CREATE, "aLLM4TS's heads run on one CUDA device",
     "parallel = GPT2RT_PARALLEL_NONE, or backend = GPT2RT_BACKEND_CPU for data parallel"},
    {0, GPT2RT__CAP_SPLIT | GPT2RT__CAP_SPLIT_PROCS, 0, GPT2RT__CAP_SEQ_HEADS, 0, 0, 0, GPT2RT__CAP_CREATE,
     "the last stage's loss needs the patches and RevIN statistics the first stage computes",
     "parallel = GPT2RT_PARALLEL_DATA over the {n_devices} devices, or GPT2RT_PARALLEL_NONE"},
    {GPT2RT__CAP_CUDA, GPT2RT__CAP_MANY, 0, 0, 0, GPT2RT__CAP_KV, 0,
     GPT2RT__CAP_CREATE, "CUDA generation runs on one device", "parallel = NONE, or kv_batch = 0"},
    {GPT2RT__CAP_CUDA, GPT2RT__CAP_SPLIT, 0, 0, 0, 0,
     GPT2RT__CAP_CALL_FORWARD | GPT2RT__CAP_CALL_BACKWARD | GPT2RT__CAP_CALL_UPDATE | GPT2RT__CAP_CALL_LOGITS |
     GPT2RT__CAP_CALL_WEIGHTS_LOAD | GPT2RT__CAP_CALL_WEIGHTS_SAVE | GPT2RT__CAP_CALL_STATE_SAVE |
     GPT2RT__CAP_CALL_STATE_LOAD | GPT2RT__CAP_CALL_PARAM_WRITE, GPT2RT__CAP_CALL,
     "the CUDA stages run gpt2rt_step and gpt2rt_param_read only", "gpt2rt_step, or backend = CPU"},
    {0, GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV, 0, 0, 0, GPT2RT__CAP_SHARD,
     GPT2RT__CAP_CALL_STATE_SAVE | GPT2RT__CAP_CALL_STATE_LOAD | GPT2RT__CAP_CALL_MOMENT_READ |
     GPT2RT__CAP_CALL_GRAD_READ, GPT2RT__CAP_CALL,
     "each process keeps its shard of the AdamW moments and of the summed gradient, and gathering them across "
     "processes is not written",
     "shard_optimizer = 0 to save or read them"},
    {GPT2RT__CAP_CPU, 0, 0, 0, 0, GPT2RT__CAP_W16,
     GPT2RT__CAP_CALL_FORWARD | GPT2RT__CAP_CALL_LOGITS | GPT2RT__CAP_CALL_WEIGHTS_SAVE, GPT2RT__CAP_CALL,
     "the call is written for fp32 weights (the logits come from gpt2rt_forward); gpt2rt_generate and "
     "gpt2rt_param_read serve bf16 ones",
     "inference_weights = FP32"}
};
#define GPT2RT__CAP_N_RULES ((int)(sizeof gpt2rt__caps / sizeof gpt2rt__caps[0]))

/* the cell of a resolved config (an axis out of its enum's range: no bit, so only the
   rules that leave that axis open can match) */
typedef struct gpt2rt__cap_cell {
    unsigned backend, mode, input, head, precision, features;
} gpt2rt__cap_cell;

static gpt2rt__cap_cell gpt2rt__cap_cell_of(const gpt2rt_config *c) {
    gpt2rt__cap_cell k;
    int procs = c->world_size > 1;
    k.backend = c->backend == GPT2RT_BACKEND_CUDA ? GPT2RT__CAP_CUDA : c->backend == GPT2RT_BACKEND_CPU ? GPT2RT__CAP_CPU : 0;
    k.mode = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT ? (procs ? GPT2RT__CAP_SPLIT_PROCS : GPT2RT__CAP_SPLIT)
             : procs ? (c->n_devices > 1 ? GPT2RT__CAP_PROCS_DEV : GPT2RT__CAP_PROCS)
             : c->parallel == GPT2RT_PARALLEL_DATA ? GPT2RT__CAP_DATA : c->parallel == GPT2RT_PARALLEL_NONE ? GPT2RT__CAP_ONE : 0;
    k.input = (unsigned)c->input <= GPT2RT_INPUT_PATCHES ? 1u << c->input : 0;
    k.head = (unsigned)c->head <= GPT2RT_HEAD_PATCH_DECODE ? GPT2RT__CAP_HEAD(c->head) : 0;
    k.precision = (unsigned)c->precision <= GPT2RT_PRECISION_FP16 ? GPT2RT__CAP_PREC(c->precision) : 0;
    k.features = (c->recompute != GPT2RT_RECOMPUTE_NONE ? (unsigned)GPT2RT__CAP_RECOMPUTE : 0u) |
                 (c->grad_accum > 1 ? (unsigned)GPT2RT__CAP_ACCUM : 0u) |
                 (c->dropout > 0.0f || c->attn_dropout > 0.0f || c->head_dropout > 0.0f ? (unsigned)GPT2RT__CAP_DROPOUT : 0u) |
                 (c->frozen ? (unsigned)GPT2RT__CAP_FROZEN : 0u) | (c->classifier_chunk ? (unsigned)GPT2RT__CAP_CHUNK : 0u) |
                 (c->kv_batch ? (unsigned)GPT2RT__CAP_KV : 0u) | (c->inference ? (unsigned)GPT2RT__CAP_INFER : 0u) |
                 (c->inference_weights == GPT2RT_PRECISION_BF16 ? (unsigned)GPT2RT__CAP_W16 : 0u) |
                 (c->attn_mask == GPT2RT_MASK_PLACEHOLDERS ? (unsigned)GPT2RT__CAP_MASK : 0u) |
                 (c->shard_optimizer ? (unsigned)GPT2RT__CAP_SHARD : 0u);
    return k;
}

static int gpt2rt__cap_match(const gpt2rt__cap_rule *r, const gpt2rt__cap_cell *k) {
    return (!r->backends || (r->backends & k->backend)) && (!r->modes || (r->modes & k->mode)) &&
           (!r->inputs || (r->inputs & k->input)) && (!r->heads || (r->heads & k->head)) &&
           (!r->precisions || (r->precisions & k->precision)) && (!r->features || (r->features & k->features));
}

/* the first rule of this stage (and, for CALL, this call) that refuses cell k; -1: none */
static int gpt2rt__cap_find(const gpt2rt__cap_cell *k, int stage, unsigned call) {
    for (int i = 0; i < GPT2RT__CAP_N_RULES; i++) {
        const gpt2rt__cap_rule *r = &gpt2rt__caps[i];
        if (r->stage == stage && (stage != GPT2RT__CAP_CALL || (r->calls & call)) && gpt2rt__cap_match(r, k)) return i;
    }
    return -1;
}

static const char *gpt2rt__cap_mode_name(unsigned mode) {
    switch (mode) {
    case GPT2RT__CAP_ONE: return "parallel = NONE";
    case GPT2RT__CAP_DATA: return "parallel = DATA";
    case GPT2RT__CAP_PROCS: return "parallel = DATA over processes";
    case GPT2RT__CAP_PROCS_DEV: return "parallel = DATA over processes of several devices";
    case GPT2RT__CAP_SPLIT: return "parallel = LAYER_SPLIT";
    case GPT2RT__CAP_SPLIT_PROCS: return "parallel = LAYER_SPLIT over processes";
    default: return "parallel = ?";
    }
}

/* The one form of a refusal: "[fn: ]<the config's values on the rule's axes> is not
   implemented: <why>; instead: <what works>". */
static size_t gpt2rt__cap_message(int rule, const gpt2rt_config *c, const char *fn, char *buf, size_t cap) {
    static const char *heads[4] = {"LM", "REGRESSION", "NEXT_PATCH", "PATCH_DECODE"};
    static const char *precs[4] = {"DEFAULT", "FP32", "BF16", "FP16"};
    const gpt2rt__cap_rule *r = &gpt2rt__caps[rule];
    gpt2rt__cap_cell k = gpt2rt__cap_cell_of(c);
    unsigned f = r->features & k.features;
    size_t n = 0;
    const char *sep = "";
    if (buf && cap) buf[0] = 0;
    if (fn) GPT2RT__PUT("%s: ", fn);
    if (r->heads && k.head) { GPT2RT__PUT("head = %s", heads[c->head]); sep = " with "; }
    else if (r->inputs) { GPT2RT__PUT("input = %s", c->input == GPT2RT_INPUT_PATCHES ? "PATCHES" : "TOKENS"); sep = " with "; }
    if (r->backends) { GPT2RT__PUT("%sbackend = %s", sep, c->backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU"); sep = " with "; }
    if (r->modes) {
        GPT2RT__PUT("%s%s", sep, gpt2rt__cap_mode_name(k.mode));
        if (k.mode & (GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV | GPT2RT__CAP_SPLIT_PROCS))
            GPT2RT__PUT(" (world_size = %d processes of n_devices = %d)", c->world_size, c->n_devices);
        sep = " with ";
    }
    if (r->precisions && k.precision) { GPT2RT__PUT("%sprecision = %s", sep, precs[c->precision]); sep = " with "; }
    if (f & GPT2RT__CAP_RECOMPUTE) { GPT2RT__PUT("%srecompute = %s", sep, c->recompute == GPT2RT_RECOMPUTE_FULL ? "FULL" : "SELECTIVE"); sep = ", "; }
    if (f & GPT2RT__CAP_ACCUM) { GPT2RT__PUT("%sgrad_accum = %d", sep, c->grad_accum); sep = ", "; }
    if (f & GPT2RT__CAP_DROPOUT) {
        GPT2RT__PUT("%sdropout (dropout = %g, attn_dropout = %g, head_dropout = %g)", sep, (double)c->dropout,
                    (double)c->attn_dropout, (double)c->head_dropout);
        sep = ", ";
    }
    if (f & GPT2RT__CAP_FROZEN) { GPT2RT__PUT("%sfrozen = 0x%x", sep, c->frozen); sep = ", "; }
    if (f & GPT2RT__CAP_CHUNK) { GPT2RT__PUT("%sclassifier_chunk = %d", sep, c->classifier_chunk); sep = ", "; }
    if (f & GPT2RT__CAP_KV) { GPT2RT__PUT("%sgeneration (kv_batch = %d)", sep, c->kv_batch); sep = ", "; }
    if (f & GPT2RT__CAP_INFER) { GPT2RT__PUT("%sinference = 1", sep); sep = ", "; }
    if (f & GPT2RT__CAP_W16) { GPT2RT__PUT("%sinference_weights = BF16", sep); sep = ", "; }
    if (f & GPT2RT__CAP_MASK) { GPT2RT__PUT("%sattn_mask = PLACEHOLDERS", sep); sep = ", "; }
    if (f & GPT2RT__CAP_SHARD) { GPT2RT__PUT("%sshard_optimizer = 1", sep); sep = ", "; }
    GPT2RT__PUT(" is not implemented: %s; instead: ", r->why);
    for (const char *p = r->instead; *p;) { /* {n_devices}, {world_size}, {world_x_devices}: the config's */
        if (!strncmp(p, "{n_devices}", 11)) { GPT2RT__PUT("%d", c->n_devices); p += 11; }
        else if (!strncmp(p, "{world_size}", 12)) { GPT2RT__PUT("%d", c->world_size); p += 12; }
        else if (!strncmp(p, "{world_x_devices}", 17)) { GPT2RT__PUT("%d", c->world_size * c->n_devices); p += 17; }
        else { GPT2RT__PUT("%c", *p); p++; }
    }
    return n;
}

/* a stage's refusal of config c (GPT2RT_OK: the table has none); err gets the message */
static gpt2rt_result gpt2rt__cap_check(const gpt2rt_config *c, int stage, const char *fn, char *err, size_t cap) {
    gpt2rt__cap_cell k = gpt2rt__cap_cell_of(c);
    int i = gpt2rt__cap_find(&k, stage, 0);
    if (i < 0) return GPT2RT_OK;
    gpt2rt__cap_message(i, c, fn, err, cap);
    return GPT2RT_ERR_NOT_IMPLEMENTED;
}

/* a call that the context's cell does not offer (a CALL rule): the context's error */
static gpt2rt_result gpt2rt__cap_call(gpt2rt_ctx *ctx, unsigned call, const char *fn) {
    gpt2rt__cap_cell k = gpt2rt__cap_cell_of(&ctx->cfg);
    int i = gpt2rt__cap_find(&k, GPT2RT__CAP_CALL, call);
    if (i < 0) return GPT2RT_OK;
    char why[2048];
    gpt2rt__cap_message(i, &ctx->cfg, fn, why, sizeof why);
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "%s", why);
}

/* The one refusal of a count, not a cell: a run of n processes, which the rendezvous
   (10.3, who = "rendezvous of world_size =") and MPI (10.4, "MPI world of") hold up to
   GPT2RT__RDV_MAX_PEERS of (rank 0 holds a socket or a request per rank) */
#define GPT2RT__RDV_MAX_PEERS 1024
static gpt2rt_result gpt2rt__cap_processes(int n, const char *who, char *err, size_t cap) {
    if (n <= GPT2RT__RDV_MAX_PEERS) return GPT2RT_OK;
    snprintf(err, cap, "%s %d processes: at most %d", who, n, GPT2RT__RDV_MAX_PEERS);
    return GPT2RT_ERR_NOT_IMPLEMENTED;
}

/* ---- the table as Markdown (docs/support.md) ---- */
static const char *const gpt2rt__cap_feature_names[GPT2RT__CAP_N_FEATURES] = {
    "recompute (SELECTIVE, FULL)", "gradient accumulation (grad_accum > 1)", "dropout", "frozen groups",
    "classifier_chunk", "KV cache (kv_batch)", "inference context (inference = 1)",
    "bf16 inference weights", "placeholder mask (attn_mask)", "sharded optimizer (shard_optimizer)"};
static const char *const gpt2rt__cap_call_names[GPT2RT__CAP_N_CALLS] = {
    "gpt2rt_forward", "gpt2rt_backward", "gpt2rt_update", "gpt2rt_logits", "gpt2rt_weights_load",
    "gpt2rt_weights_save", "gpt2rt_state_save", "gpt2rt_state_load", "gpt2rt_param_write",
    "gpt2rt_param_read of a moment", "gpt2rt_param_read of a summed gradient"};
static const char *const gpt2rt__cap_mode_short[GPT2RT__CAP_N_MODES] = {
    "one device", "data parallel", "processes", "processes x devices", "layer split", "layer split x processes"};
/* the four models: (input, head) */
static const int gpt2rt__cap_models[4][2] = {{GPT2RT_INPUT_TOKENS, GPT2RT_HEAD_LM},
    {GPT2RT_INPUT_PATCHES, GPT2RT_HEAD_REGRESSION}, {GPT2RT_INPUT_PATCHES, GPT2RT_HEAD_NEXT_PATCH},
    {GPT2RT_INPUT_PATCHES, GPT2RT_HEAD_PATCH_DECODE}};
static const char *const gpt2rt__cap_model_names[4] = {"tokens, LM head", "patches, REGRESSION head",
    "patches, NEXT_PATCH head", "patches, PATCH_DECODE head"};

/* whether feature bit f means anything for model m in mode bit mode (else the config is
   invalid, not unsupported: kv cache and classifier_chunk are for tokens, the mask for
   PATCH_DECODE, the sharded optimizer for data parallel) */
static int gpt2rt__cap_applies(unsigned f, int m, unsigned mode) {
    if (f & (GPT2RT__CAP_KV | GPT2RT__CAP_CHUNK)) return m == 0;
    if (f & GPT2RT__CAP_MASK) return m == 3;
    if (f & GPT2RT__CAP_SHARD) return (mode & (GPT2RT__CAP_DATA | GPT2RT__CAP_PROCS | GPT2RT__CAP_PROCS_DEV)) != 0;
    return 1;
}

/* one cell of the Markdown: the rules that refuse (backend b, mode, feature f) over the
   models and precisions it covers; "yes", "no (n, ...)" when every combination is
   refused, "some (n, ...)" when some are, "-" when none applies */
static size_t gpt2rt__cap_md_cell(char *buf, size_t cap, size_t n, unsigned b, unsigned mode, int m_only,
                                  unsigned prec_only, unsigned f) {
    unsigned long long hit = 0;
    int combos = 0, refused = 0;
    for (int m = 0; m < 4; m++) {
        if (m_only >= 0 && m != m_only) continue;
        if (!gpt2rt__cap_applies(f, m, mode)) continue;
        for (int p = GPT2RT_PRECISION_FP32; p <= GPT2RT_PRECISION_FP16; p++) {
            if (prec_only && !(prec_only & GPT2RT__CAP_PREC(p))) continue;
            if (b == GPT2RT__CAP_CPU && p != GPT2RT_PRECISION_FP32) continue; /* the CPU backend is fp32 */
            gpt2rt__cap_cell k = {b, mode, 1u << gpt2rt__cap_models[m][0], GPT2RT__CAP_HEAD(gpt2rt__cap_models[m][1]),
                                  GPT2RT__CAP_PREC(p), f | (f & GPT2RT__CAP_W16 ? (unsigned)GPT2RT__CAP_INFER : 0u)};
            int any = 0;
            for (int i = 0; i < GPT2RT__CAP_N_RULES; i++)
                if (gpt2rt__caps[i].stage != GPT2RT__CAP_CALL && gpt2rt__cap_match(&gpt2rt__caps[i], &k)) {
                    hit |= 1ull << i;
                    any = 1;
                }
            combos++;
            refused += any;
        }
    }
    if (!combos) { GPT2RT__PUT(" - |"); return n; }
    if (!refused) { GPT2RT__PUT(" yes |"); return n; }
    GPT2RT__PUT(" %s (", refused == combos ? "no" : "some");
    const char *sep = "";
    for (int i = 0; i < GPT2RT__CAP_N_RULES; i++)
        if (hit >> i & 1) { GPT2RT__PUT("%s%d", sep, i + 1); sep = ", "; }
    GPT2RT__PUT(") |");
    return n;
}

static size_t gpt2rt__cap_md_header(char *buf, size_t cap, size_t n, const char *first) {
    GPT2RT__PUT("| %s |", first);
    for (int b = 0; b < 2; b++)
        for (int m = 0; m < GPT2RT__CAP_N_MODES; m++) GPT2RT__PUT(" %s: %s |", b ? "CUDA" : "CPU", gpt2rt__cap_mode_short[m]);
    GPT2RT__PUT("\n|---|");
    for (int i = 0; i < 2 * GPT2RT__CAP_N_MODES; i++) GPT2RT__PUT("---|");
    GPT2RT__PUT("\n");
    return n;
}

/* the axes a rule constrains, in words */
static size_t gpt2rt__cap_md_rule(char *buf, size_t cap, size_t n, const gpt2rt__cap_rule *r) {
    static const char *heads[4] = {"LM", "REGRESSION", "NEXT_PATCH", "PATCH_DECODE"};
    static const char *precs[4] = {"DEFAULT", "FP32", "BF16", "FP16"};
    const char *sep = "";
    if (r->backends) { GPT2RT__PUT("backend %s", r->backends == GPT2RT__CAP_CUDA ? "CUDA" : r->backends == GPT2RT__CAP_CPU ? "CPU" : "any"); sep = "; "; }
    if (r->modes) {
        GPT2RT__PUT("%s", sep);
        const char *s2 = "";
        for (int m = 0; m < GPT2RT__CAP_N_MODES; m++)
            if (r->modes >> m & 1) { GPT2RT__PUT("%s%s", s2, gpt2rt__cap_mode_short[m]); s2 = " or "; }
        sep = "; ";
    }
    if (r->inputs) { GPT2RT__PUT("%sinput %s", sep, r->inputs & GPT2RT__CAP_PATCHES ? "PATCHES" : "TOKENS"); sep = "; "; }
    if (r->heads) {
        GPT2RT__PUT("%shead ", sep);
        const char *s2 = "";
        for (int h = 0; h < 4; h++) if (r->heads >> h & 1) { GPT2RT__PUT("%s%s", s2, heads[h]); s2 = " or "; }
        sep = "; ";
    }
    if (r->precisions) {
        GPT2RT__PUT("%sprecision ", sep);
        const char *s2 = "";
        for (int p = 1; p < 4; p++) if (r->precisions >> p & 1) { GPT2RT__PUT("%s%s", s2, precs[p]); s2 = " or "; }
        sep = "; ";
    }
    if (r->features) {
        GPT2RT__PUT("%swith ", sep);
        const char *s2 = "";
        for (int f = 0; f < GPT2RT__CAP_N_FEATURES; f++)
            if (r->features >> f & 1) { GPT2RT__PUT("%s%s", s2, gpt2rt__cap_feature_names[f]); s2 = " or "; }
    }
    return n;
}

GPT2RT_DEF size_t gpt2rt_capabilities_markdown(char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = 0;
    GPT2RT__PUT("# What runs where\n\n"
                "Generated from gpt2rt.h's capability table by `make support` (gpt2rt_capabilities_markdown);\n"
                "`make test` checks that this file is its output. A \"no\" or \"some\" names the rules below\n"
                "that refuse the combination: gpt2rt_plan or gpt2rt_create returns GPT2RT_ERR_NOT_IMPLEMENTED\n"
                "with the rule's message, before anything is allocated. \"-\": the combination is not a valid\n"
                "config (for instance bf16 on the CPU backend, which computes in fp32).\n\n"
                "Execution modes: one device; data parallel over the devices of one process; data parallel over\n"
                "processes (torchrun, mpirun), one device each or several; layer split over the devices of one\n"
                "process, or over processes.\n\n");
    GPT2RT__PUT("## Models and precisions\n\n");
    n = gpt2rt__cap_md_header(buf, cap, n, "model, precision");
    for (int m = 0; m < 4; m++)
        for (int p = GPT2RT_PRECISION_FP32; p <= GPT2RT_PRECISION_FP16; p++) {
            GPT2RT__PUT("| %s, %s |", gpt2rt__cap_model_names[m], p == GPT2RT_PRECISION_FP32 ? "fp32" : p == GPT2RT_PRECISION_BF16 ? "bf16" : "fp16");
            for (int b = 0; b < 2; b++)
                for (int mo = 0; mo < GPT2RT__CAP_N_MODES; mo++)
                    n = gpt2rt__cap_md_cell(buf, cap, n, b ? GPT2RT__CAP_CUDA : GPT2RT__CAP_CPU, 1u << mo, m,
                                            GPT2RT__CAP_PREC(p), 0);
            GPT2RT__PUT("\n");
        }
    GPT2RT__PUT("\n## Features (over every model and precision they apply to)\n\n");
    n = gpt2rt__cap_md_header(buf, cap, n, "feature");
    for (int f = 0; f < GPT2RT__CAP_N_FEATURES; f++) {
        GPT2RT__PUT("| %s |", gpt2rt__cap_feature_names[f]);
        for (int b = 0; b < 2; b++)
            for (int mo = 0; mo < GPT2RT__CAP_N_MODES; mo++)
                n = gpt2rt__cap_md_cell(buf, cap, n, b ? GPT2RT__CAP_CUDA : GPT2RT__CAP_CPU, 1u << mo, -1, 0, 1u << f);
        GPT2RT__PUT("\n");
    }
    GPT2RT__PUT("\n## Rules\n\n");
    for (int i = 0; i < GPT2RT__CAP_N_RULES; i++) {
        const gpt2rt__cap_rule *r = &gpt2rt__caps[i];
        GPT2RT__PUT("%d. ", i + 1);
        n = gpt2rt__cap_md_rule(buf, cap, n, r);
        GPT2RT__PUT(": %s. Instead: ", r->why);
        for (const char *p = r->instead; *p; p++) /* the placeholders as the fields they stand for */
            if (*p != '{' && *p != '}') GPT2RT__PUT("%c", *p);
        GPT2RT__PUT(". Refused by ");
        if (r->stage == GPT2RT__CAP_PLAN) GPT2RT__PUT("gpt2rt_plan and gpt2rt_create.\n");
        else if (r->stage == GPT2RT__CAP_CREATE) GPT2RT__PUT("gpt2rt_create (gpt2rt_plan plans it).\n");
        else {
            const char *sep = "";
            for (int k = 0; k < GPT2RT__CAP_N_CALLS; k++)
                if (r->calls >> k & 1) { GPT2RT__PUT("%s%s", sep, gpt2rt__cap_call_names[k]); sep = ", "; }
            GPT2RT__PUT(" on such a context (the context itself is created).\n");
        }
    }
    return n;
}

#endif /* GPT2RT__SRC_CONFIG_CAPS_H */
