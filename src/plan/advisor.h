/* plan/advisor.h - 3.4 Advisor; the public call gpt2rt_fit
   may call: common/threads.h, plan/plan.h */
#ifndef GPT2RT__SRC_PLAN_ADVISOR_H
#define GPT2RT__SRC_PLAN_ADVISOR_H
#include "../common/threads.h"
#include "plan.h"

/* ==== 3.4 Advisor ==== */

/* one line per knob that differs between plans a and b, with what it saves */
static size_t gpt2rt__fit_explain_step(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *a,
                                       const gpt2rt_memory_plan *b, const char *what, const char *why) {
    int da = 0, db = 0;
    uint64_t pa = gpt2rt__plan_peak(a, &da), pb = gpt2rt__plan_peak(b, &db);
    GPT2RT__PUT("- %s: the fullest device needs %.2f %s -> %.2f %s (%s %.2f %s)%s%s\n",
                what, GPT2RT__SZ(pa), GPT2RT__SZ(pb), pb <= pa ? "saves" : "costs",
                GPT2RT__SZ(pb <= pa ? pa - pb : pb - pa), why ? ": " : "", why ? why : "");
    return n;
}

/* The micro-batches gpt2rt_fit tries when one replica runs g rows a step: divisors b
   of g with b and g/b in [1, 2^20]. Bytes and the predicted time both grow with b,
   so in each octave [2^k, 2^(k+1)) the smallest and the largest divisor stand for
   the others; keep (the config's own) is always tried. At most 43 candidates,
   ascending, found with at most 2^20 divisions whatever g is (added to *divisions):
   the advice costs milliseconds at the limits (batch 2^20, accumulation 2^20), not hours. */
