"""Spark jobs and the elastic runtime around them.

`api` is the public job API a user's job is written against (with `formats`); `loading` finds a
job by import path or installed name; `config` is a job process's settings; `jobs` holds the
bundled jobs, written like any user's; `runtime` runs any job as an elastic query; `cli` is
`job run`, `job check` and `job list`, `send_cli` `job send`. The only package of the project
that imports pyspark; of the project it imports `schemas`, `streamctl.security` and
`streamctl.options`, never the controller (docs/architecture.md, package map).
"""
