"""`gateway-recon` (also `python -m pipelines`): generate flows, reconcile them as a stream or a
batch, and verify a run against the generator's ground truth.

    gateway-recon generate --bootstrap 127.0.0.1:9092 --orders 2000 --rate 200 --ground-truth gt.json
    gateway-recon stream   --bootstrap 127.0.0.1:9092 --checkpoint ck --output out
    gateway-recon batch    --bootstrap 127.0.0.1:9092 --output eod --ending-offsets latest
    gateway-recon verify   --bootstrap 127.0.0.1:9092 --ground-truth gt.json --output out --mode stream
    gateway-recon offsets  --bootstrap 127.0.0.1:9092      (the flows' log ends, as --ending-offsets JSON)

A problem the user can fix (connector jars, a range past the end of the log) is one line on
standard error and exit code 2.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from pipelines.flows import ALERT_TOPIC, FUND_TOPIC, TRADE_TOPIC
from pipelines.problems import UsageProblem
from pipelines.recon_config import ReconConfig

EXIT_MISMATCH = 1
EXIT_USAGE = 2
FLOW_PARTITIONS = 3   # the flow topics' partitions when the generator or the stream creates them
DEFAULTS = ReconConfig()

cli = typer.Typer(name="gateway-recon", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Real-time reconciliation of trade-flow against fund-flow on Spark, through the gateway.")

Bootstrap = Annotated[str, typer.Option("--bootstrap", help="The gateway's Kafka address, HOST:PORT.")]
TradeTopic = Annotated[str, typer.Option(help="Topic of the transaction flow (a regex with --pattern).")]
FundTopic = Annotated[str, typer.Option(help="Topic of the funds flow (a regex with --pattern).")]
AlertsTopic = Annotated[str, typer.Option(help="Topic the alerts are written to.")]
Output = Annotated[Path | None, typer.Option(help="Parquet root: alerts/ and window_totals/ under it.")]
Jars = Annotated[Path | None, typer.Option(help="Directory of Spark's Kafka connector jars (offline).",
                                           show_default="$SPARK_KAFKA_JARS, else ../shared/spark-jars/jars")]
Packages = Annotated[bool, typer.Option(help="Let Spark download its Kafka connector from Maven Central "
                                             "(spark.jars.packages) instead of --jars.")]
Master = Annotated[str, typer.Option(help="Spark master.")]
WatermarkDelay = Annotated[float, typer.Option(help="Watermark delay, seconds of event time.")]
FundsBefore = Annotated[float, typer.Option(help="Join window: funds may precede their trade by this (s).")]
FundsAfter = Annotated[float, typer.Option(help="Join window: funds may follow their trade by this (s).")]
SessionGap = Annotated[float, typer.Option(help="Lines of one order closer than this form one group (s).")]
TotalsWindow = Annotated[float, typer.Option(help="Tumbling window of the matched totals (s).")]
Pattern = Annotated[bool, typer.Option(help="Read the topics with subscribePattern (they are regexes).")]
MinPartitions = Annotated[int | None, typer.Option(help="Spark's minPartitions: split offset ranges.")]
FailOnDataLoss = Annotated[bool, typer.Option(help="Spark's failOnDataLoss.")]


@cli.callback()
def _group(log_level: Annotated[str, typer.Option(help="Python log level.")] = "info") -> None:
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for chatty in ("kafka", "py4j"):  # both log every connection and callback at INFO
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))


@cli.command()
def generate(
    bootstrap: Bootstrap,
    ground_truth: Annotated[Path, typer.Option(help="Where the ground truth JSON is written.")] = Path(
        "ground-truth.json"),
    orders: Annotated[int, typer.Option(help="Payment orders (refunds come on top).")] = 1000,
    rate: Annotated[float, typer.Option(help="Orders per second (event time, and sending unless --burst).")] = 100.0,
    burst: Annotated[bool, typer.Option(help="Send as fast as possible instead of at --rate.")] = False,
    seed: Annotated[int, typer.Option()] = 1,
    merchants: Annotated[int, typer.Option()] = 5,
    refund_ratio: Annotated[float, typer.Option(help="Share of orders refunded.")] = 0.1,
    discrepancy_rate: Annotated[float, typer.Option(help="Share of order groups given one discrepancy.")] = 0.05,
    flush_after: Annotated[float, typer.Option(help="A last clean order this many seconds later, to move "
                                                    "watermarks past the rest; 0: none.")] = 60.0,
    partitions: Annotated[int, typer.Option(help="Partitions of the flow topics when they are created.")] = (
        FLOW_PARTITIONS),
    prefix: Annotated[str, typer.Option(help="Prefix of every id, to tell runs apart.")] = "",
    trade_topic: TradeTopic = TRADE_TOPIC,
    fund_topic: FundTopic = FUND_TOPIC,
) -> None:
    """Produce realistic flows with injected discrepancies; write the ground truth."""
    from pipelines.generator import GeneratorConfig
    from pipelines.ground_truth import GroundTruth
    from pipelines.generator import generate as generate_flow
    from pipelines.producer import produce
    from pipelines.topics import ensure_topics

    if (trade_topic, fund_topic) != (TRADE_TOPIC, FUND_TOPIC):
        raise typer.BadParameter("the generator writes trade-flow and fund-flow")
    config = GeneratorConfig(orders=orders, rate=rate, seed=seed, merchants=merchants, refund_ratio=refund_ratio,
                             discrepancy_rate=discrepancy_rate, flush_after_s=flush_after, prefix=prefix,
                             start=datetime.now(UTC))
    flow = generate_flow(config)
    ensure_topics(bootstrap, {TRADE_TOPIC: partitions, FUND_TOPIC: partitions})
    result = produce(flow, bootstrap, paced=not burst)
    GroundTruth.of(flow, result.sent_at_ms).save(ground_truth)
    injected = sum(1 for group in flow.groups if group.discrepancy)
    typer.echo(f"produced {result.records} records ({flow.records(TRADE_TOPIC)} trade, {flow.records(FUND_TOPIC)} "
               f"funds) in {result.seconds:.1f} s, {injected} discrepancies; ground truth in {ground_truth}")


@cli.command()
def stream(
    bootstrap: Bootstrap,
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint directory (offsets, state, sink markers).")],
    output: Output = None,
    alerts_topic: AlertsTopic = ALERT_TOPIC,
    trade_topic: TradeTopic = TRADE_TOPIC,
    fund_topic: FundTopic = FUND_TOPIC,
    pattern: Pattern = False,
    starting_timestamp: Annotated[int | None, typer.Option(help="Spark's startingTimestamp (ms) for a new "
                                                                "query.")] = None,
    starting_offsets: Annotated[str, typer.Option(help="earliest, latest or JSON, for a new query.")] = "earliest",
    max_offsets_per_trigger: Annotated[int | None, typer.Option(help="Spark's maxOffsetsPerTrigger.")] = None,
    min_partitions: MinPartitions = None,
    fail_on_data_loss: FailOnDataLoss = True,
    trigger: Annotated[float, typer.Option(help="Micro-batch interval, seconds.")] = 0.5,
    run_for: Annotated[float | None, typer.Option(help="Stop after this many seconds (default: until a "
                                                       "signal).")] = None,
    watermark_delay: WatermarkDelay = DEFAULTS.watermark_delay_s,
    funds_before: FundsBefore = DEFAULTS.funds_before_trade_s,
    funds_after: FundsAfter = DEFAULTS.funds_after_trade_s,
    session_gap: SessionGap = DEFAULTS.session_gap_s,
    totals_window: TotalsWindow = DEFAULTS.totals_window_s,
    jars: Jars = None,
    packages: Packages = False,
    master: Master = "local[2]",
) -> None:
    """Reconcile continuously: alerts to --alerts-topic and Parquet, window totals to Parquet.
    Creates the flow topics if they do not exist yet, so it may start before the generator."""
    from pipelines.sink import Targets
    from pipelines.spark_io import KafkaSource, connector_config, offsets_for_topic, spark_session
    from pipelines.stream_job import StreamSettings, batch_writer, progress_line, start_stream
    from pipelines.topics import ensure_topics

    extra = connector_config(jars, packages)
    topics = {alerts_topic: 1}
    if not pattern:   # Spark's subscribe fails on a topic that does not exist; a pattern waits for it
        topics.update({trade_topic: FLOW_PARTITIONS, fund_topic: FLOW_PARTITIONS})
    ensure_topics(bootstrap, topics)

    def source(topic: str) -> KafkaSource:
        return KafkaSource(bootstrap, topic, pattern=pattern, fail_on_data_loss=fail_on_data_loss,
                           min_partitions=min_partitions, max_offsets_per_trigger=max_offsets_per_trigger,
                           starting_timestamp_ms=starting_timestamp,
                           starting_offsets=starting_offsets if pattern else offsets_for_topic(starting_offsets, topic))
    settings = StreamSettings(
        trades=source(trade_topic), funds=source(fund_topic),
        targets=Targets(bootstrap=bootstrap, alert_topic=alerts_topic, output_dir=str(output) if output else None),
        checkpoint_dir=str(checkpoint.absolute()),
        recon=ReconConfig(watermark_delay, funds_before, funds_after, session_gap, totals_window), trigger_s=trigger,
    )
    spark = spark_session(master=master, extra=extra)
    writer = batch_writer(spark, settings)
    query = start_stream(spark, settings, writer)
    # The handler only sets a flag: calling into Spark from it would re-enter the py4j call the
    # main thread is blocked in. The loop below wakes up every second to look at it.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    typer.echo(f"streaming query {query.id} running; checkpoint {checkpoint}")
    deadline = None if run_for is None else time.monotonic() + run_for
    reported = -1
    try:
        while not stopping.is_set() and (deadline is None or time.monotonic() < deadline):
            query.awaitTermination(1)  # raises if the query failed
            for progress in query.recentProgress:
                if progress["batchId"] > reported:
                    reported = progress["batchId"]
                    typer.echo(progress_line(progress, writer.alerts_by_batch.get(reported, 0)))
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()


@cli.command()
def batch(
    bootstrap: Bootstrap,
    output: Output = None,
    starting_offsets: Annotated[str, typer.Option(help="earliest or JSON {topic: {partition: offset}}.")] = "earliest",
    ending_offsets: Annotated[str, typer.Option(help="latest or JSON {topic: {partition: offset}}.")] = "latest",
    alerts_topic: AlertsTopic = ALERT_TOPIC,
    send_alerts: Annotated[bool, typer.Option(help="Also write the alerts to --alerts-topic.")] = True,
    trade_topic: TradeTopic = TRADE_TOPIC,
    fund_topic: FundTopic = FUND_TOPIC,
    min_partitions: MinPartitions = None,
    fail_on_data_loss: FailOnDataLoss = True,
    funds_before: FundsBefore = DEFAULTS.funds_before_trade_s,
    funds_after: FundsAfter = DEFAULTS.funds_after_trade_s,
    session_gap: SessionGap = DEFAULTS.session_gap_s,
    totals_window: TotalsWindow = DEFAULTS.totals_window_s,
    jars: Jars = None,
    packages: Packages = False,
    master: Master = "local[2]",
) -> None:
    """Reconcile an explicit offset range once (end of day, replays). `gateway-recon offsets`
    prints the flows' current ends in --ending-offsets form; a range past them is refused."""
    from pipelines.batch_job import BatchSettings, run_batch
    from pipelines.sink import Targets
    from pipelines.spark_io import KafkaSource, connector_config, offsets_for_topic, spark_session
    from pipelines.topics import check_range, ensure_topics

    extra = connector_config(jars, packages)
    check_range(bootstrap, ending_offsets, [trade_topic, fund_topic])

    def source(topic: str) -> KafkaSource:
        return KafkaSource(bootstrap, topic, fail_on_data_loss=fail_on_data_loss, min_partitions=min_partitions,
                           starting_offsets=offsets_for_topic(starting_offsets, topic),
                           ending_offsets=offsets_for_topic(ending_offsets, topic))

    if send_alerts:
        ensure_topics(bootstrap, {alerts_topic: 1})
    settings = BatchSettings(
        trades=source(trade_topic), funds=source(fund_topic),
        targets=Targets(bootstrap=bootstrap, alert_topic=alerts_topic if send_alerts else None,
                        output_dir=str(output) if output else None),
        recon=ReconConfig(funds_before_trade_s=funds_before, funds_after_trade_s=funds_after,
                          session_gap_s=session_gap, totals_window_s=totals_window),
    )
    spark = spark_session(master=master, extra=extra)
    try:
        started = time.monotonic()
        result = run_batch(spark, settings)
        seconds = time.monotonic() - started
    finally:
        spark.stop()
    records = result.trade_records + result.fund_records
    typer.echo(json.dumps({"trade_records": result.trade_records, "fund_records": result.fund_records,
                           "alerts": result.alerts, "window_totals": result.totals, "seconds": round(seconds, 2),
                           "records_per_second": round(records / seconds, 1)}))


