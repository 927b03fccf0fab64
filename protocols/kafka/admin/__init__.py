"""What the Kafka admin handlers share: per-resource errors, topic look-ups, config descriptions."""
