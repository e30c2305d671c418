#!/usr/bin/python
# Copyright: zenops developers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module zenops.inference.cpu_topology: CPU, SMT and NUMA topology facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cpu_topology
short_description: CPU, SMT and NUMA topology of a Linux host
version_added: "0.1.0"
description:
  - Reads C(/proc/cpuinfo), C(/proc/meminfo), C(/sys/devices/system/cpu) and C(/sys/devices/system/node) and returns
    the CPU model and flags, sockets, physical cores, SMT siblings, NUMA nodes with their CPUs, memory and distances,
    and the CPUs this process may run on.
  - Ansible's own facts have CPU flags and counts but no NUMA map and no SMT sibling map; C(lscpu -J) prints invalid
    JSON on util-linux 2.38 and 2.39. This module needs only the Python 3 standard library on the host.
  - In a container without C(/sys/devices/system/node) it reports a single node 0 holding all online CPUs with the
    totals of C(/proc/meminfo). Without topology files each CPU counts as its own core in package 0.
  - Sets the fact C(zenops_cpu_topology) and returns the same dictionary as RV(topology). Never changes the host.
author:
  - zenops developers
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads files; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
  facts:
    support: full
    description: Sets C(ansible_facts.zenops_cpu_topology).
  platform:
    platforms: posix
    support: full
    description: Linux only (reads /proc and /sys).
notes:
  - Runs without privileges. Only the flags avx, avx2, avx512f, avx512_bf16, avx512_vnni, avx512bw, avx512vl,
    avx512_fp16, amx_bf16, amx_int8, amx_tile and hypervisor are reported.
seealso:
  - name: Linux CPU topology (sysfs)
    description: Meaning of core_id, physical_package_id and thread_siblings_list.
    link: https://docs.kernel.org/admin-guide/cputopology.html
"""

EXAMPLES = r"""
- name: Read the CPU and NUMA topology
  zenops.inference.cpu_topology:

- name: Show the NUMA nodes
  ansible.builtin.debug:
    msg: "{{ ansible_facts['zenops_cpu_topology']['numa_nodes'] | map(attribute='cpus') | list }}"

- name: Register the result instead of using the fact
  zenops.inference.cpu_topology:
  register: topo

- name: Fail when AVX-512 is missing
  ansible.builtin.assert:
    that: "'avx512f' in topo.topology.flags"
