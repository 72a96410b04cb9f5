/* public/files.h - 11.5 Weights and training state files; 11.6 Parameters by name
   may call: what its includes name (common/, config/, plan/, formats/, backend/, context/, public/) */
#ifndef GPT2RT__SRC_PUBLIC_FILES_H
#define GPT2RT__SRC_PUBLIC_FILES_H
#include "../common/platform.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../config/caps.h"
#include "../plan/params.h"
#include "../plan/activations.h"
#include "../formats/safetensors_read.h"
#include "../formats/safetensors_write.h"
#include "../formats/hf.h"
#include "../backend/driver.h"
#include "../context/context.h"
#include "training.h"

/* ==== 11.5 Weights and training state files ==== */

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

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_WEIGHTS_LOAD, "gpt2rt_weights_load"));
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
    if (r == GPT2RT_OK) r = ctx->ex->state_in(ctx, NULL, NULL); /* CUDA: every rank's device */
    if (r == GPT2RT_OK) ctx->ex->sync(ctx, GPT2RT__SYNC_WEIGHTS);
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
    if (r != GPT2RT_OK && err && cap) { /* copied, cut at cap: snprintf("%s") here draws gcc 12's -Wformat-truncation
                                          once a caller with a short buffer inlines this */
        size_t n = strlen(tmp->error);
        if (n > cap - 1) n = cap - 1;
        memcpy(err, tmp->error, n);
        err[n] = 0;
    }
    gpt2rt__free(config, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r;
}

/* the shortest decimal text that reads back as x (a JSON number: x is finite) */
static const char *gpt2rt__float_text(char buf[32], float x) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, 32, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return buf;
}

GPT2RT_DEF gpt2rt_result gpt2rt_weights_save(gpt2rt_ctx *ctx, const char *dir) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_WEIGHTS_SAVE, "gpt2rt_weights_save"));
    if (!dir || strlen(dir) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_save: dir is NULL or too long");
    if (!gpt2rt__mkdir(dir)) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
    gpt2rt_result rc = ctx->ex->state_out(ctx, NULL, NULL, NULL);
    if (rc != GPT2RT_OK) return rc;
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
    int64_t c_vocab = ctx->cfg.vocab_size; /* d->V, except patch models (no vocabulary: the configured one) */
    const gpt2rt_config *cc = &ctx->cfg;
    char p_resid[32], p_attn[32], p_head[32]; /* the dropouts that ran; head_dropout (no GPT-2 key) when on */
    FILE *f = fopen(ctmp, "wb");
    /* a patch model is GPT-2's blocks and wpe (what GPT2Model holds, less wte) between
       in_layer and out_layer: the file says so, and how its inputs and outputs are shaped */
    int ok = f && (!d->patches || fprintf(f,
        "{\n  \"architectures\": [\"GPT2Model\"],\n"
        "  \"gpt2rt_note\": \"a gpt2rt patch model: GPT-2 blocks and wpe between in_layer and out_layer, no token "
        "embedding (vocab_size is unused)\",\n"
        "  \"gpt2rt_input\": \"patches\",\n  \"gpt2rt_head\": \"%s\",\n  \"gpt2rt_attn_mask\": \"%s\",\n"
        "  \"gpt2rt_lookback\": %d,\n  \"gpt2rt_patch_len\": %d,\n  \"gpt2rt_patch_stride\": %d,\n"
        "  \"gpt2rt_horizon\": %d,\n  \"gpt2rt_channels\": %d,\n  \"gpt2rt_revin_affine\": %d,\n",
        cc->head == GPT2RT_HEAD_NEXT_PATCH ? "next_patch" : cc->head == GPT2RT_HEAD_PATCH_DECODE ? "patch_decode"
                                                                                             : "regression",
        cc->attn_mask == GPT2RT_MASK_PLACEHOLDERS ? "placeholders" : "causal", cc->seq_len, cc->patch_len,
        cc->patch_stride, cc->horizon, cc->n_channels, cc->revin_affine) > 0) && fprintf(f,
        "%s  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
        "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
        "  \"resid_pdrop\": %s,\n  \"embd_pdrop\": %s,\n  \"attn_pdrop\": %s,\n%s%s%s"
        "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
        "  \"reorder_and_upcast_attn\": false,\n  \"tie_word_embeddings\": true,\n"
        "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n  \"torch_dtype\": \"float32\"\n}\n",
        d->patches ? "" : "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n", (long long)c_vocab, (long long)d->P, (long long)d->P, (long long)d->C, (long long)d->L, (long long)d->NH,
        gpt2rt__float_text(p_resid, cc->dropout), p_resid, gpt2rt__float_text(p_attn, cc->attn_dropout),
        cc->head_dropout > 0.0f ? "  \"gpt2rt_head_dropout\": " : "",
        cc->head_dropout > 0.0f ? gpt2rt__float_text(p_head, cc->head_dropout) : "",
        cc->head_dropout > 0.0f ? ",\n" : "", (long long)(c_vocab - 1), (long long)(c_vocab - 1)) > 0;
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
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_STATE_SAVE, "gpt2rt_state_save"));
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_state_save", "the AdamW moments (gpt2rt_weights_save "
                                      "writes the weights)"));
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
    char tv[8][32];
    snprintf(tv[6], 32, "%d", (int)ctx->cfg.head); snprintf(tv[7], 32, "%d", (int)ctx->cfg.attn_mask);
    snprintf(tv[0], 32, "%d", ctx->cfg.seq_len); snprintf(tv[1], 32, "%lld", (long long)d->patch_len);
    snprintf(tv[2], 32, "%lld", (long long)d->patch_stride); snprintf(tv[3], 32, "%lld", (long long)d->M);
    snprintf(tv[4], 32, "%lld", (long long)d->H); snprintf(tv[5], 32, "%d", d->affine);
    /* patch models add their shape (token states keep the keys they always had) */
    const char *meta[] = {"format", "gpt2rt-state-1", "n_layer", v[0], "n_head", v[1], "n_embd", v[2],
                          "vocab_size", v[3], "padded_vocab", v[4], "max_seq_len", v[5], "step", v[6], "rng", v[7],
                          "frozen", v[8], "seq_len", tv[0], "patch_len", tv[1], "patch_stride", tv[2],
                          "n_channels", tv[3], "horizon", tv[4], "revin_affine", tv[5], "head", tv[6],
                          "attn_mask", tv[7]};
    int n_meta = (int)(sizeof meta / sizeof meta[0]) - (d->patches ? 0 : 16);
    gpt2rt__st_out outs[3];
    const char *names[3] = {"params", "adam_m", "adam_v"};
    const float *srcs[3] = {ctx->params, ctx->m, ctx->v};
    float *mv = NULL; /* what the executor allocated for the moments (ZeRO-1, CUDA) */
    gpt2rt_result rc = ctx->ex->state_out(ctx, &srcs[1], &srcs[2], &mv);
    if (rc != GPT2RT_OK) return rc;
    for (int i = 0; i < 3; i++) {
        outs[i].name = names[i]; outs[i].src = srcs[i]; outs[i].rows = i ? ctx->n_train : ctx->n_params; outs[i].cols = 1;
        outs[i].transpose = 0; outs[i].ndim = 1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gpt2rt_result r = gpt2rt__st_write(ctx, tmp, path, outs, 3, meta, n_meta);
    gpt2rt__free(&ctx->cfg, mv, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK) return r;
    return gpt2rt__rename(ctx, tmp, path);
}

