"""The vLLM x zentorch x torch compatibility table (catalog/compat.yaml): look up, check and explain pairs, and the
engine a serving request asks for (:func:`engine_of`: the pair and the image route, what `up`, `plan`, `rollout`
and campaigns all resolve with).

An unsupported or known-bad pair is refused before anything is built, naming a good alternative; with
``force=True`` (`--force-unsupported`) it proceeds with a loud warning. The table's default pair is a tested one, and
its default route is the one zenops's CI runs: a pair or route that is not is labelled "not verified" where it is
planned or deployed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from zenops.errors import ExitCode, UsageError, ZenopsError
from zenops.planner import parse_version
from zenops.request_options import IMAGE_SOURCES

STATUSES = ("tested", "supported", "broken")
ROUTES = ("dockerfile-cpu-plus-zentorch", "dockerfile-cpu-zen", "dockerfile-zen", "pip")

# what zenops verified for a pair of each status (`zenops images`, the engine's label in `plan` and `up`)
STATUS_MEANING = {
    "tested": "run end to end (image made, vLLM serving, benchmarked) by zenops's landing CI, by its own route only",
    "supported": "documented as working by the zentorch/vLLM sources; zenops only renders and lints its image build",
    "broken": "known not to work: refused unless --force-unsupported",
}
# each image route (--image-source): how it makes the image, and what zenops's tests verified of it, whatever the pair
SOURCE_MEANING = {
    "pip": (
        "vLLM CPU wheels from a package index onto a base image",
        "run end to end by zenops's landing CI (with the tested pair)",
    ),
    "build": (
        "vLLM's Dockerfile at the pair's tag",
        "only rendered and linted by zenops's tests (vLLM's sources cannot be fetched where they run)",
    ),
    "prebuilt": (
        "a published image, relabelled, with a zentorch layer when it lacks zentorch",
        "run by zenops's tests on a local stand-in image only (the relabel and the layer step), never a real engine",
    ),
}


class IncompatiblePairError(ZenopsError):
    exit_code = ExitCode.INCOMPATIBLE


@dataclass(frozen=True)
class Combo:
    id: str
    vllm: str
    zentorch: str
    torch: str
    status: str
    route: str
    plugin: str  # out-of-tree (VLLM_PLUGINS=zentorch) | in-tree (ZenCpuPlatform, vLLM >= 0.18)
    prebuilt: str | None = None
    pip: str | None = None
    note: str = ""
    broken_because: str = ""
    use_instead: str | None = None

    @property
    def image_tag(self) -> str:
        """Images zenops makes are tagged with the compatibility id."""
        return f"zenops/vllm-zen:{self.id}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "image_tag": self.image_tag}


@dataclass(frozen=True)
class Table:
    default: Combo  # a tested pair: what zenops deploys when no --vllm is given is what its CI runs
    combos: tuple[Combo, ...]

    def by_id(self, combo_id: str) -> Combo | None:
        return next((c for c in self.combos if c.id == combo_id), None)


def route_for(vllm: str) -> str:
    """How vLLM's own sources build a zen image at that release (Dockerfile routes changed in 0.18 and 0.33)."""
    v = parse_version(vllm)
    if v < (0, 18, 0):
        return "dockerfile-cpu-plus-zentorch"
    if v < (0, 33, 0):
        return "dockerfile-cpu-zen"
    return "dockerfile-zen"


def check_table(data: dict[str, Any]) -> Table:
    combos = []
    for raw in data["combos"]:
        c = Combo(**{k: (str(v) if k in ("vllm", "zentorch", "torch") else v) for k, v in raw.items()})
        if c.status not in STATUSES or c.route not in ROUTES:
            raise ValueError(f"compat.yaml: {c.id}: bad status {c.status!r} or route {c.route!r}")
        if c.route != "pip" and c.route != route_for(c.vllm):
            raise ValueError(f"compat.yaml: {c.id}: route {c.route} contradicts vLLM {c.vllm}'s Dockerfiles")
        if c.status == "broken" and not (c.broken_because and c.use_instead):
            raise ValueError(f"compat.yaml: {c.id}: a broken pair needs broken_because and use_instead")
        combos.append(c)
    ids = [c.id for c in combos]
    if len(ids) != len(set(ids)):
        raise ValueError("compat.yaml: duplicate ids")
    by_id = {c.id: c for c in combos}
    for c in combos:
        if c.use_instead and by_id.get(c.use_instead, c).status == "broken":
            raise ValueError(f"compat.yaml: {c.id}: use_instead must name a working pair")
    if "test_default" in data:
        raise ValueError("compat.yaml: test_default is gone: `default` is the tested pair (one default)")
    default = by_id.get(data["default"])
    if default is None or default.status != "tested":
        raise ValueError(
            f"compat.yaml: default {data['default']} must be a pair of the table whose status is tested: what zenops "
            "deploys by default is what its tests run"
        )
    return Table(default, tuple(combos))


@cache
def table() -> Table:
    text = resources.files("zenops.catalog").joinpath("compat.yaml").read_text(encoding="utf-8")
    return check_table(yaml.safe_load(text))


