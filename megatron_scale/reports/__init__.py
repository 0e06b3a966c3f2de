"""The reports: what a finished run's files say, as tables, plots and JSON. Each reads files that
the training, evaluation and sweep steps wrote (megatron_scale/artifacts.py describes them) and
writes its own outputs atomically; none of them trains or evaluates a model.

    recipe.py           the Korean recipe's table: forgetting and learning of every method (tools/scale_report.py)
    benchmarks.py       its benchmark section: accuracy before and after, paired changes
    route_sweep.py      its SCALE-Route section: every tau of every router statistic
    samples.py          greedy continuations of every exported model (tools/generate_samples.py)
    frontier.py         the stability-plasticity frontier of any pair of scores: summary and Pareto front
    frontier_report.py  a frontier written out (JSON, Markdown, PNG)
    recipe_frontier.py  the recipe's runs as a frontier (tools/recipe_frontier.py)
    bio.py              the biography benchmark's results, tables and plot (tools/biography_benchmark.py)
    bio_frontier.py     the biography benchmark's runs as a frontier
"""
