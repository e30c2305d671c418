"""Server-side figures of a deployment: vLLM's Prometheus metrics and the hosts' CPU and memory, read live.

* promtext.py  the Prometheus text format (what /metrics answers) into samples; pure
* series.py    the arithmetic: rates from counters (resets included), percentiles from histogram buckets over a
               window, CPU % from /proc/stat; pure
* probe.py     one snapshot of every instance of a deployment, read over SSH on each host (the key on stdin)
* top.py       the rows `zenops top` shows, from two or more snapshots
"""
