"""The zenops configuration file: found, parsed, validated (errors name the file, the key and the fix), merged.

Search order (later files win key by key): ``~/.config/zenops/config.yaml`` (``$XDG_CONFIG_HOME``), then
``./zenops.yaml``. ``--config FILE`` or ``$ZENOPS_CONFIG`` replaces the search with that one file. Command-line
flags win over both: per-command sections under ``defaults:`` become click defaults (see zenops.cli.options).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zenops.errors import ConfigError
from zenops.paths import default_state_dir

EXAMPLE = """\
# zenops.yaml (or ~/.config/zenops/config.yaml)
state_dir: ~/.local/state/zenops    # run directories, generated keys, inventories
keep_runs: 50                       # run directories kept under state_dir/runs
ssh:
  user: debian                      # default remote user when the inventory names none
  private_key_file: ~/.ssh/id_ed25519
  host_key_checking: accept-new     # accept-new | strict | off
docker:
  source: distro                    # distro (docker.io) | upstream (download.docker.com)
  users: [debian]                   # added to the docker group
  log_max_size: 10m
  log_max_file: 3
  daemon_options: {}                # extra /etc/docker/daemon.json keys
defaults:                           # defaults for command flags; flags on the command line win
  up:
    inventory: hosts.yml
flavors:                            # your cloud's flavors; built-in ones (gp.5.24.96) need no entry, yours win by name
  example.16.64:
    vcpus: 16
    ram_gb: 64                      # or ram_mib: 65536
    disk_gb: 100
    ephemeral_gb: 0
    cpu_model: AMD EPYC 9454
    cpu_vendor: AuthenticAMD
    cpu_flags: [avx2, avx512f, avx512_bf16, avx512_vnni]
    numa_nodes: 1
    smt_exposed: false
    price_per_hour: 0.50            # your price, per server and hour
    currency: USD
clouds:                             # how zenops provisions in a clouds.yaml entry (defaults fit the sandbox)
  flex:
    network_mode: floating          # provider (servers on a shared provider network) | floating (tenant net + FIPs)
    provider_network: provider
    external_network: public
    tenant_cidr: 10.98.1.0/24       # default: 10.98.<n>.0/24, n from the deployment name
    image: debian-12
    image_user: debian
    operator_cidr: 203.0.113.7/32   # who may reach SSH and the API; default: this machine's address, /32
    active_timeout: 900             # seconds until ACTIVE (slow builds are not failures before this)
    error_retries: 2                # servers in ERROR are replaced this many times
    server_metadata: {cost-center: ml-42}
