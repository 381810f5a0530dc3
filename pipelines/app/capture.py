"""``capture``: live Pulsar topics into a message log folder (``pipelines.ingest.capture``,
docs/capture.md)."""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

from pipelines.app.errors import UsageError
from pipelines.app.targets import check_local_output
from pipelines.ingest import capture as cap


def capture(args: argparse.Namespace) -> int:
    """Options checked, the Pulsar client made, then ``Capture`` until a stop condition or
    SIGINT / SIGTERM (the buffered rows written as a last file, exit 0). ``args.token_env``:
    the environment variable holding a token (set by the parser)."""
    try:
        problem = cap.missing_files([("--token-file", args.token_file),
                                     ("--tls-trust-certs", args.tls_trust_certs),
                                     ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)])
        if problem:
            raise UsageError(problem)
        if bool(args.tls_cert) != bool(args.tls_key):
            raise UsageError("--tls-cert and --tls-key go together")
        options = cap.CaptureOptions(
            output=args.output, topics=tuple(args.topics), pattern=args.topics_pattern,
            namespace=args.namespace, start=cap.parse_start(args.start),
            stop_at_ms=(None if args.stop_at is None
                        else cap.parse_time_ms(args.stop_at, "--stop-at")),
            max_messages=args.max_messages, until_end=args.until_end,
            # a tiny positive --roll-mb rolls at every row; zero or less is refused
            roll_bytes=max(1, int(args.roll_mb * 1024 * 1024)) if args.roll_mb > 0 else 0,
            roll_seconds=args.roll_seconds)
        check_local_output(args.output)
        cap.load_state(Path(args.output))  # an unreadable state file: before connecting
        auth = cap.PulsarAuth(
            token=cap.read_token(args.token_file, os.environ, args.token_env),
            tls_trust_certs=args.tls_trust_certs, tls_cert=args.tls_cert, tls_key=args.tls_key,
            tls_allow_insecure=args.tls_allow_insecure)
        source = cap.PulsarSource(args.service_url, auth, args.admin_url)
        capture = cap.Capture(source, options, say=lambda line: print(line, flush=True))

        def _stop(*_: Any) -> None:
            capture.request_stop()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        capture.run()
    except cap.CaptureError as exc:
        raise UsageError(str(exc)) from None
    return 0
