/* config/checks.h - 2.2 Checks
   may call: common/threads.h, common/types.h, config/config.h, config/caps.h */
#ifndef GPT2RT__SRC_CONFIG_CHECKS_H
#define GPT2RT__SRC_CONFIG_CHECKS_H
#include "../common/threads.h"
#include "../common/types.h"
#include "config.h"
#include "caps.h"

/* ==== 2.2 Checks ==== */

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
    if ((int)c->input < 0 || c->input > GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "input = %d is not a gpt2rt_input", (int)c->input);
    if ((int)c->head < 0 || c->head > GPT2RT_HEAD_PATCH_DECODE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = %d is not a gpt2rt_head", (int)c->head);
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    const char *heads[4] = {"LM", "REGRESSION", "NEXT_PATCH", "PATCH_DECODE"};
    if (patches != (c->head != GPT2RT_HEAD_LM))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "input = %s goes with head = %s (got head = %s): token inputs have "
                    "the tied LM head, patch inputs the regression head", patches ? "PATCHES" : "TOKENS",
                    patches ? "REGRESSION" : "LM", heads[c->head]);
    if (!patches && (c->patch_len || c->patch_stride || c->n_channels || c->horizon || c->revin_affine))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "patch_len = %d, patch_stride = %d, n_channels = %d, horizon = %d, "
                    "revin_affine = %d apply to input = PATCHES only (set them to 0 for tokens)", c->patch_len,
                    c->patch_stride, c->n_channels, c->horizon, c->revin_affine);
    if (patches) {
        GPT2RT__RANGE(patch_len, 1, 1 << 16);
        GPT2RT__RANGE(patch_stride, 1, 1 << 16);
        GPT2RT__RANGE(n_channels, 1, 1 << 16);
        if (c->head != GPT2RT_HEAD_NEXT_PATCH) GPT2RT__RANGE(horizon, 1, 1 << 20);
        GPT2RT__RANGE(revin_affine, 0, 1);
    }
    /* aLLM4TS: stage 1's targets are the model's own normalised patches, so
       RevIN's affine (which would move the targets with the weights) and a horizon do
       not apply; the placeholder mask needs placeholders */
    if (c->head == GPT2RT_HEAD_NEXT_PATCH && (c->horizon || c->revin_affine))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = NEXT_PATCH predicts the next patch of the lookback itself: "
                    "horizon = %d and revin_affine = %d must be 0", c->horizon, c->revin_affine);
    if ((int)c->attn_mask < 0 || c->attn_mask > GPT2RT_MASK_PLACEHOLDERS)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "attn_mask = %d is not a gpt2rt_attn_mask", (int)c->attn_mask);
    if (c->attn_mask == GPT2RT_MASK_PLACEHOLDERS && c->head != GPT2RT_HEAD_PATCH_DECODE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "attn_mask = PLACEHOLDERS needs head = PATCH_DECODE (got head = %s): "
                    "only it has placeholder positions", heads[c->head]);

    const unsigned all = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM |
                         GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_HEAD;
    /* the groups this model has: tokens + LM head, or patches + in/out layers */
    const unsigned model = all & ~(unsigned)(patches ? GPT2RT_GROUP_TOKEN_EMBED : GPT2RT_GROUP_HEAD);
    if (c->frozen & ~all)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x has bits outside the gpt2rt_group values (0x%x)",
                    c->frozen, all);
    if (!patches && (c->frozen & GPT2RT_GROUP_HEAD))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen includes GPT2RT_GROUP_HEAD, which has no parameters "
                    "with token inputs and the tied LM head");
    if (patches && (c->frozen & GPT2RT_GROUP_TOKEN_EMBED))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen includes GPT2RT_GROUP_TOKEN_EMBED, which patch inputs do "
                    "not have (in_layer and out_layer are GPT2RT_GROUP_HEAD)");
    if ((c->frozen & model) == model)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x freezes every parameter group: nothing to train",
                    c->frozen);
    return GPT2RT_OK;
}

