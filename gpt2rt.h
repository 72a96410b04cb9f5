/* gpt2rt.h - a single-header training runtime for GPT-2, in C.

   ============================================================================
   USING IT
   ============================================================================
   In exactly one C or C++ file of your program:

       #define GPT2RT_IMPLEMENTATION
       #include "gpt2rt.h"

   Everywhere else include it without the define. Compile the implementation file
   with OpenMP (-fopenmp) to use every core; without it the CPU backend runs on one.
   Compiled by a C/C++ compiler the implementation holds the CPU backend (fp32).
   Compiled by nvcc from a .cu file it also compiles; the CUDA backend itself has
   not landed yet (its kernels are in kernels/staging/, compile-checked) and
   creating a CUDA context reports GPT2RT_ERR_NOT_IMPLEMENTED.

   Version: GPT2RT_VERSION (major * 10000 + minor * 100 + patch, for #if) and
   GPT2RT_VERSION_STRING ("0.1.0"). Little-endian hosts only (x86-64, AArch64...):
   the safetensors files are little-endian and are read and written with memcpy;
   a big-endian build stops with #error.

   ============================================================================
   CONFIGURATION MACROS (define before the include that has the implementation;
   none is needed)
   ============================================================================
       GPT2RT_IMPLEMENTATION  compile the implementation into this file (exactly one)
       GPT2RT_STATIC          every API function becomes `static` (private to one file)
       GPT2RT_DEF             linkage of the API functions (default `extern`); overrides
                              GPT2RT_STATIC
       GPT2RT_SGEMM_NO_SIMD   the CPU matrix product and AdamW use portable C only (no
                              AVX2/AVX-512 paths, no <immintrin.h>); results then differ
                              from the SIMD build's in the last bits, still
                              deterministic
       GPT2RT_SGEMM_KC        CPU matrix-product blocking (floats; defaults 256, 384,
       GPT2RT_SGEMM_MC        768, tuned for 48 KiB L1 / 2 MiB L2). KC is the slice
       GPT2RT_SGEMM_NC        of the inner dimension summed in one pass, so changing
                              it changes the summation order (results differ in the
                              last bits); MC and NC change only the speed. KC, MC, NC
                              must satisfy KC >= 1, MC >= 14, NC >= 32 (checked when
                              compiling: every SIMD tile fits a block).
       GPT2RT_SGEMM_FORCE_PATH  testing the kernels: 1 = portable C, 2 = AVX2 even
                              where AVX-512 exists (kernels/cpu_matmul.c uses it)
       GPT2RT__TEST_HOOKS     private, tests only: fault injection (a failing rename);
                              never define it in a program
   Compile with OpenMP (-fopenmp, which defines _OPENMP) for threads; compile with
   nvcc (__CUDACC__) for the CUDA backend.

   ============================================================================
   THREADS
   ============================================================================
   - A context is not thread-safe: the calls on one context must not overlap (the
     application serialises them). Different contexts may be used from different
     threads at the same time: the library has no global or static mutable state.
   - gpt2rt_plan, gpt2rt_plan_format, gpt2rt_fit, gpt2rt_config_load,
     gpt2rt_result_string and gpt2rt_mem_name touch no context and may run anywhere,
     concurrently.
   - Each call runs on the calling thread plus, with OpenMP, parallel regions of
     config.n_threads threads that end before it returns. Never call gpt2rt from
     inside an OpenMP parallel region: its own regions would then nest (one thread
     each, or n_threads^2 threads with nesting enabled).
   - The hooks (log, alloc, free) are called only on the thread that made the gpt2rt
     call, never from inside a parallel region, and before that call returns; they
     may be called while the context is in an intermediate state, so they must not
     call gpt2rt on the same context. A log message is valid during the callback
     only.

   ============================================================================
   A WHOLE PROGRAM
   ============================================================================
       gpt2rt_config cfg = {0};            // zero means default: GPT-2 124M shape
       cfg.batch_size = 4; cfg.seq_len = 64;
       gpt2rt_ctx *ctx;
       if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
           fprintf(stderr, "%s\n", gpt2rt_last_error(ctx)); gpt2rt_free(ctx); return 1;
       }
       gpt2rt_weights_load(ctx, "gpt2/model.safetensors");    // optional: Hugging Face weights
       for (int step = 0; step < 100; step++) {
           gpt2rt_step_stats st;
           gpt2rt_step(ctx, inputs, targets, &st);  // int32 (B,T) each
           printf("step %d loss %.4f\n", step, st.loss);
       }
       gpt2rt_weights_save(ctx, "out");   // out/model.safetensors + out/config.json
       gpt2rt_free(ctx);

   ============================================================================
   THE MODEL AND ITS CONVENTIONS
   ============================================================================
   GPT-2 exactly as Hugging Face `GPT2LMHeadModel` computes it in fp32: token +
   position embeddings; per layer x += attn(ln_1(x)); x += mlp(ln_2(x)) with causal
   multi-head self-attention and the tanh GELU ("gelu_new"); ln_f; an LM head tied
   to the token embedding. LayerNorm epsilon is 1e-5. No dropout.
   - The vocabulary is padded to `padded_vocab` rows (a multiple of 128 by default)
     so that the head's matrix product has friendly sizes; padded rows stay zero
     and padded logits never enter the loss.
   - Loss: mean cross-entropy over the targets that are >= 0; a negative target
     (Hugging Face uses -100) is ignored. Inputs must lie in [0, vocab_size).
   - Weights are stored (out, in) like nn.Linear; the Hugging Face files store the
     Conv1D matrices (in, out): load and save transpose them, and
     gpt2rt_param_read/write speak the Hugging Face layout.
   - AdamW as torch.optim.AdamW (decoupled weight decay, bias correction), with
     weight decay on 2-D weights only (embeddings and matrices; never biases or
     LayerNorm parameters), global-norm gradient clipping as
     torch.nn.utils.clip_grad_norm_ (coefficient clip/(norm+1e-6)), and the
     learning rate of optimizer step s (0-based):
         s <  warmup:              lr * (s+1) / warmup
         s >= warmup, total == 0:  lr
         otherwise:                lr_min + (lr - lr_min) * (1 + cos(pi*r)) / 2,
                                   r = min(1, (s-warmup) / max(1, total-warmup)),
                                   lr_min = lr * min_lr_frac
   - A step whose gradient norm is not finite, or whose every target is ignored,
     is skipped (weights and moments untouched, stats.skipped = 1) and does not
     advance the step count.
   - Initialisation (when no weights are loaded) is Hugging Face's: N(0, 0.02) for
     embeddings and matrices, N(0, 0.02/sqrt(2*n_layer)) for the two residual
     projections, zero biases, LayerNorm weight 1, all drawn from `seed`.
   - Results are deterministic: the same config, seed and data give bitwise the
     same weights on the same machine, whatever the thread count.

   ============================================================================
   CALLS
   ============================================================================
   gpt2rt_create / gpt2rt_free           context: plans memory, allocates, initialises
   gpt2rt_config_get                     the config with every default filled in
   gpt2rt_forward                        logits and (with targets) the loss
   gpt2rt_backward                       gradients of the last forward's loss (+=)
   gpt2rt_update                         one AdamW step, then zero the gradients
   gpt2rt_step                           forward + backward + update in one call
   gpt2rt_logits                         copy the last forward's logits (B,T,vocab)
   gpt2rt_weights_load / _save           Hugging Face safetensors (+ config.json);
                                         a load also resets the optimizer state
   gpt2rt_config_load                    the model shape from a Hugging Face config.json
   gpt2rt_state_save / _load             the training state: weights, moments, step,
                                         RNG; resuming continues bitwise identically
   gpt2rt_param_count / _info_get        the parameters: Hugging Face names and shapes
   gpt2rt_param_read / _write            values, gradients, Adam moments by name
   gpt2rt_plan                           bytes of every memory category on every
                                         device, from the config alone, before
                                         anything is allocated
   gpt2rt_fit                            a config that fits a budget with the same
                                         global batch, each change explained
   gpt2rt_plan_allocated                 what a context really allocated, same form
   gpt2rt_plan_format                    a plan as a printable table
   gpt2rt_result_string / gpt2rt_last_error   what went wrong, with the numbers

   Every call returns a gpt2rt_result. On failure the context keeps a message that
   names the values involved (gpt2rt_last_error) and stays usable: a failed load
   leaves the weights as they were, a failed save leaves no partial file behind.
   The library never exits, never prints; messages go to the optional log callback.
   gpt2rt_create returns, on failure, a context that only holds the error message:
   read it, then gpt2rt_free it (NULL only if even that could not be allocated);
   any other call on it returns GPT2RT_ERR_STATE.

   ============================================================================
   MEMORY
   ============================================================================
   gpt2rt_plan(&cfg, &plan) computes the bytes of each category below on each
   device; creation then allocates one arena per category of exactly that size
   (through the optional allocator hook, which is told the category), and nothing
   else of consequence. The plan knows every knob: precision (bf16/fp16: 2-byte
   weights and activations plus an fp32 master copy), recompute, micro-batch,
   accumulation, frozen groups, data parallel (every device holds everything) and
   layer split (each device its layers; the first the embeddings, the last ln_f,
   the tied head and the logits). It plans the CUDA backend and the two-device
   modes from any machine, before they run. The categories:
       weights       all parameters, padded vocabulary included
       master        fp32 master copy of low-precision weights (0 in fp32)
       grads         one gradient per parameter
       moments       AdamW m and v
       activations   what the forward saves for the backward (per layer: ln_1 out,
                     qkv, attention out + softmax statistics, residuals, ln_2 out,
                     MLP pre- and post-GELU; fewer with recompute or frozen groups)
       transient     backward scratch alive only during one layer's backward, and
                     the buffer recomputed (or not kept) outputs pass through
       logits        (B, T, padded_vocab), turned into dlogits in place
       workspace     per-thread scratch (matrix-product packing, attention rows)
       comm          communication buffers of the two-device modes
   plan.overhead is what a device needs beyond the arenas (CUDA context, cuBLASLt,
   NCCL): estimated by gpt2rt_plan, measured by the CUDA backend.

   Recompute (config.recompute). SELECTIVE drops the LayerNorm and GELU outputs and
   recomputes them in the backward; FULL keeps every checkpoint_every-th layer's
   input (GPT2RT_CHECKPOINT_SQRT: round(sqrt(L))) and runs each segment's forward
   again in the backward. Either gives bitwise the same gradients as NONE. sqrt(L)
   is the classic spacing when a layer saves about as much as its input; a GPT-2
   layer saves about 16 times its input, so every layer (k = 1) keeps the least,
   and the plan shows it.

   Gradient accumulation. Gradients are of the summed token losses, scaled by
   1/(B*T*grad_accum); the update rescales them to the mean over every target
   counted since the last update, so the loss is normalised once: k micro-batches
   of b give the update of one batch of k*b however ignored targets fall. Either
   call gpt2rt_step with grad_accum*B rows, or gpt2rt_forward + gpt2rt_backward per
   micro-batch and gpt2rt_update once. gpt2rt_param_read(GRAD) reads the rescaled
   gradient.

   Frozen groups (config.frozen, gpt2rt_group bits): no gradient, no moments, no
   master copy, and the inputs only their weight gradients need are not kept
   (GPT4TS freezes ATTENTION | MLP). The gradients that remain are bitwise those of
   the unfrozen model.

   Out of memory. A plan above memory_budget (or, on Linux, above the available
   memory) is refused before anything is allocated; that error and a failed
   allocation list the categories, the free memory and what gpt2rt_fit suggests.

   ============================================================================
   TEXT: THE GPT-2 TOKENIZER AND LLM.C TOKEN FILES
   ============================================================================
       gpt2rt_tokenizer *tok;
       if (gpt2rt_tok_load(&tok, "data") != GPT2RT_OK) { ... gpt2rt_tok_last_error(tok) ... }
       gpt2rt_tok_encode(tok, text, len, GPT2RT_TOK_SPECIAL_TEXT, ids, len, &n); // cap = len suffices
       gpt2rt_tok_decode(tok, ids, n, buf, cap, &nbytes);
   Exactly GPT-2's ids (OpenAI's encoder.py, tiktoken, Hugging Face), byte-level, so
   any bytes round-trip: decode(encode(x)) == x, invalid UTF-8 included. The
   pre-tokeniser is GPT-2's pattern as a hand-written scanner with Unicode 15.0
   letter / number / White_Space tables (tools/gen_unicode_tables.py); BPE merges
   the adjacent pair listed first in the merges. "<|endoftext|>" in the text is
   ordinary text, the special token 50256, or an error, as gpt2rt_tok_special
   says. The vocabulary: data/gpt2_merges.bin (200 KB, the merges only: for GPT-2
   the ids follow from them), or OpenAI's encoder.json + vocab.bpe, or Hugging
   Face's vocab.json + merges.txt. A tokenizer takes about 5 MB; encoding is not
   thread-safe (the piece cache): one tokenizer per thread.
   gpt2rt_shard_* read and write llm.c's .bin token files and cut them into
   (B,T) input/target batches: fixed windows in an order drawn from a seed, each
   data-parallel rank its own share, none repeated within an epoch.

   ============================================================================
   NOT YET IMPLEMENTED (the fields exist; setting them reports
   GPT2RT_ERR_NOT_IMPLEMENTED, never silently ignored)
   ============================================================================
   Creating a context with the CUDA backend (bf16/fp16/TF32 and loss scaling are
   CUDA precisions: the CPU backend answers GPT2RT_ERR_UNAVAILABLE), the
   data-parallel and layer-split modes, patch inputs, regression heads.
   gpt2rt_plan and gpt2rt_fit already plan the first two.

   ============================================================================
   CONTENTS of the implementation, in the order data flows (grep "==== N." to
   jump; each subsystem has one infix)
   ============================================================================
    1. Common                    1.1 Threads, compiler helpers  1.2 Types: sizes,
                                 tensors, the context  1.3 Hooks, errors, time,
                                 random numbers
    2. Config                    defaults, then checks (gpt2rt__cfg_)
    3. Layout and plan           3.1 Parameter table  3.2 Activations and arenas
                                 3.3 Plan  3.4 Advisor (gpt2rt__fit_)
    4. Formats                   4.1 safetensors: reading (gpt2rt__st_, gpt2rt__json_)
                                 4.2 safetensors: writing; files  4.3 Hugging Face
                                 weights and config.json  4.4 Training state
    5. Tokenizer                 5.1 Unicode classes  5.2 Merges: (left, right) ->
                                 rank and merged id  5.3 BPE of one piece  5.4 Loading,
                                 encoding, decoding  5.5 llm.c token shards
                                 (gpt2rt__tok_, gpt2rt__shard_)
    6. Inputs                    6.1 Tokens (gpt2rt__input_)  6.2 Patches (slot:
                                 time series, gpt2rt__ts_)
    7. CPU backend               7.1 Ops  7.2 Matrix product (gpt2rt__sg_)  7.3 Model
                                 (gpt2rt__cpu_; the driver every backend plugs
                                 into: gpt2rt__model_)
    8. CUDA backend              (slot: kernels/staging/, gpt2rt__cu_)
    9. Optimizer                 (gpt2rt__opt_)
   10. Context                   creation's parts, initialisation, out of memory
   11. Public calls              11.1 Results and names  11.2 Plan  11.3 Context
                                 11.4 Training  11.5 Weights and training state
                                 files  11.6 Parameters by name

   ============================================================================
   LICENSE: MIT. See the end of the file.
*/
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
    GPT2RT_HEAD_REGRESSION /* linear head to `horizon` values per channel, MSE loss */
} gpt2rt_head;

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

/* parameter groups, a bitmask for gpt2rt_config.frozen */
typedef enum gpt2rt_group {
    GPT2RT_GROUP_TOKEN_EMBED = 1 << 0, /* wte (and so the tied LM head) */
    GPT2RT_GROUP_POS_EMBED = 1 << 1,   /* wpe */
    GPT2RT_GROUP_LAYERNORM = 1 << 2,   /* ln_1, ln_2, ln_f */
    GPT2RT_GROUP_ATTENTION = 1 << 3,   /* attn.c_attn, attn.c_proj */
    GPT2RT_GROUP_MLP = 1 << 4,         /* mlp.c_fc, mlp.c_proj */
    GPT2RT_GROUP_HEAD = 1 << 5         /* input projection and regression head (patches) */
} gpt2rt_group;

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
    gpt2rt_input input;
    int patch_len, patch_stride, n_channels; /* patch inputs only */
    gpt2rt_head head;
    int horizon;     /* regression head only */
    unsigned frozen; /* gpt2rt_group bits: no gradient, no update */

    /* batch */
    int batch_size; /* micro-batch B (per device under DATA parallel), 0 -> 4 */
    int seq_len;    /* T, 0 -> min(64, max_seq_len) */
    int grad_accum; /* micro-batches per optimizer step, 0 -> 1 (gpt2rt_step takes
                       grad_accum * batch_size rows) */

    /* precision and memory */
    gpt2rt_precision precision;
    int tf32;           /* CUDA fp32 matrix products on TF32 tensor cores; 0 = off */
    float loss_scale;   /* fp16: initial dynamic loss scale, 0 -> 65536 */
    gpt2rt_recompute recompute;
    int checkpoint_every; /* full recompute: keep every k-th layer input, 0 -> 1,
                             GPT2RT_CHECKPOINT_SQRT -> round(sqrt(n_layer)) */

    /* parallel */
    gpt2rt_parallel parallel;
    int n_devices;                       /* 0 -> 1 */
    int device_ids[GPT2RT_MAX_DEVICES];  /* CUDA ordinals, 0 -> 0,1,2,... */

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
    int n_threads;          /* CPU threads, 0 -> OpenMP's default (OMP_NUM_THREADS), at most 1024 */
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
    int64_t tokens_per_step;  /* micro-batch x grad_accum x data-parallel devices x seq_len */
    double predicted_seconds; /* the advisor's coarse model of one optimizer step (for ranking) */
    int n_devices;
    uint64_t bytes[GPT2RT_MAX_DEVICES][GPT2RT_MEM_COUNT];
    uint64_t total[GPT2RT_MAX_DEVICES];    /* sum of the categories: what creation allocates */
    uint64_t overhead[GPT2RT_MAX_DEVICES]; /* beyond the arenas: estimated by gpt2rt_plan (CUDA
                                              context, cuBLASLt, NCCL; 0 on the CPU backend),
                                              measured by gpt2rt_plan_allocated */
    char error[512]; /* why gpt2rt_plan failed */
} gpt2rt_memory_plan;

/* what gpt2rt_fit may change (bits); 0 means GPT2RT_FIT_DEFAULT */
typedef enum gpt2rt_fit_allow {
    GPT2RT_FIT_BATCH = 1 << 0,     /* micro-batch down, grad_accum up: same global batch */
    GPT2RT_FIT_RECOMPUTE = 1 << 1, /* selective, then full recompute */
    GPT2RT_FIT_PARALLEL = 1 << 2,  /* data parallel <-> layer split (same devices) */
    GPT2RT_FIT_PRECISION = 1 << 3, /* fp32 -> bf16 (CUDA only; changes the numerics, so opt-in) */
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
GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *plan, char *buf, size_t cap);
/* A config like *config whose plan fits budget_bytes on every device (arenas plus the
   estimated overhead), with the same global batch, that the coarse throughput model
   ranks fastest among those `allow` reaches: *out gets it (*config itself when that
   fits and nothing reachable is predicted faster). explain (may be NULL) gets one
   line per change with the bytes it saves. GPT2RT_ERR_OUT_OF_MEMORY when nothing
   fits: *out is then the smallest found. budget_bytes must be > 0. */
GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget_bytes, unsigned allow,
                                    gpt2rt_config *out, char *explain, size_t cap);

GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **ctx, const gpt2rt_config *config);
GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx);
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
/* dst: (B,T,vocab_size) floats, count must be B*T*vocab_size; valid until backward */
GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count);

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path);
/* The model shape of a Hugging Face GPT-2 config.json (path: the file, or the directory
   holding it) into *config: n_layer, n_head, n_embd, vocab_size, max_seq_len
   (n_positions); other fields are left as they are. err (may be NULL) gets the reason
   of a failure. */
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

/* ---- text: the GPT-2 tokenizer and llm.c token shards --------------------
   Objects of their own, no gpt2rt_ctx needed. Like gpt2rt_create, a failed load
   still returns an object that holds only the message (read it with *_last_error,
   then free it; NULL only when even that could not be allocated). One tokenizer
   per thread: encoding updates its cache. */
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
   vocab_json NULL the compact file gpt2rt_tok_save writes */
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

#ifdef __cplusplus
}
#endif
#endif /* GPT2RT_H */

/* ==========================================================================
   IMPLEMENTATION
   ========================================================================== */
#ifdef GPT2RT_IMPLEMENTATION
#ifndef GPT2RT_IMPLEMENTATION_DONE
#define GPT2RT_IMPLEMENTATION_DONE

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#ifdef _WIN32
#include <direct.h>
#else
#include <fcntl.h>  /* open(O_NONBLOCK): a FIFO is refused, not waited on */
#include <unistd.h>
#endif
#ifdef _WIN32
#define GPT2RT__IS_REG(mode) (((mode) & _S_IFMT) == _S_IFREG)
#define GPT2RT__IS_DIR(mode) (((mode) & _S_IFMT) == _S_IFDIR)
#else
#define GPT2RT__IS_REG(mode) S_ISREG(mode)
#define GPT2RT__IS_DIR(mode) S_ISDIR(mode)
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#include <immintrin.h>
#endif
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "gpt2rt.h: little-endian hosts only (safetensors files are little-endian, read and written with memcpy)"
#endif

/* ==== 1. Common ==== */

/* ==== 1.1 Threads, compiler helpers ==== */

/* the loop that follows runs on nt threads, each a fixed contiguous share
   (_RR: round robin, for triangular work) */
#ifdef _OPENMP
#define GPT2RT__PRAGMA(x) _Pragma(#x)
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static))
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static, 1))
static int gpt2rt__thread_id(void) { return omp_get_thread_num(); }
static int gpt2rt__default_threads(void) { return omp_get_max_threads(); }
#else
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt);
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt);
static int gpt2rt__thread_id(void) { return 0; }
static int gpt2rt__default_threads(void) { return 1; }
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GPT2RT__PRINTF(a, b)
#endif

#define GPT2RT__PI 3.14159265358979323846

/* append printf-style text to (buf, cap) at n, counting what did not fit: the
   formatters return the length they needed, as snprintf does */
#define GPT2RT__PUT(...) do { int k_ = snprintf(buf ? buf + (n < cap ? n : cap) : NULL, \
        buf && n < cap ? cap - n : 0, __VA_ARGS__); if (k_ > 0) n += (size_t)k_; } while (0)

/* ==== 1.2 Types: sizes, tensors, the context ==== */

/* sizes of the model and what the memory knobs decide, resolved from the config */
typedef struct gpt2rt__dims {
    int64_t L, NH, C, HS;  /* layers, heads, width, head size C/NH */
    int64_t V, Vp, P;      /* vocab, padded vocab, positions (max_seq_len) */
    int64_t B, T, BT;      /* micro-batch, sequence, B*T */
    int nt;                /* CPU threads */
    int cuda;              /* planned for the CUDA backend */
    int ab;                /* bytes per activation element: 4 (fp32), 2 (bf16, fp16) */
    int wb;                /* bytes per stored weight: 4, or 2 with an fp32 master copy */
    unsigned frozen;       /* gpt2rt_group bits */
    int recompute, ck;     /* recompute level; FULL: checkpoint spacing k */
    int need_ln1, need_mlp_in; /* ln_1 out / ln_2 out and GELU out feed a trained weight's gradient */
    int keep_ln1, keep_mlp_in; /* ln_1 out; ln_2 out and GELU out: saved by the forward, else
                                  recomputed (if needed) or dropped */
    int rc;                /* SELECTIVE: a transient buffer for what the backward recomputes */
    int align;             /* bytes every buffer starts on: 64 (CPU), 256 (CUDA: cuBLASLt, vector loads) */
} gpt2rt__dims;

/* the layers [l0, l1) one device holds; first holds the embeddings, last the head */
typedef struct gpt2rt__span {
    int64_t l0, l1;
    int first, last;
} gpt2rt__span;

/* a size a parameter's shape is made of (the parameter table's shape columns) */
typedef enum gpt2rt__dim {
    GPT2RT__DIM_1, GPT2RT__DIM_C, GPT2RT__DIM_3C, GPT2RT__DIM_4C, GPT2RT__DIM_VP, GPT2RT__DIM_P
} gpt2rt__dim;

/* how a parameter starts when no weights are loaded: Hugging Face's rule */
typedef enum gpt2rt__init {
    GPT2RT__INIT_NORMAL, /* N(0, 0.02) */
    GPT2RT__INIT_RESID,  /* N(0, 0.02/sqrt(2*n_layer)): the projections into the residual stream */
    GPT2RT__INIT_ONES,   /* LayerNorm weights */
    GPT2RT__INIT_ZEROS   /* biases */
} gpt2rt__init;

/* one row of the parameter table (3.1) */
typedef struct gpt2rt__param_row {
    const char *name;       /* Hugging Face name; per layer: after "transformer.h.<l>." */
    gpt2rt__dim rows, cols; /* internal shape (out, in); cols DIM_1: a vector */
    int transpose;          /* Conv1D: the file stores (cols, rows) */
    int decay;              /* AdamW's weight decay applies */
    unsigned group;         /* one gpt2rt_group bit */
    gpt2rt__init init;
} gpt2rt__param_row;

/* one parameter tensor; internal layout (rows, cols) row-major, matrices (out, in) */
typedef struct gpt2rt__tensor {
    char name[96];     /* Hugging Face name */
    const gpt2rt__param_row *row; /* what it is */
    int64_t layer;     /* -1: a whole-model tensor */
    int64_t off;       /* offset in floats into the weights arena */
    int64_t goff;      /* offset into the grads, m and v arenas; -1: frozen */
    int64_t rows, cols;/* internal shape; 1-D tensors have cols == 1 */
    int64_t hf_rows;   /* rows that exist in the file (wte: vocab, not padded vocab) */
    int ndim;
    int transpose;     /* Conv1D: the file stores (cols, rows) */
    unsigned group;
    int decay;
} gpt2rt__tensor;

/* the whole-model parameters, rows of gpt2rt__model_rows; in the table and the arena
   wte and wpe precede the layers, ln_f follows them */
enum { GPT2RT__WTE, GPT2RT__WPE, GPT2RT__LNFW, GPT2RT__LNFB, GPT2RT__N_MODEL };

typedef struct gpt2rt__model_params {
    float *wte;         /* (Vp, C), also the tied LM head */
    float *wpe;         /* (P, C) */
    float *lnfw, *lnfb; /* (C) */
} gpt2rt__model_params;

/* per-layer parameters, rows of gpt2rt__layer_rows: 12 tensors in this order in the
   table and the arena */
enum { GPT2RT__LN1W, GPT2RT__LN1B, GPT2RT__QKVW, GPT2RT__QKVB, GPT2RT__PROJW, GPT2RT__PROJB,
       GPT2RT__LN2W, GPT2RT__LN2B, GPT2RT__FCW, GPT2RT__FCB, GPT2RT__FCPROJW, GPT2RT__FCPROJB,
       GPT2RT__PER_LAYER };

typedef struct gpt2rt__layer_params {
    float *ln1w, *ln1b;     /* (C) */
    float *qkvw, *qkvb;     /* (3C, C), (3C) */
    float *projw, *projb;   /* (C, C), (C) */
    float *ln2w, *ln2b;     /* (C) */
    float *fcw, *fcb;       /* (4C, C), (4C) */
    float *fcprojw, *fcprojb; /* (C, 4C), (C) */
} gpt2rt__layer_params;

/* what one layer's forward saves for its backward */
typedef struct gpt2rt__layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (BT,C), (BT), (BT) */
    float *qkv;                       /* (BT,3C) */
    float *lse;                       /* (B,NH,T) log-sum-exp of each softmax row */
    float *atty;                      /* (BT,C) attention output, heads side by side */
    float *res2;                      /* (BT,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (BT,C), (BT), (BT) */
    float *fch, *fch_gelu;            /* (BT,4C) before and after GELU */
    float *res3;                      /* (BT,C) layer output */
} gpt2rt__layer_acts;

struct gpt2rt_ctx {
    gpt2rt_config cfg; /* resolved */
    gpt2rt__dims d;
    int failed;        /* creation failed: the context only holds the error */
    char error[4096];

    gpt2rt__tensor *tensors;
    int n_tensors;
    int64_t n_params;  /* floats in the weights arena */

    void *arena[GPT2RT_MEM_COUNT];
    uint64_t arena_bytes[GPT2RT_MEM_COUNT];

    int64_t n_train;   /* floats in the grads arena (and in m, v): the trainable ones */
    float *params;     /* (n_params) */
    float *grads, *m, *v; /* (n_train) each */
    /* activations arena */
    int32_t *inputs, *targets;      /* (BT) copies, for the backward */
    float *x0;                      /* (BT,C) embeddings, layer 0 input (FULL: checkpoint 0) */
    unsigned char *layer_acts;      /* NONE/SELECTIVE: L blocks; FULL: ck slots; layer_stride bytes each */
    int64_t layer_stride;
    float *ckpt;                    /* FULL: (ceil(L/ck)-1, BT, C) inputs of layers ck, 2ck, ... */
    float *xout;                    /* FULL: (BT,C) the last layer's output */
    float *lnf, *lnf_mean, *lnf_rstd; /* (BT,C), (BT), (BT) */
    float *losses, *logit_lse;        /* (BT) */
    float *logits;                    /* (BT,Vp) logits arena */
    float *dres, *dbuf, *dbig;        /* transient: (BT,C), (BT,C), (BT,4C) */
    float *rcbuf;                     /* transient: (BT,4C) outputs not kept (selective, frozen) */
    void *gemm_ws;                    /* workspace */
    float *att_scratch;               /* (nt, 2*pad(T)) */
    double *norm_parts;               /* (n_norm_chunks) */

    int64_t step;   /* optimizer updates taken */
    uint64_t rng;
    float loss;          /* the last forward's mean loss */
    double loss_sum;     /* the last forward's summed token losses */
    int64_t n_targets;   /* the last forward's counted targets */
    /* since the last update: gradients are of (sum of token losses) / (BT * grad_accum);
       the update rescales them to the mean over acc_targets, so the loss is
       normalised once however the micro-batches were cut */
    double acc_loss_sum;
    int64_t acc_targets;
    int acc_micro;
    int have_logits, have_loss, grads_pending;
};

/* ==== 1.3 Hooks, errors, time, random numbers ==== */

static void *gpt2rt__default_alloc(void *user, size_t bytes, int category) {
    (void)user; (void)category;
    if (bytes > SIZE_MAX - GPT2RT_ALIGN - sizeof(void *)) return NULL;
    unsigned char *raw = (unsigned char *)malloc(bytes + GPT2RT_ALIGN + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + sizeof(void *)) + GPT2RT_ALIGN - 1) & ~(uintptr_t)(GPT2RT_ALIGN - 1);
    memcpy((void *)(p - sizeof(void *)), &raw, sizeof(void *));
    return (void *)p;
}

static void gpt2rt__default_free(void *user, void *ptr, int category) {
    (void)user; (void)category;
    if (!ptr) return;
    void *raw;
    memcpy(&raw, (unsigned char *)ptr - sizeof(void *), sizeof(void *));
    free(raw);
}

static void *gpt2rt__alloc(const gpt2rt_config *c, size_t bytes, int category) {
    if (c->alloc) return c->alloc(c->alloc_user, bytes, category);
    return gpt2rt__default_alloc(NULL, bytes, category);
}

static void gpt2rt__free(const gpt2rt_config *c, void *ptr, int category) {
    if (!ptr) return;
    if (c->free) c->free(c->alloc_user, ptr, category);
    else gpt2rt__default_free(NULL, ptr, category);
}

static void gpt2rt__vlog(const gpt2rt_config *c, gpt2rt_log_level level, const char *fmt, va_list ap) {
    if (!c->log) return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    c->log(c->log_user, level, msg);
}

static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gpt2rt__vlog(&ctx->cfg, level, fmt, ap);
    va_end(ap);
}

/* record the error in the context, tell the log, return the result */
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    if (ctx->cfg.log) ctx->cfg.log(ctx->cfg.log_user, GPT2RT_LOG_ERROR, ctx->error);
    return r;
}

