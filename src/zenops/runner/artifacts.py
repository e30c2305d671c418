"""What a run's data dir may hold: never a secret, never a template.

ansible-runner writes extravars, envvars and the command line to disk; :func:`check_no_secrets` refuses a secret in
them before anything starts, :func:`scrub` and :func:`_scrub_command` take the secret values out of the artifacts
(see :mod:`zenops.runner`), and :func:`write_extravars` writes the extra vars tagged ``!unsafe``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from zenops.errors import ZenopsError

# a name that IS a secret (hf_token, api_key, db_password), not one that counts something (kv_tokens, max_tokens)
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|password|passwd|secrets?|api_?keys?|private_keys?|credentials?)$", re.IGNORECASE
)
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY-----|sk-[A-Za-z0-9]{20,}"
    r"|://[^/\s:@]+:[^/\s@]+@)"  # credentials in a URL (an index URL with user:password@)
)
# secrets an operator may have in the environment: ansible-runner copies os.environ into the run's artifacts
# (artifacts/<id>/command), so these are taken out of the environment while a run is prepared. zenops hands them to
# Ansible as files instead; Ansible itself never needs them.
SECRET_ENV_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY")
# an environment variable whose value is a secret (OS_PASSWORD, OS_APPLICATION_CREDENTIAL_SECRET, GITHUB_TOKEN, ...)
_SECRET_ENV = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY", re.IGNORECASE)
# a value shorter than this is never scrubbed: a secret-named variable set to "1" must not hide every "1" in the logs
_SECRET_MIN_LEN = 8
_SECRET_FILE_MAX = 64 * 1024
_HIDDEN = "<hidden>"


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable holds a secret that no artifact may keep (``*PASSWORD*``, ``*SECRET*``,
    ``*TOKEN*``, ``*API_KEY*``, and :data:`SECRET_ENV_NAMES`)."""
    return name in SECRET_ENV_NAMES or bool(_SECRET_ENV.search(name))


def check_no_secrets(extravars: Mapping[str, Any], where: str = "extravars") -> None:
    """Refuse values that look secret: they would be written to disk in plain text by ansible-runner."""

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
            return
        if isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")
            return
        leaf = re.sub(r"(\[\d+\])+$", "", key.rsplit(".", 1)[-1])  # api_keys[0] is an api key too
        if _SECRET_KEY.search(leaf) and value not in (None, "", False):
            raise ZenopsError(
                f"refusing to pass '{key}' to Ansible in {where}: it would be written to disk in plain text",
                hint=f"pass a file instead: put the secret in a file with mode 0600 and pass '{leaf}_file'",
            )
        if isinstance(value, str) and _SECRET_VALUE.search(value):
            raise ZenopsError(
                f"refusing to pass '{key}' to Ansible in {where}: its value looks like a token or a private key",
                hint="pass the path of a file holding the secret (mode 0600), never the secret itself",
            )

    walk(extravars, "")


def _ordered(secrets: Iterable[str]) -> list[str]:
    """The values worth hiding, longest first (a secret that contains another is hidden whole)."""
    return sorted({s for s in secrets if len(s) >= _SECRET_MIN_LEN}, key=len, reverse=True)


def _hide(text: str, values: list[str]) -> str:
    for v in values:
        text = text.replace(v, _HIDDEN)
    return text


def scrub(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Replace every secret value in the files under ``root`` by ``<hidden>`` (values shorter than 8 characters are
    left); a binary file holding one is removed. Returns the files that held one."""
    values = _ordered(secrets)
    if not values:
        return []
    hit = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            if any(v.encode() in path.read_bytes() for v in values):
                path.unlink()  # a binary file holding a secret: not worth keeping
                hit.append(path)
            continue
        except OSError:
            continue
        new = _hide(text, values)
        if new != text:
            path.write_text(new, encoding="utf-8")
            hit.append(path)
    return hit


def _escaped(values: Iterable[str]) -> set[str]:
    """The values, and each as it appears inside a JSON string (a multi-line key, a quote)."""
    return {form for v in values for form in (v, json.dumps(v, ensure_ascii=False)[1:-1])}


def secret_values(extravars: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
    """What no artifact of a run may hold: the values of secret-named environment variables, and the contents of
    the secret files the extra vars name (``<secret name>_file`` keys, as :func:`check_no_secrets` asks for)."""
    out = {v for k, v in environ.items() if is_secret_env_name(k) and v}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and value and key.endswith("_file") and _SECRET_KEY.search(key[: -len("_file")]):
            try:
                path = Path(value).expanduser()
                if path.is_file() and path.stat().st_size <= _SECRET_FILE_MAX:
                    out.add(path.read_text(encoding="utf-8", errors="replace").strip())
            except OSError:
                pass

    walk(extravars, "")
    return _escaped(v for v in out if v)


def _scrub_command(artifact: Path, secrets: Iterable[str]) -> None:
    """ansible-runner's record of the run's command and environment (``artifacts/<id>/command``) without
    secret-named variables or secret values, replaced whole (the old file goes with its inode)."""
    try:
        record = json.loads(artifact.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and isinstance(record.get("env"), dict):
        record["env"] = {k: v for k, v in record["env"].items() if not is_secret_env_name(str(k))}
    tmp = artifact.with_name(artifact.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_hide(json.dumps(record, ensure_ascii=False), _ordered(secrets)))
    os.replace(tmp, artifact)


class _Unsafe(dict[str, Any]):
    """The extra vars' top-level mapping, written with the ``!unsafe`` tag."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(_Unsafe, lambda dumper, value: dumper.represent_mapping("!unsafe", value))


def write_extravars(path: Path, extravars: Mapping[str, Any]) -> None:
    """Write ``extravars`` for ``ansible-playbook -e @path`` (file mode 0600): JSON values, as ansible-runner would
    have passed them, in one mapping tagged ``!unsafe``. ansible-core 2.19 trusts the strings of an extra-vars file
    as templates; under ``!unsafe`` none is, at any depth, keys included. The tag goes on the mapping, not on each
    string: a string tagged ``!unsafe`` is resolved again as a plain scalar ('' becomes null, '2' an int)."""
    plain = json.loads(json.dumps(extravars))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("# written by zenops: everything below is data (!unsafe), never a template\n")
        yaml.dump(_Unsafe(plain), f, Dumper=_UnsafeDumper, allow_unicode=True, sort_keys=False)