/* dropout: probabilities in [0, 1) (1 would drop everything and scale by 1/0) */
static gpt2rt_result gpt2rt__cfg_check_dropout(const gpt2rt_config *c, char *err, size_t cap) {
    const char *names[3] = {"dropout", "attn_dropout", "head_dropout"};
    const float ps[3] = {c->dropout, c->attn_dropout, c->head_dropout};
    for (int i = 0; i < 3; i++)
        if (!(ps[i] >= 0.0f && ps[i] < 1.0f))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "%s = %g must lie in [0, 1) (a probability; 0 = off)", names[i],
                        (double)ps[i]);
    return GPT2RT_OK;
}

/* patches: the tokens of one series, (L - patch_len)/stride + 2 (GPT4TS pads stride steps);
   NEXT_PATCH: (L - patch_len)/stride + 1, aLLM4TS's stage 1 (no padding: a padded last
   patch would be a target of repeated values); PATCH_DECODE: the padded history, then
   ceil(horizon/patch_len) placeholders */
static int64_t gpt2rt__cfg_n_history(const gpt2rt_config *c) {
    return ((int64_t)c->seq_len - c->patch_len) / c->patch_stride + (c->head == GPT2RT_HEAD_NEXT_PATCH ? 1 : 2);
}
static int64_t gpt2rt__cfg_n_patches(const gpt2rt_config *c) {
    int64_t f = c->head == GPT2RT_HEAD_PATCH_DECODE ? ((int64_t)c->horizon + c->patch_len - 1) / c->patch_len : 0;
    return gpt2rt__cfg_n_history(c) + f;
}

static gpt2rt_result gpt2rt__cfg_check_batch(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(batch_size, 1, 1 << 20);
    if (c->input == GPT2RT_INPUT_PATCHES) {
        if (c->seq_len < c->patch_len || c->seq_len > (1 << 24))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "seq_len = %d (the lookback) must lie in [patch_len = %d, 2^24]",
                        c->seq_len, c->patch_len);
        int64_t np = gpt2rt__cfg_n_patches(c);
        if (c->head == GPT2RT_HEAD_NEXT_PATCH && np < 2)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = NEXT_PATCH needs 2 patches or more: seq_len = %d holds "
                        "(%d - %d)/%d + 1 = %lld (seq_len >= patch_len + patch_stride)", c->seq_len, c->seq_len,
                        c->patch_len, c->patch_stride, (long long)np);
        if (c->head == GPT2RT_HEAD_PATCH_DECODE && np > c->max_seq_len)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_patches = %lld history + %lld placeholders (ceil(horizon / "
                        "patch_len) = ceil(%d / %d)) = %lld exceeds max_seq_len = %d (the positions of wpe)",
                        (long long)gpt2rt__cfg_n_history(c), (long long)(np - gpt2rt__cfg_n_history(c)), c->horizon,
                        c->patch_len, (long long)np, c->max_seq_len);
        if (np > c->max_seq_len)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_patches = (seq_len - patch_len)/patch_stride + 2 = (%d - %d)/%d "
                        "+ 2 = %lld exceeds max_seq_len = %d (the positions of wpe)", c->seq_len, c->patch_len,
                        c->patch_stride, (long long)np, c->max_seq_len);
        if ((int64_t)c->batch_size * c->n_channels * (np > c->seq_len ? np : c->seq_len) > ((int64_t)1 << 30) ||
            (int64_t)c->batch_size * c->n_channels * c->horizon > ((int64_t)1 << 30))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "batch_size * n_channels * max(seq_len, horizon) = %d * %d * %d "
                        "exceeds 2^30", c->batch_size, c->n_channels, c->seq_len > c->horizon ? c->seq_len : c->horizon);
        GPT2RT__RANGE(grad_accum, 1, 1 << 20);
        return GPT2RT_OK;
    }
    if (c->seq_len < 1 || c->seq_len > c->max_seq_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "seq_len = %d must lie in [1, max_seq_len = %d]", c->seq_len, c->max_seq_len);
    if ((int64_t)c->batch_size * c->seq_len > ((int64_t)1 << 30))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "batch_size * seq_len = %d * %d exceeds 2^30 tokens",
                    c->batch_size, c->seq_len);
    GPT2RT__RANGE(grad_accum, 1, 1 << 20);
    return GPT2RT_OK;
}