def _working(t: Table) -> list[Combo]:
    return [c for c in t.combos if c.status != "broken"]


def resolve(
    vllm: str | None = None,
    zentorch: str | None = None,
    *,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Combo:
    """The combination to build or run. Raises IncompatiblePairError for a broken or unknown pair unless ``force``."""
    t = table()
    if vllm is None and zentorch is None:
        return t.default
    if vllm is None:  # not a pair at all: bad usage (exit 2), on every command that takes --zentorch
        with_it = [c for c in _working(t) if c.zentorch == zentorch] or [t.default]
        raise UsageError(
            f"--zentorch {zentorch} without --vllm: a zentorch release only works with some vLLM releases",
            hint="name the pair, e.g. " + ", ".join(f"--vllm {c.vllm} --zentorch {c.zentorch}" for c in with_it),
        )
    candidates = [c for c in t.combos if c.vllm == vllm and (zentorch is None or c.zentorch == zentorch)]
    working = [c for c in candidates if c.status != "broken"]
    if working:
        return sorted(working, key=lambda c: STATUSES.index(c.status))[0]
    if candidates:  # known bad
        bad = candidates[0]
        alt = t.by_id(bad.use_instead or "") or t.default
        message = f"vLLM {vllm} with zentorch {bad.zentorch} is known not to work: {bad.broken_because}"
        hint = f"use vLLM {alt.vllm} with zentorch {alt.zentorch} ({alt.id})"
    else:
        same_vllm = [c for c in _working(t) if c.vllm == vllm]
        pair = f"vLLM {vllm}" + (f" with zentorch {zentorch}" if zentorch else "")
        message = f"{pair} is not in zenops's compatibility table"
        alt = same_vllm[0] if same_vllm else t.default
        hint = f"use vLLM {alt.vllm} with zentorch {alt.zentorch} ({alt.id}); `zenops images` lists the supported pairs"
        if not any(c.vllm == vllm for c in t.combos):
            hint += f" (vLLM releases it knows: {', '.join(known_vllm(t))})"
    if not force:
        raise IncompatiblePairError(message, hint=f"{hint}; or --force-unsupported to try anyway")
    if warn is not None:
        warn(f"UNSUPPORTED: {message}. Proceeding because of --force-unsupported; expect failures. ({hint})")
    return Combo(
        id=f"vllm-{vllm}-zentorch-{zentorch or 'unpinned'}-unsupported",
        vllm=vllm,
        zentorch=zentorch or "unpinned",
        torch="unknown",
        status="broken",
        route=route_for(vllm),
        plugin="out-of-tree" if parse_version(vllm) < (0, 18, 0) else "in-tree",
        note="forced with --force-unsupported",
    )


def known_vllm(t: Table | None = None) -> list[str]:
    """The vLLM releases the compatibility table has a working pair for, oldest first."""
    return sorted({c.vllm for c in _working(t or table())}, key=parse_version)


def check_vllm(version: str | None) -> None:
    """Refuse (exit 11, as `up` and `images` do) a vLLM release the table has no pair for: `zenops plan --vllm 9.9.9`
    plans nothing anyone can deploy. The message names the releases it knows. None (not given): the default pair."""
    t = table()
    if version is None or any(c.vllm == version for c in t.combos):
        return
    raise IncompatiblePairError(
        f"vLLM {version} is not in zenops's compatibility table",
        hint=f"use one of {', '.join(known_vllm(t))} (default {t.default.vllm}); `zenops images` lists the pairs",
    )


def build_args(combo: Combo, flags: frozenset[str]) -> dict[str, str]:
    """Docker build args for vLLM's Dockerfile.cpu at that release, from the build host's CPU flags.

    Up to 0.17 the ISA flags are switched on explicitly (and before 0.18 otherwise auto-detected from the BUILD host);
    from 0.14.1 VLLM_CPU_AMXBF16 defaults to 1 and forces AMX code on CPUs without AMX (Genoa): set it from the facts.
    From 0.18 the x86 build makes AVX2 and AVX-512 variants itself.
    """
    v = parse_version(combo.vllm)
    if combo.route == "pip" or v >= (0, 18, 0):
        return {}
    args = {
        "VLLM_CPU_DISABLE_AVX512": "0" if "avx512f" in flags else "1",
        "VLLM_CPU_AVX512BF16": "1" if "avx512_bf16" in flags else "0",
        "VLLM_CPU_AVX512VNNI": "1" if "avx512_vnni" in flags else "0",
    }
    if v >= (0, 14, 1):
        args["VLLM_CPU_AMXBF16"] = "1" if "amx_bf16" in flags else "0"
    if v >= (0, 16, 0):
        args["VLLM_CPU_AVX2"] = "1" if "avx2" in flags else "0"
        args["VLLM_CPU_AVX512"] = "1" if "avx512f" in flags else "0"
    return args


# --- the engine a request asks for ------------------------------------------------------------------------------


def own_source(combo: Combo) -> str:
    """The image route (--image-source) that makes ``combo`` as the table describes it: pip for a package-index
    pair, else a build from vLLM's source. A tested pair is tested by this route only."""
    return "pip" if combo.route == "pip" else "build"


@dataclass(frozen=True)
class Engine:
    """What serves: the vLLM/zentorch pair and how its image is made (--image-source; --image-ref for prebuilt)."""

    combo: Combo
    image_source: str  # pip | build | prebuilt
    prebuilt_ref: str | None = None  # prebuilt: the image given (None: the pair's published one)

    @property
    def verified(self) -> bool:
        """Run end to end by zenops's tests: a tested pair by the route it is tested by."""
        return self.combo.status == "tested" and self.image_source == own_source(self.combo)

    @property
    def verification(self) -> str:
        """What zenops's tests verified of this engine, in words (starts with "tested" or "not verified")."""
        c, route = self.combo, f"--image-source {self.image_source}"
        if self.verified:
            return "tested: zenops's landing CI runs this pair by this route end to end"
        if c.status == "tested":
            return (
                f"not verified by zenops's tests: the pair is tested by --image-source {own_source(c)} only; {route} "
                f"is {SOURCE_MEANING[self.image_source][1]}"
            )
        if c.status == "supported":
            if self.image_source == "prebuilt":  # no image build: the route's own verification is what holds
                return (
                    "not verified by zenops's tests: the pair is documented as working by the zentorch/vLLM sources; "
                    f"{route} is {SOURCE_MEANING['prebuilt'][1]}"
                )
            return f"not verified by zenops's tests: the pair is {STATUS_MEANING['supported']}"
        return "not verified by zenops's tests: the pair is known not to work or unknown (--force-unsupported)"

    def describe(self) -> str:
        """One line: the pair (its id names the versions), the route and what was verified."""
        c = self.combo
        ref = f" {self.prebuilt_ref or c.prebuilt}" if self.image_source == "prebuilt" else ""
        return f"{c.id} by --image-source {self.image_source}{ref} ({self.verification})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair": self.combo.id,
            "vllm": self.combo.vllm,
            "zentorch": self.combo.zentorch,
            "torch": self.combo.torch,
            "status": self.combo.status,
            "image_source": self.image_source,
            "prebuilt_ref": self.prebuilt_ref or (self.combo.prebuilt if self.image_source == "prebuilt" else None),
            "verified": self.verified,
            "verification": self.verification,
        }