"""


def _user_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "zenops" / "config.yaml"


def search_paths() -> list[Path]:
    """Candidate config files, lowest precedence first."""
    return [_user_config(), Path.cwd() / "zenops.yaml"]


@dataclass(frozen=True)
class SshSettings:
    user: str | None = None
    private_key_file: Path | None = None
    host_key_checking: str = "accept-new"


@dataclass(frozen=True)
class DockerSettings:
    source: str = "distro"
    users: tuple[str, ...] = ()
    log_max_size: str = "10m"
    log_max_file: int = 3
    daemon_options: Mapping[str, Any] = field(default_factory=dict)

    def role_vars(self) -> dict[str, Any]:
        """Variables for the zenops.inference.docker role."""
        return {
            "docker_source": self.source,
            "docker_users": list(self.users),
            "docker_log_max_size": self.log_max_size,
            "docker_log_max_file": str(self.log_max_file),
            "docker_daemon_options": dict(self.daemon_options),
        }


@dataclass(frozen=True)
class Config:
    state_dir: Path = field(default_factory=default_state_dir)
    keep_runs: int = 50
    ssh: SshSettings = field(default_factory=SshSettings)
    docker: DockerSettings = field(default_factory=DockerSettings)
    # command name -> {option name: raw value}; validated against the click command by the CLI
    command_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # command name -> {option name: file it came from}
    command_default_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # flavor name -> {field: value}, validated; zenops.catalog.flavors() turns it into FlavorSpecs
    flavors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # clouds.yaml entry name -> {field: value} (CLOUD_SCHEMA)
    clouds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def cloud_profile(self, cloud: str) -> CloudProfile:
        return CloudProfile(**dict(self.clouds.get(cloud, {})))

    sources: tuple[Path, ...] = ()


# --- schema -----------------------------------------------------------------------------------------------------

Checker = Callable[[Any], str | None]  # returns a problem description, or None when the value is fine


def _is_str(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _is_pos_int(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v > 0
    return None if ok else "must be a positive integer"


def _is_size(v: Any) -> str | None:
    s = str(v)
    ok = isinstance(v, str) and s[:-1].isdigit() and s[-1] in "kmg"
    return None if ok else "must be a size like 10m, 512k or 1g"


def _choice(*choices: str) -> Checker:
    def check(v: Any) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)} (got {v!r})"

    return check


def _str_list(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(x, str) and x for x in v)
    return None if ok else "must be a list of names, e.g. [debian, ubuntu]"


def _mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be a mapping (key: value)"


SCHEMA: dict[str, Checker | dict[str, Checker]] = {
    "state_dir": _is_str,
    "keep_runs": _is_pos_int,
    "ssh": {
        "user": _is_str,
        "private_key_file": _is_str,
        "host_key_checking": _choice("accept-new", "strict", "off"),
    },
    "docker": {
        "source": _choice("distro", "upstream"),
        "users": _str_list,
        "log_max_size": _is_size,
        "log_max_file": _is_pos_int,
        "daemon_options": _mapping,
    },
    "defaults": _mapping,  # per-command sections, checked against the commands themselves
    "flavors": _mapping,  # flavor name -> FLAVOR_SCHEMA fields, checked by check_flavor
    "clouds": _mapping,  # clouds.yaml entry name -> CLOUD_SCHEMA fields
}


def _number(minimum: float, problem: str) -> Checker:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and (v > 0 if minimum > 0 else v >= 0)
        return None if ok else problem

    return check


def _flags(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(x, str) and x for x in v)
    return None if ok else "must be a list of /proc/cpuinfo flags"


def _is_count(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "must be a whole number, 0 or more"


def _is_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _currency(v: Any) -> str | None:
    return None if isinstance(v, str) and len(v) == 3 and v.isalpha() and v.isupper() else "must be a code like USD"


# flavors.<name>.<field>: (checker, example shown as the fix)
FLAVOR_SCHEMA: dict[str, tuple[Checker, str]] = {
    "vcpus": (_is_pos_int, "vcpus: 24"),
    "ram_mib": (_is_pos_int, "ram_mib: 98304"),
    "ram_gb": (_number(1, "must be a number above 0"), "ram_gb: 96  (GiB, as clouds mean it: 96 = 98304 MiB)"),
    "disk_gb": (_is_count, "disk_gb: 240"),
    "ephemeral_gb": (_is_count, "ephemeral_gb: 0"),
    "cpu_model": (_is_str, "cpu_model: AMD EPYC 9454"),
    "cpu_vendor": (_is_str, "cpu_vendor: AuthenticAMD"),
    "cpu_flags": (_flags, "cpu_flags: [avx2, avx512f, avx512_bf16, avx512_vnni]"),
    "numa_nodes": (_is_pos_int, "numa_nodes: 1"),
    "smt_exposed": (_is_bool, "smt_exposed: false"),
    "price_per_hour": (_number(0, "must be a number, 0 or more"), "price_per_hour: 0.79  (per server and hour)"),
    "currency": (_currency, "currency: USD"),
    "cloud": (_is_str, "cloud: flex"),
}


def _check_entry(path: str, where: str, section: Any, schema: dict[str, tuple[Checker, str]], example: str) -> None:
    """Check one named entry (``flavors.<name>``, ``clouds.<name>``) against its schema; errors name the field."""
    if not isinstance(section, dict):
        raise ConfigError(path, where, "must be a mapping of field: value", hint=f"e.g. {example}")
    for key, value in section.items():
        if key not in schema:
            raise _unknown(path, str(key), list(schema), f"{where}.{key}")
        check, field_example = schema[key]
        problem = check(value)
        if problem:
            raise ConfigError(path, f"{where}.{key}", problem, hint=f"e.g. {field_example}")


def check_flavor(path: str, name: Any, section: Any) -> None:
    """Check one ``flavors.<name>`` entry against FLAVOR_SCHEMA. Raises ConfigError naming flavors.<name>.<field>."""
    where = f"flavors.{name}"
    _check_entry(path, where, section, FLAVOR_SCHEMA, "{vcpus: 16, ram_gb: 64}")
    if "ram_mib" in section and "ram_gb" in section:
        raise ConfigError(path, f"{where}.ram_gb", "give ram_mib or ram_gb, not both", hint="remove one of them")


# clouds.<name>.<field>: how zenops uses a clouds.yaml entry (the entry itself stays in clouds.yaml)
CLOUD_SCHEMA: dict[str, tuple[Checker, str]] = {
    "network_mode": (_choice("provider", "floating"), "network_mode: provider  (or floating)"),
    "provider_network": (_is_str, "provider_network: provider"),
    "external_network": (_is_str, "external_network: public"),
    "tenant_network": (_is_str, "tenant_network: my-net  (reuse it instead of creating one)"),
    "tenant_cidr": (_is_str, "tenant_cidr: 10.98.1.0/24  (default: 10.98.<n>.0/24 per deployment)"),
    "image": (_is_str, "image: debian-12"),
    "image_user": (_is_str, "image_user: debian"),
    "operator_cidr": (_is_str, "operator_cidr: 203.0.113.7/32"),
    "keypair": (_is_str, "keypair: my-key  (an existing keypair; zenops creates one otherwise)"),
    "private_key_file": (_is_str, "private_key_file: ~/.ssh/id_ed25519"),
    "active_timeout": (_is_pos_int, "active_timeout: 900"),
    "error_retries": (_is_count, "error_retries: 2"),
    "server_metadata": (_mapping, "server_metadata: {cost-center: ml-42}  (added to every server's metadata)"),
}


@dataclass(frozen=True)
class CloudProfile:
    """How zenops provisions in one cloud; the defaults fit the local sandbox cloud."""

    network_mode: str = "provider"
    provider_network: str = "provider"
    external_network: str = "public"
    tenant_network: str = ""
    tenant_cidr: str = ""  # empty: 10.98.<n>.0/24, n derived from the deployment name
    image: str = "debian-12"
    image_user: str = "debian"
    operator_cidr: str = ""  # empty: this machine's address towards the cloud, /32
    keypair: str = ""  # empty: zenops creates zenops-<deployment>
    private_key_file: str = ""
    active_timeout: int = 900
    error_retries: int = 2
    server_metadata: Mapping[str, str] = field(default_factory=dict)


def _unknown(path: str, key: str, known: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    fix = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(sorted(known))}"
    return ConfigError(path, where, "unknown key", hint=f"{fix} (see `zenops config example`)")


def validate(data: Any, path: str) -> dict[str, Any]:
    """Check one parsed config document against SCHEMA; return it as a dict. Raises ConfigError."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path, "", "the top level must be a mapping of keys", hint="see `zenops config example`")
    for key, value in data.items():
        spec = SCHEMA.get(key)
        if spec is None:
            raise _unknown(path, key, list(SCHEMA), str(key))
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(path, key, "must be a mapping", hint=f"valid keys: {', '.join(spec)}")
            for sub, subvalue in value.items():
                check = spec.get(sub)
                if check is None:
                    raise _unknown(path, str(sub), list(spec), f"{key}.{sub}")
                problem = check(subvalue)
                if problem:
                    raise ConfigError(path, f"{key}.{sub}", problem)
        else:
            problem = spec(value)
            if problem:
                raise ConfigError(path, key, problem)
    for command, section in (data.get("defaults") or {}).items():
        if not isinstance(section, dict):
            raise ConfigError(path, f"defaults.{command}", "must be a mapping of option: value")
    for name, section in (data.get("flavors") or {}).items():
        check_flavor(path, name, section)
    for name, section in (data.get("clouds") or {}).items():
        _check_entry(path, f"clouds.{name}", section, CLOUD_SCHEMA, "{network_mode: floating}")
        if section.get("keypair") and not section.get("private_key_file"):
            raise ConfigError(
                path,
                f"clouds.{name}.private_key_file",
                "an existing keypair needs its private key",
                hint="add private_key_file: ~/.ssh/<key> next to keypair",
            )
    return data


