"""The bundled jobs, written against the public job API (`streaming_jobs.api`) like any
user's job and registered the same way (the `streamctl.jobs` entry points in pyproject.toml):
`sensor_averages` and `fraud`. Nothing else of the project imports them by name.
"""