/* generation's KV cache: token models only, at most max_seq_len positions */
static gpt2rt_result gpt2rt__cfg_check_kv(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->kv_batch < 0 || c->kv_batch > (1 << 16))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch = %d is out of range [0, 65536] (0: no KV cache)",
                    c->kv_batch);
    if (!c->kv_batch && c->kv_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_len = %d applies with kv_batch > 0 (the KV cache's rows; "
                    "it is 0)", c->kv_len);
    if (!c->kv_batch) return GPT2RT_OK;
    if (c->input == GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch = %d: generation needs input = TOKENS (this model "
                    "has patch inputs)", c->kv_batch);
    if (c->kv_len < 1 || c->kv_len > c->max_seq_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_len = %d must lie in [1, max_seq_len = %d]", c->kv_len,
                    c->max_seq_len);
    if ((int64_t)c->kv_batch * c->kv_len > ((int64_t)1 << 30))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch * kv_len = %d * %d exceeds 2^30 positions",
                    c->kv_batch, c->kv_len);
    return GPT2RT_OK;
}

/* the inference context: forward only, so the knobs that shape training's memory have
   nothing to act on (refused rather than silently ignored) */
static gpt2rt_result gpt2rt__cfg_check_inference(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->inference != 0 && c->inference != 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = %d must be 0 (training) or 1 (generation and "
                    "forward-only evaluation)", c->inference);
    int w = (int)c->inference_weights;
    if (w != GPT2RT_PRECISION_DEFAULT && w != GPT2RT_PRECISION_FP32 && w != GPT2RT_PRECISION_BF16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = %d must be GPT2RT_PRECISION_FP32 (%d) or "
                    "GPT2RT_PRECISION_BF16 (%d)", w, (int)GPT2RT_PRECISION_FP32, (int)GPT2RT_PRECISION_BF16);
    if (w == GPT2RT_PRECISION_BF16) {
        /* a training context's weights are what AdamW updates: fp32 (precision sets its CUDA copies) */
        if (!c->inference)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = BF16 (%d) with inference = 0: bf16 "
                        "weights are for an inference context (set inference = 1), a training context keeps "
                        "fp32 weights", w);
    }
    if (!c->inference) return GPT2RT_OK;
    if (c->recompute != GPT2RT_RECOMPUTE_NONE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = 1 with recompute = %d: recompute trades the "
                    "backward's saved activations, which an inference context does not keep; set recompute = NONE",
                    (int)c->recompute);
    if (c->frozen)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = 1 with frozen = 0x%x: nothing is trained, so "
                    "nothing is frozen; set frozen = 0", c->frozen);
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
    if (c->classifier_chunk < 0)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "classifier_chunk = %d must be >= 0 (0: every token's logits at "
                    "once)", c->classifier_chunk);
    if (c->classifier_chunk && c->input == GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "classifier_chunk = %d applies to token models (the LM head); "
                    "this one has patch inputs", c->classifier_chunk);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_parallel(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(n_devices, 1, GPT2RT_MAX_DEVICES);
    if ((int)c->parallel < 0 || c->parallel > GPT2RT_PARALLEL_LAYER_SPLIT)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = %d is not a gpt2rt_parallel", (int)c->parallel);
    if (c->parallel == GPT2RT_PARALLEL_NONE && c->n_devices > 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_devices = %d needs parallel = DATA or LAYER_SPLIT",
                    c->n_devices);
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->n_devices < 2)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT needs n_devices >= 2 (it is %d)", c->n_devices);
    /* data parallel runs over world_size processes x n_devices each (checked below) */
    if (c->parallel == GPT2RT_PARALLEL_DATA && c->n_devices < 2 && c->world_size == 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = DATA needs world_size x n_devices >= 2 (it is 1 x %d): "
                    "set n_devices, or launch several processes (torchrun, mpirun)", c->n_devices);
    if (c->shard_optimizer != 0 && c->shard_optimizer != 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "shard_optimizer = %d must be 0 or 1", c->shard_optimizer);
    if (c->shard_optimizer && c->parallel != GPT2RT_PARALLEL_DATA)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "shard_optimizer = 1 shards the optimizer over data-parallel "
                    "ranks: it needs parallel = DATA (it is %s)", c->parallel == GPT2RT_PARALLEL_NONE ? "NONE"
                    : "LAYER_SPLIT");
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->n_layer < c->n_devices)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT over %d devices needs n_layer >= %d "
                    "(it is %d)", c->n_devices, c->n_devices, c->n_layer);
    for (int i = 0; i < GPT2RT_MAX_DEVICES; i++)
        if (c->device_ids[i] < 0)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[%d] = %d is negative", i, c->device_ids[i]);
    /* the plan's tokens a step (int64): every micro-batch of every data-parallel rank; a
       micro-batch is at most 2^30 rows and grad_accum 2^20, so only the ranks can carry
       it past 2^63 (world_size > 1 is data parallel, checked above) */
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    int64_t rows = patches ? (int64_t)c->batch_size * c->n_channels * gpt2rt__cfg_n_patches(c)
                           : (int64_t)c->batch_size * c->seq_len;
    int64_t ranks = (int64_t)(c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1) * c->world_size;
    if (rows * c->grad_accum > INT64_MAX / ranks)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "%s a step = %s%lld x grad_accum = %d x n_devices = %d x world_size "
                    "= %d = %.3g, past 2^63; lower grad_accum or batch_size", patches ? "positions" : "tokens",
                    patches ? "batch_size x n_channels x n_patches = " : "batch_size x seq_len = ", (long long)rows,
                    c->grad_accum, c->n_devices, c->world_size, (double)rows * c->grad_accum * (double)ranks);
    return GPT2RT_OK;
}

