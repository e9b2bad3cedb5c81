"""docs/ stays a reference: short hand-written prose, no clock times of past runs, a README that
fits on a page, and every page opening with the question it answers. Generated blocks
(`<!-- NAME:begin … -->` … `<!-- NAME:end -->`) are the code's and the results' own, so none of
these checks reads them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
MAX_PROSE_WORDS = 15_000
MAX_README_CHARS = 10_000

GENERATED = re.compile(r"<!-- ([\w-]+):begin.*?<!-- \1:end -->", re.DOTALL)
FENCED = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
CLOCK_TIME = re.compile(
    r"(?<![\w:.])(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?![\w:])"  # 09:30, 11:45:10
    r"|(?<=\bat )\d:[0-5]\d(?![\w:])"                                # at 9:30
    r"|(?<![\w:.])\d:[0-5]\d(?= ?(?:UTC|am|pm)\b)")                  # 9:30 UTC
"""A time of day: two-digit hours anywhere, one-digit ones after "at" or before UTC/am/pm.
Not a port (`localhost:9092`), a ratio (`1:4`) or an address (`kafka:19092`)."""
MEASUREMENT = re.compile(
    r"\b(?:measured|took|takes about|median|on average|about|roughly|around|peaked|observed)\b"
    r"[^.;:]{0,80}?\d+(?:\.\d+)?\s?(?:ms|s|seconds?|minutes?|min|records/s|rows/s|KiB|MiB|GiB"
    r"|%|×)(?!\w)", re.IGNORECASE)
"""A figure typed beside the words that report a measurement ("measured 6.4 s", "took about
a minute", "median 2.5 ms"). Defaults and settings ("6 s by default", "at 150 records/s")
are the product's, not measurements, and pass."""


def prose(text: str) -> str:
    """`text` without its generated blocks."""
    return GENERATED.sub("", text)


def prose_words(page: Path) -> int:
    return len(prose(page.read_text(encoding="utf-8")).split())


def reading(text: str) -> str:
    """`text`'s prose as read: generated blocks, fenced code and code spans left out, lines
    joined."""
    return " ".join(INLINE_CODE.sub("", FENCED.sub("", prose(text))).split())


def measurements(text: str) -> list[str]:
    return [m.group(0) for m in MEASUREMENT.finditer(reading(text))]


def clock_times(text: str) -> list[str]:
    """The clock times in `text`'s prose: generated blocks, fenced code and code spans left out."""
    return CLOCK_TIME.findall(INLINE_CODE.sub("", FENCED.sub("", prose(text))))


def test_the_docs_pages_are_found() -> None:
    assert {"architecture.md", "configuration.md", "writing-jobs.md"} <= {p.name for p in DOCS}


def test_hand_written_prose_in_docs_totals_at_most_15000_words() -> None:
    words = {page.name: prose_words(page) for page in DOCS}
    total = sum(words.values())
    biggest = sorted(words.items(), key=lambda item: -item[1])[:5]
    assert total <= MAX_PROSE_WORDS, (
        f"docs/ holds {total} words of hand-written prose, over {MAX_PROSE_WORDS}; the biggest "
        f"pages: {', '.join(f'{name} {n}' for name, n in biggest)}")


def test_the_clock_time_pattern_flags_times_of_day_and_not_ports_ratios_or_code() -> None:
    assert clock_times("measured at 11:45–11:53 (09:30 UTC, 9:05 UTC, at 7:15, 16:45:02)") == [
        "11:45", "11:53", "09:30", "9:05", "7:15", "16:45:02"]
    assert clock_times("localhost:9092, kafka:19092, a 1:4 ratio, 2026-11-26T09:41:03Z, "
                       "`at 11:45`\n```\n12:00\n```\n<!-- x:begin -->10:15<!-- x:end -->") == []


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_clock_time_appears_outside_generated_blocks_and_code(page: Path) -> None:
    found = clock_times(page.read_text(encoding="utf-8"))
    assert not found, (f"{page.name} gives times of day {found}: say what holds, not when a run "
                       "showed it; figures belong in the generated tables")


def test_the_measurement_pattern_flags_reported_figures_and_not_defaults() -> None:
    assert measurements("measured 6.4 s from the kill; the median is 2.5 ms; it took about "
                        "40 s") == ["measured 6.4 s", "median is 2.5 ms", "took about 40 s"]
    assert measurements("6 s by default; a load of 150 records/s; the sensor-averages job of "
                        "1 GiB; `measured 3 s`") == []


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_is_typed_outside_generated_blocks(page: Path) -> None:
    found = measurements(page.read_text(encoding="utf-8"))
    assert not found, (f"{page.name} types measured figures {found}: render them from a result "
                       "under bench/results/ (a generated block) and refer to it")


def test_readme_is_at_most_10000_characters() -> None:
    size = len(README.read_text(encoding="utf-8"))
    assert size <= MAX_README_CHARS, f"README.md has {size} characters, over {MAX_README_CHARS}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_each_docs_page_opens_with_a_title_and_a_paragraph(page: Path) -> None:
    """The paragraph after the title says what question the page answers."""
    blocks = [b.strip() for b in page.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    assert len(blocks) >= 2 and re.fullmatch(r"# \S[^\n]*", blocks[0]), \
        f"{page.name} does not start with a `# Title` line on its own"
    assert not re.match(r"#|```|\||[-*] |<!--|\d+\. ", blocks[1]), \
        f"{page.name}: the title is followed by {blocks[1][:40]!r}, not an opening paragraph"
