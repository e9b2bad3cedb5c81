"""The control loop: collect → settle → evaluate → decide → act → report (`cycle`), written
against small ports (`ports`: metrics source, control sink, ack source, decision log, clock,
observer) with in-memory twins (`fakes`); `actuate` turns a verdict into a control tuple and
its decision-log records, `settling` settles it by its ack or the ack's timeout. Imports the
settings, the core and `explain`, never a client library.
"""
