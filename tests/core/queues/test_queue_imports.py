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
