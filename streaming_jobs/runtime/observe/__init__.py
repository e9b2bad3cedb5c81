"""What a job measures: query progress → `TaskMetrics` (`metrics`, pure) and the job's
Prometheus figures (`prometheus`).
"""
