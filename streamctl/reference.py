"""The reference sections of docs/configuration.md and docs/metrics.md, rendered from the code.

Three blocks: every command of `streamctl` with its options and their help (from the argparse
tree the command line itself is built from); every environment variable a streamctl process
reads (job and controller settings from their config classes, the bundled jobs' own settings,
the shared names from the constants in the sources) and the variables docker-compose.yml
interpolates, with who reads it, its default and its meaning; and every Prometheus metric the
job and the controller export. `python -m streamctl.reference` prints them for the installed
version; `--write` rewrites the blocks in a checkout's docs (run from its root).
`tests/unit/test_documented_names.py` fails when a block differs from this rendering.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from streamctl import options

DOC = Path("docs") / "configuration.md"
METRICS_DOC = Path("docs") / "metrics.md"
"""The pages with generated blocks, from a checkout's root."""


def _marks(name: str) -> tuple[str, str]:
    return (f"<!-- {name}-reference:begin (generated: python -m streamctl.reference --write) -->",
            f"<!-- {name}-reference:end -->")


ENV_BLOCK = _marks("env")
METRICS_BLOCK = _marks("metrics")
COMMAND_BLOCK = _marks("command")

# Variables read by name (not derived from a config class): who reads them, default, meaning.
SHARED = {
    "STREAMCTL_JOB": ("job", "required",
                      "The job to run: an installed job's name (`streamctl job list`) or an "
                      "import path `package.module:attribute`."),
    "STREAMCTL_SPARK_JARS": ("job", "resolved by `streamctl.stack`",
                             "Comma-separated jar paths for `spark.jars` (the Spark Kafka "
                             "connector); set by `streamctl` itself when empty."),
    "STREAMCTL_SPARK_JARS_DIR": ("job (image)", "unset",
                                 "Directory whose `*.jar` become `STREAMCTL_SPARK_JARS`; the "
                                 "image sets it to the jars resolved at build time."),
    "STREAMCTL_CONTROL_KEY_FILE": ("job, controller",
                                   "unset; locally `<state dir>/control.key`",
                                   "File holding the control-tuple HMAC key (a Docker secret); "
                                   "used when `STREAMCTL_CONTROL_KEY` is unset. `stack up` and "
                                   "`demo` generate the local one."),
}
# Readers beyond the config class that declares a variable (commands that read it by name).
ALSO_READ_BY = {"STREAMCTL_STATE_TOPIC": "`job state`", "STREAMCTL_STATE_DIR": "stack, demo"}
COMPOSE = {
    "GRAFANA_ADMIN_PASSWORD": ("docker compose (grafana)", "`admin`",
                               "Password of Grafana's `admin` user."),
}


@dataclass(frozen=True)
class Row:
    name: str
    readers: str
    default: str
    meaning: str


def attribute_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass, first sentence."""
    return {name: _first_sentence(doc) for name, doc in options.attribute_docs(cls).items()}


def _first_sentence(text: str) -> str:
    # A sentence ends at a period before the end or a word not in lower case ("e.g. the
    # job's service" goes on).
    match = re.match(r"(.+?\.)(\s+(?=[^a-z\s])|\s*$)", text, re.DOTALL)
    return match.group(1) if match else text


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _default(value: Any) -> str:
    if value is MISSING:
        return "required"
    if value in ("", b""):
        return "unset"
    return f"`{value}`"


def _job_rows() -> dict[str, Row]:
    from streaming_jobs.config import option_list

    return {o.env: Row(o.env, "job", _default(o.default), _first_sentence(o.help))
            for o in option_list() if o.field != "job"}


def _job_setting_rows() -> dict[str, Row]:
    """The bundled jobs' own settings (`--set name=value` or `STREAMCTL_<NAME>`)."""
    from streaming_jobs.config import env_var
    from streaming_jobs.loading import bundled, load

    rows: dict[str, Row] = {}
    for name in bundled():
        for setting in load(name).settings:
            var = env_var(setting.name)
            old = rows.get(var)
            readers = f"{old.readers}, {name}" if old else f"job {name}"
            default, meaning = _default(setting.default), _sentence(setting.help) + "."
            if old and old.default != default:
                default = f"{old.default}; {name}: {default}"
            if old and old.meaning != meaning:
                meaning = f"{old.meaning} ({name}: {meaning[:1].lower()}{meaning[1:]})"
            rows[var] = Row(var, readers, default, meaning)
    return rows


