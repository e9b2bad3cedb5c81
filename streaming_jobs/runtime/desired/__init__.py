"""The desired state: every knob's value in force and the epoch of the tuple that set them.

A leaf: the query's port (`runtime.ports`), its plan (`runtime.query.plan`), the control
protocol and the published record all read this one carrier of a knob's value; the job's
options give its starting values (`config.JobConfig.initial_state`), a control tuple a new
one (`runtime.desired.parameters`, the registry that parses them and bounds them by the job's
`Bounds` settings group, which is defined there).
"""
