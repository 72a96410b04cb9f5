/* STAGING: pasted into gpt2rt.h (section 8 "CUDA backend", under __CUDACC__) once validated on a GPU.
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
     gpt2rt__cu_attention_forward<floatX>(out, lse, qkv, B, T, C, NH, stream)
     gpt2rt__cu_attention_backward<floatX>(dqkv, dout, qkv, out, lse, scratch_D, B, T, C, NH, stream)
   Requirements: C % NH == 0, HS <= 256 (else cudaErrorInvalidValue); B or T <= 0 is a no-op.

   Two paths, chosen per call:
   * fast (HS == 64, floatX bf16 or fp16, 16-byte aligned pointers): tensor cores through
     mma.sync.m16n8k16 (inline PTX, fp32 accumulation), ldmatrix from padded shared memory,
     cp.async double buffering. Tiles of 64 queries x 64 keys, 4 warps per CTA, each warp owns
     16 rows of the CTA's tile. The softmax probabilities P and dS are rounded to floatX before
     they enter a tensor-core product (as in FlashAttention 2); everything else is fp32.
   * generic (any HS <= 256, any storage type, fp32 always): one warp per row, lanes split the
     head dimension, the dot products are reduced with a xor butterfly. Plain fp32 SIMT code,
     close to the CPU reference (about 1e-6 relative).

   Causality: key tile kt is visited by query tile qt only when kt <= qt (tiles are square), the
   mask is applied only on the diagonal tile kt == qt. Rows/keys past T are zero-filled in
   shared memory and never stored.

   DETERMINISM (bitwise identical results run to run): no atomics anywhere. Every output
   element is written by exactly one thread and is a sum in a fixed order:
     forward  one CTA per (query tile, b, h), key tiles visited in increasing order.
     backward 1) D kernel: one warp per (b,t,h) row.
              2) dK,dV: one CTA per (key tile, b, h) owns its 64 rows of dK and dV and loops
                 over the query tiles qt = kt .. last in increasing order.
              3) dQ: one CTA per (query tile, b, h) owns its 64 rows of dQ and loops over the
                 key tiles kt = 0 .. qt in increasing order (recomputing S and dP; this costs
                 two extra tile products compared with atomically accumulated dQ).
     The generic path is the same with rows instead of tiles (one warp per q row for out and
     dQ, one warp per k row for dK,dV). */
#ifndef GPT2RT__CU_ATTENTION
#define GPT2RT__CU_ATTENTION
#include "cu_common.cuh"

/* ---------------------------------------------------------------------------------------------
   Fast path building blocks (HS = 64, 16-bit storage)
   ------------------------------------------------------------------------------------------- */
