# pipemem: memory-controllable pipeline-parallel training, in C.
#
#   make            libpipemem.a and build/pipemem
#   make test       install missing Debian packages, build, run the tests and
#                   the fuzz replay, then run them again under AddressSanitizer
#                   + UBSan, then the threaded tests under ThreadSanitizer
#   make check      the tests and the fuzz replay against this build
#   make asan       the same under AddressSanitizer + UBSan (build/asan)
#   make tsan       the threaded tests under ThreadSanitizer (build/tsan)
#   make demo       install missing packages, build, run the main job
#   make bench      build and run the benchmarks
#   make fuzz       build every fuzz target with libFuzzer (clang)
#   make install    bin/pipemem, lib/libpipemem.{a,so}, include/pipemem/*.h,
#                   lib/pkgconfig/pipemem.pc, share/pipemem/blocks, the man page,
#                   under PREFIX (/usr/local) and DESTDIR; make uninstall removes them
#
# Fuzz targets: every fuzz/fuzz_NAME.c defines LLVMFuzzerTestOneInput; its
# seeds are fuzz/seeds/NAME/ and the inputs that once failed are kept in
# fuzz/crashes/NAME/. `make check` replays both folders through a plain
# driver (fuzz/replay.c, no libFuzzer), so a new target needs no edit here.
#
# User flags append to the project's (CFLAGS=..., CI adds CFLAGS+=-Werror).

CC ?= cc
CFLAGS ?= -O2 -g
LDFLAGS ?=
BUILD ?= build
SAN ?=

PM_CFLAGS = -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
            -D_POSIX_C_SOURCE=200809L -MMD -MP -Iinclude -Isrc $(SAN)

# Targets that install packages first must not need them to parse this file.
SELF_INSTALLING := $(filter test demo deps bench fuzz clean,$(MAKECMDGOALS))
ifeq ($(SELF_INSTALLING),)
  BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
  ifeq ($(BLAS_LIBS),)
    $(error OpenBLAS not found: run 'make deps' (or apt-get install libopenblas-dev pkg-config))
  endif
  CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
  # The tests parse traces (JSON) and timelines (SVG) with real parsers.
  CHECK_CFLAGS := $(shell pkg-config --cflags jansson libxml-2.0 2>/dev/null)
  CHECK_LIBS := $(shell pkg-config --libs jansson libxml-2.0 2>/dev/null)
  # The `optimal` schedule kinds solve a MILP with COIN-OR CBC when it is
  # there (coinor-libcbc-dev); NO_CBC=1 builds without it (they then say so).
  ifeq ($(NO_CBC),)
    CBC_LIBS := $(shell pkg-config --libs cbc 2>/dev/null)
  endif
  # The optimal kinds search time slots with the SAT solver CaDiCaL when it
  # is there (libcadical-dev: a static C++ library with a C API, no
  # pkg-config file); NO_SAT=1 builds without it (they then use the MILP).
  ifeq ($(NO_SAT),)
    SAT_LIBS := $(if $(wildcard /usr/include/ccadical.h),-lcadical)
  endif
  # Subword tokenizers (--tokenizer) are built when SentencePiece is there
  # (libsentencepiece-dev, whose API is C++: src/data/spm.cc); NO_SPM=1
  # builds without it (the options then say so).
  ifeq ($(NO_SPM),)
    SPM_LIBS := $(shell pkg-config --libs sentencepiece 2>/dev/null)
  endif
  # The MPI transport (--transport mpi) is built when OpenMPI's headers are
  # there (libopenmpi-dev); NO_MPI=1 builds without it (it then says so).
  ifeq ($(NO_MPI),)
    MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
    MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
  endif
endif

FINAL_CFLAGS = $(PM_CFLAGS) $(BLAS_CFLAGS) $(CFLAGS)
# OpenBLAS first: CBC pulls in -lblas, and sgemm must come from OpenBLAS.
FINAL_LIBS = $(BLAS_LIBS) $(CBC_LIBS) $(MPI_LIBS) $(SAT_LIBS) \
  $(if $(SPM_LIBS)$(SAT_LIBS),$(SPM_LIBS) -lstdc++) \
  -lm -lpthread $(SAN) $(LDFLAGS)
