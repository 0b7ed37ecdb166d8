"""The trivial extender of the end-to-end benchmark (benchmarks.e2e's ``trivial`` and ``trivial-full`` runs):
filter passes every node, prioritize scores each 0, nothing else: what the extender protocol itself costs.

    python -m benchmarks.trivial_extender PORT
"""

from __future__ import annotations

import http.server
import sys
from typing import Any

import orjson


class TrivialHandler(http.server.BaseHTTPRequestHandler):
    """The reference extender: filter passes every node, prioritize scores each 0, nothing else. With full
    Nodes (``nodeCacheCapable: false``) filter answers with the NodeList it was sent, as the protocol requires."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without this, delayed ACKs add ~40 ms

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._reply(b"ok")

    FULL_HEAD, FULL_NODES, FULL_TAIL = b'{"Pod":', b',"Nodes":{', b',"NodeNames":null}'
    NODE_NAME = b'{"metadata":{"name":"'

    def do_POST(self) -> None:  # noqa: N802
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        nodes_json = self._full_nodes(data)
        if nodes_json is not None:  # full Nodes in kube-scheduler's layout: echoed as bytes, never decoded
            if self.path.endswith("/filter"):
                self._reply(b'{"Nodes":' + nodes_json + b',"NodeNames":null,"FailedNodes":{},"Error":""}')
            else:
                self._reply(orjson.dumps([{"Host": n, "Score": 0} for n in self._names(nodes_json)]))
            return
        body = orjson.loads(data or b"{}")
        nodes = body.get("Nodes") or body.get("nodes")
        if nodes is not None:  # full Nodes
            if self.path.endswith("/filter"):
                out: Any = {"Nodes": nodes, "NodeNames": None, "FailedNodes": {}, "Error": ""}
            else:
                out = [{"Host": n["metadata"]["name"], "Score": 0} for n in nodes.get("items") or []]
            self._reply(orjson.dumps(out))
            return
        names = body.get("NodeNames") or body.get("nodenames") or []
        if self.path.endswith("/filter"):
            out = {"NodeNames": names, "FailedNodes": {}, "Error": ""}
        else:
            out = [{"Host": n, "Score": 0} for n in names]
        self._reply(orjson.dumps(out))

    def _full_nodes(self, data: bytes) -> bytes | None:
        """The NodeList's bytes of a full-Nodes body in kube-scheduler's layout (``{"Pod":{...},"Nodes":{...},
        "NodeNames":null}``), without decoding the Nodes: the Pod's bytes up to the first ``,"Nodes":{`` must
        decode whole (else that text sat inside the Pod), so what follows is the Nodes value. None: another layout.
        This is the cheapest an extender can answer full-Nodes calls (the protocol's own cost); its prioritize
        takes each item's name by pattern, which holds for the Nodes kube-scheduler sends (metadata.name first)."""
        if not data.startswith(self.FULL_HEAD) or not data.endswith(self.FULL_TAIL):
            return None
        at = data.find(self.FULL_NODES)
        try:
            pod = orjson.loads(data[len(self.FULL_HEAD):at]) if at > 0 else None
        except orjson.JSONDecodeError:
            return None
        return data[at + len(self.FULL_NODES) - 1:-len(self.FULL_TAIL)] if isinstance(pod, dict) else None

    def _names(self, nodes_json: bytes) -> list[str]:
        """Each item's metadata.name, found by its bytes (kube-scheduler writes metadata first, name first)."""
        out, at, start = [], 0, self.NODE_NAME
        while (at := nodes_json.find(start, at)) >= 0:
            end = nodes_json.find(b'"', at + len(start))
            out.append(nodes_json[at + len(start):end].decode())
            at = end
        return out

    def _reply(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until the process ends."""
    http.server.ThreadingHTTPServer(("127.0.0.1", port), TrivialHandler).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python -m benchmarks.trivial_extender PORT")
    serve(int(sys.argv[1]))
