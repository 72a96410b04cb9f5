/* plan/plan.h - 3.3 Plan; 11.2 Plan: the public calls gpt2rt_mem_name, gpt2rt_plan, _step_time, _format
   may call: what its includes name (common/, config/, plan/) */
#ifndef GPT2RT__SRC_PLAN_PLAN_H
#define GPT2RT__SRC_PLAN_PLAN_H
#include "../common/threads.h"
#include "../common/types.h"
#include "../common/comm.h"
#include "../config/checks.h"
#include "params.h"
#include "activations.h"
#include "split.h"

/* ==== 3.3 Plan ==== */

#define GPT2RT__GIB(x) ((double)(x) / 1073741824.0)
/* a size as "%.2f %s": KiB, MiB or GiB, whichever reads best */
#define GPT2RT__SZ(x) gpt2rt__sz_val((uint64_t)(x)), gpt2rt__sz_unit((uint64_t)(x))
static double gpt2rt__sz_val(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? (double)b / 1073741824.0 : b >= ((uint64_t)1 << 20) ? (double)b / 1048576.0
         : (double)b / 1024.0;
}
static const char *gpt2rt__sz_unit(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? "GiB" : b >= ((uint64_t)1 << 20) ? "MiB" : "KiB";
}
#define GPT2RT__MIB(x) ((double)(x) / 1048576.0)

/* What one device holds beyond the arenas, as gpt2rt_plan estimates it: the CUDA
   context and cuBLASLt's own state, and NCCL's buffers with two devices. The CUDA
   backend measures it (gpt2rt_plan_allocated); these are its round figures. */
static uint64_t gpt2rt__overhead_estimate(const gpt2rt_config *c) {
    if (c->backend != GPT2RT_BACKEND_CUDA) return 0;
    return ((uint64_t)600 << 20) + (c->n_devices > 1 ? (uint64_t)256 << 20 : 0);
}

/* The advisor's coarse model of one optimizer step in seconds. Matrix products run
   at a peak scaled by an efficiency that grows with the tokens of a micro-batch;
   element-wise recompute and the update move bytes at memory bandwidth; each
   layer's kernels cost a launch latency per micro-batch; two devices exchange
   gradients (data parallel) or activations (layer split) over a link, and layer
   split runs its devices one after the other. Round figures for an H100-class GPU
   and a small multicore CPU: it ranks configurations, it does not promise times.
   *flops gets the FLOPs of the step, recompute included. */
/* The chunked classifier's time beyond the whole batch's, one micro-batch, in seconds
   (classifier_chunk = n < tok, k = ceil(tok / n) chunks). It does the whole batch's
   FLOPs (gpt2rt_step fuses the head's backward into its forward, so no logits are
   computed twice) and moves the same logits; each chunk after the first adds:
   - wte's gradient (Vp,C), fp32, read and written once more: the chunk's weight-gradient
     product accumulates into it, 8 bytes a weight at bw (none when wte is frozen or
     nothing trains);
   - the chunk's kernels: its logits product, the loss kernel, the two backward products
     (4; 3 without wte's gradient; 2 forward only), each a layer's launch / 25.
   Not counted: the head's products at n rows instead of tok (each has Vp columns, so
   n = 1024 rows already fill the GPU: a chunk's d(lnf) product takes 108 us on an H100
   against 96 for 1024 rows of the whole batch's), and wte's re-reads by the forward and
   d(lnf) products (2n FLOPs a weight read: compute-bound, the read runs under the
   product). At 124M, T = 1024, bf16 on gpt2rt-mem's H100 figures (3.35 TB/s, 5 us a
   kernel): 7 x (92 + 20) us = 0.79 ms at B = 8, n = 1024 (4.0% of its 19.5 ms step)
   and 15 x 112 us = 1.68 ms at B = 16 (4.8% of 35.1 ms); measured on an H100, 3.6% and
   5.0% more time a step (docs/results/gpu.md). The CPU model (gpt2rt__cpu_micro) adds
   what the CPU does not hide: wte's re-reads. */
static double gpt2rt__head_chunk_extra(const gpt2rt_config *c, const gpt2rt__dims *d, double bw, double launch) {
    if (d->patches || d->classifier_chunk >= d->BT) return 0.0;
    int wgrad = !d->infer && !(c->frozen & GPT2RT_GROUP_TOKEN_EMBED);
    double more = (double)((d->BT + d->classifier_chunk - 1) / d->classifier_chunk - 1);
    double bytes = wgrad ? 8.0 * (double)d->Vp * (double)d->C : 0.0, kernels = d->infer ? 2.0 : wgrad ? 4.0 : 3.0;
    return more * (bytes / bw + kernels * launch / 25.0);
}