@cli.command()
def offsets(
    bootstrap: Bootstrap,
    trade_topic: TradeTopic = TRADE_TOPIC,
    fund_topic: FundTopic = FUND_TOPIC,
) -> None:
    """Print where each partition of the flows ends now, as `batch --ending-offsets` takes it."""
    from pipelines.topics import log_ends

    typer.echo(json.dumps(log_ends(bootstrap, [trade_topic, fund_topic]), separators=(",", ":")))


@cli.command()
def verify(
    bootstrap: Bootstrap,
    ground_truth: Annotated[Path, typer.Option(help="The generator's ground truth JSON.")] = Path("ground-truth.json"),
    output: Output = None,
    mode: Annotated[str, typer.Option(help="stream, or batch to check the output of `batch` (whose range closes "
                                           "the last, flushing order too).")] = "stream",
    alerts_topic: AlertsTopic = ALERT_TOPIC,
    session_gap: SessionGap = DEFAULTS.session_gap_s,
    totals_window: TotalsWindow = DEFAULTS.totals_window_s,
) -> None:
    """Compare recon-alerts (and the Parquet outputs, with --output) with the ground truth."""
    from pipelines.alerts_reader import read_alerts
    from pipelines.ground_truth import GroundTruth
    from pipelines.verify import alert_latency, check_alerts, check_totals, read_parquet_outputs

    if mode not in ("stream", "batch"):
        raise typer.BadParameter("mode is stream or batch")
    truth = GroundTruth.load(ground_truth)
    kafka_alerts = read_alerts(bootstrap, alerts_topic)
    checks = {"kafka alerts": check_alerts(truth, [item.alert for item in kafka_alerts])}
    if output:
        from pipelines.spark_io import spark_session

        spark = spark_session(master="local[1]")
        try:
            parquet_alerts, totals = read_parquet_outputs(spark, str(output))
        finally:
            spark.stop()
        checks["parquet alerts"] = check_alerts(truth, parquet_alerts)
        checks["window totals"] = check_totals(truth, totals, ReconConfig(session_gap_s=session_gap,
                                                                          totals_window_s=totals_window),
                                               include_flush=mode == "batch")
    failed = False
    for name, check in checks.items():
        typer.echo(f"{name}: {'ok' if check.ok else 'MISMATCH'}")
        if not check.ok:
            failed = True
            for line in check.diff():
                typer.echo(line)
    latency = alert_latency(truth, kafka_alerts)
    if latency:
        typer.echo(f"alert latency over {latency.samples} alerts: p50 {latency.p50_ms:.0f} ms, "
                   f"p99 {latency.p99_ms:.0f} ms, max {latency.max_ms:.0f} ms")
    if failed:
        raise typer.Exit(EXIT_MISMATCH)


def main() -> None:
    try:
        cli()
    except UsageProblem as exc:
        typer.echo(f"gateway-recon: {exc}", err=True)
        sys.exit(EXIT_USAGE)
