"""Text from hosts, files and names is data, never a template (issue 23, item 2).

ansible-core renders ``{{ }}`` in every extra var it trusts, and it trusts the strings of an extra-vars file. What
zenops passes to the serve play carries text it did not write: the CPU model name a host reports (in the plans'
reasons), a tuned file's ``campaign`` and ``variant`` (the plans' first reason) and a local model directory's name
(``vllm_server_model``). Each holds a ``lookup('pipe', ...)`` here that would create a file on the controller.

The path is zenops's own: the facts go through ``check_topology``, the planner and ``serve.serve_inventory``, whose
extra vars reach a real ``ansible-playbook`` through ``zenops.runner.run_playbook``. Only two things are replaced:
``up_inventory`` (the hosts' SSH/Docker/facts run) hands back the facts, and the playbook is the server play of
playbooks/serve.yml alone, in check mode, with a stand-in community.docker that records instead of talking to an
engine (as tests/runner/test_plan_to_role.py does).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runner.test_plan_to_role import MODEL, ZEN4, host_facts, server_play, stand_in_docker
from zenops import serve
from zenops.campaign.tuned import load_tuned
from zenops.config import load
from zenops.context import RunContext
from zenops.errors import RunFailedError
from zenops.facts import FACT_NAME
from zenops.hosts import UpResult
from zenops.paths import collections_path
from zenops.runner import HostStats, RunResult, RunSpec, run_playbook
from zenops.serve import ServeRequest, serve_inventory

MARKER_DIR = "ZENOPS_TEST_PWNED_DIR"


def payload(name: str) -> str:
    """A template that creates ``$ZENOPS_TEST_PWNED_DIR/<name>`` on the controller when rendered (neither '/' nor
    '$' in it: it is a directory's name too, and Ansible expands $VARS in paths)."""
    return "{{ lookup('pipe', 'cd ' ~ lookup('env', '" + MARKER_DIR + "') ~ ' && touch " + name + "') }}"


class ServerPlayOnly(RunContext):
    """The real runner, with the serve play's image part left out and Docker recorded (see the module docstring)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(config=load())
        self.tmp_path = tmp_path
        self.specs: list[RunSpec] = []
        self.failed: RunFailedError | None = None

    def run(self, spec: RunSpec) -> RunResult:
        self.specs.append(spec)
        playbook = self.tmp_path / "serve-servers.yml"
        playbook.write_text(yaml.safe_dump([server_play()], sort_keys=False))
        collections = stand_in_docker(self.tmp_path / "stand-in")
        test_only = {"vllm_image_ref": "zenops/vllm-zen:test", "vllm_server_health": False, "ansible_become": False}
        spec = dataclasses.replace(
            spec,
            playbook=playbook,
            extravars={**spec.extravars, **test_only},
            envvars={
                **spec.envvars,
                "ANSIBLE_COLLECTIONS_PATH": f"{collections}:{collections_path()}",
                "ZENOPS_TEST_DOCKER_RECORD": str(self.tmp_path / "docker-calls.jsonl"),
            },
        )
        return run_playbook(spec, self.settings, self.sink, self.cancel)


def serve_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, facts: dict[str, Any], req: ServeRequest, tuned: str | None
) -> ServerPlayOnly:
    inventory = tmp_path / "hosts.yml"
    data = {"vllm_server_data_dir": str(tmp_path / "data")}
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"h": data}, "vars": local}}))
    up_run = RunResult(
        run_id="up",
        playbook="up.yml",
        status="successful",
        rc=0,
        run_dir=tmp_path,
        started="",
        duration_s=0.0,
        stats={"h": HostStats(ok=1)},
        host_facts={"h": {FACT_NAME: facts}},
    )
    monkeypatch.setattr(serve, "up_inventory", lambda *_a, **_k: UpResult(up_run, []))
    ctx = ServerPlayOnly(tmp_path)
    try:
        serve_inventory(ctx, inventory, req, check=True, tuned=tuned)
    except RunFailedError as e:
        ctx.failed = e
    return ctx


def assert_data_only(ctx: ServerPlayOnly, pwned: Path, *texts: str) -> None:
    """The text reached the play, nothing ran, and the play went through to the containers."""
    for text in texts:
        assert any(text in s for s in strings(ctx.specs[-1].extravars)), f"{text!r} no longer reaches the play"
    assert sorted(p.name for p in pwned.iterdir()) == [], "a template in the extra vars ran on the controller"
    assert ctx.failed is None, ctx.failed
    calls = [json.loads(line) for line in (ctx.tmp_path / "docker-calls.jsonl").read_text().splitlines()]
    assert any(c["module"] == "docker_container" for c in calls), "the server play did not reach the containers"


def strings(value: Any) -> list[str]:
    """Every string in a JSON-like value."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture
def pwned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "pwned"
    d.mkdir()
    monkeypatch.setenv(MARKER_DIR, str(d))
    return d


def test_a_cpu_model_name_from_a_host_is_not_rendered(tmp_path, monkeypatch, pwned):
    facts = host_facts(ZEN4)
    facts["model_name"] = "AMD EPYC " + payload("from-facts")
    ctx = serve_with(tmp_path, monkeypatch, facts, ServeRequest(model=MODEL), None)
    assert_data_only(ctx, pwned, payload("from-facts"))


def test_a_tuned_files_campaign_and_variant_are_not_rendered(tmp_path, monkeypatch, pwned):
    tuned_file = tmp_path / "tuned.yml"
    tuned_file.write_text(
        yaml.safe_dump(
            {
                "zenops_tuned": 1,
                "campaign": "c-" + payload("from-campaign"),
                "models": {MODEL: {"variant": "v-" + payload("from-variant"), "options": {}}},
            }
        )
    )
    tuned = load_tuned(tuned_file)[MODEL]
    ctx = serve_with(tmp_path, monkeypatch, host_facts(ZEN4), ServeRequest(model=MODEL), tuned.reason)
    assert_data_only(ctx, pwned, payload("from-campaign"), payload("from-variant"))


def test_a_local_model_directorys_name_is_not_rendered(tmp_path, monkeypatch, pwned):
    model = tmp_path / ("tiny-" + payload("from-model-dir"))
    model.mkdir()
    (model / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, '
        '"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, '
        '"vocab_size": 2000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}'
    )
    ctx = serve_with(tmp_path, monkeypatch, host_facts(ZEN4), ServeRequest(model=str(model)), None)
    assert_data_only(ctx, pwned, payload("from-model-dir"))