/* layer split's stages: explicit first layers (stage_first_layer), or the planner's
   split (gpt2rt__stage_bounds); under FULL recompute every stage starts at a checkpoint,
   so no recomputed segment spans two stages */
static gpt2rt_result gpt2rt__cfg_check_stages(const gpt2rt_config *c, char *err, size_t cap) {
    const int *f = c->stage_first_layer;
    int n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT, given = 0;
    int ck = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    for (int s = 0; s < GPT2RT_MAX_DEVICES; s++) {
        if (!f[s]) continue;
        if (!split)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d applies to parallel = LAYER_SPLIT "
                        "(it is %s); set it to 0", s, f[s], c->parallel == GPT2RT_PARALLEL_DATA ? "DATA" : "NONE");
        if (s >= n)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d names a stage beyond the n_devices = "
                        "%d stages (0..%d); set it to 0", s, f[s], n, n - 1);
        if (!s)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[0] = %d: stage 0 starts at layer 0 (it holds "
                        "the embedding); give the first layers of stages 1..%d", f[0], n - 1);
        given = 1;
    }
    if (!split) return GPT2RT_OK;
    if (!given) { /* the planner's: at least a checkpoint segment a stage */
        int segs = (c->n_layer + ck - 1) / ck;
        if (segs < n)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT over %d devices with recompute = FULL "
                        "needs every stage to start at a checkpoint, but checkpoint_every = %d cuts n_layer = %d "
                        "into %d segment%s; lower checkpoint_every (1 always works)", n, ck, c->n_layer, segs,
                        segs > 1 ? "s" : "");
        return GPT2RT_OK;
    }
    for (int s = 1; s < n; s++) {
        if (!f[s])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = 0 while others are set: give the first "
                        "layer of every stage 1..%d, or none (all 0: the planner's split)", s, n - 1);
        if (f[s] < 1 || f[s] > c->n_layer - 1)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d must lie in [1, n_layer - 1 = %d]: "
                        "every stage holds at least one layer", s, f[s], c->n_layer - 1);
        if (s > 1 && f[s] == f[s - 1])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage %d would hold no layer: stage_first_layer[%d] = "
                        "stage_first_layer[%d] = %d", s - 1, s - 1, s, f[s]);
        if (s > 1 && f[s] < f[s - 1])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer must increase: stage_first_layer[%d] = %d < "
                        "stage_first_layer[%d] = %d", s, f[s], s - 1, f[s - 1]);
        if (f[s] % ck)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "recompute = FULL keeps every %d-th layer's input "
                        "(checkpoint_every = %d) and each stage must start at one: stage_first_layer[%d] = %d is not "
                        "a multiple of %d", ck, ck, s, f[s], ck);
    }
    return GPT2RT_OK;
}

