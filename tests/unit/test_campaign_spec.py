"""The campaign file (zenops.campaign.spec): what a good one loads into, and how each kind of mistake is reported
(the file, the key and the fix) before anything is created in a cloud."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from zenops.campaign.example import EXAMPLE
from zenops.campaign.spec import (
    VARIANT_OPTIONS,
    BenchSpec,
    Budget,
    CampaignSpec,
    Variant,
    campaign_schema,
    load_spec,
)
from zenops.errors import ConfigError, ExitCode
from zenops.schema import Section
from zenops.serve import ServeRequest

FULL = """\
name: qwen-sweep
cloud: sandbox
flavors: [gp.5.24.96, my.own.flavor]
models: [./tiny-a, Qwen/Qwen3-4B]
variants:
  zen: {platform: zen, objective: latency, instances: 2, max_num_seqs: 8, engine_args: [--enforce-eager]}
  cpu: {platform: cpu, instances: auto, max_model_len: 2048, concurrency: 8, vllm: "0.11.0", zentorch: "5.1.0"}
engine:
  image_source: pip
  base_image_archive: images/base.tar
  engine_args: [--seed=3]
  health_timeout: 600
  served_model_name: model
bench: {concurrency: [1, 2, 8], input_len: 64, output_len: 32, prompts: 4, repeats: 2}
budget: {max_usd: 5, ttl: 90m}
prices: {gp.5.24.96: 0.79, my.own.flavor: 0}
parallel: 2
"""


def model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


@pytest.fixture
def campaign_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A campaign directory with a local model, a base image archive and an inventory; the working directory is
    elsewhere, so relative paths resolve against the file, not the cwd."""
    d = tmp_path / "camp"
    model_dir(d / "tiny-a")
    (d / "images").mkdir()
    (d / "images" / "base.tar").write_bytes(b"")
    (d / "hosts.yml").write_text("all: {hosts: {h1: {}}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return d


def write(d: Path, text: str, name: str = "c.yaml") -> Path:
    path = d / name
    path.write_text(text)
    return path


def test_a_full_file_loads_into_the_spec(campaign_dir: Path):
    path = write(campaign_dir, FULL)
    assert load_spec(path) == CampaignSpec(
        name="qwen-sweep",
        path=path.resolve(),
        cloud="sandbox",
        inventory=None,
        flavors=("gp.5.24.96", "my.own.flavor"),
        models=(str((campaign_dir / "tiny-a").resolve()), "Qwen/Qwen3-4B"),
        variants=(
            Variant(
                "zen",
                {
                    "platform": "zen",
                    "objective": "latency",
                    "instances": 2,
                    "max_num_seqs": 8,
                    "engine_args": ("--enforce-eager",),
                },
            ),
            Variant(
                "cpu",
                {
                    "platform": "cpu",
                    "instances": None,
                    "max_model_len": 2048,
                    "concurrency": 8,
                    "vllm": "0.11.0",
                    "zentorch": "5.1.0",
                },
            ),
        ),
        engine={
            "image_source": "pip",
            "base_image_archive": (campaign_dir / "images" / "base.tar").resolve(),
            "engine_args": ("--seed=3",),
            "health_timeout": 600,
            "served_model_name": "model",
        },
        bench=BenchSpec(concurrency=(1, 2, 8), input_len=64, output_len=32, prompts=4, repeats=2),
        budget=Budget(max_usd=5.0, ttl_s=90 * 60),
        prices={"gp.5.24.96": 0.79, "my.own.flavor": 0.0},
        parallel=2,
    )


def test_the_numbers_have_the_dataclass_types(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, FULL))
    assert isinstance(spec.budget.max_usd, float)
    assert all(isinstance(p, float) for p in spec.prices.values())
    assert isinstance(spec.bench.concurrency, tuple)


def test_a_minimal_file_gets_the_defaults(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, "name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m/x]\n"))
    assert spec.variants == (Variant("default", {}),)
    assert spec.engine == {}
    assert spec.bench == BenchSpec() == BenchSpec((1, 4), 128, 64, 16, 1)
    assert spec.budget == Budget() == Budget(None, 4 * 3600)
    assert spec.prices == {}
    assert spec.parallel == 1
    assert spec.models == ("m/x",)  # a catalogue id (unknown ones are the planner's business), as given


def test_an_inventory_campaign_resolves_it_against_the_file(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, "name: s\ninventory: hosts.yml\nmodels: [tiny-a]\n"))
    assert spec.cloud is None
    assert spec.inventory == (campaign_dir / "hosts.yml").resolve()
    assert spec.flavors == ()
    # a bare name that is a directory next to the file is that local model
    assert spec.models == (str((campaign_dir / "tiny-a").resolve()),)


