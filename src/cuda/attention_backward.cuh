/* cuda/attention_backward.cuh - 8.3 Attention: the backward kernels, the host side, attention over the KV cache
   may call: cuda/attention.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_ATTENTION_BACKWARD_CUH
#define GPT2RT__SRC_CUDA_ATTENTION_BACKWARD_CUH
#include "attention.cuh"

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
                            int T, int C, int NH, float scale, float scale_log2, int TH) {
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
        /* P^T, zero where the key is hidden from the query (causal: the diagonal tile only) */
        const bool edge = kt == qt || (kt + 1) * 64 > TH;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int ql = 8 * j + 2 * (lane & 3) + (c & 1), kl = 16 * warp + (lane >> 2) + 8 * (c >> 1);
                float p = exp2f(s[j][c] * scale_log2 - sLb[ql]);
                s[j][c] = edge && gpt2rt__cu_att_hidden(qt * 64 + ql, k0 + kl, TH) ? 0.0f : p;
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
   Hopper backward, dK and dV (wgmma, sm_90a; gpt2rt__cuk_attn_bwd_dq64_wg is its dQ pass). grid
   (ceil(T / (64 NWG)) key blocks, B*NH), NWG warpgroups per CTA; warpgroup wg owns the 64 keys
   of key tile kw = NWG * block + wg and accumulates their dK, dV (64 x 64 fp32 each) over the
   query tiles qt = kw .. last in increasing order. Dynamic smem GPT2RT__CU_ATT_BWD_WG_SMEM
   (66 KiB + 1 KiB to align to 1024 bytes for NWG = 2): the NWG K and V tiles, Q and dO
   double-buffered (cp.async), 128-byte swizzled; lse (base 2) and D of the query tile.
   Per query tile, transposed products as in the mma.sync kernel (keys as rows):
     S^T = K Q^T and dP^T = V dO^T: 8 wgmma from descriptors (K-major), issued together;
     P^T = 2^(S^T scale log2e - lse2) (0 where hidden); dS^T = P^T (dP^T - D) scale;
     dV += P^T dO and dK += dS^T Q: P^T and dS^T rounded to X as register A operands, dO and Q
     as MN-major B operands (imm-trans-b).
   Numerics as the mma.sync kernel's (P^T and dS^T rounded to X, everything else fp32); the
   hardware's order inside one wgmma is not documented, so the bits may differ from it.
   ------------------------------------------------------------------------------------------- */
#define GPT2RT__CU_ATT_BWD_WG_SMEM ((2 * GPT2RT__CU_ATT_NWG + 4) * 8192 + 4 * 64 * 4 + 1024)

template <typename X, int NWG>
__global__ void __launch_bounds__(128 * NWG)
gpt2rt__cuk_attn_bwd_dkdv64_wg(X *dqkv,          /* (B,T,3C): writes the k and v columns */
                               const X *dout,    /* (B,T,C) */
                               const X *qkv,     /* (B,T,3C) */
                               const float *lse, /* (B,NH,T) */
                               const float *Dv,  /* (B,NH,T) */
                               int T, int C, int NH, float scale, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG };
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    /* the swizzle is a function of the shared address: tiles start on 1024-byte boundaries */
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(gpt2rt__cu_attn_dsm) & 1023u;
    uint16_t *sm = (uint16_t *)(gpt2rt__cu_attn_dsm + (mis ? 1024 - mis : 0));
    uint16_t *sKa = sm, *sVa = sm + NWG * TILE, *sQa = sm + 2 * NWG * TILE, *sdOa = sQa + 2 * TILE; /* buffer i: + i * TILE */
    float *sL = (float *)(sdOa + 2 * TILE), *sD = sL + 128; /* [2][64] each */
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int nqt = (T + 63) / 64, kw = NWG * blockIdx.x + wg, k0 = kw * 64, qfirst = NWG * blockIdx.x;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;
    const float *lse_g = lse + (int64_t)blockIdx.y * T, *D_g = Dv + (int64_t)blockIdx.y * T;
    const uint16_t *sK = sKa + wg * TILE, *sV = sVa + wg * TILE;

    for (int i = 0; i < NWG; i++) {
        gpt2rt__cu_attn_load_tile_sw(sKa + i * TILE, k_g, (qfirst + i) * 64, T, C3, tid, NT);
        gpt2rt__cu_attn_load_tile_sw(sVa + i * TILE, v_g, (qfirst + i) * 64, T, C3, tid, NT);
    }
    /* query tile qt into buffer i: Q, dO, lse*log2e (+inf past T, so P = 0 there), D */
#define GPT2RT__CU_ATT_PREFETCH_QW(qt_, i_) do { \
        gpt2rt__cu_attn_load_tile_sw(sQa + (i_) * TILE, q_g, (qt_) * 64, T, C3, tid, NT); \
        gpt2rt__cu_attn_load_tile_sw(sdOa + (i_) * TILE, do_g, (qt_) * 64, T, C, tid, NT); \
        if (tid < 64) { int t_ = (qt_) * 64 + tid; \
            sL[64 * (i_) + tid] = t_ < T ? lse_g[t_] * GPT2RT__CU_ATT_LOG2E : INFINITY; \
            sD[64 * (i_) + tid] = t_ < T ? D_g[t_] : 0.0f; } \
        gpt2rt__cu_attn_cp_commit(); } while (0)
    GPT2RT__CU_ATT_PREFETCH_QW(qfirst, 0);

    const X *tag = 0;
    float dk[32], dv[32]; /* accumulator layout: row (key) 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1) */
#pragma unroll
    for (int i = 0; i < 32; i++) dk[i] = dv[i] = 0.0f;
    const bool active = k0 < T; /* warpgroup-uniform */

    for (int qt = qfirst; qt < nqt; qt++) {
        const int buf = (qt - qfirst) & 1;
        if (qt + 1 < nqt) {
            GPT2RT__CU_ATT_PREFETCH_QW(qt + 1, buf ^ 1);
            gpt2rt__cu_attn_cp_wait<1>();
        } else {
            gpt2rt__cu_attn_cp_wait<0>();
        }
        gpt2rt__cu_wg_proxy_fence();
        __syncthreads();
        if (active && qt >= kw) {
            const uint16_t *sQ = sQa + buf * TILE, *sdO = sdOa + buf * TILE;
            const float *sLb = sL + 64 * buf, *sDb = sD + 64 * buf;
            float s[32], dp[32];
            /* S^T (64 keys x 64 queries) = K Q^T, dP^T = V dO^T */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sK + 16 * kk, 16), gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), kk > 0, sm);
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                gpt2rt__cu_wg_ss<X>(dp, gpt2rt__cu_wg_desc(sV + 16 * kk, 16), gpt2rt__cu_wg_desc(sdO + 16 * kk, 16), kk > 0, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(s);
            gpt2rt__cu_wg_wait0(dp);
            /* P^T, zero where the key is hidden from the query (causal: the diagonal tile only);
               then dS^T = P^T (dP^T - D) scale */
            const bool edge = kw == qt || (kw + 1) * 64 > TH;
            unsigned pa[4][4], da[4][4];
#pragma unroll
            for (int i = 0; i < 32; i++) {
                int ql = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), kl = 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1);
                float p = exp2f(s[i] * scale_log2 - sLb[ql]);
                s[i] = edge && gpt2rt__cu_att_hidden(qt * 64 + ql, k0 + kl, TH) ? 0.0f : p;
                dp[i] = s[i] * (dp[i] - sDb[ql]) * scale;
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    pa[kk][r] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
                    da[kk][r] = gpt2rt__cu_attn_pack(tag, dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
                }
            /* dV += P^T dO, dK += dS^T Q: 16 queries = 16 rows of 128 bytes of dO, Q */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dv, pa[kk], gpt2rt__cu_wg_desc(sdO + 16 * 64 * kk, 1024), 1, sm);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dk, da[kk], gpt2rt__cu_wg_desc(sQ + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(dv);
            gpt2rt__cu_wg_wait0(dk);
        }
        __syncthreads(); /* buffer buf is refilled next iteration */
    }
#undef GPT2RT__CU_ATT_PREFETCH_QW

    /* every read of smem is done: each warp stages its 16 rows (stride LD) at its own place */
    float ka[8][4], va[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) { ka[i >> 2][i & 3] = dk[i]; va[i >> 2][i & 3] = dv[i]; }
    const int row0 = k0 + 16 * w;
    X *dk_g = dqkv + ((int64_t)b * T + row0) * C3 + C + h * 64;
    uint16_t *stage = sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD;
    gpt2rt__cu_attn_store_rows<X>(dk_g, C3, T - row0, ka, 1.0f, 1.0f, stage, lane);
    gpt2rt__cu_attn_store_rows<X>(dk_g + C, C3, T - row0, va, 1.0f, 1.0f, stage, lane);
#else
    (void)dqkv; (void)dout; (void)qkv; (void)lse; (void)Dv; (void)T; (void)C; (void)NH; (void)scale; (void)scale_log2; (void)TH;
    __trap();
#endif
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
                          int T, int C, int NH, float scale, float scale_log2, int TH) {
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
        /* dS = P (dP - D) scale, P zero where the key is hidden (causal: above the diagonal) */
        const bool edge = kt == qt || (kt + 1) * 64 > TH;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int kl = 8 * j + 2 * (lane & 3) + (c & 1), ql = 16 * warp + (lane >> 2) + 8 * (c >> 1);
                float p = exp2f(s[j][c] * scale_log2 - lse2[c >> 1]);
                if (edge && gpt2rt__cu_att_hidden(q0 + ql, kt * 64 + kl, TH)) p = 0.0f;
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
   Fast backward, dQ over RT query tiles per CTA: grid (ceil(T / (64 RT)), B*NH), 128 threads,
   (2 RT + 4) tiles of dynamic smem (Q and dO of each query tile, K and V double-buffered).
   Warp w owns rows 16w .. of each query tile qt0 + r, so every K and V fragment it reads feeds
   RT products; the Q and dO A operands are read from shared memory at each use (registers
   hold RT tiles' S, dP and dQ). Row tile r takes key tiles 0 .. qt0 + r. Each row's arithmetic
   is gpt2rt__cuk_attn_bwd_dq64's in the same order: dQ is the same bits.
   ------------------------------------------------------------------------------------------- */
template <typename X, int RT>
__device__ __forceinline__ void gpt2rt__cu_attn_mma_abt_rt_s(float s[RT][8][4], const uint16_t *A, const uint16_t *M,
                                                             int r0, int warp, int lane) {
    const X *tag = 0;
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int j = 0; j < 8; j++) s[r][j][0] = s[r][j][1] = s[r][j][2] = s[r][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        unsigned a[RT][4];
#pragma unroll
        for (int r = 0; r < RT; r++)
            if (r >= r0) gpt2rt__cu_attn_frag_a(a[r], A + r * 2 * GPT2RT__CU_ATT_TE, 16 * warp, 16 * kk, lane);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            unsigned bb[4];
            gpt2rt__cu_attn_frag_b(bb, M, 16 * np, 16 * kk, lane);
#pragma unroll
            for (int r = 0; r < RT; r++)
                if (r >= r0) {
                    gpt2rt__cu_attn_mma(tag, s[r][2 * np], a[r], bb[0], bb[1]);
                    gpt2rt__cu_attn_mma(tag, s[r][2 * np + 1], a[r], bb[2], bb[3]);
                }
        }
    }
}
template <typename X, int RT>
__global__ void __launch_bounds__(GPT2RT__CU_ATT_THREADS)
gpt2rt__cuk_attn_bwd_dq64_rt(X *dqkv,          /* (B,T,3C): writes the q columns */
                             const X *dout,    /* (B,T,C) */
                             const X *qkv,     /* (B,T,3C) */
                             const float *lse, /* (B,NH,T) */
                             const float *Dv,  /* (B,NH,T) */
                             int T, int C, int NH, float scale, float scale_log2, int TH) {
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    uint16_t *sQ = (uint16_t *)gpt2rt__cu_attn_dsm; /* Q of row tile r at sQ + 2r TE, dO at sQ + (2r+1) TE */
    uint16_t *sK = sQ + 2 * RT * GPT2RT__CU_ATT_TE, *sV = sK + 2 * GPT2RT__CU_ATT_TE; /* buffer i: + i * TE */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qt0 = RT * qb, last = qt0 + RT - 1 < ntile - 1 ? qt0 + RT - 1 : ntile - 1;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;

#pragma unroll
    for (int r = 0; r < RT; r++) {
        gpt2rt__cu_attn_load_tile(sQ + 2 * r * GPT2RT__CU_ATT_TE, q_g, (qt0 + r) * 64, T, C3, tid);
        gpt2rt__cu_attn_load_tile(sQ + (2 * r + 1) * GPT2RT__CU_ATT_TE, do_g, (qt0 + r) * 64, T, C, tid);
    }
    gpt2rt__cu_attn_load_tile(sK, k_g, 0, T, C3, tid);
    gpt2rt__cu_attn_load_tile(sV, v_g, 0, T, C3, tid);
    gpt2rt__cu_attn_cp_commit();

    float lse2[RT][2], Dr[RT][2]; /* rows lane/4 and lane/4 + 8 of each tile; rows past T get P = 0 */
    float dq[RT][8][4];
#pragma unroll
    for (int r = 0; r < RT; r++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int t = (qt0 + r) * 64 + 16 * warp + (lane >> 2) + 8 * i;
            lse2[r][i] = t < T ? lse[(int64_t)blockIdx.y * T + t] * GPT2RT__CU_ATT_LOG2E : INFINITY;
            Dr[r][i] = t < T ? Dv[(int64_t)blockIdx.y * T + t] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) dq[r][j][0] = dq[r][j][1] = dq[r][j][2] = dq[r][j][3] = 0.0f;
    }

    for (int kt = 0; kt <= last; kt++) {
        const int buf = kt & 1;
        gpt2rt__cu_attn_kv_step(sK + (1 - buf) * GPT2RT__CU_ATT_TE, sV + (1 - buf) * GPT2RT__CU_ATT_TE, k_g, v_g, kt,
                                last, T, C3, tid);
        const uint16_t *cK = sK + buf * GPT2RT__CU_ATT_TE, *cV = sV + buf * GPT2RT__CU_ATT_TE;
        const int r0 = kt > qt0 ? kt - qt0 : 0; /* row tiles r0 .. RT-1 see key tile kt */
        /* S = Q K^T and dP = dO V^T (16 queries x 64 keys, each row tile) */
        float s[RT][8][4], dp_[RT][8][4];
        gpt2rt__cu_attn_mma_abt_rt_s<X, RT>(s, sQ, cK, r0, warp, lane);
        gpt2rt__cu_attn_mma_abt_rt_s<X, RT>(dp_, sQ + GPT2RT__CU_ATT_TE, cV, r0, warp, lane);
        /* dS = P (dP - D) scale, P zero where the key is hidden */
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const int q0 = (qt0 + r) * 64;
            const bool edge = kt == qt0 + r || (kt + 1) * 64 > TH;
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int kl = 8 * j + 2 * (lane & 3) + (c & 1), ql = 16 * warp + (lane >> 2) + 8 * (c >> 1);
                    float p = exp2f(s[r][j][c] * scale_log2 - lse2[r][c >> 1]);
                    if (edge && gpt2rt__cu_att_hidden(q0 + ql, kt * 64 + kl, TH)) p = 0.0f;
                    s[r][j][c] = p * (dp_[r][j][c] - Dr[r][c >> 1]) * scale;
                }
        }
        /* dQ (16 x 64) += dS (16 x 64 keys) K (64 keys x 64), each row tile */
        gpt2rt__cu_attn_mma_pm_rt<X, RT>(dq, s, cK, r0, lane);
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int row0 = (qt0 + r) * 64 + 16 * warp;
        if (row0 - 16 * warp >= T) break; /* warp-uniform */
        gpt2rt__cu_attn_store_rows<X>(dqkv + ((int64_t)b * T + row0) * C3 + h * 64, C3, T - row0, dq[r], 1.0f, 1.0f,
                                      sQ + 16 * warp * GPT2RT__CU_ATT_LD, lane);
    }
}
/* launches gpt2rt__cuk_attn_bwd_dq64_rt<X, RT> (HS 64; D already computed); its dynamic shared
   memory is allowed once per device (ordinals from 64 on: at every launch) */
template <typename X, int RT>
static cudaError_t gpt2rt__cu_attn_bwd_dq_rt_launch(X *dqkv, const X *dout, const X *qkv, const float *lse,
                                                    const float *Dv, int B, int T, int C, int NH, cudaStream_t s, int TH) {
    static std::atomic<unsigned long long> smem_set;
    const int smem = (2 * RT + 4) * GPT2RT__CU_ATT_TE * 2;
    int dev = -1;
    GPT2RT__CU_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || !(smem_set.load() & bit)) {
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64_rt<X, RT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        smem_set.fetch_or(bit);
    }
    const float scale = 1.0f / sqrtf(64.0f), scale_log2 = scale * GPT2RT__CU_ATT_LOG2E;
    dim3 grid((unsigned)((T + 64 * RT - 1) / (64 * RT)), (unsigned)(B * NH));
    GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, smem, s, gpt2rt__cuk_attn_bwd_dq64_rt<X, RT>)(dqkv, dout, qkv, lse, Dv, T, C, NH,
                                                                                              scale, scale_log2, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---------------------------------------------------------------------------------------------
   Hopper backward, dQ (wgmma, sm_90a): grid (ceil(T / (64 NWG)) query blocks, B*NH), NWG
   warpgroups per CTA; warpgroup wg owns the 64 query rows of query tile qw = NWG * block + wg
   (blocks in reverse: longest rows first), warp w of it rows 16w..16w+15, and accumulates
   their dQ (64 x 64 fp32) over the key tiles kt = 0 .. qw in increasing order. Dynamic smem
   GPT2RT__CU_ATT_BWD_DQ_WG_SMEM (64 KiB + 1 KiB to align to 1024 bytes for NWG = 2): the NWG
   Q and dO tiles, K and V double-buffered (cp.async, one tile ahead) and shared by the
   warpgroups, all 128-byte swizzled; lse (base 2) and D of each thread's two rows in registers.
   Per key tile, each warpgroup:
     S = Q K^T and dP = dO V^T: 8 wgmma from descriptors (K-major), issued together;
     P = 2^(S scale log2e - lse2) (0 where hidden); dS = P (dP - D) scale;
     dQ += dS K: dS rounded to X as the register A operand, K as an MN-major B (imm-trans-b).
   Numerics as the mma.sync kernel's (dS rounded to X before dS K, everything else fp32);
   the hardware's order inside one wgmma is not documented, so the bits may differ from it
   (under the emulator they are the same). Run to run the same bits: no atomics, every dQ
   row written by one thread group, key tiles summed in a fixed order.
   ------------------------------------------------------------------------------------------- */
#define GPT2RT__CU_ATT_BWD_DQ_WG_SMEM ((2 * GPT2RT__CU_ATT_NWG + 4) * 8192 + 1024)

template <typename X, int NWG>
__global__ void __launch_bounds__(128 * NWG)
gpt2rt__cuk_attn_bwd_dq64_wg(X *dqkv,          /* (B,T,3C): writes the q columns */
                             const X *dout,    /* (B,T,C) */
                             const X *qkv,     /* (B,T,3C) */
                             const float *lse, /* (B,NH,T) */
                             const float *Dv,  /* (B,NH,T) */
                             int T, int C, int NH, float scale, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG };
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    /* the swizzle is a function of the shared address: tiles start on 1024-byte boundaries */
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(gpt2rt__cu_attn_dsm) & 1023u;
    uint16_t *sm = (uint16_t *)(gpt2rt__cu_attn_dsm + (mis ? 1024 - mis : 0));
    uint16_t *sQa = sm, *sdOa = sm + NWG * TILE, *sK = sm + 2 * NWG * TILE, *sV = sK + 2 * TILE; /* buffer i: + i * TILE */
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qw = NWG * qb + wg, q0 = qw * 64, last = NWG * qb + NWG - 1 < ntile - 1 ? NWG * qb + NWG - 1 : ntile - 1;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;
    const uint16_t *sQ = sQa + wg * TILE, *sdO = sdOa + wg * TILE;

    for (int i = 0; i < NWG; i++) {
        gpt2rt__cu_attn_load_tile_sw(sQa + i * TILE, q_g, (NWG * qb + i) * 64, T, C3, tid, NT);
        gpt2rt__cu_attn_load_tile_sw(sdOa + i * TILE, do_g, (NWG * qb + i) * 64, T, C, tid, NT);
    }
    gpt2rt__cu_attn_load_tile_sw(sK, k_g, 0, T, C3, tid, NT);
    gpt2rt__cu_attn_load_tile_sw(sV, v_g, 0, T, C3, tid, NT);
    gpt2rt__cu_attn_cp_commit();

    float lse2[2], Dr[2]; /* rows 16w + lane/4 and + 8; rows past T get P = 0 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = q0 + 16 * w + (lane >> 2) + 8 * r;
        lse2[r] = t < T ? lse[(int64_t)blockIdx.y * T + t] * GPT2RT__CU_ATT_LOG2E : INFINITY;
        Dr[r] = t < T ? Dv[(int64_t)blockIdx.y * T + t] : 0.0f;
    }
    const X *tag = 0;
    float dq[32]; /* accumulator layout: row (query) 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1) */
#pragma unroll
    for (int i = 0; i < 32; i++) dq[i] = 0.0f;
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
            float s[32], dp[32];
            /* S = Q K^T, dP = dO V^T (64 queries x 64 keys) */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), gpt2rt__cu_wg_desc(k_s + 16 * kk, 16), kk > 0, sm);
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                gpt2rt__cu_wg_ss<X>(dp, gpt2rt__cu_wg_desc(sdO + 16 * kk, 16), gpt2rt__cu_wg_desc(v_s + 16 * kk, 16), kk > 0, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(s);
            gpt2rt__cu_wg_wait0(dp);
            /* dS = P (dP - D) scale, P zero where the key is hidden (causal: the diagonal tile only) */
            const bool edge = kt == qw || (kt + 1) * 64 > TH;
            unsigned da[4][4];
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int r = (i >> 1) & 1;
                int kl = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), ql = 16 * w + (lane >> 2) + 8 * r;
                float p = exp2f(s[i] * scale_log2 - lse2[r]);
                if (edge && gpt2rt__cu_att_hidden(q0 + ql, kt * 64 + kl, TH)) p = 0.0f;
                dp[i] = p * (dp[i] - Dr[r]) * scale;
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) da[kk][r] = gpt2rt__cu_attn_pack(tag, dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
            /* dQ += dS K: 16 keys = 16 rows of 128 bytes of K */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dq, da[kk], gpt2rt__cu_wg_desc(k_s + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
            gpt2rt__cu_wg_wait0(dq);
        }
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }

    /* every read of smem is done: each warp stages its 16 rows (stride LD) at its own place */
    float qa[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) qa[i >> 2][i & 3] = dq[i];
    const int row0 = q0 + 16 * w;
    gpt2rt__cu_attn_store_rows<X>(dqkv + ((int64_t)b * T + row0) * C3 + h * 64, C3, T - row0, qa, 1.0f, 1.0f,
                                  sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD, lane);
#else
    (void)dqkv; (void)dout; (void)qkv; (void)lse; (void)Dv; (void)T; (void)C; (void)NH; (void)scale; (void)scale_log2; (void)TH;
    __trap();
#endif
}
/* ---------------------------------------------------------------------------------------------
   Hopper backward, pipelined (wgmma, sm_90a): the same two passes, sums and roundings as
   gpt2rt__cuk_attn_bwd_dkdv64_wg and gpt2rt__cuk_attn_bwd_dq64_wg, with each warpgroup
   keeping the tensor cores busy while it does its elementwise work, and loads two tiles ahead:
   - The streamed tiles (Q, dO, lse, D for dK,dV; K, V for dQ) sit in a 3-stage ring in
     dynamic smem. Tile i+2 is requested right after the one CTA barrier of step i, when
     every warpgroup has retired the products that read stage (i+2) % 3 = (i-1) % 3; tile
     i+1 landed during step i. lse and D of tile i+2 are read into registers at the start of
     step i and stored after that barrier.
   - Each product is its own commit group, and a warpgroup waits with wait_group 1 where one
     may stay in flight. dK,dV per query tile: [S^T, dP^T] were issued in the previous step;
     wait 1 (S^T done) -> P^T -> issue dV += P^T dO; wait 1 (dP^T done, dV in flight) ->
     dS^T -> issue dK += dS^T Q; barrier; issue S^T, dP^T of the next tile (dV, dK still in
     flight behind them). dQ per key tile: wait 1 (S done, dP in flight) -> P; wait 0 -> dS
     -> issue dQ += dS K; barrier; issue S, dP of the next tile.
   Every accumulation keeps its order (tiles in increasing order, 16 at a time in k), so the
   bits are those of the wg kernels. Registers an in-flight wgmma reads (the A operands P^T,
   dS^T, dS) or writes (accumulators) are touched only after the wait that retires it.
   Dynamic smem GPT2RT__CU_ATT_BWD_WGP_SMEM(NWG) / _DQ_SMEM(NWG): 82.5 / 81 KiB for NWG = 2
   (97 KiB for the dQ pass with NWG = 3).
   ------------------------------------------------------------------------------------------- */
#define GPT2RT__CU_ATT_BWD_WGP_SMEM(nwg) ((2 * (nwg) + 6) * 8192 + 6 * 64 * 4 + 1024)
#define GPT2RT__CU_ATT_BWD_WGP_DQ_SMEM(nwg) ((2 * (nwg) + 6) * 8192 + 1024)

/* wait until every committed wgmma group but the newest N is done */
template <int N> __device__ __forceinline__ void gpt2rt__cu_wg_waitn(void) {
#ifdef GPT2RT_CUDA_EMU
    gpt2rt_emu_wgmma_wait(N);
#elif GPT2RT__CU_ATT_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}
/* after the wait that retires a wgmma: its accumulator d may have changed, and its register
   A operand a was live until here (neither moved across the wait by the compiler) */
__device__ __forceinline__ void gpt2rt__cu_wg_landed(float d[32]) {
#if !defined(GPT2RT_CUDA_EMU) && GPT2RT__CU_ATT_SM90A
#pragma unroll
    for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
#endif
}
__device__ __forceinline__ void gpt2rt__cu_wg_held(unsigned a[4][4]) {
#if !defined(GPT2RT_CUDA_EMU) && GPT2RT__CU_ATT_SM90A
#pragma unroll
    for (int i = 0; i < 16; i++) asm volatile("" : "+r"(a[i >> 2][i & 3])::"memory");
#else
    (void)a;
#endif
}

/* dK,dV: grid, ownership and outputs as gpt2rt__cuk_attn_bwd_dkdv64_wg */
template <typename X, int NWG>
__global__ void __launch_bounds__(128 * NWG, 1)
gpt2rt__cuk_attn_bwd_dkdv64_wgp(X *dqkv,          /* (B,T,3C): writes the k and v columns */
                                const X *dout,    /* (B,T,C) */
                                const X *qkv,     /* (B,T,3C) */
                                const float *lse, /* (B,NH,T) */
                                const float *Dv,  /* (B,NH,T) */
                                int T, int C, int NH, float scale, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG };
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(gpt2rt__cu_attn_dsm) & 1023u;
    uint16_t *sm = (uint16_t *)(gpt2rt__cu_attn_dsm + (mis ? 1024 - mis : 0));
    uint16_t *sKa = sm, *sVa = sm + NWG * TILE, *sQa = sm + 2 * NWG * TILE, *sdOa = sQa + 3 * TILE; /* stage i: + i * TILE */
    float *sL = (float *)(sdOa + 3 * TILE), *sD = sL + 3 * 64; /* [3][64] each */
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int nqt = (T + 63) / 64, kw = NWG * blockIdx.x + wg, k0 = kw * 64, qfirst = NWG * blockIdx.x;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;
    const float *lse_g = lse + (int64_t)blockIdx.y * T, *D_g = Dv + (int64_t)blockIdx.y * T;
    const uint16_t *sK = sKa + wg * TILE, *sV = sVa + wg * TILE;

    for (int i = 0; i < NWG; i++) {
        gpt2rt__cu_attn_load_tile_sw(sKa + i * TILE, k_g, (qfirst + i) * 64, T, C3, tid, NT);
        gpt2rt__cu_attn_load_tile_sw(sVa + i * TILE, v_g, (qfirst + i) * 64, T, C3, tid, NT);
    }
    /* query tile qt's lse*log2e (+inf past T, so P = 0 there) and D, for thread tid < 64 */
#define GPT2RT__CU_ATT_LSE_D(qt_, l_, d_) do { int t_ = (qt_) * 64 + tid; \
        l_ = t_ < T ? lse_g[t_] * GPT2RT__CU_ATT_LOG2E : INFINITY; d_ = t_ < T ? D_g[t_] : 0.0f; } while (0)
    /* query tile qt's Q and dO into stage i (cp.async, one group) */
#define GPT2RT__CU_ATT_FETCH_QW(qt_, i_) do { \
        gpt2rt__cu_attn_load_tile_sw(sQa + (i_) * TILE, q_g, (qt_) * 64, T, C3, tid, NT); \
        gpt2rt__cu_attn_load_tile_sw(sdOa + (i_) * TILE, do_g, (qt_) * 64, T, C, tid, NT); \
        gpt2rt__cu_attn_cp_commit(); } while (0)
    float ln = 0.0f, dn = 0.0f;
    for (int i = 0; i < 2 && qfirst + i < nqt; i++) {
        if (tid < 64) { GPT2RT__CU_ATT_LSE_D(qfirst + i, ln, dn); sL[64 * i + tid] = ln; sD[64 * i + tid] = dn; }
        GPT2RT__CU_ATT_FETCH_QW(qfirst + i, i);
    }
    if (qfirst + 1 < nqt) gpt2rt__cu_attn_cp_wait<1>(); else gpt2rt__cu_attn_cp_wait<0>();
    gpt2rt__cu_wg_proxy_fence();
    __syncthreads();

    const X *tag = 0;
    float dk[32], dv[32], s[32], dp[32]; /* accumulator layout: row (key) 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1) */
    unsigned pa[4][4], da[4][4];
#pragma unroll
    for (int i = 0; i < 32; i++) dk[i] = dv[i] = 0.0f;
    gpt2rt__cu_wg_landed(dk); /* the zeros are set before the first wgmma is issued, not sunk past it */
    gpt2rt__cu_wg_landed(dv);
    /* S^T (64 keys x 64 queries) = K Q^T, dP^T = V dO^T of the tile in stage st: two groups */
#define GPT2RT__CU_ATT_ISSUE_SDP(st_) do { \
        const uint16_t *q_s = sQa + (st_) * TILE, *do_s = sdOa + (st_) * TILE; \
        gpt2rt__cu_wg_fence(); \
        _Pragma("unroll") for (int kk = 0; kk < 4; kk++) \
            gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sK + 16 * kk, 16), gpt2rt__cu_wg_desc(q_s + 16 * kk, 16), kk > 0, sm); \
        gpt2rt__cu_wg_commit(); \
        _Pragma("unroll") for (int kk = 0; kk < 4; kk++) \
            gpt2rt__cu_wg_ss<X>(dp, gpt2rt__cu_wg_desc(sV + 16 * kk, 16), gpt2rt__cu_wg_desc(do_s + 16 * kk, 16), kk > 0, sm); \
        gpt2rt__cu_wg_commit(); } while (0)
    GPT2RT__CU_ATT_ISSUE_SDP(0);

    /* Every warpgroup runs every step (the same commit groups on every path, so the compiler
       keeps the wgmmas asynchronous); a key tile past T or a query tile before it (qt < kw:
       all hidden) gets P^T = 0, adding zeros to dK and dV, which are +0 until its first tile */
    for (int qt = qfirst;; qt++) {
        const int st = (qt - qfirst) % 3, st2 = (qt - qfirst + 2) % 3;
        if (tid < 64 && qt + 2 < nqt) GPT2RT__CU_ATT_LSE_D(qt + 2, ln, dn);
        const bool live = k0 < T && qt >= kw; /* warpgroup-uniform */
        {
            const uint16_t *sQ = sQa + st * TILE, *sdO = sdOa + st * TILE;
            const float *sLb = sL + 64 * st, *sDb = sD + 64 * st;
            /* in flight: [dV, dK of the previous tile,] S^T, dP^T */
            gpt2rt__cu_wg_waitn<1>();
            gpt2rt__cu_wg_landed(s);
            gpt2rt__cu_wg_landed(dv);
            gpt2rt__cu_wg_landed(dk);
            gpt2rt__cu_wg_held(pa);
            gpt2rt__cu_wg_held(da);
            /* P^T, zero where the key is hidden from the query (causal: the diagonal tile only) */
            const bool edge = kw == qt || (kw + 1) * 64 > TH;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                int ql = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), kl = 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1);
                float p = exp2f(s[i] * scale_log2 - sLb[ql]);
                s[i] = !live || (edge && gpt2rt__cu_att_hidden(qt * 64 + ql, k0 + kl, TH)) ? 0.0f : p;
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) pa[kk][r] = gpt2rt__cu_attn_pack(tag, s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
            /* dV += P^T dO: 16 queries = 16 rows of 128 bytes of dO */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dv, pa[kk], gpt2rt__cu_wg_desc(sdO + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
            /* in flight: dP^T, dV */
            gpt2rt__cu_wg_waitn<1>();
            gpt2rt__cu_wg_landed(dp);
            /* dS^T = P^T (dP^T - D) scale */
#pragma unroll
            for (int i = 0; i < 32; i++) dp[i] = s[i] * (dp[i] - sDb[8 * (i >> 2) + 2 * (lane & 3) + (i & 1)]) * scale;
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) da[kk][r] = gpt2rt__cu_attn_pack(tag, dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
            /* dK += dS^T Q */
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dk, da[kk], gpt2rt__cu_wg_desc(sQ + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
        }
        if (qt + 1 == nqt) break;
        /* tile qt+1 has landed (this thread's copies; the barrier publishes everyone's), and
           every warpgroup has retired the products of tile qt-1: its stage takes tile qt+2 */
        gpt2rt__cu_attn_cp_wait<0>();
        gpt2rt__cu_wg_proxy_fence();
        __syncthreads();
        if (qt + 2 < nqt) {
            if (tid < 64) { sL[64 * st2 + tid] = ln; sD[64 * st2 + tid] = dn; }
            GPT2RT__CU_ATT_FETCH_QW(qt + 2, st2);
        }
        GPT2RT__CU_ATT_ISSUE_SDP((st + 1) % 3);
    }
#undef GPT2RT__CU_ATT_ISSUE_SDP
#undef GPT2RT__CU_ATT_FETCH_QW
#undef GPT2RT__CU_ATT_LSE_D
    gpt2rt__cu_wg_waitn<0>();
    gpt2rt__cu_wg_landed(dv);
    gpt2rt__cu_wg_landed(dk);
    gpt2rt__cu_wg_held(pa);
    gpt2rt__cu_wg_held(da);
    __syncthreads(); /* every warpgroup's reads of smem are done */

    /* each warp stages its 16 rows (stride LD) at its own place */
    float ka[8][4], va[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) { ka[i >> 2][i & 3] = dk[i]; va[i >> 2][i & 3] = dv[i]; }
    const int row0 = k0 + 16 * w;
    X *dk_g = dqkv + ((int64_t)b * T + row0) * C3 + C + h * 64;
    uint16_t *stage = sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD;
    gpt2rt__cu_attn_store_rows<X>(dk_g, C3, T - row0, ka, 1.0f, 1.0f, stage, lane);
    gpt2rt__cu_attn_store_rows<X>(dk_g + C, C3, T - row0, va, 1.0f, 1.0f, stage, lane);
#else
    (void)dqkv; (void)dout; (void)qkv; (void)lse; (void)Dv; (void)T; (void)C; (void)NH; (void)scale; (void)scale_log2; (void)TH;
    __trap();
#endif
}

/* dQ: grid, ownership and outputs as gpt2rt__cuk_attn_bwd_dq64_wg */
template <typename X, int NWG>
__global__ void __launch_bounds__(128 * NWG, 1)
gpt2rt__cuk_attn_bwd_dq64_wgp(X *dqkv,          /* (B,T,3C): writes the q columns */
                              const X *dout,    /* (B,T,C) */
                              const X *qkv,     /* (B,T,3C) */
                              const float *lse, /* (B,NH,T) */
                              const float *Dv,  /* (B,NH,T) */
                              int T, int C, int NH, float scale, float scale_log2, int TH) {
#if defined(GPT2RT_CUDA_EMU) || GPT2RT__CU_ATT_SM90A
    enum { TILE = 64 * 64, NT = 128 * NWG };
    extern __shared__ __align__(128) unsigned char gpt2rt__cu_attn_dsm[];
    const uint32_t mis = (uint32_t)__cvta_generic_to_shared(gpt2rt__cu_attn_dsm) & 1023u;
    uint16_t *sm = (uint16_t *)(gpt2rt__cu_attn_dsm + (mis ? 1024 - mis : 0));
    uint16_t *sQa = sm, *sdOa = sm + NWG * TILE, *sKr = sm + 2 * NWG * TILE, *sVr = sKr + 3 * TILE; /* stage i: + i * TILE */
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x; /* longest rows (most key tiles) first */
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, ntile = (T + 63) / 64;
    const int qw = NWG * qb + wg, q0 = qw * 64, last = NWG * qb + NWG - 1 < ntile - 1 ? NWG * qb + NWG - 1 : ntile - 1;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *q_g = (const uint16_t *)qkv + (int64_t)b * T * C3 + h * 64, *k_g = q_g + C, *v_g = q_g + 2 * C;
    const uint16_t *do_g = (const uint16_t *)dout + (int64_t)b * T * C + h * 64;
    const uint16_t *sQ = sQa + wg * TILE, *sdO = sdOa + wg * TILE;

    for (int i = 0; i < NWG; i++) {
        gpt2rt__cu_attn_load_tile_sw(sQa + i * TILE, q_g, (NWG * qb + i) * 64, T, C3, tid, NT);
        gpt2rt__cu_attn_load_tile_sw(sdOa + i * TILE, do_g, (NWG * qb + i) * 64, T, C, tid, NT);
    }
    /* key tile kt's K and V into stage i (cp.async, one group) */
#define GPT2RT__CU_ATT_FETCH_KV(kt_, i_) do { \
        gpt2rt__cu_attn_load_tile_sw(sKr + (i_) * TILE, k_g, (kt_) * 64, T, C3, tid, NT); \
        gpt2rt__cu_attn_load_tile_sw(sVr + (i_) * TILE, v_g, (kt_) * 64, T, C3, tid, NT); \
        gpt2rt__cu_attn_cp_commit(); } while (0)
    GPT2RT__CU_ATT_FETCH_KV(0, 0);
    if (last >= 1) GPT2RT__CU_ATT_FETCH_KV(1, 1);

    float lse2[2], Dr[2]; /* rows 16w + lane/4 and + 8; rows past T get P = 0 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = q0 + 16 * w + (lane >> 2) + 8 * r;
        lse2[r] = t < T ? lse[(int64_t)blockIdx.y * T + t] * GPT2RT__CU_ATT_LOG2E : INFINITY;
        Dr[r] = t < T ? Dv[(int64_t)blockIdx.y * T + t] : 0.0f;
    }
    if (last >= 1) gpt2rt__cu_attn_cp_wait<1>(); else gpt2rt__cu_attn_cp_wait<0>();
    gpt2rt__cu_wg_proxy_fence();
    __syncthreads();

    const X *tag = 0;
    float dq[32], s[32], dp[32]; /* accumulator layout: row (query) 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1) */
    unsigned da[4][4];
#pragma unroll
    for (int i = 0; i < 32; i++) dq[i] = 0.0f;
    gpt2rt__cu_wg_landed(dq); /* the zeros are set before the first wgmma is issued, not sunk past it */
    /* S = Q K^T, dP = dO V^T (64 queries x 64 keys) of the tile in stage st: two groups */
#define GPT2RT__CU_ATT_ISSUE_SDP(st_) do { \
        const uint16_t *k_s = sKr + (st_) * TILE, *v_s = sVr + (st_) * TILE; \
        gpt2rt__cu_wg_fence(); \
        _Pragma("unroll") for (int kk = 0; kk < 4; kk++) \
            gpt2rt__cu_wg_ss<X>(s, gpt2rt__cu_wg_desc(sQ + 16 * kk, 16), gpt2rt__cu_wg_desc(k_s + 16 * kk, 16), kk > 0, sm); \
        gpt2rt__cu_wg_commit(); \
        _Pragma("unroll") for (int kk = 0; kk < 4; kk++) \
            gpt2rt__cu_wg_ss<X>(dp, gpt2rt__cu_wg_desc(sdO + 16 * kk, 16), gpt2rt__cu_wg_desc(v_s + 16 * kk, 16), kk > 0, sm); \
        gpt2rt__cu_wg_commit(); } while (0)
    GPT2RT__CU_ATT_ISSUE_SDP(0);

    /* Every warpgroup runs every step (the same commit groups on every path, so the compiler
       keeps the wgmmas asynchronous); a query tile past T or a key tile after it (kt > qw:
       all hidden) gets P = 0, adding zeros to dQ (which is never -0: it starts at +0) */
    for (int kt = 0;; kt++) {
        const int st = kt % 3;
        const bool live = q0 < T && kt <= qw; /* warpgroup-uniform */
        {
            /* in flight: [dQ of the previous tile,] S, dP */
            gpt2rt__cu_wg_waitn<1>();
            gpt2rt__cu_wg_landed(s);
            gpt2rt__cu_wg_landed(dq);
            gpt2rt__cu_wg_held(da);
            /* P, zero where the key is hidden (causal: the diagonal tile only) */
            const bool edge = kt == qw || (kt + 1) * 64 > TH;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int r = (i >> 1) & 1;
                int kl = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1), ql = 16 * w + (lane >> 2) + 8 * r;
                float p = exp2f(s[i] * scale_log2 - lse2[r]);
                if (!live || (edge && gpt2rt__cu_att_hidden(q0 + ql, kt * 64 + kl, TH))) p = 0.0f;
                s[i] = p;
            }
            gpt2rt__cu_wg_waitn<0>();
            gpt2rt__cu_wg_landed(dp);
            /* dS = P (dP - D) scale */
#pragma unroll
            for (int i = 0; i < 32; i++) dp[i] = s[i] * (dp[i] - Dr[(i >> 1) & 1]) * scale;
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) da[kk][r] = gpt2rt__cu_attn_pack(tag, dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
            /* dQ += dS K: 16 keys = 16 rows of 128 bytes of K */
            const uint16_t *k_s = sKr + st * TILE;
            gpt2rt__cu_wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) gpt2rt__cu_wg_rs<X>(dq, da[kk], gpt2rt__cu_wg_desc(k_s + 16 * 64 * kk, 1024), 1, sm);
            gpt2rt__cu_wg_commit();
        }
        if (kt == last) break;
        /* tile kt+1 has landed, and every warpgroup has retired the products of tile kt-1:
           its stage takes tile kt+2 */
        gpt2rt__cu_attn_cp_wait<0>();
        gpt2rt__cu_wg_proxy_fence();
        __syncthreads();
        if (kt + 2 <= last) GPT2RT__CU_ATT_FETCH_KV(kt + 2, (kt + 2) % 3);
        GPT2RT__CU_ATT_ISSUE_SDP((kt + 1) % 3);
    }
#undef GPT2RT__CU_ATT_ISSUE_SDP
#undef GPT2RT__CU_ATT_FETCH_KV
    gpt2rt__cu_wg_waitn<0>();
    gpt2rt__cu_wg_landed(dq);
    gpt2rt__cu_wg_held(da);
    __syncthreads(); /* every warpgroup's reads of smem are done */

    float qa[8][4];
#pragma unroll
    for (int i = 0; i < 32; i++) qa[i >> 2][i & 3] = dq[i];
    const int row0 = q0 + 16 * w;
    gpt2rt__cu_attn_store_rows<X>(dqkv + ((int64_t)b * T + row0) * C3 + h * 64, C3, T - row0, qa, 1.0f, 1.0f,
                                  sm + (tid >> 5) * 16 * GPT2RT__CU_ATT_LD, lane);
#else
    (void)dqkv; (void)dout; (void)qkv; (void)lse; (void)Dv; (void)T; (void)C; (void)NH; (void)scale; (void)scale_log2; (void)TH;
    __trap();
#endif
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
                             int B, int T, int C, int NH, float scale, gpt2rt__drop dr, int TH) {
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
        if (gpt2rt__cu_att_hidden(t, s, TH)) continue; /* warp-uniform; never for TH = T */
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
        l += p; /* the softmax's sum: before dropout */
        if (dr.on) p *= gpt2rt__drop_factor(&dr, (bh * T + t) * T + s);
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
                                int B, int T, int C, int NH, float scale, gpt2rt__drop dr, int TH) {
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
        if (gpt2rt__cu_att_hidden(t, s, TH)) continue;
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
        if (dr.on) d2 *= gpt2rt__drop_factor(&dr, (bh * T + t) * T + s); /* dP through the mask */
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
                                  int B, int T, int C, int NH, float scale, gpt2rt__drop dr, int TH) {
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
        if (gpt2rt__cu_att_hidden(t, s, TH)) continue;
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
        float f = dr.on ? gpt2rt__drop_factor(&dr, (bh * T + t) * T + s) : 1.0f; /* the forward's mask */
        if (dr.on) d2 *= f;
        float p = expf(d1 * scale - lse[bh * T + t]), g = p * (d2 - Dv[bh * T + t]) * scale, pv = dr.on ? p * f : p;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            dv[i] += pv * dyr[i];
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

/* The pipelined Hopper backward's passes, on a compute capability 9.0 device running the
   sm_90a build (the caller checks: gpt2rt__cu_attn_fast16::wgmma_ok); Dv holds D =
   rowsum(dout * out) already. dK,dV: gpt2rt__cuk_attn_bwd_dkdv64_wgp with 2 warpgroups per CTA
   (3 would need more than the 168 registers a thread may have at 384 threads: its wgmmas
   would be serialized); dQ: gpt2rt__cuk_attn_bwd_dq64_wgp with NWG (2 or 3). Each sets its
   kernel's dynamic shared memory limit once per device (ordinals from 64 on: at every launch). */
template <typename X>
static cudaError_t gpt2rt__cu_attn_bwd_kv_wgp_launch(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                                     int B, int T, int C, int NH, cudaStream_t s, int TH) {
    static std::atomic<unsigned long long> smem_set{0};
    const int smem = GPT2RT__CU_ATT_BWD_WGP_SMEM(2);
    int dev = -1;
    GPT2RT__CU_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || !(smem_set.load() & bit)) {
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dkdv64_wgp<X, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        smem_set.fetch_or(bit);
    }
    const float scale = 1.0f / sqrtf(64.0f), scale_log2 = scale * GPT2RT__CU_ATT_LOG2E;
    if (TH <= 0 || TH > T) TH = T; /* GPT-2's causal mask */
    const dim3 g((unsigned)((T + 127) / 128), (unsigned)(B * NH));
    GPT2RT__LAUNCH(g, 256, smem, s, gpt2rt__cuk_attn_bwd_dkdv64_wgp<X, 2>)(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}
template <typename X, int NWG>
static cudaError_t gpt2rt__cu_attn_bwd_dq_wgp_launch(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                                     int B, int T, int C, int NH, cudaStream_t s, int TH) {
    static std::atomic<unsigned long long> smem_set{0};
    const int smem = GPT2RT__CU_ATT_BWD_WGP_DQ_SMEM(NWG);
    int dev = -1;
    GPT2RT__CU_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || !(smem_set.load() & bit)) {
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64_wgp<X, NWG>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        smem_set.fetch_or(bit);
    }
    const float scale = 1.0f / sqrtf(64.0f), scale_log2 = scale * GPT2RT__CU_ATT_LOG2E;
    if (TH <= 0 || TH > T) TH = T;
    const dim3 g((unsigned)((T + 64 * NWG - 1) / (64 * NWG)), (unsigned)(B * NH));
    GPT2RT__LAUNCH(g, 128 * NWG, smem, s, gpt2rt__cuk_attn_bwd_dq64_wgp<X, NWG>)(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}
/* both passes, the dQ pass with NWG warpgroups per CTA (the labs and the emulator's checks) */
template <typename X, int NWG>
static cudaError_t gpt2rt__cu_attn_bwd_wgp_launch_n(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                                    int B, int T, int C, int NH, cudaStream_t s, int TH) {
    GPT2RT__CU_TRY(gpt2rt__cu_attn_bwd_kv_wgp_launch<X>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, s, TH));
    return gpt2rt__cu_attn_bwd_dq_wgp_launch<X, NWG>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, s, TH);
}

/* ---------------------------------------------------------------------------------------------
   Host side
   ------------------------------------------------------------------------------------------- */
/* Tensor-core launches; only bf16 and fp16 have them (the float version reports
   cudaErrorNotSupported and is never called: see gpt2rt__cu_attn_use_fast). */
template <typename X> struct gpt2rt__cu_attn_fast {
    enum { available = 0 };
    static int built(void) { return 0; }
    static int wgmma_ok(void) { return 0; }
    static cudaError_t forward(X *, float *, const X *, int, int, int, int, cudaStream_t, int, int) { return cudaErrorNotSupported; }
    static cudaError_t backward(X *, const X *, const X *, const float *, const float *, int, int, int, int, cudaStream_t, int, int) {
        return cudaErrorNotSupported;
    }
};
/* The tensor-core variants of a direction, in a table: entry i runs where ok() says so and
   allow_fast has bit i. Every entry of a direction gives the same bits (kernels/attention.cu
   and the emulator's drive.cpp check it), so the choice among them is by speed alone
   (gpt2rt__cu_attn_fast16::run). Adding a variant is one entry and one allow bit. */
template <typename F> struct gpt2rt__cu_attn_variant {
    const char *name;
    int (*ok)(void); /* whether it can run on the current device */
    F launch;
};
/* what was picked for a key (gpt2rt__cu_attn_pick_info) */
struct gpt2rt__cu_attn_picked {
    int variant;                           /* the pick's index in its direction's table */
    int n;                                 /* the table's entries */
    const char *name[GPT2RT__CU_ATT_NVAR]; /* each entry's name */
    float ms[GPT2RT__CU_ATT_NVAR];         /* each entry's fastest timed run (ms); -1: not timed (not
                                              allowed, cannot run here, or the timing failed) */
};
/* a remembered choice: the key (the storage type is the table's) and what was picked */
struct gpt2rt__cu_attn_slot {
    int used, dev, dir, bnh, T, TH, allow;
    gpt2rt__cu_attn_picked p;
};
#define GPT2RT__CU_ATT_RUNS 3 /* timed runs per variant, after one warm-up */

template <typename X> struct gpt2rt__cu_attn_fast16 {
    enum { available = 1 };
    /* What is asked of the driver once per device (bit d of a mask: device d; ordinals
       from 64 on ask at every launch), not before every launch: whether the kernels'
       image this device runs was compiled for sm_80 or newer (GPT2RT__CU_ATT_SM80), and
       the backward's dynamic shared memory beyond 48 KiB (a per-device setting). Two
       threads that ask at once both ask: the answers and settings are the same. */
    static std::atomic<unsigned long long> &mask(int which) {
        static std::atomic<unsigned long long> m[6]; /* asked, built, shared memory set, wgmma asked, wgmma usable,
                                                        the wgmma backward's shared memory set */
        return m[which];
    }
    static unsigned long long device_bit(void) {
        int dev = -1;
        if (cudaGetDevice(&dev) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
        return dev >= 0 && dev < 64 ? 1ull << dev : 0;
    }
    static int built(void) {
        unsigned long long bit = device_bit();
        if (bit && (mask(0).load() & bit)) return (mask(1).load() & bit) != 0;
        cudaFuncAttributes fa;
        int ok = cudaFuncGetAttributes(&fa, gpt2rt__cuk_attn_fwd64<X>) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        ok = ok && fa.ptxVersion >= 80;
        if (ok) mask(1).fetch_or(bit);
        mask(0).fetch_or(bit);
        return ok;
    }
    static int always(void) { return 1; } /* mma.sync: wherever the fast path runs (built) */
    /* The Hopper kernels run where the device is compute capability 9.0 and the image it
       runs has their sm_90a bodies (built with -gencode arch=compute_90a,code=sm_90a; any
       other build's body is a trap without the forward's 48 KiB of static shared memory) */
    static int wgmma_ok(void) {
        unsigned long long bit = device_bit();
        if (bit && (mask(3).load() & bit)) return (mask(4).load() & bit) != 0;
        int dev = 0, ok = cudaGetDevice(&dev) == cudaSuccess;
        cudaDeviceProp p;
        ok = ok && cudaGetDeviceProperties(&p, dev) == cudaSuccess && p.major == 9 && p.minor == 0;
#ifndef GPT2RT_CUDA_EMU
        cudaFuncAttributes fa;
        ok = ok && cudaFuncGetAttributes(&fa, gpt2rt__cuk_attn_fwd64_wg<X, GPT2RT__CU_ATT_NWG>) == cudaSuccess &&
             fa.sharedSizeBytes >= (size_t)(GPT2RT__CU_ATT_NWG + 4) * 8192;
#endif
        if (!ok) (void)cudaGetLastError();
        if (ok) mask(4).fetch_or(bit);
        mask(3).fetch_or(bit);
        return ok;
    }

    /* the variants' launches: out (B,T,C), lse (B,NH,T) <- qkv; dqkv (all 3C columns
       written, never accumulated) <- dout, qkv, lse, Dv. Each overwrites its outputs whole
       and reads only its inputs, so it can run again on the same buffers. */
    typedef cudaError_t (*fwd_fn)(X *, float *, const X *, int, int, int, int, cudaStream_t, int);
    typedef cudaError_t (*bwd_fn)(X *, const X *, const X *, const float *, const float *, int, int, int, int,
                                  cudaStream_t, int);
    static cudaError_t fwd_mma(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s, int TH) {
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
        GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, 0, s, gpt2rt__cuk_attn_fwd64<X>)(
            out, lse, qkv, T, C, NH, (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E, TH);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t fwd_wg(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s, int TH) {
        dim3 g((unsigned)((T + 64 * GPT2RT__CU_ATT_NWG - 1) / (64 * GPT2RT__CU_ATT_NWG)), (unsigned)(B * NH));
        GPT2RT__LAUNCH(g, 128 * GPT2RT__CU_ATT_NWG, 0, s, gpt2rt__cuk_attn_fwd64_wg<X, GPT2RT__CU_ATT_NWG>)(
            out, lse, qkv, T, C, NH, (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E, TH);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t fwd_mma2(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s, int TH) {
        return gpt2rt__cu_attn_fwd_rt_launch<X, 2>(out, lse, qkv, B, T, C, NH, s, TH);
    }
    /* the backward's two passes, each its own direction: dK and dV (the k and v columns),
       dQ (the q columns); they read the same inputs and write disjoint columns */
    static cudaError_t mma_smem(void) {
        const unsigned long long bit = device_bit();
        if (bit && (mask(2).load() & bit)) return cudaSuccess;
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dkdv64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, GPT2RT__CU_ATT_BWD_SMEM));
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * GPT2RT__CU_ATT_TE * 2));
        mask(2).fetch_or(bit);
        return cudaSuccess;
    }
    static cudaError_t wg_smem(void) {
        const unsigned long long bit = device_bit();
        if (bit && (mask(5).load() & bit)) return cudaSuccess;
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dkdv64_wg<X, GPT2RT__CU_ATT_NWG>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, GPT2RT__CU_ATT_BWD_WG_SMEM));
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64_wg<X, GPT2RT__CU_ATT_NWG>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, GPT2RT__CU_ATT_BWD_DQ_WG_SMEM));
        mask(5).fetch_or(bit);
        return cudaSuccess;
    }
#define GPT2RT__CU_ATT_PASS_ARGS X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv, int B, int T, \
                                 int C, int NH, cudaStream_t s, int TH
