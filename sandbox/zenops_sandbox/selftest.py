"""End-to-end checks of a running sandbox with openstacksdk, as the tenant cloud `sandbox` (admin only for quotas).

Run: scripts/sandbox selftest [CHECK...]   (after scripts/sandbox up; all checks without names). Prints one line per
check and "N passed, N failed".
  boot      gp.5.2.8 on provider: ACTIVE, SSH as debian (key from the keypair), hostname, sudo, reboot -> new boot id
  big       gp.5.24.96 boots (fake resources are large enough)
  fip       tenant vxlan network + router (gateway on public) + server + floating IP: ACTIVE, DNAT rule, SSH via
            the floating IP; disassociate and server delete remove the rule
  fail      zenops_test:fail=spawn -> ERROR with a fault naming the injection
  shutoff   a SHUTOFF server keeps its network when the other server on it goes away: it starts again (the
            network's Docker mirror is removed only once no container, in any state, is on it)
  resched   zenops_test:fail=reschedule -> ERROR "Exceeded maximum number of retries"
  slow      zenops_test:slow=6 -> BUILD for ~6 s, then ACTIVE; slow=60 deleted while building goes away quickly
  quota     admin lowers the tenant's cores to 4 -> gp.5.8.32 boot is refused with 403; quota restored
  snap      a server's snapshot (create_server_image) is an active Glance image; a server booted from it has the
            files written in / and in /var/lib/docker before, its own host keys and hostname; image deleted
"""

from __future__ import annotations

import subprocess
import sys
import time
import traceback
from collections.abc import Callable

from openstack import exceptions as os_exc

from zenops_sandbox import FIP_CHAIN
from zenops_sandbox import manage as m

RESULTS: list[tuple[str, bool, str]] = []
CHECKS: dict[str, Callable[[], None]] = {}  # name -> check, in the order main() defines (and runs) them
PREFIX = "selftest-"


