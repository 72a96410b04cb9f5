/* common/types.h - 1.2 Types: sizes, tensors, the context
   may call: common/platform.h */
#ifndef GPT2RT__SRC_COMMON_TYPES_H
#define GPT2RT__SRC_COMMON_TYPES_H
#include "platform.h"

/* ==== 1.2 Types: sizes, tensors, the context ==== */

/* sizes of the model and what the memory knobs decide, resolved from the config */
typedef struct gpt2rt__dims {
    int64_t L, NH, C, HS;  /* layers, heads, width, head size C/NH */
    int64_t V, Vp, P;      /* vocab, padded vocab, positions (max_seq_len) */
    int64_t B, T, BT;      /* micro-batch, sequence, B*T (patches: B*M series of n_patches tokens) */
    int patches;           /* time series: patch inputs, regression head (V = Vp = 0) */
    int64_t Bw, lookback, M; /* patches: windows, lookback, channels (B = Bw*M) */
    int64_t patch_len, patch_stride, H; /* patches: patch length, stride, horizon (T = n_patches) */
    int affine;            /* patches: RevIN's learned affine */
    gpt2rt_head seqhead;   /* aLLM4TS's sequence head, NEXT_PATCH or PATCH_DECODE; HEAD_LM (0): none */
    int64_t TH;            /* attention: queries t >= TH are placeholders (see only [0,TH) and
                              themselves); T: plain causal */
    int64_t n_out;         /* loss terms of a micro-batch: BT tokens, or Bw*H*M values */
    int n_threads;         /* CPU threads */
    int cuda;              /* planned for the CUDA backend */
    int act_bytes;         /* bytes per activation element: 4 (fp32), 2 (bf16, fp16) */
    int weight_bytes;      /* bytes per stored weight: 4, or 2 with an fp32 master copy */
    unsigned frozen;       /* gpt2rt_group bits */
    int recompute, checkpoint_every; /* recompute level; FULL: checkpoint spacing k */
    int need_ln1, need_mlp_in; /* ln_1 out / ln_2 out and GELU out feed a trained weight's gradient */
    int keep_ln1, keep_mlp_in; /* ln_1 out; ln_2 out and GELU out: saved by the forward, else
                                  recomputed (if needed) or dropped */
    int recompute_buffer;  /* SELECTIVE: a transient buffer for what the backward recomputes */
    int shards;            /* ZeRO-1: ranks the moments and master weights are split over; 1: none */
    int align;             /* bytes every buffer starts on: 64 (CPU), 256 (CUDA: cuBLASLt, vector loads) */
    int64_t kv_batch, kv_len; /* generation: KV cache rows and positions (0: no cache) */
    int64_t classifier_chunk; /* tokens the LM head holds logits of at once (BT: all) */
    int infer;             /* inference context: every group counts as frozen (no gradients, moments,
                              master), two layer blocks used in turn, no transient */
    int bf16_weights;      /* inference_weights = BF16: the weights arena holds bf16 (weight_bytes = 2, no master) */
} gpt2rt__dims;

/* ZeRO-1: the moments, master weights and updates are split over d->shards data-parallel
   ranks, and the gradient is reduce-scattered to them: each rank updates its shard
   [opt_lo, opt_hi) of the trained floats and all-gathers the weights after */
static inline int gpt2rt__sharded(const gpt2rt__dims *d) { return d->shards > 1; }

/* the layers [l0, l1) one device holds; first holds the embeddings, last the head */
typedef struct gpt2rt__span {
    int64_t l0, l1;
    int first, last;
} gpt2rt__span;