/* every call on a context starts here; a context whose creation failed answers
   GPT2RT_ERR_STATE and keeps the creation error as its message */
#define GPT2RT__CHECK_CTX(ctx) do { \
        if (!(ctx)) return GPT2RT_ERR_INVALID_ARGUMENT; \
        if ((ctx)->failed) return GPT2RT_ERR_STATE; \
    } while (0)

static double gpt2rt__now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the one random stream; normal() draws with Box-Muller */
static uint64_t gpt2rt__rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double gpt2rt__rng_uniform(uint64_t *s) { /* in (0,1) */
    return ((double)(gpt2rt__rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static int64_t gpt2rt__pad16(int64_t n) { return (n + 15) & ~(int64_t)15; } /* floats to 64 bytes */

/* ==== 2. Config ==== */
/* Zero means default. gpt2rt__cfg_resolve fills every default (gpt2rt__cfg_default_*),
   then checks every field (gpt2rt__cfg_check_*), subsystem by subsystem in the order
   of the config struct; the first failed check names the field, its value and the
   valid range in err. Defaults never fail: they may see unchecked values and only
   compute from them what the checks will then refuse. */

static void gpt2rt__cfg_default_model(gpt2rt_config *c) {
    if (!c->n_layer) c->n_layer = 12;
    if (!c->n_head) c->n_head = 12;
    if (!c->n_embd) c->n_embd = 768;
    if (!c->vocab_size) c->vocab_size = 50257;
    if (!c->max_seq_len) c->max_seq_len = 1024;
    if (!c->padded_vocab) c->padded_vocab = (int)(((int64_t)c->vocab_size + 127) / 128 * 128 & INT32_MAX);
}

static void gpt2rt__cfg_default_batch(gpt2rt_config *c) {
    if (!c->batch_size) c->batch_size = 4;
    if (!c->seq_len) c->seq_len = c->max_seq_len < 64 ? c->max_seq_len : 64;
    if (!c->grad_accum) c->grad_accum = 1;
}

/* backend, precision and memory */
static void gpt2rt__cfg_default_precision(gpt2rt_config *c) {
    if (c->backend == GPT2RT_BACKEND_AUTO) c->backend = GPT2RT_BACKEND_CPU; /* the CUDA backend has not landed */
    if (c->precision == GPT2RT_PRECISION_DEFAULT) c->precision = GPT2RT_PRECISION_FP32;
    if (c->precision == GPT2RT_PRECISION_FP16 && c->loss_scale == 0.0f) c->loss_scale = 65536.0f;
    if (c->recompute == GPT2RT_RECOMPUTE_FULL) {
        if (!c->checkpoint_every) c->checkpoint_every = 1;
        if (c->checkpoint_every == GPT2RT_CHECKPOINT_SQRT)
            c->checkpoint_every = c->n_layer > 1 ? (int)floor(sqrt((double)c->n_layer) + 0.5) : 1;
    }
}

static void gpt2rt__cfg_default_parallel(gpt2rt_config *c) {
    if (!c->n_devices) c->n_devices = 1;
}

/* optimizer and runtime */
static void gpt2rt__cfg_default_optimizer(gpt2rt_config *c) {
    if (c->lr == 0.0f) c->lr = 3e-4f;
    if (c->beta1 == 0.0f) c->beta1 = 0.9f;
    if (c->beta2 == 0.0f) c->beta2 = 0.999f;
    if (c->eps == 0.0f) c->eps = 1e-8f;
    if (c->grad_clip == 0.0f) c->grad_clip = 1.0f;
    /* the thread count follows OpenMP (OMP_NUM_THREADS), clamped to the range a user may set */
    if (!c->n_threads) {
        int t = gpt2rt__default_threads();
        c->n_threads = t < 1 ? 1 : t > 1024 ? 1024 : t;
    }
    if (!c->seed) c->seed = 1337;
}

/* the checks report through err, cap */
#define GPT2RT__BAD(r, ...) do { snprintf(err, cap, __VA_ARGS__); return r; } while (0)
#define GPT2RT__NYI(cond, what) \
    do { if (cond) GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "%s is not implemented yet (set it to 0)", what); } while (0)
#define GPT2RT__RANGE(field, lo, hi) \
    do { if (c->field < (lo) || c->field > (hi)) \
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, #field " = %lld is out of range [%lld, %lld]", \
                    (long long)c->field, (long long)(lo), (long long)(hi)); } while (0)

static gpt2rt_result gpt2rt__cfg_check_hooks(const gpt2rt_config *c, char *err, size_t cap) {
    if ((c->alloc == NULL) != (c->free == NULL))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "alloc and free hooks must be set together (alloc %s, free %s)",
                    c->alloc ? "set" : "NULL", c->free ? "set" : "NULL");
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_model(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(n_layer, 1, 1024);
    GPT2RT__RANGE(n_head, 1, 1024);
    GPT2RT__RANGE(n_embd, 1, 65536);
    GPT2RT__RANGE(vocab_size, 1, 1 << 24);
    GPT2RT__RANGE(max_seq_len, 1, 1 << 20);
    if (c->n_embd % c->n_head)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_embd = %d is not a multiple of n_head = %d", c->n_embd, c->n_head);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab > (1 << 24))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "padded_vocab = %d must lie in [vocab_size = %d, %d]",
                    c->padded_vocab, c->vocab_size, 1 << 24);
    GPT2RT__NYI(c->input != GPT2RT_INPUT_TOKENS, "input = GPT2RT_INPUT_PATCHES (time-series patches)");
    GPT2RT__NYI(c->head != GPT2RT_HEAD_LM, "head = GPT2RT_HEAD_REGRESSION");
    GPT2RT__NYI(c->patch_len || c->patch_stride || c->n_channels, "patch_len/patch_stride/n_channels (patch inputs)");
    GPT2RT__NYI(c->horizon, "horizon (regression head)");
    const unsigned all = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM |
                         GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_HEAD;
    const unsigned model = all & ~(unsigned)GPT2RT_GROUP_HEAD; /* the groups tokens + LM head have */
    if (c->frozen & ~all)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x has bits outside the gpt2rt_group values (0x%x)",
                    c->frozen, all);
    if (c->frozen & GPT2RT_GROUP_HEAD)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen includes GPT2RT_GROUP_HEAD, which has no parameters "
                    "with token inputs and the tied LM head");
    if ((c->frozen & model) == model)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x freezes every parameter group: nothing to train",
                    c->frozen);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_batch(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(batch_size, 1, 1 << 20);
    if (c->seq_len < 1 || c->seq_len > c->max_seq_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "seq_len = %d must lie in [1, max_seq_len = %d]", c->seq_len, c->max_seq_len);
    if ((int64_t)c->batch_size * c->seq_len > ((int64_t)1 << 30))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "batch_size * seq_len = %d * %d exceeds 2^30 tokens",
                    c->batch_size, c->seq_len);
    GPT2RT__RANGE(grad_accum, 1, 1 << 20);
    return GPT2RT_OK;
}

/* backend, precision and memory */
static gpt2rt_result gpt2rt__cfg_check_precision(const gpt2rt_config *c, char *err, size_t cap) {
    if ((int)c->backend < 0 || c->backend > GPT2RT_BACKEND_CUDA)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "backend = %d is not a gpt2rt_backend", (int)c->backend);
    int cuda = c->backend == GPT2RT_BACKEND_CUDA;
    if ((int)c->precision < 0 || c->precision > GPT2RT_PRECISION_FP16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "precision = %d is not a gpt2rt_precision", (int)c->precision);
    if (!cuda && c->precision != GPT2RT_PRECISION_FP32)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "precision = %s needs backend = GPT2RT_BACKEND_CUDA; the CPU backend "
                    "computes in fp32", c->precision == GPT2RT_PRECISION_BF16 ? "BF16" : "FP16");
    if (!cuda && c->tf32)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "tf32 = %d needs backend = GPT2RT_BACKEND_CUDA", c->tf32);
    if (c->tf32 && c->precision != GPT2RT_PRECISION_FP32)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "tf32 = %d applies to fp32 matrix products only", c->tf32);
    if (c->loss_scale != 0.0f && c->precision != GPT2RT_PRECISION_FP16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "loss_scale = %g applies to precision = FP16 only",
                    (double)c->loss_scale);
    if (c->precision == GPT2RT_PRECISION_FP16 && !(c->loss_scale >= 1.0f && c->loss_scale <= 16777216.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "loss_scale = %g must lie in [1, 2^24]", (double)c->loss_scale);
    if ((int)c->recompute < 0 || c->recompute > GPT2RT_RECOMPUTE_FULL)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "recompute = %d is not a gpt2rt_recompute", (int)c->recompute);
    if (c->recompute != GPT2RT_RECOMPUTE_FULL && c->checkpoint_every)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "checkpoint_every = %d applies to recompute = FULL only",
                    c->checkpoint_every);
    if (c->recompute == GPT2RT_RECOMPUTE_FULL && (c->checkpoint_every < 1 || c->checkpoint_every > c->n_layer))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "checkpoint_every = %d must lie in [1, n_layer = %d] "
                    "(or be GPT2RT_CHECKPOINT_SQRT)", c->checkpoint_every, c->n_layer);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_parallel(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(n_devices, 1, GPT2RT_MAX_DEVICES);
    if ((int)c->parallel < 0 || c->parallel > GPT2RT_PARALLEL_LAYER_SPLIT)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = %d is not a gpt2rt_parallel", (int)c->parallel);
    if (c->parallel == GPT2RT_PARALLEL_NONE && c->n_devices > 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_devices = %d needs parallel = DATA or LAYER_SPLIT",
                    c->n_devices);
    if (c->parallel != GPT2RT_PARALLEL_NONE && c->n_devices < 2)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = %s needs n_devices >= 2 (it is %d)",
                    c->parallel == GPT2RT_PARALLEL_DATA ? "DATA" : "LAYER_SPLIT", c->n_devices);
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->n_layer < c->n_devices)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT over %d devices needs n_layer >= %d "
                    "(it is %d)", c->n_devices, c->n_devices, c->n_layer);
    for (int i = 0; i < GPT2RT_MAX_DEVICES; i++)
        if (c->device_ids[i] < 0)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[%d] = %d is negative", i, c->device_ids[i]);
    return GPT2RT_OK;
}

/* optimizer and runtime */
static gpt2rt_result gpt2rt__cfg_check_optimizer(const gpt2rt_config *c, char *err, size_t cap) {
    if (!(c->lr > 0.0f && c->lr < 1e3f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "lr = %g must lie in (0, 1000)", (double)c->lr);
    if (!(c->min_lr_frac >= 0.0f && c->min_lr_frac <= 1.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "min_lr_frac = %g must lie in [0, 1]", (double)c->min_lr_frac);
    if (!(c->beta1 > 0.0f && c->beta1 < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "beta1 = %g must lie in (0, 1)", (double)c->beta1);
    if (!(c->beta2 > 0.0f && c->beta2 < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "beta2 = %g must lie in (0, 1)", (double)c->beta2);
    if (!(c->eps > 0.0f && c->eps < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "eps = %g must lie in (0, 1)", (double)c->eps);
    if (!(c->weight_decay >= 0.0f && c->weight_decay < 1e3f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "weight_decay = %g must lie in [0, 1000)", (double)c->weight_decay);
    if (c->grad_clip != c->grad_clip) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "grad_clip is NaN");
    GPT2RT__RANGE(warmup_steps, 0, INT32_MAX);
    GPT2RT__RANGE(total_steps, 0, INT32_MAX);
    if (c->total_steps && c->warmup_steps > c->total_steps)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "warmup_steps = %d exceeds total_steps = %d (the schedule would "
                    "end before the warmup does); make warmup_steps <= total_steps, or total_steps 0 for a constant "
                    "learning rate after the warmup", c->warmup_steps, c->total_steps);
    GPT2RT__RANGE(n_threads, 1, 1024);
    return GPT2RT_OK;
}

#undef GPT2RT__RANGE
#undef GPT2RT__NYI
#undef GPT2RT__BAD

/* Fill every default, then check every field. err gets the reason, with numbers. */
static gpt2rt_result gpt2rt__cfg_resolve(const gpt2rt_config *in, gpt2rt_config *c, char *err, size_t cap) {
    gpt2rt_result r;
    *c = *in;
    gpt2rt__cfg_default_model(c);
    gpt2rt__cfg_default_batch(c);
    gpt2rt__cfg_default_precision(c);
    gpt2rt__cfg_default_parallel(c);
    gpt2rt__cfg_default_optimizer(c);
    if ((r = gpt2rt__cfg_check_hooks(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_model(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_batch(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_precision(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_parallel(c, err, cap)) != GPT2RT_OK) return r;
    return gpt2rt__cfg_check_optimizer(c, err, cap);
}

static gpt2rt__dims gpt2rt__dims_of(const gpt2rt_config *c) {
    gpt2rt__dims d;
    d.L = c->n_layer; d.NH = c->n_head; d.C = c->n_embd; d.HS = d.C / d.NH;
    d.V = c->vocab_size; d.Vp = c->padded_vocab; d.P = c->max_seq_len;
    d.B = c->batch_size; d.T = c->seq_len; d.BT = d.B * d.T;
    d.nt = c->n_threads;
    d.cuda = c->backend == GPT2RT_BACKEND_CUDA;
    d.ab = c->precision == GPT2RT_PRECISION_FP32 ? 4 : 2;
    d.wb = d.ab;
    d.frozen = c->frozen;
    d.recompute = (int)c->recompute;
    d.ck = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    d.need_ln1 = !(c->frozen & GPT2RT_GROUP_ATTENTION);  /* ln_1 out: input of c_attn's dW */
    d.need_mlp_in = !(c->frozen & GPT2RT_GROUP_MLP);     /* ln_2 out, GELU out: c_fc's, c_proj's dW */
    int keep = c->recompute == GPT2RT_RECOMPUTE_NONE, full = c->recompute == GPT2RT_RECOMPUTE_FULL;
    d.keep_ln1 = full || (keep && d.need_ln1);
    d.keep_mlp_in = full || (keep && d.need_mlp_in);
    /* SELECTIVE recomputes into its own buffer; outputs merely not kept (frozen
       weights) pass through dbig in the forward, which is free until the backward */
    d.rc = c->recompute == GPT2RT_RECOMPUTE_SELECTIVE && (d.need_ln1 || d.need_mlp_in);
    d.align = d.cuda ? 256 : 64;
    return d;
}

static gpt2rt__span gpt2rt__span_of(const gpt2rt_config *c, int dev) {
    gpt2rt__span s;
    s.l0 = 0; s.l1 = c->n_layer; s.first = s.last = 1;
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) { /* even split, earlier devices take the remainder */
        int64_t n = c->n_devices, L = c->n_layer, q = L / n, r = L % n;
        s.l0 = dev * q + (dev < r ? dev : r);
        s.l1 = s.l0 + q + (dev < r ? 1 : 0);
        s.first = dev == 0;
        s.last = dev == n - 1;
    }
    return s;
}

/* ==== 3. Layout and plan ==== */

/* ==== 3.1 Parameter table ==== */

/* The parameter table. Columns: Hugging Face name, internal shape (out, in), whether
   the file transposes it (Conv1D), weight decay, group, initialisation. */
static const gpt2rt__param_row gpt2rt__model_rows[GPT2RT__N_MODEL] = {
    /* name                      rows            cols           transpose decay group                     init */
    {"transformer.wte.weight",  GPT2RT__DIM_VP, GPT2RT__DIM_C, 0, 1, GPT2RT_GROUP_TOKEN_EMBED, GPT2RT__INIT_NORMAL},
    {"transformer.wpe.weight",  GPT2RT__DIM_P,  GPT2RT__DIM_C, 0, 1, GPT2RT_GROUP_POS_EMBED,   GPT2RT__INIT_NORMAL},
    {"transformer.ln_f.weight", GPT2RT__DIM_C,  GPT2RT__DIM_1, 0, 0, GPT2RT_GROUP_LAYERNORM,   GPT2RT__INIT_ONES},
    {"transformer.ln_f.bias",   GPT2RT__DIM_C,  GPT2RT__DIM_1, 0, 0, GPT2RT_GROUP_LAYERNORM,   GPT2RT__INIT_ZEROS},
};
static const gpt2rt__param_row gpt2rt__layer_rows[GPT2RT__PER_LAYER] = {
    /* name                rows            cols            transpose decay group                  init */
    {"ln_1.weight",        GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ONES},
    {"ln_1.bias",          GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ZEROS},
    {"attn.c_attn.weight", GPT2RT__DIM_3C, GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_NORMAL},
    {"attn.c_attn.bias",   GPT2RT__DIM_3C, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_ZEROS},
    {"attn.c_proj.weight", GPT2RT__DIM_C,  GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_RESID},
    {"attn.c_proj.bias",   GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_ZEROS},
    {"ln_2.weight",        GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ONES},
    {"ln_2.bias",          GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ZEROS},
    {"mlp.c_fc.weight",    GPT2RT__DIM_4C, GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_MLP,       GPT2RT__INIT_NORMAL},
    {"mlp.c_fc.bias",      GPT2RT__DIM_4C, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_MLP,       GPT2RT__INIT_ZEROS},
    {"mlp.c_proj.weight",  GPT2RT__DIM_C,  GPT2RT__DIM_4C, 1, 1, GPT2RT_GROUP_MLP,       GPT2RT__INIT_RESID},
    {"mlp.c_proj.bias",    GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_MLP,       GPT2RT__INIT_ZEROS},
};

static int64_t gpt2rt__dim_size(const gpt2rt__dims *d, gpt2rt__dim k) {
    switch (k) {
    case GPT2RT__DIM_1: return 1;
    case GPT2RT__DIM_C: return d->C;
    case GPT2RT__DIM_3C: return 3 * d->C;
    case GPT2RT__DIM_4C: return 4 * d->C;
    case GPT2RT__DIM_VP: return d->Vp;
    case GPT2RT__DIM_P: return d->P;
    }
    return 0;
}

/* append row's tensor (of layer l, or -1) at *n, *off floats into the weights and *goff
   into the grads (frozen groups get no gradient, no moments); tab may be NULL */
static void gpt2rt__param_add(const gpt2rt__dims *d, const gpt2rt__param_row *row, int64_t l, gpt2rt__tensor *tab,
                              int *n, int64_t *off, int64_t *goff) {
    int64_t rows = gpt2rt__dim_size(d, row->rows), cols = gpt2rt__dim_size(d, row->cols);
    int frozen = (d->frozen & row->group) != 0;
    if (tab) {
        gpt2rt__tensor *t = &tab[*n];
        if (l < 0) snprintf(t->name, sizeof t->name, "%s", row->name);
        else snprintf(t->name, sizeof t->name, "transformer.h.%lld.%s", (long long)l, row->name);
        t->row = row;
        t->layer = l;
        t->off = *off;
        t->goff = frozen ? -1 : *goff;
        t->rows = rows;
        t->cols = cols;
        t->hf_rows = row->rows == GPT2RT__DIM_VP ? d->V : rows; /* the file has no padded rows */
        t->ndim = row->cols == GPT2RT__DIM_1 ? 1 : 2;
        t->transpose = row->transpose;
        t->group = row->group;
        t->decay = row->decay;
    }
    (*n)++;
    *off += rows * cols;
    if (!frozen) *goff += rows * cols;
}

/* The table in arena order: wte, wpe, the layers' rows layer by layer, ln_f. Returns
   the number of tensors; fills tab when non-NULL; *n_floats gets the total, *n_train
   the trainable part. */
static int gpt2rt__param_table(const gpt2rt__dims *d, gpt2rt__tensor *tab, int64_t *n_floats, int64_t *n_train) {
    int n = 0;
    int64_t off = 0, goff = 0;
    for (int k = 0; k < GPT2RT__LNFW; k++) gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    for (int64_t l = 0; l < d->L; l++)
        for (int k = 0; k < GPT2RT__PER_LAYER; k++)
            gpt2rt__param_add(d, &gpt2rt__layer_rows[k], l, tab, &n, &off, &goff);
    for (int k = GPT2RT__LNFW; k < GPT2RT__N_MODEL; k++)
        gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    if (n_floats) *n_floats = off;
    if (n_train) *n_train = goff;
    return n;
}

/* the table's tensors by name: a whole-model one (GPT2RT__WTE...), layer l's 12 */
static const gpt2rt__tensor *gpt2rt__model_tensor(const gpt2rt_ctx *ctx, int which) {
    return which < GPT2RT__LNFW ? ctx->tensors + which : ctx->tensors + ctx->n_tensors - (GPT2RT__N_MODEL - which);
}

static const gpt2rt__tensor *gpt2rt__layer_tensors(const gpt2rt_ctx *ctx, int64_t l) {
    return ctx->tensors + GPT2RT__LNFW + l * GPT2RT__PER_LAYER;
}

/* the whole-model tensors; base: params (by off) or grads (by goff; NULL when frozen) */
static gpt2rt__model_params gpt2rt__mparams(const gpt2rt_ctx *ctx, float *base, int grads) {
    float *q[GPT2RT__N_MODEL];
    for (int i = 0; i < GPT2RT__N_MODEL; i++) {
        const gpt2rt__tensor *t = gpt2rt__model_tensor(ctx, i);
        q[i] = !grads ? base + t->off : t->goff >= 0 ? base + t->goff : NULL;
    }
    gpt2rt__model_params p;
    p.wte = q[GPT2RT__WTE]; p.wpe = q[GPT2RT__WPE];
    p.lnfw = q[GPT2RT__LNFW]; p.lnfb = q[GPT2RT__LNFB];
    return p;
}

/* per-layer tensors of layer l; base: params (by off) or grads (by goff; NULL when frozen) */
static gpt2rt__layer_params gpt2rt__lparams(const gpt2rt_ctx *ctx, float *base, int grads, int64_t l) {
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    float *q[GPT2RT__PER_LAYER];
    for (int i = 0; i < GPT2RT__PER_LAYER; i++)
        q[i] = !grads ? base + t[i].off : t[i].goff >= 0 ? base + t[i].goff : NULL;
    gpt2rt__layer_params p;
    p.ln1w = q[GPT2RT__LN1W]; p.ln1b = q[GPT2RT__LN1B];
    p.qkvw = q[GPT2RT__QKVW]; p.qkvb = q[GPT2RT__QKVB];
    p.projw = q[GPT2RT__PROJW]; p.projb = q[GPT2RT__PROJB];
    p.ln2w = q[GPT2RT__LN2W]; p.ln2b = q[GPT2RT__LN2B];
    p.fcw = q[GPT2RT__FCW]; p.fcb = q[GPT2RT__FCB];
    p.fcprojw = q[GPT2RT__FCPROJW]; p.fcprojb = q[GPT2RT__FCPROJB];
    return p;
}

/* ==== 3.2 Activations and arenas ==== */
/* the memory documentation: what every byte of the plan is for */

/* One layer's saved activations, in order, in bytes (activations of d->ab bytes,
   statistics fp32). full: every field (the FULL recompute slots); else the ones
   d->keep_* asks for, the others NULL. Fills a (pointers from base) when non-NULL. */
static int64_t gpt2rt__ald(const gpt2rt__dims *d, int64_t bytes) { return (bytes + d->align - 1) / d->align * d->align; }

static int64_t gpt2rt__layer_acts_carve(const gpt2rt__dims *d, unsigned char *base, gpt2rt__layer_acts *a, int full) {
    int64_t o = 0, BT = d->BT, C = d->C, ab = d->ab;
#define GPT2RT__CARVE(field, n, eb, keep) do { int k_ = full || (keep); \
        if (a) { a->field = k_ ? (float *)(void *)(base + o) : NULL; } \
        if (k_) { o += gpt2rt__ald(d, (n) * (eb)); } } while (0)
    GPT2RT__CARVE(ln1, BT * C, ab, d->keep_ln1);
    GPT2RT__CARVE(ln1_mean, BT, 4, 1);
    GPT2RT__CARVE(ln1_rstd, BT, 4, 1);
    GPT2RT__CARVE(qkv, BT * 3 * C, ab, 1);
    GPT2RT__CARVE(lse, d->B * d->NH * d->T, 4, 1);
    GPT2RT__CARVE(atty, BT * C, ab, 1);
    GPT2RT__CARVE(res2, BT * C, ab, 1);
    GPT2RT__CARVE(ln2, BT * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(ln2_mean, BT, 4, 1);
    GPT2RT__CARVE(ln2_rstd, BT, 4, 1);
    GPT2RT__CARVE(fch, BT * 4 * C, ab, 1);
    GPT2RT__CARVE(fch_gelu, BT * 4 * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(res3, BT * C, ab, 1);
#undef GPT2RT__CARVE
    return o;
}

/* the saved activations of layer l (NONE, SELECTIVE), or of its FULL recompute slot */
static gpt2rt__layer_acts gpt2rt__lacts(const gpt2rt_ctx *ctx, int64_t l) {
    gpt2rt__layer_acts a;
    int full = ctx->d.recompute == GPT2RT_RECOMPUTE_FULL;
    int64_t slot = full ? l % ctx->d.ck : l;
    gpt2rt__layer_acts_carve(&ctx->d, ctx->layer_acts + slot * ctx->layer_stride, &a, full);
    return a;
}

static size_t gpt2rt__sgemm_workspace_bytes(int n_threads);
static int64_t gpt2rt__opt_norm_chunks(int64_t n_params);
#define GPT2RT__CU_BLAS_WORKSPACE ((int64_t)32 << 20) /* cuBLASLt workspace on Hopper */

/* The arenas of every category, in bytes, for the device holding span s, and (when
   ctx is non-NULL and its arenas are allocated: the CPU backend, one device) the
   pointers into them. The single source of truth for the plan and for creation:
   planned == allocated by construction.
   Layer split: the first device holds wte (a weights-only copy unless it is also
   the last) and wpe; the last holds wte for the tied head with its gradient,
   moments and master copy, ln_f and the logits; the first device's wte gradient is
   staged in comm and sent to the last. Data parallel: every device holds it all. */
static void gpt2rt__layout(const gpt2rt__dims *d, const gpt2rt__span *s, uint64_t bytes[GPT2RT_MEM_COUNT],
                           gpt2rt_ctx *ctx) {
    int64_t BT = d->BT, C = d->C, ab = d->ab, nl = s->l1 - s->l0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) bytes[i] = 0;

    /* parameters, by group: held (weights) and owned (master, grads, moments) */
    int64_t ln = 4 * C, attn = 4 * C * C + 4 * C, mlp = 8 * C * C + 5 * C;
    unsigned fz = d->frozen;
    int64_t held = nl * (ln + attn + mlp), owned = nl * ((fz & GPT2RT_GROUP_LAYERNORM ? 0 : ln) +
                   (fz & GPT2RT_GROUP_ATTENTION ? 0 : attn) + (fz & GPT2RT_GROUP_MLP ? 0 : mlp));
    int64_t wte = d->Vp * C, wpe = d->P * C, lnf = 2 * C;
    int wte_train = !(fz & GPT2RT_GROUP_TOKEN_EMBED);
    if (s->first || s->last) held += wte;
    if (s->last && wte_train) owned += wte;
    if (s->first) { held += wpe; if (!(fz & GPT2RT_GROUP_POS_EMBED)) owned += wpe; }
    if (s->last) { held += lnf; if (!(fz & GPT2RT_GROUP_LAYERNORM)) owned += lnf; }
    bytes[GPT2RT_MEM_WEIGHTS] = (uint64_t)(held * d->wb);
    /* low precision: an fp32 master of what this device trains */
    bytes[GPT2RT_MEM_MASTER] = d->wb == 4 ? 0 : (uint64_t)(owned * 4);
    bytes[GPT2RT_MEM_GRADS] = (uint64_t)(owned * 4);
    bytes[GPT2RT_MEM_MOMENTS] = (uint64_t)(owned * 8);

    /* activations: tokens, layer input, the layers (or FULL's checkpoints and slots), ln_f, losses */
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    int64_t stride = gpt2rt__layer_acts_carve(d, NULL, NULL, full);
    int64_t n_blocks = full ? (d->ck < nl ? d->ck : nl) : nl;
    int64_t n_ckpt = full ? (nl + d->ck - 1) / d->ck - 1 : 0; /* the layer input is checkpoint 0 */
    int64_t o = 0, act = gpt2rt__ald(d, BT * C * ab);
    int64_t o_inputs = o; if (s->first) o += gpt2rt__ald(d, BT * 4);
    int64_t o_targets = o; if (s->last) o += gpt2rt__ald(d, BT * 4);
    int64_t o_x0 = o; o += act;
    int64_t o_layers = o; o += n_blocks * stride;
    int64_t o_ckpt = o; o += n_ckpt * act;
    int64_t o_xout = o; if (full && s->last) o += act;
    int64_t o_lnf = o, o_lnf_mean = o, o_lnf_rstd = o, o_losses = o, o_lse = o;
    if (s->last) {
        o_lnf = o; o += act;
        o_lnf_mean = o; o += gpt2rt__ald(d, BT * 4);
        o_lnf_rstd = o; o += gpt2rt__ald(d, BT * 4);
        o_losses = o; o += gpt2rt__ald(d, BT * 4);
        o_lse = o; o += gpt2rt__ald(d, BT * 4);
    }
    bytes[GPT2RT_MEM_ACTIVATIONS] = (uint64_t)o;

    /* transient: gradient of the residual stream, two scratch buffers, and the
       recompute buffer for outputs not kept */
    int64_t big = gpt2rt__ald(d, BT * 4 * C * ab);
    bytes[GPT2RT_MEM_TRANSIENT] = (uint64_t)(2 * act + big + (d->rc ? big : 0));
    bytes[GPT2RT_MEM_LOGITS] = s->last ? (uint64_t)(BT * d->Vp * ab) : 0;

    /* the norm's partial sums cover what this device owns */
    uint64_t ws_gemm, ws_att, ws_norm = (uint64_t)gpt2rt__ald(d, gpt2rt__opt_norm_chunks(owned) * 8);
    if (d->cuda) { /* cuBLASLt workspace; attention's row statistics; the embedding's token buckets */
        int64_t n_tensors = GPT2RT__N_MODEL + GPT2RT__PER_LAYER * d->L, rows = (BT + 31) / 32;
        int64_t red = rows * 2 * C * 4 > 4 * C * 4 ? rows * 2 * C * 4 : 4 * C * 4; /* LayerNorm / bias partials */
        if (n_tensors * 32 + 16 > red) red = n_tensors * 32 + 16;                  /* the AdamW tensor table */
        ws_gemm = (uint64_t)GPT2RT__CU_BLAS_WORKSPACE;
        ws_att = (uint64_t)(gpt2rt__ald(d, d->B * d->NH * d->T * 4) + gpt2rt__ald(d, (3 * BT + 1) * 4) +
                            gpt2rt__ald(d, red));
    } else {
        ws_gemm = (uint64_t)gpt2rt__ald(d, (int64_t)gpt2rt__sgemm_workspace_bytes(d->nt));
        ws_att = (uint64_t)d->nt * (uint64_t)gpt2rt__pad16(2 * d->T) * 4;
    }
    bytes[GPT2RT_MEM_WORKSPACE] = ws_gemm + ws_att + ws_norm;
    if (s->first && !s->last && wte_train) bytes[GPT2RT_MEM_COMM] = (uint64_t)(wte * 4);

    if (!ctx) return;
    gpt2rt__param_table(d, NULL, &ctx->n_params, &ctx->n_train);
    ctx->params = (float *)ctx->arena[GPT2RT_MEM_WEIGHTS];
    ctx->grads = (float *)ctx->arena[GPT2RT_MEM_GRADS];
    ctx->m = (float *)ctx->arena[GPT2RT_MEM_MOMENTS];
    ctx->v = ctx->m + ctx->n_train;
    unsigned char *a = (unsigned char *)ctx->arena[GPT2RT_MEM_ACTIVATIONS];
    ctx->inputs = (int32_t *)(void *)(a + o_inputs);
    ctx->targets = (int32_t *)(void *)(a + o_targets);
    ctx->x0 = (float *)(void *)(a + o_x0);
    ctx->layer_acts = a + o_layers;
    ctx->layer_stride = stride;
    ctx->ckpt = (float *)(void *)(a + o_ckpt);
    ctx->xout = (float *)(void *)(a + o_xout);
    ctx->lnf = (float *)(void *)(a + o_lnf);
    ctx->lnf_mean = (float *)(void *)(a + o_lnf_mean);
    ctx->lnf_rstd = (float *)(void *)(a + o_lnf_rstd);
    ctx->losses = (float *)(void *)(a + o_losses);
    ctx->logit_lse = (float *)(void *)(a + o_lse);
    unsigned char *tr = (unsigned char *)ctx->arena[GPT2RT_MEM_TRANSIENT];
    ctx->dres = (float *)(void *)tr;
    ctx->dbuf = (float *)(void *)(tr + act);
    ctx->dbig = (float *)(void *)(tr + 2 * act);
    ctx->rcbuf = d->rc ? (float *)(void *)(tr + 2 * act + big) : NULL;
    ctx->logits = (float *)ctx->arena[GPT2RT_MEM_LOGITS];
    unsigned char *ws = (unsigned char *)ctx->arena[GPT2RT_MEM_WORKSPACE];
    ctx->gemm_ws = ws;
    ctx->att_scratch = (float *)(void *)(ws + ws_gemm);
    ctx->norm_parts = (double *)(void *)(ws + ws_gemm + ws_att);
}

/* ==== 3.3 Plan ==== */

#define GPT2RT__GIB(x) ((double)(x) / 1073741824.0)
/* a size as "%.2f %s": KiB, MiB or GiB, whichever reads best */
#define GPT2RT__SZ(x) gpt2rt__sz_val((uint64_t)(x)), gpt2rt__sz_unit((uint64_t)(x))
static double gpt2rt__sz_val(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? (double)b / 1073741824.0 : b >= ((uint64_t)1 << 20) ? (double)b / 1048576.0
         : (double)b / 1024.0;
}
static const char *gpt2rt__sz_unit(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? "GiB" : b >= ((uint64_t)1 << 20) ? "MiB" : "KiB";
}
#define GPT2RT__MIB(x) ((double)(x) / 1048576.0)

/* What one device holds beyond the arenas, as gpt2rt_plan estimates it: the CUDA
   context and cuBLASLt's own state, and NCCL's buffers with two devices. The CUDA
   backend measures it (gpt2rt_plan_allocated); these are its round figures. */
static uint64_t gpt2rt__overhead_estimate(const gpt2rt_config *c) {
    if (c->backend != GPT2RT_BACKEND_CUDA) return 0;
    return ((uint64_t)600 << 20) + (c->n_devices > 1 ? (uint64_t)256 << 20 : 0);
}

/* The advisor's coarse model of one optimizer step in seconds. Matrix products run
   at a peak scaled by an efficiency that grows with the tokens of a micro-batch;
   element-wise recompute and the update move bytes at memory bandwidth; each
   layer's kernels cost a launch latency per micro-batch; two devices exchange
   gradients (data parallel) or activations (layer split) over a link, and layer
   split runs its devices one after the other. Round figures for an H100-class GPU
   and a small multicore CPU: it ranks configurations, it does not promise times.
   *flops gets the FLOPs of the step, recompute included. */
static double gpt2rt__predict_seconds(const gpt2rt_config *c, double *flops) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    int cuda = d.cuda, n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    double peak = !cuda ? 1.5e11 : c->precision != GPT2RT_PRECISION_FP32 ? 4.0e14 : c->tf32 ? 2.0e14 : 4.0e13;
    double bw = cuda ? 2.5e12 : 2.0e10, link = cuda ? 1.0e11 : 1.0e10, half = cuda ? 4096.0 : 128.0;
    double launch = cuda ? 25 * 5e-6 : 0.0; /* per layer and micro-batch */
    double C = (double)d.C, T = (double)d.T, tok = (double)d.BT, eff = tok / (tok + half);
    double layer = 72 * C * C + 12 * C * T, layer_fwd = 24 * C * C + 4 * C * T, head = 6 * (double)d.Vp * C;
    if (c->frozen & GPT2RT_GROUP_ATTENTION) layer -= 8 * C * C;  /* no weight gradients: 2 FLOPs a weight */
    if (c->frozen & GPT2RT_GROUP_MLP) layer -= 16 * C * C;
    if (c->frozen & GPT2RT_GROUP_TOKEN_EMBED) head -= 2 * (double)d.Vp * C;
    double t_micro = 0.0, f_micro = 0.0, owned_max = 0.0;
    for (int dev = 0; dev < (split ? n : 1); dev++) {
        gpt2rt__span s = gpt2rt__span_of(c, dev);
        double nl = (double)(s.l1 - s.l0), f = tok * (nl * layer + (s.last ? head : 0.0)), bytes = 0.0;
        if (d.recompute == GPT2RT_RECOMPUTE_FULL) f += tok * (nl - (d.ck < nl ? d.ck : nl)) * layer_fwd;
        if (d.recompute == GPT2RT_RECOMPUTE_SELECTIVE) /* read and write LN and GELU outputs again */
            bytes = tok * nl * 2.0 * d.ab * ((d.need_ln1 ? C : 0) + (d.need_mlp_in ? 5 * C : 0));
        t_micro += f / (peak * eff) + bytes / bw + nl * launch;
        f_micro += f;
        uint64_t b[GPT2RT_MEM_COUNT];
        gpt2rt__layout(&d, &s, b, NULL);
        if ((double)b[GPT2RT_MEM_GRADS] / 4 > owned_max) owned_max = (double)b[GPT2RT_MEM_GRADS] / 4;
    }
    if (split) t_micro += 2.0 * (n - 1) * tok * C * d.ab / link;
    double t = c->grad_accum * t_micro + owned_max * (32.0 + d.wb) / bw; /* AdamW: p, g, m, v in and out */
    if (c->parallel == GPT2RT_PARALLEL_DATA) t += 2.0 * (n - 1) / n * owned_max * 4.0 / link; /* ring all-reduce */
    if (flops) *flops = f_micro * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? n : 1);
    return t;
}

static const char *gpt2rt__precision_name(gpt2rt_precision p) {
    return p == GPT2RT_PRECISION_BF16 ? "bf16" : p == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
}

/* "none", "selective", "full (every 3rd layer input)" */
static const char *gpt2rt__recompute_name(const gpt2rt_config *c, char *buf, size_t cap) {
    if (c->recompute == GPT2RT_RECOMPUTE_SELECTIVE) return "selective";
    if (c->recompute != GPT2RT_RECOMPUTE_FULL) return "none";
    snprintf(buf, cap, "full, checkpoint every %d layer%s", c->checkpoint_every, c->checkpoint_every > 1 ? "s" : "");
    return buf;
}

static const char *gpt2rt__parallel_name(gpt2rt_parallel p) {
    return p == GPT2RT_PARALLEL_DATA ? "data parallel" : p == GPT2RT_PARALLEL_LAYER_SPLIT ? "layer split" : "one device";
}

static uint64_t gpt2rt__plan_peak(const gpt2rt_memory_plan *p, int *at) {
    uint64_t m = 0;
    for (int dev = 0; dev < p->n_devices; dev++)
        if (p->total[dev] + p->overhead[dev] > m || !dev) { m = p->total[dev] + p->overhead[dev]; if (at) *at = dev; }
    return m;
}

/* ==== 3.4 Advisor ==== */

/* one line per knob that differs between plans a and b, with what it saves */
static size_t gpt2rt__fit_explain_step(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *a,
                                       const gpt2rt_memory_plan *b, const char *what, const char *why) {
    int da = 0, db = 0;
    uint64_t pa = gpt2rt__plan_peak(a, &da), pb = gpt2rt__plan_peak(b, &db);
    double sa = a->predicted_seconds, sb = b->predicted_seconds;
    GPT2RT__PUT("- %s: the fullest device needs %.2f %s -> %.2f %s (%s %.2f %s); predicted step %.3f -> %.3f s%s%s\n",
                what, GPT2RT__SZ(pa), GPT2RT__SZ(pb), pb <= pa ? "saves" : "costs",
                GPT2RT__SZ(pb <= pa ? pa - pb : pb - pa), sa, sb, why ? ": " : "", why ? why : "");
    return n;
}

/* The micro-batches gpt2rt_fit tries when one replica runs g rows a step: divisors b
   of g with b and g/b in [1, 2^20]. Bytes and the predicted time both grow with b,
   so in each octave [2^k, 2^(k+1)) the smallest and the largest divisor stand for
   the others; keep (the config's own) is always tried. At most 43 candidates,
   ascending, found with at most 2^20 divisions whatever g is: the advice costs
   milliseconds at the limits (batch 2^20, accumulation 2^20), not hours. */
static int gpt2rt__fit_batches(int64_t g, int64_t keep, int64_t out[43]) {
    const int64_t lim = (int64_t)1 << 20;
    int64_t first[21] = {0}, last[21] = {0}, lo = g > lim ? (g + lim - 1) / lim : 1, hi = g < lim ? g : lim;
    for (int64_t b = lo; b <= hi; b++) {
        if (g % b) continue;
        int k = 0;
        while (((int64_t)2 << k) <= b) k++;
        if (!first[k]) first[k] = b;
        last[k] = b;
    }
    int n = 0, kept = !(keep >= lo && keep <= hi && g % keep == 0);
    for (int k = 0; k < 21; k++)
        for (int i = 0; i < 2; i++) {
            int64_t b = i ? last[k] : first[k];
            if (!b || (i && b == first[k])) continue;
            if (!kept && keep <= b) { if (keep < b) out[n++] = keep; kept = 1; }
            out[n++] = b;
        }
    if (!kept) out[n++] = keep;
    return n;
}

/* What the search found: the fastest config that fits (the coarse model's ranking,
   fewer changes on a tie), or the smallest reachable one when nothing fits. */
typedef struct gpt2rt__fit_result {
    int found;
    gpt2rt_memory_plan best; /* found */
    int best_changes;        /* knobs best changes from the config */
    gpt2rt_config smallest;  /* not found */
    uint64_t small_peak;
} gpt2rt__fit_result;

/* Every config allow reaches from base's with the same global batch: parallel mode,
   micro-batch x accumulation, recompute level, precision. */
static void gpt2rt__fit_search(const gpt2rt_memory_plan *base, uint64_t budget, unsigned allow,
                               gpt2rt__fit_result *fr) {
    const gpt2rt_config *c0 = &base->config;
    int nd = c0->n_devices;
    int64_t global = (int64_t)c0->batch_size * c0->grad_accum * (c0->parallel == GPT2RT_PARALLEL_DATA ? nd : 1);
    gpt2rt_memory_plan cand, best;
    memset(&best, 0, sizeof best);
    int found = 0, best_changes = 0;
    uint64_t small_peak = UINT64_MAX;
    gpt2rt_config smallest = *c0;
    gpt2rt_parallel modes[2] = {c0->parallel, c0->parallel};
    int n_modes = 1;
    if ((allow & GPT2RT_FIT_PARALLEL) && nd > 1) {
        modes[0] = GPT2RT_PARALLEL_DATA; modes[1] = GPT2RT_PARALLEL_LAYER_SPLIT; n_modes = 2;
    }
    for (int mi = 0; mi < n_modes; mi++) {
        int64_t reps = modes[mi] == GPT2RT_PARALLEL_DATA ? nd : 1;
        if (global % reps) continue;
        int64_t g = global / reps; /* micro-batch x accumulation on one replica */
        int64_t bs[43];
        int nb = gpt2rt__fit_batches(g, c0->batch_size, bs);
        for (int bi = 0; bi < nb; bi++) {
            int64_t b = bs[bi];
            /* without FIT_BATCH the micro-batch stays; only a change of mode may change the accumulation */
            if (!(allow & GPT2RT_FIT_BATCH) &&
                !(b == c0->batch_size && (modes[mi] != c0->parallel || g / b == c0->grad_accum))) continue;
            if (b > (1 << 20) || g / b > (1 << 20)) continue;
            for (int ri = 0; ri < 4; ri++) {
                gpt2rt_recompute rc = ri == 0 ? GPT2RT_RECOMPUTE_NONE : ri == 1 ? GPT2RT_RECOMPUTE_SELECTIVE
                                    : GPT2RT_RECOMPUTE_FULL;
                int ck = ri == 2 ? 1 : ri == 3 ? GPT2RT_CHECKPOINT_SQRT : 0;
                if (!(allow & GPT2RT_FIT_RECOMPUTE) && ri) continue; /* keep the config's */
                for (int pi = 0; pi < 2; pi++) {
                    gpt2rt_config t = *c0;
                    if (pi == 1) {
                        if (!(allow & GPT2RT_FIT_PRECISION) || t.backend != GPT2RT_BACKEND_CUDA ||
                            t.precision != GPT2RT_PRECISION_FP32) continue;
                        t.precision = GPT2RT_PRECISION_BF16; t.tf32 = 0;
                    }
                    t.parallel = modes[mi];
                    t.batch_size = (int)b;
                    t.grad_accum = (int)(g / b);
                    if (allow & GPT2RT_FIT_RECOMPUTE) { t.recompute = rc; t.checkpoint_every = ck; }
                    if (gpt2rt_plan(&t, &cand) != GPT2RT_OK) continue;
                    uint64_t peak = gpt2rt__plan_peak(&cand, NULL);
                    if (peak < small_peak) { small_peak = peak; smallest = cand.config; }
                    if (peak > budget) continue;
                    const gpt2rt_config *k = &cand.config;
                    int changes = (k->parallel != c0->parallel) + (k->precision != c0->precision) +
                                  (k->batch_size != c0->batch_size) + (k->recompute != c0->recompute ||
                                  k->checkpoint_every != c0->checkpoint_every);
                    /* faster by more than 0.5%, or as fast with fewer changes */
                    if (!found || cand.predicted_seconds < best.predicted_seconds * 0.995 ||
                        (cand.predicted_seconds <= best.predicted_seconds * 1.005 && changes < best_changes)) {
                        best = cand; best_changes = changes; found = 1;
                    }
                }
            }
        }
    }
    fr->found = found;
    fr->best = best;
    fr->best_changes = best_changes;
    fr->smallest = smallest;
    fr->small_peak = small_peak;
}

/* the first lines of the explanation: what the config needs against the budget, and
   what its frozen groups already save */
static size_t gpt2rt__fit_explain_start(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *base,
                                        uint64_t budget) {
    const gpt2rt_config *c0 = &base->config;
    int at = 0;
    uint64_t peak0 = gpt2rt__plan_peak(base, &at);
    GPT2RT__PUT("the config needs %.2f %s on device %d", GPT2RT__SZ(peak0), at);
    if (base->overhead[at])
        GPT2RT__PUT(" (%.2f %s arenas + %.2f %s estimated overhead)", GPT2RT__SZ(base->total[at]),
                    GPT2RT__SZ(base->overhead[at]));
    GPT2RT__PUT("; the budget is %.2f %s per device\n", GPT2RT__SZ(budget));
    if (c0->frozen) {
        gpt2rt_config u = *c0;
        gpt2rt_memory_plan up;
        u.frozen = 0;
        if (gpt2rt_plan(&u, &up) == GPT2RT_OK)
            GPT2RT__PUT("- frozen groups 0x%x already save %.2f %s: %.2fM parameters get no gradient, no moments "
                        "and no master copy, and the inputs only their weight gradients need are not kept\n",
                        c0->frozen, GPT2RT__SZ(gpt2rt__plan_peak(&up, NULL) - peak0),
                        (double)(base->n_params_padded - base->n_trainable) / 1e6);
    }
    return n;
}

/* Walk from base's config to best's one knob at a time, so each line's saving is its own. */
static size_t gpt2rt__fit_explain_changes(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *base,
                                          const gpt2rt_memory_plan *best) {
    const gpt2rt_config *c0 = &base->config;
    int nd = c0->n_devices;
    int64_t global = (int64_t)c0->batch_size * c0->grad_accum * (c0->parallel == GPT2RT_PARALLEL_DATA ? nd : 1);
    char r0[64];
    gpt2rt_memory_plan cur = *base, next;
    gpt2rt_config w = *c0;
    const gpt2rt_config *k = &best->config;
    char what[256], r1[64];
    if (k->parallel != w.parallel) {
        gpt2rt_parallel from = w.parallel;
        w.parallel = k->parallel;
        int64_t g = global / (w.parallel == GPT2RT_PARALLEL_DATA ? nd : 1); /* keep the micro-batch if it divides */
        if (g % w.batch_size) w.batch_size = k->batch_size;
        w.grad_accum = (int)(g / w.batch_size);
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "%s -> %s (micro-batch %d x accumulation %d, global batch %lld kept)",
                 gpt2rt__parallel_name(from), gpt2rt__parallel_name(w.parallel), w.batch_size, w.grad_accum,
                 (long long)global);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, w.parallel == GPT2RT_PARALLEL_LAYER_SPLIT
            ? "data parallel keeps every weight, gradient and moment on every device; layer split keeps each "
              "layer's on one device"
            : "each device holds the whole model but only its share of the batch");
        cur = next;
    }
    if (k->precision != w.precision) {
        w.precision = k->precision; w.tf32 = 0;
        gpt2rt_plan(&w, &next);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, "precision fp32 -> bf16",
                                 "bf16 weights and activations, fp32 master weights and moments");
        cur = next;
    }
    if (k->batch_size != w.batch_size || k->grad_accum != w.grad_accum) {
        int b0 = w.batch_size, a0 = w.grad_accum;
        w.batch_size = k->batch_size; w.grad_accum = k->grad_accum;
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "micro-batch %d x accumulation %d -> %d x %d (global batch %lld kept)", b0, a0,
                 w.batch_size, w.grad_accum, (long long)global);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, "activations and logits scale with the micro-batch");
        cur = next;
    }
    if (k->recompute != w.recompute || k->checkpoint_every != w.checkpoint_every) {
        gpt2rt_config from = w;
        w.recompute = k->recompute; w.checkpoint_every = k->checkpoint_every;
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "recompute %s -> %s", gpt2rt__recompute_name(&from, r0, sizeof r0),
                 gpt2rt__recompute_name(&w, r1, sizeof r1));
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, w.recompute == GPT2RT_RECOMPUTE_SELECTIVE
            ? "LayerNorm and GELU outputs are recomputed in the backward"
            : "only layer inputs are kept; each layer's forward runs again in the backward");
        cur = next;
    }
    return n;
}

