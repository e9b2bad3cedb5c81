"""The checkpoints of a query whose instances run with a hot standby (one per instance), and
the output continued across them, into a hot instance's own or a warm instance's shared one.

With `standby = hot` every instance of a query keeps its own checkpoint beside the query's
(`<checkpoint>.instance-<instance id>`): the standby runs the query on its own copy, so no two
processes ever write one checkpoint, and a former active that was only frozen can write
nothing into its successor's. What the output holds is said by the sink's commit marker
(checkpoint id, batch id), and this module answers the questions around it, on files only:

- which checkpoint of the query a marker's id belongs to (`checkpoint_with_id`), and where
  each topic partition stands after a batch of it (`ends`, `committed_ends`);
- whether a standby's planned batch reads nothing the output does not hold yet and closes
  nothing the output has not closed (`behind`);
- a standby's checkpoint started as a copy of the active's at a committed batch, under an id of
  its own (`copy_committed`);
- a checkpoint made to continue exactly where the output ends (`continue_from`): its next
  batch is rewritten to end at the output's offsets, and the sink runs that batch without
  writing it (its marker says it is in the output already), so the records between the
  standby's state and the output are folded into the state once and written never again.

Only local checkpoints are read and written, as everywhere in the runtime. Neighbours:
`roles.hot` (the standby's query), `query.lifecycle` (continues from the output before a
start), `input_source` (the offset-log entry format).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from streaming_jobs.config import INPUT_RECORD_SUFFIX, INSTANCE_INFIX, instance_dir
from streaming_jobs.errors import JobError
from streaming_jobs.runtime.checkpoint.input_source import entry_sources
from streaming_jobs.runtime.checkpoint.input_switch import Offsets
from streaming_jobs.runtime.checkpoint.state_repartition import local_path, read_batches

log = logging.getLogger(__name__)


PREVIOUS_SUFFIX = ".previous"
"""`<instance checkpoint>.previous`: the one a copy replaced, still found by its id."""

Ends = dict[str, Offsets]
"""Topic → partition → the offset a batch reads up to (exclusive)."""


class NotContinuable(JobError):
    """The checkpoint cannot continue from the output's offsets (another topic, ahead of them,
    or other state partitions than the writer's); a copy of the writer's must replace it."""


class SourceMoved(NotContinuable):
    """The checkpoint being copied was set aside meanwhile (its instance stepped down and took
    a copy of its own): it is found again by its id (`<it>.previous`) and copied from there."""


def query_dirs(query_dir: str) -> list[str]:
    """The query's checkpoint (written before hot standbys, or by warm ones) and every
    instance's, those that exist."""
    base = local_path(query_dir.rstrip("/"))
    return ([str(base)] if (base / "metadata").is_file() else []) + beside(query_dir)


def beside(query_dir: str) -> list[str]:
    """The instances' checkpoints beside the query's (set-aside ones included), those that
    exist."""
    base = local_path(query_dir.rstrip("/"))
    return [str(p) for p in sorted(base.parent.glob(f"{base.name}{INSTANCE_INFIX}*"))
            if (p / "metadata").is_file()]


def active_checkpoint(query_dir: str, own: str, named: str) -> str | None:
    """The checkpoint the active instance writes: the other one with the newest commit, and
    once a failover named the active, of that instance's own and the shared one (a warm
    active's, beside hot standbys) only."""
    mine, dirs = str(local_path(own)), query_dirs(query_dir)
    others = [d for d in dirs if d != mine and not d.endswith(PREVIOUS_SUFFIX)
              and committed_ends(d) is not None]
    if named:
        its = (str(local_path(instance_dir(query_dir, named))),
               str(local_path(query_dir.rstrip("/"))))
        others = [d for d in others if d in its]
    return max(others, key=lambda d: (local_path(d) / "commits").stat().st_mtime, default=None)


def checkpoint_id(checkpoint_dir: str) -> str | None:
    """The id Spark keeps in the checkpoint (its `metadata` file): the sink's marker names
    it; None before the query first started there."""
    try:
        text = (local_path(checkpoint_dir) / "metadata").read_text()
    except FileNotFoundError:
        return None
    return str(json.loads(text.splitlines()[0])["id"])


