"""The run context: what every library operation that runs playbooks takes besides its request.

Built once at the CLI edge (``App.run_context()`` in zenops/cli/context.py) from the config, the output mode and the
global -v, and handed down unchanged: the operations (``hosts.up_inventory``, ``hosts.down_inventory``,
``serve.serve_inventory``, ``bench.run.bench_inventory``, ``deploy.up_cloud``, ``facts.gather_facts``,
``bandwidth.measure_inventory``) take ``(ctx, <target>, <request>, *, limit/check...)`` and nothing else of this kind.
A new operation (rollout, campaign) takes one too, instead of the tail config, verbosity, sink, cancel, note.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from zenops.config import Config
from zenops.runner import ProgressSink, RunnerSettings, RunResult, RunSpec, run_playbook, settings_from_config


def _ignore(_text: str) -> None:
    pass


@dataclass
class RunContext:
    """``config``: the configuration in effect; ``settings``: the runner's settings, derived from it; ``sink``: where
    playbook progress goes (None: nowhere); ``cancel``: set from another thread to stop a run (Ctrl-C stops it too);
    ``verbosity``: Ansible's -v count (the CLI's -v minus one); ``note``: a line of progress outside a playbook run;
    ``warnings``: everything :meth:`warn` said, in order."""

    config: Config
    sink: ProgressSink | None = None
    cancel: threading.Event | None = None
    verbosity: int = 0
    note: Callable[[str], None] = _ignore
    warnings: list[str] = field(default_factory=list)
    settings: RunnerSettings = field(init=False)

    def __post_init__(self) -> None:
        self.settings = settings_from_config(self.config)

    def warn(self, text: str) -> None:
        """A warning: kept in ``warnings`` (the operation's result carries it) and said now through ``note``."""
        self.warnings.append(text)
        self.note(text)

    def run(self, spec: RunSpec) -> RunResult:
        """Run one playbook of the collection with this context's settings, progress sink and cancel event."""
        return run_playbook(spec, self.settings, self.sink, self.cancel)

    def quiet(self, *, cancel: threading.Event | None = None) -> RunContext:
        """The same context without notes, with warnings of its own (and another cancel event when given): for an
        operation run as a step of another one, whose own warnings are not the outer operation's."""
        return replace(self, note=_ignore, warnings=[], cancel=cancel or self.cancel)
