/* context/mpi.h - 10.5 Processes: ranks over MPI (the executor of CPU ranks in separate processes)
   may call: what its includes name (common/, config/, processes/, optimizer.h, backend/, context/) */
#ifndef GPT2RT__SRC_CONTEXT_MPI_H
#define GPT2RT__SRC_CONTEXT_MPI_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../common/comm.h"
#include "../config/config.h"
#include "../config/caps.h"
#include "../processes/mpi.h"
#include "../optimizer.h"
#include "../backend/interface.h"
#include "context.h"

/* ==== 10.5 Processes: ranks over MPI ==== */

/* gpt2rt_backward of a process rank: the one-device backward, whose last micro-step
   sums the gradients over the processes (10.1); then the targets every rank counted,
   so that gpt2rt_param_read(GRAD) gives the gradient of the global mean loss */
static gpt2rt_result gpt2rt__proc_backward(gpt2rt_ctx *ctx) {
    if (ctx->acc_micro >= ctx->cfg.grad_accum)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: data parallel sums the gradients over the "
                            "processes during backward number grad_accum = %d; call gpt2rt_update after at most "
                            "that many", ctx->cfg.grad_accum);
    gpt2rt_result r = gpt2rt__one_backward(ctx);
    if (r != GPT2RT_OK || !ctx->dp_reduced) return r;
    double v = (double)ctx->acc_targets;
    if ((r = gpt2rt__dp_sum(ctx, &v, 1)) != GPT2RT_OK) return r;
    ctx->proc_targets = (int64_t)v;
    return GPT2RT_OK;
}

/* a gradient, once summed over the processes: of the mean loss over every process's targets */
static gpt2rt_result gpt2rt__proc_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                             float *dst) {
    if (!ctx->dp_reduced) return gpt2rt__one_param_read(ctx, t, what, dst);
    return ctx->be->param_read(ctx, t, what, gpt2rt__opt_unscale(ctx, ctx->proc_targets), dst);
}

/* world_size > 1 on the CPU backend: this process is one data-parallel rank (the
   threads of 10.1 are for n_devices > 1 in one process), its communicator MPI's; every
   rank starts from rank 0's weights. */
static gpt2rt_result gpt2rt__proc_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    const gpt2rt_config *c = &ctx->cfg;
    (void)plan;
#ifdef GPT2RT_MPI
    if (c->rendezvous != GPT2RT_RENDEZVOUS_MPI)
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: CPU ranks in separate processes reduce "
                            "with MPI: launch with mpirun (rendezvous = MPI); the %s rendezvous carries NCCL's id "
                            "for CUDA ranks only", c->rendezvous == GPT2RT_RENDEZVOUS_FILE ? "FILE" : "TCP");
    char err[512];
    gpt2rt_result r = gpt2rt__mpi_comm(c, &ctx->comm_proc, err, sizeof err);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", err);
    if (gpt2rt__sharded(&ctx->d) && ctx->comm_proc.size != ctx->d.shards)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_create: the moments are planned for %d "
                            "shards, MPI has %d ranks", ctx->d.shards, ctx->comm_proc.size);
    gpt2rt__dp_attach(ctx, &ctx->comm_proc);
    r = ctx->comm_proc.broadcast(&ctx->comm_proc, ctx->params, (size_t)ctx->n_params * sizeof(float), 0);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: rank 0's weights: %s", ctx->comm_proc.err);
    return GPT2RT_OK;
#else
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: world_size = %d processes on the CPU backend "
                        "reduce with MPI: compile the implementation with mpicc -DGPT2RT_MPI (Debian: apt-get "
                        "install openmpi-bin libopenmpi-dev) and launch with mpirun", c->world_size);
#endif
}

static void gpt2rt__proc_close(gpt2rt_ctx *ctx) {
    if (ctx->comm_proc.destroy) ctx->comm_proc.destroy(&ctx->comm_proc);
}

/* ---- one process of several: the executor (one device's, and its backward and param_read) ---- */
static const gpt2rt__exec gpt2rt__ex_procs = {
    /* .slices     = */ gpt2rt__one_slices,
    /* .forward    = */ gpt2rt__one_forward,
    /* .backward   = */ gpt2rt__proc_backward,
    /* .update     = */ gpt2rt__one_update,
    /* .step       = */ gpt2rt__one_step,
    /* .output     = */ gpt2rt__one_output,
    /* .param_read = */ gpt2rt__proc_param_read,
    /* .state_in   = */ gpt2rt__one_state_in,
    /* .state_out  = */ gpt2rt__one_state_out,
    /* .sync       = */ gpt2rt__one_sync,
    /* .allocated  = */ gpt2rt__one_allocated,
    /* .open       = */ gpt2rt__proc_open,
    /* .close      = */ gpt2rt__proc_close
};

#endif /* GPT2RT__SRC_CONTEXT_MPI_H */
