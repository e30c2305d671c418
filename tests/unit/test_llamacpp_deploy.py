"""The llama.cpp peer's role variables (zenops.llamacpp_deploy): what roles/llamacpp_server reads, from real plans of
fixture hosts (tests/fixtures/facts), as a Plan and as its to_dict() (the form `zenops plan --json` and the
extra-vars carry)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from tests.conftest import REPO, load_file_module
from tests.unit.test_planner import topo
from zenops import catalog, llamacpp_deploy
from zenops.errors import UsageError
from zenops.planner import PlanOptions, PlanRefusedError, plan

MODEL = "Qwen/Qwen3-0.6B"


def _plan(facts: str = "epyc-9755-2s", **kw):
    return plan(topo(facts), catalog.get_model(MODEL), PlanOptions(**kw))


def _vars(p, fmt="q8_0", convert=(), concurrency=4):
    return llamacpp_deploy.role_vars(p, model_name="tiny-llama", served_name="tiny", fmt=fmt,
                                     concurrency=concurrency, convert=convert)  # fmt: skip


def _arg(argv, flag):
    return argv[argv.index(flag) + 1]


def test_the_servers_load_the_gguf_the_conversion_makes_and_read_the_key_from_the_mounted_secrets():
    v = _vars(_plan(), fmt="q4_k_m")
    mounts = v["llamacpp_server_mounts"]
    served = v["llamacpp_server_conversions"][0]
    assert served["format"] == "q4_k_m"
    assert served["gguf"] == f"{mounts['gguf']}/{served['file']}" == "/gguf/tiny-llama-q4_k_m.gguf"
    assert served["steps"][-1]["creates"] == served["file"]  # the last step makes the file the servers load
    for inst in v["llamacpp_server_instances"]:
        assert _arg(inst["argv"], "-m") == served["gguf"]
        assert _arg(inst["argv"], "--api-key-file") == mounts["api_key_file"]
        assert mounts["api_key_file"].startswith(mounts["secrets_dir"] + "/")
        assert _arg(inst["argv"], "--port") == str(inst["port"])
        assert inst["format"] == "q4_k_m"
    # the converter reads the model where the role mounts it, with the image's own Python and script
    first = served["steps"][0]["argv"]
    assert first[:3] == [llamacpp_deploy.IMAGE_PYTHON, llamacpp_deploy.IMAGE_CONVERTER, mounts["model"]]
    assert mounts["model"] == "/models/tiny-llama"


def test_one_server_per_plan_instance_with_its_cpuset_and_memory_node():
    p = _plan("epyc-9755-2s")
    assert len(p.instances) > 1  # a two-socket host: more than one instance, so the pairing is checked
    insts = _vars(p)["llamacpp_server_instances"]
    assert [(i["index"], i["port"]) for i in insts] == [(i.index, i.port) for i in p.instances]
    for got, inst in zip(insts, p.instances, strict=True):
        assert got["container"]["cpuset_cpus"] == inst.container["cpuset_cpus"]
        assert got["container"]["cpuset_mems"] == inst.container["cpuset_mems"]
        assert got["threads"] == len(inst.cpus) == int(_arg(got["argv"], "-t"))
        assert got["cpus"] == sorted(inst.cpus)


def test_a_plan_dict_gives_the_same_variables_as_the_plan_and_they_are_plain_json():
    p = _plan("vm-8-smt-interleaved")
    from_dict = _vars(json.loads(json.dumps(p.to_dict())), convert=("bf16",))
    assert from_dict == _vars(p, convert=("bf16",))
    assert json.loads(json.dumps(from_dict)) == from_dict  # extra-vars travel as JSON: tuples would not survive


def test_each_format_is_converted_once_the_served_one_first():
    conv = _vars(_plan(), fmt="q8_0", convert=("bf16", "Q8_0", "q4_k_m", "bf16"))["llamacpp_server_conversions"]
    assert [c["format"] for c in conv] == ["q8_0", "bf16", "q4_k_m"]
    for c in conv:  # each step's creates is a file name inside the GGUF directory (the role prefixes its host path)
        assert all("/" not in s["creates"] for s in c["steps"])
    # q4_k_m starts from the bf16 GGUF: the same first steps, so `creates` converts it once for both
    assert conv[2]["steps"][:2] == conv[1]["steps"]


@pytest.mark.parametrize("bad", [{}, {"max_model_len": 512}, {"max_model_len": 512, "instances": [{"index": 0}]}])
def test_a_dict_that_is_not_a_plan_is_refused_naming_the_fix(bad):
    with pytest.raises(UsageError) as e:
        _vars(bad)
    assert "zenops plan --json" in (e.value.hint or "")


def test_a_plan_without_instances_is_refused():
    d = _plan().to_dict()
    d["instances"] = []
    with pytest.raises(UsageError, match="no instance"):
        _vars(d)


@pytest.mark.parametrize(("kw", "err"), [({"fmt": "q4_0"}, UsageError), ({"concurrency": 0}, UsageError)])
def test_bad_inputs_are_refused_before_anything_is_returned(kw, err):
    with pytest.raises(err):
        _vars(_plan(), **kw)


def test_a_model_name_that_is_a_path_is_refused():
    with pytest.raises(UsageError, match="cannot name a GGUF file"):
        llamacpp_deploy.role_vars(_plan(), model_name="../etc", served_name="x", fmt="bf16", concurrency=1)


def test_no_format_to_convert_is_refused():
    with pytest.raises(UsageError, match="no GGUF format"):
        llamacpp_deploy.conversions("tiny-llama", [])


def test_tensor_parallel_plans_are_refused():
    p = _plan("epyc-9755-2s", tensor_parallel=2)
    assert any(i.tensor_parallel_size > 1 for i in p.instances)
    with pytest.raises(PlanRefusedError):
        _vars(p)


# --- the filter the Molecule scenario and playbooks call (plugins/filter/llamacpp_server_vars.py) -------------------


def test_the_filter_returns_the_role_variables_and_turns_a_refusal_into_a_filter_error():
    f = load_file_module("zenops_llamacpp_filter", REPO / "plugins/filter/llamacpp_server_vars.py")
    d = _plan().to_dict()
    got = f.FilterModule().filters()["llamacpp_server_vars"](d, "tiny-llama", "tiny", "q8_0", "4", convert=["bf16"])
    assert got == _vars(_plan(), convert=("bf16",))
    with pytest.raises(AnsibleFilterError, match=r"unknown GGUF format 'q4_0'.*\(fix: use one of"):
        f.llamacpp_server_vars(d, "tiny-llama", "tiny", "q4_0", 4)


def test_the_playbooks_extra_vars_hold_each_hosts_variables_and_the_model():
    plans = {"b": _plan("epyc-9755-2s"), "a": _plan("vm-8-smt-interleaved").to_dict()}
    ev = llamacpp_deploy.extravars(plans, model_dir="/home/me/models/tiny-llama/", served_name="tiny", fmt="q8_0",
                                   concurrency=4)  # fmt: skip
    assert list(ev["zenops_llamacpp"]) == ["a", "b"]
    assert ev["zenops_llamacpp"]["b"] == _vars(plans["b"])  # the model's name is the directory's last component
    assert (
        ev["zenops_llamacpp"]["a"]["llamacpp_server_instances"]
        != ev["zenops_llamacpp"]["b"]["llamacpp_server_instances"]
    )
    assert ev["llamacpp_server_model_dir"] == "/home/me/models/tiny-llama/"
    assert ev["llamacpp_server_served_model_name"] == "tiny"


# --- where the servers listen: where vLLM listens on the host ------------------------------------------------------


def _include_vars(playbook: str, role: str) -> dict[str, Any]:
    """The vars playbooks/<playbook>.yml passes to its include of ``role``."""
    for play in yaml.safe_load((REPO / "playbooks" / f"{playbook}.yml").read_text()):
        for task in play.get("tasks") or []:
            inc = task.get("ansible.builtin.include_role") or {}
            if inc.get("name") == f"zenops.inference.{role}" and "tasks_from" not in inc:
                return dict(task["vars"])
    raise AssertionError(f"playbooks/{playbook}.yml includes no {role} (renamed? update this test)")


def _render(expr: str, variables: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar, trust_as_template  # noqa: PLC0415

    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


PRIVATE = {"zenops_private_address": "10.0.0.5"}


@pytest.mark.parametrize(("hostvars", "listen"), [(PRIVATE, "10.0.0.5"), ({}, "0.0.0.0")])
def test_llama_server_listens_where_vllm_listens_on_the_host(hostvars, listen):
    """playbooks/llamacpp.yml binds llama-server at the address playbooks/serve.yml binds vLLM at (the host's
    zenops_private_address, every address without one), and the role starts the argv with that --host."""
    bind = _include_vars("llamacpp", "llamacpp_server")["llamacpp_server_bind_address"]
    assert bind == _include_vars("serve", "vllm_server")["vllm_server_bind_address"]  # the same variable and default
    from ansible.template import trust_as_template  # noqa: PLC0415

    role = REPO / "roles" / "llamacpp_server"
    loaded = {**yaml.safe_load((role / "defaults" / "main.yml").read_text()),
              **yaml.safe_load((role / "vars" / "main.yml").read_text())}  # fmt: skip
    # trusted as Ansible trusts a role's own files: their templates render when another template reads them
    role_vars = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in loaded.items()}
    [inst, *_] = _vars(_plan())["llamacpp_server_instances"]
    variables = {**role_vars, **hostvars, "item": inst}
    variables["llamacpp_server_bind_address"] = _render(bind, variables)
    argv = _render(role_vars["_llamacpp_server_argv"], variables)
    assert argv[argv.index("--host") + 1] == listen
    assert argv.count("--host") == 1
    assert [a for i, a in enumerate(argv) if i != argv.index("--host") + 1] == [
        a for i, a in enumerate(inst["argv"]) if i != inst["argv"].index("--host") + 1
    ]  # the rest of the argv as zenops computed it
    assert _render(role_vars["_llamacpp_server_host"], variables) == listen  # where the health gate looks
    start = yaml.safe_load((role / "tasks" / "start.yml").read_text())
    [started] = [t for t in start if t.get("name") == "Start the llama.cpp servers"]
    assert started["community.docker.docker_container"]["command"] == "{{ _llamacpp_server_argv[1:] }}"
    # without the playbook's address (the role alone, as Molecule runs it): the argv as computed
    plain = {**role_vars, "item": inst}
    assert _render(role_vars["_llamacpp_server_argv"], plain) == inst["argv"]
