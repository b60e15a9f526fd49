# vrsim: hand-written Makefile. `make` builds ./vrsim; `make test` runs the unit tests, then the
# unit and command-line tests again under AddressSanitizer + UBSan (SAN=address,undefined; all but
# SAN_SKIP's), the command-line scripts JOBS at a time (tests/run_scripts.sh; JOBS: the CPUs).
# Targets: all test asan bench fuzz calibrate reports clean

CC      ?= cc
PKGS    := gsl lua5.4 libcjson zlib libdeflate yaml-0.1
SAN     ?=
OPT     ?= -O2
CFLAGS  := -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -Wshadow \
           -Wstrict-prototypes -Wmissing-prototypes -g $(OPT) \
           $(shell pkg-config --cflags $(PKGS)) -Isim -Ithird_party/tomlc17
LDLIBS  := $(shell pkg-config --libs $(PKGS)) -lm
TESTLIBS := $(shell pkg-config --libs cmocka)

ifneq ($(SAN),)
  BUILD := build-san
  CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=$(SAN)
else
  BUILD := build
endif

# (third_party/: vendored C libraries Debian does not package, each with its LICENSE)
LIB_SRC  := $(filter-out sim/main.c,$(wildcard sim/*.c sim/bind/*.c)) third_party/tomlc17/tomlc17.c
# lua/'s modules precompiled into the binary (sim/bind/luabc.h; tools/luabc_gen.c writes them)
LUA_FILES := $(sort $(shell find lua -name '*.lua'))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/luabc.o
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)

.PHONY: all test unit asan scenario-test html-test bench fuzz calibrate reports clean oracle
all: vrsim

ifeq ($(SAN),)
vrsim: $(BUILD)/sim/main.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
else
vrsim: $(BUILD)/vrsim
endif

$(BUILD)/vrsim: $(BUILD)/sim/main.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tools/luabc_gen: tools/luabc_gen.c sim/bind/luabc.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

$(BUILD)/gen/luabc.c: $(BUILD)/tools/luabc_gen $(LUA_FILES)
	@mkdir -p $(dir $@)
	$(BUILD)/tools/luabc_gen lua $@ $(LUA_FILES)

$(BUILD)/gen/luabc.o: $(BUILD)/gen/luabc.c sim/bind/luabc.h
	$(CC) $(CFLAGS) -O0 -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $(shell pkg-config --cflags cmocka) $(LDFLAGS) -o $@ $< $(LIB_OBJ) $(LDLIBS) $(TESTLIBS)

# The command-line tests (tests/*.sh), run JOBS at a time by tests/run_scripts.sh: the slowest first
# so that the last to start are short.
SHELL_TESTS := tests/scenario_tests.sh \
  tests/test_sdxl.sh \
  tests/test_published.sh \
  tests/test_oracle.sh \
  tests/test_families.sh \
  tests/test_recipes.sh \
  tests/test_pipeline.sh \
  tests/test_quant.sh \
  tests/test_validate.sh \
  tests/test_techniques.sh \
  tests/test_hostile.sh \
  tests/test_dit.sh \
  tests/test_sweep.sh \
  tests/test_compile.sh \
  tests/test_inputs.sh \
  tests/test_cp_ep.sh \
  tests/test_zero_units.sh \
  tests/test_moe.sh \
  tests/test_fields.sh \
  tests/test_doctor.sh \
  tests/test_ttc.sh \
  tests/test_diffusion.sh \
  tests/test_readers.sh \
  tests/test_outputs.sh \
  tests/test_kbit.sh \
  tests/test_litgpt.sh \
  tests/test_mla.sh \
  tests/test_tp_compile.sh \
  tests/test_mesh.sh \
  tests/test_streams.sh \
  tests/test_ddp_bucket.sh \
  tests/test_record_dpovar.sh \
  tests/test_hub_kernels.sh \
  tests/test_defaults.sh \
  tests/test_tfversion.sh \
  tests/test_async_tp.sh \
  tests/test_megatron_tp.sh \
  tests/test_megatron_dp.sh \
  tests/test_megatron_rc.sh \
  tests/test_megatron_pp.sh \
  tests/test_megatron_mix.sh \
  tests/test_ops.sh \
  tests/test_record_techniques.sh \
  tests/test_record_dcompile.sh \
  tests/test_warmup.sh \
  tests/test_bnb_optim.sh \
  tests/test_tech_records.sh \
  tests/test_sdpa_tables.sh \
  tests/test_fp8_gemm.sh \
  tests/test_contention.sh
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Left out of the sanitizer pass: the slowest scripts, whose C paths (the engine, the allocator,
# the readers and writers, maxbatch, sweep, the pipeline's schedule: test_cp_ep.sh runs cp beside
# 1F1B and build/tests/test_pipeline the schedules; config.json: test_inputs.sh, test_hostile.sh,
# test_kbit.sh; --alloc-trace: test_inputs.sh, test_moe.sh, test_mla.sh) the other scripts run
# under the sanitizers too; what they add is model shapes and answers (test_pipeline.sh:
# torchtitan's 405B rows; test_families.sh: the families' configs), which are Lua and checked by
# the first pass, and the oracle's comparisons (test_oracle.sh), Python over the same --alloc-trace.
SAN_SKIP := tests/scenario_tests.sh tests/test_sdxl.sh tests/test_published.sh tests/test_pipeline.sh \
  tests/test_families.sh tests/test_oracle.sh

# Unit tests of this build, then the command-line tests with this build's binary.
unit: $(TEST_BIN) $(BUILD)/vrsim
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done
	@VRSIM=$(BUILD)/vrsim JOBS=$(JOBS) sh tests/run_scripts.sh $(if $(SAN),$(filter-out $(SAN_SKIP),$(SHELL_TESTS)),$(SHELL_TESTS))
	@VRSIM=$(BUILD)/vrsim sh tests/html/check.sh; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]

test:
	$(MAKE) -j$(JOBS) unit
	$(MAKE) -j$(JOBS) SAN=address,undefined OPT=-O1 unit

asan:
	$(MAKE) SAN=address,undefined OPT=-O1 unit

# report.html in headless Chromium (Debian's chromium package); part of `unit` when installed
html-test: vrsim
	sh tests/html/check.sh

bench: vrsim
	sh tests/bench.sh

fuzz:
	$(MAKE) -f tests/fuzz/Makefile

calibrate:
	$(MAKE) -C sim/calib

reports: vrsim
	sh reports/make_reports.sh

clean:
	rm -rf build build-san vrsim out

-include $(shell find build build-san -name '*.d' 2>/dev/null)

# The oracle's captures again, from validation/oracle/specs/ (needs torch, transformers, peft:
# ORACLE_PYTHON names the interpreter that has them; docs/oracle.md)
ORACLE_PYTHON ?= python3
oracle:
	@$(ORACLE_PYTHON) -c "import torch, transformers" 2>/dev/null || { echo "make oracle: $(ORACLE_PYTHON) cannot import torch and transformers"; exit 2; }
	@set -e; for s in validation/oracle/specs/*.json; do $(ORACLE_PYTHON) validation/oracle/capture.py $$s; done
	@set -e; for s in validation/oracle/specs_tp/*.json; do $(ORACLE_PYTHON) validation/oracle/capture_tp.py $$s; done
	@set -e; for s in validation/oracle/specs_cp/*.json; do $(ORACLE_PYTHON) validation/oracle/capture_cp.py $$s; done
	@if $(ORACLE_PYTHON) -c "import megatron.core" 2>/dev/null; then \
	  set -e; for s in validation/oracle/specs_megatron/*.json; do $(ORACLE_PYTHON) validation/oracle/capture_megatron_tp.py $$s; done; \
	  for s in validation/oracle/specs_megatron_dp/*.json; do $(ORACLE_PYTHON) validation/oracle/capture_megatron_dp.py $$s; done; \
	  for s in validation/oracle/specs_megatron_pp/*.json; do $(ORACLE_PYTHON) validation/oracle/capture_megatron_pp.py $$s; done; \
	else echo "make oracle: $(ORACLE_PYTHON) cannot import megatron.core (pip install --no-deps megatron-core==0.16.1): specs_megatron/, specs_megatron_dp/ and specs_megatron_pp/ not captured"; fi
