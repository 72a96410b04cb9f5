# gpt2rt - make (examples, tools), make test (every check), make test-docs, make support (docs/support.md), make demo,
# make bench (bench-tok, bench-gen, bench-ts, bench-threads),
# make header (gpt2rt.h from src/), make check-header,
# make test-asan, make fuzz, make fuzz-tok, make fuzz-csv, make fuzz-json, make fuzz-forecaster, make kernels, make install PREFIX=..., and the GPU
# targets: make gpu-build, gpu-anchors, gpu-pack (need nvcc, not a GPU), make test-gpu /
# make bench-gpu (they say so and skip without a GPU).
CC      ?= cc
CFLAGS  ?= -O3 -march=native
# no -Werror here: a warning that a newer compiler or another -march=native finds must not
# stop a user's build; make test compiles every example and tool with -Werror at fixed
# flags (-O3, x86-64-v3 and v4, gcc and clang), so a warning still fails a check here
WARN    := -std=c11 -Wall -Wextra
OMP     := -fopenmp
LDLIBS  := -lm
PREFIX  ?= /usr/local
FUZZ_TIME ?= 60
B := build

EXAMPLES := $(B)/minimal $(B)/train_text $(B)/memory_tradeoffs $(B)/timeseries
TOOLS    := $(B)/bench_cpu $(B)/bench_memory $(B)/gpt2rt-mem $(B)/gpt2rt-tok $(B)/gpt2rt-caps $(B)/bench_tok $(B)/bench_gen $(B)/bench_ts \
            $(B)/bench_threads

.PHONY: all support test test-asan test-docs demo bench bench-tok bench-gen bench-ts bench-threads fuzz fuzz-tok fuzz-csv fuzz-json fuzz-forecaster kernels install clean gpu-build gpu-anchors gpu-pack test-gpu bench-gpu check test-emu

# what a user runs; the compiler matrix and nvcc checks are make test's (or make check)
all: $(EXAMPLES) $(TOOLS)

$(B):
	@mkdir -p $(B)