/* The processes: world_size resolved from the config or the launcher (0 after the
   defaults: the launcher's variables were wrong, and gpt2rt__proc_from_env says how). */
static gpt2rt_result gpt2rt__cfg_check_process(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->world_size == 0) {
        int w, r, l, mpi;
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        gpt2rt_result res = gpt2rt__proc_from_env(&e, &w, &r, &l, &mpi, err, cap);
        if (res != GPT2RT_OK) return res;
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "world_size = 0 was not resolved"); /* not reached */
    }
    GPT2RT__RANGE(world_size, 1, 1 << 20);
    if (c->rank < 0 || c->rank >= c->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rank = %d must lie in [0, world_size - 1 = %d] (ranks count from 0)",
                    c->rank, c->world_size - 1);
    if (c->local_rank < 0 || c->local_rank > c->rank)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "local_rank = %d must lie in [0, rank = %d] (the process's index on "
                    "its node)", c->local_rank, c->rank);
    if ((int)c->rendezvous < 0 || c->rendezvous > GPT2RT_RENDEZVOUS_MPI)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %d is not a gpt2rt_rendezvous", (int)c->rendezvous);
    if (!(c->timeout_s > 0.0f && c->timeout_s <= 86400.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "timeout_s = %g must lie in (0, 86400] seconds", (double)c->timeout_s);
    GPT2RT__RANGE(allow_shared_device, 0, 1);
    if (c->world_size == 1) return GPT2RT_OK;
    if (c->parallel == GPT2RT_PARALLEL_NONE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "this process is rank %d of world_size = %d (from the config or the "
                    "launcher) but parallel = NONE: every process would train its own copy; set parallel = DATA, "
                    "or world_size = 1 to train alone", c->rank, c->world_size);
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) return GPT2RT_OK; /* the capability table refuses it */
#ifdef GPT2RT_NO_DIST
    GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "world_size = %d processes: this build has no multi-process code (the "
                "implementation was compiled with GPT2RT_NO_DIST); run one process (world_size = 1, data parallel "
                "over n_devices of this process), or build without GPT2RT_NO_DIST", c->world_size);
#endif
    switch (c->rendezvous) {
    case GPT2RT_RENDEZVOUS_DEFAULT:
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "world_size = %d processes need a rendezvous: torchrun sets "
                    "MASTER_ADDR and MASTER_PORT (rendezvous ENV), mpirun with a GPT2RT_MPI build uses MPI; or set "
                    "rendezvous = TCP, FILE or MPI in the config", c->world_size);
    case GPT2RT_RENDEZVOUS_ENV:
    case GPT2RT_RENDEZVOUS_TCP:
        if (!c->master_addr[0] || memchr(c->master_addr, 0, sizeof c->master_addr) == NULL)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %s needs rank 0's address: MASTER_ADDR is not set "
                        "(torchrun sets it; or set master_addr in the config)",
                        c->rendezvous == GPT2RT_RENDEZVOUS_ENV ? "ENV" : "TCP");
        if (c->master_port < 1 || c->master_port > 65535)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %s needs rank 0's port in [1, 65535]: master_port "
                        "= %d (MASTER_PORT %s%s%s; torchrun sets it, default 29500)",
                        c->rendezvous == GPT2RT_RENDEZVOUS_ENV ? "ENV" : "TCP", c->master_port,
                        getenv("MASTER_PORT") ? "= '" : "is not set", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "",
                        getenv("MASTER_PORT") ? "'" : "");
        break;
    case GPT2RT_RENDEZVOUS_FILE:
        if (!c->rendezvous_file[0] || memchr(c->rendezvous_file, 0, sizeof c->rendezvous_file) == NULL)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = FILE needs rendezvous_file: a path every rank "
                        "can read and write");
        break;
    case GPT2RT_RENDEZVOUS_MPI:
