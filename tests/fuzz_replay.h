/* tests/fuzz_replay.h - the replay driver the fuzz targets share (built with -DFUZZ_REPLAY,
   no libFuzzer): every file named on the command line, or in a named directory, goes
   through LLVMFuzzerTestOneInput once; -v prints each with the target's verdict. Ends
   with "RESULT <inputs> 0" (a failed oracle aborts before); exit 1 when there was no
   input. The target defines, before including this:
     static const char *fz_replay_status(void);  the last input's verdict, "ok" or why
     static void fz_replay_end(void);            what it keeps between inputs, released */
#ifndef GPT2RT_FUZZ_REPLAY_H
#define GPT2RT_FUZZ_REPLAY_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fz_replayed, fz_verbose;

static void fz_replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = (unsigned char *)malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    if (fz_verbose) printf("%-50s %6ld bytes  %s\n", path, n, fz_replay_status());
    fz_replayed++;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) { fz_verbose = 1; continue; }
        struct stat sb;
        if (stat(argv[i], &sb) != 0) { fprintf(stderr, "cannot stat %s\n", argv[i]); return 2; }
        if (!S_ISDIR(sb.st_mode)) { fz_replay_file(argv[i]); continue; }
        DIR *dir = opendir(argv[i]);
        struct dirent *de;
        while (dir && (de = readdir(dir)) != NULL) {
            char full[4096];
            if (de->d_name[0] == '.' || snprintf(full, sizeof full, "%s/%s", argv[i], de->d_name) >= (int)sizeof full)
                continue;
            if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) fz_replay_file(full);
        }
        if (dir) closedir(dir);
    }
    fz_replay_end();
    printf("replayed %d inputs\n", fz_replayed);
    printf("RESULT %d 0\n", fz_replayed);
    return fz_replayed ? 0 : 1;
}
#endif
