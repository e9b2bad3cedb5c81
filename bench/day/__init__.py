"""The day-shaped benchmark: days of a repeating load through a pipeline, in the simulator,
against an oracle."""