/* One micro-batch's forward and backward on the layers of device dev, in seconds:
   matrix products at peak FLOP/s scaled by the efficiency tok/(tok + half), the
   element-wise traffic of recompute at bw bytes/s, a launch latency per layer
   (launch: a layer's 25 kernels), and on the last layers' device the chunked
   classifier's extra (gpt2rt__head_chunk_extra).
   *flops: its FLOPs (recompute included); *owned: the parameters it trains. */
static double gpt2rt__predict_micro(const gpt2rt_config *c, const gpt2rt__dims *dp, gpt2rt__span s, double peak, double bw,
                                    double half, double launch, double *flops, double *owned) {
    const gpt2rt__dims d = *dp;
    double C = (double)d.C, T = (double)d.T, tok = (double)d.BT, eff = tok / (tok + half);
    double layer = 72 * C * C + 12 * C * T, layer_fwd = 24 * C * C + 4 * C * T, head = 6 * (double)d.Vp * C;
    if (d.patches) head = 6 * (double)(d.patch_len + d.H) * C; /* in_layer and out_layer, per patch */
    if (c->frozen & GPT2RT_GROUP_ATTENTION) layer -= 8 * C * C;  /* no weight gradients: 2 FLOPs a weight */
    if (c->frozen & GPT2RT_GROUP_MLP) layer -= 16 * C * C;
    if (c->frozen & GPT2RT_GROUP_TOKEN_EMBED) head -= 2 * (double)d.Vp * C;
    if (d.infer) { layer = layer_fwd; head /= 3; } /* the forward alone */
    double nl = (double)(s.l1 - s.l0), f = tok * (nl * layer + (s.last ? head : 0.0)), bytes = 0.0;
    if (d.recompute == GPT2RT_RECOMPUTE_FULL) f += tok * (nl - (d.checkpoint_every < nl ? d.checkpoint_every : nl)) * layer_fwd;
    if (d.recompute == GPT2RT_RECOMPUTE_SELECTIVE) /* read and write LN and GELU outputs again */
        bytes = tok * nl * 2.0 * d.act_bytes * ((d.need_ln1 ? C : 0) + (d.need_mlp_in ? 5 * C : 0));
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__layout(&d, &s, b, NULL);
    *flops = f;
    *owned = (double)b[GPT2RT_MEM_GRADS] / 4;
    return f / (peak * eff) + bytes / bw + nl * launch + (s.last ? gpt2rt__head_chunk_extra(c, &d, bw, launch) : 0.0);
}

static double gpt2rt__predict_seconds(const gpt2rt_config *c, double *flops) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    int cuda = d.cuda, n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    double peak = !cuda ? 1.5e11 : c->precision != GPT2RT_PRECISION_FP32 ? 4.0e14 : c->tf32 ? 2.0e14 : 4.0e13;
    double bw = cuda ? 2.5e12 : 2.0e10, link = cuda ? 1.0e11 : 1.0e10, half = cuda ? 4096.0 : 128.0;
    double launch = cuda ? 25 * 5e-6 : 0.0; /* per layer and micro-batch */
    double C = (double)d.C, tok = (double)d.BT;
    double t_micro = 0.0, f_micro = 0.0, owned_max = 0.0;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    for (int dev = 0; dev < (split ? n : 1); dev++) {
        double f, owned;
        t_micro += gpt2rt__predict_micro(c, &d, sp[dev], peak, bw, half, launch, &f, &owned);
        f_micro += f;
        if (owned > owned_max) owned_max = owned;
    }
    if (split) t_micro += 2.0 * (n - 1) * tok * C * d.act_bytes / link;
    /* AdamW: p, g, m, v in and out, over this rank's shard with ZeRO-1 (whose reduce-scatter
       and all-gather move what the all-reduce below does) */
    double t = c->grad_accum * t_micro + owned_max / d.shards * (32.0 + d.weight_bytes) / bw;
    if (c->parallel == GPT2RT_PARALLEL_DATA) t += 2.0 * (n - 1) / n * owned_max * 4.0 / link; /* ring all-reduce */
    if (flops) *flops = f_micro * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? n : 1);
    return t;
}

