"""The bundled fraud-detection job: per-account state, rules over recent activity, scoring.

`rules` (pure state and rules), `scoring` (versioned scoring call with its latency), `plan`
(the Spark plan: decode → per-account stateful operator → Avro output).
"""
