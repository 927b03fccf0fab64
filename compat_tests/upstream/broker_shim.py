"""A pytest plugin that points an upstream client suite at the broker under test, unchanged.

Loaded with `-p compat_tests.upstream.broker_shim` by run_amqp_suites.py, which sets
UPSTREAM_AMQP_PORT. The suites expect a broker on localhost:5672 (pika, kombu), from AMQP_URL
(aiormq) or in a Docker container (aio-pika); this plugin:

- resolves every address on port 5672 to UPSTREAM_AMQP_PORT (socket.getaddrinfo, which the pika,
  asyncio and py-amqp connections go through, and gevent's for pika's gevent adapter);
- stands in for aio-pika's Docker helper: "running" its RabbitMQ image returns the broker under
  test, and killing or removing the container does nothing.
"""

from __future__ import annotations

import os
import socket
import sys

AMQP_PORT = 5672
_target = int(os.environ["UPSTREAM_AMQP_PORT"])
_getaddrinfo = socket.getaddrinfo


def _redirecting(getaddrinfo):
    def redirected(host, port, *args, **kwargs):
        if port in (AMQP_PORT, str(AMQP_PORT)):
            port = _target
        return getaddrinfo(host, port, *args, **kwargs)
    return redirected


socket.getaddrinfo = _redirecting(_getaddrinfo)
try:                      # pika's gevent adapter resolves through gevent's own resolver
    import gevent.socket
except ImportError:
    pass
else:
    gevent.socket.getaddrinfo = _redirecting(gevent.socket.getaddrinfo)


def _stand_in_for_docker() -> None:
    """aio-pika's tests/docker_client.py: its container is the broker under test."""
    try:
        import tests.docker_client as docker_client
    except ImportError:
        return
    if not hasattr(docker_client, "DockerClient"):
        return

    class BrokerUnderTest:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self, image, ports, environment=None):
            return docker_client.ContainerInfo(id="broker-under-test", host="127.0.0.1",
                                               ports={port: _target for port in ports})

        def kill(self, container_id) -> None:
            pass

        def remove(self, container_id) -> None:
            pass

    docker_client.DockerClient = BrokerUnderTest
    docker_client.check_docker_available = lambda *args, **kwargs: None


if os.path.isfile(os.path.join(os.getcwd(), "tests", "docker_client.py")):
    sys.path.insert(0, os.getcwd())
    _stand_in_for_docker()