/* ==== 4. Formats ==== */

/* ==== 4.1 safetensors: reading ==== */

/* safetensors: 8-byte little-endian header length N, N bytes of JSON
   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
    "__metadata__": {"key": "value"}}, then the data; offsets count from the data's
   first byte. The parser trusts nothing: every length, offset and count is checked
   against the bytes that exist before use. Little-endian hosts only. */

enum { GPT2RT__F32, GPT2RT__F16, GPT2RT__BF16, GPT2RT__F64, GPT2RT__I64, GPT2RT__I32, GPT2RT__I16, GPT2RT__I8,
       GPT2RT__U8, GPT2RT__U16, GPT2RT__U32, GPT2RT__U64, GPT2RT__BOOL, GPT2RT__F8E4M3, GPT2RT__F8E5M2,
       GPT2RT__NDTYPE };
static const char *gpt2rt__dtype_names[GPT2RT__NDTYPE] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8",
                                                         "U16", "U32", "U64", "BOOL", "F8_E4M3", "F8_E5M2"};
static const int gpt2rt__dtype_size[GPT2RT__NDTYPE] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 2, 4, 8, 1, 1, 1};

#define GPT2RT__ST_MAX_DIMS 8
typedef struct gpt2rt__st_tensor {
    const char *name; /* points into the parser's header copy */
    int dtype, ndim;
    int64_t shape[GPT2RT__ST_MAX_DIMS];
    uint64_t begin, end; /* bytes, relative to the data section */
} gpt2rt__st_tensor;

typedef struct gpt2rt__st {
    char *header;                   /* copy of the JSON, strings unescaped in place */
    gpt2rt__st_tensor *t;
    int n, cap;
    const char **meta;              /* key, value, key, value ... */
    int n_meta, cap_meta;
    const unsigned char *data;
    uint64_t data_len;
} gpt2rt__st;

typedef struct gpt2rt__json {
    char *p, *begin, *end;
    gpt2rt_ctx *ctx;
    const char *what; /* file name, for messages */
    const char *kind; /* "safetensors header", "config.json" */
} gpt2rt__json;

static gpt2rt_result gpt2rt__json_fail(gpt2rt__json *j, const char *msg) {
    return gpt2rt__fail(j->ctx, GPT2RT_ERR_FORMAT, "%s: %s byte %lld: %s", j->what, j->kind,
                        (long long)(j->p - j->begin), msg);
}

static void gpt2rt__json_ws(gpt2rt__json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int gpt2rt__json_eat(gpt2rt__json *j, char c) {
    gpt2rt__json_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}

static int gpt2rt__hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int gpt2rt__json_u4(gpt2rt__json *j, unsigned *u) {
    if (j->end - j->p < 4) return 0;
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = gpt2rt__hex(j->p[i]);
        if (h < 0) return 0;
        *u = *u * 16 + (unsigned)h;
    }
    j->p += 4;
    return 1;
}

/* a string, unescaped in place (never longer than its source), NUL-terminated */
static gpt2rt_result gpt2rt__json_string(gpt2rt__json *j, const char **out) {
    if (!gpt2rt__json_eat(j, '"')) return gpt2rt__json_fail(j, "expected a string");
    char *w = j->p, *start = j->p;
    while (1) {
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) return gpt2rt__json_fail(j, "control character in a string");
        if (c != '\\') { *w++ = (char)c; continue; }
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated escape");
        char e = *j->p++;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!gpt2rt__json_u4(j, &u)) return gpt2rt__json_fail(j, "bad \\u escape");
            if (u >= 0xD800 && u < 0xDC00) {
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') return gpt2rt__json_fail(j, "lone surrogate");
                j->p += 2;
                if (!gpt2rt__json_u4(j, &lo) || lo < 0xDC00 || lo >= 0xE000) return gpt2rt__json_fail(j, "bad surrogate pair");
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u < 0xE000) return gpt2rt__json_fail(j, "lone surrogate");
            if (u == 0) return gpt2rt__json_fail(j, "NUL character in a string");
            if (u < 0x80) *w++ = (char)u;
            else if (u < 0x800) { *w++ = (char)(0xC0 | (u >> 6)); *w++ = (char)(0x80 | (u & 63)); }
            else if (u < 0x10000) {
                *w++ = (char)(0xE0 | (u >> 12)); *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            } else {
                *w++ = (char)(0xF0 | (u >> 18)); *w++ = (char)(0x80 | ((u >> 12) & 63));
                *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            }
            break;
        }
        default: return gpt2rt__json_fail(j, "unknown escape");
        }
    }
    *w = 0; /* w <= the closing quote, which has been read */
    *out = start;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__json_u64(gpt2rt__json *j, uint64_t *out) {
    gpt2rt__json_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return gpt2rt__json_fail(j, "expected a non-negative integer");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return gpt2rt__json_fail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return gpt2rt__json_fail(j, "expected an integer, found a fraction");
    *out = v;
    return GPT2RT_OK;
}

/* skip any JSON value (for keys we do not use), nesting at most 32 deep */
static gpt2rt_result gpt2rt__json_skip(gpt2rt__json *j, int depth) {
    if (depth > 32) return gpt2rt__json_fail(j, "nested too deeply");
    gpt2rt__json_ws(j);
    if (j->p >= j->end) return gpt2rt__json_fail(j, "unexpected end of header");
    const char *s;
    char c = *j->p;
    if (c == '"') return gpt2rt__json_string(j, &s);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (gpt2rt__json_eat(j, close)) return GPT2RT_OK;
        do {
            gpt2rt_result r;
            if (c == '{') {
                if ((r = gpt2rt__json_string(j, &s)) != GPT2RT_OK) return r;
                if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
            }
            if ((r = gpt2rt__json_skip(j, depth + 1)) != GPT2RT_OK) return r;
        } while (gpt2rt__json_eat(j, ','));
        if (!gpt2rt__json_eat(j, close)) return gpt2rt__json_fail(j, c == '{' ? "expected '}'" : "expected ']'");
        return GPT2RT_OK;
    }
    const char *lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) { j->p += n; return GPT2RT_OK; }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        j->p++;
        while (j->p < j->end && *j->p && strchr("0123456789.eE+-", *j->p)) j->p++;
        return GPT2RT_OK;
    }
    return gpt2rt__json_fail(j, "unexpected character");
}

static int gpt2rt__grow(gpt2rt_ctx *ctx, void **arr, int *cap, int n, size_t elem) {
    if (n < *cap) return 1;
    int nc = *cap ? *cap * 2 : 64;
    void *na = gpt2rt__alloc(&ctx->cfg, (size_t)nc * elem, GPT2RT_MEM_BOOKKEEPING);
    if (!na) return 0;
    if (*arr) memcpy(na, *arr, (size_t)n * elem);
    gpt2rt__free(&ctx->cfg, *arr, GPT2RT_MEM_BOOKKEEPING);
    *arr = na;
    *cap = nc;
    return 1;
}

static void gpt2rt__st_release(gpt2rt_ctx *ctx, gpt2rt__st *st) {
    gpt2rt__free(&ctx->cfg, st->header, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, st->t, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, (void *)st->meta, GPT2RT_MEM_BOOKKEEPING);
    memset(st, 0, sizeof *st);
}

static gpt2rt_result gpt2rt__st_tensor_entry(gpt2rt__json *j, gpt2rt__st_tensor *t) {
    char msg[160];
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
    gpt2rt_result r;
    if (!gpt2rt__json_eat(j, '{')) return gpt2rt__json_fail(j, "expected '{' (a tensor entry)");
    if (gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "empty tensor entry");
    do {
        const char *key;
        if ((r = gpt2rt__json_string(j, &key)) != GPT2RT_OK) return r;
        if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
        if (!strcmp(key, "dtype")) {
            const char *dt;
            if (seen_dtype++) return gpt2rt__json_fail(j, "duplicate \"dtype\"");
            if ((r = gpt2rt__json_string(j, &dt)) != GPT2RT_OK) return r;
            t->dtype = -1;
            for (int i = 0; i < GPT2RT__NDTYPE; i++)
                if (!strcmp(dt, gpt2rt__dtype_names[i])) t->dtype = i;
            if (t->dtype < 0) {
                snprintf(msg, sizeof msg, "tensor '%.60s' has unknown dtype '%.20s'", t->name, dt);
                return gpt2rt__json_fail(j, msg);
            }
        } else if (!strcmp(key, "shape")) {
            if (seen_shape++) return gpt2rt__json_fail(j, "duplicate \"shape\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (shape)");
            t->ndim = 0;
            if (!gpt2rt__json_eat(j, ']')) {
                do {
                    uint64_t v;
                    if (t->ndim == GPT2RT__ST_MAX_DIMS) return gpt2rt__json_fail(j, "more than 8 dimensions");
                    if ((r = gpt2rt__json_u64(j, &v)) != GPT2RT_OK) return r;
                    if (v > ((uint64_t)1 << 40)) return gpt2rt__json_fail(j, "dimension larger than 2^40");
                    t->shape[t->ndim++] = (int64_t)v;
                } while (gpt2rt__json_eat(j, ','));
                if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (shape)");
            }
        } else if (!strcmp(key, "data_offsets")) {
            if (seen_offsets++) return gpt2rt__json_fail(j, "duplicate \"data_offsets\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (data_offsets)");
            if ((r = gpt2rt__json_u64(j, &t->begin)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ',')) return gpt2rt__json_fail(j, "expected ',' (data_offsets has 2 numbers)");
            if ((r = gpt2rt__json_u64(j, &t->end)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (data_offsets has 2 numbers)");
        } else if ((r = gpt2rt__json_skip(j, 1)) != GPT2RT_OK) return r;
    } while (gpt2rt__json_eat(j, ','));
    if (!gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "expected '}' (end of a tensor entry)");
    if (!seen_dtype || !seen_shape || !seen_offsets)
        return gpt2rt__json_fail(j, "tensor entry lacks dtype, shape or data_offsets");
    return GPT2RT_OK;
}

static int gpt2rt__cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* a whole decimal integer in [lo, hi], nothing else: the only way text becomes a number */
static int gpt2rt__parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* Parse a whole safetensors file held in memory. On success st describes it and
   must be released with gpt2rt__st_release; on failure nothing is left allocated. */
static gpt2rt_result gpt2rt__st_parse(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what,
                                      gpt2rt__st *st) {
    memset(st, 0, sizeof *st);
    if (len < 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: %llu bytes, too short for a safetensors file (at least 8)",
                            what, (unsigned long long)len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > 100000000u || hlen > len - 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu exceeds the %llu bytes after the length "
                            "field%s", what, (unsigned long long)hlen, (unsigned long long)(len - 8),
                            hlen > 100000000u ? " (and the 100 MB limit)" : " (truncated file?)");
    if (hlen < 2) return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu is too short", what,
                                      (unsigned long long)hlen);
    st->header = (char *)gpt2rt__alloc(&ctx->cfg, (size_t)hlen + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!st->header) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: header copy of %llu bytes", what,
                                         (unsigned long long)hlen);
    memcpy(st->header, buf + 8, (size_t)hlen);
    st->header[hlen] = 0;
    st->data = buf + 8 + hlen;
    st->data_len = len - 8 - hlen;
    gpt2rt__json j;
    j.p = j.begin = st->header;
    j.end = st->header + hlen;
    j.ctx = ctx;
    j.what = what;
    j.kind = "safetensors header";
    gpt2rt_result r = GPT2RT_OK;
    if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' at the start of the header"); goto fail; }
    if (!gpt2rt__json_eat(&j, '}')) {
        do {
            const char *key;
            if ((r = gpt2rt__json_string(&j, &key)) != GPT2RT_OK) goto fail;
            if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
            if (!strcmp(key, "__metadata__")) {
                if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' (__metadata__)"); goto fail; }
                if (gpt2rt__json_eat(&j, '}')) continue;
                do {
                    const char *k, *v;
                    if ((r = gpt2rt__json_string(&j, &k)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
                    if ((r = gpt2rt__json_string(&j, &v)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__grow(ctx, (void **)&st->meta, &st->cap_meta, st->n_meta + 2, sizeof(char *))) {
                        r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: metadata table", what);
                        goto fail;
                    }
                    st->meta[st->n_meta++] = k;
                    st->meta[st->n_meta++] = v;
                } while (gpt2rt__json_eat(&j, ','));
                if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' (__metadata__)"); goto fail; }
                continue;
            }
            if (!gpt2rt__grow(ctx, (void **)&st->t, &st->cap, st->n, sizeof(gpt2rt__st_tensor))) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: tensor table of %d entries", what, st->n);
                goto fail;
            }
            gpt2rt__st_tensor *t = &st->t[st->n];
            memset(t, 0, sizeof *t);
            t->name = key;
            if ((r = gpt2rt__st_tensor_entry(&j, t)) != GPT2RT_OK) goto fail;
            st->n++;
        } while (gpt2rt__json_eat(&j, ','));
        if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' or ','"); goto fail; }
    }
    gpt2rt__json_ws(&j);
    if (j.p != j.end) { r = gpt2rt__json_fail(&j, "trailing bytes after the header object"); goto fail; }
    for (int i = 0; i < st->n; i++) {
        gpt2rt__st_tensor *t = &st->t[i];
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] && numel > ((uint64_t)1 << 50) / (uint64_t)t->shape[k]) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has more than 2^50 elements", what, t->name);
                goto fail;
            }
            numel *= (uint64_t)t->shape[k];
        }
        uint64_t bytes = numel * (uint64_t)gpt2rt__dtype_size[t->dtype];
        if (t->end < t->begin || t->end > st->data_len || t->end - t->begin != bytes) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] but needs %llu "
                             "bytes (%s, %llu elements) within the %llu data bytes%s", what, t->name,
                             (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)bytes,
                             gpt2rt__dtype_names[t->dtype], (unsigned long long)numel,
                             (unsigned long long)st->data_len, t->end > st->data_len ? " (truncated file?)" : "");
            goto fail;
        }
    }
    if (st->n > 1) { /* duplicate names: sort a copy of the names, compare neighbours */
        const char **names = (const char **)gpt2rt__alloc(&ctx->cfg, (size_t)st->n * sizeof(char *), GPT2RT_MEM_BOOKKEEPING);
        if (!names) { r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: name table", what); goto fail; }
        for (int i = 0; i < st->n; i++) names[i] = st->t[i].name;
        qsort((void *)names, (size_t)st->n, sizeof(char *), gpt2rt__cmp_names);
        for (int i = 1; i < st->n && r == GPT2RT_OK; i++)
            if (!strcmp(names[i - 1], names[i]))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' appears twice", what, names[i]);
        gpt2rt__free(&ctx->cfg, (void *)names, GPT2RT_MEM_BOOKKEEPING);
        if (r != GPT2RT_OK) goto fail;
    }
    return GPT2RT_OK;
fail:
    gpt2rt__st_release(ctx, st);
    return r;
}

