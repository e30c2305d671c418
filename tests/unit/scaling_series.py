"""Recorded metric series for the scaling tests (zenops.scaling): per replica, every 10 s (the metrics role's scrape
interval), the gauges vLLM exports (requests waiting and running, KV cache usage) as a replica's Sample sums them.

A table's first line names the columns: ``t`` then ``REPLICA.FIELD`` (waiting, running, kv, ttft); ``-`` is a
figure not read."""

from __future__ import annotations

from zenops.scaling.decide import Sample

_FIELDS = {"waiting": "waiting", "running": "running", "kv": "kv_usage", "ttft": "ttft_p95_s"}


def table(text: str) -> dict[str, list[Sample]]:
    lines = [line.split() for line in text.strip().splitlines() if line.strip() and not line.startswith("#")]
    head, rows = lines[0], lines[1:]
    names = list(dict.fromkeys(col.split(".")[0] for col in head[1:]))
    out: dict[str, list[Sample]] = {n: [] for n in names}
    for row in rows:
        t = float(row[0])
        per: dict[str, dict[str, float | None]] = {n: {} for n in names}
        for col, cell in zip(head[1:], row[1:], strict=True):
            name, what = col.split(".")
            per[name][_FIELDS[what]] = None if cell == "-" else float(cell)
        for name in names:
            out[name].append(Sample(t, **per[name]))  # type: ignore[arg-type]
    return out


# Two replicas of 9 seats: the load rises at t=30 s until both run 9 and queue more and more.
RISING = table("""
t    web-1.waiting web-1.running web-2.waiting web-2.running
0    0 5   0 6
10   0 6   0 6
20   0 7   0 8
30   0 8   1 9
40   1 9   1 9
50   2 9   2 9
60   2 9   3 9
70   3 9   3 9
80   4 9   4 9
90   5 9   5 9
100  5 9   6 9
110  6 9   6 9
120  6 9   7 9
130  7 9   7 9
140  7 9   8 9
150  8 9   8 9
160  7 9   8 9
170  8 9   9 9
180  9 9   9 9
""")


def _cycled(
    replicas: dict[str, tuple[list[float], list[float]]], until: int, step: int = 10
) -> dict[str, list[Sample]]:
    """A long recorded series: each replica's (waiting, running) figures repeated in turn from t=0 to ``until``."""
    out: dict[str, list[Sample]] = {}
    for name, (waiting, running) in replicas.items():
        out[name] = [
            Sample(float(t), waiting=waiting[i % len(waiting)], running=running[i % len(running)])
            for i, t in enumerate(range(0, until + 1, step))
        ]
    return out


# Three replicas of 9 seats at night, nothing waiting for 400 s: web-1 runs 1 or 2 requests, web-2 0 or 1, web-3 none.
FALLING = _cycled(
    {
        "web-1": ([0], [2, 1, 2, 2, 1]),
        "web-2": ([0], [1, 1, 0, 1, 1]),
        "web-3": ([0], [0]),
    },
    400,
)

# Two replicas with every seat busy and a bursty queue: most scrapes find 0 to 2 waiting, one in four 15 (a burst
# the batch absorbs by the next scrape). Its mean over a minute crosses 4.5, its median never does: 20 minutes that
# must not scale out (nor in: the seats are full).
NOISY = _cycled(
    {
        "web-1": ([1, 2, 15, 0], [9]),
        "web-2": ([0, 15, 1, 2], [9, 8, 9, 9]),
    },
    1200,
)
