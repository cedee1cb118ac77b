# lectern: build, run, test, bench, view.
#
#   make run [LECTURE=name] [ARGS="--opt --n=8"]
#                             set up, build, run lectures/<name>.c with ARGS, say how to view it
#                             (LECTURE=all: every lecture but the homework)
#   make grade LECTURE=name [ARGS=...]
#                             run it as a course's autograder does (--grade) and print the score table
#   make test                 set up, build, run every test (C, scripts, browser, ASan/UBSan)
#   make bench                benchmarks into bench/results/ (see docs/benchmarks.md)
#   make twin [LECTURE=name] [PLATFORM=this-machine]
#                             run it with --twin-record and replay its ranks on a simulated
#                             platform (SimGrid); adds each spawn's "twin" to traces/local/NAME.json
#   make view                 serve the repo on localhost and print the viewer's URL
#   make coverage             line and branch coverage of the runtime by the tests
#   make mutate               plant bugs one by one; how many do the tests notice
#   make gpu-bundle           build with CUDA and pack what a GPU machine lacks into .carry/
#   make gpu-check            on a GPU machine: facts, tests, lecture, benchmarks (docs/gpu.md)
#   make                      build the runtime, every lecture and every test
#
# Adding a lecture is dropping lectures/NAME.c in: no edit here (its CUDA
# kernels, if any, in lectures/NAME_kernels.cu: built only where CUDA is).
# CUDA is optional: with nvcc (PATH or /usr/local/cuda) GPU support is built
# in and chosen at run time; `make CUDA=0` or no nvcc gives a CPU-only build.
# NCCL is optional too (the CUDA toolkit does not ship it): scripts/find-nccl.sh
# looks in NCCL_HOME, the CUDA folder, the system folders and python3's
# nvidia/nccl package, in that order; without it (or with `make NCCL=0`) the
# GPU support is built and collectives run on Open MPI. NCCL is compiled
# against (its header) but never linked: the first NCCL spawn loads it
# (runtime/comm/nccl_library.c), so every binary runs where there is none.

# `make` alone builds everything, whatever rules the variables below add first.
.DEFAULT_GOAL := all

LECTURE ?= $(if $(wildcard lectures/lecture_08.c),lecture_08,lecture_00)
BUILD   ?= build
SAN     ?= 0

NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

