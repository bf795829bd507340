"""Crash trials: the host is killed mid-run, and no acknowledged row may be lost; with
exactly-once, no row may be written twice.

One trial:
1. `floe run` starts with an `http_server` input and the `iceberg` output (REST fixture +
   SeaweedFS, or the embedded catalog in a local folder). A client posts the trial's
   records as multipart batches from four threads. Benthos answers a request only once
   the output acknowledged its batch, so a 200 means "acknowledged".
2. The host dies. At a named point inside libfloe: a failpoints build of the binary
   SIGKILLs itself on the n-th pass through that point (`FLOE_FAILPOINT_CRASH`, see
   src/failpoint.rs): `shred` (a call shredding its messages), `upload` (a commit's files
   uploaded, before the catalog call), `commit` (the catalog applied the commit, before
   floe read its answer further), `ack` (a call committed, before it returns to the host).
   Or at a random moment: the harness SIGKILLs the shipped binary (`random`).
3. A new host starts on the same table and the client sends what was not acknowledged.
   With exactly-once it also replays half of the acknowledged batches (chosen at random),
   as a consumer that restarts from an older committed position does; the other half are
   not resent, so a lost acknowledged row cannot hide behind its replay.
4. pyiceberg and DuckDB read the table back right after the crash (every acknowledged
   record must be there; a replay cannot mask a loss yet) and at the end. Checks: every
   record is there (each was acknowledged by the end), and with exactly-once none is
   there twice at either reading.

`python3 e2e/crash_trials.py --trials 50` runs the matrix (every point, both catalogs,
both modes) and writes a results table; e2e/test_crash_trials.py runs a few trials of
each point in `make test`.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
FLOE_FAILPOINTS = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe-failpoints")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from read_table import duckdb_connect, s3_list  # noqa: E402
from services import die_with_parent, free_port  # noqa: E402

NAMESPACE = "crash_trials"
# Failpoint names in src/failpoint.rs, by the phase they stand for.
POINTS = {
    "shred": "writer.shredding",
    "upload": "commit.uploaded",
    "commit": "commit.applied",
    "ack": "writer.before-return",
}
RECORDS = 4000
BATCH = 100
CLIENTS = 4


# -- the host --------------------------------------------------------------------------

def output_block(services, catalog, table, warehouse, exactly_once):
    if catalog == "rest":
        block = textwrap.dedent(f"""\
            iceberg:
              catalog:
                url: {services['rest_url']}
              storage:
                aws_s3:
                  bucket: {services['bucket']}
                  region: {services['region']}
                  endpoint: {services['s3_endpoint']}
                  force_path_style_urls: true
                  credentials:
                    id: {services['access_key']}
                    secret: {services['secret_key']}
            """)
    else:
        block = textwrap.dedent(f"""\
            iceberg:
              catalog:
                warehouse: {warehouse}
            """)
    block += textwrap.indent(textwrap.dedent(f"""\
        namespace: {NAMESPACE}
        table: {table}
        schema_evolution:
          enabled: true
        max_in_flight: 4
        """), "  ")
    if exactly_once:
        block += textwrap.indent(textwrap.dedent(f"""\
            commit:
              exactly_once:
                writer_id: trials-{table}
                source: 'trial/partition-${{! json("seq") % 2 }}'
                offset: '${{! (json("seq") / 2).floor() }}'
            """), "  ")
    return block


def host_config(port, output, timeout="120s"):
    """A host whose http_server input answers a post once the output acknowledged it
    (or after `timeout`)."""
    return ("http:\n  enabled: false\n"
            "logger:\n  level: warn\n"
            "input:\n  http_server:\n"
            f"    address: 127.0.0.1:{port}\n    path: /post\n    timeout: {timeout}\n"
            "output:\n" + textwrap.indent(output, "  "))


class Host:
    """`floe run` on a config, output to files, killed by PID."""

    def __init__(self, workdir, name, binary, config, env=None):
        self.name = name
        path = os.path.join(workdir, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(config)
        self.log = os.path.join(workdir, f"{name}.log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([binary, "run", path], cwd=workdir,
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, **(env or {})},
                                         preexec_fn=die_with_parent)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)

    def output(self):
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()


# -- the client ------------------------------------------------------------------------

def record(seq):
    return json.dumps({"seq": seq, "user_id": seq % 97, "info": f"record-{seq}-abcdefghij"})


def multipart(seqs):
    boundary = uuid.uuid4().hex
    parts = []
    for s in seqs:
        parts.append(f"--{boundary}\r\nContent-Type: application/json\r\n\r\n{record(s)}\r\n")
    body = ("".join(parts) + f"--{boundary}--\r\n").encode()
    return body, f"multipart/mixed; boundary={boundary}"


def post(port, seqs, timeout):
    """The host's HTTP status for the batch (200: acknowledged), or None when the
    connection failed (the host is gone)."""
    body, content_type = multipart(seqs)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/post", data=body, method="POST",
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, http.client.HTTPException, OSError):
        return None


def wait_listening(port, host, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if host.proc.poll() is not None:
            raise RuntimeError(f"{host.name} exited early:\n{host.output()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except urllib.error.HTTPError:
            return  # something answers
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.05)
            continue
        return
    raise RuntimeError(f"{host.name} never listened on {port}")


def send(port, batches, stop, on_ack=None, timeout=150, statuses=None):
    """Posts `batches` (lists of seqs) from CLIENTS threads until all are sent or `stop`
    is set; a batch whose post fails stops its thread (the host is gone). `on_ack(n)` is
    called with the count after each acknowledgement. Returns the indices of the
    acknowledged batches."""
    acked = set()
    lock = threading.Lock()
    queue = list(range(len(batches)))

    def worker():
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            status = post(port, batches[i], timeout)
            if status == 200:
                with lock:
                    acked.add(i)
                    n = len(acked)
                if on_ack:
                    on_ack(n)
                continue
            if status is not None and statuses is not None:
                statuses.append(status)  # an answer, but not an acknowledgement
            stop.set()
            return

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        for f in [pool.submit(worker) for _ in range(CLIENTS)]:
            f.result()
    return acked


# -- read-back -------------------------------------------------------------------------

def load_table(services, catalog, table, warehouse):
    from pyiceberg.catalog import load_catalog
    if catalog == "rest":
        cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
            "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
            "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
            "s3.path-style-access": "true"})
    else:
        cat = load_catalog("floe", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                           warehouse=f"file://{warehouse}")
    return cat.load_table(f"{NAMESPACE}.{table}")


def read_seqs(services, catalog, table, warehouse):
    """Every seq in the table by pyiceberg, and (count, distinct) by DuckDB."""
    t = load_table(services, catalog, table, warehouse)
    seqs = t.scan(selected_fields=("seq",)).to_arrow()["seq"].to_pylist()
    s3 = None
    if catalog == "rest":
        s3 = {"key": services["access_key"], "secret": services["secret_key"],
              "endpoint": services["s3_endpoint"], "region": services["region"]}
    con = duckdb_connect(s3)
    duck = con.execute(f"SELECT count(*), count(DISTINCT seq) FROM "
                       f"iceberg_scan('{t.metadata_location}')").fetchone()
    return seqs, tuple(duck)


def read_seqs_or_none(services, catalog, table, warehouse):
    """read_seqs, or an empty table when the kill came before the table existed."""
    from pyiceberg.exceptions import NoSuchTableError
    try:
        return read_seqs(services, catalog, table, warehouse)
    except NoSuchTableError:
        return [], (0, 0)


def orphan_files(services, catalog, table, warehouse):
    """Data files in the table's folder that no snapshot references: uploads of commits
    the crash cut short (floe cannot know of them after a SIGKILL). The trials only
    append and expire nothing, so the current snapshot references every committed file."""
    t = load_table(services, catalog, table, warehouse)
    referenced = {task.file.file_path.split("://", 1)[-1] for task in t.scan().plan_files()}
    data = t.metadata.location.rstrip("/") + "/data"
    if catalog == "rest":
        stored = s3_list({"prefix": data, "s3": {
            "key": services["access_key"], "secret": services["secret_key"],
            "endpoint": services["s3_endpoint"], "region": services["region"]}})
    else:
        root = data.split("://", 1)[-1]
        stored = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    return sum(1 for path in stored
               if path.endswith(".parquet") and path.split("://", 1)[-1] not in referenced)


# -- one trial -------------------------------------------------------------------------

def first_host_plan(point, rng, batches):
    """(binary, env, on_ack factory) for phase 1. Named points die on the n-th pass,
    counted from after the first acknowledgements (the first `CLIENTS` calls all pass
    `shred` before any is acknowledged); random kills come a random time after a random
    acknowledgement, up to one and a half commit cycles (the mean gap between bursts of
    acknowledgements so far), so they land in any phase of the calls in flight."""
    if point != "random":
        # Calls pass `shred` and `ack` about CLIENTS at a time, commits one at a time.
        first = CLIENTS + 1 if point in ("shred", "ack") else 2
        nth = rng.randint(first, first + 7)
        return FLOE_FAILPOINTS, {"FLOE_FAILPOINT_CRASH": f"{POINTS[point]}:{nth}"}, None
    kill_after_acks = rng.randint(CLIENTS, len(batches) - 3 * CLIENTS)
    fraction = rng.uniform(0, 1.5)

    def on_ack_factory(host, killers, started):
        def on_ack(n):
            if n == kill_after_acks:
                cycle = (time.time() - started) / max(1, n / CLIENTS)
                killers.append(threading.Timer(fraction * cycle, host.kill))
                killers[-1].start()
        return on_ack
    return FLOE, {}, on_ack_factory


def run_host(workdir, name, binary, output, env, batches, on_ack_factory=None):
    """Starts a host (a new port on each attempt: another socket may take a free port
    before the host binds it), posts `batches` until done or the host is gone, and kills
    it. Returns (acknowledged batch indices, exit code, log, seconds from start to the
    last acknowledgement, HTTP statuses other than 200)."""
    for attempt in range(3):
        port = free_port()
        host = Host(workdir, f"{name}-{attempt}", binary, host_config(port, output), env)
        try:
            try:
                wait_listening(port, host)
            except RuntimeError:
                if "address already in use" in host.output() and attempt < 2:
                    continue
                raise
            started = time.time()
            killers = []
            on_ack = on_ack_factory(host, killers, started) if on_ack_factory else None
            statuses = []
            acked = send(port, batches, threading.Event(), on_ack, statuses=statuses)
            elapsed = time.time() - started
            for k in killers:
                k.join()
            if on_ack_factory is None and env:
                try:
                    host.proc.wait(timeout=60)  # a failpoint host dies by itself
                except subprocess.TimeoutExpired:
                    pass
        finally:
            host.kill()
        return acked, host.proc.returncode, host.output(), elapsed, statuses
    raise RuntimeError("no free port")


def regroup(seqs, size, shift):
    """`seqs` in order, cut into batches of `size` after a first one of `shift`: replayed
    batches mix committed and new offsets, unlike the batches first sent."""
    seqs = sorted(seqs)
    cuts = [0] + list(range(shift, len(seqs), size)) + [len(seqs)]
    return [seqs[a:b] for a, b in zip(cuts, cuts[1:]) if a < b]


def vacuous(outcome):
    """Why a trial could not show what it is for, or None: the kill came before any
    acknowledgement or after the last, or (at `commit` and `ack`) left no row committed
    but unacknowledged. Timing decides these, so such a trial is drawn again."""
    if outcome["acked_before_crash"] == 0:
        return "nothing was acknowledged before the kill"
    if outcome["acked_before_crash"] >= RECORDS:
        return "the host died only after every batch was acknowledged"
    if outcome["point"] in ("commit", "ack") and not outcome["committed_unacked"]:
        return "no row was committed but unacknowledged at the kill"
    return None


def run_trial(services, workdir, catalog, point, exactly_once, rng, trial_id, draws=3):
    """Runs one trial, drawn again (new table, new kill) up to `draws` times while it is
    vacuous; returns its outcome as a dict, with how many draws it took."""
    for draw in range(1, draws + 1):
        outcome = run_one(services, workdir, catalog, point, exactly_once, rng,
                          f"{trial_id}d{draw}")
        outcome["draws"] = draw
        if not vacuous(outcome):
            break
    return outcome


def run_one(services, workdir, catalog, point, exactly_once, rng, trial_id):
    """One draw of a trial; its outcome as a dict."""
    table = f"t{trial_id}_{point}_{catalog}_{'eo' if exactly_once else 'alo'}"
    warehouse = os.path.join(workdir, f"wh-{table}")
    os.makedirs(warehouse, exist_ok=True)
    output = output_block(services, catalog, table, warehouse, exactly_once)
    seqs = list(range(RECORDS))
    batches = [seqs[i:i + BATCH] for i in range(0, RECORDS, BATCH)]

    # Phase 1: run until the host dies.
    binary, env, on_ack_factory = first_host_plan(point, rng, batches)
    acked_first, code, log_first, _, statuses_first = run_host(
        workdir, f"{table}-1", binary, output, env, batches, on_ack_factory)
    crashed = code == -signal.SIGKILL
    at_point = point == "random" or f"failpoint {POINTS[point]}: killing the process" in log_first
    acked_seqs = {s for i in acked_first for s in batches[i]}

    # Right after the crash, before any replay could mask a loss: every acknowledged
    # row is there, once, and both readers agree.
    present0, duck0 = read_seqs_or_none(services, catalog, table, warehouse)
    lost_at_crash = len(acked_seqs - set(present0))
    duplicated_at_crash = len(present0) - len(set(present0))
    readers_disagree = duck0 != (len(present0), len(set(present0)))
    committed_unacked = set(present0) - acked_seqs

    # Phase 2: a new host; resend what was not acknowledged, regrouped. With
    # exactly-once, also replay at least one and about half of the acknowledged batches,
    # as a consumer restarting from an older position does.
    resend = set(seqs) - acked_seqs
    replayed_acked = []
    if exactly_once and acked_first:
        replayed_acked = [i for i in sorted(acked_first) if rng.random() < 0.5]
        replayed_acked = replayed_acked or [rng.choice(sorted(acked_first))]
        resend |= {s for i in replayed_acked for s in batches[i]}
    deduplicated = len(resend & set(present0))
    replay = regroup(resend, 70, 35)
    acked_second, _, log_second, recovery_s, statuses_second = run_host(
        workdir, f"{table}-2", FLOE, output, {}, replay)
    all_acked = len(acked_second) == len(replay)

    present, (duck_rows, duck_distinct) = read_seqs(services, catalog, table, warehouse)
    orphans = orphan_files(services, catalog, table, warehouse)
    counts = {}
    for s in present:
        counts[s] = counts.get(s, 0) + 1
    return {
        "catalog": catalog, "point": point,
        "mode": "exactly-once" if exactly_once else "at-least-once",
        "table": table, "crashed": crashed, "at_point": at_point,
        "acked_before_crash": len(acked_seqs),
        "committed_unacked": len(committed_unacked),
        "replayed_acked": len(replayed_acked) * BATCH,
        "deduplicated": deduplicated,
        "all_acked_after": all_acked,
        "statuses": sorted(set(statuses_first + statuses_second)),
        "lost_acked": sum(1 for s in acked_seqs if s not in counts) + lost_at_crash,
        "duplicated_at_crash": duplicated_at_crash,
        "readers_disagree": readers_disagree or (duck_rows, duck_distinct) != (len(present), len(counts)),
        "missing": sum(1 for s in seqs if s not in counts),
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
        "rows": len(present), "duckdb_rows": duck_rows, "duckdb_distinct": duck_distinct,
        "orphan_files": orphans,
        "recovery_s": round(recovery_s, 2),
        "log_tail": "" if all_acked else log_second[-2000:],
    }


def check(outcome):
    """Problems with one trial's outcome ([] when it passed). A trial that could not
    show what it is for (nothing acknowledged before the kill; at `commit` and `ack`, no
    row committed but not acknowledged; with exactly-once, nothing replayed that was
    already committed) fails too, rather than pass on nothing."""
    if "error" in outcome:
        return [outcome["error"]]
    problems = []
    if not outcome["crashed"]:
        problems.append("the host was not killed")
    if not outcome["at_point"]:
        problems.append("the host did not die at its failpoint")
    if vacuous(outcome):
        problems.append(f"{vacuous(outcome)} ({outcome.get('draws', 1)} draws)")
    if outcome["mode"] == "exactly-once" and not outcome["deduplicated"]:
        problems.append("the replay re-sent nothing already committed")
    if outcome["point"] == "upload" and not outcome["orphan_files"]:
        problems.append("a kill after the upload left no orphan data file (is the count blind?)")
    unexpected = [s for s in outcome["statuses"] if s != 200]
    if unexpected:
        problems.append(f"HTTP statuses other than 200: {unexpected}")
    if not outcome["all_acked_after"]:
        problems.append("the second host did not acknowledge every batch:\n" + outcome["log_tail"])
    if outcome["lost_acked"] or outcome["missing"]:
        problems.append(f"{outcome['lost_acked']} acknowledged and {outcome['missing']} in all lost")
    if outcome["mode"] == "exactly-once" and (outcome["duplicated"] or outcome["duplicated_at_crash"]):
        problems.append(f"{outcome['duplicated']} rows duplicated "
                        f"({outcome['duplicated_at_crash']} right after the crash)")
    if outcome["readers_disagree"]:
        problems.append(f"DuckDB reads {outcome['duckdb_rows']} rows ({outcome['duckdb_distinct']} "
                        f"distinct), pyiceberg {outcome['rows']}")
    return problems


# -- the matrix ------------------------------------------------------------------------

def summarize(outcomes):
    """Markdown table: one row per (point, catalog, mode)."""
    order = list(POINTS) + ["random"]
    keys = sorted({(o["point"], o["catalog"], o["mode"]) for o in outcomes},
                  key=lambda k: (order.index(k[0]), k[1], k[2]))
    lines = ["| kill point | catalog | mode | trials | rows acked before the kill (median) "
             "| kills with rows committed, not acked | replayed rows already committed "
             "| rows lost | rows duplicated | orphan data files | trials failed "
             "| restart to all acknowledged, s (median) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def median(values):
        values = sorted(values)
        return values[len(values) // 2] if values else "–"

    for k in keys:
        group = [o for o in outcomes if (o["point"], o["catalog"], o["mode"]) == k]
        ran = [o for o in group if "error" not in o]
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2]} | {len(group)} "
            f"| {median(o['acked_before_crash'] for o in ran)} "
            f"| {sum(1 for o in ran if o['committed_unacked'])} "
            f"| {sum(o['deduplicated'] for o in ran)} "
            f"| {sum(max(o['missing'], o['lost_acked']) for o in ran)} "
            f"| {sum(o['duplicated'] for o in ran)} "
            f"| {sum(o['orphan_files'] for o in ran)} "
            f"| {sum(1 for o in group if check(o))} "
            f"| {median(o['recovery_s'] for o in ran)} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=50, help="trials per point, catalog and mode")
    ap.add_argument("--catalogs", default="rest,sql")
    ap.add_argument("--points", default=",".join(list(POINTS) + ["random"]))
    ap.add_argument("--modes", default="exactly-once,at-least-once")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", default=os.path.join(ROOT, "reliability", "crash-trials.md"))
    args = ap.parse_args()
    from services import Services
    rng = random.Random(args.seed)
    outcomes = []
    started = time.time()
    with Services() as s, tempfile.TemporaryDirectory(prefix="crash-trials-") as workdir:
        services = s.info
        for catalog in args.catalogs.split(","):
            for point in args.points.split(","):
                for mode in args.modes.split(","):
                    for t in range(args.trials):
                        try:
                            o = run_trial(services, workdir, catalog, point,
                                          mode == "exactly-once", rng, f"{len(outcomes)}")
                        except Exception:
                            o = {"catalog": catalog, "point": point, "mode": mode,
                                 "error": traceback.format_exc()}
                        outcomes.append(o)
                        problems = check(o)
                        print(f"{catalog:4} {point:7} {mode:13} #{t:<3} "
                              f"acked {o.get('acked_before_crash', '-')} "
                              f"committed-unacked {o.get('committed_unacked', '-')} "
                              f"lost {o.get('missing', '-')} dup {o.get('duplicated', '-')} "
                              + ("ok" if not problems else "FAILED: " + "; ".join(problems)),
                              flush=True)
    table = summarize(outcomes)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"# Crash trials\n\n`python3 e2e/crash_trials.py --trials {args.trials} "
                f"--seed {args.seed}` on {time.strftime('%Y-%m-%d')}, "
                f"{len(outcomes)} trials in {time.time() - started:.0f} s. "
                f"{RECORDS} records per trial in batches of {BATCH}, {CLIENTS} client "
                "threads, `max_in_flight` 4. Rows lost: acknowledged records missing right "
                "after the kill, or any record missing after the replay (every record was "
                "acknowledged by then). Rows duplicated: extra copies at the end (allowed "
                "at-least-once). Orphan data files: Parquet files in the table's folder no "
                "snapshot references (uploads of commits the kill cut short). The restart "
                "column is the second host's start to its last acknowledgement.\n\n" + table + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(outcomes, f)
    print(table)
    failed = [o for o in outcomes if check(o)]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
