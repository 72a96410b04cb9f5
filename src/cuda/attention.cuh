/* cuda/attention.cuh - 8.3 Attention: the fast (sm_80) and Hopper (sm_90a) building blocks and forward kernels
   may call: cuda/series.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_ATTENTION_CUH
#define GPT2RT__SRC_CUDA_ATTENTION_CUH
#include "series.cuh"

/* ==== 8.3 Attention ==== */

/* kernels/attention.cu validates and times this section.
   Fused causal self-attention, forward and backward, flash-attention style: the (T,T) score
   matrix never exists in global memory; the forward keeps one log-sum-exp per query row and
   the backward recomputes the scores tile by tile.

   Shapes (row-major, floatX = float, __nv_bfloat16 or __half):
     qkv  (B,T,3C)  q at columns [0,C), k at [C,2C), v at [2C,3C); head h is HS = C/NH columns
                    h*HS .. h*HS+HS-1 inside each of the three
     out  (B,T,C)   heads side by side
     lse  (B,NH,T)  fp32, lse[b,h,t] = log sum_{s<=t} exp(q_t.k_s / sqrt(HS))
     dout (B,T,C), dqkv (B,T,3C) (overwritten, never accumulated)
     scratch_D (B,NH,T) fp32: D[b,h,t] = sum_i dout[b,t,h*HS+i] * out[b,t,h*HS+i]

   Launchers (host, return the first CUDA error, never exit or print):
     gpt2rt__cu_attention_forward<floatX>(out, lse, qkv, B, T, C, NH, stream[, dr])
     gpt2rt__cu_attention_backward<floatX>(dqkv, dout, qkv, out, lse, scratch_D, B, T, C, NH, stream[, dr])
   dr: the attention probabilities' dropout (7.1's gpt2rt__drop, the CPU's mask bit for bit),
   NULL or off for none; with a mask the generic path runs, which multiplies each
   probability by its factor before it weights v (the softmax's sum and lse stay those
   before dropout), and in the backward dP = factor * (dout . v) and dV += p * factor * dout.
   Requirements: C % NH == 0, HS <= 256 (else cudaErrorInvalidValue); B or T <= 0 is a no-op.

   Two paths, chosen per call:
   * fast (HS == 64, floatX bf16 or fp16, 16-byte aligned pointers): tensor cores through
     mma.sync.m16n8k16 (inline PTX, fp32 accumulation), ldmatrix from padded shared memory,
     cp.async double buffering. Tiles of 64 queries x 64 keys, 4 warps per CTA, each warp owns
     16 rows of the CTA's tile. The softmax probabilities P and dS are rounded to floatX before
     they enter a tensor-core product (as in FlashAttention 2); everything else is fp32.
     The forward and the backward's dK,dV and dQ passes have second kernels for Hopper
     (gpt2rt__cuk_attn_fwd64_wg, gpt2rt__cuk_attn_bwd_dkdv64_wg, gpt2rt__cuk_attn_bwd_dq64_wg:
     warpgroup MMAs, wgmma.mma_async, from 128-byte swizzled shared memory), taken on a compute
     capability 9.0 device when the binary was built for sm_90a; the same contract, numerics and
     determinism, their results within the rounding described there of the mma.sync kernels'.
     A pipelined Hopper forward (gpt2rt__cuk_attn_fwd64_wgp, launched by
     gpt2rt__cu_attn_fwd_wgp_launch) overlaps the softmax with the tensor cores, keeping the
     wgmma forward's order of operations and so its bits.
   * generic (any HS <= 256, any storage type, fp32 always): one warp per row, lanes split the
     head dimension, the dot products are reduced with a xor butterfly. Plain fp32 SIMT code,
     close to the CPU reference (about 1e-6 relative).

   Causality: key tile kt is visited by query tile qt only when kt <= qt (tiles are square), the
   mask is applied only on the diagonal tile kt == qt. Rows/keys past T are zero-filled in
   shared memory and never stored.
   The placeholder mask (7.1, gpt2rt_config.attn_mask; TH, the last argument of the launchers:
   0 or >= T is GPT-2's causal mask): a query t >= TH sees keys [0, TH) and itself only.
   Every path tests gpt2rt__cu_att_hidden per score instead of "s > t"; for TH = T the two
   are the same predicate, so causal results are unchanged bit for bit. Key 0 (history)
   stays visible to every row, so the fast forward's running max is finite from tile 0.

   DETERMINISM (bitwise identical results run to run): no atomics anywhere. Every output
   element is written by exactly one thread and is a sum in a fixed order:
     forward  one CTA per (query tile, b, h), key tiles visited in increasing order (the Hopper
              kernel: one warpgroup per (query tile, b, h), two per CTA sharing the key tiles).
     backward 1) D kernel: one warp per (b,t,h) row.
              2) dK,dV: one CTA per (key tile, b, h) owns its 64 rows of dK and dV and loops
                 over the query tiles qt = kt .. last in increasing order (the Hopper kernel:
                 one warpgroup per (key tile, b, h), two per CTA sharing the query tiles).
              3) dQ: one CTA per (query tile, b, h) owns its 64 rows of dQ and loops over the
                 key tiles kt = 0 .. qt in increasing order (recomputing S and dP; this costs
                 two extra tile products compared with atomically accumulated dQ; the Hopper
                 kernel: one warpgroup per (query tile, b, h), two per CTA sharing the key tiles).
     The generic path is the same with rows instead of tiles (one warp per q row for out and
     dQ, one warp per k row for dK,dV). */

/* key s is hidden from query t: a later key, or (TH < T) another placeholder */
__device__ __forceinline__ bool gpt2rt__cu_att_hidden(int64_t t, int64_t s, int64_t TH) { /* T < 2^31 */
    return s > t || (t >= TH && s >= TH && s != t);
}

/* ---------------------------------------------------------------------------------------------
   Fast path building blocks (HS = 64, 16-bit storage)
   ------------------------------------------------------------------------------------------- */
enum {
    GPT2RT__CU_ATT_TILE = 64,         /* queries per query tile = keys per key tile = HS */
    GPT2RT__CU_ATT_LD = 72,           /* smem row stride in 16-bit elements: 64 + 8 padding, so the
                                         8 rows an ldmatrix reads start in 8 different 16 B bank groups */
    GPT2RT__CU_ATT_TE = 64 * 72,      /* 16-bit elements per smem tile */
    GPT2RT__CU_ATT_THREADS = 128,     /* 4 warps, 16 tile rows each */
    GPT2RT__CU_ATT_NWG = 2,           /* warpgroups per CTA of the Hopper kernels (64 rows each) */
    GPT2RT__CU_ATT_MMA = 1,           /* allow_fast bits, bit i: entry i of each direction's variant
                                         table (gpt2rt__cu_attn_fast16): the mma.sync kernels, */
    GPT2RT__CU_ATT_WGMMA = 2,         /* the Hopper (wgmma) forward and backward, */
    GPT2RT__CU_ATT_WGP = 4,           /* the pipelined Hopper kernels, */
    GPT2RT__CU_ATT_MMA2 = 8,          /* the mma.sync forward and dQ pass over 2 query tiles a CTA, */
    GPT2RT__CU_ATT_ALT = 16,          /* the pipelined Hopper dQ pass with 3 warpgroups a CTA, */
    GPT2RT__CU_ATT_BEST = 0xFF,       /* every variant: the fastest here, measured (the launchers) */
    GPT2RT__CU_ATT_NVAR = 8,          /* the most entries a variant table has (one allow bit each) */
    GPT2RT__CU_ATT_SLOTS = 64         /* the choices remembered per storage type (shapes x devices) */
};
#define GPT2RT__CU_ATT_LOG2E 1.4426950408889634f
#define GPT2RT__CU_ATT_LN2 0.6931471805599453f

