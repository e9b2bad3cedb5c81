"""The documentation names only what the code has, and the code has nothing undocumented.

Forward: every environment variable, Prometheus metric and command-line option a page names
(README, docs/, the example's README) exists in the code. Reverse: the generated references
(every command with its options and every variable in docs/configuration.md, every metric in
docs/metrics.md) are what the code renders now, so each of them is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamctl import reference
from tests.deploy import deployment as d

ROOT = d.ROOT
PAGES = sorted([ROOT / "README.md", ROOT / "examples" / "clickstream" / "README.md",
                *(ROOT / "docs").glob("*.md")])
PRODUCT = ("schemas", "controller", "streaming_jobs", "streamctl", "bench")

FOREIGN_OPTIONS = {
    "--bootstrap-server": "Kafka's tools", "--from-beginning": "Kafka's tools",
    "--isolation-level": "Kafka's tools", "--property": "Kafka's tools",
    "--describe": "Kafka's tools", "--all-groups": "Kafka's tools",
    "--add-scram": "Kafka's kafka-configs", "--entity-type": "Kafka's kafka-configs",
    "--entity-name": "Kafka's kafka-configs", "--alter": "Kafka's kafka-configs",
    "--add-config": "Kafka's kafka-configs", "--offset-json-file": "Kafka's delete-records",
    "--build": "docker compose", "--rm": "docker compose", "--scale": "docker compose",
    "--cacert": "curl", "--config.file": "prometheus", "--storage.tsdb.path": "prometheus",
    "--host": "Spark's spark-class", "--webui-port": "Spark's spark-class",
    "--no-cache-dir": "pip", "--no-deps": "pip", "--help": "every command",
    "--iptables": "dockerd", "--variant": "debootstrap",
}
"""Options of other programs the pages show, and whose they are."""


def text_of(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def product_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for top in PRODUCT
                     for p in sorted((ROOT / top).rglob("*.py")))


def test_the_pages_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "configuration.md", "metrics.md", "architecture.md"} <= names


@pytest.mark.parametrize("name", sorted(reference.BLOCKS))
def test_each_generated_reference_is_what_the_code_renders(name: str) -> None:
    assert reference.documented(ROOT)[name] == reference.rendered()[name], (
        f"the {name} reference is stale: run `.venv/bin/python -m streamctl.reference --write` "
        "and review the diff")


def test_the_variables_table_lists_every_variable_the_code_and_compose_read() -> None:
    listed = {row.name for row in reference.rows()}
    read = set().union(*(d.env_read_by(kind) for kind in ("job", "controller", "topics", "load")))
    interpolated = set(re.findall(r"\$\{([A-Z0-9_]+)", d.COMPOSE_FILE.read_text()))
    missing = (read | interpolated) - listed
    assert not missing, f"add to streamctl.reference.SHARED or COMPOSE with a meaning: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_variable_a_page_names_exists(page: Path) -> None:
    known = {row.name for row in reference.rows()}
    wrong = []
    for name, wildcard in re.findall(r"(STREAMCTL_[A-Z0-9_]*[A-Z0-9])(_?\*|<)?", text_of(page)):
        if wildcard:  # a family, e.g. STREAMCTL_KAFKA_*: some variable must be in it
            if not any(k.startswith(name) for k in known):
                wrong.append(name + wildcard)
        elif name not in known:
            wrong.append(name)
    assert not wrong, f"{page.name} names variables the code does not read: {sorted(wrong)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_metric_a_page_names_exists(page: Path) -> None:
    """A Prometheus metric as documented (or one of its sample names), or a name the code
    spells (the observed metric of the decode step)."""
    known = d.documented_metric_names() | d.exported_metric_names()
    source = product_source()
    wrong = [name for name, wildcard in
             re.findall(r"(streamctl_[a-z0-9_]*[a-z0-9])(_\*)?", text_of(page))
             if not (name in known or (wildcard and any(k.startswith(name) for k in known))
                     or f'"{name}"' in source)]
    assert not wrong, f"{page.name} names metrics the code does not have: {sorted(set(wrong))}"


def our_options() -> set[str]:
    """Every option of every `streamctl` command, and of the `python -m` tools (bench.*,
    streamctl.reference)."""
    found = {flag for _path, parser in reference.commands()
             for action in reference.options_of(parser) for flag in action.option_strings}
    for path in [*(ROOT / "bench").rglob("*.py"), ROOT / "streamctl" / "reference.py"]:
        found |= set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", path.read_text()))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_a_page_names_exists(page: Path) -> None:
    ours = our_options()
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])", text_of(page)))
    wrong = named - ours - set(FOREIGN_OPTIONS)
    assert not wrong, f"{page.name} names options no command has: {sorted(wrong)}"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", text_of(page), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_a_page_of_the_project_leads_somewhere(page: Path) -> None:
    wrong = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text_of(page)):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md"
                                   and anchor not in anchors(linked)):
            wrong.append(target)
    assert not wrong, f"{page.name} links to what is not there: {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page: Path) -> None:
    """A path in a code span (`controller/core/policy.py`) is the repository's."""
    suffixes = "py|md|yml|yaml|xml|json|toml|avsc"
    named = re.findall(rf"`((?:[a-z_.]+/)+[A-Za-z0-9_.-]+\.(?:{suffixes}))`", text_of(page))
    wrong = [p for p in named if not (ROOT / p).exists() and not (page.parent / p).exists()]
    assert not wrong, f"{page.name} names files that are not in the repository: {wrong}"


def test_the_reference_lists_the_settings_of_the_bundled_jobs_not_of_a_users_jobs() -> None:
    from streaming_jobs.config import env_var
    from streaming_jobs.loading import bundled, installed, load

    listed = {row.name for row in reference.rows()}
    for name in bundled():  # every bundled job's own settings are listed
        assert {env_var(s.name) for s in load(name).settings} <= listed, name
    users = [name for name, job in installed().items() if job.distribution != "streamctl"]
    assert users, "the example's jobs are installed (./dev does): a user's jobs to leave out"
    assert not set(users) & set(bundled())
    own = {env_var(s.name) for name in users for s in load(name).settings}
    theirs = {env_var(s.name) for name in bundled() for s in load(name).settings}
    assert own - theirs, "the example's jobs have settings of their own"
    assert not (own - theirs) & listed


@pytest.mark.parametrize(("doc", "first"), [
    ("Reach it at (x), e.g. the job's name. More.", "Reach it at (x), e.g. the job's name."),
    ("Seconds to wait. 0: never.", "Seconds to wait."),
    ("Utilisation to size for. 70 % leaves headroom.", "Utilisation to size for."),
    ("Too small. μ keeps the whole window.", "Too small."),
    ("One sentence only.", "One sentence only."),
])
def test_a_settings_meaning_is_its_docstrings_first_sentence_whatever_abbreviation_it_holds(
        doc: str, first: str) -> None:
    assert reference._first_sentence(doc) == first
