"""A clickstream pipeline of three elastic jobs, written only against streamctl's public API.

    clicks (JSON, from any producer)
      → click-enrich    stateless; a catalog lookup per click (input_parallelism)
      → clicks-enriched (Avro, single-object encoded)
      → click-sessions  stateful; per-user sessions and a bot-score model call per click
                        (state_partitions)
      → clicks-sessionized (JSON)
      → click-alerts    stateless; an abuse check per click (input_parallelism)
      → click-alerts    (plain Avro, one verdict per click)

Each module is an ordinary job a reader can copy: a `build` function and a `Job` declaration.
"""