CXX ?= g++
FINAL_CXXFLAGS = -std=c++17 -Wall -Wextra -Wshadow -MMD -MP -Iinclude -Isrc $(SAN) $(CFLAGS)

LIB_SRC := $(sort $(wildcard src/util/*.c src/schedule/*.c src/model/*.c src/data/*.c src/train/*.c src/plan/*.c src/runtime/*.c src/select/*.c))
# the tokenizer: SentencePiece's C++ face, or the stub that says it is missing
LIB_SRC := $(filter-out $(if $(SPM_LIBS),src/data/tokenizer_none.c),$(LIB_SRC))
LIB_CXX := $(if $(SPM_LIBS),src/data/spm.cc)
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_HELP_SRC := $(filter-out $(TEST_SRC),$(sort $(wildcard tests/*.c)))
BENCH_SRC := $(sort $(wildcard bench/*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_NAMES := $(FUZZ_SRC:fuzz/fuzz_%.c=%)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(LIB_CXX:%.cc=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_HELP_OBJ := $(TEST_HELP_SRC:%.c=$(BUILD)/obj/%.o)
REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/replay/replay_%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB := $(BUILD)/libpipemem.a
BIN := $(BUILD)/pipemem
# The shared library: the same sources compiled position-independent.
VERSION := $(shell sed -n 's/^\#define PM_VERSION "\(.*\)"/\1/p' include/pipemem/pm_util.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME := libpipemem.so.$(SOMAJOR)
SO := $(BUILD)/libpipemem.so.$(VERSION)
PIC_OBJ := $(LIB_SRC:%.c=$(BUILD)/pic/%.o) $(LIB_CXX:%.cc=$(BUILD)/pic/%.o)
MAN := $(BUILD)/pipemem.1
PC := $(BUILD)/pipemem.pc
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib

.PHONY: all test check asan tsan demo deps bench fuzz clean install uninstall install-check
all: $(LIB) $(BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(FINAL_CXXFLAGS) -c $< -o $@

$(BUILD)/pic/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(FINAL_CXXFLAGS) -fPIC -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(FINAL_CFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(FINAL_LIBS)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -fPIC -c $< -o $@

# The shared library exports the public headers' API and nothing else: a
# linker version script made from the headers (scripts/api_symbols.sh) hides
# the rest. A version script rather than -fvisibility=hidden with an export
# macro because it also hides what the static libraries linked in define
# (CaDiCaL's C++ classes, the C++ runtime's template instances), the headers
# stay plain declarations, and the static library (which the CLI, the tests
# and the benchmarks link, using internal functions through src/) is built
# exactly as before. install_check.sh compares `nm -D` with the same list.
$(BUILD)/libpipemem.map: scripts/api_symbols.sh $(wildcard include/pipemem/*.h)
	@mkdir -p $(dir $@)
	{ echo '{ global:'; scripts/api_symbols.sh | sed 's/$$/;/'; echo 'local: *; };'; } > $@.tmp
	mv $@.tmp $@

$(SO): $(PIC_OBJ) $(BUILD)/libpipemem.map
	$(CC) $(FINAL_CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(BUILD)/libpipemem.map \
	  -o $@ $(PIC_OBJ) $(FINAL_LIBS)

# The man page comes from the binary's own --help texts.
$(MAN): $(BIN) scripts/manpage.sh
	scripts/manpage.sh $(BIN) > $@.tmp && mv $@.tmp $@

$(PC): scripts/pipemem.pc.in include/pipemem/pm_util.h Makefile
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	  -e 's|@PRIVATE@|$(strip $(BLAS_LIBS) $(CBC_LIBS) $(MPI_LIBS) $(SAT_LIBS) $(if $(SPM_LIBS)$(SAT_LIBS),$(SPM_LIBS) -lstdc++) -lm -lpthread)|' $< > $@

install: all $(SO) $(MAN) $(PC)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(PREFIX)/include/pipemem $(DESTDIR)$(PREFIX)/share/pipemem/blocks \
	  $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/pipemem
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libpipemem.a
	install -m 755 $(SO) $(DESTDIR)$(LIBDIR)/libpipemem.so.$(VERSION)
	ln -sf libpipemem.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libpipemem.so
	install -m 644 include/pipemem/*.h $(DESTDIR)$(PREFIX)/include/pipemem/
	install -m 644 $(PC) $(DESTDIR)$(LIBDIR)/pkgconfig/pipemem.pc
	install -m 644 blocks/*.block $(DESTDIR)$(PREFIX)/share/pipemem/blocks/
	install -m 644 $(MAN) $(DESTDIR)$(PREFIX)/share/man/man1/pipemem.1

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/pipemem $(DESTDIR)$(LIBDIR)/libpipemem.a \
	  $(DESTDIR)$(LIBDIR)/libpipemem.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/libpipemem.so $(DESTDIR)$(LIBDIR)/pkgconfig/pipemem.pc \
	  $(DESTDIR)$(PREFIX)/share/man/man1/pipemem.1
	rm -rf $(DESTDIR)$(PREFIX)/include/pipemem $(DESTDIR)$(PREFIX)/share/pipemem

# Installs into a temporary DESTDIR, builds examples/ against it with
# pkg-config (shared and static), runs it, renders the man page, uninstalls.
install-check: all $(SO) $(MAN) $(PC)
	@scripts/install_check.sh "$(MAKE)" "$(BUILD)"

$(BUILD)/obj/tests/%.o: FINAL_CFLAGS += $(CHECK_CFLAGS)
$(BUILD)/obj/src/schedule/milp.o $(BUILD)/pic/src/schedule/milp.o: \
  FINAL_CFLAGS += $(if $(CBC_LIBS),-DPM_HAVE_CBC)
$(BUILD)/obj/src/schedule/slots.o $(BUILD)/pic/src/schedule/slots.o: \
  FINAL_CFLAGS += $(if $(SAT_LIBS),-DPM_HAVE_CADICAL)
$(BUILD)/obj/src/runtime/transport_mpi.o $(BUILD)/pic/src/runtime/transport_mpi.o: \
  FINAL_CFLAGS += $(if $(MPI_LIBS),-DPM_HAVE_MPI $(MPI_CFLAGS))
$(BUILD)/bench/bench_mpi: FINAL_CFLAGS += $(if $(MPI_LIBS),-DPM_HAVE_MPI $(MPI_CFLAGS))
# AdamW's loop vectorises once sqrtf may skip errno (exact either way: see
# optim.c); GCC's -O2 cost model also needs loosening (clang has no such flag)
VECT_CFLAGS := $(shell $(CC) -fvect-cost-model=dynamic -E -x c /dev/null >/dev/null 2>&1 && \
  echo -fvect-cost-model=dynamic)
$(BUILD)/obj/src/train/optim.o $(BUILD)/pic/src/train/optim.o: \
  FINAL_CFLAGS += -fno-math-errno $(VECT_CFLAGS)

$(BUILD)/tests/%: tests/%.c $(TEST_HELP_OBJ) $(LIB)
	$(if $(CHECK_LIBS),,$(error Jansson or libxml2 not found: run 'make deps' (or apt-get install libjansson-dev libxml2-dev)))
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(TEST_HELP_OBJ) $(LIB) $(CMOCKA_LIBS) \
	  $(CHECK_LIBS) $(FINAL_LIBS)

# One replay driver per fuzz target, built like the tests (so under the
# sanitizers in the asan pass). A target may call the CLI's parsers
# (fuzz_tasks.c: select's values and tasks files): the CLI's objects but
# main.o are linked in.
FUZZ_CLI_OBJ = $(filter-out $(BUILD)/obj/src/cli/main.o,$(CLI_OBJ))
$(BUILD)/replay/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(FUZZ_CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -o $@ $< fuzz/replay.c $(FUZZ_CLI_OBJ) $(LIB) $(FINAL_LIBS)

# Benchmarks start like the CLI: re-executed with OpenBLAS's fast kernels.
$(BUILD)/bench/%: bench/%.c $(LIB) $(BUILD)/obj/src/cli/reexec.o
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -o $@ $< $(BUILD)/obj/src/cli/reexec.o $(LIB) $(FINAL_LIBS)

deps:
	@scripts/deps.sh

# check: the tests and the fuzz replay against this build (the benchmarks
# are built too, so an API change cannot leave them broken unseen), after
# scripts/lib_words.sh (no CLI flag in the library's messages) and
# scripts/api_users.sh (every name the shared library exports is one the
# binary, examples/ or a documented entry point uses); test:
# deps, check, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, then the threaded tests under ThreadSanitizer.
check: all $(TEST_BIN) $(REPLAY_BIN) $(if $(SAN),,$(SO) $(MAN) $(PC) $(BENCH_BIN))
	@scripts/lib_words.sh
	@$(if $(SAN),true,scripts/api_users.sh $(BUILD))
	@PM_BIN=$(BIN) scripts/run_tests.sh $(TEST_BIN) $(REPLAY_BIN)
	@$(if $(SAN),true,scripts/install_check.sh "$(MAKE)" "$(BUILD)")

asan:
	@$(MAKE) --no-print-directory BUILD=build/asan CFLAGS="-O1 -g $(filter -Werror,$(CFLAGS))" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" check

# tsan: the tests that start threads: the device threads and their
# transport, the pipeline step (test_runtime), the model's compute pool
# (test_kernels, test_model), checkpoint writers in parts (test_train), the
# CLI's train --pp and a pipeline run resumed from a checkpoint
# (test_cli_train), model selection's device threads (test_select, a
# sweep's session through the library: test_session, and select with
# --spill through the CLI: test_cli_select), ASHA's promotions under their
# lock, through the CLI (test_cli_sweep), and the pass times
# measured on several threads at once (test_plan_gpu's one threaded test:
# its others are single-threaded and would take minutes here).
# scripts/tsan.supp says why OpenBLAS is exempt (named whole: a test may run
# the binary from another directory).
TSAN_TESTS = test_runtime test_kernels test_model test_train test_cli_train test_select \
             test_cli_select test_session test_cli_sweep test_plan_gpu
tsan:
	@$(MAKE) --no-print-directory BUILD=build/tsan CFLAGS="-O1 -g $(filter -Werror,$(CFLAGS))" \
	  SAN="-fsanitize=thread" all $(TSAN_TESTS:%=build/tsan/tests/%)
	@TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
	  PM_PLAN_GPU_ONLY=test_measure_threads PM_BIN=build/tsan/pipemem scripts/run_tests.sh $(TSAN_TESTS:%=build/tsan/tests/%)

# test builds on every core unless told otherwise (make -jN test); the
# programs themselves run PM_TEST_JOBS at a time (scripts/run_tests.sh).
JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))
test:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory $(JOBS) check
	@$(MAKE) --no-print-directory $(JOBS) asan
	@$(MAKE) --no-print-directory $(JOBS) tsan

demo:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

bench:
	@scripts/deps.sh python3-torch
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

# The library is built with coverage instrumentation (fuzzer-no-link) and
# linked as an archive, so only the objects a target needs are pulled in.
# clang (and its libFuzzer runtime) is installed here only: the tests do
# not need it.
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_BIN = $(FUZZ_NAMES:%=build/fuzz/fuzz_%)
fuzz:
	@scripts/deps.sh clang libclang-rt-dev
	@$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang CXX=clang++ CFLAGS="-g -O1" \
	  SAN="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" $(FUZZ_BIN)
	@for n in $(FUZZ_NAMES); do echo "run: mkdir -p build/fuzz/corpus/$$n && build/fuzz/fuzz_$$n" \
	  "$$(test -f fuzz/$$n.dict && echo -dict=fuzz/$$n.dict) -max_total_time=300" \
	  "build/fuzz/corpus/$$n fuzz/seeds/$$n"; done

build/fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_CLI_OBJ) $(LIB)
	$(CC) $(FINAL_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_CLI_OBJ) $(LIB) $(FINAL_LIBS)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_HELP_OBJ:.o=.d) $(PIC_OBJ:.o=.d)
