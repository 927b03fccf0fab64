"""Run the Kafka clients' own integration suites, unchanged, against a fresh gateway each.

    python compat_tests/upstream/run_kafka_suites.py --python SUITE_PYTHON \
        [--kafka-python CHECKOUT] [--aiokafka CHECKOUT] [--confluent-kafka CHECKOUT] [--kombu CHECKOUT]
        [-k EXPR]

Each CHECKOUT is the client's source tree at the tag under test (kafka-python 3.0.11, aiokafka
0.14.0, confluent-kafka-python 2.15.0, kombu 5.6.2), kept outside this repository. SUITE_PYTHON is an
interpreter with the suites' test requirements (README: "Upstream client suites"). Every suite
gets its own gateway with the test-broker settings its upstream harness gives Kafka: num.partitions
(kafka-python 4, aiokafka 2, confluent-kafka 3, kombu 1), group.initial.rebalance.delay.ms=0 and,
for kafka-python, group.min.session.timeout.ms=1000. How each suite is pointed at it:

- kafka-python: its fixtures' external-broker mode (KAFKA_URI), KAFKA_VERSION=3.0.0, test/integration
  except its TLS tests (the gateway has no TLS listener); KAFKA_ROOT names an empty directory, as
  the fixtures want one even for an external broker;
- aiokafka: its fixtures start a Kafka image through Docker; a stand-in plugin
  (aiokafka_docker_shim.py) starts the gateway instead, on the port and with the partition count
  the fixture asks for; the checkout's pure-Python build (AIOKAFKA_NO_EXTENSIONS=1); not its TLS
  tests, nor test_sasl.py, which needs SASL listeners beside the plaintext one and ACLs set with
  the image's kafka-acls tool (one gateway serves one listener; compat_tests/kafka covers SASL and
  ACLs with aiokafka);
- confluent-kafka: its bring-your-own-cluster mode (BROKERS), tests/integration, with the
  interpreter's installed confluent_kafka (the C extension is not built from the checkout); not
  the Schema Registry tests (no registry), share consumers (KIP-932, Kafka 4) nor the tests that
  deploy their own SASL cluster with trivup;
- kombu (its Kafka transport, over confluent-kafka): t/integration/test_kafka.py with -E kafka, the
  gateway on localhost:9092, where those tests look for Kafka.

Prints each suite's score and every failure with its first message line; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_runner import PYTHON_ENV, Gateway  # noqa: E402

HERE = Path(__file__).resolve().parent
# The broker version the suites gate their tests on: Kafka 2.8's APIs plus ListOffsets v7, which
# makes version probes (kafka-python's among them) take the gateway for a 3.0 broker.
KAFKA_VERSION = "3.0.0"


@dataclass
class Suite:
    name: str
    checkout: Path
    paths: list[str]
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    partitions: int | None = None          # None: the suite's harness starts the gateway itself
    min_session_timeout_ms: int = 6000
    port: int = 0                          # where the gateway listens (0: any free port)


@dataclass
class Score:
    passed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: int = 0


def suites(options: argparse.Namespace) -> list[Suite]:
    chosen = []
    if options.kafka_python:
        # KAFKA_ROOT: the fixtures look for a Kafka installation even for an external broker.
        chosen.append(Suite("kafka-python", options.kafka_python, ["test/integration"],
                            {"KAFKA_VERSION": KAFKA_VERSION, "KAFKA_ROOT": tempfile.mkdtemp(prefix="no-kafka-")},
                            ["--ignore=test/integration/test_ssl_integration.py"],   # no TLS listener
                            partitions=4, min_session_timeout_ms=1000))
    if options.aiokafka:
        chosen.append(Suite("aiokafka", options.aiokafka, ["tests"],
                            {"AIOKAFKA_NO_EXTENSIONS": "1", "PYTHONPATH": str(HERE)},
                            ["-p", "aiokafka_docker_shim", f"--docker-image=gateway/kafka:{KAFKA_VERSION}",
                             "--no-pull", "--ignore=tests/test_sasl.py", *(f"--deselect=tests/{test}" for test in (
                                 "test_consumer.py::TestConsumerIntegration::test_ssl_consume",
                                 "test_producer.py::TestKafkaProducerIntegration::test_producer_ssl",
                                 "test_helpers.py::test_create_ssl_context"))]))
    if options.kombu:   # its tests name localhost:9092
        chosen.append(Suite("kombu", options.kombu, ["t/integration/test_kafka.py"], {}, ["-E", "kafka"],
                            partitions=1, port=9092))
    if options.confluent_kafka:
        chosen.append(Suite("confluent-kafka", options.confluent_kafka, ["tests/integration"], {},
                            ["--ignore=tests/integration/schema_registry", "-k", "not sasl_cluster and not share_"],
                            partitions=3))
    return chosen


def run(suite: Suite, python: str, gateway_python: str, keyword: str | None, results: Path) -> Score:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(suite.env)
    env[PYTHON_ENV] = gateway_python
    gateway = None
    if suite.partitions is not None:
        gateway = Gateway(port=suite.port, partitions=suite.partitions,
                          min_session_timeout_ms=suite.min_session_timeout_ms, python=gateway_python)
        env.update(KAFKA_URI=f"PLAINTEXT://{gateway.bootstrap}", BROKERS=gateway.bootstrap)
    report = results / f"{suite.name}.xml"
    command = [python, "-m", "pytest", *suite.paths, *suite.args, "-p", "no:cacheprovider", "-q",
               "-o", "timeout=300", f"--junitxml={report}"]
    if keyword:
        at = command.index("-k") + 1 if "-k" in command else None
        if at is None:
            command += ["-k", keyword]
        else:
            command[at] = f"({command[at]}) and ({keyword})"
    print(f"== {suite.name}: {' '.join(command)}" + (f" (gateway {gateway.bootstrap})" if gateway else ""),
          flush=True)
    try:
        subprocess.run(command, cwd=suite.checkout, env=env, stdout=subprocess.DEVNULL if not os.environ.get(
            "SUITE_OUTPUT") else None)
    finally:
        if gateway is not None:
            gateway.stop()
    return score(report)


def score(report: Path) -> Score:
    result = Score()
    if not report.exists():
        result.failed.append(("(the suite did not run)", "no report written"))
        return result
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            result.failed.append((name, message[0][:200] if message else ""))
        elif case.find("skipped") is not None:
            result.skipped += 1
        else:
            result.passed += 1
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="interpreter with the suites' test requirements")
    parser.add_argument("--kafka-python", type=Path, help="kafka-python checkout")
    parser.add_argument("--aiokafka", type=Path, help="aiokafka checkout")
    parser.add_argument("--confluent-kafka", type=Path, help="confluent-kafka-python checkout")
    parser.add_argument("--kombu", type=Path, help="kombu checkout (its Kafka transport; needs port 9092 free)")
    parser.add_argument("-k", dest="keyword", help="only the tests pytest -k selects")
    options = parser.parse_args()
    chosen = suites(options)
    if not chosen:
        parser.error("name at least one checkout")
    results = Path(tempfile.mkdtemp(prefix="kafka-suites-"))
    scores = {suite.name: run(suite, options.python, sys.executable, options.keyword, results) for suite in chosen}
    failed = 0
    for name, result in scores.items():
        ran = result.passed + len(result.failed)
        print(f"\n{name}: {result.passed}/{ran} passed, {len(result.failed)} failed, {result.skipped} skipped")
        for test, message in result.failed:
            print(f"  FAIL {test}: {message}")
        failed += len(result.failed)
    total = sum(r.passed + len(r.failed) for r in scores.values())
    print(f"\ntotal: {total - failed}/{total} passed (reports in {results})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
