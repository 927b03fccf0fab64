"""Brokers sharing one metadata store: membership, bundles of partitions, and their ownership."""