/* The fast path's instructions (cp.async, bf16 mma.m16n8k16) need sm_80. Device code built
   for an older -arch gets helpers that trap instead, and the host never launches the fast
   kernels from such code (gpt2rt__cu_attn_fast16::built): so the header compiles for any
   -arch, and runs the generic path there. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define GPT2RT__CU_ATT_SM80 0
#else
#define GPT2RT__CU_ATT_SM80 1
#endif

/* The inline-PTX statements of the header live in the helpers below and in the Hopper
   helpers further down; under GPT2RT_CUDA_EMU (kernels/emu, the CPU emulator of `make
   test-emu`) each calls the emulator's model of the instruction instead. */
/* 16-byte global -> shared copy, asynchronous; bytes = 0 zero-fills the destination */
__device__ __forceinline__ void gpt2rt__cu_attn_cp16(void *dst, const void *src, int bytes) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_cp_async16(dst, src, bytes);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
#else
    (void)dst; (void)src; (void)bytes;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_cp_commit(void) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_cp_commit();
#elif GPT2RT__CU_ATT_SM80
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    __trap();
#endif
}
template <int N> __device__ __forceinline__ void gpt2rt__cu_attn_cp_wait(void) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_cp_wait(N);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}

/* Start copying a 64 x 64 tile of 16-bit values into smem (row stride LD): rows r0..r0+63 of a
   row-major matrix src with row stride ld elements and nrows rows; rows >= nrows read as zero.
   All 128 threads call it. */
__device__ __forceinline__ void gpt2rt__cu_attn_load_tile(uint16_t *dst, const uint16_t *src, int r0, int nrows,
                                                          int64_t ld, int tid) {
#pragma unroll
    for (int i = tid; i < 64 * 8; i += GPT2RT__CU_ATT_THREADS) {
        int r = i >> 3, c = (i & 7) * 8, gr = r0 + r, ok = gr < nrows;
        gpt2rt__cu_attn_cp16(dst + r * GPT2RT__CU_ATT_LD + c, src + (int64_t)(ok ? gr : 0) * ld + c, ok ? 16 : 0);
    }
}

/* One step of the key-tile pipeline of the forward and dQ kernels (K, V double-buffered):
   while tile kt < qt is about to be used, start copying tile kt+1 into k_next, v_next;
   then wait until tile kt has landed and every thread sees it. All 128 threads call it. */
__device__ __forceinline__ void gpt2rt__cu_attn_kv_step(uint16_t *k_next, uint16_t *v_next, const uint16_t *k_g,
                                                        const uint16_t *v_g, int kt, int qt, int T, int64_t C3,
                                                        int tid) {
    if (kt < qt) {
        gpt2rt__cu_attn_load_tile(k_next, k_g, (kt + 1) * 64, T, C3, tid);
        gpt2rt__cu_attn_load_tile(v_next, v_g, (kt + 1) * 64, T, C3, tid);
        gpt2rt__cu_attn_cp_commit();
        gpt2rt__cu_attn_cp_wait<1>();
    } else {
        gpt2rt__cu_attn_cp_wait<0>();
    }
    __syncthreads();
}

/* ldmatrix.x4 helpers. A smem matrix M is row-major with row stride LD (16-bit elements).
   frag_a:  A operand (16x16, "row") = M[row0.., col0..]                   -> a[0..3]
   frag_b:  two B operands (16 k x 8 n, "col") with B(k,n) = M[n0+n][k0+k], n-tiles n0 and n0+8
            -> b[0..1] for n0, b[2..3] for n0+8                  (M holds B transposed: K, Q, dO)
   frag_bt: the same with B(k,n) = M[k0+k][n0+n] (M holds B as is: V, dO, Q, K), via .trans */
__device__ __forceinline__ void gpt2rt__cu_attn_ldsm(unsigned r[4], const uint16_t *p) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_ldmatrix_x4(r, p, 0);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
#else
    (void)p;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_ldsm_t(unsigned r[4], const uint16_t *p) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_ldmatrix_x4(r, p, 1);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
#else
    (void)p;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_frag_a(unsigned a[4], const uint16_t *M, int row0, int col0, int lane) {
    gpt2rt__cu_attn_ldsm(a, M + (row0 + (lane & 15)) * GPT2RT__CU_ATT_LD + col0 + (lane >> 4) * 8);
}
__device__ __forceinline__ void gpt2rt__cu_attn_frag_b(unsigned b[4], const uint16_t *M, int n0, int k0, int lane) {
    gpt2rt__cu_attn_ldsm(b, M + (n0 + (lane & 7) + (lane >> 4) * 8) * GPT2RT__CU_ATT_LD + k0 + ((lane >> 3) & 1) * 8);
}
__device__ __forceinline__ void gpt2rt__cu_attn_frag_bt(unsigned b[4], const uint16_t *M, int k0, int n0, int lane) {
    gpt2rt__cu_attn_ldsm_t(b, M + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * GPT2RT__CU_ATT_LD + n0 + (lane >> 4) * 8);
}

