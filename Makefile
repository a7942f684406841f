# pipemem: memory-controllable pipeline-parallel training, in C.
#
#   make            libpipemem.a and build/pipemem
#   make test       install missing Debian packages, build, run the tests,
#                   then run them again under AddressSanitizer + UBSan
#   make demo       install missing packages, build, run the main job
#   make bench      build and run the benchmarks
#   make fuzz       build the parser fuzz target (clang, libFuzzer)
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
SELF_INSTALLING := $(filter test demo deps bench clean,$(MAKECMDGOALS))
ifeq ($(SELF_INSTALLING),)
  BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
  ifeq ($(BLAS_LIBS),)
    $(error OpenBLAS not found: run 'make deps' (or apt-get install libopenblas-dev pkg-config))
  endif
  CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
endif

FINAL_CFLAGS = $(PM_CFLAGS) $(BLAS_CFLAGS) $(CFLAGS)
FINAL_LIBS = $(BLAS_LIBS) -lm -lpthread $(SAN) $(LDFLAGS)

LIB_SRC := $(sort $(wildcard src/util/*.c src/schedule/*.c src/model/*.c src/data/*.c src/train/*.c src/runtime/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB := $(BUILD)/libpipemem.a
BIN := $(BUILD)/pipemem

.PHONY: all test check asan demo deps bench fuzz clean
all: $(LIB) $(BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(FINAL_CFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(FINAL_LIBS)

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -o $@ $< $(LIB) $(CMOCKA_LIBS) $(FINAL_LIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -o $@ $< $(LIB) $(FINAL_LIBS)

deps:
	@scripts/deps.sh

# check: the tests against this build; test: deps, check, then the same
# suite under AddressSanitizer and UndefinedBehaviorSanitizer.
check: all $(TEST_BIN)
	@PM_BIN=$(BIN) scripts/run_tests.sh $(BUILD)/tests

asan:
	@$(MAKE) --no-print-directory BUILD=build/asan CFLAGS="-O1 -g $(filter -Werror,$(CFLAGS))" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" check

test:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory check
	@$(MAKE) --no-print-directory asan

demo:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

bench:
	@scripts/deps.sh python3-torch
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

# The library is built with coverage instrumentation (fuzzer-no-link) and
# linked as an archive, so only the objects the parsers need are pulled in.
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
fuzz:
	@$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang CFLAGS="-g -O1" \
	  SAN="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" build/fuzz/libpipemem.a
	clang -std=c11 -g -O1 -Iinclude -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer $(FUZZ_SAN) \
	  -o build/fuzz/fuzz_parsers fuzz/fuzz_parsers.c build/fuzz/libpipemem.a -lm
	@echo "run: mkdir -p build/fuzz/corpus && build/fuzz/fuzz_parsers -dict=fuzz/parsers.dict -max_total_time=300 build/fuzz/corpus fuzz/seeds"

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
