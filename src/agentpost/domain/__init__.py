"""Pure types, names, limits, rules and errors.

No I/O, and no import of any other agentpost layer.
"""
