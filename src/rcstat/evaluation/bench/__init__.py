"""The library API of every dataset job, as lm-evaluation-harness's ``simple_evaluate``.

One module per job holds all of it: the config dataclass (the only home of its defaults and
checks: ``from_dict``; the command line builds one with ``from_flags``), the
:class:`~rcstat.runs.job.Job` (taking the config, the model, the tokenizer and the examples;
its manifest options derived from the config), ``run(config)`` — check the output folder and
the run's manifest, load the data and the model, run the job with
:meth:`~rcstat.evaluation.bench.common.JobConfig.run_job`, summarise — returning a result
object, and ``summarize_run(out, settings)`` that rebuilds a run folder's summaries from its
rows (what ``rcstat merge`` calls through :data:`~rcstat.evaluation.bench.registry.JOBS`, the
registry beside the jobs). The options every config holds, its checks and its run folder are
:class:`~rcstat.evaluation.bench.common.JobConfig`'s:

* :mod:`~rcstat.evaluation.bench.kv` — ``rcstat bench kv`` (KV-cache compression);
* :mod:`~rcstat.evaluation.bench.attribution` — ``rcstat bench attribution``;
* :mod:`~rcstat.evaluation.bench.grounding` — ``rcstat bench grounding``;
* :mod:`~rcstat.evaluation.bench.ground_pairs` — ``rcstat ground --pairs`` (many pairs);
* :mod:`~rcstat.evaluation.bench.heads` — ``rcstat heads`` (dataset-scale head analysis; its
  summaries and comparisons in :mod:`~rcstat.evaluation.bench.heads_results`).

Every ``run(config, *, loader=None)`` loads ``(model, tokenizer)`` with ``loader`` (default
:func:`~rcstat.evaluation.bench.common.load`: :func:`rcstat.load_model` on ``config.devices``)
and raises ``ValueError`` when the folder holds another command's output or a run with other
settings (before the model loads: :meth:`~rcstat.evaluation.bench.common.JobConfig.compared`
is checked against it), or when the dataset gives no example. ``say``, where a job takes it,
receives the notes (skipped examples; default: the ``rcstat.evaluation`` logger).
"""
