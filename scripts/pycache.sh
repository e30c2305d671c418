# Sourced by scripts/setup, scripts/test and scripts/demo (bash). Python bytecode is cached, outside the tree.
# Some CI shells set PYTHONDONTWRITEBYTECODE=1 (this project's CI machines do): then every Python process compiles
# what it imports from source, every time it starts. The test run starts thousands of them: each ansible-playbook
# run (its startup: 2.2 CPU-s without a cache, 1.4 with one, on a 2-core AVX2 EPYC), each of its task workers, each
# Ansible module run on the controller (openstacksdk's import: 1.7 CPU-s uncached, 0.7 cached), each zenops call,
# every pytest worker (the unit tier: 417 CPU-s uncached, 339 from an empty cache). So the bytecode goes to one
# cache under .cache/ (PYTHONPYCACHEPREFIX: nothing is written beside the sources, the collection's directories stay
# as they are in git); one that the caller set is kept.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/pycache}"
