"""The controller's one configuration: frozen, typed, documented, validated on construction.

Owns the names, units and defaults of every safety limit of the control loop. Nothing here
reads the environment: `controller.cli` builds a `ControllerSettings` from CLI args and env
vars once at start-up and hands it down; the pure core (`window`, `model`, `policy`) takes
the nested group it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from controller.errors import UserError
from schemas import topics
from streamctl.security.kafka import DEFAULT_BOOTSTRAP, KafkaSecurity
from streamctl.security.metrics_http import EndpointSecurity

DEFAULT_METRICS_PORT = 9300


class SettingsError(UserError):
    """A setting is out of range; the message names the setting and the allowed range."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SettingsError(message)


def _positive(name: str, value: float) -> None:
    _check(math.isfinite(value) and value > 0, f"{name} must be a positive number, got {value}")


def _ratio(name: str, value: float) -> None:
    _check(0 < value <= 1, f"{name} must be a ratio in (0, 1], got {value}")


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """How much history the rate model looks at and when it trusts it."""

    window_s: float = 60.0
    """Sliding window of samples per query, in seconds of batch time. Long enough to hold ~6
    idle heartbeats (Spark reports an idle query only every ~10 s), short enough that a load
    step dominates the estimates within a minute."""

    arrival_window_s: float = 10.0
    """λ and the backlog trend use only the newest samples spanning this long (at least
    `min_samples` of them), so a load step shows in full within 10 s instead of being averaged
    into the whole window and sizing the query too small. Arrivals in bursts (an upstream
    job's batches) are averaged over the whole window: 10 s of them hold a burst or two. μ,
    throughput and busy ratio keep the whole window: they describe the query, not the load,
    and more samples steady them."""

    level_shift_ratio: float = 1.5
    """An arrival interval whose rate is beyond this factor of the current level (or below
    level / factor) is a candidate level shift (`controller.core.arrival`). A stationary load that
    varies by ±20 % stays inside it (1.2 / 0.8 = 1.5), so noise is averaged, not chased."""

    level_agreement: float = 0.2
    """Two arrival intervals measure the same level when their rates differ by at most this
    fraction of the larger; a shift whose newest interval has fallen back by more than this
    from the peak of the departure is a burst that is ending, not a new level. The producers
    of the recorded traces vary by ~1 % between batches; 20 % is the same noise band as
    `level_shift_ratio`."""

    level_confirm_intervals: int = 2
    """Consecutive departing intervals that confirm a level shift. Two: one interval is
    indistinguishable from a burst; a second that agrees makes it a step, and sizing for it
    then takes one round. Each extra interval costs one batch (10-20 s when backlogged)."""

    level_confirm_s: float = 3.5
    """…and must have shown the new level this long, counted from the end of the interval in
    which the change happened (`controller.core.arrival.new_level_lasted_ms`). A burst
    shorter than this is drained at the current size (the catch-up target absorbs it) rather
    than sized for; a step is taken within about `level_confirm_s` + one probe interval
    (`ControllerSettings.probe_interval_s`) after it. 3.5 s: a 3 s burst (the spike of
    bench.reaction) falls back before it could be confirmed, whatever the probes' phase, and a
    step still gets its tuple within 5 s."""

    ramp_window_s: float = 40.0
    """The span a rising ramp is fitted over (`controller.core.ramp.ramp`): long enough
    that a step shows as one, not as a slope, short enough that a ramp is seen while it still
    climbs (a 90 s ramp of the bench is one from its first 20-30 s). At most `window_s`."""

    max_samples: int = 300
    """Hard cap on samples kept per query, so a query triggering every 100 ms cannot grow the
    window without bound (300 covers 60 s at a 200 ms trigger)."""

    min_samples: int = 4
    """Samples needed before the model reports anything: rates need two, a least-squares
    trend needs three to mean something, one more absorbs a single odd batch."""

    max_queries: int = 300
    """Queries tracked at once; samples of further queries are dropped (with a warning):
    below what one instance keeps within half its 0.5 s cycle at 8 partitions a query
    (`bench.fleet`). Bounds CPU, memory and the cardinality of the per-query Prometheus
    labels."""

    overhead_fit_min_spread: float = 1.5
    """The per-batch overhead is fitted (busy_s ≈ overhead_s + rows / (μ × units)) only when the
    largest batch in the window holds at least this many times the records per unit of the
    smallest. With batches of one size, overhead and per-record cost cannot be told apart.
    1.5× is what a steady load with ±20 % noise gives over a minute; whether that is enough
    to trust is the slope-error check's call, not this one's."""

    scaling_prior_contention: float = 0.0
    """How much less each added unit is taken to bring before a query has run at two sizes
    (σ of `controller/core/scaling.py`: μ(p) = μ(1) / (1 + σ (p − 1))); from then on its own
    sizes set it. Conservative: at 0.02, 16 units bring what about 12 would if each brought as
    much as the first (0: they would bring 16), so a step asks for more units rather than
    taking a second step."""

    scaling_history_s: float = 86_400.0
    """How far back a new leader reads the decision log for μ at each size a query ran (the
    figures of its decisions), so a controller started afresh knows what more units did
    rather than start again from the prior. The log holds actions and advice only: a day of
    it is small."""

    batch_cap_follows_units: bool = True
    """A query's batch cap (max_offsets_per_trigger) is resized with its units, in the same
    tuple, keeping the records per unit of a batch the job reports: with a fixed cap, more
    units make each batch shorter, the per-batch overhead a larger share of it, and the cap,
    not the units, bounds the catch-up. Only for a job that reports its cap and the limit a
    tuple may raise it to."""

    overhead_fit_max_slope_error: float = 0.25
    """The fit is used only when the standard error of its slope (1/μ) is at most this fraction
    of the slope. Real batch times jitter by ±0.5 s on a laptop; past 25 % the fitted μ could be
    off by half and would size the query wrong, so the model falls back instead."""

    def __post_init__(self) -> None:
        _positive("model.window_s", self.window_s)
        _check(0 < self.arrival_window_s <= self.window_s,
               f"model.arrival_window_s must be in (0, model.window_s={self.window_s}], got "
               f"{self.arrival_window_s}")
        _positive("model.ramp_window_s", self.ramp_window_s)
        _check(self.min_samples >= 3,
               f"model.min_samples must be at least 3 (a trend needs 3 points), got "
               f"{self.min_samples}")
        _check(self.max_samples >= self.min_samples,
               f"model.max_samples ({self.max_samples}) must be >= model.min_samples "
               f"({self.min_samples})")
        _check(math.isfinite(self.level_shift_ratio) and self.level_shift_ratio > 1,
               f"model.level_shift_ratio must be > 1, got {self.level_shift_ratio}")
        _check(0 <= self.level_agreement < 1,
               f"model.level_agreement must be in [0, 1), got {self.level_agreement}")
        _check(self.level_confirm_intervals >= 1,
               f"model.level_confirm_intervals must be >= 1, got "
               f"{self.level_confirm_intervals}")
        _check(math.isfinite(self.level_confirm_s) and self.level_confirm_s >= 0,
               f"model.level_confirm_s must be a number >= 0, got {self.level_confirm_s}")
        _check(self.max_queries >= 1, f"model.max_queries must be >= 1, got {self.max_queries}")
        _check(0 <= self.scaling_prior_contention <= 1,
               "model.scaling_prior_contention must be in [0, 1], got "
               f"{self.scaling_prior_contention}")
        _check(0 <= self.scaling_history_s <= 30 * 86_400,
               "model.scaling_history_s must be in [0, 2592000] (30 days), got "
               f"{self.scaling_history_s}")
        _check(math.isfinite(self.overhead_fit_min_spread) and self.overhead_fit_min_spread > 1,
               f"model.overhead_fit_min_spread must be > 1, got {self.overhead_fit_min_spread}")
        _positive("model.overhead_fit_max_slope_error", self.overhead_fit_max_slope_error)


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """When a query counts as backlogged or idle, and how far the policy may move it."""

    target_utilisation: float = 0.7
    """Utilisation (demand / capacity, capacity counting the per-batch overhead) to size for.
    70 % leaves headroom for bursts and for the error of the rate estimates."""

    high_water_utilisation: float = 0.9
    """Arrivals above this fraction of capacity count as backlogged even before a backlog
    shows; above the target so that a freshly sized query is not immediately re-sized."""

    low_water_utilisation: float = 0.4
    """Below this utilisation (and with no backlog) the query is a scale-down candidate. Well
    under the target, so a scale-down lands inside the band instead of oscillating."""

    catch_up_s: float = 60.0
    """Time in which the sized parallelism should drain the current backlog, on top of keeping
    up with arrivals. One minute: a visible recovery without buying capacity for a spike."""

    change_prior_s: float = 10.0
    """How long a resizing is taken to need, from the tuple to its ack, before the query has
    been resized once (from then on, its last one's): a scale-up sizes for the backlog that
    builds meanwhile at the old size, not only the backlog of the moment."""

    ramp_horizon_s: float = 40.0
    """How far ahead a rising ramp is sized for (`controller.core.ramp.ramp`): where its
    rate will be once a change made now has taken effect (~10 s) and the backlog has drained,
    rather than the rate of the moment, which the ramp leaves behind before the change lands
    and which would take a round per stage."""

    backlog_floor_records: float = 1_000.0
    """Backlog that counts as noise: one batch planned a moment before a burst already leaves a
    few hundred records behind. Growth and drain-time triggers need a backlog above it."""

    backlog_growth_records_per_s: float = 50.0
    """Least-squares growth of the backlog above which the query is backlogged even if its
    arrival rate looks under capacity (the rate estimate lags a load step)."""

    reconfiguration_pause_s: float = 10.0
    """Seconds of arrivals a resized query is expected to fall behind by: its restart (from
    the later of the last commit and the change's start to the first commit after, an ack's
    `pause_ms`) and the wait for its running batch at the old size (quiesce). It drains that
    pile-up flat out, so a pipeline's readers are sized for it as part of its catch-up burst
    (`topology`). The bundled job's acks show 4-5 s of pause after 3-11 s of quiescing
    (docs/benchmarks.md), the simulator's 8-9 s of pause; 10 s is in between. Its own sizing
    needs no allowance: at 70 % target utilisation a 10 s pile-up drains in about 23 s, well
    within `catch_up_s`."""

    min_parallelism: int = 1
    """Lowest input parallelism the policy will ask for."""

    max_parallelism: int = 64
    """Highest input parallelism the policy will ask for; the job's task slots cap it too."""

    max_scale_down_share: float = 0.75
    """Most of the running units one scale-down removes. A scale-down goes to the size the
    load needs at the target utilisation (which leaves headroom), but never below a quarter of
    the units at once: a rate per unit misjudged at a large size cannot drop the query to
    nothing in one step. 16 units needing 3 go 16 → 4 → 3: two steps."""

    scale_down_stabilisation_s: float = 120.0
    """The query must stay quiet (below low water, no backlog) this long before a scale-down;
    two windows, so one lull between bursts does not shrink it. A scale-down does not restart
    it: a next step needs only a quiet model at the new size, after the cooldown."""

    shed_at_ceiling: bool = True
    """At the ceiling (no units, executors or cluster room left), set the shed fraction of a
    job that marks records low priority, within the job's own `--max-shed-fraction`, and lift
    it as the load allows (`controller.core.ceiling`). False: only advise it, and never touch a
    shed fraction set by hand."""

    release_spare_executors: bool = True
    """Give back the executors neither a query's units nor the units its load needs at the
    target use, once they have been spare (unbacklogged) for `scale_down_stabilisation_s`, so
    a shared cluster's other jobs can have their cores; a later scale-up asks for executors
    again. Releasing is a swap at a batch boundary, and a stateful query reloads the state its
    killed executors cached. False: a job keeps every executor it got (a cluster of its own)."""

    cooldown_s: float = 30.0
    """No new decision for a query this long after its last actuation was answered (or timed
    out), so the window refills with metrics of the new configuration first."""

    ineffective_gain_ratio: float = 0.5
    """After an applied scale-up that left the query backlogged, the capacity gain measured
    under the new configuration must reach this fraction of the predicted gain, or the scaling
    is remembered as ineffective (skew, an external limit) and not repeated, unless μ fell as
    contention of at most 0.25 makes it fall (learned instead: `judgement.contended`). Half:
    the rate estimates are good to ~20 %, so a shortfall of half is not noise."""

    ineffective_memory_s: float = 1800.0
    """How long an ineffective scaling is remembered. External limits (a slow sink, a busy
    broker) come and go; after half an hour the policy may try again."""

    skew_partition_share: float = 0.7
    """A source partition holding more than this share of the backlog (or, without a backlog,
    of the arrivals) while other partitions exist is reported as skew. With 2 partitions 70 %
    is more than twice the other's share; uniform keys stay far below it."""

    lost_after_beats: float = 2.5
    """An instance that sends liveness beats (a job does, every `beat_interval_s`: 1 s by
    default) and is silent for this many beat intervals is lost, however long its batches
    run: a standby is promoted within 3 s of the loss. 2.5: a beat 1.5 s late on a busy
    machine is not a loss; two missed in a row, the time a kill needs to be seen, are."""

    lost_after_intervals: int = 5
    """A query that publishes no metrics for this many trigger intervals (or this many times
    its longest recent batch, which may run far past the trigger when backlogged) is reported
    lost; for an instance that sends beats, one batch that has run this long is (the query is
    hung). Five: a restart or a slow commit can swallow two or three intervals."""

    lost_after_min_s: float = 25.0
    """Floor of that timeout, and how long a standby stays live without a heartbeat: Spark
    reports an idle query only every ~10 s, so one missed heartbeat plus slack must never count
    as lost."""

    def __post_init__(self) -> None:
        for name in ("target_utilisation", "high_water_utilisation", "low_water_utilisation"):
            _ratio(f"policy.{name}", getattr(self, name))
        _check(self.low_water_utilisation < self.target_utilisation
               <= self.high_water_utilisation,
               "need policy.low_water_utilisation < policy.target_utilisation <= "
               f"policy.high_water_utilisation, got {self.low_water_utilisation} < "
               f"{self.target_utilisation} <= {self.high_water_utilisation}")
        _positive("policy.catch_up_s", self.catch_up_s)
        _check(math.isfinite(self.change_prior_s) and self.change_prior_s >= 0,
               f"policy.change_prior_s must be a number >= 0, got {self.change_prior_s}")
        _check(math.isfinite(self.ramp_horizon_s) and self.ramp_horizon_s >= 0,
               f"policy.ramp_horizon_s must be a number >= 0, got {self.ramp_horizon_s}")
        _check(math.isfinite(self.reconfiguration_pause_s) and self.reconfiguration_pause_s >= 0,
               f"policy.reconfiguration_pause_s must be a number >= 0, got "
               f"{self.reconfiguration_pause_s}")
        _check(self.backlog_floor_records >= 0, "policy.backlog_floor_records must be >= 0")
        _check(self.backlog_growth_records_per_s >= 0,
               "policy.backlog_growth_records_per_s must be >= 0")
        _check(1 <= self.min_parallelism <= self.max_parallelism,
               f"need 1 <= policy.min_parallelism ({self.min_parallelism}) <= "
               f"policy.max_parallelism ({self.max_parallelism})")
        _check(0 < self.max_scale_down_share <= 1,
               f"policy.max_scale_down_share must be in (0, 1], got {self.max_scale_down_share}")
        _check(self.scale_down_stabilisation_s >= 0,
               "policy.scale_down_stabilisation_s must be >= 0")
        _check(self.cooldown_s >= 0, "policy.cooldown_s must be >= 0")
        _ratio("policy.ineffective_gain_ratio", self.ineffective_gain_ratio)
        _positive("policy.ineffective_memory_s", self.ineffective_memory_s)
        _check(0.5 <= self.skew_partition_share <= 1,
               f"policy.skew_partition_share must be in [0.5, 1], got "
               f"{self.skew_partition_share}")
        _check(math.isfinite(self.lost_after_beats) and self.lost_after_beats >= 1,
               f"policy.lost_after_beats must be >= 1, got {self.lost_after_beats}")
        _check(self.lost_after_intervals >= 1,
               f"policy.lost_after_intervals must be >= 1, got {self.lost_after_intervals}")
        _positive("policy.lost_after_min_s", self.lost_after_min_s)


