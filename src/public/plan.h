/* public/plan.h - 11. Public calls; 11.1 Results and names; 11.2 Plan
   may call: context/mpi.h and what it includes */
#ifndef GPT2RT__SRC_PUBLIC_PLAN_H
#define GPT2RT__SRC_PUBLIC_PLAN_H
#include "../context/mpi.h"

/* ==== 11. Public calls ==== */

/* every GPT2RT_DEF function, in the order of the manual's CALLS; each checks its
   arguments and the context once, then calls the context's executor (ctx->ex, 10) or
   the sections above */

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
                                                  "transient", "logits", "workspace", "comm", "kvcache"};
    if ((int)m < 0 || m >= GPT2RT_MEM_COUNT) return "bookkeeping";
    return names[m];
}

/* ==== 11.2 Plan ==== */

/* The figures of a plan that follow from a resolved config alone (c: n_head and
   n_devices > 0): FLOPs, tokens a step, the advisor's predicted seconds. One function,
   so that gpt2rt_plan and a plan of what a context allocated cannot disagree. */
static void gpt2rt__plan_figures(const gpt2rt_config *c, gpt2rt_memory_plan *plan) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    plan->flops_per_token = 6.0 * (double)(12 * d.L * d.C * d.C + d.Vp * d.C) + 12.0 * (double)(d.L * d.C * d.T);
    if (d.patches) plan->flops_per_token += 6.0 * (double)((d.PL + d.H) * d.C);
    if (d.infer) plan->flops_per_token /= 3.0; /* the forward alone: a third of forward + backward */
    /* d.BT: token models B x T, patch models every series' patches (B x channels x patches) */
    plan->tokens_per_step = d.BT * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1) *
                            c->world_size; /* every process its own micro-batches */
    plan->predicted_seconds = gpt2rt__predict_seconds(c, &plan->flops_per_step);
}

/* a config gpt2rt__dims_of may read (it divides by both); a failed plan's is all zero */
static int gpt2rt__plan_resolved(const gpt2rt_config *c) { return c->n_head > 0 && c->n_devices > 0; }