def checkpoint_with_id(query_dir: str, wanted_id: str) -> str | None:
    """The checkpoint of the query whose id is `wanted_id` (None: none is)."""
    return next((d for d in query_dirs(query_dir) if checkpoint_id(d) == wanted_id), None)


def ends(checkpoint_dir: str, batch_id: int) -> Ends:
    """Where batch `batch_id` of the checkpoint reads up to, per topic and partition."""
    found: Ends = {}
    for topics in entry_sources(checkpoint_dir, batch_id).values():
        found.update(topics)
    return found


def committed_ends(checkpoint_dir: str) -> tuple[int, Ends] | None:
    """The newest committed batch and where it ended (None before the first)."""
    committed = read_batches(checkpoint_dir).last_committed
    return None if committed is None else (committed, ends(checkpoint_dir, committed))


def entry_metadata(checkpoint_dir: str, batch_id: int) -> str:
    """The metadata line of batch `batch_id`'s offset-log entry (its event-time watermark,
    its time, the SQL conf it runs with)."""
    return (local_path(checkpoint_dir) / "offsets" / str(batch_id)).read_text().splitlines()[1]


def watermark_ms(checkpoint_dir: str, batch_id: int) -> int:
    """The event-time watermark batch `batch_id` runs with: the windows it closes, the
    late records it drops and the state timeouts it fires are decided by it."""
    return int(json.loads(entry_metadata(checkpoint_dir, batch_id))["batchWatermarkMs"])


def behind(checkpoint_dir: str, batch_id: int, active: str) -> bool:
    """Whether batch `batch_id` of a standby's checkpoint may run: the active has committed
    every record it reads, and a batch run with at least its watermark (so the standby never
    closes a window or times out a key before the active's output has)."""
    found = committed_ends(active)
    return (found is not None and covered(ends(checkpoint_dir, batch_id), found[1])
            and watermark_ms(checkpoint_dir, batch_id) <= watermark_ms(active, found[0]))


def covered(wanted: Ends, reached: Ends) -> bool:
    """Whether every partition of `wanted` is at or behind `reached` (a partition `reached`
    does not have is not covered: the active has not read it yet)."""
    return all(offset <= reached.get(topic, {}).get(partition, -1)
               for topic, offsets in wanted.items() for partition, offset in offsets.items())


