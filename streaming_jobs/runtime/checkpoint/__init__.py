"""What the runtime keeps beside and inside Spark's checkpoint: its identity (`identity`), the
files beside it written atomically (`files`), the input source across switches
(`input_source`, `input_switch`), and the state partitions with their offline repartitioning
(`state_repartition`).
"""
