"""The zenops command line: one module per command, each a thin click function over the library.

These modules import at the top only what defining the commands needs (click, the options, the config); a command's
library (ansible-runner, openstacksdk, the planner, the report and its plots) is imported inside the function that
runs it, so `zenops --help` and every `--help` start fast. tests/unit/test_cli_imports.py keeps it so.
"""
