"""The streamctl controller: metrics in, rate model, scaling policy, control tuples out.

Of the project it imports `schemas`, `streamctl.security` and `streamctl.options`, never
`streaming_jobs`. Layers, from the inside out, each importing only layers before it (the
package map in docs/architecture.md, which `tests/unit/test_layering.py` enforces):

- `settings` — the one frozen, documented configuration;
- `core` — the pure decision core (window, model, sizing, parallelism, topology, policy,
  judgement, state, failover, recovery, outage, wording): no I/O, no clock;
- `explain` — `report` (decision-log records, log lines) and `prom` (Prometheus);
- `loop` — the collect → settle → evaluate → decide → act cycle, its ports and fakes;
- `kafka` — the Kafka adapters of the ports; `replay` — traces and the offline replay;
- `app` wires the adapters to a loop; `cli` reads settings from args and env and runs it.
"""
