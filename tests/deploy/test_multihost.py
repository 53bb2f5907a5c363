"""The multi-host fixture itself: hosts share no files and no Unix sockets, only TCP between
their addresses; a removed host is gone; an unplugged one runs on, unreachable; a killed
run's leftovers are swept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from tests.fixtures.multihost import PREFIX, PYTHON, REPO, Host, Network, sweep

PORT = 7000
# Listens on everything a host could share: a Unix socket in its state folder and in /tmp,
# an abstract Unix socket, TCP on its address and on its loopback. Each answers its host's name.
SERVE = """
import os, socket, sys, threading
name, state, address, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
listeners = []
for path in (state + "/app.sock", "/tmp/app.sock", "\\0quarry-multihost-test"):
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    listeners.append(unix)
for host in (address, "127.0.0.1"):
    tcp = socket.create_server((host, port))
    listeners.append(tcp)
def serve(listener):
    listener.listen()
    while True:
        conn, _ = listener.accept()
        conn.sendall(name.encode())
        conn.close()
for listener in listeners:
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
open(state + "/ready", "w").write("ready")
threading.Event().wait()
"""
# What one host reaches of another's: prints {probe: answer or error}.
PROBE = """
import json, os, socket, sys
state, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def ask(family, target):
    try:
        with socket.socket(family) as sock:
            sock.settimeout(2)
            sock.connect(target)
            return sock.recv(100).decode()
    except OSError as error:
        return type(error).__name__
print(json.dumps({
    "state_folder": os.path.exists(state + "/ready"),
    "unix_state": ask(socket.AF_UNIX, state + "/app.sock"),
    "unix_tmp": ask(socket.AF_UNIX, "/tmp/app.sock"),
    "unix_abstract": ask(socket.AF_UNIX, "\\0quarry-multihost-test"),
    "tcp_address": ask(socket.AF_INET, (address, port)),
    "tcp_loopback": ask(socket.AF_INET, ("127.0.0.1", port)),
}))
"""


def probe(client: Host, server: Host) -> dict[str, object]:
    args = [str(server.state), server.address, str(PORT)]
    return dict(json.loads(client.run([PYTHON, "-c", PROBE, *args]).stdout))


def serve(host: Host) -> None:
    host.popen([PYTHON, "-c", SERVE, host.name, str(host.state), host.address, str(PORT)])
    deadline = time.monotonic() + 30
    while not (host.state / "ready").exists():
        assert time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.05)


def test_hosts_reach_each_other_only_over_tcp(network: Network, tmp_path: Path) -> None:
    a, b = network.add("a"), network.add("b")
    serve(a)
    assert probe(a, a) == {  # the control: on its own host every probe is answered
        "state_folder": True,
        "unix_state": "a",
        "unix_tmp": "a",
        "unix_abstract": "a",
        "tcp_address": "a",
        "tcp_loopback": "a",
    }
    assert probe(b, a) == {
        "state_folder": False,
        "unix_state": "FileNotFoundError",
        "unix_tmp": "FileNotFoundError",
        "unix_abstract": "ConnectionRefusedError",
        "tcp_address": "a",
        "tcp_loopback": "ConnectionRefusedError",
    }
    assert b.run(["hostname"]).stdout.strip() == "b" != socket.gethostname()  # its own
    assert b.run(["getent", "hosts", "a"]).stdout.split() == [a.address, "a"]  # the network's
    (tmp_path / "root-file").write_text("the test's own")
    seen = b.run(["sh", "-c", f"ls {network.root}; test -e {tmp_path}/root-file || echo hidden"])
    assert seen.stdout.split() == ["b", "hidden"]
    # the repository and the venv stay readable, not writable: no channel through them
    assert b.python("print(open('pyproject.toml').read()[:14])").strip() == "[build-system]"
    written = b.run(["touch", str(REPO / "written-by-b")], check=False)
    assert written.returncode != 0 and "Read-only file system" in written.stderr


def test_a_killed_host_is_gone(network: Network) -> None:
    a, b = network.add("a"), network.add("b")
    serve(a)
    assert probe(b, a)["tcp_address"] == "a"
    a.kill()
    assert probe(b, a)["tcp_address"] in {"TimeoutError", "OSError"}  # no route: no answer
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert a.netns not in listed.stdout
    assert b.netns in listed.stdout


def test_an_unplugged_host_runs_on_and_reaches_no_one(network: Network) -> None:
    a, b = network.add("a"), network.add("b")
    serve(a)
    a.unplug()
    assert probe(b, a)["tcp_address"] in {"TimeoutError", "OSError"}  # no answer, no reset
    assert probe(a, a)["tcp_loopback"] == "a"  # its processes run on (its link is gone)
    a.kill()
    assert not a.alive


def test_the_sweep_removes_a_killed_runs_namespaces() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now: the killed run's
    stale, live = f"{PREFIX}{gone.pid}-x", f"{PREFIX}{os.getpid()}-live"
    for netns in (stale, live):
        subprocess.run(["ip", "netns", "add", netns], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "600"])
    time.sleep(0.2)
    try:
        assert stale in sweep()
        assert sleeper.wait(timeout=10) != 0  # killed with the namespace
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        assert stale not in listed.stdout
        assert live in listed.stdout  # a running pytest's hosts are left alone
    finally:
        sleeper.kill()
        for netns in (stale, live):
            subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


def test_closing_a_network_ends_its_processes_and_namespaces(tmp_path: Path) -> None:
    run = f"{PREFIX}{os.getpid()}-closing-"
    net = Network(tmp_path / "hosts", run=run)
    try:
        sleeper = net.add("a").popen(["sleep", "600"])
    finally:
        net.close()  # what the fixture does when a test fails, too
    assert sleeper.poll() is not None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert run not in listed.stdout