enum {
    GPT2RT__CU_ATT_TILE = 64,         /* queries per query tile = keys per key tile = HS */
    GPT2RT__CU_ATT_LD = 72,           /* smem row stride in 16-bit elements: 64 + 8 padding, so the
                                         8 rows an ldmatrix reads start in 8 different 16 B bank groups */
    GPT2RT__CU_ATT_TE = 64 * 72,      /* 16-bit elements per smem tile */
    GPT2RT__CU_ATT_THREADS = 128      /* 4 warps, 16 tile rows each */
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

/* 16-byte global -> shared copy, asynchronous; bytes = 0 zero-fills the destination */
__device__ __forceinline__ void gpt2rt__cu_attn_cp16(void *dst, const void *src, int bytes) {
#if GPT2RT__CU_ATT_SM80
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
#else
    (void)dst; (void)src; (void)bytes;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_cp_commit(void) {
#if GPT2RT__CU_ATT_SM80
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    __trap();
#endif
}
template <int N> __device__ __forceinline__ void gpt2rt__cu_attn_cp_wait(void) {
#if GPT2RT__CU_ATT_SM80
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
#if GPT2RT__CU_ATT_SM80
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
#else
    (void)p;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_ldsm_t(unsigned r[4], const uint16_t *p) {
#if GPT2RT__CU_ATT_SM80
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
#if GPT2RT__CU_ATT_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c; (void)a; (void)b0; (void)b1;
    __trap();
#endif
}
__device__ __forceinline__ void gpt2rt__cu_attn_mma(const __half *, float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#if GPT2RT__CU_ATT_SM80
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
                       int T, int C, int NH, float scale_log2) {
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

        /* scale to base 2, causal mask on the diagonal tile, row max over the quad */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float x = s[j][c] * scale_log2;
                if (kt == qt && 8 * j + 2 * (lane & 3) + (c & 1) > 16 * warp + (lane >> 2) + 8 * (c >> 1)) x = -INFINITY;
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
   Fast backward, dK and dV. grid (T/64 key tiles, B*NH), 128 threads, 55 KiB dynamic smem:
   K and V of this key tile, double-buffered Q, dO tiles and their lse (base 2) and D.
   Warp w owns keys k0+16w .. +15 and accumulates their dK, dV rows in registers over the
   query tiles qt = kt .. last, in order. All products are done transposed (keys as rows):
     S^T = K Q^T,  P^T = 2^(S^T scale log2e - lse2),  dV += P^T dO,
     dP^T = V dO^T,  dS^T = P^T (dP^T - D) scale,   dK += dS^T Q
   ------------------------------------------------------------------------------------------- */
#define GPT2RT__CU_ATT_BWD_SMEM (6 * GPT2RT__CU_ATT_TE * 2 + 4 * 64 * 4)

template <typename X>
__global__ void __launch_bounds__(GPT2RT__CU_ATT_THREADS)
gpt2rt__cuk_attn_bwd_dkdv64(X *dqkv,          /* (B,T,3C): writes the k and v columns */
                            const X *dout,    /* (B,T,C) */
                            const X *qkv,     /* (B,T,3C) */
                            const float *lse, /* (B,NH,T) */
                            const float *Dv,  /* (B,NH,T) */
                            int T, int C, int NH, float scale, float scale_log2) {
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    uint16_t *sK = (uint16_t *)gpt2rt__cu_attn_dsm, *sV = sK + GPT2RT__CU_ATT_TE;
    /* Q tile of buffer i at sK + (2+i)*TE, dO tile at sK + (4+i)*TE */
    float *sL = (float *)(sK + 6 * GPT2RT__CU_ATT_TE), *sD = sL + 128; /* [2][64] each */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kt = blockIdx.x, nqt = gridDim.x; /* first key tiles see the most query tiles */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, k0 = kt * 64;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;
    const float *lse_g = lse + (int64_t)blockIdx.y * T, *D_g = Dv + (int64_t)blockIdx.y * T;

    gpt2rt__cu_attn_load_tile(sK, k_g, k0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sV, v_g, k0, T, C3, tid);
    /* query tile qt into buffer i: Q, dO, lse*log2e (+inf past T, so P = 0 there), D */
#define GPT2RT__CU_ATT_PREFETCH_Q(qt_, i_) do { \
        gpt2rt__cu_attn_load_tile(sK + (2 + (i_)) * GPT2RT__CU_ATT_TE, q_g, (qt_) * 64, T, C3, tid); \
        gpt2rt__cu_attn_load_tile(sK + (4 + (i_)) * GPT2RT__CU_ATT_TE, do_g, (qt_) * 64, T, C, tid); \
        if (tid < 64) { int t_ = (qt_) * 64 + tid; \
            sL[64 * (i_) + tid] = t_ < T ? lse_g[t_] * GPT2RT__CU_ATT_LOG2E : INFINITY; \
            sD[64 * (i_) + tid] = t_ < T ? D_g[t_] : 0.0f; } \
        gpt2rt__cu_attn_cp_commit(); } while (0)
    GPT2RT__CU_ATT_PREFETCH_Q(kt, 0);

    float dk[8][4], dv[8][4]; /* this warp's 16 keys x 64 */
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) dk[j][c] = dv[j][c] = 0.0f;

    for (int qt = kt; qt < nqt; qt++) {
        const int buf = (qt - kt) & 1;
        if (qt + 1 < nqt) {
            GPT2RT__CU_ATT_PREFETCH_Q(qt + 1, buf ^ 1);
            gpt2rt__cu_attn_cp_wait<1>();
        } else {
            gpt2rt__cu_attn_cp_wait<0>();
        }
        __syncthreads();
        const uint16_t *sQ = sK + (2 + buf) * GPT2RT__CU_ATT_TE, *sdO = sK + (4 + buf) * GPT2RT__CU_ATT_TE;
        const float *sLb = sL + 64 * buf, *sDb = sD + 64 * buf;

        /* S^T (16 keys x 64 queries) = K Q^T */
        unsigned a[4][4];
        float s[8][4];
        gpt2rt__cu_attn_rows_a(a, sK, 16 * warp, lane);
        gpt2rt__cu_attn_mma_abt<X>(s, a, sQ, lane);
        /* P^T, zero where the query precedes the key (diagonal tile only) */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int ql = 8 * j + 2 * (lane & 3) + (c & 1), kl = 16 * warp + (lane >> 2) + 8 * (c >> 1);
                float p = exp2f(s[j][c] * scale_log2 - sLb[ql]);
                s[j][c] = (qt == kt && ql < kl) ? 0.0f : p;
            }
        /* dV (16 x 64) += P^T (16 x 64 queries) dO (64 queries x 64) */
        gpt2rt__cu_attn_mma_pm<X>(dv, s, sdO, lane);
        /* dP^T (16 keys x 64 queries) = V dO^T */
        float dp_[8][4];
        gpt2rt__cu_attn_rows_a(a, sV, 16 * warp, lane);
        gpt2rt__cu_attn_mma_abt<X>(dp_, a, sdO, lane);
        /* dS^T = P^T (dP^T - D) scale, in place of P^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[j][c] = s[j][c] * (dp_[j][c] - sDb[8 * j + 2 * (lane & 3) + (c & 1)]) * scale;
        /* dK (16 x 64) += dS^T (16 x 64 queries) Q (64 queries x 64) */
        gpt2rt__cu_attn_mma_pm<X>(dk, s, sQ, lane);
        __syncthreads(); /* buffer buf is refilled next iteration */
    }
#undef GPT2RT__CU_ATT_PREFETCH_Q

    /* each warp only ever read its own 16 rows of sK and sV: stage its results there */
    const int row0 = k0 + 16 * warp;
    X *dk_g = dqkv + ((int64_t)b * T + row0) * C3 + C + h * 64;
    gpt2rt__cu_attn_store_rows<X>(dk_g, C3, T - row0, dk, 1.0f, 1.0f, sK + 16 * warp * GPT2RT__CU_ATT_LD, lane);
    gpt2rt__cu_attn_store_rows<X>(dk_g + C, C3, T - row0, dv, 1.0f, 1.0f, sV + 16 * warp * GPT2RT__CU_ATT_LD, lane);
}

/* ---------------------------------------------------------------------------------------------
   Fast backward, dQ. grid (T/64 query tiles, B*NH), 128 threads, 54 KiB dynamic smem:
   Q and dO of this query tile, double-buffered K and V tiles. Warp w owns queries q0+16w ..
   and accumulates their dQ over the key tiles 0 .. qt, in order:
     S = Q K^T, P = 2^(S scale log2e - lse2), dP = dO V^T, dS = P (dP - D) scale, dQ += dS K
   ------------------------------------------------------------------------------------------- */
template <typename X>
__global__ void __launch_bounds__(GPT2RT__CU_ATT_THREADS)
gpt2rt__cuk_attn_bwd_dq64(X *dqkv,          /* (B,T,3C): writes the q columns */
                          const X *dout,    /* (B,T,C) */
                          const X *qkv,     /* (B,T,3C) */
                          const float *lse, /* (B,NH,T) */
                          const float *Dv,  /* (B,NH,T) */
                          int T, int C, int NH, float scale, float scale_log2) {
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    uint16_t *sQ = (uint16_t *)gpt2rt__cu_attn_dsm, *sdO = sQ + GPT2RT__CU_ATT_TE;
    /* K tile of buffer i at sQ + (2+i)*TE, V tile at sQ + (4+i)*TE */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qt = gridDim.x - 1 - blockIdx.x; /* longest rows first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * 64;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;

    gpt2rt__cu_attn_load_tile(sQ, q_g, q0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sdO, do_g, q0, T, C, tid);
    gpt2rt__cu_attn_load_tile(sQ + 2 * GPT2RT__CU_ATT_TE, k_g, 0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sQ + 4 * GPT2RT__CU_ATT_TE, v_g, 0, T, C3, tid);
    gpt2rt__cu_attn_cp_commit();

    float lse2[2], Dr[2]; /* rows lane/4 and lane/4 + 8; rows past T get P = 0 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = q0 + 16 * warp + (lane >> 2) + 8 * r;
        lse2[r] = t < T ? lse[(int64_t)blockIdx.y * T + t] * GPT2RT__CU_ATT_LOG2E : INFINITY;
        Dr[r] = t < T ? Dv[(int64_t)blockIdx.y * T + t] : 0.0f;
    }
    unsigned qf[4][4], df[4][4]; /* this warp's Q and dO rows as A operands */
    float dq[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const int buf = kt & 1;
        gpt2rt__cu_attn_kv_step(sQ + (3 - buf) * GPT2RT__CU_ATT_TE, sQ + (5 - buf) * GPT2RT__CU_ATT_TE, k_g, v_g, kt, qt,
                                T, C3, tid);
        const uint16_t *sK = sQ + (2 + buf) * GPT2RT__CU_ATT_TE, *sV = sQ + (4 + buf) * GPT2RT__CU_ATT_TE;
        if (kt == 0) {
            gpt2rt__cu_attn_rows_a(qf, sQ, 16 * warp, lane);
            gpt2rt__cu_attn_rows_a(df, sdO, 16 * warp, lane);
        }
        /* S = Q K^T and dP = dO V^T (16 queries x 64 keys) */
        float s[8][4], dp_[8][4];
        gpt2rt__cu_attn_mma_abt<X>(s, qf, sK, lane);
        gpt2rt__cu_attn_mma_abt<X>(dp_, df, sV, lane);
        /* dS = P (dP - D) scale, P zero above the diagonal */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int kl = 8 * j + 2 * (lane & 3) + (c & 1), ql = 16 * warp + (lane >> 2) + 8 * (c >> 1);
                float p = exp2f(s[j][c] * scale_log2 - lse2[c >> 1]);
                if (kt == qt && kl > ql) p = 0.0f;
                s[j][c] = p * (dp_[j][c] - Dr[c >> 1]) * scale;
            }
        /* dQ (16 x 64) += dS (16 x 64 keys) K (64 keys x 64) */
        gpt2rt__cu_attn_mma_pm<X>(dq, s, sK, lane);
        __syncthreads();
    }
    const int row0 = q0 + 16 * warp;
    gpt2rt__cu_attn_store_rows<X>(dqkv + ((int64_t)b * T + row0) * C3 + h * 64, C3, T - row0, dq, 1.0f, 1.0f,
                                  sQ + 16 * warp * GPT2RT__CU_ATT_LD, lane);
}

