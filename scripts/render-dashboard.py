#!/usr/bin/env python3
"""Renders the dashboard as it was at one moment, from JSON saved from a daemon's API
(the monitoring step of scripts/device/verify saves TAG-gpus.json, TAG-jobs.json, TAG-history.json): serves
the page's own files and those answers on a local port and takes a screenshot in headless
Chromium. For pictures of a run on a machine without a browser.
Usage: scripts/render-dashboard.py SNAPSHOT_DIR TAG OUT.png [MINUTES]"""
import http.server
import os
import sys
import threading

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "e2e"))
from browser import Chromium  # noqa: E402

snapshots, tag, output = sys.argv[1:4]
minutes = sys.argv[4] if len(sys.argv) > 4 else "5"
web = os.path.join(here, "..", "src", "daemon", "web")
files = {
    "/": (os.path.join(web, "index.html"), "text/html"),
    "/app.js": (os.path.join(web, "app.js"), "text/javascript"),
    "/style.css": (os.path.join(web, "style.css"), "text/css"),
    "/chart.min.js": ("/usr/share/javascript/chart.js/chart.min.js", "text/javascript"),
    "/api/gpus": (os.path.join(snapshots, f"{tag}-gpus.json"), "application/json"),
    "/api/jobs": (os.path.join(snapshots, f"{tag}-jobs.json"), "application/json"),
    "/api/history": (os.path.join(snapshots, f"{tag}-history.json"), "application/json"),
}


class Saved(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path not in files:
            self.send_error(404)
            return
        name, content_type = files[path]
        with open(name, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Saved)
threading.Thread(target=server.serve_forever, daemon=True).start()
with Chromium(width=1280, height=700) as browser:
    browser.navigate(f"http://127.0.0.1:{server.server_port}/?minutes={minutes}")
    browser.wait_for("document.body.dataset.chartsRendered && document.body.dataset.updated", what="the charts")
    browser.screenshot(output)
server.shutdown()
print(output)