static const gpt2rt__st_tensor *gpt2rt__st_find(const gpt2rt__st *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static const char *gpt2rt__st_meta(const gpt2rt__st *st, const char *key) {
    for (int i = 0; i + 1 < st->n_meta; i += 2)
        if (!strcmp(st->meta[i], key)) return st->meta[i + 1];
    return NULL;
}

static float gpt2rt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else { /* subnormal: renormalise */
        exp = 113;
        while (!(man & 1024)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 1023) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* element i of a F32/F16/BF16 tensor in the file, as float */
static float gpt2rt__st_get(const unsigned char *src, int dtype, int64_t i) {
    if (dtype == GPT2RT__F32) { float f; memcpy(&f, src + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    if (dtype == GPT2RT__F16) return gpt2rt__f16_to_f32(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ==== 4.2 safetensors: writing; files ==== */

typedef struct gpt2rt__st_out {
    const char *name;
    const float *src;       /* (rows, cols) row-major */
    int64_t rows, cols;
    int transpose;          /* write (cols, rows) */
    int ndim;               /* 1: shape (rows*cols); 2: 2-D */
} gpt2rt__st_out;

static int gpt2rt__ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* JSON-escape s into out (cap bytes); returns the length written */
static size_t gpt2rt__json_escape(char *out, size_t cap, const char *s) {
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = (char)c; }
        else if (c < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else out[n++] = (char)c;
    }
    out[n] = 0;
    return n;
}

static gpt2rt_result gpt2rt__write_close(gpt2rt_ctx *ctx, FILE *f, const char *tmp, const char *path, int ok) {
    if (f) {
        if (fflush(f) != 0 || ferror(f)) ok = 0;
        if (fclose(f) != 0) ok = 0;
    }
    if (!ok) {
        int e = errno;
        remove(tmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "writing %s failed: %s (nothing was replaced)", path, strerror(e));
    }
    return GPT2RT_OK;
}

#ifdef GPT2RT__TEST_HOOKS
static int gpt2rt__test_rename_fail; /* tests only: the n-th gpt2rt__rename from now fails with EIO */
#endif

static gpt2rt_result gpt2rt__rename(gpt2rt_ctx *ctx, const char *tmp, const char *path) {
#ifdef _WIN32
    remove(path);
#endif
    int rc;
#ifdef GPT2RT__TEST_HOOKS
    if (gpt2rt__test_rename_fail > 0 && --gpt2rt__test_rename_fail == 0) { errno = EIO; rc = -1; } else
#endif
    rc = rename(tmp, path);
    if (rc != 0) {
        int e = errno;
        remove(tmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "renaming %s to %s failed: %s", tmp, path, strerror(e));
    }
    return GPT2RT_OK;
}

/* Write a safetensors file of F32 tensors to tmp (the caller renames it into place). */
static gpt2rt_result gpt2rt__st_write(gpt2rt_ctx *ctx, const char *tmp, const char *path, const gpt2rt__st_out *t,
                                      int n, const char *const *meta, int n_meta) {
    size_t cap = 256 + (size_t)n * 256;
    for (int i = 0; i < n_meta; i++) cap += 8 * strlen(meta[i]) + 8;
    int64_t stage_n = 0;
    for (int i = 0; i < n; i++)
        if (t[i].transpose && t[i].rows * t[i].cols > stage_n) stage_n = t[i].rows * t[i].cols;
    char *h = (char *)gpt2rt__alloc(&ctx->cfg, cap, GPT2RT_MEM_BOOKKEEPING);
    float *stage = stage_n ? (float *)gpt2rt__alloc(&ctx->cfg, (size_t)stage_n * 4, GPT2RT_MEM_BOOKKEEPING) : NULL;
    if (!h || (stage_n && !stage)) {
        gpt2rt__free(&ctx->cfg, h, GPT2RT_MEM_BOOKKEEPING);
        gpt2rt__free(&ctx->cfg, stage, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "writing %s: %llu bytes of staging", path,
                            (unsigned long long)(cap + (size_t)stage_n * 4));
    }
    size_t hn = 0;
    hn += (size_t)snprintf(h + hn, cap - hn, "{\"__metadata__\":{");
    for (int i = 0; i + 1 < n_meta; i += 2) {
        h[hn++] = '"'; hn += gpt2rt__json_escape(h + hn, cap - hn, meta[i]);
        hn += (size_t)snprintf(h + hn, cap - hn, "\":\"");
        hn += gpt2rt__json_escape(h + hn, cap - hn, meta[i + 1]);
        hn += (size_t)snprintf(h + hn, cap - hn, "\"%s", i + 2 < n_meta ? "," : "");
    }
    h[hn++] = '}';
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)(t[i].rows * t[i].cols) * 4;
        if (t[i].ndim == 1)
            hn += (size_t)snprintf(h + hn, cap - hn, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                   t[i].name, (long long)(t[i].rows * t[i].cols), (unsigned long long)off,
                                   (unsigned long long)(off + bytes));
        else
            hn += (size_t)snprintf(h + hn, cap - hn, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                   t[i].name, (long long)(t[i].transpose ? t[i].cols : t[i].rows),
                                   (long long)(t[i].transpose ? t[i].rows : t[i].cols), (unsigned long long)off,
                                   (unsigned long long)(off + bytes));
        off += bytes;
    }
    h[hn++] = '}';
    while (hn % 8) h[hn++] = ' '; /* the data starts 8-byte aligned */
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL;
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hn >> (8 * i));
        ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hn, f) == hn;
    }
    for (int i = 0; ok && i < n; i++) {
        size_t cnt = (size_t)(t[i].rows * t[i].cols);
        const float *src = t[i].src;
        if (t[i].transpose) {
            for (int64_t r = 0; r < t[i].rows; r++)
                for (int64_t c = 0; c < t[i].cols; c++) stage[c * t[i].rows + r] = src[r * t[i].cols + c];
            src = stage;
        }
        ok = fwrite(src, 4, cnt, f) == cnt;
    }
    gpt2rt__free(&ctx->cfg, h, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, stage, GPT2RT_MEM_BOOKKEEPING);
    return gpt2rt__write_close(ctx, f, tmp, path, ok);
}

/* What a path names when it is not a regular file: loading one would block (a FIFO
   with no writer), never end (/dev/zero) or read a size that is not its length (/proc). */
static const char *gpt2rt__file_kind(unsigned mode) {
#ifdef S_ISFIFO
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
#endif
#ifdef S_ISCHR
    if (S_ISCHR(mode)) return "a character device";
#endif
#ifdef S_ISBLK
    if (S_ISBLK(mode)) return "a block device";
#endif
#ifdef S_ISSOCK
    if (S_ISSOCK(mode)) return "a socket";
#endif
#ifdef S_ISDIR
    if (S_ISDIR(mode)) return "a directory";
#endif
    (void)mode;
    return "not a plain file";
}

/* The whole of a regular file, in a buffer of len + 1 bytes (buf[len] = 0). On POSIX
   the file is opened non-blocking and checked with fstat before anything is read, so
   a FIFO, a device or a directory is refused at once, and a swap between a check and
   the open cannot fool it. */
static gpt2rt_result gpt2rt__read_file(gpt2rt_ctx *ctx, const char *path, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    struct stat sb;
#ifdef _WIN32
    FILE *f = fopen(path, "rb");
    if (!f) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(_fileno(f), &sb) != 0 || !GPT2RT__IS_REG(sb.st_mode)) {
        fclose(f);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file; give the path of a file", path);
    }
#define GPT2RT__RF_CLOSE() fclose(f)
#else
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !GPT2RT__IS_REG(sb.st_mode)) {
        close(fd);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file (%s); give the path of a file",
                            path, gpt2rt__file_kind((unsigned)sb.st_mode));
    }
#define GPT2RT__RF_CLOSE() close(fd)
#endif
    long long size = (long long)sb.st_size;
    if (size < 0 || size > ((long long)1 << 46)) { /* 64 TiB: no real checkpoint */
        GPT2RT__RF_CLOSE();
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s: a size of %lld bytes is not plausible", path, size);
    }
    unsigned char *buf = (unsigned char *)gpt2rt__alloc(&ctx->cfg, (size_t)size + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!buf) {
        GPT2RT__RF_CLOSE();
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "reading %s: %lld bytes", path, size);
    }
    /* up to one byte past the size: a file that reads more than fstat says is not regular */
    size_t got = 0, want = (size_t)size + 1;
    int e = 0;
#ifdef _WIN32
    got = fread(buf, 1, want, f);
    if (ferror(f)) e = errno ? errno : EIO;
#else
    while (got < want) {
        long k = (long)read(fd, buf + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { e = errno; break; }
        if (k == 0) break;
        got += (size_t)k;
    }
#endif
    GPT2RT__RF_CLOSE();
#undef GPT2RT__RF_CLOSE
    if (e || got != (size_t)size) {
        gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
        if (e) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "reading %s: %s", path, strerror(e));
        if (got > (size_t)size)
            return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file: its size is %lld bytes but it reads "
                                "more (a /proc or /sys file, or a file that grew while being read)", path, size);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "reading %s: got %llu of %lld bytes (it shrank while being read)",
                            path, (unsigned long long)got, size);
    }
    buf[size] = 0;
    *out = buf;
    *len = (size_t)size;
    return GPT2RT_OK;
}

static int gpt2rt__mkdir(const char *dir) {
#ifdef _WIN32
    int rc = _mkdir(dir);
#else
    int rc = mkdir(dir, 0777);
#endif
    return rc == 0 || errno == EEXIST;
}

/* ==== 4.3 Hugging Face weights and config.json ==== */

static void gpt2rt__reset_training(gpt2rt_ctx *ctx);

static const gpt2rt__tensor *gpt2rt__tensor_named(const gpt2rt_ctx *ctx, const char *name) {
    for (int i = 0; i < ctx->n_tensors; i++)
        if (!strcmp(ctx->tensors[i].name, name)) return &ctx->tensors[i];
    return NULL;
}

/* the Hugging Face shape of a tensor: (rows) | (hf_rows, cols) | transposed (cols, rows) */
static void gpt2rt__hf_shape(const gpt2rt__tensor *t, int64_t shape[2]) {
    shape[0] = t->ndim == 1 ? t->rows : t->transpose ? t->cols : t->hf_rows;
    shape[1] = t->ndim == 1 ? 1 : t->transpose ? t->rows : t->cols;
}

/* path itself, or path/name when path is a directory (a Hugging Face model directory);
   0 when that does not fit in cap */
static int gpt2rt__in_dir(const char *path, const char *name, char *out, size_t cap) {
    struct stat sb;
    /* a directory, or a missing path not named like the file (".safetensors", ".json") */
    int dir = stat(path, &sb) == 0 ? GPT2RT__IS_DIR(sb.st_mode) : !gpt2rt__ends_with(path, strchr(name, '.'));
    int n = dir ? snprintf(out, cap, "%s/%s", path, name) : snprintf(out, cap, "%s", path);
    return n >= 0 && (size_t)n < cap;
}

/* Load Hugging Face GPT-2 weights from a safetensors image in memory. Checks
   everything first, then copies: a failure leaves the weights untouched. */
static gpt2rt_result gpt2rt__weights_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__st_tensor **src = (const gpt2rt__st_tensor **)gpt2rt__alloc(
        &ctx->cfg, (size_t)ctx->n_tensors * sizeof(void *), GPT2RT_MEM_BOOKKEEPING);
    if (!src) { gpt2rt__st_release(ctx, &st); return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: table", what); }
    const size_t plen = strlen("transformer.");
    for (int i = 0; i < ctx->n_tensors && r == GPT2RT_OK; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        const gpt2rt__st_tensor *e = gpt2rt__st_find(&st, t->name);
        if (!e) e = gpt2rt__st_find(&st, t->name + plen); /* the original GPT-2 files have no prefix */
        src[i] = e;
        int64_t want[2];
        gpt2rt__hf_shape(t, want);
        if (!e) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' (or '%s') is missing; the file has %d tensors%s%s",
                             what, t->name, t->name + plen, st.n, st.n ? ", the first is " : "", st.n ? st.t[0].name : "");
        } else if (e->dtype != GPT2RT__F32 && e->dtype != GPT2RT__F16 && e->dtype != GPT2RT__BF16) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has dtype %s; F32, F16 or BF16 expected", what,
                             e->name, gpt2rt__dtype_names[e->dtype]);
        } else {
            int is_wpe = t->row == &gpt2rt__model_rows[GPT2RT__WPE];
            int ok = e->ndim == t->ndim && e->shape[0] == want[0] && (t->ndim == 1 || e->shape[1] == want[1]);
            if (is_wpe && e->ndim == 2 && e->shape[1] == want[1] && e->shape[0] >= want[0]) ok = 1;
            if (!ok) {
                char got[128];
                int gn = snprintf(got, sizeof got, "(");
                for (int k = 0; k < e->ndim && gn < 100; k++) gn += snprintf(got + gn, sizeof got - (size_t)gn, "%s%lld", k ? ", " : "", (long long)e->shape[k]);
                snprintf(got + gn, sizeof got - (size_t)gn, ")");
                if (t->ndim == 1)
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has shape %s; the config needs (%lld)",
                                     what, e->name, got, (long long)want[0]);
                else
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has shape %s; the config needs (%lld, %lld)%s",
                                     what, e->name, got, (long long)want[0], (long long)want[1],
                                     is_wpe ? " (or more positions)" : "");
            }
            /* NaN or inf in a weight would make every step after the load non-finite */
            const unsigned char *p = st.data + e->begin;
            for (int64_t j = 0; ok && j < want[0] * want[1]; j++) {
                float x = gpt2rt__st_get(p, e->dtype, j);
                if (!isfinite(x)) {
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld (row %lld, column %lld) is "
                                     "%g: weights must be finite", what, e->name, (long long)j,
                                     (long long)(j / want[1]), (long long)(j % want[1]), (double)x);
                    ok = 0;
                }
            }
        }
    }
    if (r == GPT2RT_OK) {
        int ignored_layers = 0, unknown = 0;
        for (int k = 0; k < st.n; k++) {
            const char *nm = st.t[k].name, *base = strncmp(nm, "transformer.", plen) ? nm : nm + plen;
            char full[128];
            snprintf(full, sizeof full, "transformer.%s", base);
            int layer = -1;
            if (gpt2rt__tensor_named(ctx, full) || gpt2rt__ends_with(base, ".attn.bias") ||
                gpt2rt__ends_with(base, ".attn.masked_bias") || !strcmp(base, "lm_head.weight") ||
                !strcmp(nm, "lm_head.weight"))
                continue;
            if (!strncmp(base, "h.", 2)) {
                char num[16];
                size_t k = 0;
                while (k < sizeof num - 1 && base[2 + k] >= '0' && base[2 + k] <= '9') { num[k] = base[2 + k]; k++; }
                num[k] = 0;
                long long lv;
                if (base[2 + k] == '.' && gpt2rt__parse_int(num, 0, 1 << 30, &lv)) layer = (int)lv;
            }
            if (layer >= ctx->d.L) ignored_layers++;
            else if (unknown++ < 4) gpt2rt__log(ctx, GPT2RT_LOG_WARN, "%s: ignoring unknown tensor '%s'", what, nm);
        }
        if (ignored_layers)
            gpt2rt__log(ctx, GPT2RT_LOG_INFO, "%s: loaded the first %lld layers; %d tensors of deeper layers ignored",
                        what, (long long)ctx->d.L, ignored_layers);
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *t = &ctx->tensors[i];
            const gpt2rt__st_tensor *e = src[i];
            const unsigned char *p = st.data + e->begin;
            float *dst = ctx->params + t->off;
            if (t->transpose) {
                for (int64_t row = 0; row < t->rows; row++)
                    for (int64_t c = 0; c < t->cols; c++) dst[row * t->cols + c] = gpt2rt__st_get(p, e->dtype, c * t->rows + row);
            } else {
                int64_t n = t->hf_rows * t->cols;
                for (int64_t j = 0; j < n; j++) dst[j] = gpt2rt__st_get(p, e->dtype, j);
                if (t->rows > t->hf_rows) memset(dst + n, 0, (size_t)((t->rows - t->hf_rows) * t->cols) * 4);
            }
        }
        gpt2rt__reset_training(ctx);
    }
    gpt2rt__free(&ctx->cfg, (void *)src, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__st_release(ctx, &st);
    return r;
}

/* ---- config.json: the model shape of a Hugging Face GPT-2 directory ---- */

/* buf: len bytes followed by a NUL (gpt2rt__read_file), unescaped in place */
static gpt2rt_result gpt2rt__config_parse_mem(gpt2rt_ctx *ctx, char *buf, size_t len, const char *what,
                                              gpt2rt_config *c) {
    static const char *keys[6] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx"};
    int64_t val[6] = {-1, -1, -1, -1, -1, -1};
    gpt2rt__json j;
    j.p = j.begin = buf;
    j.end = buf + len;
    j.ctx = ctx;
    j.what = what;
    j.kind = "config.json";
    gpt2rt_result r;
    if (!gpt2rt__json_eat(&j, '{')) return gpt2rt__json_fail(&j, "expected '{' (a JSON object)");
    if (!gpt2rt__json_eat(&j, '}')) {
        do {
            const char *key;
            int k = 0;
            if ((r = gpt2rt__json_string(&j, &key)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(&j, ':')) return gpt2rt__json_fail(&j, "expected ':'");
            while (k < 6 && strcmp(key, keys[k])) k++;
            if (k == 6) { if ((r = gpt2rt__json_skip(&j, 1)) != GPT2RT_OK) return r; continue; }
            uint64_t v;
            gpt2rt__json_ws(&j);
            if (j.p < j.end && *j.p == 'n' && k >= 4) { /* null lengths: the other one rules */
                if ((r = gpt2rt__json_skip(&j, 1)) != GPT2RT_OK) return r;
                continue;
            }
            if (val[k] >= 0) return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" appears twice", what, keys[k]);
            if ((r = gpt2rt__json_u64(&j, &v)) != GPT2RT_OK) return r;
            if (v < 1 || v > INT32_MAX)
                return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" = %llu is outside [1, 2^31)", what, keys[k],
                                    (unsigned long long)v);
            val[k] = (int64_t)v;
        } while (gpt2rt__json_eat(&j, ','));
        if (!gpt2rt__json_eat(&j, '}')) return gpt2rt__json_fail(&j, "expected '}' or ','");
    }
    gpt2rt__json_ws(&j);
    if (j.p != j.end) return gpt2rt__json_fail(&j, "text after the object");
    if (val[4] < 0) val[4] = val[5]; /* older files give only n_ctx */
    for (int k = 0; k < 5; k++)
        if (val[k] < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" is missing (a GPT-2 config.json has n_layer, "
                                "n_head, n_embd, vocab_size and n_positions)", what, keys[k]);
    if (val[5] >= 0 && val[5] != val[4])
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: n_positions = %lld but n_ctx = %lld", what,
                            (long long)val[4], (long long)val[5]);
    c->n_layer = (int)val[0];
    c->n_head = (int)val[1];
    c->n_embd = (int)val[2];
    c->vocab_size = (int)val[3];
    c->max_seq_len = (int)val[4];
    return GPT2RT_OK;
}

/* ==== 4.4 Training state ==== */

/* weights, moments, step and RNG in one safetensors file */

static gpt2rt_result gpt2rt__state_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    const char *fmt = gpt2rt__st_meta(&st, "format");
    /* frozen: the moments cover the trained parameters only (absent: nothing frozen) */
    const char *keys[7] = {"n_layer", "n_head", "n_embd", "vocab_size", "padded_vocab", "max_seq_len", "frozen"};
    int64_t want[7] = {d->L, d->NH, d->C, d->V, d->Vp, d->P, (int64_t)ctx->cfg.frozen};
    const gpt2rt__st_tensor *e[3] = {gpt2rt__st_find(&st, "params"), gpt2rt__st_find(&st, "adam_m"),
                                     gpt2rt__st_find(&st, "adam_v")};
    const char *step_s = gpt2rt__st_meta(&st, "step"), *rng_s = gpt2rt__st_meta(&st, "rng");
    if (!fmt || strcmp(fmt, "gpt2rt-state-1"))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a gpt2rt training state (metadata format is '%s', "
                         "expected 'gpt2rt-state-1')", what, fmt ? fmt : "(none)");
    for (int i = 0; i < 7 && r == GPT2RT_OK; i++) {
        const char *s = gpt2rt__st_meta(&st, keys[i]);
        if (i == 6 && !s) s = "0";
        long long got;
        if (!gpt2rt__parse_int(s, 0, INT64_MAX, &got) || got != want[i])
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: the state has %s = %s, this context has %lld", what, keys[i],
                             s ? s : "(missing)", (long long)want[i]);
    }
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++)
        if (!e[i] || e[i]->dtype != GPT2RT__F32 || e[i]->ndim != 1 || e[i]->shape[0] != (i ? ctx->n_train : ctx->n_params))
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' must be F32 of shape (%lld)%s", what,
                             i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v",
                             (long long)(i ? ctx->n_train : ctx->n_params), e[i] ? "" : " and is missing");
    /* one bad number here poisons every weight at the next update */
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++) {
        const unsigned char *p = st.data + e[i]->begin;
        for (int64_t j = 0; j < e[i]->shape[0]; j++) {
            float x;
            memcpy(&x, p + 4 * j, 4);
            if (!isfinite(x) || (i == 2 && x < 0.0f)) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: %s", what,
                                 i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v", (long long)j, (double)x,
                                 i == 2 ? "the second moment must be finite and >= 0" : "it must be finite");
                break;
            }
        }
    }
    long long step = 0;
    uint64_t rng = 0;
    char *end = NULL;
    if (r == GPT2RT_OK && !gpt2rt__parse_int(step_s, 0, (long long)1 << 62, &step))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata step = '%s' is not an integer in [0, 2^62]", what,
                         step_s ? step_s : "(missing)");
    if (r == GPT2RT_OK) {
        errno = 0;
        if (rng_s && *rng_s >= '0' && *rng_s <= '9') rng = strtoull(rng_s, &end, 10);
        if (!rng_s || !end || *end || errno)
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata rng = '%s' is not an unsigned 64-bit integer",
                             what, rng_s ? rng_s : "(missing)");
    }
    if (r == GPT2RT_OK) {
        gpt2rt__reset_training(ctx);
        memcpy(ctx->params, st.data + e[0]->begin, (size_t)ctx->n_params * 4);
        memcpy(ctx->m, st.data + e[1]->begin, (size_t)ctx->n_train * 4);
        memcpy(ctx->v, st.data + e[2]->begin, (size_t)ctx->n_train * 4);
        ctx->step = step;
        ctx->rng = rng;
    }
    gpt2rt__st_release(ctx, &st);
    return r;
}

/* ==== 5. Tokenizer ==== */
/* GPT-2's byte-level BPE, exactly (the ids of OpenAI's encoder.py and tiktoken).
   1. Pre-tokenisation: GPT-2 cuts text with the pattern
        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
      Here it is a hand-written scanner over code points (gpt2rt__tok_piece_end):
      each code point has one class (letter, number, space, other) from tables
      generated from the Unicode database. Bytes that are not valid UTF-8 are
      class "other", one byte each, so any input is cut into pieces that cover it.
   2. BPE per piece: start from one token per byte, repeatedly merge the adjacent
      pair listed earliest in the merges (leftmost on ties). A heap over the pairs
      makes a piece of n bytes O(n log n), so a megabyte without spaces is no
      denial of service. Whole pieces up to 32 bytes are cached (direct mapped).
   3. Ids: encoder.json names them, but for GPT-2 they follow from the merges: the
      256 byte tokens in the order of GPT-2's bytes_to_unicode table, merge i ->
      256 + i, <|endoftext|> = 256 + merges (tools/tok_fixture.py and the tests
      check it), so the compact copy in data/ holds the merges only. */

enum { GPT2RT__TOK_OTHER = 0, GPT2RT__TOK_LETTER = 1, GPT2RT__TOK_NUMBER = 2, GPT2RT__TOK_SPACE = 3 };
#define GPT2RT__TOK_MAX_VOCAB 65536     /* ids fit uint16, like llm.c's token files */
#define GPT2RT__TOK_CACHE_BITS 15       /* 32768 pieces, 2 MiB */
#define GPT2RT__TOK_CACHE_KEY 32        /* bytes of the longest cached piece */
#define GPT2RT__TOK_CACHE_IDS 13        /* ids of the longest cached piece */
#define GPT2RT__TOK_EOT_TEXT "<|endoftext|>"
#define GPT2RT__SHARD_MAGIC 20240520
#define GPT2RT__SHARD_HEADER 256        /* int32 */

/* BEGIN generated by tools/gen_unicode_tables.py: do not edit */
/* Unicode 15.0.0: 1561 class boundaries (UnicodeData.txt, PropList.txt) */
#define GPT2RT__TOK_UCD_COUNT 1561
static const char gpt2rt__tok_ucd[] =
    "nBUrCE+BoBdoDZoDrBErDElBEeIFEOFEGMF8CF8DFo5BRwB5BUdEFElQUFIJQFEZEFMFEFwCFsKFsRhB4UF4EJEZkF9IsDRQ"
    "1FsF2CoBRIFsMFE9BIdKpBMJEhCEF4D1DkLtBE6BpBkElBIREV4CRElBENE9CkDdsBVgDFYlCoFpH4GNEpCEdoBSoBFgCRgB"
    "JIJ4CFcFENQNEhCE1BIFMSpBIKYJEhBYRIJ4CFcFIFIFI9DQFEeoBJMhCkBFMF4CFcFIFUNEpCE9BISoBlBEtBgBJIJ4CFcF"
    "IFUNE5DIFMSoBFGYtBEFYNMFQNIFEFININMNwB5CE2C0BpCgBFMF8CFgCNEpDMJEJISoBiBcFERgBFMF8CFoBFUNE9DIFISo"
    "BFIlCkBFMFkFJEhCEVMGdMSsCFYVoCNgDFkBFEJc+DoBlCgGFIxBcmBoB9EIFEFUFgDFEFoBFIlBEJUFEmBoBJQhEE+DwCxB"
    "gBFwEtDUtOsFxCGoBZYRQNENIdMR0BxBEGoBZ4EFEVEJsFF0pBFQJcFEFQJkFFQJkEFQJcFEFQJ8BFkHFQJsI6BwCNgChC4K"
    "JYNwtCJnCFoDVsJONgBdoC1BsC5BoC5B0BFM9BwGtEEREOoBaoB6CoBZkLdUJoEFEV4IpB8D+EpB4DJUtBwFRoDasB1E8ClB"
    "0GuFoBaoB1BE1L8FlCgBOoBlF4D1BKpBwFpDwEyDoBNOpBwEJkBdsFJMlFQFYFINEVgYhI4iBJYJ4EJYJgBFEFEFEF8DJ0GF"
    "cFENMFcNQJYR0BVMFcPsB3DIXE/FEiCFEKYVGoBZ0B1MEREJoBFENUZEFEFEFQFsBJQVUREGtGKU66CwH6J4C6uC4DxtE0cZ"
    "QNImBEJ4EFEVEJgHdEhC8ClBcFcFcFcFcFcFcFchKEj6BERKEmDkBdUKNIR4KZMFoLFQVsFF4LOQpBgEhGgCiEoB6DgBG8Bi"
    "EoB+E8BhoBg4ZhI0x2CtI4FJ0hBNiCpBIxC8FhC8DJ6IoB9EkBJ8MJgIVIFEFUhDgCFMFQF8C2BYpBwG5BoGyDoBhDYNEFIG"
    "pBwDpB8ClD0Dd8FxDGoBZUFqBpBUFkF9CMFgBSoBZ8CNENoGFENIJUJEFEhDMJsBdMxBYJYJYlBcFcFsFF4BZsO2BoBZw0rB"
    "xB8CRkGxghB4tBJoN5EcxBUVEFoBF0BFUFEFIFIFwNlEstBpCgIJ4GhFwBxOUF8QuCoBdoDZoDtBkLNYJYJYJMtEwBFoDFsC"
    "FIF8BJ4BpEsPyB0FyBkHmCIxe0DNkGiCsDRiEQlByCFiBEV4EpB4DJwERgBGUpF4TKoBZwERwERgFhBwGxBsBF8BFcFIFsBF"
    "8BFcFItI8mBlB4CpBgBhDYFoFFkB1IYJEFwFFINEJ8CKhB8CKd8DiBkBhGsCFIWV6CYRoD5IgHSJKgCK5FE9BQFMF0DqBkB9"
    "C2DIF2DMhEgBFwDaUhC4GpB4CKhBsCWhBoC+CchKkJ9GsG1BsGeZwEyBoB6kB8DFoFZI5J2DpBEhB4CuBQtDoC5F2CcxC8Cx"
    "B0GqD4DFIJE1B0FhEkDeoBlBwE+BoBREJEhBsENExBgG5BQuBpBEFESwCtBoCFkDtCI9HcFEFQF8BFoBd8FmCoBtBgBJIJ4C"
    "FcFIFUNEpCExBU5T0GpCQWoBVM5DgGxCIFEiBoB5U8FlFQxEgGxCEuBoB5EsF1BEeoB5GsD2CwBRclXwFxOiIsCxBgBJEJgB"
    "FIFgD9BEFE6BoB5IgBJ8EhCEFExDEpBgFdE1CEtB4FtCEpCkJ9gBkBF0ElCE+B0DV4DhOcFIF4E1CEmBoBZYFIFgE5BEeoB5"
    "mBsC9BEF0BFoEyDoB5KE+B0CtFozD6M8NlCwYxpKkM9BgmElCYl3P8oCl3hBknCd8DGoBZ8JGoBZ4DpCgGhCQyBoBGcF0CVs"
    "Ch2CiI8ClNsJVEpI0BhIIFExDg/XhB46EpFkB98iBQFcFIFskB9BE1DMJE5BQhBwxBxgJsNV0BNkBdoB6kWwCyBwCyNkD9Q0"
    "KF8IFIJEJIJQFwBFEFcFkIFQJgBFcFwDFQFUFENcFwqBJkDFkDF8DFkDF8DFkDF8DFkDF8DFkDFgBKoGhgH8DZY1gB4HpS0F"
    "pBcKoBREloB4DpCwFSoB56BwDSoB58CcFQFIF8BF0YKkBhGwIdESoB+iDsHGMGQyJ0FG8BpYQFsDFIFEJEFoBFQFEFEZEREF"
    "EFEFMFIFEJEFEFEFEFEFIFEJQFcFQFQFEFoBFkCVMFUFkCyoC0Bu8KoB5gEg8mFhEonQZ4bJowW5Bkmd9jM4jCp8FspTVgsQ";
/* END generated */

typedef struct gpt2rt__tok_merge {
    uint32_t left, right; /* token ids; left == UINT32_MAX: empty slot */
    int32_t rank, id;     /* position in the merges, the merged token */
} gpt2rt__tok_merge;

typedef struct gpt2rt__tok_cache_entry {
    uint32_t hash;
    uint8_t len, n; /* len 0: empty */
    uint16_t ids[GPT2RT__TOK_CACHE_IDS];
    unsigned char key[GPT2RT__TOK_CACHE_KEY];
} gpt2rt__tok_cache_entry;

struct gpt2rt_tokenizer {
    int failed;           /* the load failed: only error is meaningful */
    char error[512];
    int32_t n_vocab;      /* ids [0, n_vocab) */
    int32_t n_merges;
    int32_t eot;          /* <|endoftext|>, -1: none */
    int32_t byte_id[256]; /* the token of each single byte */
    uint32_t *tok_off;    /* (n_vocab + 1) offsets into tok_bytes */
    unsigned char *tok_bytes;
    int32_t *merges;      /* (n_merges, 2) left, right in rank order (for the compact copy) */
    gpt2rt__tok_merge *mtab; /* open addressing, mmask + 1 slots */
    uint32_t mmask;
    uint8_t *cls_bmp;     /* (65536) class of every BMP code point */
    uint32_t *ucd;        /* (GPT2RT__TOK_UCD_COUNT) cp << 2 | class where the class changes */
    gpt2rt__tok_cache_entry *cache;
    /* BPE scratch for one piece, grown on demand */
    size_t cap;
    int32_t *ids, *next, *prev;
    uint64_t *heap;       /* (3 * cap) rank << 32 | position */
};

