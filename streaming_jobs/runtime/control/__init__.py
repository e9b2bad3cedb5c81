"""Control tuples and the desired state: authenticity and validation of a tuple (`tuples`),
the parameter registry (`parameters`), the reconfiguration protocol (`reconfigure`) and the
desired state persisted beside the checkpoint and published (`desired`).
"""
