# Retrieval quality evaluation. Included by the main Makefile, which defines PY, STAMP and DATA
# (MODELS_STAMP comes from mk/models.mk).
#
#   make eval          SciFact (test) and LoCoMo (dev): every single space, profile and stage
#                      ablation -> bench/results/eval.{json,md}. Embeddings are cached under
#                      var/eval/cache (the first run embeds SciFact: ~15 min on 2 cores, more when shared).
#   make eval-latency  retrieve latency on a synthetic 100,000-memory corpus -> bench/results/latency.json
#   make calibrate     refit the calibrated relevance on SciFact train + LoCoMo dev ->
#                      teleo_server/pipeline/relevance.json and bench/results/calibration.json
#   make floors        the openclaw profile's results kept by score and relevance floors ->
#                      bench/results/floors.json
#   make agent-loop    LoCoMo dev replayed through the Claude Code hooks -> bench/results/agent_loop.json
#                      (~20 min on 2 cores; AGENT_LOOP_ARGS=--quick for ~2 min)
#   make knowledge-update  the generated knowledge-update set (no DATA needed): the profiles side by
#                      side -> bench/results/knowledge_update.json, and a Store's update hints ->
#                      bench/results/knowledge_update_hints.json (~1 min once embeddings are cached)
#   EVAL_ARGS="--only scifact --quick" narrows a run.

EVAL_ARGS ?=
EVAL_NICE ?= nice -n 10

.PHONY: eval eval-latency calibrate floors agent-loop knowledge-update

eval: $(STAMP) $(MODELS_STAMP)
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.run --data $(DATA) $(EVAL_ARGS)

eval-latency: $(STAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.latency $(EVAL_ARGS)

calibrate: $(STAMP) $(MODELS_STAMP)
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.calibrate --data $(DATA)

floors: $(STAMP) $(MODELS_STAMP)
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.floors --data $(DATA)

AGENT_LOOP_ARGS ?=
agent-loop: $(STAMP) $(MODELS_STAMP)
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.agents.loop --data $(DATA) $(AGENT_LOOP_ARGS)

knowledge-update: $(STAMP) $(MODELS_STAMP)
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.knowledge_update.run
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 $(EVAL_NICE) $(PY) -m bench.eval.knowledge_update.hints --grid
