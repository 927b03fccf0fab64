"""The modules of core/queues import each other one way only: no module needs itself back."""

import grimp


def test_no_module_of_core_queues_imports_itself_back() -> None:
    graph = grimp.build_graph("core", cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("core.queues."))
    circles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith("core.queues.") and graph.chain_exists(imported=module, importer=imported):
                circles.append((module, imported))
    assert circles == []


def test_the_decisions_of_a_subscription_import_nothing_that_waits_or_does_io() -> None:
    graph = grimp.build_graph("core", "storage", include_external_packages=True, cache_dir=None)
    imported = graph.find_modules_directly_imported_by("core.queues.deliveries")
    assert not imported & {"asyncio", "core.partition", "core.queues.expiry", "core.queues.log_feeder",
                           "core.queues.cursor_writer", "core.queues.subscription"}
