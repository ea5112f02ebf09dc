"""``python -m xtts_ft ui`` (the web app) and ``serve`` (the speech server): their run functions.

Their options are in commands/arguments.py; cli.py imports this module only once one of them was chosen.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xtts_ft.commands.common import command, setup_logging
from xtts_ft.serve.command import ServeOptions, serve_command
from xtts_ft.speech_device import speech_device
from xtts_ft.webapp.app import serve as serve_web_app


@command()
def ui(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    serve_web_app(Path(args.run), host=args.host, port=args.port, auth=args.auth, root_path=args.root_path,
                  config=Path(args.config) if args.config else None,
                  speech_device=speech_device(args.device) if args.device else None)
    return 0


@command()
def serve(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    return serve_command(ServeOptions(
        model=Path(args.model), host=args.host, port=args.port, api_key=args.api_key,
        voices=Path(args.voices) if args.voices else None, device=args.device, wyoming=args.wyoming,
        base_model=args.base_model, max_codes=args.max_codes, max_active_streams=args.max_active_streams,
        stream_first_chunk_codes=args.stream_first_chunk_codes, stream_chunk_codes=args.stream_chunk_codes,
        decode_precision=args.decode_precision, vocoder_precision=args.vocoder_precision,
        decode_graphs=args.decode_graphs, vocoder_batch=args.vocoder_batch, warm_up=args.warm_up,
        vocoder_stream=args.vocoder_stream, decode_overlap=args.decode_overlap,
    ))
