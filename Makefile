# gpt2rt - make (checks, examples, tools), make test, make demo, make bench,
# make test-asan, make fuzz, make kernels, make install PREFIX=..., and the GPU
# targets: make gpu-build (needs nvcc, not a GPU), make test-gpu / make bench-gpu
# (they say so and skip without a GPU).
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
TESTS    := $(B)/test_hf_parity $(B)/test_props $(B)/test_formats $(B)/fuzz_replay

.PHONY: all test test-asan demo bench fuzz kernels install clean gpu-build test-gpu bench-gpu check

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
	@if command -v $(NVCC) >/dev/null 2>&1; then $(MAKE) --no-print-directory gpu-build; \
	else echo "kernels: nvcc not found: the CUDA labs were not built"; fi

$(B)/cpu_matmul: kernels/cpu_matmul.c | $(B)
	$(CC) -std=c11 -O3 -march=native $(OMP) -o $@ $< $(LDLIBS)

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/doc/gpt2rt
	install -m 644 gpt2rt.h $(DESTDIR)$(PREFIX)/include/gpt2rt.h
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/gpt2rt/README.md

# the GPU binaries, built here (nvcc, no GPU needed) for sm_90 (CUDA_ARCH=sm_80 ... to
# change) and taken to a GPU machine, where make test-gpu reuses them while they are up
# to date: every kernel lab (kernels/*.cu, lab_device first) and the CPU suites compiled
# by nvcc (the header as a .cu translation unit).
NVCC      ?= nvcc
CUDA_ARCH ?= sm_90
NVFLAGS   := -std=c++17 -O3 -arch=$(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings
CU_STAGED := $(wildcard kernels/staging/*.cuh)
GPU_LABS  := $(patsubst kernels/%.cu,$(B)/lab_%,$(wildcard kernels/*.cu))
GPU_SUITES := $(B)/test_hf_parity_nvcc $(B)/test_props_nvcc $(B)/test_memory_nvcc

gpu-build: $(GPU_LABS) $(GPU_SUITES)

$(B)/lab_%: kernels/%.cu kernels/lab.cuh $(CU_STAGED) gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) -o $@ $< -lcublasLt

$(B)/%_nvcc: tests/%.c tests/harness.h gpt2rt.h | $(B)
	$(NVCC) $(NVFLAGS) -x cu -Xcompiler -fopenmp -o $@ $< -lgomp

# test-gpu: device, attention, matrix products, the other op labs, the end-to-end step
# lab and the nvcc-built suites, then compute-sanitizer memcheck and racecheck on a few
# small steps; one line per check, "N passed, N failed" last (kernels/test_gpu.sh).
# bench-gpu: the step lab's timing and the PyTorch reference (eager and torch.compile).
test-gpu:
	@bash kernels/test_gpu.sh

bench-gpu:
	@if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then \
	    echo "$@: skipped: no NVIDIA GPU on this machine (nvidia-smi finds none)"; exit 0; fi; \
	$(MAKE) --no-print-directory gpu-build >/dev/null && \
	./$(B)/lab_train_step | tee $(B)/bench_gpu.log && ./$(B)/lab_matmul | tee $(B)/bench_matmul.log; \
	python3 tools/bench_torch_gpu.py --batch 8 --mode both --max-batch-for-gib 40 | tee $(B)/bench_torch_gpu.log

clean:
	rm -rf $(B)