/* The step-time model of gpt2rt_plan_step_time (its formulas are the manual's).
   Data parallel over N ranks: every rank runs grad_accum micro-batches; a ring
   all-reduce sends 2(N-1)/N of the gradient bytes G per rank, in buckets of 25 MiB
   (PyTorch DDP's default) that start while the backward of the last micro-batch goes
   on, so all of it but the last bucket can hide behind that backward. Sharded
   (ZeRO-1): a reduce-scatter of (N-1)/N G (hidden the same way), the update of 1/N
   of the parameters, then an all-gather of (N-1)/N of the weights W, which nothing
   hides. Layer split over S stages, GPipe with m = grad_accum micro-batches: the
   step is (m + S - 1) stage times, the S - 1 extra being the bubble; each
   micro-batch sends its activations (B,T,C) forward and their gradient back over
   each boundary, not overlapped. */
static void gpt2rt__step_time(const gpt2rt_config *c, const gpt2rt_hardware *hw, int sharded, gpt2rt_step_time *st) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    double peak = c->precision != GPT2RT_PRECISION_FP32 ? hw->flops_16 : c->tf32 ? hw->flops_tf32 : hw->flops_fp32;
    double half = hw->half_tokens > 0 ? hw->half_tokens : 4096.0, launch = 25 * 5e-6, link = hw->link_bw;
    double bucket = 25.0 * 1048576.0;
    int n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    int ranks = c->parallel == GPT2RT_PARALLEL_DATA ? n * c->world_size : 1, m = c->grad_accum;
    double f, owned, t_stage = 0.0, owned_max = 0.0, t_all = 0.0, owned_all = 0.0;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    memset(st, 0, sizeof *st);
    for (int dev = 0; dev < (split ? n : 1); dev++) {
        double t = gpt2rt__predict_micro(c, &d, sp[dev], peak, hw->mem_bw, half, launch, &f, &owned);
        if (t > t_stage) t_stage = t;
        if (owned > owned_max) owned_max = owned;
        t_all += t;
        owned_all += owned;
    }
    double adam = (32.0 + d.weight_bytes) / hw->mem_bw; /* s per parameter: p, g, m, v in and out */
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__span whole = gpt2rt__span_of(c, 0);
    gpt2rt__layout(&d, &whole, b, NULL);
    double G = (double)b[GPT2RT_MEM_GRADS], W = (double)b[GPT2RT_MEM_WEIGHTS];
    st->compute = m * t_stage;
    st->update = owned_max * adam;
    if (c->parallel == GPT2RT_PARALLEL_DATA && ranks > 1) {
        double share = (double)(ranks - 1) / ranks, t_bwd = t_stage * 2.0 / 3.0; /* backward: 2/3 of the FLOPs */
        st->comm_bytes = (sharded ? 1.0 : 2.0) * share * G;
        st->comm = st->comm_bytes / link;
        double last = (G < bucket ? 1.0 : bucket / G) * st->comm; /* the last bucket waits for the backward's end */
        st->hidden = st->comm - last < t_bwd ? st->comm - last : t_bwd;
        if (sharded) {
            st->update /= ranks;
            st->gather = share * W / link;
            st->comm_bytes += share * W;
        }
    } else if (split) {
        double act = (double)d.BT * d.C * d.act_bytes;
        st->comm_bytes = m * 2.0 * act;
        st->comm = st->comm_bytes / link;
        st->bubble = (n - 1) * (t_stage + 2.0 * act / link);
    }
    st->total = st->compute + st->update + st->comm - st->hidden + st->bubble + st->gather;
    /* one device, the same global batch: every micro-batch of every rank through every layer */
    st->one_device = t_all * m * ranks + owned_all * adam;
}

static const char *gpt2rt__precision_name(gpt2rt_precision p) {
    return p == GPT2RT_PRECISION_BF16 ? "bf16" : p == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
}

/* "none", "selective", "full (every 3rd layer input)" */
static const char *gpt2rt__recompute_name(const gpt2rt_config *c, char *buf, size_t cap) {
    if (c->recompute == GPT2RT_RECOMPUTE_SELECTIVE) return "selective";
    if (c->recompute != GPT2RT_RECOMPUTE_FULL) return "none";
    snprintf(buf, cap, "full, checkpoint every %d layer%s", c->checkpoint_every, c->checkpoint_every > 1 ? "s" : "");
    return buf;
}

static const char *gpt2rt__parallel_name(gpt2rt_parallel p) {
    return p == GPT2RT_PARALLEL_DATA ? "data parallel" : p == GPT2RT_PARALLEL_LAYER_SPLIT ? "layer split" : "one device";
}

