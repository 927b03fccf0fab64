"""SCRAM mechanisms as Kafka's admin APIs number them (ScramMechanism: 0 is UNKNOWN)."""

MECHANISM_BY_CODE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_BY_MECHANISM = {name: code for code, name in MECHANISM_BY_CODE.items()}
MIN_ITERATIONS = 4096      # Kafka's ScramMechanism minIterations
MAX_ITERATIONS = 16384     # ... and its bound for credentials set through the admin API
