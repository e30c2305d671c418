"""scripts/sandbox: up | down | status | env for the zenops OpenStack sandbox (see sandbox/README.md).

Runs with the sandbox venv's Python (up, status); `down` and `env` need only the standard library, so they work even
without the venv. Every process, file, container, Docker network, route and iptables rule the sandbox makes is found
again from ZENOPS_SANDBOX_DIR or from its labels/markers, so `down` removes all of it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from zenops_sandbox import FIP_CHAIN, GUARD_ROUTE_METRIC, LABEL, netutil

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "sandbox"
S = Path(os.environ.get("ZENOPS_SANDBOX_DIR") or REPO / ".cache" / "sandbox").resolve()
VENV = Path(os.environ.get("ZENOPS_SANDBOX_VENV") or S / "venv").resolve()
BIN = VENV / "bin"
ETC, LOG, RUN, STATE = S / "etc", S / "log", S / "run", S / "state"
CLOUDS = S / "clouds.yaml"
SECRETS = S / "secrets.json"
SMOKE_KEY = S / "keys" / "id_ed25519"

HOST = "zenops-sandbox"  # Nova's compute host and node name
REGION = "RegionOne"
PORTS = {
    "mysql": 13306,
    "amqp": 5673,
    "dist": 25673,
    "epmd": 4370,
    "keystone": 5000,
    "placement": 8778,
    "glance": 9292,
    "neutron": 9696,
    "nova": 8774,
}
DATABASES = ["keystone", "placement", "glance", "neutron", "nova_api", "nova", "nova_cell0"]
PROVIDER = {"name": "provider", "cidr": "10.99.0.0/24", "gateway": "10.99.0.1", "pool": ("10.99.0.10", "10.99.0.250")}
PUBLIC = {"name": "public", "cidr": "172.30.0.0/24", "gateway": "172.30.0.1", "pool": ("172.30.0.10", "172.30.0.250")}
PUBLIC_DOCKER_NET, PUBLIC_BRIDGE = "zenops-sandbox-public", "zsb-public"
# Keystone, Nova, Glance and Neutron also listen on the public network's gateway (the host's address on the
# zsb-public bridge, which exists before the APIs start): the servers reach them there (a server deleting itself
# through Nova: zenops's expiry switch; the scaling loop on a gateway server creating servers with their ports,
# addresses and images). Their "internal" catalog endpoints name that address; "public" and "admin" stay on 127.0.0.1.
SERVER_REACHABLE_APIS = ("keystone", "nova", "glance", "neutron")
INTERNAL_HOST = PUBLIC["gateway"]
# name, vCPUs, RAM MiB, disk GB, ephemeral GB
FLAVORS = [
    ("gp.5.2.8", 2, 8192, 20, 0),
    ("gp.5.4.16", 4, 16384, 40, 0),
    ("gp.5.8.32", 8, 32768, 80, 10),
    ("gp.5.24.96", 24, 98304, 240, 128),
]
IMAGE_NAME = "debian-12"
GUEST_IMAGE, GUEST_USER = "zenops/debian12-guest:latest", "debian"
BASE_IMAGE = "zenops/debian12-systemd:latest"
TENANT_PROJECT = TENANT_USER = "zenops"
SERVICE_USER = "sandbox-service"

T0 = time.monotonic()


class SandboxError(Exception):
    pass


def say(msg: str) -> None:
    print(f"[sandbox {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return ""
    return f"\n--- last lines of {path} ---\n" + "\n".join(lines)


# --- processes -----------------------------------------------------------------------------------------------------


def _starttime(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def read_pid(name: str) -> int | None:
    """The pid of a running sandbox service, or None (a recycled pid does not count: start times must match)."""
    try:
        pid_s, start = (RUN / f"{name}.pid").read_text().split()
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    return pid if _starttime(pid) == start else None


def service_env(extra: dict | None = None) -> dict:
    env = {
        "PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(S / "home"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "ZENOPS_SANDBOX_DIR": str(S),
        "OS_KEYSTONE_CONFIG_DIR": str(ETC / "keystone"),
        "OS_PLACEMENT_CONFIG_DIR": str(ETC / "placement"),
        "OS_GLANCE_CONFIG_DIR": str(ETC / "glance"),
        "OS_NEUTRON_CONFIG_DIR": str(ETC / "neutron"),
        "OS_NOVA_CONFIG_DIR": str(ETC / "nova"),
    }
    env.update(extra or {})
    return env


def start(name: str, argv: list[str], env: dict | None = None) -> bool:
    """Start a service in its own session (its process group is its pid); False if it already runs."""
    if read_pid(name):
        return False
    log = open(LOG / f"{name}.log", "ab")
    log.write(f"\n==== {time.strftime('%F %T')} start: {' '.join(argv)}\n".encode())
    log.flush()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=S,
        env=env or service_env(),
        start_new_session=True,
    )
    log.close()
    for _ in range(50):
        st = _starttime(proc.pid)
        if st:
            break
        time.sleep(0.01)
    (RUN / f"{name}.pid").write_text(f"{proc.pid} {st}\n")
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop(name: str, timeout: float = 15) -> bool:
    pid = read_pid(name)
    (RUN / f"{name}.pid").unlink(missing_ok=True)
    if not pid:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _group_alive(pid):
        time.sleep(0.1)
    if _group_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return True


def group_rss_kib(pgid: int) -> int:
    total = 0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.getpgid(int(p.name)) != pgid:
                continue
            for line in (p / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def stray_pids() -> list[int]:
    """Sandbox services that lost their pid file: their command line names the sandbox's binaries or data."""
    needles = [f"{BIN}/gunicorn", f"{BIN}/nova-", f"--datadir={S}/", f"{S}/rabbitmq/"]
    skip = set()
    pid = os.getpid()
    while pid > 1:  # never our own ancestors (a test run from the sandbox venv that calls `down`)
        skip.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    mine = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) in skip:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in needles) or cmd.startswith(f"epmd -port {PORTS['epmd']} "):
            mine.append(int(p.name))
    return mine


# --- small helpers -------------------------------------------------------------------------------------------------


def run(
    argv: list,
    log: str = "setup",
    env: dict | None = None,
    check: bool = True,
    timeout: float = 600,
    quiet_log: bool = False,
) -> subprocess.CompletedProcess:
    path = LOG / f"{log}.log"
    with open(path, "ab") as f:
        f.write(f"\n$ {' '.join(map(str, argv))}\n".encode())
        res = subprocess.run(
            [str(a) for a in argv], capture_output=True, env=env or service_env(), cwd=S, timeout=timeout
        )
        if not quiet_log or res.returncode:
            f.write(res.stdout + res.stderr)
    if check and res.returncode != 0:
        raise SandboxError(f"command failed ({res.returncode}): {' '.join(map(str, argv))}" + tail(path))
    return res