/* c (16x8 fp32) += a (16x16) * b (16x8); the pointer argument only selects the input type */
__device__ __forceinline__ void gpt2rt__cu_attn_mma(const __nv_bfloat16 *, float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_mma_m16n8k16(c, a, b0, b1, 0);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c; (void)a; (void)b0; (void)b1;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_mma(const __half *, float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_mma_m16n8k16(c, a, b0, b1, 1);
#elif GPT2RT__CU_ATT_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c; (void)a; (void)b0; (void)b1;
    __trap();
#endif
}
/* two floats -> one register of two 16-bit values, lo in the low half */
__device__ __forceinline__ unsigned gpt2rt__cu_attn_pack(const __nv_bfloat16 *, float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned gpt2rt__cu_attn_pack(const __half *, float lo, float hi) {
    return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}

/* Accumulator layout of one warp's 16 x 64 fp32 tile, acc[j][c] (j = 8-column block):
   row (lane >> 2) + 8 * (c >> 1), column 8 * j + 2 * (lane & 3) + (c & 1).
   The A operand of a 16 x 16 slice (columns 16 kj ..) of such a tile, rounded to 16 bits: */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_attn_acc_to_a(unsigned a[4], const float acc[8][4], int kj) {
    const X *tag = 0;
    a[0] = gpt2rt__cu_attn_pack(tag, acc[2 * kj][0], acc[2 * kj][1]);
    a[1] = gpt2rt__cu_attn_pack(tag, acc[2 * kj][2], acc[2 * kj][3]);
    a[2] = gpt2rt__cu_attn_pack(tag, acc[2 * kj + 1][0], acc[2 * kj + 1][1]);
    a[3] = gpt2rt__cu_attn_pack(tag, acc[2 * kj + 1][2], acc[2 * kj + 1][3]);
}

/* The three tile products every fast kernel is made of. A warp's 16 x 64 rows of a smem
   matrix M (rows row0 .., all 64 columns) as the A operands of 4 k-slices of 16: */
__device__ __forceinline__ void gpt2rt__cu_attn_rows_a(unsigned a[4][4], const uint16_t *M, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) gpt2rt__cu_attn_frag_a(a[kk], M, row0, 16 * kk, lane);
}
/* s (16 x 64 fp32) = A (16 x 64: rows_a) M^T, M (64 x 64 smem); every element of s sums its
   4 k-slices in increasing order */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_attn_mma_abt(float s[8][4], const unsigned a[4][4], const uint16_t *M,
                                                        int lane) {
    const X *tag = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            unsigned bb[4];
            gpt2rt__cu_attn_frag_b(bb, M, 16 * np, 16 * kk, lane);
            gpt2rt__cu_attn_mma(tag, s[2 * np], a[kk], bb[0], bb[1]);
            gpt2rt__cu_attn_mma(tag, s[2 * np + 1], a[kk], bb[2], bb[3]);
        }
}
/* acc (16 x 64 fp32) += p (16 x 64 accumulator tile, rounded to X) M, M (64 x 64 smem);
   the 4 k-slices are added in increasing order */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_attn_mma_pm(float acc[8][4], const float p[8][4], const uint16_t *M,
                                                       int lane) {
    const X *tag = 0;
#pragma unroll
    for (int kj = 0; kj < 4; kj++) {
        unsigned a[4];
        gpt2rt__cu_attn_acc_to_a<X>(a, p, kj);
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            unsigned bb[4];
            gpt2rt__cu_attn_frag_bt(bb, M, 16 * kj, 16 * dp, lane);
            gpt2rt__cu_attn_mma(tag, acc[2 * dp], a, bb[0], bb[1]);
            gpt2rt__cu_attn_mma(tag, acc[2 * dp + 1], a, bb[2], bb[3]);
        }
    }
}

/* Store one warp's 16 x 64 accumulator tile, row r multiplied by mul[r >= 8], rounded to X,
   to dst (row stride ld elements); only rows < nvalid. Goes through stage, the warp's own 16
   smem rows (stride LD), so that global stores are 16-byte and coalesced. */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_attn_store_rows(X *dst, int64_t ld, int nvalid, const float acc[8][4],
                                                           float mul_lo, float mul_hi, uint16_t *stage, int lane) {
    const X *tag = 0;
    unsigned *st = (unsigned *)stage;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 8; j++) {
        st[(lane >> 2) * (GPT2RT__CU_ATT_LD / 2) + 4 * j + (lane & 3)] = gpt2rt__cu_attn_pack(tag, acc[j][0] * mul_lo, acc[j][1] * mul_lo);
        st[((lane >> 2) + 8) * (GPT2RT__CU_ATT_LD / 2) + 4 * j + (lane & 3)] = gpt2rt__cu_attn_pack(tag, acc[j][2] * mul_hi, acc[j][3] * mul_hi);
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 16 * 8; i += 32) {
        int r = i >> 3, c = (i & 7) * 8;
        if (r < nvalid) *(uint4 *)(dst + r * ld + c) = *(const uint4 *)(stage + r * GPT2RT__CU_ATT_LD + c);
    }
}

/* ---------------------------------------------------------------------------------------------
   Fast forward. grid (T/64 query tiles, B*NH), 128 threads, 45 KiB static smem:
   Q tile + double-buffered K and V tiles. Warp w: query rows q0+16w .. q0+16w+15.
   Online softmax in base 2: scores are scaled by scale*log2(e), m is the running row max,
   l the running row sum of 2^(x - m), o the unnormalised output.
   ------------------------------------------------------------------------------------------- */
template <typename X>
__global__ void __launch_bounds__(GPT2RT__CU_ATT_THREADS)
gpt2rt__cuk_attn_fwd64(X *out,          /* (B,T,C) */
                       float *lse,      /* (B,NH,T) */
                       const X *qkv,    /* (B,T,3C) */
                       int T, int C, int NH, float scale_log2, int TH) {
    __shared__ __align__(128) uint16_t sm[5 * GPT2RT__CU_ATT_TE];
    uint16_t *sQ = sm; /* K tile of buffer i at sm + (1+i)*TE, V tile at sm + (3+i)*TE */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qt = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * 64;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;

    gpt2rt__cu_attn_load_tile(sQ, q_g, q0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sm + 1 * GPT2RT__CU_ATT_TE, k_g, 0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sm + 3 * GPT2RT__CU_ATT_TE, v_g, 0, T, C3, tid);
    gpt2rt__cu_attn_cp_commit();

    unsigned qf[4][4];                       /* this warp's 16 x 64 Q rows as 4 A operands */
    float o[8][4];                           /* 16 x 64 output accumulator */
    float m[2] = {-INFINITY, -INFINITY};     /* rows lane/4 and lane/4 + 8 */
    float l[2] = {0.0f, 0.0f};               /* this thread's partial row sums */
#pragma unroll
    for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const int buf = kt & 1; /* the next K,V tile goes to the other buffer */
        gpt2rt__cu_attn_kv_step(sm + (2 - buf) * GPT2RT__CU_ATT_TE, sm + (4 - buf) * GPT2RT__CU_ATT_TE, k_g, v_g, kt, qt,
                                T, C3, tid);
        const uint16_t *sK = sm + (1 + buf) * GPT2RT__CU_ATT_TE, *sV = sm + (3 + buf) * GPT2RT__CU_ATT_TE;
        if (kt == 0) gpt2rt__cu_attn_rows_a(qf, sQ, 16 * warp, lane);

        /* S (16 x 64) = Q K^T */
        float s[8][4];
        gpt2rt__cu_attn_mma_abt<X>(s, qf, sK, lane);

        /* scale to base 2, the mask, row max over the quad; only the diagonal tile and tiles
           holding placeholder keys hide any (edge: warp-uniform, false off the diagonal when causal) */
        const bool edge = kt == qt || (kt + 1) * 64 > TH;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float x = s[j][c] * scale_log2;
                if (edge && gpt2rt__cu_att_hidden(q0 + 16 * warp + (lane >> 2) + 8 * (c >> 1),
                                                  kt * 64 + 8 * j + 2 * (lane & 3) + (c & 1), TH)) x = -INFINITY;
                s[j][c] = x;
                mx[c >> 1] = fmaxf(mx[c >> 1], x);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mnew = fmaxf(m[r], mx[r]); /* finite: key 0 of tile 0 is never masked */
            corr[r] = exp2f(m[r] - mnew);     /* 0 on the first tile */
            m[r] = mnew;
            l[r] *= corr[r];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float p = exp2f(s[j][c] - m[c >> 1]);
                s[j][c] = p;
                l[c >> 1] += p;
                o[j][c] *= corr[c >> 1];
            }

        /* O (16 x 64) += P (16 x 64 keys) V (64 keys x 64) */
        gpt2rt__cu_attn_mma_pm<X>(o, s, sV, lane);
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }

    /* finish: full row sums, lse, normalised output */
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        int t = q0 + 16 * warp + (lane >> 2) + 8 * r;
        if ((lane & 3) == 0 && t < T) lse[(int64_t)blockIdx.y * T + t] = (m[r] + log2f(l[r])) * GPT2RT__CU_ATT_LN2;
    }
    const int row0 = q0 + 16 * warp;
    gpt2rt__cu_attn_store_rows<X>(out + ((int64_t)b * T + row0) * C + h * 64, C, T - row0, o, inv[0], inv[1],
                                  sQ + 16 * warp * GPT2RT__CU_ATT_LD, lane);
}

