"""How the controller explains itself: `report` (log lines and the decision-log records) and
`prom` (Prometheus metrics, the only module here that imports prometheus_client).
"""
