/* formats/hf.h - 4.3 Hugging Face weights and config.json
   may call: what its includes name (common/, plan/, formats/) */
#ifndef GPT2RT__SRC_FORMATS_HF_H
#define GPT2RT__SRC_FORMATS_HF_H
#include "../common/platform.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../plan/activations.h"
#include "safetensors_read.h"
#include "safetensors_write.h"

/* ==== 4.3 Hugging Face weights and config.json ==== */

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

/* x, element j of a tensor whose Hugging Face shape has `cols` columns, stored as bf16
   weights (inference_weights): a finite float from 0x7F7F8000 (3.3961e38) up rounds to
   inf. GPT2RT_OK, or the refusal with code, naming the tensor and the element. */
static gpt2rt_result gpt2rt__bf16_finite(gpt2rt_ctx *ctx, gpt2rt_result code, const char *what, const char *name,
                                         float x, int64_t j, int64_t cols) {
    if (!isfinite(x) || isfinite(gpt2rt__bf16_widen(gpt2rt__bf16_round(x)))) return GPT2RT_OK;
    return gpt2rt__fail(ctx, code, "%s: tensor '%s' element %lld (row %lld, column %lld) is %g, which rounds to %s in "
                        "bf16 (this context's inference_weights; the largest bf16 is 3.3895e38): weights must be "
                        "finite", what, name, (long long)j, (long long)(j / cols), (long long)(j % cols), (double)x,
                        x > 0 ? "inf" : "-inf");
}

/* gpt2rt_param_write's src (t's Hugging Face layout) into a context of bf16 weights:
   refused, before anything is written, if an element rounds to inf; fp32 weights take it */
