"""Apache Iceberg's Kafka Connect sink (1.10.1) in a Kafka Connect 4.1.1 standalone worker,
every jar from Maven Central (pom.xml beside this file, resolved once into
.e2e/kafka-connect), on 127.0.0.1: the peer of bench-configs/kafka_vs_connect.py.

What running it taught (see the pom's comments too): the sink needs iceberg-parquet, three
hadoop jars (it builds a Hadoop Configuration at start, even with REST + S3FileIO), and the
AWS kms and sts modules (S3FileIO loads them even with static keys); the worker's
`offset.flush.interval.ms` must be short, since an idle task reads its control topic only
when its poll times out; one control topic (1 partition) per connector.
"""
import json
import os
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
STATE = os.path.join(ROOT, ".e2e", "kafka-connect")
PLUGIN_ROOT = os.path.join(STATE, "plugins")
PLUGIN_DIR = os.path.join(PLUGIN_ROOT, "iceberg-sink")
WORKER_LIB = os.path.join(STATE, "worker-lib")
RUNS = os.path.join(STATE, "runs")

S3_KEY, S3_SECRET, S3_REGION = "floe-test-key", "floe-test-secret", "us-east-1"

LOG4J2 = """\
# log4j2 properties format (YAML would need jackson-dataformat-yaml on the classpath)
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:connect.log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.iceberg.name = org.apache.iceberg
logger.iceberg.level = INFO
logger.cli.name = org.apache.kafka.connect.cli
logger.cli.level = INFO
logger.wst.name = org.apache.kafka.connect.runtime.WorkerSinkTask
logger.wst.level = INFO
"""


def _die_with_parent():
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dir_mb(path):
    total = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".jar"))
    return total / 1e6


def ensure_jars(force=False):
    """Resolves the plugin directory and the worker classpath with mvn; returns
    {"plugin_mb", "worker_mb", "seconds"} (seconds 0 when already there)."""
    started = time.monotonic()
    for profile, out in (("plugin", PLUGIN_DIR), ("worker", WORKER_LIB)):
        done = os.path.join(out, ".complete")
        if os.path.exists(done) and not force:
            continue
        subprocess.run(["rm", "-rf", out], check=True)
        subprocess.check_call(["mvn", "-q", "-f", os.path.join(HERE, "pom.xml"), f"-P{profile}",
                               "dependency:copy-dependencies", "-DincludeScope=runtime",
                               f"-DoutputDirectory={out}"])
        open(done, "w").close()
    return {"plugin_mb": round(_dir_mb(PLUGIN_DIR), 1), "worker_mb": round(_dir_mb(WORKER_LIB), 1),
            "seconds": round(time.monotonic() - started, 1)}


def render(template_name, values, out_path):
    with open(os.path.join(HERE, template_name)) as f:
        text = string.Template(f.read()).substitute(values)
    with open(out_path, "w") as f:
        f.write(text)
    return out_path


