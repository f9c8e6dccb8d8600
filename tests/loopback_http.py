"""A loopback HTTP file server for download tests: serves in-memory files, honours
Range requests (so resuming can be tested), can drop a connection part-way, and can
trickle a response a byte at a time (a server that never quite stops)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackFileServer:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        # path -> number of bytes after which the next response is cut off (once).
        self.cut_after: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        # path -> seconds between the bytes of its responses: a trickle, never a stop.
        self.trickle_s: dict[str, float] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if self.path in server.trickle_s:
                    for index in range(start, len(body)):
                        self.wfile.write(body[index:index + 1])
                        self.wfile.flush()
                        time.sleep(server.trickle_s[self.path])
                    return
                cut = server.cut_after.pop(self.path, None)
                self.wfile.write(body[start:cut] if cut is not None else body[start:])
                if cut is not None:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "LoopbackFileServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
