"""How the controller explains itself: `report` (log lines and the decision-log records),
`prom` (Prometheus metrics, the only module here that imports prometheus_client) and `page`
(the live page served beside them).
"""
