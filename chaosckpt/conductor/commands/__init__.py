"""One module per command; each defines ``command`` and ``cli.py`` registers it."""
