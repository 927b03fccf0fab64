"""What message trace costs the Kafka hot path: produce and consume through one `gateway serve`
with the namespace's trace policy off and on, alternating, best of --rounds (bench/kafka.py's
produce and consume phases: confluent-kafka, 1 KiB messages, acks=all, idempotent).

    python -m bench.trace_overhead [--messages 100000] [--partitions 1] [--rounds 3]

Off, tracing costs an attribute test per append and per read; compare bench/kafka.py runs of
this code and of the code before tracing for that. This benchmark shows what turning it on costs.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import httpx
import psutil

from bench.kafka import Phase, make_payloads, consume, produce
from bench.namespace_rate import ADMIN, CONFIG
from bench.reference import start_gateway


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    payloads = make_payloads()
    best: dict[str, tuple[Phase, Phase]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        config = Path(tmp) / "gateway.toml"
        config.write_text(CONFIG)
        broker = start_gateway(Path(tmp) / "data", Path(tmp), extra_args=("--config", str(config),
                                                                         "--kafka-default-partitions",
                                                                         str(args.partitions)))
        process = psutil.Process(broker.pid)
        api = httpx.Client(base_url=f"http://{broker.admin}/api/v1", auth=ADMIN, timeout=30)
        try:
            for round_ in range(args.rounds):
                for mode in (("off", "on") if round_ % 2 == 0 else ("on", "off")):   # neither always goes first
                    api.put("/tenants/public/namespaces/default/policies",
                            json={"trace": mode == "on"}).raise_for_status()
                    topic = f"trace-{mode}-{round_}"
                    errors: list[str] = []
                    produced = produce(broker.bootstrap, topic, args.partitions, "none", args.messages, payloads,
                                       process, errors)
                    consumed = consume(broker.bootstrap, topic, args.partitions, args.messages, process, errors)
                    if errors:
                        raise SystemExit(f"trace {mode}: {errors}")
                    old = best.get(mode)
                    if old is None or produced.msgs_per_s > old[0].msgs_per_s:
                        best[mode] = (produced, old[1] if old and old[1].msgs_per_s > consumed.msgs_per_s else consumed)
                    elif consumed.msgs_per_s > old[1].msgs_per_s:
                        best[mode] = (old[0], consumed)
        finally:
            broker.stop()
    print(f"{args.messages:,} messages of 1 KiB, {args.partitions} partition(s), best of {args.rounds} rounds\n")
    print("| trace | produce msg/s | consume msg/s | CPU s/M msgs (produce) | (consume) |")
    print("|---|---|---|---|---|")
    for mode, (produced, consumed) in best.items():
        print(f"| {mode} | {produced.msgs_per_s:,.0f} | {consumed.msgs_per_s:,.0f} | "
              f"{produced.cpu_s_per_million:.2f} | {consumed.cpu_s_per_million:.2f} |")


if __name__ == "__main__":
    main()
