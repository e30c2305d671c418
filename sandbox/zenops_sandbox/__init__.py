"""zenops sandbox: a one-machine OpenStack whose servers are systemd containers (see sandbox/README.md)."""

LABEL = "zenops.sandbox"  # Docker label on every container and network the sandbox creates
FIP_CHAIN = "ZENOPS-SANDBOX-FIP"  # iptables nat chain: one DNAT rule per associated floating IP
GUARD_ROUTE_METRIC = 4242  # blackhole routes for mirrored subnets carry this metric (removed by `down`)
