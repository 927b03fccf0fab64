"""Collection order for the whole suite: the Spark end-to-end tests first.

They are the longest module by far (minutes of JVM start-up and micro-batches); started first, one
xdist worker runs them while the other works through everything else, instead of the suite waiting for
them at its end.
"""

LONGEST_FIRST = ("compat_tests/spark/",)


def pytest_collection_modifyitems(items) -> None:
    items.sort(key=lambda item: not any(part in item.nodeid for part in LONGEST_FIRST))
