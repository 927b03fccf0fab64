"""The reconciliation itself: Kafka-shaped DataFrames of both flows in, alerts and totals out.

The same code runs on streaming DataFrames (the stream job) and on static ones (the batch job and
the tests); Spark ignores watermarks on static data, so a static run is the final answer a
streaming run converges to. Input frames have the Kafka source's columns (key, value, topic,
partition, offset, timestamp); `value` is the JSON record.

How an order group (order_id, kind) is decided:
1. Both flows are parsed with explicit schemas; a record that does not parse, or lacks a required
   field, is a `malformed` alert on its own, at once.
2. Trade-anchored branch: trade lines LEFT OUTER JOIN funds lines, stream-stream, on order_id and
   kind with the funds' event time within [trade - funds_before, trade + funds_after]: that
   interval is the join window. Spark keeps both sides in state until the watermark passes it and
   then emits each unmatched trade line with nulls. The joined rows are grouped per order group
   in a session window over the trade lines' event time (a package's lines fall into one
   session), collecting the distinct trade and funds lines. A line is (record id, partition,
   offset, amount, currency): the Kafka position keeps the two copies of a duplicated record
   apart, so duplicates are seen, and then only the first copy counts. Verdict: no funds ->
   trade_without_funds; more than one currency among all lines -> currency_mismatch; different
   totals -> amount_mismatch; else matched.
3. Funds-anchored branch: funds LEFT OUTER JOIN trades on the same condition, keeping the funds
   lines no trade matched, grouped per order group in a session over their event time ->
   funds_without_trade.
4. Every record id seen twice in a group -> duplicate (side trade or fund, the record id).
5. Matched groups are summed per tumbling window of the session's event time (Spark's
   window_time: the session end minus 1 µs), merchant, currency and kind: the window totals.

Each alert carries a deterministic `alert_id` (a hash of type, order, kind, side and record), the
same whether computed by the stream, by a batch replay, or by a re-run of a micro-batch.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from pipelines.flows import FUND_SIDE, FUNDS_WITHOUT_TRADE, MALFORMED, TRADE_SIDE
from pipelines.recon_config import ReconConfig

MATCHED = "matched"

TRADE_SCHEMA = StructType([
    StructField("trade_id", StringType()),
    StructField("order_id", StringType()),
    StructField("merchant", StringType()),
    StructField("amount", LongType()),
    StructField("currency", StringType()),
    StructField("kind", StringType()),
    StructField("event_time", TimestampType()),
])
FUND_SCHEMA = StructType([
    StructField("fund_id", StringType()),
    StructField("order_id", StringType()),
    StructField("merchant", StringType()),
    StructField("amount", LongType()),
    StructField("currency", StringType()),
    StructField("kind", StringType()),
    StructField("channel", StringType()),
    StructField("event_time", TimestampType()),
])

# Column order of the two outputs; the Parquet tables and the alert JSON have exactly these.
ALERT_COLUMNS = ("alert_id", "alert_type", "order_id", "kind", "merchant", "side", "record_id", "trade_amount",
                 "fund_amount", "trade_currencies", "fund_currencies", "trade_records", "fund_records",
                 "window_start", "window_end")
TOTALS_COLUMNS = ("window_start", "window_end", "merchant", "currency", "kind", "orders", "amount",
                  "trade_records", "fund_records")


def _interval(seconds: float) -> str:
    return f"{round(seconds * 1000)} milliseconds"


def parse_side(kafka_rows: DataFrame, side: str) -> DataFrame:
    """Kafka rows -> one typed row per record: record_id, order_id, merchant, amount, currency,
    kind, channel (null for trades), event_time, topic, partition, offset, key, valid."""
    schema, id_field = (TRADE_SCHEMA, "trade_id") if side == TRADE_SIDE else (FUND_SCHEMA, "fund_id")
    parsed = kafka_rows.select(
        F.from_json(F.col("value").cast("string"), schema).alias("r"),
        F.col("key").cast("string").alias("key"), "topic", "partition", "offset",
    )
    channel = F.col("r.channel") if side == FUND_SIDE else F.lit(None).cast("string")
    required = [F.col(f"r.{name}") for name in (id_field, "order_id", "merchant", "amount", "currency", "kind",
                                                   "event_time")]
    valid = F.col("r").isNotNull()
    for column in required:
        valid = valid & column.isNotNull()
    return parsed.select(
        F.col(f"r.{id_field}").alias("record_id"), F.col("r.order_id").alias("order_id"),
        F.col("r.merchant").alias("merchant"), F.col("r.amount").alias("amount"),
        F.col("r.currency").alias("currency"), F.col("r.kind").alias("kind"), channel.alias("channel"),
        F.col("r.event_time").alias("event_time"), "topic", "partition", "offset", "key",
        F.coalesce(valid, F.lit(False)).alias("valid"),
    )


def reconcile(trade_rows: DataFrame, fund_rows: DataFrame, config: ReconConfig) -> DataFrame:
    """Both flows (Kafka-shaped) -> one frame with an `alert` and a `totals` struct column, exactly
    one of them set per row (split with `alerts_of` / `totals_of`). Streaming in, streaming out."""
    trades = parse_side(trade_rows, TRADE_SIDE)
    funds = parse_side(fund_rows, FUND_SIDE)
    malformed = _malformed_alerts(trades, TRADE_SIDE).unionByName(_malformed_alerts(funds, FUND_SIDE))

    delay = _interval(config.watermark_delay_s)
    t = _prefixed(trades.where("valid").withWatermark("event_time", delay), "t_")
    f = _prefixed(funds.where("valid").withWatermark("event_time", delay), "f_")
    before = F.expr(f"INTERVAL {_interval(config.funds_before_trade_s)}")
    after = F.expr(f"INTERVAL {_interval(config.funds_after_trade_s)}")
    on = ((F.col("t_order_id") == F.col("f_order_id")) & (F.col("t_kind") == F.col("f_kind"))
          & (F.col("f_event_time") >= F.col("t_event_time") - before)
          & (F.col("f_event_time") <= F.col("t_event_time") + after))

    trade_groups = _decided(_trade_anchored(t, f, on, config))
    fund_groups = _decided(_funds_anchored(t, f, on, config))
    alerts = _alerts(trade_groups).unionByName(_alerts(fund_groups)).unionByName(malformed)
    totals = _totals(trade_groups, config)
    return (alerts.select(F.struct(*ALERT_COLUMNS).alias("alert"))
            .unionByName(totals.select(F.struct(*TOTALS_COLUMNS).alias("totals")), allowMissingColumns=True))


def alerts_of(output: DataFrame) -> DataFrame:
    return output.where(F.col("alert").isNotNull()).select("alert.*")


def totals_of(output: DataFrame) -> DataFrame:
    return output.where(F.col("totals").isNotNull()).select("totals.*")


def _prefixed(frame: DataFrame, prefix: str) -> DataFrame:
    return frame.select(*[F.col(name).alias(prefix + name) for name in frame.columns])


def _line(prefix: str, with_channel: bool) -> Column:
    fields = [F.col(f"{prefix}{name}").alias(name) for name in ("record_id", "partition", "offset", "amount",
                                                                  "currency")]
    if with_channel:
        fields.append(F.col(f"{prefix}channel").alias("channel"))
    return F.struct(*fields)


def _trade_anchored(t: DataFrame, f: DataFrame, on: Column, config: ReconConfig) -> DataFrame:
    joined = t.join(f, on, "leftOuter")
    return (joined.groupBy(F.session_window("t_event_time", _interval(config.session_gap_s)).alias("session"),
                           F.col("t_order_id").alias("order_id"), F.col("t_kind").alias("kind"))
            .agg(F.min("t_merchant").alias("merchant"),
                 F.collect_set(_line("t_", False)).alias("trade_lines"),
                 # A trade line without funds joins a null row: leave that out of the set.
                 F.collect_set(F.when(F.col("f_record_id").isNotNull(), _line("f_", True))).alias("fund_lines")))


def _funds_anchored(t: DataFrame, f: DataFrame, on: Column, config: ReconConfig) -> DataFrame:
    unmatched = f.join(t, on, "leftOuter").where(F.col("t_record_id").isNull())
    return (unmatched.groupBy(F.session_window("f_event_time", _interval(config.session_gap_s)).alias("session"),
                              F.col("f_order_id").alias("order_id"), F.col("f_kind").alias("kind"))
            .agg(F.min("f_merchant").alias("merchant"),
                 F.array().cast("array<struct<record_id:string,partition:int,offset:bigint,amount:bigint,"
                                "currency:string>>").alias("trade_lines"),
                 F.collect_set(_line("f_", True)).alias("fund_lines")))


# First copy of each record id (lowest Kafka position), and the record ids seen more than once.
_FIRST_COPIES = ("filter({0}, x -> NOT exists({0}, y -> y.record_id = x.record_id"
                 " AND (y.partition < x.partition OR (y.partition = x.partition AND y.offset < x.offset))))")
_DUPLICATED_IDS = ("array_sort(array_distinct(transform(filter({0}, x -> size(filter({0},"
                   " y -> y.record_id = x.record_id)) > 1), x -> x.record_id)))")


def _decided(groups: DataFrame) -> DataFrame:
    """Adds the per-group facts and the verdict (stateless, so it follows the aggregation)."""
    decided = groups.select(
        "order_id", "kind", "merchant", F.col("session.start").alias("window_start"),
        F.col("session.end").alias("window_end"), F.window_time("session").alias("event_time"),
        F.expr(_FIRST_COPIES.format("trade_lines")).alias("trades"),
        F.expr(_FIRST_COPIES.format("fund_lines")).alias("funds"),
        F.expr(_DUPLICATED_IDS.format("trade_lines")).alias("trade_duplicates"),
        F.expr(_DUPLICATED_IDS.format("fund_lines")).alias("fund_duplicates"),
    ).select(
        "*",
        F.expr("aggregate(trades, 0L, (total, x) -> total + x.amount)").alias("trade_amount"),
        F.expr("aggregate(funds, 0L, (total, x) -> total + x.amount)").alias("fund_amount"),
        F.expr("array_sort(array_distinct(transform(trades, x -> x.currency)))").alias("trade_currencies"),
        F.expr("array_sort(array_distinct(transform(funds, x -> x.currency)))").alias("fund_currencies"),
        F.size("trades").alias("trade_records"), F.size("funds").alias("fund_records"),
    )
    verdict = (F.when(F.col("trade_records") == 0, F.lit(FUNDS_WITHOUT_TRADE))
               .when(F.col("fund_records") == 0, F.lit("trade_without_funds"))
               .when(F.size(F.array_union("trade_currencies", "fund_currencies")) > 1, F.lit("currency_mismatch"))
               .when(F.col("trade_amount") != F.col("fund_amount"), F.lit("amount_mismatch"))
               .otherwise(F.lit(MATCHED)))
    return decided.withColumn("verdict", verdict)


def _alerts(decided: DataFrame) -> DataFrame:
    specs = F.expr(
        "concat("
        f"filter(array(named_struct('alert_type', verdict, 'side', CAST(NULL AS STRING),"
        f" 'record_id', CAST(NULL AS STRING))), x -> verdict != '{MATCHED}'),"
        f" transform(trade_duplicates, id -> named_struct('alert_type', 'duplicate', 'side', '{TRADE_SIDE}',"
        " 'record_id', id)),"
        f" transform(fund_duplicates, id -> named_struct('alert_type', 'duplicate', 'side', '{FUND_SIDE}',"
        " 'record_id', id)))"
    )
    exploded = decided.select("*", F.explode(specs).alias("spec"))
    return exploded.select(
        _alert_id(F.col("spec.alert_type"), F.col("order_id"), F.col("kind"), F.col("spec.side"),
                  F.col("spec.record_id")).alias("alert_id"),
        F.col("spec.alert_type").alias("alert_type"), "order_id", "kind", "merchant",
        F.col("spec.side").alias("side"), F.col("spec.record_id").alias("record_id"),
        "trade_amount", "fund_amount", "trade_currencies", "fund_currencies",
        "trade_records", "fund_records", "window_start", "window_end",
    )


def _alert_id(alert_type: Column, order_id: Column, kind: Column, side: Column, record_id: Column) -> Column:
    text = F.concat_ws("|", alert_type, F.coalesce(order_id, F.lit("")), F.coalesce(kind, F.lit("")),
                       F.coalesce(side, F.lit("")), F.coalesce(record_id, F.lit("")))
    return F.substring(F.sha2(text, 256), 1, 32)


def _malformed_alerts(typed: DataFrame, side: str) -> DataFrame:
    """Records that did not parse: alerted at once, identified by their Kafka position."""
    position = F.concat_ws(":", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))
    bad = typed.where(~F.col("valid"))
    empty_currencies = F.array().cast("array<string>")
    return bad.select(
        _alert_id(F.lit(MALFORMED), F.col("key"), F.lit(""), F.lit(side), position).alias("alert_id"),
        F.lit(MALFORMED).alias("alert_type"), F.coalesce(F.col("key"), F.lit("")).alias("order_id"),
        F.lit("").alias("kind"), F.lit(None).cast("string").alias("merchant"), F.lit(side).alias("side"),
        position.alias("record_id"), F.lit(None).cast("long").alias("trade_amount"),
        F.lit(None).cast("long").alias("fund_amount"), empty_currencies.alias("trade_currencies"),
        empty_currencies.alias("fund_currencies"), F.lit(0).cast(IntegerType()).alias("trade_records"),
        F.lit(0).cast(IntegerType()).alias("fund_records"), F.lit(None).cast("timestamp").alias("window_start"),
        F.lit(None).cast("timestamp").alias("window_end"),
    )


def _totals(decided: DataFrame, config: ReconConfig) -> DataFrame:
    matched = decided.where(F.col("verdict") == MATCHED)
    window = F.window("event_time", _interval(config.totals_window_s))
    return (matched.groupBy(window.alias("window"), "merchant",
                            F.element_at("trade_currencies", 1).alias("currency"), "kind")
            .agg(F.count(F.lit(1)).alias("orders"), F.sum("trade_amount").alias("amount"),
                 F.sum("trade_records").cast("long").alias("trade_records"),
                 F.sum("fund_records").cast("long").alias("fund_records"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "merchant", "currency", "kind", "orders", "amount", "trade_records", "fund_records"))