/* ---------------------------------------------------------------------------------------------
   Fast forward over RT query tiles per CTA: grid (ceil(T / (64 RT)), B*NH), 128 threads, (RT +
   4) tiles of dynamic smem (the RT Q tiles, then K and V double-buffered). Warp w holds rows
   16w .. 16w+15 of each of the CTA's query tiles qt0 + r, so every K and V fragment it reads
   from shared memory feeds RT products instead of one. Row tile r takes key tiles 0 .. qt0 + r
   (the later ones are skipped, not masked). Each row's arithmetic is gpt2rt__cuk_attn_fwd64's
   in the same order (the products sum their k-slices in increasing order, the online softmax
   runs per 64-key tile): out and lse are the same bits.
   ------------------------------------------------------------------------------------------- */
template <typename X, int RT>
__device__ __forceinline__ void gpt2rt__cu_attn_mma_abt_rt(float s[RT][8][4], const unsigned a[RT][4][4],
                                                           const uint16_t *M, int r0, int lane) {
    const X *tag = 0;
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int j = 0; j < 8; j++) s[r][j][0] = s[r][j][1] = s[r][j][2] = s[r][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            unsigned bb[4];
            gpt2rt__cu_attn_frag_b(bb, M, 16 * np, 16 * kk, lane);
#pragma unroll
            for (int r = 0; r < RT; r++)
                if (r >= r0) {
                    gpt2rt__cu_attn_mma(tag, s[r][2 * np], a[r][kk], bb[0], bb[1]);
                    gpt2rt__cu_attn_mma(tag, s[r][2 * np + 1], a[r][kk], bb[2], bb[3]);
                }
        }
}
template <typename X, int RT>
__device__ __forceinline__ void gpt2rt__cu_attn_mma_pm_rt(float acc[RT][8][4], const float p[RT][8][4],
                                                          const uint16_t *M, int r0, int lane) {
    const X *tag = 0;
#pragma unroll
    for (int kj = 0; kj < 4; kj++) {
        unsigned a[RT][4];
#pragma unroll
        for (int r = 0; r < RT; r++) gpt2rt__cu_attn_acc_to_a<X>(a[r], p[r], kj);
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            unsigned bb[4];
            gpt2rt__cu_attn_frag_bt(bb, M, 16 * kj, 16 * dp, lane);
#pragma unroll
            for (int r = 0; r < RT; r++)
                if (r >= r0) {
                    gpt2rt__cu_attn_mma(tag, acc[r][2 * dp], a[r], bb[0], bb[1]);
                    gpt2rt__cu_attn_mma(tag, acc[r][2 * dp + 1], a[r], bb[2], bb[3]);
                }
        }
    }
}
template <typename X, int RT>
__global__ void __launch_bounds__(GPT2RT__CU_ATT_THREADS)
gpt2rt__cuk_attn_fwd64_rt(X *out,          /* (B,T,C) */
                          float *lse,      /* (B,NH,T) */
                          const X *qkv,    /* (B,T,3C) */
                          int T, int C, int NH, float scale_log2, int TH) {
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    uint16_t *sm = (uint16_t *)gpt2rt__cu_attn_dsm;
    uint16_t *sK = sm + RT * GPT2RT__CU_ATT_TE, *sV = sK + 2 * GPT2RT__CU_ATT_TE; /* buffer i: + i * TE */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qt0 = RT * qb, last = qt0 + RT - 1 < ntile - 1 ? qt0 + RT - 1 : ntile - 1;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;

#pragma unroll
    for (int r = 0; r < RT; r++) gpt2rt__cu_attn_load_tile(sm + r * GPT2RT__CU_ATT_TE, q_g, (qt0 + r) * 64, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sK, k_g, 0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sV, v_g, 0, T, C3, tid);
    gpt2rt__cu_attn_cp_commit();

    unsigned qf[RT][4][4];                   /* this warp's 16 x 64 Q rows of each tile */
    float o[RT][8][4];                       /* 16 x 64 output accumulators */
    float m[RT][2], l[RT][2];                /* rows lane/4 and lane/4 + 8: running max, partial sums */
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r][0] = m[r][1] = -INFINITY;
        l[r][0] = l[r][1] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) o[r][j][0] = o[r][j][1] = o[r][j][2] = o[r][j][3] = 0.0f;
    }

    for (int kt = 0; kt <= last; kt++) {
        const int buf = kt & 1;
        gpt2rt__cu_attn_kv_step(sK + (1 - buf) * GPT2RT__CU_ATT_TE, sV + (1 - buf) * GPT2RT__CU_ATT_TE, k_g, v_g, kt,
                                last, T, C3, tid);
        const uint16_t *cK = sK + buf * GPT2RT__CU_ATT_TE, *cV = sV + buf * GPT2RT__CU_ATT_TE;
        if (kt == 0)
#pragma unroll
            for (int r = 0; r < RT; r++) gpt2rt__cu_attn_rows_a(qf[r], sm + r * GPT2RT__CU_ATT_TE, 16 * warp, lane);
        const int r0 = kt > qt0 ? kt - qt0 : 0; /* row tiles r0 .. RT-1 see key tile kt */

        float s[RT][8][4];
        gpt2rt__cu_attn_mma_abt_rt<X, RT>(s, qf, cK, r0, lane);
#pragma unroll
        for (int r = 0; r < RT; r++) {
            if (r < r0) continue;
            const int q0 = (qt0 + r) * 64;
            const bool edge = kt == qt0 + r || (kt + 1) * 64 > TH;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float x = s[r][j][c] * scale_log2;
                    if (edge && gpt2rt__cu_att_hidden(q0 + 16 * warp + (lane >> 2) + 8 * (c >> 1),
                                                      kt * 64 + 8 * j + 2 * (lane & 3) + (c & 1), TH)) x = -INFINITY;
                    s[r][j][c] = x;
                    mx[c >> 1] = fmaxf(mx[c >> 1], x);
                }
            float corr[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                float mnew = fmaxf(m[r][i], mx[i]);
                corr[i] = exp2f(m[r][i] - mnew);
                m[r][i] = mnew;
                l[r][i] *= corr[i];
            }
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float p = exp2f(s[r][j][c] - m[r][c >> 1]);
                    s[r][j][c] = p;
                    l[r][c >> 1] += p;
                    o[r][j][c] *= corr[c >> 1];
                }
        }
        gpt2rt__cu_attn_mma_pm_rt<X, RT>(o, s, cV, r0, lane);
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }

    /* finish each row tile: full row sums, lse, normalised output (staged through the warp's
       16 rows of the first Q tile, free since the first key tile) */
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int q0 = (qt0 + r) * 64;
        if (q0 >= T) break; /* warp-uniform */
        float inv[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            l[r][i] += __shfl_xor_sync(0xffffffffu, l[r][i], 1);
            l[r][i] += __shfl_xor_sync(0xffffffffu, l[r][i], 2);
            inv[i] = 1.0f / l[r][i];
            int t = q0 + 16 * warp + (lane >> 2) + 8 * i;
            if ((lane & 3) == 0 && t < T) lse[(int64_t)blockIdx.y * T + t] = (m[r][i] + log2f(l[r][i])) * GPT2RT__CU_ATT_LN2;
        }
        const int row0 = q0 + 16 * warp;
        gpt2rt__cu_attn_store_rows<X>(out + ((int64_t)b * T + row0) * C + h * 64, C, T - row0, o[r], inv[0], inv[1],
                                      sm + 16 * warp * GPT2RT__CU_ATT_LD, lane);
    }
}
/* launches gpt2rt__cuk_attn_fwd64_rt<X, RT> (HS 64, the fast path's conditions checked by the
   caller); its dynamic shared memory, over 48 KiB from RT = 2 on, is allowed once per device
   (ordinals from 64 on: at every launch) */
