"""The fault matrix: a running pipeline meets a storage or catalog fault, and when the
fault is over no acknowledged row may be lost; with exactly-once, none may be written
twice; and the pipeline must resume by itself.

One trial:
1. `floe run` hosts (one, or four on one table) start with an `http_server` input and
   the `iceberg` output, whose S3 endpoint and catalog URL are fault proxies
   (e2e/faultproxy.py) in front of SeaweedFS and Apache's REST fixture. Four client
   threads post 100-record batches; Benthos answers a post only once the output
   acknowledged it, so a 200 means "acknowledged". A post that fails is sent again, the
   same batch to the same host, as a producer retrying would.
   Each host's input is behind a proxy too (to lose acknowledgements).
2. After the first acknowledgements the fault starts: added latency, a bandwidth cap,
   connections reset mid-upload, 5xx bursts, 409 storms, commit answers lost after the
   catalog applied them, redirects, a catalog or store that hangs, or SeaweedFS / the
   REST fixture SIGKILLed and restarted on the same ports and data. A fault that never
   hit a request makes the trial fail (it would prove nothing).
3. Once it is over, the clients go on until every batch that failed was acknowledged
   and ten more were; then the hosts stop and pyiceberg and DuckDB read the table back
   directly from the services.

Per trial: rows lost (acknowledged but absent), rows duplicated (and, in either mode,
copies of rows whose post never failed, which no producer sent twice), orphan data files
(in the table's folder, referenced by no snapshot), recovery time (from the fault's end
until every batch posted before it was acknowledged), the longest gap between
acknowledgements, and how many posts failed (an error storm shows there). A fault must
reach floe: every fault counts the requests it hit (the crashes, requests the proxy could
not forward; four writers, the catalog's own 409s), and a trial where it hit fewer than
it needs fails, as does one where a batch was never acknowledged.

`python3 e2e/fault_matrix.py --trials 2` runs every fault in both modes and writes
reliability/fault-matrix.md; e2e/test_fault_matrix.py runs one trial of a few faults in
`make test`.
"""
import argparse
import contextlib
import json
import os
import random
import re
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
from dataclasses import dataclass
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from crash_trials import (FLOE, Host, host_config, load_table, orphan_files,  # noqa: E402
                          wait_listening)
from faultproxy import FaultProxy, iceberg_error  # noqa: E402
from read_table import duckdb_connect  # noqa: E402
from services import free_port  # noqa: E402

NAMESPACE = "crash_trials"  # crash_trials' read-back helpers look tables up here
BATCH = 100
CLIENTS = 4
WARMUP_ACKS = 6        # batches acknowledged before the fault starts
AFTER_ACKS = 10        # batches acknowledged after it ends, besides every retried one
TRIAL_DEADLINE = 300   # seconds; a trial still not done has not recovered
POST_TIMEOUT = 330     # a post waits this long for its answer (the input waits 300 s)


# -- the pipeline ----------------------------------------------------------------------

def output_block(services, s3_endpoint, catalog_url, table, writer_id, exactly_once):
    block = textwrap.dedent(f"""\
        iceberg:
          catalog:
            url: {catalog_url}
          storage:
            aws_s3:
              bucket: {services['bucket']}
              region: {services['region']}
              endpoint: {s3_endpoint}
              force_path_style_urls: true
              credentials:
                id: {services['access_key']}
                secret: {services['secret_key']}
          namespace: {NAMESPACE}
          table: {table}
          schema_evolution:
            enabled: true
          max_in_flight: 4
        """)
    if exactly_once:
        block += textwrap.indent(textwrap.dedent(f"""\
            commit:
              exactly_once:
                writer_id: {writer_id}
                source: '${{! json("src") }}'
                offset: '${{! json("off") }}'
            """), "  ")
    return block


def start_host(workdir, name, output):
    """A `floe run` host listening on a fresh port (another on a clash); (host, port)."""
    for attempt in range(3):
        port = free_port()
        host = Host(workdir, f"{name}-{attempt}", FLOE, host_config(port, output, "300s"))
        try:
            wait_listening(port, host)
            return host, port
        except RuntimeError:
            host.kill()
            if "address already in use" not in host.output() or attempt == 2:
                raise
    raise RuntimeError("no free port")


# -- the client ------------------------------------------------------------------------

class Client:
    """CLIENT threads posting new batches until stopped; a batch whose post fails is
    posted again (same records, same host) until acknowledged, also after the stop (only
    `finish`'s deadline abandons it). Batch k goes to host k % hosts, and its records
    carry that host's source and dense offsets there, so each host's exactly-once
    positions are its own."""

    def __init__(self, ports):
        self.ports = ports
        self.lock = threading.Lock()
        self.next_batch = 0
        self.first_posted = {}  # batch index → time of its first post
        self.acks = []          # (time, batch index)
        self.failures = []      # (time, HTTP status or None, batch index)
        self.in_flight = [0] * len(ports)  # posts waiting for an answer, per host
        self.failed_batches = set()
        self.acked_batches = set()
        self.stop = threading.Event()      # no new batches
        self.abandon = threading.Event()   # no more retries either
        self.threads = [threading.Thread(target=self._worker, daemon=True)
                        for _ in range(CLIENTS)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self, retry_for=120):
        """Stops posting new batches; batches still failing are retried for `retry_for`
        seconds, then abandoned (and reported by `unacked`)."""
        self.stop.set()
        deadline = time.monotonic() + retry_for
        for t in self.threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        self.abandon.set()
        for t in self.threads:
            t.join(timeout=POST_TIMEOUT + 10)

    def seqs(self, k):
        return range(k * BATCH, (k + 1) * BATCH)

    def _records(self, k):
        host = k % len(self.ports)
        local = k // len(self.ports)
        return [json.dumps({"seq": s, "src": f"h{host}", "off": local * BATCH + j,
                            "user_id": s % 97, "info": f"record-{s}-abcdefghij"})
                for j, s in enumerate(self.seqs(k))]

    def _post(self, k):
        boundary = uuid.uuid4().hex
        body = "".join(f"--{boundary}\r\nContent-Type: application/json\r\n\r\n{r}\r\n"
                       for r in self._records(k)) + f"--{boundary}--\r\n"
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.ports[k % len(self.ports)]}/post", data=body.encode(),
            method="POST", headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
        try:
            with urllib.request.urlopen(req, timeout=POST_TIMEOUT) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def _worker(self):
        while not self.stop.is_set():
            with self.lock:
                k = self.next_batch
                self.next_batch += 1
                self.first_posted[k] = time.monotonic()
            while True:
                with self.lock:
                    self.in_flight[k % len(self.ports)] += 1
                status = self._post(k)
                with self.lock:
                    self.in_flight[k % len(self.ports)] -= 1
                    if status == 200:
                        self.acks.append((time.monotonic(), k))
                        self.acked_batches.add(k)
                        break
                    self.failures.append((time.monotonic(), status, k))
                    self.failed_batches.add(k)
                if self.abandon.wait(0.5):
                    return

    def acked_after(self, t):
        with self.lock:
            return [k for (at, k) in self.acks if at > t]

    def recovery_after(self, t):
        """Seconds from `t` (a fault's end) until every batch first posted by then was
        acknowledged (0 if all were before `t`); None while one is not."""
        with self.lock:
            before = {k for k, at in self.first_posted.items() if at <= t}
            if before - self.acked_batches:
                return None
            last = max((at for at, k in self.acks if k in before), default=t)
        return max(0.0, last - t)

    def unacked_failed(self):
        with self.lock:
            return self.failed_batches - self.acked_batches

    def unacked(self):
        with self.lock:
            return set(self.first_posted) - self.acked_batches


