"""`gateway admin ...`: the admin REST API from the command line.

Tables for people, `--json` for scripts (the API's own documents). Where the server is and who
calls: --url / GATEWAY_ADMIN_URL, --user / GATEWAY_ADMIN_USER and GATEWAY_ADMIN_PASSWORD (never a
flag, so it stays out of process lists and shell history).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

EXIT_API_ERROR = 1
DEFAULT_URL = "http://127.0.0.1:8080"

admin_cli = typer.Typer(help="Manage a running gateway through its admin API.", no_args_is_help=True)
tenants_cli = typer.Typer(help="Tenants.", no_args_is_help=True)
namespaces_cli = typer.Typer(help="Namespaces and their policies.", no_args_is_help=True)
users_cli = typer.Typer(help="Users, their tags and permissions.", no_args_is_help=True)
topics_cli = typer.Typer(help="Topics and their subscriptions.", no_args_is_help=True)
connections_cli = typer.Typer(help="Client connections.", no_args_is_help=True)
cluster_cli = typer.Typer(help="The broker cluster: brokers, partition moves.", no_args_is_help=True)
roles_cli = typer.Typer(help="Roles: permissions users take on.", no_args_is_help=True)
for group, name in ((tenants_cli, "tenants"), (namespaces_cli, "namespaces"), (users_cli, "users"),
                    (topics_cli, "topics"), (connections_cli, "connections"), (cluster_cli, "cluster"),
                    (roles_cli, "roles")):
    admin_cli.add_typer(group, name=name)

_state: dict[str, Any] = {}
_out = Console()


@admin_cli.callback()
def _options(
    url: Annotated[str, typer.Option(envvar="GATEWAY_ADMIN_URL", help="The admin port's URL.")] = DEFAULT_URL,
    user: Annotated[str, typer.Option(envvar="GATEWAY_ADMIN_USER", help="A user tagged administrator.")] = "admin",
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of tables.")] = False,
) -> None:
    _state.update(url=url.rstrip("/") + "/api/v1", user=user, json=as_json,
                  password=os.environ.get("GATEWAY_ADMIN_PASSWORD", ""))


def _call(method: str, path: str, body: Any = None, **params: Any) -> Any:
    try:
        answer = httpx.request(method, _state["url"] + path, json=body, params=params or None,
                               auth=(_state["user"], _state["password"]), timeout=60)
    except httpx.HTTPError as exc:
        typer.echo(f"gateway admin: cannot reach {_state['url']}: {exc}", err=True)
        raise typer.Exit(EXIT_API_ERROR) from None
    if answer.status_code >= 400:
        try:
            reason = answer.json().get("detail", answer.text)
        except ValueError:
            reason = answer.text
        typer.echo(f"gateway admin: {answer.status_code}: {reason}", err=True)
        raise typer.Exit(EXIT_API_ERROR)
    return answer.json() if answer.content else None


def _show(document: Any, columns: list[str] | None = None, rows: list[dict] | None = None) -> None:
    """--json: the document as the API sent it; otherwise a table of `rows` (default: the document)."""
    if _state["json"]:
        typer.echo(json.dumps(document, indent=2))
        return
    rows = document if rows is None else rows
    if columns is None:   # a list of names
        for row in rows:
            typer.echo(row)
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    _out.print(table)


def _policies(pairs: list[str]) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected key=value, got {pair!r}")
        policies[key] = int(value) if value.lstrip("-").isdigit() else value
    return policies


# --- tenants ---------------------------------------------------------------------------------------

@tenants_cli.command("list")
def tenants_list() -> None:
    _show(_call("GET", "/tenants"))


@tenants_cli.command("create")
def tenants_create(tenant: str) -> None:
    document = _call("PUT", f"/tenants/{tenant}")
    _show(document, ["tenant", "namespaces"], [document])


@tenants_cli.command("delete")
def tenants_delete(tenant: str, force: Annotated[bool, typer.Option(help="Delete its topics too.")] = False) -> None:
    if force:
        for namespace in _call("GET", f"/tenants/{tenant}/namespaces"):
            _delete_namespace(tenant, namespace)
    _call("DELETE", f"/tenants/{tenant}", force=str(force).lower())


# --- namespaces ------------------------------------------------------------------------------------

@namespaces_cli.command("list")
def namespaces_list(tenant: str) -> None:
    _show(_call("GET", f"/tenants/{tenant}/namespaces"))


@namespaces_cli.command("create")
def namespaces_create(tenant: str, namespace: str,
                      policy: Annotated[list[str], typer.Option("--policy", help="key=value, e.g. max_topics=100.")] = []
                      ) -> None:   # noqa: B006 (typer reads the default)
    body = {"policies": _policies(policy)} if policy else None
    document = _call("PUT", f"/tenants/{tenant}/namespaces/{namespace}", body)
    _show(document, ["tenant", "namespace", "topics", "queues", "groups", "policies"], [document])


@namespaces_cli.command("show")
def namespaces_show(tenant: str, namespace: str) -> None:
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}")
    _show(document, ["tenant", "namespace", "topics", "queues", "groups", "policies"], [document])


@namespaces_cli.command("set-policies")
def namespaces_set_policies(tenant: str, namespace: str, policy: Annotated[list[str], typer.Argument(
        help="key=value pairs; the namespace's policies become exactly these.")]) -> None:
    document = _call("PUT", f"/tenants/{tenant}/namespaces/{namespace}/policies", _policies(policy))
    _show(document, ["policy", "value"], [{"policy": k, "value": v} for k, v in document.items()])


@namespaces_cli.command("delete")
def namespaces_delete(tenant: str, namespace: str,
                      force: Annotated[bool, typer.Option(help="Delete its topics too.")] = False) -> None:
    if force:
        _delete_namespace(tenant, namespace)
    else:
        _call("DELETE", f"/tenants/{tenant}/namespaces/{namespace}")


def _delete_namespace(tenant: str, namespace: str) -> None:
    """Topic by topic with a progress bar, then the namespace (forced: also its queues and groups)."""
    base = f"/tenants/{tenant}/namespaces/{namespace}"
    total = _call("GET", f"{base}/topics", limit=1)["total"]
    with Progress(console=Console(stderr=True), disable=_state["json"]) as progress:
        task = progress.add_task(f"deleting {tenant}/{namespace}", total=total)
        while True:
            page = _call("GET", f"{base}/topics", limit=1000)["topics"]
            if not page:
                break
            for topic in page:
                _call("DELETE", f"{base}/topics/{topic['name']}")
                progress.advance(task)
    _call("DELETE", base, force="true")


# --- users -----------------------------------------------------------------------------------------

@users_cli.command("list")
def users_list() -> None:
    _show(_call("GET", "/users"), ["name", "tenant", "namespace", "tags"])


@users_cli.command("create")
def users_create(
    name: str,
    tenant: Annotated[str | None, typer.Option(help="Where its clients land.", show_default="public")] = None,
    namespace: Annotated[str | None, typer.Option(show_default="default")] = None,
    tag: Annotated[list[str], typer.Option("--tag", help="e.g. administrator.")] = [],   # noqa: B006
) -> None:
    """Create or change a user; the password is read from GATEWAY_USER_PASSWORD or asked for."""
    password = os.environ.get("GATEWAY_USER_PASSWORD") or typer.prompt("password", hide_input=True)
    body = {"password": password, "tenant": tenant, "namespace": namespace, "tags": tag or None}
    document = _call("PUT", f"/users/{name}", {k: v for k, v in body.items() if v is not None})
    _show(document, ["name", "tenant", "namespace", "tags"], [document])


@users_cli.command("tag")
def users_tag(name: str, tag: Annotated[list[str], typer.Argument(help="The user's tags (none: untag).")] = []
              ) -> None:   # noqa: B006
    document = _call("PUT", f"/users/{name}", {"tags": tag})
    _show(document, ["name", "tenant", "namespace", "tags"], [document])


@users_cli.command("delete")
def users_delete(name: str) -> None:
    """Delete the user; its open connections are closed."""
    _call("DELETE", f"/users/{name}")


@users_cli.command("permissions")
def users_permissions() -> None:
    _show(_call("GET", "/permissions"), ["user", "tenant", "namespace", "configure", "write", "read"])


@users_cli.command("grant")
def users_grant(name: str, tenant: str, namespace: str, configure: str = ".*", write: str = ".*",
                read: str = ".*") -> None:
    """Grant the user configure / write / read on tenant/namespace (regular expressions over names), for
    Kafka and AMQP alike; its open connections follow at once."""
    document = _call("PUT", f"/permissions/{tenant}/{namespace}/{name}",
                     {"configure": configure, "write": write, "read": read})
    _show(document, ["user", "tenant", "namespace", "configure", "write", "read"], [document])


@users_cli.command("revoke")
def users_revoke(name: str, tenant: str, namespace: str) -> None:
    _call("DELETE", f"/permissions/{tenant}/{namespace}/{name}")


@users_cli.command("roles")
def users_roles(name: str, role: Annotated[list[str], typer.Argument(help="The user's roles (none: no role).")] = []
                ) -> None:   # noqa: B006
    document = _call("PUT", f"/users/{name}", {"roles": role})
    _show(document, ["name", "tenant", "namespace", "roles"], [document])


# --- roles -----------------------------------------------------------------------------------------

def _role_rows(roles: list[dict]) -> list[dict]:
    return [{"role": r["name"], **p} for r in roles for p in r["permissions"]]


@roles_cli.command("list")
def roles_list() -> None:
    document = _call("GET", "/roles")
    _show(document, ["role", "tenant", "namespace", "configure", "write", "read"], _role_rows(document))


@roles_cli.command("grant")
def roles_grant(role: str, tenant: str, namespace: str, configure: str = ".*", write: str = ".*",
                read: str = ".*") -> None:
    """Set the role's permissions on tenant/namespace (a new role is created); its users follow at once."""
    current = next((r for r in _call("GET", "/roles") if r["name"] == role), {"permissions": []})
    kept = [p for p in current["permissions"] if (p["tenant"], p["namespace"]) != (tenant, namespace)]
    wanted = {"tenant": tenant, "namespace": namespace, "configure": configure, "write": write, "read": read}
    document = _call("PUT", f"/roles/{role}", {"permissions": [*kept, wanted]})
    _show(document, ["role", "tenant", "namespace", "configure", "write", "read"], _role_rows([document]))


