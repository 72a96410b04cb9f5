/* api.h - the public API: types, constants and calls
   may call: nothing else in gpt2rt.h */
#ifndef GPT2RT__SRC_API_H
#define GPT2RT__SRC_API_H

#ifndef GPT2RT_H
#define GPT2RT_H

#include <stddef.h>
#include <stdint.h>

#ifndef GPT2RT_DEF
#ifdef GPT2RT_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT_DEF static __attribute__((unused))
#else
#define GPT2RT_DEF static
#endif
#else
#define GPT2RT_DEF extern
#endif
#endif

#define GPT2RT_VERSION_MAJOR 0
#define GPT2RT_VERSION_MINOR 1
#define GPT2RT_VERSION_PATCH 0
#define GPT2RT_VERSION (GPT2RT_VERSION_MAJOR * 10000 + GPT2RT_VERSION_MINOR * 100 + GPT2RT_VERSION_PATCH)
#define GPT2RT_VERSION_STRING "0.1.0"
#define GPT2RT_MAX_DEVICES 8
#define GPT2RT_ALIGN 64 /* bytes; every arena and every allocator-hook result */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpt2rt_result {
    GPT2RT_OK = 0,
    GPT2RT_ERR_INVALID_ARGUMENT, /* a config field or argument is out of range */
    GPT2RT_ERR_NOT_IMPLEMENTED,  /* the field exists, its implementation has not landed */
    GPT2RT_ERR_UNAVAILABLE,      /* backend not compiled in, or no device */
    GPT2RT_ERR_OUT_OF_MEMORY,    /* the plan exceeds the budget, or an allocation failed */
    GPT2RT_ERR_IO,               /* open, read, write or rename failed */
    GPT2RT_ERR_FORMAT,           /* a file is malformed or does not match the model */
    GPT2RT_ERR_STATE,            /* a call out of order (backward before forward...) */
    GPT2RT_RESULT_COUNT
} gpt2rt_result;

typedef enum gpt2rt_backend {
    GPT2RT_BACKEND_AUTO = 0, /* CUDA when compiled in and a GPU is present, else CPU */
    GPT2RT_BACKEND_CPU,
    GPT2RT_BACKEND_CUDA
} gpt2rt_backend;

typedef enum gpt2rt_precision {
    GPT2RT_PRECISION_DEFAULT = 0, /* fp32 */
    GPT2RT_PRECISION_FP32,
    GPT2RT_PRECISION_BF16, /* bf16 weights and activations, fp32 master weights */
    GPT2RT_PRECISION_FP16  /* fp16 with dynamic loss scaling */
} gpt2rt_precision;

typedef enum gpt2rt_input {
    GPT2RT_INPUT_TOKENS = 0, /* int32 token ids (B,T) */
    GPT2RT_INPUT_PATCHES     /* continuous series cut into patches (GPT4TS) */
} gpt2rt_input;

typedef enum gpt2rt_head {
    GPT2RT_HEAD_LM = 0,   /* tied LM head, cross-entropy loss */
    GPT2RT_HEAD_REGRESSION, /* linear head to `horizon` values per channel, MSE loss */
    /* aLLM4TS's sequence head, out_layer (patch_len <- C) at every position: */
    GPT2RT_HEAD_NEXT_PATCH,  /* stage 1: MSE of position n's output against patch n+1 */
    GPT2RT_HEAD_PATCH_DECODE /* stage 2: one placeholder per future patch, MSE as REGRESSION */
} gpt2rt_head;

/* which keys a query attends to (gpt2rt_config.attn_mask) */
typedef enum gpt2rt_attn_mask {
    GPT2RT_MASK_CAUSAL = 0,   /* every earlier position and itself (GPT-2) */
    GPT2RT_MASK_PLACEHOLDERS  /* PATCH_DECODE: causal over the history; a placeholder sees
                                 every history patch and itself, no other placeholder */
} gpt2rt_attn_mask;

typedef enum gpt2rt_recompute {
    GPT2RT_RECOMPUTE_NONE = 0,  /* keep every activation the backward needs */
    GPT2RT_RECOMPUTE_SELECTIVE, /* drop GELU and LayerNorm outputs, recompute them */
    GPT2RT_RECOMPUTE_FULL       /* keep every checkpoint_every-th layer input only */
} gpt2rt_recompute;
/* gpt2rt_config.checkpoint_every: every round(sqrt(n_layer))-th layer */
#define GPT2RT_CHECKPOINT_SQRT (-1)

typedef enum gpt2rt_parallel {
    GPT2RT_PARALLEL_NONE = 0,
    GPT2RT_PARALLEL_DATA,       /* each device holds the model, the batch is split (DDP) */
    GPT2RT_PARALLEL_LAYER_SPLIT /* the layers are split over the devices */
} gpt2rt_parallel;

/* how the processes of a multi-process run find each other (gpt2rt_config.rendezvous) */
typedef enum gpt2rt_rendezvous {
    GPT2RT_RENDEZVOUS_DEFAULT = 0, /* one process: none; several: MPI when launched by mpirun and
                                      compiled with GPT2RT_MPI, else ENV */
    GPT2RT_RENDEZVOUS_ENV,  /* TCP to MASTER_ADDR:MASTER_PORT as torchrun sets them (env://) */
    GPT2RT_RENDEZVOUS_TCP,  /* TCP to the config's master_addr:master_port */
    GPT2RT_RENDEZVOUS_FILE, /* a file every rank can read: rendezvous_file */
    GPT2RT_RENDEZVOUS_MPI   /* MPI (implementation compiled with -DGPT2RT_MPI) */
} gpt2rt_rendezvous;

/* parameter groups, a bitmask for gpt2rt_config.frozen */
typedef enum gpt2rt_group {
    GPT2RT_GROUP_TOKEN_EMBED = 1 << 0, /* wte (and so the tied LM head) */
    GPT2RT_GROUP_POS_EMBED = 1 << 1,   /* wpe */
    GPT2RT_GROUP_LAYERNORM = 1 << 2,   /* ln_1, ln_2, ln_f */
    GPT2RT_GROUP_ATTENTION = 1 << 3,   /* attn.c_attn, attn.c_proj */
    GPT2RT_GROUP_MLP = 1 << 4,         /* mlp.c_fc, mlp.c_proj */
    GPT2RT_GROUP_HEAD = 1 << 5         /* input projection and regression head (patches) */
} gpt2rt_group;

/* what a context's forward computes (gpt2rt_mode_set): as torch's model.train() /
   model.eval(), the mode decides dropout only */
typedef enum gpt2rt_mode {
    GPT2RT_MODE_TRAIN = 0, /* the default: dropout applies (when configured) */
    GPT2RT_MODE_EVAL       /* no dropout: validation, predictions, generation */
} gpt2rt_mode;

typedef enum gpt2rt_mem {
    GPT2RT_MEM_WEIGHTS = 0,
    GPT2RT_MEM_MASTER,
    GPT2RT_MEM_GRADS,
    GPT2RT_MEM_MOMENTS,
    GPT2RT_MEM_ACTIVATIONS,
    GPT2RT_MEM_TRANSIENT,
    GPT2RT_MEM_LOGITS,
    GPT2RT_MEM_WORKSPACE,
    GPT2RT_MEM_COMM,
    GPT2RT_MEM_KVCACHE, /* generation: keys and values of every layer, and a pass's scratch */
    GPT2RT_MEM_COUNT
} gpt2rt_mem;
/* the allocator hook is told GPT2RT_MEM_BOOKKEEPING for what is not in the plan:
   the context struct, tables, file buffers during load and save */
#define GPT2RT_MEM_BOOKKEEPING (-1)

typedef enum gpt2rt_log_level {
    GPT2RT_LOG_ERROR = 0,
    GPT2RT_LOG_WARN,
    GPT2RT_LOG_INFO,
    GPT2RT_LOG_DEBUG
} gpt2rt_log_level;

typedef void (*gpt2rt_log_fn)(void *user, gpt2rt_log_level level, const char *message);
/* must return memory aligned to GPT2RT_ALIGN bytes, or NULL */
typedef void *(*gpt2rt_alloc_fn)(void *user, size_t bytes, int category);
typedef void (*gpt2rt_free_fn)(void *user, void *ptr, int category);

