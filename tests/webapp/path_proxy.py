"""A small reverse proxy that serves an upstream app under a path prefix, as a Studio's port view does.

``http://127.0.0.1:<proxy port>/<prefix>/...`` is forwarded to ``http://127.0.0.1:<upstream>/...``
with the prefix stripped and the Host header kept; responses are streamed through piece by piece
(chunked), so Gradio's server-sent events arrive as they are sent. Tests only.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "content-length"}


class PathProxy:
    def __init__(self, prefix: str, upstream_port: int):
        self.prefix = "/" + prefix.strip("/")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                if not (self.path == proxy.prefix or self.path.startswith(proxy.prefix + "/")):
                    self.send_error(404, "outside the proxy path")
                    return
                path = self.path[len(proxy.prefix):] or "/"
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=600)
                try:
                    upstream.request(self.command, path, body=body, headers=headers)
                    resp = upstream.getresponse()
                    self.send_response(resp.status)
                    for key, value in resp.getheaders():
                        if key.lower() not in HOP_BY_HOP:
                            self.send_header(key, value)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        piece = resp.read1(65536) if self.command != "HEAD" else b""
                        if not piece:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (ConnectionError, TimeoutError, http.client.HTTPException):
                    self.close_connection = True
                finally:
                    upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
