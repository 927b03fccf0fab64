"""`make bench`: every storage benchmark in one run, printed as Markdown tables.

    python -m bench.run [SECONDS per append case, 5] [TOPICS created, 100000]
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from bench import many_topics, storage_append


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    topics = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix="bench-") as directory:
        print("## Storage engine appends (fsync on)\n")
        print(storage_append.report(asyncio.run(storage_append.run(Path(directory), seconds))))
    with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix="bench-") as directory:
        print(f"\n## {topics:,} topics created and written once\n")
        result = asyncio.run(many_topics.run(Path(directory), topics, 64))
        print("| topics | seconds | topics/s | open files | fds | RSS MiB | peak RSS MiB | data dir MiB |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {result['topics']:,} | {result['seconds']:.1f} | {result['topics_per_s']:,.0f} | "
              f"{result['open_files']} | {result['fds']} | {result['rss_mib']:.0f} | "
              f"{result['peak_rss_mib']:.0f} | {result['data_dir_mib']:.1f} |")


if __name__ == "__main__":
    main()