static int gpt2rt__fit_batches(int64_t g, int64_t keep, int64_t out[43], int64_t *divisions) {
    const int64_t lim = (int64_t)1 << 20;
    int64_t first[21] = {0}, last[21] = {0}, lo = g > lim ? (g + lim - 1) / lim : 1, hi = g < lim ? g : lim;
    for (int64_t b = lo; b <= hi; b++) {
        ++*divisions;
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

/* the chunk the advisor tries (GPT2RT_FIT_CLASSIFIER): four KC slices of the matrix
   product, so wte's gradient stays bitwise the whole-batch path's */
#define GPT2RT__FIT_CHUNK 1024

/* What the search found: the fastest config that fits (the coarse model's ranking,
   fewer changes on a tie), or the smallest reachable one when nothing fits. */
typedef struct gpt2rt__fit_result {
    int found;
    gpt2rt_memory_plan best; /* found */
    int best_changes;        /* knobs best changes from the config */
    gpt2rt_config smallest;  /* not found */
    uint64_t small_peak;
    int64_t plans;     /* gpt2rt_plan calls of the search: at most 2 modes x 43 micro-batches x
                          4 recompute levels x 8 (shard, precision, classifier) = 2752; 344
                          with GPT2RT_FIT_DEFAULT, which leaves the last three alone */
    int64_t divisions; /* gpt2rt__fit_batches' trial divisions: at most 2^20 a mode */
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
    fr->plans = fr->divisions = 0;
    if ((allow & GPT2RT_FIT_PARALLEL) && nd > 1) {
        modes[0] = GPT2RT_PARALLEL_DATA; modes[1] = GPT2RT_PARALLEL_LAYER_SPLIT; n_modes = 2;
    }
    for (int mi = 0; mi < n_modes; mi++) {
        int64_t reps = modes[mi] == GPT2RT_PARALLEL_DATA ? nd : 1;
        if (global % reps) continue;
        int64_t g = global / reps; /* micro-batch x accumulation on one replica */
        int64_t bs[43];
        int nb = gpt2rt__fit_batches(g, c0->batch_size, bs, &fr->divisions);
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
                for (int pi = 0; pi < 8; pi++) {
                    gpt2rt_config t = *c0;
                    if (pi >= 4) { /* the chunked classifier, where it can hold fewer logits */
                        if (!(allow & GPT2RT_FIT_CLASSIFIER) || c0->classifier_chunk ||
                            t.input != GPT2RT_INPUT_TOKENS || modes[mi] == GPT2RT_PARALLEL_LAYER_SPLIT ||
                            b * t.seq_len <= GPT2RT__FIT_CHUNK) continue;
                        t.classifier_chunk = GPT2RT__FIT_CHUNK;
                    }
                    int si = pi / 2 % 2; /* 1: shard_optimizer toggled */
                    t.shard_optimizer = modes[mi] != GPT2RT_PARALLEL_DATA ? 0 : si ? !c0->shard_optimizer
                                      : c0->shard_optimizer;
                    if (si && (!(allow & GPT2RT_FIT_SHARD) || modes[mi] != GPT2RT_PARALLEL_DATA)) continue;
                    if (pi % 2 == 1) {
                        if (!(allow & GPT2RT_FIT_PRECISION) || t.backend != GPT2RT_BACKEND_CUDA ||
                            t.precision != GPT2RT_PRECISION_FP32) continue;
                        t.precision = GPT2RT_PRECISION_BF16; t.tf32 = 0;
                    }
                    t.parallel = modes[mi];
                    if (t.parallel != GPT2RT_PARALLEL_LAYER_SPLIT) /* explicit stages are the split's, kept there */
                        memset(t.stage_first_layer, 0, sizeof t.stage_first_layer);
                    t.batch_size = (int)b;
                    t.grad_accum = (int)(g / b);
                    if (allow & GPT2RT_FIT_RECOMPUTE) { t.recompute = rc; t.checkpoint_every = ck; }
                    fr->plans++;
                    if (gpt2rt_plan(&t, &cand) != GPT2RT_OK) continue;
                    uint64_t peak = gpt2rt__plan_peak(&cand, NULL);
                    if (peak < small_peak) { small_peak = peak; smallest = cand.config; }
                    if (peak > budget) continue;
                    const gpt2rt_config *k = &cand.config;
                    int changes = (k->parallel != c0->parallel) + (k->precision != c0->precision) +
                                  (k->shard_optimizer != c0->shard_optimizer) +
                                  (k->classifier_chunk != c0->classifier_chunk) +
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
    if (c0->inference) {
        gpt2rt_config u = *c0;
        gpt2rt_memory_plan up;
        u.inference = 0;
        if (gpt2rt_plan(&u, &up) == GPT2RT_OK)
            GPT2RT__PUT("- inference = 1 already saves %.2f %s against a training context of this shape: no "
                        "gradients, no AdamW moments, no master weights, two layers' activations (reused) instead "
                        "of %d, no backward scratch\n", GPT2RT__SZ(gpt2rt__plan_peak(&up, NULL) - peak0),
                        c0->n_layer);
    }
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

/* w, the config after one more knob, planned and explained against *cur (the last plan
   that stood), which it then becomes. gpt2rt_plan may refuse w on its own: a knob that
   only a later change makes valid (layer split under FULL recompute before checkpoint_every
   changes); that line says so and gives no figure, and *cur stays, so the next figure
   counts both changes and the figures still add up to the result. */
static size_t gpt2rt__fit_explain_next(char *buf, size_t cap, size_t n, gpt2rt_memory_plan *cur,
                                       const gpt2rt_config *w, const char *what, const char *why) {
    gpt2rt_memory_plan next;
    if (gpt2rt_plan(w, &next) != GPT2RT_OK) {
        GPT2RT__PUT("- %s: gpt2rt_plan refuses this step on its own (%s); its bytes are counted with the next "
                    "change, or in the result below\n", what, next.error);
        return n;
    }
    n = gpt2rt__fit_explain_step(buf, cap, n, cur, &next, what, why);
    *cur = next;
    return n;
}

/* Walk from base's config to best's one knob at a time, so each line's saving is its own. */
static size_t gpt2rt__fit_explain_changes(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *base,
                                          const gpt2rt_memory_plan *best) {
    const gpt2rt_config *c0 = &base->config;
    int nd = c0->n_devices;
    int64_t global = (int64_t)c0->batch_size * c0->grad_accum * (c0->parallel == GPT2RT_PARALLEL_DATA ? nd : 1);
    char r0[64];
    gpt2rt_memory_plan cur = *base;
    gpt2rt_config w = *c0;
    const gpt2rt_config *k = &best->config;
    char what[256], r1[64];
    if (k->parallel != w.parallel) {
        gpt2rt_parallel from = w.parallel;
        w.parallel = k->parallel;
        if (w.parallel != GPT2RT_PARALLEL_DATA) w.shard_optimizer = 0; /* a data-parallel knob */
        if (w.parallel != GPT2RT_PARALLEL_LAYER_SPLIT) memset(w.stage_first_layer, 0, sizeof w.stage_first_layer);
        int64_t g = global / (w.parallel == GPT2RT_PARALLEL_DATA ? nd : 1); /* keep the micro-batch if it divides */
        if (g % w.batch_size) w.batch_size = k->batch_size;
        w.grad_accum = (int)(g / w.batch_size);
        snprintf(what, sizeof what, "%s -> %s (micro-batch %d x accumulation %d, global batch %lld kept)",
                 gpt2rt__parallel_name(from), gpt2rt__parallel_name(w.parallel), w.batch_size, w.grad_accum,
                 (long long)global);
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, what, w.parallel == GPT2RT_PARALLEL_LAYER_SPLIT
            ? "data parallel keeps every weight, gradient and moment on every device; layer split keeps each "
              "layer's on one device"
            : "each device holds the whole model but only its share of the batch");
    }
    if (k->shard_optimizer != w.shard_optimizer) {
        w.shard_optimizer = k->shard_optimizer;
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, w.shard_optimizer ? "optimizer sharding (ZeRO-1) on"
                                     : "optimizer sharding (ZeRO-1) off", w.shard_optimizer
            ? "each device keeps the moments (and master weights) of its 1/n of the parameters and all-gathers "
              "the weights after each update"
            : "every device keeps every moment: no all-gather of the weights");
    }
    if (k->precision != w.precision) {
        w.precision = k->precision; w.tf32 = 0;
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, "precision fp32 -> bf16",
                                     "bf16 weights and activations, fp32 master weights and moments");
    }
    if (k->classifier_chunk != w.classifier_chunk) {
        w.classifier_chunk = k->classifier_chunk;
        snprintf(what, sizeof what, "classifier over %d tokens at a time", w.classifier_chunk);
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, what, "the LM head, the loss and their backward run "
                                     "chunk by chunk: the logits of one chunk are held, never all of them");
    }
    if (k->batch_size != w.batch_size || k->grad_accum != w.grad_accum) {
        int b0 = w.batch_size, a0 = w.grad_accum;
        w.batch_size = k->batch_size; w.grad_accum = k->grad_accum;
        snprintf(what, sizeof what, "micro-batch %d x accumulation %d -> %d x %d (global batch %lld kept)", b0, a0,
                 w.batch_size, w.grad_accum, (long long)global);
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, what, "activations and logits scale with the micro-batch");
    }
    if (k->recompute != w.recompute || k->checkpoint_every != w.checkpoint_every) {
        gpt2rt_config from = w;
        w.recompute = k->recompute; w.checkpoint_every = k->checkpoint_every;
        snprintf(what, sizeof what, "recompute %s -> %s", gpt2rt__recompute_name(&from, r0, sizeof r0),
                 gpt2rt__recompute_name(&w, r1, sizeof r1));
        n = gpt2rt__fit_explain_next(buf, cap, n, &cur, &w, what, w.recompute == GPT2RT_RECOMPUTE_SELECTIVE
            ? "LayerNorm and GELU outputs are recomputed in the backward"
            : "only layer inputs are kept; each layer's forward runs again in the backward");
    }
    return n;
}

GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget, unsigned allow, gpt2rt_config *out,
                                    char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = 0;
    if (!config || !out) {
        GPT2RT__PUT("gpt2rt_fit: %s is NULL\n", !config ? "config" : "out");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
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
        GPT2RT__PUT("result fits: %.2f %s of %.2f %s on the fullest device (%d)\n", GPT2RT__SZ(pk),
                    GPT2RT__SZ(budget), bat);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_PLAN_ADVISOR_H */
