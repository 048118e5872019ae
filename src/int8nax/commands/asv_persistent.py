"""asv with one long-lived benchmark process per environment instead of one per benchmark.

    python src/int8nax/commands/asv_persistent.py run|continuous|... [asv arguments]

The command line is asv's own (`python -m asv ...`); only how benchmark processes are launched
changes. asv's "spawn" starts a new Python for every (benchmark, parameter, round), and its
"forkserver" forks one that has imported the suite. Neither suits a CUDA box:
- spawn pays Python start, MLX + CUDA initialisation, the torch import of the peers and one
  NVRTC compile per kernel variant in every process: ~10 s each on the H200, so the whole
  suite costs ~22 minutes per commit;
- forkserver's children inherit a CUDA context initialised by importing MLX in the server,
  which a forked child cannot use (`cudaMallocManaged ... initialization error`).
Here each environment gets one worker, started with that environment's Python, which runs
asv_runner's own benchmark code (setup, asv's timing loop, teardown, the result file) for each
request in turn, in itself. Timing, statistics and result files are asv's; what is given up is
process isolation: compiled kernels, prepared problems and MLX's buffer cache persist from one
benchmark to the next, as they do in a model that runs for a while. A worker that crashes or
exceeds a benchmark's timeout is killed and restarted; that benchmark is reported failed (or
timed out) and the others run on.

Standard library only, plus asv in the Python that runs asv (the worker side needs only
asv_runner, which asv installs into every environment), so it runs as a script from any
checkout, including for commits older than this file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback

WORKER_FLAG = "--int8nax-worker"
START_TIMEOUT_S = 120.0
"""How long a worker may take to import asv_runner and open its socket."""
TIMEOUT_GRACE_S = 5.0
"""Added to a benchmark's own timeout before its worker is killed (setup and result writing)."""


# --- the worker: runs in the environment's Python --------------------------------------------

def _send(conn: socket.socket, payload) -> None:
    data = json.dumps(payload).encode("utf-8")
    conn.sendall(struct.pack("<Q", len(data)) + data)


def _receive(conn: socket.socket):
    head = _read_exactly(conn, 8)
    (size,) = struct.unpack("<Q", head)
    return json.loads(_read_exactly(conn, size).decode("utf-8"))


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def serve(benchmark_dir: str, socket_name: str) -> None:
    """Answer 'preimport', 'run' and 'quit' requests on `socket_name`, one at a time, running
    each benchmark in this process. Output of a request (stdout and stderr, file-descriptor
    level) goes back with its reply, as asv's forkserver returns a child's."""
    from asv_runner._aux import posix_redirect_output, update_sys_path
    from asv_runner.discovery import disc_benchmarks
    from asv_runner.run import _run

    update_sys_path(benchmark_dir)
    home = os.getcwd()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound and listening under another name first: the client waits for `socket_name` to
    # appear, and a connection between bind() and listen() would be refused.
    server.bind(socket_name + ".new")
    server.listen(1)
    os.rename(socket_name + ".new", socket_name)
    while True:
        conn, _ = server.accept()
        with conn:
            request = _receive(conn)
            action = request.get("action")
            if action == "quit":
                _send(conn, {"out": "", "errcode": 0})
                return
            fd, out_file = tempfile.mkstemp(prefix="asv-persistent-out-")
            os.close(fd)
            errcode = 1
            try:
                with posix_redirect_output(out_file, permanent=False):
                    try:
                        if action == "preimport":
                            for _ in disc_benchmarks(benchmark_dir, ignore_import_errors=True):
                                pass
                        elif action == "run":
                            os.chdir(request["cwd"])
                            _run((benchmark_dir, request["benchmark_id"], request["params_str"],
                                  request["profile_path"], request["result_file"]))
                        else:
                            raise RuntimeError(f"unknown request {action!r}")
                        errcode = 0
                    except KeyboardInterrupt:
                        raise
                    except BaseException:  # a benchmark's SystemExit must not end the worker
                        traceback.print_exc()
                    finally:
                        os.chdir(home)
                        sys.stdout.flush()
                        sys.stderr.flush()
                with open(out_file, errors="replace") as f:
                    out = f.read()
            finally:
                os.unlink(out_file)
            _send(conn, {"out": out, "errcode": errcode})


# --- the client: an asv Spawner, in the Python that runs asv -----------------------------------