/* a size a parameter's shape is made of (the parameter table's shape columns) */
typedef enum gpt2rt__dim {
    GPT2RT__DIM_1, GPT2RT__DIM_C, GPT2RT__DIM_3C, GPT2RT__DIM_4C, GPT2RT__DIM_VP, GPT2RT__DIM_P,
    GPT2RT__DIM_PL, GPT2RT__DIM_H, GPT2RT__DIM_TC, /* patches: patch_len, horizon, n_patches*C */
    GPT2RT__DIM_M /* patches: channels */
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
   wte and wpe precede the layers, ln_f follows them. Patch models have no wte; their
   rows of gpt2rt__ts_rows follow wpe (in_layer) and ln_f (out_layer). */
enum { GPT2RT__WTE, GPT2RT__WPE, GPT2RT__LNFW, GPT2RT__LNFB, GPT2RT__N_MODEL };
enum { GPT2RT__INW, GPT2RT__INB, GPT2RT__OUTW, GPT2RT__OUTB, GPT2RT__REVW, GPT2RT__REVB, GPT2RT__N_TS };

typedef struct gpt2rt__model_params {
    float *wte;         /* (Vp, C), also the tied LM head; NULL for patches */
    float *wpe;         /* (P, C) */
    float *lnfw, *lnfb; /* (C) */
    float *inw, *inb;   /* patches: (C, PL), (C) */
    float *outw, *outb; /* patches: (H, T*C), (H) */
    float *revw, *revb; /* patches with revin_affine: (M), (M); else NULL */
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

/* A group of ranks that reduce together: the rank threads of one process (CPU data
   parallel, 1.4), processes under MPI, the devices of CUDA ranks (8.6). Every call is collective: every rank
   makes it with the same arguments. Sums are taken in rank order 0, 1, ..., size-1 (one
   fixed left-to-right sum), so every rank gets bitwise the same result, run to run. A
   failed call returns an error result with err set; it never waits forever (a timeout or
   a peer's failure gives an error naming the rank). */
typedef struct gpt2rt__comm gpt2rt__comm;
struct gpt2rt__comm {
    int rank, size;
    void *impl;
    char err[256];
    /* buf (n floats) := the sum over the ranks of buf */
    gpt2rt_result (*all_reduce)(gpt2rt__comm *c, float *buf, int64_t n);
    /* rank r's shard of buf := the sum over the ranks of that shard; the other shards
       are left unspecified. Shard r is [gpt2rt__shard_lo(n, size, r),
       gpt2rt__shard_lo(n, size, r + 1)). */
    gpt2rt_result (*reduce_scatter)(gpt2rt__comm *c, float *buf, int64_t n);
    /* every rank's shard r := rank r's shard r */
    gpt2rt_result (*all_gather)(gpt2rt__comm *c, float *buf, int64_t n);
    /* bytes of buf from root to every rank */
    gpt2rt_result (*broadcast)(gpt2rt__comm *c, void *buf, size_t bytes, int root);
    gpt2rt_result (*barrier)(gpt2rt__comm *c);
    void (*destroy)(gpt2rt__comm *c);
    /* Device communicators (8.6: NCCL, loopback) only; NULL in the host ones. Their
       buffers are device pointers and a collective is only enqueued on `stream` (a
       cudaStream_t, the communicator's own) when it returns; wait() returns once
       everything enqueued has finished, at most the timeout. */
    void *stream;
    gpt2rt_result (*wait)(gpt2rt__comm *c);
};
/* generation's arena (GPT2RT_MEM_KVCACHE, 3.2): the cache, and the scratch of one
   pass of up to N = KB * min(KS, GPT2RT__KV_CHUNK) new tokens through the model */
typedef struct gpt2rt__kv {
    float *k, *v;                  /* (L, KB, KS, C) keys and values, heads side by side */
    int64_t N;                     /* tokens a pass holds */
    int32_t *tok, *row, *pos;      /* (N) a pass's tokens, their row and position */
    float *x;                      /* (N,C) the residual stream */
    float *ln, *ln_mean, *ln_rstd; /* (N,C), (N), (N) */
    float *qkv;                    /* (N,3C) */
    float *atty, *proj;            /* (N,C) attention output; a projection's output */
    float *fch;                    /* (N,4C) MLP hidden, GELU in place */
    float *wvec;                   /* (13C) bf16 weights only: a layer's vectors widened (KV_WVEC) */
    float *att;                    /* (nt, pad16(KS)) one attention row per thread */
    float *logits;                 /* (KB,Vp) of the rows that sample after a pass */
    int32_t *sel;                  /* (KB) the pass's token whose logits each such row gets */
    int64_t *done, *cached, *limit;/* (KB) per row: ended; positions in the cache; last length */
    uint64_t *rng;                 /* (KB) per row sampling streams */
    double *prob;                  /* (Vp) sampling: unnormalised probabilities */
    struct gpt2rt__kv_cand *cand;  /* (Vp) sampling: candidates, sorted */
} gpt2rt__kv;

typedef struct gpt2rt__kv_cand { double p; int32_t id; } gpt2rt__kv_cand;

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
    float *params;     /* (n_params); NULL when d.bf16_weights */
    uint16_t *params16;/* (n_params) bf16 weights (d.bf16_weights), the same offsets; else NULL */
    float *grads;      /* (n_train) */
    float *m, *v;      /* (n_opt) each: the moments of the trained floats [opt_lo, opt_lo + n_opt)
                          (ZeRO-1: this rank's shard; else all, opt_lo = 0, n_opt = n_train) */
    int64_t n_opt, opt_lo, opt_hi;
    /* activations arena */
    int32_t *inputs, *targets;      /* (BT) copies, for the backward */
    float *x0;                      /* (BT,C) embeddings, layer 0 input (FULL: checkpoint 0) */
    int64_t l0;                     /* the first layer these activations hold (a layer-split stage's; 0) */
    unsigned char *layer_acts;      /* NONE/SELECTIVE: L blocks; FULL: ck slots; layer_stride bytes each */
    int64_t layer_stride;
    float *ckpt;                    /* FULL: (ceil(L/ck)-1, BT, C) inputs of layers ck, 2ck, ... */
    float *xout;                    /* FULL: (BT,C) the last layer's output */
    float *lnf, *lnf_mean, *lnf_rstd; /* (BT,C), (BT), (BT) */
    float *losses, *logit_lse;        /* (BT) */
    float *ts_patch;                  /* patches: (BT, PL) normalised patches, in_layer's input */
    float *ts_mean, *ts_std;          /* patches: (B) RevIN statistics of each series */
    float *ts_y, *ts_pred;            /* patches: (Bw,H,M) targets, de-normalised predictions */
    float *ts_z, *ts_dpatch;          /* revin_affine: (BT,PL) patches before the affine; transient:
                                         their gradient */
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
    int head_fused; /* classifier_chunk: gpt2rt_step's forward already ran the head's backward */
    int have_pred; /* ts_pred holds the last series forward's predictions */
    gpt2rt__comm *comm; /* the data-parallel ranks this context reduces with (1.4); &comm_self alone */
    gpt2rt__comm comm_self;
    gpt2rt__comm comm_proc; /* world_size > 1: this process's communicator (10.4); destroy NULL: none */
    int64_t proc_targets;   /* world_size > 1: every rank's acc_targets, once the gradients are summed */
    int dp_reduced;     /* data parallel: this step's gradients are summed over the ranks */
    /* CPU data parallel in one process (10.1): the context the application holds is rank 0;
       ranks[1..n_ranks-1] are contexts of its own kind, driven by threads */
    int n_ranks;
    struct gpt2rt_ctx *ranks[GPT2RT_MAX_DEVICES]; /* ranks[0] == this context */
    void *group;        /* the threads' gpt2rt__comm_group */
    gpt2rt__kv kv; /* generation (config.kv_batch > 0) */
    int eval;      /* gpt2rt_mode: GPT2RT_MODE_EVAL turns dropout off */
    /* dropout of the last forward (its backward and recompute draw the same masks):
       on, the key of its optimizer step, its micro-batch since the last update */
    int drop_train;
    uint64_t drop_key;
    int64_t drop_micro;
    struct gpt2rt__ls *ls; /* layer split (10.2, 8.7): the stages' state; NULL otherwise */
    const struct gpt2rt__backend *be; /* the backend that runs this context's steps (7.3, 8.5) */
    const struct gpt2rt__exec *ex;    /* the execution mode that spreads its calls (10), gpt2rt_create's choice */
    struct gpt2rt__cu_state *cu; /* backend CUDA: the device state (8.5); NULL on the CPU */
    void *dgroup; /* CUDA data parallel, rank 0: the ranks' device communicators (8.6) */
    double *prof; /* (GPT2RT__PROF_COUNT) seconds per op class, summed; NULL: not profiled
                     (tools/bench_cpu sets it; the CPU backend's steps add to it, 7) */
};

#endif /* GPT2RT__SRC_COMMON_TYPES_H */
