"""Filter zenops.inference.gateway_servers: HAProxy's ``show stat`` (CSV, from the runtime API) as a list of servers.

Used by the gateway role's drain, ready and status entry points. HAProxy's CSV has a header line (``# pxname,svname,
...``) naming every field; the values are kept under those names (numbers as integers, empty fields left out), so
nothing here depends on the field order of an HAProxy version.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_servers
short_description: Parse HAProxy's show stat output into a list of servers
description:
  - Takes the text HAProxy's runtime API answers to C(show stat) (CSV with its C(# pxname,svname,...) header) and
    returns one dict per server, keyed by HAProxy's field names (C(pxname), C(svname), C(status), C(scur),
    C(qcur), C(stot), C(check_status), ...), numbers as integers, empty fields left out, plus C(backend) (the
    proxy), C(name) (the server) and C(in_flight) (requests the server holds, current sessions plus its queue).
  - The FRONTEND and BACKEND summary lines are left out unless O(servers_only=false).
  - Fails on text without the header (an error message of the runtime API, for example), quoting its first line.
options:
  _input:
    description: The output of C(show stat) on HAProxy's runtime API.
    type: str
    required: true
  backend:
    description: Keep only the servers of this backend (proxy); empty keeps all.
    type: str
    default: ""
  servers_only:
    description: Leave out the FRONTEND and BACKEND summary lines.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Read the servers of backend vllm
  ansible.builtin.command:
    argv: [socat, -t, "10", stdio, "UNIX-CONNECT:/run/zenops-gateway/admin.sock"]
    stdin: show stat
  register: stat
  changed_when: false

- name: Name the servers that are up
  ansible.builtin.debug:
    msg: "{{ stat.stdout | zenops.inference.gateway_servers(backend='vllm') | selectattr('status', 'match', '^UP')
      | map(attribute='name') | list }}"
"""

RETURN = r"""
_value:
  description: One dict per server, in HAProxy's order.
  type: list
  elements: dict
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402

_SUMMARY = frozenset({"FRONTEND", "BACKEND"})


def _value(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def gateway_servers(stat: str, backend: str = "", servers_only: bool = True) -> list[dict[str, Any]]:
    if not isinstance(stat, str):
        raise AnsibleFilterError(f"gateway_servers: expected the text of show stat, got {type(stat).__name__}")
    lines = [line for line in stat.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        first = lines[0] if lines else "(nothing)"
        raise AnsibleFilterError(f"gateway_servers: not the output of show stat: {first}")
    header = lines[0][2:].rstrip(",").split(",")
    servers: list[dict[str, Any]] = []
    for line in lines[1:]:
        row = {name: _value(text) for name, text in zip(header, line.split(","), strict=False) if name and text}
        if servers_only and row.get("svname") in _SUMMARY:
            continue
        if backend and row.get("pxname") != backend:
            continue
        row["backend"] = row.get("pxname", "")
        row["name"] = row.get("svname", "")
        row["in_flight"] = sum(v for v in (row.get("scur"), row.get("qcur")) if isinstance(v, int))
        servers.append(row)
    return servers


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gateway_servers": gateway_servers}
