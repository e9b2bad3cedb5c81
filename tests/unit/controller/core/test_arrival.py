"""The change-point-aware arrival estimate: steps are taken in one go, spikes are not chased,
noise and bursty upstreams are averaged."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.arrival import BURSTY_REVERSALS, Interval, Level, Scan, departure, estimate
from controller.core.ramp import (
    _ROUNDING,
    RAMP_AT_LEAST,
    _may_rise,
    _ramp_fit,
    _suffix_sums,
    ramp,
)
from controller.settings import ModelSettings

SETTINGS = ModelSettings()


def series(rates: list[float], seconds: float = 2.0) -> list[Interval]:
    """Consecutive intervals of `seconds` each at the given records/s."""
    step_ms = int(seconds * 1000)
    return [Interval(i * step_ms, (i + 1) * step_ms, round(rate * seconds))
            for i, rate in enumerate(rates)]


def bursty(found: list[Interval], ratio: float) -> bool:
    """The definition `Scan.bursty` keeps in running counts: gaps without growth begun and
    ended repeatedly, or jumps beyond `ratio` straight back and forth."""
    edges = [(a.records > 0, b.records > 0) for a, b in pairwise(found)]
    if (edges.count((True, False)) >= BURSTY_REVERSALS
            and edges.count((False, True)) >= BURSTY_REVERSALS):
        return True
    ways = [departure(b.rate, a.rate, ratio) for a, b in pairwise(found)]
    reversals = sum(1 for way, then in pairwise(ways) if way != 0 and then == -way)
    return reversals >= BURSTY_REVERSALS


def rate_of(rates: list[float], seconds: float = 2.0) -> float:
    found = estimate(series(rates, seconds), SETTINGS)
    assert found is not None
    return found.rate


def ramp_of(rates: list[float], seconds: float = 1.0) -> float:
    return ramp(series(rates, seconds), SETTINGS)


def test_a_rising_ramp_has_its_slope_from_half_the_ramp_window_even_after_a_flat_lead_in(
        ) -> None:
    flat = [136.0] * 20
    climbing = [136.0 + 10 * (k + 0.5) for k in range(20)]  # 10/s per second, 1 s intervals
    assert ramp_of([*flat, *climbing]) == pytest.approx(10, rel=0.01)
    assert ramp_of([*flat, *climbing[:12]]) == 0  # 12 s of it: less than half the window
    assert ramp_of(climbing) == pytest.approx(10, rel=0.01)


def test_a_step_a_spike_noise_a_drift_and_a_fall_are_no_ramp() -> None:
    assert ramp_of([120.0] * 20 + [700.0] * 20) == 0
    assert ramp_of([120.0] * 20 + [1200.0] * 3 + [120.0] * 17) == 0
    noisy = [200 + 80 * ((k * 7919) % 13 - 6) / 6 for k in range(40)]  # ±80/s, no trend
    assert ramp_of(noisy) == 0
    assert ramp_of([200 + 0.5 * k for k in range(40)]) == 0  # +10 % over the window
    assert ramp_of([1000 - 10.0 * k for k in range(40)]) == 0


@pytest.mark.parametrize("seconds", [1.0, 2.0, 5.0])
def test_independent_noise_within_the_shift_band_is_no_ramp(seconds: float) -> None:
    """A minute of rates drawn uniformly from [120, 280]/s, 300 draws per interval length.
    (Not any sequence in the band: one that climbs 120 → 196 over its last four intervals
    does look like a ramp starting.)"""
    for seed in range(300):
        draw = random.Random(seed)
        rates = [draw.uniform(120, 280) for _ in range(int(60 / seconds))]
        assert ramp_of(rates, seconds) == 0, (seed, rates)


def test_a_step_is_taken_once_two_intervals_agree_on_it() -> None:
    before = [120.0] * 10
    # the interval that straddles the step is a mix of both levels and is left out
    assert rate_of([*before, 224, 720]) == pytest.approx(120)
    assert rate_of([*before, 224, 720, 698]) == pytest.approx(705, rel=0.01)


def test_a_burst_that_falls_back_is_not_sized_for() -> None:
    # the spike trace: 120/s, a straddling 542, the 1 199/s peak, then 865 as it ends
    assert rate_of([120.0] * 10 + [542, 1199]) == pytest.approx(120)
    found = estimate(series([120.0] * 10 + [542, 1199, 865]), SETTINGS)
    assert found is not None
    assert found.rate == pytest.approx(120) and found.pending_rate == pytest.approx(865)
    assert rate_of([120.0] * 10 + [542, 1199, 865, 120]) == pytest.approx(120)


def test_a_burst_shorter_than_the_confirmation_time_is_not_its_level_even_when_its_ends_agree(
        ) -> None:
    # Half-second probes; a 3.4 s burst of 1 800/s on 300/s that began a twentieth of a
    # second into an interval and ended a twentieth before one: both straddling intervals
    # (1 650/s) agree with the burst, and the agreeing intervals span 3.5 s. The level is
    # certain only from the end of the first, 3 s before the burst fell back.
    burst = [1650.0, *[1800.0] * 5, 1650.0]
    assert SETTINGS.level_confirm_s == 3.5
    assert rate_of([*[300.0] * 20, *burst], 0.5) == pytest.approx(300)
    assert rate_of([*[300.0] * 20, *burst, 300.0], 0.5) == pytest.approx(300)
    # the same start and a step that holds: taken once it has lasted 3.5 s past that end
    step = [1650.0, *[1800.0] * 7]
    assert rate_of([*[300.0] * 20, *step[:-1]], 0.5) == pytest.approx(300)
    assert rate_of([*[300.0] * 20, *step], 0.5) == pytest.approx(1781, rel=0.01)


def test_a_step_down_is_taken_too() -> None:
    assert rate_of([600.0] * 10 + [350, 100, 101]) == pytest.approx(100.5, rel=0.01)


def test_a_fall_after_a_burst_is_taken_once_it_has_lasted_the_arrival_window() -> None:
    # b of the simulator's pipeline while a catches up (~609/s, confirmed as a level) and
    # then settles at 391/s: 1.56x below the burst but not 1.5x below the window's mean with
    # the burst in it. Once 391/s has held for the arrival window (10 s) it is the level, so
    # one interval that caught two of a's batches (781/s) is pending, not λ.
    burst = [296.0, 0, 421, 609, 608, 609, 508, 716, 283, 370]
    assert rate_of([*burst, 391, 391], 2.3) == pytest.approx(607, rel=0.01)
    settled = series([*burst, *[391.0] * 13, 781], 2.3)
    found = estimate(settled, SETTINGS)
    assert found is not None
    assert found.rate == pytest.approx(391, rel=0.01)
    assert found.pending_rate == pytest.approx(781, rel=0.01)


def test_a_departure_that_outlasts_its_level_and_the_arrival_window_becomes_the_level(
        ) -> None:
    """A window that begins in a burst (an upstream's catch-up batch, 1 200/s for 4 s) makes
    it the level; the rates after it, falling as the upstream catches up, disagree with each
    other and confirm nothing. Once they have lasted the arrival window (10 s) and longer than
    the burst did, they are the level."""
    burst, after = [1200.0] * 2, [520.0, 400, 310, 400, 300]
    assert rate_of([*burst, *after[:4]]) == pytest.approx(1200)  # 8 s: still a transient
    assert rate_of([*burst, *after]) == pytest.approx(386)  # 10 s: the level
    # the same departure from a level that held 12 s stays a transient until it lasts longer
    held = [1200.0] * 6
    assert rate_of([*held, *after]) == pytest.approx(1200)
    assert rate_of([*held, *after, 390]) == pytest.approx(1200)  # 12 s: as long, not longer
    assert rate_of([*held, *after, 390, 300]) == pytest.approx(340)  # its newest 10 s


@pytest.mark.parametrize("phase", range(3))
def test_bursty_arrivals_are_the_mean_of_the_whole_window_whatever_the_bursts_phase(
        phase: int) -> None:
    # an upstream micro-batch job's output read with a shorter trigger: 0, 0, 600, 0, 0, 600
    # for a minute, 200/s (the newest 10 s alone hold one burst or two: 120 or 240/s)
    bursts = [0, 0, 600] * 11
    assert rate_of(bursts[phase:phase + 30]) == pytest.approx(200)
    # or with a trigger close to its period: 160, 57, 160, 57/s
    assert rate_of([160, 57] * 6) == pytest.approx((160 + 57) / 2)


def test_a_step_after_a_burst_and_an_idle_drain_is_taken_at_its_level_not_averaged() -> None:
    # half-second probes: 2 s of a burst at 8 000/s, 10 s without input while the job drains
    # it, 10 s at 600/s, then a step to 4 500/s (bench.containers' calibration, then its step)
    before = [8_000.0] * 4 + [0.0] * 20 + [600.0] * 20
    assert rate_of([*before, *[4_500.0] * 10], seconds=0.5) == pytest.approx(4_500)
    # bursts that go on after it are averaged over the window
    bursts = [0.0, 0.0, 13_500.0] * 5
    assert rate_of([*before, *bursts], seconds=0.5) == pytest.approx(
        (8_000 * 4 + 600 * 20 + 13_500 * 5) / (4 + 20 + 20 + 15))


def test_a_slow_upstreams_bursts_average_however_long_and_a_stop_reads_as_one() -> None:
    # an upstream committing every 5 s, read by half-second probes: 4.5 s without growth
    # between bursts is long enough to confirm a level of 0, yet it is only a gap
    cycle = [6_000.0, 1_200.0] + [0.0] * 8
    for end in range(60, 71):
        window = (cycle * 7)[end - 60:end]  # 30 s, whatever the phase
        assert rate_of(window, seconds=0.5) == pytest.approx(720), end
    # bursts that last several intervals at one rate: no jump straight back, only the gaps
    cycle = [3_000.0] * 3 + [0.0] * 7
    for end in range(60, 71):
        window = (cycle * 7)[end - 60:end]
        assert rate_of(window, seconds=0.5) == pytest.approx(900), end
    # a steady load that stops: one gap, the level of 0 once confirmed
    assert rate_of([600.0] * 30 + [0.0] * 10, seconds=0.5) == 0


@given(st.floats(100, 10_000), st.floats(2, 20), st.booleans(), st.integers(0, 5))
def test_a_step_gives_the_new_rate_within_three_intervals(
        base: float, factor: float, up: bool, straddle_tenths: int) -> None:
    new = base * factor if up else base / factor
    straddle = base + (new - base) * straddle_tenths / 10
    assert rate_of([base] * 8 + [straddle, new, new], seconds=10) == pytest.approx(new, rel=0.02)


# beyond the band of `level_shift_ratio` (inside it, a burst is noise and is averaged)
@given(st.floats(10, 10_000), st.one_of(st.floats(0, 0.6), st.floats(1.6, 1000)),
       st.integers(0, 3))
def test_a_one_interval_spike_does_not_move_the_estimate(base: float, factor: float,
                                                         after: int) -> None:
    rates = [base] * 8 + [base * factor] + [base] * after
    found = estimate(series(rates, seconds=10), SETTINGS)
    assert found is not None
    assert found.rate == pytest.approx(base, rel=0.02)  # records are whole


def test_a_dip_is_averaged_in_only_with_the_interval_that_makes_up_for_it() -> None:
    # a batch planned early reads 350/s, the next one 850/s: a steady 600/s, not 662/s (the
    # newest 10 s less the dip)
    assert rate_of([600] * 8 + [350, 850]) == pytest.approx(600)
    # a dip not made up (its records late, or lost upstream) is left out, as a spike is
    assert rate_of([600] * 8 + [300, 600]) == pytest.approx(600)
    assert rate_of([600] * 8 + [1500, 600]) == pytest.approx(600)


@given(st.lists(st.floats(0.8, 1.2), min_size=5, max_size=30), st.floats(10, 10_000))
def test_noise_within_the_band_is_averaged_not_followed(noise: list[float],
                                                        base: float) -> None:
    found = series([base * n for n in noise])
    seen = [i.rate for i in found]
    estimated = estimate(found, SETTINGS)
    assert estimated is not None
    assert min(seen) <= estimated.rate <= max(seen)


@given(st.lists(st.tuples(st.one_of(st.sampled_from([500, 1000]), st.integers(1, 30_000)),
                          st.integers(0, 100_000)), min_size=1, max_size=60),
       st.one_of(st.integers(1, 60).map(float), st.floats(0.5, 60)))
def test_the_running_level_is_the_level_of_the_segment_as_it_grows(
        spans: list[tuple[int, int]], span_s: float) -> None:
    """`Level` keeps `level` up to date per interval added, whatever the intervals' lengths."""
    segment, start = [], 0
    for length, records in spans:
        segment.append(Interval(start, start + length, records))
        start += length
    running = Level(segment[:1], span_s)
    for index in range(1, len(segment)):
        running.append(segment[index])
        recent = [i for i in segment[:index + 1] if i.start_ms >= segment[index].end_ms
                  - span_s * 1000] or [segment[index]]
        assert running.rate == sum(i.records for i in recent) * 1000 / sum(
            i.end_ms - i.start_ms for i in recent)


@given(st.lists(st.floats(0, 0.01), min_size=RAMP_AT_LEAST, max_size=80),
       st.floats(1, 1e6), st.floats(-0.2, 0.2), st.sampled_from([200, 500, 1000, 7000]),
       st.floats(1.01, 2.9))
def test_a_span_ruled_out_by_the_running_sums_is_no_ramp(
        noise: list[float], base: float, off_edge: float, every_ms: int, ratio: float) -> None:
    """The ramp's cheap test never rules out a span the full fit would take: lines that rise
    by about what a ramp must (`off_edge` of it), with a little noise."""
    edge = 2 * (ratio - 1) / (3 - ratio)  # the rise over the span, of the first rate
    climb = edge * (1 + off_edge) / (len(noise) - 1)
    rates = [base * (1 + climb * k + n) for k, n in enumerate(noise)]
    span = [Interval(k * every_ms, (k + 1) * every_ms, round(r * every_ms / 1000))
            for k, r in enumerate(rates)]
    for first, possible in enumerate(_may_rise(span, ratio)):
        if not possible and len(span) - first >= RAMP_AT_LEAST:
            assert _ramp_fit(span[first:], ratio) is None


def _may_rise_one_start_at_a_time(span: list[Interval], ratio: float,
                                  starts: int) -> list[bool]:
    """`_may_rise` as it was written before its tests ran in C: the reference."""
    found = [False] * len(span)
    origin = (span[-1].start_ms + span[-1].end_ms) / 2000
    xs = [(i.start_ms + i.end_ms) / 2000 - origin for i in span]
    ys = [i.rate for i in span]
    size = len(span)
    sx, sy = _suffix_sums(xs), _suffix_sums(ys)
    sxx = _suffix_sums([x * x for x in xs])
    sxy = _suffix_sums([x * y for x, y in zip(xs, ys, strict=True)])
    for first in range(min(starts, size)):
        n = float(size - first)
        spread = n * sxx[first] - sx[first] * sx[first]
        if spread <= 0:
            found[first] = True
            continue
        rise = (n * sxy[first] - sx[first] * sy[first]) / spread * -xs[first]
        needed = (ratio - 1) * sy[first] / n
        found[first] = rise >= needed - _ROUNDING * (abs(rise) + abs(needed) + 1)
    return found


@given(st.lists(st.tuples(st.integers(1, 5_000), st.integers(0, 10_000)), min_size=1,
                max_size=80),
       st.integers(0, 2_000_000_000_000), st.integers(0, 90), st.floats(1.01, 2.9),
       st.booleans())
def test_the_ramps_cheap_test_in_c_rules_on_each_start_as_the_loop_did(
        spans: list[tuple[int, int]], at_ms: int, starts: int, ratio: float,
        same_length: bool) -> None:
    """Every start's verdict of `_may_rise` is the one-at-a-time loop's, at epoch-scale
    times, with intervals of one length or of many, up to every start (the newest alone
    has no spread: the loop's fallback)."""
    span, start = [], at_ms
    for length, records in spans:
        length = 1_000 if same_length else length
        span.append(Interval(start, start + length, records))
        start += length
    assert _may_rise(span, ratio, starts) == _may_rise_one_start_at_a_time(span, ratio, starts)


RATES = st.lists(st.one_of(st.floats(50, 150), st.floats(0, 2_000), st.just(0.0)),
                 min_size=1, max_size=80)
"""Rates of a noisy load with steps, spikes, bursts and empty intervals among them."""


@given(RATES)
def test_a_scan_carried_over_a_growing_window_estimates_what_a_fresh_scan_does(
        rates: list[float]) -> None:
    """While nothing leaves the window, scanning only what joined is scanning it all."""
    found, scan = series(rates, 0.5), Scan(SETTINGS)
    for end in range(1, len(found) + 1):
        assert scan.estimate(found[:end]) == estimate(found[:end], SETTINGS)


@given(RATES, st.integers(3, 30))
def test_a_scan_carried_over_a_sliding_window_finds_bursts_and_ramps_as_a_fresh_scan_does(
        rates: list[float], width: int) -> None:
    """Whether arrivals are bursty, and the ramp, are the window's alone, read from running
    counts: the same as a fresh scan's at every step, however far the window slid."""
    found, scan = series(rates, 0.5), Scan(SETTINGS)
    for end in range(1, len(found) + 1):
        window = found[max(0, end - width):end]
        carried, fresh = scan.estimate(window), estimate(window, SETTINGS)
        assert carried is not None and fresh is not None
        assert scan.bursty == bursty(window, SETTINGS.level_shift_ratio)
        assert carried.ramp_per_s == fresh.ramp_per_s
        if scan.bursty:
            assert carried == fresh


def test_a_load_carried_over_thousands_of_intervals_keeps_the_fresh_scans_level() -> None:
    """A noisy load that falls and steps back up, slid through a two-minute window for over
    two hours of probes (the scan cuts back what left the window as it goes): the level, and
    each step taken, as a fresh scan of the window finds them."""
    noise = random.Random(7)
    rates = [3_000] * 8_000 + [1_000] * 8_000 + [3_000] * 240
    found = series([rate * noise.uniform(0.9, 1.1) for rate in rates], 0.5)
    scan = Scan(SETTINGS)
    for end in [*range(240, len(found) - 240, 7), *range(len(found) - 240, len(found) + 1)]:
        window = found[end - 240:end]
        assert scan.estimate(window) == estimate(window, SETTINGS)


def test_a_window_that_a_candidate_shift_fills_is_scanned_afresh() -> None:
    """Nothing in the window is at the level the shift departs from, and nothing before it is
    its history: the window is its own level, as a fresh scan finds it."""
    found, scan = series([600.0, 1800.0, 600.0, 300.0, 330.0, 360.0], 2.0), Scan(SETTINGS)
    for end in range(1, len(found) + 1):
        carried = scan.estimate(found[max(0, end - 3):end])
    assert carried is not None and carried.rate == pytest.approx(330)
    assert carried.pending_rate is None


def test_a_window_that_does_not_continue_the_last_is_scanned_afresh() -> None:
    """An interval of the window changed (the probes took over from the batches' intervals):
    the carried scan starts again from the window's first interval."""
    scan = Scan(SETTINGS)
    scan.estimate(series([100.0] * 30, 0.5))
    changed = series([100.0] * 20 + [700.0] * 10, 0.5)
    assert scan.estimate(changed) == estimate(changed, SETTINGS)
    assert scan.estimate([]) is None


def test_a_level_that_began_before_the_window_outlives_its_front() -> None:
    """A spike that reaches the front of a short window is no level: the carried scan's level
    began before it (a fresh scan of the window would start from the spike)."""
    found = series([100.0] * 10 + [1_000.0] + [100.0] * 6, 0.5)
    scan = Scan(SETTINGS)
    for end in range(7, len(found) + 1):
        carried = scan.estimate(found[end - 7:end])
        assert carried is not None and carried.rate == pytest.approx(100)
    assert carried.pending_rate is None


@given(RATES, st.integers(3, 30), st.lists(st.integers(0, 5_000), min_size=1, max_size=2))
def test_the_batches_intervals_before_the_first_probe_count_in_the_windows_bursts(
        rates: list[float], width: int, batches: list[int]) -> None:
    """Each window begins with one or two intervals of the batches, ending where its first
    probe's begins (as `model.arrival_intervals` builds it): the carried scan never read them,
    but whether the window is bursty counts them, as a fresh scan does."""
    probes, scan = series(rates, 0.5), Scan(SETTINGS)
    for end in range(1, len(probes) + 1):
        window = probes[max(0, end - width):end]
        start_ms, ahead = window[0].start_ms, []
        for records in batches:
            ahead.insert(0, Interval(start_ms - 1_000, start_ms, records))
            start_ms -= 1_000
        carried = scan.estimate([*ahead, *window])
        assert scan.bursty == bursty([*ahead, *window], SETTINGS.level_shift_ratio)
        if scan.bursty:
            assert carried == estimate([*ahead, *window], SETTINGS)


def test_a_window_whose_older_intervals_changed_is_scanned_afresh() -> None:
    """The intervals the scan read were replaced, but for the newest ones (an out-of-order
    sample among the batches): the level is the window's, not the one read before."""
    scan = Scan(SETTINGS)
    scan.estimate(series([100.0] * 40))
    changed = series([100.0] * 10 + [140.0] * 28 + [100.0] * 3)
    assert scan.estimate(changed) == estimate(changed, SETTINGS)
