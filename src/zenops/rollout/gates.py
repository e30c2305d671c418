"""The rollout's gates. They measure and return verdicts; the driver (zenops.rollout.run.Rollout) decides what a
verdict means for the rollout (go on, revert, pause).

* the health gate runs inside the serve step (playbooks/serve.yml: /health, /v1/models, a completion, the platform,
  --min-healthy); ``health_verdict`` reads its failure: the health gate, or the old container that could not stop;
* the performance gate (``PerfGate``): the baseline before anything changes, sized by time (zenops.rollout.plan's
  GateSizing), then each batch's new servers against it, an untouched control measured at the same time. Servers too
  busy to answer its check give a ``busy`` verdict, not an error.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.deployment.rollouts import BatchState
from zenops.deployment.services import gateway as gw_lib
from zenops.errors import RunFailedError
from zenops.rollout.plan import (
    Sample,
    Verdict,
    gross,
    more_baseline_runs,
    settled,
    sized_prompts,
    spread,
    verdict,
    window,
)

if TYPE_CHECKING:
    from zenops.rollout.steps import GateDriver

STOP = "stop"  # not a gate: the old container could not be stopped (what health_verdict tells from the health gate)
# what Docker says when a container cannot be stopped (a zombie PID 1: a container started without an init)
_STOP_FAILURES = ("cannot stop container", "can not be killed", "is zombie")

# the gate's bench run could not measure because the servers were too busy: its answer check ran out of time
_BUSY_TASK = "answers"
_BUSY_MESSAGES = ("timed out", "did not answer 200 within")


def replace_failure(error: RunFailedError) -> str:
    """Why replacing a batch's servers failed: STOP when the old container could not be stopped (reported as that,
    with the host and the container Docker names, not as a failed health gate), else "health"."""
    text = " ".join(f.message for f in error.failures) or error.message
    return STOP if any(s in text for s in _STOP_FAILURES) else "health"


def health_verdict(error: RunFailedError, default_host: str) -> Verdict:
    """The serve step's failure as a verdict of the health gate (``server``: the failing host, ``figures['gate']``:
    "health", or STOP when the old container could not be stopped)."""
    host = error.failures[0].host if error.failures else default_host
    return Verdict(host, "fail", [error.message], {"gate": replace_failure(error)})


def busy_failure(error: RunFailedError) -> str | None:
    """When a gate's bench run failed because the servers did not answer its check in time (a fleet saturated by
    live traffic): the host and what timed out; None for any other failure (a server down, a wrong key, a broken
    image)."""
    for f in error.failures:
        if not f.unreachable and _BUSY_TASK in f.task and any(m in f.message for m in _BUSY_MESSAGES):
            return f"{f.host}: {' '.join(f.message.split())[:300]}"
    return None


def busy_verdict(what: str, detail: str) -> Verdict:
    return Verdict(what, "busy", [detail], {})


UNSETTLED = "spread"  # figures["gate"] of a baseline whose runs never agreed within --max-spread


def unsettled_verdict(
    runs: dict[str, list[Sample]], repeats: int, max_spread: float, prompts: int, elapsed_s: float
) -> Verdict:
    """The baseline's runs did not agree within --max-spread before its limit (runs or time): live load makes the
    figures wander, so no gate could tell a change from noise. A ``busy`` verdict (the rollout pauses before anything
    changes) naming the worst server and the figures: its spread against --max-spread, the runs, the time spent."""
    spreads = {s: spread([x.output_tok_s for x in v]) for s, v in window(runs, repeats).items()}
    worst = max(sorted(spreads), key=lambda s: spreads[s], default="")
    n_runs = max((len(v) for v in runs.values()), default=0)
    detail = (
        f"the runs did not settle: run-to-run spread {spreads.get(worst, 0.0):.0%} on {worst or 'no server'} over "
        f"--max-spread {max_spread:.0%} after {n_runs} run(s) of {prompts} prompts in {elapsed_s:.0f} s"
    )
    figures = {
        "gate": UNSETTLED,
        "spread": round(spreads.get(worst, 0.0), 4),
        "max_spread": max_spread,
        "runs": n_runs,
        "elapsed_s": round(elapsed_s, 1),
        "server": worst,
        "tok_s": {s: [round(x.output_tok_s, 2) for x in v] for s, v in sorted(runs.items())},
    }
    return Verdict("the baseline", "busy", [detail], figures)


class TooBusyError(Exception):
    """A gate's bench run found the servers too busy to answer in time (busy_failure's detail)."""


class PerfGate:
    """The performance gate of one rollout invocation: measures through zenops's light load client (zenops.bench,
    client "zenops") and returns verdicts."""

    def __init__(self, driver: GateDriver) -> None:
        self.d = driver
        self._told_apart = False  # the note on hosts that share a machine, once per invocation

    # --- measuring ----------------------------------------------------------------------------------------------

    def sharing(self, hosts: list[str]) -> list[list[str]]:
        """The groups of these hosts that run on one kernel (the same boot id in their saved facts): containers on
        one machine, whose servers compete for its CPUs. Hosts without a boot id (facts from before it, or a kernel
        without one) are taken to be machines of their own."""
        by_boot: dict[str, list[str]] = {}
        for host, boot in self.boot_ids(hosts).items():
            if boot:
                by_boot.setdefault(boot, []).append(host)
        return [sorted(g) for g in by_boot.values() if len(g) > 1]

    def note_unknown_boot_ids(self, hosts: list[str]) -> None:
        unknown = sorted(h for h, boot in self.boot_ids(hosts).items() if not boot)
        if unknown and len(hosts) > 1:
            self.d.note(
                f"the saved facts of {', '.join(unknown)} have no kernel boot id (gathered by an older zenops): if "
                f"hosts share a machine they are measured at once, and measure each other (`zenops facts -i "
                f"{self.d.inventory}` reads them again)"
            )

    def boot_ids(self, hosts: list[str]) -> dict[str, str]:
        """Host -> the kernel boot id in its saved facts ("" when they have none)."""
        from zenops.facts import saved_facts  # noqa: PLC0415

        return {h: str((saved_facts(self.d.ctx.config, h) or {}).get("boot_id") or "") for h in hosts}

    def measure(self, hosts: list[str], label: str, prompts: int | None = None) -> dict[str, Sample]:
        """One run of the load client per server of these hosts: all at once (the control measured under the same
        conditions as the changed servers), or one host after another when some of them share a machine: measured
        at once they would measure each other (two servers on one core halve each other's figures, at random).
        Raises TooBusyError when the servers do not answer the run's first check in time."""
        from zenops.bench.run import BenchRequest, bench_inventory  # noqa: PLC0415

        d = self.d
        sharing = self.sharing(hosts)
        if sharing and not self._told_apart:
            self._told_apart = True
            groups = "; ".join(", ".join(g) for g in sharing)
            d.note(f"{groups}: one machine (the same kernel): measured one after another, not at the same time")
        req = BenchRequest(
            profile="seed",
            concurrency=(d.req.gate_concurrency,),
            num_prompts=prompts or d.state.gate_prompts or d.req.gate_prompts,
            input_len=d.req.gate_input_len,
            output_len=d.req.gate_output_len,
            num_warmups=d.req.gate_warmups,
            runs_dir=Path(d.state.run_dir),
            run_id=f"{label}-{time.strftime('%H%M%S')}",
            timeout=600,
            one_at_a_time=bool(sharing),
            answer_timeout=d.req.answer_timeout,
            client="zenops",  # no torch to import per run: ~14 s less per server and run (zenops.bench.loadgen)
            known_platforms=d.platforms_now(hosts),
        )
        try:
            outcome = bench_inventory(d.ctx.quiet(), d.inventory, req, limit=",".join(hosts))
        except RunFailedError as e:
            busy = busy_failure(e)
            if busy is None:
                raise
            raise TooBusyError(busy) from e
        out: dict[str, Sample] = {}
        for r in outcome.report.results:
            host = str(r.metadata.get("host") or "")
            port = d.port_of(host, r.instance)
            out[gw_lib.backend_name(host, port)] = Sample(
                r.output_tok_s, r.median_ttft_ms, r.failed or 0, dict(r.server) if r.server else None, r.duration_s
            )
        return out

    # --- the baseline -------------------------------------------------------------------------------------------

    def baseline(self) -> Verdict | None:
        """Measure every server before anything changes, sized by time: a first run of --gate-prompts gives each
        server's pace, the measured runs have as many prompts as last --gate-seconds at the slowest pace, and they
        repeat until the last --baseline-repeats agree within --max-spread (or the time limit). Kept in the state;
        None when measured, a ``busy`` verdict when the fleet was too busy to answer or its runs never agreed within
        --max-spread (nothing changed: the rollout pauses, and a re-run measures the baseline again)."""
        d = self.d
        hosts = sorted(d.record.plans)
        sizing = d.req.sizing
        c = d.req.gate_concurrency
        d.note(
            f"measuring the baseline of {len(hosts)} host(s) before changing anything (C={c}, runs of at least "
            f"{sizing.min_seconds:g} s after {d.req.gate_warmups} warm-up requests, until the last "
            f"{sizing.repeats} agree within {d.req.limits.max_spread:.0%}; at most {sizing.max_repeats} runs or "
            f"{sizing.time_limit_s:g} s per server measured in turn)"
        )
        self.note_unknown_boot_ids(hosts)
        t0 = time.monotonic()
        try:
            first = self.measure(hosts, "baseline-sizing", sizing.first_prompts)
            prompts = max(
                (sized_prompts(sizing.first_prompts, x.duration_s, sizing, concurrency=c) for x in first.values()),
                default=sizing.first_prompts,
            )
            d.state.gate_prompts = prompts
            pace = ", ".join(f"{s} {x.duration_s:.1f} s" for s, x in sorted(first.items()) if x.duration_s)
            runs: dict[str, list[Sample]] = {}
            if prompts == sizing.first_prompts:  # long enough already: it counts
                runs = {server: [x] for server, x in first.items()}
                d.note(f"a run of {prompts} prompts lasts at least {sizing.min_seconds:g} s ({pace}): it counts")
            else:
                d.note(f"{sizing.first_prompts} prompts took {pace}: each gate run has {prompts} prompts")
            t_runs = time.monotonic()
            k = len(next(iter(runs.values()), []))
            # measure() takes every host one at a time when any of them share a kernel: the limit is each one's
            in_turn = len(hosts) if self.sharing(hosts) else 1
            while more_baseline_runs(runs, sizing, d.req.limits, elapsed_s=time.monotonic() - t_runs, in_turn=in_turn):
                k += 1
                for server, x in self.measure(hosts, f"baseline{k}", prompts).items():
                    runs.setdefault(server, []).append(x)
        except TooBusyError as e:
            return busy_verdict("the baseline", str(e))
        if not settled(runs, sizing, d.req.limits):  # a baseline that says nothing: no canary changed against it
            return unsettled_verdict(runs, sizing.repeats, d.req.limits.max_spread, prompts, time.monotonic() - t0)
        kept = window(runs, sizing.repeats)
        st = d.state
        st.baseline = {server: [dataclasses.asdict(x) for x in v] for server, v in kept.items()}
        st.baseline_spread = max((spread([x.output_tok_s for x in v]) for v in kept.values()), default=0.0)
        st.baseline_all = {server: [round(x.output_tok_s, 2) for x in v] for server, v in runs.items()}
        st.baseline_s = round(time.monotonic() - t0, 1)
        d.save()
        figures = ", ".join(
            f"{s} {statistics.fmean(x.output_tok_s for x in v):.1f} tok/s" for s, v in sorted(kept.items())
        )
        n_runs = max((len(v) for v in runs.values()), default=0)
        d.note(
            f"baseline: {figures}; the last {sizing.repeats} of {n_runs} runs of {prompts} prompts, run-to-run "
            f"spread {st.baseline_spread:.0%} ({st.baseline_s:.0f} s)"
        )
        d.ledger.event(
            st.id, "baseline", servers=st.baseline, spread=st.baseline_spread, prompts=prompts, runs=st.baseline_all,
        )  # fmt: skip
        return None

    def _base(self) -> dict[str, list[Sample]]:
        return {s: [Sample(**x) for x in v] for s, v in self.d.state.baseline.items()}

    # --- a batch ------------------------------------------------------------------------------------------------

    def control_host(self, batch_index: int) -> str | None:
        """An untouched host: one of a later batch (or not rolled at all)."""
        d = self.d
        changed = {h for b in d.state.batches[: batch_index + 1] for h in b.hosts}
        untouched = [h for h in sorted(d.record.plans) if h not in changed]
        return untouched[0] if untouched else None

    def gated(
        self, i: int, hosts: list[str], who: str, judge: Callable[[dict[str, list[Sample]]], list[Verdict]]
    ) -> list[Verdict]:
        """Measure these hosts and judge the runs so far; a fail on the figures alone (every request answered)
        measures again, up to the sizing's ``gate_runs`` runs in all, judged on their means: one run's noise is not
        a regression, while a slower release stays below in every run. A fail far beyond its bounds (plan.gross: a
        slower release, not noise) is not measured again. A busy fleet gives a ``busy`` verdict."""
        d = self.d
        runs: dict[str, list[Sample]] = {}
        limit = d.req.sizing.gate_runs  # at least 1 (RolloutRequest.sizing)
        for k in range(1, limit + 1):
            try:
                now = self.measure(hosts, f"gate-batch{i + 1}" + (f"-run{k}" if k > 1 else ""))
            except TooBusyError as e:
                return [busy_verdict(who, str(e))]
            for server, sample in now.items():
                runs.setdefault(server, []).append(sample)
            verdicts = judge(runs)
            failing = [v for v in verdicts if v.outcome == "fail"]
            if not failing or k == limit or any(v.figures.get("failed") for v in failing):
                return verdicts
            changes = ", ".join(f"{v.server} {v.figures['tok_s_change']:+.0%}" for v in failing)
            if all(gross(v) for v in failing):
                d.note(f"{changes} in gate run {k}: far beyond the gate's bounds, a slower release: not measured again")
                return verdicts
            d.note(f"{changes} in gate run {k} of up to {limit}: measuring again (one run's noise is not a change)")
        return verdicts

    def batch(self, i: int, batch: BatchState) -> list[Verdict]:
        """The batch's new servers against their baseline, a control host measured with them: an untouched host, or
        when none is left (the last batch) a host whose new release passed an earlier batch's gate, against its
        figures then (``reference``). Without a control the baseline alone judges, and a machine that slowed down
        since the baseline (a busy neighbour) would read as a slower release."""
        d = self.d
        control = self.control_host(i)
        ref = None if control else self.reference(i, batch)
        if ref:
            control = str(ref["host"])
            d.note(
                f"no untouched host left for batch {i + 1}: {control} (its new release passed batch "
                f"{int(ref['batch']) + 1}'s gate) is the control, against its figures at that gate"
            )
        hosts = batch.hosts + ([control] if control else [])
        base = self._base()

        def judge(runs: dict[str, list[Sample]]) -> list[Verdict]:
            # every server of the control host is left out; one of them is the control: the reference's, or the first
            control_servers = [s for s in runs if control and s.startswith(f"{control}-")]
            if ref:
                cs = ref["server"] if ref["server"] in control_servers else None
                control_base = [Sample(float(ref["tok_s"]), ref.get("ttft_ms"))]
                prior = (float(ref.get("drift") or 1.0), float(ref.get("ttft_drift") or 1.0))
            else:
                cs = control_servers[0] if control_servers else None
                control_base, prior = (base.get(cs, []) if cs else []), (1.0, 1.0)
            verdicts = []
            for server, samples in sorted(runs.items()):
                if server in control_servers:
                    continue
                baseline = base.get(server)
                if not baseline:
                    if len(samples) == 1:
                        d.ctx.warn(
                            f"{server}: no baseline (a new server): the performance gate only checks it answered"
                        )
                    continue
                v = verdict(
                    server,
                    baseline,
                    samples,
                    d.req.limits,
                    fleet_spread=d.state.baseline_spread or 0.0,
                    control_baseline=control_base if cs else [],
                    control_now=runs.get(cs) if cs else None,
                    prior_drift=prior,
                )
                if cs and v.figures.get("drift"):
                    v.figures["control"] = cs
                verdicts.append(v)
            return verdicts

        verdicts = self.gated(i, hosts, f"batch {i + 1}'s new servers", judge)
        measured = [v for v in verdicts if "new_tok_s" in v.figures]
        if measured and all(v.outcome == "pass" for v in verdicts):
            v = measured[0]
            d.state.gate_reference = {
                "batch": i,
                "host": v.server.rsplit("-", 1)[0],
                "server": v.server,
                "tok_s": v.figures["new_tok_s"],
                "ttft_ms": v.figures.get("new_ttft_ms"),
                "drift": v.figures.get("drift") or 1.0,
                "ttft_drift": v.figures.get("ttft_drift") or 1.0,
            }
        return verdicts

    def reference(self, i: int, batch: BatchState) -> dict[str, Any] | None:
        """The control of a batch with no untouched host left: the last earlier batch whose gate passed (the state's
        ``gate_reference``), unless its host is in this batch or no longer serves (retired)."""
        ref = self.d.state.gate_reference
        if not ref or int(ref.get("batch", i)) >= i:
            return None
        host = str(ref.get("host") or "")
        if not host or host in batch.hosts or host in self.d.state.retired:
            return None
        return dict(ref)

    def pairs(self, i: int, against: Mapping[str, str]) -> list[Verdict]:
        """Each new host against its old host's baseline (``against``: new -> old); the old ones, measured at the
        same time, are the controls (their instances paired in port order). A surge: one pair; blue/green: the whole
        new set against the old."""
        d = self.d
        base = self._base()
        olds = {old: sorted((s for s in base if s.startswith(f"{old}-")), key=port_key) for old in against.values()}

        def judge(runs: dict[str, list[Sample]]) -> list[Verdict]:
            verdicts = []
            for new, old in sorted(against.items()):
                news = sorted((s for s in runs if s.startswith(f"{new}-")), key=port_key)
                for k, server in enumerate(news):
                    if not olds[old]:
                        if len(runs[server]) == 1:
                            d.ctx.warn(f"{server}: no baseline of {old}: the performance gate only checks it answered")
                        continue
                    ref = olds[old][min(k, len(olds[old]) - 1)]
                    verdicts.append(
                        verdict(
                            server,
                            base[ref],
                            runs[server],
                            d.req.limits,
                            fleet_spread=d.state.baseline_spread or 0.0,
                            control_baseline=base[ref],
                            control_now=runs.get(ref),
                        )
                    )
            return verdicts

        hosts = [*sorted(against), *sorted(set(against.values()) - set(against))]
        who = (
            f"the surge's new server {next(iter(against))}"
            if len(against) == 1
            else f"the new servers {', '.join(sorted(against))}"
        )
        return self.gated(i, hosts, who, judge)


def port_key(server: str) -> int:
    """A gateway server name's port (``<host>-<port>``), for ordering."""
    tail = server.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
