"""The commands of ``headless_train.py`` and ``python -m xtts_ft``: their options and their run functions.

``arguments.py`` holds every command's options and needs only the config package: it is all that
``--help`` loads. Each other module holds the run functions of a few commands and imports, at its top,
the stages they run (torch, coqui, ...); cli.py imports the one the chosen command names, after parsing.
"""