def _kafka_security_rows() -> dict[str, Row]:
    """Read by every process that talks to Kafka (`streamctl.security.kafka.from_env`)."""
    from streamctl.security import kafka

    return _security_rows(kafka, kafka.KafkaSecurity, "all",
                          lambda field: _default(getattr(kafka.PLAINTEXT, field)))


def _metrics_endpoint_rows() -> dict[str, Row]:
    """Read by the job and the controller for their Prometheus endpoints."""
    from streamctl.security import metrics_http

    return _security_rows(metrics_http, metrics_http.EndpointSecurity, "job, controller",
                          lambda field: "unset")


def _security_rows(module: Any, settings: type, readers: str,
                   default: Callable[[str], str]) -> dict[str, Row]:
    """A security module's variables: one per field of its settings (`ENV_NAMES`), and the
    file its password may be read from."""
    docs = attribute_docs(settings)
    rows = {name: Row(name, readers, default(field), docs[field])
            for field, name in module.ENV_NAMES.items()}
    rows[module.PASSWORD_FILE_ENV] = Row(module.PASSWORD_FILE_ENV, readers, "unset",
                                         module.PASSWORD_FILE_MEANING)
    return rows


def _controller_rows() -> dict[str, Row]:
    from controller.cli import GROUPS, options

    rows = {}
    for group in GROUPS:
        for o in options(group):
            label = f"{group}.{o.field}" if group else o.field
            rows[o.env] = Row(o.env, "controller", _default(o.default),
                              f"{_first_sentence(o.help)} (`{label}`)")
    return rows


def rows() -> list[Row]:
    """One row per variable; a variable both processes read shows both defaults if they differ."""
    merged: dict[str, Row] = {**_kafka_security_rows(), **_metrics_endpoint_rows()}
    for source in (_job_rows(), _job_setting_rows(), _controller_rows()):
        for name, row in source.items():
            if name not in merged:
                merged[name] = row
                continue
            old = merged[name]
            default = old.default if old.default == row.default else \
                f"{old.readers}: {old.default}; {row.readers}: {row.default}"
            merged[name] = Row(name, f"{old.readers}, {row.readers}", default, old.meaning)
    for table in (SHARED, COMPOSE):
        for name, (readers, default, meaning) in table.items():
            merged.setdefault(name, Row(name, readers, default, meaning))
    for name, readers in ALSO_READ_BY.items():
        if name in merged:
            row = merged[name]
            merged[name] = Row(name, f"{row.readers}, {readers}", row.default, row.meaning)
    if "STREAMCTL_BOOTSTRAP_SERVERS" in merged:  # also `stack topics` and `produce`
        row = merged["STREAMCTL_BOOTSTRAP_SERVERS"]
        merged[row.name] = Row(row.name, "all", row.default, row.meaning)
    return sorted(merged.values(), key=lambda r: (r.readers not in ("all",), r.readers, r.name))


