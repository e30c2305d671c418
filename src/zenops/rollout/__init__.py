"""`zenops rollout`: change a deployment host by host behind its gateway, with health and performance gates,
automatic revert and a resumable ledger.

* zenops.rollout.plan        pure logic: batches, what changes on a host, the gate's sizing and verdict
* zenops.deployment.rollouts  the deployment's rollout ledger (state.json, history.jsonl)
* zenops.rollout.prepare     what a rollout is asked (RolloutRequest) and its planning: refusals, new plans, changes
* zenops.rollout.run         the driver: batches, state, history; decides on the gates' verdicts; revert, resume
* zenops.rollout.gates       the gates: measure and return verdicts (pass, fail, inconclusive, busy)
* zenops.rollout.steps       what a strategy (BatchSteps) and the gates (GateDriver) see of the driver
* zenops.rollout.strategies  how a batch goes to the new release: in-place, surge, blue-green (one module each)
"""

from zenops.rollout.plan import GateLimits
from zenops.rollout.run import CHANGEABLE, RolloutRequest, RolloutResult, rollout

__all__ = ["CHANGEABLE", "GateLimits", "RolloutRequest", "RolloutResult", "rollout"]
