"""Benchmarks of the engine, the data pipeline, the models and the multi-host algorithms, run from the repository
root as modules: `python -m bench.bench_engine`, `bench.bench_data`, `bench.bench_models`, `bench.bench_distributed`
(docs/benchmarks.md has the figures and the commands). They import only the installed package (`hogwild`, ...).
"""