"""

RETURN = r"""
topology:
  description: The topology of the host, the same dictionary as the fact C(zenops_cpu_topology).
  returned: always
  type: dict
  contains:
    schema:
      description: Version of this dictionary's layout.
      returned: always
      type: int
      sample: 1
    architecture:
      description: Machine architecture (C(uname -m)).
      returned: always
      type: str
      sample: x86_64
    vendor:
      description: CPU vendor from C(vendor_id) in C(/proc/cpuinfo); empty when the kernel does not report one.
      returned: always
      type: str
      sample: AuthenticAMD
    model_name:
      description: CPU model name from C(/proc/cpuinfo); empty when absent.
      returned: always
      type: str
      sample: AMD EPYC 9454 48-Core Processor
    family:
      description: CPU family (decimal); null when absent.
      returned: always
      type: int
      sample: 25
    model:
      description: CPU model number (decimal); null when absent.
      returned: always
      type: int
      sample: 17
    stepping:
      description: CPU stepping; null when absent.
      returned: always
      type: int
      sample: 1
    flags:
      description: The CPU flags relevant to inference that the CPU has, sorted.
      returned: always
      type: list
      elements: str
      sample: [avx, avx2, avx512_bf16, avx512_vnni, avx512bw, avx512f, avx512vl, hypervisor]
    sockets:
      description: Number of distinct physical packages among the online CPUs.
      returned: always
      type: int
      sample: 1
    numa_nodes:
      description: NUMA nodes, sorted by id. A single node 0 when the host shows no NUMA information.
      returned: always
      type: list
      elements: dict
      contains:
        id:
          description: Node number.
          returned: always
          type: int
          sample: 0
        cpus:
          description: Online CPUs of the node, sorted; empty for a memory-only node.
          returned: always
          type: list
          elements: int
          sample: [0, 1, 2, 3]
        memory_total_kib:
          description: Memory of the node in KiB.
          returned: always
          type: int
          sample: 98853436
        memory_free_kib:
          description: Free memory of the node in KiB.
          returned: always
          type: int
          sample: 96512340
        distances:
          description: Distances from this node to every node, in node order (10 means local).
          returned: always
          type: list
          elements: int
          sample: [10, 32]
    cpus:
      description: Every online CPU, sorted by CPU number.
      returned: always
      type: list
      elements: dict
      contains:
        cpu:
          description: Logical CPU number.
          returned: always
          type: int
          sample: 0
        core_id:
          description: Core id within the package (the CPU number when the kernel does not say).
          returned: always
          type: int
          sample: 0
        package:
          description: Physical package (socket) id.
          returned: always
          type: int
          sample: 0
        node:
          description: NUMA node of the CPU; null if no node lists it.
          returned: always
          type: int
          sample: 0
        siblings:
          description: Online SMT threads of the same core, including this CPU.
          returned: always
          type: list
          elements: int
          sample: [0, 28]
    online_cpus:
      description: Online CPUs, sorted.
      returned: always
      type: list
      elements: int
      sample: [0, 1, 2, 3]
    allowed_cpus:
      description: Online CPUs the module's process may run on (its affinity mask, e.g. a cpuset), sorted.
      returned: always
      type: list
      elements: int
      sample: [0, 1, 2, 3]
    physical_cores:
      description: Number of distinct (package, core_id) pairs among the online CPUs.
      returned: always
      type: int
      sample: 24
    threads_per_core:
      description: Largest number of online SMT threads of one core.
      returned: always
      type: int
      sample: 1
    smt_active:
      description: Whether some core runs more than one online thread.
      returned: always
      type: bool
      sample: false
    memory_total_kib:
      description: C(MemTotal) of C(/proc/meminfo) in KiB.
      returned: always
      type: int
      sample: 98853436
    memory_available_kib:
      description: C(MemAvailable) of C(/proc/meminfo) in KiB (C(MemFree) on kernels without it).
      returned: always
      type: int
      sample: 96512340
    hypervisor:
      description:
        - The virtualization platform (DMI C(sys_vendor), else C(product_name)) when the CPU has the hypervisor flag;
          C(unknown) when it has the flag but DMI cannot be read; null on bare metal.
      returned: always
      type: str
      sample: OpenStack Foundation
    kernel:
      description: Kernel release.
      returned: always
      type: str
      sample: 6.1.0-18-amd64
    boot_id:
      description:
        - The running kernel's boot id (C(/proc/sys/kernel/random/boot_id)); empty when the kernel does not expose it.
        - Hosts with the same boot id share one kernel, hence one machine (containers, e.g. test hosts), and compete
          for its CPUs. C(zenops rollout) then benchmarks them one after another, not at the same time.
      returned: always
      type: str
      sample: 0c5e3b1a-5d1e-4b8e-9a57-2f0f1b6f7c3d
    notes:
      description:
        - Oddities of the host an operator should know of once, in words (C(zenops facts) prints them), e.g. a
          single NUMA node whose own meminfo counts much less than C(/proc/meminfo) (VMs with hot-plugged memory).
        - The planner does not repeat them in every plan.
      returned: always
      type: list
      elements: str
      sample: []
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    zenops_cpu_topology:
      description: The same dictionary as RV(topology).
      returned: always
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.zenops.inference.plugins.module_utils.cpu_topology import gather  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    try:
        topology = gather()
    except (OSError, ValueError) as e:
        module.fail_json(msg=f"cannot read the CPU topology: {e}")
    module.exit_json(changed=False, topology=topology, ansible_facts={"zenops_cpu_topology": topology})


if __name__ == "__main__":
    main()
