"""A setting group's variables, read from the environment: one per field, and a file that may
hold the secret field instead (a Docker secret); and the variable a message names for a field.
Shared by `kafka` and `metrics_http`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variables:
    """Where a setting group's fields are read from."""

    names: Mapping[str, str]
    """The variable each field is read from."""

    secret: str
    """The field that may come from a file instead: a password, which `ps e` and `docker
    inspect` would show in a variable."""

    secret_file_env: str
    """The variable that names the secret's file."""

    def read(self, env: Mapping[str, str], error: type[ValueError]) -> dict[str, str]:
        """{field: value} of every variable that is set (stripped), with the secret read from
        its file when that is named instead; `error` when both are set or the file cannot be
        read."""
        values = {name: env[var].strip() for name, var in self.names.items()
                  if env.get(var, "").strip()}
        path = env.get(self.secret_file_env, "").strip()
        if not path:
            return values
        if self.secret in values:
            raise error(f"set {self.names[self.secret]} or {self.secret_file_env}, not both")
        try:
            values[self.secret] = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise error(f"{self.secret_file_env}={path}: cannot read the file ({exc})") from exc
        return values

    def name(self, field: str) -> str:
        """The variable a message names for `field`: the secret's names its file too, since
        either may be the one to fix."""
        if field == self.secret:
            return f"{self.names[field]} (or {self.secret_file_env})"
        return self.names[field]
