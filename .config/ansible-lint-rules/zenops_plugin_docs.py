"""ansible-lint rule ``zenops-plugin-docs``: the documentation of every plugin (module, filter, ...) parses.

ansible-lint reads a plugin's EXAMPLES through ansible-core's ``read_docstring`` with errors ignored: an invalid
DOCUMENTATION or RETURN is printed as ``[ERROR]: Unable to parse documentation ...`` and the run still passes. This
rule reads the same strings with errors raised and reports them as violations, so they fail the run. Enabled from
.ansible-lint (``rulesdir`` and ``enable_list``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from ansible.parsing.plugin_docs import read_docstring
from ansiblelint.rules import AnsibleLintRule

if TYPE_CHECKING:
    from ansiblelint.errors import MatchError
    from ansiblelint.file_utils import Lintable


def _assignment_line(source: str, name: str) -> int:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.lineno
    return 1


class PluginDocsRule(AnsibleLintRule):
    """Plugin documentation must parse (DOCUMENTATION and RETURN are YAML)."""

    id = "zenops-plugin-docs"
    shortdesc = "Plugin documentation must parse"
    description = (
        "A plugin's DOCUMENTATION must be a YAML mapping and its RETURN valid YAML: ansible-doc, ansible-lint's "
        "argument checks and the collection's docs all read them."
    )
    severity = "VERY_HIGH"
    tags: ClassVar[list[str]] = ["syntax", "zenops"]
    version_changed = "0.1.0"

    def matchlines(self, file: Lintable) -> list[MatchError]:
        if file.kind != "plugin":
            return []
        try:
            docs = read_docstring(str(file.path.resolve(strict=False)), verbose=False, ignore_errors=False)
        except Exception as exc:  # any parse failure is the finding
            cause = exc.__cause__ or exc
            mark = getattr(cause, "problem_mark", None)
            line = _assignment_line(file.content, "DOCUMENTATION") + (mark.line if mark else 0)
            return [
                self.create_matcherror(
                    message=f"documentation does not parse: {str(cause).splitlines()[0] if str(cause) else cause!r}",
                    lineno=line,
                    details=str(cause),
                    filename=file,
                )
            ]
        # a module documents itself; a file of several filters documents each in a plugins/filter/<name>.yml
        if file.path.parent.name == "modules" and not (isinstance(docs.get("doc"), dict) and docs["doc"]):
            return [self.create_matcherror(message="no DOCUMENTATION mapping", lineno=1, filename=file)]
        return []
