"""gunicorn entry points for the OpenStack APIs: `gunicorn zenops_sandbox.wsgi:keystone` and so on.

Each project's WSGI module parses sys.argv with oslo.config at import and rejects gunicorn's own arguments (the worker
exits 2 and is restarted forever), so empty sys.argv before importing it. Config dirs come from the environment
(OS_KEYSTONE_CONFIG_DIR, OS_PLACEMENT_CONFIG_DIR, OS_GLANCE_CONFIG_DIR, OS_NEUTRON_CONFIG_DIR, OS_NOVA_CONFIG_DIR).

Each app is wrapped in the API fault middleware (zenops_sandbox.faults), which passes every request through until
`scripts/sandbox fault api add` writes a rule.
"""

import importlib
import sys

from zenops_sandbox import faults

APPS = {
    "keystone": "keystone.wsgi.api",
    "placement": "placement.wsgi.api",
    "glance": "glance.wsgi.api",
    "neutron": "neutron.wsgi.api",
    "nova": "nova.wsgi.osapi_compute",
}


def __getattr__(name):
    if name not in APPS:
        raise AttributeError(name)
    sys.argv = sys.argv[:1]
    return faults.wrap(name, importlib.import_module(APPS[name]).application)
