"""The broker's ACLs as the secured-stack tests compare them: every ALLOW binding as
(user, resource, name, operation, prefixed), and `streamctl.stack.acls`' grants in the same form."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from streamctl.stack.acls import Grant

Binding = tuple[str, str, str, str, bool]
_ANY: Any = None  # a filter's None matches every name, principal and host (the stubs say str)
EVERY_BINDING = AclBindingFilter(ResourceType.ANY, _ANY, ResourcePatternType.ANY, _ANY, _ANY,
                                 AclOperation.ANY, AclPermissionType.ANY)


def granted(admin: AdminClient, timeout_s: float = 30.0) -> set[Binding]:
    """Every binding on the broker."""
    found = admin.describe_acls(EVERY_BINDING, request_timeout=timeout_s).result(timeout=timeout_s)
    return {(b.principal.removeprefix("User:"), b.restype.name.lower(), b.name,
             b.operation.name, b.resource_pattern_type == ResourcePatternType.PREFIXED)
            for b in found}


def expected(grants: Iterable[Grant]) -> set[Binding]:
    """`granted`'s form of `grants`."""
    return {(g.user, g.resource, g.name, op, g.prefixed) for g in grants for op in g.operations}
