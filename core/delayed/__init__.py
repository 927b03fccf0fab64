"""Delayed messages: held durably in a per-namespace system topic and routed to their target when due."""
