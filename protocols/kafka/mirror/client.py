"""The few Kafka requests a mirror's replicator sends to the remote cluster, over asyncio streams and
encoded with the gateway's own codec (every message is declared once, in protocols/kafka/schema).

A connection pipelines requests: each waits for the response carrying its correlation id, so the
partitions copied to one remote broker share its connection without waiting on each other.

Security (`LinkSecurity`, Kafka's client settings): TLS with the system's CAs or a CA file, and
SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (KIP-152 framing: SaslHandshake v1, then
SaslAuthenticate), done on every connection before its first request.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass

import scramp

from core.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from protocols.kafka import acl_wire
from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import Msg, request_codec, response_codec
from protocols.kafka.codec.declare import Api
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.create_acls import CREATE_ACLS
from protocols.kafka.schema.create_topics import CREATE_TOPICS
from protocols.kafka.schema.describe_acls import DESCRIBE_ACLS
from protocols.kafka.schema.describe_configs import DESCRIBE_CONFIGS
from protocols.kafka.schema.find_coordinator import FIND_COORDINATOR
from protocols.kafka.schema.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from protocols.kafka.schema.list_offsets import LIST_OFFSETS
from protocols.kafka.schema.metadata import METADATA
from protocols.kafka.schema.offset_commit import OFFSET_COMMIT
from protocols.kafka.schema.produce import PRODUCE
from protocols.kafka.schema.sasl_authenticate import SASL_AUTHENTICATE
from protocols.kafka.schema.sasl_handshake import SASL_HANDSHAKE

REPLICATOR_CLIENT_ID = "gateway-replicator"   # how a mirror topic's owner knows its replicator
# A group with members on the remote refuses a commit from outside it: its own positions stand.
GROUP_BUSY = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS})
MAX_RESPONSE_BYTES = 64 << 20
LATEST = -1                                    # ListOffsets: the high watermark
TOPIC_RESOURCE = 2                             # DescribeConfigs / IncrementalAlterConfigs resource type
DYNAMIC_TOPIC_CONFIG = 1                       # a config_source: set on the topic
SET, DELETE = 0, 1                             # IncrementalAlterConfigs operations
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class RemoteError(Exception):
    """The remote cluster answered with an error code, or could not be reached."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


def check(code: int, what: str) -> None:
    if code != ErrorCode.NONE:
        try:
            known: ErrorCode | None = ErrorCode(code)
        except ValueError:
            known = None
        raise RemoteError(f"{what}: {known.name if known is not None else code}", known)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class LinkSecurity:
    """How a link reaches the remote: Kafka's security.protocol and what it needs."""

    tls: bool = False
    ca_file: str | None = None           # None: the system's CAs
    check_hostname: bool = True
    sasl_mechanism: str | None = None    # None: no SASL
    username: str = ""
    password: str = ""
    certificate_file: str | None = None  # the link's own certificate and key (mutual TLS)
    key_file: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.check_hostname
        if self.certificate_file is not None:
            context.load_cert_chain(self.certificate_file, self.key_file)
        return context


