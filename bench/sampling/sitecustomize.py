"""A sampling profiler a benchmark's server loads at start (`bench.profile_service --sampler
signals`), for guests where py-spy cannot read the process reliably.

Python imports `sitecustomize` at start from the first directory of PYTHONPATH that holds one:
the benchmark puts this directory first and names the output in AGENTPOST_BENCH_SAMPLES. Without
that variable this module does nothing. SIGUSR1 starts sampling (anything sampled before is
dropped); SIGUSR2 stops it and writes the samples as py-spy's raw collapsed stacks, one line per
distinct stack, `frame;frame;… count`, each frame `function (file:line)` with the file relative
to its place on sys.path, so that `bench.profile_service`'s summaries read both alike.

The timer is ITIMER_PROF: it counts the CPU time of the whole process, and its signal runs the
handler in the main thread, between two bytecodes. So a sample is the main thread's stack
whenever the process has used another tick of CPU: where the service's Python runs (the event
loop, and the writes it makes there). Time in C (an SQLite statement, a `pwrite`) falls on the
Python line that called it. Work on other threads is charged to whatever the main thread was
doing then: with the writer thread busy, read the summary with that in mind.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
from types import FrameType

INTERVAL_S = 1 / 250  # as bench.profile.RATE; the kernel rounds it up to its tick

_counts: collections.Counter[str] = collections.Counter()
_names: dict[str, str] = {}


def _short(filename: str) -> str:
    known = _names.get(filename)
    if known is None:
        places = sorted((p for p in sys.path if p and filename.startswith(p + os.sep)), key=len)
        known = filename[len(places[-1]) + 1 :] if places else filename
        _names[filename] = known
    return known


def _sample(signum: int, frame: FrameType | None) -> None:
    stack = []
    while frame is not None:
        code = frame.f_code
        stack.append(f"{code.co_qualname} ({_short(code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    stack.append("thread: MainThread")
    _counts[";".join(reversed(stack))] += 1


def _start(signum: int, frame: FrameType | None) -> None:
    _counts.clear()
    signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)


def _stop(signum: int, frame: FrameType | None) -> None:
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    out = os.environ["AGENTPOST_BENCH_SAMPLES"]
    with open(out + ".part", "w") as written:
        written.writelines(f"{stack} {count}\n" for stack, count in _counts.items())
    os.replace(out + ".part", out)  # the benchmark waits for the whole file


if os.environ.get("AGENTPOST_BENCH_SAMPLES"):
    signal.signal(signal.SIGPROF, _sample)
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
