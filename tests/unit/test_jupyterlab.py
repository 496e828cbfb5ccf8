"""`make lab` (python -m workbench.lab): a real JupyterLab on a free port, asked over its REST API and kernel websocket.

Checks what the user relies on: the URL with its token is printed, the server answers only with that token
and only on 127.0.0.1, it serves the four notebooks, and the kernel it starts is this project's Python (it
imports workbench). The server is stopped at the end, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

pytest.importorskip("jupyterlab")
pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, token) of a JupyterLab started the way `make lab` starts it; stopped afterwards."""
    tmp_path, port = tmp_path_factory.mktemp("lab"), _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    env.pop("JUPYTER_TOKEN", None)
    server = subprocess.Popen([sys.executable, "-m", "workbench.lab", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=(tmp_path / "lab.log").open("w"), text=True,
                              start_new_session=True)
    try:
        printed = "".join(server.stdout.readline() for _ in range(2))
        found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\S+)", printed)
        assert found, printed
        base, token = f"http://127.0.0.1:{port}", found.group(1)
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
            try:
                if requests.get(f"{base}/api/status", params={"token": token}, timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
            time.sleep(0.5)
        yield base, token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def _execute(base: str, token: str, kernel_id: str, code: str) -> str:
    """Run `code` in the kernel over its websocket (Jupyter messaging protocol); returns what it printed."""
    from tornado.websocket import websocket_connect

    async def run() -> str:
        url = base.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels?token={token}"
        ws = await websocket_connect(url)
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": uuid.uuid4().hex,
                       "username": "test", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        out = []
        while True:
            msg = json.loads(await asyncio.wait_for(ws.read_message(), 60))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                raise AssertionError(f"kernel error: {msg['content']['ename']}: {msg['content']['evalue']}")
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                ws.close()
                return "".join(out)

    return asyncio.run(run())


def test_lab_serves_the_notebooks_and_starts_the_project_kernel(lab):
    base, token = lab
    auth = {"Authorization": f"token {token}"}
    assert requests.get(f"{base}/api/contents", timeout=10).status_code == 403  # no token, no entry
    assert requests.get(f"{base}/api/contents", headers={"Authorization": "token wrong"}, timeout=10).status_code == 403

    listing = requests.get(f"{base}/api/contents", headers=auth, timeout=10).json()
    served = {item["name"] for item in listing["content"] if item["type"] == "notebook"}
    ipynb = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    assert len(ipynb) >= 4 and ipynb <= served, served  # (jupytext, where installed, adds .py/.md notebooks)
    notebook = requests.get(f"{base}/api/contents/02-loader-sweep.ipynb", headers=auth, timeout=10).json()
    assert notebook["type"] == "notebook" and notebook["content"]["cells"]
    page = requests.get(f"{base}/lab", headers=auth, timeout=10)
    assert page.ok and "JupyterLab" in page.text

    specs = requests.get(f"{base}/api/kernelspecs", headers=auth, timeout=10).json()
    assert specs["default"] == "workbench"
    assert specs["kernelspecs"]["workbench"]["spec"]["argv"][0] == sys.executable
    named = notebook["content"]["metadata"]["kernelspec"]["name"]  # what opening a notebook starts (python3)
    for name in ("workbench", named):
        kernel = requests.post(f"{base}/api/kernels", headers=auth, json={"name": name}, timeout=30).json()
        try:
            printed = _execute(base, token, kernel["id"], "import sys, workbench; print(sys.executable)")
            assert printed.strip() == sys.executable, name
        finally:
            assert requests.delete(f"{base}/api/kernels/{kernel['id']}", headers=auth, timeout=30).status_code == 204


def test_lab_listens_on_loopback_only(lab):
    base, _ = lab
    port = int(base.rsplit(":", 1)[1])
    listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10)
    if listening.returncode != 0:
        pytest.skip("ss is not available to list listening sockets")
    addresses = {line.split()[3].rsplit(":", 1)[0] for line in listening.stdout.splitlines() if line.strip()}
    assert addresses and addresses <= {"127.0.0.1"}, addresses
