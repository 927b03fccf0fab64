"""[[users.permissions]]: RabbitMQ-style per-vhost patterns in the config file, validated at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, PermissionConfig, resolve_config


def users_of(tmp_path: Path, text: str):
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return resolve_config(config_file=path, env={}).users


def test_permissions_per_vhost_map_to_tenant_and_namespace(tmp_path) -> None:
    (user,) = users_of(tmp_path, r"""
[[users]]
name = "app"
password = "secret"
[[users.permissions]]
vhost = "/"
configure = '^amq\.gen'
write = ".*"
read = "^orders-"
[[users.permissions]]
vhost = "acme/billing"
""")
    assert user.permissions == (PermissionConfig("/", "^amq\\.gen", ".*", "^orders-"),
                                PermissionConfig("acme/billing"))
    assert [p.tenant_namespace for p in user.permissions] == [("public", "default"), ("acme", "billing")]


def test_without_permissions_a_user_keeps_its_own_namespace(tmp_path) -> None:
    (user,) = users_of(tmp_path, '[[users]]\nname = "app"\npassword = "secret"\n')
    assert user.permissions is None


@pytest.mark.parametrize("entry, message", [
    ('vhost = "a/b/c"', "vhost must be"),
    ('vhost = "bad name"', "vhost must be"),
    ('configure = ".*"', "needs a vhost"),
    ('vhost = "/"\nwrite = "("', "write '\\(' is not a regular expression"),
    ('vhost = "/"\nread = 3', "read must be a string"),
    ('vhost = "/"\nadmin = ".*"', "unknown key\\(s\\) admin"),
])
def test_bad_permissions_are_refused_with_what_is_wrong(tmp_path, entry, message) -> None:
    with pytest.raises(ConfigError, match=message):
        users_of(tmp_path, f'[[users]]\nname = "app"\npassword = "secret"\n[[users.permissions]]\n{entry}\n')


def test_one_vhost_listed_twice_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="more than one"):
        users_of(tmp_path, '[[users]]\nname = "app"\npassword = "secret"\n'
                           '[[users.permissions]]\nvhost = "/"\n[[users.permissions]]\nvhost = "/"\n')


def test_permissions_must_be_an_array_of_tables(tmp_path) -> None:
    with pytest.raises(ConfigError, match="array of tables"):
        users_of(tmp_path, '[[users]]\nname = "app"\npassword = "secret"\npermissions = "all"\n')
