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
   Compiled by nvcc from a .cu file (nvcc -arch=sm_90 ... -lcublasLt) it also holds
   the CUDA backend: hand-written kernels, cuBLASLt matrix products, fp32 / bf16 /
   fp16 with dynamic loss scaling, one device or data parallel. GPT2RT_BACKEND_AUTO picks CUDA
   when a device is present. Its kernels use tensor cores from sm_80 on; built for
   an older -arch, attention takes its generic path. NOT YET RUN ON A GPU: the
   kernel labs and `make test-gpu` (kernels/) are how it gets proven.

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
       GPT2RT_NO_SERIES       no CSV series files (gpt2rt_series_*: section 6.3);
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
   - Each call runs on the calling thread plus, with OpenMP, parallel regions of
     config.n_threads threads that end before it returns. Never call gpt2rt from
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
   gpt2rt_config_load                    the model shape from a Hugging Face config.json
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
   names the values involved (gpt2rt_last_error) and stays usable: a failed load
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
   NCCL): estimated by gpt2rt_plan, measured by the CUDA backend.

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
   relative). On CUDA the same rows are bitwise under the emulator (cuBLASLt on a GPU may
   pick another algorithm for another row count), wte's gradient within fp32
   reassociation. Each chunk reads wte and reads and writes its gradient once, so small
   chunks cost time: take N >= 1024. gpt2rt_logits answers GPT2RT_ERR_STATE (no
   logits are kept); generation keeps its own. Not yet with layer split.

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
   and parallel are refused with it. GPT-2 124M, one row, 192 cache positions:
   496 MiB planned against 1921 MiB for a training context.

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
   are refused naming the field. GPT-2 124M: 259 MiB planned against 496 MiB.

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
   max_new_tokens, the row's capacity, the callback). A zero gpt2rt_sample is greedy
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
   - Data: gpt2rt_series_load reads an ETT-format CSV (a header, then a date and
     numbers per row; every column, or one target column) and cuts it as the
     Time-Series-Library does: ETTh1/ETTh2 train rows [0, 8640), validation
     [8640-L, 11520), test [11520-L, 14400); ETTm the same times 4; other files
     70/10/20 (n_train = int(rows*0.7), n_test = int(rows*0.2)). A StandardScaler
     (population std) fit on the training rows scales every row; a split holds
     end - begin - L - H + 1 stride-1 windows, and gpt2rt_series_batch copies B of
     them into x (B,L,M), y (B,H,M): training windows in an order drawn from
     (seed, epoch), the others in time order. A malformed file names the line, the
     column and the numbers. examples/timeseries.c trains, stops early on
     validation and scores the test split with it.
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
     parallel = DATA; CUDA backend: one device (parallel = NONE), for now; LAYER_SPLIT
     on neither (gpt2rt_plan plans them for every backend and mode).

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
     micro-step's backward; moments (ADAM_M, ADAM_V) and the state file are
     gathered from the ranks that keep them under ZeRO-1. With data parallel, call
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
     (NCCL: with the NCCL_P2P_DISABLE=1 / NCCL_DEBUG=INFO hint). NOT YET RUN ON A GPU.

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
     calls answer NOT_IMPLEMENTED for now. Bitwise one device's results, but for the
     gradient norm: its square is summed per stage, then over the stages (fp64), so
     the fp32 norm can differ in its last bit when that sum lies at an fp32 rounding
     boundary (about 1e-8 of steps). Test mode: device_ids 0, 0 with
     allow_shared_device runs two stages on one GPU (kernels/layer_split.cu).
     Compiled, not yet run on a GPU.
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
   holding layers [l0, l1) takes f / (peak * n / (n + 4096)) + recompute bytes /
   memory bandwidth + 125 us per layer, f = n * (72 C^2 + 12 C T) per layer (+ 6 Vp C
   for the head), the planner's FLOPs; AdamW moves 32 + 4 bytes per parameter.
   Gradient bytes G, weight bytes W, N data-parallel ranks, link bandwidth BW
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
   NOT YET IMPLEMENTED (the fields exist; setting them reports
   GPT2RT_ERR_NOT_IMPLEMENTED, never silently ignored)
   ============================================================================
   Data parallel over several processes on the CUDA backend (in one process it is
   implemented, not yet run on a GPU); on a CUDA layer split the calls other than
   gpt2rt_step, gpt2rt_param_read and the plan's, and patch inputs; layer split with
   dropout, and generation (kv_batch) on more than one CUDA device. bf16/fp16/TF32
   and loss scaling are CUDA precisions: the CPU backend answers
   GPT2RT_ERR_UNAVAILABLE, and so does backend CUDA in an implementation not
   compiled by nvcc.

   ============================================================================
   CONTENTS of the implementation, in the order data flows (grep "==== N." to
   jump; each subsystem has one infix)
   ============================================================================
    1. Common                    1.1 Threads, compiler helpers  1.2 Types: sizes,
                                 tensors, the context  1.3 Hooks, errors, time,
                                 random numbers  1.4 Communicators (gpt2rt__comm_)
    2. Config                    defaults, then checks (gpt2rt__cfg_)
    3. Layout and plan           3.1 Parameter table  3.2 Activations and arenas
                                 3.3 Plan  3.4 Advisor (gpt2rt__fit_)
    4. Formats                   4.1 safetensors: reading (gpt2rt__st_, gpt2rt__json_)
                                 4.2 safetensors: writing; files  4.3 Hugging Face
                                 weights and config.json  4.4 Training state
    5. Tokenizer                 5.1 Unicode classes  5.2 Merges: (left, right) ->
                                 rank and merged id  5.3 BPE of one piece  5.4 Loading,
                                 encoding, decoding  5.5 llm.c token shards
                                 (gpt2rt__tok_, gpt2rt__shard_)
    6. Inputs                    6.1 Tokens (gpt2rt__input_)  6.2 Patches (time
                                 series: RevIN, patching, MSE, gpt2rt__ts_)
                                 6.3 Series files (ETT-format CSV, splits, scaler,
                                 windows: gpt2rt__csv_, gpt2rt__series_)
    7. CPU backend               7.1 Ops  7.2 Matrix product (gpt2rt__sg_)  7.3 Model
                                 (gpt2rt__cpu_; the driver every backend plugs
                                 into: gpt2rt__model_)
    8. CUDA backend              (nvcc or the emulator: GPT2RT__CUDA, gpt2rt__cu_)
                                 8.1 Common  8.2 Ops  8.3 Attention  8.4 Matrix
                                 products  8.5 Driver  8.6 Device communicators:
                                 NCCL, loopback; data parallel on the device
                                 (gpt2rt__nccl_, gpt2rt__loop_, gpt2rt__cu_dp_; the
                                 backend table's CUDA entries, gpt2rt__cu_be_)
                                 8.7 Layer split on CUDA devices (gpt2rt__ls_cu_)
    9. Optimizer                 (gpt2rt__opt_)
   10. Context                   creation's parts, initialisation, out of memory
                                 10.1 Data parallel (gpt2rt__dp_)  10.2 Layer split
                                 (gpt2rt__ls_)  10.3 Processes: rendezvous
                                 (gpt2rt__rdv_)  10.4 Processes: MPI (GPT2RT_MPI,
                                 gpt2rt__mpi_)
   11. Public calls              11.1 Results and names  11.2 Plan  11.3 Context
                                 11.4 Training  11.5 Weights and training state
                                 files  11.6 Parameters by name  11.7 Generation
                                 (gpt2rt__gen_)

   ============================================================================
   LICENSE: MIT. See the end of the file.
*/
#ifndef GPT2RT_H
#define GPT2RT_H

#include <stddef.h>
#include <stdint.h>

#ifndef GPT2RT_DEF
#ifdef GPT2RT_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT_DEF static __attribute__((unused))
#else
#define GPT2RT_DEF static
#endif
#else
#define GPT2RT_DEF extern
#endif
#endif

#define GPT2RT_VERSION_MAJOR 0
#define GPT2RT_VERSION_MINOR 1
#define GPT2RT_VERSION_PATCH 0
#define GPT2RT_VERSION (GPT2RT_VERSION_MAJOR * 10000 + GPT2RT_VERSION_MINOR * 100 + GPT2RT_VERSION_PATCH)
#define GPT2RT_VERSION_STRING "0.1.0"
#define GPT2RT_MAX_DEVICES 8
#define GPT2RT_ALIGN 64 /* bytes; every arena and every allocator-hook result */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpt2rt_result {
    GPT2RT_OK = 0,
    GPT2RT_ERR_INVALID_ARGUMENT, /* a config field or argument is out of range */
    GPT2RT_ERR_NOT_IMPLEMENTED,  /* the field exists, its implementation has not landed */
    GPT2RT_ERR_UNAVAILABLE,      /* backend not compiled in, or no device */
    GPT2RT_ERR_OUT_OF_MEMORY,    /* the plan exceeds the budget, or an allocation failed */
    GPT2RT_ERR_IO,               /* open, read, write or rename failed */
    GPT2RT_ERR_FORMAT,           /* a file is malformed or does not match the model */
    GPT2RT_ERR_STATE,            /* a call out of order (backward before forward...) */
    GPT2RT_RESULT_COUNT
} gpt2rt_result;

typedef enum gpt2rt_backend {
    GPT2RT_BACKEND_AUTO = 0, /* CUDA when compiled in and a GPU is present, else CPU */
    GPT2RT_BACKEND_CPU,
    GPT2RT_BACKEND_CUDA
} gpt2rt_backend;

typedef enum gpt2rt_precision {
    GPT2RT_PRECISION_DEFAULT = 0, /* fp32 */
    GPT2RT_PRECISION_FP32,
    GPT2RT_PRECISION_BF16, /* bf16 weights and activations, fp32 master weights */
    GPT2RT_PRECISION_FP16  /* fp16 with dynamic loss scaling */
} gpt2rt_precision;

typedef enum gpt2rt_input {
    GPT2RT_INPUT_TOKENS = 0, /* int32 token ids (B,T) */
    GPT2RT_INPUT_PATCHES     /* continuous series cut into patches (GPT4TS) */
} gpt2rt_input;

typedef enum gpt2rt_head {
    GPT2RT_HEAD_LM = 0,   /* tied LM head, cross-entropy loss */
    GPT2RT_HEAD_REGRESSION, /* linear head to `horizon` values per channel, MSE loss */
    /* aLLM4TS's sequence head, out_layer (patch_len <- C) at every position: */
    GPT2RT_HEAD_NEXT_PATCH,  /* stage 1: MSE of position n's output against patch n+1 */
    GPT2RT_HEAD_PATCH_DECODE /* stage 2: one placeholder per future patch, MSE as REGRESSION */
} gpt2rt_head;

/* which keys a query attends to (gpt2rt_config.attn_mask) */
typedef enum gpt2rt_attn_mask {
    GPT2RT_MASK_CAUSAL = 0,   /* every earlier position and itself (GPT-2) */
    GPT2RT_MASK_PLACEHOLDERS  /* PATCH_DECODE: causal over the history; a placeholder sees
                                 every history patch and itself, no other placeholder */
} gpt2rt_attn_mask;

typedef enum gpt2rt_recompute {
    GPT2RT_RECOMPUTE_NONE = 0,  /* keep every activation the backward needs */
    GPT2RT_RECOMPUTE_SELECTIVE, /* drop GELU and LayerNorm outputs, recompute them */
    GPT2RT_RECOMPUTE_FULL       /* keep every checkpoint_every-th layer input only */
} gpt2rt_recompute;
/* gpt2rt_config.checkpoint_every: every round(sqrt(n_layer))-th layer */
#define GPT2RT_CHECKPOINT_SQRT (-1)

typedef enum gpt2rt_parallel {
    GPT2RT_PARALLEL_NONE = 0,
    GPT2RT_PARALLEL_DATA,       /* each device holds the model, the batch is split (DDP) */
    GPT2RT_PARALLEL_LAYER_SPLIT /* the layers are split over the devices */
} gpt2rt_parallel;

/* how the processes of a multi-process run find each other (gpt2rt_config.rendezvous) */
typedef enum gpt2rt_rendezvous {
    GPT2RT_RENDEZVOUS_DEFAULT = 0, /* one process: none; several: MPI when launched by mpirun and
                                      compiled with GPT2RT_MPI, else ENV */
    GPT2RT_RENDEZVOUS_ENV,  /* TCP to MASTER_ADDR:MASTER_PORT as torchrun sets them (env://) */
    GPT2RT_RENDEZVOUS_TCP,  /* TCP to the config's master_addr:master_port */
    GPT2RT_RENDEZVOUS_FILE, /* a file every rank can read: rendezvous_file */
    GPT2RT_RENDEZVOUS_MPI   /* MPI (implementation compiled with -DGPT2RT_MPI) */
} gpt2rt_rendezvous;

/* parameter groups, a bitmask for gpt2rt_config.frozen */
typedef enum gpt2rt_group {
    GPT2RT_GROUP_TOKEN_EMBED = 1 << 0, /* wte (and so the tied LM head) */
    GPT2RT_GROUP_POS_EMBED = 1 << 1,   /* wpe */
    GPT2RT_GROUP_LAYERNORM = 1 << 2,   /* ln_1, ln_2, ln_f */
    GPT2RT_GROUP_ATTENTION = 1 << 3,   /* attn.c_attn, attn.c_proj */
    GPT2RT_GROUP_MLP = 1 << 4,         /* mlp.c_fc, mlp.c_proj */
    GPT2RT_GROUP_HEAD = 1 << 5         /* input projection and regression head (patches) */
} gpt2rt_group;

/* what a context's forward computes (gpt2rt_mode_set): as torch's model.train() /
   model.eval(), the mode decides dropout only */
typedef enum gpt2rt_mode {
    GPT2RT_MODE_TRAIN = 0, /* the default: dropout applies (when configured) */
    GPT2RT_MODE_EVAL       /* no dropout: validation, predictions, generation */
} gpt2rt_mode;

typedef enum gpt2rt_mem {
    GPT2RT_MEM_WEIGHTS = 0,
    GPT2RT_MEM_MASTER,
    GPT2RT_MEM_GRADS,
    GPT2RT_MEM_MOMENTS,
    GPT2RT_MEM_ACTIVATIONS,
    GPT2RT_MEM_TRANSIENT,
    GPT2RT_MEM_LOGITS,
    GPT2RT_MEM_WORKSPACE,
    GPT2RT_MEM_COMM,
    GPT2RT_MEM_KVCACHE, /* generation: keys and values of every layer, and a pass's scratch */
    GPT2RT_MEM_COUNT
} gpt2rt_mem;
/* the allocator hook is told GPT2RT_MEM_BOOKKEEPING for what is not in the plan:
   the context struct, tables, file buffers during load and save */
#define GPT2RT_MEM_BOOKKEEPING (-1)

typedef enum gpt2rt_log_level {
    GPT2RT_LOG_ERROR = 0,
    GPT2RT_LOG_WARN,
    GPT2RT_LOG_INFO,
    GPT2RT_LOG_DEBUG
} gpt2rt_log_level;

typedef void (*gpt2rt_log_fn)(void *user, gpt2rt_log_level level, const char *message);
/* must return memory aligned to GPT2RT_ALIGN bytes, or NULL */
typedef void *(*gpt2rt_alloc_fn)(void *user, size_t bytes, int category);
typedef void (*gpt2rt_free_fn)(void *user, void *ptr, int category);

/* Every field: zero means default. Defaults give the GPT-2 124M shape, B=4, T=64. */
typedef struct gpt2rt_config {
    /* model shape */
    int n_layer;      /* 0 -> 12 */
    int n_head;       /* 0 -> 12 */
    int n_embd;       /* 0 -> 768; a multiple of n_head */
    int vocab_size;   /* 0 -> 50257 */
    int padded_vocab; /* 0 -> vocab_size rounded up to a multiple of 128 */
    int max_seq_len;  /* 0 -> 1024 (positions in wpe) */
    gpt2rt_input input; /* PATCHES: seq_len is the lookback L in time steps */
    int patch_len, patch_stride, n_channels; /* patch inputs only: 0 -> 16, 8, 1 */
    gpt2rt_head head;   /* REGRESSION, NEXT_PATCH, PATCH_DECODE go with PATCHES (LM with TOKENS) */
    int horizon;     /* REGRESSION, PATCH_DECODE: 0 -> 96; NEXT_PATCH: 0 (none) */
    gpt2rt_attn_mask attn_mask; /* PLACEHOLDERS with PATCH_DECODE only; 0: CAUSAL */
    int revin_affine; /* patch inputs: RevIN's learned per-channel scale and shift
                         (PatchTST's), 0 = off (GPT4TS) */
    unsigned frozen; /* gpt2rt_group bits: no gradient, no update */

    /* dropout: probabilities in [0, 1), 0 = off; inverted (kept values times
       1/(1-p)), in GPT2RT_MODE_TRAIN only, CPU backend only for now */
    float dropout;      /* the embeddings' output and both residual branches (after
                           attn.c_proj and mlp.c_proj): Hugging Face's embd_pdrop and
                           resid_pdrop */
    float attn_dropout; /* the attention probabilities: Hugging Face's attn_pdrop */
    float head_dropout; /* ln_f's output, before the head: out_layer for patches
                           (PatchTST's head_dropout); Hugging Face GPT-2 has none
                           before the LM head, so leave it 0 to match it */

    /* batch */
    int batch_size; /* micro-batch B (per rank under DATA parallel: calls take n_devices*B rows), 0 -> 4 */
    int seq_len;    /* T, 0 -> min(64, max_seq_len); patch inputs: the lookback L,
                       0 -> 336 */
    int grad_accum; /* micro-batches per optimizer step, 0 -> 1 (gpt2rt_step takes
                       grad_accum * batch_size rows) */

    /* generation (gpt2rt_generate): the KV cache, planned and allocated like the rest */
    int kv_batch;   /* sequences generated at once (rows of the cache), 0 -> no cache */
    int kv_len;     /* positions of a row, prompt + generated, 0 -> max_seq_len */
    int inference;  /* 1: a context for generation and forward-only evaluation: weights, the KV
                       cache, the logits and a forward workspace (two layers' buffers, reused),
                       no gradients, moments, master weights or saved activations; starts in
                       GPT2RT_MODE_EVAL; training calls are refused. 0: training (the default) */
    gpt2rt_precision inference_weights; /* inference = 1, CPU backend: BF16 stores every weight in bf16
                       (2 bytes, rounded to nearest even when set; fp32 sums): generation reads half
                       the bytes. 0 (DEFAULT) -> FP32. Refused on a training context and with FP16 */

    /* precision and memory */
    gpt2rt_precision precision;
    int tf32;           /* CUDA fp32 matrix products on TF32 tensor cores; 0 = off */
    float loss_scale;   /* fp16: initial dynamic loss scale, 0 -> 65536 */
    gpt2rt_recompute recompute;
    int checkpoint_every; /* full recompute: keep every k-th layer input, 0 -> 1,
                             GPT2RT_CHECKPOINT_SQRT -> round(sqrt(n_layer)) */
    int classifier_chunk; /* tokens whose logits are held at once: the LM head, the loss and
                             their backward run chunk by chunk and the logits arena is (chunk,
                             padded_vocab); 0 (or >= B*T) -> all B*T, as before. CPU or CUDA,
                             one device or data parallel; gpt2rt_logits then answers STATE */

    /* parallel */
    gpt2rt_parallel parallel;
    int n_devices;                       /* 0 -> 1 */
    int device_ids[GPT2RT_MAX_DEVICES];  /* CUDA ordinals, all 0 -> local_rank*n_devices + 0,1,2,... */
    int allow_shared_device; /* test mode: device_ids may name one GPU twice (two virtual
                                devices on one GPU); 0: refused */
    int stage_first_layer[GPT2RT_MAX_DEVICES]; /* LAYER_SPLIT: the first layer of stage s for
                                s = 1..n_devices-1 (stage 0 starts at 0), increasing; all 0 ->
                                the planner's split (gpt2rt_plan_format shows it) */
    /* processes (torchrun, mpirun, clusters): data parallel runs over world_size
       processes x n_devices each. world_size 0: world_size, rank and local_rank come
       from the environment (WORLD_SIZE, RANK, LOCAL_RANK as torchrun sets them, else
       OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK as mpirun does), 1 process without them */
    int world_size;
    int rank;       /* with world_size set: this process, in [0, world_size) */
    int local_rank; /* with world_size set: this process's index on its node */
    gpt2rt_rendezvous rendezvous;
    char master_addr[64];      /* TCP: rank 0's address, "" -> 127.0.0.1 (ENV: MASTER_ADDR) */
    int master_port;           /* TCP: rank 0's port, 0 -> 29500 (ENV: MASTER_PORT) */
    char rendezvous_file[256]; /* FILE: a path every rank sees, absent before the run */
    float timeout_s;           /* rendezvous and each collective, 0 -> 300 s */
    int shard_optimizer; /* DATA only, ZeRO stage 1: each rank keeps the AdamW moments (and
                            master weights) of 1/n_devices of the parameters; 0 = off */

    /* optimizer and schedule (AdamW) */
    float lr;            /* peak learning rate, 0 -> 3e-4 */
    float min_lr_frac;   /* cosine decays to lr*min_lr_frac, 0 -> 0 */
    int warmup_steps;    /* linear warmup length, 0 -> none */
    int total_steps;     /* warmup + cosine length, 0 -> constant after warmup */
    float beta1;         /* 0 -> 0.9 */
    float beta2;         /* 0 -> 0.999 */
    float eps;           /* 0 -> 1e-8 */
    float weight_decay;  /* on 2-D weights only, 0 -> none */
    float grad_clip;     /* max global gradient norm, 0 -> 1.0, negative -> no clipping */

    /* runtime */
    gpt2rt_backend backend;
    int n_threads;          /* CPU threads, 0 -> OpenMP's default (OMP_NUM_THREADS), at most 1024;
                               DATA parallel: shared by the ranks, n_threads/n_devices each;
                               LAYER_SPLIT: by the stages of gpt2rt_step, likewise */
    uint64_t memory_budget; /* bytes per device, 0 -> no limit beyond the device's */
    uint64_t seed;          /* initialisation, 0 -> 1337 */
    gpt2rt_log_fn log;
    void *log_user;
    gpt2rt_alloc_fn alloc; /* both or neither, 0 -> aligned malloc/free */
    gpt2rt_free_fn free;
    void *alloc_user;
} gpt2rt_config;

typedef struct gpt2rt_step_stats {
    int64_t step;     /* optimizer steps taken so far, this one included */
    float loss;       /* mean loss of the step's batch */
    float grad_norm;  /* global L2 norm of the gradient, before clipping */
    float lr;         /* learning rate this update used */
    float loss_scale; /* fp16 dynamic loss scale; 1 otherwise */
    int skipped;      /* 1: the update was skipped (gradient not finite, or every target ignored) */
    int64_t tokens;   /* tokens in the step's batch (every micro-batch) */
    int micro_batches; /* backward calls this update summed */
    double seconds;   /* wall time of the call */
} gpt2rt_step_stats;

typedef struct gpt2rt_memory_plan {
    gpt2rt_config config; /* resolved: every default filled in */
    int64_t n_params;     /* parameters as Hugging Face counts them (vocab unpadded) */
    int64_t n_params_padded;
    int64_t n_trainable;    /* parameters that get gradients and moments (padded vocab included) */
    double flops_per_token; /* model FLOPs (forward + backward) per token, recompute excluded */
    double flops_per_step;  /* FLOPs of one optimizer step on all devices, recompute included */
    int64_t tokens_per_step;  /* micro-batch x grad_accum x data-parallel devices x processes x seq_len */
    double predicted_seconds; /* the advisor's coarse model of one optimizer step (for ranking) */
    int n_devices;
    uint64_t bytes[GPT2RT_MAX_DEVICES][GPT2RT_MEM_COUNT];
    uint64_t total[GPT2RT_MAX_DEVICES];    /* sum of the categories: what creation allocates */
    uint64_t overhead[GPT2RT_MAX_DEVICES]; /* beyond the arenas: estimated by gpt2rt_plan (CUDA
                                              context, cuBLASLt, NCCL; 0 on the CPU backend),
                                              measured by gpt2rt_plan_allocated */
    char error[512]; /* why gpt2rt_plan failed */
} gpt2rt_memory_plan;

/* what gpt2rt_fit may change (bits); 0 means GPT2RT_FIT_DEFAULT */
typedef enum gpt2rt_fit_allow {
    GPT2RT_FIT_BATCH = 1 << 0,     /* micro-batch down, grad_accum up: same global batch */
    GPT2RT_FIT_RECOMPUTE = 1 << 1, /* selective, then full recompute */
    GPT2RT_FIT_PARALLEL = 1 << 2,  /* data parallel <-> layer split (same devices) */
    GPT2RT_FIT_PRECISION = 1 << 3, /* fp32 -> bf16 (CUDA only; changes the numerics, so opt-in) */
    GPT2RT_FIT_SHARD = 1 << 4,     /* data parallel: shard_optimizer (ZeRO-1) on or off; opt-in, as it
                                      all-gathers the weights after every update */
    GPT2RT_FIT_CLASSIFIER = 1 << 5, /* token models: classifier_chunk = 1024 (the logits of 1024
                                       tokens at a time); opt-in, as gpt2rt_logits then has none */
    GPT2RT_FIT_DEFAULT = GPT2RT_FIT_BATCH | GPT2RT_FIT_RECOMPUTE | GPT2RT_FIT_PARALLEL
} gpt2rt_fit_allow;

typedef struct gpt2rt_param_info {
    char name[96];    /* Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2]; /* Hugging Face shape (Conv1D matrices are (in, out)) */
    int64_t numel;
    unsigned group;   /* one gpt2rt_group bit */
    int decay;        /* 1 if weight decay applies */
} gpt2rt_param_info;

typedef enum gpt2rt_param_what {
    GPT2RT_PARAM_VALUE = 0,
    GPT2RT_PARAM_GRAD,
    GPT2RT_PARAM_ADAM_M,
    GPT2RT_PARAM_ADAM_V
} gpt2rt_param_what;

typedef struct gpt2rt_ctx gpt2rt_ctx;

GPT2RT_DEF const char *gpt2rt_result_string(gpt2rt_result result);
GPT2RT_DEF const char *gpt2rt_mem_name(gpt2rt_mem category);

GPT2RT_DEF gpt2rt_result gpt2rt_plan(const gpt2rt_config *config, gpt2rt_memory_plan *plan);
GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *plan, char *buf, size_t cap);
/* A config like *config whose plan fits budget_bytes on every device (arenas plus the
   estimated overhead), with the same global batch, that the coarse throughput model
   ranks fastest among those `allow` reaches: *out gets it (*config itself when that
   fits and nothing reachable is predicted faster). explain (may be NULL) gets one
   line per change with the bytes it saves. GPT2RT_ERR_OUT_OF_MEMORY when nothing
   fits: *out is then the smallest found. budget_bytes must be > 0. */
GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget_bytes, unsigned allow,
                                    gpt2rt_config *out, char *explain, size_t cap);

/* The step-time model of the two-device modes (gpt2rt-mem prints it; the formulas and
   the figures' sources are in the manual, MULTIPLE DEVICES AND PROCESSES). hw: one
   GPU's datasheet figures and the link between two; the model's efficiency curve
   takes the rest. */
typedef struct gpt2rt_hardware {
    double flops_fp32; /* FLOP/s of fp32 matrix products without tensor cores */
    double flops_tf32; /* FLOP/s of fp32 products on tensor cores (config.tf32) */
    double flops_16;   /* FLOP/s of bf16/fp16 products with fp32 accumulation */
    double mem_bw;     /* device memory, bytes/s */
    double link_bw;    /* between two devices, bytes/s each way */
} gpt2rt_hardware;

typedef struct gpt2rt_step_time {
    double compute;    /* s: forward + backward of every micro-batch on the busiest device */
    double update;     /* s: AdamW over the parameters that device updates */
    double comm;       /* s: its bytes over the link: gradients (data parallel), activations
                          and their gradients (layer split), the reduce-scatter (sharded) */
    double hidden;     /* s: the part of comm overlapped with the backward (gradient buckets) */
    double bubble;     /* s: layer split: pipeline fill and drain, (stages - 1) stage times */
    double gather;     /* s: sharded optimizer: the all-gather of the updated weights */
    double total;      /* compute + update + comm - hidden + bubble + gather */
    double one_device; /* s: the same global batch on one such device (if it fitted) */
    double comm_bytes; /* bytes the busiest device sends in one step */
} gpt2rt_step_time;

/* One optimizer step of config (parallel DATA or LAYER_SPLIT over n_devices, or one
   device) on hw, term by term; sharded (or config->shard_optimizer): data parallel
   with the optimizer state sharded over the ranks (ZeRO stage 1). err (may be NULL)
   gets the reason of a failure (the config's). */
GPT2RT_DEF gpt2rt_result gpt2rt_plan_step_time(const gpt2rt_config *config, const gpt2rt_hardware *hw, int sharded,
                                               gpt2rt_step_time *out, char *err, size_t cap);

GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **ctx, const gpt2rt_config *config);
GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx);
GPT2RT_DEF const char *gpt2rt_last_error(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_config gpt2rt_config_get(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_plan_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan);

/* inputs, targets: int32 (B,T); targets may be NULL (no loss); loss may be NULL */
GPT2RT_DEF gpt2rt_result gpt2rt_forward(gpt2rt_ctx *ctx, const int32_t *inputs,
                                        const int32_t *targets, float *loss);
GPT2RT_DEF gpt2rt_result gpt2rt_backward(gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
GPT2RT_DEF gpt2rt_result gpt2rt_step(gpt2rt_ctx *ctx, const int32_t *inputs,
                                     const int32_t *targets, gpt2rt_step_stats *stats);
/* The learning-rate schedule from the next update on: warmup_steps and total_steps as
   the config's fields (0 <= warmup <= total; total 0: constant after the warmup), for
   a run whose length is known only once it started (a time budget sized from the
   first steps' speed). The updates already taken count in it: the next one is step
   gpt2rt_step_stats.step of the new schedule. gpt2rt_config_get shows it. */
GPT2RT_DEF gpt2rt_result gpt2rt_schedule_set(gpt2rt_ctx *ctx, int warmup_steps, int total_steps);
/* GPT2RT_MODE_TRAIN (the default) or GPT2RT_MODE_EVAL: whether the forwards that
   follow apply dropout. Evaluate (validation loss, predictions, generation) in
   EVAL; a backward follows the mode of its forward. */
GPT2RT_DEF gpt2rt_result gpt2rt_mode_set(gpt2rt_ctx *ctx, gpt2rt_mode mode);
GPT2RT_DEF gpt2rt_mode gpt2rt_mode_get(const gpt2rt_ctx *ctx);
/* dst: (B,T,vocab_size) floats, count must be B*T*vocab_size; valid until backward */
GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count);

/* Time series (input = GPT2RT_INPUT_PATCHES, head = GPT2RT_HEAD_REGRESSION): the same
   calls with float windows. x: (B,L,M) floats, L = seq_len (the lookback), M =
   n_channels; y: (B,horizon,M) targets in the same scale, or NULL (no loss). The loss
   is the mean squared error of the de-normalised predictions. gpt2rt_backward and
   gpt2rt_update are shared with token models; gpt2rt_step_series takes grad_accum*B
   windows. */
GPT2RT_DEF gpt2rt_result gpt2rt_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
GPT2RT_DEF gpt2rt_result gpt2rt_step_series(gpt2rt_ctx *ctx, const float *x, const float *y,
                                            gpt2rt_step_stats *stats);
/* dst: (B,horizon,M) predictions of the last gpt2rt_forward_series in the original
   scale (also after gpt2rt_step_series: its last micro-batch's, before the update);
   count must be B*horizon*M; a load or gpt2rt_param_write forgets them */
GPT2RT_DEF gpt2rt_result gpt2rt_predictions(gpt2rt_ctx *ctx, float *dst, int64_t count);

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path);
/* The model shape of a Hugging Face GPT-2 config.json (path: the file, or the directory
   holding it) into *config: n_layer, n_head, n_embd, vocab_size, max_seq_len
   (n_positions); other fields are left as they are. err (may be NULL) gets the reason
   of a failure. */
GPT2RT_DEF gpt2rt_result gpt2rt_config_load(gpt2rt_config *config, const char *path, char *err, size_t cap);
GPT2RT_DEF gpt2rt_result gpt2rt_weights_save(gpt2rt_ctx *ctx, const char *dir);
GPT2RT_DEF gpt2rt_result gpt2rt_state_save(gpt2rt_ctx *ctx, const char *path);
GPT2RT_DEF gpt2rt_result gpt2rt_state_load(gpt2rt_ctx *ctx, const char *path);

GPT2RT_DEF int gpt2rt_param_count(const gpt2rt_ctx *ctx);
GPT2RT_DEF gpt2rt_result gpt2rt_param_info_get(const gpt2rt_ctx *ctx, int index, gpt2rt_param_info *info);
/* dst/src: numel floats in the Hugging Face layout of the named parameter */
GPT2RT_DEF gpt2rt_result gpt2rt_param_read(gpt2rt_ctx *ctx, const char *name, gpt2rt_param_what what,
                                           float *dst, int64_t count);
GPT2RT_DEF gpt2rt_result gpt2rt_param_write(gpt2rt_ctx *ctx, const char *name, const float *src,
                                            int64_t count);

#ifndef GPT2RT_NO_TOKENIZER
/* ---- text: the GPT-2 tokenizer and llm.c token shards --------------------
   Objects of their own, no gpt2rt_ctx needed. Like gpt2rt_create, a failed load
   still returns an object that holds only the message (read it with *_last_error,
   then free it; NULL only when even that could not be allocated). One tokenizer
   per thread: encoding updates its cache. */
typedef struct gpt2rt_tokenizer gpt2rt_tokenizer;
typedef struct gpt2rt_shard gpt2rt_shard;

/* what gpt2rt_tok_encode does with the text "<|endoftext|>" */
typedef enum gpt2rt_tok_special {
    GPT2RT_TOK_SPECIAL_TEXT = 0, /* ordinary text: encoded as the 7 tokens of its bytes */
    GPT2RT_TOK_SPECIAL_ALLOW,    /* the special token (50256) */
    GPT2RT_TOK_SPECIAL_REFUSE    /* GPT2RT_ERR_INVALID_ARGUMENT naming its byte offset */
} gpt2rt_tok_special;

/* dir holds gpt2_merges.bin (the compact copy in data/), or encoder.json + vocab.bpe,
   or vocab.json + merges.txt (tried in that order) */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load(gpt2rt_tokenizer **tok, const char *dir);
/* vocab_json: encoder.json / vocab.json; merges: vocab.bpe / merges.txt, or with
   vocab_json NULL the compact file gpt2rt_tok_save writes. Every token but the 256
   single bytes and <|endoftext|> must be made by one merge (GPT-2: 50257 tokens,
   50000 merges): a merges file cut short is refused with both counts. */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_files(gpt2rt_tokenizer **tok, const char *vocab_json, const char *merges);
GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_mem(gpt2rt_tokenizer **tok, const void *vocab_json, size_t vocab_len,
                                             const void *merges, size_t merges_len);
/* the compact copy: the merges only (ids follow from them), 4 bytes per merge */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_save(gpt2rt_tokenizer *tok, const char *path);
GPT2RT_DEF void gpt2rt_tok_free(gpt2rt_tokenizer *tok);
GPT2RT_DEF const char *gpt2rt_tok_last_error(const gpt2rt_tokenizer *tok);
GPT2RT_DEF int32_t gpt2rt_tok_vocab_size(const gpt2rt_tokenizer *tok); /* 50257 for GPT-2 */
GPT2RT_DEF int32_t gpt2rt_tok_eot(const gpt2rt_tokenizer *tok);        /* <|endoftext|>'s id, -1: none */
/* text: len bytes, any bytes (invalid UTF-8 is kept byte-exactly); ids: cap slots.
   *n_ids = the number of ids, also when cap is too small (then nothing useful is
   written and the result is GPT2RT_ERR_INVALID_ARGUMENT): cap >= len always suffices */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_encode(gpt2rt_tokenizer *tok, const void *text, size_t len,
                                           gpt2rt_tok_special special, int32_t *ids, size_t cap, size_t *n_ids);
/* out: cap bytes (not NUL-terminated); *n_bytes = the length, also when cap is too small */
GPT2RT_DEF gpt2rt_result gpt2rt_tok_decode(gpt2rt_tokenizer *tok, const int32_t *ids, size_t n,
                                           void *out, size_t cap, size_t *n_bytes);
/* the bytes of one token (for streaming output), NULL for an id out of range */
GPT2RT_DEF const char *gpt2rt_tok_token(const gpt2rt_tokenizer *tok, int32_t id, size_t *len);

/* llm.c token files: 256 int32 header (magic 20240520, version 1, token count, zeros),
   then uint16 tokens, little endian */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_load(gpt2rt_shard **shard, const char *path);
GPT2RT_DEF gpt2rt_result gpt2rt_shard_load_mem(gpt2rt_shard **shard, const void *data, size_t len,
                                               const char *name);
/* tokens: n ids in [0, 65535] */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_from_tokens(gpt2rt_shard **shard, const int32_t *tokens, int64_t n);
GPT2RT_DEF gpt2rt_result gpt2rt_shard_save(gpt2rt_shard *shard, const char *path);
GPT2RT_DEF void gpt2rt_shard_free(gpt2rt_shard *shard);
GPT2RT_DEF const char *gpt2rt_shard_last_error(const gpt2rt_shard *shard);
GPT2RT_DEF int64_t gpt2rt_shard_count(const gpt2rt_shard *shard);
GPT2RT_DEF const uint16_t *gpt2rt_shard_tokens(const gpt2rt_shard *shard);
/* inputs, targets: int32 (B,T), the batch of data-parallel `rank` of n_ranks at `step`.
   The shard is cut into windows of T+1 tokens starting at multiples of T; each epoch
   visits them in an order drawn from (seed, epoch), and a step takes the next
   B * n_ranks of them, rank r the r-th B: no two ranks share a window, no window
   repeats within an epoch, the same arguments give the same batch. targets are
   inputs shifted by one token. */
GPT2RT_DEF gpt2rt_result gpt2rt_shard_batch(gpt2rt_shard *shard, uint64_t seed, int64_t step, int rank,
                                            int n_ranks, int B, int T, int32_t *inputs, int32_t *targets);
#endif /* GPT2RT_NO_TOKENIZER */

#ifndef GPT2RT_NO_SERIES
/* ---- time series: ETT-format CSV files ------------------------------------
   An object of its own like the tokenizer: no gpt2rt_ctx needed; a failed load
   returns an object holding only the message (read it with
   gpt2rt_series_last_error, then free it). */
typedef struct gpt2rt_series gpt2rt_series;

typedef enum gpt2rt_series_split {
    GPT2RT_SERIES_TRAIN = 0,
    GPT2RT_SERIES_VAL,
    GPT2RT_SERIES_TEST,
    GPT2RT_SERIES_SPLIT_COUNT
} gpt2rt_series_split;

/* where the three splits lie (Time-Series-Library's borders) */
typedef enum gpt2rt_series_borders {
    GPT2RT_SERIES_BORDERS_AUTO = 0, /* from the name: ETTh* -> ETTH, ETTm* -> ETTM, else RATIO */
    GPT2RT_SERIES_BORDERS_ETTH,     /* hours: train [0, 8640), val [8640-L, 11520),
                                       test [11520-L, 14400) (12/4/4 months of 30 days) */
    GPT2RT_SERIES_BORDERS_ETTM,     /* the same in 15-minute rows: every border times 4 */
    GPT2RT_SERIES_BORDERS_RATIO     /* 70/10/20: n_train = int(rows*0.7), n_test = int(rows*0.2) */
} gpt2rt_series_borders;

typedef struct gpt2rt_series_desc {
    int lookback;        /* L >= 1, time steps of x */
    int horizon;         /* H >= 1, time steps of y */
    const char *target;  /* NULL or "": every numeric column; else that column alone (M = 1) */
    gpt2rt_series_borders borders;
    int no_scale;        /* 1: raw values; 0: StandardScaler fit on the training rows */
} gpt2rt_series_desc;

typedef struct gpt2rt_series_info {
    int64_t rows;     /* data rows (the header line not counted) */
    int channels;     /* M */
    gpt2rt_series_borders borders;  /* resolved (never AUTO) */
    int64_t begin[GPT2RT_SERIES_SPLIT_COUNT], end[GPT2RT_SERIES_SPLIT_COUNT]; /* rows [begin, end),
                                                                       the lookback included */
    int64_t windows[GPT2RT_SERIES_SPLIT_COUNT]; /* end - begin - L - H + 1 stride-1 windows */
} gpt2rt_series_info;

/* A CSV file: a header line, then one row per time step: a date (any text, not
   read), then numbers (strtod syntax, finite), every row as many fields as the
   header; lines end in LF, CRLF or CR. name (may be NULL) labels messages and picks
   the AUTO borders. */
GPT2RT_DEF gpt2rt_result gpt2rt_series_load(gpt2rt_series **series, const char *path, const gpt2rt_series_desc *desc);
GPT2RT_DEF gpt2rt_result gpt2rt_series_load_mem(gpt2rt_series **series, const void *data, size_t len, const char *name,
                                                const gpt2rt_series_desc *desc);
GPT2RT_DEF void gpt2rt_series_free(gpt2rt_series *series);
GPT2RT_DEF const char *gpt2rt_series_last_error(const gpt2rt_series *series);
GPT2RT_DEF gpt2rt_result gpt2rt_series_info_get(const gpt2rt_series *series, gpt2rt_series_info *info);
/* channel m's column name, NULL when m is out of range */
GPT2RT_DEF const char *gpt2rt_series_column(const gpt2rt_series *series, int m);
/* channel m's scaler: value = (raw - mean) / std; std is the population standard
   deviation of the training rows (sklearn's StandardScaler), 1 where they are
   constant; mean 0, std 1 with no_scale */
GPT2RT_DEF gpt2rt_result gpt2rt_series_scaler(const gpt2rt_series *series, int m, double *mean, double *std);
/* every row's scaled values, (rows, M) */
GPT2RT_DEF const float *gpt2rt_series_values(const gpt2rt_series *series);
/* windows first .. first+B-1 of a split into x (B,L,M) and y (B,H,M) (the H rows
   after x's L). The validation and test windows come in time order; the training
   windows in an order drawn from (seed, epoch): each epoch visits every window
   once, the same arguments give the same batch. first + B must not exceed
   info.windows[split]. */
GPT2RT_DEF gpt2rt_result gpt2rt_series_batch(gpt2rt_series *series, gpt2rt_series_split split, uint64_t seed,
                                             int64_t epoch, int64_t first, int B, float *x, float *y);
#endif /* GPT2RT_NO_SERIES */

/* ---- text: generation with a KV cache (a context with config.kv_batch > 0) ----
   The prompts run through the model once (the prefill), then each new token alone,
   attending to the keys and values the cache keeps: no recompute of the prefix. */

/* called once per new token, rows in ascending order within a step: the token
   chosen for `row` and the vocab_size logits it was drawn from (before temperature;
   valid during the call only). Return nonzero to end that row (the token is kept). */
typedef int (*gpt2rt_token_fn)(void *user, int row, int32_t token, const float *logits, int64_t n_logits);

/* Zero means default: greedy decoding (Hugging Face's generate default) until the
   row is full or <|endoftext|>. */
typedef struct gpt2rt_sample {
    float temperature;  /* 0 -> greedy (argmax, the lowest id among equals); > 0: sample from
                           softmax(logits / temperature) */
    int top_k;          /* sampling: only the top_k most likely tokens, 0 -> all */
    float top_p;        /* sampling: only the smallest set of most likely tokens whose probability
                           reaches top_p (the nucleus, after top_k), in (0, 1]; 0 -> 1 */
    uint64_t seed;      /* sampling: 0 -> config.seed; row b draws from its own stream, so a row's
                           text depends on the seed and its prompt, not on B or the threads */
    int max_new_tokens; /* per row, 0 -> until the row holds kv_len (or row_cap) tokens */
    int32_t eot;        /* the token that ends a row (kept in it): 0 -> 50256 (<|endoftext|>) when
                           vocab_size > 50256, else none; negative: none */
    gpt2rt_token_fn on_token; /* may be NULL */
    void *user;
} gpt2rt_sample;

/* tokens: (B, row_cap) int32; row b starts with its prompt of lens[b] ids, and the new
   ids are appended to it: lens[b] becomes the row's length. B <= config.kv_batch,
   1 <= lens[b] <= min(row_cap, kv_len); ids in [0, vocab_size). A row ends at its
   eot, after max_new_tokens, when it holds min(row_cap, kv_len) tokens, or when
   on_token says so. opts NULL: the defaults. Deterministic: the same weights,
   prompts and options give the same ids, whatever the thread count. The training
   state (logits, gradients) is untouched. */
GPT2RT_DEF gpt2rt_result gpt2rt_generate(gpt2rt_ctx *ctx, const gpt2rt_sample *opts, int B, int32_t *tokens,
                                         int64_t row_cap, int64_t *lens);

#ifdef __cplusplus
}
#endif
#endif /* GPT2RT_H */

/* ==========================================================================
   IMPLEMENTATION
   ========================================================================== */
#ifdef GPT2RT_IMPLEMENTATION
#ifndef GPT2RT_IMPLEMENTATION_DONE
#define GPT2RT_IMPLEMENTATION_DONE

/* the one switch for the CUDA backend: nvcc, or the host build of kernels/emu/, which
   supplies its own cuda_runtime.h, cublasLt.h and nccl.h and runs the kernels on the CPU */
#if defined(__CUDACC__) || defined(GPT2RT_CUDA_EMU)
#define GPT2RT__CUDA 1
#else
#define GPT2RT__CUDA 0
#endif

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#if GPT2RT__CUDA /* the CUDA backend (section 8); link with -lcublasLt */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <atomic> /* once-per-device kernel setup (8.3) */
#ifdef GPT2RT_NCCL /* the NCCL communicator (8.6): link with -lnccl */
#include <nccl.h>
#endif
#endif
#ifdef _WIN32
#include <direct.h>
#else
#include <fcntl.h>  /* open(O_NONBLOCK): a FIFO is refused, not waited on */
#include <unistd.h>
#ifndef GPT2RT_NO_DIST
#include <sys/socket.h> /* the TCP rendezvous of multi-process runs (10.3) */
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#endif
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPT2RT__ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GPT2RT__ASAN)
#define GPT2RT__ASAN 1
#endif
/* the arenas on huge pages (1.3), in mappings of their own; not under ASan, which sees
   only what malloc hands out */
#if defined(__linux__) && !defined(GPT2RT_NO_HUGEPAGES) && !defined(GPT2RT__ASAN)
#include <sys/mman.h>
#if !defined(__USE_MISC) && !defined(__cplusplus)
int madvise(void *addr, size_t len, int advice); /* glibc declares it only outside strict ISO C (-std=c11) */
#endif
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14 /* Linux's value (asm-generic/mman-common.h) */
#endif
#if !defined(MAP_ANONYMOUS) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || \
                                defined(__arm__) || defined(__riscv) || defined(__powerpc__) || defined(__s390__))
#define MAP_ANONYMOUS 0x20 /* Linux's value there (asm-generic/mman-common.h); glibc hides it under -std=c11 */
#endif
#ifdef MAP_ANONYMOUS
#define GPT2RT__HUGEPAGES 1
#endif
#endif
#ifdef GPT2RT_MPI /* CPU ranks in separate processes (10.4): compile with mpicc */
#ifdef GPT2RT_NO_DIST
#error "gpt2rt.h: GPT2RT_MPI and GPT2RT_NO_DIST together: MPI is part of the multi-process code NO_DIST leaves out"
#endif
#include <mpi.h>
#endif
#ifdef _WIN32
#define GPT2RT__IS_REG(mode) (((mode) & _S_IFMT) == _S_IFREG)
#define GPT2RT__IS_DIR(mode) (((mode) & _S_IFMT) == _S_IFDIR)
#else
#define GPT2RT__IS_REG(mode) S_ISREG(mode)
#define GPT2RT__IS_DIR(mode) S_ISDIR(mode)
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#include <immintrin.h>
#endif
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "gpt2rt.h: little-endian hosts only (safetensors files are little-endian, read and written with memcpy)"
#endif

/* ==== 1. Common ==== */

/* ==== 1.1 Threads, compiler helpers ==== */

/* the loop that follows runs on nt threads, each a fixed contiguous share
   (_RR: round robin, for triangular work) */
#ifdef _OPENMP
#define GPT2RT__PRAGMA(x) _Pragma(#x)
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static))
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static, 1))
static int gpt2rt__thread_id(void) { return omp_get_thread_num(); }
static int gpt2rt__default_threads(void) { return omp_get_max_threads(); }
#else
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt);
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt);
static int gpt2rt__thread_id(void) { return 0; }
static int gpt2rt__default_threads(void) { return 1; }
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GPT2RT__PRINTF(a, b)
#endif

/* a function only some builds call (the CUDA or MPI code, the tests) */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__MAYBE_UNUSED __attribute__((unused))
#else
#define GPT2RT__MAYBE_UNUSED
#endif

#define GPT2RT__PI 3.14159265358979323846

/* a function the CUDA kernels call too (the dropout hash: one definition, so the
   device draws the CPU's masks bit for bit) */
#if GPT2RT__CUDA
#define GPT2RT__HOSTDEV __host__ __device__
#else
#define GPT2RT__HOSTDEV
#endif

/* append printf-style text to (buf, cap) at n, counting what did not fit: the
   formatters return the length they needed, as snprintf does */
#define GPT2RT__PUT(...) do { int k_ = snprintf(buf ? buf + (n < cap ? n : cap) : NULL, \
        buf && n < cap ? cap - n : 0, __VA_ARGS__); if (k_ > 0) n += (size_t)k_; } while (0)

/* ==== 1.2 Types: sizes, tensors, the context ==== */

/* sizes of the model and what the memory knobs decide, resolved from the config */
typedef struct gpt2rt__dims {
    int64_t L, NH, C, HS;  /* layers, heads, width, head size C/NH */
    int64_t V, Vp, P;      /* vocab, padded vocab, positions (max_seq_len) */
    int64_t B, T, BT;      /* micro-batch, sequence, B*T (patches: B*M series of n_patches tokens) */
    int patches;           /* time series: patch inputs, regression head (V = Vp = 0) */
    int64_t Bw, Lb, M;     /* patches: windows, lookback, channels (B = Bw*M) */
    int64_t PL, PS, H;     /* patches: patch length, stride, horizon (T = n_patches) */
    int affine;            /* patches: RevIN's learned affine */
    gpt2rt_head seqhead;   /* aLLM4TS's sequence head, NEXT_PATCH or PATCH_DECODE; HEAD_LM (0): none */
    int64_t TH;            /* attention: queries t >= TH are placeholders (see only [0,TH) and
                              themselves); T: plain causal */
    int64_t n_out;         /* loss terms of a micro-batch: BT tokens, or Bw*H*M values */
    int nt;                /* CPU threads */
    int cuda;              /* planned for the CUDA backend */
    int ab;                /* bytes per activation element: 4 (fp32), 2 (bf16, fp16) */
    int wb;                /* bytes per stored weight: 4, or 2 with an fp32 master copy */
    unsigned frozen;       /* gpt2rt_group bits */
    int recompute, ck;     /* recompute level; FULL: checkpoint spacing k */
    int need_ln1, need_mlp_in; /* ln_1 out / ln_2 out and GELU out feed a trained weight's gradient */
    int keep_ln1, keep_mlp_in; /* ln_1 out; ln_2 out and GELU out: saved by the forward, else
                                  recomputed (if needed) or dropped */
    int rc;                /* SELECTIVE: a transient buffer for what the backward recomputes */
    int shards;            /* ZeRO-1: ranks the moments and master weights are split over; 1: none */
    int align;             /* bytes every buffer starts on: 64 (CPU), 256 (CUDA: cuBLASLt, vector loads) */
    int64_t KB, KS;        /* generation: KV cache rows and positions (0: no cache) */
    int64_t hc;            /* tokens the LM head holds logits of at once (classifier_chunk; BT: all) */
    int infer;             /* inference context: every group counts as frozen (no gradients, moments,
                              master), two layer blocks used in turn, no transient */
    int w16;               /* inference_weights = BF16: the weights arena holds bf16 (wb = 2, no master) */
} gpt2rt__dims;

/* the layers [l0, l1) one device holds; first holds the embeddings, last the head */
typedef struct gpt2rt__span {
    int64_t l0, l1;
    int first, last;
} gpt2rt__span;

/* a size a parameter's shape is made of (the parameter table's shape columns) */
typedef enum gpt2rt__dim {
    GPT2RT__DIM_1, GPT2RT__DIM_C, GPT2RT__DIM_3C, GPT2RT__DIM_4C, GPT2RT__DIM_VP, GPT2RT__DIM_P,
    GPT2RT__DIM_PL, GPT2RT__DIM_H, GPT2RT__DIM_TC, /* patches: patch_len, horizon, n_patches*C */
    GPT2RT__DIM_M /* patches: channels */
} gpt2rt__dim;

/* how a parameter starts when no weights are loaded: Hugging Face's rule */
typedef enum gpt2rt__init {
    GPT2RT__INIT_NORMAL, /* N(0, 0.02) */
    GPT2RT__INIT_RESID,  /* N(0, 0.02/sqrt(2*n_layer)): the projections into the residual stream */
    GPT2RT__INIT_ONES,   /* LayerNorm weights */
    GPT2RT__INIT_ZEROS   /* biases */
} gpt2rt__init;

/* one row of the parameter table (3.1) */
typedef struct gpt2rt__param_row {
    const char *name;       /* Hugging Face name; per layer: after "transformer.h.<l>." */
    gpt2rt__dim rows, cols; /* internal shape (out, in); cols DIM_1: a vector */
    int transpose;          /* Conv1D: the file stores (cols, rows) */
    int decay;              /* AdamW's weight decay applies */
    unsigned group;         /* one gpt2rt_group bit */
    gpt2rt__init init;
} gpt2rt__param_row;

/* one parameter tensor; internal layout (rows, cols) row-major, matrices (out, in) */
typedef struct gpt2rt__tensor {
    char name[96];     /* Hugging Face name */
    const gpt2rt__param_row *row; /* what it is */
    int64_t layer;     /* -1: a whole-model tensor */
    int64_t off;       /* offset in floats into the weights arena */
    int64_t goff;      /* offset into the grads, m and v arenas; -1: frozen */
    int64_t rows, cols;/* internal shape; 1-D tensors have cols == 1 */
    int64_t hf_rows;   /* rows that exist in the file (wte: vocab, not padded vocab) */
    int ndim;
    int transpose;     /* Conv1D: the file stores (cols, rows) */
    unsigned group;
    int decay;
} gpt2rt__tensor;

/* the whole-model parameters, rows of gpt2rt__model_rows; in the table and the arena
   wte and wpe precede the layers, ln_f follows them. Patch models have no wte; their
   rows of gpt2rt__ts_rows follow wpe (in_layer) and ln_f (out_layer). */
enum { GPT2RT__WTE, GPT2RT__WPE, GPT2RT__LNFW, GPT2RT__LNFB, GPT2RT__N_MODEL };
enum { GPT2RT__INW, GPT2RT__INB, GPT2RT__OUTW, GPT2RT__OUTB, GPT2RT__REVW, GPT2RT__REVB, GPT2RT__N_TS };

typedef struct gpt2rt__model_params {
    float *wte;         /* (Vp, C), also the tied LM head; NULL for patches */
    float *wpe;         /* (P, C) */
    float *lnfw, *lnfb; /* (C) */
    float *inw, *inb;   /* patches: (C, PL), (C) */
    float *outw, *outb; /* patches: (H, T*C), (H) */
    float *revw, *revb; /* patches with revin_affine: (M), (M); else NULL */
} gpt2rt__model_params;

/* per-layer parameters, rows of gpt2rt__layer_rows: 12 tensors in this order in the
   table and the arena */
enum { GPT2RT__LN1W, GPT2RT__LN1B, GPT2RT__QKVW, GPT2RT__QKVB, GPT2RT__PROJW, GPT2RT__PROJB,
       GPT2RT__LN2W, GPT2RT__LN2B, GPT2RT__FCW, GPT2RT__FCB, GPT2RT__FCPROJW, GPT2RT__FCPROJB,
       GPT2RT__PER_LAYER };

typedef struct gpt2rt__layer_params {
    float *ln1w, *ln1b;     /* (C) */
    float *qkvw, *qkvb;     /* (3C, C), (3C) */
    float *projw, *projb;   /* (C, C), (C) */
    float *ln2w, *ln2b;     /* (C) */
    float *fcw, *fcb;       /* (4C, C), (4C) */
    float *fcprojw, *fcprojb; /* (C, 4C), (C) */
} gpt2rt__layer_params;

/* what one layer's forward saves for its backward */
typedef struct gpt2rt__layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (BT,C), (BT), (BT) */
    float *qkv;                       /* (BT,3C) */
    float *lse;                       /* (B,NH,T) log-sum-exp of each softmax row */
    float *atty;                      /* (BT,C) attention output, heads side by side */
    float *res2;                      /* (BT,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (BT,C), (BT), (BT) */
    float *fch, *fch_gelu;            /* (BT,4C) before and after GELU */
    float *res3;                      /* (BT,C) layer output */
} gpt2rt__layer_acts;

/* A group of ranks that reduce together: the rank threads of one process (CPU data
   parallel, 1.4), processes under MPI, the devices of CUDA ranks (8.6). Every call is collective: every rank
   makes it with the same arguments. Sums are taken in rank order 0, 1, ..., size-1 (one
   fixed left-to-right sum), so every rank gets bitwise the same result, run to run. A
   failed call returns an error result with err set; it never waits forever (a timeout or
   a peer's failure gives an error naming the rank). */
typedef struct gpt2rt__comm gpt2rt__comm;
struct gpt2rt__comm {
    int rank, size;
    void *impl;
    char err[256];
    /* buf (n floats) := the sum over the ranks of buf */
    gpt2rt_result (*all_reduce)(gpt2rt__comm *c, float *buf, int64_t n);
    /* rank r's shard of buf := the sum over the ranks of that shard; the other shards
       are left unspecified. Shard r is [gpt2rt__shard_lo(n, size, r),
       gpt2rt__shard_lo(n, size, r + 1)). */
    gpt2rt_result (*reduce_scatter)(gpt2rt__comm *c, float *buf, int64_t n);
    /* every rank's shard r := rank r's shard r */
    gpt2rt_result (*all_gather)(gpt2rt__comm *c, float *buf, int64_t n);
    /* bytes of buf from root to every rank */
    gpt2rt_result (*broadcast)(gpt2rt__comm *c, void *buf, size_t bytes, int root);
    gpt2rt_result (*barrier)(gpt2rt__comm *c);
    void (*destroy)(gpt2rt__comm *c);
    /* Device communicators (8.6: NCCL, loopback) only; NULL in the host ones. Their
       buffers are device pointers and a collective is only enqueued on `stream` (a
       cudaStream_t, the communicator's own) when it returns; wait() returns once
       everything enqueued has finished, at most the timeout. */
    void *stream;
    gpt2rt_result (*wait)(gpt2rt__comm *c);
};
/* generation's arena (GPT2RT_MEM_KVCACHE, 3.2): the cache, and the scratch of one
   pass of up to N = KB * min(KS, GPT2RT__KV_CHUNK) new tokens through the model */
typedef struct gpt2rt__kv {
    float *k, *v;                  /* (L, KB, KS, C) keys and values, heads side by side */
    int64_t N;                     /* tokens a pass holds */
    int32_t *tok, *row, *pos;      /* (N) a pass's tokens, their row and position */
    float *x;                      /* (N,C) the residual stream */
    float *ln, *ln_mean, *ln_rstd; /* (N,C), (N), (N) */
    float *qkv;                    /* (N,3C) */
    float *atty, *proj;            /* (N,C) attention output; a projection's output */
    float *fch;                    /* (N,4C) MLP hidden, GELU in place */
    float *wvec;                   /* (13C) bf16 weights only: a layer's vectors widened (KV_WVEC) */
    float *att;                    /* (nt, pad16(KS)) one attention row per thread */
    float *logits;                 /* (KB,Vp) of the rows that sample after a pass */
    int32_t *sel;                  /* (KB) the pass's token whose logits each such row gets */
    int64_t *done, *cached, *limit;/* (KB) per row: ended; positions in the cache; last length */
    uint64_t *rng;                 /* (KB) per row sampling streams */
    double *prob;                  /* (Vp) sampling: unnormalised probabilities */
    struct gpt2rt__kv_cand *cand;  /* (Vp) sampling: candidates, sorted */
} gpt2rt__kv;

typedef struct gpt2rt__kv_cand { double p; int32_t id; } gpt2rt__kv_cand;

struct gpt2rt_ctx {
    gpt2rt_config cfg; /* resolved */
    gpt2rt__dims d;
    int failed;        /* creation failed: the context only holds the error */
    char error[4096];

    gpt2rt__tensor *tensors;
    int n_tensors;
    int64_t n_params;  /* floats in the weights arena */

    void *arena[GPT2RT_MEM_COUNT];
    uint64_t arena_bytes[GPT2RT_MEM_COUNT];

    int64_t n_train;   /* floats in the grads arena (and in m, v): the trainable ones */
    float *params;     /* (n_params); NULL when d.w16 */
    uint16_t *params16;/* (n_params) bf16 weights (d.w16), the same offsets; else NULL */
    float *grads;      /* (n_train) */
    float *m, *v;      /* (n_opt) each: the moments of the trained floats [opt_lo, opt_lo + n_opt)
                          (ZeRO-1: this rank's shard; else all, opt_lo = 0, n_opt = n_train) */
    int64_t n_opt, opt_lo, opt_hi;
    /* activations arena */
    int32_t *inputs, *targets;      /* (BT) copies, for the backward */
    float *x0;                      /* (BT,C) embeddings, layer 0 input (FULL: checkpoint 0) */
    int64_t l0;                     /* the first layer these activations hold (a layer-split stage's; 0) */
    unsigned char *layer_acts;      /* NONE/SELECTIVE: L blocks; FULL: ck slots; layer_stride bytes each */
    int64_t layer_stride;
    float *ckpt;                    /* FULL: (ceil(L/ck)-1, BT, C) inputs of layers ck, 2ck, ... */
    float *xout;                    /* FULL: (BT,C) the last layer's output */
    float *lnf, *lnf_mean, *lnf_rstd; /* (BT,C), (BT), (BT) */
    float *losses, *logit_lse;        /* (BT) */
    float *ts_patch;                  /* patches: (BT, PL) normalised patches, in_layer's input */
    float *ts_mean, *ts_std;          /* patches: (B) RevIN statistics of each series */
    float *ts_y, *ts_pred;            /* patches: (Bw,H,M) targets, de-normalised predictions */
    float *ts_z, *ts_dpatch;          /* revin_affine: (BT,PL) patches before the affine; transient:
                                         their gradient */
    float *logits;                    /* (BT,Vp) logits arena */
    float *dres, *dbuf, *dbig;        /* transient: (BT,C), (BT,C), (BT,4C) */
    float *rcbuf;                     /* transient: (BT,4C) outputs not kept (selective, frozen) */
    void *gemm_ws;                    /* workspace */
    float *att_scratch;               /* (nt, 2*pad(T)) */
    double *norm_parts;               /* (n_norm_chunks) */

    int64_t step;   /* optimizer updates taken */
    uint64_t rng;
    float loss;          /* the last forward's mean loss */
    double loss_sum;     /* the last forward's summed token losses */
    int64_t n_targets;   /* the last forward's counted targets */
    /* since the last update: gradients are of (sum of token losses) / (BT * grad_accum);
       the update rescales them to the mean over acc_targets, so the loss is
       normalised once however the micro-batches were cut */
    double acc_loss_sum;
    int64_t acc_targets;
    int acc_micro;
    int have_logits, have_loss, grads_pending;
    int head_fused; /* classifier_chunk: gpt2rt_step's forward already ran the head's backward */
    int have_pred; /* ts_pred holds the last series forward's predictions */
    gpt2rt__comm *comm; /* the data-parallel ranks this context reduces with (1.4); &comm_self alone */
    gpt2rt__comm comm_self;
    gpt2rt__comm comm_proc; /* world_size > 1: this process's communicator (10.4); destroy NULL: none */
    int64_t proc_targets;   /* world_size > 1: every rank's acc_targets, once the gradients are summed */
    int dp_reduced;     /* data parallel: this step's gradients are summed over the ranks */
    /* CPU data parallel in one process (10.1): the context the application holds is rank 0;
       ranks[1..n_ranks-1] are contexts of its own kind, driven by threads */
    int n_ranks;
    struct gpt2rt_ctx *ranks[GPT2RT_MAX_DEVICES]; /* ranks[0] == this context */
    void *group;        /* the threads' gpt2rt__comm_group */
    gpt2rt__kv kv; /* generation (config.kv_batch > 0) */
    int eval;      /* gpt2rt_mode: GPT2RT_MODE_EVAL turns dropout off */
    /* dropout of the last forward (its backward and recompute draw the same masks):
       on, the key of its optimizer step, its micro-batch since the last update */
    int drop_train;
    uint64_t drop_key;
    int64_t drop_micro;
    struct gpt2rt__ls *ls; /* CPU layer split (10.2): the stages' buffers; NULL otherwise */
    const struct gpt2rt__backend *be; /* the backend that runs this context's steps (7.3, 8.5) */
    struct gpt2rt__cu_state *cu; /* backend CUDA: the device state (8.5); NULL on the CPU */
    void *dgroup; /* CUDA data parallel, rank 0: the ranks' device communicators (8.6) */
    double *prof; /* (GPT2RT__PROF_COUNT) seconds per op class, summed; NULL: not profiled
                     (tools/bench_cpu sets it; the CPU backend's steps add to it, 7) */
};

/* ==== 1.3 Hooks, errors, time, random numbers ==== */

/* Every planned arena of at least 2 MiB but the KV cache gets a mapping of its own
   (mmap), starting on a 2 MiB boundary, and asks Linux for transparent huge pages on it
   (madvise MADV_HUGEPAGE); munmap returns it whole, so the advice never stays on heap
   memory that later mallocs of the application reuse. THP being in "madvise" mode (the
   usual distribution default), the 2-core AMD EPYC (Zen 4) decoded 124M with bf16
   weights at 96-97 tokens/s on huge pages against 82 on 4 KiB ones (fp32: 50-52 against
   43-45; a decode step streams every weight once), and its fp32 training step
   (bench_cpu, B=4 T=64, 2 threads) took 1215 ms against 1291 with the weights alone on
   them (means of 5 alternated runs, 4 of the 5 pairs faster; 87% of the matmul rate
   against 82%): the gradients', moments' and activations' pages stop missing the TLB.
   Those arenas are touched whole at creation, so the resident bytes do not change (the
   mapping's 4 MiB of slack is never touched); the KV cache fills as tokens come, and
   on huge pages a few positions would make 2 MiB resident (bench_gen's inference
   context: 1 MiB over its plan, against 0.2 MiB on 4 KiB pages). Advice only: the
   bytes and what they hold are the same whatever the kernel decides;
   GPT2RT_NO_HUGEPAGES compiles it out, and ASan builds keep every arena on malloc.
   Before the result sit the mapping's length (0: malloc'ed) and the pointer to free. */
#define GPT2RT__ALLOC_HEAD (sizeof(size_t) + sizeof(void *))
static void *gpt2rt__default_alloc(void *user, size_t bytes, int category) {
    (void)user;
#ifdef GPT2RT__HUGEPAGES
    const size_t huge = (size_t)2 << 20;
    if (category >= 0 && category != GPT2RT_MEM_KVCACHE && bytes >= huge && bytes <= SIZE_MAX - 2 * huge) {
        size_t len = bytes + 2 * huge; /* the header, then a 2 MiB boundary, then the bytes */
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            uintptr_t p = ((uintptr_t)m + GPT2RT__ALLOC_HEAD + huge - 1) & ~(uintptr_t)(huge - 1);
            (void)madvise((void *)p, bytes, MADV_HUGEPAGE);
            memcpy((void *)(p - GPT2RT__ALLOC_HEAD), &len, sizeof len);
            memcpy((void *)(p - sizeof(void *)), &m, sizeof m);
            return (void *)p;
        } /* else malloc below */
    }
#else
    (void)category;
#endif
    if (bytes > SIZE_MAX - GPT2RT_ALIGN - GPT2RT__ALLOC_HEAD) return NULL;
    unsigned char *raw = (unsigned char *)malloc(bytes + GPT2RT_ALIGN + GPT2RT__ALLOC_HEAD);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + GPT2RT__ALLOC_HEAD) + GPT2RT_ALIGN - 1) & ~(uintptr_t)(GPT2RT_ALIGN - 1);
    size_t zero = 0;
    memcpy((void *)(p - GPT2RT__ALLOC_HEAD), &zero, sizeof zero);
    memcpy((void *)(p - sizeof(void *)), &raw, sizeof(void *));
    return (void *)p;
}

static void gpt2rt__default_free(void *user, void *ptr, int category) {
    (void)user; (void)category;
    if (!ptr) return;
    void *raw;
    size_t len;
    memcpy(&len, (unsigned char *)ptr - GPT2RT__ALLOC_HEAD, sizeof len);
    memcpy(&raw, (unsigned char *)ptr - sizeof(void *), sizeof(void *));
#ifdef GPT2RT__HUGEPAGES
    if (len) { (void)munmap(raw, len); return; }
#endif
    free(raw);
}

static void *gpt2rt__alloc(const gpt2rt_config *c, size_t bytes, int category) {
    if (c->alloc) return c->alloc(c->alloc_user, bytes, category);
    return gpt2rt__default_alloc(NULL, bytes, category);
}

static void gpt2rt__free(const gpt2rt_config *c, void *ptr, int category) {
    if (!ptr) return;
    if (c->free) c->free(c->alloc_user, ptr, category);
    else gpt2rt__default_free(NULL, ptr, category);
}

static void gpt2rt__vlog(const gpt2rt_config *c, gpt2rt_log_level level, const char *fmt, va_list ap) {
    if (!c->log) return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    c->log(c->log_user, level, msg);
}

static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static void gpt2rt__log(const gpt2rt_ctx *ctx, gpt2rt_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gpt2rt__vlog(&ctx->cfg, level, fmt, ap);
    va_end(ap);
}

/* record the error in the context, tell the log, return the result */
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) GPT2RT__PRINTF(3, 4);
static gpt2rt_result gpt2rt__fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    if (ctx->cfg.log) ctx->cfg.log(ctx->cfg.log_user, GPT2RT_LOG_ERROR, ctx->error);
    return r;
}

/* every call on a context starts here; a context whose creation failed answers
   GPT2RT_ERR_STATE and keeps the creation error as its message */
#define GPT2RT__CHECK_CTX(ctx) do { \
        if (!(ctx)) return GPT2RT_ERR_INVALID_ARGUMENT; \
        if ((ctx)->failed) return GPT2RT_ERR_STATE; \
    } while (0)

static double gpt2rt__now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the one random stream; normal() draws with Box-Muller */
static uint64_t gpt2rt__rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double gpt2rt__rng_uniform(uint64_t *s) { /* in (0,1) */
    return ((double)(gpt2rt__rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Counter-based random numbers (dropout): element i of the stream `key` is a
   stateless hash of (key, i), splitmix64's i-th output from state key, so a mask is
   a function of where it is used and is never stored: the backward and the
   recompute draw it again, and neither the thread count nor a resume changes it.
   mix64 is splitmix64's finaliser, a bijection of 64 bits. */
static GPT2RT__HOSTDEV uint64_t gpt2rt__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static GPT2RT__HOSTDEV uint64_t gpt2rt__hash_at(uint64_t key, uint64_t i) { return gpt2rt__mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull); }

static int64_t gpt2rt__pad16(int64_t n) { return (n + 15) & ~(int64_t)15; } /* floats to 64 bytes */

/* ==== 1.4 Communicators ==== */
/* gpt2rt__comm (1.2) implementations: "self" (one rank: every collective is the
   identity), and more below as the parallel modes land. */

/* where shard r of n floats split over size ranks starts: equal shares rounded up to
   16 floats, so every shard starts 64-byte aligned (the last may be shorter or empty) */
static int64_t gpt2rt__shard_lo(int64_t n, int size, int r) {
    int64_t per = gpt2rt__pad16((n + size - 1) / size), lo = per * r;
    return lo < n ? lo : n;
}

/* ZeRO-1's gradient length: n floats rounded up to size shares of gpt2rt__shard_lo's
   padded share, so every shard is equal and every communicator (NCCL's ReduceScatter and
   AllGather take one count a rank) reduce-scatters. The padding floats are zero, summed
   as zeros and never updated. size 1: n, nothing to shard. */
static int64_t gpt2rt__shard_padded(int64_t n, int size) {
    return size > 1 ? gpt2rt__pad16((n + size - 1) / size) * size : n;
}

static gpt2rt_result gpt2rt__comm_self_floats(gpt2rt__comm *c, float *buf, int64_t n) {
    (void)c; (void)buf; (void)n;
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__comm_self_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    (void)buf; (void)bytes;
    if (root != 0) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = 1)", root);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__comm_self_barrier(gpt2rt__comm *c) { (void)c; return GPT2RT_OK; }
static void gpt2rt__comm_self_destroy(gpt2rt__comm *c) { (void)c; }

/* a one-rank communicator in caller-owned storage (nothing to free) */
static void gpt2rt__comm_self_init(gpt2rt__comm *c) {
    memset(c, 0, sizeof *c);
    c->rank = 0;
    c->size = 1;
    c->all_reduce = gpt2rt__comm_self_floats;
    c->reduce_scatter = gpt2rt__comm_self_floats;
    c->all_gather = gpt2rt__comm_self_floats;
    c->broadcast = gpt2rt__comm_self_broadcast;
    c->barrier = gpt2rt__comm_self_barrier;
    c->destroy = gpt2rt__comm_self_destroy;
}

/* "threads": the ranks are threads of this process (CPU data parallel). Each call
   publishes the rank's buffer, waits for every rank, works on shared memory, and waits
   again before returning, so no rank changes a buffer another still reads. Rank r sums
   shard r over the ranks in rank order: a fixed order, bitwise the same every run.
   A rank that fails marks the group failed: the others' waits return an error instead
   of hanging, and so does a wait longer than GPT2RT__COMM_TIMEOUT seconds. */
#ifndef _WIN32
#include <pthread.h>
#define GPT2RT__COMM_THREADS 1
#define GPT2RT__COMM_TIMEOUT 600
typedef struct gpt2rt__comm_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived, failed; /* failed: 1 + the rank that failed first */
    unsigned gen;              /* barrier generation */
    void *bufs[GPT2RT_MAX_DEVICES];
    gpt2rt__comm comms[GPT2RT_MAX_DEVICES];
    /* rank 0's reduce-scatters, and those of them whose shards were unequal (n not size
       equal shares): ZeRO-1 pads its gradient so that the second stays 0 (tests read them;
       all-reduces are not counted) */
    int64_t n_scatter, n_scatter_unequal;
} gpt2rt__comm_group;

static gpt2rt_result gpt2rt__comm_threads_wait(gpt2rt__comm *c) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = GPT2RT_OK;
    struct timespec until;
    timespec_get(&until, TIME_UTC);
    until.tv_sec += GPT2RT__COMM_TIMEOUT;
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->gen;
    if (!g->failed && ++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    while (!g->failed && g->gen == gen)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) != 0 && g->gen == gen && !g->failed) {
            g->failed = 1 + c->rank;
            pthread_cond_broadcast(&g->cv);
            snprintf(c->err, sizeof c->err, "rank %d of %d waited %d s for the other ranks at a collective",
                     c->rank, g->size, GPT2RT__COMM_TIMEOUT);
            pthread_mutex_unlock(&g->mu);
            return GPT2RT_ERR_STATE;
        }
    if (g->failed && g->gen == gen) {
        snprintf(c->err, sizeof c->err, "rank %d of %d stopped: rank %d failed", c->rank, g->size, g->failed - 1);
        r = GPT2RT_ERR_STATE;
    }
    pthread_mutex_unlock(&g->mu);
    return r;
}

/* rank c->rank failed outside a collective: release the ranks waiting for it */
static void gpt2rt__comm_threads_fail(gpt2rt__comm *c) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    pthread_mutex_lock(&g->mu);
    if (!g->failed) g->failed = 1 + c->rank;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* publish buf, then wait for every rank */
static gpt2rt_result gpt2rt__comm_threads_post(gpt2rt__comm *c, void *buf) {
    ((gpt2rt__comm_group *)c->impl)->bufs[c->rank] = buf;
    return gpt2rt__comm_threads_wait(c);
}

/* shard c->rank of buf := the sum of every rank's, in rank order */
static gpt2rt_result gpt2rt__comm_threads_sum_own(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    int64_t lo = gpt2rt__shard_lo(n, c->size, c->rank), hi = gpt2rt__shard_lo(n, c->size, c->rank + 1);
    for (int64_t i = lo; i < hi; i++) {
        float s = ((const float *)g->bufs[0])[i];
        for (int k = 1; k < c->size; k++) s += ((const float *)g->bufs[k])[i];
        buf[i] = s;
    }
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    if (c->rank == 0) { /* rank 0 alone writes them; tests read them after the ranks joined */
        g->n_scatter++;
        g->n_scatter_unequal += gpt2rt__shard_padded(n, c->size) != n;
    }
    return gpt2rt__comm_threads_sum_own(c, buf, n);
}

static gpt2rt_result gpt2rt__comm_threads_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    for (int k = 0; k < c->size; k++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, k), hi = gpt2rt__shard_lo(n, c->size, k + 1);
        if (k != c->rank && hi > lo) memcpy(buf + lo, (const float *)g->bufs[k] + lo, (size_t)(hi - lo) * sizeof(float));
    }
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__comm_threads_sum_own(c, buf, n);
    return r != GPT2RT_OK ? r : gpt2rt__comm_threads_all_gather(c, buf, n);
}

static gpt2rt_result gpt2rt__comm_threads_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)c->impl;
    if (root < 0 || root >= c->size) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = %d)", root, c->size);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__comm_threads_post(c, buf);
    if (r != GPT2RT_OK) return r;
    if (c->rank != root && bytes) memcpy(buf, g->bufs[root], bytes);
    return gpt2rt__comm_threads_wait(c);
}

static gpt2rt_result gpt2rt__comm_threads_barrier(gpt2rt__comm *c) { return gpt2rt__comm_threads_wait(c); }

/* the group is freed once, by its owner (gpt2rt__comm_group_free), not per rank */
static void gpt2rt__comm_threads_destroy(gpt2rt__comm *c) { (void)c; }

/* after every rank thread has returned: a failed group can be used again */
static void gpt2rt__comm_group_reset(gpt2rt__comm_group *g) {
    g->failed = 0;
    g->arrived = 0;
}

/* a group of size ranks; g->comms[r] is rank r's communicator. 0 on success. */
static int gpt2rt__comm_group_init(gpt2rt__comm_group *g, int size) {
    memset(g, 0, sizeof *g);
    if (pthread_mutex_init(&g->mu, NULL) != 0) return -1;
    if (pthread_cond_init(&g->cv, NULL) != 0) { pthread_mutex_destroy(&g->mu); return -1; }
    g->size = size;
    for (int r = 0; r < size; r++) {
        gpt2rt__comm *c = &g->comms[r];
        c->rank = r;
        c->size = size;
        c->impl = g;
        c->all_reduce = gpt2rt__comm_threads_all_reduce;
        c->reduce_scatter = gpt2rt__comm_threads_reduce_scatter;
        c->all_gather = gpt2rt__comm_threads_all_gather;
        c->broadcast = gpt2rt__comm_threads_broadcast;
        c->barrier = gpt2rt__comm_threads_barrier;
        c->destroy = gpt2rt__comm_threads_destroy;
    }
    return 0;
}

static void gpt2rt__comm_group_free(gpt2rt__comm_group *g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}
#endif

/* ==== 2. Config ==== */
/* Zero means default. gpt2rt__cfg_resolve fills every default (gpt2rt__cfg_default_*),
   then checks every field (gpt2rt__cfg_check_*), subsystem by subsystem in the order
   of the config struct; the first failed check names the field, its value and the
   valid range in err. Defaults never fail: they may see unchecked values and only
   compute from them what the checks will then refuse. */

static void gpt2rt__cfg_default_model(gpt2rt_config *c) {
    if (!c->n_layer) c->n_layer = 12;
    if (!c->n_head) c->n_head = 12;
    if (!c->n_embd) c->n_embd = 768;
    if (!c->vocab_size) c->vocab_size = 50257;
    if (!c->max_seq_len) c->max_seq_len = 1024;
    if (!c->padded_vocab) c->padded_vocab = (int)(((int64_t)c->vocab_size + 127) / 128 * 128 & INT32_MAX);
    if (c->input == GPT2RT_INPUT_PATCHES) { /* GPT4TS's ETT setting */
        if (!c->patch_len) c->patch_len = 16;
        if (!c->patch_stride) c->patch_stride = 8;
        if (!c->n_channels) c->n_channels = 1;
    }
    if ((c->head == GPT2RT_HEAD_REGRESSION || c->head == GPT2RT_HEAD_PATCH_DECODE) && !c->horizon) c->horizon = 96;
}

static void gpt2rt__cfg_default_batch(gpt2rt_config *c) {
    if (!c->batch_size) c->batch_size = 4;
    if (!c->seq_len) c->seq_len = c->input == GPT2RT_INPUT_PATCHES ? 336 : c->max_seq_len < 64 ? c->max_seq_len : 64;
    if (!c->grad_accum) c->grad_accum = 1;
    if (c->kv_batch && !c->kv_len) c->kv_len = c->max_seq_len;
}

/* AUTO's choice: CUDA when the implementation was compiled with it and a device is
   present (the end of section 8) */
static int gpt2rt__cuda_present(void);

/* backend, precision and memory */
static void gpt2rt__cfg_default_precision(gpt2rt_config *c) {
    if (c->backend == GPT2RT_BACKEND_AUTO) c->backend = gpt2rt__cuda_present() ? GPT2RT_BACKEND_CUDA : GPT2RT_BACKEND_CPU;
    if (c->precision == GPT2RT_PRECISION_DEFAULT) c->precision = GPT2RT_PRECISION_FP32;
    if (c->inference_weights == GPT2RT_PRECISION_DEFAULT) c->inference_weights = GPT2RT_PRECISION_FP32;
    if (c->precision == GPT2RT_PRECISION_FP16 && c->loss_scale == 0.0f) c->loss_scale = 65536.0f;
    if (c->recompute == GPT2RT_RECOMPUTE_FULL) {
        if (!c->checkpoint_every) c->checkpoint_every = 1;
        if (c->checkpoint_every == GPT2RT_CHECKPOINT_SQRT)
            c->checkpoint_every = c->n_layer > 1 ? (int)floor(sqrt((double)c->n_layer) + 0.5) : 1;
    }
}

/* the checks report through err, cap */
#define GPT2RT__BAD(r, ...) do { snprintf(err, cap, __VA_ARGS__); return r; } while (0)

/* the opaque id a multi-process run's rendezvous carries from rank 0 to every rank
   (10.3): NCCL's ncclUniqueId is 128 bytes */
#define GPT2RT__RDV_ID_BYTES 128

/* The rank variables a launcher sets, as strings (NULL: unset): torchrun's, then
   mpirun's (Open MPI). A struct, so that every inconsistency is testable without
   touching the process environment. */
typedef struct gpt2rt__proc_env {
    const char *world_size, *rank, *local_rank, *local_world_size; /* WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE */
    const char *master_addr, *master_port;                         /* MASTER_ADDR, MASTER_PORT */
    const char *ompi_size, *ompi_rank, *ompi_local_rank, *ompi_local_size; /* OMPI_COMM_WORLD_SIZE, _RANK,
                                                                              _LOCAL_RANK, _LOCAL_SIZE */
} gpt2rt__proc_env;

static gpt2rt__proc_env gpt2rt__proc_env_get(void) {
    gpt2rt__proc_env e;
    e.world_size = getenv("WORLD_SIZE"); e.rank = getenv("RANK"); e.local_rank = getenv("LOCAL_RANK");
    e.local_world_size = getenv("LOCAL_WORLD_SIZE");
    e.master_addr = getenv("MASTER_ADDR"); e.master_port = getenv("MASTER_PORT");
    e.ompi_size = getenv("OMPI_COMM_WORLD_SIZE"); e.ompi_rank = getenv("OMPI_COMM_WORLD_RANK");
    e.ompi_local_rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK"); e.ompi_local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return e;
}

/* an environment variable that must be a whole decimal integer in [lo, hi] */
static int gpt2rt__env_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* What the launcher says this process is: *world, *rank, *local (1, 0, 0 without a
   launcher), *mpi = 1 when mpirun's variables said it. Missing or inconsistent
   variables are an error that says what torchrun would have set. */
static gpt2rt_result gpt2rt__proc_from_env(const gpt2rt__proc_env *e, int *world, int *rank, int *local, int *mpi,
                                           char *err, size_t cap) {
    const char *fix = "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in every process it "
                      "starts (torchrun --nproc_per_node=N prog); another launcher must set all of them, or the "
                      "program sets world_size, rank and local_rank in the config";
    *world = 1; *rank = 0; *local = 0; *mpi = 0;
    if (e->rank || e->world_size || e->local_rank) {
        if (!e->world_size || !e->rank || !e->local_rank)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rank variables incomplete: RANK %s%s%s, WORLD_SIZE %s%s%s, "
                        "LOCAL_RANK %s%s%s (%s)", e->rank ? "= " : "is not set", e->rank ? e->rank : "", "",
                        e->world_size ? "= " : "is not set", e->world_size ? e->world_size : "", "",
                        e->local_rank ? "= " : "is not set", e->local_rank ? e->local_rank : "", "", fix);
        if (!gpt2rt__env_int(e->world_size, 1, 1 << 20, world))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "WORLD_SIZE = '%s' is not an integer in [1, 2^20] (%s)",
                        e->world_size, fix);
        if (!gpt2rt__env_int(e->rank, 0, *world - 1, rank))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "RANK = '%s' must be an integer in [0, WORLD_SIZE - 1 = %d] "
                        "(ranks count from 0; %s)", e->rank, *world - 1, fix);
        if (!gpt2rt__env_int(e->local_rank, 0, *rank, local))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "LOCAL_RANK = '%s' must be an integer in [0, RANK = %d] (the "
                        "process's index on its node; %s)", e->local_rank, *rank, fix);
        if (e->ompi_size && e->ompi_rank && (strcmp(e->ompi_size, e->world_size) || strcmp(e->ompi_rank, e->rank)))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "torchrun's RANK = %s of WORLD_SIZE = %s and mpirun's "
                        "OMPI_COMM_WORLD_RANK = %s of OMPI_COMM_WORLD_SIZE = %s disagree: launch with one of them",
                        e->rank, e->world_size, e->ompi_rank, e->ompi_size);
        return GPT2RT_OK;
    }
    if (e->ompi_size || e->ompi_rank) {
        if (!gpt2rt__env_int(e->ompi_size, 1, 1 << 20, world) || !gpt2rt__env_int(e->ompi_rank, 0, *world - 1, rank))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "mpirun's OMPI_COMM_WORLD_RANK = %s, OMPI_COMM_WORLD_SIZE = %s "
                        "are not a rank in [0, size - 1]", e->ompi_rank ? e->ompi_rank : "(not set)",
                        e->ompi_size ? e->ompi_size : "(not set)");
        if (e->ompi_local_rank && !gpt2rt__env_int(e->ompi_local_rank, 0, *rank, local))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "OMPI_COMM_WORLD_LOCAL_RANK = '%s' must lie in [0, rank = %d]",
                        e->ompi_local_rank, *rank);
        *mpi = 1;
    }
    return GPT2RT_OK;
}

static void gpt2rt__cfg_default_parallel(gpt2rt_config *c) {
    if (!c->n_devices) c->n_devices = 1;
    if (!c->world_size) { /* from the launcher; a failure leaves 0, which the check explains */
        char err[8];
        size_t cap = sizeof err;
        int w, r, l, mpi;
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        if (gpt2rt__proc_from_env(&e, &w, &r, &l, &mpi, err, cap) == GPT2RT_OK) {
            c->world_size = w; c->rank = r; c->local_rank = l;
            if (w > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_DEFAULT) {
#ifdef GPT2RT_MPI
                if (mpi) c->rendezvous = GPT2RT_RENDEZVOUS_MPI;
#endif
                if (c->rendezvous == GPT2RT_RENDEZVOUS_DEFAULT && e.master_addr) c->rendezvous = GPT2RT_RENDEZVOUS_ENV;
            }
        }
    }
    if (c->world_size > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_ENV) {
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        if (!c->master_addr[0] && e.master_addr && strlen(e.master_addr) < sizeof c->master_addr)
            memcpy(c->master_addr, e.master_addr, strlen(e.master_addr) + 1);
        if (!c->master_port && e.master_port) (void)gpt2rt__env_int(e.master_port, 1, 65535, &c->master_port);
    }
    if (c->world_size > 1 && c->rendezvous == GPT2RT_RENDEZVOUS_TCP) {
        if (!c->master_addr[0]) memcpy(c->master_addr, "127.0.0.1", 10);
        if (!c->master_port) c->master_port = 29500;
    }
    if (c->timeout_s == 0.0f) c->timeout_s = 300.0f;
    int all_zero = 1;
    for (int i = 0; i < GPT2RT_MAX_DEVICES; i++) all_zero &= c->device_ids[i] == 0;
    if (all_zero && !c->allow_shared_device && c->n_devices >= 1 && c->n_devices <= GPT2RT_MAX_DEVICES)
        /* torchrun's habit: process LOCAL_RANK uses cuda:LOCAL_RANK */
        for (int i = 0; i < c->n_devices && i < GPT2RT_MAX_DEVICES; i++)
            c->device_ids[i] = (c->local_rank > 0 && c->local_rank < 4096 ? c->local_rank : 0) * c->n_devices + i;
}

/* optimizer and runtime */
static void gpt2rt__cfg_default_optimizer(gpt2rt_config *c) {
    if (c->lr == 0.0f) c->lr = 3e-4f;
    if (c->beta1 == 0.0f) c->beta1 = 0.9f;
    if (c->beta2 == 0.0f) c->beta2 = 0.999f;
    if (c->eps == 0.0f) c->eps = 1e-8f;
    if (c->grad_clip == 0.0f) c->grad_clip = 1.0f;
    /* the thread count follows OpenMP (OMP_NUM_THREADS), clamped to the range a user may set */
    if (!c->n_threads) {
        int t = gpt2rt__default_threads();
        c->n_threads = t < 1 ? 1 : t > 1024 ? 1024 : t;
    }
    if (!c->seed) c->seed = 1337;
}

#define GPT2RT__NYI(cond, what) \
    do { if (cond) GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "%s is not implemented yet (set it to 0)", what); } while (0)
#define GPT2RT__RANGE(field, lo, hi) \
    do { if (c->field < (lo) || c->field > (hi)) \
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, #field " = %lld is out of range [%lld, %lld]", \
                    (long long)c->field, (long long)(lo), (long long)(hi)); } while (0)

static gpt2rt_result gpt2rt__cfg_check_hooks(const gpt2rt_config *c, char *err, size_t cap) {
    if ((c->alloc == NULL) != (c->free == NULL))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "alloc and free hooks must be set together (alloc %s, free %s)",
                    c->alloc ? "set" : "NULL", c->free ? "set" : "NULL");
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_model(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(n_layer, 1, 1024);
    GPT2RT__RANGE(n_head, 1, 1024);
    GPT2RT__RANGE(n_embd, 1, 65536);
    GPT2RT__RANGE(vocab_size, 1, 1 << 24);
    GPT2RT__RANGE(max_seq_len, 1, 1 << 20);
    if (c->n_embd % c->n_head)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_embd = %d is not a multiple of n_head = %d", c->n_embd, c->n_head);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab > (1 << 24))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "padded_vocab = %d must lie in [vocab_size = %d, %d]",
                    c->padded_vocab, c->vocab_size, 1 << 24);
    if ((int)c->input < 0 || c->input > GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "input = %d is not a gpt2rt_input", (int)c->input);
    if ((int)c->head < 0 || c->head > GPT2RT_HEAD_PATCH_DECODE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = %d is not a gpt2rt_head", (int)c->head);
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    const char *heads[4] = {"LM", "REGRESSION", "NEXT_PATCH", "PATCH_DECODE"};
    if (patches != (c->head != GPT2RT_HEAD_LM))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "input = %s goes with head = %s (got head = %s): token inputs have "
                    "the tied LM head, patch inputs the regression head", patches ? "PATCHES" : "TOKENS",
                    patches ? "REGRESSION" : "LM", heads[c->head]);
    if (!patches && (c->patch_len || c->patch_stride || c->n_channels || c->horizon || c->revin_affine))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "patch_len = %d, patch_stride = %d, n_channels = %d, horizon = %d, "
                    "revin_affine = %d apply to input = PATCHES only (set them to 0 for tokens)", c->patch_len,
                    c->patch_stride, c->n_channels, c->horizon, c->revin_affine);
    if (patches) {
        GPT2RT__RANGE(patch_len, 1, 1 << 16);
        GPT2RT__RANGE(patch_stride, 1, 1 << 16);
        GPT2RT__RANGE(n_channels, 1, 1 << 16);
        if (c->head != GPT2RT_HEAD_NEXT_PATCH) GPT2RT__RANGE(horizon, 1, 1 << 20);
        GPT2RT__RANGE(revin_affine, 0, 1);
    }
    /* aLLM4TS (issue 25): stage 1's targets are the model's own normalised patches, so
       RevIN's affine (which would move the targets with the weights) and a horizon do
       not apply; the placeholder mask needs placeholders */
    if (c->head == GPT2RT_HEAD_NEXT_PATCH && (c->horizon || c->revin_affine))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = NEXT_PATCH predicts the next patch of the lookback itself: "
                    "horizon = %d and revin_affine = %d must be 0", c->horizon, c->revin_affine);
    if ((int)c->attn_mask < 0 || c->attn_mask > GPT2RT_MASK_PLACEHOLDERS)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "attn_mask = %d is not a gpt2rt_attn_mask", (int)c->attn_mask);
    if (c->attn_mask == GPT2RT_MASK_PLACEHOLDERS && c->head != GPT2RT_HEAD_PATCH_DECODE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "attn_mask = PLACEHOLDERS needs head = PATCH_DECODE (got head = %s): "
                    "only it has placeholder positions", heads[c->head]);

    const unsigned all = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM |
                         GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_HEAD;
    /* the groups this model has: tokens + LM head, or patches + in/out layers */
    const unsigned model = all & ~(unsigned)(patches ? GPT2RT_GROUP_TOKEN_EMBED : GPT2RT_GROUP_HEAD);
    if (c->frozen & ~all)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x has bits outside the gpt2rt_group values (0x%x)",
                    c->frozen, all);
    if (!patches && (c->frozen & GPT2RT_GROUP_HEAD))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen includes GPT2RT_GROUP_HEAD, which has no parameters "
                    "with token inputs and the tied LM head");
    if (patches && (c->frozen & GPT2RT_GROUP_TOKEN_EMBED))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen includes GPT2RT_GROUP_TOKEN_EMBED, which patch inputs do "
                    "not have (in_layer and out_layer are GPT2RT_GROUP_HEAD)");
    if ((c->frozen & model) == model)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "frozen = 0x%x freezes every parameter group: nothing to train",
                    c->frozen);
    return GPT2RT_OK;
}

/* dropout: probabilities in [0, 1) (1 would drop everything and scale by 1/0) */
static gpt2rt_result gpt2rt__cfg_check_dropout(const gpt2rt_config *c, char *err, size_t cap) {
    const char *names[3] = {"dropout", "attn_dropout", "head_dropout"};
    const float ps[3] = {c->dropout, c->attn_dropout, c->head_dropout};
    for (int i = 0; i < 3; i++)
        if (!(ps[i] >= 0.0f && ps[i] < 1.0f))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "%s = %g must lie in [0, 1) (a probability; 0 = off)", names[i],
                        (double)ps[i]);
    return GPT2RT_OK;
}

/* patches: the tokens of one series, (L - patch_len)/stride + 2 (GPT4TS pads stride steps);
   NEXT_PATCH: (L - patch_len)/stride + 1, aLLM4TS's stage 1 (no padding: a padded last
   patch would be a target of repeated values); PATCH_DECODE: the padded history, then
   ceil(horizon/patch_len) placeholders */
static int64_t gpt2rt__cfg_n_history(const gpt2rt_config *c) {
    return ((int64_t)c->seq_len - c->patch_len) / c->patch_stride + (c->head == GPT2RT_HEAD_NEXT_PATCH ? 1 : 2);
}
static int64_t gpt2rt__cfg_n_patches(const gpt2rt_config *c) {
    int64_t f = c->head == GPT2RT_HEAD_PATCH_DECODE ? ((int64_t)c->horizon + c->patch_len - 1) / c->patch_len : 0;
    return gpt2rt__cfg_n_history(c) + f;
}

static gpt2rt_result gpt2rt__cfg_check_batch(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(batch_size, 1, 1 << 20);
    if (c->input == GPT2RT_INPUT_PATCHES) {
        if (c->seq_len < c->patch_len || c->seq_len > (1 << 24))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "seq_len = %d (the lookback) must lie in [patch_len = %d, 2^24]",
                        c->seq_len, c->patch_len);
        int64_t np = gpt2rt__cfg_n_patches(c);
        if (c->head == GPT2RT_HEAD_NEXT_PATCH && np < 2)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "head = NEXT_PATCH needs 2 patches or more: seq_len = %d holds "
                        "(%d - %d)/%d + 1 = %lld (seq_len >= patch_len + patch_stride)", c->seq_len, c->seq_len,
                        c->patch_len, c->patch_stride, (long long)np);
        if (c->head == GPT2RT_HEAD_PATCH_DECODE && np > c->max_seq_len)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_patches = %lld history + %lld placeholders (ceil(horizon / "
                        "patch_len) = ceil(%d / %d)) = %lld exceeds max_seq_len = %d (the positions of wpe)",
                        (long long)gpt2rt__cfg_n_history(c), (long long)(np - gpt2rt__cfg_n_history(c)), c->horizon,
                        c->patch_len, (long long)np, c->max_seq_len);
        if (np > c->max_seq_len)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_patches = (seq_len - patch_len)/patch_stride + 2 = (%d - %d)/%d "
                        "+ 2 = %lld exceeds max_seq_len = %d (the positions of wpe)", c->seq_len, c->patch_len,
                        c->patch_stride, (long long)np, c->max_seq_len);
        if ((int64_t)c->batch_size * c->n_channels * (np > c->seq_len ? np : c->seq_len) > ((int64_t)1 << 30) ||
            (int64_t)c->batch_size * c->n_channels * c->horizon > ((int64_t)1 << 30))
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "batch_size * n_channels * max(seq_len, horizon) = %d * %d * %d "
                        "exceeds 2^30", c->batch_size, c->n_channels, c->seq_len > c->horizon ? c->seq_len : c->horizon);
        GPT2RT__RANGE(grad_accum, 1, 1 << 20);
        return GPT2RT_OK;
    }
    if (c->seq_len < 1 || c->seq_len > c->max_seq_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "seq_len = %d must lie in [1, max_seq_len = %d]", c->seq_len, c->max_seq_len);
    if ((int64_t)c->batch_size * c->seq_len > ((int64_t)1 << 30))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "batch_size * seq_len = %d * %d exceeds 2^30 tokens",
                    c->batch_size, c->seq_len);
    GPT2RT__RANGE(grad_accum, 1, 1 << 20);
    return GPT2RT_OK;
}

/* generation's KV cache: token models only, at most max_seq_len positions */
static gpt2rt_result gpt2rt__cfg_check_kv(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->kv_batch < 0 || c->kv_batch > (1 << 16))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch = %d is out of range [0, 65536] (0: no KV cache)",
                    c->kv_batch);
    if (!c->kv_batch && c->kv_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_len = %d applies with kv_batch > 0 (the KV cache's rows; "
                    "it is 0)", c->kv_len);
    if (!c->kv_batch) return GPT2RT_OK;
    if (c->input == GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch = %d: generation needs input = TOKENS (this model "
                    "has patch inputs)", c->kv_batch);
    if (c->kv_len < 1 || c->kv_len > c->max_seq_len)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_len = %d must lie in [1, max_seq_len = %d]", c->kv_len,
                    c->max_seq_len);
    if ((int64_t)c->kv_batch * c->kv_len > ((int64_t)1 << 30))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "kv_batch * kv_len = %d * %d exceeds 2^30 positions",
                    c->kv_batch, c->kv_len);
    return GPT2RT_OK;
}

/* the inference context: forward only, so the knobs that shape training's memory have
   nothing to act on (refused rather than silently ignored) */
static gpt2rt_result gpt2rt__cfg_check_inference(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->inference != 0 && c->inference != 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = %d must be 0 (training) or 1 (generation and "
                    "forward-only evaluation)", c->inference);
    int w = (int)c->inference_weights;
    if (w != GPT2RT_PRECISION_DEFAULT && w != GPT2RT_PRECISION_FP32 && w != GPT2RT_PRECISION_BF16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = %d must be GPT2RT_PRECISION_FP32 (%d) or "
                    "GPT2RT_PRECISION_BF16 (%d)", w, (int)GPT2RT_PRECISION_FP32, (int)GPT2RT_PRECISION_BF16);
    if (w == GPT2RT_PRECISION_BF16) {
        /* a training context's weights are what AdamW updates: fp32 (precision sets its CUDA copies) */
        if (!c->inference)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = BF16 (%d) with inference = 0: bf16 "
                        "weights are for an inference context (set inference = 1), a training context keeps "
                        "fp32 weights", w);
        if (c->backend != GPT2RT_BACKEND_CPU)
            GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "inference_weights = BF16 (%d) with backend = %d: bf16 "
                        "weights are implemented on the CPU backend only (set backend = GPT2RT_BACKEND_CPU)", w,
                        (int)c->backend);
        if (c->input == GPT2RT_INPUT_PATCHES)
            GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "inference_weights = BF16 (%d) with input = PATCHES: bf16 "
                        "weights serve token generation only (use FP32 for time series)", w);
    }
    if (!c->inference) return GPT2RT_OK;
    if (c->recompute != GPT2RT_RECOMPUTE_NONE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = 1 with recompute = %d: recompute trades the "
                    "backward's saved activations, which an inference context does not keep; set recompute = NONE",
                    (int)c->recompute);
    if (c->parallel != GPT2RT_PARALLEL_NONE)
        GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "inference = 1 with parallel = %d is not implemented yet: "
                    "use parallel = NONE (one device)", (int)c->parallel);
    if (c->frozen)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "inference = 1 with frozen = 0x%x: nothing is trained, so "
                    "nothing is frozen; set frozen = 0", c->frozen);
    return GPT2RT_OK;
}

/* backend, precision and memory */
static gpt2rt_result gpt2rt__cfg_check_precision(const gpt2rt_config *c, char *err, size_t cap) {
    if ((int)c->backend < 0 || c->backend > GPT2RT_BACKEND_CUDA)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "backend = %d is not a gpt2rt_backend", (int)c->backend);
    int cuda = c->backend == GPT2RT_BACKEND_CUDA;
    if ((int)c->precision < 0 || c->precision > GPT2RT_PRECISION_FP16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "precision = %d is not a gpt2rt_precision", (int)c->precision);
    if (!cuda && c->precision != GPT2RT_PRECISION_FP32)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "precision = %s needs backend = GPT2RT_BACKEND_CUDA; the CPU backend "
                    "computes in fp32", c->precision == GPT2RT_PRECISION_BF16 ? "BF16" : "FP16");
    if (!cuda && c->tf32)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "tf32 = %d needs backend = GPT2RT_BACKEND_CUDA", c->tf32);
    if (c->tf32 && c->precision != GPT2RT_PRECISION_FP32)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "tf32 = %d applies to fp32 matrix products only", c->tf32);
    if (c->loss_scale != 0.0f && c->precision != GPT2RT_PRECISION_FP16)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "loss_scale = %g applies to precision = FP16 only",
                    (double)c->loss_scale);
    if (c->precision == GPT2RT_PRECISION_FP16 && !(c->loss_scale >= 1.0f && c->loss_scale <= 16777216.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "loss_scale = %g must lie in [1, 2^24]", (double)c->loss_scale);
    if ((int)c->recompute < 0 || c->recompute > GPT2RT_RECOMPUTE_FULL)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "recompute = %d is not a gpt2rt_recompute", (int)c->recompute);
    if (c->recompute != GPT2RT_RECOMPUTE_FULL && c->checkpoint_every)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "checkpoint_every = %d applies to recompute = FULL only",
                    c->checkpoint_every);
    if (c->recompute == GPT2RT_RECOMPUTE_FULL && (c->checkpoint_every < 1 || c->checkpoint_every > c->n_layer))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "checkpoint_every = %d must lie in [1, n_layer = %d] "
                    "(or be GPT2RT_CHECKPOINT_SQRT)", c->checkpoint_every, c->n_layer);
    if (c->classifier_chunk < 0)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "classifier_chunk = %d must be >= 0 (0: every token's logits at "
                    "once)", c->classifier_chunk);
    if (c->classifier_chunk && c->input == GPT2RT_INPUT_PATCHES)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "classifier_chunk = %d applies to token models (the LM head); "
                    "this one has patch inputs", c->classifier_chunk);
    if (c->classifier_chunk && c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT)
        GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "classifier_chunk = %d with parallel = LAYER_SPLIT is not "
                    "implemented yet: set 0, or use one device or DATA", c->classifier_chunk);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cfg_check_parallel(const gpt2rt_config *c, char *err, size_t cap) {
    GPT2RT__RANGE(n_devices, 1, GPT2RT_MAX_DEVICES);
    if ((int)c->parallel < 0 || c->parallel > GPT2RT_PARALLEL_LAYER_SPLIT)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = %d is not a gpt2rt_parallel", (int)c->parallel);
    if (c->parallel == GPT2RT_PARALLEL_NONE && c->n_devices > 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "n_devices = %d needs parallel = DATA or LAYER_SPLIT",
                    c->n_devices);
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->n_devices < 2)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT needs n_devices >= 2 (it is %d)", c->n_devices);
    /* data parallel runs over world_size processes x n_devices each (checked below) */
    if (c->parallel == GPT2RT_PARALLEL_DATA && c->n_devices < 2 && c->world_size == 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = DATA needs world_size x n_devices >= 2 (it is 1 x %d): "
                    "set n_devices, or launch several processes (torchrun, mpirun)", c->n_devices);
    if (c->shard_optimizer != 0 && c->shard_optimizer != 1)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "shard_optimizer = %d must be 0 or 1", c->shard_optimizer);
    if (c->shard_optimizer && c->parallel != GPT2RT_PARALLEL_DATA)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "shard_optimizer = 1 shards the optimizer over data-parallel "
                    "ranks: it needs parallel = DATA (it is %s)", c->parallel == GPT2RT_PARALLEL_NONE ? "NONE"
                    : "LAYER_SPLIT");
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->n_layer < c->n_devices)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT over %d devices needs n_layer >= %d "
                    "(it is %d)", c->n_devices, c->n_devices, c->n_layer);
    for (int i = 0; i < GPT2RT_MAX_DEVICES; i++)
        if (c->device_ids[i] < 0)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[%d] = %d is negative", i, c->device_ids[i]);
    return GPT2RT_OK;
}

/* layer split's stages: explicit first layers (stage_first_layer), or the planner's
   split (gpt2rt__stage_bounds); under FULL recompute every stage starts at a checkpoint,
   so no recomputed segment spans two stages */
static gpt2rt_result gpt2rt__cfg_check_stages(const gpt2rt_config *c, char *err, size_t cap) {
    const int *f = c->stage_first_layer;
    int n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT, given = 0;
    int ck = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    for (int s = 0; s < GPT2RT_MAX_DEVICES; s++) {
        if (!f[s]) continue;
        if (!split)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d applies to parallel = LAYER_SPLIT "
                        "(it is %s); set it to 0", s, f[s], c->parallel == GPT2RT_PARALLEL_DATA ? "DATA" : "NONE");
        if (s >= n)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d names a stage beyond the n_devices = "
                        "%d stages (0..%d); set it to 0", s, f[s], n, n - 1);
        if (!s)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[0] = %d: stage 0 starts at layer 0 (it holds "
                        "the embedding); give the first layers of stages 1..%d", f[0], n - 1);
        given = 1;
    }
    if (!split) return GPT2RT_OK;
    if (!given) { /* the planner's: at least a checkpoint segment a stage */
        int segs = (c->n_layer + ck - 1) / ck;
        if (segs < n)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "parallel = LAYER_SPLIT over %d devices with recompute = FULL "
                        "needs every stage to start at a checkpoint, but checkpoint_every = %d cuts n_layer = %d "
                        "into %d segment%s; lower checkpoint_every (1 always works)", n, ck, c->n_layer, segs,
                        segs > 1 ? "s" : "");
        return GPT2RT_OK;
    }
    for (int s = 1; s < n; s++) {
        if (!f[s])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = 0 while others are set: give the first "
                        "layer of every stage 1..%d, or none (all 0: the planner's split)", s, n - 1);
        if (f[s] < 1 || f[s] > c->n_layer - 1)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer[%d] = %d must lie in [1, n_layer - 1 = %d]: "
                        "every stage holds at least one layer", s, f[s], c->n_layer - 1);
        if (s > 1 && f[s] == f[s - 1])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage %d would hold no layer: stage_first_layer[%d] = "
                        "stage_first_layer[%d] = %d", s - 1, s - 1, s, f[s]);
        if (s > 1 && f[s] < f[s - 1])
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "stage_first_layer must increase: stage_first_layer[%d] = %d < "
                        "stage_first_layer[%d] = %d", s, f[s], s - 1, f[s - 1]);
        if (f[s] % ck)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "recompute = FULL keeps every %d-th layer's input "
                        "(checkpoint_every = %d) and each stage must start at one: stage_first_layer[%d] = %d is not "
                        "a multiple of %d", ck, ck, s, f[s], ck);
    }
    return GPT2RT_OK;
}

/* The processes: world_size resolved from the config or the launcher (0 after the
   defaults: the launcher's variables were wrong, and gpt2rt__proc_from_env says how). */
static gpt2rt_result gpt2rt__cfg_check_process(const gpt2rt_config *c, char *err, size_t cap) {
    if (c->world_size == 0) {
        int w, r, l, mpi;
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        gpt2rt_result res = gpt2rt__proc_from_env(&e, &w, &r, &l, &mpi, err, cap);
        if (res != GPT2RT_OK) return res;
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "world_size = 0 was not resolved"); /* not reached */
    }
    GPT2RT__RANGE(world_size, 1, 1 << 20);
    if (c->rank < 0 || c->rank >= c->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rank = %d must lie in [0, world_size - 1 = %d] (ranks count from 0)",
                    c->rank, c->world_size - 1);
    if (c->local_rank < 0 || c->local_rank > c->rank)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "local_rank = %d must lie in [0, rank = %d] (the process's index on "
                    "its node)", c->local_rank, c->rank);
    if ((int)c->rendezvous < 0 || c->rendezvous > GPT2RT_RENDEZVOUS_MPI)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %d is not a gpt2rt_rendezvous", (int)c->rendezvous);
    if (!(c->timeout_s > 0.0f && c->timeout_s <= 86400.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "timeout_s = %g must lie in (0, 86400] seconds", (double)c->timeout_s);
    GPT2RT__RANGE(allow_shared_device, 0, 1);
    if (c->world_size == 1) return GPT2RT_OK;
    if (c->parallel == GPT2RT_PARALLEL_NONE)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "this process is rank %d of world_size = %d (from the config or the "
                    "launcher) but parallel = NONE: every process would train its own copy; set parallel = DATA, "
                    "or world_size = 1 to train alone", c->rank, c->world_size);
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT)
        GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "parallel = LAYER_SPLIT splits the layers over the devices of one "
                    "process; world_size = %d processes is for parallel = DATA", c->world_size);
#ifdef GPT2RT_NO_DIST
    GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "world_size = %d processes: this build has no multi-process code (the "
                "implementation was compiled with GPT2RT_NO_DIST); run one process (world_size = 1, data parallel "
                "over n_devices of this process), or build without GPT2RT_NO_DIST", c->world_size);
#endif
    switch (c->rendezvous) {
    case GPT2RT_RENDEZVOUS_DEFAULT:
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "world_size = %d processes need a rendezvous: torchrun sets "
                    "MASTER_ADDR and MASTER_PORT (rendezvous ENV), mpirun with a GPT2RT_MPI build uses MPI; or set "
                    "rendezvous = TCP, FILE or MPI in the config", c->world_size);
    case GPT2RT_RENDEZVOUS_ENV:
    case GPT2RT_RENDEZVOUS_TCP:
        if (!c->master_addr[0] || memchr(c->master_addr, 0, sizeof c->master_addr) == NULL)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %s needs rank 0's address: MASTER_ADDR is not set "
                        "(torchrun sets it; or set master_addr in the config)",
                        c->rendezvous == GPT2RT_RENDEZVOUS_ENV ? "ENV" : "TCP");
        if (c->master_port < 1 || c->master_port > 65535)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = %s needs rank 0's port in [1, 65535]: master_port "
                        "= %d (MASTER_PORT %s%s%s; torchrun sets it, default 29500)",
                        c->rendezvous == GPT2RT_RENDEZVOUS_ENV ? "ENV" : "TCP", c->master_port,
                        getenv("MASTER_PORT") ? "= '" : "is not set", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "",
                        getenv("MASTER_PORT") ? "'" : "");
        break;
    case GPT2RT_RENDEZVOUS_FILE:
        if (!c->rendezvous_file[0] || memchr(c->rendezvous_file, 0, sizeof c->rendezvous_file) == NULL)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous = FILE needs rendezvous_file: a path every rank "
                        "can read and write");
        break;
    case GPT2RT_RENDEZVOUS_MPI:
#ifndef GPT2RT_MPI
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "rendezvous = MPI needs the implementation compiled with -DGPT2RT_MPI "
                    "(mpicc; Debian: apt-get install openmpi-bin libopenmpi-dev)");
#else
        break;
#endif
    }
    return GPT2RT_OK;
}

/* The devices this process drives, against the `visible` devices the driver counts
   (CUDA_VISIBLE_DEVICES = cvd, NULL: unset; local_world: processes on this node, 0:
   unknown). A pure function of its arguments, so every refusal is testable on a
   machine without a GPU. */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__dev_check(int visible, const char *cvd, int local_world, const gpt2rt_config *c,
                                       char *err, size_t cap) {
    char vis[160];
    snprintf(vis, sizeof vis, "CUDA_VISIBLE_DEVICES %s%.100s%s", cvd ? "= '" : "is not set", cvd ? cvd : "",
             cvd ? "' renumbers them from 0" : "");
    if (visible < 1)
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "no CUDA device is visible (%s); backend = CPU runs without one", vis);
    int n = c->n_devices < GPT2RT_MAX_DEVICES ? c->n_devices : GPT2RT_MAX_DEVICES;
    if (local_world > 1 && (int64_t)local_world * n > visible && !c->allow_shared_device)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "%d processes on this node x n_devices = %d need %lld GPUs, %d "
                    "visible (%s): start at most %d processes per node (torchrun --nproc_per_node=%d)", local_world,
                    n, (long long)local_world * n, visible, vis, visible / n > 0 ? visible / n : 1,
                    visible / n > 0 ? visible / n : 1);
    for (int i = 0; i < n; i++) {
        if (c->device_ids[i] >= visible)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "invalid device ordinal: device_ids[%d] = %d%s, but %d CUDA "
                        "device(s) are visible, ordinals 0..%d (%s); fix device_ids, or run fewer processes per node",
                        i, c->device_ids[i], c->local_rank ? " (from local_rank x n_devices + i)" : "", visible,
                        visible - 1, vis);
        for (int j = 0; j < i; j++)
            if (c->device_ids[j] == c->device_ids[i] && !c->allow_shared_device)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "device_ids[%d] = device_ids[%d] = %d: one GPU twice would "
                            "hold two replicas in one memory, and NCCL refuses it (\"Duplicate GPU detected\"); give "
                            "distinct ordinals (allow_shared_device = 1 is "
                            "the test mode that allows it)", j, i, c->device_ids[i]);
    }
    return GPT2RT_OK;
}

/* optimizer and runtime */
static gpt2rt_result gpt2rt__cfg_check_optimizer(const gpt2rt_config *c, char *err, size_t cap) {
    if (!(c->lr > 0.0f && c->lr < 1e3f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "lr = %g must lie in (0, 1000)", (double)c->lr);
    if (!(c->min_lr_frac >= 0.0f && c->min_lr_frac <= 1.0f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "min_lr_frac = %g must lie in [0, 1]", (double)c->min_lr_frac);
    if (!(c->beta1 > 0.0f && c->beta1 < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "beta1 = %g must lie in (0, 1)", (double)c->beta1);
    if (!(c->beta2 > 0.0f && c->beta2 < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "beta2 = %g must lie in (0, 1)", (double)c->beta2);
    if (!(c->eps > 0.0f && c->eps < 1.0f)) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "eps = %g must lie in (0, 1)", (double)c->eps);
    if (!(c->weight_decay >= 0.0f && c->weight_decay < 1e3f))
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "weight_decay = %g must lie in [0, 1000)", (double)c->weight_decay);
    if (c->grad_clip != c->grad_clip) GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "grad_clip is NaN");
    GPT2RT__RANGE(warmup_steps, 0, INT32_MAX);
    GPT2RT__RANGE(total_steps, 0, INT32_MAX);
    if (c->total_steps && c->warmup_steps > c->total_steps)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "warmup_steps = %d exceeds total_steps = %d (the schedule would "
                    "end before the warmup does); make warmup_steps <= total_steps, or total_steps 0 for a constant "
                    "learning rate after the warmup", c->warmup_steps, c->total_steps);
    GPT2RT__RANGE(n_threads, 1, 1024);
    return GPT2RT_OK;
}

#undef GPT2RT__RANGE
#undef GPT2RT__NYI
#undef GPT2RT__BAD

/* Fill every default, then check every field. err gets the reason, with numbers. */
static gpt2rt_result gpt2rt__cfg_resolve(const gpt2rt_config *in, gpt2rt_config *c, char *err, size_t cap) {
    gpt2rt_result r;
    *c = *in;
    gpt2rt__cfg_default_model(c);
    gpt2rt__cfg_default_batch(c);
    gpt2rt__cfg_default_precision(c);
    gpt2rt__cfg_default_parallel(c);
    gpt2rt__cfg_default_optimizer(c);
    if ((r = gpt2rt__cfg_check_hooks(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_model(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_dropout(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_batch(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_kv(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_inference(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_precision(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_process(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_parallel(c, err, cap)) != GPT2RT_OK) return r;
    if ((r = gpt2rt__cfg_check_stages(c, err, cap)) != GPT2RT_OK) return r;
    return gpt2rt__cfg_check_optimizer(c, err, cap);
}

static gpt2rt__dims gpt2rt__dims_of(const gpt2rt_config *c) {
    gpt2rt__dims d;
    d.L = c->n_layer; d.NH = c->n_head; d.C = c->n_embd; d.HS = d.C / d.NH;
    d.V = c->vocab_size; d.Vp = c->padded_vocab; d.P = c->max_seq_len;
    d.B = c->batch_size; d.T = c->seq_len; d.BT = d.B * d.T;
    d.patches = c->input == GPT2RT_INPUT_PATCHES;
    d.Bw = d.B; d.Lb = d.T; d.M = 1; d.PL = d.PS = d.H = 0; d.affine = 0; d.seqhead = GPT2RT_HEAD_LM;
    if (d.patches) { /* the transformer sees B*M series of n_patches tokens; no vocabulary */
        d.M = c->n_channels; d.PL = c->patch_len; d.PS = c->patch_stride; d.H = c->horizon;
        d.affine = c->revin_affine;
        d.B = d.Bw * d.M; d.T = gpt2rt__cfg_n_patches(c); d.BT = d.B * d.T;
        d.V = d.Vp = 0;
        if (c->head == GPT2RT_HEAD_NEXT_PATCH || c->head == GPT2RT_HEAD_PATCH_DECODE) d.seqhead = c->head;
    }
    d.TH = c->attn_mask == GPT2RT_MASK_PLACEHOLDERS ? gpt2rt__cfg_n_history(c) : d.T;
    /* NEXT_PATCH: every position but the last predicts the next patch's PL values */
    d.n_out = d.seqhead == GPT2RT_HEAD_NEXT_PATCH ? d.B * (d.T - 1) * d.PL : d.patches ? d.Bw * d.H * d.M : d.BT;
    d.nt = c->n_threads; /* CPU data parallel: each rank thread runs its share (at least one) */
    if (c->parallel == GPT2RT_PARALLEL_DATA && c->backend != GPT2RT_BACKEND_CUDA) d.nt = c->n_threads / c->n_devices > 1 ? c->n_threads / c->n_devices : 1;
    d.shards = c->parallel == GPT2RT_PARALLEL_DATA && c->shard_optimizer ? c->n_devices * c->world_size : 1;
    d.cuda = c->backend == GPT2RT_BACKEND_CUDA;
    d.ab = c->precision == GPT2RT_PRECISION_FP32 ? 4 : 2;
    d.wb = d.ab;
    d.frozen = c->frozen;
    d.recompute = (int)c->recompute;
    d.ck = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    d.need_ln1 = !(c->frozen & GPT2RT_GROUP_ATTENTION);  /* ln_1 out: input of c_attn's dW */
    d.need_mlp_in = !(c->frozen & GPT2RT_GROUP_MLP);     /* ln_2 out, GELU out: c_fc's, c_proj's dW */
    int keep = c->recompute == GPT2RT_RECOMPUTE_NONE, full = c->recompute == GPT2RT_RECOMPUTE_FULL;
    d.keep_ln1 = full || (keep && d.need_ln1);
    d.keep_mlp_in = full || (keep && d.need_mlp_in);
    /* SELECTIVE recomputes into its own buffer; outputs merely not kept (frozen
       weights) pass through dbig in the forward, which is free until the backward */
    d.rc = c->recompute == GPT2RT_RECOMPUTE_SELECTIVE && (d.need_ln1 || d.need_mlp_in);
    d.align = d.cuda ? 256 : 64;
    d.KB = c->kv_batch; d.KS = c->kv_batch ? c->kv_len : 0;
    d.hc = c->classifier_chunk && c->classifier_chunk < d.BT ? c->classifier_chunk : d.BT;
    d.infer = c->inference;
    d.w16 = c->inference && c->inference_weights == GPT2RT_PRECISION_BF16;
    if (d.w16) d.wb = 2; /* activations stay fp32 (ab = 4); owned = 0, so no master copy */
    if (d.infer) { /* nothing trains: no parameter owns a gradient; the forward keeps its outputs in the
                      block it writes (no scratch for outputs not kept) */
        d.frozen = GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM |
                   GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP | GPT2RT_GROUP_HEAD;
        d.keep_ln1 = d.keep_mlp_in = 1;
        d.rc = 0;
    }
    return d;
}

static void gpt2rt__layout(const gpt2rt__dims *d, const gpt2rt__span *s, uint64_t bytes[GPT2RT_MEM_COUNT],
                           gpt2rt_ctx *ctx);

/* The planner's layer split works in checkpoint segments (checkpoint_every layers
   under FULL recompute, else 1): a stage [a, b) in segments is layers [a ck, min(b ck, L)).
   Its cost is what gpt2rt_plan reports for it: the device's planned total. */
typedef struct gpt2rt__split {
    const gpt2rt__dims *d;
    int64_t n, S, ck, L, m; /* m: activation sets a CUDA stage holds (grad_accum, 3.3) */
} gpt2rt__split;

static uint64_t gpt2rt__split_cost(const gpt2rt__split *p, int64_t s, int64_t a, int64_t b) {
    gpt2rt__span sp;
    uint64_t bytes[GPT2RT_MEM_COUNT], t = 0;
    sp.l0 = a * p->ck; sp.l1 = b * p->ck < p->L ? b * p->ck : p->L;
    sp.first = s == 0; sp.last = s == p->n - 1;
    gpt2rt__layout(p->d, &sp, bytes, NULL); /* an explicit span: no way back into the planner */
    bytes[GPT2RT_MEM_ACTIVATIONS] *= (uint64_t)p->m;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) t += bytes[i];
    return t;
}

/* Stage s starting at segment a: the last end in (a, hi] within cap M (a when none).
   A stage's cost grows with its length, so a bisection finds it. */
static int64_t gpt2rt__split_reach(const gpt2rt__split *p, int64_t s, int64_t a, int64_t hi, uint64_t M) {
    int64_t lo = a; /* lo fits (or is a), hi + 1 does not */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (gpt2rt__split_cost(p, s, a, mid) <= M) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Stage s ending at segment b: the first start in [lo, b) within cap M (b when none). */
static int64_t gpt2rt__split_back(const gpt2rt__split *p, int64_t s, int64_t b, int64_t lo, uint64_t M) {
    int64_t hi = b;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (gpt2rt__split_cost(p, s, mid, b) <= M) hi = mid; else lo = mid + 1;
    }
    return hi;
}

/* Can n non-empty stages, each within M, cover the segments? Greedy: each stage as long
   as M allows, leaving a segment for each later stage (optimal as costs grow with length). */
static int gpt2rt__split_fits(const gpt2rt__split *p, uint64_t M) {
    int64_t a = 0;
    for (int64_t s = 0; s < p->n - 1; s++) {
        int64_t b = gpt2rt__split_reach(p, s, a, p->S - (p->n - 1 - s), M);
        if (b == a) return 0;
        a = b;
    }
    return gpt2rt__split_cost(p, p->n - 1, a, p->S) <= M;
}

/* Layer split: the first layers of the stages, b[0] = 0 .. b[n_devices] = n_layer, as the
   config gives them or, all 0 there, the planner's: the split of the checkpoint segments
   whose largest per-device planned total is least (so each stage starts at a checkpoint).
   M*, that least largest total, by bisection on the cap with the greedy above; then each
   boundary as near the even split (earlier stages taking the remainder) as M* allows:
   stage s-1 within M* bounds it above, the rest fitting in M* (a greedy from the end)
   below. The even split comes back whenever it is as good. O(n log S) layouts a probe, no
   state kept: the same config always gives the same split. */
static void gpt2rt__stage_bounds(const gpt2rt_config *c, int64_t b[GPT2RT_MAX_DEVICES + 1]) {
    int64_t n = c->n_devices, L = c->n_layer;
    b[0] = 0; b[n] = L;
    if (c->stage_first_layer[1]) {
        for (int64_t s = 1; s < n; s++) b[s] = c->stage_first_layer[s];
        return;
    }
    gpt2rt__dims d = gpt2rt__dims_of(c);
    gpt2rt__split p;
    p.d = &d; p.n = n; p.L = L;
    p.m = d.cuda ? c->grad_accum : 1; /* CPU stages share the host: the spans' own layouts weigh them */
    p.ck = c->recompute == GPT2RT_RECOMPUTE_FULL ? c->checkpoint_every : 1;
    p.S = (L + p.ck - 1) / p.ck;
    int64_t e[GPT2RT_MAX_DEVICES + 1], q = p.S / n, r = p.S % n, lo_b[GPT2RT_MAX_DEVICES + 1];
    for (int64_t s = 0; s <= n; s++) e[s] = s * q + (s < r ? s : r);
    if (n < 2 || p.S < n) { /* nothing to choose (the config check refuses too few segments) */
        for (int64_t s = 1; s < n; s++) b[s] = e[s] * p.ck < L ? e[s] * p.ck : L;
        return;
    }
    /* M* in (lo, hi]: the even split fits hi; the first and last stages hold a segment at least */
    uint64_t hi = 0, lo = gpt2rt__split_cost(&p, 0, 0, 1), last = gpt2rt__split_cost(&p, n - 1, p.S - 1, p.S);
    lo = (lo > last ? lo : last) - 1;
    for (int64_t s = 0; s < n; s++) {
        uint64_t t = gpt2rt__split_cost(&p, s, e[s], e[s + 1]);
        if (t > hi) hi = t;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (gpt2rt__split_fits(&p, mid)) hi = mid; else lo = mid;
    }
    lo_b[n] = p.S; /* lo_b[s]: the earliest start from which stages s..n-1 fit in hi */
    for (int64_t s = n - 1; s >= 1; s--) lo_b[s] = gpt2rt__split_back(&p, s, lo_b[s + 1], s, hi);
    int64_t prev = 0;
    for (int64_t s = 1; s < n; s++) {
        int64_t lower = lo_b[s] > prev + 1 ? lo_b[s] : prev + 1;
        int64_t upper = gpt2rt__split_reach(&p, s - 1, prev, p.S - (n - s), hi);
        int64_t x = e[s] < lower ? lower : e[s] > upper ? upper : e[s];
        b[s] = x * p.ck < L ? x * p.ck : L;
        prev = x;
    }
}

/* the span of every device (one split computed for all); parallel != LAYER_SPLIT: the whole model */
static void gpt2rt__spans_of(const gpt2rt_config *c, gpt2rt__span sp[GPT2RT_MAX_DEVICES]) {
    int64_t b[GPT2RT_MAX_DEVICES + 1];
    int split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    if (split) gpt2rt__stage_bounds(c, b);
    for (int dev = 0; dev < GPT2RT_MAX_DEVICES; dev++) {
        sp[dev].l0 = 0; sp[dev].l1 = c->n_layer; sp[dev].first = sp[dev].last = 1;
        if (split && dev < c->n_devices) {
            sp[dev].l0 = b[dev];
            sp[dev].l1 = b[dev + 1];
            sp[dev].first = dev == 0;
            sp[dev].last = dev == c->n_devices - 1;
        }
    }
}

static gpt2rt__span gpt2rt__span_of(const gpt2rt_config *c, int dev) {
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    return sp[dev];
}

/* ==== 3. Layout and plan ==== */

/* ==== 3.1 Parameter table ==== */

/* The parameter table. Columns: Hugging Face name, internal shape (out, in), whether
   the file transposes it (Conv1D), weight decay, group, initialisation. */
static const gpt2rt__param_row gpt2rt__model_rows[GPT2RT__N_MODEL] = {
    /* name                      rows            cols           transpose decay group                     init */
    {"transformer.wte.weight",  GPT2RT__DIM_VP, GPT2RT__DIM_C, 0, 1, GPT2RT_GROUP_TOKEN_EMBED, GPT2RT__INIT_NORMAL},
    {"transformer.wpe.weight",  GPT2RT__DIM_P,  GPT2RT__DIM_C, 0, 1, GPT2RT_GROUP_POS_EMBED,   GPT2RT__INIT_NORMAL},
    {"transformer.ln_f.weight", GPT2RT__DIM_C,  GPT2RT__DIM_1, 0, 0, GPT2RT_GROUP_LAYERNORM,   GPT2RT__INIT_ONES},
    {"transformer.ln_f.bias",   GPT2RT__DIM_C,  GPT2RT__DIM_1, 0, 0, GPT2RT_GROUP_LAYERNORM,   GPT2RT__INIT_ZEROS},
};
static const gpt2rt__param_row gpt2rt__layer_rows[GPT2RT__PER_LAYER] = {
    /* name                rows            cols            transpose decay group                  init */
    {"ln_1.weight",        GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ONES},
    {"ln_1.bias",          GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ZEROS},
    {"attn.c_attn.weight", GPT2RT__DIM_3C, GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_NORMAL},
    {"attn.c_attn.bias",   GPT2RT__DIM_3C, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_ZEROS},
    {"attn.c_proj.weight", GPT2RT__DIM_C,  GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_RESID},
    {"attn.c_proj.bias",   GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_ATTENTION, GPT2RT__INIT_ZEROS},
    {"ln_2.weight",        GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ONES},
    {"ln_2.bias",          GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_LAYERNORM, GPT2RT__INIT_ZEROS},
    {"mlp.c_fc.weight",    GPT2RT__DIM_4C, GPT2RT__DIM_C,  1, 1, GPT2RT_GROUP_MLP,       GPT2RT__INIT_NORMAL},
    {"mlp.c_fc.bias",      GPT2RT__DIM_4C, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_MLP,       GPT2RT__INIT_ZEROS},
    {"mlp.c_proj.weight",  GPT2RT__DIM_C,  GPT2RT__DIM_4C, 1, 1, GPT2RT_GROUP_MLP,       GPT2RT__INIT_RESID},
    {"mlp.c_proj.bias",    GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_MLP,       GPT2RT__INIT_ZEROS},
};
/* patch models: GPT4TS's names; in_layer follows wpe, out_layer follows ln_f, then
   (revin_affine only) RevIN's affine under PatchTST's names */
static const gpt2rt__param_row gpt2rt__ts_rows[GPT2RT__N_TS] = {
    /* name                rows            cols            transpose decay group             init */
    {"in_layer.weight",    GPT2RT__DIM_C,  GPT2RT__DIM_PL, 0, 1, GPT2RT_GROUP_HEAD, GPT2RT__INIT_NORMAL},
    {"in_layer.bias",      GPT2RT__DIM_C,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
    {"out_layer.weight",   GPT2RT__DIM_H,  GPT2RT__DIM_TC, 0, 1, GPT2RT_GROUP_HEAD, GPT2RT__INIT_NORMAL},
    {"out_layer.bias",     GPT2RT__DIM_H,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
    {"revin.affine_weight", GPT2RT__DIM_M, GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ONES},
    {"revin.affine_bias",  GPT2RT__DIM_M,  GPT2RT__DIM_1,  0, 0, GPT2RT_GROUP_HEAD, GPT2RT__INIT_ZEROS},
};

static int64_t gpt2rt__dim_size(const gpt2rt__dims *d, gpt2rt__dim k) {
    switch (k) {
    case GPT2RT__DIM_1: return 1;
    case GPT2RT__DIM_C: return d->C;
    case GPT2RT__DIM_3C: return 3 * d->C;
    case GPT2RT__DIM_4C: return 4 * d->C;
    case GPT2RT__DIM_VP: return d->Vp;
    case GPT2RT__DIM_P: return d->P;
    case GPT2RT__DIM_PL: return d->PL;
    /* out_layer: the flatten head (H, T*C); aLLM4TS's sequence head (PL, C), one patch a position */
    case GPT2RT__DIM_H: return d->seqhead ? d->PL : d->H;
    case GPT2RT__DIM_TC: return d->seqhead ? d->C : d->T * d->C;
    case GPT2RT__DIM_M: return d->M;
    }
    return 0;
}

/* append row's tensor (of layer l, or -1) at *n, *off floats into the weights and *goff
   into the grads (frozen groups get no gradient, no moments); tab may be NULL */
static void gpt2rt__param_add(const gpt2rt__dims *d, const gpt2rt__param_row *row, int64_t l, gpt2rt__tensor *tab,
                              int *n, int64_t *off, int64_t *goff) {
    int64_t rows = gpt2rt__dim_size(d, row->rows), cols = gpt2rt__dim_size(d, row->cols);
    int frozen = (d->frozen & row->group) != 0;
    if (tab) {
        gpt2rt__tensor *t = &tab[*n];
        if (l < 0) snprintf(t->name, sizeof t->name, "%s", row->name);
        else snprintf(t->name, sizeof t->name, "transformer.h.%lld.%s", (long long)l, row->name);
        t->row = row;
        t->layer = l;
        t->off = *off;
        t->goff = frozen ? -1 : *goff;
        t->rows = rows;
        t->cols = cols;
        t->hf_rows = row->rows == GPT2RT__DIM_VP ? d->V : rows; /* the file has no padded rows */
        t->ndim = row->cols == GPT2RT__DIM_1 ? 1 : 2;
        t->transpose = row->transpose;
        t->group = row->group;
        t->decay = row->decay;
    }
    (*n)++;
    *off += rows * cols;
    if (!frozen) *goff += rows * cols;
}

/* The table in arena order: wte, wpe, the layers' rows layer by layer, ln_f; patch
   models: wpe, in_layer, the layers, ln_f, out_layer. Returns the number of tensors;
   fills tab when non-NULL; *n_floats gets the total, *n_train the trainable part. */
static int gpt2rt__param_table(const gpt2rt__dims *d, gpt2rt__tensor *tab, int64_t *n_floats, int64_t *n_train) {
    int n = 0;
    int64_t off = 0, goff = 0;
    for (int k = d->patches ? GPT2RT__WPE : 0; k < GPT2RT__LNFW; k++)
        gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    for (int k = 0; d->patches && k < GPT2RT__OUTW; k++) gpt2rt__param_add(d, &gpt2rt__ts_rows[k], -1, tab, &n, &off, &goff);
    for (int64_t l = 0; l < d->L; l++)
        for (int k = 0; k < GPT2RT__PER_LAYER; k++)
            gpt2rt__param_add(d, &gpt2rt__layer_rows[k], l, tab, &n, &off, &goff);
    for (int k = GPT2RT__LNFW; k < GPT2RT__N_MODEL; k++)
        gpt2rt__param_add(d, &gpt2rt__model_rows[k], -1, tab, &n, &off, &goff);
    for (int k = GPT2RT__OUTW; d->patches && k < (d->affine ? GPT2RT__N_TS : GPT2RT__REVW); k++)
        gpt2rt__param_add(d, &gpt2rt__ts_rows[k], -1, tab, &n, &off, &goff);
    if (n_floats) *n_floats = off;
    if (n_train) *n_train = goff;
    return n;
}

/* the tensors before the first layer's: wte, wpe; patches: wpe, in_layer (2) */
static int64_t gpt2rt__layer0(const gpt2rt__dims *d) { return d->patches ? 1 + GPT2RT__OUTW : GPT2RT__LNFW; }

/* row i of the table (gpt2rt__param_table's order); *layer: its layer, -1 for a whole-model row */
static const gpt2rt__param_row *gpt2rt__param_row_of(const gpt2rt__dims *d, int64_t i, int64_t *layer) {
    int64_t head = gpt2rt__layer0(d), nl = d->L * GPT2RT__PER_LAYER;
    *layer = -1;
    if (i < head) return d->patches ? (i ? &gpt2rt__ts_rows[i - 1] : &gpt2rt__model_rows[GPT2RT__WPE]) : &gpt2rt__model_rows[i];
    if (i < head + nl) { *layer = (i - head) / GPT2RT__PER_LAYER; return &gpt2rt__layer_rows[(i - head) % GPT2RT__PER_LAYER]; }
    i -= head + nl;
    return i < 2 ? &gpt2rt__model_rows[GPT2RT__LNFW + i] : &gpt2rt__ts_rows[GPT2RT__OUTW + i - 2];
}

/* the walk of gpt2rt__span_params: one device's offsets (off, goff) and this device's */
typedef struct gpt2rt__span_walk { int64_t off, goff, loff, lgoff, aw, ag; } gpt2rt__span_walk;

/* row (of layer l, -1: whole-model) at index i: held and owned or not; tab: its entry */
static void gpt2rt__span_row(const gpt2rt__dims *d, const gpt2rt__span *s, gpt2rt__span_walk *w,
                             const gpt2rt__param_row *row, int64_t l, gpt2rt__tensor *tab) {
    int64_t size = gpt2rt__dim_size(d, row->rows) * gpt2rt__dim_size(d, row->cols), o0 = w->off, g0 = w->goff;
    int trained = !(d->frozen & row->group), held;
    w->off += size;
    w->goff += trained ? size : 0;
    if (l >= 0) held = l >= s->l0 && l < s->l1;
    else if (row == &gpt2rt__model_rows[GPT2RT__WTE]) held = s->first || s->last;
    else if (row == &gpt2rt__model_rows[GPT2RT__WPE] || row == &gpt2rt__ts_rows[GPT2RT__INW] ||
             row == &gpt2rt__ts_rows[GPT2RT__INB] || row == &gpt2rt__ts_rows[GPT2RT__REVW] ||
             row == &gpt2rt__ts_rows[GPT2RT__REVB]) held = s->first;
    else held = s->last; /* ln_f, out_layer */
    int owned = held && trained && (row != &gpt2rt__model_rows[GPT2RT__WTE] || s->last);
    int64_t lo = 0, lg = -1;
    if (held) {
        w->loff += ((o0 - w->loff) % w->aw + w->aw) % w->aw; /* the next offset congruent to one device's */
        lo = w->loff;
        w->loff += size;
    }
    if (owned) {
        w->lgoff += ((g0 - w->lgoff) % w->ag + w->ag) % w->ag;
        lg = w->lgoff;
        w->lgoff += size;
    }
    if (tab) { /* the row's entry (name, shape), then this device's offsets */
        int k = 0;
        int64_t o = 0, g = 0;
        gpt2rt__param_add(d, row, l, tab, &k, &o, &g);
        tab->off = lo;
        tab->goff = lg;
        if (!held) tab->rows = tab->cols = 0;
    }
}

/* The parameters of the device holding span s (layer split): its layers' tensors; wte
   on the first (weights only, for the embedding) and on the last (for the tied head,
   trained there: its gradient, moments and master live on the last); wpe, in_layer and
   RevIN's affine on the first; ln_f and out_layer on the last. tab (may be NULL) gets
   the whole table with this device's offsets: a tensor it does not hold has no rows
   (rows = cols = 0, off 0, goff -1), one it holds but does not train goff -1. Offsets
   follow the table's order, each congruent to the one-device offset modulo d->align
   bytes (a gap of less than that where the held tensors are not contiguous), so every
   tensor has the alignment it has on one device: the kernels and cuBLASLt take the same
   paths, and a stage computes bitwise what one device does. The whole span gives the
   one-device table itself. *n_floats, *n_train: the weights' and the gradients' floats.
   Without tab the span's layers go as one block (they are contiguous in both offsets),
   so the plan of a deep model costs no walk over every tensor. */
static void gpt2rt__span_params(const gpt2rt__dims *d, const gpt2rt__span *s, gpt2rt__tensor *tab, int64_t *n_floats,
                                int64_t *n_train) {
    int64_t head = gpt2rt__layer0(d), nl = d->L * GPT2RT__PER_LAYER, l;
    int64_t n = head + nl + 2 + (d->patches ? (d->affine ? 4 : 2) : 0);
    gpt2rt__span_walk w = {0, 0, 0, 0, d->align / d->wb, d->align / 4};
    for (int64_t i = 0; i < head; i++) {
        const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
        gpt2rt__span_row(d, s, &w, row, l, tab ? tab + i : NULL);
    }
    if (tab) {
        for (int64_t i = head; i < head + nl; i++) {
            const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
            gpt2rt__span_row(d, s, &w, row, l, tab + i);
        }
    } else { /* the layers [l0, l1) as one block */
        int64_t lsz = 0, lgsz = 0;
        for (int k = 0; k < GPT2RT__PER_LAYER; k++) {
            const gpt2rt__param_row *row = &gpt2rt__layer_rows[k];
            int64_t size = gpt2rt__dim_size(d, row->rows) * gpt2rt__dim_size(d, row->cols);
            lsz += size;
            lgsz += d->frozen & row->group ? 0 : size;
        }
        int64_t h = s->l1 - s->l0;
        w.off += s->l0 * lsz;
        w.goff += s->l0 * lgsz;
        if (h > 0) {
            w.loff += ((w.off - w.loff) % w.aw + w.aw) % w.aw;
            w.loff += h * lsz;
            if (lgsz) {
                w.lgoff += ((w.goff - w.lgoff) % w.ag + w.ag) % w.ag;
                w.lgoff += h * lgsz;
            }
        }
        w.off += (d->L - s->l0) * lsz;
        w.goff += (d->L - s->l0) * lgsz;
    }
    for (int64_t i = head + nl; i < n; i++) {
        const gpt2rt__param_row *row = gpt2rt__param_row_of(d, i, &l);
        gpt2rt__span_row(d, s, &w, row, l, tab ? tab + i : NULL);
    }
    if (n_floats) *n_floats = w.loff;
    if (n_train) *n_train = w.lgoff;
}

/* the table's tensors by name: a whole-model one (GPT2RT__WTE...; NULL: this model has
   none), a patch model's (GPT2RT__INW...), layer l's 12 */
static const gpt2rt__tensor *gpt2rt__model_tensor(const gpt2rt_ctx *ctx, int which) {
    int64_t after = gpt2rt__layer0(&ctx->d) + ctx->d.L * GPT2RT__PER_LAYER; /* ln_f */
    if (which >= GPT2RT__LNFW) return ctx->tensors + after + (which - GPT2RT__LNFW);
    if (!ctx->d.patches) return ctx->tensors + which;
    return which == GPT2RT__WPE ? ctx->tensors : NULL;
}

static const gpt2rt__tensor *gpt2rt__ts_tensor(const gpt2rt_ctx *ctx, int which) {
    int64_t after = gpt2rt__layer0(&ctx->d) + ctx->d.L * GPT2RT__PER_LAYER + 2; /* past ln_f */
    if (which >= GPT2RT__REVW && !ctx->d.affine) return NULL;
    return which < GPT2RT__OUTW ? ctx->tensors + 1 + which : ctx->tensors + after + (which - GPT2RT__OUTW);
}

static const gpt2rt__tensor *gpt2rt__layer_tensors(const gpt2rt_ctx *ctx, int64_t l) {
    return ctx->tensors + gpt2rt__layer0(&ctx->d) + l * GPT2RT__PER_LAYER;
}

static float *gpt2rt__tensor_at(const gpt2rt__tensor *t, float *base, int grads) {
    return !t ? NULL : !grads ? base + t->off : t->goff >= 0 ? base + t->goff : NULL;
}

/* the whole-model tensors; base: params (by off) or grads (by goff; NULL when frozen) */
static gpt2rt__model_params gpt2rt__mparams(const gpt2rt_ctx *ctx, float *base, int grads) {
    float *q[GPT2RT__N_MODEL], *ts[GPT2RT__N_TS] = {NULL, NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < GPT2RT__N_MODEL; i++) q[i] = gpt2rt__tensor_at(gpt2rt__model_tensor(ctx, i), base, grads);
    for (int i = 0; ctx->d.patches && i < GPT2RT__N_TS; i++) ts[i] = gpt2rt__tensor_at(gpt2rt__ts_tensor(ctx, i), base, grads);
    gpt2rt__model_params p;
    p.wte = q[GPT2RT__WTE]; p.wpe = q[GPT2RT__WPE];
    p.lnfw = q[GPT2RT__LNFW]; p.lnfb = q[GPT2RT__LNFB];
    p.inw = ts[GPT2RT__INW]; p.inb = ts[GPT2RT__INB];
    p.outw = ts[GPT2RT__OUTW]; p.outb = ts[GPT2RT__OUTB];
    p.revw = ts[GPT2RT__REVW]; p.revb = ts[GPT2RT__REVB];
    return p;
}

/* per-layer tensors of layer l; base: params (by off) or grads (by goff; NULL when frozen) */
static gpt2rt__layer_params gpt2rt__lparams(const gpt2rt_ctx *ctx, float *base, int grads, int64_t l) {
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    float *q[GPT2RT__PER_LAYER];
    for (int i = 0; i < GPT2RT__PER_LAYER; i++)
        q[i] = !grads ? base + t[i].off : t[i].goff >= 0 ? base + t[i].goff : NULL;
    gpt2rt__layer_params p;
    p.ln1w = q[GPT2RT__LN1W]; p.ln1b = q[GPT2RT__LN1B];
    p.qkvw = q[GPT2RT__QKVW]; p.qkvb = q[GPT2RT__QKVB];
    p.projw = q[GPT2RT__PROJW]; p.projb = q[GPT2RT__PROJB];
    p.ln2w = q[GPT2RT__LN2W]; p.ln2b = q[GPT2RT__LN2B];
    p.fcw = q[GPT2RT__FCW]; p.fcb = q[GPT2RT__FCB];
    p.fcprojw = q[GPT2RT__FCPROJW]; p.fcprojb = q[GPT2RT__FCPROJB];
    return p;
}

/* ==== 3.2 Activations and arenas ==== */
/* the memory documentation: what every byte of the plan is for */

/* One layer's saved activations, in order, in bytes (activations of d->ab bytes,
   statistics fp32). full: every field (the FULL recompute slots); else the ones
   d->keep_* asks for, the others NULL. Fills a (pointers from base) when non-NULL. */
static int64_t gpt2rt__ald(const gpt2rt__dims *d, int64_t bytes) { return (bytes + d->align - 1) / d->align * d->align; }

/* bytes into the logits arena where the normalised predictions (B*M,H) start: after a
   sequence head's (BT,PL) outputs, 0 for the flatten head (they are its output) */
static int64_t gpt2rt__ts_yn_off(const gpt2rt__dims *d) { return d->seqhead ? gpt2rt__ald(d, d->BT * d->PL * d->ab) : 0; }

static int64_t gpt2rt__layer_acts_carve(const gpt2rt__dims *d, unsigned char *base, gpt2rt__layer_acts *a, int full) {
    int64_t o = 0, BT = d->BT, C = d->C, ab = d->ab;
#define GPT2RT__CARVE(field, n, eb, keep) do { int k_ = full || (keep); \
        if (a) { a->field = k_ ? (float *)(void *)(base + o) : NULL; } \
        if (k_) { o += gpt2rt__ald(d, (n) * (eb)); } } while (0)
    GPT2RT__CARVE(ln1, BT * C, ab, d->keep_ln1);
    GPT2RT__CARVE(ln1_mean, BT, 4, 1);
    GPT2RT__CARVE(ln1_rstd, BT, 4, 1);
    GPT2RT__CARVE(qkv, BT * 3 * C, ab, 1);
    GPT2RT__CARVE(lse, d->B * d->NH * d->T, 4, 1);
    GPT2RT__CARVE(atty, BT * C, ab, 1);
    GPT2RT__CARVE(res2, BT * C, ab, 1);
    GPT2RT__CARVE(ln2, BT * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(ln2_mean, BT, 4, 1);
    GPT2RT__CARVE(ln2_rstd, BT, 4, 1);
    GPT2RT__CARVE(fch, BT * 4 * C, ab, 1);
    GPT2RT__CARVE(fch_gelu, BT * 4 * C, ab, d->keep_mlp_in);
    GPT2RT__CARVE(res3, BT * C, ab, 1);
#undef GPT2RT__CARVE
    return o;
}

/* the saved activations of layer l (NONE, SELECTIVE), or of its FULL recompute slot */
static gpt2rt__layer_acts gpt2rt__lacts(const gpt2rt_ctx *ctx, int64_t l) {
    gpt2rt__layer_acts a;
    int full = ctx->d.recompute == GPT2RT_RECOMPUTE_FULL;
    /* a layer-split stage's blocks start at its first layer; inference: two blocks in turn, so
       layer l reads layer l-1's output from the other */
    int64_t slot = full ? l % ctx->d.ck : ctx->d.infer ? (l - ctx->l0) % 2 : l - ctx->l0;
    gpt2rt__layer_acts_carve(&ctx->d, ctx->layer_acts + slot * ctx->layer_stride, &a, full);
    return a;
}

static size_t gpt2rt__sgemm_workspace_bytes(int n_threads);
static int64_t gpt2rt__opt_norm_chunks(int64_t n_params);
#define GPT2RT__CU_BLAS_WORKSPACE ((int64_t)32 << 20) /* cuBLASLt workspace on Hopper */

/* the CUDA workspace's input slot: tokens, the wte gradient's buckets ((3BT+1) int32);
   patches, the windows x (Bw,L,M) fp32 that RevIN reads on the device */
static int64_t gpt2rt__cu_inputs_bytes(const gpt2rt__dims *d) {
    return gpt2rt__ald(d, d->patches ? d->B * d->Lb * 4 : (3 * d->BT + 1) * 4);
}

/* prompt positions one row feeds the model in one generation pass: bounds the
   pass's scratch; a longer prompt takes several passes */
#define GPT2RT__KV_CHUNK 128
/* bf16 weights: a layer's LayerNorm weights and biases in fp32 for the ops that read
   them (ln_1 2C, c_attn bias 3C, c_proj bias C, ln_2 2C, c_fc bias 4C, mlp c_proj bias C) */
#define GPT2RT__KV_WVEC 13

/* bf16 (the high half of an fp32) from f, rounded to nearest even; a NaN stays a
   (quiet) NaN rather than rounding into an infinity */
static uint16_t gpt2rt__bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float gpt2rt__bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* weight i of the arena (the tensor table's offsets count elements in either kind) */
static void gpt2rt__w_set(gpt2rt_ctx *ctx, int64_t i, float v) {
    if (ctx->params16) ctx->params16[i] = gpt2rt__bf16_round(v);
    else ctx->params[i] = v;
}
static float gpt2rt__w_get(const gpt2rt_ctx *ctx, int64_t i) {
    return ctx->params16 ? gpt2rt__bf16_widen(ctx->params16[i]) : ctx->params[i];
}

/* what gpt2rt__kv_layout lays out: ALL, the CPU's one arena; DEVICE, a CUDA device's arena
   (the cache and a pass's activations in the storage type d->ab, the pass's ids, the
   sampled rows' logits); HOST, the CUDA context's host side of it (the ids staged, the
   logits in fp32, the sampling scratch: pinned bookkeeping, no device bytes) */
enum { GPT2RT__KV_ALL, GPT2RT__KV_DEVICE, GPT2RT__KV_HOST };

/* Generation's arena (GPT2RT_MEM_KVCACHE) in bytes for nl layers (last: the device
   with the head samples, so it holds the logits and the sampling scratch); binds
   *kv's pointers into base when both are non-NULL. 0 without a cache. */
static int64_t gpt2rt__kv_layout(const gpt2rt__dims *d, int64_t nl, int last, unsigned char *base, gpt2rt__kv *kv,
                                 int part) {
    if (kv) memset(kv, 0, sizeof *kv);
    if (!d->KB) return 0;
    int64_t C = d->C, KB = d->KB, N = KB * (d->KS < GPT2RT__KV_CHUNK ? d->KS : GPT2RT__KV_CHUNK), o = 0;
    int bind = base && kv, dev = part != GPT2RT__KV_HOST, cpu = part == GPT2RT__KV_ALL, host = part != GPT2RT__KV_DEVICE;
    int64_t eb = part == GPT2RT__KV_DEVICE ? d->ab : 4; /* cache and activations: the storage type on a device */
#define GPT2RT__KV(field, type, n, on) do { if (on) { if (bind) kv->field = (type *)(void *)(base + o); \
        o += gpt2rt__ald(d, (int64_t)(n) * (int64_t)sizeof(type)); } } while (0)
#define GPT2RT__KVX(field, n, on) do { if (on) { if (bind) kv->field = (float *)(void *)(base + o); \
        o += gpt2rt__ald(d, (int64_t)(n) * eb); } } while (0)
    GPT2RT__KVX(k, nl * KB * d->KS * C, dev);
    GPT2RT__KVX(v, nl * KB * d->KS * C, dev);
    GPT2RT__KV(tok, int32_t, N, 1);
    GPT2RT__KV(row, int32_t, N, 1);
    GPT2RT__KV(pos, int32_t, N, 1);
    GPT2RT__KVX(x, N * C, dev);
    GPT2RT__KVX(ln, N * C, dev);
    GPT2RT__KV(ln_mean, float, N, dev);
    GPT2RT__KV(ln_rstd, float, N, dev);
    GPT2RT__KVX(qkv, N * 3 * C, dev);
    GPT2RT__KVX(atty, N * C, dev);
    GPT2RT__KVX(proj, N * C, dev);
    GPT2RT__KVX(fch, N * 4 * C, dev);
    GPT2RT__KV(att, float, d->nt * gpt2rt__pad16(d->KS), cpu);
    if (d->w16) GPT2RT__KV(wvec, float, GPT2RT__KV_WVEC * C, cpu); /* a layer's vectors (or ln_f's), widened */
    if (last) {
        GPT2RT__KVX(logits, KB * d->Vp, 1);
        GPT2RT__KV(sel, int32_t, KB, host);
        GPT2RT__KV(done, int64_t, KB, host);
        GPT2RT__KV(cached, int64_t, KB, host);
        GPT2RT__KV(limit, int64_t, KB, host);
        GPT2RT__KV(rng, uint64_t, KB, host);
        GPT2RT__KV(prob, double, d->Vp, host);
        GPT2RT__KV(cand, gpt2rt__kv_cand, d->Vp, host);
    }
#undef GPT2RT__KV
#undef GPT2RT__KVX
    if (bind) kv->N = N;
    return o;
}

/* The arenas of every category, in bytes, for the device holding span s, and (when
   ctx is non-NULL and its arenas are allocated: the CPU backend, one device) the
   pointers into them. The single source of truth for the plan and for creation:
   planned == allocated by construction.
   Layer split: the parameters of gpt2rt__span_params (wte on the first device a
   weights-only copy unless it is also the last; its gradient, moments and master on
   the last, which also runs the embedding's part of the wte gradient on the first's
   d(x0), 10.2), the activations of the span's layers (x0 is the span's input), ln_f
   and the logits on the last. Data parallel: every device holds it all. */
static void gpt2rt__layout(const gpt2rt__dims *d, const gpt2rt__span *s, uint64_t bytes[GPT2RT_MEM_COUNT],
                           gpt2rt_ctx *ctx) {
    int64_t BT = d->BT, C = d->C, ab = d->ab, nl = s->l1 - s->l0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) bytes[i] = 0;

    /* parameters: held (weights) and owned (master, grads, moments) */
    int64_t held, owned;
    gpt2rt__span_params(d, s, NULL, &held, &owned);
    bytes[GPT2RT_MEM_WEIGHTS] = (uint64_t)(held * d->wb);
    /* ZeRO-1: the optimizer state of rank r's shard of the trained floats only (shard 0
       is the largest); the gradients stay whole: the backward writes all of them, padded
       to d->shards equal shards for the reduce-scatter (1.4) */
    int64_t opt_owned = gpt2rt__shard_lo(owned, d->shards, 1);
    /* low precision: an fp32 master of what this device trains */
    bytes[GPT2RT_MEM_MASTER] = d->wb == 4 ? 0 : (uint64_t)(opt_owned * 4);
    bytes[GPT2RT_MEM_GRADS] = (uint64_t)(gpt2rt__shard_padded(owned, d->shards) * 4);
    bytes[GPT2RT_MEM_MOMENTS] = (uint64_t)(opt_owned * 8);

    /* activations: tokens, layer input, the layers (or FULL's checkpoints and slots), ln_f, losses */
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    int64_t stride = gpt2rt__layer_acts_carve(d, NULL, NULL, full);
    int64_t n_blocks = full ? (d->ck < nl ? d->ck : nl) : d->infer ? (nl < 2 ? nl : 2) : nl;
    int64_t n_ckpt = full ? (nl + d->ck - 1) / d->ck - 1 : 0; /* the layer input is checkpoint 0 */
    int64_t o = 0, act = gpt2rt__ald(d, BT * C * ab);
    /* tokens: the ids; patches: the normalised patches and their series' statistics,
       the targets and the de-normalised predictions */
    int64_t o_inputs = o, o_targets = o, o_patch = o, o_mean = o, o_std = o, o_y = o, o_pred = o, o_z = o;
    if (!d->patches) {
        o_inputs = o; if (s->first) o += gpt2rt__ald(d, BT * 4);
        o_targets = o; if (s->last) o += gpt2rt__ald(d, BT * 4);
    } else {
        if (s->first) {
            o_patch = o; o += gpt2rt__ald(d, BT * d->PL * 4);
            o_mean = o; o += gpt2rt__ald(d, d->B * 4);
            o_std = o; o += gpt2rt__ald(d, d->B * 4);
            o_z = o; if (d->affine) o += gpt2rt__ald(d, BT * d->PL * 4); /* the patches before the affine */
        }
        if (s->last && d->seqhead != GPT2RT_HEAD_NEXT_PATCH) { /* NEXT_PATCH: the targets are the patches themselves */
            o_y = o; o += gpt2rt__ald(d, d->n_out * 4);
            o_pred = o; o += gpt2rt__ald(d, d->n_out * 4);
        }
    }
    int64_t o_x0 = o; o += act;
    int64_t o_layers = o; o += n_blocks * stride;
    int64_t o_ckpt = o; o += n_ckpt * act;
    int64_t o_xout = o; if (full && s->last) o += act;
    int64_t o_lnf = o, o_lnf_mean = o, o_lnf_rstd = o, o_losses = o, o_lse = o;
    if (s->last) {
        o_lnf = o; o += act;
        o_lnf_mean = o; o += gpt2rt__ald(d, BT * 4);
        o_lnf_rstd = o; o += gpt2rt__ald(d, BT * 4);
        if (!d->patches) { /* the cross-entropy's */
            o_losses = o; o += gpt2rt__ald(d, BT * 4);
            o_lse = o; o += gpt2rt__ald(d, BT * 4);
        }
    }
    bytes[GPT2RT_MEM_ACTIVATIONS] = (uint64_t)o;

    /* transient: gradient of the residual stream, two scratch buffers, and the
       recompute buffer for outputs not kept */
    int64_t big = gpt2rt__ald(d, BT * 4 * C * ab);
    /* patches with RevIN's affine: the gradient of the patches (BT,PL) */
    int64_t dpatch = d->affine && s->first ? gpt2rt__ald(d, BT * d->PL * 4) : 0;
    bytes[GPT2RT_MEM_TRANSIENT] = d->infer ? 0 : (uint64_t)(2 * act + big + (d->rc ? big : 0) + dpatch);
    /* the head's output: logits (hc,Vp) (hc: BT, or the chunked classifier's chunk), or the
       normalised predictions (B*M,H); sequence heads: a patch a position (BT,PL),
       PATCH_DECODE then its placeholders' (B*M,H) */
    bytes[GPT2RT_MEM_LOGITS] = !s->last ? 0 : d->seqhead ? (uint64_t)(gpt2rt__ts_yn_off(d) + d->B * d->H * ab)
                               : d->patches ? (uint64_t)(d->B * d->H * ab) : (uint64_t)(d->hc * d->Vp * ab);

    /* the norm's partial sums cover what this device owns */
    uint64_t ws_gemm, ws_att, ws_norm = (uint64_t)gpt2rt__ald(d, gpt2rt__opt_norm_chunks(owned) * 8);
    if (d->cuda) { /* cuBLASLt workspace; attention's row statistics; the inputs' slot; reductions */
        int64_t n_tensors = GPT2RT__N_MODEL + GPT2RT__PER_LAYER * d->L + (d->patches ? GPT2RT__N_TS : 0);
        int64_t oc = d->H > d->PL ? d->H : d->PL;                     /* out_layer's bias: H, or PL (aLLM4TS) */
        int64_t rows = (BT + 31) / 32, bias = 4 * C > oc ? 4 * C : oc;
        int64_t red = rows * 2 * C * 4 > bias * 4 ? rows * 2 * C * 4 : bias * 4; /* LayerNorm / bias partials */
        if (n_tensors * 32 + 16 > red) red = n_tensors * 32 + 16;                  /* the AdamW tensor table */
        ws_gemm = (uint64_t)GPT2RT__CU_BLAS_WORKSPACE;
        ws_att = (uint64_t)(gpt2rt__ald(d, d->B * d->NH * d->T * 4) + gpt2rt__cu_inputs_bytes(d) +
                            gpt2rt__ald(d, red));
    } else {
        ws_gemm = (uint64_t)gpt2rt__ald(d, (int64_t)gpt2rt__sgemm_workspace_bytes(d->nt));
        ws_att = (uint64_t)d->nt * (uint64_t)gpt2rt__pad16(2 * d->T) * 4;
    }
    bytes[GPT2RT_MEM_WORKSPACE] = ws_gemm + ws_att + ws_norm;
    /* generation: the cache of this device's layers and a pass's scratch */
    int kv_part = d->cuda ? GPT2RT__KV_DEVICE : GPT2RT__KV_ALL; /* CUDA: the device's part; the host's is bookkeeping */
    bytes[GPT2RT_MEM_KVCACHE] = (uint64_t)gpt2rt__kv_layout(d, nl, s->last, NULL, NULL, kv_part);

    if (!ctx) return;
    gpt2rt__kv_layout(d, nl, s->last, (unsigned char *)ctx->arena[GPT2RT_MEM_KVCACHE], &ctx->kv, kv_part);
    ctx->n_params = held;
    ctx->n_train = owned;
    ctx->l0 = s->l0;
    ctx->params = d->w16 ? NULL : (float *)ctx->arena[GPT2RT_MEM_WEIGHTS];
    ctx->params16 = d->w16 ? (uint16_t *)ctx->arena[GPT2RT_MEM_WEIGHTS] : NULL;
    ctx->grads = (float *)ctx->arena[GPT2RT_MEM_GRADS];
    ctx->m = (float *)ctx->arena[GPT2RT_MEM_MOMENTS];
    ctx->n_opt = gpt2rt__shard_lo(ctx->n_train, d->shards, 1);
    ctx->opt_lo = 0; ctx->opt_hi = ctx->n_train; /* a data-parallel rank narrows it to its shard (10.1) */
    ctx->v = ctx->m + ctx->n_opt;
    unsigned char *a = (unsigned char *)ctx->arena[GPT2RT_MEM_ACTIVATIONS];
    ctx->inputs = (int32_t *)(void *)(a + o_inputs);
    ctx->targets = (int32_t *)(void *)(a + o_targets);
    ctx->x0 = (float *)(void *)(a + o_x0);
    ctx->layer_acts = a + o_layers;
    ctx->layer_stride = stride;
    ctx->ckpt = (float *)(void *)(a + o_ckpt);
    ctx->xout = (float *)(void *)(a + o_xout);
    ctx->lnf = (float *)(void *)(a + o_lnf);
    ctx->lnf_mean = (float *)(void *)(a + o_lnf_mean);
    ctx->lnf_rstd = (float *)(void *)(a + o_lnf_rstd);
    ctx->losses = (float *)(void *)(a + o_losses);
    ctx->logit_lse = (float *)(void *)(a + o_lse);
    ctx->ts_patch = d->patches ? (float *)(void *)(a + o_patch) : NULL;
    ctx->ts_mean = d->patches ? (float *)(void *)(a + o_mean) : NULL;
    ctx->ts_std = d->patches ? (float *)(void *)(a + o_std) : NULL;
    ctx->ts_y = d->patches ? (float *)(void *)(a + o_y) : NULL;
    ctx->ts_pred = d->patches ? (float *)(void *)(a + o_pred) : NULL;
    ctx->ts_z = d->affine ? (float *)(void *)(a + o_z) : NULL;
    unsigned char *tr = (unsigned char *)ctx->arena[GPT2RT_MEM_TRANSIENT];
    int has_tr = !d->infer; /* inference: no transient arena, no backward scratch */
    ctx->dres = has_tr ? (float *)(void *)tr : NULL;
    ctx->dbuf = has_tr ? (float *)(void *)(tr + act) : NULL;
    ctx->dbig = has_tr ? (float *)(void *)(tr + 2 * act) : NULL;
    ctx->rcbuf = has_tr && d->rc ? (float *)(void *)(tr + 2 * act + big) : NULL;
    ctx->ts_dpatch = has_tr && dpatch ? (float *)(void *)(tr + 2 * act + big + (d->rc ? big : 0)) : NULL;
    ctx->logits = (float *)ctx->arena[GPT2RT_MEM_LOGITS];
    unsigned char *ws = (unsigned char *)ctx->arena[GPT2RT_MEM_WORKSPACE];
    ctx->gemm_ws = ws;
    ctx->att_scratch = (float *)(void *)(ws + ws_gemm);
    ctx->norm_parts = (double *)(void *)(ws + ws_gemm + ws_att);
}

/* ==== 3.3 Plan ==== */

#define GPT2RT__GIB(x) ((double)(x) / 1073741824.0)
/* a size as "%.2f %s": KiB, MiB or GiB, whichever reads best */
#define GPT2RT__SZ(x) gpt2rt__sz_val((uint64_t)(x)), gpt2rt__sz_unit((uint64_t)(x))
static double gpt2rt__sz_val(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? (double)b / 1073741824.0 : b >= ((uint64_t)1 << 20) ? (double)b / 1048576.0
         : (double)b / 1024.0;
}
static const char *gpt2rt__sz_unit(uint64_t b) {
    return b >= ((uint64_t)1 << 30) ? "GiB" : b >= ((uint64_t)1 << 20) ? "MiB" : "KiB";
}
#define GPT2RT__MIB(x) ((double)(x) / 1048576.0)

/* What one device holds beyond the arenas, as gpt2rt_plan estimates it: the CUDA
   context and cuBLASLt's own state, and NCCL's buffers with two devices. The CUDA
   backend measures it (gpt2rt_plan_allocated); these are its round figures. */
static uint64_t gpt2rt__overhead_estimate(const gpt2rt_config *c) {
    if (c->backend != GPT2RT_BACKEND_CUDA) return 0;
    return ((uint64_t)600 << 20) + (c->n_devices > 1 ? (uint64_t)256 << 20 : 0);
}

/* The advisor's coarse model of one optimizer step in seconds. Matrix products run
   at a peak scaled by an efficiency that grows with the tokens of a micro-batch;
   element-wise recompute and the update move bytes at memory bandwidth; each
   layer's kernels cost a launch latency per micro-batch; two devices exchange
   gradients (data parallel) or activations (layer split) over a link, and layer
   split runs its devices one after the other. Round figures for an H100-class GPU
   and a small multicore CPU: it ranks configurations, it does not promise times.
   *flops gets the FLOPs of the step, recompute included. */
/* One micro-batch's forward and backward on the layers of device dev, in seconds:
   matrix products at peak FLOP/s scaled by the efficiency tok/(tok + half), the
   element-wise traffic of recompute at bw bytes/s, a launch latency per layer.
   *flops: its FLOPs (recompute included); *owned: the parameters it trains. */
static double gpt2rt__predict_micro(const gpt2rt_config *c, const gpt2rt__dims *dp, gpt2rt__span s, double peak, double bw,
                                    double half, double launch, double *flops, double *owned) {
    const gpt2rt__dims d = *dp;
    double C = (double)d.C, T = (double)d.T, tok = (double)d.BT, eff = tok / (tok + half);
    double layer = 72 * C * C + 12 * C * T, layer_fwd = 24 * C * C + 4 * C * T, head = 6 * (double)d.Vp * C;
    if (d.patches) head = 6 * (double)(d.PL + d.H) * C; /* in_layer and out_layer, per patch */
    if (c->frozen & GPT2RT_GROUP_ATTENTION) layer -= 8 * C * C;  /* no weight gradients: 2 FLOPs a weight */
    if (c->frozen & GPT2RT_GROUP_MLP) layer -= 16 * C * C;
    if (c->frozen & GPT2RT_GROUP_TOKEN_EMBED) head -= 2 * (double)d.Vp * C;
    if (d.infer) { layer = layer_fwd; head /= 3; } /* the forward alone */
    double nl = (double)(s.l1 - s.l0), f = tok * (nl * layer + (s.last ? head : 0.0)), bytes = 0.0;
    if (d.recompute == GPT2RT_RECOMPUTE_FULL) f += tok * (nl - (d.ck < nl ? d.ck : nl)) * layer_fwd;
    if (d.recompute == GPT2RT_RECOMPUTE_SELECTIVE) /* read and write LN and GELU outputs again */
        bytes = tok * nl * 2.0 * d.ab * ((d.need_ln1 ? C : 0) + (d.need_mlp_in ? 5 * C : 0));
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__layout(&d, &s, b, NULL);
    *flops = f;
    *owned = (double)b[GPT2RT_MEM_GRADS] / 4;
    return f / (peak * eff) + bytes / bw + nl * launch;
}

static double gpt2rt__predict_seconds(const gpt2rt_config *c, double *flops) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    int cuda = d.cuda, n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    double peak = !cuda ? 1.5e11 : c->precision != GPT2RT_PRECISION_FP32 ? 4.0e14 : c->tf32 ? 2.0e14 : 4.0e13;
    double bw = cuda ? 2.5e12 : 2.0e10, link = cuda ? 1.0e11 : 1.0e10, half = cuda ? 4096.0 : 128.0;
    double launch = cuda ? 25 * 5e-6 : 0.0; /* per layer and micro-batch */
    double C = (double)d.C, tok = (double)d.BT;
    double t_micro = 0.0, f_micro = 0.0, owned_max = 0.0;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    for (int dev = 0; dev < (split ? n : 1); dev++) {
        double f, owned;
        t_micro += gpt2rt__predict_micro(c, &d, sp[dev], peak, bw, half, launch, &f, &owned);
        f_micro += f;
        if (owned > owned_max) owned_max = owned;
    }
    if (split) t_micro += 2.0 * (n - 1) * tok * C * d.ab / link;
    /* AdamW: p, g, m, v in and out, over this rank's shard with ZeRO-1 (whose reduce-scatter
       and all-gather move what the all-reduce below does) */
    double t = c->grad_accum * t_micro + owned_max / d.shards * (32.0 + d.wb) / bw;
    if (c->parallel == GPT2RT_PARALLEL_DATA) t += 2.0 * (n - 1) / n * owned_max * 4.0 / link; /* ring all-reduce */
    if (flops) *flops = f_micro * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? n : 1);
    return t;
}

/* The step-time model of gpt2rt_plan_step_time (its formulas are the manual's).
   Data parallel over N ranks: every rank runs grad_accum micro-batches; a ring
   all-reduce sends 2(N-1)/N of the gradient bytes G per rank, in buckets of 25 MiB
   (PyTorch DDP's default) that start while the backward of the last micro-batch goes
   on, so all of it but the last bucket can hide behind that backward. Sharded
   (ZeRO-1): a reduce-scatter of (N-1)/N G (hidden the same way), the update of 1/N
   of the parameters, then an all-gather of (N-1)/N of the weights W, which nothing
   hides. Layer split over S stages, GPipe with m = grad_accum micro-batches: the
   step is (m + S - 1) stage times, the S - 1 extra being the bubble; each
   micro-batch sends its activations (B,T,C) forward and their gradient back over
   each boundary, not overlapped. */
static void gpt2rt__step_time(const gpt2rt_config *c, const gpt2rt_hardware *hw, int sharded, gpt2rt_step_time *st) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    double peak = c->precision != GPT2RT_PRECISION_FP32 ? hw->flops_16 : c->tf32 ? hw->flops_tf32 : hw->flops_fp32;
    double half = 4096.0, launch = 25 * 5e-6, link = hw->link_bw, bucket = 25.0 * 1048576.0;
    int n = c->n_devices, split = c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    int ranks = c->parallel == GPT2RT_PARALLEL_DATA ? n * c->world_size : 1, m = c->grad_accum;
    double f, owned, t_stage = 0.0, owned_max = 0.0, t_all = 0.0, owned_all = 0.0;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    memset(st, 0, sizeof *st);
    for (int dev = 0; dev < (split ? n : 1); dev++) {
        double t = gpt2rt__predict_micro(c, &d, sp[dev], peak, hw->mem_bw, half, launch, &f, &owned);
        if (t > t_stage) t_stage = t;
        if (owned > owned_max) owned_max = owned;
        t_all += t;
        owned_all += owned;
    }
    double adam = (32.0 + d.wb) / hw->mem_bw; /* s per parameter: p, g, m, v in and out */
    uint64_t b[GPT2RT_MEM_COUNT];
    gpt2rt__span whole = gpt2rt__span_of(c, 0);
    gpt2rt__layout(&d, &whole, b, NULL);
    double G = (double)b[GPT2RT_MEM_GRADS], W = (double)b[GPT2RT_MEM_WEIGHTS];
    st->compute = m * t_stage;
    st->update = owned_max * adam;
    if (c->parallel == GPT2RT_PARALLEL_DATA && ranks > 1) {
        double share = (double)(ranks - 1) / ranks, t_bwd = t_stage * 2.0 / 3.0; /* backward: 2/3 of the FLOPs */
        st->comm_bytes = (sharded ? 1.0 : 2.0) * share * G;
        st->comm = st->comm_bytes / link;
        double last = (G < bucket ? 1.0 : bucket / G) * st->comm; /* the last bucket waits for the backward's end */
        st->hidden = st->comm - last < t_bwd ? st->comm - last : t_bwd;
        if (sharded) {
            st->update /= ranks;
            st->gather = share * W / link;
            st->comm_bytes += share * W;
        }
    } else if (split) {
        double act = (double)d.BT * d.C * d.ab;
        st->comm_bytes = m * 2.0 * act;
        st->comm = st->comm_bytes / link;
        st->bubble = (n - 1) * (t_stage + 2.0 * act / link);
    }
    st->total = st->compute + st->update + st->comm - st->hidden + st->bubble + st->gather;
    /* one device, the same global batch: every micro-batch of every rank through every layer */
    st->one_device = t_all * m * ranks + owned_all * adam;
}

static const char *gpt2rt__precision_name(gpt2rt_precision p) {
    return p == GPT2RT_PRECISION_BF16 ? "bf16" : p == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
}

/* "none", "selective", "full (every 3rd layer input)" */
static const char *gpt2rt__recompute_name(const gpt2rt_config *c, char *buf, size_t cap) {
    if (c->recompute == GPT2RT_RECOMPUTE_SELECTIVE) return "selective";
    if (c->recompute != GPT2RT_RECOMPUTE_FULL) return "none";
    snprintf(buf, cap, "full, checkpoint every %d layer%s", c->checkpoint_every, c->checkpoint_every > 1 ? "s" : "");
    return buf;
}

static const char *gpt2rt__parallel_name(gpt2rt_parallel p) {
    return p == GPT2RT_PARALLEL_DATA ? "data parallel" : p == GPT2RT_PARALLEL_LAYER_SPLIT ? "layer split" : "one device";
}

/* Layer split, what each backend allocates per device beyond the spans' arenas of
   gpt2rt__layout: GPipe keeps the activations of all grad_accum micro-batches in flight.
   CUDA (8.7): each stage its span's arenas and grad_accum - 1 further activation sets of
   its span. CPU (10.2): the stages share the host, so device 0 holds one device's arenas
   of the whole model and the grad_accum - 1 further sets of those, device s > 0 the
   transient and workspace of its stage thread. bytes: the spans' layouts on entry. */
static void gpt2rt__plan_split(const gpt2rt_config *c, const gpt2rt__dims *d,
                               uint64_t bytes[GPT2RT_MAX_DEVICES][GPT2RT_MEM_COUNT]) {
    uint64_t m = (uint64_t)c->grad_accum;
    if (c->parallel != GPT2RT_PARALLEL_LAYER_SPLIT) return;
    if (d->cuda) {
        for (int dev = 0; dev < c->n_devices; dev++) bytes[dev][GPT2RT_MEM_ACTIVATIONS] *= m;
        return;
    }
    gpt2rt__span whole;
    whole.l0 = 0; whole.l1 = d->L; whole.first = whole.last = 1;
    gpt2rt__layout(d, &whole, bytes[0], NULL);
    bytes[0][GPT2RT_MEM_ACTIVATIONS] *= m;
    for (int dev = 1; dev < c->n_devices; dev++)
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            bytes[dev][i] = i == GPT2RT_MEM_TRANSIENT || i == GPT2RT_MEM_WORKSPACE ? bytes[0][i] : 0;
}

static uint64_t gpt2rt__plan_peak(const gpt2rt_memory_plan *p, int *at) {
    uint64_t m = 0;
    for (int dev = 0; dev < p->n_devices; dev++)
        if (p->total[dev] + p->overhead[dev] > m || !dev) { m = p->total[dev] + p->overhead[dev]; if (at) *at = dev; }
    return m;
}

/* ==== 3.4 Advisor ==== */

/* one line per knob that differs between plans a and b, with what it saves */
static size_t gpt2rt__fit_explain_step(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *a,
                                       const gpt2rt_memory_plan *b, const char *what, const char *why) {
    int da = 0, db = 0;
    uint64_t pa = gpt2rt__plan_peak(a, &da), pb = gpt2rt__plan_peak(b, &db);
    double sa = a->predicted_seconds, sb = b->predicted_seconds;
    GPT2RT__PUT("- %s: the fullest device needs %.2f %s -> %.2f %s (%s %.2f %s); predicted step %.3f -> %.3f s%s%s\n",
                what, GPT2RT__SZ(pa), GPT2RT__SZ(pb), pb <= pa ? "saves" : "costs",
                GPT2RT__SZ(pb <= pa ? pa - pb : pb - pa), sa, sb, why ? ": " : "", why ? why : "");
    return n;
}

/* The micro-batches gpt2rt_fit tries when one replica runs g rows a step: divisors b
   of g with b and g/b in [1, 2^20]. Bytes and the predicted time both grow with b,
   so in each octave [2^k, 2^(k+1)) the smallest and the largest divisor stand for
   the others; keep (the config's own) is always tried. At most 43 candidates,
   ascending, found with at most 2^20 divisions whatever g is: the advice costs
   milliseconds at the limits (batch 2^20, accumulation 2^20), not hours. */
static int gpt2rt__fit_batches(int64_t g, int64_t keep, int64_t out[43]) {
    const int64_t lim = (int64_t)1 << 20;
    int64_t first[21] = {0}, last[21] = {0}, lo = g > lim ? (g + lim - 1) / lim : 1, hi = g < lim ? g : lim;
    for (int64_t b = lo; b <= hi; b++) {
        if (g % b) continue;
        int k = 0;
        while (((int64_t)2 << k) <= b) k++;
        if (!first[k]) first[k] = b;
        last[k] = b;
    }
    int n = 0, kept = !(keep >= lo && keep <= hi && g % keep == 0);
    for (int k = 0; k < 21; k++)
        for (int i = 0; i < 2; i++) {
            int64_t b = i ? last[k] : first[k];
            if (!b || (i && b == first[k])) continue;
            if (!kept && keep <= b) { if (keep < b) out[n++] = keep; kept = 1; }
            out[n++] = b;
        }
    if (!kept) out[n++] = keep;
    return n;
}

/* the chunk the advisor tries (GPT2RT_FIT_CLASSIFIER): four KC slices of the matrix
   product, so wte's gradient stays bitwise the whole-batch path's */
#define GPT2RT__FIT_CHUNK 1024

/* What the search found: the fastest config that fits (the coarse model's ranking,
   fewer changes on a tie), or the smallest reachable one when nothing fits. */
typedef struct gpt2rt__fit_result {
    int found;
    gpt2rt_memory_plan best; /* found */
    int best_changes;        /* knobs best changes from the config */
    gpt2rt_config smallest;  /* not found */
    uint64_t small_peak;
} gpt2rt__fit_result;

/* Every config allow reaches from base's with the same global batch: parallel mode,
   micro-batch x accumulation, recompute level, precision. */
static void gpt2rt__fit_search(const gpt2rt_memory_plan *base, uint64_t budget, unsigned allow,
                               gpt2rt__fit_result *fr) {
    const gpt2rt_config *c0 = &base->config;
    int nd = c0->n_devices;
    int64_t global = (int64_t)c0->batch_size * c0->grad_accum * (c0->parallel == GPT2RT_PARALLEL_DATA ? nd : 1);
    gpt2rt_memory_plan cand, best;
    memset(&best, 0, sizeof best);
    int found = 0, best_changes = 0;
    uint64_t small_peak = UINT64_MAX;
    gpt2rt_config smallest = *c0;
    gpt2rt_parallel modes[2] = {c0->parallel, c0->parallel};
    int n_modes = 1;
    if ((allow & GPT2RT_FIT_PARALLEL) && nd > 1) {
        modes[0] = GPT2RT_PARALLEL_DATA; modes[1] = GPT2RT_PARALLEL_LAYER_SPLIT; n_modes = 2;
    }
    for (int mi = 0; mi < n_modes; mi++) {
        int64_t reps = modes[mi] == GPT2RT_PARALLEL_DATA ? nd : 1;
        if (global % reps) continue;
        int64_t g = global / reps; /* micro-batch x accumulation on one replica */
        int64_t bs[43];
        int nb = gpt2rt__fit_batches(g, c0->batch_size, bs);
        for (int bi = 0; bi < nb; bi++) {
            int64_t b = bs[bi];
            /* without FIT_BATCH the micro-batch stays; only a change of mode may change the accumulation */
            if (!(allow & GPT2RT_FIT_BATCH) &&
                !(b == c0->batch_size && (modes[mi] != c0->parallel || g / b == c0->grad_accum))) continue;
            if (b > (1 << 20) || g / b > (1 << 20)) continue;
            for (int ri = 0; ri < 4; ri++) {
                gpt2rt_recompute rc = ri == 0 ? GPT2RT_RECOMPUTE_NONE : ri == 1 ? GPT2RT_RECOMPUTE_SELECTIVE
                                    : GPT2RT_RECOMPUTE_FULL;
                int ck = ri == 2 ? 1 : ri == 3 ? GPT2RT_CHECKPOINT_SQRT : 0;
                if (!(allow & GPT2RT_FIT_RECOMPUTE) && ri) continue; /* keep the config's */
                for (int pi = 0; pi < 8; pi++) {
                    gpt2rt_config t = *c0;
                    if (pi >= 4) { /* the chunked classifier, where it can hold fewer logits */
                        if (!(allow & GPT2RT_FIT_CLASSIFIER) || c0->classifier_chunk ||
                            t.input != GPT2RT_INPUT_TOKENS || modes[mi] == GPT2RT_PARALLEL_LAYER_SPLIT ||
                            b * t.seq_len <= GPT2RT__FIT_CHUNK) continue;
                        t.classifier_chunk = GPT2RT__FIT_CHUNK;
                    }
                    int si = pi / 2 % 2; /* 1: shard_optimizer toggled */
                    t.shard_optimizer = modes[mi] != GPT2RT_PARALLEL_DATA ? 0 : si ? !c0->shard_optimizer
                                      : c0->shard_optimizer;
                    if (si && (!(allow & GPT2RT_FIT_SHARD) || modes[mi] != GPT2RT_PARALLEL_DATA)) continue;
                    if (pi % 2 == 1) {
                        if (!(allow & GPT2RT_FIT_PRECISION) || t.backend != GPT2RT_BACKEND_CUDA ||
                            t.precision != GPT2RT_PRECISION_FP32) continue;
                        t.precision = GPT2RT_PRECISION_BF16; t.tf32 = 0;
                    }
                    t.parallel = modes[mi];
                    if (t.parallel != GPT2RT_PARALLEL_LAYER_SPLIT) /* explicit stages are the split's, kept there */
                        memset(t.stage_first_layer, 0, sizeof t.stage_first_layer);
                    t.batch_size = (int)b;
                    t.grad_accum = (int)(g / b);
                    if (allow & GPT2RT_FIT_RECOMPUTE) { t.recompute = rc; t.checkpoint_every = ck; }
                    if (gpt2rt_plan(&t, &cand) != GPT2RT_OK) continue;
                    uint64_t peak = gpt2rt__plan_peak(&cand, NULL);
                    if (peak < small_peak) { small_peak = peak; smallest = cand.config; }
                    if (peak > budget) continue;
                    const gpt2rt_config *k = &cand.config;
                    int changes = (k->parallel != c0->parallel) + (k->precision != c0->precision) +
                                  (k->shard_optimizer != c0->shard_optimizer) +
                                  (k->classifier_chunk != c0->classifier_chunk) +
                                  (k->batch_size != c0->batch_size) + (k->recompute != c0->recompute ||
                                  k->checkpoint_every != c0->checkpoint_every);
                    /* faster by more than 0.5%, or as fast with fewer changes */
                    if (!found || cand.predicted_seconds < best.predicted_seconds * 0.995 ||
                        (cand.predicted_seconds <= best.predicted_seconds * 1.005 && changes < best_changes)) {
                        best = cand; best_changes = changes; found = 1;
                    }
                }
            }
        }
    }
    fr->found = found;
    fr->best = best;
    fr->best_changes = best_changes;
    fr->smallest = smallest;
    fr->small_peak = small_peak;
}

/* the first lines of the explanation: what the config needs against the budget, and
   what its frozen groups already save */
static size_t gpt2rt__fit_explain_start(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *base,
                                        uint64_t budget) {
    const gpt2rt_config *c0 = &base->config;
    int at = 0;
    uint64_t peak0 = gpt2rt__plan_peak(base, &at);
    GPT2RT__PUT("the config needs %.2f %s on device %d", GPT2RT__SZ(peak0), at);
    if (base->overhead[at])
        GPT2RT__PUT(" (%.2f %s arenas + %.2f %s estimated overhead)", GPT2RT__SZ(base->total[at]),
                    GPT2RT__SZ(base->overhead[at]));
    GPT2RT__PUT("; the budget is %.2f %s per device\n", GPT2RT__SZ(budget));
    if (c0->inference) {
        gpt2rt_config u = *c0;
        gpt2rt_memory_plan up;
        u.inference = 0;
        if (gpt2rt_plan(&u, &up) == GPT2RT_OK)
            GPT2RT__PUT("- inference = 1 already saves %.2f %s against a training context of this shape: no "
                        "gradients, no AdamW moments, no master weights, two layers' activations (reused) instead "
                        "of %d, no backward scratch\n", GPT2RT__SZ(gpt2rt__plan_peak(&up, NULL) - peak0),
                        c0->n_layer);
    }
    if (c0->frozen) {
        gpt2rt_config u = *c0;
        gpt2rt_memory_plan up;
        u.frozen = 0;
        if (gpt2rt_plan(&u, &up) == GPT2RT_OK)
            GPT2RT__PUT("- frozen groups 0x%x already save %.2f %s: %.2fM parameters get no gradient, no moments "
                        "and no master copy, and the inputs only their weight gradients need are not kept\n",
                        c0->frozen, GPT2RT__SZ(gpt2rt__plan_peak(&up, NULL) - peak0),
                        (double)(base->n_params_padded - base->n_trainable) / 1e6);
    }
    return n;
}

/* Walk from base's config to best's one knob at a time, so each line's saving is its own. */
static size_t gpt2rt__fit_explain_changes(char *buf, size_t cap, size_t n, const gpt2rt_memory_plan *base,
                                          const gpt2rt_memory_plan *best) {
    const gpt2rt_config *c0 = &base->config;
    int nd = c0->n_devices;
    int64_t global = (int64_t)c0->batch_size * c0->grad_accum * (c0->parallel == GPT2RT_PARALLEL_DATA ? nd : 1);
    char r0[64];
    gpt2rt_memory_plan cur = *base, next;
    gpt2rt_config w = *c0;
    const gpt2rt_config *k = &best->config;
    char what[256], r1[64];
    if (k->parallel != w.parallel) {
        gpt2rt_parallel from = w.parallel;
        w.parallel = k->parallel;
        if (w.parallel != GPT2RT_PARALLEL_DATA) w.shard_optimizer = 0; /* a data-parallel knob */
        if (w.parallel != GPT2RT_PARALLEL_LAYER_SPLIT) memset(w.stage_first_layer, 0, sizeof w.stage_first_layer);
        int64_t g = global / (w.parallel == GPT2RT_PARALLEL_DATA ? nd : 1); /* keep the micro-batch if it divides */
        if (g % w.batch_size) w.batch_size = k->batch_size;
        w.grad_accum = (int)(g / w.batch_size);
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "%s -> %s (micro-batch %d x accumulation %d, global batch %lld kept)",
                 gpt2rt__parallel_name(from), gpt2rt__parallel_name(w.parallel), w.batch_size, w.grad_accum,
                 (long long)global);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, w.parallel == GPT2RT_PARALLEL_LAYER_SPLIT
            ? "data parallel keeps every weight, gradient and moment on every device; layer split keeps each "
              "layer's on one device"
            : "each device holds the whole model but only its share of the batch");
        cur = next;
    }
    if (k->shard_optimizer != w.shard_optimizer) {
        w.shard_optimizer = k->shard_optimizer;
        gpt2rt_plan(&w, &next);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, w.shard_optimizer ? "optimizer sharding (ZeRO-1) on"
                                     : "optimizer sharding (ZeRO-1) off", w.shard_optimizer
            ? "each device keeps the moments (and master weights) of its 1/n of the parameters and all-gathers "
              "the weights after each update"
            : "every device keeps every moment: no all-gather of the weights");
        cur = next;
    }
    if (k->precision != w.precision) {
        w.precision = k->precision; w.tf32 = 0;
        gpt2rt_plan(&w, &next);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, "precision fp32 -> bf16",
                                 "bf16 weights and activations, fp32 master weights and moments");
        cur = next;
    }
    if (k->classifier_chunk != w.classifier_chunk) {
        w.classifier_chunk = k->classifier_chunk;
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "classifier over %d tokens at a time", w.classifier_chunk);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, "the LM head, the loss and their backward run "
                                     "chunk by chunk: the logits of one chunk are held, never all of them");
        cur = next;
    }
    if (k->batch_size != w.batch_size || k->grad_accum != w.grad_accum) {
        int b0 = w.batch_size, a0 = w.grad_accum;
        w.batch_size = k->batch_size; w.grad_accum = k->grad_accum;
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "micro-batch %d x accumulation %d -> %d x %d (global batch %lld kept)", b0, a0,
                 w.batch_size, w.grad_accum, (long long)global);
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, "activations and logits scale with the micro-batch");
        cur = next;
    }
    if (k->recompute != w.recompute || k->checkpoint_every != w.checkpoint_every) {
        gpt2rt_config from = w;
        w.recompute = k->recompute; w.checkpoint_every = k->checkpoint_every;
        gpt2rt_plan(&w, &next);
        snprintf(what, sizeof what, "recompute %s -> %s", gpt2rt__recompute_name(&from, r0, sizeof r0),
                 gpt2rt__recompute_name(&w, r1, sizeof r1));
        n = gpt2rt__fit_explain_step(buf, cap, n, &cur, &next, what, w.recompute == GPT2RT_RECOMPUTE_SELECTIVE
            ? "LayerNorm and GELU outputs are recomputed in the backward"
            : "only layer inputs are kept; each layer's forward runs again in the backward");
        cur = next;
    }
    return n;
}

/* ==== 4. Formats ==== */

/* ==== 4.1 safetensors: reading ==== */

/* safetensors: 8-byte little-endian header length N, N bytes of JSON
   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
    "__metadata__": {"key": "value"}}, then the data; offsets count from the data's
   first byte. The parser trusts nothing: every length, offset and count is checked
   against the bytes that exist before use. Little-endian hosts only. */

enum { GPT2RT__F32, GPT2RT__F16, GPT2RT__BF16, GPT2RT__F64, GPT2RT__I64, GPT2RT__I32, GPT2RT__I16, GPT2RT__I8,
       GPT2RT__U8, GPT2RT__U16, GPT2RT__U32, GPT2RT__U64, GPT2RT__BOOL, GPT2RT__F8E4M3, GPT2RT__F8E5M2,
       GPT2RT__NDTYPE };
static const char *gpt2rt__dtype_names[GPT2RT__NDTYPE] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8",
                                                         "U16", "U32", "U64", "BOOL", "F8_E4M3", "F8_E5M2"};
static const int gpt2rt__dtype_size[GPT2RT__NDTYPE] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 2, 4, 8, 1, 1, 1};

#define GPT2RT__ST_MAX_DIMS 8
typedef struct gpt2rt__st_tensor {
    const char *name; /* points into the parser's header copy */
    int dtype, ndim;
    int64_t shape[GPT2RT__ST_MAX_DIMS];
    uint64_t begin, end; /* bytes, relative to the data section */
} gpt2rt__st_tensor;

typedef struct gpt2rt__st {
    char *header;                   /* copy of the JSON, strings unescaped in place */
    gpt2rt__st_tensor *t;
    int n, cap;
    const char **meta;              /* key, value, key, value ... */
    int n_meta, cap_meta;
    const unsigned char *data;
    uint64_t data_len;
} gpt2rt__st;

typedef struct gpt2rt__json {
    char *p, *begin, *end;
    gpt2rt_ctx *ctx;
    const char *what; /* file name, for messages */
    const char *kind; /* "safetensors header", "config.json" */
} gpt2rt__json;

static gpt2rt_result gpt2rt__json_fail(gpt2rt__json *j, const char *msg) {
    return gpt2rt__fail(j->ctx, GPT2RT_ERR_FORMAT, "%s: %s byte %lld: %s", j->what, j->kind,
                        (long long)(j->p - j->begin), msg);
}

static void gpt2rt__json_ws(gpt2rt__json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int gpt2rt__json_eat(gpt2rt__json *j, char c) {
    gpt2rt__json_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}

static int gpt2rt__hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int gpt2rt__json_u4(gpt2rt__json *j, unsigned *u) {
    if (j->end - j->p < 4) return 0;
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = gpt2rt__hex(j->p[i]);
        if (h < 0) return 0;
        *u = *u * 16 + (unsigned)h;
    }
    j->p += 4;
    return 1;
}

/* a string, unescaped in place (never longer than its source), NUL-terminated */
static gpt2rt_result gpt2rt__json_string(gpt2rt__json *j, const char **out) {
    if (!gpt2rt__json_eat(j, '"')) return gpt2rt__json_fail(j, "expected a string");
    char *w = j->p, *start = j->p;
    while (1) {
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) return gpt2rt__json_fail(j, "control character in a string");
        if (c != '\\') { *w++ = (char)c; continue; }
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated escape");
        char e = *j->p++;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!gpt2rt__json_u4(j, &u)) return gpt2rt__json_fail(j, "bad \\u escape");
            if (u >= 0xD800 && u < 0xDC00) {
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') return gpt2rt__json_fail(j, "lone surrogate");
                j->p += 2;
                if (!gpt2rt__json_u4(j, &lo) || lo < 0xDC00 || lo >= 0xE000) return gpt2rt__json_fail(j, "bad surrogate pair");
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u < 0xE000) return gpt2rt__json_fail(j, "lone surrogate");
            if (u == 0) return gpt2rt__json_fail(j, "NUL character in a string");
            if (u < 0x80) *w++ = (char)u;
            else if (u < 0x800) { *w++ = (char)(0xC0 | (u >> 6)); *w++ = (char)(0x80 | (u & 63)); }
            else if (u < 0x10000) {
                *w++ = (char)(0xE0 | (u >> 12)); *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            } else {
                *w++ = (char)(0xF0 | (u >> 18)); *w++ = (char)(0x80 | ((u >> 12) & 63));
                *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            }
            break;
        }
        default: return gpt2rt__json_fail(j, "unknown escape");
        }
    }
    *w = 0; /* w <= the closing quote, which has been read */
    *out = start;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__json_u64(gpt2rt__json *j, uint64_t *out) {
    gpt2rt__json_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return gpt2rt__json_fail(j, "expected a non-negative integer");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return gpt2rt__json_fail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return gpt2rt__json_fail(j, "expected an integer, found a fraction");
    *out = v;
    return GPT2RT_OK;
}

/* skip any JSON value (for keys we do not use), nesting at most 32 deep */
static gpt2rt_result gpt2rt__json_skip(gpt2rt__json *j, int depth) {
    if (depth > 32) return gpt2rt__json_fail(j, "nested too deeply");
    gpt2rt__json_ws(j);
    if (j->p >= j->end) return gpt2rt__json_fail(j, "unexpected end of header");
    const char *s;
    char c = *j->p;
    if (c == '"') return gpt2rt__json_string(j, &s);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (gpt2rt__json_eat(j, close)) return GPT2RT_OK;
        do {
            gpt2rt_result r;
            if (c == '{') {
                if ((r = gpt2rt__json_string(j, &s)) != GPT2RT_OK) return r;
                if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
            }
            if ((r = gpt2rt__json_skip(j, depth + 1)) != GPT2RT_OK) return r;
        } while (gpt2rt__json_eat(j, ','));
        if (!gpt2rt__json_eat(j, close)) return gpt2rt__json_fail(j, c == '{' ? "expected '}'" : "expected ']'");
        return GPT2RT_OK;
    }
    const char *lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) { j->p += n; return GPT2RT_OK; }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        j->p++;
        while (j->p < j->end && *j->p && strchr("0123456789.eE+-", *j->p)) j->p++;
        return GPT2RT_OK;
    }
    return gpt2rt__json_fail(j, "unexpected character");
}

static int gpt2rt__grow(gpt2rt_ctx *ctx, void **arr, int *cap, int n, size_t elem) {
    if (n < *cap) return 1;
    int nc = *cap ? *cap * 2 : 64;
    void *na = gpt2rt__alloc(&ctx->cfg, (size_t)nc * elem, GPT2RT_MEM_BOOKKEEPING);
    if (!na) return 0;
    if (*arr) memcpy(na, *arr, (size_t)n * elem);
    gpt2rt__free(&ctx->cfg, *arr, GPT2RT_MEM_BOOKKEEPING);
    *arr = na;
    *cap = nc;
    return 1;
}

static void gpt2rt__st_release(gpt2rt_ctx *ctx, gpt2rt__st *st) {
    gpt2rt__free(&ctx->cfg, st->header, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, st->t, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, (void *)st->meta, GPT2RT_MEM_BOOKKEEPING);
    memset(st, 0, sizeof *st);
}

static gpt2rt_result gpt2rt__st_tensor_entry(gpt2rt__json *j, gpt2rt__st_tensor *t) {
    char msg[160];
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
    gpt2rt_result r;
    if (!gpt2rt__json_eat(j, '{')) return gpt2rt__json_fail(j, "expected '{' (a tensor entry)");
    if (gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "empty tensor entry");
    do {
        const char *key;
        if ((r = gpt2rt__json_string(j, &key)) != GPT2RT_OK) return r;
        if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
        if (!strcmp(key, "dtype")) {
            const char *dt;
            if (seen_dtype++) return gpt2rt__json_fail(j, "duplicate \"dtype\"");
            if ((r = gpt2rt__json_string(j, &dt)) != GPT2RT_OK) return r;
            t->dtype = -1;
            for (int i = 0; i < GPT2RT__NDTYPE; i++)
                if (!strcmp(dt, gpt2rt__dtype_names[i])) t->dtype = i;
            if (t->dtype < 0) {
                snprintf(msg, sizeof msg, "tensor '%.60s' has unknown dtype '%.20s'", t->name, dt);
                return gpt2rt__json_fail(j, msg);
            }
        } else if (!strcmp(key, "shape")) {
            if (seen_shape++) return gpt2rt__json_fail(j, "duplicate \"shape\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (shape)");
            t->ndim = 0;
            if (!gpt2rt__json_eat(j, ']')) {
                do {
                    uint64_t v;
                    if (t->ndim == GPT2RT__ST_MAX_DIMS) return gpt2rt__json_fail(j, "more than 8 dimensions");
                    if ((r = gpt2rt__json_u64(j, &v)) != GPT2RT_OK) return r;
                    if (v > ((uint64_t)1 << 40)) return gpt2rt__json_fail(j, "dimension larger than 2^40");
                    t->shape[t->ndim++] = (int64_t)v;
                } while (gpt2rt__json_eat(j, ','));
                if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (shape)");
            }
        } else if (!strcmp(key, "data_offsets")) {
            if (seen_offsets++) return gpt2rt__json_fail(j, "duplicate \"data_offsets\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (data_offsets)");
            if ((r = gpt2rt__json_u64(j, &t->begin)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ',')) return gpt2rt__json_fail(j, "expected ',' (data_offsets has 2 numbers)");
            if ((r = gpt2rt__json_u64(j, &t->end)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (data_offsets has 2 numbers)");
        } else if ((r = gpt2rt__json_skip(j, 1)) != GPT2RT_OK) return r;
    } while (gpt2rt__json_eat(j, ','));
    if (!gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "expected '}' (end of a tensor entry)");
    if (!seen_dtype || !seen_shape || !seen_offsets)
        return gpt2rt__json_fail(j, "tensor entry lacks dtype, shape or data_offsets");
    return GPT2RT_OK;
}

static int gpt2rt__cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* a whole decimal integer in [lo, hi], nothing else: the only way text becomes a number */
static int gpt2rt__parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* Parse a whole safetensors file held in memory. On success st describes it and
   must be released with gpt2rt__st_release; on failure nothing is left allocated. */
static gpt2rt_result gpt2rt__st_parse(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what,
                                      gpt2rt__st *st) {
    memset(st, 0, sizeof *st);
    if (len < 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: %llu bytes, too short for a safetensors file (at least 8)",
                            what, (unsigned long long)len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > 100000000u || hlen > len - 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu exceeds the %llu bytes after the length "
                            "field%s", what, (unsigned long long)hlen, (unsigned long long)(len - 8),
                            hlen > 100000000u ? " (and the 100 MB limit)" : " (truncated file?)");
    if (hlen < 2) return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu is too short", what,
                                      (unsigned long long)hlen);
    st->header = (char *)gpt2rt__alloc(&ctx->cfg, (size_t)hlen + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!st->header) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: header copy of %llu bytes", what,
                                         (unsigned long long)hlen);
    memcpy(st->header, buf + 8, (size_t)hlen);
    st->header[hlen] = 0;
    st->data = buf + 8 + hlen;
    st->data_len = len - 8 - hlen;
    gpt2rt__json j;
    j.p = j.begin = st->header;
    j.end = st->header + hlen;
    j.ctx = ctx;
    j.what = what;
    j.kind = "safetensors header";
    gpt2rt_result r = GPT2RT_OK;
    if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' at the start of the header"); goto fail; }
    if (!gpt2rt__json_eat(&j, '}')) {
        do {
            const char *key;
            if ((r = gpt2rt__json_string(&j, &key)) != GPT2RT_OK) goto fail;
            if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
            if (!strcmp(key, "__metadata__")) {
                if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' (__metadata__)"); goto fail; }
                if (gpt2rt__json_eat(&j, '}')) continue;
                do {
                    const char *k, *v;
                    if ((r = gpt2rt__json_string(&j, &k)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
                    if ((r = gpt2rt__json_string(&j, &v)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__grow(ctx, (void **)&st->meta, &st->cap_meta, st->n_meta + 2, sizeof(char *))) {
                        r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: metadata table", what);
                        goto fail;
                    }
                    st->meta[st->n_meta++] = k;
                    st->meta[st->n_meta++] = v;
                } while (gpt2rt__json_eat(&j, ','));
                if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' (__metadata__)"); goto fail; }
                continue;
            }
            if (!gpt2rt__grow(ctx, (void **)&st->t, &st->cap, st->n, sizeof(gpt2rt__st_tensor))) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: tensor table of %d entries", what, st->n);
                goto fail;
            }
            gpt2rt__st_tensor *t = &st->t[st->n];
            memset(t, 0, sizeof *t);
            t->name = key;
            if ((r = gpt2rt__st_tensor_entry(&j, t)) != GPT2RT_OK) goto fail;
            st->n++;
        } while (gpt2rt__json_eat(&j, ','));
        if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' or ','"); goto fail; }
    }
    gpt2rt__json_ws(&j);
    if (j.p != j.end) { r = gpt2rt__json_fail(&j, "trailing bytes after the header object"); goto fail; }
    for (int i = 0; i < st->n; i++) {
        gpt2rt__st_tensor *t = &st->t[i];
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] && numel > ((uint64_t)1 << 50) / (uint64_t)t->shape[k]) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has more than 2^50 elements", what, t->name);
                goto fail;
            }
            numel *= (uint64_t)t->shape[k];
        }
        uint64_t bytes = numel * (uint64_t)gpt2rt__dtype_size[t->dtype];
        if (t->end < t->begin || t->end > st->data_len || t->end - t->begin != bytes) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] but needs %llu "
                             "bytes (%s, %llu elements) within the %llu data bytes%s", what, t->name,
                             (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)bytes,
                             gpt2rt__dtype_names[t->dtype], (unsigned long long)numel,
                             (unsigned long long)st->data_len, t->end > st->data_len ? " (truncated file?)" : "");
            goto fail;
        }
    }
    if (st->n > 1) { /* duplicate names: sort a copy of the names, compare neighbours */
        const char **names = (const char **)gpt2rt__alloc(&ctx->cfg, (size_t)st->n * sizeof(char *), GPT2RT_MEM_BOOKKEEPING);
        if (!names) { r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: name table", what); goto fail; }
        for (int i = 0; i < st->n; i++) names[i] = st->t[i].name;
        qsort((void *)names, (size_t)st->n, sizeof(char *), gpt2rt__cmp_names);
        for (int i = 1; i < st->n && r == GPT2RT_OK; i++)
            if (!strcmp(names[i - 1], names[i]))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' appears twice", what, names[i]);
        gpt2rt__free(&ctx->cfg, (void *)names, GPT2RT_MEM_BOOKKEEPING);
        if (r != GPT2RT_OK) goto fail;
    }
    return GPT2RT_OK;
fail:
    gpt2rt__st_release(ctx, st);
    return r;
}

static const gpt2rt__st_tensor *gpt2rt__st_find(const gpt2rt__st *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static const char *gpt2rt__st_meta(const gpt2rt__st *st, const char *key) {
    for (int i = 0; i + 1 < st->n_meta; i += 2)
        if (!strcmp(st->meta[i], key)) return st->meta[i + 1];
    return NULL;
}

static float gpt2rt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else { /* subnormal: renormalise */
        exp = 113;
        while (!(man & 1024)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 1023) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* element i of a F32/F16/BF16 tensor in the file, as float */
static float gpt2rt__st_get(const unsigned char *src, int dtype, int64_t i) {
    if (dtype == GPT2RT__F32) { float f; memcpy(&f, src + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    if (dtype == GPT2RT__F16) return gpt2rt__f16_to_f32(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

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

/* ==== 4.3 Hugging Face weights and config.json ==== */

static void gpt2rt__reset_training(gpt2rt_ctx *ctx);

static const gpt2rt__tensor *gpt2rt__tensor_named(const gpt2rt_ctx *ctx, const char *name) {
    for (int i = 0; i < ctx->n_tensors; i++)
        if (!strcmp(ctx->tensors[i].name, name)) return &ctx->tensors[i];
    return NULL;
}

/* the Hugging Face shape of a tensor: (rows) | (hf_rows, cols) | transposed (cols, rows) */
static void gpt2rt__hf_shape(const gpt2rt__tensor *t, int64_t shape[2]) {
    shape[0] = t->ndim == 1 ? t->rows : t->transpose ? t->cols : t->hf_rows;
    shape[1] = t->ndim == 1 ? 1 : t->transpose ? t->rows : t->cols;
}

/* dst (the Hugging Face layout of t, hf_rows * cols) = s (t's internal layout) * k */
static void gpt2rt__param_out(const gpt2rt__tensor *t, const float *s, float k, float *dst) {
    int64_t count = t->hf_rows * t->cols; /* wte: the padded rows stay behind */
    if (t->transpose) {
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) dst[c * t->rows + r0] = s[r0 * t->cols + c] * k;
    } else if (k != 1.0f) {
        for (int64_t i = 0; i < count; i++) dst[i] = s[i] * k;
    } else memcpy(dst, s, (size_t)count * sizeof(float));
}

/* path itself, or path/name when path is a directory (a Hugging Face model directory);
   0 when that does not fit in cap */
static int gpt2rt__in_dir(const char *path, const char *name, char *out, size_t cap) {
    struct stat sb;
    /* a directory, or a missing path not named like the file (".safetensors", ".json") */
    int dir = stat(path, &sb) == 0 ? GPT2RT__IS_DIR(sb.st_mode) : !gpt2rt__ends_with(path, strchr(name, '.'));
    int n = dir ? snprintf(out, cap, "%s/%s", path, name) : snprintf(out, cap, "%s", path);
    return n >= 0 && (size_t)n < cap;
}

/* Load Hugging Face GPT-2 weights from a safetensors image in memory. Checks
   everything first, then copies: a failure leaves the weights untouched. */
static gpt2rt_result gpt2rt__weights_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__st_tensor **src = (const gpt2rt__st_tensor **)gpt2rt__alloc(
        &ctx->cfg, (size_t)ctx->n_tensors * sizeof(void *), GPT2RT_MEM_BOOKKEEPING);
    if (!src) { gpt2rt__st_release(ctx, &st); return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: table", what); }
    const size_t plen = strlen("transformer.");
    for (int i = 0; i < ctx->n_tensors && r == GPT2RT_OK; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        const gpt2rt__st_tensor *e = gpt2rt__st_find(&st, t->name);
        int gpt2 = !strncmp(t->name, "transformer.", plen);
        if (!e && gpt2) e = gpt2rt__st_find(&st, t->name + plen); /* the original GPT-2 files have no prefix */
        src[i] = e;
        int64_t want[2];
        gpt2rt__hf_shape(t, want);
        if (!e && !gpt2) continue; /* patches: a GPT-2 checkpoint has no in_layer/out_layer; they stay */
        if (!e) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' (or '%s') is missing; the file has %d tensors%s%s",
                             what, t->name, t->name + plen, st.n, st.n ? ", the first is " : "", st.n ? st.t[0].name : "");
        } else if (e->dtype != GPT2RT__F32 && e->dtype != GPT2RT__F16 && e->dtype != GPT2RT__BF16) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has dtype %s; F32, F16 or BF16 expected", what,
                             e->name, gpt2rt__dtype_names[e->dtype]);
        } else {
            int is_wpe = t->row == &gpt2rt__model_rows[GPT2RT__WPE];
            int ok = e->ndim == t->ndim && e->shape[0] == want[0] && (t->ndim == 1 || e->shape[1] == want[1]);
            if (is_wpe && e->ndim == 2 && e->shape[1] == want[1] && e->shape[0] >= want[0]) ok = 1;
            if (!ok) {
                char got[128];
                int gn = snprintf(got, sizeof got, "(");
                for (int k = 0; k < e->ndim && gn < 100; k++) gn += snprintf(got + gn, sizeof got - (size_t)gn, "%s%lld", k ? ", " : "", (long long)e->shape[k]);
                snprintf(got + gn, sizeof got - (size_t)gn, ")");
                if (t->ndim == 1)
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has shape %s; the config needs (%lld)",
                                     what, e->name, got, (long long)want[0]);
                else
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has shape %s; the config needs (%lld, %lld)%s",
                                     what, e->name, got, (long long)want[0], (long long)want[1],
                                     is_wpe ? " (or more positions)" : "");
            }
            /* NaN or inf in a weight would make every step after the load non-finite */
            const unsigned char *p = st.data + e->begin;
            for (int64_t j = 0; ok && j < want[0] * want[1]; j++) {
                float x = gpt2rt__st_get(p, e->dtype, j);
                if (!isfinite(x)) {
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld (row %lld, column %lld) is "
                                     "%g: weights must be finite", what, e->name, (long long)j,
                                     (long long)(j / want[1]), (long long)(j % want[1]), (double)x);
                    ok = 0;
                }
            }
        }
    }
    if (r == GPT2RT_OK) {
        int ignored_layers = 0, unknown = 0;
        for (int k = 0; k < st.n; k++) {
            const char *nm = st.t[k].name, *base = strncmp(nm, "transformer.", plen) ? nm : nm + plen;
            char full[128];
            snprintf(full, sizeof full, "transformer.%s", base);
            int layer = -1;
            if (gpt2rt__tensor_named(ctx, full) || gpt2rt__tensor_named(ctx, nm) ||
                gpt2rt__ends_with(base, ".attn.bias") ||
                gpt2rt__ends_with(base, ".attn.masked_bias") || !strcmp(base, "lm_head.weight") ||
                !strcmp(nm, "lm_head.weight") || (ctx->d.patches && !strcmp(base, "wte.weight")))
                continue; /* ours, a causal mask buffer, the tied head, or a patch model's unused wte */
            if (!strncmp(base, "h.", 2)) {
                char num[16];
                size_t k = 0;
                while (k < sizeof num - 1 && base[2 + k] >= '0' && base[2 + k] <= '9') { num[k] = base[2 + k]; k++; }
                num[k] = 0;
                long long lv;
                if (base[2 + k] == '.' && gpt2rt__parse_int(num, 0, 1 << 30, &lv)) layer = (int)lv;
            }
            if (layer >= ctx->d.L) ignored_layers++;
            else if (unknown++ < 4) gpt2rt__log(ctx, GPT2RT_LOG_WARN, "%s: ignoring unknown tensor '%s'", what, nm);
        }
        if (ignored_layers)
            gpt2rt__log(ctx, GPT2RT_LOG_INFO, "%s: loaded the first %lld layers; %d tensors of deeper layers ignored",
                        what, (long long)ctx->d.L, ignored_layers);
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *t = &ctx->tensors[i];
            const gpt2rt__st_tensor *e = src[i];
            if (!e) continue; /* kept as it is (patches' in_layer/out_layer) */
            const unsigned char *p = st.data + e->begin;
            int64_t o = t->off; /* gpt2rt__w_set: fp32, or bf16 rounded to nearest even (inference_weights) */
            if (t->transpose) {
                for (int64_t row = 0; row < t->rows; row++)
                    for (int64_t c = 0; c < t->cols; c++)
                        gpt2rt__w_set(ctx, o + row * t->cols + c, gpt2rt__st_get(p, e->dtype, c * t->rows + row));
            } else {
                int64_t n = t->hf_rows * t->cols;
                for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, o + j, gpt2rt__st_get(p, e->dtype, j));
                for (int64_t j = n; j < t->rows * t->cols; j++) gpt2rt__w_set(ctx, o + j, 0.0f);
            }
        }
        gpt2rt__reset_training(ctx);
    }
    gpt2rt__free(&ctx->cfg, (void *)src, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__st_release(ctx, &st);
    return r;
}

/* ---- config.json: the model shape of a Hugging Face GPT-2 directory ---- */

/* buf: len bytes followed by a NUL (gpt2rt__read_file), unescaped in place */
static gpt2rt_result gpt2rt__config_parse_mem(gpt2rt_ctx *ctx, char *buf, size_t len, const char *what,
                                              gpt2rt_config *c) {
    static const char *keys[6] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx"};
    int64_t val[6] = {-1, -1, -1, -1, -1, -1};
    gpt2rt__json j;
    j.p = j.begin = buf;
    j.end = buf + len;
    j.ctx = ctx;
    j.what = what;
    j.kind = "config.json";
    gpt2rt_result r;
    if (!gpt2rt__json_eat(&j, '{')) return gpt2rt__json_fail(&j, "expected '{' (a JSON object)");
    if (!gpt2rt__json_eat(&j, '}')) {
        do {
            const char *key;
            int k = 0;
            if ((r = gpt2rt__json_string(&j, &key)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(&j, ':')) return gpt2rt__json_fail(&j, "expected ':'");
            while (k < 6 && strcmp(key, keys[k])) k++;
            if (k == 6) { if ((r = gpt2rt__json_skip(&j, 1)) != GPT2RT_OK) return r; continue; }
            uint64_t v;
            gpt2rt__json_ws(&j);
            if (j.p < j.end && *j.p == 'n' && k >= 4) { /* null lengths: the other one rules */
                if ((r = gpt2rt__json_skip(&j, 1)) != GPT2RT_OK) return r;
                continue;
            }
            if (val[k] >= 0) return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" appears twice", what, keys[k]);
            if ((r = gpt2rt__json_u64(&j, &v)) != GPT2RT_OK) return r;
            if (v < 1 || v > INT32_MAX)
                return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" = %llu is outside [1, 2^31)", what, keys[k],
                                    (unsigned long long)v);
            val[k] = (int64_t)v;
        } while (gpt2rt__json_eat(&j, ','));
        if (!gpt2rt__json_eat(&j, '}')) return gpt2rt__json_fail(&j, "expected '}' or ','");
    }
    gpt2rt__json_ws(&j);
    if (j.p != j.end) return gpt2rt__json_fail(&j, "text after the object");
    if (val[4] < 0) val[4] = val[5]; /* older files give only n_ctx */
    for (int k = 0; k < 5; k++)
        if (val[k] < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: \"%s\" is missing (a GPT-2 config.json has n_layer, "
                                "n_head, n_embd, vocab_size and n_positions)", what, keys[k]);
    if (val[5] >= 0 && val[5] != val[4])
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: n_positions = %lld but n_ctx = %lld", what,
                            (long long)val[4], (long long)val[5]);
    c->n_layer = (int)val[0];
    c->n_head = (int)val[1];
    c->n_embd = (int)val[2];
    c->vocab_size = (int)val[3];
    c->max_seq_len = (int)val[4];
    return GPT2RT_OK;
}

/* ==== 4.4 Training state ==== */

static gpt2rt_result gpt2rt__upload(gpt2rt_ctx *ctx, const float *m, const float *v); /* 10: the backend's */

/* weights, moments, step and RNG in one safetensors file */

static gpt2rt_result gpt2rt__state_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    const char *fmt = gpt2rt__st_meta(&st, "format");
    /* frozen: the moments cover the trained parameters only (absent: nothing frozen) */
    /* patch models: their shape too (absent in a token state: 0); and their objective:
       head and attn_mask (NEXT_PATCH and PATCH_DECODE have the same tensors, so only these
       tell a stage-1 state from a stage-2 one; absent in states written before them: not
       checked) */
    const char *keys[15] = {"n_layer", "n_head", "n_embd", "vocab_size", "padded_vocab", "max_seq_len", "frozen",
                            "seq_len", "patch_len", "patch_stride", "n_channels", "horizon", "revin_affine",
                            "head", "attn_mask"};
    int64_t want[15] = {d->L, d->NH, d->C, d->V, d->Vp, d->P, (int64_t)ctx->cfg.frozen,
                        d->patches ? ctx->cfg.seq_len : 0, d->PL, d->PS, d->patches ? d->M : 0, d->H, d->affine,
                        (int64_t)ctx->cfg.head, (int64_t)ctx->cfg.attn_mask};
    static const char *const enum_names[2][4] = {{" (LM)", " (REGRESSION)", " (NEXT_PATCH)", " (PATCH_DECODE)"},
                                                 {" (CAUSAL)", " (PLACEHOLDERS)", "", ""}};
    const gpt2rt__st_tensor *e[3] = {gpt2rt__st_find(&st, "params"), gpt2rt__st_find(&st, "adam_m"),
                                     gpt2rt__st_find(&st, "adam_v")};
    const char *step_s = gpt2rt__st_meta(&st, "step"), *rng_s = gpt2rt__st_meta(&st, "rng");
    if (!fmt || strcmp(fmt, "gpt2rt-state-1"))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a gpt2rt training state (metadata format is '%s', "
                         "expected 'gpt2rt-state-1')", what, fmt ? fmt : "(none)");
    for (int i = 0; i < 15 && r == GPT2RT_OK; i++) {
        const char *s = gpt2rt__st_meta(&st, keys[i]);
        if (i >= 13 && !s) continue;
        if (i >= 6 && !s) s = "0";
        long long got = -1; /* read below only when parsed; -1 names nothing */
        int named = i >= 13 && want[i] >= 0 && want[i] < (i == 13 ? 4 : 2);
        if (!gpt2rt__parse_int(s, 0, INT64_MAX, &got) || got != want[i])
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: the state has %s = %s%s, this context has %lld%s%s", what,
                             keys[i], s ? s : "(missing)",
                             named && got >= 0 && got < (i == 13 ? 4 : 2) ? enum_names[i - 13][got] : "",
                             (long long)want[i], named ? enum_names[i - 13][want[i]] : "",
                             i == 13 ? " (a stage-1 state starts stage 2 through the weights: gpt2rt_weights_load)" : "");
    }
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++)
        if (!e[i] || e[i]->dtype != GPT2RT__F32 || e[i]->ndim != 1 || e[i]->shape[0] != (i ? ctx->n_train : ctx->n_params))
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' must be F32 of shape (%lld)%s", what,
                             i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v",
                             (long long)(i ? ctx->n_train : ctx->n_params), e[i] ? "" : " and is missing");
    /* one bad number here poisons every weight at the next update */
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++) {
        const unsigned char *p = st.data + e[i]->begin;
        for (int64_t j = 0; j < e[i]->shape[0]; j++) {
            float x;
            memcpy(&x, p + 4 * j, 4);
            if (!isfinite(x) || (i == 2 && x < 0.0f)) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: %s", what,
                                 i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v", (long long)j, (double)x,
                                 i == 2 ? "the second moment must be finite and >= 0" : "it must be finite");
                break;
            }
        }
    }
    long long step = 0;
    uint64_t rng = 0;
    char *end = NULL;
    if (r == GPT2RT_OK && !gpt2rt__parse_int(step_s, 0, (long long)1 << 62, &step))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata step = '%s' is not an integer in [0, 2^62]", what,
                         step_s ? step_s : "(missing)");
    if (r == GPT2RT_OK) {
        errno = 0;
        if (rng_s && *rng_s >= '0' && *rng_s <= '9') rng = strtoull(rng_s, &end, 10);
        if (!rng_s || !end || *end || errno)
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata rng = '%s' is not an unsigned 64-bit integer",
                             what, rng_s ? rng_s : "(missing)");
    }
    if (r == GPT2RT_OK) {
        gpt2rt__reset_training(ctx);
        memcpy(ctx->params, st.data + e[0]->begin, (size_t)ctx->n_params * 4);
        /* every data-parallel rank's (ZeRO-1: each rank its shard; CUDA: on the devices) */
        r = gpt2rt__upload(ctx, (const float *)(const void *)(st.data + e[1]->begin),
                           (const float *)(const void *)(st.data + e[2]->begin));
        ctx->step = step;
        ctx->rng = rng;
    }
    gpt2rt__st_release(ctx, &st);
    return r;
}

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

#ifndef GPT2RT_NO_TOKENIZER
enum { GPT2RT__TOK_OTHER = 0, GPT2RT__TOK_LETTER = 1, GPT2RT__TOK_NUMBER = 2, GPT2RT__TOK_SPACE = 3 };
#define GPT2RT__TOK_MAX_VOCAB 65536     /* ids fit uint16, like llm.c's token files */
#define GPT2RT__TOK_CACHE_BITS 15       /* 32768 pieces, 2 MiB */
#define GPT2RT__TOK_CACHE_KEY 32        /* bytes of the longest cached piece */
#define GPT2RT__TOK_CACHE_IDS 13        /* ids of the longest cached piece */
#define GPT2RT__TOK_EOT_TEXT "<|endoftext|>"
#define GPT2RT__SHARD_MAGIC 20240520
#define GPT2RT__SHARD_HEADER 256        /* int32 */

/* BEGIN generated by tools/gen_unicode_tables.py: do not edit */
/* Unicode 15.0.0: 1561 class boundaries (UnicodeData.txt, PropList.txt) */
#define GPT2RT__TOK_UCD_COUNT 1561
static const char gpt2rt__tok_ucd[] =
    "nBUrCE+BoBdoDZoDrBErDElBEeIFEOFEGMF8CF8DFo5BRwB5BUdEFElQUFIJQFEZEFMFEFwCFsKFsRhB4UF4EJEZkF9IsDRQ"
    "1FsF2CoBRIFsMFE9BIdKpBMJEhCEF4D1DkLtBE6BpBkElBIREV4CRElBENE9CkDdsBVgDFYlCoFpH4GNEpCEdoBSoBFgCRgB"
    "JIJ4CFcFENQNEhCE1BIFMSpBIKYJEhBYRIJ4CFcFIFIFI9DQFEeoBJMhCkBFMF4CFcFIFUNEpCE9BISoBlBEtBgBJIJ4CFcF"
    "IFUNE5DIFMSoBFGYtBEFYNMFQNIFEFININMNwB5CE2C0BpCgBFMF8CFgCNEpDMJEJISoBiBcFERgBFMF8CFoBFUNE9DIFISo"
    "BFIlCkBFMFkFJEhCEVMGdMSsCFYVoCNgDFkBFEJc+DoBlCgGFIxBcmBoB9EIFEFUFgDFEFoBFIlBEJUFEmBoBJQhEE+DwCxB"
    "gBFwEtDUtOsFxCGoBZYRQNENIdMR0BxBEGoBZ4EFEVEJsFF0pBFQJcFEFQJkFFQJkEFQJcFEFQJ8BFkHFQJsI6BwCNgChC4K"
    "JYNwtCJnCFoDVsJONgBdoC1BsC5BoC5B0BFM9BwGtEEREOoBaoB6CoBZkLdUJoEFEV4IpB8D+EpB4DJUtBwFRoDasB1E8ClB"
    "0GuFoBaoB1BE1L8FlCgBOoBlF4D1BKpBwFpDwEyDoBNOpBwEJkBdsFJMlFQFYFINEVgYhI4iBJYJ4EJYJgBFEFEFEF8DJ0GF"
    "cFENMFcNQJYR0BVMFcPsB3DIXE/FEiCFEKYVGoBZ0B1MEREJoBFENUZEFEFEFQFsBJQVUREGtGKU66CwH6J4C6uC4DxtE0cZ"
    "QNImBEJ4EFEVEJgHdEhC8ClBcFcFcFcFcFcFcFchKEj6BERKEmDkBdUKNIR4KZMFoLFQVsFF4LOQpBgEhGgCiEoB6DgBG8Bi"
    "EoB+E8BhoBg4ZhI0x2CtI4FJ0hBNiCpBIxC8FhC8DJ6IoB9EkBJ8MJgIVIFEFUhDgCFMFQF8C2BYpBwG5BoGyDoBhDYNEFIG"
    "pBwDpB8ClD0Dd8FxDGoBZUFqBpBUFkF9CMFgBSoBZ8CNENoGFENIJUJEFEhDMJsBdMxBYJYJYlBcFcFsFF4BZsO2BoBZw0rB"
    "xB8CRkGxghB4tBJoN5EcxBUVEFoBF0BFUFEFIFIFwNlEstBpCgIJ4GhFwBxOUF8QuCoBdoDZoDtBkLNYJYJYJMtEwBFoDFsC"
    "FIF8BJ4BpEsPyB0FyBkHmCIxe0DNkGiCsDRiEQlByCFiBEV4EpB4DJwERgBGUpF4TKoBZwERwERgFhBwGxBsBF8BFcFIFsBF"
    "8BFcFItI8mBlB4CpBgBhDYFoFFkB1IYJEFwFFINEJ8CKhB8CKd8DiBkBhGsCFIWV6CYRoD5IgHSJKgCK5FE9BQFMF0DqBkB9"
    "C2DIF2DMhEgBFwDaUhC4GpB4CKhBsCWhBoC+CchKkJ9GsG1BsGeZwEyBoB6kB8DFoFZI5J2DpBEhB4CuBQtDoC5F2CcxC8Cx"
    "B0GqD4DFIJE1B0FhEkDeoBlBwE+BoBREJEhBsENExBgG5BQuBpBEFESwCtBoCFkDtCI9HcFEFQF8BFoBd8FmCoBtBgBJIJ4C"
    "FcFIFUNEpCExBU5T0GpCQWoBVM5DgGxCIFEiBoB5U8FlFQxEgGxCEuBoB5EsF1BEeoB5GsD2CwBRclXwFxOiIsCxBgBJEJgB"
    "FIFgD9BEFE6BoB5IgBJ8EhCEFExDEpBgFdE1CEtB4FtCEpCkJ9gBkBF0ElCE+B0DV4DhOcFIF4E1CEmBoBZYFIFgE5BEeoB5"
    "mBsC9BEF0BFoEyDoB5KE+B0CtFozD6M8NlCwYxpKkM9BgmElCYl3P8oCl3hBknCd8DGoBZ8JGoBZ4DpCgGhCQyBoBGcF0CVs"
    "Ch2CiI8ClNsJVEpI0BhIIFExDg/XhB46EpFkB98iBQFcFIFskB9BE1DMJE5BQhBwxBxgJsNV0BNkBdoB6kWwCyBwCyNkD9Q0"
    "KF8IFIJEJIJQFwBFEFcFkIFQJgBFcFwDFQFUFENcFwqBJkDFkDF8DFkDF8DFkDF8DFkDF8DFkDFgBKoGhgH8DZY1gB4HpS0F"
    "pBcKoBREloB4DpCwFSoB56BwDSoB58CcFQFIF8BF0YKkBhGwIdESoB+iDsHGMGQyJ0FG8BpYQFsDFIFEJEFoBFQFEFEZEREF"
    "EFEFMFIFEJEFEFEFEFEFIFEJQFcFQFQFEFoBFkCVMFUFkCyoC0Bu8KoB5gEg8mFhEonQZ4bJowW5Bkmd9jM4jCp8FspTVgsQ";
/* END generated */

typedef struct gpt2rt__tok_merge {
    uint32_t left, right; /* token ids; left == UINT32_MAX: empty slot */
    int32_t rank, id;     /* position in the merges, the merged token */
} gpt2rt__tok_merge;

typedef struct gpt2rt__tok_cache_entry {
    uint32_t hash;
    uint8_t len, n; /* len 0: empty */
    uint16_t ids[GPT2RT__TOK_CACHE_IDS];
    unsigned char key[GPT2RT__TOK_CACHE_KEY];
} gpt2rt__tok_cache_entry;

struct gpt2rt_tokenizer {
    int failed;           /* the load failed: only error is meaningful */
    char error[512];
    int32_t n_vocab;      /* ids [0, n_vocab) */
    int32_t n_merges;
    int32_t eot;          /* <|endoftext|>, -1: none */
    int32_t byte_id[256]; /* the token of each single byte */
    uint32_t *tok_off;    /* (n_vocab + 1) offsets into tok_bytes */
    unsigned char *tok_bytes;
    int32_t *merges;      /* (n_merges, 2) left, right in rank order (for the compact copy) */
    gpt2rt__tok_merge *mtab; /* open addressing, mmask + 1 slots */
    uint32_t mmask;
    uint8_t *cls_bmp;     /* (65536) class of every BMP code point */
    uint32_t *ucd;        /* (GPT2RT__TOK_UCD_COUNT) cp << 2 | class where the class changes */
    gpt2rt__tok_cache_entry *cache;
    /* BPE scratch for one piece, grown on demand */
    size_t cap;
    int32_t *ids, *next, *prev;
    uint64_t *heap;       /* (3 * cap) rank << 32 | position */
};

struct gpt2rt_shard {
    int failed;
    char error[512];
    uint16_t *tokens;
    int64_t n;
};

/* ==== 5.1 Unicode classes ==== */

static int gpt2rt__tok_ucd_decode(uint32_t *out) {
    int8_t val[128];
    const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(val, -1, sizeof val);
    for (int i = 0; i < 64; i++) val[(int)abc[i]] = (int8_t)i;
    uint32_t cp = 0;
    int n = 0;
    for (const char *p = gpt2rt__tok_ucd; *p && n < GPT2RT__TOK_UCD_COUNT;) {
        uint32_t v = 0;
        int shift = 0, d;
        do {
            if (!*p || shift > 25) return 0;
            d = val[(unsigned char)*p++ & 127];
            if (d < 0) return 0;
            v |= (uint32_t)(d & 31) << shift;
            shift += 5;
        } while (d & 32);
        cp += v >> 2;
        out[n++] = cp << 2 | (v & 3);
    }
    return n == GPT2RT__TOK_UCD_COUNT && cp < 0x110000;
}

static int gpt2rt__tok_ucd_class(const uint32_t *ucd, uint32_t cp) {
    /* the last boundary at or below cp */
    int lo = 0, hi = GPT2RT__TOK_UCD_COUNT; /* ucd[lo-1] <= cp < ucd[hi] in code points */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((ucd[mid] >> 2) <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo ? (int)(ucd[lo - 1] & 3) : (int)GPT2RT__TOK_OTHER;
}

/* the class of the code point at s[0] (n >= 1 bytes left) and its length in
   bytes; a byte that does not start valid UTF-8 is "other", 1 byte long */
static int gpt2rt__tok_class(const gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int *w) {
    uint32_t c = s[0], cp;
    if (c < 0x80) { *w = 1; return t->cls_bmp[c]; }
    *w = 1;
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        *w = 2;
        return t->cls_bmp[(c & 31) << 6 | (s[1] & 63)];
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) return GPT2RT__TOK_OTHER; /* overlong, surrogate */
        *w = 3;
        return t->cls_bmp[(c & 15) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63)];
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)) return GPT2RT__TOK_OTHER; /* overlong, > U+10FFFF */
        *w = 4;
        cp = (c & 7) << 18 | (uint32_t)(s[1] & 63) << 12 | (uint32_t)(s[2] & 63) << 6 | (s[3] & 63);
        return gpt2rt__tok_ucd_class(t->ucd, cp);
    }
    return GPT2RT__TOK_OTHER;
}

/* the end of the piece that starts at s[i], s[0..n) one segment (no special token) */
static size_t gpt2rt__tok_piece_end(const gpt2rt_tokenizer *t, const unsigned char *s, size_t i, size_t n) {
    int w, k;
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd, case-sensitive like GPT-2 */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t j = i;
    k = gpt2rt__tok_class(t, s + i, n - i, &w);
    if (s[i] == ' ' && i + 1 < n) { /* ' ?' before a letter, number or other run */
        int w2, k2 = gpt2rt__tok_class(t, s + i + 1, n - i - 1, &w2);
        if (k2 != GPT2RT__TOK_SPACE) { k = k2; w = w2; j = i + 1; }
    }
    if (k != GPT2RT__TOK_SPACE) {
        j += (size_t)w;
        while (j < n) {
            if (s[j] < 0x80) { /* ASCII without a call */
                if ((int)t->cls_bmp[s[j]] != k) break;
                j++;
                continue;
            }
            if (gpt2rt__tok_class(t, s + j, n - j, &w) != k) break;
            j += (size_t)w;
        }
        return j;
    }
    /* a whitespace run: \s+(?!\S) keeps its last code point for the next piece
       (where " x" takes the space) unless the run ends the text or is 1 long */
    size_t last = i;
    j = i + (size_t)w;
    while (j < n && gpt2rt__tok_class(t, s + j, n - j, &w) == GPT2RT__TOK_SPACE) { last = j; j += (size_t)w; }
    if (j == n || last == i) return j;
    return last;
}

/* ==== 5.2 Merges: (left, right) -> rank and merged id ==== */

static uint32_t gpt2rt__tok_pair_hash(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static const gpt2rt__tok_merge *gpt2rt__tok_find(const gpt2rt_tokenizer *t, uint32_t a, uint32_t b) {
    for (uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;; h = (h + 1) & t->mmask) {
        const gpt2rt__tok_merge *m = &t->mtab[h];
        if (m->left == a && m->right == b) return m;
        if (m->left == UINT32_MAX) return NULL;
    }
}

/* 1: added, 0: the pair is already there */
static int gpt2rt__tok_add_merge(gpt2rt_tokenizer *t, uint32_t a, uint32_t b, int32_t rank, int32_t id) {
    uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;
    while (t->mtab[h].left != UINT32_MAX) {
        if (t->mtab[h].left == a && t->mtab[h].right == b) return 0;
        h = (h + 1) & t->mmask;
    }
    gpt2rt__tok_merge m = {a, b, rank, id};
    t->mtab[h] = m;
    t->merges[2 * rank] = (int32_t)a;
    t->merges[2 * rank + 1] = (int32_t)b;
    return 1;
}

/* ==== 5.3 BPE of one piece ==== */

static int gpt2rt__tok_scratch(gpt2rt_tokenizer *t, size_t n) {
    if (n <= t->cap) return 1;
    size_t c = n < 256 ? 256 : n + n / 2;
    if (c > SIZE_MAX / (3 * sizeof(uint64_t))) return 0;
    int32_t *ids = (int32_t *)realloc(t->ids, c * sizeof(int32_t));
    if (ids) t->ids = ids;
    int32_t *nx = (int32_t *)realloc(t->next, c * sizeof(int32_t));
    if (nx) t->next = nx;
    int32_t *pv = (int32_t *)realloc(t->prev, c * sizeof(int32_t));
    if (pv) t->prev = pv;
    uint64_t *hp = (uint64_t *)realloc(t->heap, 3 * c * sizeof(uint64_t));
    if (hp) t->heap = hp;
    if (!ids || !nx || !pv || !hp) return 0;
    t->cap = c;
    return 1;
}

static void gpt2rt__tok_heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && heap[(i - 1) / 2] > v) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = v;
}

static uint64_t gpt2rt__tok_heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--*n];
    size_t i = 0, m = *n;
    while (2 * i + 1 < m) {
        size_t c = 2 * i + 1;
        if (c + 1 < m && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= v) break;
        heap[i] = heap[c];
        i = c;
    }
    if (m) heap[i] = v;
    return top;
}

/* pushes the pair that starts at node i, if it merges */
static void gpt2rt__tok_push_pair(gpt2rt_tokenizer *t, size_t *hn, int32_t i) {
    if (i < 0 || t->next[i] < 0) return;
    const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
    if (m) gpt2rt__tok_heap_push(t->heap, hn, (uint64_t)m->rank << 32 | (uint32_t)i);
}

/* the ids of piece s[0..n), n >= 1, into t->ids (returns how many); -1: no memory.
   Node i starts as byte i; a merge keeps the left node, so node order is text order
   and (rank, left node) orders the heap as GPT-2 chooses: lowest rank, leftmost. */
static int64_t gpt2rt__tok_bpe(gpt2rt_tokenizer *t, const unsigned char *s, size_t n) {
    if (n > INT32_MAX || !gpt2rt__tok_scratch(t, n)) return -1;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        t->ids[i] = t->byte_id[s[i]];
        t->prev[i] = (int32_t)i - 1;
        t->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) gpt2rt__tok_push_pair(t, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = gpt2rt__tok_heap_pop(t->heap, &hn);
        int32_t i = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        /* stale entries: node i was merged away (ids[i] < 0) or its pair changed */
        if (t->ids[i] < 0 || t->next[i] < 0) continue;
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
        if (!m || m->rank != rank) continue;
        int32_t j = t->next[i];
        t->ids[i] = m->id;
        t->ids[j] = -1;
        t->next[i] = t->next[j];
        if (t->next[j] >= 0) t->prev[t->next[j]] = i;
        gpt2rt__tok_push_pair(t, &hn, t->prev[i]);
        gpt2rt__tok_push_pair(t, &hn, i);
    }
    int64_t k = 0;
    for (int32_t i = 0; i >= 0; i = t->next[i]) t->ids[k++] = t->ids[i];
    return k;
}

/* ==== 5.4 Loading, encoding, decoding ==== */

static gpt2rt_tokenizer *gpt2rt__tok_new(void) {
    gpt2rt_tokenizer *t = (gpt2rt_tokenizer *)calloc(1, sizeof(gpt2rt_tokenizer));
    if (t) t->eot = -1;
    return t;
}

/* tables every tokenizer needs; vocabulary size known */
static gpt2rt_result gpt2rt__tok_alloc(gpt2rt_tokenizer *t, int32_t n_vocab, int32_t n_merges, size_t n_bytes) {
    uint32_t slots = 64;
    while (slots < 2u * (uint32_t)n_merges + 2) slots *= 2;
    t->n_vocab = n_vocab;
    t->n_merges = n_merges;
    t->mmask = slots - 1;
    t->tok_off = (uint32_t *)calloc((size_t)n_vocab + 1, sizeof(uint32_t));
    t->tok_bytes = (unsigned char *)malloc(n_bytes ? n_bytes : 1);
    t->merges = (int32_t *)malloc(2 * (size_t)n_merges * sizeof(int32_t) + 1);
    t->mtab = (gpt2rt__tok_merge *)malloc(slots * sizeof(gpt2rt__tok_merge));
    t->cls_bmp = (uint8_t *)malloc(65536);
    t->ucd = (uint32_t *)malloc(GPT2RT__TOK_UCD_COUNT * sizeof(uint32_t));
    t->cache = (gpt2rt__tok_cache_entry *)calloc((size_t)1 << GPT2RT__TOK_CACHE_BITS, sizeof(gpt2rt__tok_cache_entry));
    if (!t->tok_off || !t->tok_bytes || !t->merges || !t->mtab || !t->cls_bmp || !t->ucd || !t->cache)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %d tokens and %d merges",
                               (int)n_vocab, (int)n_merges);
    for (uint32_t i = 0; i < slots; i++) t->mtab[i].left = UINT32_MAX;
    if (!gpt2rt__tok_ucd_decode(t->ucd))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "tokenizer: the embedded Unicode table is corrupt");
    for (uint32_t cp = 0, k = 0; cp < 65536; cp++) {
        while (k < GPT2RT__TOK_UCD_COUNT && (t->ucd[k] >> 2) <= cp) k++;
        t->cls_bmp[cp] = (uint8_t)(k ? t->ucd[k - 1] & 3 : (uint32_t)GPT2RT__TOK_OTHER);
    }
    return GPT2RT_OK;
}

/* GPT-2's bytes_to_unicode: byte -> the code point that stands for it in the
   vocabulary files; bytes 33..126, 161..172, 174..255 stand for themselves, the
   rest get 256, 257, ... in byte order. The ids of the byte tokens follow the
   same order (the bytes that stand for themselves first). */
static void gpt2rt__tok_byte_order(uint32_t cp_of[256], int order[256]) {
    int k = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) { cp_of[b] = (uint32_t)b; order[k++] = b; }
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) { cp_of[b] = 256u + (uint32_t)extra++; order[k++] = b; }
}

static void gpt2rt__tok_finish(gpt2rt_tokenizer *t) {
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok_off[id + 1] - t->tok_off[id] == 1 && id != t->eot && t->byte_id[t->tok_bytes[t->tok_off[id]]] < 0)
            t->byte_id[t->tok_bytes[t->tok_off[id]]] = id;
}

/* the compact copy: "GPT2RTBP", u32 version 1, u32 merges M, u32 eot id (256 + M,
   or 0xFFFFFFFF: none), then M x (u16 left, u16 right); little endian */
static gpt2rt_result gpt2rt__tok_load_compact(gpt2rt_tokenizer *t, const unsigned char *p, size_t len) {
    if (len < 20 || memcmp(p, "GPT2RTBP", 8))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %zu bytes that do not start with "
                               "\"GPT2RTBP\" (not a file gpt2rt_tok_save wrote)", len);
    uint32_t ver, m, eot;
    memcpy(&ver, p + 8, 4);
    memcpy(&m, p + 12, 4);
    memcpy(&eot, p + 16, 4);
    if (ver != 1) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: version %u, expected 1", ver);
    if (m > GPT2RT__TOK_MAX_VOCAB - 257)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges, at most %d fit uint16 ids",
                               m, GPT2RT__TOK_MAX_VOCAB - 257);
    if (len != 20 + 4 * (size_t)m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges need %zu bytes, the file has %zu",
                               m, 20 + 4 * (size_t)m, len);
    if (eot != UINT32_MAX && eot != 256 + m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: <|endoftext|> id %u, expected %u (after "
                               "the %u merged tokens) or none", eot, 256 + m, m);
    int32_t n_vocab = 256 + (int32_t)m + (eot != UINT32_MAX);
    /* token lengths first, to size the byte table */
    uint32_t *lens = (uint32_t *)malloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    if (!lens) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "compact vocabulary: out of memory");
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (i < 256) lens[i] = 1;
        else if (i == (int32_t)eot) lens[i] = (uint32_t)(sizeof(GPT2RT__TOK_EOT_TEXT) - 1);
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            if (a >= i || b >= i) { /* a merge can only join tokens that exist before it */
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d joins tokens %u and %u, "
                                       "but only ids below %d exist before it", (int)(i - 256), a, b, (int)i);
            }
            lens[i] = lens[a] + lens[b];
            if (lens[i] > (1u << 20)) {
                uint32_t l = lens[i];
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d makes a token of %u "
                                       "bytes (at most 2^20)", (int)(i - 256), l);
            }
        }
        total += lens[i];
    }
    gpt2rt_result r = total > UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: tokens of "
                                                           "%zu bytes in all (at most 2^32)", total)
                                         : gpt2rt__tok_alloc(t, n_vocab, (int32_t)m, total);
    if (r != GPT2RT_OK) { free(lens); return r; }
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    uint32_t off = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->tok_off[i] = off;
        if (i < 256) t->tok_bytes[off] = (unsigned char)order[i];
        else if (i == (int32_t)eot) { t->eot = i; memcpy(t->tok_bytes + off, GPT2RT__TOK_EOT_TEXT, lens[i]); }
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            memcpy(t->tok_bytes + off, t->tok_bytes + t->tok_off[a], lens[a]);
            memcpy(t->tok_bytes + off + lens[a], t->tok_bytes + t->tok_off[b], lens[b]);
            if (!gpt2rt__tok_add_merge(t, a, b, i - 256, i)) {
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d repeats the pair "
                                       "(%u, %u)", (int)(i - 256), a, b);
            }
        }
        off += lens[i];
    }
    t->tok_off[n_vocab] = off;
    free(lens);
    gpt2rt__tok_finish(t);
    return GPT2RT_OK;
}

/* one code point of valid UTF-8 at s[0..n): its length, 0 if invalid */
static int gpt2rt__tok_utf8(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || n < (size_t)len) return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 63);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v < 0xE000))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF))) return 0;
    *cp = v;
    return len;
}

static uint32_t gpt2rt__tok_hash_bytes(const unsigned char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* what the vocabulary files give before the tables are built */
typedef struct gpt2rt__tok_files {
    unsigned char *bytes; /* every entry's bytes, back to back */
    size_t n_bytes, cap_bytes;
    uint32_t *off, *len;  /* per entry */
    int32_t *id;
    int32_t n, cap;
    int32_t *slot;        /* bytes -> entry, open addressing */
    uint32_t smask;
    int byte_of[324];     /* code point of the vocabulary alphabet -> byte, -1: not one */
} gpt2rt__tok_files;

static void gpt2rt__tok_files_free(gpt2rt__tok_files *f) {
    free(f->bytes); free(f->off); free(f->len); free(f->id); free(f->slot);
}

static int gpt2rt__tok_put_byte(gpt2rt__tok_files *f, unsigned char b) {
    if (f->n_bytes == f->cap_bytes) {
        size_t c = f->cap_bytes ? 2 * f->cap_bytes : 4096;
        unsigned char *nb = (unsigned char *)realloc(f->bytes, c);
        if (!nb) return 0;
        f->bytes = nb;
        f->cap_bytes = c;
    }
    f->bytes[f->n_bytes++] = b;
    return 1;
}

/* the entry with these bytes, -1: none */
static int32_t gpt2rt__tok_lookup(const gpt2rt__tok_files *f, const unsigned char *s, size_t n) {
    for (uint32_t h = gpt2rt__tok_hash_bytes(s, n) & f->smask;; h = (h + 1) & f->smask) {
        int32_t e = f->slot[h];
        if (e < 0) return -1;
        if (f->len[e] == n && !memcmp(f->bytes + f->off[e], s, n)) return e;
    }
}

/* a JSON string at p (after its opening quote) -> bytes through the alphabet,
   appended to f->bytes; *p moves past the closing quote. NULL: fine, else why not */
static const char *gpt2rt__tok_json_key(gpt2rt__tok_files *f, const unsigned char **pp, const unsigned char *end,
                                        uint32_t *bad_cp) {
    const unsigned char *p = *pp;
    while (1) {
        if (p >= end) return "unterminated string";
        uint32_t cp;
        if (*p == '"') { p++; break; }
        if (*p < 0x20) return "control character in a string";
        if (*p == '\\') {
            if (end - p < 2) return "unterminated escape";
            char e = (char)p[1];
            p += 2;
            const char *esc = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(esc, e) : NULL;
            if (k) cp = (unsigned char)val[k - esc];
            else if (e == 'u') {
                uint32_t u[2] = {0, 0};
                int n_u = 1;
                for (int q = 0; q < n_u; q++) {
                    if (q && (end - p < 2 || p[0] != '\\' || p[1] != 'u')) return "lone surrogate";
                    if (q) p += 2;
                    if (end - p < 4) return "bad \\u escape";
                    for (int i = 0; i < 4; i++) {
                        int h = gpt2rt__hex((char)p[i]);
                        if (h < 0) return "bad \\u escape";
                        u[q] = u[q] * 16 + (uint32_t)h;
                    }
                    p += 4;
                    if (!q && u[0] >= 0xD800 && u[0] < 0xDC00) n_u = 2;
                }
                if (n_u == 2 && (u[1] < 0xDC00 || u[1] >= 0xE000)) return "bad surrogate pair";
                if (n_u == 1 && u[0] >= 0xDC00 && u[0] < 0xE000) return "lone surrogate";
                cp = n_u == 2 ? 0x10000 + ((u[0] - 0xD800) << 10) + (u[1] - 0xDC00) : u[0];
            } else return "unknown escape";
        } else {
            int n = gpt2rt__tok_utf8(p, (size_t)(end - p), &cp);
            if (!n) return "invalid UTF-8";
            p += n;
        }
        if (cp >= 324 || f->byte_of[cp] < 0) { *bad_cp = cp; return "a character outside GPT-2's 256 byte characters"; }
        if (!gpt2rt__tok_put_byte(f, (unsigned char)f->byte_of[cp])) return "out of memory";
    }
    *pp = p;
    return NULL;
}

/* encoder.json / vocab.json: {"token": id, ...} with ids 0..n-1, each once */
static gpt2rt_result gpt2rt__tok_parse_vocab(gpt2rt_tokenizer *t, gpt2rt__tok_files *f, const unsigned char *p, size_t len) {
    const unsigned char *begin = p, *end = p + len;
    const char *why = NULL;
    uint32_t bad_cp = UINT32_MAX;
#define GPT2RT__TOK_WS() while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++
    GPT2RT__TOK_WS();
    if (p >= end || *p++ != '{') { why = "expected '{'"; goto fail; }
    GPT2RT__TOK_WS();
    if (p < end && *p == '}') { p++; goto done; }
    while (1) {
        GPT2RT__TOK_WS();
        if (p >= end || *p++ != '"') { why = "expected a string (a token)"; goto fail; }
        if (f->n == GPT2RT__TOK_MAX_VOCAB) { why = "more than 65536 tokens (ids must fit uint16)"; goto fail; }
        if (f->n == f->cap) {
            int32_t c = f->cap ? 2 * f->cap : 1024;
            uint32_t *o = (uint32_t *)realloc(f->off, (size_t)c * 4);
            if (o) f->off = o;
            uint32_t *l = (uint32_t *)realloc(f->len, (size_t)c * 4);
            if (l) f->len = l;
            int32_t *d = (int32_t *)realloc(f->id, (size_t)c * 4);
            if (d) f->id = d;
            if (!o || !l || !d) { why = "out of memory"; goto fail; }
            f->cap = c;
        }
        size_t start = f->n_bytes;
        if ((why = gpt2rt__tok_json_key(f, &p, end, &bad_cp)) != NULL) goto fail;
        if (f->n_bytes == start) { why = "an empty token"; goto fail; }
        if (f->n_bytes - start > (1u << 20)) { why = "a token longer than 2^20 bytes"; goto fail; }
        GPT2RT__TOK_WS();
        if (p >= end || *p++ != ':') { why = "expected ':'"; goto fail; }
        GPT2RT__TOK_WS();
        int64_t v = 0;
        if (p >= end || *p < '0' || *p > '9') { why = "expected a non-negative integer id"; goto fail; }
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (v <= GPT2RT__TOK_MAX_VOCAB) v = v * 10 + (*p - '0');
        if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) { why = "expected an integer id, found a fraction"; goto fail; }
        f->off[f->n] = (uint32_t)start;
        f->len[f->n] = (uint32_t)(f->n_bytes - start);
        f->id[f->n++] = v < GPT2RT__TOK_MAX_VOCAB ? (int32_t)v : GPT2RT__TOK_MAX_VOCAB;
        GPT2RT__TOK_WS();
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { p++; break; }
        why = "expected ',' or '}'";
        goto fail;
    }
done:
    GPT2RT__TOK_WS();
#undef GPT2RT__TOK_WS
    if (p != end) { why = "trailing characters after the object"; goto fail; }
    return GPT2RT_OK;
fail:
    if (bad_cp != UINT32_MAX)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json byte %zu (entry %d): U+%04X is %s",
                               (size_t)(p - begin), (int)f->n, (unsigned)bad_cp, why);
    return gpt2rt__tok_msg(t->error, !strcmp(why, "out of memory") ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_FORMAT,
                           "vocabulary json byte %zu (entry %d): %s", (size_t)(p - begin), (int)f->n, why);
}

/* vocab.bpe / merges.txt: an optional "#version" line, then one "left right" per
   line in the alphabet of the vocabulary, rank = line order */
static gpt2rt_result gpt2rt__tok_load_json(gpt2rt_tokenizer *t, const unsigned char *vj, size_t vlen,
                                           const unsigned char *mg, size_t mlen) {
    gpt2rt__tok_files f;
    memset(&f, 0, sizeof f);
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    for (int i = 0; i < 324; i++) f.byte_of[i] = -1;
    for (int b = 0; b < 256; b++) f.byte_of[cp_of[b]] = b;
    gpt2rt_result r = gpt2rt__tok_parse_vocab(t, &f, vj, vlen);
    int32_t n = f.n, *by_id = NULL, n_merges = 0, rank = 0, line = 0;
    unsigned char *cat = NULL;
    uint32_t slots = 64, o = 0;
    size_t first = 0;
    if (r != GPT2RT_OK) goto out;
    /* ids dense and unique; bytes unique */
    by_id = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    while (slots < 2u * (uint32_t)n) slots *= 2;
    f.slot = (int32_t *)malloc(slots * sizeof(int32_t));
    f.smask = slots - 1;
    if (!by_id || !f.slot) { r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary: out of memory"); goto out; }
    for (int32_t i = 0; i < n; i++) by_id[i] = -1;
    for (uint32_t i = 0; i < slots; i++) f.slot[i] = -1;
    for (int32_t e = 0; e < n; e++) {
        if (f.id[e] >= n) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entry %d: id %d is not below the %d "
                                "entries (ids must be 0..%d, each once)", (int)e, (int)f.id[e], (int)n, (int)n - 1);
            goto out;
        }
        if (by_id[f.id[e]] >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d both have id %d",
                                (int)by_id[f.id[e]], (int)e, (int)f.id[e]);
            goto out;
        }
        by_id[f.id[e]] = e;
        int32_t other = gpt2rt__tok_lookup(&f, f.bytes + f.off[e], f.len[e]);
        if (other >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d (ids %d and %d) are the "
                                "same bytes", (int)other, (int)e, (int)f.id[other], (int)f.id[e]);
            goto out;
        }
        uint32_t h = gpt2rt__tok_hash_bytes(f.bytes + f.off[e], f.len[e]) & f.smask;
        while (f.slot[h] >= 0) h = (h + 1) & f.smask;
        f.slot[h] = e;
    }
    /* count the merges */
    if (mlen >= 8 && !memcmp(mg, "#version", 8)) {
        while (first < mlen && mg[first] != '\n') first++;
    }
    for (size_t i = first; i < mlen;) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) n_merges++;
        i = e + 1;
    }
    if (n_merges > n) {
        r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges: %d merges for %d tokens (each merge makes a token)",
                            (int)n_merges, (int)n);
        goto out;
    }
    if ((r = gpt2rt__tok_alloc(t, n, n_merges, f.n_bytes)) != GPT2RT_OK) goto out;
    for (int32_t id = 0; id < n; id++) {
        int32_t e = by_id[id];
        t->tok_off[id] = o;
        memcpy(t->tok_bytes + o, f.bytes + f.off[e], f.len[e]);
        o += f.len[e];
        if (f.len[e] == sizeof(GPT2RT__TOK_EOT_TEXT) - 1 && !memcmp(f.bytes + f.off[e], GPT2RT__TOK_EOT_TEXT, f.len[e]))
            t->eot = id;
    }
    t->tok_off[n] = o;
    /* the merges themselves */
    line = first ? 1 : 0;
    for (size_t i = first ? first + 1 : 0; i < mlen && rank < n_merges; line++) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) {
            int32_t part[2] = {-1, -1}, ids[3];
            size_t sp = i;
            while (sp < le && mg[sp] != ' ') sp++;
            const char *why = NULL;
            uint32_t bad_cp = UINT32_MAX;
            for (int k = 0; k < 2 && !why; k++) {
                const unsigned char *q = mg + (k ? sp + 1 : i), *qe = mg + (k ? le : sp);
                size_t start = f.n_bytes;
                if (k && sp >= le) { why = "expected two tokens separated by one space"; break; }
                while (q < qe && !why) {
                    uint32_t cp;
                    int w = gpt2rt__tok_utf8(q, (size_t)(qe - q), &cp);
                    if (!w) why = "invalid UTF-8";
                    else if (cp >= 324 || f.byte_of[cp] < 0) { why = "a character outside GPT-2's 256 byte characters"; bad_cp = cp; }
                    else if (!gpt2rt__tok_put_byte(&f, (unsigned char)f.byte_of[cp])) why = "out of memory";
                    q += w;
                }
                if (!why && f.n_bytes == start) why = "expected two tokens separated by one space";
                if (!why && (part[k] = gpt2rt__tok_lookup(&f, f.bytes + start, f.n_bytes - start)) < 0)
                    why = k ? "its second token is not in the vocabulary" : "its first token is not in the vocabulary";
                f.n_bytes = start;
            }
            if (!why) {
                ids[0] = f.id[part[0]];
                ids[1] = f.id[part[1]];
                size_t la = f.len[part[0]], lb = f.len[part[1]];
                cat = (unsigned char *)realloc(cat, la + lb);
                if (!cat) why = "out of memory";
                else {
                    memcpy(cat, f.bytes + f.off[part[0]], la);
                    memcpy(cat + la, f.bytes + f.off[part[1]], lb);
                    int32_t res = gpt2rt__tok_lookup(&f, cat, la + lb);
                    if (res < 0) why = "the merged token is not in the vocabulary";
                    else if (!gpt2rt__tok_add_merge(t, (uint32_t)ids[0], (uint32_t)ids[1], rank, f.id[res]))
                        why = "it repeats an earlier merge";
                }
            }
            if (why) {
                r = !strcmp(why, "out of memory")
                        ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "merges: out of memory")
                    : bad_cp != UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: U+%04X is %s", (int)line + 1,
                                               (unsigned)bad_cp, why)
                             : gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: %s", (int)line + 1, why);
                goto out;
            }
            rank++;
        }
        i = e + 1;
    }
    gpt2rt__tok_finish(t);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary: byte 0x%02X has no token of its own (U+%04X), "
                                "so some text could not be encoded", b, (unsigned)cp_of[b]);
            goto out;
        }
    {   /* Every token but the 256 bytes and <|endoftext|> is made by one merge. A merges
           file cut at a line boundary parses line by line, and would leave tokens no
           merge makes: encoding then gives other ids than GPT-2 (more of them). */
        int32_t special = t->eot >= 0, want = n - 256 - special;
        if (n_merges != want) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges: %d merges, but the vocabulary's %d tokens need %d "
                                "(%d - 256 byte tokens - %d special): the merges file is %s", (int)n_merges, (int)n,
                                (int)want, (int)n, (int)special, n_merges < want ? "cut short (truncated?) or "
                                "another vocabulary's" : "another vocabulary's");
            goto out;
        }
    }
out:
    free(by_id);
    free(cat);
    gpt2rt__tok_files_free(&f);
    return r;
}

/* write to path.tmp, then rename: never a half-written file at path */
static gpt2rt_result gpt2rt__tok_write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                                            char *error) {
    size_t pl = strlen(path);
    char *tmp = (char *)malloc(pl + 5);
    if (!tmp) return gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return r;
    }
    int ok = fwrite(a, 1, alen, fp) == alen && (!blen || fwrite(b, 1, blen, fp) == blen);
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", ok ? path : tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return r;
    }
    free(tmp);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__tok_done(gpt2rt_tokenizer **tok, gpt2rt_tokenizer *t, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        /* keep only the message */
        free(t->tok_off); free(t->tok_bytes); free(t->merges); free(t->mtab); free(t->cls_bmp); free(t->ucd);
        free(t->cache);
        t->tok_off = NULL; t->tok_bytes = NULL; t->merges = NULL; t->mtab = NULL; t->cls_bmp = NULL; t->ucd = NULL;
        t->cache = NULL;
        t->failed = 1;
    }
    *tok = t;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_mem(gpt2rt_tokenizer **tok, const void *vocab_json, size_t vocab_len,
                                             const void *merges, size_t merges_len) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!merges || (vocab_json == NULL && vocab_len))
        return gpt2rt__tok_done(tok, t, gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT,
                                                        "gpt2rt_tok_load_mem: merges is NULL, or vocab_json is NULL with "
                                                        "vocab_len = %zu", vocab_len));
    gpt2rt_result r = vocab_json ? gpt2rt__tok_load_json(t, (const unsigned char *)vocab_json, vocab_len,
                                                         (const unsigned char *)merges, merges_len)
                                 : gpt2rt__tok_load_compact(t, (const unsigned char *)merges, merges_len);
    return gpt2rt__tok_done(tok, t, r);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_files(gpt2rt_tokenizer **tok, const char *vocab_json, const char *merges) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *vb = NULL, *mb = NULL;
    size_t vl = 0, ml = 0;
    char error[512];
    gpt2rt_result r = merges ? GPT2RT_OK : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_load_files: merges is NULL");
    if (r == GPT2RT_OK && vocab_json) r = gpt2rt__tok_read_file(vocab_json, &vb, &vl, error);
    if (r == GPT2RT_OK) r = gpt2rt__tok_read_file(merges, &mb, &ml, error);
    if (r == GPT2RT_OK) {
        r = gpt2rt_tok_load_mem(tok, vb, vl, mb, ml);
        if (r != GPT2RT_OK && *tok) { /* name the files */
            char msg[512];
            if (vocab_json) gpt2rt__tok_msg(msg, r, "%s + %s: %s", vocab_json, merges, (*tok)->error);
            else gpt2rt__tok_msg(msg, r, "%s: %s", merges, (*tok)->error);
            memcpy((*tok)->error, msg, sizeof msg);
        }
    } else {
        gpt2rt_tokenizer *t = gpt2rt__tok_new();
        *tok = t;
        if (t) { memcpy(t->error, error, sizeof error); t->failed = 1; }
    }
    free(vb);
    free(mb);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load(gpt2rt_tokenizer **tok, const char *dir) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    static const char *names[3][2] = {{NULL, "gpt2_merges.bin"}, {"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char p[2][1024];
    if (!dir) dir = ".";
    for (int i = 0; i < 3; i++) {
        struct stat st;
        snprintf(p[1], sizeof p[1], "%s/%s", dir, names[i][1]);
        if (names[i][0]) snprintf(p[0], sizeof p[0], "%s/%s", dir, names[i][0]);
        if (stat(p[1], &st) != 0 || (names[i][0] && stat(p[0], &st) != 0)) continue;
        return gpt2rt_tok_load_files(tok, names[i][0] ? p[0] : NULL, p[1]);
    }
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    t->failed = 1;
    return gpt2rt__tok_msg(t->error, GPT2RT_ERR_IO, "%s: no GPT-2 vocabulary here (looked for gpt2_merges.bin, "
                           "encoder.json + vocab.bpe, vocab.json + merges.txt)", dir);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_save(gpt2rt_tokenizer *t, const char *path) {
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE; /* the message stays the load's: why it failed */
    if (!path) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_save: path is NULL");
    /* the compact form holds only what follows from the merges: check that it does */
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    int ok = t->n_vocab == 256 + t->n_merges + (t->eot >= 0) && (t->eot < 0 || t->eot == 256 + t->n_merges) &&
             t->n_vocab <= GPT2RT__TOK_MAX_VOCAB;
    for (int i = 0; ok && i < 256; i++) ok = t->byte_id[order[i]] == i;
    for (int32_t r = 0; ok && r < t->n_merges; r++) {
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->merges[2 * r], (uint32_t)t->merges[2 * r + 1]);
        ok = m && m->id == 256 + r && t->merges[2 * r] < 256 + r && t->merges[2 * r + 1] < 256 + r;
    }
    if (!ok)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: this vocabulary's ids do not follow from its "
                               "merges (byte tokens in GPT-2's order, merge i -> 256 + i, then <|endoftext|>), so the "
                               "compact form cannot hold it", path);
    size_t n = 20 + 4 * (size_t)t->n_merges;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    uint32_t head[3] = {1, (uint32_t)t->n_merges, t->eot >= 0 ? (uint32_t)t->eot : UINT32_MAX};
    memcpy(buf, "GPT2RTBP", 8);
    memcpy(buf + 8, head, 12);
    for (int32_t r = 0; r < t->n_merges; r++) {
        uint16_t ab[2] = {(uint16_t)t->merges[2 * r], (uint16_t)t->merges[2 * r + 1]};
        memcpy(buf + 20 + 4 * (size_t)r, ab, 4);
    }
    gpt2rt_result res = gpt2rt__tok_write_file(path, buf, n, NULL, 0, t->error);
    free(buf);
    return res;
}

GPT2RT_DEF void gpt2rt_tok_free(gpt2rt_tokenizer *t) {
    if (!t) return;
    gpt2rt__tok_done(&t, t, GPT2RT_ERR_STATE);
    free(t->ids); free(t->next); free(t->prev); free(t->heap);
    free(t);
}

GPT2RT_DEF const char *gpt2rt_tok_last_error(const gpt2rt_tokenizer *t) {
    return t ? t->error : "gpt2rt_tok: no tokenizer (out of memory)";
}

GPT2RT_DEF int32_t gpt2rt_tok_vocab_size(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->n_vocab : 0; }
GPT2RT_DEF int32_t gpt2rt_tok_eot(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->eot : -1; }

GPT2RT_DEF const char *gpt2rt_tok_token(const gpt2rt_tokenizer *t, int32_t id, size_t *len) {
    if (!t || t->failed || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok_off[id + 1] - t->tok_off[id];
    return (const char *)t->tok_bytes + t->tok_off[id];
}

/* the ids of one piece, through the cache; -1: out of memory */
static int gpt2rt__tok_piece(gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids, size_t cap, size_t *k) {
    if (n == 1) {
        if (*k < cap) ids[*k] = t->byte_id[s[0]];
        (*k)++;
        return 0;
    }
    gpt2rt__tok_cache_entry *e = NULL;
    uint32_t h = 0;
    if (n <= GPT2RT__TOK_CACHE_KEY) {
        h = gpt2rt__tok_hash_bytes(s, n);
        e = &t->cache[h >> (32 - GPT2RT__TOK_CACHE_BITS)];
        if (e->hash == h && e->len == n && !memcmp(e->key, s, n)) {
            for (int i = 0; i < e->n; i++, (*k)++)
                if (*k < cap) ids[*k] = e->ids[i];
            return 0;
        }
    }
    int64_t m = gpt2rt__tok_bpe(t, s, n);
    if (m < 0) return -1;
    for (int64_t i = 0; i < m; i++, (*k)++)
        if (*k < cap) ids[*k] = t->ids[i];
    if (e && m <= GPT2RT__TOK_CACHE_IDS) {
        e->hash = h;
        e->len = (uint8_t)n;
        e->n = (uint8_t)m;
        memcpy(e->key, s, n);
        for (int64_t i = 0; i < m; i++) e->ids[i] = (uint16_t)t->ids[i];
    }
    return 0;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_encode(gpt2rt_tokenizer *t, const void *text, size_t len,
                                           gpt2rt_tok_special special, int32_t *ids, size_t cap, size_t *n_ids) {
    if (n_ids) *n_ids = 0;
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE;
    if (!n_ids)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: n_ids is NULL (it receives "
                               "the id count)");
    if (!text && len)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: text is NULL with len = %zu",
                               len);
    if (!ids && cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: ids is NULL with cap = %zu",
                               cap);
    if ((unsigned)special > GPT2RT_TOK_SPECIAL_REFUSE)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: special = %d is not a "
                               "gpt2rt_tok_special", (int)special);
    const unsigned char *s = (const unsigned char *)text;
    const size_t eot_len = sizeof(GPT2RT__TOK_EOT_TEXT) - 1;
    size_t k = 0, seg = 0;
    while (seg < len) {
        /* the segment up to the next <|endoftext|> (when it is special): tiktoken
           and Hugging Face cut the text there before pre-tokenising */
        size_t end = len, after = len;
        if (special != GPT2RT_TOK_SPECIAL_TEXT) {
            for (const unsigned char *q = s + seg; (q = (const unsigned char *)memchr(q, '<', (size_t)(s + len - q))) != NULL; q++)
                if ((size_t)(s + len - q) >= eot_len && !memcmp(q, GPT2RT__TOK_EOT_TEXT, eot_len)) {
                    end = (size_t)(q - s);
                    after = end + eot_len;
                    break;
                }
            if (end < len && special == GPT2RT_TOK_SPECIAL_REFUSE)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is refused "
                                       "(GPT2RT_TOK_SPECIAL_ALLOW encodes it as id %d, _TEXT as ordinary text)", end, (int)t->eot);
            if (end < len && t->eot < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is allowed, "
                                       "but this vocabulary has no such token", end);
        }
        for (size_t i = seg; i < end;) {
            size_t j = gpt2rt__tok_piece_end(t, s + seg, i - seg, end - seg) + seg;
            if (gpt2rt__tok_piece(t, s + i, j - i, ids, cap, &k) < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_tok_encode: out of memory for a piece "
                                       "of %zu bytes at text byte %zu", j - i, i);
            i = j;
        }
        if (after > end) {
            if (k < cap) ids[k] = t->eot;
            k++;
        }
        seg = after;
    }
    *n_ids = k;
    if (k > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: %zu bytes need %zu ids, "
                               "cap = %zu", len, k, cap);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_decode(gpt2rt_tokenizer *t, const int32_t *ids, size_t n, void *out, size_t cap,
                                           size_t *n_bytes) {
    if (n_bytes) *n_bytes = 0;
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (t->failed) return GPT2RT_ERR_STATE;
    if (!n_bytes)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: n_bytes is NULL (it receives "
                               "the length)");
    if (!ids && n)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: ids is NULL with n = %zu", n);
    if (!out && cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: out is NULL with cap = %zu",
                               cap);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: ids[%zu] = %d is not in "
                                   "[0, %d)", i, (int)ids[i], (int)t->n_vocab);
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        if (o + l <= cap) memcpy((unsigned char *)out + o, t->tok_bytes + t->tok_off[ids[i]], l);
        o += l;
    }
    *n_bytes = o;
    if (o > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: %zu ids make %zu bytes, "
                               "cap = %zu", n, o, cap);
    return GPT2RT_OK;
}

/* ==== 5.5 llm.c token shards ==== */

static gpt2rt_result gpt2rt__shard_done(gpt2rt_shard **out, gpt2rt_shard *s, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        free(s->tokens);
        s->tokens = NULL;
        s->n = 0;
        s->failed = 1;
    }
    *out = s;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load_mem(gpt2rt_shard **out, const void *data, size_t len, const char *name) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    const unsigned char *p = (const unsigned char *)data;
    const size_t hb = GPT2RT__SHARD_HEADER * 4;
    if (!name) name = "token shard";
    if (!p && len) return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: data is NULL", name));
    if (len < 12)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header of an llm.c token file (truncated?)", name, len, hb));
    int32_t h[3];
    memcpy(h, p, 12);
    if (h[0] != GPT2RT__SHARD_MAGIC)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: magic %d, not llm.c's token "
                                                          "file magic %d (not a token file?)", name, (int)h[0], GPT2RT__SHARD_MAGIC));
    if (h[1] != 1)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: version %d; only version 1 "
                                                          "(uint16 tokens) is read", name, (int)h[1]));
    if (len < hb)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header (truncated)", name, len, hb));
    if (h[2] < 0)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: header token count %d is "
                                                          "negative", name, (int)h[2]));
    size_t want = hb + 2 * (size_t)h[2];
    if (len != want)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header says %d tokens = "
                                                          "%zu bytes, the file has %zu (%s)", name, (int)h[2], want, len,
                                                          len < want ? "truncated" : "trailing bytes"));
    s->n = h[2];
    s->tokens = (uint16_t *)malloc(s->n ? 2 * (size_t)s->n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %d "
                                                          "tokens", name, (int)h[2]));
    memcpy(s->tokens, p + hb, 2 * (size_t)s->n);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load(gpt2rt_shard **out, const char *path) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *buf;
    size_t len;
    char error[512];
    gpt2rt_result r = path ? gpt2rt__tok_read_file(path, &buf, &len, error)
                           : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_load: path is NULL");
    if (r != GPT2RT_OK) {
        gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
        *out = s;
        if (s) { memcpy(s->error, error, sizeof error); s->failed = 1; }
        return r;
    }
    r = gpt2rt_shard_load_mem(out, buf, len, path);
    free(buf);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_from_tokens(gpt2rt_shard **out, const int32_t *tokens, int64_t n) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (n < 0 || n > INT32_MAX || (!tokens && n))
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                          "n = %lld must lie in [0, 2^31) (the header's int32 count)", (long long)n));
    s->tokens = (uint16_t *)malloc(n ? 2 * (size_t)n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_shard_from_tokens: out "
                                                          "of memory for %lld tokens", (long long)n));
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535)
            return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                              "tokens[%lld] = %d does not fit uint16", (long long)i, (int)tokens[i]));
        s->tokens[i] = (uint16_t)tokens[i];
    }
    s->n = n;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_save(gpt2rt_shard *s, const char *path) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    if (!path) return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_save: path is NULL");
    int32_t h[GPT2RT__SHARD_HEADER];
    memset(h, 0, sizeof h);
    h[0] = GPT2RT__SHARD_MAGIC;
    h[1] = 1;
    h[2] = (int32_t)s->n;
    return gpt2rt__tok_write_file(path, h, sizeof h, s->tokens, 2 * (size_t)s->n, s->error);
}

GPT2RT_DEF void gpt2rt_shard_free(gpt2rt_shard *s) {
    if (!s) return;
    free(s->tokens);
    free(s);
}

GPT2RT_DEF const char *gpt2rt_shard_last_error(const gpt2rt_shard *s) {
    return s ? s->error : "gpt2rt_shard: no shard (out of memory)";
}
GPT2RT_DEF int64_t gpt2rt_shard_count(const gpt2rt_shard *s) { return s && !s->failed ? s->n : 0; }
GPT2RT_DEF const uint16_t *gpt2rt_shard_tokens(const gpt2rt_shard *s) { return s && !s->failed ? s->tokens : NULL; }


GPT2RT_DEF gpt2rt_result gpt2rt_shard_batch(gpt2rt_shard *s, uint64_t seed, int64_t step, int rank, int n_ranks, int B,
                                            int T, int32_t *inputs, int32_t *targets) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    if (!inputs || !targets)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: %s is NULL",
                               !inputs ? "inputs" : "targets");
    if (B < 1 || T < 1 || n_ranks < 1 || rank < 0 || rank >= n_ranks || step < 0)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: B = %d and T = %d must be >= 1, "
                               "rank = %d in [0, n_ranks = %d), step = %lld >= 0", B, T, rank, n_ranks, (long long)step);
    int64_t windows = s->n > 0 ? (s->n - 1) / T : 0, per_step = (int64_t)B * n_ranks;
    if (windows < per_step)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: %lld tokens make %lld windows of "
                               "T+1 = %lld tokens; a step needs B x n_ranks = %d x %d = %lld", (long long)s->n,
                               (long long)windows, (long long)T + 1, B, n_ranks, (long long)per_step);
    /* whole steps per epoch: the windows left over are skipped in that epoch */
    int64_t steps_per_epoch = windows / per_step, epoch = step / steps_per_epoch;
    uint64_t st = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull), key = gpt2rt__rng_next(&st);
    for (int b = 0; b < B; b++) {
        int64_t j = (step % steps_per_epoch) * per_step + (int64_t)rank * B + b;
        int64_t w = (int64_t)gpt2rt__shard_permute((uint64_t)j, (uint64_t)windows, key);
        const uint16_t *src = s->tokens + w * T;
        for (int t = 0; t < T; t++) {
            inputs[(int64_t)b * T + t] = src[t];
            targets[(int64_t)b * T + t] = src[t + 1];
        }
    }
    return GPT2RT_OK;
}
#endif /* GPT2RT_NO_TOKENIZER */

/* ==== 6. Inputs ==== */

/* ==== 6.1 Tokens ==== */

/* inputs (B,T) must lie in [0, vocab_size); targets (B,T), when given, below
   vocab_size (negative: ignored). The message names the first bad one. */
static gpt2rt_result gpt2rt__input_tokens_check(gpt2rt_ctx *ctx, const char *fn, const int32_t *inputs,
                                                const int32_t *targets) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t i = 0; i < d->BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: inputs[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld)", fn, (long long)i, (long long)(i / d->T), (long long)(i % d->T),
                                inputs[i], (long long)d->V);
        if (targets && targets[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: targets[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld) (negative targets are ignored)", fn, (long long)i,
                                (long long)(i / d->T), (long long)(i % d->T), targets[i], (long long)d->V);
    }
    return GPT2RT_OK;
}

/* ==== 6.2 Patches ==== */

/* Continuous series cut into patches (GPT4TS): a window x (Bw,L,M) is M series, each
   instance-normalised over its lookback (RevIN), padded with stride copies of its
   last value and cut into T = n_patches patches; the predictions (B*M,H) of the
   regression head come back to (Bw,H,M) in the original scale; the loss is their
   mean squared error. Series bm = b*M + m is row bm of the transformer's batch. */

/* x (Bw,L,M) and y (Bw,H,M) (may be NULL) must be finite; the message names the first
   bad value by window, step and channel */
static gpt2rt_result gpt2rt__ts_check(gpt2rt_ctx *ctx, const char *fn, const float *x, const float *y) {
    const gpt2rt__dims *d = &ctx->d;
    for (int k = 0; k < 2; k++) {
        const float *v = k ? y : x;
        int64_t steps = k ? d->H : d->Lb, n = d->Bw * steps * d->M;
        for (int64_t i = 0; v && i < n; i++)
            if (!isfinite(v[i]))
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s[%lld] (window %lld, step %lld, channel "
                                    "%lld) is %g; series values must be finite", fn, k ? "y" : "x", (long long)i,
                                    (long long)(i / (steps * d->M)), (long long)(i / d->M % steps),
                                    (long long)(i % d->M), (double)v[i]);
    }
    return GPT2RT_OK;
}

/* patch (B*M*T, PL), mean (B*M), std (B*M) from x (Bw,L,M): RevIN as GPT4TS computes
   it (mean; std = sqrt(biased variance + 1e-5); z = (x - mean) / std in fp32; with
   the affine w (M), b (M): z * w[m] + b[m], and z kept in zs), then patch p of series
   bm holds its normalised steps p*PS .. p*PS+PL-1, steps past the end repeating step
   L-1. Statistics are summed in double in step order. */
/* PATCH_DECODE: the history's patches, then the placeholders (gpt2rt__ts_hist) */
static int64_t gpt2rt__ts_hist(const gpt2rt__dims *d) {
    return d->seqhead == GPT2RT_HEAD_PATCH_DECODE ? d->T - (d->H + d->PL - 1) / d->PL : d->T;
}

static void gpt2rt__ts_revin_patch(float *patch, float *zs, float *mean, float *std, const float *x, const float *w,
                                   const float *b, const gpt2rt__dims *d) {
    int64_t L = d->Lb, M = d->M, T = d->T, PL = d->PL, PS = d->PS, TH = gpt2rt__ts_hist(d);
    GPT2RT__PARALLEL_FOR(d->nt)
    for (int64_t bm = 0; bm < d->B; bm++) {
        const float *xs = x + (bm / M) * L * M + bm % M; /* step t at xs[t*M] */
        double s = 0.0, ss = 0.0;
        for (int64_t t = 0; t < L; t++) s += xs[t * M];
        float mu = (float)(s / (double)L);
        for (int64_t t = 0; t < L; t++) { double c = (double)(xs[t * M] - mu); ss += c * c; }
        float sd = (float)sqrt(ss / (double)L + 1e-5);
        mean[bm] = mu;
        std[bm] = sd;
        for (int64_t p = 0; p < TH; p++)
            for (int64_t k = 0; k < PL; k++) {
                int64_t t = p * PS + k < L ? p * PS + k : L - 1, i = (bm * T + p) * PL + k;
                float z = (xs[t * M] - mu) / sd;
                patch[i] = w ? z * w[bm % M] + b[bm % M] : z;
                if (zs) zs[i] = z;
            }
        /* PATCH_DECODE's placeholders: a zero patch, the series' mean in RevIN's scale,
           in training and at test time alike (aLLM4TS's training embeds the true future,
           which a forecast cannot have); in_layer makes it in_layer.bias, and wpe tells
           the placeholders apart */
        for (int64_t i = (bm * T + TH) * PL; i < (bm + 1) * T * PL; i++) {
            patch[i] = 0.0f;
            if (zs) zs[i] = 0.0f;
        }
    }
}

/* RevIN's affine undone as PatchTST does: (yn - b) / (w + 1e-10) */
#define GPT2RT__TS_AFFINE_EPS 1e-10f

/* pred (Bw,H,M) = yn (B*M,H) * std + mean: the original scale (affine w, b: undone first) */
static void gpt2rt__ts_denorm(float *pred, const float *yn, const float *mean, const float *std, const float *w,
                              const float *b, const gpt2rt__dims *d) {
    int64_t M = d->M, H = d->H;
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) {
            float u = yn[bm * H + h];
            if (w) u = (u - b[bm % M]) / (w[bm % M] + GPT2RT__TS_AFFINE_EPS);
            pred[((bm / M) * H + h) * M + bm % M] = u * std[bm] + mean[bm];
        }
}

/* sum of squared errors of pred against y, both (Bw,H,M), in double in order */
static double gpt2rt__ts_mse_sum(const float *pred, const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) { double e = (double)pred[i] - (double)y[i]; s += e * e; }
    return s;
}

/* dyn (B*M,H) = d(dloss * sum of squared errors) / d(yn), in place over yn: through
   the de-normalisation; with the affine w, b also dw, db (M) += (NULL: frozen), summed
   per channel in double in (window, step) order */
static void gpt2rt__ts_mse_backward(float *dyn, const float *pred, const float *y, const float *std, const float *w,
                                    const float *b, float *dw, float *db, float dloss, const gpt2rt__dims *d) {
    int64_t M = d->M, H = d->H;
    for (int64_t m = 0; m < M; m++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t bw = 0; bw < d->Bw; bw++)
            for (int64_t h = 0; h < H; h++) {
                int64_t bm = bw * M + m, i = (bw * H + h) * M + m;
                float du = 2.0f * (pred[i] - y[i]) * dloss * std[bm];
                if (!w) { dyn[bm * H + h] = du; continue; }
                float inv = 1.0f / (w[m] + GPT2RT__TS_AFFINE_EPS), u = (dyn[bm * H + h] - b[m]) * inv;
                dyn[bm * H + h] = du * inv;
                sw -= (double)du * inv * u; /* d/dw of (yn - b) / (w + eps) = -u / (w + eps) */
                sb -= (double)du * inv;
            }
        if (dw) { dw[m] += (float)sw; db[m] += (float)sb; }
    }
}

/* the affine's input side: dw, db (M) += from dpatch (BT,PL), the gradient of
   z * w + b, with zs (BT,PL) the patches' z; each patch element counts once, padded
   copies included (the chain rule through the padding); summed per channel in
   double in order */
static void gpt2rt__ts_affine_backward(float *dw, float *db, const float *dpatch, const float *zs, const gpt2rt__dims *d) {
    int64_t M = d->M, n = gpt2rt__ts_hist(d) * d->PL, ld = d->T * d->PL; /* placeholders: no affine */
    for (int64_t m = 0; m < M; m++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t bw = 0; bw < d->Bw; bw++) {
            const float *dp = dpatch + (bw * M + m) * ld, *z = zs + (bw * M + m) * ld;
            for (int64_t i = 0; i < n; i++) { sw += (double)dp[i] * z[i]; sb += dp[i]; }
        }
        dw[m] += (float)sw;
        db[m] += (float)sb;
    }
}

/* ---- aLLM4TS's sequence head (head = NEXT_PATCH, PATCH_DECODE) ----
   out (BT,PL): out_layer at every position. NEXT_PATCH compares position t's output
   with patch t+1 of the same series (t < T-1) in RevIN's scale; PATCH_DECODE reads the
   placeholders' outputs as the normalised forecast yn (B*M,H): placeholder f gives
   steps f*PL .. f*PL+PL-1, the last one cut at H; from there on it is the regression
   head's loss. */

/* the normalised predictions (B*M,H) in the logits arena (gpt2rt__ts_yn_off) */
static float *gpt2rt__ts_yn(const gpt2rt_ctx *ctx) {
    return (float *)(void *)((unsigned char *)ctx->logits + gpt2rt__ts_yn_off(&ctx->d));
}

/* yn (B*M,H) = the placeholders' rows of out (BT,PL) */
static void gpt2rt__ts_decode_gather(float *yn, const float *out, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->PL, H = d->H, TH = gpt2rt__ts_hist(d);
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) yn[bm * H + h] = out[(bm * T + TH + h / PL) * PL + h % PL];
}

/* dout (BT,PL) = dyn (B*M,H) at the placeholders' rows, 0 elsewhere (the history's
   outputs and the cut tail of the last placeholder feed no loss) */
static void gpt2rt__ts_decode_scatter(float *dout, const float *dyn, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->PL, H = d->H, TH = gpt2rt__ts_hist(d);
    memset(dout, 0, (size_t)(d->BT * PL) * sizeof(float));
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) dout[(bm * T + TH + h / PL) * PL + h % PL] = dyn[bm * H + h];
}

/* NEXT_PATCH: sum over series bm, t < T-1, k < PL of (out[bm,t,k] - patch[bm,t+1,k])^2,
   in double in that order */
static double gpt2rt__ts_next_sum(const float *out, const float *patch, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->PL;
    double s = 0.0;
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t i = bm * T * PL; i < ((bm + 1) * T - 1) * PL; i++) {
            double e = (double)out[i] - (double)patch[i + PL];
            s += e * e;
        }
    return s;
}

/* NEXT_PATCH: dout (BT,PL) = d(dloss * gpt2rt__ts_next_sum) / d(out), in place over out;
   the last position of each series predicts nothing (0) */
static void gpt2rt__ts_next_backward(float *out, const float *patch, float dloss, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->PL;
    for (int64_t bm = 0; bm < d->B; bm++) {
        float *o = out + bm * T * PL;
        const float *pt = patch + bm * T * PL;
        for (int64_t i = 0; i < (T - 1) * PL; i++) o[i] = 2.0f * (o[i] - pt[i + PL]) * dloss;
        for (int64_t i = (T - 1) * PL; i < T * PL; i++) o[i] = 0.0f;
    }
}

#ifndef GPT2RT_NO_SERIES
/* ==== 6.3 Series files ==== */

/* ETT-format CSV (a date column, then numeric columns) cut as the Time-Series-Library
   cuts it (thuml/Time-Series-Library, data_provider/data_loader.py: Dataset_ETT_hour,
   Dataset_ETT_minute, Dataset_Custom):
       ETTh:  border1s = [0, 12*30*24 - L, 12*30*24 + 4*30*24 - L]
              border2s = [12*30*24, 12*30*24 + 4*30*24, 12*30*24 + 8*30*24]
       ETTm:  the same times 4
       other: num_train = int(len*0.7), num_test = int(len*0.2),
              num_vali = len - num_train - num_test,
              border1s = [0, num_train - L, len - num_test - L]
              border2s = [num_train, num_train + num_vali, len]
   and __len__ = border2 - border1 - L - H + 1 windows per split. The scaler is fit on
   rows [0, border2s[0]) (sklearn's StandardScaler: population variance; a constant
   column gets scale 1). Dataset_Custom moves the target column last in 'M' mode;
   here every mode keeps the file's order (the MSE over channels does not change).
   The values are parsed with strtod, so the C locale's '.' is the decimal point. */

struct gpt2rt_series {
    int failed;
    char error[512];
    gpt2rt_series_desc desc; /* target not kept (the caller's string) */
    gpt2rt_series_info info;
    float *values;           /* (rows, M) scaled */
    double *mean, *std;      /* (M) */
    char *names;             /* M NUL-terminated column names, one after another */
    char **name;             /* (M) into names */
};

/* one field of a line: [b, e) with surrounding spaces and tabs trimmed */
typedef struct gpt2rt__csv_field { const char *b, *e; } gpt2rt__csv_field;

static const char *gpt2rt__csv_trim(const char **b, const char *e) {
    while (*b < e && (**b == ' ' || **b == '\t')) (*b)++;
    while (e > *b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    return e;
}

/* the fields of line [p, end) (no newline inside) into f (cap): the count, which
   may exceed cap (then only cap are stored) */
static int64_t gpt2rt__csv_split(const char *p, const char *end, gpt2rt__csv_field *f, int64_t cap) {
    int64_t n = 0;
    for (;;) {
        const char *c = p;
        while (c < end && *c != ',') c++;
        if (n < cap) { f[n].b = p; f[n].e = gpt2rt__csv_trim(&f[n].b, c); }
        n++;
        if (c == end) return n;
        p = c + 1;
    }
}

/* a number filling [b, e) entirely that fits a float (|v| <= FLT_MAX), in *v; 0
   when it is not one */
static int gpt2rt__csv_number(const char *b, const char *e, double *v) {
    char buf[256];
    size_t n = (size_t)(e - b);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, b, n);
    buf[n] = 0;
    char *stop;
    *v = strtod(buf, &stop);
    return stop == buf + n && fabs(*v) <= 3.4028234663852886e38;
}

/* a field for a message: at most 24 bytes of it, quoted, non-printing bytes as '?' */
static void gpt2rt__csv_show(char *out, const char *b, const char *e) {
    size_t n = (size_t)(e - b), k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n && i < 24; i++) out[k++] = (b[i] >= 32 && b[i] < 127) ? b[i] : '?';
    if (n > 24) { memcpy(out + k, "...", 3); k += 3; }
    out[k++] = '"';
    out[k] = 0;
}

/* Lines end in LF, CRLF or a lone CR (files saved by old Mac programs, where a
   reader that looks for LF alone sees one line): the end of the line at p, and the
   start of the next (past its one line ending) in *next */
static const char *gpt2rt__csv_eol(const char *p, const char *end, const char **next) {
    while (p < end && *p != '\n' && *p != '\r') p++;
    *next = p == end ? end : p + (*p == '\r' && p + 1 < end && p[1] == '\n' ? 2 : 1);
    return p;
}

static gpt2rt_result gpt2rt__series_done(gpt2rt_series **out, gpt2rt_series *s, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        free(s->values); free(s->mean); free(s->std); free(s->names); free(s->name);
        s->values = NULL; s->mean = s->std = NULL; s->names = NULL; s->name = NULL;
        memset(&s->info, 0, sizeof s->info);
        s->failed = 1;
    }
    *out = s;
    return r;
}

/* the split borders of info->rows rows for lookback L, horizon H (info->borders
   resolved); an error names the split that holds no window */
static gpt2rt_result gpt2rt__series_borders(gpt2rt_series *s, const char *name, int64_t L, int64_t H) {
    gpt2rt_series_info *in = &s->info;
    int64_t rows = in->rows, b2[3];
    if (in->borders == GPT2RT_SERIES_BORDERS_RATIO) {
        /* Python's int(len * 0.7): the same double product, truncated */
        int64_t n_train = (int64_t)((double)rows * 0.7), n_test = (int64_t)((double)rows * 0.2);
        int64_t n_val = rows - n_train - n_test;
        b2[0] = n_train; b2[1] = n_train + n_val; b2[2] = rows;
    } else {
        int64_t unit = (in->borders == GPT2RT_SERIES_BORDERS_ETTM ? 4 : 1) * 30 * 24; /* rows a month */
        b2[0] = 12 * unit; b2[1] = 16 * unit; b2[2] = 20 * unit;
        if (rows < b2[2])
            return gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %lld data rows; the %s borders need %lld (train "
                                   "[0, %lld), validation and test up to %lld); use borders RATIO for other files",
                                   name, (long long)rows, in->borders == GPT2RT_SERIES_BORDERS_ETTM ? "ETTm" : "ETTh",
                                   (long long)b2[2], (long long)b2[0], (long long)b2[2]);
    }
    static const char *split_name[3] = {"training", "validation", "test"};
    for (int k = 0; k < 3; k++) {
        in->begin[k] = k ? b2[k - 1] - L : 0;
        in->end[k] = b2[k];
        in->windows[k] = in->end[k] - in->begin[k] - L - H + 1;
        if (in->begin[k] < 0 || in->windows[k] < 1)
            return gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %lld data rows are too few: the %s split ends at "
                                   "row %lld and must hold lookback + horizon = %lld + %lld = %lld rows%s (it has %lld)",
                                   name, (long long)rows, split_name[k], (long long)b2[k], (long long)L, (long long)H,
                                   (long long)(L + H), k ? " counting the lookback before it" : "",
                                   (long long)(in->end[k] - (in->begin[k] > 0 ? in->begin[k] : 0)));
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_load_mem(gpt2rt_series **out, const void *data, size_t len, const char *name,
                                                const gpt2rt_series_desc *desc) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_series *s = (gpt2rt_series *)calloc(1, sizeof(gpt2rt_series));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!name) name = "series";
    if (!desc || (!data && len))
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name,
                                                           desc ? "data" : "desc"));
    if (desc->lookback < 1 || desc->horizon < 1 || (unsigned)desc->borders > GPT2RT_SERIES_BORDERS_RATIO)
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lookback = %d and "
                                                           "horizon = %d must be >= 1, borders = %d in [0, %d]", name,
                                                           desc->lookback, desc->horizon, (int)desc->borders,
                                                           (int)GPT2RT_SERIES_BORDERS_RATIO));
    s->desc = *desc;
    s->desc.target = NULL;
    const char *p = (const char *)data, *end = p + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 byte-order mark */
    /* the header */
    const char *nl; /* the start of the next line */
    const char *he = gpt2rt__csv_eol(p, end, &nl);
    if (p == he)
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line 1 is empty: an ETT-style "
                                                           "CSV starts with a header (date,column,...)%s", name,
                                                           len ? "" : " (the file is empty)"));
    int64_t ncol = gpt2rt__csv_split(p, he, NULL, 0);
    if (ncol < 2)
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header (line 1) has 1 "
                                                           "column; a date column and at least one numeric column are "
                                                           "needed (comma-separated)", name));
    /* hdr: the header's fields (kept for messages), f: the current row's */
    gpt2rt__csv_field *hdr = (gpt2rt__csv_field *)malloc(sizeof(gpt2rt__csv_field) * 2 * (size_t)ncol), *f = hdr + ncol;
    int *col = (int *)malloc(sizeof(int) * (size_t)ncol); /* the file column of channel m */
    if (!hdr || !col) {
        free(hdr); free(col);
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld "
                                                           "columns", name, (long long)ncol));
    }
    gpt2rt_result r = GPT2RT_OK;
    double *raw = NULL; /* (rows, M) as parsed: the scaler is fit in double, as sklearn's on pandas' float64 */
    gpt2rt__csv_split(p, he, hdr, ncol);
    int64_t M = 0;
    if (desc->target && desc->target[0]) {
        size_t tl = strlen(desc->target);
        for (int64_t c = 1; c < ncol && !M; c++)
            if ((size_t)(hdr[c].e - hdr[c].b) == tl && memcmp(hdr[c].b, desc->target, tl) == 0) { col[0] = (int)c; M = 1; }
        if (!M) {
            size_t k = (size_t)snprintf(s->error, 512, "%s: no column named \"%.64s\" (target); the header (line 1) has:",
                                        name, desc->target);
            for (int64_t c = 1; c < ncol && k < 400; c++) {
                char show[40];
                gpt2rt__csv_show(show, hdr[c].b, hdr[c].e);
                k += (size_t)snprintf(s->error + k, 512 - k, "%s %s", c > 1 ? "," : "", show);
            }
            r = GPT2RT_ERR_FORMAT;
            goto done;
        }
    } else {
        for (int64_t c = 1; c < ncol; c++) col[M++] = (int)c;
    }
    {   /* the names of the channels */
        size_t total = 0;
        for (int64_t m = 0; m < M; m++) total += (size_t)(hdr[col[m]].e - hdr[col[m]].b) + 1;
        s->names = (char *)malloc(total);
        s->name = (char **)malloc(sizeof(char *) * (size_t)M);
        if (!s->names || !s->name) { r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", name); goto done; }
        char *q = s->names;
        for (int64_t m = 0; m < M; m++) {
            size_t n = (size_t)(hdr[col[m]].e - hdr[col[m]].b);
            memcpy(q, hdr[col[m]].b, n);
            q[n] = 0;
            s->name[m] = q;
            q += n + 1;
        }
    }
    /* the rows: every field checked (numbers in every column, the target's or not) */
    {
        int64_t rows = 0, cap = 0, line = 1;
        for (p = nl; p < end; p = nl) {
            line++;
            const char *le = gpt2rt__csv_eol(p, end, &nl);
            if (le == p) { /* blank lines may only end the file */
                const char *q = le;
                while (q < end && (*q == '\n' || *q == '\r')) q++;
                if (q == end) break;
                r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld is empty, but data rows follow it", name,
                                    (long long)line);
                goto done;
            }
            int64_t n = gpt2rt__csv_split(p, le, f, ncol);
            if (n != ncol) {
                r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld has %lld fields; the header (line 1) has "
                                    "%lld (a ragged row)", name, (long long)line, (long long)n, (long long)ncol);
                goto done;
            }
            if (rows == cap) {
                int64_t nc = cap ? 2 * cap : 1024;
                double *nv = (double *)realloc(raw, sizeof(double) * (size_t)(nc * M));
                if (!nv) { r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld rows", name,
                                               (long long)nc); goto done; }
                raw = nv;
                cap = nc;
            }
            int64_t m = 0;
            for (int64_t c = 1; c < ncol; c++) {
                double v;
                if (!gpt2rt__csv_number(f[c].b, f[c].e, &v)) {
                    char show[40], hname[40];
                    gpt2rt__csv_show(show, f[c].b, f[c].e);
                    gpt2rt__csv_show(hname, hdr[c].b, hdr[c].e);
                    r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld, column %lld (%s): %s is not a %s",
                                        name, (long long)line, (long long)(c + 1), hname, show,
                                        f[c].b == f[c].e ? "number (empty field)" : "finite number that fits a float");
                    goto done;
                }
                if (m < M && col[m] == c) raw[rows * M + m++] = v;
            }
            rows++;
        }
        s->info.rows = rows;
        s->info.channels = (int)M;
        if (rows == 0) {
            r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: no data rows after the header (line 1)", name);
            goto done;
        }
    }
    /* borders: AUTO reads the name's last path component */
    {
        gpt2rt_series_borders b = desc->borders;
        if (b == GPT2RT_SERIES_BORDERS_AUTO) {
            const char *base = name;
            for (const char *q = name; *q; q++) if (*q == '/' || *q == '\\') base = q + 1;
            b = strncmp(base, "ETTh", 4) == 0 ? GPT2RT_SERIES_BORDERS_ETTH
              : strncmp(base, "ETTm", 4) == 0 ? GPT2RT_SERIES_BORDERS_ETTM : GPT2RT_SERIES_BORDERS_RATIO;
        }
        s->info.borders = b;
        r = gpt2rt__series_borders(s, name, desc->lookback, desc->horizon);
        if (r != GPT2RT_OK) goto done;
    }
    /* StandardScaler on the training rows, fit and applied in double, rounded to
       float once (the Time-Series-Library's float64 arrays become fp32 tensors) */
    s->mean = (double *)calloc((size_t)M, sizeof(double));
    s->std = (double *)calloc((size_t)M, sizeof(double));
    s->values = (float *)malloc(sizeof(float) * (size_t)(s->info.rows * M));
    if (!s->mean || !s->std || !s->values) { r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", name); goto done; }
    {
        int64_t n = s->info.end[GPT2RT_SERIES_TRAIN], rows = s->info.rows;
        for (int64_t m = 0; m < M; m++) {
            double mu = 0.0, var = 0.0;
            for (int64_t t = 0; t < n; t++) mu += raw[t * M + m];
            mu /= (double)n;
            for (int64_t t = 0; t < n; t++) { double c = raw[t * M + m] - mu; var += c * c; }
            var /= (double)n;
            /* sklearn's _handle_zeros_in_scale: a (near-)constant column keeps scale 1 */
            double sd = sqrt(var);
            if (sd < 10.0 * 2.220446049250313e-16 * (fabs(mu) > 1.0 ? fabs(mu) : 1.0)) sd = 1.0;
            if (desc->no_scale) { mu = 0.0; sd = 1.0; }
            s->mean[m] = mu;
            s->std[m] = sd;
            for (int64_t t = 0; t < rows; t++) {
                double z = (raw[t * M + m] - mu) / sd;
                if (!(fabs(z) <= 3.4028234663852886e38)) {
                    r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld, column \"%s\": the scaled value "
                                        "(%g - mean %g) / std %g = %g does not fit a float", name, (long long)t + 2,
                                        s->name[m], raw[t * M + m], mu, sd, z);
                    goto done;
                }
                s->values[t * M + m] = (float)z;
            }
        }
    }
done:
    free(hdr);
    free(col);
    free(raw);
    return gpt2rt__series_done(out, s, r);
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_load(gpt2rt_series **out, const char *path, const gpt2rt_series_desc *desc) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *buf;
    size_t len;
    char error[512];
    gpt2rt_result r = path ? gpt2rt__tok_read_file(path, &buf, &len, error)
                           : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_load: path is NULL");
    if (r != GPT2RT_OK) {
        gpt2rt_series *s = (gpt2rt_series *)calloc(1, sizeof(gpt2rt_series));
        *out = s;
        if (s) { memcpy(s->error, error, sizeof error); s->failed = 1; }
        return r;
    }
    r = gpt2rt_series_load_mem(out, buf, len, path, desc);
    free(buf);
    return r;
}

GPT2RT_DEF void gpt2rt_series_free(gpt2rt_series *s) {
    if (!s) return;
    free(s->values); free(s->mean); free(s->std); free(s->names); free(s->name);
    free(s);
}

GPT2RT_DEF const char *gpt2rt_series_last_error(const gpt2rt_series *s) {
    return s ? s->error : "gpt2rt_series: no series (out of memory)";
}

/* the read-only calls take a const series but still record why they refuse: the
   message is the one field they write (every series is ours, allocated writable) */
#define GPT2RT__SERIES_ERR(s) (((gpt2rt_series *)(s))->error)

GPT2RT_DEF gpt2rt_result gpt2rt_series_info_get(const gpt2rt_series *s, gpt2rt_series_info *info) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    if (!info)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_info_get: info is NULL");
    *info = s->info;
    return GPT2RT_OK;
}

GPT2RT_DEF const char *gpt2rt_series_column(const gpt2rt_series *s, int m) {
    return s && !s->failed && m >= 0 && m < s->info.channels ? s->name[m] : NULL;
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_scaler(const gpt2rt_series *s, int m, double *mean, double *std) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    if (!mean || !std)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_scaler: %s is NULL",
                               !mean ? "mean" : "std");
    if (m < 0 || m >= s->info.channels)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_scaler: channel m = %d "
                               "is outside [0, %d)", m, s->info.channels);
    *mean = s->mean[m];
    *std = s->std[m];
    return GPT2RT_OK;
}

GPT2RT_DEF const float *gpt2rt_series_values(const gpt2rt_series *s) { return s && !s->failed ? s->values : NULL; }

GPT2RT_DEF gpt2rt_result gpt2rt_series_batch(gpt2rt_series *s, gpt2rt_series_split split, uint64_t seed, int64_t epoch,
                                             int64_t first, int B, float *x, float *y) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    if (!x || !y)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: %s is NULL (it receives "
                               "the %s, B x %s x %d floats)", !x ? "x" : "y", !x ? "inputs" : "targets",
                               !x ? "lookback" : "horizon", s->info.channels);
    if ((unsigned)split >= GPT2RT_SERIES_SPLIT_COUNT)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: split = %d must lie in [0, %d)",
                               (int)split, (int)GPT2RT_SERIES_SPLIT_COUNT);
    int64_t n = s->info.windows[split];
    if (B < 1 || first < 0 || epoch < 0 || first > n - B) /* int64 minus an int: cannot overflow */
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: windows [first, first + B) "
                               "with first = %lld, B = %d must lie in the %s split's [0, %lld) (B >= 1, first >= 0, "
                               "epoch = %lld >= 0)", (long long)first, B,
                               split == GPT2RT_SERIES_TRAIN ? "training" : split == GPT2RT_SERIES_VAL ? "validation" : "test",
                               (long long)n, (long long)epoch);
    int64_t M = s->info.channels, L = s->desc.lookback, H = s->desc.horizon;
    uint64_t st = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull), key = gpt2rt__rng_next(&st);
    for (int b = 0; b < B; b++) {
        int64_t w = first + b;
        if (split == GPT2RT_SERIES_TRAIN) w = (int64_t)gpt2rt__shard_permute((uint64_t)w, (uint64_t)n, key);
        const float *src = s->values + (s->info.begin[split] + w) * M;
        memcpy(x + (int64_t)b * L * M, src, sizeof(float) * (size_t)(L * M));
        memcpy(y + (int64_t)b * H * M, src + L * M, sizeof(float) * (size_t)(H * M));
    }
    return GPT2RT_OK;
}
#endif /* GPT2RT_NO_SERIES */

/* ==== 7. CPU backend ==== */

/* fp32 with OpenMP; infix gpt2rt__cpu_ (the matrix product's internals: gpt2rt__sg_).
   Each op is a pair *_forward / *_backward with shapes next to the arguments.
   Every loop that reduces does so in an order fixed by the shapes alone, so the
   results do not depend on the thread count. nt: threads. */

/* ---- the per-op profile (tools/bench_cpu): off unless ctx->prof is set ----
   Each op class's wall time, from the driver's thread around the op's call (its
   parallel regions included), so the classes and the step's remainder add up to the
   step. Off, an op pays one test of a pointer. */
enum {
    GPT2RT__PROF_MM_FWD,   /* the layers' matrix products, forward (bias fused) */
    GPT2RT__PROF_MM_BWD,   /* their backward: dinp, dW and the bias's column sums */
    GPT2RT__PROF_HEAD_FWD, /* the LM head's (tied wte) matrix product, forward */
    GPT2RT__PROF_HEAD_BWD, /* and backward */
    GPT2RT__PROF_ATT_FWD,
    GPT2RT__PROF_ATT_BWD,
    GPT2RT__PROF_GELU,     /* forward, backward and recompute */
    GPT2RT__PROF_LN,       /* LayerNorm forward, backward and recompute */
    GPT2RT__PROF_CE,       /* the classifier's softmax and cross-entropy, both ways */
    GPT2RT__PROF_RESID,    /* residual adds, the embeddings, dropout, zeroing */
    GPT2RT__PROF_NORM,     /* the update's gradient norm */
    GPT2RT__PROF_ADAMW,    /* the update's AdamW pass */
    GPT2RT__PROF_COUNT
};
static double gpt2rt__prof_t(const gpt2rt_ctx *ctx) { return ctx->prof ? gpt2rt__now() : 0.0; }
static void gpt2rt__prof_add(const gpt2rt_ctx *ctx, int op, double t0) {
    if (ctx->prof) ctx->prof[op] += gpt2rt__now() - t0;
}
/* run `call` (a statement), its time added to op class `op` when profiled */
#define GPT2RT__PROF(ctx, op, call) do { double pt_ = gpt2rt__prof_t(ctx); call; gpt2rt__prof_add(ctx, op, pt_); } while (0)

/* ==== 7.1 Ops ==== */

/* ---- dot product with 16 independent lanes (vectorises without -ffast-math) ---- */
static float gpt2rt__cpu_dot(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 16; j += 2) s += acc[j] + acc[j + 1];
    return s;
}

/* ---- dropout (inverted) ---- */
/* One site's mask in one forward (gpt2rt__drop_at, 7.3, fills it): element i is
   dropped when the top 32 bits of gpt2rt__hash_at(key, off + i) are below thresh =
   round(p * 2^32), and kept ones are multiplied by scale = 1/(1-p). key holds (seed,
   optimizer step, layer, site); off counts the elements of the step's earlier
   micro-batches, so k micro-batches draw the masks of one batch k times the size.
   on = 0: the identity (evaluation, or p = 0), and callers skip the op. */
typedef struct gpt2rt__drop {
    int on;
    uint32_t thresh;
    float scale;
    uint64_t key, off;
} gpt2rt__drop;

static GPT2RT__HOSTDEV float gpt2rt__drop_factor(const gpt2rt__drop *dr, int64_t i) { /* 0 or 1/(1-p) */
    return (uint32_t)(gpt2rt__hash_at(dr->key, dr->off + (uint64_t)i) >> 32) >= dr->thresh ? dr->scale : 0.0f;
}

/* out (N) = in (N) * mask / (1-p), element by element (out may alias in); it is its
   own backward: the same op on the gradient */
static void gpt2rt__cpu_dropout_span(float *out, const float *in, gpt2rt__drop d, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) out[i] = in[i] * gpt2rt__drop_factor(&d, i); /* d: a copy out cannot alias */
}
static void gpt2rt__cpu_dropout(float *out, const float *in, const gpt2rt__drop *dr, int64_t N, int nt) {
    int64_t nblk = (N + 4095) / 4096; /* in spans: the hash loop vectorises on its own copy of dr */
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++)
        gpt2rt__cpu_dropout_span(out, in, *dr, blk * 4096, N - blk * 4096 < 4096 ? N : blk * 4096 + 4096);
}

/* ---- embeddings ---- */
/* out (B,T,C) = wte[tokens] + wpe[t];  tokens (B,T), wte (Vp,C), wpe (P,C) */
static void gpt2rt__cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                    int64_t B, int64_t T, int64_t C, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *te = wte + (int64_t)tokens[bt] * C, *pe = wpe + (bt % T) * C;
        float *o = out + bt * C;
        for (int64_t c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

/* dwte (Vp,C) += scatter of dout by token; dwpe (P,C) += dout summed over the batch
   (either NULL: frozen). Threads own column blocks and walk the tokens in order:
   deterministic. */
static void gpt2rt__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                     int64_t B, int64_t T, int64_t C, int nt) {
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t bt = 0; bt < B * T; bt++) {
            const float *d = dout + bt * C;
            float *te = dwte ? dwte + (int64_t)tokens[bt] * C : NULL, *pe = dwpe ? dwpe + (bt % T) * C : NULL;
            if (dwte) for (int64_t c = c0; c < c1; c++) te[c] += d[c];
            if (dwpe) for (int64_t c = c0; c < c1; c++) pe[c] += d[c];
        }
    }
}

/* ---- LayerNorm (eps 1e-5, biased variance) ---- */
/* Rows go 8 at a time: each row's sums are still one chain over c in order, the 8
   chains run side by side (a small C's row would wait on each addition). The rows
   past N in the last group repeat row N-1 (computed, never stored). */
#define GPT2RT__LN_ROWS 8
/* out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C) */
static void gpt2rt__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int64_t N, int64_t C, int nt) {
    int64_t ng = (N + GPT2RT__LN_ROWS - 1) / GPT2RT__LN_ROWS;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t g = 0; g < ng; g++) {
        enum { R = GPT2RT__LN_ROWS };
        int64_t i0 = g * R, nr = N - i0 < (int64_t)R ? N - i0 : (int64_t)R;
        const float *x[R];
        float m[R] = {0}, v[R] = {0}, s[R];
        for (int j = 0; j < R; j++) x[j] = inp + (i0 + (j < nr ? j : nr - 1)) * C;
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) m[j] += x[j][c];
        for (int j = 0; j < R; j++) m[j] /= (float)C;
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) { float dx = x[j][c] - m[j]; v[j] += dx * dx; }
        for (int j = 0; j < R; j++) s[j] = 1.0f / sqrtf(v[j] / (float)C + 1e-5f);
        for (int j = 0; j < nr; j++) {
            float *o = out + (i0 + j) * C;
            for (int64_t c = 0; c < C; c++) o[c] = (x[j][c] - m[j]) * s[j] * w[c] + b[c];
            mean[i0 + j] = m[j];
            rstd[i0 + j] = s[j];
        }
    }
}

/* dinp (N,C) +=, dw (C) +=, db (C) += from dout (N,C) and the forward's inp, mean, rstd
   (dw and db NULL: frozen) */
static void gpt2rt__cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd,
                                       int64_t N, int64_t C, int nt) {
    int64_t ng = (N + GPT2RT__LN_ROWS - 1) / GPT2RT__LN_ROWS;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t gi = 0; gi < ng; gi++) {
        enum { R = GPT2RT__LN_ROWS };
        int64_t i0 = gi * R, nr = N - i0 < (int64_t)R ? N - i0 : (int64_t)R;
        const float *x[R], *g[R];
        float m[R], s[R], dnorm_mean[R] = {0}, dnorm_norm_mean[R] = {0};
        for (int j = 0; j < R; j++) {
            int64_t i = i0 + (j < nr ? j : nr - 1);
            x[j] = inp + i * C;
            g[j] = dout + i * C;
            m[j] = mean[i];
            s[j] = rstd[i];
        }
        for (int64_t c = 0; c < C; c++)
            for (int j = 0; j < R; j++) {
                float dnorm = w[c] * g[j][c];
                dnorm_mean[j] += dnorm;
                dnorm_norm_mean[j] += dnorm * (x[j][c] - m[j]) * s[j];
            }
        for (int j = 0; j < nr; j++) {
            float dm = dnorm_mean[j] / (float)C, dnm = dnorm_norm_mean[j] / (float)C;
            float *dx = dinp + (i0 + j) * C;
            for (int64_t c = 0; c < C; c++) {
                float norm = (x[j][c] - m[j]) * s[j];
                dx[c] += (w[c] * g[j][c] - dm - norm * dnm) * s[j];
            }
        }
    }
    if (!dw) return;
    int64_t nblk = (C + 15) / 16;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float aw[16] = {0}, ab[16] = {0};
        for (int64_t i = 0; i < N; i++) {
            const float *x = inp + i * C, *g = dout + i * C;
            float m = mean[i], s = rstd[i];
            for (int64_t c = c0; c < c1; c++) { aw[c - c0] += (x[c] - m) * s * g[c]; ab[c - c0] += g[c]; }
        }
        for (int64_t c = c0; c < c1; c++) { dw[c] += aw[c - c0]; db[c] += ab[c - c0]; }
    }
}

/* ---- causal self-attention (and aLLM4TS's placeholder mask: gpt2rt__cpu_att_keys) ---- */
/* Never stores the (T,T) probabilities: the forward keeps each softmax row's
   log-sum-exp, the backward recomputes the scores from q and k, and with dropout
   (dr non-NULL and on) draws the probabilities' mask again: element ((b*NH + h)*T
   + t)*T + s of the (B,NH,T,T) probabilities. lse is the softmax's, before dropout.
   A query's output is three sums, each one function's, so every path and the decode
   step (gpt2rt__cpu_attention_cached, 7.3) give it bitwise and a prefill is a forward:
     score = (q scale) . k   gpt2rt__cpu_att_scores, or _att_dot for one key: 16 lanes
                             over the blocks of 16, a chain over the tail, lanes in pairs
     p     = softmax         gpt2rt__cpu_att_softmax on the query's keys, in key order
     y     = sum_s p_s v_s   gpt2rt__cpu_att_mm: a chain from +0 over the keys in order
   Their products are GPT2RT__MADD, fused exactly where the target has an FMA, so the
   sums do not depend on where a compiler contracts (-ffp-contract, C++, nvcc's host
   pass) or vectorises. Small heads (HS * pad16(T) up to GPT2RT__ATT_TILE floats,
   pad16(T) up to GPT2RT__ATT_TMAX: patch models, short texts) run per (b,h) as small
   matrix products on stack tiles: blocks of GPT2RT__ATT_ROWS queries scored against
   the transposed keys, the rows softmaxed, then P V (backward: dS K, dS^T Q, P^T dY),
   4 rows by 16 columns a step in registers; a block's masked entries are exact zeros,
   which add nothing to those sums (for finite values: 0 * inf is NaN). Larger heads
   go a query at a time. A (b,h), or a query, is one thread's and every order is fixed
   by the shapes: the thread count never changes a result. */
#define GPT2RT__ATT_TILE 4096 /* floats: 16 KiB of stack a tile */
#define GPT2RT__ATT_ROWS 8    /* queries a block (the tiled path) */
#define GPT2RT__ATT_TMAX 256  /* the tiled path's longest pad16(T): its blocks' rows, 8 * 256 floats */
#if defined(__FMA__) || defined(FP_FAST_FMAF) || defined(__FP_FAST_FMAF)
#define GPT2RT__MADD(a, b, c) fmaf(a, b, c) /* a*b + c rounded once: an FMA instruction */
#else
#define GPT2RT__MADD(a, b, c) ((a) * (b) + (c)) /* no FMA: no compiler can fuse it either */
#endif

static inline float gpt2rt__exp_fast(float a); /* the classifier's exp, below */

/* tile (HS, Tp) = the head's rows src + s*C3 (s < T) transposed; columns T..Tp-1 zero */
static void gpt2rt__cpu_att_tile(float *tile, const float *src, int64_t C3, int64_t T, int64_t Tp, int64_t HS) {
    for (int64_t s = 0; s < T; s++)
        for (int64_t i = 0; i < HS; i++) tile[i * Tp + s] = src[s * C3 + i];
    for (int64_t i = 0; i < HS; i++)
        for (int64_t s = T; s < Tp; s++) tile[i * Tp + s] = 0.0f;
}

/* sc (nr <= 4 rows, ld apart) = (a scale) . b for the rows a + r*lda (n) and the columns
   [0, ns) of bt (n, ldb): a chain from +0 over the tail [n16, n), then 16 lanes (lane j:
   a chain over i = j mod 16 in [0, n16)) added in pairs. 4 rows by 16 columns a step;
   the columns up to ns rounded up to 16 are read and written (ld, ldb >= that), rows
   past nr repeat row nr-1 (never stored). The rows are spelled out: gcc 12 vectorises
   fmaf over the columns only so. */
static void gpt2rt__cpu_att_scores(float *sc, int64_t ld, const float *a, int64_t lda, int64_t nr, const float *bt,
                                   int64_t ldb, int64_t n, int64_t ns, float scale) {
    enum { W = 16 };
    const float *a0 = a, *a1 = a + (nr > 1 ? 1 : 0) * lda, *a2 = a + (nr > 2 ? 2 : nr - 1) * lda,
                *a3 = a + (nr > 3 ? 3 : nr - 1) * lda;
    int64_t n16 = n - n % 16;
    for (int64_t c = 0; c < ns; c += W) {
        float s0[W] = {0}, s1[W] = {0}, s2[W] = {0}, s3[W] = {0};
        for (int64_t i = n16; i < n; i++) {
            const float *b = bt + i * ldb + c;
            float x0 = a0[i] * scale, x1 = a1[i] * scale, x2 = a2[i] * scale, x3 = a3[i] * scale;
            for (int u = 0; u < W; u++) {
                s0[u] = GPT2RT__MADD(x0, b[u], s0[u]); s1[u] = GPT2RT__MADD(x1, b[u], s1[u]);
                s2[u] = GPT2RT__MADD(x2, b[u], s2[u]); s3[u] = GPT2RT__MADD(x3, b[u], s3[u]);
            }
        }
        for (int j = 0; n16 && j < 16; j += 2) { /* lanes j (l) and j+1 (m) */
            float l0[W] = {0}, l1[W] = {0}, l2[W] = {0}, l3[W] = {0}, m0[W] = {0}, m1[W] = {0}, m2[W] = {0}, m3[W] = {0};
            for (int64_t i = j; i < n16; i += 16) {
                const float *b = bt + i * ldb + c, *e = b + ldb;
                float x0 = a0[i] * scale, x1 = a1[i] * scale, x2 = a2[i] * scale, x3 = a3[i] * scale;
                float y0 = a0[i + 1] * scale, y1 = a1[i + 1] * scale, y2 = a2[i + 1] * scale, y3 = a3[i + 1] * scale;
                for (int u = 0; u < W; u++) {
                    l0[u] = GPT2RT__MADD(x0, b[u], l0[u]); l1[u] = GPT2RT__MADD(x1, b[u], l1[u]);
                    l2[u] = GPT2RT__MADD(x2, b[u], l2[u]); l3[u] = GPT2RT__MADD(x3, b[u], l3[u]);
                    m0[u] = GPT2RT__MADD(y0, e[u], m0[u]); m1[u] = GPT2RT__MADD(y1, e[u], m1[u]);
                    m2[u] = GPT2RT__MADD(y2, e[u], m2[u]); m3[u] = GPT2RT__MADD(y3, e[u], m3[u]);
                }
            }
            for (int u = 0; u < W; u++) {
                s0[u] += l0[u] + m0[u]; s1[u] += l1[u] + m1[u];
                s2[u] += l2[u] + m2[u]; s3[u] += l3[u] + m3[u];
            }
        }
        float *o = sc + c;
        for (int u = 0; u < W; u++) o[u] = s0[u];
        if (nr > 1) for (int u = 0; u < W; u++) o[ld + u] = s1[u];
        if (nr > 2) for (int u = 0; u < W; u++) o[2 * ld + u] = s2[u];
        if (nr > 3) for (int u = 0; u < W; u++) o[3 * ld + u] = s3[u];
    }
}

/* one score of gpt2rt__cpu_att_scores, bitwise: (q scale) . k, q and k (n) */
static float gpt2rt__cpu_att_dot(const float *q, const float *k, int64_t n, float scale) {
    int64_t n16 = n - n % 16;
    float lane[16] = {0}, s = 0.0f;
    for (int64_t i = n16; i < n; i++) s = GPT2RT__MADD(q[i] * scale, k[i], s);
    for (int64_t i = 0; i < n16; i += 16)
        for (int j = 0; j < 16; j++) lane[j] = GPT2RT__MADD(q[i + j] * scale, k[i + j], lane[j]);
    for (int j = 0; n16 && j < 16; j += 2) s += lane[j] + lane[j + 1];
    return s;
}

/* y (nr <= 4 rows, ldy apart; n) += A B: A's element (r, s) at a[r*ars + s*acs], B (ns
   rows, ldb apart); each element's terms added in s order onto y (a chain from +0 onto
   a zeroed y). 4 rows by 16 columns a step in registers (rows spelled out, as in
   gpt2rt__cpu_att_scores); rows past nr repeat row nr-1 (never stored). */
static void gpt2rt__cpu_att_mm(float *y, int64_t ldy, int64_t nr, const float *a, int64_t ars, int64_t acs,
                               const float *b, int64_t ldb, int64_t n, int64_t ns) {
    enum { W = 16 };
    int64_t r1 = nr > 1 ? 1 : 0, r2 = nr > 2 ? 2 : nr - 1, r3 = nr > 3 ? 3 : nr - 1;
    const float *a0 = a, *a1 = a + r1 * ars, *a2 = a + r2 * ars, *a3 = a + r3 * ars;
    float *y0 = y, *y1 = y + r1 * ldy, *y2 = y + r2 * ldy, *y3 = y + r3 * ldy;
    int64_t c = 0;
    for (; c + W <= n; c += W) {
        float c0[W], c1[W], c2[W], c3[W];
        for (int u = 0; u < W; u++) { c0[u] = y0[c + u]; c1[u] = y1[c + u]; c2[u] = y2[c + u]; c3[u] = y3[c + u]; }
        for (int64_t s = 0; s < ns; s++) {
            const float *bs = b + s * ldb + c;
            float x0 = a0[s * acs], x1 = a1[s * acs], x2 = a2[s * acs], x3 = a3[s * acs];
            for (int u = 0; u < W; u++) {
                c0[u] = GPT2RT__MADD(x0, bs[u], c0[u]); c1[u] = GPT2RT__MADD(x1, bs[u], c1[u]);
                c2[u] = GPT2RT__MADD(x2, bs[u], c2[u]); c3[u] = GPT2RT__MADD(x3, bs[u], c3[u]);
            }
        }
        for (int u = 0; u < W; u++) y0[c + u] = c0[u];
        if (nr > 1) for (int u = 0; u < W; u++) y1[c + u] = c1[u];
        if (nr > 2) for (int u = 0; u < W; u++) y2[c + u] = c2[u];
        if (nr > 3) for (int u = 0; u < W; u++) y3[c + u] = c3[u];
    }
    for (; c < n; c++) { /* the columns past the last 16, one at a time */
        float c0 = y0[c], c1 = y1[c], c2 = y2[c], c3 = y3[c];
        for (int64_t s = 0; s < ns; s++) {
            float bs = b[s * ldb + c];
            c0 = GPT2RT__MADD(a0[s * acs], bs, c0); c1 = GPT2RT__MADD(a1[s * acs], bs, c1);
            c2 = GPT2RT__MADD(a2[s * acs], bs, c2); c3 = GPT2RT__MADD(a3[s * acs], bs, c3);
        }
        y0[c] = c0;
        if (nr > 1) y1[c] = c1;
        if (nr > 2) y2[c] = c2;
        if (nr > 3) y3[c] = c3;
    }
}

/* p (n) = the softmax of one query's scores p (n), in place; returns its lse. The max,
   e = exp_fast(score - max) (within 2 ulp of expf, vectorised), their sum in 16 lanes
   (s mod 16 over the blocks of 16; then the tail's chain, then the lanes in pairs),
   p = e * (1/sum). */
static float gpt2rt__cpu_att_softmax(float *p, int64_t n) {
    int64_t n16 = n - n % 16;
    float lm[16], ls[16] = {0}, mx = -INFINITY, sum = 0.0f;
    for (int u = 0; u < 16; u++) lm[u] = -INFINITY;
    for (int64_t s = 0; s < n16; s += 16)
        for (int u = 0; u < 16; u++) lm[u] = p[s + u] > lm[u] ? p[s + u] : lm[u];
    for (int64_t s = n16; s < n; s++) mx = p[s] > mx ? p[s] : mx;
    for (int u = 0; u < 16; u++) mx = lm[u] > mx ? lm[u] : mx;
    for (int64_t s = 0; s < n; s++) p[s] = gpt2rt__exp_fast(p[s] - mx);
    for (int64_t s = 0; s < n16; s += 16)
        for (int u = 0; u < 16; u++) ls[u] += p[s + u];
    for (int64_t s = n16; s < n; s++) sum += p[s];
    for (int u = 0; u < 16; u += 2) sum += ls[u] + ls[u + 1];
    float inv = 1.0f / sum;
    for (int64_t s = 0; s < n; s++) p[s] *= inv;
    return mx + logf(sum);
}

/* The keys of query t under the mask of history TH (gpt2rt__dims.TH): keys [0, *n), and
   *self = t itself for a placeholder (t >= TH: it sees the history and itself only),
   else -1. TH = T is GPT-2's causal mask: keys [0, t]. Either way every key is <= t. */
static void gpt2rt__cpu_att_keys(int64_t t, int64_t TH, int64_t *n, int64_t *self) {
    *n = t < TH ? t + 1 : TH;
    *self = t < TH ? -1 : t;
}

/* query t's probabilities from its scores sc[0, ns) (key s at s, ns > t): the softmax
   over its keys (a placeholder's own score moved next to the history's), every other
   entry 0, then the dropout mask (r: the query's row of the (B*NH*T) rows); returns
   the lse */
static float gpt2rt__cpu_att_probs(float *sc, int64_t t, int64_t TH, int64_t ns, int64_t r, int64_t T,
                                   const gpt2rt__drop *dr) {
    int64_t n, self;
    gpt2rt__cpu_att_keys(t, TH, &n, &self);
    if (self >= 0) sc[n] = sc[self];
    float l = gpt2rt__cpu_att_softmax(sc, n + (self >= 0)), ps = self >= 0 ? sc[n] : 0.0f;
    for (int64_t s = n; s < ns; s++) sc[s] = 0.0f;
    if (self >= 0) sc[self] = ps;
    if (dr && dr->on)
        for (int64_t s = 0; s < ns; s++) sc[s] *= gpt2rt__drop_factor(dr, r * T + s);
    return l;
}

/* The softmax's backward on query t's row (r: its row of the (B*NH*T) rows) over keys
   [0, ns): p holds the scores (key s at s), g holds dP = dy . v; out: p f (f the dropout
   factor, 1 without) and dS = p (f dP - sum_s p f dP) scale in g. ns16 >= ns: the
   entries [ns, ns16) too are read (finite), and come out 0 in p f and dS. */
static void gpt2rt__cpu_att_grad_row(float *p, float *g, int64_t t, int64_t TH, int64_t ns, int64_t ns16, int64_t r,
                                     int64_t T, float lse, float scale, const gpt2rt__drop *dr) {
    int64_t n, self;
    gpt2rt__cpu_att_keys(t, TH, &n, &self);
    float ls[16] = {0}, dsum = 0.0f;
    for (int64_t s = 0; s < ns16; s++) p[s] = gpt2rt__exp_fast(p[s] - lse);
    float ps = self >= 0 ? p[self] : 0.0f;
    for (int64_t s = n; s < ns16; s++) p[s] = 0.0f;
    if (self >= 0) p[self] = ps;
    int drop = dr && dr->on;
    if (drop)
        for (int64_t s = 0; s < ns; s++) g[s] *= gpt2rt__drop_factor(dr, r * T + s);
    int64_t m16 = ns16 - ns16 % 16;
    for (int64_t s = 0; s < m16; s += 16)
        for (int u = 0; u < 16; u++) ls[u] += p[s + u] * g[s + u];
    for (int64_t s = m16; s < ns16; s++) dsum += p[s] * g[s];
    for (int u = 0; u < 16; u += 2) dsum += ls[u] + ls[u + 1];
    for (int64_t s = 0; s < ns16; s++) g[s] = p[s] * (g[s] - dsum) * scale;
    if (drop)
        for (int64_t s = 0; s < ns; s++) p[s] *= gpt2rt__drop_factor(dr, r * T + s);
}

/* out (B,T,C), lse (B,NH,T) from qkv (B,T,3C); scratch: nt rows of pad16(2T) floats;
   TH: the mask (gpt2rt__cpu_att_keys) */
static void gpt2rt__cpu_attention_forward_masked(float *out, float *lse, const float *qkv, float *scratch, int64_t B,
                                                 int64_t T, int64_t C, int64_t NH, int64_t TH, const gpt2rt__drop *dr,
                                                 int nt) {
    int64_t HS = C / NH, C3 = 3 * C, Tp = gpt2rt__pad16(T);
    float scale = 1.0f / sqrtf((float)HS);
    if (HS * Tp <= GPT2RT__ATT_TILE && Tp <= GPT2RT__ATT_TMAX) {
        GPT2RT__PARALLEL_FOR(nt)
        for (int64_t bh = 0; bh < B * NH; bh++) {
            const int64_t R = GPT2RT__ATT_ROWS;
            int64_t b = bh / NH, h = bh % NH;
            const float *k0 = qkv + b * T * C3 + C + h * HS;
            float kt[GPT2RT__ATT_TILE], p[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX];
            gpt2rt__cpu_att_tile(kt, k0, C3, T, Tp, HS);
            for (int64_t t0 = 0; t0 < T; t0 += R) {
                int64_t nr = T - t0 < R ? T - t0 : R, ns = t0 + nr; /* the block's keys: [0, ns) */
                const float *q = qkv + (b * T + t0) * C3 + h * HS;
                float *y = out + (b * T + t0) * C + h * HS;
                for (int64_t r = 0; r < nr; r += 4)
                    gpt2rt__cpu_att_scores(p + r * Tp, Tp, q + r * C3, C3, nr - r < 4 ? nr - r : 4, kt, Tp, HS, ns, scale);
                for (int64_t r = 0; r < nr; r++) {
                    lse[bh * T + t0 + r] = gpt2rt__cpu_att_probs(p + r * Tp, t0 + r, TH, ns, bh * T + t0 + r, T, dr);
                    memset(y + r * C, 0, (size_t)HS * sizeof(float));
                }
                for (int64_t r = 0; r < nr; r += 4)
                    gpt2rt__cpu_att_mm(y + r * C, C, nr - r < 4 ? nr - r : 4, p + r * Tp, Tp, 1, k0 + C, C3, HS, ns);
            }
        }
        return;
    }
    GPT2RT__PARALLEL_FOR_RR(nt)
    for (int64_t r = 0; r < B * NH * T; r++) {
        int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
        float *sc = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T);
        const float *q = qkv + (b * T + t) * C3 + h * HS, *k0 = qkv + b * T * C3 + C + h * HS;
        float *y = out + (b * T + t) * C + h * HS;
        for (int64_t s = 0; s <= t; s++) sc[s] = gpt2rt__cpu_att_dot(q, k0 + s * C3, HS, scale);
        lse[r] = gpt2rt__cpu_att_probs(sc, t, TH, t + 1, r, T, dr);
        memset(y, 0, (size_t)HS * sizeof(float));
        gpt2rt__cpu_att_mm(y, 0, 1, sc, 0, 1, k0 + C, C3, HS, t + 1);
    }
}

/* dqkv (B,T,3C) = (overwritten) from dout (B,T,C), the forward's qkv and lse (and
   dropout mask), under the mask TH. One (b,h) per task: dk and dv of a head are summed
   over t in order. With dropout (factor f = mask/(1-p)): y = sum_s p_s f_s v_s, so
   dv_s += p_s f_s dy and dP_s = f_s (dy . v_s), and the softmax's backward is unchanged.
   The tiled path takes a block of queries a step (scores, dP, the rows' dS, then
   dq = dS k, dk += dS^T q, dv += (p f)^T dy); the other one query a step with the same
   ops, its rows in scratch. */
static void gpt2rt__cpu_attention_backward_masked(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                                  float *scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                                                  int64_t TH, const gpt2rt__drop *dr, int nt) {
    int64_t HS = C / NH, C3 = 3 * C, Tp = gpt2rt__pad16(T);
    float scale = 1.0f / sqrtf((float)HS);
    int tiled = HS * Tp <= GPT2RT__ATT_TILE && Tp <= GPT2RT__ATT_TMAX;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t R = GPT2RT__ATT_ROWS;
        int64_t b = bh / NH, h = bh % NH, nb = tiled ? R : 1;
        const float *q0 = qkv + b * T * C3 + h * HS, *k0 = q0 + C, *v0 = q0 + 2 * C;
        const float *dy0 = dout + b * T * C + h * HS;
        float *dq0 = dqkv + b * T * C3 + h * HS, *dk0 = dq0 + C, *dv0 = dq0 + 2 * C;
        float kt[GPT2RT__ATT_TILE], vt[GPT2RT__ATT_TILE];
        float pb[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX], gb[GPT2RT__ATT_ROWS * GPT2RT__ATT_TMAX];
        float *p = pb, *g = gb;
        if (tiled) {
            gpt2rt__cpu_att_tile(kt, k0, C3, T, Tp, HS);
            gpt2rt__cpu_att_tile(vt, v0, C3, T, Tp, HS);
        } else { /* one query's row each */
            p = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(2 * T);
            g = p + T;
        }
        for (int64_t t = 0; t < T; t++) {
            float *d = dq0 + t * C3;
            for (int64_t i = 0; i < HS; i++) d[i] = d[C + i] = d[2 * C + i] = 0.0f;
        }
        for (int64_t t0 = 0; t0 < T; t0 += nb) {
            int64_t nr = T - t0 < nb ? T - t0 : nb, ns = t0 + nr, ld = tiled ? Tp : 0;
            const float *q = q0 + t0 * C3, *dy = dy0 + t0 * C;
            if (tiled) {
                for (int64_t r = 0; r < nr; r += 4) {
                    int64_t m = nr - r < 4 ? nr - r : 4;
                    gpt2rt__cpu_att_scores(p + r * Tp, Tp, q + r * C3, C3, m, kt, Tp, HS, ns, scale);
                    gpt2rt__cpu_att_scores(g + r * Tp, Tp, dy + r * C, C, m, vt, Tp, HS, ns, 1.0f); /* dP */
                }
                for (int64_t r = 0; r < nr; r++)
                    gpt2rt__cpu_att_grad_row(p + r * Tp, g + r * Tp, t0 + r, TH, ns, gpt2rt__pad16(ns),
                                             bh * T + t0 + r, T, lse[bh * T + t0 + r], scale, dr);
            } else {
                for (int64_t s = 0; s < ns; s++) {
                    p[s] = gpt2rt__cpu_att_dot(q, k0 + s * C3, HS, scale);
                    g[s] = gpt2rt__cpu_att_dot(dy, v0 + s * C3, HS, 1.0f);
                }
                gpt2rt__cpu_att_grad_row(p, g, t0, TH, ns, ns, bh * T + t0, T, lse[bh * T + t0], scale, dr);
            }
            for (int64_t r = 0; r < nr; r += 4) /* dq = dS k */
                gpt2rt__cpu_att_mm(dq0 + (t0 + r) * C3, C3, nr - r < 4 ? nr - r : 4, g + r * ld, ld, 1, k0, C3, HS, ns);
            for (int64_t s = 0; s < ns && tiled; s += 4) { /* dk += dS^T q, dv += (p f)^T dy: keys s.. over t */
                int64_t m = ns - s < 4 ? ns - s : 4;
                gpt2rt__cpu_att_mm(dk0 + s * C3, C3, m, g + s, 1, ld, q, C3, HS, nr);
                gpt2rt__cpu_att_mm(dv0 + s * C3, C3, m, p + s, 1, ld, dy, C, HS, nr);
            }
            for (int64_t s = 0; s < ns && !tiled; s++) /* one query: the same terms, a key's row at a time */
                for (int64_t i = 0; i < HS; i++) {
                    dk0[s * C3 + i] = GPT2RT__MADD(g[s], q[i], dk0[s * C3 + i]);
                    dv0[s * C3 + i] = GPT2RT__MADD(p[s], dy[i], dv0[s * C3 + i]);
                }
        }
    }
}

/* GPT-2's causal mask (the kernel labs' reference) */
GPT2RT__MAYBE_UNUSED static void gpt2rt__cpu_attention_forward(float *out, float *lse, const float *qkv, float *scratch, int64_t B, int64_t T,
                                          int64_t C, int64_t NH, const gpt2rt__drop *dr, int nt) {
    gpt2rt__cpu_attention_forward_masked(out, lse, qkv, scratch, B, T, C, NH, T, dr, nt);
}
GPT2RT__MAYBE_UNUSED static void gpt2rt__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                           float *scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                                           const gpt2rt__drop *dr, int nt) {
    gpt2rt__cpu_attention_backward_masked(dqkv, dout, qkv, lse, scratch, B, T, C, NH, T, dr, nt);
}

/* ---- GELU, tanh form ---- */
#define GPT2RT__GELU_K 0.7978845608028654f /* sqrt(2/pi) */
/* tanh(u) = sign(u) (1 - 2 / (exp(2|u|) + 1)), exp by 2^k times a degree-6 Taylor
   polynomial on |r| <= ln2/2 (truncation r^7/7! < 1.2e-7 relative): plain arithmetic,
   where the C library's tanhf is a call per element (38% of a small model's step).
   Absolute error about 1e-7, which is what GELU needs: it uses 1 + tanh and
   1 - tanh^2. Above |u| = 10, tanh is 1 in float. Written so that compilers vectorise
   it under default flags: |u|, the clamp and the sign on the bits (no fminf call, no
   comparison of floats, which -ftrapping-math keeps as a branch), k = floor(...) as
   a conversion to int (exact: the value is positive; floorf does not vectorise in
   gcc 12). */
static void gpt2rt__tanh_n(float *x, int64_t n) { /* x (n) = tanh(x), in place */
    for (int64_t i = 0; i < n; i++) {
        uint32_t ub, ab, tb;
        memcpy(&ub, x + i, sizeof ub);
        ab = ub & 0x7FFFFFFFu;
        ab = ab < 0x41200000u ? ab : 0x41200000u; /* min(|u|, 10.0f); NaN too */
        float a;
        memcpy(&a, &ab, sizeof a);
        a *= 2.0f;
        int32_t k = (int32_t)(a * 1.44269504088896341f + 0.5f); /* round(a / ln2), in [0, 29] */
        float kf = (float)k;
        float r = (a - kf * 0.693145751953125f) - kf * 1.42860682030941723e-6f; /* ln2 in two parts */
        float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
        int32_t bits = (k + 127) * (1 << 23); /* 2^k */
        float two_k;
        memcpy(&two_k, &bits, sizeof two_k);
        float t = 1.0f - 2.0f / (e * two_k + 1.0f);
        memcpy(&tb, &t, sizeof tb);
        tb |= ub & 0x80000000u;
        memcpy(x + i, &tb, sizeof tb);
    }
}

/* out (N) = gelu(inp (N)); the backward computes tanh the same way (the same bits) */
static void gpt2rt__cpu_gelu_forward(float *out, const float *inp, int64_t N, int nt) {
    int64_t nblk = (N + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * 64, n = N - i0 < 64 ? N - i0 : 64;
        const float *x = inp + i0;
        float th[64];
        for (int64_t i = 0; i < n; i++) th[i] = GPT2RT__GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        gpt2rt__tanh_n(th, n);
        for (int64_t i = 0; i < n; i++) out[i0 + i] = 0.5f * x[i] * (1.0f + th[i]);
    }
}

/* dinp (N) = gelu'(inp) * dout; dinp may alias dout. tanh as in the forward. */
static void gpt2rt__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t N, int nt) {
    int64_t nblk = (N + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * 64, n = N - i0 < 64 ? N - i0 : 64;
        const float *x = inp + i0;
        float th[64];
        for (int64_t i = 0; i < n; i++) th[i] = GPT2RT__GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        gpt2rt__tanh_n(th, n);
        for (int64_t i = 0; i < n; i++) {
            float sech2 = 1.0f - th[i] * th[i];
            float g = 0.5f * (1.0f + th[i]) + 0.5f * x[i] * sech2 * GPT2RT__GELU_K * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
            dinp[i0 + i] = g * dout[i0 + i];
        }
    }
}

/* y (N) += x (N) */
static void gpt2rt__cpu_residual_add(float *y, const float *x, int64_t N, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) y[i] += x[i];
}

/* ---- exp for the softmaxes (the classifier's, attention's): vectorisable, within 2 ulp of expf ----
   exp(a) = 2^k exp(r), k = round(a / ln2) (taken as floor(y + 128.5) - 128, a
   conversion of a positive value: exact and vectorised), r = a - k ln2 in two parts,
   |r| <= ln2/2, exp(r) by its Taylor polynomial of degree 7 (truncation r^8/8! < 5e-9
   relative). Arguments below -87 give exp(-87) (1.6e-38: nothing next to a softmax
   sum of at least 1); the classifier's arguments are x - max and x - lse, at most 0,
   and the formula holds up to 88. The C library's expf is a call per element: with
   it, the softmax over 50257 logits was the largest op of the step after the matrix
   products. A float's magnitude bits grow with its magnitude, so the clamp is an
   unsigned min on them, at 87 below 0 and 88 above, the sign put back (no float
   comparison, see gpt2rt__tanh_n; the int conversion below must stay in range: a NaN
   or an infinity there is undefined behaviour), and a NaN argument gives NaN, so a
   poisoned step's loss still reads NaN and its update is skipped. The NaN is put in
   by a mask: gcc 12 turned "nan ? NaN : y" into a branch around the whole formula,
   and no loop around it vectorised. */
static inline float gpt2rt__exp_fast(float a) {
    uint32_t ub;
    memcpy(&ub, &a, sizeof ub);
    uint32_t nan = (ub & 0x7FFFFFFFu) > 0x7F800000u;
    /* |a| clamped to 87 for a negative, 88 for a positive, by a limit that depends on the
       sign: with a constant one (and a select for the NaN below) gcc folded the clamped
       case to its constant result behind a branch, and -ftrapping-math then kept the float
       work under it from vectorising: 6 ns a logit instead of under 1 */
    uint32_t sign = ub & 0x80000000u, mag = ub & 0x7FFFFFFFu, lim = 0x42B00000u - (sign >> 31) * 0x20000u;
    ub = sign | (mag > lim ? lim : mag);
    memcpy(&a, &ub, sizeof a);
    int32_t k = (int32_t)(a * 1.44269504088896341f + 128.5f) - 128; /* in [-125, 127] */
    float kf = (float)k;
    float r = (a - kf * 0.693145751953125f) - kf * 1.42860682030941723e-6f;
    float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 +
              r * (1.0f / 5040)))))));
    int32_t bits = (k + 127) * (1 << 23);
    float two_k, y;
    memcpy(&two_k, &bits, sizeof two_k);
    y = e * two_k;
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    yb = (yb & (nan - 1u)) | (0x7FC00000u & (0u - nan)); /* masks, not a select: see the clamp */
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* ---- cross-entropy over the first V of Vp logits ---- */
/* losses (BT) and lse (BT) from logits (BT,Vp) and targets (BT) (negative: ignored).
   Returns the mean loss over the counted targets; *count gets their number, *sum
   the losses' sum. */
static float gpt2rt__cpu_crossentropy_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
                                          int64_t BT, int64_t V, int64_t Vp, int64_t *count, double *sum, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        /* the max and the sum in 16 lanes (vectorised; the lanes combined in a fixed order) */
        float lm[16], ls[16] = {0};
        for (int j = 0; j < 16; j++) lm[j] = -INFINITY;
        int64_t v16 = V - V % 16;
        for (int64_t v = 0; v < v16; v += 16)
            for (int j = 0; j < 16; j++) lm[j] = x[v + j] > lm[j] ? x[v + j] : lm[j];
        float mx = -INFINITY;
        for (int64_t v = v16; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int j = 0; j < 16; j++) mx = lm[j] > mx ? lm[j] : mx;
        for (int64_t v = 0; v < v16; v += 16)
            for (int j = 0; j < 16; j++) ls[j] += gpt2rt__exp_fast(x[v + j] - mx);
        float sum = 0.0f;
        for (int64_t v = v16; v < V; v++) sum += gpt2rt__exp_fast(x[v] - mx);
        for (int j = 0; j < 16; j += 2) sum += ls[j] + ls[j + 1];
        lse[i] = mx + logf(sum);
        losses[i] = targets[i] >= 0 ? lse[i] - x[targets[i]] : 0.0f;
    }
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < BT; i++)
        if (targets[i] >= 0) { total += losses[i]; n++; }
    *count = n;
    *sum = total;
    return n ? (float)(total / (double)n) : 0.0f;
}

/* logits (BT,Vp) become dlogits in place: (softmax - onehot) * dloss; padded
   columns and ignored rows get 0 */
static void gpt2rt__cpu_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                                          float dloss, int64_t BT, int64_t V, int64_t Vp, int nt) {
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < BT; i++) {
        float *x = logits + i * Vp;
        if (targets[i] < 0) { memset(x, 0, (size_t)Vp * sizeof(float)); continue; }
        float l = lse[i];
        for (int64_t v = 0; v < V; v++) x[v] = gpt2rt__exp_fast(x[v] - l) * dloss;
        x[targets[i]] -= dloss;
        for (int64_t v = V; v < Vp; v++) x[v] = 0.0f;
    }
}

/* ==== 7.2 Matrix product ==== */

/* ---- matrix product (kernels/cpu_matmul.c validates and times it) ---- */
/* ---------------------------------------------------------------------------
 * CPU fp32 GEMM (row-major):  C(M,N) (+)= op(A)(M,K) * op(B)(K,N) (+ bias)
 *   op(A)[m,k] = trans_a ? A[k*lda+m] : A[m*lda+k]
 *   op(B)[k,n] = trans_b ? B[n*ldb+k] : B[k*ldb+n]
 * BLIS-style: K is cut into KC slices, N into NC blocks, M into MC blocks;
 * panels of A and B are packed (zero padded) into the caller's workspace and
 * an MR x NR register-blocked micro-kernel does the flops.
 * Determinism: every C element is produced by the same micro-kernel, summing
 * k in increasing order inside a KC slice and the slices in increasing order;
 * the slicing depends only on K.  Threads only split the M/N tile grid, so the
 * result is bitwise independent of the number of OpenMP threads.
 * Threading: the routine opens its own `omp parallel` region of n_threads
 * (<= the n_threads given to gpt2rt__sgemm_workspace_bytes); it must not be
 * called from inside a parallel region.
 * ------------------------------------------------------------------------- */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__SG_UNUSED __attribute__((unused))
#else
#define GPT2RT__SG_UNUSED
#endif
/* SIMD paths need GCC/Clang x86-64 (also fine as nvcc host code); define
   GPT2RT_SGEMM_NO_SIMD to force the portable C kernel. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#define GPT2RT__SG_X86 1
#else
#define GPT2RT__SG_X86 0
#endif
/* tiny products run on the calling thread only (no team spawn) */
#ifdef _OPENMP
#define GPT2RT__SG_OMP_PARALLEL _Pragma("omp parallel num_threads(n_threads) if((double)M * (double)N * (double)K > 2.0e5)")
#else
#define GPT2RT__SG_OMP_PARALLEL
#endif

#ifndef GPT2RT_SGEMM_KC
#define GPT2RT_SGEMM_KC 256   /* k slice: B micro-panel KC*NR*4 = 32 KiB stays in L1 (48 KiB) */
#endif
#ifndef GPT2RT_SGEMM_MC
#define GPT2RT_SGEMM_MC 384   /* rows of packed A block: MC*KC*4 = 384 KiB, L2 resident */
#endif
#ifndef GPT2RT_SGEMM_NC
#define GPT2RT_SGEMM_NC 768   /* cols of packed B block: KC*NC*4 = 768 KiB; with M=256 the C block (M x NC) also stays in L2 */
#endif
#if GPT2RT_SGEMM_KC < 1 || GPT2RT_SGEMM_MC < 14 || GPT2RT_SGEMM_NC < 32
#error "gpt2rt.h: GPT2RT_SGEMM_KC >= 1, GPT2RT_SGEMM_MC >= 14 and GPT2RT_SGEMM_NC >= 32 (one SIMD tile per block at least)"
#endif

/* micro-kernel: acc = Ap(kc x MR packed) * Bp(kc x NR packed);
 * mode 0: C = acc, 1: C = acc + bias[0..NR), 2: C += acc */
typedef void (*gpt2rt__sg_kern_fn)(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias);

/* portable C micro-kernel: 4 x 8 tile in 32 scalar accumulators (compilers
   usually turn each row into SIMD registers) */
#define GPT2RT__SG_GEN_MR 4
#define GPT2RT__SG_GEN_NR 8
#define GPT2RT__SG_GEN_ROWS(X) X(0) X(1) X(2) X(3)
#define GPT2RT__SG_GEN_DECL(i) float c##i##0 = 0.0f, c##i##1 = 0.0f, c##i##2 = 0.0f, c##i##3 = 0.0f, \
    c##i##4 = 0.0f, c##i##5 = 0.0f, c##i##6 = 0.0f, c##i##7 = 0.0f;
#define GPT2RT__SG_GEN_FMA(i) { const float a = Ap[i]; \
    c##i##0 += a * b0; c##i##1 += a * b1; c##i##2 += a * b2; c##i##3 += a * b3; \
    c##i##4 += a * b4; c##i##5 += a * b5; c##i##6 += a * b6; c##i##7 += a * b7; }
#define GPT2RT__SG_GEN_OUT(i) { float *c = C + (i) * ldc; \
    if (mode == 0) { c[0] = c##i##0; c[1] = c##i##1; c[2] = c##i##2; c[3] = c##i##3; \
                     c[4] = c##i##4; c[5] = c##i##5; c[6] = c##i##6; c[7] = c##i##7; } \
    else if (mode == 1) { c[0] = c##i##0 + bias[0]; c[1] = c##i##1 + bias[1]; c[2] = c##i##2 + bias[2]; \
                     c[3] = c##i##3 + bias[3]; c[4] = c##i##4 + bias[4]; c[5] = c##i##5 + bias[5]; \
                     c[6] = c##i##6 + bias[6]; c[7] = c##i##7 + bias[7]; } \
    else { c[0] = c[0] + c##i##0; c[1] = c[1] + c##i##1; c[2] = c[2] + c##i##2; c[3] = c[3] + c##i##3; \
           c[4] = c[4] + c##i##4; c[5] = c[5] + c##i##5; c[6] = c[6] + c##i##6; c[7] = c[7] + c##i##7; } }
static void gpt2rt__sg_kern_generic(int64_t kc, const float *Ap, const float *Bp,
                                    float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_DECL)
    for (k = 0; k < kc; k++) {
        const float b0 = Bp[0], b1 = Bp[1], b2 = Bp[2], b3 = Bp[3];
        const float b4 = Bp[4], b5 = Bp[5], b6 = Bp[6], b7 = Bp[7];
        GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_FMA)
        Ap += GPT2RT__SG_GEN_MR;
        Bp += GPT2RT__SG_GEN_NR;
    }
    GPT2RT__SG_GEN_ROWS(GPT2RT__SG_GEN_OUT)
}

#if GPT2RT__SG_X86
/* ---- AVX-512: 14 x 32 tile, 28 zmm accumulators + 2 B vectors + 1 broadcast ---- */
#define GPT2RT__SG_512_MR 14
#define GPT2RT__SG_512_NR 32
#define GPT2RT__SG_512_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define GPT2RT__SG_512_DECL(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();
#define GPT2RT__SG_512_FMA(i) { __m512 av = _mm512_set1_ps(Ap[i]); \
    c##i##a = _mm512_fmadd_ps(av, b0, c##i##a); c##i##b = _mm512_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_512_ST0(i) _mm512_storeu_ps(C + i * ldc, c##i##a); _mm512_storeu_ps(C + i * ldc + 16, c##i##b);
#define GPT2RT__SG_512_ST1(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(c##i##a, bv0)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(c##i##b, bv1));
#define GPT2RT__SG_512_ST2(i) _mm512_storeu_ps(C + i * ldc, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc), c##i##a)); \
    _mm512_storeu_ps(C + i * ldc + 16, _mm512_add_ps(_mm512_loadu_ps(C + i * ldc + 16), c##i##b));
__attribute__((target("avx512f")))
static void gpt2rt__sg_kern_avx512(int64_t kc, const float *Ap, const float *Bp,
                                   float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_512_ROWS(GPT2RT__SG_512_DECL)
    for (k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_FMA)
        Ap += GPT2RT__SG_512_MR;
        Bp += GPT2RT__SG_512_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST0)
    } else if (mode == 1) {
        __m512 bv0 = _mm512_loadu_ps(bias), bv1 = _mm512_loadu_ps(bias + 16);
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST1)
    } else {
        GPT2RT__SG_512_ROWS(GPT2RT__SG_512_ST2)
    }
}

/* g++ 12 emits a false -Wmaybe-uninitialized from inside its own avx512 headers
   (_mm512_undefined_ps in the shuffle intrinsics); silence it for the packing helpers below */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* 16x16 transpose of r[0..15] (rows) into r[0..15] (columns) */
__attribute__((target("avx512f")))
static inline void gpt2rt__sg_tr16(__m512 *r) {
    __m512 t[16], u[16];
    int i, g, c;
    for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (g = 0; g < 4; g++) {
        __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (c = 0; c < 4; c++) {
        __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 x2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 x3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(x1, x3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
    }
}

/* transpose-pack: rows src + i*ld (i < rows <= 16), k in [0,kc) -> dst[k*dst_ld + i] for i < width
   (width 12 or 16 lanes written per k; rows beyond `rows` are zero) */
__attribute__((target("avx512f")))
static void gpt2rt__sg_tpack16(float *dst, int64_t dst_ld, int width, const float *src, int64_t ld,
                               int64_t rows, int64_t kc) {
    __m512 r[16];
    const __mmask16 wm = (__mmask16)((1u << width) - 1u);
    int64_t k0, i, k;
    for (k0 = 0; k0 < kc; k0 += 16) {
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        __mmask16 km = (__mmask16)((1u << kn) - 1u);
        for (i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld + k0) : _mm512_setzero_ps();
        gpt2rt__sg_tr16(r);
        for (k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * dst_ld, wm, r[k]);
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_a_avx512(float *Ap, const float *A, int64_t lda, int trans_a,
                                     int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, k;
    (void)mr; /* == GPT2RT__SG_512_MR */
    for (p = 0; p < m_n; p += GPT2RT__SG_512_MR) {
        int64_t rows = m_n - p < GPT2RT__SG_512_MR ? m_n - p : GPT2RT__SG_512_MR;
        float *dst = Ap + p * kc;
        if (trans_a) {
            __mmask16 rm = (__mmask16)((1u << rows) - 1u);
            const float *src = A + k0 * lda + m0 + p;
            for (k = 0; k < kc; k++)
                _mm512_mask_storeu_ps(dst + k * GPT2RT__SG_512_MR, (__mmask16)((1u << GPT2RT__SG_512_MR) - 1u),
                                      _mm512_maskz_loadu_ps(rm, src + k * lda));
        } else {
            gpt2rt__sg_tpack16(dst, GPT2RT__SG_512_MR, GPT2RT__SG_512_MR, A + (m0 + p) * lda + k0, lda, rows, kc);
        }
    }
}

__attribute__((target("avx512f")))
static void gpt2rt__sg_pack_b_avx512(float *Bp, const float *B, int64_t ldb, int trans_b,
                                     int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, k;
    (void)nr; /* == GPT2RT__SG_512_NR */
    for (p = 0; p < n_n; p += GPT2RT__SG_512_NR) {
        int64_t cols = n_n - p < GPT2RT__SG_512_NR ? n_n - p : GPT2RT__SG_512_NR;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            const float *src = B + k0 * ldb + n0 + p;
            if (cols == GPT2RT__SG_512_NR) {
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_loadu_ps(src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_loadu_ps(src + k * ldb + 16));
                }
            } else {
                __mmask16 m0k = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
                __mmask16 m1k = (__mmask16)(cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
                for (k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_maskz_loadu_ps(m0k, src + k * ldb));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_maskz_loadu_ps(m1k, src + k * ldb + 16));
                }
            }
        } else {
            const float *src = B + (n0 + p) * ldb + k0;
            gpt2rt__sg_tpack16(dst, 32, 16, src, ldb, cols, kc);
            gpt2rt__sg_tpack16(dst + 16, 32, 16, cols > 16 ? src + 16 * ldb : src, ldb, cols > 16 ? cols - 16 : 0, kc);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* ---- AVX2+FMA: 6 x 16 tile, 12 ymm accumulators ---- */
#define GPT2RT__SG_256_MR 6
#define GPT2RT__SG_256_NR 16
#define GPT2RT__SG_256_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define GPT2RT__SG_256_DECL(i) __m256 c##i##a = _mm256_setzero_ps(), c##i##b = _mm256_setzero_ps();
#define GPT2RT__SG_256_FMA(i) { __m256 av = _mm256_broadcast_ss(Ap + i); \
    c##i##a = _mm256_fmadd_ps(av, b0, c##i##a); c##i##b = _mm256_fmadd_ps(av, b1, c##i##b); }
#define GPT2RT__SG_256_ST0(i) _mm256_storeu_ps(C + i * ldc, c##i##a); _mm256_storeu_ps(C + i * ldc + 8, c##i##b);
#define GPT2RT__SG_256_ST1(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(c##i##a, bv0)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(c##i##b, bv1));
#define GPT2RT__SG_256_ST2(i) _mm256_storeu_ps(C + i * ldc, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc), c##i##a)); \
    _mm256_storeu_ps(C + i * ldc + 8, _mm256_add_ps(_mm256_loadu_ps(C + i * ldc + 8), c##i##b));
__attribute__((target("avx2,fma")))
static void gpt2rt__sg_kern_avx2(int64_t kc, const float *Ap, const float *Bp,
                                 float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DECL)
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_FMA)
        Ap += GPT2RT__SG_256_MR;
        Bp += GPT2RT__SG_256_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST0)
    } else if (mode == 1) {
        __m256 bv0 = _mm256_loadu_ps(bias), bv1 = _mm256_loadu_ps(bias + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST1)
    } else {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST2)
    }
}
/* the same tile and the same fused multiply-adds in the same order with A read in
   place (op(A) = A, rows lda apart) instead of packed: a skinny product (small N)
   reads each A panel once or twice, so packing it would cost as much as the product.
   Rows past `rows` repeat the last row (computed, then dropped by the caller). */
#define GPT2RT__SG_256_DA(i) const float *a##i = A + (i < rows ? i : rows - 1) * lda;
#define GPT2RT__SG_256_DFMA(i) { __m256 av = _mm256_broadcast_ss(a##i + k); \
    c##i##a = _mm256_fmadd_ps(av, b0, c##i##a); c##i##b = _mm256_fmadd_ps(av, b1, c##i##b); }
__attribute__((target("avx2,fma")))
static void gpt2rt__sg_kern_avx2_direct(int64_t kc, const float *A, int64_t lda, int64_t rows, const float *Bp,
                                        float *C, int64_t ldc, int mode, const float *bias) {
    int64_t k;
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DECL)
    GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DA)
    for (k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_DFMA)
        Bp += GPT2RT__SG_256_NR;
    }
    if (mode == 0) {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST0)
    } else if (mode == 1) {
        __m256 bv0 = _mm256_loadu_ps(bias), bv1 = _mm256_loadu_ps(bias + 8);
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST1)
    } else {
        GPT2RT__SG_256_ROWS(GPT2RT__SG_256_ST2)
    }
}
#endif /* GPT2RT__SG_X86 */

/* pack op(A)[m0+i, k0+k] for i<mr_tot (zero beyond m_n), k<kc into mr-row micro-panels: Ap[p][k][i] */
static void gpt2rt__sg_pack_a(float *Ap, const float *A, int64_t lda, int trans_a,
                              int64_t m0, int64_t m_n, int64_t k0, int64_t kc, int mr) {
    int64_t p, i, k;
    for (p = 0; p < m_n; p += mr) {
        int64_t rows = m_n - p < mr ? m_n - p : mr;
        float *dst = Ap + p * kc;
        if (trans_a) {
            for (k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + m0 + p;
                for (i = 0; i < rows; i++) dst[k * mr + i] = src[i];
                for (; i < mr; i++) dst[k * mr + i] = 0.0f;
            }
        } else {
            for (i = 0; i < rows; i++) {
                const float *src = A + (m0 + p + i) * lda + k0;
                for (k = 0; k < kc; k++) dst[k * mr + i] = src[k];
            }
            for (; i < mr; i++)
                for (k = 0; k < kc; k++) dst[k * mr + i] = 0.0f;
        }
    }
}

/* pack op(B)[k0+k, n0+j] for j<n_n (zero padded to nr), k<kc into nr-col micro-panels: Bp[p][k][j] */
static void gpt2rt__sg_pack_b(float *Bp, const float *B, int64_t ldb, int trans_b,
                              int64_t n0, int64_t n_n, int64_t k0, int64_t kc, int nr) {
    int64_t p, j, k;
    for (p = 0; p < n_n; p += nr) {
        int64_t cols = n_n - p < nr ? n_n - p : nr;
        float *dst = Bp + p * kc;
        if (!trans_b) {
            for (k = 0; k < kc; k++) {
                const float *src = B + (k0 + k) * ldb + n0 + p;
                for (j = 0; j < cols; j++) dst[k * nr + j] = src[j];
                for (; j < nr; j++) dst[k * nr + j] = 0.0f;
            }
        } else {
            for (j = 0; j < cols; j++) {
                const float *src = B + (n0 + p + j) * ldb + k0;
                for (k = 0; k < kc; k++) dst[k * nr + j] = src[k];
            }
            for (; j < nr; j++)
                for (k = 0; k < kc; k++) dst[k * nr + j] = 0.0f;
        }
    }
}

typedef void (*gpt2rt__sg_pack_fn)(float *dst, const float *src, int64_t ld, int trans,
                                   int64_t i0, int64_t i_n, int64_t k0, int64_t kc, int r);
/* a kernel that reads op(A) = A in place (rows lda apart, `rows` of them valid) */
typedef void (*gpt2rt__sg_kern_direct_fn)(int64_t kc, const float *A, int64_t lda, int64_t rows, const float *Bp,
                                          float *C, int64_t ldc, int mode, const float *bias);
typedef struct {
    gpt2rt__sg_kern_fn kern;
    gpt2rt__sg_kern_direct_fn kern_direct; /* NULL: A is always packed */
    gpt2rt__sg_pack_fn pack_a, pack_b;
    int mr, nr;
} gpt2rt__sg_impl;

static gpt2rt__sg_impl gpt2rt__sg_select(void) {
    gpt2rt__sg_impl im;
    im.kern = gpt2rt__sg_kern_generic;
    im.kern_direct = NULL;
    im.pack_a = gpt2rt__sg_pack_a;
    im.pack_b = gpt2rt__sg_pack_b;
    im.mr = GPT2RT__SG_GEN_MR;
    im.nr = GPT2RT__SG_GEN_NR;
#if GPT2RT__SG_X86
    __builtin_cpu_init();
#ifdef GPT2RT_SGEMM_FORCE_PATH /* lab testing only: 1 = portable C, 2 = AVX2 */
    if (GPT2RT_SGEMM_FORCE_PATH == 1) return im;
    if (GPT2RT_SGEMM_FORCE_PATH != 2 && __builtin_cpu_supports("avx512f")) {
#else
    if (__builtin_cpu_supports("avx512f")) {
#endif
        im.kern = gpt2rt__sg_kern_avx512;
        im.pack_a = gpt2rt__sg_pack_a_avx512;
        im.pack_b = gpt2rt__sg_pack_b_avx512;
        im.mr = GPT2RT__SG_512_MR;
        im.nr = GPT2RT__SG_512_NR;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        im.kern = gpt2rt__sg_kern_avx2;
        im.kern_direct = gpt2rt__sg_kern_avx2_direct;
        im.mr = GPT2RT__SG_256_MR;
        im.nr = GPT2RT__SG_256_NR;
    }
#endif
    return im;
}

/* floats of workspace per thread (rounded to 64 bytes) */
static size_t gpt2rt__sg_thread_floats(void) {
    size_t f = (size_t)GPT2RT_SGEMM_MC * GPT2RT_SGEMM_KC + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC + 16;
    return (f + 15) & ~(size_t)15;
}

GPT2RT__SG_UNUSED
static size_t gpt2rt__sgemm_workspace_bytes(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * gpt2rt__sg_thread_floats() * sizeof(float);
}

/* one thread's rectangle [m0,m1) x [n0,n1) of C, all of K */
static void gpt2rt__sg_region(const gpt2rt__sg_impl *im, int trans_a, int trans_b,
                              int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, int64_t kcb,
                              const float *A, int64_t lda, const float *B, int64_t ldb,
                              const float *bias, int accumulate, float *C, int64_t ldc, float *ws) {
    const int mr = im->mr, nr = im->nr;
    const int64_t mcb = GPT2RT_SGEMM_MC - GPT2RT_SGEMM_MC % mr;
    const int64_t ncb = GPT2RT_SGEMM_NC - GPT2RT_SGEMM_NC % nr;
    float *Bp = ws;
    float *Ap = ws + (size_t)GPT2RT_SGEMM_KC * GPT2RT_SGEMM_NC;
    float tmp[32 * 32]; /* edge tile buffer, >= mr*nr for every kernel */
    int64_t jc, pc, ic, jr, ir, i, j;
    /* A in place where a packed panel would serve few column panels (N up to 4 of them) */
    int direct = im->kern_direct && !trans_a && n1 - n0 <= 4 * (int64_t)nr;
    for (jc = n0; jc < n1; jc += ncb) {
        int64_t nn = n1 - jc < ncb ? n1 - jc : ncb;
        for (pc = 0; pc < K; pc += kcb) {
            int64_t kc = K - pc < kcb ? K - pc : kcb;
            int first = (pc == 0) && !accumulate;
            int mode = first ? (bias ? 1 : 0) : 2;
            im->pack_b(Bp, B, ldb, trans_b, jc, nn, pc, kc, nr);
            for (ic = m0; ic < m1; ic += mcb) {
                int64_t mm = m1 - ic < mcb ? m1 - ic : mcb;
                if (!direct) im->pack_a(Ap, A, lda, trans_a, ic, mm, pc, kc, mr);
                for (jr = 0; jr < nn; jr += nr) {
                    int64_t nw = nn - jr < nr ? nn - jr : nr;
                    const float *bp = Bp + jr * kc;
                    const float *bb = bias ? bias + jc + jr : NULL;
                    for (ir = 0; ir < mm; ir += mr) {
                        int64_t mw = mm - ir < mr ? mm - ir : mr;
                        const float *ap = Ap + ir * kc, *ad = A + (ic + ir) * lda + pc;
                        float *c = C + (ic + ir) * ldc + jc + jr;
                        if (mw == mr && nw == nr) {
                            if (direct) im->kern_direct(kc, ad, lda, mw, bp, c, ldc, mode, bb);
                            else im->kern(kc, ap, bp, c, ldc, mode, bb);
                        } else {
                            if (direct) im->kern_direct(kc, ad, lda, mw, bp, tmp, nr, 0, NULL);
                            else im->kern(kc, ap, bp, tmp, nr, 0, NULL);
                            for (i = 0; i < mw; i++)
                                for (j = 0; j < nw; j++) {
                                    float t = tmp[i * nr + j];
                                    if (mode == 0) c[i * ldc + j] = t;
                                    else if (mode == 1) c[i * ldc + j] = t + bb[j];
                                    else c[i * ldc + j] = c[i * ldc + j] + t;
                                }
                        }
                    }
                }
            }
        }
    }
}

GPT2RT__SG_UNUSED
static void gpt2rt__sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb,
                          const float *bias, int accumulate,
                          float *C, int64_t ldc, void *workspace, int n_threads) {
    gpt2rt__sg_impl im;
    (void)n_threads;
    int64_t kcb, nkb;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        int64_t m, n;
        if (accumulate) return;
        for (m = 0; m < M; m++)
            for (n = 0; n < N; n++) C[m * ldc + n] = bias ? bias[n] : 0.0f;
        return;
    }
    im = gpt2rt__sg_select();
    /* K slicing depends only on K: equal-ish slices of at most KC */
    nkb = (K + GPT2RT_SGEMM_KC - 1) / GPT2RT_SGEMM_KC;
    kcb = (K + nkb - 1) / nkb;
    GPT2RT__SG_OMP_PARALLEL
    {
        int nt = 1, tid = 0;
        int64_t tiles_m = (M + im.mr - 1) / im.mr, tiles_n = (N + im.nr - 1) / im.nr;
        int64_t tm = 1, tn = 1, best = -1, d;
        float *ws;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        ws = (float *)workspace + (size_t)tid * gpt2rt__sg_thread_floats();
        /* choose a tm x tn thread grid minimising per-thread work + packing */
        for (d = 1; d <= nt; d++) {
            int64_t dm, dn, rm, rn, cost;
            if (nt % d) continue;
            dm = d;
            dn = nt / d;
            if (dm > tiles_m || dn > tiles_n) continue;
            rm = (tiles_m + dm - 1) / dm * im.mr;
            rn = (tiles_n + dn - 1) / dn * im.nr;
            cost = rm * rn * K / 32 + K * (rm * ((rn + GPT2RT_SGEMM_NC - 1) / GPT2RT_SGEMM_NC) + rn);
            if (best < 0 || cost < best) { best = cost; tm = dm; tn = dn; }
        }
        if (best < 0) { /* fewer tiles than threads: split the longer side only */
            if (tiles_m >= tiles_n) { tm = nt < tiles_m ? nt : tiles_m; tn = 1; }
            else { tn = nt < tiles_n ? nt : tiles_n; tm = 1; }
        }
        if (tid < tm * tn) {
            int64_t ti = tid / tn, tj = tid % tn;
            int64_t mt0 = tiles_m * ti / tm, mt1 = tiles_m * (ti + 1) / tm;
            int64_t nt0 = tiles_n * tj / tn, nt1 = tiles_n * (tj + 1) / tn;
            int64_t m0 = mt0 * im.mr, m1 = mt1 * im.mr, n0 = nt0 * im.nr, n1 = nt1 * im.nr;
            if (m1 > M) m1 = M;
            if (n1 > N) n1 = N;
            if (m0 < m1 && n0 < n1)
                gpt2rt__sg_region(&im, trans_a, trans_b, m0, m1, n0, n1, K, kcb, A, lda, B, ldb,
                                  bias, accumulate, C, ldc, ws);
        }
    }
}

/* out (BT,OC) = inp (BT,IC) W^T + b;  W (OC,IC), b (OC) or NULL */
static void gpt2rt__cpu_matmul_forward(float *out, const float *inp, const float *w, const float *b,
                                   int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    gpt2rt__sgemm(0, 1, BT, OC, IC, inp, IC, w, IC, b, 0, out, OC, ws, nt);
}

/* dinp (BT,IC) = dout W;  dw (OC,IC) += dout^T inp;  db (OC) += sum over rows of dout.
   dw and db NULL: a frozen weight, only dinp (and inp may be NULL); dinp NULL: the
   input needs no gradient (patches' in_layer) */
static void gpt2rt__cpu_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int64_t BT, int64_t IC, int64_t OC, void *ws, int nt) {
    if (dinp) gpt2rt__sgemm(0, 0, BT, IC, OC, dout, OC, w, IC, NULL, 0, dinp, IC, ws, nt);
    if (dw) gpt2rt__sgemm(1, 0, OC, IC, BT, dout, OC, inp, IC, NULL, 1, dw, IC, ws, nt);
    if (!db) return;
    /* column sums: threads own column blocks, rows are summed in order */
    int64_t nblk = (OC + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o0 = blk * 64, o1 = o0 + 64 < OC ? o0 + 64 : OC;
        float acc[64];
        for (int64_t o = o0; o < o1; o++) acc[o - o0] = 0.0f;
        for (int64_t r = 0; r < BT; r++) {
            const float *row = dout + r * OC;
            for (int64_t o = o0; o < o1; o++) acc[o - o0] += row[o];
        }
        for (int64_t o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
}

/* ---- bf16 weights: the matrix-vector products of generation (inference_weights) ----
   out[r] = dot(x, w + r*K, K) over n_rows rows of bf16 weights (row stride K), x fp32,
   the products and sums in fp32. Four paths, picked per call (gpt2rt__bf16_rows_pick):
   - portable C, AVX2, AVX-512F: each bf16 widens to its fp32 exactly (a 16-bit shift),
     the product and the sum are rounded apart (no FMA) in the 16 lanes of
     gpt2rt__cpu_dot, reduced in its order: the three give bitwise the same floats
     on every compiler and mode (GPT2RT__NO_CONTRACT below);
   - AVX-512 BF16 (Zen 4, Sapphire Rapids), for a prefill's many rows: VDPBF16PS multiplies bf16 by bf16, so x is
     split once per call into hi = bf16(x) and lo = bf16(x - hi) (x = hi + lo within
     2^-16 relative) and each weight meets both; the products are exact in fp32, the
     sums run in pairs per lane: within 2^-16 + 3K 2^-24 of sum |w x| of the others
     (tests/test_infer_bf16.c). It multiplies 32 weights an instruction.
   */
typedef void (*gpt2rt__bf16_rows_fn)(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows);

/* gcc outside ISO C modes (-std=gnu17, its default; g++; nvcc's host pass) contracts a
   product and a sum in separate statements, and even intrinsics' mul and add, into one
   FMA (-ffp-contract=fast): these functions round the two apart on every compiler */
#if defined(__GNUC__) && !defined(__clang__)
#define GPT2RT__NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define GPT2RT__NO_CONTRACT /* clang contracts within one expression only (fp-contract=on) */
#endif

/* the lanes' fold and the tail, in gpt2rt__cpu_dot's order */
GPT2RT__NO_CONTRACT static float gpt2rt__bf16_fold(const float acc[16], const float *x, const uint16_t *w, int64_t k0, int64_t K) {
    float s = 0.0f;
    for (int64_t i = k0; i < K; i++) {
        float p = x[i] * gpt2rt__bf16_widen(w[i]); /* its own statement: never fused (clang's fp-contract=on) */
        s += p;
    }
    for (int j = 0; j < 16; j += 2) s += acc[j] + acc[j + 1];
    return s;
}

GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_c(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    for (int64_t r = 0; r < n_rows; r++) {
        const uint16_t *wr = w + r * K;
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= K; i += 16)
            for (int j = 0; j < 16; j++) {
                float p = x[i + j] * gpt2rt__bf16_widen(wr[i + j]); /* rounded, then added: as the SIMD paths */
                acc[j] += p;
            }
        out[r] = gpt2rt__bf16_fold(acc, x, wr, i, K);
    }
}

#if GPT2RT__SG_X86
/* g++ 12's false -Wmaybe-uninitialized from inside its avx512 headers, as in the kernels above */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* Each path takes one row at a time: one stream of weights. Four rows at once (four
   chains of additions in flight) measured 2.3x slower on the 2-core AMD EPYC (Zen 4):
   the decode step is bound by the weights' bytes, and four streams 2C bytes apart
   fetch worse than one. */
__attribute__((target("avx2")))
static inline __m256 gpt2rt__bf16_w8(const uint16_t *p) { /* 8 bf16 -> 8 fp32, exactly */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
}
__attribute__((target("avx2")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_store8x2(float *out, const float *x, const uint16_t *w, int64_t K16, int64_t K, __m256 a0, __m256 a1) {
    float acc[16];
    _mm256_storeu_ps(acc, a0);
    _mm256_storeu_ps(acc + 8, a1);
    *out = gpt2rt__bf16_fold(acc, x, w, K16, K);
}
__attribute__((target("avx2")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_avx2(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    int64_t K16 = K & ~(int64_t)15, r = 0;
    for (; r < n_rows; r++) {
        const uint16_t *w0 = w + r * K;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00;
        for (int64_t i = 0; i < K16; i += 16) {
            a00 = _mm256_add_ps(a00, _mm256_mul_ps(_mm256_loadu_ps(x + i), gpt2rt__bf16_w8(w0 + i)));
            a01 = _mm256_add_ps(a01, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), gpt2rt__bf16_w8(w0 + i + 8)));
        }
        gpt2rt__bf16_store8x2(out + r, x, w0, K16, K, a00, a01);
    }
}

__attribute__((target("avx512f")))
static inline __m512 gpt2rt__bf16_w16(const uint16_t *p) { /* 16 bf16 -> 16 fp32, exactly */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
}
__attribute__((target("avx512f")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_store16(float *out, const float *x, const uint16_t *w, int64_t k0, int64_t K, __m512 a) {
    float acc[16];
    _mm512_storeu_ps(acc, a);
    *out = gpt2rt__bf16_fold(acc, x, w, k0, K);
}
__attribute__((target("avx512f")))
GPT2RT__NO_CONTRACT static void gpt2rt__bf16_rows_avx512(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    int64_t K16 = K & ~(int64_t)15, r = 0;
    for (; r < n_rows; r++) {
        const uint16_t *w0 = w + r * K;
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t i = 0; i < K16; i += 16) a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_loadu_ps(x + i), gpt2rt__bf16_w16(w0 + i)));
        gpt2rt__bf16_store16(out + r, x, w0, K16, K, a0);
    }
}

/* x's hi/lo split lives on the stack: longer rows take the AVX-512F path */
#define GPT2RT__BF16_XMAX 8192
__attribute__((target("avx512bf16,avx512f")))
static void gpt2rt__bf16_rows_avx512bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t n_rows) {
    if (K > GPT2RT__BF16_XMAX) { gpt2rt__bf16_rows_avx512(out, x, w, K, n_rows); return; }
    __attribute__((aligned(64))) uint16_t hi[GPT2RT__BF16_XMAX], lo[GPT2RT__BF16_XMAX];
    int64_t K32 = K & ~(int64_t)31, r = 0;
    for (int64_t i = 0; i < K32; i += 32) { /* cvtne2ps_pbh(b, a): a's 16 values go high, b's low */
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
        __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
        __m512i l = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
        _mm512_store_si512((void *)(hi + i), h);
        _mm512_store_si512((void *)(lo + i), l);
    }
    for (; r < n_rows; r++) { /* two chains (hi, lo) per 64 weights, unrolled twice: four in flight */
        const uint16_t *w0 = w + r * K;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t i = 0;
        for (; i + 64 <= K32; i += 64) {
            __m512bh v0 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i));
            __m512bh v1 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i + 32));
            a0 = _mm512_dpbf16_ps(a0, v0, (__m512bh)_mm512_load_si512((const void *)(hi + i)));
            a1 = _mm512_dpbf16_ps(a1, v0, (__m512bh)_mm512_load_si512((const void *)(lo + i)));
            a2 = _mm512_dpbf16_ps(a2, v1, (__m512bh)_mm512_load_si512((const void *)(hi + i + 32)));
            a3 = _mm512_dpbf16_ps(a3, v1, (__m512bh)_mm512_load_si512((const void *)(lo + i + 32)));
        }
        if (i < K32) {
            __m512bh v0 = (__m512bh)_mm512_loadu_si512((const void *)(w0 + i));
            a0 = _mm512_dpbf16_ps(a0, v0, (__m512bh)_mm512_load_si512((const void *)(hi + i)));
            a1 = _mm512_dpbf16_ps(a1, v0, (__m512bh)_mm512_load_si512((const void *)(lo + i)));
        }
        gpt2rt__bf16_store16(out + r, x, w0, K32, K, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* GPT2RT__SG_X86 */

/* the fastest path this CPU has (GPT2RT_SGEMM_NO_SIMD: portable C) for few rows (a decode
   step: bound by the weights' bytes, where the widening paths ran fastest, 4.4 ms for
   wte against 6.0 ms with VDPBF16PS, one Zen 4 core) or many (a prefill, each weight
   row reused from cache: bound by arithmetic, where VDPBF16PS's 32 products an
   instruction ran 1.5x the AVX-512F path, 53 against 36 GFLOP/s) */
#define GPT2RT__BF16_MANY_ROWS 8 /* rows from which a product counts as a prefill's (as the fp32 side's 7.3) */
static gpt2rt__bf16_rows_fn gpt2rt__bf16_rows_pick(int many) {
#if GPT2RT__SG_X86
    __builtin_cpu_init();
    if (many && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f")) return gpt2rt__bf16_rows_avx512bf16;
    if (__builtin_cpu_supports("avx512f")) return gpt2rt__bf16_rows_avx512;
    if (__builtin_cpu_supports("avx2")) return gpt2rt__bf16_rows_avx2;
#else
    (void)many;
#endif
    return gpt2rt__bf16_rows_c;
}

/* out (N,OC) = inp (N,IC) W^T + b, W (OC,IC) bf16, b (OC) fp32 or NULL: the decode
   step's and the prefill's products on bf16 weights. Threads own blocks of 64 output
   columns and each value is one gpt2rt__bf16_rows_fn dot product (K is never split), so
   the result is the same on any thread count. Each weight row is read once per input
   row; a prefill's rows re-read it from cache. */
static void gpt2rt__cpu_matvec_bf16(float *out, const float *inp, const uint16_t *w, const float *b, int64_t N,
                                    int64_t IC, int64_t OC, int nt) {
    gpt2rt__bf16_rows_fn rows = gpt2rt__bf16_rows_pick(N >= GPT2RT__BF16_MANY_ROWS);
    int64_t nblk = (OC + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o0 = blk * 64, o1 = o0 + 64 < OC ? o0 + 64 : OC;
        for (int64_t i = 0; i < N; i++) {
            float *y = out + i * OC;
            rows(y + o0, inp + i * IC, w + o0 * IC, IC, o1 - o0);
            if (b) for (int64_t o = o0; o < o1; o++) y[o] += b[o];
        }
    }
}

/* ==== 7.3 Model ==== */

/* What a backend gives the model driver (7.3, end): the steps of GPT-2, each on the
   arenas that gpt2rt__layout carved for it (the CPU: the context's own; the CUDA
   backend: its device arenas, carved by the same function on a shadow context).
   Each returns GPT2RT_OK or a result with ctx's message set. Buffers are the
   context's: x0, layer blocks, lnf, logits, and dres, which carries the gradient
   of the residual stream down the backward.
   Below the layer steps, the step-level work of the public calls (10, 11): a context's
   backend (ctx->be) runs its forwards, backwards, updates, host copies and data-parallel
   reductions, so sections 10-11 never ask which backend they drive. */
/* what the update policy (9) decides for one update, whichever backend runs it */
typedef struct gpt2rt__opt_decision {
    float norm;       /* global gradient norm of the mean loss, before clipping, loss scale removed */
    float grad_scale; /* the raw gradient sums times this: the mean loss's, unscaled, clipped */
    int skipped;      /* 1: no update (a norm that is not finite, or no counted target) */
} gpt2rt__opt_decision;
static gpt2rt__opt_decision gpt2rt__opt_policy(gpt2rt_ctx *ctx, double norm_raw, float *loss_scale, int *clean_steps);
static float gpt2rt__opt_lr_at(const gpt2rt_config *c, int64_t s);
static void gpt2rt__opt_stats(const gpt2rt_ctx *ctx, gpt2rt_step_stats *stats, gpt2rt__opt_decision o, float lr,
                              float loss_scale, double t0);
static void gpt2rt__accum_reset(gpt2rt_ctx *ctx); /* 10 */
typedef gpt2rt_result (*gpt2rt__update_fn)(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);
static gpt2rt_result gpt2rt__opt_update(gpt2rt_ctx *ctx, gpt2rt__update_fn update, gpt2rt_step_stats *stats);

typedef struct gpt2rt__backend {
    /* x0 (BT,C) = wte[inputs] + wpe; patches: in_layer(patches) + wpe */
    gpt2rt_result (*embed_forward)(gpt2rt_ctx *ctx);
    /* layer l from res (BT,C) into a; also the recompute of FULL, which must give
       bitwise the same values */
    gpt2rt_result (*layer_forward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* ln_f of res (BT,C), then logits (BT,Vp); patches: out_layer, (B*M,H) */
    gpt2rt_result (*head_forward)(gpt2rt_ctx *ctx, const float *res);
    /* logits -> dlogits (scaled by dloss), the tied head's and ln_f's gradients;
       dres = d(res); patches: the MSE's gradient, out_layer's */
    gpt2rt_result (*head_backward)(gpt2rt_ctx *ctx, const float *res, float dloss);
    /* dres holds d(layer l's output) and becomes d(res), the layer's input res
       (BT,C); weight gradients += */
    gpt2rt_result (*layer_backward)(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a);
    /* wte, wpe gradients += from dres; patches: wpe, in_layer */
    gpt2rt_result (*embed_backward)(gpt2rt_ctx *ctx);
    /* bytes from src to dst, both in the backend's arenas */
    gpt2rt_result (*copy)(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes);

    /* ---- step level: the context is the public one (a data-parallel rank's own) ---- */
    /* inputs, targets: host (B,T), checked (targets may be NULL): the logits, with targets
       the loss (*loss if not NULL, ctx->loss, loss_sum, n_targets); sets have_logits and
       have_loss. fuse: gpt2rt_step's forward, whose backward follows at once (CUDA: the
       classifier writes dlogits in the same pass, and no logits are kept) */
    gpt2rt_result (*forward)(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss, int fuse);
    /* x (Bw,Lb,M), y (Bw,H,M) or NULL, checked: the predictions and the loss, as forward */
    gpt2rt_result (*forward_series)(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
    /* += the gradients of the last forward's loss, one fixed scale for every micro-batch */
    gpt2rt_result (*backward)(gpt2rt_ctx *ctx);
    /* one AdamW step at lr over the gradients summed since the last update (data parallel:
       summed over the ranks first); the policy (9) decides, *o says what it decided,
       *loss_scale is the next backward's. Advances ctx->step unless skipped. */
    gpt2rt_result (*update)(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);
    /* the gradients (and with moments, m and v) to zero */
    gpt2rt_result (*zero_grads)(gpt2rt_ctx *ctx, int moments);
    /* the last forward's logits (BT,V) / predictions (Bw,H,M) into host memory */
    gpt2rt_result (*logits)(gpt2rt_ctx *ctx, float *dst);
    gpt2rt_result (*predictions)(gpt2rt_ctx *ctx, float *dst);
    /* data parallel (10.1): sum the gradient pieces {first float, count} over the ranks
       (scatter: ZeRO-1's one reduce-scatter of the whole gradient) */
    gpt2rt_result (*dp_reduce)(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter);
    /* ctx->params caught up with the weights the backend trains */
    gpt2rt_result (*host_weights)(gpt2rt_ctx *ctx);
    /* ctx->params (and the moments m, v of every trained float, if not NULL) to where
       every data-parallel rank trains them */
    gpt2rt_result (*upload)(gpt2rt_ctx *ctx, const float *m, const float *v);
    /* *m, *v: the moments of every trained float on the host, with the weights caught up;
       *buf: what the call allocated for them (the caller frees it), or NULL */
    gpt2rt_result (*host_moments)(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf);
    /* tensor t's value, gradient or moment (checked name t, dst of its size) */
    gpt2rt_result (*param_read)(gpt2rt_ctx *ctx, const char *name, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                float *dst);
    /* the bytes of each category this context holds, and the driver's own (measured) */
    void (*allocated)(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead);
    /* data parallel, at creation: rank r >= 1's context rc (zeroed; cfg, d and be set) made
       like ctx (rank 0), then, once every rank is attached, what the ranks share */
    gpt2rt_result (*dp_rank)(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan);
    gpt2rt_result (*dp_open)(gpt2rt_ctx *ctx);
    /* at gpt2rt_free: before the ranks are freed (shared), then the context's own */
    void (*release_shared)(gpt2rt_ctx *ctx);
    void (*release)(gpt2rt_ctx *ctx);
    /* generation (11.7): one pass of N new tokens over the KV cache, ctx->kv's tok, row,
       pos on the host, and the logits of the M tokens kv->sel lists in kv->logits (M,Vp)
       on the host */
    gpt2rt_result (*decode)(gpt2rt_ctx *ctx, int64_t N, int64_t M);
} gpt2rt__backend;

/* data parallel (10.1): layer l's gradients (-1: the rest) are final on this rank */
static gpt2rt_result gpt2rt__dp_bucket_ready(gpt2rt_ctx *ctx, int64_t l);
/* ---- dropout's masks ---- */
/* the sites where the model drops, a part of each mask's key */
enum { GPT2RT__DROP_EMBED, GPT2RT__DROP_ATTN, GPT2RT__DROP_ATTN_RESID, GPT2RT__DROP_MLP_RESID, GPT2RT__DROP_HEAD };

/* The start of a forward: whether it drops, and the key of its optimizer step,
   from the seed (the RNG state, which the training state file keeps) and the step
   count, so a resumed run draws the masks the uninterrupted one would. A step
   that is skipped does not advance the count: the next one draws its masks again. */
static void gpt2rt__drop_begin(gpt2rt_ctx *ctx) {
    const gpt2rt_config *c = &ctx->cfg;
    ctx->drop_train = !ctx->eval && (c->dropout > 0.0f || c->attn_dropout > 0.0f || c->head_dropout > 0.0f);
    ctx->drop_key = gpt2rt__mix64(gpt2rt__mix64(ctx->rng ^ 0x44524F504F555431ull) + (uint64_t)ctx->step);
    ctx->drop_micro = ctx->acc_micro;
}

/* the mask of site `site` of layer l (-1: the embeddings and the head) in the last
   forward, over n elements per micro-batch, with probability p */
static gpt2rt__drop gpt2rt__drop_at(const gpt2rt_ctx *ctx, float p, int64_t l, int site, int64_t n) {
    gpt2rt__drop dr;
    memset(&dr, 0, sizeof dr);
    dr.on = ctx->drop_train && p > 0.0f;
    if (!dr.on) return dr;
    double t = floor((double)p * 4294967296.0 + 0.5);
    dr.thresh = t > 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
    dr.scale = (float)(1.0 / (1.0 - (double)p));
    dr.key = gpt2rt__mix64(ctx->drop_key ^ gpt2rt__mix64(((uint64_t)(l + 1) << 8) | (uint64_t)site));
    /* data parallel: rank r's rows follow ranks 0..r-1's in the micro-batch, so N ranks
       draw the masks one device of N times the rows does */
    dr.off = ((uint64_t)ctx->drop_micro * (uint64_t)ctx->comm->size + (uint64_t)ctx->comm->rank) * (uint64_t)n;
    return dr;
}

/* ---- the chunked classifier (config.classifier_chunk): never (BT, Vp) logits ----
   Chunks of hc tokens in order: their logits (hc, Vp) in the logits arena, each
   token's lse and loss as the whole-batch path computes them, and, in the backward or
   in a forward whose backward follows at once (gpt2rt_step: fused, no second product),
   dlogits in place, the chunk's rows of d(lnf) into dbuf and wte's gradient +=. Every
   step is row by row but wte's gradient, a sum over the tokens: bitwise the
   whole-batch path's when hc is a multiple of the matrix product's KC slice
   (GPT2RT_SGEMM_KC, 256 by default), else within fp32 reassociation. */
static void gpt2rt__cpu_head_chunk(gpt2rt_ctx *ctx, int64_t i, int64_t n, int loss, int grad, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t C = d->C;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf + i * C, p.wte, NULL, n,
                 C, d->Vp, ctx->gemm_ws, d->nt));
    if (loss) {
        int64_t cnt;
        double sum;
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, (void)gpt2rt__cpu_crossentropy_forward(ctx->losses + i, ctx->logit_lse + i,
                     ctx->logits, ctx->targets + i, n, d->V, d->Vp, &cnt, &sum, d->nt));
    }
    if (!grad) return;
    gpt2rt__model_params g = gpt2rt__mparams(ctx, ctx->grads, 1);
    GPT2RT__PROF(ctx, GPT2RT__PROF_CE, gpt2rt__cpu_crossentropy_backward(ctx->logits, ctx->logit_lse + i,
                 ctx->targets + i, dloss, n, d->V, d->Vp, d->nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf + i * C, g.wte, NULL, ctx->logits,
                 ctx->lnf + i * C, p.wte, n, C, d->Vp, ctx->gemm_ws, d->nt));
}

/* the loss of the last forward (targets copied): chunk by chunk, then summed over the
   tokens in order as gpt2rt__cpu_crossentropy_forward does; fused: the head's backward too */
static float gpt2rt__cpu_head_chunked_loss(gpt2rt_ctx *ctx, int fused) {
    const gpt2rt__dims *d = &ctx->d;
    float dloss = 1.0f / (float)(d->n_out * ctx->cfg.grad_accum); /* gpt2rt__cpu_backward's */
    for (int64_t i = 0; i < d->BT; i += d->hc)
        gpt2rt__cpu_head_chunk(ctx, i, d->BT - i < d->hc ? d->BT - i : d->hc, 1, fused, dloss);
    ctx->head_fused = fused;
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < d->BT; i++)
        if (ctx->targets[i] >= 0) { total += ctx->losses[i]; n++; }
    ctx->n_targets = n;
    ctx->loss_sum = total;
    return n ? (float)(total / (double)n) : 0.0f;
}

/* the head's backward unless the forward ran it: the logits again, chunk by chunk */
static void gpt2rt__cpu_head_chunked_backward(gpt2rt_ctx *ctx, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    if (ctx->head_fused) { ctx->head_fused = 0; return; }
    for (int64_t i = 0; i < d->BT; i += d->hc)
        gpt2rt__cpu_head_chunk(ctx, i, d->BT - i < d->hc ? d->BT - i : d->hc, 0, 1, dloss);
}

/* ---- the CPU backend's steps ---- */

static gpt2rt_result gpt2rt__cpu_embed_forward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    if (!d->patches) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_forward(ctx->x0, ctx->inputs, p.wte, p.wpe, d->B,
                     d->T, d->C, d->nt));
    } else { /* patches: x0 (BT,C) = in_layer(patch) + wpe[t] */
        gpt2rt__cpu_matmul_forward(ctx->x0, ctx->ts_patch, p.inw, p.inb, d->BT, d->PL, d->C, ctx->gemm_ws, d->nt);
        GPT2RT__PARALLEL_FOR(d->nt)
        for (int64_t bt = 0; bt < d->BT; bt++) {
            float *o = ctx->x0 + bt * d->C;
            const float *pe = p.wpe + (bt % d->T) * d->C;
            for (int64_t c = 0; c < d->C; c++) o[c] += pe[c];
        }
    }
    /* x0 keeps the dropped embeddings: layer 0's input, and FULL's checkpoint 0 */
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->x0, ctx->x0, &dr, d->BT * d->C, d->nt));
    return GPT2RT_OK;
}

/* One layer's forward from res (BT,C) into a; outputs not kept (NULL in a) go to
   dbig, the backward's scratch (free during the forward), and are used at once. The backward's
   recompute calls this same function on the same input: bitwise the same values. */
static gpt2rt_result gpt2rt__cpu_layer_forward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l);
    float *ln1 = a.ln1 ? a.ln1 : ctx->dbig, *ln2 = a.ln2 ? a.ln2 : ctx->dbig; /* not kept: scratch */
    float *gelu = a.fch_gelu ? a.fch_gelu : ctx->dbig;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b,
                 BT, C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.qkv, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, ws,
                 nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_ATT_FWD, gpt2rt__cpu_attention_forward_masked(a.atty, a.lse, a.qkv, ctx->att_scratch,
                 d->B, d->T, C, d->NH, d->TH, &da, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.res2, a.atty, p.projw, p.projb, BT, C, C, ws,
                 nt));
    if (dr2.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(a.res2, a.res2, &dr2, BT * C,
                             nt)); /* the branch, before the add */
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_residual_add(a.res2, res, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w,
                 p.ln2b, BT, C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.fch, ln2, p.fcw, p.fcb, BT, C, 4 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_forward(gelu, a.fch, BT * 4 * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_FWD, gpt2rt__cpu_matmul_forward(a.res3, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C,
                 ws, nt));
    if (dr3.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(a.res3, a.res3, &dr3, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_residual_add(a.res3, a.res2, BT * C, nt));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_forward(gpt2rt_ctx *ctx, const float *res) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->lnf, ctx->lnf_mean, ctx->lnf_rstd, res,
                 p.lnfw, p.lnfb, d->BT, d->C, d->nt));
    /* lnf keeps the dropped values: the head's input; ln_f's backward reads res, not lnf */
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->lnf, ctx->lnf, &dr, d->BT * d->C, d->nt));
    if (d->seqhead) { /* aLLM4TS's out_layer at every position: (BT,C) -> (BT,PL) */
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf, p.outw, p.outb,
                     d->BT, d->C, d->PL, ctx->gemm_ws, d->nt));
        if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE) gpt2rt__ts_decode_gather(gpt2rt__ts_yn(ctx), ctx->logits, d);
    } else if (d->patches) /* out_layer on each series' flattened (T,C) states: (B, T*C) -> (B,H) */
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf, p.outw, p.outb, d->B,
                     d->T * d->C, d->H, ctx->gemm_ws, d->nt));
    else if (d->hc == d->BT) /* classifier_chunk: the logits come chunk by chunk with the loss */
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_FWD, gpt2rt__cpu_matmul_forward(ctx->logits, ctx->lnf, p.wte, NULL, d->BT,
                     d->C, d->Vp, ctx->gemm_ws, d->nt));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_head_backward(gpt2rt_ctx *ctx, const float *res, float dloss) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0), g = gpt2rt__mparams(ctx, ctx->grads, 1);
    if (d->seqhead) { /* the loss's gradient at every position (BT,PL), then out_layer: dlnf -> dbuf */
        if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH) gpt2rt__ts_next_backward(ctx->logits, ctx->ts_patch, dloss, d);
        else {
            float *yn = gpt2rt__ts_yn(ctx);
            gpt2rt__ts_mse_backward(yn, ctx->ts_pred, ctx->ts_y, ctx->ts_std, p.revw, p.revb, g.revw, g.revb, dloss, d);
            gpt2rt__ts_decode_scatter(ctx->logits, yn, d);
        }
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.outw, g.outb, ctx->logits,
                     ctx->lnf, p.outw, BT, C, d->PL, ctx->gemm_ws, nt));
    } else if (d->patches) { /* MSE through the de-normalisation, then out_layer: dlnf -> dbuf */
        gpt2rt__ts_mse_backward(ctx->logits, ctx->ts_pred, ctx->ts_y, ctx->ts_std, p.revw, p.revb, g.revw, g.revb,
                                dloss, d);
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.outw, g.outb, ctx->logits,
                     ctx->lnf, p.outw, d->B, d->T * C, d->H, ctx->gemm_ws, nt));
    } else if (d->hc < BT) {
        gpt2rt__cpu_head_chunked_backward(ctx, dloss);
    } else {
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, gpt2rt__cpu_crossentropy_backward(ctx->logits, ctx->logit_lse, ctx->targets,
                     dloss, BT, d->V, d->Vp, nt));
        /* LM head (tied): dlnf -> dbuf */
        GPT2RT__PROF(ctx, GPT2RT__PROF_HEAD_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.wte, NULL, ctx->logits,
                     ctx->lnf, p.wte, BT, C, d->Vp, ctx->gemm_ws, nt));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, BT * C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbuf, ctx->dbuf, &dr, BT * C, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, memset(ctx->dres, 0, (size_t)(BT * C) * sizeof(float)));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.lnfw, g.lnfb, ctx->dbuf, res, p.lnfw,
                 ctx->lnf_mean, ctx->lnf_rstd, BT, C, nt));
    return GPT2RT_OK;
}

/* Layer l's backward: dres holds d(res3) and becomes d(res), res (BT,C) the layer's
   input. Outputs the forward did not keep are recomputed into rcbuf, only for the
   weight gradients that need them (NULL g: frozen, skipped). Dropout: the masked
   gradient of a residual branch goes through the scratch buffer free at that point
   (dbuf for the MLP's, dbig for the attention's), dres stays the stream's. */
static gpt2rt_result gpt2rt__cpu_layer_backward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t BT = d->BT, C = d->C;
    int nt = d->nt;
    void *ws = ctx->gemm_ws;
    gpt2rt__layer_params p = gpt2rt__lparams(ctx, ctx->params, 0, l), g = gpt2rt__lparams(ctx, ctx->grads, 1, l);
    /* MLP; dres holds d(res3) */
    const float *gelu = a.fch_gelu, *ln2 = a.ln2, *dbranch = ctx->dres;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    if (!gelu && g.fcprojw) { GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_forward(ctx->rcbuf, a.fch,
                                           BT * 4 * C, nt)); gelu = ctx->rcbuf; }
    if (dr3.on) { GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbuf, ctx->dres, &dr3, BT * C,
                               nt)); dbranch = ctx->dbuf; }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbig, g.fcprojw, g.fcprojb, dbranch, gelu,
                 p.fcprojw, BT, 4 * C, C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_GELU, gpt2rt__cpu_gelu_backward(ctx->dbig, a.fch, ctx->dbig, BT * 4 * C, nt));
    if (!ln2 && g.fcw) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln2_mean, a.ln2_rstd, a.res2,
                     p.ln2w, p.ln2b, BT, C, nt));
        ln2 = ctx->rcbuf;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.fcw, g.fcb, ctx->dbig, ln2, p.fcw,
                 BT, C, 4 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln2w, g.ln2b, ctx->dbuf, a.res2,
                 p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C, nt));
    /* attention; dres holds d(res2) */
    dbranch = ctx->dres;
    if (dr2.on) { GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dbig, ctx->dres, &dr2, BT * C,
                               nt)); dbranch = ctx->dbig; }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.projw, g.projb, dbranch, a.atty,
                 p.projw, BT, C, C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_ATT_BWD, gpt2rt__cpu_attention_backward_masked(ctx->dbig, ctx->dbuf, a.qkv, a.lse,
                 ctx->att_scratch, d->B, d->T, C, d->NH, d->TH, &da, nt));
    const float *ln1 = a.ln1;
    if (!ln1 && g.qkvw) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_forward(ctx->rcbuf, a.ln1_mean, a.ln1_rstd, res,
                     p.ln1w, p.ln1b, BT, C, nt));
        ln1 = ctx->rcbuf;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_MM_BWD, gpt2rt__cpu_matmul_backward(ctx->dbuf, g.qkvw, g.qkvb, ctx->dbig, ln1,
                 p.qkvw, BT, C, 3 * C, ws, nt));
    GPT2RT__PROF(ctx, GPT2RT__PROF_LN, gpt2rt__cpu_layernorm_backward(ctx->dres, g.ln1w, g.ln1b, ctx->dbuf, res, p.ln1w,
                 a.ln1_mean, a.ln1_rstd, BT, C, nt));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_embed_backward(gpt2rt_ctx *ctx) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__model_params g = gpt2rt__mparams(ctx, ctx->grads, 1);
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    if (dr.on) GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_dropout(ctx->dres, ctx->dres, &dr, d->BT * d->C,
                            d->nt)); /* d(x0 before dropout): dres ends here */
    if (!d->patches) {
        GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_backward(g.wte, g.wpe, ctx->dres, ctx->inputs, d->B,
                     d->T, d->C, d->nt));
        return GPT2RT_OK;
    }
    /* patches: wpe as for tokens (no wte); in_layer's weight gradients; the patches'
       gradient only for RevIN's affine */
    GPT2RT__PROF(ctx, GPT2RT__PROF_RESID, gpt2rt__cpu_encoder_backward(NULL, g.wpe, ctx->dres, NULL, d->B, d->T, d->C,
                 d->nt));
    if (g.inw) {
        gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
        gpt2rt__cpu_matmul_backward(g.revw ? ctx->ts_dpatch : NULL, g.inw, g.inb, ctx->dres, ctx->ts_patch, p.inw,
                                    d->BT, d->PL, d->C, ctx->gemm_ws, d->nt);
        if (g.revw) gpt2rt__ts_affine_backward(g.revw, g.revb, ctx->ts_dpatch, ctx->ts_z, d);
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_copy(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
    return GPT2RT_OK;
}


/* ---- the CPU backend's decode step (generation, 11.7) ----
   A pass feeds N new tokens of any rows at any positions (ctx->kv: tok, row, pos)
   through the model, keeping their keys and values in the cache, and gives the
   logits of the tokens listed in sel. Every op computes a token's values from the
   same inputs as the training forward does, most in the same order (row-wise
   LayerNorm, GELU and residual adds; matrix products whose sums depend on K only;
   the attention below), so a prefill's logits are bitwise those of a forward over
   the whole prefix; a decode step's few rows take a matrix-vector product, equal
   within rounding. */

/* out (N,C) from qkv (N,3C) of N new tokens, token i of cache row row[i] at position
   pos[i]. First every token's k and v go into kc, vc (KB,KS,C) at (row, pos); then
   token i attends to its row's positions [0, pos[i]] with the sums of
   gpt2rt__cpu_attention_forward, in its order (7.1: the score, the row's softmax, the
   chain of p v, each the same function). Tokens of one row in one pass must
   have distinct positions, and every position before theirs must be cached. */
static void gpt2rt__cpu_attention_cached(float *out, const float *qkv, float *kc, float *vc, const int32_t *row,
                                         const int32_t *pos, float *scratch, int64_t N, int64_t KS, int64_t C,
                                         int64_t NH, int nt) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t i = 0; i < N; i++) {
        int64_t at = ((int64_t)row[i] * KS + pos[i]) * C;
        memcpy(kc + at, qkv + i * C3 + C, (size_t)C * sizeof(float));
        memcpy(vc + at, qkv + i * C3 + 2 * C, (size_t)C * sizeof(float));
    }
    GPT2RT__PARALLEL_FOR_RR(nt)
    for (int64_t r = 0; r < N * NH; r++) {
        int64_t i = r / NH, h = r % NH, t = pos[i];
        const float *kr = kc + (int64_t)row[i] * KS * C + h * HS, *vr = vc + (int64_t)row[i] * KS * C + h * HS;
        float *sc = scratch + (int64_t)gpt2rt__thread_id() * gpt2rt__pad16(KS);
        const float *q = qkv + i * C3 + h * HS;
        for (int64_t s = 0; s <= t; s++) sc[s] = gpt2rt__cpu_att_dot(q, kr + s * C, HS, scale);
        gpt2rt__cpu_att_softmax(sc, t + 1);
        float *y = out + i * C + h * HS;
        memset(y, 0, (size_t)HS * sizeof(float));
        gpt2rt__cpu_att_mm(y, 0, 1, sc, 0, 1, vr, C, HS, t + 1);
    }
}

/* out (N,OC) = inp (N,IC) W^T + b, W (OC,IC), b (OC) or NULL, for the few rows of a
   decode step: each weight row is read once for all N (the matrix product would pack
   every weight for one row). Threads own output columns, each value one dot product
   in a fixed order: the same on any thread count, equal to the matrix product's
   within rounding (about 1e-7 relative). */
#define GPT2RT__KV_MATVEC_ROWS 8 /* below this many rows a pass uses the matrix-vector product */
static void gpt2rt__cpu_matvec_forward(float *out, const float *inp, const float *w, const float *b, int64_t N,
                                       int64_t IC, int64_t OC, int nt) {
    int64_t nblk = (OC + 63) / 64;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o1 = blk * 64 + 64 < OC ? blk * 64 + 64 : OC;
        for (int64_t o = blk * 64; o < o1; o++)
            for (int64_t i = 0; i < N; i++)
                out[i * OC + o] = gpt2rt__cpu_dot(inp + i * IC, w + o * IC, IC) + (b ? b[o] : 0.0f);
    }
}

/* a pass's matrix products: few rows (the decode steps) by rows of W, many (a prefill) by 7.2;
   bf16 weights (inference_weights): every pass by gpt2rt__cpu_matvec_bf16 on tensor tw */
static void gpt2rt__cpu_decode_matmul(gpt2rt_ctx *ctx, float *out, const float *inp, const float *w,
                                      const gpt2rt__tensor *tw, const float *b, int64_t N, int64_t IC, int64_t OC) {
    if (ctx->params16) gpt2rt__cpu_matvec_bf16(out, inp, ctx->params16 + tw->off, b, N, IC, OC, ctx->d.nt);
    else if (N < GPT2RT__KV_MATVEC_ROWS) gpt2rt__cpu_matvec_forward(out, inp, w, b, N, IC, OC, ctx->d.nt);
    else gpt2rt__cpu_matmul_forward(out, inp, w, b, N, IC, OC, ctx->gemm_ws, ctx->d.nt);
}

/* the first n tensors of t that are vectors (LayerNorm, biases), widened from bf16 into
   kv->wvec in order; q[i] gets tensor i's floats, NULL for a matrix */
static void gpt2rt__cpu_decode_vectors(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, int n, float **q) {
    float *o = ctx->kv.wvec;
    for (int i = 0; i < n; i++) {
        q[i] = NULL;
        if (t[i].ndim != 1) continue;
        q[i] = o;
        for (int64_t j = 0; j < t[i].rows; j++) o[j] = gpt2rt__bf16_widen(ctx->params16[t[i].off + j]);
        o += t[i].rows;
    }
}

/* layer l's parameters as floats: fp32 weights in place; bf16 weights: the vectors widened
   (13C floats), the matrices NULL (gpt2rt__cpu_decode_matmul reads them as bf16) */
static gpt2rt__layer_params gpt2rt__cpu_decode_lparams(gpt2rt_ctx *ctx, int64_t l) {
    if (!ctx->params16) return gpt2rt__lparams(ctx, ctx->params, 0, l);
    float *q[GPT2RT__PER_LAYER];
    gpt2rt__cpu_decode_vectors(ctx, gpt2rt__layer_tensors(ctx, l), GPT2RT__PER_LAYER, q);
    gpt2rt__layer_params p;
    p.ln1w = q[GPT2RT__LN1W]; p.ln1b = q[GPT2RT__LN1B];
    p.qkvw = NULL; p.qkvb = q[GPT2RT__QKVB];
    p.projw = NULL; p.projb = q[GPT2RT__PROJB];
    p.ln2w = q[GPT2RT__LN2W]; p.ln2b = q[GPT2RT__LN2B];
    p.fcw = NULL; p.fcb = q[GPT2RT__FCB];
    p.fcprojw = NULL; p.fcprojb = q[GPT2RT__FCPROJB];
    return p;
}

/* the threads of a decode pass's row-wise ops (LayerNorm, GELU, residual adds; the same
   floats on any count): one for a decode step's few rows, where a parallel region's
   fork and join (a few microseconds, far more when a core is busy) cost more than the
   microsecond of work they split */
static int gpt2rt__cpu_decode_rowwise_nt(const gpt2rt_ctx *ctx, int64_t N) {
    return N < GPT2RT__KV_MATVEC_ROWS ? 1 : ctx->d.nt;
}

/* layer l on the pass's N tokens: kv->x (N,C) += attention, then += MLP */
static void gpt2rt__cpu_layer_decode(gpt2rt_ctx *ctx, int64_t l, int64_t N) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__kv *kv = &ctx->kv;
    int64_t C = d->C, cache = l * d->KB * d->KS * C;
    int nt = d->nt, ntr = gpt2rt__cpu_decode_rowwise_nt(ctx, N);
    gpt2rt__layer_params p = gpt2rt__cpu_decode_lparams(ctx, l);
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->x, p.ln1w, p.ln1b, N, C, ntr);
    gpt2rt__cpu_decode_matmul(ctx, kv->qkv, kv->ln, p.qkvw, &t[GPT2RT__QKVW], p.qkvb, N, C, 3 * C);
    gpt2rt__cpu_attention_cached(kv->atty, kv->qkv, kv->k + cache, kv->v + cache, kv->row, kv->pos, kv->att, N,
                                 d->KS, C, d->NH, nt);
    gpt2rt__cpu_decode_matmul(ctx, kv->proj, kv->atty, p.projw, &t[GPT2RT__PROJW], p.projb, N, C, C);
    gpt2rt__cpu_residual_add(kv->x, kv->proj, N * C, ntr);
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->x, p.ln2w, p.ln2b, N, C, ntr);
    gpt2rt__cpu_decode_matmul(ctx, kv->fch, kv->ln, p.fcw, &t[GPT2RT__FCW], p.fcb, N, C, 4 * C);
    gpt2rt__cpu_gelu_forward(kv->fch, kv->fch, N * 4 * C, ntr);
    gpt2rt__cpu_decode_matmul(ctx, kv->proj, kv->fch, p.fcprojw, &t[GPT2RT__FCPROJW], p.fcprojb, N, 4 * C, C);
    gpt2rt__cpu_residual_add(kv->x, kv->proj, N * C, ntr);
}

/* one pass: embeddings of the N tokens, every layer, then ln_f and the tied head on
   the M tokens kv->sel lists: kv->logits (M,Vp). bf16 weights: the embeddings' rows
   and ln_f widened, every product on bf16 (the head reads wte, the largest tensor, in
   bf16 too) */
static void gpt2rt__cpu_decode_pass(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt__kv *kv = &ctx->kv;
    int64_t C = d->C;
    const uint16_t *w16 = ctx->params16;
    const gpt2rt__tensor *twte = gpt2rt__model_tensor(ctx, GPT2RT__WTE), *twpe = gpt2rt__model_tensor(ctx, GPT2RT__WPE);
    gpt2rt__model_params p;
    if (w16) memset(&p, 0, sizeof p);
    else p = gpt2rt__mparams(ctx, ctx->params, 0);
    GPT2RT__PARALLEL_FOR(gpt2rt__cpu_decode_rowwise_nt(ctx, N))
    for (int64_t i = 0; i < N; i++) { /* wte[tok] + wpe[pos], as gpt2rt__cpu_encoder_forward */
        int64_t te = (int64_t)kv->tok[i] * C, pe = (int64_t)kv->pos[i] * C;
        float *o = kv->x + i * C;
        if (w16)
            for (int64_t c = 0; c < C; c++)
                o[c] = gpt2rt__bf16_widen(w16[twte->off + te + c]) + gpt2rt__bf16_widen(w16[twpe->off + pe + c]);
        else
            for (int64_t c = 0; c < C; c++) o[c] = p.wte[te + c] + p.wpe[pe + c];
    }
    for (int64_t l = 0; l < d->L; l++) gpt2rt__cpu_layer_decode(ctx, l, N);
    for (int64_t m = 0; m < M; m++) memcpy(kv->proj + m * C, kv->x + (int64_t)kv->sel[m] * C, (size_t)C * sizeof(float));
    if (w16) { /* ln_f's weight and bias follow each other in the table */
        float *q[2];
        gpt2rt__cpu_decode_vectors(ctx, gpt2rt__model_tensor(ctx, GPT2RT__LNFW), 2, q);
        p.lnfw = q[0]; p.lnfb = q[1];
    }
    gpt2rt__cpu_layernorm_forward(kv->ln, kv->ln_mean, kv->ln_rstd, kv->proj, p.lnfw, p.lnfb, M, C,
                                  gpt2rt__cpu_decode_rowwise_nt(ctx, M));
    gpt2rt__cpu_decode_matmul(ctx, kv->logits, kv->ln, p.wte, twte, NULL, M, C, d->Vp);
}

/* the table's entry: the CPU's pass cannot fail */
static gpt2rt_result gpt2rt__cpu_decode(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    gpt2rt__cpu_decode_pass(ctx, N, M);
    return GPT2RT_OK;
}

/* ---- the driver: one for every backend ---- */
/* It owns the order of the steps and what recompute decides: which layer input is a
   checkpoint, when a FULL segment runs its forward again. ax: the context whose
   arenas the backend's steps use (the CPU: ctx itself). */

/* return a failing gpt2rt_result (its message already set) to the caller: the one such
   macro of every section from here on */
#define GPT2RT__TRY(call) do { gpt2rt_result r_ = (call); if (r_ != GPT2RT_OK) return r_; } while (0)

/* the input (BT,C) of layer l: the embeddings, a FULL checkpoint, or the layer before's output */
static float *gpt2rt__model_layer_input(const gpt2rt_ctx *ax, int64_t l) {
    const gpt2rt__dims *d = &ax->d;
    if (l == ax->l0) return ax->x0; /* a layer-split stage's input lies in x0 too */
    if (d->recompute == GPT2RT_RECOMPUTE_FULL && l % d->ck == 0) /* checkpoints: one activation apart, as laid out */
        return (float *)(void *)((unsigned char *)ax->ckpt + ((l - ax->l0) / d->ck - 1) *
                                 gpt2rt__ald(d, d->BT * d->C * d->ab));
    return gpt2rt__lacts(ax, l - 1).res3;
}

/* layers [l0, l1) forward, each from its input (the driver's, and a layer-split
   stage's range, 10.2); FULL: the slots are reused, so keep the input of each
   checkpoint the range reaches */
static gpt2rt_result gpt2rt__model_layers_forward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                                  int64_t l0, int64_t l1) {
    const gpt2rt__dims *d = &ax->d;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C * d->ab);
    for (int64_t l = l0; l < l1; l++) {
        GPT2RT__TRY(be->layer_forward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
        if (full && l + 1 < d->L && (l + 1) % d->ck == 0)
            GPT2RT__TRY(be->copy(ctx, gpt2rt__model_layer_input(ax, l + 1), gpt2rt__lacts(ax, l).res3, act));
    }
    return GPT2RT_OK;
}

/* layers l1-1 down to l0: dres holds d(layer l1-1's output) and becomes d(layer l0's
   input); each layer's gradients go to the data-parallel hook once final. FULL:
   entering a segment from its top, run its forward again from its checkpoint (the
   last segment's activations are still in the slots from the forward; a range
   starts at a checkpoint) */
static gpt2rt_result gpt2rt__model_layers_backward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                                   int64_t l0, int64_t l1) {
    const gpt2rt__dims *d = &ax->d;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    for (int64_t l = l1 - 1; l >= l0; l--) {
        if (full && (l + 1) % d->ck == 0 && l + 1 < d->L)
            for (int64_t j = l - l % d->ck; j <= l; j++)
                GPT2RT__TRY(be->layer_forward(ctx, j, gpt2rt__model_layer_input(ax, j), gpt2rt__lacts(ax, j)));
        GPT2RT__TRY(be->layer_backward(ctx, l, gpt2rt__model_layer_input(ax, l), gpt2rt__lacts(ax, l)));
        GPT2RT__TRY(gpt2rt__dp_bucket_ready(ctx, l));
    }
    return GPT2RT_OK;
}

/* embeddings, the layers, ln_f, the tied LM head: logits (BT,Vp) */
static gpt2rt_result gpt2rt__model_forward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C * d->ab);
    gpt2rt__drop_begin(ctx);
    GPT2RT__TRY(be->embed_forward(ctx));
    GPT2RT__TRY(gpt2rt__model_layers_forward(ctx, be, ax, 0, L));
    /* FULL: the slots are reused, so keep the last output */
    const float *res = L ? gpt2rt__lacts(ax, L - 1).res3 : ax->x0;
    if (full && L) {
        GPT2RT__TRY(be->copy(ctx, ax->xout, res, act));
        res = ax->xout;
    }
    return be->head_forward(ctx, res);
}

/* gradients of (sum of the counted targets' losses) * dloss, accumulated into the grads */
static gpt2rt_result gpt2rt__model_backward(gpt2rt_ctx *ctx, const gpt2rt__backend *be, const gpt2rt_ctx *ax,
                                            float dloss) {
    const gpt2rt__dims *d = &ax->d;
    int64_t L = d->L;
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    const float *res_last = !L ? ax->x0 : full ? ax->xout : gpt2rt__lacts(ax, L - 1).res3;
    GPT2RT__TRY(be->head_backward(ctx, res_last, dloss));
    GPT2RT__TRY(gpt2rt__model_layers_backward(ctx, be, ax, 0, L));
    GPT2RT__TRY(be->embed_backward(ctx));
    return gpt2rt__dp_bucket_ready(ctx, -1);
}


/* ---- the CPU backend's step-level work (the table's second part) ---- */

static gpt2rt_result gpt2rt__cpu_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                         int fuse) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt_result r;
    /* the logits stay, the backward turns them into dlogits; classifier_chunk: fuse runs the
       head's backward here, chunk by chunk, and no logits stay */
    memcpy(ctx->inputs, inputs, (size_t)d->BT * sizeof(int32_t));
    ctx->head_fused = 0;
    if ((r = gpt2rt__model_forward(ctx, ctx->be, ctx)) != GPT2RT_OK) return r;
    ctx->have_logits = d->hc == d->BT;
    ctx->have_loss = 0;
    if (targets && d->hc < d->BT) {
        memcpy(ctx->targets, targets, (size_t)d->BT * sizeof(int32_t));
        ctx->loss = gpt2rt__cpu_head_chunked_loss(ctx, fuse);
        ctx->have_loss = 1;
    } else if (targets) {
        memcpy(ctx->targets, targets, (size_t)d->BT * sizeof(int32_t));
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, ctx->loss = gpt2rt__cpu_crossentropy_forward(ctx->losses, ctx->logit_lse,
                     ctx->logits, ctx->targets, d->BT, d->V, d->Vp, &ctx->n_targets, &ctx->loss_sum, d->nt));
        ctx->have_loss = 1;
    }
    if (loss) *loss = targets ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt_result r;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    gpt2rt__ts_revin_patch(ctx->ts_patch, ctx->ts_z, ctx->ts_mean, ctx->ts_std, x, p.revw, p.revb, d);
    ctx->have_pred = 0;
    if ((r = gpt2rt__model_forward(ctx, ctx->be, ctx)) != GPT2RT_OK) return r;
    ctx->have_logits = 1;
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH) { /* the loss needs no y: the targets are the lookback's next patches */
        ctx->loss_sum = gpt2rt__ts_next_sum(ctx->logits, ctx->ts_patch, d);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
        ctx->have_loss = 1;
        if (loss) *loss = ctx->loss;
        return GPT2RT_OK;
    }
    gpt2rt__ts_denorm(ctx->ts_pred, gpt2rt__ts_yn(ctx), ctx->ts_mean, ctx->ts_std, p.revw, p.revb, d);
    ctx->have_pred = 1;
    ctx->have_loss = 0;
    if (y) {
        memcpy(ctx->ts_y, y, (size_t)d->n_out * sizeof(float));
        ctx->loss_sum = gpt2rt__ts_mse_sum(ctx->ts_pred, ctx->ts_y, d->n_out);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
        ctx->have_loss = 1;
    }
    if (loss) *loss = y ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_backward(gpt2rt_ctx *ctx) {
    return gpt2rt__model_backward(ctx, ctx->be, ctx, 1.0f / (float)(ctx->d.n_out * ctx->cfg.grad_accum));
}

static gpt2rt_result gpt2rt__cpu_zero_grads(gpt2rt_ctx *ctx, int moments) {
    if (!ctx->grads) return GPT2RT_OK; /* a context without arenas (a failed creation) */
    memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
    if (moments) memset(ctx->m, 0, (size_t)ctx->n_opt * 2 * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_logits(gpt2rt_ctx *ctx, float *dst) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t i = 0; i < d->BT; i++) memcpy(dst + i * d->V, ctx->logits + i * d->Vp, (size_t)d->V * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_predictions(gpt2rt_ctx *ctx, float *dst) {
    memcpy(dst, ctx->ts_pred, (size_t)ctx->d.n_out * sizeof(float));
    return GPT2RT_OK;
}

/* the host's weights are the ones trained */
static gpt2rt_result gpt2rt__cpu_host_weights(gpt2rt_ctx *ctx) {
    (void)ctx;
    return GPT2RT_OK;
}

static void gpt2rt__cpu_allocated(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead) {
    (void)overhead; /* no driver */
    memcpy(bytes, ctx->arena_bytes, GPT2RT_MEM_COUNT * sizeof(uint64_t));
}

static gpt2rt_result gpt2rt__cpu_dp_open(gpt2rt_ctx *ctx) {
    (void)ctx; /* the threads' communicator (10.1) is all the ranks share */
    return GPT2RT_OK;
}

static void gpt2rt__cpu_release(gpt2rt_ctx *ctx) {
    (void)ctx; /* the arenas are the context's (gpt2rt_free) */
}

/* the CPU's step-level work further on: the update in 9, the rest in 10.1 and 11.6 */
static gpt2rt_result gpt2rt__cpu_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);
static gpt2rt_result gpt2rt__cpu_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter);
static gpt2rt_result gpt2rt__cpu_upload(gpt2rt_ctx *ctx, const float *m, const float *v);
static gpt2rt_result gpt2rt__cpu_host_moments(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf);
static gpt2rt_result gpt2rt__cpu_param_read(gpt2rt_ctx *ctx, const char *name, const gpt2rt__tensor *t,
                                            gpt2rt_param_what what, float *dst);
static gpt2rt_result gpt2rt__cpu_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan);

static const gpt2rt__backend gpt2rt__cpu_backend = {
    gpt2rt__cpu_embed_forward, gpt2rt__cpu_layer_forward, gpt2rt__cpu_head_forward, gpt2rt__cpu_head_backward,
    gpt2rt__cpu_layer_backward, gpt2rt__cpu_embed_backward, gpt2rt__cpu_copy,
    gpt2rt__cpu_forward, gpt2rt__cpu_forward_series, gpt2rt__cpu_backward, gpt2rt__cpu_update, gpt2rt__cpu_zero_grads,
    gpt2rt__cpu_logits, gpt2rt__cpu_predictions, gpt2rt__cpu_dp_reduce, gpt2rt__cpu_host_weights, gpt2rt__cpu_upload,
    gpt2rt__cpu_host_moments, gpt2rt__cpu_param_read, gpt2rt__cpu_allocated, gpt2rt__cpu_dp_rank, gpt2rt__cpu_dp_open,
    gpt2rt__cpu_release, gpt2rt__cpu_release, gpt2rt__cpu_decode};

/* ---- the layer split's stages: their state (10.2 runs them on the CPU, 8.7 on CUDA devices) ---- */

typedef struct gpt2rt__ls {
    int n, m;                  /* stages, micro-batch slots (grad_accum) */
    int order;                 /* the head's and the embedding's gradients share a buffer */
    unsigned char **acts;      /* (m-1) extra activation sets */
    void *scratch[GPT2RT_MAX_DEVICES][2]; /* stages 1..n-1: transient, workspace */
    uint64_t act_bytes, scratch_bytes[2];
    gpt2rt_ctx *sc;            /* (n*m) stage s, micro-batch k: sc[s*m + k] */
    double *loss_sum;          /* (m) */
    int64_t *n_targets;        /* (m) */
#ifdef GPT2RT__COMM_THREADS
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
    int fwd[GPT2RT_MAX_DEVICES], bwd[GPT2RT_MAX_DEVICES]; /* micro-batches done per stage */
    int stop;                  /* a stage's thread did not start: the others return at once */
    const void *a, *b;         /* this call's inputs and targets (tokens) or x and y (series) */
    /* the CUDA backend's stages (8.7); unused on the CPU */
    const struct gpt2rt__ls_ops *ops; /* the CUDA stages' entries; NULL: the CPU's (10.2) */
    gpt2rt_ctx *hs;            /* (n) stage s's host context: its table, its fp32 weights, cu */
    struct gpt2rt__cu_state *cu[GPT2RT_MAX_DEVICES]; /* stage s's device state */
    gpt2rt_ctx *dev0[GPT2RT_MAX_DEVICES];           /* its own shadow context (cu[s]->dev between steps) */
    gpt2rt_ctx *cudev;         /* (n*m) stage s, micro-batch k: the shadow bound to activation set k */
    void **cuacts;             /* (n*m) the further activation sets (device; NULL for k = 0) */
    int peer[GPT2RT_MAX_DEVICES][GPT2RT_MAX_DEVICES]; /* peer copies between the stages' devices */
    int32_t *h_buckets;        /* (m, gpt2rt__cu_encoder_bucket_ints(BT)) the wte gradient's token buckets */
    int64_t *nb;               /* (m) their counts */
    gpt2rt_result res[GPT2RT_MAX_DEVICES]; /* a stage's failure in the last step */
    float loss_scale;          /* fp16: the dynamic loss scale of every stage; else 1 */
    int clean_steps;           /* fp16: updates since the last overflow or doubling */
} gpt2rt__ls;

/* what a CUDA layer split (8.7) does where the CPU's (10.2) does its own */
typedef struct gpt2rt__ls_ops {
    void (*release)(gpt2rt_ctx *ctx, gpt2rt__ls *ls); /* its device memory, states and host contexts */
    void (*begin)(gpt2rt_ctx *ctx, const void *a);  /* before the stages start (a: the step's inputs) */
    void *(*stage)(void *job);                      /* stage job->s's thread (a gpt2rt__ls_job) */
    gpt2rt_result (*end)(gpt2rt_ctx *ctx);          /* after the stages joined: a stage's failure */
    gpt2rt_result (*update)(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
    gpt2rt_result (*param_read)(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what, float *dst);
    void (*allocated)(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan);
} gpt2rt__ls_ops;

#ifdef GPT2RT__COMM_THREADS
/* wait until *cnt > k (a stage's counter), under the mutex; 0: stopped instead */
static int gpt2rt__ls_wait(gpt2rt__ls *ls, const int *cnt, int k) {
    pthread_mutex_lock(&ls->mu);
    while (*cnt <= k && !ls->stop) pthread_cond_wait(&ls->cv, &ls->mu);
    int ok = !ls->stop;
    pthread_mutex_unlock(&ls->mu);
    return ok;
}

static void gpt2rt__ls_done(gpt2rt__ls *ls, int *cnt) {
    pthread_mutex_lock(&ls->mu);
    (*cnt)++;
    pthread_cond_broadcast(&ls->cv);
    pthread_mutex_unlock(&ls->mu);
}

typedef struct gpt2rt__ls_job { gpt2rt_ctx *ctx; int s; } gpt2rt__ls_job;
#endif

/* ==== 8. CUDA backend ==== */

/* Compiled by nvcc, or by a host C++ compiler against the emulator in kernels/emu/
   (GPT2RT__CUDA; infix gpt2rt__cu_): hand-written kernels for every op that is not a
   matrix product (8.2, 8.3), cuBLASLt for the matrix products (8.4), the driver (8.5):
   the steps of 7.3's model driver on the device, the optimizer, creation and what the
   public calls do on a CUDA context, data parallel on the devices (8.6, which ends with
   the backend table's CUDA entries, gpt2rt__cu_be_) and the layer split's stages (8.7).
   Sections 10-11 reach all of it through ctx->be and ctx->ls->ops only. The kernel labs
   in kernels/ validate each part against the CPU backend and time it. */
#if GPT2RT__CUDA

/* ==== 8.1 Common ==== */

/* What the CUDA sections share: checked calls that return the error (never exit, never
   print), storage-type conversions, launch sizes. Arithmetic is always fp32. */

/* return the cudaError_t of a failing call to the caller; never exits, never prints */
#define GPT2RT__CU_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return e_; } while (0)
/* every kernel launch is written GPT2RT__LAUNCH(grid, block, smem, stream, k)(args),
   never with the chevrons, so the emulator in kernels/emu/ can launch on the CPU (the
   kernel goes last: a template's commas pass through; smem and stream always spelled) */
#ifndef GPT2RT__LAUNCH
#define GPT2RT__LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif
/* after a GPT2RT__LAUNCH */
#define GPT2RT__CU_LAUNCHED() do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) return e_; } while (0)

/* storage types: float, __nv_bfloat16, __half; arithmetic is always fp32 */
__device__ __forceinline__ float gpt2rt__cu_f(float x) { return x; }
__device__ __forceinline__ float gpt2rt__cu_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float gpt2rt__cu_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T gpt2rt__cu_to(float x);
template <> __device__ __forceinline__ float gpt2rt__cu_to<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 gpt2rt__cu_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half gpt2rt__cu_to<__half>(float x) { return __float2half_rn(x); }

static inline unsigned gpt2rt__cu_blocks(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* ==== 8.2 Ops ==== */

/* The lab files kernels/encoder.cu, layernorm.cu, gelu.cu, classifier.cu, bias_grad.cu,
   adamw.cu, global_norm.cu validate these kernels against the CPU ops and time them.

   The non-attention, non-matmul ops of the CUDA backend:
     embedding fwd/bwd, LayerNorm fwd (plain and fused with the residual add) and bwd,
     GELU fwd/bwd, residual add, casts, fused classifier (softmax cross-entropy with the
     backward in place), bias gradient, global gradient norm, inf/NaN check, AdamW;
     dropout (7.1's masks); time series: RevIN and patching, the position add, the
     de-normalisation, the MSE's gradient and the affine's (kernels/timeseries.cu).

   Conventions
   * floatX is the activation storage type: float, __nv_bfloat16 or __half. All arithmetic
     is fp32. Statistics (mean, rstd, losses, lse) and every gradient of a PARAMETER are
     fp32; gradients of activations are floatX.
   * Deterministic: no floating-point atomics. Every reduction runs in an order fixed by
     the shapes (never by the device or the timing), so two runs give the same bits.
     Ops that reduce across blocks write per-block partials into a caller-provided device
     scratch buffer (size: gpt2rt__cu_<op>_scratch_bytes) and a second kernel adds them
     in a fixed order.
   * Each launcher takes a cudaStream_t and returns the first cudaError_t (launch errors
     only; execution errors show up at the next synchronising call). No allocation, no
     synchronisation, no global state.
   * Fast paths use 128-bit loads/stores. They need the row length (C, OC, Vp) to be a
     multiple of VN = 16 / sizeof(floatX) (4 for fp32, 8 for bf16/fp16) and every pointer
     16-byte aligned (cudaMalloc gives 256); the launchers check this and otherwise take
     a generic scalar path that handles any size and alignment. Both paths do the same
     arithmetic per element, but the reductions group terms differently, so the fast and
     the generic path may differ in the last bits. */

#define GPT2RT__CU_NEG_BIG (-3.402823466e+38f) /* -FLT_MAX: "no value yet" of the running max */

/* ---- shared helpers ---- */

/* f (VN) = p (VN) converted to fp32. With VN * sizeof(S) a multiple of 16 the loads are
   128-bit and p must be 16-byte aligned; otherwise scalar. */
template <int VN, typename S>
__device__ __forceinline__ void gpt2rt__cu_ldv(float *f, const S *p) {
    if constexpr ((VN * sizeof(S)) % 16 == 0) {
        constexpr int per = (int)(16 / sizeof(S));
#pragma unroll
        for (int q = 0; q < VN / per; q++) {
            int4 raw = reinterpret_cast<const int4 *>(p)[q];
            const S *e = reinterpret_cast<const S *>(&raw);
#pragma unroll
            for (int k = 0; k < per; k++) f[q * per + k] = gpt2rt__cu_f(e[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VN; k++) f[k] = gpt2rt__cu_f(p[k]);
    }
}

/* p (VN) = f (VN) rounded to S; same access rules as gpt2rt__cu_ldv */
template <int VN, typename S>
__device__ __forceinline__ void gpt2rt__cu_stv(S *p, const float *f) {
    if constexpr ((VN * sizeof(S)) % 16 == 0) {
        constexpr int per = (int)(16 / sizeof(S));
#pragma unroll
        for (int q = 0; q < VN / per; q++) {
            int4 raw;
            S *e = reinterpret_cast<S *>(&raw);
#pragma unroll
            for (int k = 0; k < per; k++) e[k] = gpt2rt__cu_to<S>(f[q * per + k]);
            reinterpret_cast<int4 *>(p)[q] = raw;
        }
    } else {
#pragma unroll
        for (int k = 0; k < VN; k++) p[k] = gpt2rt__cu_to<S>(f[k]);
    }
}

/* sum over the 32 lanes, xor butterfly: every lane gets the same bits */
__device__ __forceinline__ float gpt2rt__cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double gpt2rt__cu_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* sum over the block (blockDim.x a multiple of 32, at most 1024), fixed order; the result
   is returned to every thread. sh: 32 doubles of shared memory, reusable after return. */
__device__ __forceinline__ double gpt2rt__cu_block_sum_d(double v, double *sh) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = gpt2rt__cu_warp_sum_d(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    v = gpt2rt__cu_warp_sum_d(v);
    __syncthreads(); /* sh may be reused */
    return v;
}

static inline int gpt2rt__cu_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* dst (n) fp32 += sum over g < G of parts[g * ld + i]. Block (32, 16): x a column,
   y one of 16 running sums over g = y, y+16, ...; the 16 are then added in order of y.
   The order depends only on G: deterministic. */
static __global__ void gpt2rt__cuk_sum_parts(float *dst, const float *parts, int64_t G, int64_t ld, int64_t n) {
    __shared__ float sh[16][33];
    int64_t i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (i < n)
        for (int64_t g = threadIdx.y; g < G; g += 16) acc += parts[g * ld + i];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float s = 0.0f;
        for (int y = 0; y < 16; y++) s += sh[y][threadIdx.x];
        dst[i] += s;
    }
}

static inline cudaError_t gpt2rt__cu_sum_parts(float *dst, const float *parts, int64_t G, int64_t ld, int64_t n,
                                               cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 32), dim3(32, 16), 0, stream, gpt2rt__cuk_sum_parts)(dst, parts, G, ld, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- embeddings ---- */

/* out (B,T,C) = wte[tokens] + wpe[t]; tokens (B,T) int32 in [0,Vp), wte (Vp,C), wpe (P,C).
   One thread per VN consecutive elements of a row (C % VN == 0). */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_forward(floatX *out, const int32_t *tokens, const floatX *wte,
                                            const floatX *wpe, int64_t BT, int64_t T, int64_t C) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN; /* element of (BT,C) */
    if (i >= BT * C) return;
    int64_t bt = i / C, c = i - bt * C, t = bt % T;
    float a[VN], b[VN];
    gpt2rt__cu_ldv<VN>(a, wte + (int64_t)tokens[bt] * C + c);
    gpt2rt__cu_ldv<VN>(b, wpe + t * C + c);
#pragma unroll
    for (int k = 0; k < VN; k++) a[k] += b[k];
    gpt2rt__cu_stv<VN>(out + i, a);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_encoder_forward(floatX *out, const int32_t *tokens, const floatX *wte,
                                              const floatX *wpe, int64_t B, int64_t T, int64_t C,
                                              cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    int64_t n = B * T * C;
    if (n <= 0) return cudaSuccess;
    if (C % VN == 0 && gpt2rt__cu_al16(out) && gpt2rt__cu_al16(wte) && gpt2rt__cu_al16(wpe))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n / VN, 256), 256, 0, stream, gpt2rt__cuk_encoder_forward<floatX, VN>)(
            out, tokens, wte, wpe, B * T, T, C);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_encoder_forward<floatX, 1>)(
            out, tokens, wte, wpe, B * T, T, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* Generation (8.5's decode pass): x (N,C) = wte[tok] + wpe[pos], N new tokens at any
   positions, the sum in fp32 as the encoder's. One thread per element. */
template <typename floatX>
__global__ void gpt2rt__cuk_decode_embed(floatX *x, const int32_t *tok, const int32_t *pos, const floatX *wte,
                                         const floatX *wpe, int64_t N, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    int64_t n = i / C, c = i - n * C;
    x[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(wte[(int64_t)tok[n] * C + c]) + gpt2rt__cu_f(wpe[(int64_t)pos[n] * C + c]));
}

template <typename floatX>
static cudaError_t gpt2rt__cu_decode_embed(floatX *x, const int32_t *tok, const int32_t *pos, const floatX *wte,
                                           const floatX *wpe, int64_t N, int64_t C, cudaStream_t stream) {
    if (N * C <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(N * C, 256), 256, 0, stream, gpt2rt__cuk_decode_embed<floatX>)(x, tok, pos, wte,
                                                                                                   wpe, N, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* The bucket list of the deterministic dwte: the BT positions grouped by token.
   buf: int32, gpt2rt__cu_encoder_bucket_ints(BT) = 3*BT + 1 entries, fixed offsets:
     buf[0 .. nb]               start of bucket k in pos (nb + 1 entries, start[nb] = BT)
     buf[BT+1 .. BT+nb]         token of bucket k (increasing)
     buf[2BT+1 .. 3BT]          pos: the positions bt, grouped by token, increasing in a bucket
   Host code (heap sort by (token, position): O(BT log BT), no allocation). Upload the
   whole buffer (or its first 3*BT+1 entries) and pass nb to gpt2rt__cu_encoder_backward.
   Returns nb, the number of distinct tokens, or -1 if a token is outside [0, Vp). BT < 2^31. */
static inline int64_t gpt2rt__cu_encoder_bucket_ints(int64_t BT) { return 3 * BT + 1; }

static inline int gpt2rt__cu_bucket_less(const int32_t *tokens, int32_t a, int32_t b) {
    return tokens[a] < tokens[b] || (tokens[a] == tokens[b] && a < b);
}

static inline int64_t gpt2rt__cu_encoder_buckets(int32_t *buf, const int32_t *tokens, int64_t BT, int64_t Vp) {
    int32_t *start = buf, *ids = buf + BT + 1, *pos = buf + 2 * BT + 1;
    for (int64_t i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= Vp) return -1;
        pos[i] = (int32_t)i;
    }
    /* heap sort of pos by (token, position); the keys are unique, so the order is unique */
    for (int64_t n = BT, i = BT / 2 - 1;; ) {
        int64_t root;
        if (i >= 0) root = i--;                     /* building the heap */
        else if (--n > 0) { int32_t t = pos[0]; pos[0] = pos[n]; pos[n] = t; root = 0; } /* pop the max */
        else break;
        for (;;) { /* sift down */
            int64_t ch = 2 * root + 1;
            if (ch >= n) break;
            if (ch + 1 < n && gpt2rt__cu_bucket_less(tokens, pos[ch], pos[ch + 1])) ch++;
            if (!gpt2rt__cu_bucket_less(tokens, pos[root], pos[ch])) break;
            int32_t t = pos[root]; pos[root] = pos[ch]; pos[ch] = t;
            root = ch;
        }
    }
    int64_t nb = 0;
    for (int64_t i = 0; i < BT; i++)
        if (i == 0 || tokens[pos[i]] != tokens[pos[i - 1]]) { start[nb] = (int32_t)i; ids[nb] = tokens[pos[i]]; nb++; }
    start[nb] = (int32_t)BT;
    return nb;
}

/* dwte (Vp,C) fp32 += the rows of dout (BT,C) of each bucket, added in increasing position
   order (the CPU order). buckets: device copy of the list above. Grid (nb, column blocks);
   one thread per VN columns of one bucket. */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_backward_wte(float *dwte, const floatX *dout, const int32_t *buckets,
                                                 int64_t BT, int64_t C) {
    int64_t k = blockIdx.x, c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * VN;
    if (c >= C) return;
    const int32_t *start = buckets, *ids = buckets + BT + 1, *pos = buckets + 2 * BT + 1;
    float *dst = dwte + (int64_t)ids[k] * C + c;
    float acc[VN], d[VN];
    gpt2rt__cu_ldv<VN>(acc, dst);
    for (int32_t p = start[k], p1 = start[k + 1]; p < p1; p++) {
        gpt2rt__cu_ldv<VN>(d, dout + (int64_t)pos[p] * C + c);
#pragma unroll
        for (int q = 0; q < VN; q++) acc[q] += d[q];
    }
    gpt2rt__cu_stv<VN>(dst, acc);
}

/* dwpe (P,C) fp32 += dout (B,T,C) summed over b in increasing order (rows t < T only).
   One thread per VN elements of (T,C). */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_backward_wpe(float *dwpe, const floatX *dout, int64_t B, int64_t T, int64_t C) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN; /* element of (T,C) */
    if (i >= T * C) return;
    float acc[VN], d[VN];
    gpt2rt__cu_ldv<VN>(acc, dwpe + i);
    for (int64_t b = 0; b < B; b++) {
        gpt2rt__cu_ldv<VN>(d, dout + b * T * C + i);
#pragma unroll
        for (int q = 0; q < VN; q++) acc[q] += d[q];
    }
    gpt2rt__cu_stv<VN>(dwpe + i, acc);
}

/* dwte (Vp,C) +=, dwpe (P,C) += from dout (B,T,C) (either NULL: frozen, not computed);
   buckets (device) and nb from gpt2rt__cu_encoder_buckets over the same tokens (unused
   when dwte is NULL). Bitwise equal to the CPU gpt2rt__cpu_encoder_backward on the same
   (fp32-converted) dout. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_encoder_backward(float *dwte, float *dwpe, const floatX *dout, const int32_t *buckets,
                                               int64_t nb, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (B * T * C <= 0) return cudaSuccess;
    if (nb < 0 || nb > B * T) return cudaErrorInvalidValue;
    int fast = C % VN == 0 && gpt2rt__cu_al16(dwte) && gpt2rt__cu_al16(dwpe) && gpt2rt__cu_al16(dout);
    int vn = fast ? VN : 1;
    dim3 grid_wte((unsigned)nb, gpt2rt__cu_blocks(C / vn, 64));
    unsigned grid_wpe = gpt2rt__cu_blocks(T * C / vn, 256);
    if (dwte && nb) {
        if (fast) GPT2RT__LAUNCH(grid_wte, 64, 0, stream, gpt2rt__cuk_encoder_backward_wte<floatX, VN>)(dwte, dout, buckets, B * T, C);
        else GPT2RT__LAUNCH(grid_wte, 64, 0, stream, gpt2rt__cuk_encoder_backward_wte<floatX, 1>)(dwte, dout, buckets, B * T, C);
        GPT2RT__CU_LAUNCHED();
    }
    if (dwpe) {
        if (fast) GPT2RT__LAUNCH(grid_wpe, 256, 0, stream, gpt2rt__cuk_encoder_backward_wpe<floatX, VN>)(dwpe, dout, B, T, C);
        else GPT2RT__LAUNCH(grid_wpe, 256, 0, stream, gpt2rt__cuk_encoder_backward_wpe<floatX, 1>)(dwpe, dout, B, T, C);
        GPT2RT__CU_LAUNCHED();
    }
    return cudaSuccess;
}

/* ---- LayerNorm (eps 1e-5, biased variance) ---- */

/* One warp per row; lane l handles the VN-wide column groups l, l+32, ... (the same ones
   in every pass, so a lane re-reads only what it wrote itself).
   out (N,C) floatX; mean (N), rstd (N) fp32, either may be NULL; w (C), b (C).
   RESID = false: normalises inp (N,C).
   RESID = true : res (N,C) = inp + inp2 rounded to floatX, then normalises res (the value
                  as stored, so the backward sees the same input). res may alias inp or inp2. */
template <typename floatX, int VN, bool RESID>
__global__ void gpt2rt__cuk_layernorm_forward(floatX *out, float *mean, float *rstd, floatX *res, const floatX *inp,
                                              const floatX *inp2, const floatX *w, const floatX *b, int64_t N,
                                              int64_t C) {
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX *x = inp + row * C;
    float a[VN], t[VN], sum = 0.0f;
    if (RESID) {
        floatX *r = res + row * C;
        for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
            gpt2rt__cu_ldv<VN>(a, x + c);
            gpt2rt__cu_ldv<VN>(t, inp2 + row * C + c);
#pragma unroll
            for (int k = 0; k < VN; k++) { a[k] = gpt2rt__cu_f(gpt2rt__cu_to<floatX>(a[k] + t[k])); sum += a[k]; }
            gpt2rt__cu_stv<VN>(r + c, a);
        }
        x = r;
    } else {
        for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
            gpt2rt__cu_ldv<VN>(a, x + c);
#pragma unroll
            for (int k = 0; k < VN; k++) sum += a[k];
        }
    }
    float m = gpt2rt__cu_warp_sum(sum) / (float)C, var = 0.0f;
    for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
        gpt2rt__cu_ldv<VN>(a, x + c);
#pragma unroll
        for (int k = 0; k < VN; k++) { float d = a[k] - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(gpt2rt__cu_warp_sum(var) / (float)C + 1e-5f);
    floatX *o = out + row * C;
    for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
        float wv[VN], bv[VN];
        gpt2rt__cu_ldv<VN>(a, x + c);
        gpt2rt__cu_ldv<VN>(wv, w + c);
        gpt2rt__cu_ldv<VN>(bv, b + c);
#pragma unroll
        for (int k = 0; k < VN; k++) a[k] = (a[k] - m) * s * wv[k] + bv[k];
        gpt2rt__cu_stv<VN>(o + c, a);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

template <typename floatX, bool RESID>
static cudaError_t gpt2rt__cu_layernorm_forward_impl(floatX *out, float *mean, float *rstd, floatX *res,
                                                     const floatX *inp, const floatX *inp2, const floatX *w,
                                                     const floatX *b, int64_t N, int64_t C, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (N <= 0 || C <= 0) return cudaSuccess;
    unsigned grid = gpt2rt__cu_blocks(N, 8); /* 8 warps (rows) per block */
    int fast = C % VN == 0 && gpt2rt__cu_al16(out) && gpt2rt__cu_al16(inp) && gpt2rt__cu_al16(w) &&
               gpt2rt__cu_al16(b) && (!RESID || (gpt2rt__cu_al16(res) && gpt2rt__cu_al16(inp2)));
    if (fast)
        GPT2RT__LAUNCH(grid, 256, 0, stream, gpt2rt__cuk_layernorm_forward<floatX, VN, RESID>)(out, mean, rstd, res, inp, inp2, w, b, N, C);
    else
        GPT2RT__LAUNCH(grid, 256, 0, stream, gpt2rt__cuk_layernorm_forward<floatX, 1, RESID>)(out, mean, rstd, res, inp, inp2, w, b, N, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (N,C), mean (N), rstd (N) (NULL: not stored) from inp (N,C), w (C), b (C). No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *w, const floatX *b, int64_t N, int64_t C,
                                                cudaStream_t stream) {
    return gpt2rt__cu_layernorm_forward_impl<floatX, false>(out, mean, rstd, (floatX *)0, inp, (const floatX *)0,
                                                           w, b, N, C, stream);
}

/* res (N,C) = a + b (rounded to floatX; may alias a or b), then out (N,C), mean, rstd =
   LayerNorm(res) with w (C), bias (C). The `x += attn; ln_2(x)` pair. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_residual_layernorm_forward(floatX *res, floatX *out, float *mean, float *rstd,
                                                         const floatX *a, const floatX *b, const floatX *w,
                                                         const floatX *bias, int64_t N, int64_t C,
                                                         cudaStream_t stream) {
    return gpt2rt__cu_layernorm_forward_impl<floatX, true>(out, mean, rstd, res, a, b, w, bias, N, C, stream);
}

#define GPT2RT__CU_LN_ROWS 32 /* rows per block of the LayerNorm backward = rows per dw/db partial */

/* warps per block of the LayerNorm backward: each warp keeps fp32 dw and db accumulators
   for the whole row (8*C bytes of shared memory), at most 48 KiB in all when C <= 6144 */
static inline int gpt2rt__cu_ln_warps(int64_t C) {
    int64_t w = 49152 / (8 * C);
    return w < 1 ? 1 : w > 8 ? 8 : (int)w;
}

/* device bytes of scratch gpt2rt__cu_layernorm_backward needs: ceil(N/32) partials of 2C floats */
static inline size_t gpt2rt__cu_layernorm_backward_scratch_bytes(int64_t N, int64_t C) {
    return (size_t)((N + GPT2RT__CU_LN_ROWS - 1) / GPT2RT__CU_LN_ROWS) * (size_t)(2 * C) * sizeof(float);
}

/* Block g owns rows [32g, 32g+32); its W warps take rows warp, warp+W, ... in order.
   Per row: dinp (N,C) += (w*dout - mean(w*dout) - norm*mean(w*dout*norm)) * rstd, and the
   row's norm*dout and dout are added into the warp's shared dw, db accumulators. Then the
   block adds its warps in order: parts (G, 2C) with parts[g][0,C) = dw, parts[g][C,2C) = db.
   Shared layout: warp slice of 2C floats; column c = j*VN + k stored at k*(C/VN) + j so
   the 32 lanes hit 32 banks. dout, inp, w (C) floatX; mean, rstd (N) fp32 from the forward. */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_layernorm_backward(floatX *dinp, float *parts, const floatX *dout, const floatX *inp,
                                               const floatX *w, const float *mean, const float *rstd, int64_t N,
                                               int64_t C) {
    extern __shared__ float gpt2rt__cu_ln_sh[]; /* (W, 2C) */
    int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t CV = C / VN;
    for (int64_t i = threadIdx.x; i < (int64_t)W * 2 * C; i += blockDim.x) gpt2rt__cu_ln_sh[i] = 0.0f;
    __syncthreads();
    float *acc_w = gpt2rt__cu_ln_sh + (int64_t)warp * 2 * C, *acc_b = acc_w + C;
    int64_t r0 = (int64_t)blockIdx.x * GPT2RT__CU_LN_ROWS;
    int64_t r1 = r0 + GPT2RT__CU_LN_ROWS < N ? r0 + GPT2RT__CU_LN_ROWS : N;
    for (int64_t row = r0 + warp; row < r1; row += W) {
        const floatX *x = inp + row * C, *g = dout + row * C;
        float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
        float xv[VN], gv[VN], wv[VN];
        for (int64_t j = lane; j < CV; j += 32) {
            gpt2rt__cu_ldv<VN>(xv, x + j * VN);
            gpt2rt__cu_ldv<VN>(gv, g + j * VN);
            gpt2rt__cu_ldv<VN>(wv, w + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) {
                float n = (xv[k] - m) * s, dn = wv[k] * gv[k];
                dm += dn;
                dnm += dn * n;
                acc_w[k * CV + j] += n * gv[k];
                acc_b[k * CV + j] += gv[k];
            }
        }
        dm = gpt2rt__cu_warp_sum(dm) / (float)C;
        dnm = gpt2rt__cu_warp_sum(dnm) / (float)C;
        floatX *dx = dinp + row * C;
        for (int64_t j = lane; j < CV; j += 32) {
            float dv[VN];
            gpt2rt__cu_ldv<VN>(xv, x + j * VN);
            gpt2rt__cu_ldv<VN>(gv, g + j * VN);
            gpt2rt__cu_ldv<VN>(wv, w + j * VN);
            gpt2rt__cu_ldv<VN>(dv, dx + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) dv[k] += (wv[k] * gv[k] - dm - (xv[k] - m) * s * dnm) * s;
            gpt2rt__cu_stv<VN>(dx + j * VN, dv);
        }
    }
    __syncthreads();
    float *p = parts + (int64_t)blockIdx.x * 2 * C;
    for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float s = 0.0f;
        for (int v = 0; v < W; v++) s += gpt2rt__cu_ln_sh[(int64_t)v * 2 * C + i];
        int64_t half = i / C, li = i - half * C, k = li / CV, j = li - k * CV;
        p[half * C + j * VN + k] = s;
    }
}

/* dinp (N,C) floatX +=, dw (C) fp32 +=, db (C) fp32 += from dout (N,C) and the forward's
   inp (N,C), w (C), mean (N), rstd (N). dinp must not alias dout or inp. dw and db may be
   NULL (a frozen LayerNorm: only dinp is wanted; the partials are still written).
   scratch: device, gpt2rt__cu_layernorm_backward_scratch_bytes(N, C). For C > 6144 the
   launcher raises the kernel's dynamic shared memory limit (8*C bytes, C <= ~29000). */
template <typename floatX>
static cudaError_t gpt2rt__cu_layernorm_backward(floatX *dinp, float *dw, float *db, const floatX *dout,
                                                 const floatX *inp, const floatX *w, const float *mean,
                                                 const float *rstd, float *scratch, int64_t N, int64_t C,
                                                 cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (N <= 0 || C <= 0) return cudaSuccess;
    int W = gpt2rt__cu_ln_warps(C);
    int64_t G = (N + GPT2RT__CU_LN_ROWS - 1) / GPT2RT__CU_LN_ROWS;
    size_t smem = (size_t)W * 2 * (size_t)C * sizeof(float);
    int fast = C % VN == 0 && gpt2rt__cu_al16(dinp) && gpt2rt__cu_al16(dout) && gpt2rt__cu_al16(inp) &&
               gpt2rt__cu_al16(w);
    if (fast) {
        if (smem > 49152)
            GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_layernorm_backward<floatX, VN>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        GPT2RT__LAUNCH((unsigned)G, W * 32, smem, stream, gpt2rt__cuk_layernorm_backward<floatX, VN>)(dinp, scratch, dout, inp, w,
                                                                                         mean, rstd, N, C);
    } else {
        if (smem > 49152)
            GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_layernorm_backward<floatX, 1>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        GPT2RT__LAUNCH((unsigned)G, W * 32, smem, stream, gpt2rt__cuk_layernorm_backward<floatX, 1>)(dinp, scratch, dout, inp, w,
                                                                                        mean, rstd, N, C);
    }
    GPT2RT__CU_LAUNCHED();
    if (dw) GPT2RT__CU_TRY(gpt2rt__cu_sum_parts(dw, scratch, G, 2 * C, C, stream));
    if (db) GPT2RT__CU_TRY(gpt2rt__cu_sum_parts(db, scratch + C, G, 2 * C, C, stream));
    return cudaSuccess;
}

/* ---- GELU (tanh form), residual add, casts: elementwise ---- */
/* Elementwise kernels: one thread per VN elements; the last thread does the tail of n
   that is not a multiple of VN with scalar accesses. */

__device__ __forceinline__ float gpt2rt__cu_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gpt2rt__cu_gelu_grad(float x) {
    float th = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

/* out (n) = gelu(inp (n)); out may alias inp */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_gelu_forward(floatX *out, const floatX *inp, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, inp + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] = gpt2rt__cu_gelu(x[k]);
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_gelu(gpt2rt__cu_f(inp[i])));
    }
}

/* dinp (n) = gelu'(inp (n)) * dout (n); dinp may alias dout */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN], d[VN];
        gpt2rt__cu_ldv<VN>(x, inp + i);
        gpt2rt__cu_ldv<VN>(d, dout + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] = gpt2rt__cu_gelu_grad(x[k]) * d[k];
        gpt2rt__cu_stv<VN>(dinp + i, x);
    } else {
        for (; i < n; i++)
            dinp[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_gelu_grad(gpt2rt__cu_f(inp[i])) * gpt2rt__cu_f(dout[i]));
    }
}

/* out (n) = a (n) + b (n); out may alias a or b */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_residual_forward(floatX *out, const floatX *a, const floatX *b, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN], y[VN];
        gpt2rt__cu_ldv<VN>(x, a + i);
        gpt2rt__cu_ldv<VN>(y, b + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] += y[k];
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(a[i]) + gpt2rt__cu_f(b[i]));
    }
}

/* out (n) To = in (n) From, round to nearest even; VN = 8 (one or two 128-bit accesses) */
template <typename To, typename From, int VN>
__global__ void gpt2rt__cuk_cast(To *out, const From *in, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, in + i);
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<To>(gpt2rt__cu_f(in[i]));
    }
}

/* out (n) = gelu(inp (n)). No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_gelu_forward(floatX *out, const floatX *inp, int64_t n, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(inp))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_gelu_forward<floatX, VN>)(out, inp, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_gelu_forward<floatX, 1>)(out, inp, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dinp (n) = gelu'(inp) * dout; dinp may alias dout. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, int64_t n,
                                            cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(dinp) && gpt2rt__cu_al16(inp) && gpt2rt__cu_al16(dout))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_gelu_backward<floatX, VN>)(dinp, inp, dout, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_gelu_backward<floatX, 1>)(dinp, inp, dout, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) = a (n) + b (n); out may alias a or b. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_residual_forward(floatX *out, const floatX *a, const floatX *b, int64_t n,
                                               cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(a) && gpt2rt__cu_al16(b))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_residual_forward<floatX, VN>)(out, a, b, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_residual_forward<floatX, 1>)(out, a, b, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) To = in (n) From (fp32 -> floatX, floatX -> fp32, or same-type copy). No scratch. */
template <typename To, typename From>
static cudaError_t gpt2rt__cu_cast(To *out, const From *in, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(in))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + 7) / 8, 256), 256, 0, stream, gpt2rt__cuk_cast<To, From, 8>)(out, in, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_cast<To, From, 1>)(out, in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- fused classifier: softmax cross-entropy over the first V of Vp columns ---- */

#define GPT2RT__CU_CLS_THREADS 512

/* (m, s) <- the log-sum-exp pair of (m, s) and (m2, s2): sum = s e^m + s2 e^m2. Symmetric
   in its two arguments, so both lanes of a butterfly get the same bits. m = -FLT_MAX,
   s = 0 is the empty pair (no inf - inf). */
__device__ __forceinline__ void gpt2rt__cu_lse_merge(float &m, float &s, float m2, float s2) {
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

/* One block per row i. logits (BT,Vp) floatX; targets (BT) int32, < 0: ignored, else < V.
   Pass 1: per-thread online max/sum of exp over columns < V, merged over the block in a
   fixed order -> lse; losses[i] = lse - x[target] (0 for ignored rows); lse_out[i] = lse
   unless NULL. Pass 2 (WRITE): the row becomes dlogits in place,
   (softmax - onehot(target)) * dloss for columns < V, 0 for columns >= V and ignored rows.
   The second read of the row mostly hits L2. VN columns per access (Vp % VN == 0). */
template <typename floatX, int VN, bool WRITE>
__global__ void __launch_bounds__(GPT2RT__CU_CLS_THREADS)
gpt2rt__cuk_classifier(floatX *logits, float *losses, float *lse_out, const int32_t *targets, float dloss,
                       int64_t V, int64_t Vp) {
    __shared__ float sh_m[32], sh_s[32];
    int64_t row = blockIdx.x;
    floatX *x = logits + row * Vp;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    int32_t tgt = targets[row];
    float x_tgt = 0.0f;
    if (threadIdx.x == 0 && tgt >= 0) x_tgt = gpt2rt__cu_f(x[tgt]); /* read before anyone writes */
    float m = GPT2RT__CU_NEG_BIG, s = 0.0f, v[VN];
    int64_t nv = (V + VN - 1) / VN; /* VN-groups holding columns < V */
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
        gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            if (j * VN + k >= V) break;
            if (v[k] > m) { s = s * expf(m - v[k]) + 1.0f; m = v[k]; }
            else s += expf(v[k] - m);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        gpt2rt__cu_lse_merge(m, s, m2, s2);
    }
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();
    m = lane < nw ? sh_m[lane] : GPT2RT__CU_NEG_BIG;
    s = lane < nw ? sh_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        gpt2rt__cu_lse_merge(m, s, m2, s2);
    }
    float lse = m + logf(s); /* every warp computed the same bits */
    if (threadIdx.x == 0) {
        losses[row] = tgt >= 0 ? lse - x_tgt : 0.0f;
        if (lse_out) lse_out[row] = lse;
    }
    if constexpr (WRITE) { /* stores, all after the barrier above, so after the read of x[tgt] */
        for (int64_t j = threadIdx.x; j < Vp / VN; j += blockDim.x) {
            gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) {
                int64_t col = j * VN + k;
                float d = 0.0f;
                if (tgt >= 0 && col < V) {
                    d = expf(v[k] - lse) * dloss;
                    if (col == tgt) d -= dloss;
                }
                v[k] = d;
            }
            gpt2rt__cu_stv<VN>(x + j * VN, v);
        }
    }
}

/* losses (BT) fp32 (0 for ignored rows), lse (BT) fp32 or NULL, from logits (BT,Vp) and
   targets (BT) (negative: ignored; else < V). write_dlogits = 1: logits become dlogits in
   place, (softmax - onehot) * dloss, 0 in padded columns and ignored rows (dloss: e.g.
   1/n_targets, or loss_scale/n_targets). write_dlogits = 0: logits untouched (eval).
   Never materialises probabilities. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_classifier(floatX *logits, float *losses, float *lse, const int32_t *targets,
                                         float dloss, int write_dlogits, int64_t BT, int64_t V, int64_t Vp,
                                         cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (BT <= 0) return cudaSuccess;
    if (V <= 0 || V > Vp) return cudaErrorInvalidValue;
    int fast = Vp % VN == 0 && gpt2rt__cu_al16(logits);
    unsigned grid = (unsigned)BT;
    if (fast && write_dlogits)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, VN, true>)(logits, losses, lse, targets, dloss, V, Vp);
    else if (fast)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, VN, false>)(logits, losses, lse, targets, dloss, V, Vp);
    else if (write_dlogits)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, 1, true>)(logits, losses, lse, targets, dloss, V, Vp);
    else
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, 1, false>)(logits, losses, lse, targets, dloss, V, Vp);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- bias gradient ---- */

#define GPT2RT__CU_BIAS_ROWS 64 /* rows per partial of the bias gradient */

/* device bytes of scratch gpt2rt__cu_bias_backward needs: ceil(BT/64) partials of OC floats */
static inline size_t gpt2rt__cu_bias_backward_scratch_bytes(int64_t BT, int64_t OC) {
    return (size_t)((BT + GPT2RT__CU_BIAS_ROWS - 1) / GPT2RT__CU_BIAS_ROWS) * (size_t)OC * sizeof(float);
}

/* parts (G, OC): parts[g][c] = sum of dout[r][c] over the 64 rows r of chunk g.
   Block (32, 8), grid (G, column tiles of 32*VN): x picks VN columns, y sums the rows
   r = 64g + y, +8, ... in order; the 8 sums are then added in order of y. dout (BT,OC) */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_bias_backward_parts(float *parts, const floatX *dout, int64_t BT, int64_t OC) {
    __shared__ float sh[8][VN][33];
    int64_t c = ((int64_t)blockIdx.y * 32 + threadIdx.x) * VN;
    int64_t r0 = (int64_t)blockIdx.x * GPT2RT__CU_BIAS_ROWS;
    int64_t r1 = r0 + GPT2RT__CU_BIAS_ROWS < BT ? r0 + GPT2RT__CU_BIAS_ROWS : BT;
    float acc[VN], d[VN];
#pragma unroll
    for (int k = 0; k < VN; k++) acc[k] = 0.0f;
    if (c < OC)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            gpt2rt__cu_ldv<VN>(d, dout + r * OC + c);
#pragma unroll
            for (int k = 0; k < VN; k++) acc[k] += d[k];
        }
#pragma unroll
    for (int k = 0; k < VN; k++) sh[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float s = 0.0f;
            for (int y = 0; y < 8; y++) s += sh[y][k][threadIdx.x];
            acc[k] = s;
        }
        float *p = parts + (int64_t)blockIdx.x * OC + c;
#pragma unroll
        for (int k = 0; k < VN; k++) p[k] = acc[k];
    }
}

/* db (OC) fp32 += column sums of dout (BT,OC) floatX. scratch: device,
   gpt2rt__cu_bias_backward_scratch_bytes(BT, OC). OC / (32*VN) < 65536. */
template <typename floatX>
static cudaError_t gpt2rt__cu_bias_backward(float *db, const floatX *dout, float *scratch, int64_t BT, int64_t OC,
                                            cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (BT <= 0 || OC <= 0) return cudaSuccess;
    int64_t G = (BT + GPT2RT__CU_BIAS_ROWS - 1) / GPT2RT__CU_BIAS_ROWS;
    if (OC % VN == 0 && gpt2rt__cu_al16(dout)) {
        dim3 grid((unsigned)G, gpt2rt__cu_blocks(OC / VN, 32));
        GPT2RT__LAUNCH(grid, dim3(32, 8), 0, stream, gpt2rt__cuk_bias_backward_parts<floatX, VN>)(scratch, dout, BT, OC);
    } else {
        dim3 grid((unsigned)G, gpt2rt__cu_blocks(OC, 32));
        GPT2RT__LAUNCH(grid, dim3(32, 8), 0, stream, gpt2rt__cuk_bias_backward_parts<floatX, 1>)(scratch, dout, BT, OC);
    }
    GPT2RT__CU_LAUNCHED();
    return gpt2rt__cu_sum_parts(db, scratch, G, OC, OC, stream);
}

/* ---- global gradient norm, inf/NaN check ---- */

#define GPT2RT__CU_NORM_CHUNK 65536 /* elements per block of the first pass */

/* device bytes of scratch gpt2rt__cu_global_norm needs: one double per chunk of 65536 */
static inline size_t gpt2rt__cu_global_norm_scratch_bytes(int64_t n) {
    return (size_t)((n + GPT2RT__CU_NORM_CHUNK - 1) / GPT2RT__CU_NORM_CHUNK) * sizeof(double);
}

/* parts[b] = sum of g[i]^2 over chunk b (fp64, products exact), block of 256 threads:
   each thread keeps VN running sums over its VN-groups, then the block sums in fixed order.
   g (n) fp32; VN = 4 needs g 16-byte aligned (chunks start at multiples of 65536). */
template <int VN>
__global__ void __launch_bounds__(256) gpt2rt__cuk_global_norm_parts(double *parts, const float *g, int64_t n) {
    __shared__ double sh[32];
    int64_t i0 = (int64_t)blockIdx.x * GPT2RT__CU_NORM_CHUNK;
    int64_t i1 = i0 + GPT2RT__CU_NORM_CHUNK < n ? i0 + GPT2RT__CU_NORM_CHUNK : n;
    int64_t iv = i0 + (i1 - i0) / VN * VN; /* end of the whole VN-groups */
    double acc[VN];
#pragma unroll
    for (int k = 0; k < VN; k++) acc[k] = 0.0;
    for (int64_t i = i0 + (int64_t)threadIdx.x * VN; i < iv; i += (int64_t)blockDim.x * VN) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, g + i);
#pragma unroll
        for (int k = 0; k < VN; k++) acc[k] += (double)x[k] * (double)x[k];
    }
    for (int64_t i = iv + threadIdx.x; i < i1; i += blockDim.x) acc[0] += (double)g[i] * (double)g[i];
    double t = 0.0;
#pragma unroll
    for (int k = 0; k < VN; k++) t += acc[k];
    t = gpt2rt__cu_block_sum_d(t, sh);
    if (threadIdx.x == 0) parts[blockIdx.x] = t;
}

/* norm[0] = sqrt(the sum of parts (G)), sumsq[0] = the sum; fp64, either may be NULL.
   One block of 1024 threads: thread t sums parts t, t+1024, ... then the block sums. */
static __global__ void __launch_bounds__(1024) gpt2rt__cuk_global_norm_final(double *norm, double *sumsq,
                                                                             const double *parts, int64_t G) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < G; i += blockDim.x) acc += parts[i];
    acc = gpt2rt__cu_block_sum_d(acc, sh);
    if (threadIdx.x == 0) {
        if (norm) norm[0] = sqrt(acc);
        if (sumsq) sumsq[0] = acc;
    }
}

/* norm (1 double, device) = ||g||_2 over g (n) fp32 (n up to ~2^40); sumsq (1 double,
   device) = the sum of squares; either may be NULL. A non-finite norm means an inf/NaN
   gradient. Fixed chunks of 65536 summed in fp64 (squares exact), so the result is
   deterministic; it is not bitwise the CPU gpt2rt__opt_sumsq (same chunks, another order
   inside a chunk), the two agree to ~1e-15 relative.
   scratch: device, gpt2rt__cu_global_norm_scratch_bytes(n), 8-byte aligned. */
static inline cudaError_t gpt2rt__cu_global_norm(double *norm, double *sumsq, const float *g, int64_t n,
                                                 double *scratch, cudaStream_t stream) {
    int64_t G = (n + GPT2RT__CU_NORM_CHUNK - 1) / GPT2RT__CU_NORM_CHUNK;
    if (n > 0) {
        if (gpt2rt__cu_al16(g)) GPT2RT__LAUNCH((unsigned)G, 256, 0, stream, gpt2rt__cuk_global_norm_parts<4>)(scratch, g, n);
        else GPT2RT__LAUNCH((unsigned)G, 256, 0, stream, gpt2rt__cuk_global_norm_parts<1>)(scratch, g, n);
        GPT2RT__CU_LAUNCHED();
    }
    GPT2RT__LAUNCH(1, 1024, 0, stream, gpt2rt__cuk_global_norm_final)(norm, sumsq, scratch, n > 0 ? G : 0);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* flag[0] = 1 if any of x (n) is inf or NaN (otherwise untouched). Grid-stride over
   VN-groups; a block stores 1 once if any of its threads saw one. Plain stores of the same
   value: the result does not depend on timing. */
template <typename S, int VN>
__global__ void gpt2rt__cuk_nonfinite(int *flag, const S *x, int64_t n) {
    int bad = 0;
    int64_t nv = n / VN, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += stride) {
        float v[VN];
        gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
        for (int k = 0; k < VN; k++) bad |= !isfinite(v[k]);
    }
    for (int64_t i = nv * VN + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad |= !isfinite(gpt2rt__cu_f(x[i]));
    if (__syncthreads_or(bad) && threadIdx.x == 0) flag[0] = 1;
}

/* flag (1 int, device) = 1 if x (n) (fp32, bf16 or fp16) holds an inf or NaN.
   reset = 1: the flag is first set to 0 (stream-ordered memset); reset = 0: ORs into the
   flag, to check several buffers with one flag. No scratch. */
template <typename S>
static cudaError_t gpt2rt__cu_nonfinite(int *flag, const S *x, int64_t n, int reset, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(S));
    if (reset) GPT2RT__CU_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(x)) {
        int64_t b = (int64_t)gpt2rt__cu_blocks(n / VN + 1, 256);
        GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, stream, gpt2rt__cuk_nonfinite<S, VN>)(flag, x, n);
    } else {
        int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
        GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, stream, gpt2rt__cuk_nonfinite<S, 1>)(flag, x, n);
    }
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- AdamW, all tensors in one launch ---- */

/* one row of the AdamW tensor table (the launcher reads it from device memory) */
typedef struct gpt2rt__cu_adamw_tensor {
    int64_t off;    /* element offset into the flat params / grads / m / v (and params_x) */
    int64_t n;      /* elements */
    int64_t block0; /* first block of the launch on this tensor: gpt2rt__cu_adamw_table fills it */
    int decay;      /* 1: decoupled weight decay applies (2-D weights) */
    int pad_;
} gpt2rt__cu_adamw_tensor;

#define GPT2RT__CU_ADAMW_CHUNK 4096 /* elements per block */

/* host: fills t[i].block0 (tensors in table order, each cut into chunks of 4096); returns
   the number of blocks of the launch. Upload the table afterwards. */
static inline int64_t gpt2rt__cu_adamw_table(gpt2rt__cu_adamw_tensor *t, int n_tensors) {
    int64_t b = 0;
    for (int i = 0; i < n_tensors; i++) {
        t[i].block0 = b;
        b += (t[i].n + GPT2RT__CU_ADAMW_CHUNK - 1) / GPT2RT__CU_ADAMW_CHUNK;
    }
    return b;
}

/* One element, the CPU gpt2rt__opt_adamw_scalar operation for operation, with explicitly
   rounded intrinsics so that nothing is contracted into an FMA: the same bits as the CPU
   when the CPU build does not contract either. */
__device__ __forceinline__ void gpt2rt__cu_adamw_one(float &p, float &g, float &m, float &v, float grad_scale,
                                                     float decay, float omb1, float b2, float omb2, float step_size,
                                                     float bc2_sqrt, float eps) {
    float gj = __fmul_rn(g, grad_scale);
    float pj = __fmul_rn(p, decay);
    float mj = __fadd_rn(m, __fmul_rn(omb1, __fsub_rn(gj, m)));
    float vj = __fadd_rn(__fmul_rn(v, b2), __fmul_rn(__fmul_rn(omb2, gj), gj));
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vj), bc2_sqrt), eps);
    p = __fsub_rn(pj, __fmul_rn(step_size, __fdiv_rn(mj, den)));
    g = 0.0f;
    m = mj;
    v = vj;
}

/* Block b finds its tensor (largest block0 <= b, binary search in the table (nt)) and
   updates its chunk: params, grads, m, v (flat, fp32); params_x (flat floatX) = the new
   params, unless NULL. VN = 4: 128-bit accesses when the tensor's offset is a multiple of 4
   (the arrays are 16-byte aligned), scalar otherwise. */
template <typename floatX, int VN>
__global__ void __launch_bounds__(256)
gpt2rt__cuk_adamw(float *params, floatX *params_x, float *grads, float *m, float *v,
                  const gpt2rt__cu_adamw_tensor *table, int nt, float grad_scale, float decay_on, float omb1,
                  float b2, float omb2, float step_size, float bc2_sqrt, float eps) {
    int64_t b = blockIdx.x;
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table[mid].block0 <= b) lo = mid; else hi = mid - 1;
    }
    const gpt2rt__cu_adamw_tensor tn = table[lo];
    float decay = tn.decay ? decay_on : 1.0f;
    int64_t e0 = tn.off + (b - tn.block0) * GPT2RT__CU_ADAMW_CHUNK;
    int64_t e1 = e0 + GPT2RT__CU_ADAMW_CHUNK < tn.off + tn.n ? e0 + GPT2RT__CU_ADAMW_CHUNK : tn.off + tn.n;
    int64_t ev = e0;
    if (VN > 1 && tn.off % VN == 0) {
        ev = e0 + (e1 - e0) / VN * VN;
        for (int64_t e = e0 + (int64_t)threadIdx.x * VN; e < ev; e += (int64_t)blockDim.x * VN) {
            float pv[VN], gv[VN], mv[VN], vv[VN];
            gpt2rt__cu_ldv<VN>(pv, params + e);
            gpt2rt__cu_ldv<VN>(gv, grads + e);
            gpt2rt__cu_ldv<VN>(mv, m + e);
            gpt2rt__cu_ldv<VN>(vv, v + e);
#pragma unroll
            for (int k = 0; k < VN; k++)
                gpt2rt__cu_adamw_one(pv[k], gv[k], mv[k], vv[k], grad_scale, decay, omb1, b2, omb2, step_size,
                                     bc2_sqrt, eps);
            gpt2rt__cu_stv<VN>(params + e, pv);
            gpt2rt__cu_stv<VN>(grads + e, gv);
            gpt2rt__cu_stv<VN>(m + e, mv);
            gpt2rt__cu_stv<VN>(v + e, vv);
            if (params_x) gpt2rt__cu_stv<VN>(params_x + e, pv);
        }
    }
    for (int64_t e = ev + threadIdx.x; e < e1; e += blockDim.x) {
        float pe = params[e], ge = grads[e], me = m[e], ve = v[e];
        gpt2rt__cu_adamw_one(pe, ge, me, ve, grad_scale, decay, omb1, b2, omb2, step_size, bc2_sqrt, eps);
        params[e] = pe; grads[e] = ge; m[e] = me; v[e] = ve;
        if (params_x) params_x[e] = gpt2rt__cu_to<floatX>(pe);
    }
}

/* One AdamW step (torch.optim.AdamW; the CPU gpt2rt__opt_adamw) over every tensor of table
   (device, nt rows, block0 filled by gpt2rt__cu_adamw_table, which also gave n_blocks).
   params, grads, m, v: flat fp32 arrays; grads are read scaled by grad_scale (clip
   coefficient times the loss-scale unscale) and zeroed. params_x: flat floatX copy of the
   weights to refresh, or NULL (fp32 training: the master is the copy). t: 1-based step.
   step_size = lr/(1-b1^t), bc2_sqrt = sqrt(1-b2^t), decay = 1 - lr*wd, in double on the
   host exactly as the CPU does. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_adamw(float *params, floatX *params_x, float *grads, float *m, float *v,
                                    const gpt2rt__cu_adamw_tensor *table, int nt, int64_t n_blocks, float lr,
                                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                    float grad_scale, cudaStream_t stream) {
    if (nt <= 0 || n_blocks <= 0) return cudaSuccess;
    float step_size = (float)(lr / (1.0 - pow(beta1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    float decay_on = (float)(1.0 - (double)lr * weight_decay);
    int fast = gpt2rt__cu_al16(params) && gpt2rt__cu_al16(grads) && gpt2rt__cu_al16(m) && gpt2rt__cu_al16(v) &&
               (!params_x || gpt2rt__cu_al16(params_x));
    if (fast)
        GPT2RT__LAUNCH((unsigned)n_blocks, 256, 0, stream, gpt2rt__cuk_adamw<floatX, 4>)(
            params, params_x, grads, m, v, table, nt, grad_scale, decay_on, 1.0f - beta1, beta2, 1.0f - beta2,
            step_size, bc2_sqrt, eps);
    else
        GPT2RT__LAUNCH((unsigned)n_blocks, 256, 0, stream, gpt2rt__cuk_adamw<floatX, 1>)(
            params, params_x, grads, m, v, table, nt, grad_scale, decay_on, 1.0f - beta1, beta2, 1.0f - beta2,
            step_size, bc2_sqrt, eps);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- dropout ----
   7.1's inverted dropout with 7.1's mask: element i of a site is kept when the hash
   gpt2rt__drop_factor draws (the same host-and-device function), so a mask on the
   device is bit for bit the CPU's, and the backward and the recompute draw it again. */

/* out (n) = in (n) * mask / (1-p) (out may alias in); its own backward. One thread per
   element; in fp32 the CPU's bits (one product per element). */
template <typename floatX>
__global__ void gpt2rt__cuk_dropout(floatX *out, const floatX *in, gpt2rt__drop dr, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(in[i]) * gpt2rt__drop_factor(&dr, i));
}

/* a site's mask (dr->on = 0: nothing to do) */
template <typename floatX>
static cudaError_t gpt2rt__cu_dropout(floatX *out, const floatX *in, const gpt2rt__drop *dr, int64_t n,
                                      cudaStream_t stream) {
    if (n <= 0 || !dr->on) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_dropout<floatX>)(out, in, *dr, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- time series: 6.2's RevIN, patches, head output and MSE gradient ----
   Series bm = b*M + m of the windows x (Bw,L,M) is row bm of the transformer's batch
   (B = Bw*M series of T = n_patches tokens). The statistics, patches and predictions
   are the CPU's bits in fp32: the same sums in double in the same order, IEEE division
   and square root, explicitly rounded products where the compiler could contract an
   FMA. The affine's gradients sum over the batch in a fixed tree (one block per
   channel), within rounding of the CPU's sequential sums and the same on every run. */

#define GPT2RT__CU_TS_THREADS 256 /* the per-channel reductions' block */

/* mean (B), std (B) of each series of x (Bw,L,M): gpt2rt__ts_revin_patch's statistics,
   one thread per series */
__global__ void gpt2rt__cuk_ts_stats(float *mean, float *std, const float *x, int64_t B, int64_t L, int64_t M) {
    int64_t bm = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bm >= B) return;
    const float *xs = x + (bm / M) * L * M + bm % M; /* step t at xs[t*M] */
    double s = 0.0, ss = 0.0;
    for (int64_t t = 0; t < L; t++) s = __dadd_rn(s, (double)xs[t * M]);
    float mu = (float)(s / (double)L);
    for (int64_t t = 0; t < L; t++) {
        double c = (double)(xs[t * M] - mu);
        ss = __dadd_rn(ss, __dmul_rn(c, c));
    }
    mean[bm] = mu;
    std[bm] = (float)sqrt(ss / (double)L + 1e-5);
}

/* patch (B*T,PL) floatX, zs (B*T,PL) fp32 (NULL: no affine): element k of patch p of
   series bm is step p*PS + k (past the end: step L-1), z = (x - mean) / std, then
   z * w[m] + b[m] with the affine (w, b (M); NULL: none); PATCH_DECODE's placeholders
   (p >= TH, gpt2rt__ts_hist) are 0 in both. One thread per element. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_patch(floatX *patch, float *zs, const float *x, const float *mean, const float *std,
                                     const floatX *w, const floatX *b, int64_t B, int64_t L, int64_t M, int64_t T,
                                     int64_t PL, int64_t PS, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    int64_t k = i % PL, p = i / PL % T, bm = i / (PL * T), m = bm % M;
    if (p >= TH) {
        patch[i] = gpt2rt__cu_to<floatX>(0.0f);
        if (zs) zs[i] = 0.0f;
        return;
    }
    int64_t t = p * PS + k < L ? p * PS + k : L - 1;
    float z = (x[(bm / M) * L * M + t * M + m] - mean[bm]) / std[bm];
    patch[i] = gpt2rt__cu_to<floatX>(w ? __fadd_rn(__fmul_rn(z, gpt2rt__cu_f(w[m])), gpt2rt__cu_f(b[m])) : z);
    if (zs) zs[i] = z;
}

/* RevIN and patching (gpt2rt__ts_revin_patch): mean, std (B) and the patches (with the
   affine: zs the patches before it) from the windows x (Bw,L,M) on the device */
template <typename floatX>
static cudaError_t gpt2rt__cu_ts_revin_patch(floatX *patch, float *zs, float *mean, float *std, const float *x,
                                             const floatX *w, const floatX *b, const gpt2rt__dims *d,
                                             cudaStream_t stream) {
    int64_t n = d->B * d->T * d->PL;
    if (n <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B, 128), 128, 0, stream, gpt2rt__cuk_ts_stats)(mean, std, x, d->B, d->Lb, d->M);
    GPT2RT__CU_LAUNCHED();
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_patch<floatX>)(patch, zs, x, mean, std, w, b, d->B,
                                                                               d->Lb, d->M, d->T, d->PL, d->PS,
                                                                               gpt2rt__ts_hist(d));
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* x (BT,C) += wpe[t] (T rows of (P,C)): in_layer's output plus the position, as the CPU
   adds it after the product */
template <typename floatX>
__global__ void gpt2rt__cuk_add_pos(floatX *x, const floatX *wpe, int64_t BT, int64_t T, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * C) return;
    x[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(x[i]) + gpt2rt__cu_f(wpe[(i / C % T) * C + i % C]));
}

template <typename floatX>
static cudaError_t gpt2rt__cu_add_pos(floatX *x, const floatX *wpe, int64_t BT, int64_t T, int64_t C,
                                      cudaStream_t stream) {
    if (BT * C <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(BT * C, 256), 256, 0, stream, gpt2rt__cuk_add_pos<floatX>)(x, wpe, BT, T, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* pred (Bw,H,M) fp32 = yn (B,H) in the original scale (gpt2rt__ts_denorm): the affine
   (w, b; NULL: none) undone as PatchTST does, then * std + mean. One thread per value. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_denorm(float *pred, const floatX *yn, const float *mean, const float *std,
                                      const floatX *w, const floatX *b, int64_t B, int64_t H, int64_t M) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int64_t bm = i / H, h = i % H, m = bm % M;
    float u = gpt2rt__cu_f(yn[i]);
    if (w) u = (u - gpt2rt__cu_f(b[m])) / (gpt2rt__cu_f(w[m]) + GPT2RT__TS_AFFINE_EPS);
    pred[((bm / M) * H + h) * M + m] = __fadd_rn(__fmul_rn(u, std[bm]), mean[bm]);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_denorm(float *pred, const floatX *yn, const float *mean, const float *std,
                                        const floatX *w, const floatX *b, const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->H <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B * d->H, 256), 256, 0, stream, gpt2rt__cuk_ts_denorm<floatX>)(pred, yn, mean, std, w, b,
                                                                                        d->B, d->H, d->M);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dyn (B,H) floatX, in place over yn: d(dloss * sum of squared errors of pred against y,
   both (Bw,H,M)) / d(yn) through the de-normalisation (gpt2rt__ts_mse_backward); with
   the affine (w, b) also dw, db (M) fp32 += (NULL: frozen). One block per channel m, its
   (window, step) pairs strided over the threads. */
template <typename floatX>
__global__ void __launch_bounds__(GPT2RT__CU_TS_THREADS)
gpt2rt__cuk_ts_mse_backward(floatX *dyn, const float *pred, const float *y, const float *std, const floatX *w,
                            const floatX *b, float *dw, float *db, float dloss, int64_t Bw, int64_t H, int64_t M) {
    __shared__ double sh[32];
    int64_t m = blockIdx.x;
    double sw = 0.0, sb = 0.0;
    float inv = w ? 1.0f / (gpt2rt__cu_f(w[m]) + GPT2RT__TS_AFFINE_EPS) : 1.0f;
    for (int64_t j = threadIdx.x; j < Bw * H; j += blockDim.x) {
        int64_t bw = j / H, h = j % H, bm = bw * M + m, i = (bw * H + h) * M + m;
        float du = 2.0f * (pred[i] - y[i]) * dloss * std[bm];
        if (!w) { dyn[bm * H + h] = gpt2rt__cu_to<floatX>(du); continue; }
        float u = (gpt2rt__cu_f(dyn[bm * H + h]) - gpt2rt__cu_f(b[m])) * inv;
        dyn[bm * H + h] = gpt2rt__cu_to<floatX>(du * inv);
        sw -= (double)du * inv * u; /* d/dw of (yn - b) / (w + eps) = -u / (w + eps) */
        sb -= (double)du * inv;
    }
    if (!w || !dw) return; /* the same for the whole block */
    sw = gpt2rt__cu_block_sum_d(sw, sh);
    sb = gpt2rt__cu_block_sum_d(sb, sh);
    if (threadIdx.x == 0) { dw[m] += (float)sw; db[m] += (float)sb; }
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_mse_backward(floatX *dyn, const float *pred, const float *y, const float *std,
                                              const floatX *w, const floatX *b, float *dw, float *db, float dloss,
                                              const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->H <= 0) return cudaSuccess;
    GPT2RT__LAUNCH((unsigned)d->M, GPT2RT__CU_TS_THREADS, 0, stream, gpt2rt__cuk_ts_mse_backward<floatX>)(
        dyn, pred, y, std, w, b, dw, db, dloss, d->Bw, d->H, d->M);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dw, db (M) fp32 += the affine's input side (gpt2rt__ts_affine_backward): over the
   patch elements of channel m (padded copies included), dpatch * z and dpatch, with
   dpatch (B*T*PL) floatX the patches' gradient and zs (B*T*PL) the patches before the
   affine; the first n = TH*PL of each series' ld = T*PL (placeholders: no affine). One
   block per channel. */
template <typename floatX>
__global__ void __launch_bounds__(GPT2RT__CU_TS_THREADS)
gpt2rt__cuk_ts_affine_backward(float *dw, float *db, const floatX *dpatch, const float *zs, int64_t Bw, int64_t M,
                               int64_t n, int64_t ld) {
    __shared__ double sh[32];
    int64_t m = blockIdx.x;
    double sw = 0.0, sb = 0.0;
    for (int64_t j = threadIdx.x; j < Bw * n; j += blockDim.x) {
        int64_t i = ((j / n) * M + m) * ld + j % n;
        double g = (double)gpt2rt__cu_f(dpatch[i]);
        sw += g * (double)zs[i];
        sb += g;
    }
    sw = gpt2rt__cu_block_sum_d(sw, sh);
    sb = gpt2rt__cu_block_sum_d(sb, sh);
    if (threadIdx.x == 0) { dw[m] += (float)sw; db[m] += (float)sb; }
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_affine_backward(float *dw, float *db, const floatX *dpatch, const float *zs,
                                                 const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->T * d->PL <= 0) return cudaSuccess;
    GPT2RT__LAUNCH((unsigned)d->M, GPT2RT__CU_TS_THREADS, 0, stream, gpt2rt__cuk_ts_affine_backward<floatX>)(
        dw, db, dpatch, zs, d->Bw, d->M, gpt2rt__ts_hist(d) * d->PL, d->T * d->PL);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- aLLM4TS's sequence head (6.2: head = NEXT_PATCH, PATCH_DECODE) on the device ----
   out (BT,PL) floatX: out_layer at every position, in the logits arena; yn (B,H) floatX
   after it (gpt2rt__ts_yn_off). One thread per element, except the loss's sums. */

/* PATCH_DECODE: yn (B,H) = the placeholders' rows of out (gpt2rt__ts_decode_gather) */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_decode_gather(floatX *yn, const floatX *out, int64_t B, int64_t T, int64_t PL,
                                             int64_t H, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int64_t bm = i / H, h = i % H;
    yn[i] = out[(bm * T + TH + h / PL) * PL + h % PL];
}

/* PATCH_DECODE: dout (BT,PL) = dyn (B,H) at the placeholders' rows, 0 elsewhere
   (gpt2rt__ts_decode_scatter); dout and dyn do not overlap */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_decode_scatter(floatX *dout, const floatX *dyn, int64_t B, int64_t T, int64_t PL,
                                              int64_t H, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    int64_t bm = i / (T * PL), h = (i / PL % T - TH) * PL + i % PL;
    dout[i] = h >= 0 && h < H ? dyn[bm * H + h] : gpt2rt__cu_to<floatX>(0.0f);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_decode(floatX *yn, floatX *out, int scatter, const gpt2rt__dims *d,
                                        cudaStream_t stream) {
    int64_t n = scatter ? d->BT * d->PL : d->B * d->H, TH = gpt2rt__ts_hist(d);
    if (n <= 0) return cudaSuccess;
    if (scatter)
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_decode_scatter<floatX>)(out, yn, d->B, d->T,
                                                                                          d->PL, d->H, TH);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_decode_gather<floatX>)(yn, out, d->B, d->T,
                                                                                         d->PL, d->H, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* NEXT_PATCH: part (B) fp64 = each series' sum over t < T-1, k < PL of (out[bm,t,k] -
   patch[bm,t+1,k])^2, in double in that order (gpt2rt__ts_next_sum's terms; the host adds
   the B partial sums in series order). One thread per series. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_next_sum(double *part, const floatX *out, const floatX *patch, int64_t B, int64_t T,
                                        int64_t PL) {
    int64_t bm = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bm >= B) return;
    double s = 0.0;
    for (int64_t i = bm * T * PL; i < ((bm + 1) * T - 1) * PL; i++) {
        double e = (double)gpt2rt__cu_f(out[i]) - (double)gpt2rt__cu_f(patch[i + PL]);
        s = __dadd_rn(s, __dmul_rn(e, e));
    }
    part[bm] = s;
}

/* NEXT_PATCH: dout (BT,PL) = 2 (out - the next patch) dloss, in place over out; a series'
   last position 0 (gpt2rt__ts_next_backward, the same fp32 operations) */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_next_backward(floatX *out, const floatX *patch, float dloss, int64_t B, int64_t T,
                                             int64_t PL) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    float g = 0.0f;
    if (i / PL % T < T - 1)
        g = __fmul_rn(__fmul_rn(2.0f, __fsub_rn(gpt2rt__cu_f(out[i]), gpt2rt__cu_f(patch[i + PL]))), dloss);
    out[i] = gpt2rt__cu_to<floatX>(g);
}

/* part != NULL: the loss's partial sums; else the gradient in place over out */
template <typename floatX>
static cudaError_t gpt2rt__cu_ts_next(double *part, floatX *out, const floatX *patch, float dloss,
                                      const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->BT * d->PL <= 0) return cudaSuccess;
    if (part)
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B, 128), 128, 0, stream, gpt2rt__cuk_ts_next_sum<floatX>)(part, out, patch, d->B,
                                                                                       d->T, d->PL);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->BT * d->PL, 256), 256, 0, stream, gpt2rt__cuk_ts_next_backward<floatX>)(
            out, patch, dloss, d->B, d->T, d->PL);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

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
     forward  one CTA per (query tile, b, h), key tiles visited in increasing order.
     backward 1) D kernel: one warp per (b,t,h) row.
              2) dK,dV: one CTA per (key tile, b, h) owns its 64 rows of dK and dV and loops
                 over the query tiles qt = kt .. last in increasing order.
              3) dQ: one CTA per (query tile, b, h) owns its 64 rows of dQ and loops over the
                 key tiles kt = 0 .. qt in increasing order (recomputing S and dP; this costs
                 two extra tile products compared with atomically accumulated dQ).
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

/* The seven inline-PTX statements of the header live in the helpers below; under
   GPT2RT_CUDA_EMU (kernels/emu, the CPU emulator of `make test-emu`) each calls the
   emulator's model of the instruction instead. */
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

/* ---------------------------------------------------------------------------------------------
   Host side
   ------------------------------------------------------------------------------------------- */
/* Tensor-core launches; only bf16 and fp16 have them (the float version reports
   cudaErrorNotSupported and is never called: see gpt2rt__cu_attn_use_fast). */
template <typename X> struct gpt2rt__cu_attn_fast {
    enum { available = 0 };
    static int built(void) { return 0; }
    static cudaError_t forward(X *, float *, const X *, int, int, int, int, cudaStream_t, int) { return cudaErrorNotSupported; }
    static cudaError_t backward(X *, const X *, const X *, const float *, const float *, int, int, int, int, cudaStream_t, int) {
        return cudaErrorNotSupported;
    }
};
template <typename X> struct gpt2rt__cu_attn_fast16 {
    enum { available = 1 };
    /* What is asked of the driver once per device (bit d of a mask: device d; ordinals
       from 64 on ask at every launch), not before every launch: whether the kernels'
       image this device runs was compiled for sm_80 or newer (GPT2RT__CU_ATT_SM80), and
       the backward's dynamic shared memory beyond 48 KiB (a per-device setting). Two
       threads that ask at once both ask: the answers and settings are the same. */
    static std::atomic<unsigned long long> &mask(int which) {
        static std::atomic<unsigned long long> m[3]; /* asked, built, shared memory set */
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
    static cudaError_t allow_smem(int smem_dkdv, int smem_dq) {
        unsigned long long bit = device_bit();
        if (bit && (mask(2).load() & bit)) return cudaSuccess;
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dkdv64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dkdv));
        GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_attn_bwd_dq64<X>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dq));
        mask(2).fetch_or(bit);
        return cudaSuccess;
    }
    static cudaError_t forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t s, int TH) {
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
        float scale_log2 = (1.0f / sqrtf(64.0f)) * GPT2RT__CU_ATT_LOG2E;
        GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, 0, s, gpt2rt__cuk_attn_fwd64<X>)(out, lse, qkv, T, C, NH, scale_log2, TH);
        GPT2RT__CU_LAUNCHED();
        return cudaSuccess;
    }
    static cudaError_t backward(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv,
                                int B, int T, int C, int NH, cudaStream_t s, int TH) {
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)(B * NH));
        float scale = 1.0f / sqrtf(64.0f), scale_log2 = scale * GPT2RT__CU_ATT_LOG2E;
        const int smem_dkdv = GPT2RT__CU_ATT_BWD_SMEM, smem_dq = 6 * GPT2RT__CU_ATT_TE * 2;
        GPT2RT__CU_TRY(allow_smem(smem_dkdv, smem_dq));
        GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, smem_dkdv, s, gpt2rt__cuk_attn_bwd_dkdv64<X>)(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2, TH);
        GPT2RT__CU_LAUNCHED();
        GPT2RT__LAUNCH(grid, GPT2RT__CU_ATT_THREADS, smem_dq, s, gpt2rt__cuk_attn_bwd_dq64<X>)(dqkv, dout, qkv, lse, Dv, T, C, NH, scale, scale_log2, TH);
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
        return gpt2rt__cu_attn_fast<X>::forward(out, lse, qkv, B, T, C, NH, s, TH);
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
        return gpt2rt__cu_attn_fast<X>::backward(dqkv, dout, qkv, lse, scratch_D, B, T, C, NH, s, TH);
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
    return gpt2rt__cu_attention_forward_impl<X>(out, lse, qkv, B, T, C, NH, s, 1, dr, TH);
}

/* dqkv (B,T,3C) (overwritten) <- dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T);
   scratch_D: B*NH*T floats, clobbered; dr: the forward's dropout mask or NULL */
template <typename X>
static cudaError_t gpt2rt__cu_attention_backward(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse,
                                                 float *scratch_D, int B, int T, int C, int NH, cudaStream_t s,
                                                 const gpt2rt__drop *dr = NULL, int TH = 0) {
    return gpt2rt__cu_attention_backward_impl<X>(dqkv, dout, qkv, out, lse, scratch_D, B, T, C, NH, s, 1, dr, TH);
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

/* ==== 8.4 Matrix products ==== */

/* kernels/matmul.cu validates and times this section.

   Matrix products of the model through cuBLASLt (link with -lcublasLt).

   ---- Row-major (ours) vs column-major (cuBLASLt) -------------------------------
   A row-major matrix X (R,C) with leading dimension C has exactly the bytes of the
   column-major matrix X^T (C x R) with leading dimension C. cuBLASLt computes, in
   column-major, D (m x n) = op(A) (m x k) * op(B) (k x n) [+ epilogue], where a layout
   describes the matrix as stored (before op). So each of our row-major products is
   written as its transpose:

   forward      out (BT,OC) = inp (BT,IC) W^T          W (OC,IC) like nn.Linear
                out^T (OC x BT) = W (OC x IC) * inp^T (IC x BT)
                A = W    stored col-major (IC x OC), ld IC  -> transA = T
                B = inp  stored col-major (IC x BT), ld IC  -> transB = N
                D = out  col-major (OC x BT), ld OC;  m = OC, n = BT, k = IC
                bias (OC) has the length of D's rows (m) and is broadcast along the
                columns (the BT tokens): CUBLASLT_EPILOGUE_BIAS / GELU_AUX_BIAS.
                aux (pre-GELU) has D's layout: row-major (BT,OC), ld OC.
   backward     dinp (BT,IC) = dout (BT,OC) W
   input        dinp^T (IC x BT) = W^T (IC x OC) * dout^T (OC x BT)
                A = W    stored col-major (IC x OC), ld IC  -> transA = N
                B = dout stored col-major (OC x BT), ld OC  -> transB = N
                D = dinp col-major (IC x BT), ld IC;  m = IC, n = BT, k = OC
                DGELU: aux = pre-GELU activation in D's layout, row-major (BT,IC).
   backward     dW (OC,IC) += dout^T (OC,BT) inp (BT,IC)
   weight       dW^T (IC x OC) = inp^T (IC x BT) * dout (BT x OC)
                A = inp  stored col-major (IC x BT), ld IC  -> transA = N
                B = dout stored col-major (OC x BT), ld OC  -> transB = T
                D = C = dW col-major (IC x OC), ld IC;  m = IC, n = OC, k = BT
                db (OC) = sum over tokens of dout = sum over GEMM-k of B: that is
                CUBLASLT_EPILOGUE_BGRADB ("bias size = number of columns of D, the
                reduction happens over k"). BGRADA would reduce inp: wrong one.

   ---- Which matmul the GELU epilogues attach to -----------------------------------
   MLP: fch = ln2 Wfc^T + bfc (BT,4C); fch_gelu = gelu(fch); y = fch_gelu Wproj^T + bproj.
   forward:  the c_fc matmul (IC = C, OC = 4C) with GELU_AUX_BIAS writes out = fch_gelu
             and aux = fch (pre-GELU, kept for the backward).
   backward: the dGELU attaches to the *input gradient of c_proj* (IC = 4C, OC = C):
             dinp = (dy Wproj) * gelu'(fch) is directly d(fch), the gradient at c_fc's
             output, so CUBLASLT_EPILOGUE_DGELU with aux = fch replaces
             gpt2rt__cpu_gelu_backward. c_fc's own backward (weight with BGRADB, input)
             then uses that d(fch) as its dout.
   (DGELU_BGRAD could also emit c_fc's bias gradient there; we do not use it: the
   bias gradient comes from the c_fc weight-gradient matmul, BGRADB, like every layer.)

   ---- Bias gradient semantics ------------------------------------------------------
   cuBLASLt's bias-gradient epilogues OVERWRITE the bias vector (there is no beta for
   it). gpt2rt__cu_matmul_backward_weight(accumulate = 0) lets BGRADB write db directly
   (db = column sums, dW = dout^T inp). With accumulate = 1 (dW += ..., gradient
   accumulation over micro-batches) BGRADB writes into the caller's db_scratch (OC
   floats) and a small kernel does db[o] += db_scratch[o] (deterministic). With
   accumulate = 1 and db != NULL, db_scratch is required.

   ---- Types --------------------------------------------------------------------------
   t = CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F is the storage type of activations and
   weights (A, B, and D of forward / backward input, bias, aux). Compute is always
   CUBLAS_COMPUTE_32F with fp32 alpha/beta (scale type CUDA_R_32F); for t = CUDA_R_32F
   and blas->tf32 != 0 it is CUBLAS_COMPUTE_32F_FAST_TF32. The weight gradient always
   has C = D = fp32 (A, B of type t), and its bias gradient is fp32 (the bias-gradient
   vector has the type of C). The bias (forward) and aux have the output's type
   (BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE left at their defaults = D's type).
   cuBLAS's table of supported cublasLtMatmul type combinations for COMPUTE_32F lists
   A/B = 16BF with C/D = 16BF or 32F, A/B = 16F with C/D = 16F or 32F, and 32F/32F.
   Epilogue support for a given combination is only discoverable at run time: if the
   heuristic returns no algorithm for a fused epilogue, the plan falls back to the plain
   product (or BIAS for GELU_AUX_BIAS) plus a small hand-written kernel here
   (GELU / dGELU elementwise, deterministic column sums for db). blas->fallbacks records
   which fallbacks were taken (GPT2RT__CU_MM_FB_* bits); blas->fuse = 0 forces them.

   ---- Determinism -------------------------------------------------------------------
   cuBLAS results are bitwise reproducible run to run for a given toolkit, GPU
   architecture and SM count, one stream, and a fixed algorithm + workspace. We pick
   the algorithm once per (op, types, shape, epilogue, pointer alignments, reduction
   mask) with cublasLtMatmulAlgoGetHeuristic and reuse it (plan cache in the struct).
   Split-K reduction schemes are controlled by blas->reduction_mask
   (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK); the default
   GPT2RT__CU_BLAS_REDUCTION_DEFAULT = CUBLASLT_REDUCTION_SCHEME_NONE excludes split-K
   entirely (the header documents INPLACE as counter-ordered and COMPUTE/OUTPUT_TYPE
   as a separate reduction step, i.e. none of them is atomics-ordered, so
   CUBLASLT_REDUCTION_SCHEME_MASK may be allowed for speed once the lab shows it
   bitwise stable on the target GPU; kernels/matmul.cu measures both).
   Different BT (so different shapes) may pick different kernels: results are then
   not bitwise comparable across batch sizes.

   ---- Workspace ------------------------------------------------------------------------
   GPT2RT__CU_BLAS_WORKSPACE = 32 MiB: cuBLAS's documented recommendation for Hopper
   (cublasSetWorkspace: 32 MiB on sm_90, 4 MiB for earlier architectures). The memory
   planner provides it (256-byte aligned device memory; cudaMalloc is).

   Not thread-safe: one gpt2rt__cu_blas per host thread / stream.
*/

#define GPT2RT__CU_BLAS_MAX_PLANS 64                           /* cached (op, shape, type) plans */
#define GPT2RT__CU_BLAS_REDUCTION_DEFAULT ((uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE)
/* blas->fallbacks bits: a fused epilogue was unavailable and the kernel here ran instead */
#define GPT2RT__CU_MM_FB_GELU 1u  /* forward GELU_AUX(_BIAS) -> BIAS/DEFAULT + gelu kernel */
#define GPT2RT__CU_MM_FB_DGELU 2u /* backward input DGELU -> DEFAULT + dgelu kernel */
#define GPT2RT__CU_MM_FB_BGRAD 4u /* backward weight BGRADB -> DEFAULT + column-sum kernel */

enum { GPT2RT__CU_MM_FWD = 0, GPT2RT__CU_MM_BWD_IN = 1, GPT2RT__CU_MM_BWD_W = 2 };

/* everything the algorithm choice depends on; compared with memcmp (memset first) */
typedef struct {
    int32_t op;           /* GPT2RT__CU_MM_* */
    int32_t epilogue;     /* cublasLtEpilogue_t requested */
    int32_t ab_type;      /* cudaDataType_t of A, B */
    int32_t cd_type;      /* cudaDataType_t of C, D */
    int32_t compute;      /* cublasComputeType_t */
    int32_t fuse;         /* blas->fuse when planned */
    int64_t m, n, k;      /* column-major GEMM sizes (see top comment) */
    uint32_t align_abcd;  /* min alignment (bytes, <= 256) of A, B, C, D pointers */
    uint32_t align_bias;  /* of the bias / bias-gradient pointer (256 when none) */
    uint32_t align_aux;   /* of the aux pointer (256 when none) */
    uint32_t reduction_mask;
} gpt2rt__cu_mm_key;

typedef struct {
    gpt2rt__cu_mm_key key;
    int32_t epilogue;              /* the epilogue actually planned (may be a fallback) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* lc describes both C and D */
    cublasLtMatmulAlgo_t algo;
} gpt2rt__cu_mm_plan;

typedef struct gpt2rt__cu_blas {
    cublasLtHandle_t lt;
    void *workspace;            /* device, workspace_bytes, 256-byte aligned */
    size_t workspace_bytes;     /* GPT2RT__CU_BLAS_WORKSPACE */
    cudaStream_t stream;        /* every call runs on it */
    int tf32;                   /* fp32 storage: 1 -> CUBLAS_COMPUTE_32F_FAST_TF32 */
    int fuse;                   /* 1 (default): cuBLASLt epilogues; 0: force the kernels here */
    uint32_t reduction_mask;    /* allowed CUBLASLT_REDUCTION_SCHEME_* (default NONE) */
    unsigned fallbacks;         /* GPT2RT__CU_MM_FB_* taken so far */
    int n_plans;
    gpt2rt__cu_mm_plan plans[GPT2RT__CU_BLAS_MAX_PLANS];
} gpt2rt__cu_blas;

/* ------------------------------------------------------------------ helpers */
static const char *gpt2rt__cu_blas_status_name(int s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cublasStatus_t(?)";
    }
}
static const char *gpt2rt__cu_mm_type_name(cudaDataType_t t) {
    return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "type?";
}
static const char *gpt2rt__cu_mm_op_name(int op) {
    return op == GPT2RT__CU_MM_FWD ? "matmul_forward"
         : op == GPT2RT__CU_MM_BWD_IN ? "matmul_backward_input" : "matmul_backward_weight";
}
static const char *gpt2rt__cu_mm_epi_name(int e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu_aux";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "gelu_aux_bias";
    case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
    case CUBLASLT_EPILOGUE_BGRADB: return "bgradb";
    default: return "epilogue?";
    }
}
/* largest power of two <= 256 dividing the address (256 for NULL) */
static uint32_t gpt2rt__cu_mm_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}
static uint32_t gpt2rt__cu_mm_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* "<call>(<op> <type> BT= IC= OC= <epilogue>): <status>" into err */
static int gpt2rt__cu_mm_fail(char *err, size_t cap, const char *call, int op, cudaDataType_t t,
                              int64_t BT, int64_t IC, int64_t OC, int epi, int status, int is_cuda) {
    if (err && cap)
        snprintf(err, cap, "%s(%s %s BT=%lld IC=%lld OC=%lld epilogue=%s): %s (%d)", call,
                 gpt2rt__cu_mm_op_name(op), gpt2rt__cu_mm_type_name(t), (long long)BT, (long long)IC,
                 (long long)OC, gpt2rt__cu_mm_epi_name(epi),
                 is_cuda ? cudaGetErrorString((cudaError_t)status) : gpt2rt__cu_blas_status_name(status), status);
    return status;
}

/* ------------------------------------------------------------------ fallback kernels */
#define GPT2RT__CU_MM_GELU_K 0.7978845608028654f /* sqrt(2/pi); same tanh form as the CPU */
__device__ __forceinline__ float gpt2rt__cu_mm_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(GPT2RT__CU_MM_GELU_K * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gpt2rt__cu_mm_dgelu(float x) {
    float th = tanhf(GPT2RT__CU_MM_GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GPT2RT__CU_MM_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
/* out (n) = gelu(pre (n)) */
template <typename T>
__global__ void gpt2rt__cu_mm_gelu_kernel(T *out, const T *pre, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gpt2rt__cu_to<T>(gpt2rt__cu_mm_gelu(gpt2rt__cu_f(pre[i])));
}
/* d (n) *= gelu'(pre (n)) */
template <typename T>
__global__ void gpt2rt__cu_mm_dgelu_kernel(T *d, const T *pre, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = gpt2rt__cu_to<T>(gpt2rt__cu_mm_dgelu(gpt2rt__cu_f(pre[i])) * gpt2rt__cu_f(d[i]));
}
/* db (OC) (+)= column sums of x (R,OC); block (32,16): 32 columns, 16 row lanes, each
   lane sums its rows in increasing order, lanes are added in increasing order */
template <typename T>
__global__ void gpt2rt__cu_mm_colsum_kernel(float *db, const T *x, int64_t R, int64_t OC, int accumulate) {
    __shared__ float part[16][33];
    int64_t o = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (o < OC)
        for (int64_t r = threadIdx.y; r < R; r += 16) acc += gpt2rt__cu_f(x[r * OC + o]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float s = 0.0f;
        for (int j = 0; j < 16; j++) s += part[j][threadIdx.x];
        db[o] = accumulate ? db[o] + s : s;
    }
}
/* y (n) += x (n) */
__global__ void gpt2rt__cu_mm_add_kernel(float *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}
static unsigned gpt2rt__cu_mm_grid(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? (b < 1 ? 1 : b) : 65536);
}
static cudaError_t gpt2rt__cu_mm_gelu_launch(cudaDataType_t t, void *out, const void *pre, int64_t n, cudaStream_t s) {
    if (t == CUDA_R_32F) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<float>)((float *)out, (const float *)pre, n);
    else if (t == CUDA_R_16BF) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<__nv_bfloat16>)((__nv_bfloat16 *)out, (const __nv_bfloat16 *)pre, n);
    else GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_gelu_kernel<__half>)((__half *)out, (const __half *)pre, n);
    return cudaGetLastError();
}
static cudaError_t gpt2rt__cu_mm_dgelu_launch(cudaDataType_t t, void *d, const void *pre, int64_t n, cudaStream_t s) {
    if (t == CUDA_R_32F) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<float>)((float *)d, (const float *)pre, n);
    else if (t == CUDA_R_16BF) GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<__nv_bfloat16>)((__nv_bfloat16 *)d, (const __nv_bfloat16 *)pre, n);
    else GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(n), 256, 0, s, gpt2rt__cu_mm_dgelu_kernel<__half>)((__half *)d, (const __half *)pre, n);
    return cudaGetLastError();
}
static cudaError_t gpt2rt__cu_mm_colsum_launch(cudaDataType_t t, float *db, const void *x, int64_t R, int64_t OC,
                                               int accumulate, cudaStream_t s) {
    dim3 grid((unsigned)((OC + 31) / 32)), block(32, 16);
    if (t == CUDA_R_32F) GPT2RT__LAUNCH(grid, block, 0, s, gpt2rt__cu_mm_colsum_kernel<float>)(db, (const float *)x, R, OC, accumulate);
    else if (t == CUDA_R_16BF) GPT2RT__LAUNCH(grid, block, 0, s, gpt2rt__cu_mm_colsum_kernel<__nv_bfloat16>)(db, (const __nv_bfloat16 *)x, R, OC, accumulate);
    else GPT2RT__LAUNCH(grid, block, 0, s, gpt2rt__cu_mm_colsum_kernel<__half>)(db, (const __half *)x, R, OC, accumulate);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ handle */
/* workspace: device memory of workspace_bytes (GPT2RT__CU_BLAS_WORKSPACE), 256-byte aligned */
static int gpt2rt__cu_blas_init(gpt2rt__cu_blas *b, void *workspace, size_t workspace_bytes, cudaStream_t stream,
                                char *err, size_t cap) {
    cublasStatus_t s;
    memset(b, 0, sizeof(*b));
    if (!workspace || ((uintptr_t)workspace % 256) != 0) {
        if (err && cap) snprintf(err, cap, "gpt2rt__cu_blas_init: workspace %p must be non-NULL and 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    s = cublasLtCreate(&b->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (err && cap) snprintf(err, cap, "cublasLtCreate: %s (%d)", gpt2rt__cu_blas_status_name(s), (int)s);
        b->lt = NULL;
        return s;
    }
    b->workspace = workspace;
    b->workspace_bytes = workspace_bytes;
    b->stream = stream;
    b->tf32 = 0;
    b->fuse = 1;
    b->reduction_mask = GPT2RT__CU_BLAS_REDUCTION_DEFAULT;
    return 0;
}

static void gpt2rt__cu_mm_plan_free(gpt2rt__cu_mm_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    p->la = p->lb = p->lc = NULL;
    p->desc = NULL;
}

/* drop the cached plans (e.g. after changing tf32 / fuse / reduction_mask: not needed,
   those are part of the key, but frees host memory of unused shapes) */
static void gpt2rt__cu_blas_clear_plans(gpt2rt__cu_blas *b) {
    for (int i = 0; i < b->n_plans; i++) gpt2rt__cu_mm_plan_free(&b->plans[i]);
    b->n_plans = 0;
}

static void gpt2rt__cu_blas_destroy(gpt2rt__cu_blas *b) {
    gpt2rt__cu_blas_clear_plans(b);
    if (b->lt) cublasLtDestroy(b->lt);
    b->lt = NULL;
}

/* ------------------------------------------------------------------ planning */
#define GPT2RT__CU_MM_CK(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { st = s_; what = #call; goto fail; } } while (0)

/* Build desc + layouts for key with epilogue epi and ask the heuristic for an algorithm.
   bias / aux: the real pointers (the heuristic reads their alignment). Returns 0,
   CUBLAS_STATUS_NOT_SUPPORTED when no algorithm exists, or another status; *what names
   the failing call. */
static int gpt2rt__cu_mm_make_plan(gpt2rt__cu_blas *b, const gpt2rt__cu_mm_key *key, int epi, const void *bias,
                                   const void *aux, gpt2rt__cu_mm_plan *p, const char **what_out) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = "";
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0, i, found = -1;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint64_t a_rows, a_cols, b_rows, b_cols;
    int64_t lda, ldb, ldc = key->m;
    uint32_t epilogue = (uint32_t)epi, al = key->align_abcd, mask = key->reduction_mask;
    uint64_t ws = b->workspace_bytes;

    memset(p, 0, sizeof(*p));
    p->key = *key;
    p->epilogue = epi;
    /* stored shapes (before op), see the mapping at the top */
    if (key->op == GPT2RT__CU_MM_FWD) { /* A = W: (k x m) stored, op T; B = inp: (k x n), op N */
        ta = CUBLAS_OP_T; a_rows = (uint64_t)key->k; a_cols = (uint64_t)key->m; lda = key->k;
        b_rows = (uint64_t)key->k; b_cols = (uint64_t)key->n; ldb = key->k;
    } else if (key->op == GPT2RT__CU_MM_BWD_IN) { /* A = W: (m x k), op N; B = dout: (k x n), op N */
        a_rows = (uint64_t)key->m; a_cols = (uint64_t)key->k; lda = key->m;
        b_rows = (uint64_t)key->k; b_cols = (uint64_t)key->n; ldb = key->k;
    } else { /* A = inp: (m x k), op N; B = dout: (n x k) stored, op T */
        tb = CUBLAS_OP_T;
        a_rows = (uint64_t)key->m; a_cols = (uint64_t)key->k; lda = key->m;
        b_rows = (uint64_t)key->n; b_cols = (uint64_t)key->k; ldb = key->n;
    }
    GPT2RT__CU_MM_CK(cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)key->compute, CUDA_R_32F));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_BGRADB)
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld_aux = key->m; /* aux has D's layout */
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        GPT2RT__CU_MM_CK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->la, (cudaDataType_t)key->ab_type, a_rows, a_cols, lda));
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->lb, (cudaDataType_t)key->ab_type, b_rows, b_cols, ldb));
    GPT2RT__CU_MM_CK(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType_t)key->cd_type, (uint64_t)key->m, (uint64_t)key->n, ldc));

    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceCreate(&pref));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)));
    GPT2RT__CU_MM_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)));

    memset(res, 0, sizeof(res));
    st = cublasLtMatmulAlgoGetHeuristic(b->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 8, res, &n_res);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) { what = "cublasLtMatmulAlgoGetHeuristic"; goto fail; }
    /* the heuristic's first usable answer (its ranking is deterministic for fixed inputs) */
    for (i = 0; st == CUBLAS_STATUS_SUCCESS && i < n_res; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= b->workspace_bytes) { found = i; break; }
    if (found < 0) { st = CUBLAS_STATUS_NOT_SUPPORTED; what = "cublasLtMatmulAlgoGetHeuristic (no algorithm)"; goto fail; }
    p->algo = res[found].algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return 0;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    gpt2rt__cu_mm_plan_free(p);
    *what_out = what;
    return (int)st;
}

/* The cached plan for key (made on first use). want: the fused epilogue; plain: what
   remains of it when the fused one is unavailable (the caller then runs the kernel). */
static int gpt2rt__cu_mm_get_plan(gpt2rt__cu_blas *b, const gpt2rt__cu_mm_key *key, int plain, const void *bias,
                                  const void *aux, gpt2rt__cu_mm_plan **out, const char **what) {
    gpt2rt__cu_mm_plan tmp, *p;
    int i, st, want = key->epilogue;
    for (i = 0; i < b->n_plans; i++)
        if (memcmp(&b->plans[i].key, key, sizeof(*key)) == 0) { *out = &b->plans[i]; return 0; }
    if (b->n_plans == GPT2RT__CU_BLAS_MAX_PLANS) { /* full: recycle the oldest slot (still correct, only slower) */
        gpt2rt__cu_mm_plan_free(&b->plans[0]);
        memmove(&b->plans[0], &b->plans[1], sizeof(b->plans[0]) * (GPT2RT__CU_BLAS_MAX_PLANS - 1));
        b->n_plans--;
    }
    if (!key->fuse) want = plain;
    st = gpt2rt__cu_mm_make_plan(b, key, want, bias, aux, &tmp, what);
    /* a fused epilogue this cuBLASLt cannot plan takes the plain product and the kernel
       after it: no algorithm (NOT_SUPPORTED), or a refusal of the epilogue itself or of
       its vector (INVALID_VALUE from a version without DGELU, or one that will not write
       BGRADB's bias gradient into an fp32 vector beside 16-bit inputs) */
    if (st != CUBLAS_STATUS_SUCCESS && want != plain)
        st = gpt2rt__cu_mm_make_plan(b, key, plain, bias, aux, &tmp, what);
    if (st) return st;
    p = &b->plans[b->n_plans++];
    *p = tmp;
    *out = p;
    return 0;
}

static void gpt2rt__cu_mm_key_init(gpt2rt__cu_mm_key *k, const gpt2rt__cu_blas *b, int op, int epi,
                                   cudaDataType_t ab, cudaDataType_t cd, int64_t m, int64_t n, int64_t kk) {
    memset(k, 0, sizeof(*k));
    k->op = op;
    k->epilogue = epi;
    k->ab_type = (int32_t)ab;
    k->cd_type = (int32_t)cd;
    k->compute = (int32_t)((ab == CUDA_R_32F && b->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    k->fuse = b->fuse;
    k->m = m;
    k->n = n;
    k->k = kk;
    k->reduction_mask = b->reduction_mask;
    k->align_bias = 256;
    k->align_aux = 256;
}

/* D = alpha op(A) op(B) + beta C with the plan's desc; bias / aux pointers set per call */
static int gpt2rt__cu_mm_exec(gpt2rt__cu_blas *b, gpt2rt__cu_mm_plan *p, const void *A, const void *B, void *D,
                              float beta, const void *bias, const void *aux, const char **what) {
    const float alpha = 1.0f;
    cublasStatus_t st;
    int e = p->epilogue;
    if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_BGRADB) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        if (st) { *what = "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"; return (int)st; }
    }
    if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
        if (st) { *what = "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"; return (int)st; }
    }
    st = cublasLtMatmul(b->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo,
                        b->workspace, b->workspace_bytes, b->stream);
    if (st) { *what = "cublasLtMatmul"; return (int)st; }
    return 0;
}

static int gpt2rt__cu_mm_check_args(cudaDataType_t t, int64_t BT, int64_t IC, int64_t OC) {
    if (BT <= 0 || IC <= 0 || OC <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) return CUBLAS_STATUS_INVALID_VALUE;
    return 0;
}

/* ------------------------------------------------------------------ the three ops */

/* Forward of a linear layer, all buffers of type t (row-major):
     out      (BT,OC) = inp (BT,IC) @ w^T + bias     w (OC,IC), bias (OC) or NULL
   with pre_gelu (BT,OC) != NULL:
     pre_gelu (BT,OC) = inp @ w^T + bias;  out = gelu_tanh(pre_gelu)   (GELU_AUX[_BIAS])
   LM head: bias = NULL, pre_gelu = NULL, OC = Vp. Returns 0 or a cublasStatus_t /
   cudaError_t (err says which call). */
static int gpt2rt__cu_matmul_forward(gpt2rt__cu_blas *b, cudaDataType_t t,
                                     void *out,            /* (BT,OC) */
                                     void *pre_gelu,       /* (BT,OC) or NULL */
                                     const void *inp,      /* (BT,IC) */
                                     const void *w,        /* (OC,IC) */
                                     const void *bias,     /* (OC) or NULL */
                                     int64_t BT, int64_t IC, int64_t OC, char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_FWD;
    int want, plain, st;
    const char *what = "";
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if (pre_gelu) want = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else want = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    plain = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !out || !inp || !w || out == pre_gelu)
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_forward arguments", op, t, BT, IC, OC, want,
                                  CUBLAS_STATUS_INVALID_VALUE, 0);
    /* the aux leading dimension must be a multiple of 8: otherwise unfused */
    if (pre_gelu && OC % 8 != 0) want = plain;
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, t, OC, BT, IC);
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(inp), gpt2rt__cu_mm_align(w)),
                                           gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(out), gpt2rt__cu_mm_align(pre_gelu)));
    key.align_bias = gpt2rt__cu_mm_align(bias);
    key.align_aux = gpt2rt__cu_mm_align(pre_gelu);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, bias, pre_gelu, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if (pre_gelu && p->epilogue == plain) { /* unfused: product (+bias) into pre_gelu, then the kernel */
        b->fallbacks |= key.fuse ? GPT2RT__CU_MM_FB_GELU : 0u;
        if ((st = gpt2rt__cu_mm_exec(b, p, w, inp, pre_gelu, 0.0f, bias, NULL, &what)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
        if ((st = (int)gpt2rt__cu_mm_gelu_launch(t, out, pre_gelu, BT * OC, b->stream)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_gelu_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
        return 0;
    }
    if ((st = gpt2rt__cu_mm_exec(b, p, w, inp, out, 0.0f, bias, pre_gelu, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    return 0;
}

/* Input gradient, type t (row-major):
     dinp (BT,IC) = dout (BT,OC) @ w (OC,IC)
   with pre_gelu (BT,IC) != NULL (only for c_proj of the MLP, IC = 4C):
     dinp = (dout @ w) * gelu'(pre_gelu)   (DGELU; pre_gelu = the forward's aux, fch)
   dinp must not alias dout, w or pre_gelu. */
static int gpt2rt__cu_matmul_backward_input(gpt2rt__cu_blas *b, cudaDataType_t t,
                                            void *dinp,           /* (BT,IC) */
                                            const void *dout,     /* (BT,OC) */
                                            const void *w,        /* (OC,IC) */
                                            const void *pre_gelu, /* (BT,IC) or NULL */
                                            int64_t BT, int64_t IC, int64_t OC, char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_BWD_IN;
    int want = pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, plain = CUBLASLT_EPILOGUE_DEFAULT, st;
    const char *what = "";
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !dinp || !dout || !w || dinp == pre_gelu)
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_backward_input arguments", op, t, BT, IC, OC, want,
                                  CUBLAS_STATUS_INVALID_VALUE, 0);
    if (pre_gelu && IC % 8 != 0) want = plain;
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, t, IC, BT, OC);
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(dinp), gpt2rt__cu_mm_align(dout)),
                                           gpt2rt__cu_mm_align(w));
    key.align_aux = gpt2rt__cu_mm_align(pre_gelu);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, NULL, pre_gelu, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if ((st = gpt2rt__cu_mm_exec(b, p, w, dout, dinp, 0.0f, NULL, pre_gelu, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    if (pre_gelu && p->epilogue == plain) {
        b->fallbacks |= key.fuse ? GPT2RT__CU_MM_FB_DGELU : 0u;
        if ((st = (int)gpt2rt__cu_mm_dgelu_launch(t, dinp, pre_gelu, BT * IC, b->stream)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_dgelu_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
    }
    return 0;
}

/* Weight (and bias) gradient; dout, inp of type t, dw / db / db_scratch fp32 (row-major):
     accumulate = 1:  dw (OC,IC) += dout^T (OC,BT) @ inp (BT,IC);  db (OC) += sum_t dout[t,:]
     accumulate = 0:  dw  = dout^T @ inp;                          db  = sum_t dout[t,:]
   db = NULL: no bias. cuBLASLt's BGRADB overwrites its vector, so with accumulate = 1
   it writes db_scratch (OC floats, device) and a kernel adds it into db; db_scratch
   is not needed otherwise (may be NULL). */
static int gpt2rt__cu_matmul_backward_weight(gpt2rt__cu_blas *b, cudaDataType_t t,
                                             float *dw,          /* (OC,IC) fp32 */
                                             float *db,          /* (OC) fp32 or NULL */
                                             float *db_scratch,  /* (OC) fp32, needed when accumulate && db */
                                             const void *dout,   /* (BT,OC) */
                                             const void *inp,    /* (BT,IC) */
                                             int64_t BT, int64_t IC, int64_t OC, int accumulate,
                                             char *err, size_t cap) {
    const int op = GPT2RT__CU_MM_BWD_W;
    int want = db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, plain = CUBLASLT_EPILOGUE_DEFAULT, st;
    const char *what = "";
    float *bvec = (db && accumulate) ? db_scratch : db; /* what BGRADB writes */
    gpt2rt__cu_mm_key key;
    gpt2rt__cu_mm_plan *p;
    if ((st = gpt2rt__cu_mm_check_args(t, BT, IC, OC)) != 0 || !dw || !dout || !inp || (db && accumulate && !db_scratch))
        return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_matmul_backward_weight arguments (db_scratch is required when accumulating db)",
                                  op, t, BT, IC, OC, want, CUBLAS_STATUS_INVALID_VALUE, 0);
    gpt2rt__cu_mm_key_init(&key, b, op, want, t, CUDA_R_32F, IC, OC, BT);
    key.align_abcd = gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_min_u32(gpt2rt__cu_mm_align(dw), gpt2rt__cu_mm_align(dout)),
                                           gpt2rt__cu_mm_align(inp));
    key.align_bias = gpt2rt__cu_mm_align(bvec);
    if ((st = gpt2rt__cu_mm_get_plan(b, &key, plain, bvec, NULL, &p, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, want, st, 0);
    if ((st = gpt2rt__cu_mm_exec(b, p, inp, dout, dw, accumulate ? 1.0f : 0.0f, bvec, NULL, &what)) != 0)
        return gpt2rt__cu_mm_fail(err, cap, what, op, t, BT, IC, OC, p->epilogue, st, 0);
    if (!db) return 0;
    if (p->epilogue == plain) { /* no BGRADB: deterministic column sums straight into db */
        b->fallbacks |= key.fuse ? GPT2RT__CU_MM_FB_BGRAD : 0u;
        if ((st = (int)gpt2rt__cu_mm_colsum_launch(t, db, dout, BT, OC, accumulate, b->stream)) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_colsum_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
    } else if (accumulate) {
        GPT2RT__LAUNCH(gpt2rt__cu_mm_grid(OC), 256, 0, b->stream, gpt2rt__cu_mm_add_kernel)(db, db_scratch, OC);
        if ((st = (int)cudaGetLastError()) != 0)
            return gpt2rt__cu_mm_fail(err, cap, "gpt2rt__cu_mm_add_kernel", op, t, BT, IC, OC, p->epilogue, st, 1);
    }
    return 0;
}
#undef GPT2RT__CU_MM_CK

/* ==== 8.5 Driver ==== */

/* The CUDA backend driver; kernels/train_step.cu checks it end to end against the CPU
   backend and the Hugging Face fixture, and times it.

   ============================================================================
   WHAT IT IS
   ============================================================================
   The model of gpt2rt.h (gpt2rt__model_forward / _backward / the optimizer) on one GPU,
   with the kernels of 8.2 (ops), 8.3 (attention) and 8.4 (matrix products, cuBLASLt), in
   fp32 (optionally TF32 matrix products), bf16 or fp16 (dynamic loss scaling).
   Everything runs on one stream (data parallel adds a communicator's stream, 8.6); the
   host waits only where a number must come back
   (the loss after a forward with targets, the gradient norm in the update, copies of
   weights and logits).

   Memory: one cudaMalloc per gpt2rt_mem category of exactly the bytes gpt2rt__layout
   plans for the CUDA dims (d.cuda = 1, d.ab = d.wb = 2 in bf16/fp16), and the pointers
   are carved by that same function, called on a "shadow" gpt2rt_ctx whose arenas are
   the device arenas: planned == allocated by construction. Per category:
     weights      (n_params) floatX, by tensor.off (fp32: these ARE the master weights)
     master       (n_train) fp32, by tensor.goff (bf16/fp16 only; frozen tensors have none)
     grads        (n_train) fp32, by goff        moments  m (n_train), v (n_train) fp32
     activations  inputs, targets (BT) int32; x0 (BT,C) floatX; per-layer blocks (or FULL
                  slots + checkpoints + xout); lnf (BT,C) floatX; lnf_mean/rstd, losses,
                  logit_lse (BT) fp32 - layer blocks as gpt2rt__layer_acts_carve says
                  (activations floatX, statistics fp32)
     transient    dres, dbuf (BT,C) floatX; dbig (BT,4C) floatX; rcbuf (BT,4C) floatX
                  (SELECTIVE only); the forward's outputs that are not kept (frozen
                  weights, SELECTIVE) pass through dbig, free until the backward, as on the CPU
     logits       (BT,Vp) floatX, turned into dlogits in place; classifier_chunk = N < BT:
                  (N,Vp), one chunk of tokens at a time (7.3's classifier, the same rows)
     workspace    cuBLASLt 32 MiB | attention D (B,NH,T) fp32 | token buckets (3BT+1) int32,
                  or (patches) the windows x (Bw,L,M) fp32 | reduction scratch "red" fp32
                  | norm parts (one double per 65536)
     kvcache      generation (kv_batch > 0): keys, values (L,KB,KS,C) floatX, a pass's ids
                  (N) int32, its activations floatX (LayerNorm statistics fp32), the
                  sampled rows' logits (KB,Vp) floatX: gpt2rt__kv_layout's DEVICE part; its
                  HOST part (ids staged, fp32 logits, sampling) is pinned bookkeeping
     patches      activations: the patches (BT,PL) (floatX in their fp32 slot), RevIN's
                  mean, std (B), the patches before the affine zs (BT,PL), targets y and
                  predictions (Bw,H,M) fp32; transient: the patches' gradient (floatX in
                  its fp32 slot, affine only); logits: the normalised predictions (B,H);
                  aLLM4TS's heads: out_layer's (BT,PL) then (PATCH_DECODE) the placeholders'
                  yn (B,H), floatX; NEXT_PATCH's loss: B partial sums (fp64) in attention's
                  D scratch, free between a forward and its backward
   Dropout: 7.1's masks by the same hash (gpt2rt__drop_factor is host and device code),
   at the CPU's sites in the CPU's order, so the masks are the CPU's bit for bit; the
   attention probabilities' mask (attn_dropout) in 8.3's generic kernels, which then run
   for every head size and type (the tensor-core path has no mask).
   Every buffer starts on 256 bytes (d.align), so a cuBLASLt plan keyed on pointer
   alignment is the same for a kept block, a FULL slot, dbig and rcbuf. The reduction
   scratch is used strictly one kernel pair at a time on the stream: the LayerNorm
   backward's partials (ceil(BT/32), 2C), the bias-gradient vector (OC <= 4C; out_layer:
   H) of an accumulating weight-gradient matmul, and in the update the norm result (2 doubles)
   followed by the AdamW tensor table (n_tensors rows of 32 bytes).
   The host keeps the fp32 weights in ctx->params (load/save/param_read/_write source of
   truth): gpt2rt__cu_upload_params after the host changed them, gpt2rt__cu_download_params
   before the host reads them (st->host_stale says whether the device moved on).

   Numerics, mirroring the CPU backend:
   * Forward of a layer: ln_1; c_attn (+bias epilogue); attention (lse kept); attn.c_proj
     (+bias) then res2 = that + res; ln_2; c_fc (+bias) -> fch; gelu kernel -> fch_gelu;
     mlp.c_proj (+bias) then res3 = that + res2. The GELU is NOT fused into the c_fc
     epilogue: selective recompute runs the same gelu kernel on the same fch, so its
     output is bitwise the forward's (an epilogue GELU is computed from the fp32
     accumulator and would differ). Same for ln_2 (separate residual add + LayerNorm).
   * Backward: the fused classifier (softmax - onehot) * dloss in place; the dGELU is, in
     bf16/fp16, the DGELU epilogue of mlp.c_proj's input gradient, and in fp32 the gelu
     backward kernel after a plain product (cuBLASLt's GELU derivative differs from the
     CPU's by ~2e-3, beyond fp32's 1e-4 against the CPU); fch is always kept, so every
     recompute level does the same. Weight gradients fp32 with BGRADB bias gradients.
   * Recompute (selective, full + checkpoint spacing) and frozen groups follow
     gpt2rt__model_forward / _backward line by line: the same kernels on the same inputs
     at the same (256-byte) alignment, so recompute levels give bitwise the same gradients.
   * Gradients accumulate as (sum of token losses) * loss_scale / (BT * grad_accum); the
     update multiplies by BT*grad_accum / targets_counted / loss_scale (the AdamW
     grad_scale, with the clip coefficient), exactly the CPU grad_unscale scheme.
   * fp16 dynamic loss scale: starts at cfg.loss_scale, x2 after 2000 clean updates
     (at most 2^24), x0.5 (at least 1) and the update skipped when the gradient norm
     is not finite. bf16/fp32: scale 1; a non-finite norm still skips (as the CPU).
   * The first backward after an update (grads known to be zero) runs the weight-gradient
     matmuls with accumulate = 0 (so BGRADB writes the bias gradient directly, no
     scratch, no add kernel); later micro-batches accumulate (dW += ..., db via scratch).
   * Deterministic: no atomics anywhere (see the kernel files); cuBLASLt algorithms are
     fixed per (shape, type, alignment) and split-K is off by default.

   ============================================================================
   ENTRY POINTS (all return gpt2rt_result; errors go to ctx->error via gpt2rt__fail,
   naming the call, the layer and the sizes; never exit, never print)
   ============================================================================
   gpt2rt__cu_create(ctx, &st, err, cap)          device state for ctx->cfg (backend CUDA)
   gpt2rt__cu_create_cfg(ctx, cfg, &st, err, cap) the same for another resolved config with
                                                  the same parameter table (the lab: a CPU
                                                  ctx as host side of a CUDA run)
   gpt2rt__cu_create_span(ctx, cfg, span, dev, &st, err, cap)  the layers of span on device
                                                  dev: a layer-split stage (10.2), ctx its
                                                  host context (gpt2rt__span_params's table)
   gpt2rt__cu_free(st)
   gpt2rt__cu_upload_params(ctx, st)              ctx->params -> device master + floatX copy
   gpt2rt__cu_download_params(ctx, st)            device master -> ctx->params (trained tensors)
   gpt2rt__cu_upload_moments / _download_moments  m, v (n_train each, host arrays)
   gpt2rt__cu_download_grads(ctx, st, g)          raw gradients (n_train) to the host
   gpt2rt__cu_zero(ctx, st, moments)              gradients (and m, v) to zero
   gpt2rt__cu_read_tensor(ctx, st, t, what, dst)  one tensor (internal layout) to the host
   gpt2rt__cu_forward(ctx, st, inputs, targets, &loss)   sets ctx->loss, loss_sum, n_targets
   gpt2rt__cu_forward_series(ctx, st, x, y, &loss)       patches: the same; predictions in st->h_pred
   gpt2rt__cu_backward(ctx, st)                   += gradients of the last forward's loss
   gpt2rt__cu_update(ctx, st, lr, &norm, &skipped, &loss_scale)  AdamW at step ctx->step+1
   gpt2rt__cu_logits(ctx, st, dst, count)         (BT, V) fp32 from the device logits
   gpt2rt__cu_be_decode(ctx, N, M)                generation's pass (the table's decode entry):
                                                  N new tokens through the cache, M rows' logits
   gpt2rt__cu_refresh_overhead(st)                re-measure the non-arena device memory

   The public calls on a CUDA context (11; ctx->cu is the state): gpt2rt_create plans,
   then gpt2rt__cu_open allocates the host weights (ctx->params, fp32, the only host
   arena: grads, moments, activations, logits and workspace live on the device; the
   pinned token, loss and staging buffers are host bookkeeping) and this state.
   gpt2rt_forward / _backward / _update / _logits call the entry points above;
   gpt2rt_step asks for dlogits in the forward. Loads upload after the host change;
   saves and param_read download what the device moved on (host_stale) or read the
   device (gradients, moments); param_write uploads.
   The model itself is 7.3's driver (gpt2rt__model_forward / _backward, which owns the
   layer loop and the recompute schedule for every backend) over gpt2rt__cu_backend,
   whose steps dispatch on st->xt to the templates here, with ax = st->dev, the shadow
   context whose arenas are the device's.
*/

#define GPT2RT__CU_STAGE_BYTES ((size_t)8 << 20)   /* pinned host staging buffer (at least) */

/* storage type -> cuBLASLt data type */
template <typename X> struct gpt2rt__cu_dtype;
template <> struct gpt2rt__cu_dtype<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct gpt2rt__cu_dtype<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct gpt2rt__cu_dtype<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };

/* host conversion fp32 -> storage type, round to nearest even (what the device casts do) */
static inline void gpt2rt__cu_host_cvt(float *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static inline void gpt2rt__cu_host_cvt(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = __float2bfloat16_rn(src[i]);
}
static inline void gpt2rt__cu_host_cvt(__half *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = __float2half_rn(src[i]);
}
static inline float gpt2rt__cu_host_f(float x) { return x; }
static inline float gpt2rt__cu_host_f(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float gpt2rt__cu_host_f(__half x) { return __half2float(x); }

/* one AdamW launch: trainable tensors [i0, i0+n) of the device table whose weights sit at
   a constant distance delta = off - goff (floats) from their grads; block0 is relative */
typedef struct gpt2rt__cu_adamw_run {
    int i0, n;
    int64_t delta;
    int64_t blocks;
} gpt2rt__cu_adamw_run;

typedef struct gpt2rt__cu_state {
    gpt2rt_config cfg;        /* the resolved CUDA config (backend CUDA) */
    gpt2rt_config hooks;      /* allocator hooks of the host context (bookkeeping) */
    gpt2rt__dims d;           /* d.cuda = 1, d.ab = d.wb = 4 or 2 */
    gpt2rt__span span;
    int device;
    cudaStream_t stream;
    gpt2rt__cu_blas blas;
    int blas_ok;
    cudaDataType_t xt;        /* storage type of activations and weights */

    /* device arenas, one cudaMalloc each, exactly gpt2rt__layout's bytes */
    void *arena[GPT2RT_MEM_COUNT];
    uint64_t bytes[GPT2RT_MEM_COUNT];     /* planned (gpt2rt__layout for st->d) */
    uint64_t allocated[GPT2RT_MEM_COUNT]; /* what cudaMalloc was asked for */
    uint64_t arena_total;
    gpt2rt_ctx *dev;          /* shadow context: gpt2rt__layout's pointers into the device arenas */

    /* named device pointers (the rest through st->dev: x0, layer blocks, lnf, ...) */
    void *w;                  /* (n_params) floatX weights by off */
    float *master;            /* (n_train) fp32 by goff; NULL in fp32 (w is the master) */
    float *grads, *m, *v;     /* (n_train) fp32 each, by goff */
    int64_t n_params, n_train;
    int64_t act_bytes;        /* one (BT,C) floatX activation, 256-aligned: checkpoint stride */
    float *att_D;             /* (B,NH,T) fp32 attention backward scratch */
    int32_t *buckets_ws;      /* tokens: (3BT+1) int32, the wte gradient's token buckets */
    float *ts_x;              /* patches: (Bw,L,M) fp32, the windows RevIN reads (the same slot) */
    float *red;               /* reduction scratch, red_bytes (see the top comment) */
    int64_t red_bytes;
    double *norm_parts;       /* (norm chunks) fp64 */

    /* host (pinned) */
    int32_t *h_tok;           /* inputs (BT) | targets (BT) | buckets (3BT+1) */
    float *h_losses;          /* (BT) */
    float *h_pred;            /* patches: (Bw,H,M) the last forward's de-normalised predictions */
    double *h_norm;           /* (2) */
    unsigned char *h_stage;   /* stage_bytes, conversions and logits */
    size_t stage_bytes;
    gpt2rt__cu_adamw_tensor *h_adamw; /* (n_adamw) goff-indexed table, block0 per run */
    unsigned char *h_kv;      /* generation: the KV cache's host side (gpt2rt__kv_layout's HOST part) */
    int n_adamw, n_runs;
    gpt2rt__cu_adamw_run *runs;
    cudaEvent_t ev_tok;       /* recorded after the last H2D copy out of h_tok */
    int ev_ok;

    /* training state */
    float loss_scale;         /* fp16: dynamic; else 1 */
    int clean_steps;          /* fp16 updates since the last overflow or doubling */
    int64_t nb;               /* distinct tokens in the last forward's buckets (-1: none) */
    int have_targets;         /* the last forward had targets (targets and losses on the device) */
    int dlogits_in_forward;   /* set by the caller before a forward: fuse the classifier's backward */
    int dlogits_ready;        /* the logits arena holds dlogits (backward skips the classifier) */
    int grads_dirty;          /* some gradient may be non-zero (accumulate in the next backward) */
    int acc;                  /* the running backward accumulates (grads_dirty when it began) */
    int host_stale;           /* device weights moved on since the last download/upload */

    /* memory figures */
    uint64_t mem_total, free_at_create, free_after;
    uint64_t overhead;        /* device memory in use beyond the arenas (context, cuBLASLt, ...) */

    /* data parallel (8.6): the rank's device communicator (NULL on one device), the trained
       floats [opt_lo, opt_hi) whose master and moments this device keeps (ZeRO-1: its shard,
       master and moments indexed from opt_lo; else 0, n_train), and the events that order
       the communicator's stream after the compute stream (ev_grads) and back (ev_comm) */
    gpt2rt__comm *dcomm;
    int64_t opt_lo, opt_hi;
    cudaEvent_t ev_grads, ev_comm;
    int dp_ev_ok;

    /* error context */
    const char *phase;        /* "forward", "backward", ... */
    int64_t layer;            /* -1 outside the layers */
    char mm_err[384];
} gpt2rt__cu_state;

/* ---- errors ---- */

static gpt2rt_result gpt2rt__cu_fail(gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, cudaError_t e, const char *call) {
    const gpt2rt__dims *d = &st->d;
    char where[64] = "";
    if (st->layer >= 0) snprintf(where, sizeof where, "layer %lld of %lld, ", (long long)st->layer, (long long)d->L);
    return gpt2rt__fail(ctx, e == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE,
                        "gpt2rt CUDA %s: %s failed: %s (%s = %d) [%sB=%lld T=%lld C=%lld NH=%lld Vp=%lld, %s, device %d]",
                        st->phase ? st->phase : "?", call, cudaGetErrorString(e), cudaGetErrorName(e), (int)e, where,
                        (long long)d->B, (long long)d->T, (long long)d->C, (long long)d->NH, (long long)d->Vp,
                        gpt2rt__precision_name(st->cfg.precision), st->device);
}
static gpt2rt_result gpt2rt__cu_fail_mm(gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, int status) {
    char where[64] = "";
    if (st->layer >= 0) snprintf(where, sizeof where, " [layer %lld of %lld]", (long long)st->layer, (long long)st->d.L);
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt CUDA %s: %s (status %d)%s", st->phase ? st->phase : "?",
                        st->mm_err, status, where);
}
/* inside functions with `ctx` and `st` in scope */
#define GPT2RT__CU_CK(call) do { cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) return gpt2rt__cu_fail(ctx, st, e_, #call); } while (0)
#define GPT2RT__CU_MM(call) do { int s_ = (call); if (s_ != 0) return gpt2rt__cu_fail_mm(ctx, st, s_); } while (0)

/* ---- small helpers ---- */

/* the weights (floatX) of layer l on the device */
template <typename X> struct gpt2rt__cu_lw {
    const X *ln1w, *ln1b;       /* (C) */
    const X *qkvw, *qkvb;       /* (3C, C), (3C) */
    const X *projw, *projb;     /* (C, C), (C) */
    const X *ln2w, *ln2b;       /* (C) */
    const X *fcw, *fcb;         /* (4C, C), (4C) */
    const X *fcprojw, *fcprojb; /* (C, 4C), (C) */
};
template <typename X>
static gpt2rt__cu_lw<X> gpt2rt__cu_lweights(const gpt2rt_ctx *ctx, const gpt2rt__cu_state *st, int64_t l) {
    const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, l);
    const X *w = (const X *)st->w;
    gpt2rt__cu_lw<X> p;
    p.ln1w = w + t[GPT2RT__LN1W].off; p.ln1b = w + t[GPT2RT__LN1B].off;
    p.qkvw = w + t[GPT2RT__QKVW].off; p.qkvb = w + t[GPT2RT__QKVB].off;
    p.projw = w + t[GPT2RT__PROJW].off; p.projb = w + t[GPT2RT__PROJB].off;
    p.ln2w = w + t[GPT2RT__LN2W].off; p.ln2b = w + t[GPT2RT__LN2B].off;
    p.fcw = w + t[GPT2RT__FCW].off; p.fcb = w + t[GPT2RT__FCB].off;
    p.fcprojw = w + t[GPT2RT__FCPROJW].off; p.fcprojb = w + t[GPT2RT__FCPROJB].off;
    return p;
}
static float *gpt2rt__cu_grad_of(const gpt2rt__cu_state *st, const gpt2rt__tensor *t) {
    return t && t->goff >= 0 ? st->grads + t->goff : NULL;
}
/* a tensor's floatX weights on the device (NULL: this model has none) */
template <typename X> static const X *gpt2rt__cu_weight(const gpt2rt__cu_state *st, const gpt2rt__tensor *t) {
    return t ? (const X *)st->w + t->off : NULL;
}

/* data parallel: the reductions a backward left in flight on the device communicator's
   stream (8.6) have finished, before the host reads the gradients or a memset clears them */
static gpt2rt_result gpt2rt__cu_comm_idle(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    if (!st->dcomm) return GPT2RT_OK;
    gpt2rt_result r = st->dcomm->wait(st->dcomm);
    return r == GPT2RT_OK ? r : gpt2rt__fail(ctx, r, "data parallel: the gradient reductions: %s", st->dcomm->err);
}

/* ---- creation ---- */

static void gpt2rt__cu_free(gpt2rt__cu_state *st);

static void gpt2rt__cu_measure(gpt2rt__cu_state *st) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { (void)cudaGetLastError(); return; }
    st->free_after = fr;
    st->mem_total = tot;
    uint64_t used = (uint64_t)tot - (uint64_t)fr;
    st->overhead = used > st->arena_total ? used - st->arena_total : 0;
}

/* Re-measure the device memory beyond the arenas (kernel modules load lazily, cuBLASLt
   grows on first use): call after the first training step for the steady-state figure.
   It is (total - free) - arenas: other processes' memory on the device counts too, the
   runtime gives no free figure before its own context exists. */
static void gpt2rt__cu_refresh_overhead(gpt2rt__cu_state *st) {
    if (st && cudaSetDevice(st->device) == cudaSuccess) gpt2rt__cu_measure(st);
}

/* AdamW launches: the trainable tensors in table order, cut where off - goff changes
   (after a frozen tensor). Without frozen groups: one run. ZeRO-1: the parts of them in
   [opt_lo, opt_hi), offsets counted from opt_lo (the update adds it to the pointers). */
static int gpt2rt__cu_adamw_plan(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    int n = 0, runs = 0;
    int64_t last = -1;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo;
        int64_t hi = t->goff + t->rows * t->cols < st->opt_hi ? t->goff + t->rows * t->cols : st->opt_hi;
        if (hi <= lo) continue;
        gpt2rt__cu_adamw_tensor *a = &st->h_adamw[n];
        memset(a, 0, sizeof *a);
        a->off = lo - st->opt_lo;
        a->n = hi - lo;
        a->decay = t->decay;
        int64_t delta = t->off - t->goff;
        if (runs == 0 || delta != last) {
            st->runs[runs].i0 = n; st->runs[runs].n = 0; st->runs[runs].delta = delta; st->runs[runs].blocks = 0;
            runs++;
            last = delta;
        }
        st->runs[runs - 1].n++;
        n++;
    }
    for (int r = 0; r < runs; r++)
        st->runs[r].blocks = gpt2rt__cu_adamw_table(st->h_adamw + st->runs[r].i0, st->runs[r].n);
    st->n_adamw = n;
    st->n_runs = runs;
    return n;
}

static gpt2rt_result gpt2rt__cu_upload_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st);

static gpt2rt_result gpt2rt__cu_create_span(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, const gpt2rt__span *span,
                                            int dev_id, gpt2rt__cu_state **out, char *err, size_t cap);

/* The device state for the resolved config cfg (backend CUDA) on top of the host context
   ctx, whose parameter table (shape and frozen groups) must be the one cfg gives.
   err gets the reason on failure (with the numbers); *out is NULL then. */
static gpt2rt_result gpt2rt__cu_create_cfg(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, gpt2rt__cu_state **out,
                                           char *err, size_t cap) {
    if (!out || !ctx || !cfg || !err || !cap) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    /* data parallel: one state per rank, on device_ids[0] (gpt2rt__dp_open passes each rank
       a config whose device_ids start with its own device); layer split: gpt2rt__cu_create_span */
    if (cfg->parallel == GPT2RT_PARALLEL_LAYER_SPLIT || (cfg->parallel == GPT2RT_PARALLEL_NONE && cfg->n_devices != 1)) {
        snprintf(err, cap, "gpt2rt__cu_create: parallel = %d over %d devices: the CUDA driver runs one device (or "
                 "one data-parallel rank)", (int)cfg->parallel, cfg->n_devices);
        return GPT2RT_ERR_NOT_IMPLEMENTED;
    }
    gpt2rt__span whole = gpt2rt__span_of(cfg, 0);
    return gpt2rt__cu_create_span(ctx, cfg, &whole, cfg->device_ids[0], out, err, cap);
}

/* gpt2rt__cu_create_span's phases (st: the state so far; each writes err and returns
   the result, and the caller frees st when one fails) */
#define GPT2RT__CU_SFAIL(r, ...) do { snprintf(err, cap, __VA_ARGS__); return (r); } while (0)
#define GPT2RT__CU_SCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
        GPT2RT__CU_SFAIL(e_ == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE, \
                         "gpt2rt__cu_create: %s failed: %s (%s = %d) on device %d", #call, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_), (int)e_, st->device); } while (0)

/* the host table must be this config's (this span's) */
static gpt2rt_result gpt2rt__cu_create_table(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span *span = &st->span;
    int64_t np = 0, ntr = 0;
    int nt = gpt2rt__param_table(d, NULL, NULL, NULL);
    gpt2rt__span_params(d, span, NULL, &np, &ntr);
    if (nt != ctx->n_tensors || np != ctx->n_params || ntr != ctx->n_train || ctx->d.frozen != d->frozen ||
        ctx->d.C != d->C || ctx->d.L != d->L || ctx->d.Vp != d->Vp || ctx->d.P != d->P)
        GPT2RT__CU_SFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: the host context's parameter table "
                         "(%d tensors, %lld floats, %lld trained, frozen 0x%x) is not the config's (%d, %lld, %lld, 0x%x)",
                         ctx->n_tensors, (long long)ctx->n_params, (long long)ctx->n_train, ctx->d.frozen, nt,
                         (long long)np, (long long)ntr, d->frozen);
    st->n_params = np;
    st->n_train = ntr;
    /* ZeRO-1: the master and the moments hold shard 0's floats until gpt2rt__cu_dp_attach
       (8.6) gives the rank its own shard */
    st->opt_lo = 0;
    st->opt_hi = d->shards > 1 ? gpt2rt__shard_lo(ntr, d->shards, 1) : ntr;
    return GPT2RT_OK;
}

/* the device, its free memory against the plan, then the arenas */
static gpt2rt_result gpt2rt__cu_create_arenas(gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    int dev_id = st->device;
    int n_dev = 0;
    {
        cudaError_t e = cudaGetDeviceCount(&n_dev);
        if (e != cudaSuccess || n_dev == 0) {
            (void)cudaGetLastError();
            GPT2RT__CU_SFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: no CUDA device (cudaGetDeviceCount: %s, %d "
                             "devices)", cudaGetErrorString(e), n_dev);
        }
    }
    {
        gpt2rt__proc_env e = gpt2rt__proc_env_get();
        int local_world = 0;
        if (!gpt2rt__env_int(e.local_world_size, 1, 1 << 20, &local_world))
            (void)gpt2rt__env_int(e.ompi_local_size, 1, 1 << 20, &local_world);
        char why[600];
        gpt2rt_result dr = gpt2rt__dev_check(n_dev, getenv("CUDA_VISIBLE_DEVICES"), local_world, cfg, why, sizeof why);
        if (dr != GPT2RT_OK) GPT2RT__CU_SFAIL(dr, "gpt2rt__cu_create: %s", why);
    }
    GPT2RT__CU_SCK(cudaSetDevice(dev_id));
    gpt2rt__layout(d, &st->span, st->bytes, NULL);
    uint64_t plan_total = 0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan_total += st->bytes[i];
    {
        size_t fr = 0, tot = 0;
        GPT2RT__CU_SCK(cudaMemGetInfo(&fr, &tot)); /* creates the context */
        st->free_at_create = fr;
        st->mem_total = tot;
        if (cfg->memory_budget && plan_total > cfg->memory_budget)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB), "
                             "memory_budget is %llu bytes (%.2f GiB); nothing was allocated",
                             (unsigned long long)plan_total, GPT2RT__GIB(plan_total),
                             (unsigned long long)cfg->memory_budget, GPT2RT__GIB(cfg->memory_budget));
        if (plan_total > (uint64_t)fr)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: the plan needs %llu bytes (%.2f GiB) on "
                             "device %d, which has %llu bytes (%.2f GiB) free of %llu (%.2f GiB); nothing was allocated",
                             (unsigned long long)plan_total, GPT2RT__GIB(plan_total), dev_id, (unsigned long long)fr,
                             GPT2RT__GIB(fr), (unsigned long long)tot, GPT2RT__GIB(tot));
    }
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        if (!st->bytes[i]) continue;
        cudaError_t e = cudaMalloc(&st->arena[i], (size_t)st->bytes[i]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st->arena[i] = NULL;
            size_t fr = 0, tot = 0;
            (void)cudaMemGetInfo(&fr, &tot);
            GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: cudaMalloc of %llu bytes (%.1f MiB) for %s "
                             "failed: %s; %llu of %llu bytes planned were allocated, %llu bytes free now",
                             (unsigned long long)st->bytes[i], GPT2RT__MIB(st->bytes[i]), gpt2rt_mem_name((gpt2rt_mem)i),
                             cudaGetErrorString(e), (unsigned long long)st->arena_total, (unsigned long long)plan_total,
                             (unsigned long long)fr);
        }
        st->allocated[i] = st->bytes[i];
        st->arena_total += st->bytes[i];
    }
    return GPT2RT_OK;
}

/* the pointers: gpt2rt__layout on a shadow context whose arenas are the device's */
static gpt2rt_result gpt2rt__cu_create_pointers(const gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    st->dev = (gpt2rt_ctx *)gpt2rt__alloc(&st->hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!st->dev) GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: shadow context (%zu bytes)", sizeof(gpt2rt_ctx));
    memset(st->dev, 0, sizeof(gpt2rt_ctx));
    st->dev->cfg = *cfg;
    st->dev->d = *d;
    st->dev->tensors = ctx->tensors; /* shared, read-only: same table */
    st->dev->n_tensors = ctx->n_tensors;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) { st->dev->arena[i] = st->arena[i]; st->dev->arena_bytes[i] = st->bytes[i]; }
    {
        uint64_t again[GPT2RT_MEM_COUNT];
        gpt2rt__layout(d, &st->span, again, st->dev);
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            if (again[i] != st->bytes[i])
                GPT2RT__CU_SFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: gpt2rt__layout gave %llu then %llu bytes for %s",
                                 (unsigned long long)st->bytes[i], (unsigned long long)again[i],
                                 gpt2rt_mem_name((gpt2rt_mem)i));
    }
    st->w = st->arena[GPT2RT_MEM_WEIGHTS];
    st->master = d->wb == 4 ? NULL : (float *)st->arena[GPT2RT_MEM_MASTER];
    st->grads = st->dev->grads;
    st->m = st->dev->m;
    st->v = st->dev->v;
    st->act_bytes = gpt2rt__ald(d, d->BT * d->C * d->ab);
    st->att_D = st->dev->att_scratch;
    st->norm_parts = st->dev->norm_parts;
    { /* the workspace after attention's D: the inputs' slot (token buckets, or the series
         windows), then the reduction scratch up to the norm parts */
        unsigned char *b = (unsigned char *)st->dev->att_scratch + gpt2rt__ald(d, d->B * d->NH * d->T * 4);
        int64_t slot = gpt2rt__cu_inputs_bytes(d);
        st->buckets_ws = d->patches ? NULL : (int32_t *)(void *)b;
        st->ts_x = d->patches ? (float *)(void *)b : NULL;
        st->red = (float *)(void *)(b + slot);
        st->red_bytes = (int64_t)((unsigned char *)st->norm_parts - (b + slot));
        uint64_t ln = (uint64_t)gpt2rt__cu_layernorm_backward_scratch_bytes(d->BT, d->C);
        int64_t oc = d->H > d->PL ? d->H : d->PL; /* out_layer's bias: H, or PL (aLLM4TS) */
        uint64_t bias = (uint64_t)((4 * d->C > oc ? 4 * d->C : oc) * 4); /* the widest bias vector */
        uint64_t upd = 16 + (uint64_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor);
        uint64_t need = ln > bias ? ln : bias;
        if (upd > need) need = upd;
        if (st->red_bytes < 0 || (uint64_t)st->red_bytes < need)
            GPT2RT__CU_SFAIL(GPT2RT_ERR_STATE, "gpt2rt__cu_create: the planned reduction scratch holds %lld bytes, the "
                             "kernels need %llu (LayerNorm partials %llu, bias vector %llu, update %llu): gpt2rt__layout "
                             "and the driver disagree", (long long)st->red_bytes, (unsigned long long)need,
                             (unsigned long long)ln, (unsigned long long)bias, (unsigned long long)upd);
    }
    return GPT2RT_OK;
}

/* stream, cuBLASLt, events, pinned host buffers, the AdamW runs */
static gpt2rt_result gpt2rt__cu_create_buffers(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, char *err, size_t cap) {
    const gpt2rt_config *cfg = &st->cfg;
    const gpt2rt__dims *d = &st->d;
    GPT2RT__CU_SCK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    {
        int s = gpt2rt__cu_blas_init(&st->blas, st->dev->gemm_ws, (size_t)GPT2RT__CU_BLAS_WORKSPACE, st->stream,
                                     st->mm_err, sizeof st->mm_err);
        if (s) GPT2RT__CU_SFAIL(GPT2RT_ERR_UNAVAILABLE, "gpt2rt__cu_create: %s", st->mm_err);
        st->blas_ok = 1;
        st->blas.tf32 = cfg->tf32 ? 1 : 0;
    }
    GPT2RT__CU_SCK(cudaEventCreateWithFlags(&st->ev_tok, cudaEventDisableTiming));
    st->ev_ok = 1;
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_tok, (size_t)(2 * d->BT + gpt2rt__cu_encoder_bucket_ints(d->BT)) * 4));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_losses, (size_t)d->BT * 4));
    if (d->patches) GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_pred, (size_t)d->n_out * 4));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_norm, 2 * sizeof(double)));
    st->stage_bytes = GPT2RT__CU_STAGE_BYTES;
    if ((size_t)d->V * 4 > st->stage_bytes) st->stage_bytes = (size_t)d->V * 4;
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_stage, st->stage_bytes));
    GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_adamw, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_tensor)));
    if (d->KB && st->span.last) /* generation's ids and logits pass through it: pinned */
        GPT2RT__CU_SCK(cudaMallocHost((void **)&st->h_kv, (size_t)gpt2rt__kv_layout(d, 0, 1, NULL, NULL,
                                                                                     GPT2RT__KV_HOST)));
    st->runs = (gpt2rt__cu_adamw_run *)gpt2rt__alloc(&st->hooks, (size_t)ctx->n_tensors * sizeof(gpt2rt__cu_adamw_run),
                                                     GPT2RT_MEM_BOOKKEEPING);
    if (!st->runs) GPT2RT__CU_SFAIL(GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt__cu_create: AdamW run table");
    gpt2rt__cu_adamw_plan(ctx, st);
    return GPT2RT_OK;
}
#undef GPT2RT__CU_SCK
#undef GPT2RT__CU_SFAIL

/* The same for the layers of span on device dev_id (a layer-split stage, 10.2): ctx is
   then the stage's host context, whose table is gpt2rt__span_params's for span and
   whose params hold that table's fp32 weights. */
static gpt2rt_result gpt2rt__cu_create_span(gpt2rt_ctx *ctx, const gpt2rt_config *cfg, const gpt2rt__span *span,
                                            int dev_id, gpt2rt__cu_state **out, char *err, size_t cap) {
#define GPT2RT__CU_CFAIL(r, ...) do { snprintf(err, cap, __VA_ARGS__); gpt2rt__cu_free(st); return (r); } while (0)
#define GPT2RT__CU_CCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
        GPT2RT__CU_CFAIL(e_ == cudaErrorMemoryAllocation ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_UNAVAILABLE, \
                         "gpt2rt__cu_create: %s failed: %s (%s = %d) on device %d", #call, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_), (int)e_, dev_id); } while (0)
    gpt2rt__cu_state *st = NULL;
    if (!out || !ctx || !cfg || !span || !err || !cap) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    err[0] = 0;
    if (cfg->backend != GPT2RT_BACKEND_CUDA)
        GPT2RT__CU_CFAIL(GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_create: config backend = %d, not GPT2RT_BACKEND_CUDA",
                         (int)cfg->backend);

    st = (gpt2rt__cu_state *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__cu_state), GPT2RT_MEM_BOOKKEEPING);
    if (!st) { snprintf(err, cap, "gpt2rt__cu_create: %zu bytes of host memory for the state", sizeof(gpt2rt__cu_state)); return GPT2RT_ERR_OUT_OF_MEMORY; }
    memset(st, 0, sizeof *st);
    st->hooks = ctx->cfg;
    st->cfg = *cfg;
    st->d = gpt2rt__dims_of(cfg);
    st->span = *span;
    st->device = dev_id;
    st->layer = -1;
    st->phase = "create";
    st->nb = -1;
    st->xt = st->d.ab == 4 ? CUDA_R_32F : cfg->precision == GPT2RT_PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    st->loss_scale = cfg->precision == GPT2RT_PRECISION_FP16 ? cfg->loss_scale : 1.0f;

    gpt2rt_result pr = gpt2rt__cu_create_table(ctx, st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_arenas(st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_pointers(ctx, st, err, cap);
    if (pr == GPT2RT_OK) pr = gpt2rt__cu_create_buffers(ctx, st, err, cap);
    if (pr != GPT2RT_OK) {
        gpt2rt__cu_free(st);
        return pr;
    }

    /* zero gradients and moments, then the weights from the host */
    if (st->n_train) { /* an inference context (config.inference) has neither */
        GPT2RT__CU_CCK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
        GPT2RT__CU_CCK(cudaMemsetAsync(st->m, 0, (size_t)st->dev->n_opt * 8, st->stream)); /* m, v: n_opt each */
    }
    GPT2RT__CU_CCK(cudaStreamSynchronize(st->stream));
    {
        gpt2rt_result r = gpt2rt__cu_upload_params(ctx, st);
        if (r != GPT2RT_OK) GPT2RT__CU_CFAIL(r, "gpt2rt__cu_create: %.1000s", ctx->error);
    }
    gpt2rt__cu_measure(st);
    st->phase = "idle";
    *out = st;
    return GPT2RT_OK;
#undef GPT2RT__CU_CCK
#undef GPT2RT__CU_CFAIL
}

/* the device state of ctx->cfg (after the splice: backend CUDA) */
static gpt2rt_result gpt2rt__cu_create(gpt2rt_ctx *ctx, gpt2rt__cu_state **out, char *err, size_t cap) {
    if (!ctx) return GPT2RT_ERR_INVALID_ARGUMENT;
    return gpt2rt__cu_create_cfg(ctx, &ctx->cfg, out, err, cap);
}

/* everything the state holds; safe on a partly created state and on NULL */
static void gpt2rt__cu_free(gpt2rt__cu_state *st) {
    if (!st) return;
    (void)cudaSetDevice(st->device);
    if (st->stream) (void)cudaStreamSynchronize(st->stream);
    if (st->blas_ok) gpt2rt__cu_blas_destroy(&st->blas);
    if (st->ev_ok) (void)cudaEventDestroy(st->ev_tok);
    if (st->dp_ev_ok) { (void)cudaEventDestroy(st->ev_grads); (void)cudaEventDestroy(st->ev_comm); }
    if (st->stream) (void)cudaStreamDestroy(st->stream);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
        if (st->arena[i]) (void)cudaFree(st->arena[i]);
    if (st->h_tok) (void)cudaFreeHost(st->h_tok);
    if (st->h_losses) (void)cudaFreeHost(st->h_losses);
    if (st->h_pred) (void)cudaFreeHost(st->h_pred);
    if (st->h_norm) (void)cudaFreeHost(st->h_norm);
    if (st->h_stage) (void)cudaFreeHost(st->h_stage);
    if (st->h_adamw) (void)cudaFreeHost(st->h_adamw);
    if (st->h_kv) (void)cudaFreeHost(st->h_kv);
    (void)cudaGetLastError();
    gpt2rt_config hooks = st->hooks;
    gpt2rt__free(&hooks, st->runs, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st->dev, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&hooks, st, GPT2RT_MEM_BOOKKEEPING);
}

/* ---- weights and optimizer state between host and device ---- */

/* ctx->params (fp32, every tensor) -> the device: the fp32 master of the trained tensors
   (bf16/fp16: master arena by goff; fp32: the weights arena is the master) and the floatX
   copy of every tensor (converted on the host, round to nearest even, as the device's
   casts). Gradients and moments are untouched. Synchronous. */
template <typename X>
static gpt2rt_result gpt2rt__cu_upload_params_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    cudaStream_t s = st->stream;
    const int64_t per = (int64_t)(st->stage_bytes / sizeof(X));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        int64_t n = t->rows * t->cols;
        const float *src = ctx->params + t->off;
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo; /* ZeRO-1: the master of the own shard */
        int64_t hi = t->goff + n < st->opt_hi ? t->goff + n : st->opt_hi;
        if (st->master && t->goff >= 0 && hi > lo)
            GPT2RT__CU_CK(cudaMemcpyAsync(st->master + (lo - st->opt_lo), src + (lo - t->goff), (size_t)(hi - lo) * 4,
                                          cudaMemcpyHostToDevice, s));
        for (int64_t j = 0; j < n; j += per) {
            int64_t k = n - j < per ? n - j : per;
            GPT2RT__CU_CK(cudaStreamSynchronize(s)); /* the stage is free again */
            gpt2rt__cu_host_cvt((X *)(void *)st->h_stage, src + j, k);
            GPT2RT__CU_CK(cudaMemcpyAsync((X *)st->w + t->off + j, st->h_stage, (size_t)k * sizeof(X),
                                          cudaMemcpyHostToDevice, s));
        }
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    st->host_stale = 0;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_upload_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "upload_params";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_upload_params_t<float>(ctx, st);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_upload_params_t<__nv_bfloat16>(ctx, st);
    return gpt2rt__cu_upload_params_t<__half>(ctx, st);
}

/* the trained tensors' fp32 master -> ctx->params (frozen tensors never change on the
   device: the host copy is already theirs). ZeRO-1 in bf16/fp16: the part in the own
   shard only (gpt2rt__cu_host_weights asks every rank). Synchronous. */
static gpt2rt_result gpt2rt__cu_download_params(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "download_params";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t n = t->rows * t->cols, lo = t->goff, hi = t->goff + n;
        if (st->master) { if (lo < st->opt_lo) lo = st->opt_lo; if (hi > st->opt_hi) hi = st->opt_hi; }
        if (hi <= lo) continue;
        const float *src = st->master ? st->master + (lo - st->opt_lo) : (const float *)st->w + t->off;
        GPT2RT__CU_CK(cudaMemcpyAsync(ctx->params + t->off + (lo - t->goff), src, (size_t)(hi - lo) * 4,
                                      cudaMemcpyDeviceToHost, st->stream));
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->host_stale = 0;
    return GPT2RT_OK;
}

/* m, v (n_train fp32 each, goff order) host -> device, and back; either may be NULL.
   ZeRO-1: the own shard [opt_lo, opt_hi) of them only. */
static gpt2rt_result gpt2rt__cu_upload_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *m, const float *v) {
    st->phase = "upload_moments";
    st->layer = -1;
    size_t bytes = (size_t)(st->opt_hi - st->opt_lo) * 4;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (m) GPT2RT__CU_CK(cudaMemcpyAsync(st->m, m + st->opt_lo, bytes, cudaMemcpyHostToDevice, st->stream));
    if (v) GPT2RT__CU_CK(cudaMemcpyAsync(st->v, v + st->opt_lo, bytes, cudaMemcpyHostToDevice, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}
static gpt2rt_result gpt2rt__cu_download_moments(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *m, float *v) {
    st->phase = "download_moments";
    st->layer = -1;
    size_t bytes = (size_t)(st->opt_hi - st->opt_lo) * 4;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (m) GPT2RT__CU_CK(cudaMemcpyAsync(m + st->opt_lo, st->m, bytes, cudaMemcpyDeviceToHost, st->stream));
    if (v) GPT2RT__CU_CK(cudaMemcpyAsync(v + st->opt_lo, st->v, bytes, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}
/* zero the gradients (a dropped accumulation), and with moments = 1 also m and v (a
   training reset); the next backward then overwrites instead of accumulating. Synchronous. */
static gpt2rt_result gpt2rt__cu_zero(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int moments) {
    st->phase = "zero";
    st->layer = -1;
    GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (!st->n_train) return GPT2RT_OK; /* an inference context (config.inference): nothing to zero */
    GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream));
    if (moments) GPT2RT__CU_CK(cudaMemsetAsync(st->m, 0, (size_t)st->dev->n_opt * 8, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->grads_dirty = 0;
    st->have_targets = 0;
    st->dlogits_ready = 0;
    return GPT2RT_OK;
}

/* the raw gradients (n_train fp32, goff order): (sum of token losses) * loss_scale / (BT*grad_accum) */
static gpt2rt_result gpt2rt__cu_download_grads(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *g) {
    st->phase = "download_grads";
    st->layer = -1;
    GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(g, st->grads, (size_t)st->n_train * 4, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* one tensor (rows*cols floats, internal layout) to dst: its value (fp32 master; frozen:
   the host copy), raw gradient, m or v (frozen: GPT2RT_ERR_INVALID_ARGUMENT). ZeRO-1: the
   master (bf16/fp16) and the moments of the part in the own shard only, to the same
   place of dst (the rest of dst untouched; gpt2rt__cu_param_read asks every rank). */
static gpt2rt_result gpt2rt__cu_read_tensor(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const gpt2rt__tensor *t,
                                                gpt2rt_param_what what, float *dst) {
    st->phase = "read_tensor";
    st->layer = -1;
    size_t bytes = (size_t)(t->rows * t->cols) * 4;
    const float *src = NULL;
    int sharded = what == GPT2RT_PARAM_ADAM_M || what == GPT2RT_PARAM_ADAM_V || (what == GPT2RT_PARAM_VALUE && st->master);
    if (t->goff >= 0 && sharded && (st->opt_lo > 0 || st->opt_hi < st->n_train)) {
        int64_t lo = t->goff > st->opt_lo ? t->goff : st->opt_lo;
        int64_t hi = t->goff + t->rows * t->cols < st->opt_hi ? t->goff + t->rows * t->cols : st->opt_hi;
        if (hi <= lo) return GPT2RT_OK;
        dst += lo - t->goff;
        bytes = (size_t)(hi - lo) * 4;
        src = (what == GPT2RT_PARAM_VALUE ? st->master : what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) + (lo - st->opt_lo);
    } else if (what == GPT2RT_PARAM_VALUE) {
        if (t->goff < 0) { memcpy(dst, ctx->params + t->off, bytes); return GPT2RT_OK; }
        src = st->master ? st->master + t->goff : (const float *)st->w + t->off;
    } else {
        if (t->goff < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_read_tensor: %s is frozen: no gradient "
                                "or moments", t->name);
        src = (what == GPT2RT_PARAM_GRAD ? st->grads : what == GPT2RT_PARAM_ADAM_M ? st->m : st->v) + t->goff;
        if (what == GPT2RT_PARAM_GRAD) GPT2RT__TRY(gpt2rt__cu_comm_idle(ctx, st));
    }
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* ---- the model ---- */

/* One layer's forward from res (BT,C) into a (device pointers; NULL fields: not kept, go to
   dbig, the backward's scratch, free during the forward, and are used at once; rcbuf only
   exists under SELECTIVE). The backward's recompute calls this same function on the same
   input: bitwise the same values. Mirrors gpt2rt__cpu_layer_forward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_layer_forward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t l, const X *res,
                                              gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
    X *scr = (X *)st->dev->dbig;
    X *ln1 = a.ln1 ? (X *)a.ln1 : scr, *ln2 = a.ln2 ? (X *)a.ln2 : scr, *gelu = a.fch_gelu ? (X *)a.fch_gelu : scr;
    X *qkv = (X *)a.qkv, *atty = (X *)a.atty, *res2 = (X *)a.res2, *fch = (X *)a.fch, *res3 = (X *)a.res3;
    /* the masks: attention probabilities, residual branches */
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    st->layer = l;
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln1, a.ln1_mean, a.ln1_rstd, res, p.ln1w, p.ln1b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, qkv, NULL, ln1, p.qkvw, p.qkvb, BT, C, 3 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_attention_forward<X>(atty, a.lse, qkv, (int)d->B, (int)d->T, (int)C, (int)d->NH, s, &da,
                                                  (int)d->TH)); /* TH: the placeholder mask's history, or T */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res2, NULL, atty, p.projw, p.projb, BT, C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(res2, res2, &dr2, BT * C, s)); /* the branch, before the add */
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res2, res2, res, BT * C, s));
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln2, a.ln2_mean, a.ln2_rstd, res2, p.ln2w, p.ln2b, BT, C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, fch, NULL, ln2, p.fcw, p.fcb, BT, C, 4 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(gelu, fch, BT * 4 * C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, res3, NULL, gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(res3, res3, &dr3, BT * C, s));
    GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(res3, res3, res2, BT * C, s));
    return GPT2RT_OK;
}

/* ---- the steps of gpt2rt__model_forward / _backward (7.3) on the device: the driver
   owns the layer loop and the recompute schedule for every backend and hands these
   the device pointers of ax = st->dev, typed float * there, floatX here ---- */

/* x0 (BT,C) = wte[inputs] + wpe; patches: in_layer(patches) + wpe (the patches are
   floatX on the device, in the fp32 slot the plan gives them); then the embeddings'
   dropout, in place: x0 keeps the dropped values (layer 0's input, FULL's checkpoint 0) */
template <typename X>
static gpt2rt_result gpt2rt__cu_embed_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    X *x0 = (X *)dv->x0;
    const X *wpe = gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE));
    st->layer = -1;
    if (!d->patches) {
        GPT2RT__CU_CK(gpt2rt__cu_encoder_forward<X>(x0, dv->inputs, gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx,
                                                    GPT2RT__WTE)), wpe, d->B, d->T, d->C, st->stream));
    } else {
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, gpt2rt__cu_dtype<X>::value, x0, NULL, dv->ts_patch,
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__INW)),
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__INB)), d->BT,
                                                d->PL, d->C, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_CK(gpt2rt__cu_add_pos<X>(x0, wpe, d->BT, d->T, d->C, st->stream));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(x0, x0, &dr, d->BT * d->C, st->stream));
    return GPT2RT_OK;
}

/* ln_f of res (BT,C) (its dropout in place: lnf keeps the dropped values, the head's
   input; ln_f's backward reads res), then the tied LM head: logits (BT,Vp); patches:
   out_layer on each series' flattened (T,C) states, (B, T*C) -> the normalised
   predictions (B,H) in the logits arena; aLLM4TS's sequence heads: out_layer at every
   position, (BT,C) -> (BT,PL), and PATCH_DECODE's placeholders' rows gathered to yn (B,H) */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const X *res) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    X *lnf = (X *)dv->lnf;
    st->layer = -1;
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(lnf, dv->lnf_mean, dv->lnf_rstd, res,
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFW)),
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFB)),
                                                  d->BT, d->C, st->stream));
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(lnf, lnf, &dr, d->BT * d->C, st->stream));
    if (d->seqhead) {
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, dv->logits, NULL, lnf,
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTW)),
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTB)), d->BT,
                                                d->C, d->PL, st->mm_err, sizeof st->mm_err));
        if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE)
            GPT2RT__CU_CK(gpt2rt__cu_ts_decode<X>((X *)(void *)gpt2rt__ts_yn(dv), (X *)dv->logits, 0, d, st->stream));
    } else if (d->patches)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, dv->logits, NULL, lnf,
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTW)),
                                                gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__OUTB)), d->B,
                                                d->T * d->C, d->H, st->mm_err, sizeof st->mm_err));
    else if (d->hc == d->BT) /* classifier_chunk: the logits come chunk by chunk with the loss */
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, dv->logits, NULL, lnf,
                                                gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE)), NULL,
                                                d->BT, d->C, d->Vp, st->mm_err, sizeof st->mm_err));
    return GPT2RT_OK;
}

/* The chunked classifier (config.classifier_chunk; 7.3's gpt2rt__cpu_head_chunk): tokens
   [i, i+n) of lnf (BT,C): their logits (n,Vp) in the logits arena (hc rows), their
   losses and lse (the whole-batch classifier's kernel, row by row), and with grad the
   logits become dlogits in place, dbuf's rows [i, i+n) = dlogits wte and wte's gradient
   += dlogits^T lnf (overwritten by the first chunk when st->acc = 0). Every row is
   computed alone but wte's gradient, a sum over the tokens that the chunks add in
   pieces: within fp32 reassociation of the whole-batch product's. */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_chunk_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t i, int64_t n, int grad,
                                             float dloss) {
    const gpt2rt__dims *d = &st->d;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    gpt2rt_ctx *dv = st->dev;
    const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE);
    X *logits = (X *)dv->logits;
    const X *lnf = (const X *)dv->lnf + i * d->C;
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(&st->blas, t, logits, NULL, lnf, gpt2rt__cu_weight<X>(st, wte), NULL, n,
                                            d->C, d->Vp, st->mm_err, sizeof st->mm_err));
    GPT2RT__CU_CK(gpt2rt__cu_classifier<X>(logits, dv->losses + i, dv->logit_lse + i, dv->targets + i, dloss, grad, n,
                                           d->V, d->Vp, st->stream));
    if (!grad) return GPT2RT_OK;
    float *g_wte = gpt2rt__cu_grad_of(st, wte);
    if (g_wte)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_wte, NULL, NULL, logits, lnf, n, d->C, d->Vp,
                                                        st->acc || i > 0, st->mm_err, sizeof st->mm_err));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, (X *)dv->dbuf + i * d->C, logits,
                                                   gpt2rt__cu_weight<X>(st, wte), NULL, n, d->C, d->Vp, st->mm_err,
                                                   sizeof st->mm_err));
    return GPT2RT_OK;
}

/* every chunk in order (grad: the head's backward too) */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_chunks_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int grad, float dloss) {
    const gpt2rt__dims *d = &st->d;
    for (int64_t i = 0; i < d->BT; i += d->hc)
        GPT2RT__TRY(gpt2rt__cu_head_chunk_t<X>(ctx, st, i, d->BT - i < d->hc ? d->BT - i : d->hc, grad, dloss));
    return GPT2RT_OK;
}

/* LayerNorm backward of the model (BT rows of C), partials in the reduction scratch;
   dw, db NULL: frozen */
template <typename X>
static cudaError_t gpt2rt__cu_ln_backward(gpt2rt__cu_state *st, X *dinp, float *dw, float *db, const X *dout,
                                          const X *inp, const X *w, const float *mean, const float *rstd) {
    return gpt2rt__cu_layernorm_backward<X>(dinp, dw, db, dout, inp, w, mean, rstd, st->red, st->d.BT, st->d.C,
                                            st->stream);
}

/* logits -> dlogits * dloss (unless the forward fused it), the tied head's and ln_f's
   gradients; patches: the MSE's gradient through the de-normalisation (and RevIN's
   affine), out_layer's; then the head dropout's mask on d(lnf); dres = d(res), res
   (BT,C) the input of ln_f. Weight gradients overwrite when st->acc = 0 (known zero)
   and accumulate otherwise. */
template <typename X>
static gpt2rt_result gpt2rt__cu_head_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const X *res, float dloss) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    const gpt2rt__tensor *lnfw = gpt2rt__model_tensor(ctx, GPT2RT__LNFW), *lnfb = gpt2rt__model_tensor(ctx, GPT2RT__LNFB);
    X *logits = (X *)dv->logits, *dres = (X *)dv->dres, *dbuf = (X *)dv->dbuf;
    st->layer = -1;
    if (d->patches) { /* dyn (B,H) in place, then out_layer: dlnf (B, T*C) -> dbuf; sequence heads:
                         dout (BT,PL) from the next patches or the placeholders' dyn, then
                         out_layer at every position: dlnf (BT,C) -> dbuf */
        const gpt2rt__tensor *ow = gpt2rt__ts_tensor(ctx, GPT2RT__OUTW), *ob = gpt2rt__ts_tensor(ctx, GPT2RT__OUTB);
        const gpt2rt__tensor *rw = gpt2rt__ts_tensor(ctx, GPT2RT__REVW), *rb = gpt2rt__ts_tensor(ctx, GPT2RT__REVB);
        X *yn = d->seqhead ? (X *)(void *)gpt2rt__ts_yn(dv) : logits;
        int64_t rows = d->seqhead ? BT : d->B, k = d->seqhead ? C : d->T * C, n = d->seqhead ? d->PL : d->H;
        if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH)
            GPT2RT__CU_CK(gpt2rt__cu_ts_next<X>(NULL, logits, (const X *)(const void *)dv->ts_patch, dloss, d, s));
        else GPT2RT__CU_CK(gpt2rt__cu_ts_mse_backward<X>(yn, dv->ts_pred, dv->ts_y, dv->ts_std, gpt2rt__cu_weight<X>(st, rw),
                                                    gpt2rt__cu_weight<X>(st, rb), gpt2rt__cu_grad_of(st, rw),
                                                    gpt2rt__cu_grad_of(st, rb), dloss, d, s));
        if (d->seqhead == GPT2RT_HEAD_PATCH_DECODE) GPT2RT__CU_CK(gpt2rt__cu_ts_decode<X>(yn, logits, 1, d, s));
        float *g_outw = gpt2rt__cu_grad_of(st, ow);
        if (g_outw)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_outw, gpt2rt__cu_grad_of(st, ob),
                                                            st->acc ? st->red : NULL, logits, dv->lnf, rows, k, n,
                                                            st->acc, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dbuf, logits, gpt2rt__cu_weight<X>(st, ow), NULL,
                                                       rows, k, n, st->mm_err, sizeof st->mm_err));
    } else if (d->hc < BT) { /* classifier_chunk: the chunks again, unless gpt2rt_step's forward ran them */
        if (!st->dlogits_ready) GPT2RT__TRY(gpt2rt__cu_head_chunks_t<X>(ctx, st, 1, dloss));
        st->dlogits_ready = 0;
    } else { /* LM head (tied): dlnf -> dbuf */
        const gpt2rt__tensor *wte = gpt2rt__model_tensor(ctx, GPT2RT__WTE);
        if (!st->dlogits_ready)
            GPT2RT__CU_CK(gpt2rt__cu_classifier<X>(logits, dv->losses, dv->logit_lse, dv->targets, dloss, 1, BT, d->V,
                                                   d->Vp, s));
        st->dlogits_ready = 0;
        float *g_wte = gpt2rt__cu_grad_of(st, wte);
        if (g_wte)
            GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_wte, NULL, NULL, logits, dv->lnf, BT, C,
                                                            d->Vp, st->acc, st->mm_err, sizeof st->mm_err));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dbuf, logits, gpt2rt__cu_weight<X>(st, wte), NULL,
                                                       BT, C, d->Vp, st->mm_err, sizeof st->mm_err));
    }
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.head_dropout, -1, GPT2RT__DROP_HEAD, BT * C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbuf, dbuf, &dr, BT * C, s));
    GPT2RT__CU_CK(cudaMemsetAsync(dres, 0, (size_t)(BT * C * d->ab), s));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, gpt2rt__cu_grad_of(st, lnfw), gpt2rt__cu_grad_of(st, lnfb), dbuf,
                                            res, gpt2rt__cu_weight<X>(st, lnfw), dv->lnf_mean, dv->lnf_rstd));
    return GPT2RT_OK;
}

/* Layer l's backward: dres holds d(res3) and becomes d(res), res_in (BT,C) the layer's
   input. Outputs the forward did not keep are recomputed into rcbuf, only for the weight
   gradients that need them (NULL g: frozen, skipped). Dropout: the masked gradient of a
   residual branch goes through the scratch free at that point (dbuf for the MLP's, dbig
   for the attention's), dres stays the stream's. Mirrors gpt2rt__cpu_layer_backward. */
template <typename X>
static gpt2rt_result gpt2rt__cu_layer_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t l, const X *res_in,
                                                 gpt2rt__layer_acts a) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT, C = d->C;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    const int acc = st->acc;
    gpt2rt_ctx *dv = st->dev;
    X *dres = (X *)dv->dres, *dbuf = (X *)dv->dbuf, *dbig = (X *)dv->dbig;
    X *rc = (X *)dv->rcbuf; /* SELECTIVE: outputs not kept, recomputed for a weight gradient */
    float *dbs = acc ? st->red : NULL; /* the bias-gradient vector of an accumulating matmul */
    const int dgelu_epilogue = sizeof(X) == 2; /* fp32: the gelu backward kernel (see the top comment) */
    st->layer = l;
    gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
    gpt2rt__layer_params g = gpt2rt__lparams(dv, st->grads, 1, l); /* device fp32, NULL: frozen */
    const X *fch = (const X *)a.fch, *res2 = (const X *)a.res2, *atty = (const X *)a.atty, *qkv = (const X *)a.qkv;
    gpt2rt__drop da = gpt2rt__drop_at(ctx, ctx->cfg.attn_dropout, l, GPT2RT__DROP_ATTN, d->B * d->NH * d->T * d->T);
    gpt2rt__drop dr2 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_ATTN_RESID, BT * C);
    gpt2rt__drop dr3 = gpt2rt__drop_at(ctx, ctx->cfg.dropout, l, GPT2RT__DROP_MLP_RESID, BT * C);
    /* MLP; dres holds d(res3), dbranch the gradient of the branch (masked) */
    const X *gelu = (const X *)a.fch_gelu, *ln2 = (const X *)a.ln2, *dbranch = dres;
    if (!gelu && g.fcprojw) {
        GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(rc, fch, BT * 4 * C, s));
        gelu = rc;
    }
    if (dr3.on) {
        GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbuf, dres, &dr3, BT * C, s));
        dbranch = dbuf;
    }
    if (g.fcprojw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcprojw, g.fcprojb, dbs, dbranch, gelu, BT, 4 * C, C,
                                                        acc, me, mc));
    /* d(fch) = (dbranch Wproj) * gelu'(fch): the DGELU epilogue (bf16/fp16) or the kernel (fp32) */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbig, dbranch, p.fcprojw, dgelu_epilogue ? fch : NULL, BT,
                                                   4 * C, C, me, mc));
    if (!dgelu_epilogue) GPT2RT__CU_CK(gpt2rt__cu_gelu_backward<X>(dbig, fch, dbig, BT * 4 * C, s));
    if (!ln2 && g.fcw) {
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res2, p.ln2w, p.ln2b, BT, C, s));
        ln2 = rc;
    }
    if (g.fcw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.fcw, g.fcb, dbs, dbig, ln2, BT, C, 4 * C, acc, me, mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.fcw, NULL, BT, C, 4 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln2w, g.ln2b, dbuf, res2, p.ln2w, a.ln2_mean, a.ln2_rstd));
    /* attention; dres holds d(res2) */
    dbranch = dres;
    if (dr2.on) {
        GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dbig, dres, &dr2, BT * C, s));
        dbranch = dbig;
    }
    if (g.projw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.projw, g.projb, dbs, dbranch, atty, BT, C, C, acc, me,
                                                        mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbranch, p.projw, NULL, BT, C, C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_attention_backward<X>(dbig, dbuf, qkv, atty, a.lse, st->att_D, (int)d->B, (int)d->T,
                                                   (int)C, (int)d->NH, s, &da, (int)d->TH));
    const X *ln1 = (const X *)a.ln1;
    if (!ln1 && g.qkvw) {
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(rc, NULL, NULL, res_in, p.ln1w, p.ln1b, BT, C, s));
        ln1 = rc;
    }
    if (g.qkvw)
        GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(bl, t, g.qkvw, g.qkvb, dbs, dbig, ln1, BT, C, 3 * C, acc, me,
                                                        mc));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(bl, t, dbuf, dbig, p.qkvw, NULL, BT, C, 3 * C, me, mc));
    GPT2RT__CU_CK(gpt2rt__cu_ln_backward<X>(st, dres, g.ln1w, g.ln1b, dbuf, res_in, p.ln1w, a.ln1_mean, a.ln1_rstd));
    st->layer = -1;
    return GPT2RT_OK;
}

/* embeddings: the dropout's mask on dres (then d(x0 before dropout): dres ends here);
   dwte by token buckets (deterministic), dwpe summed over the batch; patches: dwpe, and
   in_layer's weight gradients, the patches' gradient only for RevIN's affine */
template <typename X>
static gpt2rt_result gpt2rt__cu_embed_backward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    const gpt2rt__dims *d = &st->d;
    gpt2rt_ctx *dv = st->dev;
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    X *dres = (X *)dv->dres;
    float *g_wte = d->patches ? NULL : gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE));
    float *g_wpe = gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE));
    st->layer = -1;
    gpt2rt__drop dr = gpt2rt__drop_at(ctx, ctx->cfg.dropout, -1, GPT2RT__DROP_EMBED, d->BT * d->C);
    GPT2RT__CU_CK(gpt2rt__cu_dropout<X>(dres, dres, &dr, d->BT * d->C, st->stream));
    GPT2RT__CU_CK(gpt2rt__cu_encoder_backward<X>(g_wte, g_wpe, dres, st->buckets_ws, g_wte ? st->nb : 0, d->B, d->T,
                                                 d->C, st->stream));
    const gpt2rt__tensor *iw = d->patches ? gpt2rt__ts_tensor(ctx, GPT2RT__INW) : NULL;
    float *g_inw = gpt2rt__cu_grad_of(st, iw);
    if (!g_inw) return GPT2RT_OK; /* tokens, or the head group frozen */
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_weight(&st->blas, t, g_inw, gpt2rt__cu_grad_of(st, gpt2rt__ts_tensor(ctx,
                                                    GPT2RT__INB)), st->acc ? st->red : NULL, dres, dv->ts_patch, d->BT,
                                                    d->PL, d->C, st->acc, st->mm_err, sizeof st->mm_err));
    const gpt2rt__tensor *rw = gpt2rt__ts_tensor(ctx, GPT2RT__REVW), *rb = gpt2rt__ts_tensor(ctx, GPT2RT__REVB);
    if (!gpt2rt__cu_grad_of(st, rw)) return GPT2RT_OK;
    GPT2RT__CU_MM(gpt2rt__cu_matmul_backward_input(&st->blas, t, dv->ts_dpatch, dres, gpt2rt__cu_weight<X>(st, iw), NULL,
                                                   d->BT, d->PL, d->C, st->mm_err, sizeof st->mm_err));
    GPT2RT__CU_CK(gpt2rt__cu_ts_affine_backward<X>(gpt2rt__cu_grad_of(st, rw), gpt2rt__cu_grad_of(st, rb),
                                                   (const X *)(const void *)dv->ts_dpatch, dv->ts_z, d, st->stream));
    return GPT2RT_OK;
}

/* the table's entries: the state is ctx->cu, the storage type st->xt */
#define GPT2RT__CU_BY_TYPE(st, fn, ...) \
    ((st)->xt == CUDA_R_32F ? fn<float>(__VA_ARGS__) \
     : (st)->xt == CUDA_R_16BF ? fn<__nv_bfloat16>(__VA_ARGS__) : fn<__half>(__VA_ARGS__))
static gpt2rt_result gpt2rt__cu_embed_forward(gpt2rt_ctx *ctx) {
    return GPT2RT__CU_BY_TYPE(ctx->cu, gpt2rt__cu_embed_forward_t, ctx, ctx->cu);
}
static gpt2rt_result gpt2rt__cu_layer_forward_any(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_layer_forward<float>(ctx, st, l, res, a)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_layer_forward<__nv_bfloat16>(ctx, st, l, (const __nv_bfloat16 *)(const void *)res, a)
         : gpt2rt__cu_layer_forward<__half>(ctx, st, l, (const __half *)(const void *)res, a);
}
static gpt2rt_result gpt2rt__cu_head_forward(gpt2rt_ctx *ctx, const float *res) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_head_forward_t<float>(ctx, st, res)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_head_forward_t<__nv_bfloat16>(ctx, st, (const __nv_bfloat16 *)(const void *)res)
         : gpt2rt__cu_head_forward_t<__half>(ctx, st, (const __half *)(const void *)res);
}
static gpt2rt_result gpt2rt__cu_head_backward(gpt2rt_ctx *ctx, const float *res, float dloss) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_head_backward_t<float>(ctx, st, res, dloss)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_head_backward_t<__nv_bfloat16>(ctx, st, (const __nv_bfloat16 *)(const void *)res, dloss)
         : gpt2rt__cu_head_backward_t<__half>(ctx, st, (const __half *)(const void *)res, dloss);
}
static gpt2rt_result gpt2rt__cu_layer_backward(gpt2rt_ctx *ctx, int64_t l, const float *res, gpt2rt__layer_acts a) {
    gpt2rt__cu_state *st = ctx->cu;
    return st->xt == CUDA_R_32F ? gpt2rt__cu_layer_backward_t<float>(ctx, st, l, res, a)
         : st->xt == CUDA_R_16BF ? gpt2rt__cu_layer_backward_t<__nv_bfloat16>(ctx, st, l, (const __nv_bfloat16 *)(const void *)res, a)
         : gpt2rt__cu_layer_backward_t<__half>(ctx, st, l, (const __half *)(const void *)res, a);
}
static gpt2rt_result gpt2rt__cu_embed_backward(gpt2rt_ctx *ctx) {
    return GPT2RT__CU_BY_TYPE(ctx->cu, gpt2rt__cu_embed_backward_t, ctx, ctx->cu);
}
#undef GPT2RT__CU_BY_TYPE
/* bytes device to device, stream-ordered (FULL's checkpoints and last output) */
static gpt2rt_result gpt2rt__cu_copy(gpt2rt_ctx *ctx, void *dst, const void *src, size_t bytes) {
    gpt2rt__cu_state *st = ctx->cu;
    GPT2RT__CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream));
    return GPT2RT_OK;
}
/* the step-level entries (the end of 8.6): the public calls' work on ctx->cu */
static gpt2rt_result gpt2rt__cu_be_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                           int fuse);
static gpt2rt_result gpt2rt__cu_be_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
static gpt2rt_result gpt2rt__cu_be_backward(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__cu_be_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale);
static gpt2rt_result gpt2rt__cu_be_zero_grads(gpt2rt_ctx *ctx, int moments);
static gpt2rt_result gpt2rt__cu_be_logits(gpt2rt_ctx *ctx, float *dst);
static gpt2rt_result gpt2rt__cu_be_predictions(gpt2rt_ctx *ctx, float *dst);
static gpt2rt_result gpt2rt__cu_be_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter);
static gpt2rt_result gpt2rt__cu_be_host_weights(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__cu_be_upload(gpt2rt_ctx *ctx, const float *m, const float *v);
static gpt2rt_result gpt2rt__cu_be_host_moments(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf);
static gpt2rt_result gpt2rt__cu_be_param_read(gpt2rt_ctx *ctx, const char *name, const gpt2rt__tensor *t,
                                              gpt2rt_param_what what, float *dst);
static void gpt2rt__cu_be_allocated(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead);
static gpt2rt_result gpt2rt__cu_be_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan);
static gpt2rt_result gpt2rt__cu_be_dp_open(gpt2rt_ctx *ctx);
static void gpt2rt__cu_be_release_shared(gpt2rt_ctx *ctx);
static void gpt2rt__cu_be_release(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__cu_be_decode(gpt2rt_ctx *ctx, int64_t N, int64_t M);

static const gpt2rt__backend gpt2rt__cu_backend = {
    gpt2rt__cu_embed_forward, gpt2rt__cu_layer_forward_any, gpt2rt__cu_head_forward, gpt2rt__cu_head_backward,
    gpt2rt__cu_layer_backward, gpt2rt__cu_embed_backward, gpt2rt__cu_copy,
    gpt2rt__cu_be_forward, gpt2rt__cu_be_forward_series, gpt2rt__cu_be_backward, gpt2rt__cu_be_update,
    gpt2rt__cu_be_zero_grads, gpt2rt__cu_be_logits, gpt2rt__cu_be_predictions, gpt2rt__cu_be_dp_reduce,
    gpt2rt__cu_be_host_weights, gpt2rt__cu_be_upload, gpt2rt__cu_be_host_moments, gpt2rt__cu_be_param_read,
    gpt2rt__cu_be_allocated, gpt2rt__cu_be_dp_rank, gpt2rt__cu_be_dp_open, gpt2rt__cu_be_release_shared,
    gpt2rt__cu_be_release, gpt2rt__cu_be_decode};

/* ---- training calls ---- */

/* inputs, targets: host int32 (B,T), validated by the caller (inputs in [0,V), targets < V,
   negative ignored); targets may be NULL. With targets: the losses come back, *loss (may
   be NULL) and ctx->loss, ctx->loss_sum, ctx->n_targets are set as the CPU forward sets
   them. st->dlogits_in_forward = 1 (set by the caller, cleared here): the classifier also
   turns the logits into dlogits for the backward that must follow (one pass less). */
template <typename X>
static gpt2rt_result gpt2rt__cu_forward_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int32_t *inputs,
                                          const int32_t *targets, float *loss) {
    const gpt2rt__dims *d = &st->d;
    const int64_t BT = d->BT;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    int fuse = st->dlogits_in_forward && targets;
    st->dlogits_in_forward = 0;
    st->dlogits_ready = 0;
    st->layer = -1;
    /* the pinned token buffers are free once the last copy out of them ran */
    GPT2RT__CU_CK(cudaEventSynchronize(st->ev_tok));
    /* host side first: a bad token returns before anything is queued */
    int32_t *h_in = st->h_tok, *h_tg = st->h_tok + BT, *h_bk = st->h_tok + 2 * BT;
    memcpy(h_in, inputs, (size_t)BT * 4);
    if (targets) memcpy(h_tg, targets, (size_t)BT * 4);
    st->nb = -1;
    if (targets && gpt2rt__model_tensor(ctx, GPT2RT__WTE)->goff >= 0) { /* the wte gradient's token buckets (host sort) */
        st->nb = gpt2rt__cu_encoder_buckets(h_bk, h_in, BT, d->Vp);
        if (st->nb < 0)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_forward: a token is outside [0, %lld)",
                                (long long)d->Vp);
    }
    /* the copies out of h_tok, then the event that frees it, recorded whatever happened */
    cudaError_t e = cudaMemcpyAsync(dv->inputs, h_in, (size_t)BT * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && targets) e = cudaMemcpyAsync(dv->targets, h_tg, (size_t)BT * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && st->nb >= 0)
        e = cudaMemcpyAsync(st->buckets_ws, h_bk, (size_t)gpt2rt__cu_encoder_bucket_ints(BT) * 4,
                            cudaMemcpyHostToDevice, s);
    cudaError_t er = cudaEventRecord(st->ev_tok, s);
    GPT2RT__CU_CK(e);
    GPT2RT__CU_CK(er);
    GPT2RT__TRY(gpt2rt__model_forward(ctx, &gpt2rt__cu_backend, st->dev));
    st->have_targets = targets != NULL;
    if (!targets) {
        if (loss) *loss = 0.0f;
        return GPT2RT_OK;
    }
    float dloss = st->loss_scale / (float)(BT * st->cfg.grad_accum);
    if (d->hc < BT) { /* classifier_chunk: the fused head's weight gradient joins what is there */
        st->acc = st->grads_dirty;
        GPT2RT__TRY(gpt2rt__cu_head_chunks_t<X>(ctx, st, fuse, dloss));
    } else
        GPT2RT__CU_CK(gpt2rt__cu_classifier<X>((X *)dv->logits, dv->losses, dv->logit_lse, dv->targets, dloss, fuse, BT,
                                               d->V, d->Vp, s));
    st->dlogits_ready = fuse;
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_losses, dv->losses, (size_t)BT * 4, cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    /* the CPU's sum: in order, in double, over the counted targets */
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < BT; i++)
        if (targets[i] >= 0) { total += st->h_losses[i]; n++; }
    ctx->n_targets = n;
    ctx->loss_sum = total;
    ctx->loss = n ? (float)(total / (double)n) : 0.0f;
    if (loss) *loss = ctx->loss;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_forward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int32_t *inputs,
                                            const int32_t *targets, float *loss) {
    st->phase = "forward";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_forward_t<float>(ctx, st, inputs, targets, loss);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_forward_t<__nv_bfloat16>(ctx, st, inputs, targets, loss);
    return gpt2rt__cu_forward_t<__half>(ctx, st, inputs, targets, loss);
}

/* Patches: x (Bw,L,M) and y (Bw,H,M) (may be NULL) host fp32, checked by the caller
   (finite). RevIN and the patches on the device, the model, the de-normalised
   predictions back to the host (st->h_pred, what gpt2rt_predictions reads), and with y
   the loss, summed there as the CPU sums it: *loss (may be NULL), ctx->loss,
   ctx->loss_sum, ctx->n_targets. Waits for the device (the predictions), so x and y
   are free again on return. */
template <typename X>
static gpt2rt_result gpt2rt__cu_forward_series_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *x, const float *y,
                                                 float *loss) {
    const gpt2rt__dims *d = &st->d;
    cudaStream_t s = st->stream;
    gpt2rt_ctx *dv = st->dev;
    const X *rw = gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__REVW));
    const X *rb = gpt2rt__cu_weight<X>(st, gpt2rt__ts_tensor(ctx, GPT2RT__REVB));
    st->dlogits_in_forward = st->dlogits_ready = 0;
    st->have_targets = 0;
    st->layer = -1;
    GPT2RT__CU_CK(cudaMemcpyAsync(st->ts_x, x, (size_t)(d->B * d->Lb) * 4, cudaMemcpyHostToDevice, s));
    if (y && d->seqhead != GPT2RT_HEAD_NEXT_PATCH) /* NEXT_PATCH has no y slot: its targets are the patches */
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->ts_y, y, (size_t)d->n_out * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(gpt2rt__cu_ts_revin_patch<X>((X *)(void *)dv->ts_patch, dv->ts_z, dv->ts_mean, dv->ts_std, st->ts_x, rw,
                                               rb, d, s));
    GPT2RT__TRY(gpt2rt__model_forward(ctx, &gpt2rt__cu_backend, st->dev));
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH) { /* the targets are the lookback's next patches: the
                              loss's B partial sums in attention's D scratch (B*8 <= B*NH*T*4 bytes, T >= 2; free until
                              the backward), added on the host in series order */
        double *part = (double *)(void *)st->att_D, *h_part = (double *)(void *)st->h_losses; /* (BT) floats >= B doubles */
        GPT2RT__CU_CK(gpt2rt__cu_ts_next<X>(part, (X *)dv->logits, (const X *)(const void *)dv->ts_patch, 0.0f, d, s));
        GPT2RT__CU_CK(cudaMemcpyAsync(h_part, part, (size_t)d->B * sizeof(double), cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
        double sum = 0.0;
        for (int64_t bm = 0; bm < d->B; bm++) sum += h_part[bm];
        st->have_targets = 1;
        ctx->loss_sum = sum;
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(sum / (double)d->n_out);
        if (loss) *loss = ctx->loss;
        return GPT2RT_OK;
    }
    GPT2RT__CU_CK(gpt2rt__cu_ts_denorm<X>(dv->ts_pred, (const X *)(const void *)gpt2rt__ts_yn(dv), dv->ts_mean,
                                          dv->ts_std, rw, rb, d, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_pred, dv->ts_pred, (size_t)d->n_out * 4, cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    st->have_targets = y != NULL;
    if (y) {
        ctx->loss_sum = gpt2rt__ts_mse_sum(st->h_pred, y, d->n_out);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
    }
    if (loss) *loss = y ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_forward_series(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const float *x, const float *y,
                                               float *loss) {
    st->phase = "forward";
    st->layer = -1;
    if (!st->d.patches)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_forward_series: the context has token inputs");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_forward_series_t<float>(ctx, st, x, y, loss);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_forward_series_t<__nv_bfloat16>(ctx, st, x, y, loss);
    return gpt2rt__cu_forward_series_t<__half>(ctx, st, x, y, loss);
}

/* += the gradients of the last forward's loss (it must have had targets; the caller keeps
   the at-most-one-backward-per-forward rule). Does not wait for the device. */
static gpt2rt_result gpt2rt__cu_backward(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    st->phase = "backward";
    st->layer = -1;
    if (!st->have_targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_backward: the last forward had no targets");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    const gpt2rt__dims *d = &st->d;
    st->acc = st->grads_dirty;
    gpt2rt_result r = gpt2rt__model_backward(ctx, &gpt2rt__cu_backend, st->dev,
                                             st->loss_scale / (float)(d->n_out * st->cfg.grad_accum));
    if (r != GPT2RT_OK) return r;
    st->have_targets = 0;
    st->grads_dirty = 1;
    return GPT2RT_OK;
}

/* One AdamW step at learning rate lr (the caller: gpt2rt__opt_lr_at(&ctx->cfg, ctx->step)),
   bias correction for step ctx->step + 1, over the gradients summed since the last update
   (ctx->acc_targets counted targets). *norm: the global gradient norm of the mean loss
   (before clipping, loss scale removed); *skipped: 1 when it is not finite (gradients
   zeroed, weights and moments untouched; fp16: the scale halves); *loss_scale: the scale
   the next backward uses. The caller advances ctx->step when not skipped and resets its
   accumulation counters, as gpt2rt_update does. Waits for the device once (the norm). */
static gpt2rt_result gpt2rt__cu_dp_before_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, double *sumsq); /* 8.6 */
template <typename X> static gpt2rt_result gpt2rt__cu_dp_gather_weights(gpt2rt_ctx *ctx, gpt2rt__cu_state *st);
template <typename X>
static gpt2rt_result gpt2rt__cu_update_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm_out,
                                         int *skipped_out, float *scale_out) {
    const gpt2rt_config *c = &st->cfg;
    cudaStream_t s = st->stream;
    /* the reduction scratch: norm result (2 doubles), then the AdamW table */
    double *d_norm = (double *)(void *)st->red;
    gpt2rt__cu_adamw_tensor *d_tab = (gpt2rt__cu_adamw_tensor *)(void *)((unsigned char *)st->red + 16);
    double sumsq = 0.0;
    if (st->dcomm) /* data parallel (8.6): the summed gradients; global loss, targets, squared norm */
        GPT2RT__TRY(gpt2rt__cu_dp_before_update(ctx, st, &sumsq));
    else {
        GPT2RT__CU_CK(gpt2rt__cu_global_norm(d_norm, NULL, st->grads, st->n_train, st->norm_parts, s));
        GPT2RT__CU_CK(cudaMemcpyAsync(st->h_norm, d_norm, sizeof(double), cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
    }
    /* no counted target: data parallel only (one device skips before calling), every rank alike */
    gpt2rt__opt_decision o = gpt2rt__opt_policy(ctx, st->dcomm ? sqrt(sumsq) : st->h_norm[0], &st->loss_scale,
                                                &st->clean_steps);
    if (o.skipped) GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, s));
    else {
        GPT2RT__CU_CK(cudaMemcpyAsync(d_tab, st->h_adamw, (size_t)st->n_adamw * sizeof(gpt2rt__cu_adamw_tensor),
                                      cudaMemcpyHostToDevice, s));
        /* the table counts from opt_lo (0 without ZeRO-1), where the master and moments start */
        for (int r = 0; r < st->n_runs; r++) {
            const gpt2rt__cu_adamw_run *run = &st->runs[r];
            float *params = st->master ? st->master : (float *)st->w + run->delta + st->opt_lo;
            X *params_x = st->master ? (X *)st->w + run->delta + st->opt_lo : NULL;
            GPT2RT__CU_CK(gpt2rt__cu_adamw<X>(params, params_x, st->grads + st->opt_lo, st->m, st->v, d_tab + run->i0,
                                              run->n, run->blocks, lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                                              ctx->step + 1, o.grad_scale, s));
        }
        if (st->opt_hi - st->opt_lo < st->n_train) /* ZeRO-1: every rank gets every updated weight */
            GPT2RT__TRY(gpt2rt__cu_dp_gather_weights<X>(ctx, st));
        st->host_stale = 1;
    }
    st->grads_dirty = 0;
    if (norm_out) *norm_out = o.norm;
    if (skipped_out) *skipped_out = o.skipped;
    if (scale_out) *scale_out = st->loss_scale;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm,
                                           int *skipped, float *loss_scale) {
    st->phase = "update";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_update_t<float>(ctx, st, lr, norm, skipped, loss_scale);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_update_t<__nv_bfloat16>(ctx, st, lr, norm, skipped, loss_scale);
    return gpt2rt__cu_update_t<__half>(ctx, st, lr, norm, skipped, loss_scale);
}

/* dst (BT, V) fp32 = the last forward's logits without the padded columns (count must be
   BT*V, checked by the caller); fails if the classifier already turned them into dlogits */
template <typename X>
static gpt2rt_result gpt2rt__cu_logits_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *dst) {
    const gpt2rt__dims *d = &st->d;
    const size_t row = (size_t)d->V * sizeof(X);
    int64_t rows = (int64_t)(st->stage_bytes / row);
    if (rows < 1) rows = 1;
    const X *h = (const X *)(void *)st->h_stage;
    for (int64_t r0 = 0; r0 < d->BT; r0 += rows) {
        int64_t n = d->BT - r0 < rows ? d->BT - r0 : rows;
        GPT2RT__CU_CK(cudaMemcpy2DAsync(st->h_stage, row, (const X *)st->dev->logits + r0 * d->Vp, (size_t)d->Vp * sizeof(X),
                                        row, (size_t)n, cudaMemcpyDeviceToHost, st->stream));
        GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
        for (int64_t i = 0; i < n * d->V; i++) dst[r0 * d->V + i] = gpt2rt__cu_host_f(h[i]);
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_logits(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float *dst, int64_t count) {
    st->phase = "logits";
    st->layer = -1;
    if (!dst || count != st->d.BT * st->d.V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt__cu_logits: dst holds %lld floats, needs B*T*vocab "
                            "= %lld", (long long)count, (long long)(st->d.BT * st->d.V));
    if (st->dlogits_ready)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt__cu_logits: the forward fused the classifier's backward "
                            "(dlogits_in_forward): the logits are gone");
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_logits_t<float>(ctx, st, dst);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_logits_t<__nv_bfloat16>(ctx, st, dst);
    return gpt2rt__cu_logits_t<__half>(ctx, st, dst);
}

/* ---- generation: the decode pass (11.7 through the table's decode entry) ----
   gpt2rt__cpu_decode_pass's steps on the device, with 8.2's ops and 8.4's products on the
   pass's N rows: the ids (host kv: tok, row, pos) up, x (N,C) = the embeddings, every
   layer (its keys and values into the cache, attention over it), then ln_f and the tied
   head only on the M rows kv->sel lists, and their logits (M,V) back to the host's kv
   (fp32, rows Vp apart), the one wait of a pass. dk: the device's kv (st->dev's, carved by
   gpt2rt__layout), its activations floatX. */
template <typename X>
static gpt2rt_result gpt2rt__cu_decode_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, int64_t N, int64_t M) {
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__kv *hk = &ctx->kv, *dk = &st->dev->kv;
    const int64_t C = d->C, cache = d->KB * d->KS * C; /* one layer's keys */
    const cudaDataType_t t = gpt2rt__cu_dtype<X>::value;
    cudaStream_t s = st->stream;
    gpt2rt__cu_blas *bl = &st->blas;
    char *me = st->mm_err;
    const size_t mc = sizeof st->mm_err;
    X *x = (X *)(void *)dk->x, *ln = (X *)(void *)dk->ln, *qkv = (X *)(void *)dk->qkv, *atty = (X *)(void *)dk->atty;
    X *proj = (X *)(void *)dk->proj, *fch = (X *)(void *)dk->fch, *logits = (X *)(void *)dk->logits;
    st->layer = -1;
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->tok, hk->tok, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->row, hk->row, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(dk->pos, hk->pos, (size_t)N * 4, cudaMemcpyHostToDevice, s));
    const X *wte = gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE));
    GPT2RT__CU_CK(gpt2rt__cu_decode_embed<X>(x, dk->tok, dk->pos, wte,
                                             gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__WPE)), N, C, s));
    for (int64_t l = 0; l < d->L; l++) { /* gpt2rt__cpu_layer_decode's steps */
        gpt2rt__cu_lw<X> p = gpt2rt__cu_lweights<X>(ctx, st, l);
        st->layer = l;
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, x, p.ln1w, p.ln1b, N, C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, qkv, NULL, ln, p.qkvw, p.qkvb, N, C, 3 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_attention_cached<X>(atty, qkv, (X *)(void *)dk->k + l * cache,
                                                     (X *)(void *)dk->v + l * cache, dk->row, dk->pos, N, d->KS, C,
                                                     d->NH, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, proj, NULL, atty, p.projw, p.projb, N, C, C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(x, x, proj, N * C, s));
        GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, x, p.ln2w, p.ln2b, N, C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, fch, NULL, ln, p.fcw, p.fcb, N, C, 4 * C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_gelu_forward<X>(fch, fch, N * 4 * C, s));
        GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, proj, NULL, fch, p.fcprojw, p.fcprojb, N, 4 * C, C, me, mc));
        GPT2RT__CU_CK(gpt2rt__cu_residual_forward<X>(x, x, proj, N * C, s));
    }
    st->layer = -1;
    for (int64_t m = 0; m < M; m++) /* the sampled rows' states side by side: ln_f and the head see M rows */
        GPT2RT__CU_CK(cudaMemcpyAsync(proj + m * C, x + (int64_t)hk->sel[m] * C, (size_t)C * sizeof(X),
                                      cudaMemcpyDeviceToDevice, s));
    GPT2RT__CU_CK(gpt2rt__cu_layernorm_forward<X>(ln, dk->ln_mean, dk->ln_rstd, proj,
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFW)),
                                                  gpt2rt__cu_weight<X>(st, gpt2rt__model_tensor(ctx, GPT2RT__LNFB)), M,
                                                  C, s));
    GPT2RT__CU_MM(gpt2rt__cu_matmul_forward(bl, t, logits, NULL, ln, wte, NULL, M, C, d->Vp, me, mc));
    /* the logits through the pinned stage, as many rows at a time as it holds */
    const size_t row = (size_t)d->V * sizeof(X);
    int64_t rows = (int64_t)(st->stage_bytes / row);
    const X *h = (const X *)(void *)st->h_stage;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
        int64_t n = M - r0 < rows ? M - r0 : rows;
        GPT2RT__CU_CK(cudaMemcpy2DAsync(st->h_stage, row, logits + r0 * d->Vp, (size_t)d->Vp * sizeof(X), row,
                                        (size_t)n, cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
        for (int64_t i = 0; i < n; i++)
            for (int64_t v = 0; v < d->V; v++) hk->logits[(r0 + i) * d->Vp + v] = gpt2rt__cu_host_f(h[i * d->V + v]);
    }
    if (!M) GPT2RT__CU_CK(cudaStreamSynchronize(s)); /* the ids' pinned buffers are free again */
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_decode(gpt2rt_ctx *ctx, int64_t N, int64_t M) {
    gpt2rt__cu_state *st = ctx->cu;
    if (!st || !st->h_kv)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_generate: this CUDA context has no device KV cache "
                            "(kv_batch = %lld, one device only)", (long long)ctx->d.KB);
    st->phase = "decode";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_decode_t<float>(ctx, st, N, M);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_decode_t<__nv_bfloat16>(ctx, st, N, M);
    return gpt2rt__cu_decode_t<__half>(ctx, st, N, M);
}

#undef GPT2RT__CU_MM

/* ---- the public calls on a CUDA context: the host keeps the fp32 weights (ctx->params,
   every tensor by off), the source of truth for loads, saves and parameter calls; the
   rest lives on the device. The training calls reach the driver directly. ---- */

static void gpt2rt__init_params(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__fail_oom(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, uint64_t budget,
                                      uint64_t free_bytes, const char *what, int allocation_failed);
static double gpt2rt__opt_grad_unscale(const gpt2rt_ctx *ctx);

/* a CUDA context's host side: the whole model's parameter table and its fp32 weights
   (the only host arena; gpt2rt_free frees it), initialised */
static gpt2rt_result gpt2rt__cu_host_alloc(gpt2rt_ctx *ctx) {
    ctx->n_tensors = gpt2rt__param_table(&ctx->d, NULL, &ctx->n_params, &ctx->n_train);
    ctx->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                   GPT2RT_MEM_BOOKKEEPING);
    if (!ctx->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: parameter table");
    gpt2rt__param_table(&ctx->d, ctx->tensors, NULL, NULL);
    size_t pb = (size_t)ctx->n_params * sizeof(float);
    ctx->params = (float *)gpt2rt__alloc(&ctx->cfg, pb, GPT2RT_MEM_WEIGHTS);
    if (!ctx->params)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: %zu bytes of host memory for the fp32 "
                            "weights", pb);
    ctx->arena[GPT2RT_MEM_WEIGHTS] = ctx->params; /* gpt2rt_free frees it */
    ctx->arena_bytes[GPT2RT_MEM_WEIGHTS] = pb;
    gpt2rt__init_params(ctx);
    return GPT2RT_OK;
}

/* gpt2rt_create, backend CUDA (ctx->cfg resolved): the budget and the
   device's free memory against the plan before anything is allocated (the table and the
   advisor's suggestion when it does not fit), the host weights, initialised, then the
   device state, which uploads them */
static gpt2rt_result gpt2rt__cu_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(ctx->cfg.device_ids[0]) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        (void)cudaGetLastError(); /* no device: gpt2rt__cu_create says so */
        fr = 0;
    }
    if (ctx->cfg.memory_budget && plan->total[0] > ctx->cfg.memory_budget)
        return gpt2rt__fail_oom(ctx, plan, ctx->cfg.memory_budget, fr, NULL, 0);
    if (fr && plan->total[0] > (uint64_t)fr) return gpt2rt__fail_oom(ctx, plan, fr, fr, NULL, 0);
    gpt2rt_result hr = gpt2rt__cu_host_alloc(ctx);
    if (hr != GPT2RT_OK) return hr;
    char err[2048];
    gpt2rt_result r = gpt2rt__cu_create(ctx, &ctx->cu, err, sizeof err);
    if (r == GPT2RT_ERR_OUT_OF_MEMORY) {
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { (void)cudaGetLastError(); fr = 0; }
        return gpt2rt__fail_oom(ctx, plan, 0, fr, err, 1);
    }
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", err);
    if (ctx->cu->h_kv) /* 11.7 fills the pass's ids and samples from the logits here */
        gpt2rt__kv_layout(&ctx->cu->d, 0, 1, ctx->cu->h_kv, &ctx->kv, GPT2RT__KV_HOST); /* the dims it was sized by */
    return GPT2RT_OK;
}

/* ctx->params caught up with the device (updates move the device copy only); data
   parallel with ZeRO-1 in bf16/fp16: every rank's master holds its shard of them */
static gpt2rt_result gpt2rt__cu_host_weights(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    if (!st->host_stale) return GPT2RT_OK;
    for (int r = 1; r < ctx->n_ranks && st->master && st->opt_hi - st->opt_lo < st->n_train; r++) {
        gpt2rt_result res = gpt2rt__cu_download_params(ctx, ctx->ranks[r]->cu);
        if (res != GPT2RT_OK) return res;
    }
    return gpt2rt__cu_download_params(ctx, st);
}

/* gpt2rt_param_read on a CUDA context (name and count checked): the value from the host
   copy, the gradient and the moments from the device */
static gpt2rt_result gpt2rt__cu_param_read(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const gpt2rt__tensor *t,
                                           gpt2rt_param_what what, float *dst) {
    if (what != GPT2RT_PARAM_VALUE && what != GPT2RT_PARAM_GRAD && what != GPT2RT_PARAM_ADAM_M &&
        what != GPT2RT_PARAM_ADAM_V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: what = %d", (int)what);
    if (what != GPT2RT_PARAM_VALUE && t->goff < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: '%s' is frozen (group 0x%x): it "
                            "has no gradient and no moments", t->name, t->group);
    gpt2rt_result r;
    if (what == GPT2RT_PARAM_VALUE) {
        if ((r = gpt2rt__cu_host_weights(ctx, st)) != GPT2RT_OK) return r;
        gpt2rt__param_out(t, ctx->params + t->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    size_t n = (size_t)(t->rows * t->cols);
    float *tmp = (float *)gpt2rt__alloc(&ctx->cfg, n * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %zu floats", n);
    r = gpt2rt__cu_read_tensor(ctx, st, t, what, tmp);
    /* data parallel with ZeRO-1: each rank holds the moments of its shard */
    for (int i = 1; i < ctx->n_ranks && r == GPT2RT_OK && what != GPT2RT_PARAM_GRAD && ctx->d.shards > 1; i++)
        if ((r = gpt2rt__cu_read_tensor(ctx->ranks[i], ctx->ranks[i]->cu, t, what, tmp)) != GPT2RT_OK) {
            char msg[sizeof ctx->error];
            memcpy(msg, ctx->ranks[i]->error, sizeof msg);
            gpt2rt__fail(ctx, r, "%s", msg);
        }
    /* the device's raw gradients also carry the loss scale; data parallel, once summed over
       the ranks: of every rank's targets (as the CPU's gpt2rt_param_read) */
    double unscale = gpt2rt__opt_grad_unscale(ctx);
    if (ctx->n_ranks > 1 && ctx->dp_reduced) {
        int64_t all = 0;
        for (int i = 0; i < ctx->n_ranks; i++) all += ctx->ranks[i]->acc_targets;
        unscale = all ? (double)(ctx->d.n_out * ctx->cfg.grad_accum) / (double)all : 0.0;
    }
    float k = what == GPT2RT_PARAM_GRAD ? (float)(unscale / (double)st->loss_scale) : 1.0f;
    if (r == GPT2RT_OK) gpt2rt__param_out(t, tmp, k, dst);
    gpt2rt__free(&ctx->cfg, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r;
}


/* ==== 8.6 Device communicators: NCCL, loopback; data parallel on the device ==== */
/* CUDA data parallel in one process (parallel = DATA, backend CUDA): rank r is a context
   of its own (rank 0 the application's, ranks 1.. made by gpt2rt__dp_open, 10.1) with its
   own device state on device_ids[r], run by one host thread as on the CPU (10.1), each
   rank the one-device forward and backward on its rows. Two communicators per rank:
   - the host one, ctx->comm: the rank threads' group of 1.4, for the few doubles the
     update agrees on (loss, counted targets, squared gradient norm: summed in rank order
     on the host) and to end every rank's waits when one fails;
   - the device one, st->dcomm, for the fp32 gradient and weight buffers: the 1.4
     interface (float buffers, the same shards) extended by a stream and wait() (1.2):
     a collective is enqueued on the communicator's own stream and returns. Two kinds:
       NCCL (GPT2RT_NCCL builds, linked with -lnccl) where the devices differ;
       loopback (every build; the test mode of one GPU named twice, allow_shared_device):
       the ranks are this process's threads, each publishes its device pointer, and
       rank r sums shard r over every rank's buffer in rank order 0, 1, ..., N-1 with a
       kernel (same device, or peer access), then the shards are copied to every rank:
       every rank gets the same bits, run to run, the CPU ranks' order of sums.
   The backward's last micro-step hands each layer's gradients to the device
   communicator as soon as the layer is done (gpt2rt__dp_bucket_ready, 10.1): the
   compute stream records ev_grads, the communicator's stream waits for it, and the
   reduction runs there while the compute stream goes on with the layers below. The
   update waits for the communicator (wait(), at most the timeout), orders the compute
   stream after it (ev_comm), and takes the norm of its shard of the summed gradient;
   the doubles are summed on the host, so every rank takes the same decision (clip,
   skip, fp16 loss scale). ZeRO-1 (shard_optimizer): one reduce-scatter after the
   backward, AdamW of the own shard (master weights and moments sized for it), then the
   fp32 weights are all-gathered through the gradient buffer and every floatX working
   copy is refreshed from them (the same rounding as the update's: bitwise the
   unsharded weights). NCCL does not sum in rank order: with it, data parallel equals
   one device within fp32 reassociation only, as with the loopback.
   COMPILED, NEVER RUN: kernels/data_parallel.cu checks it on a GPU (make test-gpu). */

/* ---- kernels ---- */

typedef struct gpt2rt__cu_ptrs { const float *p[GPT2RT_MAX_DEVICES]; } gpt2rt__cu_ptrs;

/* out[i] = in.p[0][i] + in.p[1][i] + ... + in.p[n_in-1][i], left to right (the CPU threads'
   order); out may be one of the inputs (each element is read before it is written) */
__global__ void gpt2rt__cuk_rank_sum(float *out, gpt2rt__cu_ptrs in, int n_in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = in.p[0][i];
        for (int k = 1; k < n_in; k++) s = __fadd_rn(s, in.p[k][i]);
        out[i] = s;
    }
}
static cudaError_t gpt2rt__cu_rank_sum(float *out, const gpt2rt__cu_ptrs *in, int n_in, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
    GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, s, gpt2rt__cuk_rank_sum)(out, *in, n_in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) floatX = in (n) fp32, rounded as the AdamW kernel rounds its floatX copy */
template <typename X>
__global__ void gpt2rt__cuk_cast(X *out, const float *in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gpt2rt__cu_to<X>(in[i]);
}
template <typename X>
static cudaError_t gpt2rt__cu_cast(X *out, const float *in, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
    GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, s, gpt2rt__cuk_cast<X>)(out, in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- the ranks' device communicators ---- */

/* every rank's device communicator (gpt2rt_ctx.dgroup of rank 0); the loopback's state */
typedef struct gpt2rt__dcomms {
    int n, nccl;
    gpt2rt__comm comms[GPT2RT_MAX_DEVICES]; /* rank r's */
    void *host;                             /* the rank threads' gpt2rt__comm_group (1.4) */
    int device[GPT2RT_MAX_DEVICES];
    cudaStream_t stream[GPT2RT_MAX_DEVICES];       /* loopback: rank r's communicator stream */
    cudaEvent_t ev[GPT2RT_MAX_DEVICES][3];         /* loopback: rank r's point in a phase */
    int made[GPT2RT_MAX_DEVICES];                  /* loopback: stream and events created */
} gpt2rt__dcomms;

#ifdef GPT2RT__COMM_THREADS
/* a rank thread of the group failed (the host group of 1.4): the device waits stop */
static int gpt2rt__dcomm_peer_failed(void *host) {
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)host;
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    int f = g->failed;
    pthread_mutex_unlock(&g->mu);
    return f;
}

/* Loopback. A collective is a few phases; each ends with gpt2rt__loop_sync: the rank
   records its phase event on its stream, waits for every rank thread at the host
   group's barrier, then makes its stream wait for every other rank's event. So a rank
   reads another's buffer only after that rank's stream reached the point where the
   buffer is ready, and changes its own only after every reader is done. The event of
   a phase is ev[rank][gen % 3], gen the host barrier's generation (the same on every
   rank; it cannot move before this rank arrives): an event is recorded again only
   two barriers later, when every rank has issued its waits for the earlier record.
   Every event waited on was recorded before the barrier, so the device never waits
   for something no one will do: a failed rank ends the host barrier, not the device. */
static gpt2rt_result gpt2rt__loop_fail(gpt2rt__comm *c, cudaError_t e, const char *what) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    snprintf(c->err, sizeof c->err, "loopback %s on rank %d (device %d): %s", what, c->rank, lp->device[c->rank],
             cudaGetErrorString(e));
    gpt2rt__comm_threads_fail(&((gpt2rt__comm_group *)lp->host)->comms[c->rank]);
    return GPT2RT_ERR_UNAVAILABLE;
}

static gpt2rt_result gpt2rt__loop_sync(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int r = c->rank, p = (int)(g->gen % 3);
    cudaError_t e = cudaEventRecord(lp->ev[r][p], lp->stream[r]);
    if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaEventRecord");
    gpt2rt_result res = gpt2rt__comm_threads_wait(&g->comms[r]);
    if (res != GPT2RT_OK) { snprintf(c->err, sizeof c->err, "%s", g->comms[r].err); return res; }
    for (int k = 0; k < lp->n; k++)
        if (k != r && (e = cudaStreamWaitEvent(lp->stream[r], lp->ev[k][p], 0)) != cudaSuccess)
            return gpt2rt__loop_fail(c, e, "cudaStreamWaitEvent");
    return GPT2RT_OK;
}

/* publish buf (rank order is the slot order), set the device, then the first phase */
static gpt2rt_result gpt2rt__loop_begin(gpt2rt__comm *c, void *buf) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    ((gpt2rt__comm_group *)lp->host)->bufs[c->rank] = buf;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaSetDevice");
    return gpt2rt__loop_sync(c);
}

/* shard c->rank of buf := the sum over the ranks' bufs, in rank order */
static gpt2rt_result gpt2rt__loop_sum_own(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int64_t lo = gpt2rt__shard_lo(n, c->size, c->rank), hi = gpt2rt__shard_lo(n, c->size, c->rank + 1);
    gpt2rt__cu_ptrs in;
    memset(&in, 0, sizeof in);
    for (int k = 0; k < lp->n; k++) in.p[k] = (const float *)g->bufs[k] + lo;
    cudaError_t e = gpt2rt__cu_rank_sum(buf + lo, &in, lp->n, hi - lo, lp->stream[c->rank]);
    return e == cudaSuccess ? GPT2RT_OK : gpt2rt__loop_fail(c, e, "the rank-order sum kernel");
}

/* every shard but c->rank's from the rank that owns it */
static gpt2rt_result gpt2rt__loop_copy_others(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)lp->host;
    int r = c->rank;
    for (int k = 0; k < lp->n; k++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, k), hi = gpt2rt__shard_lo(n, c->size, k + 1);
        if (k == r || hi <= lo) continue;
        cudaError_t e = cudaMemcpyPeerAsync(buf + lo, lp->device[r], (const float *)g->bufs[k] + lo, lp->device[k],
                                            (size_t)(hi - lo) * sizeof(float), lp->stream[r]);
        if (e != cudaSuccess) return gpt2rt__loop_fail(c, e, "cudaMemcpyPeerAsync");
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__loop_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sum_own(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r; /* no rank changes its buffer before the others read it */
}
static gpt2rt_result gpt2rt__loop_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_copy_others(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
/* the sums, then (once every rank's shard is summed) the others' shards */
static gpt2rt_result gpt2rt__loop_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sum_own(c, buf, n);
    if (r == GPT2RT_OK) r = gpt2rt__loop_sync(c);
    if (r == GPT2RT_OK) r = gpt2rt__loop_copy_others(c, buf, n);
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
static gpt2rt_result gpt2rt__loop_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    if (root < 0 || root >= c->size) {
        snprintf(c->err, sizeof c->err, "broadcast: root = %d must lie in [0, size = %d)", root, c->size);
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__loop_begin(c, buf);
    if (r == GPT2RT_OK && c->rank != root && bytes) {
        cudaError_t e = cudaMemcpyPeerAsync(buf, lp->device[c->rank], ((gpt2rt__comm_group *)lp->host)->bufs[root],
                                            lp->device[root], bytes, lp->stream[c->rank]);
        if (e != cudaSuccess) r = gpt2rt__loop_fail(c, e, "cudaMemcpyPeerAsync");
    }
    return r == GPT2RT_OK ? gpt2rt__loop_sync(c) : r;
}
static gpt2rt_result gpt2rt__loop_barrier(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    return e == cudaSuccess ? gpt2rt__loop_sync(c) : gpt2rt__loop_fail(c, e, "cudaSetDevice");
}
/* nothing here can hang (every event waited on was recorded): a plain synchronize */
static gpt2rt_result gpt2rt__loop_wait(gpt2rt__comm *c) {
    gpt2rt__dcomms *lp = (gpt2rt__dcomms *)c->impl;
    cudaError_t e = cudaSetDevice(lp->device[c->rank]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(lp->stream[c->rank]);
    return e == cudaSuccess ? GPT2RT_OK : gpt2rt__loop_fail(c, e, "waiting for the communicator stream");
}
static void gpt2rt__loop_destroy(gpt2rt__comm *c) { (void)c; } /* gpt2rt__dcomms_free frees the whole group */

/* the loopback communicators of lp->n ranks on lp->device[], over the rank threads' group
   host; devices that differ need peer access (else NCCL: GPT2RT_NCCL) */
static gpt2rt_result gpt2rt__loop_open(gpt2rt__dcomms *lp, void *host, char *err, size_t cap) {
    lp->host = host;
    for (int r = 0; r < lp->n; r++) {
        cudaError_t e = cudaSetDevice(lp->device[r]);
        for (int k = 0; k < lp->n && e == cudaSuccess; k++) {
            if (lp->device[k] == lp->device[r]) continue;
            int can = 0;
            e = cudaDeviceCanAccessPeer(&can, lp->device[r], lp->device[k]);
            if (e == cudaSuccess && !can) {
                snprintf(err, cap, "data parallel over devices %d and %d: the loopback reduction needs peer access "
                         "between them, which they lack; build with -DGPT2RT_NCCL (link -lnccl) to reduce with NCCL",
                         lp->device[r], lp->device[k]);
                return GPT2RT_ERR_UNAVAILABLE;
            }
            if (e == cudaSuccess && (e = cudaDeviceEnablePeerAccess(lp->device[k], 0)) == cudaErrorPeerAccessAlreadyEnabled) {
                (void)cudaGetLastError();
                e = cudaSuccess;
            }
        }
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&lp->stream[r], cudaStreamNonBlocking);
        for (int p = 0; p < 3 && e == cudaSuccess; p++) {
            e = cudaEventCreateWithFlags(&lp->ev[r][p], cudaEventDisableTiming);
            if (e != cudaSuccess) { /* undo this rank's part: made[r] stays 0 */
                for (int q = 0; q < p; q++) (void)cudaEventDestroy(lp->ev[r][q]);
                (void)cudaStreamDestroy(lp->stream[r]);
            }
        }
        if (e != cudaSuccess) {
            snprintf(err, cap, "loopback communicator of rank %d on device %d: %s", r, lp->device[r], cudaGetErrorString(e));
            (void)cudaGetLastError();
            return GPT2RT_ERR_UNAVAILABLE;
        }
        lp->made[r] = 1;
        gpt2rt__comm *c = &lp->comms[r];
        memset(c, 0, sizeof *c);
        c->rank = r; c->size = lp->n; c->impl = lp;
        c->all_reduce = gpt2rt__loop_all_reduce;
        c->reduce_scatter = gpt2rt__loop_reduce_scatter;
        c->all_gather = gpt2rt__loop_all_gather;
        c->broadcast = gpt2rt__loop_broadcast;
        c->barrier = gpt2rt__loop_barrier;
        c->destroy = gpt2rt__loop_destroy;
        c->stream = (void *)lp->stream[r];
        c->wait = gpt2rt__loop_wait;
    }
    return GPT2RT_OK;
}
#endif /* GPT2RT__COMM_THREADS */

/* NCCL (GPT2RT_NCCL builds, linked with -lnccl): one rank per device, the ids exchanged
   by the rendezvous across processes (10.3; not used yet: multi-process CUDA runs are
   refused) or drawn here for the ranks of one process. NCCL's sums give every rank the
   same bits and are deterministic run to run on one topology, but not in rank order.
   The communicator is non-blocking (ncclConfig_t.blocking = 0): initialisation, every
   enqueue and wait() are polled against timeout_s and end early when a rank thread of
   this process failed; either aborts the communicator (unusable afterwards), never a
   wait forever. NCCL refuses one GPU twice: the test mode uses the loopback. */
#ifdef GPT2RT_NCCL
static gpt2rt_result gpt2rt__rdv_exchange(const gpt2rt_config *c, unsigned char *id, char *err, size_t cap);

typedef struct gpt2rt__nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    float *one;       /* a device float the barrier reduces */
    double timeout_s;
    int device;
    void *peers;      /* the rank threads' gpt2rt__comm_group when the ranks share this process, or NULL */
} gpt2rt__nccl;

/* the advice every NCCL failure ends with */
#define GPT2RT__NCCL_HINT "(NCCL_DEBUG=INFO shows why; NCCL_P2P_DISABLE=1 helps where peer-to-peer copies hang, " \
                          "e.g. GeForce cards or a virtualised PCIe)"

static int gpt2rt__nccl_peers_failed(const gpt2rt__nccl *m) {
#ifdef GPT2RT__COMM_THREADS
    return gpt2rt__dcomm_peer_failed(m->peers);
#else
    (void)m;
    return 0;
#endif
}

/* Poll the communicator after a call that returned `started`: until NCCL has taken it
   (finish = 0: enqueued), or also until its stream has run it (finish = 1), at most
   timeout_s. A failure, a hang or a failed rank thread aborts the communicator. */
static gpt2rt_result gpt2rt__nccl_poll(gpt2rt__comm *c, ncclResult_t started, const char *what, int finish) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    ncclResult_t e = started;
    for (;;) {
        if (e == ncclSuccess) {
            if (!finish) return GPT2RT_OK;
            cudaError_t q = cudaStreamQuery(m->stream);
            if (q == cudaSuccess) return GPT2RT_OK;
            if (q != cudaErrorNotReady) {
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d: %s", what, c->rank, cudaGetErrorString(q));
                return GPT2RT_ERR_UNAVAILABLE;
            }
        } else if (e != ncclInProgress) {
            snprintf(c->err, sizeof c->err, "NCCL %s on rank %d failed: %s %s", what, c->rank, ncclGetErrorString(e),
                     GPT2RT__NCCL_HINT);
            (void)ncclCommAbort(m->comm);
            m->comm = NULL;
            return GPT2RT_ERR_IO;
        }
        int peer = gpt2rt__nccl_peers_failed(m);
        if (peer || gpt2rt__now() > deadline) {
            if (peer)
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d stopped: rank %d failed", what, c->rank, peer - 1);
            else
                snprintf(c->err, sizeof c->err, "NCCL %s on rank %d did not finish within %g s: another rank failed "
                         "or stopped %s", what, c->rank, m->timeout_s, GPT2RT__NCCL_HINT);
            (void)ncclCommAbort(m->comm);
            m->comm = NULL;
            return GPT2RT_ERR_IO;
        }
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(m->comm, &a) != ncclSuccess) a = ncclInternalError;
        e = a;
    }
}

#define GPT2RT__NCCL_LIVE(c, m) do { if (!(m)->comm) { \
        snprintf((c)->err, sizeof (c)->err, "NCCL communicator aborted earlier"); return GPT2RT_ERR_STATE; } } while (0)

static gpt2rt_result gpt2rt__nccl_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    return gpt2rt__nccl_poll(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum, m->comm, m->stream),
                             "all_reduce", 0);
}

/* in place: ncclReduceScatter takes one count a rank, so the shards must be equal, and
   ZeRO-1 pads its gradient to make them so (gpt2rt__shard_padded); unequal ones are
   refused rather than silently all-reduced (twice the traffic) */
static gpt2rt_result gpt2rt__nccl_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    int64_t per = gpt2rt__shard_lo(n, c->size, 1);
    GPT2RT__NCCL_LIVE(c, m);
    if (per * c->size != n) {
        snprintf(c->err, sizeof c->err, "reduce_scatter: %lld floats are not %d equal shards of %lld (pad to %lld)",
                 (long long)n, c->size, (long long)per, (long long)gpt2rt__shard_padded(n, c->size));
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    return gpt2rt__nccl_poll(c, ncclReduceScatter(buf, buf + per * c->rank, (size_t)per, ncclFloat, ncclSum, m->comm,
                                                  m->stream), "reduce_scatter", 0);
}

static gpt2rt_result gpt2rt__nccl_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    int64_t per = gpt2rt__shard_lo(n, c->size, 1);
    if (per * c->size == n)
        return gpt2rt__nccl_poll(c, ncclAllGather(buf + per * c->rank, buf, (size_t)per, ncclFloat, m->comm, m->stream),
                                 "all_gather", 0);
    ncclResult_t e = ncclGroupStart(); /* unequal shards: one broadcast each, as one group */
    for (int r = 0; r < c->size && (e == ncclSuccess || e == ncclInProgress); r++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, r), hi = gpt2rt__shard_lo(n, c->size, r + 1);
        e = ncclBroadcast(buf + lo, buf + lo, (size_t)(hi - lo), ncclFloat, r, m->comm, m->stream);
    }
    ncclResult_t g = ncclGroupEnd();
    return gpt2rt__nccl_poll(c, e != ncclSuccess && e != ncclInProgress ? e : g, "all_gather", 0);
}

static gpt2rt_result gpt2rt__nccl_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    GPT2RT__NCCL_LIVE(c, m);
    return gpt2rt__nccl_poll(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, m->comm, m->stream), "broadcast", 0);
}

static gpt2rt_result gpt2rt__nccl_wait(gpt2rt__comm *c) {
    GPT2RT__NCCL_LIVE(c, (gpt2rt__nccl *)c->impl);
    return gpt2rt__nccl_poll(c, ncclSuccess, "collective", 1);
}

static gpt2rt_result gpt2rt__nccl_barrier(gpt2rt__comm *c) {
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    gpt2rt_result r = gpt2rt__nccl_all_reduce(c, m->one, 1);
    return r == GPT2RT_OK ? gpt2rt__nccl_wait(c) : r;
}

static void gpt2rt__nccl_destroy(gpt2rt__comm *c) {
    if (!c || !c->impl) return;
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    (void)cudaSetDevice(m->device);
    if (m->comm) (void)ncclCommDestroy(m->comm);
    if (m->stream) (void)cudaStreamDestroy(m->stream);
    if (m->one) (void)cudaFree(m->one);
    free(m);
    c->impl = NULL;
}

/* rank 0 of the run draws the id, the rendezvous takes it to every process: id is
   NCCL's ncclUniqueId (128 bytes) */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__nccl_id(const gpt2rt_config *cfg, ncclUniqueId *id, char *err,
                                                          size_t cap) {
    unsigned char bytes[GPT2RT__RDV_ID_BYTES];
    memset(bytes, 0, sizeof bytes);
    if (cfg->rank == 0) {
        ncclResult_t e = ncclGetUniqueId(id);
        if (e != ncclSuccess) {
            snprintf(err, cap, "ncclGetUniqueId failed: %s %s", ncclGetErrorString(e), GPT2RT__NCCL_HINT);
            return GPT2RT_ERR_UNAVAILABLE;
        }
        memcpy(bytes, id, sizeof *id);
    }
    gpt2rt_result r = gpt2rt__rdv_exchange(cfg, bytes, err, cap);
    if (r == GPT2RT_OK) memcpy(id, bytes, sizeof *id);
    return r;
}

/* c := rank `rank` of `nranks` on `device`, not yet joined: its stream and barrier float */
static gpt2rt_result gpt2rt__nccl_make(int nranks, int rank, int device, double timeout_s, void *peers, gpt2rt__comm *c,
                                       char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    gpt2rt__nccl *m = (gpt2rt__nccl *)calloc(1, sizeof *m);
    if (!m) { snprintf(err, cap, "NCCL communicator: %zu bytes", sizeof *m); return GPT2RT_ERR_OUT_OF_MEMORY; }
    m->timeout_s = timeout_s;
    m->device = device;
    m->peers = peers;
    c->rank = rank; c->size = nranks; c->impl = m;
    c->all_reduce = gpt2rt__nccl_all_reduce;
    c->reduce_scatter = gpt2rt__nccl_reduce_scatter;
    c->all_gather = gpt2rt__nccl_all_gather;
    c->broadcast = gpt2rt__nccl_broadcast;
    c->barrier = gpt2rt__nccl_barrier;
    c->destroy = gpt2rt__nccl_destroy;
    c->wait = gpt2rt__nccl_wait;
    cudaError_t ce = cudaSetDevice(device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&m->one, sizeof(float));
    /* the barrier's all-reduce reads it: a defined value (0, whose sums stay 0), not
       whatever the allocation held */
    if (ce == cudaSuccess) ce = cudaMemset(m->one, 0, sizeof(float));
    if (ce != cudaSuccess) {
        snprintf(err, cap, "NCCL communicator on device %d: %s", device, cudaGetErrorString(ce));
        (void)cudaGetLastError();
        gpt2rt__nccl_destroy(c);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    c->stream = (void *)m->stream;
    return GPT2RT_OK;
}

/* c := rank `rank` of `nranks` on CUDA device `device` (ncclCommInitRank's arguments,
   non-blocking, polled at most timeout_s): one rank per process */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__nccl_comm(ncclUniqueId id, int nranks, int rank, int device,
                                                            double timeout_s, gpt2rt__comm *c, char *err,
                                                            size_t cap) {
    gpt2rt_result r = gpt2rt__nccl_make(nranks, rank, device, timeout_s, NULL, c, err, cap);
    if (r != GPT2RT_OK) return r;
    gpt2rt__nccl *m = (gpt2rt__nccl *)c->impl;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t e = ncclCommInitRankConfig(&m->comm, nranks, id, rank, &config);
    if (e != ncclSuccess && e != ncclInProgress) {
        snprintf(err, cap, "ncclCommInitRank (rank %d of %d, device %d) failed: %s %s", rank, nranks, device,
                 ncclGetErrorString(e), GPT2RT__NCCL_HINT);
        if (m->comm) (void)ncclCommAbort(m->comm);
        m->comm = NULL;
        gpt2rt__nccl_destroy(c);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    r = gpt2rt__nccl_poll(c, e, "initialisation (ncclCommInitRank)", 1);
    if (r != GPT2RT_OK) {
        snprintf(err, cap, "%s", c->err);
        gpt2rt__nccl_destroy(c);
    }
    return r;
}

/* comms[0..n) := the n ranks of this process on devices[] (distinct), initialised from
   one thread as one NCCL group; peers: the rank threads' host group (or NULL) */
static gpt2rt_result gpt2rt__nccl_ranks(int n, const int *devices, double timeout_s, void *peers, gpt2rt__comm *comms,
                                        char *err, size_t cap) {
    ncclUniqueId id;
    ncclResult_t e = ncclGetUniqueId(&id);
    if (e != ncclSuccess) {
        snprintf(err, cap, "ncclGetUniqueId failed: %s %s", ncclGetErrorString(e), GPT2RT__NCCL_HINT);
        return GPT2RT_ERR_UNAVAILABLE;
    }
    int made = 0;
    gpt2rt_result r = GPT2RT_OK;
    for (; made < n && r == GPT2RT_OK; made++)
        if ((r = gpt2rt__nccl_make(n, made, devices[made], timeout_s, peers, &comms[made], err, cap)) != GPT2RT_OK) break;
    if (r == GPT2RT_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        e = ncclGroupStart();
        for (int k = 0; k < n && (e == ncclSuccess || e == ncclInProgress); k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            (void)cudaSetDevice(m->device);
            e = ncclCommInitRankConfig(&m->comm, n, id, k, &config);
        }
        ncclResult_t g = ncclGroupEnd();
        if (e == ncclSuccess || e == ncclInProgress) e = g;
        if (e != ncclSuccess && e != ncclInProgress) {
            snprintf(err, cap, "ncclCommInitRank of %d ranks in one process failed: %s %s", n, ncclGetErrorString(e),
                     GPT2RT__NCCL_HINT);
            r = GPT2RT_ERR_UNAVAILABLE;
        }
        for (int k = 0; k < n && r == GPT2RT_OK; k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            if (!m->comm) {
                snprintf(err, cap, "ncclCommInitRank gave rank %d of %d no communicator %s", k, n, GPT2RT__NCCL_HINT);
                r = GPT2RT_ERR_UNAVAILABLE;
            } else if ((r = gpt2rt__nccl_poll(&comms[k], ncclInProgress, "initialisation (ncclCommInitRank)", 1)) != GPT2RT_OK)
                snprintf(err, cap, "%s", comms[k].err);
        }
    }
    if (r != GPT2RT_OK)
        for (int k = 0; k < made && k < n; k++) {
            gpt2rt__nccl *m = (gpt2rt__nccl *)comms[k].impl;
            if (m && m->comm) { (void)ncclCommAbort(m->comm); m->comm = NULL; }
            gpt2rt__nccl_destroy(&comms[k]);
        }
    return r;
}
#undef GPT2RT__NCCL_LIVE
#endif /* GPT2RT_NCCL */

/* ---- data parallel on the device: opening, the buckets, the update's agreement ---- */

static void gpt2rt__dcomms_free(gpt2rt__dcomms *dc) {
    if (!dc) return;
    for (int r = 0; r < dc->n; r++) {
        if (dc->nccl) { if (dc->comms[r].destroy) dc->comms[r].destroy(&dc->comms[r]); continue; }
        if (!dc->made[r]) continue;
        (void)cudaSetDevice(dc->device[r]);
        (void)cudaStreamSynchronize(dc->stream[r]);
        for (int p = 0; p < 3; p++) (void)cudaEventDestroy(dc->ev[r][p]);
        (void)cudaStreamDestroy(dc->stream[r]);
    }
    (void)cudaGetLastError();
    free(dc);
}

/* rank 0 closes the ranks' device communicators (gpt2rt_free) */
static void gpt2rt__cu_dp_close(gpt2rt_ctx *ctx) {
    gpt2rt__dcomms_free((gpt2rt__dcomms *)ctx->dgroup);
    ctx->dgroup = NULL;
    for (int r = 0; r < ctx->n_ranks; r++) /* the states no longer have a communicator */
        if (ctx->ranks[r] && ctx->ranks[r]->cu) ctx->ranks[r]->cu->dcomm = NULL;
}

/* Rank r (>= 1) of the data-parallel context ctx (rank 0, whose device state exists):
   rc (zeroed, cfg and d copied) gets its own parameter table and a device state on
   device_ids[r], created against rank 0's host side (the fp32 weights it uploads). */
static gpt2rt_result gpt2rt__cu_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r) {
    rc->n_tensors = ctx->n_tensors;
    rc->n_params = ctx->n_params;
    rc->n_train = ctx->n_train;
    rc->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                  GPT2RT_MEM_BOOKKEEPING);
    if (!rc->tensors) return gpt2rt__fail(rc, GPT2RT_ERR_OUT_OF_MEMORY, "parameter table");
    memcpy(rc->tensors, ctx->tensors, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor));
    /* the driver runs on device_ids[0]: this rank's config names its device first (the
       set of ordinals, which gpt2rt__dev_check judges, is the same) */
    gpt2rt_config c = ctx->cfg;
    c.device_ids[0] = ctx->cfg.device_ids[r];
    c.device_ids[r] = ctx->cfg.device_ids[0];
    char err[2048];
    gpt2rt_result res = gpt2rt__cu_create_cfg(ctx, &c, &rc->cu, err, sizeof err);
    if (res != GPT2RT_OK) return gpt2rt__fail(rc, res, "%s", err);
    return GPT2RT_OK;
}

/* st (rank `rank` of dcomm's group, host side ctx: rank 0's) reduces through dcomm; with
   ZeRO-1 it keeps shard `rank` of the master weights and moments (its table and master
   re-made: creation gave it shard 0's) */
static gpt2rt_result gpt2rt__cu_dp_attach(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, gpt2rt__comm *dcomm, int rank) {
    st->phase = "data parallel";
    st->layer = -1;
    st->dcomm = dcomm;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (!st->dp_ev_ok) {
        GPT2RT__CU_CK(cudaEventCreateWithFlags(&st->ev_grads, cudaEventDisableTiming));
        cudaError_t e = cudaEventCreateWithFlags(&st->ev_comm, cudaEventDisableTiming);
        if (e != cudaSuccess) { (void)cudaEventDestroy(st->ev_grads); return gpt2rt__cu_fail(ctx, st, e, "cudaEventCreate"); }
        st->dp_ev_ok = 1;
    }
    if (st->d.shards > 1) {
        st->opt_lo = gpt2rt__shard_lo(st->n_train, dcomm->size, rank);
        st->opt_hi = gpt2rt__shard_lo(st->n_train, dcomm->size, rank + 1);
        /* the gradient's padding to equal shards (3.2, 1.4) sums as zeros: nothing else writes it */
        GPT2RT__CU_CK(cudaMemset(st->grads, 0, (size_t)st->bytes[GPT2RT_MEM_GRADS]));
        gpt2rt__cu_adamw_plan(ctx, st);
        if (st->master) GPT2RT__TRY(gpt2rt__cu_upload_params(ctx, st));
    }
    return GPT2RT_OK;
}

/* gpt2rt_create of a CUDA data-parallel context, after gpt2rt__dp_open made the ranks and
   their host group: the device communicators (NCCL where built with it and the devices
   differ, else the loopback), attached to every rank's state */
static gpt2rt_result gpt2rt__cu_dp_open(gpt2rt_ctx *ctx) {
    int n = ctx->n_ranks, dup = 0;
    gpt2rt__dcomms *dc = (gpt2rt__dcomms *)calloc(1, sizeof(gpt2rt__dcomms));
    if (!dc) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the device communicators");
    ctx->dgroup = dc;
    dc->n = n;
    for (int r = 0; r < n; r++) {
        dc->device[r] = ctx->ranks[r]->cu->device;
        for (int k = 0; k < r; k++) dup |= dc->device[k] == dc->device[r];
    }
    char err[1024] = "";
    gpt2rt_result res = GPT2RT_ERR_NOT_IMPLEMENTED;
    snprintf(err, sizeof err, "data parallel on the CUDA backend needs POSIX threads, which this build lacks");
#ifdef GPT2RT_NCCL
    if (!dup) {
        dc->nccl = 1;
        res = gpt2rt__nccl_ranks(n, dc->device, (double)ctx->cfg.timeout_s, ctx->group, dc->comms, err, sizeof err);
        if (res != GPT2RT_OK) dc->n = 0; /* nothing left to free */
    } else
#endif
    {
        (void)dup;
#ifdef GPT2RT__COMM_THREADS
        res = gpt2rt__loop_open(dc, ctx->group, err, sizeof err);
#endif
    }
    if (res != GPT2RT_OK) return gpt2rt__fail(ctx, res, "gpt2rt_create: %s", err);
    for (int r = 0; r < n; r++)
        if ((res = gpt2rt__cu_dp_attach(ctx, ctx->ranks[r]->cu, &dc->comms[r], r)) != GPT2RT_OK) return res;
    gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: data parallel over %d CUDA ranks, gradients reduced by %s", n,
                dc->nccl ? "NCCL" : "the loopback communicator (rank-order sums)");
    return GPT2RT_OK;
}

/* pieces[i] = {lo, n}: those gradient floats summed over the ranks (scatter: one piece,
   the whole gradient, reduce-scattered: shard r for rank r), enqueued on the device
   communicator's stream after what the compute stream did so far */
static gpt2rt_result gpt2rt__cu_dp_reduce(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const int64_t (*pieces)[2], int np,
                                          int scatter) {
    gpt2rt__comm *dc = st->dcomm;
    GPT2RT__CU_CK(cudaEventRecord(st->ev_grads, st->stream));
    GPT2RT__CU_CK(cudaStreamWaitEvent((cudaStream_t)dc->stream, st->ev_grads, 0));
    for (int i = 0; i < np; i++) {
        if (pieces[i][1] <= 0) continue;
        gpt2rt_result r = scatter ? dc->reduce_scatter(dc, st->grads, gpt2rt__shard_padded(st->n_train, st->d.shards))
                                  : dc->all_reduce(dc, st->grads + pieces[i][0], pieces[i][1]);
        if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: reducing the gradients: %s", dc->err);
    }
    return GPT2RT_OK;
}

/* wait for the device communicator (at most the timeout), then order the compute stream after it */
static gpt2rt_result gpt2rt__cu_dp_join(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, const char *what) {
    gpt2rt__comm *dc = st->dcomm;
    gpt2rt_result r = dc->wait(dc);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: %s: %s", what, dc->err);
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaEventRecord(st->ev_comm, (cudaStream_t)dc->stream));
    GPT2RT__CU_CK(cudaStreamWaitEvent(st->stream, st->ev_comm, 0));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__dp_sum(gpt2rt_ctx *ctx, double *v, int n); /* 10.1 */

/* Before a data-parallel update (gpt2rt__cu_update_t): the gradients summed (if the last
   backward did not: fewer micro-batches than grad_accum), the compute stream after the
   reductions, acc_loss_sum and acc_targets made global, *sumsq the squared norm of the
   summed gradient: each rank that of shard rank of it, the doubles added in rank order
   on the host, so every rank (sharded or not) has the same bits. */
static gpt2rt_result gpt2rt__cu_dp_before_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, double *sumsq) {
    gpt2rt__comm *dc = st->dcomm;
    cudaStream_t s = st->stream;
    if (!ctx->dp_reduced) {
        const int64_t all[1][2] = {{0, st->n_train}};
        GPT2RT__TRY(gpt2rt__cu_dp_reduce(ctx, st, all, 1, st->d.shards > 1));
    }
    ctx->dp_reduced = 0;
    GPT2RT__TRY(gpt2rt__cu_dp_join(ctx, st, "reducing the gradients"));
    int64_t lo = gpt2rt__shard_lo(st->n_train, dc->size, dc->rank), hi = gpt2rt__shard_lo(st->n_train, dc->size, dc->rank + 1);
    double *d_norm = (double *)(void *)st->red; /* norm, sum of squares */
    GPT2RT__CU_CK(gpt2rt__cu_global_norm(d_norm, d_norm + 1, st->grads + lo, hi - lo, st->norm_parts, s));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->h_norm, d_norm, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
    GPT2RT__CU_CK(cudaStreamSynchronize(s));
    double v[3] = {ctx->acc_loss_sum, (double)ctx->acc_targets, st->h_norm[1]};
    GPT2RT__TRY(gpt2rt__dp_sum(ctx, v, 3));
    ctx->acc_loss_sum = v[0];
    ctx->acc_targets = (int64_t)v[1];
    *sumsq = v[2];
    return GPT2RT_OK;
}

/* ZeRO-1, after the AdamW of this rank's shard: every rank gets every weight. The fp32
   gradient buffer (free now) carries them: the shard's fp32 weights (the master, or the
   fp32 weights themselves) go to their gradients' places, the all-gather fills the
   others, every trained tensor's weights are written back (floatX: cast as the AdamW
   kernel casts), and the gradients are zeroed. */
template <typename X>
static gpt2rt_result gpt2rt__cu_dp_gather_weights(gpt2rt_ctx *ctx, gpt2rt__cu_state *st) {
    gpt2rt__comm *dc = st->dcomm;
    cudaStream_t s = st->stream;
    if (st->master) {
        if (st->opt_hi > st->opt_lo)
            GPT2RT__CU_CK(cudaMemcpyAsync(st->grads + st->opt_lo, st->master, (size_t)(st->opt_hi - st->opt_lo) * 4,
                                          cudaMemcpyDeviceToDevice, s));
    } else {
        for (int r = 0; r < st->n_runs; r++)
            for (int i = st->runs[r].i0; i < st->runs[r].i0 + st->runs[r].n; i++) {
                const gpt2rt__cu_adamw_tensor *a = &st->h_adamw[i];
                GPT2RT__CU_CK(cudaMemcpyAsync(st->grads + st->opt_lo + a->off,
                                              (const float *)st->w + st->runs[r].delta + st->opt_lo + a->off,
                                              (size_t)a->n * 4, cudaMemcpyDeviceToDevice, s));
            }
    }
    GPT2RT__CU_CK(cudaEventRecord(st->ev_grads, s));
    GPT2RT__CU_CK(cudaStreamWaitEvent((cudaStream_t)dc->stream, st->ev_grads, 0));
    gpt2rt_result r = dc->all_gather(dc, st->grads, gpt2rt__shard_padded(st->n_train, st->d.shards));
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "data parallel: gathering the weights: %s", dc->err);
    GPT2RT__TRY(gpt2rt__cu_dp_join(ctx, st, "gathering the weights"));
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        if (t->goff < 0) continue;
        int64_t n = t->rows * t->cols;
        if (sizeof(X) == 4)
            GPT2RT__CU_CK(cudaMemcpyAsync((X *)st->w + t->off, st->grads + t->goff, (size_t)n * 4, cudaMemcpyDeviceToDevice, s));
        else
            GPT2RT__CU_CK(gpt2rt__cu_cast<X>((X *)st->w + t->off, st->grads + t->goff, n, s));
    }
    GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, s));
    return GPT2RT_OK;
}

/* the device state of data-parallel rank r of ctx (rank 0: ctx's own; one device: r = 0) */
static gpt2rt__cu_state *gpt2rt__cu_rank(gpt2rt_ctx *ctx, int r) { return r ? ctx->ranks[r]->cu : ctx->cu; }

/* ctx->params (rank 0's host weights) to every rank's device; m, v (n_train each, goff
   order; NULL: untouched) to every rank's, each keeping its shard under ZeRO-1 */
static gpt2rt_result gpt2rt__cu_dp_upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    for (int r = 0; r < (ctx->n_ranks > 1 ? ctx->n_ranks : 1); r++) {
        GPT2RT__TRY(gpt2rt__cu_upload_params(ctx, gpt2rt__cu_rank(ctx, r)));
        if (m || v) GPT2RT__TRY(gpt2rt__cu_upload_moments(ctx, gpt2rt__cu_rank(ctx, r), m, v));
    }
    return GPT2RT_OK;
}

/* m, v (n_train each) from the ranks that keep them (every rank: rank 0's) */
static gpt2rt_result gpt2rt__cu_dp_download_moments(gpt2rt_ctx *ctx, float *m, float *v) {
    int n = ctx->n_ranks > 1 && ctx->d.shards > 1 ? ctx->n_ranks : 1;
    for (int r = 0; r < n; r++) GPT2RT__TRY(gpt2rt__cu_download_moments(ctx, gpt2rt__cu_rank(ctx, r), m, v));
    return GPT2RT_OK;
}



/* ---- the CUDA backend's step-level entries (gpt2rt__cu_backend's second part) ---- */

static gpt2rt_result gpt2rt__cu_be_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                           int fuse) {
    ctx->cu->dlogits_in_forward = fuse; /* the classifier writes dlogits in the same pass */
    gpt2rt_result r = gpt2rt__cu_forward(ctx, ctx->cu, inputs, targets, loss);
    ctx->have_logits = r == GPT2RT_OK && !ctx->cu->dlogits_ready;
    ctx->have_loss = r == GPT2RT_OK && targets;
    return r;
}

static gpt2rt_result gpt2rt__cu_be_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    ctx->have_pred = 0;
    gpt2rt_result r = gpt2rt__cu_forward_series(ctx, ctx->cu, x, y, loss);
    ctx->have_logits = r == GPT2RT_OK;
    ctx->have_pred = r == GPT2RT_OK && ctx->d.seqhead != GPT2RT_HEAD_NEXT_PATCH; /* NEXT_PATCH forecasts no horizon */
    ctx->have_loss = r == GPT2RT_OK && (y || ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH); /* its targets are in x */
    return r;
}

/* the CPU's scale, times the loss scale */
static gpt2rt_result gpt2rt__cu_be_backward(gpt2rt_ctx *ctx) { return gpt2rt__cu_backward(ctx, ctx->cu); }

/* no counted target on one device: skipped as on the CPU, without a norm; data parallel:
   the ranks decide together (8.6) */
static gpt2rt_result gpt2rt__cu_be_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale) {
    gpt2rt_result r;
    if (!ctx->acc_targets && ctx->comm->size == 1) {
        if ((r = gpt2rt__cu_zero(ctx, ctx->cu, 0)) != GPT2RT_OK) return r;
        int clean = 0;
        *loss_scale = ctx->cu->loss_scale;
        *o = gpt2rt__opt_policy(ctx, 0.0, loss_scale, &clean); /* skips and says why; the scale stays */
        return GPT2RT_OK;
    }
    if ((r = gpt2rt__cu_update(ctx, ctx->cu, lr, &o->norm, &o->skipped, loss_scale)) != GPT2RT_OK) return r;
    if (!o->skipped) ctx->step++;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_zero_grads(gpt2rt_ctx *ctx, int moments) {
    return ctx->cu ? gpt2rt__cu_zero(ctx, ctx->cu, moments) : GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_logits(gpt2rt_ctx *ctx, float *dst) {
    return gpt2rt__cu_logits(ctx, ctx->cu, dst, ctx->d.BT * ctx->d.V);
}

/* the forward brought them to the host */
static gpt2rt_result gpt2rt__cu_be_predictions(gpt2rt_ctx *ctx, float *dst) {
    memcpy(dst, ctx->cu->h_pred, (size_t)ctx->d.n_out * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter) {
    return gpt2rt__cu_dp_reduce(ctx, ctx->cu, pieces, 2, scatter);
}

static gpt2rt_result gpt2rt__cu_be_host_weights(gpt2rt_ctx *ctx) { return gpt2rt__cu_host_weights(ctx, ctx->cu); }

static gpt2rt_result gpt2rt__cu_be_upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    return gpt2rt__cu_dp_upload(ctx, m, v); /* every rank's device */
}

/* the moments live on the devices only: they come to the host for the write */
static gpt2rt_result gpt2rt__cu_be_host_moments(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf) {
    *buf = NULL;
    gpt2rt_result rc = gpt2rt__cu_host_weights(ctx, ctx->cu);
    if (rc != GPT2RT_OK) return rc;
    float *mv = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_train * 8 + 8, GPT2RT_MEM_BOOKKEEPING);
    if (!mv) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_state_save: %lld bytes of host memory for "
                                 "the moments", (long long)ctx->n_train * 8);
    if ((rc = gpt2rt__cu_dp_download_moments(ctx, mv, mv + ctx->n_train)) != GPT2RT_OK) {
        gpt2rt__free(&ctx->cfg, mv, GPT2RT_MEM_BOOKKEEPING);
        return rc;
    }
    *m = mv;
    *v = mv + ctx->n_train;
    *buf = mv;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_param_read(gpt2rt_ctx *ctx, const char *name, const gpt2rt__tensor *t,
                                              gpt2rt_param_what what, float *dst) {
    (void)name;
    return gpt2rt__cu_param_read(ctx, ctx->cu, t, what, dst);
}

/* the device arenas (the host holds the fp32 weights) and the driver's own bytes */
static void gpt2rt__cu_be_allocated(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead) {
    memcpy(bytes, ctx->cu->allocated, GPT2RT_MEM_COUNT * sizeof(uint64_t));
    *overhead = ctx->cu->overhead;
}

static gpt2rt_result gpt2rt__cu_be_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan) {
    (void)plan; /* the device state plans its own arenas, as rank 0's */
    return gpt2rt__cu_dp_rank(ctx, rc, r);
}

static gpt2rt_result gpt2rt__cu_be_dp_open(gpt2rt_ctx *ctx) { return gpt2rt__cu_dp_open(ctx); }
static void gpt2rt__cu_be_release_shared(gpt2rt_ctx *ctx) { gpt2rt__cu_dp_close(ctx); }
static void gpt2rt__cu_be_release(gpt2rt_ctx *ctx) { gpt2rt__cu_free(ctx->cu); }

/* gpt2rt_create with backend = CUDA: one device (or a data-parallel rank 0), or the
   stages of a layer split (8.7), whose context keeps the host's entries */
#ifdef GPT2RT__COMM_THREADS
static gpt2rt_result gpt2rt__ls_cu_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan);
#endif
static gpt2rt_result gpt2rt__cuda_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
#ifdef GPT2RT__COMM_THREADS
    if (ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT) return gpt2rt__ls_cu_open(ctx, plan);
#endif
    ctx->be = &gpt2rt__cu_backend; /* before the state exists: gpt2rt_free releases what was made */
    return gpt2rt__cu_open(ctx, plan);
}

/* ==== 8.7 Layer split on CUDA devices ==== */
#ifdef GPT2RT__COMM_THREADS
/* Stage s: a device state for its span (gpt2rt__cu_create_span) on device_ids[s],
   driven through the stage's host context hs[s] (the table gpt2rt__span_params gives
   for the span, whose offsets keep one device's alignment; its fp32 weights; cu = the
   state). The steps are the driver's (8.5) and 7.3's layer loops over the span; the
   schedule the CPU's (GPipe, one thread a stage). Each stage keeps an activation set
   per micro-batch (set 0 is the state's own, 1..m-1 further device buffers, each bound
   by gpt2rt__layout on a copy of the state's shadow context): the last stage runs each
   backward right after its forward, but the gradient it leaves in x0 of set k waits
   there for stage N-2's backward k. A stage's
   thread waits for its own stream before it counts a micro-batch done, and the next
   stage pulls what it needs on its own stream: forward k, stage s-1's output (its set
   k's last res3) into its x0 of set k; backward k, the gradient stage s+1 left in its
   x0 of set k (read no more: a layer's backward reads its input, x0 being the stage's
   own) into its dres. Between devices the pull is a peer copy where peer access is on
   (cudaMemcpyPeerAsync), else it goes through the pulling state's pinned staging
   buffer; on one device (device_ids 0, 0, allow_shared_device) a device copy.
   The tied wte: its gradient, moments and master live on the last stage, which runs
   head(k) and then, once the first stage has left d(x0) of micro-batch k in its x0 of
   set k, the embedding's part of the wte gradient on that d(x0) (the same bucket
   kernel, same alignment) before head(k+1): one device's order head(0), embed(0),
   head(1), ...; the first stage's embedding backward adds wpe's only. The first
   backward after an update overwrites the weight gradients (acc = 0) as one device's
   does. The update: the gradient norm's square is the sum of the stages' (fp64, in
   stage order), then each stage's AdamW with one device's coefficient, then the last
   stage's new wte weights to the first. One device sums the squares in its own chunks,
   so the fp64 sum may differ in its last bits; the fp32 norm (and with it the clip
   coefficient) is then the same unless that sum lies within those bits of an fp32
   rounding boundary (some 1e-8 of steps). */

/* GPT2RT__CU_CK (8.5) with ctx a stage's host context */

/* stage s's device shadow for micro-batch k */
static gpt2rt_ctx *gpt2rt__ls_cu_set(gpt2rt__ls *ls, int s, int k) {
    return &ls->cudev[s * ls->m + k];
}

/* bytes from src (stage `from`'s device) to dst (stage s's), ordered on stage s's
   stream. The source is at rest: its stage synchronised its stream before counting it
   done. Through the host: chunks of the pinned staging buffer, synchronously. */
static cudaError_t gpt2rt__ls_cu_pull(gpt2rt__ls *ls, int s, int from, void *dst, const void *src, size_t bytes) {
    gpt2rt__cu_state *st = ls->cu[s], *sf = ls->cu[from];
    if (st->device == sf->device) return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream);
    if (ls->peer[s][from]) return cudaMemcpyPeerAsync(dst, st->device, src, sf->device, bytes, st->stream);
    for (size_t o = 0; o < bytes; o += st->stage_bytes) {
        size_t n = bytes - o < st->stage_bytes ? bytes - o : st->stage_bytes;
        cudaError_t e = cudaStreamSynchronize(st->stream); /* the staging buffer is free again */
        if (e == cudaSuccess) e = cudaSetDevice(sf->device);
        if (e == cudaSuccess) e = cudaMemcpy(st->h_stage, (const unsigned char *)src + o, n, cudaMemcpyDeviceToHost);
        cudaError_t e2 = cudaSetDevice(st->device);
        if (e == cudaSuccess) e = e2;
        if (e == cudaSuccess)
            e = cudaMemcpyAsync((unsigned char *)dst + o, st->h_stage, n, cudaMemcpyHostToDevice, st->stream);
        if (e != cudaSuccess) return e;
    }
    return cudaStreamSynchronize(st->stream);
}

/* the forward of stage s on micro-batch k; the last stage also takes the loss (the
   classifier writes dlogits in the same pass, as gpt2rt_step's on one device) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_forward(gpt2rt__ls *ls, int s, int k) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span sp = st->span;
    const gpt2rt__backend *be = &gpt2rt__cu_backend;
    const int64_t BT = d->BT;
    const size_t act = (size_t)(BT * d->C * d->ab);
    cudaStream_t cs = st->stream;
    st->phase = "layer split forward";
    st->layer = -1;
    if (sp.first) {
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->inputs, (const int32_t *)ls->a + k * BT, (size_t)BT * 4,
                                      cudaMemcpyHostToDevice, cs));
        GPT2RT__TRY(be->embed_forward(ctx));
    } else
        GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, s - 1, dv->x0, gpt2rt__lacts(gpt2rt__ls_cu_set(ls, s - 1, k), sp.l0 - 1).res3,
                                         act));
    /* the span's layers; the copy into the next stage's first checkpoint is the pull's */
    GPT2RT__TRY(gpt2rt__model_layers_forward(ctx, be, dv, sp.l0, sp.l1 - 1));
    GPT2RT__TRY(be->layer_forward(ctx, sp.l1 - 1, gpt2rt__model_layer_input(dv, sp.l1 - 1), gpt2rt__lacts(dv, sp.l1 - 1)));
    if (sp.last) {
        const int32_t *tg = (const int32_t *)ls->b + k * BT;
        const float *res = gpt2rt__lacts(dv, d->L - 1).res3;
        if (d->recompute == GPT2RT_RECOMPUTE_FULL) { /* the slots are reused: keep the last output */
            GPT2RT__TRY(be->copy(ctx, dv->xout, res, act));
            res = dv->xout;
        }
        GPT2RT__CU_CK(cudaMemcpyAsync(dv->targets, tg, (size_t)BT * 4, cudaMemcpyHostToDevice, cs));
        GPT2RT__TRY(be->head_forward(ctx, res));
        float dloss = st->loss_scale / (float)(BT * st->cfg.grad_accum);
        GPT2RT__CU_CK(gpt2rt__cu_classifier<X>((X *)dv->logits, dv->losses, dv->logit_lse, dv->targets, dloss, 1, BT,
                                               d->V, d->Vp, cs));
        st->dlogits_ready = 1;
        GPT2RT__CU_CK(cudaMemcpyAsync(st->h_losses, dv->losses, (size_t)BT * 4, cudaMemcpyDeviceToHost, cs));
        GPT2RT__CU_CK(cudaStreamSynchronize(cs));
        double total = 0.0; /* the CPU's sum: in order, in double, over the counted targets */
        int64_t n = 0;
        for (int64_t i = 0; i < BT; i++)
            if (tg[i] >= 0) { total += st->h_losses[i]; n++; }
        ls->loss_sum[k] = total;
        ls->n_targets[k] = n;
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(cs));
    return GPT2RT_OK;
}

/* the backward of stage s on micro-batch k: from the head (last stage) or the gradient
   stage s+1 left in its x0, down to the embedding (first stage: wpe's gradient) or the
   stage's input; then d(input) into x0 of set k for the stage before (the first
   stage: for the last stage's part of the wte gradient) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_backward(gpt2rt__ls *ls, int s, int k) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    const gpt2rt__span sp = st->span;
    const gpt2rt__backend *be = &gpt2rt__cu_backend;
    const size_t act = (size_t)(d->BT * d->C * d->ab);
    st->phase = "layer split backward";
    st->layer = -1;
    st->acc = k > 0; /* the first micro-batch after an update overwrites, as one device's */
    if (sp.last) {
        const float *res = d->recompute == GPT2RT_RECOMPUTE_FULL ? dv->xout : gpt2rt__lacts(dv, d->L - 1).res3;
        GPT2RT__TRY(be->head_backward(ctx, res, st->loss_scale / (float)(d->BT * st->cfg.grad_accum)));
    } else
        GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, s + 1, dv->dres, gpt2rt__ls_cu_set(ls, s + 1, k)->x0, act));
    GPT2RT__TRY(gpt2rt__model_layers_backward(ctx, be, dv, sp.l0, sp.l1));
    if (sp.first) GPT2RT__TRY(be->embed_backward(ctx));
    if (!sp.first || ls->order) GPT2RT__TRY(be->copy(ctx, dv->x0, dv->dres, act));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

/* the last stage: the embedding's part of the wte gradient of micro-batch k, from the
   first stage's d(x0) (pulled into dbuf, free between backwards) and k's token buckets */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_embed_wte(gpt2rt__ls *ls, int k) {
    int s = ls->n - 1;
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *dv = st->dev = gpt2rt__ls_cu_set(ls, s, k);
    const gpt2rt__dims *d = &st->d;
    int64_t nbi = gpt2rt__cu_encoder_bucket_ints(d->BT);
    st->phase = "layer split wte gradient";
    st->layer = -1;
    GPT2RT__CU_CK(gpt2rt__ls_cu_pull(ls, s, 0, dv->dbuf, gpt2rt__ls_cu_set(ls, 0, k)->x0,
                                     (size_t)(d->BT * d->C * d->ab)));
    GPT2RT__CU_CK(cudaMemcpyAsync(st->buckets_ws, ls->h_buckets + k * nbi, (size_t)nbi * 4, cudaMemcpyHostToDevice,
                                  st->stream));
    GPT2RT__CU_CK(gpt2rt__cu_encoder_backward<X>(gpt2rt__cu_grad_of(st, gpt2rt__model_tensor(ctx, GPT2RT__WTE)), NULL,
                                                 (const X *)dv->dbuf, st->buckets_ws, ls->nb[k], d->B, d->T, d->C,
                                                 st->stream));
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    return GPT2RT_OK;
}

#define GPT2RT__LS_CU_BY_TYPE(st, fn, ...) \
    ((st)->xt == CUDA_R_32F ? fn<float>(__VA_ARGS__) \
     : (st)->xt == CUDA_R_16BF ? fn<__nv_bfloat16>(__VA_ARGS__) : fn<__half>(__VA_ARGS__))

/* a stage's thread: the CPU schedule (gpt2rt__ls_stage) on its device; a failure is
   kept in ls->res[s] (the message in hs[s]) and stops the others */
static void *gpt2rt__ls_cu_stage(void *p) {
    gpt2rt__ls_job *j = (gpt2rt__ls_job *)p;
    gpt2rt__ls *ls = j->ctx->ls;
    int s = j->s, m = ls->m, last = s == ls->n - 1;
    gpt2rt__cu_state *st = ls->cu[s];
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt_result r = GPT2RT_OK;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) r = gpt2rt__cu_fail(ctx, st, e, "cudaSetDevice");
    for (int k = 0; k < m && r == GPT2RT_OK; k++) {
        if (s && !gpt2rt__ls_wait(ls, &ls->fwd[s - 1], k)) return NULL;
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_forward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->fwd[s]);
        if (!last) continue;
        if (ls->order && k) { /* embed(k-1) before head(k) */
            if (!gpt2rt__ls_wait(ls, &ls->bwd[0], k - 1)) return NULL;
            if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_embed_wte, ls, k - 1)) != GPT2RT_OK) break;
        }
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_backward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->bwd[s]);
    }
    for (int k = 0; k < m && !last && r == GPT2RT_OK; k++) {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[s + 1], k)) return NULL;
        if ((r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_backward, ls, s, k)) != GPT2RT_OK) break;
        gpt2rt__ls_done(ls, &ls->bwd[s]);
    }
    if (r == GPT2RT_OK && last && ls->order) {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[0], m - 1)) return NULL;
        r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_embed_wte, ls, m - 1);
    }
    if (r != GPT2RT_OK) {
        pthread_mutex_lock(&ls->mu);
        ls->res[s] = r;
        ls->stop = 1;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
    }
    return NULL;
}

/* stage s's AdamW over its parameters (gpt2rt__cu_update_t's launches) */
template <typename X>
static gpt2rt_result gpt2rt__ls_cu_adamw(gpt2rt__ls *ls, int s, float lr, float grad_scale, int64_t t) {
    gpt2rt_ctx *ctx = &ls->hs[s];
    gpt2rt__cu_state *st = ls->cu[s];
    const gpt2rt_config *c = &st->cfg;
    gpt2rt__cu_adamw_tensor *d_tab = (gpt2rt__cu_adamw_tensor *)(void *)((unsigned char *)st->red + 16);
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    GPT2RT__CU_CK(cudaMemcpyAsync(d_tab, st->h_adamw, (size_t)st->n_adamw * sizeof(gpt2rt__cu_adamw_tensor),
                                  cudaMemcpyHostToDevice, st->stream));
    for (int r = 0; r < st->n_runs; r++) {
        const gpt2rt__cu_adamw_run *run = &st->runs[r];
        float *params = st->master ? st->master : (float *)st->w + run->delta;
        X *params_x = st->master ? (X *)st->w + run->delta : NULL;
        GPT2RT__CU_CK(gpt2rt__cu_adamw<X>(params, params_x, st->grads, st->m, st->v, d_tab + run->i0, run->n,
                                          run->blocks, lr, c->beta1, c->beta2, c->eps, c->weight_decay, t, grad_scale,
                                          st->stream));
    }
    GPT2RT__CU_CK(cudaStreamSynchronize(st->stream));
    st->host_stale = 1;
    return GPT2RT_OK;
}

/* a stage's failure as the context's */
static gpt2rt_result gpt2rt__ls_cu_fail(gpt2rt_ctx *ctx, int s, gpt2rt_result r) {
    return gpt2rt__fail(ctx, r, "layer split, stage %d (device %d): %.3900s", s, ctx->ls->cu[s]->device,
                        ctx->ls->hs[s].error);
}

/* the update after the pipelined micro-batches (the CUDA backend's update over the
   stages, inside gpt2rt__opt_update): the global norm, one device's skip, clip and
   loss-scale rules, each stage's AdamW, then wte's new weights to the first stage */
static gpt2rt_result gpt2rt__ls_cu_adamw_stages(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *od,
                                                float *loss_scale) {
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n;
    double sumsq = 0.0;
    if (ctx->acc_targets) {
        for (int s = 0; s < n; s++) {
            gpt2rt_ctx *hs = &ls->hs[s];
            gpt2rt__cu_state *st = ls->cu[s];
            st->phase = "layer split update";
            st->layer = -1;
            cudaError_t e = cudaSetDevice(st->device);
            if (e == cudaSuccess) e = gpt2rt__cu_global_norm(NULL, (double *)(void *)st->red, st->grads, st->n_train,
                                                             st->norm_parts, st->stream);
            if (e == cudaSuccess) e = cudaMemcpyAsync(st->h_norm, st->red, sizeof(double), cudaMemcpyDeviceToHost,
                                                      st->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, s, gpt2rt__cu_fail(hs, st, e, "the gradient norm"));
            sumsq += st->h_norm[0];
        }
    }
    gpt2rt__opt_decision o = gpt2rt__opt_policy(ctx, sqrt(sumsq), &ls->loss_scale, &ls->clean_steps);
    *od = o;
    if (o.skipped) {
        for (int s = 0; s < n; s++) {
            gpt2rt__cu_state *st = ls->cu[s];
            cudaError_t e = cudaSetDevice(st->device);
            if (e == cudaSuccess) e = cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, st->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, s, gpt2rt__cu_fail(&ls->hs[s], st, e, "zeroing"));
        }
    } else {
        for (int s = 0; s < n; s++) {
            gpt2rt__cu_state *st = ls->cu[s];
            gpt2rt_result r = GPT2RT__LS_CU_BY_TYPE(st, gpt2rt__ls_cu_adamw, ls, s, lr, o.grad_scale, ctx->step + 1);
            if (r != GPT2RT_OK) return gpt2rt__ls_cu_fail(ctx, s, r);
        }
        const gpt2rt__tensor *w0 = gpt2rt__model_tensor(&ls->hs[0], GPT2RT__WTE);
        const gpt2rt__tensor *wl = gpt2rt__model_tensor(&ls->hs[n - 1], GPT2RT__WTE);
        if (!ctx->d.patches && wl->goff >= 0) { /* the first stage's copy of wte for the embedding */
            gpt2rt__cu_state *s0 = ls->cu[0], *sl = ls->cu[n - 1];
            size_t wb = (size_t)ctx->d.wb;
            cudaError_t e = cudaSetDevice(s0->device);
            if (e == cudaSuccess) e = gpt2rt__ls_cu_pull(ls, 0, n - 1, (unsigned char *)s0->w + (size_t)w0->off * wb,
                                                         (const unsigned char *)sl->w + (size_t)wl->off * wb,
                                                         (size_t)(wl->rows * wl->cols) * wb);
            if (e == cudaSuccess) e = cudaStreamSynchronize(s0->stream);
            if (e != cudaSuccess) return gpt2rt__ls_cu_fail(ctx, 0, gpt2rt__cu_fail(&ls->hs[0], s0, e, "wte to stage 0"));
        }
        ctx->step++;
    }
    for (int s = 0; s < n; s++) ls->cu[s]->loss_scale = ls->loss_scale;
    *loss_scale = ls->loss_scale;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__ls_cu_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    return gpt2rt__opt_update(ctx, gpt2rt__ls_cu_adamw_stages, stats);
}

/* gpt2rt_param_read on a CUDA layer split: the stage that trains the tensor (weights of
   a frozen one: the host's, they never change) */
static gpt2rt_result gpt2rt__ls_cu_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                              float *dst) {
    gpt2rt__ls *ls = ctx->ls;
    int i = (int)(t - ctx->tensors), owner = -1;
    if (what != GPT2RT_PARAM_VALUE && what != GPT2RT_PARAM_GRAD && what != GPT2RT_PARAM_ADAM_M &&
        what != GPT2RT_PARAM_ADAM_V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: what = %d", (int)what);
    if (t->goff < 0) {
        if (what != GPT2RT_PARAM_VALUE)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: '%s' is frozen (group 0x%x): it "
                                "has no gradient and no moments", t->name, t->group);
        gpt2rt__param_out(t, ctx->params + t->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    for (int s = 0; s < ls->n; s++)
        if (ls->hs[s].tensors[i].goff >= 0) owner = s;
    if (owner < 0) return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_param_read: no stage trains '%s'", t->name);
    gpt2rt_ctx *hs = &ls->hs[owner];
    gpt2rt__cu_state *st = ls->cu[owner];
    const gpt2rt__tensor *ts = &hs->tensors[i];
    gpt2rt_result r;
    if (what == GPT2RT_PARAM_VALUE) {
        if (st->host_stale && (r = gpt2rt__cu_download_params(hs, st)) != GPT2RT_OK)
            return gpt2rt__ls_cu_fail(ctx, owner, r);
        gpt2rt__param_out(t, hs->params + ts->off, 1.0f, dst);
        return GPT2RT_OK;
    }
    size_t n = (size_t)(t->rows * t->cols);
    float *tmp = (float *)gpt2rt__alloc(&ctx->cfg, n * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %zu floats", n);
    r = gpt2rt__cu_read_tensor(hs, st, ts, what, tmp);
    float k = what == GPT2RT_PARAM_GRAD ? (float)(gpt2rt__opt_grad_unscale(ctx) / (double)ls->loss_scale) : 1.0f;
    if (r == GPT2RT_OK) gpt2rt__param_out(t, tmp, k, dst);
    gpt2rt__free(&ctx->cfg, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r == GPT2RT_OK ? r : gpt2rt__ls_cu_fail(ctx, owner, r);
}

/* the device arenas of every stage, and its further activation sets */
static void gpt2rt__ls_cu_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    const gpt2rt__ls *ls = ctx->ls;
    plan->n_devices = ls->n;
    for (int s = 0; s < ls->n; s++) {
        const gpt2rt__cu_state *st = ls->cu[s];
        plan->total[s] = 0; /* the devices' arenas only: the host holds the fp32 weights */
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
            plan->bytes[s][i] = st->allocated[i];
            if (i == GPT2RT_MEM_ACTIVATIONS) plan->bytes[s][i] += (uint64_t)(ls->m - 1) * st->bytes[i];
            plan->total[s] += plan->bytes[s][i];
        }
        plan->overhead[s] = st->overhead;
    }
}

static void gpt2rt__ls_cu_free(gpt2rt_ctx *ctx, gpt2rt__ls *ls) {
    for (int s = 0; s < ls->n; s++) {
        if (ls->cu[s]) {
            (void)cudaSetDevice(ls->cu[s]->device);
            (void)cudaDeviceSynchronize();
            for (int k = 0; ls->cuacts && k < ls->m; k++)
                if (ls->cuacts[s * ls->m + k]) (void)cudaFree(ls->cuacts[s * ls->m + k]);
            ls->cu[s]->dev = ls->dev0[s];
            gpt2rt__cu_free(ls->cu[s]);
            ls->cu[s] = NULL;
        }
        if (ls->hs) {
            gpt2rt__free(&ctx->cfg, ls->hs[s].tensors, GPT2RT_MEM_BOOKKEEPING);
            gpt2rt__free(&ctx->cfg, ls->hs[s].params, GPT2RT_MEM_BOOKKEEPING);
        }
    }
    (void)cudaGetLastError();
    gpt2rt__free(&ctx->cfg, ls->hs, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->cudev, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->cuacts, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->h_buckets, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->nb, GPT2RT_MEM_BOOKKEEPING);
}

/* before the stages start: the wte gradient's token buckets of every micro-batch
   (a: the step's checked tokens) */
static void gpt2rt__ls_cu_begin(gpt2rt_ctx *ctx, const void *a) {
    gpt2rt__ls *ls = ctx->ls;
    int64_t BT = ctx->d.BT, nbi = gpt2rt__cu_encoder_bucket_ints(BT);
    for (int k = 0; ls->order && k < ls->m; k++)
        ls->nb[k] = gpt2rt__cu_encoder_buckets(ls->h_buckets + k * nbi, (const int32_t *)a + k * BT, BT, ctx->d.Vp);
    for (int s = 0; s < ls->n; s++) ls->res[s] = GPT2RT_OK;
}

/* after the stages joined: each state's own shadow back; a stage that failed stopped
   the others, so what the stages summed is dropped */
static gpt2rt_result gpt2rt__ls_cu_end(gpt2rt_ctx *ctx) {
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n;
    for (int s = 0; s < n; s++) ls->cu[s]->dev = ls->dev0[s];
    for (int s = 0; s < n; s++)
        if (ls->res[s] != GPT2RT_OK) {
            for (int i = 0; i < n; i++) {
                (void)cudaSetDevice(ls->cu[i]->device);
                (void)cudaStreamSynchronize(ls->cu[i]->stream);
                (void)cudaMemset(ls->cu[i]->grads, 0, (size_t)ls->cu[i]->n_train * 4);
                (void)cudaDeviceSynchronize();
            }
            (void)cudaGetLastError();
            gpt2rt__accum_reset(ctx);
            return gpt2rt__ls_cu_fail(ctx, s, ls->res[s]);
        }
    return GPT2RT_OK;
}

static const gpt2rt__ls_ops gpt2rt__ls_cu_ops = {
    gpt2rt__ls_cu_free, gpt2rt__ls_cu_begin, gpt2rt__ls_cu_stage, gpt2rt__ls_cu_end, gpt2rt__ls_cu_update,
    gpt2rt__ls_cu_param_read, gpt2rt__ls_cu_allocated};

/* gpt2rt_create, CUDA layer split (ctx->cfg resolved): the memory budget against each
   device's plan and the further activation sets, the host table and fp32 weights,
   initialised, then each stage: its host context, its device state (which uploads its
   weights), its further activation sets and their shadows; peer access between the
   devices that exchange activations */
static gpt2rt_result gpt2rt__ls_cu_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    int n = ctx->cfg.n_devices, m = ctx->cfg.grad_accum;
    for (int s = 0; s < n && ctx->cfg.memory_budget; s++) {
        /* the plan counts the activations of all m micro-batches GPipe keeps in flight (3.3) */
        uint64_t need = plan->total[s];
        if (need > ctx->cfg.memory_budget)
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split stage %d needs %.2f GiB on "
                                "device %d (its plan, with the activations of the %d micro-batches GPipe keeps in "
                                "flight, %.2f GiB each), memory_budget is %.2f GiB; nothing was allocated", s,
                                GPT2RT__GIB(need), ctx->cfg.device_ids[s], m,
                                GPT2RT__GIB(plan->bytes[s][GPT2RT_MEM_ACTIVATIONS] / (uint64_t)m),
                                GPT2RT__GIB(ctx->cfg.memory_budget));
    }
    gpt2rt_result hr = gpt2rt__cu_host_alloc(ctx);
    if (hr != GPT2RT_OK) return hr;

    gpt2rt__ls *ls = (gpt2rt__ls *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__ls), GPT2RT_MEM_BOOKKEEPING);
    if (!ls) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stages");
    memset(ls, 0, sizeof *ls);
    if (pthread_mutex_init(&ls->mu, NULL) != 0 || pthread_cond_init(&ls->cv, NULL) != 0) {
        gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the stages failed");
    }
    ctx->ls = ls;
    ls->n = n; ls->m = m;
    ls->ops = &gpt2rt__ls_cu_ops;
    ls->order = !(ctx->d.frozen & GPT2RT_GROUP_TOKEN_EMBED);
    ls->loss_scale = ctx->cfg.precision == GPT2RT_PRECISION_FP16 ? ctx->cfg.loss_scale : 1.0f;
    int64_t nbi = gpt2rt__cu_encoder_bucket_ints(ctx->d.BT);
    ls->loss_sum = (double *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(double), GPT2RT_MEM_BOOKKEEPING);
    ls->n_targets = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    ls->hs = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)n * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->cudev = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->cuacts = (void **)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(void *), GPT2RT_MEM_BOOKKEEPING);
    ls->h_buckets = (int32_t *)gpt2rt__alloc(&ctx->cfg, (size_t)(m * nbi) * 4, GPT2RT_MEM_BOOKKEEPING);
    ls->nb = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    if (!ls->loss_sum || !ls->n_targets || !ls->hs || !ls->cudev || !ls->cuacts || !ls->h_buckets || !ls->nb)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stage table");
    memset(ls->hs, 0, (size_t)n * sizeof(gpt2rt_ctx));
    memset(ls->cuacts, 0, (size_t)(n * m) * sizeof(void *));
    for (int s = 0; s < n; s++) {
        gpt2rt_ctx *hs = &ls->hs[s];
        gpt2rt__span sp = gpt2rt__span_of(&ctx->cfg, s);
        memcpy(hs, ctx, sizeof *hs);
        hs->ls = NULL;
        hs->cu = NULL;
        hs->cfg.log = NULL; /* the stages report through the context */
        hs->tensors = NULL;
        hs->params = NULL;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) { hs->arena[i] = NULL; hs->arena_bytes[i] = 0; }
        hs->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                      GPT2RT_MEM_BOOKKEEPING);
        if (!hs->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: stage %d's table", s);
        gpt2rt__span_params(&ctx->d, &sp, hs->tensors, &hs->n_params, &hs->n_train);
        hs->params = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)hs->n_params * sizeof(float), GPT2RT_MEM_BOOKKEEPING);
        if (!hs->params)
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: %lld bytes of host memory for stage "
                                "%d's weights", (long long)hs->n_params * 4, s);
        memset(hs->params, 0, (size_t)hs->n_params * sizeof(float));
        for (int i = 0; i < ctx->n_tensors; i++)
            if (hs->tensors[i].rows)
                memcpy(hs->params + hs->tensors[i].off, ctx->params + ctx->tensors[i].off,
                       (size_t)(hs->tensors[i].rows * hs->tensors[i].cols) * sizeof(float));
        char err[2048];
        gpt2rt_result r = gpt2rt__cu_create_span(hs, &ctx->cfg, &sp, ctx->cfg.device_ids[s], &ls->cu[s], err, sizeof err);
        if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: layer split stage %d (layers %lld..%lld): %s", s,
                                                (long long)sp.l0, (long long)sp.l1 - 1, err);
        gpt2rt__cu_state *st = ls->cu[s];
        hs->cu = st;
        ls->dev0[s] = st->dev;
        for (int k = 0; k < m; k++) {
            gpt2rt_ctx *dv = &ls->cudev[s * m + k];
            memcpy(dv, st->dev, sizeof *dv);
            if (k == 0) continue; /* the state's own activations */
            (void)cudaSetDevice(st->device);
            cudaError_t e = cudaMalloc(&ls->cuacts[s * m + k], (size_t)st->bytes[GPT2RT_MEM_ACTIVATIONS]);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                ls->cuacts[s * m + k] = NULL;
                return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split stage %d: cudaMalloc of "
                                    "%.1f MiB for the activations of micro-batch %d of grad_accum = %d on device %d "
                                    "failed: %s", s, GPT2RT__MIB(st->bytes[GPT2RT_MEM_ACTIVATIONS]), k, m, st->device,
                                    cudaGetErrorString(e));
            }
            dv->arena[GPT2RT_MEM_ACTIVATIONS] = ls->cuacts[s * m + k];
            uint64_t bytes[GPT2RT_MEM_COUNT];
            gpt2rt__layout(&st->d, &sp, bytes, dv); /* the state's carving, on this set */
        }
        gpt2rt__cu_measure(st);
    }
    /* peer access between the devices that exchange: neighbours, and the last with the first (wte) */
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int da = ctx->cfg.device_ids[a], db = ctx->cfg.device_ids[b], ab = 0, ba = 0;
            if (a == b || da == db || !(b == a + 1 || a == b + 1 || (a == 0 && b == n - 1) || (b == 0 && a == n - 1)))
                continue;
            if (cudaDeviceCanAccessPeer(&ab, da, db) != cudaSuccess || cudaDeviceCanAccessPeer(&ba, db, da) != cudaSuccess)
                ab = ba = 0;
            if (ab && ba && cudaSetDevice(da) == cudaSuccess) {
                cudaError_t e = cudaDeviceEnablePeerAccess(db, 0);
                ls->peer[a][b] = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
            }
            (void)cudaGetLastError();
        }
    for (int a = 0; a < n; a++) /* both ways, or neither: a copy goes through the host then */
        for (int b = 0; b < a; b++) ls->peer[a][b] = ls->peer[b][a] = ls->peer[a][b] && ls->peer[b][a];
    return GPT2RT_OK;
}
#undef GPT2RT__LS_CU_BY_TYPE
#endif /* GPT2RT__COMM_THREADS */

#undef GPT2RT__CU_CK

static int gpt2rt__cuda_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n > 0;
}

#else
/* compiled without CUDA: AUTO picks the CPU, and gpt2rt_create refuses backend = CUDA */
static int gpt2rt__cuda_present(void) { return 0; }

static gpt2rt_result gpt2rt__cuda_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    (void)plan;
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: backend = GPT2RT_BACKEND_CUDA needs the "
                        "implementation compiled by nvcc (GPT2RT_IMPLEMENTATION in a .cu file, linked with "
                        "-lcublasLt); this one was compiled without CUDA");
}
#endif /* GPT2RT__CUDA */

/* ==== 9. Optimizer ==== */

#define GPT2RT__NORM_CHUNK 65536
static int64_t gpt2rt__opt_norm_chunks(int64_t n_params) { return (n_params + GPT2RT__NORM_CHUNK - 1) / GPT2RT__NORM_CHUNK; }

/* sum of squares of g (n floats); fixed chunks summed in order: deterministic */
static double gpt2rt__opt_sumsq(gpt2rt_ctx *ctx, const float *g, int64_t n) {
    int64_t nch = gpt2rt__opt_norm_chunks(n);
    double *parts = ctx->norm_parts;
    GPT2RT__PARALLEL_FOR(ctx->d.nt)
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t i0 = ch * GPT2RT__NORM_CHUNK, i1 = i0 + GPT2RT__NORM_CHUNK < n ? i0 + GPT2RT__NORM_CHUNK : n;
        double acc[8] = {0}; /* 8 independent sums: no dependency chain, vectorisable */
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * (double)g[i + k];
        for (; i < i1; i++) acc[0] += (double)g[i] * (double)g[i];
        parts[ch] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    double s = 0.0;
    for (int64_t ch = 0; ch < nch; ch++) s += parts[ch];
    return s;
}


static float gpt2rt__opt_lr_at(const gpt2rt_config *c, int64_t s) {
    double lr = c->lr;
    if (s < c->warmup_steps) return (float)(lr * (double)(s + 1) / (double)c->warmup_steps);
    if (c->total_steps == 0) return (float)lr;
    double span = c->total_steps - c->warmup_steps > 1 ? (double)(c->total_steps - c->warmup_steps) : 1.0;
    double r = (double)(s - c->warmup_steps) / span;
    if (r > 1.0) r = 1.0;
    double lr_min = lr * c->min_lr_frac;
    return (float)(lr_min + 0.5 * (1.0 + cos(GPT2RT__PI * r)) * (lr - lr_min));
}

/* AdamW as torch.optim.AdamW, gradients scaled by clip_coef, then zeroed */
static void gpt2rt__opt_adamw_scalar(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] * clip_coef;
        g[j] = 0.0f;
        float pj = p[j] * decay;
        float mj = m[j] + (1.0f - b1) * (gj - m[j]);
        float vj = v[j] * b2 + (1.0f - b2) * gj * gj;
        m[j] = mj;
        v[j] = vj;
        p[j] = pj - step_size * (mj / (sqrtf(vj) / bc2_sqrt + eps));
    }
}

#if GPT2RT__SG_X86
/* the same operations 16 at a time: sqrtf's errno keeps compilers from vectorising
   the scalar loop unless built with -fno-math-errno, and the update is a quarter
   of a CPU training step */
#if defined(__GNUC__) && !defined(__clang__) /* g++ -O3 (nvcc's host pass) misreads avx512fintrin.h */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f")))
static void gpt2rt__opt_adamw_avx512(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
    const __m512 coef = _mm512_set1_ps(clip_coef), dec = _mm512_set1_ps(decay), omb1 = _mm512_set1_ps(1.0f - b1);
    const __m512 vb2 = _mm512_set1_ps(b2), omb2 = _mm512_set1_ps(1.0f - b2), st = _mm512_set1_ps(step_size);
    const __m512 bc2 = _mm512_set1_ps(bc2_sqrt), ve = _mm512_set1_ps(eps), zero = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 gj = _mm512_mul_ps(_mm512_loadu_ps(g + j), coef);
        _mm512_storeu_ps(g + j, zero);
        __m512 pj = _mm512_mul_ps(_mm512_loadu_ps(p + j), dec);
        __m512 m0 = _mm512_loadu_ps(m + j);
        __m512 mj = _mm512_add_ps(m0, _mm512_mul_ps(omb1, _mm512_sub_ps(gj, m0)));
        __m512 vj = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + j), vb2), _mm512_mul_ps(_mm512_mul_ps(omb2, gj), gj));
        _mm512_storeu_ps(m + j, mj);
        _mm512_storeu_ps(v + j, vj);
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vj), bc2), ve);
        _mm512_storeu_ps(p + j, _mm512_sub_ps(pj, _mm512_mul_ps(st, _mm512_div_ps(mj, den))));
    }
    gpt2rt__opt_adamw_scalar(p + j, g + j, m + j, v + j, n - j, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

static void gpt2rt__opt_adamw_kernel(float *p, float *g, float *m, float *v, int64_t n, float clip_coef, float decay,
                                 float b1, float b2, float step_size, float bc2_sqrt, float eps) {
#if GPT2RT__SG_X86
    if (__builtin_cpu_supports("avx512f")) {
        gpt2rt__opt_adamw_avx512(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
        return;
    }
#endif
    gpt2rt__opt_adamw_scalar(p, g, m, v, n, clip_coef, decay, b1, b2, step_size, bc2_sqrt, eps);
}

/* one AdamW step over the trained floats [ctx->opt_lo, ctx->opt_hi) (all of them, or
   this rank's ZeRO-1 shard), at learning rate lr, the gradients scaled by grad_scale
   (normalisation and clipping). Element-wise: how the floats are cut into chunks or
   shards does not change a bit. One parallel region for the whole pass, each thread an
   equal share of the floats walking the tensors that meet it: a region per tensor (148
   at 124M, most of 768 floats) cost a fork and a join each, and on a machine with more
   runnable jobs than cores each join waits for a descheduled thread. */
static void gpt2rt__opt_adamw(gpt2rt_ctx *ctx, float lr, float grad_scale) {
    const gpt2rt_config *c = &ctx->cfg;
    int64_t t = ctx->step + 1;
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    float decay_on = (float)(1.0 - (double)lr * c->weight_decay);
    int64_t lo0 = ctx->opt_lo, n_all = ctx->opt_hi - ctx->opt_lo, nparts = ctx->d.nt;
    GPT2RT__PARALLEL_FOR(ctx->d.nt)
    for (int64_t part = 0; part < nparts; part++) {
        int64_t plo = lo0 + n_all * part / nparts, phi = lo0 + n_all * (part + 1) / nparts;
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *tn = &ctx->tensors[i];
            if (tn->goff < 0) continue;
            int64_t t1 = tn->goff + tn->rows * tn->cols, base = tn->goff > lo0 ? tn->goff : lo0;
            int64_t lo = tn->goff > plo ? tn->goff : plo; /* the part of the tensor in [plo, phi) */
            int64_t hi = t1 < phi ? t1 : phi;
            /* a cut inside the tensor lands 16 floats' multiples from where one thread's pass
               of it starts (base), so every float takes the same path (the kernel's vector
               body or its tail, which a compiler contracting a*b+c into an FMA rounds
               differently) for any thread count; both sides of a cut round alike */
            if (lo > base) lo = base + gpt2rt__pad16(lo - base);
            if (hi > base && hi < t1 && hi < lo0 + n_all) hi = base + gpt2rt__pad16(hi - base);
            if (lo > t1) lo = t1;
            if (hi > t1) hi = t1;
            if (hi > lo0 + n_all) hi = lo0 + n_all;
            if (hi <= lo) continue;
            float *p = ctx->params + tn->off + (lo - tn->goff), *g = ctx->grads + lo;
            float *m = ctx->m + (lo - lo0), *v = ctx->v + (lo - lo0);
            gpt2rt__opt_adamw_kernel(p, g, m, v, hi - lo, grad_scale, tn->decay ? decay_on : 1.0f, b1, b2, step_size,
                                     bc2_sqrt, eps);
        }
    }
}

/* raw gradients times this = gradients of the mean loss over every target counted
   since the last update */
static double gpt2rt__opt_grad_unscale(const gpt2rt_ctx *ctx) {
    return ctx->acc_targets ? (double)(ctx->d.n_out * ctx->cfg.grad_accum) / (double)ctx->acc_targets : 0.0;
}

#define GPT2RT__OPT_SCALE_WINDOW 2000     /* clean fp16 updates before the loss scale doubles */
#define GPT2RT__OPT_SCALE_MAX 16777216.0f /* 2^24 */

/* The update policy of every backend and mode (one device, data parallel, layer split),
   so that they skip, clip and scale alike. norm_raw: the norm of the raw gradient sums
   (loss scale in; the ranks' or stages' whole gradient; 0 when nothing was counted);
   *loss_scale: the scale those sums carry (1 but fp16), *clean_steps: fp16 updates
   since its last change. fp16's scale halves on an overflow (not below 1) and doubles
   after GPT2RT__OPT_SCALE_WINDOW clean updates (not above 2^24); the new scale is the
   next backward's. A skip is logged; the caller zeroes the gradients or updates. */
static gpt2rt__opt_decision gpt2rt__opt_policy(gpt2rt_ctx *ctx, double norm_raw, float *loss_scale, int *clean_steps) {
    const gpt2rt_config *c = &ctx->cfg;
    int fp16 = c->precision == GPT2RT_PRECISION_FP16;
    double unscale = gpt2rt__opt_grad_unscale(ctx) / (double)*loss_scale;
    gpt2rt__opt_decision o = {0.0f, 0.0f, 0};
    o.norm = (float)(norm_raw * unscale);
    o.skipped = !isfinite(o.norm) || !ctx->acc_targets;
    o.grad_scale = 0.0f;
    if (!ctx->acc_targets) { /* no loss to descend: Adam's momentum alone would still move the weights */
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: every target of the %d micro-batch%s since the last "
                    "update is ignored (negative)%s; update skipped at step %lld", ctx->acc_micro,
                    ctx->acc_micro == 1 ? "" : "es", ctx->comm->size > 1 ? " on every rank" : "", (long long)ctx->step);
    } else if (o.skipped) {
        char sc[64] = "";
        if (fp16) {
            *loss_scale = *loss_scale * 0.5f < 1.0f ? 1.0f : *loss_scale * 0.5f;
            *clean_steps = 0;
            snprintf(sc, sizeof sc, ", fp16 loss scale now %g", (double)*loss_scale);
        }
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_update: gradient norm is %g at step %lld; update skipped%s",
                    (double)o.norm, (long long)ctx->step, sc);
    } else {
        float coef = 1.0f;
        if (c->grad_clip > 0.0f) {
            coef = c->grad_clip / (o.norm + 1e-6f);
            if (coef > 1.0f) coef = 1.0f;
        }
        o.grad_scale = (float)(unscale * (double)coef);
        if (fp16 && ++*clean_steps >= GPT2RT__OPT_SCALE_WINDOW) {
            *loss_scale = *loss_scale * 2.0f > GPT2RT__OPT_SCALE_MAX ? GPT2RT__OPT_SCALE_MAX : *loss_scale * 2.0f;
            *clean_steps = 0;
        }
    }
    return o;
}

/* what gpt2rt_update reports, after the update (ctx->step advanced) and before the
   accumulation counters are reset; t0: when the call began */
static void gpt2rt__opt_stats(const gpt2rt_ctx *ctx, gpt2rt_step_stats *stats, gpt2rt__opt_decision o, float lr,
                              float loss_scale, double t0) {
    if (!stats) return;
    memset(stats, 0, sizeof *stats);
    stats->step = ctx->step;
    stats->loss = ctx->acc_targets ? (float)(ctx->acc_loss_sum / (double)ctx->acc_targets) : 0.0f;
    stats->grad_norm = o.norm;
    stats->lr = lr;
    stats->loss_scale = loss_scale;
    stats->skipped = o.skipped;
    stats->tokens = ctx->d.BT * ctx->acc_micro * ctx->comm->size;
    stats->micro_batches = ctx->acc_micro;
    stats->seconds = gpt2rt__now() - t0;
}

/* one gpt2rt_update around whatever applies it (a backend's update, the CUDA stages'):
   this step's learning rate in; the stats and the cleared accumulation out */
static gpt2rt_result gpt2rt__opt_update(gpt2rt_ctx *ctx, gpt2rt__update_fn update, gpt2rt_step_stats *stats) {
    double t0 = gpt2rt__now();
    float lr = gpt2rt__opt_lr_at(&ctx->cfg, ctx->step), loss_scale = 1.0f;
    gpt2rt__opt_decision o = {0.0f, 0.0f, 0};
    gpt2rt_result r = update(ctx, lr, &o, &loss_scale);
    if (r != GPT2RT_OK) return r;
    gpt2rt__opt_stats(ctx, stats, o, lr, loss_scale, t0);
    gpt2rt__accum_reset(ctx);
    return GPT2RT_OK;
}

/* the CPU backend's update (the table's): data parallel first sums the gradients and the
   loss over the ranks (10.1), and with ZeRO-1 gathers the weights after */
static gpt2rt_result gpt2rt__dp_before_update(gpt2rt_ctx *ctx, double *sumsq);
static gpt2rt_result gpt2rt__dp_gather_weights(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__cpu_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale) {
    double sumsq = 0.0;
    int clean = 0;
    if (ctx->comm->size > 1) { /* data parallel: the summed gradient, the global loss and norm */
        gpt2rt_result r = gpt2rt__dp_before_update(ctx, &sumsq);
        if (r != GPT2RT_OK) return r;
    } else GPT2RT__PROF(ctx, GPT2RT__PROF_NORM, sumsq = gpt2rt__opt_sumsq(ctx, ctx->grads, ctx->n_train));
    *o = gpt2rt__opt_policy(ctx, sqrt(sumsq), loss_scale, &clean); /* fp32 on the CPU: the scale stays 1 */
    if (o->skipped) {
        memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
        return GPT2RT_OK;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_ADAMW, gpt2rt__opt_adamw(ctx, lr, o->grad_scale));
    if (ctx->opt_hi - ctx->opt_lo < ctx->n_train) { /* ZeRO-1: this rank updated its shard */
        gpt2rt_result r = gpt2rt__dp_gather_weights(ctx);
        if (r != GPT2RT_OK) return r;
    }
    ctx->step++;
    return GPT2RT_OK;
}

/* ==== 10. Context ==== */

/* N(0, std) for every element, from a stream seeded per (tensor, 4096-chunk) so the
   result does not depend on the thread count */
static void gpt2rt__init_normal(float *x, uint16_t *x16, int64_t n, float std, uint64_t seed, int nt) {
    int64_t nch = (n + 4095) / 4096;
    GPT2RT__PARALLEL_FOR(nt)
    for (int64_t ch = 0; ch < nch; ch++) {
        uint64_t s = seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(ch + 1));
        gpt2rt__rng_next(&s);
        int64_t i1 = (ch + 1) * 4096 < n ? (ch + 1) * 4096 : n;
        for (int64_t i = ch * 4096; i < i1; i += 2) {
            double u1 = gpt2rt__rng_uniform(&s), u2 = gpt2rt__rng_uniform(&s);
            double r = sqrt(-2.0 * log(u1)) * std;
            float a = (float)(r * cos(2.0 * GPT2RT__PI * u2)), b = (float)(r * sin(2.0 * GPT2RT__PI * u2));
            if (x16) { /* bf16 weights: the fp32 draw, rounded (as a load of it would be) */
                x16[i] = gpt2rt__bf16_round(a);
                if (i + 1 < i1) x16[i + 1] = gpt2rt__bf16_round(b);
            } else {
                x[i] = a;
                if (i + 1 < i1) x[i + 1] = b;
            }
        }
    }
}

static void gpt2rt__init_params(gpt2rt_ctx *ctx) {
    float resid_std = 0.02f / sqrtf(2.0f * (float)ctx->d.L);
    uint64_t s = ctx->cfg.seed;
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        float *p = ctx->params ? ctx->params + t->off : NULL;
        uint16_t *p16 = ctx->params16 ? ctx->params16 + t->off : NULL; /* inference_weights = BF16 */
        int64_t n = t->rows * t->cols, n_file = t->hf_rows * t->cols;
        uint64_t ts = gpt2rt__rng_next(&s); /* one draw per tensor, used or not */
        switch (t->row->init) {
        case GPT2RT__INIT_NORMAL:
        case GPT2RT__INIT_RESID:
            gpt2rt__init_normal(p, p16, n_file, t->row->init == GPT2RT__INIT_RESID ? resid_std : 0.02f, ts,
                                ctx->d.nt);
            for (int64_t j = n_file; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 0.0f); /* padded vocab rows */
            break;
        case GPT2RT__INIT_ONES:
            for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 1.0f);
            break;
        case GPT2RT__INIT_ZEROS:
            for (int64_t j = 0; j < n; j++) gpt2rt__w_set(ctx, t->off + j, 0.0f);
            break;
        }
    }
    ctx->rng = s;
}

/* forget the micro-batches summed since the last update (not the gradients themselves) */
static void gpt2rt__accum_reset(gpt2rt_ctx *ctx) {
    ctx->acc_loss_sum = 0.0;
    ctx->acc_targets = 0;
    ctx->acc_micro = 0;
    ctx->grads_pending = 0;
}

/* the host's weights (and moments m, v of every trained float, if not NULL) to where the
   backend trains them (for 4.4, which comes before the table) */
static gpt2rt_result gpt2rt__upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    return ctx->be->upload(ctx, m, v);
}

static void gpt2rt__reset_training(gpt2rt_ctx *ctx) {
    (void)ctx->be->zero_grads(ctx, 1); /* a failure shows at the next call */
    ctx->step = 0;
    gpt2rt__accum_reset(ctx);
    ctx->have_logits = ctx->have_loss = ctx->have_pred = 0;
}

/* bytes the OS could give us now (Linux MemAvailable); 0 when unknown */
static uint64_t gpt2rt__host_available(void) {
#ifdef __linux__
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
#else
    return 0;
#endif
}

/* The out-of-memory message: what failed, the free memory, the plan's categories,
   and what the advisor would change to fit. budget 0: use free_bytes (if known). */
static gpt2rt_result gpt2rt__fail_oom(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, uint64_t budget,
                                      uint64_t free_bytes, const char *what, int allocation_failed) {
    char table[1400], advice[1400], head[400], fb[64] = "unknown";
    gpt2rt_plan_format(plan, table, sizeof table);
    if (free_bytes) snprintf(fb, sizeof fb, "%.2f %s", GPT2RT__SZ(free_bytes));
    if (!budget) budget = free_bytes;
    if (allocation_failed)
        snprintf(head, sizeof head, "%s; %.2f %s planned in all, %s free", what, GPT2RT__SZ(plan->total[0]), fb);
    else
        snprintf(head, sizeof head, "the plan needs %.2f %s (%llu bytes), the budget is %.2f %s (%llu bytes), "
                 "%s free; nothing was allocated", GPT2RT__SZ(plan->total[0]), (unsigned long long)plan->total[0],
                 GPT2RT__SZ(budget), (unsigned long long)budget, fb);
    advice[0] = 0;
    if (budget) {
        gpt2rt_config fit;
        size_t k = (size_t)snprintf(advice, sizeof advice, "what would fit %.2f %s:\n", GPT2RT__SZ(budget));
        gpt2rt_fit(&plan->config, budget, GPT2RT_FIT_DEFAULT, &fit, advice + k, sizeof advice - k);
    }
    return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: out of memory: %s\n%s%s", head, table, advice);
}

/* ==== 10.1 Data parallel ==== */
/* A rank of data parallel is an ordinary context whose comm has size > 1: the
   in-process ranks (threads, below) or one process of several (MPI). Its forward and
   backward are the one-device ones on its rows; the gradients are summed over the
   ranks in buckets as the backward finishes them, on the last micro-step only:
   each layer's as soon as its backward is done (the ranks wait for each other
   there, so the reduction of layer l runs while the faster ranks would otherwise idle;
   the CUDA backend overlaps it with layer l-1 on the communicator's stream, 8.6), the embeddings'
   and ln_f's last. ZeRO-1 instead reduce-scatters the whole gradient once, so that
   each rank's shard is the one it updates. The update then agrees on the global
   loss, target count and gradient norm, and (ZeRO-1) all-gathers the weights. */

/* [*lo, *hi): the trained floats of layer l; l = -1: of every layer together. 0: none */
static int gpt2rt__dp_layer_range(const gpt2rt_ctx *ctx, int64_t l, int64_t *lo, int64_t *hi) {
    int64_t l0 = l < 0 ? 0 : l, l1 = l < 0 ? ctx->d.L : l + 1;
    *lo = INT64_MAX; *hi = -1;
    for (int64_t j = l0; j < l1; j++) {
        const gpt2rt__tensor *t = gpt2rt__layer_tensors(ctx, j);
        for (int i = 0; i < GPT2RT__PER_LAYER; i++)
            if (t[i].goff >= 0) {
                if (t[i].goff < *lo) *lo = t[i].goff;
                if (t[i].goff + t[i].rows * t[i].cols > *hi) *hi = t[i].goff + t[i].rows * t[i].cols;
            }
    }
    return *hi > *lo;
}

/* make ctx a rank of c: its reductions go through c, and with ZeRO-1 it updates shard
   c->rank of the trained floats. The plan sized the moments for d.shards ranks, so a
   sharded context needs c->size == d.shards (a process communicator checks it). */
static void gpt2rt__dp_attach(gpt2rt_ctx *ctx, gpt2rt__comm *c) {
    ctx->comm = c;
    ctx->opt_lo = 0;
    ctx->opt_hi = ctx->n_train;
    if (ctx->d.shards > 1) {
        ctx->opt_lo = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank);
        ctx->opt_hi = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank + 1);
        /* the gradient's padding (3.2) sums as zeros: nothing else writes it. Only where
           the host holds the gradient: a CUDA rank's is on its device (8.6 zeroes it) */
        int64_t n_pad = gpt2rt__shard_padded(ctx->n_train, ctx->d.shards);
        if (ctx->grads && ctx->arena_bytes[GPT2RT_MEM_GRADS] >= (uint64_t)n_pad * sizeof(float))
            memset(ctx->grads + ctx->n_train, 0, (size_t)(n_pad - ctx->n_train) * sizeof(float));
    }
}

/* the floats the gradient's collectives cover: ZeRO-1's padded to equal shards (1.4) */
static int64_t gpt2rt__dp_grad_len(const gpt2rt_ctx *ctx) { return gpt2rt__shard_padded(ctx->n_train, ctx->d.shards); }

static gpt2rt_result gpt2rt__dp_comm_fail(gpt2rt_ctx *ctx, gpt2rt_result r, const char *what) {
    return gpt2rt__fail(ctx, r, "data parallel: %s: %s", what, ctx->comm->err);
}

static gpt2rt_result gpt2rt__dp_bucket_ready(gpt2rt_ctx *ctx, int64_t l) {
    gpt2rt__comm *c = ctx->comm;
    if (c->size == 1 || ctx->acc_micro + 1 != ctx->cfg.grad_accum) return GPT2RT_OK; /* not the last micro-step */
    /* the bucket: pieces {first float, count} of the gradient */
    int64_t pc[2][2] = {{0, 0}, {0, 0}};
    int scatter = ctx->d.shards > 1;
    if (scatter) { /* ZeRO-1: one reduce-scatter whose shards are the optimizer's */
        if (l >= 0) return GPT2RT_OK;
        pc[0][1] = ctx->n_train;
    } else {
        int64_t lo, hi;
        int any = gpt2rt__dp_layer_range(ctx, l, &lo, &hi);
        if (l >= 0) { if (any) { pc[0][0] = lo; pc[0][1] = hi - lo; } }
        else if (!any) pc[0][1] = ctx->n_train; /* every layer frozen */
        else { /* what precedes the layers (wte, wpe, in_layer) and follows them (ln_f, out_layer) */
            pc[0][1] = lo;
            pc[1][0] = hi; pc[1][1] = ctx->n_train - hi;
        }
    }
    /* CUDA: enqueued on the device communicator's stream, and the backward goes on (8.6) */
    gpt2rt_result r = ctx->be->dp_reduce(ctx, (const int64_t (*)[2])pc, scatter);
    if (r == GPT2RT_OK && l < 0) ctx->dp_reduced = 1;
    return r;
}

/* the CPU backend's reduction (the table's): the pieces over the ranks' communicator */
static gpt2rt_result gpt2rt__cpu_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter) {
    gpt2rt__comm *c = ctx->comm;
    gpt2rt_result r = GPT2RT_OK;
    for (int i = 0; i < 2 && r == GPT2RT_OK; i++)
        if (pieces[i][1] > 0)
            r = scatter ? c->reduce_scatter(c, ctx->grads, gpt2rt__dp_grad_len(ctx))
                        : c->all_reduce(c, ctx->grads + pieces[i][0], pieces[i][1]);
    if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "reducing the gradients");
    return GPT2RT_OK;
}

/* v[0..n) := the sum over the ranks, in rank order (8-byte broadcasts: the counts
   and sums are doubles, the collectives' sums are floats) */
static gpt2rt_result gpt2rt__dp_sum(gpt2rt_ctx *ctx, double *v, int n) {
    gpt2rt__comm *c = ctx->comm;
    double acc[4] = {0, 0, 0, 0}, x[4];
    for (int root = 0; root < c->size; root++) {
        memcpy(x, v, (size_t)n * sizeof(double));
        gpt2rt_result r = c->broadcast(c, x, (size_t)n * sizeof(double), root);
        if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "summing the loss");
        for (int i = 0; i < n; i++) acc[i] += x[i];
    }
    memcpy(v, acc, (size_t)n * sizeof(double));
    return GPT2RT_OK;
}

/* Before a data-parallel update: the gradients summed (if the last backward did not),
   acc_loss_sum and acc_targets made global, *sumsq the squared norm of the summed
   gradient: each rank that of shard rank of it, added in rank order, so sharded and
   not sharded agree bitwise. */
static gpt2rt_result gpt2rt__dp_before_update(gpt2rt_ctx *ctx, double *sumsq) {
    gpt2rt__comm *c = ctx->comm;
    gpt2rt_result r = GPT2RT_OK;
    if (!ctx->dp_reduced) { /* fewer micro-batches than grad_accum */
        r = ctx->d.shards > 1 ? c->reduce_scatter(c, ctx->grads, gpt2rt__dp_grad_len(ctx))
                              : c->all_reduce(c, ctx->grads, ctx->n_train);
        if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "reducing the gradients");
    }
    ctx->dp_reduced = 0;
    int64_t lo = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank), hi = gpt2rt__shard_lo(ctx->n_train, c->size, c->rank + 1);
    double v[3] = {ctx->acc_loss_sum, (double)ctx->acc_targets, gpt2rt__opt_sumsq(ctx, ctx->grads + lo, hi - lo)};
    if ((r = gpt2rt__dp_sum(ctx, v, 3)) != GPT2RT_OK) return r;
    ctx->acc_loss_sum = v[0];
    ctx->acc_targets = (int64_t)v[1];
    *sumsq = v[2];
    return GPT2RT_OK;
}

/* ZeRO-1, after the update of this rank's shard: every rank gets every weight. The
   gradient buffer (free now) carries them: the shard's weights go to their gradients'
   places, the all-gather fills the others, and every trained tensor is copied back. */
static gpt2rt_result gpt2rt__dp_gather_weights(gpt2rt_ctx *ctx) {
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            gpt2rt_result r = ctx->comm->all_gather(ctx->comm, ctx->grads, gpt2rt__dp_grad_len(ctx));
            if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "gathering the weights");
        }
        for (int i = 0; i < ctx->n_tensors; i++) {
            const gpt2rt__tensor *t = &ctx->tensors[i];
            if (t->goff < 0) continue;
            int64_t n = t->rows * t->cols;
            if (pass == 1) { memcpy(ctx->params + t->off, ctx->grads + t->goff, (size_t)n * sizeof(float)); continue; }
            int64_t lo = t->goff > ctx->opt_lo ? t->goff : ctx->opt_lo;
            int64_t hi = t->goff + n < ctx->opt_hi ? t->goff + n : ctx->opt_hi;
            if (hi > lo) memcpy(ctx->grads + lo, ctx->params + t->off + (lo - t->goff), (size_t)(hi - lo) * sizeof(float));
        }
    }
    memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
    return GPT2RT_OK;
}

/* In one process: the moments of the trained floats [lo, hi) into m, v (each hi-lo
   floats), from whichever rank keeps them (ZeRO-1), or set them there (in = 1). */
static void gpt2rt__dp_moments(gpt2rt_ctx *ctx, float *m, float *v, int64_t lo, int64_t hi, int in) {
    int n = ctx->n_ranks > 1 ? ctx->n_ranks : 1;
    for (int r = 0; r < n; r++) {
        gpt2rt_ctx *rc = r ? ctx->ranks[r] : ctx;
        int64_t a = lo > rc->opt_lo ? lo : rc->opt_lo, b = hi < rc->opt_hi ? hi : rc->opt_hi;
        if (b <= a) continue;
        size_t bytes = (size_t)(b - a) * sizeof(float);
        if (in) { memcpy(rc->m + (a - rc->opt_lo), m + (a - lo), bytes); memcpy(rc->v + (a - rc->opt_lo), v + (a - lo), bytes); }
        else { memcpy(m + (a - lo), rc->m + (a - rc->opt_lo), bytes); memcpy(v + (a - lo), rc->v + (a - rc->opt_lo), bytes); }
        if (ctx->d.shards == 1) break; /* every rank holds them all: rank 0's */
    }
}

/* the CPU backend's (the table's): the host weights are the trained ones; the moments go
   to whichever rank keeps them */
static gpt2rt_result gpt2rt__cpu_upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    if (m && v) gpt2rt__dp_moments(ctx, (float *)m, (float *)v, 0, ctx->n_train, 1);
    return GPT2RT_OK;
}

/* ZeRO-1: the ranks' shards gathered whole */
static gpt2rt_result gpt2rt__cpu_host_moments(gpt2rt_ctx *ctx, const float **m, const float **v, float **buf) {
    *m = ctx->m;
    *v = ctx->v;
    *buf = NULL;
    if (ctx->d.shards == 1) return GPT2RT_OK;
    float *zmv = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_train * 8 + 8, GPT2RT_MEM_BOOKKEEPING);
    if (!zmv) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_state_save: %lld bytes to gather the "
                                  "sharded moments", (long long)ctx->n_train * 8);
    gpt2rt__dp_moments(ctx, zmv, zmv + ctx->n_train, 0, ctx->n_train, 0);
    *m = zmv;
    *v = zmv + ctx->n_train;
    *buf = zmv;
    return GPT2RT_OK;
}

/* ---- the ranks of one process: opening, running a call on each, their outputs ---- */

/* what a rank runs: the one-device calls of 11.4, and 11.3's arenas */
static gpt2rt_result gpt2rt__forward_one(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                         int fuse);
static gpt2rt_result gpt2rt__forward_series_one(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss);
static gpt2rt_result gpt2rt__backward_one(gpt2rt_ctx *ctx);
static gpt2rt_result gpt2rt__update_one(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats);
static gpt2rt_result gpt2rt__logits_one(gpt2rt_ctx *ctx, float *dst, int64_t count);
static gpt2rt_result gpt2rt__predictions_one(gpt2rt_ctx *ctx, float *dst, int64_t count);
static gpt2rt_result gpt2rt__ctx_alloc(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan);

/* a CPU data-parallel rank: arenas like rank 0's */
static gpt2rt_result gpt2rt__cpu_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan) {
    (void)ctx; (void)r;
    return gpt2rt__ctx_alloc(rc, plan);
}

/* data parallel: ranks 1..n-1 as contexts like this one (rank 0) with its weights,
   and the threads' communicator; CUDA: each rank a device state on its device (the
   host weights are rank 0's) and the device communicators */
static gpt2rt_result gpt2rt__dp_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->cfg.n_devices;
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__comm_group),
                                                                GPT2RT_MEM_BOOKKEEPING);
    if (!g) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the ranks' communicator");
    if (gpt2rt__comm_group_init(g, n) != 0) {
        gpt2rt__free(&ctx->cfg, g, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the ranks failed");
    }
    ctx->group = g;
    ctx->n_ranks = n;
    ctx->ranks[0] = ctx;
    for (int r = 1; r < n; r++) {
        gpt2rt_ctx *rc = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
        if (!rc) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: rank %d's context", r);
        memset(rc, 0, sizeof *rc);
        ctx->ranks[r] = rc;
        rc->cfg = ctx->cfg;
        rc->cfg.log = NULL; /* the hooks run on the calling thread only: ranks report through rank 0 */
        rc->d = ctx->d;
        rc->be = ctx->be;
        gpt2rt_result res = ctx->be->dp_rank(ctx, rc, r, plan); /* CUDA: a device state on device_ids[r] */
        if (res != GPT2RT_OK)
            return gpt2rt__fail(ctx, res, "gpt2rt_create: data-parallel rank %d: %s", r, rc->error);
        if (rc->params) memcpy(rc->params, ctx->params, (size_t)ctx->n_params * sizeof(float));
        rc->rng = ctx->rng;
        gpt2rt__reset_training(rc);
    }
    for (int r = 0; r < n; r++) gpt2rt__dp_attach(ctx->ranks[r], &g->comms[r]);
    return ctx->be->dp_open(ctx); /* CUDA: the device communicators (8.6) */
#else
    (void)plan;
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = DATA needs POSIX threads");
#endif
}

/* rank r's work on thread r (rank 0 on the caller's).
   The batch of a call holds n_devices * B rows per micro-batch: rank r takes rows
   [r*B, (r+1)*B) of each micro-batch (gpt2rt_step: micro-batch k is rows
   [k*n*B, (k+1)*n*B)), so n ranks of B rows see the batches one device of n*B would. */

typedef enum gpt2rt__dp_what {
    GPT2RT__DP_FORWARD, GPT2RT__DP_FORWARD_SERIES, GPT2RT__DP_BACKWARD, GPT2RT__DP_UPDATE,
    GPT2RT__DP_STEP, GPT2RT__DP_STEP_SERIES
} gpt2rt__dp_what;

typedef struct gpt2rt__dp_job {
    gpt2rt_ctx *rc;
    int rank, n;
    gpt2rt__dp_what what;
    const void *a, *b; /* the whole call's inputs and targets (tokens), or x and y (series) */
    gpt2rt_step_stats stats;
    gpt2rt_result r;
} gpt2rt__dp_job;

static gpt2rt_result gpt2rt__dp_work(gpt2rt__dp_job *j) {
    gpt2rt_ctx *rc = j->rc;
    const gpt2rt__dims *d = &rc->d;
    int64_t tok = d->BT, xs = d->Bw * d->Lb * d->M, ys = d->n_out; /* one rank's share of a micro-batch */
    const int32_t *in = (const int32_t *)j->a, *tg = (const int32_t *)j->b;
    const float *x = (const float *)j->a;
    const float *y = d->seqhead == GPT2RT_HEAD_NEXT_PATCH ? NULL : (const float *)j->b; /* its targets are in x */
    gpt2rt_result r = GPT2RT_OK;
    switch (j->what) {
    case GPT2RT__DP_FORWARD: return gpt2rt__forward_one(rc, in + j->rank * tok, tg ? tg + j->rank * tok : NULL, NULL, 0);
    case GPT2RT__DP_FORWARD_SERIES:
        return gpt2rt__forward_series_one(rc, x + j->rank * xs, y ? y + j->rank * ys : NULL, NULL);
    case GPT2RT__DP_BACKWARD: return gpt2rt__backward_one(rc);
    case GPT2RT__DP_UPDATE: return gpt2rt__update_one(rc, &j->stats);
    case GPT2RT__DP_STEP:
    case GPT2RT__DP_STEP_SERIES:
        for (int k = 0; k < rc->cfg.grad_accum && r == GPT2RT_OK; k++) {
            int64_t m = (int64_t)k * j->n + j->rank; /* this rank's slice of micro-batch k */
            r = j->what == GPT2RT__DP_STEP ? gpt2rt__forward_one(rc, in + m * tok, tg + m * tok, NULL, 1)
                                           : gpt2rt__forward_series_one(rc, x + m * xs, y ? y + m * ys : NULL, NULL);
            if (r == GPT2RT_OK) r = gpt2rt__backward_one(rc);
        }
        return r == GPT2RT_OK ? gpt2rt__update_one(rc, &j->stats) : r;
    }
    return GPT2RT_ERR_INVALID_ARGUMENT;
}

#ifdef GPT2RT__COMM_THREADS
static void *gpt2rt__dp_thread(void *p) {
    gpt2rt__dp_job *j = (gpt2rt__dp_job *)p;
    j->r = gpt2rt__dp_work(j);
    if (j->r != GPT2RT_OK) gpt2rt__comm_threads_fail(j->rc->comm); /* the others must not wait for it */
    return NULL;
}
#endif

/* every rank drops what it summed since the last update (after a failed call) */
static void gpt2rt__dp_drop(gpt2rt_ctx *ctx) {
    for (int r = 0; r < ctx->n_ranks; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        (void)rc->be->zero_grads(rc, 0); /* a failure shows at the next call */
        gpt2rt__accum_reset(rc);
        rc->dp_reduced = 0;
    }
}

/* run `what` on every rank at once; the first rank that failed names the error */
static gpt2rt_result gpt2rt__dp_run(gpt2rt_ctx *ctx, gpt2rt__dp_what what, const void *a, const void *b,
                                    gpt2rt__dp_job *jobs) {
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->n_ranks, started[GPT2RT_MAX_DEVICES] = {0};
    pthread_t th[GPT2RT_MAX_DEVICES];
    gpt2rt__comm_group *g = (gpt2rt__comm_group *)ctx->group;
    for (int r = 0; r < n; r++) {
        gpt2rt__dp_job j;
        memset(&j, 0, sizeof j);
        j.rc = ctx->ranks[r]; j.rank = r; j.n = n; j.what = what; j.a = a; j.b = b;
        jobs[r] = j;
    }
    for (int r = 1; r < n; r++) {
        started[r] = pthread_create(&th[r], NULL, gpt2rt__dp_thread, &jobs[r]) == 0;
        if (!started[r]) {
            jobs[r].r = gpt2rt__fail(jobs[r].rc, GPT2RT_ERR_UNAVAILABLE, "starting its thread failed");
            gpt2rt__comm_threads_fail(jobs[r].rc->comm);
        }
    }
    gpt2rt__dp_thread(&jobs[0]);
    for (int r = 1; r < n; r++)
        if (started[r]) pthread_join(th[r], NULL);
    int first = g->failed ? g->failed - 1 : -1;
    gpt2rt__comm_group_reset(g);
    if (first < 0 || jobs[first].r == GPT2RT_OK)
        for (int r = n - 1; r >= 0; r--) if (jobs[r].r != GPT2RT_OK) first = r;
    if (first < 0 || jobs[first].r == GPT2RT_OK) return GPT2RT_OK;
    char msg[sizeof ctx->error];
    memcpy(msg, ctx->ranks[first]->error, sizeof msg); /* rank 0's message is ctx->error itself */
    return gpt2rt__fail(ctx, jobs[first].r, "data-parallel rank %d of %d: %s", first, n, msg);
#else
    (void)what; (void)a; (void)b; (void)jobs;
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "data parallel needs POSIX threads");
#endif
}

/* the checks of a call that takes n_ranks * B rows per micro-batch, micro micro-batches */
static gpt2rt_result gpt2rt__dp_check_rows(gpt2rt_ctx *ctx, const char *fn, const void *a, const void *b, int micro) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t m = 0; m < (int64_t)micro * ctx->n_ranks; m++) {
        gpt2rt_result r = d->patches
            ? gpt2rt__ts_check(ctx, fn, (const float *)a + m * d->Bw * d->Lb * d->M,
                               b && d->seqhead != GPT2RT_HEAD_NEXT_PATCH ? (const float *)b + m * d->n_out : NULL)
            : gpt2rt__input_tokens_check(ctx, fn, (const int32_t *)a + m * d->BT, b ? (const int32_t *)b + m * d->BT : NULL);
        if (r != GPT2RT_OK) {
            char msg[sizeof ctx->error];
            memcpy(msg, ctx->error, sizeof msg);
            return gpt2rt__fail(ctx, r, "%s (in the rows of data-parallel rank %d, micro-batch %d: indices count from "
                                "that rank's first row)", msg, (int)(m % ctx->n_ranks), (int)(m / ctx->n_ranks));
        }
    }
    return GPT2RT_OK;
}

/* the global mean loss of the ranks' last forward */
static float gpt2rt__dp_loss(const gpt2rt_ctx *ctx) {
    double sum = 0.0;
    int64_t n = 0;
    for (int r = 0; r < ctx->n_ranks; r++) { sum += ctx->ranks[r]->loss_sum; n += ctx->ranks[r]->n_targets; }
    return n ? (float)(sum / (double)n) : 0.0f;
}

static gpt2rt_result gpt2rt__dp_forward(gpt2rt_ctx *ctx, const char *fn, gpt2rt__dp_what what, const void *a,
                                        const void *b, float *loss) {
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_check_rows(ctx, fn, a, b, 1);
    if (r == GPT2RT_OK) r = gpt2rt__dp_run(ctx, what, a, b, jobs);
    if (r == GPT2RT_OK && loss) /* NEXT_PATCH has no y */
        *loss = b || ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH ? gpt2rt__dp_loss(ctx) : 0.0f;
    return r;
}

static gpt2rt_result gpt2rt__dp_step(gpt2rt_ctx *ctx, const char *fn, gpt2rt__dp_what what, const void *a,
                                     const void *b, gpt2rt_step_stats *stats) {
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: gradients from an earlier gpt2rt_backward are waiting for "
                            "gpt2rt_update", fn);
    double t0 = gpt2rt__now();
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_check_rows(ctx, fn, a, b, ctx->cfg.grad_accum);
    if (r == GPT2RT_OK) r = gpt2rt__dp_run(ctx, what, a, b, jobs);
    if (r != GPT2RT_OK) { gpt2rt__dp_drop(ctx); return r; }
    if (stats) { *stats = jobs[0].stats; stats->seconds = gpt2rt__now() - t0; }
    return GPT2RT_OK;
}

/* logits, predictions: each rank's rows in rank order */
static gpt2rt_result gpt2rt__dp_gather_out(gpt2rt_ctx *ctx, const char *fn, float *dst, int64_t count, int series) {
    const gpt2rt__dims *d = &ctx->d;
    int64_t per = series ? d->n_out : d->BT * d->V;
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: dst is NULL", fn);
    if (count != per * ctx->n_ranks)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: dst holds %lld floats, needs n_devices = %d times "
                            "one rank's %lld", fn, (long long)count, ctx->n_ranks, (long long)per);
    for (int r = 0; r < ctx->n_ranks; r++) {
        gpt2rt_result res = series ? gpt2rt__predictions_one(ctx->ranks[r], dst + r * per, per)
                                   : gpt2rt__logits_one(ctx->ranks[r], dst + r * per, per);
        if (res != GPT2RT_OK) {
            char msg[sizeof ctx->error];
            memcpy(msg, ctx->ranks[r]->error, sizeof msg);
            return gpt2rt__fail(ctx, res, "%s", msg);
        }
    }
    return GPT2RT_OK;
}

/* data parallel: after rank 0's weights changed (what 0: a write; 1: a weights load,
   which also resets the training; 2: a state load, whose moments reached every rank's
   shard with ZeRO-1, else rank 0's), every rank gets them. CUDA ranks have no host
   weights: the caller uploaded rank 0's (and the moments) to every device (the
   backend table's upload). */
static void gpt2rt__dp_sync(gpt2rt_ctx *ctx, int what) {
    for (int r = 1; r < ctx->n_ranks; r++) {
        gpt2rt_ctx *rc = ctx->ranks[r];
        if (rc->params) memcpy(rc->params, ctx->params, (size_t)ctx->n_params * sizeof(float));
        rc->have_logits = rc->have_loss = rc->have_pred = 0;
        if (!what) continue;
        if (what == 1) gpt2rt__reset_training(rc);
        else if (ctx->d.shards == 1 && rc->m) memcpy(rc->m, ctx->m, (size_t)ctx->n_opt * 2 * sizeof(float));
        (void)rc->be->zero_grads(rc, 0); /* a failure shows at the next call */
        rc->step = ctx->step;
        rc->rng = ctx->rng;
        gpt2rt__accum_reset(rc);
        rc->dp_reduced = 0;
    }
}

/* ==== 10.2 Layer split ==== */
/* parallel = LAYER_SPLIT on the CPU backend: the layers in N stages (gpt2rt__span_of:
   stage s runs layers [l0, l1); the embedding on stage 0, ln_f, the head and the loss
   on stage N-1), one thread per stage, the grad_accum micro-batches of gpt2rt_step
   pipelined through them (GPipe: stage s < N-1 runs the forwards of micro-batches
   0..m-1, then their backwards in the same order; the last stage runs each
   micro-batch's backward right after its forward, so one logits buffer serves).
   The stages share the host memory: one context's weights, gradients and optimizer
   (the update runs once, as on one device); an activation set per micro-batch in
   flight (all layers: micro-batch 0 uses the context's own, 1..m-1 extra sets), and a
   transient + workspace per stage thread. Stage s hands micro-batch k to stage s+1 by
   a counter under a mutex (the output already lies in set k: on a GPU this is the
   peer copy); the gradient of that boundary comes back by a copy into the output's
   place (no longer read: a layer's backward reads its input, not its output).
   Bitwise equal to one device: every micro-batch runs the same steps on the same
   inputs, every gradient buffer gets its micro-batches in order 0..m-1, and where
   two stages add into one buffer (the tied wte: the head's part on the last stage,
   the embedding's on the first; RevIN's affine likewise) the head backward of
   micro-batch k+1 waits for the first stage's backward of k, the one-device order
   head(0), embed(0), head(1), ... FULL recompute runs one device's segments, so each
   stage starts at a checkpoint (the config check sees to it): within a micro-batch's
   set only one stage works at a time (forward down the stages, backward up), so the
   FULL slots a set shares among its layers are safe. gpt2rt_forward / _backward /
   _update run the one-device path on the context (one micro-batch in flight, no
   pipelining). */

static void gpt2rt__ls_free(gpt2rt_ctx *ctx) {
    gpt2rt__ls *ls = ctx->ls;
    if (!ls) return;
    if (ls->ops) ls->ops->release(ctx, ls);
    for (int k = 0; ls->acts && k < ls->m - 1; k++) gpt2rt__free(&ctx->cfg, ls->acts[k], GPT2RT_MEM_ACTIVATIONS);
    for (int s = 1; s < ls->n; s++) {
        gpt2rt__free(&ctx->cfg, ls->scratch[s][0], GPT2RT_MEM_TRANSIENT);
        gpt2rt__free(&ctx->cfg, ls->scratch[s][1], GPT2RT_MEM_WORKSPACE);
    }
    gpt2rt__free(&ctx->cfg, ls->acts, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->sc, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->loss_sum, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, ls->n_targets, GPT2RT_MEM_BOOKKEEPING);
#ifdef GPT2RT__COMM_THREADS
    pthread_mutex_destroy(&ls->mu);
    pthread_cond_destroy(&ls->cv);
#endif
    gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
    ctx->ls = NULL;
}

/* after gpt2rt__ctx_alloc (the context: one device's arenas): the stages' buffers and
   their contexts (shallow copies of ctx bound to set k's activations and stage s's
   scratch; the weights, gradients and table are ctx's) */
static gpt2rt_result gpt2rt__ls_open(gpt2rt_ctx *ctx) {
#ifdef GPT2RT__COMM_THREADS
    int n = ctx->cfg.n_devices, m = ctx->cfg.grad_accum;
    gpt2rt__ls *ls = (gpt2rt__ls *)gpt2rt__alloc(&ctx->cfg, sizeof(gpt2rt__ls), GPT2RT_MEM_BOOKKEEPING);
    if (!ls) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stages");
    memset(ls, 0, sizeof *ls);
    if (pthread_mutex_init(&ls->mu, NULL) != 0 || pthread_cond_init(&ls->cv, NULL) != 0) {
        gpt2rt__free(&ctx->cfg, ls, GPT2RT_MEM_BOOKKEEPING);
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: creating a mutex for the stages failed");
    }
    ctx->ls = ls;
    ls->n = n; ls->m = m;
    const gpt2rt__dims *d = &ctx->d;
    ls->order = d->patches ? d->affine : !(d->frozen & GPT2RT_GROUP_TOKEN_EMBED);
    ls->act_bytes = ctx->arena_bytes[GPT2RT_MEM_ACTIVATIONS];
    ls->scratch_bytes[0] = ctx->arena_bytes[GPT2RT_MEM_TRANSIENT];
    ls->scratch_bytes[1] = ctx->arena_bytes[GPT2RT_MEM_WORKSPACE];
    ls->acts = (unsigned char **)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(unsigned char *), GPT2RT_MEM_BOOKKEEPING);
    ls->sc = (gpt2rt_ctx *)gpt2rt__alloc(&ctx->cfg, (size_t)(n * m) * sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    ls->loss_sum = (double *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(double), GPT2RT_MEM_BOOKKEEPING);
    ls->n_targets = (int64_t *)gpt2rt__alloc(&ctx->cfg, (size_t)m * sizeof(int64_t), GPT2RT_MEM_BOOKKEEPING);
    if (!ls->acts || !ls->sc || !ls->loss_sum || !ls->n_targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the layer split's stage table");
    memset(ls->acts, 0, (size_t)m * sizeof(unsigned char *));
    for (int k = 0; k < m - 1; k++)
        if (!(ls->acts[k] = (unsigned char *)gpt2rt__alloc(&ctx->cfg, (size_t)ls->act_bytes, GPT2RT_MEM_ACTIVATIONS)))
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split: allocating %.1f MiB for "
                                "the activations of micro-batch %d of grad_accum = %d failed",
                                GPT2RT__MIB(ls->act_bytes), k + 1, m);
    for (int s = 1; s < n; s++)
        for (int i = 0; i < 2; i++)
            if (ls->scratch_bytes[i] && !(ls->scratch[s][i] = gpt2rt__alloc(&ctx->cfg, (size_t)ls->scratch_bytes[i],
                                                i ? GPT2RT_MEM_WORKSPACE : GPT2RT_MEM_TRANSIENT)))
                return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: layer split: allocating %.1f MiB "
                                    "of scratch for stage %d failed", GPT2RT__MIB(ls->scratch_bytes[i]), s);
    gpt2rt__span whole;
    whole.l0 = 0; whole.l1 = d->L; whole.first = whole.last = 1;
    for (int s = 0; s < n; s++)
        for (int k = 0; k < m; k++) {
            gpt2rt_ctx *sc = &ls->sc[s * m + k];
            memcpy(sc, ctx, sizeof *sc);
            sc->ls = NULL;
            sc->cfg.log = NULL;
            if (k) sc->arena[GPT2RT_MEM_ACTIVATIONS] = ls->acts[k - 1];
            if (s) { sc->arena[GPT2RT_MEM_TRANSIENT] = ls->scratch[s][0]; sc->arena[GPT2RT_MEM_WORKSPACE] = ls->scratch[s][1]; }
            uint64_t bytes[GPT2RT_MEM_COUNT];
            gpt2rt__layout(&sc->d, &whole, bytes, sc); /* the same carving as ctx's, on these arenas */
            /* the stages share the cores: each its share of the threads (the kernels give
               bitwise the same results for any thread count) */
            sc->d.nt = ctx->d.nt / n > 1 ? ctx->d.nt / n : 1;
        }
    return GPT2RT_OK;
#else
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = LAYER_SPLIT needs POSIX threads, "
                        "which this build lacks");
#endif
}

#ifdef GPT2RT__COMM_THREADS

/* the forward of stage s on micro-batch k (sc: its context); the last stage also takes the loss */
static void gpt2rt__ls_forward(gpt2rt__ls *ls, gpt2rt_ctx *sc, gpt2rt__span sp, int k) {
    const gpt2rt__dims *d = &sc->d;
    const gpt2rt__backend *be = &gpt2rt__cpu_backend;
    gpt2rt__model_params p = gpt2rt__mparams(sc, sc->params, 0);
    int64_t xs = d->Bw * d->Lb * d->M;
    if (sp.first) {
        if (d->patches)
            gpt2rt__ts_revin_patch(sc->ts_patch, sc->ts_z, sc->ts_mean, sc->ts_std, (const float *)ls->a + k * xs,
                                   p.revw, p.revb, d);
        else memcpy(sc->inputs, (const int32_t *)ls->a + k * d->BT, (size_t)d->BT * sizeof(int32_t));
        (void)be->embed_forward(sc);
    }
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    size_t act = (size_t)(d->BT * d->C) * sizeof(float);
    (void)gpt2rt__model_layers_forward(sc, be, sc, sp.l0, sp.l1); /* FULL: keeps stage s+1's input */
    if (!sp.last) return;
    if (full) memcpy(sc->xout, gpt2rt__lacts(sc, d->L - 1).res3, act);
    (void)be->head_forward(sc, full ? sc->xout : gpt2rt__lacts(sc, d->L - 1).res3);
    if (d->patches) {
        gpt2rt__ts_denorm(sc->ts_pred, sc->logits, sc->ts_mean, sc->ts_std, p.revw, p.revb, d);
        memcpy(sc->ts_y, (const float *)ls->b + k * d->n_out, (size_t)d->n_out * sizeof(float));
        ls->loss_sum[k] = gpt2rt__ts_mse_sum(sc->ts_pred, sc->ts_y, d->n_out);
        ls->n_targets[k] = d->n_out;
    } else {
        memcpy(sc->targets, (const int32_t *)ls->b + k * d->BT, (size_t)d->BT * sizeof(int32_t));
        (void)gpt2rt__cpu_crossentropy_forward(sc->losses, sc->logit_lse, sc->logits, sc->targets, d->BT, d->V, d->Vp,
                                               &ls->n_targets[k], &ls->loss_sum[k], d->nt);
    }
}

/* the backward of stage s on micro-batch k: from the head (last stage) or the gradient
   stage s+1 left at this stage's output, down to the embedding (first) or that
   gradient left at stage s-1's output */
static int gpt2rt__ls_backward(gpt2rt__ls *ls, gpt2rt_ctx *sc, gpt2rt__span sp, int s, int k) {
    const gpt2rt__dims *d = &sc->d;
    const gpt2rt__backend *be = &gpt2rt__cpu_backend;
    size_t act = (size_t)(d->BT * d->C) * sizeof(float);
    int full = d->recompute == GPT2RT_RECOMPUTE_FULL;
    if (sp.last) {
        if (ls->order && k && !gpt2rt__ls_wait(ls, &ls->bwd[0], k - 1)) return 0; /* embed(k-1) before head(k) */
        (void)be->head_backward(sc, full ? sc->xout : gpt2rt__lacts(sc, d->L - 1).res3, 1.0f / (float)(d->n_out * ls->m));
    } else {
        if (!gpt2rt__ls_wait(ls, &ls->bwd[s + 1], k)) return 0;
        memcpy(sc->dres, gpt2rt__model_layer_input(sc, sp.l1), act);
    }
    (void)gpt2rt__model_layers_backward(sc, be, sc, sp.l0, sp.l1);
    if (sp.first) (void)be->embed_backward(sc);
    else memcpy(gpt2rt__model_layer_input(sc, sp.l0), sc->dres, act);
    gpt2rt__ls_done(ls, &ls->bwd[s]);
    return 1;
}

static void *gpt2rt__ls_stage(void *p) {
    gpt2rt__ls_job *j = (gpt2rt__ls_job *)p;
    gpt2rt__ls *ls = j->ctx->ls;
    int s = j->s, m = ls->m;
    gpt2rt__span sp = gpt2rt__span_of(&j->ctx->cfg, s);
    for (int k = 0; k < m; k++) {
        gpt2rt_ctx *sc = &ls->sc[s * m + k];
        if (s && !gpt2rt__ls_wait(ls, &ls->fwd[s - 1], k)) return NULL;
        gpt2rt__ls_forward(ls, sc, sp, k);
        gpt2rt__ls_done(ls, &ls->fwd[s]);
        if (sp.last && !gpt2rt__ls_backward(ls, sc, sp, s, k)) return NULL;
    }
    for (int k = 0; k < m && !sp.last; k++)
        if (!gpt2rt__ls_backward(ls, &ls->sc[s * m + k], sp, s, k)) return NULL;
    return NULL;
}
#endif


/* the calls a CUDA layer split does not run yet (it runs gpt2rt_step, gpt2rt_param_read,
   the plan and the parameter table): the one-device paths would find no device state */
static gpt2rt_result gpt2rt__ls_cu_only_step(gpt2rt_ctx *ctx, const char *fn) {
    if (ctx->ls && ctx->ls->ops)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "%s: parallel = LAYER_SPLIT on the CUDA backend runs "
                            "gpt2rt_step (and gpt2rt_param_read), not yet %s; use gpt2rt_step, or backend = CPU", fn, fn);
    return GPT2RT_OK;
}

/* gpt2rt_step / gpt2rt_step_series under layer split: the grad_accum micro-batches of
   a (inputs or x) and b (targets or y), already checked, through the stages; the
   gradients and the accumulated loss as one device's micro-steps leave them */
static gpt2rt_result gpt2rt__ls_accumulate(gpt2rt_ctx *ctx, const void *a, const void *b) {
#ifdef GPT2RT__COMM_THREADS
    gpt2rt__ls *ls = ctx->ls;
    int n = ls->n, started[GPT2RT_MAX_DEVICES] = {0};
    pthread_t th[GPT2RT_MAX_DEVICES];
    gpt2rt__ls_job jobs[GPT2RT_MAX_DEVICES];
    void *(*stage)(void *) = gpt2rt__ls_stage;
    ls->a = a; ls->b = b;
    ls->stop = 0;
    for (int s = 0; s < n; s++) { ls->fwd[s] = ls->bwd[s] = 0; jobs[s].ctx = ctx; jobs[s].s = s; }
    if (ls->ops) { /* CUDA (8.7) */
        ls->ops->begin(ctx, a);
        stage = ls->ops->stage;
    }
    int failed = 0;
    for (int s = 1; s < n && !failed; s++)
        failed = !(started[s] = pthread_create(&th[s], NULL, stage, &jobs[s]) == 0);
    if (failed) { /* stage 0 has not run: the started stages wait for it and did nothing */
        pthread_mutex_lock(&ls->mu);
        ls->stop = 1;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
    } else stage(&jobs[0]);
    for (int s = 1; s < n; s++)
        if (started[s]) pthread_join(th[s], NULL);
    if (failed)
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "layer split: starting a stage's thread failed; nothing "
                            "was computed");
    gpt2rt_result r = ls->ops ? ls->ops->end(ctx) : GPT2RT_OK;
    if (r != GPT2RT_OK) return r;
    for (int k = 0; k < ls->m; k++) { /* in micro-batch order, as one device adds them */
        ctx->acc_loss_sum += ls->loss_sum[k];
        ctx->acc_targets += ls->n_targets[k];
        ctx->acc_micro++;
    }
    ctx->have_loss = ctx->have_logits = ctx->have_pred = 0;
    ctx->grads_pending = 1;
    return GPT2RT_OK;
#else
    (void)a; (void)b;
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "layer split needs POSIX threads");
#endif
}

/* ==== 10.3 Processes: rendezvous ==== */
/* A run of world_size processes (torchrun, mpirun, a cluster's scheduler) starts with
   a rendezvous: rank 0's opaque id (128 bytes: what ncclCommInitRank needs, its
   ncclUniqueId) reaches every rank, and every rank learns that all the others are
   there. Three ways, as torch.distributed offers them:
   - TCP (rendezvous ENV or TCP): rank 0 listens on master_addr:master_port; the
     others connect (refused connections are retried until the timeout: rank 0 may
     start last), say (world_size, rank), and get the id once every rank is there.
   - FILE: rank 0 creates rendezvous_file (with link(), so it appears whole and only
     once: a file left by a crashed run is refused by name, never read as new); each
     other rank reads it and leaves rendezvous_file.ack<rank>; rank 0 waits for every
     ack and then removes them, which tells each rank that the rendezvous succeeded.
   - MPI: a broadcast from rank 0 (GPT2RT_MPI builds).
   Each waits at most timeout_s and then fails naming the ranks that did not come: a
   rank that dies before the rendezvous makes the others return an error, never hang.
   The CPU backend needs no id: its processes reduce with MPI (gpt2rt__mpi_comm). */

#define GPT2RT__RDV_MAGIC 0x74723267u /* "g2rt" little-endian */
#define GPT2RT__RDV_MAX_PEERS 1024   /* processes in one run (rank 0 holds a socket per rank) */
#define GPT2RT__BAD(r, ...) do { snprintf(err, cap, __VA_ARGS__); return r; } while (0)
#ifdef GPT2RT_MPI
static gpt2rt_result gpt2rt__mpi_bcast_id(const gpt2rt_config *cfg, unsigned char *id, char *err, size_t cap);
#endif

#if !defined(_WIN32) && !defined(GPT2RT_NO_DIST)
/* milliseconds left before deadline (seconds, gpt2rt__now's clock), at least 0 */
static int gpt2rt__rdv_left_ms(double deadline) {
    double left = (deadline - gpt2rt__now()) * 1e3;
    return left <= 0.0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

static void gpt2rt__rdv_sleep_ms(int ms) { (void)poll(NULL, 0, ms); } /* nanosleep is not C11 */

/* all n bytes through fd (want POLLOUT: send, else receive) before deadline: 1 done,
   0 timed out, -1 the peer closed or the socket failed */
static int gpt2rt__rdv_io(int fd, void *buf, size_t n, int out, double deadline) {
    unsigned char *p = (unsigned char *)buf;
    size_t done = 0;
    while (done < n) {
        struct pollfd pf;
        pf.fd = fd; pf.events = (short)(out ? POLLOUT : POLLIN); pf.revents = 0;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0) return 0;
        int k = poll(&pf, 1, left);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
#ifdef MSG_NOSIGNAL /* a peer that died must not kill this process with SIGPIPE */
        ssize_t m = out ? send(fd, p + done, n - done, MSG_NOSIGNAL) : recv(fd, p + done, n - done, 0);
#else
        ssize_t m = out ? send(fd, p + done, n - done, 0) : recv(fd, p + done, n - done, 0);
#endif
        if (m < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (m <= 0) return -1;
        done += (size_t)m;
    }
    return 1;
}

/* master_addr as an IPv4 address: numeric, "localhost", or (where the C library
   declares getaddrinfo: POSIX 2001, i.e. not strict -std=c11) a host name */
static gpt2rt_result gpt2rt__rdv_addr(const gpt2rt_config *c, struct sockaddr_in *a, char *err, size_t cap) {
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)c->master_port);
    const char *host = strcmp(c->master_addr, "localhost") ? c->master_addr : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a->sin_addr) == 1) return GPT2RT_OK;
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200112L
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (e == 0 && res) {
        memcpy(&a->sin_addr, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr, sizeof a->sin_addr);
        freeaddrinfo(res);
        return GPT2RT_OK;
    }
    GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "master_addr (MASTER_ADDR) = '%s' does not resolve to an IPv4 address "
                "(%s)", c->master_addr, gai_strerror(e));
#else
    GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "master_addr (MASTER_ADDR) = '%s' is not a numeric IPv4 address, and "
                "this build cannot resolve host names (compile the implementation file without strict -std=c11, or "
                "with -D_POSIX_C_SOURCE=200112L); give rank 0's IP address", c->master_addr);
#endif
}

/* the 16-byte hello a rank sends rank 0, and rank 0's answer */
typedef struct gpt2rt__rdv_hello { uint32_t magic, world, rank, pad; } gpt2rt__rdv_hello;
typedef struct gpt2rt__rdv_reply {
    uint32_t status, world;                  /* status 0: ok, 1: world_size differs, 2: rank taken or out of range */
    unsigned char id[GPT2RT__RDV_ID_BYTES];
} gpt2rt__rdv_reply;

static gpt2rt_result gpt2rt__rdv_tcp_root(const gpt2rt_config *c, const struct sockaddr_in *a,
                                          const unsigned char *id, char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    int peers[GPT2RT__RDV_MAX_PEERS], n_in = 0, one = 1, w = c->world_size;
    for (int i = 0; i < w && i < GPT2RT__RDV_MAX_PEERS; i++) peers[i] = -1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: socket() failed: %s", strerror(errno));
    struct sockaddr_in any = *a;
    any.sin_addr.s_addr = htonl(INADDR_ANY); /* MASTER_ADDR names this host; listen on all of its addresses */
    (void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&any, sizeof any) != 0 || listen(lfd, w) != 0) {
        int e = errno;
        close(lfd);
        GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 cannot listen on port %d (MASTER_PORT): %s%s", c->master_port,
                    strerror(e), e == EADDRINUSE ? ": another job, or a previous run's rank 0, holds it; choose "
                    "another MASTER_PORT" : "");
    }
    (void)fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    gpt2rt_result r = GPT2RT_OK;
    while (n_in < w - 1) {
        struct pollfd pf;
        pf.fd = lfd; pf.events = POLLIN; pf.revents = 0;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0 || poll(&pf, 1, left) == 0) {
            size_t k = (size_t)snprintf(err, cap, "rendezvous timed out after %g s: rank 0 listens on %s:%d, and "
                                        "rank(s)", (double)c->timeout_s, c->master_addr, c->master_port);
            for (int i = 1, shown = 0; i < w && k < cap; i++)
                if (peers[i] < 0 && shown++ < 16) k += (size_t)snprintf(err + k, cap - k, " %d", i);
            if (k < cap)
                snprintf(err + k, cap - k, " of world_size = %d did not come (not started, crashed, or given another "
                         "MASTER_ADDR/MASTER_PORT or WORLD_SIZE)", w);
            r = GPT2RT_ERR_IO;
            break;
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue; /* EAGAIN: the connection went away */
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        gpt2rt__rdv_hello h;
        double hd = gpt2rt__now() + 10.0 < deadline ? gpt2rt__now() + 10.0 : deadline;
        if (gpt2rt__rdv_io(fd, &h, sizeof h, 0, hd) != 1 || h.magic != GPT2RT__RDV_MAGIC) { close(fd); continue; }
        gpt2rt__rdv_reply rep;
        memset(&rep, 0, sizeof rep);
        rep.world = (uint32_t)w;
        if (h.world != (uint32_t)w) rep.status = 1;
        else if (h.rank == 0 || h.rank >= (uint32_t)w || peers[h.rank] >= 0) rep.status = 2;
        if (rep.status) {
            (void)gpt2rt__rdv_io(fd, &rep, sizeof rep, 1, hd);
            close(fd);
            if (rep.status == 1)
                snprintf(err, cap, "rendezvous: rank %u has world_size = %u, rank 0 has %d: every process must get "
                         "the same WORLD_SIZE", h.rank, h.world, w);
            else
                snprintf(err, cap, "rendezvous: a second process says it is rank %u (or rank %u is outside [1, %d]): "
                         "every process needs its own RANK", h.rank, h.rank, w - 1);
            r = GPT2RT_ERR_INVALID_ARGUMENT;
            break;
        }
        peers[h.rank] = fd;
        n_in++;
    }
    for (int i = 1; i < w; i++) {
        if (peers[i] < 0) continue;
        if (r == GPT2RT_OK) {
            gpt2rt__rdv_reply rep;
            memset(&rep, 0, sizeof rep);
            rep.world = (uint32_t)w;
            memcpy(rep.id, id, GPT2RT__RDV_ID_BYTES);
            if (gpt2rt__rdv_io(peers[i], &rep, sizeof rep, 1, deadline) != 1) {
                snprintf(err, cap, "rendezvous: rank %d went away before rank 0 could send it the id", i);
                r = GPT2RT_ERR_IO;
            }
        }
        close(peers[i]); /* on failure: the others see the connection close and fail too */
    }
    close(lfd);
    return r;
}

static gpt2rt_result gpt2rt__rdv_tcp_peer(const gpt2rt_config *c, const struct sockaddr_in *a, unsigned char *id,
                                          char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    int refused = 0;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: socket() failed: %s", strerror(errno));
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int ok = connect(fd, (const struct sockaddr *)a, sizeof *a) == 0, e = errno;
        if (!ok && e == EINPROGRESS) { /* wait for the answer, at most a second a try */
            struct pollfd pf;
            pf.fd = fd; pf.events = POLLOUT; pf.revents = 0;
            int left = gpt2rt__rdv_left_ms(deadline);
            if (poll(&pf, 1, left < 1000 ? left : 1000) == 1) {
                socklen_t len = sizeof e;
                e = 0;
                (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
                ok = e == 0;
            } else e = ETIMEDOUT;
        }
        if (ok) {
            gpt2rt__rdv_hello h;
            gpt2rt__rdv_reply rep;
            h.magic = GPT2RT__RDV_MAGIC; h.world = (uint32_t)c->world_size; h.rank = (uint32_t)c->rank; h.pad = 0;
            int got = gpt2rt__rdv_io(fd, &h, sizeof h, 1, deadline);
            if (got == 1) got = gpt2rt__rdv_io(fd, &rep, sizeof rep, 0, deadline);
            close(fd);
            if (got == 0)
                GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d reached rank 0 at %s:%d, but "
                            "rank 0 did not hear from every rank of world_size = %d (one not started or crashed?)",
                            (double)c->timeout_s, c->rank, c->master_addr, c->master_port, c->world_size);
            if (got < 0)
                GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 at %s:%d closed the connection before sending the id "
                            "(rank 0 failed, or refused this rank: its error says why)", c->master_addr,
                            c->master_port);
            if (rep.status == 1)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous: rank 0 has world_size = %u, this rank %d has "
                            "%d: every process must get the same WORLD_SIZE", rep.world, c->rank, c->world_size);
            if (rep.status)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous: rank 0 refused rank %d: another process has "
                            "it (every process needs its own RANK)", c->rank);
            memcpy(id, rep.id, GPT2RT__RDV_ID_BYTES);
            return GPT2RT_OK;
        }
        close(fd);
        refused++;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d could not reach rank 0 at %s:%d "
                        "(%d tries, last: %s); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT, and is "
                        "the port open between the nodes?", (double)c->timeout_s, c->rank, c->master_addr,
                        c->master_port, refused, strerror(e));
        gpt2rt__rdv_sleep_ms(left < 100 ? left : 100); /* rank 0 may not listen yet */
    }
}

/* FILE: see the subsection's comment for the protocol */
static void gpt2rt__rdv_file_name(char *out, size_t cap, const gpt2rt_config *c, const char *what, int r) {
    if (r >= 0) snprintf(out, cap, "%s.%s%d", c->rendezvous_file, what, r);
    else snprintf(out, cap, "%s%s", c->rendezvous_file, what);
}

static int gpt2rt__rdv_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* path := bytes, appearing whole: written to a temporary name, then linked (fails
   with EEXIST if path is there). The temporary is opened non-blocking: a FIFO left
   at its name fails at once (ENXIO) instead of waiting for a reader. */
static int gpt2rt__rdv_publish(const char *path, const char *tmp, const void *bytes, size_t n) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0644);
    if (fd < 0) return -1;
    struct stat sb;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode), mine = ok; /* never remove what is not a file */
    if (!ok) errno = EINVAL;
    for (size_t done = 0; ok && done < n;) {
        long k = (long)write(fd, (const char *)bytes + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { ok = 0; break; }
        done += (size_t)k;
    }
    int e = errno;
    if (close(fd) != 0 && ok) { ok = 0; e = errno; }
    if (ok && link(tmp, path) != 0) { ok = errno == EEXIST ? -2 : 0; e = errno; }
    if (mine) remove(tmp);
    errno = e;
    return ok == 1 ? 0 : ok == -2 ? -2 : -1;
}

/* what is at path when it is not a regular file ("a directory", "a FIFO (named
   pipe)", ...), NULL for a regular file or nothing */
static const char *gpt2rt__rdv_not_file(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
    return gpt2rt__file_kind((unsigned)sb.st_mode);
}

static gpt2rt_result gpt2rt__rdv_file(const gpt2rt_config *c, unsigned char *id, char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    char path[300], tmp[320], ack[320];
    gpt2rt__rdv_file_name(path, sizeof path, c, "", -1);
    gpt2rt__rdv_reply rec; /* the file: world_size and the id */
    int w = c->world_size;
    if (c->rank == 0) {
        memset(&rec, 0, sizeof rec);
        rec.status = GPT2RT__RDV_MAGIC; rec.world = (uint32_t)w;
        memcpy(rec.id, id, GPT2RT__RDV_ID_BYTES);
        gpt2rt__rdv_file_name(tmp, sizeof tmp, c, "tmp", 0);
        const char *kind = gpt2rt__rdv_not_file(path);
        if (kind)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s is %s: give every rank the path of a file "
                        "rank 0 can create, absent before the run%s%s%s", path, kind,
                        strcmp(kind, "a directory") ? "" : " (e.g. ", strcmp(kind, "a directory") ? "" : path,
                        strcmp(kind, "a directory") ? "" : "/gpt2rt.rdv)");
        int p = gpt2rt__rdv_publish(path, tmp, &rec, sizeof rec);
        if (p == -2)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous_file %s exists already (left by an earlier run, or another job "
                        "uses it): delete it, or give each run a fresh path", path);
        if (p)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous_file %s: cannot create it: %s", path, strerror(errno));
        int waiting = w - 1;
        while (waiting > 0) {
            waiting = 0;
            for (int i = 1; i < w; i++) {
                gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
                waiting += !gpt2rt__rdv_exists(ack);
            }
            if (waiting == 0) break;
            if (gpt2rt__rdv_left_ms(deadline) == 0) {
                remove(path); /* the acks stay: the ranks that came see the file go with theirs there, and fail */
                size_t k = (size_t)snprintf(err, cap, "rendezvous timed out after %g s: rank(s)", (double)c->timeout_s);
                for (int i = 1, shown = 0; i < w && k < cap; i++) {
                    gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
                    if (!gpt2rt__rdv_exists(ack) && shown++ < 16) k += (size_t)snprintf(err + k, cap - k, " %d", i);
                }
                if (k < cap)
                    snprintf(err + k, cap - k, " of world_size = %d did not read rendezvous_file %s (not started, "
                             "crashed, or given another path or WORLD_SIZE)", w, path);
                return GPT2RT_ERR_IO;
            }
            gpt2rt__rdv_sleep_ms(20);
        }
        for (int i = 1; i < w; i++) { /* success, as each rank sees it: its ack is gone */
            gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
            remove(ack);
        }
        remove(path);
        return GPT2RT_OK;
    }
    int open_errno = ENOENT;
    for (;;) { /* read the id; opened non-blocking, so a FIFO or a directory is refused at once */
        int fd = open(path, O_RDONLY | O_NONBLOCK);
        if (fd >= 0) {
            struct stat sb;
            if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
                close(fd);
                const char *kind = gpt2rt__file_kind((unsigned)sb.st_mode);
                int dir = !strcmp(kind, "a directory");
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s is %s, not a file rank 0 wrote: give "
                            "every rank the path of a file rank 0 can create%s%s%s", path, kind, dir ? " (e.g. " : "",
                            dir ? path : "", dir ? "/gpt2rt.rdv)" : "");
            }
            size_t got = 0;
            while (got < sizeof rec) {
                long k = (long)read(fd, (unsigned char *)&rec + got, sizeof rec - got);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) break;
                got += (size_t)k;
            }
            close(fd);
            if (got != sizeof rec || rec.status != GPT2RT__RDV_MAGIC)
                GPT2RT__BAD(GPT2RT_ERR_FORMAT, "rendezvous_file %s is not a gpt2rt rendezvous file (%zu bytes): "
                            "another program's file? delete it, or choose another path", path, got);
            if (rec.world != (uint32_t)w)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s: rank 0 has world_size = %u, rank %d "
                            "has %d: every process must get the same WORLD_SIZE (or the file is an earlier run's: "
                            "delete it)", path, rec.world, c->rank, w);
            break;
        }
        open_errno = errno;
        if (gpt2rt__rdv_left_ms(deadline) == 0)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d waited for rank 0 to create "
                        "rendezvous_file %s (is rank 0 running, with the same path on a file system both see?)%s%s",
                        (double)c->timeout_s, c->rank, path, open_errno == ENOENT ? "" : "; opening it: ",
                        open_errno == ENOENT ? "" : strerror(open_errno));
        gpt2rt__rdv_sleep_ms(20);
    }
    gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", c->rank);
    gpt2rt__rdv_file_name(tmp, sizeof tmp, c, "tmp", c->rank);
    int p = gpt2rt__rdv_publish(ack, tmp, "ok", 2);
    if (p)
        GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank %d cannot create %s: %s", c->rank, ack,
                    p == -2 ? "it exists (another process with the same RANK, or an earlier run's: delete it)"
                            : strerror(errno));
    for (;;) { /* rank 0 removes the ack when every rank has come */
        if (!gpt2rt__rdv_exists(ack)) break;
        if (!gpt2rt__rdv_exists(path)) {
            remove(ack);
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 gave up (rendezvous_file %s went away before every rank "
                        "came: its error names the missing ranks)", path);
        }
        if (gpt2rt__rdv_left_ms(deadline) == 0) {
            remove(ack);
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d read rendezvous_file %s but rank 0 "
                        "did not confirm that every rank came (rank 0 crashed, or another rank is missing)",
                        (double)c->timeout_s, c->rank, path);
        }
        gpt2rt__rdv_sleep_ms(20);
    }
    memcpy(id, rec.id, GPT2RT__RDV_ID_BYTES);
    return GPT2RT_OK;
}
#endif /* !_WIN32 && !GPT2RT_NO_DIST */

/* Every rank gets rank 0's id: id (GPT2RT__RDV_ID_BYTES) is rank 0's input and the
   others' output. One process: nothing to do. */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__rdv_exchange(const gpt2rt_config *c, unsigned char *id, char *err, size_t cap) {
    if (c->world_size <= 1) return GPT2RT_OK;
#ifdef GPT2RT_NO_DIST
    (void)id; /* config resolution refuses world_size > 1 in such a build */
#endif
    if (c->world_size > GPT2RT__RDV_MAX_PEERS)
        GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "rendezvous of world_size = %d processes: at most %d", c->world_size,
                    GPT2RT__RDV_MAX_PEERS);
#ifdef GPT2RT_MPI
    if (c->rendezvous == GPT2RT_RENDEZVOUS_MPI) return gpt2rt__mpi_bcast_id(c, id, err, cap);
#endif
#if !defined(_WIN32) && !defined(GPT2RT_NO_DIST)
    if (c->rendezvous == GPT2RT_RENDEZVOUS_FILE) return gpt2rt__rdv_file(c, id, err, cap);
    if (c->rendezvous == GPT2RT_RENDEZVOUS_ENV || c->rendezvous == GPT2RT_RENDEZVOUS_TCP) {
        struct sockaddr_in a;
        gpt2rt_result r = gpt2rt__rdv_addr(c, &a, err, cap);
        if (r != GPT2RT_OK) return r;
        return c->rank == 0 ? gpt2rt__rdv_tcp_root(c, &a, id, err, cap) : gpt2rt__rdv_tcp_peer(c, &a, id, err, cap);
    }
#endif
    GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "rendezvous = %d is not available in this build (TCP and FILE need a POSIX "
                "system and no GPT2RT_NO_DIST; MPI needs -DGPT2RT_MPI)", (int)c->rendezvous);
}

/* ==== 10.4 Processes: MPI ==== */
/* CPU ranks in separate processes reduce with MPI (GPT2RT_MPI builds, mpicc; Debian
   openmpi-bin libopenmpi-dev). MPI_Allreduce may sum in any order, different on each
   rank and from run to run; so every sum here is taken by rank 0 in rank order
   (x_0 + x_1 + ... + x_{size-1}, left to right, as the in-process communicator sums)
   and broadcast, which makes it bitwise the same on every rank and in every run, and
   equal to the in-process result. Each call is nonblocking underneath and waits at
   most timeout_s: a rank that stops or dies makes the others return an error. MPI is
   initialised here if the program has not done it (and finalised at exit). */
#ifdef GPT2RT_MPI
#define GPT2RT__MPI_CHUNK ((int64_t)1 << 18) /* floats rank 0 takes from each rank at once (1 MiB) */

typedef struct gpt2rt__mpi {
    MPI_Comm comm;    /* a duplicate of MPI_COMM_WORLD, errors returned, not fatal */
    double timeout_s;
    float *scratch;   /* rank 0: (size - 1, GPT2RT__MPI_CHUNK) the other ranks' chunks */
} gpt2rt__mpi;

static void gpt2rt__mpi_at_exit(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

/* MPI up, once per process; *rank and *size of MPI_COMM_WORLD */
static gpt2rt_result gpt2rt__mpi_init(int *rank, int *size, char *err, size_t cap) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "MPI_Init_thread failed (run under mpirun, or as one process)");
        atexit(gpt2rt__mpi_at_exit);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return GPT2RT_OK;
}

/* wait for req until the deadline: MPI_Wait cannot time out, so poll MPI_Test */
static gpt2rt_result gpt2rt__mpi_wait(MPI_Request *req, double deadline, const char *what, int rank, char *err,
                                      size_t cap) {
    int done = 0, sleep_us = 0;
    for (;;) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            GPT2RT__BAD(GPT2RT_ERR_IO, "MPI %s failed on rank %d (a peer died?)", what, rank);
        if (done) return GPT2RT_OK;
        if (gpt2rt__now() > deadline)
            GPT2RT__BAD(GPT2RT_ERR_IO, "MPI %s on rank %d did not finish within the timeout: another rank failed, "
                        "stopped, or is making a different call", what, rank);
        if (sleep_us > 50) (void)poll(NULL, 0, 1); /* spin briefly, then yield the core */
        sleep_us++;
    }
}

static gpt2rt_result gpt2rt__mpi_all_reduce(gpt2rt__comm *c, float *buf, int64_t n) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    char *err = c->err;
    size_t cap = sizeof c->err;
    MPI_Request req[GPT2RT__RDV_MAX_PEERS];
    gpt2rt_result r;
    for (int64_t lo = 0; lo < n; lo += GPT2RT__MPI_CHUNK) {
        int k = (int)(n - lo < GPT2RT__MPI_CHUNK ? n - lo : GPT2RT__MPI_CHUNK);
        if (c->rank == 0) {
            for (int s = 1; s < c->size; s++)
                MPI_Irecv(m->scratch + (size_t)(s - 1) * GPT2RT__MPI_CHUNK, k, MPI_FLOAT, s, 7, m->comm, &req[s]);
            for (int s = 1; s < c->size; s++)
                if ((r = gpt2rt__mpi_wait(&req[s], deadline, "all_reduce (gather)", c->rank, err, cap)) != GPT2RT_OK)
                    return r;
            for (int s = 1; s < c->size; s++) { /* rank order: ((x0 + x1) + x2) + ... */
                const float *x = m->scratch + (size_t)(s - 1) * GPT2RT__MPI_CHUNK;
                for (int i = 0; i < k; i++) buf[lo + i] += x[i];
            }
        } else {
            MPI_Isend(buf + lo, k, MPI_FLOAT, 0, 7, m->comm, &req[0]);
            if ((r = gpt2rt__mpi_wait(&req[0], deadline, "all_reduce (send)", c->rank, err, cap)) != GPT2RT_OK) return r;
        }
        MPI_Ibcast(buf + lo, k, MPI_FLOAT, 0, m->comm, &req[0]);
        if ((r = gpt2rt__mpi_wait(&req[0], deadline, "all_reduce (broadcast)", c->rank, err, cap)) != GPT2RT_OK)
            return r;
    }
    return GPT2RT_OK;
}

/* the sum of every shard, so each rank's own shard is right (the rest too) */
static gpt2rt_result gpt2rt__mpi_reduce_scatter(gpt2rt__comm *c, float *buf, int64_t n) {
    return gpt2rt__mpi_all_reduce(c, buf, n);
}

static gpt2rt_result gpt2rt__mpi_broadcast(gpt2rt__comm *c, void *buf, size_t bytes, int root) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    double deadline = gpt2rt__now() + m->timeout_s;
    for (size_t lo = 0; lo < bytes; lo += (size_t)1 << 30) {
        size_t k = bytes - lo < ((size_t)1 << 30) ? bytes - lo : (size_t)1 << 30;
        MPI_Request req;
        MPI_Ibcast((char *)buf + lo, (int)k, MPI_BYTE, root, m->comm, &req);
        gpt2rt_result r = gpt2rt__mpi_wait(&req, deadline, "broadcast", c->rank, c->err, sizeof c->err);
        if (r != GPT2RT_OK) return r;
    }
    return GPT2RT_OK;
}

/* shard r from rank r, one broadcast per shard (shards are contiguous) */
static gpt2rt_result gpt2rt__mpi_all_gather(gpt2rt__comm *c, float *buf, int64_t n) {
    for (int r = 0; r < c->size; r++) {
        int64_t lo = gpt2rt__shard_lo(n, c->size, r), hi = gpt2rt__shard_lo(n, c->size, r + 1);
        gpt2rt_result res = gpt2rt__mpi_broadcast(c, buf + lo, (size_t)(hi - lo) * sizeof(float), r);
        if (res != GPT2RT_OK) return res;
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__mpi_barrier(gpt2rt__comm *c) {
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    MPI_Request req;
    MPI_Ibarrier(m->comm, &req);
    return gpt2rt__mpi_wait(&req, gpt2rt__now() + m->timeout_s, "barrier", c->rank, c->err, sizeof c->err);
}

static void gpt2rt__mpi_destroy(gpt2rt__comm *c) {
    if (!c || !c->impl) return;
    gpt2rt__mpi *m = (gpt2rt__mpi *)c->impl;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m->scratch);
    free(m);
    c->impl = NULL;
}

/* c := the MPI communicator of this process's config (rank, world_size checked
   against mpirun's) */
static gpt2rt_result gpt2rt__mpi_comm(const gpt2rt_config *cfg, gpt2rt__comm *c, char *err, size_t cap) {
    int rank = 0, size = 1;
    memset(c, 0, sizeof *c);
    gpt2rt_result r = gpt2rt__mpi_init(&rank, &size, err, cap);
    if (r != GPT2RT_OK) return r;
    if (rank != cfg->rank || size != cfg->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "MPI says this process is rank %d of %d, the config (or RANK / "
                    "WORLD_SIZE) says rank %d of %d: launch with mpirun -np %d and leave them 0, or make them agree",
                    rank, size, cfg->rank, cfg->world_size, cfg->world_size);
    if (size > GPT2RT__RDV_MAX_PEERS)
        GPT2RT__BAD(GPT2RT_ERR_NOT_IMPLEMENTED, "MPI world of %d processes: at most %d", size, GPT2RT__RDV_MAX_PEERS);
    gpt2rt__mpi *m = (gpt2rt__mpi *)calloc(1, sizeof *m);
    if (!m) GPT2RT__BAD(GPT2RT_ERR_OUT_OF_MEMORY, "MPI communicator: %zu bytes", sizeof *m);
    m->comm = MPI_COMM_NULL;
    m->timeout_s = cfg->timeout_s;
    if (rank == 0 && size > 1) {
        m->scratch = (float *)malloc((size_t)(size - 1) * GPT2RT__MPI_CHUNK * sizeof(float));
        if (!m->scratch) {
            free(m);
            GPT2RT__BAD(GPT2RT_ERR_OUT_OF_MEMORY, "MPI communicator: %lld MiB of scratch on rank 0",
                        (long long)(size - 1) * GPT2RT__MPI_CHUNK * 4 / 1048576);
        }
    }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
        free(m->scratch); free(m);
        GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "MPI_Comm_dup failed on rank %d", rank);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    c->rank = rank; c->size = size; c->impl = m;
    c->all_reduce = gpt2rt__mpi_all_reduce;
    c->reduce_scatter = gpt2rt__mpi_reduce_scatter;
    c->all_gather = gpt2rt__mpi_all_gather;
    c->broadcast = gpt2rt__mpi_broadcast;
    c->barrier = gpt2rt__mpi_barrier;
    c->destroy = gpt2rt__mpi_destroy;
    return GPT2RT_OK;
}

/* the rendezvous through MPI: rank 0's id to every rank */
static gpt2rt_result gpt2rt__mpi_bcast_id(const gpt2rt_config *cfg, unsigned char *id, char *err, size_t cap) {
    int rank = 0, size = 1;
    gpt2rt_result r = gpt2rt__mpi_init(&rank, &size, err, cap);
    if (r != GPT2RT_OK) return r;
    if (rank != cfg->rank || size != cfg->world_size)
        GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "MPI says this process is rank %d of %d, the config says rank %d "
                    "of %d", rank, size, cfg->rank, cfg->world_size);
    MPI_Request req;
    MPI_Ibcast(id, GPT2RT__RDV_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    return gpt2rt__mpi_wait(&req, gpt2rt__now() + cfg->timeout_s, "rendezvous broadcast", rank, err, cap);
}
#endif /* GPT2RT_MPI */

static gpt2rt_result gpt2rt__backward_one(gpt2rt_ctx *ctx); /* 11.4 */

/* ZeRO-1 over processes keeps each rank's moments in its own process: the calls that
   need them all (state files, moment reads) are refused by name (1), not half-done */
static int gpt2rt__proc_sharded(gpt2rt_ctx *ctx, const char *fn) {
    if (!ctx->comm_proc.destroy || ctx->d.shards == 1) return 0;
    gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "%s: with shard_optimizer = 1 over world_size = %d processes each "
                 "process keeps 1/%d of the AdamW moments; gathering them across processes is not implemented yet "
                 "(use shard_optimizer = 0 to save or read them)", fn, ctx->cfg.world_size, ctx->d.shards);
    return 1;
}

/* gpt2rt_backward of a process rank: the one-device backward, whose last micro-step
   sums the gradients over the processes (10.1); then the targets every rank counted,
   so that gpt2rt_param_read(GRAD) gives the gradient of the global mean loss */
static gpt2rt_result gpt2rt__proc_backward(gpt2rt_ctx *ctx) {
    if (ctx->have_loss && ctx->acc_micro >= ctx->cfg.grad_accum)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: data parallel sums the gradients over the "
                            "processes during backward number grad_accum = %d; call gpt2rt_update after at most "
                            "that many", ctx->cfg.grad_accum);
    gpt2rt_result r = gpt2rt__backward_one(ctx);
    if (r != GPT2RT_OK || !ctx->dp_reduced) return r;
    double v = (double)ctx->acc_targets;
    if ((r = gpt2rt__dp_sum(ctx, &v, 1)) != GPT2RT_OK) return r;
    ctx->proc_targets = (int64_t)v;
    return GPT2RT_OK;
}

/* world_size > 1 on the CPU backend: this process is one data-parallel rank (the
   threads of 10.1 are for n_devices > 1 in one process), its communicator MPI's; every
   rank starts from rank 0's weights. */
static gpt2rt_result gpt2rt__proc_open(gpt2rt_ctx *ctx) {
    const gpt2rt_config *c = &ctx->cfg;
    if (c->n_devices > 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: world_size = %d processes x n_devices "
                            "= %d ranks each is not implemented yet on the CPU backend: start %d processes of "
                            "n_devices = 1", c->world_size, c->n_devices, c->world_size * c->n_devices);
#ifdef GPT2RT_MPI
    if (c->rendezvous != GPT2RT_RENDEZVOUS_MPI)
        return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: CPU ranks in separate processes reduce "
                            "with MPI: launch with mpirun (rendezvous = MPI); the %s rendezvous carries NCCL's id "
                            "for CUDA ranks only", c->rendezvous == GPT2RT_RENDEZVOUS_FILE ? "FILE" : "TCP");
    char err[512];
    gpt2rt_result r = gpt2rt__mpi_comm(c, &ctx->comm_proc, err, sizeof err);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", err);
    if (ctx->d.shards > 1 && ctx->comm_proc.size != ctx->d.shards)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_create: the moments are planned for %d "
                            "shards, MPI has %d ranks", ctx->d.shards, ctx->comm_proc.size);
    gpt2rt__dp_attach(ctx, &ctx->comm_proc);
    r = ctx->comm_proc.broadcast(&ctx->comm_proc, ctx->params, (size_t)ctx->n_params * sizeof(float), 0);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: rank 0's weights: %s", ctx->comm_proc.err);
    return GPT2RT_OK;
#else
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: world_size = %d processes on the CPU backend "
                        "reduce with MPI: compile the implementation with mpicc -DGPT2RT_MPI (Debian: apt-get "
                        "install openmpi-bin libopenmpi-dev) and launch with mpirun", c->world_size);
#endif
}
#undef GPT2RT__BAD

/* ==== 11. Public calls ==== */

/* every GPT2RT_DEF function, in the order of the manual's CALLS; each checks its
   arguments and the context, then calls into the sections above */

/* ==== 11.1 Results and names ==== */

GPT2RT_DEF const char *gpt2rt_result_string(gpt2rt_result r) {
    switch (r) {
    case GPT2RT_OK: return "ok";
    case GPT2RT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GPT2RT_ERR_NOT_IMPLEMENTED: return "not implemented yet";
    case GPT2RT_ERR_UNAVAILABLE: return "unavailable";
    case GPT2RT_ERR_OUT_OF_MEMORY: return "out of memory";
    case GPT2RT_ERR_IO: return "i/o error";
    case GPT2RT_ERR_FORMAT: return "bad file format";
    case GPT2RT_ERR_STATE: return "call out of order";
    case GPT2RT_RESULT_COUNT: break;
    }
    return "unknown result";
}

GPT2RT_DEF const char *gpt2rt_mem_name(gpt2rt_mem m) {
    static const char *names[GPT2RT_MEM_COUNT] = {"weights", "master", "grads", "moments", "activations",
                                                  "transient", "logits", "workspace", "comm", "kvcache"};
    if ((int)m < 0 || m >= GPT2RT_MEM_COUNT) return "bookkeeping";
    return names[m];
}

/* ==== 11.2 Plan ==== */

/* The figures of a plan that follow from a resolved config alone (c: n_head and
   n_devices > 0): FLOPs, tokens a step, the advisor's predicted seconds. One function,
   so that gpt2rt_plan and a plan of what a context allocated cannot disagree. */
static void gpt2rt__plan_figures(const gpt2rt_config *c, gpt2rt_memory_plan *plan) {
    gpt2rt__dims d = gpt2rt__dims_of(c);
    plan->flops_per_token = 6.0 * (double)(12 * d.L * d.C * d.C + d.Vp * d.C) + 12.0 * (double)(d.L * d.C * d.T);
    if (d.patches) plan->flops_per_token += 6.0 * (double)((d.PL + d.H) * d.C);
    if (d.infer) plan->flops_per_token /= 3.0; /* the forward alone: a third of forward + backward */
    /* d.BT: token models B x T, patch models every series' patches (B x channels x patches) */
    plan->tokens_per_step = d.BT * c->grad_accum * (c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1) *
                            c->world_size; /* every process its own micro-batches */
    plan->predicted_seconds = gpt2rt__predict_seconds(c, &plan->flops_per_step);
}

/* a config gpt2rt__dims_of may read (it divides by both); a failed plan's is all zero */
static int gpt2rt__plan_resolved(const gpt2rt_config *c) { return c->n_head > 0 && c->n_devices > 0; }

GPT2RT_DEF gpt2rt_result gpt2rt_plan(const gpt2rt_config *config, gpt2rt_memory_plan *plan) {
    if (!plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (!config) {
        snprintf(plan->error, sizeof plan->error, "config is NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &plan->config, plan->error, sizeof plan->error);
    if (r != GPT2RT_OK) return r;
    const gpt2rt_config *c = &plan->config;
    gpt2rt__dims d = gpt2rt__dims_of(c);
    plan->n_devices = c->n_devices;
    gpt2rt__span sp[GPT2RT_MAX_DEVICES];
    gpt2rt__spans_of(c, sp);
    for (int dev = 0; dev < c->n_devices; dev++) gpt2rt__layout(&d, &sp[dev], plan->bytes[dev], NULL);
    gpt2rt__plan_split(c, &d, plan->bytes); /* GPipe's micro-batches in flight, where each backend holds them */
    for (int dev = 0; dev < c->n_devices; dev++) {
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan->total[dev] += plan->bytes[dev][i];
        plan->overhead[dev] = gpt2rt__overhead_estimate(c);
    }
    gpt2rt__param_table(&d, NULL, &plan->n_params_padded, &plan->n_trainable);
    plan->n_params = plan->n_params_padded - (d.Vp - d.V) * d.C;
    gpt2rt__plan_figures(c, plan);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_step_time(const gpt2rt_config *config, const gpt2rt_hardware *hw, int sharded,
                                               gpt2rt_step_time *out, char *err, size_t cap) {
    gpt2rt_config c;
    char why[512];
    if (!config || !hw || !out) {
        if (err && cap) snprintf(err, cap, "gpt2rt_plan_step_time: config, hw and out must not be NULL");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    gpt2rt_result r = gpt2rt__cfg_resolve(config, &c, why, sizeof why);
    if (r == GPT2RT_OK && !(hw->flops_fp32 > 0 && hw->flops_tf32 > 0 && hw->flops_16 > 0 && hw->mem_bw > 0 &&
                            hw->link_bw > 0)) {
        snprintf(why, sizeof why, "gpt2rt_plan_step_time: every gpt2rt_hardware figure must be > 0 (fp32 %g, tf32 %g, "
                 "16-bit %g FLOP/s, memory %g, link %g bytes/s)", hw->flops_fp32, hw->flops_tf32, hw->flops_16,
                 hw->mem_bw, hw->link_bw);
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r == GPT2RT_OK && sharded && c.parallel != GPT2RT_PARALLEL_DATA) {
        snprintf(why, sizeof why, "gpt2rt_plan_step_time: sharded applies to parallel = DATA");
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (r != GPT2RT_OK) {
        if (err && cap) snprintf(err, cap, "%s", why);
        return r;
    }
    gpt2rt__step_time(&c, hw, sharded || c.shard_optimizer, out);
    return GPT2RT_OK;
}

GPT2RT_DEF size_t gpt2rt_plan_format(const gpt2rt_memory_plan *p, char *buf, size_t cap) {
    size_t n = 0;
    if (!p) return 0;
    const gpt2rt_config *c = &p->config;
    char rb[64];
    /* tokens a step from the config the plan holds: gpt2rt_plan_allocated fills the
       config and the bytes, not the planner's figures (it printed 0 here) */
    gpt2rt_memory_plan fig;
    fig.tokens_per_step = p->tokens_per_step;
    if (gpt2rt__plan_resolved(c)) gpt2rt__plan_figures(c, &fig);
    int patches = c->input == GPT2RT_INPUT_PATCHES;
    double trained = c->inference ? 0.0 : (double)(p->n_trainable - (c->frozen & GPT2RT_GROUP_TOKEN_EMBED ? 0
                                                   : p->n_params_padded - p->n_params)) / 1e6;
    if (patches) { /* no vocabulary: the series' shape and the head instead */
        static const char *heads[] = {"lm", "flatten (GPT4TS)", "next patch (aLLM4TS stage 1)",
                                      "patch-wise decoding (aLLM4TS stage 2)"};
        GPT2RT__PUT("GPT-2 L=%d H=%d C=%d P=%d, patches: lookback %d, patch %d stride %d, %lld positions, %d "
                    "channel%s, %s head", c->n_layer, c->n_head, c->n_embd, c->max_seq_len, c->seq_len, c->patch_len,
                    c->patch_stride, (long long)gpt2rt__cfg_n_patches(c), c->n_channels, c->n_channels == 1 ? "" : "s",
                    heads[c->head]);
        if (c->head != GPT2RT_HEAD_NEXT_PATCH) GPT2RT__PUT(", horizon %d", c->horizon);
        GPT2RT__PUT(": %.2fM parameters, %.2fM trained\n", (double)p->n_params / 1e6, trained);
    } else
        GPT2RT__PUT("GPT-2 L=%d H=%d C=%d V=%d (padded %d) P=%d: %.2fM parameters, %.2fM trained\n", c->n_layer,
                    c->n_head, c->n_embd, c->vocab_size, c->padded_vocab, c->max_seq_len, (double)p->n_params / 1e6,
                    trained);
    if (patches) GPT2RT__PUT("B=%d windows x %d channels", c->batch_size, c->n_channels);
    else GPT2RT__PUT("B=%d T=%d", c->batch_size, c->seq_len);
    GPT2RT__PUT(" grad_accum=%d (%lld %s a step), %s, recompute %s, %s backend, %s", c->grad_accum, (long long)fig.tokens_per_step,
                patches ? "positions" : "tokens", gpt2rt__precision_name(c->precision),
                gpt2rt__recompute_name(c, rb, sizeof rb), c->backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU",
                gpt2rt__parallel_name(c->parallel));
    if (c->n_devices > 1) GPT2RT__PUT(" over %d devices", c->n_devices);
    if (c->world_size > 1) GPT2RT__PUT(" x %d processes (this is rank %d)", c->world_size, c->rank);
    if (c->shard_optimizer) GPT2RT__PUT(", optimizer state sharded (ZeRO-1)");
    if (c->frozen) GPT2RT__PUT(", frozen groups 0x%x", c->frozen);
    if (c->inference) GPT2RT__PUT(", inference (forward only)");
    if (c->inference && c->inference_weights == GPT2RT_PRECISION_BF16) GPT2RT__PUT(", bf16 weights (2 bytes each)");
    if (c->classifier_chunk && (int64_t)c->classifier_chunk < (int64_t)c->batch_size * c->seq_len)
        GPT2RT__PUT(", classifier over %d tokens at a time", c->classifier_chunk);
    GPT2RT__PUT("\n");
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT) {
        gpt2rt__span sp[GPT2RT_MAX_DEVICES];
        gpt2rt__spans_of(c, sp);
        GPT2RT__PUT("stages (%s):", c->stage_first_layer[1] ? "stage_first_layer" : "the planner's split");
        for (int dev = 0; dev < c->n_devices; dev++) {
            GPT2RT__PUT(" %d: layers %lld..%lld%s", dev, (long long)sp[dev].l0, (long long)sp[dev].l1 - 1,
                        dev + 1 < c->n_devices ? "," : "\n");
        }
    }
    if (p->n_devices == 1) {
        GPT2RT__PUT("%-12s %16s %12s\n", "category", "bytes", "MiB");
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
            if (i == GPT2RT_MEM_KVCACHE && !p->bytes[0][i]) continue; /* shown when the config asks for one */
            GPT2RT__PUT("%-12s %16llu %12.2f\n", gpt2rt_mem_name((gpt2rt_mem)i),
                        (unsigned long long)p->bytes[0][i], GPT2RT__MIB(p->bytes[0][i]));
        }
        GPT2RT__PUT("%-12s %16llu %12.2f\n", "total", (unsigned long long)p->total[0], GPT2RT__MIB(p->total[0]));
        if (p->overhead[0])
            GPT2RT__PUT("%-12s %16llu %12.2f\n%-12s %16llu %12.2f\n", "+ overhead", (unsigned long long)p->overhead[0],
                        GPT2RT__MIB(p->overhead[0]), "= device", (unsigned long long)(p->total[0] + p->overhead[0]),
                        GPT2RT__MIB(p->total[0] + p->overhead[0]));
    } else {
        GPT2RT__PUT("%-12s", "MiB");
        for (int dev = 0; dev < p->n_devices; dev++) GPT2RT__PUT(" %11s%d", "device ", dev);
        GPT2RT__PUT("\n");
        for (int i = 0; i <= GPT2RT_MEM_COUNT + 2; i++) {
            if (i == GPT2RT_MEM_KVCACHE && !p->config.kv_batch) continue;
            GPT2RT__PUT("%-12s", i < GPT2RT_MEM_COUNT ? gpt2rt_mem_name((gpt2rt_mem)i)
                                 : i == GPT2RT_MEM_COUNT ? "total" : i == GPT2RT_MEM_COUNT + 1 ? "+ overhead" : "= device");
            for (int dev = 0; dev < p->n_devices; dev++) {
                uint64_t v = i < GPT2RT_MEM_COUNT ? p->bytes[dev][i] : i == GPT2RT_MEM_COUNT ? p->total[dev]
                           : i == GPT2RT_MEM_COUNT + 1 ? p->overhead[dev] : p->total[dev] + p->overhead[dev];
                GPT2RT__PUT(" %12.2f", GPT2RT__MIB(v));
            }
            GPT2RT__PUT("\n");
        }
    }
    if (c->parallel == GPT2RT_PARALLEL_LAYER_SPLIT && c->grad_accum > 1)
        GPT2RT__PUT("activations: the %d micro-batches GPipe keeps in flight, %s\n", c->grad_accum,
                    c->backend == GPT2RT_BACKEND_CUDA ? "on each stage" : "on device 0 (the stages share the host)");
    if (c->shard_optimizer && gpt2rt__plan_resolved(c)) {
        /* the gradient padded to equal shards (1.4): its cost on every device */
        gpt2rt__dims d = gpt2rt__dims_of(c);
        gpt2rt__span whole = gpt2rt__span_of(c, 0);
        int64_t held, owned;
        gpt2rt__span_params(&d, &whole, NULL, &held, &owned);
        int64_t pad = gpt2rt__shard_padded(owned, d.shards) - owned;
        GPT2RT__PUT("ZeRO-1 padding: %lld floats, %.2f KiB a device (the gradient's %lld trained floats rounded up to "
                    "%d equal shards of %lld, so the reduce-scatter never falls back to an all-reduce)\n",
                    (long long)pad, (double)pad * 4.0 / 1024.0, (long long)owned, d.shards,
                    (long long)gpt2rt__shard_lo(owned, d.shards, 1));
    }
    if (buf && cap) buf[n < cap ? n : cap - 1] = 0;
    return n;
}

GPT2RT_DEF gpt2rt_result gpt2rt_fit(const gpt2rt_config *config, uint64_t budget, unsigned allow, gpt2rt_config *out,
                                    char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = 0;
    if (!config || !out) {
        GPT2RT__PUT("gpt2rt_fit: %s is NULL\n", !config ? "config" : "out");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    if (!budget) { GPT2RT__PUT("budget_bytes is 0: give the bytes of one device\n"); return GPT2RT_ERR_INVALID_ARGUMENT; }
    gpt2rt_memory_plan base;
    gpt2rt__fit_result fr;
    char r0[64];
    gpt2rt_result r = gpt2rt_plan(config, &base);
    if (r != GPT2RT_OK) { GPT2RT__PUT("%s\n", base.error); return r; }
    if (!allow) allow = GPT2RT_FIT_DEFAULT;
    gpt2rt__fit_search(&base, budget, allow, &fr);
    n = gpt2rt__fit_explain_start(buf, cap, n, &base, budget);
    if (!fr.found) {
        *out = fr.smallest;
        GPT2RT__PUT("nothing reachable fits: the smallest, %s, %s, micro-batch %d x accumulation %d, recompute %s, "
                    "needs %.2f %s\n", gpt2rt__parallel_name(fr.smallest.parallel),
                    gpt2rt__precision_name(fr.smallest.precision), fr.smallest.batch_size, fr.smallest.grad_accum,
                    gpt2rt__recompute_name(&fr.smallest, r0, sizeof r0), GPT2RT__SZ(fr.small_peak));
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    n = gpt2rt__fit_explain_changes(buf, cap, n, &base, &fr.best);
    *out = fr.best.config;
    int bat = 0;
    uint64_t pk = gpt2rt__plan_peak(&fr.best, &bat);
    if (fr.best_changes == 0)
        GPT2RT__PUT("it fits as it is: %.2f %s of %.2f %s on the fullest device (%d)\n", GPT2RT__SZ(pk),
                    GPT2RT__SZ(budget), bat);
    else
        GPT2RT__PUT("result fits: %.2f %s of %.2f %s on the fullest device (%d); predicted %.0f tokens/s "
                    "(was %.0f, a coarse model)\n", GPT2RT__SZ(pk), GPT2RT__SZ(budget), bat,
                    (double)fr.best.tokens_per_step / fr.best.predicted_seconds,
                    (double)base.tokens_per_step / base.predicted_seconds);
    return GPT2RT_OK;
}

/* ==== 11.3 Context ==== */


GPT2RT_DEF gpt2rt_result gpt2rt_create(gpt2rt_ctx **out, const gpt2rt_config *config) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    gpt2rt_config hooks;
    memset(&hooks, 0, sizeof hooks);
    if (config && config->alloc && config->free) {
        hooks.alloc = config->alloc; hooks.free = config->free; hooks.alloc_user = config->alloc_user;
    }
    gpt2rt_ctx *ctx = (gpt2rt_ctx *)gpt2rt__alloc(&hooks, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!ctx) return GPT2RT_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->cfg = hooks;
    ctx->failed = 1;
    ctx->be = &gpt2rt__cpu_backend;
    gpt2rt__comm_self_init(&ctx->comm_self);
    ctx->comm = &ctx->comm_self;
    *out = ctx;
    if (!config) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_create: config is NULL");
    if (config->log) { ctx->cfg.log = config->log; ctx->cfg.log_user = config->log_user; }

    gpt2rt_memory_plan plan;
    gpt2rt_result r = gpt2rt_plan(config, &plan);
    if (r != GPT2RT_OK) return gpt2rt__fail(ctx, r, "gpt2rt_create: %s", plan.error);
    ctx->cfg = plan.config;
    ctx->d = gpt2rt__dims_of(&ctx->cfg);
    ctx->eval = ctx->cfg.inference; /* an inference context evaluates: no dropout unless asked for */
    int split = ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT;
    /* the stages run several micro-batches at once, and a context draws one forward's masks */
    if (split && (ctx->cfg.dropout > 0.0f || ctx->cfg.attn_dropout > 0.0f || ctx->cfg.head_dropout > 0.0f))
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = LAYER_SPLIT with dropout is "
                            "not implemented yet (dropout = %g, attn_dropout = %g, head_dropout = %g): set them to 0, "
                            "or use parallel = DATA", (double)ctx->cfg.dropout, (double)ctx->cfg.attn_dropout,
                            (double)ctx->cfg.head_dropout);
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA && ctx->cfg.parallel == GPT2RT_PARALLEL_DATA && ctx->cfg.world_size > 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = DATA over %d devices in several "
                            "processes (world_size = %d) on the CUDA backend is not implemented yet; use one process "
                            "(world_size = 1, one thread per device), or backend = GPT2RT_BACKEND_CPU",
                            ctx->cfg.n_devices, ctx->cfg.world_size);
#ifndef GPT2RT__COMM_THREADS
    if (ctx->cfg.parallel != GPT2RT_PARALLEL_NONE)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = %s needs POSIX threads, "
                            "which this build lacks", split ? "LAYER_SPLIT" : "DATA");
#endif
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA && split && ctx->cfg.input == GPT2RT_INPUT_PATCHES)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: parallel = LAYER_SPLIT with patch inputs "
                            "on the CUDA backend is not implemented yet (its stages feed tokens): use one device, "
                            "or backend = GPT2RT_BACKEND_CPU");
    /* aLLM4TS's heads: planned for every backend and mode (gpt2rt_plan); run on the CPU (one
       device or data parallel) and on one CUDA device */
    if (ctx->d.seqhead && ctx->cfg.backend == GPT2RT_BACKEND_CUDA && ctx->cfg.parallel != GPT2RT_PARALLEL_NONE)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: head = %s runs on one CUDA device for now "
                            "(backend = %s, parallel = %s): set parallel = GPT2RT_PARALLEL_NONE, or backend = "
                            "GPT2RT_BACKEND_CPU for data parallel",
                            ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH ? "NEXT_PATCH" : "PATCH_DECODE",
                            ctx->cfg.backend == GPT2RT_BACKEND_CUDA ? "CUDA" : "CPU",
                            ctx->cfg.parallel == GPT2RT_PARALLEL_DATA ? "DATA" : split ? "LAYER_SPLIT" : "NONE");
    /* data parallel runs them (10.1); under layer split the last stage's loss would need what
       the first stage computes from x (stage 1's target patches, RevIN's statistics), which
       neither the plan nor the stages carry yet */
    if (ctx->d.seqhead && split)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: head = %s with parallel = LAYER_SPLIT is "
                            "not implemented (the last stage's loss needs the patches and RevIN statistics the first "
                            "stage computes): use parallel = GPT2RT_PARALLEL_DATA over the %d devices, or "
                            "GPT2RT_PARALLEL_NONE",
                            ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH ? "NEXT_PATCH" : "PATCH_DECODE", ctx->cfg.n_devices);
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA && ctx->cfg.kv_batch && ctx->cfg.parallel != GPT2RT_PARALLEL_NONE)
        return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "gpt2rt_create: generation (kv_batch = %d) on the CUDA "
                            "backend runs on one device (parallel = %s is not implemented for it): set parallel = "
                            "NONE, or kv_batch = 0", ctx->cfg.kv_batch, split ? "LAYER_SPLIT" : "DATA");
    if (ctx->cfg.backend == GPT2RT_BACKEND_CUDA) {
        /* sets ctx->be (8.6); refuses where the implementation was compiled without CUDA */
        if ((r = gpt2rt__cuda_open(ctx, &plan)) != GPT2RT_OK) return r;
        gpt2rt__reset_training(ctx);
        if (ctx->cfg.parallel == GPT2RT_PARALLEL_DATA && (r = gpt2rt__dp_open(ctx, &plan)) != GPT2RT_OK) return r;
        ctx->failed = 0;
        gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: %.2fM parameters, %.1f MiB planned and allocated on CUDA device %d%s",
                    (double)plan.n_params / 1e6, (double)plan.total[0] / 1048576.0, ctx->cfg.device_ids[0],
                    ctx->n_ranks > 1 ? " and as much on each further data-parallel rank's" : "");
        return GPT2RT_OK;
    }
    uint64_t free_bytes = gpt2rt__host_available();
    /* memory_budget is bytes per device, against the plan's fullest device, as gpt2rt_plan and
       gpt2rt_fit count it (CPU layer split: device 0 holds the further micro-batches' sets) */
    uint64_t per_device = 0;
    for (int i = 0; i < plan.n_devices; i++) per_device = plan.total[i] > per_device ? plan.total[i] : per_device;
    /* CPU ranks share the host: data parallel needs n_devices times one device's plan */
    uint64_t host = plan.total[0] * (uint64_t)(ctx->cfg.parallel == GPT2RT_PARALLEL_DATA ? ctx->cfg.n_devices : 1);
    if (split) { /* CPU layer split (10.2): one device's arenas, then an activation set per further
                    micro-batch and a transient + workspace per further stage */
        gpt2rt__span whole;
        whole.l0 = 0; whole.l1 = ctx->d.L; whole.first = whole.last = 1;
        gpt2rt__layout(&ctx->d, &whole, plan.bytes[0], NULL);
        plan.total[0] = 0;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan.total[0] += plan.bytes[0][i];
        host = plan.total[0] + (uint64_t)(ctx->cfg.grad_accum - 1) * plan.bytes[0][GPT2RT_MEM_ACTIVATIONS] +
               (uint64_t)(ctx->cfg.n_devices - 1) * (plan.bytes[0][GPT2RT_MEM_TRANSIENT] +
                                                     plan.bytes[0][GPT2RT_MEM_WORKSPACE]);
    }
    if (ctx->cfg.memory_budget && per_device > ctx->cfg.memory_budget)
        return gpt2rt__fail_oom(ctx, &plan, ctx->cfg.memory_budget, free_bytes, NULL, 0);
    if (free_bytes && host > free_bytes)
        return gpt2rt__fail_oom(ctx, &plan, free_bytes / (host / plan.total[0]), free_bytes, NULL, 0);
    if (plan.total[0] > (uint64_t)SIZE_MAX)
        return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: the plan needs %llu bytes, more than "
                            "this machine can address", (unsigned long long)plan.total[0]);
    if ((r = gpt2rt__ctx_alloc(ctx, &plan)) != GPT2RT_OK) return r;
    gpt2rt__init_params(ctx);
    gpt2rt__reset_training(ctx);
    if (ctx->cfg.parallel == GPT2RT_PARALLEL_DATA &&
        (r = ctx->cfg.world_size > 1 ? gpt2rt__proc_open(ctx) : gpt2rt__dp_open(ctx, &plan)) != GPT2RT_OK) return r;
    if (split && (r = gpt2rt__ls_open(ctx)) != GPT2RT_OK) return r;
    ctx->failed = 0;
    gpt2rt__log(ctx, GPT2RT_LOG_INFO, "gpt2rt: %.2fM parameters, %.1f MiB planned and allocated, %d thread(s)%s",
                (double)plan.n_params / 1e6, (double)plan.total[0] / 1048576.0, ctx->d.nt,
                ctx->n_ranks > 1 ? " on each of the data-parallel ranks" : "");
    return GPT2RT_OK;
}


/* the parameter table and the arenas of the plan's device 0, the pointers bound */
static gpt2rt_result gpt2rt__ctx_alloc(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    ctx->n_tensors = gpt2rt__param_table(&ctx->d, NULL, NULL, NULL);
    ctx->tensors = (gpt2rt__tensor *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__tensor),
                                                   GPT2RT_MEM_BOOKKEEPING);
    if (!ctx->tensors) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_create: parameter table");
    gpt2rt__param_table(&ctx->d, ctx->tensors, NULL, NULL);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        uint64_t b = plan->bytes[0][i];
        if (!b) continue;
        ctx->arena[i] = gpt2rt__alloc(&ctx->cfg, (size_t)b, i);
        if (!ctx->arena[i]) {
            char what[160];
            snprintf(what, sizeof what, "allocating %llu bytes (%.1f MiB) for %s failed",
                     (unsigned long long)b, GPT2RT__MIB(b), gpt2rt_mem_name((gpt2rt_mem)i));
            return gpt2rt__fail_oom(ctx, plan, 0, gpt2rt__host_available(), what, 1);
        }
        ctx->arena_bytes[i] = b;
    }
    gpt2rt__span whole = gpt2rt__span_of(&ctx->cfg, 0);
    if (ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT) { /* the CPU stages share one context: all of it */
        whole.l0 = 0; whole.l1 = ctx->d.L; whole.first = whole.last = 1;
    }
    uint64_t bytes[GPT2RT_MEM_COUNT];
    memcpy(bytes, plan->bytes[0], sizeof bytes);
    gpt2rt__layout(&ctx->d, &whole, bytes, ctx); /* binds the pointers; same sizes as planned */
    return GPT2RT_OK;
}


GPT2RT_DEF void gpt2rt_free(gpt2rt_ctx *ctx) {
    if (!ctx) return;
    if (ctx->comm_proc.destroy) ctx->comm_proc.destroy(&ctx->comm_proc);
    ctx->be->release_shared(ctx);
    for (int r = 1; r < ctx->n_ranks; r++) gpt2rt_free(ctx->ranks[r]);
    gpt2rt__ls_free(ctx);
#ifdef GPT2RT__COMM_THREADS
    if (ctx->group) {
        gpt2rt__comm_group_free((gpt2rt__comm_group *)ctx->group);
        gpt2rt__free(&ctx->cfg, ctx->group, GPT2RT_MEM_BOOKKEEPING);
    }
#endif
    ctx->be->release(ctx);
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) gpt2rt__free(&ctx->cfg, ctx->arena[i], i);
    gpt2rt__free(&ctx->cfg, ctx->tensors, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt_config hooks = ctx->cfg;
    gpt2rt__free(&hooks, ctx, GPT2RT_MEM_BOOKKEEPING);
}

GPT2RT_DEF const char *gpt2rt_last_error(const gpt2rt_ctx *ctx) {
    if (!ctx) return "no context (allocating the context itself failed)";
    return ctx->error;
}

GPT2RT_DEF gpt2rt_config gpt2rt_config_get(const gpt2rt_ctx *ctx) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    if (ctx) c = ctx->cfg;
    return c;
}

GPT2RT_DEF gpt2rt_result gpt2rt_plan_allocated(const gpt2rt_ctx *ctx, gpt2rt_memory_plan *plan) {
    if (!ctx || !plan) return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(plan, 0, sizeof *plan);
    if (ctx->failed) return GPT2RT_ERR_STATE;
    plan->config = ctx->cfg;
    plan->n_devices = ctx->n_ranks > 1 ? ctx->n_ranks : 1;
    /* CUDA: the device arenas (the host holds the fp32 weights) and the driver's own bytes;
       data parallel: each rank's */
    for (int r = 0; r < (ctx->n_ranks > 1 ? ctx->n_ranks : 1); r++) {
        const gpt2rt_ctx *rc = r ? ctx->ranks[r] : ctx;
        rc->be->allocated(rc, plan->bytes[r], &plan->overhead[r]);
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++) plan->total[r] += plan->bytes[r][i];
    }
    if (ctx->ls && ctx->ls->ops) ctx->ls->ops->allocated(ctx, plan); /* CUDA (8.7) */
    else if (ctx->ls) { /* CPU layer split: the context's arenas and micro-batches 1.. 's activations on
                      device 0; stage s's transient and workspace on device s */
        const gpt2rt__ls *ls = ctx->ls;
        plan->n_devices = ls->n;
        plan->bytes[0][GPT2RT_MEM_ACTIVATIONS] += (uint64_t)(ls->m - 1) * ls->act_bytes;
        plan->total[0] += (uint64_t)(ls->m - 1) * ls->act_bytes;
        for (int s = 1; s < ls->n; s++) {
            plan->bytes[s][GPT2RT_MEM_TRANSIENT] = ls->scratch_bytes[0];
            plan->bytes[s][GPT2RT_MEM_WORKSPACE] = ls->scratch_bytes[1];
            plan->total[s] = ls->scratch_bytes[0] + ls->scratch_bytes[1];
        }
    }
    plan->n_params_padded = ctx->n_params;
    plan->n_params = ctx->n_params - (ctx->d.Vp - ctx->d.V) * ctx->d.C;
    plan->n_trainable = ctx->n_train;
    gpt2rt__plan_figures(&ctx->cfg, plan); /* tokens a step, FLOPs, seconds: as gpt2rt_plan says */
    return GPT2RT_OK;
}

/* ==== 11.4 Training ==== */

/* the training calls on an inference context (config.inference = 1): it holds no
   gradients and no AdamW moments, so fn has nothing to work on */
static gpt2rt_result gpt2rt__training_only(gpt2rt_ctx *ctx, const char *fn, const char *needs) {
    if (!ctx->cfg.inference) return GPT2RT_OK;
    return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context was created with config.inference = 1 (weights, "
                        "KV cache and a forward workspace only: 0 bytes of gradients and AdamW moments), and %s "
                        "needs %s; create the context with inference = 0 to train", fn, fn, needs);
}

/* the calls that read the weights as fp32 arrays (the training forward, the file writer) on
   a context whose weights are bf16 (config.inference_weights): generation and
   gpt2rt_param_read are what it offers */
static gpt2rt_result gpt2rt__w16_refuse(gpt2rt_ctx *ctx, const char *fn) {
    if (!ctx->params16) return GPT2RT_OK;
    return gpt2rt__fail(ctx, GPT2RT_ERR_NOT_IMPLEMENTED, "%s: this context holds its weights in bf16 "
                        "(config.inference_weights = BF16), and %s is implemented for fp32 weights only; "
                        "gpt2rt_generate and gpt2rt_param_read work here (create the context with "
                        "inference_weights = FP32 for %s)", fn, fn, fn);
}

/* the call fn is made for the context's input kind (series: the _series calls) */
static gpt2rt_result gpt2rt__input_kind(gpt2rt_ctx *ctx, const char *fn, int series) {
    if (ctx->d.patches == series) return GPT2RT_OK;
    return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context has input = %s; use %s", fn,
                        ctx->d.patches ? "PATCHES (time series)" : "TOKENS",
                        ctx->d.patches ? "gpt2rt_forward_series / gpt2rt_step_series / gpt2rt_predictions"
                                       : "gpt2rt_forward / gpt2rt_step / gpt2rt_logits");
}

GPT2RT_DEF gpt2rt_result gpt2rt_mode_set(gpt2rt_ctx *ctx, gpt2rt_mode mode) {
    GPT2RT__CHECK_CTX(ctx);
    if ((int)mode < 0 || mode > GPT2RT_MODE_EVAL)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_mode_set: mode = %d is not a gpt2rt_mode "
                            "(GPT2RT_MODE_TRAIN = 0, GPT2RT_MODE_EVAL = 1)", (int)mode);
    ctx->eval = mode == GPT2RT_MODE_EVAL;
    for (int i = 1; i < ctx->n_ranks; i++) ctx->ranks[i]->eval = ctx->eval; /* data parallel: every rank */
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_mode gpt2rt_mode_get(const gpt2rt_ctx *ctx) {
    return ctx && ctx->eval ? GPT2RT_MODE_EVAL : GPT2RT_MODE_TRAIN;
}

static gpt2rt_result gpt2rt__forward_one(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                         int fuse) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_forward") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    const gpt2rt__dims *d = &ctx->d;
    if (d->patches) return gpt2rt__input_kind(ctx, "gpt2rt_forward", 0);
    if (!inputs) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward: inputs is NULL");
    gpt2rt_result r = gpt2rt__input_tokens_check(ctx, "gpt2rt_forward", inputs, targets);
    if (r != GPT2RT_OK) return r;
    return ctx->be->forward(ctx, inputs, targets, loss, fuse);
}

static gpt2rt_result gpt2rt__backward_one(gpt2rt_ctx *ctx) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_backward") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!ctx->have_loss)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: needs a gpt2rt_forward with targets first "
                            "(and at most one backward per forward)");
    /* one fixed scale for every micro-batch; the update divides by the counted targets */
    gpt2rt_result r = ctx->be->backward(ctx);
    if (r != GPT2RT_OK) return r;
    ctx->acc_loss_sum += ctx->loss_sum;
    ctx->acc_targets += ctx->n_targets;
    ctx->acc_micro++;
    ctx->have_loss = ctx->have_logits = 0; /* the logits became dlogits */
    ctx->grads_pending = 1;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__update_one(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_update") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_update: no gradients since the last update "
                            "(call gpt2rt_backward first)");
    return gpt2rt__opt_update(ctx, ctx->be->update, stats);
}

static gpt2rt_result gpt2rt__step_one(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets,
                                     gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_step", 0);
    if (!inputs || !targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step: %s is NULL", inputs ? "targets" : "inputs");
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_step: gradients from an earlier gpt2rt_backward are "
                            "waiting for gpt2rt_update");
    double t0 = gpt2rt__now();
    int64_t BT = ctx->d.BT;
    gpt2rt_result r = GPT2RT_OK;
    /* grad_accum micro-batches of B rows each, then one update */
    for (int k = 0; k < ctx->cfg.grad_accum && r == GPT2RT_OK; k++) {
        r = gpt2rt__forward_one(ctx, inputs + k * BT, targets + k * BT, NULL, 1);
        if (r == GPT2RT_OK) r = gpt2rt__backward_one(ctx);
    }
    if (r != GPT2RT_OK && ctx->grads_pending) { /* bad input in a later micro-batch: drop the partial sums */
        (void)ctx->be->zero_grads(ctx, 0);
        gpt2rt__accum_reset(ctx);
    }
    if (r == GPT2RT_OK) r = gpt2rt__update_one(ctx, stats);
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

static gpt2rt_result gpt2rt__logits_one(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    if (d->patches) return gpt2rt__input_kind(ctx, "gpt2rt_logits", 0);
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_logits: dst is NULL");
    if (count != d->BT * d->V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_logits: dst holds %lld floats, needs "
                            "B*T*vocab = %lld*%lld*%lld = %lld", (long long)count, (long long)d->B, (long long)d->T,
                            (long long)d->V, (long long)(d->BT * d->V));
    if (d->hc < d->BT)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_logits: classifier_chunk = %d holds the logits of %lld "
                            "tokens at a time, never all B*T = %lld; create the context with classifier_chunk = 0 "
                            "to read them", ctx->cfg.classifier_chunk, (long long)d->hc, (long long)d->BT);
    if (!ctx->have_logits)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_logits: no logits (call gpt2rt_forward; gpt2rt_backward "
                            "consumes them)");
    return ctx->be->logits(ctx, dst);
}

static gpt2rt_result gpt2rt__forward_series_one(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_forward_series", 1);
    if (r != GPT2RT_OK) return r;
    if (!x) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward_series: x is NULL");
    if ((r = gpt2rt__ts_check(ctx, "gpt2rt_forward_series", x, y)) != GPT2RT_OK) return r;
    return ctx->be->forward_series(ctx, x, y, loss);
}

static gpt2rt_result gpt2rt__step_series_one(gpt2rt_ctx *ctx, const float *x, const float *y, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_step_series", 1);
    if (r != GPT2RT_OK) return r;
    if (!x || (!y && ctx->d.seqhead != GPT2RT_HEAD_NEXT_PATCH)) /* NEXT_PATCH: the targets are in x */
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step_series: %s is NULL", x ? "y" : "x");
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_step_series: gradients from an earlier gpt2rt_backward "
                            "are waiting for gpt2rt_update");
    double t0 = gpt2rt__now();
    const gpt2rt__dims *d = &ctx->d;
    /* grad_accum micro-batches of Bw windows each, then one update */
    for (int k = 0; k < ctx->cfg.grad_accum && r == GPT2RT_OK; k++) {
        r = gpt2rt__forward_series_one(ctx, x + k * d->Bw * d->Lb * d->M, y ? y + k * d->Bw * d->H * d->M : NULL, NULL);
        if (r == GPT2RT_OK) r = gpt2rt__backward_one(ctx);
    }
    if (r != GPT2RT_OK && ctx->grads_pending) { /* bad input in a later micro-batch: drop the partial sums */
        (void)ctx->be->zero_grads(ctx, 0);
        gpt2rt__accum_reset(ctx);
    }
    if (r == GPT2RT_OK) r = gpt2rt__update_one(ctx, stats);
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

static gpt2rt_result gpt2rt__predictions_one(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_predictions", 1);
    if (r != GPT2RT_OK) return r;
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_predictions: dst is NULL");
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_predictions: head = NEXT_PATCH (aLLM4TS's stage "
                            "1) forecasts no horizon; its loss is the next-patch MSE of gpt2rt_forward_series");
    if (count != d->n_out)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_predictions: dst holds %lld floats, needs "
                            "B*horizon*M = %lld*%lld*%lld = %lld", (long long)count, (long long)d->Bw, (long long)d->H,
                            (long long)d->M, (long long)d->n_out);
    if (!ctx->have_pred)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_predictions: no predictions (call gpt2rt_forward_series; "
                            "a load or gpt2rt_param_write forgets them)");
    return ctx->be->predictions(ctx, dst);
}


/* layer split (10.2): gpt2rt_step's micro-batches pipelined through the stages, then
   the update as on one device; every micro-batch is checked before any stage starts */
static gpt2rt_result gpt2rt__ls_step(gpt2rt_ctx *ctx, const char *fn, const void *a, const void *b,
                                     gpt2rt_step_stats *stats) {
    const gpt2rt__dims *d = &ctx->d;
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: gradients from an earlier gpt2rt_backward are waiting for "
                            "gpt2rt_update", fn);
    double t0 = gpt2rt__now();
    for (int64_t k = 0; k < ctx->cfg.grad_accum; k++) {
        gpt2rt_result r = d->patches
            ? gpt2rt__ts_check(ctx, fn, (const float *)a + k * d->Bw * d->Lb * d->M, (const float *)b + k * d->n_out)
            : gpt2rt__input_tokens_check(ctx, fn, (const int32_t *)a + k * d->BT, (const int32_t *)b + k * d->BT);
        if (r != GPT2RT_OK) return r;
    }
    gpt2rt_result r = gpt2rt__ls_accumulate(ctx, a, b);
    if (r == GPT2RT_OK) r = ctx->ls->ops ? ctx->ls->ops->update(ctx, stats) : gpt2rt__update_one(ctx, stats);
    if (r == GPT2RT_OK && stats) stats->seconds = gpt2rt__now() - t0;
    return r;
}

/* ---- the public calls: one device, or every data-parallel rank ---- */

GPT2RT_DEF gpt2rt_result gpt2rt_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__w16_refuse(ctx, "gpt2rt_forward"));
    if (ctx->n_ranks <= 1) return gpt2rt__forward_one(ctx, inputs, targets, loss, 0);
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_forward", 0);
    if (!inputs) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward: inputs is NULL");
    return gpt2rt__dp_forward(ctx, "gpt2rt_forward", GPT2RT__DP_FORWARD, inputs, targets, loss);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    if (ctx->n_ranks <= 1) return gpt2rt__forward_series_one(ctx, x, y, loss);
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_forward_series", 1);
    if (r != GPT2RT_OK) return r;
    if (!x) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward_series: x is NULL");
    return gpt2rt__dp_forward(ctx, "gpt2rt_forward_series", GPT2RT__DP_FORWARD_SERIES, x, y, loss);
}

GPT2RT_DEF gpt2rt_result gpt2rt_backward(gpt2rt_ctx *ctx) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_backward", "the gradients and the saved activations"));
    if (ctx->n_ranks <= 1) return ctx->comm_proc.destroy ? gpt2rt__proc_backward(ctx) : gpt2rt__backward_one(ctx);
    if (ctx->have_loss && ctx->acc_micro >= ctx->cfg.grad_accum)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: data parallel sums the gradients over the "
                            "ranks during backward number grad_accum = %d; call gpt2rt_update after at most that "
                            "many", ctx->cfg.grad_accum);
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_BACKWARD, NULL, NULL, jobs);
    /* a device backward that stopped halfway left partial sums */
    int drop = r != GPT2RT_OK && (ctx->ranks[1]->grads_pending != ctx->grads_pending || ctx->be != &gpt2rt__cpu_backend);
    if (drop) gpt2rt__dp_drop(ctx);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_update", "the gradients and the AdamW moments"));
    if (ctx->n_ranks <= 1) return gpt2rt__update_one(ctx, stats);
    double t0 = gpt2rt__now();
    gpt2rt__dp_job jobs[GPT2RT_MAX_DEVICES];
    gpt2rt_result r = gpt2rt__dp_run(ctx, GPT2RT__DP_UPDATE, NULL, NULL, jobs);
    if (r == GPT2RT_OK && stats) { *stats = jobs[0].stats; stats->seconds = gpt2rt__now() - t0; }
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_step(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets,
                                     gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_step", "the gradients and the AdamW moments"));
    if (ctx->ls && !ctx->d.patches && inputs && targets) return gpt2rt__ls_step(ctx, "gpt2rt_step", inputs, targets, stats);
    if (ctx->n_ranks <= 1) return gpt2rt__step_one(ctx, inputs, targets, stats);
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_step", 0);
    if (!inputs || !targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step: %s is NULL", inputs ? "targets" : "inputs");
    return gpt2rt__dp_step(ctx, "gpt2rt_step", GPT2RT__DP_STEP, inputs, targets, stats);
}

GPT2RT_DEF gpt2rt_result gpt2rt_schedule_set(gpt2rt_ctx *ctx, int warmup_steps, int total_steps) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_schedule_set", "an optimizer"));
    if (warmup_steps < 0 || total_steps < 0 || (total_steps && warmup_steps > total_steps))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_schedule_set: warmup_steps = %d, total_steps = "
                            "%d: each must be >= 0 and warmup_steps <= total_steps (total_steps 0: a constant rate "
                            "after the warmup)", warmup_steps, total_steps);
    /* every data-parallel rank computes the rate of its own update */
    for (int r = 0; r < (ctx->n_ranks > 1 ? ctx->n_ranks : 1); r++) {
        gpt2rt_ctx *rc = r ? ctx->ranks[r] : ctx;
        rc->cfg.warmup_steps = warmup_steps;
        rc->cfg.total_steps = total_steps;
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_step_series(gpt2rt_ctx *ctx, const float *x, const float *y, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_step_series", "the gradients and the AdamW moments"));
    if (ctx->ls && ctx->d.patches && x && y) return gpt2rt__ls_step(ctx, "gpt2rt_step_series", x, y, stats);
    if (ctx->n_ranks <= 1) return gpt2rt__step_series_one(ctx, x, y, stats);
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_step_series", 1);
    if (r != GPT2RT_OK) return r;
    if (!x || (!y && ctx->d.seqhead != GPT2RT_HEAD_NEXT_PATCH)) /* NEXT_PATCH: the targets are in x */
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step_series: %s is NULL", x ? "y" : "x");
    return gpt2rt__dp_step(ctx, "gpt2rt_step_series", GPT2RT__DP_STEP_SERIES, x, y, stats);
}


GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_logits") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (ctx->n_ranks <= 1) return gpt2rt__logits_one(ctx, dst, count);
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_logits", 0);
    return gpt2rt__dp_gather_out(ctx, "gpt2rt_logits", dst, count, 0);
}

GPT2RT_DEF gpt2rt_result gpt2rt_predictions(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    if (ctx->n_ranks <= 1) return gpt2rt__predictions_one(ctx, dst, count);
    gpt2rt_result r = gpt2rt__input_kind(ctx, "gpt2rt_predictions", 1);
    if (r != GPT2RT_OK) return r;
    return gpt2rt__dp_gather_out(ctx, "gpt2rt_predictions", dst, count, 1);
}


/* ==== 11.5 Weights and training state files ==== */

GPT2RT_DEF gpt2rt_result gpt2rt_weights_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_weights_load") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!path) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_load: path is NULL");
    char file[4096];
    if (!gpt2rt__in_dir(path, "model.safetensors", file, sizeof file))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_load: path longer than %d bytes",
                            (int)sizeof file - 20);
    unsigned char *buf;
    size_t len;
    gpt2rt_result r = gpt2rt__read_file(ctx, file, &buf, &len);
    if (r != GPT2RT_OK) return r;
    r = gpt2rt__weights_load_mem(ctx, buf, len, file);
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    if (r == GPT2RT_OK) r = ctx->be->upload(ctx, NULL, NULL); /* CUDA: every rank's device */
    if (r == GPT2RT_OK) gpt2rt__dp_sync(ctx, 1);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_config_load(gpt2rt_config *config, const char *path, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!config || !path) {
        if (err && cap) snprintf(err, cap, "gpt2rt_config_load: %s is NULL", config ? "path" : "config");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    /* a context that only carries the allocator, the log and the message */
    gpt2rt_ctx *tmp = (gpt2rt_ctx *)gpt2rt__alloc(config, sizeof(gpt2rt_ctx), GPT2RT_MEM_BOOKKEEPING);
    if (!tmp) {
        if (err && cap) snprintf(err, cap, "gpt2rt_config_load: out of memory");
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    memset(tmp, 0, sizeof *tmp);
    tmp->cfg = *config;
    char file[4096];
    gpt2rt_result r;
    unsigned char *buf = NULL;
    size_t len = 0;
    if (!gpt2rt__in_dir(path, "config.json", file, sizeof file))
        r = gpt2rt__fail(tmp, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_config_load: path longer than %d bytes",
                         (int)sizeof file - 20);
    else if ((r = gpt2rt__read_file(tmp, file, &buf, &len)) == GPT2RT_OK)
        r = gpt2rt__config_parse_mem(tmp, (char *)buf, len, file, config);
    gpt2rt__free(config, buf, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK && err && cap) { /* copied, cut at cap: snprintf("%s") here draws gcc 12's -Wformat-truncation
                                          once a caller with a short buffer inlines this */
        size_t n = strlen(tmp->error);
        if (n > cap - 1) n = cap - 1;
        memcpy(err, tmp->error, n);
        err[n] = 0;
    }
    gpt2rt__free(config, tmp, GPT2RT_MEM_BOOKKEEPING);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_weights_save(gpt2rt_ctx *ctx, const char *dir) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__w16_refuse(ctx, "gpt2rt_weights_save"));
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_weights_save") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!dir || strlen(dir) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_weights_save: dir is NULL or too long");
    if (!gpt2rt__mkdir(dir)) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
    gpt2rt_result rc = ctx->be->host_weights(ctx);
    if (rc != GPT2RT_OK) return rc;
    char path[4200], tmp[4200], cpath[4200], ctmp[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s/model.safetensors.tmp", dir);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(ctmp, sizeof ctmp, "%s/config.json.tmp", dir);
    gpt2rt__st_out *outs = (gpt2rt__st_out *)gpt2rt__alloc(&ctx->cfg, (size_t)ctx->n_tensors * sizeof(gpt2rt__st_out),
                                                           GPT2RT_MEM_BOOKKEEPING);
    if (!outs) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_weights_save: table");
    for (int i = 0; i < ctx->n_tensors; i++) {
        const gpt2rt__tensor *t = &ctx->tensors[i];
        outs[i].name = t->name;
        outs[i].src = ctx->params + t->off;
        outs[i].rows = t->hf_rows;
        outs[i].cols = t->cols;
        outs[i].transpose = t->transpose;
        outs[i].ndim = t->ndim;
    }
    const char *meta[2] = {"format", "pt"}; /* transformers requires it */
    gpt2rt_result r = gpt2rt__st_write(ctx, tmp, path, outs, ctx->n_tensors, meta, 2);
    gpt2rt__free(&ctx->cfg, outs, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    int64_t c_vocab = ctx->cfg.vocab_size; /* d->V, except patch models (no vocabulary: the configured one) */
    FILE *f = fopen(ctmp, "wb");
    int ok = f && fprintf(f,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
        "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
        "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
        "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
        "  \"reorder_and_upcast_attn\": false,\n  \"tie_word_embeddings\": true,\n"
        "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n  \"torch_dtype\": \"float32\"\n}\n",
        (long long)c_vocab, (long long)d->P, (long long)d->P, (long long)d->C, (long long)d->L, (long long)d->NH,
        (long long)(c_vocab - 1), (long long)(c_vocab - 1)) > 0;
    if ((r = gpt2rt__write_close(ctx, f, ctmp, cpath, ok)) != GPT2RT_OK) { remove(tmp); return r; }
    /* Two renames cannot replace a pair at once. The old model.safetensors stays under
       a second name (a hard link on POSIX, so the path never goes missing) until
       config.json is in place: when the second rename fails, the old pair comes back. */
    char old[4200];
    snprintf(old, sizeof old, "%s/model.safetensors.old", dir);
    remove(old);
    struct stat sb;
    int is_file = stat(path, &sb) == 0 && GPT2RT__IS_REG(sb.st_mode), have_old = 0;
#ifndef _WIN32
    have_old = is_file && link(path, old) == 0;
#endif
    if (is_file && !have_old) have_old = rename(path, old) == 0; /* no hard links here */
    if (is_file && !have_old) {
        int e = errno;
        remove(tmp); remove(ctmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot keep the previous %s as %s while saving: %s (nothing was "
                            "replaced)", path, old, strerror(e));
    }
    if ((r = gpt2rt__rename(ctx, tmp, path)) != GPT2RT_OK) {
        remove(ctmp);
        if (have_old) remove(old); /* path was not replaced (rename() of two links to one file is a no-op) */
        return r;
    }
    if ((r = gpt2rt__rename(ctx, ctmp, cpath)) != GPT2RT_OK) {
        int back = have_old ? rename(old, path) == 0 : remove(path) == 0;
        if (!back) {
            char first[sizeof ctx->error];
            snprintf(first, sizeof first, "%s", ctx->error);
            gpt2rt__fail(ctx, r, "%s; putting the previous %s back failed too: %s (the previous weights are in %s)",
                         first, path, strerror(errno), have_old ? old : "(none)");
        }
        return r;
    }
    if (have_old) remove(old);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_state_save(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_state_save") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_state_save", "the AdamW moments (gpt2rt_weights_save "
                                      "writes the weights)"));
    if (gpt2rt__proc_sharded(ctx, "gpt2rt_state_save")) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!path || strlen(path) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_state_save: path is NULL or too long");
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_state_save: gradients are waiting for gpt2rt_update; "
                            "save between optimizer steps");
    const gpt2rt__dims *d = &ctx->d;
    char v[9][32], tmp[4200];
    snprintf(v[0], 32, "%lld", (long long)d->L); snprintf(v[1], 32, "%lld", (long long)d->NH);
    snprintf(v[2], 32, "%lld", (long long)d->C); snprintf(v[3], 32, "%lld", (long long)d->V);
    snprintf(v[4], 32, "%lld", (long long)d->Vp); snprintf(v[5], 32, "%lld", (long long)d->P);
    snprintf(v[6], 32, "%lld", (long long)ctx->step); snprintf(v[7], 32, "%llu", (unsigned long long)ctx->rng);
    snprintf(v[8], 32, "%u", ctx->cfg.frozen);
    char tv[8][32];
    snprintf(tv[6], 32, "%d", (int)ctx->cfg.head); snprintf(tv[7], 32, "%d", (int)ctx->cfg.attn_mask);
    snprintf(tv[0], 32, "%d", ctx->cfg.seq_len); snprintf(tv[1], 32, "%lld", (long long)d->PL);
    snprintf(tv[2], 32, "%lld", (long long)d->PS); snprintf(tv[3], 32, "%lld", (long long)d->M);
    snprintf(tv[4], 32, "%lld", (long long)d->H); snprintf(tv[5], 32, "%d", d->affine);
    /* patch models add their shape (token states keep the keys they always had) */
    const char *meta[] = {"format", "gpt2rt-state-1", "n_layer", v[0], "n_head", v[1], "n_embd", v[2],
                          "vocab_size", v[3], "padded_vocab", v[4], "max_seq_len", v[5], "step", v[6], "rng", v[7],
                          "frozen", v[8], "seq_len", tv[0], "patch_len", tv[1], "patch_stride", tv[2],
                          "n_channels", tv[3], "horizon", tv[4], "revin_affine", tv[5], "head", tv[6],
                          "attn_mask", tv[7]};
    int n_meta = (int)(sizeof meta / sizeof meta[0]) - (d->patches ? 0 : 16);
    gpt2rt__st_out outs[3];
    const char *names[3] = {"params", "adam_m", "adam_v"};
    const float *srcs[3] = {ctx->params, ctx->m, ctx->v};
    float *mv = NULL; /* what the backend allocated for the moments (ZeRO-1, CUDA) */
    gpt2rt_result rc = ctx->be->host_moments(ctx, &srcs[1], &srcs[2], &mv);
    if (rc != GPT2RT_OK) return rc;
    for (int i = 0; i < 3; i++) {
        outs[i].name = names[i]; outs[i].src = srcs[i]; outs[i].rows = i ? ctx->n_train : ctx->n_params; outs[i].cols = 1;
        outs[i].transpose = 0; outs[i].ndim = 1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gpt2rt_result r = gpt2rt__st_write(ctx, tmp, path, outs, 3, meta, n_meta);
    gpt2rt__free(&ctx->cfg, mv, GPT2RT_MEM_BOOKKEEPING);
    if (r != GPT2RT_OK) return r;
    return gpt2rt__rename(ctx, tmp, path);
}

GPT2RT_DEF gpt2rt_result gpt2rt_state_load(gpt2rt_ctx *ctx, const char *path) {
    GPT2RT__CHECK_CTX(ctx);
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_state_load") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_state_load", "the AdamW moments (gpt2rt_weights_load "
                                      "reads the weights)"));
    if (gpt2rt__proc_sharded(ctx, "gpt2rt_state_load")) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if (!path) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_state_load: path is NULL");
    unsigned char *buf;
    size_t len;
    gpt2rt_result r = gpt2rt__read_file(ctx, path, &buf, &len);
    if (r != GPT2RT_OK) return r;
    r = gpt2rt__state_load_mem(ctx, buf, len, path);
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    if (r == GPT2RT_OK) gpt2rt__dp_sync(ctx, 2);
    return r;
}

/* ==== 11.6 Parameters by name ==== */
/* in the Hugging Face layout */

GPT2RT_DEF int gpt2rt_param_count(const gpt2rt_ctx *ctx) { return ctx && !ctx->failed ? ctx->n_tensors : 0; }

GPT2RT_DEF gpt2rt_result gpt2rt_param_info_get(const gpt2rt_ctx *ctx, int index, gpt2rt_param_info *info) {
    if (!ctx || !info || ctx->failed || index < 0 || index >= ctx->n_tensors) return GPT2RT_ERR_INVALID_ARGUMENT;
    const gpt2rt__tensor *t = &ctx->tensors[index];
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", t->name);
    info->ndim = t->ndim;
    gpt2rt__hf_shape(t, info->shape);
    if (t->ndim == 1) info->shape[1] = 0;
    info->numel = t->hf_rows * t->cols;
    info->group = t->group;
    info->decay = t->decay;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__param_access(gpt2rt_ctx *ctx, const char *fn, const char *name, int64_t count,
                                          const void *buf, const gpt2rt__tensor **out) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__tensor *t = name ? gpt2rt__tensor_named(ctx, name) : NULL;
    if (!t) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: no parameter named '%s'", fn, name ? name : "(null)");
    if (!buf) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the buffer for '%s' is NULL", fn, name);
    if (count != t->hf_rows * t->cols)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: '%s' has %lld elements, the buffer %lld", fn, name,
                            (long long)(t->hf_rows * t->cols), (long long)count);
    *out = t;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_param_read(gpt2rt_ctx *ctx, const char *name, gpt2rt_param_what what, float *dst,
                                           int64_t count) {
    const gpt2rt__tensor *t = NULL; /* set on success; NULL quiets gcc -O3 -Wmaybe-uninitialized */
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_read", name, count, dst, &t);
    if (r != GPT2RT_OK) return r;
    if (what != GPT2RT_PARAM_VALUE)
        GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_param_read", "gradients or moments to read"));
    if (ctx->ls && ctx->ls->ops) return ctx->ls->ops->param_read(ctx, t, what, dst); /* CUDA (8.7) */
    return ctx->be->param_read(ctx, name, t, what, dst);
}

/* the CPU backend's (the table's) */
static gpt2rt_result gpt2rt__cpu_param_read(gpt2rt_ctx *ctx, const char *name, const gpt2rt__tensor *t,
                                            gpt2rt_param_what what, float *dst) {
    const float *base = what == GPT2RT_PARAM_VALUE ? ctx->params : what == GPT2RT_PARAM_GRAD ? ctx->grads
                      : what == GPT2RT_PARAM_ADAM_M ? ctx->m : what == GPT2RT_PARAM_ADAM_V ? ctx->v : NULL;
    if (what == GPT2RT_PARAM_VALUE && ctx->params16) { /* bf16 weights: widened (exactly) */
        for (int64_t r0 = 0; r0 < t->hf_rows; r0++)
            for (int64_t c = 0; c < t->cols; c++)
                dst[t->transpose ? c * t->rows + r0 : r0 * t->cols + c] = gpt2rt__w_get(ctx, t->off + r0 * t->cols + c);
        return GPT2RT_OK;
    }
    if (!base) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: what = %d", (int)what);
    if (what != GPT2RT_PARAM_VALUE && t->goff < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_param_read: '%s' is frozen (group 0x%x): it "
                            "has no gradient and no moments", name, t->group);
    /* gradients: of the mean loss over the targets since the last update (data parallel,
       once summed over the ranks: over every rank's targets) */
    float k = what == GPT2RT_PARAM_GRAD ? (float)gpt2rt__opt_grad_unscale(ctx) : 1.0f;
    if (what == GPT2RT_PARAM_GRAD && ctx->n_ranks > 1 && ctx->dp_reduced) {
        int64_t all = 0;
        for (int i = 0; i < ctx->n_ranks; i++) all += ctx->ranks[i]->acc_targets;
        k = all ? (float)((double)(ctx->d.n_out * ctx->cfg.grad_accum) / (double)all) : 0.0f;
    }
    if (what == GPT2RT_PARAM_GRAD && ctx->comm_proc.destroy && ctx->dp_reduced) /* processes: summed at backward */
        k = ctx->proc_targets ? (float)((double)(ctx->d.n_out * ctx->cfg.grad_accum) / (double)ctx->proc_targets) : 0.0f;
    if (ctx->d.shards > 1 && (what == GPT2RT_PARAM_ADAM_M || what == GPT2RT_PARAM_ADAM_V)) {
        if (gpt2rt__proc_sharded(ctx, "gpt2rt_param_read of a moment")) return GPT2RT_ERR_NOT_IMPLEMENTED;
        int64_t n = t->rows * t->cols; /* ZeRO-1: gathered from the ranks that keep them */
        float *mv = (float *)gpt2rt__alloc(&ctx->cfg, (size_t)n * 8, GPT2RT_MEM_BOOKKEEPING);
        if (!mv) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_param_read: %lld bytes", (long long)n * 8);
        gpt2rt__dp_moments(ctx, mv, mv + n, t->goff, t->goff + n, 0);
        gpt2rt__param_out(t, what == GPT2RT_PARAM_ADAM_M ? mv : mv + n, 1.0f, dst);
        gpt2rt__free(&ctx->cfg, mv, GPT2RT_MEM_BOOKKEEPING);
        return GPT2RT_OK;
    }
    gpt2rt__param_out(t, base + (what == GPT2RT_PARAM_VALUE ? t->off : t->goff), k, dst);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_param_write(gpt2rt_ctx *ctx, const char *name, const float *src, int64_t count) {
    const gpt2rt__tensor *t = NULL; /* set on success; NULL quiets gcc -O3 -Wmaybe-uninitialized */
    gpt2rt_result r = gpt2rt__param_access(ctx, "gpt2rt_param_write", name, count, src, &t);
    if (r != GPT2RT_OK) return r;
    if (gpt2rt__ls_cu_only_step(ctx, "gpt2rt_param_write") != GPT2RT_OK) return GPT2RT_ERR_NOT_IMPLEMENTED;
    if ((r = ctx->be->host_weights(ctx)) != GPT2RT_OK) return r;
    if (ctx->params16) { /* inference_weights = BF16: rounded to nearest even */
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++)
                if (t->transpose || r0 < t->hf_rows)
                    gpt2rt__w_set(ctx, t->off + r0 * t->cols + c,
                                  t->transpose ? src[c * t->rows + r0] : src[r0 * t->cols + c]);
    } else if (t->transpose) {
        float *d = ctx->params + t->off;
        for (int64_t r0 = 0; r0 < t->rows; r0++)
            for (int64_t c = 0; c < t->cols; c++) d[r0 * t->cols + c] = src[c * t->rows + r0];
    } else memcpy(ctx->params + t->off, src, (size_t)count * sizeof(float));
    ctx->have_logits = ctx->have_loss = ctx->have_pred = 0;
    if ((r = ctx->be->upload(ctx, NULL, NULL)) != GPT2RT_OK) return r; /* CUDA: every tensor, simple, not fast */
    gpt2rt__dp_sync(ctx, 0);
    return GPT2RT_OK;
}

/* ==== 11.7 Generation ==== */
/* gpt2rt_generate: passes of the CPU decode step (7.3) over the KV cache (3.2), and
   the choice of each new token (infix gpt2rt__gen_). A pass feeds every live row its
   pending tokens (the rest of its prompt, up to GPT2RT__KV_CHUNK at a time, or the
   token it chose last); a row whose pending tokens are all in then chooses the next.
   So rows of different prompt lengths each keep their own positions and stop. */

/* the defaults of a gpt2rt_sample, then its checks (numbers in the message) */
static gpt2rt_result gpt2rt__gen_options(gpt2rt_ctx *ctx, const gpt2rt_sample *in, gpt2rt_sample *o) {
    memset(o, 0, sizeof *o);
    if (in) *o = *in;
    const char *fn = "gpt2rt_generate";
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: temperature = %g must be >= 0 and finite (0: "
                            "greedy)", fn, (double)o->temperature);
    if (o->top_k < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: top_k = %d must be >= 0 (0: every token)", fn,
                            o->top_k);
    if (!(o->top_p >= 0.0f && o->top_p <= 1.0f))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: top_p = %g must lie in (0, 1] (0: the default, "
                            "1)", fn, (double)o->top_p);
    if (o->max_new_tokens < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: max_new_tokens = %d must be >= 0 (0: until the "
                            "row is full)", fn, o->max_new_tokens);
    if (o->eot >= ctx->d.V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: eot = %d is outside the vocabulary [0, %lld)", fn,
                            o->eot, (long long)ctx->d.V);
    if (o->top_p == 0.0f) o->top_p = 1.0f;
    if (!o->seed) o->seed = ctx->cfg.seed;
    if (o->eot == 0) o->eot = ctx->d.V > 50256 ? 50256 : -1;
    return GPT2RT_OK;
}

/* candidates: probability descending, then id ascending (a total order: the same
   ids whatever qsort does with equals) */
static int gpt2rt__gen_cmp(const void *a, const void *b) {
    const gpt2rt__kv_cand *x = (const gpt2rt__kv_cand *)a, *y = (const gpt2rt__kv_cand *)b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next token from logits (V): greedy, or a draw from *rng among the top_k, then
   the nucleus of top_p, of softmax(logits / temperature). Only the tokens that can
   be in that set are sorted: those at least as likely as a threshold whose set
   already holds top_k tokens, or top_p of the mass; any token below it comes after
   every token above it in the sorted order, so the set is exact. */
static int32_t gpt2rt__gen_choose(gpt2rt__kv *kv, const float *logits, int64_t V, const gpt2rt_sample *o, uint64_t *rng) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature == 0.0f) return (int32_t)best;
    double mx = logits[best], inv_t = 1.0 / (double)o->temperature, total = 0.0;
    for (int64_t v = 0; v < V; v++) { kv->prob[v] = exp(((double)logits[v] - mx) * inv_t); total += kv->prob[v]; }
    int64_t k = o->top_k > 0 && o->top_k < V ? o->top_k : V, n = 0;
    double u = gpt2rt__rng_uniform(rng);
    if (k == V && o->top_p >= 1.0f) { /* every token: a draw in id order */
        double acc = 0.0, target = u * total;
        for (int64_t v = 0; v < V; v++) { acc += kv->prob[v]; if (acc > target) return (int32_t)v; }
        return (int32_t)best;
    }
    for (double tau = 1.0 / 16.0;; tau /= 16.0) { /* prob[best] = 1 */
        double mass = 0.0;
        n = 0;
        for (int64_t v = 0; v < V; v++)
            if (kv->prob[v] >= tau || tau < 1e-300) { kv->cand[n].p = kv->prob[v]; kv->cand[n].id = (int32_t)v; n++; mass += kv->prob[v]; }
        if (tau < 1e-300 || (k < V ? n >= k : mass >= (double)o->top_p * total)) break;
    }
    qsort(kv->cand, (size_t)n, sizeof *kv->cand, gpt2rt__gen_cmp);
    if (n > k) n = k;
    double kept = 0.0;
    for (int64_t i = 0; i < n; i++) kept += kv->cand[i].p;
    if (o->top_p < 1.0f) { /* the shortest prefix whose share of the kept mass reaches top_p */
        double acc = 0.0, need = (double)o->top_p * kept;
        for (int64_t i = 0; i < n; i++) {
            acc += kv->cand[i].p;
            if (acc >= need) { n = i + 1; break; }
        }
        kept = 0.0;
        for (int64_t i = 0; i < n; i++) kept += kv->cand[i].p;
    }
    double acc = 0.0, target = u * kept;
    for (int64_t i = 0; i < n; i++) { acc += kv->cand[i].p; if (acc > target) return kv->cand[i].id; }
    return kv->cand[n - 1].id;
}

GPT2RT_DEF gpt2rt_result gpt2rt_generate(gpt2rt_ctx *ctx, const gpt2rt_sample *opts, int B, int32_t *tokens,
                                         int64_t row_cap, int64_t *lens) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    const char *fn = "gpt2rt_generate";
    if (d->patches) return gpt2rt__input_kind(ctx, fn, 0);
    if (!d->KB)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context has no KV cache: set config.kv_batch (the "
                            "prompts generated at once) before gpt2rt_create", fn);
    if (!tokens || !lens) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: tokens or lens is NULL", fn);
    if (B < 1 || B > d->KB)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: B = %d must lie in [1, kv_batch = %lld] (the "
                            "rows of the KV cache)", fn, B, (long long)d->KB);
    if (row_cap < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: row_cap = %lld must be >= 1", fn, (long long)row_cap);
    gpt2rt_sample o;
    gpt2rt_result r = gpt2rt__gen_options(ctx, opts, &o);
    if (r != GPT2RT_OK) return r;
    int64_t cap = row_cap < d->KS ? row_cap : d->KS; /* a row's tokens all fit the cache */
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lens[%d] = %lld: a prompt needs at least one "
                                "token (e.g. <|endoftext|>)", fn, b, (long long)lens[b]);
        if (lens[b] > cap)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lens[%d] = %lld: the prompt is longer than "
                                "min(row_cap = %lld, kv_len = %lld) (kv_len <= max_seq_len = %lld)", fn, b,
                                (long long)lens[b], (long long)row_cap, (long long)d->KS, (long long)d->P);
        for (int64_t i = 0; i < lens[b]; i++) {
            int32_t t = tokens[b * row_cap + i];
            if (t < 0 || t >= d->V)
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: tokens[%d][%lld] = %d is outside the "
                                    "vocabulary [0, %lld)", fn, b, (long long)i, t, (long long)d->V);
        }
    }
    gpt2rt__kv *kv = &ctx->kv;
    int64_t live = 0;
    for (int b = 0; b < B; b++) {
        int64_t lim = cap;
        if (o.max_new_tokens && lens[b] + o.max_new_tokens < lim) lim = lens[b] + o.max_new_tokens;
        kv->limit[b] = lim;
        kv->cached[b] = 0;
        kv->done[b] = lens[b] >= lim;
        uint64_t s0 = o.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(b + 1));
        kv->rng[b] = gpt2rt__rng_next(&s0); /* a hashed start: the rows' streams do not overlap */
        live += !kv->done[b];
    }
    while (live) {
        int64_t n = 0, m = 0;
        for (int b = 0; b < B; b++) {
            if (kv->done[b]) continue;
            int64_t take = lens[b] - kv->cached[b];
            if (take > GPT2RT__KV_CHUNK) take = GPT2RT__KV_CHUNK;
            for (int64_t j = 0; j < take; j++, n++) {
                kv->tok[n] = tokens[b * row_cap + kv->cached[b] + j];
                kv->row[n] = b;
                kv->pos[n] = (int32_t)(kv->cached[b] + j);
            }
            kv->cached[b] += take;
            if (kv->cached[b] == lens[b]) kv->sel[m++] = (int32_t)(n - 1);
        }
        GPT2RT__TRY(ctx->be->decode(ctx, n, m)); /* the CPU's pass (7.3) or the device's (8.5) */
        for (int64_t i = 0; i < m; i++) {
            int b = kv->row[kv->sel[i]];
            const float *lg = kv->logits + i * d->Vp;
            int32_t t = gpt2rt__gen_choose(kv, lg, d->V, &o, &kv->rng[b]);
            tokens[b * row_cap + lens[b]++] = t;
            int stop = t == o.eot || lens[b] >= kv->limit[b];
            if (o.on_token && o.on_token(o.user, b, t, lg, d->V)) stop = 1;
            if (stop) { kv->done[b] = 1; live--; }
        }
    }
    return GPT2RT_OK;
}

#endif /* GPT2RT_IMPLEMENTATION_DONE */
#endif /* GPT2RT_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the gpt2rt authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/