def test_the_spec_path_is_resolved_and_errors_name_the_file_as_given(campaign_dir: Path):
    os.chdir(campaign_dir)
    write(campaign_dir, "name: s\ncloud: c\nflavors: [f]\nmodels: [m]\n")
    assert load_spec(Path("c.yaml")).path == (campaign_dir / "c.yaml").resolve()
    write(campaign_dir, "name: s\n")
    with pytest.raises(ConfigError) as info:
        load_spec(Path("c.yaml"))
    assert info.value.path == "c.yaml"


def test_the_example_campaign_is_valid(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, EXAMPLE))
    assert spec.cloud
    assert spec.flavors
    assert spec.models
    assert spec.variants


BASE = "name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\n"


@pytest.mark.parametrize(
    ("text", "key", "fragment", "hint"),
    [
        # the document and its required keys
        ("- a\n- b\n", "", "top level must be a mapping", "zenops campaign example"),
        ("", "name", "is required", "name: qwen-sweep"),
        ("name: s\ncloud: c\nflavors: [f]\n", "models", "is required", "models: ["),
        ("name: s\nmodels: [m]\n", "cloud", "is required (or inventory)", "inventory: hosts.yml"),
        # names: check_name's rules, as a ConfigError naming `name`
        (BASE.replace("name: s", "name: Qwen_Sweep"), "name", "campaign name 'Qwen_Sweep' is not allowed", "1-32"),
        (BASE.replace("name: s", "name: 12"), "name", "must be a name", "name: qwen-sweep"),
        # cloud / inventory / flavors
        (BASE + "inventory: hosts.yml\n", "inventory", "not both", "remove one"),
        ("name: s\ncloud: c\nmodels: [m]\n", "flavors", "is required with cloud", "flavors: [gp.5.24.96]"),
        (
            "name: s\ninventory: hosts.yml\nflavors: [f]\nmodels: [m]\n",
            "flavors",
            "not allowed with inventory",
            "cloud",
        ),
        (BASE.replace("[f]", "[]"), "flavors", "needs at least 1 item", "flavors: [gp.5.24.96"),
        (BASE.replace("[f]", "[f, g, f]"), "flavors[2]", "repeats flavors[0]", "remove one"),
        (BASE.replace("[f]", "gp.5.24.96"), "flavors", "must be a list", "flavors: [gp.5.24.96"),
        ("name: s\ninventory: nope.yml\nmodels: [m]\n", "inventory", "does not exist", "relative to the campaign file"),
        # models: local paths must exist (relative to the file) and hold config.json
        (BASE.replace("[m]", "[m, ./missing]"), "models[1]", "no model directory", "config.json"),
        (BASE.replace("[m]", "[./empty]"), "models[0]", "has no config.json", "config.json"),
        (BASE.replace("[m]", "[]"), "models", "needs at least 1 item", "models: ["),
        (BASE.replace("[m]", "[m, 3]"), "models[1]", "catalogue id or a local model directory", "Qwen/Qwen3-4B"),
        # variants: `zenops up` options only, checked
        (
            BASE + "variants: {zen: {platfrom: zen}}\n",
            "variants.zen.platfrom",
            "unknown key",
            "did you mean 'platform'",
        ),
        (
            BASE + "variants: {zen: {quant: int4}}\n",
            "variants.zen.quant",
            "unknown key",
            "valid keys here: concurrency",
        ),
        (BASE + "variants: {zen: {platform: gpu}}\n", "variants.zen.platform", "auto, zen, cpu", "platform: zen"),
        (BASE + "variants: {a: {objective: fast}}\n", "variants.a.objective", "latency, throughput", "objective:"),
        (BASE + "variants: {a: {instances: 0}}\n", "variants.a.instances", "positive integer or auto", "or auto"),
        (BASE + "variants: {a: {instances: many}}\n", "variants.a.instances", "positive integer or auto", None),
        (BASE + "variants: {a: {max_num_seqs: -1}}\n", "variants.a.max_num_seqs", "positive integer", None),
        (BASE + "variants: {a: {max_model_len: 1.5}}\n", "variants.a.max_model_len", "positive integer", None),
        (BASE + "variants: {a: {concurrency: [1, 4]}}\n", "variants.a.concurrency", "positive integer", None),
        (BASE + "variants: {a: {engine_args: --x}}\n", "variants.a.engine_args", "must be a list", "engine_args: ["),
        (BASE + "variants: {a: {engine_args: [--x, 3]}}\n", "variants.a.engine_args[1]", "non-empty string", None),
        (BASE + "variants: {a: {vllm: 0.11}}\n", "variants.a.vllm", "non-empty string", "quoted"),
        (BASE + "variants: {a: [platform, zen]}\n", "variants.a", "mapping of option: value", "{platform: zen}"),
        (BASE + "variants: {}\n", "variants", "needs at least 1 entry", "variants: {zen:"),
        (BASE + "variants: {a b: {}}\n", "variants.a b", "variant name", None),
        # engine
        (BASE + "engine: {image_source: docker}\n", "engine.image_source", "pip, build, prebuilt", None),
        (BASE + "engine: {platform: zen}\n", "engine.platform", "unknown key", "valid keys here"),
        (BASE + "engine: {base_image_archive: no.tar}\n", "engine.base_image_archive", "does not exist", None),
        (BASE + "engine: {health_timeout: 5}\n", "engine.health_timeout", "under 10s", None),  # --health-timeout's
        (BASE + "engine: {health_timeout: 2 hours}\n", "engine.health_timeout", "not a duration", None),
        (BASE + "engine: pip\n", "engine", "must be a mapping", "{image_source: pip}"),
        # bench
        (BASE + "bench: {concurrency: [1, 0]}\n", "bench.concurrency[1]", "positive integer", None),
        (BASE + "bench: {concurrency: 4}\n", "bench.concurrency", "must be a list", "concurrency: [1, 4]"),
        (BASE + "bench: {concurrency: []}\n", "bench.concurrency", "at least 1 item", None),
        (BASE + "bench: {prompts: 0}\n", "bench.prompts", "positive integer", "prompts: 16"),
        (BASE + "bench: {input_len: true}\n", "bench.input_len", "positive integer", None),
        (BASE + "bench: {reps: 2}\n", "bench.reps", "unknown key", "did you mean 'repeats'"),
        # budget, prices, parallel
        (BASE + "budget: {max_usd: 0}\n", "budget.max_usd", "number above 0", "max_usd: 5.0"),
        (BASE + "budget: {ttl: 2 hours}\n", "budget.ttl", "must be a duration: 90s, 30m", "ttl: 2h"),
        (BASE + "budget: {ttl: 0}\n", "budget.ttl", "duration", None),
        (BASE + "budget: {max_usdd: 3}\n", "budget.max_usdd", "unknown key", "did you mean 'max_usd'"),
        (BASE + "prices: {f: -1}\n", "prices.f", "0 or more", "0.79"),
        (BASE + "prices: {f: cheap}\n", "prices.f", "0 or more", None),
        (BASE + "prices: [f]\n", "prices", "must be a mapping", "prices: {gp.5.24.96: 0.79}"),
        (BASE + "parallel: 0\n", "parallel", "positive integer", "parallel: 2"),
        (BASE + "paralel: 2\n", "paralel", "unknown key", "did you mean 'parallel'? (see `zenops campaign example`)"),
    ],
)
def test_each_mistake_names_the_file_the_key_and_the_fix(campaign_dir: Path, text, key, fragment, hint):
    (campaign_dir / "empty").mkdir()
    path = write(campaign_dir, text)
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    err = info.value
    assert err.exit_code == ExitCode.CONFIG
    assert (err.path, err.key) == (str(path), key)
    assert str(path) in err.message
    assert fragment in err.message
    assert err.hint, "every mistake comes with a fix"
    if hint:
        assert hint in err.hint


