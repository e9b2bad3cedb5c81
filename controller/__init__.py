"""The streamctl controller: metrics in, rate model, scaling policy, control tuples out.

Imports only `schemas` of the project. Layers, from the inside out:

- pure core — `settings` (one frozen config), `window` (samples per query), `model` (λ, μ,
  backlog), `state` (what was sent, cooldowns), `policy` (verdicts), `results`, `report`;
- `loop` — the collect → settle → evaluate → decide → act cycle, written against `ports`;
- adapters — `kafka_io` (confluent-kafka), `prom` (Prometheus), `fakes` (in memory);
- `app` wires the adapters to a loop; `cli` reads settings from args and env and runs it.
"""
