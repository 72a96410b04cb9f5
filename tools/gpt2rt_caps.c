/* tools/gpt2rt_caps.c - print gpt2rt.h's capability table as Markdown (docs/support.md
   is this program's output; make support writes it, make test compares them).
   usage: gpt2rt-caps > docs/support.md */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr,
                "usage: %s > docs/support.md\n"
                "prints which backend, execution mode, input, head, precision and feature gpt2rt.h runs,\n"
                "and the rules that refuse the rest, as Markdown\n", argv[0]);
        return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
    }
    size_t n = gpt2rt_capabilities_markdown(NULL, 0);
    char *buf = (char *)malloc(n + 1);
    if (!buf) { fprintf(stderr, "gpt2rt-caps: out of memory\n"); return 1; }
    gpt2rt_capabilities_markdown(buf, n + 1);
    fputs(buf, stdout);
    free(buf);
    return 0;
}
