"""Apache Iceberg's own Java reader as a long-lived process: e2e/java-reader's TableReader
(RESTCatalog + S3FileIO + IcebergGenerics, which applies position and equality deletes),
the reference for delete-file semantics. tests/support/read_table.py's `java-rest` reader
forwards its requests to one of these.

Installed on first use: the classpath comes from Maven Central (e2e/java-reader/pom.xml,
`mvn dependency:copy-dependencies` into .e2e/java-reader/lib, about 65 MB, once per pom
version), and TableReader.java is compiled with javac into .e2e/java-reader/classes
(again whenever the source changes). After that nothing needs Maven or the network.
Processes installing at once (parallel test binaries) take turns on a lock file.
"""
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STATE = os.path.join(ROOT, ".e2e", "java-reader")
POM = os.path.join(HERE, "java-reader", "pom.xml")
SOURCE = os.path.join(HERE, "java-reader", "src", "main", "java", "dev", "floe", "e2e", "TableReader.java")
MAIN = "dev.floe.e2e.TableReader"


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _run(what: str, args: list):
    """Runs an installer step with its output on stderr (Maven prints colour codes on
    stdout even with -q, and stdout may be a JSON protocol); fails naming the step."""
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        raise RuntimeError(f"java-rest reader: {what} needs `{args[0]}` on PATH "
                           "(Maven and a JDK 17)") from None
    if proc.returncode != 0:
        raise RuntimeError(f"java-rest reader: {what} failed (exit {proc.returncode}): "
                           f"{' '.join(args)}\n{proc.stdout[-5000:]}")
    if re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout).strip():
        sys.stderr.write(proc.stdout)


def install() -> str:
    """The classpath (lib/* and the compiled classes), installing what is missing."""
    os.makedirs(STATE, exist_ok=True)
    lib = os.path.join(STATE, "lib")
    classes = os.path.join(STATE, "classes")
    with open(os.path.join(STATE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = os.path.join(lib, ".complete")
        pom = _digest(POM)
        if not os.path.exists(stamp) or open(stamp).read() != pom:
            shutil.rmtree(lib, ignore_errors=True)
            os.makedirs(lib)
            _run("resolving the classpath with Maven (needs Maven Central once)",
                 ["mvn", "-q", "-B", "-f", POM, "dependency:copy-dependencies",
                  f"-DoutputDirectory={lib}"])
            with open(stamp, "w") as f:
                f.write(pom)
            shutil.rmtree(classes, ignore_errors=True)
        cls_stamp = os.path.join(classes, ".source")
        source = _digest(SOURCE)
        if not os.path.exists(cls_stamp) or open(cls_stamp).read() != source:
            shutil.rmtree(classes, ignore_errors=True)
            os.makedirs(classes)
            _run("compiling TableReader.java",
                 ["javac", "--release", "17", "-cp", os.path.join(lib, "*"), "-d", classes, SOURCE])
            with open(cls_stamp, "w") as f:
                f.write(source)
    return os.pathsep.join([classes, os.path.join(lib, "*")])


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class JavaReader:
    """One TableReader process: `read(args)` sends one request and returns its rows, or
    raises with the Java stack trace. Started on the first read; started again after it
    broke off. Its stderr (logs) is this process's stderr."""

    def __init__(self):
        self.proc = None

    def _start(self):
        classpath = install()
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Djava.awt.headless=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
             # Hadoop's one warning per JVM that it runs without its native library.
             "-Dorg.slf4j.simpleLogger.log.org.apache.hadoop.util.NativeCodeLoader=error",
             "-Daws.region=us-east-1", "-cp", classpath, MAIN],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, encoding="utf-8", preexec_fn=_die_with_parent)

    def read(self, args: dict) -> list:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self.proc.wait()
            self.proc = None
            raise RuntimeError(f"java-rest reader: TableReader exited (code {code}); "
                               "see its stderr above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError("java-rest reader (Iceberg Java) failed:\n" + reply["error"])
        return reply["rows"]

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