struct gpt2rt_shard {
    int failed;
    char error[512];
    uint16_t *tokens;
    int64_t n;
};

static gpt2rt_result gpt2rt__tok_msg(char *error, gpt2rt_result r, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static gpt2rt_result gpt2rt__tok_msg(char *error, gpt2rt_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, 512, fmt, ap);
    va_end(ap);
    return r;
}

/* ==== 5.1 Unicode classes ==== */

static int gpt2rt__tok_ucd_decode(uint32_t *out) {
    int8_t val[128];
    const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(val, -1, sizeof val);
    for (int i = 0; i < 64; i++) val[(int)abc[i]] = (int8_t)i;
    uint32_t cp = 0;
    int n = 0;
    for (const char *p = gpt2rt__tok_ucd; *p && n < GPT2RT__TOK_UCD_COUNT;) {
        uint32_t v = 0;
        int shift = 0, d;
        do {
            if (!*p || shift > 25) return 0;
            d = val[(unsigned char)*p++ & 127];
            if (d < 0) return 0;
            v |= (uint32_t)(d & 31) << shift;
            shift += 5;
        } while (d & 32);
        cp += v >> 2;
        out[n++] = cp << 2 | (v & 3);
    }
    return n == GPT2RT__TOK_UCD_COUNT && cp < 0x110000;
}

static int gpt2rt__tok_ucd_class(const uint32_t *ucd, uint32_t cp) {
    /* the last boundary at or below cp */
    int lo = 0, hi = GPT2RT__TOK_UCD_COUNT; /* ucd[lo-1] <= cp < ucd[hi] in code points */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((ucd[mid] >> 2) <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo ? (int)(ucd[lo - 1] & 3) : (int)GPT2RT__TOK_OTHER;
}

/* the class of the code point at s[0] (n >= 1 bytes left) and its length in
   bytes; a byte that does not start valid UTF-8 is "other", 1 byte long */
static int gpt2rt__tok_class(const gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int *w) {
    uint32_t c = s[0], cp;
    if (c < 0x80) { *w = 1; return t->cls_bmp[c]; }
    *w = 1;
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        *w = 2;
        return t->cls_bmp[(c & 31) << 6 | (s[1] & 63)];
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) return GPT2RT__TOK_OTHER; /* overlong, surrogate */
        *w = 3;
        return t->cls_bmp[(c & 15) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63)];
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)) return GPT2RT__TOK_OTHER; /* overlong, > U+10FFFF */
        *w = 4;
        cp = (c & 7) << 18 | (uint32_t)(s[1] & 63) << 12 | (uint32_t)(s[2] & 63) << 6 | (s[3] & 63);
        return gpt2rt__tok_ucd_class(t->ucd, cp);
    }
    return GPT2RT__TOK_OTHER;
}

/* the end of the piece that starts at s[i], s[0..n) one segment (no special token) */
static size_t gpt2rt__tok_piece_end(const gpt2rt_tokenizer *t, const unsigned char *s, size_t i, size_t n) {
    int w, k;
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd, case-sensitive like GPT-2 */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t j = i;
    k = gpt2rt__tok_class(t, s + i, n - i, &w);
    if (s[i] == ' ' && i + 1 < n) { /* ' ?' before a letter, number or other run */
        int w2, k2 = gpt2rt__tok_class(t, s + i + 1, n - i - 1, &w2);
        if (k2 != GPT2RT__TOK_SPACE) { k = k2; w = w2; j = i + 1; }
    }
    if (k != GPT2RT__TOK_SPACE) {
        j += (size_t)w;
        while (j < n) {
            if (s[j] < 0x80) { /* ASCII without a call */
                if ((int)t->cls_bmp[s[j]] != k) break;
                j++;
                continue;
            }
            if (gpt2rt__tok_class(t, s + j, n - j, &w) != k) break;
            j += (size_t)w;
        }
        return j;
    }
    /* a whitespace run: \s+(?!\S) keeps its last code point for the next piece
       (where " x" takes the space) unless the run ends the text or is 1 long */
    size_t last = i;
    j = i + (size_t)w;
    while (j < n && gpt2rt__tok_class(t, s + j, n - j, &w) == GPT2RT__TOK_SPACE) { last = j; j += (size_t)w; }
    if (j == n || last == i) return j;
    return last;
}

/* ==== 5.2 Merges: (left, right) -> rank and merged id ==== */

static uint32_t gpt2rt__tok_pair_hash(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static const gpt2rt__tok_merge *gpt2rt__tok_find(const gpt2rt_tokenizer *t, uint32_t a, uint32_t b) {
    for (uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;; h = (h + 1) & t->mmask) {
        const gpt2rt__tok_merge *m = &t->mtab[h];
        if (m->left == a && m->right == b) return m;
        if (m->left == UINT32_MAX) return NULL;
    }
}

/* 1: added, 0: the pair is already there */
static int gpt2rt__tok_add_merge(gpt2rt_tokenizer *t, uint32_t a, uint32_t b, int32_t rank, int32_t id) {
    uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;
    while (t->mtab[h].left != UINT32_MAX) {
        if (t->mtab[h].left == a && t->mtab[h].right == b) return 0;
        h = (h + 1) & t->mmask;
    }
    gpt2rt__tok_merge m = {a, b, rank, id};
    t->mtab[h] = m;
    t->merges[2 * rank] = (int32_t)a;
    t->merges[2 * rank + 1] = (int32_t)b;
    return 1;
}

/* ==== 5.3 BPE of one piece ==== */

static int gpt2rt__tok_scratch(gpt2rt_tokenizer *t, size_t n) {
    if (n <= t->cap) return 1;
    size_t c = n < 256 ? 256 : n + n / 2;
    if (c > SIZE_MAX / (3 * sizeof(uint64_t))) return 0;
    int32_t *ids = (int32_t *)realloc(t->ids, c * sizeof(int32_t));
    if (ids) t->ids = ids;
    int32_t *nx = (int32_t *)realloc(t->next, c * sizeof(int32_t));
    if (nx) t->next = nx;
    int32_t *pv = (int32_t *)realloc(t->prev, c * sizeof(int32_t));
    if (pv) t->prev = pv;
    uint64_t *hp = (uint64_t *)realloc(t->heap, 3 * c * sizeof(uint64_t));
    if (hp) t->heap = hp;
    if (!ids || !nx || !pv || !hp) return 0;
    t->cap = c;
    return 1;
}

static void gpt2rt__tok_heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && heap[(i - 1) / 2] > v) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = v;
}

static uint64_t gpt2rt__tok_heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--*n];
    size_t i = 0, m = *n;
    while (2 * i + 1 < m) {
        size_t c = 2 * i + 1;
        if (c + 1 < m && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= v) break;
        heap[i] = heap[c];
        i = c;
    }
    if (m) heap[i] = v;
    return top;
}

/* pushes the pair that starts at node i, if it merges */
static void gpt2rt__tok_push_pair(gpt2rt_tokenizer *t, size_t *hn, int32_t i) {
    if (i < 0 || t->next[i] < 0) return;
    const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
    if (m) gpt2rt__tok_heap_push(t->heap, hn, (uint64_t)m->rank << 32 | (uint32_t)i);
}

/* the ids of piece s[0..n), n >= 1, into t->ids (returns how many); -1: no memory.
   Node i starts as byte i; a merge keeps the left node, so node order is text order
   and (rank, left node) orders the heap as GPT-2 chooses: lowest rank, leftmost. */
static int64_t gpt2rt__tok_bpe(gpt2rt_tokenizer *t, const unsigned char *s, size_t n) {
    if (n > INT32_MAX || !gpt2rt__tok_scratch(t, n)) return -1;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        t->ids[i] = t->byte_id[s[i]];
        t->prev[i] = (int32_t)i - 1;
        t->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) gpt2rt__tok_push_pair(t, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = gpt2rt__tok_heap_pop(t->heap, &hn);
        int32_t i = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        /* stale entries: node i was merged away (ids[i] < 0) or its pair changed */
        if (t->ids[i] < 0 || t->next[i] < 0) continue;
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
        if (!m || m->rank != rank) continue;
        int32_t j = t->next[i];
        t->ids[i] = m->id;
        t->ids[j] = -1;
        t->next[i] = t->next[j];
        if (t->next[j] >= 0) t->prev[t->next[j]] = i;
        gpt2rt__tok_push_pair(t, &hn, t->prev[i]);
        gpt2rt__tok_push_pair(t, &hn, i);
    }
    int64_t k = 0;
    for (int32_t i = 0; i >= 0; i = t->next[i]) t->ids[k++] = t->ids[i];
    return k;
}

/* ==== 5.4 Loading, encoding, decoding ==== */

static gpt2rt_tokenizer *gpt2rt__tok_new(void) {
    gpt2rt_tokenizer *t = (gpt2rt_tokenizer *)calloc(1, sizeof(gpt2rt_tokenizer));
    if (t) t->eot = -1;
    return t;
}

/* tables every tokenizer needs; vocabulary size known */
static gpt2rt_result gpt2rt__tok_alloc(gpt2rt_tokenizer *t, int32_t n_vocab, int32_t n_merges, size_t n_bytes) {
    uint32_t slots = 64;
    while (slots < 2u * (uint32_t)n_merges + 2) slots *= 2;
    t->n_vocab = n_vocab;
    t->n_merges = n_merges;
    t->mmask = slots - 1;
    t->tok_off = (uint32_t *)calloc((size_t)n_vocab + 1, sizeof(uint32_t));
    t->tok_bytes = (unsigned char *)malloc(n_bytes ? n_bytes : 1);
    t->merges = (int32_t *)malloc(2 * (size_t)n_merges * sizeof(int32_t) + 1);
    t->mtab = (gpt2rt__tok_merge *)malloc(slots * sizeof(gpt2rt__tok_merge));
    t->cls_bmp = (uint8_t *)malloc(65536);
    t->ucd = (uint32_t *)malloc(GPT2RT__TOK_UCD_COUNT * sizeof(uint32_t));
    t->cache = (gpt2rt__tok_cache_entry *)calloc((size_t)1 << GPT2RT__TOK_CACHE_BITS, sizeof(gpt2rt__tok_cache_entry));
    if (!t->tok_off || !t->tok_bytes || !t->merges || !t->mtab || !t->cls_bmp || !t->ucd || !t->cache)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %d tokens and %d merges",
                               (int)n_vocab, (int)n_merges);
    for (uint32_t i = 0; i < slots; i++) t->mtab[i].left = UINT32_MAX;
    if (!gpt2rt__tok_ucd_decode(t->ucd))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "tokenizer: the embedded Unicode table is corrupt");
    for (uint32_t cp = 0, k = 0; cp < 65536; cp++) {
        while (k < GPT2RT__TOK_UCD_COUNT && (t->ucd[k] >> 2) <= cp) k++;
        t->cls_bmp[cp] = (uint8_t)(k ? t->ucd[k - 1] & 3 : (uint32_t)GPT2RT__TOK_OTHER);
    }
    return GPT2RT_OK;
}

/* GPT-2's bytes_to_unicode: byte -> the code point that stands for it in the
   vocabulary files; bytes 33..126, 161..172, 174..255 stand for themselves, the
   rest get 256, 257, ... in byte order. The ids of the byte tokens follow the
   same order (the bytes that stand for themselves first). */
static void gpt2rt__tok_byte_order(uint32_t cp_of[256], int order[256]) {
    int k = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) { cp_of[b] = (uint32_t)b; order[k++] = b; }
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) { cp_of[b] = 256u + (uint32_t)extra++; order[k++] = b; }
}

static void gpt2rt__tok_finish(gpt2rt_tokenizer *t) {
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok_off[id + 1] - t->tok_off[id] == 1 && id != t->eot && t->byte_id[t->tok_bytes[t->tok_off[id]]] < 0)
            t->byte_id[t->tok_bytes[t->tok_off[id]]] = id;
}

/* the compact copy: "GPT2RTBP", u32 version 1, u32 merges M, u32 eot id (256 + M,
   or 0xFFFFFFFF: none), then M x (u16 left, u16 right); little endian */
static gpt2rt_result gpt2rt__tok_load_compact(gpt2rt_tokenizer *t, const unsigned char *p, size_t len) {
    if (len < 20 || memcmp(p, "GPT2RTBP", 8))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %zu bytes that do not start with "
                               "\"GPT2RTBP\" (not a file gpt2rt_tok_save wrote)", len);
    uint32_t ver, m, eot;
    memcpy(&ver, p + 8, 4);
    memcpy(&m, p + 12, 4);
    memcpy(&eot, p + 16, 4);
    if (ver != 1) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: version %u, expected 1", ver);
    if (m > GPT2RT__TOK_MAX_VOCAB - 257)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges, at most %d fit uint16 ids",
                               m, GPT2RT__TOK_MAX_VOCAB - 257);
    if (len != 20 + 4 * (size_t)m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges need %zu bytes, the file has %zu",
                               m, 20 + 4 * (size_t)m, len);
    if (eot != UINT32_MAX && eot != 256 + m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: <|endoftext|> id %u, expected %u (after "
                               "the %u merged tokens) or none", eot, 256 + m, m);
    int32_t n_vocab = 256 + (int32_t)m + (eot != UINT32_MAX);
    /* token lengths first, to size the byte table */
    uint32_t *lens = (uint32_t *)malloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    if (!lens) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "compact vocabulary: out of memory");
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (i < 256) lens[i] = 1;
        else if (i == (int32_t)eot) lens[i] = (uint32_t)(sizeof(GPT2RT__TOK_EOT_TEXT) - 1);
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            if (a >= i || b >= i) { /* a merge can only join tokens that exist before it */
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d joins tokens %u and %u, "
                                       "but only ids below %d exist before it", (int)(i - 256), a, b, (int)i);
            }
            lens[i] = lens[a] + lens[b];
            if (lens[i] > (1u << 20)) {
                uint32_t l = lens[i];
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d makes a token of %u "
                                       "bytes (at most 2^20)", (int)(i - 256), l);
            }
        }
        total += lens[i];
    }
    gpt2rt_result r = total > UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: tokens of "
                                                           "%zu bytes in all (at most 2^32)", total)
                                         : gpt2rt__tok_alloc(t, n_vocab, (int32_t)m, total);
    if (r != GPT2RT_OK) { free(lens); return r; }
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    uint32_t off = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->tok_off[i] = off;
        if (i < 256) t->tok_bytes[off] = (unsigned char)order[i];
        else if (i == (int32_t)eot) { t->eot = i; memcpy(t->tok_bytes + off, GPT2RT__TOK_EOT_TEXT, lens[i]); }
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            memcpy(t->tok_bytes + off, t->tok_bytes + t->tok_off[a], lens[a]);
            memcpy(t->tok_bytes + off + lens[a], t->tok_bytes + t->tok_off[b], lens[b]);
            if (!gpt2rt__tok_add_merge(t, a, b, i - 256, i)) {
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d repeats the pair "
                                       "(%u, %u)", (int)(i - 256), a, b);
            }
        }
        off += lens[i];
    }
    t->tok_off[n_vocab] = off;
    free(lens);
    gpt2rt__tok_finish(t);
    return GPT2RT_OK;
}

/* one code point of valid UTF-8 at s[0..n): its length, 0 if invalid */
static int gpt2rt__tok_utf8(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || n < (size_t)len) return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 63);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v < 0xE000))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF))) return 0;
    *cp = v;
    return len;
}

static uint32_t gpt2rt__tok_hash_bytes(const unsigned char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* what the vocabulary files give before the tables are built */
typedef struct gpt2rt__tok_files {
    unsigned char *bytes; /* every entry's bytes, back to back */
    size_t n_bytes, cap_bytes;
    uint32_t *off, *len;  /* per entry */
    int32_t *id;
    int32_t n, cap;
    int32_t *slot;        /* bytes -> entry, open addressing */
    uint32_t smask;
    int byte_of[324];     /* code point of the vocabulary alphabet -> byte, -1: not one */
} gpt2rt__tok_files;

static void gpt2rt__tok_files_free(gpt2rt__tok_files *f) {
    free(f->bytes); free(f->off); free(f->len); free(f->id); free(f->slot);
}

static int gpt2rt__tok_put_byte(gpt2rt__tok_files *f, unsigned char b) {
    if (f->n_bytes == f->cap_bytes) {
        size_t c = f->cap_bytes ? 2 * f->cap_bytes : 4096;
        unsigned char *nb = (unsigned char *)realloc(f->bytes, c);
        if (!nb) return 0;
        f->bytes = nb;
        f->cap_bytes = c;
    }
    f->bytes[f->n_bytes++] = b;
    return 1;
}

/* the entry with these bytes, -1: none */
static int32_t gpt2rt__tok_lookup(const gpt2rt__tok_files *f, const unsigned char *s, size_t n) {
    for (uint32_t h = gpt2rt__tok_hash_bytes(s, n) & f->smask;; h = (h + 1) & f->smask) {
        int32_t e = f->slot[h];
        if (e < 0) return -1;
        if (f->len[e] == n && !memcmp(f->bytes + f->off[e], s, n)) return e;
    }
}

/* a JSON string at p (after its opening quote) -> bytes through the alphabet,
   appended to f->bytes; *p moves past the closing quote. NULL: fine, else why not */
static const char *gpt2rt__tok_json_key(gpt2rt__tok_files *f, const unsigned char **pp, const unsigned char *end,
                                        uint32_t *bad_cp) {
    const unsigned char *p = *pp;
    while (1) {
        if (p >= end) return "unterminated string";
        uint32_t cp;
        if (*p == '"') { p++; break; }
        if (*p < 0x20) return "control character in a string";
        if (*p == '\\') {
            if (end - p < 2) return "unterminated escape";
            char e = (char)p[1];
            p += 2;
            const char *esc = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(esc, e) : NULL;
            if (k) cp = (unsigned char)val[k - esc];
            else if (e == 'u') {
                uint32_t u[2] = {0, 0};
                int n_u = 1;
                for (int q = 0; q < n_u; q++) {
                    if (q && (end - p < 2 || p[0] != '\\' || p[1] != 'u')) return "lone surrogate";
                    if (q) p += 2;
                    if (end - p < 4) return "bad \\u escape";
                    for (int i = 0; i < 4; i++) {
                        int h = gpt2rt__hex((char)p[i]);
                        if (h < 0) return "bad \\u escape";
                        u[q] = u[q] * 16 + (uint32_t)h;
                    }
                    p += 4;
                    if (!q && u[0] >= 0xD800 && u[0] < 0xDC00) n_u = 2;
                }
                if (n_u == 2 && (u[1] < 0xDC00 || u[1] >= 0xE000)) return "bad surrogate pair";
                if (n_u == 1 && u[0] >= 0xDC00 && u[0] < 0xE000) return "lone surrogate";
                cp = n_u == 2 ? 0x10000 + ((u[0] - 0xD800) << 10) + (u[1] - 0xDC00) : u[0];
            } else return "unknown escape";
        } else {
            int n = gpt2rt__tok_utf8(p, (size_t)(end - p), &cp);
            if (!n) return "invalid UTF-8";
            p += n;
        }
        if (cp >= 324 || f->byte_of[cp] < 0) { *bad_cp = cp; return "a character outside GPT-2's 256 byte characters"; }
        if (!gpt2rt__tok_put_byte(f, (unsigned char)f->byte_of[cp])) return "out of memory";
    }
    *pp = p;
    return NULL;
}

/* encoder.json / vocab.json: {"token": id, ...} with ids 0..n-1, each once */
static gpt2rt_result gpt2rt__tok_parse_vocab(gpt2rt_tokenizer *t, gpt2rt__tok_files *f, const unsigned char *p, size_t len) {
    const unsigned char *begin = p, *end = p + len;
    const char *why = NULL;
    uint32_t bad_cp = UINT32_MAX;
#define GPT2RT__TOK_WS() while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++
    GPT2RT__TOK_WS();
    if (p >= end || *p++ != '{') { why = "expected '{'"; goto fail; }
    GPT2RT__TOK_WS();
    if (p < end && *p == '}') { p++; goto done; }
    while (1) {
        GPT2RT__TOK_WS();
        if (p >= end || *p++ != '"') { why = "expected a string (a token)"; goto fail; }
        if (f->n == GPT2RT__TOK_MAX_VOCAB) { why = "more than 65536 tokens (ids must fit uint16)"; goto fail; }
        if (f->n == f->cap) {
            int32_t c = f->cap ? 2 * f->cap : 1024;
            uint32_t *o = (uint32_t *)realloc(f->off, (size_t)c * 4);
            if (o) f->off = o;
            uint32_t *l = (uint32_t *)realloc(f->len, (size_t)c * 4);
            if (l) f->len = l;
            int32_t *d = (int32_t *)realloc(f->id, (size_t)c * 4);
            if (d) f->id = d;
            if (!o || !l || !d) { why = "out of memory"; goto fail; }
            f->cap = c;
        }
        size_t start = f->n_bytes;
        if ((why = gpt2rt__tok_json_key(f, &p, end, &bad_cp)) != NULL) goto fail;
        if (f->n_bytes == start) { why = "an empty token"; goto fail; }
        if (f->n_bytes - start > (1u << 20)) { why = "a token longer than 2^20 bytes"; goto fail; }
        GPT2RT__TOK_WS();
        if (p >= end || *p++ != ':') { why = "expected ':'"; goto fail; }
        GPT2RT__TOK_WS();
        int64_t v = 0;
        if (p >= end || *p < '0' || *p > '9') { why = "expected a non-negative integer id"; goto fail; }
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (v <= GPT2RT__TOK_MAX_VOCAB) v = v * 10 + (*p - '0');
        if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) { why = "expected an integer id, found a fraction"; goto fail; }
        f->off[f->n] = (uint32_t)start;
        f->len[f->n] = (uint32_t)(f->n_bytes - start);
        f->id[f->n++] = v < GPT2RT__TOK_MAX_VOCAB ? (int32_t)v : GPT2RT__TOK_MAX_VOCAB;
        GPT2RT__TOK_WS();
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { p++; break; }
        why = "expected ',' or '}'";
        goto fail;
    }
done:
    GPT2RT__TOK_WS();
#undef GPT2RT__TOK_WS
    if (p != end) { why = "trailing characters after the object"; goto fail; }
    return GPT2RT_OK;
fail:
    if (bad_cp != UINT32_MAX)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json byte %zu (entry %d): U+%04X is %s",
                               (size_t)(p - begin), (int)f->n, (unsigned)bad_cp, why);
    return gpt2rt__tok_msg(t->error, !strcmp(why, "out of memory") ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_FORMAT,
                           "vocabulary json byte %zu (entry %d): %s", (size_t)(p - begin), (int)f->n, why);
}

/* vocab.bpe / merges.txt: an optional "#version" line, then one "left right" per
   line in the alphabet of the vocabulary, rank = line order */
static gpt2rt_result gpt2rt__tok_load_json(gpt2rt_tokenizer *t, const unsigned char *vj, size_t vlen,
                                           const unsigned char *mg, size_t mlen) {
    gpt2rt__tok_files f;
    memset(&f, 0, sizeof f);
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    for (int i = 0; i < 324; i++) f.byte_of[i] = -1;
    for (int b = 0; b < 256; b++) f.byte_of[cp_of[b]] = b;
    gpt2rt_result r = gpt2rt__tok_parse_vocab(t, &f, vj, vlen);
    int32_t n = f.n, *by_id = NULL, n_merges = 0, rank = 0, line = 0;
    unsigned char *cat = NULL;
    uint32_t slots = 64, o = 0;
    size_t first = 0;
    if (r != GPT2RT_OK) goto out;
    /* ids dense and unique; bytes unique */
    by_id = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    while (slots < 2u * (uint32_t)n) slots *= 2;
    f.slot = (int32_t *)malloc(slots * sizeof(int32_t));
    f.smask = slots - 1;
    if (!by_id || !f.slot) { r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary: out of memory"); goto out; }
    for (int32_t i = 0; i < n; i++) by_id[i] = -1;
    for (uint32_t i = 0; i < slots; i++) f.slot[i] = -1;
    for (int32_t e = 0; e < n; e++) {
        if (f.id[e] >= n) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entry %d: id %d is not below the %d "
                                "entries (ids must be 0..%d, each once)", (int)e, (int)f.id[e], (int)n, (int)n - 1);
            goto out;
        }
        if (by_id[f.id[e]] >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d both have id %d",
                                (int)by_id[f.id[e]], (int)e, (int)f.id[e]);
            goto out;
        }
        by_id[f.id[e]] = e;
        int32_t other = gpt2rt__tok_lookup(&f, f.bytes + f.off[e], f.len[e]);
        if (other >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d (ids %d and %d) are the "
                                "same bytes", (int)other, (int)e, (int)f.id[other], (int)f.id[e]);
            goto out;
        }
        uint32_t h = gpt2rt__tok_hash_bytes(f.bytes + f.off[e], f.len[e]) & f.smask;
        while (f.slot[h] >= 0) h = (h + 1) & f.smask;
        f.slot[h] = e;
    }
    /* count the merges */
    if (mlen >= 8 && !memcmp(mg, "#version", 8)) {
        while (first < mlen && mg[first] != '\n') first++;
    }
    for (size_t i = first; i < mlen;) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) n_merges++;
        i = e + 1;
    }
    if (n_merges > n) {
        r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges: %d merges for %d tokens (each merge makes a token)",
                            (int)n_merges, (int)n);
        goto out;
    }
    if ((r = gpt2rt__tok_alloc(t, n, n_merges, f.n_bytes)) != GPT2RT_OK) goto out;
    for (int32_t id = 0; id < n; id++) {
        int32_t e = by_id[id];
        t->tok_off[id] = o;
        memcpy(t->tok_bytes + o, f.bytes + f.off[e], f.len[e]);
        o += f.len[e];
        if (f.len[e] == sizeof(GPT2RT__TOK_EOT_TEXT) - 1 && !memcmp(f.bytes + f.off[e], GPT2RT__TOK_EOT_TEXT, f.len[e]))
            t->eot = id;
    }
    t->tok_off[n] = o;
    /* the merges themselves */
    line = first ? 1 : 0;
    for (size_t i = first ? first + 1 : 0; i < mlen && rank < n_merges; line++) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) {
            int32_t part[2] = {-1, -1}, ids[3];
            size_t sp = i;
            while (sp < le && mg[sp] != ' ') sp++;
            const char *why = NULL;
            uint32_t bad_cp = UINT32_MAX;
            for (int k = 0; k < 2 && !why; k++) {
                const unsigned char *q = mg + (k ? sp + 1 : i), *qe = mg + (k ? le : sp);
                size_t start = f.n_bytes;
                if (k && sp >= le) { why = "expected two tokens separated by one space"; break; }
                while (q < qe && !why) {
                    uint32_t cp;
                    int w = gpt2rt__tok_utf8(q, (size_t)(qe - q), &cp);
                    if (!w) why = "invalid UTF-8";
                    else if (cp >= 324 || f.byte_of[cp] < 0) { why = "a character outside GPT-2's 256 byte characters"; bad_cp = cp; }
                    else if (!gpt2rt__tok_put_byte(&f, (unsigned char)f.byte_of[cp])) why = "out of memory";
                    q += w;
                }
                if (!why && f.n_bytes == start) why = "expected two tokens separated by one space";
                if (!why && (part[k] = gpt2rt__tok_lookup(&f, f.bytes + start, f.n_bytes - start)) < 0)
                    why = k ? "its second token is not in the vocabulary" : "its first token is not in the vocabulary";
                f.n_bytes = start;
            }
            if (!why) {
                ids[0] = f.id[part[0]];
                ids[1] = f.id[part[1]];
                size_t la = f.len[part[0]], lb = f.len[part[1]];
                cat = (unsigned char *)realloc(cat, la + lb);
                if (!cat) why = "out of memory";
                else {
                    memcpy(cat, f.bytes + f.off[part[0]], la);
                    memcpy(cat + la, f.bytes + f.off[part[1]], lb);
                    int32_t res = gpt2rt__tok_lookup(&f, cat, la + lb);
                    if (res < 0) why = "the merged token is not in the vocabulary";
                    else if (!gpt2rt__tok_add_merge(t, (uint32_t)ids[0], (uint32_t)ids[1], rank, f.id[res]))
                        why = "it repeats an earlier merge";
                }
            }
            if (why) {
                r = !strcmp(why, "out of memory")
                        ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "merges: out of memory")
                    : bad_cp != UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: U+%04X is %s", (int)line + 1,
                                               (unsigned)bad_cp, why)
                             : gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: %s", (int)line + 1, why);
                goto out;
            }
            rank++;
        }
        i = e + 1;
    }
    gpt2rt__tok_finish(t);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary: byte 0x%02X has no token of its own (U+%04X), "
                                "so some text could not be encoded", b, (unsigned)cp_of[b]);
            goto out;
        }
out:
    free(by_id);
    free(cat);
    gpt2rt__tok_files_free(&f);
    return r;
}

static gpt2rt_result gpt2rt__tok_read_file(const char *path, unsigned char **buf, size_t *len, char *error) {
    struct stat st;
    *buf = NULL;
    *len = 0;
    if (stat(path, &st) != 0) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: not a regular file", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = (size_t)st.st_size;
    *buf = (unsigned char *)malloc(n ? n : 1);
    if (!*buf) { fclose(fp); return gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", path, n); }
    size_t got = fread(*buf, 1, n, fp);
    fclose(fp);
    if (got != n) {
        free(*buf);
        *buf = NULL;
        return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    *len = n;
    return GPT2RT_OK;
}

/* write to path.tmp, then rename: never a half-written file at path */
static gpt2rt_result gpt2rt__tok_write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                                            char *error) {
    size_t pl = strlen(path);
    char *tmp = (char *)malloc(pl + 5);
    if (!tmp) return gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return r;
    }
    int ok = fwrite(a, 1, alen, fp) == alen && (!blen || fwrite(b, 1, blen, fp) == blen);
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", ok ? path : tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return r;
    }
    free(tmp);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__tok_done(gpt2rt_tokenizer **tok, gpt2rt_tokenizer *t, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        /* keep only the message */
        free(t->tok_off); free(t->tok_bytes); free(t->merges); free(t->mtab); free(t->cls_bmp); free(t->ucd);
        free(t->cache);
        t->tok_off = NULL; t->tok_bytes = NULL; t->merges = NULL; t->mtab = NULL; t->cls_bmp = NULL; t->ucd = NULL;
        t->cache = NULL;
        t->failed = 1;
    }
    *tok = t;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_mem(gpt2rt_tokenizer **tok, const void *vocab_json, size_t vocab_len,
                                             const void *merges, size_t merges_len) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!merges || (vocab_json == NULL && vocab_len))
        return gpt2rt__tok_done(tok, t, gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT,
                                                        "gpt2rt_tok_load_mem: merges is NULL, or vocab_json is NULL with "
                                                        "vocab_len = %zu", vocab_len));
    gpt2rt_result r = vocab_json ? gpt2rt__tok_load_json(t, (const unsigned char *)vocab_json, vocab_len,
                                                         (const unsigned char *)merges, merges_len)
                                 : gpt2rt__tok_load_compact(t, (const unsigned char *)merges, merges_len);
    return gpt2rt__tok_done(tok, t, r);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_files(gpt2rt_tokenizer **tok, const char *vocab_json, const char *merges) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *vb = NULL, *mb = NULL;
    size_t vl = 0, ml = 0;
    char error[512];
    gpt2rt_result r = merges ? GPT2RT_OK : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_load_files: merges is NULL");
    if (r == GPT2RT_OK && vocab_json) r = gpt2rt__tok_read_file(vocab_json, &vb, &vl, error);
    if (r == GPT2RT_OK) r = gpt2rt__tok_read_file(merges, &mb, &ml, error);
    if (r == GPT2RT_OK) {
        r = gpt2rt_tok_load_mem(tok, vb, vl, mb, ml);
        if (r != GPT2RT_OK && *tok) { /* name the files */
            char msg[512];
            if (vocab_json) gpt2rt__tok_msg(msg, r, "%s + %s: %s", vocab_json, merges, (*tok)->error);
            else gpt2rt__tok_msg(msg, r, "%s: %s", merges, (*tok)->error);
            memcpy((*tok)->error, msg, sizeof msg);
        }
    } else {
        gpt2rt_tokenizer *t = gpt2rt__tok_new();
        *tok = t;
        if (t) { memcpy(t->error, error, sizeof error); t->failed = 1; }
    }
    free(vb);
    free(mb);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load(gpt2rt_tokenizer **tok, const char *dir) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    static const char *names[3][2] = {{NULL, "gpt2_merges.bin"}, {"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char p[2][1024];
    if (!dir) dir = ".";
    for (int i = 0; i < 3; i++) {
        struct stat st;
        snprintf(p[1], sizeof p[1], "%s/%s", dir, names[i][1]);
        if (names[i][0]) snprintf(p[0], sizeof p[0], "%s/%s", dir, names[i][0]);
        if (stat(p[1], &st) != 0 || (names[i][0] && stat(p[0], &st) != 0)) continue;
        return gpt2rt_tok_load_files(tok, names[i][0] ? p[0] : NULL, p[1]);
    }
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    t->failed = 1;
    return gpt2rt__tok_msg(t->error, GPT2RT_ERR_IO, "%s: no GPT-2 vocabulary here (looked for gpt2_merges.bin, "
                           "encoder.json + vocab.bpe, vocab.json + merges.txt)", dir);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_save(gpt2rt_tokenizer *t, const char *path) {
    if (!t || !path) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE;
    /* the compact form holds only what follows from the merges: check that it does */
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    int ok = t->n_vocab == 256 + t->n_merges + (t->eot >= 0) && (t->eot < 0 || t->eot == 256 + t->n_merges) &&
             t->n_vocab <= GPT2RT__TOK_MAX_VOCAB;
    for (int i = 0; ok && i < 256; i++) ok = t->byte_id[order[i]] == i;
    for (int32_t r = 0; ok && r < t->n_merges; r++) {
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->merges[2 * r], (uint32_t)t->merges[2 * r + 1]);
        ok = m && m->id == 256 + r && t->merges[2 * r] < 256 + r && t->merges[2 * r + 1] < 256 + r;
    }
    if (!ok)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: this vocabulary's ids do not follow from its "
                               "merges (byte tokens in GPT-2's order, merge i -> 256 + i, then <|endoftext|>), so the "
                               "compact form cannot hold it", path);
    size_t n = 20 + 4 * (size_t)t->n_merges;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    uint32_t head[3] = {1, (uint32_t)t->n_merges, t->eot >= 0 ? (uint32_t)t->eot : UINT32_MAX};
    memcpy(buf, "GPT2RTBP", 8);
    memcpy(buf + 8, head, 12);
    for (int32_t r = 0; r < t->n_merges; r++) {
        uint16_t ab[2] = {(uint16_t)t->merges[2 * r], (uint16_t)t->merges[2 * r + 1]};
        memcpy(buf + 20 + 4 * (size_t)r, ab, 4);
    }
    gpt2rt_result res = gpt2rt__tok_write_file(path, buf, n, NULL, 0, t->error);
    free(buf);
    return res;
}

