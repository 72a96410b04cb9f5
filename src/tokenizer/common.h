/* tokenizer/common.h - 5. Tokenizer: its outline; whole files, messages and shuffles shared with 6.3
   may call: common/platform.h, common/threads.h, common/errors.h, formats/safetensors_write.h */
#ifndef GPT2RT__SRC_TOKENIZER_COMMON_H
#define GPT2RT__SRC_TOKENIZER_COMMON_H
#include "../common/platform.h"
#include "../common/threads.h"
#include "../common/errors.h"
#include "../formats/safetensors_write.h"

/* ==== 5. Tokenizer ==== */
/* GPT-2's byte-level BPE, exactly (the ids of OpenAI's encoder.py and tiktoken).
   1. Pre-tokenisation: GPT-2 cuts text with the pattern
        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
      Here it is a hand-written scanner over code points (gpt2rt__tok_piece_end):
      each code point has one class (letter, number, space, other) from tables
      generated from the Unicode database. Bytes that are not valid UTF-8 are
      class "other", one byte each, so any input is cut into pieces that cover it.
   2. BPE per piece: start from one token per byte, repeatedly merge the adjacent
      pair listed earliest in the merges (leftmost on ties). A heap over the pairs
      makes a piece of n bytes O(n log n), so a megabyte without spaces is no
      denial of service. Whole pieces up to 32 bytes are cached (direct mapped).
   3. Ids: encoder.json names them, but for GPT-2 they follow from the merges: the
      256 byte tokens in the order of GPT-2's bytes_to_unicode table, merge i ->
      256 + i, <|endoftext|> = 256 + merges (tools/tok_fixture.py and the tests
      check it), so the compact copy in data/ holds the merges only. */

/* ---- shared with the series files (6.3): messages, whole files, shuffles without a context ---- */
#if !defined(GPT2RT_NO_TOKENIZER) || !defined(GPT2RT_NO_SERIES)
static gpt2rt_result gpt2rt__tok_msg(char *error, gpt2rt_result r, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static gpt2rt_result gpt2rt__tok_msg(char *error, gpt2rt_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, 512, fmt, ap);
    va_end(ap);
    return r;
}

/* the whole of a regular file; on POSIX opened non-blocking and checked with fstat
   before anything is read, so a FIFO or a device is refused at once and a swap
   between a check and the open cannot make it block (as gpt2rt__read_file) */
static gpt2rt_result gpt2rt__tok_read_file(const char *path, unsigned char **buf, size_t *len, char *error) {
    struct stat st;
    *buf = NULL;
    *len = 0;
#ifdef _WIN32
    if (stat(path, &st) != 0) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", path, strerror(errno));
    if (!GPT2RT__IS_REG(st.st_mode))
        return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: not a regular file%s", path,
                               GPT2RT__IS_DIR(st.st_mode) ? " (a directory)" : "");
    FILE *fp = fopen(path, "rb");
    if (!fp) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", path, strerror(errno));
#define GPT2RT__TRF_CLOSE() fclose(fp)
#else
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: not a regular file (%s)", path,
                               gpt2rt__file_kind((unsigned)st.st_mode));
    }
#define GPT2RT__TRF_CLOSE() close(fd)
#endif
    size_t n = (size_t)st.st_size, got = 0;
    *buf = (unsigned char *)malloc(n ? n : 1);
    if (!*buf) {
        GPT2RT__TRF_CLOSE();
        return gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", path, n);
    }
#ifdef _WIN32
    got = fread(*buf, 1, n, fp);
#else
    while (got < n) {
        long k = (long)read(fd, *buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
#endif
    GPT2RT__TRF_CLOSE();
#undef GPT2RT__TRF_CLOSE
    if (got != n) {
        free(*buf);
        *buf = NULL;
        return gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    *len = n;
    return GPT2RT_OK;
}

/* a bijection of [0, n) drawn from key: a 4-round Feistel network on the smallest
   even number of bits that covers n, walking the cycle until the value is below n
   (at most 4x the domain, so a few steps); no table, so any window of any epoch
   costs O(1) */
static uint64_t gpt2rt__shard_permute(uint64_t x, uint64_t n, uint64_t key) {
    int bits = 2;
    while (((uint64_t)1 << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t s = key + (uint64_t)round * 0x632BE59BD9B4E019ull + r;
            uint64_t f = gpt2rt__rng_next(&s) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = l << half | r;
    } while (x >= n);
    return x;
}
#endif

#endif /* GPT2RT__SRC_TOKENIZER_COMMON_H */