/* Every field: zero means default. Defaults give the GPT-2 124M shape, B=4, T=64. */
typedef struct gpt2rt_config {
    /* model shape */
    int n_layer;      /* 0 -> 12 */
    int n_head;       /* 0 -> 12 */
    int n_embd;       /* 0 -> 768; a multiple of n_head */
    int vocab_size;   /* 0 -> 50257 */
    int padded_vocab; /* 0 -> vocab_size rounded up to a multiple of 128 */
    int max_seq_len;  /* 0 -> 1024 (positions in wpe) */
    gpt2rt_input input; /* PATCHES: seq_len is the lookback L in time steps */
    int patch_len, patch_stride, n_channels; /* patch inputs only: 0 -> 16, 8, 1 */
    gpt2rt_head head;   /* REGRESSION, NEXT_PATCH, PATCH_DECODE go with PATCHES (LM with TOKENS) */
    int horizon;     /* REGRESSION, PATCH_DECODE: 0 -> 96; NEXT_PATCH: 0 (none) */
    gpt2rt_attn_mask attn_mask; /* PLACEHOLDERS with PATCH_DECODE only; 0: CAUSAL */
    int revin_affine; /* patch inputs: RevIN's learned per-channel scale and shift
                         (PatchTST's), 0 = off (GPT4TS) */
    unsigned frozen; /* gpt2rt_group bits: no gradient, no update */

    /* dropout: probabilities in [0, 1), 0 = off; inverted (kept values times
       1/(1-p)), in GPT2RT_MODE_TRAIN only; the CUDA backend draws the same masks */
    float dropout;      /* the embeddings' output and both residual branches (after
                           attn.c_proj and mlp.c_proj): Hugging Face's embd_pdrop and
                           resid_pdrop */
    float attn_dropout; /* the attention probabilities: Hugging Face's attn_pdrop */
    float head_dropout; /* ln_f's output, before the head: out_layer for patches
                           (PatchTST's head_dropout); Hugging Face GPT-2 has none
                           before the LM head, so leave it 0 to match it */

    /* batch */
    int batch_size; /* micro-batch B (per rank under DATA parallel: calls take n_devices*B rows), 0 -> 4 */
    int seq_len;    /* T, 0 -> min(64, max_seq_len); patch inputs: the lookback L,
                       0 -> 336 */
    int grad_accum; /* micro-batches per optimizer step, 0 -> 1 (gpt2rt_step takes
                       grad_accum * batch_size rows) */

    /* generation (gpt2rt_generate): the KV cache, planned and allocated like the rest */
    int kv_batch;   /* sequences generated at once (rows of the cache), 0 -> no cache */
    int kv_len;     /* positions of a row, prompt + generated, 0 -> max_seq_len */
    int inference;  /* 1: a context for generation and forward-only evaluation: weights, the KV
                       cache, the logits and a forward workspace (two layers' buffers, reused),
                       no gradients, moments, master weights or saved activations; starts in
                       GPT2RT_MODE_EVAL; training calls are refused. 0: training (the default) */
    gpt2rt_precision inference_weights; /* inference = 1, CPU backend: BF16 stores every weight in bf16
                       (2 bytes, rounded to nearest even when set; fp32 sums): generation reads half
                       the bytes. 0 (DEFAULT) -> FP32. Refused on a training context and with FP16 */

    /* precision and memory */
    gpt2rt_precision precision;
    int tf32;           /* CUDA fp32 matrix products on TF32 tensor cores; 0 = off */
    float loss_scale;   /* fp16: initial dynamic loss scale, 0 -> 65536 */
    gpt2rt_recompute recompute;
    int checkpoint_every; /* full recompute: keep every k-th layer input, 0 -> 1,
                             GPT2RT_CHECKPOINT_SQRT -> round(sqrt(n_layer)) */
    int classifier_chunk; /* tokens whose logits are held at once: the LM head, the loss and
                             their backward run chunk by chunk and the logits arena is (chunk,
                             padded_vocab); 0 (or >= B*T) -> all B*T at once. CPU or CUDA,
                             one device or data parallel; gpt2rt_logits then answers STATE */

    /* parallel */
    gpt2rt_parallel parallel;
    int n_devices;                       /* 0 -> 1 */
    int device_ids[GPT2RT_MAX_DEVICES];  /* CUDA ordinals, all 0 -> local_rank*n_devices + 0,1,2,... */
    int allow_shared_device; /* test mode: device_ids may name one GPU twice (two virtual
                                devices on one GPU); 0: refused */
    int stage_first_layer[GPT2RT_MAX_DEVICES]; /* LAYER_SPLIT: the first layer of stage s for
                                s = 1..n_devices-1 (stage 0 starts at 0), increasing; all 0 ->
                                the planner's split (gpt2rt_plan_format shows it) */
    /* processes (torchrun, mpirun, clusters): data parallel runs over world_size
       processes x n_devices each. world_size 0: world_size, rank and local_rank come
       from the environment (WORLD_SIZE, RANK, LOCAL_RANK as torchrun sets them, else
       OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK as mpirun does), 1 process without them */
    int world_size;
    int rank;       /* with world_size set: this process, in [0, world_size) */
    int local_rank; /* with world_size set: this process's index on its node */
    gpt2rt_rendezvous rendezvous;
    char master_addr[64];      /* TCP: rank 0's address, "" -> 127.0.0.1 (ENV: MASTER_ADDR) */
    int master_port;           /* TCP: rank 0's port, 0 -> 29500 (ENV: MASTER_PORT) */
    char rendezvous_file[256]; /* FILE: a path every rank sees, absent before the run */
    float timeout_s;           /* rendezvous and each collective, 0 -> 300 s */
    int shard_optimizer; /* DATA only, ZeRO stage 1: each rank keeps the AdamW moments (and
                            master weights) of 1/n_devices of the parameters; 0 = off */

    /* optimizer and schedule (AdamW) */
    float lr;            /* peak learning rate, 0 -> 3e-4 */
    float min_lr_frac;   /* cosine decays to lr*min_lr_frac, 0 -> 0 */
    int warmup_steps;    /* linear warmup length, 0 -> none */
    int total_steps;     /* warmup + cosine length, 0 -> constant after warmup */
    float beta1;         /* 0 -> 0.9 */
    float beta2;         /* 0 -> 0.999 */
    float eps;           /* 0 -> 1e-8 */
    float weight_decay;  /* on 2-D weights only, 0 -> none */
    float grad_clip;     /* max global gradient norm, 0 -> 1.0, negative -> no clipping */

    /* runtime */
    gpt2rt_backend backend;
    int n_threads;          /* CPU threads, 0 -> OpenMP's default (OMP_NUM_THREADS), at most 1024;
                               DATA parallel: shared by the ranks, n_threads/n_devices each;
                               LAYER_SPLIT: by the stages of gpt2rt_step, likewise */
    uint64_t memory_budget; /* bytes per device, 0 -> no limit beyond the device's */
    uint64_t seed;          /* initialisation, 0 -> 1337 */
    gpt2rt_log_fn log;
    void *log_user;
    gpt2rt_alloc_fn alloc; /* both or neither, 0 -> aligned malloc/free */
    gpt2rt_free_fn free;
    void *alloc_user;
} gpt2rt_config;

typedef struct gpt2rt_step_stats {
    int64_t step;     /* optimizer steps taken so far, this one included */
    float loss;       /* mean loss of the step's batch */
    float grad_norm;  /* global L2 norm of the gradient, before clipping */
    float lr;         /* learning rate this update used */
    float loss_scale; /* fp16 dynamic loss scale; 1 otherwise */
    int skipped;      /* 1: the update was skipped (gradient not finite, or every target ignored) */
    int64_t tokens;   /* tokens in the step's batch (every micro-batch) */
    int micro_batches; /* backward calls this update summed */
    double seconds;   /* wall time of the call */
} gpt2rt_step_stats;

typedef struct gpt2rt_memory_plan {
    gpt2rt_config config; /* resolved: every default filled in */
    int64_t n_params;     /* parameters as Hugging Face counts them (vocab unpadded) */
    int64_t n_params_padded;
    int64_t n_trainable;    /* parameters that get gradients and moments (padded vocab included) */
    double flops_per_token; /* model FLOPs (forward + backward) per token, recompute excluded */
    double flops_per_step;  /* FLOPs of one optimizer step on all devices, recompute included */
    int64_t tokens_per_step;  /* micro-batch x grad_accum x data-parallel devices x processes x seq_len */
    double predicted_seconds; /* the advisor's coarse model of one optimizer step (for ranking) */
    int n_devices;
    uint64_t bytes[GPT2RT_MAX_DEVICES][GPT2RT_MEM_COUNT];
    uint64_t total[GPT2RT_MAX_DEVICES];    /* sum of the categories: what creation allocates */
    uint64_t overhead[GPT2RT_MAX_DEVICES]; /* beyond the arenas: estimated by gpt2rt_plan (CUDA
                                              context, cuBLASLt, NCCL; 0 on the CPU backend),
                                              measured by gpt2rt_plan_allocated */
    char error[512]; /* why gpt2rt_plan failed (the rest of a failed plan is zero) */
} gpt2rt_memory_plan;

/* what gpt2rt_fit may change (bits); 0 means GPT2RT_FIT_DEFAULT */
typedef enum gpt2rt_fit_allow {
    GPT2RT_FIT_BATCH = 1 << 0,     /* micro-batch down, grad_accum up: same global batch */
    GPT2RT_FIT_RECOMPUTE = 1 << 1, /* selective, then full recompute */
    GPT2RT_FIT_PARALLEL = 1 << 2,  /* data parallel <-> layer split (same devices) */
    GPT2RT_FIT_PRECISION = 1 << 3, /* fp32 -> bf16 (CUDA only; changes the numerics, so opt-in) */
    GPT2RT_FIT_SHARD = 1 << 4,     /* data parallel: shard_optimizer (ZeRO-1) on or off; opt-in, as it
                                      all-gathers the weights after every update */
    GPT2RT_FIT_CLASSIFIER = 1 << 5, /* token models: classifier_chunk = 1024 (the logits of 1024
                                       tokens at a time); opt-in, as gpt2rt_logits then has none */
    GPT2RT_FIT_DEFAULT = GPT2RT_FIT_BATCH | GPT2RT_FIT_RECOMPUTE | GPT2RT_FIT_PARALLEL
} gpt2rt_fit_allow;

typedef struct gpt2rt_param_info {
    char name[96];    /* Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2]; /* Hugging Face shape (Conv1D matrices are (in, out)) */
    int64_t numel;
    unsigned group;   /* one gpt2rt_group bit */
    int decay;        /* 1 if weight decay applies */
} gpt2rt_param_info;

