"""A small schema layer for zenops's YAML files (zenops.yaml, campaign files): every mistake is reported the same way,
as a ConfigError naming the file, the key (``docker.source``, ``flavors.x.vcpus``, ``models[2]``) and the fix.

A schema is a tree of nodes: a :class:`Field` (a checker and an example shown as the fix), a :class:`Section` (fixed
keys, each a node), :class:`Entries` (a map of named entries such as ``flavors.<name>``, every value one node) and
:class:`ListOf` (a list, every item one node, errors naming the index). Checkers are plain functions returning a
problem (a string, or a :class:`Problem` when the fix depends on the value) or None. Cross-key constraints ("give
cloud or inventory, not both") are a section's rules. A command's validation stops at the first mistake (one precise
error); :meth:`Schema.collect` (``zenops config check``) runs the same checks and gathers every mistake instead,
skipping what depends on a broken part (a section's rules run only when its keys passed). A :class:`Field` may also
``convert`` a valid value to what the code uses (YAML's ``on`` for the mode "on", ``15m`` as 900 seconds).

The order mistakes are found in is part of the behaviour: a section's keys in the file's order (sections inline),
then its missing required keys, then the named entries of its :class:`Entries` (in the schema's order), then its
rules. Nothing here imports YAML at import time (the CLI's ``--help`` starts without it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from zenops import durations
from zenops.errors import ConfigError


class Problem(NamedTuple):
    """What a checker returns when the fix depends on the value (a path that does not exist, a name's rules)."""

    text: str
    hint: str | None = None


Checker = Callable[[Any], str | Problem | None]  # the problem with the value, or None when it is fine


class Issue(NamedTuple):
    """A rule's finding: ``key`` relative to the section the rule belongs to."""

    key: str
    problem: str
    hint: str | None = None


Rule = Callable[[Mapping[str, Any]], Issue | None]


# --- nodes ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One value: ``check`` finds what is wrong with it; the hint is ``e.g. <example>`` (none without an example).
    ``convert``: what a valid value becomes in the validated document (None: it stays as written)."""

    check: Checker
    example: str | None = None
    convert: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Section:
    """A mapping with fixed keys. ``problem``/``hint`` are said when the value is not a mapping; without a hint,
    ``e.g. <example>``, else the valid keys. ``required`` keys must be present; ``rules`` run once the keys passed."""

    fields: Mapping[str, Node]
    example: str | None = None
    problem: str = "must be a mapping"
    hint: str | None = None
    required: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Entries:
    """A map of named entries (``flavors.<name>``): every value checked by ``value``, every name by ``name``."""

    value: Node
    example: str | None = None
    problem: str = "must be a mapping (key: value)"
    name: Checker | None = None
    min_entries: int = 0


@dataclass(frozen=True)
class ListOf:
    """A list whose items are each checked by ``item``; errors name the index (``models[2]``)."""

    item: Node
    example: str | None = None
    min_items: int = 0
    unique: bool = False


Node = Field | Section | Entries | ListOf


@dataclass(frozen=True)
class Schema:
    """A document's schema: its top-level section, and where its format is documented (named in the hint for an
    unknown key, so the operator can look the right one up)."""

    root: Section
    reference: str

    def validate(self, data: Any, path: str) -> dict[str, Any]:
        """Check a parsed document (None, an empty file, counts as empty); return it. Raises ConfigError."""
        if data is None:
            data = {}
        check(self.root, data, path=path, reference=self.reference)
        assert isinstance(data, dict)  # the root is a Section: check() refused anything else
        return data

    def collect(self, data: Any, path: str) -> list[ConfigError]:
        """Every mistake in a parsed document, in the order :meth:`validate` would meet them (it raises the first).
        Valid values are converted in place, as :meth:`validate` does."""
        found: list[ConfigError] = []
        _check(self.root, {} if data is None else data, "", _Context(path, self.reference, found))
        return found

    def check(self, node: Node, value: Any, path: str, where: str) -> None:
        """Check one value found at ``where`` (e.g. one ``flavors.<name>`` entry from another file)."""
        check(node, value, path=path, where=where, reference=self.reference)


# --- checking ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    path: str
    reference: str
    found: list[ConfigError] | None = None  # None: raise the first mistake; a list: gather every one

    def fail(self, error: ConfigError) -> None:
        if self.found is None:
            raise error
        self.found.append(error)

    def mistakes(self) -> int:
        return len(self.found) if self.found is not None else 0


def check(node: Node, value: Any, *, path: str, reference: str, where: str = "") -> None:
    """Check ``value`` against ``node``; raise ConfigError(path, where..., problem, hint=fix) at the first mistake."""
    _check(node, value, where, _Context(path, reference))


def join(where: str, key: Any) -> str:
    """The dotted key of ``key`` inside ``where`` (the top level has no prefix)."""
    return f"{where}.{key}" if where else str(key)


def _check(node: Node, value: Any, where: str, ctx: _Context) -> None:
    if isinstance(node, Field):
        _check_field(node, value, where, ctx)
    elif isinstance(node, Section):
        _check_section(node, value, where, ctx)
    elif isinstance(node, Entries):
        _check_entries_shape(node, value, where, ctx)
        _check_entries(node, value, where, ctx)
    else:
        _check_list(node, value, where, ctx)


def _hint(example: str | None) -> str | None:
    return f"e.g. {example}" if example else None


def _check_field(node: Field, value: Any, where: str, ctx: _Context) -> bool:
    found = node.check(value)
    if isinstance(found, Problem):
        ctx.fail(ConfigError(ctx.path, where, found.text, hint=found.hint or _hint(node.example)))
    elif found:
        ctx.fail(ConfigError(ctx.path, where, found, hint=_hint(node.example)))
    return not found


def _check_section(node: Section, value: Any, where: str, ctx: _Context) -> None:
    if not isinstance(value, dict):
        hint = node.hint or _hint(node.example) or f"valid keys: {', '.join(node.fields)}"
        ctx.fail(ConfigError(ctx.path, where, node.problem, hint=hint))
        return
    before = ctx.mistakes()
    entries: list[tuple[Entries, str, dict[Any, Any]]] = []
    for key, sub in value.items():
        child = node.fields.get(key) if isinstance(key, str) else None
        if child is None:
            ctx.fail(unknown_key(ctx.path, join(where, key), str(key), list(node.fields), ctx.reference))
        elif isinstance(child, Entries):  # its entries after this level's own keys: see the module's docstring
            if _check_entries_shape(child, sub, join(where, key), ctx):
                entries.append((child, key, sub))
        elif isinstance(child, Field):
            if _check_field(child, sub, join(where, key), ctx) and child.convert is not None:
                value[key] = child.convert(sub)
        else:
            _check(child, sub, join(where, key), ctx)
    for key in node.required:
        if key not in value:
            ctx.fail(ConfigError(ctx.path, join(where, key), "is required", hint=_hint(node.fields[key].example)))
    for name in node.fields:  # the schema's order
        for child, key, sub in entries:
            if key == name:
                _check_entries(child, sub, join(where, key), ctx)
    if ctx.mistakes() > before:
        return  # the rules read the keys: not on a section with a mistake already said
    for rule in node.rules:
        issue = rule(value)
        if issue is not None:
            ctx.fail(ConfigError(ctx.path, join(where, issue.key), issue.problem, hint=issue.hint))


def _check_entries_shape(node: Entries, value: Any, where: str, ctx: _Context) -> bool:
    if not isinstance(value, dict):
        ctx.fail(ConfigError(ctx.path, where, node.problem, hint=_hint(node.example)))
        return False
    if len(value) < node.min_entries:
        ctx.fail(
            ConfigError(ctx.path, where, _at_least(node.min_entries, "entry", "entries"), hint=_hint(node.example))
        )
        return False
    return True


def _check_entries(node: Entries, value: dict[Any, Any], where: str, ctx: _Context) -> None:
    for name, sub in value.items():
        if node.name is not None and not _check_field(Field(node.name, node.example), name, join(where, name), ctx):
            continue
        if isinstance(node.value, Field):
            if _check_field(node.value, sub, join(where, name), ctx) and node.value.convert is not None:
                value[name] = node.value.convert(sub)
        else:
            _check(node.value, sub, join(where, name), ctx)


def _check_list(node: ListOf, value: Any, where: str, ctx: _Context) -> None:
    if not isinstance(value, list):
        ctx.fail(ConfigError(ctx.path, where, "must be a list", hint=_hint(node.example)))
        return
    if len(value) < node.min_items:
        ctx.fail(ConfigError(ctx.path, where, _at_least(node.min_items, "item", "items"), hint=_hint(node.example)))
    for i, item in enumerate(value):
        if isinstance(node.item, Field):
            if _check_field(node.item, item, f"{where}[{i}]", ctx) and node.item.convert is not None:
                value[i] = node.item.convert(item)
        else:
            _check(node.item, item, f"{where}[{i}]", ctx)
        if node.unique and _hashable(item) and item in value[:i]:
            first = value.index(item)
            ctx.fail(ConfigError(ctx.path, f"{where}[{i}]", f"repeats {where}[{first}]", hint="remove one of them"))


def _at_least(n: int, one: str, many: str) -> str:
    return f"needs at least {n} {one if n == 1 else many}"


def _hashable(item: Any) -> bool:
    return isinstance(item, str | int | float | bool)


def unknown_key(path: str, where: str, key: str, known: list[str], reference: str) -> ConfigError:
    """An unknown key: the closest valid one as the fix, else every valid one."""
    close = difflib.get_close_matches(key, known, n=1)
    fix = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(sorted(known))}"
    return ConfigError(path, where, "unknown key", hint=f"{fix} (see {reference})")


# --- checkers ---------------------------------------------------------------------------------------------------


def non_empty_str(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def positive_int(v: Any) -> str | None:
    return None if _is_int(v) and v > 0 else "must be a positive integer"


def count(v: Any) -> str | None:
    return None if _is_int(v) and v >= 0 else "must be a whole number, 0 or more"


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be a mapping (key: value)"


def positive_number(v: Any) -> str | None:
    return None if _is_number(v) and v > 0 else "must be a number above 0"


def non_negative_number(v: Any) -> str | None:
    return None if _is_number(v) and v >= 0 else "must be a number, 0 or more"


# YAML 1.1 (PyYAML) reads these words, unquoted, as booleans: `gateway: on` arrives as True
YAML_BOOL_WORDS = {True: ("on", "yes", "true"), False: ("off", "no", "false")}


def yaml_word(value: Any, choices: tuple[str, ...] | list[str]) -> str | None:
    """The one word of ``choices`` an unquoted YAML boolean ``value`` was written as (``on`` for True among auto,
    on, off); None when ``value`` is no boolean, or no word or more than one of ``choices`` reads as it."""
    if not isinstance(value, bool):
        return None
    words = [w for w in choices if w.lower() in YAML_BOOL_WORDS[value]]
    return words[0] if len(words) == 1 else None


def choice_problem(
    value: Any, choices: tuple[str, ...] | list[str], *, key: str = "", yaml_bools: bool = True
) -> Problem | None:
    """What is wrong with ``value`` as one of ``choices`` (a mode string), None when nothing is. With ``yaml_bools``,
    a YAML boolean is taken as the word it was written as when that word is one of the choices and the only one
    that reads as it (:func:`yaml_word`); any other boolean is refused, the fix quoting the word when it is one of
    the choices (``quote it: gateway: "on"``), else naming one (``key``, the dotted key, is named in the fix)."""
    if isinstance(value, str) and value in choices:
        return None
    if yaml_bools and yaml_word(value, choices) is not None:
        return None
    text = f"must be one of {', '.join(choices)} (got {value!r})"
    if not isinstance(value, bool):
        return Problem(text)
    matching = [w for w in choices if w.lower() in YAML_BOOL_WORDS[value]]
    name = f"{key.rsplit('.', 1)[-1]}: " if key else ""
    read = f"YAML reads an unquoted {'/'.join(YAML_BOOL_WORDS[value])} as the boolean {str(value).lower()}"
    if matching:  # the word is a choice, but not the only one YAML reads so (or quoting is wanted): quote it
        return Problem(f"{text}: {read}", hint=f'quote it: {name}"{matching[0]}"')
    return Problem(f"{text}: {read}", hint=f"use one of them, e.g. {name}{choices[0]}")


def choice(*choices: str) -> Checker:
    """One of ``choices`` (the problem lists them and what was given). A YAML boolean is refused with the fix: quote
    the word (:func:`mode` is a field that takes ``on``/``off`` unquoted)."""

    def check_choice(v: Any) -> str | Problem | None:
        if isinstance(v, bool):
            return choice_problem(v, choices, yaml_bools=False)
        return None if v in choices else f"must be one of {', '.join(choices)} (got {v!r})"

    return check_choice


def mode(*choices: str, example: str | None = None) -> Field:
    """A mode string, one of ``choices``, that also takes YAML's unquoted booleans as the word written (``off`` among
    accept-new, strict, off): :func:`choice_problem`; the validated document holds the word."""
    return Field(lambda v: choice_problem(v, choices), example, convert=lambda v: yaml_word(v, choices) or v)


def duration(minimum: int = 1) -> Checker:
    """A duration in zenops's one grammar (zenops.durations: 90s, 15m, 1h30m, or a number of seconds), at least
    ``minimum`` seconds. A :class:`Field` with ``convert=durations.parse`` holds the seconds."""

    def check_duration(v: Any) -> str | None:
        try:
            durations.parse(v, minimum=minimum)
        except ValueError as e:
            return str(e)  # it shows the grammar; the field's example is the fix
        return None

    return check_duration


def strings(problem: str) -> Checker:
    """A list of non-empty strings, reported as a whole (``problem``), for lists whose items have no names."""

    def check_strings(v: Any) -> str | None:
        ok = isinstance(v, list) and all(isinstance(x, str) and x for x in v)
        return None if ok else problem

    return check_strings


def mapping_of(problem: str) -> Checker:
    """A mapping whose contents someone else checks (e.g. ``defaults.<command>``: the command's options)."""

    def check_mapping(v: Any) -> str | None:
        return None if isinstance(v, dict) else problem

    return check_mapping


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# --- reading ----------------------------------------------------------------------------------------------------


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a file that cannot be read or parsed is a ConfigError naming it (and line and column)."""
    import yaml  # noqa: PLC0415  (only when a file is read: the CLI's --help starts without it)

    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror}", hint="check the path and permissions") from e
    try:
        return yaml.load(text, Loader=_unique_keys_loader())  # a SafeLoader subclass
    except _DuplicateKeyError as e:
        raise ConfigError(
            str(path),
            e.where,
            f"'{e.key}' is given twice (first on line {e.first_line})",
            hint="keep one of the two: YAML would silently take the last",
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(str(path), where, f"not valid YAML: {problem}", hint="fix the YAML syntax there") from e


def key_lines(text: str) -> dict[str, int]:
    """Where each key of a YAML document is: its dotted key as the schema names it (``flavors.x.vcpus``,
    ``models[2]``, :func:`join`) -> its 1-based line. A document YAML cannot compose gives {} (read_yaml says why)."""
    import yaml  # noqa: PLC0415

    lines: dict[str, int] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = join(where, key_node.value)
                lines.setdefault(key, key_node.start_mark.line + 1)
                walk(value_node, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault(f"{where}[{i}]", item.start_mark.line + 1)
                walk(item, f"{where}[{i}]")

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    if root is not None:
        walk(root, "")
    return lines


def line_of(lines: Mapping[str, int], key: str) -> int | None:
    """The line of ``key`` (or of the nearest enclosing key the map has: a missing required key is said where its
    section is), None when not even the top-level key is in the file."""
    while key:
        if key in lines:
            return lines[key]
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    return None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str, where: str, first_line: int) -> None:
        super().__init__(f"{key} twice")
        self.key, self.where, self.first_line = key, where, first_line


def _unique_keys_loader() -> Any:
    """PyYAML's SafeLoader, refusing a mapping that gives a key twice (PyYAML keeps the last without a word)."""
    import yaml  # noqa: PLC0415

    class UniqueKeySafeLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor`: keys given beside it override the merged ones, as YAML means
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    where = f"line {line}, column {key_node.start_mark.column + 1}"
                    raise _DuplicateKeyError(str(key), where, seen[key])
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeySafeLoader
