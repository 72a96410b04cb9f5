/* manual.h - the manual: using it, the contents, the license terms
   may call: nothing else in gpt2rt.h */
#ifndef GPT2RT__SRC_MANUAL_H
#define GPT2RT__SRC_MANUAL_H

/* gpt2rt.h - a single-header training runtime for GPT-2, in C.

   ============================================================================
   USING IT
   ============================================================================
   In exactly one C or C++ file of your program:

       #define GPT2RT_IMPLEMENTATION
       #include "gpt2rt.h"

   Everywhere else include it without the define. Compile the implementation file
   with OpenMP (-fopenmp) to use every core; without it the CPU backend runs on one.
   Compiled by a C/C++ compiler the implementation holds the CPU backend (fp32).
   Compiled by nvcc from a .cu file (nvcc -arch=sm_90a ... -lcublasLt) it also holds
   the CUDA backend: hand-written kernels, cuBLASLt matrix products, fp32 / bf16 /
   fp16 with dynamic loss scaling, one device, data parallel or layer split.
   GPT2RT_BACKEND_AUTO picks CUDA when a device is present. Its kernels use tensor
   cores from sm_80 on, and Hopper's warpgroup MMAs for attention when built for
   sm_90a; built for an older -arch, attention takes its generic path.
   The kernel labs and `make test-gpu` (kernels/, docs/cuda.md) check it against the
   CPU backend on a GPU; `make test-emu` runs the same code on the CPU.

   Version: GPT2RT_VERSION (major * 10000 + minor * 100 + patch, for #if) and
   GPT2RT_VERSION_STRING ("0.1.0"). Little-endian hosts only (x86-64, AArch64...):
   the safetensors files are little-endian and are read and written with memcpy;
   a big-endian build stops with #error.

   ============================================================================
   CONFIGURATION MACROS (define before the include that has the implementation;
   none is needed)
   ============================================================================
       GPT2RT_IMPLEMENTATION  compile the implementation into this file (exactly one)
       GPT2RT_STATIC          every API function becomes `static` (private to one file)
       GPT2RT_DEF             linkage of the API functions (default `extern`); overrides
                              GPT2RT_STATIC
       GPT2RT_SGEMM_NO_SIMD   the CPU matrix product and AdamW use portable C only (no
                              AVX2/AVX-512 paths, no <immintrin.h>); results then differ
                              from the SIMD build's in the last bits, still
                              deterministic
       GPT2RT_SGEMM_KC        CPU matrix-product blocking (floats; defaults 256, 384,
       GPT2RT_SGEMM_MC        768, tuned for 48 KiB L1 / 2 MiB L2). KC is the slice
       GPT2RT_SGEMM_NC        of the inner dimension summed in one pass, so changing
                              it changes the summation order (results differ in the
                              last bits); MC and NC change only the speed. KC, MC, NC
                              must satisfy KC >= 1, MC >= 14, NC >= 32 (checked when
                              compiling: every SIMD tile fits a block).
       GPT2RT_SGEMM_FORCE_PATH  testing the kernels: 1 = portable C, 2 = AVX2 even
                              where AVX-512 exists (kernels/cpu_matmul.c uses it)
       GPT2RT_MPI             CPU ranks in separate processes reduce with MPI (compile
                              with mpicc; Debian: openmpi-bin libopenmpi-dev), and
                              rendezvous = MPI is available
       GPT2RT_NCCL            (nvcc) the NCCL communicator of CUDA ranks; link -lnccl
     Leaving out what an application does not use (declarations and implementation
     both; the trainer is the same without them):
       GPT2RT_NO_TOKENIZER    no GPT-2 tokenizer and no llm.c token shards
                              (gpt2rt_tok_*, gpt2rt_shard_*: section 5)
       GPT2RT_NO_SERIES       no CSV series files and no forecaster files
                              (gpt2rt_series_*, gpt2rt_forecaster_*: sections 6.3, 12);
                              patch inputs still train from the caller's arrays
       GPT2RT_NO_DIST         no multi-process code: no TCP and FILE rendezvous (10.3),
                              no sockets included, GPT2RT_MPI refused; world_size > 1
                              is then GPT2RT_ERR_UNAVAILABLE. Data parallel over the
                              devices of one process stays.
       GPT2RT__TEST_HOOKS     private, tests only: fault injection (a failing rename);
                              never define it in a program
   Compile with OpenMP (-fopenmp, which defines _OPENMP) for threads; compile with
   nvcc (__CUDACC__) for the CUDA backend.

   ============================================================================
   THREADS
   ============================================================================
   - A context is not thread-safe: the calls on one context must not overlap (the
     application serialises them). Different contexts may be used from different
     threads at the same time: the library has no global or static mutable state.
   - gpt2rt_plan, gpt2rt_plan_format, gpt2rt_fit, gpt2rt_config_load,
     gpt2rt_result_string and gpt2rt_mem_name touch no context and may run anywhere,
     concurrently.
   - Each call runs on the calling thread plus, with OpenMP, parallel regions of at
     most config.n_threads threads that end before it returns; an op takes a thread
     per 2e6 flops or so of work on idle cores, per 4e8 when the load average says
     other jobs keep them busy (read once per process; -DGPT2RT_CPU_WORK_PER_THREAD=N
     fixes it, 0 splits every op), and smaller ops open no region: the results are
     the same bits on any count. Never call gpt2rt from
     inside an OpenMP parallel region: its own regions would then nest (one thread
     each, or n_threads^2 threads with nesting enabled).
   - parallel = DATA on the CPU: a call on the context also runs n_devices - 1 POSIX
     threads, one per data-parallel rank (rank 0 runs on the calling thread), each
     with parallel regions of n_threads / n_devices threads (at least 1); they end
     before the call returns (CUDA: one thread per rank likewise, each driving its
     device). parallel = LAYER_SPLIT on the CPU: gpt2rt_step and
     gpt2rt_step_series likewise run one thread per stage (stage 0 on the caller's).
   - The hooks (log, alloc, free) are called only on the thread that made the gpt2rt
     call, never from inside a parallel region, and before that call returns; they
     may be called while the context is in an intermediate state, so they must not
     call gpt2rt on the same context. A log message is valid during the callback
     only. gpt2rt_generate's on_token callback follows the same rules.

   ============================================================================
   A WHOLE PROGRAM
   ============================================================================
       gpt2rt_config cfg = {0};            // zero means default: GPT-2 124M shape
       cfg.batch_size = 4; cfg.seq_len = 64;
       gpt2rt_ctx *ctx;
       if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
           fprintf(stderr, "%s\n", gpt2rt_last_error(ctx)); gpt2rt_free(ctx); return 1;
       }
       gpt2rt_weights_load(ctx, "gpt2/model.safetensors");    // optional: Hugging Face weights
       for (int step = 0; step < 100; step++) {
           gpt2rt_step_stats st;
           gpt2rt_step(ctx, inputs, targets, &st);  // int32 (B,T) each
           printf("step %d loss %.4f\n", step, st.loss);
       }
       gpt2rt_weights_save(ctx, "out");   // out/model.safetensors + out/config.json
       gpt2rt_free(ctx);

   ============================================================================
   THE MODEL AND ITS CONVENTIONS
   ============================================================================
   GPT-2 exactly as Hugging Face `GPT2LMHeadModel` computes it in fp32: token +
   position embeddings; per layer x += attn(ln_1(x)); x += mlp(ln_2(x)) with causal
   multi-head self-attention and the tanh GELU ("gelu_new"); ln_f; an LM head tied
   to the token embedding. LayerNorm epsilon is 1e-5. Dropout is off unless
   configured (DROPOUT below).
   - The vocabulary is padded to `padded_vocab` rows (a multiple of 128 by default)
     so that the head's matrix product has friendly sizes; padded rows stay zero
     and padded logits never enter the loss.
   - Loss: mean cross-entropy over the targets that are >= 0; a negative target
     (Hugging Face uses -100) is ignored. Inputs must lie in [0, vocab_size).
   - Weights are stored (out, in) like nn.Linear; the Hugging Face files store the
     Conv1D matrices (in, out): load and save transpose them, and
     gpt2rt_param_read/write speak the Hugging Face layout.
   - AdamW as torch.optim.AdamW (decoupled weight decay, bias correction), with
     weight decay on 2-D weights only (embeddings and matrices; never biases or
     LayerNorm parameters), global-norm gradient clipping as
     torch.nn.utils.clip_grad_norm_ (coefficient clip/(norm+1e-6)), and the
     learning rate of optimizer step s (0-based):
         s <  warmup:              lr * (s+1) / warmup
         s >= warmup, total == 0:  lr
         otherwise:                lr_min + (lr - lr_min) * (1 + cos(pi*r)) / 2,
                                   r = min(1, (s-warmup) / max(1, total-warmup)),
                                   lr_min = lr * min_lr_frac
   - A step whose gradient norm is not finite, or whose every target is ignored,
     is skipped (weights and moments untouched, stats.skipped = 1) and does not
     advance the step count.
   - Initialisation (when no weights are loaded) is Hugging Face's: N(0, 0.02) for
     embeddings and matrices, N(0, 0.02/sqrt(2*n_layer)) for the two residual
     projections, zero biases, LayerNorm weight 1, all drawn from `seed`.
   - Results are deterministic: the same config, seed and data give bitwise the
     same weights on the same machine, whatever the thread count.

   ============================================================================
   DROPOUT, TRAINING AND EVALUATION
   ============================================================================
   config.dropout (the embeddings' output and each residual branch before its add,
   as Hugging Face's embd_pdrop and resid_pdrop), config.attn_dropout (the
   attention probabilities, attn_pdrop) and config.head_dropout (ln_f's output
   before the head: out_layer for patches, as PatchTST's head_dropout; Hugging Face
   GPT-2 has none before the LM head, so 0 there matches it) are probabilities in
   [0, 1), 0 = off = the default, and then every result is bitwise what it is
   without the fields. Inverted dropout: kept values are multiplied by 1/(1-p).
   - Training and evaluation: gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL) turns dropout
     off for the forwards that follow (validation loss, predictions, generation),
     GPT2RT_MODE_TRAIN (the default, as a fresh torch module) back on; the mode
     changes nothing else, so a backward after an EVAL forward is the gradient of
     the model without dropout.
   - The masks are a stateless hash of (seed, optimizer step, layer, site, element
     index), drawn again where needed, never stored: the backward and the recompute
     (SELECTIVE, FULL) see the forward's masks, and a run resumed from a state file
     or on another thread count is bitwise the uninterrupted one. The element index
     counts from the start of the optimizer step's batch, so grad_accum micro-batches
     of B draw the masks of one batch of grad_accum*B; a forward after a backward
     and before the update is the step's next micro-batch (other masks). A skipped
     update does not advance the step: the next one draws the same masks.
   - The CUDA backend draws the same masks (the same hash, bit for bit). With
     attn_dropout > 0 its attention runs the generic kernels (the tensor-core ones
     of HS = 64 in bf16/fp16 have no mask): slower, the same results.

   ============================================================================
   CALLS
   ============================================================================
   gpt2rt_create / gpt2rt_free           context: plans memory, allocates, initialises
   gpt2rt_config_get                     the config with every default filled in
   gpt2rt_forward                        logits and (with targets) the loss
   gpt2rt_backward                       gradients of the last forward's loss (+=)
   gpt2rt_update                         one AdamW step, then zero the gradients
   gpt2rt_step                           forward + backward + update in one call
   gpt2rt_schedule_set                   warmup and total steps changed mid-run
   gpt2rt_logits                         copy the last forward's logits (B,T,vocab)
   gpt2rt_mode_set / _get                TRAIN (dropout on, the default) or EVAL
   gpt2rt_forward_series / _step_series  the same with float windows (time series)
   gpt2rt_predictions                    the last series forward's predictions
                                         (B,horizon,M), original scale
   gpt2rt_weights_load / _save           Hugging Face safetensors (+ config.json);
                                         a load also resets the optimizer state
   gpt2rt_config_load                    the model shape and dropouts from a Hugging Face
                                         config.json; a key that would change the model
                                         is refused, never dropped
   gpt2rt_state_save / _load             the training state: weights, moments, step,
                                         RNG; resuming continues bitwise identically
   gpt2rt_param_count / _info_get        the parameters: Hugging Face names and shapes
   gpt2rt_param_read / _write            values, gradients, Adam moments by name
   gpt2rt_generate                       continue B prompts with the KV cache: greedy,
                                         or temperature / top-k / top-p from a seed
   gpt2rt_plan                           bytes of every memory category on every
                                         device, from the config alone, before
                                         anything is allocated
   gpt2rt_fit                            a config that fits a budget with the same
                                         global batch, each change explained
   gpt2rt_plan_allocated                 what a context really allocated, same form
   gpt2rt_plan_format                    a plan as a printable table
   gpt2rt_result_string / gpt2rt_last_error   what went wrong, with the numbers

   Every call returns a gpt2rt_result. On failure the context keeps a message that
   names the values involved (gpt2rt_last_error) until its next call, which starts
   with an empty one: after a call that succeeds it reads "". The context stays
   usable after a failure: a failed load
   leaves the weights as they were, a failed save leaves no partial file behind.
   The library never exits, never prints; messages go to the optional log callback.
   gpt2rt_create returns, on failure, a context that only holds the error message:
   read it, then gpt2rt_free it (NULL only if even that could not be allocated);
   any other call on it returns GPT2RT_ERR_STATE.

   ============================================================================
   MEMORY
   ============================================================================
   gpt2rt_plan(&cfg, &plan) computes the bytes of each category below on each
   device; creation then allocates one arena per category of exactly that size
   (through the optional allocator hook, which is told the category), and nothing
   else of consequence. The plan knows every knob: precision (bf16/fp16: 2-byte
   weights and activations plus an fp32 master copy), recompute, micro-batch,
   accumulation, frozen groups, data parallel (every device holds everything; with
   shard_optimizer, ZeRO-1, 1/n_devices of the moments and master weights) and
   layer split (each device its layers; the first the embeddings, the last ln_f,
   the tied head and the logits). It plans the CUDA backend and the two-device
   modes from any machine, before they run. The categories:
       weights       all parameters, padded vocabulary included
       master        fp32 master copy of low-precision weights (0 in fp32)
       grads         one gradient per parameter
       moments       AdamW m and v
       activations   what the forward saves for the backward (per layer: ln_1 out,
                     qkv, attention out + softmax statistics, residuals, ln_2 out,
                     MLP pre- and post-GELU; fewer with recompute or frozen groups)
       transient     backward scratch alive only during one layer's backward, and
                     the buffer recomputed (or not kept) outputs pass through
       logits        (B, T, padded_vocab), turned into dlogits in place (classifier_chunk
                     N: (N, padded_vocab)); time series:
                     the normalised predictions (B*M, horizon)
       workspace     per-thread scratch (matrix-product packing, attention rows)
       comm          communication buffers of the two-device modes
       kvcache       generation (kv_batch > 0): keys and values of every layer for
                     kv_batch x kv_len positions, and the scratch of one pass (up to
                     128 prompt positions a row); on CUDA the cache and the pass in
                     the storage type, the sampling on the host; 0 and not shown otherwise
   plan.overhead is what a device needs beyond the arenas (CUDA context, cuBLASLt,
   NCCL): estimated by gpt2rt_plan, measured by the CUDA backend. A config whose
   bytes on a device, or tokens a step, do not fit in 64 bits is refused, naming the
   factors (not reported wrapped).

   Recompute (config.recompute). SELECTIVE drops the LayerNorm and GELU outputs and
   recomputes them in the backward; FULL keeps every checkpoint_every-th layer's
   input (GPT2RT_CHECKPOINT_SQRT: round(sqrt(L))) and runs each segment's forward
   again in the backward. Either gives bitwise the same gradients as NONE. sqrt(L)
   is the classic spacing when a layer saves about as much as its input; a GPT-2
   layer saves about 16 times its input, so every layer (k = 1) keeps the least,
   and the plan shows it.

   Gradient accumulation. Gradients are of the summed token losses, scaled by
   1/(B*T*grad_accum); the update rescales them to the mean over every target
   counted since the last update, so the loss is normalised once: k micro-batches
   of b give the update of one batch of k*b however ignored targets fall. Either
   call gpt2rt_step with grad_accum*B rows, or gpt2rt_forward + gpt2rt_backward per
   micro-batch and gpt2rt_update once. gpt2rt_param_read(GRAD) reads the rescaled
   gradient.

   Frozen groups (config.frozen, gpt2rt_group bits): no gradient, no moments, no
   master copy, and the inputs only their weight gradients need are not kept
   (GPT4TS freezes ATTENTION | MLP). The gradients that remain are bitwise those of
   the unfrozen model.

   Chunked classifier (config.classifier_chunk = N, CPU and CUDA): the LM head, the
   cross-entropy and their backward run over N tokens at a time, so the logits arena
   holds (N, padded_vocab) instead of (B*T, padded_vocab) (GPT-2 124M, B=16, T=1024:
   3.07 GiB of logits become 0.19 GiB with N = 1024). gpt2rt_step runs the head's
   backward inside the forward, chunk by chunk (no second product); a separate
   gpt2rt_forward + gpt2rt_backward computes each chunk's logits again. The loss and
   every gradient but wte's are bitwise the whole-batch path's for any N (each token's
   row is computed alone); wte's gradient, a sum over the tokens, is bitwise for N a
   multiple of GPT2RT_SGEMM_KC (256), else within fp32 reassociation (about 2e-7
   relative). On CUDA the same rows are bitwise under the emulator; on a GPU cuBLASLt
   takes other algorithms for N rows (the chunks' d(lnf) splits K), so every gradient
   is within rounding of the whole batch's, and two runs are bitwise. Each chunk reads
   wte and reads and writes its gradient once, so small chunks cost time: take
   N >= 1024 (on an H100, N = 1024 costs 3-5% of a GPT-2 124M step). gpt2rt_logits
   answers GPT2RT_ERR_STATE (no logits are kept); generation keeps its own. Not yet
   with layer split.

   Inference (config.inference = 1): a context for generation and forward-only
   evaluation. Every group counts as frozen, so no gradients, moments or master
   weights; the layers' forward runs through two activation blocks in turn (layer l
   reads layer l-1's output from the other), with no backward scratch; the weights,
   the logits, the KV cache and the workspace are a training context's. It starts in
   GPT2RT_MODE_EVAL. gpt2rt_forward (loss, logits), gpt2rt_forward_series,
   gpt2rt_generate, loads, saves of the weights and gpt2rt_param_read / _write of
   values run as on a training context, with bitwise the same results;
   gpt2rt_backward, _update, _step, _step_series, state save / load and reads of
   gradients or moments return GPT2RT_ERR_STATE naming the field. recompute, frozen
   and parallel are refused with it. For GPT-2 124M with one row and 192 cache
   positions the plan is about a quarter of a training context's
   (docs/results/memory.md).

   bf16 weights (config.inference_weights = GPT2RT_PRECISION_BF16, inference = 1, CPU
   backend, token inputs): every weight is stored in bf16, 2 bytes (the plan's weights
   category says so; no master copy), rounded to nearest even from the fp32 values at
   initialisation, gpt2rt_weights_load and gpt2rt_param_write; gpt2rt_param_read gives
   them back widened, exactly. Generation's products (the decode steps, the prefill and
   the LM head over wte) multiply bf16 weights by fp32 activations and sum in fp32: on
   AVX-512 BF16 (VDPBF16PS, the activations split into two bf16 halves), else AVX2 /
   AVX-512F (the weights widened by a shift, bitwise the portable C), else portable C;
   every output is one dot product, so any thread count gives the same ids and logits.
   The logits differ from the fp32 weights' by the weights' rounding (2^-8 relative
   each; GPT-2-sized models: a few 0.1% of the largest logit), and from an fp32 context
   holding the same rounded weights by fp32 rounding only (tests/test_infer_bf16.c).
   gpt2rt_forward and gpt2rt_weights_save answer GPT2RT_ERR_NOT_IMPLEMENTED (they read
   the weights as fp32); FP16, a training context, the CUDA backend and patch inputs
   are refused naming the field. GPT-2 124M: about half the fp32 inference plan.

   Out of memory. A plan above memory_budget (or, on Linux, above the available
   memory) is refused before anything is allocated; that error and a failed
   allocation list the categories, the free memory and what gpt2rt_fit suggests.

   ============================================================================
   TEXT: THE GPT-2 TOKENIZER AND LLM.C TOKEN FILES
   ============================================================================
       gpt2rt_tokenizer *tok;
       if (gpt2rt_tok_load(&tok, "data") != GPT2RT_OK) { ... gpt2rt_tok_last_error(tok) ... }
       gpt2rt_tok_encode(tok, text, len, GPT2RT_TOK_SPECIAL_TEXT, ids, len, &n); // cap = len suffices
       gpt2rt_tok_decode(tok, ids, n, buf, cap, &nbytes);
   Exactly GPT-2's ids (OpenAI's encoder.py, tiktoken, Hugging Face), byte-level, so
   any bytes round-trip: decode(encode(x)) == x, invalid UTF-8 included. The
   pre-tokeniser is GPT-2's pattern as a hand-written scanner with Unicode 15.0
   letter / number / White_Space tables (tools/gen_unicode_tables.py); BPE merges
   the adjacent pair listed first in the merges. "<|endoftext|>" in the text is
   ordinary text, the special token 50256, or an error, as gpt2rt_tok_special
   says. The vocabulary: data/gpt2_merges.bin (200 KB, the merges only: for GPT-2
   the ids follow from them), or OpenAI's encoder.json + vocab.bpe, or Hugging
   Face's vocab.json + merges.txt. A tokenizer takes about 5 MB; encoding is not
   thread-safe (the piece cache): one tokenizer per thread.
   gpt2rt_shard_* read and write llm.c's .bin token files and cut them into
   (B,T) input/target batches: fixed windows in an order drawn from a seed, each
   data-parallel rank its own share, none repeated within an epoch.

   Generation: a context created with kv_batch > 0 holds a KV cache of kv_batch rows
   of kv_len positions (config fields; the kvcache category of the plan).
       int32_t row[64] = {50256};  int64_t len = 1;       // the prompt: <|endoftext|>
       gpt2rt_sample s = {0};  s.temperature = 0.8f; s.top_k = 40; s.max_new_tokens = 40;
       gpt2rt_generate(ctx, &s, 1, row, 64, &len);       // row[1..len) is new
   The prompts run through the model once (prefill), then each new token alone,
   attending to the cached keys and values: no recompute of the prefix. Rows of
   different prompt lengths each keep their positions and stop on their own (eot,
   max_new_tokens, the row's capacity, the callback); asking for more new tokens
   than a row has room for is refused up front, with the numbers. A zero gpt2rt_sample is greedy
   decoding, as Hugging Face's generate; sampling draws from a per-row stream of the
   seed, so the ids do not depend on the thread count. The training state is
   untouched, so generation can interleave with training steps.

   ============================================================================
   TIME SERIES (GPT4TS, "One Fits All")
   ============================================================================
   input = GPT2RT_INPUT_PATCHES with head = GPT2RT_HEAD_REGRESSION forecasts
   `horizon` steps of M = n_channels series from a lookback of L = seq_len steps:
   - Channel independence: a batch of B windows (B,L,M) is B*M univariate series,
     each normalised over its lookback (RevIN: mean, and std = sqrt(biased
     variance + 1e-5); with revin_affine, PatchTST's learned per-channel scale and
     shift, revin.affine_weight / revin.affine_bias (M), undone on the way out).
   - Patching: the series is padded at the end with stride copies of its last
     value and cut into n_patches = (L - patch_len)/stride + 2 patches of
     patch_len steps, stride apart (GPT4TS's ReplicationPad1d + unfold).
   - in_layer: Linear(patch_len -> C) plus GPT-2's position embedding, the GPT-2
     blocks and ln_f on the B*M sequences of n_patches tokens, then out_layer:
     Linear(n_patches*C -> horizon) on each series' flattened (n_patches, C)
     states, de-normalised (times std, plus mean). Loss: mean squared error over
     (B,horizon,M) in the original scale.
   - Parameters: transformer.wpe, transformer.h.*, transformer.ln_f as GPT-2, and
     in_layer.weight (C, patch_len), in_layer.bias (C), out_layer.weight (horizon,
     n_patches*C), out_layer.bias (horizon), all nn.Linear layout, group
     GPT2RT_GROUP_HEAD. No token embedding and no LM head exist (the plan counts
     none; vocab_size does not apply). gpt2rt_weights_load of a GPT-2 checkpoint
     fills the blocks, wpe and ln_f (the first n_layer layers) and keeps in_layer
     and out_layer as they are unless the file has them. GPT4TS freezes
     ATTENTION | MLP. With revin_affine: revin.affine_weight, revin.affine_bias (M).
   - Initialisation: in_layer and out_layer weights N(0, 0.02), biases 0; the
     affine 1 and 0.
   - Dropout: config.dropout, attn_dropout, head_dropout (before out_layer), as
     for tokens (DROPOUT above); evaluate in GPT2RT_MODE_EVAL.
   - Data: gpt2rt_series_load reads an ETT-format CSV (a header naming each column
     once, then a row per time step: a date column, found by name or content or
     named, its dates on the calendar (days, or labels 2020-03, 1959Q1, 2020; later
     dates by calendar months, weekdays or a fixed step), and numbers; every
     column, one target column, or the columns named; missing values refused or
     filled) and cuts it as the
     Time-Series-Library does: ETTh1/ETTh2 train rows [0, 8640), validation
     [8640-L, 11520), test [11520-L, 14400); ETTm the same times 4; other files
     70/10/20 (n_train = int(rows*0.7), n_test = int(rows*0.2)). A StandardScaler
     (population std) fit on the training rows scales every row; a split holds
     end - begin - L - H + 1 stride-1 windows, and gpt2rt_series_batch copies B of
     them into x (B,L,M), y (B,H,M): training windows in an order drawn from
     (seed, epoch), the others in time order. A malformed file names the line, the
     column and the numbers. examples/timeseries.c trains, stops early on
     validation and scores the test split with it.
   - Forecaster: gpt2rt_forecaster_save writes, beside the weights, forecaster.json
     (the model's shape, the channels' names and scaler, the date column and step,
     the linear map and blend weight when used); gpt2rt_forecaster_load builds a
     context from that directory alone, and gpt2rt_forecaster_predict forecasts
     windows (n, L, M) in the data's units, as the training run scored them. The
     training run is calls too (12. Forecaster; nothing printed, progress through a
     callback): gpt2rt_forecaster_linear_fit (the linear map, ridge chosen on
     validation), gpt2rt_forecaster_train (epochs, validation, early stopping, the
     map's residual and blend), gpt2rt_forecaster_pretrain (aLLM4TS stage 1 over
     pooled series), gpt2rt_forecaster_score (a split's MSE/MAE sums); after a load,
     gpt2rt_forecaster_series_desc reads a file as training did and
     gpt2rt_forecaster_csv writes dated forecasts:
           gpt2rt_forecaster *f;
           if (gpt2rt_forecaster_load(&f, "model_dir", NULL) != GPT2RT_OK) { ... gpt2rt_forecaster_last_error(f) ... }
           gpt2rt_forecaster_predict(f, x, n, out);   // out (n, horizon, M)
           gpt2rt_series_desc d = {0}; d.lookback = 336; d.horizon = 96;
           gpt2rt_series *s;
           if (gpt2rt_series_load(&s, "ETTh2.csv", &d) != GPT2RT_OK) { ... gpt2rt_series_last_error(s) ... }
           gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, seed, epoch, step * B, B, x, y);
   - aLLM4TS (Bian et al., ICML 2024), two stages as configuration: out_layer
     becomes a sequence head, Linear(C -> patch_len) at every position
     (out_layer.weight (patch_len, C), out_layer.bias (patch_len)).
     head = NEXT_PATCH (stage 1): n_patches = (L - patch_len)/stride + 1, no padding
     (aLLM4TS: L 1024, patch 16, stride 16); the loss is the MSE of position n's
     output against patch n+1 in RevIN's scale; the targets come from x, so y may be
     NULL, horizon and revin_affine stay 0, gpt2rt_predictions refuses.
     head = PATCH_DECODE (stage 2): the history's n_patches as GPT4TS cuts them, then
     ceil(horizon/patch_len) placeholder positions; placeholder f's output gives
     steps f*patch_len.. of the forecast (the last one cut at horizon), de-normalised
     and scored as the regression head's. A placeholder's patch is zeros (the
     series' mean in RevIN's scale) in training and at test time: aLLM4TS's training
     embeds the true future there, which a forecast cannot have, so in_layer gives
     it in_layer.bias and wpe its position. attn_mask = PLACEHOLDERS: the history
     attends causally; a placeholder sees every history patch and itself, no other
     placeholder. Which groups train is config.frozen (aLLM4TS: stage 1 none,
     stage 2 ATTENTION | MLP). A stage-1 model saved with gpt2rt_weights_save loads
     into stage 2 when patch_len and n_embd agree. CPU backend: one device or
     parallel = DATA; CUDA backend: one device (parallel = NONE); LAYER_SPLIT on
     neither (gpt2rt_plan plans them for every backend and mode; docs/support.md).

   ============================================================================
   DATA PARALLEL (parallel = GPT2RT_PARALLEL_DATA, n_devices = N >= 2; CPU and CUDA)
   ============================================================================
   One process, no launcher: the context holds N ranks, each a full replica with its
   own arenas (the plan's device r), run by one thread each.
   - batch_size is per rank. gpt2rt_step / _step_series take grad_accum * N *
     batch_size rows: micro-batch k is rows [k*N*B, (k+1)*N*B), rank r takes rows
     [r*B, (r+1)*B) of it. gpt2rt_forward / _forward_series take N*B rows (one
     micro-batch), gpt2rt_logits / gpt2rt_predictions return the N ranks' rows in
     that order. So N ranks of B rows train on the batches one device of N*B does.
   - Gradients are summed over the ranks during the last micro-step's backward, in
     buckets: each layer's as soon as every rank has finished that layer, then the
     embeddings' and ln_f's. Sums run in rank order 0, 1, ..., N-1: results are
     bitwise the same run to run (and for any n_threads). Against one device of N*B
     rows they differ by fp32 reassociation only (the ranks' partial sums are added
     at the end): about 1e-7 relative in the gradients (tests/test_parallel.c).
   - The loss, the counted targets and the gradient norm (for clipping) are global;
     the update is the one the whole batch gives, on every rank alike.
   - shard_optimizer = 1 (ZeRO stage 1): rank r keeps the AdamW moments of shard r
     of the trained parameters (1/N, in 64-byte-aligned shares); the gradient is
     reduce-scattered once after the backward, each rank updates its shard and the
     weights are all-gathered. Bitwise the same weights as without sharding. The
     gradient is padded to N equal shares (zero floats, never updated: at most
     16 N - 1 of them), so every communicator reduce-scatters, NCCL included; the
     plan counts them in grads and gpt2rt_plan_format prints "ZeRO-1 padding".
   - Weights load / save, gpt2rt_param_read / _write and state save / load see
     rank 0 (all ranks hold the same weights; loads and writes reach every rank).
     gpt2rt_param_read(GRAD) reads rank 0's gradient, the summed one after the last
     micro-step's backward (under ZeRO-1 gathered from the ranks whose shards hold
     the sum); moments (ADAM_M, ADAM_V) and the state file are gathered from the
     ranks that keep them under ZeRO-1. With data parallel, call
     gpt2rt_update after at most grad_accum gpt2rt_backward calls.
   - CUDA (one process, rank r on device_ids[r], one host thread each): the gradients
     of a layer are reduced on a communicator stream of their own while the backward
     goes on with the layers below; NCCL where the implementation is built with
     GPT2RT_NCCL (link -lnccl) and the devices differ, else a loopback reduction of
     this process's ranks (same device, or peer access) that sums in rank order, so
     the results are bitwise the same run to run; NCCL's sums are deterministic on one
     topology but not in rank order. Every precision: fp16's ranks skip an update and
     halve the loss scale together (the norm is global). ZeRO-1 keeps 1/N of the fp32
     master weights and moments per device and all-gathers the weights after the
     update. device_ids = {0, 0} with allow_shared_device = 1 runs two ranks on one
     GPU (the test mode: kernels/data_parallel.cu). A rank that fails, or a collective
     that does not finish within timeout_s, makes every rank's call return an error
     (NCCL: with the NCCL_P2P_DISABLE=1 / NCCL_DEBUG=INFO hint). Checked on one GPU
     with two ranks sharing it; NCCL across two GPUs is compiled, not run.

   ============================================================================
   LAYER SPLIT (parallel = GPT2RT_PARALLEL_LAYER_SPLIT, n_devices = N >= 2)
   ============================================================================
   The layers in N stages: stage_first_layer[s] (s = 1..N-1, increasing, each stage
   at least one layer) gives the first layer of stage s; all 0, the planner splits
   at the boundaries (checkpoint multiples under FULL recompute) that make the
   largest per-device total of gpt2rt_plan least, the even split where that is as
   good (GPT-2 124M, B=8 T=1024, 2 devices: layers 0..7 and 8..11, 4271 and 4327
   MiB, where 0..5 / 6..11 would need 5312 on the device with the logits). The
   embedding is on stage 0, ln_f, the head and the loss on stage N-1;
   gpt2rt_plan_format prints the stages.
   Calls take batch_size rows per micro-batch, as on one device.
   - gpt2rt_step / _step_series pipeline the grad_accum micro-batches through the
     stages, one thread each (GPipe: a stage runs the forwards of micro-batches
     0..grad_accum-1, then their backwards; the last stage runs each backward right
     after its forward). Stage s hands its output to stage s+1 and gets back its
     gradient; the update then runs once.
   - Results are bitwise those of one device with the same config (batch_size,
     grad_accum, recompute, frozen): each micro-batch takes the same steps, each
     gradient gets its micro-batches in order, and the tied wte's gradient (RevIN's
     affine's for patch inputs) gets the head's and the embedding's parts in one
     device's order, so the last stage's backward of micro-batch k+1 waits for the
     first stage's backward of k (the backwards of the two overlap less).
   - gpt2rt_forward / _backward / _update and everything else run the one-device
     path on the context (no pipelining).
   - Memory on the CPU (gpt2rt_plan_allocated): the stages share the host, so the
     context holds one device's arenas (the whole model's weights, gradients and
     moments: device 0), plus the activations of every micro-batch in flight
     (grad_accum - 1 further sets of one device's activations, device 0) and a
     transient and workspace for each further stage (device s); gpt2rt_plan of a
     CPU config shows exactly that, per device and category.
   - On the CUDA backend each stage is a device state on device_ids[s] holding only
     its parameters (offsets keeping one device's alignment, so every kernel takes
     one device's path), its layers' activations for each of the grad_accum
     micro-batches in flight (gpt2rt_plan counts all of them), and its scratch; the
     activation and its gradient cross the boundary by peer copy (cudaMemcpyPeerAsync) where peer access is on, else
     through pinned host memory. The first stage keeps a weights-only copy of wte for
     the embedding, refreshed after each update; the last stage, which trains wte,
     also runs the embedding's part of its gradient on the first stage's d(x0), in one
     device's order. gpt2rt_step, gpt2rt_param_read and the plan calls run; the other
     calls answer NOT_IMPLEMENTED (docs/support.md). Bitwise one device's results, but for the
     gradient norm: its square is summed per stage, then over the stages (fp64), so
     the fp32 norm can differ in its last bit when that sum lies at an fp32 rounding
     boundary (about 1e-8 of steps). Test mode: device_ids 0, 0 with
     allow_shared_device runs two stages on one GPU (kernels/layer_split.cu), which
     is how it is checked: two stages on two GPUs have not run.
   - recompute = FULL needs each stage's first layer to be a multiple of
     checkpoint_every (so no recomputed segment spans two stages; 1 always works):
     the planner's split does so, given stages that do not are refused (and so is a
     checkpoint_every leaving fewer segments than stages), naming the numbers.

   ============================================================================
   MULTIPLE PROCESSES (torchrun, mpirun, clusters)
   ============================================================================
   A config field, never the launcher, picks the mode: parallel = DATA over
   world_size processes x n_devices each (the global data-parallel size). With
   world_size 0 the process reads what its launcher set: torchrun's RANK,
   WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, else mpirun's
   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; no variables: one process.
   gpt2rt_config_get shows what was resolved. The classic failures are errors that
   name the fix, never a hang: RANK without WORLD_SIZE or LOCAL_RANK (what torchrun
   would have set), RANK >= WORLD_SIZE, torchrun's and mpirun's variables
   disagreeing, several ranks with parallel = NONE (each would train alone), a
   device ordinal beyond the visible devices (CUDA_VISIBLE_DEVICES renumbers them;
   device_ids default to local_rank * n_devices + i), one GPU named twice (except
   allow_shared_device, the test mode), more processes on a node than GPUs. The
   processes meet through a rendezvous (rendezvous: ENV = torchrun's env://,
   TCP, FILE, MPI) that carries rank 0's 128-byte id (NCCL's unique id) to every
   rank; it and every collective wait at most timeout_s (default 300 s), so a rank
   that never starts, dies or stops makes the others return GPT2RT_ERR_IO naming
   the missing ranks. CPU ranks in separate processes reduce with MPI (GPT2RT_MPI):
   rank 0 sums in rank order and broadcasts, so every rank holds bitwise the same
   sum, run to run, equal to the in-process threads'. Under mpirun a rank that
   crashes makes mpirun end the others; one that stops makes them time out. CUDA
   ranks use NCCL (GPT2RT_NCCL; on a hang try NCCL_P2P_DISABLE=1, and NCCL_DEBUG=INFO
   to see why): compiled, not yet run on two GPUs.

   Step time over two GPUs (gpt2rt_plan_step_time; gpt2rt-mem prints it beside the
   plan with --devices 2, --gpu, --link). A micro-batch of n tokens on a device
   holding layers [l0, l1) takes f / (peak * n / (n + h)) + recompute bytes /
   memory bandwidth + 125 us per layer, f = n * (72 C^2 + 12 C T) per layer (+ 6 Vp C
   for the head), the planner's FLOPs, h = gpt2rt_hardware.half_tokens (4096 when 0;
   gpt2rt-mem's cards use 640, fitted to measured H100 steps); on the head's device
   each chunk after the first of a chunked classifier adds 8 Vp C bytes / memory
   bandwidth (wte's fp32 gradient read and written once more) and 4 kernels at 5 us;
   AdamW moves 32 + 4 bytes per parameter. Gradient bytes G, weight bytes W, N data-parallel ranks, link bandwidth BW
   (bytes/s each way), m = grad_accum micro-batches:
   - data parallel: compute m * t_micro; a ring all-reduce sends 2 (N-1)/N G,
     taking 2 (N-1)/N G / BW; in 25 MiB buckets (PyTorch DDP's default) it starts
     during the last micro-batch's backward (2/3 of t_micro), so all but the last
     bucket hides: exposed = comm - min(comm - last bucket, backward);
   - sharded (ZeRO-1): a reduce-scatter of (N-1)/N G, hidden the same way, the
     update of 1/N of the parameters, then an all-gather of (N-1)/N W / BW that
     nothing hides (the price of keeping 1/N of the moments);
   - layer split, GPipe over S devices: (m + S - 1) stage times, the S - 1 extra the
     bubble, a stage time being the slowest device's micro-batch plus its
     activations (B,T,C) forward and their gradient back over the link.
   Figures (dense, no sparsity), each way: RTX 3090 35.6 TFLOP/s fp32 and TF32, 71
   bf16/fp16 with fp32 accumulation, 936 GB/s (NVIDIA Ampere GA102 whitepaper);
   A100 SXM4 19.5 / 156 / 312, 2039 GB/s; H100 SXM5 67 / 495 / 989, 3350 GB/s
   (NVIDIA datasheets). PCIe 4.0 x16: 31.5 GB/s on paper (16 GT/s x 16 lanes,
   128b/130b), modelled at 24 GB/s, the figure NCCL's topology search gives a Gen4
   x16 link (its NCCL_DEBUG=INFO "PCI[24.0]"); through host memory when the cards
   have no peer-to-peer (GeForce), 10 GB/s (p2pBandwidthLatencyTest with P2P
   disabled: about 20 GB/s both ways together). NVLink: RTX 3090 bridge 112.5 GB/s
   both ways (56.25 each), A100 600 (300), H100 900 (450). The seed case, two
   24 GiB RTX 3090s on PCIe: GPT-2 124M (B=8, accumulation 4) scales to 1.99x with
   data parallel on any link (its 0.5 GB all-reduce hides behind the backward);
   a 2.02B-parameter model (L=50, C=1792: 30.1 GiB of fp32 weights, gradients and
   moments) fits neither data parallel (31.7 GiB a device) nor sharded (24.1 GiB),
   only layer split (16.5 GiB), at 1.87x for 16 micro-batches (the bubble is 1/17
   of the step). A model, not a measurement.

   ============================================================================
   WHAT RUNS WHERE (the fields exist everywhere; a combination that is not
   implemented reports GPT2RT_ERR_NOT_IMPLEMENTED, never silently ignored)
   ============================================================================
   One table in the implementation (2.1 Capabilities) holds every combination of
   backend, execution mode, input, head, precision and feature that does not run,
   and what works instead; gpt2rt_plan (or gpt2rt_create, or the call) refuses it
   with that rule's message, before anything is allocated.
   gpt2rt_capabilities_markdown prints the table: docs/support.md is its output.
   bf16/fp16/TF32 and loss scaling are CUDA precisions: the CPU backend answers
   GPT2RT_ERR_UNAVAILABLE, and so does backend CUDA in an implementation not
   compiled by nvcc.

   ============================================================================
   CONTENTS of the implementation, in the order data flows: each section calls only
   the ones above it (grep "==== N." to jump; each subsystem has one infix; the
   numbers name the sections and are not yet renumbered to this order; src/ holds
   one file per entry, listed in src/gpt2rt.h)
   ============================================================================
    1. Common                    1.1 Threads, compiler helpers  1.2 Types: sizes,
                                 tensors, the context  1.3 Hooks, errors, time,
                                 random numbers  1.4 Communicators (gpt2rt__comm_)
                                 1.5 Layer-split stages: their state (gpt2rt__ls)
    2. Config                    defaults (gpt2rt__cfg_)  2.1 Capabilities: what runs
                                 where (gpt2rt__cap_)  2.2 Checks
    3. Layout and plan           3.1 Parameter table  3.2 Activations and arenas
                                 (and the layer split's search)  3.3 Plan
                                 11.2 Plan: its public calls  3.4 Advisor (gpt2rt__fit_)
    4. Formats                   4.1 safetensors: reading (gpt2rt__st_, gpt2rt__json_)
                                 4.2 safetensors: writing; files  4.3 Hugging Face
                                 weights and config.json
    5. Tokenizer                 5.1 Unicode classes  5.2 Merges: (left, right) ->
                                 rank and merged id  5.3 BPE of one piece  5.4 Loading,
                                 encoding, decoding  5.5 llm.c token shards
                                 (gpt2rt__tok_, gpt2rt__shard_)
    6. Inputs                    6.1 Tokens (gpt2rt__input_)  6.2 Patches (time
                                 series: RevIN, patching, MSE, gpt2rt__ts_)
                                 6.3 Series files (ETT-format CSV, splits, scaler,
                                 windows: gpt2rt__csv_, gpt2rt__series_)
    9. Optimizer                 (gpt2rt__opt_)
       Processes                 how separate processes meet: 10.4 Processes: MPI
                                 (the MPI communicator; GPT2RT_MPI, gpt2rt__mpi_)
                                 10.3 Processes: rendezvous (rank 0's communicator
                                 id to every rank: gpt2rt__rdv_)
       Backends' interface       the gpt2rt__backend table, initialisation, the data-
                                 parallel collectives (src/backend/interface.h); the
                                 model driver every backend plugs into: dropout's
                                 masks, the head's dispatch, gpt2rt__model_
                                 (src/backend/driver.h)
    7. CPU backend               7.1 Ops  7.2 Matrix product (gpt2rt__sg_)
                                 3.3b CPU step time (the plan's time model on this
                                 CPU, calibrated once)  7.3 Model (gpt2rt__cpu_)
                                 7.4 Backend table (the CPU's step-level entries and
                                 its gpt2rt__backend)
    8. CUDA backend              (nvcc or the emulator: GPT2RT__CUDA, gpt2rt__cu_)
                                 8.1 Common  8.2 Ops  8.3 Attention  8.4 Matrix
                                 products  8.5 Driver  8.6 Device communicators:
                                 NCCL, loopback; data parallel on the device
                                 (gpt2rt__nccl_, gpt2rt__loop_, gpt2rt__cu_dp_)
                                 8.7 Layer split on CUDA devices (gpt2rt__ls_cu_)
                                 8.8 Backend table (the CUDA step-level entries,
                                 gpt2rt__cu_be_, and its gpt2rt__backend)
   10. Context                   creation's parts, initialisation, out of memory;
                                 the executors' table (gpt2rt__exec) and one
                                 device's (gpt2rt__one_)  10.1 Data parallel
                                 (gpt2rt__dp_)  10.2 Layer split (gpt2rt__ls_)
                                 10.5 Processes: ranks over MPI (the executor of
                                 CPU ranks in separate processes: gpt2rt__proc_)
   11. Public calls              11.1 Results and names  11.3 Context  11.4 Training
                                 11.5 Weights and training state files  11.6
                                 Parameters by name  11.7 Generation (gpt2rt__gen_)
   12. Forecaster                a client of the public calls: trained, saved and
                                 loaded with what a forecast needs (gpt2rt__fc_)
                                 12.1 Forecaster: evaluation (per channel in the
                                 data's units beside the baselines, backtests,
                                 split-conformal intervals: gpt2rt__fce_)

   ============================================================================
   LICENSE: MIT. See the end of the file.
*/
#endif /* GPT2RT__SRC_MANUAL_H */
