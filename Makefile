# make test: install what is missing (Debian OpenCL packages, Python test deps), build, run the suite.
# make demo: the RL learner demo (PPO on CartPole, actors fed by the weight publisher) on the default device.
PYTHON ?= python3
APT_PACKAGES := ocl-icd-opencl-dev pocl-opencl-icd clinfo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test demo build deps check-size bench clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@$(PYTHON) -c "import numpy, pytest, setuptools, wheel" 2>/dev/null || \
	    $(PYTHON) -m pip install -q "numpy>=1.23" "pytest>=7" setuptools wheel

build: deps
	$(PYTHON) setup.py -q build_ext --inplace

# Style budget: no C source past 800 lines (split by concern instead).
check-size:
	@big=$$(wc -l csrc/*.c kernels/*.cl | awk '$$2 != "total" && $$1 > 800 {print $$2 " (" $$1 " lines)"}'); \
	if [ -n "$$big" ]; then echo "over the 800-line budget: $$big"; exit 1; fi

test: build check-size
	$(PYTHON) -m pytest -q tests

demo: build
	$(PYTHON) examples/rl_learner.py

bench: build
	$(PYTHON) benchmarks/bench_dispatch.py
	$(PYTHON) benchmarks/bench_elementwise.py

clean:
	rm -rf build tlgpu/*.so
