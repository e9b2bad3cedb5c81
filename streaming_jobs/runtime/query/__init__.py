"""One query as Spark runs it: the plan (source → decode → the job's builder), the session it
runs in (with its Python daemon), the progress listener, and `ElasticQuery` (`lifecycle`),
the real `ports.QueryControl`; the standby's warm-up run.
"""
