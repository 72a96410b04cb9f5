/* tools/gpt2rt_caps.c - print gpt2rt.h's capability table as Markdown (docs/support.md
   is this program's output; make support writes it, make test compares them).
   usage: gpt2rt-caps > docs/support.md (gpt2rt-mem --capabilities prints the same) */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "gpt2rt-caps"
#include "cli.h"

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr,
                "usage: %s > docs/support.md\n"
                "prints which backend, execution mode, input, head, precision and feature gpt2rt.h runs,\n"
                "and the rules that refuse the rest, as Markdown\n", argv[0]);
        return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
    }
    return cli_capabilities();
}
