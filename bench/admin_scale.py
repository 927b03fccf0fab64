"""The admin API and the console with many topics: REST latency of list calls, and how long the
console's namespace page takes to show, in headless chromium.

N topics (one partition each) are created in public/default before the gateway starts, through
its own core. Then each call runs --calls times; p50 and p99 are reported. The console page load
is timed from navigation to the rendered topics table (the page itself asks for the first 200
topics, the queues and the subscriptions).

    python -m bench.admin_scale [--topics 100000] [--calls 200] [--console]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.namespace_rate import ADMIN, CONFIG
from bench.reference import start_gateway

CALLS = {
    "tenants": "/tenants",
    "namespaces": "/tenants/public/namespaces",
    "namespace": "/tenants/public/namespaces/default",
    "topics, first page of 100": "/tenants/public/namespaces/default/topics?limit=100",
    "topics, a page in the middle": "/tenants/public/namespaces/default/topics?offset={middle}&limit=100",
    "one topic": "/tenants/public/namespaces/default/topics/t-{middle}",
    "users": "/users",
    "connections": "/connections",
}


def create_topics(data_dir: Path, count: int) -> float:
    from core.names import TopicName
    from core.service import Core
    from storage.config import StorageConfig
    from storage.embedded import EmbeddedStorage

    async def create() -> None:
        storage = await EmbeddedStorage.open(data_dir, StorageConfig())
        core = Core(storage.metadata, storage.logs)
        await core.start()
        for start in range(0, count, 500):
            await asyncio.gather(*(core.create_topic(TopicName.of(f"t-{n}"), 1)
                                   for n in range(start, min(start + 500, count))))
        await core.close()
        await storage.close()
    began = time.monotonic()
    asyncio.run(create())
    return time.monotonic() - began


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def console_load_s(admin: str, rounds: int = 5) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(f"http://{admin}/")
        driver.find_element(By.ID, "login-user").send_keys(ADMIN[0])
        driver.find_element(By.ID, "login-password").send_keys(ADMIN[1])
        driver.find_element(By.ID, "login-submit").click()
        times = []
        for _ in range(rounds):
            driver.get(f"http://{admin}/console/#/tenants")
            time.sleep(0.5)
            began = time.monotonic()
            driver.get(f"http://{admin}/console/#/ns/public/default")
            driver.refresh()
            while True:
                tables = driver.find_elements(By.CSS_SELECTOR, "#topics tbody tr")
                if tables:
                    break
                if time.monotonic() - began > 120:
                    raise RuntimeError("the namespace page did not show its topics within 120 s")
                time.sleep(0.02)
            times.append(time.monotonic() - began)
        return times
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--console", action="store_true", help="also time the console's namespace page")
    args = parser.parse_args()
    results: dict[str, object] = {"topics": args.topics}
    with tempfile.TemporaryDirectory(prefix="bench-admin-") as tmp:
        results["create_topics_s"] = round(create_topics(Path(tmp) / "data", args.topics), 1)
        config = Path(tmp) / "gateway.toml"
        config.write_text(CONFIG)
        broker = start_gateway(Path(tmp) / "data", Path(tmp), extra_args=("--config", str(config)))
        try:
            api = httpx.Client(base_url=f"http://{broker.admin}/api/v1", auth=ADMIN, timeout=120)
            latencies = {}
            for name, path in CALLS.items():
                path = path.format(middle=args.topics // 2)
                api.get(path).raise_for_status()   # warm: caches, the first login
                samples = []
                for _ in range(args.calls):
                    began = time.perf_counter()
                    api.get(path).raise_for_status()
                    samples.append((time.perf_counter() - began) * 1000)
                latencies[name] = {"p50_ms": round(statistics.median(samples), 1),
                                   "p99_ms": round(percentile(samples, 0.99), 1)}
            results["rest"] = latencies
            if args.console:
                loads = console_load_s(broker.admin)
                results["console_namespace_page_s"] = {"median": round(statistics.median(loads), 2),
                                                       "max": round(max(loads), 2)}
        finally:
            broker.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