@roles_cli.command("delete")
def roles_delete(role: str) -> None:
    _call("DELETE", f"/roles/{role}")


# --- topics and subscriptions ----------------------------------------------------------------------

@topics_cli.command("list")
def topics_list(tenant: str, namespace: str, limit: int = 1000, offset: int = 0) -> None:
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}/topics", limit=limit, offset=offset)
    _show(document, ["name", "partitions"], document["topics"])


@topics_cli.command("show")
def topics_show(tenant: str, namespace: str, topic: str) -> None:
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}/topics/{topic}")
    _show(document, ["partition", "start_offset", "end_offset", "size_bytes"], document["partitions"])


@topics_cli.command("subscriptions")
def topics_subscriptions(tenant: str, namespace: str) -> None:
    """Kafka groups, AMQP queues and assign()-mode consumers of the namespace."""
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}/subscriptions")
    rows = [{"topic": s["topic"], "kind": s["kind"], "name": s["name"],
             "backlog": sum(p["backlog"] for p in s["partitions"]),
             "consumers": ", ".join(f"{c.get('client_id')}@{c.get('address')}" for c in s["consumers"])}
            for s in document]
    _show(document, ["topic", "kind", "name", "backlog", "consumers"], rows)


@topics_cli.command("delete")
def topics_delete(tenant: str, namespace: str, topic: str) -> None:
    _call("DELETE", f"/tenants/{tenant}/namespaces/{namespace}/topics/{topic}")