GPT2RT_DEF void gpt2rt_tok_free(gpt2rt_tokenizer *t) {
    if (!t) return;
    gpt2rt__tok_done(&t, t, GPT2RT_ERR_STATE);
    free(t->ids); free(t->next); free(t->prev); free(t->heap);
    free(t);
}

GPT2RT_DEF const char *gpt2rt_tok_last_error(const gpt2rt_tokenizer *t) {
    return t ? t->error : "gpt2rt_tok: no tokenizer (out of memory)";
}

GPT2RT_DEF int32_t gpt2rt_tok_vocab_size(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->n_vocab : 0; }
GPT2RT_DEF int32_t gpt2rt_tok_eot(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->eot : -1; }

GPT2RT_DEF const char *gpt2rt_tok_token(const gpt2rt_tokenizer *t, int32_t id, size_t *len) {
    if (!t || t->failed || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok_off[id + 1] - t->tok_off[id];
    return (const char *)t->tok_bytes + t->tok_off[id];
}

/* the ids of one piece, through the cache; -1: out of memory */
static int gpt2rt__tok_piece(gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids, size_t cap, size_t *k) {
    if (n == 1) {
        if (*k < cap) ids[*k] = t->byte_id[s[0]];
        (*k)++;
        return 0;
    }
    gpt2rt__tok_cache_entry *e = NULL;
    uint32_t h = 0;
    if (n <= GPT2RT__TOK_CACHE_KEY) {
        h = gpt2rt__tok_hash_bytes(s, n);
        e = &t->cache[h >> (32 - GPT2RT__TOK_CACHE_BITS)];
        if (e->hash == h && e->len == n && !memcmp(e->key, s, n)) {
            for (int i = 0; i < e->n; i++, (*k)++)
                if (*k < cap) ids[*k] = e->ids[i];
            return 0;
        }
    }
    int64_t m = gpt2rt__tok_bpe(t, s, n);
    if (m < 0) return -1;
    for (int64_t i = 0; i < m; i++, (*k)++)
        if (*k < cap) ids[*k] = t->ids[i];
    if (e && m <= GPT2RT__TOK_CACHE_IDS) {
        e->hash = h;
        e->len = (uint8_t)n;
        e->n = (uint8_t)m;
        memcpy(e->key, s, n);
        for (int64_t i = 0; i < m; i++) e->ids[i] = (uint16_t)t->ids[i];
    }
    return 0;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_encode(gpt2rt_tokenizer *t, const void *text, size_t len,
                                           gpt2rt_tok_special special, int32_t *ids, size_t cap, size_t *n_ids) {
    if (n_ids) *n_ids = 0;
    if (!t || !n_ids || (!text && len) || (!ids && cap)) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE;
    if ((unsigned)special > GPT2RT_TOK_SPECIAL_REFUSE)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: special = %d is not a "
                               "gpt2rt_tok_special", (int)special);
    const unsigned char *s = (const unsigned char *)text;
    const size_t eot_len = sizeof(GPT2RT__TOK_EOT_TEXT) - 1;
    size_t k = 0, seg = 0;
    while (seg < len) {
        /* the segment up to the next <|endoftext|> (when it is special): tiktoken
           and Hugging Face cut the text there before pre-tokenising */
        size_t end = len, after = len;
        if (special != GPT2RT_TOK_SPECIAL_TEXT) {
            for (const unsigned char *q = s + seg; (q = (const unsigned char *)memchr(q, '<', (size_t)(s + len - q))) != NULL; q++)
                if ((size_t)(s + len - q) >= eot_len && !memcmp(q, GPT2RT__TOK_EOT_TEXT, eot_len)) {
                    end = (size_t)(q - s);
                    after = end + eot_len;
                    break;
                }
            if (end < len && special == GPT2RT_TOK_SPECIAL_REFUSE)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is refused "
                                       "(GPT2RT_TOK_SPECIAL_ALLOW encodes it as id %d, _TEXT as ordinary text)", end, (int)t->eot);
            if (end < len && t->eot < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is allowed, "
                                       "but this vocabulary has no such token", end);
        }
        for (size_t i = seg; i < end;) {
            size_t j = gpt2rt__tok_piece_end(t, s + seg, i - seg, end - seg) + seg;
            if (gpt2rt__tok_piece(t, s + i, j - i, ids, cap, &k) < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_tok_encode: out of memory for a piece "
                                       "of %zu bytes at text byte %zu", j - i, i);
            i = j;
        }
        if (after > end) {
            if (k < cap) ids[k] = t->eot;
            k++;
        }
        seg = after;
    }
    *n_ids = k;
    if (k > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: %zu bytes need %zu ids, "
                               "cap = %zu", len, k, cap);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_decode(gpt2rt_tokenizer *t, const int32_t *ids, size_t n, void *out, size_t cap,
                                           size_t *n_bytes) {
    if (n_bytes) *n_bytes = 0;
    if (!t || !n_bytes || (!ids && n) || (!out && cap)) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: ids[%zu] = %d is not in "
                                   "[0, %d)", i, (int)ids[i], (int)t->n_vocab);
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        if (o + l <= cap) memcpy((unsigned char *)out + o, t->tok_bytes + t->tok_off[ids[i]], l);
        o += l;
    }
    *n_bytes = o;
    if (o > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: %zu ids make %zu bytes, "
                               "cap = %zu", n, o, cap);
    return GPT2RT_OK;
}

/* ==== 5.5 llm.c token shards ==== */

static gpt2rt_result gpt2rt__shard_done(gpt2rt_shard **out, gpt2rt_shard *s, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        free(s->tokens);
        s->tokens = NULL;
        s->n = 0;
        s->failed = 1;
    }
    *out = s;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load_mem(gpt2rt_shard **out, const void *data, size_t len, const char *name) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    const unsigned char *p = (const unsigned char *)data;
    const size_t hb = GPT2RT__SHARD_HEADER * 4;
    if (!name) name = "token shard";
    if (!p && len) return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: data is NULL", name));
    if (len < 12)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header of an llm.c token file (truncated?)", name, len, hb));
    int32_t h[3];
    memcpy(h, p, 12);
    if (h[0] != GPT2RT__SHARD_MAGIC)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: magic %d, not llm.c's token "
                                                          "file magic %d (not a token file?)", name, (int)h[0], GPT2RT__SHARD_MAGIC));
    if (h[1] != 1)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: version %d; only version 1 "
                                                          "(uint16 tokens) is read", name, (int)h[1]));
    if (len < hb)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header (truncated)", name, len, hb));
    if (h[2] < 0)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: header token count %d is "
                                                          "negative", name, (int)h[2]));
    size_t want = hb + 2 * (size_t)h[2];
    if (len != want)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header says %d tokens = "
                                                          "%zu bytes, the file has %zu (%s)", name, (int)h[2], want, len,
                                                          len < want ? "truncated" : "trailing bytes"));
    s->n = h[2];
    s->tokens = (uint16_t *)malloc(s->n ? 2 * (size_t)s->n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %d "
                                                          "tokens", name, (int)h[2]));
    memcpy(s->tokens, p + hb, 2 * (size_t)s->n);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load(gpt2rt_shard **out, const char *path) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *buf;
    size_t len;
    char error[512];
    gpt2rt_result r = path ? gpt2rt__tok_read_file(path, &buf, &len, error)
                           : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_load: path is NULL");
    if (r != GPT2RT_OK) {
        gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
        *out = s;
        if (s) { memcpy(s->error, error, sizeof error); s->failed = 1; }
        return r;
    }
    r = gpt2rt_shard_load_mem(out, buf, len, path);
    free(buf);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_from_tokens(gpt2rt_shard **out, const int32_t *tokens, int64_t n) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (n < 0 || n > INT32_MAX || (!tokens && n))
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                          "n = %lld must lie in [0, 2^31) (the header's int32 count)", (long long)n));
    s->tokens = (uint16_t *)malloc(n ? 2 * (size_t)n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_shard_from_tokens: out "
                                                          "of memory for %lld tokens", (long long)n));
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535)
            return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                              "tokens[%lld] = %d does not fit uint16", (long long)i, (int)tokens[i]));
        s->tokens[i] = (uint16_t)tokens[i];
    }
    s->n = n;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_save(gpt2rt_shard *s, const char *path) {
    if (!s || !path) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    int32_t h[GPT2RT__SHARD_HEADER];
    memset(h, 0, sizeof h);
    h[0] = GPT2RT__SHARD_MAGIC;
    h[1] = 1;
    h[2] = (int32_t)s->n;
    return gpt2rt__tok_write_file(path, h, sizeof h, s->tokens, 2 * (size_t)s->n, s->error);
}

GPT2RT_DEF void gpt2rt_shard_free(gpt2rt_shard *s) {
    if (!s) return;
    free(s->tokens);
    free(s);
}

GPT2RT_DEF const char *gpt2rt_shard_last_error(const gpt2rt_shard *s) {
    return s ? s->error : "gpt2rt_shard: no shard (out of memory)";
}
GPT2RT_DEF int64_t gpt2rt_shard_count(const gpt2rt_shard *s) { return s && !s->failed ? s->n : 0; }
GPT2RT_DEF const uint16_t *gpt2rt_shard_tokens(const gpt2rt_shard *s) { return s && !s->failed ? s->tokens : NULL; }

/* a bijection of [0, n) drawn from key: a 4-round Feistel network on the smallest
   even number of bits that covers n, walking the cycle until the value is below n
   (at most 4x the domain, so a few steps); no table, so any window of any epoch
   costs O(1) */
static uint64_t gpt2rt__shard_permute(uint64_t x, uint64_t n, uint64_t key) {
    int bits = 2;
    while (((uint64_t)1 << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t s = key + (uint64_t)round * 0x632BE59BD9B4E019ull + r;
            uint64_t f = gpt2rt__rng_next(&s) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = l << half | r;
    } while (x >= n);
    return x;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_batch(gpt2rt_shard *s, uint64_t seed, int64_t step, int rank, int n_ranks, int B,
                                            int T, int32_t *inputs, int32_t *targets) {
    if (!s || !inputs || !targets) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    if (B < 1 || T < 1 || n_ranks < 1 || rank < 0 || rank >= n_ranks || step < 0)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: B = %d and T = %d must be >= 1, "
                               "rank = %d in [0, n_ranks = %d), step = %lld >= 0", B, T, rank, n_ranks, (long long)step);
    int64_t windows = s->n > 0 ? (s->n - 1) / T : 0, per_step = (int64_t)B * n_ranks;
    if (windows < per_step)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: %lld tokens make %lld windows of "
                               "T+1 = %d tokens; a step needs B x n_ranks = %d x %d = %lld", (long long)s->n,
                               (long long)windows, T + 1, B, n_ranks, (long long)per_step);
    /* whole steps per epoch: the windows left over are skipped in that epoch */
    int64_t steps_per_epoch = windows / per_step, epoch = step / steps_per_epoch;
    uint64_t st = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull), key = gpt2rt__rng_next(&st);
    for (int b = 0; b < B; b++) {
        int64_t j = (step % steps_per_epoch) * per_step + (int64_t)rank * B + b;
        int64_t w = (int64_t)gpt2rt__shard_permute((uint64_t)j, (uint64_t)windows, key);
        const uint16_t *src = s->tokens + w * T;
        for (int t = 0; t < T; t++) {
            inputs[(int64_t)b * T + t] = src[t];
            targets[(int64_t)b * T + t] = src[t + 1];
        }
    }
    return GPT2RT_OK;
}

/* ==== 6. Inputs ==== */

/* ==== 6.1 Tokens ==== */

/* inputs (B,T) must lie in [0, vocab_size); targets (B,T), when given, below
   vocab_size (negative: ignored). The message names the first bad one. */
static gpt2rt_result gpt2rt__input_tokens_check(gpt2rt_ctx *ctx, const char *fn, const int32_t *inputs,
                                                const int32_t *targets) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t i = 0; i < d->BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: inputs[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld)", fn, (long long)i, (long long)(i / d->T), (long long)(i % d->T),
                                inputs[i], (long long)d->V);
        if (targets && targets[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: targets[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld) (negative targets are ignored)", fn, (long long)i,
                                (long long)(i / d->T), (long long)(i % d->T), targets[i], (long long)d->V);
    }
    return GPT2RT_OK;
}

/* ==== 6.2 Patches ==== */

/* (slot) continuous series cut into patches (GPT4TS) arrive here, infix gpt2rt__ts_ */

/* ==== 7. CPU backend ==== */

/* fp32 with OpenMP; infix gpt2rt__cpu_ (the matrix product's internals: gpt2rt__sg_).
   Each op is a pair *_forward / *_backward with shapes next to the arguments.
   Every loop that reduces does so in an order fixed by the shapes alone, so the
   results do not depend on the thread count. nt: threads. */

/* ==== 7.1 Ops ==== */

/* ---- dot product with 16 independent lanes (vectorises without -ffast-math) ---- */
static float gpt2rt__cpu_dot(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 16; j += 2) s += acc[j] + acc[j + 1];
    return s;
}

static void gpt2rt__cpu_axpy(float *y, float a, const float *x, int64_t n) { /* y += a x */
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* ---- embeddings ---- */
/* out (B,T,C) = wte[tokens] + wpe[t];  tokens (B,T), wte (Vp,C), wpe (P,C) */
static void gpt2rt__cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                    int64_t B, int64_t T, int64_t C, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *te = wte + (int64_t)tokens[bt] * C, *pe = wpe + (bt % T) * C;
        float *o = out + bt * C;
        for (int64_t c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

/* dwte (Vp,C) += scatter of dout by token; dwpe (P,C) += dout summed over the batch
   (either NULL: frozen). Threads own column blocks and walk the tokens in order:
   deterministic. */
static void gpt2rt__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                     int64_t B, int64_t T, int64_t C, int nt) {
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t bt = 0; bt < B * T; bt++) {
            const float *d = dout + bt * C;
            float *te = dwte ? dwte + (int64_t)tokens[bt] * C : NULL, *pe = dwpe ? dwpe + (bt % T) * C : NULL;
            if (dwte) for (int64_t c = c0; c < c1; c++) te[c] += d[c];
            if (dwpe) for (int64_t c = c0; c < c1; c++) pe[c] += d[c];
        }
    }
}

/* ---- LayerNorm (eps 1e-5, biased variance) ---- */
/* out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C) */
static void gpt2rt__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int64_t N, int64_t C, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float m = 0.0f;
        for (int64_t c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f;
        for (int64_t c = 0; c < C; c++) { float dx = x[c] - m; v += dx * dx; }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + i * C;
        for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

/* dinp (N,C) +=, dw (C) +=, db (C) += from dout (N,C) and the forward's inp, mean, rstd
   (dw and db NULL: frozen) */
static void gpt2rt__cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd,
                                       int64_t N, int64_t C, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *g = dout + i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float dnorm = w[c] * g[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * (x[c] - m) * s;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        float *dx = dinp + i * C;
        for (int64_t c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            dx[c] += (w[c] * g[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    if (!dw) return;
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float aw[16] = {0}, ab[16] = {0};
        for (int64_t i = 0; i < N; i++) {
            const float *x = inp + i * C, *g = dout + i * C;
            float m = mean[i], s = rstd[i];
            for (int64_t c = c0; c < c1; c++) { aw[c - c0] += (x[c] - m) * s * g[c]; ab[c - c0] += g[c]; }
        }
        for (int64_t c = c0; c < c1; c++) { dw[c] += aw[c - c0]; db[c] += ab[c - c0]; }
    }
}

/* ---- causal self-attention ---- */
/* Never stores the (T,T) probabilities: the forward keeps each softmax row's
   log-sum-exp, the backward recomputes the scores from q and k.
   out (B,T,C), lse (B,NH,T) from qkv (B,T,3C); scratch: nt rows of pad16(2T) floats */
static void gpt2rt__cpu_attention_forward(float *out, float *lse, const float *qkv, float *scratch,
                                      int64_t B, int64_t T, int64_t C, int64_t NH, int nt) {
    int64_t HS = C / NH, C3 = 3 * C, rows = B * NH * T;
    float scale = 1.0f / sqrtf((float)HS);
    GPT2RT__PARALLEL_FOR_RR(nt)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        float *sc = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T);
        const float *q = qkv + (b * T + t) * C3 + h * HS;
        float mx = -INFINITY;
        for (int64_t s = 0; s <= t; s++) {
            const float *k = qkv + (b * T + s) * C3 + C + h * HS;
            sc[s] = gpt2rt__cpu_dot(q, k, HS) * scale;
            if (sc[s] > mx) mx = sc[s];
        }
        float sum = 0.0f;
        for (int64_t s = 0; s <= t; s++) { sc[s] = expf(sc[s] - mx); sum += sc[s]; }
        float inv = 1.0f / sum;
        float *y = out + (b * T + t) * C + h * HS;
        for (int64_t i = 0; i < HS; i++) y[i] = 0.0f;
        for (int64_t s = 0; s <= t; s++) gpt2rt__cpu_axpy(y, sc[s] * inv, qkv + (b * T + s) * C3 + 2 * C + h * HS, HS);
        lse[(b * NH + h) * T + t] = mx + logf(sum);
    }
}

/* dqkv (B,T,3C) = (overwritten) from dout (B,T,C), the forward's qkv and lse.
   One (b,h) per task: dk and dv of a head are summed over t in order. */
static void gpt2rt__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                       float *scratch, int64_t B, int64_t T, int64_t C, int64_t NH, int nt) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        float *p = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T), *ds = p + T;
        for (int64_t t = 0; t < T; t++) {
            float *d = dqkv + (b * T + t) * C3 + h * HS;
            for (int64_t i = 0; i < HS; i++) d[i] = d[C + i] = d[2 * C + i] = 0.0f;
        }
        for (int64_t t = 0; t < T; t++) {
            const float *q = qkv + (b * T + t) * C3 + h * HS;
            const float *dy = dout + (b * T + t) * C + h * HS;
            float l = lse[(b * NH + h) * T + t], dsum = 0.0f;
            for (int64_t s = 0; s <= t; s++) {
                const float *k = qkv + (b * T + s) * C3 + C + h * HS;
                const float *v = k + C;
                p[s] = expf(gpt2rt__cpu_dot(q, k, HS) * scale - l);
                ds[s] = gpt2rt__cpu_dot(dy, v, HS); /* dP */
                dsum += p[s] * ds[s];
            }
            float *dq = dqkv + (b * T + t) * C3 + h * HS;
            for (int64_t s = 0; s <= t; s++) {
                float g = p[s] * (ds[s] - dsum) * scale; /* dScore, scaled */
                float *dk = dqkv + (b * T + s) * C3 + C + h * HS;
                gpt2rt__cpu_axpy(dq, g, qkv + (b * T + s) * C3 + C + h * HS, HS);
                gpt2rt__cpu_axpy(dk, g, q, HS);
                gpt2rt__cpu_axpy(dk + C, p[s], dy, HS); /* dv */
            }
        }
    }
}

/* ---- GELU, tanh form ---- */
#define GPT2RT__GELU_K 0.7978845608028654f /* sqrt(2/pi) */
/* out (N) = gelu(inp (N)) */
static void gpt2rt__cpu_gelu_forward(float *out, const float *inp, int64_t N, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GPT2RT__GELU_K * (x + 0.044715f * x * x * x)));
    }
}

/* dinp (N) = gelu'(inp) * dout; dinp may alias dout */
static void gpt2rt__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t N, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GPT2RT__GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GPT2RT__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = g * dout[i];
    }
}

/* y (N) += x (N) */
static void gpt2rt__cpu_residual_add(float *y, const float *x, int64_t N, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) y[i] += x[i];
}

/* ---- cross-entropy over the first V of Vp logits ---- */
/* losses (BT) and lse (BT) from logits (BT,Vp) and targets (BT) (negative: ignored).
   Returns the mean loss over the counted targets; *count gets their number, *sum
   the losses' sum. */
static float gpt2rt__cpu_crossentropy_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
                                          int64_t BT, int64_t V, int64_t Vp, int64_t *count, double *sum, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        float sum = 0.0f;
        for (int64_t v = 0; v < V; v++) sum += expf(x[v] - mx);
        lse[i] = mx + logf(sum);
        losses[i] = targets[i] >= 0 ? lse[i] - x[targets[i]] : 0.0f;
    }
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < BT; i++)
        if (targets[i] >= 0) { total += losses[i]; n++; }
    *count = n;
    *sum = total;
    return n ? (float)(total / (double)n) : 0.0f;
}

/* logits (BT,Vp) become dlogits in place: (softmax - onehot) * dloss; padded
   columns and ignored rows get 0 */
static void gpt2rt__cpu_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                                          float dloss, int64_t BT, int64_t V, int64_t Vp, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        float *x = logits + i * Vp;
        if (targets[i] < 0) { memset(x, 0, (size_t)Vp * sizeof(float)); continue; }
        float l = lse[i];
        for (int64_t v = 0; v < V; v++) x[v] = expf(x[v] - l) * dloss;
        x[targets[i]] -= dloss;
        for (int64_t v = V; v < Vp; v++) x[v] = 0.0f;
    }
}

/* ==== 7.2 Matrix product ==== */

/* ---- matrix product (kernels/cpu_matmul.c validates and times it) ---- */
/* ---------------------------------------------------------------------------
 * CPU fp32 GEMM (row-major):  C(M,N) (+)= op(A)(M,K) * op(B)(K,N) (+ bias)
 *   op(A)[m,k] = trans_a ? A[k*lda+m] : A[m*lda+k]
 *   op(B)[k,n] = trans_b ? B[n*ldb+k] : B[k*ldb+n]
 * BLIS-style: K is cut into KC slices, N into NC blocks, M into MC blocks;
 * panels of A and B are packed (zero padded) into the caller's workspace and
 * an MR x NR register-blocked micro-kernel does the flops.
 * Determinism: every C element is produced by the same micro-kernel, summing
 * k in increasing order inside a KC slice and the slices in increasing order;
 * the slicing depends only on K.  Threads only split the M/N tile grid, so the
 * result is bitwise independent of the number of OpenMP threads.
 * Threading: the routine opens its own `omp parallel` region of n_threads
 * (<= the n_threads given to gpt2rt__sgemm_workspace_bytes); it must not be
 * called from inside a parallel region.
 * ------------------------------------------------------------------------- */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__SG_UNUSED __attribute__((unused))
#else
#define GPT2RT__SG_UNUSED
#endif
/* SIMD paths need GCC/Clang x86-64 (also fine as nvcc host code); define
   GPT2RT_SGEMM_NO_SIMD to force the portable C kernel. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#define GPT2RT__SG_X86 1
#else
#define GPT2RT__SG_X86 0
#endif
/* tiny products run on the calling thread only (no team spawn) */
#ifdef _OPENMP
#define GPT2RT__SG_OMP_PARALLEL _Pragma("omp parallel num_threads(n_threads) if((double)M * (double)N * (double)K > 2.0e5)")
#else
#define GPT2RT__SG_OMP_PARALLEL
#endif

#ifndef GPT2RT_SGEMM_KC
#define GPT2RT_SGEMM_KC 256   /* k slice: B micro-panel KC*NR*4 = 32 KiB stays in L1 (48 KiB) */
#endif
#ifndef GPT2RT_SGEMM_MC
#define GPT2RT_SGEMM_MC 384   /* rows of packed A block: MC*KC*4 = 384 KiB, L2 resident */
#endif
#ifndef GPT2RT_SGEMM_NC
#define GPT2RT_SGEMM_NC 768   /* cols of packed B block: KC*NC*4 = 768 KiB; with M=256 the C block (M x NC) also stays in L2 */
#endif
#if GPT2RT_SGEMM_KC < 1 || GPT2RT_SGEMM_MC < 14 || GPT2RT_SGEMM_NC < 32
#error "gpt2rt.h: GPT2RT_SGEMM_KC >= 1, GPT2RT_SGEMM_MC >= 14 and GPT2RT_SGEMM_NC >= 32 (one SIMD tile per block at least)"
#endif

/* micro-kernel: acc = Ap(kc x MR packed) * Bp(kc x NR packed);
 * mode 0: C = acc, 1: C = acc + bias[0..NR), 2: C += acc */
typedef void (*gpt2rt__sg_kern_fn)(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias);

/* portable C micro-kernel: 4 x 8 tile in 32 scalar accumulators (compilers
   usually turn each row into SIMD registers) */
#define GPT2RT__SG_GEN_MR 4
#define GPT2RT__SG_GEN_NR 8
#define GPT2RT__SG_GEN_ROWS(X) X(0) X(1) X(2) X(3)
#define GPT2RT__SG_GEN_DECL(i) float c##i##0 = 0.0f, c##i##1 = 0.0f, c##i##2 = 0.0f, c##i##3 = 0.0f, \
    c##i##4 = 0.0f, c##i##5 = 0.0f, c##i##6 = 0.0f, c##i##7 = 0.0f;
#define GPT2RT__SG_GEN_FMA(i) { const float a = Ap[i]; \
    c##i##0 += a * b0; c##i##1 += a * b1; c##i##2 += a * b2; c##i##3 += a * b3; \
    c##i##4 += a * b4; c##i##5 += a * b5; c##i##6 += a * b6; c##i##7 += a * b7; }
#define GPT2RT__SG_GEN_OUT(i) { float *c = C + (i) * ldc; \
    if (mode == 0) { c[0] = c##i##0; c[1] = c##i##1; c[2] = c##i##2; c[3] = c##i##3; \
                     c[4] = c##i##4; c[5] = c##i##5; c[6] = c##i##6; c[7] = c##i##7; } \
    else if (mode == 1) { c[0] = c##i##0 + bias[0]; c[1] = c##i##1 + bias[1]; c[2] = c##i##2 + bias[2]; \
                     c[3] = c##i##3 + bias[3]; c[4] = c##i##4 + bias[4]; c[5] = c##i##5 + bias[5]; \
                     c[6] = c##i##6 + bias[6]; c[7] = c##i##7 + bias[7]; } \
    else { c[0] = c[0] + c##i##0; c[1] = c[1] + c##i##1; c[2] = c[2] + c##i##2; c[3] = c[3] + c##i##3; \
           c[4] = c[4] + c##i##4; c[5] = c[5] + c##i##5; c[6] = c[6] + c##i##6; c[7] = c[7] + c##i##7; } }
static void gpt2rt__sg_kern_generic(int64_t kc, const float *Ap, const float *Bp,
                                    float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_DECL)
    for (k = 0; k < kc; k++) {
        const float b0 = Bp[0], b1 = Bp[1], b2 = Bp[2], b3 = Bp[3];
        const float b4 = Bp[4], b5 = Bp[5], b6 = Bp[6], b7 = Bp[7];
        GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_FMA)
        Ap += GPT2RT__SG_GEN_MR;
        Bp += GPT2RT__SG_GEN_NR;
    }
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_OUT)
}

#if GPT2RT__SG_X86
/* ---- AVX-512: 14 x 32 tile, 28 zmm accumulators + 2 B vectors + 1 broadcast ---- */
#define GPT2RT__SG_512_MR 14
#define GPT2RT__SG_512_NR 32
#define GPT2RT__SG_512_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define GPT2RT__SG_512_DECL(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();
#define GPT2RT__SG_512_FMA(i) { __m512 av = _mm512_set1_ps(Ap[i]); \
    c##i##a = _mm512_fmadd_ps(av, b0, c##i##a); c##i##b = _mm512_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_512_ST0(i) _mm512_storeu_ps(C + i * ldc, c##i##a); _mm512_storeu_ps(C + i * ldc + 16, c##i##b);
#define GPT2RT__SG_512_ST1(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(c##i##a, bv0)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(c##i##b, bv1));
#define GPT2RT__SG_512_ST2(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc), c##i##a)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc + 16), c##i##b));
__attribute__((target("avx512f")))
static void gpt2rt__sg_kern_avx512(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_512_ROWS(GPT2RT__SG_512_DECL)
    for (k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_FMA)
        Ap += GPT2RT__SG_512_MR;
        Bp += GPT2RT__SG_512_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST0)
    } else if (mode == 1) {
        __m512 bv0 = _mm512_loadu_ps(bias), bv1 = _mm512_loadu_ps(bias + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST1)
    } else {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST2)
    }
}

/* g++ 12 emits a false -Wmaybe-uninitialized from inside its own avx512 headers
   (_mm512_undefined_ps in the shuffle intrinsics); silence it for the packing helpers below */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* 16x16 transpose of r[0..15] (rows) into r[0..15] (columns) */