template <typename X, int RT>
static cudaError_t gpt2rt__cu_attn_fwd_rt_launch(X *out, float *lse, const X *qkv, int B, int T, int C, int NH,
                                                 cudaStream_t s, int TH) {
    static std::atomic<unsigned long long> smem_set;
    const int smem = (RT + 4) * GPT2RT__CU_ATT_TE * 2;
    int dev = -1;
    GPT2RT__CU_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || !(smem_set.load() & bit)) {
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_fwd64_rt<X, RT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        smem_set.fetch_or(bit);
    }
    const float scale_log2 = (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E;
    dim3 grid((unsigned)((T + 64 * RT - 1) / (64 * RT)), (unsigned)(B * NH));
    GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, smem, s, gpt2rt__cuk_attn_fwd64_rt<X, RT>)(out, lse, qkv, T, C, NH, scale_log2, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---------------------------------------------------------------------------------------------
   Hopper path building blocks: warpgroup MMAs (wgmma.mma_async, sm_90a). A warpgroup is 4
   warps (128 threads) that issue each instruction together. Device code has them only when
   built for sm_90a (-gencode arch=compute_90a,code=sm_90a: __CUDA_ARCH__ 900 with
   __CUDA_ARCH_FEAT_SM90_ALL); elsewhere the helpers trap and the host never launches the
   kernels that use them (gpt2rt__cu_attn_fast16::wgmma_ok). Under GPT2RT_CUDA_EMU each calls
   the emulator's model (kernels/emu/include/gpt2rt_emu_core.h documents the layouts).
   ------------------------------------------------------------------------------------------- */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPT2RT__CU_ATT_SM90A 1
#else
#define GPT2RT__CU_ATT_SM90A 0
#endif

/* Shared-memory matrix descriptor of a tile at p with the 128-byte swizzle: bits 0-13 the
   18-bit shared address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 62-63 swizzle mode 1 (128 B).
   The tiles here are 64 rows of 128 bytes (64 16-bit values), 1024-byte aligned, 16-byte
   chunk c of row r stored at chunk c ^ (r % 8) (gpt2rt__cu_attn_load_tile_sw); SBO = 1024
   bytes between 8-row groups. K-major (Q, K): LBO unused (16). MN-major (V): SBO steps 8
   k-rows, LBO would step 64-wide n blocks, of which there is one: it is given 1024 too. */
__device__ __forceinline__ uint64_t gpt2rt__cu_wg_desc(const void *p, uint32_t lbo) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void gpt2rt__cu_wg_fence(void) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma_fence();
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
/* shared memory written through the generic proxy (st.shared, cp.async) becomes visible to
   wgmma's reads, which go through the async proxy: each writer thread fences after its
   writes have landed, before the barrier that publishes them (the emulator has one proxy) */
__device__ __forceinline__ void gpt2rt__cu_wg_proxy_fence(void) {
#ifdef GPT2RT_CUDA_EMU
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_wg_commit(void) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma_commit();
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
/* wait until every committed group but the newest 0 is done; then d's registers hold the
   results (the empty asm tells the compiler each may have changed) */
__device__ __forceinline__ void gpt2rt__cu_wg_wait0(float d[32]) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma_wait(0);
    (void)d;
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
    __trap();
#endif
}
#define GPT2RT__CU_WG_D "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define GPT2RT__CU_WG_DOUT(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
__device__ __forceinline__ int gpt2rt__cu_wg_f16(const __nv_bfloat16 *) { return 0; }
__device__ __forceinline__ int gpt2rt__cu_wg_f16(const __half *) { return 1; }
/* d (64 x 64 fp32, the warpgroup's accumulator) = [d +] A B over one k-slice of 16:
   ss: A (64 x 16) and B (16 x 64, K-major: B(k,n) at row n) from descriptors;
   rs: A from 4 registers (mma.sync's A layout for the warp's 16 rows), B MN-major (imm-trans-b:
   B(k,n) at row k, as V (keys, head)). scale_d 0: d is ignored (D = A B). smem: the kernel's
   shared array (the emulator resolves descriptor addresses inside it). */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_wg_ss(float d[32], uint64_t da, uint64_t db, int scale_d, const void *smem) {
    const int f16 = gpt2rt__cu_wg_f16((const X *)0);
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma(d, 64, NULL, da, db, scale_d, 0, 0, f16, smem);
#elif GPT2RT__CU_ATT_SM90A
    (void)smem;
    if (f16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPT2RT__CU_WG_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : GPT2RT__CU_WG_DOUT(d) : "l"(da), "l"(db), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GPT2RT__CU_WG_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : GPT2RT__CU_WG_DOUT(d) : "l"(da), "l"(db), "r"(scale_d));
#else
    (void)d; (void)da; (void)db; (void)scale_d; (void)smem; (void)f16;
    __trap();
#endif
}
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_wg_rs(float d[32], const unsigned a[4], uint64_t db, int scale_d, const void *smem) {
    const int f16 = gpt2rt__cu_wg_f16((const X *)0);
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma(d, 64, a, 0, db, scale_d, 0, 1, f16, smem);
#elif GPT2RT__CU_ATT_SM90A
    (void)smem;
    if (f16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPT2RT__CU_WG_D ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                     : GPT2RT__CU_WG_DOUT(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GPT2RT__CU_WG_D ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                     : GPT2RT__CU_WG_DOUT(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
#else
    (void)d; (void)a; (void)db; (void)scale_d; (void)smem; (void)f16;
    __trap();
#endif
}

/* wait until every committed group but the newest N is done; then the R registers at d
   (the accumulator the caller reads next) hold the results */
template <int N, int R>
__device__ __forceinline__ void gpt2rt__cu_wg_wait(float *d) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma_wait(N);
    (void)d;
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
    __trap();
#endif
}
#define GPT2RT__CU_WG_D128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define GPT2RT__CU_WG_DOUT128(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
/* gpt2rt__cu_wg_ss with N = 128: d (64 x 128 fp32, 64 registers, the layout of the 64-wide
   accumulator extended to columns 8j.. of j < 16) = [d +] A B, B 128 rows (K-major) */
template <typename X>
__device__ __forceinline__ void gpt2rt__cu_wg_ss128(float d[64], uint64_t da, uint64_t db, int scale_d, const void *smem) {
    const int f16 = gpt2rt__cu_wg_f16((const X *)0);
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma(d, 128, NULL, da, db, scale_d, 0, 0, f16, smem);
#elif GPT2RT__CU_ATT_SM90A
    (void)smem;
    if (f16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " GPT2RT__CU_WG_D128 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : GPT2RT__CU_WG_DOUT128(d) : "l"(da), "l"(db), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GPT2RT__CU_WG_D128 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : GPT2RT__CU_WG_DOUT128(d) : "l"(da), "l"(db), "r"(scale_d));
#else
    (void)d; (void)da; (void)db; (void)scale_d; (void)smem; (void)f16;
    __trap();
#endif
}

/* Start copying a 64 x 64 tile of 16-bit values into a 1024-byte aligned smem tile in the
   128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)): rows r0..r0+63 of src
   (row stride ld elements, nrows rows; rows >= nrows read as zero). nthr threads call it. */
__device__ __forceinline__ void gpt2rt__cu_attn_load_tile_sw(uint16_t *dst, const uint16_t *src, int r0, int nrows,
                                                             int64_t ld, int tid, int nthr) {
    for (int i = tid; i < 64 * 8; i += nthr) {
        int r = i >> 3, c = i & 7, gr = r0 + r, ok = gr < nrows;
        gpt2rt__cu_attn_cp16(dst + r * 64 + ((c ^ (r & 7)) << 3), src + (int64_t)(ok ? gr : 0) * ld + c * 8, ok ? 16 : 0);
    }
}

/* ---------------------------------------------------------------------------------------------
   Hopper forward (FlashAttention-3's structure without its producer warps): grid
   (ceil(T / (64 NWG)) query blocks, B*NH), NWG warpgroups (128 NWG threads) per CTA; warpgroup
   wg owns the 64 query rows of query tile qw = NWG * block + wg, warp w of it rows 16w..16w+15.
   Static smem (NWG + 4) * 8 KiB (48 KiB for NWG = 2), 1024-byte aligned, 128-byte swizzled
   tiles: the NWG Q tiles, then K and V double-buffered (cp.async, one tile ahead), shared by
   the warpgroups. Per key tile kt <= qw, each warpgroup:
     S (64 x 64 fp32) = Q K^T: 4 wgmma m64n64k16, A = Q and B = K from descriptors (K-major);
     online softmax in base 2 on the accumulator layout (scores times scale*log2(e), running
       row max m and sum l, each row's 64 values on the 4 threads of a quad, reduced by shuffles);
     P rounded to X in registers, the A operand of O (64 x 64 fp32) += P V: 4 wgmma with A from
       registers and V as an MN-major B (imm-trans-b).
   Each issue group is committed and waited for before its result is read; no overlap of
   softmax and MMAs inside a warpgroup (the warpgroups and co-resident CTAs overlap instead).
   Numerics are the mma.sync path's: fp32 scores, P rounded to X before P V, fp32 O, l, m;
   the same mask, lse and output rounding. The order in which the hardware sums the 16 products
   inside one wgmma is not documented, so results may differ from the mma.sync path in the last
   bits of fp32 (under the emulator, whose both models sum in increasing k, they are the same
   bits); run to run they are the same (no atomics, fixed order).
   ------------------------------------------------------------------------------------------- */
template <typename X, int NWG>
__global__ void __launch_bounds__(128 * NWG)
gpt2rt__cuk_attn_fwd64_wg(X *out,          /* (B,T,C) */
                          float *lse,      /* (B,NH,T) */
                          const X *qkv,    /* (B,T,3C) */
                          int T, int C, int NH, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG };
    __shared__ __align__(1024) uint16_t sm[(NWG + 4) * TILE];
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qw = NWG * qb + wg, q0 = qw * 64, last = NWG * qb + NWG - 1 < ntile - 1 ? NWG * qb + NWG - 1 : ntile - 1;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    uint16_t *sQ = sm + wg * TILE, *sK = sm + NWG * TILE, *sV = sm + (NWG + 2) * TILE; /* buffer i: + i * TILE */

    for (int i = 0; i < NWG; i++) gpt2rt__cu_attn_load_tile_sw(sm + i * TILE, q_g, (NWG * qb + i) * 64, T, C3, tid, NT);
    gpt2rt__cu_attn_load_tile_sw(sK, k_g, 0, T, C3, tid, NT);
    gpt2rt__cu_attn_load_tile_sw(sV, v_g, 0, T, C3, tid, NT);
    gpt2rt__cu_attn_cp_commit();

    const X *tag = 0;
    float o[32], s[32];                      /* accumulators: o[4j+c], s[4j+c] = row 16w + lane/4 + 8(c>>1),
                                                column 8j + 2(lane%4) + (c&1) */
    float m[2] = {-INFINITY, -INFINITY};     /* rows lane/4 and lane/4 + 8 of the warp */
    float l[2] = {0.0f, 0.0f};               /* this thread's partial row sums */
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    const bool active = q0 < T; /* warpgroup-uniform */

    for (int kt = 0; kt <= last; kt++) {
        const int buf = kt & 1;
        if (kt < last) {
            gpt2rt__cu_attn_load_tile_sw(sK + (1 - buf) * TILE, k_g, (kt + 1) * 64, T, C3, tid, NT);
            gpt2rt__cu_attn_load_tile_sw(sV + (1 - buf) * TILE, v_g, (kt + 1) * 64, T, C3, tid, NT);
            gpt2rt__cu_attn_cp_commit();
            gpt2rt__cu_attn_cp_wait<1>();
        } else {
            gpt2rt__cu_attn_cp_wait<0>();
        }
        gpt2rt__cu_wg_proxy_fence();
        __syncthreads();
        if (active && kt <= qw) {
            const uint16_t *k_s = sK + buf * TILE, *v_s = sV + buf * TILE;
            /* S = Q K^T: k-slices of 16 head dims = 32 bytes along the swizzled rows */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), gpt2rt__cu_wg_desc(k_s + 16 * kk, 16), kk > 0, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(s);

            const bool edge = kt == qw || (kt + 1) * 64 > TH;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < 32; i++) {
                float x = s[i] * scale_log2;
                if (edge && gpt2rt__cu_att_hidden(q0 + 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1),
                                                  kt * 64 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), TH)) x = -INFINITY;
                s[i] = x;
                mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
            }
            float corr[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mnew = fmaxf(m[r], mx[r]); /* finite: key 0 of tile 0 is never masked */
                corr[r] = exp2f(m[r] - mnew);     /* 0 on the first tile */
                m[r] = mnew;
                l[r] *= corr[r];
            }
#pragma unroll
            for (int i = 0; i < 32; i++) {
                float p = exp2f(s[i] - m[(i >> 1) & 1]);
                s[i] = p;
                l[(i >> 1) & 1] += p;
                o[i] *= corr[(i >> 1) & 1];
            }
            /* O += P V: keys 16kk..16kk+15 are accumulator columns 8j.. of j = 2kk, 2kk+1, which
               are already the A layout (a0: row g keys 2t.., a1: row g+8, a2/a3: keys 2t+8..) */
            unsigned pa[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                pa[kk][0] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 0], s[8 * kk + 1]);
                pa[kk][1] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 2], s[8 * kk + 3]);
                pa[kk][2] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 4], s[8 * kk + 5]);
                pa[kk][3] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 6], s[8 * kk + 7]);
            }
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) /* 16 keys = 16 rows of 128 bytes of V */
                gpt2rt__cu_wg_rs<X>(o, pa[kk], gpt2rt__cu_wg_desc(v_s + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(o);
        }
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }

    /* finish: full row sums, lse, normalised output (staged through smem, now free: each
       warp its own 16 rows of stride LD) */
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        int t = q0 + 16 * w + (lane >> 2) + 8 * r;
        if ((lane & 3) == 0 && t < T) lse[(int64_t)blockIdx.y * T + t] = (m[r] + log2f(l[r])) * GPT2RT__CU_ATT_LN2;
    }
    float oa[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) oa[i >> 2][i & 3] = o[i];
    const int row0 = q0 + 16 * w;
    gpt2rt__cu_attn_store_rows<X>(out + ((int64_t)b * T + row0) * C + h * 64, C, T - row0, oa, inv[0], inv[1],
                                  sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD, lane);
