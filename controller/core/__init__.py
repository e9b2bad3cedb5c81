"""The pure decision core: typed samples and `now` in, typed verdicts out.

`window` (samples per query) and `probes` (the broker's end offsets) → `arrival`, `fit`,
`model` (λ, μ, overhead, backlog) → `sizing`, `knobs` → `policy` and `topology` (a pipeline in
one round) → `results`; `judgement` (skew, liveness, scale-ups that did not help), `state`
(what was sent, cooldowns), `instances` and `failover`, `recovery` (a restarted controller's
memory from its history), `wording` (how numbers read in reasons). No I/O, no clock, no
logging: imports only `controller.settings` and `schemas` (the layering test enforces it).
"""