@dataclass(frozen=True, slots=True)
class SeasonSettings:
    """Whether and how the controller learns a load that repeats and sizes ahead of it
    (`controller.core.season`)."""

    anticipate: bool = True
    """Size a query ahead when the peak its repeating load reaches within `season_lead_s`
    exceeds its capacity, and never scale it down below that peak. A load needs to have
    repeated for one and a half periods, and to follow its pattern within `season_tolerance`
    over the last `season_min_period_s`; until then, and whenever it departs from it, the
    controller only reacts."""

    season_bucket_s: float = 300.0
    """λ is remembered as its mean over buckets this long: the resolution of the pattern."""

    season_min_period_s: float = 3600.0
    """Shortest period the load may repeat with; also how often the period is searched for,
    and the window the pattern is checked against (the level over its last half)."""

    season_max_period_s: float = 86400.0
    """Longest period the load may repeat with; 2.6 of it are remembered per query (a day at
    5-minute buckets: 749 numbers)."""

    season_lead_s: float = 1800.0
    """How far ahead the peak is sized for: the time a change takes to pay off (a restart, the
    backlog it leaves drained) with room to make one step of a rise instead of several."""

    season_tolerance: float = 0.25
    """How far the last `season_min_period_s` may depart from the pattern (mean absolute error
    over mean rate) before the forecast is set aside."""

    def __post_init__(self) -> None:
        _check(math.isfinite(self.season_bucket_s) and self.season_bucket_s >= 1,
               f"season.season_bucket_s must be at least 1 s, got {self.season_bucket_s}")
        _check(self.season_bucket_s * 2 <= self.season_min_period_s
               <= self.season_max_period_s,
               "need 2 × season_bucket_s <= season_min_period_s <= season_max_period_s, got "
               f"{self.season_bucket_s}, {self.season_min_period_s}, "
               f"{self.season_max_period_s}")
        _check(math.isfinite(self.season_lead_s) and self.season_lead_s >= 0,
               f"season.season_lead_s must be a number >= 0, got {self.season_lead_s}")
        _check(self.season_lead_s < self.season_min_period_s,
               f"season.season_lead_s ({self.season_lead_s}) must be under "
               f"season.season_min_period_s ({self.season_min_period_s}): the forecast reads "
               "the same phase a period back, which must have passed")
        _positive("season.season_tolerance", self.season_tolerance)