def check(name: str):
    def deco(fn):
        def run(*a):
            t = time.monotonic()
            try:
                detail = fn(*a) or ""
                RESULTS.append((name, True, detail))
                print(f"PASS {name:8} {time.monotonic() - t:6.1f}s  {detail}", flush=True)
            except Exception as e:
                RESULTS.append((name, False, str(e)))
                print(f"FAIL {name:8} {time.monotonic() - t:6.1f}s  {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()

        CHECKS[name] = run
        return run

    return deco


def ipv4(server, kind: str = "fixed") -> str:
    for addrs in (server.addresses or {}).values():
        for a in addrs:
            if a.get("version") == 4 and a.get("OS-EXT-IPS:type", "fixed") == kind:
                return a["addr"]
    raise AssertionError(f"server {server.name} has no {kind} IPv4 address: {server.addresses}")


def ssh(key, user, ip, *cmd) -> str:
    res = subprocess.run(m.ssh_argv(key, user, ip, *cmd), capture_output=True, text=True, timeout=30)
    if res.returncode:
        raise AssertionError(f"ssh {user}@{ip} {' '.join(cmd)}: rc={res.returncode} {res.stderr.strip()}")
    return res.stdout.strip()


def boot(conn, name, flavor="gp.5.2.8", network=None, metadata=None, key=True, image=None):
    image = image or conn.image.find_image(m.IMAGE_NAME, ignore_missing=False)
    fl = conn.compute.find_flavor(flavor, ignore_missing=False)
    net = network or conn.network.find_network(m.PROVIDER["name"], ignore_missing=False)
    return conn.compute.create_server(
        name=PREFIX + name,
        image_id=image.id,
        flavor_id=fl.id,
        networks=[{"uuid": net.id}],
        metadata=metadata or {},
        key_name="sandbox-smoke" if key else None,
    )


def wait_status(conn, server, status, timeout=120):
    return conn.compute.wait_for_server(
        server, status=status, failures=[] if status == "ERROR" else ["ERROR"], interval=0.5, wait=timeout
    )


def fault_of(conn, server, timeout=20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = conn.compute.get_server(server)
        if s.fault and s.fault.get("message"):
            return s.fault["message"]
        time.sleep(0.5)
    raise AssertionError("no fault on the ERROR server")


def delete_all(conn, servers) -> None:
    for s in servers:
        conn.compute.delete_server(s, ignore_missing=True)
    for s in servers:
        conn.compute.wait_for_delete(s, interval=0.5, wait=120)


def nat_rules() -> str:
    return subprocess.run(["iptables", "-t", "nat", "-S", FIP_CHAIN], capture_output=True, text=True).stdout


def main(names: list[str]) -> int:
    conn = m.connect("sandbox")
    admin = m.connect("sandbox-admin")
    key = m.ensure_smoke_key()
    pub = (key.parent / (key.name + ".pub")).read_text().strip()
    if not conn.compute.find_keypair("sandbox-smoke"):
        conn.compute.create_keypair(name="sandbox-smoke", public_key=pub)
    cleanup_leftovers(conn)
    created = []

    @check("boot")
    def t_boot():
        t0 = time.monotonic()
        s = boot(conn, "boot")
        created.append(s)
        s = wait_status(conn, s, "ACTIVE")
        t_active = time.monotonic() - t0
        ip = ipv4(s)
        assert m.wait_ssh(key, m.GUEST_USER, ip) == "root"
        t_ssh = time.monotonic() - t0
        host = ssh(key, m.GUEST_USER, ip, "hostname")
        assert host == PREFIX + "boot", f"hostname {host!r}"
        assert ssh(key, "root", ip, "id -u") == "0"
        pw = ssh(key, m.GUEST_USER, ip, "sudo sshd -T | grep -i '^passwordauthentication'")
        assert pw.lower().endswith("no"), pw
        boot_id = ssh(key, m.GUEST_USER, ip, "cat /proc/sys/kernel/random/boot_id")
        conn.compute.reboot_server(s, "SOFT")
        time.sleep(1)
        wait_status(conn, s, "ACTIVE")
        m.wait_ssh(key, m.GUEST_USER, ip)
        boot_id2 = ssh(key, m.GUEST_USER, ip, "cat /proc/sys/kernel/random/boot_id")
        assert boot_id2 != boot_id, "boot id unchanged after reboot"
        conn.compute.stop_server(s)
        wait_status(conn, s, "SHUTOFF")
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Status}}", s.id], capture_output=True, text=True
        ).stdout.strip()
        assert state == "exited", f"container {state} while SHUTOFF"
        conn.compute.start_server(s)
        wait_status(conn, s, "ACTIVE")
        m.wait_ssh(key, m.GUEST_USER, ip)
        console = conn.compute.get_server_console_output(s, length=20)["output"]
        assert "Reached target" in console or "Started" in console, f"console: {console[-300:]!r}"
        return (
            f"ACTIVE {t_active:.1f}s, ssh ready {t_ssh:.1f}s at {ip}; reboot -> new boot id; stop/start; "
            f"console {len(console.splitlines())} lines"
        )

    @check("big")
    def t_big():
        t0 = time.monotonic()
        s = boot(conn, "big", flavor="gp.5.24.96")
        created.append(s)
        wait_status(conn, s, "ACTIVE")
        took = time.monotonic() - t0
        delete_all(conn, [s])
        return f"gp.5.24.96 ACTIVE in {took:.1f}s"

    @check("fip")
    def t_fip():
        net = conn.network.create_network(name=PREFIX + "net")
        subnet = conn.network.create_subnet(
            network_id=net.id, name=PREFIX + "subnet", ip_version=4, cidr="10.123.45.0/24", gateway_ip="10.123.45.1"
        )
        public = conn.network.find_network(m.PUBLIC["name"], ignore_missing=False)
        router = conn.network.create_router(name=PREFIX + "router", external_gateway_info={"network_id": public.id})
        conn.network.add_interface_to_router(router, subnet_id=subnet.id)
        fip = None
        try:
            t0 = time.monotonic()
            s = boot(conn, "fip", network=net)
            created.append(s)
            s = wait_status(conn, s, "ACTIVE")
            fixed = ipv4(s)
            port = next(conn.network.ports(device_id=s.id))
            t1 = time.monotonic()
            fip = conn.network.create_ip(floating_network_id=public.id, port_id=port.id, description=PREFIX)
            assert fip.status == "ACTIVE", f"floating IP status {fip.status}"
            t_fip = time.monotonic() - t1
            rule = f"-d {fip.floating_ip_address}/32 -j DNAT --to-destination {fixed}"
            assert rule in nat_rules(), f"no DNAT rule {rule!r} in {FIP_CHAIN}"
            assert m.wait_ssh(key, m.GUEST_USER, fip.floating_ip_address) == "root"
            t_ssh = time.monotonic() - t0
            seen = ""
            for _ in range(40):  # Nova learns the floating IP from Neutron's network-changed event
                try:
                    seen = ipv4(conn.compute.get_server(s), "floating")
                    break
                except AssertionError:
                    time.sleep(0.5)
            conn.network.update_ip(fip, port_id=None)
            time.sleep(0.3)
            assert str(fip.floating_ip_address) not in nat_rules(), "DNAT rule left after disassociate"
            assert conn.network.get_ip(fip).status == "DOWN"
            conn.network.update_ip(fip, port_id=port.id)  # associated again, then the server goes away
            assert rule in nat_rules(), "no DNAT rule after re-associating"
            delete_all(conn, [s])
            for _ in range(20):
                if rule not in nat_rules():
                    break
                time.sleep(0.25)
            assert rule not in nat_rules(), "DNAT rule left after the server (its port) was deleted"
            return (
                f"fixed {fixed} floating {fip.floating_ip_address}: FIP ACTIVE in {t_fip:.1f}s, ssh via FIP "
                f"{t_ssh:.1f}s after boot; Nova lists it: {'yes' if seen else 'not yet'}; rule gone on disassociate "
                "and on server delete"
            )
        finally:
            delete_all(conn, [c for c in created if c.name == PREFIX + "fip"])
            if fip:
                conn.network.delete_ip(fip, ignore_missing=True)
            conn.network.remove_interface_from_router(router, subnet_id=subnet.id)
            conn.network.update_router(router, external_gateway_info=None)
            conn.network.delete_router(router)
            conn.network.delete_network(net)

    @check("fail")
    def t_fail():
        s = boot(conn, "fail", metadata={"zenops_test:fail": "spawn"})
        created.append(s)
        wait_status(conn, s, "ERROR")
        msg = fault_of(conn, s)
        assert "zenops_test:fail" in msg, msg
        return f"ERROR, fault: {msg[:90]}"

    @check("shutoff")
    def t_shutoff():
        net = conn.network.create_network(name=PREFIX + "net")
        conn.network.create_subnet(
            network_id=net.id, name=PREFIX + "subnet", ip_version=4, cidr="10.123.46.0/24", gateway_ip="10.123.46.1"
        )
        mine = []
        try:
            a = wait_status(conn, boot(conn, "shutoff-a", network=net), "ACTIVE")
            mine.append(a)
            conn.compute.stop_server(a)
            wait_status(conn, a, "SHUTOFF")
            b = wait_status(conn, boot(conn, "shutoff-b", network=net), "ACTIVE")
            mine.append(b)
            delete_all(conn, [b])  # its removal prunes the mirrors no container is on
            mirror = f"zenops-sandbox-{net.id}"
            kept = subprocess.run(["docker", "network", "inspect", mirror], capture_output=True).returncode == 0
            assert kept, f"{mirror} removed while the SHUTOFF server {a.id} is on it"
            conn.compute.start_server(a)
            wait_status(conn, a, "ACTIVE", timeout=60)
            return f"{mirror} kept under the stopped server; it started again"
        finally:
            delete_all(conn, mine)
            conn.network.delete_network(net)

    @check("resched")
    def t_resched():
        s = boot(conn, "resched", metadata={"zenops_test:fail": "reschedule"})
        created.append(s)
        wait_status(conn, s, "ERROR")
        msg = fault_of(conn, s)
        assert "Exceeded maximum number of retries" in msg, msg
        return f"ERROR, fault: {msg[:90]}"

    @check("slow")
    def t_slow():
        t0 = time.monotonic()
        s = boot(conn, "slow", metadata={"zenops_test:slow": "6"})
        created.append(s)
        time.sleep(4)
        mid = conn.compute.get_server(s).status
        assert mid == "BUILD", f"status {mid} 4 s into a 6 s slow build"
        wait_status(conn, s, "ACTIVE")
        took = time.monotonic() - t0
        assert took >= 6, f"ACTIVE after {took:.1f}s, before the 6 s delay"
        s2 = boot(conn, "slow-del", metadata={"zenops_test:slow": "60"})
        created.append(s2)
        time.sleep(3)
        t1 = time.monotonic()
        delete_all(conn, [s2])
        gone = time.monotonic() - t1
        assert gone < 20, f"delete during a slow build took {gone:.1f}s"
        return f"BUILD at 4s, ACTIVE at {took:.1f}s; deleted mid-build in {gone:.1f}s"

    @check("quota")
    def t_quota():
        project = admin.identity.find_project(m.TENANT_PROJECT, ignore_missing=False)
        admin.set_compute_quotas(project.id, cores=4)
        try:
            try:
                s = boot(conn, "quota", flavor="gp.5.8.32")
                created.append(s)
            except os_exc.HttpException as e:
                assert e.status_code == 403, f"status {e.status_code}"
                return f"403: {str(e.details or e)[:80]}"
            raise AssertionError("boot over the cores quota was accepted")
        finally:
            admin.set_compute_quotas(project.id, cores=-1)

    @check("snap")
    def t_snap():
        s = boot(conn, "snap")
        created.append(s)
        s = wait_status(conn, s, "ACTIVE")
        ip = ipv4(s)
        m.wait_ssh(key, m.GUEST_USER, ip)
        mark = f"snap-{time.time_ns()}"
        ssh(key, "root", ip, f"echo {mark} > /etc/zenops-selftest && echo {mark} > /var/lib/docker/zenops-selftest")
        host_key = ssh(key, "root", ip, "cat /etc/ssh/ssh_host_ed25519_key.pub")
        t0 = time.monotonic()
        image = conn.compute.create_server_image(s, PREFIX + "snap", metadata={"zenops_selftest": "1"}, wait=True,
                                                 timeout=600)  # fmt: skip
        try:
            image = conn.image.get_image(image.id)
            assert image.status == "active", f"image {image.status}"
            t_image = time.monotonic() - t0
            t1 = time.monotonic()
            s2 = boot(conn, "snap-child", image=image)
            created.append(s2)
            s2 = wait_status(conn, s2, "ACTIVE")
            ip2 = ipv4(s2)
            m.wait_ssh(key, m.GUEST_USER, ip2)
            t_boot = time.monotonic() - t1
            for path in ("/etc/zenops-selftest", "/var/lib/docker/zenops-selftest"):
                got = ssh(key, "root", ip2, f"cat {path}")
                assert got == mark, f"{path} in the child: {got!r}"
            assert ssh(key, "root", ip2, "cat /etc/ssh/ssh_host_ed25519_key.pub") != host_key, "same host key"
            assert ssh(key, "root", ip2, "hostname") == PREFIX + "snap-child"
            return f"image {image.size >> 20} MiB active in {t_image:.1f}s; child ACTIVE + ssh in {t_boot:.1f}s"
        finally:
            conn.image.delete_image(image, ignore_missing=True)

    unknown = sorted(set(names) - set(CHECKS))
    if unknown:
        print(f"unknown check(s) {', '.join(unknown)}: choose from {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    try:
        for name, t in CHECKS.items():
            if not names or name in names:
                t()
    finally:
        delete_all(conn, created)
    passed = sum(ok for _, ok, _ in RESULTS)
    print(f"{passed} passed, {len(RESULTS) - passed} failed")
    return 0 if passed == len(RESULTS) else 1


def cleanup_leftovers(conn) -> None:
    old = [s for s in conn.compute.servers() if s.name.startswith(PREFIX)]
    delete_all(conn, old)
    for r in conn.network.routers(name=PREFIX + "router"):
        for p in conn.network.ports(device_id=r.id, device_owner="network:router_interface"):
            conn.network.remove_interface_from_router(r, port_id=p.id)
        conn.network.delete_router(r)
    for ip in conn.network.ips():
        if ip.description == PREFIX:
            conn.network.delete_ip(ip)
    for n in conn.network.networks(name=PREFIX + "net"):
        conn.network.delete_network(n)
    for image in conn.image.images():
        if str(image.name or "").startswith(PREFIX):
            conn.image.delete_image(image, ignore_missing=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