class IcebergConnect:
    """One standalone worker running one Iceberg sink connector."""

    def __init__(self, bootstrap, rest_url, s3_endpoint, topic, table, *, name="iceberg-sink",
                 commit_interval_ms=10000, commit_timeout_ms=30000, tasks_max=1,
                 control_topic=None, max_poll_records=500, heap="-Xmx1g", workdir=None,
                 access_key=S3_KEY, secret_key=S3_SECRET, region=S3_REGION):
        os.makedirs(RUNS, exist_ok=True)
        self.workdir = workdir or tempfile.mkdtemp(prefix="connect-", dir=RUNS)
        self.rest_port = free_port()
        self.heap = heap
        self.name = name
        self.values = dict(
            bootstrap=bootstrap, rest_port=self.rest_port, workdir=self.workdir,
            plugin_path=PLUGIN_ROOT, max_poll_records=max_poll_records,
            name=name, tasks_max=tasks_max, topic=topic, table=table, catalog_name="iceberg",
            rest_url=rest_url, s3_endpoint=s3_endpoint, access_key=access_key,
            secret_key=secret_key, region=region,
            control_topic=control_topic or f"control-{name}",
            control_group_prefix=f"cg-control-{name}-",
            commit_interval_ms=commit_interval_ms, commit_timeout_ms=commit_timeout_ms)
        self.worker_props = render("worker.properties", self.values,
                                   os.path.join(self.workdir, "worker.properties"))
        self.sink_props = render("iceberg-sink.properties", self.values,
                                 os.path.join(self.workdir, "iceberg-sink.properties"))
        self.log4j = os.path.join(self.workdir, "log4j2.properties")
        with open(self.log4j, "w") as f:
            f.write(LOG4J2)
        self.log = os.path.join(self.workdir, "connect.log")
        self.stdout = os.path.join(self.workdir, "connect.stdout")
        self.proc = None

    @property
    def control_topic(self):
        return self.values["control_topic"]

    @property
    def consumer_group(self):
        return f"connect-{self.name}"

    def command(self):
        return ["java", "-Xms256m", self.heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log4j}",
                f"-Dconnect.log.file={self.log}",
                "-cp", os.path.join(WORKER_LIB, "*"),
                "org.apache.kafka.connect.cli.ConnectStandalone", self.worker_props, self.sink_props]

    def start(self):
        """Starts the worker (a new process group) and returns its PID."""
        self.proc = subprocess.Popen(self.command(), stdout=open(self.stdout, "a"),
                                     stderr=subprocess.STDOUT, cwd=self.workdir,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        return self.proc.pid

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def rest(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def wait_running(self, timeout=120):
        """Until the REST API reports the connector and its tasks RUNNING; seconds taken."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"connect exited {self.proc.returncode}; log:\n{self.tail()}")
            try:
                status = self.rest(f"/connectors/{self.name}/status")
                tasks = status.get("tasks", [])
                if any(t["state"] == "FAILED" for t in tasks):
                    raise RuntimeError(f"task failed: {tasks}")
                if status["connector"]["state"] == "RUNNING" and tasks and all(
                        t["state"] == "RUNNING" for t in tasks):
                    return time.monotonic() - started
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"connector not RUNNING after {timeout}s; log:\n{self.tail()}")

    def task_states(self):
        try:
            return [t["state"] for t in self.rest(f"/connectors/{self.name}/status")["tasks"]]
        except Exception:
            return None

    def cpu_seconds(self):
        """utime+stime of the JVM from /proc/<pid>/stat (0 once it has exited)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, AttributeError):
            return 0.0

    def rss_mb(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return 0.0

    def stop(self, timeout=30):
        """SIGTERM (a clean shutdown), then SIGKILL after `timeout` s."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass

    def kill(self):
        """SIGKILL, as a crash."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def tail(self, n=4000):
        out = []
        for p in (self.log, self.stdout):
            if os.path.exists(p):
                out.append(open(p, errors="replace").read()[-n:])
        return "\n---\n".join(out)


class ConnectSink:
    """The benchmark's view of Kafka Connect: start(topic, group, table) runs one worker
    with one Iceberg sink connector (Connect names the consumer group after the connector:
    connect-<name>), kill() crashes it, stop() stops it; the same connector name restarts
    over the same group and control topic."""

    name = "kafka-connect"

    def __init__(self, services, broker, workdir, namespace, commit_interval_ms=10_000):
        ensure_jars()
        self.services, self.broker, self.workdir = services, broker, workdir
        self.namespace, self.commit_interval_ms = namespace, commit_interval_ms
        self.connect = None
        self.proc = None

    def start(self, topic, group, table):
        info = self.services.info
        name = group
        if self.connect is None or self.connect.name != name:
            self.connect = IcebergConnect(
                self.broker.bootstrap, info["rest_url"], info["s3_endpoint"], topic,
                f"{self.namespace}.{table}", name=name, commit_interval_ms=self.commit_interval_ms,
                access_key=info["access_key"], secret_key=info["secret_key"], region=info["region"],
                workdir=tempfile.mkdtemp(prefix=f"connect-{name}-", dir=self.workdir))
            self.broker.create_topic(self.connect.control_topic, 1)
        pid = self.connect.start()
        self.proc = self.connect.proc
        return pid

    def kill(self):
        self.connect.kill()

    def stop(self):
        self.connect.stop()
