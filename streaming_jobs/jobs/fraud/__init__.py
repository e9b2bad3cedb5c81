"""The bundled fraud-detection job: per-account state, rules over recent activity, scoring.

`rules` (pure state and rules), `scoring` (versioned scoring call with its latency), `job`
(the job's declaration and builder: per-account stateful operator → Avro output).
"""
