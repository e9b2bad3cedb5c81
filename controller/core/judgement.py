"""Judgement beyond sizing: skew, lost instances, and scale-ups that did not help.

Owns three pure checks the policy and the loop consult:
- `skew`: the backlog (or, under load without one, the arrivals) concentrated on one source
  partition while others exist — reported in reasons; Spark's minPartitions splits a hot
  partition's offset range, so skew in Kafka partitions does not by itself stop scaling. A
  query scaled by its state partitions is slowed by key skew instead (a hot key's state
  partition sets the pace), which no metric of the job shows: its reasons say so
  (`skew_note`) rather than inventing a figure.
- `liveness`: no metrics for longer than a multiple of the query's batch interval, with a
  floor (Spark reports an idle query only every ~10 s) → `results.Lost`.
- `judge_effect`: after an applied scale-up, the capacity measured under the new
  configuration against the predicted one → a remembered `state.Ineffective`, so the policy
  says "cannot help" instead of repeating it; unless μ fell only as plausible contention
  makes it fall (`contended`), which the model learns and sizes with instead.
Neighbours: `policy` (skew wording, the ineffective ceiling), `loop` (calls `liveness` and
`judge_effect` with the query's `ControlState`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.core.model import QueryModel
from controller.core.results import Lost
from controller.core.scaling import learned
from controller.core.sizing import capacity
from controller.core.state import ControlState, EffectCheck, Ineffective
from controller.core.wording import num, pct
from controller.settings import PolicySettings
from schemas import TaskMetrics
from schemas.knobs import INPUT_PARALLELISM


@dataclass(frozen=True, slots=True)
class Skew:
    partition: str
    share: float
    of: str
    """'backlog' or 'arrivals'."""
    partitions: int

    def describe(self) -> str:
        return (f"skew: partition {self.partition} holds {pct(self.share)} of the {self.of} "
                f"across {self.partitions} partitions")


def skew(model: QueryModel, settings: PolicySettings) -> Skew | None:
    """The hottest source partition, if it holds more than `skew_partition_share` of what
    matters (only where source tasks do the work: a shuffle spreads keys, not partitions)."""
    if model.knob != INPUT_PARALLELISM:
        return None
    if model.backlog_records > settings.backlog_floor_records:
        shares, of = model.partition_lag_shares, "backlog"
    elif model.utilisation >= settings.low_water_utilisation:
        # Under load without a backlog, uneven arrivals are the early sign of the same thing.
        shares, of = model.partition_arrival_shares, "arrivals"
    else:
        return None
    if shares.partitions < 2 or shares.largest_share <= settings.skew_partition_share:
        return None
    return Skew(shares.largest, shares.largest_share, of, shares.partitions)


KEY_SKEW_UNMEASURED = ("key skew across the state partitions is not measured (the job "
                       "reports no per-partition figures)")


def skew_note(model: QueryModel, settings: PolicySettings) -> str:
    """'; skew: …' for a reason sentence, or what is not known about skew."""
    if model.knob != INPUT_PARALLELISM:
        return f"; {KEY_SKEW_UNMEASURED}"
    found = skew(model, settings)
    return f"; {found.describe()}" if found else ""


def lost_timeout_s(trigger_s: float, last_busy_s: float, settings: PolicySettings) -> float:
    """How long a query may stay silent: a multiple of its batch interval (a backlogged batch
    runs far past the trigger), never below the floor."""
    interval = max(trigger_s, last_busy_s)
    return max(settings.lost_after_intervals * interval, settings.lost_after_min_s)


def liveness(last_seen_ms: int | None, trigger_s: float, last_busy_s: float,
             state: ControlState, now_ms: int, settings: PolicySettings,
             watching_since_ms: int = 0, *, beat: TaskMetrics | None = None,
             beat_heard_ms: int = 0, last_batch: TaskMetrics | None = None) -> Lost | None:
    """`Lost` when the query has been silent too long. A query never seen is not lost, and
    neither is one whose reconfiguration or failover is in flight (a restart is silent; the
    ack timeout covers it); after an actuation the silence counts from when it ended, and it
    only counts while the controller watched (`watching_since_ms`: a controller that just
    started may still be reading the metrics the query sent while it was away).

    An instance that sends liveness beats (`beat`: its newest, read at `beat_heard_ms` on the
    controller's clock) is silent when its beats stop, after `lost_after_beats` of its
    intervals, however long its batches run. A batch that has run longer than the batch
    timeout (`lost_timeout_s`) means a hung query, once the instance is past its start
    (`last_batch`, the newest sample, is a batch of it before the running one): a run's first
    batch is a cold one, which may take long on a busy machine, and was never judged before it
    ended. Without beats, silence is judged against the batch timeout alone."""
    if last_seen_ms is None or state.in_flight is not None:
        return None
    since_ms = max(last_seen_ms, state.settled_at_ms, watching_since_ms)
    silent_s = (now_ms - since_ms) / 1000
    timeout_s = lost_timeout_s(trigger_s, last_busy_s, settings)
    batch_timeout = (f"{settings.lost_after_intervals} × its {num(max(trigger_s, last_busy_s))}"
                     f" s batch interval, at least {settings.lost_after_min_s:.0f} s")
    if beat is not None and beat.beat_interval_ms > 0:
        beat_silent_s = (now_ms - max(beat_heard_ms or beat.batch_end_ms, state.settled_at_ms,
                                      watching_since_ms)) / 1000
        return _beats_stopped(beat, beat_silent_s, settings) or _hung(
            beat, last_batch, max(beat.running_since_ms, state.settled_at_ms), now_ms,
            timeout_s, batch_timeout)
    if silent_s <= timeout_s:
        return None
    return Lost(f"no metrics for {silent_s:.0f} s (timeout {timeout_s:.0f} s: {batch_timeout});"
                " the instance is gone or hung, more parallelism cannot help",
                silent_s, timeout_s, {"silent_s": silent_s, "timeout_s": timeout_s})


def _beats_stopped(beat: TaskMetrics, silent_s: float, settings: PolicySettings) -> Lost | None:
    interval_s = beat.beat_interval_ms / 1000
    timeout_s = settings.lost_after_beats * interval_s
    if silent_s <= timeout_s:
        return None
    return Lost(f"no liveness beat for {num(silent_s)} s (timeout {num(timeout_s)} s: "
                f"{num(settings.lost_after_beats)} × its {num(interval_s)} s beat interval); "
                "the instance is gone or frozen, more parallelism cannot help",
                silent_s, timeout_s, {"silent_s": silent_s, "timeout_s": timeout_s})


def _hung(beat: TaskMetrics, last_batch: TaskMetrics | None, running_since_ms: int,
          now_ms: int, timeout_s: float, batch_timeout: str) -> Lost | None:
    """The instance beats, but its query has run one batch, not its first, past the batch
    timeout."""
    if beat.running_batch_id < 0 or beat.running_since_ms <= 0:
        return None
    if (last_batch is None or last_batch.instance_id != beat.instance_id
            or not 0 <= last_batch.batch_id < beat.running_batch_id):
        return None
    running_s = (now_ms - running_since_ms) / 1000
    if running_s <= timeout_s:
        return None
    return Lost(f"batch {beat.running_batch_id} has run for {running_s:.0f} s (timeout "
                f"{timeout_s:.0f} s: {batch_timeout}) while the instance still beats; the "
                "query is hung, more parallelism cannot help",
                running_s, timeout_s, {"running_s": running_s, "timeout_s": timeout_s,
                                       "silent_s": 0.0})


def judge_effect(state: ControlState, model: QueryModel, backlogged: bool, now_ms: int,
                 settings: PolicySettings) -> ControlState:
    """Settle a pending effect check with the first model of the new configuration.

    A query that keeps up after the change was helped enough, whatever the figures say (no
    false "ineffective" from a noisy μ). One still backlogged is judged on capacity: the
    measured gain must reach `ineffective_gain_ratio` of the predicted gain.
    """
    check = state.effect_check
    if state.ineffective is not None and now_ms >= state.ineffective.until_ms:
        state = replace(state, ineffective=None)
    if check is None or model.parallelism != check.target:
        return state
    state = replace(state, effect_check=None)
    if not backlogged:
        return state
    def before_at(parallelism: int, batch_cap: int = 0) -> float:
        # The old μ and c, with the cap the old size had, else the one the model gives the
        # size: today's, or the size's own when the cap follows the units (the resizing
        # changed it too).
        units = model.units_at(parallelism)
        return capacity(check.rate_per_unit, units, check.batch_overhead_s,
                        batch_cap or model.batch_cap_at(units))

    before = before_at(check.current, check.batch_cap)
    measured = model.capacity / before - 1
    predicted = before_at(check.target) / before - 1
    if predicted <= 0 or measured >= settings.ineffective_gain_ratio * predicted:
        return state
    if contended(check, model):
        return state
    return replace(state, ineffective=Ineffective(
        check.current, check.target, measured, predicted,
        now_ms + int(settings.ineffective_memory_s * 1000)))


PLAUSIBLE_CONTENTION = 0.25
"""The most contention (`scaling`) a shortfall is put down to: at 0.25, 16 units bring what 3.4
would at the rate of one. Beyond, the added units brought next to nothing: skew, or a limit
outside the query."""


def contended(check: EffectCheck, model: QueryModel) -> bool:
    """Whether μ at the new size fell as plausible contention would make it fall: each added
    unit brought less than the model expected, but brought something. The model learns that
    curve from the two sizes (`Remembered.sizes`) and sizes the next step with it, so the
    scaling is not remembered as one that cannot help. A μ that did not fall (the shortfall is
    skew, or an overhead that grew) or one that is a lower bound is no evidence of it."""
    if model.overhead_source == "assumed_zero":
        return False
    sizes = {model.units_at(check.current): check.rate_per_unit, model.units: model.rate_per_unit}
    return 0 < learned(sizes, 0.0).contention <= PLAUSIBLE_CONTENTION


def ineffective_sentence(memory: Ineffective, model: QueryModel, now_ms: int,
                         settings: PolicySettings) -> str:
    found = skew(model, settings)
    cause = (f"likely {found.describe()}" if found
             else "likely key skew (not measured) or an external limit"
             if model.knob != INPUT_PARALLELISM else "likely skew or an external limit")
    return (f"cannot help: scaling {memory.current}→{memory.target} raised capacity only "
            f"{pct(memory.measured_gain)} (predicted {pct(memory.predicted_gain)}); {cause}; "
            f"not scaling past {max(memory.current, model.parallelism)} for another "
            f"{(memory.until_ms - now_ms) / 60_000:.0f} min")
