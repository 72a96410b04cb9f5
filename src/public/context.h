/* public/context.h - 11.3 Context
   may call: what its includes name (common/, config/, plan/, backend/, cpu/, cuda.h, context/) */
#ifndef GPT2RT__SRC_PUBLIC_CONTEXT_H
#define GPT2RT__SRC_PUBLIC_CONTEXT_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../config/caps.h"
#include "../config/checks.h"
#include "../plan/activations.h"
#include "../plan/plan.h"
#include "../backend/interface.h"
#include "../cpu/backend.h"
#include "../cuda.h"
#include "../context/context.h"
#include "../context/data_parallel.h"
#include "../context/layer_split.h"
#include "../context/mpi.h"

/* ==== 11.3 Context ==== */


GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **out, const gpt2rt_config *config) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    gpt2rt_config hooks;
    memset(&hooks, 0, sizeof hooks);
    if (config && config->alloc && config->free) {
        hooks.alloc = config->alloc; hooks.free = config->free; hooks.alloc_user = config->alloc_user;
    }
    gpt2rt_ctx *ctx = (gpt2rt_ctx *)gpt2rt__alloc(&hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!ctx) return GPT2RT_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->cfg = hooks;
    ctx->failed = 1;
    ctx->be = &gpt2rt__cpu_backend;
    ctx->ex = &gpt2rt__ex_one;
    gpt2rt__comm_self_init(&ctx->comm_self);
    ctx->comm = &ctx->comm_self;
    *out = ctx;
    if (!config) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_create: config is NULL");
    if (config->log) { ctx->cfg.log = config->log; ctx->cfg.log_user = config->log_user; }

    gpt2rt_memory_plan plan;
    gpt2rt_result r = gpt2rt_plan(config, &plan);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", plan.error);
    ctx->cfg = plan.config;
    ctx->d = gpt2rt__dims_of(&ctx->cfg);
    ctx->eval = ctx->cfg.inference; /* an inference context evaluates: no dropout unless asked for */
    if (ctx->cfg.backend == GPT2RT_BACKEND_CPU) gpt2rt__threads_measure(ctx->cfg.n_threads);
    int split = ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    /* the cells that plan but do not run (the capability table's CREATE rules), before any arena */
    char why[2048];
    if ((r = gpt2rt__cap_check(&ctx->cfg, GPT2RT__CAP_CREATE, "gpt2rt_create", why, sizeof why)) != GPT2RT_OK)
        return gpt2rt__fail(ctx, r, "%s", why);
#ifndef GPT2RT__COMM_THREADS
    if (ctx->cfg.parallel != GPT2RT_PARALLEL_NONE)
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: parallel = %s needs POSIX threads, "
                            "which this build lacks", split ? "LAYER_SPLIT" : "DATA");