/* Layer split, what each backend allocates per device beyond the spans' arenas of
   gpt2rt__layout: GPipe keeps the activations of all grad_accum micro-batches in flight.
   CUDA (8.7): each stage its span's arenas and grad_accum - 1 further activation sets of
   its span. CPU (10.2): the stages share the host, so device 0 holds one device's arenas
   of the whole model and the grad_accum - 1 further sets of those, device s > 0 the
   transient and workspace of its stage thread. bytes: the spans' layouts on entry. */
static gpt2rt_result gpt2rt__plan_split(const gpt2rt_config *c, const gpt2rt__dims *d,
                                        uint64_t bytes[GPT2RT_MAX_DEVICES][GPT2RT_MEM_COUNT], char *err, size_t cap) {
    uint64_t m = (uint64_t)c->grad_accum;
    if (c->parallel != GPT2RT_PARALLEL_LAYER_SPLIT) return GPT2RT_OK;
    if (!d->cuda) {
        gpt2rt__span whole;
        whole.l0 = 0; whole.l1 = d->L; whole.first = whole.last = 1;
        gpt2rt__layout(d, &whole, bytes[0], NULL);
        for (int dev = 1; dev < c->n_devices; dev++)
            for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
                bytes[dev][i] = i == GPT2RT_MEM_TRANSIENT || i == GPT2RT_MEM_WORKSPACE ? bytes[0][i] : 0;
    }
    for (int dev = 0; dev < (d->cuda ? c->n_devices : 1); dev++) {
        uint64_t a = bytes[dev][GPT2RT_MEM_ACTIVATIONS];
        if (a > UINT64_MAX / m) {
            snprintf(err, cap, "parallel = LAYER_SPLIT keeps grad_accum = %d micro-batches of activations in flight "
                     "(GPipe): %d x %llu bytes on device %d = %.3g bytes, past 2^64 (a micro-batch's activations "
                     "at batch_size = %d, seq_len = %d, n_embd = %d); lower grad_accum, batch_size or seq_len",
                     c->grad_accum, c->grad_accum, (unsigned long long)a, dev, (double)a * (double)m, c->batch_size,
                     c->seq_len, c->n_embd);
            return GPT2RT_ERR_INVALID_ARGUMENT;
        }
        bytes[dev][GPT2RT_MEM_ACTIVATIONS] = a * m;
    }
    return GPT2RT_OK;
}

/* device dev's total: its categories, then the overhead, each sum checked against 2^64 */
static gpt2rt_result gpt2rt__plan_total(gpt2rt_memory_plan *plan, int dev, char *err, size_t cap) {
    uint64_t t = 0;
    double all = 0.0;
    int wrapped = 0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        uint64_t b = plan->bytes[dev][i];
        all += (double)b;
        wrapped |= b > UINT64_MAX - t;
        t += b;
    }
    wrapped |= plan->overhead[dev] > UINT64_MAX - t;
    if (!wrapped) { plan->total[dev] = t; return GPT2RT_OK; }
    snprintf(err, cap, "device %d needs %.3g bytes, past 2^64 (weights %.3g, grads %.3g, moments %.3g, activations "
             "%.3g, logits %.3g, kvcache %.3g bytes); lower batch_size, seq_len or the model", dev,
             all + (double)plan->overhead[dev], (double)plan->bytes[dev][GPT2RT_MEM_WEIGHTS],
             (double)plan->bytes[dev][GPT2RT_MEM_GRADS], (double)plan->bytes[dev][GPT2RT_MEM_MOMENTS],
             (double)plan->bytes[dev][GPT2RT_MEM_ACTIVATIONS], (double)plan->bytes[dev][GPT2RT_MEM_LOGITS],
             (double)plan->bytes[dev][GPT2RT_MEM_KVCACHE]);
    return GPT2RT_ERR_INVALID_ARGUMENT;
}

static uint64_t gpt2rt__plan_peak(const gpt2rt_memory_plan *p, int *at) {
    uint64_t m = 0;
    for (int dev = 0; dev < p->n_devices; dev++)
        if (p->total[dev] + p->overhead[dev] > m || !dev) { m = p->total[dev] + p->overhead[dev]; if (at) *at = dev; }
    return m;
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
    if (d.patches) plan->flops_per_token += 6.0 * (double)((d.patch_len + d.H) * d.C);
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
       config and the bytes, not the planner's figures */
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

#endif /* GPT2RT__SRC_PLAN_PLAN_H */