__attribute__((target("avx512f")))
static inline void gpt2rt__sg_tr16(__m512 *r) {
    __m512 t[16], u[16];
    int i, g, c;
    for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (g = 0; g < 4; g++) {
        __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (c = 0; c < 4; c++) {
        __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 x2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 x3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(x1, x3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
    }
}

/* transpose-pack: rows src + i*ld (i < rows <= 16), k in [0,kc) -> dst[k*dst_ld + i] for i < width
   (width 12 or 16 lanes written per k; rows beyond `rows` are zero) */
__attribute__((target("avx512f")))
static void gpt2rt__sg_tpack16(float *dst, int64_t dst_ld, int width, const float *src, int64_t ld,
                               int64_t rows, int64_t kc) {
    __m512 r[16];
    const __mmask16 wm = (__mmask16)((1u << width) - 1u);
    int64_t k0, i, k;
    for (k0 = 0; k0 < kc; k0 += 16) {
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        __mmask16 km = (__mmask16)((1u << kn) - 1u);
        for (i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld + k0) : _mm512_setzero_ps();
        gpt2rt__sg_tr16(r);
        for (k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * dst_ld, wm, r[k]);
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_a_avx512(float *Ap, const float *A, int64_t lda, int trans_a,
                                     int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, k;
    (void)mr; /* == GPT2RT__SG_512_MR */
    for (p = 0; p < m_n; p += GPT2RT__SG_512_MR) {
        int64_t rows = m_n - p < GPT2RT__SG_512_MR ? m_n - p : GPT2RT__SG_512_MR;
        float *dst = Ap + p * kc;
        if (trans_a) {
            __mmask16 rm = (__mmask16)((1u << rows) - 1u);
            const float *src = A + k0 * lda + m0 + p;
            for (k = 0; k < kc; k++)
                _mm512_mask_storeu_ps(dst + k * GPT2RT__SG_512_MR, (__mmask16)((1u << GPT2RT__SG_512_MR) - 1u),
                                      _mm512_maskz_loadu_ps(rm, src + k * lda));
        } else {
            gpt2rt__sg_tpack16(dst, GPT2RT__SG_512_MR, GPT2RT__SG_512_MR, A + (m0 + p) * lda + k0, lda, rows, kc);
        }
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_b_avx512(float *Bp, const float *B, int64_t ldb, int trans_b,
                                     int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, k;
    (void)nr; /* == GPT2RT__SG_512_NR */
    for (p = 0; p < n_n; p += GPT2RT__SG_512_NR) {
        int64_t cols = n_n - p < GPT2RT__SG_512_NR ? n_n - p : GPT2RT__SG_512_NR;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            const float *src = B + k0 * ldb + n0 + p;
            if (cols == GPT2RT__SG_512_NR) {
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_loadu_ps(src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_loadu_ps(src + k * ldb + 16));
                }
            } else {
                __mmask16 m0k = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
                __mmask16 m1k = (__mmask16)(cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_maskz_loadu_ps(m0k, src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_maskz_loadu_ps(m1k, src + k * ldb + 16));
                }
            }
        } else {
            const float *src = B + (n0 + p) * ldb + k0;
            gpt2rt__sg_tpack16(dst, 32, 16, src, ldb, cols, kc);
            gpt2rt__sg_tpack16(dst + 16, 32, 16, cols > 16 ? src + 16 * ldb : src, ldb, cols > 16 ? cols - 16 : 0, kc);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* ---- AVX2+FMA: 6 x 16 tile, 12 ymm accumulators ---- */
#define GPT2RT__SG_256_MR 6
#define GPT2RT__SG_256_NR 16
#define GPT2RT__SG_256_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define GPT2RT__SG_256_DECL(i) __m256 c##i##a = _mm256_setzero_ps(), c##i##b = _mm256_setzero_ps();
#define GPT2RT__SG_256_FMA(i) { __m256 av = _mm256_broadcast_ss(Ap + i); \
    c##i##a = _mm256_fmadd_ps(av, b0, c##i##a); c##i##b = _mm256_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_256_ST0(i) _mm256_storeu_ps(C + i * ldc, c##i##a); _mm256_storeu_ps(C + i * ldc + 8, c##i##b);
#define GPT2RT__SG_256_ST1(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(c##i##a, bv0)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(c##i##b, bv1));
#define GPT2RT__SG_256_ST2(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc), c##i##a)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc + 8), c##i##b));
__attribute__((target("avx2,fma")))
static void gpt2rt__sg_kern_avx2(int64_t kc, const float *Ap, const float *Bp,
                                 float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DECL)
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_FMA)
        Ap += GPT2RT__SG_256_MR;
        Bp += GPT2RT__SG_256_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST0)
    } else if (mode == 1) {
        __m256 bv0 = _mm256_loadu_ps(bias), bv1 = _mm256_loadu_ps(bias + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST1)
    } else {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST2)
    }
}
#endif /* GPT2RT__SG_X86 */

/* pack op(A)[m0+i, k0+k] for i<mr_tot (zero beyond m_n), k<kc into mr-row micro-panels: Ap[p][k][i] */
static void gpt2rt__sg_pack_a(float *Ap, const float *A, int64_t lda, int trans_a,
                              int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, i, k;
    for (p = 0; p < m_n; p += mr) {
        int64_t rows = m_n - p < mr ? m_n - p : mr;
        float *dst = Ap + p * kc;
        if (trans_a) {
            for (k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + m0 + p;
                for (i = 0; i < rows; i++) dst[k * mr + i] = src[i];
                for (; i < mr; i++) dst[k * mr + i] = 0.0f;
            }
        } else {
            for (i = 0; i < rows; i++) {
                const float *src = A + (m0 + p + i) * lda + k0;
                for (k = 0; k < kc; k++) dst[k * mr + i] = src[k];
            }
            for (; i < mr; i++)
                for (k = 0; k < kc; k++) dst[k * mr + i] = 0.0f;
        }
    }
}

/* pack op(B)[k0+k, n0+j] for j<n_n (zero padded to nr), k<kc into nr-col micro-panels: Bp[p][k][j] */
static void gpt2rt__sg_pack_b(float *Bp, const float *B, int64_t ldb, int trans_b,
                              int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, j, k;
    for (p = 0; p < n_n; p += nr) {
        int64_t cols = n_n - p < nr ? n_n - p : nr;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            for (k = 0; k < kc; k++) {
                const float *src = B + (k0 + k) * ldb + n0 + p;
                for (j = 0; j < cols; j++) dst[k * nr + j] = src[j];
                for (; j < nr; j++) dst[k * nr + j] = 0.0f;
            }
        } else {
            for (j = 0; j < cols; j++) {
                const float *src = B + (n0 + p + j) * ldb + k0;
                for (k = 0; k < kc; k++) dst[k * nr + j] = src[k];
            }
            for (; j < nr; j++)
                for (k = 0; k < kc; k++) dst[k * nr + j] = 0.0f;
        }
    }
}

typedef void (*gpt2rt__sg_pack_fn)(float *dst, const float *src, int64_t ld, int trans,
                                   int64_t i0, int64_t i_n, int64_t k0, int64_t kc, int r);
typedef struct {
    gpt2rt__sg_kern_fn kern;
    gpt2rt__sg_pack_fn pack_a, pack_b;
    int mr, nr;
} gpt2rt__sg_impl;

static gpt2rt__sg_impl gpt2rt__sg_select(void) {
    gpt2rt__sg_impl im;
    im.kern = gpt2rt__sg_kern_generic;
    im.pack_a = gpt2rt__sg_pack_a;
    im.pack_b = gpt2rt__sg_pack_b;
    im.mr = GPT2RT__SG_GEN_MR;
    im.nr = GPT2RT__SG_GEN_NR;
#if GPT2RT__SG_X86
    __builtin_cpu_init();
#ifdef GPT2RT_SGEMM_FORCE_PATH /* lab testing only: 1 = portable C, 2 = AVX2 */
    if (GPT2RT_SGEMM_FORCE_PATH == 1) return im;
    if (GPT2RT_SGEMM_FORCE_PATH != 2 && __builtin_cpu_supports("avx512f")) {
#else
    if (__builtin_cpu_supports("avx512f")) {
#endif
        im.kern = gpt2rt__sg_kern_avx512;
        im.pack_a = gpt2rt__sg_pack_a_avx512;
        im.pack_b = gpt2rt__sg_pack_b_avx512;
        im.mr = GPT2RT__SG_512_MR;
        im.nr = GPT2RT__SG_512_NR;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        im.kern = gpt2rt__sg_kern_avx2;
        im.mr = GPT2RT__SG_256_MR;
        im.nr = GPT2RT__SG_256_NR;
    }
#endif
    return im;
}

/* floats of workspace per thread (rounded to 64 bytes) */
static size_t gpt2rt__sg_thread_floats(void) {
    size_t f = (size_t)GPT2RT_SGEMM_MC * GPT2RT_SGEMM_KC + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC + 16;
    return (f + 15) & ~(size_t)15;
}

GPT2RT__SG_UNUSED
static size_t gpt2rt__sgemm_workspace_bytes(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * gpt2rt__sg_thread_floats() * sizeof(float);
}

/* one thread's rectangle [m0,m1) x [n0,n1) of C, all of K */
static void gpt2rt__sg_region(const gpt2rt__sg_impl *im, int trans_a, int trans_b,
                              int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, int64_t kcb,
                              const float *A, int64_t lda, const float *B, int64_t ldb,
                              const float *bias, int accumulate, float *C, int64_t ldc, float *ws) {
    const int mr = im->mr, nr = im->nr;
    const int64_t mcb = GPT2RT_SGEMM_MC - GPT2RT_SGEMM_MC % mr;
    const int64_t ncb = GPT2RT_SGEMM_NC - GPT2RT_SGEMM_NC % nr;
    float *Bp = ws;
    float *Ap = ws + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC;
    float tmp[32 * 32]; /* edge tile buffer, >= mr*nr for every kernel */
    int64_t jc, pc, ic, jr, ir, i, j;
    for (jc = n0; jc < n1; jc += ncb) {
        int64_t nn = n1 - jc < ncb ? n1 - jc : ncb;
        for (pc = 0; pc < K; pc += kcb) {
            int64_t kc = K - pc < kcb ? K - pc : kcb;
            int first = (pc == 0) && !accumulate;
            int mode = first ? (bias ? 1 : 0) : 2;
            im->pack_b(Bp, B, ldb, trans_b, jc, nn, pc, kc, nr);
            for (ic = m0; ic < m1; ic += mcb) {
                int64_t mm = m1 - ic < mcb ? m1 - ic : mcb;
                im->pack_a(Ap, A, lda, trans_a, ic, mm, pc, kc, mr);
                for (jr = 0; jr < nn; jr += nr) {
                    int64_t nw = nn - jr < nr ? nn - jr : nr;
                    const float *bp = Bp + jr * kc;
                    const float *bb = bias ? bias + jc + jr : NULL;
                    for (ir = 0; ir < mm; ir += mr) {
                        int64_t mw = mm - ir < mr ? mm - ir : mr;
                        const float *ap = Ap + ir * kc;
                        float *c = C + (ic + ir) * ldc + jc + jr;
                        if (mw == mr && nw == nr) {
                            im->kern(kc, ap, bp, c, ldc, mode, bb);
                        } else {
                            im->kern(kc, ap, bp, tmp, nr, 0, NULL);
                            for (i = 0; i < mw; i++)
                                for (j = 0; j < nw; j++) {
                                    float t = tmp[i * nr + j];
                                    if (mode == 0) c[i * ldc + j] = t;
                                    else if (mode == 1) c[i * ldc + j] = t + bb[j];
                                    else c[i * ldc + j] = c[i * ldc + j] + t;
                                }
                        }
                    }
                }
            }
        }
    }
}

GPT2RT__SG_UNUSED
static void gpt2rt__sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb,
                          const float *bias, int accumulate,
                          float *C, int64_t ldc, void *workspace, int n_threads) {
    gpt2rt__sg_impl im;
    (void)n_threads;
    int64_t kcb, nkb;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        int64_t m, n;
        if (accumulate) return;
        for (m = 0; m < M; m++)
            for (n = 0; n < N; n++) C[m * ldc + n] = bias ? bias[n] : 0.0f;
        return;
    }
    im = gpt2rt__sg_select();
    /* K slicing depends only on K: equal-ish slices of at most KC */
    nkb = (K + GPT2RT_SGEMM_KC - 1) / GPT2RT_SGEMM_KC;
    kcb = (K + nkb - 1) / nkb;
    GPT2RT__SG_OMP_PARALLEL
    {
        int nt = 1, tid = 0;
        int64_t tiles_m = (M + im.mr - 1) / im.mr, tiles_n = (N + im.nr - 1) / im.nr;
        int64_t tm = 1, tn = 1, best = -1, d;
        float *ws;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        ws = (float *)workspace + (size_t)tid * gpt2rt__sg_thread_floats();
        /* choose a tm x tn thread grid minimising per-thread work + packing */
        for (d = 1; d <= nt; d++) {
            int64_t dm, dn, rm, rn, cost;
            if (nt % d) continue;
            dm = d;
            dn = nt / d;
            if (dm > tiles_m || dn > tiles_n) continue;
            rm = (tiles_m + dm - 1) / dm * im.mr;
            rn = (tiles_n + dn - 1) / dn * im.nr;
            cost = rm * rn * K / 32 + K * (rm * ((rn + GPT2RT_SGEMM_NC - 1) / GPT2RT_SGEMM_NC) + rn);
            if (best < 0 || cost < best) { best = cost; tm = dm; tn = dn; }
        }
        if (best < 0) { /* fewer tiles than threads: split the longer side only */
            if (tiles_m >= tiles_n) { tm = nt < tiles_m ? nt : tiles_m; tn = 1; }
            else { tn = nt < tiles_n ? nt : tiles_n; tm = 1; }
        }
        if (tid < tm * tn) {
            int64_t ti = tid / tn, tj = tid % tn;
            int64_t mt0 = tiles_m * ti / tm, mt1 = tiles_m * (ti + 1) / tm;
            int64_t nt0 = tiles_n * tj / tn, nt1 = tiles_n * (tj + 1) / tn;
            int64_t m0 = mt0 * im.mr, m1 = mt1 * im.mr, n0 = nt0 * im.nr, n1 = nt1 * im.nr;
            if (m1 > M) m1 = M;
            if (n1 > N) n1 = N;
            if (m0 < m1 && n0 < n1)
                gpt2rt__sg_region(&im, trans_a, trans_b, m0, m1, n0, n1, K, kcb, A, lda, B, ldb,
                                  bias, accumulate, C, ldc, ws);
        }
    }
}

/* out (BT,OC) = inp (BT,IC) W^T + b;  W (OC,IC), b (OC) or NULL */
static void gpt2rt__cpu_matmul_forward(float *out, const float *inp, const float *w, const float *b,
                                   int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    gpt2rt__sgemm(0, 1, BT, OC, IC, inp, IC, w, IC, b, 0, out, OC, ws, nt);
}

/* dinp (BT,IC) = dout W;  dw (OC,IC) += dout^T inp;  db (OC) += sum over rows of dout.
   dw and db NULL: a frozen weight, only dinp (and inp may be NULL) */
static void gpt2rt__cpu_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    gpt2rt__sgemm(0, 0, BT, IC, OC, dout, OC, w, IC, NULL, 0, dinp, IC, ws, nt);
    if (dw) gpt2rt__sgemm(1, 0, OC, IC, BT, dout, OC, inp, IC, NULL, 1, dw, IC, ws, nt);
    if (!db) return;
    /* column sums: threads own column blocks, rows are summed in order */
    int64_t nblk = (OC + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o0 = blk * 64, o1 = o0 + 64 < OC ? o0 + 64 : OC;
        float acc[64];
        for (int64_t o = o0; o < o1; o++) acc[o - o0] = 0.0f;
        for (int64_t r = 0; r < BT; r++) {
            const float *row = dout + r * OC;
            for (int64_t o = o0; o < o1; o++) acc[o - o0] += row[o];
        }
        for (int64_t o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
}

/* ==== 7.3 Model ==== */

/* What a backend gives the model driver (7.3, end): the steps of GPT-2, each on the
   arenas that gpt2rt__layout carved for it (the CPU: the context's own; the CUDA
   backend: its device arenas, carved by the same function on a shadow context).
   Each returns GPT2RT_OK or a result with ctx's message set. Buffers are the
   context's: x0, layer blocks, lnf, logits, and dres, which carries the gradient
   of the residual stream down the backward. */
typedef struct gpt2rt__backend {
    /* x0 (BT,C) = wte[inputs] + wpe */
    gpt2rt_result (*embed_forward)(gpt2rt_ctx *ctx);
    /* layer l from res (BT,C) into a; also the recompute of FULL, which must give
       bitwise the same values */
    gpt2rt_result (*layer_forward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* ln_f of res (BT,C), then logits (BT,Vp) */
    gpt2rt_result (*head_forward)(gpt2rt_ctx *ctx, const float *res);
    /* logits -> dlogits (scaled by dloss), the tied head's and ln_f's gradients;
       dres = d(res) */
    gpt2rt_result (*head_backward)(gpt2rt_ctx *ctx, const float *res, float dloss);
    /* dres holds d(layer l's output) and becomes d(res), the layer's input res
       (BT,C); weight gradients += */
    gpt2rt_result (*layer_backward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* wte, wpe gradients += from dres */
    gpt2rt_result (*embed_backward)(gpt2rt_ctx *ctx);
    /* bytes from src to dst, both in the backend's arenas */
    gpt2rt_result (*copy)(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes);
} gpt2rt__backend;

/* ---- the CPU backend's steps ---- */

static gpt2rt_result gpt2rt__cpu_embed_forward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    gpt2rt__cpu_encoder_forward(ctx->x0, ctx->inputs, p.wte, p.wpe, d->B, d->T, d->C, d->nt);
    return GPT2RT_OK;
}

/* One layer's forward from res (BT,C) into a; outputs not kept (NULL in a) go to
   dbig, the backward's scratch (free during the forward), and are used at once. The backward's
   recompute calls this same function on the same input: bitwise the same values. */
static gpt2rt_result gpt2rt__cpu_layer_forward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l);
    float *ln1 = a.ln1 ? a.ln1 : ctx->dbig, *ln2 = a.ln2 ? a.ln2 : ctx->dbig; /* not kept: scratch */
    float *gelu = a.fch_gelu ? a.fch_gelu : ctx->dbig;
    gpt2rt__cpu_layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b, BT, C, nt);
    gpt2rt__cpu_matmul_forward(a.qkv, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, ws, nt);
    gpt2rt__cpu_attention_forward(a.atty, a.lse, a.qkv, ctx->att_scratch, d->B, d->T, C, d->NH, nt);
    gpt2rt__cpu_matmul_forward(a.res2, a.atty, p.projw, p.projb, BT, C, C, ws, nt);
    gpt2rt__cpu_residual_add(a.res2, res, BT * C, nt);
    gpt2rt__cpu_layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, BT, C, nt);
    gpt2rt__cpu_matmul_forward(a.fch, ln2, p.fcw, p.fcb, BT, C, 4 * C, ws, nt);
    gpt2rt__cpu_gelu_forward(gelu, a.fch, BT * 4 * C, nt);
    gpt2rt__cpu_matmul_forward(a.res3, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C, ws, nt);
    gpt2rt__cpu_residual_add(a.res3, a.res2, BT * C, nt);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_forward(gpt2rt_ctx *ctx, const float *res) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    gpt2rt__cpu_layernorm_forward(ctx->lnf, ctx->lnf_mean, ctx->lnf_rstd, res, p.lnfw, p.lnfb, d->BT, d->C, d->nt);
    gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf, p.wte, NULL, d->BT, d->C, d->Vp, ctx->gemm_ws, d->nt);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_backward(gpt2rt_ctx *ctx, const float *res, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0), g = gpt2rt__mparams(ctx, ctx->grads, 1);
    gpt2rt__cpu_crossentropy_backward(ctx->logits, ctx->logit_lse, ctx->targets, dloss, BT, d->V, d->Vp, nt);
    /* LM head (tied): dlnf -> dbuf */
    gpt2rt__cpu_matmul_backward(ctx->dbuf, g.wte, NULL, ctx->logits, ctx->lnf, p.wte, BT, C, d->Vp, ctx->gemm_ws, nt);
    memset(ctx->dres, 0, (size_t)(BT * C) * sizeof(float));
    gpt2rt__cpu_layernorm_backward(ctx->dres, g.lnfw, g.lnfb, ctx->dbuf, res, p.lnfw, ctx->lnf_mean, ctx->lnf_rstd,
                                   BT, C, nt);
    return GPT2RT_OK;
}

/* Layer l's backward: dres holds d(res3) and becomes d(res), res (BT,C) the layer's
   input. Outputs the forward did not keep are recomputed into rcbuf, only for the
   weight gradients that need them (NULL g: frozen, skipped). */
static gpt2rt_result gpt2rt__cpu_layer_backward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l), g = gpt2rt__lparams(ctx, ctx->grads, 1, l);
    /* MLP; dres holds d(res3) */
    const float *gelu = a.fch_gelu, *ln2 = a.ln2;
    if (!gelu && g.fcprojw) { gpt2rt__cpu_gelu_forward(ctx->rcbuf, a.fch, BT * 4 * C, nt); gelu = ctx->rcbuf; }
    gpt2rt__cpu_matmul_backward(ctx->dbig, g.fcprojw, g.fcprojb, ctx->dres, gelu, p.fcprojw, BT, 4 * C, C, ws, nt);
    gpt2rt__cpu_gelu_backward(ctx->dbig, a.fch, ctx->dbig, BT * 4 * C, nt);
    if (!ln2 && g.fcw) {
        gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, BT, C, nt);
        ln2 = ctx->rcbuf;
    }
    gpt2rt__cpu_matmul_backward(ctx->dbuf, g.fcw, g.fcb, ctx->dbig, ln2, p.fcw, BT, C, 4 * C, ws, nt);
    gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln2w, g.ln2b, ctx->dbuf, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd,
                                   BT, C, nt);
    /* attention; dres holds d(res2) */
    gpt2rt__cpu_matmul_backward(ctx->dbuf, g.projw, g.projb, ctx->dres, a.atty, p.projw, BT, C, C, ws, nt);
    gpt2rt__cpu_attention_backward(ctx->dbig, ctx->dbuf, a.qkv, a.lse, ctx->att_scratch, d->B, d->T, C, d->NH, nt);
    const float *ln1 = a.ln1;
    if (!ln1 && g.qkvw) {
        gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b, BT, C, nt);
        ln1 = ctx->rcbuf;
    }
    gpt2rt__cpu_matmul_backward(ctx->dbuf, g.qkvw, g.qkvb, ctx->dbig, ln1, p.qkvw, BT, C, 3 * C, ws, nt);
    gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln1w, g.ln1b, ctx->dbuf, res, p.ln1w, a.ln1_mean, a.ln1_rstd,
                                   BT, C, nt);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_embed_backward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params g = gpt2rt__mparams(ctx, ctx->grads, 1);
    gpt2rt__cpu_encoder_backward(g.wte, g.wpe, ctx->dres, ctx->inputs, d->B, d->T, d->C, d->nt);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_copy(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
    return GPT2RT_OK;
}

static const gpt2rt__backend gpt2rt__cpu_backend = {
    gpt2rt__cpu_embed_forward, gpt2rt__cpu_layer_forward, gpt2rt__cpu_head_forward, gpt2rt__cpu_head_backward,
    gpt2rt__cpu_layer_backward, gpt2rt__cpu_embed_backward, gpt2rt__cpu_copy};

/* ---- the driver: one for every backend ---- */
/* It owns the order of the steps and what recompute decides: which layer input is a
   checkpoint, when a FULL segment runs its forward again. ax: the context whose
   arenas the backend's steps use (the CPU: ctx itself). */

#define GPT2RT__TRY(call) do { gpt2rt_result r_ = (call); if (r_ != GPT2RT_OK) return r_; } while (0)

/* the input (BT,C) of layer l: the embeddings, a FULL checkpoint, or the layer before's output */
static float *gpt2rt__model_layer_input(const gpt2rt_ctx *ax, int64_t l) {
    const gpt2rt__dims *d = &ax->d;
    if (l == 0) return ax->x0;
    if (d->recompute == GPT2RT_RECOMPUTE_FULL && l % d->ck == 0) /* checkpoints: one activation apart, as laid out */
        return (float *)(void *)((unsigned char *)ax->ckpt + (l / d->ck - 1) * gpt2rt__ald(d, d->BT * d->C * d->ab));
    return gpt2rt__lacts(ax, l - 1).res3;
}

/* embeddings, the layers, ln_f, the tied LM head: logits (BT,Vp) */
static gpt2rt_result gpt2rt__model_forward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C * d->ab);
    GPT2RT__TRY(be->embed_forward(ctx));
    for (int64_t l = 0; l < L; l++) {
        GPT2RT__TRY(be->layer_forward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
        /* FULL: the slots are reused, so keep the next checkpoint's input and the last output */
        if (full && l + 1 < L && (l + 1) % d->ck == 0)
            GPT2RT__TRY(be->copy(ctx, gpt2rt__model_layer_input(ax, l + 1), gpt2rt__lacts(ax, l).res3, act));
    }
    const float *res = L ? gpt2rt__lacts(ax, L - 1).res3 : ax->x0;
    if (full && L) {
        GPT2RT__TRY(be->copy(ctx, ax->xout, res, act));
        res = ax->xout;
    }
    return be->head_forward(ctx, res);
}

/* gradients of (sum of the counted targets' losses) * dloss, accumulated into the grads */
static gpt2rt_result gpt2rt__model_backward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                            float dloss) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    const float *res_last = !L ? ax->x0 : full ? ax->xout : gpt2rt__lacts(ax, L - 1).res3;
    GPT2RT__TRY(be->head_backward(ctx, res_last, dloss));
    for (int64_t l = L - 1; l >= 0; l--) {
        /* FULL: entering a segment from its top, run its forward again from its checkpoint
           (the last segment's activations are still in the slots from the forward) */
        if (full && (l + 1) % d->ck == 0 && l + 1 < L)
            for (int64_t j = l - l % d->ck; j <= l; j++)
                GPT2RT__TRY(be->layer_forward(ctx, j, gpt2rt__model_layer_input(ax, j), gpt2rt__lacts(ax, j)));
        GPT2RT__TRY(be->layer_backward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
    }
    return be->embed_backward(ctx);
}

#undef GPT2RT__TRY

/* ==== 8. CUDA backend ==== */

/* (slot) under __CUDACC__: the kernels and the driver staged in kernels/staging/
   (cu_common, cu_ops, cu_matmul, cu_attention, cu_backend), infix gpt2rt__cu_ */

/* ==== 9. Optimizer ==== */

#define GPT2RT__NORM_CHUNK 65536
static int64_t gpt2rt__opt_norm_chunks(int64_t n_params) { return (n_params + GPT2RT__NORM_CHUNK - 1) / GPT2RT__NORM_CHUNK; }

/* global L2 norm of the (raw, unscaled) gradients; fixed chunks summed in order:
   deterministic */
static double gpt2rt__opt_grad_norm(gpt2rt_ctx *ctx) {
    int64_t n = ctx->n_train, nch = gpt2rt__opt_norm_chunks(n);
    const float *g = ctx->grads;
    double *parts = ctx->norm_parts;
    GPT2RT__PARALLEL_FOR(ctx->d.nt)
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t i0 = ch * GPT2RT__NORM_CHUNK, i1 = i0 + GPT2RT__NORM_CHUNK < n ? i0 + GPT2RT__NORM_CHUNK : n;
        double acc[8] = {0}; /* 8 independent sums: no dependency chain, vectorisable */
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * (double)g[i + k];
        for (; i < i1; i++) acc[0] += (double)g[i] * (double)g[i];
        parts[ch] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    double s = 0.0;
    for (int64_t ch = 0; ch < nch; ch++) s += parts[ch];
    return sqrt(s);
}

static float gpt2rt__opt_lr_at(const gpt2rt_config *c, int64_t s) {
    double lr = c->lr;
    if (s < c->warmup_steps) return (float)(lr * (double)(s + 1) / (double)c->warmup_steps);
    if (c->total_steps == 0) return (float)lr;
    double span = c->total_steps - c->warmup_steps > 1 ? (double)(c->total_steps - c->warmup_steps) : 1.0;
    double r = (double)(s - c->warmup_steps) / span;
    if (r > 1.0) r = 1.0;
    double lr_min = lr * c->min_lr_frac;
    return (float)(lr_min + 0.5 * (1.0 + cos(GPT2RT__PI * r)) * (lr - lr_min));
}

/* AdamW as torch.optim.AdamW, gradients scaled by clip_coef, then zeroed */
static void gpt2rt__opt_adamw_scalar(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] * clip_coef;
        g[j] = 0.0f;
        float pj = p[j] * decay;
        float mj = m[j] + (1.0f - b1) * (gj - m[j]);
        float vj = v[j] * b2 + (1.0f - b2) * gj * gj;
        m[j] = mj;
        v[j] = vj;
        p[j] = pj - step_size * (mj / (sqrtf(vj) / bc2_sqrt + eps));
    }
}

#if GPT2RT__SG_X86
/* the same operations 16 at a time: sqrtf's errno keeps compilers from vectorising
   the scalar loop unless built with -fno-math-errno, and the update is a quarter
   of a CPU training step */
#if defined(__GNUC__) && !defined(__clang__) /* g++ -O3 (nvcc's host pass) misreads avx512fintrin.h */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f")))
static void gpt2rt__opt_adamw_avx512(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    const __m512 coef = _mm512_set1_ps(clip_coef), dec = _mm512_set1_ps(decay), omb1 = _mm512_set1_ps(1.0f - b1);
    const __m512 vb2 = _mm512_set1_ps(b2), omb2 = _mm512_set1_ps(1.0f - b2), st = _mm512_set1_ps(step_size);
    const __m512 bc2 = _mm512_set1_ps(bc2_sqrt), ve = _mm512_set1_ps(eps), zero = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 gj = _mm512_mul_ps(_mm512_loadu_ps(g + j), coef);
        _mm512_storeu_ps(g + j, zero);
        __m512 pj = _mm512_mul_ps(_mm512_loadu_ps(p + j), dec);
        __m512 m0 = _mm512_loadu_ps(m + j);
        __m512 mj = _mm512_add_ps(m0, _mm512_mul_ps(omb1, _mm512_sub_ps(gj, m0)));
        __m512 vj = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + j), vb2), _mm512_mul_ps(_mm512_mul_ps(omb2, gj), gj));
        _mm512_storeu_ps(m + j, mj);
        _mm512_storeu_ps(v + j, vj);
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vj), bc2), ve);
        _mm512_storeu_ps(p + j, _mm512_sub_ps(pj, _mm512_mul_ps(st, _mm512_div_ps(mj, den))));
    }
    gpt2rt__opt_adamw_scalar(p + j, g + j, m + j, v + j, n - j, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

static void gpt2rt__opt_adamw_kernel(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
#if GPT2RT__SG_X86
    if (__builtin_cpu_supports("avx512f")) {
        gpt2rt__opt_adamw_avx512(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
        return;
    }
#endif
    gpt2rt__opt_adamw_scalar(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}

/* one AdamW step over every trained tensor, at learning rate lr, the gradients
   scaled by grad_scale (normalisation and clipping) */
static void gpt2rt__opt_adamw(gpt2rt_ctx *ctx, float lr, float grad_scale) {
    const gpt2rt_config *c = &ctx->cfg;
    int64_t t = ctx->step + 1;
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *tn = &ctx->tensors[i];
        if (tn->goff < 0) continue;
        float *p = ctx->params + tn->off, *g = ctx->grads + tn->goff, *m = ctx->m + tn->goff, *v = ctx->v + tn->goff;
        float decay = tn->decay ? (float)(1.0 - (double)lr * c->weight_decay) : 1.0f;
        int64_t n = tn->rows * tn->cols, nch = (n + 4095) / 4096;
        GPT2RT__PARALLEL_FOR(ctx->d.nt)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t j0 = ch * 4096, len = n - j0 < 4096 ? n - j0 : 4096;
            gpt2rt__opt_adamw_kernel(p + j0, g + j0, m + j0, v + j0, len, grad_scale, decay, b1, b2, step_size,
                                 bc2_sqrt, eps);
        }
    }
}

/* raw gradients times this = gradients of the mean loss over every target counted
   since the last update */
static double gpt2rt__opt_grad_unscale(const gpt2rt_ctx *ctx) {
    return ctx->acc_targets ? (double)(ctx->d.BT * ctx->cfg.grad_accum) / (double)ctx->acc_targets : 0.0;
}

/* ==== 10. Context ==== */

/* N(0, std) for every element, from a stream seeded per (tensor, 4096-chunk) so the
   result does not depend on the thread count */
static void gpt2rt__init_normal(float *x, int64_t n, float std, uint64_t seed, int nt) {
    int64_t nch = (n + 4095) / 4096;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t ch = 0; ch < nch; ch++) {
        uint64_t s = seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(ch + 1));
        gpt2rt__rng_next(&s);
        int64_t i1 = (ch + 1) * 4096 < n ? (ch + 1) * 4096 : n;
        for (int64_t i = ch * 4096; i < i1; i += 2) {
            double u1 = gpt2rt__rng_uniform(&s), u2 = gpt2rt__rng_uniform(&s);
            double r = sqrt(-2.0 * log(u1)) * std;
            x[i] = (float)(r * cos(2.0 * GPT2RT__PI * u2));
            if (i + 1 < i1) x[i + 1] = (float)(r * sin(2.0 * GPT2RT__PI * u2));
        }
    }
}