#define GPT2RT__CU_ATT_PASS_CALL dqkv, dout, qkv, lse, Dv, T, C, NH, 1.0f / sqrtf(64.0f), (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E, TH
    static cudaError_t kv_mma(GPT2RT__CU_ATT_PASS_ARGS) {
        GPT2RT__CU_TRY(mma_smem());
        GPT2RT__LAUNCH(dim3((unsigned)((T + 63) / 64), (unsigned)(B * NH)), GPT2RT__CU_ATT_THREADS, GPT2RT__CU_ATT_BWD_SMEM, s,
                       gpt2rt__cuk_attn_bwd_dkdv64<X>)(GPT2RT__CU_ATT_PASS_CALL);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t q_mma(GPT2RT__CU_ATT_PASS_ARGS) {
        GPT2RT__CU_TRY(mma_smem());
        GPT2RT__LAUNCH(dim3((unsigned)((T + 63) / 64), (unsigned)(B * NH)), GPT2RT__CU_ATT_THREADS, 6 * GPT2RT__CU_ATT_TE * 2, s,
                       gpt2rt__cuk_attn_bwd_dq64<X>)(GPT2RT__CU_ATT_PASS_CALL);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t kv_wg(GPT2RT__CU_ATT_PASS_ARGS) {
        GPT2RT__CU_TRY(wg_smem());
        dim3 g((unsigned)((T + 64 * GPT2RT__CU_ATT_NWG - 1) / (64 * GPT2RT__CU_ATT_NWG)), (unsigned)(B * NH));
        GPT2RT__LAUNCH(g, 128 * GPT2RT__CU_ATT_NWG, GPT2RT__CU_ATT_BWD_WG_SMEM, s, gpt2rt__cuk_attn_bwd_dkdv64_wg<X, GPT2RT__CU_ATT_NWG>)(
            GPT2RT__CU_ATT_PASS_CALL);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t q_wg(GPT2RT__CU_ATT_PASS_ARGS) {
        GPT2RT__CU_TRY(wg_smem());
        dim3 g((unsigned)((T + 64 * GPT2RT__CU_ATT_NWG - 1) / (64 * GPT2RT__CU_ATT_NWG)), (unsigned)(B * NH));
        GPT2RT__LAUNCH(g, 128 * GPT2RT__CU_ATT_NWG, GPT2RT__CU_ATT_BWD_DQ_WG_SMEM, s, gpt2rt__cuk_attn_bwd_dq64_wg<X, GPT2RT__CU_ATT_NWG>)(
            GPT2RT__CU_ATT_PASS_CALL);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
#undef GPT2RT__CU_ATT_PASS_ARGS
#undef GPT2RT__CU_ATT_PASS_CALL

    /* The variant tables, entry i forced by allow bit i (GPT2RT__CU_ATT_MMA, _WGMMA, _WGP,
       _MMA2, _ALT); entry 0 runs wherever the fast path does: the default */
    static const gpt2rt__cu_attn_variant<fwd_fn> *forwards(int *n) {
        static const gpt2rt__cu_attn_variant<fwd_fn> v[] = {
            {"mma.sync", always, fwd_mma},
            {"wgmma", wgmma_ok, fwd_wg},
            {"wgmma pipelined", wgmma_ok, gpt2rt__cu_attn_fwd_wgp_launch<X, 2, 1, 4>},
            {"mma.sync 2 tiles", always, fwd_mma2},
        };
        *n = (int)(sizeof v / sizeof v[0]);
        return v;
    }
    static const gpt2rt__cu_attn_variant<bwd_fn> *dkdvs(int *n) {
        static const gpt2rt__cu_attn_variant<bwd_fn> v[] = {
            {"mma.sync", always, kv_mma},
            {"wgmma", wgmma_ok, kv_wg},
            {"wgmma pipelined", wgmma_ok, gpt2rt__cu_attn_bwd_kv_wgp_launch<X>},
        };
        *n = (int)(sizeof v / sizeof v[0]);
        return v;
    }
    static const gpt2rt__cu_attn_variant<bwd_fn> *dqs(int *n) {
        static const gpt2rt__cu_attn_variant<bwd_fn> v[] = {
            {"mma.sync", always, q_mma},
            {"wgmma", wgmma_ok, q_wg},
            {"wgmma pipelined", wgmma_ok, gpt2rt__cu_attn_bwd_dq_wgp_launch<X, 2>},
            {"mma.sync 2 tiles", always, gpt2rt__cu_attn_bwd_dq_rt_launch<X, 2>},
            {"wgmma pipelined 3 wg", wgmma_ok, gpt2rt__cu_attn_bwd_dq_wgp_launch<X, 3>},
        };
        *n = (int)(sizeof v / sizeof v[0]);
        return v;
    }

    /* The choices made, one table per storage type, under one lock. When its
       GPT2RT__CU_ATT_SLOTS slots are full a new key is not remembered: its calls run entry
       0 without timing (a process meets a few shapes: training one T per device). */
    static std::mutex &lock(void) {
        static std::mutex m;
        return m;
    }
    static gpt2rt__cu_attn_slot *slots(void) {
        static gpt2rt__cu_attn_slot s[GPT2RT__CU_ATT_SLOTS];
        return s;
    }
    static std::atomic<long> &measures(void) { /* how many keys were timed: the tests' counter */
        static std::atomic<long> n(0);
        return n;
    }
    /* the slot of key k (p is ignored), or with add a free one (NULL: none or full); under lock() */
    static gpt2rt__cu_attn_slot *lookup(const gpt2rt__cu_attn_slot &k, int add) {
        gpt2rt__cu_attn_slot *s = slots();
        for (int i = 0; i < GPT2RT__CU_ATT_SLOTS; i++) {
            if (!s[i].used) {
                if (!add) return NULL;
                s[i] = k;
                s[i].used = 1;
                return &s[i];
            }
            if (s[i].dev == k.dev && s[i].dir == k.dir && s[i].bnh == k.bnh && s[i].T == k.T && s[i].TH == k.TH &&
                s[i].allow == k.allow)
                return &s[i];
        }
        return NULL;
    }
    static gpt2rt__cu_attn_slot key(int dir, int bnh, int T, int TH, int allow) {
        gpt2rt__cu_attn_slot k;
        memset(&k, 0, sizeof k);
        if (cudaGetDevice(&k.dev) != cudaSuccess) { (void)cudaGetLastError(); k.dev = -1; }
        k.dir = dir; k.bnh = bnh; k.T = T; k.TH = TH; k.allow = allow;
        return k;
    }

    /* Times each allowed variant that runs here on the call's own buffers (a... are the
       launch's arguments) and stream s: one warm-up launch, then GPT2RT__CU_ATT_RUNS launches
       between events; p->ms[i] is variant i's fastest run and p->variant the fastest variant.
       The minimum, not the mean or the median: a variant does the same work every run, and
       what varies (launch gaps, clocks ramping up, other work on the device) only adds time,
       so the fastest of a few runs is the least disturbed estimate. A launch's error is
       returned; an event's error ends the timing with p->variant = -1 and is cleared. */
    template <typename F, typename... A>
    static cudaError_t measure(const gpt2rt__cu_attn_variant<F> *v, int n, int allow, cudaStream_t s,
                               gpt2rt__cu_attn_picked *p, A... a) {
        cudaEvent_t ev[GPT2RT__CU_ATT_RUNS + 1];
        int made = 0, timed = 1;
        while (made <= GPT2RT__CU_ATT_RUNS && cudaEventCreate(&ev[made]) == cudaSuccess) made++;
        timed = made == GPT2RT__CU_ATT_RUNS + 1;
        cudaError_t e = cudaSuccess;
        p->variant = -1;
        for (int i = 0; i < n && timed && e == cudaSuccess; i++) {
            if (!(allow >> i & 1) || !v[i].ok()) continue;
            e = v[i].launch(a...);
            timed = e == cudaSuccess && cudaEventRecord(ev[0], s) == cudaSuccess;
            for (int r = 0; r < GPT2RT__CU_ATT_RUNS && timed && e == cudaSuccess; r++) {
                e = v[i].launch(a...);
                timed = e == cudaSuccess && cudaEventRecord(ev[r + 1], s) == cudaSuccess;
            }
            timed = timed && cudaEventSynchronize(ev[GPT2RT__CU_ATT_RUNS]) == cudaSuccess;
            for (int r = 0; r < GPT2RT__CU_ATT_RUNS && timed; r++) {
                float ms = -1.0f;
                timed = cudaEventElapsedTime(&ms, ev[r], ev[r + 1]) == cudaSuccess;
                if (timed && (p->ms[i] < 0.0f || ms < p->ms[i])) p->ms[i] = ms;
            }
            if (timed && (p->variant < 0 || p->ms[i] < p->ms[p->variant])) p->variant = i;
        }
        for (int i = 0; i < made; i++) (void)cudaEventDestroy(ev[i]);
        if (e == cudaSuccess && !timed) {
            (void)cudaGetLastError();
            p->variant = -1;
            for (int i = 0; i < n; i++) p->ms[i] = -1.0f;
        }
        return e;
    }

    /* One call of direction dir (0 forward, 1 the backward's dK,dV pass, 2 its dQ pass) over bnh = B*NH heads of T rows: with
       one allowed variant that runs here, that one; else the remembered pick for the key
       (device, B*NH, T, TH, allow), or measure() picks now, the pick is remembered and runs
       last, so the outputs are the pick's. While s is being captured into a CUDA graph nothing
       is timed (events would be captured, not run): the remembered pick or entry 0. */
    template <typename F, typename... A>
    static cudaError_t run(int dir, const gpt2rt__cu_attn_variant<F> *v, int n, int allow, int bnh, int T, int TH,
                           cudaStream_t s, A... a) {
        int first = -1, count = 0;
        for (int i = 0; i < n; i++)
            if ((allow >> i & 1) && v[i].ok()) { count++; if (first < 0) first = i; }
        if (count < 2) return v[first < 0 ? 0 : first].launch(a...);
        const gpt2rt__cu_attn_slot k = key(dir, bnh, T, TH, allow);
        {
            std::lock_guard<std::mutex> l(lock());
            const gpt2rt__cu_attn_slot *got = lookup(k, 0);
            if (got) return v[got->p.variant].launch(a...);
        }
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) { (void)cudaGetLastError(); cs = cudaStreamCaptureStatusActive; }
        if (cs != cudaStreamCaptureStatusNone) return v[first].launch(a...);
        gpt2rt__cu_attn_picked p;
        p.n = n;
        for (int i = 0; i < GPT2RT__CU_ATT_NVAR; i++) { p.name[i] = i < n ? v[i].name : NULL; p.ms[i] = -1.0f; }
        GPT2RT__CU_TRY(measure(v, n, allow, s, &p, a...));
        measures()++;
        if (p.variant < 0) p.variant = first;
        {
            std::lock_guard<std::mutex> l(lock());
            gpt2rt__cu_attn_slot *slot = lookup(k, 1);
            if (slot && slot->p.n == 0) slot->p = p; /* a key another thread timed first keeps its pick */
        }
        return v[p.variant].launch(a...);
    }

    static cudaError_t forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s, int TH,
                               int allow) {
        int n;
        const gpt2rt__cu_attn_variant<fwd_fn> *v = forwards(&n);
        return run(0, v, n, allow, B * NH, T, TH, s, out, lse, qkv, B, T, C, NH, s, TH);
    }
    static cudaError_t backward(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                int B, int T, int C, int NH, cudaStream_t s, int TH, int allow) {
        int n;
        const gpt2rt__cu_attn_variant<bwd_fn> *v = dkdvs(&n);
        GPT2RT__CU_TRY(run(1, v, n, allow, B * NH, T, TH, s, dqkv, dout, qkv, lse, Dv, B, T, C, NH, s, TH));
        v = dqs(&n);
        return run(2, v, n, allow, B * NH, T, TH, s, dqkv, dout, qkv, lse, Dv, B, T, C, NH, s, TH);
    }
};
template <> struct gpt2rt__cu_attn_fast<__nv_bfloat16> : gpt2rt__cu_attn_fast16<__nv_bfloat16> {};
template <> struct gpt2rt__cu_attn_fast<__half> : gpt2rt__cu_attn_fast16<__half> {};

/* What the launchers' automatic choice (allow GPT2RT__CU_ATT_BEST) picked for storage type X
   on the current device in direction dir (0 forward, 1 backward) at B*NH = bnh, T and TH
   (0: causal): 1 with *p, or 0 when that key was not timed. *measures (when not NULL): how
   many keys of X this process has timed. For the labs and the tests; nothing is printed. */
template <typename X>
static int gpt2rt__cu_attn_pick_info(int dir, int bnh, int T, int TH, gpt2rt__cu_attn_picked *p, long *measures = NULL) {
    typedef gpt2rt__cu_attn_fast16<X> F;
    if (measures) *measures = F::measures().load();
    if (TH <= 0 || TH > T) TH = T;
    const gpt2rt__cu_attn_slot k = F::key(dir, bnh, T, TH, GPT2RT__CU_ATT_BEST);
    std::lock_guard<std::mutex> l(F::lock());
    const gpt2rt__cu_attn_slot *got = F::lookup(k, 0);
    if (got && p) *p = got->p;
    return got != NULL;
}

/* fast path: 16-bit type, HS == 64, every pointer 16-byte aligned (the row strides C and 3C
   are then multiples of 8 elements), kernels built for sm_80+. allow_fast: 0 forces the generic
   path, one variant's bit (GPT2RT__CU_ATT_MMA, GPT2RT__CU_ATT_WGMMA) that variant where it runs
   (else mma.sync), GPT2RT__CU_ATT_BEST (the launchers) the fastest here, timed once per shape */
template <typename X>
static int gpt2rt__cu_attn_use_fast(int C, int NH, const void *a, const void *b, const void *c, int allow_fast) {
    return allow_fast && gpt2rt__cu_attn_fast<X>::available && C / NH == 64 &&
           ((uintptr_t)a % 16 | (uintptr_t)b % 16 | (uintptr_t)c % 16) == 0 && gpt2rt__cu_attn_fast<X>::built();
}
static inline int gpt2rt__cu_attn_npl(int HS) { return HS <= 32 ? 1 : HS <= 64 ? 2 : HS <= 128 ? 4 : 8; }

/* dr (NULL or off: none): the probabilities' dropout (7.1's mask, element ((b*NH + h)*T +
   t)*T + s, as the CPU's attention); with a mask the generic path runs (the tensor-core
   kernels have none) */
template <typename X>
static cudaError_t gpt2rt__cu_attention_forward_impl(X *out, float *lse, const X *qkv, int B, int T, int C, int NH,
                                                     cudaStream_t s, int allow_fast, const gpt2rt__drop *dr = NULL,
                                                     int TH = 0) {
    if (B <= 0 || T <= 0) return cudaSuccess;
    if (NH <= 0 || C <= 0 || C % NH != 0 || C / NH > 256) return cudaErrorInvalidValue;
    if (TH <= 0 || TH > T) TH = T; /* GPT-2's causal mask */
    gpt2rt__drop nd;
    memset(&nd, 0, sizeof nd);
    if (dr && dr->on) { nd = *dr; allow_fast = 0; }
    if (gpt2rt__cu_attn_use_fast<X>(C, NH, out, qkv, qkv, allow_fast))
        return gpt2rt__cu_attn_fast<X>::forward(out, lse, qkv, B, T, C, NH, s, TH, allow_fast);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const unsigned blocks = gpt2rt__cu_blocks((int64_t)B * NH * T * 32, 128);
    switch (gpt2rt__cu_attn_npl(HS)) {
    case 1: GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_fwd_generic<X, 1>)(out, lse, qkv, B, T, C, NH, scale, nd, TH); break;
    case 2: GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_fwd_generic<X, 2>)(out, lse, qkv, B, T, C, NH, scale, nd, TH); break;
    case 4: GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_fwd_generic<X, 4>)(out, lse, qkv, B, T, C, NH, scale, nd, TH); break;
    default: GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_fwd_generic<X, 8>)(out, lse, qkv, B, T, C, NH, scale, nd, TH); break;
    }
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

