"""Typed, frozen settings read from command-line options and environment variables, the same
way in every process: the one loader the job (`streaming_jobs.config`) and the controller
(`controller.cli`) share.

A settings class is a frozen dataclass whose fields carry a default and a docstring (the
string right after the field). `options_of` turns its scalar fields into `Option`s (flag,
environment variable, type, help = the docstring's first sentence); `add_options` registers
them on an argparse parser; `read` takes, per field, the option's value, else the environment
variable's, else nothing (the dataclass default then applies), and refuses a value that does
not parse with an `OptionError` naming the option or variable. A leaf like `streamctl.security`: it
imports nothing of the project.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

SCALARS = (bool, int, float, str)


class OptionError(ValueError):
    """A value that does not parse; the message names the option or variable."""


@dataclass(frozen=True)
class Option:
    """One scalar setting as a command-line option and an environment variable."""

    field: str
    env: str
    type: type
    default: Any
    help: str
    dest: str = ""
    """The argparse destination (default: the field's name)."""
    secret: bool = False
    """Read from its variable only: an option's value would show in `ps`."""

    @property
    def flag(self) -> str:
        return f"--{self.field.replace('_', '-')}"

    @property
    def key(self) -> str:
        return self.dest or self.field

    def parse(self, raw: Any, where: str) -> Any:
        """`raw` (text from the environment, or a typed option value) as the field's type."""
        if not isinstance(raw, str):
            return raw
        try:
            return parse_text(raw, self.type)
        except ValueError as exc:
            raise OptionError(f"{where}={raw!r} is not a valid {self.type.__name__}: {exc}"
                              ) from None


def parse_text(raw: str, kind: type) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered not in ("1", "true", "yes", "0", "false", "no"):
            raise ValueError("expected true or false")
        return lowered in ("1", "true", "yes")
    return kind(raw.strip()) if kind is not str else raw


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring after each field of a dataclass, whitespace collapsed."""
    tree = ast.parse(inspect.getsource(sys.modules[cls.__module__]))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    docs = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def options_of(cls: type, env: Callable[[str], str], *, skip: Iterable[str] = (),
               dest_prefix: str = "") -> list[Option]:
    """The scalar fields of `cls` (those with a default of a scalar type, or a required str)
    as options; `env(field)` names each one's variable. A field kept out of its class's repr
    is a secret, read from its variable only."""
    docs, skipped = attribute_docs(cls), set(skip)
    found = []
    for f in fields(cls):
        if f.name in skipped or f.default_factory is not MISSING:  # a nested group, a secret
            continue
        default = f.default
        kind = type(default) if default is not MISSING else str
        if default is not MISSING and kind not in SCALARS:
            continue
        found.append(Option(f.name, env(f.name), kind, default, docs.get(f.name, ""),
                            f"{dest_prefix}{f.name}" if dest_prefix else "",
                            secret=not f.repr))
    return found


def add_options(parser: argparse.ArgumentParser | Any, options: Iterable[Option]) -> None:
    """Register each option but the secrets; its help is the field's docstring, with its
    variable and default."""
    for o in options:
        if o.secret:
            continue
        shown = "required" if o.default is MISSING else f"default {o.default!r}"
        help_text = f"{o.help} [env {o.env}; {shown}]".replace("%", "%%")
        if o.type is bool:  # --flag / --no-flag: a default of true can be turned off too
            parser.add_argument(o.flag, dest=o.key, action=argparse.BooleanOptionalAction,
                                default=None, help=help_text)
        else:
            parser.add_argument(o.flag, dest=o.key, type=o.type, default=None,
                                metavar=o.field.upper(), help=help_text)


def read(options: Iterable[Option], given: Mapping[str, Any],
         environ: Mapping[str, str]) -> dict[str, Any]:
    """Per field: the option's value (`given[key]`, None when not given), else the variable's,
    parsed; fields with neither are left out (their dataclass default applies)."""
    values = {}
    for o in options:
        raw = given.get(o.key)
        where = o.flag
        if raw is None and o.env in environ:
            raw, where = environ[o.env], o.env
        if raw is not None:
            values[o.field] = o.parse(raw, where)
    return values