#else
    (void)out; (void)lse; (void)qkv; (void)T; (void)C; (void)NH; (void)scale_log2; (void)TH;
    __trap();
#endif
}

/* ---------------------------------------------------------------------------------------------
   Pipelined Hopper forward (FlashAttention-3's consumer schedule without producer warps).
   grid (ceil(T / (64 NWG)) query blocks, B*NH), NWG warpgroups (128 NWG threads) per CTA,
   warpgroup wg owning query tile qw = NWG * block + wg as in gpt2rt__cuk_attn_fwd64_wg; key
   tiles of 64 KB keys (KB = 1 or 2: S by m64n64k16 or m64n128k16 wgmmas, 4 k-slices each).
   Dynamic smem (NWG + 2 STAGES KB) * 8 KiB + 1 KiB of alignment slack: the NWG Q tiles, then
   a ring of STAGES K tiles and STAGES V tiles (128-byte swizzled, 64 KB rows each). Loads run
   STAGES - 2 key tiles ahead (cp.async, one commit group per key tile): at the CTA's one
   barrier per key tile n, tile n has landed and every thread is done with tile n - 1's S and
   tile n - 2's P V, so tile n + STAGES - 2 may refill tile n - 2's slot.
   Per key tile n each warpgroup (software-pipelined by one tile):
     issue S_n = Q K_n^T (committed, in flight);
     per 64-key half h: rescale O by tile n-1's correction of half h (after half h-1's P V is
       waited for), issue O += P_{n-1,h} V_{n-1,h} (committed); the softmax of half h of S_n
       (S_n waited for before half 0) runs while that P V is on the tensor cores;
     wait for the last P V, round P_n to X in registers for the next tile.
   So the tensor cores run S_n under the O rescale and the P V products under the softmax.
   Numerics are bitwise those of gpt2rt__cuk_attn_fwd64_wg: every 64-key block is one
   softmax step (max, correction, l *= corr, p, l += p in increasing column order, O *= corr,
   O += P V over 4 slices of 16 keys in increasing order) in increasing block order; blocks
   past qw in a 128-key tile are computed by the S wgmma and then ignored (no softmax step,
   no P V), as the 64-key kernels never visit them.
   ------------------------------------------------------------------------------------------- */
