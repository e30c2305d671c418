"""`zenops bench`: run `vllm bench serve` against every server zenops started, from inside the server's own image,
and bring the results home with their provenance.

The package, by seam:

* ``profiles``  the profiles of zenops/catalog/bench.yaml and the runs they make (pure)
* ``client``    the benchmark client's docker command line, the CPUs it may use, what is recorded of a server, why
  runs failed (pure: the role's filter plugin, plugins/filter/vllm_bench.py, and the unit tests call them)
* ``run``       ``bench_inventory``: runs playbooks/bench.yml (the vllm_server role's ``bench`` entry point) and
  writes the run directory. It imports ansible-runner and zenops.serve: import it by name
  (``from zenops.bench import run``); this package re-exports only the pure modules, so the filter plugin and
  ``import zenops.bench`` stay light.

The run directory::

    runs/<run-id>/run.json                          the manifest: profile, runs, flavor and price, versions, timing
    runs/<run-id>/<host>/facts.json, plan.json     the host's CPU topology and its serving plan
    runs/<run-id>/<host>/<instance>/<platform>-c<N>.json / .txt    the bench result and text summary, per level
    runs/<run-id>/<host>/<instance>/server-<platform>.json / .log  the server (image, versions inside it), log tail

`zenops report runs/<run-id>` reads it back (run.json prices the results).
"""

from __future__ import annotations

from zenops.bench.client import (
    BENCH_LABEL,
    CLIENT_RESULT_DIR,
    KEY_WRAPPER,
    RUN_ID,
    SAMPLER,
    SERVER_METRICS_SUFFIX,
    TIMED_OUT,
    bench_argv,
    client_name,
    describe_servers,
    free_cpus,
    result_stem,
    run_failures,
    server_view,
)
from zenops.bench.profiles import BenchRun, Profile, parse_levels, profiles, runs_for

__all__ = [
    "BENCH_LABEL",
    "CLIENT_RESULT_DIR",
    "KEY_WRAPPER",
    "RUN_ID",
    "SAMPLER",
    "SERVER_METRICS_SUFFIX",
    "TIMED_OUT",
    "BenchRun",
    "Profile",
    "bench_argv",
    "client_name",
    "describe_servers",
    "free_cpus",
    "parse_levels",
    "profiles",
    "result_stem",
    "run_failures",
    "runs_for",
    "server_view",
]
