"""Benchmark campaigns: a matrix of flavors x models x variants, provisioned, benchmarked and torn down by itself,
inside a time and dollar budget, resumable (issue 16).

The pieces: ``spec`` (the campaign file, validated by zenops.schema), ``plan`` (cells and projected cost), ``state``
(what is done, on disk), ``run`` (the loop), ``report``. Nothing is imported here: `zenops --help` stays fast.
"""
