#!/usr/bin/env python3
"""A stand-in for a group robot, to try slotcron without one: prints every request it gets
(path and body, one line each) and answers as the robots do on success.

    python3 scripts/robot_receiver.py [--port 8000]

Point a job at it with its webhook, e.g.
`WECOM_WEBHOOK='http://127.0.0.1:8000/cgi-bin/webhook/send?key=demo'`. The answer,
`{"errcode":0,"errmsg":"ok","code":0,"msg":"success"}`, is success to WeCom's and DingTalk's
rule (`errcode` 0), Feishu's (`code` 0) and an `http` action's (HTTP 200). It listens on
127.0.0.1 only and runs until Ctrl-C.
"""

import argparse
import http.server
import json
import sys

ANSWER = json.dumps({"errcode": 0, "errmsg": "ok", "code": 0, "msg": "success"}).encode()


class Robot(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        print(f"{self.command} {self.path}\n{body.decode(errors='replace')}", flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    do_PUT = do_POST

    def log_message(self, *args):
        pass  # the request is printed above, once


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8000)
    port = p.parse_args().port
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Robot)
    print(f"robot_receiver: listening on http://127.0.0.1:{port}/", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