#endif
    /* the execution mode (10), once: every public call goes through it */
    ctx->ex = split ? &gpt2rt__ex_stages : ctx->cfg.parallel != GPT2RT_PARALLEL_DATA ? &gpt2rt__ex_one
            : ctx->cfg.world_size > 1 ? &gpt2rt__ex_procs : &gpt2rt__ex_ranks;
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA) {
        /* sets ctx->be (8.6), or opens the stages (8.7); refuses where the implementation
           was compiled without CUDA */
        if ((r = gpt2rt__cuda_open(ctx, &plan)) != GPT2RT_OK) return r;
        gpt2rt__reset_training(ctx);
        if ((r = ctx->ex->open(ctx, &plan)) != GPT2RT_OK) return r;
        ctx->failed = 0;
        gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: %.2fM parameters, %.1f MiB planned and allocated on CUDA device %d%s",
                    (double)plan.n_params / 1e6, (double)plan.total[0] / 1048576.0, ctx->cfg.device_ids[0],
                    ctx->ex->slices(ctx) > 1 ? " and as much on each further data-parallel rank's" : "");
        return GPT2RT_OK;
    }
    uint64_t free_bytes = gpt2rt__host_available();
    /* memory_budget is bytes per device, against the plan's fullest device, as gpt2rt_plan and
       gpt2rt_fit count it (CPU layer split: device 0 holds the further micro-batches' sets) */
    uint64_t per_device = 0;
    for (int i = 0; i < plan.n_devices; i++) per_device = plan.total[i] > per_device ? plan.total[i] : per_device;
    /* CPU ranks share the host: data parallel needs n_devices times one device's plan */
    uint64_t host = plan.total[0] * (uint64_t)(ctx->cfg.parallel == GPT2RT_PARALLEL_DATA ? ctx->cfg.n_devices : 1);
    if (split) { /* CPU layer split (10.2): one device's arenas, then an activation set per further
                    micro-batch and a transient + workspace per further stage */
        gpt2rt__span whole;
        whole.l0 = 0; whole.l1 = ctx->d.L; whole.first = whole.last = 1;
        gpt2rt__layout(&ctx->d, &whole, plan.bytes[0], NULL);
        plan.total[0] = 0;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan.total[0] += plan.bytes[0][i];
        host = plan.total[0] + (uint64_t)(ctx->cfg.grad_accum - 1) * plan.bytes[0][GPT2RT_MEM_ACTIVATIONS] +
               (uint64_t)(ctx->cfg.n_devices - 1) * (plan.bytes[0][GPT2RT_MEM_TRANSIENT] +
                                                     plan.bytes[0][GPT2RT_MEM_WORKSPACE]);
    }
    if (ctx->cfg.memory_budget && per_device > ctx->cfg.memory_budget)
        return gpt2rt__fail_oom(ctx, &plan, ctx->cfg.memory_budget, free_bytes, NULL, 0);
    if (free_bytes && host > free_bytes)
        return gpt2rt__fail_oom(ctx, &plan, free_bytes / (host / plan.total[0]), free_bytes, NULL, 0);
    if (plan.total[0] > (uint64_t)SIZE_MAX)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the plan needs %llu bytes, more than "
                            "this machine can address", (unsigned long long)plan.total[0]);
    if ((r = gpt2rt__ctx_alloc(ctx, &plan)) != GPT2RT_OK) return r;
    gpt2rt__init_params(ctx);
    gpt2rt__reset_training(ctx);
    if ((r = ctx->ex->open(ctx, &plan)) != GPT2RT_OK) return r;
    ctx->failed = 0;
    gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: %.2fM parameters, %.1f MiB planned and allocated, %d thread(s)%s",
                (double)plan.n_params / 1e6, (double)plan.total[0] / 1048576.0, ctx->d.n_threads,
                ctx->ex->slices(ctx) > 1 ? " on each of the data-parallel ranks" : "");
    return GPT2RT_OK;
}


GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx) { gpt2rt__ctx_free(ctx); }

GPT2RT_DEF const char *gpt2rt_last_error(const gpt2rt_ctx *ctx) {
    if (!ctx) return "no context (allocating the context itself failed)";
    return ctx->error;
}

GPT2RT_DEF gpt2rt_config gpt2rt_config_get(const gpt2rt_ctx *ctx) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    if (ctx) c = ctx->cfg;
    return c;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    if (!ctx || !plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (ctx->failed) return GPT2RT_ERR_STATE;
    plan->config = ctx->cfg;
    /* CUDA: the device arenas (the host holds the fp32 weights) and the driver's own bytes */
    ctx->ex->allocated(ctx, plan);
    plan->n_params_padded = ctx->n_params;
    plan->n_params = ctx->n_params - (ctx->d.Vp - ctx->d.V) * ctx->d.C;
    plan->n_trainable = ctx->n_train;
    gpt2rt__plan_figures(&ctx->cfg, plan); /* tokens a step, FLOPs, seconds: as gpt2rt_plan says */
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_PUBLIC_CONTEXT_H */
