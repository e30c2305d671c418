"""`zenops rollout`: change a deployment host by host behind its gateway, with health and performance gates,
automatic revert and a resumable ledger.

* zenops.rollout.plan   pure logic: batches, what changes on a host, the performance gate's verdict
* zenops.deployment.rollouts  the deployment's rollout ledger (state.json, history.jsonl)
* zenops.rollout.run    the run: drain -> replace -> gates -> back in rotation, revert, resume
"""

from zenops.rollout.plan import GateLimits
from zenops.rollout.run import CHANGEABLE, RolloutRequest, RolloutResult, rollout

__all__ = ["CHANGEABLE", "GateLimits", "RolloutRequest", "RolloutResult", "rollout"]
