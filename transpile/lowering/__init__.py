"""Lowering: a pipelined loop's schedule turned into code, through copy engines and MMA engines.

`sm90` holds the expander of the sm90 rings (TMA and cp.async GEMM rings, the warp-specialised and persistent
partitions): the order of one iteration's ops is data in the schedule (`transpile.rules.hopper_schedule.Sm90Ring`),
the text of each op comes from the engine that does it.
"""