@topics_cli.command("delayed")
def topics_delayed(tenant: str, namespace: str, topic: str) -> None:
    """Delayed messages pending for the topic, per partition."""
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/delayed")
    _show(document, ["partition", "pending"], document["partitions"])


@topics_cli.command("cancel-delayed")
def topics_cancel_delayed(tenant: str, namespace: str, topic: str, message_id: int) -> None:
    """Cancel a delayed message of the topic by its id (its offset in __delayed_messages)."""
    _call("DELETE", f"/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/delayed/{message_id}")


# --- connections -----------------------------------------------------------------------------------

@connections_cli.command("list")
def connections_list() -> None:
    _show(_call("GET", "/connections"), ["id", "protocol", "address", "user", "tenant", "namespace", "client_id"])


@connections_cli.command("close")
def connections_close(connection_id: int) -> None:
    _call("DELETE", f"/connections/{connection_id}")


# --- cluster ---------------------------------------------------------------------------------------

@cluster_cli.command("brokers")
def cluster_brokers() -> None:
    """The live brokers, with the leader marked."""
    document = _call("GET", "/cluster")
    rows = [{**broker, "leader": "yes" if broker["id"] == document["leader"] else ""} for broker in document["brokers"]]
    _show(document, ["id", "kafka", "amqp", "rack", "role", "bundles", "leader"], rows)


@cluster_cli.command("moves")
def cluster_moves() -> None:
    """Bundles being moved to the broker an operator chose, and who holds each now."""
    document = _call("GET", "/cluster")
    _show(document, ["bundle", "from", "to", "holder"], document["moves"])


@cluster_cli.command("bundles")
def cluster_bundles(tenant: str, namespace: str) -> None:
    """A namespace's bundles (hash ranges) and the broker each is assigned to."""
    document = _call("GET", f"/tenants/{tenant}/namespaces/{namespace}/bundles")
    _show(document, ["bundle", "lower", "upper", "broker"], document["bundles"])


@cluster_cli.command("split")
def cluster_split(tenant: str, namespace: str, bundle: str,
                  at: Annotated[int | None, typer.Option(help="The hash the upper half starts at "
                                                                 "(default: where its traffic divides).")] = None) -> None:
    """Split a bundle (`<lower>_<upper>`, as `bundles` lists it) in two; its owner carries it out."""
    document = _call("PUT", f"/tenants/{tenant}/namespaces/{namespace}/bundles/{bundle}/split",
                     {} if at is None else {"at": at})
    _show(document, ["bundle", "at"], [document])


@cluster_cli.command("move")
def cluster_move(tenant: str, namespace: str, topic: str, partition: int, broker: int) -> None:
    """Move a partition, with the other partitions of its bundle, to a broker (a Kafka reassignment)."""
    document = _call("PUT", f"/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/partitions/{partition}/owner",
                     {"broker": broker})
    _show(document, ["bundle", "broker"], [document])
