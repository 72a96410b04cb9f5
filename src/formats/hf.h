/* formats/hf.h - 4.3 Hugging Face weights and config.json
   may call: formats/safetensors_write.h and what it includes */
#ifndef GPT2RT__SRC_FORMATS_HF_H
#define GPT2RT__SRC_FORMATS_HF_H
#include "safetensors_write.h"

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
        int gpt2 = !strncmp(t->name, "transformer.", plen);
        if (!e && gpt2) e = gpt2rt__st_find(&st, t->name + plen); /* the original GPT-2 files have no prefix */
        src[i] = e;
        int64_t want[2];
        gpt2rt__hf_shape(t, want);
        if (!e && !gpt2) continue; /* patches: a GPT-2 checkpoint has no in_layer/out_layer; they stay */
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
            /* NaN or inf in a weight would make every step after the load non-finite; bf16
               weights (inference_weights) as stored (gpt2rt__bf16_finite) */
            const unsigned char *p = st.data + e->begin;
            for (int64_t j = 0; ok && j < want[0] * want[1]; j++) {
                float x = gpt2rt__st_get(p, e->dtype, j);
                if (!isfinite(x)) {
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld (row %lld, column %lld) is "
                                     "%g: weights must be finite", what, e->name, (long long)j,
                                     (long long)(j / want[1]), (long long)(j % want[1]), (double)x);
                    ok = 0;
                } else if (ctx->params16 &&
                           (r = gpt2rt__bf16_finite(ctx, GPT2RT_ERR_FORMAT, what, e->name, x, j, want[1])) != GPT2RT_OK) {
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
            if (gpt2rt__tensor_named(ctx, full) || gpt2rt__tensor_named(ctx, nm) ||
                gpt2rt__ends_with(base, ".attn.bias") ||
                gpt2rt__ends_with(base, ".attn.masked_bias") || !strcmp(base, "lm_head.weight") ||
                !strcmp(nm, "lm_head.weight") || (ctx->d.patches && !strcmp(base, "wte.weight")))
                continue; /* ours, a causal mask buffer, the tied head, or a patch model's unused wte */
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
            if (!e) continue; /* kept as it is (patches' in_layer/out_layer) */
            const unsigned char *p = st.data + e->begin;
            int64_t o = t->off; /* gpt2rt__w_set: fp32, or bf16 rounded to nearest even (inference_weights) */
            if (t->transpose) {
                for (int64_t row = 0; row < t->rows; row++)
                    for (int64_t c = 0; c < t->cols; c++)
                        gpt2rt__w_set(ctx, o + row * t->cols + c, gpt2rt__st_get(p, e->dtype, c * t->rows + row));
            } else {
                int64_t n = t->hf_rows * t->cols;
                for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, o + j, gpt2rt__st_get(p, e->dtype, j));
                for (int64_t j = n; j < t->rows * t->cols; j++) gpt2rt__w_set(ctx, o + j, 0.0f);
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

#endif /* GPT2RT__SRC_FORMATS_HF_H */
