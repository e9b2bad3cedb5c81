"""Reading a setting group from the environment: the values that are set, and a secret that
may come from a file (a Docker secret) instead. Shared by `kafka` and `metrics_http`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def read(env: Mapping[str, str], names: Mapping[str, str], secret: str, secret_file_env: str,
         error: type[ValueError]) -> dict[str, str]:
    """{field: value} of every variable in `names` that is set (stripped), with the field
    `secret` read from the file named by `secret_file_env` when that is set instead; `error`
    when both are set or the file cannot be read."""
    values = {name: env[var].strip() for name, var in names.items() if env.get(var, "").strip()}
    path = env.get(secret_file_env, "").strip()
    if not path:
        return values
    if secret in values:
        raise error(f"set {names[secret]} or {secret_file_env}, not both")
    try:
        values[secret] = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{secret_file_env}={path}: cannot read the file ({exc})") from exc
    return values