def engine_of(request: Mapping[str, Any], warn: Callable[[str], None] | None = None) -> Engine:
    """The engine a serving request asks for: the one function `up`, `plan`, `rollout` and campaigns resolve the
    vLLM/zentorch pair and the image route with, so that `plan` shows what `up` deploys. ``request``: ServeRequest
    fields (vllm, zentorch, image_source, prebuilt_ref, force_unsupported; a missing one is unset). No --vllm: the
    table's default (tested) pair; no --image-source: the pair's own route (:func:`own_source`). Refused before
    anything runs: a broken or unknown pair (IncompatiblePairError, exit 11), a route that cannot make the pair
    (UsageError, exit 2). ``warn`` gets the warning of a forced pair; an engine zenops's tests do not run is the
    caller's to label (Engine.verified, Engine.verification)."""
    source = request.get("image_source")
    vllm, zentorch = request.get("vllm"), request.get("zentorch")
    prebuilt_ref = request.get("prebuilt_ref") or None
    if source is not None and source not in IMAGE_SOURCES:
        raise UsageError(f"--image-source {source}: use one of {', '.join(IMAGE_SOURCES)}")
    t = table()
    combo = resolve(vllm, zentorch, force=bool(request.get("force_unsupported")), warn=warn)
    source = source or own_source(combo)
    named, other = "", ""  # no --vllm: the default pair is named as such, and the pairs the route can make
    if vllm is None:
        named, other = " (the default pair)", f", or name a pair it can make with --vllm{_pairs(t, source)}"
    if source == "pip" and not combo.pip:
        raise UsageError(
            f"{combo.id} has no package-index route (pip)",
            hint=f"use --image-source build or prebuilt, or a pair with a pip route{_pairs(t, 'pip')}",
        )
    if source == "build" and combo.route == "pip":
        raise UsageError(
            f"--image-source build: {combo.id}{named} is a package-index build, not a vLLM source release",
            hint=f"use --image-source pip{other}",
        )
    if source == "prebuilt" and not (prebuilt_ref or combo.prebuilt):
        raise UsageError(
            f"--image-source prebuilt: no prebuilt image is known for {combo.id}{named}",
            hint=f"pass --image-ref REF, or use --image-source {own_source(combo)} (the pair's own route){other}",
        )
    return Engine(combo, source, prebuilt_ref if source == "prebuilt" else None)


def _pairs(t: Table, source: str) -> str:
    """The working pairs an image route can make, as ' id, id' (for a hint)."""
    if source == "pip":
        ids = [c.id for c in _working(t) if c.pip]
    elif source == "prebuilt":
        ids = [c.id for c in _working(t) if c.prebuilt]
    else:
        ids = [c.id for c in _working(t) if c.route != "pip"]
    return (": " if ids else "") + ", ".join(ids)
