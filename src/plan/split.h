/* plan/split.h - 3.2 Activations and arenas: the layer-split planner (stages, spans)
   may call: common/types.h, config/checks.h, plan/activations.h */
#ifndef GPT2RT__SRC_PLAN_SPLIT_H
#define GPT2RT__SRC_PLAN_SPLIT_H
#include "../common/types.h"
#include "../config/checks.h"
#include "activations.h"

/* The planner's layer split works in checkpoint segments (checkpoint_every layers
   under FULL recompute, else 1): a stage [a, b) in segments is layers [a ck, min(b ck, L)).
   Its cost is what gpt2rt_plan reports for it: the device's planned total. */
typedef struct gpt2rt__split {
    const gpt2rt__dims *d;
    int64_t n, S, checkpoint_every, L, m; /* m: activation sets a CUDA stage holds (grad_accum, 3.3) */
} gpt2rt__split;

static uint64_t gpt2rt__split_cost(const gpt2rt__split *p, int64_t s, int64_t a, int64_t b) {
    gpt2rt__span sp;
    uint64_t bytes[GPT2RT_MEM_COUNT], t = 0;
    sp.l0 = a * p->checkpoint_every; sp.l1 = b * p->checkpoint_every < p->L ? b * p->checkpoint_every : p->L;
    sp.first = s == 0; sp.last = s == p->n - 1;
    gpt2rt__layout(p->d, &sp, bytes, NULL); /* an explicit span: no way back into the planner */
    /* past 2^64 the cost saturates, so no split is chosen for a wrapped (small) cost;
       gpt2rt_plan then refuses what the chosen split holds */
    if (bytes[GPT2RT_MEM_ACTIVATIONS] > UINT64_MAX / (uint64_t)p->m) return UINT64_MAX;
    bytes[GPT2RT_MEM_ACTIVATIONS] *= (uint64_t)p->m;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        if (bytes[i] > UINT64_MAX - t) return UINT64_MAX;
        t += bytes[i];
    }
    return t;
}

/* Stage s starting at segment a: the last end in (a, hi] within cap M (a when none).
   A stage's cost grows with its length, so a bisection finds it. */
static int64_t gpt2rt__split_reach(const gpt2rt__split *p, int64_t s, int64_t a, int64_t hi, uint64_t M) {
    int64_t lo = a; /* lo fits (or is a), hi + 1 does not */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (gpt2rt__split_cost(p, s, a, mid) <= M) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Stage s ending at segment b: the first start in [lo, b) within cap M (b when none). */
static int64_t gpt2rt__split_back(const gpt2rt__split *p, int64_t s, int64_t b, int64_t lo, uint64_t M) {
    int64_t hi = b;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (gpt2rt__split_cost(p, s, mid, b) <= M) hi = mid; else lo = mid + 1;
    }
    return hi;
}

/* Can n non-empty stages, each within M, cover the segments? Greedy: each stage as long
   as M allows, leaving a segment for each later stage (optimal as costs grow with length). */
static int gpt2rt__split_fits(const gpt2rt__split *p, uint64_t M) {
    int64_t a = 0;
    for (int64_t s = 0; s < p->n - 1; s++) {
        int64_t b = gpt2rt__split_reach(p, s, a, p->S - (p->n - 1 - s), M);
        if (b == a) return 0;
        a = b;
    }
    return gpt2rt__split_cost(p, p->n - 1, a, p->S) <= M;
}

/* Layer split: the first layers of the stages, b[0] = 0 .. b[n_devices] = n_layer, as the
   config gives them or, all 0 there, the planner's: the split of the checkpoint segments
   whose largest per-device planned total is least (so each stage starts at a checkpoint).
   M*, that least largest total, by bisection on the cap with the greedy above; then each
   boundary as near the even split (earlier stages taking the remainder) as M* allows:
   stage s-1 within M* bounds it above, the rest fitting in M* (a greedy from the end)
   below. The even split comes back whenever it is as good. O(n log S) layouts a probe, no
   state kept: the same config always gives the same split. */
