"""Real-time reconciliation of the transaction flow against the funds flow, on Spark.

A client of the gateway over the Kafka protocol only: it reads the topics `trade-flow` and
`fund-flow` with Spark's own Kafka source, writes alerts to `recon-alerts` with Spark's Kafka sink,
and never imports the gateway's packages (an import-linter contract in pyproject.toml says so).

Modules: flows (the record model), generator (realistic flows with injected discrepancies and their
ground truth), ground_truth (that truth as JSON, and what the job must output for it), producer
and topics (writing a generated flow to the gateway), recon_config (the timing parameters),
reconcile (the transformation, the same for static and streaming DataFrames), spark_io
(SparkSession and Kafka options), sink (idempotent per-batch writes), stream_job / batch_job,
alerts_reader and verify (read the outputs back and compare), measure (throughput and alert
latency), cli (`gateway-recon`, `python -m pipelines`). docs/PIPELINE.md explains the design.
"""