/* ---------------------------------------------------------------------------------------------
   D[b,h,t] = dout . out over the head's HS columns. One warp per (b,t,h) row (any HS, any type).
   ------------------------------------------------------------------------------------------- */
template <typename X>
__global__ void gpt2rt__cuk_attn_bwd_rowdot(float *Dv,       /* (B,NH,T) */
                                            const X *dout,   /* (B,T,C) */
                                            const X *out,    /* (B,T,C) */
                                            int B, int T, int C, int NH) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; /* (b,t,h) */
    const int lane = threadIdx.x & 31, HS = C / NH;
    if (row >= (int64_t)B * T * NH) return;
    const int h = (int)(row % NH);
    const int64_t bt = row / NH, b = bt / T, t = bt % T;
    const X *dy = dout + bt * C + h * HS, *y = out + bt * C + h * HS;
    float acc = 0.0f;
    for (int i = lane; i < HS; i += 32) acc += gpt2rt__cu_f(dy[i]) * gpt2rt__cu_f(y[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) Dv[(b * NH + h) * T + t] = acc;
}

/* ---------------------------------------------------------------------------------------------
   Generic path: one warp per row, lane owns head dims lane + 32 i (i < NPL = ceil(HS/32)).
   Dot products: per-lane partial sums, then a xor butterfly, which leaves the same bits in
   every lane (fp add is commutative) and the same order every run.
   ------------------------------------------------------------------------------------------- */
