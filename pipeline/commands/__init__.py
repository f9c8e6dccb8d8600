"""What each ``nmt`` command does, one module per command family: ``run`` (run and
status), ``report``, ``translate``, ``inspect``. ``pipeline/cli.py`` parses the
arguments and calls these; ``output`` holds what they share (failing with a message,
loading a config, printing tables)."""
