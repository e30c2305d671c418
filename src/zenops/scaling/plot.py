"""The replica count over time as a PNG (`zenops scale status --plot FILE.png`), from the loop's state.

:func:`prepare` turns a :class:`~zenops.scaling.state.ScalingState` into what is drawn (pure, unit-tested): the
``series`` (``[epoch_s, actual, target]`` per tick) as minutes since its first tick, MIN and MAX, and one
:class:`Marker` per recorded decision that acted (out, in, heal, stop: holds are the line itself), placed at the
time it was decided and the replica count it aimed at, numbered, with its reason, figures and result.
:func:`plot` draws it with matplotlib (imported only then, as zenops.report.plotting does): the actual and target
counts as steps, MIN and MAX dotted, the markers (a failed action in red), their numbered lines under the axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from zenops.errors import UsageError
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import ScalingState, iso

SYMBOLS = {"out": "^", "in": "v", "heal": "X", "stop": "s"}  # matplotlib markers per action
REASON_CHARS = 110  # a marker's line under the plot: its reason cut to this many characters
LISTED = 16  # markers listed under the plot (the newest); every one is drawn


@dataclass(frozen=True)
class Marker:
    """One decision that acted: ``n`` its number on the plot, at ``minute`` (since the series' start), drawn at
    ``replicas`` (the count it aimed at: out and in their target, heal and stop the count then)."""

    n: int
    minute: float
    replicas: int
    action: str
    at: str  # the decision's time as recorded (ISO 8601, UTC)
    reason: str
    result: str

    @property
    def failed(self) -> bool:
        return self.result.startswith("failed") or self.action == "stop"

    def line(self) -> str:
        """``1. 12:03:10 out 1 -> 2: waiting/replica 3.5 > 0.5 over 60 s (...) => done: web-2``."""
        reason = self.reason if len(self.reason) <= REASON_CHARS else self.reason[: REASON_CHARS - 3] + "..."
        result = f" => {self.result}" if self.result else ""
        return f"{self.n}. {self.at[11:19]} {self.action}: {reason}{result}"


@dataclass(frozen=True)
class PlotData:
    """What the plot shows (see the module's text)."""

    deployment: str
    start: str  # the first tick, ISO 8601 (the x axis counts minutes from it)
    minutes: tuple[float, ...]
    actual: tuple[int, ...]
    target: tuple[int, ...]
    bounds: Replicas
    markers: tuple[Marker, ...]

    @property
    def top(self) -> int:
        """The highest replica count on the plot (MAX, or more when the fleet was ever over it)."""
        return max([self.bounds.max, *self.actual, *self.target, *(m.replicas for m in self.markers)])


def _epoch(at: str) -> float | None:
    try:
        return datetime.fromisoformat(at).timestamp()
    except (TypeError, ValueError):
        return None


def prepare(state: ScalingState) -> PlotData:
    """The plot's data from the loop's ``state``. UsageError when the loop has not ticked yet (nothing to draw).
    A decision before the series' first tick (the series keeps the last 2000 ticks) or with a time that cannot be
    read is left out."""
    if not state.series:
        raise UsageError(
            f"nothing to plot: the scaling loop of {state.deployment} has recorded no tick yet",
            hint="plot once the loop has run a while (`zenops scale status` shows its ticks)",
        )
    t0 = state.series[0][0]
    markers: list[Marker] = []
    for d in state.decisions:
        action = str(d.get("action") or "")
        t = _epoch(str(d.get("at") or ""))
        if action not in SYMBOLS or t is None or t < t0 - 1:  # recorded to the second: a tick's own decision
            continue
        current = int(d.get("current") or 0)
        aim = int(d.get("target", current)) if action in ("out", "in") else current
        markers.append(
            Marker(
                len(markers) + 1, round(max(t - t0, 0.0) / 60, 3), aim, action, str(d.get("at")),
                str(d.get("reason") or ""), str(d.get("result") or ""),
            )
        )  # fmt: skip
    return PlotData(
        deployment=state.deployment,
        start=iso(t0),
        minutes=tuple(round((p[0] - t0) / 60, 3) for p in state.series),
        actual=tuple(int(p[1]) for p in state.series),
        target=tuple(int(p[2]) for p in state.series),
        bounds=state.replicas,
        markers=tuple(markers),
    )


def plot(state: ScalingState, path: Path) -> PlotData:
    """The PNG at ``path`` (see the module's text); returns what it drew."""
    # matplotlib here, not at the top: only --plot pays for it. Agg renders without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    data = prepare(state)
    listed = data.markers[-LISTED:]
    fig = Figure(figsize=(12, 4.5 + 0.22 * len(listed)), layout="constrained")
    FigureCanvasAgg(fig)
    ax, notes = fig.subplots(2, 1, height_ratios=[4.5, 0.3 + 0.22 * len(listed)])
    ax.step(data.minutes, data.actual, where="post", color="C0", linewidth=2, label="actual replicas")
    ax.step(data.minutes, data.target, where="post", color="C1", linestyle="--", label="target")
    for value, name in ((data.bounds.min, "MIN"), (data.bounds.max, "MAX")):
        ax.axhline(value, color="0.5", linestyle=":", linewidth=1)
        ax.annotate(f"{name} {value}", (0, value), xytext=(2, 2), textcoords="offset points", color="0.4")
    for m in data.markers:
        color = "C3" if m.failed else "C2"
        ax.plot([m.minute], [m.replicas], marker=SYMBOLS[m.action], color=color, markersize=10, linestyle="")
        ax.annotate(str(m.n), (m.minute, m.replicas), xytext=(5, 5), textcoords="offset points", fontsize="small")
    ax.set_ylim(0, data.top + 1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"minutes since {data.start}")
    ax.set_ylabel("replicas")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title(f"{data.deployment}: replicas {data.bounds} over time, the scaling decisions numbered")
    notes.axis("off")
    text = "\n".join(m.line() for m in listed) or "no scaling decision acted in this series"
    notes.text(0, 1, text, va="top", ha="left", family="monospace", fontsize="x-small", transform=notes.transAxes)
    fig.savefig(path, format="png", dpi=100)
    return data