__device__ __forceinline__ float gpt2rt__cu_attn_warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* one warp per (b,h,t) query row; t runs backwards so long rows start first */
template <typename X, int NPL>
__global__ void __launch_bounds__(128)
gpt2rt__cuk_attn_fwd_generic(X *out, float *lse, const X *qkv, /* (B,T,C), (B,NH,T), (B,T,3C) */
                             int B, int T, int C, int NH, float scale) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, HS = C / NH;
    if (row >= (int64_t)B * NH * T) return;
    const int64_t bh = row / T, b = bh / NH, h = bh % NH, t = T - 1 - row % T, C3 = 3 * (int64_t)C;
    const X *q = qkv + (b * T + t) * C3 + h * HS;
    float qr[NPL], acc[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        qr[i] = d < HS ? gpt2rt__cu_f(q[d]) : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f; /* running max and sum of exp(x - m) */
    for (int64_t s = 0; s <= t; s++) {
        const X *k = qkv + (b * T + s) * C3 + C + h * HS, *v = k + C;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            int d = lane + 32 * i;
            if (d < HS) dot += qr[i] * gpt2rt__cu_f(k[d]);
        }
        float x = gpt2rt__cu_attn_warp_sum(dot) * scale;
        if (x > m) { /* warp-uniform: every lane holds the same x */
            float corr = expf(m - x);
            l *= corr;
#pragma unroll
            for (int i = 0; i < NPL; i++) acc[i] *= corr;
            m = x;
        }
        float p = expf(x - m);
        l += p;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            int d = lane + 32 * i;
            if (d < HS) acc[i] += p * gpt2rt__cu_f(v[d]);
        }
    }
    float inv = 1.0f / l;
    X *y = out + (b * T + t) * C + h * HS;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        if (d < HS) y[d] = gpt2rt__cu_to<X>(acc[i] * inv);
    }
    if (lane == 0) lse[bh * T + t] = m + logf(l);
}

