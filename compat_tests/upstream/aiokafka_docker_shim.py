"""A pytest plugin standing in for Docker in aiokafka's test suite (`-p aiokafka_docker_shim`).

aiokafka's fixtures start their Kafka image with `docker.containers.run(...)`, telling it the port
to advertise and the partition count in its environment. Here that call starts a gateway on that
port with those settings instead, and `stop()` stops it. Commands run inside the image (kafka-acls,
kafka-configs, the TLS certificate script, Kerberos) have no counterpart: they answer exit code 1,
so the tests needing them fail, and are reported, as tests of what the gateway lacks (SSL and
GSSAPI listeners, the broker's command-line tools).
"""

from __future__ import annotations

import docker

from gateway_runner import Gateway

NO_TOOL = (1, b"no such command: the gateway stands in for the Kafka image, without its tools")


class _Container:
    def __init__(self, gateway: Gateway | None) -> None:
        self.gateway = gateway

    def exec_run(self, cmd, **_options):
        if self.gateway is None:    # the certificate generator: no certificates, no TLS tests
            return 0, b""
        return NO_TOOL

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()


class _Containers:
    def run(self, image, command=None, environment=None, **_options) -> _Container:
        if command is not None or not environment:
            return _Container(None)
        return _Container(Gateway(port=int(environment["ADVERTISED_PORT"]),
                                  partitions=int(environment.get("NUM_PARTITIONS", 1))))


class _Images:
    def pull(self, image) -> None:
        pass


class _Client:
    containers = _Containers()
    images = _Images()

    def close(self) -> None:
        pass


docker.from_env = lambda *args, **kwargs: _Client()