PKGS := ompi-c libcjson md4c-html libdw openblas libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
# The twin's replay (tools/twin/, docs/twin.md) needs SimGrid (libsimgrid-dev):
# without it everything else builds and `make twin` says what is missing.
SIMGRID ?= $(shell pkg-config --exists simgrid 2>/dev/null && echo 1 || echo 0)
TWIN_SRC := $(wildcard tools/twin/*.cpp)
# TWIN_BIN is deferred (=): SAN=1 moves BUILD to build-asan further down.
TWIN_BIN = $(BUILD)/tools/twin/twin_replay
# The C unit tests need cmocka (a test package): without it `make` builds
# everything else and says how to get it. CMOCKA=0 builds as if it were missing.
CMOCKA ?= $(shell pkg-config --exists cmocka 2>/dev/null && echo 1 || echo 0)

# NCCL: searched only for a CUDA build. NCCL_FOUND is
# "INCLUDE_DIR LIB_DIR LINK_FLAG VERSION WHERE...", or "none - - - WHY...".
ifeq ($(CUDA),1)
  NCCL_FOUND := $(shell CUDA_HOME='$(CUDA_HOME)' NCCL_HOME='$(NCCL_HOME)' bash scripts/find-nccl.sh)
  NCCL_INC  := $(word 1,$(NCCL_FOUND))
  NCCL_LIB  := $(word 2,$(NCCL_FOUND))
  NCCL_WHERE := $(wordlist 5,$(words $(NCCL_FOUND)),$(NCCL_FOUND))
  NCCL ?= $(if $(filter none,$(NCCL_INC)),0,1)
  ifeq ($(NCCL)$(NCCL_INC),1none)
    $(error NCCL=1 asked for, but no NCCL was found: $(NCCL_WHERE))
  endif
else
  NCCL := 0
endif

# One line, once per top-level make, on stderr (stdout stays clean for
# `make print-cuda`), saying where NCCL came from or that there is none.
ifeq ($(MAKELEVEL)$(CUDA),01)
  ifneq ($(filter-out print-cuda print-nccl clean view gpu-check,$(or $(MAKECMDGOALS),all)),)
    ifeq ($(NCCL),1)
      $(shell echo "lectern: NCCL $(word 4,$(NCCL_FOUND)) from $(NCCL_WHERE)" >&2)
    else
      $(shell echo "lectern: building GPU support without NCCL ($(if $(filter none,$(NCCL_INC)),$(NCCL_WHERE),NCCL=0)): collectives run on Open MPI" >&2)
    endif
  endif
endif

CC ?= cc
WARN := -Wall -Wextra -Wno-unused-parameter
# Lecture code: a printf format that does not match its arguments (%d given a
# double, a missing argument) is an error, not a warning lost in the output.
LECTURE_WARN := $(WARN) -Werror=format

# Short build lines ("CC lectures/hw.c"), the compiler's warnings as they
# are; V=1 prints each full command.
V ?= 0
ifeq ($(V),1)
  Q :=
  say = @true
else
  Q := @
  say = @printf '  %-5s %s\n' $(1) $(2)
endif
# -ffp-contract=off: no fused multiply-adds the source did not ask for, so the
# random numbers (runtime/tensor/philox.h) round the same on every CPU and the GPU.
COMMON := -g -fno-omit-frame-pointer -ffp-contract=off -D_GNU_SOURCE -Iruntime $(PKG_CFLAGS) \
          -DLECTERN_ROOT='"$(CURDIR)"' -DLECTERN_NCCL=$(NCCL)
# Lectures (and test fixtures) keep one frame per source function so every
# traced stack matches the source: no inlining, no sibling calls.
LECTURE_OPT := -O1 -fno-inline -fno-optimize-sibling-calls -fno-ipa-icf
RUNTIME_OPT := -O2
SAN_FLAGS :=
ifeq ($(SAN),1)
  SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
  BUILD := build-asan
endif
# COV=1: a build for `make coverage` (gcov counters, no optimisation so every
# line is its own).
COV ?= 0
ifeq ($(COV),1)
  SAN_FLAGS += --coverage -DLECTERN_COVERAGE
  RUNTIME_OPT := -O0
  BUILD := build-cov
endif

LIBS := $(PKG_LIBS) -lm -lpthread
# Link with gold where the compiler has it (binutils ships it beside ld):
# linking a lecture against the runtime takes a third of ld's time (0.13 s
# instead of 0.39, lecture_08, 2-core VM), and make test links about 200
# programs. LINKER=bfd (or lld) chooses another.
ifeq ($(origin LINKER),undefined)
  LINKER := $(if $(shell $(CC) -fuse-ld=gold -Wl,--version 2>/dev/null | grep -i gold),gold)
endif
LIBS += $(if $(LINKER),-fuse-ld=$(LINKER))
CUDA_FLAGS :=
ifeq ($(CUDA),1)
  COMMON += -DLECTERN_CUDA=1 -I$(CUDA_HOME)/include
  # cuBLAS is not linked: runtime/tensor/cublas_lazy.c loads it on first use, so
  # processes that never call it (CPU ranks) start 70 ms sooner.
  LIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl
  ifeq ($(NCCL),1)
    # The header only; the rpath lets dlopen("libnccl.so.2") find the
    # library the build found (the binary's own run path is searched).
    COMMON += -I$(NCCL_INC)
    LIBS += -Wl,-rpath,$(NCCL_LIB)
  endif
  # H100/H200 are sm_90; PTX too so newer GPUs JIT it.
  CUDA_FLAGS := -O2 -g -Iruntime -I$(CUDA_HOME)/include -DLECTERN_CUDA=1 \
                -gencode arch=compute_90,code=[sm_90,compute_90] -Xcompiler -fPIC,-Wall,-Wextra \
                -DLECTERN_NCCL=$(NCCL)
endif

# The runtime's layers, lowest first (docs/design.md, "Layers"): a folder
# of runtime/ each, a lower one never calling a higher one (make check-layers).
LAYERS := trace tensor ranks comm lecture
# Every build compiles comm_nccl.c and its CPU emulator; nccl_library.c
# (the real NCCL) holds code only where CUDA and NCCL's header are.
RUNTIME_SRC := $(foreach l,$(LAYERS),$(wildcard runtime/$(l)/*.c))
RUNTIME_CU  := $(if $(filter 1,$(CUDA)),$(foreach l,$(LAYERS),$(wildcard runtime/$(l)/*.cu)))
RUNTIME_H   := $(wildcard runtime/*.h runtime/*/*.h)
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/%.o) $(RUNTIME_CU:%.cu=$(BUILD)/%.cu.o)
LIB := $(BUILD)/liblectern.a

