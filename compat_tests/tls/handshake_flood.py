"""Many refused TLS handshakes against one gateway, and what that leaves behind.

Starts `gateway serve` with a Kafka TLS port requiring client certificates, then makes N handshakes
with a certificate of another CA (8 threads), sampling the gateway's resident memory and open files
every N/10; at the end a client with a good certificate must still be served, and the process must
hold no more files than before. Prints one line per sample and a verdict; exits 1 on failure.

    python -m compat_tests.tls.handshake_flood [--handshakes 10000]     (make tls-flood)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import psutil

from compat_tests.conftest import start_gateway
from compat_tests.tls.certificates import Authority
from compat_tests.tls.conftest import api_versions_request, client_context, read_response, refused, tls_connect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--handshakes", type=int, default=10_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tls-flood-") as work:
        directory = Path(work)
        main_ca, other_ca = Authority(directory, "main"), Authority(directory, "other")
        server, good, stranger = main_ca.server("server"), main_ca.client("good", "alice"), other_ca.client("x", "x")
        gateway = start_gateway(directory, "--kafka-tls-port", "0", "--tls-cert", server.cert, "--tls-key",
                                server.key, "--tls-ca", main_ca.cert, "--tls-client-auth", "required")
        try:
            host, _, port = gateway.ready["kafka_tls"].rpartition(":")
            address = (host, int(port))
            files = SimpleNamespace(ca=main_ca.cert)   # what client_context reads of the test certificates
            wrong, right = client_context(files, stranger), client_context(files, good)
            process = psutil.Process(gateway.proc.pid)
            rss0, fds0, started = process.memory_info().rss, process.num_fds(), time.monotonic()
            step = max(args.handshakes // 10, 1)
            done = 0
            with ThreadPoolExecutor(8) as pool:
                while done < args.handshakes:
                    batch = min(step, args.handshakes - done)
                    if not all(pool.map(lambda _: refused(address, wrong), range(batch))):
                        print("a handshake with a foreign certificate was accepted")
                        return 1
                    done += batch
                    print(f"{done:>7} refused  {time.monotonic() - started:6.1f} s  "
                          f"RSS {process.memory_info().rss / 2**20:7.1f} MiB  open files {process.num_fds()}",
                          flush=True)
            with tls_connect(address, right) as sock:
                sock.sendall(api_versions_request(1))
                served = read_response(sock)[:4] == (1).to_bytes(4, "big")
            time.sleep(1)
            rss, fds = process.memory_info().rss, process.num_fds()
            print(f"after: RSS {rss0 / 2**20:.1f} -> {rss / 2**20:.1f} MiB, open files {fds0} -> {fds}, "
                  f"a good client {'served' if served else 'NOT served'}")
            return 0 if served and fds <= fds0 + 4 else 1
        finally:
            gateway.stop()


if __name__ == "__main__":
    sys.exit(main())