def wait_for(what: str, probe, timeout: float, interval: float = 0.3, log: str | None = None, proc: str | None = None):
    """Poll probe() until it is truthy; fail at the timeout, or at once when service `proc` has died."""
    deadline = time.monotonic() + timeout
    while True:
        if proc and not read_pid(proc):
            raise SandboxError(f"{what}: {proc} exited" + tail(LOG / f"{proc}.log", 40))
        try:
            result = probe()
        except Exception:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SandboxError(f"{what}: not ready after {timeout:.0f}s" + (tail(LOG / f"{log}.log") if log else ""))
        time.sleep(interval)


def tcp_ok(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http_ok(port: int, path: str = "/") -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


def parallel(*fns) -> None:
    errors: list[BaseException] = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def retrying(what: str, fn, attempts: int = 3, pause: float = 3) -> None:
    """Run an API sequence again after a transient error (503, a refused connection) while services settle."""
    for attempt in range(1, attempts + 1):
        try:
            fn()
            return
        except Exception as e:
            if attempt == attempts:
                raise
            say(f"{what}: {type(e).__name__}: {str(e)[:160]} - retrying")
            time.sleep(pause)


def marker(name: str) -> Path:
    return STATE / f"{name}.done"


def once(name: str, fn) -> None:
    if not marker(name).exists():
        fn()
        marker(name).write_text(time.strftime("%F %T\n"))


@contextlib.contextmanager
def locked():
    S.mkdir(parents=True, exist_ok=True)
    with open(S / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another scripts/sandbox command is running; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def docker(*args: str, check: bool = True) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise SandboxError(f"docker {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


# --- secrets and configuration -------------------------------------------------------------------------------------


def load_secrets() -> dict:
    if SECRETS.exists():
        return json.loads(SECRETS.read_text())
    # Hex: no leading "-" for a command line to take as an option, nothing to quote in a URL or an INI file.
    data = {k: secrets.token_hex(18) for k in ("db", "admin", "service", "tenant")}
    SECRETS.write_text(json.dumps(data, indent=1))
    SECRETS.chmod(0o600)
    return data


def ini(sections: dict) -> str:
    out = []
    for section, values in sections.items():
        out.append(f"[{section}]")
        out += [f"{k} = {v}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def db_url(sec: dict, name: str) -> str:
    return f"mysql+pymysql://openstack:{sec['db']}@127.0.0.1:{PORTS['mysql']}/{name}?charset=utf8"


def amqp_url() -> str:
    return f"rabbit://guest:guest@127.0.0.1:{PORTS['amqp']}/"


def write_configs(sec: dict) -> None:
    ks = f"http://127.0.0.1:{PORTS['keystone']}"
    auth = {
        "auth_url": ks,
        "auth_type": "password",
        "project_domain_name": "Default",
        "user_domain_name": "Default",
        "project_name": "service",
        "username": SERVICE_USER,
        "password": sec["service"],
        "region_name": REGION,
    }
    authtoken = {"www_authenticate_uri": ks, **auth, "service_token_roles_required": "true"}
    db_pool = {"max_pool_size": "5", "max_overflow": "20", "connection_recycle_time": "3600"}
    lock = {"lock_path": str(S / "lock")}
    noop = {"driver": "noop"}
    pydist = VENV / "etc"

    write_private(
        ETC / "keystone" / "keystone.conf",
        ini(
            {
                "DEFAULT": {"use_stderr": "true"},
                "database": {"connection": db_url(sec, "keystone"), **db_pool},
                "token": {"provider": "fernet"},
                "fernet_tokens": {"key_repository": str(S / "keystone" / "fernet-keys")},
                "fernet_receipts": {"key_repository": str(S / "keystone" / "fernet-keys")},
                "credential": {"key_repository": str(S / "keystone" / "credential-keys")},
                "cache": {"enabled": "true", "backend": "dogpile.cache.memory"},
                "identity": {"password_hash_rounds": "4"},
                "oslo_messaging_notifications": noop,
            }
        ),
    )
    write_private(
        ETC / "placement" / "placement.conf",
        ini(
            {
                "DEFAULT": {"use_stderr": "true"},
                "placement_database": {"connection": db_url(sec, "placement"), **db_pool},
                "api": {"auth_strategy": "keystone"},
                "keystone_authtoken": {**authtoken, "service_type": "placement"},
            }
        ),
    )
    glance_paste = ETC / "glance" / "glance-api-paste.ini"
    write_private(
        ETC / "glance" / "glance-api.conf",
        ini(
            {
                "DEFAULT": {"use_stderr": "true", "enabled_backends": "fs:file", "show_image_direct_url": "false"},
                "database": {"connection": db_url(sec, "glance"), **db_pool},
                "keystone_authtoken": {**authtoken, "service_type": "image"},
                "paste_deploy": {"flavor": "keystone", "config_file": str(glance_paste)},
                "glance_store": {"default_backend": "fs"},
                "fs": {"filesystem_store_datadir": str(S / "glance" / "images")},
                "os_glance_staging_store": {"filesystem_store_datadir": str(S / "glance" / "staging")},
                "os_glance_tasks_store": {"filesystem_store_datadir": str(S / "glance" / "tasks")},
                "oslo_concurrency": lock,
                "oslo_messaging_notifications": noop,
            }
        ),
    )
    shutil.copy(pydist / "glance" / "glance-api-paste.ini", glance_paste)
    neutron_quotas = dict.fromkeys(
        (
            "default_quota",
            "quota_network",
            "quota_subnet",
            "quota_port",
            "quota_router",
            "quota_floatingip",
            "quota_security_group",
            "quota_security_group_rule",
        ),
        "-1",
    )
    write_private(
        ETC / "neutron" / "neutron.conf",
        ini(
            {
                "DEFAULT": {
                    "use_stderr": "true",
                    "core_plugin": "ml2",
                    "service_plugins": "zenops_sandbox_router",
                    "auth_strategy": "keystone",
                    "transport_url": amqp_url(),
                    "allow_overlapping_ips": "true",
                    "dhcp_agent_notification": "false",
                    "notify_nova_on_port_status_changes": "true",
                    "notify_nova_on_port_data_changes": "true",
                    "state_path": str(S / "neutron"),
                    "api_paste_config": str(ETC / "neutron" / "api-paste.ini"),
                    "router_distributed": "false",
                    "l3_ha": "false",
                },
                "database": {"connection": db_url(sec, "neutron"), **db_pool},
                "keystone_authtoken": {**authtoken, "service_type": "network"},
                "nova": auth,
                "placement": auth,
                "quotas": neutron_quotas,
                "oslo_concurrency": lock,
                "oslo_messaging_notifications": noop,
            }
        ),
    )
    shutil.copy(pydist / "neutron" / "api-paste.ini", ETC / "neutron" / "api-paste.ini")
    write_private(
        ETC / "neutron" / "plugins" / "ml2" / "ml2_conf.ini",
        ini(
            {
                "ml2": {
                    "type_drivers": "flat,vxlan",
                    "project_network_types": "vxlan",
                    "mechanism_drivers": "zenops_sandbox",
                    "extension_drivers": "port_security",
                },
                "ml2_type_flat": {"flat_networks": f"{PROVIDER['name']},{PUBLIC['name']}"},
                "ml2_type_vxlan": {"vni_ranges": "1:10000"},
            }
        ),
    )
    write_private(
        ETC / "nova" / "nova.conf",
        ini(
            {
                "DEFAULT": {
                    "use_stderr": "true",
                    "host": HOST,
                    "my_ip": "127.0.0.1",
                    "state_path": str(S / "nova"),
                    "instances_path": str(S / "nova" / "instances"),
                    "compute_driver": "zenops_container.ContainerDriver",
                    "transport_url": amqp_url(),
                    "concurrency_backend": "threading",
                    "allow_resize_to_same_host": "true",
                    "heal_instance_info_cache_interval": "30",
                },
                "api": {"auth_strategy": "keystone"},
                "wsgi": {"api_paste_config": str(ETC / "nova" / "api-paste.ini")},
                "api_database": {"connection": db_url(sec, "nova_api"), **db_pool},
                "database": {"connection": db_url(sec, "nova"), **db_pool},
                # service_type (every API has its own): keystonemiddleware enforces application credentials' access
                # rules (without it, every token restricted by access rules gets a 401); a request that Nova makes on
                # such a token's behalf (Neutron, deleting the ports) carries Nova's service token and passes
                "keystone_authtoken": {**authtoken, "service_type": "compute"},
                "placement": auth,
                "neutron": {**auth, "service_metadata_proxy": "false"},
                "service_user": {"send_service_user_token": "true", **auth},
                "glance": {"region_name": REGION},
                "scheduler": {"discover_hosts_in_cells_interval": "10", "workers": "1"},
                "conductor": {"workers": "1"},
                # Injected spawn failures must never make nova-compute disable itself (default: after 10 in a row).
                "compute": {"consecutive_build_service_disable_threshold": "0"},
                "quota": {"cores": "-1", "ram": "-1", "instances": "-1"},
                "vnc": {"enabled": "false"},
                "oslo_concurrency": lock,
                "oslo_messaging_notifications": noop,
                "zenops_sandbox": {
                    "default_image": GUEST_IMAGE,
                    "default_user": GUEST_USER,
                    "snapshot_dir": str(S / "snapshots"),  # server snapshots: being made, and Glance's cached
                },
            }
        ),
    )
    shutil.copy(pydist / "nova" / "api-paste.ini", ETC / "nova" / "api-paste.ini")
    (ETC / "rabbitmq").mkdir(parents=True, exist_ok=True)
    (ETC / "rabbitmq" / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{PORTS['amqp']}\nloopback_users.guest = true\n"
        "disk_free_limit.absolute = 50MB\nvm_memory_high_watermark.absolute = 1GiB\n"
        "log.file.level = warning\n"
    )
    (ETC / "rabbitmq" / "enabled_plugins").write_text("[].\n")
    (ETC / "rabbitmq" / "rabbitmq-env.conf").write_text("")


def write_clouds(sec: dict) -> None:
    ks = f"http://127.0.0.1:{PORTS['keystone']}/v3"

    def cloud(user: str, pw: str, project: str) -> str:
        return (
            f"    auth:\n      auth_url: {ks}\n      username: {user}\n      password: {pw}\n"
            f"      project_name: {project}\n      user_domain_name: Default\n"
            f"      project_domain_name: Default\n    region_name: {REGION}\n    interface: public\n"
            f"    identity_api_version: 3\n"
            # Tenants cannot see provider attributes, so tell the SDK that `provider` is routable as it is: a
            # server there has a reachable IP and needs no floating IP (openstack.cloud.server's auto_ip).
            f"    networks:\n      - name: {PROVIDER['name']}\n        routes_externally: true\n"
        )

    write_private(
        CLOUDS,
        "# written by scripts/sandbox up (zenops OpenStack sandbox)\nclouds:\n"
        f"  sandbox:\n{cloud(TENANT_USER, sec['tenant'], TENANT_PROJECT)}"
        f"  sandbox-admin:\n{cloud('admin', sec['admin'], 'admin')}",
    )


# --- infrastructure: MariaDB, RabbitMQ -----------------------------------------------------------------------------


def mysql_sock() -> Path:
    return RUN / "mysqld.sock"


def start_mariadb() -> None:
    data = S / "mysql" / "data"
    if not (data / "mysql").is_dir():
        data.mkdir(parents=True, exist_ok=True)
        say("mariadb: initialising the data directory")
        run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            log="mariadb",
        )
    if start(
        "mariadb",
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={mysql_sock()}",
            f"--port={PORTS['mysql']}",
            "--bind-address=127.0.0.1",
            "--user=root",
            f"--pid-file={RUN / 'mariadbd.pid'}",
            f"--log-error={LOG / 'mariadb-error.log'}",
            "--skip-name-resolve",
            "--max-connections=1000",
            "--innodb-buffer-pool-size=128M",
            "--innodb-log-file-size=64M",
            "--performance-schema=OFF",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--skip-log-bin",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
        ],
    ):
        say("mariadb: started")


def mysql(sql: str, check: bool = True) -> str:
    res = run(
        ["mariadb", "--no-defaults", f"--socket={mysql_sock()}", "-uroot", "-N", "-B", "-e", sql],
        log="mariadb",
        check=check,
        quiet_log=True,
    )
    return res.stdout.decode()


def setup_databases(sec: dict) -> None:
    stmts = [f"CREATE DATABASE IF NOT EXISTS {db} CHARACTER SET utf8mb4" for db in DATABASES]
    for host in ("127.0.0.1", "localhost"):
        stmts += [
            f"CREATE USER IF NOT EXISTS 'openstack'@'{host}' IDENTIFIED BY '{sec['db']}'",
            f"ALTER USER 'openstack'@'{host}' IDENTIFIED BY '{sec['db']}'",
            f"GRANT ALL PRIVILEGES ON *.* TO 'openstack'@'{host}'",
        ]
    mysql("; ".join(stmts))


def rabbit_env() -> dict:
    base = S / "rabbitmq"
    return service_env(
        {
            "HOME": str(base),
            "RABBITMQ_NODENAME": "zenops-sandbox@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(PORTS["amqp"]),
            "RABBITMQ_DIST_PORT": str(PORTS["dist"]),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(LOG / "rabbitmq"),
            "RABBITMQ_CONFIG_FILE": str(ETC / "rabbitmq" / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(ETC / "rabbitmq" / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(ETC / "rabbitmq" / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(RUN / "rabbitmq-beam.pid"),
            "ERL_EPMD_PORT": str(PORTS["epmd"]),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
    )


def start_rabbit() -> None:
    (S / "rabbitmq").mkdir(exist_ok=True)
    env = rabbit_env()
    # Our own epmd in the foreground: one that rabbitmq-server spawned would daemonise and outlive it.
    if start("epmd", ["epmd", "-port", str(PORTS["epmd"]), "-address", "127.0.0.1"], env):
        wait_for("epmd", lambda: tcp_ok(PORTS["epmd"]), 10, log="epmd")
    if start("rabbitmq", ["/usr/lib/rabbitmq/bin/rabbitmq-server"], env):
        say("rabbitmq: started")


def amqp_ready() -> bool:
    import kombu

    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{PORTS['amqp']}//", connect_timeout=2) as c:
        c.connect()
        return True


def queue_consumers(queue: str) -> int:
    import kombu

    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{PORTS['amqp']}//", connect_timeout=2) as c:
        ch = c.channel()
        try:
            _, _, consumers = ch.queue_declare(queue=queue, passive=True)
        except Exception:
            return 0
        return consumers


# --- OpenStack services --------------------------------------------------------------------------------------------


def conf(project: str) -> list[str]:
    files = {
        "keystone": ["keystone/keystone.conf"],
        "placement": ["placement/placement.conf"],
        "glance": ["glance/glance-api.conf"],
        "neutron": ["neutron/neutron.conf", "neutron/plugins/ml2/ml2_conf.ini"],
        "nova": ["nova/nova.conf"],
    }
    out = []
    for f in files[project]:
        out += ["--config-file", str(ETC / f)]
    return out


def sync_keystone(sec: dict) -> None:
    km = [BIN / "keystone-manage", *conf("keystone")]
    for d in ("fernet-keys", "credential-keys"):
        (S / "keystone" / d).mkdir(parents=True, exist_ok=True)
        (S / "keystone" / d).chmod(0o700)
    run([*km, "db_sync"], log="keystone-setup")
    run([*km, "fernet_setup", "--keystone-user", "root", "--keystone-group", "root"], log="keystone-setup")
    run([*km, "credential_setup", "--keystone-user", "root", "--keystone-group", "root"], log="keystone-setup")
    url = f"http://127.0.0.1:{PORTS['keystone']}/v3/"
    run(
        [
            *km,
            "bootstrap",
            "--bootstrap-admin-url",
            url,
            "--bootstrap-internal-url",
            f"http://{INTERNAL_HOST}:{PORTS['keystone']}/v3/",
            "--bootstrap-public-url",
            url,
            "--bootstrap-region-id",
            REGION,
        ],
        log="keystone-setup",
        # From the environment, not argv: kept out of the process list and the setup log, and a password that starts
        # with "-" is not taken for an option (it was: token_urlsafe can start with one).
        env=service_env({"OS_BOOTSTRAP_PASSWORD": sec["admin"]}),
    )


def sync_nova() -> None:
    nm = [BIN / "nova-manage", *conf("nova")]
    sec = load_secrets()
    run([*nm, "api_db", "sync"], log="nova-setup")
    run([*nm, "cell_v2", "map_cell0", "--database_connection", db_url(sec, "nova_cell0")], log="nova-setup")
    res = run([*nm, "cell_v2", "create_cell", "--name", "cell1"], log="nova-setup", check=False)
    if res.returncode not in (0, 2):  # 2: the cell exists already
        raise SandboxError("nova-manage cell_v2 create_cell failed" + tail(LOG / "nova-setup.log"))
    run([*nm, "db", "sync"], log="nova-setup")


def sync_databases(sec: dict) -> None:
    fns = {
        "keystone": lambda: sync_keystone(sec),
        "placement": lambda: run([BIN / "placement-manage", *conf("placement"), "db", "sync"], log="placement-setup"),
        "glance": lambda: run([BIN / "glance-manage", *conf("glance"), "db_sync"], log="glance-setup"),
        "neutron": lambda: run([BIN / "neutron-db-manage", *conf("neutron"), "upgrade", "heads"], log="neutron-setup"),
        "nova": sync_nova,
    }
    todo = [name for name in fns if not marker(f"db-{name}").exists()]
    if not todo:
        return
    say(f"databases: creating schemas for {', '.join(todo)} (in parallel)")
    t = time.monotonic()
    parallel(*[(lambda n=name: once(f"db-{n}", fns[n])) for name in todo])
    say(f"databases: ready in {time.monotonic() - t:.1f}s")


def gunicorn(name: str, port: int) -> list[str]:
    extra = ["--bind", f"{INTERNAL_HOST}:{port}"] if name in SERVER_REACHABLE_APIS else []
    return [
        str(BIN / "gunicorn"),
        "--bind",
        f"127.0.0.1:{port}",
        *extra,
        "--workers",
        "1",
        "--threads",
        "4",
        "--worker-class",
        "gthread",
        "--timeout",
        "300",
        "--graceful-timeout",
        "5",
        "--name",
        f"zenops-sandbox-{name}",
        "--no-control-socket",
        "--pid",
        str(RUN / f"{name}-gunicorn.pid"),
        f"zenops_sandbox.wsgi:{name}",
    ]


APIS = ["keystone", "placement", "glance", "neutron", "nova"]
NOVA_DAEMONS = ["nova-conductor", "nova-scheduler"]
ALL_SERVICES = ["mariadb", "epmd", "rabbitmq", *[f"{a}-api" for a in APIS], *NOVA_DAEMONS, "nova-compute"]


def start_apis() -> None:
    started = [a for a in APIS if start(f"{a}-api", gunicorn(a, PORTS[a]))]
    if started:
        say(f"started: {', '.join(started)} (gunicorn)")


def start_nova_daemons() -> None:
    """nova-conductor and nova-scheduler; they need their service user in Keystone at start."""
    started = [d for d in NOVA_DAEMONS if start(d, [str(BIN / d), *conf("nova")])]
    if started:
        say(f"started: {', '.join(started)}")


def remove_orphan_servers() -> None:
    """Before a compute service that is new to this database starts: remove server containers no database here owns.

    They are left by a sandbox whose state is gone (a purged or deleted checkout, a CI clone, a machine that restarted
    mid-run). nova-compute refuses to start beside them ("My hypervisor has existing instances, but I appear to be a
    new service in this database"), and nothing could ever delete them through Nova.
    """
    known = mysql(
        f"SELECT COUNT(*) FROM nova.services WHERE host='{HOST}' AND `binary`='nova-compute' AND deleted=0"
    ).strip()
    if known not in ("", "0"):
        return
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}.instance", check=False).split()
    if ids:
        docker("rm", "-f", "-v", *ids, check=False)
        nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}.network", check=False).split()
        if nets:
            docker("network", "rm", *nets, check=False)
        say(
            f"removed {len(ids)} server container(s) and {len(nets)} Docker network(s) left by a sandbox whose "
            "state is gone (this database does not know them)"
        )


def start_compute() -> None:
    if read_pid("nova-compute"):
        return
    remove_orphan_servers()
    for daemon, queue in (("nova-conductor", "conductor"), ("nova-scheduler", "scheduler")):
        wait_for(
            f"{daemon} consuming its queue",
            lambda q=queue: queue_consumers(q),
            120,
            interval=0.5,
            log=daemon,
            proc=daemon,
        )
    start("nova-compute", [str(BIN / "nova-compute"), *conf("nova")])
    say("started: nova-compute")


def wait_compute_ready() -> None:
    wait_for(
        "nova-compute consuming its queue",
        lambda: queue_consumers(f"compute.{HOST}"),
        180,
        interval=0.5,
        log="nova-compute",
        proc="nova-compute",
    )

    def mapped() -> bool:
        node = mysql(f"SELECT COUNT(*) FROM nova.compute_nodes WHERE host='{HOST}' AND deleted=0").strip()
        if node in ("", "0"):
            return False
        if mysql(f"SELECT COUNT(*) FROM nova_api.host_mappings WHERE host='{HOST}'").strip() != "0":
            return True
        run([BIN / "nova-manage", *conf("nova"), "cell_v2", "discover_hosts"], log="nova-setup")
        return mysql(f"SELECT COUNT(*) FROM nova_api.host_mappings WHERE host='{HOST}'").strip() != "0"

    wait_for("compute host discovered (cell mapping)", mapped, 120, interval=1, log="nova-compute")

    def heartbeat() -> bool:
        # The scheduler skips a compute whose last report is older than service_down_time (60 s): after a long
        # `down` the consumer is there before the first report, and a boot then fails with NoValidHost.
        age = mysql(
            "SELECT TIMESTAMPDIFF(SECOND, updated_at, UTC_TIMESTAMP()) FROM nova.services "
            f"WHERE host='{HOST}' AND `binary`='nova-compute' AND deleted=0 AND disabled=0"
        ).strip()
        return age not in ("", "NULL") and int(age) < 30

    wait_for("nova-compute reporting in (service up)", heartbeat, 90, interval=1, log="nova-compute")
    say("nova-compute: consuming its queue, host mapped")


# --- cloud content -------------------------------------------------------------------------------------------------


def connect(cloud: str):
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(CLOUDS)
    import openstack

    return openstack.connect(cloud=cloud)


def ensure_identity(sec: dict) -> None:
    conn = connect("sandbox-admin")
    idp = conn.identity

    def project(name: str, desc: str):
        return idp.find_project(name, domain_id="default") or idp.create_project(
            name=name, domain_id="default", description=desc
        )

    def role(name: str):
        return idp.find_role(name) or idp.create_role(name=name)

    def user(name: str, pw: str, proj):
        # An existing user keeps its password (it came from the same secrets.json; a password update would also
        # revoke the services' tokens).
        return idp.find_user(name, domain_id="default") or idp.create_user(
            name=name, password=pw, domain_id="default", default_project_id=proj.id
        )

    service_p = project("service", "OpenStack service users")
    tenant_p = project(TENANT_PROJECT, "zenops tenant (sandbox)")
    roles = {r: role(r) for r in ("admin", "member", "reader", "service")}
    svc_user = user(SERVICE_USER, sec["service"], service_p)
    for r in ("admin", "service"):
        idp.assign_project_role_to_user(service_p, svc_user, roles[r])
    ten_user = user(TENANT_USER, sec["tenant"], tenant_p)
    for r in ("member", "reader"):
        idp.assign_project_role_to_user(tenant_p, ten_user, roles[r])
    catalog = [
        ("placement", "placement", f"http://127.0.0.1:{PORTS['placement']}"),
        ("glance", "image", f"http://127.0.0.1:{PORTS['glance']}"),
        ("neutron", "network", f"http://127.0.0.1:{PORTS['neutron']}"),
        ("nova", "compute", f"http://127.0.0.1:{PORTS['nova']}/v2.1"),
    ]
    for name, stype, url in catalog:
        svc = idp.find_service(name) or idp.create_service(name=name, type=stype, is_enabled=True)
        have = {e.interface for e in idp.endpoints(service_id=svc.id)}
        for iface in ("public", "internal", "admin"):
            if iface not in have:
                idp.create_endpoint(service_id=svc.id, interface=iface, url=url, region_id=REGION)
    # the APIs the servers reach: their internal endpoints on the public network's gateway (kept state from before
    # is updated in place)
    internal = {
        "identity": f"http://{INTERNAL_HOST}:{PORTS['keystone']}/v3/",
        "compute": f"http://{INTERNAL_HOST}:{PORTS['nova']}/v2.1",
        "image": f"http://{INTERNAL_HOST}:{PORTS['glance']}",
        "network": f"http://{INTERNAL_HOST}:{PORTS['neutron']}",
    }
    for stype, url in internal.items():
        svc = next(iter(idp.services(type=stype)))
        for e in idp.endpoints(service_id=svc.id, interface="internal"):
            if e.url != url:
                idp.update_endpoint(e, url=url)


def ensure_networks(conn) -> None:
    net = conn.network
    admin_project = conn.current_project_id
    for spec, external in ((PROVIDER, False), (PUBLIC, True)):
        n = net.find_network(spec["name"])
        if not n:
            n = net.create_network(
                name=spec["name"],
                provider_network_type="flat",
                provider_physical_network=spec["name"],
                is_shared=not external,
                is_router_external=external,
                project_id=admin_project,
            )
            say(f"network {spec['name']}: created ({spec['cidr']})")
        if not list(net.subnets(network_id=n.id)):
            net.create_subnet(
                network_id=n.id,
                name=f"{spec['name']}-subnet",
                ip_version=4,
                cidr=spec["cidr"],
                gateway_ip=spec["gateway"],
                enable_dhcp=False,
                allocation_pools=[{"start": spec["pool"][0], "end": spec["pool"][1]}],
            )


def ensure_flavors(conn) -> None:
    have = {f.name for f in conn.compute.flavors(is_public=None)}
    for name, vcpus, ram, disk, eph in FLAVORS:
        if name not in have:
            conn.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, ephemeral=eph, is_public=True)
            say(f"flavor {name}: created")


def ensure_image(conn) -> None:
    props = {
        "zenops_container_image": GUEST_IMAGE,
        "os_admin_user": GUEST_USER,
        "os_distro": "debian",
        "os_version": "12",
    }
    img = conn.image.find_image(IMAGE_NAME)
    if img and img.status != "active":
        conn.image.delete_image(img)
        img = None
    if not img:
        img = conn.image.create_image(
            name=IMAGE_NAME,
            data=b"\0" * (1 << 20),
            disk_format="raw",
            container_format="bare",
            visibility="public",
            allow_duplicates=True,
            **props,
        )
        say(f"image {IMAGE_NAME}: uploaded (1 MiB placeholder -> container {GUEST_IMAGE})")
    else:
        # The SDK maps some properties (os_distro, os_admin_user, ...) to attributes, others stay in .properties.
        stale = {k: v for k, v in props.items() if (getattr(img, k, None) or img.properties.get(k)) != v}
        if stale:
            conn.image.update_image(img, **stale)


def ensure_content() -> None:
    conn = connect("sandbox-admin")
    parallel(lambda: ensure_networks(conn), lambda: ensure_flavors(conn), lambda: ensure_image(conn))


def ensure_host_networking() -> None:
    """The public network's local bridge (a route for floating IPs) and leak guards for the sandbox's ranges."""
    for spec in (PROVIDER, PUBLIC):
        try:
            netutil.check_overlap(spec["cidr"], own_bridge=PUBLIC_BRIDGE if spec is PUBLIC else None)
        except netutil.OverlapError as e:
            if spec is PROVIDER and _provider_bridge_present():
                continue
            raise SandboxError(str(e)) from None
    if docker("network", "inspect", PUBLIC_DOCKER_NET, check=False).strip() in ("", "[]"):
        docker(
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            PUBLIC["cidr"],
            "--gateway",
            PUBLIC["gateway"],
            "--label",
            f"{LABEL}=1",
            "-o",
            f"com.docker.network.bridge.name={PUBLIC_BRIDGE}",
            "-o",
            "com.docker.network.bridge.enable_ip_masquerade=false",
            PUBLIC_DOCKER_NET,
        )
    for spec in (PROVIDER, PUBLIC):
        # A blackhole route with a high metric: while a mirror bridge exists its route wins; once it is gone,
        # traffic to the sandbox's ranges dies here instead of leaving through the default route.
        subprocess.run(
            ["ip", "route", "replace", "blackhole", spec["cidr"], "metric", str(GUARD_ROUTE_METRIC)],
            capture_output=True,
        )


def _provider_bridge_present() -> bool:
    routes = netutil._ip_json("route", "show", PROVIDER["cidr"])
    return any(str(r.get("dev", "")).startswith("zsb-") for r in routes)


# --- guest image ---------------------------------------------------------------------------------------------------


def ensure_guest_image() -> None:
    if subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
        say(f"{BASE_IMAGE} missing: building it with scripts/build-images")
        run([REPO / "scripts" / "build-images"], log="images", env=dict(os.environ))
    base_id = docker("image", "inspect", "-f", "{{.Id}}", BASE_IMAGE).strip()
    h = hashlib.sha256(base_id.encode())
    for f in sorted((SRC / "guest").iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    digest = h.hexdigest()[:16]
    have = docker(
        "image", "inspect", "-f", '{{index .Config.Labels "zenops.sandbox.guest"}}', GUEST_IMAGE, check=False
    ).strip()
    if have == digest:
        return
    t = time.monotonic()
    run(
        ["docker", "build", "-q", "--label", f"zenops.sandbox.guest={digest}", "-t", GUEST_IMAGE, SRC / "guest"],
        log="images",
        env=dict(os.environ),
    )
    say(f"guest image {GUEST_IMAGE}: built in {time.monotonic() - t:.1f}s")


# --- smoke check ---------------------------------------------------------------------------------------------------


def ensure_smoke_key() -> Path:
    if not SMOKE_KEY.exists():
        SMOKE_KEY.parent.mkdir(mode=0o700, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sandbox-smoke", "-f", str(SMOKE_KEY)],
            check=True,
        )
    return SMOKE_KEY


def ssh_argv(key: Path, user: str, ip: str, *cmd: str) -> list[str]:
    return [
        "ssh",
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=3",
        "-o",
        "LogLevel=ERROR",
        f"{user}@{ip}",
        *cmd,
    ]


def wait_ssh(key: Path, user: str, ip: str, timeout: float = 60) -> str:
    def probe():
        res = subprocess.run(ssh_argv(key, user, ip, "sudo -n id -un"), capture_output=True, text=True, timeout=15)
        return res.stdout.strip() if res.returncode == 0 else None

    return wait_for(f"ssh {user}@{ip}", probe, timeout, interval=0.3)


def smoke() -> None:
    conn = connect("sandbox")
    key = ensure_smoke_key()
    pub = (key.parent / (key.name + ".pub")).read_text().strip()
    kp = conn.compute.find_keypair("sandbox-smoke")
    if kp and kp.public_key.strip() != pub:
        conn.compute.delete_keypair(kp)
        kp = None
    if not kp:
        conn.compute.create_keypair(name="sandbox-smoke", public_key=pub)
    image = conn.image.find_image(IMAGE_NAME, ignore_missing=False)
    flavor = conn.compute.find_flavor("gp.5.2.8", ignore_missing=False)
    net = conn.network.find_network(PROVIDER["name"], ignore_missing=False)
    t0 = time.monotonic()
    server = conn.compute.create_server(
        name=f"sandbox-smoke-{int(time.time())}",
        image_id=image.id,
        flavor_id=flavor.id,
        networks=[{"uuid": net.id}],
        key_name="sandbox-smoke",
    )
    try:
        server = conn.compute.wait_for_server(server, status="ACTIVE", failures=["ERROR"], interval=0.5, wait=180)
        t_active = time.monotonic() - t0
        ip = next(a["addr"] for addrs in server.addresses.values() for a in addrs if a.get("version") == 4)
        who = wait_ssh(key, GUEST_USER, ip)
        t_ssh = time.monotonic() - t0
        if who != "root":
            raise SandboxError(f"smoke: sudo over ssh gave {who!r}, expected root")
    finally:
        t1 = time.monotonic()
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, interval=0.5, wait=120)
        t_del = time.monotonic() - t1
    say(
        f"smoke: gp.5.2.8 on {PROVIDER['name']}: ACTIVE {t_active:.1f}s, ssh {GUEST_USER}@{ip} + sudo ok at "
        f"{t_ssh:.1f}s, deleted in {t_del:.1f}s"
    )


# --- commands ------------------------------------------------------------------------------------------------------


def other_sandboxes() -> set[Path]:
    """Sandbox dirs other than ours whose services run (their pid files name them): they hold the ports."""
    found = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"ZENOPS_SANDBOX_DIR="):
                d = Path(item.split(b"=", 1)[1].decode(errors="replace"))
                if d.resolve() != S and any(
                    f.read_text().split()[:1] == [p.name] for f in (d / "run").glob("*.pid") if f.is_file()
                ):
                    found.add(d)
                break
    return found


def take_over() -> None:
    """One sandbox per machine: stop one started from another directory (e.g. a checkout left running before CI)."""
    for d in sorted(other_sandboxes()):
        say(f"a sandbox from {d} is running and holds the ports: stopping it (scripts/sandbox down there)")
        subprocess.run(
            [sys.executable, "-m", "zenops_sandbox.manage", "down"],
            check=False,
            env={**os.environ, "ZENOPS_SANDBOX_DIR": str(d), "PYTHONPATH": str(SRC)},
        )


def preflight() -> None:
    if os.geteuid() != 0:
        raise SandboxError("scripts/sandbox needs root (Docker, iptables, routes, MariaDB as root)")
    for tool in (
        "docker",
        "iptables",
        "iptables-restore",
        "ip",
        "mariadbd",
        "mariadb-install-db",
        "epmd",
        "ssh",
        "ssh-keygen",
    ):
        if not shutil.which(tool):
            raise SandboxError(
                f"{tool} not found (scripts/sandbox installs mariadb-server rabbitmq-server; "
                "scripts/setup installs docker.io, iptables, openssh-client)"
            )
    if not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        raise SandboxError("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise SandboxError("Docker does not answer: run scripts/start-dockerd")
    if not (BIN / "gunicorn").exists():
        raise SandboxError(f"no sandbox venv at {VENV}: run scripts/sandbox up (it creates it)")
    take_over()
    for name, port in PORTS.items():
        owner = {"mysql": "mariadb", "amqp": "rabbitmq", "dist": "rabbitmq", "epmd": "epmd"}.get(name, f"{name}-api")
        if not read_pid(owner) and tcp_ok(port):
            raise SandboxError(f"port 127.0.0.1:{port} ({name}) is in use by something else: stop it first")


def cmd_up(args) -> int:
    preflight()
    for d in (
        ETC,
        LOG,
        RUN,
        STATE,
        S / "home",
        S / "lock",
        S / "nova" / "instances",
        S / "neutron",
        S / "glance" / "images",
        S / "glance" / "staging",
        S / "glance" / "tasks",
        S / "snapshots",
        LOG / "rabbitmq",
    ):
        d.mkdir(parents=True, exist_ok=True)
    S.chmod(0o700)
    fresh = not marker("db-nova").exists()
    say(f"up ({'fresh' if fresh else 'restart with kept state'}) in {S}")
    sec = load_secrets()
    write_configs(sec)
    write_clouds(sec)
    ensure_host_networking()
    image_thread_err: list[BaseException] = []

    def image_job():
        try:
            ensure_guest_image()
        except BaseException as e:
            image_thread_err.append(e)

    image_thread = threading.Thread(target=image_job)
    image_thread.start()
    start_mariadb()
    start_rabbit()
    wait_for("mariadb", lambda: mysql("SELECT 1", check=False).strip() == "1", 60, log="mariadb-error", proc="mariadb")
    setup_databases(sec)
    sync_databases(sec)
    wait_for("rabbitmq", amqp_ready, 90, interval=0.5, log="rabbitmq", proc="rabbitmq")
    start_apis()
    wait_for("keystone API", lambda: http_ok(PORTS["keystone"], "/v3"), 90, log="keystone-api", proc="keystone-api")
    # Every time, serially and before any other API sees traffic: it also warms Keystone up (a burst of concurrent
    # first requests right after a start sometimes got a spurious 403 on identity:validate_token).
    retrying("identity", lambda: ensure_identity(sec))
    start_nova_daemons()
    start_compute()
    for api in APIS[1:]:
        wait_for(f"{api} API", lambda api=api: http_ok(PORTS[api]), 120, log=f"{api}-api", proc=f"{api}-api")
    say("APIs answer: keystone placement glance neutron nova")
    image_thread.join()
    if image_thread_err:
        raise image_thread_err[0]
    retrying("cloud content", ensure_content)
    wait_compute_ready()
    say(
        f"up: ready in {time.monotonic() - T0:.1f}s; export OS_CLIENT_CONFIG_FILE={CLOUDS} "
        "(clouds: sandbox, sandbox-admin)"
    )
    if not args.no_smoke:
        smoke()
    say(f"up: done in {time.monotonic() - T0:.1f}s")
    return 0


def cleanup_host() -> list[str]:
    """Containers, Docker networks, iptables rules and guard routes the sandbox made."""
    done = []
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}", check=False).split()
    if ids:
        docker("rm", "-f", "-v", *ids, check=False)
        done.append(f"{len(ids)} container(s)")
    nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}", check=False).split()
    if nets:
        docker("network", "rm", *nets, check=False)
        done.append(f"{len(nets)} Docker network(s)")
    ipt = ["iptables", "-t", "nat"]
    for hook in ("PREROUTING", "OUTPUT"):
        while subprocess.run([*ipt, "-D", hook, "-j", FIP_CHAIN], capture_output=True).returncode == 0:
            pass
    if subprocess.run([*ipt, "-F", FIP_CHAIN], capture_output=True).returncode == 0:
        subprocess.run([*ipt, "-X", FIP_CHAIN], capture_output=True)
        done.append(f"iptables chain {FIP_CHAIN}")
    routes = netutil._ip_json("route", "show", "type", "blackhole")
    n = 0
    for r in routes:
        if r.get("metric") == GUARD_ROUTE_METRIC:
            subprocess.run(
                ["ip", "route", "del", "blackhole", r["dst"], "metric", str(GUARD_ROUTE_METRIC)], capture_output=True
            )
            n += 1
    if n:
        done.append(f"{n} guard route(s)")
    # server snapshots' local copies (Glance keeps their data; a server booted from one loads it again)
    tags = docker("images", "-q", "zenops-sandbox/snapshot", check=False).split()
    if tags:
        docker("rmi", "-f", *sorted(set(tags)), check=False)
        done.append(f"{len(set(tags))} snapshot image(s) in Docker")
    cached = list((S / "snapshots").glob("*.tar*")) if (S / "snapshots").is_dir() else []
    for path in cached:
        path.unlink(missing_ok=True)
    if cached:
        done.append(f"{len(cached)} snapshot archive(s)")
    return done


def delete_servers() -> int:
    """Delete every server through Nova while it runs: its container is the server, and `down` removes those."""
    if not (CLOUDS.exists() and all(read_pid(n) for n in ("nova-api", "nova-compute", "neutron-api", "keystone-api"))):
        return 0
    try:
        conn = connect("sandbox-admin")
        servers = list(conn.compute.servers(all_projects=True))
        for s in servers:
            conn.compute.delete_server(s, ignore_missing=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and list(conn.compute.servers(all_projects=True)):
            time.sleep(0.5)
        return len(servers)
    except Exception as e:
        say(f"could not delete the servers through Nova ({e}); removing their containers directly")
        return 0


def cmd_down(args) -> int:
    n = delete_servers()
    if n:
        say(f"deleted {n} server(s) through Nova")
    stopped: list[str] = []
    timings: dict[str, float] = {}

    def stop_timed(name: str, timeout: float) -> None:
        t = time.monotonic()
        if stop(name, timeout):
            stopped.append(name)
            timings[name] = time.monotonic() - t

    # OpenStack services first (all at once; they keep no state worth a long wait), then RabbitMQ, then MariaDB.
    parallel(*[(lambda n=n: stop_timed(n, 4)) for n in ALL_SERVICES[3:]])
    stop_timed("rabbitmq", 10)
    stop_timed("epmd", 5)
    stop_timed("mariadb", 30)
    slow = {n: round(t, 1) for n, t in timings.items() if t > 3}
    if slow:
        say(f"slow to stop (s): {slow}")
    strays = stray_pids()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    removed = cleanup_host()
    say(
        "stopped: "
        + (", ".join(stopped) or "nothing was running")
        + (f"; killed {len(strays)} stray process(es)" if strays else "")
    )
    say("removed: " + (", ".join(removed) or "nothing left on the host"))
    if args.purge and S.exists():
        for entry in S.iterdir():
            if entry.name not in ("venv", ".lock"):
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        say(f"purged the state in {S} (the venv is kept: rm -rf {VENV} to drop it too)")
    return 0


def health(name: str) -> str:
    port = {"mariadb": "mysql", "rabbitmq": "amqp", "epmd": "epmd"}.get(name, name.replace("-api", ""))
    if name.endswith("-api"):
        return "http ok" if http_ok(PORTS[port]) else "http not answering"
    if name in ("mariadb", "rabbitmq", "epmd"):
        return f"port {PORTS[port]} open" if tcp_ok(PORTS[port]) else f"port {PORTS[port]} closed"
    queue = {"nova-conductor": "conductor", "nova-scheduler": "scheduler", "nova-compute": f"compute.{HOST}"}[name]
    try:
        n = queue_consumers(queue)
    except Exception:
        return "queue unknown (rabbitmq down?)"
    return f"{n} consumer(s) on {queue}" if n else f"NOT consuming {queue}"


def cmd_status(args) -> int:
    print(f"sandbox dir: {S}")
    running = 0
    total_kib = 0
    print(f"{'service':16} {'pid':>8} {'RSS MiB':>8}  health")
    for name in ALL_SERVICES:
        pid = read_pid(name)
        if pid:
            running += 1
            rss = group_rss_kib(pid)
            total_kib += rss
            print(f"{name:16} {pid:>8} {rss / 1024:8.0f}  {health(name)}")
        else:
            print(f"{name:16} {'-':>8} {'-':>8}  stopped")
    print(f"total RSS: {total_kib / 1024:.0f} MiB ({running}/{len(ALL_SERVICES)} running)")
    containers = docker(
        "ps",
        "-a",
        "--filter",
        f"label={LABEL}",
        "--format",
        '{{.Names}}\t{{.Status}}\t{{.Label "zenops.sandbox.name"}}',
        check=False,
    ).strip()
    if running == len(ALL_SERVICES):
        try:
            conn = connect("sandbox-admin")
            servers = list(conn.compute.servers(all_projects=True))
            print(f"servers ({len(servers)}):")
            for s in servers:
                addrs = ", ".join(a["addr"] for v in (s.addresses or {}).values() for a in v)
                print(f"  {s.name:28} {s.status:8} {s.id}  {addrs}")
        except Exception as e:
            print(f"servers: cannot list ({e})")
    print("containers:" + ("\n  " + containers.replace("\n", "\n  ") if containers else " none"))
    print(f"clouds.yaml: {CLOUDS}" + ("" if CLOUDS.exists() else " (not written yet)"))
    return 0 if running == len(ALL_SERVICES) else 3


def cmd_fault_api(args) -> int:
    """`fault api add|clear|show`: the API fault rules the services read at once (zenops_sandbox.faults)."""
    from zenops_sandbox import faults

    path = faults.faults_file()
    try:
        rules = faults.read(path)
    except ValueError as e:
        if args.action != "clear":
            print(f"scripts/sandbox fault api: {path}: {e}; run `scripts/sandbox fault api clear`", file=sys.stderr)
            return 1
        rules = []
    if args.action == "add":
        rule = {"services": args.service or list(faults.DEFAULT_SERVICES), "fault": args.fault, "methods": args.method}
        for key in ("every", "probability", "seed", "path", "agent", "retry_after", "delay", "limit"):
            if getattr(args, key) is not None:
                rule[key] = getattr(args, key)
        if args.discovery:
            rule["discovery"] = True
        try:
            rules.append(faults.check_rule(rule))
        except faults.RuleError as e:
            print(f"scripts/sandbox fault api add: {e}", file=sys.stderr)
            return 2
        faults.write(path, rules)
    elif args.action == "clear":
        rules = []
        faults.write(path, rules)
    if not rules:
        print("api faults: none")
    for i, rule in enumerate(rules, 1):
        print(f"api fault {i}: {faults.describe(rule)}")
    return 0


def cmd_env(args) -> int:
    print(f"export OS_CLIENT_CONFIG_FILE={CLOUDS}")
    print("export OS_CLOUD=sandbox")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/sandbox", description="zenops local OpenStack sandbox")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start (or create) the sandbox; idempotent")
    up.add_argument("--no-smoke", action="store_true", help="skip the boot + SSH smoke check")
    down = sub.add_parser("down", help="stop everything and remove containers, networks, iptables rules")
    down.add_argument("--purge", action="store_true", help="also delete the state (databases, configs, logs)")
    sub.add_parser("status", help="services, health, memory, servers")
    sub.add_parser("env", help="print the environment for clients")
    fault = sub.add_parser("fault", help="inject faults (api: HTTP errors, late answers, dropped connections)")
    fsub = fault.add_subparsers(dest="layer", required=True)
    api = fsub.add_parser("api", help="faults of the Nova, Neutron, Glance (and on request Keystone, Placement) APIs")
    asub = api.add_subparsers(dest="action", required=True)
    add = asub.add_parser(
        "add",
        help="add a rule (in effect at once, in the running services)",
        description="Add an API fault rule. The first rule that fires on a request wins; `clear` removes them all.",
    )
    add.add_argument("fault", choices=["500", "502", "503", "429", "timeout", "drop"],
                     help="an HTTP error (429 carries Retry-After), timeout (carried out, answered --delay s late) or "
                     "drop (carried out, connection closed without an answer)")  # fmt: skip
    rate = add.add_mutually_exclusive_group(required=True)
    rate.add_argument("--every", type=int, metavar="N", help="fault every N-th matching request")
    rate.add_argument("--probability", type=float, metavar="P", help="fault each matching request with probability P")
    add.add_argument("--seed", type=int, help="seed of --probability's random draws (default 0)")
    add.add_argument("--service", action="append", choices=["nova", "neutron", "glance", "placement", "keystone"],
                     help="repeatable; default nova, neutron and glance (keystone only when named)")  # fmt: skip
    add.add_argument("--method", action="append", default=[], type=str.upper,
                     help="repeatable (GET, POST, PUT, PATCH, DELETE, HEAD); default all")  # fmt: skip
    add.add_argument("--path", help="only paths matching this regular expression (e.g. '/servers')")
    add.add_argument("--agent", metavar="REGEX",
                     help="only requests whose User-Agent matches (default 'openstacksdk': not the services' calls to "
                     "each other; '' for all)")  # fmt: skip
    add.add_argument("--retry-after", type=int, metavar="S", help="Retry-After header in seconds (default 1 for 429)")
    add.add_argument("--delay", type=float, metavar="S",
                     help="seconds to hold the answer (timeout: default 60; HTTP errors: default 0)")  # fmt: skip
    add.add_argument("--limit", type=int, metavar="N", help="fire at most N times")
    add.add_argument("--discovery", action="store_true", help="version documents (/, /v2.1) too")
    asub.add_parser("clear", help="remove every rule: no API fault")
    asub.add_parser("show", help="list the rules")
    args = p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `scripts/sandbox status | head` ends quietly
    if args.cmd == "env":
        return cmd_env(args)
    if args.cmd == "status":
        return cmd_status(args)
    if args.cmd == "fault":
        return cmd_fault_api(args)
    try:
        with locked():
            return {"up": cmd_up, "down": cmd_down}[args.cmd](args)
    except SandboxError as e:
        print(f"scripts/sandbox {args.cmd}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"scripts/sandbox {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        import traceback

        LOG.mkdir(parents=True, exist_ok=True)
        with open(LOG / "sandbox.log", "a") as f:
            f.write(f"\n==== {time.strftime('%F %T')} scripts/sandbox {args.cmd}\n{traceback.format_exc()}")
        print(
            f"scripts/sandbox {args.cmd}: error: {type(e).__name__}: {e}\n(traceback in {LOG / 'sandbox.log'}; "
            f"service logs in {LOG})",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