/* dQ: one warp per (b,h,t) query row, keys s = 0..t in order */
template <typename X, int NPL>
__global__ void __launch_bounds__(128)
gpt2rt__cuk_attn_bwd_dq_generic(X *dqkv, const X *dout, const X *qkv, /* (B,T,3C), (B,T,C), (B,T,3C) */
                                const float *lse, const float *Dv,    /* (B,NH,T) each */
                                int B, int T, int C, int NH, float scale) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, HS = C / NH;
    if (row >= (int64_t)B * NH * T) return;
    const int64_t bh = row / T, b = bh / NH, h = bh % NH, t = T - 1 - row % T, C3 = 3 * (int64_t)C;
    const X *q = qkv + (b * T + t) * C3 + h * HS, *dy = dout + (b * T + t) * C + h * HS;
    const float L = lse[bh * T + t], Dt = Dv[bh * T + t];
    float qr[NPL], dyr[NPL], dq[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        qr[i] = d < HS ? gpt2rt__cu_f(q[d]) : 0.0f;
        dyr[i] = d < HS ? gpt2rt__cu_f(dy[d]) : 0.0f;
        dq[i] = 0.0f;
    }
    for (int64_t s = 0; s <= t; s++) {
        const X *k = qkv + (b * T + s) * C3 + C + h * HS, *v = k + C;
        float kr[NPL], d1 = 0.0f, d2 = 0.0f;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            int d = lane + 32 * i;
            kr[i] = d < HS ? gpt2rt__cu_f(k[d]) : 0.0f;
            d1 += qr[i] * kr[i];
            if (d < HS) d2 += dyr[i] * gpt2rt__cu_f(v[d]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            d1 += __shfl_xor_sync(0xffffffffu, d1, o);
            d2 += __shfl_xor_sync(0xffffffffu, d2, o);
        }
        float p = expf(d1 * scale - L), g = p * (d2 - Dt) * scale;
#pragma unroll
        for (int i = 0; i < NPL; i++) dq[i] += g * kr[i];
    }
    X *dqp = dqkv + (b * T + t) * C3 + h * HS;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        if (d < HS) dqp[d] = gpt2rt__cu_to<X>(dq[i]);
    }
}