class RemoteConnection:
    """One connection to one remote broker."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0, security: LinkSecurity | None = None) -> None:
        self.address = (host, port)
        self._security = security or LinkSecurity()
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: dict[int, tuple[asyncio.Future, Api, int]] = {}
        self._ids = itertools.count(1)
        self._reading: asyncio.Task | None = None
        self._connecting = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._writer is not None and self._reading is not None and self._reading.done()

    async def call(self, api: Api, version: int, body: dict) -> Msg:
        await self._connect()
        return await self._request(api, version, body)

    async def _request(self, api: Api, version: int, body: dict) -> Msg:
        correlation = next(self._ids) & 0x7FFFFFFF
        client_id = REPLICATOR_CLIENT_ID.encode()
        payload = bytearray(struct.pack(">hhih", api.key, version, correlation, len(client_id)) + client_id)
        if api.is_flexible(version):
            payload += b"\x00"   # request header v2: no tagged fields
        request_codec(api, version).write(payload, body)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[correlation] = (answer, api, version)
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        try:
            await self._writer.drain()
            return await asyncio.wait_for(answer, self._timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            self.close()
            raise RemoteError(f"{api.name} to {self.address[0]}:{self.address[1]}: {exc or 'timed out'}") from None
        finally:
            self._waiting.pop(correlation, None)

    async def _connect(self) -> None:
        async with self._connecting:
            if self._writer is not None and not self.closed:
                return
            context = self._security.ssl_context()
            try:
                self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(
                    *self.address, ssl=context, server_hostname=self.address[0] if context else None),
                    self._timeout_s)
            except (OSError, asyncio.TimeoutError) as exc:   # ssl.SSLError is an OSError
                raise RemoteError(f"cannot reach {self.address[0]}:{self.address[1]}: {exc or 'timed out'}") from None
            self._reading = asyncio.ensure_future(self._read_responses())
            if self._security.sasl_mechanism is not None:
                try:
                    await self._authenticate(self._security)
                except BaseException:
                    self.close()
                    self._writer = None     # the next call connects again
                    raise

    async def _authenticate(self, security: LinkSecurity) -> None:
        mechanism = security.sasl_mechanism
        handshake = await self._request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        check(handshake.error_code, f"SASL {mechanism} with {self.address[0]}:{self.address[1]} "
                                    f"(it offers {', '.join(handshake.mechanisms) or 'nothing'})")
        if mechanism == "PLAIN":
            await self._sasl_step(b"\0" + security.username.encode() + b"\0" + security.password.encode())
            return
        client = scramp.ScramClient([mechanism], security.username, security.password)
        server_first = await self._sasl_step(client.get_client_first().encode())
        try:
            client.set_server_first(server_first.decode())
            server_final = await self._sasl_step(client.get_client_final().encode())
            client.set_server_final(server_final.decode())
        except scramp.ScramException as exc:
            raise RemoteError(f"SASL {mechanism} with {self.address[0]}:{self.address[1]}: {exc}",
                              ErrorCode.SASL_AUTHENTICATION_FAILED) from None

    async def _sasl_step(self, payload: bytes) -> bytes:
        answer = await self._request(SASL_AUTHENTICATE, 1, {"auth_bytes": payload})
        check(answer.error_code, f"SASL authentication with {self.address[0]}:{self.address[1]} "
                                 f"({answer.error_message or 'no message'})")
        return bytes(answer.auth_bytes)

    async def _read_responses(self) -> None:
        error: BaseException = RemoteError(f"connection to {self.address[0]}:{self.address[1]} closed")
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))[0]
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise RemoteError(f"response of {size} bytes from {self.address[0]}:{self.address[1]}")
                frame = await self._reader.readexactly(size)
                correlation = _CORRELATION.unpack_from(frame)[0]
                waiting = self._waiting.pop(correlation, None)
                if waiting is None:
                    continue   # its caller gave up
                answer, api, version = waiting
                reader = t.Reader(memoryview(frame)[_CORRELATION.size:])
                if api.is_flexible(version):
                    for _ in range(reader.uvarint()):   # response header v1: tagged fields
                        reader.uvarint()
                        reader.take(reader.uvarint())
                if not answer.done():
                    answer.set_result(response_codec(api, version).read(reader))
        except (OSError, asyncio.IncompleteReadError, RemoteError) as exc:
            if isinstance(exc, RemoteError):
                error = exc
        except Exception as exc:   # a response the codec cannot read
            error = RemoteError(f"unreadable response from {self.address[0]}:{self.address[1]}: {exc}")
        finally:
            for answer, _, _ in self._waiting.values():
                if not answer.done():
                    answer.set_exception(error)
            self._waiting.clear()
            if self._writer is not None:
                self._writer.close()

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        if self._writer is not None:
            self._writer.close()


class RemoteCluster:
    """The remote cluster as the replicator needs it: who leads each partition, topic creation,
    a partition's end, and Produce. Metadata is cached and refreshed after any error."""

    def __init__(self, bootstrap: list[tuple[str, int]], timeout_s: float = 30.0,
                 security: LinkSecurity | None = None) -> None:
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        self._security = security
        self._connections: dict[tuple[str, int], RemoteConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}

    def _connection(self, address: tuple[str, int]) -> RemoteConnection:
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            connection = self._connections[address] = RemoteConnection(*address, timeout_s=self._timeout_s,
                                                                       security=self._security)
        return connection

    async def _any(self, api: Api, version: int, body: dict) -> Msg:
        """Ask the bootstrap brokers in turn, then any known one."""
        error: RemoteError = RemoteError("no remote broker configured")
        for address in list(dict.fromkeys(self._bootstrap + list(self._brokers.values()))):
            try:
                return await self._connection(address).call(api, version, body)
            except RemoteError as exc:
                error = exc
        raise error

    async def refresh(self, topics: list[str]) -> Msg:
        response = await self._any(METADATA, 4, {"topics": [{"name": name} for name in topics],
                                                 "allow_auto_topic_creation": False})
        self._brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            for partition in topic.partitions:
                self._leaders[(topic.name, partition.partition_index)] = partition.leader_id
        return response

    async def partitions(self, topic: str) -> int | None:
        """The remote topic's partition count; None when it does not exist."""
        response = await self.refresh([topic])
        for answer in response.topics:
            if answer.name == topic:
                if answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return None
                check(answer.error_code, f"metadata of {topic}")
                return len(answer.partitions)
        return None

    async def create_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        response = await self._any(CREATE_TOPICS, 3, {"topics": [{
            "name": topic, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout_ms": 30000,
            "validate_only": False})
        code = response.topics[0].error_code
        if code != ErrorCode.TOPIC_ALREADY_EXISTS:
            check(code, f"creating {topic}")

    async def topic_configs(self, topic: str) -> dict[str, str] | None:
        """The settings set on the remote topic (None: no such topic)."""
        response = await self._any(DESCRIBE_CONFIGS, 1, {"resources": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False})
        result = response.results[0]
        if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        check(result.error_code, f"settings of {topic}")
        return {c.name: c.value for c in result.configs
                if c.config_source == DYNAMIC_TOPIC_CONFIG and c.value is not None}

    async def alter_topic_configs(self, topic: str, changed: dict[str, str], removed: list[str]) -> None:
        """Set `changed` and remove `removed` on the remote topic; the others stay."""
        configs = [{"name": k, "config_operation": SET, "value": v} for k, v in changed.items()]
        configs += [{"name": k, "config_operation": DELETE, "value": None} for k in removed]
        response = await self._any(INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": configs}], "validate_only": False})
        check(response.responses[0].error_code, f"changing the settings of {topic}")

    async def topic_acls(self) -> set[AclBinding]:
        """The remote's ACLs on topics named literally (those of the link's user's tenant)."""
        response = await self._any(DESCRIBE_ACLS, 1, {
            "resource_type_filter": acl_wire.code(ResourceType.TOPIC), "resource_name_filter": None,
            "pattern_type_filter": acl_wire.code(PatternType.LITERAL), "principal_filter": None,
            "host_filter": None, "operation": acl_wire.code(Operation.ANY),
            "permission_type": acl_wire.code(Permission.ANY)})
        check(response.error_code, "listing topic ACLs")
        return {AclBinding.of(ResourceType.TOPIC, resource.resource_name, PatternType.LITERAL, acl.principal,
                              acl.host, acl_wire.operation(acl.operation), acl_wire.permission(acl.permission_type))
                for resource in response.resources for acl in resource.acls}

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        response = await self._any(CREATE_ACLS, 1, {"creations": [{
            "resource_type": acl_wire.code(b.pattern.resource_type), "resource_name": b.pattern.name,
            "resource_pattern_type": acl_wire.code(b.pattern.pattern_type), "principal": b.entry.principal,
            "host": b.entry.host, "operation": acl_wire.code(b.entry.operation),
            "permission_type": acl_wire.code(b.entry.permission)} for b in bindings]})
        for binding, result in zip(bindings, response.results):
            check(result.error_code, f"creating the ACL {binding.to_doc()}")

    async def _leader(self, topic: str, partition: int) -> RemoteConnection:
        leader = self._leaders.get((topic, partition))
        if leader is None or leader not in self._brokers:
            await self.refresh([topic])
            leader = self._leaders.get((topic, partition))
            if leader is None or leader not in self._brokers:
                raise RemoteError(f"no leader for {topic}-{partition}")
        return self._connection(self._brokers[leader])

    async def end_offset(self, topic: str, partition: int) -> int:
        response = await self._call_leader(topic, partition, LIST_OFFSETS, 2, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "timestamp": LATEST}]}]})
        answer = response.topics[0].partitions[0]
        self._check(answer.error_code, f"end offset of {topic}-{partition}", topic, partition)
        return answer.offset

    async def produce(self, topic: str, partition: int, records: bytes) -> int:
        """Store `records` (whole batches) with acks=all; the first batch's base offset."""
        response = await self._call_leader(topic, partition, PRODUCE, 7, {
            "transactional_id": None, "acks": -1, "timeout_ms": int(self._timeout_s * 1000),
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
        answer = response.responses[0].partition_responses[0]
        self._check(answer.error_code, f"copying to {topic}-{partition}", topic, partition)
        return answer.base_offset

    async def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> bool:
        """Commit `offsets` for `group` as a consumer outside the group would (generation -1). False
        when the group is in use on the remote (it keeps its own positions); RemoteError otherwise."""
        found = await self._any(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        check(found.error_code, f"coordinator of group {group}")
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                   "committed_metadata": ""})
        response = await self._connection((found.host, found.port)).call(OFFSET_COMMIT, 2, {
            "group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": rows} for topic, rows in by_topic.items()]})
        codes = {p.error_code for t in response.topics for p in t.partitions} - {ErrorCode.NONE}
        if codes and codes <= GROUP_BUSY:
            return False
        for code in codes:
            check(code, f"committing offsets of group {group}")
        return True

    async def _call_leader(self, topic: str, partition: int, api: Api, version: int, body: dict) -> Msg:
        try:
            return await (await self._leader(topic, partition)).call(api, version, body)
        except RemoteError:
            self._leaders.pop((topic, partition), None)   # asked again next time: it may have moved
            raise

    def _check(self, code: int, what: str, topic: str, partition: int) -> None:
        if code != ErrorCode.NONE:
            self._leaders.pop((topic, partition), None)
            check(code, what)

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
