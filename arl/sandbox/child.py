"""The job's own process: forked by the zygote, it runs the policy's code (stdlib only).

This text is the first part of the sandbox worker's program (see runner.py, whose text
follows it): never a file inside the sandbox. The child reads its own request (and no other
job's: see runner.Zygote) from a pipe, drops to the job's uid, sets the
rlimits, imports solution.py from its scratch directory and calls the function on each
case's args (parsed afresh from JSON, so no case sees another's objects). It reports
events as JSON lines on fd 3 (a unix socket: the runner keeps only what this process
wrote, by the sender's pid on each chunk): imported (or import_error), then per case start
and one of ok (the RESULT as strictly plain values), raise (the exception's type) or unser (a result
that is not plain JSON data, e.g. an object whose __eq__ is always true). It never holds
an expected value, and nothing it sends is trusted: the runner checks the stream with
parse_stream (below), in its own process.
"""

import json
import math
import os
import resource
import sys

MAX_RECORD = 1 << 20  # bytes of one case's serialized result


class Unserializable(Exception):
    pass


def plain(v, depth=0):
    """The value as JSON-ready builtins; anything else (subclasses included) is refused."""
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if depth > 100:
        raise Unserializable("nested too deep")
    if t is list or t is tuple:
        return [plain(x, depth + 1) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise Unserializable("dict with a non-str key")
            out[k] = plain(x, depth + 1)
        return out
    raise Unserializable(t.__name__[:60])


def child_main(req, cfg, scratch, out_w, res_w, devnull):
    """The job's process: never returns. Runs policy code, so it trusts nothing after import."""
    code = 70
    try:
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(res_w, 3)
        os.closerange(4, 1 << 16)
        if cfg["mode"] == "none":
            os.setsid()
        lim = req["limits"]
        cpu = max(1, int(math.ceil(lim["cpu_seconds"])))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_size_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["processes"],) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        try:  # in a machine-wide shortage of memory the kernel kills job processes first
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        if cfg["uid"] >= 0:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        os.chdir(scratch)  # the environment and sys.stdout were set up once by the runner
        sys.path.insert(0, scratch)
        code = run_cases(req, os.write, json.dumps)
    except BaseException:
        pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def error_record(e):
    name = type(e).__name__[:60]
    try:
        msg = str(e)[:200]
    except BaseException:
        msg = ""
    return name, msg


def run_cases(req, write, dumps):
    """Import solution.py and call the function on each case, one JSON line per event on fd 3."""

    def emit(rec):
        write(3, (dumps(rec) + "\n").encode())

    try:  # as `import solution` would, without the import system's cost in a fresh fork
        module = type(sys)("solution")
        module.__file__ = os.path.join(os.getcwd(), "solution.py")
        sys.modules["solution"] = module
        exec(compile(req["source"], module.__file__, "exec"), module.__dict__)
        fn = getattr(module, req["function"])
    except BaseException as e:
        name, msg = error_record(e)
        emit({"k": "import_error", "e": name, "m": msg})
        return 0
    emit({"k": "imported"})
    for i, args_json in enumerate(req["args"]):
        emit({"k": "start", "i": i})
        try:
            value = fn(*json.loads(args_json))
        except BaseException as e:
            name, msg = error_record(e)
            emit({"k": "raise", "i": i, "e": name, "m": msg})
            continue
        try:
            line = dumps({"k": "ok", "i": i, "v": plain(value)})
            if len(line) > MAX_RECORD:
                raise Unserializable("result too large")
        except Unserializable as e:
            emit({"k": "unser", "i": i, "t": str(e)})
            continue
        except (ValueError, RecursionError, MemoryError) as e:
            emit({"k": "unser", "i": i, "t": type(e).__name__})
            continue
        write(3, (line + "\n").encode())
    return 0


def shallow(v, depth=0):
    """A value nested at most as deep as child.plain allows (the host need not recurse far)."""
    if depth > 102:
        return False
    if isinstance(v, list):
        return all(shallow(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(shallow(x, depth + 1) for x in v.values())
    return True


def parse_stream(data, n):
    """Check the child's records: (per-case records, imported?, case in progress, error)."""
    records, imported, current = [], False, None
    lines = data.split(b"\n")[:-1]  # a cut last line is dropped
    for k, line in enumerate(lines):
        try:
            rec = json.loads(line)
            kind = rec["k"]
            if not shallow(rec.get("v")):
                raise ValueError("nested too deep")
        except Exception:
            return records, imported, current, "bad result stream"
        if not imported:
            if kind == "import_error" and k == len(lines) - 1:
                e, m = str(rec.get("e", ""))[:60], str(rec.get("m", ""))[:200]
                return [{"s": "import", "e": e, "m": m}] * n, False, None, None
            if kind != "imported":
                return records, imported, current, "bad result stream"
            imported = True
        elif kind == "start" and current is None and rec.get("i") == len(records) < n:
            current = len(records)
        elif kind in ("ok", "raise", "unser") and current is not None and rec.get("i") == current:
            if kind == "ok":
                records.append({"s": "ok", "v": rec.get("v")})
            elif kind == "raise":
                e, m = str(rec.get("e", ""))[:60], str(rec.get("m", ""))[:200]
                records.append({"s": "raise", "e": e, "m": m})
            else:
                records.append({"s": "unser", "t": str(rec.get("t", ""))[:60]})
            current = None
        else:
            return records, imported, current, "bad result stream"
    return records, imported, current, None
