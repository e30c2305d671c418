"""zenops on OpenStack: ownership marks, the local ledger of deployments, preflight checks, teardown, leak reports.

Pure parts (marks, preflight arithmetic, error classification) are plain functions; ``ops`` holds the openstacksdk
calls. Provisioning itself is Ansible (role zenops.inference.provision), fed the marks computed here.
"""
