/* The smallest embedding: a 2-layer GPT-2 learns to continue 0 1 2 3 ... (mod 50). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1) { /* no options: --help says so, anything else is refused */
        int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        fprintf(help ? stdout : stderr, "%s%susage: minimal (no options): a 2-layer GPT-2 learns to continue "
                "0 1 2 3 ... (mod 50); exit 0 when it learned\n", help ? "" : argv[1], help ? "" : ": unknown option; ");
        return help ? 0 : 2;
    }
    gpt2rt_config cfg = {0};      /* zero means default */
    cfg.n_layer = 2; cfg.n_head = 2; cfg.n_embd = 32;
    cfg.vocab_size = 50; cfg.max_seq_len = 16;
    cfg.batch_size = 4; cfg.seq_len = 16; cfg.lr = 3e-3f;
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        return 1;
    }
    int32_t x[4 * 16], y[4 * 16];
    gpt2rt_step_stats st = {0};
    for (int step = 0; step < 150; step++) {
        for (int i = 0; i < 4 * 16; i++) {
            x[i] = (step * 7 + i * 3 + i / 16) % 50;   /* any start, then +1 */
            if (i % 16) x[i] = (x[i - 1] + 1) % 50;
            y[i] = (x[i] + 1) % 50;
        }
        if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
            break;
        }
        if (step % 25 == 0 || step == 149) printf("step %2d  loss %.4f\n", step, st.loss);
    }
    gpt2rt_free(ctx);
    return st.loss < 1.0f ? 0 : 1;  /* it learned */
}
