"""`zenops config init --cloud NAME`: the written entry. A :class:`~zenops.cloud.profile.ProfilePlan` rendered as
the ``clouds.<cloud>`` entry's lines (each key with its reason and alternatives as comments), and merged into the
config file's text (read and checked here; the command writes it). Its names are importable from
:mod:`zenops.cloud.profile` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zenops.cloud.profile import ProfilePlan


# profile keys init does not decide, shown commented out with their defaults (config.CloudProfile)
_OTHER_KEYS = (
    "active_timeout: 900           # seconds until a server is ACTIVE; raise it on a slow cloud",
    "error_retries: 2              # servers in ERROR are replaced this many times",
    "operator_cidr: 203.0.113.7/32 # who may reach SSH and the API; default: this machine's address, /32",
    "keypair: my-key               # an existing keypair (with private_key_file); default: zenops makes one",
)


def _comment(text: str) -> str:
    return "# " + " ".join(text.split())


def render_entry(plan: ProfilePlan, kept: Mapping[str, Any] | None = None) -> list[str]:
    """The ``clouds.<cloud>`` entry's lines (unindented): each key with its reason and alternatives as comments.
    ``kept``: keys of a replaced profile that init does not decide, written again as they were."""
    from zenops.config_edit import yaml_scalar  # noqa: PLC0415

    out = [_comment(f"written by `zenops config init --cloud {plan.cloud}` from what the cloud listed; edit freely")]
    for c in plan.choices:
        out.append(_comment(f"{c.what}: {c.reason}"))
        if c.alternatives:
            out.append(_comment(f"  alternatives: {'; '.join(c.alternatives)}"))
        if c.what == "image":
            out += [
                f"image: {yaml_scalar(plan.profile['image'])}",
                f"image_user: {yaml_scalar(plan.profile['image_user'])}",
            ]
        elif c.what in plan.profile:
            out.append(f"{c.what}: {yaml_scalar(plan.profile[c.what])}")
    room = ", ".join(str(r) for r in plan.room)
    if plan.flavor is not None:
        room += "; " + (
            f"room for {plan.fits_now} server(s) of {plan.flavor} now"
            if plan.fits_now is not None
            else f"no limit on servers of {plan.flavor}"
        )
    out.append(_comment(f"quota: {room}"))
    out += [_comment(f"warning: {w}") for w in plan.warnings]
    if kept:
        out.append(_comment("kept from the profile this one replaced:"))
        out += [f"{k}: {yaml_scalar(v)}" for k, v in kept.items()]
    out.append(_comment("other keys (see `zenops config example`), with their defaults:"))
    out += [f"# {line}" for line in _OTHER_KEYS if line.split(":")[0] not in (kept or {})]
    return out


@dataclass(frozen=True)
class ProfileWrite:
    """What `config init` writes: the file's new text, the entry's own lines, the entry as data."""

    path: str
    text: str
    entry: list[str]
    data: dict[str, Any]
    replaced: bool
    comments_kept: bool


def existing_profile(
    path: Any, cloud: str, *, force: bool, data: Mapping[str, Any] | None = None
) -> Mapping[str, Any] | None:
    """The profile of ``cloud`` the config file at ``path`` has (None: none, or no file). Without ``force`` one is
    refused (UsageError, exit 2: nothing is written); a file zenops cannot read is a ConfigError (exit 3)."""
    from pathlib import Path  # noqa: PLC0415

    from zenops.config_edit import read_document  # noqa: PLC0415
    from zenops.errors import UsageError  # noqa: PLC0415

    target = Path(path)
    if data is None:
        _, data = read_document(target)
    old: Mapping[str, Any] | None = (data.get("clouds") or {}).get(cloud)
    if old is not None and not force:
        raise UsageError(
            f"{target} already has a profile for cloud '{cloud}' (clouds.{cloud}); nothing was written",
            hint="pass --force to replace it (its keys init does not decide, such as keypair, are kept), or "
            "--dry-run to see the new one",
        )
    return old


def prepare_write(path: Any, plan: ProfilePlan, *, force: bool) -> ProfileWrite:
    """The config file at ``path`` with ``clouds.<cloud>`` set to the plan's profile (read, merged, checked; not
    written). An existing profile of that cloud is refused without ``force``; with it, the old profile's keys init
    does not decide (keypair, server_metadata, ...) are kept."""
    from pathlib import Path  # noqa: PLC0415

    from zenops.config_edit import checked, read_document, with_entry  # noqa: PLC0415

    target = Path(path)
    text, data = read_document(target)
    clouds = dict(data.get("clouds") or {})
    old = existing_profile(target, plan.cloud, force=force, data=data)
    kept = {k: v for k, v in (old or {}).items() if k not in plan.profile}
    entry = render_entry(plan, kept)
    new_text, comments_kept = with_entry(text, "clouds", plan.cloud, entry)
    value = {**plan.profile, **kept}
    clouds[plan.cloud] = value
    checked(new_text, target, {**data, "clouds": clouds})
    return ProfileWrite(str(target), new_text, entry, value, old is not None, comments_kept)