#ifndef GPT2RT_MPI
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "rendezvous = MPI needs the implementation compiled with -DGPT2RT_MPI "
                    "(mpicc; Debian: apt-get install openmpi-bin libopenmpi-dev)");
#else
        break;
#endif
    }
    return GPT2RT_OK;
}

/* The devices this process drives, against the `visible` devices the driver counts
   (CUDA_VISIBLE_DEVICES = cvd, NULL: unset; local_world: processes on this node, 0:
   unknown). A pure function of its arguments, so every refusal is testable on a
   machine without a GPU. */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__dev_check(int visible, const char *cvd, int local_world, const gpt2rt_config *c,
                                       char *err, size_t cap) {
    char vis[160];
    snprintf(vis, sizeof vis, "CUDA_VISIBLE_DEVICES %s%.100s%s", cvd ? "= '" : "is not set", cvd ? cvd : "",
             cvd ? "' renumbers them from 0" : "");
    if (visible < 1)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "no CUDA device is visible (%s); backend = CPU runs without one", vis);
    int n = c->n_devices < GPT2RT_MAX_DEVICES ? c->n_devices : GPT2RT_MAX_DEVICES;
    if (local_world > 1 && (int64_t)local_world * n > visible && !c->allow_shared_device)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "%d processes on this node x n_devices = %d need %lld GPUs, %d "
                    "visible (%s): start at most %d processes per node (torchrun --nproc_per_node=%d)", local_world,
                    n, (long long)local_world * n, visible, vis, visible / n > 0 ? visible / n : 1,
                    visible / n > 0 ? visible / n : 1);
    for (int i = 0; i < n; i++) {
        if (c->device_ids[i] >= visible)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "invalid device ordinal: device_ids[%d] = %d%s, but %d CUDA "
                        "device(s) are visible, ordinals 0..%d (%s); fix device_ids, or run fewer processes per node",
                        i, c->device_ids[i], c->local_rank ? " (from local_rank x n_devices + i)" : "", visible,
                        visible - 1, vis);
        for (int j = 0; j < i; j++)
            if (c->device_ids[j] == c->device_ids[i] && !c->allow_shared_device)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[%d] = device_ids[%d] = %d: one GPU twice would "
                            "hold two replicas in one memory, and NCCL refuses it (\"Duplicate GPU detected\"); give "
                            "distinct ordinals (allow_shared_device = 1 is "
                            "the test mode that allows it)", j, i, c->device_ids[i]);
    }
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
    if ((r = gpt2rt__cfg_check_dropout(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_batch(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_kv(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_inference(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_precision(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_process(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_parallel(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cap_check(c, GPT2RT__CAP_PLAN, NULL, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_stages(c, err, cap)) != GPT2RT_OK) return r;
    return gpt2rt__cfg_check_optimizer(c, err, cap);
}

static gpt2rt__dims gpt2rt__dims_of(const gpt2rt_config *c) {
    gpt2rt__dims d;
    d.L = c->n_layer; d.NH = c->n_head; d.C = c->n_embd; d.HS = d.C / d.NH;
    d.V = c->vocab_size; d.Vp = c->padded_vocab; d.P = c->max_seq_len;
    d.B = c->batch_size; d.T = c->seq_len; d.BT = d.B * d.T;
    d.patches = c->input == GPT2RT_INPUT_PATCHES;
    d.Bw = d.B; d.lookback = d.T; d.M = 1; d.patch_len = d.patch_stride = d.H = 0; d.affine = 0; d.seqhead = GPT2RT_HEAD_LM;
    if (d.patches) { /* the transformer sees B*M series of n_patches tokens; no vocabulary */
        d.M = c->n_channels; d.patch_len = c->patch_len; d.patch_stride = c->patch_stride; d.H = c->horizon;
        d.affine = c->revin_affine;
        d.B = d.Bw * d.M; d.T = gpt2rt__cfg_n_patches(c); d.BT = d.B * d.T;
        d.V = d.Vp = 0;
        if (c->head == GPT2RT_HEAD_NEXT_PATCH || c->head == GPT2RT_HEAD_PATCH_DECODE) d.seqhead = c->head;
    }
    d.TH = c->attn_mask == GPT2RT_MASK_PLACEHOLDERS ? gpt2rt__cfg_n_history(c) : d.T;
    /* NEXT_PATCH: every position but the last predicts the next patch's PL values */
    d.n_out = d.seqhead == GPT2RT_HEAD_NEXT_PATCH ? d.B * (d.T - 1) * d.patch_len : d.patches ? d.Bw * d.H * d.M : d.BT;
    d.n_threads = c->n_threads; /* CPU data parallel: each rank thread runs its share (at least one) */
    if (c->parallel == GPT2RT_PARALLEL_DATA && c->backend != GPT2RT_BACKEND_CUDA) d.n_threads = c->n_threads / c->n_devices > 1 ? c->n_threads / c->n_devices : 1;
    d.shards = c->parallel == GPT2RT_PARALLEL_DATA && c->shard_optimizer ? c->n_devices * c->world_size : 1;
    d.cuda = c->backend == GPT2RT_BACKEND_CUDA;
    d.act_bytes = c->precision == GPT2RT_PRECISION_FP32 ? 4 : 2;
    d.weight_bytes = d.act_bytes;
    d.frozen = c->frozen;
    d.recompute = (int)c->recompute;
    d.checkpoint_every = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    d.need_ln1 = !(c->frozen & GPT2RT_GROUP_ATTENTION);  /* ln_1 out: input of c_attn's dW */
    d.need_mlp_in = !(c->frozen & GPT2RT_GROUP_MLP);     /* ln_2 out, GELU out: c_fc's, c_proj's dW */
    int keep = c->recompute == GPT2RT_RECOMPUTE_NONE, full = c->recompute == GPT2RT_RECOMPUTE_FULL;
    d.keep_ln1 = full || (keep && d.need_ln1);
    d.keep_mlp_in = full || (keep && d.need_mlp_in);
    /* SELECTIVE recomputes into its own buffer; outputs merely not kept (frozen
       weights) pass through dbig in the forward, which is free until the backward */
    d.recompute_buffer = c->recompute == GPT2RT_RECOMPUTE_SELECTIVE && (d.need_ln1 || d.need_mlp_in);
    d.align = d.cuda ? 256 : 64;
    d.kv_batch = c->kv_batch; d.kv_len = c->kv_batch ? c->kv_len : 0;
    d.classifier_chunk = c->classifier_chunk && c->classifier_chunk < d.BT ? c->classifier_chunk : d.BT;
    d.infer = c->inference;
    d.bf16_weights = c->inference && c->inference_weights == GPT2RT_PRECISION_BF16;
    if (d.bf16_weights) d.weight_bytes = 2; /* activations stay fp32 (ab = 4); owned = 0, so no master copy */
    if (d.infer) { /* nothing trains: no parameter owns a gradient; the forward keeps its outputs in the
                      block it writes (no scratch for outputs not kept) */
        d.frozen = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM |
                   GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_HEAD;
        d.keep_ln1 = d.keep_mlp_in = 1;
        d.recompute_buffer = 0;
    }
    return d;
}

#endif /* GPT2RT__SRC_CONFIG_CHECKS_H */
