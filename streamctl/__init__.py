"""The `streamctl` command: the composition root that wires the local stack, the job, the
controller, the load generator and the demo together. It is the only package that may import
all of `streamctl.stack`, `controller` and `streaming_jobs`; it imports each lazily so that `--help`
stays fast and a missing piece (say, Java) only matters to the subcommand that needs it.
"""
