"""A deployment's home: everything zenops knows of one deployment and every step of its lifecycle, in one package.

* lifecycle.py  its lifecycle, the one the CLI, a campaign and a rollout's surge share: open by identity (which takes
                its lock), provision (with its retries and failure classes), serve, bench, add or remove one server,
                down, the leak proof
* identity.py   which deployment: one identity (cloud + name, or your own hosts' inventory) and every name derived
                from it, one property each: its lock key, its files' name, its label
* target.py     resolve_target(): from a command's --inventory / --deployment [--cloud] / --cloud --flavor to it
* store.py      its files: the serving record, the API key, the rollout ledger, the cloud ledger's entry
* record.py     the serving record (what `up --model` started, and its services' states)
* rollouts.py   the rollout ledger (state.json, history.jsonl)
* status.py     what `zenops status -i` shows of it
* services/     what runs beside its vLLM servers and follows them: the gateway (services/gateway.py); a new service is
                one module there (see services/__init__.py)

On a cloud (OpenStack, through zenops.cloud), one module per job:
* common.py     the request (`CloudRequest`), names, keys, inventories
* provision.py  `up --cloud`: preflight (nothing is created before it passes) -> ledger entry (provisioning) ->
                playbooks/up.yml -> ledger entry (ready, servers). A failed or interrupted `up` leaves every created
                resource marked and the ledger entry in place: a re-run adopts what exists, `down` removes it.
                Expiry (`up --ttl`): new servers carry ``zenops:expires_at``; a re-run without a ttl keeps theirs,
                with one every server gets the new expiry and the note says it moved
* surge.py      a rollout's extra server (add one, retire one)
* firewall.py   its security group follows its gateway
* teardown.py   `down` (and `down_locked`, holding the lock of each deployment it removes: identity.locked)
* reaping.py    `reap`: deployments whose servers have all expired, asked of the cloud, each removed as `down` does
* leakcheck.py  `leaks`
* listing.py    `status`: the cloud's deployments
"""