template <typename X, int NWG, int KB, int STAGES>
__global__ void __launch_bounds__(128 * NWG, 1)
gpt2rt__cuk_attn_fwd64_wgp(X *out,          /* (B,T,C) */
                           float *lse,      /* (B,NH,T) */
                           const X *qkv,    /* (B,T,3C) */
                           int T, int C, int NH, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG, KN = 64 * KB, AHEAD = STAGES - 2 };
    /* 128-key tiles (KB = 2) are not built: on hardware their out is wrong (lse right), a hazard
       on the P V path that the emulator, which reads a wgmma's operands when it is issued, does
       not model (docs/results/gpu.md). */
    static_assert(KB == 1, "key tiles of 64 only: the 128-key path is wrong on hardware");
    static_assert(STAGES >= 3, "the ring holds tiles n - 1, n and the loads ahead");
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    /* the swizzle is a function of the shared address: tiles start on 1024-byte boundaries */
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(gpt2rt__cu_attn_dsm) & 1023u;
    uint16_t *sm = (uint16_t *)(gpt2rt__cu_attn_dsm + (mis ? 1024 - mis : 0));
    uint16_t *sK = sm + NWG * TILE, *sV = sK + STAGES * KB * TILE; /* slot i: + i * KB * TILE */
    /* wg broadcast from lane 0: ptxas then knows the branches around the wgmmas are
       warp-uniform and keeps them asynchronous (else it serializes them) */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), w = (tid >> 5) & 3, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qw = NWG * qb + wg, q0 = qw * 64;
    const int qlast = NWG * qb + NWG - 1 < ntile - 1 ? NWG * qb + NWG - 1 : ntile - 1;
    const int nmine = q0 < T ? qw / KB + 1 : 0, ncta = qlast / KB + 1; /* key tiles (warpgroup-uniform) */
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *sQ = sm + wg * TILE;

    for (int i = 0; i < NWG; i++) gpt2rt__cu_attn_load_tile_sw(sm + i * TILE, q_g, (NWG * qb + i) * 64, T, C3, tid, NT);
    for (int n = 0; n < AHEAD; n++) {
        if (n < ncta)
            for (int i = 0; i < KB; i++) {
                gpt2rt__cu_attn_load_tile_sw(sK + (n * KB + i) * TILE, k_g, n * KN + 64 * i, T, C3, tid, NT);
                gpt2rt__cu_attn_load_tile_sw(sV + (n * KB + i) * TILE, v_g, n * KN + 64 * i, T, C3, tid, NT);
            }
        gpt2rt__cu_attn_cp_commit();
    }

    const X *tag = 0;
    float o[32], s[32 * KB];                 /* accumulators: o[4j+c], s[32 kh + 4j+c] = row 16w + lane/4 +
                                                8(c>>1), column (64 kh +) 8j + 2(lane%4) + (c&1) */
    unsigned pa[4 * KB][4], pn[4 * KB][4];   /* P of the previous and this key tile, A operands of 16-key slices */
    float cp[KB][2];                         /* its corrections, per 64-key half and row */
    float m[2] = {-INFINITY, -INFINITY};     /* rows lane/4 and lane/4 + 8 of the warp */
    float l[2] = {0.0f, 0.0f};               /* this thread's partial row sums */
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32 * KB; i++) s[i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4 * KB; kk++) pn[kk][0] = pn[kk][1] = pn[kk][2] = pn[kk][3] = 0u;

    for (int n = 0; n <= ncta; n++) {
        /* tile n has landed (its group is the oldest of AHEAD outstanding), and after the
           barrier everyone is done with tile n - 2's slot */
        gpt2rt__cu_attn_cp_wait<AHEAD - 1>();
        gpt2rt__cu_wg_proxy_fence();
        __syncthreads();
        {
            const int nn = n + AHEAD, slot = nn % STAGES;
            if (nn < ncta)
                for (int i = 0; i < KB; i++) {
                    gpt2rt__cu_attn_load_tile_sw(sK + (slot * KB + i) * TILE, k_g, nn * KN + 64 * i, T, C3, tid, NT);
                    gpt2rt__cu_attn_load_tile_sw(sV + (slot * KB + i) * TILE, v_g, nn * KN + 64 * i, T, C3, tid, NT);
                }
            gpt2rt__cu_attn_cp_commit();
        }
        const bool do_s = n < nmine, do_pv = n >= 1 && n <= nmine; /* warpgroup-uniform */
        if (do_s) {
            const uint16_t *k_s = sK + (n % STAGES) * KB * TILE;
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                if (KB == 2)
                    gpt2rt__cu_wg_ss128<X>(s, gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), gpt2rt__cu_wg_desc(k_s + 16 * kk, 16), kk > 0, sm);
                else
                    gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), gpt2rt__cu_wg_desc(k_s + 16 * kk, 16), kk > 0, sm);
            }
            gpt2rt__cu_wg_commit();
        }