template <typename X>
static cudaError_t gpt2rt__cu_attention_backward_impl(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse,
                                                      float *scratch_D, int B, int T, int C, int NH, cudaStream_t s,
                                                      int allow_fast, const gpt2rt__drop *dr = NULL, int TH = 0) {
    if (B <= 0 || T <= 0) return cudaSuccess;
    if (NH <= 0 || C <= 0 || C % NH != 0 || C / NH > 256) return cudaErrorInvalidValue;
    if (TH <= 0 || TH > T) TH = T; /* GPT-2's causal mask */
    gpt2rt__drop nd; /* D = rowsum(dout * out) holds with the mask too: out is the dropped output */
    memset(&nd, 0, sizeof nd);
    if (dr && dr->on) { nd = *dr; allow_fast = 0; }
    GPT2RT__LAUNCH(gpt2rt__cu_blocks((int64_t)B * T * NH * 32, 256), 256, 0, s, gpt2rt__cuk_attn_bwd_rowdot<X>)(scratch_D, dout, out, B, T, C, NH);
    GPT2RT__CU_LAUNCHED();
    if (gpt2rt__cu_attn_use_fast<X>(C, NH, dqkv, dout, qkv, allow_fast))
        return gpt2rt__cu_attn_fast<X>::backward(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, s, TH, allow_fast);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const unsigned blocks = gpt2rt__cu_blocks((int64_t)B * NH * T * 32, 128);
#define GPT2RT__CU_ATT_GENERIC_BWD(npl_) do { \
        GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_bwd_dkdv_generic<X, npl_>)(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, scale, nd, TH); \
        GPT2RT__CU_LAUNCHED(); \
        GPT2RT__LAUNCH(blocks, 128, 0, s, gpt2rt__cuk_attn_bwd_dq_generic<X, npl_>)(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, scale, nd, TH); \
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

/* out (B,T,C), lse (B,NH,T) fp32 <- qkv (B,T,3C); dr: the probabilities' dropout or NULL;
   TH: the placeholder mask's history (7.1), 0: causal */
template <typename X>
static cudaError_t gpt2rt__cu_attention_forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s,
                                                const gpt2rt__drop *dr = NULL, int TH = 0) {
    return gpt2rt__cu_attention_forward_impl<X>(out, lse, qkv, B, T, C, NH, s, GPT2RT__CU_ATT_BEST, dr, TH);
}

/* dqkv (B,T,3C) (overwritten) <- dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T);
   scratch_D: B*NH*T floats, clobbered; dr: the forward's dropout mask or NULL */
template <typename X>
static cudaError_t gpt2rt__cu_attention_backward(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse,
                                                 float *scratch_D, int B, int T, int C, int NH, cudaStream_t s,
                                                 const gpt2rt__drop *dr = NULL, int TH = 0) {
    return gpt2rt__cu_attention_backward_impl<X>(dqkv, dout, qkv, out, lse, scratch_D, B, T, C, NH, s, GPT2RT__CU_ATT_BEST, dr, TH);
}

/* ---- generation: attention over the KV cache (8.5's decode pass) ----
   kc, vc (KB,KS,C) one layer's cache, heads side by side; qkv (N,3C) of N new tokens,
   token i of cache row row[i] at position pos[i]. First kv_store writes every token's
   k and v into the cache, then attention_cached lets token i attend to its row's
   positions [0, pos[i]]: one block per (token, head), the scores in shared memory, fp32
   throughout, the sums of the CPU's gpt2rt__cpu_attention_cached (max, exp, their sum,
   the weighted values). Two launches, so every key of a prefill is in the cache before
   any token reads it. A simple kernel: decode moves the cache once per step, and the
   matrix products dominate at 124M. */
template <typename floatX>
__global__ void gpt2rt__cuk_kv_store(floatX *kc, floatX *vc, const floatX *qkv, const int32_t *row,
                                     const int32_t *pos, int64_t N, int64_t KS, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    int64_t n = i / C, c = i - n * C, at = ((int64_t)row[n] * KS + pos[n]) * C + c;
    kc[at] = qkv[n * 3 * C + C + c];
    vc[at] = qkv[n * 3 * C + 2 * C + c];
}

#define GPT2RT__CU_KV_THREADS 128 /* a power of two: the block's tree reductions */
template <typename floatX>
__global__ void __launch_bounds__(GPT2RT__CU_KV_THREADS)
gpt2rt__cuk_attention_cached(floatX *out, const floatX *qkv, const floatX *kc, const floatX *vc, const int32_t *row,
                             const int32_t *pos, int64_t KS, int64_t C, int NH) {
    extern __shared__ float gpt2rt__kv_sh[]; /* scores (KS), then the reduction (blockDim) */
    float *sc = gpt2rt__kv_sh, *red = gpt2rt__kv_sh + KS;
    int64_t i = blockIdx.x / NH, h = blockIdx.x % NH, HS = C / NH, t = pos[i];
    int tid = threadIdx.x, nt = blockDim.x;
    const floatX *q = qkv + i * 3 * C + h * HS;
    const floatX *kr = kc + (int64_t)row[i] * KS * C + h * HS, *vr = vc + (int64_t)row[i] * KS * C + h * HS;
    float scale = 1.0f / sqrtf((float)HS), mx = -INFINITY;
    for (int64_t s = tid; s <= t; s += nt) {
        float a = 0.0f;
        for (int64_t j = 0; j < HS; j++) a += gpt2rt__cu_f(q[j]) * gpt2rt__cu_f(kr[s * C + j]);
        sc[s] = a * scale;
        mx = fmaxf(mx, sc[s]);
    }
    red[tid] = mx;
    __syncthreads();
    for (int w = nt / 2; w > 0; w >>= 1) {
        if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads(); /* every thread has read red[0] before it is reused */
    float sum = 0.0f;
    for (int64_t s = tid; s <= t; s += nt) { sc[s] = expf(sc[s] - mx); sum += sc[s]; }
    red[tid] = sum;
    __syncthreads();
    for (int w = nt / 2; w > 0; w >>= 1) {
        if (tid < w) red[tid] += red[tid + w];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int64_t j = tid; j < HS; j += nt) {
        float y = 0.0f;
        for (int64_t s = 0; s <= t; s++) y += sc[s] * inv * gpt2rt__cu_f(vr[s * C + j]);
        out[i * C + h * HS + j] = gpt2rt__cu_to<floatX>(y);
    }
}

/* out (N,C); the cache kc, vc (KB,KS,C) gets the N tokens' keys and values first */
template <typename floatX>
static cudaError_t gpt2rt__cu_attention_cached(floatX *out, const floatX *qkv, floatX *kc, floatX *vc,
                                               const int32_t *row, const int32_t *pos, int64_t N, int64_t KS,
                                               int64_t C, int64_t NH, cudaStream_t stream) {
    if (N <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(N * C, 256), 256, 0, stream, gpt2rt__cuk_kv_store<floatX>)(kc, vc, qkv, row, pos,
                                                                                               N, KS, C);
    GPT2RT__CU_LAUNCHED();
    size_t smem = (size_t)(KS + GPT2RT__CU_KV_THREADS) * sizeof(float);
    GPT2RT__LAUNCH((unsigned)(N * NH), GPT2RT__CU_KV_THREADS, smem, stream, gpt2rt__cuk_attention_cached<floatX>)(
        out, qkv, kc, vc, row, pos, KS, C, (int)NH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

#endif /* GPT2RT__SRC_CUDA_ATTENTION_BACKWARD_CUH */