typedef enum gpt2rt_param_what {
    GPT2RT_PARAM_VALUE = 0,
    GPT2RT_PARAM_GRAD,
    GPT2RT_PARAM_ADAM_M,
    GPT2RT_PARAM_ADAM_V
} gpt2rt_param_what;

typedef struct gpt2rt_ctx gpt2rt_ctx;

GPT2RT_DEF const char *gpt2rt_result_string(gpt2rt_result result);
GPT2RT_DEF const char *gpt2rt_mem_name(gpt2rt_mem category);

GPT2RT_DEF gpt2rt_result gpt2rt_plan(const gpt2rt_config *config, gpt2rt_memory_plan *plan);
/* The plan as a table into buf (snprintf's contract: the length it needs is returned). A
   refused or zeroed plan, or one whose config no longer resolves, prints "no plan: " and why. */
GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *plan, char *buf, size_t cap);
/* The support matrix as Markdown: which backend, execution mode, input, head, precision
   and feature run, and the rules that refuse the rest (each refusal is
   GPT2RT_ERR_NOT_IMPLEMENTED with that rule's message). docs/support.md is its output.
   Returns the length it needed, as snprintf does; buf may be NULL with cap 0. */
GPT2RT_DEF size_t gpt2rt_capabilities_markdown(char *buf, size_t cap);
/* A config like *config whose plan fits budget_bytes on every device (arenas plus the
   estimated overhead), with the same global batch, that the coarse throughput model
   ranks fastest among those `allow` reaches: *out gets it (*config itself when that
   fits and nothing reachable is predicted faster). explain (may be NULL) gets one
   line per change with the bytes it saves. GPT2RT_ERR_OUT_OF_MEMORY when nothing
   fits: *out is then the smallest found. budget_bytes must be > 0. */
GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget_bytes, unsigned allow,
                                    gpt2rt_config *out, char *explain, size_t cap);

/* The step-time model of the two-device modes (gpt2rt-mem prints it; the formulas and
   the figures' sources are in the manual, MULTIPLE DEVICES AND PROCESSES). hw: one
   GPU's datasheet figures and the link between two; the model's efficiency curve
   takes the rest. */
typedef struct gpt2rt_hardware {
    double flops_fp32; /* FLOP/s of fp32 matrix products without tensor cores */
    double flops_tf32; /* FLOP/s of fp32 products on tensor cores (config.tf32) */
    double flops_16;   /* FLOP/s of bf16/fp16 products with fp32 accumulation */
    double mem_bw;     /* device memory, bytes/s */
    double link_bw;    /* between two devices, bytes/s each way */
    double half_tokens; /* tokens of a micro-batch at which matrix products reach half the
                           peak (efficiency n / (n + half_tokens)); 0 -> 4096 */
} gpt2rt_hardware;

typedef struct gpt2rt_step_time {
    double compute;    /* s: forward + backward of every micro-batch on the busiest device */
    double update;     /* s: AdamW over the parameters that device updates */
    double comm;       /* s: its bytes over the link: gradients (data parallel), activations
                          and their gradients (layer split), the reduce-scatter (sharded) */
    double hidden;     /* s: the part of comm overlapped with the backward (gradient buckets) */
    double bubble;     /* s: layer split: pipeline fill and drain, (stages - 1) stage times */
    double gather;     /* s: sharded optimizer: the all-gather of the updated weights */
    double total;      /* compute + update + comm - hidden + bubble + gather */
    double one_device; /* s: the same global batch on one such device (if it fitted) */
    double comm_bytes; /* bytes the busiest device sends in one step */
} gpt2rt_step_time;

/* One optimizer step of config (parallel DATA or LAYER_SPLIT over n_devices, or one
   device) on hw, term by term; sharded (or config->shard_optimizer): data parallel
   with the optimizer state sharded over the ranks (ZeRO stage 1). err (may be NULL)
   gets the reason of a failure (the config's). */
GPT2RT_DEF gpt2rt_result gpt2rt_plan_step_time(const gpt2rt_config *config, const gpt2rt_hardware *hw, int sharded,
                                               gpt2rt_step_time *out, char *err, size_t cap);

/* The CPU backend's step-time model: the GPU model's FLOPs and bytes at rates this
   machine measured (its own matrix product and a streaming add), plus the ops between
   the products (LayerNorm, GELU, attention, residual adds, the cross-entropy) timed
   once each at the config's shape, a backward taken as twice its forward.
   gpt2rt_cpu_speed_measure times them (0.1-0.5 s) at config's shapes (config NULL: a
   124M-sized product, no ops) and thread count, once per process unless fresh (later
   calls return the first answer, seconds 0). The answers are kept in a table of this
   process: call these from one thread at a time. */
typedef struct gpt2rt_cpu_speed {
    double matmul_peak; /* FLOP/s of the fp32 matrix product */
    double half_rows;   /* rows (tokens) at which it reaches half of that; 0: measured at the config's rows */
    double head_peak;   /* FLOP/s of the classifier's product (tokens, C) x (C, Vp); 0: matmul_peak */
    double mem_bw;      /* bytes/s of a streaming read-modify-write */
    int n_threads;
    double seconds;     /* the calibration's wall time; 0 when the process's first answer was reused */
    /* seconds of one micro-batch's forward, at the config's shape: one layer's two
       LayerNorms and GELU; its attention and two residual adds; the cross-entropy over
       (tokens, Vp). 0 (all three): not measured, and the model moves the activations
       4 times and the logits 3 times at mem_bw instead */
    double layer_norm_gelu, layer_attention, cross_entropy;
} gpt2rt_cpu_speed;
GPT2RT_DEF gpt2rt_result gpt2rt_cpu_speed_measure(const gpt2rt_config *config, int fresh, gpt2rt_cpu_speed *out);
/* One optimizer step of a CPU config (one device) at speed (NULL: measured for config), term by term in out: compute (every micro-batch), update,
   total; the multi-device terms are 0. */
GPT2RT_DEF gpt2rt_result gpt2rt_plan_cpu_time(const gpt2rt_config *config, const gpt2rt_cpu_speed *speed,
                                              gpt2rt_step_time *out, char *err, size_t cap);

GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **ctx, const gpt2rt_config *config);
GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx);
/* why the latest call on ctx failed; "" when it succeeded (each call that takes a
   gpt2rt_ctx * clears it first). A context whose creation failed keeps that message. */
GPT2RT_DEF const char *gpt2rt_last_error(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_config gpt2rt_config_get(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_plan_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan);

/* inputs, targets: int32 (B,T); targets may be NULL (no loss); loss may be NULL */
GPT2RT_DEF gpt2rt_result gpt2rt_forward(gpt2rt_ctx *ctx, const int32_t *inputs,
                                        const int32_t *targets, float *loss);
GPT2RT_DEF gpt2rt_result gpt2rt_backward(gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
GPT2RT_DEF gpt2rt_result gpt2rt_step(gpt2rt_ctx *ctx, const int32_t *inputs,
                                     const int32_t *targets, gpt2rt_step_stats *stats);
/* The learning-rate schedule from the next update on: warmup_steps and total_steps as
   the config's fields (0 <= warmup <= total; total 0: constant after the warmup), for
   a run whose length is known only once it started (a time budget sized from the
   first steps' speed). The updates already taken count in it: the next one is step
   gpt2rt_step_stats.step of the new schedule. gpt2rt_config_get shows it. */
GPT2RT_DEF gpt2rt_result gpt2rt_schedule_set(gpt2rt_ctx *ctx, int warmup_steps, int total_steps);
/* GPT2RT_MODE_TRAIN (the default) or GPT2RT_MODE_EVAL: whether the forwards that
   follow apply dropout. Evaluate (validation loss, predictions, generation) in
   EVAL; a backward follows the mode of its forward. */
GPT2RT_DEF gpt2rt_result gpt2rt_mode_set(gpt2rt_ctx *ctx, gpt2rt_mode mode);
GPT2RT_DEF gpt2rt_mode gpt2rt_mode_get(const gpt2rt_ctx *ctx);
/* dst: (B,T,vocab_size) floats, count must be B*T*vocab_size; valid until backward */
GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count);

/* Time series (input = GPT2RT_INPUT_PATCHES, head = GPT2RT_HEAD_REGRESSION): the same
   calls with float windows. x: (B,L,M) floats, L = seq_len (the lookback), M =
   n_channels; y: (B,horizon,M) targets in the same scale, or NULL (no loss). The loss
   is the mean squared error of the de-normalised predictions. gpt2rt_backward and
   gpt2rt_update are shared with token models; gpt2rt_step_series takes grad_accum*B
   windows. */
GPT2RT_DEF gpt2rt_result gpt2rt_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
GPT2RT_DEF gpt2rt_result gpt2rt_step_series(gpt2rt_ctx *ctx, const float *x, const float *y,
                                            gpt2rt_step_stats *stats);
/* dst: (B,horizon,M) predictions of the last gpt2rt_forward_series in the original
   scale (also after gpt2rt_step_series: its last micro-batch's, before the update);
   count must be B*horizon*M; a load or gpt2rt_param_write forgets them */
GPT2RT_DEF gpt2rt_result gpt2rt_predictions(gpt2rt_ctx *ctx, float *dst, int64_t count);

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path);
/* The model of a Hugging Face GPT-2 config.json (path: the file, or the directory
   holding it) into *config: n_layer, n_head, n_embd, vocab_size, max_seq_len
   (n_positions), the dropouts it gives (resid_pdrop = embd_pdrop -> dropout,
   attn_pdrop -> attn_dropout), and for a patch model gpt2rt_weights_save wrote, its
   input, head, attn_mask, lookback (seq_len), patch_len, patch_stride, horizon,
   n_channels and revin_affine; other fields are left as they are, and so is *config on
   a failure. Every key is honoured, accepted as having no effect on the math, or
   refused naming it and its value (layer_norm_epsilon other than 1e-5, an
   activation_function other than gelu_new / gelu_pytorch_tanh, tie_word_embeddings
   false, n_inner other than null / 4*n_embd, ..., and keys that are not GPT2Config's or
   PretrainedConfig's): the table is at 4.3's config.json reader and in
   docs/embedding.md. err (may be NULL) gets the reason of a failure. */
