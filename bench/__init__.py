"""Benchmarks for Cited Answers: ``make bench`` (quick) or ``BENCH_FULL=1 make bench``.

Benchmarks are not tests: they print figures and never fail. Every figure is a ratio
against a baseline measured in the same run, so the numbers mean the same on any machine.
"""
