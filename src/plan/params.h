/* plan/params.h - 3. Layout and plan; 3.1 Parameter table
   may call: common/types.h */
#ifndef GPT2RT__SRC_PLAN_PARAMS_H
#define GPT2RT__SRC_PLAN_PARAMS_H
#include "../common/types.h"

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
/* patch models: GPT4TS's names; in_layer follows wpe, out_layer follows ln_f, then
   (revin_affine only) RevIN's affine under PatchTST's names */
static const gpt2rt__param_row gpt2rt__ts_rows[GPT2RT__N_TS] = {
    /* name                rows            cols            transpose decay group             init */
    {"in_layer.weight",    GPT2RT__DIM_C,  GPT2RT__DIM_PL, 0, 1, GPT2RT_GROUP_HEAD, GPT2RT__INIT_NORMAL},
    {"in_layer.bias",      GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
    {"out_layer.weight",   GPT2RT__DIM_H,  GPT2RT__DIM_TC, 0, 1, GPT2RT_GROUP_HEAD, GPT2RT__INIT_NORMAL},
    {"out_layer.bias",     GPT2RT__DIM_H,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
    {"revin.affine_weight", GPT2RT__DIM_M, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ONES},
    {"revin.affine_bias",  GPT2RT__DIM_M,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
};

static int64_t gpt2rt__dim_size(const gpt2rt__dims *d, gpt2rt__dim k) {
    switch (k) {
    case GPT2RT__DIM_1: return 1;
    case GPT2RT__DIM_C: return d->C;
    case GPT2RT__DIM_3C: return 3 * d->C;
    case GPT2RT__DIM_4C: return 4 * d->C;
    case GPT2RT__DIM_VP: return d->Vp;
    case GPT2RT__DIM_P: return d->P;
    case GPT2RT__DIM_PL: return d->patch_len;
    /* out_layer: the flatten head (H, T*C); aLLM4TS's sequence head (PL, C), one patch a position */
    case GPT2RT__DIM_H: return d->seqhead ? d->patch_len : d->H;
    case GPT2RT__DIM_TC: return d->seqhead ? d->C : d->T * d->C;
    case GPT2RT__DIM_M: return d->M;
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

/* The table in arena order: wte, wpe, the layers' rows layer by layer, ln_f; patch
   models: wpe, in_layer, the layers, ln_f, out_layer. Returns the number of tensors;
   fills tab when non-NULL; *n_floats gets the total, *n_train the trainable part. */
static int gpt2rt__param_table(const gpt2rt__dims *d, gpt2rt__tensor *tab, int64_t *n_floats, int64_t *n_train) {
    int n = 0;
    int64_t off = 0, goff = 0;
    for (int k = d->patches ? GPT2RT__WPE : 0; k < GPT2RT__LNFW; k++)
        gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    for (int k = 0; d->patches && k < GPT2RT__OUTW; k++) gpt2rt__param_add(d, &gpt2rt__ts_rows[k], -1, tab, &n, &off, &goff);
    for (int64_t l = 0; l < d->L; l++)
        for (int k = 0; k < GPT2RT__PER_LAYER; k++)
            gpt2rt__param_add(d, &gpt2rt__layer_rows[k], l, tab, &n, &off, &goff);
    for (int k = GPT2RT__LNFW; k < GPT2RT__N_MODEL; k++)
        gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    for (int k = GPT2RT__OUTW; d->patches && k < (d->affine ? GPT2RT__N_TS : GPT2RT__REVW); k++)
        gpt2rt__param_add(d, &gpt2rt__ts_rows[k], -1, tab, &n, &off, &goff);
    if (n_floats) *n_floats = off;
    if (n_train) *n_train = goff;
    return n;
}

/* the tensors before the first layer's: wte, wpe; patches: wpe, in_layer (2) */
static int64_t gpt2rt__layer0(const gpt2rt__dims *d) { return d->patches ? 1 + GPT2RT__OUTW : GPT2RT__LNFW; }

/* row i of the table (gpt2rt__param_table's order); *layer: its layer, -1 for a whole-model row */
static const gpt2rt__param_row *gpt2rt__param_row_of(const gpt2rt__dims *d, int64_t i, int64_t *layer) {
    int64_t head = gpt2rt__layer0(d), nl = d->L * GPT2RT__PER_LAYER;
    *layer = -1;
    if (i < head) return d->patches ? (i ? &gpt2rt__ts_rows[i - 1] : &gpt2rt__model_rows[GPT2RT__WPE]) : &gpt2rt__model_rows[i];
    if (i < head + nl) { *layer = (i - head) / GPT2RT__PER_LAYER; return &gpt2rt__layer_rows[(i - head) % GPT2RT__PER_LAYER]; }
    i -= head + nl;
    return i < 2 ? &gpt2rt__model_rows[GPT2RT__LNFW + i] : &gpt2rt__ts_rows[GPT2RT__OUTW + i - 2];
}

/* the walk of gpt2rt__span_params: one device's offsets (off, goff) and this device's */
typedef struct gpt2rt__span_walk { int64_t off, goff, loff, lgoff, aw, ag; } gpt2rt__span_walk;

/* row (of layer l, -1: whole-model) at index i: held and owned or not; tab: its entry */
static void gpt2rt__span_row(const gpt2rt__dims *d, const gpt2rt__span *s, gpt2rt__span_walk *w,
                             const gpt2rt__param_row *row, int64_t l, gpt2rt__tensor *tab) {
    int64_t size = gpt2rt__dim_size(d, row->rows) * gpt2rt__dim_size(d, row->cols), o0 = w->off, g0 = w->goff;
    int trained = !(d->frozen & row->group), held;
    w->off += size;
    w->goff += trained ? size : 0;
    if (l >= 0) held = l >= s->l0 && l < s->l1;
    else if (row == &gpt2rt__model_rows[GPT2RT__WTE]) held = s->first || s->last;
    else if (row == &gpt2rt__model_rows[GPT2RT__WPE] || row == &gpt2rt__ts_rows[GPT2RT__INW] ||
             row == &gpt2rt__ts_rows[GPT2RT__INB] || row == &gpt2rt__ts_rows[GPT2RT__REVW] ||
             row == &gpt2rt__ts_rows[GPT2RT__REVB]) held = s->first;
    else held = s->last; /* ln_f, out_layer */
    int owned = held && trained && (row != &gpt2rt__model_rows[GPT2RT__WTE] || s->last);
    int64_t lo = 0, lg = -1;
    if (held) {
        w->loff += ((o0 - w->loff) % w->aw + w->aw) % w->aw; /* the next offset congruent to one device's */
        lo = w->loff;
        w->loff += size;
    }
    if (owned) {
        w->lgoff += ((g0 - w->lgoff) % w->ag + w->ag) % w->ag;
        lg = w->lgoff;
        w->lgoff += size;
    }
    if (tab) { /* the row's entry (name, shape), then this device's offsets */
        int k = 0;
        int64_t o = 0, g = 0;
        gpt2rt__param_add(d, row, l, tab, &k, &o, &g);
        tab->off = lo;
        tab->goff = lg;
        if (!held) tab->rows = tab->cols = 0;
    }
}

/* The parameters of the device holding span s (layer split): its layers' tensors; wte
   on the first (weights only, for the embedding) and on the last (for the tied head,
   trained there: its gradient, moments and master live on the last); wpe, in_layer and
   RevIN's affine on the first; ln_f and out_layer on the last. tab (may be NULL) gets
   the whole table with this device's offsets: a tensor it does not hold has no rows
   (rows = cols = 0, off 0, goff -1), one it holds but does not train goff -1. Offsets
   follow the table's order, each congruent to the one-device offset modulo d->align
   bytes (a gap of less than that where the held tensors are not contiguous), so every
   tensor has the alignment it has on one device: the kernels and cuBLASLt take the same
   paths, and a stage computes bitwise what one device does. The whole span gives the
   one-device table itself. *n_floats, *n_train: the weights' and the gradients' floats.
   Without tab the span's layers go as one block (they are contiguous in both offsets),
   so the plan of a deep model costs no walk over every tensor. */
static void gpt2rt__span_params(const gpt2rt__dims *d, const gpt2rt__span *s, gpt2rt__tensor *tab, int64_t *n_floats,
                                int64_t *n_train) {
    int64_t head = gpt2rt__layer0(d), nl = d->L * GPT2RT__PER_LAYER, l;
    int64_t n = head + nl + 2 + (d->patches ? (d->affine ? 4 : 2) : 0);
    gpt2rt__span_walk w = {0, 0, 0, 0, d->align / d->weight_bytes, d->align / 4};
    for (int64_t i = 0; i < head; i++) {
        const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
        gpt2rt__span_row(d, s, &w, row, l, tab ? tab + i : NULL);
    }
    if (tab) {
        for (int64_t i = head; i < head + nl; i++) {
            const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
            gpt2rt__span_row(d, s, &w, row, l, tab + i);
        }
    } else { /* the layers [l0, l1) as one block */
        int64_t lsz = 0, lgsz = 0;
        for (int k = 0; k < GPT2RT__PER_LAYER; k++) {
            const gpt2rt__param_row *row = &gpt2rt__layer_rows[k];
            int64_t size = gpt2rt__dim_size(d, row->rows) * gpt2rt__dim_size(d, row->cols);
            lsz += size;
            lgsz += d->frozen & row->group ? 0 : size;
        }
        int64_t h = s->l1 - s->l0;
        w.off += s->l0 * lsz;
        w.goff += s->l0 * lgsz;
        if (h > 0) {
            w.loff += ((w.off - w.loff) % w.aw + w.aw) % w.aw;
            w.loff += h * lsz;
            if (lgsz) {
                w.lgoff += ((w.goff - w.lgoff) % w.ag + w.ag) % w.ag;
                w.lgoff += h * lgsz;
            }
        }
        w.off += (d->L - s->l0) * lsz;
        w.goff += (d->L - s->l0) * lgsz;
    }
    for (int64_t i = head + nl; i < n; i++) {
        const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
        gpt2rt__span_row(d, s, &w, row, l, tab ? tab + i : NULL);
    }
    if (n_floats) *n_floats = w.loff;
    if (n_train) *n_train = w.lgoff;
}

/* the table's tensors by name: a whole-model one (GPT2RT__WTE...; NULL: this model has
   none), a patch model's (GPT2RT__INW...), layer l's 12 */
static const gpt2rt__tensor *gpt2rt__model_tensor(const gpt2rt_ctx *ctx, int which) {
    int64_t after = gpt2rt__layer0(&ctx->d) + ctx->d.L * GPT2RT__PER_LAYER; /* ln_f */
    if (which >= GPT2RT__LNFW) return ctx->tensors + after + (which - GPT2RT__LNFW);
    if (!ctx->d.patches) return ctx->tensors + which;
    return which == GPT2RT__WPE ? ctx->tensors : NULL;
}

static const gpt2rt__tensor *gpt2rt__ts_tensor(const gpt2rt_ctx *ctx, int which) {
    int64_t after = gpt2rt__layer0(&ctx->d) + ctx->d.L * GPT2RT__PER_LAYER + 2; /* past ln_f */
    if (which >= GPT2RT__REVW && !ctx->d.affine) return NULL;
    return which < GPT2RT__OUTW ? ctx->tensors + 1 + which : ctx->tensors + after + (which - GPT2RT__OUTW);
}

static const gpt2rt__tensor *gpt2rt__layer_tensors(const gpt2rt_ctx *ctx, int64_t l) {
    return ctx->tensors + gpt2rt__layer0(&ctx->d) + l * GPT2RT__PER_LAYER;
}

static float *gpt2rt__tensor_at(const gpt2rt__tensor *t, float *base, int grads) {
    return !t ? NULL : !grads ? base + t->off : t->goff >= 0 ? base + t->goff : NULL;
}

/* the whole-model tensors; base: params (by off) or grads (by goff; NULL when frozen) */
static gpt2rt__model_params gpt2rt__mparams(const gpt2rt_ctx *ctx, float *base, int grads) {
    float *q[GPT2RT__N_MODEL], *ts[GPT2RT__N_TS] = {NULL, NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < GPT2RT__N_MODEL; i++) q[i] = gpt2rt__tensor_at(gpt2rt__model_tensor(ctx, i), base, grads);
    for (int i = 0; ctx->d.patches && i < GPT2RT__N_TS; i++) ts[i] = gpt2rt__tensor_at(gpt2rt__ts_tensor(ctx, i), base, grads);
    gpt2rt__model_params p;
    p.wte = q[GPT2RT__WTE]; p.wpe = q[GPT2RT__WPE];
    p.lnfw = q[GPT2RT__LNFW]; p.lnfb = q[GPT2RT__LNFB];
    p.inw = ts[GPT2RT__INW]; p.inb = ts[GPT2RT__INB];
    p.outw = ts[GPT2RT__OUTW]; p.outb = ts[GPT2RT__OUTB];
    p.revw = ts[GPT2RT__REVW]; p.revb = ts[GPT2RT__REVB];
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

#endif /* GPT2RT__SRC_PLAN_PARAMS_H */