/* weights, moments, step and RNG in one safetensors file */
static gpt2rt_result gpt2rt__state_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    const char *fmt = gpt2rt__st_meta(&st, "format");
    /* frozen: the moments cover the trained parameters only (absent: nothing frozen) */
    /* patch models: their shape too (absent in a token state: 0); and their objective:
       head and attn_mask (NEXT_PATCH and PATCH_DECODE have the same tensors, so only these
       tell a stage-1 state from a stage-2 one; absent in states written before them: not
       checked) */
    const char *keys[15] = {"n_layer", "n_head", "n_embd", "vocab_size", "padded_vocab", "max_seq_len", "frozen",
                            "seq_len", "patch_len", "patch_stride", "n_channels", "horizon", "revin_affine",
                            "head", "attn_mask"};
    int64_t want[15] = {d->L, d->NH, d->C, d->V, d->Vp, d->P, (int64_t)ctx->cfg.frozen,
                        d->patches ? ctx->cfg.seq_len : 0, d->patch_len, d->patch_stride, d->patches ? d->M : 0, d->H, d->affine,
                        (int64_t)ctx->cfg.head, (int64_t)ctx->cfg.attn_mask};
    static const char *const enum_names[2][4] = {{" (LM)", " (REGRESSION)", " (NEXT_PATCH)", " (PATCH_DECODE)"},
                                                 {" (CAUSAL)", " (PLACEHOLDERS)", "", ""}};
    const gpt2rt__st_tensor *e[3] = {gpt2rt__st_find(&st, "params"), gpt2rt__st_find(&st, "adam_m"),
                                     gpt2rt__st_find(&st, "adam_v")};
    const char *step_s = gpt2rt__st_meta(&st, "step"), *rng_s = gpt2rt__st_meta(&st, "rng");
    if (!fmt || strcmp(fmt, "gpt2rt-state-1"))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a gpt2rt training state (metadata format is '%s', "
                         "expected 'gpt2rt-state-1')", what, fmt ? fmt : "(none)");
    /* the objective first: a state of the other aLLM4TS stage differs in its shape too
       (horizon, patch_stride), and the head is what says so */
    static const int order[15] = {13, 14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int k = 0; k < 15 && r == GPT2RT_OK; k++) {
        int i = order[k];
        const char *s = gpt2rt__st_meta(&st, keys[i]);
        if (i >= 13 && !s) continue;
        if (i >= 6 && !s) s = "0";
        long long got = -1; /* read below only when parsed; -1 names nothing */
        int named = i >= 13 && want[i] >= 0 && want[i] < (i == 13 ? 4 : 2);
        if (!gpt2rt__parse_int(s, 0, INT64_MAX, &got) || got != want[i])
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: the state has %s = %s%s, this context has %lld%s%s", what,
                             keys[i], s ? s : "(missing)",
                             named && got >= 0 && got < (i == 13 ? 4 : 2) ? enum_names[i - 13][got] : "",
                             (long long)want[i], named ? enum_names[i - 13][want[i]] : "",
                             i == 13 && got == GPT2RT_HEAD_NEXT_PATCH && want[i] == GPT2RT_HEAD_PATCH_DECODE
                             ? " (a stage-1 state starts stage 2 through the weights: gpt2rt_weights_save it from "
                               "the stage-1 context, gpt2rt_weights_load it here)" : "");
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
        /* every data-parallel rank's (ZeRO-1: each rank its shard; CUDA: on the devices) */
        r = gpt2rt__state_in(ctx, (const float *)(const void *)(st.data + e[1]->begin),
                           (const float *)(const void *)(st.data + e[2]->begin));
        ctx->step = step;
        ctx->rng = rng;
    }
    gpt2rt__st_release(ctx, &st);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_state_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_STATE_LOAD, "gpt2rt_state_load"));
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_state_load", "the AdamW moments (gpt2rt_weights_load "
                                      "reads the weights)"));
    if (!path) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_state_load: path is NULL");
    unsigned char *buf;
    size_t len;
    gpt2rt_result r = gpt2rt__read_file(ctx, path, &buf, &len);
    if (r != GPT2RT_OK) return r;
    r = gpt2rt__state_load_mem(ctx, buf, len, path);
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    if (r == GPT2RT_OK) ctx->ex->sync(ctx, GPT2RT__SYNC_STATE);
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
    const gpt2rt__tensor *t = NULL; /* set on success; NULL quiets gcc -O3 -Wmaybe-uninitialized */
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_read", name, count, dst, &t);
    if (r != GPT2RT_OK) return r;
    if (what == GPT2RT_PARAM_VALUE) return ctx->ex->param_read(ctx, t, what, dst);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_param_read", "gradients or moments to read"));
    int moment = what == GPT2RT_PARAM_ADAM_M || what == GPT2RT_PARAM_ADAM_V;
    if (!moment && what != GPT2RT_PARAM_GRAD)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: what = %d", (int)what);
    if (t->goff < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: '%s' is frozen (group 0x%x): it "
                            "has no gradient and no moments", name, t->group);
    /* ZeRO-1: each rank keeps the moments of its shard, and once summed the gradient's */
    if (gpt2rt__sharded(&ctx->d) && moment)
        GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_MOMENT_READ, "gpt2rt_param_read of a moment"));
    if (gpt2rt__sharded(&ctx->d) && !moment && ctx->dp_reduced)
        GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_GRAD_READ, "gpt2rt_param_read of a gradient"));
    return ctx->ex->param_read(ctx, t, what, dst);
}

