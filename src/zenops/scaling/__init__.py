"""Elastic, self-healing fleets: the pure core of the scaling loop (issue 49).

* :mod:`zenops.scaling.replicas`: ``--replicas MIN..MAX`` and the price cap that bounds MAX;
* :mod:`zenops.scaling.decide`: scale out, in or hold from the replicas' recorded metric series (windows,
  hysteresis, cooldown, bounds), with the reason and its figures in one line;
* :mod:`zenops.scaling.heal`: replace a replica whose health failed for a window; back off between failed attempts
  and stop after repeated failures.

Plain typed code, no I/O: the loop service feeds it what it read and acts on the Decision.
"""
