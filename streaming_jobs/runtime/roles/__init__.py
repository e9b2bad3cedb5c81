"""Whether this instance runs the query: promotion and step-down (`standby`), and what to do
with a query that stopped by itself (`supervise`).
"""