def copy_committed(source: str, target: str) -> int:
    """Make `target` a copy of `source` at its newest committed batch, under an id of its own
    (so a marker never names both); returns that batch. Files the source removes while it
    is copied (its own maintenance) are skipped: the committed batch's are not removed.

    Raises NotContinuable when the source has no committed batch yet, or `SourceMoved` when
    it was set aside (replaced by a copy of its own) while it was copied."""
    found = committed_ends(source)
    if found is None:
        raise NotContinuable(f"{source} has no committed batch to copy yet")
    batch, source_id = found[0], checkpoint_id(source)
    src, dst = local_path(source), local_path(target)
    staging = staging_of(dst)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(src, staging, ignore_dangling_symlinks=True,
                    copy_function=_copy_if_present)
    if checkpoint_id(source) != source_id:  # files went with it: the copy may lack some
        shutil.rmtree(staging, ignore_errors=True)
        raise SourceMoved(f"{source} was replaced while it was copied")
    for log_name in ("offsets", "commits"):
        _drop_versions_after(staging / log_name, batch)
    # State version v is written by batch v - 1: later ones were the source's next batches.
    _drop_versions_after(staging / "state", batch + 1)
    (staging / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    (staging / ".metadata.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old id
    record = Path(str(src) + INPUT_RECORD_SUFFIX)
    input_record = record.read_bytes() if record.is_file() else None  # before `src` may move
    _set_aside(dst)
    if input_record is not None:
        Path(str(dst) + INPUT_RECORD_SUFFIX).write_bytes(input_record)
    staging.rename(dst)
    log.info("copied %s at its committed batch %d to %s", source, batch, target)
    return batch


def staging_of(checkpoint: Path) -> Path:
    """Where a copy into `checkpoint` is made before it replaces it (outside `query_dirs`'
    pattern: a copy half made is no checkpoint of the query)."""
    return checkpoint.with_name(f".{checkpoint.name}.copying")


def _set_aside(checkpoint: Path) -> None:
    """Keep the checkpoint a copy replaces, and its input record, as `<it>.previous` (the one
    before is deleted): it may be the one the output's last batch came from (a standby that
    was active a moment ago), which a promotion elsewhere is about to continue."""
    if not checkpoint.exists():  # nothing to keep: the one set aside before stays
        return
    previous = checkpoint.with_name(checkpoint.name + PREVIOUS_SUFFIX)
    shutil.rmtree(previous, ignore_errors=True)
    Path(str(previous) + INPUT_RECORD_SUFFIX).unlink(missing_ok=True)
    checkpoint.rename(previous)
    record = Path(str(checkpoint) + INPUT_RECORD_SUFFIX)
    if record.exists():
        record.rename(str(previous) + INPUT_RECORD_SUFFIX)


def continue_from(checkpoint_dir: str, output: Ends, stamp: str) -> tuple[int, int]:
    """Rewrite the checkpoint's next batch to read exactly up to `output`, with `stamp` (the
    metadata of the output's last batch: its watermark, so the batch closes the windows and
    times out the keys the output's writer had, and no others); returns the batch whose
    marker says the output holds it (the rewritten one, or the newest committed when nothing
    is missing) and the records that batch folds into the state.

    Raises NotContinuable when the checkpoint has no committed batch, reads another topic,
    or has committed past `output` somewhere."""
    found = committed_ends(checkpoint_dir)
    if found is None:
        raise NotContinuable(f"{checkpoint_dir} has no committed batch")
    batch, start = found
    if set(start) != set(output) or not covered(start, output):
        raise NotContinuable(f"{checkpoint_dir} stands at {start} after batch {batch}, not "
                             f"behind the output's {output}")
    offsets = local_path(checkpoint_dir) / "offsets"
    _drop_versions_after(offsets, batch)  # planned, never committed
    _drop_versions_after(local_path(checkpoint_dir) / "state", batch + 1)
    missing = sum(o - start[t].get(p, 0) for t, parts in output.items() for p, o in parts.items())
    if missing == 0 and watermark_ms(checkpoint_dir, batch) == json.loads(stamp)[
            "batchWatermarkMs"]:
        return batch, 0
    _write_entry(offsets, batch, output, stamp)
    return batch + 1, missing


def continue_output(own: str, query_dir: str, written: tuple[str, int] | None,
                    mark: Callable[[str, int], None], warm: bool = False) -> str | None:
    """Before an active run on its own checkpoint: make it go on where the output ends, when
    another checkpoint of the query wrote the output's last batch (a promotion, or a restart
    that found the output moved on). Its trail is folded in (`continue_from`), or, when it
    cannot be, the checkpoint is replaced by a copy of the writer's; `mark` then commits the
    marker saying the output holds the checkpoint's last batch. Returns a note for the ack
    (None: nothing to do). `written`: the checkpoint id and batch of the sink's last marker.
    A writer no longer beside `query_dir` is refused. `warm`: `own` is the shared checkpoint
    of a warm instance, which keeps no state current: it always takes a copy of the writer's
    (its own may be far behind, a fold would read again what the writer read, and retention
    may have deleted it since), and a writer no longer beside is a checkpoint the query left
    behind (nothing to do, as before hot standbys). Idempotent: a crash anywhere in it is
    repaired by the next start."""
    if written is None or checkpoint_id(own) == written[0]:
        return None
    writer_id, last_batch = written
    writer = checkpoint_with_id(query_dir, writer_id)
    if writer is None and warm:
        return None
    if writer is None:  # continuing anyway would write its trail again, or lose it
        raise NotContinuable(
            f"the output's last batch ({last_batch}) was written by checkpoint {writer_id}, "
            f"which is not beside {query_dir} any more: {own} cannot continue it exactly. "
            "Restore that checkpoint, or start the query under a new query id")
    output, stamp = ends(writer, last_batch), entry_metadata(writer, last_batch)
    if warm:
        batch, how = _copied(query_dir, writer_id, own, output, stamp)
    else:
        try:
            _same_partitions(own, writer)
            batch, folded = continue_from(own, output, stamp)
            how = f"state kept: {folded} records after it folded in without output"
        except NotContinuable as exc:
            log.info("%s; copying %s", exc, writer)
            batch, how = _copied(query_dir, writer_id, own, output, stamp)
    own_id = checkpoint_id(own)
    assert own_id is not None
    mark(own_id, batch)
    return f"continued the output of batch {last_batch} of {writer}: {how}"


def _copied(query_dir: str, writer_id: str, own: str, output: Ends,
            stamp: str) -> tuple[int, str]:
    """`own` replaced by a copy of the checkpoint `writer_id` that continues where the output
    ends: the batch the marker names, and how (for the note). A writer set aside while it is
    copied (its instance stepping down takes a copy over its own) is copied again from where
    its id is now."""
    tries = 3
    while True:
        writer = checkpoint_with_id(query_dir, writer_id)
        if writer is None:
            raise NotContinuable(f"checkpoint {writer_id} is not beside {query_dir} any more")
        try:
            copied = copy_committed(writer, own)
        except SourceMoved as exc:
            tries -= 1
            if not tries:
                raise
            log.info("%s; copying it from where it is now", exc)
            continue
        batch, folded = continue_from(own, output, stamp)
        return batch, (f"state copied from {writer} at its batch {copied}, {folded} records "
                       "after it folded in without output")


def _write_entry(offsets: Path, after: int, output: Ends, stamp: str) -> None:
    """Batch `after + 1`'s entry: the committed one's version, conf and sources, with
    `output`'s offsets and `stamp`'s watermark and time. Written whole under a temporary
    name, then renamed."""
    version, own_stamp, *sources = (offsets / str(after)).read_text().splitlines()
    metadata, writers = json.loads(own_stamp), json.loads(stamp)
    for key in ("batchWatermarkMs", "batchTimestampMs"):
        metadata[key] = writers[key]
    lines = [version, json.dumps(metadata)]
    for line in sources:
        name, raw = line.split(":", 1) if version == "v2" else (None, line)
        if raw.strip() in ("", "-"):
            lines.append(line)
            continue
        topics = {t: {str(p): o for p, o in sorted(output[t].items())} for t in json.loads(raw)}
        text = json.dumps(topics, separators=(",", ":"))
        lines.append(f"{name}:{text}" if name is not None else text)
    temporary = offsets / f".{after + 1}.streamctl.tmp"
    temporary.write_text("\n".join(lines))
    temporary.rename(offsets / str(after + 1))


def _same_partitions(own: str, writer: str) -> None:
    """Raise NotContinuable when `own`'s last committed batch keeps its state in other
    partitions than the writer's: a fold would leave the query at its old partitioning, a copy
    takes the writer's. The writer's committed count, not its last output batch's: a
    repartition (an input-less batch) may have committed after it. A writer that cannot be
    read here (set aside while this runs) is left to the copy, which finds it by its id."""
    try:
        own_count, writers = _committed_partitions(own), _committed_partitions(writer)
    except (OSError, ValueError) as exc:
        raise NotContinuable(f"cannot compare the state partitions of {own} and {writer}: "
                             f"{exc}") from exc
    if own_count is not None and own_count != writers:  # None: nothing to fold into
        raise NotContinuable(f"{own} keeps its state in {own_count} partitions, the output's "
                             f"writer {writer} in {writers}")


def _committed_partitions(checkpoint_dir: str) -> str | None:
    """The state partitions the checkpoint's last committed batch ran with (its SQL conf's
    shuffle partitions; None before a commit, or when the entry records none)."""
    committed = read_batches(checkpoint_dir).last_committed
    if committed is None:
        return None
    conf = json.loads(entry_metadata(checkpoint_dir, committed)).get("conf", {})
    return conf.get("spark.sql.shuffle.partitions")


def _drop_versions_after(directory: Path, last: int) -> None:
    """Delete the files under `directory` numbered past `last` (`7`, `.7.crc`, `8.delta`,
    `9.zip`, `9_<uuid>.changelog`, …); SST files, shared between versions, are kept."""
    if not directory.is_dir():
        return
    for path in directory.rglob("*"):
        number = path.name.lstrip(".").split(".")[0].split("_")[0]
        if path.is_file() and path.suffix != ".sst" and number.isdigit() and int(number) > last:
            path.unlink(missing_ok=True)


def _copy_if_present(src: str, dst: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(src, dst)
