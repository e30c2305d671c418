"""zenops.campaign.tuned: the best configuration per model written as `zenops up` options and read back, checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from zenops.campaign.report import build_report
from zenops.campaign.tuned import load_tuned, tuned_document, write_tuned
from zenops.errors import ConfigError, UsageError

from .test_campaign_report import cell, res

VARIANTS: dict[str, dict[str, Any]] = {
    "zen": {"platform": "zen", "max_num_seqs": 8, "engine_args": ("--enforce-eager",)},
    "cpu": {"platform": "cpu", "instances": None},
}


def campaign_report(**kw: Any):
    results = [
        res(60, 40, model="Org/A", variant="zen", flavor="gp.small", price=0.5, conc=4),
        res(20, 20, model="Org/A", variant="cpu", flavor="gp.small", price=0.5, conc=1),
        res(30, 90, model="/abs/tiny-b", variant="cpu", flavor="gp.big", price=1.0, conc=4),
    ]
    cells = [cell("k1", model="Org/A"), cell("k2", model="/abs/tiny-b", flavor="gp.big", variant="cpu")]
    return build_report(results, cells, max_tpot_ms=kw.get("max_tpot_ms", 50), api_price=kw.get("api_price"))


def test_write_then_load_round_trip(tmp_path):
    archive = tmp_path / "base.tar"
    archive.write_bytes(b"")
    engine = {"image_source": "pip", "engine_args": ("--seed=3",), "base_image_archive": archive}
    path = tmp_path / "tuned.yaml"
    write_tuned(campaign_report(api_price=0.6), "sweep-202611211200", path, variants=VARIANTS, engine=engine)

    text = path.read_text()
    assert text.startswith("# zenops tuned configurations")
    tuned = load_tuned(path)
    assert list(tuned) == ["Org/A"]  # tiny-b: nothing under 50 ms
    a = tuned["Org/A"]
    assert a.campaign == "sweep-202611211200"
    assert (a.flavor, a.variant) == ("gp.small", "zen")
    assert a.options == {
        "image_source": "pip",
        "engine_args": ("--enforce-eager",),  # the variant's win over the engine's
        "base_image_archive": archive.resolve(),
        "platform": "zen",
        "max_num_seqs": 8,
    }
    assert a.figures["concurrency"] == 4
    assert a.figures["output_tok_s"] == pytest.approx(60)
    assert a.figures["median_tpot_ms"] == pytest.approx(40)
    assert a.figures["cost_per_million_output_tokens"] == pytest.approx(0.5 / (60 * 3600) * 1e6)
    assert a.figures["breakeven_tokens_per_month"] == pytest.approx(0.5 * 730 / 0.6 * 1e6)
    assert a.source == str(path)
    assert a.reason == (
        "tuned by campaign sweep-202611211200 (variant zen on gp.small: $2.31 per 1M output tokens, 60.0 tok/s, "
        "median TPOT 40.0 ms at concurrency 4)"
    )
    doc = yaml.safe_load(text)
    assert doc["max_tpot_ms"] == 50
    assert doc["not_chosen"]["/abs/tiny-b"].startswith("no configuration has a median TPOT <= 50.0 ms")


def test_instances_auto_survives_the_round_trip(tmp_path):
    path = tmp_path / "tuned.yaml"
    write_tuned(campaign_report(max_tpot_ms=None), "c-1", path, variants=VARIANTS)
    doc = yaml.safe_load(path.read_text())
    assert doc["models"]["/abs/tiny-b"]["options"] == {"platform": "cpu", "instances": "auto"}
    tuned = load_tuned(path)
    assert tuned["/abs/tiny-b"].options == {"platform": "cpu", "instances": None}
    assert tuned["/abs/tiny-b"].flavor == "gp.big"


def test_a_best_variant_without_options_is_refused():
    with pytest.raises(UsageError, match="variant 'zen', whose options were not given"):
        tuned_document(campaign_report(), "c-1", variants={"cpu": {}})


def good_doc() -> dict[str, Any]:
    return {
        "zenops_tuned": 1,
        "campaign": "c-1",
        "models": {
            "Org/A": {
                "flavor": "gp.small",
                "variant": "zen",
                "options": {"platform": "zen", "engine_args": ["--enforce-eager"]},
                "figures": {"concurrency": 4, "output_tok_s": 60.0},
            }
        },
    }


def write_doc(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "tuned.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def test_a_hand_written_file_loads(tmp_path):
    tuned = load_tuned(write_doc(tmp_path, good_doc()))
    assert tuned["Org/A"].options == {"platform": "zen", "engine_args": ("--enforce-eager",)}


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, last = dotted.split("|")
    node = doc
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("change", "value", "key", "problem", "hint"),
    [
        ("zenops_tuned", 2, "zenops_tuned", "must be 1", None),
        ("zenops_tuned", KeyError, "zenops_tuned", "is required", "zenops_tuned: 1"),
        ("campagin", "x", "campagin", "unknown key", "did you mean 'campaign'?"),
        ("models|Org/A|options|platform", "gpu", "models.Org/A.options.platform", "must be one of", "platform: zen"),
        ("models|Org/A|options|max_num_seq", 8, "models.Org/A.options.max_num_seq", "unknown key", "max_num_seqs"),
        ("models|Org/A|variant", KeyError, "models.Org/A.variant", "is required", "variant: zen"),
        ("models|Org/A|figures|output_tok_s", "fast", "models.Org/A.figures.output_tok_s", "must be a number", None),
        ("models|Org/A|options", ["platform"], "models.Org/A.options", "must be a mapping", None),
        ("models", {}, "models", "no model has a tuned configuration", "--max-tpot-ms"),
        ("max_tpot_ms", 0, "max_tpot_ms", "must be a number above 0", None),
    ],
)
def test_load_errors_name_the_file_key_and_fix(tmp_path, change, value, key, problem, hint):
    path = write_doc(tmp_path, _set(good_doc(), change, value))
    with pytest.raises(ConfigError) as info:
        load_tuned(path)
    e = info.value
    assert e.path == str(path)
    assert e.key == key
    assert problem in e.message
    if hint is not None:
        assert hint in (e.hint or "")


def test_empty_models_says_why_nothing_was_chosen(tmp_path):
    doc = {**good_doc(), "models": {}, "not_chosen": {"Org/A": "every measurement had failed requests"}}
    with pytest.raises(ConfigError, match="every measurement had failed requests"):
        load_tuned(write_doc(tmp_path, doc))


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_tuned(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_tuned(write_doc(tmp_path, "models: [unclosed\n"))
    assert info.value.key.startswith("line ")
    with pytest.raises(ConfigError, match="is required"):
        load_tuned(write_doc(tmp_path, ""))
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        load_tuned(write_doc(tmp_path, "- a\n- b\n"))


def test_a_missing_base_image_archive_is_named(tmp_path):
    doc = good_doc()
    doc["models"]["Org/A"]["options"]["base_image_archive"] = str(tmp_path / "gone.tar")
    with pytest.raises(ConfigError) as info:
        load_tuned(write_doc(tmp_path, doc))
    assert info.value.key == "models.Org/A.options.base_image_archive"
    assert "does not exist" in info.value.message
