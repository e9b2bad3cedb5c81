"""The elastic runtime around any job's query. Internal: jobs import `streaming_jobs.api`.

- `job.ElasticJob` wires it up (construction order, threads, shutdown); `publish` ships what
  the query measures;
- `owner.QueryOwner` is the one owner of the query's lifecycle: every change (a tuple, a role
  check, a restart after a failure, the shutdown) runs there, one at a time, through the
  `ports.QueryControl` port (`fakes.FakeQuery` is its in-memory twin);
- `owner.Reconfigurer` is the reconfiguration protocol the owner runs;
- `desired` (the desired state and the registry that checks a knob's value), `query` (the
  plan, the session, `ElasticQuery`), `sink` (the gate, exactly-once output), `control`
  (tuples, what every change shares, the shared desired-state file), `roles` (standby,
  supervision), `checkpoint` (identity, input source, state partitions), `observe` (metrics,
  Prometheus); `kafka` holds the confluent-kafka adapters.
"""