/* dK, dV: one warp per (b,h,s) key row, queries t = s..T-1 in order */
template <typename X, int NPL>
__global__ void __launch_bounds__(128)
gpt2rt__cuk_attn_bwd_dkdv_generic(X *dqkv, const X *dout, const X *qkv, /* (B,T,3C), (B,T,C), (B,T,3C) */
                                  const float *lse, const float *Dv,    /* (B,NH,T) each */
                                  int B, int T, int C, int NH, float scale) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, HS = C / NH;
    if (row >= (int64_t)B * NH * T) return;
    const int64_t bh = row / T, b = bh / NH, h = bh % NH, s = row % T, C3 = 3 * (int64_t)C;
    const X *k = qkv + (b * T + s) * C3 + C + h * HS, *v = k + C;
    float kr[NPL], vr[NPL], dk[NPL], dv[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        kr[i] = d < HS ? gpt2rt__cu_f(k[d]) : 0.0f;
        vr[i] = d < HS ? gpt2rt__cu_f(v[d]) : 0.0f;
        dk[i] = dv[i] = 0.0f;
    }
    for (int64_t t = s; t < T; t++) {
        const X *q = qkv + (b * T + t) * C3 + h * HS, *dy = dout + (b * T + t) * C + h * HS;
        float qr[NPL], dyr[NPL], d1 = 0.0f, d2 = 0.0f;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            int d = lane + 32 * i;
            qr[i] = d < HS ? gpt2rt__cu_f(q[d]) : 0.0f;
            dyr[i] = d < HS ? gpt2rt__cu_f(dy[d]) : 0.0f;
            d1 += qr[i] * kr[i];
            d2 += dyr[i] * vr[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            d1 += __shfl_xor_sync(0xffffffffu, d1, o);
            d2 += __shfl_xor_sync(0xffffffffu, d2, o);
        }
        float p = expf(d1 * scale - lse[bh * T + t]), g = p * (d2 - Dv[bh * T + t]) * scale;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            dv[i] += p * dyr[i];
            dk[i] += g * qr[i];
        }
    }
    X *dkp = dqkv + (b * T + s) * C3 + C + h * HS;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        if (d < HS) { dkp[d] = gpt2rt__cu_to<X>(dk[i]); dkp[C + d] = gpt2rt__cu_to<X>(dv[i]); }
    }
}

/* ---------------------------------------------------------------------------------------------
   Host side
   ------------------------------------------------------------------------------------------- */
/* Tensor-core launches; only bf16 and fp16 have them (the float version reports
   cudaErrorNotSupported and is never called: see gpt2rt__cu_attn_use_fast). */
template <typename X> struct gpt2rt__cu_attn_fast {
    enum { available = 0 };
    static int built(void) { return 0; }
    static cudaError_t forward(X *, float *, const X *, int, int, int, int, cudaStream_t) { return cudaErrorNotSupported; }
    static cudaError_t backward(X *, const X *, const X *, const float *, const float *, int, int, int, int, cudaStream_t) {
        return cudaErrorNotSupported;
    }
};
template <typename X> struct gpt2rt__cu_attn_fast16 {
    enum { available = 1 };
    /* the kernels were compiled for sm_80 or newer (see GPT2RT__CU_ATT_SM80), and their
       image is the one this device runs */
    static int built(void) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, gpt2rt__cuk_attn_fwd64<X>) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
        return fa.ptxVersion >= 80;
    }
    static cudaError_t forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s) {
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
        float scale_log2 = (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E;
        gpt2rt__cuk_attn_fwd64<X><<<grid, GPT2RT__CU_ATT_THREADS, 0, s>>>(out, lse, qkv, T, C, NH, scale_log2);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t backward(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                int B, int T, int C, int NH, cudaStream_t s) {
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
        float scale = 1.0f / sqrtf(64.0f), scale_log2 = scale * GPT2RT__CU_ATT_LOG2E;
        const int smem_dkdv = GPT2RT__CU_ATT_BWD_SMEM, smem_dq = 6 * GPT2RT__CU_ATT_TE * 2;
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dkdv64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dkdv));
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dq));
        gpt2rt__cuk_attn_bwd_dkdv64<X><<<grid, GPT2RT__CU_ATT_THREADS, smem_dkdv, s>>>(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2);
        GPT2RT__CU_LAUNCHED();
        gpt2rt__cuk_attn_bwd_dq64<X><<<grid, GPT2RT__CU_ATT_THREADS, smem_dq, s>>>(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
};
template <> struct gpt2rt__cu_attn_fast<__nv_bfloat16> : gpt2rt__cu_attn_fast16<__nv_bfloat16> {};
template <> struct gpt2rt__cu_attn_fast<__half> : gpt2rt__cu_attn_fast16<__half> {};

/* fast path: 16-bit type, HS == 64, every pointer 16-byte aligned (the row strides C and 3C
   are then multiples of 8 elements), kernels built for sm_80+; allow_fast = 0 forces the generic
   path (lab cross-check) */
template <typename X>
static int gpt2rt__cu_attn_use_fast(int C, int NH, const void *a, const void *b, const void *c, int allow_fast) {
    return allow_fast && gpt2rt__cu_attn_fast<X>::available && C / NH == 64 &&
           ((uintptr_t)a % 16 | (uintptr_t)b % 16 | (uintptr_t)c % 16) == 0 && gpt2rt__cu_attn_fast<X>::built();
}
static inline int gpt2rt__cu_attn_npl(int HS) { return HS <= 32 ? 1 : HS <= 64 ? 2 : HS <= 128 ? 4 : 8; }