GPT2RT_DEF gpt2rt_result gpt2rt_plan(const gpt2rt_config *config, gpt2rt_memory_plan *plan) {
    if (!plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (!config) {
        snprintf(plan->error, sizeof plan->error, "config is NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &plan->config, plan->error, sizeof plan->error);
    if (r != GPT2RT_OK) { /* the half-resolved config stays behind: a failed plan is all zero but its error */
        memset(&plan->config, 0, sizeof plan->config);
        return r;
    }
    const gpt2rt_config *c = &plan->config;
    gpt2rt__dims d = gpt2rt__dims_of(c);
    plan->n_devices = c->n_devices;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    for (int dev = 0; dev < c->n_devices; dev++) gpt2rt__layout(&d, &sp[dev], plan->bytes[dev], NULL);
    /* GPipe's micro-batches in flight, where each backend holds them; then the totals. One
       device's categories fit in 63 bits at every limit of the config (about 2^62 bytes of
       activations); the micro-batches in flight and the sums may not: refused, not wrapped */
    r = gpt2rt__plan_split(c, &d, plan->bytes, plan->error, sizeof plan->error);
    for (int dev = 0; dev < c->n_devices && r == GPT2RT_OK; dev++) {
        plan->overhead[dev] = gpt2rt__overhead_estimate(c);
        r = gpt2rt__plan_total(plan, dev, plan->error, sizeof plan->error);
    }
    if (r != GPT2RT_OK) {
        char why[sizeof plan->error];
        memcpy(why, plan->error, sizeof why);
        memset(plan, 0, sizeof *plan);
        memcpy(plan->error, why, sizeof why);
        return r;
    }
    gpt2rt__param_table(&d, NULL, &plan->n_params_padded, &plan->n_trainable);
    plan->n_params = plan->n_params_padded - (d.Vp - d.V) * d.C;
    gpt2rt__plan_figures(c, plan);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_step_time(const gpt2rt_config *config, const gpt2rt_hardware *hw, int sharded,
                                               gpt2rt_step_time *out, char *err, size_t cap) {
    gpt2rt_config c;
    char why[512];
    if (!config || !hw || !out) {
        if (err && cap) snprintf(err, cap, "gpt2rt_plan_step_time: config, hw and out must not be NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &c, why, sizeof why);
    if (r == GPT2RT_OK && !(hw->flops_fp32 > 0 && hw->flops_tf32 > 0 && hw->flops_16 > 0 && hw->mem_bw > 0 &&
                            hw->link_bw > 0)) {
        snprintf(why, sizeof why, "gpt2rt_plan_step_time: every gpt2rt_hardware figure must be > 0 (fp32 %g, tf32 %g, "
                 "16-bit %g FLOP/s, memory %g, link %g bytes/s)", hw->flops_fp32, hw->flops_tf32, hw->flops_16,
                 hw->mem_bw, hw->link_bw);
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r == GPT2RT_OK && sharded && c.parallel != GPT2RT_PARALLEL_DATA) {
        snprintf(why, sizeof why, "gpt2rt_plan_step_time: sharded applies to parallel = DATA");
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r != GPT2RT_OK) {
        if (err && cap) snprintf(err, cap, "%s", why);
        return r;
    }
    gpt2rt__step_time(&c, hw, sharded || c.shard_optimizer, out);
    return GPT2RT_OK;
}

GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *p, char *buf, size_t cap) {
    size_t n = 0;
    if (!p) return 0;
    /* what is printed is read only once it checks out: the plan's config resolves (a
       plan's is resolved already, so this gives it back as it is) and has as many
       devices as the plan; a refused or zeroed plan prints why there is none */
    gpt2rt_config rc;
    char why[512];
    if (p->n_devices == 0 && p->config.n_devices == 0) {
        if (memchr(p->error, 0, sizeof p->error) && p->error[0]) GPT2RT__PUT("no plan: %s\n", p->error);
        else GPT2RT__PUT("no plan: this one is all zero (gpt2rt_plan fills a plan, or says why it could not)\n");
        if (buf && cap) buf[n < cap ? n : cap - 1] = 0;
        return n;
    }
    gpt2rt_result r = gpt2rt__cfg_resolve(&p->config, &rc, why, sizeof why);
    if (r == GPT2RT_OK && p->n_devices != rc.n_devices) {
        snprintf(why, sizeof why, "the plan has n_devices = %d, its config %d", p->n_devices, rc.n_devices);
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r != GPT2RT_OK) {
        GPT2RT__PUT("no plan: its config does not hold: %s\n", why);
        if (buf && cap) buf[n < cap ? n : cap - 1] = 0;
        return n;
    }
    const gpt2rt_config *c = &rc;
    char rb[64];
    /* tokens a step from the config the plan holds: gpt2rt_plan_allocated fills the
       config and the bytes, not the planner's figures (it printed 0 here) */
    gpt2rt_memory_plan fig;
    fig.tokens_per_step = p->tokens_per_step;
    if (gpt2rt__plan_resolved(c)) gpt2rt__plan_figures(c, &fig);
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    double trained = c->inference ? 0.0 : (double)(p->n_trainable - (c->frozen & GPT2RT_GROUP_TOKEN_EMBED ? 0
                                                   : p->n_params_padded - p->n_params)) / 1e6;
    if (patches) { /* no vocabulary: the series' shape and the head instead */
        static const char *heads[] = {"lm", "flatten (GPT4TS)", "next patch (aLLM4TS stage 1)",
                                      "patch-wise decoding (aLLM4TS stage 2)"};
        GPT2RT__PUT("GPT-2 L=%d H=%d C=%d P=%d, patches: lookback %d, patch %d stride %d, %lld positions, %d "
                    "channel%s, %s head", c->n_layer, c->n_head, c->n_embd, c->max_seq_len, c->seq_len, c->patch_len,
                    c->patch_stride, (long long)gpt2rt__cfg_n_patches(c), c->n_channels, c->n_channels == 1 ? "" : "s",
                    heads[c->head]);
        if (c->head != GPT2RT_HEAD_NEXT_PATCH) GPT2RT__PUT(", horizon %d", c->horizon);
        GPT2RT__PUT(": %.2fM parameters, %.2fM trained\n", (double)p->n_params / 1e6, trained);
    } else
        GPT2RT__PUT("GPT-2 L=%d H=%d C=%d V=%d (padded %d) P=%d: %.2fM parameters, %.2fM trained\n", c->n_layer,
                    c->n_head, c->n_embd, c->vocab_size, c->padded_vocab, c->max_seq_len, (double)p->n_params / 1e6,
                    trained);
    if (patches) GPT2RT__PUT("B=%d windows x %d channels", c->batch_size, c->n_channels);
    else GPT2RT__PUT("B=%d T=%d", c->batch_size, c->seq_len);
    GPT2RT__PUT(" grad_accum=%d (%lld %s a step), %s, recompute %s, %s backend, %s", c->grad_accum, (long long)fig.tokens_per_step,
                patches ? "positions" : "tokens", gpt2rt__precision_name(c->precision),
                gpt2rt__recompute_name(c, rb, sizeof rb), c->backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU",
                gpt2rt__parallel_name(c->parallel));
    if (c->n_devices > 1) GPT2RT__PUT(" over %d devices", c->n_devices);
    if (c->world_size > 1) GPT2RT__PUT(" x %d processes (this is rank %d)", c->world_size, c->rank);
    if (c->shard_optimizer) GPT2RT__PUT(", optimizer state sharded (ZeRO-1)");
    if (c->frozen) GPT2RT__PUT(", frozen groups 0x%x", c->frozen);
    if (c->inference) GPT2RT__PUT(", inference (forward only)");
    if (c->inference && c->inference_weights == GPT2RT_PRECISION_BF16) GPT2RT__PUT(", bf16 weights (2 bytes each)");
    if (c->classifier_chunk && (int64_t)c->classifier_chunk < (int64_t)c->batch_size * c->seq_len)
        GPT2RT__PUT(", classifier over %d tokens at a time", c->classifier_chunk);
    GPT2RT__PUT("\n");
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) {
        gpt2rt__span sp[GPT2RT_MAX_DEVICES];
        gpt2rt__spans_of(c, sp);
        GPT2RT__PUT("stages (%s):", c->stage_first_layer[1] ? "stage_first_layer" : "the planner's split");
        for (int dev = 0; dev < c->n_devices; dev++) {
            GPT2RT__PUT(" %d: layers %lld..%lld%s", dev, (long long)sp[dev].l0, (long long)sp[dev].l1 - 1,
                        dev + 1 < c->n_devices ? "," : "\n");
        }
    }
    if (p->n_devices == 1) {
        GPT2RT__PUT("%-12s %16s %12s\n", "category", "bytes", "MiB");
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
            if (i == GPT2RT_MEM_KVCACHE && !p->bytes[0][i]) continue; /* shown when the config asks for one */
            GPT2RT__PUT("%-12s %16llu %12.2f\n", gpt2rt_mem_name((gpt2rt_mem)i),
                        (unsigned long long)p->bytes[0][i], GPT2RT__MIB(p->bytes[0][i]));
        }
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
            if (i == GPT2RT_MEM_KVCACHE && !p->config.kv_batch) continue;
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
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->grad_accum > 1)
        GPT2RT__PUT("activations: the %d micro-batches GPipe keeps in flight, %s\n", c->grad_accum,
                    c->backend == GPT2RT_BACKEND_CUDA ? "on each stage" : "on device 0 (the stages share the host)");
    if (c->shard_optimizer && gpt2rt__plan_resolved(c)) {
        /* the gradient padded to equal shards (1.4): its cost on every device */
        gpt2rt__dims d = gpt2rt__dims_of(c);
        gpt2rt__span whole = gpt2rt__span_of(c, 0);
        int64_t held, owned;
        gpt2rt__span_params(&d, &whole, NULL, &held, &owned);
        int64_t pad = gpt2rt__shard_padded(owned, d.shards) - owned;
        GPT2RT__PUT("ZeRO-1 padding: %lld floats, %.2f KiB a device (the gradient's %lld trained floats rounded up to "
                    "%d equal shards of %lld, so the reduce-scatter never falls back to an all-reduce)\n",
                    (long long)pad, (double)pad * 4.0 / 1024.0, (long long)owned, d.shards,
                    (long long)gpt2rt__shard_lo(owned, d.shards, 1));
    }
    if (buf && cap) buf[n < cap ? n : cap - 1] = 0;
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

#endif /* GPT2RT__SRC_PUBLIC_PLAN_H */
