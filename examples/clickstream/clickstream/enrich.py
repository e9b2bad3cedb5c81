"""click-enrich: JSON clicks from any producer → each with its page's catalog section.

Stateless. The catalog is a remote service: each lookup waits `lookup_cost_ms`, in the Kafka
source's tasks, so the job's capacity grows with its input parallelism. Clicks that are not
JSON objects with the declared fields go to `clicks.dlq` (the runtime does that).
"""

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from streaming_jobs.api import Avro, Job, JobContext, Json, Setting, Topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMAS = Path(__file__).parent / "schemas"
CLICK = ("event_id string not null, user_id string not null, page string not null, "
         "ts long not null, referrer string")
SECTIONS = {"/products": "shop", "/cart": "checkout", "/checkout": "checkout",
            "/blog": "content", "/help": "support"}


def section_of(page: str) -> str:
    """The catalog's answer for a page (deterministic, like a real catalog)."""
    for prefix, section in SECTIONS.items():
        if page.startswith(prefix):
            return section
    digest = hashlib.blake2b(page.encode(), digest_size=1).digest()[0]
    return "landing" if digest % 2 else "other"


def look_up(batches: Iterator[pa.RecordBatch], cost_ms: float) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        pages = batch.column("page").to_pylist()
        if cost_ms > 0 and pages:
            time.sleep(len(pages) * cost_ms / 1000.0)  # the catalog service's latency
        yield batch.append_column("section", pa.array([section_of(p) for p in pages]))


def build(spark: "SparkSession", clicks: "DataFrame", context: JobContext) -> "DataFrame":
    cost_ms = float(context.settings["lookup_cost_ms"])
    return clicks.mapInArrow(lambda batches: look_up(batches, cost_ms),
                             f"{CLICK.replace(' not null', '')}, section string")


job = Job(
    name="click-enrich",
    description="JSON clicks → each with its page's catalog section (a lookup per click)",
    build=build,
    input=Json(CLICK),
    output=Avro(SCHEMAS / "enriched_click.avsc", key="user_id"),
    topics=Topics(input="clicks", output="clicks-enriched"),
    settings=(Setting("lookup_cost_ms", 1.0, "the catalog lookup's latency per click, ms"),),
)
