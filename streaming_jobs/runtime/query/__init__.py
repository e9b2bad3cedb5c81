"""One query as Spark runs it: the plan (source → decode → the job's builder), the session it
runs in, the gate in its foreachBatch sink, the progress listener, and `ElasticQuery`, the real
`ports.QueryControl`; the standby's warm-up run.
"""
