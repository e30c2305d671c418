"""The zenops command line: one module per command, each a thin click function over the library."""
