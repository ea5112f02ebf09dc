"""Errors that mean "the user gave us something we cannot use".

Every stage raises a subclass of :class:`UserError` for bad input. The command-line
entry points catch exactly this class and print its message as one line (or one line
per problem), without a traceback. Anything else is a bug and keeps its traceback.
A message names the file, key or clip concerned and says what to do.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with something the user supplied (config, data, files, flags)."""

    exit_code = 2


class ConfigError(UserError):
    """The YAML config or a ``--set`` override is invalid."""


class DataError(UserError):
    """The dataset cannot be read or yields no usable clips."""


class TokenizerError(UserError):
    """The vocabulary cannot be built, read or does not match a checkpoint."""


class ModelError(UserError):
    """The base model cannot be found, downloaded or loaded."""


class CheckpointError(UserError):
    """A checkpoint is missing, corrupted, untrusted or incompatible with the run."""


class DiskSpaceError(UserError):
    """What the run will write does not fit on the disk of its run directory."""


class RunFolderError(UserError):
    """The run folder belongs to another run, or cannot be used as a run folder."""


class TrainingStopped(UserError):
    """Training stopped with a diagnosis (e.g. repeated non-finite losses)."""

    exit_code = 3
