"""xtts_ft: fine-tune Coqui XTTS-v2 on a new language (Amharic first).

Importing this package changes nothing global: no patches to torch or coqui, no output.
"""

__version__ = "0.1.0"