GPT2RT_DEF gpt2rt_result gpt2rt_param_write(gpt2rt_ctx *ctx, const char *name, const float *src, int64_t count) {
    const gpt2rt__tensor *t = NULL; /* set on success; NULL quiets gcc -O3 -Wmaybe-uninitialized */
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_write", name, count, src, &t);
    if (r != GPT2RT_OK) return r;
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_PARAM_WRITE, "gpt2rt_param_write"));
    GPT2RT__TRY(gpt2rt__bf16_write_check(ctx, t, src));
    if ((r = ctx->ex->state_out(ctx, NULL, NULL, NULL)) != GPT2RT_OK) return r;
    if (ctx->params16) { /* inference_weights = BF16: rounded to nearest even */
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++)
                if (t->transpose || r0 < t->hf_rows)
                    gpt2rt__w_set(ctx, t->off + r0 * t->cols + c,
                                  t->transpose ? src[c * t->rows + r0] : src[r0 * t->cols + c]);
    } else if (t->transpose) {
        float *d = ctx->params + t->off;
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) d[r0 * t->cols + c] = src[c * t->rows + r0];
    } else memcpy(ctx->params + t->off, src, (size_t)count * sizeof(float));
    ctx->have_logits = ctx->have_loss = ctx->have_pred = 0;
    if ((r = ctx->ex->state_in(ctx, NULL, NULL)) != GPT2RT_OK) return r; /* CUDA: every tensor, simple, not fast */
    ctx->ex->sync(ctx, GPT2RT__SYNC_WRITE);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_PUBLIC_FILES_H */