static gpt2rt_result gpt2rt__bf16_write_check(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, const float *src) {
    if (!ctx->params16) return GPT2RT_OK;
    int64_t shape[2];
    gpt2rt__hf_shape(t, shape);
    gpt2rt_result r = GPT2RT_OK;
    for (int64_t j = 0; j < shape[0] * shape[1] && r == GPT2RT_OK; j++)
        r = gpt2rt__bf16_finite(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_write", t->name, src[j], j, shape[1]);
    return r;
}

/* dst (the Hugging Face layout of t, hf_rows * cols) = s (t's internal layout) * k */
static void gpt2rt__param_out(const gpt2rt__tensor *t, const float *s, float k, float *dst) {
    int64_t count = t->hf_rows * t->cols; /* wte: the padded rows stay behind */
    if (t->transpose) {
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) dst[c * t->rows + r0] = s[r0 * t->cols + c] * k;
    } else if (k != 1.0f) {
        for (int64_t i = 0; i < count; i++) dst[i] = s[i] * k;
    } else memcpy(dst, s, (size_t)count * sizeof(float));
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

/* ---- config.json: the model of a Hugging Face GPT-2 directory ----
   Every key is read, checked or refused by name: a key that would give another model
   than the one gpt2rt runs is refused with its value, never dropped.
   key                                  what gpt2rt_config_load does
   n_layer n_head n_embd vocab_size     read (integers in [1, 2^31))
   n_positions (n_ctx, older files)     read into max_seq_len; both given: must agree; null: the other
   n_inner                              null or 4 * n_embd (the runtime's MLP width), else refused
   activation_function                  gelu_new or gelu_pytorch_tanh (the tanh GELU it runs), else refused
   layer_norm_epsilon                   1e-5 (its LayerNorms' epsilon, fixed), else refused
   resid_pdrop, embd_pdrop              read into config.dropout (one rate for both: different values refused)
   attn_pdrop                           read into config.attn_dropout; pdrops must be in [0, 1)
   scale_attn_weights                   true (scores scaled by 1/sqrt(head size)), false refused
   scale_attn_by_inverse_layer_idx      false, true refused
   add_cross_attention                  false, true refused (no encoder)
   tie_word_embeddings                  true (the head is wte), false refused
   reorder_and_upcast_attn              either: it changes only fp16 rounding; gpt2rt's scores and softmax are fp32
   model_type                           "gpt2", else refused
   pruned_heads                         {} (none), else refused
   n_special (older files)              0, else refused
   initializer_range, use_cache, bos_token_id, eos_token_id, summary_*, predict_special_tokens and
   PretrainedConfig's keys (architectures, torch_dtype, transformers_version, task_specific_params,
   generation defaults, labels, ...)    accepted: no effect on the model's math
   gpt2rt_* (weights_save of a patch    gpt2rt_head_dropout read into config.head_dropout; the others
   model)                               describe the patch model's input and head, which the caller sets
   any other key                        refused, named (it may change the model; remove it if it does not)
   A key that is absent leaves its field as it is (transformers' defaults differ for the
   pdrops: 0.1). */

static const char *const gpt2rt__config_accepted[] = {
    /* GPT2Config, no effect on the math */
    "initializer_range", "use_cache", "bos_token_id", "eos_token_id", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "predict_special_tokens",
    /* PretrainedConfig and generation defaults that transformers writes */
    "architectures", "torch_dtype", "dtype", "transformers_version", "task_specific_params", "_name_or_path",
    "_commit_hash", "_attn_implementation", "_attn_implementation_autoset", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size", "tie_encoder_decoder", "max_length",
    "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature",
    "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "finetuning_task", "id2label",
    "label2id", "num_labels", "tokenizer_class", "prefix", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "problem_type", "gradient_checkpointing", "output_past",
    /* gpt2rt_weights_save's line for a reader (the patch model's keys are read below) */
    "gpt2rt_note"};

/* gpt2rt_weights_save's description of a patch model: names of the enum values it
   writes, and the integer keys with the config field each sets */
static const char *gpt2rt__config_heads[4] = {"lm", "regression", "next_patch", "patch_decode"};
static const char *gpt2rt__config_masks[2] = {"causal", "placeholders"};
static const char *gpt2rt__config_patch_keys[6] = {"gpt2rt_lookback", "gpt2rt_patch_len", "gpt2rt_patch_stride",
                                                   "gpt2rt_horizon", "gpt2rt_channels", "gpt2rt_revin_affine"};

/* *v = the index of the string value among names[n], or a refusal naming them */
static gpt2rt_result gpt2rt__config_enum(gpt2rt__json *j, const char *const *names, int n, int *v) {
    const char *s;
    gpt2rt_result r = gpt2rt__json_string(j, &s);
    for (*v = 0; r == GPT2RT_OK && *v < n; (*v)++)
        if (!strcmp(s, names[*v])) return GPT2RT_OK;
    if (r != GPT2RT_OK) return r;
    return gpt2rt__json_failf(j, "\"%.40s\" is not one of \"%s\", \"%s\"%s%s%s%s", s, names[0], names[1],
                              n > 2 ? ", \"" : "", n > 2 ? names[2] : "", n > 3 ? "\", \"" : "", n > 3 ? names[3] : "");
}

/* a bool key that must have one value */
static gpt2rt_result gpt2rt__config_bool(gpt2rt__json *j, int want, const char *why) {
    int v = 0;
    gpt2rt_result r = gpt2rt__json_bool(j, &v);
    if (r != GPT2RT_OK || v == want) return r;
    return gpt2rt__json_failf(j, "%s is not supported: %s", v ? "true" : "false", why);
}

/* buf: len bytes followed by a NUL (gpt2rt__read_file), unescaped in place; *c changes
   only when the whole file is accepted */
static gpt2rt_result gpt2rt__config_parse_mem(gpt2rt_ctx *ctx, char *buf, size_t len, const char *what,
                                              gpt2rt_config *c) {
    static const char *keys[6] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx"};
    static const char *pkeys[4] = {"resid_pdrop", "embd_pdrop", "attn_pdrop", "gpt2rt_head_dropout"};
    int64_t val[6] = {-1, -1, -1, -1, -1, -1}, n_inner = -1;
    /* a patch model (gpt2rt_weights_save): input, head, mask, then the integers of
       gpt2rt__config_patch_keys; -1: not given */
    int patches = -1, head = -1, mask = -1;
    int64_t pval[6] = {-1, -1, -1, -1, -1, -1};
    double pdrop[4] = {-1, -1, -1, -1};
    const char **seen = NULL;
    int n_seen = 0, cap_seen = 0;
    gpt2rt__json j;
    gpt2rt__json_init(&j, buf, len, ctx, NULL, 0, what, "config.json");
    gpt2rt_result r;
    const char *key, *s;
    if ((r = gpt2rt__json_object_begin(&j)) != GPT2RT_OK) return r;
    while (gpt2rt__json_object_next(&j, &key, &r)) {
        if (!gpt2rt__grow(ctx, (void **)&seen, &cap_seen, n_seen, sizeof(char *))) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: a table of %d keys", what, n_seen);
            break;
        }
        seen[n_seen++] = key;
        int k = 0, p = 0;
        size_t a = 0;
        while (k < 6 && strcmp(key, keys[k])) k++;
        while (p < 4 && strcmp(key, pkeys[p])) p++;
        if (k < 6) {
            if (k >= 4 && gpt2rt__json_null(&j)) continue; /* null lengths: the other one rules */
            r = gpt2rt__json_int(&j, 1, INT32_MAX, &val[k]);
        } else if (p < 4) {
            if ((r = gpt2rt__json_number(&j, &pdrop[p])) == GPT2RT_OK && !(pdrop[p] >= 0 && pdrop[p] < 1))
                r = gpt2rt__json_failf(&j, "%g is outside [0, 1) (a dropout probability)", pdrop[p]);
        } else if (!strcmp(key, "n_inner")) {
            if (!gpt2rt__json_null(&j)) r = gpt2rt__json_int(&j, 1, INT32_MAX, &n_inner);
        } else if (!strcmp(key, "activation_function")) {
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && strcmp(s, "gelu_new") && strcmp(s, "gelu_pytorch_tanh"))
                r = gpt2rt__json_failf(&j, "\"%.40s\" is not supported: gpt2rt's MLP runs the tanh GELU (\"gelu_new\", "
                                       "the same as \"gelu_pytorch_tanh\"), so this model would compute something "
                                       "else", s);
        } else if (!strcmp(key, "layer_norm_epsilon")) {
            double eps = 0;
            /* 1e-5 as written, or as a float32 1e-5 printed in full (relative 6e-8 off) */
            if ((r = gpt2rt__json_number(&j, &eps)) == GPT2RT_OK && fabs(eps - 1e-5) > 1e-5 * 1e-6)
                r = gpt2rt__json_failf(&j, "%g is not supported: gpt2rt's LayerNorm epsilon is 1e-5 (fixed), so this "
                                       "model would compute something else", eps);
        } else if (!strcmp(key, "scale_attn_weights")) {
            r = gpt2rt__config_bool(&j, 1, "gpt2rt always scales the attention scores by 1/sqrt(head size)");
        } else if (!strcmp(key, "scale_attn_by_inverse_layer_idx")) {
            r = gpt2rt__config_bool(&j, 0, "gpt2rt does not scale the scores by 1/(layer index + 1)");
        } else if (!strcmp(key, "add_cross_attention")) {
            r = gpt2rt__config_bool(&j, 0, "gpt2rt's blocks have no cross-attention (no encoder)");
        } else if (!strcmp(key, "tie_word_embeddings")) {
            r = gpt2rt__config_bool(&j, 1, "gpt2rt's LM head is the token embedding (wte); a separate "
                                    "lm_head.weight would not be read");
        } else if (!strcmp(key, "reorder_and_upcast_attn")) {
            int v = 0;
            r = gpt2rt__json_bool(&j, &v);
        } else if (!strcmp(key, "model_type")) {
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && strcmp(s, "gpt2"))
                r = gpt2rt__json_failf(&j, "\"%.40s\" is not supported: gpt2rt runs GPT-2 (\"gpt2\")", s);
        } else if (!strcmp(key, "pruned_heads")) {
            const char *layer;
            if ((r = gpt2rt__json_object_begin(&j)) == GPT2RT_OK && gpt2rt__json_object_next(&j, &layer, &r)) {
                j.key = key;
                r = gpt2rt__json_failf(&j, "layer %.20s has heads removed: gpt2rt's layers have all n_head heads", layer);
            }
        } else if (!strcmp(key, "gpt2rt_input")) {
            static const char *inputs[2] = {"tokens", "patches"};
            r = gpt2rt__config_enum(&j, inputs, 2, &patches);
        } else if (!strcmp(key, "gpt2rt_head")) {
            r = gpt2rt__config_enum(&j, gpt2rt__config_heads, 4, &head);
        } else if (!strcmp(key, "gpt2rt_attn_mask")) {
            r = gpt2rt__config_enum(&j, gpt2rt__config_masks, 2, &mask);
        } else if (!strncmp(key, "gpt2rt_", 7) && strcmp(key, "gpt2rt_note") && strcmp(key, "gpt2rt_head_dropout")) {
            int q = 0;
            while (q < 6 && strcmp(key, gpt2rt__config_patch_keys[q])) q++;
            if (q == 6) {
                j.key = NULL;
                r = gpt2rt__json_failf(&j, "\"%.60s\" is not a key gpt2rt_weights_save writes: gpt2rt refuses a key "
                                       "it does not know rather than drop it", key);
            } else r = gpt2rt__json_int(&j, q == 5 || q == 3 ? 0 : 1, q == 5 ? 1 : INT32_MAX, &pval[q]);
        } else if (!strcmp(key, "n_special")) {
            int64_t v = 0;
            r = gpt2rt__json_int(&j, 0, 0, &v);
        } else {
            while (a < sizeof gpt2rt__config_accepted / sizeof gpt2rt__config_accepted[0] &&
                   strcmp(key, gpt2rt__config_accepted[a]))
                a++;
            if (a == sizeof gpt2rt__config_accepted / sizeof gpt2rt__config_accepted[0]) {
                j.key = NULL;
                r = gpt2rt__json_failf(&j, "\"%.60s\" is not a key of GPT-2's config (transformers' GPT2Config or "
                                       "PretrainedConfig): gpt2rt refuses a key it does not know rather than drop "
                                       "it; remove it if it does not change the model", key);
            } else r = gpt2rt__json_skip(&j);
        }
        if (r != GPT2RT_OK) break;
    }
    if (r == GPT2RT_OK) r = gpt2rt__json_end(&j);
    if (r == GPT2RT_OK && n_seen > 1) { /* duplicates: sorted neighbours */
        qsort((void *)seen, (size_t)n_seen, sizeof(char *), gpt2rt__cmp_names);
        for (int i = 1; i < n_seen && r == GPT2RT_OK; i++)
            if (!strcmp(seen[i - 1], seen[i]))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%.60s\" appears twice", what, seen[i]);
    }
    gpt2rt__free(&ctx->cfg, (void *)seen, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK) return r;
    if (val[4] < 0) val[4] = val[5]; /* older files give only n_ctx */
    for (int k = 0; k < 5; k++)
        if (val[k] < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" is missing (a GPT-2 config.json has n_layer, "
                                "n_head, n_embd, vocab_size and n_positions)", what, keys[k]);
    if (val[5] >= 0 && val[5] != val[4])
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: n_positions = %lld but n_ctx = %lld", what,
                            (long long)val[4], (long long)val[5]);
    if (n_inner >= 0 && n_inner != 4 * val[2])
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"n_inner\" = %lld is not supported: gpt2rt's MLP is 4 * n_embd "
                            "= %lld wide (n_inner null or %lld)", what, (long long)n_inner, (long long)(4 * val[2]),
                            (long long)(4 * val[2]));
    if (pdrop[0] >= 0 && pdrop[1] >= 0 && pdrop[0] != pdrop[1])
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"resid_pdrop\" = %g but \"embd_pdrop\" = %g: gpt2rt applies "
                            "one rate, config.dropout, to the embeddings and the residual branches; make them equal "
                            "in config.json (config.dropout and config.attn_dropout can be set after "
                            "gpt2rt_config_load)", what, pdrop[0], pdrop[1]);
    if (patches != 1 && (head >= 0 || mask >= 0 || pval[0] >= 0 || pval[1] >= 0 || pval[2] >= 0 || pval[3] >= 0 ||
                         pval[4] >= 0 || pval[5] >= 0))
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: a patch model's keys (gpt2rt_head, gpt2rt_lookback, ...) "
                            "without \"gpt2rt_input\": \"patches\"", what);
    if (patches == 1)
        for (int q = 0; q < 6; q++)
            if (pval[q] < 0 || head < 0 || mask < 0)
                return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: a patch model (\"gpt2rt_input\": \"patches\") needs "
                                    "\"%s\" (gpt2rt_weights_save writes gpt2rt_head, gpt2rt_attn_mask, gpt2rt_lookback, "
                                    "gpt2rt_patch_len, gpt2rt_patch_stride, gpt2rt_horizon, gpt2rt_channels and "
                                    "gpt2rt_revin_affine)", what,
                                    head < 0 ? "gpt2rt_head" : mask < 0 ? "gpt2rt_attn_mask" : gpt2rt__config_patch_keys[q]);
    c->n_layer = (int)val[0];
    c->n_head = (int)val[1];
    c->n_embd = (int)val[2];
    c->vocab_size = (int)val[3];
    c->max_seq_len = (int)val[4];
    if (patches >= 0) c->input = patches ? GPT2RT_INPUT_PATCHES : GPT2RT_INPUT_TOKENS;
    if (patches == 1) { /* the saved model's shape; the checks of gpt2rt_create judge it */
        c->head = (gpt2rt_head)head;
        c->attn_mask = (gpt2rt_attn_mask)mask;
        c->seq_len = (int)pval[0];
        c->patch_len = (int)pval[1];
        c->patch_stride = (int)pval[2];
        c->horizon = (int)pval[3];
        c->n_channels = (int)pval[4];
        c->revin_affine = (int)pval[5];
    }
    if (pdrop[0] >= 0 || pdrop[1] >= 0) c->dropout = (float)(pdrop[0] >= 0 ? pdrop[0] : pdrop[1]);
    if (pdrop[2] >= 0) c->attn_dropout = (float)pdrop[2];
    if (pdrop[3] >= 0) c->head_dropout = (float)pdrop[3];
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_FORMATS_HF_H */
