"""The desired state: every knob's value in force, the epoch of the tuple that set them, and the
registry that parses and bounds a new value (`state`).

A leaf: the query's port (`runtime.ports`), its plan (`runtime.query.plan`), the control
protocol and the published record all read this one carrier of a knob's value; the job's
options give its starting values (`config.JobConfig.initial_state`), a control tuple a new one.
"""
