/* common/stages.h - 1.5 Layer-split stages: their state
   may call: common/types.h, common/comm.h */
#ifndef GPT2RT__SRC_COMMON_STAGES_H
#define GPT2RT__SRC_COMMON_STAGES_H
#include "types.h"
#include "comm.h"

/* ==== 1.5 Layer-split stages: their state ==== */
/* One state for the stages of a layer split, shared by the two that run them: 10.2 on
   the CPU, 8.7 on CUDA devices (its fields after ops, and its gpt2rt__ls_ops entries).
   The stages are threads that hand micro-batches on under one mutex. */

typedef struct gpt2rt__ls {
    int n, m;                  /* stages, micro-batch slots (grad_accum) */
    int order;                 /* the head's and the embedding's gradients share a buffer */
    unsigned char **acts;      /* (m-1) extra activation sets */
    void *scratch[GPT2RT_MAX_DEVICES][2]; /* stages 1..n-1: transient, workspace */
    uint64_t act_bytes, scratch_bytes[2];
    gpt2rt_ctx *sc;            /* (n*m) stage s, micro-batch k: sc[s*m + k] */
    double *loss_sum;          /* (m) */
    int64_t *n_targets;        /* (m) */
#ifdef GPT2RT__COMM_THREADS
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
    int fwd[GPT2RT_MAX_DEVICES], bwd[GPT2RT_MAX_DEVICES]; /* micro-batches done per stage */
    int stop;                  /* a stage's thread did not start: the others return at once */
    const void *a, *b;         /* this call's inputs and targets (tokens) or x and y (series) */
    /* the CUDA backend's stages (8.7); unused on the CPU */
    const struct gpt2rt__ls_ops *ops; /* the CUDA stages' entries; NULL: the CPU's (10.2) */
    gpt2rt_ctx *hs;            /* (n) stage s's host context: its table, its fp32 weights, cu */
    struct gpt2rt__cu_state *cu[GPT2RT_MAX_DEVICES]; /* stage s's device state */
    gpt2rt_ctx *dev0[GPT2RT_MAX_DEVICES];           /* its own shadow context (cu[s]->dev between steps) */
    gpt2rt_ctx *cudev;         /* (n*m) stage s, micro-batch k: the shadow bound to activation set k */
    void **cuacts;             /* (n*m) the further activation sets (device; NULL for k = 0) */
    int peer[GPT2RT_MAX_DEVICES][GPT2RT_MAX_DEVICES]; /* peer copies between the stages' devices */
    int32_t *h_buckets;        /* (m, gpt2rt__cu_encoder_bucket_ints(BT)) the wte gradient's token buckets */
    int64_t *nb;               /* (m) their counts */
    gpt2rt_result res[GPT2RT_MAX_DEVICES]; /* a stage's failure in the last step */
    float loss_scale;          /* fp16: the dynamic loss scale of every stage; else 1 */
    int clean_steps;           /* fp16: updates since the last overflow or doubling */
} gpt2rt__ls;

/* what a CUDA layer split (8.7) does where the CPU's (10.2) does its own */
typedef struct gpt2rt__ls_ops {
    void (*release)(gpt2rt_ctx *ctx, gpt2rt__ls *ls); /* its device memory, states and host contexts */
    void (*begin)(gpt2rt_ctx *ctx, const void *a);  /* before the stages start (a: the step's inputs) */
    void *(*stage)(void *job);                      /* stage job->s's thread (a gpt2rt__ls_job) */
    gpt2rt_result (*end)(gpt2rt_ctx *ctx);          /* after the stages joined: a stage's failure */
    gpt2rt_result (*update)(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
    gpt2rt_result (*param_read)(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what, float *dst);
    void (*allocated)(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan);
} gpt2rt__ls_ops;

#ifdef GPT2RT__COMM_THREADS
/* wait until *cnt > k (a stage's counter), under the mutex; 0: stopped instead */
static int gpt2rt__ls_wait(gpt2rt__ls *ls, const int *cnt, int k) {
    pthread_mutex_lock(&ls->mu);
    while (*cnt <= k && !ls->stop) pthread_cond_wait(&ls->cv, &ls->mu);
    int ok = !ls->stop;
    pthread_mutex_unlock(&ls->mu);
    return ok;
}

static void gpt2rt__ls_done(gpt2rt__ls *ls, int *cnt) {
    pthread_mutex_lock(&ls->mu);
    (*cnt)++;
    pthread_cond_broadcast(&ls->cv);
    pthread_mutex_unlock(&ls->mu);
}

typedef struct gpt2rt__ls_job { gpt2rt_ctx *ctx; int s; } gpt2rt__ls_job;
#endif

#endif /* GPT2RT__SRC_COMMON_STAGES_H */