def _cell(text: str) -> str:
    """Markdown-safe: a pipe would split the cell, `<name>` outside a code span would vanish
    as an HTML tag (inside one, `&lt;` would show literally)."""
    parts = text.replace("|", "/").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def render_env() -> str:
    lines = ["| variable | read by | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r.name}` | {r.readers} | {_cell(r.default)} | {_cell(r.meaning)} |"
              for r in rows()]
    return "\n".join(lines)


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every leaf command of `streamctl` (`streamctl job run`, …) and its parser, in order."""
    from streamctl.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not groups:
            found.append((path, parser))
        for group in groups:
            for name, sub in group.choices.items():
                walk(sub, f"{path} {name}")

    walk(build_parser(), "streamctl")
    return found


def options_of(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and "--help" not in a.option_strings]


def _option_cell(action: argparse.Action) -> str:
    flags = ", ".join(f"`{f}`" for f in action.option_strings)
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return f"{flags}{value}" if len(action.option_strings) == 1 else flags


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%%", "%")
    text = re.sub(r" \[env [A-Z0-9_]+; [^\]]*\]$", "", text)  # the settings table has both
    return _cell(text)


def render_commands() -> str:
    """Per command its description, positional arguments and options (the settings that are
    also variables are named, the table below has their defaults and meaning)."""
    lines: list[str] = []
    variables = {r.name for r in rows()}
    for path, parser in commands():
        lines += [f"### `{path}`", "", _cell(" ".join((parser.description or "").split())), ""]
        positionals = [a for a in parser._actions if not a.option_strings
                       and not isinstance(a, argparse._SubParsersAction)]
        settings: list[argparse.Action] = []
        others: list[argparse.Action] = []
        for action in options_of(parser):
            env = re.search(r"\[env ([A-Z0-9_]+);", action.help or "")
            (settings if env and env.group(1) in variables else others).append(action)
        if positionals or others:
            lines += ["| argument | meaning |", "|---|---|"]
            lines += [f"| `{a.metavar or a.dest}` | {_help(a)} |" for a in positionals]
            lines += [f"| {_option_cell(a)} | {_help(a)} |" for a in others]
            lines.append("")
        if settings:
            names = ", ".join(f"`{a.option_strings[0]}`" for a in settings)
            lines += [f"Settings (each also a `STREAMCTL_*` variable, in the table below): "
                      f"{names}.", ""]
    return "\n".join(lines).rstrip()


def registries() -> dict[str, CollectorRegistry]:
    """Per process, a registry with every metric it exports (the job's counters read at
    scrape time included)."""
    from controller.explain.prom import ControllerMetrics, new_registry
    from streaming_jobs.runtime.observe.prometheus import JobPrometheus

    job = JobPrometheus(CollectorRegistry())
    job.watch_sink("query", lambda: 0)
    job.watch_control_consumer("query", lambda: 0)
    return {"job": job.registry, "controller": ControllerMetrics(new_registry()).registry}


def metric_rows() -> list[tuple[str, str, str, str, str]]:
    """(process, name as documented, type, labels, help) of every Prometheus metric."""
    found = []
    for process, registry in registries().items():
        for collector in list(registry._collector_to_names):
            for family in collector.collect():
                # A metric's own labels, or a collector's families' (series read at scrape)
                labels = set(getattr(collector, "_labelnames", ()))
                labels |= set(getattr(family, "_labelnames", ()))
                labels |= {k for s in family.samples for k in s.labels if k != "le"}
                name = family.name + ("_total" if family.type == "counter" else "")
                found.append((process, name, family.type, ", ".join(sorted(labels)),
                              " ".join(family.documentation.split())))
    return sorted(found)


def render_metrics() -> str:
    lines = ["| process | metric | type | labels | meaning |", "|---|---|---|---|---|"]
    lines += [f"| {process} | `{name}` | {kind} | {labels} | {_cell(meaning)} |"
              for process, name, kind, labels, meaning in metric_rows()]
    return "\n".join(lines)


def block(text: str, marks: tuple[str, str]) -> str:
    """The text between `marks` in `text` ('' when the marks are missing)."""
    begin, end = marks
    start, stop = text.find(begin), text.find(end)
    return text[start + len(begin):stop].strip("\n") if start >= 0 and stop >= 0 else ""


BLOCKS = {"env": (DOC, ENV_BLOCK, render_env), "commands": (DOC, COMMAND_BLOCK, render_commands),
          "metrics": (METRICS_DOC, METRICS_BLOCK, render_metrics)}
"""Each generated block: its page, its markers and what renders it."""


def documented(root: Path) -> dict[str, str]:
    """Each block as the docs of the checkout at `root` have it."""
    return {name: block((root / page).read_text(encoding="utf-8"), marks)
            for name, (page, marks, _render) in BLOCKS.items()}


def rendered() -> dict[str, str]:
    return {name: render() for name, (_page, _marks, render) in BLOCKS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamctl.reference", description=(
        "Print the reference sections of docs/configuration.md and docs/metrics.md as the "
        "installed code renders them."))
    parser.add_argument("--write", action="store_true", help=(
        "rewrite those sections in the docs of the checkout this runs in (its root)"))
    if not parser.parse_args(argv).write:
        print("\n\n".join(rendered().values()))
        return 0
    pages = {page: page.read_text(encoding="utf-8") if page.is_file() else ""
             for page, _marks, _render in BLOCKS.values()}
    for page, (begin, end), _render in BLOCKS.values():  # every page checked before any write
        if begin not in pages[page] or end not in pages[page]:
            print(f"{page} has no {begin} ... {end} block: run --write from the root of a "
                  "streamctl checkout", file=sys.stderr)
            return 1
    for page, (begin, end), render in BLOCKS.values():
        head, rest = pages[page].split(begin, 1)
        pages[page] = f"{head}{begin}\n{render()}\n{end}{rest.split(end, 1)[1]}"
    for page, text in pages.items():
        page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
