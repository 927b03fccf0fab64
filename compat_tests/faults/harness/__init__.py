"""The fault harness: history and checkers, client workloads, and fault injectors (see ../README.md)."""