#pragma unroll
        for (int kh = 0; kh < KB; kh++) {
            /* O = O * corr + P V for 64-key block (n - 1) KB + kh */
            const bool pv = do_pv && (n - 1) * KB + kh <= qw;
            if (kh > 0) gpt2rt__cu_wg_wait<0, 32>(o);
            if (pv) {
                if (kh > 0)
#pragma unroll
                    for (int i = 0; i < 32; i++) o[i] *= cp[kh][(i >> 1) & 1];
                const uint16_t *v_s = sV + ((n - 1) % STAGES) * KB * TILE + kh * TILE;
                gpt2rt__cu_wg_fence();
#pragma unroll
                for (int kk = 0; kk < 4; kk++) /* 16 keys = 16 rows of 128 bytes of V */
                    gpt2rt__cu_wg_rs<X>(o, pa[4 * kh + kk], gpt2rt__cu_wg_desc(v_s + 16 * 64 * kk, 1024), 1, sm);
            }
            /* a group on every path (empty without P V): ptxas then sees S_n retired below on
               every path, and keeps the wgmmas asynchronous */
            gpt2rt__cu_wg_commit();
            if (kh == 0) gpt2rt__cu_wg_wait<1, 32 * KB>(s); /* S_n has landed */
            if (!do_s) continue;
            /* the softmax step of 64-key block n KB + kh from s[32 kh ..] (read only: only wgmmas
               write accumulator registers, else ptxas serializes the wgmmas), P rounded to X into
               pn, keys 16kk.. of the half being accumulator columns 8j.. of j = 2kk, 2kk+1, already
               the A layout (a0: row g keys 2t.., a1: row g+8, a2/a3: keys 2t+8..) */
            const int blk = n * KB + kh;
            if (blk > qw) continue;
            const float *sh = s + 32 * kh;
            const bool edge = blk == qw || (blk + 1) * 64 > TH;
            float x[32], mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < 32; i++) {
                x[i] = sh[i] * scale_log2;
                if (edge && gpt2rt__cu_att_hidden(q0 + 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1),
                                                  blk * 64 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), TH)) x[i] = -INFINITY;
                mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x[i]);
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mnew = fmaxf(m[r], mx[r]); /* finite: key 0 of tile 0 is never masked */
                cp[kh][r] = exp2f(m[r] - mnew);   /* 0 on the first block */
                m[r] = mnew;
                l[r] *= cp[kh][r];
            }
#pragma unroll
            for (int i = 0; i < 32; i++) {
                x[i] = exp2f(x[i] - m[(i >> 1) & 1]);
                l[(i >> 1) & 1] += x[i];
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int c = 0; c < 4; c++) pn[4 * kh + kk][c] = gpt2rt__cu_attn_pack(tag, x[8 * kk + 2 * c], x[8 * kk + 2 * c + 1]);
        }
        gpt2rt__cu_wg_wait<0, 32>(o);
        /* the P V products that read pa are done; O is rescaled for this tile's first half
           here (before the next S is issued: ptxas serializes the wgmmas otherwise) */
#pragma unroll
        for (int kk = 0; kk < 4 * KB; kk++)
#pragma unroll
            for (int c = 0; c < 4; c++) pa[kk][c] = pn[kk][c];
        if (do_s)
#pragma unroll
            for (int i = 0; i < 32; i++) o[i] *= cp[0][(i >> 1) & 1];
    }
    __syncthreads(); /* every warpgroup is done with the ring before the output is staged in it */

    /* finish: full row sums, lse, normalised output (each warp its own 16 rows of stride LD) */
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        int t = q0 + 16 * w + (lane >> 2) + 8 * r;
        if ((lane & 3) == 0 && t < T) lse[(int64_t)blockIdx.y * T + t] = (m[r] + log2f(l[r])) * GPT2RT__CU_ATT_LN2;
    }
    float oa[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) oa[i >> 2][i & 3] = o[i];
    const int row0 = q0 + 16 * w;
    gpt2rt__cu_attn_store_rows<X>(out + ((int64_t)b * T + row0) * C + h * 64, C, T - row0, oa, inv[0], inv[1],
                                  sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD, lane);
#else
    (void)out; (void)lse; (void)qkv; (void)T; (void)C; (void)NH; (void)scale_log2; (void)TH;
    __trap();
#endif
}

/* Launch the pipelined Hopper forward (HS = 64, X bf16 or fp16, 16-byte aligned pointers, a
   compute capability 9.0 device running an sm_90a image: the caller checks, as for
   gpt2rt__cuk_attn_fwd64_wg). Its dynamic shared memory beyond 48 KiB is allowed once per
   device (ordinals from 64 on: at every launch). */
template <typename X, int NWG = 2, int KB = 1, int STAGES = 4>
static cudaError_t gpt2rt__cu_attn_fwd_wgp_launch(X *out, float *lse, const X *qkv, int B, int T, int C, int NH,
                                                  cudaStream_t s, int TH) {
    const int smem = (NWG + 2 * STAGES * KB) * 8192 + 1024;
    static std::atomic<unsigned long long> allowed(0);
    int dev = -1;
    GPT2RT__CU_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || !(allowed.load() & bit)) {
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_fwd64_wgp<X, NWG, KB, STAGES>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        allowed.fetch_or(bit);
    }
    if (B <= 0 || T <= 0) return cudaSuccess;
    const float scale_log2 = (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E;
    dim3 g((unsigned)((T + 64 * NWG - 1) / (64 * NWG)), (unsigned)(B * NH));
    GPT2RT__LAUNCH(g, 128 * NWG, smem, s, gpt2rt__cuk_attn_fwd64_wgp<X, NWG, KB, STAGES>)(out, lse, qkv, T, C, NH, scale_log2, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

#endif /* GPT2RT__SRC_CUDA_ATTENTION_CUH */
