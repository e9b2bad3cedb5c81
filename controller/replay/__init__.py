"""Offline: recorded metrics traces (`trace`, the file format) and the replay of the real loop
over one on a fake clock (`driver`).
"""