def test_broken_yaml_names_line_and_column(campaign_dir: Path):
    path = write(campaign_dir, "name: s\nmodels: [a, b\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    assert info.value.path == str(path)
    assert info.value.key.startswith("line 3, column ")
    assert "not valid YAML" in info.value.message


def test_a_missing_file_is_named(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.path == str(tmp_path / "nope.yaml")


def test_flavors_the_catalogue_does_not_know_are_fine_here(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, "name: s\ncloud: c\nflavors: [no.such.flavor]\nmodels: [m]\n"))
    assert spec.flavors == ("no.such.flavor",)


def test_variant_and_engine_options_are_serve_request_fields(tmp_path: Path):
    """What a variant or the engine section sets must reach `zenops up` (ServeRequest), not vanish; the one
    exception, llamacpp, picks the engine that serves the cell (zenops.deployment.lifecycle.Deployment.serve_engine)."""
    fields = {f.name for f in dataclasses.fields(ServeRequest)}
    assert set(VARIANT_OPTIONS) - {"llamacpp"} <= fields
    engine = campaign_schema(tmp_path).root.fields["engine"]
    assert isinstance(engine, Section)
    assert set(engine.fields) <= fields


def test_options_become_a_serve_request(campaign_dir: Path):
    spec = load_spec(write(campaign_dir, FULL))
    for variant in spec.variants:
        req = ServeRequest(**{**spec.engine, **variant.options, "model": spec.models[0]})
        assert req.engine_args
    # a cell's parameters are hashed as JSON: the options serialise
    json.dumps([dict(v.options) for v in spec.variants])


def test_engine_durations_take_the_flags_grammar_and_least_value(campaign_dir: Path):
    # --health-timeout takes 10s and 1h30m, and refuses 9: the campaign file's engine key takes what the flag takes
    for text, seconds in (("10", 10), ("1h30m", 5400)):
        spec = load_spec(write(campaign_dir, BASE + f"engine: {{health_timeout: {text}}}\n"))
        assert spec.engine["health_timeout"] == seconds
    with pytest.raises(ConfigError, match="under 10s"):
        load_spec(write(campaign_dir, BASE + "engine: {health_timeout: 9}\n"))
