"""A deployment's home: everything zenops knows of one deployment, in one package.

* identity.py  which deployment: one identity (cloud + name, or your own hosts' inventory) and its one lock key
* store.py     its files: the serving record, the API key, the rollout ledger, the cloud ledger's entry
* record.py    the serving record (what `up --model` started, and its services' states)
* rollouts.py  the rollout ledger (state.json, history.jsonl)
* status.py    what `zenops status -i` shows of it
* services/    what runs beside its vLLM servers and follows them: the gateway (services/gateway.py); a new service is
               one module there (see services/__init__.py)
"""
