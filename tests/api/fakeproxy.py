"""A fake HTTP proxy on 127.0.0.1 that forwards nothing: it records who came and says 502.

A test points HTTP(S)_PROXY or a kubeconfig's proxy-url at it and then asks
whether kdist went through it (`contacted`), with what request line and which
headers (a CONNECT for an https server, an absolute-form GET for an http one).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeProxy:
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (line, headers)

    def start(self) -> FakeProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _refuse(self) -> None:
                proxy.seen.append((self.requestline, {k.lower(): v for k, v in
                                                      self.headers.items()}))
                body = b"no upstream here\n"
                self.send_response(502, "Bad Gateway")
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_CONNECT = _refuse

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="fakeproxy",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def contacted(self) -> bool:
        return bool(self.seen)