def wait_until(predicate, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# -- the faults ------------------------------------------------------------------------

@dataclass
class Trial:
    """What a fault can reach while it runs."""
    s3: FaultProxy
    catalog: FaultProxy
    services: object  # services.Services: kill() and restart() of a service
    client: Client
    table: str
    inputs: list      # a FaultProxy in front of each host's http_server input
    restart_host: Callable  # (w) -> SIGKILLs host w and starts it again behind its proxy


# A fault's run returns (hits, wanted): how often it reached a request floe depended
# on, and how often it had to for the trial to show anything.

def wait_fired(rule, n, timeout=120):
    """Blocks until `rule` fired `n` times (or the timeout); returns how often it did."""
    wait_until(lambda: rule.fired >= n, timeout)
    return rule.fired


def for_seconds(proxy_of, kind, seconds, **params):
    """A fault on every matching request for `seconds` (longer than the storage layer's
    own retries, so the failures reach floe's calls)."""
    def run(trial):
        rule = proxy_of(trial).add_fault(kind, seconds=seconds, **params)
        time.sleep(seconds)
        return rule.fired, 1
    return run


def on_requests(proxy_of, kind, count, **params):
    """A fault on the next `count` matching requests."""
    def run(trial):
        rule = proxy_of(trial).add_fault(kind, count=count, **params)
        fired = wait_fired(rule, count)
        proxy_of(trial).clear_faults()
        return fired, count
    return run


def crash_and_restart(service, down_seconds):
    """SIGKILL a service, keep it down, start it again on the same ports and data. Hits:
    floe's requests that failed meanwhile (those the proxies could not forward, and the
    catalog's 5xx answers), plus one if no batch was acknowledged while the service was
    down (the REST fixture may instead hold a commit while its own S3 calls retry)."""
    def run(trial):
        errors = lambda: len(trial.s3.errors) + len(trial.catalog.errors)  # noqa: E731
        before, answered = errors(), len(trial.catalog.answers)
        killed = time.monotonic()
        trial.services.kill(service)
        time.sleep(down_seconds)
        stalled = not trial.client.acked_after(killed + 1)  # calls already answering
        hits = errors() - before + stalled + sum(
            1 for _, _, status in trial.catalog.answers[answered:] if status >= 500)
        trial.services.restart(service)
        return hits, 1
    return run


def conflicts(trial):
    """No injected fault: the four writers' own conflicts are. Hits: commits the
    catalog itself refused with 409 meanwhile."""
    before = trial.catalog.upstream_answers(409, "POST", commits_path(trial))
    time.sleep(15)
    return trial.catalog.upstream_answers(409, "POST", commits_path(trial)) - before, 1


def writer_crash(trial):
    """One of four writers SIGKILLed at a random moment while it has calls in flight,
    and started again (a new process on the same table and writer id) while the other
    three go on committing. Hits: its posts that failed (the producer sends them again)."""
    client = trial.client
    time.sleep(random.uniform(0, 3))
    hits = 0
    for _ in range(10):  # a kill that came just after its calls were answered is redone
        wait_until(lambda: client.in_flight[0] > 0, 30, step=0.002)
        time.sleep(random.uniform(0, 0.02))
        killed = time.monotonic()
        trial.restart_host(0)
        time.sleep(0.5)  # the killed calls' posts fail at once; a moment to count them
        hits = sum(1 for at, _, k in list(client.failures) if at >= killed and k % 4 == 0)
        if hits:
            break
    return hits, 1


def lost_acknowledgements(count):
    """The host acknowledged a batch (its rows are committed) but the producer never
    hears: the answers to `count` posts are cut (TCP RST), and the producer sends those
    batches again. With exactly-once, the second copy must be recognised."""
    def run(trial):
        rule = trial.inputs[0].add_fault("lose_answer", count=count, method="POST")
        fired = wait_fired(rule, count)
        trial.inputs[0].clear_faults()
        return fired, count
    return run


def s3(trial):
    return trial.s3


def catalog(trial):
    return trial.catalog


def commits_path(trial):
    """The REST path of the trial's table: POSTed to commit, GETted to load."""
    return rf"/v1/namespaces/{NAMESPACE}/tables/{re.escape(trial.table)}$"


def on_commits(kind, count=None, seconds=None, **params):
    """A fault on the table's next `count` commits, or on all of them for `seconds`."""
    def run(trial):
        rule = trial.catalog.add_fault(kind, count=count, seconds=seconds, method="POST",
                                       path=commits_path(trial), **params)
        if seconds:
            time.sleep(seconds)
            return rule.fired, 1
        fired = wait_fired(rule, count)
        trial.catalog.clear_faults()
        return fired, count
    return run


@dataclass
class Fault:
    name: str
    description: str
    run: Callable  # (Trial) -> (hits, hits wanted); see `for_seconds`
    writers: int = 1


FAULTS = [
    Fault("s3-latency", "every S3 request delayed 250 ms, for 15 s",
          for_seconds(s3, "latency", 15, delay=0.25)),
    Fault("s3-bandwidth", "S3 capped at 256 KiB/s both ways, for 15 s",
          for_seconds(s3, "bandwidth", 15, bytes_per_sec=256 * 1024)),
    Fault("s3-reset-upload", "every upload (PUT) reset by TCP RST mid-body, for 12 s",
          for_seconds(s3, "reset", 12, method="PUT")),
    Fault("s3-slowdown", "every S3 request answered 503 SlowDown, for 10 s",
          for_seconds(s3, "status", 10, status=503)),
    Fault("s3-500", "every S3 request answered 500, for 10 s",
          for_seconds(s3, "status", 10, status=500)),
    Fault("s3-hang", "every upload (PUT) read and never answered (held 90 s), for 30 s",
          for_seconds(s3, "hang", 30, method="PUT", hold=90)),
    Fault("s3-redirect", "3 uploads (PUT) answered 307 to SeaweedFS itself",
          lambda t: on_requests(s3, "redirect", 3, method="PUT",
                                location=t.services.info["s3_endpoint"])(t)),
    Fault("seaweedfs-crash", "SeaweedFS SIGKILLed, down 5 s, restarted",
          crash_and_restart("seaweedfs", 5)),
    Fault("catalog-latency", "every catalog request delayed 500 ms, for 15 s",
          for_seconds(catalog, "latency", 15, delay=0.5)),
    Fault("catalog-503", "every catalog request answered 503, for 10 s",
          for_seconds(catalog, "status", 10, status=503, body=iceberg_error(503),
                      content_type="application/json")),
    Fault("catalog-409-storm", "20 commits answered 409 CommitFailed (nothing applied)",
          on_commits("status", 20, status=409)),
    Fault("catalog-lost-answer", "3 commits applied by the catalog, the answer lost (RST)",
          on_commits("lose_answer", 3)),
    Fault("catalog-redirect", "3 commits answered 307 to the REST fixture itself",
          lambda t: on_commits("redirect", 3, location=t.services.info["rest_url"])(t)),
    Fault("catalog-hang", "every commit read and never answered (held 90 s), for 75 s "
          "(floe's catalog client gives up after 60 s)",
          on_commits("hang", seconds=75, hold=90)),
    Fault("rest-fixture-crash", "the REST fixture SIGKILLed, down 5 s, restarted",
          crash_and_restart("rest-fixture", 5)),
    Fault("four-writers", "four host processes commit to one table for 15 s (the "
          "catalog's own 409s)", conflicts, writers=4),
    Fault("writer-crash", "one of four writer processes SIGKILLed mid-run, restarted",
          writer_crash, writers=4),
    Fault("lost-acks", "3 acknowledgements lost on the way to the producer (rows "
          "committed), which sends those batches again", lost_acknowledgements(3)),
]
FAULTS_BY_NAME = {f.name: f for f in FAULTS}


# -- one trial -------------------------------------------------------------------------

def read_back(services, table):
    """(rows by seq, DuckDB's (count, distinct)) read directly from the services."""
    t = load_table(services, "rest", table, None)
    seqs = t.scan(selected_fields=("seq",)).to_arrow()["seq"].to_pylist()
    con = duckdb_connect({"key": services["access_key"], "secret": services["secret_key"],
                          "endpoint": services["s3_endpoint"], "region": services["region"]})
    duck = con.execute(f"SELECT count(*), count(DISTINCT seq) FROM "
                       f"iceberg_scan('{t.metadata_location}')").fetchone()
    counts = {}
    for s in seqs:
        counts[s] = counts.get(s, 0) + 1
    return counts, tuple(duck)


def error_lines(log):
    return sum(1 for line in log.splitlines() if "level=error" in line or '"level":"error"' in line)


def stop_host(host):
    """SIGTERM, so calls in flight finish (their uploads are no fault's orphans); SIGKILL
    if it has not stopped after 60 s."""
    if host.proc.poll() is None:
        host.proc.send_signal(signal.SIGTERM)
        try:
            host.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            host.kill()


def run_trial(svc, workdir, fault, exactly_once, trial_id):
    """One trial of `fault` (svc: a started services.Services); its outcome as a dict."""
    services = svc.info
    table = f"f{trial_id}_{fault.name.replace('-', '_')}_{'eo' if exactly_once else 'alo'}"
    s3_host, s3_port = services["s3_endpoint"].rsplit("//", 1)[1].split(":")
    rest_host, rest_port = services["rest_url"].rsplit("//", 1)[1].split(":")
    hosts, client = [], None
    outcome = {"fault": fault.name, "mode": "exactly-once" if exactly_once else "at-least-once",
               "table": table}
    with contextlib.ExitStack() as stack:
        s3p = stack.enter_context(FaultProxy(s3_host, int(s3_port), "s3"))
        catp = stack.enter_context(FaultProxy(rest_host, int(rest_port), "catalog"))
        inputs = []
        try:
            outputs = [output_block(services, s3p.endpoint, catp.endpoint, table,
                                    f"{table}-w{w}", exactly_once) for w in range(fault.writers)]
            serving = []  # the host serving writer w now; `hosts` holds every one started
            for w, output in enumerate(outputs):
                host, port = start_host(workdir, f"{table}-w{w}", output)
                hosts.append(host)
                serving.append(host)
                inputs.append(stack.enter_context(FaultProxy("127.0.0.1", port, f"input{w}")))

            def restart_host(w):
                serving[w].kill()
                host, port = start_host(workdir, f"{table}-w{w}-again{len(hosts)}", outputs[w])
                hosts.append(host)
                serving[w] = host
                inputs[w].set_upstream("127.0.0.1", port)
            client = Client([p.port for p in inputs])
            client.start()
            if not wait_until(lambda: len(client.acks) >= WARMUP_ACKS, 120):
                raise RuntimeError("no acknowledgement before the fault")
            started = time.monotonic()
            hits, wanted = fault.run(Trial(s3p, catp, svc, client, table, inputs, restart_host))
            ended = time.monotonic()
            for p in [s3p, catp, *inputs]:
                p.clear_faults()
            recovered = wait_until(
                lambda: len(client.acked_after(ended)) >= AFTER_ACKS and not client.unacked_failed(),
                TRIAL_DEADLINE - (ended - started))
            exited = [h.name for h in hosts if h.proc.poll() is not None
                      and h.proc.returncode != -signal.SIGKILL]
            client.finish()
            recovery = client.recovery_after(ended)
            gaps = [b - a for (a, _), (b, _) in zip(client.acks, client.acks[1:])]
            outcome.update({
                "fault_hits": hits, "fault_hits_wanted": wanted,
                "fault_s": round(ended - started, 1),
                "recovered": recovered,
                "recovery_s": round(recovery, 2) if recovery is not None else None,
                "longest_gap_s": round(max(gaps), 2) if gaps else None,
                "failed_posts": len(client.failures),
                "failed_statuses": sorted({str(s) for _, s, _ in client.failures}),
                "batches_acked": len(client.acked_batches),
                "unacked": len(client.unacked()),
                "host_exited": exited,
                "proxy": {"s3": s3p.stats(), "catalog": catp.stats()},
            })
        finally:
            if client:
                client.finish(retry_for=0)
            for h in hosts:
                stop_host(h)
    logs = [h.output() for h in hosts]
    outcome["host_error_lines"] = sum(error_lines(log) for log in logs)
    acked = {s for k in client.acked_batches for s in client.seqs(k)}
    retried = {s for k in client.failed_batches for s in client.seqs(k)}
    counts, (duck_rows, duck_distinct) = read_back(services, table)
    duplicated = {s: c - 1 for s, c in counts.items() if c > 1}
    outcome.update({
        "rows_acked": len(acked),
        "lost": sum(1 for s in acked if s not in counts),
        "duplicated": sum(duplicated.values()),
        # Copies of rows whose post never failed: no producer sent them twice.
        "duplicated_unsent": sum(c for s, c in duplicated.items() if s not in retried),
        "rows": sum(counts.values()),
        "readers_disagree": (duck_rows, duck_distinct) != (sum(counts.values()), len(counts)),
        "orphan_files": orphan_files(services, "rest", table, None),
        "log_tail": "" if outcome["recovered"] else "\n".join(log[-1500:] for log in logs),
    })
    return outcome


def check(outcome):
    """Problems with one trial ([] when it passed)."""
    if "error" in outcome:
        return [outcome["error"]]
    problems = []
    if outcome["fault_hits"] < outcome["fault_hits_wanted"]:
        problems.append(f"the fault hit {outcome['fault_hits']} requests, "
                        f"not {outcome['fault_hits_wanted']}")
    if not outcome["recovered"]:
        problems.append(f"no recovery within {TRIAL_DEADLINE} s:\n" + outcome["log_tail"])
    if outcome["unacked"]:
        problems.append(f"{outcome['unacked']} batches never acknowledged")
    if outcome["lost"]:
        problems.append(f"{outcome['lost']} acknowledged rows lost")
    if outcome["mode"] == "exactly-once" and outcome["duplicated"]:
        problems.append(f"{outcome['duplicated']} rows duplicated")
    if outcome["duplicated_unsent"]:
        problems.append(f"{outcome['duplicated_unsent']} rows duplicated that were sent once")
    if outcome["readers_disagree"]:
        problems.append("DuckDB and pyiceberg disagree")
    if outcome["host_exited"]:
        problems.append(f"hosts exited by themselves: {outcome['host_exited']}")
    return problems


# -- the matrix ------------------------------------------------------------------------

def summarize(outcomes):
    lines = ["| fault | mode | trials | fault hits | rows acked | rows lost | rows duplicated "
             "| orphan data files | failed posts | recovery s (median) "
             "| longest ack gap s (max) | trials failed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def median(values):
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else "–"

    keys = sorted({(o["fault"], o["mode"]) for o in outcomes},
                  key=lambda k: ([f.name for f in FAULTS].index(k[0]), k[1]))
    for name, mode in keys:
        group = [o for o in outcomes if (o["fault"], o["mode"]) == (name, mode)]
        ran = [o for o in group if "error" not in o]
        gaps = [o["longest_gap_s"] for o in ran if o["longest_gap_s"] is not None]
        lines.append(
            f"| {name} | {mode} | {len(group)} | {sum(o['fault_hits'] for o in ran)} "
            f"| {sum(o['rows_acked'] for o in ran)} | {sum(o['lost'] for o in ran)} "
            f"| {sum(o['duplicated'] for o in ran)} | {sum(o['orphan_files'] for o in ran)} "
            f"| {sum(o['failed_posts'] for o in ran)} "
            f"| {median(o['recovery_s'] for o in ran)} | {max(gaps) if gaps else '–'} "
            f"| {sum(1 for o in group if check(o))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2, help="trials per fault and mode")
    ap.add_argument("--faults", default=",".join(f.name for f in FAULTS))
    ap.add_argument("--modes", default="exactly-once,at-least-once")
    ap.add_argument("--out", default=os.path.join(ROOT, "reliability", "fault-matrix.md"))
    args = ap.parse_args()
    from services import Services
    outcomes = []
    started = time.time()
    with Services() as svc, tempfile.TemporaryDirectory(prefix="fault-matrix-") as workdir:
        for name in args.faults.split(","):
            for mode in args.modes.split(","):
                for t in range(args.trials):
                    try:
                        o = run_trial(svc, workdir, FAULTS_BY_NAME[name],
                                      mode == "exactly-once", f"{len(outcomes)}")
                    except Exception:
                        o = {"fault": name, "mode": mode, "error": traceback.format_exc()}
                    outcomes.append(o)
                    problems = check(o)
                    print(f"{name:20} {mode:13} #{t} hits {o.get('fault_hits', '-')} "
                          f"acked {o.get('rows_acked', '-')} lost {o.get('lost', '-')} "
                          f"dup {o.get('duplicated', '-')} orphans {o.get('orphan_files', '-')} "
                          f"recovery {o.get('recovery_s', '-')} s failed posts "
                          f"{o.get('failed_posts', '-')} "
                          + ("ok" if not problems else "FAILED: " + "; ".join(problems)),
                          flush=True)
    table = summarize(outcomes)
    described = "\n".join(f"- `{f.name}`: {f.description}" for f in FAULTS
                          if f.name in args.faults.split(","))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"# Fault matrix\n\n`python3 e2e/fault_matrix.py --trials {args.trials}` on "
                f"{time.strftime('%Y-%m-%d')}, {len(outcomes)} trials in "
                f"{time.time() - started:.0f} s. Per trial: 100-record batches from "
                f"{CLIENTS} client threads into `floe run` (`max_in_flight` 4) until "
                f"{WARMUP_ACKS} were acknowledged, then the fault, then until every batch "
                f"that failed and {AFTER_ACKS} more were acknowledged. A failed post is "
                "retried (same records, same host). Rows lost: acknowledged, absent from "
                "the table. Rows duplicated: extra copies (allowed at-least-once, for "
                "batches whose post failed after their commit). Failed posts: answers other "
                "than 200 the clients got. Recovery: from the fault's end until every batch "
                "posted before it was acknowledged.\n\nFaults:\n" + described + "\n\n" + table + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(outcomes, f)
    print(table)
    sys.exit(1 if any(check(o) for o in outcomes) else 0)


if __name__ == "__main__":
    main()
