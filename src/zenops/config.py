"""The zenops configuration file: found, parsed, validated (errors name the file, the key and the fix), merged.

Search order (later files win key by key): ``~/.config/zenops/config.yaml`` (``$XDG_CONFIG_HOME``), then
``./zenops.yaml``. ``--config FILE`` or ``$ZENOPS_CONFIG`` replaces the search with that one file. Command-line
flags win over both: per-command sections under ``defaults:`` become click defaults (see zenops.cli.options).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zenops import durations, schema
from zenops.errors import ConfigError
from zenops.paths import default_state_dir
from zenops.schema import Entries, Field, Issue, Schema, Section, key_lines, line_of, read_yaml

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
clouds:                             # how zenops provisions in a clouds.yaml entry (defaults fit the sandbox);
                                    # `zenops config init --cloud NAME` writes one from what that cloud lists
  flex:
    network_mode: floating          # provider (servers on a shared provider network) | floating (tenant net + FIPs)
    provider_network: provider
    external_network: public
    tenant_cidr: 10.98.1.0/24       # default: 10.98.<n>.0/24, n from the deployment name
    image: debian-12
    image_user: debian
    operator_cidr: 203.0.113.7/32   # who may reach SSH and the API; default: this machine's address, /32
    active_timeout: 15m             # until ACTIVE (slow builds are not failures before this): 900s, 15m, 1h
    error_retries: 2                # servers in ERROR are replaced this many times
    server_metadata: {cost-center: ml-42}
    expiry_switch: auto             # with --ttl, each server deletes itself at its expiry (a restricted, expiring
                                    # application credential): auto (where the servers reach Keystone and Nova,
                                    # else said) | required (refuse without it) | off
    api_interface: any              # the catalog interface the servers reach the APIs by: any (internal, then
                                    # public) | internal | public
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

    def ssh_options(self) -> tuple[str, ...]:
        """ssh's options for ``host_key_checking`` (Ansible's runs and `zenops ssh`/`logs`/`top` alike)."""
        strict = {"accept-new": "accept-new", "strict": "yes", "off": "no"}[self.host_key_checking]
        off = ("-o", "UserKnownHostsFile=/dev/null") if self.host_key_checking == "off" else ()
        return ("-o", f"StrictHostKeyChecking={strict}", *off)


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
        data = dict(self.clouds.get(cloud, {}))
        if "expiry_switch" in data:  # YAML's off/on (a Config made in code holds what the file held)
            data["expiry_switch"] = _switch_word(data["expiry_switch"])
        if "active_timeout" in data:
            data["active_timeout"] = durations.parse(data["active_timeout"])
        return CloudProfile(**data)

    sources: tuple[Path, ...] = ()


# --- schema (zenops.schema: errors name the file, the key and the fix) ---------------------------------------

_REFERENCE = "`zenops config example`"


def _is_size(v: Any) -> str | None:
    s = str(v)
    ok = isinstance(v, str) and s[:-1].isdigit() and s[-1] in "kmg"
    return None if ok else "must be a size like 10m, 512k or 1g"


def _switch_mode(v: Any) -> str | None:
    # YAML reads a bare off as false (and on as true: the switch on where it can be, auto)
    ok = v in ("auto", "required", "off") or isinstance(v, bool)
    return None if ok else f"must be one of auto, required, off (got {v!r})"


def _switch_word(v: Any) -> Any:
    return ("auto" if v else "off") if isinstance(v, bool) else v


def _cidr(v: Any) -> str | None:
    import ipaddress  # noqa: PLC0415

    if not isinstance(v, str):
        return "must be a network like 10.98.1.0/24"
    try:
        ipaddress.ip_network(v.strip(), strict=True)
    except ValueError as e:
        return f"must be a network like 10.98.1.0/24 ({e})"
    return None


def _currency(v: Any) -> str | None:
    return None if isinstance(v, str) and len(v) == 3 and v.isalpha() and v.isupper() else "must be a code like USD"


def _ram_once(flavor: Mapping[str, Any]) -> Issue | None:
    if "ram_mib" in flavor and "ram_gb" in flavor:
        return Issue("ram_gb", "give ram_mib or ram_gb, not both", hint="remove one of them")
    return None


def _keypair_has_key(cloud: Mapping[str, Any]) -> Issue | None:
    if cloud.get("keypair") and not cloud.get("private_key_file"):
        return Issue(
            "private_key_file",
            "an existing keypair needs its private key",
            hint="add private_key_file: ~/.ssh/<key> next to keypair",
        )
    return None


# flavors.<name>: one flavor of your cloud (zenops.catalog turns it into a FlavorSpec)
FLAVOR_SCHEMA = Section(
    {
        "vcpus": Field(schema.positive_int, "vcpus: 24"),
        "ram_mib": Field(schema.positive_int, "ram_mib: 98304"),
        "ram_gb": Field(schema.positive_number, "ram_gb: 96  (GiB, as clouds mean it: 96 = 98304 MiB)"),
        "disk_gb": Field(schema.count, "disk_gb: 240"),
        "ephemeral_gb": Field(schema.count, "ephemeral_gb: 0"),
        "cpu_model": Field(schema.non_empty_str, "cpu_model: AMD EPYC 9454"),
        "cpu_vendor": Field(schema.non_empty_str, "cpu_vendor: AuthenticAMD"),
        "cpu_flags": Field(
            schema.strings("must be a list of /proc/cpuinfo flags"),
            "cpu_flags: [avx2, avx512f, avx512_bf16, avx512_vnni]",
        ),
        "numa_nodes": Field(schema.positive_int, "numa_nodes: 1"),
        "smt_exposed": Field(schema.boolean, "smt_exposed: false"),
        "price_per_hour": Field(schema.non_negative_number, "price_per_hour: 0.79  (per server and hour)"),
        "currency": Field(_currency, "currency: USD"),
        "cloud": Field(schema.non_empty_str, "cloud: flex"),
    },
    example="{vcpus: 16, ram_gb: 64}",
    problem="must be a mapping of field: value",
    rules=(_ram_once,),
)

# clouds.<name>: how zenops uses a clouds.yaml entry (the entry itself stays in clouds.yaml)
CLOUD_SCHEMA = Section(
    {
        "network_mode": schema.mode("provider", "floating", example="network_mode: provider  (or floating)"),
        "provider_network": Field(schema.non_empty_str, "provider_network: provider"),
        "external_network": Field(schema.non_empty_str, "external_network: public"),
        "tenant_network": Field(schema.non_empty_str, "tenant_network: my-net  (reuse it instead of creating one)"),
        "tenant_cidr": Field(_cidr, "tenant_cidr: 10.98.1.0/24  (default: 10.98.<n>.0/24 per deployment)"),
        "image": Field(schema.non_empty_str, "image: debian-12"),
        "image_user": Field(schema.non_empty_str, "image_user: debian"),
        "operator_cidr": Field(_cidr, "operator_cidr: 203.0.113.7/32"),
        "keypair": Field(schema.non_empty_str, "keypair: my-key  (an existing keypair; zenops creates one otherwise)"),
        "private_key_file": Field(schema.non_empty_str, "private_key_file: ~/.ssh/id_ed25519"),
        "active_timeout": Field(
            schema.duration(), "active_timeout: 15m  (or 900s, 1h, 1h30m)", convert=durations.parse
        ),
        "error_retries": Field(schema.count, "error_retries: 2"),
        "server_metadata": Field(
            schema.mapping, "server_metadata: {cost-center: ml-42}  (added to every server's metadata)"
        ),
        "expiry_switch": Field(
            _switch_mode,
            "expiry_switch: auto  (with --ttl each server deletes itself at its expiry; or required, or off)",
            convert=_switch_word,
        ),
        "api_interface": schema.mode(
            "any",
            "internal",
            "public",
            example="api_interface: internal  (the catalog interface the servers reach Keystone and Nova by; any: "
            "try both)",
        ),
    },
    example="{network_mode: floating}",
    problem="must be a mapping of field: value",
    rules=(_keypair_has_key,),
)

SCHEMA = Schema(
    Section(
        {
            "state_dir": Field(schema.non_empty_str),
            "keep_runs": Field(schema.positive_int),
            "ssh": Section(
                {
                    "user": Field(schema.non_empty_str),
                    "private_key_file": Field(schema.non_empty_str),
                    "host_key_checking": schema.mode("accept-new", "strict", "off"),
                }
            ),
            "docker": Section(
                {
                    "source": schema.mode("distro", "upstream"),
                    "users": Field(schema.strings("must be a list of names, e.g. [debian, ubuntu]")),
                    "log_max_size": Field(_is_size),
                    "log_max_file": Field(schema.positive_int),
                    "daemon_options": Field(schema.mapping),
                }
            ),
            # per-command sections, whose options the CLI checks against the commands themselves
            "defaults": Entries(Field(schema.mapping_of("must be a mapping of option: value"))),
            "flavors": Entries(FLAVOR_SCHEMA),
            "clouds": Entries(CLOUD_SCHEMA),
        },
        problem="the top level must be a mapping of keys",
        hint=f"see {_REFERENCE}",
    ),
    reference=_REFERENCE,
)


def check_flavor(path: str, name: Any, section: Any) -> None:
    """Check one ``flavors.<name>`` entry against FLAVOR_SCHEMA (the catalogue's flavors.yaml and zenops.yaml hold
    the same entries). Raises ConfigError naming flavors.<name>.<field>."""
    SCHEMA.check(FLAVOR_SCHEMA, section, path, f"flavors.{name}")


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
    expiry_switch: str = "auto"  # auto | required | off (zenops.cloud.expiry_switch)
    api_interface: str = "any"  # any | internal | public: how the servers reach Keystone and Nova


def validate(data: Any, path: str) -> dict[str, Any]:
    """Check one parsed config document against SCHEMA; return it as a dict. Raises ConfigError."""
    return SCHEMA.validate(data, path)


def read_file(path: Path) -> dict[str, Any]:
    """One config file, parsed and checked (YAML errors name the line and column)."""
    return validate(read_yaml(path), str(path))


@dataclass(frozen=True)
class Finding:
    """One mistake `zenops config check` reports: the file, the dotted key, its line, what is wrong, the fix."""

    path: str
    key: str
    line: int | None
    problem: str
    hint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "key": self.key, "line": self.line, "problem": self.problem, "hint": self.hint}

    def __str__(self) -> str:
        at = f":{self.line}" if self.line else ""
        text = f"{self.path}{at}: {self.key + ': ' if self.key else ''}{self.problem}"
        return f"{text}\n  fix: {self.hint}" if self.hint else text


# a further check of a file's (schema-checked) document, given the keys that already have a mistake: the CLI's
# check of ``defaults.<command>`` against the commands
MoreChecks = Callable[[dict[str, Any], set[str]], list[ConfigError]]


def within(key: str, prefix: str) -> bool:
    """``key`` is ``prefix`` or a key inside it (``flavors.x.vcpus`` within ``flavors.x``; not ``flavors.xy``)."""
    return key == prefix or key.startswith((prefix + ".", prefix + "["))


def check_flavors(flavors: Any, path: str, broken: set[str]) -> list[ConfigError]:
    """Every ``flavors.<name>`` entry as the commands read it (zenops.catalog.check_config_flavor); entries with a
    mistake already in ``broken`` are skipped (said once)."""
    from zenops.catalog import check_config_flavor  # noqa: PLC0415  (the catalogue imports this module)

    found: list[ConfigError] = []
    for name, fields in (flavors if isinstance(flavors, dict) else {}).items():
        if any(within(key, f"flavors.{name}") for key in broken):
            continue
        try:
            check_config_flavor(path, name, fields)
        except ConfigError as e:
            found.append(e)
    return found


def check_file(path: Path, more: MoreChecks | None = None) -> list[Finding]:
    """Every mistake in the config file at ``path``, each with its line: the checks the commands run when they read
    it (the schema, the flavors, ``more``), gathering all of them where a command stops at the first. [] when fine."""
    try:
        data = read_yaml(path)
    except ConfigError as e:  # not YAML (or a key given twice): the only finding, its line in its message
        line = re.search(r"line (\d+)", e.key)
        return [Finding(e.path, "", int(line.group(1)) if line else None, e.problem, e.hint)]
    errors = SCHEMA.collect(data, str(path))
    if isinstance(data, dict):
        errors += check_flavors(data.get("flavors"), str(path), {e.key for e in errors})
        if more is not None and isinstance(data.get("defaults"), dict):
            errors += more(data, {e.key for e in errors})
    lines = key_lines(path.read_text())
    found = [Finding(e.path, e.key, line_of(lines, e.key), e.problem, e.hint) for e in errors]
    return sorted(found, key=lambda f: f.line or 0)  # in the file's order


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
