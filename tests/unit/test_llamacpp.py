"""The llama.cpp peer's pure core (zenops.llamacpp): the GGUF formats, the conversion steps, llama-server's command line
from zenops's plan (built by the real planner from fixture facts of real machines, tests/fixtures/facts: a 2-vCPU Zen 4
VM, an 8-vCPU VM with SMT siblings, a 2-socket EPYC 9755), and the report's pairing by bytes per weight."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.test_planner import topo
from zenops import catalog, llamacpp, quant
from zenops.errors import ExitCode, UsageError
from zenops.llamacpp import LLAMA_CPP, LLAMA_FASTER, NO_SPREAD, WITHIN, ZENOPS_FASTER, Row
from zenops.planner import PlanOptions, PlanRefusedError, plan

MODEL = "Qwen/Qwen3-0.6B"
KEY = "/run/secrets/api-key"
GGUF = "/models/gguf/qwen3-q8_0.gguf"


def _plan(facts: str, **kw):
    return plan(topo(facts), catalog.get_model(MODEL), PlanOptions(**kw))


# the model's KV cache per token at llama.cpp's f16 (what zenops.llamacpp_serve passes): 28 layers x 8 KV heads x 128
KV_PER_TOKEN = catalog.get_model(MODEL).kv_bytes_per_token(llamacpp.KV_CACHE_DTYPE)


def _servers(facts: str, concurrency: int = 4, **kw):
    p = _plan(facts, **kw)
    return llamacpp.servers(p.instances, p.max_model_len, gguf=GGUF, served_name=MODEL, api_key_file=KEY,
                            concurrency=concurrency, host="0.0.0.0", kv_bytes_per_token=KV_PER_TOKEN)  # fmt: skip


def _server(inst, max_model_len: int, concurrency: int, kv_bytes_per_token: int | None = KV_PER_TOKEN):
    return llamacpp.server(inst, max_model_len, gguf=GGUF, served_name=MODEL, api_key_file=KEY,
                           concurrency=concurrency, host="0.0.0.0", kv_bytes_per_token=kv_bytes_per_token)  # fmt: skip


def _arg(argv, flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- formats -------------------------------------------------------------------------------------------------------


def test_each_gguf_format_pairs_with_the_vllm_format_of_about_its_bytes_per_weight():
    f = llamacpp.FORMATS
    assert {n: (g.bits_per_weight, g.vllm) for n, g in f.items()} == {
        "bf16": (16.0, "bfloat16"),
        "q8_0": (8.5, "w8a8"),
        "q4_k_m": (4.8944, "w4a16"),
    }
    # the vLLM side's names are zenops.quant's (a rename there breaks the pairing here)
    assert quant.FORMATS["w8a8"].weight_bits == 8
    assert quant.FORMATS["w4a16"].weight_bits == 4
    # bf16 and q8_0 come from the converter; q4_k_m is a K-quant only llama-quantize writes, from the bf16 GGUF
    assert [(g.outtype, g.quantize_to) for g in f.values()] == [("bf16", None), ("q8_0", None), ("bf16", "Q4_K_M")]
    assert all(g.bits_source for g in f.values())


@pytest.mark.parametrize(("given", "name"), [("bf16", "bf16"), ("Q8_0", "q8_0"), ("Q4_K_M", "q4_k_m")])
def test_a_format_is_found_by_zenopss_or_llamacpps_name(given, name):
    assert llamacpp.gguf_format(given).name == name


@pytest.mark.parametrize("bad", ["q4_0", "f16", "w8a8", ""])
def test_an_unknown_format_is_refused_naming_the_valid_ones(bad):
    with pytest.raises(UsageError) as e:
        llamacpp.gguf_format(bad)
    assert e.value.exit_code == ExitCode.USAGE
    assert "bf16, q8_0, q4_k_m" in e.value.message


@pytest.mark.parametrize(("vllm", "gguf"), [("bfloat16", "bf16"), ("bf16", "bf16"), ("w8a8", "q8_0"),
                                            ("w4a16", "q4_k_m"), ("gptq-int4", None), ("float32", None)])  # fmt: skip
def test_the_gguf_paired_with_a_vllm_format(vllm, gguf):
    got = llamacpp.paired_gguf(vllm)
    assert (got.name if got else None) == gguf


# --- conversion ----------------------------------------------------------------------------------------------------

_BF16_STEPS = [
    (("python3", "convert_hf_to_gguf.py", "/models/tiny-llama", "--outtype", "bf16",
      "--outfile", "/out/tiny-llama-bf16.gguf.part"), "/out/tiny-llama-bf16.gguf"),
    (("mv", "-f", "/out/tiny-llama-bf16.gguf.part", "/out/tiny-llama-bf16.gguf"), "/out/tiny-llama-bf16.gguf"),
]  # fmt: skip


def _steps(c: llamacpp.Conversion):
    return [(s.argv, s.creates) for s in c.steps]


def test_bf16_is_one_run_of_the_converter_into_a_part_file_then_renamed():
    c = llamacpp.conversion("/models/tiny-llama", "/out", "bf16")
    assert c.gguf == "/out/tiny-llama-bf16.gguf"
    assert _steps(c) == _BF16_STEPS


def test_q8_0_is_written_by_the_converter_itself():
    c = llamacpp.conversion("/models/tiny-llama/", "/out", "q8_0", python="/opt/venv/bin/python",
                            converter="/opt/llama.cpp/convert_hf_to_gguf.py")  # fmt: skip
    assert c.gguf == "/out/tiny-llama-q8_0.gguf"
    assert _steps(c) == [
        (("/opt/venv/bin/python", "/opt/llama.cpp/convert_hf_to_gguf.py", "/models/tiny-llama", "--outtype", "q8_0",
          "--outfile", "/out/tiny-llama-q8_0.gguf.part"), "/out/tiny-llama-q8_0.gguf"),
        (("mv", "-f", "/out/tiny-llama-q8_0.gguf.part", "/out/tiny-llama-q8_0.gguf"), "/out/tiny-llama-q8_0.gguf"),
    ]  # fmt: skip


def test_q4_k_m_converts_to_bf16_first_with_the_bf16_formats_own_steps_then_quantizes():
    c = llamacpp.conversion("/models/tiny-llama", "/out", "Q4_K_M", quantize="/opt/llama.cpp/llama-quantize")
    assert c.gguf == "/out/tiny-llama-q4_k_m.gguf"
    assert _steps(c) == [
        *_BF16_STEPS,  # the same file a bf16 conversion makes: a runner honouring `creates` converts once for both
        (("/opt/llama.cpp/llama-quantize", "/out/tiny-llama-bf16.gguf", "/out/tiny-llama-q4_k_m.gguf.part", "Q4_K_M"),
         "/out/tiny-llama-q4_k_m.gguf"),
        (("mv", "-f", "/out/tiny-llama-q4_k_m.gguf.part", "/out/tiny-llama-q4_k_m.gguf"),
         "/out/tiny-llama-q4_k_m.gguf"),
    ]  # fmt: skip


def test_the_model_name_can_be_given_apart_from_the_directory():
    c = llamacpp.conversion("/models/snapshot-1234", "/out", "q8_0", model_name="Qwen3-0.6B")
    assert c.gguf == "/out/Qwen3-0.6B-q8_0.gguf"
    assert llamacpp.gguf_name("tiny_llama.v2", "Q4_K_M") == "tiny_llama.v2-q4_k_m.gguf"


@pytest.mark.parametrize("name", ["../etc", "a/b", "..", "x..y", ".hidden", "-rf", "", "a b", "a\\b", "Qwen/Qwen3"])
def test_a_model_name_that_is_not_a_plain_file_name_is_refused(name):
    with pytest.raises(UsageError) as e:
        llamacpp.conversion("/models/m", "/out", "bf16", model_name=name)
    assert "cannot name a GGUF file" in e.value.message
    assert e.value.hint is not None
    assert "/" not in e.value.hint.split("e.g. ")[1]


@pytest.mark.parametrize(("model_dir", "out_dir"), [
    ("models/m", "/out"), ("/models/../etc/m", "/out"), ("/models/m", "out"), ("/models/m", "/out/../../etc"),
    ("/", "/out"),
])  # fmt: skip
def test_a_relative_path_or_one_with_dotdot_is_refused(model_dir, out_dir):
    with pytest.raises(UsageError, match="absolute path inside the container"):
        llamacpp.conversion(model_dir, out_dir, "bf16")


def test_a_conversion_to_an_unknown_format_is_refused():
    with pytest.raises(UsageError, match="unknown GGUF format 'q5_k_m'"):
        llamacpp.conversion("/models/m", "/out", "q5_k_m")


# --- the server's command line -------------------------------------------------------------------------------------


def test_a_2_vcpu_vm_gives_llama_cpp_both_cores_as_vllm_binds_both():
    p = _plan("zen4-vm-hotplug")
    (inst,) = p.instances
    assert (inst.cpus, inst.reserved_cpus) == ([0, 1], [])  # the plan binds both (SMALL_RANK_CORES)
    (s,) = _servers("zen4-vm-hotplug", concurrency=4)
    assert list(s.argv) == [
        "llama-server", "-m", GGUF, "--host", "0.0.0.0", "--port", "8000",
        "-t", "2", "-tb", "2", "--cpu-mask", "0x3", "--cpu-strict", "1", "--cpu-mask-batch", "0x3",
        "--cpu-strict-batch", "1",
        "-np", "5", "-c", str(5 * p.max_model_len),  # the plan's 5 seats (4 + 1) above concurrency 4
        "--metrics", "--alias", MODEL, "--api-key-file", KEY, "--no-webui",
    ]  # fmt: skip
    assert (s.threads, s.cpus, s.slots, s.context, s.port) == (2, (0, 1), 5, 5 * p.max_model_len, 8000)
    assert s.container == {"cpuset_cpus": "0-1", "cpuset_mems": "0", "shm_size": "64m", "ipc_mode": None,
                           "cap_add": [], "security_opts": [], "privileged": False}  # fmt: skip
    assert set(s.container) == set(inst.container)  # the same keys as the vLLM container's, for the same task
    assert "pinned to CPUs 0-1" in s.reason


def test_smt_siblings_and_the_reserved_core_stay_out_of_the_threads_but_in_the_cpuset():
    (inst,) = _plan("vm-8-smt-interleaved").instances
    assert (inst.reserved_cpus, inst.cpus) == ([0], [1, 2, 3])  # 4 cores (siblings 4-7), one reserved
    (s,) = _servers("vm-8-smt-interleaved")
    assert _arg(s.argv, "-t") == _arg(s.argv, "-tb") == "3"  # vLLM's 3 OpenMP threads, not 8 CPUs or 4 cores
    assert _arg(s.argv, "--cpu-mask") == _arg(s.argv, "--cpu-mask-batch") == "0xe"  # CPUs 1, 2, 3
    assert s.container["cpuset_cpus"] == "0-7"  # the whole slice: the HTTP threads run on the rest
    assert s.container["cpuset_mems"] == "0"


def test_a_two_socket_host_gets_one_server_per_instance_on_its_node():
    p = _plan("epyc-9755-2s")
    got = _servers("epyc-9755-2s", concurrency=16)
    assert [s.port for s in got] == [i.port for i in p.instances] == [8000, 8001]
    second = got[1]
    assert second.cpus == tuple(range(129, 256))  # node 1's cores without its reserved core 128
    assert _arg(second.argv, "-t") == "127"
    assert int(_arg(second.argv, "--cpu-mask"), 16) == sum(1 << c for c in range(129, 256))
    assert (second.container["cpuset_cpus"], second.container["cpuset_mems"]) == ("128-255", "1")
    # the concurrency measured (16) is above the plan's 5 seats, but its KV cache holds 5 contexts: 5 slots
    assert _arg(second.argv, "-np") == "5"
    assert _arg(second.argv, "-c") == str(5 * p.max_model_len)


@pytest.mark.parametrize(("concurrency", "slots"), [(1, 5), (5, 5), (8, 8), (16, 16)])
def test_slots_cover_both_the_concurrency_measured_and_the_plans_seats_when_the_kv_cache_holds_them(concurrency, slots):
    p = _plan("zen4-vm-hotplug")
    (inst,) = p.instances
    assert inst.max_num_seqs == 5
    roomy = replace(inst, kv_cache_bytes=16 * p.max_model_len * KV_PER_TOKEN)  # a plan's KV cache of 16 contexts
    s = _server(roomy, p.max_model_len, concurrency)
    assert (_arg(s.argv, "-np"), _arg(s.argv, "-c")) == (str(slots), str(slots * p.max_model_len))
    assert "capped" not in s.reason


@pytest.mark.parametrize("concurrency", [8, 16])
def test_the_slots_are_capped_to_the_contexts_the_plans_kv_cache_holds_and_the_reason_says_why(concurrency):
    """At C=16 the plan's 5 seats' KV cache (sized for 5 contexts of max_model_len and a spare block each) cannot
    hold 16 contexts: llama.cpp would allocate 16 x max_model_len of f16 KV the plan never budgeted."""
    p = _plan("zen4-vm-hotplug")
    (inst,) = p.instances
    holds = inst.kv_cache_bytes // KV_PER_TOKEN
    assert holds < 8 * p.max_model_len  # the fixture plan's KV cache: 17.57 GiB, 164480 tokens at 114688 B/token
    s = _server(inst, p.max_model_len, concurrency)
    assert (
        (s.slots, s.context)
        == (holds // p.max_model_len, holds // p.max_model_len * p.max_model_len)
        == (5, 5 * p.max_model_len)
    )
    assert (_arg(s.argv, "-np"), _arg(s.argv, "-c")) == ("5", str(5 * p.max_model_len))
    assert s.context * KV_PER_TOKEN <= inst.kv_cache_bytes
    assert f"(slots capped from {concurrency}: the plan's KV cache of 17.57 GiB holds {holds} tokens at f16" in s.reason
    assert f"({KV_PER_TOKEN} B/token), 5 x {p.max_model_len}" in s.reason
    assert f"{concurrency} x {p.max_model_len} = {concurrency * p.max_model_len} would not fit" in s.reason


def test_one_slot_of_the_full_context_is_kept_when_the_kv_cache_holds_less():
    p = _plan("zen4-vm-hotplug")
    small = replace(p.instances[0], kv_cache_bytes=(p.max_model_len // 2) * KV_PER_TOKEN)
    s = _server(small, p.max_model_len, 4)
    assert (s.slots, s.context) == (1, p.max_model_len)  # never less than max_model_len per slot
    assert "slots capped from 5" in s.reason


@pytest.mark.parametrize("kv", [None, 0])
def test_without_kv_figures_the_slots_are_not_capped_and_the_reason_says_it_was_not_checked(kv):
    p = _plan("zen4-vm-hotplug")
    s = _server(p.instances[0], p.max_model_len, 16, kv_bytes_per_token=kv)
    assert s.slots == 16
    assert "not checked against the plan's KV cache" in s.reason
    unbudgeted = replace(p.instances[0], kv_cache_bytes=0)  # a plan without a KV budget
    assert _server(unbudgeted, p.max_model_len, 16).slots == 16


def test_the_key_is_never_in_argv_only_its_files_path():
    (s,) = _servers("zen4-vm-hotplug")
    assert _arg(s.argv, "--api-key-file") == KEY
    assert "--api-key" not in s.argv
    assert not any(a.startswith("--api-key=") for a in s.argv)


def test_the_kv_cache_is_left_at_its_16_bit_default():
    (s,) = _servers("zen4-vm-hotplug")
    assert not {"-ctk", "-ctv", "--cache-type-k", "--cache-type-v"} & set(s.argv)


def test_a_tensor_parallel_instance_is_refused():
    p = _plan("epyc-9755-2s", tensor_parallel=2)
    assert p.instances[0].tensor_parallel_size == 2
    with pytest.raises(PlanRefusedError) as e:
        llamacpp.servers(
            p.instances,
            p.max_model_len,
            gguf=GGUF,
            served_name=MODEL,
            api_key_file=KEY,
            concurrency=4,
            host="127.0.0.1",
        )
    assert e.value.code == "llamacpp_tensor_parallel"
    assert e.value.exit_code == ExitCode.PLAN_REFUSED
    assert "no tensor parallelism" in e.value.message


@pytest.mark.parametrize(("kw", "match"), [
    ({"concurrency": 0}, "at least 1 slot"),
    ({"served_name": "a,b"}, "cannot be llama-server's --alias"),
    ({"served_name": "a b"}, "cannot be llama-server's --alias"),
    ({"served_name": ""}, "cannot be llama-server's --alias"),
    ({"gguf": "models/x.gguf"}, "the GGUF file"),
    ({"api_key_file": "key"}, "the API key file"),
    ({"api_key_file": "/run/../etc/shadow"}, "the API key file"),
])  # fmt: skip
def test_bad_server_inputs_are_refused(kw, match):
    (inst,) = _plan("zen4-vm-hotplug").instances
    args = {"gguf": GGUF, "served_name": MODEL, "api_key_file": KEY, "concurrency": 4, "host": "0.0.0.0", **kw}
    with pytest.raises(UsageError, match=match):
        llamacpp.server(inst, 2048, **args)


def test_the_cpu_mask_is_hex_with_bit_n_for_cpu_n_and_refuses_what_llama_cpp_cannot_pin():
    assert llamacpp.cpu_mask([0, 1, 4]) == "0x13"
    assert llamacpp.cpu_mask([511]) == hex(1 << 511)
    with pytest.raises(PlanRefusedError, match=r"CPU 512 is beyond llama\.cpp's CPU mask"):
        llamacpp.cpu_mask([3, 512])


# --- the report's pairing ------------------------------------------------------------------------------------------


def _row(engine, fmt, c=1, tok=10.0, spread=0.1, **kw):
    return Row(engine, fmt, c, tok, kw.pop("ttft", 100.0), kw.pop("tpot", 20.0), spread, **kw)


@pytest.mark.parametrize(("ratio", "llama_spread", "zenops_spread", "noise", "text"), [
    (1.2, 0.05, 0.1, 0.1, LLAMA_FASTER),
    (1.1, 0.05, 0.1, 0.1, WITHIN),  # on the edge: not beyond
    (0.9, 0.1, 0.05, 0.1, WITHIN),
    (0.85, 0.1, 0.05, 0.1, ZENOPS_FASTER),
    (1.0, 0.0, 0.0, 0.0, WITHIN),
    (3.0, None, 0.1, None, NO_SPREAD),  # one run: no spread, whatever the ratio
    (3.0, 0.1, None, None, NO_SPREAD),
])  # fmt: skip
def test_the_spread_rule(ratio, llama_spread, zenops_spread, noise, text):
    assert llamacpp.verdict(ratio, llama_spread, zenops_spread) == (noise, text)


def test_rows_pair_at_equal_bytes_per_weight_per_concurrency():
    rows = [
        _row("zenops", "bfloat16", 1, 13.3), _row(LLAMA_CPP, "bf16", 1, 37.6, ttft=50.0, tpot=10.0),
        _row("zenops", "bfloat16", 4, 15.4), _row(LLAMA_CPP, "bf16", 4, 15.0),
        _row("zenops", "w8a8", 1, 20.0), _row(LLAMA_CPP, "Q8_0", 1, 10.0),
        _row("zenops", "w4a16", 1, 10.0), _row(LLAMA_CPP, "q4_k_m", 1, 10.0),
        _row("zenops", "gptq-int4", 1, 9.0),  # no GGUF at its bytes: not paired
        _row(LLAMA_CPP, "q8_0", 4, 70.0),  # no zenops row at C=4 in w8a8: not paired
    ]  # fmt: skip
    got = llamacpp.pairs(reversed(rows))  # sorted by bits per weight (largest first), then concurrency
    assert [(p.gguf, p.vllm, p.concurrency, round(p.tok_s or 0, 3), p.verdict) for p in got] == [
        ("bf16", "bfloat16", 1, round(37.6 / 13.3, 3), LLAMA_FASTER),
        ("bf16", "bfloat16", 4, round(15.0 / 15.4, 3), WITHIN),
        ("q8_0", "w8a8", 1, 0.5, ZENOPS_FASTER),
        ("q4_k_m", "w4a16", 1, 1.0, WITHIN),
    ]
    first = got[0]
    assert (first.ttft, first.tpot, first.noise) == (0.5, 0.5, 0.1)
    assert (first.zenops.engine, first.llamacpp.engine) == ("zenops", LLAMA_CPP)


def test_rows_of_other_hosts_or_models_do_not_pair():
    rows = [_row("zenops", "bfloat16", host="zen4"), _row(LLAMA_CPP, "bf16", host="zen3"),
            _row("zenops", "w8a8", model="1B"), _row(LLAMA_CPP, "q8_0", model="200M")]  # fmt: skip
    assert llamacpp.pairs(rows) == []


def test_a_row_with_failed_requests_is_not_compared():
    got = llamacpp.pairs([_row("zenops", "bfloat16", tok=10.0), _row(LLAMA_CPP, "bf16", tok=50.0, ok=False)])
    assert got[0].verdict == "not comparable: llama.cpp failed requests"
    assert got[0].noise is None


def test_a_single_run_cannot_tell():
    got = llamacpp.pairs([_row("zenops", "bfloat16", spread=None), _row(LLAMA_CPP, "bf16", tok=30.0, spread=None)])
    assert (got[0].tok_s, got[0].verdict) == (3.0, NO_SPREAD)


@pytest.mark.parametrize(("rows", "match"), [
    ([_row("vllm", "bfloat16")], "unknown engine 'vllm'"),
    ([_row(LLAMA_CPP, "q4_0")], "unknown GGUF format 'q4_0'"),
    ([_row(LLAMA_CPP, "bf16"), _row(LLAMA_CPP, "BF16")], "two llama.cpp rows"),
])  # fmt: skip
def test_bad_rows_are_refused(rows, match):
    with pytest.raises(UsageError, match=match):
        llamacpp.pairs(rows)