def read_file(path: Path) -> dict[str, Any]:
    import yaml  # noqa: PLC0415  (only when a config file exists: the CLI's --help starts without it)

    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror}", hint="check the path and permissions") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(str(path), where, f"not valid YAML: {problem}", hint="fix the YAML syntax there") from e
    return validate(data, str(path))


def load(explicit: Path | None = None) -> Config:
    """Load the config: ``explicit`` alone if given (it must exist), else every file of the search that exists."""
    env = os.environ.get("ZENOPS_CONFIG")
    if explicit is None and env:
        explicit = Path(env)
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(str(explicit), "", "config file not found", hint="check --config / ZENOPS_CONFIG")
        files = [explicit]
    else:
        files = [p for p in search_paths() if p.is_file()]
    merged: dict[str, Any] = {}
    command_defaults: dict[str, dict[str, Any]] = {}
    command_sources: dict[str, dict[str, str]] = {}
    for path in files:
        data = read_file(path)
        for key, value in data.items():
            if key == "defaults":
                for command, section in value.items():
                    command_defaults.setdefault(command, {}).update(section)
                    command_sources.setdefault(command, {}).update(dict.fromkeys(section, str(path)))
            elif isinstance(value, dict):
                merged.setdefault(key, {}).update(value)
            else:
                merged[key] = value
    ssh = merged.get("ssh", {})
    docker = merged.get("docker", {})
    return Config(
        state_dir=Path(merged["state_dir"]).expanduser() if "state_dir" in merged else default_state_dir(),
        keep_runs=merged.get("keep_runs", 50),
        ssh=SshSettings(
            user=ssh.get("user"),
            private_key_file=Path(ssh["private_key_file"]).expanduser() if "private_key_file" in ssh else None,
            host_key_checking=ssh.get("host_key_checking", "accept-new"),
        ),
        docker=DockerSettings(
            source=docker.get("source", "distro"),
            users=tuple(docker.get("users", ())),
            log_max_size=docker.get("log_max_size", "10m"),
            log_max_file=docker.get("log_max_file", 3),
            daemon_options=docker.get("daemon_options", {}),
        ),
        command_defaults=command_defaults,
        command_default_sources=command_sources,
        flavors=merged.get("flavors", {}),
        clouds=merged.get("clouds", {}),
        sources=tuple(files),
    )
