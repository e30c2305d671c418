"""Nova loads compute drivers as nova.virt.<compute_driver>: this shim makes
`compute_driver = zenops_container.ContainerDriver` load the sandbox's container-backed driver."""

from zenops_sandbox.virt import ContainerDriver  # noqa: F401