# Code lectures share (lectures/lib/*.c): built like lecture code (its frames
# are lecture frames, shown in traces), linked into every lecture and test.
LECTURE_LIB_SRC := $(wildcard lectures/lib/*.c)
LECTURE_LIB_OBJ := $(LECTURE_LIB_SRC:%.c=$(BUILD)/%.o)
LECTURE_LIB := $(BUILD)/liblectures.a
# A lecture's own code (lectures/NAME/*.c, as lecture_08/ and
# lecture_pipelines/ have): built the same way, linked into that lecture
# alone. Its objects sit under lectures/own/NAME/, beside (not in)
# build/lectures/NAME, the lecture's binary; its library is
# lectures/own/libNAME.a.
OWN_LECTURES := $(sort $(filter-out lib,$(notdir $(patsubst %/,%,$(dir $(wildcard lectures/*/*.c))))))
OWN_LIBS := $(OWN_LECTURES:%=$(BUILD)/lectures/own/lib%.a)

# Test support (tests/lib/*.c, e.g. the float64 reference model) and test
# tools (tests/tools/*.c: programs the script tests run).
TEST_LIB_SRC := $(wildcard tests/lib/*.c)
TEST_LIB_OBJ := $(TEST_LIB_SRC:%.c=$(BUILD)/%.o)
TEST_LIB := $(BUILD)/libtestsupport.a
TOOLS := $(notdir $(basename $(wildcard tests/tools/*.c)))
TOOL_BINS := $(TOOLS:%=$(BUILD)/tests/tools/%)

LECTURES := $(notdir $(basename $(wildcard lectures/*.c)))
LECTURE_BINS := $(LECTURES:%=$(BUILD)/lectures/%)
# A lecture's own CUDA kernels: lectures/NAME_kernels.cu is compiled with nvcc
# and linked into lectures/NAME in a CUDA build; a CPU-only build leaves it
# out, and the lecture keeps its calls to it inside #ifdef LECTERN_CUDA.
LECTURE_CU := $(if $(filter 1,$(CUDA)),$(wildcard lectures/*_kernels.cu))
$(foreach k,$(LECTURE_CU),$(eval $(BUILD)/lectures/$(notdir $(k:_kernels.cu=)): $(BUILD)/$(k:.cu=.cu.o)))
FIXTURES := $(notdir $(basename $(wildcard tests/fixtures/*.c)))
FIXTURE_BINS := $(FIXTURES:%=$(BUILD)/tests/fixtures/%)
# The C unit tests, in the folder of what they test (tests/trace/test_trace.c
# is built as $(BUILD)/tests/trace/test_trace).
TESTS := $(basename $(wildcard tests/*/test_*.c))
TEST_BINS := $(TESTS:%=$(BUILD)/%)
BENCHES := $(notdir $(basename $(wildcard bench/*.c)))
BENCH_BINS := $(BENCHES:%=$(BUILD)/bench/%)

.PHONY: all test-bins runtime-bins run twin grade submission test test-all test-asan check-layers bench view setup clean lectures print-cuda print-nccl gpu-bundle gpu-check coverage mutate format format-check
ifeq ($(CMOCKA),1)
  C_TEST_BINS := $(TEST_BINS)
else
  C_TEST_BINS :=
  ifeq ($(MAKELEVEL),0)
    $(info lectern: cmocka is missing, so the C unit tests (tests/FOLDER/test_*.c) are not built; everything else is. \
      To get it: bash scripts/setup.sh test (or apt-get install libcmocka-dev))
  endif
endif

all: $(LIB) $(LECTURE_LIB) $(LECTURE_BINS) $(FIXTURE_BINS) $(C_TEST_BINS) $(TOOL_BINS) $(BENCH_BINS) \
     $(if $(filter 1,$(SIMGRID)),$(TWIN_BIN))
# What make test's sanitizer pass runs (scripts/test.sh, quick scope): the C
# tests, the fixtures and tools the runtime's script tests start, lecture_00.
test-bins: $(LIB) $(LECTURE_LIB) $(FIXTURE_BINS) $(C_TEST_BINS) $(TOOL_BINS) $(BUILD)/lectures/lecture_00
# The code a build setting such as NCCL=0 compiles differently (the runtime,
# and the C tests, which include its internal headers) and a lecture and a
# spawning fixture linked against it: tests/system/test_build.py's build without
# NCCL in make test's quick scope. The other lectures, fixtures and tools
# compile the same either way: no header they include tests LECTERN_NCCL.
runtime-bins: $(LIB) $(LECTURE_LIB) $(C_TEST_BINS) $(BUILD)/lectures/lecture_00 $(BUILD)/tests/fixtures/spawn_basic
lectures: $(LECTURE_BINS)

$(BUILD)/runtime/%.o: runtime/%.c $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(COMMON) $(RUNTIME_OPT) $(SAN_FLAGS) -c $< -o $@

$(BUILD)/runtime/%.cu.o: runtime/%.cu $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)
	$(Q)$(NVCC) $(CUDA_FLAGS) -c $< -o $@

$(LIB): $(RUNTIME_OBJ)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/lectures/lib/%.o: lectures/lib/%.c $(wildcard lectures/lib/*.h) $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(LECTURE_WARN) $(COMMON) $(LECTURE_OPT) $(SAN_FLAGS) -c $< -o $@

$(LECTURE_LIB): $(LECTURE_LIB_OBJ)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/lectures/own/%.o: lectures/%.c $(wildcard lectures/*/*.h) $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(LECTURE_WARN) $(COMMON) -Ilectures $(LECTURE_OPT) $(SAN_FLAGS) -c $< -o $@

# own_lecture NAME: lectures/NAME/*.c into lectures/own/libNAME.a, linked
# into build/lectures/NAME.
define own_lecture
$$(BUILD)/lectures/own/lib$(1).a: $$(patsubst lectures/%.c,$$(BUILD)/lectures/own/%.o,$$(wildcard lectures/$(1)/*.c))
	@rm -f $$@
	$$(call say,AR,$$@)
	$$(Q)ar rcs $$@ $$^

$$(BUILD)/lectures/$(1): $$(BUILD)/lectures/own/lib$(1).a $$(wildcard lectures/$(1)/*.h)
endef
$(foreach n,$(OWN_LECTURES),$(eval $(call own_lecture,$(n))))

$(BUILD)/lectures/%_kernels.cu.o: lectures/%_kernels.cu $(wildcard lectures/*.h) $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)
	$(Q)$(NVCC) $(CUDA_FLAGS) -c $< -o $@

$(BUILD)/lectures/%: lectures/%.c $(LIB) $(LECTURE_LIB) $(wildcard lectures/lib/*.h) $(wildcard lectures/*.h)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(LECTURE_WARN) $(COMMON) -Ilectures $(LECTURE_OPT) $(SAN_FLAGS) $< -o $@ $(filter %.cu.o $(OWN_LIBS),$^) $(LECTURE_LIB) $(LIB) $(LIBS)

# (a fixture may include a homework, as the homework's solution and its
# wrong methods do, and the fixtures' own headers)
$(BUILD)/tests/fixtures/%: tests/fixtures/%.c $(LIB) $(wildcard tests/fixtures/*.h) $(wildcard lectures/homework_*.c)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(LECTURE_WARN) $(COMMON) $(LECTURE_OPT) $(SAN_FLAGS) $< -o $@ $(LIB) $(LIBS)

$(BUILD)/tests/lib/%.o: tests/lib/%.c $(wildcard tests/lib/*.h) $(wildcard lectures/lib/*.h) $(RUNTIME_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(COMMON) -Ilectures -Itests/lib $(RUNTIME_OPT) $(SAN_FLAGS) -c $< -o $@

$(TEST_LIB): $(TEST_LIB_OBJ)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/tests/tools/%: tests/tools/%.c $(LIB) $(LECTURE_LIB) $(TEST_LIB)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(COMMON) -Ilectures -Itests/lib $(RUNTIME_OPT) $(SAN_FLAGS) $< -o $@ $(TEST_LIB) $(LECTURE_LIB) $(LIB) $(LIBS)

$(BUILD)/tests/%: tests/%.c $(LIB) $(LECTURE_LIB) $(TEST_LIB)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(COMMON) -Ilectures -Itests/lib $(LECTURE_OPT) $(SAN_FLAGS) $< -o $@ $(filter $(OWN_LIBS),$^) $(TEST_LIB) $(LECTURE_LIB) $(LIB) $(LIBS) $(CMOCKA_LIBS)

# A C test of a lecture's own code links that lecture's library.
$(BUILD)/tests/lectures/test_transformer: $(BUILD)/lectures/own/liblecture_scaling.a

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(COMMON) $(LECTURE_OPT) $(SAN_FLAGS) $< -o $@ $(LIB) $(LIBS)

$(TWIN_BIN): $(TWIN_SRC) $(wildcard tools/twin/*.hpp)
	@mkdir -p $(dir $@)
	$(call say,CXX,$@)
	$(Q)$(CXX) -std=c++17 -O2 $(WARN) $(SAN_FLAGS) $(shell pkg-config --cflags simgrid libcjson) $(TWIN_SRC) -o $@ \
	  $(shell pkg-config --libs simgrid libcjson)

# The set-up step installs what is missing (Debian packages, npm packages);
# it is quick when everything is there.
setup:
	@bash scripts/setup.sh test

# LECTURE=all: every lecture but the homework ones (a homework's starter fails
# its checks until the student solves it), one after the other.
ALL_LECTURES := $(filter-out homework_%,$(LECTURES))
run:
	@bash scripts/setup.sh run
ifeq ($(LECTURE),all)
	@$(MAKE) --no-print-directory $(ALL_LECTURES:%=$(BUILD)/lectures/%)
	@failed=; for l in $(ALL_LECTURES); do echo "== $$l"; \
	    bash scripts/run-lecture.sh $(BUILD)/lectures/$$l $(ARGS) || failed="$$failed $$l"; echo; done; \
	  echo "All lectures: open file://$(CURDIR)/viewer/index.html for the list"; \
	  if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi
else
	@$(MAKE) --no-print-directory $(BUILD)/lectures/$(LECTURE)
	@bash scripts/run-lecture.sh $(BUILD)/lectures/$(LECTURE) $(ARGS)
endif

# The lecture with --twin-record, then its replay on PLATFORM (a file of
# tools/twin/platforms/), written into the trace as each spawn's "twin"
# (docs/twin.md). Without SimGrid: a message, exit status 3, nothing run.
PLATFORM ?= this-machine
twin:
	@$(MAKE) --no-print-directory $(BUILD)/lectures/$(LECTURE) $(if $(filter 1,$(SIMGRID)),$(TWIN_BIN))
	@LECTERN_TWIN_REPLAY=$${LECTERN_TWIN_REPLAY-$(TWIN_BIN)} bash scripts/twin.sh $(BUILD)/lectures/$(LECTURE) "$(PLATFORM)" $(ARGS)

# A student's copy of a homework, built against this lectern from wherever
# it is (scripts/run_autograder): make submission SRC=dir/homework_08.c OUT=dir/homework_08
submission: $(LIB) $(LECTURE_LIB)
	@test -n "$(SRC)" -a -n "$(OUT)" || { echo "make submission SRC=FILE.c OUT=BINARY" >&2; exit 2; }
	$(call say,CC,$(SRC))
	$(Q)$(CC) $(LECTURE_WARN) $(COMMON) $(LECTURE_OPT) $(SAN_FLAGS) -I$(CURDIR)/lectures $(SRC) -o $(OUT) $(LECTURE_LIB) $(LIB) $(LIBS)

# A homework graded as a course's autograder grades it (docs/homework.md).
grade:
	@bash scripts/setup.sh run
	@$(MAKE) --no-print-directory $(BUILD)/lectures/$(LECTURE)
	@bash scripts/grade.sh $(BUILD)/lectures/$(LECTURE) $(ARGS)

# make test: every suite on the normal build, the sanitizer and CPU-only
# passes on the suites that exercise what differs there, a sample of the
# browser steps. make test-all: everything everywhere (what CI runs).
# Both build with one job per core (JOBS), and scripts/test.sh runs two
# suites at a time where there are two cores (docs/testing.md).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: setup
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@LECTERN_TEST_SCOPE=quick LECTERN_JOBS=$(JOBS) bash scripts/test.sh

test-all: setup
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@LECTERN_TEST_SCOPE=all LECTERN_JOBS=$(JOBS) bash scripts/test.sh

# The runtime's folders call each other one way only, lowest layer first
# (scripts/check_layers.py reads the objects with nm; scripts/test.sh runs it).
check-layers: $(RUNTIME_OBJ)
	@python3 scripts/check_layers.py --order $(shell echo $(LAYERS) | tr " " ,) $(RUNTIME_OBJ)

# The same tests, built with AddressSanitizer and UBSan (called by scripts/test.sh).
test-asan:
	@$(MAKE) --no-print-directory SAN=1 all

bench: setup
	@$(MAKE) --no-print-directory all
	@bash scripts/bench.sh

view:
	@bash scripts/view.sh

# One C style (.clang-format): format rewrites the files, format-check
# names those that differ (scripts/test.sh runs it).
format:
	@bash scripts/format.sh

format-check:
	@bash scripts/format.sh check

# How much of runtime/ and lectures/lib/ the tests run, line by line and
# branch by branch (gcov + gcovr); minutes. See docs/testing.md.
coverage: setup
	@bash scripts/coverage.sh

# Plants bugs one at a time in a copy of the tree and checks that the tests
# notice each; many minutes. See docs/testing.md.
mutate: setup
	@python3 scripts/mutate.py

# A GPU machine without network: pack here (gpu-bundle), run there (gpu-check,
# which uses what is built; it does not build). docs/gpu.md.
gpu-bundle:
	@bash scripts/gpu-bundle.sh

gpu-check:
	@bash scripts/gpu-check.sh

print-cuda:
	@echo $(CUDA)

print-nccl:
	@echo $(NCCL)

clean:
	rm -rf build build-asan build-cpu build-cov