GPT2RT_DEF gpt2rt_result gpt2rt_config_load(gpt2rt_config *config, const char *path, char *err, size_t cap);
GPT2RT_DEF gpt2rt_result gpt2rt_weights_save(gpt2rt_ctx *ctx, const char *dir);
GPT2RT_DEF gpt2rt_result gpt2rt_state_save(gpt2rt_ctx *ctx, const char *path);
GPT2RT_DEF gpt2rt_result gpt2rt_state_load(gpt2rt_ctx *ctx, const char *path);

GPT2RT_DEF int gpt2rt_param_count(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_param_info_get(const gpt2rt_ctx *ctx, int index, gpt2rt_param_info *info);
/* dst/src: numel floats in the Hugging Face layout of the named parameter */
GPT2RT_DEF gpt2rt_result gpt2rt_param_read(gpt2rt_ctx *ctx, const char *name, gpt2rt_param_what what,
                                           float *dst, int64_t count);
GPT2RT_DEF gpt2rt_result gpt2rt_param_write(gpt2rt_ctx *ctx, const char *name, const float *src,
                                            int64_t count);

#ifndef GPT2RT_NO_TOKENIZER
/* ---- text: the GPT-2 tokenizer and llm.c token shards --------------------
   Objects of their own, no gpt2rt_ctx needed. Like gpt2rt_create, a failed load
   still returns an object that holds only the message (read it with *_last_error,
   then free it; NULL only when even that could not be allocated). On a loaded one,
   *_last_error is why its latest call failed, "" after one that succeeded. One
   tokenizer per thread: encoding updates its cache. */
typedef struct gpt2rt_tokenizer gpt2rt_tokenizer;
typedef struct gpt2rt_shard gpt2rt_shard;

/* what gpt2rt_tok_encode does with the text "<|endoftext|>" */
typedef enum gpt2rt_tok_special {
    GPT2RT_TOK_SPECIAL_TEXT = 0, /* ordinary text: encoded as the 7 tokens of its bytes */
    GPT2RT_TOK_SPECIAL_ALLOW,    /* the special token (50256) */
    GPT2RT_TOK_SPECIAL_REFUSE    /* GPT2RT_ERR_INVALID_ARGUMENT naming its byte offset */
} gpt2rt_tok_special;

/* dir holds gpt2_merges.bin (the compact copy in data/), or encoder.json + vocab.bpe,
   or vocab.json + merges.txt (tried in that order) */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load(gpt2rt_tokenizer **tok, const char *dir);
/* vocab_json: encoder.json / vocab.json; merges: vocab.bpe / merges.txt, or with
   vocab_json NULL the compact file gpt2rt_tok_save writes. Every token but the 256
   single bytes and <|endoftext|> must be made by one merge (GPT-2: 50257 tokens,
   50000 merges): a merges file cut short is refused with both counts. */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_files(gpt2rt_tokenizer **tok, const char *vocab_json, const char *merges);
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_mem(gpt2rt_tokenizer **tok, const void *vocab_json, size_t vocab_len,
                                             const void *merges, size_t merges_len);
/* the compact copy: the merges only (ids follow from them), 4 bytes per merge */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_save(gpt2rt_tokenizer *tok, const char *path);
GPT2RT_DEF void gpt2rt_tok_free(gpt2rt_tokenizer *tok);
GPT2RT_DEF const char *gpt2rt_tok_last_error(const gpt2rt_tokenizer *tok);
GPT2RT_DEF int32_t gpt2rt_tok_vocab_size(const gpt2rt_tokenizer *tok); /* 50257 for GPT-2 */
GPT2RT_DEF int32_t gpt2rt_tok_eot(const gpt2rt_tokenizer *tok);        /* <|endoftext|>'s id, -1: none */
/* text: len bytes, any bytes (invalid UTF-8 is kept byte-exactly); ids: cap slots.
   *n_ids = the number of ids, also when cap is too small (then nothing useful is
   written and the result is GPT2RT_ERR_INVALID_ARGUMENT): cap >= len always suffices */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_encode(gpt2rt_tokenizer *tok, const void *text, size_t len,
                                           gpt2rt_tok_special special, int32_t *ids, size_t cap, size_t *n_ids);
/* out: cap bytes (not NUL-terminated); *n_bytes = the length, also when cap is too small */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_decode(gpt2rt_tokenizer *tok, const int32_t *ids, size_t n,
                                           void *out, size_t cap, size_t *n_bytes);
/* the bytes of one token (for streaming output), NULL for an id out of range */
GPT2RT_DEF const char *gpt2rt_tok_token(const gpt2rt_tokenizer *tok, int32_t id, size_t *len);

/* llm.c token files: 256 int32 header (magic 20240520, version 1, token count, zeros),
   then uint16 tokens, little endian */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_load(gpt2rt_shard **shard, const char *path);
GPT2RT_DEF gpt2rt_result gpt2rt_shard_load_mem(gpt2rt_shard **shard, const void *data, size_t len,
                                               const char *name);
/* tokens: n ids in [0, 65535] */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_from_tokens(gpt2rt_shard **shard, const int32_t *tokens, int64_t n);
GPT2RT_DEF gpt2rt_result gpt2rt_shard_save(gpt2rt_shard *shard, const char *path);
GPT2RT_DEF void gpt2rt_shard_free(gpt2rt_shard *shard);
GPT2RT_DEF const char *gpt2rt_shard_last_error(const gpt2rt_shard *shard);
GPT2RT_DEF int64_t gpt2rt_shard_count(const gpt2rt_shard *shard);
GPT2RT_DEF const uint16_t *gpt2rt_shard_tokens(const gpt2rt_shard *shard);
/* inputs, targets: int32 (B,T), the batch of data-parallel `rank` of n_ranks at `step`.
   The shard is cut into windows of T+1 tokens starting at multiples of T; each epoch
   visits them in an order drawn from (seed, epoch), and a step takes the next
   B * n_ranks of them, rank r the r-th B: no two ranks share a window, no window
   repeats within an epoch, the same arguments give the same batch. targets are
   inputs shifted by one token. */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_batch(gpt2rt_shard *shard, uint64_t seed, int64_t step, int rank,
                                            int n_ranks, int B, int T, int32_t *inputs, int32_t *targets);
#endif /* GPT2RT_NO_TOKENIZER */

#ifndef GPT2RT_NO_SERIES
/* ---- time series: ETT-format CSV files ------------------------------------
   An object of its own like the tokenizer: no gpt2rt_ctx needed; a failed load
   returns an object holding only the message (read it with
   gpt2rt_series_last_error, then free it). */
typedef struct gpt2rt_series gpt2rt_series;

typedef enum gpt2rt_series_split {
    GPT2RT_SERIES_TRAIN = 0,
    GPT2RT_SERIES_VAL,
    GPT2RT_SERIES_TEST,
    GPT2RT_SERIES_SPLIT_COUNT
} gpt2rt_series_split;

/* where the three splits lie (Time-Series-Library's borders) */
typedef enum gpt2rt_series_borders {
    GPT2RT_SERIES_BORDERS_AUTO = 0, /* from the name: ETTh* -> ETTH, ETTm* -> ETTM, else RATIO */
    GPT2RT_SERIES_BORDERS_ETTH,     /* hours: train [0, 8640), val [8640-L, 11520),
                                       test [11520-L, 14400) (12/4/4 months of 30 days) */
    GPT2RT_SERIES_BORDERS_ETTM,     /* the same in 15-minute rows: every border times 4 */
    GPT2RT_SERIES_BORDERS_RATIO,    /* 70/10/20: n_train = int(rows*0.7), n_test = int(rows*0.2) */
    GPT2RT_SERIES_BORDERS_NONE      /* no splits: every row is training (the scaler's too), validation
                                       and test empty; lookback rows suffice (what a forecast reads) */
} gpt2rt_series_borders;

/* what the loader does with a missing value (an empty field, NA, N/A, NaN, null) */
typedef enum gpt2rt_series_fill {
    GPT2RT_SERIES_FILL_REFUSE = 0, /* an error naming the line and the column */
    GPT2RT_SERIES_FILL_PREVIOUS,   /* the last value before it (a leading gap: the first after it) */
    GPT2RT_SERIES_FILL_LINEAR      /* the straight line between the values around it, by row (a
                                      gap at either end: the nearest value) */
} gpt2rt_series_fill;

typedef struct gpt2rt_series_desc {
    int lookback;        /* L >= 1, time steps of x */
    int horizon;         /* H >= 1, time steps of y */
    const char *target;  /* NULL or "": every numeric column; else that column alone (M = 1) */
    gpt2rt_series_borders borders;
    int no_scale;        /* 1: raw values; 0: StandardScaler fit on the training rows */
    const char *date_column; /* NULL or "": found: the first column named date, time, timestamp,
                                datetime or year (any case), else the first column (past a
                                skipped index) when its first row's field is not a number, else none; else the column of that name;
                                "none" in a header without a column so named: no date column */
    const char *columns; /* NULL or "": every column but the date (or target); else the channels,
                            comma-separated column names in the order given (not with target) */
    gpt2rt_series_fill fill;
    int no_date_column;  /* 1: no date column, every column is numeric, whatever the names
                            (date_column must be NULL or "") */
} gpt2rt_series_desc;

/* how the dates step from row to row, and so how gpt2rt_series_date continues them */
typedef enum gpt2rt_series_calendar {
    GPT2RT_SERIES_CALENDAR_NONE = 0,     /* no step: no date column, a date or number that does
                                            not parse, or no increasing step */
    GPT2RT_SERIES_CALENDAR_FIXED,        /* a fixed step of date_step (seconds for dates, the
                                            column's units for numbers) */
    GPT2RT_SERIES_CALENDAR_MONTHS,       /* every step a whole number of calendar months, the
                                            most common date_months (1 monthly, 3 quarterly, 12
                                            yearly); the day of the month and time of day kept */
    GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS /* weekdays only, mostly one weekday apart, weekends
                                            skipped (Friday -> Monday) */
} gpt2rt_series_calendar;

typedef struct gpt2rt_series_info {
    int64_t rows;     /* data rows (the header line not counted) */
    int channels;     /* M */
    gpt2rt_series_borders borders;  /* resolved (never AUTO) */
    int64_t begin[GPT2RT_SERIES_SPLIT_COUNT], end[GPT2RT_SERIES_SPLIT_COUNT]; /* rows [begin, end),
                                                                       the lookback included */
    int64_t windows[GPT2RT_SERIES_SPLIT_COUNT]; /* end - begin - L - H + 1 stride-1 windows */
    int date_column;  /* the file's column (0-based, a skipped index column counted) holding the
                         date; -1: none */
    double date_step; /* the most common step between consecutive dates, in seconds for dates
                         (YYYY-MM-DD[ HH:MM[:SS[.frac]]], '-' or '/', ' ' or 'T', or a period label:
                         2020-03, 1959Q1, 2020), in the column's own units for numbers; 0 when
                         unknown (no date column, a date that does not parse, or no increasing
                         step). Under MONTHS and BUSINESS_DAYS it is still that most common length
                         in seconds (31 days for monthly files, 1 day for business-daily ones),
                         a length for display; the continued dates follow date_calendar */
    int date_is_calendar; /* 1: the dates are calendar dates (date_step in seconds); 0: plain
                             numbers or no dates */
    gpt2rt_series_calendar date_calendar; /* how dates continue past the last row */
    int date_months;      /* MONTHS: the step in calendar months (1, 3, 12, any k >= 1); else 0 */
    int date_month_end;   /* MONTHS: 1 when every date is its month's last day, so continued
                             dates are too (Jan 31, then Feb 29 in a leap year, Mar 31); else 0 */
    int season;           /* the calendar's cycle in rows, a default season for seasonal models:
                             86400 / date_step for steps that divide a day (24 hourly, 96 every
                             15 minutes), 7 daily, 5 business-daily, 52 weekly, 12 / date_months
                             for months dividing a year (12 monthly, 4 quarterly), 1 (none) for
                             yearly, irregular or numeric dates or no date column */
    int index_column_skipped; /* 1: the file's first column is unnamed and counts the rows 0, 1,
                                 2, ... (or 1, 2, 3, ...): the index pandas' to_csv() writes,
                                 skipped (neither date nor channel) */
    int64_t filled;   /* missing values filled (desc.fill) */
} gpt2rt_series_info;

/* A CSV file: a header line, then one row per time step, every row as many fields
   as the header: a date column (found as desc.date_column says; never read as a
   value) and numbers (strtod syntax, finite) in every other column; lines end in
   LF, CRLF or CR. Every column has a name of its own (an empty or repeated name is
   an error naming the columns), but for the row index pandas' to_csv() writes: an
   unnamed first column counting the rows 0, 1, 2, ... (or 1, 2, 3, ...) is skipped
   (info.index_column_skipped). Dates are YYYY-MM-DD[( |T)HH:MM[:SS[.frac]][zone]] or
   period labels read as the period's first day: 2020-03, 1959Q1, and 2020 (a date
   column of four-digit numbers alone). A numeric column is never dropped: a column that is
   neither the date nor numeric is an error naming its line and column. A date
   written as one but not on the calendar (February 30, month 13, hour 25 or 24:01,
   minute or second 60, year 0; 24:00 is the day's end) is an error naming its line,
   row and text. name (may be NULL) labels messages and picks the AUTO borders. */
GPT2RT_DEF gpt2rt_result gpt2rt_series_load(gpt2rt_series **series, const char *path, const gpt2rt_series_desc *desc);
GPT2RT_DEF gpt2rt_result gpt2rt_series_load_mem(gpt2rt_series **series, const void *data, size_t len, const char *name,
                                                const gpt2rt_series_desc *desc);
GPT2RT_DEF void gpt2rt_series_free(gpt2rt_series *series);
/* why the latest call failed, "" after one that succeeded (a failed load keeps its message) */
GPT2RT_DEF const char *gpt2rt_series_last_error(const gpt2rt_series *series);
GPT2RT_DEF gpt2rt_result gpt2rt_series_info_get(const gpt2rt_series *series, gpt2rt_series_info *info);
/* channel m's column name, NULL when m is out of range */
GPT2RT_DEF const char *gpt2rt_series_column(const gpt2rt_series *series, int m);
/* channel m's scaler: value = (raw - mean) / std; std is the population standard
   deviation of the training rows (sklearn's StandardScaler), 1 where they are
   constant; mean 0, std 1 with no_scale */
GPT2RT_DEF gpt2rt_result gpt2rt_series_scaler(const gpt2rt_series *series, int m, double *mean, double *std);
/* every row's scaled values, (rows, M) */
GPT2RT_DEF const float *gpt2rt_series_values(const gpt2rt_series *series);
/* the date column's name, NULL when the file has none */
GPT2RT_DEF const char *gpt2rt_series_date_column(const gpt2rt_series *series);
/* row's date as the file writes it (cap bytes with the NUL, 48 suffice); a row at or
   past info.rows continues the last row's date as info.date_calendar says (FIXED: at
   info.date_step; MONTHS: date_months calendar months a row, the day of the month kept,
   month ends kept; BUSINESS_DAYS: one weekday a row), each from the last row's date, so
   forecasts can carry the dates that follow the data, in the file's form: its period
   label (1959Q2, 2020-04, 2021), its separators, its
   fields with or without a leading zero as the file writes them (2025/1/31 7:05 is
   followed by 2025/2/1 8:05), the fraction digits and the zone (Z, +05:30) of its last
   row. GPT2RT_ERR_STATE without a date column, or past the end with no known step;
   GPT2RT_ERR_INVALID_ARGUMENT when cap is too small (the message gives the size
   needed) or the date would leave the years 1..9999. On any error buf holds "" (when
   cap >= 1). */
GPT2RT_DEF gpt2rt_result gpt2rt_series_date(const gpt2rt_series *series, int64_t row, char *buf, size_t cap);
/* windows first .. first+B-1 of a split into x (B,L,M) and y (B,H,M) (the H rows
   after x's L). The validation and test windows come in time order; the training
   windows in an order drawn from (seed, epoch): each epoch visits every window
   once, the same arguments give the same batch. first + B must not exceed
   info.windows[split]. */
GPT2RT_DEF gpt2rt_result gpt2rt_series_batch(gpt2rt_series *series, gpt2rt_series_split split, uint64_t seed,
                                             int64_t epoch, int64_t first, int B, float *x, float *y);
/* ---- time series: a forecaster, saved with everything a forecast needs --------
   gpt2rt_forecaster_save writes, beside the weights gpt2rt_weights_save writes
   (model.safetensors, config.json), DIR/forecaster.json: the patch model's shape
   (input, lookback, patch, stride, horizon, head, mask, channels), the channels'
   names and scaler, RevIN's setting, the linear map and blend weight when used, the
   date column and its step, and the batch the forecast runs in. gpt2rt_forecaster_load
   builds a context from it alone and loads the weights; gpt2rt_forecaster_predict
   forecasts windows in the data's own units, exactly as the training run scored them
   (the same batches, the same linear map and blend). Like a series, a failed load
   returns an object holding only the message. */
typedef struct gpt2rt_forecaster gpt2rt_forecaster;

typedef struct gpt2rt_forecaster_desc {
    const gpt2rt_series *series; /* the training file as loaded: scaler, channel names, date
                                    column and step, borders (required) */
    const double *linear;        /* NULL, or the linear map W (lookback+1, horizon), the last row
                                    the bias, applied to each series' RevIN-normalised lookback
                                    (times its std, plus its mean) */
    int linear_residual;         /* 1: the model forecasts what the linear map leaves */
    double blend;                /* in [0, 1]: the forecast moves this fraction of the way to the
                                    linear map's */
    int batch;                   /* windows a forward (0: the context's batch_size) */
    const char *note;            /* NULL, or a line kept in forecaster.json (how it was trained) */
    gpt2rt_series_fill fill;     /* how training filled missing values: a forecast's file is read
                                    the same way (gpt2rt_forecaster_series_desc) */
    int season;                  /* the seasonal period in rows training used (its seasonal-naive
                                    baseline), 0: none */
    const struct gpt2rt_forecaster_intervals *intervals; /* NULL, or the conformal scores to keep
                                    (gpt2rt_forecaster_intervals_fit) */
} gpt2rt_forecaster_desc;

typedef struct gpt2rt_forecaster_info {
    int lookback, horizon, channels, batch;
    double date_step;            /* the training file's, 0 when unknown */
    gpt2rt_series_borders borders; /* the training file's (resolved) */
    int has_linear, linear_residual;
    double blend;
    gpt2rt_series_fill fill;     /* desc.fill at the save (REFUSE for a file saved without it) */
    int season;                  /* desc.season at the save (0: none, or a file saved without it) */
} gpt2rt_forecaster_info;

/* the context's model (input = PATCHES, head REGRESSION or PATCH_DECODE, one device or
   data parallel) and desc into dir, all of it or nothing: the forecaster is written to
   a new directory beside dir (dir.tmp-N, in dir's parent, which must be writable), then
   renamed to dir; an existing forecaster there is moved aside (dir.old-N) and removed
   after. A failure before the swap leaves dir as it was. An existing dir that holds
   anything but a forecaster (files other than forecaster.json, model.safetensors,
   config.json, or those without forecaster.json) is refused, naming the file: it is not
   deleted. Column names of any length are written whole. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_save(gpt2rt_ctx *ctx, const char *dir, const gpt2rt_forecaster_desc *desc);
/* base (may be NULL) gives the runtime fields: backend, precision (fp32 unless set; the
   training run's is kept as trained_precision), n_threads, batch_size (0: the saved
   batch), log, memory_budget; the model's fields come from dir. forecaster.json is refused
   (GPT2RT_ERR_FORMAT, naming the key and the range) for an unknown or repeated key, a
   value of the wrong type or outside its range (integers as integers; scaler_mean in
   +-FLT_MAX, scaler_std in [2.220446049250313e-15, FLT_MAX], linear in [-1e15, 1e15]),
   an empty or repeated column name; model.safetensors for a tensor the model lacks or
   a tensor missing (a token model's weights, revin.* against revin_affine). */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_load(gpt2rt_forecaster **fc, const char *dir, const gpt2rt_config *base);
GPT2RT_DEF void gpt2rt_forecaster_free(gpt2rt_forecaster *fc);
/* why the latest call failed, "" after one that succeeded (a failed load keeps its message) */
GPT2RT_DEF const char *gpt2rt_forecaster_last_error(const gpt2rt_forecaster *fc);
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_info_get(const gpt2rt_forecaster *fc, gpt2rt_forecaster_info *info);
/* channel m's name, the date column's (NULL: none) */
GPT2RT_DEF const char *gpt2rt_forecaster_column(const gpt2rt_forecaster *fc, int m);
GPT2RT_DEF const char *gpt2rt_forecaster_date_column(const gpt2rt_forecaster *fc);
/* channel m's scaler: scaled = (value - mean) / std */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_scaler(const gpt2rt_forecaster *fc, int m, double *mean, double *std);
/* the context it forecasts with (its config, plan, parameters) */
GPT2RT_DEF gpt2rt_ctx *gpt2rt_forecaster_ctx(gpt2rt_forecaster *fc);
/* x (n, lookback, M) -> out (n, horizon, M), both in the data's units. A value of x,
   scaled, or of the forecast that does not fit a float is refused
   (GPT2RT_ERR_INVALID_ARGUMENT, naming the window, step and channel); out is then not
   to be used. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out);
/* the same in the scaler's units (gpt2rt_series_values'; the papers' convention) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict_scaled(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out);
/* every window of a split of series (loaded as gpt2rt_forecaster_series_desc reads it;
   scaled by its own training rows) forecast in the scaler's units, in order, into out
   (info.windows[split], horizon, M): what the training run's scoring of that split
   forecast when series is its file */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict_split(gpt2rt_forecaster *fc, gpt2rt_series *series,
                                                         gpt2rt_series_split split, float *out);
/* a series desc reading a file as the forecaster's training read its file: lookback,
   horizon, the columns by name in its order (desc->columns points into fc, valid until
   gpt2rt_forecaster_free), the date column by name (or no_date_column), the borders,
   the fill training used (info.fill: a caller may set another after); the other fields
   are left as they were (no_scale: the caller's) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_series_desc(gpt2rt_forecaster *fc, gpt2rt_series_desc *desc);
/* forecasts (n, horizon, M) of the n windows of series starting at rows first, first + 1,
   ... as CSV text (*text malloc'd, NUL-terminated, *len bytes; free it): the header
   (with_origin: "origin,"; the date column's name, or "step" when the series has no dated
   step; the channels' names), then a line per window and future step: (with_origin) the
   window's last row's date, the step's date continuing the series' dates at their step
   (or its row number), the values as %.9g */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_csv(gpt2rt_forecaster *fc, const gpt2rt_series *series, int64_t first,
                                               int64_t n, const float *forecasts, int with_origin, char **text,
                                               size_t *len);
/* text (len bytes: gpt2rt_forecaster_csv's) into the file path, whole or not at all: to a
   new temporary file beside path (under POSIX beside the file a symbolic link names, with
   that file's permissions), renamed to path once complete; a failed write (a full disk,
   a file-size limit) removes it and leaves path as it was. Refused before anything is
   written (GPT2RT_ERR_INVALID_ARGUMENT): path the same file as data (the series' file;
   NULL: none), or path inside the directory fc was loaded from (gpt2rt_forecaster_path_clash) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_csv_write(gpt2rt_forecaster *fc, const char *path, const char *text,
                                                     size_t len, const char *data);
/* What writing output out could do to input in, from the file system before anything
   is written: the same file or directory under any spelling (./F, a symbolic or hard
   link: device and inode; two names not there yet: their directory and first
   component), out inside the directory in (a model's), or in inside the directory out
   writes into. Windows has no inodes: APART there. */
typedef enum gpt2rt_forecaster_clash {
    GPT2RT_FORECASTER_APART = 0,
    GPT2RT_FORECASTER_SAME_FILE,
    GPT2RT_FORECASTER_SAME_DIR,
    GPT2RT_FORECASTER_OUT_INSIDE,
    GPT2RT_FORECASTER_IN_INSIDE
} gpt2rt_forecaster_clash;
GPT2RT_DEF gpt2rt_forecaster_clash gpt2rt_forecaster_path_clash(const char *out, const char *in);
/* whether an output path can be written, checked before the work that fills it: dir (a
   forecaster, weights): an existing writable directory or a new name in one; else a
   new or writable file, not a directory, in a writable directory. GPT2RT_OK, else the
   reason in why (cap bytes; may be NULL), without the path: "the directory /x does not
   exist" */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_path_check(const char *path, int dir, char *why, size_t cap);

/* The least-squares linear map beside a patch model: the RevIN-normalised lookback of
   each series (mean, sqrt(biased variance + 1e-5)) with a trailing 1, z (lookback + 1),
   to the normalised horizon, W'z, on a series' scaled windows, every channel a series,
   weighted by its variance (the squared error in the scaler's units). The ridge (on
   the lookback's rows, not the bias) is the one of 0.1, 1, ..., 1e5 with the least
   validation MSE. gpt2rt_forecaster_linear_fit fills *lm (weights allocated: free with
   gpt2rt_forecaster_linear_free); a series without a validation window, or normal
   equations singular at every ridge, are refused through ctx's last error (ctx: any
   context, for the message). */
typedef struct gpt2rt_forecaster_linear {
    int64_t lookback, horizon;
    double *weights;        /* (lookback + 1, horizon), the last row the bias */
    double ridge, val_mse;  /* the chosen ridge and its validation MSE (scaled) */
} gpt2rt_forecaster_linear;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_linear_fit(gpt2rt_ctx *ctx, gpt2rt_series *series, gpt2rt_forecaster_linear *lm);
GPT2RT_DEF void gpt2rt_forecaster_linear_free(gpt2rt_forecaster_linear *lm);
/* the map's forecast of n windows x (n, lookback, M) minus each series' lookback mean,
   sd * W'z, into offset (n, horizon, M), and (means: may be NULL) each series' mean
   (n, M): the map's forecast is their sum */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_linear_offset(gpt2rt_ctx *ctx, const gpt2rt_forecaster_linear *lm,
                                                         const float *x, int64_t n, int64_t channels, float *offset,
                                                         float *means);
/* per-channel sums of squared and absolute errors of pred against truth, both (n,
   horizon, M), summed in double in index order, into sse and sae (M each) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_errors(const float *pred, const float *truth, int64_t n, int64_t horizon,
                                                  int64_t channels, double *sse, double *sae);
/* The baselines a forecast is measured against, on n windows x (n, lookback, M) and their
   truth y (n, horizon, M), both scaled, lookback, horizon and M the context's: [0] the
   last value repeated, [1] the seasonal naive (the lookback's last period rows
   repeated), [2] the linear map lm's forecast. mse[k] and mae[k] over every value
   (errors summed in double per channel, then over the channels); NaN where a baseline is
   not computed: period < 1 or > lookback, lm NULL. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_baselines(gpt2rt_ctx *ctx, const float *x, const float *y, int64_t n,
                                                     int64_t period, const gpt2rt_forecaster_linear *lm, double mse[3],
                                                     double mae[3]);

/* The numbers of a split's table: forecasts pred (n, horizon, M; scaled) of every window
   of a split of series (n = info.windows[split], in order) against their truth: per
   channel the sums of squared and absolute errors, scaled (times the scaler's std, and
   its square, in the data's units), and the baselines on the same windows
   (gpt2rt_forecaster_baselines with period and lm). ctx: a patch context of the
   series' lookback, horizon and channels; a split without a window is refused. */
typedef struct gpt2rt_forecaster_metric {
    double *sse, *sae;               /* (M) each, the caller's */
    int64_t windows;
    double base_mse[3], base_mae[3]; /* last value, seasonal naive, linear map; NaN: not computed */
} gpt2rt_forecaster_metric;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_metrics(gpt2rt_ctx *ctx, gpt2rt_series *series, gpt2rt_series_split split,
                                                   const float *pred, int64_t period,
                                                   const gpt2rt_forecaster_linear *lm, gpt2rt_forecaster_metric *out);

/* Scoring a split of a series with a patch context (gpt2rt_forecaster_score): every
   window, in batches of batch (the last filled up by repeating its last window: each
   series is forecast on its own, so the filler changes nothing), in eval mode; with a
   linear map the forecast is the model's (plus the map's offset when linear_residual:
   the model was trained on what the map leaves), moved blend of the way to the map's.
   Errors are summed in double over the real windows only. */
typedef struct gpt2rt_forecaster_score_desc {
    int batch;                              /* windows a forward pass takes (required) */
    const gpt2rt_forecaster_linear *linear; /* NULL: the model alone */
    int linear_residual;
    double blend;                           /* in [0, 1] */
    int64_t drop_batch;                     /* the *_full sums count whole batches of this many windows only
                                               (a drop_last loader's); 0: batch */
    float *keep;                            /* NULL, or (keep_windows, horizon, M): the first windows' forecasts */
    int64_t keep_windows;
} gpt2rt_forecaster_score_desc;
typedef struct gpt2rt_forecaster_scores {
    double sse, sae;              /* every window's squared and absolute errors (scaled) */
    int64_t windows;
    double sse_full, sae_full;    /* those of the whole drop_batch batches */
    int64_t windows_full;
    double see, sed, sdd;         /* with a linear map, e = the forecast before the blend - truth, d = the
                                     map's forecast - that: sums of e^2, e d, d^2; the blend w minimising the
                                     SSE see + 2 w sed + w^2 sdd is -sed / sdd */
} gpt2rt_forecaster_scores;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_score(gpt2rt_ctx *ctx, gpt2rt_series *series, gpt2rt_series_split split,
                                                 const gpt2rt_forecaster_score_desc *desc,
                                                 gpt2rt_forecaster_scores *scores);

/* Training a patch context on a series (gpt2rt_forecaster_train), GPT4TS-style: each
   epoch visits the training windows in a seeded order (gpt2rt_series_batch with seed
   and the epoch) in steps of batch windows, then scores the validation split
   (gpt2rt_forecaster_score); the best epoch's weights are kept (early stopping after
   patience epochs without a lower validation MSE) and restored at the end. With a
   linear map and linear_residual the model trains on what the map leaves, and
   start_from_linear makes epoch 0 the map alone (out_layer.weight zero; training keeps
   what improves on it, and nothing if nothing does); blend_linear then chooses on
   validation the blend toward the map in [0, 1]. max_steps > 0 stops after that many
   steps (result.max_steps_reached, nothing restored). Nothing is printed: progress, when
   set, is called after every step and after every epoch's validation. */
typedef enum gpt2rt_forecaster_event {
    GPT2RT_FORECASTER_STEP = 0,   /* a training step: epoch, step of steps, stats */
    GPT2RT_FORECASTER_EPOCH,      /* an epoch scored on validation (epoch 0: the linear map alone) */
    GPT2RT_FORECASTER_BASELINE    /* pretraining, before the first step: val_mse is the last patch
                                     repeated's (gpt2rt_forecaster_pretrain_result.naive_val_mse) */
} gpt2rt_forecaster_event;
typedef struct gpt2rt_forecaster_progress {
    gpt2rt_forecaster_event event;
    int epoch;                    /* 1-based; 0: the linear map alone */
    int64_t step, steps;          /* STEP: steps done in this epoch, of steps */
    double epoch_seconds;         /* STEP: since the epoch began */
    const gpt2rt_step_stats *stats; /* STEP: the step's */
    double train_mse, val_mse;    /* EPOCH: the epoch's mean step loss (0 for epoch 0), its validation MSE */
    double train_seconds, val_seconds; /* EPOCH */
    int best;                     /* EPOCH: the lowest validation MSE so far */
    int stop;                     /* EPOCH: patience epochs without a better one: training stops */
} gpt2rt_forecaster_progress;
typedef struct gpt2rt_forecaster_train_desc {
    int batch;                    /* windows a step takes (required; a data parallel context's global batch) */
    int epochs;                   /* at most (required) */
    int patience;                 /* 0: never stop early */
    int64_t steps_per_epoch;      /* 0 or more than fit: every whole batch of the training windows */
    uint64_t seed;                /* the order of the training windows */
    const gpt2rt_forecaster_linear *linear; /* NULL: the model alone */
    int linear_residual, start_from_linear, blend_linear;
    int max_steps;                /* 0: no limit */
    void (*progress)(void *user, const gpt2rt_forecaster_progress *p);
    void *user;
} gpt2rt_forecaster_train_desc;
typedef struct gpt2rt_forecaster_train_result {
    int best_epoch;               /* 0: the linear map alone; -1: none */
    double best_val_mse;
    int64_t steps_per_epoch, steps;
    int max_steps_reached;
    double step_seconds;          /* the steps' own time, summed */
    double blend;                 /* blend_linear's choice, else 0 */
    double blend_val_mse, model_val_mse, linear_val_mse; /* blend_linear: validation MSE blended, at 0, at 1 */
} gpt2rt_forecaster_train_result;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_train(gpt2rt_ctx *ctx, gpt2rt_series *series,
                                                 const gpt2rt_forecaster_train_desc *desc,
                                                 gpt2rt_forecaster_train_result *result);
/* The settings of published forecasting runs (timeseries --preset), as a config and a
   train desc to start from: input PATCHES with head (REGRESSION: GPT4TS's flatten head,
   PATCH_DECODE: aLLM4TS stage 2, with the placeholder mask; NEXT_PATCH: stage 1, with
   n_channels 1), the shape, patching, optimiser (cosine to 0, clip 1), dropout, frozen
   groups, recompute, batch_size = desc.batch (one device's), epochs 10, patience 3,
   and for the cpu recipe's REGRESSION head the linear map (linear_residual,
   blend_linear; the caller fits it and sets desc.linear). Everything else is zero: the
   caller sets n_channels and horizon from its data, total_steps, seed, and any
   setting it wants otherwise. GPT4TS freezes attention and MLP only over GPT-2's
   weights: frozen is 0 here, to set when weights are loaded. */
typedef enum gpt2rt_forecaster_recipe {
    GPT2RT_FORECASTER_RECIPE_CPU = 0, /* lookback 336, patch 16 stride 16, 1 layer, 2 heads, width 16,
                                         attention + MLP frozen at their random init, lr 1e-4, batch 16,
                                         head dropout 0.3, riding on the linear map (chosen on
                                         ETTh2's validation split: README "Time series") */
    GPT2RT_FORECASTER_RECIPE_GPT4TS,  /* GPT4TS's ETTh setting: lookback 336, patch 16 stride 8, 6 layers,
                                         12 heads, width 768, lr 1e-4, batch 256, full recompute */
    GPT2RT_FORECASTER_RECIPE_ALLM4TS  /* aLLM4TS's scripts, GPT-2's 6 layers: pretrain lookback 1024, patch
                                         16 stride 16, lr 1e-4, batch 2048 series, dropout 0.2, nothing
                                         frozen; finetune lookback 336, patch 16 stride 8, lr 3e-3, batch
                                         256, attention + MLP frozen; full recompute */
} gpt2rt_forecaster_recipe;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_recipe_get(gpt2rt_forecaster_recipe recipe, gpt2rt_head head,
                                                      gpt2rt_config *config, gpt2rt_forecaster_train_desc *desc);
/* aLLM4TS stage 1: causal next-patch pre-training of a NEXT_PATCH context (n_channels
   1) on the training rows of n series pooled: each channel of each window is one
   univariate series of lookback steps, batch of them a step, the series taking turns
   while each has a whole batch left in the epoch (at most desc.steps_per_epoch steps,
   0: all of them). After each epoch the mean next-patch MSE over the whole batches of
   every validation series decides early stopping (no validation series: the last epoch
   is kept); the best epoch's weights are restored. Before the first step (unless
   max_steps) the baseline, each next patch forecast as the patch before it repeated in
   RevIN's scale over the same batches, is reported (BASELINE) and kept in
   naive_val_mse. desc's linear fields are not used. */
typedef struct gpt2rt_forecaster_pretrain_result {
    int best_epoch;                /* 0: none */
    double best_val_mse, naive_val_mse; /* NAN: no validation batch */
    int64_t steps_per_epoch, steps;
    int max_steps_reached;
    double step_seconds;
} gpt2rt_forecaster_pretrain_result;
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_pretrain(gpt2rt_ctx *ctx, gpt2rt_series *const *series, int n,
                                                    const gpt2rt_forecaster_train_desc *desc,
                                                    gpt2rt_forecaster_pretrain_result *result);

/* ---- evaluating a forecaster: per channel, in the data's units ----
   A series given to these calls has the forecaster's lookback, horizon and channels
   (read it with gpt2rt_forecaster_series_desc); its values are taken in the data's units
   (its values unscaled with its own scaler: exact when loaded with no_scale = 1) and
   forecast with gpt2rt_forecaster_predict. The baselines are scored on the same windows:
   the last value repeated, the seasonal naive (the lookback's last season rows repeated)
   and the linear map (the forecaster's own, or lm), applied as the forecaster applies
   its map: to the windows scaled by the forecaster's scaler, the result unscaled. */
typedef enum gpt2rt_forecaster_method {
    GPT2RT_FORECASTER_MODEL = 0,      /* the forecaster's forecast */
    GPT2RT_FORECASTER_LAST_VALUE,     /* the lookback's last value repeated */
    GPT2RT_FORECASTER_SEASONAL_NAIVE, /* the lookback's last season rows repeated */
    GPT2RT_FORECASTER_LINEAR_MAP,     /* the linear map */
    GPT2RT_FORECASTER_METHODS
} gpt2rt_forecaster_method;
typedef struct gpt2rt_forecaster_channel_eval {
    double mse[GPT2RT_FORECASTER_METHODS], mae[GPT2RT_FORECASTER_METHODS]; /* data units (MSE in their
                                      square), by method; NaN where a baseline is not computed */
    gpt2rt_forecaster_method best;    /* the baseline of least MSE (the first of equals) */
    int model_better;                 /* 1: the model's MSE is below best's */
} gpt2rt_forecaster_channel_eval;
/* "model", "last value", "seasonal naive", "linear map"; NULL out of range */
GPT2RT_DEF const char *gpt2rt_forecaster_method_name(gpt2rt_forecaster_method method);
/* every window of split: ch (info.channels entries) per channel, *windows (may be NULL)
   the windows scored. season: the seasonal naive's period in rows, 0: the forecaster's
   (info.season; none: NaN); lm: NULL: the forecaster's map (none: NaN). A split without a
   window is refused. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_evaluate(gpt2rt_forecaster *fc, gpt2rt_series *series,
                                                    gpt2rt_series_split split, int season,
                                                    const gpt2rt_forecaster_linear *lm, int64_t *windows,
                                                    gpt2rt_forecaster_channel_eval *ch);
/* a backtest: the last origins windows of the whole series, whatever its splits (window
   w's lookback ends at row rows - horizon - origins + w, its horizon the rows after), as
   gpt2rt_forecaster_evaluate scores a split; forecasts (may be NULL): (origins, horizon,
   M), data units. origins < 1, or more than the rows hold (one origin needs lookback +
   horizon rows, each further one a row more), is refused naming the numbers. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_backtest(gpt2rt_forecaster *fc, gpt2rt_series *series, int64_t origins,
                                                    int season, const gpt2rt_forecaster_linear *lm,
                                                    gpt2rt_forecaster_channel_eval *ch, float *forecasts);

/* Split-conformal intervals. On a validation split of n windows, each channel m and step
   h has n scores, the absolute errors |forecast - truth| in the data's units. For a level
   a in (0, 1) the half-width is the k-th smallest score, k = ceil((n + 1) a): the
   empirical quantile at level k / n, which covers a new error with probability at least
   k / (n + 1) >= a when errors are exchangeable (the new error is one of n + 1, equally
   likely at any rank; the plain ceil(n a)-th covers only ceil(n a) / (n + 1), below a;
   a series' errors are only roughly exchangeable: its behaviour may drift, which the
   test split's coverage shows). A level with k > n is refused, naming n and the windows
   it needs (n >= a / (1 - a)): an infinite width would print as a forecast. Kept: for n <= 100 every score; else the
   order statistics at the ranks ceil((n + 1) j / 100), j = 1..99, and those of levels
   0.995, 0.999 and n, so a level between them takes the next kept rank up: at least as
   wide as its exact interval (conservative, never narrower). */
typedef struct gpt2rt_forecaster_intervals {
    int64_t windows;              /* n: the validation windows the scores come from */
    int64_t horizon, channels;
    int64_t ranks;                /* G: order statistics kept per channel and step */
    int64_t *rank;                /* (G) ascending in [1, n], the last n */
    float *score;                 /* (channels, horizon, G): channel m's rank[g]-th smallest absolute error
                                     at step h, data units, rounded up to a float */
} gpt2rt_forecaster_intervals;
/* the scores of ctx's forecasts of series' validation split, scored as
   gpt2rt_forecaster_score scores it with desc (its keep fields unused), unscaled with
   series' scaler: for gpt2rt_forecaster_desc.intervals (the same series as desc.series),
   so a saved forecaster keeps them (forecaster.json's interval_* keys). Free with
   gpt2rt_forecaster_intervals_free. */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_intervals_fit(gpt2rt_ctx *ctx, gpt2rt_series *series,
                                                         const gpt2rt_forecaster_score_desc *desc,
                                                         gpt2rt_forecaster_intervals *iv);
GPT2RT_DEF void gpt2rt_forecaster_intervals_free(gpt2rt_forecaster_intervals *iv);
/* the forecaster's scores from its validation split of series, through the forecaster,
   replacing any it has (kept until it is freed; a save from a context keeps them only
   through desc.intervals): for a forecaster saved without them */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_calibrate(gpt2rt_forecaster *fc, gpt2rt_series *series);
/* the forecaster's scores (pointers into fc, valid until it is freed or calibrated);
   GPT2RT_ERR_STATE, with a message, when it has none (a forecaster.json saved without
   them: intervals are unavailable until gpt2rt_forecaster_calibrate) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_intervals_get(gpt2rt_forecaster *fc, gpt2rt_forecaster_intervals *iv);
/* the half-widths (horizon, M) at level, and (may be NULL) the coverage the kept rank
   guarantees, rank / (n + 1) >= level */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_interval_width(gpt2rt_forecaster *fc, double level, double *half,
                                                          double *guaranteed);
/* lo and hi (n, horizon, M) around forecasts (n, horizon, M): forecast -+ the half-width,
   rounded outward to floats */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_interval(gpt2rt_forecaster *fc, double level, const float *forecasts,
                                                    int64_t n, float *lo, float *hi);
/* the share of split's true values inside the level interval around the forecaster's
   forecasts: per channel (M, may be NULL) and over all, *windows (may be NULL) */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_coverage(gpt2rt_forecaster *fc, gpt2rt_series *series,
                                                    gpt2rt_series_split split, double level, double *per_channel,
                                                    double *all, int64_t *windows);
#endif /* GPT2RT_NO_SERIES */

/* ---- text: generation with a KV cache (a context with config.kv_batch > 0) ----
   The prompts run through the model once (the prefill), then each new token alone,
   attending to the keys and values the cache keeps: no recompute of the prefix. */

/* called once per new token, rows in ascending order within a step: the token
   chosen for `row` and the vocab_size logits it was drawn from (before temperature;
   valid during the call only). Return nonzero to end that row (the token is kept). */
typedef int (*gpt2rt_token_fn)(void *user, int row, int32_t token, const float *logits, int64_t n_logits);

/* Zero means default: greedy decoding (Hugging Face's generate default) until the
   row is full or <|endoftext|>. */
typedef struct gpt2rt_sample {
    float temperature;  /* 0 -> greedy (argmax, the lowest id among equals); > 0: sample from
                           softmax(logits / temperature) */
    int top_k;          /* sampling: only the top_k most likely tokens, 0 -> all */
    float top_p;        /* sampling: only the smallest set of most likely tokens whose probability
                           reaches top_p (the nucleus, after top_k), in (0, 1]; 0 -> 1 */
    uint64_t seed;      /* sampling: 0 -> config.seed; row b draws from its own stream, so a row's
                           text depends on the seed and its prompt, not on B or the threads */
    int max_new_tokens; /* per row, 0 -> until the row holds min(row_cap, kv_len) tokens; more than
                           the row has room for is refused, naming how many fit */
    int32_t eot;        /* the token that ends a row (kept in it): 0 -> 50256 (<|endoftext|>) when
                           vocab_size > 50256, else none; negative: none */
    gpt2rt_token_fn on_token; /* may be NULL */
    void *user;
} gpt2rt_sample;

/* tokens: (B, row_cap) int32; row b starts with its prompt of lens[b] ids, and the new
   ids are appended to it: lens[b] becomes the row's length. B <= config.kv_batch,
   1 <= lens[b] <= min(row_cap, kv_len); ids in [0, vocab_size); with max_new_tokens
   > 0, lens[b] + max_new_tokens <= min(row_cap, kv_len) (else GPT2RT_ERR_INVALID_ARGUMENT
   before anything runs, the message naming the numbers and how many would fit). A row
   ends at its eot, after max_new_tokens, when it holds min(row_cap, kv_len) tokens
   (max_new_tokens = 0), or when on_token says so. opts NULL: the defaults. Deterministic: the same weights,
   prompts and options give the same ids, whatever the thread count. The training
   state (logits, gradients) is untouched. */
GPT2RT_DEF gpt2rt_result gpt2rt_generate(gpt2rt_ctx *ctx, const gpt2rt_sample *opts, int B, int32_t *tokens,
                                         int64_t row_cap, int64_t *lens);

#ifdef __cplusplus
}
#endif
#endif /* GPT2RT_H */

#endif /* GPT2RT__SRC_API_H */
