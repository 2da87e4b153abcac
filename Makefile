# make test: install what is missing (Debian OpenCL packages, Python test deps), build, run the suite.
# make test-slow: the long cases (the `slow` marker) that make test leaves out; CI runs them too.
# make test-sanitize: the suite under ASan + UBSan (a separate TLGPU_SANITIZE=1 build in build/sanitize).
# make fuzz: the property-based op fuzz test with a long example count.
# make demo: the RL learner demo (PPO on CartPole, actors fed by the weight publisher) on the default device.
PYTHON ?= python3
APT_PACKAGES := ocl-icd-opencl-dev pocl-opencl-icd clinfo
PY_PACKAGES := "numpy>=1.23" "ml_dtypes>=0.3" "pytest>=7" "hypothesis>=6" "build>=1" safetensors "gymnasium>=1.1" ale-py setuptools wheel "ray>=2.9" "gguf>=0.10"
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SAN_DIR := build/sanitize
FUZZ_EXAMPLES ?= 5000

.DEFAULT_GOAL := build

.PHONY: test test-slow test-sanitize fuzz demo build deps check-size bench clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@$(PYTHON) -c "import numpy, ml_dtypes, pytest, hypothesis, build, safetensors, gymnasium, ale_py, setuptools, wheel, ray, gguf" 2>/dev/null || \
	    $(PYTHON) -m pip install -q $(PY_PACKAGES)

# The tree's build carries the test hooks (-DTL_TEST_HOOKS); wheels and sdists built by pip do not.
build: deps
	TLGPU_TEST_HOOKS=1 $(PYTHON) setup.py -q build_ext --inplace

# Style budget: no source file past 800 lines, the publisher's past 700 (split by concern instead).
check-size:
	@big=$$(wc -l $$(find csrc -name '*.[ch]') kernels/*.cl kernels/*.h tlgpu/*.py tlgpu/*/*.py tests/*.py examples/*.py \
	        benchmarks/*.py | awk '$$2 != "total" && ($$1 > 800 || ($$2 ~ /csrc\/(.*\/)?(pub_|shm_channel)/ && $$1 > 700)) \
	        {print $$2 " (" $$1 " lines)"}'); \
	if [ -n "$$big" ]; then echo "over the line budget: $$big"; exit 1; fi

test: build check-size
	$(PYTHON) -m pytest -q -m "not slow" tests

# The long cases (pytest's `slow` marker: the emulated NVIDIA sweep builds, ~10 minutes with a cold kernel cache).
test-slow: build
	$(PYTHON) -m pytest -q -m slow tests

# The Python files beside a sanitizer build of _C; the tree's own build is left as it is. Child processes
# import that build too (tests/conftest.py puts TLGPU_PKG_ROOT first on PYTHONPATH; `python -c` children get -P,
# the examples put the tree after PYTHONPATH). Leak detection is off (the interpreter itself leaks at exit);
# any ASan or UBSan report ends the run with an error.
test-sanitize: deps
	$(PYTHON) -c "import shutil; shutil.copytree('tlgpu', '$(SAN_DIR)/tlgpu', dirs_exist_ok=True, \
	    ignore=shutil.ignore_patterns('*.so', '__pycache__'))"
	TLGPU_TEST_HOOKS=1 TLGPU_SANITIZE=1 $(PYTHON) setup.py -q build_ext --build-lib $(SAN_DIR) --build-temp $(SAN_DIR)-tmp
	TLGPU_SANITIZE=1 TLGPU_PKG_ROOT=$(SAN_DIR) LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	    ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(PYTHON) -m pytest -q -p no:cacheprovider -m "not slow" tests --ignore=tests/test_package.py

fuzz: build
	TLGPU_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTHON) -m pytest -q tests/test_fuzz.py tests/test_fuzz_ops.py -s

demo: build
	@$(PYTHON) -c "import gymnasium" 2>/dev/null || $(PYTHON) -m pip install -q "gymnasium>=1.1"
	$(PYTHON) examples/rl_learner.py

bench: build
	$(PYTHON) benchmarks/bench_dispatch.py
	$(PYTHON) benchmarks/bench_elementwise.py

clean:
	rm -rf build tlgpu/*.so