template <typename X>
static cudaError_t gpt2rt__cu_attention_forward_impl(X *out, float *lse, const X *qkv, int B, int T, int C, int NH,
                                                     cudaStream_t s, int allow_fast) {
    if (B <= 0 || T <= 0) return cudaSuccess;
    if (NH <= 0 || C <= 0 || C % NH != 0 || C / NH > 256) return cudaErrorInvalidValue;
    if (gpt2rt__cu_attn_use_fast<X>(C, NH, out, qkv, qkv, allow_fast))
        return gpt2rt__cu_attn_fast<X>::forward(out, lse, qkv, B, T, C, NH, s);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const unsigned blocks = gpt2rt__cu_blocks((int64_t)B * NH * T * 32, 128);
    switch (gpt2rt__cu_attn_npl(HS)) {
    case 1: gpt2rt__cuk_attn_fwd_generic<X, 1><<<blocks, 128, 0, s>>>(out, lse, qkv, B, T, C, NH, scale); break;
    case 2: gpt2rt__cuk_attn_fwd_generic<X, 2><<<blocks, 128, 0, s>>>(out, lse, qkv, B, T, C, NH, scale); break;
    case 4: gpt2rt__cuk_attn_fwd_generic<X, 4><<<blocks, 128, 0, s>>>(out, lse, qkv, B, T, C, NH, scale); break;
    default: gpt2rt__cuk_attn_fwd_generic<X, 8><<<blocks, 128, 0, s>>>(out, lse, qkv, B, T, C, NH, scale); break;
    }
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

template <typename X>
static cudaError_t gpt2rt__cu_attention_backward_impl(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse,
                                                      float *scratch_D, int B, int T, int C, int NH, cudaStream_t s,
                                                      int allow_fast) {
    if (B <= 0 || T <= 0) return cudaSuccess;
    if (NH <= 0 || C <= 0 || C % NH != 0 || C / NH > 256) return cudaErrorInvalidValue;
    gpt2rt__cuk_attn_bwd_rowdot<X><<<gpt2rt__cu_blocks((int64_t)B * T * NH * 32, 256), 256, 0, s>>>(scratch_D, dout, out, B, T, C, NH);
    GPT2RT__CU_LAUNCHED();
    if (gpt2rt__cu_attn_use_fast<X>(C, NH, dqkv, dout, qkv, allow_fast))
        return gpt2rt__cu_attn_fast<X>::backward(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, s);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const unsigned blocks = gpt2rt__cu_blocks((int64_t)B * NH * T * 32, 128);
#define GPT2RT__CU_ATT_GENERIC_BWD(npl_) do { \
        gpt2rt__cuk_attn_bwd_dkdv_generic<X, npl_><<<blocks, 128, 0, s>>>(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, scale); \
        GPT2RT__CU_LAUNCHED(); \
        gpt2rt__cuk_attn_bwd_dq_generic<X, npl_><<<blocks, 128, 0, s>>>(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, scale); \
        GPT2RT__CU_LAUNCHED(); } while (0)
    switch (gpt2rt__cu_attn_npl(HS)) {
    case 1: GPT2RT__CU_ATT_GENERIC_BWD(1); break;
    case 2: GPT2RT__CU_ATT_GENERIC_BWD(2); break;
    case 4: GPT2RT__CU_ATT_GENERIC_BWD(4); break;
    default: GPT2RT__CU_ATT_GENERIC_BWD(8); break;
    }
#undef GPT2RT__CU_ATT_GENERIC_BWD
    return cudaSuccess;
}

/* out (B,T,C), lse (B,NH,T) fp32 <- qkv (B,T,3C) */
template <typename X>
static cudaError_t gpt2rt__cu_attention_forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s) {
    return gpt2rt__cu_attention_forward_impl<X>(out, lse, qkv, B, T, C, NH, s, 1);
}

/* dqkv (B,T,3C) (overwritten) <- dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T);
   scratch_D: B*NH*T floats, clobbered */
template <typename X>
static cudaError_t gpt2rt__cu_attention_backward(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse,
                                                 float *scratch_D, int B, int T, int C, int NH, cudaStream_t s) {
    return gpt2rt__cu_attention_backward_impl<X>(dqkv, dout, qkv, out, lse, scratch_D, B, T, C, NH, s, 1);
}
#endif