static void gpt2rt__init_params(gpt2rt_ctx *ctx) {
    float resid_std = 0.02f / sqrtf(2.0f * (float)ctx->d.L);
    uint64_t s = ctx->cfg.seed;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        float *p = ctx->params + t->off;
        int64_t n = t->rows * t->cols, n_file = t->hf_rows * t->cols;
        uint64_t ts = gpt2rt__rng_next(&s); /* one draw per tensor, used or not */
        switch (t->row->init) {
        case GPT2RT__INIT_NORMAL:
        case GPT2RT__INIT_RESID:
            gpt2rt__init_normal(p, n_file, t->row->init == GPT2RT__INIT_RESID ? resid_std : 0.02f, ts, ctx->d.nt);
            if (n_file < n) memset(p + n_file, 0, (size_t)(n - n_file) * sizeof(float)); /* padded vocab rows */
            break;
        case GPT2RT__INIT_ONES:
            for (int64_t j = 0; j < n; j++) p[j] = 1.0f;
            break;
        case GPT2RT__INIT_ZEROS:
            memset(p, 0, (size_t)n * sizeof(float));
            break;
        }
    }
    ctx->rng = s;
}

/* forget the micro-batches summed since the last update (not the gradients themselves) */
static void gpt2rt__accum_reset(gpt2rt_ctx *ctx) {
    ctx->acc_loss_sum = 0.0;
    ctx->acc_targets = 0;
    ctx->acc_micro = 0;
    ctx->grads_pending = 0;
}

static void gpt2rt__reset_training(gpt2rt_ctx *ctx) {
    memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
    memset(ctx->m, 0, (size_t)ctx->n_train * 2 * sizeof(float));
    ctx->step = 0;
    gpt2rt__accum_reset(ctx);
    ctx->have_logits = ctx->have_loss = 0;
}

/* bytes the OS could give us now (Linux MemAvailable); 0 when unknown */
static uint64_t gpt2rt__host_available(void) {
#ifdef __linux__
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
#else
    return 0;
#endif
}

/* The out-of-memory message: what failed, the free memory, the plan's categories,
   and what the advisor would change to fit. budget 0: use free_bytes (if known). */
static gpt2rt_result gpt2rt__fail_oom(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, uint64_t budget,
                                      uint64_t free_bytes, const char *what, int allocation_failed) {
    char table[1400], advice[1400], head[400], fb[64] = "unknown";
    gpt2rt_plan_format(plan, table, sizeof table);
    if (free_bytes) snprintf(fb, sizeof fb, "%.2f %s", GPT2RT__SZ(free_bytes));
    if (!budget) budget = free_bytes;
    if (allocation_failed)
        snprintf(head, sizeof head, "%s; %.2f %s planned in all, %s free", what, GPT2RT__SZ(plan->total[0]), fb);
    else
        snprintf(head, sizeof head, "the plan needs %.2f %s (%llu bytes), the budget is %.2f %s (%llu bytes), "
                 "%s free; nothing was allocated", GPT2RT__SZ(plan->total[0]), (unsigned long long)plan->total[0],
                 GPT2RT__SZ(budget), (unsigned long long)budget, fb);
    advice[0] = 0;
    if (budget) {
        gpt2rt_config fit;
        size_t k = (size_t)snprintf(advice, sizeof advice, "what would fit %.2f %s:\n", GPT2RT__SZ(budget));
        gpt2rt_fit(&plan->config, budget, GPT2RT_FIT_DEFAULT, &fit, advice + k, sizeof advice - k);
    }
    return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: out of memory: %s\n%s%s", head, table, advice);
}

/* ==== 11. Public calls ==== */

/* every GPT2RT_DEF function, in the order of the manual's CALLS; each checks its
   arguments and the context, then calls into the sections above */

/* ==== 11.1 Results and names ==== */

GPT2RT_DEF const char *gpt2rt_result_string(gpt2rt_result r) {
    switch (r) {
    case GPT2RT_OK: return "ok";
    case GPT2RT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GPT2RT_ERR_NOT_IMPLEMENTED: return "not implemented yet";
    case GPT2RT_ERR_UNAVAILABLE: return "unavailable";
    case GPT2RT_ERR_OUT_OF_MEMORY: return "out of memory";
    case GPT2RT_ERR_IO: return "i/o error";
    case GPT2RT_ERR_FORMAT: return "bad file format";
    case GPT2RT_ERR_STATE: return "call out of order";
    case GPT2RT_RESULT_COUNT: break;
    }
    return "unknown result";
}

GPT2RT_DEF const char *gpt2rt_mem_name(gpt2rt_mem m) {
    static const char *names[GPT2RT_MEM_COUNT] = {"weights", "master", "grads", "moments", "activations",
                                                  "transient", "logits", "workspace", "comm"};
    if ((int)m < 0 || m >= GPT2RT_MEM_COUNT) return "bookkeeping";
    return names[m];
}

/* ==== 11.2 Plan ==== */

GPT2RT_DEF gpt2rt_result gpt2rt_plan(const gpt2rt_config *config, gpt2rt_memory_plan *plan) {
    if (!plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (!config) {
        snprintf(plan->error, sizeof plan->error, "config is NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &plan->config, plan->error, sizeof plan->error);
    if (r != GPT2RT_OK) return r;
    const gpt2rt_config *c = &plan->config;
    gpt2rt__dims d = gpt2rt__dims_of(c);
    plan->n_devices = c->n_devices;
    for (int dev = 0; dev < c->n_devices; dev++) {
        gpt2rt__span s = gpt2rt__span_of(c, dev);
        gpt2rt__layout(&d, &s, plan->bytes[dev], NULL);
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan->total[dev] += plan->bytes[dev][i];
        plan->overhead[dev] = gpt2rt__overhead_estimate(c);
    }
    gpt2rt__param_table(&d, NULL, &plan->n_params_padded, &plan->n_trainable);
    plan->n_params = plan->n_params_padded - (d.Vp - d.V) * d.C;
    plan->flops_per_token = 6.0 * (double)(12 * d.L * d.C * d.C + d.Vp * d.C) + 12.0 * (double)(d.L * d.C * d.T);
    plan->tokens_per_step = d.BT * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1);
    plan->predicted_seconds = gpt2rt__predict_seconds(c, &plan->flops_per_step);
    return GPT2RT_OK;
}

GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *p, char *buf, size_t cap) {
    size_t n = 0;
    if (!p) return 0;
    const gpt2rt_config *c = &p->config;
    char rb[64];
    GPT2RT__PUT("GPT-2 L=%d H=%d C=%d V=%d (padded %d) P=%d: %.2fM parameters, %.2fM trained\n", c->n_layer,
                c->n_head, c->n_embd, c->vocab_size, c->padded_vocab, c->max_seq_len, (double)p->n_params / 1e6,
                (double)(p->n_trainable - (c->frozen & GPT2RT_GROUP_TOKEN_EMBED ? 0 : p->n_params_padded - p->n_params))
                / 1e6);
    GPT2RT__PUT("B=%d T=%d grad_accum=%d (%lld tokens a step), %s, recompute %s, %s backend, %s", c->batch_size,
                c->seq_len, c->grad_accum, (long long)p->tokens_per_step, gpt2rt__precision_name(c->precision),
                gpt2rt__recompute_name(c, rb, sizeof rb), c->backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU",
                gpt2rt__parallel_name(c->parallel));
    if (c->n_devices > 1) GPT2RT__PUT(" over %d devices", c->n_devices);
    if (c->frozen) GPT2RT__PUT(", frozen groups 0x%x", c->frozen);
    GPT2RT__PUT("\n");
    if (p->n_devices == 1) {
        GPT2RT__PUT("%-12s %16s %12s\n", "category", "bytes", "MiB");
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            GPT2RT__PUT("%-12s %16llu %12.2f\n", gpt2rt_mem_name((gpt2rt_mem)i),
                        (unsigned long long)p->bytes[0][i], GPT2RT__MIB(p->bytes[0][i]));
        GPT2RT__PUT("%-12s %16llu %12.2f\n", "total", (unsigned long long)p->total[0], GPT2RT__MIB(p->total[0]));
        if (p->overhead[0])
            GPT2RT__PUT("%-12s %16llu %12.2f\n%-12s %16llu %12.2f\n", "+ overhead", (unsigned long long)p->overhead[0],
                        GPT2RT__MIB(p->overhead[0]), "= device", (unsigned long long)(p->total[0] + p->overhead[0]),
                        GPT2RT__MIB(p->total[0] + p->overhead[0]));
    } else {
        GPT2RT__PUT("%-12s", "MiB");
        for (int dev = 0; dev < p->n_devices; dev++) GPT2RT__PUT(" %11s%d", "device ", dev);
        GPT2RT__PUT("\n");
        for (int i = 0; i <= GPT2RT_MEM_COUNT + 2; i++) {
            GPT2RT__PUT("%-12s", i < GPT2RT_MEM_COUNT ? gpt2rt_mem_name((gpt2rt_mem)i)
                                 : i == GPT2RT_MEM_COUNT ? "total" : i == GPT2RT_MEM_COUNT + 1 ? "+ overhead" : "= device");
            for (int dev = 0; dev < p->n_devices; dev++) {
                uint64_t v = i < GPT2RT_MEM_COUNT ? p->bytes[dev][i] : i == GPT2RT_MEM_COUNT ? p->total[dev]
                           : i == GPT2RT_MEM_COUNT + 1 ? p->overhead[dev] : p->total[dev] + p->overhead[dev];
                GPT2RT__PUT(" %12.2f", GPT2RT__MIB(v));
            }
            GPT2RT__PUT("\n");
        }
    }
    if (buf && cap) buf[n < cap ? n : cap - 1] = 0;
    return n;
}

GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget, unsigned allow, gpt2rt_config *out,
                                    char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = 0;
    if (!config || !out) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (!budget) { GPT2RT__PUT("budget_bytes is 0: give the bytes of one device\n"); return GPT2RT_ERR_INVALID_ARGUMENT; }
    gpt2rt_memory_plan base;
    gpt2rt__fit_result fr;
    char r0[64];
    gpt2rt_result r = gpt2rt_plan(config, &base);
    if (r != GPT2RT_OK) { GPT2RT__PUT("%s\n", base.error); return r; }
    if (!allow) allow = GPT2RT_FIT_DEFAULT;
    gpt2rt__fit_search(&base, budget, allow, &fr);
    n = gpt2rt__fit_explain_start(buf, cap, n, &base, budget);
    if (!fr.found) {
        *out = fr.smallest;
        GPT2RT__PUT("nothing reachable fits: the smallest, %s, %s, micro-batch %d x accumulation %d, recompute %s, "
                    "needs %.2f %s\n", gpt2rt__parallel_name(fr.smallest.parallel),
                    gpt2rt__precision_name(fr.smallest.precision), fr.smallest.batch_size, fr.smallest.grad_accum,
                    gpt2rt__recompute_name(&fr.smallest, r0, sizeof r0), GPT2RT__SZ(fr.small_peak));
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    n = gpt2rt__fit_explain_changes(buf, cap, n, &base, &fr.best);
    *out = fr.best.config;
    int bat = 0;
    uint64_t pk = gpt2rt__plan_peak(&fr.best, &bat);
    if (fr.best_changes == 0)
        GPT2RT__PUT("it fits as it is: %.2f %s of %.2f %s on the fullest device (%d)\n", GPT2RT__SZ(pk),
                    GPT2RT__SZ(budget), bat);
    else
        GPT2RT__PUT("result fits: %.2f %s of %.2f %s on the fullest device (%d); predicted %.0f tokens/s "
                    "(was %.0f, a coarse model)\n", GPT2RT__SZ(pk), GPT2RT__SZ(budget), bat,
                    (double)fr.best.tokens_per_step / fr.best.predicted_seconds,
                    (double)base.tokens_per_step / base.predicted_seconds);
    return GPT2RT_OK;
}

/* ==== 11.3 Context ==== */

GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **out, const gpt2rt_config *config) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    gpt2rt_config hooks;
    memset(&hooks, 0, sizeof hooks);
    if (config && config->alloc && config->free) {
        hooks.alloc = config->alloc; hooks.free = config->free; hooks.alloc_user = config->alloc_user;
    }
    gpt2rt_ctx *ctx = (gpt2rt_ctx *)gpt2rt__alloc(&hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!ctx) return GPT2RT_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->cfg = hooks;
    ctx->failed = 1;
    *out = ctx;
    if (!config) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_create: config is NULL");
    if (config->log) { ctx->cfg.log = config->log; ctx->cfg.log_user = config->log_user; }

    gpt2rt_memory_plan plan;
    gpt2rt_result r = gpt2rt_plan(config, &plan);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", plan.error);
    ctx->cfg = plan.config;
    ctx->d = gpt2rt__dims_of(&ctx->cfg);
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: backend = GPT2RT_BACKEND_CUDA is not "
                            "implemented yet (gpt2rt_plan and gpt2rt_fit plan for it already)");
    if (ctx->cfg.parallel != GPT2RT_PARALLEL_NONE)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = %s over %d devices is not "
                            "implemented yet (gpt2rt_plan and gpt2rt_fit plan for it already)",
                            gpt2rt__parallel_name(ctx->cfg.parallel), ctx->cfg.n_devices);
    uint64_t free_bytes = gpt2rt__host_available();
    if (ctx->cfg.memory_budget && plan.total[0] > ctx->cfg.memory_budget)
        return gpt2rt__fail_oom(ctx, &plan, ctx->cfg.memory_budget, free_bytes, NULL, 0);
    if (free_bytes && plan.total[0] > free_bytes)
        return gpt2rt__fail_oom(ctx, &plan, free_bytes, free_bytes, NULL, 0);
    if (plan.total[0] > (uint64_t)SIZE_MAX)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the plan needs %llu bytes, more than "
                            "this machine can address", (unsigned long long)plan.total[0]);

    ctx->n_tensors = gpt2rt__param_table(&ctx->d, NULL, NULL, NULL);
    ctx->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                   GPT2RT_MEM_BOOKKEEPING);
    if (!ctx->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: parameter table");
    gpt2rt__param_table(&ctx->d, ctx->tensors, NULL, NULL);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        uint64_t b = plan.bytes[0][i];
        if (!b) continue;
        ctx->arena[i] = gpt2rt__alloc(&ctx->cfg, (size_t)b, i);
        if (!ctx->arena[i]) {
            char what[160];
            snprintf(what, sizeof what, "allocating %llu bytes (%.1f MiB) for %s failed",
                     (unsigned long long)b, GPT2RT__MIB(b), gpt2rt_mem_name((gpt2rt_mem)i));
            return gpt2rt__fail_oom(ctx, &plan, 0, gpt2rt__host_available(), what, 1);
        }
        ctx->arena_bytes[i] = b;
    }
    gpt2rt__span whole = gpt2rt__span_of(&ctx->cfg, 0);
    gpt2rt__layout(&ctx->d, &whole, plan.bytes[0], ctx); /* binds the pointers; same sizes as planned */
    gpt2rt__init_params(ctx);
    gpt2rt__reset_training(ctx);
    ctx->failed = 0;
    gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: %.2fM parameters, %.1f MiB planned and allocated, %d thread(s)",
                (double)plan.n_params / 1e6, (double)plan.total[0] / 1048576.0, ctx->d.nt);
    return GPT2RT_OK;
}

GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx) {
    if (!ctx) return;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) gpt2rt__free(&ctx->cfg, ctx->arena[i], i);
    gpt2rt__free(&ctx->cfg, ctx->tensors, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt_config hooks = ctx->cfg;
    gpt2rt__free(&hooks, ctx, GPT2RT_MEM_BOOKKEEPING);
}

GPT2RT_DEF const char *gpt2rt_last_error(const gpt2rt_ctx *ctx) {
    if (!ctx) return "no context (allocating the context itself failed)";
    return ctx->error;
}

GPT2RT_DEF gpt2rt_config gpt2rt_config_get(const gpt2rt_ctx *ctx) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    if (ctx) c = ctx->cfg;
    return c;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    if (!ctx || !plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (ctx->failed) return GPT2RT_ERR_STATE;
    plan->config = ctx->cfg;
    plan->n_devices = 1;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        plan->bytes[0][i] = ctx->arena_bytes[i];
        plan->total[0] += ctx->arena_bytes[i];
    }
    plan->n_params_padded = ctx->n_params;
    plan->n_params = ctx->n_params - (ctx->d.Vp - ctx->d.V) * ctx->d.C;
    plan->n_trainable = ctx->n_train;
    return GPT2RT_OK;
}

/* ==== 11.4 Training ==== */

GPT2RT_DEF gpt2rt_result gpt2rt_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    if (!inputs) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward: inputs is NULL");
    gpt2rt_result r = gpt2rt__input_tokens_check(ctx, "gpt2rt_forward", inputs, targets);
    if (r != GPT2RT_OK) return r;
    memcpy(ctx->inputs, inputs, (size_t)d->BT * sizeof(int32_t));
    if ((r = gpt2rt__model_forward(ctx, &gpt2rt__cpu_backend, ctx)) != GPT2RT_OK) return r;
    ctx->have_logits = 1;
    ctx->have_loss = 0;
    if (targets) {
        memcpy(ctx->targets, targets, (size_t)d->BT * sizeof(int32_t));
        ctx->loss = gpt2rt__cpu_crossentropy_forward(ctx->losses, ctx->logit_lse, ctx->logits, ctx->targets, d->BT,
                                                 d->V, d->Vp, &ctx->n_targets, &ctx->loss_sum, d->nt);
        ctx->have_loss = 1;
    }
    if (loss) *loss = targets ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_backward(gpt2rt_ctx *ctx) {
    GPT2RT__CHECK_CTX(ctx);
    if (!ctx->have_loss)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: needs a gpt2rt_forward with targets first "
                            "(and at most one backward per forward)");
    /* one fixed scale for every micro-batch; the update divides by the counted targets */
    gpt2rt_result r = gpt2rt__model_backward(ctx, &gpt2rt__cpu_backend, ctx, 1.0f / (float)(ctx->d.BT * ctx->cfg.grad_accum));
    if (r != GPT2RT_OK) return r;
    ctx->acc_loss_sum += ctx->loss_sum;
    ctx->acc_targets += ctx->n_targets;
    ctx->acc_micro++;
    ctx->have_loss = ctx->have_logits = 0; /* the logits became dlogits */
    ctx->grads_pending = 1;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    if (!ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_update: no gradients since the last update "
                            "(call gpt2rt_backward first)");
    double t0 = gpt2rt__now(), unscale = gpt2rt__opt_grad_unscale(ctx);
    float norm = (float)(gpt2rt__opt_grad_norm(ctx) * unscale);
    float lr = gpt2rt__opt_lr_at(&ctx->cfg, ctx->step);
    int skipped = !isfinite(norm) || !ctx->acc_targets;
    if (skipped) {
        memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
        if (!ctx->acc_targets) /* no loss to descend: Adam's momentum alone would still move the weights */
            gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: every target of the %d micro-batch%s since the last "
                        "update is ignored (negative); update skipped at step %lld", ctx->acc_micro,
                        ctx->acc_micro == 1 ? "" : "es", (long long)ctx->step);
        else
            gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: gradient norm is %g at step %lld; update skipped",
                        (double)norm, (long long)ctx->step);
    } else {
        float coef = 1.0f;
        if (ctx->cfg.grad_clip > 0.0f) {
            coef = ctx->cfg.grad_clip / (norm + 1e-6f);
            if (coef > 1.0f) coef = 1.0f;
        }
        gpt2rt__opt_adamw(ctx, lr, (float)(unscale * (double)coef));
        ctx->step++;
    }
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->step = ctx->step;
        stats->loss = ctx->acc_targets ? (float)(ctx->acc_loss_sum / (double)ctx->acc_targets) : 0.0f;
        stats->grad_norm = norm;
        stats->lr = lr;
        stats->loss_scale = 1.0f;
        stats->skipped = skipped;
        stats->tokens = ctx->d.BT * ctx->acc_micro;
        stats->micro_batches = ctx->acc_micro;
        stats->seconds = gpt2rt__now() - t0;
    }
    gpt2rt__accum_reset(ctx);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_step(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets,
                                     gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    if (!inputs || !targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step: %s is NULL", inputs ? "targets" : "inputs");
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_step: gradients from an earlier gpt2rt_backward are "
                            "waiting for gpt2rt_update");
    double t0 = gpt2rt__now();
    int64_t BT = ctx->d.BT;
    gpt2rt_result r = GPT2RT_OK;
    /* grad_accum micro-batches of B rows each, then one update */
    for (int k = 0; k < ctx->cfg.grad_accum && r == GPT2RT_OK; k++) {
        r = gpt2rt_forward(ctx, inputs + k * BT, targets + k * BT, NULL);
        if (r == GPT2RT_OK) r = gpt2rt_backward(ctx);
    }
    if (r != GPT2RT_OK && ctx->grads_pending) { /* bad input in a later micro-batch: drop the partial sums */
        memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
        gpt2rt__accum_reset(ctx);
    }
    if (r == GPT2RT_OK) r = gpt2rt_update(ctx, stats);
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_logits: dst is NULL");
    if (count != d->BT * d->V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_logits: dst holds %lld floats, needs "
                            "B*T*vocab = %lld*%lld*%lld = %lld", (long long)count, (long long)d->B, (long long)d->T,
                            (long long)d->V, (long long)(d->BT * d->V));
    if (!ctx->have_logits)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_logits: no logits (call gpt2rt_forward; gpt2rt_backward "
                            "consumes them)");
    for (int64_t i = 0; i < d->BT; i++) memcpy(dst + i * d->V, ctx->logits + i * d->Vp, (size_t)d->V * sizeof(float));
    return GPT2RT_OK;
}

/* ==== 11.5 Weights and training state files ==== */

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (!path) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_load: path is NULL");
    char file[4096];
    if (!gpt2rt__in_dir(path, "model.safetensors", file, sizeof file))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_load: path longer than %d bytes",
                            (int)sizeof file - 20);
    unsigned char *buf;
    size_t len;
    gpt2rt_result r = gpt2rt__read_file(ctx, file, &buf, &len);
    if (r != GPT2RT_OK) return r;
    r = gpt2rt__weights_load_mem(ctx, buf, len, file);
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_config_load(gpt2rt_config *config, const char *path, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!config || !path) {
        if (err && cap) snprintf(err, cap, "gpt2rt_config_load: %s is NULL", config ? "path" : "config");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    /* a context that only carries the allocator, the log and the message */
    gpt2rt_ctx *tmp = (gpt2rt_ctx *)gpt2rt__alloc(config, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) {
        if (err && cap) snprintf(err, cap, "gpt2rt_config_load: out of memory");
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    memset(tmp, 0, sizeof *tmp);
    tmp->cfg = *config;
    char file[4096];
    gpt2rt_result r;
    unsigned char *buf = NULL;
    size_t len = 0;
    if (!gpt2rt__in_dir(path, "config.json", file, sizeof file))
        r = gpt2rt__fail(tmp, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_config_load: path longer than %d bytes",
                         (int)sizeof file - 20);
    else if ((r = gpt2rt__read_file(tmp, file, &buf, &len)) == GPT2RT_OK)
        r = gpt2rt__config_parse_mem(tmp, (char *)buf, len, file, config);
    gpt2rt__free(config, buf, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK && err && cap) snprintf(err, cap, "%s", tmp->error);
    gpt2rt__free(config, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_weights_save(gpt2rt_ctx *ctx, const char *dir) {
    GPT2RT__CHECK_CTX(ctx);
    if (!dir || strlen(dir) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_save: dir is NULL or too long");
    if (!gpt2rt__mkdir(dir)) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
    char path[4200], tmp[4200], cpath[4200], ctmp[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s/model.safetensors.tmp", dir);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(ctmp, sizeof ctmp, "%s/config.json.tmp", dir);
    gpt2rt__st_out *outs = (gpt2rt__st_out *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__st_out),
                                                           GPT2RT_MEM_BOOKKEEPING);
    if (!outs) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_weights_save: table");
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        outs[i].name = t->name;
        outs[i].src = ctx->params + t->off;
        outs[i].rows = t->hf_rows;
        outs[i].cols = t->cols;
        outs[i].transpose = t->transpose;
        outs[i].ndim = t->ndim;
    }
    const char *meta[2] = {"format", "pt"}; /* transformers requires it */
    gpt2rt_result r = gpt2rt__st_write(ctx, tmp, path, outs, ctx->n_tensors, meta, 2);
    gpt2rt__free(&ctx->cfg, outs, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    FILE *f = fopen(ctmp, "wb");
    int ok = f && fprintf(f,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
        "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
        "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
        "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
        "  \"reorder_and_upcast_attn\": false,\n  \"tie_word_embeddings\": true,\n"
        "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n  \"torch_dtype\": \"float32\"\n}\n",
        (long long)d->V, (long long)d->P, (long long)d->P, (long long)d->C, (long long)d->L, (long long)d->NH,
        (long long)(d->V - 1), (long long)(d->V - 1)) > 0;
    if ((r = gpt2rt__write_close(ctx, f, ctmp, cpath, ok)) != GPT2RT_OK) { remove(tmp); return r; }
    /* Two renames cannot replace a pair at once. The old model.safetensors stays under
       a second name (a hard link on POSIX, so the path never goes missing) until
       config.json is in place: when the second rename fails, the old pair comes back. */
    char old[4200];
    snprintf(old, sizeof old, "%s/model.safetensors.old", dir);
    remove(old);
    struct stat sb;
    int is_file = stat(path, &sb) == 0 && GPT2RT__IS_REG(sb.st_mode), have_old = 0;
#ifndef _WIN32
    have_old = is_file && link(path, old) == 0;
#endif
    if (is_file && !have_old) have_old = rename(path, old) == 0; /* no hard links here */
    if (is_file && !have_old) {
        int e = errno;
        remove(tmp); remove(ctmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot keep the previous %s as %s while saving: %s (nothing was "
                            "replaced)", path, old, strerror(e));
    }
    if ((r = gpt2rt__rename(ctx, tmp, path)) != GPT2RT_OK) {
        remove(ctmp);
        if (have_old) remove(old); /* path was not replaced (rename() of two links to one file is a no-op) */
        return r;
    }
    if ((r = gpt2rt__rename(ctx, ctmp, cpath)) != GPT2RT_OK) {
        int back = have_old ? rename(old, path) == 0 : remove(path) == 0;
        if (!back) {
            char first[sizeof ctx->error];
            snprintf(first, sizeof first, "%s", ctx->error);
            gpt2rt__fail(ctx, r, "%s; putting the previous %s back failed too: %s (the previous weights are in %s)",
                         first, path, strerror(errno), have_old ? old : "(none)");
        }
        return r;
    }
    if (have_old) remove(old);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_state_save(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (!path || strlen(path) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_state_save: path is NULL or too long");
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_state_save: gradients are waiting for gpt2rt_update; "
                            "save between optimizer steps");
    const gpt2rt__dims *d = &ctx->d;
    char v[9][32], tmp[4200];
    snprintf(v[0], 32, "%lld", (long long)d->L); snprintf(v[1], 32, "%lld", (long long)d->NH);
    snprintf(v[2], 32, "%lld", (long long)d->C); snprintf(v[3], 32, "%lld", (long long)d->V);
    snprintf(v[4], 32, "%lld", (long long)d->Vp); snprintf(v[5], 32, "%lld", (long long)d->P);
    snprintf(v[6], 32, "%lld", (long long)ctx->step); snprintf(v[7], 32, "%llu", (unsigned long long)ctx->rng);
    snprintf(v[8], 32, "%u", ctx->cfg.frozen);
    const char *meta[] = {"format", "gpt2rt-state-1", "n_layer", v[0], "n_head", v[1], "n_embd", v[2],
                          "vocab_size", v[3], "padded_vocab", v[4], "max_seq_len", v[5], "step", v[6], "rng", v[7],
                          "frozen", v[8]};
    gpt2rt__st_out outs[3];
    const char *names[3] = {"params", "adam_m", "adam_v"};
    const float *srcs[3] = {ctx->params, ctx->m, ctx->v};
    for (int i = 0; i < 3; i++) {
        outs[i].name = names[i]; outs[i].src = srcs[i]; outs[i].rows = i ? ctx->n_train : ctx->n_params; outs[i].cols = 1;
        outs[i].transpose = 0; outs[i].ndim = 1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gpt2rt_result r = gpt2rt__st_write(ctx, tmp, path, outs, 3, meta, (int)(sizeof meta / sizeof meta[0]));
    if (r != GPT2RT_OK) return r;
    return gpt2rt__rename(ctx, tmp, path);
}

GPT2RT_DEF gpt2rt_result gpt2rt_state_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (!path) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_state_load: path is NULL");
    unsigned char *buf;
    size_t len;
    gpt2rt_result r = gpt2rt__read_file(ctx, path, &buf, &len);
    if (r != GPT2RT_OK) return r;
    r = gpt2rt__state_load_mem(ctx, buf, len, path);
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    return r;
}

/* ==== 11.6 Parameters by name ==== */
/* in the Hugging Face layout */

GPT2RT_DEF int gpt2rt_param_count(const gpt2rt_ctx *ctx) { return ctx && !ctx->failed ? ctx->n_tensors : 0; }

GPT2RT_DEF gpt2rt_result gpt2rt_param_info_get(const gpt2rt_ctx *ctx, int index, gpt2rt_param_info *info) {
    if (!ctx || !info || ctx->failed || index < 0 || index >= ctx->n_tensors) return GPT2RT_ERR_INVALID_ARGUMENT;
    const gpt2rt__tensor *t = &ctx->tensors[index];
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", t->name);
    info->ndim = t->ndim;
    gpt2rt__hf_shape(t, info->shape);
    if (t->ndim == 1) info->shape[1] = 0;
    info->numel = t->hf_rows * t->cols;
    info->group = t->group;
    info->decay = t->decay;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__param_access(gpt2rt_ctx *ctx, const char *fn, const char *name, int64_t count,
                                          const void *buf, const gpt2rt__tensor **out) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__tensor *t = name ? gpt2rt__tensor_named(ctx, name) : NULL;
    if (!t) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: no parameter named '%s'", fn, name ? name : "(null)");
    if (!buf) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the buffer for '%s' is NULL", fn, name);
    if (count != t->hf_rows * t->cols)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: '%s' has %lld elements, the buffer %lld", fn, name,
                            (long long)(t->hf_rows * t->cols), (long long)count);
    *out = t;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_param_read(gpt2rt_ctx *ctx, const char *name, gpt2rt_param_what what, float *dst,
                                           int64_t count) {
    const gpt2rt__tensor *t;
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_read", name, count, dst, &t);
    if (r != GPT2RT_OK) return r;
    const float *base = what == GPT2RT_PARAM_VALUE ? ctx->params : what == GPT2RT_PARAM_GRAD ? ctx->grads
                      : what == GPT2RT_PARAM_ADAM_M ? ctx->m : what == GPT2RT_PARAM_ADAM_V ? ctx->v : NULL;
    if (!base) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: what = %d", (int)what);
    if (what != GPT2RT_PARAM_VALUE && t->goff < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: '%s' is frozen (group 0x%x): it "
                            "has no gradient and no moments", name, t->group);
    const float *s = base + (what == GPT2RT_PARAM_VALUE ? t->off : t->goff);
    /* gradients: of the mean loss over the targets since the last update */
    float k = what == GPT2RT_PARAM_GRAD ? (float)gpt2rt__opt_grad_unscale(ctx) : 1.0f;
    if (t->transpose) {
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) dst[c * t->rows + r0] = s[r0 * t->cols + c] * k;
    } else if (k != 1.0f) {
        for (int64_t i = 0; i < count; i++) dst[i] = s[i] * k;
    } else memcpy(dst, s, (size_t)count * sizeof(float));
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_param_write(gpt2rt_ctx *ctx, const char *name, const float *src, int64_t count) {
    const gpt2rt__tensor *t;
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_write", name, count, src, &t);
    if (r != GPT2RT_OK) return r;
    float *d = ctx->params + t->off;
    if (t->transpose) {
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) d[r0 * t->cols + c] = src[c * t->rows + r0];
    } else memcpy(d, src, (size_t)count * sizeof(float));
    ctx->have_logits = ctx->have_loss = 0;
    return GPT2RT_OK;
}

#endif /* GPT2RT_IMPLEMENTATION_DONE */
#endif /* GPT2RT_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the gpt2rt authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/
