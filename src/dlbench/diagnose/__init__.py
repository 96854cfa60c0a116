"""The doctor: how each stored result compares with what it should do, and why it falls short.

Reads records only, never torch, like report/ below it, whose comparisons and profile readings it uses.
"""
