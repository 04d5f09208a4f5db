"""Worker loop of a case pool: ``python -m tests.differential.worker DIR [--mpi]``.

Started once per rank count (under ``tools/mpirun.sh -n N`` with ``--mpi``, or as one
plain process for the serial runs). The protocol is files in *DIR*, so it survives any
output a rank prints and needs no MPI call between cases:

* the controller writes ``request-000000.json``, ``request-000001.json``, ... (written to
  a temporary name, then renamed, so a request is never seen half-written);
* every rank polls for the next request by number (sleeping between looks, so idle
  ranks leave the two cores to the controller), runs it with ``comm=MPI.COMM_WORLD``
  (or serially), and writes ``outcome-000000-r<rank>.json`` the same way;
* the request ``{"function": "exit"}`` ends the loop.

A rank also writes ``pid-r<rank>`` at start, so the controller can end exactly the
processes it started when a case hangs the pool.
"""

import json
import os
import sys
import time
import traceback


def write_json(path, document):
    """Write *document* at *path* atomically (temporary name, then rename)."""
    temporary = f"{path}.{os.getpid()}.partial"
    with open(temporary, "w") as handle:
        json.dump(document, handle, default=_json_default)
    os.replace(temporary, path)


def _json_default(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def controller_alive():
    """False once the controller that started the pool is gone (then the worker ends)."""
    from h5mdtool.parallel.outputs import process_alive

    pid = int(os.environ.get("DIFF_CONTROLLER_PID", "0") or 0)
    return pid <= 0 or process_alive(pid)


def wait_for(path, poll=0.002, longest=0.05):
    """Block until *path* exists, sleeping between looks (up to *longest* seconds).

    Exits the process when the controller is gone, so an interrupted run leaves no worker.
    """
    checked = time.monotonic()
    while not os.path.exists(path):
        time.sleep(poll)
        poll = min(longest, poll * 1.5)
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if not controller_alive():
                os._exit(3)


def execute(request, comm):
    """Run one API call of h5mdtool; return its outcome as a JSON-ready dict."""
    import h5mdtool
    from h5mdtool.parallel.errors import H5mdToolError

    function = getattr(h5mdtool, request["function"])
    started = time.perf_counter()
    try:
        result = function(*request.get("args", []), comm=comm, **request.get("kwargs", {}))
    except H5mdToolError as error:
        return {"status": "error", "type": type(error).__name__, "message": str(error),
                "exit_code": getattr(error, "exit_code", 1), "seconds": time.perf_counter() - started}
    except BaseException as error:  # noqa: BLE001 - anything else is what the harness looks for
        return {"status": "crash", "type": type(error).__name__, "message": str(error),
                "traceback": traceback.format_exc(), "seconds": time.perf_counter() - started}
    return {"status": "ok", "result": _plain(result), "seconds": time.perf_counter() - started}


def _plain(result):
    """JSON-ready form of what an API function returned."""
    if result is None:
        return None
    if hasattr(result, "as_dict"):  # ValidationReport
        document = result.as_dict()
        document["exit_code"] = result.exit_code
        return document
    if isinstance(result, dict):
        return {key: _plain_value(value) for key, value in result.items()}
    return _plain_value(result)


def _plain_value(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_value(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def main(argv):
    directory = argv[0]
    comm = None
    rank = 0
    if "--mpi" in argv:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.rank
    with open(os.path.join(directory, f"pid-r{rank}"), "w") as handle:
        handle.write(str(os.getpid()))
    # Import what every case needs before the first one, so it is not timed against it.
    import h5mdtool  # noqa: F401
    import MDAnalysis  # noqa: F401

    number = 0
    while True:
        request_path = os.path.join(directory, f"request-{number:06d}.json")
        wait_for(request_path)
        with open(request_path) as handle:
            request = json.load(handle)
        if request.get("function") == "exit":
            break
        os.environ.update(request.get("env", {}))
        outcome = execute(request, comm)
        for name in request.get("env", {}):
            os.environ.pop(name, None)
        write_json(os.path.join(directory, f"outcome-{number:06d}-r{rank}.json"), outcome)
        number += 1


if __name__ == "__main__":
    main(sys.argv[1:])
