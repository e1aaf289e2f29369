"""Each single-example command as a library call: a config dataclass (every option with its
default; a :class:`~rcstat.runs.job.Config`: ``from_dict`` and one ``check()`` whose messages
name the command-line flags), ``run(config, *, loader=None, step=nullcontext)`` and a result
that writes the folder the command writes. The command line (:mod:`rcstat.cli`) parses its
flags into the config, calls ``run`` and prints.

Each flag ``--x-y`` of a command is the field ``x_y`` of its config. Every config holds
``model`` (a hub id, a local folder or a ``.gguf`` file; None: the embedded default model),
``devices`` (where it runs: :class:`~rcstat.runs.devices.Devices`) and, where the command
writes a folder, ``out`` (the folder ``run`` writes; None: nothing is written).
Every ``run`` checks ``config`` again, then the output folder ``config.out`` where it has one
(before the model loads: a folder of another command, or with files rcstat did not write, is a
``ValueError``); ``loader(model, devices)`` returns ``(model, tokenizer)`` (default
:func:`rcstat.evaluation.bench.common.load`: :func:`rcstat.load_model` on ``config.devices``);
``step(message)`` (a :data:`rcstat.progress.Step`) shows progress around each long step, silent
by default. The folder is written when ``config.out`` is set (``result.write(out)`` writes it
anywhere).

* :mod:`~rcstat.commands.analyze` — ``rcstat analyze``: per-head RC scores of one example;
* :mod:`~rcstat.commands.attribute` — ``rcstat attribute``: an answer attributed to the context;
* :mod:`~rcstat.commands.compress` — ``rcstat compress``: answers on a compressed KV cache;
* :mod:`~rcstat.commands.ground` — ``rcstat ground`` (one pair): is a response supported by its
  context (many pairs: :mod:`rcstat.evaluation.bench.ground_pairs`);
* :mod:`~rcstat.commands.ground_profile` — ``rcstat ground-profile``: the head profile that
  ``rcstat ground`` reads.

The demo is its own component beside this one (:mod:`rcstat.demo`: ``DemoConfig``, ``run``).
"""