METRICS_STARTS = ("window", "latest", "earliest")
"""Where the metrics consumer may start (`KafkaSettings.metrics_offset_reset`)."""


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Where the controller reads metrics and acks and writes control tuples and decisions."""

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    """Kafka bootstrap list; the local stack's default listener."""

    metrics_topic: str = topics.METRICS
    """Per-batch `TaskMetrics` published by the jobs."""

    control_topic: str = topics.CONTROL
    """`ControlTuple`s the controller writes and the jobs apply."""

    ack_topic: str = topics.ACKS
    """`Ack`s the jobs write back, naming a control id."""

    decisions_topic: str = topics.DECISIONS
    """Audit log of the controller's `Decision`s."""

    group_id: str = "streamctl-controller"
    """The controller instances' group: they join it on `lease_topic` to divide the shards of
    the queries. Also the transactional id of a shard leader's writes (`<group>.shard-<k>`
    when there are several; a new leader takes the id over and so fences every earlier one)
    and the prefix of each instance's own consumers."""

    lease_topic: str = topics.LEASE
    """Topic that only serves as the lease, one partition per shard of the queries: the
    instance of `group_id` a partition is assigned to leads that shard. One partition: one
    instance leads every query, the others wait to take over; more: the instances divide the
    queries, and on a metrics topic of a multiple of as many partitions each reads only its
    shards' metrics, so each adds capacity. Every instance reads the count at start; nothing is
    written to it."""

    metrics_offset_reset: str = "window"
    """Where the controller starts reading the metrics topic: 'window' reads back the newest
    `model.window_s` of it, so a controller that starts or restarts holds the samples a
    follower would have and decides at once, instead of waiting `model.min_samples` batches;
    'latest' reads only what comes next; 'earliest' everything (replays and tests). The
    metrics of a shard taken over are read back the window whatever this says."""

    control_key: str = field(default="", repr=False)
    """Shared secret every control tuple is signed with (HMAC-SHA256); the jobs reject tuples
    not signed with it. Read from its variable (or STREAMCTL_CONTROL_KEY_FILE, e.g. a Docker
    secret) only: an option would show in `ps`. Required unless dry_run."""

    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    """How every client of the controller authenticates to Kafka; only from the
    STREAMCTL_KAFKA_* variables (`streamctl.security.kafka`), never from options (a password would
    show in `ps`)."""

    def __post_init__(self) -> None:
        _check(bool(self.bootstrap_servers.strip()), "kafka.bootstrap_servers must not be empty")
        for name in ("metrics_topic", "control_topic", "ack_topic", "decisions_topic",
                     "group_id", "lease_topic"):
            _check(bool(getattr(self, name).strip()), f"kafka.{name} must not be empty")
        _check(not self.control_key or len(self.control_key.encode()) >= 16,
               "kafka.control_key must have at least 16 bytes (e.g. `openssl rand -hex 32`)")
        _check(self.metrics_offset_reset in METRICS_STARTS,
               "kafka.metrics_offset_reset must be 'window', 'latest' or 'earliest', got "
               f"{self.metrics_offset_reset!r}")


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Everything the controller process needs, in one frozen value."""

    model: ModelSettings = field(default_factory=ModelSettings)
    """Window and readiness of the rate model."""

    policy: PolicySettings = field(default_factory=PolicySettings)
    """Thresholds, bounds and timers of the scaling policy."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    """Broker and topics."""

    season: SeasonSettings = field(default_factory=SeasonSettings)
    """A load that repeats, and sizing ahead of it."""

    ack_timeout_s: float = 90.0
    """How long to wait for the ack of a control tuple. A job applies it at a batch boundary
    and restarts its query from the checkpoint, which takes tens of seconds on a busy laptop.
    An `executors` tuple's ack is awaited 90 s longer: the job's own wait for them to run."""

    poll_timeout_s: float = 0.5
    """Longest wait for metrics per cycle (a cycle runs as soon as any arrive); also bounds how
    late an ack, a timeout or a lost instance is seen when nothing arrives. Half a second: a
    killed job's silence is judged within it, for a cycle of microseconds twice a second."""

    probe_interval_s: float = 0.5
    """Seconds between two probes of the source partitions' end offsets at the broker (one
    ListOffsets request for every partition the queries read): the arrival rate is then
    known within seconds of a load step, however long the running batch takes. Half a second:
    the interval that straddles a change is a mix of both levels, so the finer the probes,
    the sooner a step is confirmed and the less of a burst's end can pass for its level. 0
    probes nothing, and the model learns only from the batches."""

    max_input_delay_s: float = 10.0
    """Longest the controller may be behind its metrics topic and still judge (how long ago
    the newest record it has read was published, while newer ones wait unread). Its own delay
    is taken out of every liveness judgement below it; above it, it judges nothing (no query
    is taken for lost, hung or due a change on a view that old), says so in the decision log,
    its log and `streamctl_controller_judging`, reads until it has caught up, and decides
    again."""

    status_interval_s: float = 5.0
    """Seconds between per-query status lines on stdout."""

    overload_record_interval_s: float = 30.0
    """Longest a query over its capacity goes without a record in the decision log: when
    nothing was recorded for it for that long, why it holds (or what it advises) is."""

    metrics_port: int = DEFAULT_METRICS_PORT
    """Port of the Prometheus endpoint; 0 serves none. When the default, 9300, is taken
    (another controller instance on this host), the instance serves on a free port instead
    and logs which; any other port must be free, or the controller refuses to start."""

    metrics_host: str = "127.0.0.1"
    """Address the Prometheus endpoint listens on: this host only by default; 0.0.0.0 for
    every interface (compose sets it, so Prometheus can scrape the controller's container)."""

    metrics_endpoint: EndpointSecurity = field(default_factory=EndpointSecurity)
    """TLS and basic auth of the Prometheus endpoint; only from the STREAMCTL_METRICS_*
    variables (`streamctl.security.metrics_http`), never from options."""

    issuer: str = "streamctl-controller"
    """Written into every control tuple so a job (and a reader of the log) knows who sent it;
    the same for every instance of one controller, so a new leader resumes what an earlier
    one sent."""

    instance_id: str = ""
    """This instance's name in logs, `streamctl status`, the decision log and the leader
    gauge; empty: <hostname>-<pid>."""

    lease_session_s: float = 6.0
    """How long the leader may go unheard by the broker before its lease passes to a
    follower: the kill of a leader is noticed within this, a pause (GC, SIGSTOP) longer than
    this deposes it. The broker must allow it (`group.consumer.min.session.timeout.ms`, 45 s
    by default; the local stack and the compose broker allow 2 s)."""

    follow_interval_s: float = 5.0
    """How often an instance models a query it does not lead (one of another instance's
    shards) while it reads every query's metrics (one shard, or a metrics topic whose
    partitions are not a multiple of the shards): often enough to keep its load's repeating
    pattern, the memory of its sizes and its status current for a takeover, seldom enough
    that a follower costs a fraction of a leader. The queries it leads are modelled every
    cycle."""

    spark_master_status_url: str = ""
    """Where the controller reads a shared Spark standalone cluster's free cores (its
    master's JSON status, for example http://spark-master:8080/json/), to divide them among
    the queries that want more executors (by each job's `--cluster-priority`, then need)
    before any asks, so that no request waits for cores another took. Empty: every job asks
    on its own."""

    cluster_status_interval_s: float = 5.0
    """Seconds between two reads of `spark_master_status_url`, in the background; a reading
    three intervals old is no longer used. The free cores are divided at each reading among
    the queries that wanted more before it."""

    cluster_collect_s: float = 1.0
    """Seconds from a query's new want of cores to the next read of the master's status (at
    most `cluster_status_interval_s`): the wants that begin within them are divided together,
    ordered by priority, and a want waits that long instead of up to a whole interval."""

    dry_run: bool = False
    """Compute, log and record decisions (marked dry_run) but send no control tuple."""

    def __post_init__(self) -> None:
        _positive("ack_timeout_s", self.ack_timeout_s)
        _check(0 <= self.poll_timeout_s <= 60, "poll_timeout_s must be in [0, 60]")
        _check(0 <= self.probe_interval_s <= 60, "probe_interval_s must be in [0, 60]")
        _positive("status_interval_s", self.status_interval_s)
        _positive("overload_record_interval_s", self.overload_record_interval_s)
        _positive("max_input_delay_s", self.max_input_delay_s)
        _check(0 <= self.metrics_port <= 65535,
               f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        _check(bool(self.issuer.strip()), "issuer must not be empty")
        _check(bool(self.metrics_host.strip()), "metrics_host must not be empty")
        _check(2 <= self.lease_session_s <= 300, "lease_session_s must be in [2, 300]")
        _positive("follow_interval_s", self.follow_interval_s)
        _positive("cluster_status_interval_s", self.cluster_status_interval_s)
        _check(0 < self.cluster_collect_s <= self.cluster_status_interval_s,
               "cluster_collect_s must be in (0, cluster_status_interval_s], got "
               f"{self.cluster_collect_s}")
        _check(self.spark_master_status_url == ""
               or self.spark_master_status_url.startswith(("http://", "https://")),
               "spark_master_status_url must be an http:// or https:// URL, got "
               f"{self.spark_master_status_url!r}")
