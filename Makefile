# gpt2rt - make (checks, examples, tools), make test, make demo, make bench,
# make test-asan, make fuzz, make kernels, make install PREFIX=..., and the GPU
# targets make test-gpu / make bench-gpu (they say so and skip without a GPU).
CC      ?= cc
CFLAGS  ?= -O3 -march=native
WARN    := -std=c11 -Wall -Wextra -Werror
OMP     := -fopenmp
LDLIBS  := -lm
PREFIX  ?= /usr/local
FUZZ_TIME ?= 60
B := build

EXAMPLES := $(B)/minimal $(B)/train_text $(B)/memory_tradeoffs
TOOLS    := $(B)/bench_cpu $(B)/bench_memory $(B)/gpt2rt-mem
TESTS    := $(B)/test_hf_parity $(B)/test_props $(B)/test_formats $(B)/test_timeseries $(B)/fuzz_replay

.PHONY: all test test-asan demo bench fuzz kernels install clean test-gpu bench-gpu check

all: check $(EXAMPLES) $(TOOLS)

$(B):
	@mkdir -p $(B)

# the header compiles warning-free in every way a user may include it
check: | $(B)
	@bash tests/run.sh compile-only

$(B)/%: examples/%.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/%: tools/%.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

# the memory CLI: tables, the advisor, PNG charts (stb, Debian libstb-dev)
$(B)/gpt2rt-mem: tools/gpt2rt_mem.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/test_%: tests/test_%.c tests/harness.h gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -o $@ $< $(LDLIBS)

$(B)/fuzz_replay: tests/fuzz_safetensors.c gpt2rt.h | $(B)
	$(CC) $(WARN) $(CFLAGS) $(OMP) -DFUZZ_REPLAY -o $@ $< $(LDLIBS)

test: | $(B)
	@bash tests/run.sh

test-asan: | $(B)
	@bash tests/run.sh asan

demo: $(B)/train_text
	./$(B)/train_text

# gpt2rt, then PyTorch on the same step and threads (where installed), then the ratio
bench: $(B)/bench_cpu
	./$(B)/bench_cpu | tee $(B)/bench_cpu.log
	@python3 tools/bench_torch_cpu.py > $(B)/bench_torch.log 2>&1; rc=$$?; cat $(B)/bench_torch.log; \
	if [ $$rc -eq 0 ]; then \
	    a=$$(awk '/^tokens\/s:/{print $$2}' $(B)/bench_cpu.log); b=$$(awk '/^tokens\/s:/{print $$2}' $(B)/bench_torch.log); \
	    awk -v a=$$a -v b=$$b 'BEGIN{printf "\ngpt2rt %.1f tokens/s, PyTorch %.1f tokens/s: %.2fx, same machine, same run\n", a, b, a/b}'; \
	fi
	@echo
	./$(B)/bench_memory

# libFuzzer on the safetensors parser and loaders (clang); FUZZ_TIME seconds
fuzz: | $(B)
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o $(B)/fuzz_safetensors tests/fuzz_safetensors.c $(LDLIBS)
	mkdir -p $(B)/fuzz_corpus && cp tests/fuzz_corpus/* $(B)/fuzz_corpus/
	./$(B)/fuzz_safetensors -max_total_time=$(FUZZ_TIME) -max_len=32768 -rss_limit_mb=2048 \
	    -dict=tests/fuzz_safetensors.dict $(B)/fuzz_corpus

kernels: $(B)/cpu_matmul
	OMP_NUM_THREADS=2 ./$(B)/cpu_matmul
	@if command -v nvcc >/dev/null 2>&1; then bash kernels/run_labs.sh build; \
	else echo "kernels: nvcc not found: the CUDA labs were not built"; fi

$(B)/cpu_matmul: kernels/cpu_matmul.c | $(B)
	$(CC) -std=c11 -O3 -march=native $(OMP) -o $@ $< $(LDLIBS)

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/doc/gpt2rt
	install -m 644 gpt2rt.h $(DESTDIR)$(PREFIX)/include/gpt2rt.h
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/gpt2rt/README.md

# the GPU targets: on a machine with an NVIDIA GPU and nvcc. test-gpu runs every
# kernel lab (each validates against the CPU reference and checks determinism)
# and the CPU suites built by nvcc; bench-gpu runs the end-to-end step lab's
# timing and the PyTorch reference (eager and torch.compile) in the same run.
GPU_CHECK = if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then \
	    echo "$@: skipped: no NVIDIA GPU on this machine (nvidia-smi finds none)"; exit 0; \
	elif ! command -v nvcc >/dev/null 2>&1; then \
	    echo "$@: skipped: nvcc not found (install the CUDA toolkit)"; exit 0; \
	fi; echo "$@: GPU: $$(nvidia-smi -L | head -1)"

test-gpu:
	@$(GPU_CHECK); rc=0; bash kernels/run_labs.sh run || rc=1; bash tests/run.sh nvcc || rc=1; exit $$rc

bench-gpu:
	@$(GPU_CHECK); bash kernels/run_labs.sh build >/dev/null; \
	if [ -x $(B)/lab_train_step ]; then ./$(B)/lab_train_step | tee $(B)/bench_gpu.log; fi; \
	python3 tools/bench_torch_gpu.py --batch 8 --mode both --max-batch-for-gib 40 | tee $(B)/bench_torch_gpu.log

clean:
	rm -rf $(B)