def _spawner_class():
    from asv import util
    from asv.runner import Spawner

    class PersistentWorker(Spawner):
        """asv's Spawner interface over one long-lived worker process (module docstring)."""

        def __init__(self, env, benchmark_dir):
            super().__init__(env, benchmark_dir)
            self.proc = None
            self._start()

        def _start(self) -> None:
            self.tmp_dir = tempfile.mkdtemp(prefix="asv-persistent-")
            self.socket_name = os.path.join(self.tmp_dir, "socket")
            env_vars = dict(os.environ)
            env_vars.update(self.env.env_vars)
            self.proc = self.env.run([os.path.abspath(__file__), WORKER_FLAG, self.benchmark_dir,
                                      self.socket_name],
                                     return_popen=True, redirect_stderr=True, env=env_vars)
            self.output: list[bytes] = []
            self.reader = threading.Thread(target=self._read_output, daemon=True)
            self.reader.start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while not os.path.exists(self.socket_name):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self._stop(signal.SIGKILL)
                    raise util.UserError("asv_persistent: the benchmark worker did not start:\n"
                                         + self._worker_output())
                time.sleep(0.05)

        def _read_output(self) -> None:
            for line in iter(self.proc.stdout.readline, b""):
                self.output.append(line)

        def _worker_output(self) -> str:
            return b"".join(self.output).decode("utf-8", "replace")

        def _stop(self, signo) -> int | None:
            if self.proc is not None and self.proc.poll() is None:
                util._killpg_safe(self.proc.pid, signo)
                try:
                    self.proc.wait(timeout=10)
                except Exception:
                    util._killpg_safe(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            self.reader.join(timeout=5)
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            return self.proc.returncode if self.proc is not None else None

        def _request(self, payload, timeout):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(timeout)
            try:
                conn.connect(self.socket_name)
                _send(conn, payload)
                return _receive(conn)
            finally:
                conn.close()

        def _restart_after(self, why: str, errcode: int) -> tuple[str, int]:
            """Kill (if needed) and replace the worker; the failed request's output and code."""
            code = self._stop(signal.SIGKILL)
            out = self._worker_output()
            self._start()
            return f"{out}\nasv_persistent: {why} (worker exit status {code}); worker restarted", errcode

        def run(self, name, params_str, profile_path, result_file_name, timeout, cwd):
            payload = {"action": "run", "benchmark_id": name, "params_str": params_str,
                       "profile_path": profile_path, "result_file": result_file_name, "cwd": cwd}
            limit = None if timeout is None else timeout + TIMEOUT_GRACE_S
            try:
                reply = self._request(payload, limit)
            except socket.timeout:
                return self._restart_after(f"{name} ran past its timeout", util.TIMEOUT_RETCODE)
            except (ConnectionError, OSError, ValueError) as exc:
                return self._restart_after(f"{name}: the worker died ({exc})", 1)
            return reply["out"], reply["errcode"]

        def preimport(self):
            try:
                reply = self._request({"action": "preimport"}, START_TIMEOUT_S)
            except (ConnectionError, OSError, ValueError) as exc:
                out, _ = self._restart_after(f"importing the suite killed the worker ({exc})", 1)
                return False, out
            return reply["errcode"] == 0, reply["out"]

        def close(self):
            try:
                self._request({"action": "quit"}, 10)
                self.proc.wait(timeout=10)
            except Exception:
                pass
            self._stop(signal.SIGKILL)

    return PersistentWorker


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        # Run as a script, this file's folder would come first on the path and its modules
        # (site, compare, ...) would shadow the ones asv and the suite import.
        sys.path.pop(0)
    if argv[:1] == [WORKER_FLAG]:
        if len(argv) != 3:
            print(f"usage: {WORKER_FLAG} BENCHMARK_DIR SOCKET", file=sys.stderr)
            return 2
        serve(argv[1], argv[2])
        return 0
    try:
        import asv.runner
        from asv.main import main as asv_main
    except ImportError as exc:
        print(f"asv_persistent: asv is not importable by {sys.executable} ({exc})", file=sys.stderr)
        return 2
    worker = _spawner_class()

    def get_spawner(env, benchmark_dir, launch_method=None):
        del launch_method  # every launch is the persistent worker's (module docstring)
        return worker(env, benchmark_dir)

    asv.runner.get_spawner = get_spawner
    sys.argv = ["asv", *argv]
    try:
        asv_main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
