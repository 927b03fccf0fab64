"""Run the AMQP client libraries' own integration suites against the gateway and against RabbitMQ.

    python -m compat_tests.upstream.run_amqp_suites --pika PATH --aio-pika PATH --aiormq PATH --kombu PATH

Each PATH is a checkout of the library's public repository at the release the suite belongs to
(pika 1.4.4, aio-pika 9.6.0, aiormq 6.9.2, kombu 5.6.2); nothing is downloaded here. For every
suite given, a fresh `gateway serve` and a fresh private RabbitMQ node (Debian's rabbitmq-server,
bench/rabbitmq.py) are started, the suite runs unchanged against each (pytest, with
compat_tests/upstream/broker_shim.py pointing it at the broker), and the two scores are printed
with every test whose outcome differs. Tests that need what neither side is set up for (TLS) are
left out of both runs. The gateway's warnings and errors are summed up after its runs.

The suite's library is imported from its checkout (aio-pika also takes aiormq from its checkout),
so the suites run with the release they were written for whatever version is installed. Their
test dependencies are the `upstream` extra of pyproject.toml, except aiomisc-pytest: a pytest plugin
that takes over every async test of any pytest run where it is installed, so it goes into a
directory of its own, given with --site (`pip install --no-deps --target DIR aiomisc-pytest`).
Exit status: 0 when the gateway passes every test RabbitMQ passes, 1 otherwise.

With `--cluster N` the gateway side is a local cluster (`gateway cluster up` as a library: 3 bookies,
N brokers) and the suite connects to its first broker only, so most of its queues are served by
another broker and everything the suite does to them goes over the peer links. The suite starts
once the bundles have settled over every broker (each join moves some).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
TEST_TIMEOUT_S = 60


@dataclass(frozen=True)
class Suite:
    name: str
    release: str
    paths: tuple[str, ...]                    # test files or directories, relative to the checkout
    pytest_args: tuple[str, ...] = ()
    also_import: tuple[str, ...] = ()         # other suites whose checkouts go on the path too
    env: dict[str, str] = field(default_factory=dict)    # "{port}": the broker's AMQP port


SUITES = {
    "pika": Suite("pika", "1.4.4", ("tests/acceptance/blocking_adapter_test.py",
                                    "tests/acceptance/async_adapter_tests.py",
                                    "tests/acceptance/enforce_one_basicget_test.py"),
                  ("-p", "no:asyncio")),
    "aiormq": Suite("aiormq", "6.9.2", ("tests/test_channel.py", "tests/test_connection.py"),
                    ("-p", "no:asyncio", "-k", "not amqps and not ssl"),
                    env={"AMQP_URL": "amqp://guest:guest@localhost:{port}/"}),
    "aio-pika": Suite("aio-pika", "9.6.0", ("tests",),
                      ("-p", "no:asyncio", "--ignore=tests/test_amqps.py"), also_import=("aiormq",)),
    "kombu": Suite("kombu", "5.6.2", ("t/integration/test_py_amqp.py",), ("-p", "no:asyncio", "-E", "py-amqp"),
                   env={"RABBITMQ_HOST": "localhost", "RABBITMQ_5672_TCP": "{port}"}),
}


def run_suite(suite: Suite, checkouts: dict[str, Path], site: list[Path], port: int, report: Path,
              extra: list[str]) -> dict[str, str]:
    """Run one suite against the broker on `port`; its outcome per test."""
    checkout = checkouts[suite.name]
    path = [str(checkout), *(str(checkouts[other]) for other in suite.also_import if other in checkouts),
            *map(str, site), str(REPO)]
    env = {**os.environ, **{k: v.format(port=port) for k, v in suite.env.items()}, "UPSTREAM_AMQP_PORT": str(port),
           "PYTHONPATH": os.pathsep.join(path + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "compat_tests.upstream.broker_shim", "-p", "no:cacheprovider",
               "-o", "addopts=", f"--timeout={TEST_TIMEOUT_S}", f"--junitxml={report}", *suite.pytest_args,
               *extra, *suite.paths]
    subprocess.run(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return outcomes(report)


def outcomes(report: Path) -> dict[str, str]:
    if not report.exists():
        return {}
    results: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            results[name] = FAILED
        elif "skipped" in tags:
            results.setdefault(name, SKIPPED)
        else:
            results.setdefault(name, PASSED)
    return results


def score(results: dict[str, str]) -> str:
    counts = collections.Counter(results.values())
    ran = counts[PASSED] + counts[FAILED]
    return f"{counts[PASSED]}/{ran} passed" + (f" ({counts[SKIPPED]} skipped)" if counts[SKIPPED] else "")


def gateway_complaints(stderr: str) -> list[tuple[int, str]]:
    """The gateway's WARNING/ERROR lines, counted by their text without names and numbers."""
    lines = [line.split(None, 4)[-1] for line in stderr.splitlines() if " WARNING " in line or " ERROR " in line]
    shapes = collections.Counter(re.sub(r"[0-9a-f]{6,}|\d+|'[^']*'|/[\w/.-]+", "_", line)[:150] for line in lines)
    return [(count, shape) for shape, count in shapes.most_common(10)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, suite in SUITES.items():
        parser.add_argument(f"--{name}", type=Path, metavar="PATH", help=f"a checkout of {name} {suite.release}")
    parser.add_argument("--site", type=Path, action="append", default=[], metavar="DIR",
                        help="a directory of test dependencies kept out of the environment (aiomisc-pytest)")
    parser.add_argument("--only", choices=("gateway", "rabbitmq"), help="run against one broker only")
    parser.add_argument("--cluster", type=int, metavar="N", help="the gateway as a cluster of N brokers, "
                        "the suite connected to the first one")
    parser.add_argument("--work-dir", type=Path, help="where brokers' data and reports go (default: a temporary one)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --), e.g. -k name")
    options = parser.parse_args(argv)
    checkouts = {name: getattr(options, name.replace("-", "_")) for name in SUITES}
    checkouts = {name: path.resolve() for name, path in checkouts.items() if path is not None}
    if not checkouts:
        parser.error("give at least one suite's checkout")
    work = options.work_dir or Path(tempfile.mkdtemp(prefix="amqp-suites-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    from bench.rabbitmq import pick_port, start_rabbitmq
    from compat_tests.conftest import start_gateway

    brokers = [b for b in ("gateway", "rabbitmq") if options.only in (None, b)]
    everything_passes = True
    for name in checkouts:
        suite = SUITES[name]
        results: dict[str, dict[str, str]] = {}
        for broker in brokers:
            directory = work / name / broker
            directory.mkdir(parents=True, exist_ok=True)
            report = directory / "report.xml"
            print(f"{name}: running against {broker} ...", flush=True)
            if broker == "gateway" and options.cluster:
                from compat_tests.faults.harness.balance import wait_until_balanced
                from gateway.cluster.launcher import ClusterSpec, LocalCluster
                cluster = LocalCluster(ClusterSpec(data_dir=directory / "cluster", brokers=options.cluster))
                first = cluster.start()["brokers"][0]["amqp"]
                try:
                    wait_until_balanced(cluster)      # the last broker's join moves bundles: let it finish
                    results[broker] = run_suite(suite, checkouts, options.site, int(first.rpartition(":")[2]),
                                                report, options.pytest_args)
                finally:
                    cluster.stop()
                logs = "".join(path.read_text(errors="replace") for path in (directory / "cluster").glob("broker-*.log"))
                for count, shape in gateway_complaints(logs):
                    print(f"    gateway logged {count}x: {shape}")
            elif broker == "gateway":
                process = start_gateway(directory)
                try:
                    results[broker] = run_suite(suite, checkouts, options.site, process.amqp[1], report,
                                                options.pytest_args)
                finally:
                    process.stop()
                for count, shape in gateway_complaints(process.stderr):
                    print(f"    gateway logged {count}x: {shape}")
            else:
                node = start_rabbitmq(directory, pick_port(5760))
                try:
                    results[broker] = run_suite(suite, checkouts, options.site, node.port, report, options.pytest_args)
                finally:
                    node.stop()
        print(f"{name} {suite.release}: " + ", ".join(f"{b} {score(r)}" for b, r in results.items()))
        if len(results) == 2:
            gateway, rabbit = results["gateway"], results["rabbitmq"]
            for test in sorted(set(gateway) | set(rabbit)):
                ours, theirs = gateway.get(test, "absent"), rabbit.get(test, "absent")
                if ours != theirs and SKIPPED not in (ours, theirs):
                    print(f"    differs: {test}: gateway {ours}, rabbitmq {theirs}")
                    everything_passes &= not (theirs == PASSED and ours != PASSED)
    return 0 if everything_passes else 1


if __name__ == "__main__":
    sys.exit(main())
