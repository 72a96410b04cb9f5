/* formats/safetensors_write.h - 4.2 safetensors: writing; files
   may call: common/platform.h, common/errors.h */
#ifndef GPT2RT__SRC_FORMATS_SAFETENSORS_WRITE_H
#define GPT2RT__SRC_FORMATS_SAFETENSORS_WRITE_H
#include "../common/platform.h"
#include "../common/errors.h"

/* ==== 4.2 safetensors: writing; files ==== */

typedef struct gpt2rt__st_out {
    const char *name;
    const float *src;       /* (rows, cols) row-major */
    int64_t rows, cols;
    int transpose;          /* write (cols, rows) */
    int ndim;               /* 1: shape (rows*cols); 2: 2-D */
} gpt2rt__st_out;

static int gpt2rt__ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* JSON-escape s into out (cap bytes); returns the length written */
static size_t gpt2rt__json_escape(char *out, size_t cap, const char *s) {
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = (char)c; }
        else if (c < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else out[n++] = (char)c;
    }
    out[n] = 0;
    return n;
}

static gpt2rt_result gpt2rt__write_close(gpt2rt_ctx *ctx, FILE *f, const char *tmp, const char *path, int ok) {
    if (f) {
        if (fflush(f) != 0 || ferror(f)) ok = 0;
        if (fclose(f) != 0) ok = 0;
    }
    if (!ok) {
        int e = errno;
        remove(tmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "writing %s failed: %s (nothing was replaced)", path, strerror(e));
    }
    return GPT2RT_OK;
}

#ifdef GPT2RT__TEST_HOOKS
static int gpt2rt__test_rename_fail; /* tests only: the n-th gpt2rt__rename from now fails with EIO */
#endif

static gpt2rt_result gpt2rt__rename(gpt2rt_ctx *ctx, const char *tmp, const char *path) {
#ifdef _WIN32
    remove(path);
#endif
    int rc;
#ifdef GPT2RT__TEST_HOOKS
    if (gpt2rt__test_rename_fail > 0 && --gpt2rt__test_rename_fail == 0) { errno = EIO; rc = -1; } else
#endif
    rc = rename(tmp, path);
    if (rc != 0) {
        int e = errno;
        remove(tmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "renaming %s to %s failed: %s", tmp, path, strerror(e));
    }
    return GPT2RT_OK;
}

/* Write a safetensors file of F32 tensors to tmp (the caller renames it into place). */
static gpt2rt_result gpt2rt__st_write(gpt2rt_ctx *ctx, const char *tmp, const char *path, const gpt2rt__st_out *t,
                                      int n, const char *const *meta, int n_meta) {
    size_t cap = 256 + (size_t)n * 256;
    for (int i = 0; i < n_meta; i++) cap += 8 * strlen(meta[i]) + 8;
    int64_t stage_n = 0;
    for (int i = 0; i < n; i++)
        if (t[i].transpose && t[i].rows * t[i].cols > stage_n) stage_n = t[i].rows * t[i].cols;
    char *h = (char *)gpt2rt__alloc(&ctx->cfg, cap, GPT2RT_MEM_BOOKKEEPING);
    float *stage = stage_n ? (float *)gpt2rt__alloc(&ctx->cfg, (size_t)stage_n * 4, GPT2RT_MEM_BOOKKEEPING) : NULL;
    if (!h || (stage_n && !stage)) {
        gpt2rt__free(&ctx->cfg, h, GPT2RT_MEM_BOOKKEEPING);
        gpt2rt__free(&ctx->cfg, stage, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "writing %s: %llu bytes of staging", path,
                            (unsigned long long)(cap + (size_t)stage_n * 4));
    }
    size_t hn = 0;
    hn += (size_t)snprintf(h + hn, cap - hn, "{\"__metadata__\":{");
    for (int i = 0; i + 1 < n_meta; i += 2) {
        h[hn++] = '"'; hn += gpt2rt__json_escape(h + hn, cap - hn, meta[i]);
        hn += (size_t)snprintf(h + hn, cap - hn, "\":\"");
        hn += gpt2rt__json_escape(h + hn, cap - hn, meta[i + 1]);
        hn += (size_t)snprintf(h + hn, cap - hn, "\"%s", i + 2 < n_meta ? "," : "");
    }
    h[hn++] = '}';
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)(t[i].rows * t[i].cols) * 4;
        if (t[i].ndim == 1)
            hn += (size_t)snprintf(h + hn, cap - hn, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                   t[i].name, (long long)(t[i].rows * t[i].cols), (unsigned long long)off,
                                   (unsigned long long)(off + bytes));
        else
            hn += (size_t)snprintf(h + hn, cap - hn, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                   t[i].name, (long long)(t[i].transpose ? t[i].cols : t[i].rows),
                                   (long long)(t[i].transpose ? t[i].rows : t[i].cols), (unsigned long long)off,
                                   (unsigned long long)(off + bytes));
        off += bytes;
    }
    h[hn++] = '}';
    while (hn % 8) h[hn++] = ' '; /* the data starts 8-byte aligned */
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL;
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hn >> (8 * i));
        ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hn, f) == hn;
    }
    for (int i = 0; ok && i < n; i++) {
        size_t cnt = (size_t)(t[i].rows * t[i].cols);
        const float *src = t[i].src;
        if (t[i].transpose) {
            for (int64_t r = 0; r < t[i].rows; r++)
                for (int64_t c = 0; c < t[i].cols; c++) stage[c * t[i].rows + r] = src[r * t[i].cols + c];
            src = stage;
        }
        ok = fwrite(src, 4, cnt, f) == cnt;
    }
    gpt2rt__free(&ctx->cfg, h, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, stage, GPT2RT_MEM_BOOKKEEPING);
    return gpt2rt__write_close(ctx, f, tmp, path, ok);
}

