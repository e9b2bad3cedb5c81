"""Simulation harness: a queueing model of micro-batch jobs driving the controller and baselines."""
