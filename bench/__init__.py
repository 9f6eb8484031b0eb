"""agentpost's benchmarks: the figures of issues 2 and 3, measured and checked against targets.

    python -m bench            # every benchmark, then one table
    python -m bench stdio      # one of them (names: python -m bench --list)

Each benchmark runs in a scratch AGENTPOST_HOME of its own (a temporary folder) and raises the
limits it would otherwise hit through configuration (AGENTPOST_SEND_RATE_PER_MINUTE,
AGENTPOST_MAX_UNACKED), and says so. Progress goes to stderr, the table to stdout; the last
results are also written to bench/results/last.json. docs/BENCHMARKS.md explains the method.
"""
