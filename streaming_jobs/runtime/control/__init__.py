"""Control tuples and the desired state: authenticity and validation of a tuple (`tuples`),
what every change to a running query shares (`reconfigure`: its outcomes, its pause, the wait
for its first commit) and the desired state persisted beside the checkpoint
(`shared_state`).
"""