# gpt2rt.h is written from src/ by tools/amalgamate.sh and committed, so a user never runs anything. make header
# writes it; make gpt2rt.h writes it when a file of src/ is newer (that rule exists only when gpt2rt.h is named on
# the command line, so a plain make, where the header is a prerequisite of everything, never rewrites it, whatever
# the checkout's times); both leave it untouched when it is already what src/ generates. make check-header and make
# test fail when it differs.
SRC := $(wildcard src/*.h src/*/*.h src/*/*.cuh)
WRITE_HEADER = sh tools/amalgamate.sh src > gpt2rt.h.tmp || { rm -f gpt2rt.h.tmp; exit 1; }; \
	if cmp -s gpt2rt.h.tmp gpt2rt.h; then rm gpt2rt.h.tmp; else mv gpt2rt.h.tmp gpt2rt.h; echo "wrote gpt2rt.h from src/"; fi
.PHONY: header check-header
header:
	@$(WRITE_HEADER)
ifneq ($(filter gpt2rt.h,$(MAKECMDGOALS)),)
gpt2rt.h: $(SRC) tools/amalgamate.sh
	@$(WRITE_HEADER)
endif
check-header:
	@sh tools/amalgamate.sh src | cmp -s - gpt2rt.h || { echo "gpt2rt.h differs from what src/ generates: edit src/, then run make header"; exit 1; }

# the header compiles warning-free in every way a user may include it
check: | $(B)
	@bash tests/run.sh compile-only

$(B)/%: examples/%.c gpt2rt.h tools/cli.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/%: tools/%.c gpt2rt.h tools/cli.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

# the memory CLI: tables, the advisor, PNG charts (with stb, Debian libstb-dev; without, no --png)
$(B)/gpt2rt-mem: tools/gpt2rt_mem.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

# the capability table as Markdown; make support writes docs/support.md from it (tests/test_caps.c
# checks that the file is its output)
$(B)/gpt2rt-caps: tools/gpt2rt_caps.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(LDLIBS)

support: $(B)/gpt2rt-caps
	@mkdir -p docs
	./$(B)/gpt2rt-caps > docs/support.md

# the planner in a web page: gpt2rt-mem compiled to WebAssembly by emscripten (Debian:
# apt-get install emscripten), inlined into one HTML file that works opened from disk,
# with no server and no network. Debian's emcc runs its JS optimizer on the node it
# finds; NODE_PATH lets a node from elsewhere find Debian's acorn.
EMCC ?= emcc
WEB_NODE_PATH ?= /usr/share/nodejs
.PHONY: web serve-web test-web
web: $(B)/gpt2rt-mem.html

$(B)/web/gpt2rt_mem.js: tools/gpt2rt_mem.c gpt2rt.h | $(B)
	@command -v $(EMCC) > /dev/null || { echo "make web needs emscripten's emcc (Debian: apt-get install emscripten)"; exit 1; }
	@mkdir -p $(B)/web
	NODE_PATH=$(WEB_NODE_PATH) $(EMCC) -std=c11 -Wall -Wextra -Werror -O2 -DGPT2RT_MEM_NO_PNG --no-entry \
	    -sSINGLE_FILE=1 -sMODULARIZE=1 -sEXPORT_NAME=createGpt2rtMem -sEXPORTED_FUNCTIONS=_gpt2rt_mem_web,_gpt2rt_mem_web_form \
	    -sEXPORTED_RUNTIME_METHODS=ccall -sALLOW_MEMORY_GROWTH=1 -sENVIRONMENT=web -o $@ $<

$(B)/gpt2rt-mem.html: web/gpt2rt_mem.html $(B)/web/gpt2rt_mem.js
	awk -v js=$(B)/web/gpt2rt_mem.js '/^\/\*@GPT2RT_MEM_JS@\*\/$$/ { while ((getline l < js) > 0) print l; next } { print }' $< > $@
	@echo "open $(B)/gpt2rt-mem.html in a browser (it needs no server)"

# the same page over http://localhost:8000 (python3), for browsers that restrict file://
serve-web: web
	cd $(B) && python3 -m http.server 8000 --bind 127.0.0.1

# headless Chromium (Debian: chromium) drives the page through 30+ configs against gpt2rt-mem --json
test-web: | $(B)
	@bash tests/web.sh

# the tokenizer CLI: encode / decode text, u16 and llm.c .bin token files
$(B)/gpt2rt-tok: tools/gpt2rt_tok.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/test_%: tests/test_%.c tests/harness.h gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/fuzz_replay: tests/fuzz_safetensors.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -DFUZZ_REPLAY -o $@ $< $(LDLIBS)

test: | $(B)
	@bash tests/run.sh

test-asan: | $(B)
	@bash tests/run.sh asan

# every sh and c block of README.md and docs/*.md, run in a scratch copy (tests/test_docs.sh)
test-docs: | $(B)
	@bash tests/test_docs.sh

demo: $(B)/train_text
	./$(B)/train_text

# gpt2rt, then PyTorch on the same step and threads (where installed), then the ratio
bench: $(B)/bench_cpu $(B)/bench_memory $(B)/bench_tok $(B)/bench_gen $(B)/bench_ts $(B)/bench_threads
	./$(B)/bench_cpu | tee $(B)/bench_cpu.log
	@python3 tools/bench_torch_cpu.py > $(B)/bench_torch.log 2>&1; rc=$$?; cat $(B)/bench_torch.log; \
	if [ $$rc -eq 0 ]; then \
	    a=$$(awk '/^tokens\/s:/{print $$2}' $(B)/bench_cpu.log); b=$$(awk '/^tokens\/s:/{print $$2}' $(B)/bench_torch.log); \
	    awk -v a=$$a -v b=$$b 'BEGIN{printf "\ngpt2rt %.1f tokens/s, PyTorch %.1f tokens/s: %.2fx, same machine, same run\n", a, b, a/b}'; \
	fi
	@echo
	./$(B)/bench_memory
	@echo
	@$(MAKE) --no-print-directory bench-tok
	@echo
	@$(MAKE) --no-print-directory bench-gen
	@echo
	@$(MAKE) --no-print-directory bench-ts
	@echo
	@$(MAKE) --no-print-directory bench-threads

# the default thread count against one thread: a step of the small time-series model
# (examples/timeseries' cpu preset, bench_ts's default shape) and of a large one
# (BENCH_THREADS_LARGE), each timed at -threads 0 (the default: OMP_NUM_THREADS or the
# cores) and -threads 1 in alternation, BENCH_THREADS_ROUNDS rounds; the median of the
# rounds' median steps and their ratio (default / 1 thread: above 1, the default is
# slower). Then tools/bench_threads, the per-op measurement behind the choice of threads
# (src/common/threads.h). On a machine shared with other jobs every number moves with
# the load (printed beside each).
BENCH_THREADS_LARGE ?= -width 256 -heads 4 -layers 2 -freeze 0 -steps 3
BENCH_THREADS_ROUNDS ?= 3
bench-threads: $(B)/bench_ts $(B)/bench_threads
	@for shape in small large; do \
	  if [ $$shape = small ]; then args=""; else args="$(BENCH_THREADS_LARGE)"; fi; \
	  d=""; o=""; \
	  for r in $$(seq $(BENCH_THREADS_ROUNDS)); do \
	    d="$$d $$(./$(B)/bench_ts -threads 0 $$args | awk '/ steps of /{print $$7}')"; \
	    o="$$o $$(./$(B)/bench_ts -threads 1 $$args | awk '/ steps of /{print $$7}')"; \
	  done; \
	  echo "$$d|$$o" | awk -v s=$$shape -v a="$$args" -v n=$$(nproc) -v l="$$(cut -d' ' -f1-3 /proc/loadavg)" \
	    'function med(str,  v, k, i, j, t) { k = split(str, v, " "); \
	        for (i = 2; i <= k; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t } \
	        return k % 2 ? v[(k+1)/2] : (v[k/2] + v[k/2+1]) / 2 } \
	     { split($$0, p, "|"); md = med(p[1]); m1 = med(p[2]); \
	       printf "threads, %s model (bench_ts %s): default (%d cores) %.2f ms a step, 1 thread %.2f ms: %.2fx (median of %d rounds; steps:%s |%s; load average %s)\n", \
	         s, a == "" ? "defaults" : a, n, md, m1, md / m1, split(p[1], x, " "), p[1], p[2], l }'; \
	done
	./$(B)/bench_threads -ms 10

# time-series training windows/s (examples/timeseries.c's --preset cpu shape), gpt2rt then
# PyTorch on the same shapes and threads, and the ratio: at 1 thread, then at $(nproc)
# (BENCH_TS_THREADS); BENCH_TS="-width 32 -heads 4 ..." changes the shape of both
# (flags: tools/bench_ts.c). Then aLLM4TS's stage 1 (next-patch pre-training) at
# BENCH_TS_ALLM4TS's shape: the script's 1024-step windows (64 patches of 16) through 6
# blocks, nothing frozen, dropout 0.2, scaled to the CPU at width 64 and 4 windows of 7
# channels a step. On a machine shared with other jobs the 1-thread ratio is
# the stable one (load average printed beside each), and at 1 thread the ratio of the
# process CPU time a step (the work, not the waits for a core) more so.
BENCH_TS ?=
BENCH_TS_ALLM4TS ?= -head next-patch -lookback 1024 -patch 16 -stride 16 -layers 6 -heads 4 -width 64 -batch 4 \
                    -channels 7 -freeze 0 -dropout 0.2 -head-dropout 0
BENCH_TS_THREADS ?= 1 $(shell nproc)
bench-ts: $(B)/bench_ts
	@for shape in gpt4ts allm4ts; do \
	  if [ $$shape = gpt4ts ]; then args="$(BENCH_TS)"; else args="$(BENCH_TS_ALLM4TS)"; fi; \
	  for t in $(BENCH_TS_THREADS); do \
	    ./$(B)/bench_ts -threads $$t $$args | tee $(B)/bench_ts.log; \
	    python3 tools/bench_torch_ts.py --threads $$t $$args > $(B)/bench_torch_ts.log 2>&1; rc=$$?; cat $(B)/bench_torch_ts.log; \
	    if [ $$rc -eq 0 ]; then \
	        a=$$(awk '/^windows\/s:/{print $$2}' $(B)/bench_ts.log); b=$$(awk '/^windows\/s:/{print $$2}' $(B)/bench_torch_ts.log); \
	        ca=$$(awk '/^cpu ms\/step:/{print $$3}' $(B)/bench_ts.log); cb=$$(awk '/^cpu ms\/step:/{print $$3}' $(B)/bench_torch_ts.log); \
	        awk -v s=$$shape -v a=$$a -v b=$$b -v t=$$t -v ca=$$ca -v cb=$$cb -v l="$$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN{printf "\n%s: gpt2rt %.1f windows/s, PyTorch %.1f windows/s at %d thread(s): %.2fx, same machine, same run (load average %s)\n", s, a, b, t, a/b, l; \
	            if (t == 1) printf "%s: process CPU time a step at 1 thread: gpt2rt %.2f ms, PyTorch %.2f ms: %.2fx\n", s, ca, cb, cb/ca; print ""}'; \
	    fi; \
	  done; \
	done

# GPT-2 encoding MB/s on one core, gpt2rt then tiktoken on the same text, and the ratio
bench-tok: $(B)/bench_tok
	./$(B)/bench_tok | tee $(B)/bench_tok.log
	@python3 tools/bench_tiktoken.py > $(B)/bench_tiktoken.log 2>&1; rc=$$?; cat $(B)/bench_tiktoken.log; \
	if [ $$rc -eq 0 ]; then \
	    a=$$(awk '/^encode MB\/s:/{print $$5}' $(B)/bench_tok.log); b=$$(awk '/^encode MB\/s:/{print $$5}' $(B)/bench_tiktoken.log); \
	    awk -v a=$$a -v b=$$b 'BEGIN{printf "\ngpt2rt encodes %.1f MB/s, tiktoken %.1f MB/s (medians, one core): %.2fx, same text, same run\n", a, b, a/b}'; \
	fi

# generation with the KV cache: GPT-2 124M shape, B=1, a 64-token prompt, greedy, new
# tokens/s of gpt2rt_generate, then Hugging Face's generate (use_cache) with the same
# threads, and the ratio (GEN_NEW new tokens, GEN_REPS timed runs each: a few minutes)
GEN_NEW ?= 32
GEN_REPS ?= 3
bench-gen: $(B)/bench_gen
	./$(B)/bench_gen -new $(GEN_NEW) -reps $(GEN_REPS) | tee $(B)/bench_gen.log
	@python3 tools/bench_hf_generate.py --new $(GEN_NEW) --reps $(GEN_REPS) > $(B)/bench_hf_generate.log 2>&1; rc=$$?; \
	cat $(B)/bench_hf_generate.log; \
	if [ $$rc -eq 0 ]; then \
	    a=$$(awk '/^generate tokens\/s:/{print $$3}' $(B)/bench_gen.log); b=$$(awk '/^generate tokens\/s:/{print $$3}' $(B)/bench_hf_generate.log); \
	    awk -v a=$$a -v b=$$b 'BEGIN{printf "\ngpt2rt generates %.1f tokens/s, Hugging Face generate %.1f tokens/s (B=1, 64-token prompt, greedy, KV cache): %.2fx, same machine, same run\n", a, b, a/b}'; \
	fi

# libFuzzer (clang) on each reader in turn, FUZZ_TIME seconds each: the weights and the
# training-state loaders (safetensors), config.json. tests/FUZZING.md has the log.
FUZZ_FLAGS = -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
fuzz: | $(B)
	@if ! command -v clang >/dev/null 2>&1; then echo "fuzz: skipped: clang not found (apt-get install clang)"; exit 0; fi; \
	set -e; mkdir -p $(B)/fuzz_w $(B)/fuzz_s $(B)/fuzz_c $(B)/fuzz_artifacts; \
	F="clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined"; \
	$$F -DFUZZ_LOADERS=1 -o $(B)/fuzz_weights tests/fuzz_safetensors.c $(LDLIBS); \
	$$F -DFUZZ_LOADERS=2 -o $(B)/fuzz_state tests/fuzz_safetensors.c $(LDLIBS); \
	$$F -o $(B)/fuzz_config tests/fuzz_config.c $(LDLIBS); \
	./$(B)/fuzz_weights $(B)/fuzz_w tests/fuzz_corpus -dict=tests/fuzz_safetensors.dict -max_len=32768 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/; \
	./$(B)/fuzz_state $(B)/fuzz_s tests/fuzz_corpus -dict=tests/fuzz_safetensors.dict -max_len=32768 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/; \
	./$(B)/fuzz_config $(B)/fuzz_c tests/fuzz_corpus_config -dict=tests/fuzz_config.dict -max_len=4096 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/

# libFuzzer on the tokenizer: encode, the vocabulary loaders, the shard reader
fuzz-tok: | $(B)
	@if ! command -v clang >/dev/null 2>&1; then echo "fuzz-tok: skipped: clang not found (apt-get install clang)"; exit 0; fi
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o $(B)/fuzz_tokenizer tests/fuzz_tokenizer.c $(LDLIBS)
	mkdir -p $(B)/fuzz_tok_corpus && cp tests/fuzz_corpus_tokenizer/* $(B)/fuzz_tok_corpus/
	./$(B)/fuzz_tokenizer -max_total_time=$(FUZZ_TIME) -max_len=65536 -rss_limit_mb=2048 $(B)/fuzz_tok_corpus

# libFuzzer on the ETT-format CSV reader (gpt2rt_series_load_mem), FUZZ_TIME seconds
fuzz-csv: | $(B)
	@if ! command -v clang >/dev/null 2>&1; then echo "fuzz-csv: skipped: clang not found (apt-get install clang)"; exit 0; fi
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o $(B)/fuzz_csv tests/fuzz_csv.c $(LDLIBS)
	mkdir -p $(B)/fuzz_csv_work $(B)/fuzz_artifacts
	./$(B)/fuzz_csv $(B)/fuzz_csv_work tests/fuzz_corpus_csv -dict=tests/fuzz_csv.dict -max_len=4096 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/

# libFuzzer on the forecaster directory loader (gpt2rt_forecaster_load), FUZZ_TIME seconds
fuzz-forecaster: | $(B)
	@if ! command -v clang >/dev/null 2>&1; then echo "fuzz-forecaster: skipped: clang not found (apt-get install clang)"; exit 0; fi
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o $(B)/fuzz_forecaster tests/fuzz_forecaster.c $(LDLIBS)
	mkdir -p $(B)/fuzz_fc_corpus $(B)/fuzz_artifacts
	./$(B)/fuzz_forecaster $(B)/fuzz_fc_corpus tests/fuzz_corpus_forecaster -dict=tests/fuzz_forecaster.dict -max_len=16384 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/

# libFuzzer on the JSON reader through config.json, a safetensors header, a vocabulary
# json and the reader alone (tests/fuzz_json.c), FUZZ_TIME seconds
fuzz-json: | $(B)
	@if ! command -v clang >/dev/null 2>&1; then echo "fuzz-json: skipped: clang not found (apt-get install clang)"; exit 0; fi
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o $(B)/fuzz_json tests/fuzz_json.c $(LDLIBS)
	mkdir -p $(B)/fuzz_json_work $(B)/fuzz_artifacts
	./$(B)/fuzz_json $(B)/fuzz_json_work tests/fuzz_corpus_json -dict=tests/fuzz_json.dict -max_len=8192 $(FUZZ_FLAGS) -artifact_prefix=$(B)/fuzz_artifacts/

kernels: $(B)/cpu_matmul
	OMP_NUM_THREADS=2 ./$(B)/cpu_matmul
	@if command -v $(NVCC) >/dev/null 2>&1; then $(MAKE) --no-print-directory gpu-build; \
	else echo "kernels: nvcc not found: the CUDA labs were not built"; fi

$(B)/cpu_matmul: kernels/cpu_matmul.c | $(B)
	$(CC) -std=c11 -O3 -march=native $(OMP) -o $@ $< $(LDLIBS)

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/doc/gpt2rt
	install -m 644 gpt2rt.h $(DESTDIR)$(PREFIX)/include/gpt2rt.h
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/gpt2rt/README.md

# the GPU binaries, built here (nvcc, no GPU needed) for sm_90a (CUDA_ARCH=sm_80 ... to
# change) and taken to a GPU machine, where make test-gpu reuses them while they are up
# to date: every kernel lab (kernels/*.cu, lab_device first) and the CPU suites compiled
# by nvcc (the header as a .cu translation unit).
NVCC      ?= nvcc
CUDA_ARCH ?= sm_90
# sm_90 builds H100 code as sm_90a (the Hopper attention forward's wgmma instructions exist
# only there; the header's other kernels are the same code) plus compute_90 PTX, which other
# devices compile at load time and which runs the mma.sync kernels; any other CUDA_ARCH
# (sm_80, sm_90a, ...) is passed to -arch as it is
GPU_ARCH_FLAGS = $(if $(filter sm_90,$(CUDA_ARCH)),-gencode arch=compute_90a$(comma)code=sm_90a -gencode arch=compute_90$(comma)code=compute_90,-arch=$(CUDA_ARCH))
comma := ,
# warnings as errors only where tests/run.sh asks (NVWERROR=...): a user's nvcc of another
# version must still build the labs
NVWERROR  ?=
NVFLAGS   = -std=c++17 -O3 $(GPU_ARCH_FLAGS) -Xcompiler -Wall,-Wextra $(NVWERROR)
GPU_LABS  := $(patsubst kernels/%.cu,$(B)/lab_%,$(wildcard kernels/*.cu))
GPU_SUITES := $(B)/test_hf_parity_nvcc $(B)/test_props_nvcc $(B)/test_memory_nvcc

# tools compiled by nvcc for make bench-gpu: bench_ts with -backend cuda (aLLM4TS stage 1)
GPU_TOOLS := $(B)/bench_ts_nvcc

gpu-build: $(GPU_LABS) $(GPU_SUITES) $(GPU_TOOLS)

$(B)/lab_%: kernels/%.cu kernels/lab.cuh gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) -o $@ $< -lcublasLt

# the data-parallel lab also checks the NCCL communicator where NCCL is installed: nccl.h
# beside the CUDA headers or on nvcc's include path (-lnccl), else NVIDIA's pip wheel
# (nvidia-nccl-cu*: headers and libnccl.so.2 under site-packages/nvidia/nccl, found through
# python3, linked by that file name with an rpath so the lab runs without LD_LIBRARY_PATH)
NCCL_SYS = $(shell if [ -f $$(dirname $$(command -v $(NVCC) 2>/dev/null || echo /x/x))/../include/nccl.h ] || \
             echo '\#include <nccl.h>' | $(NVCC) -E -x cu - >/dev/null 2>&1; then echo yes; fi)
NCCL_PIP = $(if $(NCCL_SYS),,$(shell python3 -c 'import nvidia.nccl as n, os; d = list(n.__path__)[0]; \
             print(d if os.path.isfile(os.path.join(d, "include", "nccl.h")) else "")' 2>/dev/null))
NCCL_FLAGS = $(if $(NCCL_SYS),-DGPT2RT_NCCL,$(if $(NCCL_PIP),-DGPT2RT_NCCL -I$(NCCL_PIP)/include))
NCCL_LIBS = $(if $(NCCL_SYS),-lnccl,$(if $(NCCL_PIP),-L$(NCCL_PIP)/lib -l:libnccl.so.2 -Xlinker -rpath=$(NCCL_PIP)/lib))
$(B)/lab_data_parallel: kernels/data_parallel.cu kernels/lab.cuh gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) $(NCCL_FLAGS) -o $@ $< -lcublasLt $(NCCL_LIBS)

$(B)/%_nvcc: tests/%.c tests/harness.h gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) -x cu -Xcompiler -fopenmp -o $@ $< -lgomp -lcublasLt

$(B)/bench_ts_nvcc: tools/bench_ts.c tools/cli.h gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) -x cu -Xcompiler -fopenmp -o $@ $< -lgomp -lcublasLt

# test-gpu: device, attention, matrix products, the other op labs, the end-to-end step
# lab and the nvcc-built suites, then compute-sanitizer memcheck and racecheck on a few
# small steps; one line per check, "N passed, N failed" last (kernels/test_gpu.sh).
# bench-gpu (kernels/bench_gpu.sh): the step lab's timing (lab_train_step time), attention
# alone (lab_attention time B, PyTorch's SDPA backends by tools/bench_attn_torch.py), llm.c
# with cuDNN and plain (make gpu-anchors), torch.compile at B=8 and 16, two same-call tables
# (tools/bench_gpu_table.py). gpu-pack: the binaries a GPU session carries
# (kernels/gpu_session.sh runs both suites there in one call; docs/cuda.md).
# test-emu: the CUDA backend compiled by the host C++ compiler against the emulator in
# kernels/emu/ (ASan+UBSan, two fiber orders), run on the CPU against the CPU backend;
# make test runs it too. No GPU, no CUDA toolkit needed.
test-emu: | $(B)
	@bash tests/run.sh emu

test-gpu:
	@bash kernels/test_gpu.sh

bench-gpu:
	@bash kernels/bench_gpu.sh

# the anchors of make bench-gpu: llm.c's train_gpt2cu built for sm_90 twice, with its own
# attention kernels and with cuDNN flash attention, by $(ANCHORS)/build_llmc.sh (nvcc and
# cuDNN's headers and library, no GPU): 1.4 and 3.6 MB, stripped in the pack below
ANCHORS ?= ../shared/anchors
gpu-anchors: $(B)/anchors/cudnn/train_gpt2cu

$(B)/anchors/cudnn/train_gpt2cu: $(wildcard $(ANCHORS)/build_llmc.sh $(ANCHORS)/*.tar.gz) | $(B)
	@[ -f $(ANCHORS)/build_llmc.sh ] || { echo "gpu-anchors: $(ANCHORS)/build_llmc.sh not found (make ANCHORS=DIR)"; exit 1; }
	bash $(ANCHORS)/build_llmc.sh $(B)/anchors

# what a GPU session carries (kernels/gpu_session.sh unpacks it): every binary of gpu-build,
# llm.c's two (when make gpu-anchors can build them), and the sha256 of the sources they
# were built from, in one xz file: build/gpu_carry.tar.xz, the path a device call carries.
# gpt2rt's binaries keep their symbols (compute-sanitizer's backtraces name functions):
# stripped, the pack would be only about a tenth smaller
GPU_PACK_SOURCES = gpt2rt.h kernels/lab.cuh $(wildcard kernels/*.cu) tests/harness.h \
                   $(patsubst $(B)/%_nvcc,tests/%.c,$(GPU_SUITES)) tools/bench_ts.c tools/cli.h
gpu-pack: gpu-build
	@$(MAKE) --no-print-directory gpu-anchors || echo "gpu-pack: llm.c not built: packed without the anchors (bench-gpu names the skip)"
	@sha256sum $(GPU_PACK_SOURCES) > $(B)/gpu_sources.sha256
	@rm -rf $(B)/gpu_pack && mkdir -p $(B)/gpu_pack/$(B)/anchors/cudnn $(B)/gpu_pack/$(B)/anchors/plain
	@cp $(GPU_LABS) $(GPU_SUITES) $(GPU_TOOLS) $(B)/gpu_sources.sha256 $(B)/gpu_pack/$(B)/
	@for v in cudnn plain; do [ ! -f $(B)/anchors/$$v/train_gpt2cu ] || \
	    strip -o $(B)/gpu_pack/$(B)/anchors/$$v/train_gpt2cu $(B)/anchors/$$v/train_gpt2cu; done
	@cd $(B)/gpu_pack && tar cf - $(B) | xz -T2 -9 > ../gpu_carry.tar.xz
	@echo "$(B)/gpu_carry.tar.xz: $$(du -k $(B)/gpu_carry.tar.xz | cut -f1) KiB packed, $$(du -sk $(B)/gpu_pack | cut -f1) KiB unpacked, $$(find $(B)/gpu_pack -type f | wc -l) files"
	@rm -rf $(B)/gpu_pack

clean:
	rm -rf $(B)