static void gpt2rt__stage_bounds(const gpt2rt_config *c, int64_t b[GPT2RT_MAX_DEVICES + 1]) {
    int64_t n = c->n_devices, L = c->n_layer;
    b[0] = 0; b[n] = L;
    if (c->stage_first_layer[1]) {
        for (int64_t s = 1; s < n; s++) b[s] = c->stage_first_layer[s];
        return;
    }
    gpt2rt__dims d = gpt2rt__dims_of(c);
    gpt2rt__split p;
    p.d = &d; p.n = n; p.L = L;
    p.m = d.cuda ? c->grad_accum : 1; /* CPU stages share the host: the spans' own layouts weigh them */
    p.checkpoint_every = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    p.S = (L + p.checkpoint_every - 1) / p.checkpoint_every;
    int64_t e[GPT2RT_MAX_DEVICES + 1], q = p.S / n, r = p.S % n, lo_b[GPT2RT_MAX_DEVICES + 1];
    for (int64_t s = 0; s <= n; s++) e[s] = s * q + (s < r ? s : r);
    if (n < 2 || p.S < n) { /* nothing to choose (the config check refuses too few segments) */
        for (int64_t s = 1; s < n; s++) b[s] = e[s] * p.checkpoint_every < L ? e[s] * p.checkpoint_every : L;
        return;
    }
    /* M* in (lo, hi]: the even split fits hi; the first and last stages hold a segment at least */
    uint64_t hi = 0, lo = gpt2rt__split_cost(&p, 0, 0, 1), last = gpt2rt__split_cost(&p, n - 1, p.S - 1, p.S);
    lo = (lo > last ? lo : last) - 1;
    for (int64_t s = 0; s < n; s++) {
        uint64_t t = gpt2rt__split_cost(&p, s, e[s], e[s + 1]);
        if (t > hi) hi = t;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (gpt2rt__split_fits(&p, mid)) hi = mid; else lo = mid;
    }
    lo_b[n] = p.S; /* lo_b[s]: the earliest start from which stages s..n-1 fit in hi */
    for (int64_t s = n - 1; s >= 1; s--) lo_b[s] = gpt2rt__split_back(&p, s, lo_b[s + 1], s, hi);
    int64_t prev = 0;
    for (int64_t s = 1; s < n; s++) {
        int64_t lower = lo_b[s] > prev + 1 ? lo_b[s] : prev + 1;
        int64_t upper = gpt2rt__split_reach(&p, s - 1, prev, p.S - (n - s), hi);
        int64_t x = e[s] < lower ? lower : e[s] > upper ? upper : e[s];
        b[s] = x * p.checkpoint_every < L ? x * p.checkpoint_every : L;
        prev = x;
    }
}

/* the span of every device (one split computed for all); parallel != LAYER_SPLIT: the whole model */
static void gpt2rt__spans_of(const gpt2rt_config *c, gpt2rt__span sp[GPT2RT_MAX_DEVICES]) {
    int64_t b[GPT2RT_MAX_DEVICES + 1];
    int split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    if (split) gpt2rt__stage_bounds(c, b);
    for (int dev = 0; dev < GPT2RT_MAX_DEVICES; dev++) {
        sp[dev].l0 = 0; sp[dev].l1 = c->n_layer; sp[dev].first = sp[dev].last = 1;
        if (split && dev < c->n_devices) {
            sp[dev].l0 = b[dev];
            sp[dev].l1 = b[dev + 1];
            sp[dev].first = dev == 0;
            sp[dev].last = dev == c->n_devices - 1;
        }
    }
}

static gpt2rt__span gpt2rt__span_of(const gpt2rt_config *c, int dev) {
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    return sp[dev];
}

#endif /* GPT2RT__SRC_PLAN_SPLIT_H */