/* What a path names when it is not a regular file: loading one would block (a FIFO
   with no writer), never end (/dev/zero) or read a size that is not its length (/proc). */
static const char *gpt2rt__file_kind(unsigned mode) {
#ifdef S_ISFIFO
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
#endif
#ifdef S_ISCHR
    if (S_ISCHR(mode)) return "a character device";
#endif
#ifdef S_ISBLK
    if (S_ISBLK(mode)) return "a block device";
#endif
#ifdef S_ISSOCK
    if (S_ISSOCK(mode)) return "a socket";
#endif
#ifdef S_ISDIR
    if (S_ISDIR(mode)) return "a directory";
#endif
    (void)mode;
    return "not a plain file";
}

/* The whole of a regular file, in a buffer of len + 1 bytes (buf[len] = 0). On POSIX
   the file is opened non-blocking and checked with fstat before anything is read, so
   a FIFO, a device or a directory is refused at once, and a swap between a check and
   the open cannot fool it. */
static gpt2rt_result gpt2rt__read_file(gpt2rt_ctx *ctx, const char *path, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    struct stat sb;
#ifdef _WIN32
    FILE *f = fopen(path, "rb");
    if (!f) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(_fileno(f), &sb) != 0 || !GPT2RT__IS_REG(sb.st_mode)) {
        fclose(f);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file; give the path of a file", path);
    }
#define GPT2RT__RF_CLOSE() fclose(f)
#else
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !GPT2RT__IS_REG(sb.st_mode)) {
        close(fd);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file (%s); give the path of a file",
                            path, gpt2rt__file_kind((unsigned)sb.st_mode));
    }
#define GPT2RT__RF_CLOSE() close(fd)
#endif
    long long size = (long long)sb.st_size;
    if (size < 0 || size > ((long long)1 << 46)) { /* 64 TiB: no real checkpoint */
        GPT2RT__RF_CLOSE();
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s: a size of %lld bytes is not plausible", path, size);
    }
    unsigned char *buf = (unsigned char *)gpt2rt__alloc(&ctx->cfg, (size_t)size + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!buf) {
        GPT2RT__RF_CLOSE();
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "reading %s: %lld bytes", path, size);
    }
    /* up to one byte past the size: a file that reads more than fstat says is not regular */
    size_t got = 0, want = (size_t)size + 1;
    int e = 0;
#ifdef _WIN32
    got = fread(buf, 1, want, f);
    if (ferror(f)) e = errno ? errno : EIO;
#else
    while (got < want) {
        long k = (long)read(fd, buf + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { e = errno; break; }
        if (k == 0) break;
        got += (size_t)k;
    }
#endif
    GPT2RT__RF_CLOSE();
#undef GPT2RT__RF_CLOSE
    if (e || got != (size_t)size) {
        gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
        if (e) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "reading %s: %s", path, strerror(e));
        if (got > (size_t)size)
            return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "%s is not a regular file: its size is %lld bytes but it reads "
                                "more (a /proc or /sys file, or a file that grew while being read)", path, size);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "reading %s: got %llu of %lld bytes (it shrank while being read)",
                            path, (unsigned long long)got, size);
    }
    buf[size] = 0;
    *out = buf;
    *len = (size_t)size;
    return GPT2RT_OK;
}

static int gpt2rt__mkdir(const char *dir) {
#ifdef _WIN32
    int rc = _mkdir(dir);
#else
    int rc = mkdir(dir, 0777);
#endif
    return rc == 0 || errno == EEXIST;
}

#endif /* GPT2RT__SRC_FORMATS_SAFETENSORS_WRITE_H */
