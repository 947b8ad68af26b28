# Stress suite: crash loop, fuzzer, concurrency waves, access-control properties, fault injection,
# against real server processes on 127.0.0.1. Not part of `make test`. Included by the main
# Makefile, which defines PY and STAMP (MODELS_STAMP comes from mk/models.mk).
#
#   make stress                        the full run (~15 min on 2 cores) -> bench/results/stress.json
#   make stress STRESS_ARGS=--quick    ~3 min at reduced volumes -> bench/results/tmp/stress-quick.json
#   STRESS_ARGS="--only fuzz --seed 7" one part, another seed (python -m bench.stress --help)
#
# It exits non-zero when a target is missed or could not be measured. As root it also mounts
# (and unmounts) small tmpfs file systems for the full-disk and read-only cases; otherwise those
# are recorded as skipped.

STRESS_ARGS ?=
# The stress run shares the machine politely; set STRESS_NICE= for a dedicated one.
STRESS_NICE ?= nice -n 10

.PHONY: stress

stress: $(STAMP) $(MODELS_STAMP)
	$(STRESS_NICE) $(PY) -m bench.stress $(STRESS_ARGS)
