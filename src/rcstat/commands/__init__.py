"""Each single-example command as a library call: a config dataclass (every option with its
default, ``from_dict`` and one ``check()`` whose messages name the command-line flags),
``run(config, *, loader=None)`` and a result that writes the folder the command writes.
The command line (:mod:`rcstat.cli`) parses its flags into the config, calls ``run`` and prints.

* :mod:`~rcstat.commands.analyze` — ``rcstat analyze``: per-head RC scores of one example;
* :mod:`~rcstat.commands.attribute` — ``rcstat attribute``: an answer attributed to the context;
* :mod:`~rcstat.commands.compress` — ``rcstat compress``: answers on a compressed KV cache;
* :mod:`~rcstat.commands.ground` — ``rcstat ground`` (one pair): is a response supported by its
  context (many pairs: :mod:`rcstat.evaluation.bench.ground_pairs`);
* :mod:`~rcstat.commands.ground_profile` — ``rcstat ground-profile``: the head profile that
  ``rcstat ground`` reads.

The demo is its own component beside this one (:mod:`rcstat.demo`: ``DemoConfig``, ``run``).
"""
