"""zenops.schema: the layer zenops.yaml and campaign files are checked with. A small document schema of its own here,
so these tests say what the layer does whatever the two real schemas happen to use."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from zenops import schema
from zenops.errors import ConfigError, ExitCode
from zenops.schema import Entries, Field, Issue, ListOf, Problem, Schema, Section


def _even(v: Any) -> str | Problem | None:
    if not isinstance(v, int):
        return "must be a number"
    return None if v % 2 == 0 else Problem(f"{v} is odd", hint="add 1")


def _port_needs_host(server: Mapping[str, Any]) -> Issue | None:
    return (
        Issue("host", "is needed with port", hint="e.g. host: db1")
        if "port" in server and "host" not in server
        else None
    )


SERVER = Section(
    {"host": Field(schema.non_empty_str, "host: db1"), "port": Field(schema.positive_int, "port: 5432")},
    example="{host: db1}",
    problem="must be a mapping of field: value",
    rules=(_port_needs_host,),
)

DOC = Schema(
    Section(
        {
            "name": Field(schema.non_empty_str, "name: demo"),
            "size": Field(_even, "size: 2"),
            "quiet": Field(schema.boolean),
            "log": Section({"level": Field(schema.choice("info", "debug")), "file": Field(schema.non_empty_str)}),
            "tuning": Section({"depth": Field(schema.count)}, example="{depth: 1}"),
            "servers": Entries(SERVER, example="servers: {a: {host: db1}}", name=schema.non_empty_str),
            "tags": ListOf(Field(schema.non_empty_str, "blue"), example="tags: [blue]", min_items=1, unique=True),
            "groups": Entries(Field(schema.mapping), min_entries=1, example="groups: {g: {}}"),
        },
        problem="the top level must be a mapping of keys",
        hint="see the manual",
        required=("name",),
    ),
    reference="`demo example`",
)


def error(data: Any, path: str = "d.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        DOC.validate(data, path)
    return info.value


def test_a_valid_document_is_returned_as_is():
    data = {
        "name": "x",
        "size": 4,
        "log": {"level": "debug"},
        "servers": {"a": {"host": "h", "port": 1}},
        "tags": ["a", "b"],
        "groups": {"g": {}},
    }
    assert DOC.validate(data, "d.yaml") is data


@pytest.mark.parametrize(
    ("data", "key", "problem", "hint"),
    [
        # a field: its checker's problem, its example as the fix (none without one)
        ({"name": ""}, "name", "must be a non-empty string", "e.g. name: demo"),
        ({"name": "x", "quiet": "yes"}, "quiet", "must be true or false", None),
        # a checker's Problem brings its own fix; without one, the example is the fix
        ({"name": "x", "size": 3}, "size", "3 is odd", "add 1"),
        ({"name": "x", "size": "big"}, "size", "must be a number", "e.g. size: 2"),
        # a section: dotted keys; not a mapping -> its valid keys, or its example
        ({"name": "x", "log": {"level": "loud"}}, "log.level", "must be one of info, debug (got 'loud')", None),
        ({"name": "x", "log": [1]}, "log", "must be a mapping", "valid keys: level, file"),
        ({"name": "x", "tuning": 3}, "tuning", "must be a mapping", "e.g. {depth: 1}"),
        ([1, 2], "", "the top level must be a mapping of keys", "see the manual"),
        # required keys
        ({}, "name", "is required", "e.g. name: demo"),
        # named entries: the map, its names, its values, the entry's rules
        ({"name": "x", "servers": []}, "servers", "must be a mapping (key: value)", "e.g. servers: {a: {host: db1}}"),
        ({"name": "x", "servers": {"a": 1}}, "servers.a", "must be a mapping of field: value", "e.g. {host: db1}"),
        (
            {"name": "x", "servers": {"a": {"port": 0}}},
            "servers.a.port",
            "must be a positive integer",
            "e.g. port: 5432",
        ),
        ({"name": "x", "servers": {"a": {"port": 1}}}, "servers.a.host", "is needed with port", "e.g. host: db1"),
        (
            {"name": "x", "servers": {"": {"host": "h"}}},
            "servers.",
            "must be a non-empty string",
            "e.g. servers: {a: {host: db1}}",
        ),
        ({"name": "x", "groups": {}}, "groups", "needs at least 1 entry", "e.g. groups: {g: {}}"),
        # lists: the index names the item
        ({"name": "x", "tags": "blue"}, "tags", "must be a list", "e.g. tags: [blue]"),
        ({"name": "x", "tags": []}, "tags", "needs at least 1 item", "e.g. tags: [blue]"),
        ({"name": "x", "tags": ["a", ""]}, "tags[1]", "must be a non-empty string", "e.g. blue"),
        ({"name": "x", "tags": ["a", "b", "a"]}, "tags[2]", "repeats tags[0]", "remove one of them"),
    ],
)
def test_each_mistake_names_the_file_the_key_and_the_fix(data, key, problem, hint):
    err = error(data)
    assert err.exit_code == ExitCode.CONFIG
    assert err.path == "d.yaml"
    assert err.key == key
    assert err.message == (f"d.yaml: {key}: {problem}" if key else f"d.yaml: {problem}")
    assert err.hint == hint


@pytest.mark.parametrize(
    ("data", "key", "hint"),
    [
        ({"nmae": "x"}, "nmae", "did you mean 'name'? (see `demo example`)"),
        ({"name": "x", "log": {"levle": "info"}}, "log.levle", "did you mean 'level'?"),
        ({"name": "x", "servers": {"a": {"hots": "h"}}}, "servers.a.hots", "did you mean 'host'?"),
        (
            {"name": "x", "zzzzzz": 1},
            "zzzzzz",
            "valid keys here: groups, log, name, quiet, servers, size, tags, tuning",
        ),
        ({"name": "x", 7: 1}, "7", "valid keys here:"),  # YAML keys need not be strings
    ],
)
def test_unknown_keys_offer_the_closest_one_or_every_one(data, key, hint):
    err = error(data)
    assert (err.key, err.message) == (key, f"d.yaml: {key}: unknown key")
    assert hint in (err.hint or "")
    assert "`demo example`" in (err.hint or "")


def test_an_empty_document_is_empty_and_still_needs_its_required_keys():
    assert error(None).key == "name"
    assert Schema(Section({"a": Field(schema.count)}), reference="r").validate(None, "d.yaml") == {}


def test_mistakes_are_found_level_first_then_entries_in_schema_order():
    # a key of this level is reported before an entry that comes earlier in the file ...
    assert error({"servers": {"a": {"port": 0}}, "name": ""}).key == "name"
    # ... and required keys before entries; the entries' map shape inline, in file order
    assert error({"servers": {"a": {"port": 0}}}).key == "name"
    assert error({"name": "x", "groups": [], "log": 3}).key == "groups"
    # entries follow the schema's order (servers before groups), whatever the file's
    assert error({"name": "x", "groups": {"g": 1}, "servers": {"a": {"port": 0}}}).key == "servers.a.port"
    # within one entry: its fields, then its rules
    assert error({"name": "x", "servers": {"a": {"port": 1, "bad": 1}}}).key == "servers.a.bad"


def test_check_names_where_a_value_comes_from():
    with pytest.raises(ConfigError) as info:
        DOC.check(SERVER, {"port": -1}, "catalogue.yaml", "servers.big")
    assert (info.value.path, info.value.key) == ("catalogue.yaml", "servers.big.port")
    DOC.check(SERVER, {"host": "h"}, "catalogue.yaml", "servers.big")


@pytest.mark.parametrize(
    ("checker", "good", "bad"),
    [
        (schema.positive_int, [1, 10**6], [0, -1, True, 1.0, "1", None]),
        (schema.count, [0, 3], [-1, False, 0.5, "0"]),
        (schema.positive_number, [0.01, 1, 2.5], [0, -1.0, True, "1"]),
        (schema.non_negative_number, [0, 0.0, 1.5], [-0.01, False, "0"]),
        (schema.non_empty_str, ["a", " a "], ["", "  ", 1, None]),
        (schema.boolean, [True, False], [0, 1, "true"]),
        (schema.mapping, [{}, {"a": 1}], [[], None, "a: 1"]),
        (schema.choice("a", "b"), ["a", "b"], ["c", None, ["a"]]),
        (schema.strings("names!"), [[], ["a", "b"]], ["a", [""], ["a", 1], None]),
        (schema.mapping_of("options!"), [{}], [[], 1]),
    ],
)
def test_checkers(checker, good, bad):
    for value in good:
        assert checker(value) is None, value
    for value in bad:
        assert checker(value), value


def test_choice_and_list_problems_say_what_is_allowed():
    assert schema.choice("zen", "cpu")("gpu") == "must be one of zen, cpu (got 'gpu')"
    assert schema.strings("must be a list of flags")(["a", 2]) == "must be a list of flags"


def test_read_yaml_names_line_and_column(tmp_path: Path):
    path = tmp_path / "d.yaml"
    path.write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        schema.read_yaml(path)
    assert info.value.path == str(path)
    assert info.value.key.startswith("line 3, column ")
    assert "not valid YAML" in info.value.message
    assert info.value.hint == "fix the YAML syntax there"


def test_read_yaml_refuses_a_key_given_twice_naming_both_lines(tmp_path: Path):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: sweep\nbudget:\n  max_usd: 5\n  ttl: 2h\n  max_usd: 50\n")
    with pytest.raises(ConfigError) as info:
        schema.read_yaml(path)
    assert info.value.message == f"{path}: line 5, column 3: 'max_usd' is given twice (first on line 3)"
    assert "silently take the last" in (info.value.hint or "")


def test_read_yaml_keeps_merge_keys_and_the_same_key_in_other_mappings(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text("base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\nlist: [{k: 1}, {k: 2}]\n")
    assert schema.read_yaml(path) == {"base": {"a": 1, "b": 2}, "x": {"a": 1, "b": 3}, "list": [{"k": 1}, {"k": 2}]}


def test_read_yaml_of_a_missing_file_names_it(tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        schema.read_yaml(tmp_path / "nope.yaml")
    assert info.value.path == str(tmp_path / "nope.yaml")
    assert "cannot read" in info.value.message


def test_read_yaml_parses(tmp_path: Path):
    path = tmp_path / "d.yaml"
    path.write_text("a: [1, 2]\n")
    assert schema.read_yaml(path) == {"a": [1, 2]}
