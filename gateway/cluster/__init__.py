"""Running a replicated cluster on one machine: a private ZooKeeper, bookie and gateway processes."""
