/* public/plan.h - 11. Public calls; 11.1 Results and names
   may call: nothing of the files before it */
#ifndef GPT2RT__SRC_PUBLIC_PLAN_H
#define GPT2RT__SRC_PUBLIC_PLAN_H

/* ==== 11. Public calls ==== */

/* every GPT2RT_DEF function, in the order of the manual's CALLS; each checks its
   arguments and the context once, then calls the context's executor (ctx->ex, 10) or
   the sections above; the planner's calls (11.2: gpt2rt_mem_name, gpt2rt_plan,
   gpt2rt_plan_step_time, gpt2rt_plan_format, gpt2rt_fit) are the planner's, in 3.3-3.4 */

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

#endif /* GPT2RT__SRC_PUBLIC_PLAN_H */
