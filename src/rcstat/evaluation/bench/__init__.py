"""The library API of every dataset job, as lm-evaluation-harness's ``simple_evaluate``.

Each module holds a config dataclass (``from_dict``; the command line builds one from its
arguments), ``run(config)`` — check the output folder and the run's manifest, load the data
and the model, run the job with :func:`rcstat.runs.job.run_job`, summarise — returning a
result object, and ``summarize_run(out, settings)`` that rebuilds a run folder's summaries
(what ``rcstat merge`` calls through :data:`rcstat.runs.job.JOBS`). The options every config
holds, its checks and its run folder are :class:`~rcstat.evaluation.bench.common.JobConfig`'s;
what every benchmark run shares is :class:`~rcstat.evaluation.bench.common.BenchRun`'s:

* :mod:`~rcstat.evaluation.bench.kv` — ``rcstat bench kv`` (KV-cache compression);
* :mod:`~rcstat.evaluation.bench.attribution` — ``rcstat bench attribution``;
* :mod:`~rcstat.evaluation.bench.grounding` — ``rcstat bench grounding``;
* :mod:`~rcstat.evaluation.bench.ground_pairs` — ``rcstat ground --pairs`` (many pairs).

* :mod:`~rcstat.evaluation.bench.heads` — ``rcstat heads`` (dataset-scale head analysis; its
  summaries and comparisons in :mod:`~rcstat.evaluation.bench.heads_results`).

Every ``run(config, *, loader=None)`` loads ``(model, tokenizer)`` with ``loader`` (default
:func:`~rcstat.evaluation.bench.common.load`: :func:`rcstat.load_model` on ``config.devices``)
and raises ``ValueError`` when the folder holds another command's output or a run with other
settings (before the model loads: :meth:`~rcstat.evaluation.bench.common.JobConfig.compared`
is checked against it), or when the dataset gives no example. ``say``, where a job takes it,
receives the notes (skipped examples; default: the ``rcstat.evaluation`` logger).
"""
